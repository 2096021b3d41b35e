//! The failover experiments on real processes (`glass failover`, `glass compare --failover`):
//! start the cluster, run the TPC-C driver in outage mode, kill a node with a real `SIGKILL`
//! (or stop it with `SIGTERM`) at a moment of the measured phase, optionally start it again
//! (it rejoins), and measure per partition how long it could not commit, how long detection
//! and recovery took, and whether anything acknowledged was lost — checked against the
//! client's own record of every acknowledged NewOrder (its ORDER row) and Payment (its
//! HISTORY row). [`kill_loop`] kills nodes again and again, each also in the middle of its
//! rejoin.
//!
//! Guarantees: the kill time, detection and recovery are measured here (detection and
//! recovery by polling the coordinator's view of live replicas every [`POLL_INTERVAL`]);
//! unavailability comes from the clients' commit times ([`super::outages`]); the run's
//! cluster lives in the `run_dir` of the configuration given, emptied first, and is stopped
//! however the run ends. Whether a record passes is [`crate::verdict`]'s to say; the checks
//! it is kept with ([`checks`], [`loop_checks`]) and its files in the run record
//! ([`write_files`], [`write_loop_files`]) are this module's.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use wire::config::{AgreementRule, ClusterConfig, Mode, Shipping};
use wire::messages::{NodeId, PartitionPhase};
use workload::bench::StopAfter;
use workload::client::driver::{DriverConfig, RemoteShares, BUCKET, GAP_MIN};
use workload::client::{self, ClusterCheck, ClusterClient};

use super::events::{EventLog, RunClock};
use super::{self as report, FailoverReport, KillLoopReport, KillSignal, Recovery, RunChecks};
use crate::cluster::{runtime, Cluster, Proc, Progress, Running};
use crate::error::{chain, HarnessError};
use crate::html::Check;
use crate::measure::{check_and_down, measure_with, up_guarded, Measurement};
use crate::record::Record;
use crate::verdict;
use crate::Result;

/// How often the coordinator's view of live replicas is polled around the kill.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// How long one status poll waits for the coordinator's answer.
const STATUS_PATIENCE: Duration = Duration::from_millis(1_000);
/// How long the driver's terminals may take to connect before the run's clock starts.
const CONNECT_MARGIN: Duration = Duration::from_secs(5);
/// How long after the measured phase the last restarted node may take to rejoin before the
/// replicas are compared.
const LAST_REJOIN_GRACE: Duration = Duration::from_secs(30);

/// The cluster a failover experiment runs: `base` with `mode`, `shipping` and a replication
/// factor of `replicas` where given, in `<run_dir>/failover/<mode>/`.
pub fn derive(
    base: &ClusterConfig,
    mode: Option<Mode>,
    shipping: Option<Shipping>,
    replicas: Option<usize>,
    agreement: Option<AgreementRule>,
) -> Result<ClusterConfig> {
    let mut config = base.with_mode(mode.unwrap_or(base.mode()), shipping);
    if let Some(a) = agreement {
        config.agreement = a;
    }
    if let Some(k) = replicas {
        config = config.with_replication(k).map_err(|e| HarnessError::config("--replicas", e))?;
    }
    config.run_dir = config.run_dir.join("failover").join(config.mode().name());
    Ok(config)
}

/// What `glass failover --kill` names: a node (0: the default), the leading coordinator,
/// or one of them drawn from the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Node(NodeId),
    Coordinator,
    Any,
}

impl std::str::FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Target, String> {
        match s {
            "coordinator" => Ok(Target::Coordinator),
            "any" => Ok(Target::Any),
            n => n.parse::<NodeId>().map(Target::Node).map_err(|_| {
                format!("`{n}` is not a node id, `coordinator` (the leading coordinator) or `any` (drawn from --seed)")
            }),
        }
    }
}

/// The process a failover experiment fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kill {
    Node(NodeId),
    /// The coordinator leading at the moment of the kill (a group of several: docs/design.md
    /// §11).
    Leader,
}

impl std::fmt::Display for Kill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kill::Node(n) => write!(f, "node {n}"),
            Kill::Leader => f.write_str("the leading coordinator"),
        }
    }
}

/// The process to fail and the signal: `stop` gets its signal (SIGTERM, or SIGSTOP to freeze
/// it); else `kill` (0 or none: partition
/// 1's first replica, its primary in the passive modes; `coordinator`: the leading
/// coordinator; `any`: a placed node or the leading coordinator, drawn from `seed`) gets
/// SIGKILL. Refuses a node the file does not list, and a coordinator kill without a group
/// (the only coordinator's death stops the cluster: nothing takes over).
pub fn victim(
    config: &ClusterConfig,
    kill: Option<Target>,
    stop: Option<(NodeId, libc::c_int)>,
    seed: u64,
    path: &Path,
) -> Result<(Kill, libc::c_int)> {
    let group = config.coordinators.len() > 1;
    let (victim, signal) = match (kill, stop) {
        (_, Some((n, signal))) => (Kill::Node(n), signal),
        (Some(Target::Node(0)) | None, None) => (Kill::Node(config.partitions[0].replicas[0]), libc::SIGKILL),
        (Some(Target::Node(n)), None) => (Kill::Node(n), libc::SIGKILL),
        (Some(Target::Coordinator), None) => (Kill::Leader, libc::SIGKILL),
        (Some(Target::Any), None) => {
            let mut choices: Vec<Kill> = config
                .nodes
                .iter()
                .filter(|n| config.partitions_on_node(n.id).next().is_some())
                .map(|n| Kill::Node(n.id))
                .collect();
            if group {
                choices.push(Kill::Leader);
            }
            // A fixed mix of the seed (splitmix64's finaliser): the same seed, the same victim.
            let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (choices[(z % choices.len() as u64) as usize], libc::SIGKILL)
        }
    };
    match victim {
        Kill::Node(n) if config.node(n).is_none() => {
            Err(HarnessError::Invalid(format!("node {n} is not listed in [[nodes]] of {}", path.display())))
        }
        Kill::Leader if !group => Err(HarnessError::Invalid(format!(
            "{} lists one coordinator: killing it stops the cluster, as nothing takes over. List three \
             [[coordinators]] (docs/cluster.md) to fail the leading one",
            path.display()
        ))),
        v => Ok((v, signal)),
    }
}

/// Refuses moments outside the measured phase: the kill at `at` seconds, a restart
/// `restart_after` later, and a kill loop of `cycles` one `every` seconds.
pub fn check_times(at: f64, duration: f64, restart_after: Option<f64>, kill_loop: Option<(u32, f64)>) -> Result<()> {
    if !(at > 0.0 && at < duration) {
        return Err(HarnessError::Invalid(format!(
            "--at {at} must fall inside the measured phase (0 < at < --duration {duration})"
        )));
    }
    if let Some((cycles, every)) = kill_loop {
        if cycles == 0 || every.is_nan() || every <= 0.0 {
            return Err(HarnessError::Invalid(format!(
                "--kill-loop needs at least one cycle and a positive --every (got {cycles} and {every})"
            )));
        }
    }
    if let Some(r) = restart_after {
        if !(r > 0.0 && at + r < duration) {
            return Err(HarnessError::Invalid(format!(
                "--restart-after {r} must be positive and the restart inside the measured phase (at + restart-after < duration)"
            )));
        }
    }
    Ok(())
}

/// Whether a failover record passed ([`verdict::failure_passed`] for its cluster's mode).
pub fn passed(config: &ClusterConfig, r: &FailoverReport) -> bool {
    verdict::failure_passed(&config.replication, r.checks.outcome())
}

/// Whether a kill loop's record passed its checks ([`verdict::failure_passed`]); rejoins are
/// judged apart ([`KillLoopReport::rejoins_completed`]).
pub fn loop_passed(config: &ClusterConfig, r: &KillLoopReport) -> bool {
    verdict::failure_passed(&config.replication, r.checks.outcome())
}

/// The checks of a failover record: nothing acknowledged lost where the mode promises it,
/// replicas equal and consistent ([`passed`]).
pub fn checks(config: &ClusterConfig, r: &FailoverReport) -> [Check; 1] {
    [Check { what: KEPT_PROMISE.into(), passed: passed(config, r) }]
}

/// The checks of a kill loop's record: [`loop_passed`], then whether every restarted node
/// rejoined.
pub fn loop_checks(config: &ClusterConfig, r: &KillLoopReport) -> [Check; 2] {
    [
        Check { what: KEPT_PROMISE.into(), passed: loop_passed(config, r) },
        Check { what: "every restarted node rejoined".into(), passed: r.rejoins_completed >= r.cycles },
    ]
}

/// What [`checks`] and [`loop_checks`] check first.
const KEPT_PROMISE: &str =
    "nothing acknowledged lost where the mode promises it, replica digests equal, TPC-C consistent";

/// Writes a failover record into the run record — `failover.json` (headed by the run) and
/// `failover.svg` — and copies where `json` and `svg` (`--json`, `--svg`) point, each copy
/// announced to `wrote` once written.
pub fn write_files(
    record: &Record,
    r: &FailoverReport,
    json: Option<&Path>,
    svg: Option<&Path>,
    wrote: &mut dyn FnMut(&Path),
) -> Result<()> {
    record.write_headed(&record.path("failover.json"), "failover", r)?;
    report::write_svg(r, &record.path("failover.svg"))?;
    if let Some(p) = json {
        record.write_headed(p, "failover", r)?;
        wrote(p);
    }
    if let Some(p) = svg {
        report::write_svg(r, p)?;
        wrote(p);
    }
    Ok(())
}

/// Writes a kill loop's record into the run record as `failover.json` (headed by the run),
/// and a copy where `json` (`--json`) points, announced to `wrote`. A kill loop draws no
/// picture: its per-100 ms timeline is in the JSON.
pub fn write_loop_files(
    record: &Record,
    r: &KillLoopReport,
    json: Option<&Path>,
    wrote: &mut dyn FnMut(&Path),
) -> Result<()> {
    record.write_result("failover.json", "failover", r, json, wrote)
}

/// One failover experiment: which node gets which signal when, whether it is restarted, and
/// the workload.
#[derive(Debug)]
pub struct Experiment {
    /// The `glass` executable the cluster's processes run.
    pub exe: PathBuf,
    pub victim: Kill,
    pub signal: libc::c_int,
    /// Seconds into the measured phase.
    pub at: f64,
    pub restart_after: Option<f64>,
    /// Once the restarted node is live again, SIGKILL this node too (`--then-kill`): what the
    /// rejoined node copied and caught up must hold everything acknowledged.
    pub then_kill: Option<NodeId>,
    pub cfg: DriverConfig,
    /// Remote and multi-partition shares of the workload.
    pub shares: RemoteShares,
    pub quiet: bool,
}

impl Experiment {
    /// What the run will do, in one line: on `config` (named `given` by the user), its
    /// victim, signal and moment (on the run's clock too, which counts the warm-up).
    pub fn heading(&self, config: &ClusterConfig, given: &Path) -> String {
        format!(
            "failover: {} on {} ({} warehouses); {} gets {} {:.1} s into the measured phase (the run's clock, \
             which counts the {:.1} s warm-up, says about {:.1} s){}",
            config.mode(),
            given.display(),
            config.warehouses_total(),
            self.victim,
            KillSignal::of(self.signal),
            self.at,
            self.cfg.warmup_s,
            self.at + self.cfg.warmup_s,
            self.restart_after.map_or(String::new(), |r| format!(", restarted {r:.1} s later"))
        )
    }
}

/// What the killer thread saw.
#[derive(Debug, Default)]
struct Events {
    /// The process killed (the leading coordinator is known only at the kill).
    victim: Option<report::Victim>,
    killed: Option<Instant>,
    detected: Option<Instant>,
    /// A coordinator killed: a new leader serves.
    elected: Option<Instant>,
    restarted: Option<Instant>,
    recovered: Option<Instant>,
    /// The second kill (`Experiment::then_kill`), once the first victim was live again.
    then_killed: Option<Instant>,
    error: Option<String>,
}

/// What the killer thread needs.
struct Killer {
    handle: Handle,
    client: ClusterClient,
    /// The experiment's cluster.toml and the executable to restart a node from.
    path: PathBuf,
    exe: PathBuf,
    victim: NodeId,
    then_kill: Option<NodeId>,
    run_end: Instant,
    events: EventLog,
}

/// What the killer thread of a coordinator kill needs.
struct CoordinatorKiller {
    handle: Handle,
    client: ClusterClient,
    path: PathBuf,
    exe: PathBuf,
    run_end: Instant,
    events: EventLog,
}

/// Waits until the run's clock started and then until `at_s` seconds on it: the instant
/// reached, or `None` if the clock had not started [`CONNECT_MARGIN`] past `run_end`.
pub(super) fn sleep_until_on_clock(events: &EventLog, at_s: f64, run_end: Instant) -> Option<Instant> {
    let start = loop {
        if let Some(&(start, _)) = events.clock().get() {
            break start;
        }
        // The clock starts once every terminal connected: a margin for that.
        if Instant::now() >= run_end + CONNECT_MARGIN {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let at = start + Duration::from_secs_f64(at_s);
    std::thread::sleep(at.saturating_duration_since(Instant::now()));
    Some(at)
}

impl CoordinatorKiller {
    /// Signals the leading coordinator at `kill_at`, watches another coordinator stop
    /// following it (detection) and a new leader serve every partition (election), restarts
    /// it `restart_after` the kill if asked and watches it follow the new leader.
    fn kill_once(&self, signal: libc::c_int, kill_at_s: f64, restart_after: Option<Duration>) -> Events {
        let mut ev = Events::default();
        if let Ok(c) = Cluster::open(&self.path) {
            c.warm(&c.coordinator_procs());
        }
        if sleep_until_on_clock(&self.events, kill_at_s, self.run_end).is_none() {
            ev.error = Some("the load never started: nothing was killed".into());
            return ev;
        }
        let leader = self.handle.block_on(async {
            let mut link = self.client.connect_coordinator().await?;
            client::status(&mut link).await
        });
        let leader = match leader.map(|s| u8::try_from(s.id)) {
            Ok(Ok(id)) => id,
            Ok(Err(_)) => {
                ev.error = Some("the leading coordinator's id is out of range".into());
                return ev;
            }
            Err(e) => {
                ev.error = Some(format!("cannot find the leading coordinator: {e}"));
                return ev;
            }
        };
        let cluster = match Cluster::open(&self.path) {
            Ok(c) => c,
            Err(e) => {
                ev.error = Some(chain(&e));
                return ev;
            }
        };
        let proc = Proc::Coordinator(Some(leader));
        // Only the leader's host is asked (each host asked costs an ssh call at the kill).
        let Some(running) = cluster.running(&proc).map(|pid| Running { proc: proc.clone(), pid }) else {
            ev.error = Some(format!("coordinator {leader} leads but runs on no host of this cluster"));
            return ev;
        };
        let killed = match cluster.kill(&running, signal) {
            Ok(at) => at,
            Err(e) => {
                ev.error = Some(format!("cannot signal coordinator {leader}: {}", chain(&e)));
                return ev;
            }
        };
        ev.killed = Some(killed);
        ev.victim = Some(report::Victim::Coordinator(leader));
        self.events.note(format!("{} coordinator {leader} (the leader)", report::KillSignal::of(signal)));
        let survivors: Vec<u8> = self.client.config().coordinator_ids().into_iter().filter(|c| *c != leader).collect();
        let old = u16::from(leader);
        ev.detected =
            self.handle.block_on(wait_coordinators(&self.client, &survivors, self.run_end, |s| s.leader != Some(old)));
        ev.elected = self.handle.block_on(wait_coordinators(&self.client, &survivors, self.run_end, |s| {
            s.leader == Some(s.id) && !s.partitions.is_empty() && s.partitions.iter().all(|p| p.phase.is_serving())
        }));
        if let Some(after) = restart_after {
            std::thread::sleep((killed + after).saturating_duration_since(Instant::now()));
            match cluster.restart(&self.exe, &proc, &[]) {
                Ok(child) => {
                    ev.restarted = Some(Instant::now());
                    self.events.note(format!("restarted coordinator {leader} (a standby now)"));
                    std::mem::forget(child); // reaped by `cluster down`'s wait, not here
                    ev.recovered =
                        self.handle.block_on(wait_coordinators(&self.client, &[leader], self.run_end, |s| {
                            s.leader.is_some_and(|l| l != old)
                        }));
                }
                Err(e) => ev.error = Some(format!("cannot restart coordinator {leader}: {}", chain(&e))),
            }
        }
        ev
    }
}

/// Polls the status of each coordinator of `ids` until `holds` is true of one; `None` if
/// that does not happen before `until`.
async fn wait_coordinators(
    client: &ClusterClient,
    ids: &[u8],
    until: Instant,
    holds: impl Fn(&wire::messages::ProcessStatus) -> bool,
) -> Option<Instant> {
    let mut links: Vec<Option<wire::endpoint::Link>> = ids.iter().map(|_| None).collect();
    while Instant::now() < until {
        for (i, &c) in ids.iter().enumerate() {
            if links[i].is_none() {
                links[i] = tokio::time::timeout(STATUS_PATIENCE, client.connect_coordinator_id(c))
                    .await
                    .ok()
                    .and_then(Result::ok);
            }
            if let Some(l) = links[i].as_mut() {
                match tokio::time::timeout(STATUS_PATIENCE, client::status(l)).await.ok().and_then(Result::ok) {
                    Some(st) if holds(&st) => return Some(Instant::now()),
                    Some(_) => {}
                    // A late answer would be read as the next poll's: start afresh.
                    None => links[i] = None,
                }
            }
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    None
}

impl Killer {
    /// Polls the coordinator until `holds` is true of every partition of the victim.
    fn wait(&self, until: Instant, holds: impl Fn(&wire::messages::PartitionReport) -> bool) -> Option<Instant> {
        self.handle.block_on(wait_status(&self.client, self.victim, until, holds))
    }

    /// Restarts the victim with `--rejoin`: its child when it runs here, `None` on another host.
    fn restart(&self) -> Result<Option<std::process::Child>> {
        Cluster::open(&self.path).and_then(|c| c.restart_node(&self.exe, self.victim, &["--rejoin"]))
    }

    /// Signals the victim (`pid`) at `kill_at`, watches detection and promotion (when
    /// `promotes`), restarts it `restart_after` the kill if asked and watches it recover.
    fn kill_once(
        &self,
        victim_proc: Running,
        signal: libc::c_int,
        kill_at_s: f64,
        promotes: bool,
        restart_after: Option<Duration>,
    ) -> Events {
        let (victim, run_end) = (self.victim, self.run_end);
        let mut ev = Events::default();
        if let Ok(c) = Cluster::open(&self.path) {
            let second = self.then_kill.map(Proc::Node);
            c.warm(&std::iter::once(victim_proc.proc.clone()).chain(second).collect::<Vec<_>>());
        }
        if sleep_until_on_clock(&self.events, kill_at_s, run_end).is_none() {
            ev.error = Some("the load never started: nothing was killed".into());
            return ev;
        }
        let killed = match Cluster::open(&self.path).and_then(|c| c.kill(&victim_proc, signal)) {
            Ok(at) => at,
            Err(e) => {
                ev.error = Some(format!("cannot signal node {victim}: {}", chain(&e)));
                return ev;
            }
        };
        ev.killed = Some(killed);
        ev.victim = Some(report::Victim::Node(victim));
        self.events.note(format!("{} node {victim}", report::KillSignal::of(signal)));
        // Detected: the coordinator no longer counts the node, or is promoting a backup.
        ev.detected = self
            .wait(run_end, |p| !p.replicas.contains(&victim) || matches!(p.phase, PartitionPhase::Promoting { .. }));
        if promotes {
            // Promoted: serving again without the node.
            ev.recovered = self.wait(run_end, |p| !p.replicas.contains(&victim) && p.phase.is_serving());
        }
        if let Some(after) = restart_after {
            std::thread::sleep((killed + after).saturating_duration_since(Instant::now()));
            match self.restart() {
                Ok(child) => {
                    ev.restarted = Some(Instant::now());
                    self.events.note(format!("restarted node {victim} (it rejoins)"));
                    std::mem::forget(child); // reaped by `cluster down`'s wait, not here
                                             // Counted again (a full-stack node recovering from its log counts once its
                                             // partition serves).
                    ev.recovered = self.wait(run_end, |p| p.replicas.contains(&victim) && p.phase.is_serving());
                }
                Err(e) => ev.error = Some(format!("cannot restart node {victim}: {}", chain(&e))),
            }
        }
        if let (Some(second), Some(_)) = (self.then_kill, ev.recovered) {
            let second_proc = Proc::Node(second);
            let cluster = Cluster::open(&self.path);
            let running = cluster
                .as_ref()
                .ok()
                .and_then(|c| c.running(&second_proc).map(|pid| Running { proc: second_proc, pid }));
            match (cluster, running) {
                (Ok(c), Some(r)) => match c.kill(&r, libc::SIGKILL) {
                    Ok(at) => {
                        ev.then_killed = Some(at);
                        self.events.note(format!("SIGKILL node {second}, the other replica"));
                    }
                    Err(e) => ev.error = Some(format!("cannot SIGKILL node {second}: {}", chain(&e))),
                },
                _ => ev.error = Some(format!("node {second} runs no process to kill")),
            }
        }
        ev
    }
}

/// Runs one experiment on a cluster derived from `config` (whose `run_dir` becomes the
/// experiment's own, emptied first), stopping it however the run ends.
pub fn experiment(config: &ClusterConfig, x: &Experiment, progress: &mut dyn Progress) -> Result<FailoverReport> {
    let StopAfter::Seconds(duration_s) = x.cfg.stop else {
        return Err(HarnessError::Invalid("a failover experiment runs for a time".into()));
    };
    let cluster = Cluster::derived(config, "Derived by `glass failover`.", None)?;
    let guard = up_guarded(&cluster, &x.exe, progress)?;
    let rt = runtime()?;
    let client = cluster.client();
    let victim_proc = match x.victim {
        Kill::Node(n) => Some(
            cluster.running_procs().into_iter().find(|r| r.proc == Proc::Node(n)).ok_or(HarnessError::NotHere(n))?,
        ),
        Kill::Leader => None,
    };

    let start = Instant::now();
    // On the run's clock (the timeline's), which starts with the driver's warm-up.
    let kill_at_s = x.cfg.warmup_s + x.at;
    let restart_after = x.restart_after.map(Duration::from_secs_f64);
    let run_end = start + Duration::from_secs_f64(x.cfg.warmup_s + duration_s);
    let events = EventLog::new(RunClock::default(), x.cfg.warmup_s, x.quiet);
    let watcher = events.watch(&cluster.config.run_dir);
    // A promotion follows only where a backup is left to promote.
    let promotes = match x.victim {
        Kill::Node(n) => {
            !config.mode().every_replica_executes() && config.partitions_on_node(n).all(|p| p.replicas.len() > 1)
        }
        Kill::Leader => false,
    };
    let signal = x.signal;
    let (handle, path, exe) = (rt.handle().clone(), cluster.path.clone(), x.exe.clone());
    let killer = match (x.victim, victim_proc.clone()) {
        (Kill::Node(victim), Some(running)) => {
            let then_kill = x.then_kill;
            let events = events.clone();
            let killer = Killer { handle, client: client.clone(), path, exe, victim, then_kill, run_end, events };
            std::thread::spawn(move || killer.kill_once(running, signal, kill_at_s, promotes, restart_after))
        }
        _ => {
            let events = events.clone();
            let killer = CoordinatorKiller { handle, client: client.clone(), path, exe, run_end, events };
            std::thread::spawn(move || killer.kill_once(signal, kill_at_s, restart_after))
        }
    };
    let clock = Some(events.clock().clone());
    // Where the CPUs went while the load ran: this process (the clients) and the cluster's
    // processes on this host, by the command lines `up` and the restarts gave them.
    let config_path = cluster.path.clone();
    let cpu = crate::procfs::CpuSampler::start("the clients (glass failover)", move |args| {
        crate::cluster::Proc::label_of(args, &config_path)
    });
    let measured = measure_with(&rt, &cluster, &client, &x.cfg, &x.shares, x.quiet, clock);
    let cpu = cpu.map(crate::procfs::CpuSampler::finish).unwrap_or_default();
    let ev = killer.join().map_err(|_| HarnessError::Killer("the killer thread panicked".into()))?;
    let run_events = events.finish(Some(watcher));
    if let (libc::SIGSTOP, Some(running)) = (x.signal, &victim_proc) {
        // The frozen node never comes back within the run: it ends here, before the checks
        // (which read the live replicas) and the cluster's stop.
        let _ = cluster.kill(running, libc::SIGKILL);
    }
    // What the processes on other hosts logged, beside the local logs, for the figures read
    // from logs (how a failure was detected, batches replayed).
    cluster.fetch_remote_logs();
    let m = measured?;
    if let Some(e) = ev.error {
        return Err(HarnessError::Killer(e));
    }
    let detected_by = match x.victim {
        Kill::Node(n) => detected_by(&cluster.config.run_dir, n),
        Kill::Leader => None,
    };
    let verdict = check_and_down(&rt, guard, &client, &m.acks, &m.payments, progress)?;
    let mut report = failover_report(config, x, &ev, promotes, &m, &verdict)?;
    report.detected_by = detected_by;
    report.events = run_events;
    if report.recovery == Recovery::Rejoin {
        report.rejoin = Some(rejoin_figures(&report, &m, &cluster.config.run_dir, config.partitions.len()));
    }
    note_cpu(&mut report, &cpu, m.origin);
    Ok(report)
}

/// Places where the machine's CPU time went ([`crate::procfs::CpuTrace`], read while the load
/// ran) on the record: the hypervisor's steal for each timeline bucket and the measured phase,
/// and for the longest stretches without a commit the whole split — stolen, idle, and which
/// processes had the CPUs — so that a stretch is read beside what happened to the machine.
fn note_cpu(r: &mut FailoverReport, cpu: &crate::procfs::CpuTrace, origin: Instant) {
    let at = |s: f64| origin + Duration::from_secs_f64(s.max(0.0));
    let bucket_s = BUCKET.as_secs_f64();
    for p in &mut r.timeline {
        p.cpu_stolen_pct = cpu.stolen_pct(at(p.t_s), at(p.t_s + bucket_s));
    }
    r.cpu_stolen_pct =
        r.timeline.first().zip(r.timeline.last()).and_then(|(a, b)| cpu.stolen_pct(at(a.t_s), at(b.t_s)));
    for p in &mut r.partitions {
        p.steady_silence_cpu = p.steady_silence_at_s.and_then(|s| cpu.split(at(s), at(s + p.steady_silence_ms / 1e3)));
        p.steady_silence_cpu_stolen_pct = p.steady_silence_cpu.as_ref().map(|c| c.stolen_pct);
    }
    if let Some(j) = r.rejoin.as_mut() {
        j.longest_silence_cpu = j
            .longest_silence_at_s
            .iter()
            .zip(&j.longest_silence_ms)
            .map(|(s, ms)| s.and_then(|s| cpu.split(at(s), at(s + ms / 1e3))))
            .collect();
        j.longest_silence_cpu_stolen_pct =
            j.longest_silence_cpu.iter().map(|c| c.as_ref().map(|c| c.stolen_pct)).collect();
    }
}

/// What a rejoin cost (`FailoverReport::rejoin`): the window from the restart until the node
/// was live again, or the measured phase's end.
fn rejoin_figures(r: &FailoverReport, m: &Measurement, run_dir: &Path, partitions: usize) -> report::RejoinFigures {
    let from = Duration::from_secs_f64(r.restarted_at_s.unwrap_or(r.killed_at_s));
    let end = Duration::from_secs_f64(r.seconds);
    let live = r.recovery_ms.map(|ms| from + Duration::from_secs_f64(ms / 1e3)).filter(|&t| t <= end);
    let until = live.unwrap_or(end);
    let longest_gap_ms =
        m.gaps.iter().map(|p| p.iter().map(|t| report::longest_within(t, from, until)).fold(0.0, f64::max)).collect();
    let silences: Vec<Option<(f64, f64)>> =
        m.silences.iter().map(|s| report::longest_within_at(s, from, until)).collect();
    let longest_silence_ms = silences.iter().map(|s| s.map_or(0.0, |(ms, _)| ms)).collect();
    let longest_silence_at_s = silences.iter().map(|s| s.map(|(_, at)| at)).collect();
    let bucket_s = BUCKET.as_secs_f64();
    let window: Vec<f64> = r
        .timeline
        .iter()
        .filter(|p| p.t_s >= from.as_secs_f64() && p.t_s + bucket_s <= until.as_secs_f64())
        .map(|p| p.txn_per_sec)
        .collect();
    let during = window.iter().sum::<f64>() / window.len().max(1) as f64;
    let given_up_pct =
        if r.txn_per_sec_before > 0.0 { (100.0 * (1.0 - during / r.txn_per_sec_before)).max(0.0) } else { 0.0 };
    report::RejoinFigures {
        live_under_load: live.is_some(),
        longest_silence_ms,
        longest_silence_at_s,
        longest_silence_cpu_stolen_pct: Vec::new(),
        longest_silence_cpu: Vec::new(),
        longest_gap_ms,
        replayed_batches: (1..=partitions).map(|p| replayed_batches(run_dir, r.killed, p as u16)).collect(),
        txn_per_sec_during: during,
        given_up_pct,
    }
}

/// The batches node `victim` executed after its copy of `partition`, from the coordinators'
/// log (`node N is a live replica of partition P again (copy as of batch S, then K batches
/// sent after it)`), the last time it rejoined.
fn replayed_batches(run_dir: &Path, victim: report::Victim, partition: u16) -> Option<u64> {
    let report::Victim::Node(node) = victim else { return None };
    let needle = format!("node {node} is a live replica of partition {partition} again (copy as of batch ");
    let logs = std::fs::read_dir(run_dir).ok()?.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| {
        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("coordinator") && n.ends_with(".log"))
    });
    logs.filter_map(|log| {
        let text = readable(&std::fs::read_to_string(log).ok()?);
        let at = text.rfind(&needle)? + needle.len();
        let rest = &text[at..];
        let from = rest.find(", then ")? + ", then ".len();
        rest[from..].split(' ').next()?.parse().ok()
    })
    .max()
}

/// A log's text with any JSON lines in the text format ([`super::events::text_line`]).
fn readable(text: &str) -> String {
    text.lines().map(|l| super::events::text_line(l).into_owned() + "\n").collect()
}

/// What told the coordinator that node `node` failed, from the first such alarm in the
/// coordinators' logs in `run_dir` (`node N failed (detected by …; silent for …)`,
/// docs/cluster.md, "Failure detection").
pub fn detected_by(run_dir: &Path, node: NodeId) -> Option<String> {
    let needle = format!("node {node} failed (detected by ");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(run_dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("coordinator") && n.ends_with(".log"))
        })
        .collect();
    logs.sort();
    logs.iter().find_map(|log| {
        let text = readable(&std::fs::read_to_string(log).ok()?);
        let at = text.find(&needle)? + needle.len();
        let rest = &text[at..];
        let end = rest.find("; silent for").or_else(|| rest.find('\n'))?;
        Some(rest[..end].to_string())
    })
}

/// What the check after a run found, for its record.
pub(super) fn run_checks(verdict: &ClusterCheck, m: &Measurement) -> RunChecks {
    RunChecks {
        acknowledged_checked: verdict.acks_checked + verdict.payments_checked,
        lost_acknowledged: (verdict.acks_missing.len() + verdict.payments_missing.len()) as u64,
        outcome_unknown: m.outcome_unknown,
        forgotten: m.forgotten,
        resent: m.resent,
        answers_from_retries: m.answers_from_retries,
        unaccounted_rows: verdict.unaccounted_rows(),
        unavailable_answers: m.unavailable,
        digests_equal: verdict.partitions.iter().all(|p| p.agreed && p.copy_ok),
        consistent: verdict.consistency.all_passed(),
    }
}

/// The record of one experiment from what the killer saw, the measurement and the check.
fn failover_report(
    config: &ClusterConfig,
    x: &Experiment,
    ev: &Events,
    promotes: bool,
    m: &Measurement,
    verdict: &ClusterCheck,
) -> Result<FailoverReport> {
    let killed = ev.killed.ok_or(HarnessError::NotKilled)?;
    let victim = ev.victim.ok_or(HarnessError::NotKilled)?;
    let kill_offset = killed.saturating_duration_since(m.origin);
    let since = |t: Option<Instant>, from: Instant| t.map(|t| t.saturating_duration_since(from).as_secs_f64() * 1e3);
    let steady_from = Duration::from_secs_f64(x.cfg.warmup_s);
    let partitions = report::outages(&m.gaps, &m.silences, kill_offset, steady_from, GAP_MIN);
    let timeline = report::timeline(&m.fine, BUCKET);
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
    let bench_report = &m.report;
    Ok(FailoverReport {
        mode: config.mode(),
        shipping: config.shipping(),
        replicas: config.replication_factor(),
        connections: x.cfg.clients,
        inflight: x.cfg.inflight,
        offered_txn_per_s: x.cfg.rate,
        agreement: config.mode().every_replica_executes().then(|| config.agreement.name().to_string()),
        killed: victim,
        signal: KillSignal::of(x.signal),
        killed_at_s: kill_offset.as_secs_f64(),
        restarted_at_s: ev.restarted.map(|t| t.saturating_duration_since(m.origin).as_secs_f64()),
        detection_ms: since(ev.detected, killed),
        detected_by: None,
        election_ms: since(ev.elected, killed),
        recovery_ms: match (ev.restarted, promotes) {
            (Some(r), _) => since(ev.recovered, r),
            (None, true) => since(ev.recovered, killed),
            (None, false) => None,
        },
        recovery: match (ev.restarted.is_some(), promotes) {
            (true, _) if matches!(victim, report::Victim::Coordinator(_)) => Recovery::Standby,
            (false, _) if matches!(victim, report::Victim::Coordinator(_)) => Recovery::Election,
            (true, false) if config.mode().replica_keeps_own_log() => Recovery::WalRecovery,
            (true, true) if config.mode().replica_keeps_own_log() => Recovery::WalRecoveryCatchUp,
            (true, _) => Recovery::Rejoin,
            (false, true) => Recovery::Promotion,
            (false, false) => Recovery::None,
        },
        unavailability_ms: partitions.iter().filter_map(|p| p.unavailability_ms).reduce(f64::max),
        partitions,
        txn_per_sec_before: before.iter().sum::<f64>() / before.len().max(1) as f64,
        txn_per_sec_lowest_after: if lowest_after.is_finite() { lowest_after } else { 0.0 },
        cpu_stolen_pct: None,
        checks: run_checks(verdict, m),
        committed: bench_report.committed,
        committed_multi_partition: bench_report.cluster.as_ref().map_or(0, |c| c.committed_multi_partition),
        seconds: bench_report.seconds,
        then_killed_at_s: ev.then_killed.map(|t| t.saturating_duration_since(m.origin).as_secs_f64()),
        rejoin: None,
        events: Vec::new(),
        timeline,
    })
}

/// A kill loop: `cycles` cycles, the first `at` seconds into the measured phase, one every
/// `every` seconds; each SIGKILLs a node drawn from `seed`, restarts it `restart_after`
/// seconds later, SIGKILLs it again 50–500 ms into its rejoin, and restarts it once more to
/// rejoin for good.
#[derive(Debug)]
pub struct KillLoop {
    /// The `glass` executable the cluster's processes run.
    pub exe: PathBuf,
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

impl KillLoop {
    /// What the loop will do, in one line: on `config` (named `given` by the user), how many
    /// cycles, from when, how often.
    pub fn heading(&self, config: &ClusterConfig, given: &Path) -> String {
        format!(
            "failover: {} on {} ({} warehouses); a kill loop of {} cycles from {:.1} s, one every {:.1} s",
            config.mode(),
            given.display(),
            config.warehouses_total(),
            self.cycles,
            self.at,
            self.every
        )
    }
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

/// Runs a kill loop on a cluster derived from `config` (see [`experiment`]).
pub fn kill_loop(config: &ClusterConfig, x: &KillLoop, progress: &mut dyn Progress) -> Result<KillLoopReport> {
    let StopAfter::Seconds(duration_s) = x.cfg.stop else {
        return Err(HarnessError::Invalid("a kill loop runs for a time".into()));
    };
    let cluster = Cluster::derived(config, "Derived by `glass failover --kill-loop`.", None)?;
    let guard = up_guarded(&cluster, &x.exe, progress)?;
    let rt = runtime()?;
    let client = cluster.client();
    let pids: std::collections::BTreeMap<NodeId, u32> = cluster
        .running_procs()
        .iter()
        .filter_map(|r| match r.proc {
            Proc::Node(id) => Some((id, r.pid)),
            Proc::Coordinator(_) => None,
        })
        .collect();
    let nodes: Vec<NodeId> = config.nodes.iter().map(|n| n.id).filter(|id| pids.contains_key(id)).collect();
    if nodes.is_empty() {
        return Err(HarnessError::NoNodeHere { path: cluster.path.clone() });
    }

    let start = Instant::now();
    let first = start + Duration::from_secs_f64(x.cfg.warmup_s + x.at);
    let killer = Killer {
        handle: rt.handle().clone(),
        client: client.clone(),
        path: cluster.path.clone(),
        exe: x.exe.clone(),
        victim: 0,
        then_kill: None,
        run_end: start + Duration::from_secs_f64(x.cfg.warmup_s + duration_s),
        events: EventLog::new(RunClock::default(), x.cfg.warmup_s, x.quiet),
    };
    let events = killer.events.clone();
    let watcher = events.watch(&cluster.config.run_dir);
    let cycles = Cycles {
        cycles: x.cycles,
        first,
        every: Duration::from_secs_f64(x.every),
        restart_after: Duration::from_secs_f64(x.restart_after),
        seed: x.seed,
    };
    let thread = std::thread::spawn(move || cycles.run(killer, nodes, pids));
    let clock = Some(events.clock().clone());
    let measured = measure_with(&rt, &cluster, &client, &x.cfg, &x.shares, x.quiet, clock);
    let ev = thread.join().map_err(|_| HarnessError::Killer("the kill loop's thread panicked".into()))?;
    events.finish(Some(watcher));
    let m = measured?;
    if let Some(e) = ev.error {
        return Err(HarnessError::Killer(e));
    }
    let verdict = check_and_down(&rt, guard, &client, &m.acks, &m.payments, progress)?;

    let (per_partition, all) = report::measured_silences(&m.fine, x.cfg.warmup_s, duration_s);
    let fine = &m.fine;
    Ok(KillLoopReport {
        mode: config.mode(),
        shipping: config.shipping(),
        failure_timeout_ms: config.timeouts.failure_timeout_ms,
        cycles: ev.cycles,
        kills: ev
            .kills
            .iter()
            .map(|&(node, at, while_rejoining)| report::LoopKill {
                node,
                at_s: at.saturating_duration_since(m.origin).as_secs_f64(),
                while_rejoining,
            })
            .collect(),
        rejoins_completed: ev.rejoins_completed,
        longest_silence_ms: all,
        longest_silence_per_partition_ms: per_partition,
        checks: run_checks(&verdict, &m),
        committed: m.report.committed,
        seconds: m.report.seconds,
        timeline: report::timeline(fine, BUCKET),
    })
}

/// The kill loop's schedule.
struct Cycles {
    cycles: u32,
    first: Instant,
    every: Duration,
    restart_after: Duration,
    seed: u64,
}

impl Cycles {
    /// The kill loop's thread: runs the cycles on `nodes` (`pids`: each one's process).
    fn run(self, mut k: Killer, nodes: Vec<NodeId>, mut pids: std::collections::BTreeMap<NodeId, u32>) -> LoopEvents {
        let mut ev = LoopEvents::default();
        let mut rng = engine::rng::Rng::stream(self.seed, 0x6b69_6c6c);
        let mut next = self.first;
        let restart_after = self.restart_after;
        for _ in 0..self.cycles {
            if let Ok(c) = Cluster::open(&k.path) {
                c.warm(&nodes.iter().map(|n| Proc::Node(*n)).collect::<Vec<_>>());
            }
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            if Instant::now() + 2 * restart_after >= k.run_end {
                break;
            }
            ev.cycles += 1;
            let victim = nodes[rng.below(nodes.len() as u64) as usize];
            k.victim = victim;
            let cluster = match Cluster::open(&k.path) {
                Ok(c) => c,
                Err(e) => {
                    ev.error = Some(chain(&e));
                    return ev;
                }
            };
            let running = Running { proc: Proc::Node(victim), pid: pids[&victim] };
            match cluster.kill(&running, libc::SIGKILL) {
                Ok(at) => ev.kills.push((victim, at, false)),
                Err(e) => {
                    ev.error = Some(format!("cannot SIGKILL node {victim}: {}", chain(&e)));
                    return ev;
                }
            }
            k.events.note(format!("SIGKILL node {victim}"));
            k.wait(k.run_end, |p| !p.replicas.contains(&victim));
            std::thread::sleep(restart_after);
            // Restarted, then killed again in the middle of its rejoin.
            let mut joiner = match k.restart() {
                Ok(c) => {
                    k.events.note(format!("restarted node {victim} (it rejoins)"));
                    c
                }
                Err(e) => {
                    ev.error = Some(format!("cannot restart node {victim}: {}", chain(&e)));
                    return ev;
                }
            };
            std::thread::sleep(Duration::from_millis(rng.uniform(50, 500)));
            // One look (the window closes after the first poll): is it counted live yet?
            let rejoined = k.wait(Instant::now() + Duration::from_millis(1), |p| p.replicas.contains(&victim));
            // Its pid, here or on its host, from the pid file the restart wrote.
            let joining = std::fs::read_to_string(cluster.pid_file(&Proc::Node(victim)))
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
                .map(|pid| Running { proc: Proc::Node(victim), pid });
            let killed = match (joining, joiner.as_mut()) {
                // A child of this process is reaped here.
                (_, Some(child)) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    Ok(Instant::now())
                }
                (Some(r), None) => cluster.kill(&r, libc::SIGKILL),
                (None, None) => Err(HarnessError::NotHere(victim)),
            };
            let killed = match killed {
                Ok(at) => at,
                Err(e) => {
                    ev.error = Some(format!("cannot SIGKILL node {victim} during its rejoin: {}", chain(&e)));
                    return ev;
                }
            };
            k.events.note(format!("SIGKILL node {victim} during its rejoin"));
            ev.kills.push((victim, killed, rejoined.is_none()));
            std::thread::sleep(restart_after);
            match k.restart() {
                Ok(child) => {
                    k.events.note(format!("restarted node {victim} (it rejoins)"));
                    let pid = std::fs::read_to_string(cluster.pid_file(&Proc::Node(victim)))
                        .ok()
                        .and_then(|t| t.trim().parse::<u32>().ok());
                    if let Some(pid) = pid {
                        pids.insert(victim, pid);
                    }
                    std::mem::forget(child); // reaped by `cluster down`'s wait, not here
                }
                Err(e) => {
                    ev.error = Some(format!("cannot restart node {victim}: {}", chain(&e)));
                    return ev;
                }
            }
            let rejoined =
                k.wait(k.run_end + LAST_REJOIN_GRACE, |p| p.replicas.contains(&victim) && p.phase.is_serving());
            if rejoined.is_some() {
                ev.rejoins_completed += 1;
            }
            next = (next + self.every).max(Instant::now());
        }
        ev
    }
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
