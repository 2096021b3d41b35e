//! `glass bench`: TPC-C against one database, with progress, a per-type table, JSON, dumps
//! and the consistency check; on the lean kernel (one thread) or on the conventional stack at
//! any of the paper's switch steps, with one or several worker threads.
//!
//! The conventional stack is loaded through one session outside any transaction (a bulk
//! load, not logged), then checkpointed so the loaded data is durable; the log and the
//! checkpoint live in `--wal-dir` (default: a fresh temporary directory removed at the end).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;

use engine::conventional::{Config, ConventionalDb, LatchKind, Step, LOG_FILE, SNAPSHOT_FILE};
use engine::procedures::{TxnInput, TxnOutput};
use engine::{LeanDb, Storage};
use workload::bench::{self, BenchConfig, BenchReport, StopAfter};
use workload::gen::{Mix, Profile};
use workload::report::{self, ConsoleObserver};
use workload::workers;

use harness::acks::AckLog;

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
    /// Cluster bench: client connections, each bound to one home warehouse [default: 2 per
    /// warehouse].
    #[arg(long)]
    clients: Option<usize>,
    /// Cluster bench: requests each connection keeps in flight [default: 128].
    #[arg(long)]
    inflight: Option<usize>,
    /// Cluster bench: open loop at this many transactions per second over all connections
    /// (default: closed loop).
    #[arg(long)]
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
    /// Workload profile: `paper` (50% NewOrder / 50% Payment, 10 local items, payment by id:
    /// the paper's Section 4 setting) or `standard` (TPC-C's 45/43/4/4/4 mix with remote
    /// items, remote payments, last-name selection and 1% rollbacks).
    #[arg(long, default_value = "paper")]
    profile: String,
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
    /// Seconds of unmeasured warm-up before the measured phase.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
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
    /// Do not print the once-a-second lines.
    #[arg(long)]
    quiet: bool,
    /// Instead of the benchmark, the Section 5.3 experiment: a primary executes the stream with
    /// redo capture, a second copy of the database applies its redo records, and the CPU cost
    /// per transaction of executing and of replaying are reported (lean kernel only).
    #[arg(long)]
    replay: bool,
    /// Storage engine: `lean` (the lean single-threaded kernel) or `conventional` (the
    /// conventional stack: buffer pool, B+trees, 2PL, latches, write-ahead log).
    #[arg(long, default_value = "lean")]
    engine: String,
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
    /// must not already hold a database. Default: a fresh temporary directory, removed at
    /// the end.
    #[arg(long)]
    wal_dir: Option<PathBuf>,
    /// Testing aid: after each commit returns, append a line naming the transaction (NewOrder
    /// and Payment) to this file, for `glass recover --ack-log`.
    #[arg(long, hide = true)]
    ack_log: Option<PathBuf>,
}

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
    let target = match a.engine.as_str() {
        "lean" => {
            if let Some(n) = a.step {
                bail!("--step {n} applies only to --engine conventional");
            }
            Target::Lean { step: None }
        }
        "conventional" => {
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
        other => bail!("unknown --engine `{other}`; valid engines: lean, conventional"),
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

    /// `--wal-dir` (checked again), else a fresh temporary directory (created only when the
    /// configuration writes to it).
    fn prepare(given: Option<&Path>, durable: bool) -> Result<WalDir> {
        if let Some(dir) = given {
            WalDir::check(dir)?;
            return Ok(WalDir { path: dir.to_path_buf(), temporary: false });
        }
        let base = std::env::temp_dir();
        for n in 0u32..10_000 {
            let path = base.join(format!("glass-wal-{}-{n}", std::process::id()));
            if !durable {
                if !path.exists() {
                    return Ok(WalDir { path, temporary: false });
                }
                continue;
            }
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(WalDir { path, temporary: true }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("create a temporary --wal-dir in {}", base.display())),
            }
        }
        bail!("cannot find a free temporary --wal-dir name in {}", base.display())
    }
}

impl Drop for WalDir {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.path);
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
    let profile: Profile = a.profile.parse()?;
    let mix = a.mix.as_deref().map(Mix::parse).transpose()?;
    let cfg = BenchConfig {
        profile,
        mix,
        warehouses: a.warehouses,
        stop: match a.txns {
            Some(n) => StopAfter::Transactions(n),
            None => StopAfter::Seconds(a.duration),
        },
        warmup_s: a.warmup,
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
    println!("seed: {}", a.seed);
    let mut obs = ConsoleObserver::new(a.quiet);
    if a.replay {
        if !matches!(target, Target::Lean { .. }) || a.dump.is_some() || a.check {
            bail!("--replay runs on the lean kernel and takes neither --dump nor --check");
        }
        let r = workload::replay::execute_vs_replay(&cfg, &mut obs)?;
        print!("{}", workload::replay::render(&r));
        if let Some(p) = &a.json {
            super::write_json(p, &r)?;
        }
        return Ok(if r.digests_equal { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    match target {
        Target::Lean { step } => {
            let mut db = LeanDb::new();
            let t0 = Instant::now();
            bench::load(&mut db, cfg.warehouses, cfg.seed, &mut obs)?;
            let load_s = t0.elapsed().as_secs_f64();
            let mut report = bench::run(&mut db, &cfg, bench::RunKind::Embedded, load_s, &mut obs)?;
            report.engine = Some("lean".into());
            report.step = step.map(Step::number);
            report.workers = Some(1);
            print!("{}", report::render(&report));
            finish(&mut db, &report, &a)
        }
        Target::Conventional { step, config } => run_conventional(&a, &cfg, step, config, &mut obs),
    }
}

/// The flags a cluster bench uses; those of the embedded bench alone are named for refusal.
fn cluster_bench(a: BenchArgs, config: PathBuf) -> super::bench_cluster::ClusterBench {
    let embedded_only = [
        (a.engine != "lean", "--engine"),
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
        warmup: a.warmup,
        seed: a.seed,
        json: a.json,
        dump: a.dump,
        check: a.check,
        quiet: a.quiet,
        ack_log: a.ack_log,
        embedded_only,
    }
}

fn run_conventional(
    a: &BenchArgs,
    cfg: &BenchConfig,
    step: Step,
    config: Config,
    obs: &mut ConsoleObserver,
) -> Result<ExitCode> {
    let durable = config.switches.durable();
    // A bounded buffer pool writes evicted pages to a page file in the directory, log or not.
    let writes = durable || config.buffer_pool_frames().is_some();
    let wal = WalDir::prepare(a.wal_dir.as_deref(), writes)?;
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
    print!("{}", report::render(&report));
    println!(
        "engine       conventional, step {step}, {workers} worker{}, {} retries after concurrency-control aborts",
        if workers == 1 { "" } else { "s" },
        report.retries.unwrap_or(0)
    );
    println!(
        "components   {} locks granted ({} waits, {} wait-die deaths), {} latches, {} page fixes, {} log records",
        c.lock_requests_granted, c.lock_waits, c.lock_conflicts, c.latches_acquired, c.pages_fixed, c.log_records
    );
    if c.page_evictions > 0 {
        println!(
            "buffer pool  {} evictions, {} pages read back, {} written back, warm-up included",
            c.page_evictions, c.page_reads, c.page_writes
        );
    }
    if c.fsyncs > 0 {
        println!(
            "log          {:.1} MiB written, {} fsyncs ({:.2} commits per fsync), warm-up included",
            c.log_bytes_written as f64 / (1 << 20) as f64,
            c.fsyncs,
            c.committed as f64 / c.fsyncs as f64
        );
    }
    let mut session = db.session()?;
    finish(&mut session, &report, a)
}

/// JSON, the consistency check and the dump, after a run.
fn finish<S: Storage>(db: &mut S, report: &BenchReport, a: &BenchArgs) -> Result<ExitCode> {
    if let Some(p) = &a.json {
        super::write_json(p, report)?;
    }
    let mut code = ExitCode::SUCCESS;
    if a.check {
        let r = engine::check::check(db);
        println!("\nTPC-C consistency (clause 3.3.2):\n{r}");
        if !r.all_passed() {
            eprintln!("glass: error: consistency check failed");
            code = ExitCode::from(1);
        }
    }
    if let Some(d) = &a.dump {
        let summary = workload::dump::dump(db, d)?;
        println!("dumped {summary} into {}", d.display());
    }
    Ok(code)
}
