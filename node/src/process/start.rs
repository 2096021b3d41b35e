//! The node's start and shutdown: [`bind`] takes the node's address; [`run`] starts the
//! replicas the node holds ([`Start`]: loaded from the seed, rejoined or joined), an executor
//! thread each, then the links to the coordinators and to the backups, the tool and peer
//! server and the metrics endpoint, and stops them when the node stops.
//!
//! Guarantees:
//! - a node not in `cluster.toml`, a node that holds no replica, and a `--join` of a partition
//!   the file does not have or the node already holds are refused before anything starts
//!   ([`NodeError`]);
//! - shutdown (the future passed in, a `Shutdown` message from the coordinator or a tool)
//!   stops accepting, closes the coordinator links with `CLOSE_NORMAL` — the coordinator
//!   reads a death notice, not a failure — waiting at most [`LINKS_CLOSE_WAIT`] for that,
//!   and keeps the tethers until the process ends (so the notice is read first), closes the
//!   other links, asks the executors to stop and waits for them at most
//!   `timeouts.shutdown_timeout_ms` (a replica still loading is not waited for).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};
use wire::config::{ClusterConfig, PartitionConfig};
use wire::endpoint::{self, EndpointLimits, Listener};
use wire::messages::{LoadState, NodeId, PartitionId};

use super::coordinator_links::coordinator_links;
use super::server::serve_tools;
use super::{
    node_hello, Begin, Executor, Node, Outgoing, ReplicaHandle, ReplicaShared, ReplicaStorage, Work,
    COORDINATOR_OUTBOX_MAX, LINKS_CLOSE_WAIT, OUTBOX_EVENTS_MAX, REPLICA_INBOX_MAX, TOOL_CONNECTIONS_MAX,
};
use crate::machine::NodeMachine;
use crate::replica::ReplicaRole;

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

/// Binds the node's listener on `address` (its `cluster.toml` address, or another local one)
/// with the node's certificate.
pub async fn bind(config: &ClusterConfig, id: NodeId, address: SocketAddr) -> Result<Listener, NodeError> {
    let hello = node_hello(config, id);
    let tls = wire::tls::server_config(&config.cert_dir, wire::tls::Identity::Node(id))?;
    let mut limits = EndpointLimits::from_config(config);
    limits.connections_max = TOOL_CONNECTIONS_MAX;
    Ok(endpoint::listen(address, tls, hello, limits).await?)
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
    // The pages the tables grow into once loaded (`growth_pages`; engine::arena says why).
    engine::arena::set_growth_pages(config.growth_pages);
    info!(
        node = id,
        partitions = ?partitions.iter().map(|p| p.id).collect::<Vec<_>>(),
        seed = config.seed,
        growth_pages = %config.growth_pages,
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
        link_generation: AtomicU64::new(0),
        links: Mutex::new(BTreeMap::new()),
        dial_due: config.coordinator_ids().into_iter().map(|c| (c, tokio::sync::Notify::new())).collect(),
        first_link: watch::Sender::new(false),
        peers: Mutex::new(BTreeMap::new()),
        me: me.clone(),
    });

    // A link to every node backing up a partition this node is primary of (nothing of it
    // waits: no coordinator link is up yet).
    let _ = super::coordinator_links::carry(&node, |m, _| m.start()).await;
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
        urgent_queued: Default::default(),
    });
    let (exit_tx, exit_rx) = tokio::sync::oneshot::channel::<()>();
    let executor = Executor {
        node: id,
        begin,
        config: config.clone(),
        self_inbox: inbox.clone(),
        storage: ReplicaStorage::of(config, id, p.id),
        partition: p.clone(),
        seed: config.seed,
        pending_batches_max: config.limits.replica_pending_batches_max as usize,
        frame_bytes_max: config.limits.frame_bytes_max as usize,
        shared: shared.clone(),
        to_coordinator: to_coordinator.clone(),
        link_generation: std::cell::Cell::new(0),
        deaf_tools: Default::default(),
        deaf_peers: Default::default(),
        copy: Default::default(),
        digest_copies: Default::default(),
        tool_rebuilds: Default::default(),
        copy_share_pct: config.limits.copy_share_pct,
        runtime: tokio::runtime::Handle::current(),
        fetches: Default::default(),
        started: Instant::now(),
    };
    // The node's k-th replica in the file's order (a partition joined besides them: by id)
    // takes the k-th of the node's CPUs when `cpus` pins it (crate::affinity).
    let k = config.partitions_on_node(id).position(|q| q.id == p.id).unwrap_or(usize::from(p.id));
    std::thread::Builder::new()
        .name(format!("replica-p{}", p.id))
        .spawn(move || {
            match crate::affinity::pin_executor(k) {
                Ok(Some(cpu)) => info!(partition = executor.partition.id, cpu, "executor pinned"),
                Ok(None) => {}
                Err(e) => warn!(partition = executor.partition.id, error = %e, "executor stays on the node's CPUs"),
            }
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
