//! Faults, drawn from the seed or made by a test, and what the node processes and the
//! coordinators do about them (docs/design.md §14):
//!
//! - a **coordinator crash** kills its process: its memory is gone (its stored raft state is
//!   kept, as its file is), its links break at once (the nodes see them close and dial again),
//!   and the requests in flight to it are answered "outcome unknown" by their client library;
//!   a restart brings it back from what it stored, as a standby;
//! - a **coordinator cut** loses the raft messages between it and the others, both ways or
//!   only what it sends, while its node links stay up (a split brain's setting);
//!
//! - a **crash** kills a node's process: its replicas' memory is gone and whatever was in
//!   flight on its link is lost; the coordinator learns of it only by the node's silence
//!   (`timeouts.failure_timeout_ms`);
//! - a **drop** breaks a node's link (QUIC never loses single messages on a live connection):
//!   everything in flight on it is lost, the coordinator counts the node failed at once
//!   (the carrier's `on_node_lost`, as its process does on `NodeLost`); the node's machine
//!   dials again after `CONNECT_RETRY_MS`, and its partitions rejoin;
//! - **lost heartbeats**: a node's heartbeats are suppressed for a while (a stalled writer);
//!   if the coordinator declares it failed meanwhile, its carrier closes the link (as on every
//!   `NodeDown`), and the node dials again and rejoins;
//! - a **restart** (`glass node --rejoin`) is possible once the coordinator counts the node
//!   failed (its process refuses a second connection from a live node): the node comes back
//!   on a new link, empty, and asks to rejoin each partition (`transfer` says how a replica
//!   rejoins).
//!
//! Guarantees: a fault is drawn only when it cannot take a partition's last replica (see
//! [`Sim::may_fault`]: the replication factor's promise, not something to test), one
//! coordinator fault at a time and only with three or more coordinators, and node faults wait
//! while a coordinator fault or a take-over is under way.

use std::collections::BTreeMap;

use coordinator::carrier::Carrier;
use coordinator::ClientId;
use node::machine::{NodeMachine, Standing};
use wire::messages::{ClientResult, CoordinatorId, NodeId, PartitionId};

use super::{equipped, roles, CoordLink, Partition, Sim, START_US, TORN_BYTES_MAX};

impl Sim {
    // ----- faults -----

    fn trace_fault(&self, what: &str, node: NodeId) {
        if self.trace {
            eprintln!("{:>10} µs step {:>6}: FAULT {what} node {node}", self.now_us - START_US, self.step);
        }
    }

    /// Crashes `node`'s process: its memory and its links' messages are lost; a full-stack
    /// replica's log loses its unsynced tail (or keeps a torn part of it).
    pub fn crash(&mut self, node: NodeId) {
        self.trace_fault("crash", node);
        let n = &self.nodes[&node];
        if !n.up {
            return;
        }
        if n.partitions.values().any(|m| m.standing() != Standing::Serving) {
            self.stats.crashes_while_rejoining += 1;
        }
        let source_of_rejoin = self
            .nodes
            .values()
            .any(|other| other.up && other.partitions.values().any(|m| m.plan().is_some_and(|(src, _)| src == node)));
        if source_of_rejoin {
            self.stats.crashes_of_rejoin_source += 1;
        }
        // Power goes first: nothing the dying process does reaches its disk.
        let torn = self.rng.below(2) == 0;
        let rng = &mut self.rng;
        self.disks.crash(node, || if torn { rng.below(TORN_BYTES_MAX + 1) as usize } else { 0 });
        let process = self.nodes[&node].process;
        let held =
            self.nodes[&node].partitions.iter().filter_map(|(&p, m)| Some((p, m.replica()?.last_ts()?))).collect();
        self.checker.crashed(node, process, held);
        let n = self.node_mut(node);
        n.up = false;
        n.partitions.clear();
        n.peers.clear();
        let links: Vec<u64> = n.links.values().map(|l| l.id).collect();
        for l in n.links.values_mut() {
            l.alive = false;
        }
        let process = n.process;
        for link in links {
            self.net.cut(node, link, None);
        }
        self.net.cut(node, process, None);
        self.stats.crashes += 1;
    }

    /// Breaks `node`'s coordinator link (a drop): what was in flight on it is lost, the
    /// coordinator counts the node failed at once, and the node's machine dials again
    /// after `CONNECT_RETRY_MS` — its partitions then rejoin.
    pub fn drop_link(&mut self, node: NodeId) {
        self.trace_fault("drop the leader link of", node);
        let Some((c, _)) = self.leader() else { return };
        if !self.end_link(node, c) {
            return;
        }
        self.stats.drops += 1;
        let how = "the simulated link broke".to_string();
        let conn = self.nodes[&node].links[&c].id;
        let detection = coordinator::Detection::ConnectionLost { how };
        self.with_carrier(c, |k, now, links| k.on_node_lost(node, conn, detection, now, links));
    }
    /// The node's machine dials the coordinator again: a new link (the coordinator's process
    /// declares a node it still counts live failed first, as it does when a node connects
    /// again).
    pub(super) fn reconnect(&mut self, node: NodeId, c: CoordinatorId) {
        self.trace_fault(&format!("reconnect to coordinator {c}"), node);
        let now = self.now_us;
        if !self.is_coordinator_up(c) {
            self.node_mut(node).machine.on_dial_failed(c, now);
            return;
        }
        let link = self.fresh_id();
        let n = self.node_mut(node);
        let old = n.links.insert(c, CoordLink { id: link, alive: true, declared_failed: false }).map(|l| l.id);
        if let Some(old) = old {
            self.net.cut(node, old, None);
        }
        self.stats.reconnects += 1;
        let effects = self.node_mut(node).machine.on_link_up(c, now);
        self.perform(node, effects);
        self.connected(node, c);
    }

    /// Node `node` connected to coordinator `c` (a new connection: a coordinator that still
    /// counts the node live declares it failed first, as its process does when a node
    /// connects again): a leader tells it the epoch and its memberships.
    fn connected(&mut self, node: NodeId, c: CoordinatorId) {
        let conn = self.nodes[&node].links[&c].id;
        self.with_carrier(c, |k, now, links| k.on_node_up(node, conn, now, links));
    }

    /// `node`'s replica of `partition` drops its state and rejoins, if it serves (the leader's
    /// membership left it out).
    pub(super) fn rejoin_one(&mut self, node: NodeId, partition: PartitionId) {
        let (mode, pending) = (self.mode, self.pending_max);
        let rejoins = self.nodes[&node].partitions.get(&partition).is_some_and(|m| m.rejoins_when_left_out());
        if !rejoins {
            return;
        }
        self.trace_line(|| format!("node {node} is left out of p{partition}'s membership: it rejoins"));
        self.checker.forget(node, Some(partition));
        let process = self.nodes[&node].process;
        self.fetches.retain(|f| !(f.node == node && f.process == process && f.partition == partition));
        let (fresh, effects) = Partition::rejoining(mode, node, partition, pending);
        let mut fresh = equipped(fresh, &self.config);
        if let Some(old) = self.nodes[&node].partitions.get(&partition) {
            fresh = fresh.numbering_fetches_after(old);
        }
        drop(self.node_mut(node).partitions.insert(partition, fresh));
        self.perform_partition(node, partition, effects);
    }
    /// Every partition of `node` drops its state and rejoins (its link came back).
    pub(super) fn rejoin_all(&mut self, node: NodeId) {
        let (mode, pending) = (self.mode, self.pending_max);
        let pids: Vec<PartitionId> = self.nodes[&node].partitions.keys().copied().collect();
        let process = self.nodes[&node].process;
        self.fetches.retain(|f| !(f.node == node && f.process == process));
        self.checker.forget(node, None);
        for p in pids {
            let (fresh, effects) = Partition::rejoining(mode, node, p, pending);
            // The old state (a full stack's database) goes first.
            let mut fresh = equipped(fresh, &self.config);
            if let Some(old) = self.nodes[&node].partitions.get(&p) {
                fresh = fresh.numbering_fetches_after(old);
            }
            drop(self.node_mut(node).partitions.insert(p, fresh));
            self.perform_partition(node, p, effects);
        }
    }

    /// Suppresses `node`'s heartbeats for `us`.
    pub fn mute(&mut self, node: NodeId, us: u64) {
        self.trace_fault(&format!("mute heartbeats for {us} µs of"), node);
        let until = self.now_us + us;
        self.node_mut(node).mute_until_us = until;
        self.stats.mutes += 1;
    }

    /// Whether `node`'s process runs with its coordinator link broken: its machine dials
    /// again by itself (no operator restarts it).
    pub fn is_redialing(&self, node: NodeId) -> bool {
        let n = &self.nodes[&node];
        n.up && self.leader().is_some_and(|(c, _)| n.links.get(&c).is_some_and(|l| !l.alive))
    }
    /// Whether a running process has a link to a backup's node that is not up (its dials
    /// failed so far: what it ships waits on the link until a redial reaches the backup).
    pub fn is_redialing_a_backup(&self) -> bool {
        self.nodes.values().any(|n| n.up && n.machine.peers().any(|(_, s)| s != node::machine::PeerState::Up))
    }
    /// Whether `node` may be restarted: the coordinator counts it failed.
    pub fn can_restart(&self, node: NodeId) -> bool {
        self.leader().is_some_and(|(_, c)| !c.is_node_live(node))
    }
    /// Restarts `node` (`glass node --rejoin`): its old process, if any, is gone; the new
    /// one connects on a new link, empty (full stack: with its log as the disk kept it), and
    /// asks to rejoin each of its partitions.
    ///
    /// Panics unless [`Sim::can_restart`].
    pub fn restart(&mut self, node: NodeId) {
        assert!(self.can_restart(node), "node {node} is live: the coordinator would refuse its new connection");
        self.trace_fault("restart", node);
        if self.nodes[&node].up {
            // The old process is killed first (its unsynced log tail goes with it).
            self.crash(node);
            self.stats.crashes -= 1;
        }
        let process = self.fresh_id();
        let now = self.now_us;
        let roles = roles(&self.config, node, true);
        let mut machine = NodeMachine::new(&self.config, node, &roles, now);
        let mut links = BTreeMap::new();
        for c in self.coordinator_ids() {
            let alive = self.is_coordinator_up(c);
            if alive {
                let first = machine.on_link_up(c, now);
                debug_assert!(first.is_empty());
            } else {
                machine.on_dial_failed(c, now);
            }
            links.insert(c, CoordLink { id: self.fresh_id(), alive, declared_failed: false });
        }
        let n = self.node_mut(node);
        n.up = true;
        n.process = process;
        n.links = links;
        n.mute_until_us = 0;
        n.machine = machine;
        n.partitions.clear();
        n.peers.clear();
        n.listening_from_us = now;
        let (mode, pending) = (self.mode, self.pending_max);
        for (p, _) in roles {
            let (m, effects) = Partition::rejoining(mode, node, p, pending);
            let m = equipped(m, &self.config);
            self.node_mut(node).partitions.insert(p, m);
            self.perform_partition(node, p, effects);
        }
        let effects = self.node_mut(node).machine.start();
        self.perform(node, effects);
        for c in self.coordinator_ids() {
            self.connected(node, c);
        }
        self.stats.restarts += 1;
    }

    /// Whether some node other than `node` serves every partition solidly: its process runs,
    /// its link is connected, its heartbeats flow, and the coordinator counts it a live
    /// replica of each (a replica that just rejoined counts: if every replica a pending batch
    /// was sent to fails, the rejoined one's results decide it, or it is answered "outcome
    /// unknown"). Faults are drawn only when this holds, so that a partition never loses
    /// every replica (active-active keeps no log: such a partition could not come back, which
    /// is the replication factor's promise, not something to test).
    pub fn others_solid(&self, node: NodeId) -> bool {
        let Some((_, c)) = self.leader() else { return false };
        c.status().iter().all(|st| st.live_replicas.iter().any(|&m| m != node && self.solid(m, st.partition)))
    }
    /// Whether node `m`'s process runs, its link is connected, its heartbeats flow, the
    /// coordinator counts it live, and its replica of `partition` serves.
    fn solid(&self, m: NodeId, partition: PartitionId) -> bool {
        let n = &self.nodes[&m];
        self.is_healthy(m)
            && self.now_us >= n.mute_until_us
            && n.partitions.get(&partition).and_then(Partition::replica).is_some_and(|r| r.stopped().is_none())
    }
    /// Whether a fault may be drawn on `node` now: [`Sim::others_solid`], and in the passive
    /// modes every other replica of every partition solid and counted: a promotion drops the
    /// backups it does not promote (docs/design.md §10: a promoted backup ships to no one
    /// until the others rejoin), so a second fault while one is being handled could take a
    /// partition's last replica — the replication factor's promise again, not a defect.
    pub fn may_fault(&self, node: NodeId) -> bool {
        if !self.others_solid(node) {
            return false;
        }
        if self.mode.every_replica_executes() {
            return true;
        }
        let Some((_, c)) = self.leader() else { return false };
        let status = c.status();
        self.config.partitions.iter().all(|p| {
            let Some(st) = status.iter().find(|st| st.partition == p.id) else { return false };
            p.replicas.iter().all(|&m| m == node || (st.live_replicas.contains(&m) && self.solid(m, p.id)))
        })
    }

    /// Maybe one node fault, drawn from the seed at the configured rates.
    pub(super) fn maybe_fault(&mut self) {
        if !self.faults.any_node_faults() {
            return;
        }
        self.maybe_coordinator_fault();
        // Node faults wait while a coordinator fault or a take-over is under way: the default
        // cluster promises to survive one process lost at a time (docs/cluster.md).
        if self.coordinator_faulty() || !self.coordinators_settled() {
            return;
        }
        let f = self.faults;
        let roll = self.rng.below(10_000);
        let ids = self.node_ids();
        let node = ids[self.rng.below(ids.len() as u64) as usize];
        let mut at = f.crash_per_10k;
        if roll < at {
            if self.nodes[&node].up && self.may_fault(node) {
                self.crash(node);
            }
            return;
        }
        at += f.drop_per_10k;
        if roll < at {
            if self.may_fault(node) {
                self.drop_link(node);
            }
            return;
        }
        at += f.mute_per_10k;
        if roll < at {
            if self.nodes[&node].up && self.may_fault(node) {
                let timeout_us = self.config.timeouts.failure_timeout_ms * 1_000;
                let us = self.rng.uniform(timeout_us / 2, 3 * timeout_us);
                self.mute(node, us);
            }
            return;
        }
        at += f.restart_per_10k;
        if roll < at && !self.is_healthy(node) && !self.is_redialing(node) && self.can_restart(node) {
            self.restart(node);
        }
    }

    // ----- coordinator faults (docs/design.md §11) -----

    /// Crashes coordinator `c`'s process: its memory goes (its stored group state stays),
    /// its links break — its nodes see them close, the other coordinators usually see its
    /// tethers end, and its clients' requests in flight are answered "outcome unknown" by
    /// their client library.
    pub fn crash_coordinator(&mut self, c: CoordinatorId) {
        if !self.is_coordinator_up(c) {
            return;
        }
        if self.trace {
            eprintln!("{:>10} µs step {:>6}: FAULT crash coordinator {c}", self.now_us - START_US, self.step);
        }
        let now = self.now_us;
        let sc = self.coordinators.get_mut(&c).expect("configured");
        sc.carrier = None;
        let open: Vec<(ClientId, u64)> = std::mem::take(&mut sc.open).into_iter().collect();
        for (client, request_id) in open {
            let reason = format!("the connection to coordinator {c} was lost");
            let result = ClientResult::OutcomeUnknown { ts: wire::messages::Timestamp(0), reason };
            self.answer(c, client, wire::messages::ClientReply { request_id, result });
        }
        for node in self.node_ids() {
            let n = self.node_mut(node);
            let Some(l) = n.links.get_mut(&c).filter(|l| l.alive) else { continue };
            l.alive = false;
            let link = l.id;
            if n.up {
                n.machine.on_link_lost(c, now);
            }
            self.net.cut(node, link, None);
        }
        self.stats.coordinator_crashes += 1;
        // The others see its liveness tethers end (docs/design.md §11, "A leader's death"):
        // if it led, a survivor stands for election at once. One crash in four it held none
        // (a port taken, say), and raft's election timeout must notice instead.
        if self.rng.below(4) != 0 {
            let survivors: Vec<CoordinatorId> =
                self.coordinator_ids().into_iter().filter(|&o| o != c && self.is_coordinator_up(o)).collect();
            for o in survivors {
                self.with_carrier(o, |k, now, links| k.on_coordinator_died(c, now, links));
            }
            self.stats.coordinator_deaths_seen += 1;
        }
    }

    /// Restarts coordinator `c` from the group state it stored; the nodes dial it again on
    /// their own.
    pub fn restart_coordinator(&mut self, c: CoordinatorId) {
        if self.is_coordinator_up(c) {
            return;
        }
        if self.trace {
            eprintln!("{:>10} µs step {:>6}: FAULT restart coordinator {c}", self.now_us - START_US, self.step);
        }
        let process = self.fresh_id();
        let now = self.now_us;
        let sc = &self.coordinators[&c];
        let carrier = Carrier::new(&self.config, c, sc.election_offset_ticks, sc.stored.clone(), now)
            .expect("a coordinator restarts from what it stored");
        let sc = self.coordinators.get_mut(&c).expect("configured");
        sc.carrier = Some(carrier);
        sc.process = process;
        self.tick_coordinator(c);
    }

    /// Cuts coordinator `c` off from the other coordinators (raft messages lost), both ways
    /// or, `one_way`, only what it sends; its node links stay up — a split brain's setting.
    pub fn cut_coordinator(&mut self, c: CoordinatorId, one_way: bool) {
        if self.trace {
            let how = if one_way { "what it sends" } else { "both ways" };
            eprintln!("{:>10} µs step {:>6}: FAULT cut coordinator {c} off, {how}", self.now_us - START_US, self.step);
        }
        for o in self.coordinator_ids().into_iter().filter(|&o| o != c) {
            self.coordinator_cuts.insert((c, o));
            if !one_way {
                self.coordinator_cuts.insert((o, c));
            }
        }
        self.stats.coordinator_cuts += 1;
    }

    /// Whether a coordinator fault is under way: one down, or cuts between them.
    pub fn coordinator_faulty(&self) -> bool {
        !self.coordinator_cuts.is_empty() || self.coordinators.values().any(|sc| sc.carrier.is_none())
    }

    /// Ends the coordinator fault: cuts healed, a crashed coordinator restarted.
    pub fn end_coordinator_fault(&mut self) {
        if !self.coordinator_faulty() {
            return;
        }
        self.coordinator_cuts.clear();
        for c in self.coordinator_ids() {
            self.restart_coordinator(c);
        }
    }

    /// Whether the group has a leader that took over and no take-over is under way.
    pub fn coordinators_settled(&self) -> bool {
        self.leader().is_some() && self.coordinators.values().all(|sc| sc.member().is_none_or(|m| !m.taking_over()))
    }

    /// Maybe one coordinator fault, drawn from the seed at the configured rate: only with
    /// three or more coordinators, one at a time, on a settled cluster.
    fn maybe_coordinator_fault(&mut self) {
        let f = self.faults;
        if f.coordinator_per_10k == 0 || self.coordinators.len() < 3 {
            return;
        }
        if self.rng.below(10_000) >= f.coordinator_per_10k {
            return;
        }
        if self.coordinator_faulty() || !self.coordinators_settled() {
            return;
        }
        let all_solid =
            self.node_ids().iter().all(|&n| self.is_full_member(n) && self.now_us >= self.nodes[&n].mute_until_us);
        if !all_solid {
            return;
        }
        let ids = self.coordinator_ids();
        // The leader half the time: its loss is the interesting one.
        let c = match (self.rng.below(2), self.leader()) {
            (0, Some((l, _))) => l,
            _ => ids[self.rng.below(ids.len() as u64) as usize],
        };
        let timeout_us = self.config.timeouts.failure_timeout_ms * 1_000;
        self.coordinator_fault_until_us = self.now_us + self.rng.uniform(timeout_us, 6 * timeout_us);
        match self.rng.below(3) {
            0 => self.crash_coordinator(c),
            1 => self.cut_coordinator(c, false),
            _ => self.cut_coordinator(c, true),
        }
    }
}
