//! `glass breakdown`: the paper's staircase (Harizopoulos et al., SIGMOD 2008, Section 4.3,
//! Figures 5, 6 and 8). NewOrder and Payment run on the full conventional stack, then after
//! each of its component removals (engine's [`Step`] 1–10), then on the lean kernel (step 11);
//! each configuration is timed, and instructions per transaction are counted.
//!
//! Owns: the measurement plan (one engine per configuration, loaded from the seed, warmed
//! up, then a NewOrder-only and a Payment-only stream of pre-generated paper-profile inputs,
//! timed over several repetitions and reduced to the median), the instruction counters
//! (hardware `INSTRUCTIONS` through `perf_event_open` when the machine has them, otherwise
//! callgrind in a child process per step, see [`callgrind`]), the grouping of steps into the
//! paper's components and the share arithmetic ([`component_shares`], [`figure8_shares`]),
//! the ratios ([`ratio3`]), the report (text tables, JSON rows) and the progress display.
//!
//! Guarantees:
//! - only the execution of the measured transactions is inside a timing or a count: inputs
//!   are generated before the loop, and the load and warm-up are never counted (callgrind
//!   children start with instrumentation and collection off);
//! - every configuration runs the same input streams (same seeds);
//! - a figure that could not be measured is `None` (printed "n/a"), never zero; every row
//!   says where its instruction count came from ([`Source`]);
//! - the full stack also runs with the log flush switched off alone (the paper's 1,700 txn/s
//!   baseline), besides step 0 (640 txn/s, log flushed) — note that step 1 still flushes:
//!   the paper's switch order removes B-tree key evaluation before the log flush;
//! - every configuration is measured alike, without prefetching: only the lean kernel
//!   prefetches (the storage trait's prefetch hint is a no-op everywhere else), so step 11 is
//!   timed and counted through [`NoPrefetch`], which drops the hints, and every ratio and
//!   share uses that figure; the lean kernel with its prefetching is timed once more as an
//!   extra line, reported apart (with its own, marked, time ratios).
//!
//! The paper's grouping of its switches into the components of Figures 5 and 6 (Figure 7):
//! B-tree keys = step 1; logging = steps 2–4 (log flush, log records, LSNs); locking = step 5;
//! latching = step 6; buffer manager = steps 7–10 (page size, directory lookup, transaction
//! management, buffer pool calls); the paper's "remaining overhead" is what is left of the
//! stripped system (step 10) over the full stack. The lean kernel's share (step 11 over the
//! full stack) is reported beside it; the paper's lean ("optimal") kernel has no bar of its
//! own in those figures.
//!
//! Figure 8 splits NewOrder's cycles into the same components with the stripped system as
//! "useful work" and the buffer manager as "buffer pool" ([`FIGURE8`]); glass's time shares
//! (without the log flush) are printed beside it. Payment has no Figure 8: its time shares
//! are printed with no paper figure.
//!
//! Two ratios are reported apart, in instructions and in time (with and without the log
//! flush), per transaction type and for the 50/50 mix: full stack / stripped stack (step 0 /
//! step 10: the paper's ≈20×, 640 → 12,700 txn/s, Section 4.3.1) and full stack / lean kernel
//! (step 0 / step 11: the paper's full Shore against its hand-built optimal kernel, 640 →
//! 46,500 txn/s). The full stack's instructions per transaction are set beside Shore's
//! (≈180K Payment, ≈1.73M NewOrder, Sections 4.3.2–4.3.3).

pub mod callgrind;
pub mod no_prefetch;
pub mod plot;

pub use no_prefetch::NoPrefetch;

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use engine::conventional::{Config, ConventionalDb, ConventionalError, Step, Switches};
use engine::procedures::{execute, TxnInput, TxnKind};
use engine::{LeanDb, Storage};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::error::GenError;
use crate::gen::{GenConfig, Generator, Mix, Profile};
use crate::metrics::thread_cpu_seconds;
use engine::loader::{self, LoadProgress};
use engine::LoadError;

/// The measured transaction types, in the paper's figure order (Figure 5, Figure 6).
pub const MEASURED: [TxnKind; 2] = [TxnKind::Payment, TxnKind::NewOrder];
/// The order the streams run in within a repetition.
const RUN_ORDER: [TxnKind; 2] = [TxnKind::NewOrder, TxnKind::Payment];

/// Shore's instructions per transaction (Section 4.3.2–4.3.3), in [`MEASURED`] order.
pub const PAPER_INSTRUCTIONS: [f64; 2] = [180_000.0, 1_730_000.0];
/// Shore with the log flushed to disk (Section 4.3.1).
pub const PAPER_TXN_PER_S_FLUSH: f64 = 640.0;
/// Shore without the log flush.
pub const PAPER_TXN_PER_S_NO_FLUSH: f64 = 1_700.0;
/// Shore with every component removed.
pub const PAPER_TXN_PER_S_STRIPPED: f64 = 12_700.0;
/// The hand-built optimal kernel.
pub const PAPER_TXN_PER_S_OPTIMAL: f64 = 46_500.0;
/// The paper's "remaining overhead" share, in [`MEASURED`] order.
pub const PAPER_REMAINING_PCT: [f64; 2] = [4.7, 6.8];

/// A component of the paper's Figures 5 and 6: the steps that remove it, and the paper's
/// share of the full stack's instructions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Component {
    pub name: &'static str,
    /// First and last step removing it (inclusive).
    pub steps: (u8, u8),
    /// The paper's share in percent, in [`MEASURED`] order (Payment, NewOrder).
    pub paper_pct: [f64; 2],
}

/// The paper's components in its order (Figure 7's grouping of the switches).
pub const COMPONENTS: [Component; 5] = [
    Component { name: "B-tree keys", steps: (1, 1), paper_pct: [10.1, 16.2] },
    Component { name: "logging", steps: (2, 4), paper_pct: [17.7, 11.9] },
    Component { name: "locking", steps: (5, 5), paper_pct: [25.2, 16.3] },
    Component { name: "latching", steps: (6, 6), paper_pct: [12.6, 14.2] },
    Component { name: "buffer manager", steps: (7, 10), paper_pct: [29.8, 34.6] },
];

/// The name of the stripped stack's share: the paper's "remaining overhead" (Figures 5 and 6),
/// its "useful work" (Figure 8).
pub const REMAINING: &str = "remaining (stripped stack)";

/// A category of the paper's Figure 8 (NewOrder's cycles) and the glass component whose time
/// share stands beside it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CycleCategory {
    /// The paper's name for it.
    pub name: &'static str,
    /// A [`COMPONENTS`] name, or [`REMAINING`].
    pub component: &'static str,
    /// The paper's share of NewOrder's cycles, in percent.
    pub paper_neworder_pct: f64,
}

/// Figure 8's categories, in [`COMPONENTS`] order then the stripped stack. The paper's buffer
/// pool is glass's buffer manager (steps 7–10, Figure 7's grouping); its useful work is what
/// the stripped system (step 10) still spends.
pub const FIGURE8: [CycleCategory; 6] = [
    CycleCategory { name: "B-tree keys", component: "B-tree keys", paper_neworder_pct: 8.1 },
    CycleCategory { name: "logging", component: "logging", paper_neworder_pct: 21.1 },
    CycleCategory { name: "locking", component: "locking", paper_neworder_pct: 18.7 },
    CycleCategory { name: "latching", component: "latching", paper_neworder_pct: 10.2 },
    CycleCategory { name: "buffer pool", component: "buffer manager", paper_neworder_pct: 29.6 },
    CycleCategory { name: "useful work", component: REMAINING, paper_neworder_pct: 12.3 },
];

/// Shore's full stack over its stripped system in throughput, log flushed (640 → 12,700
/// txn/s: the paper's ≈20×, Section 4.3.1).
pub const PAPER_FULL_OVER_STRIPPED_TIME: f64 = PAPER_TXN_PER_S_STRIPPED / PAPER_TXN_PER_S_FLUSH;
/// The same without the log flush (1,700 → 12,700 txn/s).
pub const PAPER_NO_FLUSH_OVER_STRIPPED_TIME: f64 = PAPER_TXN_PER_S_STRIPPED / PAPER_TXN_PER_S_NO_FLUSH;
/// Shore over the paper's hand-built optimal kernel, log flushed (640 → 46,500 txn/s).
pub const PAPER_FULL_OVER_OPTIMAL_TIME: f64 = PAPER_TXN_PER_S_OPTIMAL / PAPER_TXN_PER_S_FLUSH;
/// The same without the log flush (1,700 → 46,500 txn/s).
pub const PAPER_NO_FLUSH_OVER_OPTIMAL_TIME: f64 = PAPER_TXN_PER_S_OPTIMAL / PAPER_TXN_PER_S_NO_FLUSH;

/// `a / b` per transaction type ([`MEASURED`] order), then for the 50/50 mix: the mix runs one
/// of each, so its ratio is `(a₀ + a₁) / (b₀ + b₁)` (for times, the ratio of the throughputs).
pub fn ratio3(a: [f64; 2], b: [f64; 2]) -> [f64; 3] {
    [a[0] / b[0], a[1] / b[1], (a[0] + a[1]) / (b[0] + b[1])]
}

/// Shore's full stack over its stripped system in instructions, per type then the mix: the
/// stripped system is the remaining overhead's share of the full stack (Figures 5 and 6).
pub fn paper_full_over_stripped_instructions() -> [f64; 3] {
    let stripped = std::array::from_fn(|i| PAPER_INSTRUCTIONS[i] * PAPER_REMAINING_PCT[i] / 100.0);
    ratio3(PAPER_INSTRUCTIONS, stripped)
}

/// Figure 8's mapping: glass's shares (components and remaining) in [`FIGURE8`] order.
pub fn figure8_shares(shares: &Shares) -> [f64; 6] {
    FIGURE8.map(|cat| {
        if cat.component == REMAINING {
            return shares.remaining;
        }
        let c =
            COMPONENTS.iter().position(|c| c.name == cat.component).expect("a Figure 8 category maps onto a component");
        shares.components[c]
    })
}

/// Where an instruction count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Hardware `INSTRUCTIONS` counter through `perf_event_open`, in the timed run.
    Perf,
    /// valgrind's callgrind, in a child process per step.
    Callgrind,
    /// Not counted: no hardware counter and no valgrind (or `--no-instructions`).
    None,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Perf => "perf",
            Source::Callgrind => "callgrind",
            Source::None => "none",
        }
    }
}

/// Why a breakdown could not run.
#[derive(Debug, thiserror::Error)]
pub enum BreakdownError {
    /// A setting is impossible; the message names the flag.
    #[error("{flag} {why}")]
    Invalid { flag: &'static str, why: &'static str },
    #[error(transparent)]
    Gen(#[from] GenError),
    #[error("{what}: loading failed: {source}")]
    Load { what: String, source: LoadError },
    #[error("{what}: cannot open the conventional stack: {source}")]
    Open { what: String, source: ConventionalError },
    /// A transaction failed in a way that is not an abort.
    #[error("{what}: {txn} failed: {error}")]
    Txn { what: String, txn: &'static str, error: engine::TxnError },
    #[error("cannot {what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Callgrind(#[from] callgrind::CallgrindError),
    /// `--worker-step` outside valgrind.
    #[error(
        "the worker mode (--worker-step) only runs under valgrind's callgrind, started by `glass breakdown` itself"
    )]
    NotUnderValgrind,
    /// An output file cannot be written.
    #[error("cannot write {}: {why}", path.display())]
    Output { path: PathBuf, why: String },
    #[error("cannot draw {}: {source}", path.display())]
    Plot { path: PathBuf, source: plot::DrawError },
}

/// Everything a breakdown run depends on.
#[derive(Debug, Clone)]
pub struct BreakdownConfig {
    /// Warehouses of the timed runs (the paper: 5).
    pub warehouses: u16,
    /// Transactions of each type per timed repetition.
    pub txns: u64,
    /// Timed repetitions per type; the median is reported.
    pub reps: u32,
    /// Mixed (paper profile) transactions before timing.
    pub warmup_txns: u64,
    /// Warehouses of the callgrind children.
    pub count_warehouses: u16,
    /// Transactions of each type counted by a callgrind child.
    pub count_txns: u64,
    /// Mixed transactions a callgrind child runs (uninstrumented) before counting.
    pub count_warmup_txns: u64,
    /// Seed of the loader and the input streams.
    pub seed: u64,
    /// Directory under which every configuration gets its own database directory (the WAL
    /// of the durable steps) and the callgrind children their output directories.
    pub work_dir: PathBuf,
}

impl BreakdownConfig {
    /// Rejects impossible settings with an error naming the flag.
    pub fn validate(&self) -> Result<(), BreakdownError> {
        let checks: [(&'static str, bool); 5] = [
            ("--warehouses", self.warehouses == 0),
            ("--txns", self.txns == 0),
            ("--reps", self.reps == 0),
            ("--count-warehouses", self.count_warehouses == 0),
            ("--count-txns", self.count_txns == 0),
        ];
        for (flag, zero) in checks {
            if zero {
                return Err(BreakdownError::Invalid { flag, why: "must be at least 1" });
            }
        }
        if self.txns.saturating_mul(u64::from(self.reps)) > TXNS_PER_TYPE_MAX {
            return Err(BreakdownError::Invalid {
                flag: "--txns",
                why: "times --reps must be at most 1,000,000 (inputs are generated before the run)",
            });
        }
        if self.count_txns > TXNS_PER_TYPE_MAX {
            return Err(BreakdownError::Invalid { flag: "--count-txns", why: "must be at most 1,000,000" });
        }
        Ok(())
    }
}

/// A generous bound on the log bytes of one paper-profile transaction (a NewOrder logs ten
/// STOCK before- and after-images, ≈9 KiB).
const LOG_BYTES_PER_TXN_MAX: u64 = 16 << 10;
/// The log is preallocated up to this size at most (beyond it, it grows during the run).
const LOG_PREALLOC_BYTES_MAX: u64 = 1 << 30;

/// Most pre-generated inputs per transaction type.
const TXNS_PER_TYPE_MAX: u64 = 1_000_000;

/// One configuration that is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A step of the staircase (0 = full stack … 10 = stripped, 11 = lean kernel).
    Step(Step),
    /// A step that still flushes the log (0 or 1) with the log flush switched off: step 0's is
    /// the paper's 1,700 txn/s baseline; both give the time staircase without disk waits.
    NoFlush(Step),
    /// The lean kernel with its prefetching (step 11 runs without it, as every other step).
    LeanPrefetch,
}

impl Target {
    /// The conventional stack's configuration, `None` for the lean kernel; the log file is
    /// preallocated for `txns` transactions so that it does not grow inside a timed loop.
    fn config(self, txns: u64) -> Option<Config> {
        let config = match self {
            Target::Step(s) if s.runs_lean_kernel() => return None,
            Target::LeanPrefetch => return None,
            Target::Step(s) => Config::for_step(s, 1),
            Target::NoFlush(s) => Config::new(Switches { log_flush: false, ..Switches::for_step(s) }, 1),
        };
        let need = txns.saturating_mul(LOG_BYTES_PER_TXN_MAX).min(LOG_PREALLOC_BYTES_MAX);
        Some(Config { log_prealloc_bytes: config.log_prealloc_bytes.max(need), ..config })
    }

    /// For progress lines and errors.
    pub fn label(self) -> String {
        match self {
            Target::Step(s) => format!("step {s}"),
            Target::NoFlush(s) => format!("step {s} without log flush"),
            Target::LeanPrefetch => format!("step {} with prefetching", Step::LEAN_KERNEL),
        }
    }

    fn dir_name(self) -> String {
        match self {
            Target::Step(s) => format!("step-{}", s.number()),
            Target::NoFlush(s) => format!("step-{}-no-flush", s.number()),
            Target::LeanPrefetch => format!("step-{}-prefetch", Step::LEAN_KERNEL.number()),
        }
    }
}

/// The input streams every configuration runs.
struct Streams {
    warmup: Vec<TxnInput>,
    /// Per [`MEASURED`] type: `reps` runs of `per_run` inputs, back to back.
    measured: [Vec<TxnInput>; 2],
    per_run: usize,
}

fn only(kind: TxnKind) -> Mix {
    let mut w = [0u32; 5];
    w[kind as usize] = 1;
    Mix { weights: w }
}

/// Generates the streams: a paper-profile (50/50) warm-up and one stream per measured type
/// (the paper profile with the mix set to that type alone).
fn streams(warehouses: u16, seed: u64, warmup: u64, per_run: u64, reps: u32) -> Result<Streams, GenError> {
    let base = GenConfig::for_profile(Profile::Paper, 1..=warehouses);
    let gen_for = |mix: Option<Mix>, stream: u64| {
        Generator::new(GenConfig { mix, ..base.clone() }, stream_seed(seed, stream), seed)
    };
    let mut ts = 0i64;
    let mut take = |g: &mut Generator, n: u64| -> Vec<TxnInput> {
        (0..n)
            .map(|_| {
                ts += 1;
                g.next(loader::LOAD_TIMESTAMP + ts)
            })
            .collect()
    };
    let warmup = take(&mut gen_for(None, 0)?, warmup);
    let total = per_run * u64::from(reps);
    let payment = take(&mut gen_for(Some(only(TxnKind::Payment)), 1)?, total);
    let neworder = take(&mut gen_for(Some(only(TxnKind::NewOrder)), 2)?, total);
    Ok(Streams { warmup, measured: [payment, neworder], per_run: per_run as usize })
}

/// The run seed of stream `n` (0 warm-up, 1 Payment, 2 NewOrder), derived from the seed.
const fn stream_seed(seed: u64, n: u64) -> u64 {
    seed ^ 0x0B4E_A4D0_0000_0000 ^ (n + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Hardware instruction counts through `perf_event_open` (user space only).
pub struct HwInstructions {
    #[cfg(target_os = "linux")]
    counter: perf_event::Counter,
}

impl std::fmt::Debug for HwInstructions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HwInstructions")
    }
}

/// Why the machine has no hardware instruction counter.
#[derive(Debug, thiserror::Error)]
pub enum NoCounter {
    #[error("perf_event_open(hardware INSTRUCTIONS) failed: {0}")]
    Open(std::io::Error),
    #[error("the hardware INSTRUCTIONS counter opened but counts nothing")]
    CountsNothing,
    #[error("hardware counters are read through perf_event_open, which only Linux has")]
    NotLinux,
}

impl HwInstructions {
    /// Opens the counter, or says why the machine has none.
    pub fn open() -> Result<HwInstructions, NoCounter> {
        #[cfg(target_os = "linux")]
        {
            use perf_event::events::Hardware;
            let counter = perf_event::Builder::new(Hardware::INSTRUCTIONS).build().map_err(NoCounter::Open)?;
            let mut hw = HwInstructions { counter };
            // A counter that opens but never counts is no counter either.
            let (_, n) = hw.count(|| std::hint::black_box((0..1000u64).sum::<u64>()));
            match n {
                Some(n) if n > 0 => Ok(hw),
                _ => Err(NoCounter::CountsNothing),
            }
        }
        #[cfg(not(target_os = "linux"))]
        Err(NoCounter::NotLinux)
    }

    /// Counts the instructions `f` executes; `None` when the counter failed.
    pub fn count<R>(&mut self, f: impl FnOnce() -> R) -> (R, Option<u64>) {
        #[cfg(target_os = "linux")]
        {
            let ok = self.counter.reset().and_then(|()| self.counter.enable()).is_ok();
            let r = f();
            let n = self.counter.disable().and_then(|()| self.counter.read()).ok();
            (r, n.filter(|_| ok))
        }
        #[cfg(not(target_os = "linux"))]
        (f(), None)
    }
}

/// How instructions are counted.
pub enum InstrPlan {
    /// Hardware counters, in the timed runs.
    Perf(HwInstructions),
    /// callgrind children: `exe args… --worker-step N --wal-dir DIR` under valgrind.
    Callgrind { exe: PathBuf, args: Vec<OsString>, valgrind: String, perf_error: String },
    /// No counts; the reason is printed.
    None { reason: String },
}

impl std::fmt::Debug for InstrPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InstrPlan::Perf(_) => f.write_str("Perf"),
            InstrPlan::Callgrind { .. } => f.write_str("Callgrind"),
            InstrPlan::None { reason } => write!(f, "None({reason})"),
        }
    }
}

/// What the caller is told while the breakdown runs.
pub trait Progress {
    /// A phase starts with `total` items.
    fn phase(&mut self, _name: &str, _total: u64) {}
    /// What the current item is doing.
    fn status(&mut self, _msg: &str) {}
    /// Loading progress of the current item.
    fn loading(&mut self, _done: u64, _total: u64) {}
    /// The current item is done; `line` says what it measured.
    fn done(&mut self, _line: &str) {}
    /// The phase is over.
    fn finish(&mut self) {}
}

/// Says nothing.
#[derive(Debug, Default)]
pub struct QuietProgress;
impl Progress for QuietProgress {}

/// An indicatif bar on a terminal, one line per finished item on stderr otherwise.
#[derive(Debug, Default)]
pub struct ConsoleProgress {
    bar: Option<ProgressBar>,
    item: String,
}

impl ConsoleProgress {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Progress for ConsoleProgress {
    fn phase(&mut self, name: &str, total: u64) {
        self.finish();
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{prefix:<9} [{bar:30}] {pos}/{len} {elapsed_precise} {wide_msg}")
                .expect("valid progress template")
                .progress_chars("=> "),
        );
        bar.set_prefix(name.to_string());
        if bar.is_hidden() {
            eprintln!("{name}: {total} configurations");
        }
        self.bar = Some(bar);
    }

    fn status(&mut self, msg: &str) {
        self.item = msg.to_string();
        if let Some(b) = &self.bar {
            b.set_message(msg.to_string());
        }
    }

    fn loading(&mut self, done: u64, total: u64) {
        if let Some(b) = &self.bar {
            b.set_message(format!("{}: loading {:.0}%", self.item, done as f64 * 100.0 / total.max(1) as f64));
        }
    }

    fn done(&mut self, line: &str) {
        match &self.bar {
            Some(b) if !b.is_hidden() => {
                b.println(format!("  {line}"));
                b.inc(1);
            }
            Some(b) => {
                b.inc(1);
                eprintln!("  {line}");
            }
            None => eprintln!("  {line}"),
        }
    }

    fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// Runs `body` on a fresh engine for `target` (conventional stack in `dir`, removed after;
/// the lean kernel of step 11 without prefetching, see [`NoPrefetch`]).
trait OnEngine {
    type Out;
    fn run<S: Storage>(self, db: &mut S) -> Result<Self::Out, BreakdownError>;
}

/// `txns`: how many transactions will run (for the log preallocation).
fn on_engine<B: OnEngine>(target: Target, dir: &Path, txns: u64, body: B) -> Result<B::Out, BreakdownError> {
    match target.config(txns) {
        None if target == Target::LeanPrefetch => body.run(&mut LeanDb::new()),
        None => body.run(&mut NoPrefetch(LeanDb::new())),
        Some(config) => {
            let db = ConventionalDb::open(dir, config)
                .map_err(|source| BreakdownError::Open { what: target.label(), source })?;
            let mut session = db.session().map_err(|source| BreakdownError::Open { what: target.label(), source })?;
            let r = body.run(&mut session);
            drop(session);
            drop(db);
            let _ = std::fs::remove_dir_all(dir);
            r
        }
    }
}

fn load<S: Storage>(
    db: &mut S,
    target: Target,
    warehouses: u16,
    seed: u64,
    progress: &mut dyn Progress,
) -> Result<(), BreakdownError> {
    loader::load_database(db, 1..=warehouses, seed, &mut |p: LoadProgress| {
        progress.loading(p.rows_loaded, p.rows_total)
    })
    .map_err(|source| BreakdownError::Load { what: target.label(), source })
}

/// Executes `inputs` with commit timestamps from `ts` on. Aborts are outcomes (the paper
/// profile has none); any other failure stops the run.
#[inline(never)]
fn run_stream<S: Storage>(db: &mut S, inputs: &[TxnInput], ts: &mut u64, target: Target) -> Result<(), BreakdownError> {
    for input in inputs {
        *ts += 1;
        match execute(db, *ts, input) {
            Err(e) if !e.is_abort() => {
                return Err(BreakdownError::Txn { what: target.label(), txn: input.kind().name(), error: e })
            }
            _ => {}
        }
    }
    Ok(())
}

/// The timed figures of one configuration.
#[derive(Debug, Clone)]
pub struct Timing {
    pub target: Target,
    /// Median nanoseconds per transaction, in [`MEASURED`] order.
    pub ns_per_txn: [f64; 2],
    /// Nanoseconds per transaction of every repetition.
    pub ns_reps: [Vec<f64>; 2],
    /// Median CPU time of the executing thread per transaction (user and kernel; excludes
    /// time descheduled or waiting for the disk).
    pub cpu_ns_per_txn: [f64; 2],
    /// Hardware instructions per transaction (median over repetitions), when counted.
    pub hw_instructions: Option<[f64; 2]>,
    pub load_seconds: f64,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

struct TimedRun<'a> {
    target: Target,
    cfg: &'a BreakdownConfig,
    streams: &'a Streams,
    hw: Option<&'a mut HwInstructions>,
    progress: &'a mut dyn Progress,
}

impl OnEngine for TimedRun<'_> {
    type Out = Timing;
    fn run<S: Storage>(self, db: &mut S) -> Result<Timing, BreakdownError> {
        let TimedRun { target, cfg, streams, mut hw, progress } = self;
        let label = target.label();
        progress.status(&label);
        let t0 = Instant::now();
        load(db, target, cfg.warehouses, cfg.seed, progress)?;
        let load_seconds = t0.elapsed().as_secs_f64();
        progress.status(&format!("{label}: warm-up"));
        let mut ts = 0u64;
        run_stream(db, &streams.warmup, &mut ts, target)?;
        let mut ns_reps: [Vec<f64>; 2] = Default::default();
        let mut hw_reps: [Vec<f64>; 2] = Default::default();
        let mut cpu_reps: [Vec<f64>; 2] = Default::default();
        let mut hw_ok = hw.is_some();
        for rep in 0..cfg.reps as usize {
            progress.status(&format!("{label}: repetition {}/{}", rep + 1, cfg.reps));
            for kind in RUN_ORDER {
                let i = MEASURED.iter().position(|&k| k == kind).expect("measured");
                let inputs = &streams.measured[i][rep * streams.per_run..(rep + 1) * streams.per_run];
                let n = inputs.len() as f64;
                let start = Instant::now();
                let cpu_start = thread_cpu_seconds();
                let count = match hw.as_deref_mut() {
                    Some(hw) => {
                        let (r, c) = hw.count(|| run_stream(db, inputs, &mut ts, target));
                        r?;
                        c
                    }
                    None => {
                        run_stream(db, inputs, &mut ts, target)?;
                        None
                    }
                };
                ns_reps[i].push(start.elapsed().as_nanos() as f64 / n);
                cpu_reps[i].push((thread_cpu_seconds() - cpu_start) * 1e9 / n);
                match count {
                    Some(c) if c > 0 => hw_reps[i].push(c as f64 / n),
                    _ => hw_ok = false,
                }
            }
        }
        Ok(Timing {
            target,
            ns_per_txn: [median(&ns_reps[0]), median(&ns_reps[1])],
            hw_instructions: hw_ok.then(|| [median(&hw_reps[0]), median(&hw_reps[1])]),
            ns_reps,
            cpu_ns_per_txn: [median(&cpu_reps[0]), median(&cpu_reps[1])],
            load_seconds,
        })
    }
}

/// What a callgrind child reports on stdout (one JSON line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerReport {
    pub step: u8,
    pub warehouses: u16,
    /// Transactions counted, in [`MEASURED`] order.
    pub txns: [u64; 2],
}

struct CountedRun<'a> {
    step: Step,
    cfg: &'a BreakdownConfig,
    streams: &'a Streams,
}

impl OnEngine for CountedRun<'_> {
    type Out = WorkerReport;
    fn run<S: Storage>(self, db: &mut S) -> Result<WorkerReport, BreakdownError> {
        let CountedRun { step, cfg, streams } = self;
        let target = Target::Step(step);
        load(db, target, cfg.count_warehouses, cfg.seed, &mut QuietProgress)?;
        let mut ts = 0u64;
        run_stream(db, &streams.warmup, &mut ts, target)?;
        callgrind::start_instrumentation();
        for kind in RUN_ORDER {
            let i = MEASURED.iter().position(|&k| k == kind).expect("measured");
            callgrind::counted(kind.name(), || run_stream(db, &streams.measured[i], &mut ts, target))?;
        }
        callgrind::stop_instrumentation();
        Ok(WorkerReport {
            step: step.number(),
            warehouses: cfg.count_warehouses,
            txns: [streams.measured[0].len() as u64, streams.measured[1].len() as u64],
        })
    }
}

/// The body of a callgrind child (`glass breakdown --worker-step N`): loads
/// `count_warehouses` warehouses into step `step`'s engine, warms up, and counts a NewOrder
/// and a Payment stream of `count_txns` each between client requests (dumps named
/// `neworder` and `payment`). Step 11 is the lean kernel without prefetching, as timed
/// ([`NoPrefetch`]). Refuses to run outside valgrind.
pub fn run_worker(step: Step, cfg: &BreakdownConfig) -> Result<WorkerReport, BreakdownError> {
    cfg.validate()?;
    if callgrind::running_on_valgrind() == 0 {
        return Err(BreakdownError::NotUnderValgrind);
    }
    // The lean kernel's pre-faulting thread only asks the kernel for pages; it is turned off
    // so that the count holds the executing thread's work alone.
    engine::arena::set_prefault(false);
    let streams = streams(cfg.count_warehouses, cfg.seed, cfg.count_warmup_txns, cfg.count_txns, 1)?;
    let dir = cfg.work_dir.join(Target::Step(step).dir_name());
    let txns = (streams.warmup.len() + streams.measured[0].len() + streams.measured[1].len()) as u64;
    on_engine(Target::Step(step), &dir, txns, CountedRun { step, cfg, streams: &streams })
}

/// Counts step `step` in a callgrind child; instructions per transaction in [`MEASURED`] order.
fn count_in_child(
    step: Step,
    cfg: &BreakdownConfig,
    exe: &Path,
    args: &[OsString],
) -> Result<[f64; 2], BreakdownError> {
    let out_dir = cfg.work_dir.join(format!("callgrind-step-{}", step.number()));
    let io = |what, source| BreakdownError::Io { what, path: out_dir.clone(), source };
    std::fs::create_dir_all(&out_dir).map_err(|e| io("create", e))?;
    let mut args = args.to_vec();
    args.extend(["--worker-step".into(), step.number().to_string().into(), "--wal-dir".into()]);
    args.push(cfg.work_dir.clone().into_os_string());
    let what = format!("step {step}");
    let stdout = callgrind::run_child(exe, &args, &out_dir, &what)?;
    let report: WorkerReport = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| callgrind::CallgrindError::NoReport { what: what.clone(), stdout: stdout.clone() })?;
    let dumps = callgrind::read_dumps(&out_dir, callgrind::OUT_PREFIX)?;
    let mut per_txn = [0.0; 2];
    for (i, kind) in MEASURED.iter().enumerate() {
        let total = callgrind::find_dump(&dumps, kind.name(), &out_dir)?;
        if total == 0 || report.txns[i] == 0 {
            return Err(
                callgrind::CallgrindError::Parse { path: out_dir.clone(), what: "a zero instruction count" }.into()
            );
        }
        per_txn[i] = total as f64 / report.txns[i] as f64;
    }
    let _ = std::fs::remove_dir_all(&out_dir);
    Ok(per_txn)
}

/// One row of the staircase (and of `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `payment` or `neworder`.
    pub txn: &'static str,
    pub step: u8,
    pub step_name: &'static str,
    /// Instructions per transaction; `None` when not counted.
    pub instructions: Option<f64>,
    /// Median wall-clock nanoseconds per transaction (steps 0 and 1 wait for the log flush).
    pub ns_per_txn: f64,
    /// The same without waiting for the disk: steps 0 and 1 run again with the log flush
    /// switched off; the other steps' figure is `ns_per_txn`.
    pub ns_per_txn_no_flush: f64,
    /// `ns_per_txn` of every repetition (the spread shows how noisy the machine was).
    pub ns_per_txn_reps: Vec<f64>,
    /// Median CPU time of the executing thread per transaction (user and kernel): without
    /// the wait for the log flush. On a VM it still counts time the host stole.
    pub cpu_ns_per_txn: f64,
    pub source: Source,
    /// (previous step − this step) / full stack, instructions, in percent; `None` at step 0.
    pub instructions_share_pct: Option<f64>,
    /// The same with time without disk waits (`ns_per_txn_no_flush`).
    pub time_share_pct: Option<f64>,
    pub warehouses_timed: u16,
    pub txns_timed: u64,
    pub reps: u32,
    pub warehouses_counted: Option<u16>,
    pub txns_counted: Option<u64>,
}

/// One component's share for one transaction type.
#[derive(Debug, Clone, Serialize)]
pub struct ComponentRow {
    pub txn: &'static str,
    pub component: &'static str,
    /// "1", "2-4", …
    pub steps: String,
    pub instructions_share_pct: Option<f64>,
    pub time_share_pct: f64,
    pub paper_pct: Option<f64>,
}

/// One of glass's time shares beside the paper's Figure 8 (NewOrder's cycles).
#[derive(Debug, Clone, Serialize)]
pub struct TimeShareRow {
    pub txn: &'static str,
    /// The paper's category (Figure 8).
    pub category: &'static str,
    /// The glass component standing for it ([`FIGURE8`]).
    pub component: &'static str,
    /// "1", "2-4", …, "10" for the stripped stack.
    pub steps: String,
    /// glass's share of the full stack's time without the log flush, in percent.
    pub time_share_pct: f64,
    /// Figure 8's share of NewOrder's cycles; `None` for Payment (the paper has no figure).
    pub paper_pct: Option<f64>,
}

/// Shares of the full stack, in percent: each component's, the remaining (stripped stack,
/// step 10) and the lean kernel's (step 11). Components and remaining sum to 100%.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shares {
    pub components: [f64; 5],
    pub remaining: f64,
    pub lean: f64,
}

/// The share arithmetic: `values[s]` is the cost at step `s` (0..=11); a component removed by
/// steps `a..=b` has the share `(values[a − 1] − values[b]) / values[0]`.
pub fn component_shares(values: &[f64; 12]) -> Shares {
    let full = values[0];
    let pct = |x: f64| x * 100.0 / full;
    let mut components = [0.0; 5];
    for (c, out) in COMPONENTS.iter().zip(components.iter_mut()) {
        let (a, b) = c.steps;
        *out = pct(values[a as usize - 1] - values[b as usize]);
    }
    Shares { components, remaining: pct(values[10]), lean: pct(values[11]) }
}

/// The share of each step: `(values[s − 1] − values[s]) / values[0]`, `None` at step 0.
pub fn step_shares(values: &[f64; 12]) -> [Option<f64>; 12] {
    let mut out = [None; 12];
    for s in 1..12 {
        out[s] = Some((values[s - 1] - values[s]) * 100.0 / values[0]);
    }
    out
}

/// Throughput and ratios.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The 50/50 mix's throughput from the per-type times: 2 / (t_payment + t_neworder).
    pub full_stack_fsync_txn_per_s: f64,
    pub full_stack_no_flush_txn_per_s: f64,
    pub stripped_txn_per_s: f64,
    pub lean_txn_per_s: f64,
    pub paper_txn_per_s: [f64; 4],
    /// Full stack (step 0) over lean kernel (step 11, without prefetching), per type in
    /// [`MEASURED`] order then the mix.
    pub full_over_lean_instructions: Option<[f64; 3]>,
    pub full_over_lean_time: [f64; 3],
    /// The same with the full stack without log flush as the numerator (time).
    pub no_flush_over_lean_time: [f64; 3],
    /// Full stack (step 0) over stripped stack (step 10), per type then the mix: the paper's
    /// ≈20×.
    pub full_over_stripped_instructions: Option<[f64; 3]>,
    /// The same in time, the full stack with the log flushed.
    pub full_over_stripped_time: [f64; 3],
    /// The same in time, the full stack without the log flush.
    pub no_flush_over_stripped_time: [f64; 3],
    /// Shore's full over stripped in instructions, from Figures 5 and 6 (per type, mix).
    pub paper_full_over_stripped_instructions: [f64; 3],
    /// Shore's full over stripped in throughput, log flushed (640 → 12,700 txn/s).
    pub paper_full_over_stripped_time: f64,
    /// The same without the log flush (1,700 → 12,700 txn/s).
    pub paper_no_flush_over_stripped_time: f64,
    /// Shore over the hand-built optimal kernel, log flushed (640 → 46,500 txn/s).
    pub paper_full_over_lean_time: f64,
    /// The same without the log flush (1,700 → 46,500 txn/s).
    pub paper_no_flush_over_lean_time: f64,
    /// The lean kernel with its prefetching (an extra line, in no ratio above).
    pub lean_prefetch_txn_per_s: f64,
    /// Full stack over the lean kernel with prefetching, time (log flushed; without it).
    pub full_over_lean_prefetch_time: [f64; 3],
    pub no_flush_over_lean_prefetch_time: [f64; 3],
    /// Whether the ratios use the lean kernel with prefetching: never (every configuration
    /// is measured without prefetching).
    pub lean_prefetch_in_ratios: bool,
    /// The full stack's instructions per transaction, in [`MEASURED`] order.
    pub full_stack_instructions: Option<[f64; 2]>,
    /// Shore's ([`PAPER_INSTRUCTIONS`]).
    pub shore_instructions: [f64; 2],
    /// Shore's over glass's full stack.
    pub shore_over_full_stack_instructions: Option<[f64; 2]>,
}

/// Everything `glass breakdown` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Breakdown {
    pub seed: u64,
    pub warehouses: u16,
    pub txns: u64,
    pub reps: u32,
    pub source: Source,
    /// How instructions were (or were not) counted, in words.
    pub source_note: String,
    pub rows: Vec<Row>,
    pub components: Vec<ComponentRow>,
    /// Full stack without log flush: ns per transaction in [`MEASURED`] order.
    pub full_stack_no_flush_ns_per_txn: [f64; 2],
    /// The lean kernel with prefetching: ns per transaction in [`MEASURED`] order (step 11's
    /// rows are without it).
    pub lean_prefetch_ns_per_txn: [f64; 2],
    /// How prefetching was treated, in words.
    pub prefetch_note: String,
    /// glass's time shares beside Figure 8, per type (the paper's figure is NewOrder's).
    pub figure8_time_shares: Vec<TimeShareRow>,
    pub summary: Summary,
    pub seconds: f64,
}

fn mix_txn_per_s(ns: [f64; 2]) -> f64 {
    2e9 / (ns[0] + ns[1])
}

/// Every timed configuration in order: the twelve steps, each step that flushes the log
/// followed by itself without the flush, and the lean kernel (step 11, without prefetching)
/// followed by itself with prefetching.
fn timing_targets() -> Vec<Target> {
    let mut targets = Vec::new();
    for s in Step::ALL {
        targets.push(Target::Step(s));
        if Switches::for_step(s).log_flush && !s.runs_lean_kernel() {
            targets.push(Target::NoFlush(s));
        }
        if s.runs_lean_kernel() {
            targets.push(Target::LeanPrefetch);
        }
    }
    targets
}

/// Times every configuration in this process (counting hardware instructions with `hw`).
fn time_all(
    cfg: &BreakdownConfig,
    streams: &Streams,
    mut hw: Option<&mut HwInstructions>,
    progress: &mut dyn Progress,
) -> Result<Vec<Timing>, BreakdownError> {
    let targets = timing_targets();
    let txns = (streams.warmup.len() + streams.measured[0].len() + streams.measured[1].len()) as u64;
    progress.phase("timing", targets.len() as u64);
    let mut timings = Vec::new();
    for target in targets {
        let dir = cfg.work_dir.join(target.dir_name());
        let body = TimedRun { target, cfg, streams, hw: hw.as_deref_mut(), progress };
        let t = on_engine(target, &dir, txns, body)?;
        progress.done(&format!(
            "{:<40} payment {:>8.0} ns  neworder {:>8.0} ns  ({:.0} txn/s, load {:.1}s)",
            target.label(),
            t.ns_per_txn[0],
            t.ns_per_txn[1],
            mix_txn_per_s(t.ns_per_txn),
            t.load_seconds
        ));
        timings.push(t);
    }
    progress.finish();
    Ok(timings)
}

/// Instructions per transaction of every step, in [`MEASURED`] order, and where they came
/// from.
struct Counts {
    source: Source,
    note: String,
    per_step: Option<[[f64; 2]; 12]>,
    /// Warehouses and transactions per type of the counted runs.
    counted_at: Option<(u16, u64)>,
}

/// Counts every step: from the timed runs' hardware counts, or one callgrind child per step
/// (one at a time). A failure leaves every step uncounted, with the reason in the note.
fn count_all(cfg: &BreakdownConfig, plan: &InstrPlan, timings: &[Timing], progress: &mut dyn Progress) -> Counts {
    let none = |note: String| Counts { source: Source::None, note, per_step: None, counted_at: None };
    match plan {
        InstrPlan::None { reason } => none(format!("none: {reason}; time only")),
        InstrPlan::Perf(_) => {
            let hw = |s: Step| timings.iter().find(|t| t.target == Target::Step(s)).and_then(|t| t.hw_instructions);
            match Step::ALL.iter().map(|&s| hw(s)).collect::<Option<Vec<_>>>() {
                Some(v) => Counts {
                    source: Source::Perf,
                    note: "hardware INSTRUCTIONS counter (perf_event_open), in the timed runs".into(),
                    per_step: Some(std::array::from_fn(|s| v[s])),
                    counted_at: Some((cfg.warehouses, cfg.txns)),
                },
                None => none("none: the hardware counter stopped counting during the run; time only".into()),
            }
        }
        InstrPlan::Callgrind { exe, args, valgrind, perf_error } => {
            progress.phase("counting", Step::ALL.len() as u64);
            let mut per_step = [[0.0; 2]; 12];
            for step in Step::ALL {
                progress.status(&format!("step {step} under callgrind"));
                let t0 = Instant::now();
                match count_in_child(step, cfg, exe, args) {
                    Ok(c) => {
                        progress.done(&format!(
                            "step {:<35} payment {:>8.0} instr  neworder {:>8.0} instr  ({:.0}s)",
                            step.to_string(),
                            c[0],
                            c[1],
                            t0.elapsed().as_secs_f64()
                        ));
                        per_step[step.number() as usize] = c;
                    }
                    Err(e) => {
                        progress.finish();
                        return none(format!("none: counting with callgrind failed at step {step} ({e}); time only"));
                    }
                }
            }
            progress.finish();
            Counts {
                source: Source::Callgrind,
                note: format!(
                    "callgrind ({valgrind}), one child per step around the measured loop only; no hardware \
                     counter ({perf_error})"
                ),
                per_step: Some(per_step),
                counted_at: Some((cfg.count_warehouses, cfg.count_txns)),
            }
        }
    }
}

/// Runs the whole breakdown: every configuration timed in this process, then every step's
/// instructions counted (see [`InstrPlan`]), then the rows, shares and summary.
pub fn run(cfg: &BreakdownConfig, plan: InstrPlan, progress: &mut dyn Progress) -> Result<Breakdown, BreakdownError> {
    cfg.validate()?;
    let started = Instant::now();
    let streams = streams(cfg.warehouses, cfg.seed, cfg.warmup_txns, cfg.txns, cfg.reps)?;
    let mut plan = plan;
    let hw = match &mut plan {
        InstrPlan::Perf(h) => Some(h),
        _ => None,
    };
    let timings = time_all(cfg, &streams, hw, progress)?;
    let counts = count_all(cfg, &plan, &timings, progress);
    Ok(assemble(cfg, &timings, counts, started.elapsed().as_secs_f64()))
}

/// The report from the timings and counts.
fn assemble(cfg: &BreakdownConfig, timings: &[Timing], counts: Counts, seconds: f64) -> Breakdown {
    let find = |t: Target| timings.iter().find(|x| x.target == t).expect("every configuration is timed");
    let step_timing = |s: usize| find(Target::Step(Step::ALL[s]));
    // Time without disk waits: a flushing step's no-flush run stands in for it.
    let io_free = |s: usize| {
        let step = Step::ALL[s];
        timings.iter().find(|t| t.target == Target::NoFlush(step)).unwrap_or_else(|| step_timing(s))
    };
    let Counts { source, note, per_step, counted_at } = counts;

    let mut rows = Vec::new();
    let mut components = Vec::new();
    let mut figure8_time_shares = Vec::new();
    for (i, kind) in MEASURED.iter().enumerate() {
        let ns: [f64; 12] = std::array::from_fn(|s| step_timing(s).ns_per_txn[i]);
        let ns_io_free: [f64; 12] = std::array::from_fn(|s| io_free(s).ns_per_txn[i]);
        let instr: Option<[f64; 12]> = per_step.map(|c| std::array::from_fn(|s| c[s][i]));
        let time_steps = step_shares(&ns_io_free);
        let instr_steps = instr.as_ref().map(step_shares);
        for step in Step::ALL {
            let s = step.number() as usize;
            rows.push(Row {
                txn: kind.name(),
                step: step.number(),
                step_name: step.name(),
                instructions: instr.map(|v| v[s]),
                ns_per_txn: ns[s],
                ns_per_txn_no_flush: ns_io_free[s],
                ns_per_txn_reps: step_timing(s).ns_reps[i].clone(),
                cpu_ns_per_txn: step_timing(s).cpu_ns_per_txn[i],
                source,
                instructions_share_pct: instr_steps.and_then(|v| v[s]),
                time_share_pct: time_steps[s],
                warehouses_timed: cfg.warehouses,
                txns_timed: cfg.txns,
                reps: cfg.reps,
                warehouses_counted: counted_at.map(|c| c.0),
                txns_counted: counted_at.map(|c| c.1),
            });
        }
        let time_shares = component_shares(&ns_io_free);
        let instr_shares = instr.as_ref().map(component_shares);
        let row = |component, steps: &str, instr: Option<f64>, time, paper_pct| ComponentRow {
            txn: kind.name(),
            component,
            steps: steps.to_string(),
            instructions_share_pct: instr,
            time_share_pct: time,
            paper_pct,
        };
        for (c, comp) in COMPONENTS.iter().enumerate() {
            let steps = steps_label(comp.steps);
            let instr = instr_shares.map(|s| s.components[c]);
            components.push(row(comp.name, &steps, instr, time_shares.components[c], Some(comp.paper_pct[i])));
        }
        let instr = instr_shares.map(|s| s.remaining);
        let paper = Some(PAPER_REMAINING_PCT[i]);
        components.push(row(REMAINING, "10", instr, time_shares.remaining, paper));
        components.push(row("lean kernel", "11", instr_shares.map(|s| s.lean), time_shares.lean, None));
        for (cat, glass) in FIGURE8.iter().zip(figure8_shares(&time_shares)) {
            let steps = COMPONENTS
                .iter()
                .find(|c| c.name == cat.component)
                .map_or_else(|| "10".into(), |c| steps_label(c.steps));
            figure8_time_shares.push(TimeShareRow {
                txn: kind.name(),
                category: cat.name,
                component: cat.component,
                steps,
                time_share_pct: glass,
                paper_pct: (*kind == TxnKind::NewOrder).then_some(cat.paper_neworder_pct),
            });
        }
    }

    let full = step_timing(0).ns_per_txn;
    let no_flush = io_free(0).ns_per_txn;
    let stripped = step_timing(10).ns_per_txn;
    let lean = step_timing(11).ns_per_txn;
    let lean_prefetch = find(Target::LeanPrefetch).ns_per_txn;
    let full_instr = per_step.map(|c| c[0]);
    let summary = Summary {
        full_stack_fsync_txn_per_s: mix_txn_per_s(full),
        full_stack_no_flush_txn_per_s: mix_txn_per_s(no_flush),
        stripped_txn_per_s: mix_txn_per_s(stripped),
        lean_txn_per_s: mix_txn_per_s(lean),
        paper_txn_per_s: [
            PAPER_TXN_PER_S_FLUSH,
            PAPER_TXN_PER_S_NO_FLUSH,
            PAPER_TXN_PER_S_STRIPPED,
            PAPER_TXN_PER_S_OPTIMAL,
        ],
        full_over_lean_instructions: per_step.map(|c| ratio3(c[0], c[11])),
        full_over_lean_time: ratio3(full, lean),
        no_flush_over_lean_time: ratio3(no_flush, lean),
        full_over_stripped_instructions: per_step.map(|c| ratio3(c[0], c[10])),
        full_over_stripped_time: ratio3(full, stripped),
        no_flush_over_stripped_time: ratio3(no_flush, stripped),
        paper_full_over_stripped_instructions: paper_full_over_stripped_instructions(),
        paper_full_over_stripped_time: PAPER_FULL_OVER_STRIPPED_TIME,
        paper_no_flush_over_stripped_time: PAPER_NO_FLUSH_OVER_STRIPPED_TIME,
        paper_full_over_lean_time: PAPER_FULL_OVER_OPTIMAL_TIME,
        paper_no_flush_over_lean_time: PAPER_NO_FLUSH_OVER_OPTIMAL_TIME,
        lean_prefetch_txn_per_s: mix_txn_per_s(lean_prefetch),
        full_over_lean_prefetch_time: ratio3(full, lean_prefetch),
        no_flush_over_lean_prefetch_time: ratio3(no_flush, lean_prefetch),
        lean_prefetch_in_ratios: false,
        full_stack_instructions: full_instr,
        shore_instructions: PAPER_INSTRUCTIONS,
        shore_over_full_stack_instructions: full_instr.map(|g| [0, 1].map(|i| PAPER_INSTRUCTIONS[i] / g[i])),
    };
    Breakdown {
        seed: cfg.seed,
        warehouses: cfg.warehouses,
        txns: cfg.txns,
        reps: cfg.reps,
        source,
        source_note: note,
        rows,
        components,
        full_stack_no_flush_ns_per_txn: no_flush,
        lean_prefetch_ns_per_txn: lean_prefetch,
        prefetch_note: PREFETCH_NOTE.to_string(),
        figure8_time_shares,
        summary,
        seconds,
    }
}

/// How prefetching was treated (the report's and the JSON's words).
const PREFETCH_NOTE: &str = "only the lean kernel prefetches; step 11 is timed and counted without prefetching \
     (its prefetch hints are dropped), like every other configuration, and the ratios and shares use that figure; \
     the lean kernel with prefetching is timed once more and reported apart (the lines marked prefetching)";

fn steps_label((a, b): (u8, u8)) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a}-{b}")
    }
}

/// Width the report's closing notes are wrapped to.
const NOTE_WIDTH: usize = 110;

/// Breaks `text` into lines of at most `width` characters at spaces (a longer word stays whole).
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line_len = 0;
    for word in text.split_whitespace() {
        let n = word.chars().count();
        if line_len > 0 && line_len + 1 + n > width {
            out.push('\n');
            line_len = 0;
        } else if line_len > 0 {
            out.push(' ');
            line_len += 1;
        }
        out.push_str(word);
        line_len += n;
    }
    out
}

/// Groups digits: 1234567 → "1,234,567".
fn thousands(x: f64) -> String {
    let n = x.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".to_string(), |v| format!("{v:.1}%"))
}

fn title(kind: TxnKind) -> &'static str {
    match kind {
        TxnKind::Payment => "Payment (the paper's Figure 5; Shore ≈180K instructions)",
        _ => "NewOrder (the paper's Figure 6; Shore ≈1.73M instructions)",
    }
}

/// The text report: per transaction type the staircase and the components beside the
/// paper's shares, then the summary.
pub fn render(b: &Breakdown) -> String {
    let mut s = String::new();
    let counted = b.rows.first().and_then(|r| r.warehouses_counted.zip(r.txns_counted));
    let _ = writeln!(
        s,
        "\nseed {}; timed at {} warehouses, {} transactions per type x {} repetitions (median)",
        b.seed, b.warehouses, b.txns, b.reps
    );
    let _ = writeln!(s, "instructions: {}", b.source_note);
    if let (Source::Callgrind, Some((w, n))) = (b.source, counted) {
        let _ = write!(s, "  counted at {w} warehouse(s), {n} transactions per type");
        if w != b.warehouses {
            let _ = write!(
                s,
                "; instructions per transaction depend on the database size only through B+tree depth (about \
                 3-10% more at 5 warehouses than at 1 on this stack)"
            );
        }
        let _ = writeln!(s);
    }
    for kind in MEASURED {
        let _ = writeln!(s, "\n{}", title(kind));
        let _ = writeln!(
            s,
            "{:>4}  {:<13} {:>10} {:>11} {:>10} {:>11} {:>10}  source",
            "step", "removed", "instr/txn", "instr share", "ns/txn", "ns no-flush", "time share"
        );
        for r in b.rows.iter().filter(|r| r.txn == kind.name()) {
            let share = |v: Option<f64>, measured: bool| match (v, measured) {
                (_, false) => "n/a".to_string(),
                (None, true) => "base".to_string(),
                (Some(v), true) => format!("{v:.1}%"),
            };
            let _ = writeln!(
                s,
                "{:>4}  {:<13} {:>10} {:>11} {:>10} {:>11} {:>10}  {}",
                r.step,
                r.step_name,
                r.instructions.map_or_else(|| "n/a".to_string(), thousands),
                share(r.instructions_share_pct, r.instructions.is_some()),
                thousands(r.ns_per_txn),
                thousands(r.ns_per_txn_no_flush),
                share(r.time_share_pct, true),
                r.source.name()
            );
        }
        let _ = writeln!(
            s,
            "\n      {:<28} {:>5} {:>12} {:>11} {:>12}",
            "component", "steps", "glass instr", "glass time", "paper instr"
        );
        for c in b.components.iter().filter(|c| c.txn == kind.name()) {
            let _ = writeln!(
                s,
                "      {:<28} {:>5} {:>12} {:>11} {:>12}",
                c.component,
                c.steps,
                pct(c.instructions_share_pct),
                format!("{:.1}%", c.time_share_pct),
                c.paper_pct.map_or_else(|| "-".to_string(), |v| format!("{v:.1}%"))
            );
        }
        let paper_header = match kind {
            TxnKind::NewOrder => "paper cycles (Fig. 8)",
            _ => "paper (no Figure 8)",
        };
        let _ = writeln!(
            s,
            "\n      {:<13} {:<28} {:>5} {:>11} {:>22}",
            "time share", "glass component", "steps", "glass time", paper_header
        );
        for t in b.figure8_time_shares.iter().filter(|t| t.txn == kind.name()) {
            let _ = writeln!(
                s,
                "      {:<13} {:<28} {:>5} {:>11} {:>22}",
                t.category,
                t.component,
                t.steps,
                format!("{:.1}%", t.time_share_pct),
                t.paper_pct.map_or_else(|| "-".to_string(), |v| format!("{v:.1}%"))
            );
        }
    }

    let m = &b.summary;
    let _ = writeln!(s, "\ninstructions per transaction, full stack (step 0) against Shore's (Sections 4.3.2-4.3.3)");
    for (i, kind) in MEASURED.iter().enumerate() {
        let _ = writeln!(
            s,
            "  {:<10} glass {:>10}   Shore {:>10}   Shore / glass {}",
            kind.name(),
            m.full_stack_instructions.map_or_else(|| "n/a".to_string(), |g| thousands(g[i])),
            thousands(m.shore_instructions[i]),
            m.shore_over_full_stack_instructions.map_or_else(|| "n/a".to_string(), |r| format!("{:.1}x", r[i]))
        );
    }

    let _ = writeln!(s, "\nsummary (the paper's 50/50 NewOrder/Payment mix, from the per-type times)");
    let line = |s: &mut String, what: &str, glass: f64, paper: &str| {
        let _ = writeln!(s, "  {:<42} {:>9} txn/s   (paper: {paper})", what, thousands(glass));
    };
    let paper_tps = |x: f64| format!("Shore {} txn/s", thousands(x));
    line(
        &mut s,
        "full stack, log flushed to disk (fsync)",
        m.full_stack_fsync_txn_per_s,
        &paper_tps(m.paper_txn_per_s[0]),
    );
    line(&mut s, "full stack, no log flush", m.full_stack_no_flush_txn_per_s, &paper_tps(m.paper_txn_per_s[1]));
    line(&mut s, "stripped conventional stack (step 10)", m.stripped_txn_per_s, &paper_tps(m.paper_txn_per_s[2]));
    line(
        &mut s,
        "lean kernel (step 11, without prefetching)",
        m.lean_txn_per_s,
        &format!("hand-built optimal kernel {} txn/s", thousands(m.paper_txn_per_s[3])),
    );
    line(&mut s, "lean kernel with prefetching (extra line)", m.lean_prefetch_txn_per_s, "-");

    let header = |s: &mut String, title: &str| {
        let _ = writeln!(s, "\n{title}");
        let _ = writeln!(
            s,
            "  {:<32} {:>9} {:>9} {:>9}   {:>9} {:>9} {:>9}",
            "", "payment", "neworder", "mix", "paper pay", "paper new", "paper mix"
        );
    };
    let x = |v: f64| format!("{v:.1}x");
    let ratio_line = |s: &mut String, what: &str, glass: Option<[f64; 3]>, paper: [Option<f64>; 3]| {
        let g = |i: usize| glass.map_or_else(|| "n/a".to_string(), |r| x(r[i]));
        let p = |i: usize| paper[i].map_or_else(|| "-".to_string(), x);
        let _ = writeln!(s, "  {:<32} {:>9} {:>9} {:>9}   {:>9} {:>9} {:>9}", what, g(0), g(1), g(2), p(0), p(1), p(2));
    };
    let mix_only = |v: f64| [None, None, Some(v)];
    header(&mut s, "full stack / stripped stack (step 0 / step 10; the paper's ~20x: Shore 640 -> 12,700 txn/s)");
    ratio_line(
        &mut s,
        "instructions",
        m.full_over_stripped_instructions,
        m.paper_full_over_stripped_instructions.map(Some),
    );
    ratio_line(
        &mut s,
        "time, log flushed (fsync)",
        Some(m.full_over_stripped_time),
        mix_only(m.paper_full_over_stripped_time),
    );
    ratio_line(
        &mut s,
        "time, no log flush",
        Some(m.no_flush_over_stripped_time),
        mix_only(m.paper_no_flush_over_stripped_time),
    );
    header(
        &mut s,
        "full stack / lean kernel (step 0 / step 11 without prefetching; the paper's optimal kernel: 640 -> 46,500 txn/s)",
    );
    ratio_line(&mut s, "instructions", m.full_over_lean_instructions, [None; 3]);
    ratio_line(&mut s, "time, log flushed (fsync)", Some(m.full_over_lean_time), mix_only(m.paper_full_over_lean_time));
    ratio_line(
        &mut s,
        "time, no log flush",
        Some(m.no_flush_over_lean_time),
        mix_only(m.paper_no_flush_over_lean_time),
    );
    ratio_line(&mut s, "time, fsync, lean prefetching", Some(m.full_over_lean_prefetch_time), [None; 3]);
    ratio_line(&mut s, "time, no flush, lean prefetching", Some(m.no_flush_over_lean_prefetch_time), [None; 3]);
    let _ = writeln!(
        s,
        "\nshare = (cost before the step - cost after it) / full stack; components group the steps as the \
         paper's Figure 7;\n\"remaining\" is the stripped stack (step 10) over the full stack, as the paper's \
         remaining overhead\n(Figure 8's useful work; Figure 8's buffer pool is the buffer manager, steps 7-10);\n\
         time shares use the no-flush times (steps 0-1 rerun with the log flush off), as the paper's breakdowns \
         exclude disk I/O;\ntimes are wall-clock medians of the repetitions; the paper's time ratios exist for the \
         mix only (its throughputs),\nand it counts no instructions of its optimal kernel (\"-\").\n{}.",
        wrap(&format!("prefetching: {}", b.prefetch_note), NOTE_WIDTH)
    );
    s
}

/// Output paths are checked before any work so a bad path fails fast and writes nothing.
pub fn check_writable_file(path: &Path) -> Result<(), BreakdownError> {
    let err = |why: &str| BreakdownError::Output { path: path.to_path_buf(), why: why.to_string() };
    if path.is_dir() {
        return Err(err("it is a directory"));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(err("its directory does not exist"));
    }
    let probe = parent.join(format!(".glass-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| err(&e.to_string()))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// The temporary sibling `path` is written to before the rename.
fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(OsString::from).unwrap_or_default();
    name.push(format!(".tmp-glass-{}", std::process::id()));
    path.with_file_name(name)
}

/// Writes `bytes` to `path` atomically (temporary file, then rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), BreakdownError> {
    let tmp = tmp_path(path);
    std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path)).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        BreakdownError::Output { path: path.to_path_buf(), why: e.to_string() }
    })
}

/// Writes the report as JSON (atomically).
pub fn write_json(b: &Breakdown, path: &Path) -> Result<(), BreakdownError> {
    let mut bytes = serde_json::to_vec_pretty(b)
        .map_err(|e| BreakdownError::Output { path: path.to_path_buf(), why: e.to_string() })?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Draws the stacked bars (atomically: drawn to a temporary file, then renamed).
pub fn write_svg(b: &Breakdown, path: &Path) -> Result<(), BreakdownError> {
    let tmp = tmp_path(path);
    plot::draw(b, &tmp).map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        BreakdownError::Plot { path: path.to_path_buf(), source }
    })?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        BreakdownError::Output { path: path.to_path_buf(), why: e.to_string() }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figure 5's Payment staircase rebuilt from the paper's shares: the arithmetic must give
    /// them back, and components plus remaining must sum to 100% (the staircase telescopes).
    #[test]
    fn shares_of_a_staircase_telescope_to_the_whole() {
        let full = 180_000.0;
        let steps_pct = [10.1, 5.0, 10.0, 2.7, 25.2, 12.6, 10.0, 5.0, 4.8, 10.0];
        let mut v = [0.0; 12];
        v[0] = full;
        for s in 1..=10 {
            v[s] = v[s - 1] - steps_pct[s - 1] * full / 100.0;
        }
        v[11] = 0.01 * full;
        let sh = component_shares(&v);
        let expect = [10.1, 17.7, 25.2, 12.6, 29.8];
        for (got, want) in sh.components.iter().zip(expect) {
            assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        }
        assert!((sh.remaining - 4.6).abs() < 1e-9);
        assert!((sh.components.iter().sum::<f64>() + sh.remaining - 100.0).abs() < 1e-9);
        assert!((sh.lean - 1.0).abs() < 1e-9);
        let per_step = step_shares(&v);
        assert_eq!(per_step[0], None);
        assert!((per_step[3].unwrap() - 10.0).abs() < 1e-9);
    }

    #[test]
    fn a_step_that_adds_work_has_a_negative_share() {
        let mut v = [100.0; 12];
        v[7] = 110.0; // bigger pages cost more here
        let sh = component_shares(&v);
        assert!((sh.components[4] - 0.0).abs() < 1e-9, "7..=10 ends where it started");
        assert!((step_shares(&v)[7].unwrap() + 10.0).abs() < 1e-9);
    }

    #[test]
    fn the_paper_components_cover_steps_one_to_ten_once_and_sum_with_remaining_to_100() {
        let mut next = 1;
        for c in COMPONENTS {
            assert_eq!(c.steps.0, next);
            next = c.steps.1 + 1;
        }
        assert_eq!(next, 11);
        for (i, remaining) in PAPER_REMAINING_PCT.iter().enumerate() {
            let sum: f64 = COMPONENTS.iter().map(|c| c.paper_pct[i]).sum::<f64>() + remaining;
            assert!((sum - 100.0).abs() < 0.2, "{sum}");
        }
    }

    /// Steps 0 and 1 flush the log; their no-flush runs feed the time shares and the 1,700
    /// txn/s baseline, while the rows keep the flushed times.
    #[test]
    fn assembly_substitutes_the_no_flush_runs_for_the_time_shares() {
        let targets = timing_targets();
        assert_eq!(targets.len(), 15);
        assert_eq!(targets[1], Target::NoFlush(Step::FULL_STACK));
        assert_eq!(targets[13..], [Target::Step(Step::LEAN_KERNEL), Target::LeanPrefetch]);
        let ns = |t: Target| match t {
            Target::Step(s) => 1000.0 * (12 - s.number()) as f64 + if s.number() < 2 { 1e6 } else { 0.0 },
            Target::NoFlush(s) => 1000.0 * (12 - s.number()) as f64,
            Target::LeanPrefetch => 500.0,
        };
        let timings: Vec<Timing> = targets
            .iter()
            .map(|&t| Timing {
                target: t,
                ns_per_txn: [ns(t), 2.0 * ns(t)],
                ns_reps: Default::default(),
                cpu_ns_per_txn: [1.0, 1.0],
                hw_instructions: None,
                load_seconds: 0.0,
            })
            .collect();
        let cfg = tiny_config();
        let counts = Counts { source: Source::None, note: "none".into(), per_step: None, counted_at: None };
        let b = assemble(&cfg, &timings, counts, 0.0);
        assert_eq!(b.rows.len(), 24);
        let r0 = &b.rows[0];
        assert_eq!((r0.txn, r0.step, r0.ns_per_txn, r0.ns_per_txn_no_flush), ("payment", 0, 1_012_000.0, 12_000.0));
        assert!(b.rows.iter().all(|r| r.instructions.is_none() && r.source == Source::None));
        // Each no-flush step removes 1000 ns of 12000: every step's time share is 1/12.
        assert!(b.rows.iter().filter(|r| r.step > 0).all(|r| (r.time_share_pct.unwrap() - 100.0 / 12.0).abs() < 1e-9));
        assert!((b.summary.full_stack_no_flush_txn_per_s - 2e9 / 36_000.0).abs() < 1e-6);
        assert!((b.summary.full_over_lean_time[2] - 3_036_000.0 / 3_000.0).abs() < 1e-9);
        assert!(b.summary.full_over_lean_instructions.is_none());
        // Step 10 takes 2000 ns (Payment) and 4000 ns (NewOrder); the full stack without the
        // flush 12000 and 24000: six times as long.
        assert!(b.summary.full_over_stripped_time.iter().all(|r| (r - 1_012_000.0 / 2_000.0).abs() < 1e-9));
        assert!(b.summary.no_flush_over_stripped_time.iter().all(|r| (r - 6.0).abs() < 1e-9));
        assert!(b.summary.full_over_stripped_instructions.is_none());
        assert!(b.summary.full_stack_instructions.is_none() && b.summary.shore_over_full_stack_instructions.is_none());
        // The step 11 rows are the lean kernel without prefetching; with it is apart.
        assert_eq!(b.rows[11].ns_per_txn, 1000.0);
        assert_eq!(b.lean_prefetch_ns_per_txn, [500.0, 1000.0]);
        assert!((b.summary.lean_prefetch_txn_per_s - 2e9 / 1_500.0).abs() < 1e-6);
        assert!((b.summary.no_flush_over_lean_prefetch_time[0] - 24.0).abs() < 1e-9);
        assert!(!b.summary.lean_prefetch_in_ratios);
        // Figure 8: six categories per type, summing to 100%; the paper's only for NewOrder.
        assert_eq!(b.figure8_time_shares.len(), 12);
        for kind in MEASURED {
            let rows: Vec<_> = b.figure8_time_shares.iter().filter(|t| t.txn == kind.name()).collect();
            let sum: f64 = rows.iter().map(|t| t.time_share_pct).sum();
            assert!((sum - 100.0).abs() < 1e-9, "{sum}");
            assert!(rows.iter().all(|t| t.paper_pct.is_some() == (kind == TxnKind::NewOrder)));
        }
        let useful = b.figure8_time_shares.iter().find(|t| t.category == "useful work").unwrap();
        assert_eq!((useful.steps.as_str(), useful.time_share_pct), ("10", 2_000.0 * 100.0 / 12_000.0));
        let text = render(&b);
        assert!(text.contains("n/a"));
        assert!(text.contains("full stack / stripped stack") && text.contains("full stack / lean kernel"));
        assert!(text.contains("useful work") && text.contains("paper cycles (Fig. 8)"));
        assert!(text.contains("prefetching"));
    }

    /// With counts: the instruction ratios and the full stack beside Shore.
    #[test]
    fn assembly_with_counts_gives_instruction_ratios_and_shore_comparison() {
        let timings: Vec<Timing> = timing_targets()
            .into_iter()
            .map(|t| Timing {
                target: t,
                ns_per_txn: [1.0, 1.0],
                ns_reps: Default::default(),
                cpu_ns_per_txn: [1.0, 1.0],
                hw_instructions: None,
                load_seconds: 0.0,
            })
            .collect();
        let mut per_step = [[0.0; 2]; 12];
        for (s, c) in per_step.iter_mut().enumerate() {
            *c = [18_000.0 - 1_000.0 * s as f64, 173_000.0 - 10_000.0 * s as f64];
        }
        let counts =
            Counts { source: Source::Callgrind, note: "cg".into(), per_step: Some(per_step), counted_at: Some((1, 5)) };
        let b = assemble(&tiny_config(), &timings, counts, 0.0);
        let m = &b.summary;
        let r = m.full_over_stripped_instructions.unwrap();
        assert!((r[0] - 18.0 / 8.0).abs() < 1e-9 && (r[1] - 173.0 / 73.0).abs() < 1e-9);
        assert!((r[2] - 191.0 / 81.0).abs() < 1e-9);
        let l = m.full_over_lean_instructions.unwrap();
        assert!((l[0] - 18.0 / 7.0).abs() < 1e-9);
        assert_eq!(m.full_stack_instructions, Some([18_000.0, 173_000.0]));
        let shore = m.shore_over_full_stack_instructions.unwrap();
        assert!((shore[0] - 10.0).abs() < 1e-9 && (shore[1] - 10.0).abs() < 1e-9);
        let text = render(&b);
        assert!(text.contains("Shore / glass 10.0x") && text.contains("1,730,000"), "{text}");
    }

    #[test]
    fn ratios_are_per_type_then_for_the_mix() {
        assert_eq!(ratio3([2.0, 6.0], [1.0, 2.0]), [2.0, 3.0, 8.0 / 3.0]);
        // The paper's: 640 -> 12,700 txn/s is its ≈20x; the optimal kernel 73x and 27x.
        assert!((PAPER_FULL_OVER_STRIPPED_TIME - 19.84).abs() < 0.01);
        assert!((PAPER_NO_FLUSH_OVER_STRIPPED_TIME - 7.47).abs() < 0.01);
        assert!((PAPER_FULL_OVER_OPTIMAL_TIME - 72.66).abs() < 0.01);
        assert!((PAPER_NO_FLUSH_OVER_OPTIMAL_TIME - 27.35).abs() < 0.01);
        // Figures 5 and 6: the stripped system keeps 4.7% (Payment) and 6.8% (NewOrder).
        let p = paper_full_over_stripped_instructions();
        assert!((p[0] - 100.0 / 4.7).abs() < 1e-9 && (p[1] - 100.0 / 6.8).abs() < 1e-9);
        let mix = (180_000.0 + 1_730_000.0) / (0.047 * 180_000.0 + 0.068 * 1_730_000.0);
        assert!((p[2] - mix).abs() < 1e-9, "{} vs {mix}", p[2]);
    }

    #[test]
    fn figure8_maps_every_component_and_the_stripped_stack_once_and_sums_to_100() {
        let paper: f64 = FIGURE8.iter().map(|c| c.paper_neworder_pct).sum();
        assert!((paper - 100.0).abs() < 0.05, "{paper}");
        let mut names: Vec<&str> = COMPONENTS.iter().map(|c| c.name).collect();
        names.push(REMAINING);
        let mapped: Vec<&str> = FIGURE8.iter().map(|c| c.component).collect();
        assert_eq!(mapped, names, "each component once, in order, then the stripped stack");
        assert_eq!(FIGURE8[4].name, "buffer pool");
        assert_eq!(FIGURE8[5].name, "useful work");
        // A staircase telescopes: the mapped shares sum to 100% and land where they belong.
        let v = [100.0, 92.0, 71.0, 70.0, 69.0, 50.0, 40.0, 35.0, 30.0, 20.0, 12.0, 3.0];
        let sh = component_shares(&v);
        let f8 = figure8_shares(&sh);
        assert!((f8.iter().sum::<f64>() - 100.0).abs() < 1e-9);
        assert_eq!(f8, [8.0, 23.0, 19.0, 10.0, 28.0, 12.0]);
    }

    /// The smallest valid settings.
    fn tiny_config() -> BreakdownConfig {
        BreakdownConfig {
            warehouses: 1,
            txns: 1,
            reps: 1,
            warmup_txns: 0,
            count_warehouses: 1,
            count_txns: 1,
            count_warmup_txns: 0,
            seed: 1,
            work_dir: std::env::temp_dir(),
        }
    }

    #[test]
    fn median_and_thousands() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(thousands(1_730_000.4), "1,730,000");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(wrap("ab cd  ef\ngh", 5), "ab cd\nef gh");
        assert_eq!(wrap("abcdefg h", 3), "abcdefg\nh");
    }

    #[test]
    fn zero_settings_are_refused_naming_the_flag() {
        let cfg = tiny_config();
        assert!(cfg.validate().is_ok());
        let e = BreakdownConfig { warehouses: 0, ..cfg.clone() }.validate().unwrap_err();
        assert_eq!(e.to_string(), "--warehouses must be at least 1");
        let e = BreakdownConfig { count_txns: 0, ..cfg }.validate().unwrap_err();
        assert!(e.to_string().starts_with("--count-txns"));
    }

    #[test]
    fn streams_hold_only_the_measured_type_and_the_same_inputs_for_every_configuration() {
        let a = streams(2, 7, 10, 5, 2).unwrap();
        let b = streams(2, 7, 10, 5, 2).unwrap();
        assert_eq!(a.warmup, b.warmup);
        for (i, kind) in MEASURED.iter().enumerate() {
            assert_eq!(a.measured[i].len(), 10);
            assert!(a.measured[i].iter().all(|t| t.kind() == *kind));
            assert_eq!(a.measured[i], b.measured[i]);
        }
    }
}
