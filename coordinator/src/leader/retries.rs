//! Exactly-once answers (docs/design.md §11, "Exactly-once answers"): a client that lost an
//! answer — its connection, or its leader, died — asks again with the same request id
//! ([`ClientRequest::retry`]), and is answered what became of the transaction; it runs only if
//! it never ran.
//!
//! The leader keeps no outcomes of its own. Every transaction that can have run is in a batch
//! the partition's executing replicas executed or will execute (a new leader adopts its
//! predecessor's batches, docs/design.md §11), and each replica remembers the outcomes of the
//! batches it keeps for a new leader (`node::replica`, `recall`). So a retry is answered by
//! *recalling* it from its home partition's executing replicas, once they executed every
//! batch sent so far (the last one, or the open one if the transaction could be in it):
//! - a replica that remembers it answers its outcome — the client's answer, given once every
//!   partition the transaction touches decided every batch sent so far (an answer in the
//!   ordinary way waits for the same: a passive primary remembers a batch before its backups
//!   hold its log records, and a multi-partition transaction's remote piece may still be in
//!   a batch under way);
//! - a replica that executed through that batch and remembers every transaction after the
//!   timestamp the client had seen when it first sent the request ([`ClientRequest::not_before`])
//!   proves it never ran: it is admitted now, as new;
//! - when every replica asked remembers only from a later timestamp, the outcome is
//!   forgotten: [`Rejection::OutcomeForgotten`], and it does not run again;
//! - when no replica asked could say (each failed, or could not get there), the retry is
//!   refused [`Rejection::NotReady`]: the client asks again later.
//!
//! Guarantees:
//! - a retry never admits a transaction that ran, or is in a batch sent or open: only a
//!   replica that executed every such batch can prove it absent;
//! - two sends of one id are never both admitted: a retry waiting for its recall takes every
//!   later send of the id (the last connection is answered), and a first send arriving after a
//!   retry of its id (on a connection the client gave up) is handled as a retry;
//! - every retry gets one answer, and what it holds is bounded: at most
//!   [`RETRIES_WAITING_MAX`] wait (past it: `NotReady`, ask later), and the ids retried lately
//!   are kept up to [`RETRIED_KEPT`].

use std::collections::{BTreeMap, VecDeque};

use foldhash::{HashMap, HashSet};
use wire::channel::CoordinatorToNode;
use wire::messages::{
    ClientReply, ClientRequest, ClientResult, NodeId, PartitionId, RecalledOutcome, Rejection, RequestId, Seq,
    Timestamp, TxnOutcome,
};

use super::{ClientId, Coordinator, Output};
use crate::router::Route;

/// Retries waiting for their recall, at most.
pub const RETRIES_WAITING_MAX: usize = 65_536;
/// Request ids retried lately that are remembered as such (a late first send of one is a
/// retry), at most.
pub const RETRIED_KEPT: usize = 65_536;

/// What retries have done, for the status and the run record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryStats {
    /// Retries received.
    pub retries: u64,
    /// Answered from an outcome a replica remembered.
    pub recalled: u64,
    /// Proven never to have run, and admitted.
    pub admitted: u64,
    /// Refused: the outcome is forgotten.
    pub forgotten: u64,
    /// Refused for now: no replica could say (ask again).
    pub undecided: u64,
}

/// The leader's retries in progress.
#[derive(Debug, Default)]
pub(super) struct Retries {
    /// Retried requests waiting for their recall, by id.
    waiting: HashMap<RequestId, Waiting>,
    /// Recalls sent, by number.
    recalls: HashMap<u64, Recall>,
    /// Retries of the current call not yet asked of their partition's replicas.
    unsent: BTreeMap<PartitionId, Vec<RequestId>>,
    /// Recalled answers waiting for their partitions' decisions.
    held: Vec<HeldAnswer>,
    /// Ids retried lately, oldest first, and as a set.
    retried: VecDeque<RequestId>,
    retried_set: HashSet<RequestId>,
    stats: RetryStats,
}

/// A retried request waiting to be answered.
#[derive(Debug)]
struct Waiting {
    /// The connection to answer (the last one it came on).
    client: ClientId,
    request: ClientRequest,
    /// The recall it waits for (0: not sent yet).
    recall: u64,
}

/// A replica's answer to a recall (`NodeToCoordinator::Recalled`).
#[derive(Debug)]
pub(super) struct RecallAnswer {
    pub recall: u64,
    pub executed_seq: Seq,
    pub remembered_after: Timestamp,
    pub found: Vec<RecalledOutcome>,
}

/// A recalled answer, given once each partition decided its batches through the one named.
#[derive(Debug)]
struct HeldAnswer {
    client: ClientId,
    request_id: u64,
    result: ClientResult,
    until: Vec<(PartitionId, Seq)>,
}

/// One recall: some retries' ids asked of a partition's executing replicas.
#[derive(Debug)]
struct Recall {
    partition: PartitionId,
    /// The batch the replicas must have executed for a "not found" to count.
    through: Seq,
    ids: Vec<RequestId>,
    /// Each replica asked, and its answer once it gave one that proved nothing:
    /// (`remembered_after`, whether it had executed through `through`).
    asked: BTreeMap<NodeId, Option<(Timestamp, bool)>>,
}

impl Retries {
    /// Whether `id` was retried lately.
    pub(super) fn was_retried(&self, id: RequestId) -> bool {
        !self.retried_set.is_empty() && self.retried_set.contains(&id)
    }

    pub(super) fn stats(&self) -> RetryStats {
        self.stats
    }

    /// The retry of `id` waiting for recall `recall`, taken out (one waiting for another
    /// recall stays).
    fn take_waiting(&mut self, id: RequestId, recall: u64) -> Option<Waiting> {
        match self.waiting.get(&id) {
            Some(w) if w.recall == recall => self.waiting.remove(&id),
            _ => None,
        }
    }

    fn remember(&mut self, id: RequestId) {
        if self.retried_set.insert(id) {
            self.retried.push_back(id);
            if self.retried.len() > RETRIED_KEPT {
                let old = self.retried.pop_front().expect("over the bound");
                self.retried_set.remove(&old);
            }
        }
    }
}

/// The answer a remembered outcome gives the client (`partition`: the one recalled from,
/// `not_before`: the request's).
fn answer_of(r: &RecalledOutcome, partition: PartitionId, not_before: Timestamp) -> ClientResult {
    match &r.outcome {
        Some(TxnOutcome::Committed(output)) => ClientResult::Committed { ts: r.ts, output: *output },
        Some(TxnOutcome::Aborted { reason }) => ClientResult::Aborted { ts: r.ts, reason: reason.clone() },
        Some(TxnOutcome::Failed { reason }) => ClientResult::Failed { ts: r.ts, reason: reason.clone() },
        // Only a home piece's or a whole transaction's outcome is recalled (never a remote
        // piece's): a replica that sends one anyway is answered as one that failed it.
        Some(TxnOutcome::PieceDone { .. }) => ClientResult::Failed {
            ts: r.ts,
            reason: "a replica recalled a remote piece's outcome for the transaction's answer".into(),
        },
        // It ran at `r.ts`, and its outcome died with every replica of its partition.
        None => ClientResult::Rejected(Rejection::OutcomeForgotten {
            id: r.id,
            partition,
            not_before,
            remembered_after: r.ts,
        }),
    }
}

/// The partition recall `recall` asked.
fn rc_partition(r: &Retries, recall: u64) -> PartitionId {
    r.recalls.get(&recall).map_or(0, |rc| rc.partition)
}

fn reply(client: ClientId, request_id: u64, result: ClientResult) -> Output {
    Output::Reply { client, reply: ClientReply { request_id, result } }
}

impl Coordinator {
    /// A retried request (module comment): joined to a retry of it already waiting, or its
    /// recall is readied for [`Coordinator::send_recalls`].
    pub(super) fn on_retry(&mut self, client: ClientId, request: ClientRequest, out: &mut Vec<Output>) {
        let id = request.id();
        let r = &mut self.retries;
        r.stats.retries += 1;
        if !id.is_some() {
            out.push(reply(client, request.request_id, ClientResult::Rejected(Rejection::RetryWithoutId)));
            return;
        }
        r.remember(id);
        if let Some(w) = r.waiting.get_mut(&id) {
            w.client = client;
            w.request.not_before = w.request.not_before.min(request.not_before);
            return;
        }
        let home = match self.router.route(&request.input) {
            Ok(Route { home, .. }) => home,
            // It could never have been admitted.
            Err(e) => return out.push(reply(client, request.request_id, ClientResult::Rejected(e.into()))),
        };
        let p = self.partitions.get(&home).expect("the router only names configured partitions");
        let refusal = p.refusal().or_else(|| {
            (self.retries.waiting.len() >= RETRIES_WAITING_MAX).then_some(Rejection::NotReady { partition: home })
        });
        if let Some(rejection) = refusal {
            self.retries.stats.undecided += 1;
            return out.push(reply(client, request.request_id, ClientResult::Rejected(rejection)));
        }
        let r = &mut self.retries;
        r.waiting.insert(id, Waiting { client, request, recall: 0 });
        r.unsent.entry(home).or_default().push(id);
    }

    /// Asks each partition's executing replicas about the retries readied since the last
    /// call, in recalls of at most [`wire::channel::control::RECALL_IDS_MAX`] ids. A recall is
    /// numbered with a timestamp of this leader's clock, which no other leader ever issues:
    /// a replica's answer to a deposed leader's recall, reaching this one, names no recall of
    /// this one's. (Numbered by a counter, such an answer — its ids another leader's, "not
    /// found" — matched a recall of the same number here, and proved this one's ids absent:
    /// a Payment ran twice, `glass sim --mode full-stack --shipping async --seed 2798`.)
    pub(super) fn send_recalls(&mut self, now_us: u64, out: &mut Vec<Output>) {
        if self.retries.unsent.is_empty() {
            return;
        }
        for (pid, ids) in std::mem::take(&mut self.retries.unsent) {
            let p = &self.partitions[&pid];
            // Every batch that may hold one of them: those sent, and the open one.
            let next = p.sequencer.next_seq();
            let through = if p.sequencer.open_txns() > 0 { next } else { next - 1 };
            let executors: Vec<NodeId> = p.agreement.live().to_vec();
            for chunk in ids.chunks(wire::channel::control::RECALL_IDS_MAX) {
                let recall = self.clock.next(now_us / 1_000).0;
                let r = &mut self.retries;
                for id in chunk {
                    r.waiting.get_mut(id).expect("readied retries wait").recall = recall;
                }
                let asked = executors.iter().map(|&n| (n, None)).collect();
                r.recalls.insert(recall, Recall { partition: pid, through, ids: chunk.to_vec(), asked });
                if executors.is_empty() {
                    self.decide_recall(recall, out);
                    continue;
                }
                let msg = CoordinatorToNode::RecallOutcomes { partition: pid, recall, through, ids: chunk.to_vec() };
                out.push(Output::ToNodes { nodes: executors.clone(), msg });
            }
        }
    }

    /// A replica's answer to a recall.
    pub(super) fn on_recalled(&mut self, from: NodeId, answer: RecallAnswer, now_us: u64, out: &mut Vec<Output>) {
        let RecallAnswer { recall, executed_seq, remembered_after, found } = answer;
        let Some(rc) = self.retries.recalls.get_mut(&recall) else { return };
        let Some(slot) = rc.asked.get_mut(&from) else { return };
        let reached = executed_seq >= rc.through;
        *slot = Some((remembered_after, reached));
        let ids = rc.ids.clone();
        let mut admit = Vec::new();
        for f in &found {
            let Some(w) = self.retries.take_waiting(f.id, recall) else { continue };
            self.retries.stats.recalled += 1;
            let touched = match self.router.route(&w.request.input) {
                Ok(Route { home, remotes }) => std::iter::once(home).chain(remotes).collect(),
                Err(_) => vec![rc_partition(&self.retries, recall)],
            };
            let until = touched.into_iter().map(|q| (q, self.partitions[&q].agreement.next_seq() - 1)).collect();
            let result = answer_of(f, rc_partition(&self.retries, recall), w.request.not_before);
            if f.outcome.is_none() {
                self.retries.stats.recalled -= 1;
                self.retries.stats.forgotten += 1;
            }
            let held = HeldAnswer { client: w.client, request_id: w.request.request_id, result, until };
            self.retries.held.push(held);
        }
        self.release_answers(out);
        if reached {
            for id in &ids {
                let r = &mut self.retries;
                let never_ran =
                    r.waiting.get(id).is_some_and(|w| w.recall == recall && remembered_after <= w.request.not_before);
                if never_ran {
                    let w = r.waiting.remove(id).expect("just seen");
                    r.stats.admitted += 1;
                    admit.push(w);
                }
            }
        }
        for w in admit {
            out.extend(self.admit_request(w.client, w.request, now_us));
        }
        self.decide_recall(recall, out);
    }

    /// Gives the recalled answers whose partitions decided their batches (module comment);
    /// one whose partition stopped serving meanwhile is refused for now (ask again).
    pub(super) fn release_answers(&mut self, out: &mut Vec<Output>) {
        if self.retries.held.is_empty() {
            return;
        }
        let partitions = &self.partitions;
        let (ready, held): (Vec<HeldAnswer>, Vec<HeldAnswer>) =
            std::mem::take(&mut self.retries.held).into_iter().partition(|h| {
                h.until.iter().all(|(q, seq)| {
                    let p = &partitions[q];
                    p.phase != super::Phase::Serving || p.agreement.decided_through() >= *seq
                })
            });
        self.retries.held = held;
        for h in ready {
            let stopped = h.until.iter().find(|(q, _)| partitions[q].phase != super::Phase::Serving);
            let result = match stopped {
                Some(&(partition, _)) => {
                    self.retries.stats.undecided += 1;
                    ClientResult::Rejected(Rejection::NotReady { partition })
                }
                None => h.result,
            };
            out.push(reply(h.client, h.request_id, result));
        }
    }

    /// Node `node` failed: it answers no recall.
    pub(super) fn recalls_lose(&mut self, node: NodeId, out: &mut Vec<Output>) {
        let open: Vec<u64> = self
            .retries
            .recalls
            .iter_mut()
            .filter_map(|(&n, rc)| match rc.asked.get_mut(&node) {
                Some(slot @ None) => {
                    *slot = Some((Timestamp(u64::MAX), false));
                    Some(n)
                }
                _ => None,
            })
            .collect();
        for recall in open {
            self.decide_recall(recall, out);
        }
    }

    /// Ends recall `recall` once every replica asked answered (or failed): the retries still
    /// waiting for it are forgotten, or undecided (module comment).
    fn decide_recall(&mut self, recall: u64, out: &mut Vec<Output>) {
        let r = &mut self.retries;
        let Some(rc) = r.recalls.get(&recall) else { return };
        let waiting = rc.ids.iter().any(|id| r.waiting.get(id).is_some_and(|w| w.recall == recall));
        if waiting && rc.asked.values().any(Option::is_none) {
            return;
        }
        let rc = r.recalls.remove(&recall).expect("just seen");
        let answers: Vec<(Timestamp, bool)> = rc.asked.values().flatten().copied().collect();
        for id in &rc.ids {
            let Some(w) = r.take_waiting(*id, recall) else { continue };
            // The earliest a replica that got there remembers from.
            let remembered = answers.iter().filter(|(_, reached)| *reached).map(|(after, _)| *after).min();
            let result = match remembered {
                Some(remembered_after) if remembered_after > w.request.not_before => {
                    r.stats.forgotten += 1;
                    ClientResult::Rejected(Rejection::OutcomeForgotten {
                        id: *id,
                        partition: rc.partition,
                        not_before: w.request.not_before,
                        remembered_after,
                    })
                }
                _ => {
                    r.stats.undecided += 1;
                    ClientResult::Rejected(Rejection::NotReady { partition: rc.partition })
                }
            };
            out.push(reply(w.client, w.request.request_id, result));
        }
    }
}
