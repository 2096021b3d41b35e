//! The TPC-C initial population (clause 4.3.3.1), written through the [`Storage`] trait as a
//! bulk load (outside any transaction).
//!
//! Guarantees:
//! - deterministic: the rows are a pure function of the seed;
//! - partitionable: ITEM comes from a generator seeded by the seed alone, and every row of
//!   warehouse `w` (WAREHOUSE, DISTRICT, CUSTOMER, HISTORY, ORDER, NEW_ORDER, ORDER_LINE,
//!   STOCK) from a generator seeded by `(seed, w)` alone, so loading one warehouse on its own
//!   gives exactly the rows a load of many warehouses gives for it. The only shared value is
//!   the C_LAST constant C_LOAD, [`NuRandConstants::for_load`]`(seed)`;
//! - the loaded database satisfies the consistency conditions of clause 3.3.2;
//! - at [`Scale::TPCC`] (what every function without `_scaled` loads) the rows are the
//!   clause's cardinalities, bit for bit what they always were. A smaller [`Scale`] shrinks
//!   ITEM/STOCK and the customers and orders of each district for simulation and tests only:
//!   such a population is **not TPC-C compliant** (clause 4.3.3.1 fixes the sizes) and no
//!   measurement may be reported on it.

use std::ops::RangeInclusive;

use crate::error::LoadError;
use crate::procedures::DISTRICTS_PER_WAREHOUSE;
use crate::rng::{last_name, NuRandConstants, Rng, NURAND_A_C_LAST};
use crate::schema::{t, Address, Customer, District, History, Item, NewOrder, Order, OrderLine, Stock, Warehouse};
use crate::{Storage, StorageError};

/// The "current date" of the load (C_SINCE, O_ENTRY_D, H_DATE and OL_DELIVERY_D of delivered
/// lines): 2008-06-10 00:00:00 UTC, the opening of SIGMOD 2008, in seconds since the Unix
/// epoch. Any run timestamp is a parameter; this is only the load's fixed date.
pub const LOAD_TIMESTAMP: i64 = 1_213_056_000;

/// ITEM rows (clause 4.3.3.1; shared by all warehouses).
pub const ITEMS: u32 = crate::procedures::ITEMS;
/// STOCK rows per warehouse (one per item).
pub const STOCK_PER_WAREHOUSE: u32 = ITEMS;
/// CUSTOMER rows (and ORDER rows) per district.
pub const CUSTOMERS_PER_DISTRICT: u32 = crate::procedures::CUSTOMERS_PER_DISTRICT;
/// ORDERs per district.
pub const ORDERS_PER_DISTRICT: u32 = 3_000;
/// The first undelivered order of each district at load (orders 2101..=3000 have a NEW_ORDER).
pub const FIRST_NEW_ORDER_ID: u32 = 2_101;
/// W_YTD at load: 300,000.00.
pub const W_YTD_LOAD_CENTS: i64 = 30_000_000;
/// D_YTD at load: 30,000.00.
pub const D_YTD_LOAD_CENTS: i64 = 3_000_000;
/// C_CREDIT_LIM at load: 50,000.00.
pub const C_CREDIT_LIM_CENTS: i64 = 5_000_000;
/// C_BALANCE at load: −10.00.
pub const C_BALANCE_LOAD_CENTS: i64 = -1_000;
/// C_YTD_PAYMENT and H_AMOUNT at load: 10.00.
pub const C_YTD_PAYMENT_LOAD_CENTS: i64 = 1_000;

/// The size of a population: ITEM rows (and STOCK rows per warehouse) and CUSTOMER rows per
/// district (and ORDER rows: one per customer, as clause 4.3.3.1 has it). [`Scale::TPCC`] is
/// the clause's population and the default; anything smaller is for simulation and tests
/// only and is **not TPC-C compliant**.
///
/// Derived sizes keep the clause's proportions: orders per district = customers, the first
/// undelivered order is `customers × 7/10 + 1` (2,101 for 3,000), and C_LAST numbers run
/// over `0..=min(999, customers − 1)` so that every last name the generator draws was loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scale {
    /// ITEM rows, and STOCK rows per warehouse (clause: 100,000).
    pub items: u32,
    /// CUSTOMER rows per district, and ORDER rows per district (clause: 3,000).
    pub customers_per_district: u32,
}

impl Scale {
    /// Clause 4.3.3.1's population: 100,000 items, 3,000 customers per district.
    pub const TPCC: Scale = Scale { items: ITEMS, customers_per_district: CUSTOMERS_PER_DISTRICT };

    /// A tiny population for the whole-cluster simulator (500 items, 30 customers per
    /// district): loads in about a millisecond. Not TPC-C compliant.
    pub const fn tiny() -> Scale {
        Scale { items: 500, customers_per_district: 30 }
    }

    /// ORDER rows per district at load (one per customer).
    pub const fn orders_per_district(self) -> u32 {
        self.customers_per_district
    }

    /// The first order of each district with a NEW_ORDER row at load (2,101 at TPC-C scale).
    pub const fn first_new_order_id(self) -> u32 {
        self.customers_per_district * 7 / 10 + 1
    }

    /// The largest C_LAST number loaded (999 at TPC-C scale): the first 1,000 customers of a
    /// district take the numbers 0..=999 in order, so a smaller district has only its own.
    pub const fn last_name_max(self) -> u32 {
        if self.customers_per_district >= 1_000 {
            999
        } else {
            self.customers_per_district - 1
        }
    }

    /// D_YTD at load: the district's customers' HISTORY amounts (30,000.00 at TPC-C scale),
    /// so that conditions 8 and 9 of clause 3.3.2 hold at any scale.
    pub const fn d_ytd_load_cents(self) -> i64 {
        self.customers_per_district as i64 * C_YTD_PAYMENT_LOAD_CENTS
    }

    /// W_YTD at load: its districts' D_YTD (300,000.00 at TPC-C scale).
    pub const fn w_ytd_load_cents(self) -> i64 {
        DISTRICTS_PER_WAREHOUSE as i64 * self.d_ytd_load_cents()
    }

    /// Whether this is the clause's population.
    pub fn is_tpcc(self) -> bool {
        self == Scale::TPCC
    }

    /// Rows of one district: the district, its customers and their history, its orders, new
    /// orders and (expected) order lines at 10 per order, the mean of 5–15.
    const fn district_rows_expected(self) -> u64 {
        let orders = self.orders_per_district() as u64;
        1 + self.customers_per_district as u64 * 2
            + orders
            + (orders - self.first_new_order_id() as u64 + 1)
            + orders * 10
    }

    /// Rows of one warehouse as expected (order lines are random, see [`expected_rows`]).
    const fn warehouse_rows_expected(self) -> u64 {
        1 + self.items as u64 + DISTRICTS_PER_WAREHOUSE as u64 * self.district_rows_expected()
    }

    /// Panics unless there is at least one item and one customer per district.
    fn assert_valid(self) {
        assert!(self.items >= 1 && self.customers_per_district >= 1, "an empty population: {self:?}");
    }
}

// The clause's derived sizes are the constants above.
const _: () = assert!(
    Scale::TPCC.orders_per_district() == ORDERS_PER_DISTRICT
        && Scale::TPCC.first_new_order_id() == FIRST_NEW_ORDER_ID
        && Scale::TPCC.items == STOCK_PER_WAREHOUSE
        && Scale::TPCC.last_name_max() == 999
        && Scale::TPCC.d_ytd_load_cents() == D_YTD_LOAD_CENTS
        && Scale::TPCC.w_ytd_load_cents() == W_YTD_LOAD_CENTS
);

impl Default for Scale {
    fn default() -> Scale {
        Scale::TPCC
    }
}

/// Stream identifier of ITEM's generator; warehouse `w` uses stream `w` (ids start at 1).
const STREAM_ITEMS: u64 = 0x4954_454D_0000_0000; // "ITEM"

/// The number of rows a load of `warehouses` warehouses is expected to insert: 100,000 items
/// plus, per warehouse, 1 + 10 + 30,000 × 3 + 9,000 + 100,000 rows and 300,000 order lines
/// (the expectation; the actual count varies with the random O_OL_CNT).
pub fn expected_rows(warehouses: u16) -> u64 {
    expected_rows_scaled(warehouses, Scale::TPCC)
}

/// [`expected_rows`] for a population of `scale`.
pub fn expected_rows_scaled(warehouses: u16, scale: Scale) -> u64 {
    scale.items as u64 + warehouses as u64 * scale.warehouse_rows_expected()
}

/// Progress of [`load_database`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadProgress {
    /// Rows inserted so far.
    pub rows_loaded: u64,
    /// Rows the whole load is now expected to insert: the rows loaded so far plus the
    /// expectation for the rest. It equals `rows_loaded` in the final report.
    pub rows_total: u64,
}

/// Writes a random a-string into `dst` and, with probability 10%, "ORIGINAL" at a random
/// position in it (I_DATA, S_DATA: clause 4.3.3.1).
fn data_with_original(rng: &mut Rng, dst: &mut [u8; 50]) {
    let len = rng.alnum_string(26, 50, dst);
    if rng.percent(10) {
        let at = rng.uniform(0, (len - 8) as u64) as usize;
        dst[at..at + 8].copy_from_slice(b"ORIGINAL");
    }
}

/// An address block: streets and city a-strings [10..20], state a-string [2], zip per
/// clause 4.3.2.7 (four random digits followed by "11111").
fn address(rng: &mut Rng) -> Address {
    let mut a = Address { street_1: [0; 20], street_2: [0; 20], city: [0; 20], state: [0; 2], zip: [0; 9] };
    rng.alnum_string(10, 20, &mut a.street_1);
    rng.alnum_string(10, 20, &mut a.street_2);
    rng.alnum_string(10, 20, &mut a.city);
    rng.alnum_string(2, 2, &mut a.state);
    rng.numeric_string(4, 4, &mut a.zip[..4]);
    a.zip[4..].copy_from_slice(b"11111");
    a
}

/// Loads ITEM: 100,000 rows (I_ID 1..=100,000, I_IM_ID 1–10,000, I_NAME a-string [14..24],
/// I_PRICE 1.00–100.00, I_DATA a-string [26..50] with "ORIGINAL" in 10%).
pub fn load_items<S: Storage>(db: &mut S, seed: u64) -> Result<(), StorageError> {
    load_items_scaled(db, seed, Scale::TPCC)
}

/// [`load_items`] for a population of `scale` (I_ID 1..=`scale.items`; item `i` is the same
/// row at every scale that has it).
pub fn load_items_scaled<S: Storage>(db: &mut S, seed: u64, scale: Scale) -> Result<(), StorageError> {
    scale.assert_valid();
    let mut rng = Rng::stream(seed, STREAM_ITEMS);
    db.reserve::<t::Items>(scale.items as usize);
    for i_id in 1..=scale.items {
        let mut row = Item { i_price: 0, i_id, i_im_id: 0, i_name: [0; 24], i_data: [0; 50], _pad: [0; 6] };
        row.i_im_id = rng.uniform_u32(1, 10_000);
        rng.alnum_string(14, 24, &mut row.i_name);
        row.i_price = rng.uniform(100, 10_000) as i64;
        data_with_original(&mut rng, &mut row.i_data);
        db.insert::<t::Items>(&row)?;
    }
    Ok(())
}

/// Loads warehouse `w_id` and everything that belongs to it: WAREHOUSE, 10 DISTRICTs, 30,000
/// CUSTOMERs and HISTORY rows, 30,000 ORDERs, 9,000 NEW_ORDERs, their ORDER_LINEs and 100,000
/// STOCK rows. Does not load ITEM (see [`load_items`]).
///
/// Panics if `w_id` is 0 (warehouse ids start at 1).
pub fn load_warehouse<S: Storage>(db: &mut S, w_id: u16, seed: u64) -> Result<(), StorageError> {
    load_warehouse_reporting(db, w_id, seed, Scale::TPCC, &mut |_| {})
}

/// [`load_warehouse`] for a population of `scale`.
pub fn load_warehouse_scaled<S: Storage>(db: &mut S, w_id: u16, seed: u64, scale: Scale) -> Result<(), StorageError> {
    load_warehouse_reporting(db, w_id, seed, scale, &mut |_| {})
}

/// [`load_warehouse`], calling `rows_done(n)` after each part (the stock, then each district)
/// with the number of rows that part inserted.
fn load_warehouse_reporting<S: Storage>(
    db: &mut S,
    w_id: u16,
    seed: u64,
    scale: Scale,
    rows_done: &mut dyn FnMut(u64),
) -> Result<(), StorageError> {
    assert!(w_id >= 1, "warehouse ids start at 1");
    scale.assert_valid();
    let c_load = NuRandConstants::for_load(seed);
    let mut rng = Rng::stream(seed, u64::from(w_id));

    db.reserve::<t::Warehouses>(1);
    db.reserve::<t::Districts>(DISTRICTS_PER_WAREHOUSE as usize);
    let customers = DISTRICTS_PER_WAREHOUSE as usize * scale.customers_per_district as usize;
    let orders = DISTRICTS_PER_WAREHOUSE as usize * scale.orders_per_district() as usize;
    db.reserve::<t::Customers>(customers);
    db.reserve::<t::Histories>(customers);
    db.reserve::<t::Orders>(orders);
    db.reserve::<t::NewOrders>(
        DISTRICTS_PER_WAREHOUSE as usize * (scale.orders_per_district() - scale.first_new_order_id() + 1) as usize,
    );
    db.reserve::<t::OrderLines>(orders * 10);
    db.reserve::<t::Stocks>(scale.items as usize);

    // WAREHOUSE: W_NAME a-string [6..10], address, W_TAX 0.0000–0.2000, W_YTD 300,000.00.
    let mut w = Warehouse {
        w_ytd: scale.w_ytd_load_cents(),
        w_tax: 0,
        w_id,
        w_name: [0; 10],
        w_address: address(&mut rng),
        _pad: [0; 1],
    };
    rng.alnum_string(6, 10, &mut w.w_name);
    w.w_tax = rng.uniform_u32(0, 2_000);
    db.insert::<t::Warehouses>(&w)?;

    load_stock(db, &mut rng, w_id, scale)?;
    rows_done(1 + scale.items as u64);

    for d_id in 1..=DISTRICTS_PER_WAREHOUSE {
        let rows = load_district(db, &mut rng, w_id, d_id, c_load.c_last, scale)?;
        rows_done(rows);
    }
    Ok(())
}

/// STOCK: S_I_ID 1..=100,000, S_QUANTITY 10–100, S_DIST_01..10 a-strings [24], S_YTD,
/// S_ORDER_CNT, S_REMOTE_CNT 0, S_DATA a-string [26..50] with "ORIGINAL" in 10%.
fn load_stock<S: Storage>(db: &mut S, rng: &mut Rng, w_id: u16, scale: Scale) -> Result<(), StorageError> {
    for s_i_id in 1..=scale.items {
        let mut s = Stock {
            s_i_id,
            s_quantity: 0,
            s_ytd: 0,
            s_order_cnt: 0,
            s_remote_cnt: 0,
            s_w_id: w_id,
            s_dist: [[0; 24]; 10],
            s_data: [0; 50],
        };
        s.s_quantity = rng.uniform(10, 100) as i32;
        for dist in &mut s.s_dist {
            rng.alnum_string(24, 24, dist);
        }
        data_with_original(rng, &mut s.s_data);
        db.insert::<t::Stocks>(&s)?;
    }
    Ok(())
}

/// One district with its customers, history, orders, new orders and order lines; returns the
/// number of rows inserted.
fn load_district<S: Storage>(
    db: &mut S,
    rng: &mut Rng,
    w_id: u16,
    d_id: u8,
    c_last_load: u32,
    scale: Scale,
) -> Result<u64, StorageError> {
    let mut rows = 0u64;
    // DISTRICT: D_NAME a-string [6..10], address, D_TAX 0.0000–0.2000, D_YTD 30,000.00,
    // D_NEXT_O_ID 3001.
    let mut d = District {
        d_ytd: scale.d_ytd_load_cents(),
        d_tax: 0,
        d_next_o_id: scale.orders_per_district() + 1,
        d_w_id: w_id,
        d_id,
        d_name: [0; 10],
        d_address: address(rng),
        _pad: [0; 4],
    };
    rng.alnum_string(6, 10, &mut d.d_name);
    d.d_tax = rng.uniform_u32(0, 2_000);
    db.insert::<t::Districts>(&d)?;
    rows += 1;

    rows += load_customers(db, rng, w_id, d_id, c_last_load, scale)?;
    rows += load_orders(db, rng, w_id, d_id, scale)?;
    Ok(rows)
}

/// A district's CUSTOMER rows and one HISTORY row per customer; returns the rows inserted.
fn load_customers<S: Storage>(
    db: &mut S,
    rng: &mut Rng,
    w_id: u16,
    d_id: u8,
    c_last_load: u32,
    scale: Scale,
) -> Result<u64, StorageError> {
    let mut rows = 0u64;
    // CUSTOMER and one HISTORY row per customer.
    for c_id in 1..=scale.customers_per_district {
        let mut c = Customer {
            c_since: LOAD_TIMESTAMP,
            c_credit_lim: C_CREDIT_LIM_CENTS,
            c_balance: C_BALANCE_LOAD_CENTS,
            c_ytd_payment: C_YTD_PAYMENT_LOAD_CENTS,
            c_id,
            c_discount: 0,
            c_payment_cnt: 1,
            c_delivery_cnt: 0,
            c_w_id: w_id,
            c_d_id: d_id,
            c_first: [0; 16],
            c_middle: *b"OE",
            c_last: [0; 16],
            c_address: Address { street_1: [0; 20], street_2: [0; 20], city: [0; 20], state: [0; 2], zip: [0; 9] },
            c_phone: [0; 16],
            c_credit: *b"GC",
            c_data: [0; 500],
            _pad: [0; 6],
        };
        let name_num =
            if c_id <= 1_000 { c_id - 1 } else { rng.nurand(NURAND_A_C_LAST, 0, scale.last_name_max(), c_last_load) };
        last_name(name_num, &mut c.c_last);
        rng.alnum_string(8, 16, &mut c.c_first);
        c.c_address = address(rng);
        rng.numeric_string(16, 16, &mut c.c_phone);
        if rng.percent(10) {
            c.c_credit = *b"BC";
        }
        c.c_discount = rng.uniform_u32(0, 5_000);
        rng.alnum_string(300, 500, &mut c.c_data);
        db.insert::<t::Customers>(&c)?;

        let mut h = History {
            h_amount: C_YTD_PAYMENT_LOAD_CENTS,
            h_date: LOAD_TIMESTAMP,
            h_c_id: c_id,
            h_c_w_id: w_id,
            h_w_id: w_id,
            h_c_d_id: d_id,
            h_d_id: d_id,
            h_data: [0; 24],
            _pad: [0; 6],
        };
        rng.alnum_string(12, 24, &mut h.h_data);
        db.insert::<t::Histories>(&h)?;
        rows += 2;
    }

    Ok(rows)
}

/// A district's ORDER rows with their ORDER_LINE rows, and NEW_ORDER rows for the
/// undelivered ones; returns the rows inserted.
fn load_orders<S: Storage>(db: &mut S, rng: &mut Rng, w_id: u16, d_id: u8, scale: Scale) -> Result<u64, StorageError> {
    let mut rows = 0u64;
    let first_new_order_id = scale.first_new_order_id();
    // ORDER, NEW_ORDER and ORDER_LINE.
    let customers = rng.permutation(scale.customers_per_district);
    for o_id in 1..=scale.orders_per_district() {
        let delivered = o_id < first_new_order_id;
        let o = Order {
            o_entry_d: LOAD_TIMESTAMP,
            o_id,
            o_c_id: customers[(o_id - 1) as usize],
            o_w_id: w_id,
            o_d_id: d_id,
            o_carrier_id: if delivered { rng.uniform(1, 10) as u8 } else { 0 },
            o_ol_cnt: rng.uniform(5, 15) as u8,
            o_all_local: 1,
            _pad: [0; 2],
        };
        db.insert::<t::Orders>(&o)?;
        rows += 1;
        for ol_number in 1..=o.o_ol_cnt {
            let mut ol = OrderLine {
                ol_delivery_d: if delivered { o.o_entry_d } else { 0 },
                ol_amount: 0,
                ol_o_id: o_id,
                ol_i_id: rng.uniform_u32(1, scale.items),
                ol_w_id: w_id,
                ol_supply_w_id: w_id,
                ol_d_id: d_id,
                ol_number,
                ol_quantity: 5,
                ol_dist_info: [0; 24],
                _pad: 0,
            };
            if !delivered {
                ol.ol_amount = rng.uniform(1, 999_999) as i64;
            }
            rng.alnum_string(24, 24, &mut ol.ol_dist_info);
            db.insert::<t::OrderLines>(&ol)?;
            rows += 1;
        }
        if !delivered {
            db.insert::<t::NewOrders>(&NewOrder { no_o_id: o_id, no_w_id: w_id, no_d_id: d_id, _pad: 0 })?;
            rows += 1;
        }
    }
    Ok(rows)
}

/// Loads ITEM and then every warehouse of `warehouses`, calling `progress` after the items,
/// after each warehouse's stock and after each district (about a dozen reports per warehouse).
pub fn load_database<S: Storage>(
    db: &mut S,
    warehouses: RangeInclusive<u16>,
    seed: u64,
    progress: &mut dyn FnMut(LoadProgress),
) -> Result<(), LoadError> {
    load_database_scaled(db, warehouses, seed, Scale::TPCC, progress)
}

/// [`load_database`] for a population of `scale` (simulation and tests only unless
/// [`Scale::TPCC`]).
pub fn load_database_scaled<S: Storage>(
    db: &mut S,
    warehouses: RangeInclusive<u16>,
    seed: u64,
    scale: Scale,
    progress: &mut dyn FnMut(LoadProgress),
) -> Result<(), LoadError> {
    let (start, end) = (*warehouses.start(), *warehouses.end());
    if warehouses.is_empty() {
        return Err(LoadError::NoWarehouses { start, end });
    }
    if start == 0 {
        return Err(LoadError::WarehouseZero { start, end });
    }
    let count = end - start + 1;
    let mut loaded = 0u64;
    // Expected rows of the parts not yet loaded.
    let mut remaining = expected_rows_scaled(count, scale);

    load_items_scaled(db, seed, scale)?;
    loaded += scale.items as u64;
    remaining -= scale.items as u64;
    progress(LoadProgress { rows_loaded: loaded, rows_total: loaded + remaining });

    for w_id in warehouses {
        let mut part = 0;
        load_warehouse_reporting(db, w_id, seed, scale, &mut |rows| {
            loaded += rows;
            remaining -= if part == 0 { 1 + scale.items as u64 } else { scale.district_rows_expected() };
            part += 1;
            progress(LoadProgress { rows_loaded: loaded, rows_total: loaded + remaining });
        })?;
    }
    debug_assert_eq!(remaining, 0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{keys, text, Table};
    use crate::LeanDb;

    fn rows<T: Table>(db: &mut LeanDb, keep: impl Fn(&T::Row) -> bool) -> Vec<T::Row> {
        let mut v = Vec::new();
        db.for_each::<T>(|r| {
            if keep(r) {
                v.push(*r);
            }
        });
        if T::ORG != crate::schema::Organisation::Heap {
            v.sort_by_key(T::key);
        }
        v
    }

    fn load(warehouses: RangeInclusive<u16>, seed: u64) -> (LeanDb, Vec<LoadProgress>) {
        let mut db = LeanDb::new();
        let mut reports = Vec::new();
        load_database(&mut db, warehouses, seed, &mut |p| reports.push(p)).unwrap();
        (db, reports)
    }

    /// Cardinalities of clause 4.3.3.1 (its population table) and the field rules.
    #[test]
    fn one_warehouse_has_the_tpcc_population() {
        let (mut db, reports) = load(1..=1, 7);
        assert_eq!(db.count::<t::Warehouses>(), 1);
        assert_eq!(db.count::<t::Districts>(), 10);
        assert_eq!(db.count::<t::Customers>(), 30_000);
        assert_eq!(db.count::<t::Histories>(), 30_000);
        assert_eq!(db.count::<t::Orders>(), 30_000);
        assert_eq!(db.count::<t::NewOrders>(), 9_000);
        assert_eq!(db.count::<t::Items>(), 100_000);
        assert_eq!(db.count::<t::Stocks>(), 100_000);

        let orders = rows::<t::Orders>(&mut db, |_| true);
        let ol_total: usize = orders.iter().map(|o| o.o_ol_cnt as usize).sum();
        assert_eq!(db.count::<t::OrderLines>(), ol_total);
        assert!((290_000..=310_000).contains(&ol_total), "≈300,000 order lines, got {ol_total}");

        // Progress: monotone rows, final report exact.
        assert!(reports.len() >= 12);
        assert!(reports.windows(2).all(|w| w[0].rows_loaded < w[1].rows_loaded));
        let last = reports.last().unwrap();
        let total = (1 + 10 + 30_000 * 3 + 9_000 + 100_000 + 100_000 + ol_total) as u64;
        assert_eq!((last.rows_loaded, last.rows_total), (total, total));
        assert!(expected_rows(1).abs_diff(total) < 10_000);

        // Orders: carrier null exactly for 2101..=3000, O_C_ID a permutation per district.
        for o in &orders {
            assert_eq!(o.o_carrier_id == 0, o.o_id >= FIRST_NEW_ORDER_ID);
            assert!((1..=10).contains(&o.o_carrier_id) || o.o_carrier_id == 0);
            assert!((5..=15).contains(&o.o_ol_cnt));
            assert_eq!(o.o_all_local, 1);
        }
        for d in 1..=10u8 {
            let mut cs: Vec<u32> = orders.iter().filter(|o| o.o_d_id == d).map(|o| o.o_c_id).collect();
            cs.sort_unstable();
            assert_eq!(cs, (1..=3000).collect::<Vec<_>>());
        }

        // Order lines: delivered lines have amount 0 and the entry date, others null dates.
        for ol in rows::<t::OrderLines>(&mut db, |_| true) {
            assert!((1..=ITEMS).contains(&ol.ol_i_id));
            assert_eq!((ol.ol_supply_w_id, ol.ol_quantity), (1, 5));
            if ol.ol_o_id < FIRST_NEW_ORDER_ID {
                assert_eq!((ol.ol_amount, ol.ol_delivery_d), (0, LOAD_TIMESTAMP));
            } else {
                assert!((1..=999_999).contains(&ol.ol_amount));
                assert_eq!(ol.ol_delivery_d, 0);
            }
            assert_eq!(text(&ol.ol_dist_info).len(), 24);
        }

        // Customers: names, credit, money fields.
        let customers = rows::<t::Customers>(&mut db, |_| true);
        let mut bc = 0;
        for c in &customers {
            if c.c_id <= 1000 {
                assert_eq!(c.c_last, crate::rng::last_name_field(c.c_id - 1));
            }
            assert!(!text(&c.c_last).is_empty());
            bc += usize::from(&c.c_credit == b"BC");
            assert!(&c.c_credit == b"BC" || &c.c_credit == b"GC");
            assert!(c.c_discount <= 5_000);
            assert_eq!((c.c_balance, c.c_ytd_payment, c.c_payment_cnt, c.c_delivery_cnt), (-1_000, 1_000, 1, 0));
            assert_eq!(c.c_credit_lim, 5_000_000);
            assert_eq!(&c.c_middle, b"OE");
            assert!((300..=500).contains(&text(&c.c_data).len()));
            assert_eq!(&c.c_address.zip[4..], b"11111");
        }
        assert!((2_500..=3_500).contains(&bc), "≈10% BC, got {bc}");

        // Warehouse and districts (consistency condition 1; D_NEXT_O_ID).
        let w = rows::<t::Warehouses>(&mut db, |_| true)[0];
        let ds = rows::<t::Districts>(&mut db, |_| true);
        assert_eq!(w.w_ytd, ds.iter().map(|d| d.d_ytd).sum::<i64>());
        assert!(w.w_tax <= 2_000 && ds.iter().all(|d| d.d_tax <= 2_000 && d.d_next_o_id == 3001));
        // Condition 8: W_YTD = Σ H_AMOUNT.
        let h = rows::<t::Histories>(&mut db, |_| true);
        assert_eq!(w.w_ytd, h.iter().map(|h| h.h_amount).sum::<i64>());
        assert!(h.iter().all(|h| (12..=24).contains(&text(&h.h_data).len())));

        // NEW_ORDER holds exactly orders 2101..=3000 of each district.
        let no = rows::<t::NewOrders>(&mut db, |_| true);
        assert!(no.iter().all(|n| (FIRST_NEW_ORDER_ID..=3000).contains(&n.no_o_id)));

        // ITEM and STOCK: ranges and ≈10% ORIGINAL.
        let has_original = |s: &[u8]| s.windows(8).any(|w| w == b"ORIGINAL");
        let items = rows::<t::Items>(&mut db, |_| true);
        let mut orig = 0;
        for i in &items {
            assert!((100..=10_000).contains(&i.i_price) && (1..=10_000).contains(&i.i_im_id));
            let n = text(&i.i_data).len();
            assert!((26..=50).contains(&n));
            orig += usize::from(has_original(text(&i.i_data)));
        }
        assert!((9_000..=11_000).contains(&orig), "≈10% ORIGINAL items, got {orig}");
        let mut orig = 0;
        for s in rows::<t::Stocks>(&mut db, |_| true) {
            assert!((10..=100).contains(&s.s_quantity));
            assert!(s.s_dist.iter().all(|d| text(d).len() == 24));
            assert_eq!((s.s_ytd, s.s_order_cnt, s.s_remote_cnt), (0, 0, 0));
            orig += usize::from(has_original(text(&s.s_data)));
        }
        assert!((9_000..=11_000).contains(&orig), "≈10% ORIGINAL stock, got {orig}");
        assert!(db.get::<t::Stocks, _>(keys::stock(1, 100_000), |_| ()).unwrap().is_some());
    }

    /// Partitioned loading: warehouse 2 alone equals warehouse 2 of a 1..=2 load.
    #[test]
    fn a_warehouse_loads_the_same_alone() {
        let (mut both, _) = load(1..=2, 99);
        let (mut alone, _) = load(2..=2, 99);
        assert_eq!(alone.count::<t::Warehouses>(), 1);
        assert_eq!(rows::<t::Items>(&mut both, |_| true), rows::<t::Items>(&mut alone, |_| true));
        assert_eq!(rows::<t::Warehouses>(&mut both, |r| r.w_id == 2), rows::<t::Warehouses>(&mut alone, |_| true));
        assert_eq!(rows::<t::Districts>(&mut both, |r| r.d_w_id == 2), rows::<t::Districts>(&mut alone, |_| true));
        assert_eq!(rows::<t::Customers>(&mut both, |r| r.c_w_id == 2), rows::<t::Customers>(&mut alone, |_| true));
        assert_eq!(rows::<t::Histories>(&mut both, |r| r.h_w_id == 2), rows::<t::Histories>(&mut alone, |_| true));
        assert_eq!(rows::<t::Orders>(&mut both, |r| r.o_w_id == 2), rows::<t::Orders>(&mut alone, |_| true));
        assert_eq!(rows::<t::NewOrders>(&mut both, |r| r.no_w_id == 2), rows::<t::NewOrders>(&mut alone, |_| true));
        assert_eq!(rows::<t::OrderLines>(&mut both, |r| r.ol_w_id == 2), rows::<t::OrderLines>(&mut alone, |_| true));
        assert_eq!(rows::<t::Stocks>(&mut both, |r| r.s_w_id == 2), rows::<t::Stocks>(&mut alone, |_| true));
        // And the two warehouses of one load differ.
        assert_ne!(
            rows::<t::Customers>(&mut both, |r| r.c_w_id == 1)[0].c_first,
            rows::<t::Customers>(&mut both, |r| r.c_w_id == 2)[0].c_first
        );
    }

    /// Clause 3.3.2: a freshly loaded database is consistent.
    #[test]
    fn a_fresh_load_passes_the_consistency_conditions() {
        let (mut db, _) = load(1..=2, 3);
        let report = crate::check::check(&mut db);
        assert!(report.all_passed(), "{report}");
    }

    #[test]
    fn empty_and_zero_warehouse_ranges_are_rejected() {
        let mut db = LeanDb::new();
        #[allow(clippy::reversed_empty_ranges)]
        let err = load_database(&mut db, 3..=2, 1, &mut |_| {}).unwrap_err();
        assert_eq!(err, LoadError::NoWarehouses { start: 3, end: 2 });
        assert!(err.to_string().contains("empty"));
        let err = load_database(&mut db, 0..=1, 1, &mut |_| {}).unwrap_err();
        assert_eq!(err, LoadError::WarehouseZero { start: 0, end: 1 });
        assert_eq!(db.count::<t::Items>(), 0, "nothing loaded on a rejected range");
    }

    /// A tiny population (simulation only) has the scaled cardinalities, keeps the
    /// clause's proportions, names only loaded last names, and is consistent (clause 3.3.2).
    #[test]
    fn a_tiny_population_is_scaled_and_consistent() {
        let scale = Scale::tiny();
        let mut db = LeanDb::new();
        let mut reports = Vec::new();
        load_database_scaled(&mut db, 1..=2, 5, scale, &mut |p| reports.push(p)).unwrap();
        assert_eq!(db.count::<t::Items>(), 500);
        assert_eq!(db.count::<t::Stocks>(), 2 * 500);
        assert_eq!(db.count::<t::Customers>(), 2 * 10 * 30);
        assert_eq!(db.count::<t::Orders>(), 2 * 10 * 30);
        assert_eq!(scale.first_new_order_id(), 22);
        assert_eq!(db.count::<t::NewOrders>(), 2 * 10 * 9);
        let last = reports.last().unwrap();
        assert_eq!(last.rows_loaded, last.rows_total);
        assert!(expected_rows_scaled(2, scale).abs_diff(last.rows_loaded) < 1_000);
        for c in rows::<t::Customers>(&mut db, |_| true) {
            assert_eq!(c.c_last, crate::rng::last_name_field(c.c_id - 1));
        }
        assert!(rows::<t::OrderLines>(&mut db, |_| true).iter().all(|ol| (1..=500).contains(&ol.ol_i_id)));
        // Item i is the same row at every scale.
        let (mut full, _) = load(1..=1, 5);
        assert_eq!(rows::<t::Items>(&mut db, |_| true), rows::<t::Items>(&mut full, |i| i.i_id <= 500));
        let report = crate::check::check(&mut db);
        assert!(report.all_passed(), "{report}");
    }

    #[test]
    fn expected_rows_counts_the_population() {
        assert_eq!(expected_rows(0), 100_000);
        assert_eq!(expected_rows(1), 100_000 + 1 + 100_000 + 10 * (1 + 6_000 + 3_000 + 900 + 30_000));
        assert_eq!(expected_rows(5) - expected_rows(4), expected_rows(1) - expected_rows(0));
        assert_eq!(expected_rows_scaled(3, Scale::TPCC), expected_rows(3));
        assert_eq!(Scale::default(), Scale::TPCC);
    }
}
