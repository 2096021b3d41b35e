//! The first simulator's scenarios, on the simulator library:
//! a two-node active-active cluster — the real [`coordinator::Coordinator`] and real
//! [`node::Replica`]s over the tiny population — with messages reordered across and within
//! links, duplicated and held back, seeded so a failure replays. Each test prints its seed
//! first; `GLASS_SIM_SEED=S` replays (or explores) one.

use coordinator::{Event, Phase};
use sim::cluster::{config, Faults, Sim};
use wire::config::{AgreementRule, ClusterConfig};
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

/// Commits of requests submitted after the crash of node 3 (one of three replicas of every
/// partition) answered before its silence was detected, under `agreement`. (Batches sent
/// before the crash may have its results already, and are answered under either rule.)
fn commits_while_a_crash_is_undetected(agreement: AgreementRule, seed: u64) -> (usize, usize) {
    let mut config = config(3, LOAD_SEED);
    config.agreement = agreement;
    // A calm network: the window is the failure timeout's, not the network's delays'.
    let mut sim = Sim::new(&config, seed, Faults::NONE);
    sim.run(3_000);
    // Every replica caught up: what follows the crash starts from no backlog.
    sim.drain().unwrap();
    let first_after = sim.inputs().len() as u64;
    sim.crash(3);
    let crashed_at = sim.now_us();
    let detected = |sim: &Sim| sim.events().iter().any(|e| matches!(e, Event::NodeDown { node: 3, .. }));
    let committed_after =
        |sim: &Sim| sim.answers().iter().filter(|((_, id), (r, _))| *id >= first_after && is_committed(r)).count();
    let (mut steps, mut during) = (0, 0);
    while !detected(&sim) {
        // Counted before the step: answers the detection itself releases are not counted.
        during = committed_after(&sim);
        sim.run(1);
        steps += 1;
        assert!(steps < 100_000, "the crash was never detected");
    }
    eprintln!(
        "{agreement}: {during} commits of requests sent after the crash answered in the {} µs ({steps} steps) before its detection",
        sim.now_us() - crashed_at
    );
    sim.run(3_000);
    sim.drain().unwrap();
    answered_once(&sim);
    for partition in [1, 2] {
        let outcome = sim.digests(partition).unwrap();
        assert!(outcome.agreed(), "partition {partition}: {outcome:?}");
    }
    (during, sim.count(is_committed))
}

/// Issue 20, Section 5.3's near-instant failover: with three replicas and majority answers, a
/// replica that dies without a word holds nothing up — the two left agree and answer while
/// its silence has not yet timed out; under `all` nothing is answered in that window (the
/// control). The survivors' digests agree afterwards.
#[test]
fn a_silent_crash_of_one_of_three_replicas_holds_nothing_up_under_majority() {
    let seed = seed(31);
    let (majority, total) = commits_while_a_crash_is_undetected(AgreementRule::Majority, seed);
    let (all, _) = commits_while_a_crash_is_undetected(AgreementRule::All, seed);
    assert!(majority > 0, "majority answers went on while the crash was undetected");
    assert_eq!(all, 0, "under `all` a partition waits for the dead replica");
    assert!(total > 500, "{total}");
}

/// Issue 20: a replica whose results differ from the majority's — here its copy of
/// partition 1 had three extra transactions applied behind the coordinator's back — still
/// stops the partition with the alarm, though two agreeing replicas answer without it.
#[test]
fn a_diverged_third_replica_stops_its_partition_under_majority() {
    let mut sim = Sim::new(&config(3, LOAD_SEED), seed(32), Faults::NETWORK);
    let gen = GenConfig::for_profile(Profile::Paper, 1..=1).with_scale(sim::population::SCALE);
    let mut gen = Generator::new(gen, 99, LOAD_SEED).unwrap();
    let rogue = sim.db_mut(3, 1).unwrap();
    for _ in 0..3 {
        engine::procedures::execute(rogue, 1, &gen.next(0)).unwrap();
    }
    sim.run(6_000);
    sim.drain().unwrap();
    answered_once(&sim);
    let diverged: Vec<_> = sim
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Diverged(d) if d.partition == 1 => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(diverged.len(), 1, "{:?}", sim.events());
    eprintln!("{}", diverged[0]);
    assert!(matches!(sim.coordinator().status()[0].phase, Phase::Stopped { .. }));
    assert_eq!(sim.coordinator().status()[1].phase, Phase::Serving);
    assert!(sim.digests(2).unwrap().agreed());
}
