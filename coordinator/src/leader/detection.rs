//! Failure and lag detection (docs/cluster.md, "Failure detection" and "Agreement"): a node
//! counts as failed on the first signal that says so — its silence past
//! `timeouts.failure_timeout_ms`, its connection closing, its death notice — or once one of
//! its replicas lagged too long; the clock's ticks close batches, send heartbeats and stop
//! partitions that did not load in time.
//!
//! Guarantees:
//! - a node that only rejoins is given [`JOINER_PATIENCE_TIMEOUTS`] failure timeouts of
//!   silence (docs/design.md §10, "A joiner is not failed for being busy joining");
//! - a lagging replica is failed only while the replicas ahead of it are heard from and its
//!   partition keeps a majority of its replicas live: it may be the only state left;
//! - [`Coordinator::next_deadline_us`] names the earliest instant a tick has work to do.

use wire::channel::CoordinatorToNode;
use wire::messages::NodeId;

use super::{Coordinator, Detection, Event, Output, Partition, Phase, JOINER_PATIENCE_TIMEOUTS};
use crate::agreement::Quorum;

impl Coordinator {
    /// Node `node` is gone before its silence timed out (`detection` says how the network
    /// code knows: a connection closed, reset or replaced, a death notice): it counts as
    /// failed at once.
    pub fn on_node_lost(&mut self, node: NodeId, detection: Detection, now_us: u64) -> Vec<Output> {
        let out = self.on_node_lost_unsettled(node, detection, now_us);
        self.settle_watching(out, now_us)
    }

    fn on_node_lost_unsettled(&mut self, node: NodeId, detection: Detection, now_us: u64) -> Vec<Output> {
        let mut out = Vec::new();
        self.node_failed(node, detection, now_us, &mut out);
        out
    }

    /// Declares node `node` failed, if it still counts as live.
    fn node_failed(&mut self, node: NodeId, detection: Detection, now_us: u64, out: &mut Vec<Output>) {
        if let Some(n) = self.nodes.get(&node).filter(|n| n.live) {
            let silent_ms = now_us.saturating_sub(n.last_heard_us) / 1_000;
            self.node_down(node, silent_ms, detection, out);
        }
    }

    /// Time passed: closes batches whose wait is over, sends heartbeats, declares silent nodes
    /// failed and stops partitions that did not load in time.
    pub fn tick(&mut self, now_us: u64) -> Vec<Output> {
        let out = self.tick_unsettled(now_us);
        self.settle_watching(out, now_us)
    }

    fn tick_unsettled(&mut self, now_us: u64) -> Vec<Output> {
        let mut out = Vec::new();
        for p in self.partitions.values_mut() {
            if p.phase == Phase::Serving {
                if let Some(batch) = p.sequencer.tick(now_us) {
                    p.send(batch, &mut out);
                }
            }
        }
        if now_us >= self.next_heartbeat_us {
            let nodes: Vec<NodeId> = self.live_nodes().collect();
            if !nodes.is_empty() {
                out.push(Output::ToNodes { nodes, msg: CoordinatorToNode::Heartbeat { now_ms: now_us / 1_000 } });
            }
            self.next_heartbeat_us = now_us + self.heartbeat_us;
        }
        let silent: Vec<(NodeId, u64)> = self
            .nodes
            .iter()
            .filter(|(&id, n)| n.live && now_us.saturating_sub(n.last_heard_us) >= self.silence_allowed_us(id))
            .map(|(&id, n)| (id, (now_us - n.last_heard_us) / 1_000))
            .collect();
        for (node, silent_ms) in silent {
            self.node_down(node, silent_ms, Detection::HeartbeatTimeout, &mut out);
        }
        self.watch_lagging(now_us, &mut out);
        if now_us >= self.load_deadline_us {
            for p in self.partitions.values_mut().filter(|p| p.phase == Phase::Loading) {
                let waiting: Vec<NodeId> = p.members().filter(|n| !p.loaded.contains_key(n)).collect();
                let reason = format!("replicas on nodes {waiting:?} did not load within timeouts.load_timeout_s");
                p.stop(reason.clone(), &mut out);
                out.push(Output::Event(Event::PartitionStopped { partition: p.id, reason }));
            }
        }
        out
    }

    /// How long `node` may be silent before it is counted failed: the failure timeout, or
    /// [`JOINER_PATIENCE_TIMEOUTS`] of them for a node that only rejoins.
    fn silence_allowed_us(&self, node: NodeId) -> u64 {
        let joining = self.partitions.values().any(|p| p.joining.iter().any(|(n, _)| *n == node));
        let serving = self.partitions.values().any(|p| p.members().any(|n| n == node));
        if joining && !serving {
            JOINER_PATIENCE_TIMEOUTS * self.failure_timeout_us
        } else {
            self.failure_timeout_us
        }
    }

    /// When [`Coordinator::tick`] must next be called.
    pub fn next_deadline_us(&self) -> Option<u64> {
        let batches =
            self.partitions.values().filter(|p| p.phase == Phase::Serving).filter_map(|p| p.sequencer.deadline_us());
        let failures =
            self.nodes.iter().filter(|(_, n)| n.live).map(|(&id, n)| n.last_heard_us + self.silence_allowed_us(id));
        let load = self.partitions.values().any(|p| p.phase == Phase::Loading).then_some(self.load_deadline_us);
        let lagging =
            self.partitions.values().flat_map(|p| p.lagging_since.values().map(|&t| t + self.failure_timeout_us));
        let catch_ups = self.partitions.values().filter_map(|p| p.catch_up.deadline_us());
        batches.chain(failures).chain(load).chain(lagging).chain(catch_ups).chain([self.next_heartbeat_us]).min()
    }

    /// Watches the replicas lagging past `replica_lag_batches_max` behind a majority's
    /// answers (docs/cluster.md, "Agreement"): each is reported when it starts, and failed
    /// once it has lagged for `failure_timeout_ms` — unless that would leave its partition
    /// without a majority of its replicas live, or another live replica of it has not been
    /// heard from for two heartbeats (the replicas ahead may be dead and not yet detected:
    /// the laggard may then be the only state left, and failing it would lose the partition;
    /// found by `glass sim --lag-batches 3 --seed 457`). Meanwhile the partition's batches
    /// wait for every live replica, so nothing more is kept for the laggard.
    ///
    /// In the passive modes the laggard is a backup more than `replica_lag_batches_max`
    /// batches behind the primary's answers (by the `BackupApplied` of its heartbeats): its
    /// primary no longer ships to it (its link's queue filled: "backup too far behind"), so it
    /// would stay behind for good while counted live; failed once the primary is heard from,
    /// it rejoins (found by `glass failover --mode active-passive` at 20 warehouses, issue
    /// 35: the backup's node installed a 1.1 GB copy on cores shared with the load).
    fn watch_lagging(&mut self, now_us: u64, out: &mut Vec<Output>) {
        let mut failing = Vec::new();
        for p in self.partitions.values_mut() {
            let passive = !p.mode.every_replica_executes();
            let laggards = if passive { p.passive_laggards() } else { p.agreement.laggards() };
            p.lagging_since.retain(|n, _| laggards.iter().any(|(m, _)| m == n));
            for &(node, behind) in &laggards {
                if let std::collections::btree_map::Entry::Vacant(e) = p.lagging_since.entry(node) {
                    e.insert(now_us);
                    out.push(Output::Event(Event::ReplicaLagging { partition: p.id, node, behind }));
                }
            }
            if passive {
                let primary_heard = p.agreement.live().iter().all(|m| {
                    self.nodes.get(m).is_some_and(|l| now_us.saturating_sub(l.last_heard_us) <= 2 * self.heartbeat_us)
                });
                let lagged_long = |n: &NodeId| {
                    p.lagging_since.get(n).is_some_and(|&since| now_us.saturating_sub(since) >= self.failure_timeout_us)
                };
                if let Some(&(node, behind)) = laggards.iter().find(|(n, _)| primary_heard && lagged_long(n)) {
                    failing.push((p.id, node, behind));
                }
                continue;
            }
            let Quorum::Majority { replicas } = p.quorum else { continue };
            let live = p.agreement.live();
            if live.len() <= replicas / 2 + 1 {
                continue;
            }
            let others_heard = |node: NodeId| {
                live.iter().filter(|&&m| m != node).all(|m| {
                    self.nodes.get(m).is_some_and(|l| now_us.saturating_sub(l.last_heard_us) <= 2 * self.heartbeat_us)
                })
            };
            if let Some(&(node, behind)) = laggards.iter().find(|(n, _)| {
                p.lagging_since.get(n).is_some_and(|&since| now_us.saturating_sub(since) >= self.failure_timeout_us)
                    && others_heard(*n)
            }) {
                failing.push((p.id, node, behind));
            }
        }
        for (partition, node, behind) in failing {
            if self.is_node_live(node) {
                // Not silent: it is heard from, only behind.
                self.node_down(node, 0, Detection::Lagging { partition, behind }, out);
            }
        }
    }

    pub(super) fn node_down(&mut self, node: NodeId, silent_ms: u64, detection: Detection, out: &mut Vec<Output>) {
        let Some(n) = self.nodes.get_mut(&node) else { return };
        n.live = false;
        out.push(Output::Event(Event::NodeDown { node, silent_ms, detection }));
        for p in self.partitions.values_mut() {
            p.joining.retain(|(n, _)| *n != node);
            if let Some(catching_up) = p.catching_up_mut() {
                catching_up.remove(&node);
            }
            if p.members().any(|n| n == node) {
                p.catch_up.note_failure();
                p.replica_down(node, &mut self.membership_epoch, out);
            }
        }
        self.recalls_lose(node, out);
    }
}

impl Partition {
    /// Passive modes: the backups counted live more than `lag_batches_max` batches behind the
    /// primary's answers, with how far (`Coordinator::watch_lagging`).
    fn passive_laggards(&self) -> Vec<(NodeId, usize)> {
        let Some(s) = self.passive() else { return Vec::new() };
        if self.phase != Phase::Serving {
            return Vec::new();
        }
        let answered = self.agreement.decided_through();
        s.backups
            .iter()
            .filter_map(|&b| {
                let behind = answered.saturating_sub(s.backup_applied.get(&b).copied().unwrap_or(0)) as usize;
                (behind > self.lag_batches_max).then_some((b, behind))
            })
            .collect()
    }
}
