//! Invariants the simulator checks at every step of a run (docs/design.md §14, "Invariants at
//! every step"), not only once the cluster healed — in the manner of TigerBeetle's state
//! checker. Each violation is recorded with the step it was seen at and the invariant's name;
//! the seed's report names the seed.
//!
//! What is checked, and when:
//! - **an acknowledged transaction is held** — when a coordinator answers a transaction
//!   committed, every partition the transaction ran on holds it in at least one of the
//!   replicas that coordinator counts live for the partition and that serve it: a replica
//!   holds it if its last executed (or applied) timestamp is at least the transaction's. A
//!   replica whose process crashed and that the coordinator has not found out yet counts as
//!   it was when it crashed (the answer survives that one failure). Not a majority: the
//!   replicas that have not executed it yet — a lagging replica under the `majority` rule, a
//!   backup whose shipment is on its way, a joiner that holds the batch — get it from the
//!   batch the leader keeps until they report (docs/design.md §14 says what this found).
//!   Under asynchronous shipping, a fail-over — a promotion, or a recovery from a replica's
//!   own log — may lose the last answers (the window that mode gives up, counted by the
//!   final check): the check stops for that partition there;
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
//! - **at most one primary** — at each step, for each partition and each coordinator that
//!   leads, at most one replica acts as primary (its process runs, it serves, its role is
//!   primary, it is not stopped) among those that coordinator counts live;
//! - **a deposed coordinator acknowledges nothing** — a coordinator answers a transaction
//!   committed or aborted only while its member leads the newest term it knows of.

use std::collections::BTreeMap;

use coordinator::ClientId;
use node::machine::Standing;
use node::replica::ReplicaRole;
use wire::messages::{ClientResult, CoordinatorId, NodeId, PartitionId, Results, Seq, Timestamp};

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
            Invariant::OnePrimary => "at most one primary per partition per leader",
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
}

impl Sim {
    /// Whether `partition` ships asynchronously and failed over (a promotion, or a recovery
    /// from a replica's own log) — its last answers may then be lost, the window that mode
    /// gives up (docs/cluster.md), and the final check counts them — or, in any mode,
    /// recovered from a full-stack replica's own log after losing every replica.
    fn in_async_window(&self, partition: PartitionId) -> bool {
        let asynchronous = self.config.shipping() == Some(wire::config::Shipping::Async);
        (asynchronous && self.checker.failed_over.contains(&partition)) || self.checker.recovered.contains(&partition)
    }

    fn invariant_broken(&mut self, invariant: Invariant, detail: String) {
        self.trace_line(|| format!("INVARIANT {invariant}: {detail}"));
        self.violations.push(Violation::Invariant { step: self.step, invariant, detail });
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
        let Some(coordinator) = member.coordinator() else { return };
        let status = coordinator.status();
        let partitions: Vec<PartitionId> =
            self.config.partitions.iter().map(|p| p.id).filter(|&p| self.batch_of.contains_key(&(p, ts))).collect();
        let mut broken = Vec::new();
        for p in partitions {
            if self.in_async_window(p) {
                // The window asynchronous shipping gives up (see the module header).
                continue;
            }
            let Some(view) = status.iter().find(|s| s.partition == p) else { continue };
            // The replicas the coordinator counts live, less those that crashed before they
            // held it (a failure it has yet to find out): a crash after is a failure the
            // answer survives, and the crashed replica counts as holding it.
            let mut live = 0;
            let mut holders = 0;
            for id in &view.live_replicas {
                let Some(n) = self.nodes.get(id) else { continue };
                let held = if n.up {
                    let Some(m) = n.partitions.get(&p).filter(|m| m.standing() == Standing::Serving) else { continue };
                    m.replica().and_then(|r| r.last_ts()).is_some_and(|last| last >= ts)
                } else {
                    let held = self.checker.crashed.get(&(*id, n.process, p)).is_some_and(|&last| last >= ts);
                    if !held {
                        continue;
                    }
                    true
                };
                live += 1;
                holders += usize::from(held);
            }
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

    /// The checks of the cluster's state made after every step.
    pub(super) fn check_step(&mut self) {
        let leaders: Vec<CoordinatorId> = self
            .coordinators
            .iter()
            .filter(|(_, sc)| sc.member().and_then(|m| m.coordinator()).is_some())
            .map(|(&c, _)| c)
            .collect();
        let mut broken = Vec::new();
        for c in leaders {
            let Some(coordinator) = self.coordinators[&c].member().and_then(|m| m.coordinator()) else { continue };
            for p in &self.config.partitions {
                self.checker.checks += 1;
                let primaries: Vec<NodeId> = self
                    .nodes
                    .iter()
                    .filter(|(&id, n)| {
                        n.up && coordinator.is_node_live(id)
                            && n.partitions.get(&p.id).is_some_and(|m| {
                                m.standing() == Standing::Serving
                                    && m.replica()
                                        .is_some_and(|r| r.role() == ReplicaRole::Primary && r.stopped().is_none())
                            })
                    })
                    .map(|(&id, _)| id)
                    .collect();
                if primaries.len() > 1 {
                    broken.push(format!("coordinator {c} counts live primaries {primaries:?} of p{}", p.id));
                }
            }
        }
        for detail in broken {
            self.invariant_broken(Invariant::OnePrimary, detail);
        }
    }
}
