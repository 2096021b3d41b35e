//! Errors of the node crate. A replica refuses what would break determinism — a batch of
//! another partition, timestamps out of order, two different batches under one number — and
//! stops rather than execute it.

use wire::messages::{PartitionId, Seq, Timestamp};

/// Why a replica refused a message or stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaError {
    /// The message is for another partition.
    #[error("message for partition {got} reached the replica of partition {expected}")]
    WrongPartition { expected: PartitionId, got: PartitionId },
    /// The batch is too far ahead of the next one to execute: holding it would exceed
    /// `limits.replica_pending_batches_max`.
    #[error("batch {seq} is too far ahead of batch {next_seq} (at most {pending_batches_max} batches may wait)")]
    TooFarAhead { seq: Seq, next_seq: Seq, pending_batches_max: usize },
    /// A batch's timestamps do not follow those already executed: executing it would order
    /// this replica differently from the others. The replica stops.
    #[error("batch {seq}: timestamp {ts} does not follow {last}; replica stopped")]
    TimestampRegression { seq: Seq, ts: Timestamp, last: Timestamp },
    /// Two different batches arrived with the same number. The replica stops.
    #[error("two different batches numbered {seq}; replica stopped")]
    ConflictingDuplicate { seq: Seq },
    /// The replica was stopped (by the coordinator after a divergence, or by an error above).
    #[error("replica stopped: {reason}")]
    Stopped { reason: String },
    /// A message a replica does not handle.
    #[error("a replica does not handle {what}")]
    Unexpected { what: &'static str },
    /// A shipment of log records could not be applied (checksum, format, or a record that
    /// does not fit the backup's state). The backup stops.
    #[error("shipment refused: {why}; replica stopped")]
    BadShipment { why: String },
    /// The conventional stack (full-stack mode) failed.
    #[error("conventional stack: {what}")]
    FullStack { what: String },
    /// Loading the partition failed.
    #[error(transparent)]
    Load(#[from] workload::error::LoadError),
}

/// Why a rejoining replica could not get its starting state (a copy of a live replica, or a
/// full-stack primary's log base) or recover its own: each is retried or reported, and the
/// rejoin given up after too many.
#[derive(Debug, thiserror::Error)]
pub enum RejoinError {
    /// The node to fetch from is not in `cluster.toml`.
    #[error("no node {node} in cluster.toml")]
    UnknownNode { node: wire::messages::NodeId },
    /// Its address is not usable.
    #[error("nodes[{node}].address: {problem}")]
    Address { node: wire::messages::NodeId, problem: wire::Problem },
    #[error(transparent)]
    Config(#[from] wire::ConfigError),
    #[error("cannot read the node's certificates: {0}")]
    Tls(#[from] wire::tls::TlsError),
    #[error(transparent)]
    Endpoint(#[from] wire::endpoint::EndpointError),
    /// The transfer failed or was refused (checksums, gaps, a refusal, a timeout).
    #[error(transparent)]
    Transfer(#[from] workload::client::ClientError),
    /// The copy is older than the batch the rejoin starts from.
    #[error("the copy is of batch {got}, before batch {wanted}")]
    Stale { got: Seq, wanted: Seq },
    /// The fetch could not be run.
    #[error("cannot start the fetch thread: {0}")]
    Thread(#[source] std::io::Error),
    /// Restart recovery from this node's own write-ahead log failed.
    #[error("restart recovery failed: {0}")]
    Recovery(#[source] ReplicaError),
}
