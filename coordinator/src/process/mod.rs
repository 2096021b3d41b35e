//! The coordinator process (`glass coordinator --config … [--id N]`): a member of the
//! coordinator group ([`crate::member::Member`], docs/design.md §11; a single coordinator is a
//! group of one) that leads or stands by, driven by tokio and QUIC through the
//! [`Carrier`] it shares with the simulator (docs/design.md §14). It decides nothing itself: it
//! carries bytes, keeps time, stores the group's raft state and writes the replies the carrier
//! grouped (mini-redis's server shape: [`run`] takes a bound listener and a shutdown future).
//!
//! Shape — this file holds the process's bounds, its start ([`bind`], [`run`]), its clock, and
//! the state the core task owns; the rest is split by concern, each file stating what it owns
//! and guarantees:
//! - `connections`: one listener on the coordinator's address that nodes, clients and the
//!   other coordinators dial, the links to the other coordinators, and each link's reader and
//!   writer tasks — nothing one peer does may stall the core;
//! - `core_task`: the one *core* task that owns the state machine, takes every event from one
//!   bounded queue and carries out what the carrier asks of the links ([`Links`]);
//! - `tether`: the nodes' liveness tethers ([`wire::tether`]), which tell a killed node's end
//!   at once;
//! - `timer`: the thread that wakes the core at deadlines under tokio's millisecond
//!   resolution.
//!
//! Beside them:
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
//!
//! [`Links`]: crate::carrier::Links

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use foldhash::{HashMap, HashMapExt};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};
use wire::channel::{ClientToCoordinator, CoordinatorToClient, CoordinatorToCoordinator, NodeToCoordinator};
use wire::config::ClusterConfig;
use wire::endpoint::{self, EndpointLimits, Listener};
use wire::messages::{CoordinatorId, Hello, NodeId, PartitionId, PeerKind, PROTOCOL_VERSION};
use wire::tether::{Holder, TetherKey};

use crate::carrier::{Carrier, ConnId};
use crate::error::CoordinatorError;
use crate::leader::{ClientId, Detection};
use crate::store::{GroupStore, StoreError};

mod connections;
mod core_task;
mod tether;
mod timer;

use connections::{accept_loop, dial_peer_loop};
use tether::tether_accept_loop;
use timer::PreciseTimer;

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
/// How long a liveness tether may take to send its header and be matched to its holder's link.
pub const TETHER_HEADER_TIMEOUT: Duration = wire::tether::HEADER_TIMEOUT;
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
        role: PeerKind::Coordinator,
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
    let tls = wire::tls::server_config(&config.cert_dir, wire::tls::Identity::Coordinator(u16::from(me)))?;
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
        tether_key: Option<TetherKey>,
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
        /// The key its tether will present, when the peer dialled (it holds the tether).
        tether_key: Option<TetherKey>,
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
    /// The tether of the link `conn` to coordinator `peer` ended after it was accepted: the
    /// peer's process is gone (docs/design.md §11, "A leader's death").
    PeerDied {
        peer: CoordinatorId,
        conn: ConnId,
        how: String,
    },
    /// A liveness tether held by `holder` with `key`: the core answers with the connection it
    /// stands for, and a receiver that ends once the core forgets that connection — or
    /// `None` (not the key of the holder's current link, or that link has a tether already).
    Tether {
        holder: Holder,
        key: TetherKey,
        reply: oneshot::Sender<Option<(ConnId, oneshot::Receiver<()>)>>,
    },
    /// `holder`'s tether for connection `conn` ended: its process is gone.
    TetherCut {
        holder: Holder,
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
        client_tethers: HashMap::new(),
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
    /// The key the peer's liveness tether must present (`None`: this end dialled, and holds
    /// the tether itself, or the link has no key).
    tether_key: Option<TetherKey>,
    /// Held while the peer's tether is watched (as [`NodeOutbox::tether`]).
    tether: Option<oneshot::Sender<()>>,
}

/// A client link's liveness tether, as the core sees it: the client watches it to learn at
/// once that this coordinator died; the core only holds it.
#[derive(Debug)]
struct ClientTether {
    key: TetherKey,
    held: Option<oneshot::Sender<()>>,
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
    /// The keys of the clients' links, and their tethers once held.
    client_tethers: HashMap<ClientId, ClientTether>,
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
