//! Rejoin plans (docs/design.md §10): a restarted node asks to rejoin a partition and is
//! given a plan — the live replica to copy, and the batch from which it receives batches (in
//! active-active) or its primary's shipments (in the passive modes) — and counts as a live
//! replica once it reports `Rejoined`. Meanwhile the partition's catch-up throttle
//! ([`crate::catch_up`]; docs/design.md §10, "Catching up under load") holds admission down.
//!
//! Guarantees: a joiner counts only from the batch after its copy, and only under the plan
//! this coordinator holds (a copy from a plan a promotion replaced is not counted; a node
//! reporting a rejoin this coordinator no longer holds is told the membership it is left out
//! of, so it rejoins afresh); a rejoin asked during a promotion or a restart recovery is
//! answered once it ends; the throttle begins with a plan and ends once no replica of the
//! partition rejoins.

use wire::channel::CoordinatorToNode;
use wire::messages::{NodeId, PartitionId, Seq};

use super::{Coordinator, Event, ModeState, Output, Phase};

impl Coordinator {
    /// A restarted node asks to rejoin `partition`: in active-active a live replica will copy
    /// its state to it, and it gets every batch from the next one on; in the passive modes
    /// the primary is told to ship to it from the next batch on, and it starts from a copy of
    /// the primary's state (active-passive) or from its own log, cut and recovered, plus the
    /// primary's log base (full stack). A full-stack partition with no live replica comes
    /// back from its last primary's log instead ([`Partition::resume_from_log`]).
    ///
    /// [`Partition::resume_from_log`]: super::Partition::resume_from_log
    pub(super) fn on_rejoin_request(&mut self, from: NodeId, partition: PartitionId, out: &mut Vec<Output>) {
        let refuse = |reason: String| Output::ToNodes {
            nodes: vec![from],
            msg: CoordinatorToNode::RejoinRefused { partition, reason },
        };
        let Some(p) = self.partitions.get_mut(&partition) else {
            out.push(refuse(format!("no partition {partition}")));
            return;
        };
        if p.mode.replica_keeps_own_log() && p.phase == Phase::Unavailable {
            self.membership_epoch += 1;
            let epoch = self.membership_epoch;
            let p = self.partitions.get_mut(&partition).expect("looked up above");
            match p.resume_from_log(from, epoch, out) {
                Ok(()) => {}
                Err(refused) => out.push(refuse(refused.to_string())),
            }
            return;
        }
        if let Phase::Promoting { backup: n } | Phase::Recovering { node: n } = p.phase {
            if n != from {
                if !p.deferred_rejoins.contains(&from) {
                    p.deferred_rejoins.push(from);
                }
                return;
            }
        }
        if p.phase != Phase::Serving {
            out.push(refuse(format!("partition {partition} is not serving")));
            return;
        }
        if p.members().any(|n| n == from) {
            out.push(refuse(format!("node {from} is already a live replica of partition {partition}")));
            return;
        }
        let Some(&source) = p.agreement.live().first() else {
            out.push(refuse(format!("partition {partition} has no live replica to copy")));
            return;
        };
        let from_seq = p.sequencer.next_seq();
        p.joining.retain(|(n, _)| *n != from);
        p.joining.push((from, from_seq));
        if !p.mode.every_replica_executes() {
            // The primary ships to the joiner from the next batch on; the joiner copies the
            // primary's state as of the batch before and holds the shipments meanwhile.
            out.push(Output::ToNodes {
                nodes: vec![source],
                msg: CoordinatorToNode::ShipTo { partition, backup: from },
            });
        }
        out.push(Output::Event(Event::Rejoining { partition, node: from, source, from_seq }));
        // The partition's catch-up throttle begins with the plan ([`Coordinator::settle_watching`]).
        out.push(Output::ToNodes {
            nodes: vec![from],
            msg: CoordinatorToNode::RejoinPlan { partition, source, from_seq },
        });
        if let Some(catching_up) = p.catching_up_mut() {
            catching_up.insert(from, (from_seq.saturating_sub(1), Seq::MAX));
            p.resend_reads(from, out);
        }
    }

    /// A rejoining node installed its copy and caught up: it counts from the next batch on.
    /// Tells `node`, which reported `Rejoined` for `partition` under a rejoin this coordinator
    /// no longer holds, the partition's membership it is left out of, so that it rejoins
    /// afresh. The case: the node was counted failed while it copied (found with a joiner
    /// whose heartbeats starved at saturation), came back and was told it is left out while
    /// still rejoining — which a rejoining replica ignores — then finished the old plan's
    /// copy, and serves a state the partition does not count. A failed node's other messages
    /// are ignored until it asks to rejoin; without this it never would.
    pub(super) fn tell_left_out(&self, node: NodeId, partition: PartitionId, out: &mut Vec<Output>) {
        let Some(p) = self.partitions.get(&partition) else { return };
        if p.members().any(|n| n == node) || !matches!(p.phase, Phase::Serving | Phase::Promoting { .. }) {
            return;
        }
        let live = p.members().collect();
        out.push(Output::ToNodes {
            nodes: vec![node],
            msg: CoordinatorToNode::Membership { partition, epoch: self.membership_epoch, live },
        });
    }

    pub(super) fn on_rejoined(
        &mut self,
        from: NodeId,
        partition: PartitionId,
        snapshot_seq: Seq,
        out: &mut Vec<Output>,
    ) {
        let Some(p) = self.partitions.get_mut(&partition) else { return };
        if p.phase == (Phase::Recovering { node: from }) {
            // Restart recovery from the log is done: the partition serves again.
            p.phase = Phase::Serving;
            let from_seq = snapshot_seq + 1;
            out.push(Output::Event(Event::RecoveredFromLog { partition, node: from, from_seq }));
            // Remote pieces it ran and answered whose outcomes died with it in flight: derived
            // again from its recovered state, for the home pieces still waiting.
            self.rederive_lost_pieces(out);
            return;
        }
        let Some(at) = p.joining.iter().position(|(n, _)| *n == from) else {
            out.push(Output::Event(Event::Ignored {
                node: from,
                what: format!("Rejoined for partition {partition}, not asked"),
            }));
            self.tell_left_out(from, partition, out);
            return;
        };
        let planned = p.joining[at].1;
        if !p.mode.every_replica_executes() && snapshot_seq + 1 < planned {
            // A copy taken under a plan a promotion replaced (the new plan was on its way):
            // the node rejoins again when the new plan reaches it.
            out.push(Output::Event(Event::Ignored {
                node: from,
                what: format!("Rejoined with a copy of batch {snapshot_seq}, older than its plan's batch {planned}"),
            }));
            return;
        }
        p.joining.remove(at);
        let sent = p.agreement.next_seq().saturating_sub(1);
        if let Some((done, until)) = p.catching_up_mut().and_then(|c| c.get_mut(&from)) {
            *done = (*done).max(snapshot_seq);
            *until = sent;
        }
        match &mut p.replication {
            ModeState::Passive(s) => {
                if s.backups.contains(&from) || s.confirming.iter().any(|c| c.0 == from) || p.agreement.is_stopped() {
                    return;
                }
                s.confirming.push((from, p.agreement.next_seq()));
                // Its copy holds every batch through `snapshot_seq`.
                let applied = s.backup_applied.entry(from).or_default();
                *applied = (*applied).max(snapshot_seq);
            }
            ModeState::ActiveActive { .. } => {
                if p.agreement.is_stopped() || !p.agreement.add_replica(from) {
                    return;
                }
            }
        }
        self.membership_epoch += 1;
        let live: Vec<NodeId> = p.members().collect();
        out.push(Output::ToNodes {
            nodes: live.clone(),
            msg: CoordinatorToNode::Membership { partition, epoch: self.membership_epoch, live },
        });
        let replayed_batches = sent.saturating_sub(snapshot_seq);
        out.push(Output::Event(Event::Rejoined { partition, node: from, snapshot_seq, replayed_batches }));
    }

    /// [`Coordinator::settle`], then each partition's catch-up throttle brought in line with
    /// its rejoins ([`CatchUp::watch`]): one begins when a rejoin plan went out (here or in
    /// `settle`, which answers deferred rejoin requests), and ends once no replica is
    /// rejoining any more — wherever `joining` was cleared or shrunk (`Rejoined`, a joiner
    /// failing, a promotion re-planning without the promoted node, a restart recovery) — or
    /// the partition stopped or lost its replicas. Client requests change neither.
    ///
    /// [`CatchUp::watch`]: crate::catch_up::CatchUp::watch
    pub(super) fn settle_watching(&mut self, out: Vec<Output>, now_us: u64) -> Vec<Output> {
        let mut out = self.settle(out);
        for p in self.partitions.values_mut() {
            let ended = matches!(p.phase, Phase::Stopped { .. } | Phase::Unavailable | Phase::Recovering { .. });
            let joiner = p.joining.first().map(|j| j.0).filter(|_| !ended);
            out.extend(p.catch_up.watch(p.id, joiner, now_us).map(Output::Event));
        }
        out
    }

    /// Rejoin requests deferred during a promotion or a restart recovery, once it ended: each
    /// is answered as if it arrived now (a node that failed meanwhile asks again when it is
    /// back).
    pub(super) fn answer_deferred_rejoins(&mut self, out: &mut Vec<Output>) {
        let ready: Vec<(PartitionId, Vec<NodeId>)> = self
            .partitions
            .values_mut()
            .filter(|p| !matches!(p.phase, Phase::Promoting { .. } | Phase::Recovering { .. }))
            .filter(|p| !p.deferred_rejoins.is_empty())
            .map(|p| (p.id, std::mem::take(&mut p.deferred_rejoins)))
            .collect();
        for (partition, nodes) in ready {
            for node in nodes {
                if self.nodes.get(&node).is_some_and(|n| n.live) {
                    self.on_rejoin_request(node, partition, out);
                }
            }
        }
    }
}
