//! A simulated active-active cluster, in process: the real [`Coordinator`] and real
//! [`Replica`]s over the lean kernel with TPC-C data, connected by an in-memory network that
//! the test drives adversarially — messages reordered across and within links, duplicated,
//! held back — with seeded randomness so a failure replays (STYLE.md: TigerBeetle's simulator,
//! turmoil's fault vocabulary). It checks Section 5.3's claim end to end: replicas executing
//! the same transactions in timestamp order stay bit-identical without any log, and the
//! coordinator answers only what every live replica agreed on.

use std::collections::BTreeMap;
use workload::rng::Rng;

use coordinator::{ClientId, Coordinator, Event, Output, Phase};
use engine::procedures::TxnInput;
use node::Replica;
use wire::config::{ClusterConfig, WarehouseRange};
use wire::messages::*;
use workload::gen::{GenConfig, Generator, Profile};

const START_US: u64 = 1_700_000_000_000_000;
const SEED: u64 = 7;
/// Steps a held message waits.
const HOLD_STEPS: u64 = 300;

/// Two partitions of one warehouse each, both on nodes 1 and 2.
fn config() -> ClusterConfig {
    let mut c = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
    c.seed = SEED;
    c.partitions[0].warehouses = WarehouseRange { first: 1, last: 1 };
    c.partitions[1].warehouses = WarehouseRange { first: 2, last: 2 };
    c.limits.batch_txns_max = 8;
    c.limits.batch_wait_us = 300;
    c.limits.inflight_txns_max = 64;
    c.validate().unwrap();
    c
}

/// The run's seed: `default`, or `GLASS_SIM_SEED` to replay or explore; printed first.
fn seed(default: u64) -> u64 {
    let seed = std::env::var("GLASS_SIM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    eprintln!("seed {seed} (replay with GLASS_SIM_SEED={seed})");
    seed
}

/// Where a message is going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    Coordinator { from: NodeId },
    Node(NodeId),
}

/// A rejoining replica: its plan (source, first batch sent to it) and the batches held.
type Joiner = (Option<(NodeId, Seq)>, Vec<Message>);

/// The simulated cluster and its network.
struct Sim {
    rng: Rng,
    now_us: u64,
    coordinator: Coordinator,
    replicas: BTreeMap<(NodeId, PartitionId), Replica>,
    /// Messages in flight, delivered in random order.
    network: Vec<(To, Message)>,
    /// Nodes that crashed: nothing reaches them, nothing leaves them.
    crashed: Vec<NodeId>,
    /// Replicas of restarted nodes rejoining: the plan (source, first batch sent to them)
    /// once the coordinator sent it, and the batches held meanwhile.
    joiners: BTreeMap<(NodeId, PartitionId), Joiner>,
    pending_max: usize,
    /// Percent of deliveries that leave a copy behind (a duplicate).
    duplicate_pct: u64,
    /// Percent of deliveries held back for `HOLD_STEPS` steps instead.
    hold_pct: u64,
    /// Held messages and the step at which they are released.
    held: Vec<(u64, To, Message)>,
    step: u64,
    heartbeat_us: u64,
    next_heartbeat_us: u64,
    generator: Generator,
    next_request: u64,
    /// Every reply, by (client, request id), with the number of times it came.
    answers: BTreeMap<(ClientId, u64), (ClientResult, u32)>,
    digest_replies: BTreeMap<u64, DigestOutcome>,
    events: Vec<Event>,
}

impl Sim {
    fn new(config: &ClusterConfig, seed: u64) -> Sim {
        let mut replicas = BTreeMap::new();
        let mut network = Vec::new();
        for p in &config.partitions {
            for &node in &p.replicas {
                let mut r = Replica::load(
                    node,
                    p,
                    config.seed,
                    config.limits.replica_pending_batches_max as usize,
                    &mut |_| {},
                )
                .unwrap();
                network.push((To::Coordinator { from: node }, r.ready_message()));
                replicas.insert((node, p.id), r);
            }
        }
        let gen = GenConfig::for_profile(Profile::Standard, 1..=config.warehouses_total());
        Sim {
            rng: Rng::new(seed),
            now_us: START_US,
            coordinator: Coordinator::new(config, START_US).unwrap(),
            replicas,
            network,
            crashed: Vec::new(),
            joiners: BTreeMap::new(),
            pending_max: config.limits.replica_pending_batches_max as usize,
            duplicate_pct: 10,
            hold_pct: 5,
            held: Vec::new(),
            step: 0,
            heartbeat_us: config.timeouts.heartbeat_ms * 1_000,
            next_heartbeat_us: START_US,
            generator: Generator::new(gen, seed, config.seed).unwrap(),
            next_request: 0,
            answers: BTreeMap::new(),
            digest_replies: BTreeMap::new(),
            events: Vec::new(),
        }
    }

    fn route(&mut self, out: Vec<Output>) {
        for o in out {
            match o {
                Output::ToNodes { nodes, msg } => {
                    for n in nodes {
                        self.network.push((To::Node(n), msg.clone()));
                    }
                }
                Output::Reply { client, reply } => {
                    let entry = self.answers.entry((client, reply.request_id)).or_insert((reply.result.clone(), 0));
                    entry.1 += 1;
                }
                Output::ToClient { msg: Message::DigestReply { request_id, outcome, .. }, .. } => {
                    self.digest_replies.insert(request_id, outcome);
                }
                Output::ToClient { msg, .. } => panic!("unexpected message to a client: {msg:?}"),
                Output::Event(e) => self.events.push(e),
            }
        }
    }

    /// Delivers one message in flight, chosen at random (possibly leaving a duplicate).
    fn deliver_one(&mut self) {
        if self.network.is_empty() {
            return;
        }
        // Mostly a random message; often the newest, so older ones are held back longer.
        let i = if self.rng.below(100) < 40 {
            self.network.len() - 1
        } else {
            self.rng.below(self.network.len() as u64) as usize
        };
        let (to, msg) = if self.rng.below(100) < self.duplicate_pct {
            self.network[i].clone()
        } else {
            self.network.swap_remove(i)
        };
        if self.rng.below(100) < self.hold_pct {
            self.held.push((self.step + HOLD_STEPS, to, msg));
            return;
        }
        match to {
            To::Coordinator { from } => {
                if !self.crashed.contains(&from) {
                    let out = self.coordinator.on_node_message(from, msg, self.now_us);
                    self.route(out);
                }
            }
            To::Node(node) if self.crashed.contains(&node) => {}
            To::Node(node) => {
                let partition = match &msg {
                    Message::Batch(b) => b.partition,
                    Message::Membership { partition, .. }
                    | Message::PartitionStopped { partition, .. }
                    | Message::RejoinPlan { partition, .. }
                    | Message::RejoinRefused { partition, .. } => *partition,
                    Message::Heartbeat { .. } => return,
                    other => panic!("unexpected message to a node: {other:?}"),
                };
                if let Some((plan, held)) = self.joiners.get_mut(&(node, partition)) {
                    match msg {
                        Message::RejoinPlan { source, from_seq, .. } => *plan = Some((source, from_seq)),
                        Message::RejoinRefused { reason, .. } => panic!("node {node} refused rejoining: {reason}"),
                        m @ Message::Batch(_) => held.push(m),
                        _ => {}
                    }
                    return;
                }
                let replica = self.replicas.get_mut(&(node, partition)).expect("a replica of the partition");
                match replica.on_message(msg) {
                    Ok(replies) => {
                        for m in replies {
                            self.network.push((To::Coordinator { from: node }, m));
                        }
                    }
                    // A stopped partition's replica refuses late batches: expected.
                    Err(node::ReplicaError::Stopped { .. }) => {}
                    Err(e) => panic!("node {node} partition {partition}: {e}"),
                }
            }
        }
    }

    /// Restarts a crashed node: its replicas rejoin (`glass node --rejoin`).
    fn restart(&mut self, node: NodeId, config: &ClusterConfig) {
        self.crashed.retain(|&n| n != node);
        for p in config.partitions_on_node(node) {
            self.replicas.remove(&(node, p.id));
            self.joiners.insert((node, p.id), (None, Vec::new()));
            self.network.push((To::Coordinator { from: node }, Message::RejoinRequest { partition: p.id }));
        }
    }

    /// A joiner whose source has executed up to the plan's point copies it (the snapshot a
    /// live replica streams, rebuilt here), executes the batches it held and reports
    /// `Rejoined` — what the node process does, on the same messages.
    fn progress_joins(&mut self) {
        let ready: Vec<(NodeId, PartitionId)> = self
            .joiners
            .iter()
            .filter(|(_, (plan, _))| plan.is_some_and(|(source, _)| !self.crashed.contains(&source)))
            .map(|(k, _)| *k)
            .collect();
        for (node, partition) in ready {
            let (plan, _) = &self.joiners[&(node, partition)];
            let (source, from_seq) = plan.expect("filtered");
            let Some(src) = self.replicas.get_mut(&(source, partition)) else { continue };
            if src.applied_seq() + 1 < from_seq {
                continue;
            }
            let seq = src.applied_seq();
            let digest = src.state_digest();
            let mut chunks = Vec::new();
            let node::replica::Store::Lean(db) = src.store_mut() else { unreachable!("active-active is lean") };
            node::snapshot::stream(db, 1, partition, seq, digest, 1 << 22, &mut |m| {
                chunks.push(m);
                true
            });
            let mut copy = engine::LeanDb::new();
            for m in chunks {
                let Message::SnapshotChunk(c) = m else { panic!("not a chunk") };
                let table = engine::schema::TableId::ALL[usize::from(c.table)];
                workload::client::insert_table(&mut copy, table, &c.rows_bytes).unwrap();
            }
            let (_, held) = self.joiners.remove(&(node, partition)).expect("a joiner");
            let mut r = Replica::restored(node, partition, copy, seq, self.pending_max);
            assert_eq!(r.state_digest(), digest, "the copy has the source's state");
            for m in held {
                for reply in r.on_message(m).unwrap() {
                    self.network.push((To::Coordinator { from: node }, reply));
                }
            }
            self.network.push((To::Coordinator { from: node }, Message::Rejoined { partition, snapshot_seq: seq }));
            self.replicas.insert((node, partition), r);
        }
    }

    /// Advances time by `us`, sending heartbeats and ticking the coordinator.
    fn advance(&mut self, us: u64) {
        self.now_us += us;
        while self.now_us >= self.next_heartbeat_us {
            for node in [1, 2] {
                if !self.crashed.contains(&node) {
                    self.network
                        .push((To::Coordinator { from: node }, Message::Heartbeat { now_ms: self.now_us / 1_000 }));
                }
            }
            self.next_heartbeat_us += self.heartbeat_us;
        }
        if self.coordinator.next_deadline_us().is_some_and(|d| d <= self.now_us) {
            let out = self.coordinator.tick(self.now_us);
            self.route(out);
        }
    }

    fn submit(&mut self, client: ClientId) {
        let input: TxnInput = self.generator.next((self.now_us / 1_000_000) as i64);
        let id = self.next_request;
        self.next_request += 1;
        let out = self.coordinator.on_client_request(client, ClientRequest { request_id: id, input }, self.now_us);
        self.route(out);
    }

    /// `steps` random actions: submit, deliver, let time pass.
    fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            self.step += 1;
            let step = self.step;
            let (released, kept): (Vec<_>, Vec<_>) = self.held.drain(..).partition(|(at, _, _)| *at <= step);
            self.held = kept;
            self.network.extend(released.into_iter().map(|(_, to, msg)| (to, msg)));
            match self.rng.below(10) {
                0..=2 => {
                    let client = self.rng.below(4);
                    self.submit(client);
                }
                3..=7 => {
                    self.deliver_one();
                    self.progress_joins();
                }
                _ => {
                    let us = self.rng.below(120);
                    self.advance(us);
                }
            }
        }
    }

    /// Delivers everything (duplicates off), letting batches close, until nothing moves.
    fn drain(&mut self) {
        self.duplicate_pct = 0;
        self.hold_pct = 0;
        self.network.extend(self.held.drain(..).map(|(_, to, msg)| (to, msg)));
        for _ in 0..100_000 {
            if self
                .network
                .iter()
                .all(|(to, _)| matches!(to, To::Coordinator { from } | To::Node(from) if self.crashed.contains(from)))
                && self.coordinator.status().iter().all(|p| p.inflight_txns == 0)
            {
                self.network.clear();
                return;
            }
            self.deliver_one();
            self.progress_joins();
            self.advance(50);
        }
        panic!("the cluster did not drain");
    }

    /// Asks the coordinator for `partition`'s digests through the ordered path.
    fn digests(&mut self, partition: PartitionId) -> DigestOutcome {
        let request_id = 1_000_000 + u64::from(partition);
        let out = self.coordinator.on_digest_request(9, request_id, partition, self.now_us);
        self.route(out);
        self.drain();
        self.digest_replies.remove(&request_id).expect("a digest reply")
    }

    fn count(&self, f: impl Fn(&ClientResult) -> bool) -> usize {
        self.answers.values().filter(|(r, _)| f(r)).count()
    }

    fn assert_every_request_answered_once(&self) {
        assert_eq!(self.answers.len() as u64, self.next_request, "every request is answered");
        assert!(self.answers.values().all(|(_, n)| *n == 1), "no request is answered twice");
    }
}

fn is_committed(r: &ClientResult) -> bool {
    matches!(r, ClientResult::Committed { .. })
}

/// Paper Section 5.3: replicas that execute the same transactions in timestamp order reach
/// the same state, with no log, whatever the network does to the order of messages.
#[test]
fn replicas_stay_identical_under_reordering_and_duplication() {
    let config = config();
    let mut sim = Sim::new(&config, seed(11));
    sim.run(12_000);
    sim.drain();
    sim.assert_every_request_answered_once();
    let committed = sim.count(is_committed);
    let multi = sim.count(|r| matches!(r, ClientResult::Rejected(Rejection::MultiPartition { .. })));
    let aborted = sim.count(|r| matches!(r, ClientResult::Aborted { .. }));
    let failed = sim.count(|r| matches!(r, ClientResult::Failed { .. }));
    eprintln!(
        "{} requests: {committed} committed, {aborted} aborted, {multi} multi-partition, {failed} failed",
        sim.next_request
    );
    assert!(committed > 1_000, "{committed}");
    assert!(multi > 0, "the standard profile's remote warehouses span partitions");
    assert_eq!(failed, 0);
    assert!(
        !sim.events.iter().any(Event::is_alarm),
        "{:?}",
        sim.events.iter().filter(|e| e.is_alarm()).collect::<Vec<_>>()
    );

    let (waited, duplicates) =
        sim.replicas.values().fold((0, 0), |(w, d), r| (w + r.stats().batches_waited, d + r.stats().duplicate_batches));
    assert!(waited > 20 && duplicates > 20, "the network was adversarial: {waited} waited, {duplicates} duplicates");
    for partition in [1, 2] {
        let outcome = sim.digests(partition);
        assert!(outcome.agreed(), "partition {partition}: {outcome:?}");
        let DigestOutcome::Digests { seq, digests } = outcome else { unreachable!() };
        assert_eq!(digests.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![1, 2]);
        // The replicas, asked directly, agree with what the coordinator reported.
        for node in [1, 2] {
            let r = sim.replicas.get_mut(&(node, partition)).unwrap();
            assert_eq!(r.applied_seq(), seq);
            assert_eq!(r.state_digest(), digests[0].1);
            eprintln!("node {node} partition {partition}: {:?}", r.stats());
        }
    }
}

/// A replica whose state differs (here: one extra transaction applied behind the
/// coordinator's back) is caught: its partition stops loudly rather than serve divergent
/// data, every waiting client is told, and the other partition keeps serving.
#[test]
fn a_diverged_replica_stops_its_partition_loudly() {
    let config = config();
    let mut sim = Sim::new(&config, seed(12));
    let rogue = sim.replicas.get_mut(&(2, 1)).unwrap();
    let mut gen = Generator::new(GenConfig::for_profile(Profile::Paper, 1..=1), 99, SEED).unwrap();
    for _ in 0..3 {
        let input = gen.next(0);
        let node::replica::Store::Lean(db) = rogue.store_mut() else { unreachable!("active-active is lean") };
        engine::procedures::execute(db, 1, &input).unwrap();
    }
    sim.run(6_000);
    sim.drain();
    sim.assert_every_request_answered_once();
    let _ = sim.digests(1);
    let diverged: Vec<_> = sim.events.iter().filter(|e| matches!(e, Event::Diverged(d) if d.partition == 1)).collect();
    assert_eq!(diverged.len(), 1, "{:?}", sim.events);
    eprintln!("{}", diverged[0]);
    let status = sim.coordinator.status();
    assert!(matches!(status[0].phase, Phase::Stopped { .. }));
    assert_eq!(status[1].phase, Phase::Serving);
    assert!(sim.count(|r| matches!(r, ClientResult::Rejected(Rejection::PartitionStopped { partition: 1, .. }))) > 0);
    assert!(sim.replicas[&(1, 1)].stopped().is_some() && sim.replicas[&(2, 1)].stopped().is_some());
    assert!(sim.digests(2).agreed());
}

/// A node that crashes mid-run is declared failed after `failure_timeout_ms` of silence; the
/// survivor alone answers from then on, and every request is still answered exactly once.
#[test]
fn a_crashed_node_is_detected_and_the_survivor_serves() {
    let config = config();
    let mut sim = Sim::new(&config, seed(13));
    sim.run(4_000);
    sim.crashed.push(2);
    let crash_us = sim.now_us;
    while !sim.events.iter().any(|e| matches!(e, Event::NodeDown { node: 2, .. })) {
        sim.deliver_one();
        sim.advance(1_000);
    }
    let detected_ms = (sim.now_us - crash_us) / 1_000;
    assert!(detected_ms >= config.timeouts.failure_timeout_ms - config.timeouts.heartbeat_ms, "{detected_ms}");
    assert!(detected_ms <= config.timeouts.failure_timeout_ms + 2 * config.timeouts.heartbeat_ms, "{detected_ms}");
    sim.run(4_000);
    sim.drain();
    sim.assert_every_request_answered_once();
    assert!(!sim.events.iter().any(|e| matches!(e, Event::Diverged(_) | Event::NodeDown { node: 1, .. })));
    for partition in [1, 2] {
        let DigestOutcome::Digests { digests, .. } = sim.digests(partition) else { panic!("no digests") };
        assert_eq!(digests.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![1]);
        assert_eq!(sim.coordinator.status()[usize::from(partition) - 1].live_replicas, vec![1]);
    }
    assert!(sim.count(is_committed) > 500);
}

/// Logless rejoin (Section 5.3): a node crashes mid-run, is declared failed, restarts and
/// rejoins — the coordinator names a live replica and sends the joiner every batch from the
/// next one; the joiner copies the replica once it reached that point, executes what it
/// held, and counts again — all under reordered, duplicated and delayed messages. Every
/// request is answered once, nothing acknowledged differs, and both replicas of each
/// partition end with the same digest. Seeds: `GLASS_SIM_SEED` replays one; the test runs
/// `GLASS_SIM_SEEDS` of them (default 3) from there.
#[test]
fn a_crashed_node_restarts_rejoins_and_matches_its_peer() {
    let config = config();
    let first = seed(21);
    let seeds: u64 = std::env::var("GLASS_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    for s in first..first + seeds {
        eprintln!("seed {s}");
        let mut sim = Sim::new(&config, s);
        let before_crash = 2_000 + sim.rng.below(2_000) as usize;
        sim.run(before_crash);
        sim.crashed.push(2);
        while !sim.events.iter().any(|e| matches!(e, Event::NodeDown { node: 2, .. })) {
            sim.run(50);
            sim.advance(20_000);
        }
        sim.run(1_000);
        sim.restart(2, &config);
        while !sim.joiners.is_empty()
            || sim.events.iter().filter(|e| matches!(e, Event::Rejoined { node: 2, .. })).count() < 2
        {
            sim.run(200);
            sim.advance(1_000);
        }
        sim.run(3_000);
        sim.drain();
        sim.assert_every_request_answered_once();
        assert!(!sim.events.iter().any(|e| matches!(e, Event::Diverged(_))), "seed {s}");
        for partition in [1, 2] {
            let outcome = sim.digests(partition);
            let DigestOutcome::Digests { digests, .. } = &outcome else { panic!("seed {s}: no digests") };
            assert_eq!(digests.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![1, 2], "seed {s}: both count again");
            assert!(outcome.agreed(), "seed {s}: partition {partition} replicas differ: {outcome:?}");
        }
        assert!(sim.count(is_committed) > 500, "seed {s}");
    }
}
