//! How a replica comes to be: loaded from its seed (the lean kernel, or in `full-stack` the
//! conventional stack on its medium), restored from a live replica's copy (a rejoin), or
//! recovered from its own write-ahead log (docs/design.md §10) — and the `LoadStatus`
//! messages that report it.
//!
//! Guarantees: the rows loaded are a pure function of the seed and the warehouses, so every
//! replica of a partition loads the same state (the coordinator compares their load
//! digests); a replica over a copy as of batch `seq` expects batch (or shipment) `seq + 1`
//! next; a recovered replica does not run again what restart recovery found committed, and
//! takes its resume point only before it executed anything.

use std::path::Path;

use engine::loader::{load_database, LoadProgress};
use engine::LeanDb;
use wire::channel::NodeToCoordinator;
use wire::config::{Mode, PartitionConfig};
use wire::messages::{LoadState, NodeId, PartitionId, Seq, Timestamp};

use super::{Replica, ReplicaRole, Store};
use crate::error::ReplicaError;
use crate::fullstack::FullStack;

impl Replica {
    /// An active-active replica over a copy of a live replica's state as of batch `seq` (a
    /// rejoin): it expects batch `seq + 1` next.
    pub fn restored(node: NodeId, partition: PartitionId, db: LeanDb, seq: Seq, pending_batches_max: usize) -> Replica {
        let mut r = Replica::new(node, partition, db, pending_batches_max);
        r.next_seq = seq + 1;
        r.remembers_since_load = false;
        r
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
        let db = if mode.conventional_stack() {
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
        r.remembers_since_load = false;
        r
    }

    /// A full-stack backup over the state restart recovery rebuilt from its own (cut) log and
    /// its primary's [`LogBase`] as of batch `seq`: it applies shipment `seq + 1` next.
    ///
    /// [`LogBase`]: super::LogBase
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
        r.remembers_since_load = false;
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
        r.remembers_since_load = false;
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
}
