//! `glass compare`: the project's main job — Section 5.3 end to end. For each replication
//! factor and each mode (active-active, active-passive, full-stack), [`harness::compare::plan`]
//! derives a cluster description from `cluster.toml`, starts that cluster, runs the same TPC-C
//! workload (same seed, clients, duration, warm-up), checks it (replica digests, consistency,
//! acknowledged NewOrders, replica reads) and stops it; this module turns the flags into those
//! plans, prints each run and one side-by-side table ([`harness::compare`]); `--json`, `--csv`
//! and `--svg` keep the record.
//!
//! `--multi-partition 0,10,20,50` runs each mode once per share of NewOrders forced
//! multi-partition and draws H-Store's curve instead of the side-by-side table: NewOrder
//! throughput against the share, one line per mode ([`harness::compare::multi`]), written to
//! `compare-multi-partition.{json,csv,svg}` beside the other outputs. `--failover` adds a
//! failover run per mode ([`harness::failover::experiment`]).
//!
//! A failed check ([`harness::verdict`]) makes the command exit non-zero after the table is
//! printed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use harness::compare::multi::{self as curve, CurvePoint};
use harness::compare::plan::{self, Plan, Runs};
use harness::compare::{self as report, CompareRow};
use harness::failover::experiment::{self as failover, Experiment};
use harness::measure::{CLIENTS_PER_WAREHOUSE_DEFAULT, INFLIGHT_DEFAULT};
use harness::{Cluster, HarnessError};
use wire::config::{Mode, Shipping};
use workload::bench::{self, StopAfter};
use workload::client::driver::{DriverConfig, RemoteShares};
use workload::gen::{Mix, Profile};

use super::progress::{glass_exe, Console};

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
    /// Client connections, each bound to one home warehouse [default: one per warehouse].
    #[arg(long)]
    pub clients: Option<usize>,
    /// Requests each connection keeps in flight [default: 128].
    #[arg(long)]
    pub inflight: Option<usize>,
    /// Workload profile: `paper` (50% NewOrder / 50% Payment, the paper's Section 4) or
    /// `standard` (TPC-C's mix).
    #[arg(long, default_value = "paper")]
    pub profile: String,
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
    /// Do not print the once-a-second lines of each run.
    #[arg(long)]
    pub quiet: bool,
}

pub fn run(a: CompareArgs) -> Result<ExitCode> {
    let base = Cluster::open(&a.config)?;
    if !base.running_procs().is_empty() {
        return Err(HarnessError::ClusterRunning {
            path: base.path.clone(),
            given: a.config.clone(),
            what: "compare starts its own clusters on the same addresses",
        }
        .into());
    }
    if a.modes.is_empty() {
        bail!("--modes names no mode; valid: active-active, active-passive, full-stack");
    }
    let profile: Profile = a.profile.parse()?;
    let mix = a.mix.as_deref().map(Mix::parse).transpose()?;
    for p in [&a.json, &a.csv, &a.svg].into_iter().flatten() {
        bench::check_writable_file(p).with_context(|| format!("{}", p.display()))?;
    }
    let runs = Runs {
        modes: &a.modes,
        replicas: &a.replicas,
        shipping: a.shipping,
        multi_partition: &a.multi_partition,
        shares: RemoteShares {
            remote_item_pct: a.remote_items,
            remote_payment_pct: a.remote_payments,
            multi_partition_pct: 0,
        },
    };
    plan::check_shares(&base.config, &runs)?;
    if a.failover && !a.multi_partition.is_empty() {
        bail!("--failover and --multi-partition cannot be combined: run them as two comparisons");
    }
    let outputs = [("--json", a.json.as_deref()), ("--csv", a.csv.as_deref()), ("--svg", a.svg.as_deref())];
    let (curve_dir, curve_files) = plan::curve_files(&base.config, outputs, !a.multi_partition.is_empty())?;
    // Every plan first, so an impossible flag fails before anything runs.
    let plans = plan::plans(&base, &runs)?;
    let warehouses = usize::from(base.config.warehouses_total());
    let cfg = DriverConfig {
        profile,
        mix,
        clients: a.clients.unwrap_or(warehouses * CLIENTS_PER_WAREHOUSE_DEFAULT),
        inflight: a.inflight.unwrap_or(INFLIGHT_DEFAULT),
        rate: None,
        warmup_s: a.warmup,
        stop: StopAfter::Seconds(a.duration),
        seed: a.seed,
        outages: false,
    };
    cfg.validate()?;

    println!(
        "compare: {} run{} of {:.0} s (+{:.0} s warm-up) on {} ({} warehouses, {} nodes), seed {}",
        plans.len(),
        if plans.len() == 1 { "" } else { "s" },
        a.duration,
        a.warmup,
        base.path.display(),
        warehouses,
        base.config.nodes.len(),
        a.seed
    );
    let exe = glass_exe()?;
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        print_plan(i, plans.len(), plan);
        let shares = RemoteShares { multi_partition_pct: plan.multi_partition.unwrap_or(0), ..runs.shares };
        let mut progress = Console::new(!a.quiet);
        let mut row = plan::run_one(plan, &exe, &cfg, &shares, a.quiet, &mut progress)
            .with_context(|| format!("the {} run", plan.mode))?;
        if a.failover && !failover_run(&a, plan, &exe, &cfg, shares, &mut row)? {
            failed.push(format!("{} failover", row.label()));
        }
        if !row.checks_passed() {
            failed.push(row.label());
        }
        print_row(&row);
        rows.push(row);
    }
    println!();
    if a.multi_partition.is_empty() {
        print!("{}", report::render_table(&rows));
    } else {
        write_curve(&rows, &curve_dir, &curve_files)?;
    }
    write_outputs(&a, &rows)?;
    if !failed.is_empty() {
        eprintln!("glass: error: checks failed for {}", failed.join(", "));
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The heading of one run.
fn print_plan(i: usize, n: usize, plan: &Plan) {
    let k = plan.config.replication_factor();
    println!(
        "\n[{}/{}] {} — {} replica{} per partition{}{}",
        i + 1,
        n,
        plan.mode,
        k,
        if k == 1 { "" } else { "s" },
        plan.config.shipping().map_or(String::new(), |s| format!(", {s} shipping")),
        plan.multi_partition.map_or(String::new(), |p| format!(", {p}% multi-partition NewOrders"))
    );
}

/// One run's summary line.
fn print_row(row: &CompareRow) {
    println!(
        "  {:.0} committed txn/s ({:.0} NewOrders/s), p50 {:.2} ms, p99 {:.2} ms; {} single-, {} \
         multi-partition commits; digests {}, consistency {}",
        row.txn_per_sec,
        row.neworder_per_sec,
        row.p50_us / 1e3,
        row.p99_us / 1e3,
        row.committed_single_partition,
        row.committed_multi_partition,
        if row.digests_equal { "equal" } else { "DIFFER" },
        if row.consistent { "holds" } else { "VIOLATED" }
    );
}

/// `--failover`: partition 1's first replica SIGKILLed a third into the measured phase, on
/// the plan's cluster, then — with a coordinator group — the leading coordinator; fills the
/// row's failover fields. Returns whether the runs passed.
fn failover_run(
    a: &CompareArgs,
    plan: &Plan,
    exe: &Path,
    cfg: &DriverConfig,
    shares: RemoteShares,
    row: &mut CompareRow,
) -> Result<bool> {
    let mut config = plan.config.clone();
    config.run_dir = plan.dir.join("failover");
    let x = Experiment {
        exe: exe.to_path_buf(),
        victim: harness::failover::experiment::Kill::Node(config.partitions[0].replicas[0]),
        signal: libc::SIGKILL,
        at: a.duration / 3.0,
        restart_after: None,
        cfg: DriverConfig { outages: true, ..cfg.clone() },
        shares,
        quiet: a.quiet,
    };
    println!("  failover: SIGKILL {} at {:.1} s", x.victim, x.at);
    let f = failover::experiment(&config, &x, &mut Console::new(!a.quiet))
        .with_context(|| format!("the {} failover run", plan.mode))?;
    print!("{}", f.to_string().lines().map(|l| format!("  {l}\n")).collect::<String>());
    row.set_failover(&f);
    let mut passed = failover::passed(&plan.config, &f);
    if config.coordinators.len() > 1 {
        // The group's leader killed too (docs/design.md §11): the coordinator row.
        config.run_dir = plan.dir.join("failover-coordinator");
        let x = Experiment { victim: harness::failover::experiment::Kill::Leader, ..x };
        println!("  failover: SIGKILL {} at {:.1} s", x.victim, x.at);
        let f = failover::experiment(&config, &x, &mut Console::new(!a.quiet))
            .with_context(|| format!("the {} coordinator failover run", plan.mode))?;
        print!("{}", f.to_string().lines().map(|l| format!("  {l}\n")).collect::<String>());
        row.set_coordinator_failover(&f);
        passed &= failover::passed(&plan.config, &f);
    }
    Ok(passed)
}

/// The multi-partition curve: its table, and its JSON, CSV and SVG files.
fn write_curve(rows: &[CompareRow], dir: &Path, files: &[PathBuf; 3]) -> Result<()> {
    let points: Vec<CurvePoint> = rows.iter().filter_map(CurvePoint::of).collect();
    print!("{}", curve::render_table(&points));
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let [json, csv, svg] = files;
    super::write_json(json, &curve::to_json(&points))?;
    bench::write_atomic(csv, curve::to_csv(&points).as_bytes())?;
    println!("wrote {}", csv.display());
    curve::write_svg(&points, svg)?;
    println!("wrote {}", svg.display());
    Ok(())
}

/// `--json`, `--csv`, `--svg`.
fn write_outputs(a: &CompareArgs, rows: &[CompareRow]) -> Result<()> {
    if let Some(p) = &a.json {
        super::write_json(p, &report::to_json(rows))?;
    }
    if let Some(p) = &a.csv {
        bench::write_atomic(p, report::to_csv(rows).as_bytes())?;
        println!("wrote {}", p.display());
    }
    if let Some(p) = &a.svg {
        report::write_svg(rows, p)?;
        println!("wrote {}", p.display());
    }
    Ok(())
}
