//! What the leader's state machine ([`Coordinator`](super::Coordinator)) takes and returns
//! beyond the wire's messages: the clients it answers ([`ClientId`], [`ClientRef`]), what it
//! wants done ([`Output`]), what it reports to the operator ([`Event`], with what told it a
//! node failed: [`Detection`]), a partition's lifecycle ([`Phase`]) and its status for
//! displays ([`PartitionStatus`]), and the bounds it keeps ([`DIGEST_REQUESTS_INFLIGHT_MAX`],
//! [`JOINER_PATIENCE_TIMEOUTS`]).
//!
//! Guarantees: none of these carries state of the machine: they are values, compared and
//! printed; [`Event::is_alarm`] marks the events an operator must see at once.

use std::fmt;

use wire::channel::{CoordinatorToClient, CoordinatorToNode};
use wire::messages::{ClientReply, NodeId, PartitionId, Seq, StateDigest};

use crate::agreement::Divergence;

/// Digest requests (each a full scan of the partition on every replica) one partition may
/// have in flight; past it they are answered [`DigestOutcome::Busy`].
///
/// [`DigestOutcome::Busy`]: wire::messages::DigestOutcome::Busy
pub const DIGEST_REQUESTS_INFLIGHT_MAX: usize = 16;

/// How many failure timeouts of silence a node that only rejoins — it holds a rejoin plan and
/// serves no partition — is given before it is counted failed (docs/design.md §10, "A joiner
/// is not failed for being busy joining"). Its process's death is still seen at once (its
/// liveness tether or its link ends); silence from a live joiner is starvation — at
/// saturation on a shared machine, one of 1 s was measured (`glass failover` with the
/// catch-up policy off) — and counting it failed only starts its copy over.
pub const JOINER_PATIENCE_TIMEOUTS: u64 = 4;

/// A client connection, numbered by the network code.
pub type ClientId = u64;

/// The client of transactions a new leader adopted from its predecessor (docs/design.md
/// §11): their clients were the old leader's, and nothing is answered to this one.
pub const NOBODY: ClientId = ClientId::MAX;

/// Who asked for a transaction: the connection and the client's request id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientRef {
    pub client: ClientId,
    pub request_id: u64,
}

/// What the coordinator wants done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send `msg` to each of `nodes` (encode it once).
    ToNodes { nodes: Vec<NodeId>, msg: CoordinatorToNode },
    /// Answer a client's transaction request (group replies per client into
    /// [`CoordinatorToClient::ClientReplies`]).
    Reply { client: ClientId, reply: ClientReply },
    /// Send `msg` to a client (a [`CoordinatorToClient::DigestReply`]).
    ToClient { client: ClientId, msg: CoordinatorToClient },
    /// Something to report to the operator.
    Event(Event),
}

/// What the coordinator reports. [`Event::is_alarm`] marks those to print loudly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    LoadProgress {
        partition: PartitionId,
        node: NodeId,
        rows_loaded: u64,
        rows_total: u64,
    },
    /// Every live replica loaded the same state; the partition serves.
    PartitionReady {
        partition: PartitionId,
        replicas: Vec<NodeId>,
        digest: StateDigest,
    },
    LoadFailed {
        partition: PartitionId,
        node: NodeId,
        reason: String,
    },
    /// A replica of `partition` on `node` gave its rejoin up (`reason`) while its node stays
    /// connected: it no longer counts as rejoining.
    RejoinGivenUp {
        partition: PartitionId,
        node: NodeId,
        reason: String,
    },
    /// The replicas of a partition disagreed; it is stopped.
    Diverged(Divergence),
    /// A partition stopped for another reason (its replicas did not load in time).
    PartitionStopped {
        partition: PartitionId,
        reason: String,
    },
    /// A node counts as failed: `detection` says what told (its silence, its connection
    /// closing, its own notice, its lag); it was last heard from `silent_ms` before.
    NodeDown {
        node: NodeId,
        silent_ms: u64,
        detection: Detection,
    },
    /// A replica of `partition` has not reported `behind` batches a majority answered, more
    /// than `limits.replica_lag_batches_max`: batches wait for every live replica until it
    /// catches up, and it is failed if the lag lasts (docs/cluster.md, "Agreement").
    ReplicaLagging {
        partition: PartitionId,
        node: NodeId,
        behind: usize,
    },
    /// No live replica of the partition remains.
    PartitionUnavailable {
        partition: PartitionId,
    },
    /// A restarted node is rejoining `partition`, copying it from `source`.
    Rejoining {
        partition: PartitionId,
        node: NodeId,
        source: NodeId,
        from_seq: Seq,
    },
    /// A passive partition's primary failed; `backup` is asked to take over.
    Promoting {
        partition: PartitionId,
        backup: NodeId,
        first_unanswered: Seq,
    },
    /// The backup took over as primary.
    Promoted {
        partition: PartitionId,
        primary: NodeId,
        applied_seq: Seq,
        next_seq: Seq,
    },
    /// A rejoining node is a live replica again: its copy held the batches through
    /// `snapshot_seq`, and `replayed_batches` were sent to the partition after it.
    Rejoined {
        partition: PartitionId,
        node: NodeId,
        snapshot_seq: Seq,
        replayed_batches: u64,
    },
    /// A replica of `partition` (`node`, the first) rejoins: until it caught up the
    /// partition admits `100 − share_pct` percent of the `base_txn_per_s` it admitted in the
    /// second before (docs/design.md §10, "Catching up under load").
    CatchUpBegan {
        partition: PartitionId,
        node: NodeId,
        base_txn_per_s: u64,
        share_pct: u32,
    },
    /// Still catching up `limits.catch_up_deadline_ms` after the plan: the partition gives
    /// up `share_pct` percent of its throughput from now on.
    CatchUpHarder {
        partition: PartitionId,
        share_pct: u32,
    },
    /// The primary's queue of shipments to `backup`, which rejoins `partition`, held `queued`
    /// shipments: the catch-up admits `txn_per_s` from now on, until the pressure eases
    /// (docs/design.md §10, "Catching up under load").
    CatchUpSlowed {
        partition: PartitionId,
        backup: NodeId,
        queued: u32,
        txn_per_s: u64,
    },
    /// No replica of `partition` is rejoining any more (they rejoined, failed, or the
    /// partition stopped): admission is unthrottled again, after `elapsed_ms` in which
    /// `refused_txns` transactions were answered `Busy` by the catch-up policy.
    CatchUpEnded {
        partition: PartitionId,
        elapsed_ms: u64,
        refused_txns: u64,
    },
    /// Full stack: the partition's last primary, restarted, may serve it again from its own
    /// write-ahead log: it recovers, then executes from batch `from_seq`.
    RecoveringFromLog {
        partition: PartitionId,
        node: NodeId,
        from_seq: Seq,
    },
    /// Full stack: a restarted node recovered the partition from its write-ahead log and
    /// serves it again, executing from batch `from_seq`.
    RecoveredFromLog {
        partition: PartitionId,
        node: NodeId,
        from_seq: Seq,
    },
    /// Passive modes: a backup no longer counts after another one was promoted (the new
    /// primary does not ship to it); it comes back by a restart with `--rejoin`.
    BackupDropped {
        partition: PartitionId,
        node: NodeId,
    },
    /// A message from a node that had no effect (late, duplicated, unexpected).
    Ignored {
        node: NodeId,
        what: String,
    },
    /// This coordinator leads `epoch` and takes over: it fences the nodes and asks where each
    /// partition stands (docs/design.md §11).
    TakingOver {
        epoch: u64,
    },
    /// The take-over is done: batches numbered after the furthest replica's follow,
    /// `adopted` batches of the old leader were sent again, and `silent` nodes did not answer
    /// (they count as failed).
    TookOver {
        epoch: u64,
        adopted: usize,
        silent: Vec<NodeId>,
        took_us: u64,
        /// Of which: until every replica's standing was in (the rest levelled the replicas).
        standings_us: u64,
    },
    /// This coordinator no longer leads (a newer epoch exists, or it lost the majority):
    /// whatever it held back is dropped, and it stands by.
    Deposed {
        epoch: u64,
        why: String,
    },
    /// A message from another coordinator of the group that was refused.
    GroupRefused {
        problem: String,
    },
}

/// What told the coordinator that a node failed (docs/cluster.md, "Failure detection").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detection {
    /// Silent for `timeouts.failure_timeout_ms`: the only signal when a machine or the network
    /// dies.
    HeartbeatTimeout,
    /// The node said it was leaving: it closed its connection with the shutdown code (a clean
    /// stop).
    DeathNotice,
    /// Its process is gone: the kernel closed or reset its liveness link, or the transport
    /// lost the connection (`how` says which).
    ConnectionLost { how: String },
    /// It did not read what it was sent (its queue at the coordinator filled up).
    NotReading,
    /// A newer connection of the node replaced this one.
    Replaced,
    /// It did not answer a new leader's take-over (docs/design.md §11).
    TakeOverSilence,
    /// One of its replicas had not reported `behind` batches a majority answered, past the
    /// lag limit (docs/cluster.md, "Agreement").
    Lagging { partition: PartitionId, behind: usize },
}

impl Detection {
    /// A short name for tables and JSON.
    pub fn name(&self) -> &'static str {
        match self {
            Detection::HeartbeatTimeout => "heartbeat-timeout",
            Detection::DeathNotice => "death-notice",
            Detection::ConnectionLost { .. } => "connection-lost",
            Detection::NotReading => "not-reading",
            Detection::Replaced => "replaced",
            Detection::TakeOverSilence => "take-over-silence",
            Detection::Lagging { .. } => "lagging",
        }
    }
}

impl fmt::Display for Detection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Detection::HeartbeatTimeout => write!(f, "heartbeat timeout"),
            Detection::DeathNotice => write!(f, "its death notice"),
            Detection::ConnectionLost { how } => write!(f, "connection lost: {how}"),
            Detection::NotReading => write!(f, "not reading what it is sent"),
            Detection::Replaced => write!(f, "a newer connection"),
            Detection::TakeOverSilence => write!(f, "no answer to the take-over"),
            Detection::Lagging { partition, behind } => {
                write!(f, "lag: {behind} answered batches of partition {partition} not reported")
            }
        }
    }
}

impl Event {
    /// Whether the operator must see this at once (a divergence, a stop, a failure).
    pub fn is_alarm(&self) -> bool {
        matches!(
            self,
            Event::Diverged(_)
                | Event::PartitionStopped { .. }
                | Event::NodeDown { .. }
                | Event::PartitionUnavailable { .. }
                | Event::Promoting { .. }
                | Event::LoadFailed { .. }
                | Event::RejoinGivenUp { .. }
                | Event::BackupDropped { .. }
        )
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::LoadProgress { partition, node, rows_loaded, rows_total } => {
                write!(f, "partition {partition} on node {node}: loaded {rows_loaded} of ~{rows_total} rows")
            }
            Event::PartitionReady { partition, replicas, digest } => {
                write!(f, "partition {partition} ready on nodes {replicas:?} (state digest {digest})")
            }
            Event::LoadFailed { partition, node, reason } => {
                write!(f, "partition {partition} failed to load on node {node}: {reason}")
            }
            Event::RejoinGivenUp { partition, node, reason } => {
                write!(f, "node {node} gave up rejoining partition {partition}: {reason}")
            }
            Event::Diverged(d) => write!(f, "{d}; partition stopped"),
            Event::PartitionStopped { partition, reason } => write!(f, "partition {partition} stopped: {reason}"),
            Event::NodeDown { node, silent_ms, detection } => {
                write!(f, "node {node} failed (detected by {detection}; silent for {silent_ms} ms)")
            }
            Event::PartitionUnavailable { partition } => write!(f, "partition {partition} has no live replica"),
            Event::ReplicaLagging { partition, node, behind } => write!(
                f,
                "node {node} lags on partition {partition}: {behind} batches a majority answered not reported; \
                 batches wait for every replica until it catches up"
            ),
            Event::Rejoining { partition, node, source, from_seq } => write!(
                f,
                "node {node} rejoins partition {partition}: copying it from node {source}, batches from {from_seq} on"
            ),
            Event::Rejoined { partition, node, snapshot_seq, replayed_batches } => write!(
                f,
                "node {node} is a live replica of partition {partition} again (copy as of batch {snapshot_seq}, \
                 then {replayed_batches} batches sent after it)"
            ),
            Event::CatchUpBegan { partition, node, base_txn_per_s, share_pct } => write!(
                f,
                "partition {partition} admits {}% of its {base_txn_per_s} txn/s while node {node} catches up",
                100u32.saturating_sub(*share_pct)
            ),
            Event::CatchUpHarder { partition, share_pct } => write!(
                f,
                "partition {partition} is still catching up past limits.catch_up_deadline_ms: it admits {}% of its \
                 rate before the rejoin",
                100u32.saturating_sub(*share_pct)
            ),
            Event::CatchUpSlowed { partition, backup, queued, txn_per_s } => write!(
                f,
                "partition {partition} admits {txn_per_s} txn/s for now: its primary has {queued} shipments queued \
                 for node {backup}, which catches up"
            ),
            Event::CatchUpEnded { partition, elapsed_ms, refused_txns } => write!(
                f,
                "partition {partition} admits unthrottled again after {elapsed_ms} ms of catch-up \
                 ({refused_txns} transactions answered busy meanwhile)"
            ),
            Event::Promoting { partition, backup, first_unanswered } => write!(
                f,
                "partition {partition}'s primary failed: promoting node {backup} (first unanswered batch {first_unanswered})"
            ),
            Event::Promoted { partition, primary, applied_seq, next_seq } => write!(
                f,
                "node {primary} is partition {partition}'s primary (applied through batch {applied_seq}, executes from {next_seq})"
            ),
            Event::RecoveringFromLog { partition, node, from_seq } => write!(
                f,
                "node {node} recovers partition {partition} from its write-ahead log; it will execute from batch {from_seq}"
            ),
            Event::RecoveredFromLog { partition, node, from_seq } => write!(
                f,
                "node {node} recovered partition {partition} from its write-ahead log; it executes from batch {from_seq}"
            ),
            Event::BackupDropped { partition, node } => write!(
                f,
                "node {node} no longer counts as a backup of partition {partition}: the promoted primary does not \
                 ship to it (restart it with --rejoin)"
            ),
            Event::Ignored { node, what } => write!(f, "ignored from node {node}: {what}"),
            Event::TakingOver { epoch } => write!(f, "leading epoch {epoch}: taking over from the replicas' standing"),
            Event::TookOver { epoch, adopted, silent, took_us, standings_us } => write!(
                f,
                "took over epoch {epoch} in {} ms ({} ms until every standing was in): {adopted} batches of \
                 the previous leader adopted; silent nodes {silent:?}",
                took_us / 1_000,
                standings_us / 1_000
            ),
            Event::Deposed { epoch, why } => write!(f, "no longer leading epoch {epoch}: {why}"),
            Event::GroupRefused { problem } => write!(f, "coordinator group: {problem}"),
        }
    }
}

/// A partition's lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for every live replica to report `Ready`.
    Loading,
    Serving,
    /// Stopped for good (divergence, load timeout).
    Stopped {
        reason: String,
    },
    /// No live replica.
    Unavailable,
    /// Passive modes: the primary failed and `backup` is being promoted; requests wait
    /// outside (answered "not ready") until it answers.
    Promoting {
        backup: NodeId,
    },
    /// Full stack: the partition's last primary, restarted, runs restart recovery from its
    /// log; requests are answered "not ready" until it reports it is done.
    Recovering {
        node: NodeId,
    },
}

/// A partition's state, for status displays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStatus {
    pub partition: PartitionId,
    pub phase: Phase,
    pub live_replicas: Vec<NodeId>,
    pub inflight_txns: usize,
    /// Batches sent so far.
    pub batches_sent: Seq,
    /// Every batch through this one is decided — answered, or given up "outcome unknown"
    /// (under `majority`, some replicas may not have reported it yet).
    pub decided_through: Seq,
}
