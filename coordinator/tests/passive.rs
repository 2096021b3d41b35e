//! The coordinator in the passive modes (docs/design.md, "The three answers glass measures": `active-passive` and
//! `full-stack`), driven directly with the test playing the replicas: only the primary — the
//! first replica cluster.toml lists — receives batches and is awaited for results, since "the
//! backups apply redo in order (roll forward) and never execute procedure logic"; a partition
//! serves only once its backups too loaded the same state; losing a backup leaves the primary
//! serving, told by a Membership which replicas remain.
//!
//! The committed cluster.toml places partition 1 on nodes [1, 2] and partition 2 on [2, 1], so
//! node 1 is partition 1's primary and node 2 partition 2's.

mod common;
use common::{batches, events, replies};

use coordinator::agreement::DivergenceKind;
use coordinator::{Coordinator, Detection, Event, Output, Phase};
use engine::procedures::*;
use wire::channel::{CoordinatorToNode, NodeToCoordinator};
use wire::config::{ClusterConfig, Mode};
use wire::messages::*;

const MS: u64 = 1_000;
const START_US: u64 = 1_700_000_000_000 * MS;
/// The load digest every replica reports unless a test says otherwise.
const LOADED: StateDigest = StateDigest(0x10AD);

/// The committed cluster.toml in `mode`, closing a batch at two transactions.
fn config(mode: Mode) -> ClusterConfig {
    let mut c = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
    c = c.with_mode(mode, None);
    c.limits.batch_txns_max = 2;
    c.limits.batch_wait_us = 500;
    c.validate().unwrap();
    assert!(!c.mode().every_replica_executes());
    c
}

fn payment(w_id: u16, c_id: u32) -> TxnInput {
    TxnInput::Payment(PaymentInput {
        w_id,
        d_id: 1,
        c_w_id: w_id,
        c_d_id: 1,
        customer: CustomerSelector::ById(c_id),
        h_amount: 1_000,
        date: 1_213_056_000, // 2008-06-10: a date in TPC-C's domain
    })
}

fn request(request_id: u64, input: TxnInput) -> ClientRequest {
    ClientRequest::new(7, request_id, Timestamp(0), input)
}

fn ready(partition: PartitionId, digest: StateDigest) -> NodeToCoordinator {
    NodeToCoordinator::LoadStatus { partition, state: LoadState::Ready { digest } }
}

/// What a primary answers: every Payment committed.
fn results(batch: &Batch) -> NodeToCoordinator {
    let results = batch
        .txns
        .iter()
        .map(|t| {
            let TxnInput::Payment(PaymentInput { customer: CustomerSelector::ById(c_id), .. }) = t.input else {
                panic!("payments by id only")
            };
            let outcome =
                TxnOutcome::Committed(TxnOutput::Payment(PaymentOutput { c_id, c_balance: 7, bad_credit: false }));
            TxnResult { ts: t.ts, digest: outcome.digest(), outcome }
        })
        .collect();
    NodeToCoordinator::Results(Results { partition: batch.partition, seq: batch.seq, results })
}

fn phase(c: &Coordinator, partition: PartitionId) -> Phase {
    c.status().into_iter().find(|p| p.partition == partition).unwrap().phase
}

/// A coordinator in `mode` whose partitions' primaries and backups all reported `Ready` with
/// [`LOADED`].
fn serving(mode: Mode) -> Coordinator {
    let mut c = Coordinator::new(&config(mode), START_US).unwrap();
    let mut ready_events = Vec::new();
    for node in [1, 2] {
        for partition in [1, 2] {
            ready_events.extend(events(&c.on_node_message(node, ready(partition, LOADED), START_US)));
        }
    }
    assert_eq!(
        ready_events,
        vec![
            Event::PartitionReady { partition: 1, replicas: vec![1, 2], digest: LOADED },
            Event::PartitionReady { partition: 2, replicas: vec![2, 1], digest: LOADED },
        ],
        "each partition serves once its primary and its backup loaded the same state"
    );
    c
}

/// docs/design.md, the three modes: in active-passive (and full-stack, which replicates the same
/// way) the primary executes and the backups only roll its log forward — "the backups apply
/// redo in order (roll forward) and never execute procedure logic" — so the coordinator sends
/// a partition's batches to its primary alone (partition 1 → node 1, partition 2 → node 2) and
/// answers the client on the primary's results alone; results claimed by a backup are ignored.
#[test]
fn batches_go_to_the_primary_alone_and_its_results_answer_the_client() {
    for mode in [Mode::ActivePassive, Mode::FullStack] {
        let mut c = serving(mode);
        for (partition, primary, backup, w_id) in [(1, 1, 2, 1), (2, 2, 1, 3)] {
            let id = u64::from(partition) * 10;
            assert!(c.on_client_request(7, request(id, payment(w_id, 1)), START_US).is_empty());
            let out = c.on_client_request(7, request(id + 1, payment(w_id + 1, 2)), START_US + 10);
            let [(nodes, batch)] = &batches(&out)[..] else { panic!("{mode:?}: {out:?}") };
            assert_eq!(nodes, &vec![primary], "{mode:?}: partition {partition}'s batch goes to its primary only");
            assert_eq!((batch.partition, batch.seq, batch.txns.len()), (partition, 1, 2));

            // The backup executes nothing: results in its name count for nothing.
            let out = c.on_node_message(backup, results(batch), START_US + 20);
            assert!(replies(&out).is_empty(), "{mode:?}: {out:?}");
            assert!(matches!(&events(&out)[..], [Event::Ignored { node, .. }] if *node == backup), "{mode:?}: {out:?}");

            let out = c.on_node_message(primary, results(batch), START_US + 30);
            let r = replies(&out);
            assert_eq!(r.iter().map(|(client, r)| (*client, r.request_id)).collect::<Vec<_>>(), [(7, id), (7, id + 1)]);
            for ((_, reply), t) in r.iter().zip(&batch.txns) {
                assert!(
                    matches!(&reply.result, ClientResult::Committed { ts, output: TxnOutput::Payment(_) } if *ts == t.ts),
                    "{mode:?}: {reply:?}"
                );
            }
            // The primary's results delivered again answer nobody twice.
            assert!(replies(&c.on_node_message(primary, results(batch), START_US + 40)).is_empty());
            let status = &c.status()[usize::from(partition) - 1];
            assert_eq!((status.inflight_txns, status.batches_sent), (0, 1));
            assert_eq!(status.live_replicas, vec![primary, backup], "the primary, then its backup");
        }
        assert!(c.status().iter().all(|p| p.phase == Phase::Serving));
    }
}

/// A partition serves only once all its live replicas, the backups included, loaded the same
/// state (docs/design.md, "The determinism contract": replicas compare digests): until the backup
/// reports `Ready` requests are refused `NotReady`; a backup whose load digest differs from its
/// primary's stops the partition for good (Event::Diverged, PartitionStopped to both nodes),
/// since rolling the primary's after-images forward onto a different state would not give the
/// primary's state.
#[test]
fn a_partition_waits_for_its_backup_and_stops_if_the_backup_loaded_another_state() {
    let mut c = Coordinator::new(&config(Mode::ActivePassive), START_US).unwrap();

    // Partition 1: the primary (node 1) is ready first; the partition waits for node 2.
    assert!(events(&c.on_node_message(1, ready(1, LOADED), START_US)).is_empty());
    assert_eq!(phase(&c, 1), Phase::Loading);
    let out = c.on_client_request(1, request(1, payment(1, 1)), START_US);
    assert_eq!(replies(&out)[0].1.result, ClientResult::Rejected(Rejection::NotReady { partition: 1 }));
    assert!(batches(&out).is_empty());
    let progress =
        NodeToCoordinator::LoadStatus { partition: 1, state: LoadState::Loading { rows_loaded: 5, rows_total: 10 } };
    assert_eq!(
        events(&c.on_node_message(2, progress, START_US)),
        vec![Event::LoadProgress { partition: 1, node: 2, rows_loaded: 5, rows_total: 10 }]
    );
    assert_eq!(phase(&c, 1), Phase::Loading);
    assert_eq!(
        events(&c.on_node_message(2, ready(1, LOADED), START_US)),
        vec![Event::PartitionReady { partition: 1, replicas: vec![1, 2], digest: LOADED }]
    );
    assert_eq!(phase(&c, 1), Phase::Serving);
    c.on_client_request(1, request(2, payment(1, 1)), START_US);
    let out = c.on_client_request(1, request(3, payment(2, 1)), START_US);
    assert_eq!(batches(&out).iter().map(|(n, b)| (n.clone(), b.partition)).collect::<Vec<_>>(), [(vec![1], 1)]);

    // Partition 2: its backup (node 1) loaded another state.
    let other = StateDigest(LOADED.0 + 1);
    assert!(events(&c.on_node_message(2, ready(2, LOADED), START_US)).is_empty());
    let out = c.on_node_message(1, ready(2, other), START_US);
    let [Event::Diverged(d)] = &events(&out)[..] else { panic!("{out:?}") };
    assert_eq!((d.partition, d.seq), (2, 0));
    assert_eq!(d.kind, DivergenceKind::Load { digests: vec![(2, LOADED), (1, other)] });
    assert!(out.iter().any(|o| matches!(
        o,
        Output::ToNodes { nodes, msg: CoordinatorToNode::PartitionStopped { partition: 2, .. } } if nodes == &vec![2, 1]
    )));
    assert!(matches!(phase(&c, 2), Phase::Stopped { .. }));
    let out = c.on_client_request(1, request(4, payment(3, 1)), START_US);
    assert!(matches!(
        replies(&out)[0].1.result,
        ClientResult::Rejected(Rejection::PartitionStopped { partition: 2, .. })
    ));
    assert!(batches(&out).is_empty());
    // A late Ready changes nothing; partition 1 is unaffected.
    assert!(matches!(&events(&c.on_node_message(1, ready(2, LOADED), START_US))[..], [Event::Ignored { .. }]));
    assert!(matches!(phase(&c, 2), Phase::Stopped { .. }));
    assert_eq!(phase(&c, 1), Phase::Serving);
}

/// docs/design.md, the three modes, active-passive replication: when a backup's node is lost the
/// primary keeps serving alone; the coordinator sends a Membership without the lost backup to
/// the remaining replicas — the primary's node — which is how a `sync` primary learns it no
/// longer waits for that backup's acknowledgements. A batch in flight at the loss is answered
/// on the primary's results, and later batches still go to the primary only.
#[test]
fn losing_a_backup_tells_the_primary_and_the_partition_keeps_serving() {
    let mut c = serving(Mode::ActivePassive);
    c.on_client_request(1, request(1, payment(1, 1)), START_US);
    let out = c.on_client_request(1, request(2, payment(2, 2)), START_US);
    let [(nodes, in_flight)] = &batches(&out)[..] else { panic!("{out:?}") };
    assert_eq!(nodes, &vec![1]);

    // Node 2 (partition 1's backup) is lost.
    let now = START_US + 50 * MS;
    let out = c.on_node_lost(2, link_lost(), now);
    assert!(events(&out).contains(&Event::NodeDown { node: 2, silent_ms: 50, detection: link_lost() }));
    let memberships = common::memberships(&out, 1);
    assert_eq!(memberships, vec![(vec![1], vec![1])], "the primary's node learns its backup is gone: {out:?}");
    assert!(replies(&out).is_empty(), "the primary has not answered yet");
    assert_eq!(phase(&c, 1), Phase::Serving);
    assert_eq!(c.status()[0].live_replicas, vec![1]);

    // The batch in flight is answered on the primary's results; new ones go to it alone.
    let out = c.on_node_message(1, results(in_flight), now + 10);
    let r = replies(&out);
    assert_eq!(r.len(), 2);
    assert!(r.iter().all(|(_, r)| matches!(r.result, ClientResult::Committed { .. })), "{r:?}");
    c.on_client_request(1, request(3, payment(1, 3)), now + 20);
    let out = c.on_client_request(1, request(4, payment(2, 4)), now + 20);
    let [(nodes, next)] = &batches(&out)[..] else { panic!("{out:?}") };
    assert_eq!((nodes, next.seq), (&vec![1], 2));
    let r = replies(&c.on_node_message(1, results(next), now + 30));
    assert_eq!(r.iter().map(|(_, r)| r.request_id).collect::<Vec<_>>(), [3, 4]);
    assert_eq!(phase(&c, 1), Phase::Serving);

    // The lost node's later messages are ignored.
    assert!(matches!(
        &events(&c.on_node_message(2, NodeToCoordinator::Heartbeat { now_ms: now / MS }, now + 40))[..],
        [Event::Ignored { node: 2, .. }]
    ));
}

/// Restart recovery in the full stack (the paper's Section 5.3 contrast: a conventional
/// system recovers from its log): when a partition's last replica fails with a batch in
/// flight, the batch's clients are told "outcome unknown" (its commit records may be on that
/// node's disk), never "rejected", and the partition is unavailable. The open batch goes the
/// same way: it may hold a multi-partition transaction's piece whose siblings run elsewhere.
/// A restarted node may bring the partition back from its own write-ahead log only if it was
/// the last primary — a backup's log holds only the load — and then first executes the
/// batches the failure lost (replayed to it: docs/design.md §10; it skips what its log shows
/// committed), whose results answer no one again, then every batch from the next one on,
/// alone.
#[test]
fn a_full_stack_partition_comes_back_from_its_last_primarys_log() {
    let mut c = serving(Mode::FullStack);
    // Partition 1's backup (node 2) fails first; then its primary (node 1) with a batch in flight.
    let now = START_US + 50 * MS;
    c.on_node_lost(2, link_lost(), now);
    assert_eq!(c.status()[0].live_replicas, vec![1]);
    c.on_client_request(1, request(1, payment(1, 1)), now);
    let out = c.on_client_request(1, request(2, payment(2, 2)), now);
    let [(nodes, in_flight)] = &batches(&out)[..] else { panic!("{out:?}") };
    assert_eq!((nodes, in_flight.seq), (&vec![1], 1));
    c.on_client_request(1, request(3, payment(1, 3)), now); // open, not sent yet

    let out = c.on_node_lost(1, link_lost(), now + 10 * MS);
    let mut answers: Vec<(u64, ClientResult)> =
        replies(&out).into_iter().map(|(_, r)| (r.request_id, r.result)).collect();
    answers.sort_by_key(|(id, _)| *id);
    assert_eq!(answers.len(), 3, "{answers:?}");
    assert!(
        answers.iter().all(|(_, r)| matches!(r, ClientResult::OutcomeUnknown { .. })),
        "the open batch is closed and kept for the replay with the one in flight: {answers:?}"
    );
    assert_eq!(phase(&c, 1), Phase::Unavailable);

    // The backup restarted first: its log holds only the load — refused, naming node 1.
    let now = now + 100 * MS;
    let out = c.on_node_message(2, NodeToCoordinator::RejoinRequest { partition: 1 }, now);
    let refused: Vec<&String> = out
        .iter()
        .filter_map(|o| match o {
            Output::ToNodes { nodes, msg: CoordinatorToNode::RejoinRefused { partition: 1, reason } }
                if nodes == &vec![2] =>
            {
                Some(reason)
            }
            _ => None,
        })
        .collect();
    assert!(refused.len() == 1 && refused[0].contains("start node 1"), "{out:?}");
    assert_eq!(phase(&c, 1), Phase::Unavailable);

    // The last primary, recovered from its log, serves again from the next batch on.
    let out = c.on_node_message(1, NodeToCoordinator::RejoinRequest { partition: 1 }, now + MS);
    let resume: Vec<Seq> = out
        .iter()
        .filter_map(|o| match o {
            Output::ToNodes { nodes, msg: CoordinatorToNode::ResumeFromLog { partition: 1, from_seq } }
                if nodes == &vec![1] =>
            {
                Some(*from_seq)
            }
            _ => None,
        })
        .collect();
    assert_eq!(resume, vec![1], "the lost batches 1 and 2 are replayed first: {out:?}");
    let replayed = batches(&out);
    assert_eq!(replayed.iter().map(|(n, b)| (n.clone(), b.seq)).collect::<Vec<_>>(), [(vec![1], 1), (vec![1], 2)]);
    assert_eq!(replayed[0].1, *in_flight, "batch 1 as it was first sent");
    assert!(events(&out).contains(&Event::RecoveringFromLog { partition: 1, node: 1, from_seq: 1 }));
    assert_eq!(phase(&c, 1), Phase::Recovering { node: 1 }, "not ready until recovery is done");
    let refused = replies(&c.on_client_request(1, request(9, payment(1, 9)), now + MS));
    assert!(matches!(refused[0].1.result, ClientResult::Rejected(Rejection::NotReady { partition: 1 })));
    // The replayed batches' results: their clients were answered already.
    for (_, b) in &replayed {
        let out = c.on_node_message(1, results(b), now + MS);
        assert!(replies(&out).is_empty() && events(&out).is_empty(), "{out:?}");
    }
    let out = c.on_node_message(1, NodeToCoordinator::Rejoined { partition: 1, snapshot_seq: 0 }, now + MS);
    assert!(events(&out).contains(&Event::RecoveredFromLog { partition: 1, node: 1, from_seq: 1 }));
    assert_eq!(phase(&c, 1), Phase::Serving);
    assert_eq!(c.status()[0].live_replicas, vec![1]);
    c.on_client_request(1, request(4, payment(1, 4)), now + 2 * MS);
    let out = c.on_client_request(1, request(5, payment(2, 5)), now + 2 * MS);
    let [(nodes, next)] = &batches(&out)[..] else { panic!("{out:?}") };
    assert_eq!((nodes, next.seq), (&vec![1], 3));
    let r = replies(&c.on_node_message(1, results(next), now + 3 * MS));
    assert_eq!(r.iter().map(|(_, r)| r.request_id).collect::<Vec<_>>(), [4, 5]);
    assert!(r.iter().all(|(_, r)| matches!(r.result, ClientResult::Committed { .. })));

    // A second request once it serves: refused, the partition has a live primary.
    let out = c.on_node_message(1, NodeToCoordinator::RejoinRequest { partition: 1 }, now + 4 * MS);
    assert!(out
        .iter()
        .any(|o| matches!(o, Output::ToNodes { msg: CoordinatorToNode::RejoinRefused { partition: 1, .. }, .. })));
    assert_eq!(phase(&c, 1), Phase::Serving);
}

/// Issue 6: "the most up-to-date backup is promoted". Partition 1 on nodes 1 (primary), 2
/// and 3: the backups report what they applied with their heartbeats; when the primary
/// fails, node 3 — further along than node 2 — is asked to take over. Once it did, node 2
/// no longer counts as a backup (a promoted primary ships to no one; counting a backup that
/// falls behind would let a later promotion lose what it missed): an alarm says so.
#[test]
fn the_most_up_to_date_backup_is_promoted_and_the_others_stop_counting() {
    let mut c = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
    c = c.with_mode(Mode::ActivePassive, None);
    c.nodes.push(wire::config::NodeConfig {
        id: 3,
        address: "127.0.0.1:7405".into(),
        metrics: None,
        ssh: None,
        cpus: None,
    });
    let c = c.with_replication(3).unwrap();
    assert_eq!(c.partitions[0].replicas, vec![1, 2, 3]);
    let mut co = Coordinator::new(&c, START_US).unwrap();
    for node in [1, 2, 3] {
        for partition in [1, 2] {
            co.on_node_message(node, ready(partition, LOADED), START_US);
        }
    }
    assert_eq!(phase(&co, 1), Phase::Serving);
    co.on_node_message(2, NodeToCoordinator::BackupApplied { partition: 1, seq: 4 }, START_US + MS);
    co.on_node_message(3, NodeToCoordinator::BackupApplied { partition: 1, seq: 6 }, START_US + MS);
    co.on_node_message(2, NodeToCoordinator::BackupApplied { partition: 1, seq: 5 }, START_US + 2 * MS);

    let out = co.on_node_lost(1, link_lost(), START_US + 3 * MS);
    let promote: Vec<NodeId> = out
        .iter()
        .filter_map(|o| match o {
            Output::ToNodes { nodes, msg: CoordinatorToNode::Promote { partition: 1, .. } } => Some(nodes[0]),
            _ => None,
        })
        .collect();
    assert_eq!(promote, vec![3], "node 3 applied batch 6, node 2 only batch 5: {out:?}");
    let out = co.on_node_message(
        3,
        NodeToCoordinator::Promoted { partition: 1, applied_seq: 6, next_seq: 7 },
        START_US + 4 * MS,
    );
    let dropped = Event::BackupDropped { partition: 1, node: 2 };
    assert!(events(&out).contains(&dropped) && dropped.is_alarm(), "{out:?}");
    assert_eq!(co.status()[0].live_replicas, vec![3]);
    assert_eq!(phase(&co, 1), Phase::Serving);
}

/// docs/design.md §10, "A partition back alone from its log": a multi-partition Payment's
/// remote piece rides in full-stack partition 2's batch, whose only replica (node 2) fails
/// before the piece reported. Partition 2 may come back from node 2's log, so its piece is in
/// doubt, not lost: the home piece waits (no aborted outcome is sent in partition 2's name,
/// as two-phase commit's participants wait for an in-doubt one). Node 2 comes back, the lost
/// batch is replayed to it, its piece's reads reach the home partition, and the client is
/// answered once. (Before, the home piece aborted while the piece, on node 2's disk or
/// replayed, could take effect: half a transaction.)
#[test]
fn a_home_piece_waits_for_a_full_stack_partition_that_may_come_back_from_its_log() {
    let mut cfg = config(Mode::FullStack);
    cfg.partitions[1].replicas = vec![2];
    cfg.validate().unwrap();
    let mut c = Coordinator::new(&cfg, START_US).unwrap();
    for (node, partition) in [(1, 1), (2, 1), (2, 2)] {
        c.on_node_message(node, ready(partition, LOADED), START_US);
    }
    let remote_payment = TxnInput::Payment(PaymentInput {
        w_id: 1,
        d_id: 1,
        c_w_id: 3,
        c_d_id: 1,
        customer: CustomerSelector::ById(1),
        h_amount: 1_000,
        date: 1_213_056_000,
    });
    let mut sent = batches(&c.on_client_request(1, request(1, remote_payment), START_US));
    sent.extend(batches(&c.tick(START_US + MS)));
    let remote = sent.iter().find(|(_, b)| b.partition == 2).expect("the remote piece's batch").1.clone();
    let home = sent.iter().find(|(_, b)| b.partition == 1).expect("the home piece's batch").1.clone();
    let ts = remote.txns[0].ts;

    let out = c.on_node_lost(2, link_lost(), START_US + 2 * MS);
    let aborted_reads = out.iter().any(|o| matches!(o, Output::ToNodes { msg: CoordinatorToNode::PieceReads(_), .. }));
    assert!(!aborted_reads, "the home piece is not told to abort: {out:?}");
    assert!(replies(&out).iter().all(|(_, r)| r.request_id != 1), "not answered yet: {out:?}");
    assert_eq!(phase(&c, 2), Phase::Unavailable);

    // Node 2 comes back from its log: the lost batch is replayed to it; its piece reports.
    let out = c.on_node_message(2, NodeToCoordinator::RejoinRequest { partition: 2 }, START_US + 100 * MS);
    assert_eq!(batches(&out).iter().map(|(n, b)| (n.clone(), b.seq)).collect::<Vec<_>>(), [(vec![2], remote.seq)]);
    let reads = NodeToCoordinator::PieceReads(PieceReads {
        home: 1,
        from: 2,
        ts,
        outcome: PieceOutcome::Reads(engine::distributed::RemoteReads::Customer(PaymentOutput {
            c_id: 1,
            c_balance: -1_000,
            bad_credit: false,
        })),
    });
    let out = c.on_node_message(2, reads, START_US + 101 * MS);
    let forwarded: Vec<&PieceReads> = out
        .iter()
        .filter_map(|o| match o {
            Output::ToNodes { nodes, msg: CoordinatorToNode::PieceReads(r) } if nodes == &vec![1] => Some(r),
            _ => None,
        })
        .collect();
    assert!(matches!(forwarded[..], [PieceReads { from: 2, outcome: PieceOutcome::Reads(_), .. }]), "{out:?}");

    // The home piece commits: the client hears once.
    let out = c.on_node_message(1, results(&home), START_US + 102 * MS);
    let answers: Vec<_> = replies(&out).into_iter().filter(|(_, r)| r.request_id == 1).collect();
    assert_eq!(answers.len(), 1, "{out:?}");
}

/// A node that asks to rejoin while its partition's promotion is under way is answered when
/// the promotion ends, with a plan from the new primary — not refused: a refused rejoin gives
/// the partition up on that node until it restarts. (Found by `glass sim --mode full-stack
/// --seed 5639`: the old primary restarted during the promotion of its backup, gave up
/// partition 2, and nothing could heal the cluster.)
#[test]
fn a_rejoin_asked_during_a_promotion_is_planned_when_it_ends() {
    for mode in [Mode::ActivePassive, Mode::FullStack] {
        let mut c = serving(mode);
        // Partition 2's primary (node 2) fails: node 1 is asked to take over.
        let out = c.on_node_lost(2, link_lost(), START_US + MS);
        assert!(out
            .iter()
            .any(|o| matches!(o, Output::ToNodes { msg: CoordinatorToNode::Promote { partition: 2, .. }, .. })));
        assert_eq!(phase(&c, 2), Phase::Promoting { backup: 1 });
        // Node 2 restarts and asks to rejoin before node 1 answered.
        let asked = c.on_node_message(2, NodeToCoordinator::RejoinRequest { partition: 2 }, START_US + 2 * MS);
        let answered = |out: &[Output]| {
            out.iter().any(|o| {
                matches!(
                    o,
                    Output::ToNodes {
                        msg: CoordinatorToNode::RejoinPlan { partition: 2, .. }
                            | CoordinatorToNode::RejoinRefused { partition: 2, .. },
                        ..
                    }
                )
            })
        };
        assert!(!answered(&asked), "{mode:?}: deferred, not refused: {asked:?}");
        let out = c.on_node_message(
            1,
            NodeToCoordinator::Promoted { partition: 2, applied_seq: 0, next_seq: 1 },
            START_US + 3 * MS,
        );
        let plans: Vec<(NodeId, NodeId)> = out
            .iter()
            .filter_map(|o| match o {
                Output::ToNodes { nodes, msg: CoordinatorToNode::RejoinPlan { partition: 2, source, .. } } => {
                    Some((nodes[0], *source))
                }
                _ => None,
            })
            .collect();
        assert_eq!(plans, vec![(2, 1)], "{mode:?}: planned from the new primary: {out:?}");
        assert!(out.iter().any(|o| matches!(
            o,
            Output::ToNodes { nodes, msg: CoordinatorToNode::ShipTo { partition: 2, backup: 2 } } if nodes == &vec![1]
        )));
    }
}

/// A full-stack node that fails again during its restart recovery leaves the partition
/// unavailable, not "recovering" for ever: restarted once more, it is let recover again, and
/// the batches lost the first time are still replayed to it (docs/design.md §10).
#[test]
fn a_node_failing_during_its_restart_recovery_may_recover_again() {
    let mut c = serving(Mode::FullStack);
    let now = START_US + 50 * MS;
    c.on_node_lost(2, link_lost(), now);
    c.on_client_request(1, request(1, payment(1, 1)), now);
    let out = c.on_client_request(1, request(2, payment(2, 2)), now);
    let [(_, lost)] = &batches(&out)[..] else { panic!("{out:?}") };
    c.on_node_lost(1, link_lost(), now + MS);
    assert_eq!(phase(&c, 1), Phase::Unavailable);
    let resumed = |out: &[Output]| {
        out.iter()
            .filter_map(|o| match o {
                Output::ToNodes { msg: CoordinatorToNode::ResumeFromLog { partition: 1, from_seq }, .. } => {
                    Some(*from_seq)
                }
                _ => None,
            })
            .collect::<Vec<Seq>>()
    };
    let out = c.on_node_message(1, NodeToCoordinator::RejoinRequest { partition: 1 }, now + 2 * MS);
    assert_eq!(resumed(&out), vec![lost.seq]);
    assert_eq!(phase(&c, 1), Phase::Recovering { node: 1 });
    // It fails before reporting `Rejoined`.
    c.on_node_lost(1, link_lost(), now + 3 * MS);
    assert_eq!(phase(&c, 1), Phase::Unavailable);
    let out = c.on_node_message(1, NodeToCoordinator::RejoinRequest { partition: 1 }, now + 4 * MS);
    assert_eq!(resumed(&out), vec![lost.seq], "the lost batch is replayed again: {out:?}");
    assert!(batches(&out).iter().any(|(_, b)| b == lost));
}

/// A lost connection, as the network code reports it.
fn link_lost() -> Detection {
    Detection::ConnectionLost { how: "the test closed it".into() }
}

/// Issue 35: a backup whose primary stopped shipping to it (its link's queue filled: "backup
/// too far behind; no longer shipped to") reports the same applied batch with every heartbeat
/// while the primary answers on; once it is more than `limits.replica_lag_batches_max`
/// batches behind for a whole failure timeout, the primary heard from meanwhile, it is failed
/// as lagging (and rejoins), instead of staying behind while counted live.
#[test]
fn a_backup_left_behind_by_its_primary_is_failed_as_lagging() {
    let mut cfg = config(Mode::ActivePassive);
    cfg.limits.replica_lag_batches_max = 3;
    let mut c = Coordinator::new(&cfg, START_US).unwrap();
    for node in [1, 2] {
        for partition in [1, 2] {
            c.on_node_message(node, ready(partition, LOADED), START_US);
        }
    }
    let mut now = START_US;
    let mut lagging = Vec::new();
    let mut down = Vec::new();
    for i in 0..40u64 {
        now += 100 * MS;
        // Partition 1's primary (node 1) answers a batch; its backup (node 2) stays at 0.
        c.on_client_request(1, request(2 * i, payment(1, 1)), now);
        let out = c.on_client_request(1, request(2 * i + 1, payment(2, 2)), now);
        for (_, batch) in batches(&out) {
            c.on_node_message(1, results(&batch), now + 10);
        }
        c.on_node_message(1, NodeToCoordinator::Heartbeat { now_ms: now / MS }, now + 20);
        let applied = NodeToCoordinator::BackupApplied { partition: 1, seq: 0 };
        c.on_node_message(2, applied, now + 30);
        c.on_node_message(2, NodeToCoordinator::Heartbeat { now_ms: now / MS }, now + 30);
        for e in events(&c.tick(now + 40)) {
            match e {
                Event::ReplicaLagging { node, .. } => lagging.push(node),
                Event::NodeDown { node, detection: Detection::Lagging { partition: 1, .. }, .. } => down.push(node),
                _ => {}
            }
        }
    }
    assert_eq!(lagging, vec![2], "the backup is reported lagging once");
    assert_eq!(down, vec![2], "and failed once it lagged a failure timeout");
    assert_eq!(c.status()[0].live_replicas, vec![1]);
    assert_eq!(phase(&c, 1), Phase::Serving);
}

/// docs/design.md §10, "Catching up under load": a primary whose queue of shipments to a
/// rejoining backup grows long says so, and the partition's catch-up admits less until the
/// pressure eases; the same report from another node, or about a node that is not the
/// joiner, changes nothing.
#[test]
fn a_long_shipping_queue_to_a_joiner_slows_its_catch_up() {
    let mut c = Coordinator::new(&config(Mode::ActivePassive), START_US).unwrap();
    for node in [1, 2] {
        for partition in [1, 2] {
            c.on_node_message(node, ready(partition, LOADED), START_US);
        }
    }
    let mut now = START_US;
    for i in 0..20u64 {
        now += 10 * MS;
        let out = c.on_client_request(1, request(i, payment(1, 1)), now);
        for (_, batch) in batches(&out) {
            c.on_node_message(1, results(&batch), now + 10);
        }
    }
    c.on_node_lost(2, link_lost(), now);
    let out = c.on_node_message(2, NodeToCoordinator::RejoinRequest { partition: 1 }, now + MS);
    assert!(events(&out).iter().any(|e| matches!(e, Event::CatchUpBegan { partition: 1, node: 2, .. })), "{out:?}");
    let behind = |backup| NodeToCoordinator::ShippingBehind { partition: 1, backup, queued: 2_000 };
    let slowed = |out: &[Output]| events(out).into_iter().filter(|e| matches!(e, Event::CatchUpSlowed { .. })).count();
    assert_eq!(slowed(&c.on_node_message(2, behind(2), now + 2 * MS)), 0, "the joiner is not the primary");
    assert_eq!(slowed(&c.on_node_message(1, behind(3), now + 2 * MS)), 0, "node 3 is not the joiner");
    let out = c.on_node_message(1, behind(2), now + 3 * MS);
    let [Event::CatchUpSlowed { partition: 1, backup: 2, queued: 2_000, txn_per_s }] = events(&out)[..] else {
        panic!("{out:?}")
    };
    assert!(txn_per_s >= 1, "never stalls the partition");
    assert_eq!(slowed(&c.on_node_message(1, behind(2), now + 4 * MS)), 0, "at most one halving a step");
}
