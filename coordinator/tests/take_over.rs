//! A coordinator member's take-over of a cluster brought down and up again (docs/design.md
//! §11): the group's stored decisions say every partition serves, while the new node
//! processes still load their partitions. A node that says it loads is alive, and is waited
//! for up to the load timeout rather than counted failed at the failure timeout.
//!
//! Found on real processes at 20 warehouses, whose load outlasts the failure timeout: after
//! `glass cluster down` and `up`, the first take-over counted both nodes failed, every
//! partition became unavailable, and that decision was stored, so the next `up` never became
//! ready either.

use coordinator::group::{Decision, Group, GroupState, GroupTiming, PartitionView, ViewState};
use coordinator::member::{initial_membership, Member};
use wire::channel::NodeToCoordinator;
use wire::config::ClusterConfig;
use wire::messages::{LoadState, ReplicaStanding, ReplicationRole};

const START_US: u64 = 1_700_000_000_000_000;

/// The default cluster with one coordinator (whose group elects itself).
fn config() -> ClusterConfig {
    let mut c = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
    c.coordinators.truncate(1);
    c.validate().unwrap();
    c
}

/// What the coordinator stored after deciding every partition serving on all its replicas.
fn stored_serving(config: &ClusterConfig) -> GroupState {
    let me = config.coordinators[0].id;
    let timing = GroupTiming { tick_us: 100_000, election_ticks: 10, election_offset_ticks: 0 };
    let mut group = Group::new(me, &[me], initial_membership(config), timing, START_US).unwrap();
    let mut stored = GroupState::default();
    let mut now = START_US;
    let mut proposed = false;
    for _ in 0..200 {
        now += 100_000;
        group.on_tick(now);
        if group.leading().is_some() && !proposed {
            let views = config
                .partitions
                .iter()
                .map(|p| PartitionView { partition: p.id, replicas: p.replicas.clone(), state: ViewState::Serving })
                .collect();
            group.propose(&Decision::Views(views)).unwrap();
            proposed = true;
        }
        if let Some(s) = group.ready().persist {
            stored = s;
        }
        if config.partitions.iter().all(|p| group.membership().view(p.id).unwrap().state == ViewState::Serving) {
            return stored;
        }
    }
    panic!("a single coordinator decides within 200 ticks");
}

/// The member restarted with what it stored, its nodes connected.
fn restarted(config: &ClusterConfig) -> (Member, u64) {
    let now = START_US + 60_000_000;
    let mut member = Member::new(config, config.coordinators[0].id, 0, Some(stored_serving(config)), now).unwrap();
    for n in &config.nodes {
        let _ = member.on_node_connected(n.id, now);
    }
    (member, now)
}

/// Runs `member` for `seconds`: every heartbeat interval it ticks and hears every node's
/// heartbeat; the nodes in `loaded` answer the take-over with their replicas' standings, those
/// in `loading` report their partitions' load progress.
fn run(member: &mut Member, now: &mut u64, config: &ClusterConfig, seconds: u64, loaded: &[u16], loading: &[u16]) {
    let end = *now + seconds * 1_000_000;
    while *now < end {
        *now += config.timeouts.heartbeat_ms * 1_000;
        let _ = member.tick(*now);
        for n in &config.nodes {
            let _ = member.on_node_message(n.id, NodeToCoordinator::Heartbeat { now_ms: *now / 1_000 }, *now);
            for p in config.partitions.iter().filter(|p| p.replicas.contains(&n.id)) {
                if loaded.contains(&n.id) && member.taking_over() {
                    let msg = NodeToCoordinator::Standing { epoch: member.term(), partition: p.id, standing: fresh() };
                    let _ = member.on_node_message(n.id, msg, *now);
                }
                if loading.contains(&n.id) {
                    let state = LoadState::Loading { rows_loaded: 1_000, rows_total: 10_000_000 };
                    let _ =
                        member.on_node_message(n.id, NodeToCoordinator::LoadStatus { partition: p.id, state }, *now);
                }
            }
        }
    }
}

/// The standing of a replica just loaded: nothing executed.
fn fresh() -> ReplicaStanding {
    ReplicaStanding {
        role: ReplicationRole::Replica,
        executed_seq: 0,
        held_seq: 0,
        kept_from: 1,
        last_ts: None,
        stopped: false,
        held_reads: Vec::new(),
        pieces: Vec::new(),
    }
}

fn states(member: &Member, config: &ClusterConfig) -> Vec<ViewState> {
    config.partitions.iter().map(|p| member.membership().view(p.id).unwrap().state.clone()).collect()
}

fn replicas(member: &Member, config: &ClusterConfig) -> Vec<Vec<u16>> {
    let sorted = |mut r: Vec<u16>| {
        r.sort_unstable();
        r
    };
    config.partitions.iter().map(|p| sorted(member.membership().view(p.id).unwrap().replicas.clone())).collect()
}

#[test]
fn a_node_that_says_it_loads_is_waited_for_past_the_failure_timeout() {
    let config = config();
    let (mut member, mut now) = restarted(&config);
    // Node 1 loaded first; node 2 still loads, for ten failure timeouts (far inside the load
    // timeout).
    let wait = 10 * config.timeouts.failure_timeout_ms / 1_000;
    run(&mut member, &mut now, &config, wait, &[1], &[2]);
    assert!(member.taking_over(), "the take-over waits for the loading node");
    assert!(states(&member, &config).iter().all(|s| *s == ViewState::Serving), "nothing was decided meanwhile");
    // Loaded, node 2 answers too: the take-over ends with every replica in.
    run(&mut member, &mut now, &config, 2, &[1, 2], &[]);
    assert!(member.leading().is_some() && !member.taking_over(), "the take-over ended");
    assert!(states(&member, &config).iter().all(|s| *s == ViewState::Serving), "{:?}", states(&member, &config));
    let all = vec![vec![1, 2]; config.partitions.len()];
    assert_eq!(replicas(&member, &config), all, "every replica stays in");
}

#[test]
fn a_node_heard_from_that_never_says_it_loads_is_left_out() {
    // The control: a node heard from (heartbeats) that neither answers nor says it loads is
    // left out once the take-over's patience is over, so the test above shows what the load
    // reports change.
    let config = config();
    let (mut member, mut now) = restarted(&config);
    run(&mut member, &mut now, &config, 10 * config.timeouts.failure_timeout_ms / 1_000, &[1], &[]);
    assert!(!member.taking_over(), "the take-over did not wait for the silent node");
    assert_eq!(replicas(&member, &config), vec![vec![1]; config.partitions.len()], "node 2 is left out");
}
