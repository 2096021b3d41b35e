//! Promotion and replay (docs/design.md §10): in the passive modes, a failed primary is
//! replaced by its most up-to-date live backup; in full-stack mode, a partition left with no
//! live replica comes back from its last primary's write-ahead log, and the batches its
//! failure lost are replayed to it before any new one.
//!
//! Guarantees:
//! - the most up-to-date live backup is promoted (in sync shipping every live backup applied
//!   every answered batch, so it holds every acknowledged transaction); a backup not yet
//!   confirmed, only if it reported applying every answered batch; the promoted backup
//!   executes from the first batch no client heard about, and the batches before it that no
//!   client heard about are answered "outcome unknown", never dropped;
//! - a remote piece the failed primary ran alone is aborted at its home partition, not
//!   derived again from a state that never ran it;
//! - only the last primary may bring a full-stack partition back from its log, with no
//!   replica live; the batches sent to it and never answered, and its open batch, are kept
//!   and replayed to it, so no multi-partition transaction is left half done.

use std::collections::BTreeMap;

use wire::channel::CoordinatorToNode;
use wire::messages::{NodeId, PartitionId, PieceOutcome, PieceReads, Rejection, Seq, Timestamp};

use super::admission::outcome_unknown;
use super::{ClientRef, Coordinator, Event, Output, Partition, Phase};
use crate::agreement::Agreement;
use crate::error::ResumeRefused;

impl Coordinator {
    /// A backup of `promoted` became its primary, having applied every batch through
    /// `applied_seq` and executing from `next_seq`. Remote pieces of `promoted` whose outcomes
    /// never reached their home partition — they died with the old primary, or with a
    /// previous leader (docs/design.md §11) — are derived again from the new primary's state
    /// if it includes their batch; a piece in a batch it skipped (after `applied_seq`, before
    /// `next_seq`: run by the old primary alone, and lost with it) took effect nowhere that
    /// remains, so its home piece is told it aborted — deriving it from a state that never ran
    /// it would commit half a transaction.
    pub(super) fn after_promotion(
        &mut self,
        promoted: PartitionId,
        applied_seq: Seq,
        next_seq: Seq,
        out: &mut Vec<Output>,
    ) {
        let skipped: Vec<(PartitionId, Timestamp)> = self
            .partitions
            .values()
            .flat_map(|home| {
                home.piece_reads.iter().filter_map(move |(&ts, held)| {
                    held.remotes
                        .iter()
                        .any(|&(q, seq)| q == promoted && !held.has(q) && applied_seq < seq && seq < next_seq)
                        .then_some((home.id, ts))
                })
            })
            .collect();
        for (home, ts) in skipped {
            let reason = format!("partition {promoted}'s failed primary ran this piece alone, and it was lost");
            let reads = PieceReads { home, from: promoted, ts, outcome: PieceOutcome::Aborted { reason } };
            self.deliver_reads(reads, out);
        }
        self.rederive_lost_pieces(out);
    }
}

impl Partition {
    /// Passive modes, the primary failed: asks the first live backup to become the primary.
    /// (In sync shipping every live backup applied every answered batch, so any of them
    /// holds every acknowledged transaction.) With no backup left, the partition is
    /// unavailable.
    pub(super) fn promote_next(&mut self, out: &mut Vec<Output>) {
        // The most up-to-date backup (by what each last reported applied; the first listed
        // among equals).
        let Some(s) = self.passive() else { return };
        let applied = |b: &NodeId| s.backup_applied.get(b).copied().unwrap_or(0);
        let first_unanswered = s.unanswered.front().map_or(self.agreement.next_seq(), |b| b.seq);
        // A backup not yet confirmed may be promoted only if it reported applying every
        // answered batch.
        let confirming = s.confirming.iter().map(|c| c.0).filter(|b| applied(b) + 1 >= first_unanswered);
        let candidates: Vec<NodeId> = s.backups.iter().copied().chain(confirming).collect();
        let most_applied = candidates.iter().map(applied).max().unwrap_or(0);
        let best = candidates.iter().copied().find(|b| applied(b) == most_applied);
        let Some(backup) = best else {
            let primary = self.agreement.live().first().copied();
            if let Some(s) = self.passive_mut() {
                s.last_primary = primary.or(s.last_primary);
            }
            self.close_open_for_replay(out);
            self.answer_sent_unknown("the partition's last replica failed before answering", out);
            if let Some(s) = self.passive_mut() {
                s.lose_unanswered();
            }
            self.phase = Phase::Unavailable;
            self.reject_all(Vec::new(), Rejection::NoLiveReplica { partition: self.id }, out);
            out.push(Output::Event(Event::PartitionUnavailable { partition: self.id }));
            return;
        };
        self.phase = Phase::Promoting { backup };
        out.push(Output::Event(Event::Promoting { partition: self.id, backup, first_unanswered }));
        out.push(Output::ToNodes {
            nodes: vec![backup],
            msg: CoordinatorToNode::Promote { partition: self.id, first_unanswered },
        });
    }

    /// The promoted backup applied everything up to `applied_seq` and executes from
    /// `next_seq`: the batches before that no client heard about are answered "outcome
    /// unknown" (they took effect without a result); the rest are sent to the new primary.
    pub(super) fn on_promoted(
        &mut self,
        from: NodeId,
        applied_seq: Seq,
        next_seq: Seq,
        epoch: &mut u64,
        out: &mut Vec<Output>,
    ) {
        if self.phase != (Phase::Promoting { backup: from }) {
            out.push(Output::Event(Event::Ignored { node: from, what: "Promoted, not asked".into() }));
            return;
        }
        let pending = self.agreement.take_pending();
        let mut tags: BTreeMap<Seq, Vec<(Timestamp, ClientRef)>> =
            pending.into_iter().map(|(seq, txns, _)| (seq, txns)).collect();
        self.agreement =
            Agreement::starting_at(self.id, [from], next_seq).with_quorum(self.quorum, self.lag_batches_max);
        // The new primary may have applied batches a previous leader sent and this one never
        // saw (docs/design.md §11): its numbering is the partition's.
        self.sequencer.skip_to(next_seq);
        // A promoted backup ships to no one: the other backups would fall behind while still
        // counted, and a later promotion of one would lose what it missed. They stop counting
        // (restarted with --rejoin, they come back as the new primary's backups).
        let (backups, unanswered) = match self.passive_mut() {
            Some(s) => {
                s.backup_applied.clear();
                let confirming = s.confirming.drain(..).map(|c| c.0);
                let dropped: Vec<NodeId> = std::mem::take(&mut s.backups).into_iter().chain(confirming).collect();
                (dropped, std::mem::take(&mut s.unanswered))
            }
            None => Default::default(),
        };
        for dropped in backups.into_iter().filter(|&b| b != from) {
            out.push(Output::Event(Event::BackupDropped { partition: self.id, node: dropped }));
        }
        let mut unknown = 0usize;
        for batch in unanswered {
            let txns = tags.remove(&batch.seq).unwrap_or_default();
            if batch.seq < next_seq {
                unknown += txns.len();
                for (ts, tag) in txns {
                    let reason =
                        format!("the primary failed; batch {} reached the new primary without its result", batch.seq);
                    out.push(outcome_unknown(tag, ts, reason));
                }
                if let Some(waiters) = self.digest_waiters.remove(&batch.seq) {
                    self.reject_waiters(waiters, Rejection::NoLiveReplica { partition: self.id }, out);
                }
            } else {
                self.agreement.sent(batch.seq, txns, batch.digest_after);
                if let Some(s) = self.passive_mut() {
                    s.unanswered.push_back(batch.clone());
                }
                out.push(Output::ToNodes { nodes: vec![from], msg: CoordinatorToNode::Batch(batch) });
            }
        }
        self.answer_orphaned_digests(out);
        self.sequencer.complete(unknown);
        self.resend_reads(from, out);
        self.prune_reads();
        // Rejoins planned from the failed primary go on from the new one: it ships to them
        // from the next batch on, and they copy it. (Found by `glass sim --mode
        // active-passive --seed 16`: a rejoin planned before a promotion finished with a copy
        // from another node, and the new primary, never told to ship to it, left it behind.)
        let from_seq = self.sequencer.next_seq();
        let joiners: Vec<NodeId> = self.joining.iter().map(|(n, _)| *n).filter(|&n| n != from).collect();
        self.joining = joiners.iter().map(|&n| (n, from_seq)).collect();
        for node in joiners {
            let partition = self.id;
            out.push(Output::ToNodes { nodes: vec![from], msg: CoordinatorToNode::ShipTo { partition, backup: node } });
            out.push(Output::Event(Event::Rejoining { partition, node, source: from, from_seq }));
            out.push(Output::ToNodes {
                nodes: vec![node],
                msg: CoordinatorToNode::RejoinPlan { partition, source: from, from_seq },
            });
        }
        self.phase = Phase::Serving;
        *epoch += 1;
        let live: Vec<NodeId> = self.members().collect();
        out.push(Output::ToNodes {
            nodes: live.clone(),
            msg: CoordinatorToNode::Membership { partition: self.id, epoch: *epoch, live },
        });
        out.push(Output::Event(Event::Promoted { partition: self.id, primary: from, applied_seq, next_seq }));
    }

    /// Full stack, the last executing replica failed: the open batch is closed and sent like
    /// the others (to that replica, in vain), so that it is answered "outcome unknown" and
    /// kept for the replay with them. A multi-partition transaction admitted into it has its
    /// remote pieces in other partitions' batches, which run: rejecting its home piece here
    /// left them half a transaction. (Found by `glass sim --mode full-stack --seed 649`: a
    /// Payment admitted 39 µs before its home partition's last replica failed.)
    pub(super) fn close_open_for_replay(&mut self, out: &mut Vec<Output>) {
        if self.mode.replica_keeps_own_log() {
            if let Some(batch) = self.sequencer.flush() {
                self.send(batch, out);
            }
        }
    }

    /// Answers every transaction sent and not yet decided "outcome unknown" (`reason`): the
    /// replicas that executed it are gone with their answers.
    pub(super) fn answer_sent_unknown(&mut self, reason: &str, out: &mut Vec<Output>) {
        for (seq, txns, _) in self.agreement.take_pending() {
            for (ts, tag) in txns {
                out.push(outcome_unknown(tag, ts, format!("{reason} (batch {seq})")));
            }
            if let Some(waiters) = self.digest_waiters.remove(&seq) {
                self.reject_waiters(waiters, Rejection::NoLiveReplica { partition: self.id }, out);
            }
        }
    }

    /// Full-stack restart recovery: node `from` restarted, recovered the partition from its
    /// own write-ahead log and asks to serve it. Granted only when no replica is live and
    /// `from` was the last primary — its log holds every acknowledged transaction, where a
    /// backup's log holds only the load (backups apply shipped records in memory). It then
    /// executes every batch from the next one on, alone.
    pub(super) fn resume_from_log(
        &mut self,
        from: NodeId,
        epoch: u64,
        out: &mut Vec<Output>,
    ) -> Result<(), ResumeRefused> {
        let partition = self.id;
        match (&self.phase, self.passive().and_then(|s| s.last_primary)) {
            (Phase::Unavailable, Some(primary)) if primary == from => {}
            (Phase::Unavailable, Some(primary)) => {
                return Err(ResumeRefused::NotLastPrimary { partition, node: from, last_primary: primary })
            }
            (Phase::Unavailable, None) => return Err(ResumeRefused::NoLastPrimary { partition }),
            (Phase::Serving | Phase::Promoting { .. }, _) => return Err(ResumeRefused::PrimaryLive { partition }),
            (Phase::Loading, _) => return Err(ResumeRefused::Loading { partition }),
            (Phase::Recovering { node }, _) => return Err(ResumeRefused::Recovering { partition, node: *node }),
            (Phase::Stopped { reason }, _) => return Err(ResumeRefused::Stopped { partition, reason: reason.clone() }),
        }
        let from_seq = self.sequencer.next_seq();
        self.agreement =
            Agreement::starting_at(partition, [from], from_seq).with_quorum(self.quorum, self.lag_batches_max);
        self.answer_orphaned_digests(out);
        // The batches the failure lost are executed first (replayed below), then every batch
        // from `from_seq` on.
        let replay: Vec<wire::messages::Batch> =
            self.passive().map_or_else(Vec::new, |s| s.lost.iter().cloned().collect());
        let execute_from = replay.first().map_or(from_seq, |b| b.seq);
        self.joining.clear();
        if let Some(s) = self.passive_mut() {
            s.backups.clear();
            s.confirming.clear();
            s.unanswered.clear();
            s.last_primary = None;
        }
        self.phase = Phase::Recovering { node: from };
        out.push(Output::ToNodes {
            nodes: vec![from],
            msg: CoordinatorToNode::ResumeFromLog { partition, from_seq: execute_from },
        });
        self.resend_reads(from, out);
        for batch in replay {
            out.push(Output::ToNodes { nodes: vec![from], msg: CoordinatorToNode::Batch(batch) });
        }
        out.push(Output::ToNodes {
            nodes: vec![from],
            msg: CoordinatorToNode::Membership { partition, epoch, live: vec![from] },
        });
        out.push(Output::Event(Event::RecoveringFromLog { partition, node: from, from_seq: execute_from }));
        Ok(())
    }
}
