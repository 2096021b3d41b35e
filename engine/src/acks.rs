//! Acknowledged transactions and their trace in the data: what "nothing acknowledged is lost"
//! means in TPC-C's rows, for every check that asks it (`glass check`, `glass recover`, the
//! failover experiments, the simulator).
//!
//! A NewOrder leaves its ORDER row, found by its key (O_W_ID, O_D_ID, O_ID; clause 1.3). A
//! Payment leaves a HISTORY row (clause 2.5.2.2: H_C_ID, H_C_D_ID, H_C_W_ID, H_D_ID, H_W_ID,
//! H_DATE, H_AMOUNT), and HISTORY has no primary key (clause 1.3), so payments are matched as a
//! multiset of those columns: two identical acknowledged payments need two rows. The other
//! transaction types leave nothing a client can name (Delivery, like the paper's workload,
//! is not acknowledged per order; OrderStatus and StockLevel read only).

use std::collections::BTreeMap;

use crate::error::StorageError;
use crate::procedures::{TxnInput, TxnOutput};
use crate::schema::{keys, t, History};
use crate::storage::Storage;

/// An acknowledged (committed and answered) NewOrder: its ORDER row must exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NewOrderAck {
    pub w: u16,
    pub d: u8,
    pub o_id: u32,
}

impl std::fmt::Display for NewOrderAck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "neworder {} {} {}", self.w, self.d, self.o_id)
    }
}

/// An acknowledged Payment: a HISTORY row with its columns must exist (clause 2.5.2.2: H_W_ID,
/// H_D_ID, H_C_W_ID, H_C_D_ID, H_C_ID, H_DATE, H_AMOUNT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PaymentAck {
    pub w: u16,
    pub d: u8,
    pub c_w: u16,
    pub c_d: u8,
    pub c_id: u32,
    pub date: i64,
    pub amount: i64,
}

impl PaymentAck {
    /// The acknowledgement a HISTORY row answers to.
    pub fn of_history(h: &History) -> PaymentAck {
        PaymentAck {
            w: h.h_w_id,
            d: h.h_d_id,
            c_w: h.h_c_w_id,
            c_d: h.h_c_d_id,
            c_id: h.h_c_id,
            date: h.h_date,
            amount: h.h_amount,
        }
    }
}

/// One acknowledged commit of a type that leaves a row a client can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ack {
    NewOrder(NewOrderAck),
    Payment(PaymentAck),
}

impl Ack {
    /// The acknowledgement of a committed transaction, for the types that leave one. A
    /// Payment by last name names its customer only in the output (C_ID).
    pub fn of(input: &TxnInput, output: &TxnOutput) -> Option<Ack> {
        match (input, output) {
            (TxnInput::NewOrder(i), TxnOutput::NewOrder(o)) => {
                Some(Ack::NewOrder(NewOrderAck { w: i.w_id, d: i.d_id, o_id: o.o_id }))
            }
            (TxnInput::Payment(i), TxnOutput::Payment(o)) => Some(Ack::Payment(PaymentAck {
                w: i.w_id,
                d: i.d_id,
                c_w: i.c_w_id,
                c_d: i.c_d_id,
                c_id: o.c_id,
                date: i.date,
                amount: i.h_amount,
            })),
            _ => None,
        }
    }

    /// The home warehouse: the partition holding it holds the row.
    pub fn warehouse(&self) -> u16 {
        match self {
            Ack::NewOrder(a) => a.w,
            Ack::Payment(a) => a.w,
        }
    }
}

/// The acknowledgements whose rows a database lacks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Missing {
    pub new_orders: Vec<NewOrderAck>,
    pub payments: Vec<PaymentAck>,
}

impl Missing {
    pub fn is_empty(&self) -> bool {
        self.new_orders.is_empty() && self.payments.is_empty()
    }
}

/// The acknowledged NewOrders and Payments that are not in `db` (the caller passes those of
/// the warehouses `db` holds). Payments are matched as a multiset of HISTORY rows; HISTORY is
/// read only when a payment is to be found.
pub fn missing<'a, S: Storage>(
    db: &mut S,
    new_orders: impl IntoIterator<Item = &'a NewOrderAck>,
    payments: impl IntoIterator<Item = &'a PaymentAck>,
) -> Result<Missing, StorageError> {
    let mut gone = Missing::default();
    for a in new_orders {
        if db.get::<t::Orders, _>(keys::order(a.w, a.d, a.o_id), |_| ())?.is_none() {
            gone.new_orders.push(*a);
        }
    }
    let mut payments = payments.into_iter().peekable();
    if payments.peek().is_some() {
        let mut rows: BTreeMap<PaymentAck, u32> = BTreeMap::new();
        db.for_each::<t::Histories>(|h| *rows.entry(PaymentAck::of_history(h)).or_default() += 1);
        for a in payments {
            match rows.get_mut(a) {
                Some(n) if *n > 0 => *n -= 1,
                _ => gone.payments.push(*a),
            }
        }
    }
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::{load_database_scaled, Scale};
    use crate::LeanDb;

    /// Clause 1.3: HISTORY has no key, so two identical payments need two rows; an ORDER row
    /// is found by its key.
    #[test]
    fn payments_are_matched_as_a_multiset_and_orders_by_key() {
        let mut db = LeanDb::new();
        load_database_scaled(&mut db, 1..=1, 7, Scale::tiny(), &mut |_| {}).unwrap();
        let mut one_history = None;
        db.for_each::<t::Histories>(|h| {
            one_history.get_or_insert(PaymentAck::of_history(h));
        });
        let paid = one_history.expect("the load writes HISTORY rows");
        let present = NewOrderAck { w: 1, d: 1, o_id: 1 };
        let absent = NewOrderAck { w: 1, d: 1, o_id: 999_999 };
        let found = missing(&mut db, [&present], [&paid]).unwrap();
        assert!(found.is_empty(), "{found:?}");
        let found = missing(&mut db, [&present, &absent], [&paid, &paid]).unwrap();
        assert_eq!(found.new_orders, vec![absent]);
        assert_eq!(found.payments.len(), 1, "one row answers one of two identical payments");
    }
}
