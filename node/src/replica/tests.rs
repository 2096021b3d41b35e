//! Ordering and refusal on an empty database: every transaction fails (no rows), which is
//! enough to see what runs, in which order. Execution on loaded data is tested in
//! `tests/`.
use super::*;
use engine::input::InputError;
use engine::procedures::{DeliveryInput, TxnInput};
use wire::channel::ToolReply;
use wire::messages::{BatchTxn, DigestOutcome};

fn batch(seq: Seq, ts: &[u64]) -> Batch {
    let txns = ts
        .iter()
        .map(|&t| BatchTxn {
            part: wire::messages::Part::Whole,
            id: wire::messages::RequestId::NONE,
            ts: Timestamp(t),
            input: TxnInput::Delivery(DeliveryInput { w_id: 1, o_carrier_id: 1, date: 1 }),
        })
        .collect();
    Batch { partition: 1, seq, txns, digest_after: false, answerer: None }
}

fn replica() -> Replica {
    Replica::new(1, 1, LeanDb::new(), 4)
}

fn seqs(r: &[Results]) -> Vec<Seq> {
    r.iter().map(|r| r.seq).collect()
}

/// A replica can be loaded on one thread and handed to its executor thread.
#[test]
fn a_replica_can_move_between_threads() {
    fn send<T: Send>() {}
    send::<Replica>();
}

#[test]
fn a_gap_waits_for_the_missing_batch() {
    let mut r = replica();
    assert_eq!(seqs(&r.on_batch(batch(3, &[30])).unwrap()), Vec::<Seq>::new());
    assert_eq!(seqs(&r.on_batch(batch(2, &[20, 21])).unwrap()), Vec::<Seq>::new());
    assert_eq!(r.waiting_batches(), 2);
    let out = r.on_batch(batch(1, &[10])).unwrap();
    assert_eq!(seqs(&out), vec![1, 2, 3]);
    assert_eq!(out[1].results.iter().map(|t| t.ts.0).collect::<Vec<_>>(), vec![20, 21]);
    assert_eq!((r.applied_seq(), r.last_ts(), r.waiting_batches()), (3, Some(Timestamp(30)), 0));
    assert_eq!(r.stats().batches_waited, 2);
}

#[test]
fn duplicates_are_dropped_whether_executed_or_waiting() {
    let mut r = replica();
    r.on_batch(batch(1, &[10])).unwrap();
    assert!(r.on_batch(batch(1, &[10])).unwrap().is_empty());
    r.on_batch(batch(3, &[30])).unwrap();
    assert!(r.on_batch(batch(3, &[30])).unwrap().is_empty());
    assert_eq!(seqs(&r.on_batch(batch(2, &[20])).unwrap()), vec![2, 3]);
    assert_eq!(r.stats().duplicate_batches, 2);
    assert_eq!(r.stats().batches_executed, 3);
}

#[test]
fn two_different_batches_under_one_number_stop_the_replica() {
    let mut r = replica();
    r.on_batch(batch(2, &[20])).unwrap();
    assert_eq!(r.on_batch(batch(2, &[21])), Err(ReplicaError::ConflictingDuplicate { seq: 2 }));
    assert!(matches!(r.on_batch(batch(1, &[10])), Err(ReplicaError::Stopped { .. })));
}

#[test]
fn timestamps_out_of_order_stop_the_replica_before_anything_runs() {
    let mut r = replica();
    r.on_batch(batch(1, &[10, 11])).unwrap();
    let e = r.on_batch(batch(2, &[12, 11])).unwrap_err();
    assert_eq!(e, ReplicaError::TimestampRegression { seq: 2, ts: Timestamp(11), last: Timestamp(12) });
    assert_eq!(r.applied_seq(), 1);
    assert_eq!(r.last_ts(), Some(Timestamp(11)));
    assert!(r.stopped().is_some());

    let mut r = replica();
    r.on_batch(batch(1, &[10])).unwrap();
    assert!(matches!(r.on_batch(batch(2, &[10])), Err(ReplicaError::TimestampRegression { .. })));
}

#[test]
fn batches_too_far_ahead_or_for_another_partition_are_refused() {
    let mut r = replica();
    assert_eq!(
        r.on_batch(batch(5, &[50])),
        Err(ReplicaError::TooFarAhead { seq: 5, next_seq: 1, pending_batches_max: 4 })
    );
    r.on_batch(batch(4, &[40])).unwrap();
    let mut other = batch(1, &[10]);
    other.partition = 2;
    assert_eq!(r.on_batch(other), Err(ReplicaError::WrongPartition { expected: 1, got: 2 }));
    assert!(r.stopped().is_none(), "refusals that do not touch the order do not stop the replica");
}

#[test]
fn invalid_inputs_fail_without_running() {
    let mut r = replica();
    let mut b = batch(1, &[10]);
    b.txns[0].input = TxnInput::Delivery(DeliveryInput { w_id: 1, o_carrier_id: 11, date: 1 });
    let out = r.on_batch(b).unwrap();
    let reason = InputError::Carrier { value: 11, min: 1, max: 10 }.to_string();
    assert_eq!(out[0].results[0].outcome, TxnOutcome::Failed { reason });
}

#[test]
fn messages_digests_membership_and_stop() {
    let mut r = replica();
    let empty = r.state_digest();
    let out = r.digest_reply(4, 1).unwrap();
    assert_eq!(
        out,
        ToolReply::DigestReply {
            request_id: 4,
            partition: 1,
            outcome: DigestOutcome::Digests { seq: 0, digests: vec![(1, empty)] }
        }
    );
    let mut b = batch(1, &[10]);
    b.digest_after = true;
    let out = r.on_control(CoordinatorToNode::Batch(b)).unwrap();
    let [Emit::ToCoordinator(NodeToCoordinator::Results(res)), Emit::ToCoordinator(NodeToCoordinator::StateDigest { partition: 1, seq: 1, digest: Ok(digest) })] =
        &out[..]
    else {
        panic!("{out:?}")
    };
    assert_eq!((res.seq, *digest), (1, empty));
    r.on_control(CoordinatorToNode::Membership { partition: 1, epoch: 2, live: vec![1] }).unwrap();
    r.on_control(CoordinatorToNode::Membership { partition: 1, epoch: 1, live: vec![1, 2] }).unwrap();
    assert_eq!(r.membership(), Some(&(2, vec![1])));
    r.on_control(CoordinatorToNode::PartitionStopped { partition: 1, reason: "diverged".into() }).unwrap();
    assert_eq!(r.on_batch(batch(2, &[20])), Err(ReplicaError::Stopped { reason: "diverged".into() }));
    assert!(matches!(
        r.on_control(CoordinatorToNode::Shutdown { reason: String::new() }),
        Err(ReplicaError::Unexpected { .. })
    ));
}

/// docs/design.md §11, "A leader's death": batches taken while a take-over waits behind them
/// are held, not run; the standing counts them (the new leader adopts them), a resent copy of
/// one is a duplicate, and they run once, in order, one a step, before batches run as they
/// come again.
#[test]
fn batches_held_for_a_take_over_are_counted_and_run_once_in_order() {
    let mut r = replica();
    r.on_batch(batch(1, &[10])).unwrap();
    r.set_holding(true);
    assert!(r.on_batch(batch(2, &[20])).unwrap().is_empty());
    assert!(r.on_batch(batch(3, &[30])).unwrap().is_empty());
    assert!(!r.has_held_to_run(), "nothing runs while something urgent waits");
    let standing = r.take_over();
    assert_eq!((standing.executed_seq, standing.held_seq, standing.last_ts), (1, 3, Some(Timestamp(30))));
    let (held, _) = r.held_batches(0, 0);
    assert_eq!(held.iter().map(|b| b.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
    // The new leader sends batch 2 again as its own: the held copy is the same batch.
    assert!(r.on_batch(batch(2, &[20])).unwrap().is_empty());
    assert_eq!(r.on_batch(batch(3, &[31])), Err(ReplicaError::ConflictingDuplicate { seq: 3 }));

    let mut r = replica();
    r.set_holding(true);
    r.on_batch(batch(1, &[10])).unwrap();
    r.on_batch(batch(2, &[20])).unwrap();
    r.set_holding(false);
    // A batch after the held ones waits for them.
    assert!(r.on_batch(batch(3, &[30])).unwrap().is_empty());
    let mut ran = Vec::new();
    while r.has_held_to_run() {
        let mut out = Vec::new();
        r.run_held(&mut out).unwrap();
        let results: Vec<Results> = out
            .into_iter()
            .filter_map(|e| match e {
                Emit::ToCoordinator(NodeToCoordinator::Results(res)) => Some(res),
                _ => None,
            })
            .collect();
        assert_eq!(results.len(), 1, "one batch a step");
        ran.extend(seqs(&results));
    }
    assert_eq!(ran, vec![1, 2, 3]);
    assert_eq!((r.applied_seq(), r.waiting_batches(), r.stats().batches_held_for_take_over), (3, 0, 2));
    // Batches run as they come again, and run what waits behind them.
    r.on_batch(batch(5, &[50])).unwrap();
    assert_eq!(seqs(&r.on_batch(batch(4, &[40])).unwrap()), vec![4, 5]);
}

/// docs/design.md §11: between a take-over and the new leader's first membership, the batches
/// held for it run without aging the kept window out, so the leader's fetch finds every batch
/// the standing announced; the membership ends that.
#[test]
fn the_kept_window_holds_still_until_the_new_leaders_membership() {
    let mut r = replica();
    let n = RECENT_BATCHES_KEPT as u64;
    for seq in 1..=n {
        r.on_batch(batch(seq, &[seq * 10])).unwrap();
    }
    r.set_holding(true);
    r.on_batch(batch(n + 1, &[(n + 1) * 10])).unwrap();
    let standing = r.take_over();
    assert_eq!((standing.kept_from, standing.held_seq), (1, n + 1));
    r.set_holding(false);
    r.run_held(&mut Vec::new()).unwrap();
    r.on_batch(batch(n + 2, &[(n + 2) * 10])).unwrap();
    let (kept, _) = r.held_batches(0, 0);
    assert_eq!(kept.first().map(|b| b.seq), Some(1), "nothing aged out");
    let (kept, _) = r.held_batches(n - 1, 0);
    assert_eq!(kept.iter().map(|b| b.seq).collect::<Vec<_>>(), vec![n, n + 1, n + 2]);
    r.on_control(CoordinatorToNode::Membership { partition: 1, epoch: 2 << 32, live: vec![1] }).unwrap();
    r.on_batch(batch(n + 3, &[(n + 3) * 10])).unwrap();
    let (kept, _) = r.held_batches(0, 0);
    assert!(kept.is_empty(), "batch 1 is no longer kept");
    let (kept, _) = r.held_batches(3, 0);
    assert_eq!(kept.first().map(|b| b.seq), Some(4), "aged out to the last {RECENT_BATCHES_KEPT} again");
}

/// docs/design.md §10, "One replica answers": a batch naming another replica to send its
/// outputs gets their digest from this one, which keeps them and sends them in full when the
/// coordinator asks — or says it no longer keeps them.
#[test]
fn a_replica_not_named_to_answer_sends_the_digest_and_keeps_the_outputs() {
    let mut r = replica();
    let mut b = batch(1, &[10, 11]);
    b.answerer = Some(2);
    let out = r.on_control(CoordinatorToNode::Batch(b)).unwrap();
    let [Emit::ToCoordinator(NodeToCoordinator::ResultsDigest(d))] = &out[..] else { panic!("{out:?}") };
    let kept = r.kept_outputs(1).expect("kept").clone();
    assert_eq!((d.seq, d.count), (1, 2));
    assert_eq!(*d, kept.digest());
    let mut mine = batch(2, &[20]);
    mine.answerer = Some(1);
    let out = r.on_control(CoordinatorToNode::Batch(mine)).unwrap();
    assert!(matches!(&out[..], [Emit::ToCoordinator(NodeToCoordinator::Results(res))] if res.seq == 2), "{out:?}");
    let out = r.on_control(CoordinatorToNode::SendResults { partition: 1, seqs: vec![1, 9] }).unwrap();
    let [Emit::ToCoordinator(NodeToCoordinator::Results(res)), Emit::ToCoordinator(NodeToCoordinator::ResultsForgotten { partition: 1, seq: 9 })] =
        &out[..]
    else {
        panic!("{out:?}")
    };
    assert_eq!(*res, kept);
    let too_many = vec![1; wire::channel::control::SEND_RESULTS_MAX + 1];
    assert!(r.on_control(CoordinatorToNode::SendResults { partition: 1, seqs: too_many }).is_err());
}
