//! The copy taken while the partition executes (docs/design.md §10, "Copying without
//! stopping"): rows installed plus the changes recorded during the copy give the source's
//! state exactly, and the digest the copy computed without a second scan is that state's.

use super::*;
use crate::digest::digest;
use crate::loader::{load_database_scaled, Scale};
use crate::procedures::{
    execute, CustomerSelector, DeliveryInput, NewOrderInput, OrderLineInput, PaymentInput, TxnInput, ORDER_LINES_MAX,
};
use crate::rng::Rng;
use crate::schema::Item;
use crate::storage::Storage;
use bytemuck::Zeroable;

const SCALE: Scale = Scale::tiny();

fn loaded() -> LeanDb {
    let mut db = LeanDb::new();
    load_database_scaled(&mut db, 1..=1, 42, SCALE, &mut |_| {}).expect("loads");
    db
}

/// A NewOrder (1 in 20 rolled back by an unused item, clause 2.4.1.4), a Payment by id or a
/// Delivery (which deletes NEW-ORDER rows and updates ORDER and ORDER-LINE rows).
fn input(rng: &mut Rng, ts: u64) -> TxnInput {
    let d_id = rng.uniform(1, 10) as u8;
    match rng.uniform(1, 10) {
        1..=5 => {
            let ol_cnt = rng.uniform(5, ORDER_LINES_MAX as u64) as u8;
            let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
            for l in lines.iter_mut().take(ol_cnt as usize) {
                *l = OrderLineInput { i_id: rng.uniform_u32(1, SCALE.items), supply_w_id: 1, quantity: 5 };
            }
            if ts % 20 == 0 {
                lines[ol_cnt as usize - 1].i_id = SCALE.items + 1;
            }
            let c_id = rng.uniform_u32(1, SCALE.customers_per_district);
            TxnInput::NewOrder(NewOrderInput { w_id: 1, d_id, c_id, ol_cnt, lines, entry_d: ts as i64 })
        }
        6..=8 => TxnInput::Payment(PaymentInput {
            w_id: 1,
            d_id,
            c_w_id: 1,
            c_d_id: d_id,
            customer: CustomerSelector::ById(rng.uniform_u32(1, SCALE.customers_per_district)),
            h_amount: rng.uniform(100, 500_000) as i64,
            date: ts as i64,
        }),
        _ => TxnInput::Delivery(DeliveryInput { w_id: 1, o_carrier_id: 3, date: ts as i64 }),
    }
}

/// An ITEM inserted or deleted: a hash table whose slots change under the scan.
fn churn_items(db: &mut LeanDb, rng: &mut Rng, ts: u64) {
    db.begin(ts);
    let id = SCALE.items + 1 + rng.uniform_u32(0, 50);
    if db.delete::<t::Items>(u64::from(id)).expect("deletes").is_none() {
        let row = Item { i_id: id, i_price: 100, ..Item::zeroed() };
        db.insert::<t::Items>(&row).expect("inserts");
    }
    db.commit().expect("commits");
}

/// What the stream of a copy carries, in order.
enum Piece {
    Rows(TableId, Vec<u8>),
    Changes(RedoBatch),
}

/// Copies `db` in steps of `bytes_max` with `txns_per_step` transactions between two steps,
/// `churn` adding ITEM inserts and deletes; returns the stream and the digest it ended with.
fn copy_under_load(
    db: &mut LeanDb,
    seed: u64,
    bytes_max: usize,
    txns_per_step: u32,
    churn: bool,
) -> (Vec<Piece>, Digest) {
    let mut rng = Rng::new(seed);
    let mut ts = 1_000;
    let mut stream = Vec::new();
    assert!(db.begin_copy(1));
    assert!(!db.begin_copy(2), "one copy at a time");
    assert_eq!(db.copy_id(), Some(1));
    loop {
        for _ in 0..txns_per_step {
            ts += 1;
            let _ = execute(db, ts, &input(&mut rng, ts));
            if churn && rng.percent(30) {
                ts += 1;
                churn_items(db, &mut rng, ts);
            }
        }
        let changes = db.take_copy_redo();
        if !changes.is_empty() {
            stream.push(Piece::Changes(changes));
        }
        let mut out = Vec::new();
        match db.copy_step(bytes_max, &mut out) {
            CopyStep::Rows { table, rows } => {
                assert_eq!(out.len(), rows as usize * table.row_size());
                stream.push(Piece::Rows(table, out));
            }
            CopyStep::Done => break,
        }
    }
    let last = db.take_copy_redo();
    if !last.is_empty() {
        stream.push(Piece::Changes(last));
    }
    (stream, db.finish_copy())
}

/// The receiver: rows as they come, the changes after the last row.
fn install(stream: &[Piece]) -> LeanDb {
    let mut db = LeanDb::new();
    for p in stream {
        if let Piece::Rows(table, bytes) = p {
            db.install_copy_rows(*table, bytes).expect("installs");
        }
    }
    for p in stream {
        if let Piece::Changes(batch) = p {
            db.apply_copy_redo(batch).expect("applies");
        }
    }
    db
}

#[test]
fn a_copy_taken_under_load_installs_the_sources_state_at_its_end() {
    for (seed, bytes_max, txns) in [(1, 4 << 10, 3), (2, 64 << 10, 20), (3, 1, 1), (4, 1 << 20, 50)] {
        let mut source = loaded();
        let (stream, claimed) = copy_under_load(&mut source, seed, bytes_max, txns, false);
        let now = digest(&mut source);
        assert_eq!(claimed, now, "seed {seed}: the digest computed along the copy is the state's");
        let mut copy = install(&stream);
        assert_eq!(digest(&mut copy), now, "seed {seed}: the copy is the source's state");
        let report = crate::check::check(&mut copy);
        assert!(
            report.all_passed(),
            "seed {seed}: clause 3.3.2 on the copy: {:?}",
            report.failed().collect::<Vec<_>>()
        );
        assert!(!source.copy_active());
        // The copy goes on executing the same transactions as the source.
        let mut rng = Rng::new(seed ^ 77);
        for ts in 10_000..10_200 {
            let i = input(&mut rng, ts);
            assert_eq!(execute(&mut source, ts, &i).is_ok(), execute(&mut copy, ts, &i).is_ok());
        }
        assert_eq!(digest(&mut source), digest(&mut copy));
    }
}

#[test]
fn a_hash_table_whose_slots_change_under_the_scan_is_scanned_again() {
    for seed in 1..=6 {
        let mut source = loaded();
        let (stream, claimed) = copy_under_load(&mut source, seed, 2 << 10, 2, true);
        let now = digest(&mut source);
        assert_eq!(claimed, now, "seed {seed}");
        assert_eq!(digest(&mut install(&stream)), now, "seed {seed}");
    }
}

#[test]
fn a_copy_of_an_idle_partition_is_its_state_and_records_nothing() {
    let mut source = loaded();
    let before = digest(&mut source);
    let (stream, claimed) = copy_under_load(&mut source, 9, 32 << 10, 0, false);
    assert_eq!(claimed, before);
    assert!(stream.iter().all(|p| matches!(p, Piece::Rows(..))));
    let rows: u64 = stream
        .iter()
        .map(|p| match p {
            Piece::Rows(t, b) => (b.len() / t.row_size()) as u64,
            Piece::Changes(_) => 0,
        })
        .sum();
    let mut count = 0;
    for id in TableId::ALL {
        count += match id {
            TableId::Warehouse => source.count::<t::Warehouses>(),
            TableId::District => source.count::<t::Districts>(),
            TableId::Customer => source.count::<t::Customers>(),
            TableId::History => source.count::<t::Histories>(),
            TableId::Orders => source.count::<t::Orders>(),
            TableId::NewOrder => source.count::<t::NewOrders>(),
            TableId::OrderLine => source.count::<t::OrderLines>(),
            TableId::Item => source.count::<t::Items>(),
            TableId::Stock => source.count::<t::Stocks>(),
        } as u64;
    }
    assert_eq!(rows, count, "every row once");
}

#[test]
fn aborted_transactions_record_nothing_and_a_dropped_copy_can_begin_again() {
    let mut db = loaded();
    assert!(db.begin_copy(3));
    db.begin(5);
    db.update::<t::Items, _>(1, |r| r.i_price += 1).expect("updates");
    db.abort();
    assert!(db.take_copy_redo().is_empty());
    db.abort_copy();
    assert!(!db.copy_active());
    assert!(db.begin_copy(3));
}

#[test]
fn scan_positions_follow_each_tables_organisation() {
    let mut db = loaded();
    for (i, id) in TableId::ALL.iter().enumerate() {
        let org = match db.start_position(i, 0) {
            Position::Hash { .. } => Organisation::Hash,
            Position::Ordered { .. } => Organisation::Ordered,
            Position::Heap { .. } => Organisation::Heap,
        };
        assert_eq!(org, id.organisation(), "{id}");
    }
}
