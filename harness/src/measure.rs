//! One measured run of the TPC-C driver ([`workload::client::driver`]) against a serving
//! cluster, with what the nodes report filled in ([`measure_with`]): CPU seconds of each local
//! process and thread during the measured phase (from `/proc`), the nodes' executor threads
//! apart from their network threads (from the nodes' status), memory, and batches sent; and
//! the guard that stops a cluster an experiment started however it ends ([`StopOnDrop`],
//! [`up_guarded`], [`check_and_down`]). `glass bench --config` uses a running cluster or
//! starts one ([`attach_or_start`]), and prints its report as [`render_report`] renders it.
//!
//! Guarantees: a figure that cannot be measured (a node restarted during the run, one that
//! did not answer a sample) is left out with its reason ([`executor_cpu_unmeasured`]), never
//! printed as a number; a guard that cannot stop its cluster while dropping says so on stderr
//! (the one line the harness prints: there is no caller left to tell).

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use wire::endpoint::Link;
use wire::messages::{NodeId, PartitionPhase, PartitionReport, ProcessStatus};
use workload::bench::{self, IntervalLine, Observer, StopAfter};
use workload::client::driver::{self, DriverConfig, HostFigures, RemoteShares};
use workload::client::{self, ClusterClient};
use workload::report::ConsoleObserver;

use crate::cluster::{Cluster, Progress, Running, Up};
use crate::error::{chain, HarnessError};
use crate::html::Check;
use crate::procfs::process_rss_bytes;
use crate::Result;

/// Requests each connection keeps outstanding by default: with one connection per warehouse,
/// the deepest pipeline at which the default cluster on a 2-core machine keeps p99 latency
/// under 10 ms (64 leaves a fifth of the CPU idle between batches; docs/results.md, "The
/// active-active cluster").
pub const INFLIGHT_DEFAULT: usize = 128;
/// The same rule applied to the full stack, whose executor spends ~100 µs on a transaction:
/// at 16 per connection its p99 is ~10 ms, at 128 each answer waits 40–80 ms behind the
/// node's queue (p99 ~80–115 ms) for about a tenth more throughput (docs/results.md, "The
/// full stack's knee"). `glass failover`, and the failover runs of `glass compare
/// --failover`, use it for the full stack by default, so that an outage is measured beside
/// answers that take milliseconds, not beside a queue; `bench` and `compare`'s throughput
/// runs keep [`INFLIGHT_DEFAULT`] for every mode (one load for all).
pub const INFLIGHT_DEFAULT_FULL_STACK: usize = 16;

/// The requests each connection keeps outstanding in a failover run of `mode` by default.
pub fn failover_inflight_default(mode: wire::config::Mode) -> usize {
    match mode {
        wire::config::Mode::FullStack => INFLIGHT_DEFAULT_FULL_STACK,
        wire::config::Mode::ActiveActive | wire::config::Mode::ActivePassive => INFLIGHT_DEFAULT,
    }
}

/// Connections per warehouse by default.
pub const CLIENTS_PER_WAREHOUSE_DEFAULT: usize = 1;
/// How long a bench waits for a running cluster's partitions to serve.
const READY_WAIT: Duration = Duration::from_secs(600);

/// Stops a cluster this command started, however the command ends, and reaps its processes.
pub struct StopOnDrop<'a> {
    pub cluster: &'a Cluster,
    pub armed: bool,
    pub children: Vec<std::process::Child>,
}

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            if let Err(e) = self.cluster.down() {
                eprintln!("glass: error: stopping the cluster: {}", chain(&e));
            }
        }
        // Reaps those that exited (a survivor of a failed `down` is left to the operator).
        for c in &mut self.children {
            let _ = c.try_wait();
        }
    }
}

/// Starts `cluster` (an experiment's own, not running yet) from the `glass` executable `exe`
/// and arms a guard that stops it however the experiment ends.
pub fn up_guarded<'a>(cluster: &'a Cluster, exe: &Path, progress: &mut dyn Progress) -> Result<StopOnDrop<'a>> {
    match cluster.up(exe, progress)? {
        Up::Started(children) => Ok(StopOnDrop { cluster, armed: true, children }),
        Up::AlreadyRunning(_) => Err(HarnessError::AlreadyRunning { path: cluster.path.clone() }),
    }
}

/// Checks what the clients saw acknowledged against the cluster (a failing verdict goes to
/// `progress`), then stops the cluster the guard holds.
pub fn check_and_down(
    rt: &Runtime,
    guard: StopOnDrop<'_>,
    client: &ClusterClient,
    acks: &[engine::acks::NewOrderAck],
    payments: &[engine::acks::PaymentAck],
    progress: &mut dyn Progress,
) -> Result<client::ClusterCheck> {
    let verdict = rt.block_on(client::check(client, acks, payments))?;
    if !verdict.passed() {
        progress.check_failed(&verdict);
    }
    let mut guard = guard;
    guard.armed = false;
    guard.cluster.down()?;
    Ok(verdict)
}

/// How a cluster bench got its cluster.
pub struct Attached<'a> {
    /// Stops the cluster at the end if it was started here (armed), else does nothing.
    pub guard: StopOnDrop<'a>,
    /// Seconds spent starting and loading the cluster (0 for a running one).
    pub load_seconds: f64,
    /// Whether the cluster was already running (and serving) before.
    pub was_running: bool,
}

/// Uses the cluster of `cluster.toml` if its coordinator answers (waiting until every
/// partition serves), else starts it from `exe` — unless its processes run here without
/// answering. `starting` is called before a start.
pub fn attach_or_start<'a>(
    rt: &Runtime,
    cluster: &'a Cluster,
    exe: &Path,
    progress: &mut dyn Progress,
    starting: &mut dyn FnMut(bool),
) -> Result<Attached<'a>> {
    let t0 = Instant::now();
    let client = cluster.client();
    let mut guard = StopOnDrop { cluster, armed: false, children: Vec::new() };
    let reachable = rt.block_on(async {
        let wait = Duration::from_millis(cluster.config.timeouts.connect_timeout_ms.min(2_000));
        tokio::time::timeout(wait, client.connect_coordinator()).await.ok().and_then(std::result::Result::ok)
    });
    if let Some(link) = reachable {
        starting(false);
        rt.block_on(wait_serving(link))?;
        return Ok(Attached { guard, load_seconds: 0.0, was_running: true });
    }
    if !cluster.running_procs().is_empty() {
        return Err(HarnessError::NotAnswering { path: cluster.path.clone() });
    }
    starting(true);
    if let Up::Started(children) = cluster.up(exe, progress)? {
        guard.armed = true;
        guard.children = children;
    }
    Ok(Attached { guard, load_seconds: t0.elapsed().as_secs_f64(), was_running: false })
}

/// Refuses forcing multi-partition NewOrders on a cluster of one partition, naming the flag.
pub fn check_partitions(config: &wire::ClusterConfig, shares: &RemoteShares) -> Result<()> {
    if shares.multi_partition_pct > 0 && config.partitions.len() < 2 {
        return Err(HarnessError::Invalid(format!(
            "--multi-partition {} needs a cluster of at least two partitions; this one has {}",
            shares.multi_partition_pct,
            config.partitions.len()
        )));
    }
    Ok(())
}

/// The report's line on partitions crossed: the shares run and commits by partitions touched.
pub fn partition_line(c: &driver::ClusterInfo) -> String {
    let committed = (c.committed_single_partition + c.committed_multi_partition).max(1) as f64;
    format!(
        "partitions   {} single-partition and {} multi-partition commits ({:.1}% multi; remote items {}%, \
         remote payments {}%, forced multi-partition NewOrders {}%)",
        c.committed_single_partition,
        c.committed_multi_partition,
        100.0 * c.committed_multi_partition as f64 / committed,
        c.remote_item_pct,
        c.remote_payment_pct,
        c.multi_partition_pct
    )
}

/// A cluster bench's report as printed: the bench's table, the cluster's lines (its shape
/// and load, executions per executor CPU second, partitions crossed) and where the time went
/// (`time_lines`, [`Measurement::time_lines`]).
pub fn render_report(report: &bench::BenchReport, time_lines: &[String]) -> String {
    use std::fmt::Write as _;
    let mut s = workload::report::render(report);
    if let Some(c) = &report.cluster {
        let _ = writeln!(
            s,
            "cluster      {} nodes, {} partitions × {} replicas; {} connections × {} in flight{}; {} busy answers",
            c.nodes,
            c.partitions,
            c.replicas,
            c.clients,
            c.inflight,
            c.rate.map_or(" (closed loop)".to_string(), |r| format!(
                ", open loop at {r:.0} txn/s offered, {:.0} achieved ({:.1}%)",
                report.txn_per_sec,
                100.0 * report.txn_per_sec / r
            )),
            c.busy
        );
        if let Some(per_cpu) = report.txn_per_cpu_sec {
            let _ = writeln!(
                s,
                "             the executor figures above count every replica's thread: {per_cpu:.0} executions per \
                 executor CPU second"
            );
        }
        let _ = writeln!(s, "{}", partition_line(c));
    }
    for l in time_lines {
        let _ = writeln!(s, "{l}");
    }
    s
}

/// `glass bench --config … --check`: the cluster checked after the run — replica digests,
/// consistency, every acknowledged NewOrder and Payment of the run present — and the check it
/// is kept as in the run record.
pub fn check_after(
    rt: &Runtime,
    client: &ClusterClient,
    acks: &[engine::acks::NewOrderAck],
    payments: &[engine::acks::PaymentAck],
) -> Result<(client::ClusterCheck, Check)> {
    let verdict = rt.block_on(client::check(client, acks, payments))?;
    let what =
        "replica digests equal, TPC-C consistent (clause 3.3.2), every acknowledged NewOrder and Payment present";
    let check = Check { what: what.into(), passed: verdict.passed() };
    Ok((verdict, check))
}

/// What a measured run shows on the console as it goes: nothing but bars (`quiet`), the
/// once-a-second lines, and with `per_type` a line per transaction type under each.
#[derive(Debug, Clone, Copy, Default)]
pub struct Echo {
    pub quiet: bool,
    pub per_type: bool,
}

impl From<bool> for Echo {
    /// `quiet` alone.
    fn from(quiet: bool) -> Echo {
        Echo { quiet, per_type: false }
    }
}

/// What one measured run of the driver against a serving cluster produced.
pub struct Measurement {
    /// The bench report, with the node-side figures filled in (executor CPU, memory, batches).
    pub report: bench::BenchReport,
    /// Every NewOrder and Payment acknowledged, warm-up included.
    pub acks: Vec<engine::acks::NewOrderAck>,
    pub payments: Vec<engine::acks::PaymentAck>,
    /// The driver's outage figures and fine timeline (see [`driver::DriverOutcome`]).
    pub outcome_unknown: u64,
    pub forgotten: u64,
    pub answers_from_retries: u64,
    pub resent: u64,
    pub unavailable: u64,
    pub fine: Vec<Vec<u64>>,
    pub origin: Instant,
    pub gaps: Vec<Vec<Vec<(Duration, Duration)>>>,
    /// Per partition: the stretches in which none of its terminals committed
    /// ([`workload::client::driver::DriverOutcome::silences`]).
    pub silences: Vec<Vec<(Duration, Duration)>>,
    /// The cluster sampled at the start and the end of the measured phase.
    pub start: Option<Sample>,
    pub end: Option<Sample>,
    /// "Where the time goes" lines.
    pub time_lines: Vec<String>,
}

/// Runs the driver with `shares` against a serving cluster (its processes read on their
/// hosts, [`Cluster::running_by_host`]) and fills in what the nodes report; starts `clock`, if given, when the driver
/// starts its run's clock (the origin of the timeline, as the driver's terminals begin:
/// [`crate::failover::events`]).
#[allow(clippy::too_many_arguments)]
pub fn measure_with(
    rt: &Runtime,
    cluster: &Cluster,
    client: &ClusterClient,
    cfg: &DriverConfig,
    shares: &RemoteShares,
    echo: impl Into<Echo>,
    clock: Option<crate::failover::events::RunClock>,
) -> Result<Measurement> {
    let config = &cluster.config;
    let echo = echo.into();
    let console = ConsoleObserver::new(echo.quiet).per_type(echo.per_type);
    let mut obs = Sampler::new(rt, client, config, cluster.running_by_host(), console)?;
    obs.clock = clock;
    let outcome = driver::run_with(client, rt.handle(), cfg, shares, &mut obs)?;
    let mut report = outcome.report;
    let replicas = config.partitions.iter().map(|p| p.replicas.len()).max().unwrap_or(1);
    // Executions per committed transaction: every replica in active-active, the primary only
    // in the passive modes (backups apply log records).
    let executions = if config.mode().every_replica_executes() { replicas } else { 1 };
    let (start, end) = (obs.start.take(), obs.end.take());
    let mut time_lines = Vec::new();
    if let (Some(s), Some(e)) = (&start, &end) {
        let executor_cpu = e.executor_cpu_s - s.executor_cpu_s;
        match executor_cpu_unmeasured(s, e, executor_cpu) {
            None => {
                report.executor_cpu_seconds = Some(executor_cpu);
                report.txn_per_cpu_sec = Some(report.committed as f64 * executions as f64 / executor_cpu);
                report.cpu_not_measured = None;
            }
            Some(why) => {
                report.executor_cpu_seconds = None;
                report.txn_per_cpu_sec = None;
                report.cpu_not_measured = Some(why);
            }
        }
        // The nodes' memory once loaded: read as the first phase began, before the warm-up
        // grew the database (the measured phase's start, if that reading failed).
        report.rss_after_load_bytes = obs.loaded_rss_bytes.unwrap_or(s.nodes_rss_bytes);
        report.warehouse_copies =
            config.partitions.iter().map(|p| p.warehouses.range().count() as u64 * p.replicas.len() as u64).sum();
        report.rss_bytes = e.nodes_rss_bytes;
        report.growth_pages = config.growth_pages;
        let neworders =
            report.per_txn.iter().find(|k| k.txn == engine::procedures::TxnKind::NewOrder).map_or(0, |k| k.count);
        if neworders > 0 && e.nodes_rss_bytes > 0 {
            report.rss_growth_per_neworder_bytes =
                e.nodes_rss_bytes.saturating_sub(s.nodes_rss_bytes) as f64 / (neworders * replicas as u64) as f64;
        }
        let batches = e.batches.saturating_sub(s.batches);
        if let Some(c) = report.cluster.as_mut() {
            c.batches = Some(batches);
        }
        let hosts = host_figures(s, e, &report);
        time_lines = where_the_time_goes(s, e, &report, batches, executions);
        time_lines.extend(host_lines(&hosts));
        if let Some(c) = report.cluster.as_mut() {
            c.hosts = hosts;
        }
    }
    Ok(Measurement {
        report,
        acks: outcome.acks,
        payments: outcome.payments,
        outcome_unknown: outcome.outcome_unknown,
        forgotten: outcome.forgotten,
        answers_from_retries: outcome.answers_from_retries,
        resent: outcome.resent,
        unavailable: outcome.unavailable,
        fine: outcome.fine,
        origin: outcome.origin,
        gaps: outcome.gaps,
        silences: outcome.silences,
        start,
        end,
        time_lines,
    })
}

/// Waits until every partition of a running cluster serves.
async fn wait_serving(mut link: Link) -> Result<()> {
    let deadline = Instant::now() + READY_WAIT;
    loop {
        let s = client::status(&mut link).await?;
        // (A coordinator that reports no partition serves none yet.)
        if !s.partitions.is_empty() && s.partitions.iter().all(|p| p.phase.is_serving()) {
            return Ok(());
        }
        if let Some(p) = s.partitions.iter().find(|p| p.phase.is_stopped() || p.phase == PartitionPhase::Unavailable) {
            return Err(HarnessError::CannotServe { partition: p.partition, phase: p.phase.clone() });
        }
        if Instant::now() > deadline {
            return Err(HarnessError::ServeTimeout { secs: READY_WAIT.as_secs() });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Why the executors' CPU over the measured phase cannot be told from the two samples, if it
/// cannot: a node that restarted in between (its counters began again from zero), one that
/// did not answer either sample, or no CPU counted at all. A figure that cannot be measured is
/// left out with its reason, never printed as a number.
pub fn executor_cpu_unmeasured(s: &Sample, e: &Sample, executor_cpu_s: f64) -> Option<String> {
    for (node, start) in &s.node_pids {
        let end = e.node_pids.iter().find(|(n, _)| n == node).and_then(|(_, p)| *p);
        match (start, end) {
            (Some(a), Some(b)) if *a != b => {
                return Some(format!("node {node} restarted during the run (pid {a}, then {b})"));
            }
            (Some(_), Some(_)) => {}
            (None, _) => return Some(format!("node {node} did not report its executors' CPU at the start")),
            (_, None) => return Some(format!("node {node} did not report its executors' CPU at the end")),
        }
    }
    if e.node_pids.len() != s.node_pids.len() {
        return Some("the nodes answering changed during the run".to_string());
    }
    (executor_cpu_s <= 0.0).then(|| "no executor CPU time was counted".to_string())
}

/// CPU seconds per thread name.
pub type ThreadCpu = Vec<(String, f64)>;

/// Figures sampled at the start and the end of the measured phase.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub at: Option<Instant>,
    /// Σ executor thread CPU over every replica.
    pub executor_cpu_s: f64,
    /// Per node: (id, its executors' CPU seconds).
    pub node_executor_cpu_s: Vec<(NodeId, f64)>,
    /// Per node: (id, the pid its status reported; `None`: it did not answer).
    pub node_pids: Vec<(NodeId, Option<u32>)>,
    /// Processes' CPU seconds: (label, seconds, per thread name); a process on another host
    /// is labelled `node 1 @ host`.
    pub process_cpu_s: Vec<(String, f64, ThreadCpu)>,
    /// Each host's processes and counters (this host first; a host that could not be read
    /// is absent).
    pub hosts: Vec<HostSample>,
    pub nodes_rss_bytes: u64,
    /// Batches the coordinator sent, over all partitions.
    pub batches: u64,
    /// Every replica's report, by node.
    pub replicas: Vec<(NodeId, PartitionReport)>,
    /// The coordinator's report of each partition.
    pub coordinator: Vec<PartitionReport>,
}

/// One host at one moment: its cluster processes' CPU seconds and resident memory, and its
/// network counters.
#[derive(Debug, Clone, Default)]
pub struct HostSample {
    pub host: String,
    pub processes: Vec<String>,
    pub cpu_s: f64,
    pub rss_bytes: u64,
    /// Bytes received and sent so far over every interface.
    pub net: Option<(u64, u64)>,
}

/// The name of the control host in the per-host figures.
pub use crate::place::THIS_HOST;

/// The console observer, plus samples of the cluster at the measured phase's start and end.
struct Sampler<'a> {
    rt: &'a Runtime,
    inner: ConsoleObserver,
    client: ClusterClient,
    coordinator: Option<Link>,
    nodes: Vec<(NodeId, Option<Link>)>,
    /// Each host and the cluster's processes there (this host first), read at each sample.
    hosts: Vec<(Box<dyn crate::place::ProcessHost>, Vec<Running>)>,
    start: Option<Sample>,
    end: Option<Sample>,
    /// The nodes' resident bytes as the driver's first phase began: the database loaded.
    loaded_rss_bytes: Option<u64>,
    /// Started at the driver's first phase (see [`measure_with`]).
    clock: Option<crate::failover::events::RunClock>,
}

impl<'a> Sampler<'a> {
    fn new(
        rt: &'a Runtime,
        client: &ClusterClient,
        config: &wire::ClusterConfig,
        hosts: Vec<(Box<dyn crate::place::ProcessHost>, Vec<Running>)>,
        inner: ConsoleObserver,
    ) -> Result<Sampler<'a>> {
        let (coordinator, nodes) = rt.block_on(async {
            let coordinator = client.connect_coordinator().await.ok();
            let mut nodes = Vec::new();
            for n in &config.nodes {
                nodes.push((n.id, client.connect_node(n.id).await.ok()));
            }
            (coordinator, nodes)
        });
        Ok(Sampler {
            rt,
            inner,
            client: client.clone(),
            coordinator,
            nodes,
            hosts,
            start: None,
            end: None,
            loaded_rss_bytes: None,
            clock: None,
        })
    }

    fn sample(&mut self) -> Sample {
        let mut s = Sample { at: Some(Instant::now()), ..Sample::default() };
        for (host, procs) in &self.hosts {
            // A host that cannot be read now is left out of this sample, and so of the figures.
            let Ok(reading) = host.read(procs) else { continue };
            let mut h = HostSample { host: host.name(), net: reading.net, ..HostSample::default() };
            for (label, cpu, threads, rss) in reading.processes {
                if label.starts_with("node") {
                    s.nodes_rss_bytes += rss;
                }
                h.cpu_s += cpu;
                h.rss_bytes += rss;
                let named = if host.is_local() { label.clone() } else { format!("{label} @ {}", host.name()) };
                s.process_cpu_s.push((named, cpu, threads));
                h.processes.push(label);
            }
            if host.is_local() {
                // This process is the client.
                h.rss_bytes += process_rss_bytes(std::process::id()).unwrap_or(0);
                h.processes.push("client".to_string());
            }
            s.hosts.push(h);
        }
        let statuses: Vec<(NodeId, Option<ProcessStatus>)> = self.rt.block_on(async {
            let mut out = Vec::new();
            for (id, link) in self.nodes.iter_mut() {
                let mut st = match link {
                    Some(l) => client::status(l).await.ok(),
                    None => None,
                };
                if st.is_none() {
                    // The node may have restarted (a failover run): ask its new process.
                    let dial = tokio::time::timeout(Duration::from_secs(1), self.client.connect_node(*id));
                    *link = dial.await.ok().and_then(Result::ok);
                    if let Some(l) = link {
                        st = client::status(l).await.ok();
                    }
                }
                out.push((*id, st));
            }
            out
        });
        for (id, st) in statuses {
            let cpu = st.as_ref().map_or(0.0, |st| st.partitions.iter().map(|p| p.cpu_ms as f64 / 1000.0).sum());
            s.executor_cpu_s += cpu;
            s.node_executor_cpu_s.push((id, cpu));
            s.node_pids.push((id, st.as_ref().map(|st| st.pid)));
            s.replicas.extend(st.into_iter().flat_map(|st| st.partitions).map(|p| (id, p)));
        }
        if let Some(c) = self.coordinator.as_mut() {
            if let Ok(st) = self.rt.block_on(client::status(c)) {
                s.batches = st.partitions.iter().map(|p| p.seq).sum();
                s.coordinator = st.partitions;
            }
        }
        s
    }
}

impl Observer for Sampler<'_> {
    fn loading(&mut self, done: u64, total: u64) {
        self.inner.loading(done, total);
    }
    fn phase(&mut self, name: &str, stop: StopAfter) {
        if let Some(clock) = &self.clock {
            // The driver's first phase begins as its terminals start: the timeline's origin.
            let _ = clock.set((Instant::now(), crate::record::wall_clock()));
        }
        if name == "run" {
            let start = self.sample();
            if self.loaded_rss_bytes.is_none() {
                self.loaded_rss_bytes = Some(start.nodes_rss_bytes).filter(|b| *b > 0);
            }
            self.start = Some(start);
        } else if self.loaded_rss_bytes.is_none() {
            // The first phase, the warm-up: the database is loaded and has not grown yet.
            self.loaded_rss_bytes = Some(self.sample().nodes_rss_bytes).filter(|b| *b > 0);
        }
        self.inner.phase(name, stop);
    }
    fn progress(&mut self, elapsed_s: f64, txns: u64) {
        self.inner.progress(elapsed_s, txns);
    }
    fn interval(&mut self, line: &IntervalLine) {
        self.inner.interval(line);
    }
    fn finished(&mut self) {
        self.end = Some(self.sample());
        self.inner.finished();
    }
}

/// Each host's figures between samples `s` and `e` (a host read at both); the client's CPU
/// is this host's.
fn host_figures(s: &Sample, e: &Sample, r: &bench::BenchReport) -> Vec<HostFigures> {
    // The samples' window is a little wider than the measured phase: CPU per second of the
    // window over transactions per second of the phase.
    let wall = match (s.at, e.at) {
        (Some(a), Some(b)) => (b - a).as_secs_f64().max(1e-9),
        _ => return Vec::new(),
    };
    let txn_per_s = r.committed as f64 / r.seconds.max(1e-9);
    let client = r.cluster.as_ref().map_or(0.0, |c| c.client_cpu_seconds);
    e.hosts
        .iter()
        .filter_map(|end| {
            let start = s.hosts.iter().find(|h| h.host == end.host)?;
            let cpu = (end.cpu_s - start.cpu_s).max(0.0) + if end.host == THIS_HOST { client } else { 0.0 };
            let net = match (start.net, end.net) {
                (Some(a), Some(b)) => Some((b.0.saturating_sub(a.0), b.1.saturating_sub(a.1))),
                _ => None,
            };
            Some(HostFigures {
                host: end.host.clone(),
                processes: end.processes.clone(),
                cpu_seconds: cpu,
                cpu_seconds_per_1000_txn: 1000.0 * (cpu / wall) / txn_per_s.max(1e-9),
                rss_bytes: end.rss_bytes,
                net_rx_bytes: net.map(|n| n.0),
                net_tx_bytes: net.map(|n| n.1),
            })
        })
        .collect()
}

/// The per-host table, when the cluster runs on more than this host.
fn host_lines(hosts: &[HostFigures]) -> Vec<String> {
    if hosts.len() < 2 {
        return Vec::new();
    }
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let mut lines = vec![
        "
per host (measured phase; network over every interface, loopback included):"
            .to_string(),
        format!(
            "  {:<24} {:>8} {:>18} {:>9} {:>11} {:>11}  processes",
            "host", "CPU s", "CPU ms/1,000 txn", "RSS MiB", "net in MiB", "net out MiB"
        ),
    ];
    for h in hosts {
        let net = |v: Option<u64>| v.map_or("-".to_string(), |b| format!("{:.1}", mib(b)));
        lines.push(format!(
            "  {:<24} {:>8.2} {:>18.2} {:>9.1} {:>11} {:>11}  {}",
            h.host,
            h.cpu_seconds,
            1000.0 * h.cpu_seconds_per_1000_txn,
            mib(h.rss_bytes),
            net(h.net_rx_bytes),
            net(h.net_tx_bytes),
            h.processes.join(", ")
        ));
    }
    lines
}

/// CPU microseconds per committed transaction, summed over every process sampled and the
/// client: CPU per second of the samples' window (a little wider than the measured phase)
/// over transactions per second of the phase. `None` when nothing committed or the window is
/// unknown.
pub fn cpu_us_per_txn(s: &Sample, e: &Sample, r: &bench::BenchReport) -> Option<f64> {
    let wall = (e.at? - s.at?).as_secs_f64();
    if r.committed == 0 || r.seconds <= 0.0 || wall <= 0.0 {
        return None;
    }
    let mut total: f64 = e
        .process_cpu_s
        .iter()
        .filter_map(|(name, end, _)| Some(end - s.process_cpu_s.iter().find(|(n, _, _)| n == name)?.1))
        .sum();
    total += r.cluster.as_ref().map_or(0.0, |c| c.client_cpu_seconds);
    Some(1e6 * (total / wall) / (r.committed as f64 / r.seconds))
}

/// Lines saying where the CPU went during the measured phase.
fn where_the_time_goes(s: &Sample, e: &Sample, r: &bench::BenchReport, batches: u64, executions: usize) -> Vec<String> {
    let wall = match (s.at, e.at) {
        (Some(a), Some(b)) => (b - a).as_secs_f64().max(1e-9),
        _ => return Vec::new(),
    };
    let mut lines = vec![format!(
        "\nwhere the time goes (CPU during the measured {wall:.1} s; 100% = one core busy all along; this machine has \
         {} cores):",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    )];
    let mut total = 0.0;
    let width = e.process_cpu_s.iter().map(|(n, _, _)| n.chars().count()).max().unwrap_or(0).max(12);
    for (name, end_cpu, end_threads) in &e.process_cpu_s {
        let Some((_, start_cpu, start_threads)) = s.process_cpu_s.iter().find(|(n, _, _)| n == name) else { continue };
        let cpu = end_cpu - start_cpu;
        total += cpu;
        let mut threads: Vec<(String, f64)> = end_threads
            .iter()
            .map(|(t, end)| {
                let start = start_threads.iter().find(|(n, _)| n == t).map_or(0.0, |x| x.1);
                (t.clone(), end - start)
            })
            .filter(|(_, c)| *c >= 0.005)
            .collect();
        threads.sort_by(|a, b| b.1.total_cmp(&a.1));
        let parts: Vec<String> =
            threads.iter().map(|(t, c)| format!("{t} {c:.2} s ({:.0}%)", 100.0 * c / wall)).collect();
        lines.push(format!("  {name:<width$} {cpu:>7.2} s  {:>5.0}%   {}", 100.0 * cpu / wall, parts.join(", ")));
    }
    if let Some(c) = &r.cluster {
        total += c.client_cpu_seconds;
        lines.push(format!(
            "  {:<width$} {:>7.2} s  {:>5.0}%",
            "client",
            c.client_cpu_seconds,
            100.0 * c.client_cpu_seconds / wall
        ));
    }
    lines.push(format!("  {:<width$} {total:>7.2} s  {:>5.0}%", "total", 100.0 * total / wall));
    if let Some(us) = cpu_us_per_txn(s, e, r) {
        lines.push(format!("  CPU per committed transaction: {us:.2} µs, every process above (the client's included)"));
    }
    if let (true, Some(executor_cpu)) = (batches > 0, r.executor_cpu_seconds) {
        let txns = r.committed + r.aborted;
        lines.push(format!(
            "  batches: {batches} sent ({:.1} transactions each); executors spent {:.2} µs per transaction executed \
             ({executions} execution{} per transaction; backups' log replay counted in the executors' CPU)",
            txns as f64 / batches as f64,
            1e6 * executor_cpu / (txns as f64 * executions as f64).max(1.0),
            if executions == 1 { "" } else { "s" }
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pids: &[(NodeId, Option<u32>)], cpu: f64) -> Sample {
        Sample { node_pids: pids.to_vec(), executor_cpu_s: cpu, ..Sample::default() }
    }

    /// Issue 14, item 8: a node restarted during a run begins its CPU counters again from zero,
    /// which once printed "-6% of the wall time"; such a figure is left out with its reason.
    #[test]
    fn executor_cpu_is_not_measured_across_a_restart_or_a_silent_node() {
        let start = sample(&[(1, Some(100)), (2, Some(200))], 50.0);
        let same = sample(&[(1, Some(100)), (2, Some(200))], 60.0);
        assert_eq!(executor_cpu_unmeasured(&start, &same, 10.0), None);
        let restarted = sample(&[(1, Some(101)), (2, Some(200))], 47.0);
        let why = executor_cpu_unmeasured(&start, &restarted, -3.0).expect("a restart voids the figure");
        assert!(why.contains("node 1 restarted") && why.contains("pid 100, then 101"), "{why}");
        let silent = sample(&[(1, Some(100)), (2, None)], 55.0);
        assert!(executor_cpu_unmeasured(&start, &silent, 5.0).unwrap().contains("node 2 did not report"));
        assert!(executor_cpu_unmeasured(&start, &same, 0.0).unwrap().contains("no executor CPU"));
    }
}
