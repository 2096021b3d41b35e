//! Result agreement for one partition: every live replica executes every batch, and a
//! transaction is answered only when enough live replicas have reported its result and the
//! results agree — VoltDB's check, a 64-bit result digest per transaction and the full outcome
//! among the outputs sent, and a 64-bit digest of the batch's outputs from every replica that
//! sends only that (below). Section 5.3 of the paper makes this the safety net of
//! log-free replication: a replica that diverged must not serve.
//!
//! How many is enough is the [`Quorum`] (docs/cluster.md, "Agreement"): every live replica
//! the batch was sent to (`all`), or a majority of the partition's configured replicas, or
//! every live one if fewer are left (`majority`). Under `majority` a batch answered is kept
//! until the remaining replicas report it, and their results are still compared: a
//! disagreement after the answer stops the partition as one before it does. While a replica
//! is more than the lag limit of answered batches behind ([`Agreement::laggards`]), every
//! batch sent waits for all live replicas again — backpressure, so a slow replica cannot make
//! the kept batches grow without bound — and the caller decides whether to fail it (the
//! coordinator does once the lag has lasted a failure timeout while the others are heard
//! from: a laggard may be the only replica left alive, and failing it then would lose the
//! partition).
//!
//! Guarantees:
//! - a batch is answered only when its quorum has reported it and every report so far agrees,
//!   and batches are answered in sequence order (a [`Verdict::Unknown`], for a batch no one is
//!   left to answer, may come before an earlier batch's decision); a batch asking for state
//!   digests waits for every live replica, whatever the quorum;
//! - the state digests come apart from the results (each replica takes its own from a copy of
//!   the state after the batch, while it executes on: docs/design.md §10, "Checks during
//!   traffic"); once every replica that executed the batch reported one
//!   ([`Agreement::on_state_digest`]), equal digests yield [`Verdict::StateDigests`] and
//!   different ones [`Verdict::Diverged`] — after the batch was answered, as a late
//!   disagreement under `majority` is;
//! - a disagreement — different result digests or outcomes for a transaction, different state
//!   digests after a batch, results that do not match the batch (count, timestamps), or (under
//!   `debug_assertions`) a digest that does not match its outcome — yields
//!   [`Verdict::Diverged`] and stops the partition for good: every unanswered transaction is
//!   handed back, and nothing more is decided;
//! - results may arrive in any order, duplicated, late, from failed replicas or for batches
//!   never sent: none of these changes a decision (they are [`Ignored`]);
//! - a replica declared failed no longer counts; if none remains, [`Verdict::NoLiveReplica`];
//! - a rejoining replica's results for the batches it held while copying are kept aside
//!   ([`Agreement::on_joiner_results`]): they decide nothing while the replicas the batch was
//!   sent to live, but if those all fail, the rejoined replica's results decide the batch; a
//!   batch sent before the joiner's copy was taken that no one is left to answer took effect
//!   in every live replica (they copied it) and is [`Verdict::Unknown`], not a lost partition;
//! - one replica answers (docs/design.md §10, "One replica answers"): a batch may name the
//!   replica that sends its outputs ([`Agreement::sent_answered_by`]); the others report the
//!   digest of theirs ([`Agreement::on_results_digest`]), and every report's digest must equal
//!   that of the outputs answered. A batch is answered only with outputs in hand: when the
//!   named replica fails first, [`Verdict::SendResults`] asks one that sent a digest for its
//!   outputs, which must match the digest it sent; if it no longer keeps them
//!   ([`Agreement::on_results_forgotten`]), the batch's outcome is [`Verdict::Unknown`].

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use wire::messages::{
    outputs_digest, NodeId, PartitionId, Results, ResultsDigest, Seq, StateDigest, Timestamp, TxnOutcome,
};

/// How many replicas' agreeing results answer a batch (docs/cluster.md, "Agreement").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quorum {
    /// Every live replica the batch was sent to.
    All,
    /// A majority of the partition's `replicas` configured replicas, or every live one the
    /// batch was sent to if fewer are left. With two replicas this is `All`.
    Majority { replicas: usize },
}

impl Quorum {
    /// Reports that answer a batch sent to `expected` live replicas.
    pub fn needed(self, expected: usize) -> usize {
        match self {
            Quorum::All => expected,
            Quorum::Majority { replicas } => expected.min(replicas / 2 + 1),
        }
    }
}

/// What a batch's results showed, once decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<T> {
    /// Batch `seq`'s quorum reported it and agreed: answer each transaction.
    Agreed(AgreedBatch<T>),
    /// The replicas disagreed: stop the partition; `unanswered` holds the tags of every
    /// transaction sent and not answered (this batch's, unless a majority answered it already,
    /// and all later unanswered ones').
    Diverged { divergence: Divergence, unanswered: Vec<T> },
    /// No live replica remains; `unanswered` as above.
    NoLiveReplica { unanswered: Vec<T> },
    /// Every replica that executed batch `seq`, which asked for the state digest, reported
    /// it, and all are equal (sorted by node); or why there are none to compare (a replica
    /// could not take its digest, or every replica that executed the batch failed).
    StateDigests { seq: Seq, digests: Result<Vec<(NodeId, StateDigest)>, String> },
    /// Every replica batch `seq` was sent to failed before answering, but live replicas remain
    /// whose state includes it (they copied a state after it): its transactions took effect
    /// and their results are lost — "outcome unknown".
    Unknown { seq: Seq, unanswered: Vec<(Timestamp, T)> },
    /// Ask replica `from` for its outputs of batches `seqs` in full: it reported their digest
    /// alone, and the replica named to send them failed first.
    SendResults { from: NodeId, seqs: Vec<Seq> },
}

/// An agreed batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgreedBatch<T> {
    pub seq: Seq,
    /// Each transaction's tag, timestamp and agreed outcome, in timestamp order.
    pub answers: Vec<(T, Timestamp, TxnOutcome)>,
    /// When the batch asked for the state digest, the replicas that executed it, whose
    /// digests come apart ([`Agreement::on_state_digest`], then [`Verdict::StateDigests`]).
    /// (Such a batch waits for every live replica, whatever the quorum.)
    pub digest_from: Option<Vec<NodeId>>,
}

/// A disagreement between the replicas of a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    pub partition: PartitionId,
    /// The batch it showed in (0 for the load).
    pub seq: Seq,
    pub kind: DivergenceKind,
    /// A majority had agreed and the batch was answered before a later replica's results
    /// disagreed.
    pub after_answer: bool,
}

/// How the replicas disagreed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DivergenceKind {
    /// Different results for transaction `ts`: each replica's result digest.
    Outcome { ts: Timestamp, digests: Vec<(NodeId, u64)> },
    /// Different state digests after the batch.
    State { digests: Vec<(NodeId, StateDigest)> },
    /// Different states right after loading.
    Load { digests: Vec<(NodeId, StateDigest)> },
    /// A replica's results do not fit the batch sent.
    Shape { node: NodeId, problem: String },
    /// A replica's result digest does not match the outcome it reported.
    DigestMismatch { node: NodeId, ts: Timestamp },
    /// Different digests of the batch's outputs ([`wire::messages::outputs_digest`]): each
    /// replica's, of the outputs it sent or of those it kept.
    Outputs { digests: Vec<(NodeId, u64)> },
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "REPLICAS DIVERGED on partition {} at batch {}", self.partition, self.seq)?;
        if self.after_answer {
            write!(f, " (after a majority agreed and it was answered)")?;
        }
        write!(f, ": ")?;
        match &self.kind {
            DivergenceKind::Outcome { ts, digests } => {
                write!(f, "transaction {ts} has different results:")?;
                for (node, d) in digests {
                    write!(f, " node {node} {d:016x}")?;
                }
                Ok(())
            }
            DivergenceKind::State { digests } | DivergenceKind::Load { digests } => {
                let when =
                    if matches!(self.kind, DivergenceKind::Load { .. }) { "after loading" } else { "after the batch" };
                write!(f, "state digests differ {when}:")?;
                for (node, d) in digests {
                    write!(f, " node {node} {d}")?;
                }
                Ok(())
            }
            DivergenceKind::Shape { node, problem } => write!(f, "node {node} sent results that do not fit: {problem}"),
            DivergenceKind::DigestMismatch { node, ts } => {
                write!(f, "node {node}'s result digest for transaction {ts} does not match its outcome")
            }
            DivergenceKind::Outputs { digests } => {
                write!(f, "the digests of the batch's outputs differ:")?;
                for (node, d) in digests {
                    write!(f, " node {node} {d:016x}")?;
                }
                Ok(())
            }
        }
    }
}

/// Why results were set aside without effect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ignored {
    #[error("results for partition {got}, not {expected}")]
    WrongPartition { expected: PartitionId, got: PartitionId },
    #[error("node {node} is not a live replica")]
    NotLive { node: NodeId },
    #[error("batch {seq} was already decided")]
    AlreadyDecided { seq: Seq },
    #[error("batch {seq} was never sent")]
    NeverSent { seq: Seq },
    #[error("node {node} already reported batch {seq}")]
    Duplicate { node: NodeId, seq: Seq },
    /// The node rejoined after the batch was sent: the batch is decided without it.
    #[error("results of node {node} for batch {seq}, sent before it rejoined")]
    NotExpected { node: NodeId, seq: Seq },
    #[error("the partition is stopped")]
    Stopped,
}

/// A batch taken back from the tracker: (sequence number, transactions with their tags,
/// whether it asked for a digest).
pub type TakenBatch<T> = (Seq, Vec<(Timestamp, T)>, bool);

/// One replica's report of a batch: the digest of its outputs, and the outputs themselves
/// when it sent them (until the batch is answered: then only who reported, and the digest,
/// matter).
#[derive(Debug)]
struct Report {
    digest: u64,
    results: Option<Results>,
}

impl Report {
    fn full(results: Results) -> Report {
        Report { digest: outputs_digest(&results.results), results: Some(results) }
    }
}

/// The outputs a batch was answered with, which later reports must match.
#[derive(Debug, Clone)]
struct Answered {
    digest: u64,
    results: Results,
}

#[derive(Debug)]
struct PendingBatch<T> {
    seq: Seq,
    /// Its transactions with their tags; emptied when it is answered.
    txns: Vec<(Timestamp, T)>,
    /// Its transactions' timestamps, in batch order: what every report must match.
    stamps: Vec<Timestamp>,
    digest_after: bool,
    /// Sent while a replica lagged past the limit: waits for every live replica.
    wait_all: bool,
    /// The results it was answered with (a majority's), once answered: later reports are
    /// compared with them.
    answered: Option<Answered>,
    /// The live replicas when it was sent (minus those failed since): whose results decide it.
    expected: Vec<NodeId>,
    /// The replica named to send the outputs (the others send their digest); `None`: all do.
    answerer: Option<NodeId>,
    /// The replica asked for its outputs ([`Verdict::SendResults`]), until it answers or fails.
    asked: Option<NodeId>,
    /// Reports from live replicas, in arrival order.
    replies: Vec<(NodeId, Report)>,
    /// Results of rejoining replicas, which the batch does not wait for.
    joiners: Vec<(NodeId, Results)>,
}

/// One partition's agreement tracker; `T` tags a transaction's client.
#[derive(Debug)]
pub struct Agreement<T> {
    partition: PartitionId,
    /// The live replicas, sorted.
    live: Vec<NodeId>,
    /// Batches sent and not decided, in sequence order without gaps.
    pending: VecDeque<PendingBatch<T>>,
    /// The sequence number the next batch sent must carry.
    next_seq: Seq,
    stopped: bool,
    quorum: Quorum,
    /// Answered batches a replica may leave unreported before it is a laggard.
    lag_batches_max: usize,
    /// The state digests of batches that asked for one, as they come (docs/design.md §10,
    /// "Checks during traffic"): at most [`DIGESTS_DUE_MAX`], the oldest forgotten.
    digests_due: BTreeMap<Seq, DigestsDue>,
}

/// Batches whose state digests an agreement waits for at once, at most.
pub const DIGESTS_DUE_MAX: usize = 64;

/// The state digests of one batch that asked for them.
#[derive(Debug, Default)]
struct DigestsDue {
    /// The replicas that executed the batch, once it is agreed (minus those failed since).
    from: Option<Vec<NodeId>>,
    /// The digests reported so far, in arrival order (a replica's may come before the batch
    /// is agreed).
    got: Vec<(NodeId, Result<StateDigest, String>)>,
}

/// Pending batches past which a batch names no replica to send its outputs (every replica
/// sends them): well below the executed batches a replica keeps (256), so that a replica
/// asked for the outputs of a batch it reported by digest still has them — unless a failure
/// goes unnoticed long enough for many smaller batches to follow.
pub const ONE_ANSWERS_PENDING_MAX: usize = 64;

/// The default lag limit (`limits.replica_lag_batches_max`'s default).
pub const LAG_BATCHES_DEFAULT: usize = 1024;

impl<T> Agreement<T> {
    /// A tracker for `partition` whose live replicas are `replicas`; batches start at 1.
    pub fn new(partition: PartitionId, replicas: impl IntoIterator<Item = NodeId>) -> Agreement<T> {
        let mut live: Vec<NodeId> = replicas.into_iter().collect();
        live.sort_unstable();
        live.dedup();
        Agreement {
            partition,
            live,
            pending: VecDeque::new(),
            next_seq: 1,
            stopped: false,
            quorum: Quorum::All,
            lag_batches_max: LAG_BATCHES_DEFAULT,
            digests_due: BTreeMap::new(),
        }
    }

    /// The tracker answering on `quorum`, failing a replica more than `lag_batches_max`
    /// answered batches behind.
    pub fn with_quorum(mut self, quorum: Quorum, lag_batches_max: usize) -> Agreement<T> {
        self.quorum = quorum;
        self.lag_batches_max = lag_batches_max.max(1);
        self
    }

    /// The quorum that answers a batch.
    pub fn quorum(&self) -> Quorum {
        self.quorum
    }

    /// A tracker for `partition` over `replicas` whose next batch is `next_seq` (a promoted
    /// primary's, continuing its predecessor's numbering).
    pub fn starting_at(
        partition: PartitionId,
        replicas: impl IntoIterator<Item = NodeId>,
        next_seq: Seq,
    ) -> Agreement<T> {
        let mut a = Agreement::new(partition, replicas);
        a.next_seq = next_seq;
        a
    }

    /// Takes every batch sent and not answered, in order: (sequence number, transactions with
    /// their tags, whether it asked for a digest); answered batches still waiting for the
    /// remaining replicas' reports are dropped. The tracker keeps its numbering.
    pub fn take_pending(&mut self) -> Vec<TakenBatch<T>> {
        let taken: Vec<TakenBatch<T>> =
            self.pending.drain(..).filter(|b| b.answered.is_none()).map(|b| (b.seq, b.txns, b.digest_after)).collect();
        for (seq, _, _) in &taken {
            self.digests_due.remove(seq);
        }
        taken
    }

    /// The sequence number the next batch sent must carry.
    pub fn next_seq(&self) -> Seq {
        self.next_seq
    }

    /// The last batch decided (every batch up to it was answered one way or another; under
    /// `majority`, some replicas may not have reported it yet).
    pub fn decided_through(&self) -> Seq {
        self.pending.get(self.answered_unconfirmed()).map_or(self.next_seq, |b| b.seq).saturating_sub(1)
    }

    /// The live replicas, sorted: those a batch is sent to.
    pub fn live(&self) -> &[NodeId] {
        &self.live
    }

    /// Whether a divergence or the loss of every replica stopped the tracker.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Batches sent and not yet decided.
    pub fn pending_batches(&self) -> usize {
        self.pending.len() - self.answered_unconfirmed()
    }

    /// Batches answered by a majority whose remaining replicas have not all reported yet.
    pub fn answered_unconfirmed(&self) -> usize {
        // Batches are answered in order: the answered ones are the front of `pending`.
        self.pending.partition_point(|b| b.answered.is_some())
    }

    /// Records that batch `seq` with these transactions (timestamp and tag, in batch order)
    /// was sent to every live replica.
    ///
    /// Panics if `seq` is not the next number or the tracker is stopped.
    pub fn sent(&mut self, seq: Seq, txns: Vec<(Timestamp, T)>, digest_after: bool) {
        self.sent_answered_by(seq, txns, digest_after, None);
    }

    /// [`Agreement::sent`] for a batch whose outputs replica `answerer` sends (the others
    /// their digest; `None`: every replica sends them).
    pub fn sent_answered_by(
        &mut self,
        seq: Seq,
        txns: Vec<(Timestamp, T)>,
        digest_after: bool,
        answerer: Option<NodeId>,
    ) {
        assert!(!self.stopped, "batch {seq} sent on stopped partition {}", self.partition);
        assert_eq!(seq, self.next_seq, "partition {}: batches must be sent in order", self.partition);
        self.next_seq += 1;
        let expected = self.live.clone();
        let wait_all = self.answered_unconfirmed() > self.lag_batches_max;
        if digest_after {
            if self.digests_due.len() >= DIGESTS_DUE_MAX {
                self.digests_due.pop_first();
            }
            self.digests_due.insert(seq, DigestsDue::default());
        }
        self.pending.push_back(PendingBatch {
            seq,
            stamps: txns.iter().map(|(ts, _)| *ts).collect(),
            txns,
            digest_after,
            wait_all,
            answered: None,
            replies: Vec::with_capacity(expected.len()),
            expected,
            answerer,
            asked: None,
            joiners: Vec::new(),
        });
    }

    /// The replica that should send batch `seq`'s outputs, if one alone should: when every
    /// live replica must report before it is answered (the quorum is all of them) and there
    /// are two or more, the live replicas take turns by sequence number; otherwise none, and
    /// all send them (under `majority` with replicas to spare, the first majority's outputs
    /// answer whoever they are).
    /// And none while [`ONE_ANSWERS_PENDING_MAX`] batches or more are pending, so that a
    /// replica asked for its outputs still keeps them.
    pub fn answerer_for(&self, seq: Seq) -> Option<NodeId> {
        let n = self.live.len();
        let one = n >= 2 && self.quorum.needed(n) == n && self.pending.len() < ONE_ANSWERS_PENDING_MAX;
        one.then(|| self.live[(seq % n as u64) as usize])
    }

    /// [`Agreement::sent`] for a batch only `expected` of the live replicas will answer (a new
    /// leader's adopted batch: a replica that executed it and no longer keeps its results
    /// cannot; docs/design.md §11). A batch none will answer is decided by
    /// [`Agreement::decide_unanswerable`].
    pub fn sent_expecting(
        &mut self,
        seq: Seq,
        txns: Vec<(Timestamp, T)>,
        digest_after: bool,
        answerer: Option<NodeId>,
        expected: &[NodeId],
    ) {
        self.sent_answered_by(seq, txns, digest_after, answerer);
        let b = self.pending.back_mut().expect("just sent");
        b.expected.retain(|n| expected.contains(n));
    }

    /// Decides the pending batches no live replica is expected to answer (their results are
    /// lost: [`Verdict::Unknown`]) and whatever that makes decidable.
    pub fn decide_unanswerable(&mut self) -> Vec<Verdict<T>> {
        if self.stopped {
            return Vec::new();
        }
        let mut verdicts = Vec::new();
        let (unknown, kept): (VecDeque<_>, VecDeque<_>) =
            std::mem::take(&mut self.pending).into_iter().partition(|b| b.expected.is_empty());
        self.pending = kept;
        for b in unknown.into_iter().filter(|b| b.answered.is_none()) {
            verdicts.push(Verdict::Unknown { seq: b.seq, unanswered: b.txns });
        }
        verdicts.extend(self.decide());
        verdicts
    }

    /// A rejoined replica: it counts for every batch sent from now on (the batches already
    /// pending are decided without it). Returns whether it was added (not already live).
    pub fn add_replica(&mut self, node: NodeId) -> bool {
        match self.live.binary_search(&node) {
            Ok(_) => false,
            Err(at) => {
                self.live.insert(at, node);
                true
            }
        }
    }

    /// Takes replica `from`'s results (its outputs in full); returns the batches this decided,
    /// and the outputs to ask for, in order.
    pub fn on_results(&mut self, from: NodeId, results: Results) -> Result<Vec<Verdict<T>>, Ignored> {
        let (partition, seq, count) = (results.partition, results.seq, results.results.len());
        self.on_report(from, partition, seq, count, Report::full(results))
    }

    /// Takes replica `from`'s digest of a batch's outputs (another replica sends them);
    /// returns as [`Agreement::on_results`] does.
    pub fn on_results_digest(&mut self, from: NodeId, digest: ResultsDigest) -> Result<Vec<Verdict<T>>, Ignored> {
        let count = digest.count as usize;
        self.on_report(from, digest.partition, digest.seq, count, Report { digest: digest.digest, results: None })
    }

    /// Replica `from`, asked for its outputs of batch `seq` ([`Verdict::SendResults`]), no
    /// longer keeps them: the batch took effect (it executed it), and its outcome is
    /// [`Verdict::Unknown`]. Returns that and whatever it makes decidable.
    pub fn on_results_forgotten(&mut self, from: NodeId, seq: Seq) -> Result<Vec<Verdict<T>>, Ignored> {
        if self.stopped {
            return Err(Ignored::Stopped);
        }
        let Some(batch) = self.pending.iter_mut().find(|b| b.seq == seq) else {
            return Err(Ignored::AlreadyDecided { seq });
        };
        if batch.asked != Some(from) {
            return Err(Ignored::NotExpected { node: from, seq });
        }
        batch.asked = None;
        batch.expected.clear();
        batch.replies.clear();
        let mut verdicts = self.decide_unanswerable();
        verdicts.extend(self.ask_for_outputs());
        Ok(verdicts)
    }

    fn on_report(
        &mut self,
        from: NodeId,
        partition: PartitionId,
        seq: Seq,
        count: usize,
        report: Report,
    ) -> Result<Vec<Verdict<T>>, Ignored> {
        if self.stopped {
            return Err(Ignored::Stopped);
        }
        if partition != self.partition {
            return Err(Ignored::WrongPartition { expected: self.partition, got: partition });
        }
        if !self.live.contains(&from) {
            return Err(Ignored::NotLive { node: from });
        }
        if seq >= self.next_seq {
            return Err(Ignored::NeverSent { seq });
        }
        let first = self.pending.front().map_or(self.next_seq, |b| b.seq);
        if seq < first {
            return Err(Ignored::AlreadyDecided { seq });
        }
        let batch = self.pending.iter_mut().find(|b| b.seq == seq).ok_or(Ignored::AlreadyDecided { seq })?;
        if !batch.expected.contains(&from) {
            // A replica that rejoined after the batch was sent, and executed it while it
            // copied: kept, not waited for (see `on_joiner_results`). Its digest alone would
            // decide nothing.
            let Some(results) = report.results else { return Err(Ignored::NotExpected { node: from, seq }) };
            if batch.joiners.iter().any(|(n, _)| *n == from) || shape_problem(batch, count, Some(&results)).is_some() {
                return Err(Ignored::NotExpected { node: from, seq });
            }
            batch.joiners.push((from, results));
            return Ok(Vec::new());
        }
        let after_answer = batch.answered.is_some();
        if let Some(problem) = shape_problem(batch, count, report.results.as_ref()) {
            let kind = DivergenceKind::Shape { node: from, problem };
            let divergence = Divergence { partition: self.partition, seq, kind, after_answer };
            return Ok(vec![self.stop_diverged(divergence)]);
        }
        if let Some(at) = batch.replies.iter().position(|(n, _)| *n == from) {
            // Only the outputs of a batch it reported the digest of, once asked for them.
            let earlier = &batch.replies[at].1;
            if earlier.results.is_some() || report.results.is_none() || after_answer {
                return Err(Ignored::Duplicate { node: from, seq });
            }
            if earlier.digest != report.digest {
                let problem = format!(
                    "its outputs' digest {:016x} is not the digest {:016x} it sent",
                    report.digest, earlier.digest
                );
                let kind = DivergenceKind::Shape { node: from, problem };
                let divergence = Divergence { partition: self.partition, seq, kind, after_answer };
                return Ok(vec![self.stop_diverged(divergence)]);
            }
            if batch.asked == Some(from) {
                batch.asked = None;
            }
            batch.replies[at].1 = report;
            return Ok(self.decide_and_ask());
        }
        if let Some(reference) = &batch.answered {
            // Answered by a majority: this replica's report must still agree.
            let first = batch.replies.first().map_or(from, |(n, _)| *n);
            let both =
                [(first, reference.digest, Some(&reference.results)), (from, report.digest, report.results.as_ref())];
            if let Err(kind) = compare(&both) {
                let divergence = Divergence { partition: self.partition, seq, kind, after_answer };
                return Ok(vec![self.stop_diverged(divergence)]);
            }
            // Only who reported is needed now: the reports agreed.
            batch.replies.push((from, Report { digest: report.digest, results: None }));
        } else {
            batch.replies.push((from, report));
        }
        Ok(self.decide_and_ask())
    }

    /// Results of a rejoining replica (not live yet) for a batch it held while copying: kept
    /// with the batch, which does not wait for them; they count only if every replica the
    /// batch was sent to fails ([`Agreement::replica_down`]).
    pub fn on_joiner_results(&mut self, from: NodeId, results: Results) -> Result<(), Ignored> {
        if self.stopped {
            return Err(Ignored::Stopped);
        }
        let seq = results.seq;
        let first = self.pending.front().map_or(self.next_seq, |b| b.seq);
        if seq < first || seq >= self.next_seq || results.partition != self.partition {
            return Err(Ignored::NotExpected { node: from, seq });
        }
        let Some(batch) = self.pending.iter_mut().find(|b| b.seq == seq) else {
            return Err(Ignored::AlreadyDecided { seq });
        };
        if batch.answered.is_some() {
            // Answered already: a joiner's results would never decide it.
            return Err(Ignored::AlreadyDecided { seq });
        }
        let count = results.results.len();
        if batch.joiners.iter().any(|(n, _)| *n == from) || shape_problem(batch, count, Some(&results)).is_some() {
            return Err(Ignored::Duplicate { node: from, seq });
        }
        batch.joiners.push((from, results));
        Ok(())
    }

    /// Replica `node` failed: stop waiting for it; returns the batches this decided.
    pub fn replica_down(&mut self, node: NodeId) -> Vec<Verdict<T>> {
        let Ok(at) = self.live.binary_search(&node) else { return Vec::new() };
        self.live.remove(at);
        if self.stopped {
            return Vec::new();
        }
        let live = &self.live;
        for b in &mut self.pending {
            b.replies.retain(|(n, _)| *n != node);
            b.expected.retain(|n| *n != node);
            b.joiners.retain(|(n, _)| *n != node);
            if b.asked == Some(node) {
                b.asked = None;
            }
            if b.expected.is_empty() && b.answered.is_none() {
                // Everyone it was sent to failed: a rejoined replica that executed it answers.
                let joined: Vec<(NodeId, Results)> =
                    std::mem::take(&mut b.joiners).into_iter().filter(|(n, _)| live.contains(n)).collect();
                b.expected = joined.iter().map(|(n, _)| *n).collect();
                b.replies = joined.into_iter().map(|(n, r)| (n, Report::full(r))).collect();
            }
        }
        if self.live.is_empty() {
            self.stopped = true;
            self.digests_due.clear();
            return vec![Verdict::NoLiveReplica { unanswered: self.drain_unanswered() }];
        }
        // A batch no one is left to answer took effect in every live replica: each joined
        // after it was sent, and either executed it (sent it while copying) or copied a
        // state after it. Its results are lost.
        let mut verdicts = self.decide_unanswerable();
        let due: Vec<Seq> = self.digests_due.keys().copied().collect();
        for seq in due {
            let d = self.digests_due.get_mut(&seq).expect("listed");
            if let Some(from) = &mut d.from {
                from.retain(|n| *n != node);
            }
            verdicts.extend(self.digests_complete(seq));
        }
        if !self.stopped {
            verdicts.extend(self.ask_for_outputs());
        }
        verdicts
    }

    /// Whether the tracker waits for the state digests of batch `seq`.
    pub fn awaits_digests(&self, seq: Seq) -> bool {
        self.digests_due.contains_key(&seq)
    }

    /// Replica `from`'s state digest after batch `seq`, which asked for one (or why it has
    /// none); returns the verdict once every replica that executed the batch reported:
    /// [`Verdict::StateDigests`], or [`Verdict::Diverged`] when the digests differ.
    pub fn on_state_digest(
        &mut self,
        from: NodeId,
        seq: Seq,
        digest: Result<StateDigest, String>,
    ) -> Result<Vec<Verdict<T>>, Ignored> {
        if self.stopped {
            return Err(Ignored::Stopped);
        }
        let Some(due) = self.digests_due.get_mut(&seq) else { return Err(Ignored::NotExpected { node: from, seq }) };
        if due.from.as_ref().is_some_and(|f| !f.contains(&from)) || !self.live.contains(&from) {
            return Err(Ignored::NotExpected { node: from, seq });
        }
        if due.got.iter().any(|(n, _)| *n == from) {
            return Err(Ignored::Duplicate { node: from, seq });
        }
        due.got.push((from, digest));
        Ok(self.digests_complete(seq).into_iter().collect())
    }

    /// The verdict on batch `seq`'s state digests, if every replica that executed it reported.
    fn digests_complete(&mut self, seq: Seq) -> Option<Verdict<T>> {
        let due = self.digests_due.get(&seq)?;
        let from = due.from.as_ref()?;
        if !from.iter().all(|n| due.got.iter().any(|(g, _)| g == n)) {
            return None;
        }
        let due = self.digests_due.remove(&seq).expect("looked at");
        let from = due.from.expect("looked at");
        let mut digests = Vec::with_capacity(from.len());
        for (node, digest) in due.got.into_iter().filter(|(n, _)| from.contains(n)) {
            match digest {
                Ok(d) => digests.push((node, d)),
                Err(reason) => {
                    let digests = Err(format!("node {node} could not take its digest: {reason}"));
                    return Some(Verdict::StateDigests { seq, digests });
                }
            }
        }
        if digests.is_empty() {
            let digests = Err("every replica that executed the batch failed".to_string());
            return Some(Verdict::StateDigests { seq, digests });
        }
        digests.sort_unstable_by_key(|(n, _)| *n);
        if digests.iter().any(|(_, d)| *d != digests[0].1) {
            let kind = DivergenceKind::State { digests };
            return Some(self.stop_diverged(Divergence { partition: self.partition, seq, kind, after_answer: true }));
        }
        Some(Verdict::StateDigests { seq, digests: Ok(digests) })
    }

    /// Stops the tracker from outside (a divergence found elsewhere, a load failure) and
    /// returns the unanswered tags.
    pub fn stop(&mut self) -> Vec<T> {
        self.stopped = true;
        self.digests_due.clear();
        self.drain_unanswered()
    }

    fn drain_unanswered(&mut self) -> Vec<T> {
        // An answered batch's `txns` is empty.
        self.pending.drain(..).flat_map(|b| b.txns.into_iter().map(|(_, t)| t)).collect()
    }

    fn stop_diverged(&mut self, divergence: Divergence) -> Verdict<T> {
        self.stopped = true;
        self.digests_due.clear();
        Verdict::Diverged { divergence, unanswered: self.drain_unanswered() }
    }

    /// [`Agreement::decide`], then [`Agreement::ask_for_outputs`] unless that stopped it.
    fn decide_and_ask(&mut self) -> Vec<Verdict<T>> {
        let mut verdicts = self.decide();
        if !self.stopped {
            verdicts.extend(self.ask_for_outputs());
        }
        verdicts
    }

    /// Asks for the outputs of every unanswered batch reported only by digests whose named
    /// replica will not send them (it failed, or none was named): of the first replica that
    /// reported it, once.
    fn ask_for_outputs(&mut self) -> Vec<Verdict<T>> {
        let mut asks: BTreeMap<NodeId, Vec<Seq>> = BTreeMap::new();
        for b in &mut self.pending {
            if b.answered.is_some() || b.asked.is_some() || b.replies.iter().any(|(_, r)| r.results.is_some()) {
                continue;
            }
            let awaited =
                b.answerer.is_some_and(|a| b.expected.contains(&a) && !b.replies.iter().any(|(n, _)| *n == a));
            let Some(&(from, _)) = b.replies.first().filter(|_| !awaited) else { continue };
            b.asked = Some(from);
            asks.entry(from).or_default().push(b.seq);
        }
        let mut verdicts = Vec::new();
        for (from, seqs) in asks {
            for chunk in seqs.chunks(wire::channel::control::SEND_RESULTS_MAX) {
                verdicts.push(Verdict::SendResults { from, seqs: chunk.to_vec() });
            }
        }
        verdicts
    }

    /// Answers every leading batch whose quorum reported and agreed, and forgets answered
    /// batches every expected replica reported.
    fn decide(&mut self) -> Vec<Verdict<T>> {
        let mut verdicts = Vec::new();
        // Batches agreed that asked for the state digest, and who executed them.
        let mut digests_from = Vec::new();
        for i in 0..self.pending.len() {
            let b = &mut self.pending[i];
            if b.answered.is_some() {
                continue;
            }
            let needed =
                if b.digest_after || b.wait_all { b.expected.len() } else { self.quorum.needed(b.expected.len()) };
            if b.replies.len() < needed || !b.replies.iter().any(|(_, r)| r.results.is_some()) {
                // Too few reports, or digests alone: the outputs come from the replica named
                // to send them, or when asked (`ask_for_outputs`).
                break;
            }
            let complete = b.replies.len() == b.expected.len();
            match judge(self.partition, b, complete) {
                Ok(agreed) => {
                    if let Some(from) = &agreed.digest_from {
                        digests_from.push((agreed.seq, from.clone()));
                    }
                    verdicts.push(Verdict::Agreed(agreed));
                }
                Err(divergence) => {
                    verdicts.push(self.stop_diverged(divergence));
                    return verdicts;
                }
            }
            // Only who reported, and their digests, count now.
            for (_, r) in &mut b.replies {
                r.results = None;
            }
        }
        while self.pending.front().is_some_and(|b| b.answered.is_some() && b.replies.len() == b.expected.len()) {
            self.pending.pop_front();
        }
        for (seq, from) in digests_from {
            if let Some(due) = self.digests_due.get_mut(&seq) {
                due.from = Some(from);
                verdicts.extend(self.digests_complete(seq));
            }
        }
        verdicts
    }

    /// The live replicas more than the lag limit of answered batches behind, with how many
    /// they have not reported, the furthest behind first. While there are any, batches sent
    /// wait for every live replica.
    pub fn laggards(&self) -> Vec<(NodeId, usize)> {
        let answered = self.answered_unconfirmed();
        if answered <= self.lag_batches_max {
            return Vec::new();
        }
        let mut behind: Vec<(NodeId, usize)> = self
            .live
            .iter()
            .map(|&n| {
                let missing = self
                    .pending
                    .iter()
                    .take(answered)
                    .filter(|b| b.expected.contains(&n) && !b.replies.iter().any(|(m, _)| *m == n))
                    .count();
                (n, missing)
            })
            .filter(|&(_, missing)| missing > self.lag_batches_max)
            .collect();
        behind.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        behind
    }
}

/// Compares a batch's reports so far; on agreement marks it answered (keeping the outputs
/// answered, while replicas that are to report remain: `complete` is false) and returns the
/// answers.
fn judge<T>(partition: PartitionId, batch: &mut PendingBatch<T>, complete: bool) -> Result<AgreedBatch<T>, Divergence> {
    let seq = batch.seq;
    let view: Vec<_> = batch.replies.iter().map(|(n, r)| (*n, r.digest, r.results.as_ref())).collect();
    compare(&view).map_err(|kind| Divergence { partition, seq, kind, after_answer: false })?;
    let at = batch.replies.iter().position(|(_, r)| r.results.is_some()).expect("answered only with outputs in hand");
    let digest_from = batch.digest_after.then(|| batch.replies.iter().map(|(n, _)| *n).collect());
    let report = &mut batch.replies[at].1;
    let results = report.results.take().expect("found");
    let answers = std::mem::take(&mut batch.txns)
        .into_iter()
        .zip(&results.results)
        .map(|((ts, tag), r)| (tag, ts, r.outcome.clone()))
        .collect();
    // A complete batch is forgotten at once: nothing will be compared with its outputs.
    let results = if complete { Results { results: Vec::new(), ..results } } else { results };
    batch.answered = Some(Answered { digest: report.digest, results });
    Ok(AgreedBatch { seq, answers, digest_from })
}

/// Whether `reports` (each already fits the batch: node, digest of its outputs, the outputs
/// if sent) agree: every transaction's digest and outcome among the outputs sent, and every
/// report's digest of its outputs; the first disagreement found otherwise.
fn compare(reports: &[(NodeId, u64, Option<&Results>)]) -> Result<(), DivergenceKind> {
    let full: Vec<(NodeId, &Results)> = reports.iter().filter_map(|(n, _, r)| r.map(|r| (*n, r))).collect();
    if let Some(((first_node, first), rest)) = full.split_first() {
        for (i, reference) in first.results.iter().enumerate() {
            if cfg!(debug_assertions) {
                for (node, r) in std::iter::once(&(*first_node, *first)).chain(rest) {
                    if r.results[i].digest != r.results[i].outcome.digest() {
                        return Err(DivergenceKind::DigestMismatch { node: *node, ts: reference.ts });
                    }
                }
            }
            let agree = rest
                .iter()
                .all(|(_, r)| r.results[i].digest == reference.digest && r.results[i].outcome == reference.outcome);
            if !agree {
                let mut digests: Vec<(NodeId, u64)> = std::iter::once(&(*first_node, *first))
                    .chain(rest)
                    .map(|(n, r)| (*n, r.results[i].digest))
                    .collect();
                digests.sort_unstable_by_key(|(n, _)| *n);
                return Err(DivergenceKind::Outcome { ts: reference.ts, digests });
            }
        }
    }
    if reports.iter().any(|(_, d, _)| *d != reports[0].1) {
        let mut digests: Vec<(NodeId, u64)> = reports.iter().map(|(n, d, _)| (*n, *d)).collect();
        digests.sort_unstable_by_key(|(n, _)| *n);
        return Err(DivergenceKind::Outputs { digests });
    }
    Ok(())
}

/// What is wrong with a report of `count` results (`results`, when sent in full) as an answer
/// to `batch`, if anything.
fn shape_problem<T>(batch: &PendingBatch<T>, count: usize, results: Option<&Results>) -> Option<String> {
    if count != batch.stamps.len() {
        return Some(format!("{count} results for {} transactions", batch.stamps.len()));
    }
    let results = results?;
    if results.results.len() != count {
        return Some(format!("{} results for {} transactions", results.results.len(), batch.stamps.len()));
    }
    if let Some((i, r)) = results.results.iter().enumerate().find(|(i, r)| r.ts != batch.stamps[*i]) {
        return Some(format!("result {i} is for transaction {}, not {}", r.ts, batch.stamps[i]));
    }
    None
}

#[cfg(test)]
mod tests;
