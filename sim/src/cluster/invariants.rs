//! Invariants the simulator checks at every step of a run (docs/design.md §14, "Invariants at
//! every step"), not only once the cluster healed — in the manner of TigerBeetle's state
//! checker. Each violation is recorded with the step it was seen at and the invariant's name;
//! the seed's report names the seed.
//!
//! What is checked, and when. The replicas a coordinator counts live for a partition are the
//! partition's members whose node it counts live (a failed primary stays a member of its
//! partition's agreement until its backup is promoted; the membership the group records,
//! `Coordinator::views`, leaves it out).
//! - **an acknowledged transaction is held** — when a coordinator answers a transaction
//!   committed, every partition the transaction ran on held it, when that partition decided
//!   it, in at least one of the replicas that coordinator counts live for the partition and
//!   that serve it: a replica holds it if its last executed (or applied) timestamp is at
//!   least the transaction's. A replica whose process crashed and that the coordinator has
//!   not found out yet counts as it was when it crashed (the answer survives that one
//!   failure). A partition decides its part when the leader's agreement counts the batch
//!   decided (`PartitionStatus::decided_through`, looked at after every call of a leader's
//!   carrier). A single-partition answer comes out of that very call and is checked as it
//!   goes out. A multi-partition answer waits for every partition's part (docs/cluster.md,
//!   "Multi-partition transactions"): each part decided in an earlier call was checked when
//!   it was decided, and the replicas that held it then may have failed since — failures a
//!   single-partition answer given then would have had to live through as well (found by
//!   seed 8964 of active-active with one coordinator, docs/design.md §14). Not a majority:
//!   the replicas that have not executed it yet — a lagging replica under the `majority`
//!   rule, a backup whose shipment is on its way, a joiner that holds the batch — get it
//!   from the batch the leader keeps until they report (docs/design.md §14 says what this
//!   found). Under asynchronous shipping, a fail-over — a promotion, or a recovery from a
//!   replica's own log — may lose the last answers (the window that mode gives up, counted
//!   by the final check): the check stops for that partition there;
//! - **one batch and one result per timestamp** — for each (partition, timestamp) and leader
//!   epoch, every replica that reports a result reports it in the same batch with the same
//!   result digest (a later leader may send an unanswered transaction again in another batch,
//!   after another set: a failed replica's execution of it is then discarded with its state;
//!   a full-stack replica that recovered from its own log reports what it kept "not run
//!   again", which the coordinator answers no one with).
//!   Under asynchronous shipping, once a partition failed over, its new executor may lack
//!   the last writes and execute those transactions again from an earlier state — the same
//!   window — so there the check stops for that partition;
//! - **no replica's timestamp goes backwards** — each replica's results, batch after batch,
//!   carry ever later timestamps (a replica that rejoins, or a process that restarts, starts
//!   a new history);
//! - **at most one primary per epoch** — at each step, for each partition and each
//!   coordinator that leads, at most one replica per epoch acts as primary (its process
//!   runs, it serves, it is not stopped, and its role is primary — or, in the passive modes,
//!   it executes and ships to no one, as a promoted backup does) among the replicas that
//!   coordinator counts live for the partition; a replica's epoch is the newest its node
//!   heard of. Liveness is the partition's, not the node's: a deposed primary the leader
//!   failed may connect again and count live as a node (it rejoins another partition) while
//!   its replica acts as primary until the membership that leaves it out arrives (found by
//!   seeds 2832 and 1501 of the passive modes with three coordinators). And per epoch: a
//!   leader deposed without knowing it yet still counts replicas whose nodes follow the next
//!   leader, which may have promoted one of them;
//! - **a deposed coordinator acknowledges nothing** — a coordinator answers a transaction
//!   committed or aborted only while its member leads the newest term it knows of.

use std::collections::{BTreeMap, BTreeSet};

use coordinator::{ClientId, Coordinator, PartitionStatus};
use node::machine::Standing;
use node::replica::ReplicaRole;
use wire::messages::{
    Batch, ClientResult, CoordinatorId, Epoch, NodeId, PartitionId, Results, ResultsDigest, Seq, Timestamp,
};

use super::Sim;
use crate::error::Violation;

/// The invariants, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invariant {
    AcknowledgedHeld,
    OneBatchOneResult,
    TimestampsForward,
    OnePrimary,
    DeposedSilent,
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Invariant::AcknowledgedHeld => "an acknowledged transaction is held by a live replica",
            Invariant::OneBatchOneResult => "one batch and one result digest per (partition, timestamp, epoch)",
            Invariant::TimestampsForward => "no replica's timestamp goes backwards",
            Invariant::OnePrimary => "at most one primary per partition per epoch among a leader's live replicas",
            Invariant::DeposedSilent => "a deposed coordinator acknowledges nothing",
        })
    }
}

/// What the checker remembers between steps.
#[derive(Debug, Default)]
pub(super) struct StepChecker {
    /// Each (partition, timestamp) reported, by the epoch of the leader its reporter followed:
    /// its batch, result digest and first reporter.
    results: BTreeMap<(PartitionId, Timestamp, u64), (Seq, u64, NodeId)>,
    /// Each replica's history, by (node, process, partition): the last batch it reported and
    /// the latest timestamp in it.
    reported: BTreeMap<(NodeId, u64, PartitionId), (Seq, Timestamp)>,
    /// Partitions a backup was promoted in, or whose replica recovered from its own log.
    pub(super) failed_over: std::collections::BTreeSet<PartitionId>,
    /// Partitions a full-stack replica recovered from its own log: the partition had lost
    /// every replica, its unanswered work was answered "outcome unknown" and runs again from
    /// the durable state, read-only transactions included (they leave no log record).
    pub(super) recovered: std::collections::BTreeSet<PartitionId>,
    /// Each crashed process's replicas' last timestamps, as they were when it crashed.
    crashed: BTreeMap<(NodeId, u64, PartitionId), Timestamp>,
    /// The batches each leader sent (by its epoch, the partition and the batch's number) and
    /// has not decided yet, as far as the checker saw: their transactions' timestamps.
    undecided: BTreeMap<(Epoch, PartitionId, Seq), Vec<Timestamp>>,
    /// How far each leader (by epoch) had decided each partition's batches, when last looked.
    decided: BTreeMap<(Epoch, PartitionId), Seq>,
    /// The transactions a leader's partition decided while a replica it counted live held
    /// them (or it counted none live): by the leader's epoch, the partition and the timestamp.
    held_when_decided: BTreeSet<(Epoch, PartitionId, Timestamp)>,
    /// Checks made.
    pub(super) checks: u64,
}

impl StepChecker {
    /// Process `process` of `node` crashed holding `held`: each partition's last timestamp.
    pub(super) fn crashed(&mut self, node: NodeId, process: u64, held: Vec<(PartitionId, Timestamp)>) {
        for (p, ts) in held {
            self.crashed.insert((node, process, p), ts);
        }
    }

    /// Forgets `node`'s history of `partition` (all partitions: `None`): it starts again.
    pub(super) fn forget(&mut self, node: NodeId, partition: Option<PartitionId>) {
        self.reported.retain(|&(n, _, p), _| n != node || partition.is_some_and(|q| q != p));
    }

    /// The leader of epoch `epoch` sent `batch` (again, perhaps: the first sending counts).
    pub(super) fn sent(&mut self, epoch: Epoch, batch: &Batch) {
        if self.decided.get(&(epoch, batch.partition)).is_some_and(|&d| batch.seq <= d) {
            return; // decided already: sent again to a replica catching up
        }
        self.undecided
            .entry((epoch, batch.partition, batch.seq))
            .or_insert_with(|| batch.txns.iter().map(|t| t.ts).collect());
    }

    /// The leader of epoch `epoch` decided `partition`'s batches through `through`: takes the
    /// transactions of those decided since it was last looked at.
    fn newly_decided(&mut self, epoch: Epoch, partition: PartitionId, through: Seq) -> Vec<Timestamp> {
        let before = self.decided.insert((epoch, partition), through).unwrap_or(0);
        if through <= before {
            return Vec::new();
        }
        let range = (epoch, partition, before + 1)..=(epoch, partition, through);
        let seqs: Vec<(Epoch, PartitionId, Seq)> = self.undecided.range(range).map(|(k, _)| *k).collect();
        seqs.into_iter().flat_map(|k| self.undecided.remove(&k).unwrap_or_default()).collect()
    }
}

/// `coordinator`'s partitions, each with the replicas it counts live, once each: the
/// partition's members whose node it counts live. (A failed primary stays a member of its
/// partition's agreement until its backup is promoted, and the membership the group records
/// leaves it out: `Coordinator::views`; a backup being promoted is listed twice meanwhile.)
fn counted_live(coordinator: &Coordinator) -> Vec<PartitionStatus> {
    let mut status = coordinator.status();
    for s in &mut status {
        let mut seen = BTreeSet::new();
        s.live_replicas.retain(|&n| coordinator.is_node_live(n) && seen.insert(n));
    }
    status
}

impl Sim {
    /// Whether `partition` ships asynchronously and failed over (a promotion, or a recovery
    /// from a replica's own log) — its last answers may then be lost, the window that mode
    /// gives up (docs/cluster.md), and the final check counts them — or, in any mode,
    /// recovered from a full-stack replica's own log after losing every replica.
    fn in_async_window(&self, partition: PartitionId) -> bool {
        let asynchronous = self.config.replication.answers_may_outrun_backups();
        (asynchronous && self.checker.failed_over.contains(&partition)) || self.checker.recovered.contains(&partition)
    }

    fn invariant_broken(&mut self, invariant: Invariant, detail: String) {
        self.trace_line(|| format!("INVARIANT {invariant}: {detail}"));
        self.violations.push(Violation::Invariant { step: self.step, invariant, detail });
    }

    /// Checks a replica's digest of a batch's outputs as it emits it (another replica sends
    /// them): the outputs it keeps (`kept`) must exist, hash to it, and pass
    /// [`Sim::check_results`] as if sent.
    pub(super) fn check_results_digest(&mut self, node: NodeId, d: &ResultsDigest, kept: Option<Results>) {
        self.checker.checks += 1;
        match kept {
            Some(r) if r.digest() == *d => self.check_results(node, &r),
            kept => {
                let detail = format!(
                    "node {node} p{} sent digest {:#x} of batch {}'s {} outputs, and keeps {}",
                    d.partition,
                    d.digest,
                    d.seq,
                    d.count,
                    kept.map_or("none".to_string(), |r| format!("{:?}", r.digest()))
                );
                self.invariant_broken(Invariant::OneBatchOneResult, detail);
            }
        }
    }

    /// Checks a replica's results as it emits them: the same batch and result digest as every
    /// other report of each timestamp, and timestamps later than its previous batch's.
    pub(super) fn check_results(&mut self, node: NodeId, r: &Results) {
        self.checker.checks += 1;
        let process = self.nodes[&node].process;
        let epoch = self.nodes[&node].machine.epoch();
        let key = (node, process, r.partition);
        let last = r.results.iter().map(|t| t.ts).max();
        match (self.checker.reported.get(&key).copied(), last) {
            (Some((seq, _)), _) if r.seq <= seq => {} // reported again: checked below
            (Some((_, before)), Some(_)) => {
                if let Some(t) = r.results.iter().find(|t| t.ts <= before) {
                    let detail = format!(
                        "node {node} p{}: batch {} holds timestamp {} after an earlier batch reached {before}",
                        r.partition, r.seq, t.ts
                    );
                    self.invariant_broken(Invariant::TimestampsForward, detail);
                }
            }
            _ => {}
        }
        let entry = self.checker.reported.entry(key).or_insert((r.seq, Timestamp(0)));
        if r.seq >= entry.0 {
            *entry = (r.seq, last.unwrap_or(entry.1).max(entry.1));
        }
        if self.in_async_window(r.partition) {
            return;
        }
        let replayed = node::replica::committed_before_restart();
        for t in r.results.iter().filter(|t| t.outcome != replayed) {
            let first = *self.checker.results.entry((r.partition, t.ts, epoch)).or_insert((r.seq, t.digest, node));
            if first.0 != r.seq || first.1 != t.digest {
                let mut outcome = format!("{:?}", t.outcome);
                outcome.truncate(120);
                let detail = format!(
                    "p{} timestamp {} (epoch {epoch}): node {} reported batch {} digest {:#x}, node {node} batch {} digest {:#x} ({outcome})",
                    r.partition, t.ts, first.2, first.0, first.1, r.seq, t.digest
                );
                self.invariant_broken(Invariant::OneBatchOneResult, detail);
            }
        }
    }

    /// Checks an answer as coordinator `c` gives it.
    pub(super) fn check_answer(&mut self, c: CoordinatorId, client: ClientId, request_id: u64, result: &ClientResult) {
        let ts = match result {
            ClientResult::Committed { ts, .. } | ClientResult::Aborted { ts, .. } => *ts,
            _ => return,
        };
        self.checker.checks += 1;
        let Some(member) = self.coordinators.get(&c).and_then(super::SimCoord::member) else { return };
        if member.leading().is_none_or(|e| e != member.term()) {
            let detail = format!(
                "coordinator {c} (term {}, leading {:?}) answered client {client}'s request {request_id} ({ts})",
                member.term(),
                member.leading()
            );
            return self.invariant_broken(Invariant::DeposedSilent, detail);
        }
        if !matches!(result, ClientResult::Committed { .. }) {
            return;
        }
        let epoch = member.term();
        let Some(coordinator) = member.coordinator() else { return };
        let status = counted_live(coordinator);
        let partitions: Vec<PartitionId> =
            self.config.partitions.iter().map(|p| p.id).filter(|&p| self.batch_of.contains_key(&(p, ts))).collect();
        let mut broken = Vec::new();
        for p in partitions {
            if self.in_async_window(p) {
                // The window asynchronous shipping gives up (see the module header).
                continue;
            }
            if self.checker.held_when_decided.contains(&(epoch, p, ts)) {
                // Decided in an earlier call, and held then (see the module header).
                continue;
            }
            let Some(view) = status.iter().find(|s| s.partition == p) else { continue };
            let (live, holders) = self.held_by_live(&view.live_replicas, p, ts);
            if live > 0 && holders == 0 {
                broken.push(format!("p{p}: none of its {live} live replicas holds it"));
            }
        }
        if !broken.is_empty() {
            let detail = format!(
                "coordinator {c} answered client {client}'s request {request_id} committed at {ts}: {}",
                broken.join("; ")
            );
            self.invariant_broken(Invariant::AcknowledgedHeld, detail);
        }
    }

    /// Of `live`, the replicas of `partition` a coordinator counts live, how many count, and
    /// how many hold timestamp `ts`: a replica counts if it serves, or if its process crashed
    /// holding it (a failure the coordinator has yet to find out, which the answer
    /// survives); one that crashed before it held it does not count.
    fn held_by_live(&self, live: &[NodeId], partition: PartitionId, ts: Timestamp) -> (usize, usize) {
        let mut counted = 0;
        let mut holders = 0;
        for id in live {
            let Some(n) = self.nodes.get(id) else { continue };
            let held = if n.up {
                let Some(m) = n.partitions.get(&partition).filter(|m| m.standing() == Standing::Serving) else {
                    continue;
                };
                let Some(r) = m.replica() else { continue };
                match r.last_ts() {
                    Some(last) => last >= ts,
                    // Restored from a copy and nothing executed since: its state is the
                    // source's after batch `applied_seq`, which holds `ts` if the batch that
                    // carried it is no later (a retried request is answered long after its
                    // batch ran, when such a replica may be the only one left).
                    None => self.batch_of.get(&(partition, ts)).is_some_and(|&(seq, _)| r.applied_seq() >= seq),
                }
            } else {
                let held = self.checker.crashed.get(&(*id, n.process, partition)).is_some_and(|&last| last >= ts);
                if !held {
                    continue;
                }
                true
            };
            counted += 1;
            holders += usize::from(held);
        }
        (counted, holders)
    }

    /// The leading epoch of coordinator `c` and its state machine, while it leads.
    fn leading(&self, c: CoordinatorId) -> Option<(Epoch, &Coordinator)> {
        let member = self.coordinators.get(&c).and_then(super::SimCoord::member)?;
        Some((member.leading()?, member.coordinator()?))
    }

    /// After every call of coordinator `c`'s carrier: the batches its partitions decided in
    /// that call, and which of their transactions a replica it counts live held then (what a
    /// multi-partition answer given in a later call is checked by).
    pub(super) fn note_decided(&mut self, c: CoordinatorId) {
        let Some((epoch, coordinator)) = self.leading(c) else { return };
        let status = counted_live(coordinator);
        let mut decided = Vec::new();
        for view in &status {
            for ts in self.checker.newly_decided(epoch, view.partition, view.decided_through) {
                let (live, holders) = self.held_by_live(&view.live_replicas, view.partition, ts);
                if live == 0 || holders > 0 {
                    decided.push((epoch, view.partition, ts));
                }
            }
        }
        self.checker.held_when_decided.extend(decided);
    }

    /// The checks of the cluster's state made after every step.
    pub(super) fn check_step(&mut self) {
        let leaders: Vec<CoordinatorId> = self
            .coordinators
            .iter()
            .filter(|(_, sc)| sc.member().and_then(|m| m.coordinator()).is_some())
            .map(|(&c, _)| c)
            .collect();
        // In the passive modes a replica that executes and ships to no one — a promoted
        // backup — is its partition's primary too; in active-active every replica executes.
        let passive = !self.mode.every_replica_executes();
        let acts_as_primary = |role| role == ReplicaRole::Primary || (passive && role == ReplicaRole::Replica);
        let mut broken = Vec::new();
        for c in leaders {
            let Some(coordinator) = self.coordinators[&c].member().and_then(|m| m.coordinator()) else { continue };
            for view in counted_live(coordinator) {
                self.checker.checks += 1;
                // The primaries among the partition's replicas the leader counts live, by the
                // epoch their node follows.
                let mut primaries: BTreeMap<Epoch, Vec<NodeId>> = BTreeMap::new();
                for id in &view.live_replicas {
                    let Some(n) = self.nodes.get(id).filter(|n| n.up) else { continue };
                    let primary = n.partitions.get(&view.partition).is_some_and(|m| {
                        m.standing() == Standing::Serving
                            && m.replica().is_some_and(|r| acts_as_primary(r.role()) && r.stopped().is_none())
                    });
                    if primary {
                        primaries.entry(n.machine.epoch()).or_default().push(*id);
                    }
                }
                for (epoch, mut nodes) in primaries.into_iter().filter(|(_, nodes)| nodes.len() > 1) {
                    nodes.sort_unstable();
                    broken.push(format!(
                        "coordinator {c} counts live primaries {nodes:?} of p{} (epoch {epoch}; live replicas {:?}, {:?})",
                        view.partition, view.live_replicas, view.phase
                    ));
                }
            }
        }
        for detail in broken {
            self.invariant_broken(Invariant::OnePrimary, detail);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Planted cases: each invariant whose check was made more precise still fires on the
    //! violation it is for (docs/design.md §14).

    use wire::config::{Mode, Shipping};
    use wire::messages::{ClientResult, PartitionId, Timestamp};

    use super::Invariant;
    use crate::cluster::{config_for, with_coordinators, Faults, Sim};

    /// A cluster of three nodes and one coordinator, serving and with some work answered.
    fn serving(mode: Mode) -> Sim {
        let config = with_coordinators(config_for(3, 42, mode, Shipping::Sync), 1);
        let mut sim = Sim::new(&config, 1, Faults::NONE);
        for _ in 0..200 {
            sim.run(20);
            sim.advance(1_000);
            let serving =
                sim.leader().is_some_and(|(_, c)| c.status().iter().all(|s| s.phase == coordinator::Phase::Serving));
            if serving && sim.count(|r| matches!(r, ClientResult::Committed { .. })) > 20 {
                return sim;
            }
        }
        panic!("the cluster did not serve");
    }

    fn violations(sim: &Sim, invariant: Invariant) -> Vec<String> {
        sim.violations()
            .iter()
            .filter_map(|v| match v {
                crate::error::Violation::Invariant { invariant: i, detail, .. } if *i == invariant => {
                    Some(detail.clone())
                }
                _ => None,
            })
            .collect()
    }

    /// A backup the leader counts live promotes itself (no `Promote` came): two replicas of
    /// the partition execute in the leader's epoch, and the check says which.
    #[test]
    fn two_primaries_a_leader_counts_live_in_one_epoch_are_caught() {
        let mut sim = serving(Mode::ActivePassive);
        sim.check_step();
        assert!(violations(&sim, Invariant::OnePrimary).is_empty());
        let p: PartitionId = 1;
        let (_, c) = sim.leader().expect("a leader");
        let live = c.status().into_iter().find(|s| s.partition == p).expect("p1").live_replicas;
        let (primary, backup) = (live[0], live[1]);
        sim.replica_mut(backup, p).expect("a backup").promote(1).expect("promoted");
        sim.check_step();
        let found = violations(&sim, Invariant::OnePrimary);
        assert_eq!(found.len(), 1, "{found:?}");
        let mut both = [primary, backup];
        both.sort_unstable();
        assert!(found[0].contains(&format!("{both:?} of p{p}")), "{found:?}");
    }

    /// A replica acting as primary that the leader no longer counts live for the partition
    /// (it failed it) is not one of its primaries.
    #[test]
    fn a_primary_the_leader_failed_is_not_counted() {
        let mut sim = serving(Mode::ActivePassive);
        let p: PartitionId = 1;
        let (_, c) = sim.leader().expect("a leader");
        let backup = c.status().into_iter().find(|s| s.partition == p).expect("p1").live_replicas[1];
        sim.drop_link(backup);
        sim.replica_mut(backup, p).expect("still serving, as it knows").promote(1).expect("promoted");
        sim.check_step();
        assert!(violations(&sim, Invariant::OnePrimary).is_empty());
    }

    /// A transaction sent and executed by no replica yet, answered committed: no live replica
    /// holds it, and it is caught — at the answer, and when its partition is counted decided
    /// while no live replica held it (a multi-partition answer given in a later call).
    #[test]
    fn an_answer_no_live_replica_held_is_caught() {
        let mut sim = serving(Mode::ActiveActive);
        // The decisions of the leader's partitions were noted as they came.
        assert!(!sim.checker.held_when_decided.is_empty());
        let unheld = |sim: &Sim| -> Option<(PartitionId, Timestamp)> {
            sim.batch_of.keys().copied().find(|&(p, ts)| {
                sim.nodes.keys().all(|&n| sim.replica(n, p).and_then(|r| r.last_ts()).is_none_or(|l| l < ts))
            })
        };
        let mut found = None;
        for _ in 0..5_000 {
            sim.run(1);
            found = unheld(&sim);
            if found.is_some() {
                break;
            }
        }
        let (p, ts) = found.expect("a batch in flight");
        let (c, _) = sim.leader().expect("a leader");
        let output = sim
            .answers()
            .values()
            .find_map(|(r, _)| match r {
                ClientResult::Committed { output, .. } => Some(*output),
                _ => None,
            })
            .expect("a commit");
        let answer = ClientResult::Committed { ts, output };
        sim.check_answer(c, 1, u64::MAX, &answer);
        assert_eq!(violations(&sim, Invariant::AcknowledgedHeld).len(), 1, "{:?}", sim.violations());
        // Its partition counted it decided in an earlier call, no live replica holding it:
        // still caught.
        let (epoch, status) = {
            let (epoch, coordinator) = sim.leading(c).expect("leads");
            (epoch, coordinator.status().into_iter().find(|s| s.partition == p).expect("p"))
        };
        let through = status.decided_through;
        assert!(through >= 1, "{status:?}");
        sim.checker.decided.insert((epoch, p), through - 1);
        sim.checker.undecided.insert((epoch, p, through), vec![ts]);
        sim.note_decided(c);
        assert!(!sim.checker.held_when_decided.contains(&(epoch, p, ts)));
        sim.check_answer(c, 1, u64::MAX, &answer);
        assert_eq!(violations(&sim, Invariant::AcknowledgedHeld).len(), 2, "{:?}", sim.violations());
        // Had a live replica held it when it was decided, the later answer would stand on that.
        sim.checker.held_when_decided.insert((epoch, p, ts));
        sim.check_answer(c, 1, u64::MAX, &answer);
        assert_eq!(violations(&sim, Invariant::AcknowledgedHeld).len(), 2, "{:?}", sim.violations());
    }
}
