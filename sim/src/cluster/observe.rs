//! What tests and checkers look at: the counts of a run ([`SimStats`]) and read-only views of
//! the simulated cluster — the leading coordinator, the replicas, the answers, the messages in
//! flight, each node's health — and copies of a replica's state made the way a rejoin makes
//! them.
//!
//! Guarantees: nothing here moves the run on: no message is delivered, no time passes, and the
//! run's random source is only handed out ([`Sim::rng`]), never drawn from here.

use std::collections::BTreeMap;

use coordinator::{ClientId, Coordinator, Event};
use engine::procedures::TxnInput;
use engine::rng::Rng;
use node::machine::Standing;
use node::replica::Store;
use node::Replica;
use wire::config::{ClusterConfig, Mode};
use wire::messages::{ClientResult, CoordinatorId, NodeId, PartitionId};

use super::transfer::snapshot_copy;
use super::Sim;
use crate::error::{NodeReport, SlotReport, Violation};
use crate::net::Network;

/// Counts of what a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    pub steps: u64,
    pub requests: u64,
    pub crashes: u64,
    /// Links broken (drops).
    pub drops: u64,
    /// Heartbeat outages.
    pub mutes: u64,
    pub restarts: u64,
    /// `Rejoined` events: a restarted replica counts again.
    pub rejoins: u64,
    /// Crashes of a node while one of its replicas was rejoining.
    pub crashes_while_rejoining: u64,
    /// Crashes of a node some rejoining replica was copying from (or waiting on).
    pub crashes_of_rejoin_source: u64,
    /// Rejoins given up (source gone, or refused).
    pub rejoins_given_up: u64,
    /// `NodeDown` events.
    pub nodes_down: u64,
    /// Of them, replicas failed for lagging past `limits.replica_lag_batches_max` behind a
    /// majority's answers (docs/cluster.md, "Agreement").
    pub lagging: u64,
    /// Messages lost with broken links and crashed processes.
    pub messages_lost: u64,
    /// Promotions of a backup (`Event::Promoting`).
    pub promotions: u64,
    /// Coordinator links a node's machine re-established after a drop.
    pub reconnects: u64,
    /// Dials of a backup's node that failed (its process down, or not listening yet): the
    /// node machine dials again.
    pub peer_dials_failed: u64,
    /// Restart recoveries of a node's full-stack database (from its own log, or over an
    /// image).
    pub recoveries: u64,
    /// Of those, rejoining backups whose own log could not follow the primary's log base and
    /// that installed the primary's checkpoint image instead (a base backup).
    pub base_backups: u64,
    /// Starting-state fetches begun by rejoining replicas, those that failed, those the
    /// joiner's machine abandoned (a new plan replaced them, or nothing arrived for its
    /// patience), and of those the ones abandoned for the patience.
    pub fetches: u64,
    pub fetches_failed: u64,
    pub fetches_abandoned: u64,
    pub fetches_out_of_patience: u64,
    /// Copies of a lean replica taken while it executed (docs/design.md §10): installed, of
    /// them those during which the source executed batches (the copy raced them), and those
    /// cut mid-copy (the joiner or the source crashed, restarted or rejoined).
    pub copies: u64,
    pub copies_raced: u64,
    pub copies_cut: u64,
    /// Digest requests made during the run (the final check's excepted), and state digests a
    /// lean replica took from a copy of its state after the batch that asked
    /// (docs/design.md §10, "Checks during traffic"): reported, of them those during which it
    /// executed later batches, and those refused (the replica stopped, rejoined or was
    /// replaced mid-copy).
    pub digest_requests: u64,
    pub digest_copies: u64,
    pub digest_copies_raced: u64,
    pub digest_copies_refused: u64,
    /// Coordinator processes crashed, and coordinators cut off from the others.
    pub coordinator_crashes: u64,
    pub coordinator_cuts: u64,
    /// Coordinator crashes the other coordinators saw at once (its tethers ended).
    pub coordinator_deaths_seen: u64,
    /// Take-overs done by a new leader, and leaders deposed (docs/design.md §11).
    pub take_overs: u64,
    pub deposed: u64,
    /// Invariant checks made during the run, at every step (docs/design.md §14).
    pub invariant_checks: u64,
    /// Requests the clients asked again about after a failure took their answer (each time
    /// counts), and the answers those retries brought (docs/design.md §11, "Exactly-once
    /// answers").
    pub retries: u64,
    pub answers_from_retries: u64,
}

impl SimStats {
    /// Adds `other`'s counts to these (totals over many runs).
    pub fn add(&mut self, other: &SimStats) {
        self.steps += other.steps;
        self.requests += other.requests;
        self.crashes += other.crashes;
        self.drops += other.drops;
        self.mutes += other.mutes;
        self.restarts += other.restarts;
        self.rejoins += other.rejoins;
        self.crashes_while_rejoining += other.crashes_while_rejoining;
        self.crashes_of_rejoin_source += other.crashes_of_rejoin_source;
        self.rejoins_given_up += other.rejoins_given_up;
        self.nodes_down += other.nodes_down;
        self.lagging += other.lagging;
        self.messages_lost += other.messages_lost;
        self.promotions += other.promotions;
        self.reconnects += other.reconnects;
        self.peer_dials_failed += other.peer_dials_failed;
        self.recoveries += other.recoveries;
        self.base_backups += other.base_backups;
        self.fetches += other.fetches;
        self.fetches_failed += other.fetches_failed;
        self.fetches_abandoned += other.fetches_abandoned;
        self.fetches_out_of_patience += other.fetches_out_of_patience;
        self.copies += other.copies;
        self.copies_raced += other.copies_raced;
        self.copies_cut += other.copies_cut;
        self.digest_requests += other.digest_requests;
        self.digest_copies += other.digest_copies;
        self.digest_copies_raced += other.digest_copies_raced;
        self.digest_copies_refused += other.digest_copies_refused;
        self.coordinator_crashes += other.coordinator_crashes;
        self.coordinator_cuts += other.coordinator_cuts;
        self.coordinator_deaths_seen += other.coordinator_deaths_seen;
        self.take_overs += other.take_overs;
        self.deposed += other.deposed;
        self.invariant_checks += other.invariant_checks;
        self.retries += other.retries;
        self.answers_from_retries += other.answers_from_retries;
    }
}

impl Sim {
    // ----- what tests and checkers look at -----

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The replication mode the cluster runs.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The leading coordinator's state machine.
    ///
    /// Panics if no coordinator leads (tests call it on a settled cluster).
    pub fn coordinator(&self) -> &Coordinator {
        self.leader().map(|(_, c)| c).expect("a coordinator leads")
    }

    /// The coordinator that leads the newest epoch and has taken over, with its state machine.
    pub fn leader(&self) -> Option<(CoordinatorId, &Coordinator)> {
        self.coordinators
            .iter()
            .filter_map(|(&id, sc)| {
                let m = sc.member()?;
                Some((m.leading()?, id, m.coordinator()?))
            })
            .max_by_key(|(epoch, _, _)| *epoch)
            .map(|(_, id, c)| (id, c))
    }

    /// Whether coordinator `c`'s process runs.
    pub fn is_coordinator_up(&self, c: CoordinatorId) -> bool {
        self.coordinators.get(&c).is_some_and(|sc| sc.carrier.is_some())
    }

    /// The coordinators' ids.
    pub fn coordinator_ids(&self) -> Vec<CoordinatorId> {
        self.coordinators.keys().copied().collect()
    }

    /// Whether `node`'s process runs, still on the link the leader declared it failed on,
    /// while the leader counts it failed: the leader's carrier closes a failed node's link at
    /// once (docs/design.md §14), so that the process learns it was excluded and rejoins by
    /// itself; a process left linked would wait for an operator.
    pub fn is_failed_but_linked(&self, node: NodeId) -> bool {
        let n = &self.nodes[&node];
        let linked = |c: CoordinatorId| n.links.get(&c).is_some_and(|l| l.alive && l.declared_failed);
        n.up && !self.live_at_leader(node) && self.leader().is_some_and(|(c, _)| linked(c))
    }

    /// Whether node `node` counts as live at the leader (false with no leader).
    fn live_at_leader(&self, node: NodeId) -> bool {
        self.leader().is_some_and(|(_, c)| c.is_node_live(node))
    }

    /// Every event the coordinator reported, in order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// The run's random source (tests draw their own choices from it, keeping runs pure).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    pub fn stats(&self) -> SimStats {
        SimStats {
            steps: self.step,
            requests: self.inputs.len() as u64,
            messages_lost: self.net.lost,
            invariant_checks: self.checker.checks,
            ..self.stats
        }
    }

    /// Problems found while running (a replica refusing a message, a copy that differs).
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Every reply, by (client, request id), with how many times it came.
    pub fn answers(&self) -> &BTreeMap<(ClientId, u64), (ClientResult, u32)> {
        &self.answers
    }

    /// The inputs submitted, by request id.
    pub fn inputs(&self) -> &[TxnInput] {
        &self.inputs
    }

    /// Whether request `request_id` was answered.
    pub fn is_answered(&self, request_id: u64) -> bool {
        self.answered.get(request_id as usize).copied().unwrap_or(false)
    }

    /// A hash of every reply in the order it came.
    pub fn answer_log_digest(&self) -> u64 {
        self.answer_log.digest()
    }

    /// Replies satisfying `f`.
    pub fn count(&self, f: impl Fn(&ClientResult) -> bool) -> usize {
        self.answers.values().filter(|(r, _)| f(r)).count()
    }

    /// The serving replica of `partition` on `node`, if there is one.
    pub fn replica_mut(&mut self, node: NodeId, partition: PartitionId) -> Option<&mut Replica> {
        self.nodes.get_mut(&node)?.partitions.get_mut(&partition)?.replica_mut()
    }

    /// The serving replica of `partition` on `node`, if there is one (to observe it: whether
    /// it is parked at a home piece, how far it executed).
    pub fn replica(&self, node: NodeId, partition: PartitionId) -> Option<&Replica> {
        self.nodes.get(&node)?.partitions.get(&partition)?.replica()
    }

    /// The messages in flight and held (to observe a protocol step: which message is on its
    /// way where).
    pub fn net(&self) -> &Network {
        &self.net
    }

    /// Whether `node`'s process runs.
    pub fn is_up(&self, node: NodeId) -> bool {
        self.nodes.get(&node).is_some_and(|n| n.up)
    }

    /// A copy of the state of `partition`'s serving replica on `node`, made the way a
    /// rejoining replica copies its source (the snapshot stream), as it is now — a batch
    /// parked at a home piece is half run, and the copy has the half that ran; `None` unless
    /// it serves. A test keeps one to check a partition about to be lost for good.
    pub fn copy_db(&mut self, node: NodeId, partition: PartitionId) -> Option<engine::LeanDb> {
        let r = self.replica_mut(node, partition)?;
        snapshot_copy(node, r, None).ok().map(|(db, _)| db)
    }

    /// Whether the transaction at `ts` rode, in `partition`, in a batch a promotion lost: one
    /// the failed primary executed and the promoted backup had not applied (async shipping
    /// answers before the backups apply: docs/design.md §10).
    ///
    /// A promotion by a later leader than the one that sent the batch (a take-over, docs/
    /// design.md §11) numbers on from what the backup applied: every batch of the old
    /// leader's past that lies in the window.
    pub fn lost_in_failover(&self, partition: PartitionId, ts: wire::messages::Timestamp) -> bool {
        let Some(&(seq, sent_in)) = self.batch_of.get(&(partition, ts)) else { return false };
        let resent = self.resent.contains(&(partition, ts));
        self.promotions.iter().any(|&(epoch, p, applied_seq, next_seq)| {
            p == partition
                && applied_seq < seq
                && (seq < next_seq || (self.asynchronous() && epoch > sent_in && !resent))
        })
    }

    /// Whether the transaction at `ts` was sent again, in `partition`, by a later leader
    /// after its first execution lay in a promotion's window (async shipping: the promoted
    /// backup had not applied that batch). It then ran again from a state without the
    /// window's earlier batches, so its outputs may differ from those its client was given.
    pub fn renumbered_in_failover(&self, partition: PartitionId, ts: wire::messages::Timestamp) -> bool {
        let Some(&(seq, sent_in)) = self.batch_of.get(&(partition, ts)) else { return false };
        self.asynchronous()
            && self.resent.contains(&(partition, ts))
            && self
                .promotions
                .iter()
                .any(|&(epoch, p, applied_seq, _)| p == partition && applied_seq < seq && epoch > sent_in)
    }

    fn asynchronous(&self) -> bool {
        self.config.replication.answers_may_outrun_backups()
    }

    /// Whether some promotion lost batches (async shipping: the failed primary answered
    /// batches its promoted backup had not applied).
    pub fn lost_a_batch_in_failover(&self) -> bool {
        self.promotions.iter().any(|&(epoch, p, applied_seq, next_seq)| {
            applied_seq + 1 < next_seq
                || (self.asynchronous()
                    && self.batch_of.iter().any(|(&(q, ts), &(seq, sent_in))| {
                        q == p && seq > applied_seq && sent_in < epoch && !self.resent.contains(&(q, ts))
                    }))
        })
    }

    /// Whether some replica is rejoining (or gave up rejoining).
    pub fn is_rejoining(&self) -> bool {
        self.nodes.values().any(|n| n.partitions.values().any(|p| p.standing() != Standing::Serving))
    }

    /// The node ids.
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// Whether `node`'s process runs, its link is connected and the coordinator counts it
    /// live.
    pub fn is_healthy(&self, node: NodeId) -> bool {
        let n = &self.nodes[&node];
        let linked = self.leader().is_some_and(|(c, _)| n.links.get(&c).is_some_and(|l| l.alive));
        n.up && linked && self.live_at_leader(node)
    }

    /// Whether `node` serves every partition it holds and the coordinator counts it a live
    /// replica of each.
    pub fn is_full_member(&self, node: NodeId) -> bool {
        let Some((_, c)) = self.leader() else { return false };
        let status = c.status();
        self.is_healthy(node)
            && self.nodes[&node].partitions.iter().all(|(p, m)| {
                m.replica().is_some_and(|r| r.stopped().is_none())
                    && status.iter().any(|st| st.partition == *p && st.live_replicas.contains(&node))
            })
    }

    /// Every node: process, link, and each partition's standing (for failure reports).
    pub fn node_reports(&self) -> Vec<NodeReport> {
        self.nodes
            .iter()
            .map(|(&id, n)| NodeReport {
                id,
                up: n.up,
                link: self.leader().and_then(|(c, _)| n.links.get(&c)).map_or(0, |l| l.id),
                link_alive: self.leader().and_then(|(c, _)| n.links.get(&c)).is_some_and(|l| l.alive),
                live: self.live_at_leader(id),
                shipping_to: n
                    .machine
                    .backups()
                    .into_iter()
                    .map(|(p, b)| (p, b, n.machine.gate_held(p).unwrap_or(0)))
                    .collect(),
                slots: n
                    .partitions
                    .iter()
                    .map(|(&p, m)| {
                        let slot = match (m.replica(), m.standing()) {
                            (Some(r), _) => SlotReport::Serving {
                                seq: r.applied_seq(),
                                waiting: r.waiting_batches(),
                                stopped: r.stopped().is_some(),
                                parked_at: r.parked_at(),
                            },
                            (None, Standing::Rejoining { plan, held, .. }) => SlotReport::Joining { plan, held },
                            (None, _) => SlotReport::GaveUp,
                        };
                        (p, slot)
                    })
                    .collect(),
            })
            .collect()
    }

    /// The lean database of `partition`'s replica on `node`, if it serves.
    pub fn db_mut(&mut self, node: NodeId, partition: PartitionId) -> Option<&mut engine::LeanDb> {
        match self.replica_mut(node, partition)?.store_mut() {
            Store::Lean(db) => Some(db),
            Store::Full(_) => None,
        }
    }
}
