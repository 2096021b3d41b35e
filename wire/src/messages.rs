//! The payloads glass processes exchange — carried by the channel enums of
//! [`crate::channel`], one per direction of each channel — and their types: identifiers, the H-Store style [`Timestamp`], batches of ordered transactions and
//! their per-replica results, client requests and replies, load status, digests, heartbeats.
//!
//! Guarantees:
//! - the hot path carries many transactions per frame: the coordinator sends a partition's
//!   transactions as one [`Batch`], a replica answers with one [`Results`], a client sends
//!   [`crate::channel::ClientToCoordinator::ClientRequests`] and receives
//!   [`crate::channel::CoordinatorToClient::ClientReplies`];
//! - a transaction is identified by its timestamp, which one coordinator never issues twice;
//! - every encoded transaction of a batch and every encoded result fits in
//!   [`TXN_ENTRY_BYTES_MAX`] bytes (checked by tests), so `cluster.toml` validation can prove a
//!   full batch fits in a frame;
//! - the encoding is bincode over serde: an enum variant is encoded by its index, so new
//!   variants are appended at the end of an enum, and any change that alters the encoding of
//!   existing variants (of a channel enum or of a payload) bumps [`PROTOCOL_VERSION`];
//! - TPC-C's input domains (clauses 2.4.1–2.8.1) are checked by [`check_input`], on both sides
//!   of the network: the coordinator refuses an input outside them with
//!   [`Rejection::OutOfDomain`] before anything is sent to a replica, and a replica reports
//!   such an input, or one naming a warehouse its partition does not hold ([`check_held`]),
//!   as failed without running it — so no such input changes anything.

use std::fmt;

use engine::procedures::{
    c_last_number, CustomerSelector, TxnInput, TxnKind, TxnOutput, CARRIERS, CUSTOMERS_PER_DISTRICT, DATE_MAX,
    DATE_MIN, DISTRICTS_PER_WAREHOUSE, H_AMOUNT_MAX_CENTS, H_AMOUNT_MIN_CENTS, ITEMS, OL_QUANTITY_MAX, ORDER_LINES_MAX,
    ORDER_LINES_MIN, THRESHOLD_MAX, THRESHOLD_MIN,
};
use engine::TxnError;
use serde::{Deserialize, Serialize};

/// The protocol version: the first byte of every frame and a field of [`Hello`]. 7: one enum
/// per channel ([`crate::channel`]) instead of one for every message.
pub const PROTOCOL_VERSION: u8 = 7;

/// Longest reason string a message carries (abort reasons, refusals); longer ones are cut at
/// a character boundary by [`bounded_reason`].
pub const REASON_BYTES_MAX: usize = 200;

/// Upper bound on the encoded size of one [`BatchTxn`] and of one [`TxnResult`] (a
/// NewOrder input of 15 lines encodes in ≈160 bytes; an aborted result with the longest reason
/// in ≈225).
pub const TXN_ENTRY_BYTES_MAX: u64 = 256;

/// Upper bound on the encoded size of a [`Batch`] or [`Results`] message without its entries
/// (variant tag, partition, sequence number, entry count, state digest).
pub const BATCH_OVERHEAD_BYTES_MAX: u64 = 64;

/// A node's id, as `cluster.toml` gives it.
pub type NodeId = u16;
/// A partition's id, as `cluster.toml` gives it.
pub type PartitionId = u16;
/// A coordinator's id: the low [`Timestamp::COORDINATOR_BITS`] bits of its timestamps.
pub type CoordinatorId = u8;
/// A TPC-C warehouse id (W_ID, from 1).
pub type WarehouseId = u16;
/// A batch's position in its partition's stream, from 1 (0 means "none yet").
pub type Seq = u64;

/// A transaction's timestamp, as H-Store builds its transaction ids: 64 bits holding the
/// coordinator's milliseconds (high bits), a counter within the millisecond, and the
/// coordinator's id (low bits). Numeric order is (milliseconds, counter, coordinator) order,
/// and replicas execute in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// Bits of milliseconds since the Unix epoch (enough until the year 2248).
    pub const MILLIS_BITS: u32 = 43;
    /// Bits of the per-millisecond counter: 8,192 timestamps per millisecond.
    pub const COUNTER_BITS: u32 = 13;
    /// Bits of the coordinator id.
    pub const COORDINATOR_BITS: u32 = 8;
    /// Largest millisecond value.
    pub const MILLIS_MAX: u64 = (1 << Self::MILLIS_BITS) - 1;
    /// Largest counter value.
    pub const COUNTER_MAX: u64 = (1 << Self::COUNTER_BITS) - 1;

    /// The timestamp of (`millis`, `counter`, `coordinator`).
    ///
    /// Panics if `millis` or `counter` does not fit its field.
    pub fn new(millis: u64, counter: u64, coordinator: CoordinatorId) -> Timestamp {
        assert!(millis <= Self::MILLIS_MAX, "milliseconds {millis} do not fit in {} bits", Self::MILLIS_BITS);
        assert!(counter <= Self::COUNTER_MAX, "counter {counter} does not fit in {} bits", Self::COUNTER_BITS);
        Timestamp(
            (millis << (Self::COUNTER_BITS + Self::COORDINATOR_BITS))
                | (counter << Self::COORDINATOR_BITS)
                | u64::from(coordinator),
        )
    }

    /// The milliseconds field.
    pub fn millis(self) -> u64 {
        self.0 >> (Self::COUNTER_BITS + Self::COORDINATOR_BITS)
    }

    /// The counter field.
    pub fn counter(self) -> u64 {
        (self.0 >> Self::COORDINATOR_BITS) & Self::COUNTER_MAX
    }

    /// The issuing coordinator's id.
    pub fn coordinator(self) -> CoordinatorId {
        (self.0 & ((1 << Self::COORDINATOR_BITS) - 1)) as CoordinatorId
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}@{}", self.millis(), self.counter(), self.coordinator())
    }
}

/// A partition's state digest ([`engine::digest::Digest`]) on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StateDigest(pub u128);

impl From<engine::digest::Digest> for StateDigest {
    fn from(d: engine::digest::Digest) -> StateDigest {
        StateDigest(d.0)
    }
}

impl fmt::Display for StateDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// What kind of process a peer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    Coordinator,
    Node,
    Client,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Coordinator => "coordinator",
            Role::Node => "node",
            Role::Client => "client",
        })
    }
}

/// The first message on every connection, in both directions: who is speaking, in which
/// protocol version, about which cluster. A peer whose version or cluster fingerprint differs
/// is answered with [`crate::channel::Handshake::HelloRefused`] and disconnected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub protocol_version: u8,
    /// The sender's role.
    pub role: Role,
    /// The sender's id in `cluster.toml` (coordinator or node id; a client's own choice).
    pub id: u16,
    /// [`crate::config::ClusterConfig::fingerprint`] of the sender's `cluster.toml`.
    pub config_fingerprint: u64,
}

/// A replica's progress loading its partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoadState {
    /// Loading: `rows_loaded` of about `rows_total` rows inserted.
    Loading { rows_loaded: u64, rows_total: u64 },
    /// Loaded; `digest` is the state digest before any transaction (replicas loaded from one
    /// seed must agree on it).
    Ready { digest: StateDigest },
    /// The load failed.
    Failed { reason: String },
}

/// One transaction of a batch: its timestamp, its input, and which part of it this partition
/// runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchTxn {
    pub ts: Timestamp,
    pub input: TxnInput,
    pub part: Part,
}

impl BatchTxn {
    /// A single-partition transaction, run whole.
    pub fn whole(ts: Timestamp, input: TxnInput) -> BatchTxn {
        BatchTxn { ts, input, part: Part::Whole }
    }
}

/// Which part of a transaction a partition runs (`engine::distributed`): a multi-partition
/// transaction is sent, with one timestamp, to every partition it touches; each runs its
/// piece at that timestamp in its own order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Part {
    /// The whole transaction: it touches this partition only.
    Whole,
    /// A remote piece (NewOrder's supplying warehouse, Payment's customer): it runs without
    /// waiting and sends its reads ([`PieceReads`]) to partition `home`.
    Remote { home: PartitionId },
    /// The home piece: it runs once the reads of `remotes` other partitions arrived.
    Home { remotes: u8 },
}

/// What a remote piece tells the home piece of a multi-partition transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PieceOutcome {
    /// The piece committed; these are its reads.
    Reads(engine::distributed::RemoteReads),
    /// The piece rolled back or failed, changing nothing: the home piece must not commit.
    Aborted { reason: String },
}

impl PieceOutcome {
    /// The remote piece's result as its replica reports it in [`Results`] (replicas of the
    /// partition compare it like any other result).
    pub fn txn_outcome(&self) -> TxnOutcome {
        match self {
            PieceOutcome::Reads(reads) => TxnOutcome::PieceDone { reads_digest: reads_digest(reads) },
            PieceOutcome::Aborted { reason } => TxnOutcome::Aborted { reason: reason.clone() },
        }
    }
}

/// A 64-bit digest of a remote piece's reads.
pub fn reads_digest(reads: &engine::distributed::RemoteReads) -> u64 {
    use engine::distributed::RemoteReads;
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    match reads {
        RemoteReads::Stock(lines) => {
            for l in lines {
                h.update(&[l.line, u8::from(l.s_original)]);
                h.update(&l.dist_info);
            }
        }
        RemoteReads::Customer(c) => h.update(&TxnOutput::Payment(*c).digest().to_le_bytes()),
    }
    h.digest()
}

/// A remote piece's outcome on its way to the home partition (node → coordinator → the home
/// partition's executing replicas).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PieceReads {
    /// The home partition.
    pub home: PartitionId,
    /// The partition that ran the piece.
    pub from: PartitionId,
    pub ts: Timestamp,
    pub outcome: PieceOutcome,
}

/// A partition's transactions in timestamp order, sent to every live replica of the partition.
/// Batches of a partition are numbered 1, 2, 3, … without gaps; the timestamps of batch `n + 1`
/// all follow those of batch `n`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    pub partition: PartitionId,
    pub seq: Seq,
    /// In strictly increasing timestamp order; may be empty when `digest_after` is set.
    pub txns: Vec<BatchTxn>,
    /// Compute the state digest after executing this batch and return it in [`Results`].
    pub digest_after: bool,
}

/// How one transaction ended on one replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOutcome {
    /// Committed with this output.
    Committed(TxnOutput),
    /// Rolled back as TPC-C expects (an unused item in NewOrder) or by concurrency control.
    Aborted { reason: String },
    /// Failed: the input was invalid or the database lacked a row the procedure needs.
    Failed { reason: String },
    /// A remote piece of a multi-partition transaction committed; its reads (sent to the home
    /// partition as [`PieceReads`]) hash to `reads_digest`. The client is answered from the
    /// home piece's outcome.
    PieceDone { reads_digest: u64 },
}

impl TxnOutcome {
    /// The outcome of [`engine::procedures::execute`]'s result.
    pub fn from_result(result: Result<TxnOutput, TxnError>) -> TxnOutcome {
        match result {
            Ok(out) => TxnOutcome::Committed(out),
            Err(e) if e.is_abort() => TxnOutcome::Aborted { reason: bounded_reason(e.to_string()) },
            Err(e) => TxnOutcome::Failed { reason: bounded_reason(e.to_string()) },
        }
    }

    /// The 64-bit result digest replicas compare (as VoltDB compares replicas' results):
    /// [`TxnOutput::digest`] for a commit, a hash of the kind and reason otherwise.
    pub fn digest(&self) -> u64 {
        match self {
            TxnOutcome::Committed(out) => out.digest(),
            TxnOutcome::Aborted { reason } => tagged_hash(b"aborted", reason),
            TxnOutcome::Failed { reason } => tagged_hash(b"failed", reason),
            TxnOutcome::PieceDone { reads_digest } => *reads_digest,
        }
    }
}

fn tagged_hash(tag: &[u8], reason: &str) -> u64 {
    let mut bytes = Vec::with_capacity(tag.len() + 1 + reason.len());
    bytes.extend_from_slice(tag);
    bytes.push(0);
    bytes.extend_from_slice(reason.as_bytes());
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// Cuts `reason` to at most [`REASON_BYTES_MAX`] bytes at a character boundary.
pub fn bounded_reason(mut reason: String) -> String {
    if reason.len() > REASON_BYTES_MAX {
        let mut end = REASON_BYTES_MAX;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    reason
}

/// One transaction's result on one replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnResult {
    pub ts: Timestamp,
    pub outcome: TxnOutcome,
    /// [`TxnOutcome::digest`] of `outcome`, as the replica computed it.
    pub digest: u64,
}

/// A replica's results for one batch: one entry per transaction of the batch, in the batch's
/// order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Results {
    pub partition: PartitionId,
    pub seq: Seq,
    pub results: Vec<TxnResult>,
    /// The state digest after the batch, when the batch asked for it.
    pub state_digest: Option<StateDigest>,
}

/// A client's transaction request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRequest {
    /// Chosen by the client; echoed in the reply.
    pub request_id: u64,
    pub input: TxnInput,
}

/// Why the coordinator refused a request without executing it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Rejection {
    /// The transaction names a warehouse no partition holds.
    #[error("warehouse {warehouse} belongs to no partition of this cluster")]
    UnknownWarehouse { warehouse: WarehouseId },
    /// The input is not a valid TPC-C input.
    #[error("invalid input: {problem}")]
    InvalidInput { problem: String },
    /// The partition's replicas are still loading.
    #[error("partition {partition} is not ready yet (its replicas are loading)")]
    NotReady { partition: PartitionId },
    /// The partition was stopped (its replicas diverged, or failed to load in time).
    #[error("partition {partition} is stopped: {reason}")]
    PartitionStopped { partition: PartitionId, reason: String },
    /// No replica of the partition is alive.
    #[error("partition {partition} has no live replica")]
    NoLiveReplica { partition: PartitionId },
    /// The input lies outside TPC-C's domains (clauses 2.4.1–2.8.1, [`check_input`]).
    #[error("input outside TPC-C's domains: {0}")]
    OutOfDomain(InputError),
}

/// What became of a client's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientResult {
    /// Every live replica committed it with this output.
    Committed { ts: Timestamp, output: TxnOutput },
    /// Every live replica rolled it back.
    Aborted { ts: Timestamp, reason: String },
    /// Every live replica failed it the same way.
    Failed { ts: Timestamp, reason: String },
    /// The partition has too much work in flight: retry later.
    Busy { partition: PartitionId },
    /// Refused without executing.
    Rejected(Rejection),
    /// The transaction may or may not have committed: the primary that executed it failed
    /// before answering, and its effect reached the promoted backup without its result.
    OutcomeUnknown { ts: Timestamp, reason: String },
}

/// The answer to one [`ClientRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientReply {
    pub request_id: u64,
    pub result: ClientResult,
}

/// The answer to a digest request ([`crate::channel::ClientToCoordinator::DigestRequest`],
/// [`crate::channel::ToolRequest::DigestRequest`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DigestOutcome {
    /// Each replica's state digest after batch `seq` (from the coordinator: every live replica
    /// at the same point of the stream; from a replica: its own digest at its current point).
    Digests { seq: Seq, digests: Vec<(NodeId, StateDigest)> },
    /// The partition cannot answer.
    Rejected(Rejection),
    /// Too many digest requests are in flight for the partition: retry later.
    Busy,
}

impl DigestOutcome {
    /// True when there is at least one digest and all are equal.
    pub fn agreed(&self) -> bool {
        match self {
            DigestOutcome::Digests { digests, .. } => {
                digests.first().is_some_and(|(_, first)| digests.iter().all(|(_, d)| d == first))
            }
            DigestOutcome::Rejected(_) | DigestOutcome::Busy => false,
        }
    }
}

/// The log records a shipment carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShippedLog {
    /// The lean kernel's redo records (`engine::redo`): row after-images, checksummed.
    Redo(engine::redo::RedoBatch),
    /// The conventional stack's write-ahead log records, byte for byte as in its log (each
    /// record checksummed); empty when the batch logged nothing.
    Wal(Vec<u8>),
}

/// The log records of one batch, from a partition's primary to its backups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shipment {
    pub partition: PartitionId,
    /// The batch that produced the records; shipments are applied in this order, one each.
    pub seq: Seq,
    pub log: ShippedLog,
}

/// A replica's replication figures, for status displays and `glass compare`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicationReport {
    /// `replica` (active-active), `primary` or `backup` (`coordinator` in its own report).
    pub role: String,
    /// A primary: bytes of shipments sent to backups (each backup counted). The
    /// coordinator: bytes of batches sent to the partition's replicas (each counted).
    pub shipped_bytes: u64,
    /// A primary: shipments acknowledged, the sum and the largest of their ship-to-ack delay
    /// in microseconds (how far backups lag).
    pub acks: u64,
    pub ack_delay_us_sum: u64,
    pub ack_delay_us_max: u64,
    /// A backup: bytes of log records applied.
    pub applied_bytes: u64,
    /// Bytes the replica wrote to its log on disk, and its `fsync` calls (full-stack only).
    pub log_bytes: u64,
    pub fsyncs: u64,
}

/// A process's state, as `glass cluster status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStatus {
    pub role: Role,
    /// The coordinator's or node's id in `cluster.toml`.
    pub id: u16,
    /// The operating system's process id.
    pub pid: u32,
    /// Milliseconds since the process started.
    pub uptime_ms: u64,
    /// The partitions the process serves (the coordinator: every partition; a node: its
    /// replicas), in id order.
    pub partitions: Vec<PartitionReport>,
}

/// One partition as a process sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionReport {
    pub partition: PartitionId,
    /// The coordinator's phase (`loading`, `serving`, `stopped: …`, `unavailable`) or the
    /// replica's (`loading`, `ready`, `failed: …`, `stopped: …`).
    pub phase: String,
    /// A replica's load state (none from the coordinator).
    pub load: Option<LoadState>,
    /// The coordinator: the live replicas; a node: itself.
    pub replicas: Vec<NodeId>,
    /// The coordinator: batches sent; a replica: batches executed.
    pub seq: Seq,
    /// The coordinator: transactions in flight; a replica: transactions committed.
    pub txns: u64,
    /// A replica: CPU milliseconds its executor thread used (and, full-stack, its worker
    /// threads; 0 where unknown, and from the coordinator).
    pub cpu_ms: u64,
    /// A replica: its replication role and figures (default from the coordinator).
    pub replication: ReplicationReport,
}

/// Largest row payload of one [`SnapshotChunk`] (the sender also keeps every frame within
/// `limits.frame_bytes_max`).
pub const SNAPSHOT_CHUNK_BYTES_MAX: usize = 1 << 20;

/// Upper bound on the encoded size of a snapshot chunk message without its row bytes.
pub const SNAPSHOT_CHUNK_OVERHEAD_BYTES_MAX: usize = 128 + REASON_BYTES_MAX;

/// One piece of a partition snapshot: rows of one table, as their fixed-width Pod bytes
/// (`engine::schema`), concatenated. Chunks are numbered from 0 without gaps; a table's rows
/// may span several chunks; the last chunk carries [`SnapshotEnd`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotChunk {
    pub request_id: u64,
    pub partition: PartitionId,
    /// The snapshot shows the state after batch `seq`.
    pub seq: Seq,
    /// Position of the chunk in the stream, from 0.
    pub index: u32,
    /// `engine::schema::TableId` of the rows, as its number.
    pub table: u8,
    /// Rows in `rows_bytes` (its length is `rows` times the table's row size).
    pub rows: u32,
    pub rows_bytes: Vec<u8>,
    /// XXH3-64 of `rows_bytes`, checked by the receiver.
    pub checksum: u64,
    /// Set on the last chunk.
    pub end: Option<SnapshotEnd>,
}

impl SnapshotChunk {
    /// The checksum [`SnapshotChunk::checksum`] must hold for `rows_bytes`.
    pub fn checksum_of(rows_bytes: &[u8]) -> u64 {
        xxhash_rust::xxh3::xxh3_64(rows_bytes)
    }
}

/// A piece of a full-stack primary's log base: the receiver concatenates the pieces (numbered
/// from 0 without gaps) and applies them as one chunk of shipped log, whose records carry
/// their own checksums and LSNs (a damaged, truncated or gapped base is refused whole).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogBaseChunk {
    pub request_id: u64,
    pub partition: PartitionId,
    /// The base ends with batch `seq`: shipments from `seq + 1` follow it.
    pub seq: Seq,
    /// Where the primary's copy of the requester's log ended (the requester cuts its own log
    /// there before recovery); `None`: the primary never was a backup.
    pub fork_lsn: Option<u64>,
    pub index: u32,
    pub records: Vec<u8>,
    /// Set on the last piece.
    pub last: bool,
    /// Set (on a single, last piece) when the node cannot send a base, and why.
    pub refused: Option<String>,
}

/// How a snapshot stream ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotEnd {
    /// Every row was sent: `chunks` chunks (this one included) holding `rows` rows; the
    /// sender's state digest of what it sent is `digest`.
    Complete { chunks: u32, rows: u64, digest: StateDigest },
    /// The snapshot cannot be taken (no such partition here, the replica is loading or
    /// stopped); chunks sent before are void.
    Refused { reason: String },
}

/// A column of a transaction's input, by its TPC-C name; an order line's columns carry the
/// line's OL_NUMBER (from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InputField {
    WId,
    DId,
    CWId,
    CDId,
    CId,
    CLast,
    OOlCnt,
    OlIId { line: u8 },
    OlSupplyWId { line: u8 },
    OlQuantity { line: u8 },
    OEntryD,
    HAmount,
    HDate,
    OCarrierId,
    OlDeliveryD,
    Threshold,
}

impl fmt::Display for InputField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            InputField::WId => "W_ID",
            InputField::DId => "D_ID",
            InputField::CWId => "C_W_ID",
            InputField::CDId => "C_D_ID",
            InputField::CId => "C_ID",
            InputField::CLast => "C_LAST",
            InputField::OOlCnt => "O_OL_CNT",
            InputField::OlIId { line } => return write!(f, "OL_I_ID of line {line}"),
            InputField::OlSupplyWId { line } => return write!(f, "OL_SUPPLY_W_ID of line {line}"),
            InputField::OlQuantity { line } => return write!(f, "OL_QUANTITY of line {line}"),
            InputField::OEntryD => "O_ENTRY_D",
            InputField::HAmount => "H_AMOUNT",
            InputField::HDate => "H_DATE",
            InputField::OCarrierId => "O_CARRIER_ID",
            InputField::OlDeliveryD => "OL_DELIVERY_D",
            InputField::Threshold => "threshold",
        };
        f.write_str(name)
    }
}

/// Every warehouse number (clause 1.2.1: W_ID runs from 1). Which of them exist is the
/// cluster's configuration (the coordinator's router) and, on a replica, its partition
/// ([`check_held`]).
pub const WAREHOUSE_IDS: std::ops::RangeInclusive<WarehouseId> = 1..=WarehouseId::MAX;

/// An input outside TPC-C's domains: one variant per domain, each naming the transaction, the
/// column, the value and what the domain allows. Ranges are inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum InputError {
    /// Not a warehouse number ([`WAREHOUSE_IDS`]: 0): W_ID (clauses 2.4.1.1, 2.5.1.1, 2.6.1.1,
    /// 2.7.1.1, 2.8.1.1), C_W_ID (2.5.1.2), OL_SUPPLY_W_ID (2.4.1.5). A number beyond the
    /// cluster's warehouses is the router's `UnknownWarehouse`; beyond a replica's partition,
    /// [`InputError::NotHeld`].
    #[error("{txn}: {field} {value} is outside {min}..={max}")]
    Warehouse { txn: TxnKind, field: InputField, value: WarehouseId, min: WarehouseId, max: WarehouseId },
    /// A warehouse the checking replica's partition does not hold: the whole transaction, or
    /// the piece of it this partition runs, belongs elsewhere (a partition's population is
    /// its warehouses, `cluster.toml`; the replica reports the error under its partition).
    #[error("{txn}: {field} {value} is not a warehouse this partition holds")]
    NotHeld { txn: TxnKind, field: InputField, value: WarehouseId },
    /// A district number outside 1..=10: D_ID (clauses 2.4.1.2, 2.5.1.2, 2.6.1.2, 2.8.1.1),
    /// C_D_ID (2.5.1.2).
    #[error("{txn}: {field} {value} is outside {min}..={max}")]
    District { txn: TxnKind, field: InputField, value: u8, min: u8, max: u8 },
    /// A customer number outside 1..=3,000: C_ID (clauses 2.4.1.2, 2.5.1.2, 2.6.1.2).
    #[error("{txn}: C_ID {value} is outside {min}..={max}")]
    Customer { txn: TxnKind, value: u32, min: u32, max: u32 },
    /// A customer's last name that is not three syllables of clause 4.3.2.3's table followed
    /// by zero fill (clauses 2.5.1.2, 2.6.1.2: C_LAST is generated per clause 4.3.2.3).
    #[error("{txn}: C_LAST {:?} is not three syllables of clause 4.3.2.3", String::from_utf8_lossy(name))]
    LastName { txn: TxnKind, name: [u8; 16] },
    /// An order line count outside 5..=15: O_OL_CNT (clause 2.4.1.3).
    #[error("NewOrder: O_OL_CNT {value} is outside {min}..={max}")]
    OrderLineCount { value: u8, min: u8, max: u8 },
    /// An item number outside 1..=100,000 (clause 2.4.1.5, item 1: NURand(8191, 1, 100000)),
    /// except on the last line, where a number above 100,000 is the specified "unused value"
    /// of the 1% of NewOrders that roll back (clauses 2.4.1.4, 2.4.1.5) and stays admissible.
    /// 0 is refused everywhere: it is the empty order line of the input's encoding.
    #[error("NewOrder: OL_I_ID {value} of line {line} is outside {min}..={max} (only the last line may name an unused item above {max})")]
    Item { line: u8, value: u32, min: u32, max: u32 },
    /// A quantity outside 1..=10: OL_QUANTITY (clause 2.4.1.5, item 3).
    #[error("NewOrder: OL_QUANTITY {value} of line {line} is outside {min}..={max}")]
    Quantity { line: u8, value: u8, min: u8, max: u8 },
    /// A payment outside 1.00..=5,000.00: H_AMOUNT, in cents (clause 2.5.1.3).
    #[error("Payment: H_AMOUNT {value} cents is outside {min}..={max}")]
    Amount { value: i64, min: i64, max: i64 },
    /// A date outside [`DATE_MIN`]..=[`DATE_MAX`] seconds since the Unix epoch: O_ENTRY_D
    /// (clause 2.4.1.6), H_DATE (2.5.1.4), OL_DELIVERY_D (2.7.1.3) — "the current system date
    /// and time", which these bounds hold.
    #[error("{txn}: {field} {value} is outside {min}..={max} (seconds since the Unix epoch)")]
    Date { txn: TxnKind, field: InputField, value: i64, min: i64, max: i64 },
    /// A carrier outside 1..=10: O_CARRIER_ID (clause 2.7.1.2).
    #[error("Delivery: O_CARRIER_ID {value} is outside {min}..={max}")]
    Carrier { value: u8, min: u8, max: u8 },
    /// A threshold outside 10..=20 (clause 2.8.1.2).
    #[error("StockLevel: threshold {value} is outside {min}..={max}")]
    Threshold { value: i32, min: i32, max: i32 },
}

/// Checks `input` against TPC-C's input domains (clauses 2.4.1, 2.5.1, 2.6.1, 2.7.1, 2.8.1)
/// and the population's sizes (`engine::procedures`: 10 districts a warehouse, 3,000
/// customers a district, 100,000 items); every warehouse it names must be a warehouse number
/// ([`WAREHOUSE_IDS`]) — which ones exist is the caller's to check. The first violation found,
/// in the order of the clause's fields, is returned. Checked on both sides of the network:
/// the coordinator refuses such a request, and a replica reports it as failed rather than
/// run it.
pub fn check_input(input: &TxnInput) -> Result<(), InputError> {
    let txn = input.kind();
    let warehouse = |field, value: WarehouseId| {
        let (min, max) = (*WAREHOUSE_IDS.start(), *WAREHOUSE_IDS.end());
        if WAREHOUSE_IDS.contains(&value) {
            Ok(())
        } else {
            Err(InputError::Warehouse { txn, field, value, min, max })
        }
    };
    let district = |field, value: u8| {
        if (1..=DISTRICTS_PER_WAREHOUSE).contains(&value) {
            Ok(())
        } else {
            Err(InputError::District { txn, field, value, min: 1, max: DISTRICTS_PER_WAREHOUSE })
        }
    };
    let customer = |value: u32| {
        if (1..=CUSTOMERS_PER_DISTRICT).contains(&value) {
            Ok(())
        } else {
            Err(InputError::Customer { txn, value, min: 1, max: CUSTOMERS_PER_DISTRICT })
        }
    };
    let selector = |sel: CustomerSelector| match sel {
        CustomerSelector::ById(c) => customer(c),
        CustomerSelector::ByLastName(name) => match c_last_number(&name) {
            Some(_) => Ok(()),
            None => Err(InputError::LastName { txn, name }),
        },
    };
    let date = |field, value: i64| {
        if (DATE_MIN..=DATE_MAX).contains(&value) {
            Ok(())
        } else {
            Err(InputError::Date { txn, field, value, min: DATE_MIN, max: DATE_MAX })
        }
    };
    match input {
        TxnInput::NewOrder(i) => {
            warehouse(InputField::WId, i.w_id)?;
            district(InputField::DId, i.d_id)?;
            customer(i.c_id)?;
            if !(ORDER_LINES_MIN..=ORDER_LINES_MAX).contains(&usize::from(i.ol_cnt)) {
                let (min, max) = (ORDER_LINES_MIN as u8, ORDER_LINES_MAX as u8);
                return Err(InputError::OrderLineCount { value: i.ol_cnt, min, max });
            }
            for (n, l) in i.lines().iter().enumerate() {
                let line = n as u8 + 1;
                let unused_on_last_line = line == i.ol_cnt && l.i_id > ITEMS;
                if !(1..=ITEMS).contains(&l.i_id) && !unused_on_last_line {
                    return Err(InputError::Item { line, value: l.i_id, min: 1, max: ITEMS });
                }
                warehouse(InputField::OlSupplyWId { line }, l.supply_w_id)?;
                if !(1..=OL_QUANTITY_MAX).contains(&l.quantity) {
                    return Err(InputError::Quantity { line, value: l.quantity, min: 1, max: OL_QUANTITY_MAX });
                }
            }
            date(InputField::OEntryD, i.entry_d)
        }
        TxnInput::Payment(i) => {
            warehouse(InputField::WId, i.w_id)?;
            district(InputField::DId, i.d_id)?;
            warehouse(InputField::CWId, i.c_w_id)?;
            district(InputField::CDId, i.c_d_id)?;
            selector(i.customer)?;
            if !(H_AMOUNT_MIN_CENTS..=H_AMOUNT_MAX_CENTS).contains(&i.h_amount) {
                let (min, max) = (H_AMOUNT_MIN_CENTS, H_AMOUNT_MAX_CENTS);
                return Err(InputError::Amount { value: i.h_amount, min, max });
            }
            date(InputField::HDate, i.date)
        }
        TxnInput::OrderStatus(i) => {
            warehouse(InputField::WId, i.w_id)?;
            district(InputField::DId, i.d_id)?;
            selector(i.customer)
        }
        TxnInput::Delivery(i) => {
            warehouse(InputField::WId, i.w_id)?;
            if !(1..=CARRIERS).contains(&i.o_carrier_id) {
                return Err(InputError::Carrier { value: i.o_carrier_id, min: 1, max: CARRIERS });
            }
            date(InputField::OlDeliveryD, i.date)
        }
        TxnInput::StockLevel(i) => {
            warehouse(InputField::WId, i.w_id)?;
            district(InputField::DId, i.d_id)?;
            if !(THRESHOLD_MIN..=THRESHOLD_MAX).contains(&i.threshold) {
                return Err(InputError::Threshold { value: i.threshold, min: THRESHOLD_MIN, max: THRESHOLD_MAX });
            }
            Ok(())
        }
    }
}

/// Checks that the partition holding the warehouses for which `holds` is true is where `part`
/// of `input` runs: a whole transaction's every warehouse; a home piece's
/// W_ID; for a remote piece, some warehouse other than W_ID (Payment's C_W_ID, a NewOrder
/// line's OL_SUPPLY_W_ID). Assumes [`check_input`] found nothing.
pub fn check_held(input: &TxnInput, part: Part, mut holds: impl FnMut(WarehouseId) -> bool) -> Result<(), InputError> {
    let txn = input.kind();
    let not_held = |(field, value)| InputError::NotHeld { txn, field, value };
    let mut named = warehouse_fields(input);
    let home = named.next().expect("every input names its home warehouse");
    match part {
        Part::Whole => {
            if !holds(home.1) {
                return Err(not_held(home));
            }
            // Most lines are supplied by the home warehouse: look each run up once.
            let mut last_held = home.1;
            for (field, w) in named {
                if w != last_held {
                    if !holds(w) {
                        return Err(not_held((field, w)));
                    }
                    last_held = w;
                }
            }
            Ok(())
        }
        Part::Home { .. } => {
            if holds(home.1) {
                Ok(())
            } else {
                Err(not_held(home))
            }
        }
        Part::Remote { .. } => {
            let mut first_other = None;
            for (field, w) in named.filter(|&(_, w)| w != home.1) {
                first_other.get_or_insert((field, w));
                if holds(w) {
                    return Ok(());
                }
            }
            Err(not_held(first_other.unwrap_or(home)))
        }
    }
}

/// The warehouses `input` names, with their columns: W_ID first, then C_W_ID or each order
/// line's OL_SUPPLY_W_ID. Allocates nothing.
fn warehouse_fields(input: &TxnInput) -> impl Iterator<Item = (InputField, WarehouseId)> + '_ {
    let (home, lines): (WarehouseId, &[engine::procedures::OrderLineInput]) = match input {
        TxnInput::NewOrder(i) => (i.w_id, &i.lines[..usize::from(i.ol_cnt).min(ORDER_LINES_MAX)]),
        TxnInput::Payment(i) => (i.w_id, &[]),
        TxnInput::OrderStatus(i) => (i.w_id, &[]),
        TxnInput::Delivery(i) => (i.w_id, &[]),
        TxnInput::StockLevel(i) => (i.w_id, &[]),
    };
    let customer = match input {
        TxnInput::Payment(i) => Some((InputField::CWId, i.c_w_id)),
        _ => None,
    };
    let supply = lines.iter().enumerate().map(|(n, l)| (InputField::OlSupplyWId { line: n as u8 + 1 }, l.supply_w_id));
    std::iter::once((InputField::WId, home)).chain(customer).chain(supply)
}

/// The warehouses a transaction touches, home first: NewOrder's home and supply warehouses,
/// Payment's home and customer warehouses, the home warehouse of the others. May repeat a
/// warehouse. Assumes [`check_input`] found nothing.
pub fn warehouses_touched(input: &TxnInput) -> impl Iterator<Item = WarehouseId> + '_ {
    warehouse_fields(input).map(|(_, w)| w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::procedures::CustomerSelector::{ById, ByLastName};
    use engine::procedures::{
        DeliveryInput, NewOrderInput, OrderLineInput, OrderStatusInput, PaymentInput, StockLevelInput, C_LAST_SYLLABLES,
    };
    use InputField::*;

    #[test]
    fn timestamp_fields_round_trip_and_order_by_millis_then_counter() {
        let t = Timestamp::new(1_700_000_000_123, 8191, 255);
        assert_eq!((t.millis(), t.counter(), t.coordinator()), (1_700_000_000_123, 8191, 255));
        assert!(Timestamp::new(5, 0, 0) > Timestamp::new(4, 8191, 255));
        assert!(Timestamp::new(5, 2, 0) > Timestamp::new(5, 1, 255));
        assert_eq!(Timestamp::new(Timestamp::MILLIS_MAX, 0, 0).millis(), Timestamp::MILLIS_MAX);
        assert_eq!(t.to_string(), "1700000000123.8191@255");
    }

    #[test]
    #[should_panic(expected = "counter")]
    fn timestamp_rejects_a_counter_too_large() {
        let _ = Timestamp::new(1, Timestamp::COUNTER_MAX + 1, 0);
    }

    #[test]
    fn reasons_are_cut_at_a_char_boundary() {
        let long = "é".repeat(REASON_BYTES_MAX);
        let cut = bounded_reason(long);
        assert!(cut.len() <= REASON_BYTES_MAX);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(bounded_reason("short".into()), "short");
    }

    #[test]
    fn outcome_digests_differ_by_kind() {
        let a = TxnOutcome::Aborted { reason: "x".into() };
        let f = TxnOutcome::Failed { reason: "x".into() };
        assert_ne!(a.digest(), f.digest());
        assert_eq!(a.digest(), a.clone().digest());
    }

    #[test]
    fn warehouses_touched_follow_the_procedure() {
        let mut no = new_order();
        for (l, s) in no.lines.iter_mut().zip([3, 1, 1, 1, 1]) {
            l.supply_w_id = s;
        }
        no.lines[5] = OrderLineInput { i_id: 2, supply_w_id: 9, quantity: 1 }; // beyond ol_cnt
        assert_eq!(warehouses_touched(&TxnInput::NewOrder(no)).collect::<Vec<_>>(), vec![1, 3, 1, 1, 1, 1]);
        let pay = TxnInput::Payment(PaymentInput { w_id: 2, c_w_id: 4, ..payment() });
        assert_eq!(warehouses_touched(&pay).collect::<Vec<_>>(), vec![2, 4]);
    }

    // --- TPC-C's input domains (issue #14, item 6): each boundary just inside is accepted,
    // --- just outside and at the type's extremes is refused with the domain's error.

    /// A date in the domain: 2008-06-10, the load's date.
    const DATE: i64 = 1_213_056_000;

    fn new_order() -> NewOrderInput {
        let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
        for (n, l) in lines.iter_mut().take(ORDER_LINES_MIN).enumerate() {
            *l = OrderLineInput { i_id: n as u32 + 1, supply_w_id: 1, quantity: 1 };
        }
        NewOrderInput { w_id: 1, d_id: 1, c_id: 1, ol_cnt: ORDER_LINES_MIN as u8, lines, entry_d: DATE }
    }

    fn payment() -> PaymentInput {
        PaymentInput { w_id: 1, d_id: 1, c_w_id: 1, c_d_id: 1, customer: ById(1), h_amount: 100, date: DATE }
    }

    fn order_status() -> OrderStatusInput {
        OrderStatusInput { w_id: 1, d_id: 1, customer: ById(1) }
    }

    fn delivery() -> DeliveryInput {
        DeliveryInput { w_id: 1, o_carrier_id: 1, date: DATE }
    }

    fn stock_level() -> StockLevelInput {
        StockLevelInput { w_id: 1, d_id: 1, threshold: 10 }
    }

    fn ok(input: TxnInput) {
        assert_eq!(check_input(&input), Ok(()), "{input:?}");
    }

    fn refused(input: TxnInput) -> InputError {
        match check_input(&input) {
            Err(e) => {
                assert!(e.to_string().len() <= REASON_BYTES_MAX, "a replica's reason keeps the whole error: {e}");
                e
            }
            Ok(()) => panic!("admitted: {input:?}"),
        }
    }

    #[test]
    fn hand_written_inputs_of_these_tests_are_in_domain() {
        ok(TxnInput::NewOrder(new_order()));
        ok(TxnInput::Payment(payment()));
        ok(TxnInput::OrderStatus(order_status()));
        ok(TxnInput::Delivery(delivery()));
        ok(TxnInput::StockLevel(stock_level()));
    }

    /// Clauses 2.4.1.1, 2.5.1.1–2, 2.6.1.1, 2.7.1.1, 2.8.1.1, 2.4.1.5 (item 2): warehouse
    /// numbers start at 1; which exist is the cluster's (router) or partition's (replica).
    #[test]
    fn warehouse_zero_is_refused_in_every_column() {
        let e = |txn, field| InputError::Warehouse { txn, field, value: 0, min: 1, max: WarehouseId::MAX };
        assert_eq!(refused(TxnInput::NewOrder(NewOrderInput { w_id: 0, ..new_order() })), e(TxnKind::NewOrder, WId));
        let mut no = new_order();
        no.lines[4].supply_w_id = 0;
        assert_eq!(refused(TxnInput::NewOrder(no)), e(TxnKind::NewOrder, OlSupplyWId { line: 5 }));
        assert_eq!(refused(TxnInput::Payment(PaymentInput { w_id: 0, ..payment() })), e(TxnKind::Payment, WId));
        assert_eq!(refused(TxnInput::Payment(PaymentInput { c_w_id: 0, ..payment() })), e(TxnKind::Payment, CWId));
        let os = OrderStatusInput { w_id: 0, ..order_status() };
        assert_eq!(refused(TxnInput::OrderStatus(os)), e(TxnKind::OrderStatus, WId));
        assert_eq!(refused(TxnInput::Delivery(DeliveryInput { w_id: 0, ..delivery() })), e(TxnKind::Delivery, WId));
        let sl = StockLevelInput { w_id: 0, ..stock_level() };
        assert_eq!(refused(TxnInput::StockLevel(sl)), e(TxnKind::StockLevel, WId));
        ok(TxnInput::NewOrder(NewOrderInput { w_id: WarehouseId::MAX, ..new_order() }));
    }

    /// Clauses 2.4.1.2, 2.5.1.2, 2.6.1.2, 2.8.1.1: D_ID and C_D_ID within 1..=10.
    #[test]
    fn districts_are_1_to_10() {
        let max = DISTRICTS_PER_WAREHOUSE;
        type Build = fn(u8) -> TxnInput;
        let columns: [(Build, TxnKind, InputField); 5] = [
            (|d| TxnInput::NewOrder(NewOrderInput { d_id: d, ..new_order() }), TxnKind::NewOrder, DId),
            (|d| TxnInput::Payment(PaymentInput { d_id: d, ..payment() }), TxnKind::Payment, DId),
            (|d| TxnInput::Payment(PaymentInput { c_d_id: d, ..payment() }), TxnKind::Payment, CDId),
            (|d| TxnInput::OrderStatus(OrderStatusInput { d_id: d, ..order_status() }), TxnKind::OrderStatus, DId),
            (|d| TxnInput::StockLevel(StockLevelInput { d_id: d, ..stock_level() }), TxnKind::StockLevel, DId),
        ];
        for (build, txn, field) in columns {
            ok(build(1));
            ok(build(max));
            for value in [0, max + 1, u8::MAX] {
                assert_eq!(refused(build(value)), InputError::District { txn, field, value, min: 1, max });
            }
        }
    }

    /// Clauses 2.4.1.2, 2.5.1.2, 2.6.1.2: C_ID within 1..=3,000.
    #[test]
    fn customers_are_1_to_3000() {
        let max = CUSTOMERS_PER_DISTRICT;
        type Build = fn(u32) -> TxnInput;
        let columns: [(Build, TxnKind); 3] = [
            (|c| TxnInput::NewOrder(NewOrderInput { c_id: c, ..new_order() }), TxnKind::NewOrder),
            (|c| TxnInput::Payment(PaymentInput { customer: ById(c), ..payment() }), TxnKind::Payment),
            (|c| TxnInput::OrderStatus(OrderStatusInput { customer: ById(c), ..order_status() }), TxnKind::OrderStatus),
        ];
        for (build, txn) in columns {
            ok(build(1));
            ok(build(max));
            for value in [0, max + 1, u32::MAX] {
                assert_eq!(refused(build(value)), InputError::Customer { txn, value, min: 1, max });
            }
        }
    }

    /// Clauses 2.5.1.2, 2.6.1.2 with 4.3.2.3: a last name is three syllables of the table,
    /// zero-filled; every one of the 1,000 is admitted, anything else refused.
    #[test]
    fn last_names_are_three_syllables_of_clause_4_3_2_3() {
        let field = |text: &[u8]| {
            let mut f = [0u8; 16];
            f[..text.len()].copy_from_slice(text);
            f
        };
        for n in 0..=999usize {
            let text: Vec<u8> =
                [n / 100, n / 10 % 10, n % 10].iter().flat_map(|&d| C_LAST_SYLLABLES[d].to_vec()).collect();
            ok(TxnInput::Payment(PaymentInput { customer: ByLastName(field(&text)), ..payment() }));
            ok(TxnInput::OrderStatus(OrderStatusInput { customer: ByLastName(field(&text)), ..order_status() }));
        }
        let mut junk_after_the_fill = field(b"BARBARBAR");
        junk_after_the_fill[15] = b'X';
        for name in [
            [0u8; 16],
            field(b"BARBAR"),
            field(b"BARBARBARBAR"),
            field(b"barbarbar"),
            field(b"SMITH"),
            field(b"BARBARBA"),
            field(b"BARBARBAR "),
            junk_after_the_fill,
            [0xFF; 16],
        ] {
            let e = refused(TxnInput::Payment(PaymentInput { customer: ByLastName(name), ..payment() }));
            assert_eq!(e, InputError::LastName { txn: TxnKind::Payment, name });
            let e = refused(TxnInput::OrderStatus(OrderStatusInput { customer: ByLastName(name), ..order_status() }));
            assert_eq!(e, InputError::LastName { txn: TxnKind::OrderStatus, name });
        }
    }

    /// Clause 2.4.1.3: O_OL_CNT within 5..=15.
    #[test]
    fn order_line_counts_are_5_to_15() {
        let mut no = new_order();
        for (n, l) in no.lines.iter_mut().enumerate() {
            *l = OrderLineInput { i_id: n as u32 + 1, supply_w_id: 1, quantity: 1 };
        }
        for cnt in [ORDER_LINES_MIN as u8, ORDER_LINES_MAX as u8] {
            ok(TxnInput::NewOrder(NewOrderInput { ol_cnt: cnt, ..no }));
        }
        for value in [0, ORDER_LINES_MIN as u8 - 1, ORDER_LINES_MAX as u8 + 1, u8::MAX] {
            assert_eq!(
                refused(TxnInput::NewOrder(NewOrderInput { ol_cnt: value, ..no })),
                InputError::OrderLineCount { value, min: 5, max: 15 }
            );
        }
    }

    /// Clause 2.4.1.5 (item 1): OL_I_ID within 1..=100,000; the last line may carry the
    /// unused value of the 1% rollback (clause 2.4.1.4), which must stay admissible; 0 never.
    #[test]
    fn items_are_1_to_100000_or_unused_on_the_last_line() {
        let with_item = |line: usize, i_id: u32| {
            let mut no = new_order();
            no.lines[line - 1].i_id = i_id;
            TxnInput::NewOrder(no)
        };
        let last = ORDER_LINES_MIN;
        for line in [1, last] {
            ok(with_item(line, 1));
            ok(with_item(line, ITEMS));
            assert_eq!(
                refused(with_item(line, 0)),
                InputError::Item { line: line as u8, value: 0, min: 1, max: ITEMS }
            );
        }
        for unused in [ITEMS + 1, u32::MAX] {
            ok(with_item(last, unused));
            for line in [1, last - 1] {
                let e = InputError::Item { line: line as u8, value: unused, min: 1, max: ITEMS };
                assert_eq!(refused(with_item(line, unused)), e);
            }
        }
    }

    /// Clause 2.4.1.5 (item 3): OL_QUANTITY within 1..=10.
    #[test]
    fn quantities_are_1_to_10() {
        let with_quantity = |line: usize, quantity: u8| {
            let mut no = new_order();
            no.lines[line - 1].quantity = quantity;
            TxnInput::NewOrder(no)
        };
        for line in [1, ORDER_LINES_MIN] {
            ok(with_quantity(line, 1));
            ok(with_quantity(line, OL_QUANTITY_MAX));
            for value in [0, OL_QUANTITY_MAX + 1, u8::MAX] {
                let e = InputError::Quantity { line: line as u8, value, min: 1, max: 10 };
                assert_eq!(refused(with_quantity(line, value)), e);
            }
        }
    }

    /// Clause 2.5.1.3: H_AMOUNT within 1.00..=5,000.00.
    #[test]
    fn payment_amounts_are_1_00_to_5000_00() {
        let with_amount = |h_amount| TxnInput::Payment(PaymentInput { h_amount, ..payment() });
        ok(with_amount(100));
        ok(with_amount(500_000));
        for value in [0, 99, 500_001, -100, i64::MIN, i64::MAX] {
            assert_eq!(refused(with_amount(value)), InputError::Amount { value, min: 100, max: 500_000 });
        }
    }

    /// Clauses 2.4.1.6, 2.5.1.4, 2.7.1.3: O_ENTRY_D, H_DATE, OL_DELIVERY_D are dates within
    /// DATE_MIN..=DATE_MAX (1970-01-01T00:00:01Z..=9999-12-31T23:59:59Z in seconds).
    #[test]
    fn dates_are_within_the_documented_range() {
        type Build = fn(i64) -> TxnInput;
        let columns: [(Build, TxnKind, InputField); 3] = [
            (|d| TxnInput::NewOrder(NewOrderInput { entry_d: d, ..new_order() }), TxnKind::NewOrder, OEntryD),
            (|d| TxnInput::Payment(PaymentInput { date: d, ..payment() }), TxnKind::Payment, HDate),
            (|d| TxnInput::Delivery(DeliveryInput { date: d, ..delivery() }), TxnKind::Delivery, OlDeliveryD),
        ];
        assert_eq!((DATE_MIN, DATE_MAX), (1, 253_402_300_799));
        for (build, txn, field) in columns {
            ok(build(DATE_MIN));
            ok(build(DATE_MAX));
            for value in [0, -1, DATE_MAX + 1, i64::MIN, i64::MAX] {
                let e = InputError::Date { txn, field, value, min: DATE_MIN, max: DATE_MAX };
                assert_eq!(refused(build(value)), e);
            }
        }
    }

    /// Clause 2.7.1.2: O_CARRIER_ID within 1..=10.
    #[test]
    fn carriers_are_1_to_10() {
        let with_carrier = |o_carrier_id| TxnInput::Delivery(DeliveryInput { o_carrier_id, ..delivery() });
        ok(with_carrier(1));
        ok(with_carrier(CARRIERS));
        for value in [0, CARRIERS + 1, u8::MAX] {
            assert_eq!(refused(with_carrier(value)), InputError::Carrier { value, min: 1, max: 10 });
        }
    }

    /// Clause 2.8.1.2: the threshold within 10..=20.
    #[test]
    fn thresholds_are_10_to_20() {
        let with_threshold = |threshold| TxnInput::StockLevel(StockLevelInput { threshold, ..stock_level() });
        ok(with_threshold(THRESHOLD_MIN));
        ok(with_threshold(THRESHOLD_MAX));
        for value in [0, 9, 21, -10, i32::MIN, i32::MAX] {
            assert_eq!(refused(with_threshold(value)), InputError::Threshold { value, min: 10, max: 20 });
        }
    }

    /// A replica runs only what its partition holds: a whole transaction's every warehouse,
    /// a home piece's W_ID, a remote piece's other warehouses (some of them).
    #[test]
    fn a_partition_runs_only_the_warehouses_it_holds() {
        let holds = |w: WarehouseId| (1..=2).contains(&w);
        let mut no = new_order();
        no.lines[2].supply_w_id = 3;
        let no = TxnInput::NewOrder(no);
        let not_held = |txn, field, value| Err(InputError::NotHeld { txn, field, value });
        let line3 = OlSupplyWId { line: 3 };
        assert_eq!(check_held(&no, Part::Whole, holds), not_held(TxnKind::NewOrder, line3, 3));
        assert_eq!(check_held(&no, Part::Home { remotes: 1 }, holds), Ok(()));
        assert_eq!(check_held(&no, Part::Remote { home: 1 }, |w| w == 3), Ok(()));
        assert_eq!(check_held(&no, Part::Remote { home: 1 }, holds), not_held(TxnKind::NewOrder, line3, 3));
        let here = TxnInput::NewOrder(new_order());
        assert_eq!(check_held(&here, Part::Whole, holds), Ok(()));
        assert_eq!(check_held(&here, Part::Whole, |w| w == 2), not_held(TxnKind::NewOrder, WId, 1));
        let pay = TxnInput::Payment(PaymentInput { w_id: 2, c_w_id: 4, ..payment() });
        assert_eq!(check_held(&pay, Part::Whole, holds), not_held(TxnKind::Payment, CWId, 4));
        assert_eq!(check_held(&pay, Part::Home { remotes: 1 }, holds), Ok(()));
        assert_eq!(check_held(&pay, Part::Remote { home: 1 }, |w| w == 4), Ok(()));
        let dl = TxnInput::Delivery(DeliveryInput { w_id: 5, ..delivery() });
        assert_eq!(check_held(&dl, Part::Whole, holds), not_held(TxnKind::Delivery, WId, 5));
    }

    /// The typed refusal travels to the client whole.
    #[test]
    fn an_out_of_domain_rejection_round_trips() {
        let e = InputError::Threshold { value: i32::MIN, min: THRESHOLD_MIN, max: THRESHOLD_MAX };
        let result = ClientResult::Rejected(Rejection::OutOfDomain(e));
        let msg = crate::channel::CoordinatorToClient::ClientReplies(vec![ClientReply { request_id: 9, result }]);
        let frame = crate::codec::encode(&msg, 1 << 16).unwrap();
        assert_eq!(crate::codec::decode::<crate::channel::CoordinatorToClient>(&frame, 1 << 16).unwrap().0, msg);
        assert_eq!(
            Rejection::OutOfDomain(e).to_string(),
            "input outside TPC-C's domains: StockLevel: threshold -2147483648 is outside 10..=20"
        );
    }
}
