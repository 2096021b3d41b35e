//! The simulated cluster: the real [`Coordinator`] and every node's real [`Replica`]s,
//! connected by the [`Network`], stepped one action at a time from a seeded [`Rng`]. It owns
//! what the node and coordinator processes do around the state machines — heartbeats, link
//! loss, crashes, restarts and the rejoin protocol — modelled on `node::process` and
//! `coordinator::process`, no more:
//!
//! - a **crash** kills a node's process: its replicas' memory is gone and whatever was in
//!   flight on its link is lost; the coordinator learns of it only by the node's silence
//!   (`timeouts.failure_timeout_ms`);
//! - a **drop** breaks a node's link (QUIC never loses single messages on a live connection):
//!   everything in flight on it is lost, the coordinator counts the node failed at once
//!   (`Coordinator::on_node_lost`, as its process does on `NodeLost`), and the node no longer
//!   executes — its process lives on, frozen, still serving snapshots to tools and to
//!   rejoining peers, and the link is never re-established (`node::process` does not redial);
//! - **lost heartbeats**: a node's heartbeats are suppressed for a while (a stalled writer);
//!   if the coordinator declares it failed meanwhile, it stays connected but ignored;
//! - a **restart** (`glass node --rejoin`) is possible once the coordinator counts the node
//!   failed (its process refuses a second connection from a live node): the node comes back
//!   on a new link, empty, and asks to rejoin each partition; a rejoining replica holds the
//!   batches the coordinator sends it, copies the named source's state once the source
//!   executed up to the plan's point (the snapshot stream, sent and received, every chunk
//!   checked, by `node::snapshot`), executes what it held and reports `Rejoined`; if the
//!   source cannot serve the copy for `REJOIN_FETCH_ATTEMPTS × CONNECT_RETRY_MS`, or the
//!   coordinator refuses, it gives up and waits for an operator's restart, as the real
//!   executor does.
//!
//! Guarantees: everything is a function of the seed and the configuration; nothing here
//! decides what the cluster answers — the coordinator and replicas do; a replica error other
//! than "stopped" is recorded as a violation, never swallowed.

use std::collections::BTreeMap;

use coordinator::{ClientId, Coordinator, Event, Output};
use engine::procedures::TxnInput;
use engine::rng::Rng;
use node::replica::Store;
use node::Replica;
use wire::channel::{ChannelMessage, CoordinatorToClient, CoordinatorToNode, NodeToCoordinator};
use wire::config::{ClusterConfig, WarehouseRange};
use wire::messages::{ClientResult, DigestOutcome, NodeId, PartitionId, Seq};
use workload::gen::{GenConfig, Generator, Profile};

use crate::error::{NodeReport, SimError, SlotReport, Violation};
use crate::net::{Carried, Envelope, NetFaults, Network};
use crate::population;

/// The simulated clock's start: 2023-11-14, in microseconds since the Unix epoch.
pub const START_US: u64 = 1_700_000_000_000_000;
/// The client id digest requests come from.
const DIGEST_CLIENT: ClientId = 9_999;
/// Clients submitting transactions (ids 0..CLIENTS).
pub const CLIENTS: u64 = 4;
/// Simulated time a rejoining replica tries to copy a source that cannot serve it before it
/// gives up: `node::process`'s fetch attempts and their spacing.
pub const REJOIN_GIVE_UP_US: u64 =
    node::process::REJOIN_FETCH_ATTEMPTS as u64 * node::process::CONNECT_RETRY_MS * 1_000;
/// Time one "let time pass" step advances, at most (uniform below it): with a step in five
/// passing time, about 100 µs a step, so a crash is detected within a few hundred steps.
pub const STEP_US_MAX: u64 = 1_000;
/// Deliveries, at most, [`Sim::drain`] makes before it reports the cluster stuck.
pub const DRAIN_DELIVERIES_MAX: usize = 200_000;

/// The simulated cluster: `nodes` nodes (2 or more), two partitions of one warehouse each,
/// every partition replicated on every node; short timeouts (a 5 ms heartbeat, failure after
/// 40 ms of silence) so that crashes are detected within a few hundred steps; small batches.
pub fn config(nodes: u8, seed: u64) -> ClusterConfig {
    assert!(nodes >= 2, "a simulated cluster has at least two nodes");
    let mut c = ClusterConfig::parse(include_str!("../../cluster.toml")).expect("the default cluster.toml parses");
    c.seed = seed;
    c.nodes = (1..=nodes)
        .map(|id| wire::config::NodeConfig {
            id: NodeId::from(id),
            address: format!("127.0.0.1:{}", 7400 + u16::from(id)),
        })
        .collect();
    for (i, p) in c.partitions.iter_mut().enumerate() {
        let w = i as u16 + 1;
        p.warehouses = WarehouseRange { first: w, last: w };
        p.replicas = (1..=nodes).map(NodeId::from).collect();
    }
    c.partitions.truncate(2);
    c.limits.batch_txns_max = 8;
    c.limits.batch_wait_us = 300;
    c.limits.inflight_txns_max = 64;
    c.timeouts.heartbeat_ms = 5;
    c.timeouts.failure_timeout_ms = 40;
    c.validate().expect("the simulated cluster's configuration is valid");
    c
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
}

impl Faults {
    /// No faults at all.
    pub const NONE: Faults =
        Faults { net: NetFaults::CALM, crash_per_10k: 0, drop_per_10k: 0, mute_per_10k: 0, restart_per_10k: 0 };
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
    };

    fn any_node_faults(&self) -> bool {
        self.crash_per_10k + self.drop_per_10k + self.mute_per_10k + self.restart_per_10k > 0
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
    /// Messages lost with broken links and crashed processes.
    pub messages_lost: u64,
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
        self.messages_lost += other.messages_lost;
    }
}

/// A rejoining replica: the coordinator's plan (source, first batch sent to it) once it
/// arrived, the batches held meanwhile, and since when the source could not serve a copy.
#[derive(Debug, Default)]
struct Joiner {
    plan: Option<(NodeId, Seq)>,
    held: Vec<CoordinatorToNode>,
    failing_since_us: Option<u64>,
}

/// What a node holds for one partition.
#[derive(Debug)]
enum Slot {
    Serving(Box<Replica>),
    Joining(Joiner),
    /// A rejoin that failed: the executor refuses everything until the node restarts.
    GaveUp,
}

/// One simulated node process.
#[derive(Debug)]
struct SimNode {
    /// The process runs (a crashed one is gone until restarted).
    up: bool,
    /// The current link's id; messages of older links are never delivered.
    link: u64,
    /// The current link is connected (a drop breaks it for good).
    link_alive: bool,
    /// No heartbeats before this time (a stalled writer).
    mute_until_us: u64,
    next_heartbeat_us: u64,
    slots: BTreeMap<PartitionId, Slot>,
}

/// The simulated cluster and its network.
pub struct Sim {
    config: ClusterConfig,
    rng: Rng,
    now_us: u64,
    step: u64,
    coordinator: Coordinator,
    nodes: BTreeMap<NodeId, SimNode>,
    net: Network,
    faults: Faults,
    next_link: u64,
    heartbeat_us: u64,
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
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("now_us", &self.now_us)
            .field("step", &self.step)
            .field("stats", &self.stats)
            .finish()
    }
}

impl Sim {
    /// A cluster for `config` (see [`config`]) whose run draws from `seed`: every replica
    /// starts from the tiny population of its partition and reports itself loaded.
    pub fn new(config: &ClusterConfig, seed: u64, faults: Faults) -> Sim {
        let pending_max = config.limits.replica_pending_batches_max as usize;
        let mut nodes = BTreeMap::new();
        for (i, n) in config.nodes.iter().enumerate() {
            let node = SimNode {
                up: true,
                link: i as u64 + 1,
                link_alive: true,
                mute_until_us: 0,
                next_heartbeat_us: START_US,
                slots: BTreeMap::new(),
            };
            nodes.insert(n.id, node);
        }
        let mut net = Network::default();
        for p in &config.partitions {
            for &node in &p.replicas {
                // The node process reports its replica loaded with its state digest: the
                // population's, computed once per process (`population` checks every copy
                // has it under `debug_assertions`).
                let (db, digest) = population::partition_db(p, config.seed);
                let r = Replica::new(node, p.id, db, pending_max);
                let n = nodes.get_mut(&node).expect("replicas are on configured nodes");
                let state = wire::messages::LoadState::Ready { digest };
                let ready = Carried::ToCoordinator(NodeToCoordinator::LoadStatus { partition: p.id, state });
                net.send(Envelope { node, link: n.link, msg: ready });
                n.slots.insert(p.id, Slot::Serving(Box::new(r)));
            }
        }
        let gen =
            GenConfig::for_profile(Profile::Standard, 1..=config.warehouses_total()).with_scale(population::SCALE);
        Sim {
            rng: Rng::new(seed),
            now_us: START_US,
            step: 0,
            coordinator: Coordinator::new(config, START_US).expect("a valid configuration"),
            next_link: nodes.len() as u64 + 1,
            nodes,
            net,
            faults,
            heartbeat_us: config.timeouts.heartbeat_ms * 1_000,
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
            config: config.clone(),
        }
    }

    // ----- what tests and checkers look at -----

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    pub fn coordinator(&self) -> &Coordinator {
        &self.coordinator
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
        SimStats { steps: self.step, requests: self.inputs.len() as u64, messages_lost: self.net.lost, ..self.stats }
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
        match self.nodes.get_mut(&node)?.slots.get_mut(&partition)? {
            Slot::Serving(r) => Some(r),
            _ => None,
        }
    }

    /// The serving replica of `partition` on `node`, if there is one (to observe it: whether
    /// it is parked at a home piece, how far it executed).
    pub fn replica(&self, node: NodeId, partition: PartitionId) -> Option<&Replica> {
        match self.nodes.get(&node)?.slots.get(&partition)? {
            Slot::Serving(r) => Some(r),
            _ => None,
        }
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
        snapshot_copy(node, r, wire::messages::StateDigest(0)).ok()
    }

    /// Whether some replica is rejoining (or gave up rejoining).
    pub fn is_rejoining(&self) -> bool {
        self.nodes.values().any(|n| n.slots.values().any(|s| !matches!(s, Slot::Serving(_))))
    }

    /// The node ids.
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// Whether `node`'s process runs, its link is connected and the coordinator counts it
    /// live.
    pub fn is_healthy(&self, node: NodeId) -> bool {
        let n = &self.nodes[&node];
        n.up && n.link_alive && self.coordinator.is_node_live(node)
    }

    /// Whether `node` serves every partition it holds and the coordinator counts it a live
    /// replica of each.
    pub fn is_full_member(&self, node: NodeId) -> bool {
        let status = self.coordinator.status();
        self.is_healthy(node)
            && self.nodes[&node].slots.iter().all(|(p, s)| {
                matches!(s, Slot::Serving(r) if r.stopped().is_none())
                    && status.iter().any(|st| st.partition == *p && st.live_replicas.contains(&node))
            })
    }

    /// Every node: process, link, and each partition's slot (for failure reports).
    pub fn node_reports(&self) -> Vec<NodeReport> {
        self.nodes
            .iter()
            .map(|(&id, n)| NodeReport {
                id,
                up: n.up,
                link: n.link,
                link_alive: n.link_alive,
                live: self.coordinator.is_node_live(id),
                slots: n
                    .slots
                    .iter()
                    .map(|(&p, s)| {
                        let slot = match s {
                            Slot::Serving(r) => SlotReport::Serving {
                                seq: r.applied_seq(),
                                waiting: r.waiting_batches(),
                                stopped: r.stopped().is_some(),
                                parked_at: r.parked_at(),
                            },
                            Slot::Joining(j) => SlotReport::Joining { plan: j.plan, held: j.held.len() },
                            Slot::GaveUp => SlotReport::GaveUp,
                        };
                        (p, slot)
                    })
                    .collect(),
            })
            .collect()
    }

    // ----- the network and the processes -----

    fn route(&mut self, out: Vec<Output>) {
        for o in out {
            match o {
                Output::ToNodes { nodes, msg } => {
                    for n in nodes {
                        self.send_to_node(n, msg.clone());
                    }
                }
                Output::Reply { client, reply } => {
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
                Output::ToClient { msg: CoordinatorToClient::DigestReply { request_id, outcome, .. }, .. } => {
                    self.digest_replies.insert(request_id, outcome);
                }
                Output::ToClient { msg, .. } => self.violations.push(Violation::UnexpectedToClient { msg }),
                Output::Event(e) => {
                    if self.trace {
                        eprintln!("{:>10} µs step {:>6}: {e}", self.now_us - START_US, self.step);
                    }
                    match &e {
                        Event::NodeDown { .. } => self.stats.nodes_down += 1,
                        Event::Rejoined { .. } => self.stats.rejoins += 1,
                        _ => {}
                    }
                    self.events.push(e);
                }
            }
        }
    }

    /// The coordinator sends `msg` to `node`: lost unless the node's process runs and its
    /// link is connected.
    fn send_to_node(&mut self, node: NodeId, msg: CoordinatorToNode) {
        let Some(n) = self.nodes.get(&node) else { return };
        if n.up && n.link_alive {
            self.net.send(Envelope { node, link: n.link, msg: Carried::ToNode(msg) });
        } else {
            self.net.lost += 1;
        }
    }

    fn send_from_node(&mut self, node: NodeId, msg: NodeToCoordinator) {
        let n = &self.nodes[&node];
        if n.up && n.link_alive {
            self.net.send(Envelope { node, link: n.link, msg: Carried::ToCoordinator(msg) });
        }
    }

    /// What a serving replica of node `node` emits: its messages for the coordinator (the
    /// simulated cluster is active-active: a shipment would be a violation).
    fn emit(&mut self, node: NodeId, emitted: node::replica::Emit) {
        match emitted {
            node::replica::Emit::ToCoordinator(m) => self.send_from_node(node, m),
            node::replica::Emit::Ship(s) => self.violations.push(Violation::Shipped { node, seq: s.seq }),
        }
    }

    /// Whether `e` can still be delivered: its link is `node`'s current, connected link and
    /// the process runs.
    fn deliverable(&self, e: &Envelope) -> bool {
        let n = &self.nodes[&e.node];
        n.up && n.link_alive && n.link == e.link
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
            Carried::ToCoordinator(msg) => {
                let out = self.coordinator.on_node_message(e.node, msg, self.now_us);
                self.route(out);
            }
            Carried::ToNode(msg) => self.on_node_message(e.node, msg),
        }
    }

    /// What node `node`'s process does with a message from the coordinator.
    fn on_node_message(&mut self, node: NodeId, msg: CoordinatorToNode) {
        let partition = match &msg {
            CoordinatorToNode::Heartbeat { .. } => return,
            // The simulated cluster is active-active, lean, and never shut down: the
            // coordinator sends none of these.
            CoordinatorToNode::Shutdown { .. }
            | CoordinatorToNode::ResumeFromLog { .. }
            | CoordinatorToNode::Promote { .. }
            | CoordinatorToNode::ShipTo { .. } => {
                self.violations.push(Violation::UnexpectedMessage { node, name: msg.name() });
                return;
            }
            CoordinatorToNode::Batch(_)
            | CoordinatorToNode::PieceReads(_)
            | CoordinatorToNode::RederivePiece { .. }
            | CoordinatorToNode::Membership { .. }
            | CoordinatorToNode::PartitionStopped { .. }
            | CoordinatorToNode::RejoinPlan { .. }
            | CoordinatorToNode::RejoinRefused { .. } => msg.partition().expect("a partition's message"),
        };
        let n = self.nodes.get_mut(&node).expect("a configured node");
        let Some(slot) = n.slots.get_mut(&partition) else {
            self.violations.push(Violation::UnheldPartition { node, partition });
            return;
        };
        match slot {
            Slot::GaveUp => {}
            Slot::Joining(j) => match msg {
                CoordinatorToNode::RejoinPlan { source, from_seq, .. } => {
                    j.plan = Some((source, from_seq));
                    j.failing_since_us = None;
                }
                CoordinatorToNode::RejoinRefused { .. } => {
                    *slot = Slot::GaveUp;
                    self.stats.rejoins_given_up += 1;
                }
                m @ (CoordinatorToNode::PieceReads(_) | CoordinatorToNode::RederivePiece { .. }) => j.held.push(m),
                m @ CoordinatorToNode::Batch(_) => {
                    if j.held.len() >= node::process::REJOIN_HELD_BATCHES_MAX {
                        *slot = Slot::GaveUp;
                        self.stats.rejoins_given_up += 1;
                    } else {
                        j.held.push(m);
                    }
                }
                // Before its copy is installed a joiner has no live-set or stop to apply: the
                // copy it installs carries the partition's state, and the coordinator counts
                // it only once it reports `Rejoined`.
                CoordinatorToNode::Membership { .. } | CoordinatorToNode::PartitionStopped { .. } => {}
                // Filtered out above: not a message for one partition, or not sent here.
                CoordinatorToNode::Heartbeat { .. }
                | CoordinatorToNode::Shutdown { .. }
                | CoordinatorToNode::ResumeFromLog { .. }
                | CoordinatorToNode::Promote { .. }
                | CoordinatorToNode::ShipTo { .. } => {}
            },
            Slot::Serving(r) => match r.on_control(msg) {
                Ok(replies) => {
                    for m in replies {
                        self.emit(node, m);
                    }
                }
                // A stopped partition's replica refuses late batches: expected.
                Err(node::ReplicaError::Stopped { .. }) => {}
                Err(error) => self.violations.push(Violation::Refused { node, partition, error }),
            },
        }
    }

    /// Rejoining replicas whose source executed up to the plan's point copy it, execute the
    /// batches they held and report `Rejoined`; those whose source cannot serve a copy for
    /// [`REJOIN_GIVE_UP_US`] give up.
    fn progress_joins(&mut self) {
        let mut ready = Vec::new();
        let mut failing = Vec::new();
        for (&node, n) in &self.nodes {
            for (&partition, slot) in &n.slots {
                let Slot::Joining(Joiner { plan: Some((source, from_seq)), .. }) = slot else { continue };
                let src = self.nodes.get(source).filter(|s| s.up).and_then(|s| s.slots.get(&partition));
                match src {
                    // A batch parked at a home piece is half run: the copy waits for its end.
                    Some(Slot::Serving(r)) if r.applied_seq() + 1 >= *from_seq && r.parked_at().is_none() => {
                        ready.push((node, partition, *source))
                    }
                    Some(Slot::Serving(r)) if r.stopped().is_none() => {} // the copy waits for the source
                    _ => failing.push((node, partition)),
                }
            }
        }
        for (node, partition) in failing {
            let now = self.now_us;
            let slot = self.nodes.get_mut(&node).and_then(|n| n.slots.get_mut(&partition)).expect("listed");
            if let Slot::Joining(j) = slot {
                let since = *j.failing_since_us.get_or_insert(now);
                if now - since >= REJOIN_GIVE_UP_US {
                    *slot = Slot::GaveUp;
                    self.stats.rejoins_given_up += 1;
                }
            }
        }
        for (node, partition, source) in ready {
            let Some(Slot::Serving(src)) = self.nodes.get_mut(&source).and_then(|n| n.slots.get_mut(&partition)) else {
                continue;
            };
            let seq = src.applied_seq();
            // The source's digest closes the stream and the joiner checks its copy against
            // it, as `node::snapshot::snapshot_after` does. Two full digests per rejoin
            // are the simulator's largest cost, so that check runs under
            // `debug_assertions` only; the final convergence check compares every replica's
            // digest in every build.
            let digest = if cfg!(debug_assertions) { src.state_digest() } else { wire::messages::StateDigest(0) };
            let copy = match snapshot_copy(source, src, digest) {
                Ok(copy) => copy,
                Err(e) => {
                    self.violations.push(Violation::BadSnapshot { node, partition, error: std::sync::Arc::new(e) });
                    continue;
                }
            };
            let n = self.nodes.get_mut(&node).expect("a configured node");
            let Some(Slot::Joining(j)) = n.slots.remove(&partition) else { unreachable!("listed as joining") };
            let mut r = Replica::restored(node, partition, copy, seq, self.pending_max);
            if cfg!(debug_assertions) && r.state_digest() != digest {
                self.violations.push(Violation::CopyDiffers { node, partition });
            }
            let mut replies = Vec::new();
            for m in j.held {
                match r.on_control(m) {
                    Ok(out) => replies.extend(out),
                    Err(node::ReplicaError::Stopped { .. }) => {}
                    Err(error) => self.violations.push(Violation::RefusedRejoining { node, partition, error }),
                }
            }
            n.slots.insert(partition, Slot::Serving(Box::new(r)));
            for m in replies {
                self.emit(node, m);
            }
            self.send_from_node(node, NodeToCoordinator::Rejoined { partition, snapshot_seq: seq });
        }
    }

    /// Advances time by `us`: nodes send their heartbeats, the coordinator ticks, rejoins
    /// that wait on a gone source time out.
    pub fn advance(&mut self, us: u64) {
        self.now_us += us;
        let now = self.now_us;
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            loop {
                let n = self.nodes.get_mut(&id).expect("listed");
                if !(n.up && n.link_alive) || n.next_heartbeat_us > now {
                    break;
                }
                n.next_heartbeat_us += self.heartbeat_us;
                if now >= n.mute_until_us {
                    self.send_from_node(id, NodeToCoordinator::Heartbeat { now_ms: now / 1_000 });
                }
            }
        }
        if self.coordinator.next_deadline_us().is_some_and(|d| d <= now) {
            let out = self.coordinator.tick(now);
            self.route(out);
        }
        self.progress_joins();
    }

    /// A client submits the generator's next transaction.
    pub fn submit(&mut self, client: ClientId) {
        let input: TxnInput = self.generator.next((self.now_us / 1_000_000) as i64);
        let request_id = self.inputs.len() as u64;
        self.inputs.push(input);
        self.answered.push(false);
        let out = self.coordinator.on_client_request(
            client,
            wire::messages::ClientRequest { request_id, input },
            self.now_us,
        );
        self.route(out);
    }

    // ----- faults -----

    fn trace_fault(&self, what: &str, node: NodeId) {
        if self.trace {
            eprintln!("{:>10} µs step {:>6}: FAULT {what} node {node}", self.now_us - START_US, self.step);
        }
    }

    /// Crashes `node`'s process: its memory and its link's messages are lost.
    pub fn crash(&mut self, node: NodeId) {
        self.trace_fault("crash", node);
        let n = self.nodes.get_mut(&node).expect("a configured node");
        if !n.up {
            return;
        }
        if n.slots.values().any(|s| matches!(s, Slot::Joining(_))) {
            self.stats.crashes_while_rejoining += 1;
        }
        let source_of_rejoin = self.nodes.values().any(|other| {
            other.up
                && other
                    .slots
                    .values()
                    .any(|s| matches!(s, Slot::Joining(Joiner { plan: Some((src, _)), .. }) if *src == node))
        });
        if source_of_rejoin {
            self.stats.crashes_of_rejoin_source += 1;
        }
        let n = self.nodes.get_mut(&node).expect("a configured node");
        n.up = false;
        n.slots.clear();
        let link = n.link;
        self.net.cut(node, link, None);
        self.stats.crashes += 1;
    }

    /// Breaks `node`'s link (a drop): what was in flight on it is lost, the coordinator
    /// counts the node failed at once, and the node no longer executes.
    pub fn drop_link(&mut self, node: NodeId) {
        self.trace_fault("drop the link of", node);
        let n = self.nodes.get_mut(&node).expect("a configured node");
        if !n.up || !n.link_alive {
            return;
        }
        n.link_alive = false;
        let link = n.link;
        self.net.cut(node, link, None);
        self.stats.drops += 1;
        let out = self.coordinator.on_node_lost(node, self.now_us);
        self.route(out);
    }

    /// Suppresses `node`'s heartbeats for `us`.
    pub fn mute(&mut self, node: NodeId, us: u64) {
        self.trace_fault(&format!("mute heartbeats for {us} µs of"), node);
        let n = self.nodes.get_mut(&node).expect("a configured node");
        n.mute_until_us = self.now_us + us;
        self.stats.mutes += 1;
    }

    /// Whether `node` may be restarted: the coordinator counts it failed.
    pub fn can_restart(&self, node: NodeId) -> bool {
        !self.coordinator.is_node_live(node)
    }

    /// Restarts `node` (`glass node --rejoin`): its old process, if any, is gone; the new
    /// one connects on a new link, empty, and asks to rejoin each of its partitions.
    ///
    /// Panics unless [`Sim::can_restart`].
    pub fn restart(&mut self, node: NodeId) {
        assert!(self.can_restart(node), "node {node} is live: the coordinator would refuse its new connection");
        self.trace_fault("restart", node);
        let link = self.next_link;
        self.next_link += 1;
        let n = self.nodes.get_mut(&node).expect("a configured node");
        let old = n.link;
        n.up = true;
        n.link = link;
        n.link_alive = true;
        n.mute_until_us = 0;
        n.next_heartbeat_us = self.now_us;
        n.slots.clear();
        self.net.cut(node, old, None);
        let partitions: Vec<PartitionId> =
            self.config.partitions.iter().filter(|p| p.replicas.contains(&node)).map(|p| p.id).collect();
        for p in partitions {
            self.nodes.get_mut(&node).expect("listed").slots.insert(p, Slot::Joining(Joiner::default()));
            self.send_from_node(node, NodeToCoordinator::RejoinRequest { partition: p });
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
        let status = self.coordinator.status();
        status.iter().all(|st| {
            st.live_replicas.iter().any(|&m| {
                m != node && {
                    let n = &self.nodes[&m];
                    n.up && n.link_alive
                        && self.now_us >= n.mute_until_us
                        && self.coordinator.is_node_live(m)
                        && matches!(n.slots.get(&st.partition), Some(Slot::Serving(r)) if r.stopped().is_none())
                }
            })
        })
    }

    /// Maybe one node fault, drawn from the seed at the configured rates.
    fn maybe_fault(&mut self) {
        if !self.faults.any_node_faults() {
            return;
        }
        let f = self.faults;
        let roll = self.rng.below(10_000);
        let ids = self.node_ids();
        let node = ids[self.rng.below(ids.len() as u64) as usize];
        let mut at = f.crash_per_10k;
        if roll < at {
            if self.nodes[&node].up && self.others_solid(node) {
                self.crash(node);
            }
            return;
        }
        at += f.drop_per_10k;
        if roll < at {
            if self.others_solid(node) {
                self.drop_link(node);
            }
            return;
        }
        at += f.mute_per_10k;
        if roll < at {
            if self.nodes[&node].up && self.others_solid(node) {
                let timeout_us = self.config.timeouts.failure_timeout_ms * 1_000;
                let us = self.rng.uniform(timeout_us / 2, 3 * timeout_us);
                self.mute(node, us);
            }
            return;
        }
        at += f.restart_per_10k;
        if roll < at && !self.is_healthy(node) && self.can_restart(node) {
            self.restart(node);
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
                    if self.submitting {
                        let client = self.rng.below(CLIENTS);
                        self.submit(client);
                    }
                }
                3..=7 => {
                    self.deliver_one();
                    self.progress_joins();
                }
                _ => {
                    let us = self.rng.below(STEP_US_MAX);
                    self.advance(us);
                }
            }
            self.maybe_fault();
        }
    }

    /// Stops drawing faults (of the network too) from here on.
    pub fn calm(&mut self) {
        self.faults = Faults::NONE;
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
        let mut result = Err(SimError::NotDrained { deliveries: DRAIN_DELIVERIES_MAX });
        for _ in 0..DRAIN_DELIVERIES_MAX {
            if self.net.all(|e| !self.deliverable(e)) && self.coordinator.status().iter().all(|p| p.inflight_txns == 0)
            {
                self.net.clear();
                result = Ok(());
                break;
            }
            self.deliver_one();
            self.progress_joins();
            self.advance(50);
        }
        self.faults = faults;
        result
    }

    /// Asks the coordinator for `partition`'s digests through the ordered path and drains.
    pub fn digests(&mut self, partition: PartitionId) -> Result<DigestOutcome, SimError> {
        let request_id = self.next_digest_request;
        self.next_digest_request += 1;
        let out = self.coordinator.on_digest_request(DIGEST_CLIENT, request_id, partition, self.now_us);
        self.route(out);
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
/// rejoining node checks it.
fn snapshot_copy(
    source: NodeId,
    r: &mut Replica,
    digest: wire::messages::StateDigest,
) -> Result<engine::LeanDb, SimError> {
    let (partition, seq) = (r.partition(), r.applied_seq());
    let Store::Lean(db) = r.store_mut() else { return Err(SimError::NotLean) };
    let mut chunks = Vec::new();
    node::snapshot::stream(db, 1, partition, seq, digest, 1 << 22, &mut |m| {
        chunks.push(m);
        true
    });
    let mut copy = engine::LeanDb::new();
    let mut receiver = node::snapshot::SnapshotReceiver::new(partition, format!("node {source}"));
    for c in chunks {
        if receiver.accept(c, &mut copy)?.is_some() {
            return Ok(copy);
        }
    }
    Err(SimError::Transfer(node::TransferError::Recv(wire::endpoint::RecvError::Closed {
        peer: format!("node {source}"),
        what: "a snapshot chunk",
    })))
}
