//! The nine TPC-C tables as fixed-width rows (TPC-C clause 1.3), their packed primary keys and
//! their secondary keys.
//!
//! Guarantees:
//! - every row type is plain old data with no padding (`bytemuck::Pod` derive refuses padding),
//!   so a row's canonical encoding is its bytes (little-endian, this layout): the digest, the
//!   conventional stack's slotted pages and its log records all use exactly these bytes;
//! - strings are fixed-width byte arrays, zero-filled after the text (TPC-C strings never hold
//!   NUL), read back with [`text`];
//! - money is integer cents (`i64`), rates are basis points (`u32`, 0.2000 = 2000);
//! - dates are `i64` values handed to procedures as parameters (the commit timestamp); a null
//!   date or carrier is `0` (TPC-C dates and carriers are never 0);
//! - every primary key packs into one `u64` whose numeric order is the key's lexicographic
//!   order ([`keys`]); the component types (u16 warehouse, u8 district, u32 ids) make an
//!   out-of-range component impossible to express.

use bytemuck::{Pod, Zeroable};
use std::fmt;

/// Identifies a table (stable numbering: it is part of the digest and of log records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum TableId {
    Warehouse = 0,
    District = 1,
    Customer = 2,
    History = 3,
    Orders = 4,
    NewOrder = 5,
    OrderLine = 6,
    Item = 7,
    Stock = 8,
}

impl TableId {
    pub const ALL: [TableId; 9] = [
        TableId::Warehouse,
        TableId::District,
        TableId::Customer,
        TableId::History,
        TableId::Orders,
        TableId::NewOrder,
        TableId::OrderLine,
        TableId::Item,
        TableId::Stock,
    ];

    /// The table's name as in TPC-C, lower case (also the CSV file stem of `--dump`).
    pub fn name(self) -> &'static str {
        match self {
            TableId::Warehouse => "warehouse",
            TableId::District => "district",
            TableId::Customer => "customer",
            TableId::History => "history",
            TableId::Orders => "orders",
            TableId::NewOrder => "new_order",
            TableId::OrderLine => "order_line",
            TableId::Item => "item",
            TableId::Stock => "stock",
        }
    }

    pub fn from_u8(v: u8) -> Option<TableId> {
        TableId::ALL.get(v as usize).copied()
    }

    /// Bytes of one row (its fixed-width Pod encoding).
    pub fn row_size(self) -> usize {
        fn of<T: Table>() -> usize {
            std::mem::size_of::<T::Row>()
        }
        match self {
            TableId::Warehouse => of::<t::Warehouses>(),
            TableId::District => of::<t::Districts>(),
            TableId::Customer => of::<t::Customers>(),
            TableId::History => of::<t::Histories>(),
            TableId::Orders => of::<t::Orders>(),
            TableId::NewOrder => of::<t::NewOrders>(),
            TableId::OrderLine => of::<t::OrderLines>(),
            TableId::Item => of::<t::Items>(),
            TableId::Stock => of::<t::Stocks>(),
        }
    }

    /// How the table is organised.
    pub fn organisation(self) -> Organisation {
        match self {
            TableId::Warehouse => t::Warehouses::ORG,
            TableId::District => t::Districts::ORG,
            TableId::Customer => t::Customers::ORG,
            TableId::History => t::Histories::ORG,
            TableId::Orders => t::Orders::ORG,
            TableId::NewOrder => t::NewOrders::ORG,
            TableId::OrderLine => t::OrderLines::ORG,
            TableId::Item => t::Items::ORG,
            TableId::Stock => t::Stocks::ORG,
        }
    }
}

impl fmt::Display for TableId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a table is organised: which operations its access paths support.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Organisation {
    /// Point access by primary key only.
    Hash,
    /// Point access and ordered range scans by primary key.
    Ordered,
    /// No key: append-only (HISTORY, TPC-C clause 1.3 gives it no primary key).
    Heap,
}

/// A secondary key: totally ordered, with an order-preserving big-endian byte encoding for
/// byte-comparing indexes (the conventional stack's B+trees).
pub trait SecondaryKey: Copy + Ord + Default + fmt::Debug + Send + Sync + 'static {
    /// Length of [`SecondaryKey::encode`]'s output.
    const LEN: usize;
    /// Writes the order-preserving encoding into `out[..LEN]`.
    fn encode(&self, out: &mut [u8]);
}

impl SecondaryKey for () {
    const LEN: usize = 0;
    fn encode(&self, _out: &mut [u8]) {}
}

impl SecondaryKey for u128 {
    const LEN: usize = 16;
    fn encode(&self, out: &mut [u8]) {
        out[..16].copy_from_slice(&self.to_be_bytes());
    }
}

/// CUSTOMER's secondary index key (C_W_ID, C_D_ID, C_LAST, C_FIRST, C_ID): Payment and
/// OrderStatus select customers by last name ordered by first name (TPC-C 2.5.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct CustomerNameKey {
    pub w_id: u16,
    pub d_id: u8,
    pub last: [u8; 16],
    pub first: [u8; 16],
    pub c_id: u32,
}

impl SecondaryKey for CustomerNameKey {
    const LEN: usize = 39;
    fn encode(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.w_id.to_be_bytes());
        out[2] = self.d_id;
        out[3..19].copy_from_slice(&self.last);
        out[19..35].copy_from_slice(&self.first);
        out[35..39].copy_from_slice(&self.c_id.to_be_bytes());
    }
}

/// A TPC-C table: its row type, how its primary key is derived, its organisation and its
/// optional secondary index.
pub trait Table: 'static {
    const ID: TableId;
    const ORG: Organisation;
    /// Whether [`Table::secondary`] returns a key (and the table has a secondary index).
    const HAS_SECONDARY: bool = false;
    /// Bytes at the start of the row that an update may change: each row layout puts the
    /// columns TPC-C's procedures update first, so an undo image needs only this prefix
    /// (a STOCK update changes 20 of its 312 bytes). Updates must leave the rest unchanged
    /// (checked under `debug_assertions`).
    const UPDATABLE_PREFIX: usize = std::mem::size_of::<Self::Row>();
    type Row: Pod + fmt::Debug + PartialEq + Send + Sync;
    type Sec: SecondaryKey;
    /// The packed primary key of a row (`0` for heap tables).
    fn key(row: &Self::Row) -> u64;
    /// The secondary key of a row; must never change under `update`.
    fn secondary(_row: &Self::Row) -> Self::Sec {
        unreachable!("table has no secondary index")
    }
}

/// Packed primary keys (numeric order = lexicographic order of the components).
pub mod keys {
    #[inline]
    pub fn warehouse(w: u16) -> u64 {
        w as u64
    }
    #[inline]
    pub fn district(w: u16, d: u8) -> u64 {
        ((w as u64) << 8) | d as u64
    }
    #[inline]
    pub fn customer(w: u16, d: u8, c: u32) -> u64 {
        (district(w, d) << 32) | c as u64
    }
    #[inline]
    pub fn order(w: u16, d: u8, o: u32) -> u64 {
        (district(w, d) << 32) | o as u64
    }
    #[inline]
    pub fn new_order(w: u16, d: u8, o: u32) -> u64 {
        order(w, d, o)
    }
    #[inline]
    pub fn order_line(w: u16, d: u8, o: u32, n: u8) -> u64 {
        (order(w, d, o) << 8) | n as u64
    }
    #[inline]
    pub fn item(i: u32) -> u64 {
        i as u64
    }
    #[inline]
    pub fn stock(w: u16, i: u32) -> u64 {
        ((w as u64) << 32) | i as u64
    }
    /// ORDER's secondary key (O_W_ID, O_D_ID, O_C_ID, O_ID): a customer's latest order.
    #[inline]
    pub fn order_by_customer(w: u16, d: u8, c: u32, o: u32) -> u128 {
        ((district(w, d) as u128) << 64) | ((c as u128) << 32) | o as u128
    }
}

/// Copies `s` into a fixed-width field, zero-filling the rest (truncates to the field width).
#[inline]
pub fn set_text(dst: &mut [u8], s: &[u8]) {
    let n = s.len().min(dst.len());
    dst[..n].copy_from_slice(&s[..n]);
    dst[n..].fill(0);
}

/// A fixed-width field's text: its bytes up to the first zero.
#[inline]
pub fn text(field: &[u8]) -> &[u8] {
    let n = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    &field[..n]
}

/// A fixed-width field filled from `s`.
pub fn fixed<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    set_text(&mut a, s);
    a
}

/// Street address block shared by WAREHOUSE, DISTRICT and CUSTOMER.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Address {
    pub street_1: [u8; 20],
    pub street_2: [u8; 20],
    pub city: [u8; 20],
    pub state: [u8; 2],
    pub zip: [u8; 9],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Warehouse {
    pub w_ytd: i64,
    pub w_tax: u32,
    pub w_id: u16,
    pub w_name: [u8; 10],
    pub w_address: Address,
    pub _pad: [u8; 1],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct District {
    pub d_ytd: i64,
    pub d_tax: u32,
    pub d_next_o_id: u32,
    pub d_w_id: u16,
    pub d_id: u8,
    pub d_name: [u8; 10],
    pub d_address: Address,
    pub _pad: [u8; 4],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Customer {
    pub c_since: i64,
    pub c_credit_lim: i64,
    pub c_balance: i64,
    pub c_ytd_payment: i64,
    pub c_id: u32,
    pub c_discount: u32,
    pub c_payment_cnt: u32,
    pub c_delivery_cnt: u32,
    pub c_w_id: u16,
    pub c_d_id: u8,
    pub c_first: [u8; 16],
    pub c_middle: [u8; 2],
    pub c_last: [u8; 16],
    pub c_address: Address,
    pub c_phone: [u8; 16],
    pub c_credit: [u8; 2],
    pub c_data: [u8; 500],
    pub _pad: [u8; 6],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct History {
    pub h_amount: i64,
    pub h_date: i64,
    pub h_c_id: u32,
    pub h_c_w_id: u16,
    pub h_w_id: u16,
    pub h_c_d_id: u8,
    pub h_d_id: u8,
    pub h_data: [u8; 24],
    pub _pad: [u8; 6],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Order {
    pub o_entry_d: i64,
    pub o_id: u32,
    pub o_c_id: u32,
    pub o_w_id: u16,
    pub o_d_id: u8,
    /// 0 = null.
    pub o_carrier_id: u8,
    pub o_ol_cnt: u8,
    pub o_all_local: u8,
    pub _pad: [u8; 2],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct NewOrder {
    pub no_o_id: u32,
    pub no_w_id: u16,
    pub no_d_id: u8,
    pub _pad: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct OrderLine {
    /// 0 = null.
    pub ol_delivery_d: i64,
    pub ol_amount: i64,
    pub ol_o_id: u32,
    pub ol_i_id: u32,
    pub ol_w_id: u16,
    pub ol_supply_w_id: u16,
    pub ol_d_id: u8,
    pub ol_number: u8,
    pub ol_quantity: u8,
    pub ol_dist_info: [u8; 24],
    pub _pad: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Item {
    pub i_price: i64,
    pub i_id: u32,
    pub i_im_id: u32,
    pub i_name: [u8; 24],
    pub i_data: [u8; 50],
    pub _pad: [u8; 6],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Stock {
    pub s_i_id: u32,
    pub s_quantity: i32,
    pub s_ytd: u32,
    pub s_order_cnt: u32,
    pub s_remote_cnt: u32,
    pub s_w_id: u16,
    pub s_dist: [[u8; 24]; 10],
    pub s_data: [u8; 50],
}

/// Marker types naming each table for the generic storage API.
pub mod t {
    use super::*;

    macro_rules! table {
        ($name:ident, $row:ty, $id:expr, $org:expr, $prefix:expr, |$r:ident| $key:expr) => {
            #[derive(Debug, Clone, Copy)]
            pub struct $name;
            impl Table for $name {
                const ID: TableId = $id;
                const ORG: Organisation = $org;
                const UPDATABLE_PREFIX: usize = $prefix;
                type Row = $row;
                type Sec = ();
                #[inline]
                fn key($r: &$row) -> u64 {
                    $key
                }
            }
        };
    }

    table!(
        Warehouses,
        Warehouse,
        TableId::Warehouse,
        Organisation::Hash,
        std::mem::offset_of!(Warehouse, w_tax),
        |r| keys::warehouse(r.w_id)
    );
    table!(Districts, District, TableId::District, Organisation::Hash, std::mem::offset_of!(District, d_w_id), |r| {
        keys::district(r.d_w_id, r.d_id)
    });
    table!(Histories, History, TableId::History, Organisation::Heap, std::mem::size_of::<History>(), |_r| 0);
    table!(NewOrders, NewOrder, TableId::NewOrder, Organisation::Ordered, std::mem::size_of::<NewOrder>(), |r| {
        keys::new_order(r.no_w_id, r.no_d_id, r.no_o_id)
    });
    table!(
        OrderLines,
        OrderLine,
        TableId::OrderLine,
        Organisation::Ordered,
        std::mem::offset_of!(OrderLine, ol_amount),
        |r| keys::order_line(r.ol_w_id, r.ol_d_id, r.ol_o_id, r.ol_number)
    );
    table!(Items, Item, TableId::Item, Organisation::Hash, std::mem::size_of::<Item>(), |r| keys::item(r.i_id));
    table!(Stocks, Stock, TableId::Stock, Organisation::Hash, std::mem::offset_of!(Stock, s_w_id), |r| keys::stock(
        r.s_w_id, r.s_i_id
    ));

    #[derive(Debug, Clone, Copy)]
    pub struct Customers;
    impl Table for Customers {
        const ID: TableId = TableId::Customer;
        const ORG: Organisation = Organisation::Hash;
        const HAS_SECONDARY: bool = true;
        type Row = Customer;
        type Sec = CustomerNameKey;
        #[inline]
        fn key(r: &Customer) -> u64 {
            keys::customer(r.c_w_id, r.c_d_id, r.c_id)
        }
        #[inline]
        fn secondary(r: &Customer) -> CustomerNameKey {
            CustomerNameKey { w_id: r.c_w_id, d_id: r.c_d_id, last: r.c_last, first: r.c_first, c_id: r.c_id }
        }
    }

    #[derive(Debug, Clone, Copy)]
    pub struct Orders;
    impl Table for Orders {
        const ID: TableId = TableId::Orders;
        const ORG: Organisation = Organisation::Ordered;
        const HAS_SECONDARY: bool = true;
        const UPDATABLE_PREFIX: usize = std::mem::offset_of!(Order, o_ol_cnt);
        type Row = Order;
        type Sec = u128;
        #[inline]
        fn key(r: &Order) -> u64 {
            keys::order(r.o_w_id, r.o_d_id, r.o_id)
        }
        #[inline]
        fn secondary(r: &Order) -> u128 {
            keys::order_by_customer(r.o_w_id, r.o_d_id, r.o_c_id, r.o_id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_sizes_are_fixed() {
        assert_eq!(std::mem::size_of::<Warehouse>(), 96);
        assert_eq!(std::mem::size_of::<NewOrder>(), 8);
        assert_eq!(std::mem::size_of::<Order>(), 24);
        assert_eq!(std::mem::size_of::<OrderLine>(), 56);
    }

    #[test]
    fn packed_keys_keep_lexicographic_order() {
        assert!(keys::order_line(1, 1, 5, 15) < keys::order_line(1, 1, 6, 1));
        assert!(keys::order_line(1, 10, 9999, 15) < keys::order_line(2, 1, 1, 1));
        assert!(keys::customer(1, 2, u32::MAX) < keys::customer(1, 3, 0));
        assert!(keys::stock(1, u32::MAX) < keys::stock(2, 0));
    }

    #[test]
    fn text_round_trips() {
        let f: [u8; 10] = fixed(b"abc");
        assert_eq!(text(&f), b"abc");
        let g: [u8; 3] = fixed(b"abcdef");
        assert_eq!(text(&g), b"abc");
    }
}
