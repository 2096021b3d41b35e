//! A partition's lifecycle (docs/cluster.md, "What happens when things fail"): loading until
//! every live replica reports the same load digest, serving, and stopped for good or
//! unavailable — with every request it holds answered on the way out.
//!
//! Guarantees:
//! - a partition serves only once all its live replicas — backups included — loaded the same
//!   state (equal load digests); a disagreement, at load or later, stops it for good and is
//!   reported as [`Event::Diverged`]; replicas that do not load within
//!   `timeouts.load_timeout_s` stop it too;
//! - a replica failing takes the partition to a promotion (passive modes, a backup left), to
//!   serving on without it (a live executing replica left), or to unavailable — and every
//!   request a stopped or unavailable partition held gets its one reply.

use wire::channel::CoordinatorToNode;
use wire::messages::{ClientReply, ClientResult, LoadState, NodeId, PartitionId, Rejection, StateDigest};

use super::{ClientRef, Coordinator, Event, Output, Partition, Phase};
use crate::agreement::{Divergence, DivergenceKind};

impl Coordinator {
    pub(super) fn on_load_status(
        &mut self,
        from: NodeId,
        partition: PartitionId,
        state: LoadState,
        out: &mut Vec<Output>,
    ) {
        let Some(p) = self.partitions.get_mut(&partition) else {
            out.push(Output::Event(Event::Ignored {
                node: from,
                what: format!("load status of unknown partition {partition}"),
            }));
            return;
        };
        if let (LoadState::Failed { reason }, true) = (&state, p.joining.iter().any(|(n, _)| *n == from)) {
            // A joiner gave up its rejoin while still connected: it no longer rejoins, so the
            // partition's catch-up throttle ends ([`Coordinator::settle_watching`]) and the
            // remote pieces' outcomes kept for it may go.
            p.joining.retain(|(n, _)| *n != from);
            if let Some(catching_up) = p.catching_up_mut() {
                catching_up.remove(&from);
            }
            out.push(Output::Event(Event::RejoinGivenUp { partition, node: from, reason: reason.clone() }));
            return;
        }
        if !p.members().any(|n| n == from) {
            out.push(Output::Event(Event::Ignored {
                node: from,
                what: format!("load status of partition {partition}, of which it is no live replica"),
            }));
            return;
        }
        match state {
            LoadState::Loading { rows_loaded, rows_total } => {
                out.push(Output::Event(Event::LoadProgress { partition, node: from, rows_loaded, rows_total }));
            }
            LoadState::Ready { digest } => {
                if p.phase == Phase::Loading {
                    p.loaded.insert(from, digest);
                    p.check_ready(out);
                } else {
                    let what = format!("a load report for partition {partition}, which is past loading");
                    out.push(Output::Event(Event::Ignored { node: from, what }));
                }
            }
            LoadState::Failed { reason } => {
                out.push(Output::Event(Event::LoadFailed { partition, node: from, reason }));
                p.replica_down(from, &mut self.membership_epoch, out);
            }
        }
    }
}

impl Partition {
    /// Serves once every live replica loaded, if their load digests agree.
    fn check_ready(&mut self, out: &mut Vec<Output>) {
        let live: Vec<NodeId> = self.members().collect();
        if self.agreement.live().is_empty() || !live.iter().all(|n| self.loaded.contains_key(n)) {
            return;
        }
        let digests: Vec<(NodeId, StateDigest)> = live.iter().map(|n| (*n, self.loaded[n])).collect();
        if digests.iter().all(|(_, d)| *d == digests[0].1) {
            self.phase = Phase::Serving;
            out.push(Output::Event(Event::PartitionReady { partition: self.id, replicas: live, digest: digests[0].1 }));
        } else {
            let divergence =
                Divergence { partition: self.id, seq: 0, kind: DivergenceKind::Load { digests }, after_answer: false };
            let reason = divergence.to_string();
            self.stop(reason, out);
            out.push(Output::Event(Event::Diverged(divergence)));
        }
    }

    pub(super) fn replica_down(&mut self, node: NodeId, epoch: &mut u64, out: &mut Vec<Output>) {
        if let Some(s) = self.passive_mut() {
            s.backups.retain(|&b| b != node);
            s.confirming.retain(|c| c.0 != node);
        }
        if let Phase::Promoting { backup } = self.phase {
            if backup == node {
                // The backup being promoted failed too: try the next, if any.
                self.phase = Phase::Serving;
                self.promote_next(out);
                return;
            }
            if self.agreement.live() == [node] {
                // The failed primary the promotion replaces, failing again (its restarted
                // process asked to rejoin, then went too): the promotion already answers for
                // it. Found by `glass sim --mode active-passive --shipping sync --seed 15`,
                // where it left the partition with no live replica.
                return;
            }
        }
        let primary_failed = !self.mode.every_replica_executes() && self.agreement.live() == [node];
        // A primary failing while the partition still loads is replaced too: its backups load
        // the same state (found by `glass sim --mode active-passive --seed 22`, where such a
        // partition was left with no live replica and never served).
        let any_backup = !self.backups().is_empty() || self.passive().is_some_and(|s| !s.confirming.is_empty());
        if primary_failed && matches!(self.phase, Phase::Serving | Phase::Loading) && any_backup {
            self.loaded.remove(&node);
            self.promote_next(out);
            return;
        }
        if self.agreement.live() == [node] && matches!(self.phase, Phase::Serving | Phase::Recovering { .. }) {
            // The last executing replica: what it was sent and did not answer may have taken
            // effect (in full-stack mode, durably) — the clients cannot be told it did not.
            // (Only a passive mode's last primary may come back from its own log.)
            if let Some(s) = self.passive_mut() {
                s.last_primary = Some(node);
            }
            self.close_open_for_replay(out);
            self.answer_sent_unknown("the partition's last replica failed before answering", out);
            if let Some(s) = self.passive_mut() {
                s.lose_unanswered();
            }
        }
        let verdicts =
            if self.agreement.live().contains(&node) { self.agreement.replica_down(node) } else { Vec::new() };
        self.loaded.remove(&node);
        for v in verdicts {
            self.apply(v, out);
        }
        if !self.agreement.live().is_empty() {
            if !matches!(self.phase, Phase::Loading | Phase::Serving) {
                return;
            }
            *epoch += 1;
            // The primary's node learns here which backups it still waits for.
            let live: Vec<NodeId> = self.members().collect();
            out.push(Output::ToNodes {
                nodes: live.clone(),
                msg: CoordinatorToNode::Membership { partition: self.id, epoch: *epoch, live },
            });
            if self.phase == Phase::Loading {
                self.check_ready(out);
            }
        } else if matches!(self.phase, Phase::Loading | Phase::Serving | Phase::Recovering { .. }) {
            // The agreement had nothing pending and returned no verdict: loading, or the last
            // replica's pending batches were answered above. A node that failed during its
            // restart recovery may then recover again (the partition is unavailable, not
            // "recovering" for ever: its restarted process would be refused).
            self.phase = Phase::Unavailable;
            self.reject_open(Rejection::NoLiveReplica { partition: self.id }, out);
            out.push(Output::Event(Event::PartitionUnavailable { partition: self.id }));
        }
    }

    /// Stops the partition from outside the agreement (load divergence, load timeout).
    pub(super) fn stop(&mut self, reason: String, out: &mut Vec<Output>) {
        let unanswered = self.agreement.stop();
        self.stop_answering(unanswered, reason, out);
    }

    /// Stops the partition for good: every unanswered request is told why, and so are the
    /// replicas.
    pub(super) fn stop_answering(&mut self, unanswered: Vec<ClientRef>, reason: String, out: &mut Vec<Output>) {
        let rejection = Rejection::PartitionStopped { partition: self.id, reason: reason.clone() };
        self.reject_all(unanswered, rejection, out);
        self.phase = Phase::Stopped { reason: reason.clone() };
        out.push(Output::ToNodes {
            nodes: self.members().collect(),
            msg: CoordinatorToNode::PartitionStopped { partition: self.id, reason },
        });
    }

    /// Answers every unanswered request — those handed back by the agreement, the open
    /// batch's and the digest requesters — with `rejection`.
    pub(super) fn reject_all(&mut self, unanswered: Vec<ClientRef>, rejection: Rejection, out: &mut Vec<Output>) {
        for tag in unanswered {
            out.push(Output::Reply {
                client: tag.client,
                reply: ClientReply { request_id: tag.request_id, result: ClientResult::Rejected(rejection.clone()) },
            });
        }
        self.reject_open(rejection, out);
    }

    /// Answers the open batch's requesters and the digest requesters with `rejection`, and
    /// forgets every admitted transaction (the caller answered the others).
    fn reject_open(&mut self, rejection: Rejection, out: &mut Vec<Output>) {
        self.sequencer.abandon_all();
        for tag in std::mem::take(&mut self.open_tags) {
            out.push(Output::Reply {
                client: tag.client,
                reply: ClientReply { request_id: tag.request_id, result: ClientResult::Rejected(rejection.clone()) },
            });
        }
        for (_, waiters) in std::mem::take(&mut self.digest_waiters) {
            self.reject_waiters(waiters, rejection.clone(), out);
        }
    }
}
