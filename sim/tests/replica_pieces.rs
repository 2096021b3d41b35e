//! Multi-partition transactions through two partition replicas (issue 7; docs/design.md's
//! determinism contract): warehouse 1 on one replica, warehouse 2 on the other, the standard
//! profile with many remote order lines and remote customers. The test plays the
//! coordinator: it numbers each partition's batches, puts a transaction spanning both in both
//! — a home piece and a remote piece at one timestamp — and forwards each remote piece's
//! outcome to the home replica, delivering every message in a seeded random order
//! (batches out of order, outcomes before or after their batch, duplicates). Checked
//! against one database holding both warehouses running the whole procedures in timestamp
//! order: the same outcome for every transaction, and per table the same rows.
//!
//! A test of `node`'s replicas, kept here because it draws its inputs from `workload`'s
//! generator and `node` does not depend on `workload` (not even for its tests).

use std::collections::BTreeMap;

use engine::digest::table_digests;
use engine::distributed::touched;
use engine::loader::{load_database_scaled, Scale};
use engine::procedures::{execute, TxnInput};
use engine::rng::Rng;
use engine::schema::TableId;
use engine::LeanDb;
use node::replica::{Emit, Replica, Store};
use wire::channel::{CoordinatorToNode, NodeToCoordinator};
use wire::messages::{Batch, BatchTxn, Part, RequestId, Results, Timestamp, TxnOutcome};
use workload::gen::{GenConfig, Generator, Profile};

const LOAD_SEED: u64 = 99;
const BATCH_TXNS: usize = 8;

fn loaded(warehouses: std::ops::RangeInclusive<u16>) -> LeanDb {
    let mut db = LeanDb::new();
    load_database_scaled(&mut db, warehouses, LOAD_SEED, Scale::tiny(), &mut |_| {}).unwrap();
    db
}

/// Each partition's batches for `inputs` (timestamps 1000, 1001, …), as the coordinator
/// builds them: a transaction touching both partitions rides in both, its home piece in its
/// home warehouse's partition.
fn batches(inputs: &[TxnInput]) -> [Vec<Batch>; 2] {
    let mut open: [Vec<BatchTxn>; 2] = [Vec::new(), Vec::new()];
    let mut out: [Vec<Batch>; 2] = [Vec::new(), Vec::new()];
    let close = |p: usize, open: &mut [Vec<BatchTxn>; 2], out: &mut [Vec<Batch>; 2]| {
        let txns = std::mem::take(&mut open[p]);
        let seq = out[p].len() as u64 + 1;
        out[p].push(Batch { partition: p as u16 + 1, seq, txns, digest_after: false, answerer: None });
    };
    for (n, input) in inputs.iter().enumerate() {
        let ts = Timestamp(1_000 + n as u64);
        let w = touched(input);
        let home = usize::from(w[0]) - 1;
        if w.iter().all(|&x| usize::from(x) - 1 == home) {
            open[home].push(BatchTxn::whole(ts, *input));
        } else {
            open[home].push(BatchTxn { ts, input: *input, part: Part::Home { remotes: 1 }, id: RequestId::NONE });
            let home_id = home as u16 + 1;
            open[1 - home].push(BatchTxn {
                ts,
                input: *input,
                part: Part::Remote { home: home_id },
                id: RequestId::NONE,
            });
        }
        for p in 0..2 {
            if open[p].len() >= BATCH_TXNS {
                close(p, &mut open, &mut out);
            }
        }
    }
    for p in 0..2 {
        if !open[p].is_empty() {
            close(p, &mut open, &mut out);
        }
    }
    out
}

fn same_kind(a: &TxnOutcome, b: &TxnOutcome) -> bool {
    match (a, b) {
        (TxnOutcome::Committed(x), TxnOutcome::Committed(y)) => x == y,
        (TxnOutcome::Aborted { .. }, TxnOutcome::Aborted { .. }) => true,
        _ => false,
    }
}

/// Runs `inputs` through two replicas delivering messages in `order_seed`'s order; returns
/// the home outcome of every transaction by timestamp and the two replicas.
fn run(inputs: &[TxnInput], order_seed: u64) -> (BTreeMap<Timestamp, TxnOutcome>, [Replica; 2]) {
    let mut replicas = [Replica::new(1, 1, loaded(1..=1), 1_024), Replica::new(1, 2, loaded(2..=2), 1_024)];
    let mut queue: Vec<(usize, CoordinatorToNode)> = Vec::new();
    for (p, bs) in batches(inputs).into_iter().enumerate() {
        queue.extend(bs.into_iter().map(|b| (p, CoordinatorToNode::Batch(b))));
    }
    let mut rng = Rng::new(order_seed);
    let mut results: Vec<Results> = Vec::new();
    let mut pieces = 0;
    while !queue.is_empty() {
        let (to, msg) = queue.swap_remove(rng.below(queue.len() as u64) as usize);
        // Now and then the network delivers a message twice.
        if rng.percent(5) {
            queue.push((to, msg.clone()));
        }
        for out in replicas[to].on_control(msg).unwrap() {
            match out {
                Emit::ToCoordinator(NodeToCoordinator::PieceReads(r)) => {
                    pieces += 1;
                    queue.push((usize::from(r.home) - 1, CoordinatorToNode::PieceReads(r)));
                }
                Emit::ToCoordinator(NodeToCoordinator::Results(r)) => results.push(r),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert!(pieces > 0);
    for r in &replicas {
        assert_eq!(r.parked_at(), None, "every parked batch went on");
        assert_eq!(r.waiting_batches(), 0);
        assert!(r.stopped().is_none());
    }
    let home_of = |ts: Timestamp| touched(&inputs[(ts.0 - 1_000) as usize])[0];
    let mut home = BTreeMap::new();
    for r in results {
        for t in r.results {
            if home_of(t.ts) == r.partition {
                assert!(home.insert(t.ts, t.outcome).is_none(), "one home outcome per transaction");
            }
        }
    }
    (home, replicas)
}

#[test]
fn pieces_in_two_replicas_batches_equal_the_whole_procedures_whatever_the_delivery_order() {
    let mut cfg = GenConfig::for_profile(Profile::Standard, 1..=2).with_scale(Scale::tiny());
    cfg.remote_item_pct = 10;
    cfg.remote_payment_pct = 50;
    let mut gen = Generator::new(cfg, 11, LOAD_SEED).unwrap();
    let inputs: Vec<TxnInput> = (0..1_200).map(|n| gen.next(1_000 + n)).collect();
    let multi = inputs.iter().filter(|i| touched(i).len() > 1).count();
    assert!(multi > 150, "{multi} multi-partition transactions");

    let mut whole = loaded(1..=2);
    let expected: Vec<TxnOutcome> = inputs
        .iter()
        .enumerate()
        .map(|(n, i)| TxnOutcome::from_result(execute(&mut whole, 1_000 + n as u64, i)))
        .collect();

    let mut reference = None;
    for order_seed in [1, 2, 3] {
        let (home, mut replicas) = run(&inputs, order_seed);
        assert_eq!(home.len(), inputs.len());
        for (n, (ts, got)) in home.iter().enumerate() {
            assert!(same_kind(&expected[n], got), "transaction {ts:?}: whole {:?}, pieces {got:?}", expected[n]);
        }
        let w = table_digests(&mut whole);
        let d: Vec<_> = replicas
            .iter_mut()
            .map(|r| match r.store_mut() {
                Store::Lean(db) => table_digests(db),
                Store::Full(_) => unreachable!("lean replicas"),
            })
            .collect();
        for (i, table) in TableId::ALL.iter().enumerate() {
            if *table == TableId::Item {
                continue;
            }
            let rows = d[0][i].rows + d[1][i].rows;
            let sum = d[0][i].sum.wrapping_add(d[1][i].sum);
            assert_eq!((rows, sum), (w[i].rows, w[i].sum), "table {table:?}");
        }
        // Every delivery order ends in the same states (the determinism contract).
        let states: Vec<_> = replicas.iter_mut().map(|r| r.state_digest()).collect();
        assert_eq!(*reference.get_or_insert(states.clone()), states, "order seed {order_seed}");
    }
}

/// A NewOrder supplied by warehouse 2 for warehouse 1, and its two pieces' batches.
fn one_multi_partition_new_order() -> (TxnInput, Batch, Batch) {
    let mut cfg = GenConfig::for_profile(Profile::Standard, 1..=2).with_scale(Scale::tiny());
    cfg.remote_item_pct = 100;
    cfg.rollback_pct = 0;
    let mut gen = Generator::new(cfg, 5, LOAD_SEED).unwrap();
    let input = loop {
        let i = gen.next(1_000);
        if matches!(i, TxnInput::NewOrder(o) if o.w_id == 1) && touched(&i).len() > 1 {
            break i;
        }
    };
    let ts = Timestamp(1_000);
    let home = Batch {
        partition: 1,
        seq: 1,
        txns: vec![BatchTxn { ts, input, part: Part::Home { remotes: 1 }, id: RequestId::NONE }],
        digest_after: false,
        answerer: None,
    };
    let remote = Batch {
        partition: 2,
        seq: 1,
        txns: vec![BatchTxn { ts, input, part: Part::Remote { home: 1 }, id: RequestId::NONE }],
        digest_after: false,
        answerer: None,
    };
    (input, home, remote)
}

/// Issue 7: a remote piece's outcome lost with every replica that sent it is derived again
/// from a state that includes its batch — the same reads, nothing changed — and not by a
/// replica that has not run the batch yet (it will send the outcome when it does).
#[test]
fn a_lost_remote_outcome_is_derived_again_from_a_state_past_its_batch() {
    let (input, _, remote) = one_multi_partition_new_order();
    let mut r = Replica::new(1, 2, loaded(2..=2), 16);
    assert_eq!(r.rederive_piece(1, 1, Timestamp(1_000), &input), None, "batch 1 not run yet");
    let out = r.on_control(CoordinatorToNode::Batch(remote)).unwrap();
    let Emit::ToCoordinator(NodeToCoordinator::PieceReads(first)) = &out[0] else { panic!("{out:?}") };
    let before = r.state_digest();
    let again = r.rederive_piece(1, 1, Timestamp(1_000), &input).expect("the state includes batch 1");
    assert_eq!(&again, first, "the same reads");
    assert_eq!(r.state_digest(), before, "deriving again changes nothing");
}

/// Issue 7: a home replica parked at a home piece runs nothing after it, and a `ShipTo`
/// (a backup joining) waits for the batch's end — shipping starts between batches.
#[test]
fn a_parked_batch_runs_nothing_after_its_home_piece_and_shipping_starts_after_it() {
    let (_, mut home, remote) = one_multi_partition_new_order();
    let delivery = TxnInput::Delivery(engine::procedures::DeliveryInput { w_id: 1, o_carrier_id: 3, date: 1 });
    home.txns.push(BatchTxn::whole(Timestamp(1_001), delivery));
    let mut h = Replica::new(1, 1, loaded(1..=1), 16);
    let mut rr = Replica::new(2, 2, loaded(2..=2), 16);
    assert!(h.on_control(CoordinatorToNode::Batch(home.clone())).unwrap().is_empty(), "parked: no results yet");
    assert_eq!(h.parked_at(), Some(Timestamp(1_000)));
    assert_eq!(h.stats().txns_committed, 0, "the Delivery after the home piece waits");
    let duplicate = h.on_control(CoordinatorToNode::Batch(home)).unwrap();
    assert!(duplicate.is_empty(), "a duplicate of the parked batch is dropped");
    h.on_control(CoordinatorToNode::ShipTo { partition: 1, backup: 9 }).unwrap();
    assert_eq!(h.role(), node::replica::ReplicaRole::Replica, "not while the batch is half run");
    let Emit::ToCoordinator(NodeToCoordinator::PieceReads(reads)) =
        rr.on_control(CoordinatorToNode::Batch(remote)).unwrap().remove(0)
    else {
        panic!("a remote piece's outcome first")
    };
    let out = h.on_control(CoordinatorToNode::PieceReads(reads)).unwrap();
    let Some(Emit::ToCoordinator(NodeToCoordinator::Results(res))) = out.last() else { panic!("{out:?}") };
    assert!(res.results.iter().all(|t| matches!(t.outcome, TxnOutcome::Committed(_))), "{res:?}");
    assert_eq!(h.role(), node::replica::ReplicaRole::Primary, "shipping from the next batch on");
    assert_eq!(h.parked_at(), None);
}
