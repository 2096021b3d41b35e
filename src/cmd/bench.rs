//! `glass bench`: TPC-C against one database, with progress, a per-type table, JSON, dumps
//! and the consistency check; on the lean kernel (one thread) or on the conventional stack at
//! any of the paper's switch steps, with one or several worker threads.
//!
//! The conventional stack is loaded through one session outside any transaction (a bulk
//! load, not logged), then checkpointed so the loaded data is durable
//! ([`harness::bench::run_conventional`]); the log and the checkpoint live in `--wal-dir`
//! (default: the run record's `wal/` folder, removed at the end unless `--keep-logs`:
//! [`harness::scratch`]), which must not be on tmpfs unless `--allow-tmpfs`. What runs the
//! transactions is decided from the flags by [`harness::bench::target`].
//!
//! Every bench keeps a run record ([`harness::record`]): `bench.json` headed by the run's
//! metadata, the table as printed, the checks made, `report.html`, `command.txt`, `run.json`
//! (and `cluster.toml` for a cluster bench). With `--txns` the warm-up is counted in
//! transactions (`--warmup-txns`), so the same seed gives byte-identical dumps.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;

use engine::conventional::{Config, LatchKind, Step};
use engine::Storage;
use workload::bench::{self, BenchConfig, BenchReport, StopAfter};
use workload::gen::Mix;
use workload::report::ConsoleObserver;

use harness::acks::AckLog;
use harness::bench::{Target, TargetFlags};
use harness::html::Check;
use harness::record::Record;
use harness::scratch::Scratch;

use super::{close_record, finish_record, wrote, ProfileArg, RecordArgs};

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
    /// The pages the tables grow into once loaded: `small` (4 KiB) or `huge` (transparent
    /// huge pages, as the loaded tables use). On a virtual machine whose host takes freed
    /// memory back, a fresh huge page costs several times more to touch first
    /// (docs/results.md, "What a fresh page costs"); on a host that backs memory up front,
    /// `huge` is cheaper. A cluster's nodes take cluster.toml's `growth_pages`. [default:
    /// small]
    #[arg(long, value_name = "PAGES")]
    growth_pages: Option<engine::arena::GrowthPages>,
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

/// `--latch` values.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum LatchArg {
    Mutex,
    Spin,
}

/// The flags [`harness::bench::target`] decides from.
fn target_flags(a: &BenchArgs) -> TargetFlags<'_> {
    TargetFlags {
        conventional: a.engine == EngineArg::Conventional,
        step: a.step,
        workers: a.workers,
        buffer_pool_mb: a.buffer_pool_mb,
        no_log_flush: a.no_log_flush,
        latch: match a.latch {
            LatchArg::Mutex => LatchKind::Mutex,
            LatchArg::Spin => LatchKind::Spin,
        },
        wal_dir: a.wal_dir.as_deref(),
        ack_log: a.ack_log.as_deref(),
    }
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
    let (warmup_s, warmup_txns) = harness::bench::warmup(a.txns, a.warmup, a.warmup_txns)?;
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
        growth_pages: a.growth_pages.unwrap_or_default(),
    };
    cfg.validate()?;
    if let Some(p) = &a.json {
        bench::check_writable_file(p).with_context(|| "--json")?;
    }
    if let Some(d) = &a.dump {
        harness::bench::check_dump_dir(d)?;
    }
    let target = harness::bench::target(&target_flags(&a))?;
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
        record.write_result("replay.json", "replay", &r, a.json.as_deref(), &mut wrote)?;
        let checks =
            [Check { what: "the replayed copy's digest equals the primary's".into(), passed: r.digests_equal }];
        finish_record(record, &summary, &checks)?;
        return Ok(if r.digests_equal { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    match target {
        Target::Lean { step } => {
            let mut run = harness::bench::run_lean(cfg, step, &mut obs)?;
            print!("{}", run.summary);
            finish(&mut run.db, &run.report, a, record, run.summary)
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
        (a.growth_pages.is_some(), "--growth-pages"),
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
        warmup: a.warmup.unwrap_or(harness::bench::WARMUP_SECONDS_DEFAULT),
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

/// The conventional stack's run ([`harness::bench::run_conventional`]) in its log folder.
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
    let wal = Scratch::wal_dir(a.wal_dir.as_deref(), writes, record.path("wal"), a.record.keep_logs)?;
    if durable && a.wal_dir.is_none() {
        a.record.check_durable(&wal.path, &format!("the write-ahead log's folder {}", wal.path.display()))?;
    }
    let ack = a.ack_log.as_deref().map(AckLog::create).transpose()?;
    let run = harness::bench::run_conventional(cfg, step, config, &wal.path, ack.as_ref(), obs, &mut |l| {
        println!("{l}");
    })?;
    print!("{}", run.summary);
    let mut session = run.db.session()?;
    finish(&mut session, &run.report, a, record, run.summary)
}

/// JSON, the consistency check and the dump, after a run; the record's files.
fn finish<S: Storage>(
    db: &mut S,
    report: &BenchReport,
    a: &BenchArgs,
    record: &Record,
    mut summary: String,
) -> Result<ExitCode> {
    record.write_result("bench.json", "bench", report, a.json.as_deref(), &mut wrote)?;
    let mut code = ExitCode::SUCCESS;
    let mut checks = Vec::new();
    if a.check {
        let (text, check) = harness::bench::consistency(db);
        println!("{text}");
        summary.push_str(&text);
        if !check.passed {
            eprintln!("glass: error: consistency check failed");
            code = ExitCode::from(1);
        }
        checks.push(check);
    }
    if let Some(d) = &a.dump {
        let summary = workload::dump::dump(db, d)?;
        println!("dumped {summary} into {}", d.display());
    }
    finish_record(record, &summary, &checks)?;
    Ok(code)
}
