//! The simulated cluster: every coordinator's real [`Carrier`] — the process's own, with its
//! [`Member`] of the group (raft, and the real [`Coordinator`] in the leader) — and every
//! node's real [`Replica`]s, connected by the [`Network`], stepped one action at a time from a
//! seeded [`Rng`], with the invariants of [`invariants`] checked at every step. Around the
//! machines it models what the node processes do — heartbeats, link loss, crashes, restarts and
//! the rejoin protocol — after `node::process`, and it carries what each coordinator's carrier
//! asks of its links (docs/design.md §14):
//!
//! - a **coordinator crash** kills its process: its memory is gone (its stored raft state is
//!   kept, as its file is), its links break at once (the nodes see them close and dial again),
//!   and the requests in flight to it are answered "outcome unknown" by their client library;
//!   a restart brings it back from what it stored, as a standby;
//! - a **coordinator cut** loses the raft messages between it and the others, both ways or
//!   only what it sends, while its node links stay up (a split brain's setting);
//!
//! - a **crash** kills a node's process: its replicas' memory is gone and whatever was in
//!   flight on its link is lost; the coordinator learns of it only by the node's silence
//!   (`timeouts.failure_timeout_ms`);
//! - a **drop** breaks a node's link (QUIC never loses single messages on a live connection):
//!   everything in flight on it is lost, the coordinator counts the node failed at once
//!   (the carrier's `on_node_lost`, as its process does on `NodeLost`); the node's machine
//!   dials again after `CONNECT_RETRY_MS`, and its partitions rejoin;
//! - **lost heartbeats**: a node's heartbeats are suppressed for a while (a stalled writer);
//!   if the coordinator declares it failed meanwhile, its carrier closes the link (as on every
//!   `NodeDown`), and the node dials again and rejoins;
//! - a **restart** (`glass node --rejoin`) is possible once the coordinator counts the node
//!   failed (its process refuses a second connection from a live node): the node comes back
//!   on a new link, empty, and asks to rejoin each partition; a rejoining replica holds the
//!   batches the coordinator sends it, copies the named source's state once the source
//!   executed up to the plan's point — a lean source copies its state at that moment while it
//!   executes on, a seeded number of chunks at each step of time (`node::snapshot::CopySender`,
//!   sent and received, every chunk checked and the end's digest verified, by
//!   `node::snapshot`), so the copy races the batches the source executes meanwhile — then
//!   catches up on what it held and
//!   keeps receiving, a seeded slice at each step of time (`PartitionMachine::catch_up`), and
//!   reports `Rejoined`; if the
//!   source cannot serve the copy for `REJOIN_FETCH_ATTEMPTS × CONNECT_RETRY_MS`, or the
//!   coordinator refuses, it gives up and waits for an operator's restart, as the real
//!   executor does.
//!
//! Guarantees: everything is a function of the seed and the configuration; nothing here
//! decides what the cluster answers — the coordinator and replicas do; a replica error other
//! than "stopped" is recorded as a violation, never swallowed.

use std::collections::BTreeMap;

use coordinator::carrier::{Carrier, CarrierStop, ConnId, Links};
use coordinator::group::GroupState;
use coordinator::member::Member;
use coordinator::{ClientId, Coordinator, Event};
use engine::procedures::TxnInput;
use engine::rng::Rng;
use node::error::RejoinError;
use node::machine::{Effect, FetchKind, Fetched, NodeEffect, NodeMachine, PartitionMachine, Standing};
use node::replica::{LogBase, ReplicaRole, Store};
use node::snapshot::{LogBaseReceived, SnapshotInfo};
use node::{Replica, TransferError};
use wire::channel::{ChannelMessage, CoordinatorToClient, CoordinatorToNode, NodeToCoordinator, PeerReply};
use wire::config::{ClusterConfig, Mode, Shipping, WarehouseRange};
use wire::messages::{ClientResult, CoordinatorId, DigestOutcome, Epoch, NodeId, PartitionId, Seq, StateDigest};
use workload::gen::{GenConfig, Generator, Profile};

mod invariants;
pub use invariants::Invariant;

use crate::disk::Disks;
use crate::error::{NodeReport, SimError, SlotReport, Violation};
use crate::net::{Carried, Envelope, NetFaults, Network, PeerMsg, RAFT_NODE};
use crate::population;

/// The simulated clock's start: 2023-11-14, in microseconds since the Unix epoch.
pub const START_US: u64 = 1_700_000_000_000_000;
/// The client id digest requests come from.
const DIGEST_CLIENT: ClientId = 9_999;
/// A submitting step asks for a partition's state digests instead, one in this many (docs/
/// design.md §10, "Checks during traffic": the digest copies then race the batches).
const DIGEST_REQUEST_ONE_IN: u64 = 200;
/// Clients submitting transactions (ids 0..CLIENTS).
pub const CLIENTS: u64 = 4;
/// Time one "let time pass" step advances, at most (uniform below it): with a step in five
/// passing time, about 100 µs a step, so a crash is detected within a few hundred steps.
pub const STEP_US_MAX: u64 = 1_000;
/// Bytes of a full-stack log's unsynced tail a crash may leave on the medium, at most (a torn
/// write; half the crashes leave none).
pub const TORN_BYTES_MAX: u64 = 8_192;
/// Time [`Sim::drain`] lets pass per delivery: small enough that a node's heartbeats are
/// delivered within the failure timeout however many shipments and results are in flight
/// (at 50 µs a backlog of a few hundred messages once let a healthy node be declared failed:
/// `glass sim --mode active-passive --seed 3109`).
pub const DRAIN_STEP_US: u64 = 10;
/// Deliveries, at most, [`Sim::drain`] makes before it reports the cluster stuck.
pub const DRAIN_DELIVERIES_MAX: usize = 200_000;

/// The simulated active-active cluster of [`config_for`].
pub fn config(nodes: u8, seed: u64) -> ClusterConfig {
    config_for(nodes, seed, Mode::ActiveActive, Shipping::Sync)
}

/// The simulated cluster: `nodes` nodes (2 or more), two partitions of one warehouse each,
/// every partition replicated on every node, in `mode` (the passive modes with `shipping`;
/// the full stack's workers run inline, deterministically, whatever the file's `workers`:
/// [`crate::disk`]); short timeouts (a 5 ms
/// heartbeat, failure after 40 ms of silence) so that crashes are detected within a few
/// hundred steps; small batches. In the passive modes the primaries are spread: partition
/// `i`'s first replica is node `i + 1`.
pub fn config_for(nodes: u8, seed: u64, mode: Mode, shipping: Shipping) -> ClusterConfig {
    assert!(nodes >= 2, "a simulated cluster has at least two nodes");
    let mut c = ClusterConfig::parse(include_str!("../../cluster.toml")).expect("the default cluster.toml parses");
    c.seed = seed;
    // One coordinator; [`with_coordinators`] makes a group.
    c.coordinators.truncate(1);
    c.nodes = (1..=nodes)
        .map(|id| wire::config::NodeConfig {
            id: NodeId::from(id),
            // Apart from the default file's coordinators (7400, 7403, 7404).
            address: format!("127.0.0.1:{}", 7500 + u16::from(id)),
            metrics: None,
        })
        .collect();
    for (i, p) in c.partitions.iter_mut().enumerate() {
        let w = i as u16 + 1;
        p.warehouses = WarehouseRange { first: w, last: w };
        p.replicas = (0..nodes).map(|k| NodeId::from((i as u8 + k) % nodes + 1)).collect();
    }
    c.partitions.truncate(2);
    c = c.with_mode(mode, mode.is_passive().then_some(shipping));
    c.limits.batch_txns_max = 8;
    c.limits.batch_wait_us = 300;
    c.limits.inflight_txns_max = 64;
    c.timeouts.heartbeat_ms = 5;
    c.timeouts.failure_timeout_ms = 40;
    c.validate().expect("the simulated cluster's configuration is valid");
    c
}

/// `config` with `k` coordinators (ids 0..k, on loopback ports 7410 on): a coordinator group
/// (docs/design.md §11).
pub fn with_coordinators(mut config: ClusterConfig, k: u8) -> ClusterConfig {
    assert!(k >= 1, "a cluster has a coordinator");
    config.coordinators = (0..k)
        .map(|id| wire::config::CoordinatorConfig {
            id,
            address: format!("127.0.0.1:{}", 7410 + u16::from(id)),
            metrics: None,
        })
        .collect();
    config.validate().expect("the simulated cluster's configuration is valid");
    config
}

/// Which faults a run draws, and how often. Rates are per 10,000 steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    pub net: NetFaults,
    /// A node's process crashes.
    pub crash_per_10k: u64,
    /// A node's link breaks (a drop).
    pub drop_per_10k: u64,
    /// A node's heartbeats stop for a while.
    pub mute_per_10k: u64,
    /// A failed node is restarted and rejoins.
    pub restart_per_10k: u64,
    /// A coordinator crashes or is cut off from the others (with three or more).
    pub coordinator_per_10k: u64,
}

impl Faults {
    /// No faults at all.
    pub const NONE: Faults = Faults {
        net: NetFaults::CALM,
        crash_per_10k: 0,
        drop_per_10k: 0,
        mute_per_10k: 0,
        restart_per_10k: 0,
        coordinator_per_10k: 0,
    };
    /// Reordering, duplication and delays, no node faults.
    pub const NETWORK: Faults = Faults { net: NetFaults::ADVERSARIAL, ..Faults::NONE };
    /// Everything: reordering, duplication, delays, drops, lost heartbeats, crashes and
    /// restarts at random times.
    pub const ALL: Faults = Faults {
        net: NetFaults { hold_steps: 100, ..NetFaults::ADVERSARIAL },
        crash_per_10k: 12,
        drop_per_10k: 6,
        mute_per_10k: 6,
        restart_per_10k: 60,
        coordinator_per_10k: 8,
    };

    fn any_node_faults(&self) -> bool {
        self.crash_per_10k + self.drop_per_10k + self.mute_per_10k + self.restart_per_10k + self.coordinator_per_10k > 0
    }
}

/// Counts of what a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    pub steps: u64,
    pub requests: u64,
    pub crashes: u64,
    /// Links broken (drops).
    pub drops: u64,
    /// Heartbeat outages.
    pub mutes: u64,
    pub restarts: u64,
    /// `Rejoined` events: a restarted replica counts again.
    pub rejoins: u64,
    /// Crashes of a node while one of its replicas was rejoining.
    pub crashes_while_rejoining: u64,
    /// Crashes of a node some rejoining replica was copying from (or waiting on).
    pub crashes_of_rejoin_source: u64,
    /// Rejoins given up (source gone, or refused).
    pub rejoins_given_up: u64,
    /// `NodeDown` events.
    pub nodes_down: u64,
    /// Of them, replicas failed for lagging past `limits.replica_lag_batches_max` behind a
    /// majority's answers (docs/cluster.md, "Agreement").
    pub lagging: u64,
    /// Messages lost with broken links and crashed processes.
    pub messages_lost: u64,
    /// Promotions of a backup (`Event::Promoting`).
    pub promotions: u64,
    /// Coordinator links a node's machine re-established after a drop.
    pub reconnects: u64,
    /// Restart recoveries of a node's full-stack database (from its own log, or over an
    /// image).
    pub recoveries: u64,
    /// Of those, rejoining backups whose own log could not follow the primary's log base and
    /// that installed the primary's checkpoint image instead (a base backup).
    pub base_backups: u64,
    /// Starting-state fetches begun by rejoining replicas, and those that failed.
    pub fetches: u64,
    pub fetches_failed: u64,
    /// Copies of a lean replica taken while it executed (docs/design.md §10): installed, of
    /// them those during which the source executed batches (the copy raced them), and those
    /// cut mid-copy (the joiner or the source crashed, restarted or rejoined).
    pub copies: u64,
    pub copies_raced: u64,
    pub copies_cut: u64,
    /// Digest requests made during the run (the final check's excepted), and state digests a
    /// lean replica took from a copy of its state after the batch that asked
    /// (docs/design.md §10, "Checks during traffic"): reported, of them those during which it
    /// executed later batches, and those refused (the replica stopped, rejoined or was
    /// replaced mid-copy).
    pub digest_requests: u64,
    pub digest_copies: u64,
    pub digest_copies_raced: u64,
    pub digest_copies_refused: u64,
    /// Coordinator processes crashed, and coordinators cut off from the others.
    pub coordinator_crashes: u64,
    pub coordinator_cuts: u64,
    /// Take-overs done by a new leader, and leaders deposed (docs/design.md §11).
    pub take_overs: u64,
    pub deposed: u64,
    /// Invariant checks made during the run, at every step (docs/design.md §14).
    pub invariant_checks: u64,
}

impl SimStats {
    /// Adds `other`'s counts to these (totals over many runs).
    pub fn add(&mut self, other: &SimStats) {
        self.steps += other.steps;
        self.requests += other.requests;
        self.crashes += other.crashes;
        self.drops += other.drops;
        self.mutes += other.mutes;
        self.restarts += other.restarts;
        self.rejoins += other.rejoins;
        self.crashes_while_rejoining += other.crashes_while_rejoining;
        self.crashes_of_rejoin_source += other.crashes_of_rejoin_source;
        self.rejoins_given_up += other.rejoins_given_up;
        self.nodes_down += other.nodes_down;
        self.lagging += other.lagging;
        self.messages_lost += other.messages_lost;
        self.promotions += other.promotions;
        self.reconnects += other.reconnects;
        self.recoveries += other.recoveries;
        self.base_backups += other.base_backups;
        self.fetches += other.fetches;
        self.fetches_failed += other.fetches_failed;
        self.copies += other.copies;
        self.copies_raced += other.copies_raced;
        self.copies_cut += other.copies_cut;
        self.digest_requests += other.digest_requests;
        self.digest_copies += other.digest_copies;
        self.digest_copies_raced += other.digest_copies_raced;
        self.digest_copies_refused += other.digest_copies_refused;
        self.coordinator_crashes += other.coordinator_crashes;
        self.coordinator_cuts += other.coordinator_cuts;
        self.take_overs += other.take_overs;
        self.deposed += other.deposed;
        self.invariant_checks += other.invariant_checks;
    }
}

/// Where a shipment's acknowledgement goes: the primary's node and its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr {
    pub node: NodeId,
    pub process: u64,
}

/// A partition's machine as the simulator drives it.
type Partition = PartitionMachine<PeerAddr>;

/// `machine`, taking the state digests a batch asks for from a copy stepped while it executes
/// on, as a node process does: a lean replica's rows, or a full-stack replica's page image
/// (which the simulator rebuilds in place once it is whole, where a node has a thread do it).
fn digesting(machine: Partition) -> Partition {
    machine.digesting_by_copy()
}

/// A fetch a rejoining replica started (`node::machine::Effect::Fetch`), not yet completed.
#[derive(Debug, Clone, Copy)]
struct PendingFetch {
    /// The simulator's name for the fetch (its copy under way, if any, is filed under it).
    id: u64,
    node: NodeId,
    /// The fetching process: a fetch dies with it.
    process: u64,
    partition: PartitionId,
    source: NodeId,
    after_seq: Seq,
    kind: FetchKind,
    /// Not before this time (a retry's delay).
    at_us: u64,
    /// The source is waited for until then, as the fetching thread waits for the first
    /// chunk (`node::snapshot::SNAPSHOT_CHUNK_TIMEOUT`).
    patience_until_us: u64,
}

/// Bytes of a frame as the simulator's copies see it: small chunks, so that a copy spans many
/// steps of time and races the batches its source executes.
const SIM_COPY_FRAME_BYTES: usize = 4 << 10;

/// A copy under way for a fetch (docs/design.md §10, "Copying without stopping"): the
/// source's sending side, and the joiner's receiving side with the database it fills.
struct InCopy {
    source: NodeId,
    source_process: u64,
    /// The batch the copy shows the state after.
    begun_seq: Seq,
    sender: node::snapshot::CopySender,
    receiver: node::snapshot::SnapshotReceiver,
    db: engine::LeanDb,
}

/// A copy under way that takes a replica's state digest after batch `seq`, as a node's
/// executor carries it (`node::process`): stepped a seeded number of chunks at a time while
/// the replica executes on, its end's digest reported to the coordinator.
struct DigestInCopy {
    node: NodeId,
    process: u64,
    partition: PartitionId,
    seq: Seq,
    copy: DigestCopying,
}

/// What a digest copy steps: a lean replica's rows, or the bytes of a full-stack replica's
/// page image taken so far.
enum DigestCopying {
    Rows(node::snapshot::CopySender),
    Image(Vec<u8>),
}

/// Bytes of a full-stack page image one simulated step takes (a node's executor takes 256
/// KiB; smaller here, so that the simulator's small partitions' copies race their batches).
const IMAGE_STEP_BYTES: usize = 16 << 10;

/// Moves a digest copy of `replica` on by `steps` steps; its outcome once it has one: the
/// digest, or why there is none. A full-stack image, once whole, is rebuilt into a database
/// of its own and digested there, as a node's rebuilding thread does.
fn step_digest_copy(
    copy: &mut DigestCopying,
    replica: &mut Replica,
    steps: u64,
) -> Option<Result<StateDigest, String>> {
    match (copy, replica.store_mut()) {
        (DigestCopying::Rows(sender), Store::Lean(db)) => {
            if !sender.is_copying(db) {
                return Some(Err("the replica's state was replaced".to_string()));
            }
            for _ in 0..steps {
                match sender.next(db) {
                    node::snapshot::CopyNext::Chunk(chunk) => match chunk.end {
                        Some(wire::messages::SnapshotEnd::Complete { digest, .. }) => return Some(Ok(digest)),
                        Some(wire::messages::SnapshotEnd::Refused { reason }) => return Some(Err(reason)),
                        None => {}
                    },
                    node::snapshot::CopyNext::Over => return Some(Err("the copy is over".to_string())),
                }
            }
            None
        }
        (DigestCopying::Image(image), Store::Full(f)) => {
            let db = f.database();
            if !db.image_copy_active() {
                return Some(Err("the replica's state was replaced".to_string()));
            }
            for _ in 0..steps {
                match db.image_copy_step(IMAGE_STEP_BYTES, image) {
                    Ok(engine::conventional::ImageCopyStep::More) => {}
                    Ok(engine::conventional::ImageCopyStep::Done { .. }) => {
                        let rebuilt = engine::conventional::ConventionalDb::open_from_image(db.config().clone(), image)
                            .and_then(|db| db.session())
                            .map(|mut session| StateDigest::from(engine::digest::digest(&mut session)))
                            .map_err(|e| format!("the image did not rebuild: {e}"));
                        return Some(rebuilt);
                    }
                    Err(e) => return Some(Err(format!("the page image copy failed: {e}"))),
                }
            }
            None
        }
        _ => Some(Err("the replica changed".to_string())),
    }
}

impl std::fmt::Debug for DigestInCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DigestInCopy").field("node", &self.node).field("seq", &self.seq).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for InCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InCopy").field("source", &self.source).finish_non_exhaustive()
    }
}

/// One simulated node process: the node's real machines, and what its process carries.
#[derive(Debug)]
struct SimNode {
    /// The process runs (a crashed one is gone until restarted).
    up: bool,
    /// The process's id (a restart makes a new one; peer messages are addressed to it).
    process: u64,
    /// Its link to each coordinator; messages of older links are never delivered.
    links: BTreeMap<CoordinatorId, CoordLink>,
    /// No heartbeats before this time (a stalled writer).
    mute_until_us: u64,
    machine: NodeMachine,
    partitions: BTreeMap<PartitionId, Partition>,
    /// The peer links this process opened: backup → the backup's process it reached.
    peers: BTreeMap<NodeId, u64>,
}

/// A node's link to one coordinator: the connection's id, and whether it is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CoordLink {
    id: u64,
    alive: bool,
}

/// One simulated coordinator process: its real [`Carrier`] — the process's own, with its
/// [`Member`] of the coordinator group — (none while it is down), what it stored, and the
/// client requests sent to it and not answered.
#[derive(Debug)]
struct SimCoord {
    carrier: Option<Carrier>,
    /// The group state as last stored (it survives a crash, as its file does).
    stored: Option<GroupState>,
    process: u64,
    /// Requests sent to this process and not answered: their clients learn "outcome unknown"
    /// when its connection goes.
    open: std::collections::BTreeSet<(ClientId, u64)>,
    /// Extra election ticks of this member, drawn from the seed.
    election_offset_ticks: usize,
}

impl SimCoord {
    /// Its group member, if its process runs and built one.
    fn member(&self) -> Option<&Member> {
        self.carrier.as_ref().and_then(Carrier::member)
    }
}

/// What a simulated coordinator's [`Carrier`] asked of its links during one call, carried out
/// in order after it ([`Sim::carry`]).
#[derive(Debug)]
enum LinkAction {
    ToNodes { to: Vec<(NodeId, ConnId)>, epoch: Epoch, msg: CoordinatorToNode },
    Close { node: NodeId, conn: ConnId },
    Raft { to: CoordinatorId, bytes: Vec<u8> },
    ToClient { client: ClientId, msg: CoordinatorToClient },
    Persist(GroupState),
    Event(Event),
}

/// The simulator's [`Links`]: each call recorded, to be carried by the seeded network. A
/// simulated link has no bounded queue — the network holds what is in flight — so no node
/// is ever "not reading" here (docs/design.md §14 says what the simulator does not model).
#[derive(Debug, Default)]
struct SimLinks {
    out: Vec<LinkAction>,
}

impl Links for SimLinks {
    fn to_nodes(&mut self, to: &[(NodeId, ConnId)], epoch: Epoch, msg: CoordinatorToNode, _full: &mut Vec<NodeId>) {
        self.out.push(LinkAction::ToNodes { to: to.to_vec(), epoch, msg });
    }
    fn close_node(&mut self, node: NodeId, conn: ConnId, _reason: &str) {
        self.out.push(LinkAction::Close { node, conn });
    }
    fn to_coordinator(&mut self, to: CoordinatorId, bytes: Vec<u8>) {
        self.out.push(LinkAction::Raft { to, bytes });
    }
    fn to_client(&mut self, client: ClientId, msg: CoordinatorToClient) {
        self.out.push(LinkAction::ToClient { client, msg });
    }
    fn persist(&mut self, state: &GroupState) -> Result<(), String> {
        self.out.push(LinkAction::Persist(state.clone()));
        Ok(())
    }
    fn event(&mut self, e: &Event) {
        self.out.push(LinkAction::Event(e.clone()));
    }
}

/// The simulated cluster and its network.
pub struct Sim {
    config: ClusterConfig,
    mode: Mode,
    rng: Rng,
    now_us: u64,
    step: u64,
    coordinators: BTreeMap<CoordinatorId, SimCoord>,
    /// Directed cuts between coordinators (raft messages across one are lost).
    coordinator_cuts: std::collections::BTreeSet<(CoordinatorId, CoordinatorId)>,
    /// A coordinator fault drawn from the seed (crash or cut) lasts until then (0: none
    /// drawn).
    coordinator_fault_until_us: u64,
    nodes: BTreeMap<NodeId, SimNode>,
    /// Full stack: each replica's durable medium (log and checkpoint), which outlives its
    /// process.
    disks: Disks,
    fetches: Vec<PendingFetch>,
    /// Copies under way, by fetch.
    copies: BTreeMap<u64, InCopy>,
    /// State digests being taken from copies.
    digest_copies: Vec<DigestInCopy>,
    net: Network,
    faults: Faults,
    next_id: u64,
    pending_max: usize,
    generator: Generator,
    /// Whether [`Sim::run`] submits new requests.
    pub submitting: bool,
    /// Print every event and fault to stderr as it happens (`glass sim --trace`).
    pub trace: bool,
    /// Every request's input, by request id.
    inputs: Vec<TxnInput>,
    /// Every reply, by (client, request id), with the number of times it came.
    answers: BTreeMap<(ClientId, u64), (ClientResult, u32)>,
    /// Whether each request (by id) was answered.
    answered: Vec<bool>,
    /// Request ids below this were all answered.
    answered_below: u64,
    /// Hash of every reply in arrival order.
    answer_log: xxhash_rust::xxh3::Xxh3,
    digest_replies: BTreeMap<u64, DigestOutcome>,
    next_digest_request: u64,
    events: Vec<Event>,
    violations: Vec<Violation>,
    stats: SimStats,
    /// The batch each transaction rode in, by partition and timestamp (the first batch sent
    /// with it: a promotion resends a batch with its number).
    batch_of: BTreeMap<(PartitionId, wire::messages::Timestamp), (Seq, Epoch)>,
    /// Every promotion: the epoch of the leader that promoted, the partition, the last batch
    /// the promoted backup applied and the first it executes.
    promotions: Vec<(Epoch, PartitionId, Seq, Seq)>,
    /// Transactions a later leader sent again (adopted at a take-over): they run again there,
    /// so a failover before the take-over does not lose them.
    resent: std::collections::BTreeSet<(PartitionId, wire::messages::Timestamp)>,
    /// The invariants checked at every step, and what they remember.
    checker: invariants::StepChecker,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("mode", &self.mode)
            .field("now_us", &self.now_us)
            .field("step", &self.step)
            .field("stats", &self.stats)
            .finish()
    }
}

/// The roles node `node`'s replicas start in: the file's on a fresh cluster; after a restart
/// a passive mode's node comes back as a backup of every partition.
fn roles(config: &ClusterConfig, node: NodeId, restarted: bool) -> Vec<(PartitionId, ReplicaRole)> {
    let mode = config.mode();
    config
        .partitions
        .iter()
        .filter(|p| p.replicas.contains(&node))
        .map(|p| {
            let role = match ReplicaRole::of(mode, p, node) {
                ReplicaRole::Primary if restarted => ReplicaRole::Backup,
                r => r,
            };
            (p.id, role)
        })
        .collect()
}

impl Sim {
    /// A cluster for `config` (see [`config`]) whose run draws from `seed`: every replica
    /// starts from the tiny population of its partition and reports itself loaded.
    pub fn new(config: &ClusterConfig, seed: u64, faults: Faults) -> Sim {
        let pending_max = config.limits.replica_pending_batches_max as usize;
        let mode = config.mode();
        let mut rng = Rng::new(seed);
        let mut nodes = BTreeMap::new();
        let mut disks = Disks::default();
        let mut next_id = 1;
        let mut fresh = || {
            next_id += 1;
            next_id - 1
        };
        let mut coordinators = BTreeMap::new();
        for c in config.coordinator_ids() {
            let election_offset_ticks = rng.below(4) as usize + 2 * coordinators.len();
            let carrier =
                Carrier::new(config, c, election_offset_ticks, None, START_US).expect("a valid configuration");
            let sc = SimCoord {
                carrier: Some(carrier),
                stored: None,
                process: fresh(),
                open: Default::default(),
                election_offset_ticks,
            };
            coordinators.insert(c, sc);
        }
        let mut loaded = Vec::new();
        for n in &config.nodes {
            let roles = roles(config, n.id, false);
            let mut machine = NodeMachine::new(config, n.id, &roles, START_US);
            let mut links = BTreeMap::new();
            for c in config.coordinator_ids() {
                let first = machine.on_link_up(c, START_US);
                debug_assert!(first.is_empty(), "a first connection asks nothing");
                links.insert(c, CoordLink { id: fresh(), alive: true });
            }
            let process = fresh();
            let mut partitions = BTreeMap::new();
            for (pid, role) in roles {
                let p = config.partitions.iter().find(|p| p.id == pid).expect("listed");
                // The node process reports its replica loaded with its state digest: the
                // population's, computed once per process (`population` checks every copy has
                // it under `debug_assertions`).
                let (db, digest) = population::partition_db(p, config.seed);
                let store = disks.load(mode, n.id, p, config.seed, db, role);
                let r = Replica::with_role(n.id, pid, role, store, pending_max);
                let state = wire::messages::LoadState::Ready { digest };
                loaded.push((n.id, NodeToCoordinator::LoadStatus { partition: pid, state }));
                partitions.insert(pid, digesting(Partition::serving(mode, r, pending_max)));
            }
            let peers = BTreeMap::new();
            let node = SimNode { up: true, process, links, mute_until_us: 0, machine, partitions, peers };
            nodes.insert(n.id, node);
        }
        // Every primary's links to its backups, as its process opens them at start.
        let processes: BTreeMap<NodeId, u64> = nodes.iter().map(|(&id, n)| (id, n.process)).collect();
        for n in nodes.values_mut() {
            let backups: Vec<NodeId> = n.machine.backups().into_values().flatten().collect();
            for b in backups {
                n.peers.insert(b, processes[&b]);
            }
        }
        let gen =
            GenConfig::for_profile(Profile::Standard, 1..=config.warehouses_total()).with_scale(population::SCALE);
        let mut sim = Sim {
            mode,
            rng,
            now_us: START_US,
            step: 0,
            coordinators,
            coordinator_cuts: Default::default(),
            coordinator_fault_until_us: 0,
            nodes,
            disks,
            fetches: Vec::new(),
            copies: BTreeMap::new(),
            digest_copies: Vec::new(),
            net: Network::default(),
            faults,
            next_id,
            pending_max,
            generator: Generator::new(gen, seed, config.seed).expect("a valid generator configuration"),
            submitting: true,
            trace: false,
            inputs: Vec::new(),
            answers: BTreeMap::new(),
            answered: Vec::new(),
            answered_below: 0,
            answer_log: xxhash_rust::xxh3::Xxh3::new(),
            digest_replies: BTreeMap::new(),
            next_digest_request: 1 << 40,
            events: Vec::new(),
            violations: Vec::new(),
            stats: SimStats::default(),
            batch_of: BTreeMap::new(),
            promotions: Vec::new(),
            resent: Default::default(),
            checker: Default::default(),
            config: config.clone(),
        };
        // Every node connects to every coordinator; each builds its member once all came.
        for node in sim.node_ids() {
            for c in sim.coordinator_ids() {
                let conn = sim.nodes[&node].links[&c].id;
                sim.with_carrier(c, |k, now, links| k.on_node_up(node, conn, now, links));
            }
        }
        for (node, msg) in loaded {
            let effects = sim.node_mut(node).machine.on_emit(node::replica::Emit::ToCoordinator(msg), START_US);
            sim.perform(node, effects);
        }
        // A single coordinator leads at once; several elect one first.
        let ids: Vec<CoordinatorId> = sim.coordinators.keys().copied().collect();
        for c in ids {
            sim.tick_coordinator(c);
        }
        sim
    }

    // ----- what tests and checkers look at -----

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The replication mode the cluster runs.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The leading coordinator's state machine.
    ///
    /// Panics if no coordinator leads (tests call it on a settled cluster).
    pub fn coordinator(&self) -> &Coordinator {
        self.leader().map(|(_, c)| c).expect("a coordinator leads")
    }

    /// The coordinator that leads the newest epoch and has taken over, with its state machine.
    pub fn leader(&self) -> Option<(CoordinatorId, &Coordinator)> {
        self.coordinators
            .iter()
            .filter_map(|(&id, sc)| {
                let m = sc.member()?;
                Some((m.leading()?, id, m.coordinator()?))
            })
            .max_by_key(|(epoch, _, _)| *epoch)
            .map(|(_, id, c)| (id, c))
    }

    /// Whether coordinator `c`'s process runs.
    pub fn is_coordinator_up(&self, c: CoordinatorId) -> bool {
        self.coordinators.get(&c).is_some_and(|sc| sc.carrier.is_some())
    }

    /// The coordinators' ids.
    pub fn coordinator_ids(&self) -> Vec<CoordinatorId> {
        self.coordinators.keys().copied().collect()
    }

    /// Whether node `node` counts as live at the leader (false with no leader).
    fn live_at_leader(&self, node: NodeId) -> bool {
        self.leader().is_some_and(|(_, c)| c.is_node_live(node))
    }

    /// Every event the coordinator reported, in order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// The run's random source (tests draw their own choices from it, keeping runs pure).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    pub fn stats(&self) -> SimStats {
        SimStats {
            steps: self.step,
            requests: self.inputs.len() as u64,
            messages_lost: self.net.lost,
            invariant_checks: self.checker.checks,
            ..self.stats
        }
    }

    /// Problems found while running (a replica refusing a message, a copy that differs).
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Every reply, by (client, request id), with how many times it came.
    pub fn answers(&self) -> &BTreeMap<(ClientId, u64), (ClientResult, u32)> {
        &self.answers
    }

    /// The inputs submitted, by request id.
    pub fn inputs(&self) -> &[TxnInput] {
        &self.inputs
    }

    /// Whether request `request_id` was answered.
    pub fn is_answered(&self, request_id: u64) -> bool {
        self.answered.get(request_id as usize).copied().unwrap_or(false)
    }

    /// A hash of every reply in the order it came.
    pub fn answer_log_digest(&self) -> u64 {
        self.answer_log.digest()
    }

    /// Replies satisfying `f`.
    pub fn count(&self, f: impl Fn(&ClientResult) -> bool) -> usize {
        self.answers.values().filter(|(r, _)| f(r)).count()
    }

    /// The serving replica of `partition` on `node`, if there is one.
    pub fn replica_mut(&mut self, node: NodeId, partition: PartitionId) -> Option<&mut Replica> {
        self.nodes.get_mut(&node)?.partitions.get_mut(&partition)?.replica_mut()
    }

    /// The serving replica of `partition` on `node`, if there is one (to observe it: whether
    /// it is parked at a home piece, how far it executed).
    pub fn replica(&self, node: NodeId, partition: PartitionId) -> Option<&Replica> {
        self.nodes.get(&node)?.partitions.get(&partition)?.replica()
    }

    /// The messages in flight and held (to observe a protocol step: which message is on its
    /// way where).
    pub fn net(&self) -> &Network {
        &self.net
    }

    /// Whether `node`'s process runs.
    pub fn is_up(&self, node: NodeId) -> bool {
        self.nodes.get(&node).is_some_and(|n| n.up)
    }

    /// A copy of the state of `partition`'s serving replica on `node`, made the way a
    /// rejoining replica copies its source (the snapshot stream), as it is now — a batch
    /// parked at a home piece is half run, and the copy has the half that ran; `None` unless
    /// it serves. A test keeps one to check a partition about to be lost for good.
    pub fn copy_db(&mut self, node: NodeId, partition: PartitionId) -> Option<engine::LeanDb> {
        let r = self.replica_mut(node, partition)?;
        snapshot_copy(node, r, None).ok().map(|(db, _)| db)
    }

    /// Whether the transaction at `ts` rode, in `partition`, in a batch a promotion lost: one
    /// the failed primary executed and the promoted backup had not applied (async shipping
    /// answers before the backups apply: docs/design.md §10).
    ///
    /// A promotion by a later leader than the one that sent the batch (a take-over, docs/
    /// design.md §11) numbers on from what the backup applied: every batch of the old
    /// leader's past that lies in the window.
    pub fn lost_in_failover(&self, partition: PartitionId, ts: wire::messages::Timestamp) -> bool {
        let Some(&(seq, sent_in)) = self.batch_of.get(&(partition, ts)) else { return false };
        let resent = self.resent.contains(&(partition, ts));
        self.promotions.iter().any(|&(epoch, p, applied_seq, next_seq)| {
            p == partition
                && applied_seq < seq
                && (seq < next_seq || (self.asynchronous() && epoch > sent_in && !resent))
        })
    }

    fn asynchronous(&self) -> bool {
        self.config.shipping() == Some(wire::config::Shipping::Async)
    }

    /// Whether some promotion lost batches (async shipping: the failed primary answered
    /// batches its promoted backup had not applied).
    pub fn lost_a_batch_in_failover(&self) -> bool {
        self.promotions.iter().any(|&(epoch, p, applied_seq, next_seq)| {
            applied_seq + 1 < next_seq
                || (self.asynchronous()
                    && self.batch_of.iter().any(|(&(q, ts), &(seq, sent_in))| {
                        q == p && seq > applied_seq && sent_in < epoch && !self.resent.contains(&(q, ts))
                    }))
        })
    }

    /// Whether some replica is rejoining (or gave up rejoining).
    pub fn is_rejoining(&self) -> bool {
        self.nodes.values().any(|n| n.partitions.values().any(|p| p.standing() != Standing::Serving))
    }

    /// The node ids.
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// Whether `node`'s process runs, its link is connected and the coordinator counts it
    /// live.
    pub fn is_healthy(&self, node: NodeId) -> bool {
        let n = &self.nodes[&node];
        let linked = self.leader().is_some_and(|(c, _)| n.links.get(&c).is_some_and(|l| l.alive));
        n.up && linked && self.live_at_leader(node)
    }

    /// Whether `node` serves every partition it holds and the coordinator counts it a live
    /// replica of each.
    pub fn is_full_member(&self, node: NodeId) -> bool {
        let Some((_, c)) = self.leader() else { return false };
        let status = c.status();
        self.is_healthy(node)
            && self.nodes[&node].partitions.iter().all(|(p, m)| {
                m.replica().is_some_and(|r| r.stopped().is_none())
                    && status.iter().any(|st| st.partition == *p && st.live_replicas.contains(&node))
            })
    }

    /// Every node: process, link, and each partition's standing (for failure reports).
    pub fn node_reports(&self) -> Vec<NodeReport> {
        self.nodes
            .iter()
            .map(|(&id, n)| NodeReport {
                id,
                up: n.up,
                link: self.leader().and_then(|(c, _)| n.links.get(&c)).map_or(0, |l| l.id),
                link_alive: self.leader().and_then(|(c, _)| n.links.get(&c)).is_some_and(|l| l.alive),
                live: self.live_at_leader(id),
                shipping_to: n
                    .machine
                    .backups()
                    .into_iter()
                    .map(|(p, b)| (p, b, n.machine.gate_held(p).unwrap_or(0)))
                    .collect(),
                slots: n
                    .partitions
                    .iter()
                    .map(|(&p, m)| {
                        let slot = match (m.replica(), m.standing()) {
                            (Some(r), _) => SlotReport::Serving {
                                seq: r.applied_seq(),
                                waiting: r.waiting_batches(),
                                stopped: r.stopped().is_some(),
                                parked_at: r.parked_at(),
                            },
                            (None, Standing::Rejoining { plan, held, .. }) => SlotReport::Joining { plan, held },
                            (None, _) => SlotReport::GaveUp,
                        };
                        (p, slot)
                    })
                    .collect(),
            })
            .collect()
    }

    // ----- the network and the processes -----

    fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Calls coordinator `c`'s carrier (if its process runs) with the time and the simulated
    /// links, then carries out what it asked, in order, and the replies it grouped.
    fn with_carrier(
        &mut self,
        c: CoordinatorId,
        call: impl FnOnce(&mut Carrier, u64, &mut SimLinks) -> Result<(), CarrierStop>,
    ) {
        let now = self.now_us;
        let Some(carrier) = self.coordinators.get_mut(&c).and_then(|sc| sc.carrier.as_mut()) else { return };
        let mut links = SimLinks::default();
        let stopped = call(carrier, now, &mut links);
        carrier.flush_replies(&mut links);
        self.carry(c, links.out);
        self.note_decided(c);
        if let Err(e) = stopped {
            self.violations.push(Violation::CoordinatorStopped { coordinator: c, reason: e.to_string() });
        }
    }

    /// Ends `node`'s live link to coordinator `c`, if its process runs: what was in flight on
    /// it is lost and the node's machine learns it (it dials again). Whether it did.
    fn end_link(&mut self, node: NodeId, c: CoordinatorId) -> bool {
        let now = self.now_us;
        let n = self.node_mut(node);
        let Some(l) = n.links.get_mut(&c).filter(|l| l.alive) else { return false };
        if !n.up {
            return false;
        }
        l.alive = false;
        let link = l.id;
        n.machine.on_link_lost(c, now);
        self.net.cut(node, link, None);
        true
    }

    /// Carries out what coordinator `c`'s carrier asked of its links, as the process's
    /// [`Links`] do: the simulated network in place of QUIC, the kept state in place of the
    /// file.
    fn carry(&mut self, c: CoordinatorId, out: Vec<LinkAction>) {
        for o in out {
            match o {
                LinkAction::Persist(state) => {
                    // Stored (fsync'd) before anything after it leaves.
                    if let Some(sc) = self.coordinators.get_mut(&c) {
                        sc.stored = Some(state);
                    }
                }
                LinkAction::ToNodes { to, epoch, msg } => {
                    if let CoordinatorToNode::Batch(b) = &msg {
                        self.checker.sent(epoch, b);
                        for t in &b.txns {
                            let (_, sent_in) = *self.batch_of.entry((b.partition, t.ts)).or_insert((b.seq, epoch));
                            if sent_in < epoch {
                                self.resent.insert((b.partition, t.ts));
                            }
                        }
                    }
                    if matches!(msg, CoordinatorToNode::Membership { .. } | CoordinatorToNode::TakeOver { .. }) {
                        self.trace_line(|| format!("coordinator {c} (epoch {epoch}) sends {to:?} {msg:?}"));
                    }
                    for (n, conn) in to {
                        self.send_to_node(n, conn, c, epoch, msg.clone());
                    }
                }
                LinkAction::Close { node, conn } => {
                    // Its process ends the QUIC connection: the node sees it close.
                    if self.nodes[&node].links.get(&c).is_some_and(|l| l.id == conn) {
                        self.end_link(node, c);
                    }
                }
                LinkAction::ToClient { msg: CoordinatorToClient::ClientReplies(replies), client } => {
                    for reply in replies {
                        self.check_answer(c, client, reply.request_id, &reply.result);
                        self.answer(c, client, reply);
                    }
                }
                LinkAction::ToClient { msg: CoordinatorToClient::DigestReply { request_id, outcome, .. }, .. } => {
                    self.digest_replies.insert(request_id, outcome);
                }
                LinkAction::ToClient { msg, .. } => self.violations.push(Violation::UnexpectedToClient { msg }),
                LinkAction::Raft { to, bytes } => {
                    let (Some(from), Some(dest)) = (self.coordinators.get(&c), self.coordinators.get(&to)) else {
                        continue;
                    };
                    if dest.carrier.is_some() {
                        let msg = Carried::Raft { from: c, from_process: from.process, to, bytes };
                        self.net.send(Envelope { node: RAFT_NODE, link: dest.process, msg });
                    }
                }
                LinkAction::Event(e) => {
                    if self.trace {
                        eprintln!("{:>10} µs step {:>6}: coordinator {c}: {e}", self.now_us - START_US, self.step);
                    }
                    if let Event::Promoted { partition, applied_seq, next_seq, .. } = &e {
                        let epoch = self.coordinators.get(&c).and_then(SimCoord::member).map_or(0, |m| m.term());
                        self.promotions.push((epoch, *partition, *applied_seq, *next_seq));
                        self.checker.failed_over.insert(*partition);
                    }
                    match &e {
                        Event::NodeDown { detection, .. } => {
                            self.stats.nodes_down += 1;
                            if matches!(detection, coordinator::Detection::Lagging { .. }) {
                                self.stats.lagging += 1;
                            }
                        }
                        Event::Rejoined { .. } => self.stats.rejoins += 1,
                        Event::Promoting { partition, .. } => {
                            self.stats.promotions += 1;
                            self.checker.failed_over.insert(*partition);
                        }
                        Event::TookOver { .. } => self.stats.take_overs += 1,
                        Event::Deposed { .. } => self.stats.deposed += 1,
                        _ => {}
                    }
                    self.events.push(e);
                }
            }
        }
    }

    /// A client's reply (from coordinator `c`, or "outcome unknown" from the client library
    /// when `c`'s connection went).
    fn answer(&mut self, c: CoordinatorId, client: ClientId, reply: wire::messages::ClientReply) {
        if let Some(sc) = self.coordinators.get_mut(&c) {
            sc.open.remove(&(client, reply.request_id));
        }
        let line = format!("{client} {} {:?}\n", reply.request_id, reply.result);
        self.answer_log.update(line.as_bytes());
        let entry = self.answers.entry((client, reply.request_id)).or_insert((reply.result, 0));
        entry.1 += 1;
        if let Some(a) = self.answered.get_mut(reply.request_id as usize) {
            *a = true;
        }
        while self.answered.get(self.answered_below as usize) == Some(&true) {
            self.answered_below += 1;
        }
    }

    /// Coordinator `c` sends `msg` to `node` on connection `conn`: lost unless the node's
    /// process runs and that link is its connected one.
    fn send_to_node(&mut self, node: NodeId, conn: ConnId, c: CoordinatorId, epoch: Epoch, msg: CoordinatorToNode) {
        let Some(n) = self.nodes.get(&node) else { return };
        match n.links.get(&c) {
            Some(l) if n.up && l.alive && l.id == conn => {
                self.net.send(Envelope { node, link: l.id, msg: Carried::ToNode { from: c, epoch, msg } })
            }
            _ => self.net.lost += 1,
        }
    }
    fn send_from_node(&mut self, node: NodeId, c: CoordinatorId, msg: NodeToCoordinator) {
        let n = &self.nodes[&node];
        if let Some(l) = n.links.get(&c).filter(|l| n.up && l.alive) {
            self.net.send(Envelope { node, link: l.id, msg: Carried::ToCoordinator { to: c, msg } });
        }
    }
    /// Whether `e` can still be delivered: a control message on `node`'s current, connected
    /// link of a running process; a peer message between two processes that both still run.
    fn deliverable(&self, e: &Envelope) -> bool {
        let coordinator_up = |c: &CoordinatorId| self.is_coordinator_up(*c);
        if let Carried::Raft { from, from_process, to, .. } = &e.msg {
            let (f, t) = (&self.coordinators[from], &self.coordinators[to]);
            return f.carrier.is_some()
                && f.process == *from_process
                && t.carrier.is_some()
                && t.process == e.link
                && !self.coordinator_cuts.contains(&(*from, *to));
        }
        let n = &self.nodes[&e.node];
        match &e.msg {
            Carried::Peer { from, from_process, .. } => {
                let f = &self.nodes[from];
                n.up && n.process == e.link && f.up && f.process == *from_process
            }
            Carried::ToNode { from: c, .. } | Carried::ToCoordinator { to: c, .. } => {
                n.up && coordinator_up(c) && n.links.get(c).is_some_and(|l| l.alive && l.id == e.link)
            }
            Carried::Raft { .. } => unreachable!("handled above"),
        }
    }
    /// Delivers one message in flight, chosen at random (possibly leaving a duplicate, or
    /// holding it back instead).
    pub fn deliver_one(&mut self) {
        let faults = self.faults.net;
        let Some(e) = self.net.deliver(&mut self.rng, &faults, self.step) else { return };
        if !self.deliverable(&e) {
            return;
        }
        match e.msg {
            Carried::ToCoordinator { to, msg } => {
                let (node, conn) = (e.node, e.link);
                self.with_carrier(to, |k, now, links| k.on_node_message(node, conn, msg, now, links));
            }
            Carried::ToNode { from, epoch, msg } => {
                if matches!(
                    msg,
                    CoordinatorToNode::Membership { .. }
                        | CoordinatorToNode::ShipTo { .. }
                        | CoordinatorToNode::TakeOver { .. }
                        | CoordinatorToNode::Promote { .. }
                ) {
                    self.trace_line(|| format!("node {} gets {msg:?} from coordinator {from}", e.node));
                }
                let effects = self.node_mut(e.node).machine.on_coordinator(from, epoch, msg);
                self.perform(e.node, effects);
            }
            Carried::Raft { from, to, bytes, .. } => {
                self.with_carrier(to, |k, now, links| k.on_coordinator_message(from, &bytes, now, links));
            }
            Carried::Peer { from, from_process, msg: PeerMsg::Ship(shipment) } => {
                let partition = shipment.partition;
                self.trace_line(|| {
                    format!("node {} gets node {from}'s shipment {} of p{partition}", e.node, shipment.seq)
                });
                let reply = PeerAddr { node: from, process: from_process };
                let Some(m) = self.node_mut(e.node).partitions.get_mut(&partition) else {
                    self.violations.push(Violation::UnheldPartition { node: e.node, partition });
                    return;
                };
                let effects = m.on_shipment(shipment, reply);
                self.perform_partition(e.node, partition, effects);
            }
            Carried::Peer { from, msg: PeerMsg::Ack { partition, seq }, .. } => {
                self.trace_line(|| {
                    format!(
                        "node {} gets node {from}'s acknowledgement of p{partition} shipments through {seq}",
                        e.node
                    )
                });
                let now = self.now_us;
                let effects = self.node_mut(e.node).machine.on_ack(from, partition, seq, now);
                self.perform(e.node, effects);
            }
        }
    }

    fn node_mut(&mut self, node: NodeId) -> &mut SimNode {
        self.nodes.get_mut(&node).expect("a configured node")
    }

    /// Carries out node `node`'s machine's effects, as its process does.
    fn perform(&mut self, node: NodeId, effects: Vec<NodeEffect>) {
        let mut queue: std::collections::VecDeque<NodeEffect> = effects.into();
        while let Some(effect) = queue.pop_front() {
            match effect {
                NodeEffect::ToCoordinator { coordinator, msg } => self.send_from_node(node, coordinator, msg),
                NodeEffect::ToPartition { partition, msg } => {
                    let Some(m) = self.node_mut(node).partitions.get_mut(&partition) else { continue };
                    let effects = m.on_coordinator(msg);
                    self.perform_partition(node, partition, effects);
                }
                NodeEffect::Ship { backups, shipment } => {
                    self.trace_line(|| {
                        format!("node {node} ships p{} batch {} to {backups:?}", shipment.partition, shipment.seq)
                    });
                    for b in backups {
                        let reached = self.nodes[&node].peers.get(&b).copied();
                        let to = &self.nodes[&b];
                        if to.up && reached == Some(to.process) {
                            let from_process = self.nodes[&node].process;
                            let msg = Carried::Peer { from: node, from_process, msg: PeerMsg::Ship(shipment.clone()) };
                            self.net.send(Envelope { node: b, link: to.process, msg });
                        } else {
                            // The link to the backup's process is gone: its task ended.
                            self.trace_line(|| format!("node {node} lost its link to backup {b}"));
                            queue.extend(self.node_mut(node).machine.on_backup_lost(b));
                        }
                    }
                }
                NodeEffect::OpenPeer { backup } => {
                    let to = &self.nodes[&backup];
                    let process = if to.up { to.process } else { 0 };
                    self.node_mut(node).peers.insert(backup, process);
                }
                NodeEffect::Dial { coordinator } => self.reconnect(node, coordinator),
                NodeEffect::RejoinAll => self.rejoin_all(node),
                NodeEffect::Rejoin { partition } => self.rejoin_one(node, partition),
                NodeEffect::Shutdown { .. } => {
                    self.violations.push(Violation::UnexpectedMessage { node, name: "Shutdown" })
                }
                NodeEffect::NotHeld { partition, .. } => {
                    self.violations.push(Violation::UnheldPartition { node, partition })
                }
            }
        }
    }

    /// Carries out the effects of node `node`'s machine of `partition`, as its executor does.
    fn perform_partition(&mut self, node: NodeId, partition: PartitionId, effects: Vec<Effect<PeerAddr>>) {
        // The batches the call executed may have begun a digest copy: taken before any other.
        self.take_digest_copy(node, partition);
        let mut queue: std::collections::VecDeque<Effect<PeerAddr>> = effects.into();
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Emit(emitted) => {
                    if let node::replica::Emit::ToCoordinator(NodeToCoordinator::Results(r)) = &emitted {
                        self.check_results(node, r);
                    }
                    let now = self.now_us;
                    let effects = self.node_mut(node).machine.on_emit(emitted, now);
                    self.perform(node, effects);
                }
                Effect::Reply { to, msg: PeerReply::ShipAck { partition, seq } } => {
                    let from_process = self.nodes[&node].process;
                    let msg = Carried::Peer { from: node, from_process, msg: PeerMsg::Ack { partition, seq } };
                    self.net.send(Envelope { node: to.node, link: to.process, msg });
                }
                Effect::Reply { msg, .. } => {
                    self.violations.push(Violation::UnexpectedMessage { node, name: msg.name() })
                }
                Effect::Fetch { source, after_seq, kind, delay_ms, .. } => {
                    let process = self.nodes[&node].process;
                    let at_us = self.now_us + delay_ms * 1_000;
                    let patience_until_us = at_us + node::snapshot::SNAPSHOT_CHUNK_TIMEOUT.as_micros() as u64;
                    let id = self.next_id;
                    self.next_id += 1;
                    let f = PendingFetch {
                        id,
                        node,
                        process,
                        partition,
                        source,
                        after_seq,
                        kind,
                        at_us,
                        patience_until_us,
                    };
                    self.fetches.push(f);
                    self.stats.fetches += 1;
                }
                Effect::Recover { restart } => {
                    self.stats.recoveries += 1;
                    self.checker.failed_over.insert(partition);
                    if matches!(restart, node::fullstack::Restart::OwnLog) {
                        self.checker.recovered.insert(partition);
                    }
                    self.checker.forget(node, Some(partition));
                    if let node::fullstack::Restart::Image(_) = restart {
                        self.stats.base_backups += 1;
                    }
                    self.trace_line(|| {
                        format!("node {node} restarts p{partition}'s database: {}", restart_name(&restart))
                    });
                    let recovered = self.disks.recover(node, partition, &restart);
                    let Some(m) = self.node_mut(node).partitions.get_mut(&partition) else { return };
                    queue.extend(m.on_recovered(recovered));
                }
                Effect::Ready { .. } | Effect::Stopped { .. } => {}
                Effect::Failed { reason } => {
                    self.trace_line(|| format!("node {node} gives up rejoining p{partition}: {reason}"));
                    self.stats.rejoins_given_up += 1;
                }
                // A stopped partition's replica refuses late batches and shipments: expected.
                Effect::Refused { error: node::ReplicaError::Stopped { .. }, .. } => {}
                Effect::Refused { error, rejoining: false } => {
                    self.trace_line(|| format!("VIOLATION node {node} p{partition}: {error}"));
                    self.violations.push(Violation::Refused { node, partition, error })
                }
                Effect::Refused { error, rejoining: true } => {
                    self.trace_line(|| format!("VIOLATION node {node} p{partition} (rejoining): {error}"));
                    self.violations.push(Violation::RefusedRejoining { node, partition, error })
                }
            }
        }
        self.take_digest_copy(node, partition);
    }

    /// Takes the digest copy that node `node`'s replica of `partition` began, if any.
    fn take_digest_copy(&mut self, node: NodeId, partition: PartitionId) {
        let process = self.nodes[&node].process;
        let Some(m) = self.node_mut(node).partitions.get_mut(&partition) else { return };
        let (seq, copy) = match m.take_digest_copy() {
            Some((node::replica::DigestCopy::Rows { seq, sender }, _)) => (seq, DigestCopying::Rows(sender)),
            Some((node::replica::DigestCopy::Image { seq }, _)) => (seq, DigestCopying::Image(Vec::new())),
            None => return,
        };
        self.digest_copies.push(DigestInCopy { node, process, partition, seq, copy });
    }

    /// Moves each digest copy on by a seeded number of chunks (batches run in between: the
    /// copies race them), and reports each digest taken, or why none, to the coordinator as
    /// the node's executor does. A copy whose node crashed or restarted is dropped with it.
    fn progress_digest_copies(&mut self) {
        let mut i = 0;
        while i < self.digest_copies.len() {
            let steps = self.rng.below(3);
            let c = &mut self.digest_copies[i];
            let (node, partition, seq) = (c.node, c.partition, c.seq);
            let Some(n) = self.nodes.get_mut(&node).filter(|n| n.up && n.process == c.process) else {
                self.digest_copies.swap_remove(i);
                continue;
            };
            let replica = n.partitions.get_mut(&partition).and_then(Partition::executing_replica_mut);
            let outcome = match replica {
                None => Some(Err("the replica is rejoining".to_string())),
                Some(r) if r.stopped().is_some() => Some(Err("stopped".to_string())),
                Some(r) => {
                    let raced = r.applied_seq() > seq;
                    let outcome = step_digest_copy(&mut c.copy, r, steps);
                    if raced && matches!(outcome, Some(Ok(_))) {
                        self.stats.digest_copies_raced += 1;
                    }
                    outcome
                }
            };
            let Some(digest) = outcome else {
                i += 1;
                continue;
            };
            self.digest_copies.swap_remove(i);
            match &digest {
                Ok(_) => self.stats.digest_copies += 1,
                Err(_) => self.stats.digest_copies_refused += 1,
            }
            let now = self.now_us;
            let msg = NodeToCoordinator::StateDigest { partition, seq, digest };
            let effects = self.node_mut(node).machine.on_emit(node::replica::Emit::ToCoordinator(msg), now);
            self.perform(node, effects);
        }
    }

    /// Completes the fetches that can complete now: a copy once its source executed up to the
    /// plan's point (and is not parked at a home piece: a half-run batch is not copied), a
    /// log base once its primary took one that far; a fetch from a source that is gone, or
    /// cannot serve, fails (and the rejoining machine retries or gives up).
    fn progress_fetches(&mut self) {
        self.drop_orphan_copies();
        let mut i = 0;
        while i < self.fetches.len() {
            let f = self.fetches[i];
            let fetcher = &self.nodes[&f.node];
            if !fetcher.up || fetcher.process != f.process {
                self.fetches.swap_remove(i);
                continue;
            }
            if f.at_us > self.now_us {
                i += 1;
                continue;
            }
            let outcome = match self.try_fetch(f) {
                Some(outcome) => outcome,
                None if self.now_us >= f.patience_until_us => {
                    Err(RejoinError::Transfer(TransferError::Recv(wire::endpoint::RecvError::Timeout {
                        peer: format!("node {}", f.source),
                        what: "a transfer piece",
                        timeout: node::snapshot::SNAPSHOT_CHUNK_TIMEOUT,
                    })))
                }
                None => {
                    i += 1;
                    continue;
                }
            };
            self.fetches.swap_remove(i);
            if outcome.is_err() {
                self.stats.fetches_failed += 1;
            }
            let Some(m) = self.node_mut(f.node).partitions.get_mut(&f.partition) else { continue };
            let effects = m.on_fetched(f.source, outcome);
            self.perform_partition(f.node, f.partition, effects);
        }
    }

    /// The outcome of fetch `f` now, or `None` while its source is to be waited for.
    fn try_fetch(&mut self, f: PendingFetch) -> Option<Result<Fetched, RejoinError>> {
        let refused = |reason: &str| {
            Some(Err(RejoinError::Transfer(node::TransferError::Refused {
                peer: format!("node {}", f.source),
                reason: reason.to_string(),
            })))
        };
        let src = self.nodes.get_mut(&f.source).filter(|s| s.up);
        let Some(r) = src.and_then(|s| s.partitions.get_mut(&f.partition)).and_then(Partition::replica_mut) else {
            return refused("the source does not serve the partition");
        };
        if r.stopped().is_some() {
            return refused("stopped");
        }
        match f.kind {
            FetchKind::Copy if matches!(r.store_mut(), Store::Lean(_)) => self.step_copy(f),
            FetchKind::Copy => {
                if r.parked_at().is_some() || r.applied_seq() < f.after_seq {
                    return None;
                }
                // The source's digest closes the stream and the joiner checks its copy against
                // it, as `node::snapshot::snapshot_after` does. Two full digests per rejoin
                // are the simulator's largest cost, so that check runs under
                // `debug_assertions` only; the final convergence check compares every
                // replica's digest in every build.
                let digest = cfg!(debug_assertions).then(|| r.state_digest());
                match snapshot_copy(f.source, r, digest) {
                    Ok((db, info)) => Some(Ok(Fetched::Copy { db: Box::new(db), info })),
                    Err(e) => {
                        let error = std::sync::Arc::new(e);
                        self.violations.push(Violation::BadSnapshot { node: f.node, partition: f.partition, error });
                        refused("the copy did not arrive whole")
                    }
                }
            }
            FetchKind::LogBase | FetchKind::BaseBackup => {
                if r.role() == ReplicaRole::Backup {
                    return refused("a backup has no log base");
                }
                let base = r.log_base().filter(|b| b.seq >= f.after_seq)?.clone();
                let (base, image) = match base.read(f.kind == FetchKind::BaseBackup) {
                    Ok(read) => read,
                    Err(e) => return refused(&format!("cannot read the log base: {e}")),
                };
                let copy = log_base_copy(f.source, f.partition, &base, image.as_deref());
                Some(copy.map(Fetched::LogBase).map_err(RejoinError::Transfer))
            }
        }
    }

    /// Copies under way whose fetch is gone (the joiner crashed, gave up, or started over):
    /// dropped, and their source's copy with them.
    fn drop_orphan_copies(&mut self) {
        let live: std::collections::BTreeSet<u64> = self.fetches.iter().map(|f| f.id).collect();
        let orphans: Vec<u64> = self.copies.keys().filter(|id| !live.contains(id)).copied().collect();
        for id in orphans {
            let c = self.copies.remove(&id).expect("listed above");
            self.stats.copies_cut += 1;
            let Some(src) = self.nodes.get_mut(&c.source).filter(|s| s.up && s.process == c.source_process) else {
                continue;
            };
            for m in src.partitions.values_mut() {
                if let Some(Store::Lean(db)) = m.replica_mut().map(Replica::store_mut) {
                    if c.sender.is_copying(db) {
                        db.abort_copy();
                    }
                }
            }
        }
    }

    /// Moves fetch `f`'s copy from a lean source on by a seeded number of chunks, beginning it
    /// once the source executed up to the plan's point (and is not parked at a home piece):
    /// the fetched copy once its end arrived, `None` while it goes on.
    fn step_copy(&mut self, f: PendingFetch) -> Option<Result<Fetched, RejoinError>> {
        let refused = |reason: &str| {
            Some(Err(RejoinError::Transfer(node::TransferError::Refused {
                peer: format!("node {}", f.source),
                reason: reason.to_string(),
            })))
        };
        // A chunk at every other step of time, on average: the source executes batches in
        // between, so copies race them.
        let steps = self.rng.below(2);
        let Sim { nodes, copies, next_id, violations, stats, .. } = self;
        let src = nodes.get_mut(&f.source).filter(|s| s.up)?;
        let source_process = src.process;
        let r = src.partitions.get_mut(&f.partition).and_then(Partition::replica_mut)?;
        let (seq, at_boundary) = (r.applied_seq(), r.parked_at().is_none());
        let Store::Lean(db) = r.store_mut() else { return refused("not a lean replica") };
        let Some(c) = copies.get_mut(&f.id) else {
            if !at_boundary || seq < f.after_seq {
                return None;
            }
            *next_id += 1;
            // `None`: the source is being copied for another joiner; this one waits.
            let sender = node::snapshot::CopySender::begin(db, *next_id, 1, f.partition, seq, SIM_COPY_FRAME_BYTES)?;
            let receiver = node::snapshot::SnapshotReceiver::new(f.partition, format!("node {}", f.source));
            let db = engine::LeanDb::new();
            let c = InCopy { source: f.source, source_process, begun_seq: seq, sender, receiver, db };
            copies.insert(f.id, c);
            return None;
        };
        if c.source_process != source_process || !c.sender.is_copying(db) {
            copies.remove(&f.id);
            stats.copies_cut += 1;
            return refused("the source's state was replaced");
        }
        for _ in 0..steps {
            let node::snapshot::CopyNext::Chunk(chunk) = c.sender.next(db) else { return None };
            match c.receiver.accept(chunk, &mut c.db) {
                Ok(None) => {}
                Ok(Some(info)) => {
                    let c = copies.remove(&f.id).expect("under way");
                    stats.copies += 1;
                    stats.copies_raced += u64::from(seq > c.begun_seq);
                    return Some(Ok(Fetched::Copy { db: Box::new(c.db), info }));
                }
                Err(e) => {
                    copies.remove(&f.id);
                    if matches!(e, TransferError::Refused { .. }) {
                        return Some(Err(RejoinError::Transfer(e)));
                    }
                    let error = std::sync::Arc::new(SimError::Transfer(e));
                    violations.push(Violation::BadSnapshot { node: f.node, partition: f.partition, error });
                    return refused("the copy did not arrive whole");
                }
            }
        }
        None
    }

    /// Every replica catching up after its copy executes a seeded slice of what it holds.
    fn progress_catch_ups(&mut self) {
        let catching: Vec<(NodeId, PartitionId)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.up)
            .flat_map(|(&id, n)| n.partitions.iter().filter(|(_, m)| m.catching_up()).map(move |(&p, _)| (id, p)))
            .collect();
        for (node, partition) in catching {
            let slice = 1 + self.rng.below(node::machine::CATCH_UP_SLICE_IDLE as u64) as usize;
            let Some(m) = self.node_mut(node).partitions.get_mut(&partition) else { continue };
            let effects = m.catch_up(slice, true);
            self.perform_partition(node, partition, effects);
        }
    }

    /// Advances time by `us`: nodes' machines tick (heartbeats, redials), the coordinator
    /// ticks, fetches that waited complete.
    pub fn advance(&mut self, us: u64) {
        self.now_us += us;
        let now = self.now_us;
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            let n = &self.nodes[&id];
            if !n.up || n.machine.next_deadline_us() > now {
                continue;
            }
            let applied: BTreeMap<PartitionId, Seq> =
                n.partitions.iter().filter_map(|(&p, m)| m.replica().map(|r| (p, r.applied_seq()))).collect();
            let muted = now < n.mute_until_us;
            let mut effects = self.node_mut(id).machine.tick(now, |p| applied.get(&p).copied());
            if muted {
                effects.retain(|e| !matches!(e, NodeEffect::ToCoordinator { .. }));
            }
            self.perform(id, effects);
        }
        let due: Vec<CoordinatorId> = self
            .coordinators
            .iter()
            .filter(|(_, sc)| sc.carrier.as_ref().and_then(Carrier::next_deadline_us).is_some_and(|d| d <= now))
            .map(|(&c, _)| c)
            .collect();
        for c in due {
            self.tick_coordinator(c);
        }
        // A drawn coordinator fault ends by itself; one a test made lasts until it ends it.
        if self.coordinator_fault_until_us != 0 && now >= self.coordinator_fault_until_us {
            self.coordinator_fault_until_us = 0;
            self.end_coordinator_fault();
        }
        self.progress_fetches();
        self.progress_catch_ups();
        self.progress_digest_copies();
    }

    /// Coordinator `c`'s clock ticks (it runs).
    fn tick_coordinator(&mut self, c: CoordinatorId) {
        self.with_carrier(c, |k, now, links| k.tick(now, links));
    }

    /// A client submits the generator's next transaction, to the coordinator that leads (a
    /// client knows every coordinator and finds the leader), or, with none leading, to one
    /// that runs (which answers "not the leader").
    pub fn submit(&mut self, client: ClientId) {
        let input: TxnInput = self.generator.next((self.now_us / 1_000_000) as i64);
        let request_id = self.inputs.len() as u64;
        self.inputs.push(input);
        self.answered.push(false);
        let up: Vec<CoordinatorId> =
            self.coordinators.iter().filter(|(_, sc)| sc.carrier.is_some()).map(|(&c, _)| c).collect();
        let target = match self.leader() {
            Some((c, _)) => c,
            None if up.is_empty() => {
                // No coordinator runs: the client cannot connect, and knows of no leader.
                let reply = wire::messages::ClientReply {
                    request_id,
                    result: ClientResult::Rejected(wire::messages::Rejection::NotLeader { leader: None }),
                };
                return self.answer(CoordinatorId::MAX, client, reply);
            }
            None => up[self.rng.below(up.len() as u64) as usize],
        };
        let sc = self.coordinators.get_mut(&target).expect("chosen among them");
        sc.open.insert((client, request_id));
        let msg = wire::channel::ClientToCoordinator::ClientRequests(vec![wire::messages::ClientRequest {
            request_id,
            input,
        }]);
        self.with_carrier(target, |k, now, links| k.on_client_message(client, msg, now, links));
    }

    // ----- faults -----

    /// One line of `--trace` output (built only when tracing).
    fn trace_line(&self, line: impl FnOnce() -> String) {
        if self.trace {
            eprintln!("{:>10} µs step {:>6}: {}", self.now_us - START_US, self.step, line());
        }
    }

    fn trace_fault(&self, what: &str, node: NodeId) {
        if self.trace {
            eprintln!("{:>10} µs step {:>6}: FAULT {what} node {node}", self.now_us - START_US, self.step);
        }
    }

    /// Crashes `node`'s process: its memory and its links' messages are lost; a full-stack
    /// replica's log loses its unsynced tail (or keeps a torn part of it).
    pub fn crash(&mut self, node: NodeId) {
        self.trace_fault("crash", node);
        let n = &self.nodes[&node];
        if !n.up {
            return;
        }
        if n.partitions.values().any(|m| m.standing() != Standing::Serving) {
            self.stats.crashes_while_rejoining += 1;
        }
        let source_of_rejoin = self
            .nodes
            .values()
            .any(|other| other.up && other.partitions.values().any(|m| m.plan().is_some_and(|(src, _)| src == node)));
        if source_of_rejoin {
            self.stats.crashes_of_rejoin_source += 1;
        }
        // Power goes first: nothing the dying process does reaches its disk.
        let torn = self.rng.below(2) == 0;
        let rng = &mut self.rng;
        self.disks.crash(node, || if torn { rng.below(TORN_BYTES_MAX + 1) as usize } else { 0 });
        let process = self.nodes[&node].process;
        let held =
            self.nodes[&node].partitions.iter().filter_map(|(&p, m)| Some((p, m.replica()?.last_ts()?))).collect();
        self.checker.crashed(node, process, held);
        let n = self.node_mut(node);
        n.up = false;
        n.partitions.clear();
        n.peers.clear();
        let links: Vec<u64> = n.links.values().map(|l| l.id).collect();
        for l in n.links.values_mut() {
            l.alive = false;
        }
        let process = n.process;
        for link in links {
            self.net.cut(node, link, None);
        }
        self.net.cut(node, process, None);
        self.stats.crashes += 1;
    }

    /// Breaks `node`'s coordinator link (a drop): what was in flight on it is lost, the
    /// coordinator counts the node failed at once, and the node's machine dials again
    /// after `CONNECT_RETRY_MS` — its partitions then rejoin.
    pub fn drop_link(&mut self, node: NodeId) {
        self.trace_fault("drop the leader link of", node);
        let Some((c, _)) = self.leader() else { return };
        if !self.end_link(node, c) {
            return;
        }
        self.stats.drops += 1;
        let how = "the simulated link broke".to_string();
        let conn = self.nodes[&node].links[&c].id;
        let detection = coordinator::Detection::ConnectionLost { how };
        self.with_carrier(c, |k, now, links| k.on_node_lost(node, conn, detection, now, links));
    }
    /// The node's machine dials the coordinator again: a new link (the coordinator's process
    /// declares a node it still counts live failed first, as it does when a node connects
    /// again).
    fn reconnect(&mut self, node: NodeId, c: CoordinatorId) {
        self.trace_fault(&format!("reconnect to coordinator {c}"), node);
        let now = self.now_us;
        if !self.is_coordinator_up(c) {
            self.node_mut(node).machine.on_dial_failed(c, now);
            return;
        }
        let link = self.fresh_id();
        let n = self.node_mut(node);
        let old = n.links.insert(c, CoordLink { id: link, alive: true }).map(|l| l.id);
        if let Some(old) = old {
            self.net.cut(node, old, None);
        }
        self.stats.reconnects += 1;
        let effects = self.node_mut(node).machine.on_link_up(c, now);
        self.perform(node, effects);
        self.connected(node, c);
    }

    /// Node `node` connected to coordinator `c` (a new connection: a coordinator that still
    /// counts the node live declares it failed first, as its process does when a node
    /// connects again): a leader tells it the epoch and its memberships.
    fn connected(&mut self, node: NodeId, c: CoordinatorId) {
        let conn = self.nodes[&node].links[&c].id;
        self.with_carrier(c, |k, now, links| k.on_node_up(node, conn, now, links));
    }

    /// `node`'s replica of `partition` drops its state and rejoins, if it serves (the leader's
    /// membership left it out).
    fn rejoin_one(&mut self, node: NodeId, partition: PartitionId) {
        let (mode, pending) = (self.mode, self.pending_max);
        let serving = self.nodes[&node].partitions.get(&partition).is_some_and(|m| m.standing() == Standing::Serving);
        if !serving {
            return;
        }
        self.trace_line(|| format!("node {node} is left out of p{partition}'s membership: it rejoins"));
        self.checker.forget(node, Some(partition));
        let process = self.nodes[&node].process;
        self.fetches.retain(|f| !(f.node == node && f.process == process && f.partition == partition));
        let (fresh, effects) = Partition::rejoining(mode, node, partition, pending);
        drop(self.node_mut(node).partitions.insert(partition, digesting(fresh)));
        self.perform_partition(node, partition, effects);
    }
    /// Every partition of `node` drops its state and rejoins (its link came back).
    fn rejoin_all(&mut self, node: NodeId) {
        let (mode, pending) = (self.mode, self.pending_max);
        let pids: Vec<PartitionId> = self.nodes[&node].partitions.keys().copied().collect();
        let process = self.nodes[&node].process;
        self.fetches.retain(|f| !(f.node == node && f.process == process));
        self.checker.forget(node, None);
        for p in pids {
            let (fresh, effects) = Partition::rejoining(mode, node, p, pending);
            // The old state (a full stack's database) goes first.
            drop(self.node_mut(node).partitions.insert(p, digesting(fresh)));
            self.perform_partition(node, p, effects);
        }
    }

    /// Suppresses `node`'s heartbeats for `us`.
    pub fn mute(&mut self, node: NodeId, us: u64) {
        self.trace_fault(&format!("mute heartbeats for {us} µs of"), node);
        let until = self.now_us + us;
        self.node_mut(node).mute_until_us = until;
        self.stats.mutes += 1;
    }

    /// Whether `node`'s process runs with its coordinator link broken: its machine dials
    /// again by itself (no operator restarts it).
    pub fn is_redialing(&self, node: NodeId) -> bool {
        let n = &self.nodes[&node];
        n.up && self.leader().is_some_and(|(c, _)| n.links.get(&c).is_some_and(|l| !l.alive))
    }
    /// Whether `node` may be restarted: the coordinator counts it failed.
    pub fn can_restart(&self, node: NodeId) -> bool {
        self.leader().is_some_and(|(_, c)| !c.is_node_live(node))
    }
    /// Restarts `node` (`glass node --rejoin`): its old process, if any, is gone; the new
    /// one connects on a new link, empty (full stack: with its log as the disk kept it), and
    /// asks to rejoin each of its partitions.
    ///
    /// Panics unless [`Sim::can_restart`].
    pub fn restart(&mut self, node: NodeId) {
        assert!(self.can_restart(node), "node {node} is live: the coordinator would refuse its new connection");
        self.trace_fault("restart", node);
        if self.nodes[&node].up {
            // The old process is killed first (its unsynced log tail goes with it).
            self.crash(node);
            self.stats.crashes -= 1;
        }
        let process = self.fresh_id();
        let now = self.now_us;
        let roles = roles(&self.config, node, true);
        let mut machine = NodeMachine::new(&self.config, node, &roles, now);
        let mut links = BTreeMap::new();
        for c in self.coordinator_ids() {
            let alive = self.is_coordinator_up(c);
            if alive {
                let first = machine.on_link_up(c, now);
                debug_assert!(first.is_empty());
            } else {
                machine.on_dial_failed(c, now);
            }
            links.insert(c, CoordLink { id: self.fresh_id(), alive });
        }
        let n = self.node_mut(node);
        n.up = true;
        n.process = process;
        n.links = links;
        n.mute_until_us = 0;
        n.machine = machine;
        n.partitions.clear();
        n.peers.clear();
        let (mode, pending) = (self.mode, self.pending_max);
        for (p, _) in roles {
            let (m, effects) = Partition::rejoining(mode, node, p, pending);
            self.node_mut(node).partitions.insert(p, digesting(m));
            self.perform_partition(node, p, effects);
        }
        for c in self.coordinator_ids() {
            self.connected(node, c);
        }
        self.stats.restarts += 1;
    }

    /// Whether some node other than `node` serves every partition solidly: its process runs,
    /// its link is connected, its heartbeats flow, and the coordinator counts it a live
    /// replica of each (a replica that just rejoined counts: if every replica a pending batch
    /// was sent to fails, the rejoined one's results decide it, or it is answered "outcome
    /// unknown"). Faults are drawn only when this holds, so that a partition never loses
    /// every replica (active-active keeps no log: such a partition could not come back, which
    /// is the replication factor's promise, not something to test).
    pub fn others_solid(&self, node: NodeId) -> bool {
        let Some((_, c)) = self.leader() else { return false };
        c.status().iter().all(|st| st.live_replicas.iter().any(|&m| m != node && self.solid(m, st.partition)))
    }
    /// Whether node `m`'s process runs, its link is connected, its heartbeats flow, the
    /// coordinator counts it live, and its replica of `partition` serves.
    fn solid(&self, m: NodeId, partition: PartitionId) -> bool {
        let n = &self.nodes[&m];
        self.is_healthy(m)
            && self.now_us >= n.mute_until_us
            && n.partitions.get(&partition).and_then(Partition::replica).is_some_and(|r| r.stopped().is_none())
    }
    /// Whether a fault may be drawn on `node` now: [`Sim::others_solid`], and in the passive
    /// modes every other replica of every partition solid and counted: a promotion drops the
    /// backups it does not promote (docs/design.md §10: a promoted backup ships to no one
    /// until the others rejoin), so a second fault while one is being handled could take a
    /// partition's last replica — the replication factor's promise again, not a defect.
    pub fn may_fault(&self, node: NodeId) -> bool {
        if !self.others_solid(node) {
            return false;
        }
        if !self.mode.is_passive() {
            return true;
        }
        let Some((_, c)) = self.leader() else { return false };
        let status = c.status();
        self.config.partitions.iter().all(|p| {
            let Some(st) = status.iter().find(|st| st.partition == p.id) else { return false };
            p.replicas.iter().all(|&m| m == node || (st.live_replicas.contains(&m) && self.solid(m, p.id)))
        })
    }

    /// Maybe one node fault, drawn from the seed at the configured rates.
    fn maybe_fault(&mut self) {
        if !self.faults.any_node_faults() {
            return;
        }
        self.maybe_coordinator_fault();
        // Node faults wait while a coordinator fault or a take-over is under way: the default
        // cluster promises to survive one process lost at a time (docs/cluster.md).
        if self.coordinator_faulty() || !self.coordinators_settled() {
            return;
        }
        let f = self.faults;
        let roll = self.rng.below(10_000);
        let ids = self.node_ids();
        let node = ids[self.rng.below(ids.len() as u64) as usize];
        let mut at = f.crash_per_10k;
        if roll < at {
            if self.nodes[&node].up && self.may_fault(node) {
                self.crash(node);
            }
            return;
        }
        at += f.drop_per_10k;
        if roll < at {
            if self.may_fault(node) {
                self.drop_link(node);
            }
            return;
        }
        at += f.mute_per_10k;
        if roll < at {
            if self.nodes[&node].up && self.may_fault(node) {
                let timeout_us = self.config.timeouts.failure_timeout_ms * 1_000;
                let us = self.rng.uniform(timeout_us / 2, 3 * timeout_us);
                self.mute(node, us);
            }
            return;
        }
        at += f.restart_per_10k;
        if roll < at && !self.is_healthy(node) && !self.is_redialing(node) && self.can_restart(node) {
            self.restart(node);
        }
    }

    // ----- coordinator faults (docs/design.md §11) -----

    /// Crashes coordinator `c`'s process: its memory goes (its stored group state stays),
    /// its links break — its nodes see them close, and its clients' requests in flight are
    /// answered "outcome unknown" by their client library.
    pub fn crash_coordinator(&mut self, c: CoordinatorId) {
        if !self.is_coordinator_up(c) {
            return;
        }
        if self.trace {
            eprintln!("{:>10} µs step {:>6}: FAULT crash coordinator {c}", self.now_us - START_US, self.step);
        }
        let now = self.now_us;
        let sc = self.coordinators.get_mut(&c).expect("configured");
        sc.carrier = None;
        let open: Vec<(ClientId, u64)> = std::mem::take(&mut sc.open).into_iter().collect();
        for (client, request_id) in open {
            let reason = format!("the connection to coordinator {c} was lost");
            let result = ClientResult::OutcomeUnknown { ts: wire::messages::Timestamp(0), reason };
            self.answer(c, client, wire::messages::ClientReply { request_id, result });
        }
        for node in self.node_ids() {
            let n = self.node_mut(node);
            let Some(l) = n.links.get_mut(&c).filter(|l| l.alive) else { continue };
            l.alive = false;
            let link = l.id;
            if n.up {
                n.machine.on_link_lost(c, now);
            }
            self.net.cut(node, link, None);
        }
        self.stats.coordinator_crashes += 1;
    }

    /// Restarts coordinator `c` from the group state it stored; the nodes dial it again on
    /// their own.
    pub fn restart_coordinator(&mut self, c: CoordinatorId) {
        if self.is_coordinator_up(c) {
            return;
        }
        if self.trace {
            eprintln!("{:>10} µs step {:>6}: FAULT restart coordinator {c}", self.now_us - START_US, self.step);
        }
        let process = self.fresh_id();
        let now = self.now_us;
        let sc = &self.coordinators[&c];
        let carrier = Carrier::new(&self.config, c, sc.election_offset_ticks, sc.stored.clone(), now)
            .expect("a coordinator restarts from what it stored");
        let sc = self.coordinators.get_mut(&c).expect("configured");
        sc.carrier = Some(carrier);
        sc.process = process;
        self.tick_coordinator(c);
    }

    /// Cuts coordinator `c` off from the other coordinators (raft messages lost), both ways
    /// or, `one_way`, only what it sends; its node links stay up — a split brain's setting.
    pub fn cut_coordinator(&mut self, c: CoordinatorId, one_way: bool) {
        if self.trace {
            let how = if one_way { "what it sends" } else { "both ways" };
            eprintln!("{:>10} µs step {:>6}: FAULT cut coordinator {c} off, {how}", self.now_us - START_US, self.step);
        }
        for o in self.coordinator_ids().into_iter().filter(|&o| o != c) {
            self.coordinator_cuts.insert((c, o));
            if !one_way {
                self.coordinator_cuts.insert((o, c));
            }
        }
        self.stats.coordinator_cuts += 1;
    }

    /// Whether a coordinator fault is under way: one down, or cuts between them.
    pub fn coordinator_faulty(&self) -> bool {
        !self.coordinator_cuts.is_empty() || self.coordinators.values().any(|sc| sc.carrier.is_none())
    }

    /// Ends the coordinator fault: cuts healed, a crashed coordinator restarted.
    pub fn end_coordinator_fault(&mut self) {
        if !self.coordinator_faulty() {
            return;
        }
        self.coordinator_cuts.clear();
        for c in self.coordinator_ids() {
            self.restart_coordinator(c);
        }
    }

    /// Whether the group has a leader that took over and no take-over is under way.
    pub fn coordinators_settled(&self) -> bool {
        self.leader().is_some() && self.coordinators.values().all(|sc| sc.member().is_none_or(|m| !m.taking_over()))
    }

    /// Maybe one coordinator fault, drawn from the seed at the configured rate: only with
    /// three or more coordinators, one at a time, on a settled cluster.
    fn maybe_coordinator_fault(&mut self) {
        let f = self.faults;
        if f.coordinator_per_10k == 0 || self.coordinators.len() < 3 {
            return;
        }
        if self.rng.below(10_000) >= f.coordinator_per_10k {
            return;
        }
        if self.coordinator_faulty() || !self.coordinators_settled() {
            return;
        }
        let all_solid =
            self.node_ids().iter().all(|&n| self.is_full_member(n) && self.now_us >= self.nodes[&n].mute_until_us);
        if !all_solid {
            return;
        }
        let ids = self.coordinator_ids();
        // The leader half the time: its loss is the interesting one.
        let c = match (self.rng.below(2), self.leader()) {
            (0, Some((l, _))) => l,
            _ => ids[self.rng.below(ids.len() as u64) as usize],
        };
        let timeout_us = self.config.timeouts.failure_timeout_ms * 1_000;
        self.coordinator_fault_until_us = self.now_us + self.rng.uniform(timeout_us, 6 * timeout_us);
        match self.rng.below(3) {
            0 => self.crash_coordinator(c),
            1 => self.cut_coordinator(c, false),
            _ => self.cut_coordinator(c, true),
        }
    }

    // ----- running -----

    /// `steps` random actions — submit, deliver, let time pass — and, at the configured
    /// rates, node faults.
    pub fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            self.step += 1;
            self.net.release(self.step);
            match self.rng.below(10) {
                0..=2 => {
                    if self.submitting && self.rng.below(DIGEST_REQUEST_ONE_IN) == 0 {
                        self.ask_digests();
                    } else if self.submitting {
                        let client = self.rng.below(CLIENTS);
                        self.submit(client);
                    }
                }
                3..=7 => {
                    self.deliver_one();
                    self.progress_fetches();
                    self.progress_digest_copies();
                }
                _ => {
                    let us = self.rng.below(STEP_US_MAX);
                    self.advance(us);
                }
            }
            self.maybe_fault();
            self.check_step();
        }
    }

    /// Stops drawing faults (of the network too) from here on.
    pub fn calm(&mut self) {
        self.faults = Faults::NONE;
        self.end_coordinator_fault();
        self.net.release_all();
        for n in self.nodes.values_mut() {
            n.mute_until_us = 0;
        }
    }

    /// Delivers everything (no faults), letting batches close, until nothing moves: nothing
    /// deliverable in flight and nothing in flight at the coordinator.
    pub fn drain(&mut self) -> Result<(), SimError> {
        let faults = self.faults;
        self.faults.net = NetFaults::CALM;
        self.net.release_all();
        let mut drained = false;
        for _ in 0..DRAIN_DELIVERIES_MAX {
            let settled = self.leader().is_some_and(|(_, c)| c.status().iter().all(|p| p.inflight_txns == 0));
            if self.net.all(|e| !self.deliverable(e)) && settled && self.digest_copies.is_empty() {
                self.net.clear();
                drained = true;
                break;
            }
            self.deliver_one();
            self.progress_fetches();
            self.progress_digest_copies();
            self.advance(DRAIN_STEP_US);
            self.check_step();
        }
        self.faults = faults;
        if drained {
            return Ok(());
        }
        let in_flight = std::cell::Cell::new(0);
        let _ = self.net.all(|e| {
            in_flight.set(in_flight.get() + usize::from(self.deliverable(e)));
            true
        });
        let in_flight = in_flight.get();
        Err(SimError::NotDrained {
            deliveries: DRAIN_DELIVERIES_MAX,
            in_flight,
            nodes: self.node_reports(),
            coordinator: self.leader().map(|(_, c)| c.status()).unwrap_or_default(),
        })
    }

    /// A tool asks the leading coordinator, if any, for a random partition's state digests
    /// while the clients submit: the replicas' digest copies race the batches after it. The
    /// answer is kept with the others; digests that differ stop the partition (an alarm).
    fn ask_digests(&mut self) {
        let partitions: Vec<PartitionId> = self.config.partitions.iter().map(|p| p.id).collect();
        let partition = partitions[self.rng.below(partitions.len() as u64) as usize];
        let request_id = self.next_digest_request;
        self.next_digest_request += 1;
        let Some((c, _)) = self.leader() else { return };
        let msg = wire::channel::ClientToCoordinator::DigestRequest { request_id, partition };
        self.stats.digest_requests += 1;
        self.with_carrier(c, |k, now, links| k.on_client_message(DIGEST_CLIENT, msg, now, links));
    }

    /// Asks the coordinator for `partition`'s digests through the ordered path and drains.
    pub fn digests(&mut self, partition: PartitionId) -> Result<DigestOutcome, SimError> {
        let request_id = self.next_digest_request;
        self.next_digest_request += 1;
        // Asked of the coordinator that leads once the cluster settled.
        self.drain()?;
        let Some((c, _)) = self.leader() else { return Err(SimError::NoDigestReply { partition }) };
        let msg = wire::channel::ClientToCoordinator::DigestRequest { request_id, partition };
        self.with_carrier(c, |k, now, links| k.on_client_message(DIGEST_CLIENT, msg, now, links));
        self.drain()?;
        self.digest_replies.remove(&request_id).ok_or(SimError::NoDigestReply { partition })
    }

    /// The lean database of `partition`'s replica on `node`, if it serves.
    pub fn db_mut(&mut self, node: NodeId, partition: PartitionId) -> Option<&mut engine::LeanDb> {
        match self.replica_mut(node, partition)?.store_mut() {
            Store::Lean(db) => Some(db),
            Store::Full(_) => None,
        }
    }
}

/// A copy of replica `r`'s partition (on node `source`) as a rejoin takes it: streamed as
/// snapshot chunks (`node::snapshot::stream`, closing with `digest`) and received by
/// `node::snapshot::SnapshotReceiver` into a fresh database, every chunk checked as a
/// rejoining node checks it — and, given the source's `digest`, the copy's digest against it;
/// without one the stream closes with a zero digest the receiver is told to trust.
fn snapshot_copy(
    source: NodeId,
    r: &mut Replica,
    digest: Option<wire::messages::StateDigest>,
) -> Result<(engine::LeanDb, SnapshotInfo), SimError> {
    let (partition, seq) = (r.partition(), r.applied_seq());
    let trust = digest.is_none();
    let digest = digest.unwrap_or(wire::messages::StateDigest(0));
    let mut chunks = Vec::new();
    let mut keep = |m| {
        chunks.push(m);
        true
    };
    match r.store_mut() {
        Store::Lean(db) => node::snapshot::stream(db, 1, partition, seq, digest, 1 << 22, &mut keep),
        Store::Full(f) => node::snapshot::stream(f.session(), 1, partition, seq, digest, 1 << 22, &mut keep),
    };
    let mut copy = engine::LeanDb::new();
    let mut receiver = node::snapshot::SnapshotReceiver::new(partition, format!("node {source}"));
    if trust {
        receiver = receiver.trusting_digest();
    }
    for c in chunks {
        if let Some(info) = receiver.accept(c, &mut copy)? {
            return Ok((copy, info));
        }
    }
    Err(SimError::Transfer(closed(source)))
}

/// A full-stack primary's log base as a rejoining backup receives it: cut into pieces
/// (`node::snapshot::log_base_pieces`) and collected by `node::snapshot::LogBaseReceiver`,
/// every piece checked.
fn log_base_copy(
    source: NodeId,
    partition: PartitionId,
    base: &LogBase,
    image: Option<&[u8]>,
) -> Result<LogBaseReceived, TransferError> {
    let mut receiver =
        node::snapshot::LogBaseReceiver::new(partition, format!("node {source}"), base.seq, image.is_some());
    for piece in node::snapshot::log_base_pieces(base, image, 1, partition, 1 << 20) {
        if let Some(received) = receiver.accept(piece)? {
            return Ok(received);
        }
    }
    Err(closed(source))
}

/// How a node's database restarts, for the trace.
fn restart_name(restart: &node::fullstack::Restart) -> String {
    match restart {
        node::fullstack::Restart::OwnLog => "recovery from its own log".to_string(),
        node::fullstack::Restart::FollowBase { cut, start } => {
            format!("its own log cut at {cut:?} to follow the primary's log base from LSN {start}")
        }
        node::fullstack::Restart::Image(image) => format!("the primary's checkpoint image ({} bytes)", image.len()),
    }
}

fn closed(source: NodeId) -> TransferError {
    TransferError::Recv(wire::endpoint::RecvError::Closed { peer: format!("node {source}"), what: "a transfer piece" })
}
