//! The state digest a batch asks for, taken from a copy of the state after the batch while the
//! replica executes on (docs/design.md §10, "Checks during traffic"): the digest is the
//! state's at that batch however many batches run before the copy ends, the results answer
//! at once, and a replica that cannot begin a copy digests at once instead.

use engine::loader::{load_database_scaled, Scale};
use engine::procedures::*;
use engine::LeanDb;
use node::replica::{DigestCopy, Emit, Replica, Store};
use node::snapshot::CopyNext;
use wire::channel::NodeToCoordinator;
use wire::messages::*;

const DATE: i64 = 1_213_056_000;

fn loaded() -> LeanDb {
    let mut db = LeanDb::new();
    load_database_scaled(&mut db, 1..=2, 7, Scale::tiny(), &mut |_| {}).unwrap();
    db
}

/// Batch `seq` of two Payments and a NewOrder (they change WAREHOUSE, DISTRICT, CUSTOMER,
/// HISTORY, ORDERS, NEW-ORDER, ORDER-LINE and STOCK rows: clauses 2.4.2 and 2.5.2).
fn batch(seq: Seq, digest_after: bool) -> Batch {
    let payment = |c_id| {
        TxnInput::Payment(PaymentInput {
            w_id: 1,
            d_id: 1,
            c_w_id: 1,
            c_d_id: 1,
            customer: CustomerSelector::ById(c_id),
            h_amount: 100,
            date: DATE,
        })
    };
    let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
    for (n, l) in lines.iter_mut().take(5).enumerate() {
        *l = OrderLineInput { i_id: n as u32 + 1, supply_w_id: 1, quantity: 3 };
    }
    let new_order = TxnInput::NewOrder(NewOrderInput { w_id: 1, d_id: 2, c_id: 1, ol_cnt: 5, lines, entry_d: DATE });
    let inputs = [payment(1), new_order, payment(2)];
    let txns = inputs.iter().enumerate().map(|(n, i)| BatchTxn::whole(Timestamp(seq * 10 + n as u64), *i)).collect();
    Batch { partition: 1, seq, txns, digest_after, answerer: None }
}

fn state_digests(out: &[Emit]) -> Vec<(Seq, Result<StateDigest, String>)> {
    out.iter()
        .filter_map(|e| match e {
            Emit::ToCoordinator(NodeToCoordinator::StateDigest { seq, digest, .. }) => Some((*seq, digest.clone())),
            _ => None,
        })
        .collect()
}

fn run(r: &mut Replica, b: Batch) -> Vec<Emit> {
    let mut out = Vec::new();
    r.take_batch(b, &mut out).unwrap();
    out
}

#[test]
fn a_digest_copy_shows_the_state_after_its_batch_while_later_batches_run() {
    let mut by_copy = Replica::new(1, 1, loaded(), 16);
    by_copy.set_digest_by_copy(true);
    let mut at_once = Replica::new(2, 1, loaded(), 16);
    run(&mut by_copy, batch(1, false));
    run(&mut at_once, batch(1, false));

    // The digest batch: its results go out at once, its digest does not.
    let out = run(&mut by_copy, batch(2, true));
    assert!(matches!(&out[..], [Emit::ToCoordinator(NodeToCoordinator::Results(r))] if r.seq == 2), "{out:?}");
    let Some(DigestCopy::Rows { seq: 2, mut sender }) = by_copy.take_digest_copy() else { panic!("a rows copy begun") };
    assert!(by_copy.take_digest_copy().is_none(), "taken once");
    // The replica that digests at once reports it with the results.
    let out = run(&mut at_once, batch(2, true));
    let [(2, Ok(expected))] = &state_digests(&out)[..] else { panic!("{out:?}") };

    // Steps of the copy interleaved with batches that change the rows it has yet to copy.
    let mut seq = 3;
    let digest = loop {
        let Store::Lean(db) = by_copy.store_mut() else { unreachable!() };
        match sender.next(db) {
            CopyNext::Chunk(SnapshotChunk { end: Some(SnapshotEnd::Complete { digest, .. }), .. }) => break digest,
            CopyNext::Chunk(SnapshotChunk { end: Some(SnapshotEnd::Refused { reason }), .. }) => panic!("{reason}"),
            CopyNext::Chunk(_) => {}
            CopyNext::Over => panic!("over without an end"),
        }
        run(&mut by_copy, batch(seq, false));
        seq += 1;
    };
    assert!(seq > 4, "the copy raced several batches ({seq})");
    assert_eq!(digest, *expected, "the copy's digest is the state's after batch 2");
    assert_ne!(by_copy.state_digest(), digest, "the replica went on");
}

#[test]
fn a_replica_that_cannot_begin_a_copy_digests_at_once() {
    let mut r = Replica::new(1, 1, loaded(), 16);
    r.set_digest_by_copy(true);
    let out = run(&mut r, batch(1, true));
    assert!(state_digests(&out).is_empty());
    // The carrier has not taken the copy yet: the next digest batch cannot begin one (the
    // engine copies one state at a time) and digests at once.
    let out = run(&mut r, batch(2, true));
    let digest = r.state_digest();
    assert_eq!(state_digests(&out), vec![(2, Ok(digest))]);
    assert_eq!(r.take_digest_copy().map(|c| c.seq()), Some(1));
}
