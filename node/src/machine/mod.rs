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
//! - the links to the backups' nodes (passive modes, at a primary): opened for the backups
//!   its gates ship to, dialled again [`CONNECT_RETRY_MS`] after a failed dial, closed when
//!   no gate ships to that backup any more (docs/design.md §14);
//! - the coordinator links, one per coordinator: when to dial again after one broke, and that
//!   a node whose link to the leader came back, with no newer leader meanwhile, rejoins every
//!   partition (the leader counted it failed and executed on without it: its replicas are
//!   stale);
//! - fencing (docs/design.md §11): the newest coordinator epoch heard of and its leader; a
//!   message from an older epoch is refused, and its sender told the newer epoch; a new
//!   leader's `TakeOver` reaches every partition, whose standing goes back to it.
//!
//! It takes coordinator messages, the partitions' emitted messages, backups' acknowledgements,
//! link events and clock ticks, and returns [`NodeEffect`]s for the carrier. Guarantees: a
//! partition's results reach the coordinator only through its gate while this node is its
//! primary (sync shipping: after every live backup applied the batch); nothing is sent on a
//! link that is down; after a broken link to the leader, every partition rejoins before it
//! counts again; no message of an epoch older than one heard of reaches a partition; what
//! the node sends goes to the leader of the newest epoch, and waits (bounded) while no leader
//! is known.

mod partition;

pub use partition::{
    base_restart, Asked, Began, Effect, FetchKind, FetchOrder, Fetched, PartitionMachine, Standing,
    CATCH_UP_SLICE_BUSY, CATCH_UP_SLICE_IDLE, CONNECT_RETRY_MS, REJOIN_FETCH_ATTEMPTS, REJOIN_HELD_BATCHES_MAX,
    TRANSFER_PATIENCE_MS,
};

use std::collections::BTreeMap;

use wire::channel::{CoordinatorToNode, NodeToCoordinator};
use wire::config::{ClusterConfig, Replication};
use wire::messages::{CoordinatorId, Epoch, NodeId, PartitionId, Seq, Shipment};

use crate::replica::{Emit, ReplicaRole};
use crate::shipping::{GateStats, ShipGate};

/// What the carrier does for the [`NodeMachine`].
#[derive(Debug, Clone, PartialEq)]
pub enum NodeEffect {
    /// Send to coordinator `coordinator` (the leader, or a deposed one told it is fenced).
    ToCoordinator { coordinator: CoordinatorId, msg: NodeToCoordinator },
    /// Hand to the partition's machine.
    ToPartition { partition: PartitionId, msg: CoordinatorToNode },
    /// Send the shipment to these backups' nodes (on the peer channel); a backup whose link
    /// cannot take it is reported back with [`NodeMachine::on_backup_lost`].
    Ship { backups: Vec<NodeId>, shipment: Shipment },
    /// Open a new link to backup `backup`'s node, replacing any older one (it restarted: a
    /// link to its previous process may hang until its connection times out), and dial it;
    /// the shipments queued meanwhile wait for the dial. The outcome goes to
    /// [`NodeMachine::on_peer_dial`] with `generation`.
    OpenPeer { backup: NodeId, generation: u64 },
    /// Dial the link to backup `backup` (of that `generation`) again.
    DialPeer { backup: NodeId, generation: u64 },
    /// Close the link to backup `backup`: no gate ships to it any more.
    ClosePeer { backup: NodeId },
    /// Dial coordinator `coordinator` (again).
    Dial { coordinator: CoordinatorId },
    /// Every partition rejoins: drop its state and ask the leader, as a restarted node.
    RejoinAll,
    /// The leader's membership of `partition` leaves this node out: if its replica serves,
    /// it drops its state and rejoins (one already rejoining goes on).
    Rejoin { partition: PartitionId },
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

/// A link to a backup's node, as the node sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Being dialled (the shipments queued for it wait).
    Dialing,
    /// The last dial failed; dial again at `redial_at_us`.
    Down {
        redial_at_us: u64,
    },
    Up,
}

/// How a dial of a backup's node ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerDial {
    Up,
    /// No answer: dial again after [`CONNECT_RETRY_MS`].
    Unreachable,
    /// The node refused this one (it is not who the configuration says): the backup is lost.
    Refused,
}

/// One link to a backup's node: its generation (a dial's outcome for an older link, one
/// replaced since, is ignored) and state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PeerLink {
    generation: u64,
    state: PeerState,
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
    /// The cluster's replication mode and settings: the ship gates' (whether results wait for
    /// the backups), and the role a replica here comes back in.
    replication: Replication,
    heartbeat_us: u64,
    held: BTreeMap<PartitionId, Held>,
    gates: BTreeMap<PartitionId, ShipGate>,
    /// The newest membership epoch seen of each partition: an older one arriving late is
    /// not applied to a gate (it would drop a backup that rejoined since).
    membership_epochs: BTreeMap<PartitionId, u64>,
    /// One link per coordinator.
    links: BTreeMap<CoordinatorId, Link>,
    /// The newest coordinator epoch heard of, and the coordinator leading it (`None` until
    /// one took over, with several coordinators).
    epoch: Epoch,
    leader: Option<CoordinatorId>,
    /// Messages for the leader while none is known (bounded: [`UNSENT_MAX`]).
    unsent: Vec<NodeToCoordinator>,
    next_heartbeat_us: u64,
    /// Times a link to the leader came back after breaking.
    reconnects: u64,
    /// When each backup's long shipping queue was last reported to the leader
    /// ([`NodeMachine::on_peer_queue`]).
    behind_reported_us: BTreeMap<NodeId, u64>,
    /// One link per backup node some gate ships to.
    peers: BTreeMap<NodeId, PeerLink>,
    /// The newest peer link's generation.
    peer_generation: u64,
}

/// One coordinator link: its state, and the epoch when it broke (if the same coordinator
/// still leads that epoch when it is back, this node was counted failed meanwhile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Link {
    state: LinkState,
    broke_leading: Option<Epoch>,
}

/// How often a primary's node tells the leader, at most, that its shipping queue to one
/// backup is long ([`NodeMachine::on_peer_queue`]).
pub const BEHIND_REPORT_US: u64 = 100_000;

/// Messages a node keeps for a leader while none is known; past it the oldest are dropped
/// (heartbeats and progress reports are never kept).
pub const UNSENT_MAX: usize = 4096;

impl NodeMachine {
    /// Node `id` of `config` holding `partitions` in the roles it starts them in, at `now_us`.
    pub fn new(config: &ClusterConfig, id: NodeId, partitions: &[(PartitionId, ReplicaRole)], now_us: u64) -> Self {
        let mut gates = BTreeMap::new();
        for &(p, role) in partitions {
            if role == ReplicaRole::Primary {
                let backups: Vec<NodeId> = config
                    .partitions
                    .iter()
                    .find(|c| c.id == p)
                    .map(|c| c.replicas.iter().copied().filter(|&n| n != id).collect())
                    .unwrap_or_default();
                gates.insert(p, ShipGate::new(p, &backups, config.replication));
            }
        }
        NodeMachine {
            id,
            replication: config.replication,
            heartbeat_us: config.timeouts.heartbeat_ms.max(1) * 1_000,
            held: partitions.iter().map(|&(p, role)| (p, Held { role })).collect(),
            gates,
            membership_epochs: BTreeMap::new(),
            links: config
                .coordinator_ids()
                .into_iter()
                .map(|c| (c, Link { state: LinkState::Starting, broke_leading: None }))
                .collect(),
            epoch: 0,
            // A single coordinator leads from the start; among several, the one that takes
            // over says so.
            leader: (config.coordinators.len() == 1).then(|| config.coordinator().id),
            unsent: Vec::new(),
            next_heartbeat_us: now_us,
            reconnects: 0,
            behind_reported_us: BTreeMap::new(),
            peers: BTreeMap::new(),
            peer_generation: 0,
        }
    }

    /// The node starts: a link to every backup node of the partitions it starts as primary
    /// of.
    pub fn start(&mut self) -> Vec<NodeEffect> {
        let backups: std::collections::BTreeSet<NodeId> = self.gates.values().flat_map(ShipGate::backups).collect();
        let mut out = Vec::new();
        for backup in backups {
            self.open_peer(backup, &mut out);
        }
        out
    }

    /// A new link to backup `backup`, replacing any older one, dialled at once.
    fn open_peer(&mut self, backup: NodeId, out: &mut Vec<NodeEffect>) {
        self.peer_generation += 1;
        let generation = self.peer_generation;
        self.peers.insert(backup, PeerLink { generation, state: PeerState::Dialing });
        out.push(NodeEffect::OpenPeer { backup, generation });
    }

    /// Closes the links to the backups no gate ships to any more.
    fn close_unneeded_peers(&mut self, out: &mut Vec<NodeEffect>) {
        let needed: std::collections::BTreeSet<NodeId> = self.gates.values().flat_map(ShipGate::backups).collect();
        let unneeded: Vec<NodeId> = self.peers.keys().copied().filter(|b| !needed.contains(b)).collect();
        for backup in unneeded {
            self.peers.remove(&backup);
            out.push(NodeEffect::ClosePeer { backup });
        }
    }

    /// The link to backup `backup`'s node, if one is open.
    pub fn peer(&self, backup: NodeId) -> Option<PeerState> {
        self.peers.get(&backup).map(|l| l.state)
    }

    /// The open links to backups' nodes, by backup.
    pub fn peers(&self) -> impl Iterator<Item = (NodeId, PeerState)> + '_ {
        self.peers.iter().map(|(&b, l)| (b, l.state))
    }

    /// A dial of the link to backup `backup` (of `generation`) ended at `now_us`: up; or
    /// dialled again after [`CONNECT_RETRY_MS`]; or, refused, the backup is lost. The outcome
    /// of a dial of a link replaced or closed since is ignored.
    pub fn on_peer_dial(&mut self, backup: NodeId, generation: u64, outcome: PeerDial, now_us: u64) -> Vec<NodeEffect> {
        let Some(link) = self.peers.get_mut(&backup) else { return Vec::new() };
        if link.generation != generation || link.state != PeerState::Dialing {
            return Vec::new();
        }
        match outcome {
            PeerDial::Up => link.state = PeerState::Up,
            PeerDial::Unreachable => {
                link.state = PeerState::Down { redial_at_us: now_us + CONNECT_RETRY_MS * 1_000 };
            }
            PeerDial::Refused => return self.on_backup_lost(backup),
        }
        Vec::new()
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The link to coordinator `coordinator` (`Starting` for one not in the configuration).
    pub fn link(&self, coordinator: CoordinatorId) -> LinkState {
        self.links.get(&coordinator).map_or(LinkState::Starting, |l| l.state)
    }

    /// The link to the leader, if one is known.
    pub fn leader_link(&self) -> Option<LinkState> {
        self.leader.map(|c| self.link(c))
    }

    /// The newest coordinator epoch heard of.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The coordinator leading the newest epoch, if known.
    pub fn leader(&self) -> Option<CoordinatorId> {
        self.leader
    }

    /// Times a link to the leader came back after breaking.
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

    /// A message from coordinator `from`, sent in its epoch `epoch` (docs/design.md §11): one
    /// from an older epoch than heard of is refused and its sender told; a newer epoch makes
    /// `from` the leader, and its `TakeOver` goes to every partition (whose standing goes back
    /// to it), after what was kept for a leader while none was known.
    pub fn on_coordinator(&mut self, from: CoordinatorId, epoch: Epoch, msg: CoordinatorToNode) -> Vec<NodeEffect> {
        if epoch < self.epoch || (epoch == self.epoch && self.leader.is_some_and(|l| l != from)) {
            let msg = NodeToCoordinator::Fenced { epoch: self.epoch };
            return vec![NodeEffect::ToCoordinator { coordinator: from, msg }];
        }
        let mut out = Vec::new();
        if epoch > self.epoch || self.leader.is_none() {
            self.epoch = epoch;
            self.leader = Some(from);
            for msg in std::mem::take(&mut self.unsent) {
                out.push(NodeEffect::ToCoordinator { coordinator: from, msg });
            }
        }
        let Some(partition) = msg.partition() else {
            match msg {
                CoordinatorToNode::Shutdown { reason } => out.push(NodeEffect::Shutdown { reason }),
                CoordinatorToNode::TakeOver { .. } => {
                    for &partition in self.held.keys() {
                        out.push(NodeEffect::ToPartition { partition, msg: msg.clone() });
                    }
                }
                _ => {} // a heartbeat
            }
            return out;
        };
        if !self.held.contains_key(&partition) {
            out.push(NodeEffect::NotHeld { partition, name: wire::channel::ChannelMessage::name(&msg) });
            return out;
        }
        match &msg {
            CoordinatorToNode::Membership { live, epoch, .. } => {
                let newest = self.membership_epochs.entry(partition).or_insert(0);
                if *epoch >= *newest && !live.contains(&self.id) {
                    // Excluded (the leader counted this node failed, or dropped it as a
                    // backup): a serving replica here is stale, and comes back by rejoining.
                    *newest = *epoch;
                    self.gates.remove(&partition);
                    self.close_unneeded_peers(&mut out);
                    if let Some(h) = self.held.get_mut(&partition) {
                        h.role = ReplicaRole::rejoining(self.replication.mode());
                    }
                    out.push(NodeEffect::Rejoin { partition });
                    return out;
                }
                if *epoch > *newest {
                    *newest = *epoch;
                    if let Some(gate) = self.gates.get_mut(&partition) {
                        let released = gate.on_membership(live);
                        out.extend(self.send_to_leader(released.into_iter().map(NodeToCoordinator::Results)));
                        self.close_unneeded_peers(&mut out);
                    }
                }
            }
            CoordinatorToNode::ShipTo { backup, .. } => {
                let gate =
                    self.gates.entry(partition).or_insert_with(|| ShipGate::new(partition, &[], self.replication));
                let released = gate.add_catching_up(*backup);
                out.extend(self.send_to_leader(released.into_iter().map(NodeToCoordinator::Results)));
                self.open_peer(*backup, &mut out);
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
                Some(gate) => {
                    let released = gate.on_results(r);
                    self.send_to_leader(released.into_iter().map(NodeToCoordinator::Results))
                }
                None => self.send_to_leader([NodeToCoordinator::Results(r)]),
            },
            Emit::ToCoordinator(m) => {
                if let NodeToCoordinator::Promoted { partition, .. } = &m {
                    // A promoted backup executes; it ships to no one until `ShipTo`.
                    if let Some(h) = self.held.get_mut(partition) {
                        h.role = ReplicaRole::Replica;
                    }
                }
                self.send_to_leader([m])
            }
        }
    }

    /// Messages for the leader: sent to it, or kept while none is known (bounded; heartbeats
    /// and progress are not worth keeping).
    fn send_to_leader(&mut self, msgs: impl IntoIterator<Item = NodeToCoordinator>) -> Vec<NodeEffect> {
        match self.leader {
            Some(coordinator) => msgs.into_iter().map(|msg| NodeEffect::ToCoordinator { coordinator, msg }).collect(),
            None => {
                for msg in msgs {
                    let worth_keeping = !matches!(
                        msg,
                        NodeToCoordinator::Heartbeat { .. }
                            | NodeToCoordinator::BackupApplied { .. }
                            | NodeToCoordinator::LoadStatus { state: wire::messages::LoadState::Loading { .. }, .. }
                    );
                    if worth_keeping {
                        if self.unsent.len() == UNSENT_MAX {
                            self.unsent.remove(0);
                        }
                        self.unsent.push(msg);
                    }
                }
                Vec::new()
            }
        }
    }

    /// Backup `from` applied `partition`'s shipments up to `seq`.
    pub fn on_ack(&mut self, from: NodeId, partition: PartitionId, seq: Seq, now_us: u64) -> Vec<NodeEffect> {
        match self.gates.get_mut(&partition) {
            Some(gate) => {
                let released = gate.on_ack(from, seq, now_us);
                self.send_to_leader(released.into_iter().map(NodeToCoordinator::Results))
            }
            None => Vec::new(),
        }
    }

    /// A shipment of `partition` was queued for backup `backup`, whose queue now holds
    /// `queued` of at most `bound`: past a quarter of the bound, the leader hears of it
    /// (at most every [`BEHIND_REPORT_US`] per backup), so it admits less while a rejoining
    /// backup catches up, before the queue fills and the backup is dropped (docs/design.md
    /// §10, "Catching up under load"). Heartbeats and progress reports are not kept while no
    /// leader is known; nor is this.
    pub fn on_peer_queue(
        &mut self,
        backup: NodeId,
        partition: PartitionId,
        queued: usize,
        bound: usize,
        now_us: u64,
    ) -> Vec<NodeEffect> {
        if queued * 4 <= bound || self.leader.is_none() {
            return Vec::new();
        }
        let last = self.behind_reported_us.entry(backup).or_insert(0);
        if *last != 0 && now_us.saturating_sub(*last) < BEHIND_REPORT_US {
            return Vec::new();
        }
        *last = now_us.max(1);
        let queued = u32::try_from(queued).unwrap_or(u32::MAX);
        self.send_to_leader([NodeToCoordinator::ShippingBehind { partition, backup, queued }])
    }

    /// The link to backup `backup` failed or fell too far behind: it is no longer shipped to
    /// nor waited for, by any partition, and its link is closed.
    pub fn on_backup_lost(&mut self, backup: NodeId) -> Vec<NodeEffect> {
        let mut released = Vec::new();
        for gate in self.gates.values_mut() {
            released.extend(gate.drop_backup(backup));
        }
        let mut out = self.send_to_leader(released.into_iter().map(NodeToCoordinator::Results));
        self.close_unneeded_peers(&mut out);
        out
    }

    /// The link to coordinator `coordinator` is up (first connected, or again after
    /// breaking: if that coordinator led the newest epoch when it broke and still does, it
    /// counted this node failed meanwhile, and every partition rejoins, as a restarted
    /// node's would).
    pub fn on_link_up(&mut self, coordinator: CoordinatorId, now_us: u64) -> Vec<NodeEffect> {
        let Some(link) = self.links.get_mut(&coordinator) else { return Vec::new() };
        let was = std::mem::replace(&mut link.state, LinkState::Connected);
        let broke_leading = link.broke_leading.take();
        if self.leader == Some(coordinator) {
            self.next_heartbeat_us = now_us;
        }
        // With several coordinators, the leader says whether it counted this node failed
        // (a membership without it); with one, a broken link always meant that.
        let alone = self.links.len() == 1;
        match was {
            LinkState::Down { .. }
                if alone && broke_leading == Some(self.epoch) && self.leader == Some(coordinator) =>
            {
                self.reconnects += 1;
                // The leader counted this node failed and went on without it: no partition
                // here is current, and none is primary any more.
                self.gates.clear();
                for h in self.held.values_mut() {
                    h.role = ReplicaRole::rejoining(self.replication.mode());
                }
                let mut out = Vec::new();
                self.close_unneeded_peers(&mut out);
                out.push(NodeEffect::RejoinAll);
                out
            }
            LinkState::Down { .. } | LinkState::Starting | LinkState::Connected => Vec::new(),
        }
    }

    /// The link to coordinator `coordinator` broke (closed, failed, or the coordinator broke
    /// the protocol) at `now_us`: results held for it are lost with it (a leader counts this
    /// node failed and answers their transactions from the other replicas, or "outcome
    /// unknown"); dial again after [`CONNECT_RETRY_MS`].
    pub fn on_link_lost(&mut self, coordinator: CoordinatorId, now_us: u64) {
        let leading = (self.leader == Some(coordinator)).then_some(self.epoch);
        let Some(link) = self.links.get_mut(&coordinator) else { return };
        if matches!(link.state, LinkState::Down { .. }) {
            return;
        }
        link.state = LinkState::Down { since_us: now_us, redial_at_us: now_us + CONNECT_RETRY_MS * 1_000 };
        link.broke_leading = leading;
    }

    /// A dial of coordinator `coordinator` failed at `now_us`: try again after
    /// [`CONNECT_RETRY_MS`].
    pub fn on_dial_failed(&mut self, coordinator: CoordinatorId, now_us: u64) {
        let Some(link) = self.links.get_mut(&coordinator) else { return };
        let since_us = match link.state {
            LinkState::Down { since_us, .. } => since_us,
            LinkState::Starting | LinkState::Connected => now_us,
        };
        link.state = LinkState::Down { since_us, redial_at_us: now_us + CONNECT_RETRY_MS * 1_000 };
    }

    /// The time of the next [`NodeMachine::tick`] that does something.
    pub fn next_deadline_us(&self) -> u64 {
        let heartbeat = match self.leader_link() {
            Some(LinkState::Connected) => self.next_heartbeat_us,
            _ => u64::MAX,
        };
        let redial = self
            .links
            .values()
            .filter_map(|l| match l.state {
                LinkState::Down { redial_at_us, .. } => Some(redial_at_us),
                LinkState::Starting | LinkState::Connected => None,
            })
            .min()
            .unwrap_or(u64::MAX);
        let redial_peer = self
            .peers
            .values()
            .filter_map(|l| match l.state {
                PeerState::Down { redial_at_us } => Some(redial_at_us),
                PeerState::Dialing | PeerState::Up => None,
            })
            .min()
            .unwrap_or(u64::MAX);
        heartbeat.min(redial).min(redial_peer)
    }

    /// Time passes to `now_us`: a heartbeat to the leader when one is due (with each backup's
    /// progress, `applied(partition)`, for choosing whom to promote), and a dial of each
    /// coordinator and backup whose link is down and whose retry is due.
    pub fn tick(&mut self, now_us: u64, applied: impl Fn(PartitionId) -> Option<Seq>) -> Vec<NodeEffect> {
        let mut out = Vec::new();
        for (&backup, link) in self.peers.iter_mut() {
            if let PeerState::Down { redial_at_us } = link.state {
                if now_us >= redial_at_us && !wire::plant::planted(wire::plant::Plant::NoPeerRedial) {
                    link.state = PeerState::Dialing;
                    out.push(NodeEffect::DialPeer { backup, generation: link.generation });
                }
            }
        }
        for (&coordinator, link) in self.links.iter_mut() {
            if let LinkState::Down { since_us, redial_at_us } = link.state {
                if now_us >= redial_at_us && !wire::plant::planted(wire::plant::Plant::NoRedial) {
                    link.state = LinkState::Down { since_us, redial_at_us: u64::MAX };
                    out.push(NodeEffect::Dial { coordinator });
                }
            }
        }
        if let (Some(coordinator), Some(LinkState::Connected)) = (self.leader, self.leader_link()) {
            if now_us >= self.next_heartbeat_us {
                // One beat however late: a stalled node does not flood its link.
                while self.next_heartbeat_us <= now_us {
                    self.next_heartbeat_us += self.heartbeat_us;
                }
                let beat = NodeToCoordinator::Heartbeat { now_ms: now_us / 1_000 };
                out.push(NodeEffect::ToCoordinator { coordinator, msg: beat });
                for (&partition, h) in &self.held {
                    if h.role == ReplicaRole::Backup && !self.gates.contains_key(&partition) {
                        if let Some(seq) = applied(partition) {
                            let msg = NodeToCoordinator::BackupApplied { partition, seq };
                            out.push(NodeEffect::ToCoordinator { coordinator, msg });
                        }
                    }
                }
            }
        }
        out
    }
}
