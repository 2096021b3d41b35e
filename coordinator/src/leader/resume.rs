//! A new leader's coordinator (docs/design.md §11, take-over steps 2–4), built from the
//! committed membership and what the replicas reported — no data log: the batches the old
//! leader sequenced that some replica holds are *adopted* (sent again as this leader's own,
//! with the same numbers and contents, answering no client), every multi-partition
//! transaction among them is re-driven, and timestamps resume above every one reported.
//!
//! Guarantees: the numbering of every partition continues after the furthest replica's; a
//! replica that already executed an adopted batch answers it again from what it kept, one
//! that held it executes it once, one that lacked it executes it — so the agreement compares
//! every executor's results for it as for any batch; a home piece among the adopted batches
//! gets each remote outcome from a replica that reported it, or derived again by a remote
//! replica whose state includes the piece, or — when no replica of the remote partition ever
//! received the piece, so it took effect nowhere — an abort.

use std::collections::{BTreeMap, BTreeSet};

use wire::channel::CoordinatorToNode;
use wire::config::{ClusterConfig, Mode};
use wire::messages::{
    Batch, CoordinatorId, Epoch, NodeId, Part, PartitionId, PieceReads, ReplicaStanding, ReplicationRole, Seq,
    Timestamp,
};

use super::{ClientRef, Coordinator, Detection, HeldReads, Output, Phase, NOBODY};
use crate::agreement::Agreement;
use crate::error::CoordinatorError;
use crate::group::{PartitionView, ViewState};
use crate::timestamp::TimestampClock;

/// What a new leader learned of one partition.
#[derive(Debug, Clone)]
pub struct PartitionResume {
    /// Its committed membership.
    pub view: PartitionView,
    /// The standing of each replica of the view that answered.
    pub standings: BTreeMap<NodeId, ReplicaStanding>,
    /// Every batch through this one was executed by every replica that counts when the
    /// take-over began: the adopted batches follow it.
    pub adopted_after: Seq,
    /// The batches after `adopted_after` through the furthest executor's `held_seq`, in order
    /// without gaps (fetched from the executors).
    pub adopted: Vec<Batch>,
    /// Every batch the executors sent (their recent ones included, executed by all): where a
    /// multi-partition transaction's pieces are.
    pub known: Vec<Batch>,
    /// Remote pieces' outcomes the executors reported for home pieces of adopted batches.
    pub reads: Vec<PieceReads>,
}

impl PartitionResume {
    /// The lowest batch executed by every replica that answered.
    pub fn executed_by_all(&self) -> Seq {
        self.standings.values().map(|s| s.executed_seq).min().unwrap_or(0)
    }

    /// Where this leader's numbering of a serving partition takes over: the last batch that
    /// counts as run everywhere it matters, and the adopted batches after it. A passive
    /// partition whose primary is not live is served next by its furthest backup (promoted):
    /// what that backup applied took effect, so adopted batches through it are not sent again
    /// and batches this leader sequences follow it — a piece re-created at a lower number
    /// would be answered "outcome unknown" by the promotion and never run. (Found by `glass
    /// sim --mode active-passive --coordinator-faults --seed 290`: the primary's batches came
    /// too late, and the half of a Payment they held was lost.)
    pub fn resumed_from(&self, mode: Mode, live_nodes: &BTreeSet<NodeId>) -> (Seq, &[Batch]) {
        let primary_live = self.view.replicas.first().is_some_and(|p| live_nodes.contains(p));
        if mode.every_replica_executes() || primary_live {
            return (self.adopted_after, &self.adopted);
        }
        let applied = self.standings.values().map(|s| s.executed_seq).max().unwrap_or(0);
        if applied <= self.adopted_after {
            return (self.adopted_after, &self.adopted);
        }
        let skip = usize::try_from(applied - self.adopted_after).unwrap_or(usize::MAX).min(self.adopted.len());
        (applied, &self.adopted[skip..])
    }

    /// A serving passive partition whose membership names as its primary a live backup that
    /// never became one: the previous leader decided the promotion (its view puts the backup
    /// first) and died before its `Promote` reached the backup. The new leader promotes again.
    pub fn unpromoted_primary(&self, mode: Mode, live_nodes: &BTreeSet<NodeId>) -> Option<NodeId> {
        let first = *self.view.replicas.first()?;
        let backup = self.standings.get(&first).is_some_and(|s| s.role == ReplicationRole::Backup);
        (!mode.every_replica_executes()
            && self.view.state == ViewState::Serving
            && live_nodes.contains(&first)
            && backup)
            .then_some(first)
    }

    /// The latest timestamp any replica that answered saw.
    fn last_ts(&self) -> Option<Timestamp> {
        self.standings.values().filter_map(|s| s.last_ts).max()
    }
}

/// Everything a new leader learned, for [`Coordinator::resume`].
#[derive(Debug, Clone)]
pub struct Resumed {
    pub epoch: Epoch,
    pub partitions: BTreeMap<PartitionId, PartitionResume>,
    /// The nodes the new leader counts live; every other node counts as failed.
    pub live_nodes: BTreeSet<NodeId>,
    /// The nodes that answered the take-over (the live ones, and those too far behind or too
    /// slow to count, which are told to rejoin).
    pub reachable: BTreeSet<NodeId>,
}

fn nobody(ts: Timestamp) -> ClientRef {
    ClientRef { client: NOBODY, request_id: ts.0 }
}

impl Coordinator {
    /// The coordinator of leader `me` of epoch `resumed.epoch`, taking over: returns it with
    /// what it sends first — the adopted batches, the re-driven multi-partition pieces, the
    /// membership of each partition under the new epoch, and what the failure of every node
    /// that did not answer brings (a promotion, a partition unavailable).
    pub fn resume(
        config: &ClusterConfig,
        me: CoordinatorId,
        resumed: Resumed,
        now_us: u64,
    ) -> Result<(Coordinator, Vec<Output>), CoordinatorError> {
        let mut c = Coordinator::new_as(config, me, now_us)?;
        let epoch = resumed.epoch;
        // Membership epochs order a partition's memberships at its nodes: this leader's come
        // after any earlier leader's.
        c.membership_epoch = epoch << 32;
        for (id, n) in c.nodes.iter_mut() {
            n.live = resumed.live_nodes.contains(id);
            n.last_heard_us = now_us;
        }
        let last_ts = resumed
            .partitions
            .values()
            .flat_map(|r| r.last_ts().into_iter().chain(r.adopted.iter().flat_map(|b| b.txns.iter().map(|t| t.ts))))
            .max();
        if let Some(last) = last_ts {
            c.clock = TimestampClock::resume_after(me, last);
            c.last_ts = Some(last);
        }
        let recreated = c.recreate_pieces(&resumed);
        let mut out = Vec::new();
        for (pid, r) in &resumed.partitions {
            let Some(p) = c.partitions.get_mut(pid) else { continue };
            let mode = p.mode;
            let executors: Vec<NodeId> = match mode.every_replica_executes() {
                true => r.view.replicas.clone(),
                false => r.view.replicas.first().copied().into_iter().collect(),
            };
            // A promotion decided and never delivered is made again (the backup it names
            // stays a candidate, with every other backup; the furthest is asked).
            let unpromoted = r.unpromoted_primary(mode, &resumed.live_nodes);
            let backups: Vec<NodeId> = match (mode.every_replica_executes(), unpromoted) {
                (false, Some(_)) => r.view.replicas.clone(),
                (false, None) => r.view.replicas.iter().skip(1).copied().collect(),
                (true, _) => Vec::new(),
            };
            match &r.view.state {
                ViewState::Stopped { reason } => {
                    p.agreement = Agreement::new(*pid, []);
                    p.agreement.stop();
                    p.phase = Phase::Stopped { reason: reason.clone() };
                }
                ViewState::Unavailable { last_primary } => {
                    p.agreement = Agreement::new(*pid, []);
                    p.phase = Phase::Unavailable;
                    if let Some(s) = p.passive_mut() {
                        s.backups.clear();
                        s.last_primary = *last_primary;
                    }
                }
                ViewState::Loading => {
                    p.agreement =
                        Agreement::new(*pid, executors.iter().copied()).with_quorum(p.quorum, p.lag_batches_max);
                    if let Some(s) = p.passive_mut() {
                        s.backups = backups;
                    }
                }
                ViewState::Serving => {
                    let (lo, adopted) = r.resumed_from(mode, &resumed.live_nodes);
                    let sent: Vec<&Batch> = adopted.iter().chain(recreated.get(pid)).collect();
                    let hi = lo + sent.len() as Seq;
                    p.agreement = Agreement::starting_at(*pid, executors.iter().copied(), lo + 1)
                        .with_quorum(p.quorum, p.lag_batches_max);
                    let txns: usize = sent.iter().map(|b| b.txns.len()).sum();
                    p.sequencer.adopt(hi + 1, txns);
                    for &b in &sent {
                        assert_eq!(b.seq, p.agreement.next_seq(), "adopted batches follow each other");
                        let tags = b.txns.iter().map(|t| (t.ts, nobody(t.ts))).collect();
                        // Who answers it: a replica that will execute it, or one that executed
                        // it and still keeps its results (it answers again).
                        // (A passive partition's primary keeps every batch adopted from it; a
                        // silent one is replaced by a promotion, which replays them.)
                        let expected: Vec<NodeId> = match mode.every_replica_executes() {
                            false => executors.clone(),
                            true => r
                                .standings
                                .iter()
                                .filter(|(n, s)| {
                                    executors.contains(n)
                                        && resumed.live_nodes.contains(n)
                                        && (s.executed_seq < b.seq || s.kept_from <= b.seq)
                                })
                                .map(|(n, _)| *n)
                                .collect(),
                        };
                        p.agreement.sent_expecting(b.seq, tags, b.digest_after, b.answerer, &expected);
                        if let Some(s) = p.passive_mut() {
                            s.unanswered.push_back(b.clone());
                        }
                        // (An unpromoted backup gets them from the promotion, which replays
                        // what it did not apply.)
                        let nodes: Vec<NodeId> = executors
                            .iter()
                            .copied()
                            .filter(|n| resumed.live_nodes.contains(n) && unpromoted.is_none())
                            .collect();
                        if !nodes.is_empty() {
                            out.push(Output::ToNodes { nodes, msg: CoordinatorToNode::Batch(b.clone()) });
                        }
                    }
                    for v in p.agreement.decide_unanswerable() {
                        p.apply(v, &mut out);
                    }
                    if let Some(s) = p.passive_mut() {
                        s.backups = backups.clone();
                        for b in &backups {
                            if let Some(st) = r.standings.get(b) {
                                s.backup_applied.insert(*b, st.executed_seq);
                            }
                        }
                    }
                    p.phase = Phase::Serving;
                    if unpromoted.is_some() {
                        p.promote_next(&mut out);
                    }
                }
            }
        }
        c.redrive_pieces(&resumed, &recreated, &mut out);
        // The new epoch's membership, so that the primaries' ship gates take it (an older
        // leader's epochs are below this leader's).
        let views = c.views();
        for v in views.iter().filter(|v| matches!(v.state, ViewState::Serving | ViewState::Loading)) {
            // To every node that answered and holds a replica: one left out of the view (it
            // was counted failed) learns it is, and rejoins.
            let placed = c.placement.get(&v.partition).into_iter().flatten();
            let nodes: Vec<NodeId> = placed
                .chain(v.replicas.iter())
                .copied()
                .filter(|n| resumed.reachable.contains(n))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            if nodes.is_empty() {
                continue;
            }
            c.membership_epoch += 1;
            let live = v.replicas.clone();
            let msg = CoordinatorToNode::Membership { partition: v.partition, epoch: c.membership_epoch, live };
            out.push(Output::ToNodes { nodes, msg });
        }
        // The nodes that did not answer failed, as far as this leader knows.
        let silent: Vec<NodeId> = resumed
            .partitions
            .values()
            .flat_map(|r| r.view.replicas.iter().copied())
            .filter(|n| !resumed.live_nodes.contains(n))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut downs = Vec::new();
        for &n in &silent {
            if let Some(l) = c.nodes.get_mut(&n) {
                l.live = true;
            }
            c.node_down(n, 0, Detection::TakeOverSilence, &mut downs);
        }
        // One failure after another, a partition's membership may name a node whose own
        // failure comes next: never sent — a backup would take it for its primary's
        // confirmation and apply that primary's shipments past where it stood. (Found by
        // `glass sim --mode active-passive --shipping async --coordinator-faults --seed 566`.)
        downs.retain(|o| {
            !matches!(o, Output::ToNodes { msg: CoordinatorToNode::Membership { live, .. }, .. }
                if live.iter().any(|n| silent.contains(n)))
        });
        out.extend(downs);
        let out = c.settle(out);
        Ok((c, out))
    }

    /// The pieces of multi-partition transactions that some partition received and another
    /// never did (its batch was lost with the old leader), sequenced again where they are
    /// missing, in a batch after that partition's adopted ones (docs/design.md §11, take-over
    /// step 3). Timestamps grow with batch numbers, so a partition whose replicas saw nothing
    /// at or after a transaction's timestamp never received its piece — and that piece may
    /// still run there, in timestamp order, before anything this leader sequences.
    fn recreate_pieces(&self, resumed: &Resumed) -> BTreeMap<PartitionId, Batch> {
        let serving = |x: &PartitionId| resumed.partitions.get(x).is_some_and(|r| r.view.state == ViewState::Serving);
        let present: BTreeSet<(PartitionId, Timestamp)> = resumed
            .partitions
            .iter()
            .flat_map(|(q, r)| r.known.iter().flat_map(move |b| b.txns.iter().map(move |t| (*q, t.ts))))
            .collect();
        let mut missing: BTreeMap<PartitionId, BTreeMap<Timestamp, wire::messages::BatchTxn>> = BTreeMap::new();
        for (q, r) in resumed.partitions.iter().filter(|(q, _)| serving(q)) {
            for t in r.known.iter().flat_map(|b| b.txns.iter()).filter(|t| t.part != Part::Whole) {
                let Ok(route) = self.router.route(&t.input) else { continue };
                let Ok(remotes) = u8::try_from(route.remotes.len()) else { continue };
                let home = route.home;
                for x in std::iter::once(home).chain(route.remotes.iter().copied()) {
                    if x == *q || present.contains(&(x, t.ts)) || !serving(&x) {
                        continue;
                    }
                    let received = resumed.partitions[&x].last_ts();
                    if received.is_some_and(|l| t.ts <= l) {
                        continue; // executed before the batches its replicas keep
                    }
                    let part = if x == home { Part::Home { remotes } } else { Part::Remote { home } };
                    missing
                        .entry(x)
                        .or_default()
                        .insert(t.ts, wire::messages::BatchTxn { ts: t.ts, input: t.input, part, id: t.id });
                }
            }
        }
        missing
            .into_iter()
            .map(|(x, txns)| {
                let r = &resumed.partitions[&x];
                let (lo, adopted) = r.resumed_from(self.mode, &resumed.live_nodes);
                let seq = lo + adopted.len() as Seq + 1;
                (
                    x,
                    Batch {
                        partition: x,
                        seq,
                        txns: txns.into_values().collect(),
                        digest_after: false,
                        answerer: None,
                    },
                )
            })
            .collect()
    }

    /// Re-drives the multi-partition transactions whose home pieces are among the adopted or
    /// re-created batches (docs/design.md §11, take-over step 3): each remote outcome comes
    /// from what a replica reported (never derived again when one exists: every replica must
    /// run a home piece with the same outcome), or derived again by a remote replica whose
    /// state includes the piece, or — the piece not run yet anywhere — when it runs.
    fn redrive_pieces(&mut self, resumed: &Resumed, recreated: &BTreeMap<PartitionId, Batch>, out: &mut Vec<Output>) {
        // Where each partition's pieces are: their batch, by timestamp.
        let mut at: BTreeMap<(PartitionId, Timestamp), Seq> = BTreeMap::new();
        for (q, r) in &resumed.partitions {
            for b in r.known.iter().chain(recreated.get(q)) {
                for t in &b.txns {
                    at.insert((*q, t.ts), b.seq);
                }
            }
        }
        for (home, r) in &resumed.partitions {
            // A partition being promoted runs its adopted and re-created batches too, once its
            // backup is promoted (`on_promoted` sends them, with the outcomes kept here): its
            // home pieces need their remote outcomes as a serving one's do.
            if !matches!(self.partitions[home].phase, Phase::Serving | Phase::Promoting { .. }) {
                continue;
            }
            let home_executors = self.partitions[home].executors();
            for b in r.adopted.iter().chain(recreated.get(home)) {
                for t in b.txns.iter().filter(|t| matches!(t.part, Part::Home { .. })) {
                    let Ok(route) = self.router.route(&t.input) else { continue };
                    let mut held = HeldReads {
                        seq: b.seq,
                        tag: nobody(t.ts),
                        input: t.input,
                        remotes: Vec::new(),
                        outcomes: Vec::new(),
                    };
                    for q in route.remotes {
                        let Some(rq) = resumed.partitions.get(&q) else { continue };
                        // The piece's batch at `q`, or — executed before the batches its
                        // replicas keep — the batch every replica of `q` executed.
                        let seq = at.get(&(q, t.ts)).copied().unwrap_or_else(|| rq.executed_by_all());
                        held.remotes.push((q, seq));
                        let reported = r.reads.iter().find(|x| x.ts == t.ts && x.from == q && x.home == *home);
                        if let Some(x) = reported {
                            held.outcomes.push((q, x.outcome.clone()));
                            if !home_executors.is_empty() {
                                out.push(Output::ToNodes {
                                    nodes: home_executors.clone(),
                                    msg: CoordinatorToNode::PieceReads(x.clone()),
                                });
                            }
                            continue;
                        }
                        // A replica of `q` whose state includes the piece derives its reads
                        // again; one that has yet to run it sends them then.
                        let nodes = self.partitions.get(&q).map(|p| p.executors()).unwrap_or_default();
                        if seq > 0 && !nodes.is_empty() {
                            let msg = CoordinatorToNode::RederivePiece {
                                partition: q,
                                home: *home,
                                seq,
                                ts: t.ts,
                                input: t.input,
                            };
                            out.push(Output::ToNodes { nodes, msg });
                        }
                    }
                    let p = self.partitions.get_mut(home).expect("a configured partition");
                    p.piece_reads.insert(t.ts, held);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standing(role: ReplicationRole, executed: Seq) -> ReplicaStanding {
        ReplicaStanding {
            role,
            executed_seq: executed,
            held_seq: executed,
            kept_from: executed + 1,
            last_ts: None,
            stopped: false,
            held_reads: Vec::new(),
            pieces: Vec::new(),
        }
    }

    /// docs/design.md §11: the previous leader decided to promote node 2 (its committed view
    /// of partition 1 names node 2 first) and died before its `Promote` left; node 2 still
    /// answers the take-over as a backup. The new leader asks for the promotion again and
    /// sends the backup no batch (a backup refuses batches: it applies its primary's log).
    #[test]
    fn a_promotion_decided_and_never_delivered_is_made_again() {
        let config = ClusterConfig::parse(include_str!("../../../cluster.toml"))
            .unwrap()
            .with_mode(Mode::ActivePassive, Some(wire::config::Shipping::Sync));
        let view = |partition| PartitionView { partition, replicas: vec![2], state: ViewState::Serving };
        let resume = |partition, role, executed| PartitionResume {
            view: view(partition),
            standings: [(2, standing(role, executed))].into(),
            adopted_after: executed,
            adopted: Vec::new(),
            known: Vec::new(),
            reads: Vec::new(),
        };
        let resumed = Resumed {
            epoch: 3,
            partitions: [(1, resume(1, ReplicationRole::Backup, 10)), (2, resume(2, ReplicationRole::Primary, 7))]
                .into(),
            live_nodes: [2].into(),
            reachable: [2].into(),
        };
        let (c, out) = Coordinator::resume(&config, 1, resumed, 1_000_000).unwrap();
        let promotes: Vec<&Output> = out
            .iter()
            .filter(|o| matches!(o, Output::ToNodes { msg: CoordinatorToNode::Promote { partition: 1, .. }, nodes } if nodes == &[2]))
            .collect();
        assert_eq!(promotes.len(), 1, "{out:?}");
        assert!(
            !out.iter()
                .any(|o| matches!(o, Output::ToNodes { msg: CoordinatorToNode::Batch(b), .. } if b.partition == 1)),
            "{out:?}"
        );
        let p1 = c.status().into_iter().find(|p| p.partition == 1).unwrap();
        assert_eq!(p1.phase, Phase::Promoting { backup: 2 });
        // The partition whose primary answered as one goes on serving.
        let p2 = c.status().into_iter().find(|p| p.partition == 2).unwrap();
        assert_eq!(p2.phase, Phase::Serving);
        assert!(!out
            .iter()
            .any(|o| matches!(o, Output::ToNodes { msg: CoordinatorToNode::Promote { partition: 2, .. }, .. })));
    }
}
