//! The passive modes (docs/design.md, "The three modes"): a primary captures each batch's
//! log records and ships them (and, in `full-stack`, the [`LogBase`] a rejoining backup
//! starts from); a backup applies its primary's shipments in sequence order and
//! acknowledges them; a backup whose primary failed is promoted and executes.
//!
//! Guarantees:
//! - shipments apply in sequence order exactly once, as batches do; a shipment that fails its
//!   checksum or cannot be applied stops the backup before it changes anything it checked;
//! - a shipment from a node the latest membership does not name live (a deposed primary's)
//!   is dropped unacknowledged (docs/design.md §11); acknowledgements are cumulative;
//! - shipping to a new backup starts between batches, never inside one; a full-stack log
//!   base ends before what is still to ship, so every backup's log stays contiguous;
//! - a promoted backup executes from the first batch no client was answered for, or after
//!   what it applied; a full-stack one first checkpoints.

use wire::channel::{NodeToCoordinator, PeerReply};
use wire::messages::{Batch, NodeId, Seq, Shipment, ShippedLog, RECENT_SHIPMENTS_KEPT};

use super::{Executing, Replica, ReplicaRole, RoleState, Store};
use crate::error::ReplicaError;

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

impl Replica {
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
        self.remember_shipped(shipment.seq, shipment.answers);
        if !shipment.pieces.is_empty() {
            if let RoleState::Backup { applied_pieces, .. } = &mut self.role {
                if applied_pieces.len() == RECENT_SHIPMENTS_KEPT {
                    applied_pieces.pop_front();
                }
                let (partition, seq) = (self.partition, shipment.seq);
                applied_pieces.push_back(Batch {
                    partition,
                    seq,
                    txns: shipment.pieces,
                    digest_after: false,
                    answerer: None,
                });
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
        self.role = match std::mem::replace(&mut self.role, RoleState::Replica(Executing::default())) {
            RoleState::Replica(executing) => RoleState::Primary { executing, log_base: new_base },
            RoleState::Primary { executing, log_base } => {
                RoleState::Primary { executing, log_base: new_base.or(log_base) }
            }
            backup @ RoleState::Backup { .. } => backup,
        };
        Ok(())
    }

    /// A full-stack primary's [`LogBase`] for a rejoining backup, once it has one.
    pub fn log_base(&self) -> Option<&LogBaseSource> {
        match &self.role {
            RoleState::Primary { log_base, .. } => log_base.as_ref(),
            RoleState::Replica(_) | RoleState::Backup { .. } => None,
        }
    }

    /// How this replica answers a rejoining backup asking for a log base as of batch
    /// `after_seq` or later: served (`Ok(Some)`), asked again once it has one that recent
    /// (`Ok(None)`: a primary told to ship to the backup takes its base when the
    /// coordinator's `ShipTo` reaches it), or refused, saying why (a backup or a stopped
    /// replica never will have one). The node process and the simulator both answer here
    /// (docs/design.md §14).
    pub fn log_base_for(&self, after_seq: Seq) -> Result<Option<&LogBaseSource>, &'static str> {
        if self.stopped().is_some() {
            return Err("the replica is stopped");
        }
        match &self.role {
            RoleState::Backup { .. } => Err("a backup has no log base"),
            RoleState::Primary { log_base, .. } => Ok(log_base.as_ref().filter(|b| b.seq >= after_seq)),
            RoleState::Replica(_) => Ok(None),
        }
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
        self.role = RoleState::Replica(Executing { log_fork, ship_after: None });
        Ok(NodeToCoordinator::Promoted { partition: self.partition, applied_seq, next_seq: self.next_seq })
    }
}
