//! TPC-C's multi-partition transactions as pieces, one per partition touched, each run at the
//! transaction's timestamp on that partition's own data — deterministic execution in the
//! manner of Calvin (Thomson et al., SIGMOD 2012): no two-phase commit, no locks held across
//! partitions. The reads flow one way: a *remote* piece (the supplying warehouse's stock
//! for NewOrder, the customer for Payment) needs nothing from the home partition, and the
//! *home* piece needs the remote pieces' reads ([`RemoteReads`]). Since every partition
//! executes in timestamp order and remote pieces never wait, no wait cycle can form.
//!
//! Owns: the split of NewOrder and Payment ([`new_order_supply`], [`payment_customer`], and
//! the home pieces [`crate::procedures::new_order_home`], [`crate::procedures::payment_home`]),
//! the one classifier of which warehouses a transaction touches ([`warehouses_touched`], and
//! [`touched`], each once) and which partitions ([`partitions_touched`]: the coordinator's
//! routing, the drivers' and the simulator's single/multi-partition counts), and the rule
//! that joins the pieces' outcomes.
//!
//! Guarantees: the pieces of a transaction, run on partitions that together hold its
//! warehouses, leave exactly the rows the single-partition procedure leaves on one database
//! holding them all, and the home piece returns the same output (tested against it). An
//! unused item number rolls NewOrder back on *every* partition: each holds all of ITEM and
//! checks every line before changing anything (clause 2.4.2.3). Payment never rolls back.

use serde::{Deserialize, Serialize};

use crate::error::{TxnError, UnknownWarehouse};
use crate::procedures::{
    self, NewOrderInput, PaymentInput, PaymentOutput, TxnInput, WarehouseId, DISTRICTS_PER_WAREHOUSE,
};
use crate::schema::{keys, t};
use crate::storage::Storage;

/// One line's stock step, done on the supplying warehouse's partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockRead {
    /// The line's index in the order (0-based).
    pub line: u8,
    /// S_DIST_xx for the order's district: the order line's OL_DIST_INFO.
    pub dist_info: [u8; 24],
    /// Whether S_DATA contains "ORIGINAL" (the brand-generic flag).
    pub s_original: bool,
}

/// What a remote piece tells the home piece.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoteReads {
    /// NewOrder: the lines this partition supplied.
    Stock(Vec<StockRead>),
    /// Payment: the customer found and paid.
    Customer(PaymentOutput),
}

/// Which part of a transaction a partition runs (on the wire, `wire::messages::Part`): the
/// whole of it, its home piece, or a remote piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartKind {
    /// The whole transaction: it touches this partition only.
    Whole,
    /// The home piece (W_ID's partition).
    Home,
    /// A remote piece (NewOrder's supplying warehouse, Payment's customer).
    Remote,
}

/// The warehouses a transaction touches, home first: NewOrder's home and supply warehouses,
/// Payment's home and customer warehouses, the home warehouse of the others. May repeat a
/// warehouse; allocates nothing. Only NewOrder (a remote supplying warehouse) and Payment (a
/// remote customer) can span warehouses. Assumes [`crate::input::check_input`] found nothing.
pub fn warehouses_touched(input: &TxnInput) -> impl Iterator<Item = WarehouseId> + '_ {
    crate::input::warehouse_fields(input).map(|(_, w)| w)
}

/// [`warehouses_touched`] each once: the home warehouse first, the others in increasing order.
pub fn touched(input: &TxnInput) -> Vec<WarehouseId> {
    let mut w: Vec<WarehouseId> = warehouses_touched(input).collect();
    let home = w[0];
    w[1..].sort_unstable();
    w.dedup();
    if w.len() > 1 && w[1..].contains(&home) {
        w.retain(|&x| x != home);
        w.insert(0, home);
    }
    w
}

/// The partitions a transaction touches: its home warehouse's, and the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionsTouched<P> {
    /// The home warehouse's partition.
    pub home: P,
    /// The other partitions it touches, each once, in increasing order: empty for a
    /// single-partition transaction.
    pub remotes: Vec<P>,
}

impl<P> PartitionsTouched<P> {
    /// Whether the transaction spans more than one partition.
    pub fn is_multi(&self) -> bool {
        !self.remotes.is_empty()
    }
}

/// The partitions holding the warehouses `input` touches ([`warehouses_touched`]), where
/// `partition_of` names the partition of a warehouse (`None`: no partition holds it). The
/// first warehouse, in [`warehouses_touched`]'s order, that no partition holds is the error.
/// One lookup per warehouse; no allocation for a single-partition transaction.
pub fn partitions_touched<P: Copy + Ord>(
    input: &TxnInput,
    mut partition_of: impl FnMut(WarehouseId) -> Option<P>,
) -> Result<PartitionsTouched<P>, UnknownWarehouse> {
    let mut home = None;
    let mut remotes: Vec<P> = Vec::new();
    for w in warehouses_touched(input) {
        let p = partition_of(w).ok_or(UnknownWarehouse { warehouse: w })?;
        match home {
            None => home = Some(p),
            Some(h) if h != p && !remotes.contains(&p) => remotes.push(p),
            Some(_) => {}
        }
    }
    let home = home.expect("every transaction touches its home warehouse");
    remotes.sort_unstable();
    Ok(PartitionsTouched { home, remotes })
}

/// NewOrder, a supplying partition's piece (clause 2.4.2.2, the stock steps):
///
/// ```sql
/// -- every line, before anything changes (each partition holds all of ITEM):
/// SELECT i_price FROM item WHERE i_id = :ol_i_id;   -- none: ROLLBACK
/// -- each line whose supplying warehouse `local` holds:
/// SELECT s_quantity, s_data, s_dist_xx FROM stock WHERE s_i_id = :ol_i_id AND s_w_id = :ol_supply_w_id;
/// UPDATE stock SET s_quantity = ..., s_ytd = s_ytd + :ol_quantity, s_order_cnt = s_order_cnt + 1,
///   s_remote_cnt = s_remote_cnt + 1 WHERE s_i_id = :ol_i_id AND s_w_id = :ol_supply_w_id;
/// ```
///
/// Returns the stock reads the home piece needs.
pub fn new_order_supply<S: Storage>(
    db: &mut S,
    i: &NewOrderInput,
    local: &dyn Fn(u16) -> bool,
) -> Result<Vec<StockRead>, TxnError> {
    for l in i.lines() {
        if db.get::<t::Items, _>(keys::item(l.i_id), |_| ())?.is_none() {
            return Err(TxnError::Rollback("item number is not valid"));
        }
    }
    let dist = usize::from(i.d_id).checked_sub(1).filter(|&d| d < usize::from(DISTRICTS_PER_WAREHOUSE));
    let dist = dist.ok_or(TxnError::Rollback("district number is not valid"))?;
    let mut reads = Vec::new();
    for (n, l) in i.lines().iter().enumerate() {
        if local(l.supply_w_id) {
            let (dist_info, s_original) = procedures::update_stock(db, i.w_id, l, dist)?;
            reads.push(StockRead { line: n as u8, dist_info, s_original });
        }
    }
    Ok(reads)
}

/// Payment, the customer's partition's piece (clause 2.5.2.2, the customer steps: found by id
/// or last name, C_BALANCE, C_YTD_PAYMENT, C_PAYMENT_CNT and, for bad credit, C_DATA).
pub fn payment_customer<S: Storage>(db: &mut S, i: &PaymentInput) -> Result<PaymentOutput, TxnError> {
    procedures::pay_customer(db, i)
}

/// Runs one piece of a multi-partition transaction at timestamp `ts`, as
/// [`procedures::execute`] runs a whole one: begin, the piece, commit — or abort, leaving no
/// trace. `local` says which warehouses this partition holds. A remote piece returns its
/// reads; the home piece (given every remote piece's reads) returns the transaction's output.
pub fn execute_piece<S: Storage>(
    db: &mut S,
    ts: u64,
    input: &TxnInput,
    local: &dyn Fn(u16) -> bool,
    remote_reads: Option<&[RemoteReads]>,
) -> Result<Piece, TxnError> {
    procedures::in_transaction(db, ts, |db| run_piece(db, input, local, remote_reads))
}

/// A remote piece's reads derived again, changing nothing (the piece runs and is rolled
/// back): for a piece already applied at `ts` whose reads were lost with every replica that
/// sent them. Exact for what the home piece writes — NewOrder's S_DIST_xx and S_DATA's brand
/// flag never change in TPC-C, nor does which customer a Payment selects (by id, or by last
/// name among names that never change); a Payment's customer balance in the output is
/// today's, not the one the piece first saw (only a client's answer shows it, never the home
/// partition's state). A rollback (an unused item, no such customer) is derived the same.
pub fn rederive_reads<S: Storage>(
    db: &mut S,
    ts: u64,
    input: &TxnInput,
    local: &dyn Fn(u16) -> bool,
) -> Result<RemoteReads, TxnError> {
    db.begin(ts);
    let result = run_piece(db, input, local, None);
    db.abort();
    match result? {
        Piece::Reads(reads) => Ok(reads),
        Piece::Output(_) => Err(TxnError::Rollback("a remote piece produced an output")),
    }
}

/// What a piece produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// A remote piece's reads for the home piece.
    Reads(RemoteReads),
    /// The home piece: the transaction's output.
    Output(procedures::TxnOutput),
}

fn run_piece<S: Storage>(
    db: &mut S,
    input: &TxnInput,
    local: &dyn Fn(u16) -> bool,
    remote_reads: Option<&[RemoteReads]>,
) -> Result<Piece, TxnError> {
    use procedures::TxnOutput;
    match (input, remote_reads) {
        (TxnInput::NewOrder(i), Some(reads)) => {
            let stock: Vec<StockRead> = reads
                .iter()
                .flat_map(|r| match r {
                    RemoteReads::Stock(s) => s.clone(),
                    RemoteReads::Customer(_) => Vec::new(),
                })
                .collect();
            procedures::new_order_home(db, i, Some((local, &stock))).map(|o| Piece::Output(TxnOutput::NewOrder(o)))
        }
        (TxnInput::NewOrder(i), None) => new_order_supply(db, i, local).map(|r| Piece::Reads(RemoteReads::Stock(r))),
        (TxnInput::Payment(i), Some(reads)) => {
            let customer = reads.iter().find_map(|r| match r {
                RemoteReads::Customer(c) => Some(*c),
                RemoteReads::Stock(_) => None,
            });
            let customer = customer.ok_or(TxnError::Rollback("the customer's partition's read is missing"))?;
            procedures::payment_home(db, i, customer).map(|o| Piece::Output(TxnOutput::Payment(o)))
        }
        (TxnInput::Payment(i), None) => payment_customer(db, i).map(|c| Piece::Reads(RemoteReads::Customer(c))),
        _ => Err(TxnError::Rollback("only NewOrder and Payment span partitions")),
    }
}
