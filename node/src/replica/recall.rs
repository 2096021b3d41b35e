//! Remembered outcomes, recalled for a leader (docs/design.md §11, "Exactly-once answers"): a
//! client that lost an answer — its connection, or its leader, died — asks again with the
//! same request id, and the leader asks the partition's executing replicas what became of it.
//!
//! What a replica remembers is the outcomes of the batches it keeps for a new leader anyway
//! (the last [`super::RECENT_BATCHES_KEPT`] it executed, each with its results and its
//! transactions' request ids), and — a passive mode's backup — the outcomes its primary
//! shipped with the log records of the last as many batches, so that once promoted it
//! answers for what the primary ran and could not answer.
//!
//! Guarantees:
//! - an answer is given only once the replica executed every batch through the one the leader
//!   names (`through`), or at once when it cannot get there (stopped, a backup, too many
//!   recalls waiting) — the leader reads `executed_seq` and trusts a "not found" only from a
//!   replica that got there;
//! - `remembered_after` is honest: every transaction with a later timestamp that ran here
//!   through `executed_seq` is among those searched. A replica that executed (or applied,
//!   with their outcomes) every batch since its partition was loaded remembers from timestamp
//!   0; one whose state began as a copy or a log's recovery remembers only from the first
//!   batch it executed or applied itself (nothing before, and `Timestamp(u64::MAX)` while it
//!   ran none);
//! - only the outcomes a client is answered from are recalled: a whole transaction's, or a
//!   multi-partition transaction's home piece's (a remote piece's outcome is not its answer);
//!   a transaction replayed to a full-stack partition back alone from its log, which restart
//!   recovery found committed, is recalled as run with its outcome lost (never as absent).

use std::collections::HashSet;

use wire::channel::NodeToCoordinator;
use wire::messages::{Part, RecalledOutcome, RequestId, Seq, Timestamp};

use super::{Emit, Replica, ReplicaRole};

/// Recalls a replica holds until it executed the batch they name, at most; past it, one is
/// answered at once (the leader trusts its "not found" only if it got there).
pub const RECALLS_HELD_MAX: usize = 64;

/// A recall waiting for the replica to execute batch `through`.
#[derive(Debug)]
pub(super) struct PendingRecall {
    recall: u64,
    through: Seq,
    ids: Vec<RequestId>,
}

/// What batch `batch`'s transactions returned that a client can ask again about, from its
/// results: shipped with its log records to the backups.
pub(super) fn answers_of(batch: &wire::messages::Batch, results: &[wire::messages::TxnResult]) -> Vec<RecalledOutcome> {
    batch
        .txns
        .iter()
        .zip(results)
        .filter(|(t, _)| t.id.is_some() && matches!(t.part, Part::Whole | Part::Home { .. }))
        .map(|(t, r)| RecalledOutcome { id: t.id, ts: t.ts, outcome: Some(r.outcome.clone()) })
        .collect()
}

impl Replica {
    /// The leader's [`wire::channel::CoordinatorToNode::RecallOutcomes`]: answered once this
    /// replica executed batch `through` (at once if it did, or cannot).
    pub(super) fn on_recall(&mut self, recall: u64, through: Seq, ids: Vec<RequestId>, out: &mut Vec<Emit>) {
        let cannot_wait = self.stopped.is_some()
            || self.role() == ReplicaRole::Backup
            || self.pending_recalls.len() >= RECALLS_HELD_MAX;
        if self.applied_seq() >= through || cannot_wait {
            out.push(self.recalled(recall, &ids));
        } else {
            self.pending_recalls.push(PendingRecall { recall, through, ids });
        }
    }

    /// Answers the recalls waiting for a batch this replica has now executed.
    pub(super) fn answer_recalls(&mut self, out: &mut Vec<Emit>) {
        if self.pending_recalls.is_empty() {
            return;
        }
        let applied = self.applied_seq();
        let (ready, waiting): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.pending_recalls).into_iter().partition(|r| r.through <= applied);
        self.pending_recalls = waiting;
        for r in ready {
            out.push(self.recalled(r.recall, &r.ids));
        }
    }

    /// The timestamp after which every transaction this replica ran is among its kept
    /// batches (module comment).
    pub fn remembered_after(&self) -> Timestamp {
        if self.remembers_since_load {
            return Timestamp(0);
        }
        let executed = self.recent.iter().flat_map(|r| r.batch.txns.first()).map(|t| t.ts).next();
        let shipped = self.shipped_answers.iter().flat_map(|(_, a)| a.first()).map(|a| a.ts).next();
        // Shipments were applied before anything was executed here (a promotion).
        let first = match (shipped, executed) {
            (Some(s), Some(e)) => Some(s.min(e)),
            (s, e) => s.or(e),
        };
        first.map_or(Timestamp(u64::MAX), |ts| Timestamp(ts.0 - 1))
    }

    /// A backup applied shipment `seq`: it remembers the outcomes that came with it.
    pub(super) fn remember_shipped(&mut self, seq: Seq, answers: Vec<RecalledOutcome>) {
        if self.shipped_answers.len() == super::RECENT_BATCHES_KEPT {
            self.shipped_answers.pop_front();
            self.remembers_since_load = false;
        }
        self.shipped_answers.push_back((seq, answers));
    }

    fn recalled(&self, recall: u64, ids: &[RequestId]) -> Emit {
        let wanted: HashSet<RequestId> = ids.iter().copied().filter(|id| id.is_some()).collect();
        let mut found = Vec::new();
        if !wanted.is_empty() {
            // Oldest first: what a backup applied, then what it executed once promoted.
            for (_, answers) in &self.shipped_answers {
                found.extend(answers.iter().filter(|a| wanted.contains(&a.id)).cloned());
            }
            for kept in &self.recent {
                for (t, r) in kept.batch.txns.iter().zip(&kept.results.results) {
                    let answers_client = matches!(t.part, Part::Whole | Part::Home { .. });
                    if answers_client && wanted.contains(&t.id) {
                        // A replayed transaction restart recovery found committed ran before;
                        // its outcome died with the partition's replicas.
                        let lost = r.outcome == super::committed_before_restart();
                        let outcome = (!lost).then(|| r.outcome.clone());
                        found.push(RecalledOutcome { id: t.id, ts: t.ts, outcome });
                    }
                }
            }
        }
        Emit::ToCoordinator(NodeToCoordinator::Recalled {
            partition: self.partition,
            recall,
            executed_seq: self.applied_seq(),
            remembered_after: self.remembered_after(),
            found,
        })
    }
}

#[cfg(test)]
mod tests {
    //! What a replica remembers, on an empty database (every transaction fails: its outcome
    //! is what is remembered).
    use engine::procedures::{DeliveryInput, TxnInput};
    use engine::LeanDb;
    use wire::channel::{CoordinatorToNode, NodeToCoordinator};
    use wire::messages::{Batch, BatchTxn, Part, RequestId, Seq, Timestamp};

    use super::super::{Emit, Replica, ReplicaRole, Store, RECENT_BATCHES_KEPT};

    const CLIENT: u64 = 9;

    fn batch(seq: Seq, ts: u64) -> Batch {
        let input = TxnInput::Delivery(DeliveryInput { w_id: 1, o_carrier_id: 1, date: 1 });
        let t = BatchTxn { ts: Timestamp(ts), input, part: Part::Whole, id: RequestId { client: CLIENT, seq: ts } };
        Batch { partition: 1, seq, txns: vec![t], digest_after: false, answerer: None }
    }

    fn recall(r: &mut Replica, through: Seq, seqs: &[u64]) -> Vec<(u64, Seq, Timestamp, Vec<u64>)> {
        let ids = seqs.iter().map(|&seq| RequestId { client: CLIENT, seq }).collect();
        let msg = CoordinatorToNode::RecallOutcomes { partition: 1, recall: 7, through, ids };
        recalled(r.on_control(msg).unwrap())
    }

    fn recalled(out: Vec<Emit>) -> Vec<(u64, Seq, Timestamp, Vec<u64>)> {
        out.into_iter()
            .filter_map(|e| match e {
                Emit::ToCoordinator(NodeToCoordinator::Recalled {
                    recall,
                    executed_seq,
                    remembered_after,
                    found,
                    ..
                }) => {
                    assert!(found.iter().all(|f| f.outcome.is_some()));
                    Some((recall, executed_seq, remembered_after, found.iter().map(|f| f.id.seq).collect()))
                }
                _ => None,
            })
            .collect()
    }

    /// Remembered from the load while every executed batch is kept; a recall naming a batch
    /// not executed yet is answered once it is; the oldest batch's outcomes are forgotten with
    /// it, and `remembered_after` moves past them.
    #[test]
    fn a_replica_remembers_its_kept_batches_and_says_from_when() {
        let mut r = Replica::new(1, 1, LeanDb::new(), 4);
        r.on_batch(batch(1, 10)).unwrap();
        assert_eq!(recall(&mut r, 1, &[10, 11]), vec![(7, 1, Timestamp(0), vec![10])]);
        assert!(recall(&mut r, 2, &[11]).is_empty(), "waits for batch 2");
        let out = r.on_control(CoordinatorToNode::Batch(batch(2, 11))).unwrap();
        assert_eq!(recalled(out), vec![(7, 2, Timestamp(0), vec![11])]);
        for seq in 3..=RECENT_BATCHES_KEPT as u64 + 1 {
            r.on_batch(batch(seq, 10 * seq)).unwrap();
        }
        // Batch 1 (timestamp 10) aged out; batch 2's (20... here 11) is the oldest kept.
        let through = RECENT_BATCHES_KEPT as u64 + 1;
        assert_eq!(recall(&mut r, through, &[10, 11]), vec![(7, through, Timestamp(10), vec![11])]);
    }

    /// A backup remembers the outcomes its primary shipped, and once promoted answers for
    /// them; a replica restored from a copy remembers nothing before what it runs itself.
    #[test]
    fn a_backup_remembers_what_its_primary_shipped() {
        let mut primary = Replica::with_role(1, 1, ReplicaRole::Primary, Store::Lean(LeanDb::new()), 4);
        let mut backup = Replica::with_role(2, 1, ReplicaRole::Backup, Store::Lean(LeanDb::new()), 4);
        for seq in 1..=2 {
            let out = primary.on_control(CoordinatorToNode::Batch(batch(seq, 10 * seq))).unwrap();
            let ship = out.into_iter().find_map(|e| match e {
                Emit::Ship(s) => Some(s),
                Emit::ToCoordinator(_) => None,
            });
            let ship = ship.expect("a primary ships every batch");
            assert_eq!(ship.answers.iter().map(|a| a.id.seq).collect::<Vec<_>>(), vec![10 * seq]);
            backup.on_shipment(ship).unwrap();
        }
        assert_eq!(recall(&mut backup, 2, &[10, 20, 30]), vec![(7, 2, Timestamp(0), vec![10, 20])]);
        let msg = CoordinatorToNode::Promote { partition: 1, first_unanswered: 3 };
        backup.on_control(msg).unwrap();
        backup.on_batch(batch(3, 30)).unwrap();
        assert_eq!(recall(&mut backup, 3, &[10, 20, 30]), vec![(7, 3, Timestamp(0), vec![10, 20, 30])]);

        let mut restored = Replica::restored(3, 1, LeanDb::new(), 2, 4);
        assert_eq!(recall(&mut restored, 2, &[10]), vec![(7, 2, Timestamp(u64::MAX), vec![])]);
        restored.on_batch(batch(3, 30)).unwrap();
        assert_eq!(recall(&mut restored, 3, &[10, 30]), vec![(7, 3, Timestamp(29), vec![30])]);
    }
}
