//! The payloads glass processes exchange — carried by the channel enums of
//! [`crate::channel`], one per direction of each channel — and their types: identifiers, the H-Store style [`Timestamp`], batches of ordered transactions and
//! their per-replica results, client requests and replies, load status, digests, heartbeats.
//!
//! Guarantees:
//! - the hot path carries many transactions per frame: the coordinator sends a partition's
//!   transactions as one [`Batch`], a replica answers with one [`Results`] (or, when the
//!   batch names another replica to send the outputs, one [`ResultsDigest`]), a client sends
//!   [`crate::channel::ClientToCoordinator::ClientRequests`] and receives
//!   [`crate::channel::CoordinatorToClient::ClientReplies`];
//! - a transaction is identified by its timestamp, which one coordinator never issues twice;
//! - every encoded transaction of a batch and every encoded result fits in
//!   [`TXN_ENTRY_BYTES_MAX`] bytes (checked by tests), so `cluster.toml` validation can prove a
//!   full batch fits in a frame;
//! - the encoding is bincode over serde: an enum variant is encoded by its index, so new
//!   variants are appended at the end of an enum, and any change that alters the encoding of
//!   existing variants (of a channel enum or of a payload) bumps [`PROTOCOL_VERSION`];
//! - TPC-C's input domains (clauses 2.4.1–2.8.1) are checked by `engine::input::check_input`,
//!   on both sides of the network: the coordinator refuses an input outside them with
//!   [`Rejection::OutOfDomain`] before anything is sent to a replica, and a replica reports
//!   such an input, or one naming a warehouse its partition does not hold
//!   (`engine::input::check_held`), as failed without running it — so no such input changes
//!   anything.

use std::fmt;

use engine::input::InputError;
use engine::procedures::{TxnInput, TxnOutput};
use engine::TxnError;
use serde::{Deserialize, Serialize};

/// The protocol version: the first byte of every frame and a field of [`Hello`]. 7: one enum
/// per channel ([`crate::channel`]) instead of one for every message; 8: status reports carry
/// a typed [`PartitionPhase`] and [`ReplicationRole`]; 11: the coordinator group's channel,
/// and a coordinator's status names the leader it knows; 12: a batch's state digest comes
/// apart from its [`Results`], in `NodeToCoordinator::StateDigest`; 13: a status report's
/// partitions carry their latency buckets; 15: requests carry a [`RequestId`] (the client's id
/// and sequence number), which batches carry on to the replicas, and a new leader recalls
/// outcomes from them (docs/design.md §11, "Exactly-once answers"); 16: a batch names the
/// replica that sends its outputs ([`Batch::answerer`]), the others send their digest alone
/// ([`ResultsDigest`]; docs/design.md §10, "One replica answers").
pub const PROTOCOL_VERSION: u8 = 16;

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
/// A leading coordinator's epoch: its raft term in the coordinator group (docs/design.md §11).
pub type Epoch = u64;
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
pub enum PeerKind {
    Coordinator,
    Node,
    Client,
}

impl fmt::Display for PeerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PeerKind::Coordinator => "coordinator",
            PeerKind::Node => "node",
            PeerKind::Client => "client",
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
    /// The sender's kind of process.
    pub role: PeerKind,
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
    /// The request it answers ([`RequestId::NONE`] for one no client can ask again about).
    pub id: RequestId,
}

impl BatchTxn {
    /// A single-partition transaction, run whole, that no client can ask again about.
    pub fn whole(ts: Timestamp, input: TxnInput) -> BatchTxn {
        BatchTxn { ts, input, part: Part::Whole, id: RequestId::NONE }
    }
}

/// A client request's identity (docs/design.md §11, "Exactly-once answers"): the client's own
/// id, drawn at random once per client, and the client's sequence number for the request.
/// A client that lost an answer asks again with the same id, and is answered the original
/// outcome; the transaction never runs twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct RequestId {
    pub client: u64,
    pub seq: u64,
}

impl RequestId {
    /// No identity: a transaction no client can ask again about (client 0 is never drawn).
    pub const NONE: RequestId = RequestId { client: 0, seq: 0 };

    /// Whether this is an identity a client can ask again about.
    pub fn is_some(self) -> bool {
        self.client != 0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request {} of client {:016x}", self.seq, self.client)
    }
}

/// A remembered outcome a replica recalled for a new leader ([`crate::channel::control::NodeToCoordinator::Recalled`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecalledOutcome {
    pub id: RequestId,
    pub ts: Timestamp,
    /// What it returned; `None` when it ran and its outcome was lost: a full-stack partition
    /// back alone from its log found its commit record, and does not run it again.
    pub outcome: Option<TxnOutcome>,
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
    /// The replica that sends the batch's outputs in full ([`Results`]); every other replica
    /// sends their digest alone ([`ResultsDigest`]) and keeps them for the coordinator to ask
    /// again. `None`: every replica sends them (docs/design.md §10, "One replica answers").
    pub answerer: Option<NodeId>,
}

impl Batch {
    /// Whether `node` sends this batch's outputs in full.
    pub fn answered_by(&self, node: NodeId) -> bool {
        self.answerer.is_none_or(|a| a == node)
    }
}

/// Where one replica of a partition stands, as it tells a new leader (docs/design.md §11,
/// take-over). Its batches are numbered as every replica of the partition numbers them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaStanding {
    pub role: ReplicationRole,
    /// Every batch through this one is executed (a backup: applied).
    pub executed_seq: Seq,
    /// Every batch through this one is held in order — executed, under way, or waiting right
    /// behind (at least `executed_seq`). Batches past a gap were dropped at the take-over.
    pub held_seq: Seq,
    /// The oldest batch this replica can still send to the new leader (it keeps its recent
    /// batches); `held_seq + 1` when it can send none.
    pub kept_from: Seq,
    /// The latest timestamp of any batch held or executed.
    pub last_ts: Option<Timestamp>,
    /// The replica stopped (diverged, or failed): it holds nothing the leader may use.
    pub stopped: bool,
    /// Remote pieces' outcomes it holds for home pieces it has not run yet (forwarded by
    /// the old leader): the new leader forwards these, never others, to the replicas that
    /// lack them, so every replica runs a home piece with the same outcome.
    pub held_reads: Vec<PieceReads>,
    /// A backup: the multi-partition pieces of the recent shipments it applied (at most one
    /// entry per batch, for the last [`RECENT_SHIPMENTS_KEPT`] batches that had any), as
    /// batches holding only those pieces. Empty for a replica that executes (its batches
    /// come in `HeldBatches`).
    pub pieces: Vec<Batch>,
}

/// Shipments' multi-partition pieces a backup keeps for a new leader
/// ([`ReplicaStanding::pieces`]).
pub const RECENT_SHIPMENTS_KEPT: usize = 256;

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
/// order. The state digest a batch asks for ([`Batch::digest_after`]) comes apart, in
/// [`crate::channel::control::NodeToCoordinator::StateDigest`]: taken from a copy of the state
/// after the batch, it is ready long after these results answer the clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Results {
    pub partition: PartitionId,
    pub seq: Seq,
    pub results: Vec<TxnResult>,
}

impl Results {
    /// The digest of these outputs that replicas compare ([`outputs_digest`]).
    pub fn digest(&self) -> ResultsDigest {
        let digest = outputs_digest(&self.results);
        ResultsDigest { partition: self.partition, seq: self.seq, count: self.results.len() as u32, digest }
    }
}

/// A digest of a batch's outputs on one replica: of each transaction's timestamp and result
/// digest ([`TxnOutcome::digest`]), in batch order. Two replicas' outputs agree when their
/// digests are equal (but for a 64-bit collision): VoltDB compares hashes of results the same
/// way.
pub fn outputs_digest(results: &[TxnResult]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for r in results {
        h.update(&r.ts.0.to_le_bytes());
        h.update(&r.digest.to_le_bytes());
    }
    h.digest()
}

/// A replica's report of a batch whose outputs another replica sends ([`Batch::answerer`]):
/// how many results it has and their [`outputs_digest`]. The replica keeps the outputs, and
/// sends them in full when the coordinator asks
/// ([`crate::channel::control::CoordinatorToNode::SendResults`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultsDigest {
    pub partition: PartitionId,
    pub seq: Seq,
    pub count: u32,
    pub digest: u64,
}

/// A client's transaction request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRequest {
    /// The client's sequence number for the request; echoed in the reply.
    pub request_id: u64,
    /// The client's id, drawn at random once per client (never 0); with `request_id`, the
    /// request's [`RequestId`]. Client 0 has no identity: it cannot ask again about a request.
    pub client: u64,
    /// The client sent this request before and lost its answer (its connection, or its
    /// leader, died): the leader answers the original outcome if it ran, and runs it only if
    /// it never did (docs/design.md §11, "Exactly-once answers").
    pub retry: bool,
    /// The latest timestamp of any answer the client had received when it first sent the
    /// request (0 before any): if the request ever ran, it ran after this.
    pub not_before: Timestamp,
    pub input: TxnInput,
}

impl ClientRequest {
    /// A first request: sequence number `request_id` of client `client`.
    pub fn new(client: u64, request_id: u64, not_before: Timestamp, input: TxnInput) -> ClientRequest {
        ClientRequest { request_id, client, retry: false, not_before, input }
    }

    /// The request's identity.
    pub fn id(&self) -> RequestId {
        RequestId { client: self.client, seq: self.request_id }
    }
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
    /// The input lies outside TPC-C's domains (clauses 2.4.1–2.8.1, `engine::input::check_input`).
    #[error("input outside TPC-C's domains: {0}")]
    OutOfDomain(InputError),
    /// This coordinator does not lead (docs/design.md §11): `leader` does, as far as it knows
    /// (itself while it takes over: ask again shortly), or none is known yet.
    #[error("this coordinator does not lead{}", match leader { Some(c) => format!(" (coordinator {c} does)"), None => " (no leader is known yet)".to_string() })]
    NotLeader { leader: Option<CoordinatorId> },
    /// A retried request whose outcome is no longer remembered: it may have run before
    /// `remembered_after`, the oldest timestamp the partition's replicas still remember
    /// outcomes after, and it is not run again (docs/design.md §11, "Exactly-once answers").
    #[error("{id}: its outcome is forgotten (it was first sent after timestamp {not_before}, and partition {partition}'s replicas remember outcomes only after {remembered_after}); it is not run again")]
    OutcomeForgotten { id: RequestId, partition: PartitionId, not_before: Timestamp, remembered_after: Timestamp },
    /// A retry without a client id ([`ClientRequest::client`] 0): nothing can tell whether it
    /// ran, so it is not run.
    #[error("a retried request must carry a client id (client 0 cannot ask again)")]
    RetryWithoutId,
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
    /// The primary that shipped it: a backup applies shipments only from a node its latest
    /// membership names live (a deposed primary's are dropped, docs/design.md §11).
    pub primary: NodeId,
    /// The batch that produced the records; shipments are applied in this order, one each.
    pub seq: Seq,
    /// The latest timestamp the primary had executed once the batch ran: a backup that applied
    /// the shipment saw every transaction up to it, which a new coordinator leader needs to
    /// know where multi-partition pieces ran (docs/design.md §11, take-over step 3).
    pub last_ts: Option<Timestamp>,
    /// The batch's pieces of multi-partition transactions (inputs only): a new coordinator
    /// leader learns from the backups where such pieces took effect, and re-creates the
    /// other pieces a failed primary took with it (docs/design.md §11, take-over step 3).
    pub pieces: Vec<BatchTxn>,
    pub log: ShippedLog,
    /// What the batch's transactions returned that a client can ask again about (a whole
    /// transaction's, or a home piece's, with a request id): a backup remembers them, so that
    /// once promoted it answers a client whose answer died with the primary (docs/design.md
    /// §11, "Exactly-once answers").
    pub answers: Vec<RecalledOutcome>,
}

/// What a process does for a partition, as its status report says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplicationRole {
    /// Active-active: executes every batch.
    Replica,
    /// Passive modes: executes and ships log records.
    Primary,
    /// Passive modes: applies the primary's log records.
    Backup,
    /// The coordinator's own report.
    Coordinator,
}

impl ReplicationRole {
    pub fn name(self) -> &'static str {
        match self {
            ReplicationRole::Replica => "replica",
            ReplicationRole::Primary => "primary",
            ReplicationRole::Backup => "backup",
            ReplicationRole::Coordinator => "coordinator",
        }
    }
}

impl fmt::Display for ReplicationRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A partition's phase in a status report: the coordinator's view of it or a replica's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartitionPhase {
    /// The coordinator: its state machine waits for these nodes of `cluster.toml` to join.
    WaitingForNodes { missing: Vec<NodeId> },
    /// Loading its warehouses (a replica), or waiting for every replica to load (the
    /// coordinator).
    Loading,
    /// A replica: loaded, its digest reported.
    Ready,
    /// The coordinator: the partition answers transactions.
    Serving,
    /// The coordinator, passive modes: `backup` is being promoted.
    Promoting { backup: NodeId },
    /// The coordinator, full stack: the last primary, restarted, recovers from its log.
    Recovering { node: NodeId },
    /// The coordinator: no live replica.
    Unavailable,
    /// A replica: its load failed.
    Failed { reason: String },
    /// Stopped for good (divergence, a load timeout, a corrupt log).
    Stopped { reason: String },
}

impl PartitionPhase {
    /// Whether the coordinator answers the partition's transactions.
    pub fn is_serving(&self) -> bool {
        matches!(self, PartitionPhase::Serving)
    }

    /// Whether the partition stopped for good.
    pub fn is_stopped(&self) -> bool {
        matches!(self, PartitionPhase::Stopped { .. })
    }

    /// A one-word name (a metric's label; [`fmt::Display`] gives the details).
    pub fn name(&self) -> &'static str {
        match self {
            PartitionPhase::WaitingForNodes { .. } => "waiting-for-nodes",
            PartitionPhase::Loading => "loading",
            PartitionPhase::Ready => "ready",
            PartitionPhase::Serving => "serving",
            PartitionPhase::Promoting { .. } => "promoting",
            PartitionPhase::Recovering { .. } => "recovering",
            PartitionPhase::Unavailable => "unavailable",
            PartitionPhase::Failed { .. } => "failed",
            PartitionPhase::Stopped { .. } => "stopped",
        }
    }
}

impl fmt::Display for PartitionPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartitionPhase::WaitingForNodes { missing } => write!(f, "waiting for nodes {missing:?} to join"),
            PartitionPhase::Loading => f.write_str("loading"),
            PartitionPhase::Ready => f.write_str("ready"),
            PartitionPhase::Serving => f.write_str("serving"),
            PartitionPhase::Promoting { backup } => write!(f, "promoting node {backup}"),
            PartitionPhase::Recovering { node } => write!(f, "recovering on node {node} from its log"),
            PartitionPhase::Unavailable => f.write_str("unavailable"),
            PartitionPhase::Failed { reason } => write!(f, "failed: {reason}"),
            PartitionPhase::Stopped { reason } => write!(f, "stopped: {reason}"),
        }
    }
}

/// A replica's replication figures, for status displays and `glass compare`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicationReport {
    /// What the process does for the partition (none in a report made before it knows).
    pub role: Option<ReplicationRole>,
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
    pub role: PeerKind,
    /// The coordinator's or node's id in `cluster.toml`.
    pub id: u16,
    /// The operating system's process id.
    pub pid: u32,
    /// Milliseconds since the process started.
    pub uptime_ms: u64,
    /// The partitions the process serves (the coordinator: every partition; a node: its
    /// replicas), in id order. A standby coordinator reports none.
    pub partitions: Vec<PartitionReport>,
    /// A coordinator: the leading coordinator it knows of (itself when it leads; `None`
    /// while no leader is known). A node: the leader it follows.
    pub leader: Option<u16>,
}

/// One partition as a process sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionReport {
    pub partition: PartitionId,
    /// The coordinator's phase of the partition, or the replica's.
    pub phase: PartitionPhase,
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
    /// Counts of durations in the buckets of [`crate::metrics::latency_bounds`] (not
    /// cumulative; the last above them all), since the process started: a replica's, its
    /// executor's time on each batch; the leading coordinator's, the time from sending a batch
    /// to each replica's results for it. Two reports a while apart give a percentile of that
    /// while ([`crate::metrics::p99_between`]). Empty where there is none.
    pub latency_buckets: Vec<u64>,
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
    #[serde(with = "raw_bytes")]
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
/// from 0 without gaps); the first `checkpoint_bytes` bytes are the primary's checkpoint
/// image (when asked for; checksummed whole), the rest is applied as one chunk of shipped
/// log, whose records carry their own checksums and LSNs (a damaged, truncated or gapped
/// base is refused whole).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogBaseChunk {
    pub request_id: u64,
    pub partition: PartitionId,
    /// The base ends with batch `seq`: shipments from `seq + 1` follow it.
    pub seq: Seq,
    /// Where the primary's copy of the requester's log ended (the requester cuts its own log
    /// there before recovery); `None`: the primary never was a backup.
    pub fork_lsn: Option<u64>,
    /// Bytes of the checkpoint image at the head of the concatenated pieces (0: none).
    pub checkpoint_bytes: u64,
    pub index: u32,
    /// This piece's bytes of the concatenation (image, then log records).
    #[serde(with = "raw_bytes")]
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

impl Part {
    /// Which part of the transaction this is, as `engine::input::check_held` takes it.
    pub fn kind(self) -> engine::distributed::PartKind {
        match self {
            Part::Whole => engine::distributed::PartKind::Whole,
            Part::Remote { .. } => engine::distributed::PartKind::Remote,
            Part::Home { .. } => engine::distributed::PartKind::Home,
        }
    }
}

// A replica's failure reason carries an input's domain error whole.
const _: () = assert!(engine::input::INPUT_ERROR_BYTES_MAX <= REASON_BYTES_MAX);

#[cfg(test)]
mod tests {
    use super::*;
    use engine::input::InputError;
    use engine::procedures::{THRESHOLD_MAX, THRESHOLD_MIN};

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

/// A byte vector as serde bytes rather than a sequence of `u8`s: in bincode the encoding is
/// the same (a length, then the bytes), but encoding and decoding copy the bytes whole
/// instead of visiting them one at a time — a copy's chunks went through the codec at
/// ≈400 MiB/s one byte at a time (`cargo run --release --example copy_cost`).
mod raw_bytes {
    use serde::de::{Deserializer, SeqAccess, Visitor};
    use serde::Serializer;

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_byte_buf(Bytes)
    }

    struct Bytes;

    impl<'de> Visitor<'de> for Bytes {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("bytes")
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(b) = seq.next_element()? {
                out.push(b);
            }
            Ok(out)
        }
    }
}
