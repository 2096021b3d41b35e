//! Retried requests at the coordinator (docs/design.md §11, "Exactly-once answers"), the
//! replicas played by the test: a retry is answered its original outcome, recalled from the
//! replicas; runs only if a replica proves it never ran; is refused with a typed
//! `OutcomeForgotten` when the replicas' memory does not reach back far enough; and two sends
//! of one id are never both admitted.

mod common;
use common::{batches, replies};

use coordinator::{Coordinator, Output, Phase};
use engine::procedures::*;
use wire::channel::{CoordinatorToNode, NodeToCoordinator};
use wire::config::ClusterConfig;
use wire::messages::*;

const MS: u64 = 1_000;
const START_US: u64 = 1_700_000_000_000 * MS;
/// The client's id in every request here.
const CLIENT: u64 = 0xC11E;

fn serving() -> Coordinator {
    let mut config = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
    config.limits.batch_txns_max = 4;
    config.limits.batch_wait_us = 500;
    let mut c = Coordinator::new(&config, START_US).unwrap();
    for node in [1, 2] {
        for partition in [1, 2] {
            let ready =
                NodeToCoordinator::LoadStatus { partition, state: LoadState::Ready { digest: StateDigest(99) } };
            c.on_node_message(node, ready, START_US);
        }
    }
    assert!(c.status().iter().all(|p| p.phase == Phase::Serving));
    c
}

fn payment(c_id: u32) -> TxnInput {
    TxnInput::Payment(PaymentInput {
        w_id: 1,
        d_id: 1,
        c_w_id: 1,
        c_d_id: 1,
        customer: CustomerSelector::ById(c_id),
        h_amount: 1_000,
        date: 1_213_056_000,
    })
}

fn first(seq: u64) -> ClientRequest {
    ClientRequest::new(CLIENT, seq, Timestamp(0), payment(seq as u32))
}

fn retry(seq: u64, not_before: Timestamp) -> ClientRequest {
    ClientRequest { retry: true, ..ClientRequest::new(CLIENT, seq, not_before, payment(seq as u32)) }
}

fn id(seq: u64) -> RequestId {
    RequestId { client: CLIENT, seq }
}

fn results(batch: &Batch) -> NodeToCoordinator {
    let results = batch
        .txns
        .iter()
        .map(|t| {
            let out = PaymentOutput { c_id: t.id.seq as u32, c_balance: 7, bad_credit: false };
            let outcome = TxnOutcome::Committed(TxnOutput::Payment(out));
            TxnResult { ts: t.ts, digest: outcome.digest(), outcome }
        })
        .collect();
    NodeToCoordinator::Results(Results { partition: batch.partition, seq: batch.seq, results })
}

/// The recalls sent: (nodes, recall, through, ids).
fn recalls(out: &[Output]) -> Vec<(Vec<NodeId>, u64, Seq, Vec<RequestId>)> {
    out.iter()
        .filter_map(|o| match o {
            Output::ToNodes { nodes, msg: CoordinatorToNode::RecallOutcomes { recall, through, ids, .. } } => {
                Some((nodes.clone(), *recall, *through, ids.clone()))
            }
            _ => None,
        })
        .collect()
}

fn recalled(
    recall: u64,
    executed_seq: Seq,
    remembered_after: Timestamp,
    found: Vec<RecalledOutcome>,
) -> NodeToCoordinator {
    NodeToCoordinator::Recalled { partition: 1, recall, executed_seq, remembered_after, found }
}

/// Runs request `seq` to its answer on connection 1; returns its batch and its answer.
fn committed(c: &mut Coordinator, seq: u64, now: u64) -> (Batch, ClientResult) {
    c.on_client_request(1, first(seq), now);
    let out = c.tick(now + MS);
    let (_, batch) = batches(&out).pop().expect("the batch closes");
    c.on_node_message(1, results(&batch), now + MS);
    let out = c.on_node_message(2, results(&batch), now + MS);
    let (client, reply) = replies(&out).pop().expect("answered");
    assert_eq!((client, reply.request_id), (1, seq));
    (batch, reply.result)
}

/// A lost answer asked again is answered the original outcome, recalled from a replica, once
/// the replicas executed every batch sent — and nothing runs again.
#[test]
fn a_retry_is_answered_the_original_outcome() {
    let mut c = serving();
    let (batch, original) = committed(&mut c, 1, START_US);
    let out = c.on_client_request(2, retry(1, Timestamp(0)), START_US + 2 * MS);
    assert!(replies(&out).is_empty() && batches(&out).is_empty(), "{out:?}");
    let [(nodes, recall, through, ids)] = &recalls(&out)[..] else { panic!("{out:?}") };
    assert_eq!((nodes.as_slice(), *through, ids.as_slice()), (&[1, 2][..], batch.seq, &[id(1)][..]));
    let t = &batch.txns[0];
    let ClientResult::Committed { output, .. } = original.clone() else { panic!("{original:?}") };
    let found = vec![RecalledOutcome { id: id(1), ts: t.ts, outcome: Some(TxnOutcome::Committed(output)) }];
    let out = c.on_node_message(1, recalled(*recall, batch.seq, Timestamp(0), found.clone()), START_US + 3 * MS);
    assert_eq!(replies(&out), vec![(2, ClientReply { request_id: 1, result: original })]);
    // The other replica's answer changes nothing.
    let out = c.on_node_message(2, recalled(*recall, batch.seq, Timestamp(0), found), START_US + 3 * MS);
    assert!(replies(&out).is_empty() && batches(&c.tick(START_US + 10 * MS)).is_empty());
    let stats = c.retry_stats();
    assert_eq!((stats.retries, stats.recalled, stats.admitted), (1, 1, 0));
}

/// A retry no replica remembers, from replicas that executed every batch sent and remember
/// everything after what the client had seen, never ran: it is admitted, once.
#[test]
fn a_retry_that_never_ran_runs_once() {
    let mut c = serving();
    committed(&mut c, 1, START_US);
    let seen = Timestamp(5);
    let out = c.on_client_request(2, retry(2, seen), START_US + 2 * MS);
    let [(_, recall, through, _)] = recalls(&out)[..] else { panic!("{out:?}") };
    // A replica that did not get through `through` proves nothing.
    let out = c.on_node_message(1, recalled(recall, through - 1, Timestamp(0), vec![]), START_US + 3 * MS);
    assert!(replies(&out).is_empty() && batches(&c.tick(START_US + 4 * MS)).is_empty());
    // One that did, remembering from before `not_before`, does.
    c.on_node_message(2, recalled(recall, through, seen, vec![]), START_US + 5 * MS);
    let out = c.tick(START_US + 7 * MS);
    let [(_, batch)] = &batches(&out)[..] else { panic!("{out:?}") };
    assert_eq!(batch.txns.iter().map(|t| t.id).collect::<Vec<_>>(), vec![id(2)]);
    c.on_node_message(1, results(batch), START_US + 8 * MS);
    let out = c.on_node_message(2, results(batch), START_US + 8 * MS);
    let [(2, reply)] = &replies(&out)[..] else { panic!("{out:?}") };
    assert!(matches!(reply.result, ClientResult::Committed { .. }), "{reply:?}");
    assert_eq!(c.retry_stats().admitted, 1);
}

/// A retry whose outcome the replicas no longer remember — their memory begins after the
/// client's `not_before` — gets a typed refusal, and does not run.
#[test]
fn a_forgotten_outcome_is_refused_with_its_own_rejection() {
    let mut c = serving();
    committed(&mut c, 1, START_US);
    let out = c.on_client_request(2, retry(3, Timestamp(5)), START_US + 2 * MS);
    let [(_, recall, through, _)] = recalls(&out)[..] else { panic!("{out:?}") };
    c.on_node_message(1, recalled(recall, through, Timestamp(100), vec![]), START_US + 3 * MS);
    let out = c.on_node_message(2, recalled(recall, through, Timestamp(200), vec![]), START_US + 3 * MS);
    let expected = Rejection::OutcomeForgotten {
        id: id(3),
        partition: 1,
        not_before: Timestamp(5),
        remembered_after: Timestamp(100),
    };
    assert_eq!(replies(&out), vec![(2, ClientReply { request_id: 3, result: ClientResult::Rejected(expected) })]);
    assert!(batches(&c.tick(START_US + 10 * MS)).is_empty(), "a forgotten request never runs");
    assert_eq!(c.retry_stats().forgotten, 1);
    // Without a client id there is nothing to recall.
    let anonymous = ClientRequest { client: 0, ..retry(4, Timestamp(0)) };
    let out = c.on_client_request(3, anonymous, START_US + 11 * MS);
    assert_eq!(replies(&out)[0].1.result, ClientResult::Rejected(Rejection::RetryWithoutId));
}

/// Sends of one id never both run: a second retry joins the first's recall (the last
/// connection is answered), and a first send that arrives after a retry of its id is a retry.
#[test]
fn sends_of_one_id_share_one_recall_and_one_run() {
    let mut c = serving();
    committed(&mut c, 1, START_US);
    let out = c.on_client_request(2, retry(5, Timestamp(0)), START_US + 2 * MS);
    let [(_, recall, through, _)] = recalls(&out)[..] else { panic!("{out:?}") };
    for (client, request) in [(3, retry(5, Timestamp(0))), (4, first(5))] {
        let out = c.on_client_request(client, request, START_US + 3 * MS);
        assert!(recalls(&out).is_empty() && replies(&out).is_empty(), "{out:?}");
    }
    c.on_node_message(1, recalled(recall, through, Timestamp(0), vec![]), START_US + 4 * MS);
    let out = c.tick(START_US + 6 * MS);
    let [(_, batch)] = &batches(&out)[..] else { panic!("{out:?}") };
    assert_eq!(batch.txns.len(), 1, "admitted once");
    c.on_node_message(1, results(batch), START_US + 7 * MS);
    let out = c.on_node_message(2, results(batch), START_US + 7 * MS);
    assert_eq!(replies(&out).iter().map(|(client, _)| *client).collect::<Vec<_>>(), vec![4]);
    // Asked again later, it is recalled: not run a second time.
    let out = c.on_client_request(5, first(5), START_US + 8 * MS);
    assert_eq!(recalls(&out).len(), 1, "{out:?}");
}

/// A retry no replica can answer — every one asked failed — is refused "not ready": the
/// client asks again later, and nothing runs.
#[test]
fn a_retry_whose_replicas_all_failed_is_refused_for_now() {
    let mut c = serving();
    committed(&mut c, 1, START_US);
    let out = c.on_client_request(2, retry(6, Timestamp(0)), START_US + 2 * MS);
    let [(_, recall, through, _)] = recalls(&out)[..] else { panic!("{out:?}") };
    c.on_node_message(1, recalled(recall, through - 1, Timestamp(0), vec![]), START_US + 3 * MS);
    let out = c.on_node_lost(2, coordinator::Detection::DeathNotice, START_US + 4 * MS);
    let result = replies(&out).into_iter().find(|(client, _)| *client == 2).map(|(_, r)| r.result);
    assert_eq!(result, Some(ClientResult::Rejected(Rejection::NotReady { partition: 1 })), "{out:?}");
}
