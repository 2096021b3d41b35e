//! The node's links to the coordinators (docs/design.md §11):
//! - the node keeps a link to every coordinator of `cluster.toml`, dialing each when its
//!   [`NodeMachine`] says so (at start, and [`CONNECT_RETRY_MS`] after a failed dial or a
//!   broken link: `NodeEffect::Dial`, the same decision the simulator runs; docs/design.md
//!   §14): a reader task per link routes the coordinator's batches to the executors' inboxes
//!   (awaiting room: backpressure reaches the coordinator through QUIC flow control), and one
//!   writer task sends the executors' results, load progress and the machine's heartbeats
//!   (every `timeouts.heartbeat_ms`, also while loading) to the leader. Both hand what the
//!   node machine decided to the node's carrier (`crate::carrier`, the one the simulator
//!   runs) with this process as its world ([`carry`]): the machine is held for the decision
//!   and the carrying, and what found no room is waited for after, in order. A link that comes
//!   back to the leader that counted this node failed makes every partition rejoin, as a
//!   node restarted with `--rejoin` does: it copies its partitions from live replicas
//!   (docs/design.md, "Failure and recovery");
//! - beside each coordinator link the node holds a liveness tether ([`wire::tether`]): a TCP
//!   connection to that coordinator's address, keyed to the link, which it never writes to
//!   after its header and drops when the link ends — and which the kernel closes the moment
//!   this process ends, SIGKILL included, so the coordinator learns of a death within a round
//!   trip rather than after `failure_timeout_ms` of silence. Opening it is a spawned task
//!   that never holds up the link; a coordinator that does not take it (an older build, its
//!   port taken) still has the heartbeats.
//!
//! Guarantees: what an executor sent before a link came back (under an older link generation) is
//! dropped, never sent on the new link; a message for a coordinator whose link is down is
//! dropped, as the node machine expects; a coordinator that refuses this node stops it; a
//! stopping node closes each link with `CLOSE_NORMAL`.
//!
//! [`NodeMachine`]: crate::machine::NodeMachine
//! [`CONNECT_RETRY_MS`]: super::CONNECT_RETRY_MS

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{debug, error, info, warn};
use wire::channel::{CoordinatorToNode, Epoched, FromCoordinator, NodeToCoordinator};
use wire::config::split_address;
use wire::endpoint::{self, EndpointError, EndpointLimits, Link};
use wire::messages::{CoordinatorId, NodeId, PartitionId, Seq, Shipment};

use super::backup_links::{close_peer, dial_peer, open_peer, publish_gates, ship};
use super::{
    LinkOutbox, Node, OutboxEvent, Outgoing, Work, CONNECT_RETRIES_PER_LOG, LINK_OUTBOX_MAX, SLOW_WORK,
    TETHER_STOP_LINGER,
};
use crate::carrier::Queued;
use crate::machine::{NodeEffect, NodeMachine};
use crate::replica::Emit;

/// Why one attempt to dial a coordinator or a peer node made no link.
#[derive(Debug)]
pub(super) enum DialFailure {
    /// The peer refused this node (its certificate, identity or hello): dialing again
    /// cannot help.
    Refused,
    /// Not reachable (yet): the address does not resolve, or the handshake failed.
    Unreachable,
    /// The node is stopping.
    Stopped,
}

/// One attempt to dial `address` (the coordinator's or a peer node's); `attempt` counts the
/// failed ones before it, so that only every [`CONNECT_RETRIES_PER_LOG`]th is logged.
pub(super) async fn dial_once(
    node: &Node,
    peer: wire::tls::Identity,
    what: &str,
    address: &str,
    attempt: u32,
) -> Result<Link, DialFailure> {
    let server_name = split_address(address).map(|(h, _)| h.to_string()).unwrap_or_default();
    let tls = match wire::tls::client_config(&node.config.cert_dir, wire::tls::Identity::Node(node.id)) {
        Ok(t) => t,
        Err(e) => {
            error!(error = %e, peer = what, "cannot read the node's certificates; not connecting");
            return Err(DialFailure::Refused);
        }
    };
    let log = attempt % CONNECT_RETRIES_PER_LOG == 0;
    let addr = match wire::config::resolve(what, address) {
        Ok(a) => a,
        Err(e) => {
            if log {
                warn!(error = %e, peer = what, "cannot resolve the address; retrying");
            }
            return Err(DialFailure::Unreachable);
        }
    };
    let limits = match peer {
        wire::tls::Identity::Coordinator(_) => EndpointLimits::to_coordinator(&node.config),
        _ => EndpointLimits::from_config(&node.config),
    };
    let connect = endpoint::connect_to(peer, addr, &server_name, tls, node.hello(), limits);
    tokio::select! {
        r = connect => match r {
            Ok(link) => Ok(link),
            Err(e @ (EndpointError::HelloRefused { .. }
            | EndpointError::HelloRejected { .. }
            | EndpointError::CertificateRefused { .. }
            | EndpointError::PeerCertificateInvalid { .. }
            | EndpointError::IdentityRefused { .. }
            | EndpointError::IdentityMismatch { .. }
            | EndpointError::WrongPeer { .. })) => {
                error!(peer = what, %address, error = %e, "refused this node");
                Err(DialFailure::Refused)
            }
            Err(e) => {
                if log {
                    info!(peer = what, %address, error = %e, "not reachable yet; retrying");
                }
                Err(DialFailure::Unreachable)
            }
        },
        () = node.stopped() => Err(DialFailure::Stopped),
    }
}

/// Keeps a link to every coordinator of `cluster.toml` (the node machine says which leads;
/// docs/design.md §11), and the writer task that sends through them: the executors' messages
/// (through the node machine's ship gates), backups' acknowledgements and heartbeats.
pub(super) async fn coordinator_links(
    node: Arc<Node>,
    mut from_executors: mpsc::Receiver<Outgoing>,
    mut events: mpsc::Receiver<OutboxEvent>,
) {
    // Dropped (and every link task with it) when this task ends or is aborted.
    let mut links = tokio::task::JoinSet::new();
    for c in node.config.coordinator_ids() {
        links.spawn(coordinator_link(node.clone(), c));
    }
    tokio::select! {
        () = write_to_coordinators(&node, &mut from_executors, &mut events) => {}
        () = node.stopped() => {
            // Each link task closes its link (CLOSE_NORMAL) and ends.
            while links.join_next().await.is_some() {}
        }
    }
}

/// Carries coordinator `c`'s link: dials it at once, then each time the node machine says
/// so (`NodeEffect::Dial`, [`CONNECT_RETRY_MS`] after a failed dial or a broken link —
/// docs/design.md §14: the machine decides, the simulator runs the same decision), and
/// while it is up carries the coordinator's messages in, through the node machine, and what
/// the writer task queued out. A node whose only coordinator's link came back rejoins every
/// partition (`NodeMachine::on_link_up`); with several coordinators, the leader's membership
/// says which replicas rejoin. A coordinator that refuses this node stops it.
///
/// [`CONNECT_RETRY_MS`]: super::CONNECT_RETRY_MS
async fn coordinator_link(node: Arc<Node>, c: CoordinatorId) {
    let Some(address) = node.config.coordinator_by_id(c).map(|x| x.address.clone()) else { return };
    let Some(dial_due) = node.dial_due.get(&c) else { return };
    let field = format!("the address of coordinator {c}");
    let mut conn = 0u64;
    let mut failed = 0u32;
    let mut due = true;
    loop {
        if !due {
            tokio::select! {
                () = dial_due.notified() => {}
                () = node.stopped() => return,
            }
        }
        due = false;
        let link =
            match dial_once(&node, wire::tls::Identity::Coordinator(u16::from(c)), &field, &address, failed).await {
                Ok(link) => link,
                Err(DialFailure::Unreachable) => {
                    failed = failed.wrapping_add(1);
                    node.machine().on_dial_failed(c, micros(&node));
                    continue;
                }
                Err(DialFailure::Stopped) => return,
                Err(DialFailure::Refused) => {
                    if !*node.stopping.borrow() {
                        node.stop(&format!("refused by coordinator {c}"));
                    }
                    return;
                }
            };
        failed = 0;
        conn += 1;
        info!(coordinator = c, %address, "joined coordinator {c}");
        // Dropped when this link ends, and the tether with it.
        let (tether_held, link_ended) = tokio::sync::oneshot::channel::<()>();
        // Told when the coordinator's end of the tether closes: its process ended.
        let (died, mut coordinator_died) = tokio::sync::oneshot::channel::<()>();
        match link.tether_key() {
            Some(key) => {
                let stopping = node.stopping.subscribe();
                let tether = hold_tether(node.id, c, link.remote_address(), key, link_ended, died, stopping);
                tokio::spawn(tether);
            }
            None => debug!(coordinator = c, "the link's TLS session exports no key; no liveness tether"),
        }
        let coordinator_died = async {
            if (&mut coordinator_died).await.is_err() {
                std::future::pending::<()>().await; // no tether: the link's idle timeout tells
            }
        };
        let (mut sender, mut receiver) = link.split();
        let (out, out_rx) = mpsc::channel(LINK_OUTBOX_MAX);
        node.links.lock().unwrap_or_else(|e| e.into_inner()).insert(c, LinkOutbox { conn, out });
        // A link back to the leader that counted this node failed: every partition rejoins
        // (`NodeLinks::rejoin_all`), told so before any batch of the new link reaches it.
        let told = tokio::select! {
            r = carry(&node, |m, now| m.on_link_up(c, now)) => r.is_ok(),
            () = node.stopped() => false,
        };
        node.first_link.send_replace(true);
        let stopped = tokio::select! {
            () = read_from_coordinator(&node, c, &mut receiver), if told => false,
            () = send_queued(&node, c, &mut sender, out_rx) => false,
            // Its link, over UDP, would go silent until QUIC's idle timeout.
            () = coordinator_died => {
                info!(coordinator = c, "coordinator {c}'s process ended (its liveness tether closed); its link is dropped");
                false
            }
            () = node.stopped() => true,
        };
        if stopped {
            // A clean stop: the coordinator reads a death notice (`LinkEnd::ClosedByPeer`),
            // not a lost link. The tether outlives the close (see `hold_tether`).
            sender.close(endpoint::CLOSE_NORMAL, "the node is shutting down");
            drop(tether_held);
            return;
        }
        drop(tether_held);
        {
            let mut links = node.links.lock().unwrap_or_else(|e| e.into_inner());
            if links.get(&c).is_some_and(|l| l.conn == conn) {
                links.remove(&c);
            }
        }
        if *node.stopping.borrow() {
            return;
        }
        // What the executors send meanwhile to this coordinator is lost with the link.
        let leader = node.machine().leader() == Some(c);
        node.machine().on_link_lost(c, micros(&node));
        if leader {
            error!(coordinator = c, "the link to the leading coordinator broke; dialing again");
        } else {
            warn!(coordinator = c, "the link to coordinator {c} broke; dialing again");
        }
    }
}

/// Node `me`'s liveness tether to coordinator `c` at `addr` ([`wire::tether`]), keyed to
/// the link that just came up: opened, then held — never written to again — until
/// `link_ended` fires (the link ended) or the coordinator ends it (it refused the tether, or
/// stopped: `died` is told). A node that is stopping keeps it [`TETHER_STOP_LINGER`]
/// longer: its link's clean close must reach the coordinator first. Failing to open it costs
/// nothing but the faster detection (logged at debug).
async fn hold_tether(
    me: NodeId,
    c: CoordinatorId,
    addr: SocketAddr,
    key: wire::tether::TetherKey,
    mut link_ended: tokio::sync::oneshot::Receiver<()>,
    died: tokio::sync::oneshot::Sender<()>,
    stopping: watch::Receiver<bool>,
) {
    let header = wire::tether::Header { holder: wire::tether::Holder::Node(me), key };
    let released = async {
        let _ = (&mut link_ended).await;
    };
    let held = wire::tether::hold(addr, &header, wire::tether::OPEN_TIMEOUT, wire::tether::ACCEPT_TIMEOUT, released);
    let _stream = match held.await {
        wire::tether::Held::NotAccepted(why) => {
            debug!(coordinator = c, %addr, why, "no liveness tether; the coordinator relies on heartbeats");
            return;
        }
        wire::tether::Held::Ended(end) => {
            // The coordinator's process ended: its link is dropped now, not at QUIC's idle
            // timeout.
            debug!(coordinator = c, end = ?end, "the coordinator ended the liveness tether");
            let _ = died.send(());
            return;
        }
        wire::tether::Held::Released(stream) => stream,
    };
    if *stopping.borrow() {
        // (Dropped sooner if the runtime ends first: the process is ending then.)
        tokio::time::sleep(TETHER_STOP_LINGER).await;
    }
}

/// Sends what the writer task queued for coordinator `c`, until the link breaks.
async fn send_queued(
    node: &Node,
    c: CoordinatorId,
    sender: &mut wire::endpoint::LinkSender,
    mut queued: mpsc::Receiver<NodeToCoordinator>,
) {
    while let Some(msg) = queued.recv().await {
        if let Err(e) = sender.send(&msg).await {
            if !*node.stopping.borrow() {
                error!(coordinator = c, error = %e, "cannot send to the coordinator; link lost");
            }
            return;
        }
    }
}

/// The receiving side of coordinator `c`'s link, until it breaks: each message through the
/// node machine, carried at once (to its partition's executor, awaiting room).
async fn read_from_coordinator(node: &Node, c: CoordinatorId, receiver: &mut endpoint::LinkReceiver) {
    loop {
        let (epoch, msg) = match receiver.recv::<FromCoordinator>().await {
            Ok(Some(FromCoordinator::Epoched(Epoched { epoch, msg }))) => (epoch, msg),
            Ok(None) => {
                if !*node.stopping.borrow() {
                    warn!(coordinator = c, "the coordinator closed the link");
                }
                return;
            }
            Err(e) if e.is_protocol_violation() => {
                warn!(coordinator = c, error = %e, "the coordinator broke the protocol; its link is closed");
                return;
            }
            Err(e) => {
                if !*node.stopping.borrow() {
                    warn!(coordinator = c, error = %e, "the coordinator link failed");
                }
                return;
            }
        };
        match &msg {
            CoordinatorToNode::Membership { partition, epoch, live } => {
                let epoch = wire::channel::control::membership_epoch(*epoch);
                info!(partition, epoch = %epoch, live = ?live, "membership changed")
            }
            CoordinatorToNode::ShipTo { partition, backup } => {
                info!(partition, backup, "shipping to a rejoining backup")
            }
            CoordinatorToNode::PartitionStopped { partition, reason } => {
                error!(partition, reason = %reason, "the coordinator stopped the partition")
            }
            CoordinatorToNode::TakeOver { epoch } => info!(coordinator = c, epoch, "coordinator {c} takes over"),
            _ => {}
        }
        if carry(node, |m, _| m.on_coordinator(c, epoch, msg)).await.is_err() {
            return;
        }
    }
}

/// The writer task: executors' messages (results held by the ship gates in sync shipping,
/// shipments to the backups' links), backups' acknowledgements, and heartbeats and redials,
/// each through the node machine and carried at once.
async fn write_to_coordinators(
    node: &Node,
    from_executors: &mut mpsc::Receiver<Outgoing>,
    events: &mut mpsc::Receiver<OutboxEvent>,
) {
    // The node machine's clock runs from the start (its redials are due before any link is
    // up); what the executors send waits in their queue until the first link is up (a load
    // report must not be lost to a link not yet made).
    let mut first = node.first_link.subscribe();
    let mut linked = *first.borrow();
    // Woken at the node machine's next deadline (a heartbeat, a redial), and at least every
    // heartbeat period.
    let period = Duration::from_millis(node.config.timeouts.heartbeat_ms.max(1));
    let wake = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(wake);
    loop {
        let event = tokio::select! {
            up = first.changed(), if !linked => {
                linked = up.is_err() || *first.borrow();
                continue;
            }
            m = from_executors.recv(), if linked => match m {
                // A message of an executor not yet told the link came back: lost with the link.
                Some((generation, _)) if generation < node.link_generation.load(Ordering::SeqCst) => continue,
                Some((_, emitted)) => Writes::Emitted(emitted),
                None => return,
            },
            e = events.recv() => match e {
                Some(OutboxEvent::Ack { from, partition, seq }) => Writes::Ack { from, partition, seq },
                Some(OutboxEvent::PeerDial { backup, generation, outcome }) => {
                    Writes::PeerDial { backup, generation, outcome }
                }
                None => return,
            },
            () = &mut wake => {
                let late = wake.deadline().elapsed();
                if late >= SLOW_WORK {
                    // The coordinators hear nothing from this node meanwhile.
                    warn!(ms = late.as_millis() as u64, "the node's writer was held up past its deadline (a link's queue full, or its threads starved)");
                }
                Writes::Tick
            }
        };
        let mut next = None;
        let carried = carry(node, |m, now| match event {
            Writes::Emitted(emitted) => m.on_emit(emitted, now),
            Writes::Ack { from, partition, seq } => m.on_ack(from, partition, seq, now),
            Writes::PeerDial { backup, generation, outcome } => m.on_peer_dial(backup, generation, outcome, now),
            Writes::Tick => {
                let applied =
                    |p: PartitionId| node.replicas.get(&p).map(|r| r.shared.applied_seq.load(Ordering::Relaxed));
                let effects = m.tick(now, applied);
                next = Some(Duration::from_micros(m.next_deadline_us().saturating_sub(now)).min(period));
                effects
            }
        });
        // Nothing to do if it failed: the node stops, and this task with it.
        let _ = carried.await;
        if let Some(next) = next {
            wake.as_mut().reset(tokio::time::Instant::now() + next);
        }
    }
}

/// What woke the writer task.
enum Writes {
    /// An executor's message.
    Emitted(Emit),
    /// A backup's acknowledgement.
    Ack { from: NodeId, partition: PartitionId, seq: Seq },
    /// How a dial of a backup's link ended.
    PeerDial { backup: NodeId, generation: u64, outcome: crate::machine::PeerDial },
    /// The node machine's deadline (a heartbeat, a redial).
    Tick,
}

/// The node stopped, or a partition's executor is gone, while its effects were carried.
#[derive(Debug)]
pub(super) struct Gone;

/// Decides with the node machine (`decide`, at the machine's time) and carries out what it
/// decided ([`crate::carrier::carry`]) in one pass, holding the machine meanwhile; then
/// waits, in order, for room for what found none (executors' inboxes, full link queues).
pub(super) async fn carry(
    node: &Node,
    decide: impl FnOnce(&mut NodeMachine, u64) -> Vec<NodeEffect>,
) -> Result<(), Gone> {
    let waits = {
        let now_us = micros(node);
        let mut links =
            ProcessLinks { node, machine: node.machine(), now_us, waits: Vec::new(), waiting: Vec::new(), stop: false };
        let effects = decide(&mut links.machine, now_us);
        crate::carrier::carry(&mut links, effects);
        if links.stop {
            return Err(Gone);
        }
        links.waits
    };
    for wait in waits {
        match wait {
            Wait::Link(out, msg) => {
                // An error: the link's task ended (it broke); the message is lost with it.
                let _ = out.send(msg).await;
            }
            Wait::Executor(partition, work) => {
                let Some(r) = node.replicas.get(&partition) else { continue };
                if r.deliver(partition, "coordinator", work).await.is_err() {
                    return Err(Gone);
                }
            }
        }
    }
    Ok(())
}

/// What waits, after a carrier's pass, for room.
enum Wait {
    /// A message for a coordinator link whose queue was full.
    Link(mpsc::Sender<NodeToCoordinator>, NodeToCoordinator),
    /// Work for a partition's executor.
    Executor(PartitionId, Work),
}

/// The node process's world as the carrier sees it (`crate::carrier::NodeLinks`): the
/// machine held for one pass; a message that finds no room waits after the pass, and so
/// does everything after it on the same queue, so that each queue keeps the machine's order.
struct ProcessLinks<'a> {
    node: &'a Node,
    machine: std::sync::MutexGuard<'a, NodeMachine>,
    now_us: u64,
    waits: Vec<Wait>,
    /// Coordinators with a message waiting.
    waiting: Vec<CoordinatorId>,
    /// The node stops (the coordinator shut the cluster down).
    stop: bool,
}

impl ProcessLinks<'_> {
    fn for_executor(&mut self, partition: PartitionId, work: Work) {
        if self.node.replicas.contains_key(&partition) {
            self.waits.push(Wait::Executor(partition, work));
        }
    }
}

impl crate::carrier::NodeLinks for ProcessLinks<'_> {
    fn machine(&mut self) -> &mut NodeMachine {
        &mut self.machine
    }

    fn now_us(&self) -> u64 {
        self.now_us
    }

    fn to_coordinator(&mut self, coordinator: CoordinatorId, msg: NodeToCoordinator) {
        let out = self.node.links.lock().unwrap_or_else(|e| e.into_inner()).get(&coordinator).map(|l| l.out.clone());
        // No link: the message is lost with it, as the node machine expects.
        let Some(out) = out else { return };
        if self.waiting.contains(&coordinator) {
            self.waits.push(Wait::Link(out, msg));
            return;
        }
        match out.try_send(msg) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(msg)) => {
                self.waiting.push(coordinator);
                self.waits.push(Wait::Link(out, msg));
            }
        }
    }

    fn to_partition(&mut self, partition: PartitionId, msg: CoordinatorToNode) {
        if super::is_urgent(&msg) {
            if let Some(r) = self.node.replicas.get(&partition) {
                r.shared.urgent_queued.fetch_add(1, Ordering::SeqCst);
            }
        }
        self.for_executor(partition, Work::Coordinator(msg));
    }

    fn ship(&mut self, backups: &[NodeId], shipment: Shipment, queued: &mut Vec<(NodeId, Queued)>) {
        ship(self.node, backups, shipment, queued);
    }

    fn open_peer(&mut self, backup: NodeId, generation: u64) {
        open_peer(self.node, backup, generation);
    }

    fn dial_peer(&mut self, backup: NodeId, generation: u64) {
        dial_peer(self.node, backup, generation);
    }

    fn close_peer(&mut self, backup: NodeId) {
        close_peer(self.node, backup);
    }

    fn dial(&mut self, coordinator: CoordinatorId) {
        // The link's task waits for this (a stored permit if it is still dialing).
        if let Some(due) = self.node.dial_due.get(&coordinator) {
            due.notify_one();
        }
    }

    fn rejoin_all(&mut self) {
        let link_generation = self.node.link_generation.fetch_add(1, Ordering::SeqCst) + 1;
        warn!(link_generation, "the coordinator link is back; every partition rejoins");
        for &partition in self.node.replicas.keys() {
            self.for_executor(partition, Work::Rejoin { link_generation, only_if_serving: false });
        }
    }

    fn rejoin(&mut self, partition: PartitionId) {
        warn!(partition, "left out of the partition's membership; the replica rejoins if it serves");
        let link_generation = self.node.link_generation.load(Ordering::SeqCst);
        self.for_executor(partition, Work::Rejoin { link_generation, only_if_serving: true });
    }

    fn shutdown(&mut self, reason: String) {
        info!(reason = %reason, "the coordinator shuts the cluster down");
        self.node.stop("the coordinator said so");
        self.stop = true;
    }

    fn not_held(&mut self, partition: PartitionId, name: &'static str) {
        warn!(partition, message = name, "message for a partition this node does not hold; ignored")
    }

    fn gates_changed(&mut self) {
        publish_gates(self.node, &self.machine);
    }
}

/// Microseconds since the node started (the node machine's clock).
fn micros(node: &Node) -> u64 {
    node.started.elapsed().as_micros() as u64
}
