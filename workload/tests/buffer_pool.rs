//! The conventional stack's buffer manager under eviction (issue #18): with the pool a
//! quarter of the database, the TPC-C stream runs to the lean kernel's final state (same
//! digest), every consistency condition of clause 3.3.2 holds, pages really were evicted,
//! written back and read again, and restart recovery (checkpoint load and redo, ARIES) under
//! the same bound rebuilds that state. The paper runs Shore memory-resident (Section 4.1);
//! this is the miss path it never exercised.

use std::path::PathBuf;
use std::sync::Arc;

use engine::check::check;
use engine::conventional::{Config, ConventionalDb, Step, PAGE_BYTES_SMALL};
use engine::digest::{digest, Digest};
use engine::loader::{load_database, LOAD_TIMESTAMP};
use engine::procedures::{execute, TxnInput};
use engine::{LeanDb, Storage};
use workload::gen::{GenConfig, Generator, Profile};

const LOAD_SEED: u64 = 0x00B0_FF00;
const RUN_SEED: u64 = 0x000C_10C4;
/// Transactions of the standard mix (all five types, rollbacks, remote warehouses).
const TXNS: u64 = 3_000;
const WAREHOUSES: u16 = 2;

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("glass-bufpool-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn stream() -> Vec<TxnInput> {
    let cfg = GenConfig::for_profile(Profile::Standard, 1..=WAREHOUSES);
    let mut gen = Generator::new(cfg, RUN_SEED, LOAD_SEED).unwrap();
    (0..TXNS).map(|i| gen.next(LOAD_TIMESTAMP + 1 + i as i64)).collect()
}

fn run<S: Storage>(db: &mut S, inputs: &[TxnInput]) {
    for (i, input) in inputs.iter().enumerate() {
        if let Err(e) = execute(db, i as u64 + 1, input) {
            assert!(e.is_abort(), "transaction {i}: {e}");
        }
    }
}

fn config(pool_bytes: Option<u64>) -> Config {
    Config { log_prealloc_bytes: 4 << 20, buffer_pool_bytes: pool_bytes, ..Config::for_step(Step::FULL_STACK, 1) }
}

/// Loads, checkpoints (so that recovery starts from the loaded state) and runs the stream.
fn full_stack(dir: &Dir, pool_bytes: Option<u64>, inputs: &[TxnInput]) -> (Arc<ConventionalDb>, Digest) {
    let db = ConventionalDb::open(&dir.0, config(pool_bytes)).unwrap();
    {
        let mut s = db.session().unwrap();
        load_database(&mut s, 1..=WAREHOUSES, LOAD_SEED, &mut |_| {}).unwrap();
    }
    db.checkpoint().unwrap();
    let mut s = db.session().unwrap();
    run(&mut s, inputs);
    let report = check(&mut s);
    assert!(report.all_passed(), "{:?}", report.failed().collect::<Vec<_>>());
    let d = digest(&mut s);
    drop(s);
    (db, d)
}

#[test]
fn a_pool_a_quarter_of_the_database_gives_the_lean_kernels_state_and_recovers_it() {
    let inputs = stream();
    let mut lean = LeanDb::new();
    load_database(&mut lean, 1..=WAREHOUSES, LOAD_SEED, &mut |_| {}).unwrap();
    run(&mut lean, &inputs);
    let want = digest(&mut lean);

    // Memory-resident (the paper's setting): the whole database in the pool, nothing evicted.
    let resident = Dir::new("resident");
    let (db, got) = full_stack(&resident, None, &inputs);
    assert_eq!(got, want, "memory-resident full stack");
    let pages = db.buffer_pool_frames_used().expect("the full stack has a buffer pool");
    assert_eq!(db.counters().page_evictions, 0);
    drop(db);

    // A quarter of it.
    let quarter = pages / 4 * PAGE_BYTES_SMALL as u64;
    let bounded = Dir::new("quarter");
    let (db, got) = full_stack(&bounded, Some(quarter), &inputs);
    assert_eq!(got, want, "full stack with the pool at 25% of the database ({pages} pages)");
    let c = db.counters();
    assert_eq!(db.buffer_pool_frames_used(), Some(pages / 4), "the pool stopped at its bound");
    assert!(c.page_evictions > pages, "evictions {} for {pages} pages", c.page_evictions);
    assert!(c.page_writes > 0 && c.page_reads > 0, "{c:?}");
    drop(db);

    // Restart recovery under the same bound: checkpoint load and redo evict too.
    let db = ConventionalDb::open(&bounded.0, config(Some(quarter))).unwrap();
    assert!(db.recovery_report().winners > 0);
    assert!(db.counters().page_evictions > 0);
    let mut s = db.session().unwrap();
    assert_eq!(digest(&mut s), want, "recovered under eviction");
    assert!(check(&mut s).all_passed());
}
