//! The multi-threaded closed-loop bench: N worker threads, each with its own storage session
//! and its own input stream, against one shared database (the conventional stack's workers,
//! `glass bench --embedded --engine conventional --workers N`).
//!
//! Owns: [`run`] and [`worker_seed`]. Guarantees:
//! - worker `i`'s inputs are a pure function of the run seed, `i` and the configuration
//!   (worker 0 draws the single-thread bench's stream); timestamps come from one shared
//!   logical clock, so every transaction has its own and none reads the wall clock;
//! - closed loop: a worker submits its next transaction only when the previous one finished;
//! - a transaction the concurrency control aborts (`engine::TxnError::is_conflict`, e.g. a
//!   wait-die victim) is re-executed with the same input and timestamp until it commits or the
//!   procedure rolls it back; it counts once, its re-executions are counted as retries, and
//!   its latency runs from the first attempt to the outcome;
//! - `on_commit` sees every committed transaction (warm-up included) after its commit
//!   returned, on the worker's thread, before the worker starts its next transaction: a
//!   caller can keep its own record of acknowledged commits;
//! - the per-second lines, the final report and its JSON are the single-thread bench's
//!   ([`crate::bench`]): per-worker figures are merged; a transaction counts in the measured
//!   phase when it started in it.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use engine::procedures::{execute, TxnInput, TxnKind, TxnOutput};
use engine::Storage;

use crate::bench::{
    run_seed, BenchConfig, BenchError, BenchReport, IntervalLine, Measured, Observer, RunKind, StopAfter,
};
use crate::gen::Generator;
use crate::metrics::{rss_bytes, Stats};
use engine::loader;
use engine::rng::Rng;

/// Most worker threads a run may have.
pub const WORKERS_MAX: usize = 256;
/// Most re-executions of one transaction before the run gives up. Wait-die keeps a retried
/// transaction's first priority, so it becomes the oldest and commits long before this.
pub const RETRIES_PER_TXN_MAX: u32 = 1_000;
/// Longest the driving thread sleeps between looks at the clock and the workers.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Stream identifier separating the workers' seeds from other uses of the run seed.
const STREAM_WORKER: u64 = 0x574F_524B_4552_5300; // "WORKERS"

const PHASE_WARMUP: u8 = 0;
const PHASE_MEASURE: u8 = 1;
const PHASE_STOP: u8 = 2;

/// Called on a worker's thread after each commit returned, with the input and its result; an
/// error stops the run.
pub type OnCommit<'a> = &'a (dyn Fn(&TxnInput, &TxnOutput) -> Result<(), BenchError> + Sync);

/// The generator seed of worker `worker` in a run with load seed `seed`: worker 0 gets the
/// single-thread bench's run seed, the others independent streams derived from it.
pub fn worker_seed(seed: u64, worker: usize) -> u64 {
    let run = run_seed(seed);
    if worker == 0 {
        run
    } else {
        Rng::stream(run, STREAM_WORKER ^ worker as u64).next_u64()
    }
}

/// What the driving thread sees of one worker (on its own cache lines).
#[repr(align(128))]
#[derive(Default)]
struct Slot {
    /// Transactions this worker finished, both phases.
    done: AtomicU64,
    /// The current second's figures, swapped out by the driving thread at each tick.
    interval: Mutex<Stats>,
}

impl Slot {
    fn interval(&self) -> MutexGuard<'_, Stats> {
        self.interval.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Shared {
    phase: AtomicU8,
    /// The logical clock: the last timestamp handed out.
    clock: AtomicU64,
    /// Measured transactions claimed (only with a transaction limit).
    tickets: AtomicU64,
    limit_txns: Option<u64>,
    /// A warm-up of this many transactions (`--warmup-txns`) rather than of seconds.
    warmup_txns: Option<u64>,
    /// Warm-up transactions claimed (only with `warmup_txns`).
    warmup_tickets: AtomicU64,
    /// When a worker that found the warm-up count spent started the measured phase.
    measure_started: Mutex<Option<Instant>>,
}

#[derive(Default)]
struct Outcome {
    stats: Stats,
    retries: u64,
    /// NewOrders committed, warm-up included.
    neworders: u64,
}

/// One worker's closed loop.
fn worker<S: Storage>(
    db: &mut S,
    mut gen: Generator,
    shared: &Shared,
    slot: &Slot,
    on_commit: OnCommit<'_>,
) -> Result<Outcome, BenchError> {
    let mut out = Outcome::default();
    let mut done = 0u64;
    loop {
        let measured = match shared.phase.load(Ordering::Acquire) {
            PHASE_STOP => break,
            PHASE_WARMUP => match shared.warmup_txns {
                // The warm-up's count is spent: this worker starts the measured phase.
                Some(n) if shared.warmup_tickets.fetch_add(1, Ordering::Relaxed) >= n => {
                    let now = Instant::now();
                    if shared
                        .phase
                        .compare_exchange(PHASE_WARMUP, PHASE_MEASURE, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        *shared.measure_started.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
                    }
                    shared.phase.load(Ordering::Acquire) == PHASE_MEASURE
                }
                _ => false,
            },
            phase => phase == PHASE_MEASURE,
        };
        if let (true, Some(limit)) = (measured, shared.limit_txns) {
            if shared.tickets.fetch_add(1, Ordering::Relaxed) >= limit {
                break;
            }
        }
        let ts = shared.clock.fetch_add(1, Ordering::Relaxed) + 1;
        let input = gen.next(loader::LOAD_TIMESTAMP + ts as i64);
        let kind = input.kind();
        let start = Instant::now();
        let mut retries = 0u32;
        let r = loop {
            match execute(db, ts, &input) {
                Err(e) if e.is_conflict() && retries < RETRIES_PER_TXN_MAX => retries += 1,
                r => break r,
            }
        };
        let ns = start.elapsed().as_nanos() as u64;
        match &r {
            Ok(output) => {
                on_commit(&input, output)?;
                out.neworders += (kind == TxnKind::NewOrder) as u64;
            }
            Err(e) if e.is_abort() && !e.is_conflict() => {} // a TPC-C rollback
            Err(e) => return Err(BenchError::Txn(e.clone())),
        }
        if measured {
            out.stats.record(kind, ns, r.is_ok());
            out.retries += u64::from(retries);
            slot.interval().record(kind, ns, r.is_ok());
        }
        done += 1;
        slot.done.store(done, Ordering::Relaxed);
    }
    Ok(out)
}

fn total_done(slots: &[Slot]) -> u64 {
    slots.iter().map(|s| s.done.load(Ordering::Relaxed)).sum()
}

/// Swaps out every worker's figures of the current interval and merges them.
fn take_interval(slots: &[Slot]) -> Stats {
    let mut all = Stats::default();
    for slot in slots {
        let mine = std::mem::take(&mut *slot.interval());
        all.merge(&mine);
    }
    all
}

fn interval_line(interval: &Stats, elapsed: Duration, span: Duration) -> IntervalLine {
    IntervalLine::of(elapsed.as_secs_f64(), span.as_secs_f64(), interval)
}

/// Runs the warm-up and the measured phase on an already-loaded database with one worker
/// thread per session (each session must work on the same database). The report's `workers`
/// and `retries` are set; `engine`, `step`, `log_bytes` and `fsyncs` are the caller's.
pub fn run<S: Storage + Send>(
    sessions: Vec<S>,
    cfg: &BenchConfig,
    mode: RunKind,
    load_seconds: f64,
    obs: &mut dyn Observer,
    on_commit: OnCommit<'_>,
) -> Result<BenchReport, BenchError> {
    cfg.validate()?;
    let workers = sessions.len();
    if !(1..=WORKERS_MAX).contains(&workers) {
        return Err(BenchError::Invalid(format!("--workers must be 1 to {WORKERS_MAX}, not {workers}")));
    }
    let gens = (0..workers)
        .map(|i| Generator::new(cfg.gen_config(), worker_seed(cfg.seed, i), cfg.seed))
        .collect::<Result<Vec<_>, _>>()?;
    let mix = gens[0].mix().weights;
    let rss_after_load = rss_bytes().unwrap_or(0);
    let warmup = Duration::from_secs_f64(cfg.warmup_s);
    let warming = cfg.warmup_txns.map_or(!warmup.is_zero(), |n| n > 0);
    // Without a warm-up every transaction is measured (so a transaction limit covers the
    // whole stream, as in the single-thread bench).
    let shared = Shared {
        phase: AtomicU8::new(if warming { PHASE_WARMUP } else { PHASE_MEASURE }),
        warmup_txns: cfg.warmup_txns,
        warmup_tickets: AtomicU64::new(0),
        measure_started: Mutex::new(None),
        clock: AtomicU64::new(0),
        tickets: AtomicU64::new(0),
        limit_txns: match cfg.stop {
            StopAfter::Transactions(n) => Some(n),
            StopAfter::Seconds(_) => None,
        },
    };
    let limit_time = match cfg.stop {
        StopAfter::Seconds(s) => Duration::from_secs_f64(s),
        StopAfter::Transactions(_) => Duration::MAX,
    };
    let slots: Vec<Slot> = (0..workers).map(|_| Slot::default()).collect();
    let mut timeline = Vec::new();
    let mut last_tick = Duration::ZERO;
    let mut start = Instant::now();
    let mut cpu_start = crate::metrics::cpu_seconds();
    let mut warmup_seconds = 0.0;

    let outcomes: Vec<Result<Outcome, BenchError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = sessions
            .into_iter()
            .zip(gens)
            .zip(&slots)
            .map(|((mut db, gen), slot)| {
                let shared = &shared;
                scope.spawn(move || {
                    let r = worker(&mut db, gen, shared, slot, on_commit);
                    if r.is_err() {
                        shared.phase.store(PHASE_STOP, Ordering::Release);
                    }
                    r
                })
            })
            .collect();
        let over = || handles.iter().all(|h| h.is_finished()) || shared.phase.load(Ordering::Acquire) == PHASE_STOP;

        let warmup_start = Instant::now();
        if warming {
            match cfg.warmup_txns {
                Some(n) => {
                    obs.phase("warmup", StopAfter::Transactions(n));
                    // The workers end the warm-up themselves once its count is spent.
                    while shared.phase.load(Ordering::Acquire) == PHASE_WARMUP && !over() {
                        std::thread::sleep(POLL_INTERVAL.min(Duration::from_millis(2)));
                        obs.progress(warmup_start.elapsed().as_secs_f64(), total_done(&slots));
                    }
                }
                None => {
                    obs.phase("warmup", StopAfter::Seconds(cfg.warmup_s));
                    warm_up(obs, warmup, &slots, &over);
                }
            }
        }
        warmup_seconds = warmup_start.elapsed().as_secs_f64();

        obs.phase("run", cfg.stop);
        cpu_start = crate::metrics::cpu_seconds();
        let done_before = total_done(&slots);
        if warming {
            start = Instant::now();
            // Unless a failed worker already stopped the run.
            let _ = shared.phase.compare_exchange(PHASE_WARMUP, PHASE_MEASURE, Ordering::AcqRel, Ordering::Acquire);
            if let Some(t) = *shared.measure_started.lock().unwrap_or_else(|e| e.into_inner()) {
                start = t;
            }
        }
        let clock = MeasureClock { start, limit_time, done_before };
        last_tick = measure(obs, &clock, &slots, &shared, &over, &mut timeline);
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let elapsed = start.elapsed();

    let all = merge_outcomes(outcomes)?;
    let line = interval_line(&take_interval(&slots), elapsed, elapsed - last_tick);
    obs.interval(&line);
    obs.progress(elapsed.as_secs_f64(), all.stats.committed() + all.stats.aborted());
    timeline.push(line);
    obs.finished();

    let rss = rss_bytes().unwrap_or(0);
    let cpu_seconds = crate::metrics::cpu_seconds() - cpu_start;
    let mut report = BenchReport::assemble(Measured {
        mode,
        profile: cfg.profile.name(),
        mix,
        warehouses: cfg.warehouses,
        seed: cfg.seed,
        load_seconds,
        warmup_seconds,
        seconds: elapsed.as_secs_f64(),
        cpu_seconds: Some(cpu_seconds),
        stats: &all.stats,
        memory: Some((rss_after_load, rss, all.neworders)),
        timeline,
    });
    report.workers = Some(workers);
    report.retries = Some(all.retries);
    Ok(report)
}

/// The warm-up: reports progress until `warmup` has passed or the run is `over`.
fn warm_up(obs: &mut dyn Observer, warmup: Duration, slots: &[Slot], over: &dyn Fn() -> bool) {
    let t0 = Instant::now();
    loop {
        std::thread::sleep(POLL_INTERVAL.min(warmup.saturating_sub(t0.elapsed())));
        let e = t0.elapsed();
        obs.progress(e.as_secs_f64(), total_done(slots));
        if e >= warmup || over() {
            break;
        }
    }
}

/// When the measured phase started, when it ends, and what was done before it.
#[derive(Clone, Copy)]
struct MeasureClock {
    start: Instant,
    limit_time: Duration,
    done_before: u64,
}

/// The measured phase: a line a second into `timeline` until the time limit passes or the
/// run is `over`, then tells the workers to stop. Returns when the last line was taken.
fn measure(
    obs: &mut dyn Observer,
    clock: &MeasureClock,
    slots: &[Slot],
    shared: &Shared,
    over: &dyn Fn() -> bool,
    timeline: &mut Vec<IntervalLine>,
) -> Duration {
    let MeasureClock { start, limit_time, done_before } = *clock;
    let mut last_tick = Duration::ZERO;
    let mut next_tick = Duration::from_secs(1);
    loop {
        let now = start.elapsed();
        let wake = next_tick.min(limit_time);
        if wake > now {
            std::thread::sleep((wake - now).min(POLL_INTERVAL));
        }
        let e = start.elapsed();
        if e >= limit_time || over() {
            shared.phase.store(PHASE_STOP, Ordering::Release);
            break;
        }
        if e >= next_tick {
            let line = interval_line(&take_interval(slots), e, e - last_tick);
            obs.interval(&line);
            timeline.push(line);
            last_tick = e;
            while next_tick <= e {
                next_tick += Duration::from_secs(1);
            }
        }
        obs.progress(e.as_secs_f64(), total_done(slots) - done_before);
    }
    last_tick
}

/// The workers' outcomes together, or the first worker's error.
fn merge_outcomes(outcomes: Vec<Result<Outcome, BenchError>>) -> Result<Outcome, BenchError> {
    let mut all = Outcome::default();
    for o in outcomes {
        let o = o?;
        all.stats.merge(&o.stats);
        all.retries += o.retries;
        all.neworders += o.neworders;
    }
    Ok(all)
}
