//! Admission and answering: a client's request routed to its partition, stamped with a
//! timestamp and admitted into the partition's open batch, the closed batch sent to the live
//! replicas, their results agreed ([`crate::agreement`]) and the clients answered; digest
//! requests ride the same ordered path.
//!
//! Guarantees:
//! - a client is answered `Committed`/`Aborted`/`Failed` only after every live *executing*
//!   replica of the transaction's partition executed it and all results agreed — in
//!   active-active every replica executes; in the passive modes only the primary (the first
//!   replica listed) does, and its node answers only once its backups hold the log records
//!   (`shipping = "sync"`); every request gets exactly one reply (the replies of a stopped
//!   partition included);
//! - each partition has at most `inflight_txns_max` transactions in flight; beyond, requests
//!   are answered `Busy` at once and nothing is kept;
//! - while a replica of a partition rejoins, the partition admits only part of what it did
//!   before ([`crate::catch_up`], `limits.catch_up_share_pct`); past it, requests are
//!   answered `Busy` at once and nothing is kept;
//! - reads (OrderStatus, StockLevel) and state digests go through the same ordered path; a
//!   partition has at most [`DIGEST_REQUESTS_INFLIGHT_MAX`] digest requests in flight.

use wire::channel::{ClientToCoordinator, CoordinatorToClient, CoordinatorToNode};
use wire::messages::{
    ClientReply, ClientRequest, ClientResult, DigestOutcome, NodeId, PartitionId, Rejection, Results, ResultsDigest,
    Seq, Timestamp, TxnOutcome,
};

use super::{ClientId, ClientRef, Coordinator, Event, Output, Partition, Phase, DIGEST_REQUESTS_INFLIGHT_MAX};
use crate::agreement::{DivergenceKind, Ignored, Verdict};
use crate::router::Route;
use crate::sequencer::Busy;

impl Coordinator {
    /// A client's transaction request.
    pub fn on_client_request(&mut self, client: ClientId, request: ClientRequest, now_us: u64) -> Vec<Output> {
        let mut out = self.on_client_request_unsettled(client, request, now_us);
        self.send_recalls(now_us, &mut out);
        self.settle(out)
    }

    fn on_client_request_unsettled(&mut self, client: ClientId, request: ClientRequest, now_us: u64) -> Vec<Output> {
        if request.retry || self.retries.was_retried(request.id()) {
            // Asked again (or first sent on a connection the client gave up, overtaken by its
            // retry): answered what became of it, run only if it never ran (`retries`).
            let mut out = Vec::new();
            self.on_retry(client, request, &mut out);
            return out;
        }
        self.admit_request(client, request, now_us)
    }

    /// Admits a request as a transaction that never ran: routed, stamped and batched.
    pub(super) fn admit_request(&mut self, client: ClientId, request: ClientRequest, now_us: u64) -> Vec<Output> {
        let mut out = Vec::new();
        let tag = ClientRef { client, request_id: request.request_id };
        let reply = |result| Output::Reply { client, reply: ClientReply { request_id: request.request_id, result } };
        let pid = match self.router.route(&request.input) {
            Ok(Route { home, remotes }) if remotes.is_empty() => home,
            Ok(route) => return self.admit_multi(tag, request.input, request.id(), route, now_us),
            Err(e) => return vec![reply(ClientResult::Rejected(e.into()))],
        };
        let p = self.partitions.get_mut(&pid).expect("the router only names configured partitions");
        if let Some(rejection) = p.refusal() {
            return vec![reply(ClientResult::Rejected(rejection))];
        }
        if !p.catch_up.allows(now_us) {
            return vec![reply(ClientResult::Busy { partition: pid })];
        }
        let ts = self.clock.next(now_us / 1_000);
        match p.sequencer.admit(ts, request.input, request.id(), now_us) {
            Err(Busy) => return vec![reply(ClientResult::Busy { partition: pid })],
            Ok(closed) => {
                p.catch_up.admitted(now_us);
                self.last_ts = Some(ts);
                p.open_tags.push(tag);
                if let Some(batch) = closed {
                    p.send(batch, &mut out);
                }
            }
        }
        out
    }

    /// A message from client `client`: its transaction requests or a digest request. Status
    /// requests and shutdowns are the network code's (they concern the process, not the
    /// state machine): nothing here.
    pub fn on_client_message(&mut self, client: ClientId, msg: ClientToCoordinator, now_us: u64) -> Vec<Output> {
        match msg {
            ClientToCoordinator::ClientRequests(requests) => {
                let mut out = Vec::new();
                for request in requests {
                    let o = self.on_client_request_unsettled(client, request, now_us);
                    out.extend(self.settle(o));
                }
                // The frame's retries, asked together of each partition.
                self.send_recalls(now_us, &mut out);
                out
            }
            ClientToCoordinator::DigestRequest { request_id, partition } => {
                self.on_digest_request(client, request_id, partition, now_us)
            }
            ClientToCoordinator::StatusRequest { .. } | ClientToCoordinator::Shutdown { .. } => Vec::new(),
        }
    }

    /// A client's request for the partition's state digests: answered once every live replica
    /// digested its state after the same batch.
    pub fn on_digest_request(
        &mut self,
        client: ClientId,
        request_id: u64,
        partition: PartitionId,
        _now_us: u64,
    ) -> Vec<Output> {
        let reject = |rejection| {
            vec![Output::ToClient {
                client,
                msg: CoordinatorToClient::DigestReply {
                    request_id,
                    partition,
                    outcome: DigestOutcome::Rejected(rejection),
                },
            }]
        };
        let Some(p) = self.partitions.get_mut(&partition) else {
            return reject(Rejection::InvalidInput { problem: format!("no partition {partition}") });
        };
        if let Some(rejection) = p.refusal() {
            return reject(rejection);
        }
        if p.digest_waiters.values().map(Vec::len).sum::<usize>() >= DIGEST_REQUESTS_INFLIGHT_MAX {
            let msg = CoordinatorToClient::DigestReply { request_id, partition, outcome: DigestOutcome::Busy };
            return vec![Output::ToClient { client, msg }];
        }
        let mut out = Vec::new();
        let batch = p.sequencer.close_with_digest();
        p.digest_waiters.entry(batch.seq).or_default().push(ClientRef { client, request_id });
        p.send(batch, &mut out);
        out
    }

    /// A replica's report of a batch: its outputs in full, or (another replica sends them)
    /// their digest.
    pub(super) fn on_results(&mut self, from: NodeId, report: BatchReport, out: &mut Vec<Output>) {
        let (partition, seq) = report.batch();
        let Some(p) = self.partitions.get_mut(&partition) else {
            out.push(Output::Event(Event::Ignored {
                node: from,
                what: format!("results for unknown partition {partition}"),
            }));
            return;
        };
        if let Some((done, _)) = p.catching_up_mut().and_then(|c| c.get_mut(&from)) {
            *done = (*done).max(seq);
        }
        if let Some(s) = p.passive_mut().filter(|s| s.lost.front().is_some_and(|b| b.seq <= seq)) {
            // A replica back from its log executed the lost batches up to this one (in order):
            // their clients were answered already.
            let replayed = s.lost.iter().any(|b| b.seq == seq);
            while s.lost.front().is_some_and(|b| b.seq <= seq) {
                s.lost.pop_front();
            }
            if replayed {
                return;
            }
        }
        if p.joining.iter().any(|(n, from_seq)| *n == from && seq >= *from_seq) {
            // A rejoining replica's results for a batch it held: kept, not waited for. (Its
            // batches name no replica to answer, so it sends outputs, not digests.)
            let kept = match report {
                BatchReport::Outputs(results) => p.agreement.on_joiner_results(from, results),
                BatchReport::Digest(_) => Err(Ignored::NotExpected { node: from, seq }),
            };
            if let Err(e) = kept {
                out.push(Output::Event(Event::Ignored { node: from, what: e.to_string() }));
            }
            return;
        }
        let verdicts = match report {
            BatchReport::Outputs(results) => p.agreement.on_results(from, results),
            BatchReport::Digest(digest) => p.agreement.on_results_digest(from, digest),
        };
        p.take_verdicts(from, verdicts, out);
    }

    /// Replica `from` no longer keeps the outputs of batch `seq` it was asked for.
    pub(super) fn on_results_forgotten(
        &mut self,
        from: NodeId,
        partition: PartitionId,
        seq: Seq,
        out: &mut Vec<Output>,
    ) {
        if let Some(p) = self.partitions.get_mut(&partition) {
            let verdicts = p.agreement.on_results_forgotten(from, seq);
            p.take_verdicts(from, verdicts, out);
        }
    }
}

/// A replica's report of one batch.
pub(super) enum BatchReport {
    /// Its outputs in full.
    Outputs(Results),
    /// Their digest: another replica sends them ([`wire::messages::Batch::answerer`]).
    Digest(ResultsDigest),
}

impl BatchReport {
    /// The partition and batch reported.
    fn batch(&self) -> (PartitionId, Seq) {
        match self {
            BatchReport::Outputs(r) => (r.partition, r.seq),
            BatchReport::Digest(d) => (d.partition, d.seq),
        }
    }
}

impl Partition {
    /// Applies the verdicts of a replica's report, or notes why it was set aside.
    fn take_verdicts(
        &mut self,
        from: NodeId,
        verdicts: Result<Vec<Verdict<ClientRef>>, Ignored>,
        out: &mut Vec<Output>,
    ) {
        match verdicts {
            Ok(verdicts) => {
                for v in verdicts {
                    self.apply(v, out);
                }
                self.prune_reads();
            }
            Err(Ignored::Stopped | Ignored::NotExpected { .. }) => {}
            Err(e) => out.push(Output::Event(Event::Ignored { node: from, what: e.to_string() })),
        }
    }

    /// Forgets the batches answered through `seq` (kept for a promotion in the passive modes).
    fn answered_through(&mut self, seq: Seq) {
        if let Some(s) = self.passive_mut() {
            while s.unanswered.front().is_some_and(|b| b.seq <= seq) {
                s.unanswered.pop_front();
            }
            // The primary answered a batch sent after the membership naming these backups:
            // it waits for them now, and they may be promoted.
            let (confirmed, still): (Vec<_>, Vec<_>) = s.confirming.drain(..).partition(|&(_, from)| from <= seq);
            s.confirming = still;
            s.backups.extend(confirmed.into_iter().map(|(n, _)| n));
        }
    }

    /// Why a request cannot be served now, if it cannot.
    pub(super) fn refusal(&self) -> Option<Rejection> {
        match &self.phase {
            Phase::Serving => None,
            Phase::Loading => Some(Rejection::NotReady { partition: self.id }),
            Phase::Stopped { reason } => {
                Some(Rejection::PartitionStopped { partition: self.id, reason: reason.clone() })
            }
            Phase::Unavailable => Some(Rejection::NoLiveReplica { partition: self.id }),
            Phase::Promoting { .. } | Phase::Recovering { .. } => Some(Rejection::NotReady { partition: self.id }),
        }
    }

    /// Sends a closed batch to every live replica and records it for agreement.
    pub(super) fn send(&mut self, mut batch: wire::messages::Batch, out: &mut Vec<Output>) {
        debug_assert_eq!(batch.txns.len(), self.open_tags.len());
        let tags = std::mem::take(&mut self.open_tags);
        let txns = batch.txns.iter().map(|t| t.ts).zip(tags).collect();
        // One replica sends the outputs, the others their digest (docs/design.md §10, "One
        // replica answers"); while a replica rejoins, every replica sends them.
        let one_answers = self.mode.every_replica_executes() && self.joining.is_empty();
        batch.answerer = one_answers.then(|| self.agreement.answerer_for(batch.seq)).flatten();
        self.agreement.sent_answered_by(batch.seq, txns, batch.digest_after, batch.answerer);
        // Active-active joiners get the batches; passive ones get the primary's shipments.
        let nodes = self.agreement.live().iter().copied().chain(self.batch_joiners()).collect();
        if let Some(s) = self.passive_mut() {
            s.unanswered.push_back(batch.clone());
        }
        out.push(Output::ToNodes { nodes, msg: CoordinatorToNode::Batch(batch) });
    }

    /// Answers digest requesters with `rejection`.
    pub(super) fn reject_waiters(&self, waiters: Vec<ClientRef>, rejection: Rejection, out: &mut Vec<Output>) {
        for w in waiters {
            out.push(Output::ToClient {
                client: w.client,
                msg: CoordinatorToClient::DigestReply {
                    request_id: w.request_id,
                    partition: self.id,
                    outcome: DigestOutcome::Rejected(rejection.clone()),
                },
            });
        }
    }

    /// Answers "busy" to the digest requesters whose batch's digests the agreement no longer
    /// waits for (a new tracker replaced it: the replicas that executed the batch are gone).
    pub(super) fn answer_orphaned_digests(&mut self, out: &mut Vec<Output>) {
        let orphaned: Vec<Seq> =
            self.digest_waiters.keys().copied().filter(|seq| !self.agreement.awaits_digests(*seq)).collect();
        for seq in orphaned {
            for w in self.digest_waiters.remove(&seq).unwrap_or_default() {
                let msg = CoordinatorToClient::DigestReply {
                    request_id: w.request_id,
                    partition: self.id,
                    outcome: DigestOutcome::Busy,
                };
                out.push(Output::ToClient { client: w.client, msg });
            }
        }
    }

    /// Applies an agreement verdict: answers clients, or stops the partition.
    pub(super) fn apply(&mut self, verdict: Verdict<ClientRef>, out: &mut Vec<Output>) {
        match verdict {
            Verdict::Agreed(batch) => {
                self.answered_through(batch.seq);
                self.sequencer.complete(batch.answers.len());
                for (tag, ts, outcome) in batch.answers {
                    let result = match outcome {
                        TxnOutcome::Committed(output) => ClientResult::Committed { ts, output },
                        TxnOutcome::Aborted { reason } => ClientResult::Aborted { ts, reason },
                        TxnOutcome::Failed { reason } => ClientResult::Failed { ts, reason },
                        TxnOutcome::PieceDone { .. } => {
                            self.pieces_done.push((tag, ts));
                            continue;
                        }
                    };
                    out.push(Output::Reply {
                        client: tag.client,
                        reply: ClientReply { request_id: tag.request_id, result },
                    });
                }
            }
            Verdict::StateDigests { seq, digests } => {
                let outcome = match digests {
                    Ok(digests) => DigestOutcome::Digests { seq, digests },
                    // A replica could not take its digest (its copy was refused, and its node
                    // logged why), or every replica that could failed: ask again.
                    Err(_) => DigestOutcome::Busy,
                };
                for w in self.digest_waiters.remove(&seq).unwrap_or_default() {
                    let msg = CoordinatorToClient::DigestReply {
                        request_id: w.request_id,
                        partition: self.id,
                        outcome: outcome.clone(),
                    };
                    out.push(Output::ToClient { client: w.client, msg });
                }
            }
            Verdict::Diverged { divergence, unanswered } => {
                let reason = divergence.to_string();
                // Digest requesters of the diverging batch see the differing digests.
                if let DivergenceKind::State { digests } = &divergence.kind {
                    for w in self.digest_waiters.remove(&divergence.seq).unwrap_or_default() {
                        let outcome = DigestOutcome::Digests { seq: divergence.seq, digests: digests.clone() };
                        out.push(Output::ToClient {
                            client: w.client,
                            msg: CoordinatorToClient::DigestReply {
                                request_id: w.request_id,
                                partition: self.id,
                                outcome,
                            },
                        });
                    }
                }
                self.stop_answering(unanswered, reason, out);
                out.push(Output::Event(Event::Diverged(divergence)));
            }
            Verdict::Unknown { seq, unanswered } => {
                self.answered_through(seq);
                self.sequencer.complete(unanswered.len());
                for (ts, tag) in unanswered {
                    let reason =
                        format!("the replicas batch {seq} was sent to failed or lost its outputs before answering");
                    out.push(outcome_unknown(tag, ts, reason));
                }
                if let Some(waiters) = self.digest_waiters.remove(&seq) {
                    self.reject_waiters(waiters, Rejection::NoLiveReplica { partition: self.id }, out);
                }
            }
            Verdict::SendResults { from, seqs } => {
                let msg = CoordinatorToNode::SendResults { partition: self.id, seqs };
                out.push(Output::ToNodes { nodes: vec![from], msg });
            }
            Verdict::NoLiveReplica { unanswered } => {
                let rejection = Rejection::NoLiveReplica { partition: self.id };
                self.reject_all(unanswered, rejection, out);
                self.phase = Phase::Unavailable;
                out.push(Output::Event(Event::PartitionUnavailable { partition: self.id }));
            }
        }
    }
}

/// The "outcome unknown" answer to the transaction tagged `tag` (timestamp `ts`).
pub(super) fn outcome_unknown(tag: ClientRef, ts: Timestamp, reason: String) -> Output {
    Output::Reply {
        client: tag.client,
        reply: ClientReply { request_id: tag.request_id, result: ClientResult::OutcomeUnknown { ts, reason } },
    }
}
