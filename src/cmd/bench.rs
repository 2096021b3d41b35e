//! `glass bench`: TPC-C against one database, with progress, a per-type table, JSON, dumps
//! and the consistency check; on the lean kernel (one thread) or on the conventional stack at
//! any of the paper's switch steps, with one or several worker threads.
//!
//! The conventional stack is loaded through one session outside any transaction (a bulk
//! load, not logged), then checkpointed so the loaded data is durable; the log and the
//! checkpoint live in `--wal-dir` (default: the run record's `wal/` folder, removed at the end
//! unless `--keep-logs`), which must not be on tmpfs unless `--allow-tmpfs`.
//!
//! Every bench keeps a run record ([`harness::record`]): `bench.json` headed by the run's
//! metadata, the table as printed, the checks made, `report.html`, `command.txt`, `run.json`
//! (and `cluster.toml` for a cluster bench). With `--txns` the warm-up is counted in
//! transactions (`--warmup-txns`), so the same seed gives byte-identical dumps.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;

use engine::conventional::{Config, ConventionalDb, LatchKind, Step, LOG_FILE, SNAPSHOT_FILE};
use engine::procedures::{TxnInput, TxnOutput};
use engine::{LeanDb, Storage};
use workload::bench::{self, BenchConfig, BenchReport, StopAfter};
use workload::gen::Mix;
use workload::report::{self, ConsoleObserver};
use workload::workers;

use harness::acks::AckLog;
use harness::html::Check;
use harness::record::Record;

use super::{close_record, ProfileArg, RecordArgs};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Run in this process: one thread against one partition holding every warehouse (the
    /// paper's single-threaded setting).
    #[arg(long, conflicts_with = "config")]
    embedded: bool,
    /// Run as a client of the cluster this file describes (started here first when it is not
    /// running, and stopped afterwards); its warehouses are cluster.toml's.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Cluster bench: client connections, each bound to one home warehouse [default: one per
    /// warehouse].
    #[arg(long)]
    clients: Option<usize>,
    /// Cluster bench: requests each connection keeps in flight [default: 128].
    #[arg(long)]
    inflight: Option<usize>,
    /// Cluster bench: open loop at this many transactions per second over all connections;
    /// latency is counted from each request's scheduled time, so queueing shows [default:
    /// closed loop].
    #[arg(long, value_name = "TXN_PER_S")]
    rate: Option<f64>,
    /// Cluster bench: percent of order lines supplied by a remote warehouse (TPC-C clause
    /// 2.4.1.5), drawn from all of the cluster's warehouses but the home one, so a remote line
    /// may lie in another partition [default: the profile's, standard 1, paper 0].
    #[arg(long, value_name = "PCT")]
    remote_items: Option<u32>,
    /// Cluster bench: percent of Payments by a customer of a remote warehouse (TPC-C clause
    /// 2.5.1.2), drawn from all of the cluster's warehouses but the home one [default: the
    /// profile's, standard 15, paper 0].
    #[arg(long, value_name = "PCT")]
    remote_payments: Option<u32>,
    /// Cluster bench: percent of NewOrders forced multi-partition: one order line, chosen at
    /// random, is supplied by a warehouse of another partition (needs at least two
    /// partitions). Commits are reported as single- or multi-partition either way.
    #[arg(long, value_name = "PCT", default_value_t = 0)]
    multi_partition: u32,
    /// Workload profile.
    #[arg(long, value_enum, default_value_t = ProfileArg::Paper)]
    profile: ProfileArg,
    /// Override the profile's mix with weights, e.g. `neworder=50,payment=50` (names:
    /// neworder, payment, orderstatus, delivery, stocklevel; omitted ones get 0).
    #[arg(long)]
    mix: Option<String>,
    /// Number of warehouses (the paper used 5; ≈90 MB each in memory).
    #[arg(long, default_value_t = 5)]
    warehouses: u16,
    /// Length of the measured phase in seconds (ignored when --txns is given).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Measure exactly this many transactions instead of running for --duration.
    #[arg(long)]
    txns: Option<u64>,
    /// Seconds of unmeasured warm-up before the measured phase [default: 2; with --txns
    /// the warm-up is counted in transactions instead: --warmup-txns].
    #[arg(long)]
    warmup: Option<f64>,
    /// Embedded bench with --txns: transactions of unmeasured warm-up, so that the whole run
    /// is a pure function of the seed (the same seed gives byte-identical dumps) [default:
    /// 1000].
    #[arg(long, requires = "txns")]
    warmup_txns: Option<u64>,
    /// Seed for the loader and the input generator (printed first; the same seed gives the
    /// same database and the same transaction stream).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the result as one JSON object to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// After the run, write one CSV per table into this directory.
    #[arg(long)]
    dump: Option<PathBuf>,
    /// After the run, check TPC-C consistency conditions 1–10 and 12; exit non-zero on a
    /// violation.
    #[arg(long)]
    check: bool,
    /// Under each once-a-second line, one line per transaction type (ops/s, p50, p95, p99,
    /// max).
    #[arg(long)]
    per_type: bool,
    /// Do not print the once-a-second lines.
    #[arg(long)]
    quiet: bool,
    /// Instead of the benchmark, the Section 5.3 experiment: a primary executes the stream with
    /// redo capture, a second copy of the database applies its redo records, and the CPU cost
    /// per transaction of executing and of replaying are reported (lean kernel only).
    #[arg(long)]
    replay: bool,
    /// Storage engine.
    #[arg(long, value_enum, default_value_t = EngineArg::Lean)]
    engine: EngineArg,
    /// The paper's switch step for the conventional stack: 0 = full stack, each step removes
    /// one more component (1 B-tree keys, 2 log flush, 3 log records, 4 LSNs, 5 locking,
    /// 6 latching, 7 page size, 8 directory, 9 transactions, 10 buffer pool), 11 = the lean
    /// kernel. Default 0.
    #[arg(long)]
    step: Option<u8>,
    /// The conventional stack's buffer pool size in MiB. Default: unbounded, the whole
    /// database stays in memory (the paper's setting). Below the database's size the clock
    /// evicts pages and writes dirty ones back to an unnamed page file in the --wal-dir
    /// directory. Only while the buffer pool is present (--step 0 to 9).
    #[arg(long, value_name = "MIB")]
    buffer_pool_mb: Option<u64>,
    /// With --engine conventional: switch the log flush off on top of --step (commit no
    /// longer waits for fdatasync; the paper's 1,700 txn/s baseline is its full stack so).
    #[arg(long)]
    no_log_flush: bool,
    /// With --engine conventional: which latch the stack uses while latching is on: `mutex`
    /// (Shore's: waiters sleep, holders are recorded and checked) or `spin` (one
    /// compare-and-swap, waiters spin).
    #[arg(long, value_enum, default_value_t = LatchArg::Mutex)]
    latch: LatchArg,
    /// Worker threads, each with its own session and input stream (more than one only on the
    /// conventional stack with locking and latching on, i.e. steps 0–4).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Where the conventional stack keeps its log (wal.log) and checkpoint (checkpoint.db);
    /// must not already hold a database, nor be on tmpfs (unless --allow-tmpfs). Default:
    /// the run record's wal/ folder, removed at the end unless --keep-logs.
    #[arg(long)]
    wal_dir: Option<PathBuf>,
    /// Testing aid: after each commit returns, append a line naming the transaction (NewOrder
    /// and Payment) to this file, for `glass recover --ack-log`.
    #[arg(long, value_name = "FILE")]
    ack_log: Option<PathBuf>,
    #[command(flatten)]
    record: RecordArgs,
}

/// `--engine` values.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum EngineArg {
    /// The lean single-threaded main-memory kernel.
    Lean,
    /// The conventional stack: buffer pool, B+trees, two-phase locking, latches, write-ahead
    /// log (the paper's Shore), at any --step of the staircase.
    Conventional,
}

/// The warm-up of an embedded bench: seconds, or — with `--txns` — transactions.
fn warmup(a: &BenchArgs) -> Result<(f64, Option<u64>)> {
    match (a.txns, a.warmup, a.warmup_txns) {
        (Some(_), Some(s), None) if s != 0.0 => bail!(
            "with --txns the warm-up is counted in transactions, so the run depends only on the seed: use \
             --warmup-txns instead of --warmup {s}"
        ),
        // `--warmup 0`: no warm-up at all, which is deterministic too.
        (Some(_), Some(_), None) => Ok((0.0, Some(0))),
        (Some(_), _, n) => Ok((0.0, Some(n.unwrap_or(WARMUP_TXNS_DEFAULT)))),
        (None, s, _) => Ok((s.unwrap_or(WARMUP_SECONDS_DEFAULT), None)),
    }
}

/// `--warmup`'s default.
const WARMUP_SECONDS_DEFAULT: f64 = 2.0;
/// `--warmup-txns`' default.
const WARMUP_TXNS_DEFAULT: u64 = 1000;

/// `--latch` values.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum LatchArg {
    Mutex,
    Spin,
}

/// What runs the transactions, decided from the flags in one place.
#[derive(Debug, Clone)]
enum Target {
    /// The lean kernel (`--engine lean`, or `--engine conventional --step 11`).
    Lean {
        step: Option<Step>,
    },
    Conventional {
        step: Step,
        config: Config,
    },
}

fn target(a: &BenchArgs) -> Result<Target> {
    if a.workers == 0 {
        bail!("--workers must be at least 1");
    }
    if a.workers > workers::WORKERS_MAX {
        bail!("--workers must be at most {}, not {}", workers::WORKERS_MAX, a.workers);
    }
    let target = match a.engine {
        EngineArg::Lean => {
            if let Some(n) = a.step {
                bail!("--step {n} applies only to --engine conventional");
            }
            Target::Lean { step: None }
        }
        EngineArg::Conventional => {
            let n = a.step.unwrap_or(0);
            let step =
                Step::new(n).with_context(|| format!("--step must be 0 to 11 (11 = the lean kernel), not {n}"))?;
            if step.runs_lean_kernel() {
                Target::Lean { step: Some(step) }
            } else {
                let mut config = Config::for_step(step, a.workers);
                if a.no_log_flush {
                    config.switches.log_flush = false;
                }
                config.latch = match a.latch {
                    LatchArg::Mutex => LatchKind::Mutex,
                    LatchArg::Spin => LatchKind::Spin,
                };
                if let Some(mb) = a.buffer_pool_mb {
                    if !config.switches.buffer_pool {
                        bail!(
                            "--buffer-pool-mb needs the buffer pool, which --step {n} removes (steps 0 to 9 keep it)"
                        );
                    }
                    config.buffer_pool_bytes = Some(mb.saturating_mul(1 << 20));
                }
                config
                    .validate()
                    .with_context(|| format!("--step {n} with --workers {} and --buffer-pool-mb", a.workers))?;
                Target::Conventional { step, config }
            }
        }
    };
    match &target {
        Target::Lean { step } => {
            let what = if step.is_some() { "step 11 (the lean kernel)" } else { "the lean kernel" };
            for (given, flag) in [
                (a.buffer_pool_mb.is_some(), "--buffer-pool-mb"),
                (a.no_log_flush, "--no-log-flush"),
                (a.latch != LatchArg::Mutex, "--latch"),
            ] {
                if given {
                    bail!("{what} has no buffer pool, log or latches: {flag} applies only to --engine conventional");
                }
            }
            if a.workers > 1 {
                bail!("{what} runs one thread: --workers {} needs --engine conventional at steps 0–4", a.workers);
            }
            if a.wal_dir.is_some() {
                bail!("{what} keeps no log: --wal-dir applies only to --engine conventional");
            }
            if a.ack_log.is_some() {
                bail!("--ack-log needs --engine conventional at a durable step (0 or 1)");
            }
        }
        Target::Conventional { step, config } => {
            if a.ack_log.is_some() && !config.switches.durable() {
                bail!("--ack-log needs a durable step (0 or 1); step {step} loses commits in a crash");
            }
            if let Some(dir) = &a.wal_dir {
                WalDir::check(dir)?;
            }
            if let Some(p) = &a.ack_log {
                bench::check_writable_file(p).context("--ack-log")?;
            }
        }
    }
    Ok(target)
}

/// The conventional stack's directory; a temporary one is removed when this drops.
struct WalDir {
    path: PathBuf,
    temporary: bool,
}

impl WalDir {
    /// Refuses a `--wal-dir` that is not a directory or already holds a database.
    fn check(dir: &Path) -> Result<()> {
        if dir.exists() && !dir.is_dir() {
            bail!("--wal-dir {} exists and is not a directory", dir.display());
        }
        if dir.join(SNAPSHOT_FILE).exists() || dir.join(LOG_FILE).exists() {
            bail!(
                "--wal-dir {} already holds a database; recover it with `glass recover --wal-dir {}` or choose an \
                 empty directory",
                dir.display(),
                dir.display()
            );
        }
        Ok(())
    }

    /// `--wal-dir` (checked again), else `default` (the run record's `wal/`), created only
    /// when the configuration writes to it and removed at the end unless `keep`.
    fn prepare(given: Option<&Path>, durable: bool, default: PathBuf, keep: bool) -> Result<WalDir> {
        if let Some(dir) = given {
            WalDir::check(dir)?;
            return Ok(WalDir { path: dir.to_path_buf(), temporary: false });
        }
        if durable {
            std::fs::create_dir_all(&default).with_context(|| format!("create {}", default.display()))?;
            if !keep {
                harness::interrupt::register_temporary(default.clone());
            }
        }
        Ok(WalDir { path: default, temporary: durable && !keep })
    }
}

impl Drop for WalDir {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.path);
            harness::interrupt::unregister_temporary(&self.path);
        }
    }
}

fn check_dump_dir(dir: &std::path::Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        bail!("cannot write --dump {}: it exists and is not a directory", dir.display());
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).map(PathBuf::from).unwrap_or(".".into());
    if !parent.is_dir() {
        bail!("cannot write --dump {}: its parent directory does not exist", dir.display());
    }
    bench::check_writable_file(&parent.join("probe"))
        .map_err(|_| anyhow::anyhow!("cannot write --dump {}: its parent directory is not writable", dir.display()))
}

pub fn run(a: BenchArgs) -> Result<ExitCode> {
    if let Some(config) = a.config.clone() {
        return super::bench_cluster::run(cluster_bench(a, config));
    }
    if !a.embedded {
        bail!("say where to run: `--embedded` (this process) or `--config cluster.toml` (a cluster)");
    }
    for (given, flag) in [
        (a.clients.is_some(), "--clients"),
        (a.inflight.is_some(), "--inflight"),
        (a.rate.is_some(), "--rate"),
        (a.remote_items.is_some(), "--remote-items"),
        (a.remote_payments.is_some(), "--remote-payments"),
        (a.multi_partition != 0, "--multi-partition"),
    ] {
        if given {
            bail!("{flag} applies to cluster benches (--config) only");
        }
    }
    let mix = a.mix.as_deref().map(Mix::parse).transpose()?;
    let (warmup_s, warmup_txns) = warmup(&a)?;
    let cfg = BenchConfig {
        profile: a.profile.into(),
        mix,
        warehouses: a.warehouses,
        stop: match a.txns {
            Some(n) => StopAfter::Transactions(n),
            None => StopAfter::Seconds(a.duration),
        },
        warmup_s,
        warmup_txns,
        seed: a.seed,
    };
    cfg.validate()?;
    if let Some(p) = &a.json {
        bench::check_writable_file(p).with_context(|| "--json")?;
    }
    if let Some(d) = &a.dump {
        check_dump_dir(d)?;
    }
    let target = target(&a)?;
    if a.replay && (!matches!(target, Target::Lean { .. }) || a.dump.is_some() || a.check) {
        bail!("--replay runs on the lean kernel and takes neither --dump nor --check");
    }
    if let (Some(dir), Target::Conventional { config, .. }) = (&a.wal_dir, &target) {
        if config.switches.durable() {
            a.record.check_durable(dir, &format!("--wal-dir {}", dir.display()))?;
        }
    }
    let run_dir = a.wal_dir.clone().or_else(|| a.record.out.clone()).unwrap_or_else(harness::record::default_base);
    let mut record = a.record.open("bench", &run_dir)?;
    let outcome = embedded(&a, &cfg, target, &record);
    close_record(&mut record, outcome)
}

/// The embedded bench proper, its record kept in `record`.
fn embedded(a: &BenchArgs, cfg: &BenchConfig, target: Target, record: &Record) -> Result<ExitCode> {
    println!("seed: {}", a.seed);
    let mut obs = ConsoleObserver::new(a.quiet).per_type(a.per_type);
    if a.replay {
        let r = workload::replay::execute_vs_replay(cfg, &mut obs)?;
        let summary = workload::replay::render(&r);
        print!("{summary}");
        record.write_headed(&record.path("replay.json"), "replay", &r)?;
        if let Some(p) = &a.json {
            record.write_headed(p, "replay", &r)?;
            println!("wrote {}", p.display());
        }
        let checks =
            [Check { what: "the replayed copy's digest equals the primary's".into(), passed: r.digests_equal }];
        super::compare::finish_record(record, &summary, &checks)?;
        return Ok(if r.digests_equal { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    match target {
        Target::Lean { step } => {
            let mut db = LeanDb::new();
            let t0 = Instant::now();
            bench::load(&mut db, cfg.warehouses, cfg.seed, &mut obs)?;
            let load_s = t0.elapsed().as_secs_f64();
            let mut report = bench::run(&mut db, cfg, bench::RunKind::Embedded, load_s, &mut obs)?;
            report.engine = Some("lean".into());
            report.step = step.map(Step::number);
            report.workers = Some(1);
            let summary = report::render(&report);
            print!("{summary}");
            finish(&mut db, &report, a, record, summary)
        }
        Target::Conventional { step, config } => run_conventional(a, cfg, step, config, &mut obs, record),
    }
}

/// The flags a cluster bench uses; those of the embedded bench alone are named for refusal.
fn cluster_bench(a: BenchArgs, config: PathBuf) -> super::bench_cluster::ClusterBench {
    let embedded_only = [
        (a.engine != EngineArg::Lean, "--engine"),
        (a.warmup_txns.is_some(), "--warmup-txns"),
        (a.step.is_some(), "--step"),
        (a.workers != 1, "--workers"),
        (a.wal_dir.is_some(), "--wal-dir"),
        (a.buffer_pool_mb.is_some(), "--buffer-pool-mb"),
        (a.no_log_flush, "--no-log-flush"),
        (a.latch != LatchArg::Mutex, "--latch"),
    ]
    .into_iter()
    .filter_map(|(given, flag)| given.then_some(flag))
    .collect();
    super::bench_cluster::ClusterBench {
        config,
        clients: a.clients,
        inflight: a.inflight,
        rate: a.rate,
        remote_items: a.remote_items,
        remote_payments: a.remote_payments,
        multi_partition: a.multi_partition,
        profile: a.profile,
        mix: a.mix,
        duration: a.duration,
        txns: a.txns,
        warmup: a.warmup.unwrap_or(WARMUP_SECONDS_DEFAULT),
        seed: a.seed,
        json: a.json,
        dump: a.dump,
        check: a.check,
        per_type: a.per_type,
        quiet: a.quiet,
        ack_log: a.ack_log,
        record: a.record,
        embedded_only,
    }
}

fn run_conventional(
    a: &BenchArgs,
    cfg: &BenchConfig,
    step: Step,
    config: Config,
    obs: &mut ConsoleObserver,
    record: &Record,
) -> Result<ExitCode> {
    let durable = config.switches.durable();
    // A bounded buffer pool writes evicted pages to a page file in the directory, log or not.
    let writes = durable || config.buffer_pool_frames().is_some();
    let wal = WalDir::prepare(a.wal_dir.as_deref(), writes, record.path("wal"), a.record.keep_logs)?;
    if durable && a.wal_dir.is_none() {
        a.record.check_durable(&wal.path, &format!("the write-ahead log's folder {}", wal.path.display()))?;
    }
    let ack = a.ack_log.as_deref().map(AckLog::create).transpose()?;
    let workers = config.workers;
    let pool = match config.buffer_pool_bytes.filter(|_| config.switches.buffer_pool) {
        Some(b) => format!(", buffer pool {} MiB", b >> 20),
        None if config.switches.buffer_pool => ", buffer pool unbounded".to_string(),
        None => String::new(),
    };
    println!(
        "engine: conventional stack, step {step}{}, {workers} worker{}{pool}, {:?} latches{}",
        if config.switches.log_flush || step.number() >= 2 { "" } else { " without log flush" },
        if workers == 1 { "" } else { "s" },
        config.latch,
        if durable { format!(", log in {}", wal.path.display()) } else { String::new() }
    );
    let db = ConventionalDb::open(&wal.path, config)
        .with_context(|| format!("open the conventional stack in {}", wal.path.display()))?;
    let t0 = Instant::now();
    {
        let mut loader = db.session()?;
        bench::load(&mut loader, cfg.warehouses, cfg.seed, obs)?;
    }
    if db.checkpoint_unavailable().is_none() {
        let t1 = Instant::now();
        db.checkpoint().context("checkpoint after the load")?;
        let bytes = std::fs::metadata(wal.path.join(SNAPSHOT_FILE)).map_or(0, |m| m.len());
        println!(
            "checkpoint after the load: {:.0} MiB in {:.1} s",
            bytes as f64 / (1 << 20) as f64,
            t1.elapsed().as_secs_f64()
        );
    }
    let load_s = t0.elapsed().as_secs_f64();
    if let Some(frames) = db.buffer_pool_frames_used() {
        let page = db.switches().page_bytes() as u64;
        println!(
            "buffer pool after the load: {frames} frames of {} KiB ({:.0} MiB){}",
            page >> 10,
            (frames * page) as f64 / (1 << 20) as f64,
            if db.config().buffer_pool_bytes.is_some() { "" } else { ": the whole database" }
        );
    }

    let before = db.counters();
    let sessions = (0..workers).map(|_| db.session()).collect::<Result<Vec<_>, _>>()?;
    let on_commit = |input: &TxnInput, output: &TxnOutput| match &ack {
        Some(log) => log.acknowledge(input, output),
        None => Ok(()),
    };
    let mut report = workers::run(sessions, cfg, bench::RunKind::Embedded, load_s, obs, &on_commit)?;
    let c = db.counters().since(&before);
    report.engine = Some("conventional".into());
    report.step = Some(step.number());
    report.log_bytes = Some(c.log_bytes_written);
    report.fsyncs = Some(c.fsyncs);
    let mut summary = report::render(&report);
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
    print!("{summary}");
    let mut session = db.session()?;
    finish(&mut session, &report, a, record, summary)
}

/// JSON, the consistency check and the dump, after a run; the record's files.
fn finish<S: Storage>(
    db: &mut S,
    report: &BenchReport,
    a: &BenchArgs,
    record: &Record,
    mut summary: String,
) -> Result<ExitCode> {
    record.write_headed(&record.path("bench.json"), "bench", report)?;
    if let Some(p) = &a.json {
        record.write_headed(p, "bench", report)?;
        println!("wrote {}", p.display());
    }
    let mut code = ExitCode::SUCCESS;
    let mut checks = Vec::new();
    if a.check {
        let r = engine::check::check(db);
        let text = format!("\nTPC-C consistency (clause 3.3.2):\n{r}");
        println!("{text}");
        summary.push_str(&text);
        checks.push(Check {
            what: "TPC-C consistency conditions 1–10 and 12 (clause 3.3.2)".into(),
            passed: r.all_passed(),
        });
        if !r.all_passed() {
            eprintln!("glass: error: consistency check failed");
            code = ExitCode::from(1);
        }
    }
    if let Some(d) = &a.dump {
        let summary = workload::dump::dump(db, d)?;
        println!("dumped {summary} into {}", d.display());
    }
    super::compare::finish_record(record, &summary, &checks)?;
    Ok(code)
}
