//! The core task: it owns the state machine (through the [`Carrier`]) and takes every event
//! from one bounded queue ([`CORE_INBOX_MAX`]): node, client and coordinator messages,
//! connections and losses, and timer ticks at the machine's next deadline (a thread wakes it
//! for deadlines under tokio's millisecond resolution, so a batch waits `batch_wait_us`, not a
//! millisecond). It handles what is queued (up to [`CORE_DRAIN_MAX`] events), then sends each
//! client its replies as one `ClientReplies` frame; a batch for several replicas is encoded
//! once and the same bytes go to each. It answers status requests, publishes metrics, and at
//! shutdown tells every node (if this coordinator leads) and client.
//!
//! Guarantees:
//! - the core never waits on a peer (nothing one peer does may stall it, and with it the
//!   failure detector): a node whose queue ([`NODE_OUTBOX_BYTES_MAX`]) is full does not read
//!   what it is sent (it is dead, hung, or hostile), so it is declared failed and its link
//!   closed; a client that lets its queue ([`CLIENT_OUTBOX_MAX`] frames) fill is disconnected;
//!   a full queue to another coordinator drops the raft message (raft sends again);
//! - the group's state is stored ([`GroupStore`], `run_dir/coordinator-<id>.raft`, fsynced)
//!   before anything that follows it is sent; a coordinator that cannot store it stops (it
//!   must not vote or lead on a state it may forget);
//! - a node declared failed (silent past `failure_timeout_ms`, its link or tether lost, or
//!   its queue full) is disconnected at once; a node that connects again (a restarted process)
//!   replaces its old connection, and a node still counted live then is first declared
//!   failed: its new connection holds none of the old one's state (a node whose link broke
//!   rejoins).
//!
//! [`Carrier`]: crate::carrier::Carrier
//! [`CORE_INBOX_MAX`]: super::CORE_INBOX_MAX
//! [`NODE_OUTBOX_BYTES_MAX`]: super::NODE_OUTBOX_BYTES_MAX

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use foldhash::HashMap;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info, warn};
use wire::channel::{
    ClientToCoordinator, CoordinatorToClient, CoordinatorToCoordinator, CoordinatorToNode, Epoched, FromCoordinator,
    NodeToCoordinator,
};
use wire::messages::{
    ClientReply, CoordinatorId, Epoch, LoadState, NodeId, PartitionId, PartitionPhase, PartitionReport, PeerKind,
    ProcessStatus, ReplicationRole,
};
use wire::tether::{Holder, TetherKey};

use super::{
    ClientTether, Core, CoreEvent, NodeOutbox, PeerOutbox, CLIENT_OUTBOX_MAX, CORE_DRAIN_MAX, TOKIO_TIMER_RESOLUTION,
    WAITING_LOG_INTERVAL,
};
use crate::carrier::{CarrierStop, ConnId, Links};
use crate::leader::{ClientId, Event, Phase};
use crate::store::GroupStore;

/// A store of the group's state slower than this is logged.
const SLOW_STORE: std::time::Duration = std::time::Duration::from_millis(20);

/// The process's [`Links`]: QUIC links through their bounded queues, and the raft state's
/// file.
struct ProcessLinks<'a> {
    outboxes: &'a mut BTreeMap<ConnId, NodeOutbox>,
    peers: &'a BTreeMap<CoordinatorId, PeerOutbox>,
    clients: &'a mut HashMap<ClientId, mpsc::Sender<CoordinatorToClient>>,
    store: &'a GroupStore,
    metrics: &'a mut crate::metrics::CoordinatorMetrics,
    batch_bytes: &'a mut BTreeMap<PartitionId, u64>,
    frame_bytes_max: usize,
}

/// The core's [`ProcessLinks`], borrowing its fields beside its carrier.
macro_rules! links {
    ($core:expr) => {
        &mut ProcessLinks {
            outboxes: &mut $core.outboxes,
            peers: &$core.peers,
            clients: &mut $core.clients,
            store: &$core.store,
            metrics: &mut $core.metrics,
            batch_bytes: &mut $core.batch_bytes,
            frame_bytes_max: $core.frame_bytes_max,
        }
    };
}

impl Links for ProcessLinks<'_> {
    fn to_nodes(&mut self, to: &[(NodeId, ConnId)], epoch: Epoch, msg: CoordinatorToNode, full: &mut Vec<NodeId>) {
        if to.is_empty() {
            return;
        }
        let framed = FromCoordinator::Epoched(Epoched { epoch, msg });
        let frame = match wire::codec::encode(&framed, self.frame_bytes_max) {
            Ok(f) => Arc::new(f),
            Err(e) => {
                error!(error = %e, "cannot encode a message for the nodes; dropped");
                return;
            }
        };
        let FromCoordinator::Epoched(Epoched { msg, .. }) = &framed;
        if let CoordinatorToNode::Batch(b) = msg {
            *self.batch_bytes.entry(b.partition).or_default() += (frame.len() * to.len()) as u64;
            self.metrics.on_batch_sent(b.partition, b.seq);
        }
        for &(node, conn) in to {
            if let Some(outbox) = self.outboxes.get(&conn) {
                if !outbox.offer(&frame) {
                    full.push(node);
                }
            }
        }
    }

    fn close_node(&mut self, _node: NodeId, conn: ConnId, reason: &str) {
        if let Some(outbox) = self.outboxes.remove(&conn) {
            outbox.close(reason.to_string());
        }
    }

    fn to_coordinator(&mut self, to: CoordinatorId, bytes: Vec<u8>) {
        if let Some(peer) = self.peers.get(&to) {
            if peer.out.try_send(CoordinatorToCoordinator::Raft(bytes)).is_err() {
                debug!(peer = to, "the link to the coordinator is full; raft message dropped");
            }
        }
    }

    fn to_client(&mut self, client: ClientId, msg: CoordinatorToClient) {
        send_client(self.clients, client, msg);
    }

    fn persist(&mut self, state: &crate::group::GroupState) -> Result<(), String> {
        let started = Instant::now();
        let saved = self.store.save(state).map_err(|e| e.to_string());
        // Every election and decision waits for this: a slow disk shows here.
        if started.elapsed() >= SLOW_STORE {
            info!(took_ms = started.elapsed().as_millis() as u64, "storing the coordinator group's state was slow");
        }
        saved
    }

    fn event(&mut self, e: &Event) {
        log_event(e);
        self.metrics.on_event(e);
    }

    fn answered(&mut self, reply: &ClientReply) {
        self.metrics.on_answer(&reply.result);
    }

    fn heard(&mut self, node: NodeId, msg: &NodeToCoordinator) {
        self.metrics.on_node_message(node, msg);
    }
}

/// Sends `msg` to `client`; a client whose queue is full is disconnected.
fn send_client(
    clients: &mut HashMap<ClientId, mpsc::Sender<CoordinatorToClient>>,
    client: ClientId,
    msg: CoordinatorToClient,
) {
    let Some(tx) = clients.get(&client) else { return };
    if tx.try_send(msg).is_err() {
        warn!(client, limit = CLIENT_OUTBOX_MAX, "client does not read its replies; disconnected");
        clients.remove(&client);
    }
}

impl Core {
    /// Handles events until shutdown; returns why it stopped.
    pub(super) async fn run(
        &mut self,
        mut rx: mpsc::Receiver<CoreEvent>,
        shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> String {
        loop {
            let deadline = self.carrier.next_deadline_us();
            let sleep_until = match deadline {
                Some(us) => self.clock.instant_of(us),
                None => Instant::now() + WAITING_LOG_INTERVAL,
            };
            if sleep_until < Instant::now() + TOKIO_TIMER_RESOLUTION {
                // A batch closes within a millisecond: tokio's timer would round it up.
                self.timer.arm(sleep_until);
            }
            let first = tokio::select! {
                ev = rx.recv() => match ev {
                    Some(ev) => Some(ev),
                    None => return "the listener stopped".to_string(),
                },
                () = tokio::time::sleep_until(sleep_until.into()) => None,
                () = shutdown.as_mut() => return "signal".to_string(),
            };
            if let Some(ev) = first {
                if let Some(why) = self.handle(ev) {
                    return why;
                }
                for _ in 1..CORE_DRAIN_MAX {
                    let Ok(ev) = rx.try_recv() else { break };
                    if let Some(why) = self.handle(ev) {
                        return why;
                    }
                }
            }
            if let Some(why) = self.tick() {
                return why;
            }
            self.carrier.flush_replies(links!(self));
            self.publish_metrics();
        }
    }

    /// Publishes the state for metrics scrapes, at most every [`crate::metrics::PUBLISH_EVERY`].
    fn publish_metrics(&mut self) {
        if !self.serving_metrics || !self.metrics.publish_due() {
            return;
        }
        let status = self.status();
        let term = self.carrier.term();
        let queued = self.outboxes.values().map(|o| (o.node, o.queued.load(Ordering::Relaxed) as u64)).collect();
        let clients = self.clients.len();
        self.metrics.publish(status, term, queued, clients);
    }

    fn tick(&mut self) -> Option<String> {
        let now = self.clock.now_us();
        if self.carrier.member().is_some() {
            return self.carrier.tick(now, links!(self)).err().map(|e| e.to_string());
        }
        if self.last_waiting_log.elapsed() >= WAITING_LOG_INTERVAL {
            self.last_waiting_log = Instant::now();
            info!(missing = ?self.carrier.missing_nodes(), "still waiting for nodes to join");
        }
        None
    }

    /// Handles one event; returns a reason to stop, if it is one. Never waits: nothing a peer
    /// does may hold up the core.
    fn handle(&mut self, ev: CoreEvent) -> Option<String> {
        let now = self.clock.now_us();
        let done = match ev {
            CoreEvent::NodeUp { node, out } => {
                let conn = out.conn;
                self.outboxes.insert(conn, out);
                self.carrier.on_node_up(node, conn, now, links!(self))
            }
            CoreEvent::FromNode { node, conn, msg } => {
                if self.carrier.member().is_none() && self.carrier.is_current(node, conn) {
                    if let NodeToCoordinator::LoadStatus { partition, state: LoadState::Ready { digest } } = &msg {
                        info!(node, partition, digest = %digest, "replica loaded");
                    }
                }
                self.carrier.on_node_message(node, conn, msg, now, links!(self))
            }
            CoreEvent::NodeLost { node, conn, detection } => {
                // The reader ended: its queue goes (and with it a tether's watch).
                self.outboxes.remove(&conn);
                if *self.stopping.borrow() {
                    return None;
                }
                self.carrier.on_node_lost(node, conn, detection, now, links!(self))
            }
            CoreEvent::Tether { holder, key, reply } => {
                let _ = reply.send(self.offer_tether(holder, &key));
                Ok(())
            }
            CoreEvent::TetherCut { holder: Holder::Node(node), conn, how } => {
                self.carrier.on_tether_cut(node, conn, how, now, links!(self))
            }
            CoreEvent::TetherCut { holder: Holder::Coordinator(peer), conn, how } => {
                self.peer_died(peer, conn, how, now)
            }
            CoreEvent::TetherCut { holder: Holder::Client, conn, .. } => {
                debug!(client = conn, "the client's liveness tether ended");
                Ok(())
            }
            CoreEvent::PeerDied { peer, conn, how } => self.peer_died(peer, conn, how, now),
            CoreEvent::ClientUp { client, out, tether_key } => {
                debug!(client, "client connected");
                self.clients.insert(client, out);
                if let Some(key) = tether_key {
                    self.client_tethers.insert(client, ClientTether { key, held: None });
                }
                Ok(())
            }
            CoreEvent::Tick => Ok(()),
            CoreEvent::ClientGone { client } => {
                debug!(client, "client disconnected");
                self.clients.remove(&client);
                self.client_tethers.remove(&client);
                self.carrier.on_client_gone(client);
                Ok(())
            }
            CoreEvent::FromClient { client, msg } => match msg {
                ClientToCoordinator::StatusRequest { request_id } => {
                    let status = self.status();
                    send_client(&mut self.clients, client, CoordinatorToClient::StatusReply { request_id, status });
                    Ok(())
                }
                ClientToCoordinator::Shutdown { reason } => {
                    return Some(format!("client {client} asked: {reason}"));
                }
                msg => self.carrier.on_client_message(client, msg, now, links!(self)),
            },
            CoreEvent::PeerUp { peer, conn, out, tether_key } => {
                info!(peer, conn, "linked to coordinator {peer}");
                self.peers.insert(peer, PeerOutbox { conn, out, tether_key, tether: None });
                Ok(())
            }
            CoreEvent::FromPeer { peer, conn, msg } => {
                if self.peers.get(&peer).is_none_or(|o| o.conn != conn) {
                    return None;
                }
                let CoordinatorToCoordinator::Raft(bytes) = msg;
                self.carrier.on_coordinator_message(peer, &bytes, now, links!(self))
            }
            CoreEvent::PeerLost { peer, conn } => {
                if self.peers.get(&peer).is_some_and(|o| o.conn == conn) {
                    self.peers.remove(&peer);
                    if !*self.stopping.borrow() {
                        // INFO: a group stopped by `cluster down` stops its leader first, and
                        // the standbys see its link end; a leader's death is the raft
                        // election's business, which logs the change of leader.
                        info!(peer, "the link to coordinator {peer} broke");
                    }
                }
                Ok(())
            }
        };
        done.err().map(|e| e.to_string())
    }

    /// A liveness tether offered by `holder` with `key`: accepted if the key is that of the
    /// holder's current link and that link holds no tether yet (its connection, and a
    /// receiver that ends once the core forgets the link), refused otherwise.
    fn offer_tether(&mut self, holder: Holder, key: &TetherKey) -> Option<(ConnId, oneshot::Receiver<()>)> {
        let (conn, held) = match holder {
            Holder::Node(node) => {
                let o = self.carrier.connection(node).and_then(|conn| self.outboxes.get_mut(&conn))?;
                (o.tether.is_none() && o.tether_key.is_some_and(|k| k.matches(key)))
                    .then_some((o.conn, &mut o.tether))?
            }
            Holder::Coordinator(peer) => {
                let o = self.peers.get_mut(&peer)?;
                (o.tether.is_none() && o.tether_key.is_some_and(|k| k.matches(key)))
                    .then_some((o.conn, &mut o.tether))?
            }
            Holder::Client => {
                // Every current client's key is compared, each in constant time.
                let matching = self.client_tethers.iter_mut().filter(|(_, t)| t.key.matches(key)).last();
                let (&client, t) = matching.filter(|(_, t)| t.held.is_none())?;
                (client, &mut t.held)
            }
        };
        let (hold, gone) = oneshot::channel();
        *held = Some(hold);
        debug!(%holder, conn, "a liveness tether is up");
        Some((conn, gone))
    }

    /// Coordinator `peer`'s process ended (its tether for link `conn` ended after it was
    /// accepted): its link is dropped, and the member learns of the death — an election at
    /// once if `peer` led (docs/design.md §11, "A leader's death").
    fn peer_died(&mut self, peer: CoordinatorId, conn: ConnId, how: String, now: u64) -> Result<(), CarrierStop> {
        if self.peers.get(&peer).is_none_or(|o| o.conn != conn) || *self.stopping.borrow() {
            return Ok(());
        }
        self.peers.remove(&peer);
        let leader = self.carrier.leader() == Some(peer);
        match leader {
            true => warn!(peer, how = %how, "the leading coordinator's process ended; electing another at once"),
            false => info!(peer, how = %how, "coordinator {peer}'s process ended"),
        }
        self.carrier.on_coordinator_died(peer, now, links!(self))
    }

    fn status(&self) -> ProcessStatus {
        let partitions = match (self.carrier.member(), self.carrier.coordinator()) {
            (_, Some(m)) => m
                .status()
                .into_iter()
                .map(|p| PartitionReport {
                    partition: p.partition,
                    phase: match p.phase {
                        Phase::Loading => PartitionPhase::Loading,
                        Phase::Serving => PartitionPhase::Serving,
                        Phase::Stopped { reason } => PartitionPhase::Stopped { reason },
                        Phase::Unavailable => PartitionPhase::Unavailable,
                        Phase::Promoting { backup } => PartitionPhase::Promoting { backup },
                        Phase::Recovering { node } => PartitionPhase::Recovering { node },
                    },
                    load: None,
                    replicas: p.live_replicas,
                    seq: p.batches_sent,
                    txns: p.inflight_txns as u64,
                    cpu_ms: 0,
                    replication: wire::messages::ReplicationReport {
                        role: Some(ReplicationRole::Coordinator),
                        shipped_bytes: self.batch_bytes.get(&p.partition).copied().unwrap_or(0),
                        ..Default::default()
                    },
                    latency_buckets: self.metrics.latency_buckets(p.partition),
                })
                .collect(),
            // A standby (or a member of a group taking over) serves no partition: clients
            // look for the leader that does. The only coordinator, taking over, says its
            // partitions load, so nothing mistakes it for a cluster that serves.
            (Some(m), None) if !(self.config.coordinators.len() == 1 && m.taking_over()) => Vec::new(),
            (Some(_), None) => self.unserved(PartitionPhase::Loading),
            (None, None) => self.unserved(PartitionPhase::WaitingForNodes { missing: self.carrier.missing_nodes() }),
        };
        ProcessStatus {
            role: PeerKind::Coordinator,
            id: u16::from(self.me),
            pid: std::process::id(),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            partitions,
            leader: self.carrier.leader().map(u16::from),
        }
    }

    /// Every partition of the file in `phase`, before this coordinator serves any.
    fn unserved(&self, phase: PartitionPhase) -> Vec<PartitionReport> {
        self.config
            .partitions
            .iter()
            .map(|p| PartitionReport {
                partition: p.id,
                phase: phase.clone(),
                load: None,
                replicas: Vec::new(),
                seq: 0,
                txns: 0,
                cpu_ms: 0,
                replication: Default::default(),
                latency_buckets: Vec::new(),
            })
            .collect()
    }

    /// Tells every node (if this coordinator leads) and client, and closes their queues (the
    /// writers end once they sent what is queued) and the readers.
    pub(super) fn shutdown(&mut self, reason: &str) {
        self.carrier.shutdown(reason, links!(self));
        for tx in self.clients.values() {
            let _ = tx.try_send(CoordinatorToClient::Shutdown { reason: reason.to_string() });
        }
        self.outboxes.clear();
        self.clients.clear();
        self.peers.clear();
        self.stopping.send_replace(true);
    }
}

fn log_event(e: &Event) {
    match e {
        e if e.is_alarm() => error!(event = %e, "ALARM"),
        Event::LoadProgress { .. } | Event::Ignored { .. } => debug!(event = %e),
        _ => info!(event = %e),
    }
}
