//! The node's decisions, sans I/O (docs/design.md §4): a node process is one [`NodeMachine`]
//! — its coordinator link and everything decided there — and one [`PartitionMachine`] per
//! partition it holds, each driven by that partition's executor thread (so partitions
//! execute in parallel; one machine for the whole node would serialise them on one core).
//! The simulator drives the same machines, message by message.
//!
//! The [`NodeMachine`] owns:
//! - routing: which partition a coordinator message is for, and what is not for any;
//! - the ship gates of the partitions this node is primary of (`crate::shipping`): which
//!   results may go to the coordinator, which backups each shipment goes to, which backup is
//!   dropped when its link fails, and the rejoining backups `ShipTo` adds;
//! - membership changes, as far as the gates are concerned;
//! - what each heartbeat reports (the backups' progress, for choosing whom to promote);
//! - the coordinator link: when to dial again after it broke, and that a node whose link
//!   came back rejoins every partition (the coordinator counted it failed and executed on
//!   without it: its replicas are stale).
//!
//! It takes coordinator messages, the partitions' emitted messages, backups' acknowledgements,
//! link events and clock ticks, and returns [`NodeEffect`]s for the carrier. Guarantees: a
//! partition's results reach the coordinator only through its gate while this node is its
//! primary (sync shipping: after every live backup applied the batch); nothing is sent on a
//! link that is down; after a broken link, every partition rejoins before it counts again.

mod partition;

pub use partition::{
    Asked, Began, Effect, FetchKind, Fetched, PartitionMachine, Standing, CONNECT_RETRY_MS, REJOIN_FETCH_ATTEMPTS,
    REJOIN_HELD_BATCHES_MAX,
};

use std::collections::BTreeMap;

use wire::channel::{CoordinatorToNode, NodeToCoordinator};
use wire::config::{ClusterConfig, Shipping};
use wire::messages::{NodeId, PartitionId, Results, Seq, Shipment};

use crate::replica::{Emit, ReplicaRole};
use crate::shipping::{GateStats, ShipGate};

/// What the carrier does for the [`NodeMachine`].
#[derive(Debug, Clone, PartialEq)]
pub enum NodeEffect {
    /// Send to the coordinator.
    ToCoordinator(NodeToCoordinator),
    /// Hand to the partition's machine.
    ToPartition { partition: PartitionId, msg: CoordinatorToNode },
    /// Send the shipment to these backups' nodes (on the peer channel); a backup whose link
    /// cannot take it is reported back with [`NodeMachine::on_backup_lost`].
    Ship { backups: Vec<NodeId>, shipment: Shipment },
    /// Open a new link to backup `backup` (it restarted: a link to its previous process may
    /// hang until its connection times out).
    OpenPeer { backup: NodeId },
    /// Dial the coordinator (again).
    Dial,
    /// Every partition rejoins: drop its state and ask the coordinator, as a restarted node.
    RejoinAll,
    /// The coordinator shuts the cluster down.
    Shutdown { reason: String },
    /// A message for a partition this node does not hold (logged; nothing else happens).
    NotHeld { partition: PartitionId, name: &'static str },
}

/// The coordinator link, as the node sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Never connected yet (the node is starting).
    Starting,
    Connected,
    /// Broken at `since_us`; dial again at `redial_at_us`.
    Down {
        since_us: u64,
        redial_at_us: u64,
    },
}

/// What the node holds of one partition, as the link side sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    role: ReplicaRole,
}

/// One node's link-side decisions (see the module comment).
#[derive(Debug)]
pub struct NodeMachine {
    id: NodeId,
    sync: bool,
    passive: bool,
    heartbeat_us: u64,
    held: BTreeMap<PartitionId, Held>,
    gates: BTreeMap<PartitionId, ShipGate>,
    /// The newest membership epoch seen of each partition: an older one arriving late is
    /// not applied to a gate (it would drop a backup that rejoined since).
    membership_epochs: BTreeMap<PartitionId, u64>,
    link: LinkState,
    next_heartbeat_us: u64,
    /// Times the link came back after breaking.
    reconnects: u64,
}

impl NodeMachine {
    /// Node `id` of `config` holding `partitions` in the roles it starts them in, at `now_us`.
    pub fn new(config: &ClusterConfig, id: NodeId, partitions: &[(PartitionId, ReplicaRole)], now_us: u64) -> Self {
        let sync = config.shipping() == Some(Shipping::Sync);
        let mut gates = BTreeMap::new();
        for &(p, role) in partitions {
            if role == ReplicaRole::Primary {
                let backups: Vec<NodeId> = config
                    .partitions
                    .iter()
                    .find(|c| c.id == p)
                    .map(|c| c.replicas.iter().copied().filter(|&n| n != id).collect())
                    .unwrap_or_default();
                gates.insert(p, ShipGate::new(p, &backups, sync));
            }
        }
        NodeMachine {
            id,
            sync,
            passive: config.mode().is_passive(),
            heartbeat_us: config.timeouts.heartbeat_ms.max(1) * 1_000,
            held: partitions.iter().map(|&(p, role)| (p, Held { role })).collect(),
            gates,
            membership_epochs: BTreeMap::new(),
            link: LinkState::Starting,
            next_heartbeat_us: now_us,
            reconnects: 0,
        }
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    pub fn link(&self) -> LinkState {
        self.link
    }

    /// Times the coordinator link came back after breaking.
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// The backups each partition's shipments go to (primaries only).
    pub fn backups(&self) -> BTreeMap<PartitionId, Vec<NodeId>> {
        self.gates.iter().map(|(&p, g)| (p, g.backups().collect())).collect()
    }

    /// Results `partition`'s gate holds for acknowledgements (sync shipping), if this node is
    /// its primary.
    pub fn gate_held(&self, partition: PartitionId) -> Option<usize> {
        self.gates.get(&partition).map(ShipGate::held)
    }

    /// The lag figures of `partition`'s gate, if this node is its primary.
    pub fn gate_stats(&self, partition: PartitionId) -> Option<GateStats> {
        self.gates.get(&partition).map(ShipGate::stats)
    }

    /// A message from the coordinator.
    pub fn on_coordinator(&mut self, msg: CoordinatorToNode) -> Vec<NodeEffect> {
        let Some(partition) = msg.partition() else {
            return match msg {
                CoordinatorToNode::Shutdown { reason } => vec![NodeEffect::Shutdown { reason }],
                _ => Vec::new(), // a heartbeat
            };
        };
        if !self.held.contains_key(&partition) {
            return vec![NodeEffect::NotHeld { partition, name: wire::channel::ChannelMessage::name(&msg) }];
        }
        let mut out = Vec::new();
        match &msg {
            CoordinatorToNode::Membership { live, epoch, .. } => {
                let newest = self.membership_epochs.entry(partition).or_insert(0);
                if *epoch > *newest {
                    *newest = *epoch;
                    if let Some(gate) = self.gates.get_mut(&partition) {
                        out.extend(released(gate.on_membership(live)));
                    }
                }
            }
            CoordinatorToNode::ShipTo { backup, .. } => {
                let gate = self.gates.entry(partition).or_insert_with(|| ShipGate::new(partition, &[], self.sync));
                out.extend(released(gate.add_catching_up(*backup)));
                out.push(NodeEffect::OpenPeer { backup: *backup });
            }
            _ => {}
        }
        out.push(NodeEffect::ToPartition { partition, msg });
        // Boundary assertion (docs/design.md §4): gates exist only for partitions held here.
        assert!(self.gates.keys().all(|p| self.held.contains_key(p)), "a gate for a partition not held");
        out
    }

    /// A message a partition's machine emitted, at `now_us`: results through the partition's
    /// gate, a shipment to the gate's backups, anything else to the coordinator.
    pub fn on_emit(&mut self, emitted: Emit, now_us: u64) -> Vec<NodeEffect> {
        match emitted {
            Emit::Ship(shipment) => {
                let Some(gate) = self.gates.get_mut(&shipment.partition) else { return Vec::new() };
                gate.on_shipped(shipment.seq, now_us);
                let backups: Vec<NodeId> = gate.backups().collect();
                if backups.is_empty() {
                    return Vec::new();
                }
                vec![NodeEffect::Ship { backups, shipment }]
            }
            Emit::ToCoordinator(NodeToCoordinator::Results(r)) => match self.gates.get_mut(&r.partition) {
                Some(gate) => released(gate.on_results(r)),
                None => vec![NodeEffect::ToCoordinator(NodeToCoordinator::Results(r))],
            },
            Emit::ToCoordinator(m) => {
                if let NodeToCoordinator::Promoted { partition, .. } = &m {
                    // A promoted backup executes; it ships to no one until `ShipTo`.
                    if let Some(h) = self.held.get_mut(partition) {
                        h.role = ReplicaRole::Replica;
                    }
                }
                vec![NodeEffect::ToCoordinator(m)]
            }
        }
    }

    /// Backup `from` applied `partition`'s shipments up to `seq`.
    pub fn on_ack(&mut self, from: NodeId, partition: PartitionId, seq: Seq, now_us: u64) -> Vec<NodeEffect> {
        match self.gates.get_mut(&partition) {
            Some(gate) => released(gate.on_ack(from, seq, now_us)),
            None => Vec::new(),
        }
    }

    /// The link to backup `backup` failed or fell too far behind: it is no longer shipped to
    /// nor waited for, by any partition.
    pub fn on_backup_lost(&mut self, backup: NodeId) -> Vec<NodeEffect> {
        let mut out = Vec::new();
        for gate in self.gates.values_mut() {
            out.extend(released(gate.drop_backup(backup)));
        }
        out
    }

    /// The coordinator link is up (first connected, or again after breaking: then every
    /// partition rejoins, as a restarted node's would).
    pub fn on_link_up(&mut self, now_us: u64) -> Vec<NodeEffect> {
        let was = std::mem::replace(&mut self.link, LinkState::Connected);
        self.next_heartbeat_us = now_us;
        match was {
            LinkState::Down { .. } => {
                self.reconnects += 1;
                // The coordinator counted this node failed and went on without it: no
                // partition here is current, and none is primary any more.
                self.gates.clear();
                for h in self.held.values_mut() {
                    h.role = if self.passive { ReplicaRole::Backup } else { ReplicaRole::Replica };
                }
                vec![NodeEffect::RejoinAll]
            }
            LinkState::Starting | LinkState::Connected => Vec::new(),
        }
    }

    /// The coordinator link broke (closed, failed, or the coordinator broke the protocol) at
    /// `now_us`: results held for it are lost with it (the coordinator counts this node failed
    /// and answers their transactions from the other replicas, or "outcome unknown"); dial
    /// again after [`CONNECT_RETRY_MS`].
    pub fn on_link_lost(&mut self, now_us: u64) {
        if matches!(self.link, LinkState::Down { .. }) {
            return;
        }
        self.link = LinkState::Down { since_us: now_us, redial_at_us: now_us + CONNECT_RETRY_MS * 1_000 };
    }

    /// A dial failed at `now_us`: try again after [`CONNECT_RETRY_MS`].
    pub fn on_dial_failed(&mut self, now_us: u64) {
        let since_us = match self.link {
            LinkState::Down { since_us, .. } => since_us,
            LinkState::Starting | LinkState::Connected => now_us,
        };
        self.link = LinkState::Down { since_us, redial_at_us: now_us + CONNECT_RETRY_MS * 1_000 };
    }

    /// The time of the next [`NodeMachine::tick`] that does something.
    pub fn next_deadline_us(&self) -> u64 {
        match self.link {
            LinkState::Connected => self.next_heartbeat_us,
            LinkState::Down { redial_at_us, .. } => redial_at_us,
            LinkState::Starting => u64::MAX,
        }
    }

    /// Time passes to `now_us`: a heartbeat when one is due (with each backup's progress,
    /// `applied(partition)`, for choosing whom to promote), or a dial when the link is down
    /// and its retry is due.
    pub fn tick(&mut self, now_us: u64, applied: impl Fn(PartitionId) -> Option<Seq>) -> Vec<NodeEffect> {
        match self.link {
            LinkState::Connected if now_us >= self.next_heartbeat_us => {
                // One beat however late: a stalled node does not flood its link.
                while self.next_heartbeat_us <= now_us {
                    self.next_heartbeat_us += self.heartbeat_us;
                }
                let mut beat = vec![NodeEffect::ToCoordinator(NodeToCoordinator::Heartbeat { now_ms: now_us / 1_000 })];
                for (&partition, h) in &self.held {
                    if h.role == ReplicaRole::Backup && !self.gates.contains_key(&partition) {
                        if let Some(seq) = applied(partition) {
                            beat.push(NodeEffect::ToCoordinator(NodeToCoordinator::BackupApplied { partition, seq }));
                        }
                    }
                }
                beat
            }
            LinkState::Down { since_us, redial_at_us } if now_us >= redial_at_us => {
                self.link = LinkState::Down { since_us, redial_at_us: u64::MAX };
                vec![NodeEffect::Dial]
            }
            LinkState::Connected | LinkState::Down { .. } | LinkState::Starting => Vec::new(),
        }
    }
}

fn released(results: Vec<Results>) -> Vec<NodeEffect> {
    results.into_iter().map(|r| NodeEffect::ToCoordinator(NodeToCoordinator::Results(r))).collect()
}
