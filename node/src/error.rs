//! Errors of the node crate. A replica refuses what would break determinism — a batch of
//! another partition, timestamps out of order, two different batches under one number — and
//! stops rather than execute it ([`ReplicaError`]). Receiving a snapshot or a log base fails
//! with a [`TransferError`], a stream breaking its rules with the [`SnapshotProblem`] found.

use std::path::PathBuf;

use engine::schema::TableId;
use engine::StorageError;
use wire::endpoint::{EndpointError, RecvError};
use wire::messages::{PartitionId, Seq, StateDigest, Timestamp};

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
    #[error("shipment refused: {problem}; replica stopped")]
    BadShipment { problem: ShipmentProblem },
    /// The conventional stack (full-stack mode) failed at `step`; `problem` is the engine's
    /// error as text (a `ReplicaError` is cloned and compared, the engine's error is neither).
    #[error("conventional stack: {step}: {problem}")]
    FullStack { step: FullStackStep, problem: String },
    /// A rejoining full-stack backup's own log, cut at its fork point, does not leave the state
    /// its primary's log base starts from (docs/design.md §10): the base backup is needed.
    /// Nothing was changed.
    #[error(
        "this node's write-ahead log cut at {cut} does not reach the point the primary's log base starts \
         from (LSN {start}); nothing changed"
    )]
    OwnLogCannotFollow { cut: String, start: u64 },
    /// Restart recovery found no checkpoint to start from.
    #[error(
        "conventional stack: no checkpoint at {} to recover from: this node never loaded the partition in \
         full-stack mode here",
        path.display()
    )]
    NoCheckpoint { path: PathBuf },
    /// Loading the partition failed.
    #[error(transparent)]
    Load(#[from] engine::LoadError),
}

/// Why a backup refused a shipment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShipmentProblem {
    /// The lean kernel refused the redo records.
    #[error(transparent)]
    Redo(#[from] StorageError),
    /// Redo records reached the conventional stack, or its log the lean kernel.
    #[error("log format does not match this replica's storage")]
    Format,
    /// The conventional stack refused its primary's log records (the engine's error as text).
    #[error("{0}")]
    Wal(String),
}

/// What the conventional stack was doing when it failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FullStackStep {
    #[error("empty {}", dir.display())]
    EmptyDir { dir: PathBuf },
    #[error("open the conventional stack")]
    Open,
    #[error("open a session")]
    Session,
    #[error("checkpoint after the load")]
    LoadCheckpoint,
    #[error("ship the log")]
    ShipLog,
    #[error("cut the log")]
    CutLog,
    #[error("restart recovery")]
    Recovery,
    #[error("open a worker session")]
    WorkerSession,
    #[error("start a worker thread")]
    WorkerThread,
    #[error("flush the log")]
    FlushLog,
    #[error("log base")]
    LogBase,
    #[error("checkpoint")]
    Checkpoint,
    #[error("read the checkpoint image")]
    CheckpointImage,
    #[error("install the primary's checkpoint image")]
    InstallImage,
}

/// Why receiving a snapshot or a log base (`crate::snapshot`) failed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// Sending the request failed.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// No answer came: the link failed, timed out or was closed.
    #[error(transparent)]
    Recv(#[from] RecvError),
    /// The node refused the snapshot or log base.
    #[error("{peer} refused: {reason}")]
    Refused { peer: String, reason: String },
    /// A snapshot or log base stream broke one of its rules.
    #[error("snapshot of partition {partition} from {peer}: {problem}")]
    Snapshot { partition: PartitionId, peer: String, problem: SnapshotProblem },
}

/// Which rule of a snapshot or log base stream (`crate::snapshot`) the received stream broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotProblem {
    /// A chunk of another partition than the one asked for.
    #[error("chunk {index} is of partition {got}")]
    WrongPartition { index: u32, got: PartitionId },
    /// Chunks are numbered from 0 without gaps.
    #[error("chunk {got} arrived where chunk {expected} was due")]
    ChunkGap { expected: u32, got: u32 },
    /// Every chunk shows the batch of the first.
    #[error("chunk {index} shows batch {got}, the stream batch {stream}")]
    BatchChanged { index: u32, got: Seq, stream: Seq },
    /// A chunk's rows do not match its checksum.
    #[error("chunk {index}: checksum mismatch")]
    Checksum { index: u32 },
    /// A chunk names no table of the schema.
    #[error("chunk {index}: unknown table {table}")]
    UnknownTable { index: u32, table: u8 },
    /// A chunk's bytes are not its number of whole rows.
    #[error("chunk {index}: {bytes} bytes for {rows} rows of {} ({row_bytes} bytes each)", table.name())]
    RowSize { index: u32, bytes: usize, rows: u32, table: TableId, row_bytes: usize },
    /// The receiving database refused a chunk's rows.
    #[error(transparent)]
    Insert(#[from] InsertError),
    /// The end's totals differ from what arrived.
    #[error("the end announces {chunks} chunks and {rows} rows; {got_chunks} chunks and {got_rows} rows arrived")]
    Totals { chunks: u32, rows: u64, got_chunks: u32, got_rows: u64 },
    /// The rows that arrived are not the state the end's digest names.
    #[error("the end claims state digest {claimed}; the rows that arrived have digest {got}")]
    Digest { claimed: StateDigest, got: StateDigest },
    /// A chunk arrived after the end.
    #[error("chunk {index} arrived after the end")]
    AfterEnd { index: u32 },
    /// Copies of several partitions disagree on the size of the ITEM table they all hold.
    #[error("its ITEM table differs in size from the first partition's")]
    ItemTableDiffers,
    /// Log base pieces are numbered from 0 without gaps, all of the partition asked for.
    #[error(
        "log base piece {got} of partition {got_partition} arrived where piece {expected} of partition {partition} was due"
    )]
    PieceGap { expected: u32, partition: PartitionId, got: u32, got_partition: PartitionId },
    /// Every log base piece shows the batch, fork point and image size of the first.
    #[error("log base piece {index} changes the batch, the fork point or the image size")]
    PieceChanged { index: u32 },
    /// The log base ends before the batch asked for.
    #[error("the log base ends with batch {seq}, before batch {after_seq}")]
    StaleBase { seq: Seq, after_seq: Seq },
    /// A log base came with a checkpoint image that was not asked for, or without one that was.
    #[error("log base piece {index}: a checkpoint image {}", if *asked { "was asked for and is missing" } else { "came unasked" })]
    ImageUnasked { asked: bool, index: u32 },
    /// The log base ended inside its checkpoint image.
    #[error("the log base announces a {image_bytes}-byte checkpoint image but only {got} bytes arrived")]
    ImageTruncated { image_bytes: u64, got: usize },
}

/// A snapshot's rows that the receiving database refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("table {}: {source}", table.name())]
pub struct InsertError {
    pub table: TableId,
    pub source: StorageError,
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
    Transfer(#[from] crate::error::TransferError),
    /// The copy is older than the batch the rejoin starts from.
    #[error("the copy is of batch {got}, before batch {wanted}")]
    Stale { got: Seq, wanted: Seq },
    /// A full-stack log base that does not hold together: its log generation's first record,
    /// or its checkpoint image, is damaged, or they start at different LSNs.
    #[error("the log base does not hold together: {problem}")]
    BadBase { problem: String },
    /// The fetch could not be run.
    #[error("cannot start the fetch thread: {0}")]
    Thread(#[source] std::io::Error),
    /// Restart recovery from this node's own write-ahead log failed.
    #[error("restart recovery failed: {0}")]
    Recovery(#[source] ReplicaError),
}
