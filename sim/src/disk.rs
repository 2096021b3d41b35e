//! What a simulated node keeps on disk, which outlives its process: a full-stack replica's
//! durable medium (write-ahead log and checkpoint), in memory with crash semantics — what was
//! synced survives a crash, the unsynced tail of the log is lost or torn. The lean modes keep
//! nothing (docs/design.md §10: active-active and active-passive recover by copying a live
//! replica).
//!
//! Guarantees: a crash of a node crashes every medium of that node and nothing else; a
//! replica loaded or recovered here runs the real conventional stack (`node::fullstack`) with
//! its workers inline, so a run stays a function of its seed.

use std::collections::BTreeMap;

use engine::conventional::{Medium, MemoryMedium};
use engine::LeanDb;
use node::error::{RejoinError, ReplicaError};
use node::fullstack::{FullStack, Restart};
use node::replica::{ReplicaRole, Store};
use wire::config::{Mode, PartitionConfig};
use wire::messages::{NodeId, PartitionId};

/// Every full-stack replica's medium, by node and partition.
#[derive(Debug, Default)]
pub struct Disks {
    media: BTreeMap<(NodeId, PartitionId), MemoryMedium>,
}

impl Disks {
    /// The store node `node`'s replica of `p` starts from, in `role`: the population `db`
    /// itself (lean modes), or the conventional stack loaded with the same population on a
    /// fresh medium, its workers inline (a primary ships its log from the load on).
    pub fn load(
        &mut self,
        mode: Mode,
        node: NodeId,
        p: &PartitionConfig,
        seed: u64,
        db: LeanDb,
        role: ReplicaRole,
    ) -> Store {
        if !mode.conventional_stack() {
            return Store::Lean(db);
        }
        let medium = MemoryMedium::new();
        self.media.insert((node, p.id), medium.clone());
        let ship = role == ReplicaRole::Primary;
        let range = p.warehouses.range();
        let f = FullStack::load_scaled_on(
            Medium::Memory(medium),
            range,
            seed,
            crate::population::SCALE,
            0,
            ship,
            &mut |_| {},
        )
        .expect("the simulated full stack loads its population");
        Store::Full(Box::new(f))
    }

    /// Restart recovery of node `node`'s replica of `partition` from its medium (power back
    /// first, if it crashed), as `restart` says (its own log, cut to follow a log base, or a
    /// checkpoint image installed); workers inline.
    pub fn recover(
        &mut self,
        node: NodeId,
        partition: PartitionId,
        restart: &Restart,
    ) -> Result<FullStack, RejoinError> {
        let Some(medium) = self.media.get(&(node, partition)) else {
            let what = "restart recovery (the lean kernel keeps no log)";
            return Err(RejoinError::Recovery(ReplicaError::Unexpected { what }));
        };
        if medium.is_crashed() {
            medium.restart();
        }
        FullStack::restart_on(Medium::Memory(medium.clone()), 0, restart).map(|(f, _)| f).map_err(RejoinError::Recovery)
    }

    /// Node `node` lost power: each of its media keeps what was synced, plus the first
    /// `torn()` bytes of what was not (a torn write; 0: lost cleanly).
    pub fn crash(&mut self, node: NodeId, mut torn: impl FnMut() -> usize) {
        for ((n, _), medium) in &self.media {
            if *n == node {
                medium.crash(torn());
            }
        }
    }
}
