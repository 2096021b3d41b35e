//! What the machine tells outside it about the partitions: the memberships the coordinator
//! group records (docs/design.md §11), the memberships a node is sent, and status for
//! displays.
//!
//! Guarantees: read-only — nothing here changes the machine; in the passive modes a view
//! lists the primary, or the backup being promoted, first.

use wire::channel::CoordinatorToNode;
use wire::messages::NodeId;

use super::{Coordinator, PartitionStatus, Phase};
use crate::group::{PartitionView, ViewState};

impl Coordinator {
    /// Every partition's membership as the coordinator group records it (docs/design.md §11):
    /// its live replicas — in the passive modes the primary, or the backup being promoted,
    /// first — and where it is in its lifecycle.
    pub fn views(&self) -> Vec<PartitionView> {
        self.partitions
            .values()
            .map(|p| {
                let live = |n: &NodeId| self.nodes.get(n).is_some_and(|l| l.live);
                let mut replicas: Vec<NodeId> = p.members().filter(live).collect();
                let state = match &p.phase {
                    Phase::Loading => ViewState::Loading,
                    Phase::Serving => ViewState::Serving,
                    Phase::Promoting { backup } => {
                        replicas.retain(|n| n != backup);
                        replicas.insert(0, *backup);
                        ViewState::Serving
                    }
                    Phase::Stopped { reason } => ViewState::Stopped { reason: reason.clone() },
                    Phase::Unavailable => {
                        ViewState::Unavailable { last_primary: p.passive().and_then(|s| s.last_primary) }
                    }
                    Phase::Recovering { node } => {
                        replicas.clear();
                        ViewState::Unavailable { last_primary: Some(*node) }
                    }
                };
                PartitionView { partition: p.id, replicas, state }
            })
            .collect()
    }

    /// The current membership of every partition with a replica placed on `node`, as
    /// `Membership` messages (a node finding itself outside one rejoins: docs/design.md §11).
    pub fn memberships_for(&self, node: NodeId) -> Vec<CoordinatorToNode> {
        self.partitions
            .values()
            .filter(|p| {
                self.placement.get(&p.id).is_some_and(|r| r.contains(&node))
                    || p.members().any(|n| n == node)
                    || p.joining.iter().any(|(n, _)| *n == node)
            })
            // An unavailable partition's membership is empty: a replica of it that still
            // serves was its last, and rejoins (in full-stack mode, from its own log).
            .filter(|p| {
                matches!(p.phase, Phase::Serving | Phase::Loading | Phase::Promoting { .. } | Phase::Unavailable)
            })
            .map(|p| CoordinatorToNode::Membership {
                partition: p.id,
                epoch: self.membership_epoch,
                live: if p.phase == Phase::Unavailable { Vec::new() } else { p.members().collect() },
            })
            .collect()
    }

    /// Every partition's state.
    pub fn status(&self) -> Vec<PartitionStatus> {
        self.partitions
            .values()
            .map(|p| PartitionStatus {
                partition: p.id,
                phase: p.phase.clone(),
                live_replicas: p.members().collect(),
                inflight_txns: p.sequencer.inflight_txns(),
                batches_sent: p.sequencer.next_seq() - 1,
                decided_through: p.agreement.decided_through(),
            })
            .collect()
    }
}
