//! Errors of the sim crate: why a healed cluster failed a check, or did not heal or drain,
//! and the protocol violations the simulated processes saw ([`Violation`]). Each variant
//! carries what the check found (partitions, nodes, batches, digests), never a preformatted
//! string; its text is the one a failing seed reports.

use std::fmt;
use std::sync::Arc;

use coordinator::{ClientId, Event, PartitionStatus};
use engine::acks::{NewOrderAck, PaymentAck};
use engine::check::CheckReport;
use node::{ReplicaError, TransferError};
use wire::channel::CoordinatorToClient;
use wire::messages::{ClientResult, DigestOutcome, NodeId, PartitionId, Seq, StateDigest, Timestamp};

/// Why a simulated cluster failed a check or did not settle.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Some requests were never answered (the first few listed).
    #[error("{answered} of {requests} requests answered; unanswered: {unanswered:?}…")]
    Unanswered { answered: usize, requests: usize, unanswered: Vec<u64> },
    /// A request was answered more than once.
    #[error("client {client} request {id} was answered {times} times (last: {last:?})")]
    AnsweredTwice { client: ClientId, id: u64, times: u32, last: ClientResult },
    /// The simulated processes saw protocol violations.
    #[error("{count} violations; first: {first}")]
    Violations { count: usize, first: Violation },
    /// A divergence, stop, unavailability or load failure was reported.
    #[error("alarm: {0}")]
    Alarm(Event),
    /// An alarm explains a failure found after it.
    #[error("{alarm} ({after})")]
    AlarmBefore { alarm: Box<SimError>, after: Box<SimError> },
    /// The ordered digest request of a partition brought no digests.
    #[error("partition {partition}: no digests: {outcome:?}")]
    NoDigests { partition: PartitionId, outcome: DigestOutcome },
    /// The ordered digest request of a partition brought no reply.
    #[error("partition {partition}: no digest reply")]
    NoDigestReply { partition: PartitionId },
    /// Not every replica of a partition reported its digest.
    #[error("partition {partition}: digests from nodes {nodes:?}, expected every replica {expected:?}")]
    MissingReplicas { partition: PartitionId, nodes: Vec<NodeId>, expected: Vec<NodeId> },
    /// A partition's replicas differ after the same batch.
    #[error("partition {partition}: replicas differ after batch {seq}: {digests:?}")]
    Diverged { partition: PartitionId, seq: Seq, digests: Vec<(NodeId, StateDigest)> },
    /// A replica is not where the coordinator's ordered digest says it is.
    #[error(
        "partition {partition}: node {node} is at batch {at} with digest {digest}, the coordinator reported batch {seq} with {reported}"
    )]
    ReplicaElsewhere {
        partition: PartitionId,
        node: NodeId,
        at: Seq,
        digest: StateDigest,
        seq: Seq,
        reported: StateDigest,
    },
    /// A node holds no (lean) replica of a partition it should serve.
    #[error("partition {partition}: node {node} does not serve")]
    NotServing { partition: PartitionId, node: NodeId },
    /// A replica's final state could not be read.
    #[error("partition {partition} on node {node}: {source}")]
    Storage { partition: PartitionId, node: NodeId, source: engine::StorageError },
    /// An acknowledged NewOrder's ORDER row is missing.
    #[error("acknowledged {ack} is missing from partition {partition}")]
    NewOrderMissing { ack: NewOrderAck, partition: PartitionId },
    /// A district holds more rows the run added than its answered transactions account for:
    /// some transaction ran twice (docs/design.md §11, "Exactly-once answers").
    #[error("district {d} of warehouse {w}: {added} {table} rows added by the run, but only {committed} answered committed and {unknown} of unknown outcome: a transaction ran twice")]
    RanTwice { table: &'static str, w: u16, d: u8, added: u64, committed: u64, unknown: u64 },
    /// An acknowledged Payment's HISTORY row is missing.
    #[error("acknowledged payment {ack:?} has no HISTORY row in partition {partition}")]
    PaymentMissing { ack: PaymentAck, partition: PartitionId },
    /// TPC-C's consistency conditions fail over every partition's final state.
    #[error("TPC-C consistency fails:\n{report}")]
    Inconsistent { report: CheckReport },
    /// A STOCK row disagrees with the ORDER_LINE rows it supplied.
    #[error(
        "STOCK (w {w}, i {i}) disagrees with the ORDER_LINE rows it supplied: [S_YTD, S_ORDER_CNT, S_REMOTE_CNT] minus the lines' sums is {found:?}, loaded {loaded:?} (a NewOrder half applied?)"
    )]
    StockDisagrees { w: u16, i: u32, found: [i64; 3], loaded: [i64; 3] },
    /// A loaded STOCK row is missing.
    #[error("STOCK (w {w}, i {i}) is missing")]
    StockMissing { w: u16, i: u32 },
    /// The cluster did not drain.
    #[error("the cluster did not drain within {deliveries} deliveries ({in_flight} messages deliverable):{}", Described { nodes, coordinator })]
    NotDrained { deliveries: usize, in_flight: usize, nodes: Vec<NodeReport>, coordinator: Vec<PartitionStatus> },
    /// The cluster did not heal.
    #[error("the cluster did not heal in {rounds} rounds:{}", Described { nodes, coordinator })]
    NotHealed { rounds: usize, nodes: Vec<NodeReport>, coordinator: Vec<PartitionStatus> },
    /// Node `node`'s process ran, linked to the leader, while the leader counted it failed,
    /// when the heal looked: nothing would tell it to rejoin.
    #[error("node {node}'s process is linked to the leader, which counts it failed: it cannot learn it must rejoin")]
    FailedButLinked { node: NodeId },
    /// A snapshot was asked of a replica that is not lean.
    #[error("simulated replicas are lean")]
    NotLean,
    /// The copy's snapshot stream broke a rule (`node::snapshot::SnapshotReceiver`).
    #[error(transparent)]
    Transfer(#[from] TransferError),
}

/// A protocol violation the simulated processes saw.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Violation {
    /// The coordinator sent a client something a client is never sent.
    #[error("unexpected message to a client: {msg:?}")]
    UnexpectedToClient { msg: CoordinatorToClient },
    /// A replica of the active-active simulated cluster shipped a batch.
    #[error("node {node}: an active-active replica shipped batch {seq}")]
    Shipped { node: NodeId, seq: Seq },
    /// The coordinator sent a node a message the simulated cluster never needs.
    #[error("node {node}: unexpected message {name}")]
    UnexpectedMessage { node: NodeId, name: &'static str },
    /// A message for a partition the node holds no slot of.
    #[error("node {node}: a message for partition {partition}, which it does not hold")]
    UnheldPartition { node: NodeId, partition: PartitionId },
    /// A serving replica refused a message (other than by being stopped).
    #[error("node {node} partition {partition}: {error}")]
    Refused { node: NodeId, partition: PartitionId, error: ReplicaError },
    /// A rejoining replica's copy could not be made.
    #[error("node {node} partition {partition}: a bad snapshot chunk: {error}")]
    BadSnapshot { node: NodeId, partition: PartitionId, error: Arc<SimError> },
    /// A rejoining replica's copy has another digest than its source.
    #[error("node {node} partition {partition}: the copy differs from its source")]
    CopyDiffers { node: NodeId, partition: PartitionId },
    /// A rejoined replica refused a message it held while rejoining.
    #[error("node {node} partition {partition} (rejoining): {error}")]
    RefusedRejoining { node: NodeId, partition: PartitionId, error: ReplicaError },
    /// An invariant checked at every step broke (docs/design.md §14).
    #[error("step {step}: {invariant}: {detail}")]
    Invariant { step: u64, invariant: crate::cluster::Invariant, detail: String },
    /// A membership names a replica more than once.
    #[error("node {node}: partition {partition}'s membership names a replica twice: {live:?}")]
    MembershipRepeats { node: NodeId, partition: PartitionId, live: Vec<NodeId> },
    /// A coordinator's carrier asked its process to stop (its state could not be stored).
    #[error("coordinator {coordinator} stopped: {reason}")]
    CoordinatorStopped { coordinator: wire::messages::CoordinatorId, reason: String },
}

/// One simulated node as a cluster that did not heal left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport {
    pub id: NodeId,
    /// Whether its process runs.
    pub up: bool,
    /// Its current link and whether it is connected.
    pub link: u64,
    pub link_alive: bool,
    /// Whether the coordinator counts it live.
    pub live: bool,
    pub slots: Vec<(PartitionId, SlotReport)>,
    /// The backups each partition this node is primary of ships to, and how many batches'
    /// results its gate holds for their acknowledgements.
    pub shipping_to: Vec<(PartitionId, Vec<NodeId>, usize)>,
}

/// What a node held for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotReport {
    Serving { seq: Seq, waiting: usize, stopped: bool, parked_at: Option<Timestamp> },
    Joining { plan: Option<(NodeId, Seq)>, held: usize },
    GaveUp,
}

impl fmt::Display for SlotReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlotReport::Serving { seq, waiting, stopped, parked_at } => {
                write!(f, "serving at batch {seq} ({waiting} waiting")?;
                if *stopped {
                    write!(f, ", stopped")?;
                }
                if let Some(ts) = parked_at {
                    write!(f, ", parked at the home piece of {ts:?}")?;
                }
                write!(f, ")")
            }
            SlotReport::Joining { plan, held } => write!(f, "joining, plan {plan:?}, {held} held"),
            SlotReport::GaveUp => write!(f, "gave up"),
        }
    }
}

impl fmt::Display for NodeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {}: {}, link {} {}, coordinator: {}; ",
            self.id,
            if self.up { "up" } else { "crashed" },
            self.link,
            if self.link_alive { "connected" } else { "broken" },
            if self.live { "live" } else { "failed" },
        )?;
        for (i, (p, slot)) in self.slots.iter().enumerate() {
            if i > 0 {
                write!(f, "; ")?;
            }
            write!(f, "p{p} {slot}")?;
        }
        for (p, backups, held) in &self.shipping_to {
            write!(f, "; p{p} ships to {backups:?} ({held} results held)")?;
        }
        Ok(())
    }
}

/// Every node, then the coordinator's partitions, one line each.
pub struct Described<'a> {
    pub nodes: &'a [NodeReport],
    pub coordinator: &'a [PartitionStatus],
}

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for n in self.nodes {
            write!(f, "\n  {n}")?;
        }
        write!(f, "\n  coordinator: ")?;
        for (i, s) in self.coordinator.iter().enumerate() {
            if i > 0 {
                write!(f, "; ")?;
            }
            write!(f, "p{} {:?} sent {} inflight {}", s.partition, s.phase, s.batches_sent, s.inflight_txns)?;
        }
        Ok(())
    }
}
