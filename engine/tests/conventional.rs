//! Integration tests of the conventional stack (issue 3): each of the paper's switches does
//! what it says (Harizopoulos et al., SIGMOD 2008, Section 4, Figures 5–6), every step gives
//! the same results as the lean kernel, abort leaves no trace, ARIES restart recovery keeps
//! exactly the committed transactions (Mohan et al., TODS 1992, Section 6), a torn log tail is
//! truncated by checksum and reported while a corrupt record followed by valid ones, a missing
//! checkpoint or log, and a damaged checkpoint are refused with nothing changed, and strict
//! 2PL with wait-die keeps an invariant under several workers.

mod common;
use common::TempDir;

use std::sync::Arc;

use bytemuck::Zeroable;
use engine::conventional::{
    Config, ConventionalDb, ConventionalError, Counters, CrashingLogDevice, Session, Step, Switches, LOG_FILE,
    SNAPSHOT_FILE,
};
use engine::procedures::{
    execute, CustomerSelector, DeliveryInput, NewOrderInput, OrderLineInput, OrderStatusInput, PaymentInput,
    StockLevelInput, TxnInput, ORDER_LINES_MAX,
};
use engine::schema::{
    fixed, keys, t, Customer, CustomerNameKey, District, History, Item, NewOrder, Order, OrderLine, Stock, Table,
    Warehouse,
};
use engine::{LeanDb, ScanDir, Storage, StorageError};

fn step(n: u8) -> Step {
    Step::new(n).unwrap()
}

/// Step `n`'s configuration with a small log preallocation (tests write many logs).
fn config(n: u8, workers: usize) -> Config {
    Config { log_prealloc_bytes: 1 << 20, ..Config::for_step(step(n), workers) }
}

fn open(dir: &TempDir, config: Config) -> Arc<ConventionalDb> {
    ConventionalDb::open(&dir.0, config).unwrap()
}

fn item(i: u32, price: i64) -> Item {
    Item { i_id: i, i_price: price, i_name: fixed(b"item"), ..Item::zeroed() }
}

fn stock(w: u16, i: u32, quantity: i32) -> Stock {
    Stock { s_w_id: w, s_i_id: i, s_quantity: quantity, ..Stock::zeroed() }
}

fn customer(w: u16, d: u8, c: u32, last: &[u8]) -> Customer {
    Customer {
        c_w_id: w,
        c_d_id: d,
        c_id: c,
        c_last: fixed(last),
        c_first: fixed(format!("first{:04}", 1000 - c).as_bytes()),
        c_balance: -1000,
        ..Customer::zeroed()
    }
}

fn order(w: u16, d: u8, o: u32, c: u32) -> Order {
    Order { o_w_id: w, o_d_id: d, o_id: o, o_c_id: c, o_ol_cnt: 5, o_entry_d: o as i64, ..Order::zeroed() }
}

fn order_line(w: u16, d: u8, o: u32, n: u8) -> OrderLine {
    OrderLine {
        ol_w_id: w,
        ol_d_id: d,
        ol_o_id: o,
        ol_number: n,
        ol_amount: (o * 10 + n as u32) as i64,
        ..OrderLine::zeroed()
    }
}

fn history(c: u32, amount: i64) -> History {
    History { h_c_id: c, h_c_w_id: 1, h_w_id: 1, h_c_d_id: 1, h_d_id: 1, h_amount: amount, ..History::zeroed() }
}

fn last_name(c: u32) -> &'static [u8] {
    [b"ABLE".as_slice(), b"BAR", b"OUGHT", b"PRES"][(c % 4) as usize]
}

/// Bulk-loads a small database: enough rows that every B+tree splits several levels deep.
fn load<S: Storage>(db: &mut S) {
    db.insert::<t::Warehouses>(&Warehouse { w_id: 1, w_ytd: 30_000_000, ..Warehouse::zeroed() }).unwrap();
    for d in 1..=10u8 {
        db.insert::<t::Districts>(&District { d_w_id: 1, d_id: d, d_next_o_id: 3001, ..District::zeroed() }).unwrap();
    }
    for c in 1..=300u32 {
        db.insert::<t::Customers>(&customer(1, 1 + (c % 3) as u8, c, last_name(c))).unwrap();
    }
    for i in 1..=2000u32 {
        db.insert::<t::Items>(&item(i * 7, i as i64)).unwrap();
        db.insert::<t::Stocks>(&stock(1, i * 7, 50)).unwrap();
    }
    for o in 1..=400u32 {
        db.insert::<t::Orders>(&order(1, 1, o, 3 * (1 + o % 50))).unwrap();
        for n in 1..=5 {
            db.insert::<t::OrderLines>(&order_line(1, 1, o, n)).unwrap();
        }
        if o > 300 {
            db.insert::<t::NewOrders>(&NewOrder { no_w_id: 1, no_d_id: 1, no_o_id: o, _pad: 0 }).unwrap();
        }
    }
    for c in 1..=20 {
        db.insert::<t::Histories>(&history(c, 10 * c as i64)).unwrap();
    }
}

/// A deterministic sequence of transactions and bulk operations; returns what every
/// operation reported, as text.
fn exercise<S: Storage>(db: &mut S) -> Vec<String> {
    let mut trace = Vec::new();
    let mut note = |s: String| trace.push(s);

    // Payment-like: read and update three rows, append a history row.
    db.begin(1);
    note(format!(
        "{:?}",
        db.update::<t::Warehouses, _>(keys::warehouse(1), |w| {
            w.w_ytd += 500;
            w.w_ytd
        })
    ));
    note(format!("{:?}", db.update::<t::Districts, _>(keys::district(1, 2), |d| d.d_ytd += 500)));
    note(format!(
        "{:?}",
        db.update::<t::Customers, _>(keys::customer(1, 2, 5), |c| {
            c.c_balance -= 500;
            c.c_balance
        })
    ));
    note(format!("{:?}", db.insert::<t::Histories>(&history(5, 500))));
    note(format!("{:?}", db.get::<t::Customers, _>(keys::customer(1, 2, 9999), |c| c.c_id)));
    db.commit().unwrap();

    // NewOrder-like with many inserts (leaf and internal splits), a duplicate, secondary index.
    db.begin(2);
    let o_id = db.update::<t::Districts, _>(keys::district(1, 1), |d| {
        d.d_next_o_id += 1;
        d.d_next_o_id - 1
    });
    note(format!("{o_id:?}"));
    for o in 3001..3200u32 {
        db.insert::<t::Orders>(&order(1, 1, o, 7)).unwrap();
        db.insert::<t::NewOrders>(&NewOrder { no_w_id: 1, no_d_id: 1, no_o_id: o, _pad: 0 }).unwrap();
        for n in 1..=10 {
            db.insert::<t::OrderLines>(&order_line(1, 1, o, n)).unwrap();
        }
    }
    note(format!("{:?}", db.insert::<t::Orders>(&order(1, 1, 3001, 7))));
    for i in (7..=700).step_by(7) {
        db.update::<t::Stocks, _>(keys::stock(1, i), |s| s.s_quantity -= 3).unwrap();
    }
    db.commit().unwrap();

    // A transaction that rolls back after changing every kind of thing (TPC-C 2.4.2.3).
    db.begin(3);
    db.update::<t::Items, _>(keys::item(14), |i| i.i_price = 1).unwrap();
    for o in 5000..5300u32 {
        db.insert::<t::Orders>(&order(1, 3, o, 9)).unwrap();
    }
    for o in 1..=200u32 {
        db.delete::<t::OrderLines>(keys::order_line(1, 1, o, 3)).unwrap();
    }
    db.delete::<t::Customers>(keys::customer(1, 1, 3)).unwrap();
    db.insert::<t::Histories>(&history(77, 1)).unwrap();
    db.abort();

    // Delivery-like: oldest new orders per district, deleted; a range of lines updated.
    db.begin(4);
    for _ in 0..3 {
        let mut oldest = None;
        db.scan::<t::NewOrders>(keys::new_order(1, 1, 0), keys::new_order(1, 1, u32::MAX), ScanDir::Forward, |n| {
            oldest = Some(n.no_o_id);
            false
        })
        .unwrap();
        note(format!("oldest {oldest:?}"));
        let o = oldest.unwrap();
        note(format!("{:?}", db.delete::<t::NewOrders>(keys::new_order(1, 1, o)).map(|r| r.map(|n| n.no_o_id))));
        let mut total = 0;
        db.scan::<t::OrderLines>(
            keys::order_line(1, 1, o, 0),
            keys::order_line(1, 1, o, u8::MAX),
            ScanDir::Forward,
            |l| {
                total += l.ol_amount;
                true
            },
        )
        .unwrap();
        for n in 1..=5 {
            db.update::<t::OrderLines, _>(keys::order_line(1, 1, o, n), |l| l.ol_delivery_d = 99).unwrap();
        }
        note(format!("total {total}"));
    }
    db.commit().unwrap();

    // Deletes that empty whole leaves, then scans across them both ways.
    db.begin(5);
    for o in 10..=380u32 {
        for n in 1..=5 {
            db.delete::<t::OrderLines>(keys::order_line(1, 1, o, n)).unwrap();
        }
    }
    db.commit().unwrap();
    db.begin(6);
    for dir in [ScanDir::Forward, ScanDir::Backward] {
        let mut seen = Vec::new();
        db.scan::<t::OrderLines>(keys::order_line(1, 1, 5, 2), keys::order_line(1, 1, 3005, 4), dir, |l| {
            seen.push((l.ol_o_id, l.ol_number));
            seen.len() < 60
        })
        .unwrap();
        note(format!("{dir:?} {seen:?}"));
    }
    // StockLevel/OrderStatus-like reads; secondary index scans both ways.
    let mut by_name = Vec::new();
    let lo = CustomerNameKey { w_id: 1, d_id: 2, last: fixed(b"BAR"), first: [0; 16], c_id: 0 };
    let hi = CustomerNameKey { w_id: 1, d_id: 2, last: fixed(b"BAR"), first: [0xFF; 16], c_id: u32::MAX };
    db.scan_secondary::<t::Customers>(lo, hi, ScanDir::Forward, |k| {
        by_name.push(k);
        true
    })
    .unwrap();
    note(format!("by name {by_name:?}"));
    let mut latest = None;
    db.scan_secondary::<t::Orders>(
        keys::order_by_customer(1, 1, 7, 0),
        keys::order_by_customer(1, 1, 7, u32::MAX),
        ScanDir::Backward,
        |k| {
            latest = Some(k);
            false
        },
    )
    .unwrap();
    note(format!("latest {latest:?}"));
    note(format!("{:?}", db.scan::<t::Stocks>(0, u64::MAX, ScanDir::Forward, |_| true)));
    note(format!("{:?}", db.get::<t::Histories, _>(0, |h| h.h_amount)));
    note(format!("{:?}", db.scan::<t::OrderLines>(9, 3, ScanDir::Forward, |_| true)));
    db.commit().unwrap();

    // Bulk operations outside a transaction.
    note(format!("{:?}", db.insert::<t::Items>(&item(7, 1))));
    note(format!("{:?}", db.delete::<t::Items>(keys::item(21)).map(|r| r.map(|i| i.i_id))));
    note(format!("{:?}", db.update::<t::Items, _>(keys::item(22), |i| i.i_price)));
    note(format!("counts {} {} {}", db.count::<t::OrderLines>(), db.count::<t::Histories>(), db.count::<t::Orders>()));
    trace
}

/// Every table's rows as bytes: HISTORY in visiting order (append order in both engines),
/// the others sorted (hash tables visit in different orders).
fn contents<S: Storage>(db: &mut S) -> Vec<Vec<Vec<u8>>> {
    fn rows<T: Table, S: Storage>(db: &mut S, sort: bool) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        db.for_each::<T>(|r| v.push(bytemuck::bytes_of(r).to_vec()));
        if sort {
            v.sort();
        }
        v
    }
    vec![
        rows::<t::Warehouses, S>(db, true),
        rows::<t::Districts, S>(db, true),
        rows::<t::Customers, S>(db, true),
        rows::<t::Histories, S>(db, false),
        rows::<t::Orders, S>(db, true),
        rows::<t::NewOrders, S>(db, true),
        rows::<t::OrderLines, S>(db, true),
        rows::<t::Items, S>(db, true),
        rows::<t::Stocks, S>(db, true),
    ]
}

/// Section 4: the same transactions run at every step of the staircase; every step must
/// compute exactly what the lean kernel computes.
#[test]
fn every_step_gives_the_lean_kernels_results() {
    let mut lean = LeanDb::new();
    load(&mut lean);
    let want_trace = exercise(&mut lean);
    let want = contents(&mut lean);
    for n in 0..=10 {
        let dir = TempDir::new("conventional", "steps");
        let db = open(&dir, config(n, 1));
        let mut s = db.session().unwrap();
        load(&mut s);
        let trace = exercise(&mut s);
        assert_eq!(trace, want_trace, "step {n}");
        assert!(contents(&mut s) == want, "step {n}: table contents differ from LeanDb");
    }
}

/// An abort leaves no trace, with undo from log records (steps 0–2) and from the private
/// undo list (log records off, steps 3–10).
#[test]
fn abort_restores_every_change() {
    for n in [0, 2, 3, 5, 10] {
        let dir = TempDir::new("conventional", "abort");
        let db = open(&dir, config(n, 1));
        let mut s = db.session().unwrap();
        load(&mut s);
        let before = contents(&mut s);
        s.begin(1);
        for c in 1..=300u32 {
            s.update::<t::Customers, _>(keys::customer(1, 1 + (c % 3) as u8, c), |r| r.c_balance += 7).unwrap();
        }
        for o in 1000..1400u32 {
            s.insert::<t::Orders>(&order(1, 2, o, 3)).unwrap();
            s.insert::<t::Histories>(&history(o, 1)).unwrap();
        }
        for i in 1..=500u32 {
            s.delete::<t::Stocks>(keys::stock(1, i * 7)).unwrap();
        }
        s.abort();
        assert!(contents(&mut s) == before, "step {n}: abort left a trace");
        let mut n_orders = 0;
        s.begin(2);
        s.scan_secondary::<t::Orders>(0, u128::MAX, ScanDir::Forward, |_| {
            n_orders += 1;
            true
        })
        .unwrap();
        s.commit().unwrap();
        assert_eq!(n_orders, 400, "step {n}: secondary index restored");
        assert_eq!(s.counters().aborted, 1);
    }
}

fn payment_like<S: Storage>(s: &mut S, c: u32) {
    s.begin(c as u64);
    s.update::<t::Warehouses, _>(keys::warehouse(1), |w| w.w_ytd += 1).unwrap();
    s.update::<t::Customers, _>(keys::customer(1, 1 + (c % 3) as u8, c), |r| r.c_balance -= 1).unwrap();
    s.insert::<t::Histories>(&history(c, 1)).unwrap();
    s.commit().unwrap();
}

fn run_counters(switches: Switches, txns: u32) -> Counters {
    let dir = TempDir::new("conventional", "counters");
    let db = open(&dir, Config { log_prealloc_bytes: 1 << 20, ..Config::new(switches, 1) });
    let mut s = db.session().unwrap();
    load(&mut s);
    let base = s.counters();
    let base_log = db.counters();
    for c in 1..=txns {
        payment_like(&mut s, c);
    }
    let mut c = s.counters().since(&base);
    let log = db.counters().since(&base_log);
    c.log_bytes_written = log.log_bytes_written;
    c.fsyncs = log.fsyncs;
    c
}

/// Each switch removes exactly its component (Section 4.2's removals), observed through the
/// components' own counters.
#[test]
fn each_switch_removes_its_component() {
    let full = run_counters(Switches::FULL, 10);
    assert!(full.lock_requests_granted >= 10 * 5, "{full:?}");
    assert!(full.latches_acquired > 0 && full.pages_fixed > 0, "{full:?}");
    assert_eq!(full.log_records, 10 * 4, "three changes and a commit record per transaction: {full:?}");
    assert!(full.log_bytes_written > 0 && full.fsyncs >= 10, "{full:?}");
    assert_eq!(full.committed, 10);

    // 2: no log flush: records generated, nothing written or synced.
    let no_flush = run_counters(Switches::for_step(step(2)), 10);
    assert_eq!((no_flush.log_bytes_written, no_flush.fsyncs), (0, 0), "{no_flush:?}");
    assert_eq!(no_flush.log_records, full.log_records);
    // 3: no log records: the WAL generates nothing and writes no bytes.
    let no_records = run_counters(Switches::for_step(step(3)), 10);
    assert_eq!((no_records.log_records, no_records.log_bytes_written), (0, 0), "{no_records:?}");
    // 5: locking off: the lock manager grants nothing.
    let no_locks = run_counters(Switches::for_step(step(5)), 10);
    assert_eq!(no_locks.lock_requests_granted, 0, "{no_locks:?}");
    assert!(no_locks.latches_acquired > 0);
    // 6: latching off: no latch is taken.
    let no_latches = run_counters(Switches::for_step(step(6)), 10);
    assert_eq!(no_latches.latches_acquired, 0, "{no_latches:?}");
    assert!(no_latches.pages_fixed > 0);
    // 10: buffer pool off: no page is fixed.
    let no_pool = run_counters(Switches::for_step(step(10)), 10);
    assert_eq!(no_pool.pages_fixed, 0, "{no_pool:?}");
    assert_eq!(no_pool.committed, 10);

    // 8 and 9 in isolation (with latches on, so that their latches show): the catalog costs
    // one latch per access, the transaction table two per transaction.
    let cached = run_counters(Switches { catalog_lookup: false, ..Switches::FULL }, 10);
    assert_eq!(full.latches_acquired - cached.latches_acquired, 10 * 3, "one catalog latch per access");
    let trimmed = run_counters(Switches { full_txn: false, ..Switches::FULL }, 10);
    assert_eq!(full.latches_acquired - trimmed.latches_acquired, 10 * 2, "transaction table at begin and end");
}

/// 7: 32 KiB pages hold four times the rows: a full scan fixes far fewer pages (the paper:
/// larger pages alone cut NewOrder's instructions by ≈14%).
#[test]
fn large_pages_mean_fewer_page_fixes() {
    let fixes = |switches: Switches| {
        let dir = TempDir::new("conventional", "pages");
        let db = open(&dir, Config::new(switches, 1));
        let mut s = db.session().unwrap();
        load(&mut s);
        let before = s.counters().pages_fixed;
        assert_eq!(s.count::<t::Customers>(), 300);
        s.counters().pages_fixed - before
    };
    let small = fixes(Switches::for_step(step(6)));
    let large = fixes(Switches::for_step(step(7)));
    assert!(large * 3 < small, "8 KiB: {small} fixes, 32 KiB: {large}");
}

#[test]
fn removing_concurrency_control_is_refused_with_several_workers() {
    let cases = [
        (Switches::for_step(step(5)), "locking"),
        (Switches { latching: false, ..Switches::FULL }, "latching"),
        (Switches::for_step(step(10)), "locking"),
    ];
    for (switches, switch) in cases {
        let dir = TempDir::new("conventional", "refuse");
        let err = ConventionalDb::open(&dir.0, Config::new(switches, 2)).unwrap_err();
        assert!(
            matches!(err, ConventionalError::UnsafeWithWorkers { switch: s, workers: 2 } if s == switch),
            "{switches:?}: {err}"
        );
    }
    let dir = TempDir::new("conventional", "one");
    let db = open(&dir, config(6, 1));
    let first = db.session().unwrap();
    assert!(matches!(db.session(), Err(ConventionalError::TooManySessions { workers: 1 })));
    drop(first);
    assert!(db.session().is_ok());
    assert!(matches!(db.checkpoint(), Err(ConventionalError::CheckpointUnavailable { .. })));
}

fn stock_quantity(s: &mut Session, i: u32) -> Option<i32> {
    s.get::<t::Stocks, _>(keys::stock(1, i * 7), |r| r.s_quantity).unwrap()
}

fn crash_config() -> Config {
    config(0, 2)
}

/// ARIES restart (Mohan et al., Section 6): after a crash, every committed transaction is
/// there and no uncommitted one, including an uncommitted transaction whose records reached
/// the log through another transaction's group commit (a loser undone with CLRs).
#[test]
fn recovery_keeps_committed_transactions_and_drops_uncommitted_ones() {
    let dir = TempDir::new("conventional", "crash");
    let device = CrashingLogDevice::new();
    let db = ConventionalDb::open_with_device(&dir.0, crash_config(), Some(Box::new(device.clone()))).unwrap();
    let mut a = db.session().unwrap();
    load(&mut a);
    db.checkpoint().unwrap();
    let mut lean = LeanDb::new();
    load(&mut lean);

    // Committed work of every kind (and an aborted transaction), mirrored on the lean kernel.
    committed_work(&mut a);
    committed_work(&mut lean);
    // A loser: its records are flushed by B's group commit, but it never commits.
    let mut b = db.session().unwrap();
    a.begin(10);
    a.update::<t::Stocks, _>(keys::stock(1, 7), |r| r.s_quantity = -1).unwrap();
    a.insert::<t::Orders>(&order(1, 9, 1, 1)).unwrap();
    a.delete::<t::Items>(keys::item(14)).unwrap();
    a.insert::<t::Histories>(&history(999, 999)).unwrap();
    b.begin(11);
    b.update::<t::Stocks, _>(keys::stock(1, 21), |r| r.s_quantity = 1234).unwrap();
    b.commit().unwrap();
    lean.begin(11);
    lean.update::<t::Stocks, _>(keys::stock(1, 21), |r| r.s_quantity = 1234).unwrap();
    lean.commit().unwrap();

    device.crash();
    drop((a, b));
    drop(db);
    let db = ConventionalDb::open_with_device(&dir.0, crash_config(), Some(Box::new(device.restart()))).unwrap();
    let report = db.recovery_report().clone();
    assert_eq!(report.losers, 1, "{report:?}");
    // Four changes, each row's record logged apart from its index entries: the update (1),
    // the ORDER insert (record, primary- and secondary-index entries: 3), the ITEM delete
    // (primary-index entry and record: 2), the HISTORY insert (record only: 1).
    assert_eq!(report.undone, 7, "{report:?}");
    assert!(report.winners >= 2 && !report.truncated_tail, "{report:?}");
    let mut s = db.session().unwrap();
    assert!(contents(&mut s) == contents(&mut lean), "recovered state differs from the committed state");
    assert_eq!(stock_quantity(&mut s, 3), Some(1234));

    // Recovery is repeatable, and the recovered engine goes on working.
    payment_like(&mut s, 4);
    drop(s);
    drop(db);
    let db = ConventionalDb::open_with_device(&dir.0, crash_config(), Some(Box::new(device.restart()))).unwrap();
    assert_eq!(db.recovery_report().losers, 0);
    let mut s = db.session().unwrap();
    let balance = s.get::<t::Customers, _>(keys::customer(1, 2, 4), |c| c.c_balance).unwrap();
    assert_eq!(balance, Some(-1001));
}

/// Committed transactions of every kind, and an aborted one whose CLRs redo must repeat.
fn committed_work<S: Storage>(db: &mut S) {
    db.begin(1);
    db.update::<t::Stocks, _>(keys::stock(1, 14), |r| r.s_quantity = 77).unwrap();
    db.insert::<t::NewOrders>(&NewOrder { no_w_id: 1, no_d_id: 5, no_o_id: 1, _pad: 0 }).unwrap();
    db.delete::<t::Customers>(keys::customer(1, 1, 3)).unwrap();
    db.insert::<t::Histories>(&history(3, 3)).unwrap();
    db.commit().unwrap();
    db.begin(2);
    for o in 1..200u32 {
        db.insert::<t::Orders>(&order(1, 7, o, 2)).unwrap();
    }
    db.commit().unwrap();
    db.begin(3);
    db.update::<t::Stocks, _>(keys::stock(1, 14), |r| r.s_quantity = 0).unwrap();
    db.insert::<t::Histories>(&history(4, 4)).unwrap();
    db.delete::<t::Orders>(keys::order(1, 7, 5)).unwrap();
    db.abort();
}

/// A commit whose flush crashes the device is not acknowledged; a torn commit record fails
/// its checksum and the tail is truncated, never replayed.
#[test]
fn torn_log_tail_is_truncated_not_replayed() {
    for torn_bytes in [0usize, 100, 1000, 1420] {
        let dir = TempDir::new("conventional", "torn");
        let device = CrashingLogDevice::new();
        let db = ConventionalDb::open_with_device(&dir.0, crash_config(), Some(Box::new(device.clone()))).unwrap();
        let mut s = db.session().unwrap();
        load(&mut s);
        db.checkpoint().unwrap();
        s.begin(1);
        s.update::<t::Stocks, _>(keys::stock(1, 7), |r| r.s_quantity = 11).unwrap();
        s.commit().unwrap();

        device.crash_after_syncs(0);
        s.begin(2);
        s.update::<t::Stocks, _>(keys::stock(1, 14), |r| r.s_quantity = 22).unwrap();
        s.update::<t::Stocks, _>(keys::stock(1, 21), |r| r.s_quantity = 33).unwrap();
        assert!(matches!(s.commit(), Err(StorageError::Io(_))));
        // The update records are 2 × (56 + 2 × 312 + 8) = 1376 bytes; the commit record
        // follows. Some prefix of the unsynced write reaches the medium.
        device.tear(torn_bytes);
        drop(s);
        drop(db);

        let db = ConventionalDb::open_with_device(&dir.0, crash_config(), Some(Box::new(device.restart()))).unwrap();
        let report = db.recovery_report().clone();
        assert_eq!(report.truncated_tail, torn_bytes > 0, "{torn_bytes}: {report:?}");
        let mut s = db.session().unwrap();
        assert_eq!(stock_quantity(&mut s, 1), Some(11), "the acknowledged commit survives");
        assert_eq!(stock_quantity(&mut s, 2), Some(50), "the unacknowledged one does not");
        assert_eq!(stock_quantity(&mut s, 3), Some(50));
        assert_eq!(report.losers, usize::from(torn_bytes >= 700), "{torn_bytes}: {report:?}");
    }
}

/// Issue #14, item 7: a corrupt record in the middle of the log, followed by valid records,
/// is corruption, not a torn tail: restart recovery refuses it, says where, and leaves the
/// medium exactly as it found it (before the fix it truncated the log there, dropping the
/// later committed transactions, and reported success).
#[test]
fn corrupt_log_record_mid_log_is_refused_not_truncated() {
    let dir = TempDir::new("conventional", "corrupt");
    let device = CrashingLogDevice::new();
    let db = ConventionalDb::open_with_device(&dir.0, crash_config(), Some(Box::new(device.clone()))).unwrap();
    let mut s = db.session().unwrap();
    load(&mut s);
    db.checkpoint().unwrap();
    let mut damaged = 0;
    for (q, i) in [(11, 1), (22, 2), (33, 3)] {
        let before = device.durable_bytes();
        s.begin(i);
        s.update::<t::Stocks, _>(keys::stock(1, i as u32 * 7), |r| r.s_quantity = q).unwrap();
        s.commit().unwrap();
        if i == 2 {
            // Transaction 2's update record starts where the medium changed.
            let after = device.durable_bytes();
            damaged = before.iter().zip(&after).position(|(a, b)| a != b).unwrap() as u64;
        }
    }
    device.corrupt(damaged + 200);
    device.crash();
    drop(s);
    drop(db);
    let medium = device.durable_bytes();
    let err = ConventionalDb::open_with_device(&dir.0, crash_config(), Some(Box::new(device.restart()))).unwrap_err();
    match err {
        // After the damaged update: transaction 2's commit, transaction 3's update and commit.
        ConventionalError::CorruptLog { offset, records_after: 3, commits_after: 2, .. } if offset == damaged => {}
        other => panic!("{other}"),
    }
    assert!(device.durable_bytes() == medium, "a refused log is left as found");
}

/// Step 0's configuration on real files, with `txns` committed transactions after the
/// load's checkpoint: transaction `i` sets stock `7i` to `1000 + i`. Returns the log's
/// records as (offset, length) pairs, walking the format of `docs/conventional.md` (length
/// at bytes 0..4, LSN = base + offset at bytes 8..16).
fn file_db_with_commits(dir: &TempDir, txns: u32) -> Vec<(usize, usize)> {
    let db = open(dir, config(0, 1));
    let mut s = db.session().unwrap();
    load(&mut s);
    db.checkpoint().unwrap();
    for i in 1..=txns {
        s.begin(i as u64);
        s.update::<t::Stocks, _>(keys::stock(1, i * 7), |r| r.s_quantity = 1000 + i as i32).unwrap();
        s.commit().unwrap();
    }
    drop(s);
    drop(db);
    log_records(&std::fs::read(dir.0.join(LOG_FILE)).unwrap())
}

fn log_records(log: &[u8]) -> Vec<(usize, usize)> {
    let word = |at: usize, n: usize| log[at..at + n].iter().rev().fold(0u64, |v, &b| v << 8 | b as u64);
    let base = word(8, 8);
    let mut out = Vec::new();
    let mut at = 0;
    while at + 64 <= log.len() && word(at, 4) >= 64 && word(at + 8, 8) == base + at as u64 {
        let len = word(at, 4) as usize;
        out.push((at, len));
        at += len;
    }
    out
}

/// The database directory's files, byte for byte.
fn files(dir: &TempDir) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    v.sort();
    v
}

fn flip(path: &std::path::Path, offset: usize) {
    let mut b = std::fs::read(path).unwrap();
    b[offset] ^= 0x01;
    std::fs::write(path, b).unwrap();
}

/// Issue #14, item 7, on real files: one flipped byte in the middle of `wal.log` makes
/// `open` refuse with [`ConventionalError::CorruptLog`] naming the file, the damaged
/// record's offset and what follows it — and `wal.log` and `checkpoint.db` are byte-identical
/// afterwards (no truncation, no zeroing, no checkpoint, no new log generation). Before the
/// fix recovery truncated the log at the flip and checkpointed, destroying every later
/// committed transaction.
#[test]
fn flipped_byte_mid_log_is_refused_and_changes_nothing() {
    const TXNS: u32 = 40;
    let dir = TempDir::new("conventional", "flip");
    let records = file_db_with_commits(&dir, TXNS);
    // The checkpoint record, then an update and a commit record per transaction.
    assert_eq!(records.len(), 1 + 2 * TXNS as usize);
    let victim = records.len() / 2;
    let (offset, len) = records[victim];
    flip(&dir.0.join(LOG_FILE), offset + len / 2);
    let found = files(&dir);
    let err = ConventionalDb::open(&dir.0, config(0, 1)).unwrap_err();
    let after = &records[victim + 1..];
    let bytes_after: usize = after.iter().map(|r| r.1).sum();
    match &err {
        ConventionalError::CorruptLog {
            path,
            offset: at,
            next_valid_offset,
            records_after,
            commits_after,
            bytes_after: bytes,
            ..
        } => {
            assert_eq!(path, &dir.0.join(LOG_FILE));
            assert_eq!(*at, offset as u64);
            assert_eq!(*next_valid_offset, after[0].0 as u64);
            assert_eq!(*records_after, after.len() as u64);
            assert_eq!(*commits_after, after.len() as u64 / 2 + (after.len() as u64 % 2));
            assert_eq!(*bytes, bytes_after as u64);
        }
        other => panic!("expected CorruptLog, got: {other}"),
    }
    let text = err.to_string();
    assert!(text.contains(LOG_FILE) && text.contains(&offset.to_string()), "{text}");
    assert!(files(&dir) == found, "wal.log and checkpoint.db are byte-identical after the refusal");
    // Refusing is repeatable: the second attempt finds the same damage.
    assert!(matches!(ConventionalDb::open(&dir.0, config(0, 1)), Err(ConventionalError::CorruptLog { .. })));
}

/// Issue #14, item 7: a torn tail — the last record damaged, or the file ending inside it,
/// or garbage after the last record, with nothing valid of the log's generation after it —
/// is truncated and reported (where the log now ends, how many bytes were dropped), and
/// every committed transaction before it is present. (The old code truncated these too,
/// but reported only a yes/no.)
#[test]
fn torn_tail_at_the_end_is_truncated_and_reported() {
    const TXNS: u32 = 12;
    #[derive(Debug, Clone, Copy)]
    enum Tear {
        /// A flipped byte in the last record (transaction TXNS's commit).
        Flip,
        /// The file cut in the middle of the last record.
        Cut,
        /// Garbage written after the last record.
        Garbage,
    }
    for tear in [Tear::Flip, Tear::Cut, Tear::Garbage] {
        let dir = TempDir::new("conventional", "tail");
        let records = file_db_with_commits(&dir, TXNS);
        let path = dir.0.join(LOG_FILE);
        let (last, len) = *records.last().unwrap();
        let (offset, bytes, kept) = match tear {
            Tear::Flip => {
                flip(&path, last + len - 3);
                (last, len, TXNS - 1)
            }
            Tear::Cut => {
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                f.set_len((last + len / 2) as u64).unwrap();
                (last, len / 2, TXNS - 1)
            }
            Tear::Garbage => {
                let mut b = std::fs::read(&path).unwrap();
                b[last + len..last + len + 100].fill(0xA5);
                std::fs::write(&path, b).unwrap();
                (last + len, 100, TXNS)
            }
        };
        // The damaged bytes: from the tear to the last non-zero byte (zeros follow: the
        // preallocated rest of the file).
        let b = std::fs::read(&path).unwrap();
        assert!(b[offset + bytes..].iter().all(|&x| x == 0), "{tear:?}");
        let bytes = b[offset..offset + bytes].iter().rposition(|&x| x != 0).unwrap() + 1;
        let db = ConventionalDb::open(&dir.0, config(0, 1)).unwrap();
        let r = db.recovery_report().clone();
        let torn = r.torn_tail.unwrap_or_else(|| panic!("{tear:?}: no torn tail reported: {r:?}"));
        assert!(r.truncated_tail, "{tear:?}");
        assert_eq!((torn.offset, torn.bytes), (offset as u64, bytes as u64), "{tear:?}: {r:?}");
        assert_eq!(
            Some(torn.lsn),
            r.snapshot_lsn.map(|l| l + offset as u64),
            "{tear:?}: the log's generation starts at the snapshot"
        );
        assert_eq!(r.winners, kept as usize, "{tear:?}: {r:?}");
        let mut s = db.session().unwrap();
        for i in 1..=TXNS {
            let want = if i <= kept { 1000 + i as i32 } else { 50 };
            assert_eq!(stock_quantity(&mut s, i), Some(want), "{tear:?}: transaction {i}");
        }
        // Recovery ended with a checkpoint: reopening finds a clean log.
        drop(s);
        drop(db);
        let db = ConventionalDb::open(&dir.0, config(0, 1)).unwrap();
        assert_eq!(db.recovery_report().torn_tail, None, "{tear:?}");
    }
}

/// Issue #14, item 7: a deleted `checkpoint.db`, when the log starts from a checkpoint, is
/// reported as a missing checkpoint and changes nothing — both when later checkpoints moved
/// the log's generation past the first LSN (the old code said "records are missing") and
/// when the log is the first generation (the old code recovered an empty database from it
/// and rewrote the log). A deleted `wal.log` beside a snapshot is refused likewise (the old
/// code created an empty log and silently dropped every transaction since the checkpoint).
#[test]
fn missing_checkpoint_or_log_is_reported_and_changes_nothing() {
    // The load's checkpoint moved the generation past the first LSN.
    let dir = TempDir::new("conventional", "nockpt");
    file_db_with_commits(&dir, 5);
    std::fs::remove_file(dir.0.join(SNAPSHOT_FILE)).unwrap();
    let found = files(&dir);
    match ConventionalDb::open(&dir.0, config(0, 1)) {
        Err(ConventionalError::MissingCheckpoint { path, .. }) => assert_eq!(path, dir.0.join(SNAPSHOT_FILE)),
        other => panic!("expected MissingCheckpoint, got {:?}", other.map(|_| ())),
    }
    assert!(files(&dir) == found, "nothing changed");

    // Only the checkpoint taken at the first open: the log's first record is a checkpoint.
    let dir = TempDir::new("conventional", "nockpt-first");
    let db = open(&dir, config(0, 1));
    let mut s = db.session().unwrap();
    s.begin(1);
    s.insert::<t::Stocks>(&stock(1, 7, 77)).unwrap();
    s.commit().unwrap();
    drop(s);
    drop(db);
    std::fs::remove_file(dir.0.join(SNAPSHOT_FILE)).unwrap();
    let found = files(&dir);
    let err = ConventionalDb::open(&dir.0, config(0, 1)).map(|_| ()).unwrap_err();
    assert!(matches!(err, ConventionalError::MissingCheckpoint { .. }), "{err}");
    assert!(err.to_string().contains("checkpoint.db is missing"), "{err}");
    assert!(files(&dir) == found, "nothing changed");

    // The log deleted, the snapshot kept.
    let dir = TempDir::new("conventional", "nolog");
    file_db_with_commits(&dir, 5);
    std::fs::remove_file(dir.0.join(LOG_FILE)).unwrap();
    let found = files(&dir);
    let err = ConventionalDb::open(&dir.0, config(0, 1)).map(|_| ()).unwrap_err();
    assert!(matches!(err, ConventionalError::MissingLog { .. }), "{err}");
    assert!(files(&dir) == found, "no log file created");
}

/// A damaged checkpoint snapshot is refused before the log is read, and nothing changes.
#[test]
fn damaged_checkpoint_is_refused_and_changes_nothing() {
    let dir = TempDir::new("conventional", "badckpt");
    file_db_with_commits(&dir, 5);
    let snapshot = dir.0.join(SNAPSHOT_FILE);
    let len = std::fs::metadata(&snapshot).unwrap().len() as usize;
    flip(&snapshot, len / 2);
    let found = files(&dir);
    let err = ConventionalDb::open(&dir.0, config(0, 1)).map(|_| ()).unwrap_err();
    assert!(matches!(err, ConventionalError::BadSnapshot { what: "checksum mismatch", .. }), "{err}");
    assert!(files(&dir) == found, "nothing changed");
}

/// A clean shutdown and reopen on a real log file keeps every committed transaction.
#[test]
fn reopening_a_file_log_recovers_committed_state() {
    let dir = TempDir::new("conventional", "file");
    let db = ConventionalDb::open(&dir.0, config(0, 1)).unwrap();
    let mut s = db.session().unwrap();
    load(&mut s);
    db.checkpoint().unwrap();
    let mut lean = LeanDb::new();
    load(&mut lean);
    exercise(&mut s);
    exercise(&mut lean);
    // exercise() ends with bulk operations, which are not logged: a checkpoint keeps them.
    db.checkpoint().unwrap();
    payment_like(&mut s, 2);
    payment_like(&mut lean, 2);
    drop(s);
    drop(db);
    let db = ConventionalDb::open(&dir.0, config(0, 1)).unwrap();
    assert_eq!(db.recovery_report().losers, 0);
    assert!(db.recovery_report().winners >= 1);
    let mut s = db.session().unwrap();
    assert!(contents(&mut s) == contents(&mut lean));
}

/// Strict 2PL with wait-die under several workers (Gray & Reuter 7.11): transfers between
/// hot rows keep the total, every committed reader sees the exact total (serializability),
/// and concurrent inserts split shared B+tree leaves safely under latch coupling.
#[test]
fn concurrent_transfers_keep_the_sum_under_two_phase_locking() {
    const WORKERS: usize = 4;
    const ACCOUNTS: u32 = 12;
    const TXNS_PER_WORKER: u32 = 150;
    for n in [0u8, 4] {
        let dir = TempDir::new("conventional", "transfers");
        let db = open(&dir, config(n, WORKERS));
        {
            let mut s = db.session().unwrap();
            for i in 1..=ACCOUNTS {
                s.insert::<t::Stocks>(&stock(1, i, 1000)).unwrap();
            }
        }
        if db.checkpoint_unavailable().is_none() {
            db.checkpoint().unwrap();
        }
        let total = 1000 * ACCOUNTS as i64;
        let outcomes: Vec<(u32, u64)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..WORKERS as u32)
                .map(|w| {
                    let db = Arc::clone(&db);
                    scope.spawn(move || {
                        let mut s = db.session().unwrap();
                        let mut rng = 0x9E37_79B9u64 ^ ((w as u64 + 1) * 0x1234_5678_9ABC);
                        let mut next = |m: u32| {
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            (rng % m as u64) as u32
                        };
                        let (mut done, mut rolled_back) = (0, 0);
                        for k in 0..TXNS_PER_WORKER {
                            let (a, b, x) = (1 + next(ACCOUNTS), 1 + next(ACCOUNTS), next(50) as i32);
                            let audit = k % 10 == 0;
                            let rollback = k % 13 == 0;
                            loop {
                                s.begin(k as u64);
                                let r = (|| -> Result<(), StorageError> {
                                    if audit {
                                        let mut sum = 0i64;
                                        for i in 1..=ACCOUNTS {
                                            sum += s.get::<t::Stocks, _>(keys::stock(1, i), |r| r.s_quantity)?.unwrap()
                                                as i64;
                                        }
                                        assert_eq!(sum, total, "a committed reader saw a non-serializable state");
                                        return Ok(());
                                    }
                                    s.update::<t::Stocks, _>(keys::stock(1, a), |r| r.s_quantity -= x)?;
                                    s.update::<t::Stocks, _>(keys::stock(1, b), |r| r.s_quantity += x)?;
                                    s.insert::<t::Histories>(&history(w * 1000 + k, x as i64))?;
                                    s.insert::<t::OrderLines>(&order_line(1, 1 + w as u8, k, 1))?;
                                    Ok(())
                                })();
                                match r {
                                    Ok(()) if rollback && !audit => {
                                        s.abort();
                                        rolled_back += 1;
                                        break;
                                    }
                                    Ok(()) => {
                                        s.commit().unwrap();
                                        if !audit {
                                            done += 1;
                                        }
                                        break;
                                    }
                                    Err(StorageError::Conflict(_)) => s.abort(),
                                    Err(e) => panic!("{e}"),
                                }
                            }
                        }
                        (done, rolled_back)
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let transfers: u32 = outcomes.iter().map(|o| o.0).sum();
        let rolled_back: u64 = outcomes.iter().map(|o| o.1).sum();
        let mut s = db.session().unwrap();
        let mut sum = 0i64;
        s.for_each::<t::Stocks>(|r| sum += r.s_quantity as i64);
        assert_eq!(sum, total, "step {n}: transfers lost or invented stock");
        assert_eq!(s.count::<t::Histories>(), transfers as usize, "step {n}");
        assert_eq!(s.count::<t::OrderLines>(), transfers as usize, "step {n}");
        let c = db.counters();
        eprintln!("step {n}: {transfers} transfers, {rolled_back} rolled back, {c:?}");
        assert!(c.lock_requests_granted > 0 && c.committed > 0, "step {n}: {c:?}");
        assert_eq!(c.aborted, c.lock_conflicts + rolled_back, "step {n}: every wait-die death aborts once: {c:?}");
    }
}

/// The TPC-C procedures (written once over `Storage`) run unchanged on every step and give
/// the lean kernel's outputs and state, including a NewOrder that rolls back (clause 2.4.2.3).
#[test]
fn tpcc_procedures_run_unchanged_on_every_step() {
    let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
    for (n, l) in lines.iter_mut().enumerate().take(6) {
        *l = OrderLineInput { i_id: 7 * (n as u32 + 1), supply_w_id: 1, quantity: 3 };
    }
    let new_order = NewOrderInput { w_id: 1, d_id: 1, c_id: 3, ol_cnt: 6, lines, entry_d: 50 };
    let mut unused = new_order;
    unused.lines[5].i_id = 999_999;
    let inputs = [
        TxnInput::NewOrder(new_order),
        TxnInput::Payment(PaymentInput {
            w_id: 1,
            d_id: 2,
            c_w_id: 1,
            c_d_id: 2,
            customer: CustomerSelector::ByLastName(fixed(b"BAR")),
            h_amount: 1234,
            date: 51,
        }),
        TxnInput::Payment(PaymentInput {
            w_id: 1,
            d_id: 3,
            c_w_id: 1,
            c_d_id: 1,
            customer: CustomerSelector::ById(6),
            h_amount: 99,
            date: 52,
        }),
        TxnInput::NewOrder(unused),
        TxnInput::OrderStatus(OrderStatusInput { w_id: 1, d_id: 1, customer: CustomerSelector::ById(3) }),
        TxnInput::Delivery(DeliveryInput { w_id: 1, o_carrier_id: 4, date: 53 }),
        TxnInput::StockLevel(StockLevelInput { w_id: 1, d_id: 1, threshold: 60 }),
    ];
    let mut lean = LeanDb::new();
    load(&mut lean);
    let want: Vec<String> =
        inputs.iter().enumerate().map(|(i, t)| format!("{:?}", execute(&mut lean, i as u64, t))).collect();
    assert!(want[3].contains("Rollback"), "{}", want[3]);
    let want_rows = contents(&mut lean);
    for n in 0..=10 {
        let dir = TempDir::new("conventional", "tpcc");
        let db = open(&dir, config(n, 1));
        let mut s = db.session().unwrap();
        load(&mut s);
        let got: Vec<String> =
            inputs.iter().enumerate().map(|(i, t)| format!("{:?}", execute(&mut s, i as u64, t))).collect();
        assert_eq!(got, want, "step {n}");
        assert!(contents(&mut s) == want_rows, "step {n}");
    }
}

/// Structure modifications logged as ARIES/IM logs them (issue #18): a winner's inserts split
/// ORDER_LINE's primary-index leaves (the root among them) and allocate heap pages, and so do
/// a loser's, whose records reach the log through the winner's group commit. After a crash,
/// redo installs the logged page images before the entries that needed them, undo takes the
/// loser's entries out by key from wherever the splits put them and frees its records, the
/// splits themselves stay (they are redo-only), and the state is exactly the committed one;
/// the recovered database then goes on inserting into the free slots and split pages.
#[test]
fn splits_and_page_allocations_are_redone_and_a_losers_entries_undone_by_key() {
    const LINES: u32 = 1_500;
    let dir = TempDir::new("conventional", "splits");
    let device = CrashingLogDevice::new();
    let db = ConventionalDb::open_with_device(&dir.0, crash_config(), Some(Box::new(device.clone()))).unwrap();
    let mut lean = LeanDb::new();
    let (mut a, mut b) = (db.session().unwrap(), db.session().unwrap());
    a.insert::<t::Stocks>(&stock(1, 1, 10)).unwrap();
    lean.insert::<t::Stocks>(&stock(1, 1, 10)).unwrap();
    db.checkpoint().unwrap();

    let lines = |s: &mut dyn FnMut(&OrderLine), orders: std::ops::Range<u32>| {
        for o in orders {
            s(&order_line(1, 1, o, 1));
        }
    };
    // The winner: lines of orders 1..=LINES, in two transactions.
    for half in [1..LINES / 2 + 1, LINES / 2 + 1..LINES + 1] {
        a.begin(1);
        lines(&mut |l| a.insert::<t::OrderLines>(l).unwrap(), half.clone());
        a.commit().unwrap();
        lean.begin(1);
        lines(&mut |l| lean.insert::<t::OrderLines>(l).unwrap(), half);
        lean.commit().unwrap();
    }
    // The loser interleaves its keys with the winner's (district 2), then a third
    // transaction's commit flushes the loser's records too.
    b.begin(2);
    lines(&mut |l| b.insert::<t::OrderLines>(&OrderLine { ol_d_id: 2, ..*l }).unwrap(), 1..LINES + 1);
    assert!(b.delete::<t::OrderLines>(keys::order_line(1, 1, 7, 1)).unwrap().is_some());
    a.begin(3);
    a.update::<t::Stocks, _>(keys::stock(1, 1), |r| r.s_quantity = 11).unwrap();
    a.commit().unwrap();
    lean.begin(3);
    lean.update::<t::Stocks, _>(keys::stock(1, 1), |r| r.s_quantity = 11).unwrap();
    lean.commit().unwrap();

    device.crash();
    drop((a, b));
    drop(db);
    let db = ConventionalDb::open_with_device(&dir.0, crash_config(), Some(Box::new(device.restart()))).unwrap();
    let report = db.recovery_report().clone();
    assert_eq!((report.losers, report.winners), (1, 3), "{report:?}");
    // Leaves of about 450 entries: both runs of 1,500 keys split several, and rows of about
    // 60 bytes fill more than ten 8 KiB heap pages each.
    assert!(report.page_images >= 10, "{report:?}");
    // The loser: 1,500 records and entries undone, and its delete's entry and record.
    assert_eq!(report.undone, 2 * LINES as usize + 2, "{report:?}");
    let mut s = db.session().unwrap();
    assert!(contents(&mut s) == contents(&mut lean), "recovered state differs from the committed state");

    // The recovered engine inserts into the freed slots and the split leaves.
    s.begin(4);
    lines(&mut |l| s.insert::<t::OrderLines>(&OrderLine { ol_d_id: 3, ..*l }).unwrap(), 1..LINES + 1);
    s.commit().unwrap();
    let mut count = 0;
    s.scan::<t::OrderLines>(
        keys::order_line(1, 3, 0, 0),
        keys::order_line(1, 3, u32::MAX, u8::MAX),
        ScanDir::Forward,
        |_| {
            count += 1;
            true
        },
    )
    .unwrap();
    assert_eq!(count, LINES);
}

/// Record ids are reused only after the delete that freed them commits (issue #18; Shore's
/// record-id locks): while a transaction holds a deleted record's slot, another's inserts
/// pass it by, so the deleter's rollback puts the record back at the same record id (were
/// the slot taken, the rollback would find it occupied and panic); once a deleter commits,
/// the slot is free for the next insert. Both end in the lean kernel's state.
#[test]
fn a_freed_slot_waits_for_its_deleters_commit() {
    let dir = TempDir::new("conventional", "slots");
    let db = open(&dir, config(0, 2));
    let mut lean = LeanDb::new();
    let new_order = |o: u32| NewOrder { no_w_id: 1, no_d_id: 1, no_o_id: o, _pad: 0 };
    let (mut a, mut b) = (db.session().unwrap(), db.session().unwrap());
    for o in 1..=20 {
        a.insert::<t::NewOrders>(&new_order(o)).unwrap();
        lean.insert::<t::NewOrders>(&new_order(o)).unwrap();
    }
    // A committed delete puts the page into the free-space map.
    a.begin(1);
    assert!(a.delete::<t::NewOrders>(keys::new_order(1, 1, 3)).unwrap().is_some());
    a.commit().unwrap();
    lean.delete::<t::NewOrders>(keys::new_order(1, 1, 3)).unwrap();
    a.begin(2);
    assert!(a.delete::<t::NewOrders>(keys::new_order(1, 1, 5)).unwrap().is_some());
    b.begin(3);
    // The first takes order 3's slot; the second finds order 5's slot free on the page, but
    // locked by A.
    b.insert::<t::NewOrders>(&new_order(100)).unwrap();
    b.insert::<t::NewOrders>(&new_order(101)).unwrap();
    b.commit().unwrap();
    a.abort(); // re-places order 5 at its record id, which B's insert passed by
    for o in [100, 101] {
        lean.insert::<t::NewOrders>(&new_order(o)).unwrap();
    }
    assert!(contents(&mut a) == contents(&mut lean));

    a.begin(4);
    assert!(a.delete::<t::NewOrders>(keys::new_order(1, 1, 6)).unwrap().is_some());
    a.commit().unwrap();
    b.begin(5);
    b.insert::<t::NewOrders>(&new_order(102)).unwrap();
    b.commit().unwrap();
    lean.delete::<t::NewOrders>(keys::new_order(1, 1, 6)).unwrap();
    lean.insert::<t::NewOrders>(&new_order(102)).unwrap();
    assert!(contents(&mut b) == contents(&mut lean));
}
