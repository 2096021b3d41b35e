//! Tests of a partition's result agreement ([`Agreement`]): a batch is answered only when its
//! quorum agrees — every live replica, or under `majority` a majority with the rest compared
//! later — and in sequence order whatever the arrival order; duplicate, late and unknown
//! results are ignored; a disagreement (results, outcomes, the batch's shape, state digests)
//! stops the partition and hands back every unanswered transaction; failed and rejoined
//! replicas, digest waits, the lag limit and the quorum sizes.
use super::*;
use engine::procedures::{PaymentOutput, TxnOutput};
use wire::messages::TxnResult;

fn committed(c_id: u32) -> TxnOutcome {
    TxnOutcome::Committed(TxnOutput::Payment(PaymentOutput { c_id, c_balance: 5, bad_credit: false }))
}

fn results(seq: Seq, outcomes: &[(u64, TxnOutcome)]) -> Results {
    Results {
        partition: 1,
        seq,
        results: outcomes
            .iter()
            .map(|(ts, o)| TxnResult { ts: Timestamp(*ts), outcome: o.clone(), digest: o.digest() })
            .collect(),
    }
}

/// Three batches of two transactions; tags are the request numbers 10, 11, 20, 21, 30, 31.
fn three_batches(replicas: &[NodeId]) -> Agreement<u32> {
    let mut a = Agreement::new(1, replicas.iter().copied());
    for seq in 1..=3u64 {
        let t = seq as u32 * 10;
        a.sent(seq, vec![(Timestamp(seq * 100), t), (Timestamp(seq * 100 + 1), t + 1)], false);
    }
    a
}

fn good(seq: Seq) -> Results {
    results(seq, &[(seq * 100, committed(seq as u32)), (seq * 100 + 1, committed(seq as u32 + 50))])
}

/// Section 5.3's logless rejoin under a second failure: node 2 rejoins while batches 1–3
/// are pending on node 1 alone — batch 1 before its copy, batches 2 and 3 held and
/// executed while it copied — and node 1 then fails. Node 2's results for 2 and 3
/// (kept, not waited for) decide them; batch 1, which no one is left to answer, took
/// effect in node 2's copy: "outcome unknown", and the partition goes on.
#[test]
fn a_rejoined_replica_answers_for_the_batches_it_held_when_the_others_fail() {
    let mut a = three_batches(&[1]);
    assert_eq!(a.on_joiner_results(2, good(2)), Ok(()));
    assert!(a.on_joiner_results(2, good(2)).is_err(), "a duplicate is ignored");
    assert!(a.add_replica(2));
    assert!(a.on_results(2, good(3)).unwrap().is_empty(), "kept, not waited for: node 1 decides");
    let v = a.replica_down(1);
    assert!(matches!(&v[0], Verdict::Unknown { seq: 1, unanswered } if unanswered.len() == 2), "{v:?}");
    assert_eq!(agreed_seqs(&v[1..]), vec![2, 3]);
    assert!(!a.is_stopped());
    a.sent(4, vec![(Timestamp(400), 40)], false);
    assert_eq!(a.live(), &[2]);
}

fn agreed_seqs(v: &[Verdict<u32>]) -> Vec<Seq> {
    v.iter()
        .map(|v| match v {
            Verdict::Agreed(b) => b.seq,
            other => panic!("expected agreement, got {other:?}"),
        })
        .collect()
}

#[test]
fn a_batch_is_answered_only_when_every_live_replica_agrees() {
    let mut a = three_batches(&[1, 2]);
    assert_eq!(a.on_results(1, good(1)).unwrap(), vec![]);
    let v = a.on_results(2, good(1)).unwrap();
    let Verdict::Agreed(b) = &v[0] else { panic!("{v:?}") };
    assert_eq!(b.seq, 1);
    assert_eq!(b.answers.iter().map(|(t, ts, _)| (*t, ts.0)).collect::<Vec<_>>(), vec![(10, 100), (11, 101)]);
    assert_eq!(b.answers[0].2, committed(1));
    assert_eq!(a.pending_batches(), 2);
}

/// Adversarial order: every replica reports the last batch first; nothing is decided until
/// the first batch is complete, then all three are decided in order at once.
#[test]
fn batches_are_decided_in_order_whatever_the_arrival_order() {
    let mut a = three_batches(&[1, 2, 3]);
    let arrivals = [(3, 3), (2, 3), (1, 3), (3, 2), (1, 2), (2, 1), (3, 1), (2, 2)];
    for (node, seq) in arrivals {
        assert_eq!(a.on_results(node, good(seq)).unwrap(), vec![], "node {node} batch {seq}");
    }
    let v = a.on_results(1, good(1)).unwrap();
    assert_eq!(agreed_seqs(&v), vec![1, 2, 3]);
}

#[test]
fn duplicates_late_and_unknown_results_are_ignored() {
    let mut a = three_batches(&[1, 2]);
    a.on_results(1, good(1)).unwrap();
    assert_eq!(a.on_results(1, good(1)), Err(Ignored::Duplicate { node: 1, seq: 1 }));
    a.on_results(2, good(1)).unwrap();
    assert_eq!(a.on_results(2, good(1)), Err(Ignored::AlreadyDecided { seq: 1 }));
    assert_eq!(a.on_results(2, good(9)), Err(Ignored::NeverSent { seq: 9 }));
    assert_eq!(a.on_results(7, good(2)), Err(Ignored::NotLive { node: 7 }));
    let mut other = good(2);
    other.partition = 2;
    assert_eq!(a.on_results(1, other), Err(Ignored::WrongPartition { expected: 1, got: 2 }));
    // The duplicate changed nothing: batch 2 still needs both.
    assert_eq!(a.on_results(1, good(2)).unwrap(), vec![]);
    assert_eq!(agreed_seqs(&a.on_results(2, good(2)).unwrap()), vec![2]);
}

#[test]
fn different_results_stop_the_partition_and_hand_back_every_unanswered_transaction() {
    let mut a = three_batches(&[1, 2]);
    for node in [1, 2] {
        a.on_results(node, good(1)).unwrap();
    }
    a.on_results(1, good(2)).unwrap();
    let bad = results(2, &[(200, committed(2)), (201, committed(999))]);
    let v = a.on_results(2, bad).unwrap();
    let [Verdict::Diverged { divergence, unanswered }] = &v[..] else { panic!("{v:?}") };
    assert_eq!(divergence.seq, 2);
    let DivergenceKind::Outcome { ts, digests } = &divergence.kind else { panic!("{divergence:?}") };
    assert_eq!(*ts, Timestamp(201));
    assert_eq!(digests.len(), 2);
    assert_ne!(digests[0].1, digests[1].1);
    assert_eq!(unanswered, &vec![20, 21, 30, 31]);
    assert!(divergence.to_string().starts_with("REPLICAS DIVERGED on partition 1 at batch 2"));
    assert!(a.is_stopped());
    assert_eq!(a.on_results(1, good(3)), Err(Ignored::Stopped));
}

#[test]
fn an_abort_on_one_replica_and_a_commit_on_another_is_a_divergence() {
    let mut a = three_batches(&[1, 2]);
    a.on_results(2, good(1)).unwrap();
    let aborted = TxnOutcome::Aborted { reason: "rolled back".into() };
    let v = a.on_results(1, results(1, &[(100, committed(1)), (101, aborted)])).unwrap();
    assert!(matches!(&v[..], [Verdict::Diverged { .. }]));
}

#[test]
fn results_that_do_not_fit_the_batch_are_a_divergence() {
    let mut a = three_batches(&[1, 2]);
    let v = a.on_results(1, results(1, &[(100, committed(1))])).unwrap();
    assert!(matches!(
        &v[..],
        [Verdict::Diverged { divergence: Divergence { kind: DivergenceKind::Shape { node: 1, .. }, .. }, .. }]
    ));

    let mut a = three_batches(&[1, 2]);
    let wrong_ts = results(1, &[(100, committed(1)), (102, committed(51))]);
    assert!(matches!(&a.on_results(2, wrong_ts).unwrap()[..], [Verdict::Diverged { .. }]));

    let mut a = three_batches(&[1, 2]);
    let mut lying = good(1);
    lying.results[0].digest ^= 1;
    lying.results[0].outcome = committed(1);
    a.on_results(1, good(1)).unwrap();
    let v = a.on_results(2, lying).unwrap();
    assert!(matches!(&v[..], [Verdict::Diverged { .. }]), "{v:?}");
}

fn digests_of(v: &[Verdict<u32>]) -> Vec<&Result<Vec<(NodeId, StateDigest)>, String>> {
    v.iter()
        .filter_map(|v| match v {
            Verdict::StateDigests { digests, .. } => Some(digests),
            _ => None,
        })
        .collect()
}

/// docs/design.md §10, "Checks during traffic": the digests come after the results, from
/// the replicas that executed the batch, and are compared once all are in.
#[test]
fn state_digests_are_compared_when_asked_for() {
    let mut a: Agreement<u32> = Agreement::new(1, [2, 1]);
    a.sent(1, vec![], true);
    a.sent(2, vec![], true);
    a.on_results(2, results(1, &[])).unwrap();
    let v = a.on_results(1, results(1, &[])).unwrap();
    let [Verdict::Agreed(b)] = &v[..] else { panic!("{v:?}") };
    assert_eq!(b.digest_from, Some(vec![2, 1]));
    assert!(a.on_state_digest(2, 1, Ok(StateDigest(7))).unwrap().is_empty());
    assert_eq!(a.on_state_digest(2, 1, Ok(StateDigest(7))), Err(Ignored::Duplicate { node: 2, seq: 1 }));
    let v = a.on_state_digest(1, 1, Ok(StateDigest(7))).unwrap();
    assert_eq!(digests_of(&v), vec![&Ok(vec![(1, StateDigest(7)), (2, StateDigest(7))])]);
    assert!(!a.awaits_digests(1));
    // A digest for a batch that did not ask, or one already compared, is not expected.
    assert!(matches!(a.on_state_digest(1, 1, Ok(StateDigest(7))), Err(Ignored::NotExpected { .. })));

    // Digests before the batch is agreed are kept for it.
    a.on_state_digest(1, 2, Ok(StateDigest(7))).unwrap();
    a.on_results(1, results(2, &[])).unwrap();
    a.on_results(2, results(2, &[])).unwrap();
    let v = a.on_state_digest(2, 2, Ok(StateDigest(8))).unwrap();
    assert!(matches!(
        &v[..],
        [Verdict::Diverged {
            divergence: Divergence { kind: DivergenceKind::State { .. }, after_answer: true, .. },
            ..
        }]
    ));
    assert!(a.is_stopped());
}

/// A replica that could not digest makes the comparison void; one that failed is not
/// waited for; a batch whose every executor failed has none.
#[test]
fn a_refused_or_failed_replica_ends_the_wait_for_digests() {
    let mut a: Agreement<u32> = Agreement::new(1, [1, 2, 3]);
    for seq in 1..=3 {
        a.sent(seq, vec![], true);
        for n in 1..=3 {
            a.on_results(n, results(seq, &[])).unwrap();
        }
    }
    a.on_state_digest(1, 1, Ok(StateDigest(7))).unwrap();
    a.on_state_digest(2, 1, Ok(StateDigest(7))).unwrap();
    let v = a.on_state_digest(3, 1, Err("over budget".into())).unwrap();
    assert!(matches!(digests_of(&v)[..], [Err(_)]));

    a.on_state_digest(1, 2, Ok(StateDigest(7))).unwrap();
    a.on_state_digest(2, 2, Ok(StateDigest(7))).unwrap();
    let v = a.replica_down(3);
    assert_eq!(digests_of(&v), vec![&Ok(vec![(1, StateDigest(7)), (2, StateDigest(7))])]);
    assert!(a.awaits_digests(3));
    a.replica_down(1);
    let v = a.replica_down(2);
    assert!(matches!(&v[..], [Verdict::NoLiveReplica { .. }]));
    assert!(!a.awaits_digests(3), "a stopped tracker waits for nothing");
}

/// The digests waited for are bounded: the oldest are forgotten.
#[test]
fn digests_waited_for_are_bounded() {
    let mut a: Agreement<u32> = Agreement::new(1, [1]);
    for seq in 1..=(DIGESTS_DUE_MAX as Seq + 5) {
        a.sent(seq, vec![], true);
    }
    assert_eq!(a.digests_due.len(), DIGESTS_DUE_MAX);
    assert!(!a.awaits_digests(5) && a.awaits_digests(6));
}

#[test]
fn a_failed_replica_stops_counting_and_its_results_are_dropped() {
    let mut a = three_batches(&[1, 2, 3]);
    a.on_results(1, good(1)).unwrap();
    a.on_results(3, good(1)).unwrap();
    // Replica 3's report of batch 2 disagrees, but it fails before batch 2 is decided.
    a.on_results(3, results(2, &[(200, committed(0)), (201, committed(0))])).unwrap();
    a.on_results(1, good(2)).unwrap();
    assert_eq!(a.replica_down(3), vec![]);
    assert_eq!(a.live(), &[1, 2]);
    assert_eq!(a.on_results(3, good(3)), Err(Ignored::NotLive { node: 3 }));
    assert_eq!(agreed_seqs(&a.on_results(2, good(1)).unwrap()), vec![1]);
    assert_eq!(agreed_seqs(&a.on_results(2, good(2)).unwrap()), vec![2]);
    // The last waited-for replica failing decides batches the other had reported.
    a.on_results(1, good(3)).unwrap();
    assert_eq!(agreed_seqs(&a.replica_down(2)), vec![3]);
    assert_eq!(a.replica_down(2), vec![], "a second report changes nothing");
}

#[test]
fn losing_every_replica_hands_back_everything() {
    let mut a = three_batches(&[1]);
    a.on_results(1, good(1)).unwrap();
    let v = a.replica_down(1);
    assert_eq!(v, vec![Verdict::NoLiveReplica { unanswered: vec![20, 21, 30, 31] }]);
    assert!(a.is_stopped());
}

fn majority(replicas: &[NodeId], lag: usize) -> Agreement<u32> {
    let mut a = three_batches(replicas);
    a.quorum = Quorum::Majority { replicas: replicas.len() };
    a.lag_batches_max = lag;
    a
}

/// Section 5.3's near-instant failover: with three replicas two agreeing answer, so a
/// replica that died without a word holds nothing up; the third's late results are
/// still compared, then the batch is forgotten.
#[test]
fn under_majority_two_of_three_agreeing_answer_and_the_third_is_compared_later() {
    let mut a = majority(&[1, 2, 3], 16);
    assert_eq!(a.on_results(3, good(1)).unwrap(), vec![]);
    assert_eq!(agreed_seqs(&a.on_results(1, good(1)).unwrap()), vec![1]);
    assert_eq!(a.decided_through(), 1);
    assert_eq!(a.answered_unconfirmed(), 1, "kept for node 2");
    assert_eq!(a.on_results(2, good(1)).unwrap(), vec![]);
    assert_eq!(a.answered_unconfirmed(), 0, "all three reported: nothing kept");
    assert_eq!(agreed_seqs(&a.on_results(1, good(2)).unwrap()), vec![]);
    assert_eq!(agreed_seqs(&a.on_results(2, good(2)).unwrap()), vec![2]);
    assert_eq!(a.answered_unconfirmed(), 1, "kept for node 3");
    assert_eq!(a.pending_batches(), 1, "batch 3 is the only one not answered");
    assert_eq!(a.on_results(2, good(2)), Err(Ignored::Duplicate { node: 2, seq: 2 }));
    assert_eq!(a.on_results(3, good(2)).unwrap(), vec![], "agrees: nothing more to say");
    assert_eq!(a.answered_unconfirmed(), 0);
    assert_eq!(a.on_results(3, good(2)), Err(Ignored::AlreadyDecided { seq: 2 }));
    // Answers stay in order: batch 3's majority waits for nothing earlier.
    a.sent(4, vec![(Timestamp(400), 40)], false);
    let four = results(4, &[(400, committed(4))]);
    a.on_results(1, four.clone()).unwrap();
    assert_eq!(a.on_results(2, four).unwrap(), vec![], "batch 3 first");
    a.on_results(3, good(3)).unwrap();
    assert_eq!(agreed_seqs(&a.on_results(1, good(3)).unwrap()), vec![3, 4]);
}

/// The safety net stays: a replica whose results differ after a majority answered stops
/// the partition with the alarm; only the transactions not yet answered are handed back.
#[test]
fn a_replica_disagreeing_after_the_majority_answered_stops_the_partition() {
    let mut a = majority(&[1, 2, 3], 16);
    a.on_results(1, good(1)).unwrap();
    assert_eq!(agreed_seqs(&a.on_results(2, good(1)).unwrap()), vec![1]);
    let bad = results(1, &[(100, committed(1)), (101, committed(999))]);
    let v = a.on_results(3, bad).unwrap();
    let [Verdict::Diverged { divergence, unanswered }] = &v[..] else { panic!("{v:?}") };
    assert!(divergence.after_answer);
    assert_eq!(divergence.seq, 1);
    let DivergenceKind::Outcome { ts, digests } = &divergence.kind else { panic!("{divergence:?}") };
    assert_eq!(*ts, Timestamp(101));
    assert_eq!(digests.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![1, 3]);
    assert_eq!(unanswered, &vec![20, 21, 30, 31], "batch 1 was answered: not handed back");
    assert!(divergence.to_string().contains("after a majority agreed"), "{divergence}");
    assert!(a.is_stopped());

    // Results that do not fit, after the answer, too.
    let mut a = majority(&[1, 2, 3], 16);
    a.on_results(1, good(1)).unwrap();
    a.on_results(2, good(1)).unwrap();
    let v = a.on_results(3, results(1, &[(100, committed(1))])).unwrap();
    assert!(matches!(&v[..], [Verdict::Diverged { divergence: Divergence { after_answer: true, .. }, .. }]));

    // Two reports that already disagree answer nothing.
    let mut a = majority(&[1, 2, 3], 16);
    a.on_results(1, good(1)).unwrap();
    let v = a.on_results(2, results(1, &[(100, committed(7)), (101, committed(51))])).unwrap();
    assert!(
        matches!(&v[..], [Verdict::Diverged { divergence: Divergence { after_answer: false, .. }, unanswered }] if unanswered.len() == 6)
    );
}

/// A slow replica cannot make the kept batches grow without bound: past the lag limit it
/// is a laggard, and every batch sent from then on waits for every live replica
/// (backpressure); once it catches up, majorities answer again; once failed, what it held
/// up is forgotten.
#[test]
fn past_the_lag_limit_batches_wait_for_every_replica_until_the_laggard_catches_up() {
    let mut a = majority(&[1, 2, 3], 2);
    for seq in 1..=3 {
        a.on_results(1, good(seq)).unwrap();
        assert_eq!(agreed_seqs(&a.on_results(2, good(seq)).unwrap()), vec![seq]);
    }
    assert_eq!(a.laggards(), vec![(3, 3)]);
    a.sent(4, vec![(Timestamp(400), 40)], false);
    let four = results(4, &[(400, committed(4))]);
    a.on_results(1, four.clone()).unwrap();
    assert_eq!(a.on_results(2, four.clone()).unwrap(), vec![], "batch 4 waits for node 3");
    // Node 3 catches up: batch 4 is answered with it, and majorities answer again.
    for seq in 1..=3 {
        a.on_results(3, good(seq)).unwrap();
    }
    assert_eq!(a.laggards(), vec![]);
    assert_eq!(agreed_seqs(&a.on_results(3, four).unwrap()), vec![4]);
    a.sent(5, vec![], false);
    a.on_results(1, results(5, &[])).unwrap();
    assert_eq!(agreed_seqs(&a.on_results(2, results(5, &[])).unwrap()), vec![5]);

    // Failed instead, the laggard's unreported batches are forgotten.
    let mut a = majority(&[1, 2, 3], 2);
    for seq in 1..=3 {
        a.on_results(1, good(seq)).unwrap();
        a.on_results(2, good(seq)).unwrap();
    }
    assert_eq!(a.answered_unconfirmed(), 3);
    assert_eq!(a.replica_down(3), vec![]);
    assert_eq!(a.answered_unconfirmed(), 0);
    assert_eq!(a.laggards(), vec![]);
}

/// Different majorities answer different batches when results arrive out of order: each
/// replica is charged only the answered batches it did not report.
#[test]
fn lag_is_counted_per_replica() {
    let mut a = majority(&[1, 2, 3], 1);
    // Batch 1 answered by 2 and 3, batches 2 and 3 by 1 and 2: node 1 misses one, node 3
    // two.
    a.on_results(2, good(1)).unwrap();
    a.on_results(3, good(1)).unwrap();
    for seq in 2..=3 {
        a.on_results(1, good(seq)).unwrap();
        a.on_results(2, good(seq)).unwrap();
    }
    assert_eq!(a.laggards(), vec![(3, 2)]);
}

/// With one of three replicas failed, the two left are the majority: both must agree.
/// With one left it answers alone, as under `all` (the partition stays available).
#[test]
fn under_majority_a_degraded_partition_needs_every_live_replica() {
    let mut a = majority(&[1, 2, 3], 16);
    assert_eq!(a.replica_down(3), vec![]);
    a.sent(4, vec![], false);
    assert_eq!(a.on_results(1, good(1)).unwrap(), vec![]);
    assert_eq!(agreed_seqs(&a.on_results(2, good(1)).unwrap()), vec![1]);
    a.on_results(2, good(2)).unwrap();
    assert_eq!(agreed_seqs(&a.replica_down(1)), vec![2], "node 2 alone answers");
    assert_eq!(agreed_seqs(&a.on_results(2, good(3)).unwrap()), vec![3]);
}

/// A state-digest batch compares every live replica's digest, whatever the quorum.
#[test]
fn a_digest_batch_waits_for_every_live_replica_under_majority() {
    let mut a: Agreement<u32> = Agreement::new(1, [1, 2, 3]).with_quorum(Quorum::Majority { replicas: 3 }, 16);
    a.sent(1, vec![], true);
    a.on_results(1, results(1, &[])).unwrap();
    assert_eq!(a.on_results(2, results(1, &[])).unwrap(), vec![]);
    let v = a.on_results(3, results(1, &[])).unwrap();
    let [Verdict::Agreed(b)] = &v[..] else { panic!("{v:?}") };
    assert_eq!(b.digest_from.as_ref().map(Vec::len), Some(3));
}

/// Majority of two is two: `majority` and `all` are the same with two replicas.
#[test]
fn the_quorum_sizes() {
    assert_eq!(Quorum::Majority { replicas: 2 }.needed(2), 2);
    assert_eq!(Quorum::Majority { replicas: 3 }.needed(3), 2);
    assert_eq!(Quorum::Majority { replicas: 3 }.needed(2), 2);
    assert_eq!(Quorum::Majority { replicas: 3 }.needed(1), 1);
    assert_eq!(Quorum::Majority { replicas: 5 }.needed(5), 3);
    assert_eq!(Quorum::All.needed(3), 3);
}

/// The divergence of verdicts that hold nothing but it.
fn only_divergence(v: &[Verdict<u32>]) -> &Divergence {
    let [Verdict::Diverged { divergence, .. }] = v else { panic!("{v:?}") };
    divergence
}

/// Batches 1–3 of two transactions, each naming node `answerer` to send its outputs.
fn answered_by(replicas: &[NodeId], answerer: NodeId) -> Agreement<u32> {
    let mut a = Agreement::new(1, replicas.iter().copied());
    for seq in 1..=3u64 {
        let t = seq as u32 * 10;
        let txns = vec![(Timestamp(seq * 100), t), (Timestamp(seq * 100 + 1), t + 1)];
        a.sent_answered_by(seq, txns, false, Some(answerer));
    }
    a
}

/// docs/design.md §10, "One replica answers": the named replica's outputs answer the batch
/// once every other replica's digest matches them, whichever comes first.
#[test]
fn one_replica_sends_the_outputs_and_the_others_their_digest() {
    let mut a = answered_by(&[1, 2], 1);
    assert_eq!(a.on_results_digest(2, good(1).digest()).unwrap(), vec![], "a digest alone answers nothing");
    let v = a.on_results(1, good(1)).unwrap();
    let Verdict::Agreed(b) = &v[0] else { panic!("{v:?}") };
    assert_eq!(
        b.answers.iter().map(|(t, _, o)| (*t, o.clone())).collect::<Vec<_>>(),
        vec![(10, committed(1)), (11, committed(51))]
    );
    assert_eq!(a.on_results(1, good(2)).unwrap(), vec![], "the outputs wait for the digest");
    assert_eq!(agreed_seqs(&a.on_results_digest(2, good(2).digest()).unwrap()), vec![2]);
    assert_eq!(a.on_results_digest(2, good(2).digest()), Err(Ignored::AlreadyDecided { seq: 2 }));
}

/// A digest that is not the digest of the outputs answered is a divergence (Section 5.3's
/// safety net holds with one replica answering): the partition stops, nothing is answered.
#[test]
fn a_digest_that_differs_from_the_outputs_stops_the_partition() {
    let mut a = answered_by(&[1, 2], 1);
    let other = results(1, &[(100, committed(1)), (101, committed(99))]);
    a.on_results_digest(2, other.digest()).unwrap();
    let v = a.on_results(1, good(1)).unwrap();
    let [Verdict::Diverged { divergence, unanswered }] = &v[..] else { panic!("{v:?}") };
    assert!(matches!(&divergence.kind, DivergenceKind::Outputs { digests } if digests.len() == 2), "{divergence}");
    assert_eq!(unanswered.len(), 6);
    assert!(a.is_stopped());
}

/// A digest of more or fewer results than the batch has transactions does not fit it.
#[test]
fn a_digest_of_the_wrong_number_of_results_does_not_fit() {
    let mut a = answered_by(&[1, 2], 1);
    let short = results(1, &[(100, committed(1))]);
    let v = a.on_results_digest(2, short.digest()).unwrap();
    let divergence = only_divergence(&v);
    assert!(matches!(&divergence.kind, DivergenceKind::Shape { node: 2, .. }), "{divergence}");
}

/// The named replica fails before sending its outputs: the replica that sent the digest is
/// asked for them, once, and they answer the batch — if they match the digest it sent.
#[test]
fn when_the_answering_replica_fails_the_outputs_are_asked_of_another() {
    let mut a = answered_by(&[1, 2], 1);
    a.on_results_digest(2, good(1).digest()).unwrap();
    a.on_results_digest(2, good(2).digest()).unwrap();
    assert_eq!(a.replica_down(1), vec![Verdict::SendResults { from: 2, seqs: vec![1, 2] }]);
    // Batch 3's digest comes after the failure: asked for at once.
    assert_eq!(
        a.on_results_digest(2, good(3).digest()).unwrap(),
        vec![Verdict::SendResults { from: 2, seqs: vec![3] }]
    );
    assert_eq!(a.on_results(2, good(2)).unwrap(), vec![], "batch 1 comes first");
    assert_eq!(agreed_seqs(&a.on_results(2, good(1)).unwrap()), vec![1, 2]);
    assert_eq!(a.on_results(2, good(2)), Err(Ignored::AlreadyDecided { seq: 2 }));
    // Outputs that are not those it sent the digest of: the replica contradicts itself.
    let other = results(3, &[(300, committed(3)), (301, committed(7))]);
    let v = a.on_results(2, other).unwrap();
    let divergence = only_divergence(&v);
    assert!(matches!(&divergence.kind, DivergenceKind::Shape { node: 2, .. }), "{divergence}");
}

/// Asked for outputs it no longer keeps, a replica says so: the batch took effect and its
/// outcome is unknown; the batches after it go on. Only the replica asked may say it.
#[test]
fn outputs_no_longer_kept_leave_the_outcome_unknown() {
    let mut a = answered_by(&[1, 2], 1);
    a.on_results_digest(2, good(1).digest()).unwrap();
    assert_eq!(a.replica_down(1), vec![Verdict::SendResults { from: 2, seqs: vec![1] }]);
    assert_eq!(a.on_results_forgotten(3, 1), Err(Ignored::NotExpected { node: 3, seq: 1 }));
    let v = a.on_results_forgotten(2, 1).unwrap();
    let [Verdict::Unknown { seq: 1, unanswered }] = &v[..] else { panic!("{v:?}") };
    assert_eq!(unanswered.iter().map(|(_, t)| *t).collect::<Vec<_>>(), vec![10, 11]);
    assert_eq!(agreed_seqs(&a.on_results(2, good(2)).unwrap()), vec![2]);
    assert!(!a.is_stopped());
}

/// Three replicas that must all report: when the replica asked for the outputs fails too,
/// the next one that sent a digest is asked.
#[test]
fn when_the_replica_asked_fails_too_another_is_asked() {
    let mut a = answered_by(&[1, 2, 3], 1);
    a.on_results_digest(2, good(1).digest()).unwrap();
    a.on_results_digest(3, good(1).digest()).unwrap();
    assert_eq!(a.replica_down(1), vec![Verdict::SendResults { from: 2, seqs: vec![1] }]);
    assert_eq!(a.replica_down(2), vec![Verdict::SendResults { from: 3, seqs: vec![1] }]);
    assert_eq!(agreed_seqs(&a.on_results(3, good(1)).unwrap()), vec![1]);
}

/// The replicas take turns sending outputs when every live one must report; when a majority
/// answers with one to spare, or one replica is left, all send them.
#[test]
fn who_sends_the_outputs() {
    let a: Agreement<u32> = Agreement::new(1, [1, 2]);
    assert_eq!((1..=4).map(|s| a.answerer_for(s)).collect::<Vec<_>>(), vec![Some(2), Some(1), Some(2), Some(1)]);
    assert_eq!(Agreement::<u32>::new(1, [1]).answerer_for(1), None);
    assert_eq!(majority(&[1, 2, 3], 16).answerer_for(1), None);
    assert_eq!(majority(&[1, 2], 16).answerer_for(1), Some(2));
}

/// Under `majority`, a replica's digest that comes after the batch was answered is compared
/// with the outputs answered: a different one stops the partition.
#[test]
fn a_late_digest_under_majority_is_compared_with_the_answer() {
    let mut a = majority(&[1, 2, 3], 16);
    a.on_results(1, good(1)).unwrap();
    assert_eq!(agreed_seqs(&a.on_results(2, good(1)).unwrap()), vec![1]);
    let other = results(1, &[(100, committed(2)), (101, committed(51))]);
    let v = a.on_results_digest(3, other.digest()).unwrap();
    let divergence = only_divergence(&v);
    assert!(divergence.after_answer && matches!(divergence.kind, DivergenceKind::Outputs { .. }), "{divergence}");
}

/// With [`ONE_ANSWERS_PENDING_MAX`] batches pending, the next names no replica: a replica
/// asked later for outputs it reported by digest must still keep them (it keeps 256 batches).
#[test]
fn many_pending_batches_name_no_replica_to_answer() {
    let mut a: Agreement<u32> = Agreement::new(1, [1, 2]);
    for seq in 1..=ONE_ANSWERS_PENDING_MAX as u64 {
        assert!(a.answerer_for(seq).is_some(), "batch {seq}");
        a.sent(seq, vec![], false);
    }
    assert_eq!(a.answerer_for(ONE_ANSWERS_PENDING_MAX as u64 + 1), None);
}
