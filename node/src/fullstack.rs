//! One partition on the conventional stack — the paper's "full Shore stack" baseline, as a
//! `full-stack` node runs it: a [`ConventionalDb`] (buffer pool, B+trees, two-phase locking,
//! latches, write-ahead log with group-commit `fsync`) in the partition's own directory, and
//! `workers` threads executing a batch's transactions concurrently.
//!
//! Owns the worker pool and the database handle. Guarantees:
//! - [`FullStack::execute`] returns one outcome per transaction, in the batch's order, after
//!   every transaction of the batch finished; a committed transaction's commit record is on
//!   disk (`fdatasync`) before its outcome is returned;
//! - a transaction that two-phase locking aborts (a wait-die victim) is re-executed with the
//!   same input and timestamp until it commits or the procedure rolls it back (at most
//!   [`RETRIES_PER_TXN_MAX`] times; past that it is reported as failed);
//! - the serialisation order is the lock manager's, not the timestamp order: the primary's
//!   state is whatever its concurrency control produced, and the backups reach it by
//!   replaying its log ([`FullStack::take_log`], [`FullStack::apply_log`]), never by
//!   executing;
//! - dropping a `FullStack` stops and joins its workers.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

use engine::conventional::{cut_log, Config, ConventionalDb, CutAt, LogCut, RecoveryReport, Session, Step};
use engine::input::{check_held, check_input};
use engine::loader::{load_database, LoadProgress};
use engine::procedures::{execute, TxnInput, TxnOutput};
use engine::TxnError;
use wire::messages::{bounded_reason, BatchTxn, TxnOutcome, WarehouseId};

use crate::error::{FullStackStep, ReplicaError, ShipmentProblem};

/// Maps an engine error met at `step` to a [`ReplicaError::FullStack`].
fn fail<E: std::fmt::Display>(step: FullStackStep) -> impl FnOnce(E) -> ReplicaError {
    move |e| ReplicaError::FullStack { step, problem: e.to_string() }
}

/// Re-executions of one transaction before it is reported as failed.
pub const RETRIES_PER_TXN_MAX: u32 = 10_000;

/// A transaction for a worker: its index in the batch, timestamp and input.
type Job = (usize, u64, TxnInput);

/// The conventional stack holding one partition.
pub struct FullStack {
    db: Arc<ConventionalDb>,
    dir: PathBuf,
    /// The executor thread's own session: loads, digests, snapshots, replica reads.
    session: Session,
    jobs: Option<mpsc::SyncSender<Job>>,
    done: mpsc::Receiver<(usize, TxnOutcome, u32)>,
    workers: Vec<JoinHandle<()>>,
    /// `/proc/thread-self` paths of the workers' `schedstat`, for CPU accounting.
    worker_schedstats: Vec<PathBuf>,
    retries: u64,
}

impl std::fmt::Debug for FullStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FullStack").field("dir", &self.dir).field("workers", &self.workers.len()).finish()
    }
}

impl FullStack {
    /// Creates the database in `dir` (emptied first: this build starts every run from the
    /// seed), loads `warehouses` from `seed` through one session outside any transaction (a
    /// bulk load, not logged), checkpoints it, and starts `workers` worker threads. A primary
    /// (`ship_log`) copies every log record appended from then on for its backups.
    pub fn load(
        dir: &Path,
        warehouses: std::ops::RangeInclusive<u16>,
        seed: u64,
        workers: usize,
        ship_log: bool,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<FullStack, ReplicaError> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(fail(FullStackStep::EmptyDir { dir: dir.to_path_buf() }))?;
        }
        // The workers' sessions, plus the executor thread's own.
        let config = Config::for_step(Step::new(0).expect("step 0 exists"), workers + 1);
        let db = ConventionalDb::open(dir, config).map_err(fail(FullStackStep::Open))?;
        let mut session = db.session().map_err(fail(FullStackStep::Session))?;
        load_database(&mut session, warehouses, seed, progress)?;
        db.checkpoint().map_err(fail(FullStackStep::LoadCheckpoint))?;
        if ship_log {
            db.set_log_shipping(true).map_err(fail(FullStackStep::ShipLog))?;
        }
        FullStack::start(db, dir, session, workers)
    }

    /// Restart recovery (the conventional system's answer to a crash): opens the database
    /// `dir` as the failed process left it — the last checkpoint and the write-ahead log —
    /// and lets ARIES analysis, redo and undo bring it to every transaction whose commit
    /// record reached the disk (every acknowledged one: [`FullStack::execute`] returns after
    /// the commit is durable) and none of the others; then starts `workers` worker threads.
    /// What recovery did is [`FullStack::recovery_report`].
    pub fn recover(dir: &Path, workers: usize) -> Result<FullStack, ReplicaError> {
        FullStack::recover_cut(dir, workers, None).map(|(f, _)| f)
    }

    /// [`FullStack::recover`] after cutting the log at `cut` ([`engine::conventional::cut_log`]):
    /// the restarted primary whose backup was promoted drops the records past the point
    /// where the promoted backup's copy of its log ended. Nothing is changed when the cut is
    /// refused.
    pub fn recover_cut(
        dir: &Path,
        workers: usize,
        cut: Option<CutAt>,
    ) -> Result<(FullStack, Option<LogCut>), ReplicaError> {
        let checkpoint = dir.join(engine::conventional::SNAPSHOT_FILE);
        if !checkpoint.exists() {
            return Err(ReplicaError::NoCheckpoint { path: checkpoint });
        }
        let cut = match cut {
            Some(at) => Some(cut_log(dir, at).map_err(fail(FullStackStep::CutLog))?),
            None => None,
        };
        let config = Config::for_step(Step::new(0).expect("step 0 exists"), workers + 1);
        // A log that recovery refuses (a damaged record followed by valid ones, a missing
        // checkpoint) fails the restart here, the directory as found: the node does not
        // serve a truncated state.
        let db = ConventionalDb::open(dir, config).map_err(fail(FullStackStep::Recovery))?;
        if let Some(t) = db.recovery_report().torn_tail {
            tracing::warn!(
                dir = %dir.display(),
                offset = t.offset,
                lsn = t.lsn,
                bytes = t.bytes,
                "restart recovery truncated a torn write-ahead log tail"
            );
        }
        let session = db.session().map_err(fail(FullStackStep::Session))?;
        Ok((FullStack::start(db, dir, session, workers)?, cut))
    }

    /// What restart recovery did when the database was opened (nothing after a fresh load).
    pub fn recovery_report(&self) -> &RecoveryReport {
        self.db.recovery_report()
    }

    /// Starts `workers` worker threads over `db`; `session` is the executor thread's own.
    fn start(db: Arc<ConventionalDb>, dir: &Path, session: Session, workers: usize) -> Result<FullStack, ReplicaError> {
        let (jobs, rx) = mpsc::sync_channel::<Job>(workers * 4);
        let rx = Arc::new(Mutex::new(rx));
        let (done_tx, done) = mpsc::channel();
        let (started_tx, started) = mpsc::channel::<Option<PathBuf>>();
        let mut handles = Vec::with_capacity(workers);
        for i in 0..workers {
            let mut s = db.session().map_err(fail(FullStackStep::WorkerSession))?;
            let rx = Arc::clone(&rx);
            let done_tx = done_tx.clone();
            let started_tx = started_tx.clone();
            let h = std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn(move || {
                    let me = std::fs::read_link("/proc/thread-self").ok();
                    let _ = started_tx.send(me.map(|me| PathBuf::from("/proc").join(me).join("schedstat")));
                    loop {
                        let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok((index, ts, input)) = job else { return };
                        let (outcome, retries) = run_one(&mut s, ts, &input);
                        if done_tx.send((index, outcome, retries)).is_err() {
                            return;
                        }
                    }
                })
                .map_err(fail(FullStackStep::WorkerThread))?;
            handles.push(h);
        }
        // Every worker registered its CPU accounting before the first batch.
        let worker_schedstats = (0..workers).filter_map(|_| started.recv().ok().flatten()).collect();
        Ok(FullStack {
            db,
            dir: dir.to_path_buf(),
            session,
            jobs: Some(jobs),
            done,
            workers: handles,
            worker_schedstats,
            retries: 0,
        })
    }

    /// Executes a batch on the workers; outcomes in the batch's order.
    pub fn execute(&mut self, txns: &[BatchTxn]) -> Vec<TxnOutcome> {
        let mut outcomes: Vec<Option<TxnOutcome>> = vec![None; txns.len()];
        // Inputs outside TPC-C's domains, or naming a warehouse this partition does not hold,
        // fail without running; checked before any worker starts (the executor's session
        // looks WAREHOUSE up, each warehouse once).
        let mut held: Vec<(WarehouseId, bool)> = Vec::new();
        for (t, outcome) in txns.iter().zip(&mut outcomes) {
            let session = &mut self.session;
            let mut holds = |w| match held.iter().find(|(h, _)| *h == w) {
                Some(&(_, is)) => is,
                None => {
                    let is = crate::replica::holds_warehouse(session, w);
                    held.push((w, is));
                    is
                }
            };
            if let Err(problem) = check_input(&t.input).and_then(|()| check_held(&t.input, t.part.kind(), &mut holds)) {
                *outcome = Some(TxnOutcome::Failed { reason: bounded_reason(problem.to_string()) });
            }
        }
        let jobs = self.jobs.as_ref().expect("workers run until drop");
        let mut sent = 0usize;
        let mut received = 0usize;
        // Keep the bounded job queue fed while collecting outcomes.
        while received < txns.len() {
            while sent < txns.len() {
                let t = &txns[sent];
                if outcomes[sent].is_some() {
                    sent += 1;
                    received += 1;
                    continue;
                }
                match jobs.try_send((sent, t.ts.0, t.input)) {
                    Ok(()) => sent += 1,
                    Err(mpsc::TrySendError::Full(_)) => break,
                    Err(mpsc::TrySendError::Disconnected(_)) => unreachable!("workers run until drop"),
                }
            }
            if received == txns.len() {
                break;
            }
            let (index, outcome, retries) = self.done.recv().expect("workers run until drop");
            self.retries += u64::from(retries);
            outcomes[index] = Some(outcome);
            received += 1;
        }
        outcomes.into_iter().map(|o| o.expect("every transaction answered")).collect()
    }

    /// The log records appended since the last call, whole and durable (the primary,
    /// between batches): a backup never applies what this node's log could lose in a crash,
    /// so a restarted primary can always cut its log where its promoted backup's copy ended.
    pub fn take_log(&self) -> Result<Vec<u8>, ReplicaError> {
        self.db.take_shipped_log_durable().map_err(fail(FullStackStep::FlushLog))
    }

    /// The base a new backup starts from (between batches): this node's log from its last
    /// checkpoint on, with shipping switched on from its end
    /// ([`ConventionalDb::log_base_for_backup`]).
    pub fn log_base(&self) -> Result<Vec<u8>, ReplicaError> {
        self.db.log_base_for_backup().map_err(fail(FullStackStep::LogBase))
    }

    /// A backup: the LSN where the records it applied from its primary's log end (`None`:
    /// none applied since it opened).
    pub fn applied_log_end(&self) -> Option<u64> {
        self.db.shipped_log_position()
    }

    /// Replays a primary's log records (a backup): redo only, no procedure logic.
    pub fn apply_log(&self, records: &[u8]) -> Result<(), ReplicaError> {
        self.db
            .apply_shipped_log(records)
            .map(|_| ())
            .map_err(|e| ReplicaError::BadShipment { problem: ShipmentProblem::Wal(e.to_string()) })
    }

    /// A transaction-consistent checkpoint (a promoted backup's first act: its own log then
    /// starts from the state it replayed).
    pub fn checkpoint(&self) -> Result<(), ReplicaError> {
        self.db.checkpoint().map_err(fail(FullStackStep::Checkpoint))
    }

    /// The executor thread's session (digests, snapshots, reads).
    pub fn session(&mut self) -> &mut Session {
        &mut self.session
    }

    /// Bytes written to the log device and `fsync` calls so far.
    pub fn log_counters(&self) -> (u64, u64) {
        let c = self.db.counters();
        (c.log_bytes_written, c.fsyncs)
    }

    /// Re-executions after concurrency-control aborts so far.
    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// The workers' `schedstat` files.
    pub fn worker_schedstats(&self) -> Vec<PathBuf> {
        self.worker_schedstats.clone()
    }
}

impl Drop for FullStack {
    fn drop(&mut self) {
        self.jobs = None;
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

/// Runs one transaction to its outcome on a worker's session, re-executing wait-die victims.
fn run_one(s: &mut Session, ts: u64, input: &TxnInput) -> (TxnOutcome, u32) {
    let mut retries = 0u32;
    loop {
        let r: Result<TxnOutput, TxnError> = execute(s, ts, input);
        match r {
            Err(e) if e.is_conflict() && retries < RETRIES_PER_TXN_MAX => retries += 1,
            Err(e) if e.is_conflict() => {
                let reason = format!("gave up after {retries} concurrency-control aborts");
                return (TxnOutcome::Failed { reason }, retries);
            }
            other => return (TxnOutcome::from_result(other), retries),
        }
    }
}
