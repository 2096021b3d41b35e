//! A new coordinator leader's take-over, at the replica (docs/design.md §11): where it stands
//! (executed, held, kept, the last timestamp it saw, the piece outcomes it holds), and the
//! batches it executed recently or holds, for the leader to adopt.
//!
//! Guarantees: batches held past a gap are dropped at a take-over (the new leader numbers
//! its own from after the furthest replica's); the last [`RECENT_BATCHES_KEPT`] executed
//! batches are kept with their results, answered again once if the new leader sends one
//! again; the batches returned follow each other without gaps.
//!
//! The take-over is answered ahead of the batches queued before it: a carrier that knows a
//! `TakeOver` (or the leader's `SendBatches`) waits in the replica's inbox sets
//! [`Replica::set_holding`], and the batches taken meanwhile are held, unexecuted, among the
//! waiting ones — which the standing counts, so the new leader adopts them and this replica
//! executes each once. Once nothing urgent waits, the carrier runs the held batches one at a
//! time ([`Replica::run_held`]), in order, before anything that came after them. (A
//! full-stack primary's queue held ~90 ms of batches when its leader died, and the new
//! leader's take-over waited for all of them: docs/design.md §11, "A leader's death".)

use wire::messages::{Batch, Part, PieceReads, ReplicaStanding, Seq};

use super::{Emit, Replica, ReplicaRole, RoleState};
use crate::error::ReplicaError;

/// Executed batches a replica keeps for a new leader ([`Replica::held_batches`]); a replica
/// further behind than that copies the partition instead.
pub const RECENT_BATCHES_KEPT: usize = 256;

/// Whether batches run as they come ([`Replica::set_holding`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hold {
    /// Batches run as they come (and each runs the ones waiting behind it).
    Off,
    /// Something urgent waits behind the batches: each is held among the waiting ones.
    Holding,
    /// Held batches remain: the carrier runs them one at a time ([`Replica::run_held`]), and
    /// no batch runs the ones waiting behind it.
    Stepping,
}

impl Replica {
    /// Holds batches (`true`) rather than executing them, while a new leader's take-over or
    /// fetch waits behind them in the carrier's inbox; `false` lets the held ones run, one at
    /// a time through [`Replica::run_held`]. Only a replica that executes holds.
    pub fn set_holding(&mut self, on: bool) {
        self.hold = match (on, self.hold) {
            (true, _) if self.role() != ReplicaRole::Backup && self.stopped.is_none() => Hold::Holding,
            (true, h) => h,
            (false, Hold::Holding) => Hold::Stepping,
            (false, h) => h,
        };
    }

    /// Whether a held batch can run now ([`Replica::run_held`]).
    pub fn has_held_to_run(&self) -> bool {
        self.hold == Hold::Stepping
            && self.stopped.is_none()
            && self.parked.is_none()
            && self.waiting.contains_key(&self.next_seq)
    }

    /// Runs the next held batch (until it ends or parks at a home piece), appending what it
    /// emits to `out`; once none is left to run, batches run as they come again.
    pub fn run_held(&mut self, out: &mut Vec<Emit>) -> Result<(), ReplicaError> {
        if self.has_held_to_run() {
            let next = self.waiting.remove(&self.next_seq).expect("checked: held");
            self.start(next)?;
            self.advance(out)?;
        }
        if self.hold == Hold::Stepping && self.parked.is_none() && !self.waiting.contains_key(&self.next_seq) {
            self.hold = Hold::Off;
        }
        Ok(())
    }

    /// Whether a batch that could run now is held instead (`in_order`).
    pub(super) fn holding(&self) -> bool {
        self.hold == Hold::Holding
    }

    /// How many executed batches are kept: [`RECENT_BATCHES_KEPT`], and while a new leader
    /// takes over, those executed since too (at most the batches that may wait), so that the
    /// window its standing announced is still kept when the leader fetches it.
    pub(super) fn recent_kept_max(&self) -> usize {
        match self.window_held {
            true => RECENT_BATCHES_KEPT + self.pending_batches_max,
            false => RECENT_BATCHES_KEPT,
        }
    }

    /// Whether a batch that ends runs the ones waiting behind it (not while held ones are
    /// stepped through).
    pub(super) fn chains_waiting(&self) -> bool {
        self.hold == Hold::Off
    }

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
        self.window_held = true;
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
