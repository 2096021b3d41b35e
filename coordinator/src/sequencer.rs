//! One partition's batching: transactions enter in timestamp order and leave as numbered
//! [`Batch`]es, closed when they hold `batch_txns_max` transactions or have waited
//! `batch_wait_us` since their first one — or at once when a state digest is asked for.
//!
//! Guarantees:
//! - batches are numbered 1, 2, 3, … without gaps, and their timestamps strictly increase
//!   within and across batches (asserted);
//! - in-flight work is bounded: at most `inflight_txns_max` transactions are admitted and not
//!   yet completed; past it [`Sequencer::admit`] answers [`Busy`] and keeps nothing;
//! - no batch is ever larger than `batch_txns_max`;
//! - time is an input (`now_us`); [`Sequencer::deadline_us`] tells when [`Sequencer::tick`]
//!   must next be called.

use engine::procedures::TxnInput;
use wire::messages::{Batch, BatchTxn, Part, PartitionId, RequestId, Seq, Timestamp};

/// The partition is at its in-flight limit: answer the client "busy".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

/// The batching limits of one partition (from `cluster.toml`'s `[limits]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequencerLimits {
    pub batch_txns_max: usize,
    pub batch_wait_us: u64,
    pub inflight_txns_max: usize,
}

impl SequencerLimits {
    /// The limits of `cluster.toml`.
    pub fn from_config(limits: &wire::config::Limits) -> SequencerLimits {
        SequencerLimits {
            batch_txns_max: limits.batch_txns_max as usize,
            batch_wait_us: limits.batch_wait_us,
            inflight_txns_max: limits.inflight_txns_max as usize,
        }
    }
}

/// One partition's batcher.
#[derive(Debug)]
pub struct Sequencer {
    partition: PartitionId,
    limits: SequencerLimits,
    /// Number of the next batch to close.
    next_seq: Seq,
    /// The open batch's transactions.
    open: Vec<BatchTxn>,
    /// When the open batch received its first transaction.
    opened_at_us: Option<u64>,
    /// Admitted and not yet completed (open batch included).
    inflight_txns: usize,
    /// The last timestamp admitted.
    last_ts: Option<Timestamp>,
}

impl Sequencer {
    /// A sequencer for `partition`; its first batch is number 1.
    ///
    /// Panics if a limit is zero or `batch_txns_max` exceeds `inflight_txns_max` (validation
    /// of `cluster.toml` refuses both).
    pub fn new(partition: PartitionId, limits: SequencerLimits) -> Sequencer {
        assert!(limits.batch_txns_max >= 1 && limits.inflight_txns_max >= limits.batch_txns_max, "{limits:?}");
        Sequencer {
            partition,
            limits,
            next_seq: 1,
            open: Vec::with_capacity(limits.batch_txns_max),
            opened_at_us: None,
            inflight_txns: 0,
            last_ts: None,
        }
    }

    /// Admits transaction `ts` (timestamps must increase across calls). Returns the batch
    /// this closed, if it filled it; [`Busy`] when the partition is at its in-flight limit.
    pub fn admit(&mut self, ts: Timestamp, input: TxnInput, id: RequestId, now_us: u64) -> Result<Option<Batch>, Busy> {
        self.admit_part(ts, input, Part::Whole, id, now_us)
    }

    /// Whether [`Sequencer::admit`] would admit a transaction now (a multi-partition
    /// transaction is admitted on every partition it touches, or on none).
    pub fn has_room(&self) -> bool {
        self.inflight_txns < self.limits.inflight_txns_max
    }

    /// [`Sequencer::admit`] of `part` of transaction `ts` (a multi-partition transaction's
    /// piece).
    pub fn admit_part(
        &mut self,
        ts: Timestamp,
        input: TxnInput,
        part: Part,
        id: RequestId,
        now_us: u64,
    ) -> Result<Option<Batch>, Busy> {
        if !self.has_room() {
            return Err(Busy);
        }
        assert!(self.last_ts.is_none_or(|l| ts > l), "timestamp {ts} admitted after {:?}", self.last_ts);
        self.last_ts = Some(ts);
        self.inflight_txns += 1;
        self.open.push(BatchTxn { ts, input, part, id });
        self.opened_at_us.get_or_insert(now_us);
        if self.open.len() >= self.limits.batch_txns_max {
            Ok(Some(self.close(false)))
        } else {
            Ok(None)
        }
    }

    /// Closes the open batch (possibly empty) asking replicas for their state digest after it.
    pub fn close_with_digest(&mut self) -> Batch {
        self.close(true)
    }

    /// Closes the open batch if it has waited `batch_wait_us`.
    pub fn tick(&mut self, now_us: u64) -> Option<Batch> {
        match self.deadline_us() {
            Some(deadline) if now_us >= deadline => Some(self.close(false)),
            _ => None,
        }
    }

    /// Closes the open batch now, if it holds anything.
    pub fn flush(&mut self) -> Option<Batch> {
        (!self.open.is_empty()).then(|| self.close(false))
    }

    /// When the open batch must be sent, if one is open.
    pub fn deadline_us(&self) -> Option<u64> {
        self.opened_at_us.map(|t| t.saturating_add(self.limits.batch_wait_us))
    }

    /// A new leader took over (docs/design.md §11): the batches through `next_seq - 1` were
    /// sequenced before it, and `txns` of their transactions are not yet answered — they
    /// count as in flight until they are.
    ///
    /// Panics if anything was admitted here already.
    pub fn adopt(&mut self, next_seq: Seq, txns: usize) {
        assert!(self.inflight_txns == 0 && self.open.is_empty(), "adopting batches into a sequencer in use");
        self.next_seq = next_seq;
        self.inflight_txns = txns;
    }

    /// Batches through `next_seq - 1` exist that this sequencer did not close (a promoted
    /// backup applied them from a primary that outlived its coordinator: docs/design.md
    /// §11): numbering continues after them. The open batch, if any, is renumbered.
    pub fn skip_to(&mut self, next_seq: Seq) {
        self.next_seq = self.next_seq.max(next_seq);
    }

    /// `txns` admitted transactions were answered: they no longer count as in flight.
    pub fn complete(&mut self, txns: usize) {
        assert!(txns <= self.inflight_txns - self.open.len(), "completing {txns} of {} sent", self.inflight_txns);
        self.inflight_txns -= txns;
    }

    /// The partition stopped and every admitted transaction was answered otherwise: forget
    /// them all (the open batch included). Sequence numbers continue.
    pub fn abandon_all(&mut self) {
        self.open.clear();
        self.opened_at_us = None;
        self.inflight_txns = 0;
    }

    /// Transactions admitted and not yet completed.
    pub fn inflight_txns(&self) -> usize {
        self.inflight_txns
    }

    /// Transactions in the open batch.
    pub fn open_txns(&self) -> usize {
        self.open.len()
    }

    /// The number the next batch will carry.
    pub fn next_seq(&self) -> Seq {
        self.next_seq
    }

    fn close(&mut self, digest_after: bool) -> Batch {
        let txns = std::mem::replace(&mut self.open, Vec::with_capacity(self.limits.batch_txns_max));
        self.opened_at_us = None;
        let batch = Batch { partition: self.partition, seq: self.next_seq, txns, digest_after, answerer: None };
        self.next_seq += 1;
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::procedures::{DeliveryInput, TxnInput};

    fn input() -> TxnInput {
        TxnInput::Delivery(DeliveryInput { w_id: 1, o_carrier_id: 1, date: 0 })
    }

    fn limits(batch: usize, wait: u64, inflight: usize) -> SequencerLimits {
        SequencerLimits { batch_txns_max: batch, batch_wait_us: wait, inflight_txns_max: inflight }
    }

    #[test]
    fn a_batch_closes_when_full() {
        let mut s = Sequencer::new(1, limits(3, 1_000, 100));
        assert_eq!(s.admit(Timestamp(1), input(), RequestId::NONE, 0), Ok(None));
        assert_eq!(s.admit(Timestamp(2), input(), RequestId::NONE, 0), Ok(None));
        let b = s.admit(Timestamp(3), input(), RequestId::NONE, 0).unwrap().unwrap();
        assert_eq!((b.partition, b.seq, b.txns.len(), b.digest_after), (1, 1, 3, false));
        assert_eq!(b.txns.iter().map(|t| t.ts.0).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(s.deadline_us(), None);
        assert_eq!(s.next_seq(), 2);
    }

    #[test]
    fn a_batch_closes_when_its_wait_is_over() {
        let mut s = Sequencer::new(1, limits(100, 500, 1_000));
        assert_eq!(s.tick(10_000), None, "nothing open, nothing sent");
        s.admit(Timestamp(1), input(), RequestId::NONE, 1_000).unwrap();
        s.admit(Timestamp(2), input(), RequestId::NONE, 1_400).unwrap();
        assert_eq!(s.deadline_us(), Some(1_500), "the wait counts from the first transaction");
        assert_eq!(s.tick(1_499), None);
        let b = s.tick(1_500).unwrap();
        assert_eq!((b.seq, b.txns.len()), (1, 2));
        s.admit(Timestamp(3), input(), RequestId::NONE, 2_000).unwrap();
        assert_eq!(s.tick(2_600).unwrap().seq, 2);
    }

    #[test]
    fn in_flight_work_is_bounded_and_busy_keeps_nothing() {
        let mut s = Sequencer::new(1, limits(2, 500, 4));
        for ts in 1..=4 {
            s.admit(Timestamp(ts), input(), RequestId::NONE, 0).unwrap();
        }
        assert_eq!(s.admit(Timestamp(5), input(), RequestId::NONE, 0), Err(Busy));
        assert_eq!(s.inflight_txns(), 4);
        assert_eq!(s.open_txns(), 0);
        s.complete(2);
        assert_eq!(s.admit(Timestamp(6), input(), RequestId::NONE, 0), Ok(None));
        assert_eq!(s.inflight_txns(), 3);
    }

    #[test]
    fn a_digest_request_closes_even_an_empty_batch() {
        let mut s = Sequencer::new(7, limits(10, 500, 100));
        let b = s.close_with_digest();
        assert_eq!((b.seq, b.txns.len(), b.digest_after), (1, 0, true));
        s.admit(Timestamp(1), input(), RequestId::NONE, 0).unwrap();
        let b = s.close_with_digest();
        assert_eq!((b.seq, b.txns.len(), b.digest_after), (2, 1, true));
        assert_eq!(s.flush(), None);
    }

    #[test]
    #[should_panic(expected = "admitted after")]
    fn timestamps_must_increase() {
        let mut s = Sequencer::new(1, limits(10, 500, 100));
        s.admit(Timestamp(5), input(), RequestId::NONE, 0).unwrap();
        let _ = s.admit(Timestamp(5), input(), RequestId::NONE, 0);
    }
}
