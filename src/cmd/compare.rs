//! `glass compare`: the project's main job — Section 5.3 end to end. For each replication
//! factor and each mode (active-active, active-passive, full-stack), it derives a cluster
//! description from `cluster.toml`, starts that cluster, runs the same TPC-C workload (same
//! seed, clients, duration, warm-up), checks it (replica digests, consistency, acknowledged
//! NewOrders, replica reads), stops it, and prints one side-by-side table
//! ([`workload::compare`]); `--json`, `--csv` and `--svg` keep the record.
//!
//! `--multi-partition 0,10,20,50` runs each mode once per share of NewOrders forced
//! multi-partition and draws H-Store's curve instead of the side-by-side table: NewOrder
//! throughput against the share, one line per mode ([`workload::compare::multi`]), written to
//! `compare-multi-partition.{json,csv,svg}` beside the other outputs.
//!
//! Guarantees: every run starts from a fresh run directory of its own
//! (`<run_dir>/compare/<mode>-r<k>/`, `…-r<k>-mp<share>/` with `--multi-partition`, which keeps its process logs and its derived
//! `cluster.toml`), and its cluster is stopped however the run ends; the figures of a row
//! come from that run only (CPU from `/proc` and the nodes' thread accounting, bytes from
//! the processes' own counters, disk from the files left in its run directory); a failed
//! check makes the command exit non-zero after the table is printed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use wire::config::{ClusterConfig, Mode, Shipping};
use workload::bench::{self, StopAfter};
use workload::client::driver::{DriverConfig, RemoteShares};
use workload::compare::multi::{self as curve, CurvePoint};
use workload::compare::{self as report, CompareRow};
use workload::gen::{Mix, Profile};

use super::bench_cluster::{
    check_partitions, measure_with, Measurement, Sample, CLIENTS_PER_WAREHOUSE_DEFAULT, INFLIGHT_DEFAULT,
};
use super::cluster::{runtime, Cluster, Proc};
use super::failover::{experiment, Experiment};

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

/// One mode at one replication factor (and, with `--multi-partition`, one share).
struct Plan {
    mode: Mode,
    config: ClusterConfig,
    dir: PathBuf,
    /// The share of NewOrders forced multi-partition (`--multi-partition`).
    multi_partition: Option<u32>,
}

pub fn run(a: CompareArgs) -> Result<ExitCode> {
    let base = Cluster::open(&a.config)?;
    if !base.running_procs().is_empty() {
        bail!(
            "the cluster of {} is running; compare starts its own clusters on the same addresses — run `glass cluster \
             down --config {}` first",
            base.path.display(),
            a.config.display()
        );
    }
    if a.modes.is_empty() {
        bail!("--modes names no mode; valid: active-active, active-passive, full-stack");
    }
    let profile: Profile = a.profile.parse()?;
    let mix = a.mix.as_deref().map(Mix::parse).transpose()?;
    for p in [&a.json, &a.csv, &a.svg].into_iter().flatten() {
        bench::check_writable_file(p).with_context(|| format!("{}", p.display()))?;
    }
    let shares_given: Vec<Option<u32>> =
        if a.multi_partition.is_empty() { vec![None] } else { a.multi_partition.iter().copied().map(Some).collect() };
    let base_shares =
        RemoteShares { remote_item_pct: a.remote_items, remote_payment_pct: a.remote_payments, multi_partition_pct: 0 };
    base_shares.validate()?;
    for &pct in a.multi_partition.iter() {
        let shares = RemoteShares { multi_partition_pct: pct, ..base_shares };
        shares.validate()?;
        check_partitions(&base.config, &shares)?;
    }
    if a.failover && !a.multi_partition.is_empty() {
        bail!("--failover and --multi-partition cannot be combined: run them as two comparisons");
    }
    let compare_dir = base.config.run_dir.join("compare");
    let curve_dir = [&a.json, &a.csv, &a.svg]
        .into_iter()
        .flatten()
        .next()
        .map(|p| p.parent().map(Path::to_path_buf).unwrap_or_default())
        .unwrap_or_else(|| compare_dir.clone());
    let curve_files = ["json", "csv", "svg"].map(|x| {
        let dir = if curve_dir.as_os_str().is_empty() { Path::new(".") } else { curve_dir.as_path() };
        dir.join(format!("{}.{x}", curve::FILE_STEM))
    });
    if !a.multi_partition.is_empty() {
        for (flag, given) in [("--json", &a.json), ("--csv", &a.csv), ("--svg", &a.svg)] {
            if let Some(p) = given.as_ref().filter(|p| curve_files.iter().any(|c| same_file_name(c, p))) {
                bail!(
                    "{flag} {} would be overwritten by the multi-partition curve, which is written as {}.{{json,csv,svg}} \
                     in the same directory: give the per-run file another name",
                    p.display(),
                    curve::FILE_STEM
                );
            }
        }
    }
    // Every plan first, so an impossible flag fails before anything runs.
    let factors: Vec<Option<usize>> =
        if a.replicas.is_empty() { vec![None] } else { a.replicas.iter().copied().map(Some).collect() };
    let mut plans = Vec::new();
    for factor in &factors {
        let placed = match factor {
            Some(k) => base.config.with_replication(*k).with_context(|| format!("--replicas {k}"))?,
            None => base.config.clone(),
        };
        for &mode in &a.modes {
            let mut config = placed.clone();
            config.mode = mode;
            if let Some(s) = a.shipping {
                config.shipping = s;
            }
            config.validate().with_context(|| format!("the {mode} cluster derived from {}", base.path.display()))?;
            for &multi_partition in &shares_given {
                let mut config = config.clone();
                let mut name = format!("{}-r{}", mode.name(), config.replication_factor());
                if let Some(pct) = multi_partition {
                    name.push_str(&format!("-mp{pct}"));
                }
                let dir = compare_dir.join(name);
                config.run_dir = dir.clone();
                plans.push(Plan { mode, config, dir, multi_partition });
            }
        }
    }
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
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        println!(
            "\n[{}/{}] {} — {} replica{} per partition{}{}",
            i + 1,
            plans.len(),
            plan.mode,
            plan.config.replication_factor(),
            if plan.config.replication_factor() == 1 { "" } else { "s" },
            if plan.mode.is_passive() { format!(", {} shipping", plan.config.shipping.name()) } else { String::new() },
            plan.multi_partition.map_or(String::new(), |p| format!(", {p}% multi-partition NewOrders"))
        );
        let shares = RemoteShares { multi_partition_pct: plan.multi_partition.unwrap_or(0), ..base_shares };
        let mut row = run_one(plan, &cfg, &shares, a.quiet).with_context(|| format!("the {} run", plan.mode))?;
        if a.failover {
            let mut config = plan.config.clone();
            config.run_dir = plan.dir.join("failover");
            let x = Experiment {
                victim: config.partitions[0].replicas[0],
                signal: libc::SIGKILL,
                at: a.duration / 3.0,
                restart_after: None,
                cfg: DriverConfig { outages: true, ..cfg.clone() },
                shares,
                quiet: a.quiet,
            };
            println!("  failover: SIGKILL node {} at {:.1} s", x.victim, x.at);
            let f = experiment(&config, &x).with_context(|| format!("the {} failover run", plan.mode))?;
            print!("{}", f.to_string().lines().map(|l| format!("  {l}\n")).collect::<String>());
            row.failover_detection_ms = f.detection_ms;
            row.failover_unavailability_ms = f.unavailability_ms.or(f
                .partitions
                .iter()
                .filter_map(|p| p.unavailability_at_most_ms)
                .reduce(f64::max));
            row.failover_recovery_ms = f.recovery_ms;
            row.failover_lost = Some(f.lost_acknowledged);
            row.failover_outcome_unknown = Some(f.outcome_unknown);
            let loss_allowed = plan.mode == Mode::ActivePassive && plan.config.shipping == Shipping::Async;
            if (f.lost_acknowledged > 0 && !loss_allowed) || !f.digests_equal || !f.consistent {
                failed.push(format!("{} failover", row.label()));
            }
        }
        if !(row.digests_equal && row.consistent && row.replica_reads_consistent != Some(false)) {
            failed.push(row.label());
        }
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
        rows.push(row);
    }
    println!();
    if a.multi_partition.is_empty() {
        print!("{}", report::render_table(&rows));
    } else {
        let points: Vec<CurvePoint> = rows.iter().filter_map(CurvePoint::of).collect();
        print!("{}", curve::render_table(&points));
        std::fs::create_dir_all(&curve_dir).with_context(|| format!("create {}", curve_dir.display()))?;
        let [json, csv, svg] = &curve_files;
        super::write_json(json, &curve::to_json(&points))?;
        bench::write_atomic(csv, curve::to_csv(&points).as_bytes())?;
        println!("wrote {}", csv.display());
        curve::write_svg(&points, svg)?;
        println!("wrote {}", svg.display());
    }
    if let Some(p) = &a.json {
        super::write_json(p, &report::to_json(&rows))?;
    }
    if let Some(p) = &a.csv {
        bench::write_atomic(p, report::to_csv(&rows).as_bytes())?;
        println!("wrote {}", p.display());
    }
    if let Some(p) = &a.svg {
        report::write_svg(&rows, p)?;
        println!("wrote {}", p.display());
    }
    if !failed.is_empty() {
        eprintln!("glass: error: checks failed for {}", failed.join(", "));
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts the plan's cluster, measures, checks, stops it; returns its row.
fn run_one(plan: &Plan, cfg: &DriverConfig, shares: &RemoteShares, quiet: bool) -> Result<CompareRow> {
    let note = format!(
        "Derived by `glass compare` from the cluster it was given: mode {}, {} replicas.",
        plan.mode,
        plan.config.replication_factor()
    );
    let cluster = Cluster::derived(&plan.config, &note)?;
    let t0 = Instant::now();
    let guard = super::bench_cluster::up_guarded(&cluster, quiet)?;
    let load_seconds = t0.elapsed().as_secs_f64();
    let rt = runtime()?;
    let client = cluster.client();
    let local = cluster.running_procs();
    let Measurement { mut report, acks, payments, start, end, .. } =
        measure_with(&rt, &cluster, &client, cfg, shares, &local, quiet)?;
    report.load_seconds = load_seconds;
    let verdict = super::bench_cluster::check_and_down(&rt, guard, &client, &acks, &payments)?;
    let disk_bytes = disk_bytes(&plan.dir, &cluster)?;
    if disk_bytes > 0 {
        // The full stack leaves gigabytes of log and checkpoint in the page cache; write them
        // back now, between runs, rather than during the next run's measured phase.
        // SAFETY: sync(2) takes no arguments and cannot fail.
        unsafe { libc::sync() };
    }

    let (Some(s), Some(e)) = (start, end) else { bail!("the run was not sampled") };
    let committed = report.committed.max(1) as f64;
    let per_1000 = |cpu_s: f64| 1000.0 * cpu_s / committed;
    let config = &plan.config;
    let primary_of = |p: u16| config.partition(p).map(|c| c.replicas[0]);
    let delta = |pick: &dyn Fn(&wire::messages::PartitionReport) -> f64, primary: Option<bool>| -> f64 {
        let sum = |sample: &Sample| -> f64 {
            sample
                .replicas
                .iter()
                .filter(|(n, r)| primary.is_none_or(|want| (primary_of(r.partition) == Some(*n)) == want))
                .map(|(_, r)| pick(r))
                .sum()
        };
        sum(&e) - sum(&s)
    };
    let cpu = |r: &wire::messages::PartitionReport| r.cpu_ms as f64 / 1000.0;
    let primary_cpu = delta(&cpu, Some(true));
    let backup_cpu = delta(&cpu, Some(false));
    let shipped = delta(&|r| r.replication.shipped_bytes as f64, None);
    let log_bytes = delta(&|r| r.replication.log_bytes as f64, None);
    let fsyncs = delta(&|r| r.replication.fsyncs as f64, None);
    let acks_n = delta(&|r| r.replication.acks as f64, None);
    let ack_delay = delta(&|r| r.replication.ack_delay_us_sum as f64, None);
    let batch_bytes =
        |sample: &Sample| -> f64 { sample.coordinator.iter().map(|p| p.replication.shipped_bytes as f64).sum() };
    let node_cpu: f64 = e
        .process_cpu_s
        .iter()
        .filter(|(label, _, _)| label.starts_with("node"))
        .map(|(label, end, _)| end - s.process_cpu_s.iter().find(|(l, _, _)| l == label).map_or(*end, |x| x.1))
        .sum();
    let replicas = config.replication_factor();
    let reads_total: usize = verdict.partitions.iter().map(|p| p.reads).sum();
    let bench_json = serde_json::to_value(&report)?;
    let neworders = report.per_txn.iter().find(|k| k.txn == "neworder").map_or(0, |k| k.count);
    let (single, multi) =
        report.cluster.as_ref().map_or((0, 0), |c| (c.committed_single_partition, c.committed_multi_partition));
    Ok(CompareRow {
        mode: plan.mode.name().to_string(),
        shipping: plan.mode.is_passive().then(|| config.shipping.name().to_string()),
        replicas,
        nodes: config.nodes.len(),
        warehouses: report.warehouses,
        clients: cfg.clients,
        seconds: report.seconds,
        committed: report.committed,
        aborted: report.aborted,
        txn_per_sec: report.txn_per_sec,
        neworder_per_sec: neworders as f64 / report.seconds.max(1e-9),
        multi_partition_pct: plan.multi_partition,
        committed_single_partition: single,
        committed_multi_partition: multi,
        p50_us: report.p50_us,
        p95_us: report.p95_us,
        p99_us: report.p99_us,
        primary_cpu_s_per_1000: per_1000(primary_cpu),
        backup_cpu_s_per_1000: (replicas > 1).then(|| per_1000(backup_cpu)),
        node_cpu_s_per_1000: per_1000(node_cpu),
        net_bytes_per_txn: shipped / committed,
        batch_bytes_per_txn: (batch_bytes(&e) - batch_bytes(&s)) / committed,
        log_bytes_per_txn: log_bytes / committed,
        fsyncs: fsyncs as u64,
        disk_bytes,
        backup_lag_ms: (plan.mode.is_passive() && acks_n > 0.0).then(|| ack_delay / acks_n / 1e3),
        replica_reads_consistent: (replicas > 1 && reads_total > 0)
            .then(|| verdict.partitions.iter().all(|p| p.reads_differing == 0)),
        digests_equal: verdict.partitions.iter().all(|p| p.agreed && p.copy_ok),
        failover_detection_ms: None,
        failover_unavailability_ms: None,
        failover_recovery_ms: None,
        failover_lost: None,
        failover_outcome_unknown: None,
        consistent: verdict.consistency.all_passed()
            && verdict.acks_missing.is_empty()
            && verdict.payments_missing.is_empty(),
        bench: bench_json,
    })
}

/// Whether two paths name the same file, judged without touching the disk (neither needs to
/// exist): equal once a bare file name is taken as relative to `.`.
fn same_file_name(a: &Path, b: &Path) -> bool {
    let norm = |p: &Path| -> PathBuf {
        if p.parent().is_none_or(|d| d.as_os_str().is_empty()) {
            Path::new(".").join(p)
        } else {
            p.to_path_buf()
        }
    };
    norm(a) == norm(b)
}

/// Bytes of the files a run left in its directory besides what the launcher writes (process
/// logs, pid files, the derived cluster.toml): the nodes' databases, logs and checkpoints.
fn disk_bytes(dir: &Path, cluster: &Cluster) -> Result<u64> {
    let launcher: Vec<PathBuf> = std::iter::once(Proc::Coordinator)
        .chain(cluster.config.nodes.iter().map(|n| Proc::Node(n.id)))
        .map(|p| cluster.log_file(&p))
        .collect();
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("read {}", d.display()))? {
            let entry = entry?;
            let path = entry.path();
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(path);
            } else if !(launcher.contains(&path)
                || path.extension().is_some_and(|x| x == "pid")
                || path == dir.join("cluster.toml"))
            {
                total += meta.len();
            }
        }
    }
    Ok(total)
}
