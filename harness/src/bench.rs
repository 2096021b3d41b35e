//! The embedded bench's decisions and runs (`glass bench --embedded`). Owns what runs the
//! transactions, decided from the flags in one place ([`target`]: the lean kernel, or the
//! conventional stack at one of the paper's switch steps, docs/design.md §9), the warm-up
//! ([`warmup`]: seconds, or with `--txns` transactions, §12 "Determinism at the front door"),
//! the check of the dump folder before any work, and the runs: the lean kernel's
//! ([`run_lean`]) and the conventional stack's ([`run_conventional`]: loaded through one
//! session outside any transaction — a bulk load, not logged — checkpointed so the loaded
//! data is durable, driven by the workers, and summarised with what its components did).
//!
//! Restart recovery of such a database (`glass recover`) is checked and said here too
//! ([`recovery_config`], [`render_recovery`]).
//!
//! Guarantees: every combination of flags the target cannot run is refused before anything is
//! written, by a message naming the flags; the stack's lines under the bench's table are
//! computed from the run's own counters (warm-up included, as they say). It prints nothing:
//! the lines worth saying while the stack loads go to the caller's `say`, and the summary comes
//! back as text.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use engine::conventional::{
    Config, ConventionalDb, Counters, LatchKind, RecoveryReport, Step, LOG_FILE, SNAPSHOT_FILE,
};
use engine::procedures::{TxnInput, TxnOutput};
use engine::{LeanDb, Storage};
use workload::bench::{self, BenchConfig, BenchReport, Observer};
use workload::{report, workers};

use crate::acks::AckLog;
use crate::error::HarnessError;
use crate::html::Check;
use crate::scratch::Scratch;
use crate::Result;

/// `--warmup`'s default.
pub const WARMUP_SECONDS_DEFAULT: f64 = 2.0;
/// `--warmup-txns`' default.
pub const WARMUP_TXNS_DEFAULT: u64 = 1000;

/// The warm-up of an embedded bench from `--txns`, `--warmup` and `--warmup-txns`: seconds,
/// or — with `--txns` — transactions.
pub fn warmup(txns: Option<u64>, warmup: Option<f64>, warmup_txns: Option<u64>) -> Result<(f64, Option<u64>)> {
    match (txns, warmup, warmup_txns) {
        (Some(_), Some(s), None) if s != 0.0 => Err(HarnessError::Invalid(format!(
            "with --txns the warm-up is counted in transactions, so the run depends only on the seed: use \
             --warmup-txns instead of --warmup {s}"
        ))),
        // `--warmup 0`: no warm-up at all, which is deterministic too.
        (Some(_), Some(_), None) => Ok((0.0, Some(0))),
        (Some(_), _, n) => Ok((0.0, Some(n.unwrap_or(WARMUP_TXNS_DEFAULT)))),
        (None, s, _) => Ok((s.unwrap_or(WARMUP_SECONDS_DEFAULT), None)),
    }
}

/// What runs the transactions.
#[derive(Debug, Clone)]
pub enum Target {
    /// The lean kernel (`--engine lean`, or `--engine conventional --step 11`).
    Lean {
        step: Option<Step>,
    },
    Conventional {
        step: Step,
        config: Config,
    },
}

/// The flags [`target`] decides from.
#[derive(Debug, Clone)]
pub struct TargetFlags<'a> {
    /// `--engine conventional` (else the lean kernel).
    pub conventional: bool,
    pub step: Option<u8>,
    pub workers: usize,
    pub buffer_pool_mb: Option<u64>,
    pub no_log_flush: bool,
    pub latch: LatchKind,
    pub wal_dir: Option<&'a Path>,
    pub ack_log: Option<&'a Path>,
}

/// What runs the transactions, decided from the flags; every combination it cannot run
/// refused, naming the flags.
pub fn target(a: &TargetFlags<'_>) -> Result<Target> {
    let invalid = |s: String| Err(HarnessError::Invalid(s));
    if a.workers == 0 {
        return invalid("--workers must be at least 1".into());
    }
    if a.workers > workers::WORKERS_MAX {
        return invalid(format!("--workers must be at most {}, not {}", workers::WORKERS_MAX, a.workers));
    }
    let target = if !a.conventional {
        if let Some(n) = a.step {
            return invalid(format!("--step {n} applies only to --engine conventional"));
        }
        Target::Lean { step: None }
    } else {
        let n = a.step.unwrap_or(0);
        let Some(step) = Step::new(n) else {
            return invalid(format!("--step must be 0 to 11 (11 = the lean kernel), not {n}"));
        };
        if step.runs_lean_kernel() {
            Target::Lean { step: Some(step) }
        } else {
            let mut config = Config::for_step(step, a.workers);
            if a.no_log_flush {
                config.switches.log_flush = false;
            }
            config.latch = a.latch;
            if let Some(mb) = a.buffer_pool_mb {
                if !config.switches.buffer_pool {
                    return invalid(format!(
                        "--buffer-pool-mb needs the buffer pool, which --step {n} removes (steps 0 to 9 keep it)"
                    ));
                }
                config.buffer_pool_bytes = Some(mb.saturating_mul(1 << 20));
            }
            config.validate().map_err(|source| HarnessError::ConventionalWith {
                what: format!("--step {n} with --workers {} and --buffer-pool-mb", a.workers),
                source,
            })?;
            Target::Conventional { step, config }
        }
    };
    match &target {
        Target::Lean { step } => {
            let what = if step.is_some() { "step 11 (the lean kernel)" } else { "the lean kernel" };
            for (given, flag) in [
                (a.buffer_pool_mb.is_some(), "--buffer-pool-mb"),
                (a.no_log_flush, "--no-log-flush"),
                (a.latch != LatchKind::Mutex, "--latch"),
            ] {
                if given {
                    return invalid(format!(
                        "{what} has no buffer pool, log or latches: {flag} applies only to --engine conventional"
                    ));
                }
            }
            if a.workers > 1 {
                return invalid(format!(
                    "{what} runs one thread: --workers {} needs --engine conventional at steps 0–4",
                    a.workers
                ));
            }
            if a.wal_dir.is_some() {
                return invalid(format!("{what} keeps no log: --wal-dir applies only to --engine conventional"));
            }
            if a.ack_log.is_some() {
                return invalid("--ack-log needs --engine conventional at a durable step (0 or 1)".into());
            }
        }
        Target::Conventional { step, config } => {
            if a.ack_log.is_some() && !config.switches.durable() {
                return invalid(format!(
                    "--ack-log needs a durable step (0 or 1); step {step} loses commits in a crash"
                ));
            }
            if let Some(dir) = a.wal_dir {
                Scratch::check_wal_dir(dir)?;
            }
            if let Some(p) = a.ack_log {
                bench::check_writable_file(p)
                    .map_err(|source| HarnessError::Output { what: "--ack-log".into(), source })?;
            }
        }
    }
    Ok(target)
}

/// Refuses a `--dump` folder that cannot be written.
pub fn check_dump_dir(dir: &Path) -> Result<()> {
    let refuse = |why: &str| Err(HarnessError::Invalid(format!("cannot write --dump {}: {why}", dir.display())));
    if dir.exists() && !dir.is_dir() {
        return refuse("it exists and is not a directory");
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).map(PathBuf::from).unwrap_or(".".into());
    if !parent.is_dir() {
        return refuse("its parent directory does not exist");
    }
    bench::check_writable_file(&parent.join("probe")).or_else(|_| refuse("its parent directory is not writable"))
}

/// An embedded run: its database (for the checks and the dump after it), its report, and the
/// summary to print (the bench's table, and on the conventional stack its own lines).
pub struct Ran<D> {
    pub db: D,
    pub report: BenchReport,
    pub summary: String,
}

/// Loads the lean kernel and runs the bench on it, one thread (`step`: reached as the
/// conventional stack's step 11).
pub fn run_lean(cfg: &BenchConfig, step: Option<Step>, obs: &mut dyn Observer) -> Result<Ran<LeanDb>> {
    let mut db = LeanDb::new();
    let t0 = Instant::now();
    bench::load(&mut db, cfg.warehouses, cfg.seed, obs)?;
    let load_s = t0.elapsed().as_secs_f64();
    let mut report = bench::run(&mut db, cfg, bench::RunKind::Embedded, load_s, obs)?;
    report.engine = Some("lean".into());
    report.step = step.map(Step::number);
    report.workers = Some(1);
    let summary = report::render(&report);
    Ok(Ran { db, report, summary })
}

/// Opens the conventional stack at `step` with `config` in `wal`, loads it, checkpoints it
/// (where the configuration can), and runs the bench's workers, one session each; every
/// commit of a NewOrder or Payment is appended to `ack` when given. What is worth saying
/// before the measured phase (the engine, the checkpoint, the buffer pool) goes to `say`.
pub fn run_conventional(
    cfg: &BenchConfig,
    step: Step,
    config: Config,
    wal: &Path,
    ack: Option<&AckLog>,
    obs: &mut dyn Observer,
    say: &mut dyn FnMut(&str),
) -> Result<Ran<Arc<ConventionalDb>>> {
    let durable = config.switches.durable();
    let workers = config.workers;
    let pool = match config.buffer_pool_bytes.filter(|_| config.switches.buffer_pool) {
        Some(b) => format!(", buffer pool {} MiB", b >> 20),
        None if config.switches.buffer_pool => ", buffer pool unbounded".to_string(),
        None => String::new(),
    };
    say(&format!(
        "engine: conventional stack, step {step}{}, {workers} worker{}{pool}, {:?} latches{}",
        if config.switches.log_flush || step.number() >= 2 { "" } else { " without log flush" },
        if workers == 1 { "" } else { "s" },
        config.latch,
        if durable { format!(", log in {}", wal.display()) } else { String::new() }
    ));
    let db = ConventionalDb::open(wal, config).map_err(|source| HarnessError::ConventionalWith {
        what: format!("open the conventional stack in {}", wal.display()),
        source,
    })?;
    let t0 = Instant::now();
    {
        let mut loader = db.session()?;
        bench::load(&mut loader, cfg.warehouses, cfg.seed, obs)?;
    }
    if db.checkpoint_unavailable().is_none() {
        let t1 = Instant::now();
        db.checkpoint()
            .map_err(|source| HarnessError::ConventionalWith { what: "checkpoint after the load".into(), source })?;
        let bytes = std::fs::metadata(wal.join(SNAPSHOT_FILE)).map_or(0, |m| m.len());
        say(&format!(
            "checkpoint after the load: {:.0} MiB in {:.1} s",
            bytes as f64 / (1 << 20) as f64,
            t1.elapsed().as_secs_f64()
        ));
    }
    let load_s = t0.elapsed().as_secs_f64();
    if let Some(frames) = db.buffer_pool_frames_used() {
        let page = db.switches().page_bytes() as u64;
        say(&format!(
            "buffer pool after the load: {frames} frames of {} KiB ({:.0} MiB){}",
            page >> 10,
            (frames * page) as f64 / (1 << 20) as f64,
            if db.config().buffer_pool_bytes.is_some() { "" } else { ": the whole database" }
        ));
    }

    let before = db.counters();
    let sessions = (0..workers).map(|_| db.session()).collect::<Result<Vec<_>, _>>()?;
    let on_commit = |input: &TxnInput, output: &TxnOutput| match ack {
        Some(log) => log.acknowledge(input, output),
        None => Ok(()),
    };
    let mut report = workers::run(sessions, cfg, bench::RunKind::Embedded, load_s, obs, &on_commit)?;
    let c = db.counters().since(&before);
    report.engine = Some("conventional".into());
    report.step = Some(step.number());
    report.log_bytes = Some(c.log_bytes_written);
    report.fsyncs = Some(c.fsyncs);
    let summary = summary(&report, step, workers, &c);
    Ok(Ran { db, report, summary })
}

/// `--check` after an embedded run (or a recovery): TPC-C's consistency conditions over `db`
/// (clause 3.3.2) as printed, and the check they are kept as in the run record.
pub fn consistency<S: Storage>(db: &mut S) -> (String, Check) {
    let r = engine::check::check(db);
    let what = "TPC-C consistency conditions 1–10 and 12 (clause 3.3.2)";
    (format!("\nTPC-C consistency (clause 3.3.2):\n{r}"), Check { what: what.into(), passed: r.all_passed() })
}

/// The configuration `glass recover` opens `wal_dir` with at step `n` (`--step`): refuses a
/// step without a durable log, and a directory that holds no database, before recovery
/// changes anything.
pub fn recovery_config(wal_dir: &Path, n: u8) -> Result<(Step, Config)> {
    let invalid = |s: String| Err(HarnessError::Invalid(s));
    let Some(step) = Step::new(n) else { return invalid(format!("--step must be 0 or 1, not {n}")) };
    let config = Config::for_step(step, 1);
    if !config.switches.durable() {
        return invalid(format!(
            "--step {n} keeps no durable log (log flush or log records are off): recovery needs step 0 or 1"
        ));
    }
    if !wal_dir.is_dir() {
        return invalid(format!("--wal-dir {} is not a directory", wal_dir.display()));
    }
    if !wal_dir.join(SNAPSHOT_FILE).exists() && !wal_dir.join(LOG_FILE).exists() {
        return invalid(format!(
            "--wal-dir {} holds no glass database (neither {SNAPSHOT_FILE} nor {LOG_FILE})",
            wal_dir.display()
        ));
    }
    Ok((step, config))
}

/// What restart recovery of `dir` at `step` found and did, as printed (`took`: seconds of
/// recovery and the checkpoint after it).
pub fn render_recovery(dir: &Path, step: Step, r: &RecoveryReport, took: f64) -> String {
    let mut s = format!("recovered {} at step {step}\n", dir.display());
    let lsn = r.snapshot_lsn.map_or_else(|| "none".to_string(), |l| l.to_string());
    let _ = writeln!(s, "  checkpoint snapshot LSN   {lsn}");
    let _ = writeln!(s, "  log records scanned       {}", r.log_records);
    match r.torn_tail {
        Some(t) => {
            _ = writeln!(
                s,
                "  torn tail truncated       yes: {} damaged bytes at {} offset {} (LSN {}); the log now ends there",
                t.bytes, LOG_FILE, t.offset, t.lsn
            )
        }
        None => s.push_str("  torn tail truncated       no\n"),
    }
    let _ = writeln!(s, "  winners (committed)       {}", r.winners);
    let _ = writeln!(s, "  changes redone            {}", r.redone);
    let _ = writeln!(s, "  of which page images      {} (B+tree splits, page allocations)", r.page_images);
    let _ = writeln!(s, "  losers (rolled back)      {}", r.losers);
    let _ = writeln!(s, "  changes undone            {}", r.undone);
    let _ = writeln!(s, "  took                      {took:.2} s (recovery and the checkpoint after it)");
    s
}

/// The bench's table and, under it, what the stack's components did (`c`, over the run).
fn summary(report: &BenchReport, step: Step, workers: usize, c: &Counters) -> String {
    let mut summary = report::render(report);
    let _ = writeln!(
        summary,
        "engine       conventional, step {step}, {workers} worker{}, {} retries after concurrency-control aborts",
        if workers == 1 { "" } else { "s" },
        report.retries.unwrap_or(0)
    );
    let _ = writeln!(
        summary,
        "components   {} locks granted ({} waits, {} wait-die deaths), {} latches, {} page fixes, {} log records",
        c.lock_requests_granted, c.lock_waits, c.lock_conflicts, c.latches_acquired, c.pages_fixed, c.log_records
    );
    if c.page_evictions > 0 {
        let _ = writeln!(
            summary,
            "buffer pool  {} evictions, {} pages read back, {} written back, warm-up included",
            c.page_evictions, c.page_reads, c.page_writes
        );
    }
    if c.fsyncs > 0 {
        let _ = writeln!(
            summary,
            "log          {:.1} MiB written, {} fsyncs ({:.2} commits per fsync), warm-up included",
            c.log_bytes_written as f64 / (1 << 20) as f64,
            c.fsyncs,
            c.committed as f64 / c.fsyncs as f64
        );
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> TargetFlags<'static> {
        TargetFlags {
            conventional: true,
            step: None,
            workers: 1,
            buffer_pool_mb: None,
            no_log_flush: false,
            latch: LatchKind::Mutex,
            wal_dir: None,
            ack_log: None,
        }
    }

    #[test]
    fn the_target_follows_the_flags_and_refuses_what_it_cannot_run() {
        assert!(matches!(target(&flags()), Ok(Target::Conventional { .. })));
        assert!(matches!(target(&TargetFlags { step: Some(11), ..flags() }), Ok(Target::Lean { step: Some(_) })));
        assert!(matches!(target(&TargetFlags { conventional: false, ..flags() }), Ok(Target::Lean { step: None })));
        let refused = |f: TargetFlags<'_>| target(&f).unwrap_err().to_string();
        assert_eq!(refused(TargetFlags { workers: 0, ..flags() }), "--workers must be at least 1");
        assert_eq!(
            refused(TargetFlags { conventional: false, step: Some(3), ..flags() }),
            "--step 3 applies only to --engine conventional"
        );
        assert_eq!(
            refused(TargetFlags { step: Some(12), ..flags() }),
            "--step must be 0 to 11 (11 = the lean kernel), not 12"
        );
        assert!(
            refused(TargetFlags { step: Some(10), buffer_pool_mb: Some(8), ..flags() }).contains("--step 10 removes")
        );
        assert!(refused(TargetFlags { conventional: false, workers: 2, ..flags() }).contains("runs one thread"));
        assert!(refused(TargetFlags { step: Some(2), ack_log: Some(Path::new("a")), ..flags() })
            .contains("loses commits in a crash"));
    }

    #[test]
    fn a_transaction_limit_counts_the_warm_up_in_transactions() {
        assert_eq!(warmup(None, None, None).unwrap(), (WARMUP_SECONDS_DEFAULT, None));
        assert_eq!(warmup(Some(10), None, None).unwrap(), (0.0, Some(WARMUP_TXNS_DEFAULT)));
        assert_eq!(warmup(Some(10), Some(0.0), None).unwrap(), (0.0, Some(0)));
        assert!(warmup(Some(10), Some(1.5), None).unwrap_err().to_string().contains("--warmup-txns instead"));
    }
}
