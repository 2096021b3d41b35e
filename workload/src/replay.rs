//! Execute or replay? The paper's Section 5.3 argues that in main memory executing a
//! transaction costs about as much as replaying its log, so a backup gains little by applying
//! redo records instead of executing the transactions itself. This experiment measures both on
//! one machine: a primary executes the generator's stream with redo capture on; a backup,
//! loaded identically, applies the primary's redo batches; the executor thread's CPU time is
//! taken around each side, and the two databases' digests are compared at the end.

use std::time::{Duration, Instant};

use engine::digest::digest;
use engine::procedures::execute;
use engine::LeanDb;
use serde::Serialize;

use crate::bench::{self, BenchConfig, BenchError, Observer, StopAfter};
use crate::gen::Generator;
use crate::metrics::thread_cpu_seconds;
use engine::loader;

/// Transactions executed between two redo batches.
const REPLAY_BATCH_TXNS: u64 = 256;

/// What the experiment measured.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub profile: String,
    pub warehouses: u16,
    pub seed: u64,
    /// Transactions executed on the primary (committed and rolled back).
    pub txns: u64,
    pub committed: u64,
    /// Primary: CPU nanoseconds per transaction to execute it (redo capture included).
    pub execute_cpu_ns_per_txn: f64,
    /// Backup: CPU nanoseconds per transaction to apply its redo records.
    pub apply_cpu_ns_per_txn: f64,
    /// apply / execute.
    pub apply_over_execute: f64,
    /// Redo bytes shipped per committed transaction (row images and record headers).
    pub redo_bytes_per_txn: f64,
    pub redo_records_per_txn: f64,
    pub digests_equal: bool,
}

/// Loads a primary and a backup, runs the stream on the primary, rolls the backup forward.
pub fn execute_vs_replay(cfg: &BenchConfig, obs: &mut dyn Observer) -> Result<ReplayReport, BenchError> {
    cfg.validate()?;
    let mut primary = LeanDb::new();
    let mut backup = LeanDb::new();
    bench::load(&mut primary, cfg.warehouses, cfg.seed, obs)?;
    bench::load(&mut backup, cfg.warehouses, cfg.seed, obs)?;
    engine::arena::set_growth_pages(cfg.growth_pages);
    engine::arena::set_prefault(true);
    primary.set_redo_capture(true);
    let mut gen = Generator::new(cfg.gen_config(), bench::run_seed(cfg.seed), cfg.seed)?;
    let (limit_txns, limit_time) = match cfg.stop {
        StopAfter::Transactions(n) => (n, Duration::MAX),
        StopAfter::Seconds(s) => (u64::MAX, Duration::from_secs_f64(s)),
    };
    obs.phase("run", cfg.stop);
    let start = Instant::now();
    let (mut txns, mut committed, mut bytes, mut records) = (0u64, 0u64, 0u64, 0u64);
    let (mut execute_s, mut apply_s) = (0.0, 0.0);
    while txns < limit_txns && start.elapsed() < limit_time {
        let n = REPLAY_BATCH_TXNS.min(limit_txns - txns);
        let c0 = thread_cpu_seconds();
        for _ in 0..n {
            txns += 1;
            let input = gen.next(loader::LOAD_TIMESTAMP + txns as i64);
            match execute(&mut primary, txns, &input) {
                Ok(_) => committed += 1,
                Err(e) if e.is_abort() => {}
                Err(e) => return Err(BenchError::Txn(e)),
            }
        }
        let batch = primary.take_redo();
        let c1 = thread_cpu_seconds();
        backup.apply_redo(&batch).map_err(|e| BenchError::Txn(e.into()))?;
        let c2 = thread_cpu_seconds();
        execute_s += c1 - c0;
        apply_s += c2 - c1;
        bytes += batch.bytes.len() as u64
            + batch.records.len() as u64 * std::mem::size_of::<engine::redo::RedoRecord>() as u64;
        records += batch.records.len() as u64;
        obs.progress(start.elapsed().as_secs_f64(), txns);
    }
    obs.finished();
    let digests_equal = digest(&mut primary) == digest(&mut backup);
    let per = |x: f64| x * 1e9 / txns.max(1) as f64;
    Ok(ReplayReport {
        profile: cfg.profile.name().to_string(),
        warehouses: cfg.warehouses,
        seed: cfg.seed,
        txns,
        committed,
        execute_cpu_ns_per_txn: per(execute_s),
        apply_cpu_ns_per_txn: per(apply_s),
        apply_over_execute: apply_s / execute_s.max(1e-12),
        redo_bytes_per_txn: bytes as f64 / committed.max(1) as f64,
        redo_records_per_txn: records as f64 / committed.max(1) as f64,
        digests_equal,
    })
}

/// The experiment's result on screen.
pub fn render(r: &ReplayReport) -> String {
    format!(
        "\nexecute or replay (profile {}, {} warehouses, seed {}, {} transactions, {} committed)\n\
         primary executes      {:>9.0} ns CPU per transaction (with redo capture)\n\
         backup replays redo   {:>9.0} ns CPU per transaction ({:.0}% of executing)\n\
         redo shipped          {:>9.0} bytes, {:.1} records per committed transaction\n\
         backup digest {} the primary's\n",
        r.profile,
        r.warehouses,
        r.seed,
        r.txns,
        r.committed,
        r.execute_cpu_ns_per_txn,
        r.apply_cpu_ns_per_txn,
        100.0 * r.apply_over_execute,
        r.redo_bytes_per_txn,
        r.redo_records_per_txn,
        if r.digests_equal { "EQUALS" } else { "DIFFERS FROM" },
    )
}
