//! The coordinator process (`glass coordinator --config …`): the sans-I/O [`Coordinator`]
//! driven by tokio and QUIC. It decides nothing itself (docs/design.md); it carries bytes,
//! keeps time and groups replies (mini-redis's server shape: [`run`] takes a bound listener
//! and a shutdown future).
//!
//! Shape:
//! - one listener on `coordinator.address`; nodes and clients dial it and say who they are in
//!   their `Hello` (the transport checked their certificates and cluster fingerprint before);
//!   at most `limits.client_connections_max` clients at once, further ones are dropped;
//! - one *core* task owns the state machine and takes every event from one bounded queue
//!   ([`CORE_INBOX_MAX`]): node and client messages, connections and losses, and timer ticks
//!   at `next_deadline_us` (a thread wakes it for deadlines under tokio's millisecond
//!   resolution, so a batch waits `batch_wait_us`, not a millisecond). It handles what is
//!   queued (up to [`CORE_DRAIN_MAX`] events),
//!   then sends each client its replies as one `ClientReplies` frame; a batch for several
//!   replicas is encoded once and the same bytes go to each;
//! - each connection has a reader task (decode, queue to the core) and a writer task (a queue
//!   to the link). Nothing one peer does may stall the core (and with it the failure
//!   detector): the core never waits on a peer. A node's queue is bounded in bytes
//!   ([`NODE_OUTBOX_BYTES_MAX`]); a node that lets it fill does not read what it is sent (it
//!   is dead, hung, or hostile), so it is declared failed and its link closed. A client that
//!   lets its queue ([`CLIENT_OUTBOX_MAX`] frames) fill is disconnected. Backpressure on
//!   healthy peers comes from the partitions' bound on transactions in flight;
//! - a node declared failed (silent past `failure_timeout_ms`, its link lost, or its queue
//!   full) is disconnected at once; a node that connects again (a restarted process) replaces
//!   its old connection, and a node still counted live then is first declared failed: its
//!   new connection holds none of the old one's state (a node whose link broke rejoins);
//! - the state machine is built once every node of `cluster.toml` has joined (until then
//!   requests are answered "not ready" and load reports are kept): nodes started by hand on
//!   other hosts may come minutes apart, and a node that never came could not be told from
//!   one that failed;
//! - time: microseconds since the Unix epoch, read from the wall clock once at start and
//!   advanced by a monotonic clock after ([`Clock`]), as H-Store timestamps need;
//! - shutdown (the future passed in, or a `Shutdown` message from a tool) tells every node and
//!   client `Shutdown`, lets the writers flush for at most `timeouts.shutdown_timeout_ms` and
//!   returns. Transactions in flight then are not answered.
//!
//! Every event is logged through `tracing`, one line each; alarms (divergence, a node down, a
//! partition stopped) at `error`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch, Semaphore};
use tracing::{debug, error, info, warn};
use wire::channel::{
    ChannelMessage, ClientToCoordinator, CoordinatorToClient, CoordinatorToNode, Epoched, FromCoordinator,
    NodeToCoordinator,
};
use wire::config::ClusterConfig;
use wire::endpoint::{self, EndpointLimits, Link, LinkReceiver, Listener};
use wire::messages::{
    ClientReply, ClientRequest, ClientResult, Hello, LoadState, NodeId, PartitionId, PartitionPhase, PartitionReport,
    ProcessStatus, Rejection, ReplicationRole, Role, PROTOCOL_VERSION,
};

use crate::coordinator::{ClientId, Coordinator, Event, Output, Phase};
use crate::error::CoordinatorError;

/// Events queued for the core task; past it connection readers wait.
pub const CORE_INBOX_MAX: usize = 8_192;
/// Events the core handles before it flushes the replies they produced.
pub const CORE_DRAIN_MAX: usize = 512;
/// Bytes of encoded frames queued for one node (each frame is shared by every replica it goes
/// to, so this bounds what one node can pin). A live node reads its batches as they come —
/// a rejoining one holds them while it copies a replica — so this is slack for a slow moment
/// (several seconds of a partition's batches at full load), not a working queue; a node that
/// lets it fill is declared failed.
pub const NODE_OUTBOX_BYTES_MAX: usize = 64 << 20;
/// Application close code of a node link the coordinator ends because the node counts as
/// failed (or a newer connection of the same node replaced it).
pub const CLOSE_NODE_FAILED: u32 = 16;
/// Frames queued for one client; a client that lets it fill is disconnected.
pub const CLIENT_OUTBOX_MAX: usize = 1_024;
/// Replies in one `ClientReplies` frame (each ≤ ~256 bytes: far below the frame limit).
pub const CLIENT_REPLIES_PER_FRAME_MAX: usize = 4_096;
/// The resolution of tokio's timer; nearer deadlines go to [`PreciseTimer`].
const TOKIO_TIMER_RESOLUTION: Duration = Duration::from_millis(2);
/// How often the core says which nodes it still waits for.
const WAITING_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// Why the coordinator process cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error(transparent)]
    Coordinator(#[from] CoordinatorError),
    #[error(transparent)]
    Config(#[from] wire::ConfigError),
    #[error(transparent)]
    Endpoint(#[from] wire::endpoint::EndpointError),
    #[error("cannot read the certificates: {0}")]
    Tls(#[from] wire::tls::TlsError),
}

/// Microseconds since the Unix epoch: the wall clock read once, then a monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    anchor_unix_us: u64,
    start: Instant,
}

impl Clock {
    /// Reads the wall clock (once) and anchors the monotonic clock to it.
    pub fn start() -> Clock {
        let start = Instant::now();
        // The one wall-clock read of the coordinator: H-Store timestamps carry Unix
        // milliseconds. After it only the monotonic clock advances time, so timestamps never
        // go back with the wall clock (and the state machine orders them strictly anyway).
        #[allow(clippy::disallowed_methods)]
        let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Clock { anchor_unix_us: unix.as_micros() as u64, start }
    }

    /// Now, in microseconds since the Unix epoch.
    pub fn now_us(&self) -> u64 {
        self.anchor_unix_us + self.start.elapsed().as_micros() as u64
    }

    /// The instant at which [`Clock::now_us`] reads `us`.
    fn instant_of(&self, us: u64) -> Instant {
        self.start + Duration::from_micros(us.saturating_sub(self.anchor_unix_us))
    }
}

/// The coordinator's `Hello`.
pub fn hello(config: &ClusterConfig) -> Hello {
    Hello {
        protocol_version: PROTOCOL_VERSION,
        role: Role::Coordinator,
        id: u16::from(config.coordinator().id),
        config_fingerprint: config.fingerprint(),
    }
}

/// Binds the coordinator's listener on `address` with its certificate.
pub async fn bind(config: &ClusterConfig, address: SocketAddr) -> Result<Listener, ProcessError> {
    let me = u16::from(config.coordinator().id);
    let tls = wire::tls::server_config(&config.cert_dir, wire::tls::Role::Coordinator(me))?;
    let mut limits = EndpointLimits::from_config(config);
    // The nodes' links come on top of the clients'.
    limits.connections_max += config.nodes.len();
    Ok(endpoint::listen(address, tls, hello(config), limits).await?)
}

/// The queue of encoded frames to one node's writer task, bounded in bytes, and the means to
/// end that node's link from the core.
#[derive(Debug)]
struct NodeOutbox {
    conn: ConnId,
    frames: mpsc::UnboundedSender<Arc<Vec<u8>>>,
    /// Bytes queued and not yet handed to QUIC (the writer subtracts what it sent).
    queued: Arc<AtomicUsize>,
    /// Set once to end the link: the writer closes the connection with [`CLOSE_NODE_FAILED`]
    /// and this reason.
    close: Arc<std::sync::OnceLock<String>>,
    closed: Arc<tokio::sync::Notify>,
}

impl NodeOutbox {
    /// Queues `frame` unless that would exceed [`NODE_OUTBOX_BYTES_MAX`]; `false`: the node
    /// does not read what it is sent.
    fn offer(&self, frame: &Arc<Vec<u8>>) -> bool {
        let len = frame.len();
        let queued = self.queued.load(Ordering::Relaxed);
        if queued > 0 && queued + len > NODE_OUTBOX_BYTES_MAX {
            return false;
        }
        self.queued.fetch_add(len, Ordering::Relaxed);
        // A send error means the writer is gone: the reader reports the link lost.
        let _ = self.frames.send(frame.clone());
        true
    }

    /// Ends the link (the writer closes the connection, the reader then stops).
    fn close(&self, reason: String) {
        let _ = self.close.set(reason);
        self.closed.notify_one();
    }
}

/// A connection's serial number (a node may reconnect: its old connection's late events are
/// told apart).
type ConnId = u64;

#[derive(Debug)]
enum CoreEvent {
    /// The precise timer fired.
    Tick,
    NodeUp {
        node: NodeId,
        out: NodeOutbox,
    },
    FromNode {
        node: NodeId,
        conn: ConnId,
        msg: NodeToCoordinator,
    },
    NodeLost {
        node: NodeId,
        conn: ConnId,
    },
    ClientUp {
        client: ClientId,
        out: mpsc::Sender<CoordinatorToClient>,
    },
    FromClient {
        client: ClientId,
        msg: ClientToCoordinator,
    },
    ClientGone {
        client: ClientId,
    },
}

/// Runs the coordinator of `config` on `listener` until `shutdown` completes or a tool asks
/// it to stop.
pub async fn run(
    config: ClusterConfig,
    listener: Listener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ProcessError> {
    config.validate()?;
    let clock = Clock::start();
    info!(
        mode = config.mode().name(),
        partitions = config.partitions.len(),
        nodes = config.nodes.len(),
        "coordinator starting; waiting for every node to join"
    );
    let (core_tx, core_rx) = mpsc::channel(CORE_INBOX_MAX);
    let timer = PreciseTimer::start(core_tx.clone());
    let (stopping, _) = watch::channel(false);
    let mut core = Core {
        config: config.clone(),
        clock,
        started: Instant::now(),
        machine: None,
        nodes: BTreeMap::new(),
        early_load: BTreeMap::new(),
        clients: HashMap::new(),
        replies: HashMap::new(),
        frame_bytes_max: config.limits.frame_bytes_max as usize,
        epoch: 0,
        batch_bytes: BTreeMap::new(),
        stopping: stopping.clone(),
        last_waiting_log: Instant::now(),
        timer,
    };
    // mini-redis's shutdown pattern: every connection task holds a clone of `done`; when all
    // have finished, `all_done` yields `None`.
    let (done, mut all_done) = mpsc::channel::<()>(1);
    let accept = tokio::spawn(accept_loop(config.clone(), listener, core_tx, stopping.subscribe(), done));
    tokio::pin!(shutdown);
    let reason = core.run(core_rx, &mut shutdown).await;
    info!(reason = %reason, "coordinator shutting down");
    core.shutdown(&reason);
    accept.abort();
    let wait = Duration::from_millis(config.timeouts.shutdown_timeout_ms);
    if tokio::time::timeout(wait, all_done.recv()).await.is_err() {
        warn!(wait_ms = wait.as_millis() as u64, "connections still open at shutdown; closing them");
    }
    info!("coordinator stopped");
    Ok(())
}

struct Core {
    config: ClusterConfig,
    clock: Clock,
    started: Instant,
    /// Built once every node joined.
    machine: Option<Coordinator>,
    nodes: BTreeMap<NodeId, NodeOutbox>,
    /// The last load report of each replica that arrived before the machine was built.
    early_load: BTreeMap<(NodeId, PartitionId), NodeToCoordinator>,
    clients: HashMap<ClientId, mpsc::Sender<CoordinatorToClient>>,
    /// Replies produced and not yet sent, per client.
    replies: HashMap<ClientId, Vec<ClientReply>>,
    frame_bytes_max: usize,
    /// The epoch every message to a node carries (docs/design.md §11). This process is the
    /// cluster's only coordinator: epoch 0, which no other leader ever fences.
    epoch: wire::messages::Epoch,
    /// Bytes of batches sent to replicas, per partition (every replica counted).
    batch_bytes: BTreeMap<PartitionId, u64>,
    stopping: watch::Sender<bool>,
    last_waiting_log: Instant,
    timer: PreciseTimer,
}

impl Core {
    /// Handles events until shutdown; returns why it stopped.
    async fn run(
        &mut self,
        mut rx: mpsc::Receiver<CoreEvent>,
        shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> String {
        loop {
            let deadline = self.machine.as_ref().and_then(|m| m.next_deadline_us());
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
            self.tick();
            self.flush_replies();
        }
    }

    fn tick(&mut self) {
        let now = self.clock.now_us();
        match &mut self.machine {
            Some(m) => {
                if m.next_deadline_us().is_some_and(|d| d <= now) {
                    let out = m.tick(now);
                    self.dispatch(out);
                }
            }
            None => {
                if self.last_waiting_log.elapsed() >= WAITING_LOG_INTERVAL {
                    self.last_waiting_log = Instant::now();
                    info!(missing = ?self.missing_nodes(), "still waiting for nodes to join");
                }
            }
        }
    }

    /// Nodes the file places a replica on that have not joined yet (a spare node, placed
    /// nowhere, joins later with `glass node --join` and is not waited for).
    fn missing_nodes(&self) -> Vec<NodeId> {
        self.config
            .nodes
            .iter()
            .map(|n| n.id)
            .filter(|&id| self.config.partitions_on_node(id).next().is_some() && !self.nodes.contains_key(&id))
            .collect()
    }

    /// Handles one event; returns a reason to stop, if it is one. Never waits: nothing a peer
    /// does may hold up the core.
    fn handle(&mut self, ev: CoreEvent) -> Option<String> {
        let now = self.clock.now_us();
        match ev {
            CoreEvent::NodeUp { node, out } => {
                if self.nodes.contains_key(&node) {
                    // A new connection means a new process, or one whose link broke and that
                    // drops its state to rejoin every partition (docs/design.md §10): the old
                    // connection may hang until QUIC's idle timeout, and nothing of the old
                    // state counts, so a node still counted live is declared failed first.
                    info!(node, "node connected again; its new connection replaces the old one");
                    if let Some(m) = self.machine.as_mut().filter(|m| m.is_node_live(node)) {
                        let out = m.on_node_lost(node, now);
                        self.dispatch(out);
                    }
                    self.disconnect(node, "a newer connection of this node replaced this one");
                }
                info!(node, conn = out.conn, "node joined");
                self.nodes.insert(node, out);
                if self.machine.is_none() && self.missing_nodes().is_empty() {
                    self.build_machine(now);
                }
            }
            CoreEvent::FromNode { node, conn, msg } => {
                if self.nodes.get(&node).is_none_or(|o| o.conn != conn) {
                    return None;
                }
                match &mut self.machine {
                    Some(m) => {
                        let out = m.on_node_message(node, msg, now);
                        self.dispatch(out);
                    }
                    None => {
                        if let NodeToCoordinator::LoadStatus { partition, state } = &msg {
                            if let LoadState::Ready { digest } = state {
                                info!(node, partition, digest = %digest, "replica loaded");
                            }
                            self.early_load.insert((node, *partition), msg);
                        }
                    }
                }
            }
            CoreEvent::NodeLost { node, conn } => {
                if self.nodes.get(&node).is_none_or(|o| o.conn != conn) {
                    return None;
                }
                self.nodes.remove(&node);
                if *self.stopping.borrow() {
                    return None;
                }
                match &mut self.machine {
                    Some(m) => {
                        let out = m.on_node_lost(node, now);
                        self.dispatch(out);
                    }
                    None => warn!(node, "node left before the cluster started; waiting for it again"),
                }
            }
            CoreEvent::ClientUp { client, out } => {
                debug!(client, "client connected");
                self.clients.insert(client, out);
            }
            CoreEvent::Tick => {}
            CoreEvent::ClientGone { client } => {
                debug!(client, "client disconnected");
                self.clients.remove(&client);
                self.replies.remove(&client);
            }
            CoreEvent::FromClient { client, msg } => match msg {
                ClientToCoordinator::StatusRequest { request_id } => {
                    let status = self.status();
                    self.send_client(client, CoordinatorToClient::StatusReply { request_id, status });
                }
                ClientToCoordinator::Shutdown { reason } => {
                    return Some(format!("client {client} asked: {reason}"));
                }
                ClientToCoordinator::ClientRequests(requests) => match &mut self.machine {
                    Some(m) => {
                        let out = m.on_client_message(client, ClientToCoordinator::ClientRequests(requests), now);
                        self.dispatch(out);
                    }
                    None => self.refuse_requests_before_start(client, requests),
                },
                ClientToCoordinator::DigestRequest { request_id, partition } => match &mut self.machine {
                    Some(m) => {
                        let out = m.on_digest_request(client, request_id, partition, now);
                        self.dispatch(out);
                    }
                    None => {
                        let outcome = wire::messages::DigestOutcome::Rejected(Rejection::NotReady { partition });
                        self.send_client(client, CoordinatorToClient::DigestReply { request_id, partition, outcome });
                    }
                },
            },
        }
        None
    }

    /// Builds the state machine once every node joined, and replays the load reports kept.
    fn build_machine(&mut self, now: u64) {
        let machine = match Coordinator::new(&self.config, now) {
            Ok(m) => m,
            Err(e) => {
                error!(error = %e, "cannot build the coordinator");
                return;
            }
        };
        info!("every node joined; the partitions load");
        self.machine = Some(machine);
        for ((node, _), msg) in std::mem::take(&mut self.early_load) {
            let out = self.machine.as_mut().expect("just built").on_node_message(node, msg, now);
            self.dispatch(out);
        }
    }

    /// Answers transaction requests that arrive before every node joined.
    fn refuse_requests_before_start(&mut self, client: ClientId, requests: Vec<ClientRequest>) {
        let partition = self.config.partitions.first().map_or(0, |p| p.id);
        let replies = self.replies.entry(client).or_default();
        for r in requests {
            // The home warehouse's partition (a warehouse of no partition counts as the first).
            let partition_of = |w| Some(self.config.partition_of_warehouse(w).unwrap_or(partition));
            let partition =
                engine::distributed::partitions_touched(&r.input, partition_of).map_or(partition, |t| t.home);
            replies.push(ClientReply {
                request_id: r.request_id,
                result: ClientResult::Rejected(Rejection::NotReady { partition }),
            });
        }
    }

    /// Carries out the state machine's outputs. A node whose queue is full is declared failed
    /// (and the outputs of that are carried out in turn); nothing here waits.
    fn dispatch(&mut self, outputs: Vec<Output>) {
        let mut not_reading = Vec::new();
        for o in outputs {
            match o {
                Output::ToNodes { nodes, msg } => {
                    let framed = FromCoordinator::Epoched(Epoched { epoch: self.epoch, msg });
                    let frame = match wire::codec::encode(&framed, self.frame_bytes_max) {
                        Ok(f) => Arc::new(f),
                        Err(e) => {
                            error!(error = %e, "cannot encode a message for the nodes; dropped");
                            continue;
                        }
                    };
                    let FromCoordinator::Epoched(Epoched { msg, .. }) = &framed;
                    if let CoordinatorToNode::Batch(b) = msg {
                        *self.batch_bytes.entry(b.partition).or_default() += (frame.len() * nodes.len()) as u64;
                    }
                    for n in nodes {
                        if let Some(outbox) = self.nodes.get(&n) {
                            if !outbox.offer(&frame) && !not_reading.contains(&n) {
                                not_reading.push(n);
                            }
                        }
                    }
                }
                Output::Reply { client, reply } => {
                    if self.clients.contains_key(&client) {
                        self.replies.entry(client).or_default().push(reply);
                    }
                }
                Output::ToClient { client, msg } => self.send_client(client, msg),
                Output::Event(e) => {
                    log_event(&e);
                    if let Event::NodeDown { node, .. } = e {
                        // Failed is final for this process of the node: end its link now, so
                        // its writer stops holding frames and a live but excluded process
                        // learns it was excluded (it comes back by a restart with --rejoin).
                        self.disconnect(node, "the coordinator declared this node failed");
                    }
                }
            }
        }
        let now = self.clock.now_us();
        for node in not_reading {
            if !self.nodes.contains_key(&node) {
                continue;
            }
            error!(
                node,
                limit_mib = NODE_OUTBOX_BYTES_MAX >> 20,
                "the node does not read what it is sent (its queue is full); declaring it failed"
            );
            self.disconnect(node, "the node did not read what it was sent");
            if let Some(m) = self.machine.as_mut() {
                let out = m.on_node_lost(node, now);
                self.dispatch(out);
            }
        }
    }

    /// Ends node `node`'s link, if it has one, with `reason`.
    fn disconnect(&mut self, node: NodeId, reason: &str) {
        if let Some(outbox) = self.nodes.remove(&node) {
            info!(node, conn = outbox.conn, reason, "closing the node's link");
            outbox.close(reason.to_string());
        }
    }

    fn send_client(&mut self, client: ClientId, msg: CoordinatorToClient) {
        let Some(tx) = self.clients.get(&client) else { return };
        if tx.try_send(msg).is_err() {
            warn!(client, limit = CLIENT_OUTBOX_MAX, "client does not read its replies; disconnected");
            self.clients.remove(&client);
            self.replies.remove(&client);
        }
    }

    /// Sends each client its pending replies, grouped into few frames.
    fn flush_replies(&mut self) {
        if self.replies.is_empty() {
            return;
        }
        let pending: Vec<(ClientId, Vec<ClientReply>)> = self.replies.drain().collect();
        for (client, mut replies) in pending {
            while !replies.is_empty() {
                let rest = if replies.len() > CLIENT_REPLIES_PER_FRAME_MAX {
                    replies.split_off(CLIENT_REPLIES_PER_FRAME_MAX)
                } else {
                    Vec::new()
                };
                self.send_client(client, CoordinatorToClient::ClientReplies(std::mem::replace(&mut replies, rest)));
            }
        }
    }

    fn status(&self) -> ProcessStatus {
        let partitions = match &self.machine {
            Some(m) => m
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
                })
                .collect(),
            None => self
                .config
                .partitions
                .iter()
                .map(|p| PartitionReport {
                    partition: p.id,
                    phase: PartitionPhase::WaitingForNodes { missing: self.missing_nodes() },
                    load: None,
                    replicas: Vec::new(),
                    seq: 0,
                    txns: 0,
                    cpu_ms: 0,
                    replication: Default::default(),
                })
                .collect(),
        };
        ProcessStatus {
            role: Role::Coordinator,
            id: u16::from(self.config.coordinator().id),
            pid: std::process::id(),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            partitions,
        }
    }

    /// Tells every node and client, and closes their queues (the writers end once they sent
    /// what is queued) and the readers.
    fn shutdown(&mut self, reason: &str) {
        self.flush_replies();
        let msg = CoordinatorToNode::Shutdown { reason: reason.to_string() };
        let to_nodes = FromCoordinator::Epoched(Epoched { epoch: self.epoch, msg });
        if let Ok(frame) = wire::codec::encode(&to_nodes, self.frame_bytes_max) {
            let frame = Arc::new(frame);
            for outbox in self.nodes.values() {
                let _ = outbox.offer(&frame);
            }
        }
        for tx in self.clients.values() {
            let _ = tx.try_send(CoordinatorToClient::Shutdown { reason: reason.to_string() });
        }
        self.nodes.clear();
        self.clients.clear();
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

/// Accepts connections and starts their tasks until the coordinator stops.
async fn accept_loop(
    config: ClusterConfig,
    mut listener: Listener,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
    done: mpsc::Sender<()>,
) {
    let clients = Arc::new(Semaphore::new(config.limits.client_connections_max as usize));
    let mut next_conn: u64 = 1;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopping.wait_for(|s| *s) => return,
        };
        let link = match accepted {
            Ok(l) => l,
            Err(e) => {
                match e.is_refusal() {
                    true => warn!(error = %e, "a connection was refused"),
                    false => debug!(error = %e, "a connection attempt failed"),
                }
                continue;
            }
        };
        let conn = next_conn;
        next_conn += 1;
        let hello = link.peer_hello().clone();
        match hello.role {
            Role::Node => {
                if config.node(hello.id).is_none() {
                    warn!(node = hello.id, "a node not in cluster.toml connected; refused");
                    tokio::spawn(link.refuse("this node id is not in the coordinator's cluster.toml"));
                    continue;
                }
                let (core, stopping, done) = (core.clone(), stopping.clone(), done.clone());
                tokio::spawn(async move {
                    node_connection(hello.id, conn, link, core, stopping).await;
                    drop(done);
                });
            }
            Role::Client => {
                let Ok(permit) = clients.clone().try_acquire_owned() else {
                    warn!(
                        limit = config.limits.client_connections_max,
                        "too many client connections (limits.client_connections_max); refused"
                    );
                    tokio::spawn(link.refuse("too many client connections"));
                    continue;
                };
                let (core, stopping, done) = (core.clone(), stopping.clone(), done.clone());
                tokio::spawn(async move {
                    client_connection(conn, link, core, stopping).await;
                    drop(permit);
                    drop(done);
                });
            }
            Role::Coordinator => {
                warn!(id = hello.id, "another coordinator connected; refused");
                tokio::spawn(link.refuse("a coordinator does not connect to another"));
            }
        }
    }
}

/// How a link's reader stopped.
enum LinkEnd {
    /// The process is shutting down.
    Stopping,
    /// The core is gone (shutting down too).
    CoreGone,
    /// The peer ended its stream or closed the connection cleanly.
    ClosedByPeer,
    /// The link failed (a bad frame, a lost connection, …).
    Failed(endpoint::EndpointError),
}

/// Feeds every message a link receives (of the peer's channel, `M`) to the core, wrapped by
/// `wrap`, until the link ends or the process stops. The core's inbox is bounded: a full
/// inbox makes this reader wait, and with it the peer (backpressure).
async fn feed_core<M: ChannelMessage>(
    receiver: &mut LinkReceiver,
    core: &mpsc::Sender<CoreEvent>,
    stopping: &mut watch::Receiver<bool>,
    wrap: impl Fn(M) -> CoreEvent,
) -> LinkEnd {
    loop {
        let received = tokio::select! {
            r = receiver.recv::<M>() => r,
            _ = stopping.wait_for(|s| *s) => return LinkEnd::Stopping,
        };
        match received {
            Ok(Some(msg)) => {
                if core.send(wrap(msg)).await.is_err() {
                    return LinkEnd::CoreGone;
                }
            }
            Ok(None) => return LinkEnd::ClosedByPeer,
            Err(e) => return LinkEnd::Failed(e),
        }
    }
}

/// One node's link: a writer of encoded frames, and a reader feeding the core. The writer
/// ends the connection when the core asks ([`NodeOutbox::close`]), even in the middle of a
/// send that a peer which never reads would hold up until QUIC's idle timeout.
async fn node_connection(
    node: NodeId,
    conn: ConnId,
    link: Link,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
) {
    let (mut sender, mut receiver) = link.split();
    let (frames, mut out_rx) = mpsc::unbounded_channel::<Arc<Vec<u8>>>();
    let outbox = NodeOutbox {
        conn,
        frames,
        queued: Arc::new(AtomicUsize::new(0)),
        close: Arc::new(std::sync::OnceLock::new()),
        closed: Arc::new(tokio::sync::Notify::new()),
    };
    let (queued, close, closed) = (outbox.queued.clone(), outbox.close.clone(), outbox.closed.clone());
    if core.send(CoreEvent::NodeUp { node, out: outbox }).await.is_err() {
        return;
    }
    let writer = tokio::spawn(async move {
        let close_now = |sender: &endpoint::LinkSender| {
            let reason = close.get().map_or("closed", String::as_str);
            sender.close(CLOSE_NODE_FAILED, reason);
        };
        loop {
            let frame = tokio::select! {
                biased;
                () = closed.notified() => return close_now(&sender),
                f = out_rx.recv() => match f {
                    Some(f) => f,
                    None => break,
                },
            };
            tokio::select! {
                biased;
                () = closed.notified() => return close_now(&sender),
                sent = sender.send_encoded(&frame) => {
                    if let Err(e) = sent {
                        debug!(node, error = %e, "cannot send to the node");
                        return;
                    }
                }
            }
            queued.fetch_sub(frame.len(), Ordering::Relaxed);
        }
        sender.finish(Duration::from_secs(1)).await;
    });
    match feed_core(&mut receiver, &core, &mut stopping, |msg| CoreEvent::FromNode { node, conn, msg }).await {
        LinkEnd::ClosedByPeer => info!(node, "node closed its link"),
        LinkEnd::Failed(e) if e.is_protocol_violation() => {
            warn!(node, error = %e, "the node broke the protocol; its link is closed")
        }
        LinkEnd::Failed(e) => warn!(node, error = %e, "node link failed"),
        LinkEnd::Stopping | LinkEnd::CoreGone => {}
    }
    let _ = core.send(CoreEvent::NodeLost { node, conn }).await;
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
}

/// One client's link: a writer of reply frames, and a reader feeding the core.
async fn client_connection(
    client: ClientId,
    link: Link,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
) {
    let (mut sender, mut receiver) = link.split();
    let (out, mut out_rx) = mpsc::channel::<CoordinatorToClient>(CLIENT_OUTBOX_MAX);
    if core.send(CoreEvent::ClientUp { client, out }).await.is_err() {
        return;
    }
    let writer = tokio::spawn(async move {
        while let Some(msg) = out_rx.recv().await {
            if sender.send(&msg).await.is_err() {
                return;
            }
        }
        sender.finish(Duration::from_secs(1)).await;
    });
    let peer = receiver.remote_address();
    match feed_core(&mut receiver, &core, &mut stopping, |msg| CoreEvent::FromClient { client, msg }).await {
        LinkEnd::Failed(e) if e.is_protocol_violation() => {
            warn!(client, %peer, error = %e, "the client broke the protocol; its link is closed")
        }
        LinkEnd::Failed(e) => debug!(client, error = %e, "client link failed"),
        LinkEnd::ClosedByPeer | LinkEnd::Stopping | LinkEnd::CoreGone => {}
    }
    let _ = core.send(CoreEvent::ClientGone { client }).await;
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
}

/// A thread that wakes the core at sub-millisecond deadlines (a batch's `batch_wait_us` is
/// typically 200 µs; tokio's timer has a resolution of one millisecond). At most one tick is
/// pending: arming again moves the deadline earlier, never later.
#[derive(Debug)]
struct PreciseTimer {
    state: Arc<(std::sync::Mutex<TimerState>, std::sync::Condvar)>,
}

#[derive(Debug, Default)]
struct TimerState {
    deadline: Option<Instant>,
    stop: bool,
}

impl PreciseTimer {
    fn start(core: mpsc::Sender<CoreEvent>) -> PreciseTimer {
        let state = Arc::new((std::sync::Mutex::new(TimerState::default()), std::sync::Condvar::new()));
        let shared = state.clone();
        let spawned = std::thread::Builder::new().name("coordinator-timer".into()).spawn(move || {
            let (lock, cv) = &*shared;
            loop {
                let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if s.stop {
                        return;
                    }
                    match s.deadline {
                        None => s = cv.wait(s).unwrap_or_else(|e| e.into_inner()),
                        Some(t) => {
                            let now = Instant::now();
                            if now >= t {
                                s.deadline = None;
                                break;
                            }
                            s = cv.wait_timeout(s, t - now).unwrap_or_else(|e| e.into_inner()).0;
                        }
                    }
                }
                drop(s);
                if core.blocking_send(CoreEvent::Tick).is_err() {
                    return;
                }
            }
        });
        if let Err(e) = spawned {
            warn!(error = %e, "cannot start the precise timer; batches close on tokio's millisecond timer");
        }
        PreciseTimer { state }
    }

    /// Wakes the core at `at` (or earlier, if already armed earlier).
    fn arm(&self, at: Instant) {
        let (lock, cv) = &*self.state;
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        if s.deadline.is_none_or(|d| at < d) {
            s.deadline = Some(at);
            cv.notify_one();
        }
    }
}

impl Drop for PreciseTimer {
    fn drop(&mut self) {
        let (lock, cv) = &*self.state;
        lock.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        cv.notify_one();
    }
}
