//! What a simulated node's process does with the effects of its machines, as `node::process`
//! does: messages to its coordinators and its partitions, shipments to its backups over peer
//! links, dials and rejoins; and, for each partition, results emitted, shipments
//! acknowledged, fetches begun, a full-stack database restarted from its disk.
//!
//! Guarantees: a shipment reaches a backup only on the peer link its primary's process
//! opened, to that backup's process; a replica error other than "stopped" is recorded as a
//! violation, never swallowed; every result a replica emits is checked as it leaves
//! ([`invariants`](super::invariants)).

use node::machine::{Effect, NodeEffect};
use wire::channel::{ChannelMessage, NodeToCoordinator, PeerReply};
use wire::messages::{NodeId, PartitionId};

use super::{PeerAddr, PendingFetch, Sim};
use crate::error::Violation;
use crate::net::{Carried, Envelope, PeerMsg};

impl Sim {
    /// Carries out node `node`'s machine's effects, as its process does.
    pub(super) fn perform(&mut self, node: NodeId, effects: Vec<NodeEffect>) {
        let mut queue: std::collections::VecDeque<NodeEffect> = effects.into();
        while let Some(effect) = queue.pop_front() {
            match effect {
                NodeEffect::ToCoordinator { coordinator, msg } => self.send_from_node(node, coordinator, msg),
                NodeEffect::ToPartition { partition, msg } => {
                    let Some(m) = self.node_mut(node).partitions.get_mut(&partition) else { continue };
                    let effects = m.on_coordinator(msg);
                    self.perform_partition(node, partition, effects);
                }
                NodeEffect::Ship { backups, shipment } => {
                    self.trace_line(|| {
                        format!("node {node} ships p{} batch {} to {backups:?}", shipment.partition, shipment.seq)
                    });
                    for b in backups {
                        let reached = self.nodes[&node].peers.get(&b).copied();
                        let to = &self.nodes[&b];
                        if to.up && reached == Some(to.process) {
                            let from_process = self.nodes[&node].process;
                            let msg = Carried::Peer { from: node, from_process, msg: PeerMsg::Ship(shipment.clone()) };
                            self.net.send(Envelope { node: b, link: to.process, msg });
                        } else {
                            // The link to the backup's process is gone: its task ended.
                            self.trace_line(|| format!("node {node} lost its link to backup {b}"));
                            queue.extend(self.node_mut(node).machine.on_backup_lost(b));
                        }
                    }
                }
                NodeEffect::OpenPeer { backup } => {
                    let to = &self.nodes[&backup];
                    let process = if to.up { to.process } else { 0 };
                    self.node_mut(node).peers.insert(backup, process);
                }
                NodeEffect::Dial { coordinator } => self.reconnect(node, coordinator),
                NodeEffect::RejoinAll => self.rejoin_all(node),
                NodeEffect::Rejoin { partition } => self.rejoin_one(node, partition),
                NodeEffect::Shutdown { .. } => {
                    self.violations.push(Violation::UnexpectedMessage { node, name: "Shutdown" })
                }
                NodeEffect::NotHeld { partition, .. } => {
                    self.violations.push(Violation::UnheldPartition { node, partition })
                }
            }
        }
    }

    /// Carries out the effects of node `node`'s machine of `partition`, as its executor does.
    pub(super) fn perform_partition(&mut self, node: NodeId, partition: PartitionId, effects: Vec<Effect<PeerAddr>>) {
        // The batches the call executed may have begun a digest copy: taken before any other.
        self.take_digest_copy(node, partition);
        let mut queue: std::collections::VecDeque<Effect<PeerAddr>> = effects.into();
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Emit(emitted) => {
                    if let node::replica::Emit::ToCoordinator(NodeToCoordinator::Results(r)) = &emitted {
                        self.check_results(node, r);
                    }
                    let now = self.now_us;
                    let effects = self.node_mut(node).machine.on_emit(emitted, now);
                    self.perform(node, effects);
                }
                Effect::Reply { to, msg: PeerReply::ShipAck { partition, seq } } => {
                    let from_process = self.nodes[&node].process;
                    let msg = Carried::Peer { from: node, from_process, msg: PeerMsg::Ack { partition, seq } };
                    self.net.send(Envelope { node: to.node, link: to.process, msg });
                }
                Effect::Reply { msg, .. } => {
                    self.violations.push(Violation::UnexpectedMessage { node, name: msg.name() })
                }
                Effect::Fetch { source, after_seq, kind, delay_ms, .. } => {
                    let process = self.nodes[&node].process;
                    let at_us = self.now_us + delay_ms * 1_000;
                    let patience_until_us = at_us + node::snapshot::SNAPSHOT_CHUNK_TIMEOUT.as_micros() as u64;
                    let id = self.next_id;
                    self.next_id += 1;
                    let f = PendingFetch {
                        id,
                        node,
                        process,
                        partition,
                        source,
                        after_seq,
                        kind,
                        at_us,
                        patience_until_us,
                    };
                    self.fetches.push(f);
                    self.stats.fetches += 1;
                }
                Effect::Recover { restart } => {
                    self.stats.recoveries += 1;
                    self.checker.failed_over.insert(partition);
                    if matches!(restart, node::fullstack::Restart::OwnLog) {
                        self.checker.recovered.insert(partition);
                    }
                    self.checker.forget(node, Some(partition));
                    if let node::fullstack::Restart::Image(_) = restart {
                        self.stats.base_backups += 1;
                    }
                    self.trace_line(|| {
                        format!("node {node} restarts p{partition}'s database: {}", restart_name(&restart))
                    });
                    let recovered = self.disks.recover(node, partition, &restart);
                    let Some(m) = self.node_mut(node).partitions.get_mut(&partition) else { return };
                    queue.extend(m.on_recovered(recovered));
                }
                Effect::Ready { .. } | Effect::Stopped { .. } => {}
                Effect::Failed { reason } => {
                    self.trace_line(|| format!("node {node} gives up rejoining p{partition}: {reason}"));
                    self.stats.rejoins_given_up += 1;
                }
                // A stopped partition's replica refuses late batches and shipments: expected.
                Effect::Refused { error: node::ReplicaError::Stopped { .. }, .. } => {}
                Effect::Refused { error, rejoining: false } => {
                    self.trace_line(|| format!("VIOLATION node {node} p{partition}: {error}"));
                    self.violations.push(Violation::Refused { node, partition, error })
                }
                Effect::Refused { error, rejoining: true } => {
                    self.trace_line(|| format!("VIOLATION node {node} p{partition} (rejoining): {error}"));
                    self.violations.push(Violation::RefusedRejoining { node, partition, error })
                }
            }
        }
        self.take_digest_copy(node, partition);
    }
}

/// How a node's database restarts, for the trace.
fn restart_name(restart: &node::fullstack::Restart) -> String {
    match restart {
        node::fullstack::Restart::OwnLog => "recovery from its own log".to_string(),
        node::fullstack::Restart::FollowBase { cut, start } => {
            format!("its own log cut at {cut:?} to follow the primary's log base from LSN {start}")
        }
        node::fullstack::Restart::Image(image) => format!("the primary's checkpoint image ({} bytes)", image.len()),
    }
}
