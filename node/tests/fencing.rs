//! A node under several coordinators (docs/design.md §11): fencing by epoch in the node
//! machine, and a replica's part in a take-over — its standing, the batches held past a gap
//! dropped, its recent batches sent to the new leader — and a rejoin that starts over with
//! the new leader. Driven message by message, no thread or socket.

use engine::loader::{load_database_scaled, Scale};
use engine::LeanDb;
use node::machine::{Effect, FetchOrder, NodeEffect, NodeMachine, PartitionMachine, UNSENT_MAX};
use node::replica::{Emit, ReplicaRole};
use node::Replica;
use wire::channel::{CoordinatorToNode, NodeToCoordinator};
use wire::config::{ClusterConfig, CoordinatorConfig, Mode};
use wire::messages::{
    Batch, BatchTxn, LoadState, NodeId, Part, PartitionId, ReplicationRole, RequestId, Results, Seq, Timestamp,
};

const P: PartitionId = 1;
const ME: NodeId = 1;

/// The default cluster with three coordinators (ids 0, 1, 2).
fn three_coordinators() -> ClusterConfig {
    let mut c = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
    c.coordinators = (0..3u8)
        .map(|id| CoordinatorConfig {
            id,
            address: format!("127.0.0.1:{}", 7410 + u16::from(id)),
            metrics: None,
            ssh: None,
        })
        .collect();
    c.validate().unwrap();
    c
}

fn machine(config: &ClusterConfig) -> NodeMachine {
    let roles: Vec<(PartitionId, ReplicaRole)> =
        config.partitions_on_node(ME).map(|p| (p.id, ReplicaRole::of(config.mode(), p, ME))).collect();
    let mut m = NodeMachine::new(config, ME, &roles, 0);
    for c in config.coordinator_ids() {
        assert!(m.on_link_up(c, 0).is_empty(), "a first connection asks nothing");
    }
    m
}

fn results(seq: Seq) -> Emit {
    Emit::ToCoordinator(NodeToCoordinator::Results(Results { partition: P, seq, results: Vec::new() }))
}

fn sent_to(effects: &[NodeEffect]) -> Vec<(u8, &NodeToCoordinator)> {
    effects
        .iter()
        .filter_map(|e| match e {
            NodeEffect::ToCoordinator { coordinator, msg } => Some((*coordinator, msg)),
            _ => None,
        })
        .collect()
}

/// docs/design.md §11, fencing: until a coordinator takes over, what the node has for the
/// leader waits; the one that takes over gets it, and every partition gets the `TakeOver`;
/// anything from an older epoch — or from another coordinator claiming the same epoch — is
/// refused and its sender told the newer epoch.
#[test]
fn the_newest_epoch_leads_and_older_ones_are_fenced() {
    let config = three_coordinators();
    let mut m = machine(&config);
    assert_eq!(m.leader(), None);
    assert!(m.on_emit(results(1), 0).is_empty(), "kept while no leader is known");
    let ready =
        NodeToCoordinator::LoadStatus { partition: P, state: LoadState::Loading { rows_loaded: 1, rows_total: 2 } };
    assert!(m.on_emit(Emit::ToCoordinator(ready), 0).is_empty(), "progress is not kept");

    let out = m.on_coordinator(1, 5, CoordinatorToNode::TakeOver { epoch: 5 });
    assert_eq!((m.leader(), m.epoch()), (Some(1), 5));
    let sent = sent_to(&out);
    assert_eq!(sent.len(), 1, "the kept results, and nothing else: {out:?}");
    assert!(matches!(sent[0], (1, NodeToCoordinator::Results(r)) if r.seq == 1));
    let partitions: Vec<PartitionId> = out
        .iter()
        .filter_map(|e| match e {
            NodeEffect::ToPartition { partition, msg: CoordinatorToNode::TakeOver { epoch: 5 } } => Some(*partition),
            _ => None,
        })
        .collect();
    assert_eq!(partitions, vec![1, 2], "every partition held reports its standing");

    // The deposed leader's batch: refused, and it is told.
    let batch =
        CoordinatorToNode::Batch(Batch { partition: P, seq: 9, txns: Vec::new(), digest_after: false, answerer: None });
    let out = m.on_coordinator(0, 4, batch.clone());
    assert_eq!(out, vec![NodeEffect::ToCoordinator { coordinator: 0, msg: NodeToCoordinator::Fenced { epoch: 5 } }]);
    // Another coordinator claiming the leader's epoch cannot be its leader.
    let out = m.on_coordinator(2, 5, batch.clone());
    assert_eq!(out, vec![NodeEffect::ToCoordinator { coordinator: 2, msg: NodeToCoordinator::Fenced { epoch: 5 } }]);
    // The leader's own batch goes through.
    let out = m.on_coordinator(1, 5, batch);
    assert!(matches!(&out[..], [NodeEffect::ToPartition { partition: P, .. }]), "{out:?}");
    // Results and heartbeats go to the leader.
    assert_eq!(
        sent_to(&m.on_emit(results(2), 10)),
        vec![(
            1,
            &NodeToCoordinator::Results(match results(2) {
                Emit::ToCoordinator(NodeToCoordinator::Results(r)) => r,
                _ => unreachable!(),
            })
        )]
    );
    let beat = m.tick(1_000_000, |_| None);
    assert!(sent_to(&beat).iter().all(|(c, _)| *c == 1), "{beat:?}");
    assert!(!beat.is_empty());
}

/// What waits for a leader is bounded: the oldest goes first.
#[test]
fn what_waits_for_a_leader_is_bounded() {
    let config = three_coordinators();
    let mut m = machine(&config);
    for seq in 1..=(UNSENT_MAX as u64 + 10) {
        assert!(m.on_emit(results(seq), 0).is_empty());
    }
    let out = m.on_coordinator(2, 1, CoordinatorToNode::TakeOver { epoch: 1 });
    let seqs: Vec<Seq> = sent_to(&out)
        .into_iter()
        .filter_map(|(_, msg)| match msg {
            NodeToCoordinator::Results(r) => Some(r.seq),
            _ => None,
        })
        .collect();
    assert_eq!(seqs.len(), UNSENT_MAX);
    assert_eq!(seqs[0], 11, "the oldest were dropped");
}

/// A broken link that comes back: with one coordinator, it counted the node failed, so every
/// partition rejoins; with several, the leader says so itself — a membership that leaves
/// the node out sends that partition's serving replica back to rejoin — and a link back to
/// a coordinator that is no longer the leader changes nothing.
#[test]
fn a_broken_link_rejoins_with_one_coordinator_and_with_several_the_leader_says_so() {
    let mut one = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
    one.coordinators.truncate(1);
    let mut m = machine(&one);
    m.on_link_lost(0, 100);
    let dials = m.tick(100 + node::machine::CONNECT_RETRY_MS * 1_000, |_| None);
    assert!(dials.contains(&NodeEffect::Dial { coordinator: 0 }), "{dials:?}");
    assert_eq!(m.on_link_up(0, 200_000), vec![NodeEffect::RejoinAll]);
    assert_eq!(m.reconnects(), 1);

    let config = three_coordinators();
    let mut m = machine(&config);
    m.on_coordinator(0, 3, CoordinatorToNode::TakeOver { epoch: 3 });
    m.on_link_lost(0, 100);
    assert!(m.on_link_up(0, 200_000).is_empty(), "the leader's membership decides");
    let left_out = CoordinatorToNode::Membership { partition: P, epoch: 7, live: vec![2, 3] };
    assert_eq!(m.on_coordinator(0, 3, left_out), vec![NodeEffect::Rejoin { partition: P }]);
    // An older membership arriving late does not.
    let stale = CoordinatorToNode::Membership { partition: P, epoch: 6, live: vec![2] };
    assert!(!m.on_coordinator(0, 3, stale).contains(&NodeEffect::Rejoin { partition: P }));

    let mut m = machine(&config);
    m.on_coordinator(0, 3, CoordinatorToNode::TakeOver { epoch: 3 });
    m.on_link_lost(0, 100);
    m.on_coordinator(1, 4, CoordinatorToNode::TakeOver { epoch: 4 });
    assert!(m.on_link_up(0, 200_000).is_empty(), "the old leader is a standby now");
    // A standby's link breaking and coming back changes nothing either.
    m.on_link_lost(2, 300_000);
    assert!(m.on_link_up(2, 600_000).is_empty());
}

fn population() -> LeanDb {
    let mut db = LeanDb::new();
    load_database_scaled(&mut db, 1..=1, 7, Scale::tiny(), &mut |_| {}).unwrap();
    db
}

fn ts(millis: u64) -> Timestamp {
    Timestamp::new(1_700_000_000_000 + millis, 0, 0)
}

/// A batch of one read (an empty batch would carry no timestamp, and the standing's latest
/// timestamp is checked).
fn batch(seq: Seq) -> Batch {
    let input = stock_level();
    Batch {
        partition: P,
        seq,
        txns: vec![BatchTxn { ts: ts(seq), input, part: Part::Whole, id: RequestId::NONE }],
        digest_after: false,
        answerer: None,
    }
}

/// A StockLevel of warehouse 1, district 1: a read, valid on every replica.
fn stock_level() -> engine::procedures::TxnInput {
    engine::procedures::TxnInput::StockLevel(engine::procedures::StockLevelInput { w_id: 1, d_id: 1, threshold: 15 })
}

fn standing_of(effects: &[Effect<NodeId>]) -> wire::messages::ReplicaStanding {
    effects
        .iter()
        .find_map(|e| match e {
            Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::Standing { epoch: 6, partition: P, standing })) => {
                Some(standing.clone())
            }
            _ => None,
        })
        .expect("a standing")
}

/// docs/design.md §11, take-over step 1: the replica reports what it executed and holds in
/// order; a batch held past a gap is dropped (the new leader will number its own batches
/// from there); its recent batches go to the new leader on request, in order, from the one
/// asked for.
#[test]
fn a_replica_reports_its_standing_drops_batches_past_a_gap_and_sends_its_recent_batches() {
    let replica = Replica::new(ME, P, population(), 64);
    let mut m: PartitionMachine<NodeId> = PartitionMachine::serving(Mode::ActiveActive, replica, 64);
    for seq in [1, 2, 3, 5, 6] {
        m.on_coordinator(CoordinatorToNode::Batch(batch(seq)));
    }
    let standing = standing_of(&m.on_coordinator(CoordinatorToNode::TakeOver { epoch: 6 }));
    assert_eq!(standing.role, ReplicationRole::Replica);
    assert_eq!((standing.executed_seq, standing.held_seq, standing.kept_from), (3, 3, 1));
    assert_eq!(standing.last_ts, Some(ts(3)), "the dropped batches' timestamps are not counted");
    assert!(!standing.stopped);
    assert_eq!(m.replica().unwrap().stats().batches_dropped_at_take_over, 2);

    let held_with = |m: &mut PartitionMachine<NodeId>, after: Seq, whole_after: Seq| -> Vec<(Seq, usize)> {
        let out = m.on_coordinator(CoordinatorToNode::SendBatches { partition: P, after, whole_after });
        match &out[..] {
            [Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::HeldBatches { partition: P, batches, .. }))] => {
                batches.iter().map(|b| (b.seq, b.txns.len())).collect()
            }
            other => panic!("{other:?}"),
        }
    };
    let held = |m: &mut PartitionMachine<NodeId>, after: Seq| -> Vec<Seq> {
        held_with(m, after, 0).into_iter().map(|(seq, _)| seq).collect()
    };
    assert_eq!(held(&mut m, 0), vec![1, 2, 3]);
    // Batches every replica that counts executed come with their multi-partition pieces
    // only: these have none.
    let whole = held_with(&mut m, 0, 0)[2].1;
    assert!(whole > 0);
    assert_eq!(held_with(&mut m, 0, 2), vec![(1, 0), (2, 0), (3, whole)]);
    assert_eq!(held(&mut m, 2), vec![3]);
    assert_eq!(held(&mut m, 3), Vec::<Seq>::new());
    // The new leader sends batch 2 again: it has not seen its results, which come again,
    // once; a conflicting batch 2 would stop the replica.
    let again = m.on_coordinator(CoordinatorToNode::Batch(batch(2)));
    assert!(
        matches!(&again[..], [Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::Results(r)))] if r.seq == 2),
        "{again:?}"
    );
    assert!(m.on_coordinator(CoordinatorToNode::Batch(batch(2))).is_empty(), "answered again once");
    // The new leader numbers from 4: its batch 4 and 5 are not the dropped ones.
    m.on_coordinator(CoordinatorToNode::Batch(batch(4)));
    m.on_coordinator(CoordinatorToNode::Batch(batch(5)));
    assert_eq!(m.replica().unwrap().applied_seq(), 5);
    assert_eq!(held(&mut m, 3), vec![4, 5]);
}

/// A rejoin under way when a new leader takes over starts over with the new leader: its plan
/// was the old leader's, who was to stream the batches.
#[test]
fn a_rejoin_under_way_asks_the_new_leader_again() {
    let (mut m, first) = PartitionMachine::<NodeId>::rejoining(Mode::ActiveActive, ME, P, 64);
    assert!(matches!(&first[..], [Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::RejoinRequest { .. }))]));
    let plan = m.on_coordinator(CoordinatorToNode::RejoinPlan { partition: P, source: 2, from_seq: 4 });
    let old = m.fetch_under_way().expect("a fetch under way");
    assert!(matches!(&plan[..], [Effect::Fetch(FetchOrder { source: 2, id, .. })] if *id == old));
    let again = m.on_coordinator(CoordinatorToNode::TakeOver { epoch: 9 });
    assert!(matches!(
        &again[..],
        [Effect::AbandonFetch { id }, Effect::Emit(Emit::ToCoordinator(NodeToCoordinator::RejoinRequest { partition: P }))]
            if *id == old
    ));
    assert_eq!(m.fetch_under_way(), None);
    // The old plan's fetch, failing late, is not retried.
    let late = m.on_fetched(old, Err(node::error::RejoinError::Stale { got: 0, wanted: 3 }));
    assert!(late.is_empty(), "{late:?}");
}

/// docs/design.md §10, "Catching up under load": a primary's node tells the leader when its
/// shipping queue to a backup passes a quarter of its bound, at most every
/// `BEHIND_REPORT_US` per backup; a short queue, or no known leader, sends nothing.
#[test]
fn a_long_shipping_queue_is_reported_to_the_leader_at_a_bounded_rate() {
    use node::machine::BEHIND_REPORT_US;
    let mut m = machine(&three_coordinators());
    assert!(m.on_peer_queue(2, P, 4_000, 4_096, 10).is_empty(), "no leader known yet");
    m.on_coordinator(0, 1, CoordinatorToNode::TakeOver { epoch: 1 });
    let behind = |effects: &[NodeEffect]| {
        sent_to(effects).iter().filter(|(_, m)| matches!(m, NodeToCoordinator::ShippingBehind { .. })).count()
    };
    assert_eq!(behind(&m.on_peer_queue(2, P, 1_024, 4_096, 10)), 0, "a quarter full is not long");
    let out = m.on_peer_queue(2, P, 1_025, 4_096, 20);
    assert_eq!(sent_to(&out), vec![(0, &NodeToCoordinator::ShippingBehind { partition: P, backup: 2, queued: 1_025 })]);
    assert_eq!(behind(&m.on_peer_queue(2, P, 2_000, 4_096, 20 + BEHIND_REPORT_US - 1)), 0, "too soon");
    assert_eq!(behind(&m.on_peer_queue(3, P, 2_000, 4_096, 30)), 1, "each backup on its own");
    assert_eq!(behind(&m.on_peer_queue(2, P, 2_000, 4_096, 20 + BEHIND_REPORT_US)), 1);
}
