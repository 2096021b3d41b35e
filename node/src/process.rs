//! The node process (`glass node --config … --id …`): hosts the node's partition replicas and
//! carries their messages. The deciding logic is [`Replica`]; this module only moves bytes and
//! threads (docs/design.md; mini-redis's server shape: [`run`] takes a bound listener and a
//! shutdown future).
//!
//! Shape:
//! - one OS thread per replica (its *executor*) owns the replica's [`engine::LeanDb`]
//!   outright: it loads the partition's warehouses from the seed (no bulk data crosses the
//!   network), then executes what arrives on its bounded inbox strictly in order — the
//!   coordinator's batches, and tool requests (digests, snapshots) between two batches; the
//!   copies that answer them (and the state digests batches ask for) are stepped between work
//!   items under the copy share (`answers`, docs/design.md §10);
//! - the node keeps a link to every coordinator of `cluster.toml`, dialing each when its
//!   [`NodeMachine`] says so (at start, and [`CONNECT_RETRY_MS`] after a failed dial or a
//!   broken link: `NodeEffect::Dial`, the same decision the simulator runs; docs/design.md
//!   §14): a reader task per link routes the coordinator's batches to the executors' inboxes
//!   (awaiting room: backpressure reaches the coordinator through QUIC flow control), and one
//!   writer task sends the executors' results, load progress and the machine's heartbeats
//!   (every `timeouts.heartbeat_ms`, also while loading) to the leader. A link that comes
//!   back to the leader that counted this node failed makes every partition rejoin, as a
//!   node restarted with `--rejoin` does: it copies its partitions from live replicas
//!   (docs/design.md, "Failure and recovery");
//! - beside each coordinator link the node holds a liveness tether ([`wire::tether`]): a TCP
//!   connection to that coordinator's address, keyed to the link, which it never writes to
//!   after its header and drops when the link ends — and which the kernel closes the moment
//!   this process ends, SIGKILL included, so the coordinator learns of a death within a round
//!   trip rather than after `failure_timeout_ms` of silence. Opening it is a spawned task
//!   that never holds up the link; a coordinator that does not take it (an older build, its
//!   port taken) still has the heartbeats;
//! - the node listens on its own address for tools (`glass cluster status`, `check`, `dump`,
//!   `down`) on the tool channel (`wire::channel::ToolRequest`): status, replica digests,
//!   snapshots, replica reads, shutdown; and for other nodes on the peer channel
//!   (`wire::channel::PeerRequest`): the primaries of partitions it backs up (passive modes),
//!   whose shipments go to the backup's executor and whose acknowledgements go back on the
//!   same link, and rejoining nodes fetching a copy or a log base; the peer's Hello (checked
//!   against its certificate) says which channel a connection carries; at most
//!   [`TOOL_CONNECTIONS_MAX`] connections at once;
//! - a peer breaking the protocol (a frame with an unknown tag or another protocol version,
//!   a malformed one) is logged at `warn` naming it, and loses its connection only;
//! - passive modes, at a primary: the writer task sends each batch's shipment (encoded once)
//!   to a link per backup node, which the node dials and keeps; the partition's
//!   [`ShipGate`] holds the results until the backups acknowledged them (`shipping =
//!   "sync"`) and measures their lag. A backup whose link cannot take
//!   [`PEER_OUTBOX_MAX`] more shipments is dropped from shipping (logged) rather than let the
//!   writer — and the node's heartbeats — wait for it;
//! - shutdown (the future passed in, a `Shutdown` message from the coordinator or a tool)
//!   stops accepting, closes the coordinator links with `CLOSE_NORMAL` — the coordinator
//!   reads a death notice, not a failure — waiting at most [`LINKS_CLOSE_WAIT`] for that,
//!   and keeps the tethers until the process ends (so the notice is read first), closes the
//!   other links, asks the executors to stop and waits for them at most
//!   `timeouts.shutdown_timeout_ms` (a replica still loading is not waited for).
//!
//! A watch on the thread that carries the links ([`wire::watchdog`]) logs, at `info`, each
//! time it was held up 50 ms or more, with its time on a CPU and waiting for one meanwhile.
//!
//! Every event is logged through `tracing`, one line each.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch, Semaphore};
use tracing::{debug, error, info, warn};
use wire::channel::{
    ChannelMessage, CoordinatorToNode, Epoched, FromCoordinator, NodeToCoordinator, PeerChannel, PeerReply,
    PeerRequest, ToolReply, ToolRequest,
};
use wire::config::{split_address, ClusterConfig, Mode, PartitionConfig, Replication};
use wire::endpoint::{self, EndpointError, EndpointLimits, Link, Listener};
use wire::messages::{
    CoordinatorId, DigestOutcome, Hello, LoadState, NodeId, PartitionId, PartitionPhase, PartitionReport,
    ProcessStatus, Rejection, ReplicationReport, Role, Seq, Shipment, SnapshotEnd, StateDigest, PROTOCOL_VERSION,
};

use crate::error::RejoinError;
use crate::fullstack::Restart;
use crate::machine::{Asked, Began, Effect, FetchKind, Fetched, NodeEffect, NodeMachine, PartitionMachine};
use crate::replica::{DigestCopy, Emit, Replica, ReplicaRole, Store};
use crate::snapshot;

mod answers;
mod copy;
mod image_copy;

/// Work items one replica's inbox holds (batches and tool requests); past it the link reader
/// waits, and the coordinator with it.
pub const REPLICA_INBOX_MAX: usize = 1_024;
/// Messages from the executors waiting for the coordinator link (results, load progress).
pub const COORDINATOR_OUTBOX_MAX: usize = 4_096;
/// Tool connections (status, check, dump, down) served at once.
pub const TOOL_CONNECTIONS_MAX: usize = 16;
/// Replies (snapshot chunks of up to 1 MiB included) queued for one tool connection.
pub const TOOL_OUTBOX_MAX: usize = 8;
/// How long an executor waits for room in a tool connection's reply queue before it drops
/// the reply: a peer that does not read its replies (dead, hung or hostile) must not stall
/// the partition's executor — the node's core — for longer than this.
pub const TOOL_REPLY_PATIENCE: Duration = Duration::from_millis(1_000);
/// Tools' and peers' requests an executor keeps waiting for a copy to end; past it they are
/// refused as busy (the requester may ask again).
pub const DEFERRED_MAX: usize = 64;
/// Messages queued for one coordinator link; past it the writer task waits (the leader's
/// link: backpressure on the executors), as it would on the link itself.
pub const LINK_OUTBOX_MAX: usize = 1_024;
/// Encoded shipments queued for one backup node's link.
pub const PEER_OUTBOX_MAX: usize = 4_096;
/// Acknowledgements and membership changes queued for the writer task.
const OUTBOX_EVENTS_MAX: usize = 4_096;
/// How long a tether may take to connect and send its header.
const TETHER_OPEN_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a stopping node keeps its tethers after closing its coordinator links, so that
/// each coordinator reads the clean close (a death notice) before the tether's end (the
/// process ends sooner, and the tethers with it).
const TETHER_STOP_LINGER: Duration = Duration::from_secs(2);
/// How long a stopping node waits for its coordinator links to be closed.
pub const LINKS_CLOSE_WAIT: Duration = Duration::from_millis(500);
/// Attempts to reach the coordinator between two log lines about it.
const CONNECT_RETRIES_PER_LOG: u32 = 25;

/// Why a node process cannot start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The id is not one of `cluster.toml`'s nodes.
    #[error("node {node} is not listed in [[nodes]] of cluster.toml")]
    UnknownNode { node: NodeId },
    /// The node holds no replica.
    #[error(
        "node {node} holds no partition replica (see the `replicas` of [[partitions]]); a spare node joins a \
         running cluster with --join PARTITION"
    )]
    NoReplicas { node: NodeId },
    /// `--join` named a partition the file does not have, or one the node already holds.
    #[error("--join {partition}: {problem}")]
    Join { partition: PartitionId, problem: &'static str },
    #[error(transparent)]
    Config(#[from] wire::ConfigError),
    #[error(transparent)]
    Endpoint(#[from] wire::endpoint::EndpointError),
    #[error("cannot read the certificates: {0}")]
    Tls(#[from] wire::tls::TlsError),
    #[error(transparent)]
    Metrics(#[from] wire::metrics::MetricsError),
    /// An executor thread could not be started.
    #[error("cannot start the executor thread of partition {partition}: {source}")]
    Thread {
        partition: PartitionId,
        #[source]
        source: std::io::Error,
    },
}

/// What one replica's executor receives.
#[derive(Debug)]
enum Work {
    /// A message of the coordinator's stream (batch, membership, stop, promotion…); what
    /// the replica emits goes to the writer task.
    Coordinator(CoordinatorToNode),
    /// A tool's digest, snapshot or replica read request; replies go to `reply`. (Status
    /// requests and shutdowns are served by the connection's task, never queued here.)
    Tool { req: ToolRequest, reply: mpsc::Sender<ToolReply> },
    /// A peer node's shipment, snapshot or log base request; replies go to `reply`.
    Peer { req: PeerRequest, reply: mpsc::Sender<PeerReply> },
    /// Rejoin: the starting state fetched from live replica `source` (or why it failed).
    Fetched { source: NodeId, fetched: Box<Result<Fetched, RejoinError>> },
    /// Drop the replica's state and rejoin; messages are sent under link epoch `epoch` from
    /// now on. Either the only coordinator's link came back after breaking, or
    /// (`only_if_serving`) the leader's membership left this replica out: a replica already
    /// rejoining goes on.
    Rejoin { epoch: u64, only_if_serving: bool },
    /// Room was made for a copy's chunks, or its forwarder ended (`copy::CopyTask`): the
    /// executor looks at its copy again.
    CopyRoom,
    /// Finish: the node is shutting down.
    Stop,
}

impl Work {
    /// What it is, for the executor's log.
    fn name(&self) -> &'static str {
        match self {
            Work::Coordinator(m) => m.name(),
            Work::Tool { .. } => "a tool's request",
            Work::Peer { .. } => "a peer's request",
            Work::Fetched { .. } => "a fetched starting state",
            Work::Rejoin { .. } => "a rejoin",
            Work::CopyRoom => "a copy's step",
            Work::Stop => "stop",
        }
    }
}

/// One piece of the executor's work taking this long is logged: batches wait meanwhile.
const SLOW_WORK: Duration = Duration::from_millis(200);

/// A partition's machine as the executor drives it: replies to peers go to their
/// connection's queue.
type Machine = PartitionMachine<mpsc::Sender<PeerReply>>;

use crate::machine::CATCH_UP_SLICE_IDLE;
pub use crate::machine::{CONNECT_RETRY_MS, REJOIN_FETCH_ATTEMPTS, REJOIN_HELD_BATCHES_MAX};

/// What the writer task (the coordinator link's sending side) is told besides the
/// executors' messages.
#[derive(Debug)]
enum OutboxEvent {
    /// A backup acknowledged shipments up to `seq`.
    Ack { from: NodeId, partition: PartitionId, seq: Seq },
    /// The node machine's effects for the writer, from the reader (results a membership
    /// released, a link to open to a rejoining backup).
    Effects(Vec<NodeEffect>),
}

/// What an executor sends the writer task: a message under the coordinator link's epoch it
/// belongs to. The epoch grows each time the link comes back after breaking; the writer drops
/// what an executor sent under an older one (it was lost with the old link, and the
/// executor's state is being replaced by a rejoin).
type Outgoing = (u64, Emit);

/// What the network side knows of a replica without asking its thread.
#[derive(Debug)]
struct ReplicaShared {
    partition: PartitionId,
    /// The replica's role now (a backup promoted, a primary rejoined as a backup).
    role: Mutex<ReplicaRole>,
    load: watch::Sender<LoadState>,
    applied_seq: AtomicU64,
    committed: AtomicU64,
    stopped: Mutex<Option<String>>,
    /// `/proc/…/task/TID/schedstat` of the executor thread, once it runs, and of its
    /// full-stack workers.
    schedstat: Mutex<Vec<PathBuf>>,
    /// Replication figures (see [`ReplicationReport`]).
    shipped_bytes: AtomicU64,
    acks: AtomicU64,
    ack_delay_us_sum: AtomicU64,
    ack_delay_us_max: AtomicU64,
    applied_bytes: AtomicU64,
    log_bytes: AtomicU64,
    fsyncs: AtomicU64,
    /// For the metrics (docs/usage.md, "Metrics"): transactions aborted and failed, bytes of
    /// copies sent and received, and the executor's seconds per batch.
    aborted: AtomicU64,
    failed: AtomicU64,
    copy_sent_bytes: AtomicU64,
    copy_received_bytes: AtomicU64,
    batch_seconds: Arc<wire::metrics::Latencies>,
}

impl ReplicaShared {
    fn report(&self, node: NodeId) -> PartitionReport {
        let load = self.load.borrow().clone();
        let stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let phase = match (&stopped, &load) {
            (Some(reason), _) => PartitionPhase::Stopped { reason: reason.clone() },
            (None, LoadState::Loading { .. }) => PartitionPhase::Loading,
            (None, LoadState::Ready { .. }) => PartitionPhase::Ready,
            (None, LoadState::Failed { reason }) => PartitionPhase::Failed { reason: reason.clone() },
        };
        let schedstat = self.schedstat.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PartitionReport {
            partition: self.partition,
            phase,
            load: Some(load),
            replicas: vec![node],
            seq: get(&self.applied_seq),
            txns: get(&self.committed),
            cpu_ms: schedstat.iter().filter_map(|p| thread_cpu_ms(p)).sum(),
            replication: ReplicationReport {
                role: Some(self.role.lock().unwrap_or_else(|e| e.into_inner()).reported()),
                shipped_bytes: get(&self.shipped_bytes),
                acks: get(&self.acks),
                ack_delay_us_sum: get(&self.ack_delay_us_sum),
                ack_delay_us_max: get(&self.ack_delay_us_max),
                applied_bytes: get(&self.applied_bytes),
                log_bytes: get(&self.log_bytes),
                fsyncs: get(&self.fsyncs),
            },
            latency_buckets: self.batch_seconds.counts(),
        }
    }
}

/// CPU milliseconds of a thread, from the first field of its `schedstat` (nanoseconds).
fn thread_cpu_ms(schedstat: &std::path::Path) -> Option<u64> {
    let text = std::fs::read_to_string(schedstat).ok()?;
    text.split_whitespace().next()?.parse::<u64>().ok().map(|ns| ns / 1_000_000)
}

/// A running replica, as the network side holds it.
#[derive(Debug)]
struct ReplicaHandle {
    shared: Arc<ReplicaShared>,
    inbox: mpsc::Sender<Work>,
}

/// A wait this long for room in a replica's inbox is logged: the link that waited carries
/// the node's other partitions too, and they waited with it.
const INBOX_WAIT_LOGGED: Duration = Duration::from_millis(50);

impl ReplicaHandle {
    /// Puts `work` from the link `link` on the replica's inbox, waiting for room when it is
    /// full; `Err` once the executor is gone. A wait of [`INBOX_WAIT_LOGGED`] or more is
    /// logged: every message behind this one on the link — other partitions' batches and
    /// shipments included — waited as long.
    async fn deliver(&self, partition: PartitionId, link: &str, work: Work) -> Result<(), ()> {
        let work = match self.inbox.try_send(work) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(()),
            Err(mpsc::error::TrySendError::Full(work)) => work,
        };
        let (what, t0) = (work.name(), Instant::now());
        self.inbox.send(work).await.map_err(|_| ())?;
        let waited = t0.elapsed();
        if waited >= INBOX_WAIT_LOGGED {
            warn!(
                partition,
                link,
                ms = waited.as_millis() as u64,
                what,
                "the replica's inbox was full: the link, and every partition behind it, waited"
            );
        }
        Ok(())
    }
}

/// State every task of the node shares.
#[derive(Debug)]
struct Node {
    id: NodeId,
    config: ClusterConfig,
    started: Instant,
    replicas: BTreeMap<PartitionId, ReplicaHandle>,
    /// Set once the node is shutting down.
    stopping: watch::Sender<bool>,
    /// To the writer task: acknowledgements from backups, the reader's effects.
    events: mpsc::Sender<OutboxEvent>,
    /// The node's link-side decisions (routing, ship gates, heartbeats, reconnection), shared
    /// by the link's reader and writer; held only for a synchronous call.
    machine: Mutex<NodeMachine>,
    /// The coordinator link's epoch (see [`Outgoing`]).
    epoch: AtomicU64,
    /// The sending queue of each coordinator link that is up.
    links: Mutex<BTreeMap<CoordinatorId, LinkOutbox>>,
    /// Woken when the node machine says to dial a coordinator again (`NodeEffect::Dial`).
    dial_due: BTreeMap<CoordinatorId, tokio::sync::Notify>,
    /// Set once the first coordinator link is up: until then what the executors send waits
    /// in their queue (a load report must not be lost to a link not yet made).
    first_link: watch::Sender<bool>,
    /// Encoded shipments to each backup node's link.
    peers: Mutex<BTreeMap<NodeId, mpsc::Sender<Arc<Vec<u8>>>>>,
    /// This node, for tasks started later (links to rejoining backups).
    me: std::sync::Weak<Node>,
}

impl Node {
    fn machine(&self) -> std::sync::MutexGuard<'_, NodeMachine> {
        self.machine.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn hello(&self) -> Hello {
        Hello {
            protocol_version: PROTOCOL_VERSION,
            role: Role::Node,
            id: self.id,
            config_fingerprint: self.config.fingerprint(),
        }
    }

    fn status(&self) -> ProcessStatus {
        ProcessStatus {
            role: Role::Node,
            id: self.id,
            pid: std::process::id(),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            partitions: self.replicas.values().map(|r| r.shared.report(self.id)).collect(),
            leader: self.machine().leader().map(u16::from),
        }
    }

    fn stop(&self, why: &str) {
        if !*self.stopping.borrow() {
            info!(why, "node shutting down");
        }
        self.stopping.send_replace(true);
    }

    async fn stopped(&self) {
        let mut rx = self.stopping.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// Binds the node's listener on `address` (its `cluster.toml` address, or another local one)
/// with the node's certificate.
pub async fn bind(config: &ClusterConfig, id: NodeId, address: SocketAddr) -> Result<Listener, NodeError> {
    let hello = node_hello(config, id);
    let tls = wire::tls::server_config(&config.cert_dir, wire::tls::Role::Node(id))?;
    let mut limits = EndpointLimits::from_config(config);
    limits.connections_max = TOOL_CONNECTIONS_MAX;
    Ok(endpoint::listen(address, tls, hello, limits).await?)
}

fn node_hello(config: &ClusterConfig, id: NodeId) -> Hello {
    Hello { protocol_version: PROTOCOL_VERSION, role: Role::Node, id, config_fingerprint: config.fingerprint() }
}

/// How a node process starts its replicas.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Start {
    /// Load every partition the file places on the node from the seed (a cluster starting).
    #[default]
    Load,
    /// Rejoin a running cluster after a failure (`--rejoin`): each replica copies a live one
    /// (active-active, active-passive) or recovers from its own log (full stack).
    Rejoin,
    /// A new replica of these partitions, besides those the file places here (`--join`): it
    /// rejoins them all as a restarted node would — a spare node grows a partition's
    /// replication, or replaces a node lost for good.
    Join(Vec<PartitionId>),
}

/// Runs node `id` of `config` until `shutdown` completes or the cluster is shut down: loads
/// (or rejoins) its replicas, joins the coordinator, serves tools on `listener`.
pub async fn run(
    config: ClusterConfig,
    id: NodeId,
    listener: Listener,
    shutdown: impl Future<Output = ()>,
    start: Start,
) -> Result<(), NodeError> {
    let partitions = partitions_held(&config, id, &start)?;
    let metrics = match config.metrics_addresses().into_iter().find(|(f, _)| *f == node_metrics_field(&config, id)) {
        Some((field, address)) => Some(wire::metrics::bind(&field, address).await?),
        None => None,
    };
    info!(
        node = id,
        partitions = ?partitions.iter().map(|p| p.id).collect::<Vec<_>>(),
        seed = config.seed,
        "node starting"
    );
    let _watch =
        wire::watchdog::spawn(|s| info!("the node's network thread was held up (every link it carries waited): {s}"));
    let (to_coordinator, from_executors) = mpsc::channel(COORDINATOR_OUTBOX_MAX);
    let (events, events_rx) = mpsc::channel(OUTBOX_EVENTS_MAX);
    let mut replicas = BTreeMap::new();
    let mut exits = Vec::new();
    let mut roles = Vec::new();
    for p in &partitions {
        let joined = matches!(&start, Start::Join(j) if j.contains(&p.id));
        let role = ReplicaRole::at_start(config.mode(), p, id, start != Start::Load, joined);
        roles.push((p.id, role));
        let begin = match start {
            Start::Load => Begin::Load,
            Start::Rejoin | Start::Join(_) => Begin::Rejoin,
        };
        let (handle, exit) = start_replica(&config, id, p, role, begin, &to_coordinator)?;
        exits.push(exit);
        replicas.insert(p.id, handle);
    }
    drop(to_coordinator);
    let machine = NodeMachine::new(&config, id, &roles, 0);
    let node = Arc::new_cyclic(|me| Node {
        id,
        config: config.clone(),
        started: Instant::now(),
        replicas,
        stopping: watch::Sender::new(false),
        events,
        machine: Mutex::new(machine),
        epoch: AtomicU64::new(0),
        links: Mutex::new(BTreeMap::new()),
        dial_due: config.coordinator_ids().into_iter().map(|c| (c, tokio::sync::Notify::new())).collect(),
        first_link: watch::Sender::new(false),
        peers: Mutex::new(BTreeMap::new()),
        me: me.clone(),
    });

    // A link to every node backing up a partition this node is primary of.
    let backups: std::collections::BTreeSet<NodeId> = node.machine().backups().into_values().flatten().collect();
    for backup in backups {
        open_peer(&node, backup);
    }
    let mut link_task = tokio::spawn(coordinator_links(node.clone(), from_executors, events_rx));
    let tools_task = tokio::spawn(serve_tools(node.clone(), listener));
    if let Some(listener) = metrics {
        info!(address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving metrics");
        let registry = wire::metrics::registry("node", id, NodeCollector(Arc::downgrade(&node)));
        tokio::spawn(wire::metrics::serve(listener, Arc::new(registry), node.stopping.subscribe()));
    }

    tokio::select! {
        () = shutdown => node.stop("signal"),
        () = node.stopped() => {}
    }
    // Each coordinator link is closed with CLOSE_NORMAL: a death notice, not a lost link.
    if tokio::time::timeout(LINKS_CLOSE_WAIT, &mut link_task).await.is_err() {
        debug!(wait_ms = LINKS_CLOSE_WAIT.as_millis() as u64, "coordinator links still open at shutdown");
    }
    stop_executors(&node, exits).await;
    link_task.abort();
    tools_task.abort();
    info!(node = id, "node stopped");
    Ok(())
}

/// The `cluster.toml` field of node `id`'s metrics address.
fn node_metrics_field(config: &ClusterConfig, id: NodeId) -> String {
    let i = config.nodes.iter().position(|n| n.id == id).unwrap_or_default();
    format!("nodes[{i}].metrics")
}

/// The node's figures for a metrics scrape, read when it comes (docs/usage.md, "Metrics").
#[derive(Debug)]
struct NodeCollector(std::sync::Weak<Node>);

impl prometheus_client::collector::Collector for NodeCollector {
    fn encode(&self, enc: prometheus_client::encoding::DescriptorEncoder) -> std::fmt::Result {
        let Some(node) = self.0.upgrade() else { return Ok(()) };
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let replicas = node
            .replicas
            .values()
            .map(|r| crate::metrics::ReplicaFigures {
                report: r.shared.report(node.id),
                aborted: get(&r.shared.aborted),
                failed: get(&r.shared.failed),
                copy_sent_bytes: get(&r.shared.copy_sent_bytes),
                copy_received_bytes: get(&r.shared.copy_received_bytes),
                inbox_depth: r.inbox.max_capacity() - r.inbox.capacity(),
                batch_seconds: r.shared.batch_seconds.clone(),
            })
            .collect();
        let leader = node.machine().leader().map(u16::from);
        crate::metrics::encode(&crate::metrics::NodeFigures { leader, replicas }, enc)
    }
}

/// The partitions node `id` holds: those the file places on it, and those it joins.
fn partitions_held(config: &ClusterConfig, id: NodeId, start: &Start) -> Result<Vec<PartitionConfig>, NodeError> {
    if config.node(id).is_none() {
        return Err(NodeError::UnknownNode { node: id });
    }
    let mut partitions: Vec<PartitionConfig> = config.partitions_on_node(id).cloned().collect();
    let joined: &[PartitionId] = match start {
        Start::Join(j) => j,
        Start::Load | Start::Rejoin => &[],
    };
    for &pid in joined {
        let Some(p) = config.partitions.iter().find(|p| p.id == pid) else {
            return Err(NodeError::Join { partition: pid, problem: "no such partition in [[partitions]]" });
        };
        if partitions.iter().any(|q| q.id == pid) {
            return Err(NodeError::Join { partition: pid, problem: "the node already holds it (use --rejoin)" });
        }
        partitions.push(p.clone());
    }
    if partitions.is_empty() {
        return Err(NodeError::NoReplicas { node: id });
    }
    Ok(partitions)
}

/// Starts the executor thread of node `id`'s replica of `p` (loading it, or rejoining, as
/// `begin` says); returns its handle and a receiver that completes when the
/// thread ends.
fn start_replica(
    config: &ClusterConfig,
    id: NodeId,
    p: &PartitionConfig,
    role: ReplicaRole,
    begin: Begin,
    to_coordinator: &mpsc::Sender<Outgoing>,
) -> Result<(ReplicaHandle, tokio::sync::oneshot::Receiver<()>), NodeError> {
    let (inbox, rx) = mpsc::channel(REPLICA_INBOX_MAX);
    let zero = || AtomicU64::new(0);
    let shared = Arc::new(ReplicaShared {
        partition: p.id,
        role: Mutex::new(role),
        load: watch::Sender::new(LoadState::Loading { rows_loaded: 0, rows_total: 0 }),
        applied_seq: zero(),
        committed: zero(),
        stopped: Mutex::new(None),
        schedstat: Mutex::new(Vec::new()),
        shipped_bytes: zero(),
        acks: zero(),
        ack_delay_us_sum: zero(),
        ack_delay_us_max: zero(),
        applied_bytes: zero(),
        log_bytes: zero(),
        fsyncs: zero(),
        aborted: zero(),
        failed: zero(),
        copy_sent_bytes: zero(),
        copy_received_bytes: zero(),
        batch_seconds: Default::default(),
    });
    let (exit_tx, exit_rx) = tokio::sync::oneshot::channel::<()>();
    let executor = Executor {
        node: id,
        begin,
        config: config.clone(),
        self_inbox: inbox.clone(),
        storage: Storage::of(config, id, p.id),
        partition: p.clone(),
        seed: config.seed,
        pending_batches_max: config.limits.replica_pending_batches_max as usize,
        frame_bytes_max: config.limits.frame_bytes_max as usize,
        shared: shared.clone(),
        to_coordinator: to_coordinator.clone(),
        epoch: std::cell::Cell::new(0),
        deaf_tools: Default::default(),
        deaf_peers: Default::default(),
        copy: Default::default(),
        digest_copies: Default::default(),
        tool_rebuilds: Default::default(),
        copy_share_pct: config.limits.copy_share_pct,
        runtime: tokio::runtime::Handle::current(),
    };
    std::thread::Builder::new()
        .name(format!("replica-p{}", p.id))
        .spawn(move || {
            executor.run(rx);
            drop(exit_tx);
        })
        .map_err(|source| NodeError::Thread { partition: p.id, source })?;
    Ok((ReplicaHandle { shared, inbox }, exit_rx))
}

/// Asks every executor to stop and waits for them at most `timeouts.shutdown_timeout_ms` (a
/// replica still loading is not waited for).
async fn stop_executors(node: &Node, exits: Vec<tokio::sync::oneshot::Receiver<()>>) {
    for r in node.replicas.values() {
        let _ = r.inbox.try_send(Work::Stop);
    }
    let wait = Duration::from_millis(node.config.timeouts.shutdown_timeout_ms);
    let joined = tokio::time::timeout(wait, async {
        for e in exits {
            let _ = e.await;
        }
    })
    .await;
    if joined.is_err() {
        warn!(wait_ms = wait.as_millis() as u64, "executors still busy (loading?) at shutdown; leaving them");
    }
}

/// How a replica's executor gets its starting state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Begin {
    /// Load the partition from the seed (a cluster starting).
    Load,
    /// Rejoin a running cluster (`glass node --rejoin` or `--join`): copy a live replica, or
    /// recover from this node's own log (full stack).
    Rejoin,
}

/// What an executor's replica runs on (`wire::config::Mode`), with what only the
/// conventional stack needs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Storage {
    /// The lean kernel: active-active, or active-passive (`passive`).
    Lean { passive: bool },
    /// The conventional stack (`full-stack`).
    Full {
        /// Where the replica keeps its database and log.
        dir: PathBuf,
        /// Worker threads.
        workers: usize,
    },
}

impl Storage {
    fn of(config: &ClusterConfig, node: NodeId, partition: PartitionId) -> Storage {
        match &config.replication {
            Replication::ActiveActive => Storage::Lean { passive: false },
            Replication::ActivePassive { .. } => Storage::Lean { passive: true },
            Replication::FullStack { full_stack, .. } => Storage::Full {
                dir: config.run_dir.join(format!("node-{node}")).join(format!("p{partition}")),
                workers: full_stack.workers as usize,
            },
        }
    }

    fn mode(&self) -> Mode {
        match self {
            Storage::Lean { passive: false } => Mode::ActiveActive,
            Storage::Lean { passive: true } => Mode::ActivePassive,
            Storage::Full { .. } => Mode::FullStack,
        }
    }
}

/// One replica's thread: load, then execute the inbox in order.
struct Executor {
    node: NodeId,
    begin: Begin,
    config: ClusterConfig,
    /// This executor's own inbox, for the fetched copy.
    self_inbox: mpsc::Sender<Work>,
    storage: Storage,
    partition: PartitionConfig,
    seed: u64,
    pending_batches_max: usize,
    frame_bytes_max: usize,
    shared: Arc<ReplicaShared>,
    to_coordinator: mpsc::Sender<Outgoing>,
    /// The coordinator link's epoch this executor's messages belong to (see [`Outgoing`]).
    epoch: std::cell::Cell<u64>,
    /// Tool and peer connections that let their reply queue stay full for
    /// [`TOOL_REPLY_PATIENCE`]: their further replies are dropped at once (at most
    /// [`DEAF_TOOLS_MAX`] of each remembered).
    deaf_tools: std::cell::RefCell<Vec<mpsc::Sender<ToolReply>>>,
    deaf_peers: std::cell::RefCell<Vec<mpsc::Sender<PeerReply>>>,
    /// The copy of this replica under way, taken while it executes (docs/design.md §10,
    /// "Copying without stopping").
    copy: std::cell::RefCell<Option<copy::Copying>>,
    /// The copies under way that take a state digest (docs/design.md §10, "Checks during
    /// traffic"): one per batch that asked for one, while the previous is still under way
    /// (the engine copies one state at a time, so at most one of them steps the engine).
    digest_copies: std::cell::RefCell<Vec<copy::Copying>>,
    /// Tools' copies of a full-stack replica whose rebuilding thread still runs (it holds the
    /// page image and the rebuilt database while it streams): while one does, a tool's next
    /// copy waits, so tools that read slowly, or not at all, cannot pile up copies as large as
    /// the partition.
    tool_rebuilds: Arc<std::sync::atomic::AtomicUsize>,
    /// `limits.copy_share_pct`.
    copy_share_pct: u32,
    /// The node's runtime, where a copy's forwarder runs.
    runtime: tokio::runtime::Handle,
}

/// The replies of a channel an executor answers on (a tool's or a peer's), with the list of
/// its connections that stopped reading.
trait Reply: ChannelMessage {
    /// Whether the channel is a peer node's (else a tool's).
    const IS_PEER: bool;
    fn deaf(executor: &Executor) -> &std::cell::RefCell<Vec<mpsc::Sender<Self>>>;
}

impl Reply for ToolReply {
    const IS_PEER: bool = false;
    fn deaf(executor: &Executor) -> &std::cell::RefCell<Vec<mpsc::Sender<ToolReply>>> {
        &executor.deaf_tools
    }
}

impl Reply for PeerReply {
    const IS_PEER: bool = true;
    fn deaf(executor: &Executor) -> &std::cell::RefCell<Vec<mpsc::Sender<PeerReply>>> {
        &executor.deaf_peers
    }
}

/// Deaf tool connections an executor remembers; older ones are forgotten.
const DEAF_TOOLS_MAX: usize = 16;

impl Executor {
    /// Queues `msg` for a tool connection, waiting at most [`TOOL_REPLY_PATIENCE`] for room:
    /// a peer that does not read its replies (dead, hung or hostile) loses them (logged) and
    /// costs the executor — the partition's only thread — that long once, never more.
    fn reply_to<R: Reply>(&self, reply: &mpsc::Sender<R>, msg: R) {
        let mut deaf = R::deaf(self).borrow_mut();
        deaf.retain(|d| !d.is_closed());
        if deaf.iter().any(|d| d.same_channel(reply)) {
            return;
        }
        let deadline = Instant::now() + TOOL_REPLY_PATIENCE;
        let mut msg = msg;
        loop {
            match reply.try_send(msg) {
                Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => return,
                Err(mpsc::error::TrySendError::Full(m)) => {
                    if Instant::now() >= deadline {
                        warn!(
                            partition = self.partition.id,
                            message = m.name(),
                            patience_ms = TOOL_REPLY_PATIENCE.as_millis() as u64,
                            "a tool connection does not read its replies; its replies are dropped from now on"
                        );
                        if deaf.len() >= DEAF_TOOLS_MAX {
                            deaf.remove(0);
                        }
                        deaf.push(reply.clone());
                        return;
                    }
                    msg = m;
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
    }

    fn run(self, inbox: mpsc::Receiver<Work>) {
        let pid = self.partition.id;
        if let Ok(me) = std::fs::read_link("/proc/thread-self") {
            let path = PathBuf::from("/proc").join(me).join("schedstat");
            self.shared.schedstat.lock().unwrap_or_else(|e| e.into_inner()).push(path);
        }
        let (mode, pending) = (self.storage.mode(), self.pending_batches_max);
        let machine = match self.begin {
            Begin::Rejoin => {
                let (machine, effects) = Machine::rejoining(mode, self.node, pid, pending);
                let mut machine = machine.digesting_by_copy();
                info!(partition = pid, "asking the coordinator to rejoin");
                self.carry(&mut machine, effects);
                machine
            }
            Begin::Load => match self.load() {
                Ok(replica) => Machine::serving(mode, replica, pending).digesting_by_copy(),
                Err(reason) => Machine::failed(mode, self.node, pid, pending, reason),
            },
        };
        self.serve(machine, inbox);
    }

    /// Loads the partition from the seed, reporting progress and the outcome to the
    /// coordinator; why not, if it failed.
    fn load(&self) -> Result<Replica, String> {
        let pid = self.partition.id;
        let t0 = Instant::now();
        let mut last_logged_rows = 0u64;
        let (node, mode, seed, pending) = (self.node, self.storage.mode(), self.seed, self.pending_batches_max);
        let (dir, workers) = match &self.storage {
            Storage::Full { dir, workers } => (dir.as_path(), *workers),
            Storage::Lean { .. } => (std::path::Path::new(""), 0),
        };
        let loaded = Replica::load_for(mode, node, &self.partition, seed, pending, dir, workers, &mut |p| {
            let state = LoadState::Loading { rows_loaded: p.rows_loaded, rows_total: p.rows_total };
            self.shared.load.send_replace(state);
            // Progress may be dropped when the link is backed up; the final state is not.
            let _ = self
                .to_coordinator
                .try_send((self.epoch.get(), Emit::ToCoordinator(Replica::progress_message(pid, p))));
            if p.rows_loaded - last_logged_rows >= 250_000 || p.rows_loaded == p.rows_total {
                last_logged_rows = p.rows_loaded;
                debug!(partition = pid, rows_loaded = p.rows_loaded, rows_total = p.rows_total, "loading");
            }
        });
        let mut replica = match loaded {
            Ok(r) => r,
            Err(e) => {
                error!(partition = pid, error = %e, "load failed");
                let state = LoadState::Failed { reason: wire::messages::bounded_reason(e.to_string()) };
                self.shared.load.send_replace(state.clone());
                let failed = NodeToCoordinator::LoadStatus { partition: pid, state };
                self.emit(Emit::ToCoordinator(failed));
                return Err(format!("failed to load: {e}"));
            }
        };
        // From here on tables grow: keep their next pages faulted in off this thread.
        engine::arena::set_prefault(true);
        if let Store::Full(f) = replica.store_mut() {
            self.shared.schedstat.lock().unwrap_or_else(|e| e.into_inner()).extend(f.worker_schedstats());
        }
        let ready = replica.ready_message();
        if let NodeToCoordinator::LoadStatus { state, .. } = &ready {
            if let LoadState::Ready { digest } = state {
                info!(
                    partition = pid,
                    warehouses = ?self.partition.warehouses.range(),
                    seconds = t0.elapsed().as_secs_f64(),
                    digest = %digest,
                    "replica loaded"
                );
            }
            self.shared.load.send_replace(state.clone());
        }
        self.emit(Emit::ToCoordinator(ready));
        Ok(replica)
    }

    /// Carries out the inbox in order until stopped: the machine decides, this performs. A
    /// copy under way moves on between two pieces of work (its share of the executor's time)
    /// and whenever the inbox is empty.
    fn serve(&self, mut machine: Machine, mut inbox: mpsc::Receiver<Work>) {
        let pid = self.partition.id;
        // Snapshot, digest and log base requests waiting for the replica to reach their batch.
        let mut deferred: Vec<Work> = Vec::new();
        loop {
            let work = if self.copy_can_move() || machine.catching_up() {
                match inbox.try_recv() {
                    Ok(w) => w,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        // Nothing waits: catch up, or copy, at full speed.
                        if machine.catching_up() {
                            // The inbox is empty: once nothing is held either, it is caught up.
                            let effects = machine.catch_up(CATCH_UP_SLICE_IDLE, true);
                            self.carry(&mut machine, effects);
                        }
                        self.copy_step(&mut machine, false, &mut deferred);
                        continue;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                }
            } else {
                match inbox.blocking_recv() {
                    Some(w) => w,
                    None => break,
                }
            };
            if let Work::Stop = work {
                break;
            }
            let woken = matches!(work, Work::CopyRoom);
            let (what, t0) = (work.name(), Instant::now());
            if !woken {
                // A catching-up replica takes what waits in its inbox first (held, cheaply)
                // and catches up once it is empty: a full inbox would hold up the node's
                // reader, and with it the node's other partitions.
                self.on_work(&mut machine, work, &mut deferred);
                self.retry_deferred(&mut machine, &mut deferred);
            }
            if woken && !deferred.is_empty() {
                // A tool's rebuilding thread may have ended.
                self.retry_deferred(&mut machine, &mut deferred);
            }
            let worked = t0.elapsed();
            if what == "Batch" {
                self.shared.batch_seconds.observe(worked);
            }
            self.copy_step(&mut machine, !woken, &mut deferred);
            self.free_copy_leftovers(&mut machine);
            self.publish(&mut machine);
            let took = t0.elapsed();
            if took >= SLOW_WORK {
                // Every batch of the partition waits meanwhile: an operator's first clue to a
                // stall (docs/design.md §10).
                warn!(
                    partition = pid,
                    ms = took.as_millis() as u64,
                    work_ms = worked.as_millis() as u64,
                    what,
                    "the executor took long over one piece of work"
                );
            }
        }
        if let Some(replica) = machine.replica() {
            let stats = replica.stats();
            info!(
                partition = pid,
                batches = stats.batches_executed,
                committed = stats.txns_committed,
                aborted = stats.txns_aborted,
                failed = stats.txns_failed,
                "executor finished"
            );
        }
    }

    /// Once a copy is over, frees a little of what it kept (a few maps and segments a piece of
    /// work: freed at once, or on a thread of their own, they stalled the node's partitions;
    /// docs/design.md §10, "Copying without stopping").
    fn free_copy_leftovers(&self, machine: &mut Machine) {
        if self.copying() {
            return;
        }
        if let Some(Store::Lean(db)) = machine.replica_mut().map(Replica::store_mut) {
            if db.has_copy_leftovers() {
                db.free_copy_leftovers();
            }
        }
    }

    /// Whether a copy under way can move now (not waiting for room or for a batch to end).
    fn copy_can_move(&self) -> bool {
        self.copy.borrow().as_ref().is_some_and(|c| c.can_move())
            || self.digest_copies.borrow().iter().any(copy::Copying::can_move)
    }

    /// Whether a copy of the replica is under way (a requester's or a digest's).
    fn copying(&self) -> bool {
        self.copy.borrow().is_some() || !self.digest_copies.borrow().is_empty()
    }

    /// Moves the copy under way on by a step (`under_load`: keeping to its share); once it is
    /// over, the requests deferred behind it are looked at again.
    fn copy_step(&self, machine: &mut Machine, under_load: bool, deferred: &mut Vec<Work>) {
        let over = match self.copy.borrow_mut().as_mut() {
            Some(task) => {
                let before = task.sent_bytes();
                let step = task.step(machine.replica_mut(), under_load);
                self.shared.copy_sent_bytes.fetch_add(task.sent_bytes() - before, Ordering::Relaxed);
                step == copy::Step::Over
            }
            None => false,
        };
        if over {
            self.copy.borrow_mut().take();
        }
        let digests_before = self.digest_copies.borrow().len();
        self.digest_copies
            .borrow_mut()
            .retain_mut(|task| task.step(machine.executing_replica_mut(), under_load) != copy::Step::Over);
        if over || self.digest_copies.borrow().len() < digests_before {
            self.retry_deferred(machine, deferred);
        }
    }

    /// Carries out the deferred requests that can be answered now.
    fn retry_deferred(&self, machine: &mut Machine, deferred: &mut Vec<Work>) {
        let (ready, waiting): (Vec<_>, Vec<_>) =
            std::mem::take(deferred).into_iter().partition(|w| self.can_answer(machine, w));
        *deferred = waiting;
        for w in ready {
            self.on_work(machine, w, deferred);
        }
    }

    /// Whether `w` can be answered now: as the machine says, and a copy only once the copy
    /// under way (one at a time) is over.
    fn can_answer(&self, machine: &Machine, w: &Work) -> bool {
        let copying = matches!(asked(w), Asked::Snapshot { .. } | Asked::Digest) && self.copying();
        let tool_rebuilding = matches!(w, Work::Tool { req: ToolRequest::SnapshotRequest { .. }, .. })
            && self.tool_rebuilds.load(std::sync::atomic::Ordering::SeqCst) > 0;
        !copying && !tool_rebuilding && machine.can_answer(asked(w))
    }

    /// One piece of work: to the machine, or (a tool's or a peer's request) answered from the
    /// replica now, deferred until it can be, or refused.
    fn on_work(&self, machine: &mut Machine, work: Work, deferred: &mut Vec<Work>) {
        if let Work::Peer { req: PeerRequest::SnapshotRequest { .. }, .. } = &work {
            self.preempt_tool_copy(machine);
        }
        let effects = match work {
            Work::Stop | Work::CopyRoom => return,
            Work::Coordinator(msg) => machine.on_coordinator(msg),
            Work::Fetched { source, fetched } => machine.on_fetched(source, *fetched),
            Work::Rejoin { only_if_serving: true, .. } if !machine.rejoins_when_left_out() => {
                return;
            }
            Work::Rejoin { epoch, .. } => {
                self.epoch.set(epoch);
                *self.shared.stopped.lock().unwrap_or_else(|e| e.into_inner()) = None;
                self.shared.load.send_replace(LoadState::Loading { rows_loaded: 0, rows_total: 0 });
                let pid = self.partition.id;
                let (fresh, effects) =
                    Machine::rejoining(self.storage.mode(), self.node, pid, self.pending_batches_max);
                let fresh = fresh.digesting_by_copy();
                // The old state (a full stack's database and workers) goes first.
                drop(std::mem::replace(machine, fresh));
                info!(partition = pid, epoch, "rejoining (the coordinator counted this replica failed)");
                effects
            }
            Work::Peer { req: PeerRequest::Ship(shipment), reply } => machine.on_shipment(shipment, reply),
            w if !self.can_answer(machine, &w) => {
                if deferred.len() < DEFERRED_MAX {
                    deferred.push(w);
                    return;
                }
                let reason = format!("busy: {DEFERRED_MAX} requests already wait for the replica's copy to end");
                match &w {
                    Work::Tool { req, reply } => self.refuse_tool(req, &reason, reply),
                    Work::Peer { req, reply } => self.refuse_peer(req, &reason, reply),
                    _ => {}
                }
                return;
            }
            Work::Tool { req, reply } => {
                match machine.refusal() {
                    Some(reason) => self.refuse_tool(&req, &reason, &reply),
                    None => {
                        let replica = machine.replica_mut().expect("no refusal: the replica serves");
                        self.tool(replica, req, &reply)
                    }
                }
                return;
            }
            Work::Peer { req, reply } => {
                match machine.refusal() {
                    Some(reason) => self.refuse_peer(&req, &reason, &reply),
                    None => {
                        let replica = machine.replica_mut().expect("no refusal: the replica serves");
                        self.peer(replica, req, &reply)
                    }
                }
                return;
            }
        };
        self.carry(machine, effects);
    }

    /// Performs the machine's effects, handing it the outcome of those that have one (a
    /// restart recovery runs here, on the executor thread; a fetch on a thread of its own).
    fn carry(&self, machine: &mut Machine, effects: Vec<Effect<mpsc::Sender<PeerReply>>>) {
        // The batches the call executed may have begun a digest copy: taken now, before any
        // further batch runs.
        self.carry_digest_copy(machine);
        let pid = self.partition.id;
        let mut queue: std::collections::VecDeque<_> = effects.into();
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Emit(m) => self.emit(m),
                Effect::Reply { to, msg } => self.reply_to(&to, msg),
                Effect::Fetch { source, after_seq, kind, delay_ms, retrying } => {
                    match retrying {
                        None => info!(
                            partition = pid,
                            source,
                            after_seq,
                            ?kind,
                            "fetching the starting state from a live replica"
                        ),
                        Some(error) => warn!(partition = pid, source, error, "copy rejected; fetching it again"),
                    }
                    self.fetch(source, after_seq, kind, delay_ms);
                }
                Effect::Recover { restart } => {
                    let recovered = self.restart_recovery(&restart);
                    queue.extend(machine.on_recovered(recovered));
                }
                Effect::Ready { digest, start } => {
                    engine::arena::set_prefault(true);
                    match start {
                        Began::Copy { seq, held } => info!(
                            partition = pid,
                            seq,
                            replayed = held,
                            "copy installed; caught up on the batches sent meanwhile"
                        ),
                        Began::LogBase { seq, bytes, image_bytes, held } => info!(
                            partition = pid,
                            seq,
                            mib = bytes as f64 / (1 << 20) as f64,
                            image_mib = image_bytes as f64 / (1 << 20) as f64,
                            held,
                            "the primary's log base applied; the shipments held applied"
                        ),
                        Began::OwnLog { from_seq } => {
                            info!(partition = pid, from_seq, "serving the recovered partition")
                        }
                    }
                    info!(partition = pid, start_digest = %digest, "rejoined");
                    self.shared.load.send_replace(LoadState::Ready { digest });
                    self.publish(machine);
                }
                Effect::Failed { reason } => {
                    error!(partition = pid, reason = %reason, "the partition cannot rejoin");
                    let state = LoadState::Failed { reason: wire::messages::bounded_reason(reason) };
                    self.shared.load.send_replace(state);
                }
                Effect::Stopped { reason } => {
                    error!(partition = pid, reason, "replica stopped");
                    *self.shared.stopped.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
                }
                Effect::Refused { error, rejoining } => {
                    error!(partition = pid, error = %error, rejoining, "replica refused a message")
                }
            }
        }
    }

    /// Sends `m` to the writer task, under this executor's link epoch.
    fn emit(&self, m: Emit) {
        if self.to_coordinator.blocking_send((self.epoch.get(), m)).is_err() {
            debug!(partition = self.partition.id, "the coordinator link is gone; message dropped");
        }
    }

    /// Fetches the starting state of a rejoin from node `source` after `delay_ms`, on a
    /// thread of its own (so this node's heartbeats go on), its result arriving in this
    /// executor's inbox.
    fn fetch(&self, source: NodeId, after_seq: Seq, kind: FetchKind, delay_ms: u64) {
        let (config, me, pid) = (self.config.clone(), self.node, self.partition.id);
        let shared = self.shared.clone();
        let inbox = self.self_inbox.clone();
        let spawned = std::thread::Builder::new().name(format!("fetch-p{pid}")).spawn(move || {
            std::thread::sleep(Duration::from_millis(delay_ms));
            let fetch = async move {
                let mut link = dial_peer(&config, me, source).await?;
                Ok(match kind {
                    FetchKind::Copy => {
                        let mut db = engine::LeanDb::new();
                        let info = snapshot::snapshot_after::<PeerChannel>(
                            &mut link,
                            pid,
                            after_seq,
                            &mut db,
                            &[],
                            &shared.copy_received_bytes,
                        )
                        .await?;
                        Fetched::Copy { db: Box::new(db), info }
                    }
                    FetchKind::LogBase | FetchKind::BaseBackup => {
                        let image = kind == FetchKind::BaseBackup;
                        let received = &shared.copy_received_bytes;
                        Fetched::LogBase(snapshot::log_base(&mut link, pid, after_seq, image, received).await?)
                    }
                })
            };
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(RejoinError::Thread)
                .and_then(|rt| rt.block_on(fetch));
            let _ = inbox.blocking_send(Work::Fetched { source, fetched: Box::new(result) });
        });
        if let Err(e) = spawned {
            let failed = Box::new(Err(RejoinError::Thread(e)));
            let _ = self.self_inbox.try_send(Work::Fetched { source, fetched: failed });
        }
    }

    /// Publishes the replica's figures for status requests.
    fn publish(&self, machine: &mut Machine) {
        let Some(replica) = machine.replica_mut() else { return };
        let sh = &self.shared;
        *sh.role.lock().unwrap_or_else(|e| e.into_inner()) = replica.role();
        sh.applied_seq.store(replica.applied_seq(), Ordering::Relaxed);
        let stats = replica.stats();
        sh.committed.store(stats.txns_committed, Ordering::Relaxed);
        sh.aborted.store(stats.txns_aborted, Ordering::Relaxed);
        sh.failed.store(stats.txns_failed, Ordering::Relaxed);
        sh.applied_bytes.store(replica.applied_bytes(), Ordering::Relaxed);
        if let Store::Full(f) = replica.store_mut() {
            let (bytes, fsyncs) = f.log_counters();
            sh.log_bytes.store(bytes, Ordering::Relaxed);
            sh.fsyncs.store(fsyncs, Ordering::Relaxed);
        }
    }

    /// Restart recovery of this replica's full-stack database (after cutting its log at
    /// `cut`), timed and logged; why not, if it failed.
    fn restart_recovery(&self, restart: &Restart) -> Result<crate::fullstack::FullStack, RejoinError> {
        let pid = self.partition.id;
        let Storage::Full { dir, workers } = &self.storage else {
            let what = "restart recovery (the lean kernel keeps no log)";
            return Err(RejoinError::Recovery(crate::error::ReplicaError::Unexpected { what }));
        };
        let t0 = Instant::now();
        match restart {
            Restart::OwnLog => {
                info!(partition = pid, dir = %dir.display(), "restart recovery from the write-ahead log")
            }
            Restart::FollowBase { cut, start } => info!(
                partition = pid,
                dir = %dir.display(),
                cut = ?Some(cut),
                base_start_lsn = start,
                "restart recovery from the write-ahead log, cut to follow the primary's log base"
            ),
            Restart::Image(image) => info!(
                partition = pid,
                dir = %dir.display(),
                image_mib = image.len() as f64 / (1 << 20) as f64,
                "installing the primary's checkpoint image (this node's own log cannot follow its log base)"
            ),
        }
        let medium = engine::conventional::Medium::Dir(dir.clone());
        let (f, cut) =
            crate::fullstack::FullStack::restart_on(medium, *workers, restart).map_err(RejoinError::Recovery)?;
        let r = f.recovery_report();
        info!(
            partition = pid,
            seconds = t0.elapsed().as_secs_f64(),
            log_records = r.log_records,
            redone = r.redone,
            committed_txns = r.winners,
            rolled_back_txns = r.losers,
            undone = r.undone,
            torn_tail = r.truncated_tail,
            records_cut = cut.map_or(0, |c| c.records_cut),
            bytes_cut = cut.map_or(0, |c| c.bytes_cut),
            "recovered from the write-ahead log"
        );
        self.shared.schedstat.lock().unwrap_or_else(|e| e.into_inner()).extend(f.worker_schedstats());
        Ok(f)
    }
}

/// Sends `msgs` to `reply` from a thread of its own (a snapshot or a log base: the executor
/// goes on meanwhile).
fn send_from_thread<R: Send + 'static>(name: String, msgs: Vec<R>, reply: mpsc::Sender<R>) {
    let sender = std::thread::Builder::new().name(name.clone()).spawn(move || {
        for m in msgs {
            if reply.blocking_send(m).is_err() {
                return;
            }
        }
    });
    if let Err(e) = sender {
        error!(thread = name, error = %e, "cannot start the thread sending a transfer");
    }
}

/// A link from node `me` to node `source`, on the peer channel (snapshot and log base
/// requests).
async fn dial_peer(config: &ClusterConfig, me: NodeId, source: NodeId) -> Result<endpoint::Link, RejoinError> {
    let address = config.node(source).map(|n| n.address.clone()).ok_or(RejoinError::UnknownNode { node: source })?;
    let server_name = split_address(&address)
        .map(|(h, _)| h.to_string())
        .map_err(|problem| RejoinError::Address { node: source, problem })?;
    let addr = wire::config::resolve(&format!("nodes[{source}].address"), &address)?;
    let tls = wire::tls::client_config(&config.cert_dir, wire::tls::Role::Node(me))?;
    let peer = wire::tls::Role::Node(source);
    let limits = EndpointLimits::from_config(config);
    Ok(endpoint::connect_to(peer, addr, &server_name, tls, node_hello(config, me), limits).await?)
}

/// What `work` asks of the replica, as far as answering it now is concerned.
fn asked(work: &Work) -> Asked {
    match work {
        Work::Tool { req: ToolRequest::SnapshotRequest { after_seq, .. }, .. }
        | Work::Peer { req: PeerRequest::SnapshotRequest { after_seq, .. }, .. } => {
            Asked::Snapshot { after_seq: *after_seq }
        }
        Work::Tool { req: ToolRequest::DigestRequest { .. }, .. } => Asked::Digest,
        Work::Peer { req: PeerRequest::LogBaseRequest { after_seq, .. }, .. } => {
            Asked::LogBase { after_seq: *after_seq }
        }
        Work::Tool {
            req: ToolRequest::ReplicaRead { .. } | ToolRequest::StatusRequest { .. } | ToolRequest::Shutdown { .. },
            ..
        }
        | Work::Peer { req: PeerRequest::Ship(_), .. }
        | Work::Coordinator(_)
        | Work::Fetched { .. }
        | Work::Rejoin { .. }
        | Work::CopyRoom
        | Work::Stop => Asked::Other,
    }
}

/// Why one attempt to dial a coordinator or a peer node made no link.
#[derive(Debug)]
enum DialFailure {
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
async fn dial_once(
    node: &Node,
    peer: wire::tls::Role,
    what: &str,
    address: &str,
    attempt: u32,
) -> Result<Link, DialFailure> {
    let server_name = split_address(address).map(|(h, _)| h.to_string()).unwrap_or_default();
    let tls = match wire::tls::client_config(&node.config.cert_dir, wire::tls::Role::Node(node.id)) {
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
        wire::tls::Role::Coordinator(_) => EndpointLimits::to_coordinator(&node.config),
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

/// Dials backup node `address`, retrying every [`CONNECT_RETRY_MS`] until it answers, refuses
/// this node (`None`) or the node stops. (Coordinators are dialed when the node machine says
/// so: [`coordinator_link`].)
async fn dial_backup(node: &Node, peer: NodeId, what: &str, address: &str) -> Option<Link> {
    let mut attempt = 0u32;
    loop {
        match dial_once(node, wire::tls::Role::Node(peer), what, address, attempt).await {
            Ok(link) => return Some(link),
            Err(DialFailure::Refused | DialFailure::Stopped) => return None,
            Err(DialFailure::Unreachable) => attempt = attempt.wrapping_add(1),
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(CONNECT_RETRY_MS)) => {}
            () = node.stopped() => return None,
        }
    }
}

/// One coordinator link's sending queue (its task sends what is queued, in order).
#[derive(Debug)]
struct LinkOutbox {
    /// The link's serial number: a broken link's task removes only its own queue.
    conn: u64,
    out: mpsc::Sender<NodeToCoordinator>,
}

/// Keeps a link to every coordinator of `cluster.toml` (the node machine says which leads;
/// docs/design.md §11), and the writer task that sends through them: the executors' messages
/// (through the node machine's ship gates), backups' acknowledgements and heartbeats.
async fn coordinator_links(
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
        let link = match dial_once(&node, wire::tls::Role::Coordinator(u16::from(c)), &field, &address, failed).await {
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
        match link.tether_key() {
            Some(key) => {
                let tether = hold_tether(node.id, c, link.remote_address(), key, link_ended, node.stopping.subscribe());
                tokio::spawn(tether);
            }
            None => debug!(coordinator = c, "the link's TLS session exports no key; no liveness tether"),
        }
        let (mut sender, mut receiver) = link.split();
        let (out, out_rx) = mpsc::channel(LINK_OUTBOX_MAX);
        node.links.lock().unwrap_or_else(|e| e.into_inner()).insert(c, LinkOutbox { conn, out });
        let effects = node.machine().on_link_up(c, micros(&node));
        let rejoin = effects.contains(&NodeEffect::RejoinAll);
        if rejoin {
            let epoch = node.epoch.fetch_add(1, Ordering::SeqCst) + 1;
            warn!(epoch, "the coordinator link is back; every partition rejoins");
        }
        node.first_link.send_replace(true);
        let stopped = tokio::select! {
            () = read_from_coordinator(&node, c, &mut receiver, rejoin) => false,
            () = send_queued(&node, c, &mut sender, out_rx) => false,
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
/// stopped). A node that is stopping keeps it [`TETHER_STOP_LINGER`] longer: its link's
/// clean close must reach the coordinator first. Failing to open it costs nothing but the
/// faster detection (logged at debug).
async fn hold_tether(
    me: NodeId,
    c: CoordinatorId,
    addr: SocketAddr,
    key: wire::tether::TetherKey,
    mut link_ended: tokio::sync::oneshot::Receiver<()>,
    stopping: watch::Receiver<bool>,
) {
    let header = wire::tether::Header { node: me, key };
    let mut stream = tokio::select! {
        opened = wire::tether::open(addr, &header, TETHER_OPEN_TIMEOUT) => match opened {
            Ok(s) => s,
            Err(e) => {
                debug!(coordinator = c, error = %e, "no liveness tether; the coordinator relies on heartbeats");
                return;
            }
        },
        _ = &mut link_ended => return,
    };
    debug!(coordinator = c, %addr, "liveness tether up");
    tokio::select! {
        cut = wire::tether::cut(&mut stream) => {
            debug!(coordinator = c, end = ?cut, "the coordinator ended the liveness tether");
            return;
        }
        _ = &mut link_ended => {}
    }
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
/// node machine, to its partition's executor (after, when the only coordinator's link came
/// back, every executor was told to rejoin).
async fn read_from_coordinator(node: &Node, c: CoordinatorId, receiver: &mut endpoint::LinkReceiver, rejoin: bool) {
    if rejoin {
        let epoch = node.epoch.load(Ordering::SeqCst);
        for r in node.replicas.values() {
            if r.inbox.send(Work::Rejoin { epoch, only_if_serving: false }).await.is_err() {
                return;
            }
        }
    }
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
        let effects = node.machine().on_coordinator(c, epoch, msg);
        let mut for_writer = Vec::new();
        for effect in effects {
            match effect {
                NodeEffect::ToPartition { partition, msg } => {
                    let r = &node.replicas[&partition];
                    if r.deliver(partition, "coordinator", Work::Coordinator(msg)).await.is_err() {
                        return;
                    }
                }
                NodeEffect::Rejoin { partition } => {
                    warn!(partition, "left out of the partition's membership; the replica rejoins");
                    let epoch = node.epoch.load(Ordering::SeqCst);
                    let work = Work::Rejoin { epoch, only_if_serving: true };
                    if let Some(r) = node.replicas.get(&partition) {
                        if r.inbox.send(work).await.is_err() {
                            return;
                        }
                    }
                }
                NodeEffect::Shutdown { reason } => {
                    info!(reason = %reason, "the coordinator shuts the cluster down");
                    node.stop("the coordinator said so");
                    return;
                }
                NodeEffect::NotHeld { partition, name } => {
                    warn!(partition, message = name, "message for a partition this node does not hold; ignored")
                }
                other => for_writer.push(other),
            }
        }
        if !for_writer.is_empty() && node.events.send(OutboxEvent::Effects(for_writer)).await.is_err() {
            return;
        }
    }
}

/// The writer task: executors' messages (results held by the ship gates in sync shipping,
/// shipments to the backups' links), backups' acknowledgements, and heartbeats, each through
/// the node machine, to the coordinator links.
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
        let effects: Vec<NodeEffect> = tokio::select! {
            up = first.changed(), if !linked => {
                linked = up.is_err() || *first.borrow();
                continue;
            }
            m = from_executors.recv(), if linked => match m {
                // A message of an executor not yet told the link came back: lost with the link.
                Some((epoch, _)) if epoch < node.epoch.load(Ordering::SeqCst) => continue,
                Some((_, emitted)) => node.machine().on_emit(emitted, micros(node)),
                None => return,
            },
            e = events.recv() => match e {
                Some(OutboxEvent::Ack { from, partition, seq }) => node.machine().on_ack(from, partition, seq, micros(node)),
                Some(OutboxEvent::Effects(effects)) => effects,
                None => return,
            },
            () = &mut wake => {
                let late = wake.deadline().elapsed();
                if late >= SLOW_WORK {
                    // The coordinators hear nothing from this node meanwhile.
                    warn!(ms = late.as_millis() as u64, "the node's writer was held up past its deadline (a link's queue full, or its threads starved)");
                }
                let applied = |p: PartitionId| node.replicas.get(&p).map(|r| r.shared.applied_seq.load(Ordering::Relaxed));
                let now = micros(node);
                let mut machine = node.machine();
                let effects = machine.tick(now, applied);
                let next = Duration::from_micros(machine.next_deadline_us().saturating_sub(now)).min(period);
                drop(machine);
                wake.as_mut().reset(tokio::time::Instant::now() + next);
                effects
            }
        };
        perform(node, effects).await;
    }
}

/// Carries out the node machine's effects on the writer's side. A message for a coordinator
/// whose link is down is dropped (lost with the link, as the node machine expects).
async fn perform(node: &Node, effects: Vec<NodeEffect>) {
    let mut queue: std::collections::VecDeque<NodeEffect> = effects.into();
    while let Some(effect) = queue.pop_front() {
        match effect {
            NodeEffect::ToCoordinator { coordinator, msg } => {
                let out = node.links.lock().unwrap_or_else(|e| e.into_inner()).get(&coordinator).map(|l| l.out.clone());
                if let Some(out) = out {
                    // An error: the link's task ended (it broke); the message is lost with it.
                    let _ = out.send(msg).await;
                }
            }
            NodeEffect::Ship { backups, shipment } => {
                let partition = shipment.partition;
                let (lost, queued) = ship(node, &backups, shipment);
                for (backup, n) in queued {
                    queue.extend(node.machine().on_peer_queue(backup, partition, n, PEER_OUTBOX_MAX, micros(node)));
                }
                for backup in lost {
                    queue.extend(node.machine().on_backup_lost(backup));
                }
                publish_gates(node);
            }
            NodeEffect::OpenPeer { backup } => open_peer(node, backup),
            NodeEffect::Shutdown { reason } => {
                info!(reason = %reason, "the coordinator shuts the cluster down");
                node.stop("the coordinator said so");
            }
            NodeEffect::NotHeld { partition, name } => {
                warn!(partition, message = name, "message for a partition this node does not hold; ignored")
            }
            NodeEffect::Dial { coordinator } => {
                // The link's task waits for this (a stored permit if it is still dialing).
                if let Some(due) = node.dial_due.get(&coordinator) {
                    due.notify_one();
                }
            }
            // Carried by the reader (rejoins) and the link task (a link that came back).
            NodeEffect::Rejoin { .. } | NodeEffect::ToPartition { .. } | NodeEffect::RejoinAll => {}
        }
    }
}

/// Microseconds since the node started (the node machine's clock).
fn micros(node: &Node) -> u64 {
    node.started.elapsed().as_micros() as u64
}

/// Queues an encoded shipment for each of `backups`; returns those whose queue is full or
/// whose link task ended (the machine drops them from shipping), and how many shipments
/// each of the others' queue holds now.
fn ship(node: &Node, backups: &[NodeId], shipment: Shipment) -> (Vec<NodeId>, Vec<(NodeId, usize)>) {
    let (partition, seq) = (shipment.partition, shipment.seq);
    let frame = match wire::codec::encode(&PeerRequest::Ship(shipment), node.config.limits.frame_bytes_max as usize) {
        Ok(frame) => Arc::new(frame),
        Err(e) => {
            error!(partition, seq, error = %e, "cannot encode a shipment; backups dropped");
            return (backups.to_vec(), Vec::new());
        }
    };
    let peers = node.peers.lock().unwrap_or_else(|e| e.into_inner());
    let (mut lost, mut queued) = (Vec::new(), Vec::new());
    let mut sent = 0u64;
    for &backup in backups {
        let peer = peers.get(&backup);
        match peer.map(|p| p.try_send(frame.clone())) {
            Some(Ok(())) => {
                sent += 1;
                queued.extend(peer.map(|p| (backup, p.max_capacity() - p.capacity())));
            }
            Some(Err(mpsc::error::TrySendError::Full(_))) => {
                error!(partition, backup, limit = PEER_OUTBOX_MAX, "backup too far behind; no longer shipped to");
                lost.push(backup);
            }
            _ => {
                error!(partition, backup, "the link to the backup is gone; no longer shipped to");
                lost.push(backup);
            }
        }
    }
    if let Some(r) = node.replicas.get(&partition) {
        r.shared.shipped_bytes.fetch_add(sent * frame.len() as u64, Ordering::Relaxed);
    }
    (lost, queued)
}

/// A new link to backup node `backup` (replacing any older one).
fn open_peer(node: &Node, backup: NodeId) {
    let (tx, rx) = mpsc::channel(PEER_OUTBOX_MAX);
    node.peers.lock().unwrap_or_else(|e| e.into_inner()).insert(backup, tx);
    let Some(me) = node.me.upgrade() else { return };
    tokio::spawn(peer_link(me, backup, rx));
}

/// Copies the gates' lag figures to their replicas' shared state.
fn publish_gates(node: &Node) {
    let machine = node.machine();
    for (&partition, r) in &node.replicas {
        // No gate (no longer a primary, or its backups dropped): nothing lags behind it now.
        let st = machine.gate_stats(partition).unwrap_or_default();
        r.shared.acks.store(st.acks, Ordering::Relaxed);
        r.shared.ack_delay_us_sum.store(st.ack_delay_us_sum, Ordering::Relaxed);
        r.shared.ack_delay_us_max.store(st.ack_delay_us_max, Ordering::Relaxed);
    }
}

/// The link to backup node `peer`: dials it, sends the shipments queued on `rx`, and hands
/// its acknowledgements to the writer task.
async fn peer_link(node: Arc<Node>, peer: NodeId, mut rx: mpsc::Receiver<Arc<Vec<u8>>>) {
    let Some(address) = node.config.node(peer).map(|n| n.address.clone()) else { return };
    let what = format!("nodes[{peer}].address");
    let Some(link) = dial_backup(&node, peer, &what, &address).await else { return };
    info!(backup = peer, %address, "shipping to backup");
    let (mut sender, mut receiver) = link.split();
    let events = node.events.clone();
    let reader = tokio::spawn(async move {
        loop {
            match receiver.recv::<PeerReply>().await {
                Ok(Some(PeerReply::ShipAck { partition, seq })) => {
                    if events.send(OutboxEvent::Ack { from: peer, partition, seq }).await.is_err() {
                        return;
                    }
                }
                // This link asks for no transfer.
                Ok(Some(reply @ (PeerReply::SnapshotChunk(_) | PeerReply::LogBaseChunk(_)))) => {
                    warn!(backup = peer, message = reply.name(), "a backup sent a transfer piece unasked; ignored")
                }
                Ok(None) => return,
                Err(e) if e.is_protocol_violation() => {
                    warn!(backup = peer, error = %e, "the backup broke the protocol; its link is closed");
                    return;
                }
                Err(e) => {
                    debug!(backup = peer, error = %e, "the link to the backup ended");
                    return;
                }
            }
        }
    });
    loop {
        let frame = tokio::select! {
            f = rx.recv() => match f {
                Some(f) => f,
                None => break,
            },
            () = node.stopped() => break,
        };
        if let Err(e) = sender.send_encoded(&frame).await {
            if !*node.stopping.borrow() {
                error!(backup = peer, error = %e, "the link to the backup failed");
            }
            break;
        }
    }
    reader.abort();
}

/// Accepts tool connections until the node stops.
async fn serve_tools(node: Arc<Node>, mut listener: Listener) {
    let permits = Arc::new(Semaphore::new(TOOL_CONNECTIONS_MAX));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = node.stopped() => return,
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
        let hello = link.peer_hello().clone();
        if hello.role == Role::Coordinator {
            warn!(id = hello.id, "the coordinator does not connect to nodes; refused");
            tokio::spawn(link.refuse("only tools and primaries connect to a node"));
            continue;
        }
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            warn!(limit = TOOL_CONNECTIONS_MAX, "too many tool connections; refused");
            tokio::spawn(link.refuse("too many tool connections"));
            continue;
        };
        let node = node.clone();
        tokio::spawn(async move {
            match hello.role {
                Role::Node => serve_peer(node, link).await,
                Role::Client | Role::Coordinator => serve_tool(node, link).await,
            }
            drop(permit);
        });
    }
}

/// The writer of one connection's replies: sends what the queue returned holds until every
/// sender is gone, then finishes the stream.
fn reply_writer<R: ChannelMessage>(mut sender: endpoint::LinkSender) -> (mpsc::Sender<R>, tokio::task::JoinHandle<()>) {
    let (reply_tx, mut reply_rx) = mpsc::channel::<R>(TOOL_OUTBOX_MAX);
    let writer = tokio::spawn(async move {
        while let Some(m) = reply_rx.recv().await {
            if sender.send(&m).await.is_err() {
                return;
            }
        }
        sender.finish(Duration::from_secs(1)).await;
    });
    (reply_tx, writer)
}

/// The next request of a tool or peer connection, `None` once it ended, the node stops, or
/// the peer broke the protocol (logged at `warn`, naming it: its connection is closed).
async fn next_request<M: ChannelMessage>(node: &Node, receiver: &mut endpoint::LinkReceiver, peer: &str) -> Option<M> {
    let received = tokio::select! {
        r = receiver.recv::<M>() => r,
        () = node.stopped() => return None,
    };
    match received {
        Ok(m) => m,
        Err(e) if e.is_protocol_violation() => {
            warn!(peer, address = %receiver.remote_address(), error = %e, "a peer broke the protocol; its link is closed");
            None
        }
        Err(e) => {
            debug!(peer, error = %e, "link failed");
            None
        }
    }
}

/// Whether node's replica of `partition` can serve a copy or a digest: why not, if not.
fn not_ready(node: &Node, partition: PartitionId) -> Option<String> {
    let ready = node.replicas.get(&partition).map(|r| matches!(*r.shared.load.borrow(), LoadState::Ready { .. }));
    match ready {
        None => Some(format!("node {} holds no replica of partition {partition}", node.id)),
        Some(false) => Some(format!("the replica of partition {partition} is not loaded")),
        Some(true) => None,
    }
}

/// One peer node's connection (the peer channel): a primary's shipments, a rejoining node's
/// snapshot and log base requests.
async fn serve_peer(node: Arc<Node>, link: Link) {
    let from = link.peer_hello().id;
    let who = format!("node {from}");
    debug!(node = from, "peer node connected");
    let (sender, mut receiver) = link.split();
    let (reply_tx, writer) = reply_writer::<PeerReply>(sender);
    while let Some(req) = next_request::<PeerRequest>(&node, &mut receiver, &who).await {
        let partition = match &req {
            PeerRequest::Ship(shipment) => shipment.partition,
            PeerRequest::SnapshotRequest { partition, .. } | PeerRequest::LogBaseRequest { partition, .. } => {
                *partition
            }
        };
        let refusal = match &req {
            PeerRequest::Ship(_) if !node.replicas.contains_key(&partition) => {
                warn!(node = from, partition, "shipment for a partition this node does not hold; ignored");
                continue;
            }
            // The link's peer is authenticated (its certificate is its Hello's node): a
            // shipment naming another primary would slip past the backup's ship gate.
            PeerRequest::Ship(shipment) if shipment.primary != from => {
                warn!(node = from, partition, claimed = shipment.primary, "shipment claiming another primary; ignored");
                continue;
            }
            PeerRequest::Ship(_) => None,
            PeerRequest::SnapshotRequest { request_id, .. } => not_ready(&node, partition)
                .map(|reason| PeerReply::SnapshotChunk(snapshot::refusal(*request_id, partition, reason))),
            PeerRequest::LogBaseRequest { request_id, .. } => not_ready(&node, partition)
                .map(|reason| PeerReply::LogBaseChunk(snapshot::log_base_refusal(*request_id, partition, &reason))),
        };
        if let Some(refusal) = refusal {
            let _ = reply_tx.send(refusal).await;
            continue;
        }
        let r = &node.replicas[&partition];
        if r.deliver(partition, &who, Work::Peer { req, reply: reply_tx.clone() }).await.is_err() {
            break;
        }
    }
    drop(reply_tx);
    // Let queued replies (a snapshot's last chunks) go out.
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    debug!(node = from, "peer node disconnected");
}

/// One tool connection (the tool channel): status, digest and snapshot requests, replica
/// reads, shutdown.
async fn serve_tool(node: Arc<Node>, link: Link) {
    let client = link.peer_hello().id;
    let who = format!("client {client}");
    debug!(client, "tool connected");
    let (sender, mut receiver) = link.split();
    let (reply_tx, writer) = reply_writer::<ToolReply>(sender);
    while let Some(req) = next_request::<ToolRequest>(&node, &mut receiver, &who).await {
        let partition = match &req {
            ToolRequest::StatusRequest { request_id } => {
                let _ = reply_tx.send(ToolReply::StatusReply { request_id: *request_id, status: node.status() }).await;
                continue;
            }
            ToolRequest::Shutdown { reason } => {
                info!(client, reason = %reason, "shutdown requested by a tool");
                node.stop("a tool asked");
                break;
            }
            ToolRequest::ReplicaRead { request_id, partition, .. } if !node.replicas.contains_key(partition) => {
                let outcome = wire::messages::TxnOutcome::Failed {
                    reason: format!("node {} holds no replica of partition {partition}", node.id),
                };
                let (request_id, partition) = (*request_id, *partition);
                let reply =
                    ToolReply::ReplicaReadReply { request_id, partition, seq: 0, possibly_stale: false, outcome };
                let _ = reply_tx.send(reply).await;
                continue;
            }
            ToolRequest::ReplicaRead { partition, .. } => *partition,
            ToolRequest::DigestRequest { request_id, partition } => {
                if let Some(reason) = not_ready(&node, *partition) {
                    let outcome = DigestOutcome::Rejected(Rejection::InvalidInput { problem: reason });
                    let reply = ToolReply::DigestReply { request_id: *request_id, partition: *partition, outcome };
                    let _ = reply_tx.send(reply).await;
                    continue;
                }
                *partition
            }
            ToolRequest::SnapshotRequest { request_id, partition, .. } => {
                if let Some(reason) = not_ready(&node, *partition) {
                    let refusal = snapshot::refusal(*request_id, *partition, reason);
                    let _ = reply_tx.send(ToolReply::SnapshotChunk(refusal)).await;
                    continue;
                }
                *partition
            }
        };
        let r = &node.replicas[&partition];
        if r.inbox.send(Work::Tool { req, reply: reply_tx.clone() }).await.is_err() {
            break;
        }
    }
    drop(reply_tx);
    // Let queued replies (a snapshot's last chunks) go out.
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    debug!(client, "tool disconnected");
}
