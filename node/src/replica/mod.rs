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
//! This file holds the [`Replica`], its roles and the state each holds, its constructor, the
//! dispatch of the coordinator's messages ([`Replica::on_control`]) and the small accessors.
//! `impl Replica` is split by concern, each file stating the guarantees it keeps:
//! - `load`: a replica loaded from its seed, restored from a copy, or recovered from its log;
//! - `execute`: batches in sequence order, their transactions in timestamp order, and the
//!   pieces of multi-partition transactions;
//! - `passive`: a primary's log shipped, a backup applying it, and a backup promoted;
//! - `digest`: state digests (at once, or by a copy off the executor) and a tool's reads;
//! - `take_over`: where the replica stands for a new coordinator leader (docs/design.md §11);
//! - `tests`: ordering and refusal on an empty database.
//!
//! Guarantee kept here: once stopped (a divergence reported by the coordinator, or a refused
//! stream) the replica executes nothing more — a stop drops every batch, shipment and piece
//! outcome it held.

use std::collections::BTreeMap;

use engine::LeanDb;
use wire::channel::{CoordinatorToNode, NodeToCoordinator};
use wire::config::{Mode, PartitionConfig};
use wire::messages::{
    Batch, NodeId, PartitionId, PieceOutcome, PieceReads, Results, Seq, Shipment, StateDigest, Timestamp, TxnOutcome,
};

use crate::error::ReplicaError;
use crate::fullstack::FullStack;

mod digest;
mod execute;
mod load;
mod passive;
mod recall;
mod take_over;
#[cfg(test)]
mod tests;

pub use digest::DigestCopy;
pub(crate) use execute::holds_warehouse;
pub use execute::{committed_before_restart, PIECE_READS_HELD_MAX};
pub use passive::{LogBase, LogBaseSource};
pub use recall::RECALLS_HELD_MAX;
pub use take_over::RECENT_BATCHES_KEPT;

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
        if mode.every_replica_executes() || partition.replicas.len() == 1 {
            ReplicaRole::Replica
        } else if partition.replicas.first() == Some(&node) {
            ReplicaRole::Primary
        } else {
            ReplicaRole::Backup
        }
    }

    /// The role a replica comes back in under `mode` — rejoining (the partition went on
    /// without it) or joining: a backup, fed by the primary's shipments, in the passive
    /// modes; a replica executing every batch from the one it rejoined at in active-active.
    pub fn rejoining(mode: Mode) -> ReplicaRole {
        if mode.every_replica_executes() {
            ReplicaRole::Replica
        } else {
            ReplicaRole::Backup
        }
    }

    /// The role node `node`'s replica of `partition` starts in, when its process starts:
    /// one that loads takes the role the file gives it ([`ReplicaRole::of`]); one that comes
    /// back (`restarted`: `--rejoin`, or `--join`) is never a primary — the partition went on
    /// without it, under a promoted backup (docs/design.md §10) — and a replica the file does
    /// not place here (`joined`: `--join`) starts as a backup in the passive modes. The node
    /// process and the simulator both start replicas here.
    pub fn at_start(
        mode: Mode,
        partition: &PartitionConfig,
        node: NodeId,
        restarted: bool,
        joined: bool,
    ) -> ReplicaRole {
        match ReplicaRole::of(mode, partition, node) {
            _ if joined => ReplicaRole::rejoining(mode),
            ReplicaRole::Primary if restarted => ReplicaRole::Backup,
            r => r,
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
    /// Batches held unexecuted while a new leader's take-over was answered ahead of them.
    pub batches_held_for_take_over: u64,
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

/// A replica's [`ReplicaRole`] with the state only that role holds.
#[derive(Debug)]
enum RoleState {
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
        ///
        /// [`RECENT_SHIPMENTS_KEPT`]: wire::messages::RECENT_SHIPMENTS_KEPT
        applied_pieces: std::collections::VecDeque<Batch>,
    },
}

impl RoleState {
    fn of(kind: ReplicaRole) -> RoleState {
        match kind {
            ReplicaRole::Replica => RoleState::Replica(Executing::default()),
            ReplicaRole::Primary => RoleState::Primary { executing: Executing::default(), log_base: None },
            ReplicaRole::Backup => RoleState::Backup {
                waiting_shipments: Waiting::new(),
                applied_pieces: std::collections::VecDeque::new(),
            },
        }
    }

    fn kind(&self) -> ReplicaRole {
        match self {
            RoleState::Replica(_) => ReplicaRole::Replica,
            RoleState::Primary { .. } => ReplicaRole::Primary,
            RoleState::Backup { .. } => ReplicaRole::Backup,
        }
    }

    fn executing_mut(&mut self) -> Option<&mut Executing> {
        match self {
            RoleState::Replica(executing) | RoleState::Primary { executing, .. } => Some(executing),
            RoleState::Backup { .. } => None,
        }
    }

    fn waiting_shipments_mut(&mut self) -> Option<&mut Waiting> {
        match self {
            RoleState::Backup { waiting_shipments, .. } => Some(waiting_shipments),
            RoleState::Replica(_) | RoleState::Primary { .. } => None,
        }
    }
}

/// A partition replica.
#[derive(Debug)]
pub struct Replica {
    node: NodeId,
    partition: PartitionId,
    role: RoleState,
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
    /// Whether `recent` holds every batch executed since the partition was loaded, and this
    /// replica executed them all (`recall`: what it remembers).
    remembers_since_load: bool,
    /// A leader's recalls waiting for a batch to be executed (`recall`).
    pending_recalls: Vec<recall::PendingRecall>,
    /// A backup (and once promoted, until they age out): the outcomes its primary shipped
    /// with the last [`RECENT_BATCHES_KEPT`] shipments it applied, oldest first (`recall`).
    shipped_answers: std::collections::VecDeque<(Seq, Vec<wire::messages::RecalledOutcome>)>,
    /// Whether a batch that asks for the state digest begins a copy of the state after it
    /// for its carrier to digest off the executor ([`Replica::take_digest_copy`]); else (and
    /// when a copy is under way already) the digest is taken here, at once.
    digest_by_copy: bool,
    /// A digest copy begun and not yet taken by the carrier.
    digest_copy: Option<DigestCopy>,
    /// The state digest announced when the replica was ready, kept while no batch has run.
    load_digest: Option<StateDigest>,
    /// Whether batches are held rather than executed, for a new leader's take-over waiting
    /// behind them (`take_over`: [`Replica::set_holding`]).
    hold: take_over::Hold,
    /// From a take-over until the new leader's first membership: the kept batches are not
    /// aged out, so that the leader's fetch finds the window its standing announced while
    /// held batches run (`take_over`).
    window_held: bool,
    stats: ReplicaStats,
}

impl Replica {
    /// The active-active replica of `partition` on node `node` over an already loaded `db`; it
    /// expects batch 1 next.
    pub fn new(node: NodeId, partition: PartitionId, db: LeanDb, pending_batches_max: usize) -> Replica {
        Replica::with_role(node, partition, ReplicaRole::Replica, Store::Lean(db), pending_batches_max)
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
            role: RoleState::of(role),
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
            // Over a freshly loaded database (a copy, a log's recovery: see `load`).
            remembers_since_load: true,
            pending_recalls: Vec::new(),
            shipped_answers: std::collections::VecDeque::new(),
            digest_by_copy: false,
            digest_copy: None,
            hold: take_over::Hold::Off,
            window_held: false,
            load_digest: None,
            stats: ReplicaStats::default(),
        }
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
                // The new leader took over: its fetch is over (`take_over`).
                self.window_held = false;
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
            CoordinatorToNode::SendBatches { partition, after, whole_after } => {
                self.check_partition(partition)?;
                let (batches, reads) = self.held_batches(after, whole_after);
                Ok(vec![Emit::ToCoordinator(NodeToCoordinator::HeldBatches { partition, batches, reads })])
            }
            CoordinatorToNode::RecallOutcomes { partition, recall, through, ids } => {
                self.check_partition(partition)?;
                if ids.len() > wire::channel::control::RECALL_IDS_MAX {
                    return Err(ReplicaError::Unexpected { what: "a recall of more request ids than RECALL_IDS_MAX" });
                }
                let mut out = Vec::new();
                self.on_recall(recall, through, ids, &mut out);
                Ok(out)
            }
            CoordinatorToNode::SendResults { partition, seqs } => {
                self.check_partition(partition)?;
                if seqs.len() > wire::channel::control::SEND_RESULTS_MAX {
                    return Err(ReplicaError::Unexpected { what: "a request for more batches than SEND_RESULTS_MAX" });
                }
                Ok(seqs.into_iter().map(|seq| Emit::ToCoordinator(self.kept_results(seq))).collect())
            }
            CoordinatorToNode::Heartbeat { .. } => Ok(Vec::new()),
            CoordinatorToNode::Shutdown { .. } => {
                Err(ReplicaError::Unexpected { what: "a shutdown (the node's, not a replica's)" })
            }
        }
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
