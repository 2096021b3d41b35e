//! The first simulator's scenarios, on the simulator library:
//! a two-node active-active cluster — the real [`coordinator::Coordinator`] and real
//! [`node::Replica`]s over the tiny population — with messages reordered across and within
//! links, duplicated and held back, seeded so a failure replays. Each test prints its seed
//! first; `GLASS_SIM_SEED=S` replays (or explores) one.

use coordinator::{Event, Phase};
use sim::cluster::{config, Faults, Sim};
use wire::config::ClusterConfig;
use wire::messages::{ClientResult, DigestOutcome, Rejection};
use workload::gen::{GenConfig, Generator, Profile};

/// The population's seed.
const LOAD_SEED: u64 = 7;

/// The run's seed: `default`, or `GLASS_SIM_SEED` to replay or explore; printed first.
fn seed(default: u64) -> u64 {
    let seed = std::env::var("GLASS_SIM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    eprintln!("seed {seed} (replay with GLASS_SIM_SEED={seed})");
    seed
}

/// Two nodes, two partitions of one warehouse each, both on both nodes.
fn two_nodes() -> ClusterConfig {
    config(2, LOAD_SEED)
}

fn is_committed(r: &ClientResult) -> bool {
    matches!(r, ClientResult::Committed { .. })
}

fn answered_once(sim: &Sim) {
    if let Err(e) = sim::check::every_request_answered_once(sim) {
        panic!("{e}");
    }
}

/// Paper Section 5.3: replicas that execute the same transactions in timestamp order reach
/// the same state, with no log, whatever the network does to the order of messages — the
/// standard mix's multi-partition NewOrders and Payments (remote warehouses in the other
/// partition, issue 7) included: they commit, and the replicas stay identical.
#[test]
fn replicas_stay_identical_under_reordering_and_duplication() {
    let mut sim = Sim::new(&two_nodes(), seed(11), Faults::NETWORK);
    sim.run(12_000);
    sim.drain().unwrap();
    answered_once(&sim);
    let committed = sim.count(is_committed);
    let spans = sim::run::spans(&sim);
    let aborted = sim.count(|r| matches!(r, ClientResult::Aborted { .. }));
    let failed = sim.count(|r| matches!(r, ClientResult::Failed { .. }));
    let refused = sim.count(|r| matches!(r, ClientResult::Rejected(_)));
    eprintln!(
        "{} requests: {committed} committed ({} single-partition, {} multi-partition of {} spanning partitions), {aborted} aborted, {refused} refused, {failed} failed",
        sim.inputs().len(),
        spans.committed_single,
        spans.committed_multi,
        spans.multi_requests
    );
    assert!(committed > 1_000, "{committed}");
    assert_eq!(spans.committed_single + spans.committed_multi, committed as u64);
    assert!(spans.committed_multi > 0, "the standard profile's remote warehouses span partitions, and they commit");
    assert_eq!(failed, 0);
    assert!(
        !sim.events().iter().any(Event::is_alarm),
        "{:?}",
        sim.events().iter().filter(|e| e.is_alarm()).collect::<Vec<_>>()
    );

    let (mut waited, mut duplicates) = (0, 0);
    for node in [1, 2] {
        for partition in [1, 2] {
            let s = sim.replica_mut(node, partition).unwrap().stats();
            waited += s.batches_waited;
            duplicates += s.duplicate_batches;
        }
    }
    assert!(waited > 20 && duplicates > 20, "the network was adversarial: {waited} waited, {duplicates} duplicates");
    for partition in [1, 2] {
        let outcome = sim.digests(partition).unwrap();
        assert!(outcome.agreed(), "partition {partition}: {outcome:?}");
        let DigestOutcome::Digests { seq, digests } = outcome else { unreachable!() };
        assert_eq!(digests.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![1, 2]);
        // The replicas, asked directly, agree with what the coordinator reported.
        for node in [1, 2] {
            let r = sim.replica_mut(node, partition).unwrap();
            assert_eq!(r.applied_seq(), seq);
            assert_eq!(r.state_digest(), digests[0].1);
            eprintln!("node {node} partition {partition}: {:?}", r.stats());
        }
    }
}

/// A replica whose state differs (here: three extra transactions applied behind the
/// coordinator's back) is caught: its partition stops loudly rather than serve divergent
/// data, every waiting client is told, and the other partition keeps serving (Section 5.3:
/// replicas are compared, never trusted).
#[test]
fn a_diverged_replica_stops_its_partition_loudly() {
    let mut sim = Sim::new(&two_nodes(), seed(12), Faults::NETWORK);
    let gen = GenConfig::for_profile(Profile::Paper, 1..=1).with_scale(sim::population::SCALE);
    let mut gen = Generator::new(gen, 99, LOAD_SEED).unwrap();
    let rogue = sim.db_mut(2, 1).unwrap();
    for _ in 0..3 {
        engine::procedures::execute(rogue, 1, &gen.next(0)).unwrap();
    }
    sim.run(6_000);
    sim.drain().unwrap();
    answered_once(&sim);
    let _ = sim.digests(1).unwrap();
    let diverged: Vec<_> =
        sim.events().iter().filter(|e| matches!(e, Event::Diverged(d) if d.partition == 1)).collect();
    assert_eq!(diverged.len(), 1, "{:?}", sim.events());
    eprintln!("{}", diverged[0]);
    let status = sim.coordinator().status();
    assert!(matches!(status[0].phase, Phase::Stopped { .. }));
    assert_eq!(status[1].phase, Phase::Serving);
    assert!(sim.count(|r| matches!(r, ClientResult::Rejected(Rejection::PartitionStopped { partition: 1, .. }))) > 0);
    assert!(sim.replica_mut(1, 1).unwrap().stopped().is_some() && sim.replica_mut(2, 1).unwrap().stopped().is_some());
    assert!(sim.digests(2).unwrap().agreed());
}

/// A node that crashes mid-run is declared failed after `failure_timeout_ms` of silence; the
/// survivor alone answers from then on, and every request is still answered exactly once
/// (Section 5.3: the surviving replica keeps the partition available).
#[test]
fn a_crashed_node_is_detected_and_the_survivor_serves() {
    let config = two_nodes();
    let mut sim = Sim::new(&config, seed(13), Faults::NETWORK);
    sim.run(4_000);
    sim.crash(2);
    let crash_us = sim.now_us();
    while !sim::run::node_went_down(sim.events(), 2) {
        sim.deliver_one();
        sim.advance(1_000);
    }
    let detected_ms = (sim.now_us() - crash_us) / 1_000;
    let t = &config.timeouts;
    assert!(detected_ms >= t.failure_timeout_ms - t.heartbeat_ms, "{detected_ms}");
    assert!(detected_ms <= t.failure_timeout_ms + 2 * t.heartbeat_ms, "{detected_ms}");
    sim.run(4_000);
    sim.drain().unwrap();
    answered_once(&sim);
    assert!(
        !sim.events().iter().any(|e| matches!(e, Event::Diverged(_))) && !sim::run::node_went_down(sim.events(), 1)
    );
    for partition in [1, 2] {
        let DigestOutcome::Digests { digests, .. } = sim.digests(partition).unwrap() else { panic!("no digests") };
        assert_eq!(digests.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![1]);
        assert_eq!(sim.coordinator().status()[usize::from(partition) - 1].live_replicas, vec![1]);
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
    let config = two_nodes();
    let first = seed(21);
    let seeds: u64 = std::env::var("GLASS_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    for s in first..first + seeds {
        eprintln!("seed {s}");
        let mut sim = Sim::new(&config, s, Faults::NETWORK);
        let before_crash = 2_000 + sim.rng().below(2_000) as usize;
        sim.run(before_crash);
        sim.crash(2);
        while !sim::run::node_went_down(sim.events(), 2) {
            sim.run(50);
            sim.advance(5_000);
        }
        sim.run(1_000);
        sim.restart(2);
        while sim.is_rejoining()
            || sim.events().iter().filter(|e| matches!(e, Event::Rejoined { node: 2, .. })).count() < 2
        {
            sim.run(200);
            sim.advance(1_000);
        }
        sim.run(3_000);
        sim.drain().unwrap();
        answered_once(&sim);
        assert!(!sim.events().iter().any(|e| matches!(e, Event::Diverged(_))), "seed {s}");
        for partition in [1, 2] {
            let outcome = sim.digests(partition).unwrap();
            let DigestOutcome::Digests { digests, .. } = &outcome else { panic!("seed {s}: no digests") };
            assert_eq!(digests.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![1, 2], "seed {s}: both count again");
            assert!(outcome.agreed(), "seed {s}: partition {partition} replicas differ: {outcome:?}");
        }
        assert!(sim.count(is_committed) > 500, "seed {s}");
    }
}
