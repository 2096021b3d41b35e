//! `glass compare`: the project's main job — Section 5.3 end to end. For each replication
//! factor and each mode (active-active, active-passive, full-stack), [`harness::compare::plan`]
//! derives a cluster description from `cluster.toml`, starts that cluster, runs the same TPC-C
//! workload (same seed, clients, duration, warm-up; closed loop, or open loop at `--rate`),
//! checks it (replica digests, consistency, acknowledged NewOrders, replica reads) and stops
//! it; this module turns the flags into those plans, prints each run and one side-by-side
//! table ([`harness::compare`]).
//!
//! Every run keeps a run record ([`harness::record`], `results/<UTC time>-compare/` or
//! `--out`): `compare.json` (headed by the run's metadata), `compare.csv`, `compare.svg`, the
//! table as printed (`summary.txt`), the checks (`checks.json`), `cluster.toml` and each
//! derived one as used, `command.txt`, `run.json` and `report.html` ([`harness::html`]);
//! `--json`, `--csv` and `--svg` write further copies where they point.
//!
//! `--multi-partition 0,10,20,50` runs each mode once per share of NewOrders forced
//! multi-partition and draws H-Store's curve instead of the side-by-side table: NewOrder
//! throughput against the share, one line per mode ([`harness::compare::multi`]), written to
//! `compare-multi-partition.{json,csv,svg}` in the record (and beside `--json`/`--csv`/`--svg`
//! when given). `--sweep` runs each mode at increasing offered loads on one cluster start and
//! draws latency against achieved throughput ([`harness::compare::sweep`]). `--failover` adds
//! a failover run per mode ([`harness::compare::plan::run_failovers`]).
//!
//! A failed check ([`harness::verdict`]) makes the command exit 1 after the table is printed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use harness::compare::plan::{self, Plan, Runs};
use harness::compare::sweep::{self, SweepPoint};
use harness::compare::{self as report, CompareRow};
use harness::measure::{failover_inflight_default, CLIENTS_PER_WAREHOUSE_DEFAULT, INFLIGHT_DEFAULT};
use harness::record::Record;
use harness::Cluster;
use wire::config::{AgreementRule, Mode, Shipping};
use workload::bench::{self, StopAfter};
use workload::client::driver::{DriverConfig, RemoteShares};
use workload::gen::Mix;

use super::progress::{glass_exe, Console};
use super::{close_record, finish_record, wrote, ProfileArg, RecordArgs};

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The cluster to compare on: its nodes, partitions, placement and limits; its `mode` is
    /// overridden by each mode compared.
    #[arg(long, default_value = wire::config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// Modes to run, in order, comma-separated: active-active, active-passive, full-stack.
    #[arg(long, default_value = "active-active,active-passive,full-stack", value_delimiter = ',')]
    pub modes: Vec<Mode>,
    /// Replication factors to run, comma-separated (e.g. `1,2,3`): every partition is placed
    /// on that many consecutive nodes, primaries spread over the nodes. Default: the
    /// placement of cluster.toml as written.
    #[arg(long, value_delimiter = ',')]
    pub replicas: Vec<usize>,
    /// Passive modes: `sync` (answer once the backups applied the log records) or `async`
    /// (once the primary committed). Default: cluster.toml's `shipping`.
    #[arg(long)]
    pub shipping: Option<Shipping>,
    /// Active-active: `majority` answers a client once a majority of a partition's replicas
    /// agreed (the rest are compared when they report), `all` once every live replica did;
    /// the two differ only with three replicas or more (docs/cluster.md, "Agreement").
    /// Default: cluster.toml's `agreement`.
    #[arg(long, value_name = "all|majority")]
    pub agreement: Option<AgreementRule>,
    /// Client connections, each bound to one home warehouse [default: one per warehouse].
    #[arg(long)]
    pub clients: Option<usize>,
    /// Requests each connection keeps in flight [default: 128; --failover's full-stack runs:
    /// 16, as `glass failover`'s].
    #[arg(long)]
    pub inflight: Option<usize>,
    /// Open loop: offer this many transactions per second over all connections (latency
    /// is counted from each request's scheduled time, so queueing shows), the same load for
    /// every mode [default: closed loop, each connection keeping --inflight requests out].
    #[arg(long, value_name = "TXN_PER_S", conflicts_with = "sweep")]
    pub rate: Option<f64>,
    /// Latency at equal load: run each mode at increasing offered loads on one cluster
    /// start — by default a closed-loop run to find its saturation, then 10, 25, 40, 55, 70,
    /// 80, 90, 100 and 110% of it; or the rates given (`--sweep 500,1000,2000`) — and draw
    /// p50 and p99 latency against achieved throughput, one line per mode (sweep.svg), naming
    /// where each mode breaks. Each point lasts --warmup + --duration.
    #[arg(long, value_name = "TXN_PER_S,…", num_args = 0..=1, require_equals = false, value_delimiter = ',')]
    pub sweep: Option<Vec<f64>>,
    /// Workload profile.
    #[arg(long, value_enum, default_value_t = ProfileArg::Paper)]
    pub profile: ProfileArg,
    /// Override the profile's mix with weights, e.g. `neworder=50,payment=50`.
    #[arg(long)]
    pub mix: Option<String>,
    /// Percent of order lines supplied by a remote warehouse (TPC-C clause 2.4.1.5), drawn
    /// from all of the cluster's warehouses but the home one, so a remote line may lie in
    /// another partition [default: the profile's, standard 1, paper 0].
    #[arg(long, value_name = "PCT")]
    pub remote_items: Option<u32>,
    /// Percent of Payments by a customer of a remote warehouse (TPC-C clause 2.5.1.2), drawn
    /// from all of the cluster's warehouses but the home one [default: the profile's,
    /// standard 15, paper 0].
    #[arg(long, value_name = "PCT")]
    pub remote_payments: Option<u32>,
    /// Shares of NewOrders forced multi-partition, comma-separated percents (e.g.
    /// `0,10,20,50`): each mode runs once per share, with one order line of that share of
    /// NewOrders supplied by a warehouse of another partition (needs at least two
    /// partitions). Prints NewOrder throughput, latency and single/multi-partition commits per
    /// mode per share instead of the side-by-side table, and writes
    /// `compare-multi-partition.{json,csv,svg}` (the SVG: NewOrder throughput against the
    /// share, one line per mode) into the directory of --json, else --csv, else --svg, else
    /// `<run_dir>/compare/`.
    #[arg(long, value_name = "PCT,…", value_delimiter = ',')]
    pub multi_partition: Vec<u32>,
    /// Length of each measured phase in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of unmeasured warm-up before each measured phase.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Seed of the input generator (the population's seed is cluster.toml's).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write a JSON array, one object per run (the fields of `glass bench --json` plus the
    /// comparison's).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the table's figures as CSV, one line per run.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Draw throughput and latency bars per run into this SVG file.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// After each run, a failover run of the same mode: partition 1's first replica (its
    /// primary in the passive modes) killed with SIGKILL a third into the measured phase;
    /// adds detection, unavailability, promotion, acknowledged lost and outcome-unknown
    /// columns (`glass failover --restart-after` measures rejoin).
    #[arg(long)]
    pub failover: bool,
    /// Run each mode N times, the modes interleaved round after round (so a slow stretch of a
    /// shared machine falls on every mode alike), and report each by the median of its runs
    /// with their least and greatest (throughput, NewOrders/s, tpmC, p50, p99, node CPU);
    /// every run is kept in the record (`compare-runs.json`). A check that fails in any run
    /// fails the mode.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// Under each once-a-second line, one line per transaction type (ops/s, p50, p95, p99,
    /// max).
    #[arg(long)]
    pub per_type: bool,
    /// Do not print the once-a-second lines of each run.
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub record: RecordArgs,
}

pub fn run(a: CompareArgs) -> Result<ExitCode> {
    let base = Cluster::open(&a.config)?;
    base.refuse_running(&a.config, "compare starts its own clusters on the same addresses", true)?;
    if a.modes.is_empty() {
        bail!("--modes names no mode; valid: active-active, active-passive, full-stack");
    }
    let mix = a.mix.as_deref().map(Mix::parse).transpose()?;
    for p in [&a.json, &a.csv, &a.svg].into_iter().flatten() {
        bench::check_writable_file(p).with_context(|| format!("{}", p.display()))?;
    }
    let runs = Runs {
        modes: &a.modes,
        replicas: &a.replicas,
        shipping: a.shipping,
        agreement: a.agreement,
        multi_partition: &a.multi_partition,
        shares: RemoteShares {
            remote_item_pct: a.remote_items,
            remote_payment_pct: a.remote_payments,
            multi_partition_pct: 0,
        },
    };
    plan::check_shares(&base.config, &runs)?;
    plan::check_combination(&runs, a.repeat, a.failover, a.sweep.as_deref())?;
    let outputs = [("--json", a.json.as_deref()), ("--csv", a.csv.as_deref()), ("--svg", a.svg.as_deref())];
    let (curve_dir, curve_files) = plan::curve_files(&base.config, outputs, !a.multi_partition.is_empty())?;
    // Every plan first, so an impossible flag fails before anything runs.
    let plans = plan::plans(&base, &runs)?;
    let warehouses = usize::from(base.config.warehouses_total());
    let cfg = DriverConfig {
        profile: a.profile.into(),
        mix,
        clients: a.clients.unwrap_or(warehouses * CLIENTS_PER_WAREHOUSE_DEFAULT),
        inflight: a.inflight.unwrap_or(INFLIGHT_DEFAULT),
        rate: a.rate,
        warmup_s: a.warmup,
        stop: StopAfter::Seconds(a.duration),
        seed: a.seed,
        outages: false,
        retries: true,
    };
    cfg.validate()?;
    if a.modes.iter().any(|m| m.replica_keeps_own_log()) {
        let what = format!("run_dir {} (where the full stack writes its log)", base.config.run_dir.display());
        a.record.check_durable(&base.config.run_dir, &what)?;
    }
    let mut record = a.record.open("compare", &base.config.run_dir)?;
    record.copy_config(&base.path, "cluster.toml")?;
    let outcome = compare(&a, &base, &plans, &cfg, &runs, (&curve_dir, &curve_files), &mut record);
    close_record(&mut record, outcome)
}

/// The runs, their table and every file of the record.
fn compare(
    a: &CompareArgs,
    base: &Cluster,
    plans: &[Plan],
    cfg: &DriverConfig,
    runs: &Runs<'_>,
    curve: (&Path, &[PathBuf; 3]),
    record: &mut Record,
) -> Result<ExitCode> {
    println!("{}", plan::heading(base, plans.len(), cfg, a.duration, a.sweep.is_some(), a.repeat));
    let exe = glass_exe()?;
    if let Some(rates) = &a.sweep {
        return run_sweeps(a, plans, &exe, cfg, runs, rates, record);
    }
    let mut failed = Vec::new();
    let mut checks = Vec::new();
    let rounds = a.repeat as usize;
    let mut each_run: Vec<Vec<CompareRow>> = vec![Vec::new(); plans.len()];
    for (k, (i, plan)) in (0..rounds).flat_map(|_| plans.iter().enumerate()).enumerate() {
        if rounds > 1 {
            print!("\nround {}/{}", k / plans.len() + 1, rounds);
        }
        println!("\n{}", plan.heading(i, plans.len()));
        let shares = RemoteShares { multi_partition_pct: plan.multi_partition.unwrap_or(0), ..runs.shares };
        let mut progress = Console::new(!a.quiet);
        let echo = harness::measure::Echo { quiet: a.quiet, per_type: a.per_type };
        let mut row = plan::run_one(plan, &exe, cfg, &shares, echo, a.record.keep_logs, &mut progress)
            .with_context(|| format!("the {} run", plan.mode))?;
        plan.copy_config(record)?;
        if a.failover {
            let how = (a.duration / 3.0, a.quiet, a.record.keep_logs);
            let mut progress = Console::new(!a.quiet);
            // The failover runs use `glass failover`'s load for the mode unless --inflight
            // says otherwise (the full stack's knee, harness::measure::INFLIGHT_DEFAULT_FULL_STACK),
            // so that the two commands report one figure.
            let inflight = a.inflight.unwrap_or(failover_inflight_default(plan.mode));
            let fcfg = DriverConfig { inflight, ..cfg.clone() };
            let passed =
                plan::run_failovers(plan, &exe, &fcfg, shares, how, &mut progress, &mut |s| print!("{s}"), &mut row)?;
            let label = format!("{} failover", row.label());
            if !passed && !failed.contains(&label) {
                failed.push(label);
            }
            checks.push(plan::failover_check(&row, passed));
        }
        checks.push(plan::run_check(&row, (rounds > 1).then_some(k / plans.len() + 1)));
        if !row.checks_passed() && !failed.contains(&row.label()) {
            failed.push(row.label());
        }
        println!("{}", row.line());
        each_run[i].push(row);
        if rounds > 1 {
            harness::compare::repeat::write_runs(record, &each_run)?;
        }
    }
    let rows = harness::compare::repeat::rows(record, each_run, rounds)?;
    println!();
    let multi = !a.multi_partition.is_empty();
    let summary = report::render_summary(&rows, multi);
    print!("{summary}");
    let outputs = [a.json.as_deref(), a.csv.as_deref(), a.svg.as_deref()];
    report::write_files(record, &rows, multi.then_some(curve), outputs, &mut wrote)?;
    finish_record(record, &summary, &checks)?;
    Ok(exit_code(&failed))
}

/// `--sweep`: each plan's sweep on one cluster start, then the table, the files and where
/// each mode breaks.
fn run_sweeps(
    a: &CompareArgs,
    plans: &[Plan],
    exe: &Path,
    cfg: &DriverConfig,
    runs: &Runs<'_>,
    rates: &[f64],
    record: &mut Record,
) -> Result<ExitCode> {
    let mut points: Vec<SweepPoint> = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        println!("\n{}", plan.heading(i, plans.len()));
        let mut progress = Console::new(!a.quiet);
        let mut each = |p: &SweepPoint| println!("  {}", sweep::render_point(p));
        let echo = harness::measure::Echo { quiet: true, per_type: false };
        let mine =
            sweep::run_sweep(plan, exe, cfg, &runs.shares, rates, echo, a.record.keep_logs, &mut progress, &mut each)
                .with_context(|| format!("the {} sweep", plan.mode))?;
        plan.copy_config(record)?;
        points.extend(mine);
    }
    println!();
    let summary = sweep::render_table(&points);
    print!("{summary}");
    sweep::write_files(record, &points)?;
    let (checks, failed) = sweep::checks(&points);
    finish_record(record, &summary, &checks)?;
    Ok(exit_code(&failed))
}

/// Exit status 1, said on stderr, when the runs of `failed` failed their checks.
fn exit_code(failed: &[String]) -> ExitCode {
    if failed.is_empty() {
        return ExitCode::SUCCESS;
    }
    eprintln!("glass: error: checks failed for {}", failed.join(", "));
    ExitCode::from(1)
}
