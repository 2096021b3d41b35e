//! The TPC-C consistency checker: conditions 1–10 and 12 of clause 3.3.2 (TPC-C 5.11), checked
//! exactly, over one partition's storage or over several partitions' storages together.
//!
//! What it owns: reading the WAREHOUSE, DISTRICT, CUSTOMER, HISTORY, ORDER, NEW_ORDER and
//! ORDER_LINE tables through [`Storage::for_each`] into per-warehouse, per-district, per-order
//! and per-customer aggregates (never copies of whole tables), and judging the conditions on
//! those aggregates.
//!
//! Guarantees:
//! - sums are exact (`i128` accumulators over integer cents; no floating point, no overflow);
//! - results are deterministic: every aggregate is keyed by a packed primary key in a
//!   [`BTreeMap`], so conditions are judged in key order and the reported first violation is
//!   the violating key that sorts first, whatever order the storage visits rows in;
//! - several storages can be [`Checker::add`]ed before [`Checker::finish`]: a Payment whose
//!   customer lives in another partition leaves its HISTORY row in one partition and its
//!   CUSTOMER row in another, and conditions 8–10 and 12 join across all storages added (in
//!   any order). Each partition must be added exactly once: adding a replica twice would
//!   double-count its rows: a WAREHOUSE, DISTRICT, CUSTOMER or ORDER key seen more than once
//!   (a replica added twice, or a damaged or forged storage) is a violation of condition 1,
//!   2, 10 or 6 respectively, never a panic — the checker reads state from disk and from
//!   peers (found by the `wal_recovery` fuzz target, docs/design.md §13).
//!
//! Each condition ranges over the rows its clause quantifies over: condition 1 and 8 over
//! WAREHOUSE rows, 2, 3, 4 and 9 over DISTRICT rows, 5 and 6 over ORDER rows, 7 over
//! ORDER_LINE rows that have an ORDER row (the clause's "corresponding row" is a join), 10 and
//! 12 over CUSTOMER rows. Rows that reference a missing parent are therefore caught by the
//! district-level counts (an ORDER_LINE without its ORDER breaks condition 4, a NEW_ORDER
//! without its ORDER breaks 2 or 3), not reported twice.
//!
//! Two readings of SQL nulls, both documented on the conditions they affect: a district with
//! no NEW_ORDER rows has no max(NO_O_ID) (condition 2 then compares D_NEXT_O_ID − 1 with
//! max(O_ID) only, and condition 3 holds vacuously: Delivery may drain a district), and a
//! district with no ORDER rows has max(O_ID) = 0 (a fresh district starts at D_NEXT_O_ID = 1).
//!
//! Condition 11 (count(ORDER) − count(NEW_ORDER) = 2100 per district) holds only for the
//! freshly loaded database, before any Delivery or NewOrder, so it is not checked.

use std::collections::BTreeMap;
use std::fmt;

use crate::schema::{keys, t};
use crate::storage::Storage;

/// The conditions checked, by clause 3.3.2 number, with their descriptions.
pub const CONDITIONS: [(u8, &str); 11] = [
    (1, "W_YTD = Σ D_YTD of the warehouse's districts"),
    (2, "D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID) of the district"),
    (3, "max(NO_O_ID) − min(NO_O_ID) + 1 = count of the district's NEW_ORDER rows"),
    (4, "Σ O_OL_CNT = count of the district's ORDER_LINE rows"),
    (5, "O_CARRIER_ID is null exactly when the order has a NEW_ORDER row"),
    (6, "O_OL_CNT = count of the order's ORDER_LINE rows"),
    (7, "OL_DELIVERY_D is null exactly when its order's O_CARRIER_ID is null"),
    (8, "W_YTD = Σ H_AMOUNT of HISTORY rows with H_W_ID = W_ID"),
    (9, "D_YTD = Σ H_AMOUNT of HISTORY rows with (H_W_ID, H_D_ID) = the district"),
    (10, "C_BALANCE = Σ OL_AMOUNT of delivered lines − Σ H_AMOUNT of the customer"),
    (12, "C_BALANCE + C_YTD_PAYMENT = Σ OL_AMOUNT of the customer's delivered lines"),
];

/// The verdict on one consistency condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionResult {
    /// The condition's number in clause 3.3.2.
    pub number: u8,
    pub description: &'static str,
    pub passed: bool,
    /// How many keys (warehouses, districts, orders, order lines or customers) it examined.
    pub checked: u64,
    /// How many of those violate it.
    pub violations: u64,
    /// The first violating key in key order, with the values that disagree.
    pub first_violation: Option<String>,
}

/// The verdicts on all checked conditions, in condition order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    pub conditions: Vec<ConditionResult>,
}

impl CheckReport {
    /// True when every condition holds.
    pub fn all_passed(&self) -> bool {
        self.conditions.iter().all(|c| c.passed)
    }

    /// The conditions that do not hold.
    pub fn failed(&self) -> impl Iterator<Item = &ConditionResult> {
        self.conditions.iter().filter(|c| !c.passed)
    }

    /// The verdict on condition `number` of clause 3.3.2, if it is checked.
    pub fn condition(&self, number: u8) -> Option<&ConditionResult> {
        self.conditions.iter().find(|c| c.number == number)
    }
}

impl fmt::Display for ConditionResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.passed { "PASS" } else { "FAIL" };
        let unit = match self.number {
            1 | 8 => "warehouses",
            2 | 3 | 4 | 9 => "districts",
            5 | 6 => "orders",
            7 => "order lines",
            _ => "customers",
        };
        write!(f, "{:>2} {verdict} {} ({} {unit} checked", self.number, self.description, self.checked)?;
        if self.violations > 0 {
            write!(f, ", {} violating", self.violations)?;
        }
        f.write_str(")")?;
        if let Some(v) = &self.first_violation {
            write!(f, "; first: {v}")?;
        }
        Ok(())
    }
}

impl fmt::Display for CheckReport {
    /// One line per condition: number, PASS or FAIL, description, keys checked, and the first
    /// violating key when it fails.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.conditions {
            writeln!(f, "{c}")?;
        }
        Ok(())
    }
}

/// Checks one storage (one partition, or a whole single-storage database).
pub fn check<S: Storage>(db: &mut S) -> CheckReport {
    let mut checker = Checker::new();
    checker.add(db);
    checker.finish()
}

#[derive(Debug, Default)]
struct WarehouseAgg {
    /// W_YTD, when the WAREHOUSE row was seen.
    w_ytd: Option<i64>,
    /// WAREHOUSE rows seen with this key (more than one: a damaged or forged storage).
    copies: u32,
    district_ytd: i128,
    districts: u64,
    history: i128,
    history_rows: u64,
}

#[derive(Debug, Clone, Copy)]
struct DistrictRow {
    next_o_id: u32,
    ytd: i64,
}

#[derive(Debug, Default)]
struct DistrictAgg {
    row: Option<DistrictRow>,
    /// DISTRICT rows seen with this key.
    copies: u32,
    o_id_max: Option<u32>,
    ol_cnt_sum: u64,
    /// (min, max) of NO_O_ID.
    no_range: Option<(u32, u32)>,
    no_rows: u64,
    ol_rows: u64,
    history: i128,
    history_rows: u64,
}

#[derive(Debug, Clone, Copy)]
struct OrderRow {
    c_id: u32,
    /// 0 = null.
    carrier: u8,
    ol_cnt: u8,
}

#[derive(Debug, Default)]
struct OrderAgg {
    row: Option<OrderRow>,
    /// ORDER rows seen with this key.
    copies: u32,
    new_order: bool,
    /// ORDER_LINE rows with a null / a set OL_DELIVERY_D, and the lowest OL_NUMBER of each.
    undelivered: u32,
    delivered: u32,
    first_undelivered: Option<u8>,
    first_delivered: Option<u8>,
    delivered_amount: i128,
}

#[derive(Debug, Clone, Copy)]
struct CustomerRow {
    balance: i64,
    ytd_payment: i64,
}

#[derive(Debug, Default)]
struct CustomerAgg {
    row: Option<CustomerRow>,
    /// CUSTOMER rows seen with this key.
    copies: u32,
    delivered: i128,
    paid: i128,
    payments: u64,
}

/// An extra condition beside clause 3.3.2's, which the simulator checks: per STOCK row
/// (warehouse, item), S_YTD, S_ORDER_CNT and S_REMOTE_CNT minus the sums the
/// ORDER_LINE rows it supplied account for (their OL_QUANTITY, their count, the count of
/// those ordered for another warehouse). NewOrder moves both sides alike, so the balance of
/// a consistent state is the loaded population's.
pub type StockBalance = BTreeMap<(u16, u32), [i64; 3]>;

/// Adds `db`'s STOCK rows and subtracts its ORDER_LINE rows into `balance` (add every
/// partition once: an order line and the stock that supplied it may be in different ones).
pub fn add_stock_balance<S: Storage>(db: &mut S, balance: &mut StockBalance) {
    db.for_each::<t::Stocks>(|s| {
        let b = balance.entry((s.s_w_id, s.s_i_id)).or_default();
        b[0] += i64::from(s.s_ytd);
        b[1] += i64::from(s.s_order_cnt);
        b[2] += i64::from(s.s_remote_cnt);
    });
    db.for_each::<t::OrderLines>(|l| {
        let b = balance.entry((l.ol_supply_w_id, l.ol_i_id)).or_default();
        b[0] -= i64::from(l.ol_quantity);
        b[1] -= 1;
        b[2] -= i64::from(l.ol_supply_w_id != l.ol_w_id);
    });
}

/// How two stock balances differ: the first row that does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StockDifference {
    /// Row (W, I)'s balance is `found` where the loaded population's is `loaded`.
    Disagrees { w: u16, i: u32, found: [i64; 3], loaded: [i64; 3] },
    /// Row (W, I) of the loaded population is not found.
    Missing { w: u16, i: u32 },
}

/// The first row where `found` differs from `expected`, if any.
pub fn stock_difference(expected: &StockBalance, found: &StockBalance) -> Option<StockDifference> {
    for (key, b) in found {
        let e = expected.get(key).copied().unwrap_or_default();
        if e != *b {
            return Some(StockDifference::Disagrees { w: key.0, i: key.1, found: *b, loaded: e });
        }
    }
    expected.keys().find(|k| !found.contains_key(k)).map(|k| StockDifference::Missing { w: k.0, i: k.1 })
}

/// Accumulates the aggregates the conditions need from one or more storages; see the module
/// documentation.
#[derive(Debug, Default)]
pub struct Checker {
    warehouses: BTreeMap<u16, WarehouseAgg>,
    /// Keyed by [`keys::district`].
    districts: BTreeMap<u64, DistrictAgg>,
    /// Keyed by [`keys::order`].
    orders: BTreeMap<u64, OrderAgg>,
    /// Keyed by [`keys::customer`].
    customers: BTreeMap<u64, CustomerAgg>,
}

fn min_opt(a: Option<u8>, b: u8) -> Option<u8> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl Checker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads one storage's rows into the aggregates (outside any transaction).
    pub fn add<S: Storage>(&mut self, db: &mut S) {
        let Checker { warehouses, districts, orders, customers } = self;
        db.for_each::<t::Warehouses>(|w| {
            let agg = warehouses.entry(w.w_id).or_default();
            agg.copies += 1;
            agg.w_ytd = Some(w.w_ytd);
        });
        db.for_each::<t::Districts>(|d| {
            let agg = districts.entry(keys::district(d.d_w_id, d.d_id)).or_default();
            agg.copies += 1;
            agg.row = Some(DistrictRow { next_o_id: d.d_next_o_id, ytd: d.d_ytd });
            let w = warehouses.entry(d.d_w_id).or_default();
            w.district_ytd += i128::from(d.d_ytd);
            w.districts += 1;
        });
        db.for_each::<t::Customers>(|c| {
            let agg = customers.entry(keys::customer(c.c_w_id, c.c_d_id, c.c_id)).or_default();
            agg.copies += 1;
            agg.row = Some(CustomerRow { balance: c.c_balance, ytd_payment: c.c_ytd_payment });
        });
        db.for_each::<t::Histories>(|h| {
            let amount = i128::from(h.h_amount);
            let w = warehouses.entry(h.h_w_id).or_default();
            w.history += amount;
            w.history_rows += 1;
            let d = districts.entry(keys::district(h.h_w_id, h.h_d_id)).or_default();
            d.history += amount;
            d.history_rows += 1;
            let c = customers.entry(keys::customer(h.h_c_w_id, h.h_c_d_id, h.h_c_id)).or_default();
            c.paid += amount;
            c.payments += 1;
        });
        db.for_each::<t::Orders>(|o| {
            let agg = orders.entry(keys::order(o.o_w_id, o.o_d_id, o.o_id)).or_default();
            agg.copies += 1;
            agg.row = Some(OrderRow { c_id: o.o_c_id, carrier: o.o_carrier_id, ol_cnt: o.o_ol_cnt });
            let d = districts.entry(keys::district(o.o_w_id, o.o_d_id)).or_default();
            d.o_id_max = Some(d.o_id_max.map_or(o.o_id, |m| m.max(o.o_id)));
            d.ol_cnt_sum += u64::from(o.o_ol_cnt);
        });
        db.for_each::<t::NewOrders>(|n| {
            let d = districts.entry(keys::district(n.no_w_id, n.no_d_id)).or_default();
            d.no_range =
                Some(d.no_range.map_or((n.no_o_id, n.no_o_id), |(lo, hi)| (lo.min(n.no_o_id), hi.max(n.no_o_id))));
            d.no_rows += 1;
            // Only orders with an ORDER row are judged by condition 5 (in `finish`); a NEW_ORDER
            // without its ORDER shows in conditions 2 and 3.
            orders.entry(keys::order(n.no_w_id, n.no_d_id, n.no_o_id)).or_default().new_order = true;
        });
        db.for_each::<t::OrderLines>(|l| {
            districts.entry(keys::district(l.ol_w_id, l.ol_d_id)).or_default().ol_rows += 1;
            // Lines without their ORDER row show in condition 4 only (`finish` skips orders
            // without a row).
            let o = orders.entry(keys::order(l.ol_w_id, l.ol_d_id, l.ol_o_id)).or_default();
            if l.ol_delivery_d == 0 {
                o.undelivered += 1;
                o.first_undelivered = min_opt(o.first_undelivered, l.ol_number);
            } else {
                o.delivered += 1;
                o.first_delivered = min_opt(o.first_delivered, l.ol_number);
                o.delivered_amount += i128::from(l.ol_amount);
            }
        });
    }

    /// Judges every condition on what was added.
    pub fn finish(self) -> CheckReport {
        let Checker { warehouses, districts, orders, mut customers } = self;
        let [c1, c8] = judge_warehouses(&warehouses);
        let [c2, c3, c4, c9] = judge_districts(&districts);
        let [c5, c6, c7] = judge_orders(&orders, &mut customers);
        drop(orders);
        let [c10, c12] = judge_customers(&customers);
        let conditions = [c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c12].into_iter().map(Tally::into_result).collect();
        CheckReport { conditions }
    }
}

/// Conditions 1 (W_YTD = Σ D_YTD) and 8 (W_YTD = Σ H_AMOUNT), per warehouse.
fn judge_warehouses(warehouses: &BTreeMap<u16, WarehouseAgg>) -> [Tally; 2] {
    let mut c1 = Tally::new(1);
    let mut c8 = Tally::new(8);
    for (&w, agg) in warehouses {
        let Some(w_ytd) = agg.w_ytd else { continue };
        if agg.copies > 1 {
            c1.judge_many(0, 1, || format!("warehouse {w}: {} WAREHOUSE rows", agg.copies));
        }
        let w_ytd = i128::from(w_ytd);
        c1.judge(w_ytd == agg.district_ytd, || {
            format!(
                "warehouse {w}: W_YTD = {} but Σ D_YTD = {} over {} districts",
                money(w_ytd),
                money(agg.district_ytd),
                agg.districts
            )
        });
        c8.judge(w_ytd == agg.history, || {
            format!(
                "warehouse {w}: W_YTD = {} but Σ H_AMOUNT = {} over {} HISTORY rows",
                money(w_ytd),
                money(agg.history),
                agg.history_rows
            )
        });
    }

    [c1, c8]
}

/// Conditions 2 (D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID)), 3 (NEW_ORDER contiguous), 4
/// (Σ O_OL_CNT = count(ORDER_LINE)) and 9 (D_YTD = Σ H_AMOUNT), per district.
fn judge_districts(districts: &BTreeMap<u64, DistrictAgg>) -> [Tally; 4] {
    let (mut c2, mut c3, mut c4, mut c9) = (Tally::new(2), Tally::new(3), Tally::new(4), Tally::new(9));
    for (&key, agg) in districts {
        let Some(row) = agg.row else { continue };
        let name = || district_name(key);
        if agg.copies > 1 {
            c2.judge_many(0, 1, || format!("{}: {} DISTRICT rows", name(), agg.copies));
        }
        // A district without orders has max(O_ID) = 0 (see the module documentation).
        let last = i64::from(row.next_o_id) - 1;
        let o_max = i64::from(agg.o_id_max.unwrap_or(0));
        let no_max = agg.no_range.map(|(_, hi)| i64::from(hi));
        c2.judge(last == o_max && no_max.is_none_or(|m| m == last), || {
            if last != o_max {
                format!("{}: D_NEXT_O_ID-1 = {last} but max(O_ID) = {o_max}", name())
            } else {
                format!("{}: D_NEXT_O_ID-1 = {last} but max(NO_O_ID) = {}", name(), no_max.unwrap_or(0))
            }
        });
        // Condition 3 holds vacuously for a district with no NEW_ORDER rows.
        let span = agg.no_range.map_or(0, |(lo, hi)| u64::from(hi - lo) + 1);
        c3.judge(span == agg.no_rows, || {
            let (lo, hi) = agg.no_range.unwrap_or_default();
            format!(
                "{}: max(NO_O_ID) − min(NO_O_ID) + 1 = {hi} − {lo} + 1 = {span} but count(NEW_ORDER) = {}",
                name(),
                agg.no_rows
            )
        });
        c4.judge(agg.ol_cnt_sum == agg.ol_rows, || {
            format!("{}: Σ O_OL_CNT = {} but count(ORDER_LINE) = {}", name(), agg.ol_cnt_sum, agg.ol_rows)
        });
        let ytd = i128::from(row.ytd);
        c9.judge(ytd == agg.history, || {
            format!(
                "{}: D_YTD = {} but Σ H_AMOUNT = {} over {} HISTORY rows",
                name(),
                money(ytd),
                money(agg.history),
                agg.history_rows
            )
        });
    }

    [c2, c3, c4, c9]
}

/// Conditions 5 (O_CARRIER_ID null iff a NEW_ORDER row), 6 (O_OL_CNT = its lines) and 7
/// (OL_DELIVERY_D null iff O_CARRIER_ID null), per order; adds each order's delivered amount
/// to its customer's aggregate for condition 10.
fn judge_orders(orders: &BTreeMap<u64, OrderAgg>, customers: &mut BTreeMap<u64, CustomerAgg>) -> [Tally; 3] {
    let (mut c5, mut c6, mut c7) = (Tally::new(5), Tally::new(6), Tally::new(7));
    for (&key, agg) in orders {
        let Some(row) = agg.row else { continue };
        let name = || order_name(key);
        let carrier_null = row.carrier == 0;
        c5.judge(carrier_null == agg.new_order, || {
            if carrier_null {
                format!("{}: O_CARRIER_ID is null but the order has no NEW_ORDER row", name())
            } else {
                format!("{}: O_CARRIER_ID = {} but the order has a NEW_ORDER row", name(), row.carrier)
            }
        });
        let lines = agg.undelivered + agg.delivered;
        if agg.copies > 1 {
            c6.judge_many(0, 1, || format!("{}: {} ORDER rows", name(), agg.copies));
        }
        c6.judge(u32::from(row.ol_cnt) == lines, || {
            format!("{}: O_OL_CNT = {} but {lines} ORDER_LINE rows", name(), row.ol_cnt)
        });
        // Condition 7 is judged per order line: count each, name the lowest violating one.
        let (bad, first) =
            if carrier_null { (agg.delivered, agg.first_delivered) } else { (agg.undelivered, agg.first_undelivered) };
        c7.judge_many(u64::from(lines), u64::from(bad), || {
            let line = line_name(key, first.unwrap_or_default());
            if carrier_null {
                format!("{line}: OL_DELIVERY_D is set but O_CARRIER_ID is null")
            } else {
                format!("{line}: OL_DELIVERY_D is null but O_CARRIER_ID = {}", row.carrier)
            }
        });
        if agg.delivered_amount != 0 {
            let (w, d, _) = split_order(key);
            customers.entry(keys::customer(w, d, row.c_id)).or_default().delivered += agg.delivered_amount;
        }
    }
    [c5, c6, c7]
}

/// Conditions 10 (C_BALANCE = Σ delivered OL_AMOUNT − Σ H_AMOUNT) and 12 (C_BALANCE +
/// C_YTD_PAYMENT = Σ delivered OL_AMOUNT), per customer.
fn judge_customers(customers: &BTreeMap<u64, CustomerAgg>) -> [Tally; 2] {
    let (mut c10, mut c12) = (Tally::new(10), Tally::new(12));
    for (&key, agg) in customers {
        let Some(row) = agg.row else { continue };
        let name = || customer_name(key);
        if agg.copies > 1 {
            c10.judge_many(0, 1, || format!("{}: {} CUSTOMER rows", name(), agg.copies));
        }
        let balance = i128::from(row.balance);
        let expected = agg.delivered - agg.paid;
        c10.judge(balance == expected, || {
            format!(
                "{}: C_BALANCE = {} but Σ delivered OL_AMOUNT − Σ H_AMOUNT = {} − {} = {} ({} HISTORY rows)",
                name(),
                money(balance),
                money(agg.delivered),
                money(agg.paid),
                money(expected),
                agg.payments
            )
        });
        let ytd = i128::from(row.ytd_payment);
        c12.judge(balance + ytd == agg.delivered, || {
            format!(
                "{}: C_BALANCE + C_YTD_PAYMENT = {} + {} = {} but Σ delivered OL_AMOUNT = {}",
                name(),
                money(balance),
                money(ytd),
                money(balance + ytd),
                money(agg.delivered)
            )
        });
    }

    [c10, c12]
}

/// A condition being judged: counts and the first violation's description.
struct Tally {
    number: u8,
    checked: u64,
    violations: u64,
    first: Option<String>,
}

impl Tally {
    fn new(number: u8) -> Self {
        Tally { number, checked: 0, violations: 0, first: None }
    }

    /// Records one key examined; `describe` names it when it is the first violation.
    fn judge(&mut self, ok: bool, describe: impl FnOnce() -> String) {
        self.judge_many(1, u64::from(!ok), describe);
    }

    /// Records `checked` keys examined of which `bad` violate the condition.
    fn judge_many(&mut self, checked: u64, bad: u64, describe: impl FnOnce() -> String) {
        self.checked += checked;
        if bad > 0 {
            self.violations += bad;
            if self.first.is_none() {
                self.first = Some(describe());
            }
        }
    }

    fn into_result(self) -> ConditionResult {
        let description = CONDITIONS
            .iter()
            .find(|(n, _)| *n == self.number)
            .map(|(_, d)| *d)
            .expect("every tallied condition is listed");
        ConditionResult {
            number: self.number,
            description,
            passed: self.violations == 0,
            checked: self.checked,
            violations: self.violations,
            first_violation: self.first,
        }
    }
}

/// Integer cents as dollars: `-10.00`.
fn money(cents: i128) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let abs = cents.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// Inverse of [`keys::order`] (also of [`keys::customer`], which packs the same way).
fn split_order(key: u64) -> (u16, u8, u32) {
    let district = key >> 32;
    ((district >> 8) as u16, district as u8, key as u32)
}

fn district_name(key: u64) -> String {
    format!("district (w={}, d={})", key >> 8, key & 0xff)
}

fn order_name(key: u64) -> String {
    let (w, d, o) = split_order(key);
    format!("order (w={w}, d={d}, o={o})")
}

fn line_name(order: u64, number: u8) -> String {
    let (w, d, o) = split_order(order);
    format!("order line (w={w}, d={d}, o={o}, n={number})")
}

fn customer_name(key: u64) -> String {
    let (w, d, c) = split_order(key);
    format!("customer (w={w}, d={d}, c={c})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lean::LeanDb;
    use crate::schema::{Customer, District, History, NewOrder, Order, OrderLine, Warehouse};
    use bytemuck::Zeroable;

    const W: u16 = 1;
    const DATE: i64 = 1_000;

    /// One order of the tiny database: (district, order id, customer, carrier (0 = null),
    /// line amounts). An order with a carrier has all its lines delivered.
    type OrderSpec = (u8, u32, u32, u8, &'static [i64]);

    const ORDERS: [OrderSpec; 7] = [
        // District 1: two delivered orders (the first as loaded, amounts 0), three new ones.
        (1, 1, 1, 3, &[0, 0]),
        (1, 2, 2, 7, &[100, 250, 1_000]),
        (1, 3, 3, 0, &[500, 600]),
        (1, 4, 1, 0, &[10, 20, 30]),
        (1, 5, 2, 0, &[999]),
        // District 2: one delivered order, one new.
        (2, 1, 2, 1, &[4_200]),
        (2, 2, 1, 0, &[70, 80]),
    ];

    /// HISTORY rows: (H_D_ID, H_C_D_ID, H_C_ID, H_AMOUNT); all in warehouse 1. The loaded
    /// 10.00 per customer, a second payment, and one paid at district 1 for a district-2
    /// customer (D_YTD follows H_D_ID, the customer's balance follows H_C_D_ID).
    const PAYMENTS: [(u8, u8, u32, i64); 8] = [
        (1, 1, 1, 1_000),
        (1, 1, 2, 1_000),
        (1, 1, 3, 1_000),
        (2, 2, 1, 1_000),
        (2, 2, 2, 1_000),
        (2, 2, 3, 1_000),
        (1, 1, 2, 2_500),
        (1, 2, 3, 4_444),
    ];

    const CUSTOMERS_PER_DISTRICT: u32 = 3;

    /// The tiny database's rows, built consistent by construction.
    struct Rows {
        warehouse: Warehouse,
        districts: Vec<District>,
        customers: Vec<Customer>,
        history: Vec<History>,
        orders: Vec<Order>,
        new_orders: Vec<NewOrder>,
        lines: Vec<OrderLine>,
    }

    fn rows() -> Rows {
        let mut orders = Vec::new();
        let mut new_orders = Vec::new();
        let mut lines = Vec::new();
        let mut delivered = BTreeMap::<(u8, u32), i64>::new();
        for (d, o, c, carrier, amounts) in ORDERS {
            orders.push(Order {
                o_entry_d: DATE,
                o_id: o,
                o_c_id: c,
                o_w_id: W,
                o_d_id: d,
                o_carrier_id: carrier,
                o_ol_cnt: amounts.len() as u8,
                o_all_local: 1,
                ..Order::zeroed()
            });
            if carrier == 0 {
                new_orders.push(NewOrder { no_o_id: o, no_w_id: W, no_d_id: d, _pad: 0 });
            } else {
                *delivered.entry((d, c)).or_default() += amounts.iter().sum::<i64>();
            }
            for (n, &amount) in amounts.iter().enumerate() {
                lines.push(OrderLine {
                    ol_delivery_d: if carrier == 0 { 0 } else { DATE + 1 },
                    ol_amount: amount,
                    ol_o_id: o,
                    ol_i_id: 1,
                    ol_w_id: W,
                    ol_supply_w_id: W,
                    ol_d_id: d,
                    ol_number: n as u8 + 1,
                    ol_quantity: 5,
                    ..OrderLine::zeroed()
                });
            }
        }
        let history: Vec<History> = PAYMENTS
            .iter()
            .map(|&(d, c_d, c, amount)| History {
                h_amount: amount,
                h_date: DATE,
                h_c_id: c,
                h_c_w_id: W,
                h_w_id: W,
                h_c_d_id: c_d,
                h_d_id: d,
                ..History::zeroed()
            })
            .collect();
        let paid = |d: u8, c: u32| -> i64 {
            history.iter().filter(|h| (h.h_c_d_id, h.h_c_id) == (d, c)).map(|h| h.h_amount).sum()
        };
        let d_ytd = |d: u8| -> i64 { history.iter().filter(|h| h.h_d_id == d).map(|h| h.h_amount).sum() };
        let mut customers = Vec::new();
        for d in 1..=2u8 {
            for c in 1..=CUSTOMERS_PER_DISTRICT {
                let ytd = paid(d, c);
                customers.push(Customer {
                    c_id: c,
                    c_w_id: W,
                    c_d_id: d,
                    c_ytd_payment: ytd,
                    c_balance: delivered.get(&(d, c)).copied().unwrap_or(0) - ytd,
                    c_payment_cnt: 1,
                    ..Customer::zeroed()
                });
            }
        }
        let districts: Vec<District> = (1..=2u8)
            .map(|d| District {
                d_ytd: d_ytd(d),
                d_next_o_id: ORDERS.iter().filter(|o| o.0 == d).map(|o| o.1).max().unwrap() + 1,
                d_w_id: W,
                d_id: d,
                ..District::zeroed()
            })
            .collect();
        let warehouse = Warehouse { w_ytd: districts.iter().map(|d| d.d_ytd).sum(), w_id: W, ..Warehouse::zeroed() };
        Rows { warehouse, districts, customers, history, orders, new_orders, lines }
    }

    impl Rows {
        /// Bulk-loads the rows into `db`: HISTORY when `history`, every other table when `rest`.
        fn load(&self, db: &mut LeanDb, history: bool, rest: bool) {
            if history {
                self.history.iter().for_each(|r| db.insert::<t::Histories>(r).unwrap());
            }
            if !rest {
                return;
            }
            db.insert::<t::Warehouses>(&self.warehouse).unwrap();
            self.districts.iter().for_each(|r| db.insert::<t::Districts>(r).unwrap());
            self.customers.iter().for_each(|r| db.insert::<t::Customers>(r).unwrap());
            self.orders.iter().for_each(|r| db.insert::<t::Orders>(r).unwrap());
            self.new_orders.iter().for_each(|r| db.insert::<t::NewOrders>(r).unwrap());
            self.lines.iter().for_each(|r| db.insert::<t::OrderLines>(r).unwrap());
        }
    }

    fn tiny() -> LeanDb {
        let mut db = LeanDb::new();
        rows().load(&mut db, true, true);
        db
    }

    fn failing(report: &CheckReport) -> Vec<u8> {
        report.failed().map(|c| c.number).collect()
    }

    /// Asserts that exactly condition `number` fails and that its first violation is `first`.
    fn assert_only(db: &mut LeanDb, number: u8, first: &str) {
        let report = check(db);
        assert_eq!(failing(&report), [number], "{report}");
        let c = report.condition(number).unwrap();
        assert_eq!(c.first_violation.as_deref(), Some(first), "{report}");
        assert!(report.to_string().contains(&format!("FAIL {}", c.description)), "{report}");
        assert!(report.to_string().contains(first), "{report}");
    }

    fn history(d: u8, c_d: u8, c: u32, amount: i64) -> History {
        History { h_amount: amount, h_c_id: c, h_c_w_id: W, h_w_id: W, h_c_d_id: c_d, h_d_id: d, ..History::zeroed() }
    }

    #[test]
    fn consistent_database_passes_every_condition() {
        let report = check(&mut tiny());
        assert!(report.all_passed(), "{report}");
        let numbers: Vec<u8> = report.conditions.iter().map(|c| c.number).collect();
        assert_eq!(numbers, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12]);
        let checked: Vec<u64> = report.conditions.iter().map(|c| c.checked).collect();
        // 1 warehouse, 2 districts, 7 orders, 14 order lines, 6 customers.
        assert_eq!(checked, [1, 2, 2, 2, 7, 7, 14, 1, 2, 6, 6]);
        assert!(report.conditions.iter().all(|c| c.violations == 0 && c.first_violation.is_none()));
        let text = report.to_string();
        assert_eq!(text.lines().count(), 11);
        assert!(text.lines().all(|l| l.contains(" PASS ")), "{text}");
    }

    #[test]
    fn empty_database_passes_vacuously() {
        let report = check(&mut LeanDb::new());
        assert!(report.all_passed());
        assert!(report.conditions.iter().all(|c| c.checked == 0));
    }

    #[test]
    fn condition_1_fails_when_district_ytds_do_not_sum_to_w_ytd() {
        // 8 and 9 together imply 1 when every HISTORY row's district exists, so to break 1
        // alone the extra W_YTD is paid at a district the checker has no row for (district 9,
        // customer (1, 9, 1)): 8 still holds, 9 and 10 have nothing to judge.
        let mut db = tiny();
        db.update::<t::Warehouses, _>(keys::warehouse(W), |w| w.w_ytd += 500).unwrap();
        db.insert::<t::Histories>(&history(9, 9, 1, 500)).unwrap();
        assert_only(&mut db, 1, "warehouse 1: W_YTD = 134.44 but Σ D_YTD = 129.44 over 2 districts");
    }

    #[test]
    fn condition_2_fails_when_d_next_o_id_skips() {
        let mut db = tiny();
        db.update::<t::Districts, _>(keys::district(W, 2), |d| d.d_next_o_id += 1).unwrap();
        assert_only(&mut db, 2, "district (w=1, d=2): D_NEXT_O_ID-1 = 3 but max(O_ID) = 2");
    }

    #[test]
    fn condition_2_compares_max_no_o_id() {
        // NEW_ORDER rows deleted from the top (newest first) leave max(NO_O_ID) behind; the
        // orders are made delivered so that only condition 2 notices.
        let mut db = tiny();
        db.delete::<t::NewOrders>(keys::new_order(W, 1, 5)).unwrap();
        db.update::<t::Orders, _>(keys::order(W, 1, 5), |o| o.o_carrier_id = 2).unwrap();
        db.update::<t::OrderLines, _>(keys::order_line(W, 1, 5, 1), |l| l.ol_delivery_d = DATE).unwrap();
        db.update::<t::Customers, _>(keys::customer(W, 1, 2), |c| c.c_balance += 999).unwrap();
        assert_only(&mut db, 2, "district (w=1, d=1): D_NEXT_O_ID-1 = 5 but max(NO_O_ID) = 4");
    }

    #[test]
    fn condition_2_allows_a_drained_district() {
        // Delivery of district 2's only new order: no NEW_ORDER rows remain (no max(NO_O_ID)).
        let mut db = tiny();
        db.delete::<t::NewOrders>(keys::new_order(W, 2, 2)).unwrap();
        db.update::<t::Orders, _>(keys::order(W, 2, 2), |o| o.o_carrier_id = 4).unwrap();
        for n in 1..=2 {
            db.update::<t::OrderLines, _>(keys::order_line(W, 2, 2, n), |l| l.ol_delivery_d = DATE).unwrap();
        }
        db.update::<t::Customers, _>(keys::customer(W, 2, 1), |c| c.c_balance += 150).unwrap();
        let report = check(&mut db);
        assert!(report.all_passed(), "{report}");
    }

    #[test]
    fn condition_3_fails_on_a_gap_in_new_order() {
        // Delivery out of order: order 4 delivered before order 3, consistently otherwise.
        let mut db = tiny();
        db.delete::<t::NewOrders>(keys::new_order(W, 1, 4)).unwrap();
        db.update::<t::Orders, _>(keys::order(W, 1, 4), |o| o.o_carrier_id = 2).unwrap();
        for n in 1..=3 {
            db.update::<t::OrderLines, _>(keys::order_line(W, 1, 4, n), |l| l.ol_delivery_d = DATE).unwrap();
        }
        db.update::<t::Customers, _>(keys::customer(W, 1, 1), |c| c.c_balance += 60).unwrap();
        assert_only(
            &mut db,
            3,
            "district (w=1, d=1): max(NO_O_ID) − min(NO_O_ID) + 1 = 5 − 3 + 1 = 3 but count(NEW_ORDER) = 2",
        );
    }

    #[test]
    fn condition_4_fails_on_an_order_line_without_its_order() {
        let mut db = tiny();
        let orphan = OrderLine { ol_o_id: 99, ol_w_id: W, ol_d_id: 2, ol_number: 1, ..OrderLine::zeroed() };
        db.insert::<t::OrderLines>(&orphan).unwrap();
        assert_only(&mut db, 4, "district (w=1, d=2): Σ O_OL_CNT = 3 but count(ORDER_LINE) = 4");
    }

    #[test]
    fn condition_5_fails_when_an_undelivered_order_lost_its_new_order_row() {
        // The oldest NEW_ORDER row of district 1 vanishes: ranges and maxima still agree.
        let mut db = tiny();
        db.delete::<t::NewOrders>(keys::new_order(W, 1, 3)).unwrap();
        assert_only(&mut db, 5, "order (w=1, d=1, o=3): O_CARRIER_ID is null but the order has no NEW_ORDER row");
    }

    #[test]
    fn condition_5_fails_when_a_new_order_has_a_carrier() {
        // The order and all its lines delivered, but its NEW_ORDER row left behind.
        let mut db = tiny();
        db.update::<t::Orders, _>(keys::order(W, 1, 3), |o| o.o_carrier_id = 6).unwrap();
        for n in 1..=2 {
            db.update::<t::OrderLines, _>(keys::order_line(W, 1, 3, n), |l| l.ol_delivery_d = DATE).unwrap();
        }
        db.update::<t::Customers, _>(keys::customer(W, 1, 3), |c| c.c_balance += 1_100).unwrap();
        assert_only(&mut db, 5, "order (w=1, d=1, o=3): O_CARRIER_ID = 6 but the order has a NEW_ORDER row");
    }

    #[test]
    fn condition_6_fails_when_a_line_moves_between_orders() {
        // Order 4's last line becomes order 5's second: the district's totals still agree.
        let mut db = tiny();
        let mut line = db.delete::<t::OrderLines>(keys::order_line(W, 1, 4, 3)).unwrap().unwrap();
        line.ol_o_id = 5;
        line.ol_number = 2;
        db.insert::<t::OrderLines>(&line).unwrap();
        let report = check(&mut db);
        assert_eq!(report.condition(6).unwrap().violations, 2);
        assert_only(&mut db, 6, "order (w=1, d=1, o=4): O_OL_CNT = 3 but 2 ORDER_LINE rows");
    }

    #[test]
    fn condition_7_fails_on_an_undelivered_line_of_a_delivered_order() {
        // A zero-amount line (as loaded), so the customer's delivered total is unchanged.
        let mut db = tiny();
        db.update::<t::OrderLines, _>(keys::order_line(W, 1, 1, 2), |l| l.ol_delivery_d = 0).unwrap();
        assert_only(&mut db, 7, "order line (w=1, d=1, o=1, n=2): OL_DELIVERY_D is null but O_CARRIER_ID = 3");
    }

    #[test]
    fn condition_7_fails_on_a_delivered_line_of_an_undelivered_order() {
        let mut db = tiny();
        for n in [3, 2] {
            db.update::<t::OrderLines, _>(keys::order_line(W, 1, 4, n), |l| {
                l.ol_delivery_d = DATE;
                l.ol_amount = 0;
            })
            .unwrap();
        }
        // The lines' amounts left the order: Σ delivered is unchanged (zero) for the customer.
        let report = check(&mut db);
        assert_eq!(report.condition(7).unwrap().violations, 2);
        assert_only(&mut db, 7, "order line (w=1, d=1, o=4, n=2): OL_DELIVERY_D is set but O_CARRIER_ID is null");
    }

    #[test]
    fn condition_8_fails_on_history_beyond_w_ytd() {
        // As for condition 1: the payment's district and customer have no rows, so only the
        // warehouse-level sum sees it.
        let mut db = tiny();
        db.insert::<t::Histories>(&history(9, 9, 1, 500)).unwrap();
        assert_only(&mut db, 8, "warehouse 1: W_YTD = 129.44 but Σ H_AMOUNT = 134.44 over 9 HISTORY rows");
    }

    #[test]
    fn condition_9_fails_when_d_ytd_is_credited_to_the_wrong_district() {
        let mut db = tiny();
        db.update::<t::Districts, _>(keys::district(W, 1), |d| d.d_ytd += 700).unwrap();
        db.update::<t::Districts, _>(keys::district(W, 2), |d| d.d_ytd -= 700).unwrap();
        let report = check(&mut db);
        assert_eq!(report.condition(9).unwrap().violations, 2);
        assert_only(&mut db, 9, "district (w=1, d=1): D_YTD = 106.44 but Σ H_AMOUNT = 99.44 over 5 HISTORY rows");
    }

    #[test]
    fn condition_10_fails_when_balance_and_ytd_payment_disagree_with_history() {
        let mut db = tiny();
        db.update::<t::Customers, _>(keys::customer(W, 1, 2), |c| {
            c.c_balance += 300;
            c.c_ytd_payment -= 300;
        })
        .unwrap();
        assert_only(
            &mut db,
            10,
            "customer (w=1, d=1, c=2): C_BALANCE = -18.50 but Σ delivered OL_AMOUNT − Σ H_AMOUNT \
             = 13.50 − 35.00 = -21.50 (2 HISTORY rows)",
        );
    }

    #[test]
    fn condition_12_fails_when_ytd_payment_is_not_updated() {
        let mut db = tiny();
        db.update::<t::Customers, _>(keys::customer(W, 2, 3), |c| c.c_ytd_payment -= 4_444).unwrap();
        assert_only(
            &mut db,
            12,
            "customer (w=1, d=2, c=3): C_BALANCE + C_YTD_PAYMENT = -54.44 + 10.00 = -44.44 \
             but Σ delivered OL_AMOUNT = 0.00",
        );
    }

    #[test]
    fn a_lost_w_ytd_update_fails_conditions_1_and_8() {
        let mut db = tiny();
        db.update::<t::Warehouses, _>(keys::warehouse(W), |w| w.w_ytd -= 1).unwrap();
        assert_eq!(failing(&check(&mut db)), [1, 8]);
    }

    #[test]
    fn a_payment_without_its_history_row_fails_conditions_8_9_and_10() {
        let mut db = tiny();
        db.update::<t::Warehouses, _>(keys::warehouse(W), |w| w.w_ytd += 100).unwrap();
        db.update::<t::Districts, _>(keys::district(W, 2), |d| d.d_ytd += 100).unwrap();
        db.update::<t::Customers, _>(keys::customer(W, 2, 2), |c| {
            c.c_balance -= 100;
            c.c_ytd_payment += 100;
        })
        .unwrap();
        assert_eq!(failing(&check(&mut db)), [8, 9, 10]);
    }

    #[test]
    fn history_in_another_partition_joins_when_both_are_added() {
        let rows = rows();
        let mut main = LeanDb::new();
        let mut other = LeanDb::new();
        rows.load(&mut main, false, true);
        rows.load(&mut other, true, false);
        assert_eq!(failing(&check(&mut main)), [8, 9, 10]);
        for other_first in [false, true] {
            let mut checker = Checker::new();
            if other_first {
                checker.add(&mut other);
            }
            checker.add(&mut main);
            if !other_first {
                checker.add(&mut other);
            }
            let report = checker.finish();
            assert!(report.all_passed(), "{report}");
        }
    }

    #[test]
    fn money_prints_exact_cents() {
        assert_eq!(money(-1_000), "-10.00");
        assert_eq!(money(5), "0.05");
        assert_eq!(money(-5), "-0.05");
        assert_eq!(money(30_000_000), "300000.00");
    }
}
