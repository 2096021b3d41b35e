//! Restart recovery of the conventional stack after a crash at random points of a TPC-C
//! stream (issue #18): with every change logged — heap records by record id, primary- and
//! secondary-index entries as records of their own, and B+tree splits and page allocations
//! as redo-only page images — ARIES restart (Mohan et al., TODS 1992,
//! Section 6) rebuilds exactly the acknowledged transactions: the recovered database's digest
//! equals the lean kernel's after the same acknowledged prefix, and TPC-C's consistency
//! conditions (clause 3.3.2) hold. The crash points are drawn from a seed; the log device
//! loses everything not synced (and tears the last write), as a power loss does. One run
//! also bounds the buffer pool, so recovery's redo and undo evict and read pages back.

use std::sync::Arc;

use engine::check::check;
use engine::conventional::{Config, ConventionalDb, Medium, MemoryMedium, Step, BUFFER_POOL_FRAMES_PER_WORKER_MIN};
use engine::digest::digest;
use engine::loader::{load_database_scaled, Scale, LOAD_TIMESTAMP};
use engine::procedures::{execute, TxnInput};
use engine::rng::Rng;
use engine::LeanDb;
use workload::gen::{GenConfig, Generator, Profile};

const LOAD_SEED: u64 = 0x0C2A_5400;
const TXNS: u64 = 1_500;
/// Crash points drawn per run.
const CRASHES: u64 = 6;

fn stream(seed: u64) -> Vec<TxnInput> {
    let cfg = GenConfig::for_profile(Profile::Standard, 1..=1).with_scale(Scale::tiny());
    let mut gen = Generator::new(cfg, seed, LOAD_SEED).unwrap();
    (0..TXNS).map(|i| gen.next(LOAD_TIMESTAMP + 1 + i as i64)).collect()
}

fn config(pool_frames: Option<u64>) -> Config {
    Config {
        log_prealloc_bytes: 1 << 20,
        buffer_pool_bytes: pool_frames.map(|f| f * engine::conventional::PAGE_BYTES_SMALL as u64),
        ..Config::for_step(Step::FULL_STACK, 1)
    }
}

/// Runs `inputs` until the first failure that is not an abort (the crash failing a commit);
/// returns how many were acknowledged (committed or rolled back, as the client was told).
fn run_until_crash(db: &Arc<ConventionalDb>, inputs: &[TxnInput]) -> usize {
    let mut s = db.session().unwrap();
    for (i, input) in inputs.iter().enumerate() {
        match execute(&mut s, i as u64 + 1, input) {
            Ok(_) => {}
            Err(e) if e.is_abort() => {}
            Err(_) => return i,
        }
    }
    inputs.len()
}

/// Returns how many transactions were acknowledged, the pages the recovery evicted, and the
/// page images (B+tree splits, page allocations) its redo installed.
fn crash_and_recover(seed: u64, syncs: u64, pool_frames: Option<u64>) -> (usize, u64, usize) {
    let inputs = stream(seed);
    let medium = MemoryMedium::new();
    let on = Medium::Memory(medium.clone());
    let db = ConventionalDb::open_on(&on, config(pool_frames)).unwrap();
    load_database_scaled(&mut db.session().unwrap(), 1..=1, LOAD_SEED, Scale::tiny(), &mut |_| {}).unwrap();
    db.checkpoint().unwrap();
    medium.crash_after_syncs(syncs);
    let acknowledged = run_until_crash(&db, &inputs);
    // Power loss (if the stream ended first: now), tearing what was being written.
    medium.crash(37);
    drop(db);
    medium.restart();

    let db = ConventionalDb::open_on(&on, config(pool_frames)).unwrap();
    let report = db.recovery_report().clone();
    let mut s = db.session().unwrap();
    let mut lean = LeanDb::new();
    load_database_scaled(&mut lean, 1..=1, LOAD_SEED, Scale::tiny(), &mut |_| {}).unwrap();
    for (i, input) in inputs[..acknowledged].iter().enumerate() {
        let _ = execute(&mut lean, i as u64 + 1, input);
    }
    let what = format!("seed {seed}, crash after {syncs} syncs, {acknowledged} acknowledged, pool {pool_frames:?}");
    assert_eq!(digest(&mut s), digest(&mut lean), "{what}: {report:?}");
    let c = check(&mut s);
    assert!(c.all_passed(), "{what}: {:?}", c.failed().collect::<Vec<_>>());
    (acknowledged, db.counters().page_evictions, report.page_images)
}

#[test]
fn a_crash_at_random_points_recovers_every_acknowledged_transaction_and_nothing_else() {
    let mut rng = Rng::new(0x5EED_0018);
    let mut images = 0;
    for run in 0..CRASHES {
        // Group commit syncs about once per committing transaction here (one session).
        let syncs = rng.below(TXNS / 2);
        let (acknowledged, _, redone_images) = crash_and_recover(run + 1, syncs, None);
        assert!(acknowledged < TXNS as usize, "run {run}: the crash came before the stream's end");
        images += redone_images;
    }
    // The runs crossed B+tree splits and page allocations, and their redo installed them.
    assert!(images > 0, "no split or page allocation was redone in {CRASHES} runs");
}

#[test]
fn recovery_under_a_bounded_buffer_pool_evicts_and_still_recovers_everything() {
    let frames = BUFFER_POOL_FRAMES_PER_WORKER_MIN;
    let (acknowledged, evicted, images) = crash_and_recover(99, 700, Some(frames));
    assert!(acknowledged < TXNS as usize && evicted > 0, "{acknowledged} acknowledged, {evicted} evicted");
    assert!(images > 0, "700 syncs of TPC-C split a leaf or allocated a page");
}
