//! Errors of the wire crate: reading and validating `cluster.toml` ([`ConfigError`] with the
//! [`Problem`] it found, [`UnknownName`] for a mode or shipping named on a command line),
//! framing messages ([`CodecError`]) and comparing Hellos ([`HelloMismatch`]). Expected outcomes — an
//! incomplete frame, an oversized one, a peer on another protocol version — are variants the
//! caller matches on, never strings.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::messages::{CoordinatorId, NodeId, PartitionId};

/// Why `cluster.toml` cannot be used. Every variant names the field it is about (a path such
/// as `partitions[1].replicas`) and says what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The text is not TOML, or does not fit the schema (an unknown key, a missing field, a
    /// value of the wrong type).
    #[error("{field}: {message} (line {line}, column {column})")]
    Parse { field: String, message: String, line: usize, column: usize },
    /// The file parses but describes an unusable cluster.
    #[error("{field}: {problem}")]
    Invalid { field: String, problem: Problem },
    /// An address names no usable socket address.
    #[error("{field}: cannot resolve `{address}`: {reason}")]
    Resolve { field: String, address: String, reason: String },
    /// An address of a process to be started here cannot be bound (another process holds it,
    /// or it is not an address of this machine).
    #[error("{field}: cannot bind {address}")]
    PortInUse {
        field: String,
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

impl ConfigError {
    /// The field an error is about (the file for [`ConfigError::Read`]).
    pub fn field(&self) -> String {
        match self {
            ConfigError::Read { path, .. } => path.display().to_string(),
            ConfigError::Parse { field, .. }
            | ConfigError::Invalid { field, .. }
            | ConfigError::Resolve { field, .. }
            | ConfigError::PortInUse { field, .. } => field.clone(),
        }
    }

    /// The validation problem, when this is one.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            ConfigError::Invalid { problem, .. } => Some(problem),
            _ => None,
        }
    }
}

/// What validation found wrong with a field of `cluster.toml`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("the cluster needs at least one node")]
    NoNodes,
    #[error("the cluster needs at least one partition")]
    NoPartitions,
    #[error("the cluster needs a coordinator: a [coordinator] table or [[coordinators]] entries")]
    NoCoordinators,
    #[error("coordinator id {coordinator} is also used by {other}")]
    DuplicateCoordinatorId { coordinator: CoordinatorId, other: String },
    #[error("partition {partition} has no replicas")]
    NoReplicas { partition: PartitionId },
    #[error("node {node} holds two replicas of partition {partition}")]
    DuplicateReplica { node: NodeId, partition: PartitionId },
    #[error("node {node} is not one of the nodes listed in [[nodes]]")]
    UnknownNode { node: NodeId },
    #[error("node id {node} is also used by {other}")]
    DuplicateNodeId { node: NodeId, other: String },
    #[error("partition id {partition} is also used by {other}")]
    DuplicatePartitionId { partition: PartitionId, other: String },
    #[error("address {address} is also used by {other}")]
    DuplicateAddress { address: String, other: String },
    #[error("`{address}` is not host:port ({why})")]
    BadAddress { address: String, why: &'static str },
    #[error("lists no CPU: name at least one, or leave `cpus` out to let the kernel place the node's threads")]
    NoCpus,
    #[error("lists {count} CPUs; at most {max}")]
    TooManyCpus { count: usize, max: usize },
    #[error("CPU index {cpu} is past the kernel's CPU set (indices run below {size})")]
    CpuOutOfRange { cpu: usize, size: usize },
    #[error("CPU index {cpu} is listed twice")]
    DuplicateCpu { cpu: usize },
    #[error("warehouse ids start at 1")]
    WarehouseZero,
    #[error("first warehouse {first} is after last warehouse {last}")]
    EmptyWarehouseRange { first: u16, last: u16 },
    #[error("warehouses {first}..={last} overlap warehouses {other_first}..={other_last} of {other}")]
    OverlappingWarehouses { first: u16, last: u16, other: String, other_first: u16, other_last: u16 },
    #[error(
        "warehouses {missing_first}..={missing_last} belong to no partition; the partitions must cover \
         1..={total} without gaps"
    )]
    WarehouseGap { missing_first: u16, missing_last: u16, total: u16 },
    #[error("must be at least 1")]
    Zero,
    #[error(
        "is empty: name a directory (a relative path is relative to the directory holding cluster.toml; \".\" is \
         that directory itself)"
    )]
    EmptyPath,
    #[error(
        "`{value}` holds `{found:?}`: a remote directory may hold only letters, digits and `._-/+@:=,` (a relative \
         one is relative to the remote user's home)"
    )]
    BadRemoteDir { value: String, found: char },
    #[error("`{value}` is not a usable SSH destination: {why}")]
    BadSsh { value: String, why: &'static str },
    #[error(
        "is absolute ({path}), but processes run on other hosts (an `ssh` key): make it relative to the \
         directory holding cluster.toml, as it is on every host"
    )]
    AbsoluteWithSsh { path: String },
    #[error("{value} is more than limits.inflight_txns_max ({inflight_txns_max}): a batch could never be admitted")]
    BatchAboveInflight { value: u32, inflight_txns_max: u32 },
    #[error(
        "a batch of {batch_txns_max} transactions may need {needed_bytes} bytes, more than \
         limits.frame_bytes_max ({frame_bytes_max})"
    )]
    BatchAboveFrame { batch_txns_max: u32, needed_bytes: u64, frame_bytes_max: u32 },
    #[error("{value} is below the smallest frame the protocol needs ({min})")]
    FrameTooSmall { value: u32, min: u32 },
    #[error("{value} is above the largest frame any build accepts ({ceiling})")]
    FrameTooLarge { value: u32, ceiling: u32 },
    #[error(
        "{value} ms is less than twice timeouts.heartbeat_ms ({heartbeat_ms} ms): one late heartbeat would fail a node"
    )]
    FailureTimeoutTooShort { value: u64, heartbeat_ms: u64 },
    #[error("{value} is outside {min}..={max}")]
    OutOfRange { value: u64, min: u64, max: u64 },
    #[error("a replication factor of {factor} needs at least {factor} nodes; the cluster has {nodes}")]
    ReplicationFactor { factor: usize, nodes: usize },
}

/// Why bytes could not become a message, or a message could not become a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The buffer holds only part of a frame: `needed_bytes` in all are needed to go on (the
    /// 4-byte length prefix first, then the whole frame). Not a failure: read more.
    #[error("incomplete frame: {have_bytes} of {needed_bytes} bytes")]
    Incomplete { have_bytes: usize, needed_bytes: usize },
    /// The frame (length prefix included) is larger than the limit: the peer is broken or
    /// hostile, and the connection should be closed without reading the body.
    #[error("frame of {frame_bytes} bytes exceeds the limit of {frame_bytes_max} bytes")]
    TooLarge { frame_bytes: u64, frame_bytes_max: usize },
    /// The frame's length is zero: it lacks even the version byte.
    #[error("empty frame: no version byte")]
    Empty,
    /// The peer speaks another protocol version.
    #[error("protocol version {got} is not this build's version {expected}")]
    Version { got: u8, expected: u8 },
    /// The frame's variant tag names no message of the channel it arrived on (a message of
    /// another channel, or of another build).
    #[error("tag {tag} is no message of the {channel} channel")]
    UnknownTag { channel: &'static str, tag: u32 },
    /// The body is not a valid encoding of a message.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// The body decoded as a message with bytes left over.
    #[error("{extra_bytes} bytes follow the message inside its frame")]
    TrailingBytes { extra_bytes: usize },
    /// The message could not be encoded (a bug: every message type is encodable).
    #[error("cannot encode message: {0}")]
    Encode(String),
}

/// A name that is none of a setting's values (`--mode`, `shipping`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{name}`; valid: {valid}")]
pub struct UnknownName {
    /// The setting (`mode`, `shipping`).
    pub what: &'static str,
    pub name: String,
    /// The valid names, comma-separated.
    pub valid: &'static str,
}

/// Why a peer's Hello does not match this process's: the connection is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloMismatch {
    /// The peer speaks another protocol version.
    #[error("protocol version {theirs} is not this build's version {ours}")]
    Version { theirs: u8, ours: u8 },
    /// The peer runs from another `cluster.toml`.
    #[error(
        "cluster.toml fingerprint {theirs:016x} differs from this process's {ours:016x} (another cluster, or an \
         edited cluster.toml)"
    )]
    Fingerprint { theirs: u64, ours: u64 },
}
