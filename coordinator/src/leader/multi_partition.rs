//! Multi-partition transactions (`engine::distributed`, Calvin style; docs/cluster.md,
//! "Multi-partition transactions"): admitted on every partition they touch or on none, their
//! remote pieces' outcomes carried to the home partition, and one answer joined from every
//! partition's.
//!
//! Guarantees: a transaction spanning partitions gets one timestamp and is admitted on every
//! partition it touches or on none (a refusal or `Busy` of one refuses it whole); its home
//! piece and remote pieces ride in each partition's batches; remote pieces' outcomes
//! ([`NodeToCoordinator::PieceReads`](wire::channel::NodeToCoordinator::PieceReads)) are
//! forwarded to the home partition's executing replicas and kept until every replica that
//! may still run the home piece ran it (a promoted backup or a rejoining replica gets them
//! again); the client is answered once *every* partition decided its piece — committed only
//! if all did, "outcome unknown" if a partition's answer was lost — so a commit is
//! acknowledged only when it is as durable on every partition as a single-partition one is
//! on its own. A partition lost for good (no live replica) aborts the home pieces still
//! waiting for it.

use wire::channel::CoordinatorToNode;
use wire::messages::{
    ClientReply, ClientResult, NodeId, Part, PartitionId, PieceOutcome, PieceReads, Rejection, Seq, Timestamp,
};

use super::{ClientRef, Coordinator, Event, HeldReads, MultiTxn, Output, Partition, Phase};
use crate::router::Route;

impl Coordinator {
    /// A multi-partition transaction: one timestamp, its home piece admitted on `route.home`
    /// and a remote piece on each other partition — on all of them or on none.
    pub(super) fn admit_multi(
        &mut self,
        tag: ClientRef,
        input: engine::procedures::TxnInput,
        id: wire::messages::RequestId,
        route: Route,
        now_us: u64,
    ) -> Vec<Output> {
        let reply =
            |result| Output::Reply { client: tag.client, reply: ClientReply { request_id: tag.request_id, result } };
        if self.multi.contains_key(&tag) {
            let problem = format!("request id {} is already in flight", tag.request_id);
            return vec![reply(ClientResult::Rejected(Rejection::InvalidInput { problem }))];
        }
        let Ok(remotes) = u8::try_from(route.remotes.len()) else {
            let problem = "a transaction touching more than 255 partitions".to_string();
            return vec![reply(ClientResult::Rejected(Rejection::InvalidInput { problem }))];
        };
        for pid in std::iter::once(route.home).chain(route.remotes.iter().copied()) {
            let p = self.partitions.get_mut(&pid).expect("the router only names configured partitions");
            if let Some(rejection) = p.refusal() {
                return vec![reply(ClientResult::Rejected(rejection))];
            }
            if !p.sequencer.has_room() || !p.catch_up.allows(now_us) {
                return vec![reply(ClientResult::Busy { partition: pid })];
            }
        }
        let ts = self.clock.next(now_us / 1_000);
        self.last_ts = Some(ts);
        let mut out = Vec::new();
        let remote_seqs: Vec<(PartitionId, Seq)> =
            route.remotes.iter().map(|q| (*q, self.partitions[q].sequencer.next_seq())).collect();
        let parts = std::iter::once((route.home, Part::Home { remotes }))
            .chain(route.remotes.iter().map(|&r| (r, Part::Remote { home: route.home })));
        for (pid, part) in parts {
            let p = self.partitions.get_mut(&pid).expect("the router only names configured partitions");
            if let Part::Home { .. } = part {
                let seq = p.sequencer.next_seq();
                let remotes = remote_seqs.clone();
                p.piece_reads.insert(ts, HeldReads { seq, tag, input, remotes, outcomes: Vec::new() });
            }
            let closed = p.sequencer.admit_part(ts, input, part, id, now_us).expect("room checked above");
            p.catch_up.admitted(now_us);
            p.open_tags.push(tag);
            if let Some(batch) = closed {
                p.send(batch, &mut out);
            }
        }
        let answers = Vec::with_capacity(1 + route.remotes.len());
        let m = MultiTxn { ts, home: route.home, remotes: route.remotes, answers, lost: Vec::new() };
        self.multi.insert(tag, m);
        out
    }

    /// A remote piece's outcome: kept at the home partition and forwarded to its executing
    /// replicas, once (a duplicate — active-active replicas all send theirs, a promoted
    /// primary sends again — or one for a transaction answered already is dropped).
    /// Returns whether it was new.
    pub(super) fn deliver_reads(&mut self, reads: PieceReads, out: &mut Vec<Output>) -> bool {
        let Some(p) = self.partitions.get_mut(&reads.home) else { return false };
        let Some(held) = p.piece_reads.get_mut(&reads.ts) else { return false };
        if held.has(reads.from) {
            return false;
        }
        held.outcomes.push((reads.from, reads.outcome.clone()));
        let nodes = p.executors();
        if !nodes.is_empty() {
            out.push(Output::ToNodes { nodes, msg: CoordinatorToNode::PieceReads(reads) });
        }
        true
    }

    /// Joins multi-partition transactions' answers: each partition's answer for its piece
    /// (a reply in `out`, or a remote piece decided) is taken aside until every partition
    /// answered, then the client gets one answer ([`combine`]). A partition lost for good
    /// aborts the home pieces still waiting for its piece.
    pub(super) fn settle(&mut self, mut out: Vec<Output>) -> Vec<Output> {
        self.answer_deferred_rejoins(&mut out);
        self.release_answers(&mut out);
        if self.multi.is_empty() {
            for p in self.partitions.values_mut() {
                p.pieces_done.clear();
            }
            return out;
        }
        let mut kept = Vec::with_capacity(out.len());
        let mut lost = Vec::new();
        let mut node_down = false;
        let mut answers: Vec<(ClientRef, Option<ClientResult>)> = Vec::new();
        for o in out {
            match o {
                Output::Reply { client, reply }
                    if self.multi.contains_key(&ClientRef { client, request_id: reply.request_id }) =>
                {
                    answers.push((ClientRef { client, request_id: reply.request_id }, Some(reply.result)));
                }
                Output::Event(e) => {
                    match &e {
                        // A full-stack partition that may come back from its log is in doubt,
                        // not lost: its pieces took effect or will on replay (docs/design.md
                        // §10), so the home pieces waiting for them wait, as two-phase commit's
                        // participants wait for an in-doubt one.
                        Event::PartitionUnavailable { partition }
                            if self.partitions.get(partition).is_some_and(Partition::may_resume) => {}
                        Event::PartitionUnavailable { partition } | Event::PartitionStopped { partition, .. } => {
                            lost.push(*partition)
                        }
                        Event::Diverged(d) => lost.push(d.partition),
                        Event::NodeDown { .. } => node_down = true,
                        _ => {}
                    }
                    kept.push(Output::Event(e));
                }
                other => kept.push(other),
            }
        }
        for p in self.partitions.values_mut() {
            answers.extend(p.pieces_done.drain(..).map(|(tag, _)| (tag, None)));
        }
        for (tag, answer) in answers {
            let Some(m) = self.multi.get_mut(&tag) else { continue };
            m.answers.push(answer);
            if m.answers.len() == 1 + m.remotes.len() {
                let m = self.multi.remove(&tag).expect("looked up above");
                let result = combine(m);
                kept.push(Output::Reply {
                    client: tag.client,
                    reply: ClientReply { request_id: tag.request_id, result },
                });
            }
        }
        if node_down {
            self.rederive_lost_pieces(&mut kept);
        }
        for q in lost {
            // Every home piece still waiting for `q`'s piece, answered or not (a rejoining
            // replica may still run one whose client was answered).
            let waiting: Vec<(ClientRef, PartitionId, Timestamp)> = self
                .partitions
                .values()
                .flat_map(|p| {
                    p.piece_reads
                        .iter()
                        .filter(|(_, h)| h.remotes.iter().any(|(r, _)| *r == q) && !h.has(q))
                        .map(|(&ts, h)| (h.tag, p.id, ts))
                })
                .collect();
            for (tag, home, ts) in waiting {
                let reason = format!("partition {q} was lost before its piece reported");
                let reads = PieceReads { home, from: q, ts, outcome: PieceOutcome::Aborted { reason } };
                if self.deliver_reads(reads, &mut kept) {
                    if let Some(m) = self.multi.get_mut(&tag).filter(|m| m.ts == ts) {
                        m.lost.push(q);
                    }
                }
            }
        }
        kept
    }

    /// After a node failed: remote pieces whose batch is decided (their replicas answered, or
    /// all failed) but whose outcome never reached the home partition — it died in flight
    /// with the replicas that ran it — are derived again by the partition's live replicas
    /// whose state includes the batch ([`CoordinatorToNode::RederivePiece`]; a replica that will run
    /// the batch itself ignores it).
    pub(super) fn rederive_lost_pieces(&self, out: &mut Vec<Output>) {
        for home in self.partitions.values() {
            for (&ts, held) in &home.piece_reads {
                for &(q, seq) in held.remotes.iter().filter(|(q, _)| !held.has(*q)) {
                    let p = &self.partitions[&q];
                    if p.phase != Phase::Serving || p.agreement.decided_through() < seq {
                        continue;
                    }
                    let nodes = p.executors();
                    if !nodes.is_empty() {
                        let msg = CoordinatorToNode::RederivePiece {
                            partition: q,
                            home: home.id,
                            seq,
                            ts,
                            input: held.input,
                        };
                        out.push(Output::ToNodes { nodes, msg });
                    }
                }
            }
        }
    }
}

impl Partition {
    /// The replicas that run this partition's home pieces: the executing ones, and in
    /// active-active the rejoining ones (they execute what they hold once their copy is in).
    pub(super) fn executors(&self) -> Vec<NodeId> {
        self.agreement.live().iter().copied().chain(self.batch_joiners()).collect()
    }

    /// Sends every remote piece's outcome kept here to `node` (it starts executing: a
    /// promoted backup, a rejoining replica, a recovered one).
    pub(super) fn resend_reads(&self, node: NodeId, out: &mut Vec<Output>) {
        for (&ts, held) in &self.piece_reads {
            for (from, outcome) in &held.outcomes {
                let reads = PieceReads { home: self.id, from: *from, ts, outcome: outcome.clone() };
                out.push(Output::ToNodes { nodes: vec![node], msg: CoordinatorToNode::PieceReads(reads) });
            }
        }
    }

    /// Forgets the remote pieces' outcomes no replica can need any more: those of batches
    /// decided, and executed (or copied) by every replica still catching up.
    pub(super) fn prune_reads(&mut self) {
        // The reads of lost batches' home pieces wait for their replay.
        let lost = self.passive().and_then(|s| s.lost.front()).map(|b| b.seq.saturating_sub(1));
        let decided = self.agreement.decided_through().min(lost.unwrap_or(Seq::MAX));
        let floor = match self.catching_up_mut() {
            Some(catching_up) => {
                catching_up.retain(|_, (done, until)| done < until);
                catching_up.values().map(|(done, _)| *done).min().unwrap_or(decided).min(decided)
            }
            None => decided,
        };
        while self.piece_reads.first_key_value().is_some_and(|(_, h)| h.seq <= floor) {
            self.piece_reads.pop_first();
        }
    }
}

/// One answer for a multi-partition transaction from its partitions' answers (`None`: a
/// remote piece committed): committed when the home piece committed and every remote piece
/// did; aborted when every partition rolled back; refused when every partition refused it
/// before running it; failed, naming the partitions, when some committed and others did not
/// (a piece failing on a row TPC-C guarantees — a corrupt database); otherwise "outcome
/// unknown" (a partition's answer, or its piece's outcome, was lost with its replicas).
fn combine(m: MultiTxn) -> ClientResult {
    let ts = m.ts;
    let n = m.answers.len();
    let pieces = m.answers.iter().filter(|a| a.is_none()).count();
    let mut home = None;
    let (mut aborted, mut failed, mut rejected, mut unknown) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for a in m.answers.into_iter().flatten() {
        match a {
            ClientResult::Committed { .. } => home = Some(a),
            ClientResult::Aborted { reason, .. } => aborted.push(reason),
            ClientResult::Failed { reason, .. } => failed.push(reason),
            ClientResult::Rejected(r) => rejected.push(r),
            ClientResult::Busy { partition } => rejected.push(Rejection::NotReady { partition }),
            ClientResult::OutcomeUnknown { reason, .. } => unknown.push(reason),
        }
    }
    if let Some(home) = home.filter(|_| pieces == n - 1) {
        return home;
    }
    if aborted.len() == n {
        // The home piece's reason names the partition whose piece rolled back; a
        // partition's own rollback (an unused item) reads the same everywhere.
        aborted.sort_by_key(|r| r.starts_with("partition "));
        return ClientResult::Aborted { ts, reason: aborted.swap_remove(0) };
    }
    if rejected.len() == n {
        return ClientResult::Rejected(rejected.swap_remove(0));
    }
    let parts = format!("home partition {} and partitions {:?}", m.home, m.remotes);
    if !m.lost.is_empty() {
        // A remote piece may have committed on replicas that are all gone: with no replica
        // left, its partition's state (in full-stack, its log) alone knows.
        let reason = format!(
            "multi-partition transaction ({parts}): partitions {:?} were lost with their replicas before their \
             piece's outcome reached the home partition, which rolled back",
            m.lost
        );
        return ClientResult::OutcomeUnknown { ts, reason: wire::messages::bounded_reason(reason) };
    }
    if unknown.is_empty() && rejected.is_empty() {
        let why = failed.first().or(aborted.first()).cloned().unwrap_or_default();
        let reason = format!("multi-partition transaction ({parts}) committed on some partitions only: {why}");
        return ClientResult::Failed { ts, reason: wire::messages::bounded_reason(reason) };
    }
    let why = unknown.first().cloned().unwrap_or_else(|| format!("{:?}", rejected.first()));
    let reason = format!("multi-partition transaction ({parts}): {why}");
    ClientResult::OutcomeUnknown { ts, reason: wire::messages::bounded_reason(reason) }
}
