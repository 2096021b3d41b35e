//! The record of a failover experiment (`glass failover`): what was killed when, how long each
//! partition was unavailable, how long detection and recovery took, whether anything
//! acknowledged was lost, and the throughput per 100 ms around it — as a terminal summary,
//! JSON (the report's serde form) and an SVG timeline with the kill and the restart marked.
//!
//! Owns the report type, the unavailability computation and the drawing; [`experiment`] runs
//! the experiments that fill it (one kill, or a kill loop) on a cluster of real processes.
//! Guarantees: an
//! unavailability window is measured from the kill to the end of the longest pause in a
//! partition's commits that spans the kill (from the clients' own commit times, not from a
//! guess); a partition whose commits never paused longer than the gap threshold shows the
//! threshold as an upper bound (`unavailability_at_most_ms`), never zero.

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;
use serde::Serialize;

use crate::compare::SvgError;
use wire::config::{Mode, Shipping};

pub mod events;
pub mod experiment;
pub mod partition;

/// One partition's outage.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PartitionOutage {
    pub partition: u16,
    /// From the kill to the first commit after the longest pause spanning it (ms); `None`
    /// when the partition never paused longer than the gap threshold around the kill.
    pub unavailability_ms: Option<f64>,
    /// The gap threshold when `unavailability_ms` is `None`: the window was shorter.
    pub unavailability_at_most_ms: Option<f64>,
    /// The partition's own stretch without a commit at the kill (no terminal of it committed:
    /// from the last commit before to the first after, ms); `None` when it had none longer
    /// than the gap threshold there. `unavailability_ms` is longer: it waits for the last
    /// terminal's first commit.
    pub silence_at_kill_ms: Option<f64>,
    /// The longest such stretch of the partition in the steady state before the kill (from the
    /// warm-up's end), ms: the scheduling noise the other figures stand on.
    pub steady_silence_ms: f64,
    /// Where that stretch began, seconds from the run's start.
    pub steady_silence_at_s: Option<f64>,
    /// The share of the machine's CPU time the hypervisor took during that stretch, percent
    /// ([`crate::procfs::CpuTrace`]); `None` where it cannot be read.
    pub steady_silence_cpu_stolen_pct: Option<f64>,
    /// Where this machine's CPU time went during that stretch: stolen, idle, and each of
    /// this host's cluster processes and the client's share ([`crate::procfs::CpuSplit`]);
    /// `None` where it cannot be read.
    pub steady_silence_cpu: Option<crate::procfs::CpuSplit>,
}

/// One bucket of the timeline.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TimelinePoint {
    /// Offset of the bucket's start from the run's start, seconds.
    pub t_s: f64,
    /// Commits per second in this bucket, per partition (cluster.toml order) and in all.
    pub per_partition: Vec<f64>,
    pub txn_per_sec: f64,
    /// The share of the machine's CPU time the hypervisor took in this bucket, percent
    /// (failover runs; `None`: not read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_stolen_pct: Option<f64>,
}

/// The signal a failover experiment sends its victim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum KillSignal {
    /// SIGKILL: the process dies at once, nothing flushed.
    #[serde(rename = "SIGKILL")]
    Kill,
    /// SIGTERM: the process shuts down cleanly.
    #[serde(rename = "SIGTERM")]
    Term,
    /// SIGSTOP: the process freezes; its kernel closes nothing (a hung machine, a cut
    /// network).
    #[serde(rename = "SIGSTOP")]
    Stop,
}

impl KillSignal {
    /// The signal `signal` (SIGKILL, SIGTERM or SIGSTOP; anything else reads as SIGKILL).
    pub fn of(signal: libc::c_int) -> KillSignal {
        match signal {
            libc::SIGTERM => KillSignal::Term,
            libc::SIGSTOP => KillSignal::Stop,
            _ => KillSignal::Kill,
        }
    }
}

impl std::fmt::Display for KillSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            KillSignal::Kill => "SIGKILL",
            KillSignal::Term => "SIGTERM",
            KillSignal::Stop => "SIGSTOP",
        })
    }
}

/// The process a failover experiment fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Victim {
    Node(u16),
    /// A coordinator of the group: the one leading at the moment of the kill.
    Coordinator(u8),
}

impl std::fmt::Display for Victim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Victim::Node(n) => write!(f, "node {n}"),
            Victim::Coordinator(c) => write!(f, "coordinator {c}"),
        }
    }
}

/// How a partition of the victim came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Recovery {
    /// Nothing to recover: the other replicas went on (active-active, not restarted).
    None,
    /// A backup was promoted (passive modes).
    Promotion,
    /// The restarted node copied its partitions from live replicas.
    Rejoin,
    /// Full stack, the restarted node alone: restart recovery from its own log.
    WalRecovery,
    /// Full stack with a promoted successor: recovery from its log, cut where the successor's
    /// copy ended, then the successor's records since.
    #[serde(rename = "wal-recovery+catch-up")]
    WalRecoveryCatchUp,
    /// A coordinator was killed: a standby was elected and took over from the replicas'
    /// standing (docs/design.md §11).
    Election,
    /// A killed coordinator, started again, follows the new leader as a standby.
    Standby,
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            Recovery::None => "none",
            Recovery::Promotion => "promotion",
            Recovery::Rejoin => "rejoin",
            Recovery::WalRecovery => "wal-recovery",
            Recovery::WalRecoveryCatchUp => "wal-recovery+catch-up",
            Recovery::Election => "election",
            Recovery::Standby => "standby",
        })
    }
}

/// The whole record.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverReport {
    pub mode: Mode,
    pub shipping: Option<Shipping>,
    /// Replicas per partition, and (active-active) when a client is answered: `majority` or
    /// `all` (docs/cluster.md, "Agreement").
    pub replicas: usize,
    pub agreement: Option<String>,
    /// The load the clients offered: connections, the requests each kept in flight (closed
    /// loop), or the transactions per second offered over all of them (open loop).
    pub connections: usize,
    pub inflight: usize,
    pub offered_txn_per_s: Option<f64>,
    /// The process killed, how (`SIGKILL` or `SIGTERM`), and when (seconds from the run's
    /// start).
    pub killed: Victim,
    pub signal: KillSignal,
    pub killed_at_s: f64,
    /// When the node was started again (`--restart-after`), seconds from the run's start.
    pub restarted_at_s: Option<f64>,
    /// From the kill until the coordinator excluded the node, or (a coordinator killed)
    /// until another coordinator no longer counted the killed one its leader (ms).
    pub detection_ms: Option<f64>,
    /// A node killed: what told the coordinator (docs/cluster.md, "Failure detection"):
    /// `heartbeat timeout`, `connection lost: …`, `its death notice`, …
    pub detected_by: Option<String>,
    /// A coordinator killed: from the kill until a newly elected leader had taken over and
    /// every partition served (ms).
    pub election_ms: Option<f64>,
    /// From the restart until the node was live again (rejoin) or the coordinator followed
    /// the new leader (standby), or from the kill until a backup was promoted (ms); `None`
    /// when nothing recovered within the run.
    pub recovery_ms: Option<f64>,
    /// How the victim's partitions came back.
    pub recovery: Recovery,
    /// The largest unavailability over the partitions (ms), for tables.
    pub unavailability_ms: Option<f64>,
    pub partitions: Vec<PartitionOutage>,
    /// Throughput before the kill (mean of the second before) and its lowest 100 ms bucket
    /// after, in txn/s.
    pub txn_per_sec_before: f64,
    pub txn_per_sec_lowest_after: f64,
    /// The share of the machine's CPU time the hypervisor took over the measured phase,
    /// percent ([`crate::procfs::CpuTrace`]; per bucket in `timeline`); `None`: not read.
    pub cpu_stolen_pct: Option<f64>,
    /// What the checks after the run found (flattened into the record's JSON).
    #[serde(flatten)]
    pub checks: RunChecks,
    pub committed: u64,
    /// Of `committed`, transactions that spanned partitions (issue 7).
    pub committed_multi_partition: u64,
    pub seconds: f64,
    /// `--then-kill`: when the second node was killed (seconds from the run's start), once
    /// the first was live again.
    pub then_killed_at_s: Option<f64>,
    /// A node restarted that rejoined by copying: what its rejoin cost the survivors
    /// (docs/design.md §10, "Copying without stopping" and "Catching up under load").
    pub rejoin: Option<RejoinFigures>,
    /// What happened, in time order (docs/usage.md, "Events"): the harness's kill and restart,
    /// the coordinators' reports of detection, promotion, election and rejoin.
    pub events: Vec<events::RunEvent>,
    pub timeline: Vec<TimelinePoint>,
}

/// What a rejoin under load cost, from the per-commit measurement and the coordinators' log.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RejoinFigures {
    /// Whether the node was live again before the measured phase ended (the load still ran).
    pub live_under_load: bool,
    /// Per partition (cluster.toml order): the longest stretch in which none of its terminals
    /// committed, from the restart until the node was live again (or the measured phase's
    /// end), ms; 0 when none reached the measurement's smallest gap. To be read beside the
    /// partition's `silence_at_kill_ms` and `steady_silence_ms`.
    pub longest_silence_ms: Vec<f64>,
    /// Per partition: where that stretch began, seconds from the run's start (to be placed
    /// against `events`); `None` when there was none.
    pub longest_silence_at_s: Vec<Option<f64>>,
    /// Per partition: the share of the machine's CPU time the hypervisor took during that
    /// stretch, percent; `None` where it cannot be read.
    pub longest_silence_cpu_stolen_pct: Vec<Option<f64>>,
    /// Per partition: where this machine's CPU time went during that stretch — stolen, idle,
    /// and which processes had it ([`crate::procfs::CpuSplit`]); `None` where it cannot be
    /// read.
    pub longest_silence_cpu: Vec<Option<crate::procfs::CpuSplit>>,
    /// Per partition: the longest one terminal waited between two of its commits in the same
    /// window, ms — longer than `longest_silence_ms` when the catch-up policy answers some
    /// requests busy and their terminals back off while others commit.
    pub longest_gap_ms: Vec<f64>,
    /// Per partition: the batches the joiner executed after its copy (`then N batches sent
    /// after it`, from the coordinators' log), if it rejoined.
    pub replayed_batches: Vec<Option<u64>>,
    /// Mean commits per second from the restart until live (or the end), and the share of the
    /// rate before the kill given up meanwhile, percent.
    pub txn_per_sec_during: f64,
    pub given_up_pct: f64,
}
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LoopKill {
    pub node: u16,
    /// Seconds from the run's start.
    pub at_s: f64,
    /// Whether the node was still rejoining (not yet counted live again) when it was killed.
    pub while_rejoining: bool,
}

/// The record of a kill loop (`glass failover --kill-loop N`): nodes SIGKILLed again and again,
/// each restarted and killed once more in the middle of its rejoin, then restarted to rejoin
/// for good — the adversarial run that once stalled the whole cluster for 30 s.
#[derive(Debug, Clone, Serialize)]
pub struct KillLoopReport {
    pub mode: Mode,
    pub shipping: Option<Shipping>,
    pub failure_timeout_ms: u64,
    /// Cycles run (each: kill, restart, kill while rejoining, restart).
    pub cycles: u32,
    pub kills: Vec<LoopKill>,
    /// Cycles whose last restart rejoined (the node counted live and its partitions serving)
    /// within the run.
    pub rejoins_completed: u32,
    /// The longest stretch of the measured phase in which no partition committed anything
    /// (ms, to the timeline's 100 ms resolution).
    pub longest_silence_ms: f64,
    /// The longest stretch without a commit, per partition (cluster.toml order).
    pub longest_silence_per_partition_ms: Vec<f64>,
    /// What the checks after the run found (flattened into the record's JSON).
    #[serde(flatten)]
    pub checks: RunChecks,
    pub committed: u64,
    pub seconds: f64,
    pub timeline: Vec<TimelinePoint>,
}

/// [`longest_silences`] of the measured phase only (`warmup_s` to `warmup_s + duration_s` on
/// the run's clock): not the warm-up, nor the answers that trickle in after the terminals
/// stopped.
pub fn measured_silences(fine: &[Vec<u64>], warmup_s: f64, duration_s: f64) -> (Vec<f64>, f64) {
    let bucket_s = workload::client::driver::BUCKET.as_secs_f64();
    let at = |s: f64| ((s / bucket_s) as usize).min(fine.len());
    longest_silences(&fine[at(warmup_s)..at(warmup_s + duration_s)], workload::client::driver::BUCKET)
}

/// The longest run of buckets of `fine` (commits per bucket and partition) in which nothing
/// committed: per partition, and in all partitions at once; in milliseconds.
pub fn longest_silences(fine: &[Vec<u64>], bucket: Duration) -> (Vec<f64>, f64) {
    let partitions = fine.first().map_or(0, Vec::len);
    let ms = bucket.as_secs_f64() * 1e3;
    let longest = |silent: &dyn Fn(&[u64]) -> bool| {
        let (mut run, mut best) = (0usize, 0usize);
        for row in fine {
            run = if silent(row) { run + 1 } else { 0 };
            best = best.max(run);
        }
        best as f64 * ms
    };
    let per = (0..partitions).map(|p| longest(&|row: &[u64]| row[p] == 0)).collect();
    (per, longest(&|row: &[u64]| row.iter().all(|&n| n == 0)))
}

impl std::fmt::Display for KillLoopReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "kill loop: {}{}, {} cycles, failure timeout {} ms",
            self.mode,
            self.shipping.as_ref().map_or(String::new(), |s| format!(" ({s} shipping)")),
            self.cycles,
            self.failure_timeout_ms
        )?;
        for k in &self.kills {
            writeln!(
                f,
                "  SIGKILL node {} at {:>5.1} s{}",
                k.node,
                k.at_s,
                if k.while_rejoining { " (while it rejoined)" } else { "" }
            )?;
        }
        writeln!(f, "  rejoins completed    {} of {}", self.rejoins_completed, self.cycles)?;
        writeln!(f, "  longest stretch without any commit   {:.0} ms", self.longest_silence_ms)?;
        for (i, ms) in self.longest_silence_per_partition_ms.iter().enumerate() {
            writeln!(f, "  partition {:<3}        longest stretch without a commit {ms:.0} ms", i + 1)?;
        }
        writeln!(f, "  committed            {} in {:.1} s", self.committed, self.seconds)?;
        write!(f, "{}", self.checks)
    }
}

/// What the checks after a failover run found: the closing lines of its record.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct RunChecks {
    /// Acknowledged NewOrders and Payments checked, and those missing from the data.
    pub acknowledged_checked: u64,
    pub lost_acknowledged: u64,
    /// Requests whose outcome the run never learnt: lost with a connection (without
    /// retries), answered "outcome unknown", or forgotten when asked again.
    pub outcome_unknown: u64,
    /// Of those, asked again and answered "outcome forgotten".
    pub forgotten: u64,
    /// Requests sent again after a failure took their answer (each time counts), and the
    /// answers those retries brought (docs/design.md §11, "Exactly-once answers").
    pub resent: u64,
    pub answers_from_retries: u64,
    /// ORDER and HISTORY rows added since the load that no acknowledgement accounts for; more
    /// than `outcome_unknown` means some transaction ran twice.
    pub unaccounted_rows: u64,
    /// Answers that a partition had no live replica (or was stopped).
    pub unavailable_answers: u64,
    pub digests_equal: bool,
    pub consistent: bool,
}

impl RunChecks {
    /// What [`crate::verdict::failure_passed`] judges.
    pub fn outcome(&self) -> crate::verdict::FailureOutcome {
        crate::verdict::FailureOutcome {
            lost_acknowledged: self.lost_acknowledged,
            digests_equal: self.digests_equal,
            consistent: self.consistent,
            ran_twice: self.ran_twice(),
        }
    }

    /// The data holds more rows than the acknowledgements and the requests of unknown
    /// outcome account for.
    pub fn ran_twice(&self) -> bool {
        self.unaccounted_rows > self.outcome_unknown
    }
}

impl std::fmt::Display for RunChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "  acknowledged         {} checked, {} LOST; {} outcome unknown; {} unavailable answers",
            self.acknowledged_checked, self.lost_acknowledged, self.outcome_unknown, self.unavailable_answers
        )?;
        writeln!(
            f,
            "  asked again          {} requests resent, {} answers from retries, {} forgotten; {} rows without an answer: {}",
            self.resent,
            self.answers_from_retries,
            self.forgotten,
            self.unaccounted_rows,
            if self.ran_twice() { "SOME TRANSACTION RAN TWICE" } else { "nothing ran twice" }
        )?;
        writeln!(
            f,
            "  afterwards           digests {}, TPC-C consistency {}",
            if self.digests_equal { "equal" } else { "DIFFER" },
            if self.consistent { "holds" } else { "VIOLATED" }
        )
    }
}

/// How long after the kill a pause may begin and still count as the kill's: batches whose
/// results all arrived before the kill still commit just after it.
pub const PAUSE_START_AFTER_KILL_MAX: Duration = Duration::from_millis(200);

/// The unavailability of each partition around `kill` (offset from the run's start), from
/// the pauses between commits each of its terminals saw (`gaps[p][t]`: (start, end) offsets)
/// and the partition's own stretches without a commit (`silences[p]`); `gap_min` is the
/// shortest pause recorded, `steady_from` where the steady state before the kill begins.
/// A pause counts when it spans the kill or begins at most [`PAUSE_START_AFTER_KILL_MAX`]
/// after it; of a terminal's pauses that count, its longest is the one the kill caused, and
/// the partition was unavailable until the last of its terminals ended that pause. (A
/// terminal's ordinary wait after its first commit past the outage is not the kill's: in a
/// mode whose every answer takes longer than `gap_min`, such as the full stack at
/// saturation, counting every pause begun within the window would report the window.)
pub fn outages(
    gaps: &[Vec<Vec<(Duration, Duration)>>],
    silences: &[Vec<(Duration, Duration)>],
    kill: Duration,
    steady_from: Duration,
    gap_min: Duration,
) -> Vec<PartitionOutage> {
    let at_kill = |(s, e): &&(Duration, Duration)| *s <= kill + PAUSE_START_AFTER_KILL_MAX && *e > kill;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    gaps.iter()
        .enumerate()
        .map(|(i, g)| {
            let end = g
                .iter()
                .filter_map(|t| t.iter().filter(at_kill).max_by_key(|(s, e)| (*e - *s, *e)).map(|(_, e)| *e))
                .max();
            let own = silences.get(i).map_or(&[][..], Vec::as_slice);
            let steady = longest_within_at(own, steady_from, kill);
            PartitionOutage {
                partition: i as u16 + 1,
                unavailability_ms: end.map(|e| ms(e - kill)),
                unavailability_at_most_ms: end.is_none().then_some(ms(gap_min)),
                silence_at_kill_ms: own.iter().filter(at_kill).map(|(s, e)| ms(*e - *s)).reduce(f64::max),
                steady_silence_ms: steady.map_or(0.0, |(ms, _)| ms),
                steady_silence_at_s: steady.map(|(_, at)| at),
                steady_silence_cpu_stolen_pct: None,
                steady_silence_cpu: None,
            }
        })
        .collect()
}

/// The longest of `stretches` (offsets) within `from..until`, cut to it, ms; 0 for none.
pub fn longest_within(stretches: &[(Duration, Duration)], from: Duration, until: Duration) -> f64 {
    longest_within_at(stretches, from, until).map_or(0.0, |(ms, _)| ms)
}

/// The longest of `stretches` within `from..until`, cut to it: its length in ms and where it
/// begins (cut), seconds; `None` for none.
pub fn longest_within_at(stretches: &[(Duration, Duration)], from: Duration, until: Duration) -> Option<(f64, f64)> {
    stretches
        .iter()
        .map(|&(s, e)| (s.max(from), e.min(until)))
        .filter(|(s, e)| e > s)
        .map(|(s, e)| ((e - s).as_secs_f64() * 1e3, s.as_secs_f64()))
        .reduce(|a, b| if b.0 > a.0 { b } else { a })
}

/// The timeline from commits per bucket (`fine[i][p]`).
pub fn timeline(fine: &[Vec<u64>], bucket: Duration) -> Vec<TimelinePoint> {
    let per_s = 1.0 / bucket.as_secs_f64();
    fine.iter()
        .enumerate()
        .map(|(i, row)| TimelinePoint {
            t_s: i as f64 * bucket.as_secs_f64(),
            per_partition: row.iter().map(|&n| n as f64 * per_s).collect(),
            txn_per_sec: row.iter().sum::<u64>() as f64 * per_s,
            cpu_stolen_pct: None,
        })
        .collect()
}

/// ", N% of the CPUs stolen meanwhile" for a stretch the hypervisor took CPU time in, else
/// nothing.
fn stolen(pct: Option<f64>) -> String {
    match pct {
        Some(p) if p >= 0.5 => format!(", {p:.0}% of the CPUs stolen by the hypervisor meanwhile"),
        _ => String::new(),
    }
}

impl std::fmt::Display for FailoverReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.0} ms"));
        writeln!(
            f,
            "failover: {} ×{}{}{}, {} {} at {:.1} s of the run (warm-up included){}",
            self.mode,
            self.replicas,
            self.shipping.as_ref().map_or(String::new(), |s| format!(" ({s} shipping)")),
            self.agreement.as_ref().map_or(String::new(), |a| format!(" ({a} agreement)")),
            self.killed,
            self.signal,
            self.killed_at_s,
            self.restarted_at_s.map_or(String::new(), |t| format!(", restarted at {t:.1} s"))
        )?;
        match self.offered_txn_per_s {
            Some(rate) => {
                writeln!(f, "  load                 {} connections, open loop at {rate:.0} txn/s", self.connections)?
            }
            None => writeln!(
                f,
                "  load                 {} connections × {} requests in flight (closed loop)",
                self.connections, self.inflight
            )?,
        }
        match &self.detected_by {
            Some(by) => writeln!(f, "  detection            {} (by {by})", ms(self.detection_ms))?,
            None => writeln!(f, "  detection            {}", ms(self.detection_ms))?,
        }
        if let Victim::Coordinator(_) = self.killed {
            writeln!(f, "  election             {}", ms(self.election_ms))?;
        }
        for p in &self.partitions {
            let v = match (p.unavailability_ms, p.unavailability_at_most_ms) {
                (Some(v), _) => format!("{v:.0} ms"),
                (None, Some(m)) => format!("< {m:.0} ms (commits never paused longer)"),
                _ => "—".into(),
            };
            let silence = p.silence_at_kill_ms.map_or(String::new(), |s| format!("; no commit at all for {s:.0} ms"));
            writeln!(
                f,
                "  partition {:<3}        unavailable {v}{silence} (steady state before: {:.0} ms at most{})",
                p.partition,
                p.steady_silence_ms,
                stolen(p.steady_silence_cpu_stolen_pct)
            )?;
        }
        let recovery = match (self.recovery_ms, self.recovery) {
            (Some(_), _) => ms(self.recovery_ms),
            (None, Recovery::None) => "— (nothing to recover: the other replicas went on)".to_string(),
            (None, _) => "— (not done before the measured phase ended)".to_string(),
        };
        writeln!(f, "  {:<20} {recovery}", format!("recovery ({})", self.recovery))?;
        writeln!(
            f,
            "  throughput           {:.0} txn/s before, {:.0} txn/s in the worst 100 ms after",
            self.txn_per_sec_before, self.txn_per_sec_lowest_after
        )?;
        if let Some(t) = self.then_killed_at_s {
            writeln!(
                f,
                "  then                 the other replica's node SIGKILL at {t:.1} s, once the first was live again"
            )?;
        }
        if let Some(r) = &self.rejoin {
            let list = |v: &[f64]| v.iter().map(|g| format!("{g:.0} ms")).collect::<Vec<_>>().join(", ");
            let replayed: Vec<String> =
                r.replayed_batches.iter().map(|b| b.map_or("—".to_string(), |b| b.to_string())).collect();
            writeln!(
                f,
                "  rejoin               {}; longest stretch without a commit per partition [{}]",
                if r.live_under_load {
                    "live again while the load ran"
                } else {
                    "NOT live again before the load ended"
                },
                list(&r.longest_silence_ms)
            )?;
            let at: Vec<String> =
                r.longest_silence_at_s.iter().map(|t| t.map_or("—".to_string(), |t| format!("{t:.1} s"))).collect();
            let stole: Vec<String> = r
                .longest_silence_cpu_stolen_pct
                .iter()
                .map(|p| p.map_or("—".to_string(), |p| format!("{p:.0}%")))
                .collect();
            writeln!(
                f,
                "                       (beginning at [{}] into the run; CPUs stolen by the hypervisor meanwhile [{}])",
                at.join(", "),
                stole.join(", ")
            )?;
            for (p, split) in r.longest_silence_cpu.iter().enumerate() {
                if let Some(split) = split {
                    writeln!(f, "                       CPU in partition {}'s stretch: {split}", p + 1)?;
                }
            }
            writeln!(
                f,
                "                       longest one client waited per partition [{}]",
                list(&r.longest_gap_ms)
            )?;
            writeln!(
                f,
                "                       {:.0} txn/s meanwhile ({:.0}% given up); batches replayed per partition [{}]",
                r.txn_per_sec_during,
                r.given_up_pct,
                replayed.join(", ")
            )?;
        }
        writeln!(f, "  committed            {} ({} multi-partition)", self.committed, self.committed_multi_partition)?;
        if let Some(p) = self.cpu_stolen_pct {
            writeln!(f, "  CPU stolen           {p:.1}% of the machine's CPU time, by the hypervisor, over the run")?;
        }
        write!(f, "{}", self.checks)
    }
}

/// Draws throughput per 100 ms over time, one line per partition and the total, with the kill
/// and the restart marked, and the coordinators' detections, promotions, new leaders and
/// rejoins' ends ([`events::chart_label`]).
pub fn write_svg(r: &FailoverReport, path: &Path) -> Result<(), SvgError> {
    let err = |source: DrawingAreaErrorKind<std::io::Error>| SvgError::Draw { path: path.to_path_buf(), source };
    let root = SVGBackend::new(path, (1000, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let t_max = r.timeline.last().map_or(1.0, |p| p.t_s + 0.1).max(r.killed_at_s + 0.1);
    let y_max = r.timeline.iter().map(|p| p.txn_per_sec).fold(1.0, f64::max) * 1.1;
    let title = format!(
        "glass failover: {}{} — {} {} at {:.1} s",
        r.mode,
        r.shipping.as_ref().map_or(String::new(), |s| format!(" ({s})")),
        r.killed,
        r.signal,
        r.killed_at_s
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..t_max, 0.0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the run started")
        .y_desc("committed txn/s (per 100 ms)")
        .draw()
        .map_err(err)?;
    let colours = [RGBColor(0x4e, 0x79, 0xa7), RGBColor(0xf2, 0x8e, 0x2b), RGBColor(0x59, 0xa1, 0x4f)];
    let partitions = r.timeline.first().map_or(0, |p| p.per_partition.len());
    for p in 0..partitions {
        let c = colours[p % colours.len()];
        chart
            .draw_series(LineSeries::new(r.timeline.iter().map(|pt| (pt.t_s, pt.per_partition[p])), c))
            .map_err(err)?
            .label(format!("partition {}", p + 1))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
    }
    chart
        .draw_series(LineSeries::new(r.timeline.iter().map(|pt| (pt.t_s, pt.txn_per_sec)), BLACK.stroke_width(2)))
        .map_err(err)?
        .label("all")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    let mut marks = vec![(r.killed_at_s, format!("{} {}", r.signal, r.killed), RED, 0.97)];
    if let Some(t) = r.restarted_at_s {
        marks.push((t, format!("restart {}", r.killed), GREEN, 0.97));
    }
    // The coordinators' key events, thin and grey, their labels lower so they do not cover the above.
    let grey = RGBColor(0x70, 0x70, 0x70);
    for (i, (t, label)) in r.events.iter().filter_map(|e| Some((e.t_s, events::chart_label(e)?))).enumerate() {
        marks.push((t, label, grey, 0.90 - 0.05 * (i % 4) as f64));
    }
    for (t, label, c, y) in marks {
        let style = if c == grey { c.stroke_width(1) } else { c.stroke_width(2) };
        chart.draw_series(std::iter::once(PathElement::new(vec![(t, 0.0), (t, y_max)], style))).map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(label, (t, y_max * y), ("sans-serif", 14).into_font().color(&c))))
            .map_err(err)?;
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(err)?;
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn unavailability_is_the_longest_pause_spanning_the_kill() {
        let gaps = vec![
            vec![vec![(ms(100), ms(130)), (ms(990), ms(2_150))], vec![(ms(995), ms(2_100))]],
            vec![vec![(ms(3_000), ms(3_050))]],
        ];
        let silences = vec![vec![(ms(300), ms(340)), (ms(995), ms(2_100))], vec![]];
        let o = outages(&gaps, &silences, ms(1_000), ms(200), ms(20));
        assert_eq!(o[0].unavailability_ms, Some(1_150.0));
        assert_eq!(o[0].silence_at_kill_ms, Some(1_105.0), "the partition's own stretch, start to end");
        assert_eq!(o[0].steady_silence_ms, 40.0, "the longest before the kill");
        assert_eq!(o[1].unavailability_ms, None);
        assert_eq!(o[1].unavailability_at_most_ms, Some(20.0), "an upper bound, never zero");
        assert_eq!((o[1].silence_at_kill_ms, o[1].steady_silence_ms), (None, 0.0));
    }

    /// A terminal whose every answer takes longer than the gap threshold (the full stack at
    /// saturation) waits again right after the outage: that wait, begun inside the window
    /// after the kill, is not the kill's. Only each terminal's longest pause there counts.
    #[test]
    fn a_terminal_s_ordinary_wait_after_the_outage_is_not_the_kill_s() {
        let gaps = vec![vec![
            vec![(ms(960), ms(1_116)), (ms(1_116), ms(1_160)), (ms(1_190), ms(1_240))],
            vec![(ms(980), ms(1_120)), (ms(1_150), ms(1_199))],
        ]];
        let o = outages(&gaps, &[vec![]], ms(1_000), ms(200), ms(20));
        assert_eq!(o[0].unavailability_ms, Some(120.0), "until the last terminal's first commit after its pause");
        // One terminal only waited after the kill, begun within the window: that wait counts.
        let late = vec![vec![vec![(ms(900), ms(990)), (ms(1_050), ms(1_400))]]];
        assert_eq!(outages(&late, &[vec![]], ms(1_000), ms(200), ms(20))[0].unavailability_ms, Some(400.0));
    }

    #[test]
    fn longest_silences_count_consecutive_empty_buckets() {
        let fine = vec![vec![1, 1], vec![0, 1], vec![0, 0], vec![0, 0], vec![2, 0], vec![0, 0], vec![1, 1]];
        let (per, all) = longest_silences(&fine, ms(100));
        assert_eq!(per, vec![300.0, 400.0]);
        assert_eq!(all, 200.0, "only where every partition is silent");
        assert_eq!(longest_silences(&[], ms(100)), (Vec::new(), 0.0));
    }

    /// Only the measured phase counts: a silence in the warm-up or after the end does not,
    /// and a timeline shorter than the phase is read as far as it goes.
    #[test]
    fn measured_silences_leave_out_the_warm_up_and_the_tail() {
        let bucket_s = workload::client::driver::BUCKET.as_secs_f64();
        // Warm-up of 2 buckets (silent), 3 measured (one silent), 2 after (silent).
        let fine = vec![vec![0], vec![0], vec![1], vec![0], vec![1], vec![0], vec![0]];
        let bucket_ms = bucket_s * 1e3;
        let (per, all) = measured_silences(&fine, 2.0 * bucket_s, 3.0 * bucket_s);
        assert_eq!((per, all), (vec![bucket_ms], bucket_ms));
        assert_eq!(measured_silences(&fine[..3], 2.0 * bucket_s, 3.0 * bucket_s).1, 0.0);
    }

    #[test]
    fn timeline_converts_buckets_to_rates() {
        let t = timeline(&[vec![10, 20], vec![0, 5]], ms(100));
        assert_eq!(t[0].per_partition, vec![100.0, 200.0]);
        assert_eq!(t[0].txn_per_sec, 300.0);
        assert!((t[1].t_s - 0.1).abs() < 1e-9);
    }
}
