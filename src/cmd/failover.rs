//! `glass failover`: the other half of Section 5.3, on real processes. It starts the cluster
//! (mode from `--mode` or the file), runs the TPC-C driver in outage mode, kills a node with a
//! real `SIGKILL` (or stops it with `SIGTERM`) at `--at` seconds into the measured phase,
//! optionally starts it again `--restart-after` seconds later (it rejoins), and reports per
//! partition how long it could not commit, how long detection and recovery took, and whether
//! anything acknowledged was lost ([`harness::failover::experiment`] runs it; this module
//! turns the flags into it and prints the record).
//!
//! Every run keeps a run record ([`harness::record`]): `failover.json` headed by the run's
//! metadata, `failover.svg`, the report as printed, the checks, `cluster.toml` and the derived
//! one, `command.txt`, `run.json` and `report.html`. `--rate` drives it open loop.
//!
//! The run's cluster lives in `<run_dir>/failover/<mode>/` (its databases and logs removed
//! afterwards unless `--keep-logs`); the command exits non-zero when
//! the record fails [`harness::verdict`]: a mode that promises no loss (active-active,
//! synchronous active-passive, full-stack) lost an acknowledged transaction, or replicas
//! differ, or consistency fails (and, for a kill loop, when a restarted node did not rejoin).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use harness::failover::experiment::{self as failover, Experiment, KillLoop};
use harness::failover::partition::{Cut, CutExperiment};
use harness::measure::{failover_inflight_default, CLIENTS_PER_WAREHOUSE_DEFAULT};
use harness::record::Record;
use harness::Cluster;
use wire::config::{AgreementRule, ClusterConfig, Mode, Shipping};
use wire::messages::NodeId;
use workload::bench::{self, StopAfter};
use workload::client::driver::{DriverConfig, RemoteShares};

use super::progress::{glass_exe, Console};
use super::{close_record, finish_record, wrote, ProfileArg, RecordArgs};

#[derive(Args, Debug)]
pub struct FailoverArgs {
    /// The cluster to run.
    #[arg(long, default_value = wire::config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// Replication mode, overriding the file's: active-active, active-passive, full-stack.
    #[arg(long)]
    pub mode: Option<Mode>,
    /// Passive modes: sync or async shipping, overriding the file's.
    #[arg(long)]
    pub shipping: Option<Shipping>,
    /// Replicas per partition, overriding the file's placement (partition i on nodes i,
    /// i+1, …). `--replicas 1 --mode full-stack` is the conventional single-copy database:
    /// a killed node comes back only by restart recovery from its write-ahead log.
    #[arg(long)]
    pub replicas: Option<usize>,
    /// Active-active: `majority` answers a client once a majority of a partition's replicas
    /// agreed (the rest are compared when they report), `all` once every live replica did;
    /// the two differ only with three replicas or more (docs/cluster.md, "Agreement").
    /// Default: cluster.toml's `agreement`.
    #[arg(long, value_name = "all|majority")]
    pub agreement: Option<AgreementRule>,
    /// Kill this with SIGKILL: a node id [default: the first replica of partition 1 — its
    /// primary in the passive modes], `coordinator` (the coordinator leading at the moment of
    /// the kill; needs several [[coordinators]]), or `any` (a node or the leading
    /// coordinator, drawn from --seed). A killed coordinator restarted with
    /// --restart-after comes back as a standby.
    #[arg(long, num_args = 0..=1, default_missing_value = "0", conflicts_with_all = ["stop", "freeze"], value_name = "NODE|coordinator|any")]
    pub kill: Option<failover::Target>,
    /// Stop this node with SIGTERM (a clean shutdown) instead of killing it.
    #[arg(long, conflicts_with = "freeze")]
    pub stop: Option<NodeId>,
    /// Freeze this node with SIGSTOP instead of killing it: its process stops and its kernel
    /// closes nothing — how a hung machine or a cut network looks to the others — so only
    /// the heartbeat timeout detects it (docs/cluster.md, "Failure detection"). Killed with
    /// SIGKILL when the run ends; cannot be restarted within the run.
    #[arg(long, conflicts_with_all = ["restart_after", "kill_loop"])]
    pub freeze: Option<NodeId>,
    /// A kill loop instead of one kill: CYCLES cycles, the first at `--at`, one every
    /// `--every` seconds. Each SIGKILLs a node drawn from `--seed`, restarts it after
    /// `--restart-after` seconds (it rejoins), SIGKILLs it again 50–500 ms into its rejoin,
    /// and restarts it once more to rejoin for good. Reports the longest stretch in which no
    /// partition committed, and checks that nothing acknowledged was lost.
    #[arg(long, value_name = "CYCLES", conflicts_with_all = ["stop", "kill"])]
    pub kill_loop: Option<u32>,
    /// Cut the network between two groups of processes instead of killing one, then heal it:
    /// `A/B`, each group comma-separated, `c<id>` a coordinator and `n<id>` a node (e.g.
    /// `c0/c1,c2`: the first coordinator cut off from the other two; `c0,n1/c1,c2,n2`).
    /// Processes in neither group, and the client, keep every link. The cut is `ip route add
    /// prohibit` on each side's hosts (through ssh for a process with an `ssh` key): it needs
    /// root there. Reports who led, when the side with a majority of the coordinators served,
    /// what a leader cut off in the minority still sent, and the heal (docs/cluster.md,
    /// "Network partitions").
    #[arg(long, value_name = "A/B", conflicts_with_all = ["kill", "stop", "freeze", "kill_loop", "restart_after", "then_kill"])]
    pub partition: Option<String>,
    /// --partition: seconds the cut lasts before it is healed.
    #[arg(long, default_value_t = 2.0, requires = "partition")]
    pub heal_after: f64,
    /// Kill loop: seconds from one cycle's first kill to the next's (a cycle that runs longer
    /// delays the next).
    #[arg(long, default_value_t = 8.0, requires = "kill_loop")]
    pub every: f64,
    /// Seconds into the measured phase at which the node is killed.
    #[arg(long, default_value_t = 3.0)]
    pub at: f64,
    /// Start the killed node again this many seconds after the kill; it rejoins. A full-stack
    /// node recovers from its write-ahead log: alone, it serves again from the recovered
    /// state; with a promoted primary, it cuts its log where the primary's copy ended,
    /// recovers, and catches up from the primary's log as its backup.
    #[arg(long)]
    pub restart_after: Option<f64>,
    /// Once the restarted node is live again (it rejoined), SIGKILL this node too — the other
    /// replica of its partitions — and run on: everything acknowledged must be in what the
    /// rejoined node copied and caught up on (docs/design.md §10). Needs --restart-after.
    #[arg(long, value_name = "NODE", requires = "restart_after")]
    pub then_kill: Option<u16>,
    /// Length of the measured phase in seconds (the kill and the recovery happen inside it).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of unmeasured warm-up.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Client connections [default: one per warehouse].
    #[arg(long)]
    pub clients: Option<usize>,
    /// Requests each connection keeps in flight [default: 128; 16 for the full stack, whose
    /// answers at 128 wait 40–80 ms behind the node's queue for no more throughput, so an
    /// outage would be measured beside a queue (docs/results.md, "The full stack's knee")].
    #[arg(long)]
    pub inflight: Option<usize>,
    /// Open loop: offer this many transactions per second over all connections, so the
    /// outage is seen at a known load rather than at saturation [default: closed loop].
    #[arg(long, value_name = "TXN_PER_S")]
    pub rate: Option<f64>,
    /// Seed of the input generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Workload profile (`standard` draws remote items and payments from every warehouse of
    /// the cluster: multi-partition transactions).
    #[arg(long, value_enum, default_value_t = ProfileArg::Paper)]
    pub profile: ProfileArg,
    /// Percent of order lines supplied by a remote warehouse (clause 2.4.1.5) [default: the
    /// profile's, standard 1, paper 0].
    #[arg(long, value_name = "PCT")]
    pub remote_items: Option<u32>,
    /// Percent of Payments by a customer of a remote warehouse (clause 2.5.1.2) [default:
    /// the profile's, standard 15, paper 0].
    #[arg(long, value_name = "PCT")]
    pub remote_payments: Option<u32>,
    /// Percent of NewOrders forced multi-partition (one line supplied by a warehouse of
    /// another partition): the kill then lands in the middle of multi-partition traffic.
    #[arg(long, value_name = "PCT", default_value_t = 0)]
    pub multi_partition: u32,
    /// Write the report (with the per-100 ms timeline) as one JSON object.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw throughput per 100 ms over time, the kill and the restart marked.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Do not print the once-a-second lines.
    #[arg(long)]
    pub quiet: bool,
    /// Do not ask again about requests a failure took the answer of (count them "outcome
    /// unknown" instead): the behaviour before request ids, for comparison. By default the
    /// load driver asks again, with the same request id, and the cluster answers the original
    /// outcome or runs the transaction if it never ran (docs/design.md §11, "Exactly-once
    /// answers").
    #[arg(long)]
    pub no_retries: bool,
    #[command(flatten)]
    pub record: RecordArgs,
}

pub fn run(a: FailoverArgs) -> Result<ExitCode> {
    let base = Cluster::open(&a.config)?;
    base.refuse_running(&a.config, "failover starts its own", false)?;
    let config = failover::derive(&base.config, a.mode, a.shipping, a.replicas, a.agreement)?;
    let cut = a.partition.as_deref().map(|spec| Cut::parse(spec, &config)).transpose()?;
    if cut.is_some() && !(a.heal_after > 0.0 && a.at + a.heal_after < a.duration) {
        anyhow::bail!(
            "--heal-after {} must be positive and the heal inside the measured phase (at + heal-after < duration)",
            a.heal_after
        );
    }
    let (victim, signal) = failover::victim(
        &config,
        a.kill,
        a.stop.map(|n| (n, libc::SIGTERM)).or(a.freeze.map(|n| (n, libc::SIGSTOP))),
        a.seed,
        &base.path,
    )?;
    failover::check_times(a.at, a.duration, a.restart_after, a.kill_loop.map(|c| (c, a.every)))?;
    for p in [&a.json, &a.svg].into_iter().flatten() {
        bench::check_writable_file(p).with_context(|| format!("{}", p.display()))?;
    }
    let warehouses = usize::from(config.warehouses_total());
    let shares = RemoteShares {
        remote_item_pct: a.remote_items,
        remote_payment_pct: a.remote_payments,
        multi_partition_pct: a.multi_partition,
    };
    shares.validate()?;
    let cfg = DriverConfig {
        profile: a.profile.into(),
        mix: None,
        clients: a.clients.unwrap_or(warehouses * CLIENTS_PER_WAREHOUSE_DEFAULT),
        inflight: a.inflight.unwrap_or(failover_inflight_default(config.mode())),
        rate: a.rate,
        warmup_s: a.warmup,
        stop: StopAfter::Seconds(a.duration),
        seed: a.seed,
        outages: true,
        retries: !a.no_retries,
    };
    cfg.validate()?;
    if config.mode().replica_keeps_own_log() {
        let what = format!("run_dir {} (where the full stack writes its log)", config.run_dir.display());
        a.record.check_durable(&config.run_dir, &what)?;
    }
    let mut record = a.record.open("failover", &config.run_dir)?;
    record.copy_config(&base.path, "cluster.toml")?;
    let outcome = match cut {
        Some(cut) => run_cut(&a, &config, cut, cfg, shares, &record),
        None => failover(&a, &config, victim, signal, cfg, shares, &record),
    };
    let outcome = outcome.and_then(|code| {
        record.copy_config(&config.run_dir.join("cluster.toml"), "cluster-failover.toml")?;
        harness::compare::plan::remove_derived_data(&config.run_dir, a.record.keep_logs)?;
        Ok(code)
    });
    close_record(&mut record, outcome)
}

/// The failover run (or kill loop) proper, its record kept in `record`.
fn failover(
    a: &FailoverArgs,
    config: &ClusterConfig,
    victim: failover::Kill,
    signal: libc::c_int,
    cfg: DriverConfig,
    shares: RemoteShares,
    record: &Record,
) -> Result<ExitCode> {
    if let Some(cycles) = a.kill_loop {
        return run_loop(a, config, cycles, cfg, shares, record);
    }
    let x = Experiment {
        exe: glass_exe()?,
        victim,
        signal,
        at: a.at,
        restart_after: a.restart_after,
        then_kill: a.then_kill,
        cfg,
        shares,
        quiet: a.quiet,
    };
    println!("{}", x.heading(config, &a.config));
    let r = failover::experiment(config, &x, &mut Console::new(!a.quiet))?;
    println!();
    let summary = r.to_string();
    print!("{summary}");
    failover::write_files(record, &r, a.json.as_deref(), a.svg.as_deref(), &mut wrote)?;
    let checks = failover::checks(config, &r);
    finish_record(record, &summary, &checks)?;
    if !checks[0].passed {
        eprintln!("glass: error: the failover lost acknowledged transactions or left replicas inconsistent");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--partition A/B`.
fn run_cut(
    a: &FailoverArgs,
    config: &ClusterConfig,
    cut: Cut,
    cfg: DriverConfig,
    shares: RemoteShares,
    record: &Record,
) -> Result<ExitCode> {
    println!(
        "failover: {} on {}; the network between {} cut {:.1} s into the measured phase, healed {:.1} s later",
        config.mode(),
        a.config.display(),
        cut.describe(),
        a.at,
        a.heal_after
    );
    let x = CutExperiment { exe: glass_exe()?, cut, at: a.at, heal_after: a.heal_after, cfg, shares, quiet: a.quiet };
    let r = harness::failover::partition::experiment(config, &x, &mut Console::new(!a.quiet))?;
    println!();
    let summary = r.to_string();
    print!("{summary}");
    record.write_result("failover.json", "failover", &r, a.json.as_deref(), &mut wrote)?;
    let passed = harness::verdict::failure_passed(&config.replication, r.checks.outcome()) && r.heal_errors.is_empty();
    let checks = [harness::html::Check {
        what: "nothing acknowledged lost, replicas equal and consistent, every route healed".into(),
        passed,
    }];
    finish_record(record, &summary, &checks)?;
    if !passed {
        eprintln!(
            "glass: error: the partition lost acknowledged transactions, left replicas inconsistent, or left a route"
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--kill-loop CYCLES`.
fn run_loop(
    a: &FailoverArgs,
    config: &ClusterConfig,
    cycles: u32,
    cfg: DriverConfig,
    shares: RemoteShares,
    record: &Record,
) -> Result<ExitCode> {
    let x = KillLoop {
        exe: glass_exe()?,
        cycles,
        at: a.at,
        every: a.every,
        restart_after: a.restart_after.unwrap_or(1.0),
        seed: a.seed,
        cfg,
        shares,
        quiet: a.quiet,
    };
    println!("{}", x.heading(config, &a.config));
    let r = failover::kill_loop(config, &x, &mut Console::new(!a.quiet))?;
    println!();
    let summary = r.to_string();
    print!("{summary}");
    failover::write_loop_files(record, &r, a.json.as_deref(), &mut wrote)?;
    if a.svg.is_some() {
        println!("(no SVG for a kill loop: the per-100 ms timeline is in --json)");
    }
    // The loop's checks: nothing lost where the mode promises it, then every node rejoined.
    let checks = failover::loop_checks(config, &r);
    finish_record(record, &summary, &checks)?;
    if !checks[0].passed {
        eprintln!("glass: error: the kill loop lost acknowledged transactions or left replicas inconsistent");
        return Ok(ExitCode::from(1));
    }
    if !checks[1].passed {
        eprintln!("glass: error: {} of {} restarted nodes did not rejoin", r.cycles - r.rejoins_completed, r.cycles);
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
