//! One partition replica's logic, sans I/O: it takes the coordinator's batches — possibly out
//! of order or duplicated — and executes their transactions strictly in timestamp order on
//! its own [`LeanDb`], one at a time (the paper's single-threaded, lock-free, log-free
//! execution), returning each transaction's outcome and result digest.
//!
//! Its [`ReplicaRole`] says what it does with the stream (docs/design.md, "The three modes"): an
//! active-active `Replica` executes every batch; a passive mode's `Primary` executes every
//! batch and returns, beside the results, the batch's log records as a [`Shipment`]
//! ([`Emit::Ship`]) for its backups (redo records of the lean kernel, or the conventional stack's WAL in
//! `full-stack`); a `Backup` executes nothing and applies shipments in sequence order,
//! answering each with a `ShipAck`.
//!
//! Guarantees:
//! - batches execute in sequence order 1, 2, 3, … exactly once: a batch ahead of a missing one
//!   waits for it (at most `pending_batches_max` wait), a duplicate of an executed or waiting
//!   batch is dropped;
//! - every transaction runs through [`engine::procedures::execute`] with the coordinator's
//!   timestamp, in strictly increasing timestamp order (checked before a batch runs: a
//!   regression stops the replica); so replicas fed the same stream reach bit-identical states;
//! - an input outside TPC-C's domains (`engine::input::check_input`), or naming a warehouse
//!   this partition does not hold where it must (`engine::input::check_held`), is reported as
//!   failed (a remote piece: aborted), never run — it changes nothing;
//! - shipments apply in sequence order exactly once, as batches do; a shipment that fails its
//!   checksum or cannot be applied stops the backup before it changes anything it checked;
//! - once stopped (a divergence reported by the coordinator, or a refused stream) the replica
//!   executes nothing more;
//! - multi-partition transactions (`engine::distributed`, Calvin style): a *remote* piece runs
//!   at its timestamp without waiting and its outcome leaves at once as [`PieceReads`] for the
//!   home partition (not at the end of the batch: two partitions each waiting for the other's
//!   batch to end would wait forever); a *home* piece runs once the outcomes of all its remote
//!   pieces arrived, and aborts, changing nothing, if one of them aborted. Until then the
//!   batch is parked at that transaction — nothing after it runs — and the replica goes on
//!   taking messages. Since every partition executes in timestamp order and remote pieces
//!   never wait, the smallest waiting timestamp's remote pieces always run: no wait cycle.
//!   In `full-stack` the batch's single-partition transactions run first on the worker pool,
//!   then its pieces one at a time in timestamp order on the executor thread (a worker
//!   waiting for another node while holding locks could deadlock across nodes).

use std::collections::BTreeMap;
use std::path::Path;

use engine::distributed::{execute_piece, touched, Piece};
use engine::input::{check_held, check_input, InputError};
use engine::loader::{load_database, LoadProgress};
use engine::procedures::{execute, TxnInput};
use engine::storage::Storage;
use engine::LeanDb;
use wire::channel::{CoordinatorToNode, NodeToCoordinator, PeerReply, ToolReply};
use wire::config::{Mode, PartitionConfig};
use wire::messages::{
    bounded_reason, Batch, BatchTxn, DigestOutcome, LoadState, NodeId, Part, PartitionId, PieceOutcome, PieceReads,
    ReplicaStanding, Results, Seq, Shipment, ShippedLog, StateDigest, Timestamp, TxnOutcome, TxnResult, WarehouseId,
    RECENT_SHIPMENTS_KEPT,
};

use crate::error::ReplicaError;
use crate::fullstack::FullStack;

/// What a replica emits while it takes its partition's stream: messages for the coordinator
/// (results, remote pieces' outcomes, promotion), and — a passive partition's primary — each
/// batch's shipment for its backups' nodes (the peer channel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Emit {
    ToCoordinator(NodeToCoordinator),
    Ship(Shipment),
}

/// What a replica does with its partition's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaRole {
    /// Executes every transaction: active-active, or a passive partition's only replica.
    Replica,
    /// A passive mode's primary: executes, and ships the log records to its backups.
    Primary,
    /// A passive mode's backup: applies the primary's log records, executes nothing.
    Backup,
}

impl ReplicaRole {
    /// The role of node `node` in `partition` under `mode`: in the passive modes the first
    /// replica listed is the primary; a passive partition's only replica has no one to ship
    /// to, and just executes.
    pub fn of(mode: Mode, partition: &PartitionConfig, node: NodeId) -> ReplicaRole {
        match mode {
            Mode::ActiveActive => ReplicaRole::Replica,
            _ if partition.replicas.len() == 1 => ReplicaRole::Replica,
            _ if partition.replicas.first() == Some(&node) => ReplicaRole::Primary,
            _ => ReplicaRole::Backup,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ReplicaRole::Replica => "replica",
            ReplicaRole::Primary => "primary",
            ReplicaRole::Backup => "backup",
        }
    }

    /// The role as a status report names it.
    pub fn reported(self) -> wire::messages::ReplicationRole {
        match self {
            ReplicaRole::Replica => wire::messages::ReplicationRole::Replica,
            ReplicaRole::Primary => wire::messages::ReplicationRole::Primary,
            ReplicaRole::Backup => wire::messages::ReplicationRole::Backup,
        }
    }
}

/// The partition's storage: the lean kernel, or the conventional stack (`full-stack`).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per replica, never moved on a hot path
pub enum Store {
    Lean(LeanDb),
    Full(Box<FullStack>),
}

/// What a backup holds that arrived ahead of a missing shipment.
type Waiting = BTreeMap<Seq, Shipment>;

/// Counts of what a replica did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaStats {
    pub batches_executed: u64,
    pub txns_committed: u64,
    pub txns_aborted: u64,
    pub txns_failed: u64,
    /// Batches that arrived ahead of a missing one and waited.
    pub batches_waited: u64,
    /// Batches dropped as duplicates.
    pub duplicate_batches: u64,
    /// Batches held past a gap and dropped when a new leader took over (docs/design.md §11).
    pub batches_dropped_at_take_over: u64,
    /// Shipments dropped because their primary was no longer live in the membership (a
    /// deposed primary's), or held at a take-over for a primary the new leader left out.
    pub shipments_refused: u64,
    /// Multi-partition transactions' remote pieces committed here (not counted in
    /// `txns_committed`: the transaction commits on its home partition).
    pub pieces_committed: u64,
    /// Times a batch parked at a home piece waiting for remote pieces' outcomes.
    pub parks: u64,
    /// Bytes of log records applied as a backup (kept after a promotion).
    pub applied_bytes: u64,
}

/// Remote pieces' outcomes a replica holds for home pieces it has not run yet, at most (one
/// per multi-partition transaction in flight; the coordinator bounds those).
pub const PIECE_READS_HELD_MAX: usize = 1 << 20;

/// A batch stopped at a home piece that waits for its remote pieces' outcomes.
#[derive(Debug)]
struct Parked {
    batch: Batch,
    /// The order the transactions run in (indices into `batch.txns`); in `full-stack`, the
    /// pieces only (the rest ran on the worker pool).
    order: Vec<usize>,
    /// The next position in `order`.
    pos: usize,
    outcomes: Vec<Option<TxnOutcome>>,
    last_ts: Option<Timestamp>,
    /// The position it last parked at (for counting parks once).
    parked_at_pos: Option<usize>,
    /// The remote pieces' outcomes its home pieces ran with, kept with the batch for a new
    /// leader (docs/design.md §11).
    used_reads: Vec<PieceReads>,
}

/// An executed batch kept for a new leader: its results (answered again once, if the new
/// leader sends it again) and the remote outcomes its home pieces ran with.
#[derive(Debug)]
struct Recent {
    batch: Batch,
    results: Results,
    used_reads: Vec<PieceReads>,
}

/// What a full-stack backup that rejoins starts from, besides its own log: its primary's log
/// from the primary's last checkpoint (load or promotion) to the end of batch `seq`.
#[derive(Debug, Clone)]
pub struct LogBase {
    pub seq: Seq,
    /// Where the primary's copy of the rejoining node's log ended, if the primary is a
    /// promoted backup: the rejoining node cuts its own log there before recovery. `None`:
    /// the primary never was a backup; the rejoining node's log must hold only its load.
    pub fork_lsn: Option<u64>,
    pub records: std::sync::Arc<Vec<u8>>,
}

/// A full-stack primary's [`LogBase`] as taken between two batches: where its bytes are —
/// the first `len` bytes of the primary's log generation, and the checkpoint that generation
/// starts from — read later, on the thread that sends them, not on the executor: taking it
/// costs the primary a log sync whatever the generation's length (docs/design.md §10,
/// "Copying without stopping").
#[derive(Debug, Clone)]
pub struct LogBaseSource {
    pub seq: Seq,
    pub fork_lsn: Option<u64>,
    len: u64,
    records: std::sync::Arc<std::sync::Mutex<engine::conventional::log::GenerationRead>>,
    image: std::sync::Arc<engine::conventional::base::ImageRead>,
}

impl LogBaseSource {
    /// Bytes of log records the base holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The base's log records and, with `with_image`, the checkpoint image their generation
    /// starts from (a base backup, for a backup whose own log cannot follow): read now from
    /// the primary's medium. Refused when a read fails, or the checkpoint on the medium is
    /// no longer the one the records start from.
    pub fn read(&self, with_image: bool) -> Result<(LogBase, Option<Vec<u8>>), ReplicaError> {
        use crate::error::FullStackStep;
        let log = |e: &dyn std::fmt::Display| ReplicaError::FullStack {
            step: FullStackStep::LogBase,
            problem: e.to_string(),
        };
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner()).read(self.len).map_err(|e| log(&e))?;
        let base = LogBase { seq: self.seq, fork_lsn: self.fork_lsn, records: std::sync::Arc::new(records) };
        if !with_image {
            return Ok((base, None));
        }
        let problem = |e: &dyn std::fmt::Display| ReplicaError::FullStack {
            step: FullStackStep::CheckpointImage,
            problem: e.to_string(),
        };
        let image = self.image.read().map_err(|e| problem(&e))?;
        let (at, start) = (
            engine::conventional::image_lsn(&image).map_err(|e| problem(&e))?,
            engine::conventional::generation_start(&base.records).map_err(|e| problem(&e))?,
        );
        if at != start {
            let why = format!("the checkpoint (LSN {at}) is no longer the one the log base starts from (LSN {start})");
            return Err(problem(&why));
        }
        Ok((base, Some(image)))
    }
}

/// What a replica that executes (not a backup) holds besides its storage.
#[derive(Debug, Default)]
struct Executing {
    /// Full stack, a promoted backup: where its copy of the failed primary's log ended.
    log_fork: Option<u64>,
    /// A `ShipTo` arrived while a batch was parked: shipping starts once every batch received
    /// before it ran, the last being this one. (Taken at the parked batch's end, a full-stack
    /// log base was older than the batch the coordinator's rejoin plan starts after, and the
    /// rejoining backup waited for a newer one for ever: found by `glass sim --mode
    /// full-stack --seed 85` once a home piece could wait long for an in-doubt partition.)
    ship_after: Option<Seq>,
}

/// A replica's [`ReplicaRole`] with what only that role holds.
#[derive(Debug)]
enum Role {
    Replica(Executing),
    Primary {
        executing: Executing,
        /// Full stack, with a rejoining backup: the base that backup starts from.
        log_base: Option<LogBaseSource>,
    },
    Backup {
        /// Shipments ahead of `next_seq`.
        waiting_shipments: Waiting,
        /// The multi-partition pieces of the last shipments applied that had any (at most
        /// [`RECENT_SHIPMENTS_KEPT`]), oldest first, for a new leader's take-over.
        applied_pieces: std::collections::VecDeque<Batch>,
    },
}

impl Role {
    fn of(kind: ReplicaRole) -> Role {
        match kind {
            ReplicaRole::Replica => Role::Replica(Executing::default()),
            ReplicaRole::Primary => Role::Primary { executing: Executing::default(), log_base: None },
            ReplicaRole::Backup => {
                Role::Backup { waiting_shipments: Waiting::new(), applied_pieces: std::collections::VecDeque::new() }
            }
        }
    }

    fn kind(&self) -> ReplicaRole {
        match self {
            Role::Replica(_) => ReplicaRole::Replica,
            Role::Primary { .. } => ReplicaRole::Primary,
            Role::Backup { .. } => ReplicaRole::Backup,
        }
    }

    fn executing_mut(&mut self) -> Option<&mut Executing> {
        match self {
            Role::Replica(executing) | Role::Primary { executing, .. } => Some(executing),
            Role::Backup { .. } => None,
        }
    }

    fn waiting_shipments_mut(&mut self) -> Option<&mut Waiting> {
        match self {
            Role::Backup { waiting_shipments, .. } => Some(waiting_shipments),
            Role::Replica(_) | Role::Primary { .. } => None,
        }
    }
}

/// A partition replica.
#[derive(Debug)]
pub struct Replica {
    node: NodeId,
    partition: PartitionId,
    role: Role,
    db: Store,
    /// The next batch to execute.
    next_seq: Seq,
    /// The last timestamp executed.
    last_ts: Option<Timestamp>,
    /// Batches ahead of `next_seq`, waiting for the gap to fill.
    waiting: BTreeMap<Seq, Batch>,
    pending_batches_max: usize,
    stopped: Option<String>,
    /// The last membership the coordinator announced: (epoch, live replicas).
    membership: Option<(u64, Vec<NodeId>)>,
    /// A backup installed from a copy, before any membership: the primary it copied, the
    /// only node it takes shipments from until a membership names others.
    copied_from: Option<NodeId>,
    /// The batch under way, parked at a home piece.
    parked: Option<Parked>,
    /// Remote pieces' outcomes for home pieces not yet run, by timestamp.
    piece_reads: BTreeMap<Timestamp, Vec<(PartitionId, PieceOutcome)>>,
    /// Full stack, a primary: log records appended between batches (a remote piece derived
    /// again rolls its writes back, and logs them), taken from the shipping buffer at once and
    /// shipped at the head of the next batch's shipment, so a `ShipTo` between batches finds
    /// the buffer empty and every backup's log stays contiguous.
    unshipped_log: Vec<u8>,
    /// Full stack, a partition back alone from its own log: the timestamps of the transactions
    /// whose commit record restart recovery found. The batches its failure lost are replayed
    /// to it (docs/design.md §10); what of them already took effect is not run again (a
    /// remote piece's reads are derived again from the state instead).
    committed_before_restart: std::collections::BTreeSet<Timestamp>,
    /// The last batches executed (at most [`RECENT_BATCHES_KEPT`]), oldest first: a new
    /// leader brings lagging replicas level with them (docs/design.md §11, take-over).
    recent: std::collections::VecDeque<Recent>,
    /// Batches executed before a new leader took over whose results that leader has not
    /// seen: when it sends one again, its kept results are sent again (once).
    answer_again: std::collections::BTreeSet<Seq>,
    /// Whether a batch that asks for the state digest begins a copy of the state after it
    /// for its carrier to digest off the executor ([`Replica::take_digest_copy`]); else (and
    /// when a copy is under way already) the digest is taken here, at once.
    digest_by_copy: bool,
    /// A digest copy begun and not yet taken by the carrier.
    digest_copy: Option<DigestCopy>,
    /// The state digest announced when the replica was ready, kept while no batch has run.
    load_digest: Option<StateDigest>,
    stats: ReplicaStats,
}

/// A copy of the state begun right after batch `seq`, which asked for the state digest
/// (docs/design.md §10, "Checks during traffic"): its carrier steps it while the partition
/// executes on and reports the digest of the state it shows in
/// [`NodeToCoordinator::StateDigest`].
#[derive(Debug)]
pub enum DigestCopy {
    /// A lean replica's rows: the sender's end carries the digest.
    Rows { seq: Seq, sender: crate::snapshot::CopySender },
    /// A full-stack replica's page image (`ConventionalDb::begin_image_copy` was called):
    /// the database rebuilt from it is digested.
    Image { seq: Seq },
}

impl DigestCopy {
    /// The batch whose state the copy shows.
    pub fn seq(&self) -> Seq {
        match self {
            DigestCopy::Rows { seq, .. } | DigestCopy::Image { seq } => *seq,
        }
    }
}

/// Executed batches a replica keeps for a new leader ([`Replica::held_batches`]); a replica
/// further behind than that copies the partition instead.
pub const RECENT_BATCHES_KEPT: usize = 256;

impl Replica {
    /// The active-active replica of `partition` on node `node` over an already loaded `db`; it
    /// expects batch 1 next.
    pub fn new(node: NodeId, partition: PartitionId, db: LeanDb, pending_batches_max: usize) -> Replica {
        Replica::with_role(node, partition, ReplicaRole::Replica, Store::Lean(db), pending_batches_max)
    }

    /// An active-active replica over a copy of a live replica's state as of batch `seq` (a
    /// rejoin): it expects batch `seq + 1` next.
    pub fn restored(node: NodeId, partition: PartitionId, db: LeanDb, seq: Seq, pending_batches_max: usize) -> Replica {
        let mut r = Replica::new(node, partition, db, pending_batches_max);
        r.next_seq = seq + 1;
        r
    }

    /// A replica with role `role` over an already loaded `db`. A lean primary starts
    /// capturing redo records here (a full-stack primary ships its log from its load on).
    pub fn with_role(
        node: NodeId,
        partition: PartitionId,
        role: ReplicaRole,
        mut db: Store,
        pending_batches_max: usize,
    ) -> Replica {
        assert!(pending_batches_max >= 1);
        if let (ReplicaRole::Primary, Store::Lean(l)) = (role, &mut db) {
            l.set_redo_capture(true);
        }
        Replica {
            node,
            partition,
            role: Role::of(role),
            db,
            next_seq: 1,
            last_ts: None,
            waiting: BTreeMap::new(),
            pending_batches_max,
            stopped: None,
            membership: None,
            parked: None,
            piece_reads: BTreeMap::new(),
            unshipped_log: Vec::new(),
            committed_before_restart: std::collections::BTreeSet::new(),
            copied_from: None,
            recent: std::collections::VecDeque::new(),
            answer_again: std::collections::BTreeSet::new(),
            digest_by_copy: false,
            digest_copy: None,
            load_digest: None,
            stats: ReplicaStats::default(),
        }
    }

    /// Loads `partition`'s warehouses (and ITEM) from `seed` — the rows are a pure function of
    /// the seed and warehouse, so every replica loads the same state — reporting progress.
    pub fn load(
        node: NodeId,
        partition: &PartitionConfig,
        seed: u64,
        pending_batches_max: usize,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Replica, ReplicaError> {
        Replica::load_scaled(node, partition, seed, engine::loader::Scale::TPCC, pending_batches_max, progress)
    }

    /// [`Replica::load`] of a population of `scale` (the simulator's tiny one; not TPC-C
    /// compliant unless [`engine::loader::Scale::TPCC`]).
    pub fn load_scaled(
        node: NodeId,
        partition: &PartitionConfig,
        seed: u64,
        scale: engine::loader::Scale,
        pending_batches_max: usize,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Replica, ReplicaError> {
        let mut db = LeanDb::new();
        engine::loader::load_database_scaled(&mut db, partition.warehouses.range(), seed, scale, progress)?;
        Ok(Replica::new(node, partition.id, db, pending_batches_max))
    }

    /// Loads the replica of `partition` on node `node` for `mode`: the lean kernel, or in
    /// `full-stack` the conventional stack in `dir` with `workers` worker threads.
    #[allow(clippy::too_many_arguments)]
    pub fn load_for(
        mode: Mode,
        node: NodeId,
        partition: &PartitionConfig,
        seed: u64,
        pending_batches_max: usize,
        dir: &Path,
        workers: usize,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Replica, ReplicaError> {
        let role = ReplicaRole::of(mode, partition, node);
        let db = if mode == Mode::FullStack {
            let ship = role == ReplicaRole::Primary;
            Store::Full(Box::new(FullStack::load(dir, partition.warehouses.range(), seed, workers, ship, progress)?))
        } else {
            let mut db = LeanDb::new();
            load_database(&mut db, partition.warehouses.range(), seed, progress)?;
            Store::Lean(db)
        };
        Ok(Replica::with_role(node, partition.id, role, db, pending_batches_max))
    }

    /// The `LoadStatus` message reporting load progress of `partition`.
    pub fn progress_message(partition: PartitionId, progress: LoadProgress) -> NodeToCoordinator {
        let state = LoadState::Loading { rows_loaded: progress.rows_loaded, rows_total: progress.rows_total };
        NodeToCoordinator::LoadStatus { partition, state }
    }

    /// The `LoadStatus` message announcing this replica ready, with its state digest.
    pub fn ready_message(&mut self) -> NodeToCoordinator {
        // Before its first batch the state is the load's: a new leader's `TakeOver` asks for
        // the digest again, and a full scan is 0.6–0.9 s at 20 warehouses.
        let digest = match self.load_digest {
            Some(d) if self.applied_seq() == 0 => d,
            _ => self.state_digest(),
        };
        if self.applied_seq() == 0 {
            self.load_digest = Some(digest);
        }
        NodeToCoordinator::LoadStatus { partition: self.partition, state: LoadState::Ready { digest } }
    }

    /// A primary's shipment to its backups (sent to the backups' nodes on the peer channel):
    /// an acknowledgement for every shipment this applied, in order. A shipment this replica
    /// already has (a rejoined backup's copy covered it, or a duplicate) is acknowledged
    /// with how far it applied: acknowledgements are cumulative, and a sync primary's gate
    /// waits for them — without one, the results of the batch a rejoined backup's copy ended
    /// at would wait until the next shipment, forever if none came (`glass sim --mode
    /// active-passive --shipping sync --seed 1`).
    ///
    /// A shipment from a node the latest membership does not name live is dropped
    /// unacknowledged: it comes from a deposed primary (failed, or left out by a new
    /// coordinator leader), whose batches no longer count (docs/design.md §11).
    pub fn on_ship(&mut self, shipment: Shipment) -> Result<Vec<PeerReply>, ReplicaError> {
        if !self.ships_from(shipment.primary) {
            self.stats.shipments_refused += 1;
            return Ok(Vec::new());
        }
        let (seq, seen) = (shipment.seq, shipment.last_ts);
        let applied = self.on_shipment(shipment)?;
        let partition = self.partition;
        if applied.is_empty() && seq <= self.applied_seq() {
            // A duplicate of what this backup's copy covered: it saw that far (what a new
            // leader's take-over asks of it, docs/design.md §11).
            self.last_ts = self.last_ts.max(seen);
            return Ok(vec![PeerReply::ShipAck { partition, seq: self.applied_seq() }]);
        }
        Ok(applied.into_iter().map(|seq| PeerReply::ShipAck { partition, seq }).collect())
    }

    /// Counts shipments a take-over's fence dropped.
    pub fn count_refused_shipments(&mut self, n: usize) {
        self.stats.shipments_refused += n as u64;
    }

    /// Whether this backup takes shipments from `primary`: its latest membership (if any)
    /// names it live.
    pub fn ships_from(&self, primary: NodeId) -> bool {
        match &self.membership {
            Some((_, live)) => live.contains(&primary),
            None => self.copied_from.is_none_or(|source| source == primary),
        }
    }

    /// A backup installed from `source`'s copy (a rejoin): until a membership arrives, it
    /// takes shipments from `source` only — a deposed primary's, held while it copied, would
    /// put the old lineage's batches on the new one's state.
    pub fn copied_from(&mut self, source: NodeId) {
        self.copied_from = Some(source);
    }

    /// A tool's read-only transaction (OrderStatus, StockLevel) on this replica now, outside
    /// the ordered path; a backup's answer may lag its primary (`possibly_stale`).
    pub fn replica_read(
        &mut self,
        request_id: u64,
        partition: PartitionId,
        input: &TxnInput,
    ) -> Result<ToolReply, ReplicaError> {
        self.check_partition(partition)?;
        let outcome = self.read(input);
        let possibly_stale = self.role() == ReplicaRole::Backup;
        Ok(ToolReply::ReplicaReadReply { request_id, partition, seq: self.applied_seq(), possibly_stale, outcome })
    }

    /// A tool's digest request: this replica's state digest now.
    pub fn digest_reply(&mut self, request_id: u64, partition: PartitionId) -> Result<ToolReply, ReplicaError> {
        self.check_partition(partition)?;
        let digests = vec![(self.node, self.state_digest())];
        let outcome = DigestOutcome::Digests { seq: self.applied_seq(), digests };
        Ok(ToolReply::DigestReply { request_id, partition, outcome })
    }

    /// Handles a message from the coordinator; returns what it makes the replica emit.
    pub fn on_control(&mut self, msg: CoordinatorToNode) -> Result<Vec<Emit>, ReplicaError> {
        match msg {
            CoordinatorToNode::Batch(batch) => {
                let mut out = Vec::new();
                self.take_batch(batch, &mut out)?;
                Ok(out)
            }
            CoordinatorToNode::PieceReads(reads) => {
                let mut out = Vec::new();
                self.on_piece_reads(reads, &mut out)?;
                Ok(out)
            }
            CoordinatorToNode::RederivePiece { partition, home, seq, ts, input } => {
                self.check_partition(partition)?;
                let reads = self.rederive_piece(home, seq, ts, &input);
                Ok(reads.map(|r| Emit::ToCoordinator(NodeToCoordinator::PieceReads(r))).into_iter().collect())
            }
            CoordinatorToNode::PartitionStopped { partition, reason } => {
                self.check_partition(partition)?;
                self.stopped.get_or_insert(reason);
                self.waiting.clear();
                if let Some(w) = self.role.waiting_shipments_mut() {
                    w.clear();
                }
                Ok(Vec::new())
            }
            CoordinatorToNode::Membership { partition, epoch, live } => {
                self.check_partition(partition)?;
                if self.membership.as_ref().is_none_or(|(e, _)| epoch > *e) {
                    self.membership = Some((epoch, live));
                }
                Ok(Vec::new())
            }
            CoordinatorToNode::ShipTo { partition, .. } => {
                self.check_partition(partition)?;
                // Shipping starts between batches: a parked batch is half run, and the batches
                // queued behind it were sent before this message.
                if let Some(p) = &self.parked {
                    let last = self.waiting.last_key_value().map_or(p.batch.seq, |(&seq, _)| seq.max(p.batch.seq));
                    if let Some(executing) = self.role.executing_mut() {
                        executing.ship_after = Some(last);
                    }
                } else {
                    self.ship_from_now_on()?;
                }
                Ok(Vec::new())
            }
            CoordinatorToNode::Promote { partition, first_unanswered } => {
                self.check_partition(partition)?;
                Ok(vec![Emit::ToCoordinator(self.promote(first_unanswered)?)])
            }
            // A rejoin's late or duplicated answer, once the replica is installed: nothing to do.
            CoordinatorToNode::RejoinPlan { partition, .. }
            | CoordinatorToNode::RejoinRefused { partition, .. }
            | CoordinatorToNode::ResumeFromLog { partition, .. } => {
                self.check_partition(partition)?;
                Ok(Vec::new())
            }
            CoordinatorToNode::TakeOver { epoch } => {
                let standing = self.take_over();
                let partition = self.partition;
                // A replica that never received a batch may be one whose load the old leader
                // was still gathering: the new leader gets its load digest again.
                let fresh = standing.executed_seq == 0 && standing.held_seq == 0 && self.stopped.is_none();
                let mut out = vec![Emit::ToCoordinator(NodeToCoordinator::Standing { epoch, partition, standing })];
                if fresh {
                    out.push(Emit::ToCoordinator(self.ready_message()));
                }
                Ok(out)
            }
            CoordinatorToNode::SendBatches { partition, after } => {
                self.check_partition(partition)?;
                let (batches, reads) = self.held_batches(after);
                Ok(vec![Emit::ToCoordinator(NodeToCoordinator::HeldBatches { partition, batches, reads })])
            }
            CoordinatorToNode::Heartbeat { .. } => Ok(Vec::new()),
            CoordinatorToNode::Shutdown { .. } => {
                Err(ReplicaError::Unexpected { what: "a shutdown (the node's, not a replica's)" })
            }
        }
    }

    /// Takes a batch; returns the results of every batch this made executable, in order
    /// (none when it must wait for an earlier batch or was a duplicate).
    pub fn on_batch(&mut self, batch: Batch) -> Result<Vec<Results>, ReplicaError> {
        let mut out = Vec::new();
        self.take_batch(batch, &mut out)?;
        Ok(out
            .into_iter()
            .filter_map(|m| match m {
                Emit::ToCoordinator(NodeToCoordinator::Results(r)) => Some(r),
                Emit::ToCoordinator(_) | Emit::Ship(_) => None,
            })
            .collect())
    }

    /// Takes a batch: executes it and every batch it made executable, in order, until one
    /// parks at a home piece; appends to `out`, in order, the pieces' outcomes as they run and
    /// each batch's shipment (a primary) and results. Nothing when it must wait for an earlier
    /// batch or was a duplicate.
    pub fn take_batch(&mut self, batch: Batch, out: &mut Vec<Emit>) -> Result<(), ReplicaError> {
        if self.role() == ReplicaRole::Backup {
            return Err(ReplicaError::Unexpected { what: "a batch (a backup applies its primary's log records)" });
        }
        if let Some(reason) = &self.stopped {
            return Err(ReplicaError::Stopped { reason: reason.clone() });
        }
        self.check_partition(batch.partition)?;
        let seq = batch.seq;
        if let Some(parked) = &self.parked {
            if seq == parked.batch.seq {
                if parked.batch != batch {
                    return Err(self.stop(ReplicaError::ConflictingDuplicate { seq }));
                }
                self.stats.duplicate_batches += 1;
                return Ok(());
            }
        }
        if seq < self.next_seq && self.answer_again.contains(&seq) {
            // A new leader sent again a batch executed before it took over: it has not seen
            // the results (docs/design.md §11).
            let kept = self.recent.iter().find(|r| r.batch.seq == seq).expect("answer_again only names kept batches");
            if kept.batch != batch {
                return Err(self.stop(ReplicaError::ConflictingDuplicate { seq }));
            }
            let results = kept.results.clone();
            self.answer_again.remove(&seq);
            out.push(Emit::ToCoordinator(NodeToCoordinator::Results(results)));
            return Ok(());
        }
        let Some(batch) = self.in_order(seq, batch, |r| &mut r.waiting)? else { return Ok(()) };
        self.start(batch)?;
        self.advance(out)
    }

    /// A remote piece's outcome for one of this partition's home pieces: held until the piece
    /// runs (a duplicate, or one for a transaction already run, is dropped), and the parked
    /// batch goes on if it was waiting for it.
    pub fn on_piece_reads(&mut self, reads: PieceReads, out: &mut Vec<Emit>) -> Result<(), ReplicaError> {
        self.check_partition(reads.home)?;
        if self.stopped.is_some() || self.role() == ReplicaRole::Backup {
            return Ok(());
        }
        let passed = match &self.parked {
            Some(p) => p.order.get(p.pos).is_none_or(|&i| p.batch.txns[i].ts > reads.ts),
            None => self.last_ts.is_some_and(|l| reads.ts <= l),
        };
        if passed {
            return Ok(());
        }
        if self.piece_reads.len() >= PIECE_READS_HELD_MAX && !self.piece_reads.contains_key(&reads.ts) {
            let why = format!("more than {PIECE_READS_HELD_MAX} multi-partition transactions' piece outcomes held");
            return Err(self.stop(ReplicaError::Stopped { reason: why }));
        }
        let held = self.piece_reads.entry(reads.ts).or_default();
        if held.iter().all(|(from, _)| *from != reads.from) {
            held.push((reads.from, reads.outcome));
        }
        if self.parked.is_some() {
            self.advance(out)?;
        }
        Ok(())
    }

    /// The coordinator lost a remote piece's outcome (every replica that ran batch `seq`
    /// failed before it arrived): derived again from this replica's state if that state
    /// includes the batch ([`engine::distributed::rederive_reads`]); `None` if this replica
    /// will run the batch itself (and send the outcome then), or cannot execute.
    pub fn rederive_piece(
        &mut self,
        home: PartitionId,
        seq: Seq,
        ts: Timestamp,
        input: &TxnInput,
    ) -> Option<PieceReads> {
        // A piece that ran in the batch under way (parked at a later home piece) counts: its
        // outcome went out when it ran, and may have been lost with a coordinator.
        let ran_in_parked = self
            .parked
            .as_ref()
            .is_some_and(|p| p.batch.seq == seq && p.order[..p.pos].iter().any(|&i| p.batch.txns[i].ts == ts));
        if self.stopped.is_some() || self.role() == ReplicaRole::Backup || (self.applied_seq() < seq && !ran_in_parked)
        {
            return None;
        }
        self.derive_reads(home, ts, input)
    }

    /// A remote piece's outcome derived from the current state, which includes the piece's
    /// effects ([`engine::distributed::rederive_reads`]); `None` if the replica stopped.
    fn derive_reads(&mut self, home: PartitionId, ts: Timestamp, input: &TxnInput) -> Option<PieceReads> {
        let t = BatchTxn { ts, input: *input, part: Part::Remote { home } };
        let result = match &mut self.db {
            Store::Lean(db) => rederive(db, &t),
            Store::Full(f) => {
                let reads = rederive(f.session(), &t);
                // What it logged (its writes rolled back) goes out with the next shipment.
                match f.take_log() {
                    Ok(records) => self.unshipped_log.extend_from_slice(&records),
                    Err(e) => {
                        self.stop(e);
                        return None;
                    }
                }
                reads
            }
        };
        let outcome = match result {
            Ok(reads) => PieceOutcome::Reads(reads),
            Err(e) => PieceOutcome::Aborted { reason: bounded_reason(e.to_string()) },
        };
        Some(PieceReads { home, from: self.partition, ts, outcome })
    }

    /// Checks batch `next_seq`'s timestamps follow those executed, runs its single-partition
    /// transactions on the worker pool in `full-stack`, and parks it ready to run the rest.
    fn start(&mut self, batch: Batch) -> Result<(), ReplicaError> {
        assert_eq!(batch.seq, self.next_seq, "a batch starts only as the next one");
        assert!(self.parked.is_none(), "one batch under way at a time");
        let mut last = self.last_ts;
        for t in &batch.txns {
            if let Some(l) = last.filter(|l| t.ts <= *l) {
                return Err(self.stop(ReplicaError::TimestampRegression { seq: batch.seq, ts: t.ts, last: l }));
            }
            last = Some(t.ts);
        }
        // Timestamps only grow: what restart recovery found committed before this batch's
        // first can no longer be replayed.
        if let Some(first) = batch.txns.first().filter(|_| !self.committed_before_restart.is_empty()) {
            self.committed_before_restart = self.committed_before_restart.split_off(&first.ts);
        }
        let mut outcomes = vec![None; batch.txns.len()];
        let order: Vec<usize> = match &mut self.db {
            Store::Lean(_) => (0..batch.txns.len()).collect(),
            Store::Full(f) => {
                let skip = &self.committed_before_restart;
                let whole: Vec<BatchTxn> =
                    batch.txns.iter().filter(|t| t.part == Part::Whole && !skip.contains(&t.ts)).copied().collect();
                let mut done = f.execute(&whole).into_iter();
                let mut pieces = Vec::new();
                for (i, t) in batch.txns.iter().enumerate() {
                    if t.part != Part::Whole {
                        pieces.push(i);
                    } else if skip.contains(&t.ts) {
                        outcomes[i] = Some(committed_before_restart());
                    } else {
                        outcomes[i] = done.next();
                    }
                }
                pieces
            }
        };
        self.parked =
            Some(Parked { batch, order, pos: 0, outcomes, last_ts: last, parked_at_pos: None, used_reads: Vec::new() });
        Ok(())
    }

    /// Runs the parked batch on from where it stopped, then every batch waiting behind it,
    /// until one parks at a home piece or none is left.
    fn advance(&mut self, out: &mut Vec<Emit>) -> Result<(), ReplicaError> {
        loop {
            let Some(mut p) = self.parked.take() else { return Ok(()) };
            while let Some(&i) = p.order.get(p.pos) {
                let t = p.batch.txns[i];
                let outcome = match t.part {
                    // A replayed piece that took effect before the failure (docs/design.md
                    // §10): a home piece is not run again; a remote piece's reads are derived
                    // again from the state, for a home piece that may still wait for them.
                    Part::Home { .. } if self.committed_before_restart.contains(&t.ts) => committed_before_restart(),
                    Part::Remote { home } if self.committed_before_restart.contains(&t.ts) => {
                        let reads = self.derive_reads(home, t.ts, &t.input);
                        out.extend(reads.map(|r| Emit::ToCoordinator(NodeToCoordinator::PieceReads(r))));
                        committed_before_restart()
                    }
                    Part::Whole => self.run_whole(&t),
                    Part::Remote { home } => {
                        let outcome = self.run_remote_piece(&t);
                        out.push(Emit::ToCoordinator(NodeToCoordinator::PieceReads(PieceReads {
                            home,
                            from: self.partition,
                            ts: t.ts,
                            outcome: outcome.clone(),
                        })));
                        outcome.txn_outcome()
                    }
                    Part::Home { remotes } => {
                        let arrived = self.piece_reads.get(&t.ts).map_or(0, Vec::len);
                        if arrived < usize::from(remotes) {
                            if p.parked_at_pos != Some(p.pos) {
                                p.parked_at_pos = Some(p.pos);
                                self.stats.parks += 1;
                            }
                            self.parked = Some(p);
                            return Ok(());
                        }
                        // Outcomes of earlier timestamps can no longer be used.
                        let mut later = self.piece_reads.split_off(&t.ts);
                        let reads = later.remove(&t.ts).unwrap_or_default();
                        self.piece_reads = later;
                        let home = self.partition;
                        p.used_reads.extend(reads.iter().map(|(from, outcome)| PieceReads {
                            home,
                            from: *from,
                            ts: t.ts,
                            outcome: outcome.clone(),
                        }));
                        self.run_home_piece(&t, reads)
                    }
                };
                p.outcomes[i] = Some(outcome);
                p.pos += 1;
            }
            let digest_after = p.batch.digest_after;
            let (results, shipment) = self.finish(p)?;
            let seq = results.seq;
            out.extend(shipment.map(Emit::Ship));
            out.push(Emit::ToCoordinator(NodeToCoordinator::Results(results)));
            if digest_after {
                if let Some(digest) = self.begin_digest(seq) {
                    let partition = self.partition;
                    out.push(Emit::ToCoordinator(NodeToCoordinator::StateDigest {
                        partition,
                        seq,
                        digest: Ok(digest),
                    }));
                }
            }
            let applied = self.applied_seq();
            if let Some(e) = self.role.executing_mut().filter(|e| e.ship_after.is_some_and(|s| s <= applied)) {
                e.ship_after = None;
                self.ship_from_now_on()?;
            }
            let Some(next) = self.waiting.remove(&self.next_seq) else { return Ok(()) };
            self.start(next)?;
        }
    }

    /// A single-partition transaction, whole (the lean kernel; the worker pool runs them in
    /// `full-stack`).
    fn run_whole(&mut self, t: &BatchTxn) -> TxnOutcome {
        if let Err(problem) = self.check(&t.input, Part::Whole) {
            return TxnOutcome::Failed { reason: bounded_reason(problem.to_string()) };
        }
        match &mut self.db {
            Store::Lean(db) => TxnOutcome::from_result(execute(db, t.ts.0, &t.input)),
            Store::Full(f) => TxnOutcome::from_result(execute(f.session(), t.ts.0, &t.input)),
        }
    }

    /// A remote piece: its reads, or why it changed nothing.
    fn run_remote_piece(&mut self, t: &BatchTxn) -> PieceOutcome {
        if let Err(problem) = self.check(&t.input, t.part) {
            return PieceOutcome::Aborted { reason: bounded_reason(problem.to_string()) };
        }
        let result = match &mut self.db {
            Store::Lean(db) => run_piece(db, t, None),
            Store::Full(f) => run_piece(f.session(), t, None),
        };
        match result {
            Ok(Piece::Reads(reads)) => {
                self.stats.pieces_committed += 1;
                PieceOutcome::Reads(reads)
            }
            Ok(Piece::Output(_)) => PieceOutcome::Aborted { reason: "a remote piece produced an output".into() },
            Err(e) => PieceOutcome::Aborted { reason: bounded_reason(e.to_string()) },
        }
    }

    /// A home piece, given every remote piece's outcome: aborts, changing nothing, if one of
    /// them aborted; runs with their reads otherwise.
    fn run_home_piece(&mut self, t: &BatchTxn, reads: Vec<(PartitionId, PieceOutcome)>) -> TxnOutcome {
        if let Err(problem) = self.check(&t.input, t.part) {
            return TxnOutcome::Failed { reason: bounded_reason(problem.to_string()) };
        }
        let mut remote = Vec::with_capacity(reads.len());
        for (from, outcome) in reads {
            match outcome {
                PieceOutcome::Reads(r) => remote.push(r),
                PieceOutcome::Aborted { reason } => {
                    return TxnOutcome::Aborted {
                        reason: bounded_reason(format!("partition {from}'s piece rolled back: {reason}")),
                    }
                }
            }
        }
        let result = match &mut self.db {
            Store::Lean(db) => run_piece(db, t, Some(&remote)),
            Store::Full(f) => run_piece(f.session(), t, Some(&remote)),
        };
        match result {
            Ok(Piece::Output(output)) => TxnOutcome::Committed(output),
            Ok(Piece::Reads(_)) => TxnOutcome::Failed { reason: "a home piece produced reads".into() },
            Err(e) => TxnOutcome::from_result(Err(e)),
        }
    }

    /// The ordering rule batches and shipments share: `item` numbered `seq` is returned when it
    /// is the next to run; a duplicate of one run or held is dropped; one ahead of a gap is
    /// held in `held(self)` (at most `pending_batches_max` ahead); a different item under a
    /// number already held stops the replica.
    fn in_order<T: PartialEq>(
        &mut self,
        seq: Seq,
        item: T,
        held: impl Fn(&mut Self) -> &mut BTreeMap<Seq, T>,
    ) -> Result<Option<T>, ReplicaError> {
        if seq < self.next_seq {
            self.stats.duplicate_batches += 1;
            return Ok(None);
        }
        if seq - self.next_seq >= self.pending_batches_max as u64 {
            return Err(ReplicaError::TooFarAhead {
                seq,
                next_seq: self.next_seq,
                pending_batches_max: self.pending_batches_max,
            });
        }
        if seq == self.next_seq {
            return Ok(Some(item));
        }
        match held(self).get(&seq) {
            Some(h) if *h == item => self.stats.duplicate_batches += 1,
            Some(_) => return Err(self.stop(ReplicaError::ConflictingDuplicate { seq })),
            None => {
                self.stats.batches_waited += 1;
                held(self).insert(seq, item);
            }
        }
        Ok(None)
    }

    /// A backup takes a shipment; returns the sequence numbers it applied, in order (none when
    /// it must wait for an earlier one or was a duplicate).
    pub fn on_shipment(&mut self, shipment: Shipment) -> Result<Vec<Seq>, ReplicaError> {
        if self.role() != ReplicaRole::Backup {
            return Err(ReplicaError::Unexpected { what: "a shipment (only a backup applies log records)" });
        }
        if let Some(reason) = &self.stopped {
            return Err(ReplicaError::Stopped { reason: reason.clone() });
        }
        self.check_partition(shipment.partition)?;
        let seq = shipment.seq;
        let held = self.in_order(seq, shipment, |r| r.role.waiting_shipments_mut().expect("checked: a backup"));
        let Some(shipment) = held? else {
            return Ok(Vec::new());
        };
        let mut applied = vec![self.apply(shipment)?];
        loop {
            let next_seq = self.next_seq;
            let Some(next) = self.role.waiting_shipments_mut().and_then(|w| w.remove(&next_seq)) else { break };
            applied.push(self.apply(next)?);
        }
        Ok(applied)
    }

    /// Applies shipment `next_seq`.
    fn apply(&mut self, shipment: Shipment) -> Result<Seq, ReplicaError> {
        assert_eq!(shipment.seq, self.next_seq, "shipments apply in sequence");
        let result = match (&mut self.db, &shipment.log) {
            (Store::Lean(db), ShippedLog::Redo(redo)) => {
                self.stats.applied_bytes += redo.bytes.len() as u64 + 24 * redo.records.len() as u64;
                self.stats.txns_committed += redo.txns;
                db.apply_redo(redo).map_err(|e| ReplicaError::BadShipment { problem: e.into() })
            }
            (Store::Full(f), ShippedLog::Wal(records)) => {
                self.stats.applied_bytes += records.len() as u64;
                f.apply_log(records)
            }
            _ => Err(ReplicaError::BadShipment { problem: crate::error::ShipmentProblem::Format }),
        };
        if let Err(e) = result {
            return Err(self.stop(e));
        }
        self.last_ts = self.last_ts.max(shipment.last_ts);
        if !shipment.pieces.is_empty() {
            if let Role::Backup { applied_pieces, .. } = &mut self.role {
                if applied_pieces.len() == RECENT_SHIPMENTS_KEPT {
                    applied_pieces.pop_front();
                }
                let (partition, seq) = (self.partition, shipment.seq);
                applied_pieces.push_back(Batch { partition, seq, txns: shipment.pieces, digest_after: false });
            }
        }
        self.next_seq += 1;
        self.stats.batches_executed += 1;
        Ok(shipment.seq)
    }

    /// A primary (or a promoted backup) gets a backup: from the next batch on, every batch's
    /// log records are captured and shipped. The lean backup starts from a copy of the
    /// state; a full-stack one from its own log (cut and recovered) plus this replica's
    /// [`LogBase`], taken here: its log since its last checkpoint, with shipping switched on
    /// from the end of it.
    pub fn ship_from_now_on(&mut self) -> Result<(), ReplicaError> {
        let was_primary = self.role() == ReplicaRole::Primary;
        let Some(log_fork) = self.role.executing_mut().map(|e| e.log_fork) else { return Ok(()) };
        let new_base = match &mut self.db {
            Store::Lean(db) => {
                if !was_primary {
                    db.set_redo_capture(true);
                }
                None
            }
            Store::Full(f) => {
                // The base ends before what is still to ship: the next shipment starts with it,
                // for the new backup as for the others (found by `glass sim --mode full-stack
                // --seed 14`: a second `ShipTo` after a remote piece derived again found those
                // records in the shipping buffer, and the log base was refused).
                let later = f.log_base_later()?;
                let len = later.len().saturating_sub(self.unshipped_log.len() as u64);
                Some(LogBaseSource {
                    seq: self.next_seq - 1,
                    fork_lsn: log_fork,
                    len,
                    records: std::sync::Arc::new(std::sync::Mutex::new(later)),
                    image: std::sync::Arc::new(f.checkpoint_image_later()),
                })
            }
        };
        // The executing state moves into the primary's role.
        self.role = match std::mem::replace(&mut self.role, Role::Replica(Executing::default())) {
            Role::Replica(executing) => Role::Primary { executing, log_base: new_base },
            Role::Primary { executing, log_base } => Role::Primary { executing, log_base: new_base.or(log_base) },
            backup @ Role::Backup { .. } => backup,
        };
        Ok(())
    }

    /// A full-stack primary's [`LogBase`] for a rejoining backup, once it has one.
    pub fn log_base(&self) -> Option<&LogBaseSource> {
        match &self.role {
            Role::Primary { log_base, .. } => log_base.as_ref(),
            Role::Replica(_) | Role::Backup { .. } => None,
        }
    }

    /// A backup over a copy of its primary's state as of batch `seq` (a rejoin in a passive
    /// mode): it applies shipment `seq + 1` next.
    pub fn restored_backup(
        node: NodeId,
        partition: PartitionId,
        db: LeanDb,
        seq: Seq,
        pending_batches_max: usize,
    ) -> Replica {
        let mut r = Replica::with_role(node, partition, ReplicaRole::Backup, Store::Lean(db), pending_batches_max);
        r.next_seq = seq + 1;
        r
    }

    /// A full-stack backup over the state restart recovery rebuilt from its own (cut) log and
    /// its primary's [`LogBase`] as of batch `seq`: it applies shipment `seq + 1` next.
    pub fn recovered_backup(
        node: NodeId,
        partition: PartitionId,
        db: FullStack,
        seq: Seq,
        pending_batches_max: usize,
    ) -> Replica {
        let mut r =
            Replica::with_role(node, partition, ReplicaRole::Backup, Store::Full(Box::new(db)), pending_batches_max);
        r.next_seq = seq + 1;
        r
    }

    /// A full-stack replica over the state restart recovery rebuilt from its own write-ahead
    /// log ([`FullStack::recover`]); it executes from the batch [`Replica::resume_at`] names.
    /// The transactions restart recovery found committed are not run again when the batches
    /// the partition's failure lost are replayed to it (docs/design.md §10).
    pub fn recovered(node: NodeId, partition: PartitionId, db: FullStack, pending_batches_max: usize) -> Replica {
        let committed = db.recovery_report().committed_ts.iter().map(|&ts| Timestamp(ts)).collect();
        let mut r =
            Replica::with_role(node, partition, ReplicaRole::Replica, Store::Full(Box::new(db)), pending_batches_max);
        r.committed_before_restart = committed;
        r
    }

    /// A recovered replica executes from batch `seq` on (the coordinator's
    /// `ResumeFromLog`). Only before it executed anything.
    pub fn resume_at(&mut self, seq: Seq) -> Result<(), ReplicaError> {
        if self.stats.batches_executed > 0 || !self.waiting.is_empty() {
            return Err(ReplicaError::Unexpected { what: "a resume point after batches were executed" });
        }
        self.next_seq = seq;
        Ok(())
    }

    /// A backup whose primary failed takes over: it has applied every shipment it received
    /// (they are applied in order as they arrive); it executes from the first batch no
    /// client was answered for, or after what it applied. Shipments held ahead of a gap are
    /// dropped (the coordinator sends their batches again). A full-stack backup first
    /// checkpoints, so its own log starts from the state it replayed. A promoted backup
    /// ships to no one (this build promotes in partitions of two replicas).
    pub fn promote(&mut self, first_unanswered: Seq) -> Result<NodeToCoordinator, ReplicaError> {
        if self.role() != ReplicaRole::Backup {
            return Err(ReplicaError::Unexpected { what: "a promotion (only a backup is promoted)" });
        }
        if let Some(reason) = &self.stopped {
            return Err(ReplicaError::Stopped { reason: reason.clone() });
        }
        let mut log_fork = None;
        if let Store::Full(f) = &mut self.db {
            // Where this backup's copy of the failed primary's log ends: the primary, if it
            // restarts, cuts its log there to follow this one.
            log_fork = f.applied_log_end();
            f.checkpoint()?;
        }
        let applied_seq = self.applied_seq();
        self.next_seq = (applied_seq + 1).max(first_unanswered);
        // The shipments held ahead of a gap go with the backup's role.
        self.role = Role::Replica(Executing { log_fork, ship_after: None });
        Ok(NodeToCoordinator::Promoted { partition: self.partition, applied_seq, next_seq: self.next_seq })
    }

    /// Runs a read-only transaction against the current state (a replica read); anything else
    /// fails without running.
    pub fn read(&mut self, input: &TxnInput) -> TxnOutcome {
        if !matches!(input, TxnInput::OrderStatus(_) | TxnInput::StockLevel(_)) {
            return TxnOutcome::Failed { reason: "replica reads run OrderStatus and StockLevel only".into() };
        }
        if let Err(problem) = self.check(input, Part::Whole) {
            return TxnOutcome::Failed { reason: bounded_reason(problem.to_string()) };
        }
        let ts = self.last_ts.map_or(0, |t| t.0);
        match &mut self.db {
            Store::Lean(db) => TxnOutcome::from_result(execute(db, ts, input)),
            Store::Full(f) => TxnOutcome::from_result(execute(f.session(), ts, input)),
        }
    }

    /// Whether this replica may run `part` of `input`: the input lies within TPC-C's domains
    /// and the warehouses `part` runs on are this partition's (those with a WAREHOUSE row here).
    fn check(&mut self, input: &TxnInput, part: Part) -> Result<(), InputError> {
        check_input(input)?;
        match &mut self.db {
            Store::Lean(db) => check_held(input, part.kind(), |w| holds_warehouse(db, w)),
            Store::Full(f) => check_held(input, part.kind(), |w| holds_warehouse(f.session(), w)),
        }
    }

    /// Batch `next_seq` ran to its end: counts, results, the state digest if asked, and a
    /// primary's shipment.
    fn finish(&mut self, p: Parked) -> Result<(Results, Option<Shipment>), ReplicaError> {
        let batch = p.batch;
        // Boundary assertions (docs/design.md §4): batches finish in sequence, every
        // transaction answered, timestamps never going back.
        assert_eq!(batch.seq, self.next_seq, "a batch finishes only as the next one");
        assert_eq!(p.outcomes.len(), batch.txns.len(), "one outcome per transaction");
        assert!(p.last_ts >= self.last_ts, "timestamps never go back");
        let mut results = Vec::with_capacity(batch.txns.len());
        for (t, outcome) in batch.txns.iter().zip(p.outcomes) {
            let outcome = outcome.expect("every transaction of a finished batch ran");
            match outcome {
                TxnOutcome::Committed(_) => self.stats.txns_committed += 1,
                TxnOutcome::Aborted { .. } => self.stats.txns_aborted += 1,
                TxnOutcome::Failed { .. } => self.stats.txns_failed += 1,
                TxnOutcome::PieceDone { .. } => {}
            }
            results.push(TxnResult { ts: t.ts, digest: outcome.digest(), outcome });
        }
        self.last_ts = p.last_ts;
        self.next_seq += 1;
        self.stats.batches_executed += 1;
        let seq = batch.seq;
        let shipment = if self.role() == ReplicaRole::Primary {
            let log = match &mut self.db {
                Store::Lean(db) => ShippedLog::Redo(db.take_redo()),
                Store::Full(f) => match f.take_log() {
                    Ok(records) => {
                        let mut all = std::mem::take(&mut self.unshipped_log);
                        all.extend_from_slice(&records);
                        ShippedLog::Wal(all)
                    }
                    Err(e) => return Err(self.stop(e)),
                },
            };
            let pieces = batch.txns.iter().filter(|t| t.part != Part::Whole).cloned().collect();
            Some(Shipment { partition: self.partition, primary: self.node, seq, last_ts: self.last_ts, pieces, log })
        } else {
            None
        };
        let results = Results { partition: self.partition, seq, results };
        if self.recent.len() == RECENT_BATCHES_KEPT {
            let forgotten = self.recent.pop_front().expect("full");
            self.answer_again.remove(&forgotten.batch.seq);
        }
        self.recent.push_back(Recent { batch, results: results.clone(), used_reads: p.used_reads });
        Ok((results, shipment))
    }

    fn stop(&mut self, e: ReplicaError) -> ReplicaError {
        self.stopped.get_or_insert_with(|| e.to_string());
        self.parked = None;
        self.piece_reads.clear();
        self.waiting.clear();
        if let Some(w) = self.role.waiting_shipments_mut() {
            w.clear();
        }
        e
    }

    fn check_partition(&self, got: PartitionId) -> Result<(), ReplicaError> {
        if got == self.partition {
            Ok(())
        } else {
            Err(ReplicaError::WrongPartition { expected: self.partition, got })
        }
    }

    /// Batch `seq`, which asked for the state digest, just ended: begins a copy of the state
    /// for the carrier to digest ([`Replica::take_digest_copy`]) and returns `None`, or, when
    /// the replica digests at once (not told to copy, or a copy of it is under way already:
    /// one at a time), returns the digest.
    fn begin_digest(&mut self, seq: Seq) -> Option<StateDigest> {
        if self.digest_by_copy && self.digest_copy.is_none() {
            let partition = self.partition;
            let begun = match &mut self.db {
                Store::Lean(db) => crate::snapshot::CopySender::begin(
                    db,
                    crate::snapshot::next_copy_id(),
                    0,
                    partition,
                    seq,
                    usize::MAX,
                )
                .map(|sender| DigestCopy::Rows { seq, sender }),
                Store::Full(f) => f.database().begin_image_copy().ok().map(|()| DigestCopy::Image { seq }),
            };
            if let Some(copy) = begun {
                self.digest_copy = Some(copy);
                return None;
            }
        }
        Some(self.state_digest())
    }

    /// Has a batch that asks for the state digest begin a copy of the state after it, taken
    /// by the carrier ([`Replica::take_digest_copy`]), rather than digest the state at once
    /// on the executor.
    pub fn set_digest_by_copy(&mut self, by_copy: bool) {
        self.digest_by_copy = by_copy;
    }

    /// The digest copy begun after a batch that asked for the state digest, for the carrier
    /// to step and report. A carrier that digests by copy takes it after every message that
    /// can execute a batch; one not taken makes the next digest batch digest at once.
    pub fn take_digest_copy(&mut self) -> Option<DigestCopy> {
        self.digest_copy.take()
    }

    /// The partition's state digest now (a full scan: costly).
    pub fn state_digest(&mut self) -> StateDigest {
        match &mut self.db {
            Store::Lean(db) => engine::digest::digest(db).into(),
            Store::Full(f) => engine::digest::digest(f.session()).into(),
        }
    }

    pub fn role(&self) -> ReplicaRole {
        self.role.kind()
    }

    /// Bytes of log records applied so far as a backup.
    pub fn applied_bytes(&self) -> u64 {
        self.stats.applied_bytes
    }

    /// The last batch executed (0 before the first).
    pub fn applied_seq(&self) -> Seq {
        self.next_seq - 1
    }

    /// A new leader took over (docs/design.md §11): batches held past a gap are dropped —
    /// the old leader's batch of that number may never reach anyone, and the new leader
    /// numbers its own from after the furthest replica's — and where the replica now stands
    /// is returned for the leader.
    pub fn take_over(&mut self) -> ReplicaStanding {
        let role = self.role();
        let executed_seq = self.applied_seq();
        if role == ReplicaRole::Backup {
            // Shipments come from the primary, whose numbering the take-over does not change.
            return ReplicaStanding {
                role: role.reported(),
                executed_seq,
                held_seq: executed_seq,
                kept_from: executed_seq + 1,
                last_ts: self.last_ts,
                stopped: self.stopped.is_some(),
                held_reads: Vec::new(),
                pieces: match &self.role {
                    Role::Backup { applied_pieces, .. } => applied_pieces.iter().cloned().collect(),
                    Role::Replica(_) | Role::Primary { .. } => Vec::new(),
                },
            };
        }
        // With a batch under way, `next_seq` is that batch's number.
        let mut held_seq = if self.parked.is_some() { self.next_seq } else { executed_seq };
        while self.waiting.contains_key(&(held_seq + 1)) {
            held_seq += 1;
        }
        let dropped = self.waiting.split_off(&(held_seq + 1));
        self.stats.batches_dropped_at_take_over += dropped.len() as u64;
        let last_ts = self
            .waiting
            .values()
            .chain(self.parked.as_ref().map(|p| &p.batch))
            .filter_map(|b| b.txns.last().map(|t| t.ts))
            .chain(self.last_ts)
            .max();
        let kept_from = self.recent.front().map_or(executed_seq + 1, |r| r.batch.seq);
        // The new leader has seen none of their results.
        self.answer_again = self.recent.iter().map(|r| r.batch.seq).collect();
        let home = self.partition;
        let held_reads = self
            .piece_reads
            .iter()
            .flat_map(|(&ts, held)| {
                held.iter().map(move |(from, outcome)| PieceReads { home, from: *from, ts, outcome: outcome.clone() })
            })
            .collect();
        ReplicaStanding {
            role: role.reported(),
            executed_seq,
            held_seq,
            kept_from,
            last_ts,
            stopped: self.stopped.is_some(),
            held_reads,
            pieces: Vec::new(),
        }
    }

    /// The batches after `after` this replica executed recently or holds, in order and
    /// without gaps, at most [`wire::channel::control::HELD_BATCHES_PER_REPLY_MAX`] (none if
    /// it no longer keeps batch `after + 1`), with the remote pieces' outcomes their home
    /// pieces ran with or will run with, as far as this replica has them.
    pub fn held_batches(&self, after: Seq) -> (Vec<Batch>, Vec<PieceReads>) {
        let executed = self.recent.iter().map(|r| (&r.batch, Some(&r.used_reads)));
        let under_way = self.parked.iter().map(|p| (&p.batch, Some(&p.used_reads)));
        let held = under_way.chain(self.waiting.values().map(|b| (b, None)));
        let (mut batches, mut reads): (Vec<Batch>, Vec<PieceReads>) = (Vec::new(), Vec::new());
        for (b, used) in executed.chain(held).skip_while(|(b, _)| b.seq <= after) {
            let next = after + 1 + batches.len() as u64;
            if b.seq != next || batches.len() == wire::channel::control::HELD_BATCHES_PER_REPLY_MAX {
                break;
            }
            reads.extend(used.into_iter().flatten().cloned());
            batches.push(b.clone());
        }
        // Outcomes held for home pieces not yet run.
        let first = batches.first().and_then(|b| b.txns.first()).map(|t| t.ts);
        let last = batches.last().and_then(|b| b.txns.last()).map(|t| t.ts);
        if let (Some(first), Some(last)) = (first, last) {
            let home = self.partition;
            for (&ts, held) in self.piece_reads.range(first..=last) {
                reads.extend(held.iter().map(|(from, outcome)| PieceReads {
                    home,
                    from: *from,
                    ts,
                    outcome: outcome.clone(),
                }));
            }
        }
        (batches, reads)
    }

    /// The last timestamp executed.
    pub fn last_ts(&self) -> Option<Timestamp> {
        self.last_ts
    }

    /// Batches waiting for an earlier one.
    pub fn waiting_batches(&self) -> usize {
        self.waiting.len()
    }

    /// The timestamp of the home piece the batch under way is parked at, if it is.
    pub fn parked_at(&self) -> Option<Timestamp> {
        let p = self.parked.as_ref()?;
        p.order.get(p.pos).map(|&i| p.batch.txns[i].ts)
    }

    /// Why the replica stopped, if it did.
    pub fn stopped(&self) -> Option<&str> {
        self.stopped.as_deref()
    }

    /// The last membership announced: (epoch, live replicas).
    pub fn membership(&self) -> Option<&(u64, Vec<NodeId>)> {
        self.membership.as_ref()
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    pub fn partition(&self) -> PartitionId {
        self.partition
    }

    pub fn stats(&self) -> ReplicaStats {
        self.stats
    }

    /// The storage (for snapshots and checks).
    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.db
    }
}

/// Runs one piece of transaction `t` on `db` (`engine::distributed::execute_piece`): the
/// warehouses this partition holds are those of the transaction found in WAREHOUSE here.
fn run_piece<S: Storage>(
    db: &mut S,
    t: &BatchTxn,
    remote: Option<&[engine::distributed::RemoteReads]>,
) -> Result<Piece, engine::TxnError> {
    let local = local_warehouses(db, t);
    execute_piece(db, t.ts.0, &t.input, &|w| local.contains(&w), remote)
}

/// [`engine::distributed::rederive_reads`] of transaction `t` on `db`.
fn rederive<S: Storage>(db: &mut S, t: &BatchTxn) -> Result<engine::distributed::RemoteReads, engine::TxnError> {
    let local = local_warehouses(db, t);
    engine::distributed::rederive_reads(db, t.ts.0, &t.input, &|w| local.contains(&w))
}

/// Whether `db` holds warehouse `w` (its WAREHOUSE row is here).
pub(crate) fn holds_warehouse<S: Storage>(db: &mut S, w: WarehouseId) -> bool {
    db.get::<engine::schema::t::Warehouses, _>(engine::schema::keys::warehouse(w), |_| ()).is_ok_and(|r| r.is_some())
}

/// The warehouses of transaction `t` this partition holds (those found in its WAREHOUSE).
fn local_warehouses<S: Storage>(db: &mut S, t: &BatchTxn) -> Vec<u16> {
    let mut local = touched(&t.input);
    local.retain(|&w| {
        db.get::<engine::schema::t::Warehouses, _>(engine::schema::keys::warehouse(w), |_| ())
            .is_ok_and(|r| r.is_some())
    });
    local
}

/// The outcome of a replayed transaction that restart recovery found committed: not run
/// again (docs/design.md §10). Its client was answered "outcome unknown" when the partition's
/// last replica failed; the coordinator expects no answer for a replayed batch.
pub fn committed_before_restart() -> TxnOutcome {
    TxnOutcome::Failed { reason: "committed before the restart (restart recovery kept it); not run again".into() }
}

#[cfg(test)]
mod tests {
    //! Ordering and refusal on an empty database: every transaction fails (no rows), which is
    //! enough to see what runs, in which order. Execution on loaded data is tested in
    //! `tests/`.
    use super::*;
    use engine::procedures::{DeliveryInput, TxnInput};
    use wire::messages::BatchTxn;

    fn batch(seq: Seq, ts: &[u64]) -> Batch {
        let txns = ts
            .iter()
            .map(|&t| BatchTxn {
                part: wire::messages::Part::Whole,
                ts: Timestamp(t),
                input: TxnInput::Delivery(DeliveryInput { w_id: 1, o_carrier_id: 1, date: 1 }),
            })
            .collect();
        Batch { partition: 1, seq, txns, digest_after: false }
    }

    fn replica() -> Replica {
        Replica::new(1, 1, LeanDb::new(), 4)
    }

    fn seqs(r: &[Results]) -> Vec<Seq> {
        r.iter().map(|r| r.seq).collect()
    }

    /// A replica can be loaded on one thread and handed to its executor thread.
    #[test]
    fn a_replica_can_move_between_threads() {
        fn send<T: Send>() {}
        send::<Replica>();
    }

    #[test]
    fn a_gap_waits_for_the_missing_batch() {
        let mut r = replica();
        assert_eq!(seqs(&r.on_batch(batch(3, &[30])).unwrap()), Vec::<Seq>::new());
        assert_eq!(seqs(&r.on_batch(batch(2, &[20, 21])).unwrap()), Vec::<Seq>::new());
        assert_eq!(r.waiting_batches(), 2);
        let out = r.on_batch(batch(1, &[10])).unwrap();
        assert_eq!(seqs(&out), vec![1, 2, 3]);
        assert_eq!(out[1].results.iter().map(|t| t.ts.0).collect::<Vec<_>>(), vec![20, 21]);
        assert_eq!((r.applied_seq(), r.last_ts(), r.waiting_batches()), (3, Some(Timestamp(30)), 0));
        assert_eq!(r.stats().batches_waited, 2);
    }

    #[test]
    fn duplicates_are_dropped_whether_executed_or_waiting() {
        let mut r = replica();
        r.on_batch(batch(1, &[10])).unwrap();
        assert!(r.on_batch(batch(1, &[10])).unwrap().is_empty());
        r.on_batch(batch(3, &[30])).unwrap();
        assert!(r.on_batch(batch(3, &[30])).unwrap().is_empty());
        assert_eq!(seqs(&r.on_batch(batch(2, &[20])).unwrap()), vec![2, 3]);
        assert_eq!(r.stats().duplicate_batches, 2);
        assert_eq!(r.stats().batches_executed, 3);
    }

    #[test]
    fn two_different_batches_under_one_number_stop_the_replica() {
        let mut r = replica();
        r.on_batch(batch(2, &[20])).unwrap();
        assert_eq!(r.on_batch(batch(2, &[21])), Err(ReplicaError::ConflictingDuplicate { seq: 2 }));
        assert!(matches!(r.on_batch(batch(1, &[10])), Err(ReplicaError::Stopped { .. })));
    }

    #[test]
    fn timestamps_out_of_order_stop_the_replica_before_anything_runs() {
        let mut r = replica();
        r.on_batch(batch(1, &[10, 11])).unwrap();
        let e = r.on_batch(batch(2, &[12, 11])).unwrap_err();
        assert_eq!(e, ReplicaError::TimestampRegression { seq: 2, ts: Timestamp(11), last: Timestamp(12) });
        assert_eq!(r.applied_seq(), 1);
        assert_eq!(r.last_ts(), Some(Timestamp(11)));
        assert!(r.stopped().is_some());

        let mut r = replica();
        r.on_batch(batch(1, &[10])).unwrap();
        assert!(matches!(r.on_batch(batch(2, &[10])), Err(ReplicaError::TimestampRegression { .. })));
    }

    #[test]
    fn batches_too_far_ahead_or_for_another_partition_are_refused() {
        let mut r = replica();
        assert_eq!(
            r.on_batch(batch(5, &[50])),
            Err(ReplicaError::TooFarAhead { seq: 5, next_seq: 1, pending_batches_max: 4 })
        );
        r.on_batch(batch(4, &[40])).unwrap();
        let mut other = batch(1, &[10]);
        other.partition = 2;
        assert_eq!(r.on_batch(other), Err(ReplicaError::WrongPartition { expected: 1, got: 2 }));
        assert!(r.stopped().is_none(), "refusals that do not touch the order do not stop the replica");
    }

    #[test]
    fn invalid_inputs_fail_without_running() {
        let mut r = replica();
        let mut b = batch(1, &[10]);
        b.txns[0].input = TxnInput::Delivery(DeliveryInput { w_id: 1, o_carrier_id: 11, date: 1 });
        let out = r.on_batch(b).unwrap();
        let reason = InputError::Carrier { value: 11, min: 1, max: 10 }.to_string();
        assert_eq!(out[0].results[0].outcome, TxnOutcome::Failed { reason });
    }

    #[test]
    fn messages_digests_membership_and_stop() {
        let mut r = replica();
        let empty = r.state_digest();
        let out = r.digest_reply(4, 1).unwrap();
        assert_eq!(
            out,
            ToolReply::DigestReply {
                request_id: 4,
                partition: 1,
                outcome: DigestOutcome::Digests { seq: 0, digests: vec![(1, empty)] }
            }
        );
        let mut b = batch(1, &[10]);
        b.digest_after = true;
        let out = r.on_control(CoordinatorToNode::Batch(b)).unwrap();
        let [Emit::ToCoordinator(NodeToCoordinator::Results(res)), Emit::ToCoordinator(NodeToCoordinator::StateDigest { partition: 1, seq: 1, digest: Ok(digest) })] =
            &out[..]
        else {
            panic!("{out:?}")
        };
        assert_eq!((res.seq, *digest), (1, empty));
        r.on_control(CoordinatorToNode::Membership { partition: 1, epoch: 2, live: vec![1] }).unwrap();
        r.on_control(CoordinatorToNode::Membership { partition: 1, epoch: 1, live: vec![1, 2] }).unwrap();
        assert_eq!(r.membership(), Some(&(2, vec![1])));
        r.on_control(CoordinatorToNode::PartitionStopped { partition: 1, reason: "diverged".into() }).unwrap();
        assert_eq!(r.on_batch(batch(2, &[20])), Err(ReplicaError::Stopped { reason: "diverged".into() }));
        assert!(matches!(
            r.on_control(CoordinatorToNode::Shutdown { reason: String::new() }),
            Err(ReplicaError::Unexpected { .. })
        ));
    }
}
