//! TPC-C's input domains (clauses 2.4.1–2.8.1) and the check of an input against them.
//!
//! Owns: [`InputField`] (a column of an input by its TPC-C name), [`InputError`] (one variant
//! per domain), [`WAREHOUSE_IDS`], [`check_input`] (the domains) and [`check_held`] (whether a
//! partition holds the warehouses of the part of a transaction it runs).
//!
//! Guarantees: checked on both sides of the network — the coordinator refuses an input
//! outside the domains before anything is sent to a replica, and a replica reports such an
//! input, or one naming a warehouse its partition does not hold, as failed without running
//! it — so no such input changes anything. An [`InputError`]'s text fits in
//! [`INPUT_ERROR_BYTES_MAX`] bytes, so a replica's reason carries it whole.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::distributed::PartKind;
use crate::procedures::{
    c_last_number, CustomerSelector, OrderLineInput, TxnInput, TxnKind, WarehouseId, CARRIERS, CUSTOMERS_PER_DISTRICT,
    DATE_MAX, DATE_MIN, DISTRICTS_PER_WAREHOUSE, H_AMOUNT_MAX_CENTS, H_AMOUNT_MIN_CENTS, ITEMS, OL_QUANTITY_MAX,
    ORDER_LINES_MAX, ORDER_LINES_MIN, THRESHOLD_MAX, THRESHOLD_MIN,
};

/// Longest text of an [`InputError`] (tested for every domain): a replica reports the error
/// whole in its failure reason.
pub const INPUT_ERROR_BYTES_MAX: usize = 200;

/// A column of a transaction's input, by its TPC-C name; an order line's columns carry the
/// line's OL_NUMBER (from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InputField {
    WId,
    DId,
    CWId,
    CDId,
    CId,
    CLast,
    OOlCnt,
    OlIId { line: u8 },
    OlSupplyWId { line: u8 },
    OlQuantity { line: u8 },
    OEntryD,
    HAmount,
    HDate,
    OCarrierId,
    OlDeliveryD,
    Threshold,
}

impl fmt::Display for InputField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            InputField::WId => "W_ID",
            InputField::DId => "D_ID",
            InputField::CWId => "C_W_ID",
            InputField::CDId => "C_D_ID",
            InputField::CId => "C_ID",
            InputField::CLast => "C_LAST",
            InputField::OOlCnt => "O_OL_CNT",
            InputField::OlIId { line } => return write!(f, "OL_I_ID of line {line}"),
            InputField::OlSupplyWId { line } => return write!(f, "OL_SUPPLY_W_ID of line {line}"),
            InputField::OlQuantity { line } => return write!(f, "OL_QUANTITY of line {line}"),
            InputField::OEntryD => "O_ENTRY_D",
            InputField::HAmount => "H_AMOUNT",
            InputField::HDate => "H_DATE",
            InputField::OCarrierId => "O_CARRIER_ID",
            InputField::OlDeliveryD => "OL_DELIVERY_D",
            InputField::Threshold => "threshold",
        };
        f.write_str(name)
    }
}

/// Every warehouse number (clause 1.2.1: W_ID runs from 1). Which of them exist is the
/// cluster's configuration (the coordinator's router) and, on a replica, its partition
/// ([`check_held`]).
pub const WAREHOUSE_IDS: std::ops::RangeInclusive<WarehouseId> = 1..=WarehouseId::MAX;

/// An input outside TPC-C's domains: one variant per domain, each naming the transaction, the
/// column, the value and what the domain allows. Ranges are inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum InputError {
    /// Not a warehouse number ([`WAREHOUSE_IDS`]: 0): W_ID (clauses 2.4.1.1, 2.5.1.1, 2.6.1.1,
    /// 2.7.1.1, 2.8.1.1), C_W_ID (2.5.1.2), OL_SUPPLY_W_ID (2.4.1.5). A number beyond the
    /// cluster's warehouses is the router's `UnknownWarehouse`; beyond a replica's partition,
    /// [`InputError::NotHeld`].
    #[error("{txn}: {field} {value} is outside {min}..={max}")]
    Warehouse { txn: TxnKind, field: InputField, value: WarehouseId, min: WarehouseId, max: WarehouseId },
    /// A warehouse the checking replica's partition does not hold: the whole transaction, or
    /// the piece of it this partition runs, belongs elsewhere (a partition's population is
    /// its warehouses, `cluster.toml`; the replica reports the error under its partition).
    #[error("{txn}: {field} {value} is not a warehouse this partition holds")]
    NotHeld { txn: TxnKind, field: InputField, value: WarehouseId },
    /// A district number outside 1..=10: D_ID (clauses 2.4.1.2, 2.5.1.2, 2.6.1.2, 2.8.1.1),
    /// C_D_ID (2.5.1.2).
    #[error("{txn}: {field} {value} is outside {min}..={max}")]
    District { txn: TxnKind, field: InputField, value: u8, min: u8, max: u8 },
    /// A customer number outside 1..=3,000: C_ID (clauses 2.4.1.2, 2.5.1.2, 2.6.1.2).
    #[error("{txn}: C_ID {value} is outside {min}..={max}")]
    Customer { txn: TxnKind, value: u32, min: u32, max: u32 },
    /// A customer's last name that is not three syllables of clause 4.3.2.3's table followed
    /// by zero fill (clauses 2.5.1.2, 2.6.1.2: C_LAST is generated per clause 4.3.2.3).
    #[error("{txn}: C_LAST {:?} is not three syllables of clause 4.3.2.3", String::from_utf8_lossy(name))]
    LastName { txn: TxnKind, name: [u8; 16] },
    /// An order line count outside 5..=15: O_OL_CNT (clause 2.4.1.3).
    #[error("NewOrder: O_OL_CNT {value} is outside {min}..={max}")]
    OrderLineCount { value: u8, min: u8, max: u8 },
    /// An item number outside 1..=100,000 (clause 2.4.1.5, item 1: NURand(8191, 1, 100000)),
    /// except on the last line, where a number above 100,000 is the specified "unused value"
    /// of the 1% of NewOrders that roll back (clauses 2.4.1.4, 2.4.1.5) and stays admissible.
    /// 0 is refused everywhere: it is the empty order line of the input's encoding.
    #[error("NewOrder: OL_I_ID {value} of line {line} is outside {min}..={max} (only the last line may name an unused item above {max})")]
    Item { line: u8, value: u32, min: u32, max: u32 },
    /// A quantity outside 1..=10: OL_QUANTITY (clause 2.4.1.5, item 3).
    #[error("NewOrder: OL_QUANTITY {value} of line {line} is outside {min}..={max}")]
    Quantity { line: u8, value: u8, min: u8, max: u8 },
    /// A payment outside 1.00..=5,000.00: H_AMOUNT, in cents (clause 2.5.1.3).
    #[error("Payment: H_AMOUNT {value} cents is outside {min}..={max}")]
    Amount { value: i64, min: i64, max: i64 },
    /// A date outside [`DATE_MIN`]..=[`DATE_MAX`] seconds since the Unix epoch: O_ENTRY_D
    /// (clause 2.4.1.6), H_DATE (2.5.1.4), OL_DELIVERY_D (2.7.1.3) — "the current system date
    /// and time", which these bounds hold.
    #[error("{txn}: {field} {value} is outside {min}..={max} (seconds since the Unix epoch)")]
    Date { txn: TxnKind, field: InputField, value: i64, min: i64, max: i64 },
    /// A carrier outside 1..=10: O_CARRIER_ID (clause 2.7.1.2).
    #[error("Delivery: O_CARRIER_ID {value} is outside {min}..={max}")]
    Carrier { value: u8, min: u8, max: u8 },
    /// A threshold outside 10..=20 (clause 2.8.1.2).
    #[error("StockLevel: threshold {value} is outside {min}..={max}")]
    Threshold { value: i32, min: i32, max: i32 },
}

/// Checks `input` against TPC-C's input domains (clauses 2.4.1, 2.5.1, 2.6.1, 2.7.1, 2.8.1)
/// and the population's sizes (`engine::procedures`: 10 districts a warehouse, 3,000
/// customers a district, 100,000 items); every warehouse it names must be a warehouse number
/// ([`WAREHOUSE_IDS`]) — which ones exist is the caller's to check. The first violation found,
/// in the order of the clause's fields, is returned. Checked on both sides of the network:
/// the coordinator refuses such a request, and a replica reports it as failed rather than
/// run it.
pub fn check_input(input: &TxnInput) -> Result<(), InputError> {
    let txn = input.kind();
    let warehouse = |field, value: WarehouseId| {
        let (min, max) = (*WAREHOUSE_IDS.start(), *WAREHOUSE_IDS.end());
        if WAREHOUSE_IDS.contains(&value) {
            Ok(())
        } else {
            Err(InputError::Warehouse { txn, field, value, min, max })
        }
    };
    let district = |field, value: u8| {
        if (1..=DISTRICTS_PER_WAREHOUSE).contains(&value) {
            Ok(())
        } else {
            Err(InputError::District { txn, field, value, min: 1, max: DISTRICTS_PER_WAREHOUSE })
        }
    };
    let customer = |value: u32| {
        if (1..=CUSTOMERS_PER_DISTRICT).contains(&value) {
            Ok(())
        } else {
            Err(InputError::Customer { txn, value, min: 1, max: CUSTOMERS_PER_DISTRICT })
        }
    };
    let selector = |sel: CustomerSelector| match sel {
        CustomerSelector::ById(c) => customer(c),
        CustomerSelector::ByLastName(name) => match c_last_number(&name) {
            Some(_) => Ok(()),
            None => Err(InputError::LastName { txn, name }),
        },
    };
    let date = |field, value: i64| {
        if (DATE_MIN..=DATE_MAX).contains(&value) {
            Ok(())
        } else {
            Err(InputError::Date { txn, field, value, min: DATE_MIN, max: DATE_MAX })
        }
    };
    match input {
        TxnInput::NewOrder(i) => {
            warehouse(InputField::WId, i.w_id)?;
            district(InputField::DId, i.d_id)?;
            customer(i.c_id)?;
            if !(ORDER_LINES_MIN..=ORDER_LINES_MAX).contains(&usize::from(i.ol_cnt)) {
                let (min, max) = (ORDER_LINES_MIN as u8, ORDER_LINES_MAX as u8);
                return Err(InputError::OrderLineCount { value: i.ol_cnt, min, max });
            }
            for (n, l) in i.lines().iter().enumerate() {
                let line = n as u8 + 1;
                let unused_on_last_line = line == i.ol_cnt && l.i_id > ITEMS;
                if !(1..=ITEMS).contains(&l.i_id) && !unused_on_last_line {
                    return Err(InputError::Item { line, value: l.i_id, min: 1, max: ITEMS });
                }
                warehouse(InputField::OlSupplyWId { line }, l.supply_w_id)?;
                if !(1..=OL_QUANTITY_MAX).contains(&l.quantity) {
                    return Err(InputError::Quantity { line, value: l.quantity, min: 1, max: OL_QUANTITY_MAX });
                }
            }
            date(InputField::OEntryD, i.entry_d)
        }
        TxnInput::Payment(i) => {
            warehouse(InputField::WId, i.w_id)?;
            district(InputField::DId, i.d_id)?;
            warehouse(InputField::CWId, i.c_w_id)?;
            district(InputField::CDId, i.c_d_id)?;
            selector(i.customer)?;
            if !(H_AMOUNT_MIN_CENTS..=H_AMOUNT_MAX_CENTS).contains(&i.h_amount) {
                let (min, max) = (H_AMOUNT_MIN_CENTS, H_AMOUNT_MAX_CENTS);
                return Err(InputError::Amount { value: i.h_amount, min, max });
            }
            date(InputField::HDate, i.date)
        }
        TxnInput::OrderStatus(i) => {
            warehouse(InputField::WId, i.w_id)?;
            district(InputField::DId, i.d_id)?;
            selector(i.customer)
        }
        TxnInput::Delivery(i) => {
            warehouse(InputField::WId, i.w_id)?;
            if !(1..=CARRIERS).contains(&i.o_carrier_id) {
                return Err(InputError::Carrier { value: i.o_carrier_id, min: 1, max: CARRIERS });
            }
            date(InputField::OlDeliveryD, i.date)
        }
        TxnInput::StockLevel(i) => {
            warehouse(InputField::WId, i.w_id)?;
            district(InputField::DId, i.d_id)?;
            if !(THRESHOLD_MIN..=THRESHOLD_MAX).contains(&i.threshold) {
                return Err(InputError::Threshold { value: i.threshold, min: THRESHOLD_MIN, max: THRESHOLD_MAX });
            }
            Ok(())
        }
    }
}

/// Checks that the partition holding the warehouses for which `holds` is true is where `part`
/// of `input` runs: a whole transaction's every warehouse; a home piece's
/// W_ID; for a remote piece, some warehouse other than W_ID (Payment's C_W_ID, a NewOrder
/// line's OL_SUPPLY_W_ID). Assumes [`check_input`] found nothing.
pub fn check_held(
    input: &TxnInput,
    part: PartKind,
    mut holds: impl FnMut(WarehouseId) -> bool,
) -> Result<(), InputError> {
    let txn = input.kind();
    let not_held = |(field, value)| InputError::NotHeld { txn, field, value };
    let mut named = warehouse_fields(input);
    let home = named.next().expect("every input names its home warehouse");
    match part {
        PartKind::Whole => {
            if !holds(home.1) {
                return Err(not_held(home));
            }
            // Most lines are supplied by the home warehouse: look each run up once.
            let mut last_held = home.1;
            for (field, w) in named {
                if w != last_held {
                    if !holds(w) {
                        return Err(not_held((field, w)));
                    }
                    last_held = w;
                }
            }
            Ok(())
        }
        PartKind::Home => {
            if holds(home.1) {
                Ok(())
            } else {
                Err(not_held(home))
            }
        }
        PartKind::Remote => {
            let mut first_other = None;
            for (field, w) in named.filter(|&(_, w)| w != home.1) {
                first_other.get_or_insert((field, w));
                if holds(w) {
                    return Ok(());
                }
            }
            Err(not_held(first_other.unwrap_or(home)))
        }
    }
}

/// The warehouses `input` names, with their columns: W_ID first, then C_W_ID or each order
/// line's OL_SUPPLY_W_ID. Allocates nothing.
pub(crate) fn warehouse_fields(input: &TxnInput) -> impl Iterator<Item = (InputField, WarehouseId)> + '_ {
    let (home, lines): (WarehouseId, &[OrderLineInput]) = match input {
        TxnInput::NewOrder(i) => (i.w_id, &i.lines[..usize::from(i.ol_cnt).min(ORDER_LINES_MAX)]),
        TxnInput::Payment(i) => (i.w_id, &[]),
        TxnInput::OrderStatus(i) => (i.w_id, &[]),
        TxnInput::Delivery(i) => (i.w_id, &[]),
        TxnInput::StockLevel(i) => (i.w_id, &[]),
    };
    let customer = match input {
        TxnInput::Payment(i) => Some((InputField::CWId, i.c_w_id)),
        _ => None,
    };
    let supply = lines.iter().enumerate().map(|(n, l)| (InputField::OlSupplyWId { line: n as u8 + 1 }, l.supply_w_id));
    std::iter::once((InputField::WId, home)).chain(customer).chain(supply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distributed::warehouses_touched;
    use crate::procedures::CustomerSelector::{ById, ByLastName};
    use crate::procedures::{
        DeliveryInput, NewOrderInput, OrderLineInput, OrderStatusInput, PaymentInput, StockLevelInput, C_LAST_SYLLABLES,
    };
    use InputField::*;

    #[test]
    fn warehouses_touched_follow_the_procedure() {
        let mut no = new_order();
        for (l, s) in no.lines.iter_mut().zip([3, 1, 1, 1, 1]) {
            l.supply_w_id = s;
        }
        no.lines[5] = OrderLineInput { i_id: 2, supply_w_id: 9, quantity: 1 }; // beyond ol_cnt
        assert_eq!(warehouses_touched(&TxnInput::NewOrder(no)).collect::<Vec<_>>(), vec![1, 3, 1, 1, 1, 1]);
        let pay = TxnInput::Payment(PaymentInput { w_id: 2, c_w_id: 4, ..payment() });
        assert_eq!(warehouses_touched(&pay).collect::<Vec<_>>(), vec![2, 4]);
    }

    // --- TPC-C's input domains (issue #14, item 6): each boundary just inside is accepted,
    // --- just outside and at the type's extremes is refused with the domain's error.

    /// A date in the domain: 2008-06-10, the load's date.
    const DATE: i64 = 1_213_056_000;

    fn new_order() -> NewOrderInput {
        let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
        for (n, l) in lines.iter_mut().take(ORDER_LINES_MIN).enumerate() {
            *l = OrderLineInput { i_id: n as u32 + 1, supply_w_id: 1, quantity: 1 };
        }
        NewOrderInput { w_id: 1, d_id: 1, c_id: 1, ol_cnt: ORDER_LINES_MIN as u8, lines, entry_d: DATE }
    }

    fn payment() -> PaymentInput {
        PaymentInput { w_id: 1, d_id: 1, c_w_id: 1, c_d_id: 1, customer: ById(1), h_amount: 100, date: DATE }
    }

    fn order_status() -> OrderStatusInput {
        OrderStatusInput { w_id: 1, d_id: 1, customer: ById(1) }
    }

    fn delivery() -> DeliveryInput {
        DeliveryInput { w_id: 1, o_carrier_id: 1, date: DATE }
    }

    fn stock_level() -> StockLevelInput {
        StockLevelInput { w_id: 1, d_id: 1, threshold: 10 }
    }

    fn ok(input: TxnInput) {
        assert_eq!(check_input(&input), Ok(()), "{input:?}");
    }

    fn refused(input: TxnInput) -> InputError {
        match check_input(&input) {
            Err(e) => {
                assert!(e.to_string().len() <= INPUT_ERROR_BYTES_MAX, "a replica's reason keeps the whole error: {e}");
                e
            }
            Ok(()) => panic!("admitted: {input:?}"),
        }
    }

    #[test]
    fn hand_written_inputs_of_these_tests_are_in_domain() {
        ok(TxnInput::NewOrder(new_order()));
        ok(TxnInput::Payment(payment()));
        ok(TxnInput::OrderStatus(order_status()));
        ok(TxnInput::Delivery(delivery()));
        ok(TxnInput::StockLevel(stock_level()));
    }

    /// Clauses 2.4.1.1, 2.5.1.1–2, 2.6.1.1, 2.7.1.1, 2.8.1.1, 2.4.1.5 (item 2): warehouse
    /// numbers start at 1; which exist is the cluster's (router) or partition's (replica).
    #[test]
    fn warehouse_zero_is_refused_in_every_column() {
        let e = |txn, field| InputError::Warehouse { txn, field, value: 0, min: 1, max: WarehouseId::MAX };
        assert_eq!(refused(TxnInput::NewOrder(NewOrderInput { w_id: 0, ..new_order() })), e(TxnKind::NewOrder, WId));
        let mut no = new_order();
        no.lines[4].supply_w_id = 0;
        assert_eq!(refused(TxnInput::NewOrder(no)), e(TxnKind::NewOrder, OlSupplyWId { line: 5 }));
        assert_eq!(refused(TxnInput::Payment(PaymentInput { w_id: 0, ..payment() })), e(TxnKind::Payment, WId));
        assert_eq!(refused(TxnInput::Payment(PaymentInput { c_w_id: 0, ..payment() })), e(TxnKind::Payment, CWId));
        let os = OrderStatusInput { w_id: 0, ..order_status() };
        assert_eq!(refused(TxnInput::OrderStatus(os)), e(TxnKind::OrderStatus, WId));
        assert_eq!(refused(TxnInput::Delivery(DeliveryInput { w_id: 0, ..delivery() })), e(TxnKind::Delivery, WId));
        let sl = StockLevelInput { w_id: 0, ..stock_level() };
        assert_eq!(refused(TxnInput::StockLevel(sl)), e(TxnKind::StockLevel, WId));
        ok(TxnInput::NewOrder(NewOrderInput { w_id: WarehouseId::MAX, ..new_order() }));
    }

    /// Clauses 2.4.1.2, 2.5.1.2, 2.6.1.2, 2.8.1.1: D_ID and C_D_ID within 1..=10.
    #[test]
    fn districts_are_1_to_10() {
        let max = DISTRICTS_PER_WAREHOUSE;
        type Build = fn(u8) -> TxnInput;
        let columns: [(Build, TxnKind, InputField); 5] = [
            (|d| TxnInput::NewOrder(NewOrderInput { d_id: d, ..new_order() }), TxnKind::NewOrder, DId),
            (|d| TxnInput::Payment(PaymentInput { d_id: d, ..payment() }), TxnKind::Payment, DId),
            (|d| TxnInput::Payment(PaymentInput { c_d_id: d, ..payment() }), TxnKind::Payment, CDId),
            (|d| TxnInput::OrderStatus(OrderStatusInput { d_id: d, ..order_status() }), TxnKind::OrderStatus, DId),
            (|d| TxnInput::StockLevel(StockLevelInput { d_id: d, ..stock_level() }), TxnKind::StockLevel, DId),
        ];
        for (build, txn, field) in columns {
            ok(build(1));
            ok(build(max));
            for value in [0, max + 1, u8::MAX] {
                assert_eq!(refused(build(value)), InputError::District { txn, field, value, min: 1, max });
            }
        }
    }

    /// Clauses 2.4.1.2, 2.5.1.2, 2.6.1.2: C_ID within 1..=3,000.
    #[test]
    fn customers_are_1_to_3000() {
        let max = CUSTOMERS_PER_DISTRICT;
        type Build = fn(u32) -> TxnInput;
        let columns: [(Build, TxnKind); 3] = [
            (|c| TxnInput::NewOrder(NewOrderInput { c_id: c, ..new_order() }), TxnKind::NewOrder),
            (|c| TxnInput::Payment(PaymentInput { customer: ById(c), ..payment() }), TxnKind::Payment),
            (|c| TxnInput::OrderStatus(OrderStatusInput { customer: ById(c), ..order_status() }), TxnKind::OrderStatus),
        ];
        for (build, txn) in columns {
            ok(build(1));
            ok(build(max));
            for value in [0, max + 1, u32::MAX] {
                assert_eq!(refused(build(value)), InputError::Customer { txn, value, min: 1, max });
            }
        }
    }

    /// Clauses 2.5.1.2, 2.6.1.2 with 4.3.2.3: a last name is three syllables of the table,
    /// zero-filled; every one of the 1,000 is admitted, anything else refused.
    #[test]
    fn last_names_are_three_syllables_of_clause_4_3_2_3() {
        let field = |text: &[u8]| {
            let mut f = [0u8; 16];
            f[..text.len()].copy_from_slice(text);
            f
        };
        for n in 0..=999usize {
            let text: Vec<u8> =
                [n / 100, n / 10 % 10, n % 10].iter().flat_map(|&d| C_LAST_SYLLABLES[d].to_vec()).collect();
            ok(TxnInput::Payment(PaymentInput { customer: ByLastName(field(&text)), ..payment() }));
            ok(TxnInput::OrderStatus(OrderStatusInput { customer: ByLastName(field(&text)), ..order_status() }));
        }
        let mut junk_after_the_fill = field(b"BARBARBAR");
        junk_after_the_fill[15] = b'X';
        for name in [
            [0u8; 16],
            field(b"BARBAR"),
            field(b"BARBARBARBAR"),
            field(b"barbarbar"),
            field(b"SMITH"),
            field(b"BARBARBA"),
            field(b"BARBARBAR "),
            junk_after_the_fill,
            [0xFF; 16],
        ] {
            let e = refused(TxnInput::Payment(PaymentInput { customer: ByLastName(name), ..payment() }));
            assert_eq!(e, InputError::LastName { txn: TxnKind::Payment, name });
            let e = refused(TxnInput::OrderStatus(OrderStatusInput { customer: ByLastName(name), ..order_status() }));
            assert_eq!(e, InputError::LastName { txn: TxnKind::OrderStatus, name });
        }
    }

    /// Clause 2.4.1.3: O_OL_CNT within 5..=15.
    #[test]
    fn order_line_counts_are_5_to_15() {
        let mut no = new_order();
        for (n, l) in no.lines.iter_mut().enumerate() {
            *l = OrderLineInput { i_id: n as u32 + 1, supply_w_id: 1, quantity: 1 };
        }
        for cnt in [ORDER_LINES_MIN as u8, ORDER_LINES_MAX as u8] {
            ok(TxnInput::NewOrder(NewOrderInput { ol_cnt: cnt, ..no }));
        }
        for value in [0, ORDER_LINES_MIN as u8 - 1, ORDER_LINES_MAX as u8 + 1, u8::MAX] {
            assert_eq!(
                refused(TxnInput::NewOrder(NewOrderInput { ol_cnt: value, ..no })),
                InputError::OrderLineCount { value, min: 5, max: 15 }
            );
        }
    }

    /// Clause 2.4.1.5 (item 1): OL_I_ID within 1..=100,000; the last line may carry the
    /// unused value of the 1% rollback (clause 2.4.1.4), which must stay admissible; 0 never.
    #[test]
    fn items_are_1_to_100000_or_unused_on_the_last_line() {
        let with_item = |line: usize, i_id: u32| {
            let mut no = new_order();
            no.lines[line - 1].i_id = i_id;
            TxnInput::NewOrder(no)
        };
        let last = ORDER_LINES_MIN;
        for line in [1, last] {
            ok(with_item(line, 1));
            ok(with_item(line, ITEMS));
            assert_eq!(
                refused(with_item(line, 0)),
                InputError::Item { line: line as u8, value: 0, min: 1, max: ITEMS }
            );
        }
        for unused in [ITEMS + 1, u32::MAX] {
            ok(with_item(last, unused));
            for line in [1, last - 1] {
                let e = InputError::Item { line: line as u8, value: unused, min: 1, max: ITEMS };
                assert_eq!(refused(with_item(line, unused)), e);
            }
        }
    }

    /// Clause 2.4.1.5 (item 3): OL_QUANTITY within 1..=10.
    #[test]
    fn quantities_are_1_to_10() {
        let with_quantity = |line: usize, quantity: u8| {
            let mut no = new_order();
            no.lines[line - 1].quantity = quantity;
            TxnInput::NewOrder(no)
        };
        for line in [1, ORDER_LINES_MIN] {
            ok(with_quantity(line, 1));
            ok(with_quantity(line, OL_QUANTITY_MAX));
            for value in [0, OL_QUANTITY_MAX + 1, u8::MAX] {
                let e = InputError::Quantity { line: line as u8, value, min: 1, max: 10 };
                assert_eq!(refused(with_quantity(line, value)), e);
            }
        }
    }

    /// Clause 2.5.1.3: H_AMOUNT within 1.00..=5,000.00.
    #[test]
    fn payment_amounts_are_1_00_to_5000_00() {
        let with_amount = |h_amount| TxnInput::Payment(PaymentInput { h_amount, ..payment() });
        ok(with_amount(100));
        ok(with_amount(500_000));
        for value in [0, 99, 500_001, -100, i64::MIN, i64::MAX] {
            assert_eq!(refused(with_amount(value)), InputError::Amount { value, min: 100, max: 500_000 });
        }
    }

    /// Clauses 2.4.1.6, 2.5.1.4, 2.7.1.3: O_ENTRY_D, H_DATE, OL_DELIVERY_D are dates within
    /// DATE_MIN..=DATE_MAX (1970-01-01T00:00:01Z..=9999-12-31T23:59:59Z in seconds).
    #[test]
    fn dates_are_within_the_documented_range() {
        type Build = fn(i64) -> TxnInput;
        let columns: [(Build, TxnKind, InputField); 3] = [
            (|d| TxnInput::NewOrder(NewOrderInput { entry_d: d, ..new_order() }), TxnKind::NewOrder, OEntryD),
            (|d| TxnInput::Payment(PaymentInput { date: d, ..payment() }), TxnKind::Payment, HDate),
            (|d| TxnInput::Delivery(DeliveryInput { date: d, ..delivery() }), TxnKind::Delivery, OlDeliveryD),
        ];
        assert_eq!((DATE_MIN, DATE_MAX), (1, 253_402_300_799));
        for (build, txn, field) in columns {
            ok(build(DATE_MIN));
            ok(build(DATE_MAX));
            for value in [0, -1, DATE_MAX + 1, i64::MIN, i64::MAX] {
                let e = InputError::Date { txn, field, value, min: DATE_MIN, max: DATE_MAX };
                assert_eq!(refused(build(value)), e);
            }
        }
    }

    /// Clause 2.7.1.2: O_CARRIER_ID within 1..=10.
    #[test]
    fn carriers_are_1_to_10() {
        let with_carrier = |o_carrier_id| TxnInput::Delivery(DeliveryInput { o_carrier_id, ..delivery() });
        ok(with_carrier(1));
        ok(with_carrier(CARRIERS));
        for value in [0, CARRIERS + 1, u8::MAX] {
            assert_eq!(refused(with_carrier(value)), InputError::Carrier { value, min: 1, max: 10 });
        }
    }

    /// Clause 2.8.1.2: the threshold within 10..=20.
    #[test]
    fn thresholds_are_10_to_20() {
        let with_threshold = |threshold| TxnInput::StockLevel(StockLevelInput { threshold, ..stock_level() });
        ok(with_threshold(THRESHOLD_MIN));
        ok(with_threshold(THRESHOLD_MAX));
        for value in [0, 9, 21, -10, i32::MIN, i32::MAX] {
            assert_eq!(refused(with_threshold(value)), InputError::Threshold { value, min: 10, max: 20 });
        }
    }

    /// A replica runs only what its partition holds: a whole transaction's every warehouse,
    /// a home piece's W_ID, a remote piece's other warehouses (some of them).
    #[test]
    fn a_partition_runs_only_the_warehouses_it_holds() {
        let holds = |w: WarehouseId| (1..=2).contains(&w);
        let mut no = new_order();
        no.lines[2].supply_w_id = 3;
        let no = TxnInput::NewOrder(no);
        let not_held = |txn, field, value| Err(InputError::NotHeld { txn, field, value });
        let line3 = OlSupplyWId { line: 3 };
        assert_eq!(check_held(&no, PartKind::Whole, holds), not_held(TxnKind::NewOrder, line3, 3));
        assert_eq!(check_held(&no, PartKind::Home, holds), Ok(()));
        assert_eq!(check_held(&no, PartKind::Remote, |w| w == 3), Ok(()));
        assert_eq!(check_held(&no, PartKind::Remote, holds), not_held(TxnKind::NewOrder, line3, 3));
        let here = TxnInput::NewOrder(new_order());
        assert_eq!(check_held(&here, PartKind::Whole, holds), Ok(()));
        assert_eq!(check_held(&here, PartKind::Whole, |w| w == 2), not_held(TxnKind::NewOrder, WId, 1));
        let pay = TxnInput::Payment(PaymentInput { w_id: 2, c_w_id: 4, ..payment() });
        assert_eq!(check_held(&pay, PartKind::Whole, holds), not_held(TxnKind::Payment, CWId, 4));
        assert_eq!(check_held(&pay, PartKind::Home, holds), Ok(()));
        assert_eq!(check_held(&pay, PartKind::Remote, |w| w == 4), Ok(()));
        let dl = TxnInput::Delivery(DeliveryInput { w_id: 5, ..delivery() });
        assert_eq!(check_held(&dl, PartKind::Whole, holds), not_held(TxnKind::Delivery, WId, 5));
    }
}
