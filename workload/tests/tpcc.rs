//! TPC-C semantics tests: the five procedures of `engine::procedures` run against the
//! population of `engine::loader`, each test citing the clause of TPC-C 5.11 it checks, and
//! the consistency conditions of clause 3.3.2 (`engine::check`) kept by random transaction
//! sequences from `workload::gen`.
//!
//! Every test uses one warehouse. The warehouse is loaded once per test binary; each test that
//! modifies it works on its own copy ([`fresh`]), which is cheaper than loading again.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

use engine::check::check;
use engine::digest::digest;
use engine::loader::{load_items, load_warehouse, LOAD_TIMESTAMP};
use engine::procedures::{
    execute, CustomerSelector, DeliveryInput, NewOrderInput, OrderLineInput, OrderStatusInput, PaymentInput,
    StockLevelInput, TxnInput, TxnOutput, DISTRICTS_PER_WAREHOUSE, ORDER_LINES_MAX,
};
use engine::schema::{keys, t, text, Customer, Order, OrderLine, Table};
use engine::{LeanDb, ScanDir, Storage, TxnError};
use proptest::prelude::*;
use workload::gen::{GenConfig, Generator, Mix, Profile, UNUSED_ITEM_ID};

/// The load seed of every test database.
const SEED: u64 = 0x5167_2008;
/// The only warehouse.
const W: u16 = 1;
/// The timestamp of the first transaction a test runs (after the load's date).
const TS: i64 = LOAD_TIMESTAMP + 3_600;

fn load() -> LeanDb {
    let mut db = LeanDb::new();
    load_items(&mut db, SEED).unwrap();
    load_warehouse(&mut db, W, SEED).unwrap();
    db
}

/// The loaded warehouse, shared read-only by all tests of this binary.
fn template() -> MutexGuard<'static, LeanDb> {
    static DB: OnceLock<Mutex<LeanDb>> = OnceLock::new();
    // Nothing ever modifies the template, so a panic while it was locked left it intact.
    DB.get_or_init(|| Mutex::new(load())).lock().unwrap_or_else(|e| e.into_inner())
}

fn copy_table<T: Table>(from: &mut LeanDb, to: &mut LeanDb) {
    let mut rows = Vec::with_capacity(from.count::<T>());
    from.for_each::<T>(|r| rows.push(*r));
    to.reserve::<T>(rows.len());
    for r in &rows {
        to.insert::<T>(r).unwrap();
    }
}

/// A private copy of the loaded warehouse (bulk-inserted, outside any transaction).
fn fresh() -> LeanDb {
    let mut src = template();
    let mut db = LeanDb::new();
    copy_table::<t::Warehouses>(&mut src, &mut db);
    copy_table::<t::Districts>(&mut src, &mut db);
    copy_table::<t::Customers>(&mut src, &mut db);
    copy_table::<t::Histories>(&mut src, &mut db);
    copy_table::<t::Orders>(&mut src, &mut db);
    copy_table::<t::NewOrders>(&mut src, &mut db);
    copy_table::<t::OrderLines>(&mut src, &mut db);
    copy_table::<t::Items>(&mut src, &mut db);
    copy_table::<t::Stocks>(&mut src, &mut db);
    db
}

/// The row with primary key `key`, which must exist.
fn row<T: Table>(db: &mut LeanDb, key: u64) -> T::Row {
    db.get::<T, _>(key, |r| *r).unwrap().unwrap_or_else(|| panic!("no {} row with key {key:#x}", T::ID))
}

fn exists<T: Table>(db: &mut LeanDb, key: u64) -> bool {
    db.get::<T, _>(key, |_| ()).unwrap().is_some()
}

/// The rows of `T` that `keep` accepts, in primary-key order for keyed tables.
fn rows<T: Table>(db: &mut LeanDb, keep: impl Fn(&T::Row) -> bool) -> Vec<T::Row> {
    let mut v = Vec::new();
    db.for_each::<T>(|r| {
        if keep(r) {
            v.push(*r);
        }
    });
    v.sort_by_key(T::key);
    v
}

/// An order's lines, in OL_NUMBER order.
fn order_lines(db: &mut LeanDb, d: u8, o: u32) -> Vec<OrderLine> {
    let mut v = Vec::new();
    db.scan::<t::OrderLines>(keys::order_line(W, d, o, 0), keys::order_line(W, d, o, u8::MAX), ScanDir::Forward, |l| {
        v.push(*l);
        true
    })
    .unwrap();
    v
}

/// The district's NEW_ORDER ids, ascending.
fn new_order_ids(db: &mut LeanDb, d: u8) -> Vec<u32> {
    let mut v = Vec::new();
    db.scan::<t::NewOrders>(keys::new_order(W, d, 0), keys::new_order(W, d, u32::MAX), ScanDir::Forward, |n| {
        v.push(n.no_o_id);
        true
    })
    .unwrap();
    v
}

fn assert_consistent(db: &mut LeanDb) {
    let report = check(db);
    assert!(report.all_passed(), "consistency conditions (clause 3.3.2):\n{report}");
}

/// Runs one transaction that must commit.
fn run(db: &mut LeanDb, input: TxnInput) -> TxnOutput {
    let ts = match &input {
        TxnInput::NewOrder(i) => i.entry_d,
        TxnInput::Payment(i) => i.date,
        TxnInput::Delivery(i) => i.date,
        TxnInput::OrderStatus(_) | TxnInput::StockLevel(_) => TS,
    };
    execute(db, ts as u64, &input).unwrap_or_else(|e| panic!("{input:?} failed: {e}"))
}

/// A home NewOrder for customer `c` of district `d`, items `(I_ID, quantity)`.
fn new_order(d: u8, c: u32, items: &[(u32, u8)], ts: i64) -> TxnInput {
    assert!(items.len() <= ORDER_LINES_MAX);
    let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
    for (line, &(i_id, quantity)) in lines.iter_mut().zip(items) {
        *line = OrderLineInput { i_id, supply_w_id: W, quantity };
    }
    TxnInput::NewOrder(NewOrderInput { w_id: W, d_id: d, c_id: c, ol_cnt: items.len() as u8, lines, entry_d: ts })
}

fn payment(d: u8, c_d: u8, customer: CustomerSelector, h_amount: i64, ts: i64) -> TxnInput {
    TxnInput::Payment(PaymentInput { w_id: W, d_id: d, c_w_id: W, c_d_id: c_d, customer, h_amount, date: ts })
}

fn delivery(carrier: u8, ts: i64) -> TxnInput {
    TxnInput::Delivery(DeliveryInput { w_id: W, o_carrier_id: carrier, date: ts })
}

/// Clause 4.3.3.1 (the population table of clause 4.3.3.1): the cardinalities of one warehouse, and the
/// loaded database keeps every consistency condition (clause 3.3.2), including condition 11
/// (count(ORDER) − count(NEW_ORDER) = 2100 per district), which holds only at load.
#[test]
fn loader_populates_one_warehouse_with_the_tpcc_cardinalities() {
    let mut db = template();
    let db = &mut *db;
    // Row counts per table are the loader's own unit test
    // (loader::tests::one_warehouse_has_the_tpcc_population); here the cross-table facts.
    let orders = rows::<t::Orders>(db, |_| true);
    let lines: usize = orders.iter().map(|o| usize::from(o.o_ol_cnt)).sum();
    assert_eq!(db.count::<t::OrderLines>(), lines);
    assert!((290_000..=310_000).contains(&lines), "≈300,000 order lines, got {lines}");

    for d in 1..=DISTRICTS_PER_WAREHOUSE {
        assert_eq!(row::<t::Districts>(db, keys::district(W, d)).d_next_o_id, 3001);
        assert_eq!(rows::<t::Customers>(db, |c| c.c_d_id == d).len(), 3_000);
        let orders = orders.iter().filter(|o| o.o_d_id == d).count();
        let new_orders = new_order_ids(db, d);
        assert_eq!(orders, 3_000);
        assert_eq!(new_orders, (2101..=3000).collect::<Vec<u32>>(), "district {d}");
        assert_eq!(orders - new_orders.len(), 2_100, "condition 11, district {d}");
    }
    assert_consistent(db);
}

/// Clause 2.4.2.2: NewOrder takes O_ID = D_NEXT_O_ID and increments it, inserts ORDER and
/// NEW_ORDER rows and exactly O_OL_CNT ORDER_LINE rows, with OL_AMOUNT = OL_QUANTITY × I_PRICE
/// and OL_DIST_INFO = S_DIST_xx of the district; the total applies discount and taxes.
#[test]
fn new_order_advances_d_next_o_id_and_inserts_ol_cnt_order_lines() {
    let mut db = fresh();
    let (d, c) = (3u8, 17u32);
    let items: [(u32, u8); 7] = [(11, 3), (2_222, 1), (33_333, 10), (44, 5), (99_999, 7), (12_345, 2), (100_000, 4)];
    let district = row::<t::Districts>(&mut db, keys::district(W, d));
    let next = district.d_next_o_id;
    let stock_before: Vec<_> = items.iter().map(|&(i, _)| row::<t::Stocks>(&mut db, keys::stock(W, i))).collect();
    let lines_before = db.count::<t::OrderLines>();

    let TxnOutput::NewOrder(out) = run(&mut db, new_order(d, c, &items, TS)) else { panic!("not a NewOrder output") };

    assert_eq!(out.o_id, next);
    assert_eq!(row::<t::Districts>(&mut db, keys::district(W, d)).d_next_o_id, next + 1);
    let o = row::<t::Orders>(&mut db, keys::order(W, d, next));
    assert_eq!((o.o_c_id, o.o_ol_cnt, o.o_carrier_id, o.o_all_local, o.o_entry_d), (c, 7, 0, 1, TS));
    assert!(exists::<t::NewOrders>(&mut db, keys::new_order(W, d, next)));
    assert_eq!(db.count::<t::OrderLines>(), lines_before + items.len());
    let lines = order_lines(&mut db, d, next);
    assert_eq!(lines.len(), items.len());
    let mut sum = 0i64;
    for (n, (l, &(i_id, q))) in lines.iter().zip(&items).enumerate() {
        let price = row::<t::Items>(&mut db, keys::item(i_id)).i_price;
        assert_eq!((l.ol_number as usize, l.ol_i_id, l.ol_quantity, l.ol_supply_w_id), (n + 1, i_id, q, W));
        assert_eq!(l.ol_amount, i64::from(q) * price, "line {}", n + 1);
        assert_eq!(l.ol_delivery_d, 0);
        assert_eq!(l.ol_dist_info, stock_before[n].s_dist[usize::from(d) - 1], "S_DIST_03 of item {i_id}");
        sum += l.ol_amount;
    }
    // Total = Σ OL_AMOUNT × (1 − C_DISCOUNT) × (1 + W_TAX + D_TAX), rates in basis points; the
    // clause leaves rounding open, so allow one cent.
    let w_tax = row::<t::Warehouses>(&mut db, keys::warehouse(W)).w_tax;
    let c_discount = row::<t::Customers>(&mut db, keys::customer(W, d, c)).c_discount;
    let exact =
        i128::from(sum) * i128::from(10_000 - c_discount) * i128::from(10_000 + w_tax + district.d_tax) / 100_000_000;
    assert!((i128::from(out.total) - exact).abs() <= 1, "total {} vs {exact}", out.total);
    assert_consistent(&mut db);
}

/// Clause 2.4.2.2: S_QUANTITY becomes quantity − q when that leaves at least 10, else
/// quantity − q + 91; S_YTD += q, S_ORDER_CNT += 1, S_REMOTE_CNT unchanged for a home item.
#[test]
fn new_order_applies_the_stock_quantity_rule() {
    let mut db = fresh();
    // (I_ID, S_QUANTITY before, q, S_QUANTITY after)
    let cases: [(u32, i32, u8, i32); 6] = [
        (101, 20, 5, 15),
        (102, 15, 5, 10),  // exactly 10 left: no restock
        (103, 14, 5, 100), // 9 left: 14 − 5 + 91
        (104, 10, 10, 91), // 0 left
        (105, 100, 10, 90),
        (106, 11, 2, 100), // 9 left
    ];
    for &(i, quantity, _, _) in &cases {
        db.update::<t::Stocks, _>(keys::stock(W, i), |s| s.s_quantity = quantity).unwrap().unwrap();
    }
    let before: Vec<_> = cases.iter().map(|c| row::<t::Stocks>(&mut db, keys::stock(W, c.0))).collect();
    let items: Vec<(u32, u8)> = cases.iter().map(|c| (c.0, c.2)).collect();
    run(&mut db, new_order(5, 99, &items, TS));
    for (b, &(i, _, q, after)) in before.iter().zip(&cases) {
        let s = row::<t::Stocks>(&mut db, keys::stock(W, i));
        assert_eq!(s.s_quantity, after, "item {i}: {} − {q}", b.s_quantity);
        assert_eq!(s.s_ytd, b.s_ytd + u32::from(q));
        assert_eq!(s.s_order_cnt, b.s_order_cnt + 1);
        assert_eq!(s.s_remote_cnt, b.s_remote_cnt);
    }
}

/// Clause 2.4.2.3: a NewOrder whose last item is an unused item number rolls back entirely:
/// no ORDER, NEW_ORDER or ORDER_LINE row, D_NEXT_O_ID and every STOCK row untouched — the
/// state digest is unchanged.
#[test]
fn rolled_back_new_order_leaves_the_state_digest_unchanged() {
    let mut db = fresh();
    let before = digest(&mut db);
    let next = row::<t::Districts>(&mut db, keys::district(W, 8)).d_next_o_id;
    let items = [(7, 3), (70, 3), (700, 3), (7_000, 3), (70_000, 3), (77, 9), (UNUSED_ITEM_ID, 1)];
    let input = new_order(8, 42, &items, TS);
    let err = execute(&mut db, TS as u64, &input).unwrap_err();
    assert!(matches!(err, TxnError::Rollback(_)), "{err:?}");
    assert!(err.is_abort());
    assert_eq!(digest(&mut db), before);
    assert_eq!(row::<t::Districts>(&mut db, keys::district(W, 8)).d_next_o_id, next);
    assert!(!exists::<t::Orders>(&mut db, keys::order(W, 8, next)));
    // The next NewOrder of the district takes the same O_ID.
    let TxnOutput::NewOrder(out) = run(&mut db, new_order(8, 42, &items[..6], TS + 1)) else { panic!() };
    assert_eq!(out.o_id, next);
    assert_consistent(&mut db);
}

/// Clause 2.5.2.2: Payment adds H_AMOUNT to W_YTD and D_YTD, subtracts it from C_BALANCE,
/// adds it to C_YTD_PAYMENT, increments C_PAYMENT_CNT and inserts a HISTORY row with
/// H_DATA = W_NAME + 4 spaces + D_NAME. Here the customer's district differs from the
/// paying district.
#[test]
fn payment_updates_the_ytds_and_the_customer_and_inserts_history() {
    let mut db = fresh();
    let (d, c_d, c, amount) = (2u8, 6u8, 1_234u32, 4_321i64);
    let w = row::<t::Warehouses>(&mut db, keys::warehouse(W));
    let dist = row::<t::Districts>(&mut db, keys::district(W, d));
    let cust = row::<t::Customers>(&mut db, keys::customer(W, c_d, c));
    let histories = db.count::<t::Histories>();

    let TxnOutput::Payment(out) = run(&mut db, payment(d, c_d, CustomerSelector::ById(c), amount, TS)) else {
        panic!()
    };

    assert_eq!(out.c_id, c);
    assert_eq!(out.c_balance, cust.c_balance - amount);
    assert_eq!(row::<t::Warehouses>(&mut db, keys::warehouse(W)).w_ytd, w.w_ytd + amount);
    assert_eq!(row::<t::Districts>(&mut db, keys::district(W, d)).d_ytd, dist.d_ytd + amount);
    let after = row::<t::Customers>(&mut db, keys::customer(W, c_d, c));
    assert_eq!(after.c_balance, cust.c_balance - amount);
    assert_eq!(after.c_ytd_payment, cust.c_ytd_payment + amount);
    assert_eq!(after.c_payment_cnt, cust.c_payment_cnt + 1);
    assert_eq!(db.count::<t::Histories>(), histories + 1);
    let h = rows::<t::Histories>(&mut db, |h| h.h_date == TS);
    assert_eq!(h.len(), 1);
    let h = h[0];
    assert_eq!((h.h_c_id, h.h_c_d_id, h.h_c_w_id, h.h_d_id, h.h_w_id, h.h_amount), (c, c_d, W, d, W, amount));
    let h_data = [text(&w.w_name), b"    ", text(&dist.d_name)].concat();
    assert_eq!(text(&h.h_data), &h_data[..h_data.len().min(24)]);
    assert_consistent(&mut db);
}

/// Clauses 2.5.2.2 and 2.6.2.2: selected by last name, the customer is the one at position
/// ⌈n/2⌉ of the n customers with that last name in the district, ordered by C_FIRST — for n
/// odd, n even and n = 1. OrderStatus selects the same customer.
#[test]
fn payment_by_last_name_takes_position_ceil_n_over_2_by_c_first() {
    let mut db = fresh();
    let c_d = 4u8;
    let mut by_name: BTreeMap<[u8; 16], Vec<([u8; 16], u32)>> = BTreeMap::new();
    db.for_each::<t::Customers>(|c| {
        if c.c_d_id == c_d {
            by_name.entry(c.c_last).or_default().push((c.c_first, c.c_id));
        }
    });
    let pick = |want: &dyn Fn(usize) -> bool| {
        by_name
            .iter()
            .find(|(_, m)| want(m.len()))
            .map(|(name, m)| (*name, m.clone()))
            .expect("a last name with that many matches")
    };
    let odd = pick(&|n| n >= 3 && n % 2 == 1);
    let even = pick(&|n| n >= 4 && n % 2 == 0);
    let single = pick(&|n| n == 1);
    for (k, (name, mut matches)) in [odd, even, single].into_iter().enumerate() {
        matches.sort();
        let n = matches.len();
        assert!(matches.windows(2).all(|p| p[0].0 != p[1].0), "C_FIRST values are distinct");
        let expected = matches[n.div_ceil(2) - 1].1;
        let ts = TS + k as i64;
        let sel = CustomerSelector::ByLastName(name);
        let before = row::<t::Customers>(&mut db, keys::customer(W, c_d, expected));
        let TxnOutput::Payment(out) = run(&mut db, payment(1, c_d, sel, 500, ts)) else { panic!() };
        let last = String::from_utf8_lossy(text(&name)).into_owned();
        assert_eq!(out.c_id, expected, "{last}: n = {n}");
        let after = row::<t::Customers>(&mut db, keys::customer(W, c_d, expected));
        assert_eq!(after.c_balance, before.c_balance - 500);
        let status = TxnInput::OrderStatus(OrderStatusInput { w_id: W, d_id: c_d, customer: sel });
        let TxnOutput::OrderStatus(out) = run(&mut db, status) else { panic!() };
        assert_eq!(out.c_id, expected, "OrderStatus, {last}: n = {n}");
    }
    assert_consistent(&mut db);
}

/// Splits a bad-credit C_DATA into the prepended history text and the old data that follows
/// it, given that the old data starts with `old_head`.
fn split_c_data<'a>(new: &'a [u8], old_head: &[u8]) -> (&'a [u8], &'a [u8]) {
    let at = new.windows(old_head.len()).position(|w| w == old_head).expect("the old C_DATA follows the new data");
    new.split_at(at)
}

/// The numbers in a prepended C_DATA entry, in order.
fn numbers(prefix: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(prefix)
        .split(|ch: char| !(ch.is_ascii_digit() || ch == '.'))
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Clause 2.5.2.2: a bad-credit ("BC") customer gets C_ID, C_D_ID, C_W_ID, D_ID, W_ID and
/// H_AMOUNT inserted at the left of C_DATA, the old data shifted right and the result kept to
/// 500 characters; a good-credit customer's C_DATA is untouched.
#[test]
fn bad_credit_payment_prepends_to_c_data_and_keeps_500_characters() {
    let mut db = fresh();
    let c_d = 5u8;
    let customers = rows::<t::Customers>(&mut db, |c| c.c_d_id == c_d);
    let bad: Vec<&Customer> = customers.iter().filter(|c| &c.c_credit == b"BC").collect();
    let good = customers.iter().find(|c| &c.c_credit == b"GC").unwrap();
    assert!(bad.len() >= 2);

    // A full 500-character C_DATA: the tail must be cut. A 300-character one: nothing is lost.
    let full: Vec<u8> = (0..500).map(|i| b"abcdefghijklmnopqrstuvwxyz"[i % 26]).collect();
    let short: Vec<u8> = (0..300).map(|i| b"ZYXWVUTSRQ"[i % 10]).collect();
    for (k, (c, old)) in [(bad[0], &full), (bad[1], &short)].into_iter().enumerate() {
        let ck = keys::customer(W, c_d, c.c_id);
        db.update::<t::Customers, _>(ck, |r| engine::schema::set_text(&mut r.c_data, old)).unwrap().unwrap();
        let amount = 4_321 + k as i64;
        let TxnOutput::Payment(out) = run(&mut db, payment(2, c_d, CustomerSelector::ById(c.c_id), amount, TS)) else {
            panic!()
        };
        assert!(out.bad_credit);
        let after = row::<t::Customers>(&mut db, ck);
        let data = text(&after.c_data);
        let (prefix, rest) = split_c_data(data, &old[..40]);
        assert!(!prefix.is_empty());
        let expected = [c.c_id.to_string(), c_d.to_string(), W.to_string(), "2".into(), W.to_string()];
        let got = numbers(prefix);
        assert_eq!(got[..5], expected, "C_DATA starts {:?}", String::from_utf8_lossy(prefix));
        assert_eq!(got[5], format!("{}.{:02}", amount / 100, amount % 100));
        assert_eq!(got.len(), 6);
        assert_eq!(data.len(), (prefix.len() + old.len()).min(500), "C_DATA kept to 500 characters");
        assert_eq!(rest, &old[..data.len() - prefix.len()]);
    }

    let TxnOutput::Payment(out) = run(&mut db, payment(2, c_d, CustomerSelector::ById(good.c_id), 100, TS)) else {
        panic!()
    };
    assert!(!out.bad_credit);
    let after = row::<t::Customers>(&mut db, keys::customer(W, c_d, good.c_id));
    assert_eq!(after.c_data, good.c_data);
    assert_consistent(&mut db);
}

/// Clause 2.6.2.2: OrderStatus returns the customer's latest order (largest O_ID) and its
/// lines.
#[test]
fn order_status_returns_the_latest_order() {
    let mut db = fresh();
    let (d, c) = (9u8, 2_500u32);
    let latest = rows::<t::Orders>(&mut db, |o| o.o_d_id == d && o.o_c_id == c).last().copied().unwrap();
    let status = TxnInput::OrderStatus(OrderStatusInput { w_id: W, d_id: d, customer: CustomerSelector::ById(c) });
    let summary = |db: &mut LeanDb, o: &Order| {
        let lines = order_lines(db, d, o.o_id);
        (o.o_id, o.o_carrier_id, lines.len() as u8, lines.iter().map(|l| l.ol_amount).sum::<i64>())
    };
    let TxnOutput::OrderStatus(out) = run(&mut db, status) else { panic!() };
    assert_eq!(out.last_order, Some(summary(&mut db, &latest)));

    let TxnOutput::NewOrder(no) = run(&mut db, new_order(d, c, &[(5, 1), (6, 2), (8, 3), (13, 4), (21, 5)], TS)) else {
        panic!()
    };
    let TxnOutput::OrderStatus(out) = run(&mut db, status) else { panic!() };
    let newest = row::<t::Orders>(&mut db, keys::order(W, d, no.o_id));
    assert_eq!(out.last_order, Some(summary(&mut db, &newest)));
    assert_eq!(out.last_order.unwrap().1, 0, "not delivered yet");
}

/// Clause 2.7.4.2: Delivery takes each district's oldest NEW_ORDER, deletes it, sets the
/// order's carrier, dates its lines and adds Σ OL_AMOUNT to the customer's balance.
#[test]
fn delivery_delivers_the_oldest_new_order_of_each_district() {
    let mut db = fresh();
    let mut expected = Vec::new();
    for d in 1..=DISTRICTS_PER_WAREHOUSE {
        let o_id = new_order_ids(&mut db, d)[0];
        let o = row::<t::Orders>(&mut db, keys::order(W, d, o_id));
        let total: i64 = order_lines(&mut db, d, o_id).iter().map(|l| l.ol_amount).sum();
        let c = row::<t::Customers>(&mut db, keys::customer(W, d, o.o_c_id));
        expected.push((d, o_id, o.o_c_id, total, c));
    }
    let TxnOutput::Delivery(out) = run(&mut db, delivery(7, TS)) else { panic!() };
    assert_eq!(out.delivered.to_vec(), expected.iter().map(|e| e.1).collect::<Vec<_>>());
    for (d, o_id, c_id, total, c) in expected {
        assert!(!exists::<t::NewOrders>(&mut db, keys::new_order(W, d, o_id)));
        assert_eq!(row::<t::Orders>(&mut db, keys::order(W, d, o_id)).o_carrier_id, 7);
        assert!(order_lines(&mut db, d, o_id).iter().all(|l| l.ol_delivery_d == TS));
        let after = row::<t::Customers>(&mut db, keys::customer(W, d, c_id));
        assert_eq!(after.c_balance, c.c_balance + total);
        assert_eq!(after.c_delivery_cnt, c.c_delivery_cnt + 1);
    }
    assert_consistent(&mut db);
}

/// Clause 2.7.4.2: a district with no NEW_ORDER row is skipped; a Delivery that finds none
/// in any district changes nothing.
#[test]
fn delivery_skips_districts_without_new_orders() {
    let mut db = fresh();
    // Drain every district: 900 new orders each at load.
    let mut ts = TS;
    for _ in 0..900 {
        let TxnOutput::Delivery(out) = run(&mut db, delivery(1, ts)) else { panic!() };
        assert!(out.delivered.iter().all(|&o| o != 0));
        ts += 1;
    }
    assert_eq!(db.count::<t::NewOrders>(), 0);
    assert_consistent(&mut db);

    let TxnOutput::NewOrder(a) = run(&mut db, new_order(2, 5, &[(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)], ts)) else {
        panic!()
    };
    let TxnOutput::NewOrder(b) = run(&mut db, new_order(7, 6, &[(6, 1), (7, 1), (8, 1), (9, 1), (10, 1)], ts + 1))
    else {
        panic!()
    };
    let TxnOutput::Delivery(out) = run(&mut db, delivery(4, ts + 2)) else { panic!() };
    let mut expected = [0u32; DISTRICTS_PER_WAREHOUSE as usize];
    expected[1] = a.o_id;
    expected[6] = b.o_id;
    assert_eq!(out.delivered, expected);
    assert_consistent(&mut db);

    let before = digest(&mut db);
    let TxnOutput::Delivery(out) = run(&mut db, delivery(5, ts + 3)) else { panic!() };
    assert_eq!(out.delivered, [0; DISTRICTS_PER_WAREHOUSE as usize]);
    assert_eq!(digest(&mut db), before, "an empty Delivery changes nothing");
}

/// Clause 2.8.2.2: StockLevel counts the distinct items of the district's last 20 orders whose
/// S_QUANTITY is below the threshold.
#[test]
fn stock_level_counts_distinct_low_items_of_the_last_20_orders() {
    let mut db = fresh();
    let d = 6u8;
    let next = row::<t::Districts>(&mut db, keys::district(W, d)).d_next_o_id;
    let mut items: Vec<u32> = rows::<t::OrderLines>(&mut db, |l| l.ol_d_id == d && l.ol_o_id + 20 >= next)
        .iter()
        .filter(|l| l.ol_o_id < next)
        .map(|l| l.ol_i_id)
        .collect();
    items.sort_unstable();
    items.dedup();
    // Make every third item low, and an item outside the last 20 orders low too.
    for &i in items.iter().step_by(3) {
        db.update::<t::Stocks, _>(keys::stock(W, i), |s| s.s_quantity = 9).unwrap().unwrap();
    }
    let outside = (1..=100_000).find(|i| items.binary_search(i).is_err()).unwrap();
    db.update::<t::Stocks, _>(keys::stock(W, outside), |s| s.s_quantity = 1).unwrap().unwrap();
    for threshold in [10, 15, 20] {
        let expected =
            items.iter().filter(|&&i| row::<t::Stocks>(&mut db, keys::stock(W, i)).s_quantity < threshold).count();
        let input = TxnInput::StockLevel(StockLevelInput { w_id: W, d_id: d, threshold });
        let TxnOutput::StockLevel(out) = run(&mut db, input) else { panic!() };
        assert_eq!(out.low_stock as usize, expected, "threshold {threshold}");
        assert!(expected >= items.len().div_ceil(3));
    }
}

/// Runs `n` generated transactions; every failure must be a TPC-C rollback of a NewOrder
/// carrying the unused item number (clause 2.4.2.3). Returns the outcomes.
fn run_generated(db: &mut LeanDb, gen: &mut Generator, n: usize) -> Vec<Result<TxnOutput, TxnError>> {
    (0..n)
        .map(|k| {
            let ts = TS + k as i64;
            let input = gen.next(ts);
            let result = execute(db, ts as u64, &input);
            if let Err(e) = &result {
                let rollback = matches!(
                    (&input, e),
                    (TxnInput::NewOrder(i), TxnError::Rollback(_)) if i.lines().last().unwrap().i_id == UNUSED_ITEM_ID
                );
                assert!(rollback, "transaction {k} ({input:?}) failed: {e}");
            }
            result
        })
        .collect()
}

fn standard(mix: Mix) -> GenConfig {
    GenConfig { mix: Some(mix), ..GenConfig::for_profile(Profile::Standard, W..=W) }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Clause 3.3.2: random sequences of all five transactions (standard profile: last names,
    /// rollbacks; the mix weights drawn too, each at least 1) keep conditions 1–10 and 12.
    #[test]
    fn random_transaction_sequences_keep_the_consistency_conditions(
        run_seed in any::<u64>(),
        weights in prop::array::uniform5(1u32..=20),
        len in 50usize..500,
    ) {
        let mut db = fresh();
        let mut gen = Generator::new(standard(Mix::new(weights).unwrap()), run_seed, SEED).unwrap();
        run_generated(&mut db, &mut gen, len);
        let report = check(&mut db);
        prop_assert!(report.all_passed(), "run seed {run_seed}, {len} transactions:\n{report}");
    }
}

/// The determinism contract (docs/design.md): two engines fed the same input sequence commit the same
/// results and end in the same state digest; a different sequence ends elsewhere.
#[test]
fn engines_fed_the_same_sequence_end_with_equal_digests() {
    let mut a = fresh();
    let mut b = load();
    assert_eq!(digest(&mut a), digest(&mut b), "a copy and a fresh load agree");
    let cfg = GenConfig::for_profile(Profile::Standard, W..=W);
    let mut gen_a = Generator::new(cfg.clone(), 11, SEED).unwrap();
    let mut gen_b = Generator::new(cfg.clone(), 11, SEED).unwrap();
    let out_a = run_generated(&mut a, &mut gen_a, 2_000);
    let out_b = run_generated(&mut b, &mut gen_b, 2_000);
    assert_eq!(out_a, out_b);
    let digest_a = digest(&mut a);
    assert_eq!(digest_a, digest(&mut b));
    assert_consistent(&mut a);

    let mut c = fresh();
    let mut gen_c = Generator::new(cfg, 12, SEED).unwrap();
    run_generated(&mut c, &mut gen_c, 2_000);
    assert_ne!(digest(&mut c), digest_a);
}

/// Section 5.3's log-shipping alternative (redo records, `engine::redo`): a backup that applies
/// the primary's after-images, batch by batch in commit order, holds the primary's state —
/// all five transaction types, rollbacks included — without running any procedure.
#[test]
fn a_backup_rolled_forward_from_redo_records_equals_the_primary() {
    let mut primary = fresh();
    let mut backup = fresh();
    primary.set_redo_capture(true);
    let mut gen = Generator::new(standard(Mix::STANDARD), 21, SEED).unwrap();
    let mut committed_total = 0;
    for round in 0..8 {
        let outcomes = run_generated(&mut primary, &mut gen, 250);
        let committed = outcomes.iter().filter(|r| r.is_ok()).count() as u64;
        committed_total += committed;
        let batch = primary.take_redo();
        assert_eq!(batch.txns, committed, "one entry per committed transaction, none for rollbacks");
        assert!(batch.verify());
        backup.apply_redo(&batch).unwrap();
        assert_eq!(digest(&mut primary), digest(&mut backup), "after round {round}");
    }
    assert!(committed_total > 1_900, "{committed_total} transactions committed");
    assert_consistent(&mut backup);
}

/// A redo batch damaged in transit is refused whole: the backup changes nothing.
#[test]
fn a_corrupt_redo_batch_is_refused_and_changes_nothing() {
    let mut primary = fresh();
    let mut backup = fresh();
    primary.set_redo_capture(true);
    let mut gen = Generator::new(GenConfig::for_profile(Profile::Paper, W..=W), 22, SEED).unwrap();
    run_generated(&mut primary, &mut gen, 50);
    let mut batch = primary.take_redo();
    let before = digest(&mut backup);
    let last = batch.bytes.len() - 1;
    batch.bytes[last] ^= 0x40;
    assert!(matches!(backup.apply_redo(&batch), Err(engine::StorageError::BadRedo(_))));
    assert_eq!(digest(&mut backup), before);
    // Without capture there is nothing to ship.
    let mut plain = fresh();
    run_generated(&mut plain, &mut gen, 10);
    assert!(plain.take_redo().is_empty());
}
