//! The coordinator's carrier (docs/design.md §14, "One carrier"): the one place where a
//! coordinator's [`Member`] meets its links. The coordinator process (tokio and QUIC,
//! [`crate::process`]) and the simulator (`sim`, its seeded network) both drive a
//! [`Carrier`] and differ only in the [`Links`] they hand it — how bytes reach a node, a
//! client or another coordinator, and how the group's state reaches the medium. Everything the
//! coordinator decides about its links is decided here, once:
//!
//! - a **cluster starts** when every node the file places a replica on has connected: until
//!   then no member exists, requests are refused "not the leader", and nothing is sent (nodes
//!   started by hand may come minutes apart, and one that never came could not be told from
//!   one that failed). A member restarted from a stored state is built at once;
//! - the **only coordinator is a group of one** ([`Member`] with one member): it elects itself
//!   at once and takes over like any leader, so every coordinator — and the simulator's —
//!   runs the same machine;
//! - a node that **connects again** replaces its old connection: a node still counted live is
//!   first declared failed ([`Detection::Replaced`]), since its new connection holds none of
//!   the old one's state, and the old connection is closed;
//! - a node **declared failed** (`Event::NodeDown`, however it was detected) has its link
//!   closed at once: failed is final for that process, and a live but excluded process must
//!   learn it was excluded;
//! - a node whose **queue is full** does not read what it is sent: its link is closed and it
//!   is declared failed ([`Detection::NotReading`]);
//! - a node's **liveness tether** ending closes its link and declares it failed;
//! - events of a connection that was replaced are ignored (its connection id is stale);
//! - the group's state is handed to [`Links::persist`] before anything after it goes out; a
//!   coordinator that cannot store it stops ([`CarrierStop`]);
//! - replies are grouped per client and sent by [`Carrier::flush_replies`], at most
//!   [`CLIENT_REPLIES_PER_FRAME_MAX`] to a frame.
//!
//! The carrier never waits and keeps no clock: each call takes the time.

use std::collections::BTreeMap;

use tracing::{error, info, warn};
use wire::channel::{ClientToCoordinator, CoordinatorToClient, CoordinatorToNode, NodeToCoordinator};
use wire::config::ClusterConfig;
use wire::messages::{ClientReply, ClientResult, CoordinatorId, DigestOutcome, Epoch, NodeId, Rejection};

use crate::error::CoordinatorError;
use crate::group::GroupState;
use crate::leader::{ClientId, Coordinator, Detection, Event};
use crate::member::{Member, MemberOutput};

/// A connection's serial number: a node may connect again, and its old connection's late
/// events must be told apart.
pub type ConnId = u64;

/// Replies in one `ClientReplies` frame (each ≤ ~256 bytes: far below the frame limit).
pub const CLIENT_REPLIES_PER_FRAME_MAX: usize = 4_096;

/// What a coordinator's world does for its [`Carrier`]. Implemented by the process (tokio
/// and QUIC) and by the simulator (its seeded network and disks). No method may wait on a
/// peer.
pub trait Links {
    /// Hands `msg`, of `epoch`, to each `(node, connection)` in `to`; pushes onto `full` each
    /// node whose queue has no room for it (it does not read what it is sent).
    fn to_nodes(&mut self, to: &[(NodeId, ConnId)], epoch: Epoch, msg: CoordinatorToNode, full: &mut Vec<NodeId>);
    /// Ends node `node`'s connection `conn`, telling it `reason`.
    fn close_node(&mut self, node: NodeId, conn: ConnId, reason: &str);
    /// Sends a raft message to coordinator `to` (lost if there is no link: raft sends again).
    fn to_coordinator(&mut self, to: CoordinatorId, bytes: Vec<u8>);
    /// Sends `msg` to client `client` (dropped if it is gone).
    fn to_client(&mut self, client: ClientId, msg: CoordinatorToClient);
    /// Stores the group's state durably, replacing what was stored; an error stops the
    /// coordinator.
    fn persist(&mut self, state: &GroupState) -> Result<(), String>;
    /// Something happened (logged, counted).
    fn event(&mut self, _e: &Event) {}
    /// A transaction's answer was decided (counted).
    fn answered(&mut self, _reply: &ClientReply) {}
    /// A message of a node's current connection arrived (counted).
    fn heard(&mut self, _node: NodeId, _msg: &NodeToCoordinator) {}
}

/// Why a coordinator must stop.
#[derive(Debug, thiserror::Error)]
pub enum CarrierStop {
    #[error("cannot store the coordinator group's state: {0}")]
    Store(String),
    #[error("cannot build the coordinator group member: {0}")]
    Build(#[from] CoordinatorError),
}

/// One coordinator's machine and the state of its links (see the module header).
#[derive(Debug)]
pub struct Carrier {
    config: ClusterConfig,
    me: CoordinatorId,
    election_offset_ticks: usize,
    /// `None` until the cluster starts (every placed node connected) or a restart.
    member: Option<Box<Member>>,
    /// Each connected node's current connection.
    nodes: BTreeMap<NodeId, ConnId>,
    /// Replies decided and not yet sent, per client.
    replies: BTreeMap<ClientId, Vec<ClientReply>>,
    /// Set by [`Carrier::shutdown`]: nodes lost from then on are not declared failed.
    stopping: bool,
}

impl Carrier {
    /// Coordinator `me` of `config`: with the group state it stored (a restart) its member is
    /// built at once; without (a first start), once every placed node connected.
    /// `election_offset_ticks` spreads the members' first elections.
    pub fn new(
        config: &ClusterConfig,
        me: CoordinatorId,
        election_offset_ticks: usize,
        stored: Option<GroupState>,
        now_us: u64,
    ) -> Result<Carrier, CarrierStop> {
        let mut c = Carrier {
            config: config.clone(),
            me,
            election_offset_ticks,
            member: None,
            nodes: BTreeMap::new(),
            replies: BTreeMap::new(),
            stopping: false,
        };
        if let Some(stored) = stored {
            c.member = Some(Box::new(Member::new(config, me, election_offset_ticks, Some(stored), now_us)?));
        }
        Ok(c)
    }

    pub fn me(&self) -> CoordinatorId {
        self.me
    }

    /// The group member, once built.
    pub fn member(&self) -> Option<&Member> {
        self.member.as_deref()
    }

    /// The coordinator state machine, where this coordinator leads.
    pub fn coordinator(&self) -> Option<&Coordinator> {
        self.member.as_ref().and_then(|m| m.coordinator())
    }

    /// The epoch this coordinator acts in towards nodes, if it leads.
    pub fn leading_epoch(&self) -> Option<Epoch> {
        self.member.as_ref().and_then(|m| m.leading())
    }

    /// The leader this coordinator knows of.
    pub fn leader(&self) -> Option<CoordinatorId> {
        self.member.as_ref().and_then(|m| m.leader())
    }

    /// The raft term (0 before the member is built).
    pub fn term(&self) -> Epoch {
        self.member.as_ref().map_or(0, |m| m.term())
    }

    /// When [`Carrier::tick`] must next be called, if ever.
    pub fn next_deadline_us(&self) -> Option<u64> {
        self.member.as_ref().map(|m| m.next_deadline_us()).filter(|&d| d != u64::MAX)
    }

    /// Node `node`'s current connection, if it is connected.
    pub fn connection(&self, node: NodeId) -> Option<ConnId> {
        self.nodes.get(&node).copied()
    }

    /// Whether `conn` is node `node`'s current connection.
    pub fn is_current(&self, node: NodeId, conn: ConnId) -> bool {
        self.nodes.get(&node) == Some(&conn)
    }

    /// The connected nodes, with their connections.
    pub fn connected(&self) -> impl Iterator<Item = (NodeId, ConnId)> + '_ {
        self.nodes.iter().map(|(&n, &c)| (n, c))
    }

    /// Nodes the file places a replica on that have not connected yet (a spare node, placed
    /// nowhere, joins later with `glass node --join` and is not waited for).
    pub fn missing_nodes(&self) -> Vec<NodeId> {
        self.config
            .nodes
            .iter()
            .map(|n| n.id)
            .filter(|&id| self.config.partitions_on_node(id).next().is_some() && !self.nodes.contains_key(&id))
            .collect()
    }

    /// Node `node` connected on `conn`. A connection it had is replaced (and a node still
    /// counted live declared failed first); the cluster starts once every placed node came.
    pub fn on_node_up(
        &mut self,
        node: NodeId,
        conn: ConnId,
        now_us: u64,
        links: &mut dyn Links,
    ) -> Result<(), CarrierStop> {
        if let Some(&old) = self.nodes.get(&node) {
            info!(node, "node connected again; its new connection replaces the old one");
            if self.coordinator().is_some_and(|c| c.is_node_live(node)) {
                let out =
                    self.member.as_mut().map_or_else(Vec::new, |m| m.on_node_lost(node, Detection::Replaced, now_us));
                self.dispatch(out, now_us, links)?;
            }
            // The dispatch may have closed it already (its NodeDown).
            if self.nodes.get(&node) == Some(&old) {
                self.disconnect(node, "a newer connection of this node replaced this one", links);
            }
        }
        info!(node, conn, "node joined");
        self.nodes.insert(node, conn);
        if let Some(m) = &mut self.member {
            let out = m.on_node_connected(node, now_us);
            return self.dispatch(out, now_us, links);
        }
        if self.missing_nodes().is_empty() {
            return self.start(now_us, links);
        }
        Ok(())
    }

    /// Builds the member once every placed node connected, and tells it of them.
    fn start(&mut self, now_us: u64, links: &mut dyn Links) -> Result<(), CarrierStop> {
        info!("every node joined");
        let member = Member::new(&self.config, self.me, self.election_offset_ticks, None, now_us)?;
        info!(term = member.term(), "member of the coordinator group; electing a leader");
        self.member = Some(Box::new(member));
        let nodes: Vec<NodeId> = self.nodes.keys().copied().collect();
        for node in nodes {
            let out = self.member.as_mut().map_or_else(Vec::new, |m| m.on_node_connected(node, now_us));
            self.dispatch(out, now_us, links)?;
        }
        Ok(())
    }

    /// A message from node `node` on connection `conn` (ignored unless it is the current one,
    /// and before the cluster starts: a new member asks every replica where it stands).
    pub fn on_node_message(
        &mut self,
        node: NodeId,
        conn: ConnId,
        msg: NodeToCoordinator,
        now_us: u64,
        links: &mut dyn Links,
    ) -> Result<(), CarrierStop> {
        if !self.is_current(node, conn) {
            return Ok(());
        }
        links.heard(node, &msg);
        let Some(m) = &mut self.member else { return Ok(()) };
        let out = m.on_node_message(node, msg, now_us);
        self.dispatch(out, now_us, links)
    }

    /// Node `node`'s connection `conn` ended (`detection`: how it was noticed). Unless it was
    /// replaced already, the node is declared failed — not while this coordinator stops, nor
    /// before the cluster started (it is then waited for again).
    pub fn on_node_lost(
        &mut self,
        node: NodeId,
        conn: ConnId,
        detection: Detection,
        now_us: u64,
        links: &mut dyn Links,
    ) -> Result<(), CarrierStop> {
        if !self.is_current(node, conn) {
            return Ok(());
        }
        self.nodes.remove(&node);
        self.declare_failed(node, detection, now_us, links)
    }

    /// Node `node`'s liveness tether for connection `conn` ended: its process is gone. Its
    /// link is closed (QUIC would end it only at the idle timeout) and it is declared failed.
    pub fn on_tether_cut(
        &mut self,
        node: NodeId,
        conn: ConnId,
        how: String,
        now_us: u64,
        links: &mut dyn Links,
    ) -> Result<(), CarrierStop> {
        if !self.is_current(node, conn) {
            return Ok(());
        }
        if !self.stopping {
            warn!(node, how = %how, "the node's liveness tether ended");
        }
        self.disconnect(node, "the node's liveness tether ended: its process is gone", links);
        self.declare_failed(node, Detection::ConnectionLost { how }, now_us, links)
    }

    fn declare_failed(
        &mut self,
        node: NodeId,
        detection: Detection,
        now_us: u64,
        links: &mut dyn Links,
    ) -> Result<(), CarrierStop> {
        if self.stopping {
            return Ok(());
        }
        let Some(m) = &mut self.member else {
            warn!(node, "node left before the cluster started; waiting for it again");
            return Ok(());
        };
        let out = m.on_node_lost(node, detection, now_us);
        self.dispatch(out, now_us, links)
    }

    /// A client's transaction or digest request (status and shutdown requests are the
    /// process's: they decide nothing). Before the cluster starts, refused "not the leader".
    pub fn on_client_message(
        &mut self,
        client: ClientId,
        msg: ClientToCoordinator,
        now_us: u64,
        links: &mut dyn Links,
    ) -> Result<(), CarrierStop> {
        if let Some(m) = &mut self.member {
            let out = m.on_client_message(client, msg, now_us);
            return self.dispatch(out, now_us, links);
        }
        let refusal = || Rejection::NotLeader { leader: None };
        match msg {
            ClientToCoordinator::ClientRequests(requests) => {
                let replies = self.replies.entry(client).or_default();
                for r in requests {
                    let reply = ClientReply { request_id: r.request_id, result: ClientResult::Rejected(refusal()) };
                    links.answered(&reply);
                    replies.push(reply);
                }
            }
            ClientToCoordinator::DigestRequest { request_id, partition } => {
                let outcome = DigestOutcome::Rejected(refusal());
                links.to_client(client, CoordinatorToClient::DigestReply { request_id, partition, outcome });
            }
            ClientToCoordinator::StatusRequest { .. } | ClientToCoordinator::Shutdown { .. } => {}
        }
        Ok(())
    }

    /// Client `client` disconnected: its replies not yet sent go.
    pub fn on_client_gone(&mut self, client: ClientId) {
        self.replies.remove(&client);
    }

    /// A raft message from coordinator `from` (the links authenticated it).
    pub fn on_coordinator_message(
        &mut self,
        from: CoordinatorId,
        bytes: &[u8],
        now_us: u64,
        links: &mut dyn Links,
    ) -> Result<(), CarrierStop> {
        let Some(m) = &mut self.member else { return Ok(()) };
        let out = m.on_coordinator_message(from, bytes, now_us);
        self.dispatch(out, now_us, links)
    }

    /// Coordinator `peer`'s process ended (the process saw its liveness tether end): if it
    /// led, the member stands for election at once (docs/design.md §11, "A leader's death").
    pub fn on_coordinator_died(
        &mut self,
        peer: CoordinatorId,
        now_us: u64,
        links: &mut dyn Links,
    ) -> Result<(), CarrierStop> {
        let Some(m) = &mut self.member else { return Ok(()) };
        let out = m.on_coordinator_died(peer, now_us);
        self.dispatch(out, now_us, links)
    }

    /// Time passes to `now_us`: the member ticks if its deadline came.
    pub fn tick(&mut self, now_us: u64, links: &mut dyn Links) -> Result<(), CarrierStop> {
        let Some(m) = &mut self.member else { return Ok(()) };
        if m.next_deadline_us() > now_us {
            return Ok(());
        }
        let out = m.tick(now_us);
        self.dispatch(out, now_us, links)
    }

    /// Sends each client its pending replies, grouped into few frames.
    pub fn flush_replies(&mut self, links: &mut dyn Links) {
        for (client, mut replies) in std::mem::take(&mut self.replies) {
            while !replies.is_empty() {
                let rest = if replies.len() > CLIENT_REPLIES_PER_FRAME_MAX {
                    replies.split_off(CLIENT_REPLIES_PER_FRAME_MAX)
                } else {
                    Vec::new()
                };
                let frame = std::mem::replace(&mut replies, rest);
                links.to_client(client, CoordinatorToClient::ClientReplies(frame));
            }
        }
    }

    /// Stops: the replies decided go out, a leader tells every node `Shutdown`, and from here
    /// on nodes lost are not declared failed.
    pub fn shutdown(&mut self, reason: &str, links: &mut dyn Links) {
        self.flush_replies(links);
        if let Some(epoch) = self.leading_epoch() {
            let to: Vec<(NodeId, ConnId)> = self.connected().collect();
            let msg = CoordinatorToNode::Shutdown { reason: reason.to_string() };
            links.to_nodes(&to, epoch, msg, &mut Vec::new());
        }
        self.nodes.clear();
        self.stopping = true;
    }

    /// Ends node `node`'s link, if it has one, with `reason`.
    fn disconnect(&mut self, node: NodeId, reason: &str, links: &mut dyn Links) {
        if let Some(conn) = self.nodes.remove(&node) {
            info!(node, conn, reason, "closing the node's link");
            links.close_node(node, conn, reason);
        }
    }

    /// Carries out the member's outputs, in order: the group's state is stored before anything
    /// after it goes out. A node whose queue is full is then declared failed (and the outputs
    /// of that are carried out in turn).
    fn dispatch(&mut self, outputs: Vec<MemberOutput>, now_us: u64, links: &mut dyn Links) -> Result<(), CarrierStop> {
        let mut not_reading: Vec<NodeId> = Vec::new();
        let mut to: Vec<(NodeId, ConnId)> = Vec::new();
        for o in outputs {
            match o {
                MemberOutput::Persist(state) => {
                    if let Err(e) = links.persist(&state) {
                        error!(error = %e, "cannot store the coordinator group's state");
                        return Err(CarrierStop::Store(e));
                    }
                }
                MemberOutput::ToCoordinator { to, bytes } => links.to_coordinator(to, bytes),
                MemberOutput::ToNodes { nodes, epoch, msg } => {
                    to.clear();
                    to.extend(nodes.iter().filter_map(|&n| self.nodes.get(&n).map(|&c| (n, c))));
                    let mut full = Vec::new();
                    links.to_nodes(&to, epoch, msg, &mut full);
                    for n in full {
                        if !not_reading.contains(&n) {
                            not_reading.push(n);
                        }
                    }
                }
                MemberOutput::Reply { client, reply } => {
                    links.answered(&reply);
                    self.replies.entry(client).or_default().push(reply);
                }
                MemberOutput::ToClient { client, msg } => links.to_client(client, msg),
                MemberOutput::Event(e) => {
                    links.event(&e);
                    let keep = |d: &Detection| {
                        wire::plant::planted(wire::plant::Plant::KeepFailedNodeLinked)
                            && !matches!(d, Detection::Lagging { .. })
                    };
                    if let Event::NodeDown { node, ref detection, .. } = e {
                        if keep(detection) {
                            continue;
                        }
                        // Failed is final for this process of the node: its link ends now, so
                        // nothing more is held for it and a live but excluded process learns
                        // it was excluded (it comes back by a restart with --rejoin).
                        self.disconnect(node, "the coordinator declared this node failed", links);
                    }
                }
            }
        }
        for node in not_reading {
            let Some(&conn) = self.nodes.get(&node) else { continue };
            error!(node, conn, "the node does not read what it is sent (its queue is full); declaring it failed");
            self.disconnect(node, "the node did not read what it was sent", links);
            self.declare_failed(node, Detection::NotReading, now_us, links)?;
        }
        Ok(())
    }
}
