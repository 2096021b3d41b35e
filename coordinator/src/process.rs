//! The coordinator process (`glass coordinator --config … [--id N]`): a member of the
//! coordinator group ([`crate::member::Member`], docs/design.md §11; a single coordinator is a
//! group of one) that leads or stands by, driven by tokio and QUIC through the
//! [`Carrier`] it shares with the simulator (docs/design.md §14). It decides nothing itself: it
//! carries bytes, keeps time, stores the group's raft state and writes the replies the carrier
//! grouped (mini-redis's server shape: [`run`] takes a bound listener and a shutdown future).
//!
//! Shape:
//! - one listener on the coordinator's address; nodes, clients and the other coordinators
//!   dial it and say who they are in their `Hello` (the transport checked their certificates
//!   and cluster fingerprint before); at most `limits.client_connections_max` clients at
//!   once, further ones are dropped;
//! - with several coordinators, each dials every coordinator of a higher id (again
//!   [`PEER_REDIAL`] after a link broke) and accepts those of a lower id: one link per pair,
//!   carrying raft messages both ways ([`CoordinatorToCoordinator`]); a peer's queue holds at
//!   most [`PEER_OUTBOX_MAX`] messages, past it they are dropped (raft sends again);
//! - one *core* task owns the state machine and takes every event from one bounded queue
//!   ([`CORE_INBOX_MAX`]): node, client and coordinator messages, connections and losses,
//!   and timer ticks at the machine's next deadline (a thread wakes it for deadlines under
//!   tokio's millisecond resolution, so a batch waits `batch_wait_us`, not a millisecond). It
//!   handles what is queued (up to [`CORE_DRAIN_MAX`] events), then sends each client its
//!   replies as one `ClientReplies` frame; a batch for several replicas is encoded once and
//!   the same bytes go to each;
//! - the group's state is stored ([`GroupStore`], `run_dir/coordinator-<id>.raft`, fsynced)
//!   before anything that follows it is sent; a coordinator that cannot store it stops (it
//!   must not vote or lead on a state it may forget);
//! - each connection has a reader task (decode, queue to the core) and a writer task (a queue
//!   to the link). Nothing one peer does may stall the core (and with it the failure
//!   detector): the core never waits on a peer. A node's queue is bounded in bytes
//!   ([`NODE_OUTBOX_BYTES_MAX`]); a node that lets it fill does not read what it is sent (it
//!   is dead, hung, or hostile), so it is declared failed and its link closed. A client that
//!   lets its queue ([`CLIENT_OUTBOX_MAX`] frames) fill is disconnected. Backpressure on
//!   healthy peers comes from the partitions' bound on transactions in flight;
//! - each node also holds a liveness tether ([`wire::tether`]): a TCP connection to this
//!   coordinator's address (the TCP port of the QUIC socket's number), keyed to its QUIC link,
//!   which the kernel closes the moment the node's process ends — SIGKILL included — where a
//!   dead process's UDP socket says nothing. A second listener takes them: at most
//!   [`TETHERS_READING_MAX`] headers are read at once, each within [`TETHER_HEADER_TIMEOUT`];
//!   a header whose key is not that of the node's current link is refused. An accepted tether
//!   is watched until it ends (the node is then lost: `Detection::ConnectionLost`, its link
//!   closed at once) or its link is forgotten. Without the listener (its port taken) nodes
//!   are still detected by their heartbeats;
//! - a node declared failed (silent past `failure_timeout_ms`, its link or tether lost, or
//!   its queue full) is disconnected at once; a node that connects again (a restarted process) replaces
//!   its old connection, and a node still counted live then is first declared failed: its
//!   new connection holds none of the old one's state (a node whose link broke rejoins);
//! - on a first start the member is built once every node of `cluster.toml` has joined
//!   (until then requests are answered "not the leader"): nodes started by hand on other
//!   hosts may come minutes apart, and a node that never came could not be told from one that
//!   failed. A member that stored a state before (a restart) is built at once: the cluster
//!   runs, and it rejoins as a standby;
//! - time: microseconds since the Unix epoch, read from the wall clock once at start and
//!   advanced by a monotonic clock after ([`Clock`]), as H-Store timestamps need;
//! - shutdown (the future passed in, or a `Shutdown` message from a tool) tells every node
//!   (if this coordinator leads) and client `Shutdown`, lets the writers flush for at most
//!   `timeouts.shutdown_timeout_ms` and returns. Transactions in flight then are not
//!   answered.
//!
//! A watch on the thread that carries the links ([`wire::watchdog`]) logs, at `info`, each
//! time it was held up 50 ms or more, with its time on a CPU and waiting for one meanwhile.
//!
//! Every event is logged through `tracing`, one line each; alarms (divergence, a node down, a
//! partition stopped) at `error`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tracing::{debug, error, info, warn};
use wire::channel::{
    ChannelMessage, ClientToCoordinator, CoordinatorToClient, CoordinatorToCoordinator, CoordinatorToNode, Epoched,
    FromCoordinator, NodeToCoordinator,
};
use wire::config::{split_address, ClusterConfig};
use wire::endpoint::{self, EndpointLimits, Link, LinkReceiver, Listener};
use wire::messages::{
    ClientReply, CoordinatorId, Epoch, Hello, LoadState, NodeId, PartitionId, PartitionPhase, PartitionReport,
    ProcessStatus, ReplicationRole, Role, PROTOCOL_VERSION,
};
use wire::tether::{self, TetherKey};

use crate::carrier::{Carrier, ConnId, Links};
use crate::error::CoordinatorError;
use crate::leader::{ClientId, Detection, Event, Phase};
use crate::store::{GroupStore, StoreError};

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
/// Raft messages queued for one other coordinator; past it they are dropped (raft resends).
pub const PEER_OUTBOX_MAX: usize = 1_024;
/// How long a coordinator waits before dialling another coordinator again.
pub const PEER_REDIAL: Duration = Duration::from_millis(200);
/// Liveness tethers whose header is being read at once; further ones wait in the kernel's
/// backlog.
pub const TETHERS_READING_MAX: usize = 64;
/// How long a liveness tether may take to send its header and be matched to its node's link
/// (which may be registered a moment after the node opened the tether).
pub const TETHER_HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a tether whose link is not registered yet waits before it is offered again.
const TETHER_RETRY: Duration = Duration::from_millis(20);
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
    #[error("coordinator {id} is not in cluster.toml (its [[coordinators]] are {known:?})")]
    UnknownCoordinator { id: CoordinatorId, known: Vec<CoordinatorId> },
    /// (The store's error, the source, names the file and what is wrong with it.)
    #[error("cannot read the coordinator group's stored state")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Metrics(#[from] wire::metrics::MetricsError),
    #[error(transparent)]
    Member(#[from] crate::carrier::CarrierStop),
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

/// Coordinator `me`'s `Hello`.
pub fn hello(config: &ClusterConfig, me: CoordinatorId) -> Hello {
    Hello {
        protocol_version: PROTOCOL_VERSION,
        role: Role::Coordinator,
        id: u16::from(me),
        config_fingerprint: config.fingerprint(),
    }
}

/// Checks that `me` is a coordinator of `config`.
pub fn check_id(config: &ClusterConfig, me: CoordinatorId) -> Result<(), ProcessError> {
    match config.coordinator_by_id(me) {
        Some(_) => Ok(()),
        None => Err(ProcessError::UnknownCoordinator { id: me, known: config.coordinator_ids() }),
    }
}

/// Binds coordinator `me`'s listener on `address` with its certificate.
pub async fn bind(config: &ClusterConfig, me: CoordinatorId, address: SocketAddr) -> Result<Listener, ProcessError> {
    check_id(config, me)?;
    let tls = wire::tls::server_config(&config.cert_dir, wire::tls::Role::Coordinator(u16::from(me)))?;
    let mut limits = EndpointLimits::from_config(config);
    // The nodes' and the other coordinators' links come on top of the clients'.
    limits.connections_max += config.nodes.len() + config.coordinators.len();
    Ok(endpoint::listen(address, tls, hello(config, me), limits).await?)
}

/// The queue of encoded frames to one node's writer task, bounded in bytes, and the means to
/// end that node's link from the core.
#[derive(Debug)]
struct NodeOutbox {
    node: NodeId,
    conn: ConnId,
    frames: mpsc::UnboundedSender<Arc<Vec<u8>>>,
    /// Bytes queued and not yet handed to QUIC (the writer subtracts what it sent).
    queued: Arc<AtomicUsize>,
    /// Set once to end the link: the writer closes the connection with [`CLOSE_NODE_FAILED`]
    /// and this reason.
    close: Arc<std::sync::OnceLock<String>>,
    closed: Arc<tokio::sync::Notify>,
    /// The key a liveness tether of this link must present (`None`: the link has none).
    tether_key: Option<TetherKey>,
    /// Held while this link's tether is watched: dropped with the outbox (the link lost,
    /// replaced or closed), it ends the watcher.
    tether: Option<oneshot::Sender<()>>,
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
        /// What ended the link (docs/cluster.md, "Failure detection").
        detection: Detection,
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
    /// A link to another coordinator is up (dialled or accepted).
    PeerUp {
        peer: CoordinatorId,
        conn: ConnId,
        out: mpsc::Sender<CoordinatorToCoordinator>,
    },
    FromPeer {
        peer: CoordinatorId,
        conn: ConnId,
        msg: CoordinatorToCoordinator,
    },
    PeerLost {
        peer: CoordinatorId,
        conn: ConnId,
    },
    /// A liveness tether naming `node` with `key`: the core answers with the connection it
    /// stands for, and a receiver that ends once the core forgets that connection — or
    /// `None` (not the key of the node's current link, or that link has a tether already).
    Tether {
        node: NodeId,
        key: TetherKey,
        reply: oneshot::Sender<Option<(ConnId, oneshot::Receiver<()>)>>,
    },
    /// Node `node`'s tether for connection `conn` ended: its process is gone.
    TetherCut {
        node: NodeId,
        conn: ConnId,
        how: String,
    },
}

/// Runs coordinator `me` of `config` on `listener` until `shutdown` completes or a tool asks
/// it to stop.
pub async fn run(
    config: ClusterConfig,
    me: CoordinatorId,
    listener: Listener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ProcessError> {
    config.validate()?;
    check_id(&config, me)?;
    let clock = Clock::start();
    let position = config.coordinators.iter().position(|c| c.id == me).unwrap_or_default();
    let metrics_field = config.coordinator_field(position).replace(".address", ".metrics");
    let metrics_listener = match config.metrics_addresses().into_iter().find(|(f, _)| *f == metrics_field) {
        Some((field, address)) => Some(wire::metrics::bind(&field, address).await?),
        None => None,
    };
    let store = GroupStore::new(&config.run_dir, me);
    let stored = store.load()?;
    info!(
        mode = config.mode().name(),
        coordinator = me,
        coordinators = config.coordinators.len(),
        partitions = config.partitions.len(),
        nodes = config.nodes.len(),
        restart = stored.is_some(),
        "coordinator starting"
    );
    let _watch =
        wire::watchdog::spawn(|s| info!("the coordinator's thread was held up (its core and every link waited): {s}"));
    let (core_tx, core_rx) = mpsc::channel(CORE_INBOX_MAX);
    let timer = PreciseTimer::start(core_tx.clone());
    let (stopping, _) = watch::channel(false);
    let restart = stored.is_some();
    // A fixed offset per id spreads the first elections (the lowest id campaigns first).
    let election_offset_ticks = usize::from(me) * 2;
    // A restart: the cluster may be running without this coordinator; it comes back as a
    // member at once (the nodes it waits for on a first start may be gone for good).
    let carrier = Carrier::new(&config, me, election_offset_ticks, stored, clock.now_us())?;
    let mut core = Core {
        config: config.clone(),
        me,
        clock,
        started: Instant::now(),
        carrier,
        store,
        outboxes: BTreeMap::new(),
        clients: HashMap::new(),
        peers: BTreeMap::new(),
        frame_bytes_max: config.limits.frame_bytes_max as usize,
        batch_bytes: BTreeMap::new(),
        stopping: stopping.clone(),
        last_waiting_log: Instant::now(),
        timer,
        metrics: crate::metrics::CoordinatorMetrics::default(),
        serving_metrics: metrics_listener.is_some(),
    };
    if let Some(listener) = metrics_listener {
        info!(address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving metrics");
        let registry = Arc::new(core.metrics.registry(u16::from(me)));
        tokio::spawn(wire::metrics::serve(listener, registry, stopping.subscribe()));
    }
    if restart {
        info!(term = core.carrier.term(), "member of the coordinator group again; electing a leader");
    } else {
        info!("waiting for every node to join");
    }
    // mini-redis's shutdown pattern: every connection task holds a clone of `done`; when all
    // have finished, `all_done` yields `None`.
    let (done, mut all_done) = mpsc::channel::<()>(1);
    for peer in config.coordinators.iter().filter(|c| c.id > me) {
        let dial = dial_peer_loop(config.clone(), me, peer.id, core_tx.clone(), stopping.subscribe(), done.clone());
        tokio::spawn(dial);
    }
    match tokio::net::TcpListener::bind(listener.local_addr()).await {
        Ok(tethers) => {
            tokio::spawn(tether_accept_loop(tethers, core_tx.clone(), stopping.subscribe()));
        }
        Err(e) => warn!(
            address = %listener.local_addr(),
            error = %e,
            "cannot listen for the nodes' liveness tethers (TCP); a killed node is noticed by its silence only"
        ),
    }
    let accept = tokio::spawn(accept_loop(config.clone(), me, listener, core_tx, stopping.subscribe(), done));
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

/// One other coordinator's link, as the core sees it.
#[derive(Debug)]
struct PeerOutbox {
    conn: ConnId,
    out: mpsc::Sender<CoordinatorToCoordinator>,
}

struct Core {
    config: ClusterConfig,
    me: CoordinatorId,
    clock: Clock,
    started: Instant,
    /// The member and everything it decides about its links ([`Carrier`]).
    carrier: Carrier,
    /// Where the member stores its raft state.
    store: GroupStore,
    /// Each node connection's queue, by connection (a node's new connection and the old one
    /// it replaces may both be here for a moment).
    outboxes: BTreeMap<ConnId, NodeOutbox>,
    clients: HashMap<ClientId, mpsc::Sender<CoordinatorToClient>>,
    /// The links to the other coordinators.
    peers: BTreeMap<CoordinatorId, PeerOutbox>,
    frame_bytes_max: usize,
    /// Bytes of batches sent to replicas, per partition (every replica counted).
    batch_bytes: BTreeMap<PartitionId, u64>,
    stopping: watch::Sender<bool>,
    last_waiting_log: Instant,
    timer: PreciseTimer,
    /// What the coordinator counts for its status and metrics (docs/usage.md, "Metrics").
    metrics: crate::metrics::CoordinatorMetrics,
    /// Whether it serves them: only then is its state published for scrapes.
    serving_metrics: bool,
}

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
        self.store.save(state).map_err(|e| e.to_string())
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
    async fn run(
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
            CoreEvent::Tether { node, key, reply } => {
                let current = self.carrier.connection(node).and_then(|conn| self.outboxes.get_mut(&conn));
                let accepted = match current {
                    Some(o) if o.tether.is_none() && o.tether_key.is_some_and(|k| k.matches(&key)) => {
                        let (held, gone) = oneshot::channel();
                        o.tether = Some(held);
                        debug!(node, conn = o.conn, "the node's liveness tether is up");
                        Some((o.conn, gone))
                    }
                    _ => None,
                };
                let _ = reply.send(accepted);
                Ok(())
            }
            CoreEvent::TetherCut { node, conn, how } => self.carrier.on_tether_cut(node, conn, how, now, links!(self)),
            CoreEvent::ClientUp { client, out } => {
                debug!(client, "client connected");
                self.clients.insert(client, out);
                Ok(())
            }
            CoreEvent::Tick => Ok(()),
            CoreEvent::ClientGone { client } => {
                debug!(client, "client disconnected");
                self.clients.remove(&client);
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
            CoreEvent::PeerUp { peer, conn, out } => {
                info!(peer, conn, "linked to coordinator {peer}");
                self.peers.insert(peer, PeerOutbox { conn, out });
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
            role: Role::Coordinator,
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
    fn shutdown(&mut self, reason: &str) {
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

/// Accepts connections and starts their tasks until the coordinator stops.
async fn accept_loop(
    config: ClusterConfig,
    me: CoordinatorId,
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
                // The certificate was checked against the Hello's id: this is coordinator
                // `hello.id`. Only a lower id dials (one link per pair).
                let peer = u8::try_from(hello.id).ok().filter(|&p| p < me && config.coordinator_by_id(p).is_some());
                let Some(peer) = peer else {
                    warn!(id = hello.id, "a coordinator that should not dial this one connected; refused");
                    tokio::spawn(link.refuse("only a coordinator of cluster.toml with a lower id dials this one"));
                    continue;
                };
                let (core, stopping, done) = (core.clone(), stopping.clone(), done.clone());
                tokio::spawn(async move {
                    peer_connection(peer, conn, link, core, stopping).await;
                    drop(done);
                });
            }
        }
    }
}

/// Dials coordinator `peer` (a higher id than `me`) and carries the link; again
/// [`PEER_REDIAL`] after it broke or could not be made, until the coordinator stops.
async fn dial_peer_loop(
    config: ClusterConfig,
    me: CoordinatorId,
    peer: CoordinatorId,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
    done: mpsc::Sender<()>,
) {
    // Held until this task ends (the shutdown waits for it).
    let _done = done;
    let Some(address) = config.coordinator_by_id(peer).map(|c| c.address.clone()) else { return };
    let field = format!("the address of coordinator {peer}");
    let tls = match wire::tls::client_config(&config.cert_dir, wire::tls::Role::Coordinator(u16::from(me))) {
        Ok(t) => t,
        Err(e) => {
            error!(error = %e, peer, "cannot read this coordinator's certificates; not dialling the group");
            return;
        }
    };
    let server_name = split_address(&address).map(|(h, _)| h.to_string()).unwrap_or_default();
    // Dials are numbered apart from accepted connections (they share the core's conn ids).
    let mut conn: ConnId = 1 << 48;
    let mut attempts = 0u64;
    loop {
        if *stopping.borrow() {
            return;
        }
        let link = match wire::config::resolve(&field, &address) {
            Ok(addr) => {
                let limits = EndpointLimits::to_coordinator(&config);
                let peer_role = wire::tls::Role::Coordinator(u16::from(peer));
                let attempt =
                    endpoint::connect_to(peer_role, addr, &server_name, tls.clone(), hello(&config, me), limits);
                tokio::select! {
                    r = attempt => r.map_err(|e| e.to_string()),
                    _ = stopping.wait_for(|s| *s) => return,
                }
            }
            Err(e) => Err(e.to_string()),
        };
        match link {
            Ok(link) => {
                attempts = 0;
                conn += 1;
                peer_connection(peer, conn, link, core.clone(), stopping.clone()).await;
            }
            Err(e) => {
                if attempts % 50 == 0 {
                    info!(peer, %address, error = %e, "coordinator not reachable yet; retrying");
                }
                attempts += 1;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(PEER_REDIAL) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}

/// A link's writer task: sends what is queued in order, until the queue closes (then ends
/// the stream, waiting at most a second) or a send fails.
fn spawn_writer<M: ChannelMessage>(
    mut sender: endpoint::LinkSender,
    mut queued: mpsc::Receiver<M>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(msg) = queued.recv().await {
            if sender.send(&msg).await.is_err() {
                return;
            }
        }
        sender.finish(Duration::from_secs(1)).await;
    })
}

/// One other coordinator's link: a writer of its queue, and a reader feeding the core.
async fn peer_connection(
    peer: CoordinatorId,
    conn: ConnId,
    link: Link,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
) {
    let (sender, mut receiver) = link.split();
    let (out, out_rx) = mpsc::channel::<CoordinatorToCoordinator>(PEER_OUTBOX_MAX);
    if core.send(CoreEvent::PeerUp { peer, conn, out }).await.is_err() {
        return;
    }
    let writer = spawn_writer(sender, out_rx);
    match feed_core(&mut receiver, &core, &mut stopping, |msg| CoreEvent::FromPeer { peer, conn, msg }).await {
        LinkEnd::Failed(e) if e.is_protocol_violation() => {
            warn!(peer, error = %e, "coordinator {peer} broke the protocol; its link is closed")
        }
        LinkEnd::Failed(e) => debug!(peer, error = %e, "the link to coordinator {peer} failed"),
        LinkEnd::ClosedByPeer | LinkEnd::Stopping | LinkEnd::CoreGone => {}
    }
    let _ = core.send(CoreEvent::PeerLost { peer, conn }).await;
    writer.abort();
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
    let tether_key = link.tether_key();
    if tether_key.is_none() {
        debug!(node, "the link's TLS session exports no key; the node cannot hold a liveness tether");
    }
    let (mut sender, mut receiver) = link.split();
    let (frames, mut out_rx) = mpsc::unbounded_channel::<Arc<Vec<u8>>>();
    let outbox = NodeOutbox {
        node,
        conn,
        frames,
        queued: Arc::new(AtomicUsize::new(0)),
        close: Arc::new(std::sync::OnceLock::new()),
        closed: Arc::new(tokio::sync::Notify::new()),
        tether_key,
        tether: None,
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
    let detection =
        match feed_core(&mut receiver, &core, &mut stopping, |msg| CoreEvent::FromNode { node, conn, msg }).await {
            LinkEnd::ClosedByPeer => {
                info!(node, "node closed its link");
                Detection::DeathNotice
            }
            LinkEnd::Failed(e) if e.is_protocol_violation() => {
                warn!(node, error = %e, "the node broke the protocol; its link is closed");
                Detection::ConnectionLost { how: format!("protocol violation: {e}") }
            }
            LinkEnd::Failed(e) => {
                warn!(node, error = %e, "node link failed");
                Detection::ConnectionLost { how: e.to_string() }
            }
            LinkEnd::Stopping | LinkEnd::CoreGone => {
                Detection::ConnectionLost { how: "this coordinator is stopping".into() }
            }
        };
    let _ = core.send(CoreEvent::NodeLost { node, conn, detection }).await;
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
}

/// Accepts the nodes' liveness tethers ([`wire::tether`]) until the coordinator stops; at
/// most [`TETHERS_READING_MAX`] are read at once.
async fn tether_accept_loop(
    listener: tokio::net::TcpListener,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
) {
    let reading = Arc::new(Semaphore::new(TETHERS_READING_MAX));
    loop {
        let permit = tokio::select! {
            p = reading.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = stopping.wait_for(|s| *s) => return,
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopping.wait_for(|s| *s) => return,
        };
        match accepted {
            Ok((stream, from)) => {
                tokio::spawn(tether_connection(stream, from, permit, core.clone(), stopping.clone()));
            }
            Err(e) => {
                debug!(error = %e, "cannot accept a liveness tether");
                // (Out of file descriptors, say: do not spin.)
                tokio::time::sleep(TETHER_RETRY).await;
            }
        }
    }
}

/// One liveness tether: its header read (holding `permit`) and matched to its node's current
/// link, then watched until it ends — the node is lost — or the core forgets that link, or
/// the coordinator stops.
async fn tether_connection(
    mut stream: tokio::net::TcpStream,
    from: SocketAddr,
    permit: tokio::sync::OwnedSemaphorePermit,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
) {
    let deadline = tokio::time::Instant::now() + TETHER_HEADER_TIMEOUT;
    let header = match tether::read_header(&mut stream, TETHER_HEADER_TIMEOUT).await {
        Ok(h) => h,
        Err(e) => {
            debug!(%from, error = %e, "a TCP connection that is no liveness tether; dropped");
            return;
        }
    };
    let node = header.node;
    // The node opens its tether once its link is up, which the core may learn a moment later.
    let (conn, mut forgotten) = loop {
        let (reply, answer) = oneshot::channel();
        if core.send(CoreEvent::Tether { node, key: header.key, reply }).await.is_err() {
            return;
        }
        if let Ok(Some(accepted)) = answer.await {
            break accepted;
        }
        if tokio::time::Instant::now() + TETHER_RETRY > deadline {
            debug!(node, %from, "a liveness tether matching no current link of the node; dropped");
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(TETHER_RETRY) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    };
    drop(permit);
    let cut = tokio::select! {
        cut = tether::cut(&mut stream) => cut,
        _ = &mut forgotten => return,
        _ = stopping.wait_for(|s| *s) => return,
    };
    match cut.how() {
        Some(how) => {
            let _ = core.send(CoreEvent::TetherCut { node, conn, how }).await;
        }
        None => warn!(node, "the node wrote on its liveness tether, which it must not; no longer watched"),
    }
}

/// One client's link: a writer of reply frames, and a reader feeding the core.
async fn client_connection(
    client: ClientId,
    link: Link,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
) {
    let (sender, mut receiver) = link.split();
    let (out, out_rx) = mpsc::channel::<CoordinatorToClient>(CLIENT_OUTBOX_MAX);
    if core.send(CoreEvent::ClientUp { client, out }).await.is_err() {
        return;
    }
    let writer = spawn_writer(sender, out_rx);
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
