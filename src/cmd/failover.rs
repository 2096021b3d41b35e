//! `glass failover`: the other half of Section 5.3, on real processes. It starts the cluster
//! (mode from `--mode` or the file), runs the TPC-C driver in outage mode, kills a node with a
//! real `SIGKILL` (or stops it with `SIGTERM`) at `--at` seconds into the measured phase,
//! optionally starts it again `--restart-after` seconds later (it rejoins), and reports per
//! partition how long it could not commit, how long detection and recovery took, and whether
//! anything acknowledged was lost — checked against the client's own record of every
//! acknowledged NewOrder (its ORDER row) and Payment (its HISTORY row).
//!
//! Guarantees: the kill time, detection and recovery are measured here (detection and
//! recovery by polling the coordinator's view of live replicas every
//! [`POLL_INTERVAL`]); unavailability comes from the clients' commit times
//! ([`workload::failover`]); the run's cluster lives in `<run_dir>/failover/<mode>/` and is
//! stopped however the run ends; the command exits non-zero when a mode that promises no
//! loss (active-active, synchronous active-passive, full-stack) lost an acknowledged
//! transaction, or replicas differ, or consistency fails.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use wire::config::{ClusterConfig, Mode, Shipping};
use wire::messages::NodeId;
use workload::bench::{self, StopAfter};
use workload::client::driver::{DriverConfig, RemoteShares, BUCKET, GAP_MIN};
use workload::client::{self, ClusterClient};
use workload::failover::{self as report, FailoverReport};
use workload::gen::Profile;

use super::bench_cluster::{
    check_and_down, measure_with, up_guarded, Measurement, CLIENTS_PER_WAREHOUSE_DEFAULT, INFLIGHT_DEFAULT,
};
use super::cluster::{runtime, Cluster, Proc};

/// How often the coordinator's view of live replicas is polled around the kill.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// How long one status poll waits for the coordinator's answer.
const STATUS_PATIENCE: Duration = Duration::from_millis(1_000);

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
    /// Kill this node with SIGKILL [default: the first replica of partition 1 — its primary
    /// in the passive modes].
    #[arg(long, num_args = 0..=1, default_missing_value = "0", conflicts_with = "stop")]
    pub kill: Option<NodeId>,
    /// Stop this node with SIGTERM (a clean shutdown) instead of killing it.
    #[arg(long)]
    pub stop: Option<NodeId>,
    /// A kill loop instead of one kill: CYCLES cycles, the first at `--at`, one every
    /// `--every` seconds. Each SIGKILLs a node drawn from `--seed`, restarts it after
    /// `--restart-after` seconds (it rejoins), SIGKILLs it again 50–500 ms into its rejoin,
    /// and restarts it once more to rejoin for good. Reports the longest stretch in which no
    /// partition committed, and checks that nothing acknowledged was lost.
    #[arg(long, value_name = "CYCLES", conflicts_with_all = ["stop", "kill"])]
    pub kill_loop: Option<u32>,
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
    /// Length of the measured phase in seconds (the kill and the recovery happen inside it).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of unmeasured warm-up.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Client connections [default: one per warehouse].
    #[arg(long)]
    pub clients: Option<usize>,
    /// Requests each connection keeps in flight [default: 128].
    #[arg(long)]
    pub inflight: Option<usize>,
    /// Seed of the input generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Workload profile: `paper` (50% NewOrder / 50% Payment, local warehouses only) or
    /// `standard` (TPC-C's mix, with remote items and payments drawn from every warehouse of
    /// the cluster — multi-partition transactions).
    #[arg(long, default_value = "paper")]
    pub profile: String,
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
}

/// What the killer thread saw.
#[derive(Debug, Default)]
struct Events {
    killed: Option<Instant>,
    detected: Option<Instant>,
    restarted: Option<Instant>,
    recovered: Option<Instant>,
    error: Option<String>,
}

pub fn run(a: FailoverArgs) -> Result<ExitCode> {
    let base = Cluster::open(&a.config)?;
    if !base.running_procs().is_empty() {
        bail!(
            "the cluster of {} is running; failover starts its own — run `glass cluster down --config {}` first",
            base.path.display(),
            a.config.display()
        );
    }
    let mut config = base.config.clone();
    if let Some(m) = a.mode {
        config.mode = m;
    }
    if let Some(s) = a.shipping {
        config.shipping = s;
    }
    if let Some(k) = a.replicas {
        config = config.with_replication(k).context("--replicas")?;
    }
    let (victim, signal) = match (a.kill, a.stop) {
        (_, Some(n)) => (n, libc::SIGTERM),
        (Some(0) | None, None) => (config.partitions[0].replicas[0], libc::SIGKILL),
        (Some(n), None) => (n, libc::SIGKILL),
    };
    if config.node(victim).is_none() {
        bail!("node {victim} is not listed in [[nodes]] of {}", base.path.display());
    }
    if !(a.at > 0.0 && a.at < a.duration) {
        bail!("--at {} must fall inside the measured phase (0 < at < --duration {})", a.at, a.duration);
    }
    if let Some(cycles) = a.kill_loop {
        if cycles == 0 || a.every.is_nan() || a.every <= 0.0 {
            bail!("--kill-loop needs at least one cycle and a positive --every (got {cycles} and {})", a.every);
        }
    }
    if let Some(r) = a.restart_after {
        if !(r > 0.0 && a.at + r < a.duration) {
            bail!("--restart-after {r} must be positive and the restart inside the measured phase (at + restart-after < duration)");
        }
    }
    for p in [&a.json, &a.svg].into_iter().flatten() {
        bench::check_writable_file(p).with_context(|| format!("{}", p.display()))?;
    }
    let warehouses = usize::from(config.warehouses_total());
    let profile: Profile = a.profile.parse()?;
    let shares = RemoteShares {
        remote_item_pct: a.remote_items,
        remote_payment_pct: a.remote_payments,
        multi_partition_pct: a.multi_partition,
    };
    shares.validate()?;
    let cfg = DriverConfig {
        profile,
        mix: None,
        clients: a.clients.unwrap_or(warehouses * CLIENTS_PER_WAREHOUSE_DEFAULT),
        inflight: a.inflight.unwrap_or(INFLIGHT_DEFAULT),
        rate: None,
        warmup_s: a.warmup,
        stop: StopAfter::Seconds(a.duration),
        seed: a.seed,
        outages: true,
    };
    cfg.validate()?;
    if let Some(cycles) = a.kill_loop {
        println!(
            "failover: {} on {} ({} warehouses); a kill loop of {cycles} cycles from {:.1} s, one every {:.1} s",
            config.mode,
            base.path.display(),
            warehouses,
            a.at,
            a.every
        );
        config.run_dir = config.run_dir.join("failover").join(config.mode.name());
        let x = KillLoop {
            cycles,
            at: a.at,
            every: a.every,
            restart_after: a.restart_after.unwrap_or(1.0),
            seed: a.seed,
            cfg,
            shares,
            quiet: a.quiet,
        };
        let r = kill_loop(&config, &x)?;
        println!();
        print!("{r}");
        if let Some(p) = &a.json {
            super::write_json(p, &r)?;
        }
        if a.svg.is_some() {
            println!("(no SVG for a kill loop: the per-100 ms timeline is in --json)");
        }
        let loss_allowed = config.mode == Mode::ActivePassive && config.shipping == Shipping::Async;
        if (r.lost_acknowledged > 0 && !loss_allowed) || !r.digests_equal || !r.consistent {
            eprintln!("glass: error: the kill loop lost acknowledged transactions or left replicas inconsistent");
            return Ok(ExitCode::from(1));
        }
        if r.rejoins_completed < r.cycles {
            eprintln!(
                "glass: error: {} of {} restarted nodes did not rejoin",
                r.cycles - r.rejoins_completed,
                r.cycles
            );
            return Ok(ExitCode::from(1));
        }
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "failover: {} on {} ({} warehouses); node {victim} gets {} {:.1} s into the measured phase{}",
        config.mode,
        base.path.display(),
        warehouses,
        if signal == libc::SIGKILL { "SIGKILL" } else { "SIGTERM" },
        a.at,
        a.restart_after.map_or(String::new(), |r| format!(", restarted {r:.1} s later"))
    );
    config.run_dir = config.run_dir.join("failover").join(config.mode.name());
    let x = Experiment { victim, signal, at: a.at, restart_after: a.restart_after, cfg, shares, quiet: a.quiet };
    let r = experiment(&config, &x)?;
    println!();
    print!("{r}");
    if let Some(p) = &a.json {
        super::write_json(p, &r)?;
    }
    if let Some(p) = &a.svg {
        report::write_svg(&r, p).map_err(anyhow::Error::msg)?;
        println!("wrote {}", p.display());
    }
    let loss_allowed = config.mode == Mode::ActivePassive && config.shipping == Shipping::Async;
    if (r.lost_acknowledged > 0 && !loss_allowed) || !r.digests_equal || !r.consistent {
        eprintln!("glass: error: the failover lost acknowledged transactions or left replicas inconsistent");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// One failover experiment: which node gets which signal when, whether it is restarted, and
/// the workload.
pub struct Experiment {
    pub victim: NodeId,
    pub signal: libc::c_int,
    /// Seconds into the measured phase.
    pub at: f64,
    pub restart_after: Option<f64>,
    pub cfg: DriverConfig,
    /// Remote and multi-partition shares of the workload.
    pub shares: RemoteShares,
    pub quiet: bool,
}

/// Runs one experiment on a cluster derived from `config` (whose `run_dir` becomes the
/// experiment's own, emptied first), stopping it however the run ends.
pub fn experiment(config: &ClusterConfig, x: &Experiment) -> Result<FailoverReport> {
    let victim = x.victim;
    let duration_s = match x.cfg.stop {
        StopAfter::Seconds(s) => s,
        StopAfter::Transactions(_) => bail!("a failover experiment runs for a time"),
    };
    let cluster = Cluster::derived(config, "Derived by `glass failover`.")?;
    let path = cluster.path.clone();
    let guard = up_guarded(&cluster, x.quiet)?;
    let rt = runtime()?;
    let client = cluster.client();
    let local = cluster.running_procs();
    let victim_pid = local
        .iter()
        .find(|r| r.proc == Proc::Node(victim))
        .map(|r| r.pid)
        .with_context(|| format!("node {victim} is not running here"))?;

    let start = Instant::now();
    let kill_at = start + Duration::from_secs_f64(x.cfg.warmup_s + x.at);
    let restart_after = x.restart_after.map(Duration::from_secs_f64);
    let run_end = start + Duration::from_secs_f64(x.cfg.warmup_s + duration_s);
    let handle = rt.handle().clone();
    let killer_client = client.clone();
    let path_for_restart = path.clone();
    // A promotion follows only where a backup is left to promote.
    let promotes = config.mode.is_passive() && config.partitions_on_node(victim).all(|p| p.replicas.len() > 1);
    let signal = x.signal;
    let killer = std::thread::spawn(move || {
        let mut ev = Events::default();
        std::thread::sleep(kill_at.saturating_duration_since(Instant::now()));
        // SAFETY: kill(2) with a pid this command started; no memory is involved.
        if unsafe { libc::kill(victim_pid as libc::pid_t, signal) } != 0 {
            ev.error =
                Some(format!("cannot signal node {victim} (pid {victim_pid}): {}", std::io::Error::last_os_error()));
            return ev;
        }
        ev.killed = Some(Instant::now());
        // Detected: the coordinator no longer counts the node, or is promoting a backup.
        ev.detected = handle.block_on(wait_status(&killer_client, victim, run_end, |p| {
            !p.replicas.contains(&victim) || p.phase.starts_with("promoting")
        }));
        if promotes {
            // Promoted: serving again without the node.
            ev.recovered = handle.block_on(wait_status(&killer_client, victim, run_end, |p| {
                !p.replicas.contains(&victim) && p.phase == "serving"
            }));
        }
        if let Some(after) = restart_after {
            std::thread::sleep((ev.killed.unwrap() + after).saturating_duration_since(Instant::now()));
            match Cluster::open(&path_for_restart).and_then(|c| c.restart_node(victim, &["--rejoin"])) {
                Ok(child) => {
                    ev.restarted = Some(Instant::now());
                    std::mem::forget(child); // reaped by `cluster down`'s wait, not here
                                             // Counted again (a full-stack node recovering from its log counts once
                                             // its partition serves).
                    ev.recovered = handle.block_on(wait_status(&killer_client, victim, run_end, |p| {
                        p.replicas.contains(&victim) && p.phase == "serving"
                    }));
                }
                Err(e) => ev.error = Some(format!("cannot restart node {victim}: {e:#}")),
            }
        }
        ev
    });
    let measured = measure_with(&rt, &cluster, &client, &x.cfg, &x.shares, &local, x.quiet);
    let ev = killer.join().map_err(|_| anyhow::anyhow!("the killer thread panicked"))?;
    let Measurement { report: bench_report, acks, payments, outcome_unknown, unavailable, fine, origin, gaps, .. } =
        measured?;
    if let Some(e) = &ev.error {
        bail!("{e}");
    }
    let verdict = check_and_down(&rt, guard, &client, &acks, &payments)?;

    let killed = ev.killed.context("the node was not killed within the run")?;
    let kill_offset = killed.saturating_duration_since(origin);
    let since = |t: Option<Instant>, from: Instant| t.map(|t| t.saturating_duration_since(from).as_secs_f64() * 1e3);
    let partitions = report::outages(&gaps, kill_offset, GAP_MIN);
    let timeline = report::timeline(&fine, BUCKET);
    let kill_bucket = (kill_offset.as_millis() / BUCKET.as_millis()) as usize;
    let before: Vec<f64> = timeline[kill_bucket.saturating_sub(10)..kill_bucket.min(timeline.len())]
        .iter()
        .map(|p| p.txn_per_sec)
        .collect();
    let lowest_after = timeline
        .iter()
        .skip(kill_bucket)
        .take(timeline.len().saturating_sub(kill_bucket + 1))
        .map(|p| p.txn_per_sec)
        .fold(f64::INFINITY, f64::min);
    let lost = (verdict.acks_missing.len() + verdict.payments_missing.len()) as u64;
    let r = FailoverReport {
        mode: config.mode.name().to_string(),
        shipping: config.mode.is_passive().then(|| config.shipping.name().to_string()),
        node: victim,
        signal: if x.signal == libc::SIGKILL { "SIGKILL" } else { "SIGTERM" }.to_string(),
        killed_at_s: kill_offset.as_secs_f64(),
        restarted_at_s: ev.restarted.map(|t| t.saturating_duration_since(origin).as_secs_f64()),
        detection_ms: since(ev.detected, killed),
        recovery_ms: match (ev.restarted, promotes) {
            (Some(r), _) => since(ev.recovered, r),
            (None, true) => since(ev.recovered, killed),
            (None, false) => None,
        },
        recovery: match (ev.restarted.is_some(), promotes) {
            (true, false) if config.mode == Mode::FullStack => "wal-recovery",
            (true, true) if config.mode == Mode::FullStack => "wal-recovery+catch-up",
            (true, _) => "rejoin",
            (false, true) => "promotion",
            (false, false) => "none",
        }
        .to_string(),
        unavailability_ms: partitions.iter().filter_map(|p| p.unavailability_ms).reduce(f64::max),
        partitions,
        txn_per_sec_before: before.iter().sum::<f64>() / before.len().max(1) as f64,
        txn_per_sec_lowest_after: if lowest_after.is_finite() { lowest_after } else { 0.0 },
        acknowledged_checked: verdict.acks_checked + verdict.payments_checked,
        lost_acknowledged: lost,
        outcome_unknown,
        unavailable_answers: unavailable,
        digests_equal: verdict.partitions.iter().all(|p| p.agreed && p.copy_ok),
        consistent: verdict.consistency.all_passed(),
        committed: bench_report.committed,
        committed_multi_partition: bench_report.cluster.as_ref().map_or(0, |c| c.committed_multi_partition),
        seconds: bench_report.seconds,
        timeline,
    };
    Ok(r)
}

/// A kill loop: see `--kill-loop`.
pub struct KillLoop {
    pub cycles: u32,
    /// Seconds into the measured phase of the first kill, and between cycles.
    pub at: f64,
    pub every: f64,
    pub restart_after: f64,
    /// Draws the victims and the moments inside each rejoin.
    pub seed: u64,
    pub cfg: DriverConfig,
    pub shares: RemoteShares,
    pub quiet: bool,
}

/// What the kill loop's thread did.
#[derive(Debug, Default)]
struct LoopEvents {
    /// (node, when, still rejoining)
    kills: Vec<(NodeId, Instant, bool)>,
    cycles: u32,
    rejoins_completed: u32,
    error: Option<String>,
}

/// How long after the measured phase the last restarted node may take to rejoin before the
/// replicas are compared.
const LAST_REJOIN_GRACE: Duration = Duration::from_secs(30);

/// Runs a kill loop on a cluster derived from `config` (see [`experiment`]).
pub fn kill_loop(config: &ClusterConfig, x: &KillLoop) -> Result<report::KillLoopReport> {
    let duration_s = match x.cfg.stop {
        StopAfter::Seconds(s) => s,
        StopAfter::Transactions(_) => bail!("a kill loop runs for a time"),
    };
    let cluster = Cluster::derived(config, "Derived by `glass failover --kill-loop`.")?;
    let path = cluster.path.clone();
    let guard = up_guarded(&cluster, x.quiet)?;
    let rt = runtime()?;
    let client = cluster.client();
    let local = cluster.running_procs();
    let mut pids: std::collections::BTreeMap<NodeId, u32> = local
        .iter()
        .filter_map(|r| match r.proc {
            Proc::Node(id) => Some((id, r.pid)),
            Proc::Coordinator => None,
        })
        .collect();
    let nodes: Vec<NodeId> = config.nodes.iter().map(|n| n.id).filter(|id| pids.contains_key(id)).collect();
    if nodes.is_empty() {
        bail!("no node of {} runs here", path.display());
    }

    let start = Instant::now();
    let first = start + Duration::from_secs_f64(x.cfg.warmup_s + x.at);
    let run_end = start + Duration::from_secs_f64(x.cfg.warmup_s + duration_s);
    let (every, restart_after) = (Duration::from_secs_f64(x.every), Duration::from_secs_f64(x.restart_after));
    let (cycles, seed) = (x.cycles, x.seed);
    let handle = rt.handle().clone();
    let killer_client = client.clone();
    let killer = std::thread::spawn(move || {
        let mut ev = LoopEvents::default();
        let mut rng = engine::rng::Rng::stream(seed, 0x6b69_6c6c);
        let mut next = first;
        let sigkill = |pid: u32| {
            // SAFETY: kill(2) with a pid this command started; no memory is involved.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) == 0 }
        };
        let restart = |victim: NodeId| Cluster::open(&path).and_then(|c| c.restart_node(victim, &["--rejoin"]));
        for _ in 0..cycles {
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            if Instant::now() + 2 * restart_after >= run_end {
                break;
            }
            ev.cycles += 1;
            let victim = nodes[rng.below(nodes.len() as u64) as usize];
            if !sigkill(pids[&victim]) {
                ev.error = Some(format!("cannot SIGKILL node {victim}: {}", std::io::Error::last_os_error()));
                return ev;
            }
            ev.kills.push((victim, Instant::now(), false));
            handle.block_on(wait_status(&killer_client, victim, run_end, |p| !p.replicas.contains(&victim)));
            std::thread::sleep(restart_after);
            // Restarted, then killed again in the middle of its rejoin.
            let mut joiner = match restart(victim) {
                Ok(c) => c,
                Err(e) => {
                    ev.error = Some(format!("cannot restart node {victim}: {e:#}"));
                    return ev;
                }
            };
            std::thread::sleep(Duration::from_millis(rng.uniform(50, 500)));
            // One look (the window closes after the first poll): is it counted live yet?
            let once = Instant::now() + Duration::from_millis(1);
            let rejoined = handle.block_on(wait_status(&killer_client, victim, once, |p| p.replicas.contains(&victim)));
            let _ = joiner.kill();
            let _ = joiner.wait();
            ev.kills.push((victim, Instant::now(), rejoined.is_none()));
            std::thread::sleep(restart_after);
            match restart(victim) {
                Ok(child) => {
                    pids.insert(victim, child.id());
                    std::mem::forget(child); // reaped by `cluster down`'s wait, not here
                }
                Err(e) => {
                    ev.error = Some(format!("cannot restart node {victim}: {e:#}"));
                    return ev;
                }
            }
            let rejoined = handle.block_on(wait_status(&killer_client, victim, run_end + LAST_REJOIN_GRACE, |p| {
                p.replicas.contains(&victim) && p.phase == "serving"
            }));
            if rejoined.is_some() {
                ev.rejoins_completed += 1;
            }
            next = (next + every).max(Instant::now());
        }
        ev
    });
    let measured = measure_with(&rt, &cluster, &client, &x.cfg, &x.shares, &local, x.quiet);
    let ev = killer.join().map_err(|_| anyhow::anyhow!("the kill loop's thread panicked"))?;
    let Measurement { report: bench_report, acks, payments, outcome_unknown, unavailable, fine, origin, .. } =
        measured?;
    if let Some(e) = &ev.error {
        bail!("{e}");
    }
    let verdict = check_and_down(&rt, guard, &client, &acks, &payments)?;

    // Silences count inside the measured phase only: not the warm-up, nor the answers that
    // trickle in after the terminals stopped.
    let (first, last) = (x.cfg.warmup_s, x.cfg.warmup_s + duration_s);
    let bucket_s = BUCKET.as_secs_f64();
    let measured = &fine[((first / bucket_s) as usize).min(fine.len())..((last / bucket_s) as usize).min(fine.len())];
    let (per_partition, all) = report::longest_silences(measured, BUCKET);
    Ok(report::KillLoopReport {
        mode: config.mode.name().to_string(),
        shipping: config.mode.is_passive().then(|| config.shipping.name().to_string()),
        failure_timeout_ms: config.timeouts.failure_timeout_ms,
        cycles: ev.cycles,
        kills: ev
            .kills
            .iter()
            .map(|&(node, at, while_rejoining)| report::LoopKill {
                node,
                at_s: at.saturating_duration_since(origin).as_secs_f64(),
                while_rejoining,
            })
            .collect(),
        rejoins_completed: ev.rejoins_completed,
        longest_silence_ms: all,
        longest_silence_per_partition_ms: per_partition,
        acknowledged_checked: verdict.acks_checked + verdict.payments_checked,
        lost_acknowledged: (verdict.acks_missing.len() + verdict.payments_missing.len()) as u64,
        outcome_unknown,
        unavailable_answers: unavailable,
        digests_equal: verdict.partitions.iter().all(|p| p.agreed && p.copy_ok),
        consistent: verdict.consistency.all_passed(),
        committed: bench_report.committed,
        seconds: bench_report.seconds,
        timeline: report::timeline(&fine, BUCKET),
    })
}

/// Polls the coordinator until `holds(partition report)` is true of every partition node
/// `node` holds; `None` if that does not happen before `until`.
async fn wait_status(
    client: &ClusterClient,
    node: NodeId,
    until: Instant,
    holds: impl Fn(&wire::messages::PartitionReport) -> bool,
) -> Option<Instant> {
    let mine: Vec<u16> = client.config().partitions_on_node(node).map(|p| p.id).collect();
    let mut link = None;
    while Instant::now() < until {
        if link.is_none() {
            link = client.connect_coordinator().await.ok();
        }
        if let Some(l) = link.as_mut() {
            // A coordinator that does not answer within the poll's patience counts as a
            // failed poll (it once stalled for 30 s; the poll must not stall with it).
            let answer = tokio::time::timeout(STATUS_PATIENCE, client::status(l)).await;
            match answer.ok().and_then(Result::ok) {
                Some(st) => {
                    let ok =
                        mine.iter().all(|pid| st.partitions.iter().find(|p| p.partition == *pid).is_some_and(&holds));
                    if ok {
                        return Some(Instant::now());
                    }
                }
                // A late answer would be read as the next poll's: start afresh.
                None => link = None,
            }
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    None
}
