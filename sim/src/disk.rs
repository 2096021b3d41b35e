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

use engine::conventional::CutAt;
use engine::LeanDb;
use node::error::{RejoinError, ReplicaError};
use node::fullstack::FullStack;
use node::replica::{ReplicaRole, Store};
use wire::config::{Mode, PartitionConfig};
use wire::messages::{NodeId, PartitionId};

/// Every full-stack replica's medium, by node and partition.
#[derive(Debug, Default)]
pub struct Disks {
    media: BTreeMap<(NodeId, PartitionId), ()>,
}

impl Disks {
    /// The store node `node`'s replica of `p` starts from, in `role`: the population `db`
    /// itself (lean modes).
    pub fn load(
        &mut self,
        mode: Mode,
        node: NodeId,
        p: &PartitionConfig,
        seed: u64,
        db: LeanDb,
        role: ReplicaRole,
    ) -> Store {
        let _ = (node, p, seed, role);
        assert!(mode != Mode::FullStack, "the full stack's media are not simulated yet");
        Store::Lean(db)
    }

    /// Restart recovery of node `node`'s replica of `partition` from its medium, its log cut at
    /// `cut` first.
    pub fn recover(
        &mut self,
        node: NodeId,
        partition: PartitionId,
        cut: Option<CutAt>,
    ) -> Result<FullStack, RejoinError> {
        let _ = (node, partition, cut, &self.media);
        Err(RejoinError::Recovery(ReplicaError::Unexpected { what: "restart recovery (the lean kernel keeps no log)" }))
    }

    /// Node `node` crashed: each of its media keeps what was synced, plus the first
    /// `torn(unsynced_bytes)` bytes of what was not.
    pub fn crash(&mut self, node: NodeId, torn: impl FnMut(usize) -> usize) {
        let _ = (node, torn);
    }
}
