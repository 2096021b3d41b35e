//! `glass failover --partition A/B` (issue 37; docs/cluster.md, "Network partitions"): the
//! network between two groups of the cluster's processes is cut for a while, then healed,
//! under load. Each group is a comma-separated list of processes, `c<id>` a coordinator and
//! `n<id>` a node (`c0,n1/c1,c2,n2`); a process named in neither keeps every link, as the
//! client on the control host does.
//!
//! The cut is routes: on each host of one side, `ip route add prohibit <address>/32` for the
//! address of every process of the other side (and back), through ssh for a host named by an
//! `ssh` key, here otherwise (both need the right to change routes: root, or CAP_NET_ADMIN);
//! each host's routes in one command, every host at once. The heal deletes exactly those
//! routes, the same way, and so does the cut's guard however the run ends.
//!
//! While the cut lasts and a little after the heal, every coordinator's status is polled
//! from the control host every [`POLL`]: the record says who led before, when the side holding
//! a majority of the coordinators had a leader serving every partition, how many batches a
//! leader cut off in the minority sent after that (its lease should stop it first:
//! docs/design.md §11, fencing), and when every coordinator followed one leader again after
//! the heal. The usual
//! checks follow the run: nothing acknowledged lost, replicas equal, consistency.
//!
//! Guarantees: a specification naming an unknown process, a process on both sides, or two
//! processes of opposite sides on one host (a host cannot be cut from itself) is refused
//! before anything starts; no route is left behind by a run that ends early.

use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::runtime::Handle;
use wire::config::{ClusterConfig, Mode, Shipping};
use wire::messages::ProcessStatus;
use workload::client::driver::{DriverConfig, RemoteShares, BUCKET};
use workload::client::{self, ClusterClient};

use super::events::{EventLog, RunClock};
use super::{self as report, RunChecks, TimelinePoint};
use crate::cluster::{runtime, Cluster, Proc, Progress};
use crate::error::HarnessError;
use crate::measure::{check_and_down, measure_with, up_guarded};
use crate::place::ProcessHost;
use crate::Result;

/// How often each coordinator's status is read while the cut lasts.
pub const POLL: Duration = Duration::from_millis(25);
/// How long the coordinators are watched after the heal, beyond `timeouts.connect_timeout_ms`
/// (the watch ends once every coordinator names one leader).
const AFTER_HEAL: Duration = Duration::from_secs(3);
/// How long one status read may take before the coordinator counts as silent in that round.
const STATUS_PATIENCE: Duration = Duration::from_millis(200);

/// Two groups of processes to cut apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub sides: [Vec<Proc>; 2],
}

impl Cut {
    /// Parses `A/B` against `config` (see the module documentation).
    pub fn parse(spec: &str, config: &ClusterConfig) -> Result<Cut> {
        let bad = |why: String| HarnessError::Invalid(format!("--partition {spec}: {why}"));
        let (a, b) = spec.split_once('/').ok_or_else(|| bad("two groups separated by `/` are needed".into()))?;
        let group = |g: &str| -> Result<Vec<Proc>> {
            let mut out = Vec::new();
            for name in g.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let p = match (name.get(..1), name.get(1..).and_then(|id| id.parse::<u16>().ok())) {
                    (Some("c"), Some(id)) => {
                        let c = config.coordinators.iter().find(|c| u16::from(c.id) == id);
                        c.map(|c| match config.coordinators.len() {
                            1 => Proc::Coordinator(None),
                            _ => Proc::Coordinator(Some(c.id)),
                        })
                    }
                    (Some("n"), Some(id)) => config.nodes.iter().find(|n| n.id == id).map(|n| Proc::Node(n.id)),
                    _ => return Err(bad(format!("`{name}` is not c<id> (a coordinator) or n<id> (a node)"))),
                };
                let p = p.ok_or_else(|| bad(format!("cluster.toml has no process `{name}`")))?;
                if out.contains(&p) {
                    return Err(bad(format!("`{name}` is named twice")));
                }
                out.push(p);
            }
            if out.is_empty() {
                return Err(bad("each group needs at least one process".into()));
            }
            Ok(out)
        };
        let sides = [group(a)?, group(b)?];
        if let Some(p) = sides[0].iter().find(|p| sides[1].contains(p)) {
            return Err(bad(format!("the {} is on both sides", p.label())));
        }
        Ok(Cut { sides })
    }

    /// `c0,n1/c1,c2,n2`.
    pub fn describe(&self) -> String {
        let name = |p: &Proc| match p {
            Proc::Coordinator(id) => format!("c{}", id.map_or(0, u16::from)),
            Proc::Node(id) => format!("n{id}"),
        };
        let side = |s: &[Proc]| s.iter().map(name).collect::<Vec<_>>().join(",");
        format!("{}/{}", side(&self.sides[0]), side(&self.sides[1]))
    }
}

/// Where a route goes: the host to change and the address to refuse.
#[derive(Clone)]
struct Route {
    host: std::sync::Arc<dyn ProcessHost>,
    label: String,
    address: std::net::IpAddr,
}

/// The routes that cut `cut` in `cluster`: refused when two processes of opposite sides
/// share a host.
fn routes(cluster: &Cluster, cut: &Cut) -> Result<Vec<Route>> {
    let host_key = |p: &Proc| cluster.ssh_of(p).map(|h| (h.config.to.clone(), h.config.port));
    let address = |p: &Proc| -> Result<std::net::IpAddr> {
        let (field, addr) = match p {
            Proc::Coordinator(id) => {
                let c = &cluster.config.coordinators;
                let c = c.iter().find(|c| id.is_none_or(|id| c.id == id)).ok_or(HarnessError::NotSampled)?;
                ("coordinator address", c.address.clone())
            }
            Proc::Node(id) => {
                let n = cluster.config.nodes.iter().find(|n| n.id == *id).ok_or(HarnessError::NotHere(*id))?;
                ("node address", n.address.clone())
            }
        };
        Ok(wire::config::resolve(field, &addr)?.ip())
    };
    let mut out: Vec<Route> = Vec::new();
    for (from, to) in [(&cut.sides[0], &cut.sides[1]), (&cut.sides[1], &cut.sides[0])] {
        for a in from {
            for b in to {
                if host_key(a) == host_key(b) {
                    return Err(HarnessError::Invalid(format!(
                        "--partition: the {} and the {} run on the same host, which cannot be cut from itself",
                        a.label(),
                        b.label()
                    )));
                }
                let host: std::sync::Arc<dyn ProcessHost> = cluster.host_of(a).into();
                let label = host.name();
                let r = Route { host, label, address: address(b)? };
                if !out.iter().any(|o| o.label == r.label && o.address == r.address) {
                    out.push(r);
                }
            }
        }
    }
    Ok(out)
}

/// Runs `ip route VERB prohibit ADDRESS/32` on the route's host.
/// Runs `ip route VERB prohibit ADDRESS/32` for every route: one command per host, every
/// host at once, so a cut (and a heal) is as sudden as one ssh call — one call per route,
/// in turn, took 1.5–2.8 s for twelve routes on a loaded machine. Each route's error, if it
/// has one.
fn route_all(routes: &[Route], verb: &str) -> Vec<Option<String>> {
    let prefix = |r: &Route| format!("{}/{}", r.address, if r.address.is_ipv4() { 32 } else { 128 });
    let mut hosts: Vec<&str> = Vec::new();
    for r in routes {
        if !hosts.contains(&r.label.as_str()) {
            hosts.push(&r.label);
        }
    }
    // Per host: its output (a line `ADDRESS why` per route that failed), or why the
    // command could not run there.
    let outputs: Vec<(&str, std::result::Result<String, String>)> = std::thread::scope(|scope| {
        let running: Vec<_> = hosts
            .iter()
            .map(|label| {
                let group: Vec<&Route> = routes.iter().filter(|r| r.label == *label).collect();
                let addresses: Vec<String> = group.iter().map(|r| crate::hosts::quote(&prefix(r))).collect();
                let script = format!(
                    "for a in {}; do e=$(ip route {verb} prohibit \"$a\" 2>&1) || echo \"$a $e\"; done",
                    addresses.join(" ")
                );
                let host = group[0].host.clone();
                (*label, scope.spawn(move || host.run_tool("sh", &["-c", &script])))
            })
            .collect();
        running
            .into_iter()
            .map(|(label, h)| {
                let out = match h.join() {
                    Ok(r) => r.map_err(|e| crate::error::chain(&e)),
                    Err(_) => Err("the thread running it panicked".to_string()),
                };
                (label, out)
            })
            .collect()
    });
    routes
        .iter()
        .map(|r| {
            let (_, out) = outputs.iter().find(|(label, _)| *label == r.label)?;
            match out {
                Err(e) => Some(e.clone()),
                Ok(text) => {
                    let address = prefix(r);
                    let line = text.lines().find(|l| l.split(' ').next() == Some(address.as_str()))?;
                    Some(format!("{}: ip route {verb} prohibit {line}", r.label))
                }
            }
        })
        .collect()
}

/// The routes in place; deleted on drop (the heal, or a run that ended early).
struct Applied(Vec<Route>);

impl Applied {
    fn heal(&mut self) -> Vec<String> {
        let routes: Vec<Route> = self.0.drain(..).collect();
        route_all(&routes, "del").into_iter().flatten().collect()
    }
}

impl Drop for Applied {
    fn drop(&mut self) {
        let _ = self.heal();
    }
}

/// One `--partition` experiment.
#[derive(Debug)]
pub struct CutExperiment {
    pub exe: std::path::PathBuf,
    pub cut: Cut,
    /// Seconds into the measured phase at which the network is cut.
    pub at: f64,
    /// Seconds the cut lasts.
    pub heal_after: f64,
    pub cfg: DriverConfig,
    pub shares: RemoteShares,
    pub quiet: bool,
}

/// What one coordinator said at one moment.
#[derive(Debug, Clone)]
struct View {
    at: Instant,
    id: u16,
    leader: Option<u16>,
    /// It leads and every partition serves.
    serving: bool,
    /// Batches it sent, over all partitions (a leader's).
    batches: u64,
}

/// The record of a `--partition` run.
#[derive(Debug, Clone, Serialize)]
pub struct CutReport {
    pub mode: Mode,
    pub shipping: Option<Shipping>,
    pub partition: String,
    /// The routes added, as `host refuses address`.
    pub routes: Vec<String>,
    pub cut_at_s: f64,
    pub healed_at_s: Option<f64>,
    /// The coordinator leading just before the cut.
    pub leader_before: Option<u16>,
    /// The side holding a majority of the coordinators (0 or 1), if one does.
    pub majority_side: Option<usize>,
    /// A coordinator of the majority side leading with every partition serving, and when
    /// (seconds of the run), during the cut.
    pub majority_leader: Option<u16>,
    pub majority_served_at_s: Option<f64>,
    /// When the leader before the cut was cut off in the minority: the batches it sent after
    /// the majority's leader served (its lease should have stopped it first: docs/design.md
    /// §11).
    pub cut_off_leader_batches_after: Option<u64>,
    /// After the heal: the one leader every coordinator follows, and when they all did.
    pub leader_after_heal: Option<u16>,
    pub all_follow_at_s: Option<f64>,
    pub longest_silence_per_partition_ms: Vec<f64>,
    #[serde(flatten)]
    pub checks: RunChecks,
    pub committed: u64,
    pub seconds: f64,
    pub timeline: Vec<TimelinePoint>,
    /// Routes the heal could not delete (each a host and why): to remove by hand.
    pub heal_errors: Vec<String>,
}

impl std::fmt::Display for CutReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.2} s"));
        let c = |v: Option<u16>| v.map_or("none".to_string(), |v| format!("coordinator {v}"));
        writeln!(f, "network partition: {}, {} between {}", self.mode, self.partition, self.routes.join("; "))?;
        writeln!(f, "  cut at {:.2} s, healed at {}", self.cut_at_s, s(self.healed_at_s))?;
        writeln!(f, "  leader before       {}", c(self.leader_before))?;
        match self.majority_side {
            Some(side) => writeln!(
                f,
                "  majority side ({})   {} serving every partition at {}",
                side + 1,
                c(self.majority_leader),
                s(self.majority_served_at_s)
            )?,
            None => writeln!(f, "  majority side       none: neither side holds a majority of the coordinators")?,
        }
        if let Some(n) = self.cut_off_leader_batches_after {
            writeln!(f, "  cut-off leader      sent {n} batches after the majority's leader served")?;
        }
        writeln!(
            f,
            "  after the heal      every coordinator follows {} from {}",
            c(self.leader_after_heal),
            s(self.all_follow_at_s)
        )?;
        for (i, ms) in self.longest_silence_per_partition_ms.iter().enumerate() {
            writeln!(f, "  partition {:<3}        longest stretch without a commit {ms:.0} ms", i + 1)?;
        }
        writeln!(f, "  committed            {} in {:.1} s", self.committed, self.seconds)?;
        for e in &self.heal_errors {
            writeln!(f, "  NOT HEALED          {e}")?;
        }
        write!(f, "{}", self.checks)
    }
}

/// Reads every coordinator's status once.
async fn read_views(client: &ClusterClient, links: &mut [(u8, Option<wire::endpoint::Link>)]) -> Vec<View> {
    let mut out = Vec::new();
    for (c, link) in links.iter_mut() {
        if link.is_none() {
            *link = tokio::time::timeout(STATUS_PATIENCE, client.connect_coordinator_id(*c))
                .await
                .ok()
                .and_then(Result::ok);
        }
        let Some(l) = link.as_mut() else { continue };
        let st: Option<ProcessStatus> =
            tokio::time::timeout(STATUS_PATIENCE, client::status(l)).await.ok().and_then(Result::ok);
        match st {
            Some(st) => out.push(View {
                at: Instant::now(),
                id: st.id,
                leader: st.leader,
                serving: st.leader == Some(st.id)
                    && !st.partitions.is_empty()
                    && st.partitions.iter().all(|p| p.phase.is_serving()),
                batches: st.partitions.iter().map(|p| p.seq).sum(),
            }),
            // A late answer would be read as the next round's: start afresh.
            None => *link = None,
        }
    }
    out
}

/// What the cut thread saw.
#[derive(Default)]
struct Seen {
    before: Vec<View>,
    during: Vec<View>,
    after: Vec<View>,
    cut_at: Option<Instant>,
    healed_at: Option<Instant>,
    routes: Vec<String>,
    heal_errors: Vec<String>,
    error: Option<String>,
}

/// What the cut thread needs.
struct CutThread {
    cluster_path: std::path::PathBuf,
    handle: Handle,
    client: ClusterClient,
    cut: Cut,
    /// When to cut, on the run's clock.
    at_s: f64,
    heal_after: Duration,
    run_end: Instant,
    events: EventLog,
}

/// The cut thread: waits for `at_s` on the run's clock, cuts, watches, heals, watches.
fn cut_and_watch(t: CutThread) -> Seen {
    let CutThread { cluster_path, handle, client, cut, at_s, heal_after, run_end, events } = t;
    let mut seen = Seen::default();
    let cluster = match Cluster::open(&cluster_path) {
        Ok(c) => c,
        Err(e) => {
            seen.error = Some(crate::error::chain(&e));
            return seen;
        }
    };
    let planned = match routes(&cluster, &cut) {
        Ok(r) => r,
        Err(e) => {
            seen.error = Some(crate::error::chain(&e));
            return seen;
        }
    };
    let mut links: Vec<(u8, Option<wire::endpoint::Link>)> =
        cluster.config.coordinator_ids().into_iter().map(|c| (c, None)).collect();
    // Each host's shared ssh connection opened now, so that the cut is not held up by key
    // exchanges (the cut's instant is when its last route is in place).
    for r in &planned {
        let _ = r.host.run_tool("true", &[]);
    }
    // And the coordinators' status links, so the reading just before the cut is quick.
    handle.block_on(read_views(&client, &mut links));
    if super::experiment::sleep_until_on_clock(&events, at_s, run_end).is_none() {
        seen.error = Some("the load never started: nothing was cut".into());
        return seen;
    }
    seen.before = handle.block_on(read_views(&client, &mut links));
    let mut applied = Applied(Vec::new());
    let added = route_all(&planned, "add");
    let mut failed = None;
    for (r, error) in planned.into_iter().zip(added) {
        match error {
            None => {
                seen.routes.push(format!("{} refuses {}", r.label, r.address));
                applied.0.push(r);
            }
            Some(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failed {
        seen.error = Some(format!("cannot cut: {e}"));
        seen.heal_errors = applied.heal();
        return seen;
    }
    let cut_at = Instant::now();
    seen.cut_at = Some(cut_at);
    events.note(format!("network cut: {}", cut.describe()));
    let heal_at = cut_at + heal_after;
    while Instant::now() < heal_at {
        seen.during.extend(handle.block_on(read_views(&client, &mut links)));
        std::thread::sleep(POLL);
    }
    seen.heal_errors = applied.heal();
    seen.healed_at = Some(Instant::now());
    events.note("network healed".to_string());
    // The cluster serves until the driver's end and the checks after it: the watch may
    // outlast the measured phase. A coordinator whose dial to a peer began inside the cut
    // waits for it to time out before it dials again (measured: 3.6 s after a heal), so the
    // watch lasts that long and more, and ends once every coordinator names one leader.
    let connect = Duration::from_millis(cluster.config.timeouts.connect_timeout_ms);
    let watch_end = Instant::now() + connect + AFTER_HEAL;
    let ids = cluster.config.coordinator_ids().len();
    let mut latest: std::collections::BTreeMap<u16, Option<u16>> = Default::default();
    while Instant::now() < watch_end {
        let views = handle.block_on(read_views(&client, &mut links));
        latest.extend(views.iter().map(|v| (v.id, v.leader)));
        seen.after.extend(views);
        let mut leaders = latest.values();
        let first = leaders.next().copied().flatten();
        if latest.len() == ids && first.is_some() && leaders.all(|l| *l == first) {
            break;
        }
        std::thread::sleep(POLL);
    }
    seen
}

/// Runs one `--partition` experiment on a cluster derived from `config` (see the module
/// documentation).
pub fn experiment(config: &ClusterConfig, x: &CutExperiment, progress: &mut dyn Progress) -> Result<CutReport> {
    let workload::bench::StopAfter::Seconds(duration_s) = x.cfg.stop else {
        return Err(HarnessError::Invalid("a failover experiment runs for a time".into()));
    };
    let cluster = Cluster::derived(config, "Derived by `glass failover --partition`.", None)?;
    // Refused before anything starts: a cut that cannot be made.
    routes(&cluster, &x.cut)?;
    let guard = up_guarded(&cluster, &x.exe, progress)?;
    let rt = runtime()?;
    let client = cluster.client();
    let start = Instant::now();
    let run_end = start + Duration::from_secs_f64(x.cfg.warmup_s + duration_s);
    let events = EventLog::new(RunClock::default(), x.cfg.warmup_s, x.quiet);
    let watcher = events.watch(&cluster.config.run_dir);
    let thread = {
        let t = CutThread {
            cluster_path: cluster.path.clone(),
            handle: rt.handle().clone(),
            client: client.clone(),
            cut: x.cut.clone(),
            at_s: x.cfg.warmup_s + x.at,
            heal_after: Duration::from_secs_f64(x.heal_after),
            run_end,
            events: events.clone(),
        };
        std::thread::spawn(move || cut_and_watch(t))
    };
    let clock = Some(events.clock().clone());
    let measured = measure_with(&rt, &cluster, &client, &x.cfg, &x.shares, x.quiet, clock);
    let seen = thread.join().map_err(|_| HarnessError::Killer("the partition's thread panicked".into()))?;
    events.finish(Some(watcher));
    cluster.fetch_remote_logs();
    let m = measured?;
    if let Some(e) = seen.error {
        return Err(HarnessError::Killer(e));
    }
    let verdict = check_and_down(&rt, guard, &client, &m.acks, &m.payments, progress)?;

    let at_s = |t: Instant| t.saturating_duration_since(m.origin).as_secs_f64();
    let leader_before = seen.before.iter().find(|v| v.leader == Some(v.id)).map(|v| v.id);
    let coordinator_side = |id: u16| {
        x.cut
            .sides
            .iter()
            .position(|s| s.iter().any(|p| matches!(p, Proc::Coordinator(c) if c.map_or(0, u16::from) == id)))
    };
    let total = cluster.config.coordinators.len();
    let majority_side = (0..2).find(|&s| {
        cluster.config.coordinators.iter().filter(|c| coordinator_side(u16::from(c.id)) == Some(s)).count() * 2 > total
    });
    let majority_served = majority_side.and_then(|side| {
        seen.during.iter().find(|v| v.serving && coordinator_side(v.id) == Some(side)).map(|v| (v.id, v.at))
    });
    let cut_off_leader_batches_after = match (leader_before, majority_side, majority_served) {
        (Some(old), Some(side), Some((_, served))) if coordinator_side(old) != Some(side) => {
            let mine = seen.during.iter().filter(|v| v.id == old);
            let at_served = mine.clone().filter(|v| v.at <= served).map(|v| v.batches).max();
            let most = mine.map(|v| v.batches).max();
            Some(match (at_served, most) {
                (Some(a), Some(b)) => b.saturating_sub(a),
                _ => 0,
            })
        }
        _ => None,
    };
    // After the heal: the first round in which every coordinator names the same leader.
    let ids = cluster.config.coordinator_ids().len();
    let mut follow = None;
    let mut round: Vec<&View> = Vec::new();
    for v in &seen.after {
        round.retain(|r| r.id != v.id);
        round.push(v);
        if round.len() == ids {
            let leader = round[0].leader;
            if leader.is_some() && round.iter().all(|r| r.leader == leader) {
                follow = Some((leader, v.at));
                break;
            }
        }
    }
    let (per_partition, _) = report::measured_silences(&m.fine, x.cfg.warmup_s, duration_s);
    let fine = &m.fine;
    Ok(CutReport {
        mode: config.mode(),
        shipping: config.shipping(),
        partition: x.cut.describe(),
        routes: seen.routes,
        cut_at_s: seen.cut_at.map_or(0.0, at_s),
        healed_at_s: seen.healed_at.map(at_s),
        leader_before,
        majority_side,
        majority_leader: majority_served.map(|(id, _)| id),
        majority_served_at_s: majority_served.map(|(_, t)| at_s(t)),
        cut_off_leader_batches_after,
        leader_after_heal: follow.and_then(|(l, _)| l),
        all_follow_at_s: follow.map(|(_, t)| at_s(t)),
        longest_silence_per_partition_ms: per_partition,
        checks: super::experiment::run_checks(&verdict, &m),
        committed: m.report.committed,
        seconds: m.report.seconds,
        timeline: report::timeline(fine, BUCKET),
        heal_errors: seen.heal_errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ClusterConfig {
        ClusterConfig::parse(include_str!("../../../cluster.toml")).unwrap()
    }

    /// The specification names processes; bad input is refused with the reason.
    #[test]
    fn a_partition_specification_parses_or_says_why_not() {
        let c = config();
        let cut = Cut::parse("c0,n1/c1,c2,n2", &c).unwrap();
        assert_eq!(cut.sides[0], vec![Proc::Coordinator(Some(0)), Proc::Node(1)]);
        assert_eq!(cut.describe(), "c0,n1/c1,c2,n2");
        for (spec, says) in [
            ("c0,n1", "two groups"),
            ("c0/", "at least one"),
            ("c0/c0", "on both sides"),
            ("c9/c1", "no process `c9`"),
            ("x1/c1", "not c<id>"),
            ("c0,c0/c1", "named twice"),
        ] {
            let e = Cut::parse(spec, &c).unwrap_err().to_string();
            assert!(e.contains(says), "{spec}: {e}");
        }
    }
}
