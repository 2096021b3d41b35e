//! The coordinator state machine driven directly (docs/design.md, "Deciding logic is synchronous"): replicas are played by
//! the test, which delivers their messages in adversarial orders — reordered, duplicated,
//! late, from failed nodes — and checks the paper's Section 5.3 contract for active-active
//! replication: a client is answered only when every live replica executed its transaction
//! and the results agree; divergence stops the partition; every request gets exactly one reply.
//! The catch-up policy's tests (docs/design.md §10) are the module `catch_up`, in
//! tests/coordinator/ so that cargo does not build it as a test binary of its own.

#[path = "coordinator/catch_up.rs"]
mod catch_up;
mod common;
use common::{batches, events, replies};

use engine::rng::Rng;
use std::collections::BTreeMap;

use coordinator::agreement::DivergenceKind;
use coordinator::{Coordinator, Detection, Event, Output, Phase};
use engine::input::InputError;
use engine::procedures::*;
use wire::channel::{ClientToCoordinator, CoordinatorToClient, CoordinatorToNode, NodeToCoordinator};
use wire::config::ClusterConfig;
use wire::messages::*;

const MS: u64 = 1_000;
const START_US: u64 = 1_700_000_000_000 * MS;
/// A date in TPC-C's domain (2008-06-10).
const DATE: i64 = 1_213_056_000;

fn config(batch_txns_max: u32, inflight_txns_max: u32) -> ClusterConfig {
    let mut c = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
    c.limits.batch_txns_max = batch_txns_max;
    c.limits.inflight_txns_max = inflight_txns_max;
    c.limits.batch_wait_us = 500;
    c
}

fn payment(w_id: u16, c_w_id: u16, c_id: u32) -> TxnInput {
    TxnInput::Payment(PaymentInput {
        w_id,
        d_id: 1,
        c_w_id,
        c_d_id: 1,
        customer: CustomerSelector::ById(c_id),
        h_amount: 1_000,
        date: DATE,
    })
}

fn new_order(w_id: u16, supply: &[u16]) -> TxnInput {
    let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
    for (n, &s) in supply.iter().enumerate() {
        lines[n] = OrderLineInput { i_id: n as u32 + 1, supply_w_id: s, quantity: 1 };
    }
    TxnInput::NewOrder(NewOrderInput { w_id, d_id: 1, c_id: 1, ol_cnt: supply.len() as u8, lines, entry_d: DATE })
}

/// What a correct replica would answer: a pure function of the input.
fn execute(batch: &Batch) -> Results {
    let results = batch
        .txns
        .iter()
        .map(|t| {
            let outcome = match t.input {
                TxnInput::Payment(p) => {
                    let c_id = match p.customer {
                        CustomerSelector::ById(c) => c,
                        CustomerSelector::ByLastName(_) => 0,
                    };
                    if c_id == 13 {
                        TxnOutcome::Aborted { reason: "thirteen".into() }
                    } else {
                        TxnOutcome::Committed(TxnOutput::Payment(PaymentOutput {
                            c_id,
                            c_balance: 7,
                            bad_credit: false,
                        }))
                    }
                }
                _ => TxnOutcome::Committed(TxnOutput::StockLevel(StockLevelOutput { low_stock: 3 })),
            };
            TxnResult { ts: t.ts, digest: outcome.digest(), outcome }
        })
        .collect();
    Results { partition: batch.partition, seq: batch.seq, results }
}

fn request(request_id: u64, input: TxnInput) -> ClientRequest {
    ClientRequest::new(7, request_id, Timestamp(0), input)
}

/// A coordinator whose two partitions are loaded on both nodes.
fn serving(batch_txns_max: u32, inflight_txns_max: u32) -> Coordinator {
    loaded(&config(batch_txns_max, inflight_txns_max), &[1, 2])
}

/// A coordinator of `config` whose two partitions are loaded on `nodes`.
fn loaded(config: &ClusterConfig, nodes: &[NodeId]) -> Coordinator {
    let mut c = Coordinator::new(config, START_US).unwrap();
    for &node in nodes {
        for partition in [1, 2] {
            let ready =
                NodeToCoordinator::LoadStatus { partition, state: LoadState::Ready { digest: StateDigest(99) } };
            c.on_node_message(node, ready, START_US);
        }
    }
    assert!(c.status().iter().all(|p| p.phase == Phase::Serving));
    c
}

#[test]
fn requests_wait_for_every_replica_to_load_the_same_state() {
    let mut c = Coordinator::new(&config(4, 64), START_US).unwrap();
    let out = c.on_client_request(1, request(1, payment(1, 1, 1)), START_US);
    assert_eq!(replies(&out)[0].1.result, ClientResult::Rejected(Rejection::NotReady { partition: 1 }));

    let progress =
        NodeToCoordinator::LoadStatus { partition: 1, state: LoadState::Loading { rows_loaded: 5, rows_total: 10 } };
    assert!(matches!(events(&c.on_node_message(1, progress, START_US))[..], [Event::LoadProgress { .. }]));
    let ready = |d| NodeToCoordinator::LoadStatus { partition: 1, state: LoadState::Ready { digest: StateDigest(d) } };
    assert!(events(&c.on_node_message(1, ready(5), START_US)).is_empty());
    let out = c.on_node_message(2, ready(5), START_US);
    assert_eq!(
        events(&out),
        vec![Event::PartitionReady { partition: 1, replicas: vec![1, 2], digest: StateDigest(5) }]
    );
    // Partition 2 loads different states on its two replicas: it never serves.
    let ready2 = |d| NodeToCoordinator::LoadStatus { partition: 2, state: LoadState::Ready { digest: StateDigest(d) } };
    c.on_node_message(1, ready2(5), START_US);
    let out = c.on_node_message(2, ready2(6), START_US);
    let [Event::Diverged(d)] = &events(&out)[..] else { panic!("{out:?}") };
    assert!(matches!(d.kind, DivergenceKind::Load { .. }));
    let out = c.on_client_request(1, request(2, payment(3, 3, 1)), START_US);
    assert!(matches!(
        replies(&out)[0].1.result,
        ClientResult::Rejected(Rejection::PartitionStopped { partition: 2, .. })
    ));
}

#[test]
fn a_client_is_answered_once_both_replicas_agree() {
    let mut c = serving(2, 64);
    assert!(c.on_client_request(7, request(1, payment(1, 2, 1)), START_US).is_empty());
    let out = c.on_client_request(7, request(2, payment(2, 2, 13)), START_US + 10);
    let [(nodes, batch)] = &batches(&out)[..] else { panic!("{out:?}") };
    assert_eq!(nodes, &vec![1, 2]);
    assert_eq!((batch.partition, batch.seq, batch.txns.len()), (1, 1, 2));
    assert!(batch.txns[0].ts < batch.txns[1].ts);
    assert_eq!(batch.txns[0].ts.millis(), START_US / MS);
    assert_eq!(batch.txns[0].ts.coordinator(), 0);

    assert!(replies(&c.on_node_message(2, NodeToCoordinator::Results(execute(batch)), START_US)).is_empty());
    let r = replies(&c.on_node_message(1, NodeToCoordinator::Results(execute(batch)), START_US));
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].0, 7);
    assert!(matches!(r[0].1, ClientReply { request_id: 1, result: ClientResult::Committed { .. } }));
    assert_eq!(
        r[1].1,
        ClientReply {
            request_id: 2,
            result: ClientResult::Aborted { ts: batch.txns[1].ts, reason: "thirteen".into() }
        }
    );
    assert_eq!(c.status()[0].inflight_txns, 0);
}

#[test]
fn a_batch_is_sent_when_its_wait_is_over() {
    let mut c = serving(100, 1_000);
    assert_eq!(c.next_deadline_us(), Some(START_US), "the first heartbeat is due at once");
    let out = c.tick(START_US);
    assert!(out.iter().any(
        |o| matches!(o, Output::ToNodes { nodes, msg: CoordinatorToNode::Heartbeat { .. } } if nodes == &vec![1, 2])
    ));
    assert_eq!(c.next_deadline_us(), Some(START_US + 100 * MS), "then every heartbeat_ms");
    c.on_client_request(1, request(1, payment(3, 4, 1)), START_US);
    assert_eq!(c.next_deadline_us(), Some(START_US + 500));
    assert!(batches(&c.tick(START_US + 499)).is_empty());
    let b = batches(&c.tick(START_US + 500));
    assert_eq!(b.len(), 1);
    assert_eq!((b[0].1.partition, b[0].1.txns.len()), (2, 1));
}

#[test]
fn unknown_warehouses_and_invalid_transactions_are_refused_without_executing() {
    let mut c = serving(1, 64);
    let out = c.on_client_request(1, request(3, payment(9, 9, 1)), START_US);
    assert!(matches!(replies(&out)[0].1.result, ClientResult::Rejected(Rejection::UnknownWarehouse { warehouse: 9 })));
    let out = c.on_client_request(1, request(4, new_order(1, &[])), START_US);
    let no_lines = InputError::OrderLineCount { value: 0, min: 5, max: 15 };
    assert_eq!(replies(&out)[0].1.result, ClientResult::Rejected(Rejection::OutOfDomain(no_lines)));
    assert!(batches(&out).is_empty());
}

/// The remote piece's outcome a correct replica of partition `from` sends for `batch`'s
/// remote pieces.
fn piece_reads(batch: &Batch, from: PartitionId) -> Vec<NodeToCoordinator> {
    batch
        .txns
        .iter()
        .filter_map(|t| match t.part {
            Part::Remote { home } => Some(NodeToCoordinator::PieceReads(PieceReads {
                home,
                from,
                ts: t.ts,
                outcome: PieceOutcome::Reads(engine::distributed::RemoteReads::Stock(Vec::new())),
            })),
            _ => None,
        })
        .collect()
}

fn results_with(batch: &Batch, outcome: TxnOutcome) -> NodeToCoordinator {
    let results =
        batch.txns.iter().map(|t| TxnResult { ts: t.ts, digest: outcome.digest(), outcome: outcome.clone() }).collect();
    NodeToCoordinator::Results(Results { partition: batch.partition, seq: batch.seq, results })
}

fn committed_new_order() -> TxnOutcome {
    TxnOutcome::Committed(TxnOutput::NewOrder(NewOrderOutput {
        o_id: 7,
        total: 100,
        c_discount: 0,
        w_tax: 0,
        d_tax: 0,
        brand_lines: 0,
    }))
}

/// Issue 7 (TPC-C clause 2.4.1.5: a remote supplying warehouse): a transaction spanning two
/// partitions gets one timestamp, rides in both partitions' batches as its home piece and a
/// remote piece, the remote piece's reads reach the home partition's replicas once, and the
/// client is answered once both partitions decided — not before.
#[test]
fn a_multi_partition_transaction_runs_at_one_timestamp_on_both_partitions_and_is_answered_once() {
    let mut c = serving(1, 64);
    let out = c.on_client_request(1, request(1, new_order(1, &[1, 1, 3, 1, 1])), START_US);
    assert!(replies(&out).is_empty(), "{out:?}");
    let b = batches(&out);
    assert_eq!(b.len(), 2, "{out:?}");
    let home = b.iter().find(|(_, b)| b.partition == 1).unwrap().1.clone();
    let remote = b.iter().find(|(_, b)| b.partition == 2).unwrap().1.clone();
    assert_eq!(home.txns[0].ts, remote.txns[0].ts, "one timestamp on every partition");
    assert_eq!(home.txns[0].part, Part::Home { remotes: 1 });
    assert_eq!(remote.txns[0].part, Part::Remote { home: 1 });

    // Both remote replicas send their reads: forwarded once, to the home partition's replicas.
    let reads = piece_reads(&remote, 2);
    let out = c.on_node_message(1, reads[0].clone(), START_US);
    let forwarded: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Output::ToNodes { nodes, msg: CoordinatorToNode::PieceReads(r) } => Some((nodes.clone(), r.home)),
            _ => None,
        })
        .collect();
    assert_eq!(forwarded, vec![(vec![1, 2], 1)]);
    assert!(c.on_node_message(2, reads[0].clone(), START_US).is_empty(), "a duplicate is dropped");

    // The remote partition decides first: no answer yet.
    let piece = TxnOutcome::PieceDone { reads_digest: 5 };
    for node in [1, 2] {
        assert!(replies(&c.on_node_message(node, results_with(&remote, piece.clone()), START_US)).is_empty());
    }
    // The home partition decides: one answer, the home piece's.
    assert!(replies(&c.on_node_message(1, results_with(&home, committed_new_order()), START_US)).is_empty());
    let out = c.on_node_message(2, results_with(&home, committed_new_order()), START_US);
    let r = replies(&out);
    assert_eq!(r.len(), 1, "{out:?}");
    assert!(matches!(&r[0].1.result, ClientResult::Committed { output: TxnOutput::NewOrder(o), .. } if o.o_id == 7));
    assert!(c.status().iter().all(|p| p.inflight_txns == 0));
}

/// Issue 7: a remote piece that rolled back makes the whole transaction roll back (the home
/// piece aborts on its outcome), and the client hears one abort.
#[test]
fn a_remote_rollback_aborts_the_transaction_everywhere() {
    let mut c = serving(1, 64);
    let out = c.on_client_request(1, request(1, payment(1, 3, 1)), START_US);
    let b = batches(&out);
    let home = b.iter().find(|(_, b)| b.partition == 1).unwrap().1.clone();
    let remote = b.iter().find(|(_, b)| b.partition == 2).unwrap().1.clone();
    let aborted = TxnOutcome::Aborted { reason: "customer not found".into() };
    let home_aborted = TxnOutcome::Aborted { reason: "partition 2's piece rolled back: customer not found".into() };
    for node in [1, 2] {
        c.on_node_message(node, results_with(&remote, aborted.clone()), START_US);
    }
    c.on_node_message(1, results_with(&home, home_aborted.clone()), START_US);
    let out = c.on_node_message(2, results_with(&home, home_aborted), START_US);
    let r = replies(&out);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].1.result, ClientResult::Aborted { ts: home.txns[0].ts, reason: "customer not found".into() });
}

/// Issue 7: a multi-partition transaction is admitted on every partition it touches or on
/// none: a partition at its in-flight limit makes it "busy" and nothing is kept anywhere.
#[test]
fn a_busy_partition_refuses_the_whole_transaction() {
    let mut c = serving(64, 64);
    for id in 0..64 {
        c.on_client_request(1, request(id, payment(3, 3, 1)), START_US);
    }
    let out = c.on_client_request(1, request(100, payment(1, 3, 1)), START_US);
    assert_eq!(replies(&out)[0].1.result, ClientResult::Busy { partition: 2 });
    let inflight: Vec<usize> = c.status().iter().map(|p| p.inflight_txns).collect();
    assert_eq!(inflight, vec![0, 64], "nothing admitted on partition 1");
}

/// Issue 7: every replica of the remote partition fails before its piece reported: the home
/// piece waiting for it is told to abort (the coordinator sends the home replicas an aborted
/// outcome in the lost partition's name), and the client hears "outcome unknown" — the lost
/// partition's state is gone with its replicas.
#[test]
fn losing_the_remote_partition_aborts_the_waiting_home_piece() {
    let mut cfg = config(1, 64);
    cfg.partitions[1].replicas = vec![2];
    let mut c = Coordinator::new(&cfg, START_US).unwrap();
    for (node, partition) in [(1, 1), (2, 1), (2, 2)] {
        let ready = NodeToCoordinator::LoadStatus { partition, state: LoadState::Ready { digest: StateDigest(99) } };
        c.on_node_message(node, ready, START_US);
    }
    let out = c.on_client_request(1, request(1, new_order(1, &[3, 1, 1, 1, 1])), START_US);
    let home = batches(&out).into_iter().find(|(_, b)| b.partition == 1).unwrap().1;
    let out = c.on_node_lost(2, link_lost(), START_US);
    let aborts: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Output::ToNodes { nodes, msg: CoordinatorToNode::PieceReads(r) } => {
                Some((nodes.clone(), r.from, r.outcome.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(aborts.len(), 1, "{out:?}");
    assert_eq!((aborts[0].0.clone(), aborts[0].1), (vec![1], 2));
    assert!(matches!(aborts[0].2, PieceOutcome::Aborted { .. }));
    let aborted = TxnOutcome::Aborted { reason: "partition 2's piece rolled back: lost".into() };
    let out = c.on_node_message(1, results_with(&home, aborted), START_US);
    let r = replies(&out);
    assert_eq!(r.len(), 1, "{out:?}");
    assert!(matches!(r[0].1.result, ClientResult::OutcomeUnknown { .. }), "{r:?}");
}

#[test]
fn an_overloaded_partition_answers_busy_and_keeps_nothing() {
    let mut c = serving(2, 4);
    let mut sent = Vec::new();
    for id in 0..4 {
        sent.extend(batches(&c.on_client_request(1, request(id, payment(1, 1, 1)), START_US)));
    }
    for id in 4..10 {
        let out = c.on_client_request(1, request(id, payment(1, 1, 1)), START_US);
        assert_eq!(
            replies(&out),
            vec![(1, ClientReply { request_id: id, result: ClientResult::Busy { partition: 1 } })]
        );
    }
    // The other partition is not affected.
    assert!(replies(&c.on_client_request(1, request(99, payment(3, 3, 1)), START_US)).is_empty());
    // Answering the first batch frees room for two more.
    for node in [1, 2] {
        c.on_node_message(node, NodeToCoordinator::Results(execute(&sent[0].1)), START_US);
    }
    assert!(replies(&c.on_client_request(1, request(10, payment(1, 1, 1)), START_US)).is_empty());
    assert!(replies(&c.on_client_request(1, request(11, payment(1, 1, 1)), START_US)).is_empty());
    assert_eq!(replies(&c.on_client_request(1, request(12, payment(1, 1, 1)), START_US)).len(), 1);
}

#[test]
fn divergence_stops_the_partition_and_every_waiting_client_is_told() {
    let mut c = serving(1, 64);
    let b1 = batches(&c.on_client_request(1, request(1, payment(1, 1, 1)), START_US)).remove(0).1;
    let b2 = batches(&c.on_client_request(2, request(2, payment(1, 1, 2)), START_US)).remove(0).1;
    let mut bad = execute(&b1);
    bad.results[0].outcome =
        TxnOutcome::Committed(TxnOutput::Payment(PaymentOutput { c_id: 1, c_balance: 8, bad_credit: false }));
    bad.results[0].digest = bad.results[0].outcome.digest();
    c.on_node_message(1, NodeToCoordinator::Results(execute(&b1)), START_US);
    let out = c.on_node_message(2, NodeToCoordinator::Results(bad), START_US);
    let r = replies(&out);
    assert_eq!(r.len(), 2, "both the diverging and the later transaction are answered");
    assert!(r.iter().all(|(_, rep)| matches!(
        rep.result,
        ClientResult::Rejected(Rejection::PartitionStopped { partition: 1, .. })
    )));
    assert!(out
        .iter()
        .any(|o| matches!(o, Output::ToNodes { msg: CoordinatorToNode::PartitionStopped { partition: 1, .. }, .. })));
    let e = events(&out);
    let [Event::Diverged(d)] = &e[..] else { panic!("{e:?}") };
    assert!(e[0].is_alarm());
    assert!(e[0].to_string().contains("REPLICAS DIVERGED on partition 1 at batch 1"));
    assert!(matches!(d.kind, DivergenceKind::Outcome { .. }));
    // Late results change nothing; new requests are refused; the other partition serves.
    assert!(replies(&c.on_node_message(1, NodeToCoordinator::Results(execute(&b2)), START_US)).is_empty());
    let out = c.on_client_request(3, request(3, payment(1, 1, 1)), START_US);
    assert!(matches!(replies(&out)[0].1.result, ClientResult::Rejected(Rejection::PartitionStopped { .. })));
    assert!(matches!(c.status()[0].phase, Phase::Stopped { .. }));
    assert_eq!(batches(&c.on_client_request(3, request(4, payment(4, 4, 1)), START_US)).len(), 1);
}

#[test]
fn a_silent_node_fails_and_the_survivor_answers_alone() {
    let mut c = serving(1, 64);
    let b1 = batches(&c.on_client_request(1, request(1, payment(1, 1, 1)), START_US)).remove(0).1;
    assert!(replies(&c.on_node_message(1, NodeToCoordinator::Results(execute(&b1)), START_US + 10)).is_empty());
    // Node 1 keeps heartbeating; node 2 says nothing for failure_timeout_ms.
    let mut now = START_US;
    let mut out = Vec::new();
    while out.is_empty() || !events(&out).iter().any(|e| matches!(e, Event::NodeDown { .. })) {
        now += 100 * MS;
        c.on_node_message(1, NodeToCoordinator::Heartbeat { now_ms: now / MS }, now);
        out = c.tick(now);
    }
    assert_eq!(now, START_US + 1_000 * MS);
    assert!(events(&out).contains(&Event::NodeDown {
        node: 2,
        silent_ms: 1_000,
        detection: Detection::HeartbeatTimeout
    }));
    assert!(!c.is_node_live(2) && c.is_node_live(1));
    let r = replies(&out);
    assert_eq!(r.len(), 1);
    assert!(matches!(r[0].1.result, ClientResult::Committed { .. }));
    assert!(out.iter().any(|o| matches!(o, Output::ToNodes { nodes, msg: CoordinatorToNode::Membership { partition: 1, live, .. } } if nodes == &vec![1] && live == &vec![1])));
    // Later batches go to node 1 only; node 2's messages are ignored.
    let out = c.on_client_request(1, request(2, payment(2, 2, 1)), now);
    assert_eq!(batches(&out)[0].0, vec![1]);
    assert!(matches!(
        events(&c.on_node_message(2, NodeToCoordinator::Heartbeat { now_ms: 0 }, now))[..],
        [Event::Ignored { .. }]
    ));
    // Losing node 1 too leaves the partitions without replicas. The batch it was sent may
    // have executed before it failed: its client hears "outcome unknown", not "rejected".
    let out = c.on_node_lost(1, link_lost(), now);
    assert!(replies(&out).iter().all(|(_, r)| matches!(r.result, ClientResult::OutcomeUnknown { .. })));
    assert_eq!(replies(&out).len(), 1);
    assert!(c.status().iter().all(|p| p.phase == Phase::Unavailable));
}

/// docs/design.md §10, "One replica answers": each batch names one replica to send its
/// outputs, the other sends their digest; when the named one is lost first, the survivor is
/// asked for its outputs and they answer the clients; a digest that is not that of the outputs
/// stops the partition as different results do.
#[test]
fn one_replica_sends_the_outputs_and_a_lost_one_is_replaced_by_asking_the_other() {
    let mut c = serving(1, 64);
    let b1 = batches(&c.on_client_request(1, request(1, payment(1, 1, 1)), START_US)).remove(0).1;
    let b2 = batches(&c.on_client_request(2, request(2, payment(1, 1, 2)), START_US)).remove(0).1;
    // The two replicas take turns.
    assert_eq!((b1.answerer, b2.answerer), (Some(2), Some(1)));
    let digest = |b: &Batch| NodeToCoordinator::ResultsDigest(execute(b).digest());
    assert!(replies(&c.on_node_message(1, digest(&b1), START_US)).is_empty());
    let r = replies(&c.on_node_message(2, NodeToCoordinator::Results(execute(&b1)), START_US));
    assert!(matches!(&r[..], [(1, ClientReply { request_id: 1, result: ClientResult::Committed { .. } })]), "{r:?}");
    // Node 1, named for batch 2, is lost; node 2 sent the digest and is asked for the outputs.
    assert!(c.on_node_message(2, digest(&b2), START_US).is_empty());
    let out = c.on_node_lost(1, link_lost(), START_US);
    assert!(replies(&out).is_empty(), "{out:?}");
    assert!(
        out.iter().any(|o| matches!(o, Output::ToNodes { nodes, msg: CoordinatorToNode::SendResults { partition: 1, seqs } } if nodes == &vec![2] && seqs == &vec![2])),
        "{out:?}"
    );
    let r = replies(&c.on_node_message(2, NodeToCoordinator::Results(execute(&b2)), START_US));
    assert!(matches!(&r[..], [(2, ClientReply { request_id: 2, result: ClientResult::Committed { .. } })]), "{r:?}");
    // With one replica left, batches name none.
    let b3 = batches(&c.on_client_request(3, request(3, payment(1, 1, 3)), START_US)).remove(0).1;
    assert_eq!(b3.answerer, None);
}

#[test]
fn a_forged_digest_stops_the_partition() {
    let mut c = serving(1, 64);
    let b1 = batches(&c.on_client_request(1, request(1, payment(1, 1, 1)), START_US)).remove(0).1;
    let mut forged = execute(&b1).digest();
    forged.digest ^= 1;
    c.on_node_message(1, NodeToCoordinator::ResultsDigest(forged), START_US);
    let out = c.on_node_message(2, NodeToCoordinator::Results(execute(&b1)), START_US);
    let r = replies(&out);
    assert!(matches!(
        &r[..],
        [(_, ClientReply { result: ClientResult::Rejected(Rejection::PartitionStopped { .. }), .. })]
    ));
    let e = events(&out);
    let [Event::Diverged(d)] = &e[..] else { panic!("{e:?}") };
    assert!(matches!(d.kind, DivergenceKind::Outputs { .. }), "{d}");
}

#[test]
fn a_partition_that_does_not_load_in_time_stops() {
    let mut cfg = config(1, 64);
    cfg.timeouts.load_timeout_s = 2;
    cfg.timeouts.failure_timeout_ms = 1_000_000;
    let mut c = Coordinator::new(&cfg, START_US).unwrap();
    let ready = NodeToCoordinator::LoadStatus { partition: 1, state: LoadState::Ready { digest: StateDigest(1) } };
    c.on_node_message(1, ready, START_US);
    assert!(c.next_deadline_us().unwrap() <= START_US + 2_000_000);
    let out = c.tick(START_US + 2_000_000);
    let stopped: Vec<_> = events(&out).into_iter().filter(|e| matches!(e, Event::PartitionStopped { .. })).collect();
    assert_eq!(stopped.len(), 2);
    assert!(stopped[0].to_string().contains("nodes [2] did not load"), "{}", stopped[0]);
}

/// The digest requester's answers in `out`.
fn digest_replies(out: &[Output]) -> Vec<(u64, DigestOutcome)> {
    out.iter()
        .filter_map(|o| match o {
            Output::ToClient { msg: CoordinatorToClient::DigestReply { request_id, outcome, .. }, .. } => {
                Some((*request_id, outcome.clone()))
            }
            _ => None,
        })
        .collect()
}

fn state_digest(seq: u64, d: u128) -> NodeToCoordinator {
    NodeToCoordinator::StateDigest { partition: 1, seq, digest: Ok(StateDigest(d)) }
}

/// docs/design.md §10, "Checks during traffic": the digest batch's results answer its clients
/// at once; each replica's digest comes apart, later, and the requester is answered once every
/// replica that executed the batch reported.
#[test]
fn state_digests_go_through_the_ordered_path() {
    let mut c = serving(10, 64);
    c.on_client_request(1, request(1, payment(1, 1, 1)), START_US);
    let out = c.on_digest_request(5, 77, 1, START_US);
    let [(_, b)] = &batches(&out)[..] else { panic!("{out:?}") };
    assert!(b.digest_after);
    assert_eq!(b.txns.len(), 1, "the digest follows the transactions admitted before it");
    c.on_node_message(1, NodeToCoordinator::Results(execute(b)), START_US);
    // A replica's digest may come before the other replica's results.
    assert!(digest_replies(&c.on_node_message(1, state_digest(1, 42), START_US)).is_empty());
    let out = c.on_node_message(2, NodeToCoordinator::Results(execute(b)), START_US);
    assert_eq!(replies(&out).len(), 1, "the transactions are answered without waiting for the digests");
    assert!(digest_replies(&out).is_empty());
    let out = c.on_node_message(2, state_digest(1, 42), START_US);
    let [(77, outcome)] = &digest_replies(&out)[..] else { panic!("{out:?}") };
    assert!(outcome.agreed());
    assert_eq!(*outcome, DigestOutcome::Digests { seq: 1, digests: vec![(1, StateDigest(42)), (2, StateDigest(42))] });
    // A digest nobody waits for (again, or for a batch that did not ask) changes nothing.
    assert!(digest_replies(&c.on_node_message(2, state_digest(1, 42), START_US)).is_empty());

    // Differing digests stop the partition; the requester sees them.
    let out = c.on_digest_request(5, 78, 1, START_US);
    let b = batches(&out).remove(0).1;
    c.on_node_message(1, NodeToCoordinator::Results(execute(&b)), START_US);
    c.on_node_message(2, NodeToCoordinator::Results(execute(&b)), START_US);
    c.on_node_message(1, state_digest(b.seq, 1), START_US);
    let out = c.on_node_message(2, state_digest(b.seq, 2), START_US);
    let [(78, outcome)] = &digest_replies(&out)[..] else { panic!("{out:?}") };
    assert!(!outcome.agreed());
    assert!(events(&out).iter().any(|e| matches!(e, Event::Diverged(d)
        if matches!(d.kind, DivergenceKind::State { .. }) && d.after_answer)));
    assert!(c
        .on_client_request(1, request(2, payment(1, 1, 1)), START_US)
        .iter()
        .all(|o| !matches!(o, Output::ToNodes { .. })));
}

/// A replica that could not take its digest (its copy was refused) makes the requester ask
/// again; one that fails is not waited for.
#[test]
fn a_refused_or_failed_replica_does_not_hold_up_a_digest() {
    let mut c = serving(10, 64);
    let b = batches(&c.on_digest_request(5, 1, 1, START_US)).remove(0).1;
    c.on_node_message(1, NodeToCoordinator::Results(execute(&b)), START_US);
    c.on_node_message(2, NodeToCoordinator::Results(execute(&b)), START_US);
    c.on_node_message(1, state_digest(b.seq, 7), START_US);
    let refused = NodeToCoordinator::StateDigest { partition: 1, seq: b.seq, digest: Err("over budget".into()) };
    let out = c.on_node_message(2, refused, START_US);
    assert_eq!(digest_replies(&out), vec![(1, DigestOutcome::Busy)]);

    let b = batches(&c.on_digest_request(5, 2, 1, START_US)).remove(0).1;
    c.on_node_message(1, NodeToCoordinator::Results(execute(&b)), START_US);
    c.on_node_message(2, NodeToCoordinator::Results(execute(&b)), START_US);
    c.on_node_message(2, state_digest(b.seq, 7), START_US);
    // Node 1 dies before its digest: node 2's answers alone.
    let out = c.on_node_lost(1, Detection::ConnectionLost { how: "killed".into() }, START_US);
    assert_eq!(
        digest_replies(&out),
        vec![(2, DigestOutcome::Digests { seq: b.seq, digests: vec![(2, StateDigest(7))] })]
    );
}

#[test]
fn digest_requests_in_flight_are_bounded() {
    let mut c = serving(10, 64);
    for id in 0..coordinator::leader::DIGEST_REQUESTS_INFLIGHT_MAX as u64 {
        assert_eq!(batches(&c.on_digest_request(5, id, 2, START_US)).len(), 1);
    }
    let out = c.on_digest_request(5, 99, 2, START_US);
    assert_eq!(
        out,
        vec![Output::ToClient {
            client: 5,
            msg: CoordinatorToClient::DigestReply { request_id: 99, partition: 2, outcome: DigestOutcome::Busy }
        }]
    );
}

#[test]
fn client_messages_are_dispatched() {
    let mut c = serving(2, 64);
    let msg = ClientToCoordinator::ClientRequests(vec![request(1, payment(1, 1, 1)), request(2, payment(1, 1, 2))]);
    let out = c.on_client_message(4, msg, START_US);
    assert_eq!(batches(&out)[0].1.txns.len(), 2);
    let out = c.on_client_message(4, ClientToCoordinator::DigestRequest { request_id: 3, partition: 1 }, START_US);
    assert!(batches(&out)[0].1.digest_after);
    // A status request or a shutdown is the process's to handle, not the state machine's.
    assert!(c.on_client_message(4, ClientToCoordinator::StatusRequest { request_id: 5 }, START_US).is_empty());
}

/// Many clients, both partitions, replica results delivered in a random order with random
/// duplicates, ticks at random times: every request is answered exactly once, committed ones
/// with the replicas' agreed output, and in-flight work never exceeds its bound.
#[test]
fn every_request_is_answered_exactly_once_under_adversarial_delivery() {
    for seed in 0..20u64 {
        let mut rng = Rng::new(seed);
        let inflight_max = 16;
        let mut c = serving(4, inflight_max);
        let mut now = START_US;
        // Results waiting to be delivered: (node, results).
        let mut in_transit: Vec<(NodeId, Results)> = Vec::new();
        let mut answers: BTreeMap<u64, ClientResult> = BTreeMap::new();
        let mut next_id = 0u64;
        let handle =
            |out: Vec<Output>, in_transit: &mut Vec<(NodeId, Results)>, answers: &mut BTreeMap<u64, ClientResult>| {
                for (nodes, b) in batches(&out) {
                    for n in nodes {
                        in_transit.push((n, execute(&b)));
                    }
                }
                for (_, r) in replies(&out) {
                    assert!(
                        answers.insert(r.request_id, r.result).is_none(),
                        "seed {seed}: request {} answered twice",
                        r.request_id
                    );
                }
            };
        for _ in 0..2_000 {
            now += rng.below(100);
            match rng.below(10) {
                0..=4 => {
                    let w = 1 + rng.below(4) as u16;
                    let out = c.on_client_request(
                        rng.below(3),
                        request(next_id, payment(w, w, 1 + rng.below(20) as u32)),
                        now,
                    );
                    next_id += 1;
                    handle(out, &mut in_transit, &mut answers);
                }
                5..=7 if !in_transit.is_empty() => {
                    let i = rng.below(in_transit.len() as u64) as usize;
                    let (node, results) =
                        if rng.below(5) == 0 { in_transit[i].clone() } else { in_transit.swap_remove(i) };
                    let out = c.on_node_message(node, NodeToCoordinator::Results(results), now);
                    handle(out, &mut in_transit, &mut answers);
                }
                _ => {
                    let out = c.tick(now);
                    handle(out, &mut in_transit, &mut answers);
                }
            }
            assert!(c.status().iter().all(|p| p.inflight_txns <= inflight_max as usize));
        }
        // Drain: flush open batches and deliver everything.
        now += 1_000;
        let out = c.tick(now);
        handle(out, &mut in_transit, &mut answers);
        while let Some((node, results)) = in_transit.pop() {
            let out = c.on_node_message(node, NodeToCoordinator::Results(results), now);
            handle(out, &mut in_transit, &mut answers);
        }
        assert_eq!(answers.len() as u64, next_id, "seed {seed}: every request answered");
        assert!(answers.values().any(|r| matches!(r, ClientResult::Busy { .. })), "seed {seed}: the bound was reached");
        assert!(answers.values().any(|r| matches!(r, ClientResult::Committed { .. })));
        assert!(c.status().iter().all(|p| p.phase == Phase::Serving && p.inflight_txns == 0));
    }
}

/// Issue 7: a remote piece's partition answered (its replicas' results agreed) but its
/// outcome never reached the coordinator — it died in flight with the replica that sent it.
/// After the failure, the partition's live replicas are asked to derive it again from a
/// state that includes the batch, for the home piece still waiting.
#[test]
fn a_remote_outcome_lost_in_a_failure_is_asked_for_again() {
    let mut c = serving(1, 64);
    let out = c.on_client_request(1, request(1, new_order(1, &[1, 3, 1, 1, 1])), START_US);
    let remote = batches(&out).into_iter().find(|(_, b)| b.partition == 2).unwrap().1;
    for node in [1, 2] {
        c.on_node_message(node, results_with(&remote, TxnOutcome::PieceDone { reads_digest: 1 }), START_US);
    }
    let out = c.on_node_lost(1, link_lost(), START_US);
    let asks: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Output::ToNodes { nodes, msg: CoordinatorToNode::RederivePiece { partition, home, seq, ts, .. } } => {
                Some((nodes.clone(), *partition, *home, *seq, *ts))
            }
            _ => None,
        })
        .collect();
    assert_eq!(asks, vec![(vec![2], 2, 1, remote.seq, remote.txns[0].ts)], "{out:?}");
    // Its outcome, derived again, goes to the home partition's replica.
    let reads = piece_reads(&remote, 2).remove(0);
    let out = c.on_node_message(2, reads, START_US);
    assert!(out
        .iter()
        .any(|o| matches!(o, Output::ToNodes { nodes, msg: CoordinatorToNode::PieceReads(_) } if nodes == &vec![2])));
}

/// A lost connection, as the network code reports it.
fn link_lost() -> Detection {
    Detection::ConnectionLost { how: "the test closed it".into() }
}

/// A coordinator of cluster-rf3.toml (every partition on nodes 1, 2 and 3; one batch per
/// request) whose partitions are loaded, under `agreement`.
fn serving_rf3(agreement: wire::config::AgreementRule, lag: u32) -> Coordinator {
    let mut config = ClusterConfig::parse(include_str!("../../cluster-rf3.toml")).unwrap();
    config.agreement = agreement;
    config.limits.batch_txns_max = 1;
    config.limits.replica_lag_batches_max = lag;
    loaded(&config, &[1, 2, 3])
}

/// Issue 20 (Section 5.3's near-instant failover): with three replicas, two agreeing answer
/// under `majority` while the third says nothing; under `all` the client waits for it. Past
/// the lag limit the third is reported and batches wait for every replica (backpressure);
/// when the lag has lasted a failure timeout while it and the others are heard from, it is
/// failed as lagging and the held batches are answered by the two left.
#[test]
fn three_replicas_answer_on_two_under_majority_and_a_lasting_laggard_is_failed() {
    for agreement in [wire::config::AgreementRule::Majority, wire::config::AgreementRule::All] {
        let mut c = serving_rf3(agreement, 3);
        let mut answered = 0;
        let mut seen = Vec::new();
        let mut now = START_US;
        for i in 0..6u64 {
            now = START_US + i * MS;
            let out = c.on_client_request(1, request(i, payment(1, 1, 1 + i as u32)), now);
            let [(nodes, batch)] = &batches(&out)[..] else { panic!("{out:?}") };
            assert!(nodes.contains(&1) && nodes.contains(&2));
            for node in [1, 2] {
                let out = c.on_node_message(node, NodeToCoordinator::Results(execute(batch)), now);
                answered += replies(&out).len();
            }
        }
        // Every node keeps sending heartbeats; node 3 never reports a batch.
        for step in 1..=12u64 {
            now += 100 * MS;
            for node in [1, 2, 3] {
                let out = c.on_node_message(node, NodeToCoordinator::Heartbeat { now_ms: now / MS }, now);
                answered += replies(&out).len();
            }
            let out = c.tick(now);
            answered += replies(&out).len();
            seen.extend(events(&out).into_iter().map(|e| (step, e)));
        }
        let lagging: Vec<_> = seen.iter().filter(|(_, e)| matches!(e, Event::ReplicaLagging { .. })).collect();
        let down: Vec<_> = seen.iter().filter(|(_, e)| matches!(e, Event::NodeDown { .. })).collect();
        match agreement {
            wire::config::AgreementRule::Majority => {
                assert!(
                    matches!(lagging[..], [(1, Event::ReplicaLagging { partition: 1, node: 3, behind: 4 })]),
                    "{seen:?}"
                );
                assert!(
                    matches!(
                        down[..],
                        [(s, Event::NodeDown { node: 3, detection: Detection::Lagging { partition: 1, behind: 4 }, .. })]
                            if *s >= 10
                    ),
                    "failed once the lag lasted the failure timeout: {seen:?}"
                );
                assert_eq!(answered, 6, "four by the majority, two held back until the laggard failed");
                assert!(!c.status()[0].live_replicas.contains(&3));
            }
            wire::config::AgreementRule::All => {
                assert_eq!(answered, 0, "every live replica must answer");
                assert!(lagging.is_empty() && down.is_empty(), "{seen:?}");
            }
        }
    }
}
