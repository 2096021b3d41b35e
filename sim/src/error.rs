//! Errors of the sim crate: why a healed cluster failed a check, or did not heal or drain.
//! Each variant carries what the check found (partitions, nodes, batches, digests), never a
//! preformatted string; its text is the one a failing seed reports.

use coordinator::ClientId;
use coordinator::Event;
use engine::acks::{NewOrderAck, PaymentAck};
use engine::check::CheckReport;
use node::error::InsertError;
use wire::messages::{ClientResult, DigestOutcome, NodeId, PartitionId, Seq, StateDigest};

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
    Violations { count: usize, first: String },
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
    #[error("the cluster did not drain within {deliveries} deliveries")]
    NotDrained { deliveries: usize },
    /// The cluster did not heal.
    #[error("the cluster did not heal in {rounds} rounds:{nodes}")]
    NotHealed { rounds: usize, nodes: String },
    /// A snapshot was asked of a replica that is not lean.
    #[error("simulated replicas are lean")]
    NotLean,
    /// A snapshot's rows could not be inserted into the copy.
    #[error(transparent)]
    Insert(#[from] InsertError),
}
