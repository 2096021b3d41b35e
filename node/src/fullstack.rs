//! One partition on the conventional stack — the paper's "full Shore stack" baseline, as a
//! `full-stack` node runs it: a [`ConventionalDb`] (buffer pool, B+trees, two-phase locking,
//! latches, write-ahead log with group-commit `fsync`) on the partition's own medium — a
//! directory (`wal.log`, `checkpoint.db`) or, for the simulator, an in-memory
//! [`MemoryMedium`] it can crash (docs/design.md §4, §10) — and `workers` threads executing a
//! batch's transactions concurrently, or none (`workers == 0`: inline, on the executor's own
//! session).
//!
//! Owns the worker pool and the database handle. Guarantees:
//! - [`FullStack::execute`] returns one outcome per transaction, in the batch's order, after
//!   every transaction of the batch finished; a committed transaction's commit record is on
//!   the medium (`fdatasync`) before its outcome is returned;
//! - a transaction that two-phase locking aborts (a wait-die victim) is re-executed with the
//!   same input and timestamp until it commits or the procedure rolls it back (at most
//!   [`RETRIES_PER_TXN_MAX`] times; past that it is reported as failed);
//! - with worker threads, the serialisation order is the lock manager's, not the timestamp
//!   order: the primary's state is whatever its concurrency control produced, and the
//!   backups reach it by replaying its log ([`FullStack::take_log`], [`FullStack::apply_log`]),
//!   never by executing;
//! - inline (`workers == 0`), the transactions run one after the other in the batch's order
//!   on one session, with locking, latching and logging still on (one session never
//!   conflicts with itself): the same load and batches give the same outcomes, log and state
//!   every run (docs/design.md §5), which the seeded simulator relies on;
//! - restart recovery ([`FullStack::recover_on`]) keeps exactly the transactions whose commit
//!   record reached the medium (docs/design.md §10, full-stack);
//! - dropping a `FullStack` stops and joins its workers.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

use engine::conventional::base::ImageRead;
use engine::conventional::log::GenerationRead;
use engine::conventional::{
    cut_log_on, follows_generation_on, install_image_on, Config, ConventionalDb, CutAt, LogCut, Medium, MemoryMedium,
    RecoveryReport, Session, Step,
};
use engine::input::{check_held, check_input};
use engine::loader::{load_database_scaled, LoadProgress, Scale};
use engine::procedures::{execute, TxnInput, TxnOutput};
use engine::TxnError;
use wire::messages::{bounded_reason, BatchTxn, TxnOutcome, WarehouseId};

use crate::error::{FullStackStep, ReplicaError, ShipmentProblem};

/// How a full-stack node's database restarts ([`FullStack::restart_on`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restart {
    /// Restart recovery from its own write-ahead log as the medium holds it.
    OwnLog,
    /// A rejoining backup: its own log cut at `cut`, which must leave the state at position
    /// `start`, where the primary's log base begins.
    FollowBase { cut: CutAt, start: u64 },
    /// A rejoining backup whose own log cannot follow: the primary's checkpoint image.
    Image(std::sync::Arc<Vec<u8>>),
}

/// Maps an engine error met at `step` to a [`ReplicaError::FullStack`].
fn fail<E: std::fmt::Display>(step: FullStackStep) -> impl FnOnce(E) -> ReplicaError {
    move |e| ReplicaError::FullStack { step, problem: e.to_string() }
}

/// Re-executions of one transaction before it is reported as failed.
pub const RETRIES_PER_TXN_MAX: u32 = 10_000;

/// A transaction for a worker: its index in the batch, timestamp and input.
type Job = (usize, u64, TxnInput);

/// The worker threads and their queues; dropping it stops and joins the workers.
struct Pool {
    jobs: Option<mpsc::SyncSender<Job>>,
    done: mpsc::Receiver<(usize, TxnOutcome, u32)>,
    workers: Vec<JoinHandle<()>>,
    /// `/proc/thread-self` paths of the workers' `schedstat`, for CPU accounting.
    schedstats: Vec<PathBuf>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.jobs = None;
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

/// The conventional stack holding one partition.
pub struct FullStack {
    db: Arc<ConventionalDb>,
    medium: Medium,
    /// The executor thread's own session: loads, digests, snapshots, replica reads, and the
    /// transactions themselves when there are no worker threads.
    session: Session,
    /// `None`: no worker threads (transactions run inline on `session`).
    pool: Option<Pool>,
    retries: u64,
}

impl std::fmt::Debug for FullStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let workers = self.pool.as_ref().map_or(0, |p| p.workers.len());
        f.debug_struct("FullStack").field("medium", &self.medium).field("workers", &workers).finish()
    }
}

/// The configuration of a full stack with `workers` worker threads: step 0, one session for
/// each worker plus the executor thread's own (so 0 workers still has its one session).
fn config(workers: usize, medium: &Medium) -> Config {
    let mut c = Config::for_step(Step::new(0).expect("step 0 exists"), workers + 1);
    if let Medium::Memory(_) = medium {
        // A log in memory gains nothing from preallocated blocks (on a disk they halve the
        // sync's cost), and the simulator opens thousands.
        c.log_prealloc_bytes = MEMORY_LOG_PREALLOC_BYTES;
    }
    c
}

/// The log preallocation on an in-memory medium.
const MEMORY_LOG_PREALLOC_BYTES: u64 = 256 << 10;

impl FullStack {
    /// Creates the database in `dir` (emptied first: this build starts every run from the
    /// seed): [`FullStack::load_on`] with [`Medium::Dir`].
    pub fn load(
        dir: &Path,
        warehouses: std::ops::RangeInclusive<u16>,
        seed: u64,
        workers: usize,
        ship_log: bool,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<FullStack, ReplicaError> {
        FullStack::load_on(Medium::Dir(dir.to_path_buf()), warehouses, seed, workers, ship_log, progress)
    }

    /// Creates the database on `medium` (emptied first: a directory is removed, an in-memory
    /// medium erased; this build starts every run from the seed), loads `warehouses` from
    /// `seed` through one session outside any transaction (a bulk load, not logged),
    /// checkpoints it, and starts `workers` worker threads (0: transactions run inline). A
    /// primary (`ship_log`) copies every log record appended from then on for its backups.
    pub fn load_on(
        medium: Medium,
        warehouses: std::ops::RangeInclusive<u16>,
        seed: u64,
        workers: usize,
        ship_log: bool,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<FullStack, ReplicaError> {
        FullStack::load_scaled_on(medium, warehouses, seed, Scale::TPCC, workers, ship_log, progress)
    }

    /// [`FullStack::load_on`] with a population of `scale` (simulation and tests only unless
    /// [`Scale::TPCC`]).
    pub fn load_scaled_on(
        medium: Medium,
        warehouses: std::ops::RangeInclusive<u16>,
        seed: u64,
        scale: Scale,
        workers: usize,
        ship_log: bool,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<FullStack, ReplicaError> {
        let dir = match &medium {
            Medium::Dir(dir) => dir.clone(),
            Medium::Memory(_) => PathBuf::from(medium.to_string()),
        };
        let empty = FullStackStep::EmptyDir { dir };
        medium.erase().map_err(fail(empty))?;
        let db = ConventionalDb::open_on(&medium, config(workers, &medium)).map_err(fail(FullStackStep::Open))?;
        let mut session = db.session().map_err(fail(FullStackStep::Session))?;
        load_database_scaled(&mut session, warehouses, seed, scale, progress)?;
        db.checkpoint().map_err(fail(FullStackStep::LoadCheckpoint))?;
        if ship_log {
            db.set_log_shipping(true).map_err(fail(FullStackStep::ShipLog))?;
        }
        FullStack::start(db, medium, session, workers)
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
    /// [`FullStack::recover_on`] with [`Medium::Dir`].
    pub fn recover_cut(
        dir: &Path,
        workers: usize,
        cut: Option<CutAt>,
    ) -> Result<(FullStack, Option<LogCut>), ReplicaError> {
        FullStack::recover_on(Medium::Dir(dir.to_path_buf()), workers, cut)
    }

    /// Restart recovery on `medium`, as [`FullStack::recover`] (ARIES from the last checkpoint
    /// and the log: exactly the transactions whose commit record is on the medium survive,
    /// docs/design.md §10), after cutting the log at `cut`
    /// ([`engine::conventional::cut_log_on`]): the restarted primary whose backup was promoted
    /// drops the records past the point where the promoted backup's copy of its log ended.
    /// Nothing is changed when the cut is refused. Then starts `workers` worker threads (0:
    /// transactions run inline). An in-memory medium must have been restarted after its
    /// crash ([`MemoryMedium::restart`]).
    pub fn recover_on(
        medium: Medium,
        workers: usize,
        cut: Option<CutAt>,
    ) -> Result<(FullStack, Option<LogCut>), ReplicaError> {
        FullStack::recover_configured(medium, workers, cut, true)
    }

    /// [`FullStack::recover_on`], with or without the checkpoint opening takes after recovery.
    fn recover_configured(
        medium: Medium,
        workers: usize,
        cut: Option<CutAt>,
        checkpoint_on_open: bool,
    ) -> Result<(FullStack, Option<LogCut>), ReplicaError> {
        if !medium.has_checkpoint() {
            return Err(ReplicaError::NoCheckpoint { path: medium.checkpoint_path() });
        }
        let cut = match cut {
            Some(at) => Some(cut_log_on(&medium, at).map_err(fail(FullStackStep::CutLog))?),
            None => None,
        };
        // A log that recovery refuses (a damaged record followed by valid ones, a missing
        // checkpoint) fails the restart here, the medium as found: the node does not serve a
        // truncated state.
        let config = Config { checkpoint_on_open, ..config(workers, &medium) };
        let db = ConventionalDb::open_on(&medium, config).map_err(fail(FullStackStep::Recovery))?;
        if let Some(t) = db.recovery_report().torn_tail {
            tracing::warn!(
                medium = %medium,
                offset = t.offset,
                lsn = t.lsn,
                bytes = t.bytes,
                "restart recovery truncated a torn write-ahead log tail"
            );
        }
        let session = db.session().map_err(fail(FullStackStep::Session))?;
        Ok((FullStack::start(db, medium, session, workers)?, cut))
    }

    /// Restarts this node's database on `medium` the way `restart` says (docs/design.md §10):
    /// - [`Restart::OwnLog`]: restart recovery from its own log ([`FullStack::recover_on`]),
    ///   without the checkpoint opening otherwise takes: the partition comes back alone, and
    ///   its log generation keeps every commit record (with its transaction's timestamp) of
    ///   what it ran before, so that the batches its failure lost can be replayed to it — now
    ///   or after another failure — without running again what already took effect
    ///   (docs/design.md §10);
    /// - [`Restart::FollowBase`]: the same after cutting the log at `cut`, only if the cut
    ///   leaves exactly the state the primary's log base starts from (position `start`,
    ///   [`engine::conventional::follows_generation_on`]); otherwise
    ///   [`ReplicaError::OwnLogCannotFollow`] with nothing changed;
    /// - [`Restart::Image`]: the primary's checkpoint image installed in place of whatever
    ///   the medium held ([`engine::conventional::install_image_on`]), then recovery over it.
    ///
    /// Workers as [`FullStack::recover_on`]. An in-memory medium must have been restarted
    /// after its crash.
    pub fn restart_on(
        medium: Medium,
        workers: usize,
        restart: &Restart,
    ) -> Result<(FullStack, Option<LogCut>), ReplicaError> {
        match restart {
            Restart::OwnLog => FullStack::recover_configured(medium, workers, None, false),
            Restart::FollowBase { cut, start } => {
                let follows = follows_generation_on(&medium, *cut, *start).map_err(fail(FullStackStep::CutLog))?;
                if !follows {
                    return Err(ReplicaError::OwnLogCannotFollow { cut: format!("{cut:?}"), start: *start });
                }
                FullStack::recover_on(medium, workers, Some(*cut))
            }
            Restart::Image(image) => {
                install_image_on(&medium, image).map_err(fail(FullStackStep::InstallImage))?;
                FullStack::recover_on(medium, workers, None)
            }
        }
    }

    /// The current checkpoint snapshot, whole (for a rejoining backup's base backup).
    pub fn checkpoint_image(&self) -> Result<Vec<u8>, ReplicaError> {
        self.db.checkpoint_image().map_err(fail(FullStackStep::CheckpointImage))
    }

    /// The database itself (for a copy of its pages taken while it executes on:
    /// [`ConventionalDb::begin_image_copy`]).
    pub fn database(&self) -> &Arc<ConventionalDb> {
        &self.db
    }

    /// What restart recovery did when the database was opened (nothing after a fresh load).
    pub fn recovery_report(&self) -> &RecoveryReport {
        self.db.recovery_report()
    }

    /// The medium the database lives on.
    pub fn medium(&self) -> &Medium {
        &self.medium
    }

    /// The in-memory medium the database lives on, if it does (for the simulator to crash).
    pub fn memory_medium(&self) -> Option<&MemoryMedium> {
        match &self.medium {
            Medium::Memory(m) => Some(m),
            Medium::Dir(_) => None,
        }
    }

    /// Starts `workers` worker threads over `db` (none for 0: transactions then run inline);
    /// `session` is the executor thread's own.
    fn start(
        db: Arc<ConventionalDb>,
        medium: Medium,
        session: Session,
        workers: usize,
    ) -> Result<FullStack, ReplicaError> {
        let pool = if workers == 0 { None } else { Some(Pool::start(&db, workers)?) };
        Ok(FullStack { db, medium, session, pool, retries: 0 })
    }

    /// Executes a batch on the workers (without workers: inline, one transaction after the
    /// other in the batch's order, on the executor's session); outcomes in the batch's order.
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
        let Some(pool) = &self.pool else {
            for (t, outcome) in txns.iter().zip(&mut outcomes) {
                if outcome.is_none() {
                    // Locks, latches and the log as on a worker; nothing else holds a lock.
                    let (o, retries) = run_one(&mut self.session, t.ts.0, &t.input);
                    self.retries += u64::from(retries);
                    *outcome = Some(o);
                }
            }
            return outcomes.into_iter().map(|o| o.expect("every transaction answered")).collect();
        };
        let jobs = pool.jobs.as_ref().expect("workers run until drop");
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
            let (index, outcome, retries) = pool.done.recv().expect("workers run until drop");
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
    /// ([`ConventionalDb::log_base_for_backup`]), read here whole.
    pub fn log_base(&self) -> Result<Vec<u8>, ReplicaError> {
        let mut later = self.log_base_later()?;
        let n = later.len();
        later.read(n).map_err(fail(FullStackStep::LogBase))
    }

    /// The same base, to be read later off the executor: costs a log sync here, whatever
    /// the generation's length (docs/design.md §10, "Copying without stopping").
    pub fn log_base_later(&self) -> Result<GenerationRead, ReplicaError> {
        self.db.log_base_for_backup().map_err(fail(FullStackStep::LogBase))
    }

    /// The checkpoint snapshot, to be read later off the executor.
    pub fn checkpoint_image_later(&self) -> ImageRead {
        self.db.checkpoint_image_later()
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

    /// The workers' `schedstat` files (none without worker threads).
    pub fn worker_schedstats(&self) -> Vec<PathBuf> {
        self.pool.as_ref().map_or_else(Vec::new, |p| p.schedstats.clone())
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

impl Pool {
    /// Starts `workers` (at least one) worker threads, each on its own session of `db`.
    fn start(db: &Arc<ConventionalDb>, workers: usize) -> Result<Pool, ReplicaError> {
        let (jobs, rx) = mpsc::sync_channel::<Job>(workers * 4);
        let rx = Arc::new(Mutex::new(rx));
        let (done_tx, done) = mpsc::channel();
        let (started_tx, started) = mpsc::channel::<Option<PathBuf>>();
        // Built first, so that a failure below stops and joins the workers already started.
        let mut pool = Pool { jobs: Some(jobs), done, workers: Vec::with_capacity(workers), schedstats: Vec::new() };
        for i in 0..workers {
            let mut s = db.session().map_err(fail(FullStackStep::WorkerSession))?;
            let rx = Arc::clone(&rx);
            let done_tx = done_tx.clone();
            let started_tx = started_tx.clone();
            let h = std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn(move || {
                    // The full stack's workers are its executors: all the node's CPUs.
                    crate::affinity::spread();
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
            pool.workers.push(h);
        }
        // Every worker registered its CPU accounting before the first batch.
        pool.schedstats = (0..workers).filter_map(|_| started.recv().ok().flatten()).collect();
        Ok(pool)
    }
}
