//! A new coordinator leader's take-over, at the replica (docs/design.md §11): where it stands
//! (executed, held, kept, the last timestamp it saw, the piece outcomes it holds), and the
//! batches it executed recently or holds, for the leader to adopt.
//!
//! Guarantees: batches held past a gap are dropped at a take-over (the new leader numbers
//! its own from after the furthest replica's); the last [`RECENT_BATCHES_KEPT`] executed
//! batches are kept with their results, answered again once if the new leader sends one
//! again; the batches returned follow each other without gaps.

use wire::messages::{Batch, Part, PieceReads, ReplicaStanding, Seq};

use super::{Replica, ReplicaRole, RoleState};

/// Executed batches a replica keeps for a new leader ([`Replica::held_batches`]); a replica
/// further behind than that copies the partition instead.
pub const RECENT_BATCHES_KEPT: usize = 256;

impl Replica {
    /// A new leader took over (docs/design.md §11): batches held past a gap are dropped —
    /// the old leader's batch of that number may never reach anyone, and the new leader
    /// numbers its own from after the furthest replica's — and where the replica now stands
    /// is returned for the leader.
    pub fn take_over(&mut self) -> ReplicaStanding {
        let role = self.role();
        let executed_seq = self.applied_seq();
        // The old leader's recalls: nobody waits for their answers any more.
        self.pending_recalls.clear();
        if role == ReplicaRole::Backup {
            // Shipments come from the primary, whose numbering the take-over does not change.
            return ReplicaStanding {
                role: role.reported(),
                executed_seq,
                held_seq: executed_seq,
                kept_from: executed_seq + 1,
                last_ts: self.last_ts,
                stopped: self.stopped.is_some(),
                held_reads: Vec::new(),
                pieces: match &self.role {
                    RoleState::Backup { applied_pieces, .. } => applied_pieces.iter().cloned().collect(),
                    RoleState::Replica(_) | RoleState::Primary { .. } => Vec::new(),
                },
            };
        }
        // With a batch under way, `next_seq` is that batch's number.
        let mut held_seq = if self.parked.is_some() { self.next_seq } else { executed_seq };
        while self.waiting.contains_key(&(held_seq + 1)) {
            held_seq += 1;
        }
        let dropped = self.waiting.split_off(&(held_seq + 1));
        self.stats.batches_dropped_at_take_over += dropped.len() as u64;
        let last_ts = self
            .waiting
            .values()
            .chain(self.parked.as_ref().map(|p| &p.batch))
            .filter_map(|b| b.txns.last().map(|t| t.ts))
            .chain(self.last_ts)
            .max();
        let kept_from = self.recent.front().map_or(executed_seq + 1, |r| r.batch.seq);
        // The new leader has seen none of their results.
        self.answer_again = self.recent.iter().map(|r| r.batch.seq).collect();
        let home = self.partition;
        let held_reads = self
            .piece_reads
            .iter()
            .flat_map(|(&ts, held)| {
                held.iter().map(move |(from, outcome)| PieceReads { home, from: *from, ts, outcome: outcome.clone() })
            })
            .collect();
        ReplicaStanding {
            role: role.reported(),
            executed_seq,
            held_seq,
            kept_from,
            last_ts,
            stopped: self.stopped.is_some(),
            held_reads,
            pieces: Vec::new(),
        }
    }

    /// The batches after `after` this replica executed recently or holds, in order and
    /// without gaps, at most [`wire::channel::control::HELD_BATCHES_PER_REPLY_MAX`] of them
    /// with transactions (none if it no longer keeps batch `after + 1`), with the remote
    /// pieces' outcomes their home pieces ran with or will run with, as far as this replica
    /// has them. Batches through `whole_after` carry only their multi-partition pieces.
    pub fn held_batches(&self, after: Seq, whole_after: Seq) -> (Vec<Batch>, Vec<PieceReads>) {
        let executed = self.recent.iter().map(|r| (&r.batch, Some(&r.used_reads)));
        let under_way = self.parked.iter().map(|p| (&p.batch, Some(&p.used_reads)));
        let held = under_way.chain(self.waiting.values().map(|b| (b, None)));
        let (mut batches, mut reads): (Vec<Batch>, Vec<PieceReads>) = (Vec::new(), Vec::new());
        let mut whole = 0;
        for (b, used) in executed.chain(held).skip_while(|(b, _)| b.seq <= after) {
            let next = after + 1 + batches.len() as u64;
            if b.seq != next || whole == wire::channel::control::HELD_BATCHES_PER_REPLY_MAX {
                break;
            }
            reads.extend(used.into_iter().flatten().cloned());
            let b = match b.seq <= whole_after {
                true => Batch { txns: b.txns.iter().filter(|t| t.part != Part::Whole).cloned().collect(), ..b.clone() },
                false => b.clone(),
            };
            whole += usize::from(!b.txns.is_empty());
            batches.push(b);
        }
        // Outcomes held for home pieces not yet run.
        let first = batches.first().and_then(|b| b.txns.first()).map(|t| t.ts);
        let last = batches.last().and_then(|b| b.txns.last()).map(|t| t.ts);
        if let (Some(first), Some(last)) = (first, last) {
            let home = self.partition;
            for (&ts, held) in self.piece_reads.range(first..=last) {
                reads.extend(held.iter().map(|(from, outcome)| PieceReads {
                    home,
                    from: *from,
                    ts,
                    outcome: outcome.clone(),
                }));
            }
        }
        (batches, reads)
    }
}
