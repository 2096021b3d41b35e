//! The node process (`glass node --config … --id …`): hosts the node's partition replicas and
//! carries their messages. The deciding logic is [`Replica`]; this module only moves bytes and
//! threads (docs/design.md; mini-redis's server shape: [`run`] takes a bound listener and a
//! shutdown future).
//!
//! Shape — this file holds the process's bounds and what its tasks and threads share: the
//! node's state (`Node`), a replica as the network side holds it (its inbox of `Work`, the
//! figures its executor publishes) and an executor's state (`Executor`); the rest is split by
//! concern, each file stating what it owns and guarantees:
//! - `start`: the node's start ([`bind`], [`run`], [`Start`]) and its shutdown;
//! - `executor`: one OS thread per replica (its *executor*), which owns the replica and
//!   executes its inbox strictly in order, the partition's machine deciding;
//! - `answers`, with `copy` and `image_copy`: an executor's answers to the requests that read
//!   its replica, and the copies of it taken while the partition executes on (docs/design.md
//!   §10);
//! - `rejoin`: an executor's rejoin: its starting state fetched from a live replica, or a
//!   full-stack replica's restart recovery from its own log;
//! - `coordinator_links`: the links to every coordinator of `cluster.toml` (dialed when the
//!   [`NodeMachine`] says so, each with its liveness tether) and the writer task that sends
//!   through them;
//! - `backup_links`: passive modes, at a primary: the links to its backup nodes, which carry
//!   its shipments;
//! - `server`: the node's listener: tools on the tool channel, other nodes on the peer
//!   channel.
//!
//! Beside them: a peer breaking the protocol (a frame with an unknown tag or another protocol
//! version, a malformed one) is logged at `warn` naming it, and loses its connection only.
//!
//! A watch on the thread that carries the links ([`wire::watchdog`]) logs, at `info`, each
//! time it was held up 50 ms or more, with its time on a CPU and waiting for one meanwhile.
//!
//! Every event is logged through `tracing`, one line each.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tracing::{debug, error, info, warn};
use wire::channel::{
    ChannelMessage, CoordinatorToNode, NodeToCoordinator, PeerReply, PeerRequest, ToolReply, ToolRequest,
};
use wire::config::{ClusterConfig, PartitionConfig, Replication};
use wire::messages::{
    CoordinatorId, DigestOutcome, Hello, LoadState, NodeId, PartitionId, PartitionPhase, PartitionReport, PeerKind,
    ProcessStatus, ReplicationReport, Seq, SnapshotEnd, StateDigest, PROTOCOL_VERSION,
};

use crate::error::RejoinError;
use crate::machine::{Fetched, NodeMachine, PartitionMachine};
use crate::replica::{DigestCopy, Emit, Replica, ReplicaRole, Store};
use crate::snapshot;

mod answers;
mod backup_links;
mod coordinator_links;
mod copy;
mod executor;
mod image_copy;
mod rejoin;
mod server;
mod start;

pub use crate::machine::{CONNECT_RETRY_MS, REJOIN_FETCH_ATTEMPTS, REJOIN_HELD_BATCHES_MAX};
pub use start::{bind, run, NodeError, Start};

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
/// Acknowledgements and membership changes queued for the writer task.
const OUTBOX_EVENTS_MAX: usize = 4_096;
/// How long a stopping node keeps its tethers after closing its coordinator links, so that
/// each coordinator reads the clean close (a death notice) before the tether's end (the
/// process ends sooner, and the tethers with it).
const TETHER_STOP_LINGER: Duration = Duration::from_secs(2);
/// How long a stopping node waits for its coordinator links to be closed.
pub const LINKS_CLOSE_WAIT: Duration = Duration::from_millis(500);
/// Attempts to reach the coordinator between two log lines about it.
const CONNECT_RETRIES_PER_LOG: u32 = 25;

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
    /// Rejoin: the starting state fetch `id` brought (or why it failed).
    Fetched { id: u64, fetched: Box<Result<Fetched, RejoinError>> },
    /// Rejoin: fetch `id` has received `received` bytes so far (its thread says so every
    /// [`rejoin::FETCH_PROGRESS_PERIOD_MAX`] or sooner, progress or not: the partition's
    /// machine keeps its patience by these).
    FetchProgress { id: u64, received: u64 },
    /// Drop the replica's state and rejoin; messages are sent under link generation
    /// `link_generation` from now on. Either the only coordinator's link came back after
    /// breaking, or (`only_if_serving`) the leader's membership left this replica out: a
    /// replica already rejoining goes on.
    Rejoin { link_generation: u64, only_if_serving: bool },
    /// Room was made for a copy's chunks, or its forwarder ended (`copy::CopyTask`): the
    /// executor looks at its copy again.
    CopyRoom,
    /// Finish: the node is shutting down.
    Stop,
}

/// Whether `msg` is a new leader's take-over or fetch, answered ahead of the batches queued
/// before it (docs/design.md §11, "A leader's death").
fn is_urgent(msg: &CoordinatorToNode) -> bool {
    matches!(msg, CoordinatorToNode::TakeOver { .. } | CoordinatorToNode::SendBatches { .. })
}

impl Work {
    /// Whether the executor may take this while it holds batches for something urgent behind
    /// it: a batch (held), the urgent message itself, and what neither depends on nor changes
    /// the batches' execution. Anything else first lets the held batches run, so that it
    /// finds the replica where the coordinator's order put it.
    fn taken_while_holding(&self) -> bool {
        matches!(
            self,
            Work::Coordinator(
                CoordinatorToNode::Batch(_)
                    | CoordinatorToNode::TakeOver { .. }
                    | CoordinatorToNode::SendBatches { .. }
                    | CoordinatorToNode::Heartbeat { .. }
                    | CoordinatorToNode::Membership { .. }
                    | CoordinatorToNode::PieceReads(_)
                    | CoordinatorToNode::RecallOutcomes { .. }
            ) | Work::CopyRoom
                | Work::FetchProgress { .. }
        )
    }

    /// What it is, for the executor's log.
    fn name(&self) -> &'static str {
        match self {
            Work::Coordinator(m) => m.name(),
            Work::Tool { .. } => "a tool's request",
            Work::Peer { .. } => "a peer's request",
            Work::Fetched { .. } => "a fetched starting state",
            Work::FetchProgress { .. } => "a fetch's progress",
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

/// What the writer task (the coordinator link's sending side) is told besides the
/// executors' messages.
#[derive(Debug)]
enum OutboxEvent {
    /// A backup acknowledged shipments up to `seq`.
    Ack { from: NodeId, partition: PartitionId, seq: Seq },
    /// A dial of backup `backup`'s link (of `generation`) ended.
    PeerDial { backup: NodeId, generation: u64, outcome: crate::machine::PeerDial },
}

/// What an executor sends the writer task: `(link generation, message)`, the coordinator
/// link's generation the message belongs to (docs/design.md §11, "Epochs, terms and
/// generations"). The generation grows each time the link comes back after breaking and every
/// partition rejoins; the writer drops what an executor sent under an older one (it was lost
/// with the old link, and the executor's state is being replaced by a rejoin).
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
    /// A new leader's `TakeOver`s and `SendBatches` put on the inbox and not yet taken by the
    /// executor: while any waits, the batches ahead of it are held, not executed, so that it
    /// is answered at once (`executor`; docs/design.md §11, "A leader's death").
    urgent_queued: std::sync::atomic::AtomicUsize,
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
    /// To the writer task: acknowledgements from backups and how their links' dials ended
    /// (the reader carries its own effects).
    events: mpsc::Sender<OutboxEvent>,
    /// The node's link-side decisions (routing, ship gates, heartbeats, reconnection), shared
    /// by the link's reader and writer; held only for a synchronous call.
    machine: Mutex<NodeMachine>,
    /// The coordinator link's generation (see [`Outgoing`]).
    link_generation: AtomicU64,
    /// The sending queue of each coordinator link that is up.
    links: Mutex<BTreeMap<CoordinatorId, LinkOutbox>>,
    /// Woken when the node machine says to dial a coordinator again (`NodeEffect::Dial`).
    dial_due: BTreeMap<CoordinatorId, tokio::sync::Notify>,
    /// Set once the first coordinator link is up: until then what the executors send waits
    /// in their queue (a load report must not be lost to a link not yet made).
    first_link: watch::Sender<bool>,
    /// Each backup node's link, as the writer task queues shipments on it.
    peers: Mutex<BTreeMap<NodeId, backup_links::PeerQueue>>,
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
            role: PeerKind::Node,
            id: self.id,
            config_fingerprint: self.config.fingerprint(),
        }
    }

    fn status(&self) -> ProcessStatus {
        ProcessStatus {
            role: PeerKind::Node,
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

fn node_hello(config: &ClusterConfig, id: NodeId) -> Hello {
    Hello { protocol_version: PROTOCOL_VERSION, role: PeerKind::Node, id, config_fingerprint: config.fingerprint() }
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

/// What an executor's replica runs on (the cluster's `wire::config::Replication`), with what
/// only the conventional stack needs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ReplicaStorage {
    /// The lean kernel (active-active, active-passive).
    Lean,
    /// The conventional stack (`full-stack`).
    Full {
        /// Where the replica keeps its database and log.
        dir: PathBuf,
        /// Worker threads.
        workers: usize,
    },
}

impl ReplicaStorage {
    fn of(config: &ClusterConfig, node: NodeId, partition: PartitionId) -> ReplicaStorage {
        match &config.replication {
            Replication::ActiveActive | Replication::ActivePassive { .. } => ReplicaStorage::Lean,
            Replication::FullStack { full_stack, .. } => ReplicaStorage::Full {
                dir: config.run_dir.join(format!("node-{node}")).join(format!("p{partition}")),
                workers: full_stack.workers as usize,
            },
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
    storage: ReplicaStorage,
    partition: PartitionConfig,
    seed: u64,
    pending_batches_max: usize,
    frame_bytes_max: usize,
    shared: Arc<ReplicaShared>,
    to_coordinator: mpsc::Sender<Outgoing>,
    /// The coordinator link's generation this executor's messages belong to (see
    /// [`Outgoing`]).
    link_generation: std::cell::Cell<u64>,
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
    /// The fetches under way (rejoin), by the machine's id: dropping one's sender stops its
    /// thread.
    fetches: std::cell::RefCell<BTreeMap<u64, tokio::sync::oneshot::Sender<()>>>,
    /// The executor's clock for its partition's machine (`PartitionMachine::tick`).
    started: Instant,
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

/// Sends `msgs` to `reply` from a thread of its own (a snapshot or a log base: the executor
/// goes on meanwhile).
fn send_from_thread<R: Send + 'static>(name: String, msgs: Vec<R>, reply: mpsc::Sender<R>) {
    let sender = std::thread::Builder::new().name(name.clone()).spawn(move || {
        crate::affinity::spread();
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

/// One coordinator link's sending queue (its task sends what is queued, in order).
#[derive(Debug)]
struct LinkOutbox {
    /// The link's serial number: a broken link's task removes only its own queue.
    conn: u64,
    out: mpsc::Sender<NodeToCoordinator>,
}
