//! The coordinator's state machine: it takes client requests, replica messages and clock
//! ticks, and returns what to send. It owns timestamp ordering ([`TimestampClock`]), routing
//! ([`Router`]), per-partition batching and backpressure ([`Sequencer`]), result agreement
//! ([`Agreement`]), the partitions' lifecycle (loading → serving → stopped or unavailable) and
//! failure detection by heartbeats. It performs no I/O and reads no clock: every call takes
//! `now_us`, microseconds on a clock the caller keeps monotonic and aligned with the Unix epoch
//! (its milliseconds become timestamps).
//!
//! Guarantees:
//! - a client is answered `Committed`/`Aborted`/`Failed` only after every live *executing*
//!   replica of the transaction's partition executed it and all results agreed — in
//!   active-active every replica executes; in the passive modes only the primary (the first
//!   replica listed) does, and its node answers only once its backups hold the log records
//!   (`shipping = "sync"`); every request gets exactly one reply (the replies of a stopped
//!   partition included);
//! - a partition serves only once all its live replicas — backups included — loaded the same
//!   state (equal load digests); a disagreement, at load or later, stops it for good and is reported as
//!   [`Event::Diverged`];
//! - each partition has at most `inflight_txns_max` transactions in flight; beyond, requests
//!   are answered `Busy` at once and nothing is kept;
//! - while a replica of a partition rejoins, the partition admits only part of what it did
//!   before ([`crate::catch_up`], `limits.catch_up_share_pct`); past it, requests are
//!   answered `Busy` at once and nothing is kept;
//! - reads (OrderStatus, StockLevel) and state digests go through the same ordered path;
//! - a transaction spanning partitions (`engine::distributed`, Calvin style) gets one
//!   timestamp and is admitted on every partition it touches or on none (a refusal or `Busy`
//!   of one refuses it whole); its home piece and remote pieces ride in each partition's
//!   batches; remote pieces' outcomes ([`NodeToCoordinator::PieceReads`]) are forwarded to the home
//!   partition's executing replicas and kept until every replica that may still run the home
//!   piece ran it (a promoted backup or a rejoining replica gets them again); the client is
//!   answered once *every* partition decided its piece — committed only if all did, "outcome
//!   unknown" if a partition's answer was lost — so a commit is acknowledged only when it is
//!   as durable on every partition as a single-partition one is on its own. A partition lost
//!   for good (no live replica) aborts the home pieces still waiting for it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use wire::channel::{ChannelMessage, ClientToCoordinator, CoordinatorToClient, CoordinatorToNode, NodeToCoordinator};
use wire::config::{AgreementRule, ClusterConfig, Mode};
use wire::messages::{
    ClientReply, ClientRequest, ClientResult, CoordinatorId, DigestOutcome, LoadState, NodeId, Part, PartitionId,
    PieceOutcome, PieceReads, Rejection, Results, Seq, StateDigest, Timestamp, TxnOutcome,
};

mod resume;

pub use resume::{PartitionResume, Resumed};

use crate::agreement::{Agreement, Divergence, DivergenceKind, Ignored, Quorum, Verdict};
use crate::catch_up::{CatchUp, CatchUpPolicy};
use crate::error::{CoordinatorError, ResumeRefused};
use crate::group::{PartitionView, ViewState};
use crate::router::{Route, Router};
use crate::sequencer::{Busy, Sequencer, SequencerLimits};
use crate::timestamp::TimestampClock;

/// Digest requests (each a full scan of the partition on every replica) one partition may
/// have in flight; past it they are answered [`DigestOutcome::Busy`].
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
            Event::TookOver { epoch, adopted, silent, took_us } => write!(
                f,
                "took over epoch {epoch} in {} ms: {adopted} batches of the previous leader adopted; \
                 silent nodes {silent:?}",
                took_us / 1_000
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
}

#[derive(Debug)]
struct Partition {
    id: PartitionId,
    phase: Phase,
    sequencer: Sequencer,
    /// Tags of the open batch's transactions, in its order.
    open_tags: Vec<ClientRef>,
    agreement: Agreement<ClientRef>,
    /// How many agreeing replicas answer a batch (`agreement` in cluster.toml).
    quorum: Quorum,
    /// Answered batches a replica may leave unreported before it is failed.
    lag_batches_max: usize,
    /// Replicas lagging past `replica_lag_batches_max` behind a majority's answers, since
    /// when (docs/cluster.md, "Agreement").
    lagging_since: BTreeMap<NodeId, u64>,
    /// How the partition replicates, with the state only that way needs.
    replication: Replication,
    /// Nodes rejoining, from the batch `Seq` on: they count once they report `Rejoined`.
    /// In active-active they receive every batch from the `Seq` on; in the passive modes the
    /// primary ships to them instead.
    joining: Vec<(NodeId, Seq)>,
    /// Nodes that asked to rejoin while a promotion or a restart recovery was under way:
    /// answered once it ends, with a plan from the partition as it then is. (Refused, a
    /// restarted node gave its partition up for good, and with every other partition's only
    /// replica elsewhere nothing could heal it: found by `glass sim --mode full-stack --seed
    /// 5639`.)
    deferred_rejoins: Vec<NodeId>,
    /// Its admitted rate, and the throttle while a replica of it catches up.
    catch_up: CatchUp,
    /// Load digests of replicas that reported `Ready`.
    loaded: BTreeMap<NodeId, StateDigest>,
    /// Digest requests waiting for batch `seq`.
    digest_waiters: BTreeMap<Seq, Vec<ClientRef>>,
    /// Multi-partition transactions whose home piece runs here, by timestamp: the batch it
    /// rides in and the remote pieces' outcomes received, kept for executors that start
    /// later (a promoted backup, a rejoining replica).
    piece_reads: BTreeMap<Timestamp, HeldReads>,
    /// Remote pieces decided here since the coordinator last joined them (see
    /// [`Coordinator::settle`]).
    pieces_done: Vec<(ClientRef, Timestamp)>,
}

/// How a partition replicates (`wire::config::Mode`), with the state only that way needs.
#[derive(Debug)]
enum Replication {
    /// Every live replica executes every batch.
    ActiveActive {
        /// Replicas rejoining or just rejoined — they execute batches sent before they
        /// counted, which may be decided without them — with the last batch they executed
        /// (or copied) and the last batch sent before they counted (`Seq::MAX` while
        /// rejoining): piece outcomes they may still need are kept until they reach it.
        catching_up: BTreeMap<NodeId, (Seq, Seq)>,
    },
    /// Active-passive or full stack: the primary (the only replica in the agreement)
    /// executes and ships its log to the backups.
    Passive(Passive),
}

/// What a passive partition's primary ships to its backups (docs/design.md, "The three modes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShippedLogKind {
    /// Active-passive: the lean kernel's redo records.
    Redo,
    /// Full stack: the conventional stack's write-ahead log, from which the last primary
    /// alone may bring an unavailable partition back by restart recovery.
    Wal,
}

/// A passive partition's replication state.
#[derive(Debug)]
struct Passive {
    /// What the primary ships.
    log: ShippedLogKind,
    /// The live backups (they receive log records from the primary, not batches from here).
    backups: Vec<NodeId>,
    /// Backups that rejoined, each with the first batch sent after the membership naming it:
    /// the primary waits for them (sync shipping) once that membership reached it, which the
    /// primary's answer to that batch proves — only then may one be promoted. Promoting one
    /// before would lose what the primary acknowledged without waiting for it. (Found by
    /// `glass sim --mode active-passive --shipping sync --seed 121`.)
    confirming: Vec<(NodeId, Seq)>,
    /// The batches sent to the primary and not yet answered, kept so a promoted backup can
    /// execute those it never received.
    unanswered: std::collections::VecDeque<wire::messages::Batch>,
    /// The last batch each backup reported applied ([`NodeToCoordinator::BackupApplied`]).
    backup_applied: BTreeMap<NodeId, Seq>,
    /// The last executing replica, once none is left (the partition is unavailable): in
    /// full-stack mode its write-ahead log holds every acknowledged transaction, so it alone
    /// may bring the partition back by restart recovery.
    last_primary: Option<NodeId>,
    /// Full stack: the batches sent to the last executing replica that it never answered
    /// (their clients were told "outcome unknown"), kept until a replica that came back from
    /// its log reports executing them. Restart recovery keeps what of them took effect; the
    /// rest — a multi-partition transaction's home piece parked for its remote reads, a batch
    /// lost on a broken link — would be half of a transaction whose other partitions
    /// committed theirs. They are replayed to the recovered replica, which skips what its log
    /// shows committed (docs/design.md §10). (Found by `glass sim --mode full-stack --seed
    /// 85`: a Payment's customer updated, its HISTORY row never written.)
    lost: std::collections::VecDeque<wire::messages::Batch>,
}

impl Passive {
    /// The last executing replica failed: its unanswered batches are lost to it — kept for a
    /// replay in full-stack mode, dropped in active-passive (no replica can come back from a
    /// log there).
    fn lose_unanswered(&mut self) {
        match self.log {
            ShippedLogKind::Wal => self.lost.extend(self.unanswered.drain(..)),
            ShippedLogKind::Redo => self.unanswered.clear(),
        }
    }

    /// Whether the partition, unavailable, may come back from its last primary's log (and
    /// with it the pieces its failure left in doubt).
    fn may_resume(&self) -> bool {
        self.log == ShippedLogKind::Wal && self.last_primary.is_some()
    }
}

/// The remote pieces' outcomes of one multi-partition transaction, kept at its home partition.
#[derive(Debug)]
struct HeldReads {
    /// The home partition's batch the home piece rides in.
    seq: Seq,
    /// Who asked, the transaction, and the batch each remote piece rides in.
    tag: ClientRef,
    input: engine::procedures::TxnInput,
    remotes: Vec<(PartitionId, Seq)>,
    outcomes: Vec<(PartitionId, PieceOutcome)>,
}

impl HeldReads {
    /// Whether partition `q`'s piece's outcome arrived.
    fn has(&self, q: PartitionId) -> bool {
        self.outcomes.iter().any(|(from, _)| *from == q)
    }
}

/// A multi-partition transaction admitted and not yet answered.
#[derive(Debug)]
struct MultiTxn {
    ts: Timestamp,
    home: PartitionId,
    remotes: Vec<PartitionId>,
    /// Each partition's answer for its piece, as they come (`None`: a remote piece done).
    answers: Vec<Option<ClientResult>>,
    /// Remote partitions lost for good before their piece's outcome reached the home
    /// partition (whose piece was then told to abort).
    lost: Vec<PartitionId>,
}

#[derive(Debug)]
struct NodeLiveness {
    last_heard_us: u64,
    live: bool,
}

/// The coordinator.
#[derive(Debug)]
pub struct Coordinator {
    clock: TimestampClock,
    router: Router,
    partitions: BTreeMap<PartitionId, Partition>,
    nodes: BTreeMap<NodeId, NodeLiveness>,
    heartbeat_us: u64,
    failure_timeout_us: u64,
    load_deadline_us: u64,
    next_heartbeat_us: u64,
    membership_epoch: u64,
    last_ts: Option<Timestamp>,
    /// Multi-partition transactions admitted and not yet answered.
    multi: HashMap<ClientRef, MultiTxn>,
    /// The nodes each partition's replicas are placed on in `cluster.toml`.
    placement: BTreeMap<PartitionId, Vec<NodeId>>,
}

impl Coordinator {
    /// A coordinator for `config` (validated here for this build), started at `now_us`; every
    /// partition starts loading, and every node counts as heard from at `now_us`.
    pub fn new(config: &ClusterConfig, now_us: u64) -> Result<Coordinator, CoordinatorError> {
        Coordinator::new_as(config, config.coordinator().id, now_us)
    }

    /// [`Coordinator::new`] for coordinator `me` of the configuration (its id goes into every
    /// timestamp it issues).
    pub fn new_as(config: &ClusterConfig, me: CoordinatorId, now_us: u64) -> Result<Coordinator, CoordinatorError> {
        config.validate()?;
        let limits = SequencerLimits::from_config(&config.limits);
        let catch_up = CatchUpPolicy::from_config(&config.limits);
        let passive = config.mode().is_passive();
        let log = if config.mode() == Mode::FullStack { ShippedLogKind::Wal } else { ShippedLogKind::Redo };
        let partitions = config
            .partitions
            .iter()
            .map(|p| {
                let executing = if passive { &p.replicas[..1] } else { &p.replicas[..] };
                let quorum = match config.agreement {
                    AgreementRule::All => Quorum::All,
                    AgreementRule::Majority => Quorum::Majority { replicas: p.replicas.len() },
                };
                let lag_batches_max = config.limits.replica_lag_batches_max as usize;
                let partition = Partition {
                    id: p.id,
                    phase: Phase::Loading,
                    sequencer: Sequencer::new(p.id, limits),
                    open_tags: Vec::with_capacity(limits.batch_txns_max),
                    agreement: Agreement::new(p.id, executing.iter().copied()).with_quorum(quorum, lag_batches_max),
                    quorum,
                    lag_batches_max,
                    lagging_since: BTreeMap::new(),
                    replication: match passive {
                        true => Replication::Passive(Passive {
                            log,
                            backups: p.replicas[1..].to_vec(),
                            confirming: Vec::new(),
                            unanswered: Default::default(),
                            backup_applied: BTreeMap::new(),
                            last_primary: None,
                            lost: Default::default(),
                        }),
                        false => Replication::ActiveActive { catching_up: BTreeMap::new() },
                    },
                    joining: Vec::new(),
                    deferred_rejoins: Vec::new(),
                    catch_up: CatchUp::new(catch_up),
                    loaded: BTreeMap::new(),
                    digest_waiters: BTreeMap::new(),
                    piece_reads: BTreeMap::new(),
                    pieces_done: Vec::new(),
                };
                (p.id, partition)
            })
            .collect();
        // A spare node (placed nowhere) counts once it asks to join a partition.
        let nodes = config
            .nodes
            .iter()
            .map(|n| {
                let placed = config.partitions_on_node(n.id).next().is_some();
                (n.id, NodeLiveness { last_heard_us: now_us, live: placed })
            })
            .collect();
        let t = &config.timeouts;
        Ok(Coordinator {
            clock: TimestampClock::new(me),
            router: Router::new(config),
            partitions,
            nodes,
            heartbeat_us: t.heartbeat_ms * 1_000,
            failure_timeout_us: t.failure_timeout_ms * 1_000,
            load_deadline_us: now_us.saturating_add(t.load_timeout_s * 1_000_000),
            next_heartbeat_us: now_us,
            membership_epoch: 0,
            last_ts: None,
            multi: HashMap::new(),
            placement: config.partitions.iter().map(|p| (p.id, p.replicas.clone())).collect(),
        })
    }

    /// A client's transaction request.
    pub fn on_client_request(&mut self, client: ClientId, request: ClientRequest, now_us: u64) -> Vec<Output> {
        let out = self.on_client_request_unsettled(client, request, now_us);
        self.settle(out)
    }

    fn on_client_request_unsettled(&mut self, client: ClientId, request: ClientRequest, now_us: u64) -> Vec<Output> {
        let mut out = Vec::new();
        let tag = ClientRef { client, request_id: request.request_id };
        let reply = |result| Output::Reply { client, reply: ClientReply { request_id: request.request_id, result } };
        let pid = match self.router.route(&request.input) {
            Ok(Route { home, remotes }) if remotes.is_empty() => home,
            Ok(route) => return self.admit_multi(tag, request.input, route, now_us),
            Err(e) => return vec![reply(ClientResult::Rejected(e.into()))],
        };
        let p = self.partitions.get_mut(&pid).expect("the router only names configured partitions");
        if let Some(rejection) = p.refusal() {
            return vec![reply(ClientResult::Rejected(rejection))];
        }
        if !p.catch_up.allows(now_us) {
            return vec![reply(ClientResult::Busy { partition: pid })];
        }
        let ts = self.clock.next(now_us / 1_000);
        match p.sequencer.admit(ts, request.input, now_us) {
            Err(Busy) => return vec![reply(ClientResult::Busy { partition: pid })],
            Ok(closed) => {
                p.catch_up.admitted(now_us);
                self.last_ts = Some(ts);
                p.open_tags.push(tag);
                if let Some(batch) = closed {
                    p.send(batch, &mut out);
                }
            }
        }
        out
    }

    /// A multi-partition transaction: one timestamp, its home piece admitted on `route.home`
    /// and a remote piece on each other partition — on all of them or on none.
    fn admit_multi(
        &mut self,
        tag: ClientRef,
        input: engine::procedures::TxnInput,
        route: Route,
        now_us: u64,
    ) -> Vec<Output> {
        let reply =
            |result| Output::Reply { client: tag.client, reply: ClientReply { request_id: tag.request_id, result } };
        if self.multi.contains_key(&tag) {
            let problem = format!("request id {} is already in flight", tag.request_id);
            return vec![reply(ClientResult::Rejected(Rejection::InvalidInput { problem }))];
        }
        let Ok(remotes) = u8::try_from(route.remotes.len()) else {
            let problem = "a transaction touching more than 255 partitions".to_string();
            return vec![reply(ClientResult::Rejected(Rejection::InvalidInput { problem }))];
        };
        for pid in std::iter::once(route.home).chain(route.remotes.iter().copied()) {
            let p = self.partitions.get_mut(&pid).expect("the router only names configured partitions");
            if let Some(rejection) = p.refusal() {
                return vec![reply(ClientResult::Rejected(rejection))];
            }
            if !p.sequencer.has_room() || !p.catch_up.allows(now_us) {
                return vec![reply(ClientResult::Busy { partition: pid })];
            }
        }
        let ts = self.clock.next(now_us / 1_000);
        self.last_ts = Some(ts);
        let mut out = Vec::new();
        let remote_seqs: Vec<(PartitionId, Seq)> =
            route.remotes.iter().map(|q| (*q, self.partitions[q].sequencer.next_seq())).collect();
        let parts = std::iter::once((route.home, Part::Home { remotes }))
            .chain(route.remotes.iter().map(|&r| (r, Part::Remote { home: route.home })));
        for (pid, part) in parts {
            let p = self.partitions.get_mut(&pid).expect("the router only names configured partitions");
            if let Part::Home { .. } = part {
                let seq = p.sequencer.next_seq();
                let remotes = remote_seqs.clone();
                p.piece_reads.insert(ts, HeldReads { seq, tag, input, remotes, outcomes: Vec::new() });
            }
            let closed = p.sequencer.admit_part(ts, input, part, now_us).expect("room checked above");
            p.catch_up.admitted(now_us);
            p.open_tags.push(tag);
            if let Some(batch) = closed {
                p.send(batch, &mut out);
            }
        }
        let answers = Vec::with_capacity(1 + route.remotes.len());
        let m = MultiTxn { ts, home: route.home, remotes: route.remotes, answers, lost: Vec::new() };
        self.multi.insert(tag, m);
        out
    }

    /// A message from client `client`: its transaction requests or a digest request. Status
    /// requests and shutdowns are the network code's (they concern the process, not the
    /// state machine): nothing here.
    pub fn on_client_message(&mut self, client: ClientId, msg: ClientToCoordinator, now_us: u64) -> Vec<Output> {
        match msg {
            ClientToCoordinator::ClientRequests(requests) => {
                let mut out = Vec::new();
                for request in requests {
                    out.extend(self.on_client_request(client, request, now_us));
                }
                out
            }
            ClientToCoordinator::DigestRequest { request_id, partition } => {
                self.on_digest_request(client, request_id, partition, now_us)
            }
            ClientToCoordinator::StatusRequest { .. } | ClientToCoordinator::Shutdown { .. } => Vec::new(),
        }
    }

    /// A client's request for the partition's state digests: answered once every live replica
    /// digested its state after the same batch.
    pub fn on_digest_request(
        &mut self,
        client: ClientId,
        request_id: u64,
        partition: PartitionId,
        _now_us: u64,
    ) -> Vec<Output> {
        let reject = |rejection| {
            vec![Output::ToClient {
                client,
                msg: CoordinatorToClient::DigestReply {
                    request_id,
                    partition,
                    outcome: DigestOutcome::Rejected(rejection),
                },
            }]
        };
        let Some(p) = self.partitions.get_mut(&partition) else {
            return reject(Rejection::InvalidInput { problem: format!("no partition {partition}") });
        };
        if let Some(rejection) = p.refusal() {
            return reject(rejection);
        }
        if p.digest_waiters.values().map(Vec::len).sum::<usize>() >= DIGEST_REQUESTS_INFLIGHT_MAX {
            let msg = CoordinatorToClient::DigestReply { request_id, partition, outcome: DigestOutcome::Busy };
            return vec![Output::ToClient { client, msg }];
        }
        let mut out = Vec::new();
        let batch = p.sequencer.close_with_digest();
        p.digest_waiters.entry(batch.seq).or_default().push(ClientRef { client, request_id });
        p.send(batch, &mut out);
        out
    }

    /// A message from node `from` (the network code authenticated it): results, load status,
    /// heartbeats, rejoin and promotion progress, piece outcomes.
    pub fn on_node_message(&mut self, from: NodeId, msg: NodeToCoordinator, now_us: u64) -> Vec<Output> {
        let out = self.on_node_message_unsettled(from, msg, now_us);
        self.settle_watching(out, now_us)
    }

    fn on_node_message_unsettled(&mut self, from: NodeId, msg: NodeToCoordinator, now_us: u64) -> Vec<Output> {
        let mut out = Vec::new();
        let Some(node) = self.nodes.get_mut(&from) else {
            out.push(Output::Event(Event::Ignored { node: from, what: "a node not in cluster.toml".into() }));
            return out;
        };
        if !node.live {
            if let NodeToCoordinator::RejoinRequest { partition } = msg {
                // A restarted node: it counts as alive again, and may rejoin.
                node.live = true;
                node.last_heard_us = now_us;
                self.on_rejoin_request(from, partition, &mut out);
                return out;
            }
            out.push(Output::Event(Event::Ignored { node: from, what: "a message from a failed node".into() }));
            if let NodeToCoordinator::Rejoined { partition, .. } = msg {
                self.tell_left_out(from, partition, &mut out);
            }
            return out;
        }
        node.last_heard_us = node.last_heard_us.max(now_us);
        match msg {
            NodeToCoordinator::RejoinRequest { partition } => self.on_rejoin_request(from, partition, &mut out),
            NodeToCoordinator::Rejoined { partition, snapshot_seq } => {
                self.on_rejoined(from, partition, snapshot_seq, &mut out)
            }
            NodeToCoordinator::Promoted { partition, applied_seq, next_seq } => {
                if let Some(p) = self.partitions.get_mut(&partition) {
                    p.on_promoted(from, applied_seq, next_seq, &mut self.membership_epoch, &mut out);
                    if p.phase == Phase::Serving {
                        self.after_promotion(partition, applied_seq, next_seq, &mut out);
                    }
                }
            }
            NodeToCoordinator::Results(results) => self.on_results(from, results, &mut out),
            NodeToCoordinator::StateDigest { partition, seq, digest } => {
                if let Some(p) = self.partitions.get_mut(&partition) {
                    match p.agreement.on_state_digest(from, seq, digest) {
                        Ok(verdicts) => {
                            for v in verdicts {
                                p.apply(v, &mut out);
                            }
                        }
                        // Nobody waits for it (a joiner's, or a request a new leader never saw).
                        Err(Ignored::Stopped | Ignored::NotExpected { .. }) => {}
                        Err(e) => out.push(Output::Event(Event::Ignored { node: from, what: e.to_string() })),
                    }
                }
            }
            NodeToCoordinator::PieceReads(reads) => {
                self.deliver_reads(reads, &mut out);
            }
            NodeToCoordinator::LoadStatus { partition, state } => self.on_load_status(from, partition, state, &mut out),
            NodeToCoordinator::Heartbeat { .. } => {}
            // Take-over reports and fencing concern the coordinator group (docs/design.md
            // §11), which handles them before this machine sees anything.
            m @ (NodeToCoordinator::Standing { .. }
            | NodeToCoordinator::HeldBatches { .. }
            | NodeToCoordinator::Fenced { .. }) => out.push(Output::Event(Event::Ignored {
                node: from,
                what: format!("a {} outside a take-over", m.name()),
            })),
            NodeToCoordinator::ShippingBehind { partition, backup, queued } => {
                // Only the partition's primary (in a passive mode, its first live replica) ships.
                let p = self
                    .partitions
                    .get_mut(&partition)
                    .filter(|p| p.passive().is_some() && p.agreement.live().first() == Some(&from));
                if let Some(event) = p.and_then(|p| p.catch_up.slow_down(partition, backup, queued, now_us)) {
                    out.push(Output::Event(event));
                }
            }
            NodeToCoordinator::BackupApplied { partition, seq } => {
                let passive = self.partitions.get_mut(&partition).and_then(Partition::passive_mut);
                if let Some(s) =
                    passive.filter(|s| s.backups.contains(&from) || s.confirming.iter().any(|c| c.0 == from))
                {
                    let applied = s.backup_applied.entry(from).or_default();
                    *applied = (*applied).max(seq);
                }
            }
        }
        out
    }

    /// Node `node` is gone before its silence timed out (`detection` says how the network
    /// code knows: a connection closed, reset or replaced, a death notice): it counts as
    /// failed at once.
    pub fn on_node_lost(&mut self, node: NodeId, detection: Detection, now_us: u64) -> Vec<Output> {
        let out = self.on_node_lost_unsettled(node, detection, now_us);
        self.settle_watching(out, now_us)
    }

    fn on_node_lost_unsettled(&mut self, node: NodeId, detection: Detection, now_us: u64) -> Vec<Output> {
        let mut out = Vec::new();
        self.node_failed(node, detection, now_us, &mut out);
        out
    }

    /// Declares node `node` failed, if it still counts as live.
    fn node_failed(&mut self, node: NodeId, detection: Detection, now_us: u64, out: &mut Vec<Output>) {
        if let Some(n) = self.nodes.get(&node).filter(|n| n.live) {
            let silent_ms = now_us.saturating_sub(n.last_heard_us) / 1_000;
            self.node_down(node, silent_ms, detection, out);
        }
    }

    /// Time passed: closes batches whose wait is over, sends heartbeats, declares silent nodes
    /// failed and stops partitions that did not load in time.
    pub fn tick(&mut self, now_us: u64) -> Vec<Output> {
        let out = self.tick_unsettled(now_us);
        self.settle_watching(out, now_us)
    }

    fn tick_unsettled(&mut self, now_us: u64) -> Vec<Output> {
        let mut out = Vec::new();
        for p in self.partitions.values_mut() {
            if p.phase == Phase::Serving {
                if let Some(batch) = p.sequencer.tick(now_us) {
                    p.send(batch, &mut out);
                }
            }
        }
        if now_us >= self.next_heartbeat_us {
            let nodes: Vec<NodeId> = self.live_nodes().collect();
            if !nodes.is_empty() {
                out.push(Output::ToNodes { nodes, msg: CoordinatorToNode::Heartbeat { now_ms: now_us / 1_000 } });
            }
            self.next_heartbeat_us = now_us + self.heartbeat_us;
        }
        let silent: Vec<(NodeId, u64)> = self
            .nodes
            .iter()
            .filter(|(&id, n)| n.live && now_us.saturating_sub(n.last_heard_us) >= self.silence_allowed_us(id))
            .map(|(&id, n)| (id, (now_us - n.last_heard_us) / 1_000))
            .collect();
        for (node, silent_ms) in silent {
            self.node_down(node, silent_ms, Detection::HeartbeatTimeout, &mut out);
        }
        self.watch_lagging(now_us, &mut out);
        if now_us >= self.load_deadline_us {
            for p in self.partitions.values_mut().filter(|p| p.phase == Phase::Loading) {
                let waiting: Vec<NodeId> = p.members().filter(|n| !p.loaded.contains_key(n)).collect();
                let reason = format!("replicas on nodes {waiting:?} did not load within timeouts.load_timeout_s");
                p.stop(reason.clone(), &mut out);
                out.push(Output::Event(Event::PartitionStopped { partition: p.id, reason }));
            }
        }
        out
    }

    /// How long `node` may be silent before it is counted failed: the failure timeout, or
    /// [`JOINER_PATIENCE_TIMEOUTS`] of them for a node that only rejoins.
    fn silence_allowed_us(&self, node: NodeId) -> u64 {
        let joining = self.partitions.values().any(|p| p.joining.iter().any(|(n, _)| *n == node));
        let serving = self.partitions.values().any(|p| p.members().any(|n| n == node));
        if joining && !serving {
            JOINER_PATIENCE_TIMEOUTS * self.failure_timeout_us
        } else {
            self.failure_timeout_us
        }
    }

    /// When [`Coordinator::tick`] must next be called.
    pub fn next_deadline_us(&self) -> Option<u64> {
        let batches =
            self.partitions.values().filter(|p| p.phase == Phase::Serving).filter_map(|p| p.sequencer.deadline_us());
        let failures =
            self.nodes.iter().filter(|(_, n)| n.live).map(|(&id, n)| n.last_heard_us + self.silence_allowed_us(id));
        let load = self.partitions.values().any(|p| p.phase == Phase::Loading).then_some(self.load_deadline_us);
        let lagging =
            self.partitions.values().flat_map(|p| p.lagging_since.values().map(|&t| t + self.failure_timeout_us));
        let catch_ups = self.partitions.values().filter_map(|p| p.catch_up.deadline_us());
        batches.chain(failures).chain(load).chain(lagging).chain(catch_ups).chain([self.next_heartbeat_us]).min()
    }

    /// Every partition's membership as the coordinator group records it (docs/design.md §11):
    /// its live replicas — in the passive modes the primary, or the backup being promoted,
    /// first — and where it is in its lifecycle.
    pub fn views(&self) -> Vec<PartitionView> {
        self.partitions
            .values()
            .map(|p| {
                let live = |n: &NodeId| self.nodes.get(n).is_some_and(|l| l.live);
                let mut replicas: Vec<NodeId> = p.members().filter(live).collect();
                let state = match &p.phase {
                    Phase::Loading => ViewState::Loading,
                    Phase::Serving => ViewState::Serving,
                    Phase::Promoting { backup } => {
                        replicas.retain(|n| n != backup);
                        replicas.insert(0, *backup);
                        ViewState::Serving
                    }
                    Phase::Stopped { reason } => ViewState::Stopped { reason: reason.clone() },
                    Phase::Unavailable => {
                        ViewState::Unavailable { last_primary: p.passive().and_then(|s| s.last_primary) }
                    }
                    Phase::Recovering { node } => {
                        replicas.clear();
                        ViewState::Unavailable { last_primary: Some(*node) }
                    }
                };
                PartitionView { partition: p.id, replicas, state }
            })
            .collect()
    }

    /// The current membership of every partition with a replica placed on `node`, as
    /// `Membership` messages (a node finding itself outside one rejoins: docs/design.md §11).
    pub fn memberships_for(&self, node: NodeId) -> Vec<CoordinatorToNode> {
        self.partitions
            .values()
            .filter(|p| {
                self.placement.get(&p.id).is_some_and(|r| r.contains(&node))
                    || p.members().any(|n| n == node)
                    || p.joining.iter().any(|(n, _)| *n == node)
            })
            // An unavailable partition's membership is empty: a replica of it that still
            // serves was its last, and rejoins (in full-stack mode, from its own log).
            .filter(|p| {
                matches!(p.phase, Phase::Serving | Phase::Loading | Phase::Promoting { .. } | Phase::Unavailable)
            })
            .map(|p| CoordinatorToNode::Membership {
                partition: p.id,
                epoch: self.membership_epoch,
                live: if p.phase == Phase::Unavailable { Vec::new() } else { p.members().collect() },
            })
            .collect()
    }

    /// Every partition's state.
    pub fn status(&self) -> Vec<PartitionStatus> {
        self.partitions
            .values()
            .map(|p| PartitionStatus {
                partition: p.id,
                phase: p.phase.clone(),
                live_replicas: p.members().collect(),
                inflight_txns: p.sequencer.inflight_txns(),
                batches_sent: p.sequencer.next_seq() - 1,
            })
            .collect()
    }

    /// The last timestamp issued (for a restart to resume after).
    pub fn last_timestamp(&self) -> Option<Timestamp> {
        self.last_ts
    }

    /// Whether node `node` counts as alive.
    pub fn is_node_live(&self, node: NodeId) -> bool {
        self.nodes.get(&node).is_some_and(|n| n.live)
    }

    fn live_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.iter().filter(|(_, n)| n.live).map(|(&id, _)| id)
    }

    fn on_results(&mut self, from: NodeId, results: Results, out: &mut Vec<Output>) {
        let Some(p) = self.partitions.get_mut(&results.partition) else {
            out.push(Output::Event(Event::Ignored {
                node: from,
                what: format!("results for unknown partition {}", results.partition),
            }));
            return;
        };
        if let Some((done, _)) = p.catching_up_mut().and_then(|c| c.get_mut(&from)) {
            *done = (*done).max(results.seq);
        }
        if let Some(s) = p.passive_mut().filter(|s| s.lost.front().is_some_and(|b| b.seq <= results.seq)) {
            // A replica back from its log executed the lost batches up to this one (in order):
            // their clients were answered already.
            let replayed = s.lost.iter().any(|b| b.seq == results.seq);
            while s.lost.front().is_some_and(|b| b.seq <= results.seq) {
                s.lost.pop_front();
            }
            if replayed {
                return;
            }
        }
        if p.joining.iter().any(|(n, from_seq)| *n == from && results.seq >= *from_seq) {
            // A rejoining replica's results for a batch it held: kept, not waited for.
            if let Err(e) = p.agreement.on_joiner_results(from, results) {
                out.push(Output::Event(Event::Ignored { node: from, what: e.to_string() }));
            }
            return;
        }
        match p.agreement.on_results(from, results) {
            Ok(verdicts) => {
                for v in verdicts {
                    p.apply(v, out);
                }
                p.prune_reads();
            }
            Err(Ignored::Stopped | Ignored::NotExpected { .. }) => {}
            Err(e) => out.push(Output::Event(Event::Ignored { node: from, what: e.to_string() })),
        }
    }

    /// A restarted node asks to rejoin `partition`: in active-active a live replica will copy
    /// its state to it, and it gets every batch from the next one on; in the passive modes
    /// the primary is told to ship to it from the next batch on, and it starts from a copy of
    /// the primary's state (active-passive) or from its own log, cut and recovered, plus the
    /// primary's log base (full stack). A full-stack partition with no live replica comes
    /// back from its last primary's log instead ([`Partition::resume_from_log`]).
    fn on_rejoin_request(&mut self, from: NodeId, partition: PartitionId, out: &mut Vec<Output>) {
        let refuse = |reason: String| Output::ToNodes {
            nodes: vec![from],
            msg: CoordinatorToNode::RejoinRefused { partition, reason },
        };
        let Some(p) = self.partitions.get_mut(&partition) else {
            out.push(refuse(format!("no partition {partition}")));
            return;
        };
        if p.passive().is_some_and(|s| s.log == ShippedLogKind::Wal) && p.phase == Phase::Unavailable {
            self.membership_epoch += 1;
            let epoch = self.membership_epoch;
            let p = self.partitions.get_mut(&partition).expect("looked up above");
            match p.resume_from_log(from, epoch, out) {
                Ok(()) => {}
                Err(refused) => out.push(refuse(refused.to_string())),
            }
            return;
        }
        if let Phase::Promoting { backup: n } | Phase::Recovering { node: n } = p.phase {
            if n != from {
                if !p.deferred_rejoins.contains(&from) {
                    p.deferred_rejoins.push(from);
                }
                return;
            }
        }
        if p.phase != Phase::Serving {
            out.push(refuse(format!("partition {partition} is not serving")));
            return;
        }
        if p.members().any(|n| n == from) {
            out.push(refuse(format!("node {from} is already a live replica of partition {partition}")));
            return;
        }
        let Some(&source) = p.agreement.live().first() else {
            out.push(refuse(format!("partition {partition} has no live replica to copy")));
            return;
        };
        let from_seq = p.sequencer.next_seq();
        p.joining.retain(|(n, _)| *n != from);
        p.joining.push((from, from_seq));
        if p.passive().is_some() {
            // The primary ships to the joiner from the next batch on; the joiner copies the
            // primary's state as of the batch before and holds the shipments meanwhile.
            out.push(Output::ToNodes {
                nodes: vec![source],
                msg: CoordinatorToNode::ShipTo { partition, backup: from },
            });
        }
        out.push(Output::Event(Event::Rejoining { partition, node: from, source, from_seq }));
        // The partition's catch-up throttle begins with the plan ([`Coordinator::settle_watching`]).
        out.push(Output::ToNodes {
            nodes: vec![from],
            msg: CoordinatorToNode::RejoinPlan { partition, source, from_seq },
        });
        if let Some(catching_up) = p.catching_up_mut() {
            catching_up.insert(from, (from_seq.saturating_sub(1), Seq::MAX));
            p.resend_reads(from, out);
        }
    }

    /// A rejoining node installed its copy and caught up: it counts from the next batch on.
    /// Tells `node`, which reported `Rejoined` for `partition` under a rejoin this coordinator
    /// no longer holds, the partition's membership it is left out of, so that it rejoins
    /// afresh. The case: the node was counted failed while it copied (found with a joiner
    /// whose heartbeats starved at saturation), came back and was told it is left out while
    /// still rejoining — which a rejoining replica ignores — then finished the old plan's
    /// copy, and serves a state the partition does not count. A failed node's other messages
    /// are ignored until it asks to rejoin; without this it never would.
    fn tell_left_out(&self, node: NodeId, partition: PartitionId, out: &mut Vec<Output>) {
        let Some(p) = self.partitions.get(&partition) else { return };
        if p.members().any(|n| n == node) || !matches!(p.phase, Phase::Serving | Phase::Promoting { .. }) {
            return;
        }
        let live = p.members().collect();
        out.push(Output::ToNodes {
            nodes: vec![node],
            msg: CoordinatorToNode::Membership { partition, epoch: self.membership_epoch, live },
        });
    }

    fn on_rejoined(&mut self, from: NodeId, partition: PartitionId, snapshot_seq: Seq, out: &mut Vec<Output>) {
        let Some(p) = self.partitions.get_mut(&partition) else { return };
        if p.phase == (Phase::Recovering { node: from }) {
            // Restart recovery from the log is done: the partition serves again.
            p.phase = Phase::Serving;
            let from_seq = snapshot_seq + 1;
            out.push(Output::Event(Event::RecoveredFromLog { partition, node: from, from_seq }));
            // Remote pieces it ran and answered whose outcomes died with it in flight: derived
            // again from its recovered state, for the home pieces still waiting.
            self.rederive_lost_pieces(out);
            return;
        }
        let Some(at) = p.joining.iter().position(|(n, _)| *n == from) else {
            out.push(Output::Event(Event::Ignored {
                node: from,
                what: format!("Rejoined for partition {partition}, not asked"),
            }));
            self.tell_left_out(from, partition, out);
            return;
        };
        let planned = p.joining[at].1;
        if p.passive().is_some() && snapshot_seq + 1 < planned {
            // A copy taken under a plan a promotion replaced (the new plan was on its way):
            // the node rejoins again when the new plan reaches it.
            out.push(Output::Event(Event::Ignored {
                node: from,
                what: format!("Rejoined with a copy of batch {snapshot_seq}, older than its plan's batch {planned}"),
            }));
            return;
        }
        p.joining.remove(at);
        let sent = p.agreement.next_seq().saturating_sub(1);
        if let Some((done, until)) = p.catching_up_mut().and_then(|c| c.get_mut(&from)) {
            *done = (*done).max(snapshot_seq);
            *until = sent;
        }
        match &mut p.replication {
            Replication::Passive(s) => {
                if s.backups.contains(&from) || s.confirming.iter().any(|c| c.0 == from) || p.agreement.is_stopped() {
                    return;
                }
                s.confirming.push((from, p.agreement.next_seq()));
                // Its copy holds every batch through `snapshot_seq`.
                let applied = s.backup_applied.entry(from).or_default();
                *applied = (*applied).max(snapshot_seq);
            }
            Replication::ActiveActive { .. } => {
                if p.agreement.is_stopped() || !p.agreement.add_replica(from) {
                    return;
                }
            }
        }
        self.membership_epoch += 1;
        let live: Vec<NodeId> = p.members().collect();
        out.push(Output::ToNodes {
            nodes: live.clone(),
            msg: CoordinatorToNode::Membership { partition, epoch: self.membership_epoch, live },
        });
        let replayed_batches = sent.saturating_sub(snapshot_seq);
        out.push(Output::Event(Event::Rejoined { partition, node: from, snapshot_seq, replayed_batches }));
    }

    fn on_load_status(&mut self, from: NodeId, partition: PartitionId, state: LoadState, out: &mut Vec<Output>) {
        let Some(p) = self.partitions.get_mut(&partition) else {
            out.push(Output::Event(Event::Ignored {
                node: from,
                what: format!("load status of unknown partition {partition}"),
            }));
            return;
        };
        if let (LoadState::Failed { reason }, true) = (&state, p.joining.iter().any(|(n, _)| *n == from)) {
            // A joiner gave up its rejoin while still connected: it no longer rejoins, so the
            // partition's catch-up throttle ends ([`Coordinator::settle_watching`]) and the
            // remote pieces' outcomes kept for it may go.
            p.joining.retain(|(n, _)| *n != from);
            if let Some(catching_up) = p.catching_up_mut() {
                catching_up.remove(&from);
            }
            out.push(Output::Event(Event::RejoinGivenUp { partition, node: from, reason: reason.clone() }));
            return;
        }
        if !p.members().any(|n| n == from) {
            out.push(Output::Event(Event::Ignored {
                node: from,
                what: format!("load status of partition {partition}, of which it is no live replica"),
            }));
            return;
        }
        match state {
            LoadState::Loading { rows_loaded, rows_total } => {
                out.push(Output::Event(Event::LoadProgress { partition, node: from, rows_loaded, rows_total }));
            }
            LoadState::Ready { digest } => {
                if p.phase == Phase::Loading {
                    p.loaded.insert(from, digest);
                    p.check_ready(out);
                } else {
                    let what = format!("a load report for partition {partition}, which is past loading");
                    out.push(Output::Event(Event::Ignored { node: from, what }));
                }
            }
            LoadState::Failed { reason } => {
                out.push(Output::Event(Event::LoadFailed { partition, node: from, reason }));
                p.replica_down(from, &mut self.membership_epoch, out);
            }
        }
    }

    /// A remote piece's outcome: kept at the home partition and forwarded to its executing
    /// replicas, once (a duplicate — active-active replicas all send theirs, a promoted
    /// primary sends again — or one for a transaction answered already is dropped).
    /// Returns whether it was new.
    fn deliver_reads(&mut self, reads: PieceReads, out: &mut Vec<Output>) -> bool {
        let Some(p) = self.partitions.get_mut(&reads.home) else { return false };
        let Some(held) = p.piece_reads.get_mut(&reads.ts) else { return false };
        if held.has(reads.from) {
            return false;
        }
        held.outcomes.push((reads.from, reads.outcome.clone()));
        let nodes = p.executors();
        if !nodes.is_empty() {
            out.push(Output::ToNodes { nodes, msg: CoordinatorToNode::PieceReads(reads) });
        }
        true
    }

    /// Joins multi-partition transactions' answers: each partition's answer for its piece
    /// (a reply in `out`, or a remote piece decided) is taken aside until every partition
    /// answered, then the client gets one answer ([`combine`]). A partition lost for good
    /// aborts the home pieces still waiting for its piece.
    fn settle(&mut self, mut out: Vec<Output>) -> Vec<Output> {
        self.answer_deferred_rejoins(&mut out);
        if self.multi.is_empty() {
            for p in self.partitions.values_mut() {
                p.pieces_done.clear();
            }
            return out;
        }
        let mut kept = Vec::with_capacity(out.len());
        let mut lost = Vec::new();
        let mut node_down = false;
        let mut answers: Vec<(ClientRef, Option<ClientResult>)> = Vec::new();
        for o in out {
            match o {
                Output::Reply { client, reply }
                    if self.multi.contains_key(&ClientRef { client, request_id: reply.request_id }) =>
                {
                    answers.push((ClientRef { client, request_id: reply.request_id }, Some(reply.result)));
                }
                Output::Event(e) => {
                    match &e {
                        // A full-stack partition that may come back from its log is in doubt,
                        // not lost: its pieces took effect or will on replay (docs/design.md
                        // §10), so the home pieces waiting for them wait, as two-phase commit's
                        // participants wait for an in-doubt one.
                        Event::PartitionUnavailable { partition }
                            if self.partitions.get(partition).is_some_and(Partition::may_resume) => {}
                        Event::PartitionUnavailable { partition } | Event::PartitionStopped { partition, .. } => {
                            lost.push(*partition)
                        }
                        Event::Diverged(d) => lost.push(d.partition),
                        Event::NodeDown { .. } => node_down = true,
                        _ => {}
                    }
                    kept.push(Output::Event(e));
                }
                other => kept.push(other),
            }
        }
        for p in self.partitions.values_mut() {
            answers.extend(p.pieces_done.drain(..).map(|(tag, _)| (tag, None)));
        }
        for (tag, answer) in answers {
            let Some(m) = self.multi.get_mut(&tag) else { continue };
            m.answers.push(answer);
            if m.answers.len() == 1 + m.remotes.len() {
                let m = self.multi.remove(&tag).expect("looked up above");
                let result = combine(m);
                kept.push(Output::Reply {
                    client: tag.client,
                    reply: ClientReply { request_id: tag.request_id, result },
                });
            }
        }
        if node_down {
            self.rederive_lost_pieces(&mut kept);
        }
        for q in lost {
            // Every home piece still waiting for `q`'s piece, answered or not (a rejoining
            // replica may still run one whose client was answered).
            let waiting: Vec<(ClientRef, PartitionId, Timestamp)> = self
                .partitions
                .values()
                .flat_map(|p| {
                    p.piece_reads
                        .iter()
                        .filter(|(_, h)| h.remotes.iter().any(|(r, _)| *r == q) && !h.has(q))
                        .map(|(&ts, h)| (h.tag, p.id, ts))
                })
                .collect();
            for (tag, home, ts) in waiting {
                let reason = format!("partition {q} was lost before its piece reported");
                let reads = PieceReads { home, from: q, ts, outcome: PieceOutcome::Aborted { reason } };
                if self.deliver_reads(reads, &mut kept) {
                    if let Some(m) = self.multi.get_mut(&tag).filter(|m| m.ts == ts) {
                        m.lost.push(q);
                    }
                }
            }
        }
        kept
    }

    /// [`Coordinator::settle`], then each partition's catch-up throttle brought in line with
    /// its rejoins ([`CatchUp::watch`]): one begins when a rejoin plan went out (here or in
    /// `settle`, which answers deferred rejoin requests), and ends once no replica is
    /// rejoining any more — wherever `joining` was cleared or shrunk (`Rejoined`, a joiner
    /// failing, a promotion re-planning without the promoted node, a restart recovery) — or
    /// the partition stopped or lost its replicas. Client requests change neither.
    fn settle_watching(&mut self, out: Vec<Output>, now_us: u64) -> Vec<Output> {
        let mut out = self.settle(out);
        for p in self.partitions.values_mut() {
            let ended = matches!(p.phase, Phase::Stopped { .. } | Phase::Unavailable | Phase::Recovering { .. });
            let joiner = p.joining.first().map(|j| j.0).filter(|_| !ended);
            out.extend(p.catch_up.watch(p.id, joiner, now_us).map(Output::Event));
        }
        out
    }

    /// Rejoin requests deferred during a promotion or a restart recovery, once it ended: each
    /// is answered as if it arrived now (a node that failed meanwhile asks again when it is
    /// back).
    fn answer_deferred_rejoins(&mut self, out: &mut Vec<Output>) {
        let ready: Vec<(PartitionId, Vec<NodeId>)> = self
            .partitions
            .values_mut()
            .filter(|p| !matches!(p.phase, Phase::Promoting { .. } | Phase::Recovering { .. }))
            .filter(|p| !p.deferred_rejoins.is_empty())
            .map(|p| (p.id, std::mem::take(&mut p.deferred_rejoins)))
            .collect();
        for (partition, nodes) in ready {
            for node in nodes {
                if self.nodes.get(&node).is_some_and(|n| n.live) {
                    self.on_rejoin_request(node, partition, out);
                }
            }
        }
    }

    /// A backup of `promoted` became its primary, having applied every batch through
    /// `applied_seq` and executing from `next_seq`. Remote pieces of `promoted` whose outcomes
    /// never reached their home partition — they died with the old primary, or with a
    /// previous leader (docs/design.md §11) — are derived again from the new primary's state
    /// if it includes their batch; a piece in a batch it skipped (after `applied_seq`, before
    /// `next_seq`: run by the old primary alone, and lost with it) took effect nowhere that
    /// remains, so its home piece is told it aborted — deriving it from a state that never ran
    /// it would commit half a transaction.
    fn after_promotion(&mut self, promoted: PartitionId, applied_seq: Seq, next_seq: Seq, out: &mut Vec<Output>) {
        let skipped: Vec<(PartitionId, Timestamp)> = self
            .partitions
            .values()
            .flat_map(|home| {
                home.piece_reads.iter().filter_map(move |(&ts, held)| {
                    held.remotes
                        .iter()
                        .any(|&(q, seq)| q == promoted && !held.has(q) && applied_seq < seq && seq < next_seq)
                        .then_some((home.id, ts))
                })
            })
            .collect();
        for (home, ts) in skipped {
            let reason = format!("partition {promoted}'s failed primary ran this piece alone, and it was lost");
            let reads = PieceReads { home, from: promoted, ts, outcome: PieceOutcome::Aborted { reason } };
            self.deliver_reads(reads, out);
        }
        self.rederive_lost_pieces(out);
    }

    /// After a node failed: remote pieces whose batch is decided (their replicas answered, or
    /// all failed) but whose outcome never reached the home partition — it died in flight
    /// with the replicas that ran it — are derived again by the partition's live replicas
    /// whose state includes the batch ([`CoordinatorToNode::RederivePiece`]; a replica that will run
    /// the batch itself ignores it).
    fn rederive_lost_pieces(&self, out: &mut Vec<Output>) {
        for home in self.partitions.values() {
            for (&ts, held) in &home.piece_reads {
                for &(q, seq) in held.remotes.iter().filter(|(q, _)| !held.has(*q)) {
                    let p = &self.partitions[&q];
                    if p.phase != Phase::Serving || p.agreement.decided_through() < seq {
                        continue;
                    }
                    let nodes = p.executors();
                    if !nodes.is_empty() {
                        let msg = CoordinatorToNode::RederivePiece {
                            partition: q,
                            home: home.id,
                            seq,
                            ts,
                            input: held.input,
                        };
                        out.push(Output::ToNodes { nodes, msg });
                    }
                }
            }
        }
    }

    /// Watches the replicas lagging past `replica_lag_batches_max` behind a majority's
    /// answers (docs/cluster.md, "Agreement"): each is reported when it starts, and failed
    /// once it has lagged for `failure_timeout_ms` — unless that would leave its partition
    /// without a majority of its replicas live, or another live replica of it has not been
    /// heard from for two heartbeats (the replicas ahead may be dead and not yet detected:
    /// the laggard may then be the only state left, and failing it would lose the partition;
    /// found by `glass sim --lag-batches 3 --seed 457`). Meanwhile the partition's batches
    /// wait for every live replica, so nothing more is kept for the laggard.
    ///
    /// In the passive modes the laggard is a backup more than `replica_lag_batches_max`
    /// batches behind the primary's answers (by the `BackupApplied` of its heartbeats): its
    /// primary no longer ships to it (its link's queue filled: "backup too far behind"), so it
    /// would stay behind for good while counted live; failed once the primary is heard from,
    /// it rejoins (found by `glass failover --mode active-passive` at 20 warehouses, issue
    /// 35: the backup's node installed a 1.1 GB copy on cores shared with the load).
    fn watch_lagging(&mut self, now_us: u64, out: &mut Vec<Output>) {
        let mut failing = Vec::new();
        for p in self.partitions.values_mut() {
            let passive = p.passive().is_some();
            let laggards = if passive { p.passive_laggards() } else { p.agreement.laggards() };
            p.lagging_since.retain(|n, _| laggards.iter().any(|(m, _)| m == n));
            for &(node, behind) in &laggards {
                if let std::collections::btree_map::Entry::Vacant(e) = p.lagging_since.entry(node) {
                    e.insert(now_us);
                    out.push(Output::Event(Event::ReplicaLagging { partition: p.id, node, behind }));
                }
            }
            if passive {
                let primary_heard = p.agreement.live().iter().all(|m| {
                    self.nodes.get(m).is_some_and(|l| now_us.saturating_sub(l.last_heard_us) <= 2 * self.heartbeat_us)
                });
                let lagged_long = |n: &NodeId| {
                    p.lagging_since.get(n).is_some_and(|&since| now_us.saturating_sub(since) >= self.failure_timeout_us)
                };
                if let Some(&(node, behind)) = laggards.iter().find(|(n, _)| primary_heard && lagged_long(n)) {
                    failing.push((p.id, node, behind));
                }
                continue;
            }
            let Quorum::Majority { replicas } = p.quorum else { continue };
            let live = p.agreement.live();
            if live.len() <= replicas / 2 + 1 {
                continue;
            }
            let others_heard = |node: NodeId| {
                live.iter().filter(|&&m| m != node).all(|m| {
                    self.nodes.get(m).is_some_and(|l| now_us.saturating_sub(l.last_heard_us) <= 2 * self.heartbeat_us)
                })
            };
            if let Some(&(node, behind)) = laggards.iter().find(|(n, _)| {
                p.lagging_since.get(n).is_some_and(|&since| now_us.saturating_sub(since) >= self.failure_timeout_us)
                    && others_heard(*n)
            }) {
                failing.push((p.id, node, behind));
            }
        }
        for (partition, node, behind) in failing {
            if self.is_node_live(node) {
                // Not silent: it is heard from, only behind.
                self.node_down(node, 0, Detection::Lagging { partition, behind }, out);
            }
        }
    }

    fn node_down(&mut self, node: NodeId, silent_ms: u64, detection: Detection, out: &mut Vec<Output>) {
        let Some(n) = self.nodes.get_mut(&node) else { return };
        n.live = false;
        out.push(Output::Event(Event::NodeDown { node, silent_ms, detection }));
        for p in self.partitions.values_mut() {
            p.joining.retain(|(n, _)| *n != node);
            if let Some(catching_up) = p.catching_up_mut() {
                catching_up.remove(&node);
            }
            if p.members().any(|n| n == node) {
                p.catch_up.note_failure();
                p.replica_down(node, &mut self.membership_epoch, out);
            }
        }
    }
}

impl Partition {
    /// The passive modes' replication state (`None` in active-active).
    /// Passive modes: the backups counted live more than `lag_batches_max` batches behind the
    /// primary's answers, with how far (`Coordinator::watch_lagging`).
    fn passive_laggards(&self) -> Vec<(NodeId, usize)> {
        let Some(s) = self.passive() else { return Vec::new() };
        if self.phase != Phase::Serving {
            return Vec::new();
        }
        let answered = self.agreement.decided_through();
        s.backups
            .iter()
            .filter_map(|&b| {
                let behind = answered.saturating_sub(s.backup_applied.get(&b).copied().unwrap_or(0)) as usize;
                (behind > self.lag_batches_max).then_some((b, behind))
            })
            .collect()
    }

    fn passive(&self) -> Option<&Passive> {
        match &self.replication {
            Replication::Passive(s) => Some(s),
            Replication::ActiveActive { .. } => None,
        }
    }

    /// Whether the partition, unavailable, may come back from its last primary's log.
    fn may_resume(&self) -> bool {
        self.phase == Phase::Unavailable && self.passive().is_some_and(Passive::may_resume)
    }

    fn passive_mut(&mut self) -> Option<&mut Passive> {
        match &mut self.replication {
            Replication::Passive(s) => Some(s),
            Replication::ActiveActive { .. } => None,
        }
    }

    /// Active-active: the replicas catching up (`None` in the passive modes).
    fn catching_up_mut(&mut self) -> Option<&mut BTreeMap<NodeId, (Seq, Seq)>> {
        match &mut self.replication {
            Replication::ActiveActive { catching_up } => Some(catching_up),
            Replication::Passive(_) => None,
        }
    }

    /// The live backups (none in active-active).
    fn backups(&self) -> &[NodeId] {
        self.passive().map_or(&[], |s| &s.backups)
    }

    /// The rejoining replicas that receive batches: active-active ones (a passive mode's
    /// get their primary's shipments).
    fn batch_joiners(&self) -> impl Iterator<Item = NodeId> + '_ {
        let active = matches!(self.replication, Replication::ActiveActive { .. });
        self.joining.iter().map(|(n, _)| *n).filter(move |_| active)
    }

    /// Forgets the batches answered through `seq` (kept for a promotion in the passive modes).
    fn answered_through(&mut self, seq: Seq) {
        if let Some(s) = self.passive_mut() {
            while s.unanswered.front().is_some_and(|b| b.seq <= seq) {
                s.unanswered.pop_front();
            }
            // The primary answered a batch sent after the membership naming these backups:
            // it waits for them now, and they may be promoted.
            let (confirmed, still): (Vec<_>, Vec<_>) = s.confirming.drain(..).partition(|&(_, from)| from <= seq);
            s.confirming = still;
            s.backups.extend(confirmed.into_iter().map(|(n, _)| n));
        }
    }

    /// The live replicas: the executing ones (the primary, in the passive modes), then the
    /// backups.
    fn members(&self) -> impl Iterator<Item = NodeId> + '_ {
        let confirming = self.passive().into_iter().flat_map(|s| s.confirming.iter().map(|c| c.0));
        self.agreement.live().iter().chain(self.backups()).copied().chain(confirming)
    }

    /// Why a request cannot be served now, if it cannot.
    fn refusal(&self) -> Option<Rejection> {
        match &self.phase {
            Phase::Serving => None,
            Phase::Loading => Some(Rejection::NotReady { partition: self.id }),
            Phase::Stopped { reason } => {
                Some(Rejection::PartitionStopped { partition: self.id, reason: reason.clone() })
            }
            Phase::Unavailable => Some(Rejection::NoLiveReplica { partition: self.id }),
            Phase::Promoting { .. } | Phase::Recovering { .. } => Some(Rejection::NotReady { partition: self.id }),
        }
    }

    /// Sends a closed batch to every live replica and records it for agreement.
    fn send(&mut self, batch: wire::messages::Batch, out: &mut Vec<Output>) {
        debug_assert_eq!(batch.txns.len(), self.open_tags.len());
        let tags = std::mem::take(&mut self.open_tags);
        let txns = batch.txns.iter().map(|t| t.ts).zip(tags).collect();
        self.agreement.sent(batch.seq, txns, batch.digest_after);
        // Active-active joiners get the batches; passive ones get the primary's shipments.
        let nodes = self.agreement.live().iter().copied().chain(self.batch_joiners()).collect();
        if let Some(s) = self.passive_mut() {
            s.unanswered.push_back(batch.clone());
        }
        out.push(Output::ToNodes { nodes, msg: CoordinatorToNode::Batch(batch) });
    }

    /// Passive modes, the primary failed: asks the first live backup to become the primary.
    /// (In sync shipping every live backup applied every answered batch, so any of them
    /// holds every acknowledged transaction.) With no backup left, the partition is
    /// unavailable.
    fn promote_next(&mut self, out: &mut Vec<Output>) {
        // The most up-to-date backup (by what each last reported applied; the first listed
        // among equals).
        let Some(s) = self.passive() else { return };
        let applied = |b: &NodeId| s.backup_applied.get(b).copied().unwrap_or(0);
        let first_unanswered = s.unanswered.front().map_or(self.agreement.next_seq(), |b| b.seq);
        // A backup not yet confirmed may be promoted only if it reported applying every
        // answered batch.
        let confirming = s.confirming.iter().map(|c| c.0).filter(|b| applied(b) + 1 >= first_unanswered);
        let candidates: Vec<NodeId> = s.backups.iter().copied().chain(confirming).collect();
        let most_applied = candidates.iter().map(applied).max().unwrap_or(0);
        let best = candidates.iter().copied().find(|b| applied(b) == most_applied);
        let Some(backup) = best else {
            let primary = self.agreement.live().first().copied();
            if let Some(s) = self.passive_mut() {
                s.last_primary = primary.or(s.last_primary);
            }
            self.close_open_for_replay(out);
            self.answer_sent_unknown("the partition's last replica failed before answering", out);
            if let Some(s) = self.passive_mut() {
                s.lose_unanswered();
            }
            self.phase = Phase::Unavailable;
            self.reject_all(Vec::new(), Rejection::NoLiveReplica { partition: self.id }, out);
            out.push(Output::Event(Event::PartitionUnavailable { partition: self.id }));
            return;
        };
        self.phase = Phase::Promoting { backup };
        out.push(Output::Event(Event::Promoting { partition: self.id, backup, first_unanswered }));
        out.push(Output::ToNodes {
            nodes: vec![backup],
            msg: CoordinatorToNode::Promote { partition: self.id, first_unanswered },
        });
    }

    /// The promoted backup applied everything up to `applied_seq` and executes from
    /// `next_seq`: the batches before that no client heard about are answered "outcome
    /// unknown" (they took effect without a result); the rest are sent to the new primary.
    fn on_promoted(&mut self, from: NodeId, applied_seq: Seq, next_seq: Seq, epoch: &mut u64, out: &mut Vec<Output>) {
        if self.phase != (Phase::Promoting { backup: from }) {
            out.push(Output::Event(Event::Ignored { node: from, what: "Promoted, not asked".into() }));
            return;
        }
        let pending = self.agreement.take_pending();
        let mut tags: BTreeMap<Seq, Vec<(Timestamp, ClientRef)>> =
            pending.into_iter().map(|(seq, txns, _)| (seq, txns)).collect();
        self.agreement =
            Agreement::starting_at(self.id, [from], next_seq).with_quorum(self.quorum, self.lag_batches_max);
        // The new primary may have applied batches a previous leader sent and this one never
        // saw (docs/design.md §11): its numbering is the partition's.
        self.sequencer.skip_to(next_seq);
        // A promoted backup ships to no one: the other backups would fall behind while still
        // counted, and a later promotion of one would lose what it missed. They stop counting
        // (restarted with --rejoin, they come back as the new primary's backups).
        let (backups, unanswered) = match self.passive_mut() {
            Some(s) => {
                s.backup_applied.clear();
                let confirming = s.confirming.drain(..).map(|c| c.0);
                let dropped: Vec<NodeId> = std::mem::take(&mut s.backups).into_iter().chain(confirming).collect();
                (dropped, std::mem::take(&mut s.unanswered))
            }
            None => Default::default(),
        };
        for dropped in backups.into_iter().filter(|&b| b != from) {
            out.push(Output::Event(Event::BackupDropped { partition: self.id, node: dropped }));
        }
        let mut unknown = 0usize;
        for batch in unanswered {
            let txns = tags.remove(&batch.seq).unwrap_or_default();
            if batch.seq < next_seq {
                unknown += txns.len();
                for (ts, tag) in txns {
                    let reason =
                        format!("the primary failed; batch {} reached the new primary without its result", batch.seq);
                    out.push(outcome_unknown(tag, ts, reason));
                }
                if let Some(waiters) = self.digest_waiters.remove(&batch.seq) {
                    self.reject_waiters(waiters, Rejection::NoLiveReplica { partition: self.id }, out);
                }
            } else {
                self.agreement.sent(batch.seq, txns, batch.digest_after);
                if let Some(s) = self.passive_mut() {
                    s.unanswered.push_back(batch.clone());
                }
                out.push(Output::ToNodes { nodes: vec![from], msg: CoordinatorToNode::Batch(batch) });
            }
        }
        self.answer_orphaned_digests(out);
        self.sequencer.complete(unknown);
        self.resend_reads(from, out);
        self.prune_reads();
        // Rejoins planned from the failed primary go on from the new one: it ships to them
        // from the next batch on, and they copy it. (Found by `glass sim --mode
        // active-passive --seed 16`: a rejoin planned before a promotion finished with a copy
        // from another node, and the new primary, never told to ship to it, left it behind.)
        let from_seq = self.sequencer.next_seq();
        let joiners: Vec<NodeId> = self.joining.iter().map(|(n, _)| *n).filter(|&n| n != from).collect();
        self.joining = joiners.iter().map(|&n| (n, from_seq)).collect();
        for node in joiners {
            let partition = self.id;
            out.push(Output::ToNodes { nodes: vec![from], msg: CoordinatorToNode::ShipTo { partition, backup: node } });
            out.push(Output::Event(Event::Rejoining { partition, node, source: from, from_seq }));
            out.push(Output::ToNodes {
                nodes: vec![node],
                msg: CoordinatorToNode::RejoinPlan { partition, source: from, from_seq },
            });
        }
        self.phase = Phase::Serving;
        *epoch += 1;
        let live: Vec<NodeId> = self.members().collect();
        out.push(Output::ToNodes {
            nodes: live.clone(),
            msg: CoordinatorToNode::Membership { partition: self.id, epoch: *epoch, live },
        });
        out.push(Output::Event(Event::Promoted { partition: self.id, primary: from, applied_seq, next_seq }));
    }

    /// Full stack, the last executing replica failed: the open batch is closed and sent like
    /// the others (to that replica, in vain), so that it is answered "outcome unknown" and
    /// kept for the replay with them. A multi-partition transaction admitted into it has its
    /// remote pieces in other partitions' batches, which run: rejecting its home piece here
    /// left them half a transaction. (Found by `glass sim --mode full-stack --seed 649`: a
    /// Payment admitted 39 µs before its home partition's last replica failed.)
    fn close_open_for_replay(&mut self, out: &mut Vec<Output>) {
        if self.passive().is_some_and(|s| s.log == ShippedLogKind::Wal) {
            if let Some(batch) = self.sequencer.flush() {
                self.send(batch, out);
            }
        }
    }

    /// Answers every transaction sent and not yet decided "outcome unknown" (`reason`): the
    /// replicas that executed it are gone with their answers.
    fn answer_sent_unknown(&mut self, reason: &str, out: &mut Vec<Output>) {
        for (seq, txns, _) in self.agreement.take_pending() {
            for (ts, tag) in txns {
                out.push(outcome_unknown(tag, ts, format!("{reason} (batch {seq})")));
            }
            if let Some(waiters) = self.digest_waiters.remove(&seq) {
                self.reject_waiters(waiters, Rejection::NoLiveReplica { partition: self.id }, out);
            }
        }
    }

    /// Full-stack restart recovery: node `from` restarted, recovered the partition from its
    /// own write-ahead log and asks to serve it. Granted only when no replica is live and
    /// `from` was the last primary — its log holds every acknowledged transaction, where a
    /// backup's log holds only the load (backups apply shipped records in memory). It then
    /// executes every batch from the next one on, alone.
    fn resume_from_log(&mut self, from: NodeId, epoch: u64, out: &mut Vec<Output>) -> Result<(), ResumeRefused> {
        let partition = self.id;
        match (&self.phase, self.passive().and_then(|s| s.last_primary)) {
            (Phase::Unavailable, Some(primary)) if primary == from => {}
            (Phase::Unavailable, Some(primary)) => {
                return Err(ResumeRefused::NotLastPrimary { partition, node: from, last_primary: primary })
            }
            (Phase::Unavailable, None) => return Err(ResumeRefused::NoLastPrimary { partition }),
            (Phase::Serving | Phase::Promoting { .. }, _) => return Err(ResumeRefused::PrimaryLive { partition }),
            (Phase::Loading, _) => return Err(ResumeRefused::Loading { partition }),
            (Phase::Recovering { node }, _) => return Err(ResumeRefused::Recovering { partition, node: *node }),
            (Phase::Stopped { reason }, _) => return Err(ResumeRefused::Stopped { partition, reason: reason.clone() }),
        }
        let from_seq = self.sequencer.next_seq();
        self.agreement =
            Agreement::starting_at(partition, [from], from_seq).with_quorum(self.quorum, self.lag_batches_max);
        self.answer_orphaned_digests(out);
        // The batches the failure lost are executed first (replayed below), then every batch
        // from `from_seq` on.
        let replay: Vec<wire::messages::Batch> =
            self.passive().map_or_else(Vec::new, |s| s.lost.iter().cloned().collect());
        let execute_from = replay.first().map_or(from_seq, |b| b.seq);
        self.joining.clear();
        if let Some(s) = self.passive_mut() {
            s.backups.clear();
            s.confirming.clear();
            s.unanswered.clear();
            s.last_primary = None;
        }
        self.phase = Phase::Recovering { node: from };
        out.push(Output::ToNodes {
            nodes: vec![from],
            msg: CoordinatorToNode::ResumeFromLog { partition, from_seq: execute_from },
        });
        self.resend_reads(from, out);
        for batch in replay {
            out.push(Output::ToNodes { nodes: vec![from], msg: CoordinatorToNode::Batch(batch) });
        }
        out.push(Output::ToNodes {
            nodes: vec![from],
            msg: CoordinatorToNode::Membership { partition, epoch, live: vec![from] },
        });
        out.push(Output::Event(Event::RecoveringFromLog { partition, node: from, from_seq: execute_from }));
        Ok(())
    }

    /// The replicas that run this partition's home pieces: the executing ones, and in
    /// active-active the rejoining ones (they execute what they hold once their copy is in).
    fn executors(&self) -> Vec<NodeId> {
        self.agreement.live().iter().copied().chain(self.batch_joiners()).collect()
    }

    /// Sends every remote piece's outcome kept here to `node` (it starts executing: a
    /// promoted backup, a rejoining replica, a recovered one).
    fn resend_reads(&self, node: NodeId, out: &mut Vec<Output>) {
        for (&ts, held) in &self.piece_reads {
            for (from, outcome) in &held.outcomes {
                let reads = PieceReads { home: self.id, from: *from, ts, outcome: outcome.clone() };
                out.push(Output::ToNodes { nodes: vec![node], msg: CoordinatorToNode::PieceReads(reads) });
            }
        }
    }

    /// Forgets the remote pieces' outcomes no replica can need any more: those of batches
    /// decided, and executed (or copied) by every replica still catching up.
    fn prune_reads(&mut self) {
        // The reads of lost batches' home pieces wait for their replay.
        let lost = self.passive().and_then(|s| s.lost.front()).map(|b| b.seq.saturating_sub(1));
        let decided = self.agreement.decided_through().min(lost.unwrap_or(Seq::MAX));
        let floor = match self.catching_up_mut() {
            Some(catching_up) => {
                catching_up.retain(|_, (done, until)| done < until);
                catching_up.values().map(|(done, _)| *done).min().unwrap_or(decided).min(decided)
            }
            None => decided,
        };
        while self.piece_reads.first_key_value().is_some_and(|(_, h)| h.seq <= floor) {
            self.piece_reads.pop_first();
        }
    }

    /// Answers digest requesters with `rejection`.
    fn reject_waiters(&self, waiters: Vec<ClientRef>, rejection: Rejection, out: &mut Vec<Output>) {
        for w in waiters {
            out.push(Output::ToClient {
                client: w.client,
                msg: CoordinatorToClient::DigestReply {
                    request_id: w.request_id,
                    partition: self.id,
                    outcome: DigestOutcome::Rejected(rejection.clone()),
                },
            });
        }
    }

    /// Serves once every live replica loaded, if their load digests agree.
    fn check_ready(&mut self, out: &mut Vec<Output>) {
        let live: Vec<NodeId> = self.members().collect();
        if self.agreement.live().is_empty() || !live.iter().all(|n| self.loaded.contains_key(n)) {
            return;
        }
        let digests: Vec<(NodeId, StateDigest)> = live.iter().map(|n| (*n, self.loaded[n])).collect();
        if digests.iter().all(|(_, d)| *d == digests[0].1) {
            self.phase = Phase::Serving;
            out.push(Output::Event(Event::PartitionReady { partition: self.id, replicas: live, digest: digests[0].1 }));
        } else {
            let divergence =
                Divergence { partition: self.id, seq: 0, kind: DivergenceKind::Load { digests }, after_answer: false };
            let reason = divergence.to_string();
            self.stop(reason, out);
            out.push(Output::Event(Event::Diverged(divergence)));
        }
    }

    fn replica_down(&mut self, node: NodeId, epoch: &mut u64, out: &mut Vec<Output>) {
        if let Some(s) = self.passive_mut() {
            s.backups.retain(|&b| b != node);
            s.confirming.retain(|c| c.0 != node);
        }
        if let Phase::Promoting { backup } = self.phase {
            if backup == node {
                // The backup being promoted failed too: try the next, if any.
                self.phase = Phase::Serving;
                self.promote_next(out);
                return;
            }
            if self.agreement.live() == [node] {
                // The failed primary the promotion replaces, failing again (its restarted
                // process asked to rejoin, then went too): the promotion already answers for
                // it. Found by `glass sim --mode active-passive --shipping sync --seed 15`,
                // where it left the partition with no live replica.
                return;
            }
        }
        let primary_failed = self.passive().is_some() && self.agreement.live() == [node];
        // A primary failing while the partition still loads is replaced too: its backups load
        // the same state (found by `glass sim --mode active-passive --seed 22`, where such a
        // partition was left with no live replica and never served).
        let any_backup = !self.backups().is_empty() || self.passive().is_some_and(|s| !s.confirming.is_empty());
        if primary_failed && matches!(self.phase, Phase::Serving | Phase::Loading) && any_backup {
            self.loaded.remove(&node);
            self.promote_next(out);
            return;
        }
        if self.agreement.live() == [node] && matches!(self.phase, Phase::Serving | Phase::Recovering { .. }) {
            // The last executing replica: what it was sent and did not answer may have taken
            // effect (in full-stack mode, durably) — the clients cannot be told it did not.
            // (Only a passive mode's last primary may come back from its own log.)
            if let Some(s) = self.passive_mut() {
                s.last_primary = Some(node);
            }
            self.close_open_for_replay(out);
            self.answer_sent_unknown("the partition's last replica failed before answering", out);
            if let Some(s) = self.passive_mut() {
                s.lose_unanswered();
            }
        }
        let verdicts =
            if self.agreement.live().contains(&node) { self.agreement.replica_down(node) } else { Vec::new() };
        self.loaded.remove(&node);
        for v in verdicts {
            self.apply(v, out);
        }
        if !self.agreement.live().is_empty() {
            if !matches!(self.phase, Phase::Loading | Phase::Serving) {
                return;
            }
            *epoch += 1;
            // The primary's node learns here which backups it still waits for.
            let live: Vec<NodeId> = self.members().collect();
            out.push(Output::ToNodes {
                nodes: live.clone(),
                msg: CoordinatorToNode::Membership { partition: self.id, epoch: *epoch, live },
            });
            if self.phase == Phase::Loading {
                self.check_ready(out);
            }
        } else if matches!(self.phase, Phase::Loading | Phase::Serving | Phase::Recovering { .. }) {
            // The agreement had nothing pending and returned no verdict: loading, or the last
            // replica's pending batches were answered above. A node that failed during its
            // restart recovery may then recover again (the partition is unavailable, not
            // "recovering" for ever: its restarted process would be refused).
            self.phase = Phase::Unavailable;
            self.reject_open(Rejection::NoLiveReplica { partition: self.id }, out);
            out.push(Output::Event(Event::PartitionUnavailable { partition: self.id }));
        }
    }

    /// Answers "busy" to the digest requesters whose batch's digests the agreement no longer
    /// waits for (a new tracker replaced it: the replicas that executed the batch are gone).
    fn answer_orphaned_digests(&mut self, out: &mut Vec<Output>) {
        let orphaned: Vec<Seq> =
            self.digest_waiters.keys().copied().filter(|seq| !self.agreement.awaits_digests(*seq)).collect();
        for seq in orphaned {
            for w in self.digest_waiters.remove(&seq).unwrap_or_default() {
                let msg = CoordinatorToClient::DigestReply {
                    request_id: w.request_id,
                    partition: self.id,
                    outcome: DigestOutcome::Busy,
                };
                out.push(Output::ToClient { client: w.client, msg });
            }
        }
    }

    /// Applies an agreement verdict: answers clients, or stops the partition.
    fn apply(&mut self, verdict: Verdict<ClientRef>, out: &mut Vec<Output>) {
        match verdict {
            Verdict::Agreed(batch) => {
                self.answered_through(batch.seq);
                self.sequencer.complete(batch.answers.len());
                for (tag, ts, outcome) in batch.answers {
                    let result = match outcome {
                        TxnOutcome::Committed(output) => ClientResult::Committed { ts, output },
                        TxnOutcome::Aborted { reason } => ClientResult::Aborted { ts, reason },
                        TxnOutcome::Failed { reason } => ClientResult::Failed { ts, reason },
                        TxnOutcome::PieceDone { .. } => {
                            self.pieces_done.push((tag, ts));
                            continue;
                        }
                    };
                    out.push(Output::Reply {
                        client: tag.client,
                        reply: ClientReply { request_id: tag.request_id, result },
                    });
                }
            }
            Verdict::StateDigests { seq, digests } => {
                let outcome = match digests {
                    Ok(digests) => DigestOutcome::Digests { seq, digests },
                    // A replica could not take its digest (its copy was refused, and its node
                    // logged why), or every replica that could failed: ask again.
                    Err(_) => DigestOutcome::Busy,
                };
                for w in self.digest_waiters.remove(&seq).unwrap_or_default() {
                    let msg = CoordinatorToClient::DigestReply {
                        request_id: w.request_id,
                        partition: self.id,
                        outcome: outcome.clone(),
                    };
                    out.push(Output::ToClient { client: w.client, msg });
                }
            }
            Verdict::Diverged { divergence, unanswered } => {
                let reason = divergence.to_string();
                // Digest requesters of the diverging batch see the differing digests.
                if let DivergenceKind::State { digests } = &divergence.kind {
                    for w in self.digest_waiters.remove(&divergence.seq).unwrap_or_default() {
                        let outcome = DigestOutcome::Digests { seq: divergence.seq, digests: digests.clone() };
                        out.push(Output::ToClient {
                            client: w.client,
                            msg: CoordinatorToClient::DigestReply {
                                request_id: w.request_id,
                                partition: self.id,
                                outcome,
                            },
                        });
                    }
                }
                self.stop_answering(unanswered, reason, out);
                out.push(Output::Event(Event::Diverged(divergence)));
            }
            Verdict::Unknown { seq, unanswered } => {
                self.answered_through(seq);
                self.sequencer.complete(unanswered.len());
                for (ts, tag) in unanswered {
                    let reason = format!("every replica batch {seq} was sent to failed before answering");
                    out.push(outcome_unknown(tag, ts, reason));
                }
                if let Some(waiters) = self.digest_waiters.remove(&seq) {
                    self.reject_waiters(waiters, Rejection::NoLiveReplica { partition: self.id }, out);
                }
            }
            Verdict::NoLiveReplica { unanswered } => {
                let rejection = Rejection::NoLiveReplica { partition: self.id };
                self.reject_all(unanswered, rejection, out);
                self.phase = Phase::Unavailable;
                out.push(Output::Event(Event::PartitionUnavailable { partition: self.id }));
            }
        }
    }

    /// Stops the partition from outside the agreement (load divergence, load timeout).
    fn stop(&mut self, reason: String, out: &mut Vec<Output>) {
        let unanswered = self.agreement.stop();
        self.stop_answering(unanswered, reason, out);
    }

    /// Stops the partition for good: every unanswered request is told why, and so are the
    /// replicas.
    fn stop_answering(&mut self, unanswered: Vec<ClientRef>, reason: String, out: &mut Vec<Output>) {
        let rejection = Rejection::PartitionStopped { partition: self.id, reason: reason.clone() };
        self.reject_all(unanswered, rejection, out);
        self.phase = Phase::Stopped { reason: reason.clone() };
        out.push(Output::ToNodes {
            nodes: self.members().collect(),
            msg: CoordinatorToNode::PartitionStopped { partition: self.id, reason },
        });
    }

    /// Answers every unanswered request — those handed back by the agreement, the open
    /// batch's and the digest requesters — with `rejection`.
    fn reject_all(&mut self, unanswered: Vec<ClientRef>, rejection: Rejection, out: &mut Vec<Output>) {
        for tag in unanswered {
            out.push(Output::Reply {
                client: tag.client,
                reply: ClientReply { request_id: tag.request_id, result: ClientResult::Rejected(rejection.clone()) },
            });
        }
        self.reject_open(rejection, out);
    }

    /// Answers the open batch's requesters and the digest requesters with `rejection`, and
    /// forgets every admitted transaction (the caller answered the others).
    fn reject_open(&mut self, rejection: Rejection, out: &mut Vec<Output>) {
        self.sequencer.abandon_all();
        for tag in std::mem::take(&mut self.open_tags) {
            out.push(Output::Reply {
                client: tag.client,
                reply: ClientReply { request_id: tag.request_id, result: ClientResult::Rejected(rejection.clone()) },
            });
        }
        for (_, waiters) in std::mem::take(&mut self.digest_waiters) {
            self.reject_waiters(waiters, rejection.clone(), out);
        }
    }
}

/// One answer for a multi-partition transaction from its partitions' answers (`None`: a
/// remote piece committed): committed when the home piece committed and every remote piece
/// did; aborted when every partition rolled back; refused when every partition refused it
/// before running it; failed, naming the partitions, when some committed and others did not
/// (a piece failing on a row TPC-C guarantees — a corrupt database); otherwise "outcome
/// unknown" (a partition's answer, or its piece's outcome, was lost with its replicas).
fn combine(m: MultiTxn) -> ClientResult {
    let ts = m.ts;
    let n = m.answers.len();
    let pieces = m.answers.iter().filter(|a| a.is_none()).count();
    let mut home = None;
    let (mut aborted, mut failed, mut rejected, mut unknown) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for a in m.answers.into_iter().flatten() {
        match a {
            ClientResult::Committed { .. } => home = Some(a),
            ClientResult::Aborted { reason, .. } => aborted.push(reason),
            ClientResult::Failed { reason, .. } => failed.push(reason),
            ClientResult::Rejected(r) => rejected.push(r),
            ClientResult::Busy { partition } => rejected.push(Rejection::NotReady { partition }),
            ClientResult::OutcomeUnknown { reason, .. } => unknown.push(reason),
        }
    }
    if let Some(home) = home.filter(|_| pieces == n - 1) {
        return home;
    }
    if aborted.len() == n {
        // The home piece's reason names the partition whose piece rolled back; a
        // partition's own rollback (an unused item) reads the same everywhere.
        aborted.sort_by_key(|r| r.starts_with("partition "));
        return ClientResult::Aborted { ts, reason: aborted.swap_remove(0) };
    }
    if rejected.len() == n {
        return ClientResult::Rejected(rejected.swap_remove(0));
    }
    let parts = format!("home partition {} and partitions {:?}", m.home, m.remotes);
    if !m.lost.is_empty() {
        // A remote piece may have committed on replicas that are all gone: with no replica
        // left, its partition's state (in full-stack, its log) alone knows.
        let reason = format!(
            "multi-partition transaction ({parts}): partitions {:?} were lost with their replicas before their \
             piece's outcome reached the home partition, which rolled back",
            m.lost
        );
        return ClientResult::OutcomeUnknown { ts, reason: wire::messages::bounded_reason(reason) };
    }
    if unknown.is_empty() && rejected.is_empty() {
        let why = failed.first().or(aborted.first()).cloned().unwrap_or_default();
        let reason = format!("multi-partition transaction ({parts}) committed on some partitions only: {why}");
        return ClientResult::Failed { ts, reason: wire::messages::bounded_reason(reason) };
    }
    let why = unknown.first().cloned().unwrap_or_else(|| format!("{:?}", rejected.first()));
    let reason = format!("multi-partition transaction ({parts}): {why}");
    ClientResult::OutcomeUnknown { ts, reason: wire::messages::bounded_reason(reason) }
}

/// The "outcome unknown" answer to the transaction tagged `tag` (timestamp `ts`).
fn outcome_unknown(tag: ClientRef, ts: Timestamp, reason: String) -> Output {
    Output::Reply {
        client: tag.client,
        reply: ClientReply { request_id: tag.request_id, result: ClientResult::OutcomeUnknown { ts, reason } },
    }
}
