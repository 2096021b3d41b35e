//! The simulated cluster: every coordinator's real [`Carrier`] — the process's own, with its
//! [`Member`] of the group (raft, and the real [`Coordinator`] in the leader) — and every
//! node's real [`Replica`]s, connected by the [`Network`], stepped one action at a time from a
//! seeded [`Rng`], with the invariants of [`invariants`] checked at every step. Around the
//! machines it models what the node processes do — heartbeats, link loss, crashes, restarts and
//! the rejoin protocol — after `node::process`, and it carries what each coordinator's carrier
//! asks of its links (docs/design.md §14).
//!
//! This file holds the [`Sim`] and the state of its simulated processes — nodes, coordinators,
//! and the fetches and copies under way — its construction, and a run's constants. `impl Sim`
//! is split by concern, each file stating what it owns and guarantees:
//! - `setup`: the simulated cluster's configuration ([`config`], [`config_for`],
//!   [`with_coordinators`]) and the [`Faults`] a run draws;
//! - `observe`: what tests and checkers look at — the run's counts ([`SimStats`]), the leader,
//!   the replicas, the answers;
//! - `links`: the coordinators' carriers and what they ask of their links, the clients'
//!   requests, and the delivery of the messages in flight;
//! - `perform`: a simulated node's world for the node's carrier (`node::carrier`), which carries
//!   its machines' effects as the node process does;
//! - `transfer`: a rejoining replica's fetches — copies that race their source's batches, log
//!   bases — its catching up, and the state digests taken from copies;
//! - `faults`: node and coordinator faults (crashes, drops, lost heartbeats, restarts, cuts),
//!   and when one may be drawn;
//! - `running`: a run's steps, time passing, draining, and digests on demand;
//! - `invariants`: the invariants checked at every step.
//!
//! Guarantees: everything is a function of the seed and the configuration; nothing here
//! decides what the cluster answers — the coordinator and replicas do; a replica error other
//! than "stopped" is recorded as a violation, never swallowed.
//!
//! [`Coordinator`]: coordinator::Coordinator

use std::collections::BTreeMap;

use coordinator::carrier::Carrier;
use coordinator::group::GroupState;
use coordinator::member::Member;
use coordinator::{ClientId, Event};
use engine::procedures::TxnInput;
use engine::rng::Rng;
use node::machine::{FetchKind, NodeMachine, PartitionMachine};
use node::replica::ReplicaRole;
use node::Replica;
use wire::channel::NodeToCoordinator;
use wire::config::{ClusterConfig, Mode};
use wire::messages::{ClientResult, CoordinatorId, DigestOutcome, Epoch, NodeId, PartitionId, Seq};
use workload::gen::{GenConfig, Generator, Profile};

mod faults;
mod invariants;
mod links;
mod observe;
mod perform;
mod running;
mod setup;
mod transfer;

pub use invariants::Invariant;
pub use observe::SimStats;
pub use setup::{config, config_for, with_coordinators, Faults};

use crate::disk::Disks;
use crate::error::Violation;
use crate::net::Network;
use crate::population;

/// The simulated clock's start: 2023-11-14, in microseconds since the Unix epoch.
pub const START_US: u64 = 1_700_000_000_000_000;
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

/// Where a shipment's acknowledgement goes: the primary's node and its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr {
    pub node: NodeId,
    pub process: u64,
}

/// A partition's machine as the simulator drives it.
type Partition = PartitionMachine<PeerAddr>;

/// `machine` as a node's executor equips it: taking the state digests a batch asks for from a
/// copy stepped while it executes on (a lean replica's rows, or a full-stack replica's page
/// image, which the simulator rebuilds in place once it is whole, where a node has a thread do
/// it), and abandoning a fetch after `config`'s `timeouts.transfer_patience_ms`.
fn equipped(machine: Partition, config: &ClusterConfig) -> Partition {
    machine.digesting_by_copy().with_transfer_patience(config.timeouts.transfer_patience_ms)
}

/// A fetch a rejoining replica started (`node::machine::Effect::Fetch`), not yet completed.
#[derive(Debug, Clone, Copy)]
struct PendingFetch {
    /// The simulator's name for the fetch (its copy under way, if any, is filed under it).
    id: u64,
    /// The partition machine's name for it (`node::machine::FetchOrder::id`).
    order: u64,
    node: NodeId,
    /// The fetching process: a fetch dies with it.
    process: u64,
    partition: PartitionId,
    source: NodeId,
    after_seq: Seq,
    kind: FetchKind,
    /// Not before this time (a retry's delay).
    at_us: u64,
}

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
    /// Chunks received so far (the joiner's machine hears of each: its patience).
    chunks: u64,
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
    /// The peer links this process opened, by backup node.
    peers: BTreeMap<NodeId, SimPeer>,
    /// When the process listens for other nodes from (a dial of it before fails): at the
    /// cluster's start, possibly late (`Faults::late_listen_per_10k`); a restarted process
    /// listens before it connects to the coordinators.
    listening_from_us: u64,
}

/// A link a node process opened to a backup's node (`NodeEffect::OpenPeer`).
#[derive(Debug, Clone)]
struct SimPeer {
    /// The link's generation, as the node machine numbered it.
    generation: u64,
    /// The backup's process the last dial reached; `None` until a dial succeeds.
    reached: Option<u64>,
    /// Shipments queued while the link is not up, sent in order once it is (the process's
    /// link queue holds them while it dials).
    held: Vec<wire::messages::Shipment>,
}

/// A node's link to one coordinator: the connection's id, and whether it is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CoordLink {
    id: u64,
    alive: bool,
    /// The coordinator declared the node failed while this link was up (its carrier then
    /// closes it at once: [`Sim::is_failed_but_linked`]).
    declared_failed: bool,
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
    /// The latest timestamp of any answer: a request submitted now ran, if it ever runs,
    /// after it (`ClientRequest::not_before`).
    seen_ts: wire::messages::Timestamp,
    /// Requests whose answer a failure took, to ask again about (docs/design.md §11,
    /// "Exactly-once answers"), and how often each was asked again.
    retry_queue: std::collections::BTreeSet<(ClientId, u64)>,
    retried: BTreeMap<u64, u32>,
    /// Each request's `not_before`, by request id.
    not_befores: Vec<wire::messages::Timestamp>,
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
        .map(|p| (p.id, ReplicaRole::at_start(mode, p, node, restarted, false)))
        .collect()
}

impl Sim {
    /// A cluster for `config` (see [`config`]) whose run draws from `seed`: every replica
    /// starts from the tiny population of its partition and reports itself loaded.
    pub fn new(config: &ClusterConfig, seed: u64, faults: Faults) -> Sim {
        let pending_max = config.limits.replica_pending_batches_max as usize;
        let mode = config.mode();
        let mut rng = Rng::new(seed);
        // The processes' start order draws from a stream of its own, so that the run's other
        // draws do not depend on it.
        let mut start_order = Rng::new(seed ^ 0x6c69_7374_656e);
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
                links.insert(c, CoordLink { id: fresh(), alive: true, declared_failed: false });
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
                partitions.insert(pid, equipped(Partition::serving(mode, r, pending_max), config));
            }
            let peers = BTreeMap::new();
            let listening_from_us = if start_order.below(10_000) < faults.late_listen_per_10k {
                START_US + 1 + start_order.below(setup::LATE_LISTEN_US_MAX)
            } else {
                START_US
            };
            let node =
                SimNode { up: true, process, links, mute_until_us: 0, machine, partitions, peers, listening_from_us };
            nodes.insert(n.id, node);
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
            seen_ts: wire::messages::Timestamp(0),
            retry_queue: Default::default(),
            retried: BTreeMap::new(),
            not_befores: Vec::new(),
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
        // Every primary's links to its backups, as its process opens them at start.
        for node in sim.node_ids() {
            let effects = sim.node_mut(node).machine.start();
            sim.perform(node, effects);
        }
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

    fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn node_mut(&mut self, node: NodeId) -> &mut SimNode {
        self.nodes.get_mut(&node).expect("a configured node")
    }

    /// One line of `--trace` output (built only when tracing).
    fn trace_line(&self, line: impl FnOnce() -> String) {
        if self.trace {
            eprintln!("{:>10} µs step {:>6}: {}", self.now_us - START_US, self.step, line());
        }
    }
}
