//! A rejoining partition's fetch of its starting state, as its [`PartitionMachine`] decides
//! it (docs/design.md §10, §14): the order (`FetchOrder`, under an id of the machine's), what
//! an outcome does (install, recover, retry, give up), and the fetch's patience — a fetch that
//! brings nothing for `timeouts.transfer_patience_ms` is abandoned and ordered again
//! ([`PartitionMachine::tick`]).
//!
//! Guarantees: at most one fetch is under way per machine, and only its outcome and progress
//! count (those of a fetch abandoned, replaced, or of a machine this one replaced, are
//! ignored); every fetch ordered is either answered, abandoned with `Effect::AbandonFetch`,
//! or dropped with the rejoin that gave up.

use engine::conventional::{generation_start, image_lsn, CutAt};
use engine::LeanDb;
use wire::messages::{NodeId, Seq};

use super::{Began, Effect, PartitionMachine, Recovering, Rejoin, State, CONNECT_RETRY_MS, REJOIN_FETCH_ATTEMPTS};
use crate::error::RejoinError;
use crate::fullstack::Restart;
use crate::replica::Replica;
use crate::snapshot::{LogBaseReceived, SnapshotInfo};

/// How long a fetch may bring nothing — no chunk of a copy, no piece of a log base — before
/// the machine abandons it and fetches again, by default (`timeouts.transfer_patience_ms`).
pub const TRANSFER_PATIENCE_MS: u64 = 30_000;

/// A fetch of a rejoin's starting state, as the machine orders it ([`Effect::Fetch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOrder {
    /// The machine's name for this fetch: its outcome and progress are reported under it,
    /// and those of a fetch the machine abandoned or replaced are ignored.
    pub id: u64,
    /// The node whose live replica is fetched from.
    pub source: NodeId,
    /// As of this batch or later.
    pub after_seq: Seq,
    pub kind: FetchKind,
    /// Wait this long first (0 on the first attempt).
    pub delay_ms: u64,
    /// Why the last attempt failed, on a retry.
    pub retrying: Option<String>,
}

/// What a rejoining replica fetches from the live replica its plan names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchKind {
    /// A copy of the live replica's partition (the lean kernel).
    Copy,
    /// A full-stack primary's log base (its log since its last checkpoint).
    LogBase,
    /// A full-stack primary's log base headed by its checkpoint image (a base backup), for a
    /// node whose own log cannot reach the point the log base starts from.
    BaseBackup,
}

/// A fetched starting state.
#[derive(Debug)]
pub enum Fetched {
    Copy { db: Box<LeanDb>, info: SnapshotInfo },
    LogBase(LogBaseReceived),
}

/// A fetch under way, watched for progress ([`PartitionMachine::tick`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct FetchWatch {
    pub(super) id: u64,
    /// The fetch starts after this long (a retry's delay).
    delay_us: u64,
    /// What arrived so far, as the carrier last reported it (bytes, or any measure that grows
    /// with each piece).
    received: u64,
    /// Abandoned if nothing more arrives by then; set at the first tick after the order.
    patience_until_us: Option<u64>,
}

impl<R> PartitionMachine<R> {
    /// This machine, abandoning a fetch that brings nothing for `patience_ms` (the
    /// configuration's `timeouts.transfer_patience_ms`; [`TRANSFER_PATIENCE_MS`] otherwise).
    pub fn with_transfer_patience(mut self, patience_ms: u64) -> PartitionMachine<R> {
        self.transfer_patience_us = patience_ms.saturating_mul(1_000);
        self
    }

    /// This machine, replacing `previous` (its node drops the partition's state and rejoins):
    /// it numbers its fetches after `previous`'s, so that a fetch of the replaced machine
    /// that still answers cannot pass for one of this machine's.
    pub fn numbering_fetches_after(mut self, previous: &PartitionMachine<R>) -> PartitionMachine<R> {
        self.next_fetch_id = self.next_fetch_id.max(previous.next_fetch_id);
        self
    }

    /// The outcome of fetch `id` ([`Effect::Fetch`]): a verified starting state is installed
    /// (lean) or recovery is asked for (full stack); a failure is retried, or ends the rejoin
    /// after [`REJOIN_FETCH_ATTEMPTS`] attempts. The outcome of any fetch but the one under
    /// way is dropped: a late duplicate, one abandoned for its silence, or one of a replaced
    /// plan (the coordinator planned again from a new primary: the old one's state may hold
    /// batches the new one never executed).
    pub fn on_fetched(&mut self, id: u64, fetched: Result<Fetched, RejoinError>) -> Vec<Effect<R>>
    where
        R: Clone,
    {
        let mode = self.mode;
        let (node, partition, pending) = (self.node, self.partition, self.pending_batches_max);
        let State::Rejoining(j) = &mut self.state else { return Vec::new() };
        if j.recovering.is_some() || j.fetch.is_none_or(|w| w.id != id) {
            return Vec::new();
        }
        j.fetch = None;
        let Some((_, from_seq)) = j.plan else { return Vec::new() };
        let wanted = from_seq.saturating_sub(1);
        let failure = match fetched {
            Ok(Fetched::Copy { info, .. }) if info.seq < wanted => RejoinError::Stale { got: info.seq, wanted },
            Ok(Fetched::LogBase(base)) if base.seq < wanted => RejoinError::Stale { got: base.seq, wanted },
            Ok(Fetched::Copy { db, info }) => {
                let replica = match mode.every_replica_executes() {
                    true => Replica::restored(node, partition, *db, info.seq, pending),
                    false => Replica::restored_backup(node, partition, *db, info.seq, pending),
                };
                let held = std::mem::take(&mut j.held);
                let start = Began::Copy { seq: info.seq, held: 0 };
                return self.finish(replica, held, info.seq, start, Some(info.digest));
            }
            Ok(Fetched::LogBase(base)) => match base_restart(&base) {
                Ok(restart) => {
                    j.recovering = Some(Recovering::Backup(base));
                    return vec![Effect::Recover { restart }];
                }
                Err(e) => e,
            },
            Err(e) => e,
        };
        self.fetch_again(failure.to_string(), CONNECT_RETRY_MS)
    }

    /// Fetches the current plan's starting state once more (the last attempt failed:
    /// `why`), after `delay_ms`, or gives up after [`REJOIN_FETCH_ATTEMPTS`] attempts.
    pub(super) fn fetch_again(&mut self, why: String, delay_ms: u64) -> Vec<Effect<R>> {
        let State::Rejoining(j) = &mut self.state else { return Vec::new() };
        if j.plan.is_none() {
            return Vec::new();
        }
        if j.attempts >= REJOIN_FETCH_ATTEMPTS {
            let attempts = j.attempts;
            return self.give_up(format!("no usable starting state after {attempts} attempts: {why}"));
        }
        j.attempts += 1;
        self.order_fetch(delay_ms, Some(why)).into_iter().collect()
    }

    /// Orders a fetch of the current plan's starting state, of the kind the plan asks for,
    /// and watches it from now on; `None` without a plan.
    pub(super) fn order_fetch(&mut self, delay_ms: u64, retrying: Option<String>) -> Option<Effect<R>> {
        let State::Rejoining(j) = &mut self.state else { return None };
        let (source, from_seq) = j.plan?;
        let id = self.next_fetch_id;
        self.next_fetch_id += 1;
        let delay_us = delay_ms.saturating_mul(1_000);
        j.fetch = Some(FetchWatch { id, delay_us, received: 0, patience_until_us: None });
        let after_seq = from_seq.saturating_sub(1);
        Some(Effect::Fetch(FetchOrder { id, source, after_seq, kind: j.kind, delay_ms, retrying }))
    }

    /// The id of the fetch under way, if any.
    pub fn fetch_under_way(&self) -> Option<u64> {
        match &self.state {
            State::Rejoining(Rejoin { fetch: Some(w), .. }) => Some(w.id),
            State::Rejoining(_) | State::Serving(_) | State::CatchingUp(_) | State::Failed(_) => None,
        }
    }

    /// What fetch `id` brought so far, at `now_us` (`received` grows with every piece that
    /// arrives: bytes, or pieces): progress restarts its patience. Reports of any other fetch,
    /// or that do not grow, change nothing.
    pub fn on_fetch_progress(&mut self, id: u64, received: u64, now_us: u64) {
        let patience = self.transfer_patience_us;
        if let State::Rejoining(Rejoin { fetch: Some(w), .. }) = &mut self.state {
            if w.id == id && received > w.received {
                w.received = received;
                w.patience_until_us = Some(now_us.saturating_add(patience));
            }
        }
    }

    /// When [`PartitionMachine::tick`] must next run: a fetch's patience runs out then (`0`:
    /// a fetch just ordered, whose patience starts at the next tick). `None`: nothing is timed.
    pub fn next_deadline_us(&self) -> Option<u64> {
        match &self.state {
            State::Rejoining(Rejoin { fetch: Some(w), .. }) => Some(w.patience_until_us.unwrap_or(0)),
            State::Rejoining(_) | State::Serving(_) | State::CatchingUp(_) | State::Failed(_) => None,
        }
    }

    /// The machine's clock at `now_us`: a fetch that brought nothing for the transfer's
    /// patience ([`TRANSFER_PATIENCE_MS`], counted from its order's delay, or its last
    /// progress) is abandoned and the starting state fetched again, [`CONNECT_RETRY_MS`]
    /// later — within the plan's [`REJOIN_FETCH_ATTEMPTS`]. A source that stalls mid-copy
    /// (a hung process, a link that carries nothing) thus costs a rejoin one patience, not
    /// the rejoin.
    pub fn tick(&mut self, now_us: u64) -> Vec<Effect<R>> {
        let patience = self.transfer_patience_us;
        let State::Rejoining(Rejoin { fetch: Some(w), .. }) = &mut self.state else { return Vec::new() };
        let Some(until) = w.patience_until_us else {
            w.patience_until_us = Some(now_us.saturating_add(w.delay_us).saturating_add(patience));
            return Vec::new();
        };
        if now_us < until {
            return Vec::new();
        }
        let id = w.id;
        if let State::Rejoining(j) = &mut self.state {
            j.fetch = None;
        }
        let mut out = vec![Effect::AbandonFetch { id }];
        let why = format!("nothing of the transfer arrived for {} ms", patience / 1_000);
        out.extend(self.fetch_again(why, CONNECT_RETRY_MS));
        out
    }
}

/// How a fetched log base is started from: the primary's checkpoint image when it came
/// with one (checked to start where the log generation does), else this node's own log cut
/// at the fork point (or after its checkpoint) to reach the generation's start.
pub fn base_restart(base: &LogBaseReceived) -> Result<Restart, RejoinError> {
    let bad = |problem: String| RejoinError::BadBase { problem };
    let start = generation_start(&base.records).map_err(|e| bad(e.to_string()))?;
    match &base.checkpoint {
        Some(image) => {
            let at = image_lsn(image).map_err(|e| bad(e.to_string()))?;
            if at != start {
                return Err(bad(format!("the checkpoint image is at LSN {at}, the log generation starts at {start}")));
            }
            Ok(Restart::Image(std::sync::Arc::new(image.clone())))
        }
        None => Ok(Restart::FollowBase { cut: base.fork_lsn.map_or(CutAt::Checkpoint, CutAt::Lsn), start }),
    }
}
