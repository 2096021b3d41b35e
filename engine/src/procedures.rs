//! The five TPC-C transactions (clause 2) as deterministic stored procedures over
//! [`Storage`]. Every input — including the commit timestamp used as the "current date" — is
//! a parameter; nothing reads a clock or a random source. Each procedure quotes the SQL it
//! implements.

use crate::error::TxnError;
use crate::schema::{self, keys, t, Table, TableId};
use crate::storage::{ScanDir, Storage};

/// Most order lines a NewOrder can carry (clause 2.4.1.3: 5–15).
pub const ORDER_LINES_MAX: usize = 15;
/// Districts per warehouse (clause 1.2.1).
pub const DISTRICTS_PER_WAREHOUSE: u8 = 10;

/// One requested item of a NewOrder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OrderLineInput {
    pub i_id: u32,
    pub supply_w_id: u16,
    pub quantity: u8,
}

/// NewOrder's inputs (clause 2.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewOrderInput {
    pub w_id: u16,
    pub d_id: u8,
    pub c_id: u32,
    /// Number of valid entries in `lines` (5–15).
    pub ol_cnt: u8,
    pub lines: [OrderLineInput; ORDER_LINES_MAX],
    /// O_ENTRY_D: the transaction's timestamp.
    pub entry_d: i64,
}

impl NewOrderInput {
    pub fn lines(&self) -> &[OrderLineInput] {
        &self.lines[..self.ol_cnt as usize]
    }
}

/// How Payment and OrderStatus select the customer (clause 2.5.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CustomerSelector {
    ById(u32),
    /// C_LAST as a fixed-width field.
    ByLastName([u8; 16]),
}

/// Payment's inputs (clause 2.5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderStatusInput {
    pub w_id: u16,
    pub d_id: u8,
    pub customer: CustomerSelector,
}

/// Delivery's inputs (clause 2.7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryInput {
    pub w_id: u16,
    /// 1–10.
    pub o_carrier_id: u8,
    /// OL_DELIVERY_D: the transaction's timestamp.
    pub date: i64,
}

/// StockLevel's inputs (clause 2.8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockLevelInput {
    pub w_id: u16,
    pub d_id: u8,
    /// 10–20.
    pub threshold: i32,
}

/// A transaction request: which procedure and its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnInput {
    NewOrder(NewOrderInput),
    Payment(PaymentInput),
    OrderStatus(OrderStatusInput),
    Delivery(DeliveryInput),
    StockLevel(StockLevelInput),
}

/// The five transaction types, in the order reports list them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
