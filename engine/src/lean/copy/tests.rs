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
/// Delivery (which deletes NEW-ORDER rows and updates ORDER and ORDER-LINE rows) on warehouse
/// 1 of a [`Scale::tiny`] population; the conventional stack's copy tests draw theirs here
/// too (there they split B+tree leaves and allocate heap pages).
pub(crate) fn input(rng: &mut Rng, ts: u64) -> TxnInput {
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

/// Copies `db` in steps of `bytes_max` with `txns_per_step` transactions between two steps,
/// `churn` adding ITEM inserts and deletes; returns the rows sent, the digest the copy ended
/// with, and the database's digest when the copy began.
fn copy_under_load(
    db: &mut LeanDb,
    seed: u64,
    bytes_max: usize,
    txns_per_step: u32,
    churn: bool,
) -> (Vec<(TableId, Vec<u8>)>, Digest, Digest, u64) {
    copy_under_load_listing(db, seed, bytes_max, txns_per_step, churn, KEPT_LISTED_PER_STEP_MAX)
}

/// [`copy_under_load`], a step's listing at a pass's end looking through at most
/// `listed_max` kept rows.
fn copy_under_load_listing(
    db: &mut LeanDb,
    seed: u64,
    bytes_max: usize,
    txns_per_step: u32,
    churn: bool,
    listed_max: usize,
) -> (Vec<(TableId, Vec<u8>)>, Digest, Digest, u64) {
    let mut rng = Rng::new(seed);
    let mut ts = 1_000;
    let mut stream = Vec::new();
    let at_beginning = digest(db);
    assert!(db.begin_copy(1));
    db.set_copy_listed_max(listed_max);
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
        let mut out = Vec::new();
        match db.copy_step(bytes_max, &mut out) {
            CopyStep::Rows { table, rows } => {
                assert_eq!(out.len(), rows as usize * table.row_size());
                stream.push((table, out));
            }
            CopyStep::Done => break,
        }
    }
    let progress = db.copy_progress().expect("under way");
    assert!(!churn || progress.rescans > 0, "ITEM churn makes the scan start ITEM over");
    assert!(txns_per_step == 0 || progress.kept_rows > 0, "changes under the copy keep images");
    (stream, db.finish_copy(), at_beginning, ts)
}

/// The receiver: the rows as they come.
fn install(stream: &[(TableId, Vec<u8>)]) -> LeanDb {
    let mut db = LeanDb::new();
    for (table, bytes) in stream {
        db.install_copy_rows(*table, bytes).expect("installs");
    }
    db
}

#[test]
fn a_copy_taken_under_load_installs_the_sources_state_at_its_beginning() {
    for (seed, bytes_max, txns) in [(1, 4 << 10, 3), (2, 64 << 10, 20), (3, 1, 1), (4, 1 << 20, 50)] {
        let mut source = loaded();
        let (stream, claimed, at_beginning, last_ts) = copy_under_load(&mut source, seed, bytes_max, txns, false);
        assert_eq!(claimed, at_beginning, "seed {seed}: the digest summed along the copy is the beginning's");
        let mut copy = install(&stream);
        assert_eq!(digest(&mut copy), at_beginning, "seed {seed}: the copy is the source's state at its beginning");
        let report = crate::check::check(&mut copy);
        assert!(
            report.all_passed(),
            "seed {seed}: clause 3.3.2 on the copy: {:?}",
            report.failed().collect::<Vec<_>>()
        );
        assert!(!source.copy_active());
        // The copy executes the transactions that followed its beginning and reaches the
        // source's state: what a joiner does with the batches it held.
        let mut rng = Rng::new(seed);
        for ts in 1_001..=last_ts {
            let _ = execute(&mut copy, ts, &input(&mut rng, ts));
        }
        assert_eq!(
            digest(&mut copy),
            digest(&mut source),
            "seed {seed}: replaying the transactions reaches the source"
        );
    }
}

#[test]
fn a_hash_table_whose_rows_change_under_the_scan_is_scanned_again() {
    for seed in 1..=6 {
        let mut source = loaded();
        let (stream, claimed, at_beginning, _) = copy_under_load(&mut source, seed, 2 << 10, 2, true);
        assert_eq!(claimed, at_beginning, "seed {seed}");
        assert_eq!(digest(&mut install(&stream)), at_beginning, "seed {seed}");
    }
}

#[test]
fn a_copy_of_an_idle_partition_is_its_state_and_sends_every_row_once() {
    let mut source = loaded();
    let (stream, claimed, at_beginning, _) = copy_under_load(&mut source, 9, 32 << 10, 0, false);
    assert_eq!(claimed, at_beginning);
    let rows: u64 = stream.iter().map(|(t, b)| (b.len() / t.row_size()) as u64).sum();
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
fn aborted_transactions_keep_nothing_and_a_dropped_copy_can_begin_again() {
    let mut db = loaded();
    assert!(db.begin_copy(3));
    db.begin(5);
    db.update::<t::Items, _>(1, |r| r.i_price += 1).expect("updates");
    db.abort();
    assert_eq!(db.copy_progress().map(|p| p.kept_rows), Some(0));
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
            Position::Flush { .. } => panic!("a pass starts scanning"),
        };
        assert_eq!(org, id.organisation(), "{id}");
    }
}

/// docs/design.md §10, "Copying without stopping": no step costs time in proportion to what
/// the copy keeps. Listing a pass's end looks through a bounded number of kept rows a step
/// (down to one shard here), steps that find nothing due send no rows, and the copy is
/// still exactly the state at its beginning.
#[test]
fn a_pass_end_is_listed_a_shard_at_a_time_and_the_copy_holds() {
    for seed in [5, 6] {
        let mut source = loaded();
        let (stream, claimed, at_beginning, _) = copy_under_load_listing(&mut source, seed, 8 << 10, 4, true, 1);
        assert_eq!(claimed, at_beginning, "seed {seed}");
        assert_eq!(digest(&mut install(&stream)), at_beginning, "seed {seed}");
        let empty = stream.iter().filter(|(_, bytes)| bytes.is_empty()).count();
        assert!(empty >= KEPT_SHARDS, "seed {seed}: {empty} steps listed kept rows and sent none");
    }
}

/// Kept images go in fixed segments and never move; none straddles two.
#[test]
fn kept_images_stay_where_they_were_put() {
    let mut kept = KeptBytes::default();
    let image = |i: usize| vec![(i % 251) as u8; 1 + i % 700];
    let at: Vec<u32> = (0..20_000).map(|i| kept.push(&image(i))).collect();
    assert!(kept.segments.len() > 1);
    assert!(kept.segments.iter().all(|s| s.capacity() == KEPT_SEGMENT_BYTES), "never grown, never moved");
    for (i, &at) in at.iter().enumerate() {
        assert_eq!(kept.get(at, image(i).len()), &image(i)[..], "image {i}");
    }
}

/// What a copy kept is freed a few maps and segments at a time once it is over (or at once
/// by the next copy's beginning), never in one piece by the step that ends it.
#[test]
fn what_a_copy_kept_is_freed_a_little_at_a_time() {
    let mut source = loaded();
    let (_, claimed, at_beginning, _) = copy_under_load(&mut source, 7, 4 << 10, 8, false);
    assert_eq!(claimed, at_beginning);
    assert!(source.has_copy_leftovers(), "the copy kept rows");
    let mut calls = 0;
    while source.free_copy_leftovers() {
        calls += 1;
    }
    assert!(calls > 0, "more than one piece");
    assert!(!source.has_copy_leftovers());
    let (_, claimed, at_beginning, _) = copy_under_load(&mut source, 8, 4 << 10, 8, false);
    assert_eq!(claimed, at_beginning);
    assert!(source.begin_copy(3), "a new copy begins over the leftovers");
    assert!(!source.has_copy_leftovers(), "freed at once");
}
