//! A simulated node's world, as the node's carrier (`node::carrier`) sees it: the same
//! `carry` and `carry_partition` the node process runs, over the simulator's network, disks
//! and clock instead of QUIC, files and threads. What the simulator supplies:
//! - messages to a coordinator go on the node's current link to it, if it is up (lost with a
//!   link that is down, as in the process);
//! - a coordinator message for a partition runs its machine at once (an executor's inbox
//!   that always has room);
//! - a shipment reaches a backup only on the peer link its primary's process opened, to the
//!   backup's process that link's dial reached; while the link is not up (its last dial
//!   failed: the backup's process was down) shipments wait on it and go out, in order, once a
//!   redial reaches the backup; a backup's queue is the shipments held or in flight to it,
//!   bounded by `node::carrier::PEER_QUEUE_MAX` as the process's link queue is;
//! - a dial (of a coordinator or of a backup's node) is answered at once: the link is up if
//!   the peer's process runs (and, for a node, listens: at the cluster's start a process may
//!   listen late), else the dial failed;
//! - a full-stack restart recovery runs on the node's simulated disk;
//! - a fetch is scheduled (`transfer`) after the delay the machine asked for.
//!
//! Guarantees: a replica error other than "stopped" is recorded as a violation, never
//! swallowed; so is a message the process would only log (a shutdown, a partition not held);
//! every result a replica emits is checked as it leaves ([`invariants`](super::invariants)).

use node::carrier::{NodeLinks, PartitionLinks, Queued};
use node::error::{RejoinError, ReplicaError};
use node::fullstack::{FullStack, Restart};
use node::machine::{Began, Effect, FetchOrder, NodeEffect, NodeMachine, PeerDial};
use node::replica::Emit;
use wire::channel::{ChannelMessage, CoordinatorToNode, NodeToCoordinator, PeerReply};
use wire::messages::{CoordinatorId, NodeId, PartitionId, Shipment, StateDigest};

use super::{Partition, PeerAddr, PendingFetch, Sim, SimPeer};
use crate::error::Violation;
use crate::net::{Carried, Envelope, PeerMsg, ShipLink};

impl Sim {
    /// Carries out node `node`'s machine's effects, through the node's carrier.
    pub(super) fn perform(&mut self, node: NodeId, effects: Vec<NodeEffect>) {
        node::carrier::carry(&mut NodeWorld { sim: self, node }, effects);
    }

    /// Carries out the effects of node `node`'s machine of `partition`, through the node's
    /// carrier.
    pub(super) fn perform_partition(&mut self, node: NodeId, partition: PartitionId, effects: Vec<Effect<PeerAddr>>) {
        node::carrier::carry_partition(&mut PartitionWorld { sim: self, node, partition }, effects);
    }
}

/// Node `node`'s world in the simulation.
struct NodeWorld<'a> {
    sim: &'a mut Sim,
    node: NodeId,
}

impl NodeLinks for NodeWorld<'_> {
    fn machine(&mut self) -> &mut NodeMachine {
        &mut self.sim.node_mut(self.node).machine
    }

    fn now_us(&self) -> u64 {
        self.sim.now_us
    }

    fn to_coordinator(&mut self, coordinator: CoordinatorId, msg: NodeToCoordinator) {
        self.sim.send_from_node(self.node, coordinator, msg);
    }

    fn to_partition(&mut self, partition: PartitionId, msg: CoordinatorToNode) {
        let Some(m) = self.sim.node_mut(self.node).partitions.get_mut(&partition) else { return };
        let effects = m.on_coordinator(msg);
        self.sim.perform_partition(self.node, partition, effects);
    }

    fn ship(&mut self, backups: &[NodeId], shipment: Shipment, queued: &mut Vec<(NodeId, Queued)>) {
        let (sim, node) = (&mut *self.sim, self.node);
        sim.trace_line(|| format!("node {node} ships p{} batch {} to {backups:?}", shipment.partition, shipment.seq));
        let from_process = sim.nodes[&node].process;
        for &b in backups {
            let to = (sim.nodes[&b].up, sim.nodes[&b].process);
            let q = match sim.node_mut(node).peers.get_mut(&b) {
                // Not up yet: queued on the link while it dials.
                Some(SimPeer { reached: None, held, .. }) => {
                    held.push(shipment.clone());
                    Queued::Holds(held.len())
                }
                Some(SimPeer { reached: Some(process), .. }) if to == (true, *process) => {
                    let link = *process;
                    let msg = Carried::Peer { from: node, from_process, msg: PeerMsg::Ship(shipment.clone()) };
                    sim.net.send(Envelope { node: b, link, msg });
                    Queued::Holds(sim.net.shipments_on(ShipLink { to: b, link, from: node, from_process }))
                }
                // The link to the backup's process is gone (it ended, or was never opened).
                _ => {
                    sim.trace_line(|| format!("node {node} lost its link to backup {b}"));
                    Queued::Lost
                }
            };
            queued.push((b, q));
        }
    }

    fn open_peer(&mut self, backup: NodeId, generation: u64) {
        let link = SimPeer { generation, reached: None, held: Vec::new() };
        self.sim.node_mut(self.node).peers.insert(backup, link);
        self.dial_peer(backup, generation);
    }

    /// Answered at once: up if the backup's process runs (the shipments queued meanwhile go
    /// out, in order), else the dial failed.
    fn dial_peer(&mut self, backup: NodeId, generation: u64) {
        let (sim, node) = (&mut *self.sim, self.node);
        let b = &sim.nodes[&backup];
        let to = (b.up && sim.now_us >= b.listening_from_us, b.process);
        let from_process = sim.nodes[&node].process;
        let Some(link) = sim.node_mut(node).peers.get_mut(&backup).filter(|l| l.generation == generation) else {
            return;
        };
        let outcome = if to.0 {
            link.reached = Some(to.1);
            for shipment in std::mem::take(&mut link.held) {
                let msg = Carried::Peer { from: node, from_process, msg: PeerMsg::Ship(shipment) };
                sim.net.send(Envelope { node: backup, link: to.1, msg });
            }
            PeerDial::Up
        } else {
            sim.trace_line(|| format!("node {node} cannot reach backup {backup}"));
            sim.stats.peer_dials_failed += 1;
            PeerDial::Unreachable
        };
        let now = sim.now_us;
        let effects = sim.node_mut(node).machine.on_peer_dial(backup, generation, outcome, now);
        sim.perform(node, effects);
    }

    fn close_peer(&mut self, backup: NodeId) {
        self.sim.node_mut(self.node).peers.remove(&backup);
    }

    fn dial(&mut self, coordinator: CoordinatorId) {
        self.sim.reconnect(self.node, coordinator);
    }

    fn rejoin_all(&mut self) {
        self.sim.rejoin_all(self.node);
    }

    fn rejoin(&mut self, partition: PartitionId) {
        self.sim.rejoin_one(self.node, partition);
    }

    fn shutdown(&mut self, _reason: String) {
        self.sim.violations.push(Violation::UnexpectedMessage { node: self.node, name: "Shutdown" })
    }

    fn not_held(&mut self, partition: PartitionId, _name: &'static str) {
        self.sim.violations.push(Violation::UnheldPartition { node: self.node, partition })
    }
}

/// The world of node `node`'s partition `partition` in the simulation.
struct PartitionWorld<'a> {
    sim: &'a mut Sim,
    node: NodeId,
    partition: PartitionId,
}

impl PartitionLinks<PeerAddr> for PartitionWorld<'_> {
    fn machine(&mut self) -> Option<&mut Partition> {
        self.sim.node_mut(self.node).partitions.get_mut(&self.partition)
    }

    fn take_digest_copy(&mut self) {
        self.sim.take_digest_copy(self.node, self.partition);
    }

    fn emit(&mut self, emitted: Emit) {
        match &emitted {
            Emit::ToCoordinator(NodeToCoordinator::Results(r)) => self.sim.check_results(self.node, r),
            Emit::ToCoordinator(NodeToCoordinator::ResultsDigest(d)) => {
                // Another replica sends the outputs: check the ones this replica keeps, and
                // that the digest it sends is theirs.
                let kept = self.machine().and_then(|m| m.replica()).and_then(|r| r.kept_outputs(d.seq)).cloned();
                self.sim.check_results_digest(self.node, d, kept);
            }
            _ => {}
        }
        let now = self.sim.now_us;
        let effects = self.sim.node_mut(self.node).machine.on_emit(emitted, now);
        self.sim.perform(self.node, effects);
    }

    fn reply(&mut self, to: PeerAddr, msg: PeerReply) {
        let node = self.node;
        match msg {
            PeerReply::ShipAck { partition, seq } => {
                let from_process = self.sim.nodes[&node].process;
                let msg = Carried::Peer { from: node, from_process, msg: PeerMsg::Ack { partition, seq } };
                self.sim.net.send(Envelope { node: to.node, link: to.process, msg });
            }
            msg => self.sim.violations.push(Violation::UnexpectedMessage { node, name: msg.name() }),
        }
    }

    fn fetch(&mut self, order: FetchOrder) {
        let sim = &mut *self.sim;
        let process = sim.nodes[&self.node].process;
        let FetchOrder { id: order, source, after_seq, kind, delay_ms, .. } = order;
        let at_us = sim.now_us + delay_ms * 1_000;
        let id = sim.next_id;
        sim.next_id += 1;
        let f = PendingFetch {
            id,
            order,
            node: self.node,
            process,
            partition: self.partition,
            source,
            after_seq,
            kind,
            at_us,
        };
        sim.fetches.push(f);
        sim.stats.fetches += 1;
    }

    fn abandon_fetch(&mut self, order: u64) {
        let (node, partition) = (self.node, self.partition);
        let before = self.sim.fetches.len();
        self.sim.fetches.retain(|f| !(f.node == node && f.partition == partition && f.order == order));
        if self.sim.fetches.len() < before {
            self.sim.stats.fetches_abandoned += 1;
            self.sim.trace_line(|| format!("node {node} abandons p{partition}'s fetch {order}"));
        }
    }

    fn recover(&mut self, restart: &Restart) -> Result<FullStack, RejoinError> {
        let (sim, node, partition) = (&mut *self.sim, self.node, self.partition);
        sim.stats.recoveries += 1;
        sim.checker.failed_over.insert(partition);
        if matches!(restart, Restart::OwnLog) {
            sim.checker.recovered.insert(partition);
        }
        sim.checker.forget(node, Some(partition));
        if let Restart::Image(_) = restart {
            sim.stats.base_backups += 1;
        }
        sim.trace_line(|| format!("node {node} restarts p{partition}'s database: {}", restart_name(restart)));
        sim.disks.recover(node, partition, restart)
    }

    fn ready(&mut self, _digest: StateDigest, _start: Began) {}

    fn failed(&mut self, reason: String) {
        let (node, partition) = (self.node, self.partition);
        self.sim.trace_line(|| format!("node {node} gives up rejoining p{partition}: {reason}"));
        self.sim.stats.rejoins_given_up += 1;
    }

    fn stopped(&mut self, _reason: String) {}

    fn refused(&mut self, error: ReplicaError, rejoining: bool) {
        let (node, partition) = (self.node, self.partition);
        match (error, rejoining) {
            // A stopped partition's replica refuses late batches and shipments: expected.
            (ReplicaError::Stopped { .. }, _) => {}
            (error, false) => {
                self.sim.trace_line(|| format!("VIOLATION node {node} p{partition}: {error}"));
                self.sim.violations.push(Violation::Refused { node, partition, error })
            }
            (error, true) => {
                self.sim.trace_line(|| format!("VIOLATION node {node} p{partition} (rejoining): {error}"));
                self.sim.violations.push(Violation::RefusedRejoining { node, partition, error })
            }
        }
    }
}

/// How a node's database restarts, for the trace.
fn restart_name(restart: &Restart) -> String {
    match restart {
        Restart::OwnLog => "recovery from its own log".to_string(),
        Restart::FollowBase { cut, start } => {
            format!("its own log cut at {cut:?} to follow the primary's log base from LSN {start}")
        }
        Restart::Image(image) => format!("the primary's checkpoint image ({} bytes)", image.len()),
    }
}
