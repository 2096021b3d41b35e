//! The five TPC-C transactions (clause 2) as deterministic stored procedures over
//! [`Storage`]. Every input — including the commit timestamp used as the "current date" — is
//! a parameter; nothing reads a clock or a random source. Each procedure quotes the SQL it
//! implements.

use crate::error::TxnError;
use crate::schema::{self, keys, t, Table, TableId};
use crate::storage::{Prefetch, ScanDir, Storage};

/// A warehouse number, W_ID (clause 1.2.1: from 1).
pub type WarehouseId = u16;

/// Most order lines a NewOrder can carry (clause 2.4.1.3: 5–15).
pub const ORDER_LINES_MAX: usize = 15;
/// Fewest order lines a NewOrder carries (clause 2.4.1.3: 5–15).
pub const ORDER_LINES_MIN: usize = 5;
/// Districts per warehouse (clause 1.2.1).
pub const DISTRICTS_PER_WAREHOUSE: u8 = 10;
/// ITEM rows: I_ID runs over 1..=100,000 (clauses 1.2.1, 4.3.3.1).
pub const ITEMS: u32 = 100_000;
/// CUSTOMER rows per district: C_ID runs over 1..=3,000 (clauses 1.2.1, 4.3.3.1).
pub const CUSTOMERS_PER_DISTRICT: u32 = 3_000;
/// Largest OL_QUANTITY a NewOrder line asks for (clause 2.4.1.5: 1–10).
pub const OL_QUANTITY_MAX: u8 = 10;
/// Carriers: O_CARRIER_ID runs over 1..=10 (clause 2.7.1.2).
pub const CARRIERS: u8 = 10;
/// H_AMOUNT's domain in cents (clause 2.5.1.3: 1.00–5,000.00).
pub const H_AMOUNT_MIN_CENTS: i64 = 100;
/// See [`H_AMOUNT_MIN_CENTS`].
pub const H_AMOUNT_MAX_CENTS: i64 = 500_000;
/// StockLevel's threshold domain (clause 2.8.1.2: 10–20).
pub const THRESHOLD_MIN: i32 = 10;
/// See [`THRESHOLD_MIN`].
pub const THRESHOLD_MAX: i32 = 20;
/// The dates an input may carry (O_ENTRY_D, H_DATE, OL_DELIVERY_D), in the procedures' unit:
/// seconds since the Unix epoch. From 1970-01-01T00:00:01Z — 0 is excluded because the
/// schema stores a null OL_DELIVERY_D (an undelivered line, clause 4.3.3.1) as 0, so a
/// Delivery dated 0 would leave delivered lines that read as undelivered, breaking
/// consistency condition 7 of clause 3.3.2 — to 9999-12-31T23:59:59Z, the last instant of a
/// four-digit year, as SQL's TIMESTAMP has it.
pub const DATE_MIN: i64 = 1;
/// See [`DATE_MIN`].
pub const DATE_MAX: i64 = 253_402_300_799;
/// The syllables C_LAST is built from, three per name, indexed by the digits of a number in
/// 0..=999 (clause 4.3.2.3).
pub const C_LAST_SYLLABLES: [&[u8]; 10] =
    [b"BAR", b"OUGHT", b"ABLE", b"PRI", b"PRES", b"ESE", b"ANTI", b"CALLY", b"ATION", b"EING"];

/// The number in 0..=999 whose C_LAST (clause 4.3.2.3: its three digits' syllables,
/// concatenated) `field` holds, zero-filled after the name; `None` when `field` is not such a
/// name. No syllable is a prefix of another, so the reading is unique.
pub fn c_last_number(field: &[u8; 16]) -> Option<u32> {
    let mut at = 0;
    let mut number = 0;
    for _ in 0..3 {
        let digit = C_LAST_SYLLABLES.iter().position(|s| field[at..].starts_with(s))?;
        at += C_LAST_SYLLABLES[digit].len();
        number = number * 10 + digit as u32;
    }
    field[at..].iter().all(|&b| b == 0).then_some(number)
}

/// One requested item of a NewOrder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct OrderLineInput {
    pub i_id: u32,
    pub supply_w_id: u16,
    pub quantity: u8,
}

/// NewOrder's inputs (clause 2.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NewOrderInput {
    pub w_id: u16,
    pub d_id: u8,
    pub c_id: u32,
    /// Number of valid entries in `lines` (5–15).
    pub ol_cnt: u8,
    /// Serialised packed ([`packed_lines`]): up to the last non-default line, 7 bytes a line.
    #[serde(with = "packed_lines")]
    pub lines: [OrderLineInput; ORDER_LINES_MAX],
    /// O_ENTRY_D: the transaction's timestamp.
    pub entry_d: i64,
}

/// The serialised form of a NewOrder's order lines: one byte string holding the lines up to
/// the last one that is not `OrderLineInput::default()`, each as I_ID (u32), the supplying
/// warehouse (u16) and the quantity (u8), little-endian: 7 bytes a line, so a 10-line order
/// travels in 70 bytes and decodes with one copy instead of 45 field visits. Trailing default
/// lines (beyond `ol_cnt`, as the generator leaves them) are implied, so every array
/// round-trips exactly. Decoding refuses a string that is not a whole number of lines or
/// holds more than [`ORDER_LINES_MAX`].
pub mod packed_lines {
    use super::{OrderLineInput, ORDER_LINES_MAX};
    use serde::de::{Error, SeqAccess, Visitor};

    const LINE_BYTES: usize = 7;

    pub fn serialize<S: serde::Serializer>(lines: &[OrderLineInput; ORDER_LINES_MAX], s: S) -> Result<S::Ok, S::Error> {
        let used = lines.iter().rposition(|l| *l != OrderLineInput::default()).map_or(0, |i| i + 1);
        let mut buf = [0u8; ORDER_LINES_MAX * LINE_BYTES];
        for (l, out) in lines[..used].iter().zip(buf.chunks_exact_mut(LINE_BYTES)) {
            out[..4].copy_from_slice(&l.i_id.to_le_bytes());
            out[4..6].copy_from_slice(&l.supply_w_id.to_le_bytes());
            out[6] = l.quantity;
        }
        s.serialize_bytes(&buf[..used * LINE_BYTES])
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<[OrderLineInput; ORDER_LINES_MAX], D::Error> {
        d.deserialize_bytes(Packed)
    }

    fn unpack<E: Error>(bytes: &[u8]) -> Result<[OrderLineInput; ORDER_LINES_MAX], E> {
        if bytes.len() % LINE_BYTES != 0 || bytes.len() > ORDER_LINES_MAX * LINE_BYTES {
            return Err(E::invalid_length(bytes.len(), &Packed));
        }
        // The encoding is canonical: `serialize` stops at the last line that is not the
        // default, so trailing default lines would be a second encoding of the same lines
        // (found by the `frame_control` fuzz target, docs/design.md §13).
        if bytes.len() >= LINE_BYTES && bytes[bytes.len() - LINE_BYTES..].iter().all(|&b| b == 0) {
            return Err(E::invalid_value(serde::de::Unexpected::Bytes(bytes), &"no trailing empty order line"));
        }
        let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
        for (l, b) in lines.iter_mut().zip(bytes.chunks_exact(LINE_BYTES)) {
            *l = OrderLineInput {
                i_id: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                supply_w_id: u16::from_le_bytes([b[4], b[5]]),
                quantity: b[6],
            };
        }
        Ok(lines)
    }

    struct Packed;

    impl<'de> Visitor<'de> for Packed {
        type Value = [OrderLineInput; ORDER_LINES_MAX];

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "order lines packed 7 bytes each, at most {ORDER_LINES_MAX}")
        }

        fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Self::Value, E> {
            unpack(v)
        }

        /// Self-describing formats (JSON) give the bytes as a sequence of numbers.
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut buf = [0u8; ORDER_LINES_MAX * LINE_BYTES];
            let mut n = 0;
            while let Some(b) = seq.next_element::<u8>()? {
                if n == buf.len() {
                    return Err(A::Error::invalid_length(n + 1, &self));
                }
                buf[n] = b;
                n += 1;
            }
            unpack(&buf[..n])
        }
    }
}

impl NewOrderInput {
    pub fn lines(&self) -> &[OrderLineInput] {
        &self.lines[..self.ol_cnt as usize]
    }
}

/// How Payment and OrderStatus select the customer (clause 2.5.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CustomerSelector {
    ById(u32),
    /// C_LAST as a fixed-width field.
    ByLastName([u8; 16]),
}

/// Payment's inputs (clause 2.5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PaymentInput {
    pub w_id: u16,
    pub d_id: u8,
    pub c_w_id: u16,
    pub c_d_id: u8,
    pub customer: CustomerSelector,
    /// H_AMOUNT in cents (100–500,000).
    pub h_amount: i64,
    /// H_DATE: the transaction's timestamp.
    pub date: i64,
}

/// OrderStatus's inputs (clause 2.6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OrderStatusInput {
    pub w_id: u16,
    pub d_id: u8,
    pub customer: CustomerSelector,
}

/// Delivery's inputs (clause 2.7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeliveryInput {
    pub w_id: u16,
    /// 1–10.
    pub o_carrier_id: u8,
    /// OL_DELIVERY_D: the transaction's timestamp.
    pub date: i64,
}

/// StockLevel's inputs (clause 2.8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StockLevelInput {
    pub w_id: u16,
    pub d_id: u8,
    /// 10–20.
    pub threshold: i32,
}

/// A transaction request: which procedure and its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TxnInput {
    NewOrder(NewOrderInput),
    Payment(PaymentInput),
    OrderStatus(OrderStatusInput),
    Delivery(DeliveryInput),
    StockLevel(StockLevelInput),
}

/// The five transaction types, in the order reports list them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum TxnKind {
    NewOrder = 0,
    Payment = 1,
    OrderStatus = 2,
    Delivery = 3,
    StockLevel = 4,
}

impl TxnKind {
    pub const ALL: [TxnKind; 5] =
        [TxnKind::NewOrder, TxnKind::Payment, TxnKind::OrderStatus, TxnKind::Delivery, TxnKind::StockLevel];

    /// Lower-case name as used on the command line (`--mix neworder=45,...`) and in reports.
    pub fn name(self) -> &'static str {
        match self {
            TxnKind::NewOrder => "neworder",
            TxnKind::Payment => "payment",
            TxnKind::OrderStatus => "orderstatus",
            TxnKind::Delivery => "delivery",
            TxnKind::StockLevel => "stocklevel",
        }
    }

    pub fn from_name(s: &str) -> Option<TxnKind> {
        TxnKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

impl std::fmt::Display for TxnKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TxnKind::NewOrder => "NewOrder",
            TxnKind::Payment => "Payment",
            TxnKind::OrderStatus => "OrderStatus",
            TxnKind::Delivery => "Delivery",
            TxnKind::StockLevel => "StockLevel",
        })
    }
}

impl TxnInput {
    pub fn kind(&self) -> TxnKind {
        match self {
            TxnInput::NewOrder(_) => TxnKind::NewOrder,
            TxnInput::Payment(_) => TxnKind::Payment,
            TxnInput::OrderStatus(_) => TxnKind::OrderStatus,
            TxnInput::Delivery(_) => TxnKind::Delivery,
            TxnInput::StockLevel(_) => TxnKind::StockLevel,
        }
    }
}

/// NewOrder's answer to the terminal (clause 2.4.3.3), trimmed to what replicas compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NewOrderOutput {
    pub o_id: u32,
    /// Total amount in cents after discount and taxes.
    pub total: i64,
    pub c_discount: u32,
    pub w_tax: u32,
    pub d_tax: u32,
    /// Lines whose brand-generic flag is "B" (both I_DATA and S_DATA contain "ORIGINAL").
    pub brand_lines: u8,
}

/// Payment's answer (clause 2.5.3.3), trimmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PaymentOutput {
    pub c_id: u32,
    pub c_balance: i64,
    pub bad_credit: bool,
}

/// OrderStatus's answer (clause 2.6.3.3), trimmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OrderStatusOutput {
    pub c_id: u32,
    pub c_balance: i64,
    /// The customer's latest order, if any: (O_ID, O_CARRIER_ID, number of lines, Σ OL_AMOUNT).
    pub last_order: Option<(u32, u8, u8, i64)>,
}

/// Delivery's answer: the delivered O_ID per district (0 where the district was skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeliveryOutput {
    pub delivered: [u32; DISTRICTS_PER_WAREHOUSE as usize],
}

/// StockLevel's answer (clause 2.8.3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StockLevelOutput {
    pub low_stock: u32,
}

/// A committed transaction's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TxnOutput {
    NewOrder(NewOrderOutput),
    Payment(PaymentOutput),
    OrderStatus(OrderStatusOutput),
    Delivery(DeliveryOutput),
    StockLevel(StockLevelOutput),
}

impl TxnOutput {
    /// A 64-bit digest of the result, which replicas compare to detect divergence.
    pub fn digest(&self) -> u64 {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        let mut put = |v: i64| h.update(&v.to_le_bytes());
        match self {
            TxnOutput::NewOrder(o) => {
                put(0);
                for v in [o.o_id as i64, o.total, o.c_discount as i64, o.w_tax as i64, o.d_tax as i64] {
                    put(v);
                }
                put(o.brand_lines as i64);
            }
            TxnOutput::Payment(p) => {
                put(1);
                put(p.c_id as i64);
                put(p.c_balance);
                put(p.bad_credit as i64);
            }
            TxnOutput::OrderStatus(o) => {
                put(2);
                put(o.c_id as i64);
                put(o.c_balance);
                match o.last_order {
                    None => put(-1),
                    Some((o_id, carrier, lines, amount)) => {
                        for v in [o_id as i64, carrier as i64, lines as i64, amount] {
                            put(v);
                        }
                    }
                }
            }
            TxnOutput::Delivery(d) => {
                put(3);
                for &o in &d.delivered {
                    put(o as i64);
                }
            }
            TxnOutput::StockLevel(l) => {
                put(4);
                put(l.low_stock as i64);
            }
        }
        h.digest()
    }
}

/// Runs one transaction at timestamp `ts`: begin, the procedure, then commit — or abort when
/// the procedure fails, so a failed transaction leaves no trace.
pub fn execute<S: Storage>(db: &mut S, ts: u64, input: &TxnInput) -> Result<TxnOutput, TxnError> {
    in_transaction(db, ts, |db| match input {
        TxnInput::NewOrder(i) => new_order(db, i).map(TxnOutput::NewOrder),
        TxnInput::Payment(i) => payment(db, i).map(TxnOutput::Payment),
        TxnInput::OrderStatus(i) => order_status(db, i).map(TxnOutput::OrderStatus),
        TxnInput::Delivery(i) => delivery(db, i).map(TxnOutput::Delivery),
        TxnInput::StockLevel(i) => stock_level(db, i).map(TxnOutput::StockLevel),
    })
}

/// Runs `body` as one transaction at timestamp `ts`: begin, `body`, commit — or abort when
/// `body` or the commit fails, leaving no trace.
pub fn in_transaction<S: Storage, T>(
    db: &mut S,
    ts: u64,
    body: impl FnOnce(&mut S) -> Result<T, TxnError>,
) -> Result<T, TxnError> {
    db.begin(ts);
    let result = body(db);
    match result {
        Ok(out) => match db.commit() {
            Ok(()) => Ok(out),
            Err(e) => {
                db.abort();
                Err(e.into())
            }
        },
        Err(e) => {
            db.abort();
            Err(e)
        }
    }
}

fn missing<T: Table>(key: u64) -> TxnError {
    TxnError::NotFound { table: T::ID, key }
}

/// Whether a fixed-width text field contains "ORIGINAL" (clause 2.4.2.2's brand-generic
/// test). Candidate positions (bytes equal to 'O') are found eight bytes at a time with the
/// SWAR zero-byte test, then confirmed by comparing eight bytes as one `u64`; the zero fill
/// after the text can never match, so the field's text length is not needed.
#[inline]
fn has_original(field: &[u8]) -> bool {
    const ORIGINAL: u64 = u64::from_le_bytes(*b"ORIGINAL");
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let word = |at: usize| u64::from_le_bytes(field[at..at + 8].try_into().expect("eight bytes"));
    let last = match field.len().checked_sub(8) {
        Some(l) => l,
        None => return false,
    };
    let mut base = 0;
    loop {
        let at = base.min(last);
        let x = word(at) ^ (ONES * b'O' as u64);
        let mut hits = x.wrapping_sub(ONES) & !x & HIGHS;
        while hits != 0 {
            let p = at + (hits.trailing_zeros() / 8) as usize;
            if p <= last && word(p) == ORIGINAL {
                return true;
            }
            hits &= hits - 1;
        }
        if at == last {
            return false;
        }
        base += 8;
    }
}

/// NewOrder (clause 2.4.2.2):
///
/// ```sql
/// SELECT c_discount, c_last, c_credit, w_tax FROM customer, warehouse
///   WHERE w_id = :w_id AND c_w_id = w_id AND c_d_id = :d_id AND c_id = :c_id;
/// SELECT d_next_o_id, d_tax FROM district WHERE d_id = :d_id AND d_w_id = :w_id;
/// UPDATE district SET d_next_o_id = :d_next_o_id + 1 WHERE d_id = :d_id AND d_w_id = :w_id;
/// INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_ol_cnt, o_all_local)
///   VALUES (:o_id, :d_id, :w_id, :c_id, :datetime, :o_ol_cnt, :o_all_local);
/// INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES (:o_id, :d_id, :w_id);
/// -- for each line:
/// SELECT i_price, i_name, i_data FROM item WHERE i_id = :ol_i_id;   -- none: ROLLBACK
/// SELECT s_quantity, s_data, s_dist_01 .. s_dist_10 FROM stock
///   WHERE s_i_id = :ol_i_id AND s_w_id = :ol_supply_w_id;
/// UPDATE stock SET s_quantity = :s_quantity, s_ytd = s_ytd + :ol_quantity,
///   s_order_cnt = s_order_cnt + 1, s_remote_cnt = s_remote_cnt + :remote
///   WHERE s_i_id = :ol_i_id AND s_w_id = :ol_supply_w_id;
/// INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, ol_supply_w_id,
///   ol_quantity, ol_amount, ol_dist_info)
///   VALUES (:o_id, :d_id, :w_id, :ol_number, :ol_i_id, :ol_supply_w_id, :ol_quantity,
///   :ol_amount, :ol_dist_info);
/// ```
pub fn new_order<S: Storage>(db: &mut S, i: &NewOrderInput) -> Result<NewOrderOutput, TxnError> {
    new_order_home(db, i, None)
}

/// Which supplying warehouses a partition holds, and the stock reads of the lines supplied
/// by the others ([`new_order_home`]).
pub type SuppliedElsewhere<'a> = (&'a dyn Fn(u16) -> bool, &'a [crate::distributed::StockRead]);

/// NewOrder on the home warehouse's partition (the district, the order, its lines), the
/// stock of every line updated here — or, with `remote = Some((local, reads))`, only of the
/// lines whose supplying warehouse `local` holds, the others' S_DIST_xx and S_DATA test
/// taken from `reads` (the supplying partitions' pieces,
/// [`crate::distributed::new_order_supply`], ran them at the same timestamp).
pub fn new_order_home<S: Storage>(
    db: &mut S,
    i: &NewOrderInput,
    remote: Option<SuppliedElsewhere<'_>>,
) -> Result<NewOrderOutput, TxnError> {
    let lines = i.lines();
    debug_assert!((1..=ORDER_LINES_MAX).contains(&lines.len()));
    // The item and stock lookups are independent: start their cache misses together.
    let mut item_keys = [0u64; ORDER_LINES_MAX];
    let mut stock_keys = [0u64; ORDER_LINES_MAX];
    let mut stocks = 0;
    for (n, l) in lines.iter().enumerate() {
        item_keys[n] = keys::item(l.i_id);
        if remote.is_none_or(|(local, _)| local(l.supply_w_id)) {
            stock_keys[stocks] = keys::stock(l.supply_w_id, l.i_id);
            stocks += 1;
        }
    }
    let (item_keys, stock_keys) = (&item_keys[..lines.len()], &stock_keys[..stocks]);
    let ck = keys::customer(i.w_id, i.d_id, i.c_id);
    db.prefetch::<t::Customers>(&[ck], Prefetch::Index);
    db.prefetch::<t::Items>(item_keys, Prefetch::Index);
    db.prefetch::<t::Stocks>(stock_keys, Prefetch::Index);

    let wk = keys::warehouse(i.w_id);
    let w_tax = db.get::<t::Warehouses, _>(wk, |w| w.w_tax)?.ok_or_else(|| missing::<t::Warehouses>(wk))?;
    db.prefetch::<t::Customers>(&[ck], Prefetch::Rows);
    db.prefetch::<t::Items>(item_keys, Prefetch::Rows);
    db.prefetch::<t::Stocks>(stock_keys, Prefetch::Rows);
    let c_discount = db.get::<t::Customers, _>(ck, |c| c.c_discount)?.ok_or_else(|| missing::<t::Customers>(ck))?;
    let dk = keys::district(i.w_id, i.d_id);
    let (o_id, d_tax) = db
        .update::<t::Districts, _>(dk, |d| {
            let o_id = d.d_next_o_id;
            d.d_next_o_id += 1;
            (o_id, d.d_tax)
        })?
        .ok_or_else(|| missing::<t::Districts>(dk))?;

    let all_local = lines.iter().all(|l| l.supply_w_id == i.w_id);
    db.insert::<t::Orders>(&schema::Order {
        o_entry_d: i.entry_d,
        o_id,
        o_c_id: i.c_id,
        o_w_id: i.w_id,
        o_d_id: i.d_id,
        o_carrier_id: 0,
        o_ol_cnt: i.ol_cnt,
        o_all_local: all_local as u8,
        _pad: [0; 2],
    })?;
    db.insert::<t::NewOrders>(&schema::NewOrder { no_o_id: o_id, no_w_id: i.w_id, no_d_id: i.d_id, _pad: 0 })?;

    let mut sum: i64 = 0;
    let mut brand_lines = 0u8;
    let dist = (i.d_id as usize).checked_sub(1).filter(|&d| d < DISTRICTS_PER_WAREHOUSE as usize);
    let dist = dist.ok_or_else(|| missing::<t::Districts>(dk))?;
    for (n, l) in lines.iter().enumerate() {
        let Some((i_price, i_original)) =
            db.get::<t::Items, _>(item_keys[n], |it| (it.i_price, has_original(&it.i_data)))?
        else {
            // Clause 2.4.2.3: an unused item number rolls the whole transaction back.
            return Err(TxnError::Rollback("item number is not valid"));
        };
        let (dist_info, s_original) = match remote {
            Some((local, reads)) if !local(l.supply_w_id) => {
                let r = reads.iter().find(|r| usize::from(r.line) == n);
                let r = r.ok_or(TxnError::Rollback("a supplying partition's stock read is missing"))?;
                (r.dist_info, r.s_original)
            }
            _ => update_stock(db, i.w_id, l, dist)?,
        };
        let ol_amount = l.quantity as i64 * i_price;
        sum += ol_amount;
        brand_lines += (i_original && s_original) as u8;
        db.insert::<t::OrderLines>(&schema::OrderLine {
            ol_delivery_d: 0,
            ol_amount,
            ol_o_id: o_id,
            ol_i_id: l.i_id,
            ol_w_id: i.w_id,
            ol_supply_w_id: l.supply_w_id,
            ol_d_id: i.d_id,
            ol_number: n as u8 + 1,
            ol_quantity: l.quantity,
            ol_dist_info: dist_info,
            _pad: 0,
        })?;
    }
    // total = Σ OL_AMOUNT × (1 − C_DISCOUNT) × (1 + W_TAX + D_TAX), rates in basis points.
    let total = sum * (10_000 - c_discount as i64) * (10_000 + w_tax as i64 + d_tax as i64) / 100_000_000;
    Ok(NewOrderOutput { o_id, total, c_discount, w_tax, d_tax, brand_lines })
}

/// NewOrder's stock step for one line (clause 2.4.2.2): S_QUANTITY, S_YTD, S_ORDER_CNT and
/// S_REMOTE_CNT updated; returns S_DIST_xx of district `dist` (0-based) and whether S_DATA
/// contains "ORIGINAL".
pub(crate) fn update_stock<S: Storage>(
    db: &mut S,
    home_w_id: u16,
    l: &OrderLineInput,
    dist: usize,
) -> Result<([u8; 24], bool), TxnError> {
    let q = l.quantity as i32;
    let remote = (l.supply_w_id != home_w_id) as u32;
    let key = keys::stock(l.supply_w_id, l.i_id);
    db.update::<t::Stocks, _>(key, |s| {
        s.s_quantity = if s.s_quantity - q >= 10 { s.s_quantity - q } else { s.s_quantity - q + 91 };
        s.s_ytd += q as u32;
        s.s_order_cnt += 1;
        s.s_remote_cnt += remote;
        (s.s_dist[dist], has_original(&s.s_data))
    })?
    .ok_or_else(|| missing::<t::Stocks>(key))
}

/// Finds the customer a Payment or OrderStatus names (clause 2.5.2.2 / 2.6.2.2). By last name:
///
/// ```sql
/// SELECT count(c_id) INTO :namecnt FROM customer
///   WHERE c_last = :c_last AND c_d_id = :d_id AND c_w_id = :w_id;
/// DECLARE c_byname CURSOR FOR SELECT c_id FROM customer
///   WHERE c_w_id = :w_id AND c_d_id = :d_id AND c_last = :c_last ORDER BY c_first;
/// -- fetch until position ceil(namecnt / 2)
/// ```
pub fn find_customer<S: Storage>(db: &mut S, w_id: u16, d_id: u8, sel: CustomerSelector) -> Result<u32, TxnError> {
    match sel {
        CustomerSelector::ById(c) => Ok(c),
        CustomerSelector::ByLastName(last) => {
            let lo = schema::CustomerNameKey { w_id, d_id, last, first: [0; 16], c_id: 0 };
            let hi = schema::CustomerNameKey { w_id, d_id, last, first: [0xFF; 16], c_id: u32::MAX };
            let mut matches: Vec<u64> = Vec::new();
            db.scan_secondary::<t::Customers>(lo, hi, ScanDir::Forward, |k| {
                matches.push(k);
                true
            })?;
            if matches.is_empty() {
                return Err(TxnError::NotFound { table: TableId::Customer, key: keys::district(w_id, d_id) });
            }
            // Position ⌈n/2⌉ counting from 1, i.e. index (n − 1) / 2.
            let k = matches[(matches.len() - 1) / 2];
            Ok((k & 0xFFFF_FFFF) as u32)
        }
    }
}

/// Payment (clause 2.5.2.2):
///
/// ```sql
/// UPDATE warehouse SET w_ytd = w_ytd + :h_amount WHERE w_id = :w_id;
/// SELECT w_street_1, w_street_2, w_city, w_state, w_zip, w_name FROM warehouse WHERE w_id = :w_id;
/// UPDATE district SET d_ytd = d_ytd + :h_amount WHERE d_w_id = :w_id AND d_id = :d_id;
/// SELECT d_street_1, d_street_2, d_city, d_state, d_zip, d_name FROM district
///   WHERE d_w_id = :w_id AND d_id = :d_id;
/// -- customer by id, or by last name (see find_customer)
/// SELECT c_first, c_middle, c_last, c_street_1, ..., c_credit, c_credit_lim, c_discount,
///   c_balance, c_since FROM customer WHERE c_w_id = :c_w_id AND c_d_id = :c_d_id AND c_id = :c_id;
/// UPDATE customer SET c_balance = :c_balance - :h_amount,
///   c_ytd_payment = c_ytd_payment + :h_amount, c_payment_cnt = c_payment_cnt + 1
///   WHERE c_w_id = :c_w_id AND c_d_id = :c_d_id AND c_id = :c_id;
/// -- if c_credit = 'BC':
/// SELECT c_data FROM customer WHERE ...;
/// UPDATE customer SET c_data = :c_new_data WHERE ...;  -- "c_id c_d_id c_w_id d_id w_id amount|" || c_data, 500 chars
/// INSERT INTO history (h_c_d_id, h_c_w_id, h_c_id, h_d_id, h_w_id, h_date, h_amount, h_data)
///   VALUES (:c_d_id, :c_w_id, :c_id, :d_id, :w_id, :datetime, :h_amount, :w_name || '    ' || :d_name);
/// ```
pub fn payment<S: Storage>(db: &mut S, i: &PaymentInput) -> Result<PaymentOutput, TxnError> {
    if let CustomerSelector::ById(c) = i.customer {
        db.prefetch::<t::Customers>(&[keys::customer(i.c_w_id, i.c_d_id, c)], Prefetch::Index);
    }
    let names = pay_warehouse_and_district(db, i)?;
    if let CustomerSelector::ById(c) = i.customer {
        db.prefetch::<t::Customers>(&[keys::customer(i.c_w_id, i.c_d_id, c)], Prefetch::Rows);
    }
    let out = pay_customer(db, i)?;
    insert_history(db, i, names, out.c_id)?;
    Ok(out)
}

/// Payment on the home warehouse's partition when the customer lives on another: the
/// warehouse, the district and the HISTORY row, with `customer` — what the customer's
/// partition's piece ([`crate::distributed::payment_customer`]) found and updated at the
/// same timestamp.
pub fn payment_home<S: Storage>(
    db: &mut S,
    i: &PaymentInput,
    customer: PaymentOutput,
) -> Result<PaymentOutput, TxnError> {
    let names = pay_warehouse_and_district(db, i)?;
    insert_history(db, i, names, customer.c_id)?;
    Ok(customer)
}

/// Payment's warehouse and district steps; returns W_NAME and D_NAME.
fn pay_warehouse_and_district<S: Storage>(db: &mut S, i: &PaymentInput) -> Result<([u8; 10], [u8; 10]), TxnError> {
    let wk = keys::warehouse(i.w_id);
    let w_name = db
        .update::<t::Warehouses, _>(wk, |w| {
            w.w_ytd += i.h_amount;
            w.w_name
        })?
        .ok_or_else(|| missing::<t::Warehouses>(wk))?;
    let dk = keys::district(i.w_id, i.d_id);
    let d_name = db
        .update::<t::Districts, _>(dk, |d| {
            d.d_ytd += i.h_amount;
            d.d_name
        })?
        .ok_or_else(|| missing::<t::Districts>(dk))?;
    Ok((w_name, d_name))
}

/// Payment's customer steps (by id or last name; C_DATA for bad credit).
pub(crate) fn pay_customer<S: Storage>(db: &mut S, i: &PaymentInput) -> Result<PaymentOutput, TxnError> {
    let c_id = find_customer(db, i.c_w_id, i.c_d_id, i.customer)?;
    let ck = keys::customer(i.c_w_id, i.c_d_id, c_id);
    let (c_balance, bad_credit) = db
        .update::<t::Customers, _>(ck, |c| {
            c.c_balance -= i.h_amount;
            c.c_ytd_payment += i.h_amount;
            c.c_payment_cnt += 1;
            let bad = &c.c_credit == b"BC";
            if bad {
                prepend_c_data(c, i, c_id);
            }
            (c.c_balance, bad)
        })?
        .ok_or_else(|| missing::<t::Customers>(ck))?;
    Ok(PaymentOutput { c_id, c_balance, bad_credit })
}

/// Payment's HISTORY row: H_DATA is W_NAME, four spaces, D_NAME.
fn insert_history<S: Storage>(
    db: &mut S,
    i: &PaymentInput,
    (w_name, d_name): ([u8; 10], [u8; 10]),
    c_id: u32,
) -> Result<(), TxnError> {
    let mut h_data = [0u8; 24];
    let wn = schema::text(&w_name);
    let dn = schema::text(&d_name);
    for (slot, &b) in h_data.iter_mut().zip(wn.iter().chain(b"    ").chain(dn)) {
        *slot = b;
    }
    db.insert::<t::Histories>(&schema::History {
        h_amount: i.h_amount,
        h_date: i.date,
        h_c_id: c_id,
        h_c_w_id: i.c_w_id,
        h_w_id: i.w_id,
        h_c_d_id: i.c_d_id,
        h_d_id: i.d_id,
        h_data,
        _pad: [0; 6],
    })?;
    Ok(())
}

/// Clause 2.5.2.2: C_ID, C_D_ID, C_W_ID, D_ID, W_ID and H_AMOUNT are inserted at the left of
/// C_DATA, shifting the old contents right; the result is kept to 500 characters.
fn prepend_c_data(c: &mut schema::Customer, i: &PaymentInput, c_id: u32) {
    use std::io::Write;
    let mut buf = [0u8; 560];
    let mut cur = std::io::Cursor::new(&mut buf[..]);
    let _ = write!(
        cur,
        "{} {} {} {} {} {}.{:02}|",
        c_id,
        i.c_d_id,
        i.c_w_id,
        i.d_id,
        i.w_id,
        i.h_amount / 100,
        i.h_amount % 100
    );
    let p = cur.position() as usize;
    let old = schema::text(&c.c_data);
    let keep = old.len().min(c.c_data.len() - p.min(c.c_data.len()));
    let mut new = [0u8; 500];
    new[..p].copy_from_slice(&buf[..p]);
    new[p..p + keep].copy_from_slice(&old[..keep]);
    c.c_data = new;
}

/// OrderStatus (clause 2.6.2.2):
///
/// ```sql
/// -- customer by id, or by last name (see find_customer)
/// SELECT c_balance, c_first, c_middle, c_last FROM customer
///   WHERE c_id = :c_id AND c_d_id = :d_id AND c_w_id = :w_id;
/// SELECT o_id, o_carrier_id, o_entry_d FROM orders
///   WHERE o_w_id = :w_id AND o_d_id = :d_id AND o_c_id = :c_id ORDER BY o_id DESC;  -- first row
/// SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d FROM order_line
///   WHERE ol_o_id = :o_id AND ol_d_id = :d_id AND ol_w_id = :w_id;
/// ```
pub fn order_status<S: Storage>(db: &mut S, i: &OrderStatusInput) -> Result<OrderStatusOutput, TxnError> {
    let c_id = find_customer(db, i.w_id, i.d_id, i.customer)?;
    let ck = keys::customer(i.w_id, i.d_id, c_id);
    let c_balance = db.get::<t::Customers, _>(ck, |c| c.c_balance)?.ok_or_else(|| missing::<t::Customers>(ck))?;
    let lo = keys::order_by_customer(i.w_id, i.d_id, c_id, 0);
    let hi = keys::order_by_customer(i.w_id, i.d_id, c_id, u32::MAX);
    let mut latest = None;
    db.scan_secondary::<t::Orders>(lo, hi, ScanDir::Backward, |k| {
        latest = Some(k);
        false
    })?;
    let last_order = match latest {
        None => None,
        Some(ok) => {
            let (o_id, carrier) =
                db.get::<t::Orders, _>(ok, |o| (o.o_id, o.o_carrier_id))?.ok_or_else(|| missing::<t::Orders>(ok))?;
            let (mut lines, mut amount) = (0u8, 0i64);
            db.scan::<t::OrderLines>(
                keys::order_line(i.w_id, i.d_id, o_id, 0),
                keys::order_line(i.w_id, i.d_id, o_id, u8::MAX),
                ScanDir::Forward,
                |ol| {
                    lines += 1;
                    amount += ol.ol_amount;
                    true
                },
            )?;
            Some((o_id, carrier, lines, amount))
        }
    };
    Ok(OrderStatusOutput { c_id, c_balance, last_order })
}

/// Delivery (clause 2.7.4.2), for each district 1–10 of the warehouse:
///
/// ```sql
/// SELECT no_o_id FROM new_order WHERE no_d_id = :d_id AND no_w_id = :w_id
///   ORDER BY no_o_id ASC;                               -- first row; none: skip the district
/// DELETE FROM new_order WHERE CURRENT OF c_no;
/// SELECT o_c_id FROM orders WHERE o_id = :no_o_id AND o_d_id = :d_id AND o_w_id = :w_id;
/// UPDATE orders SET o_carrier_id = :o_carrier_id
///   WHERE o_id = :no_o_id AND o_d_id = :d_id AND o_w_id = :w_id;
/// UPDATE order_line SET ol_delivery_d = :datetime
///   WHERE ol_o_id = :no_o_id AND ol_d_id = :d_id AND ol_w_id = :w_id;
/// SELECT SUM(ol_amount) FROM order_line
///   WHERE ol_o_id = :no_o_id AND ol_d_id = :d_id AND ol_w_id = :w_id;
/// UPDATE customer SET c_balance = c_balance + :ol_total, c_delivery_cnt = c_delivery_cnt + 1
///   WHERE c_id = :c_id AND c_d_id = :d_id AND c_w_id = :w_id;
/// ```
pub fn delivery<S: Storage>(db: &mut S, i: &DeliveryInput) -> Result<DeliveryOutput, TxnError> {
    let mut delivered = [0u32; DISTRICTS_PER_WAREHOUSE as usize];
    for d_id in 1..=DISTRICTS_PER_WAREHOUSE {
        let mut oldest = None;
        db.scan::<t::NewOrders>(
            keys::new_order(i.w_id, d_id, 0),
            keys::new_order(i.w_id, d_id, u32::MAX),
            ScanDir::Forward,
            |no| {
                oldest = Some(no.no_o_id);
                false
            },
        )?;
        let Some(o_id) = oldest else { continue };
        db.delete::<t::NewOrders>(keys::new_order(i.w_id, d_id, o_id))?;
        let ok = keys::order(i.w_id, d_id, o_id);
        let (c_id, ol_cnt) = db
            .update::<t::Orders, _>(ok, |o| {
                o.o_carrier_id = i.o_carrier_id;
                (o.o_c_id, o.o_ol_cnt)
            })?
            .ok_or_else(|| missing::<t::Orders>(ok))?;
        let mut total = 0i64;
        for n in 1..=ol_cnt {
            let lk = keys::order_line(i.w_id, d_id, o_id, n);
            total += db
                .update::<t::OrderLines, _>(lk, |ol| {
                    ol.ol_delivery_d = i.date;
                    ol.ol_amount
                })?
                .ok_or_else(|| missing::<t::OrderLines>(lk))?;
        }
        let ck = keys::customer(i.w_id, d_id, c_id);
        db.update::<t::Customers, _>(ck, |c| {
            c.c_balance += total;
            c.c_delivery_cnt += 1;
        })?
        .ok_or_else(|| missing::<t::Customers>(ck))?;
        delivered[d_id as usize - 1] = o_id;
    }
    Ok(DeliveryOutput { delivered })
}

/// StockLevel (clause 2.8.2.2):
///
/// ```sql
/// SELECT d_next_o_id FROM district WHERE d_w_id = :w_id AND d_id = :d_id;
/// SELECT COUNT(DISTINCT (s_i_id)) FROM order_line, stock
///   WHERE ol_w_id = :w_id AND ol_d_id = :d_id AND ol_o_id < :o_id AND ol_o_id >= :o_id - 20
///     AND s_w_id = :w_id AND s_i_id = ol_i_id AND s_quantity < :threshold;
/// ```
pub fn stock_level<S: Storage>(db: &mut S, i: &StockLevelInput) -> Result<StockLevelOutput, TxnError> {
    let dk = keys::district(i.w_id, i.d_id);
    let next = db.get::<t::Districts, _>(dk, |d| d.d_next_o_id)?.ok_or_else(|| missing::<t::Districts>(dk))?;
    let mut items: Vec<u32> = Vec::with_capacity(20 * ORDER_LINES_MAX);
    db.scan::<t::OrderLines>(
        keys::order_line(i.w_id, i.d_id, next.saturating_sub(20), 0),
        keys::order_line(i.w_id, i.d_id, next.saturating_sub(1), u8::MAX),
        ScanDir::Forward,
        |ol| {
            items.push(ol.ol_i_id);
            true
        },
    )?;
    items.sort_unstable();
    items.dedup();
    let stock_keys: Vec<u64> = items.iter().map(|&it| keys::stock(i.w_id, it)).collect();
    db.prefetch::<t::Stocks>(&stock_keys, Prefetch::Index);
    db.prefetch::<t::Stocks>(&stock_keys, Prefetch::Rows);
    let mut low_stock = 0;
    for k in stock_keys {
        if db.get::<t::Stocks, _>(k, |s| s.s_quantity < i.threshold)? == Some(true) {
            low_stock += 1;
        }
    }
    Ok(StockLevelOutput { low_stock })
}

#[cfg(test)]
mod tests {
    /// Clause 4.3.2.3: each of the 1,000 names reads back as its number; nothing else does.
    #[test]
    fn c_last_numbers_read_exactly_the_names_of_clause_4_3_2_3() {
        use super::{c_last_number, C_LAST_SYLLABLES};
        for n in 0..=999usize {
            let mut field = [0u8; 16];
            let text: Vec<u8> =
                [n / 100, n / 10 % 10, n % 10].iter().flat_map(|&d| C_LAST_SYLLABLES[d].to_vec()).collect();
            field[..text.len()].copy_from_slice(&text);
            assert_eq!(c_last_number(&field), Some(n as u32), "{}", String::from_utf8_lossy(&text));
        }
        let mut field = *b"BARBARBAR\0\0\0\0\0\0\0";
        assert_eq!(c_last_number(&field), Some(0));
        field[15] = b'X';
        assert_eq!(c_last_number(&field), None, "junk after the zero fill");
        for bad in [[0u8; 16], *b"BARBAR\0\0\0\0\0\0\0\0\0\0", *b"BARBARBARBAR\0\0\0\0", *b"barbarbar\0\0\0\0\0\0\0"] {
            assert_eq!(c_last_number(&bad), None, "{}", String::from_utf8_lossy(&bad));
        }
    }

    #[test]
    fn has_original_finds_the_word_anywhere_and_only_there() {
        let mut field = [0u8; 50];
        for text_len in 8..=50 {
            for at in 0..=text_len - 8 {
                field.fill(b'x');
                field[text_len..].fill(0);
                field[at..at + 8].copy_from_slice(b"ORIGINAL");
                assert!(super::has_original(&field), "len {text_len} at {at}");
                field[at + 7] = b'l';
                assert!(!super::has_original(&field), "len {text_len} at {at}");
            }
        }
        assert!(!super::has_original(b"OOOOOOOOORIGINA"));
        assert!(super::has_original(b"OOOOOOOORIGINAL"));
        assert!(!super::has_original(b"ORIG"));
    }
}
