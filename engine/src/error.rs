//! Errors of the engine crate. Expected outcomes of a transaction (a TPC-C rollback, a lock
//! conflict that aborts the transaction) are variants, never strings; [`TxnError::is_conflict`]
//! is the one classification of a concurrency-control abort. A failed TPC-C load is a
//! [`LoadError`]; an input outside TPC-C's domains is `crate::input::InputError`.

use crate::schema::TableId;

/// What a storage operation can report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// An insert found a row with the same primary key.
    #[error("duplicate primary key {key:#x} in table {table}")]
    Duplicate { table: TableId, key: u64 },
    /// A key component does not fit the packed key layout (see `schema::keys`).
    #[error("key component out of range for table {table}: {what}")]
    KeyOutOfRange { table: TableId, what: &'static str },
    /// The concurrency control chose this transaction as a victim (deadlock avoidance).
    #[error("transaction aborted by concurrency control: {0}")]
    Conflict(&'static str),
    /// An operation the table's organisation does not support (e.g. a range scan on a heap).
    #[error("table {table} does not support {op}")]
    Unsupported { table: TableId, op: &'static str },
    /// A redo batch failed its checksum or does not fit this database (a backup refuses it
    /// and changes nothing).
    #[error("bad redo batch: {0}")]
    BadRedo(&'static str),
    /// Log or device I/O failed.
    #[error("I/O error: {0}")]
    Io(String),
}

/// Why a transaction did not commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    /// The procedure asked to roll back (TPC-C clause 2.4.2.3: NewOrder with an unused item).
    #[error("rolled back by the procedure: {0}")]
    Rollback(&'static str),
    /// A row the procedure requires is missing: the database is not a TPC-C database.
    #[error("missing row in table {table}: key {key:#x}")]
    NotFound { table: TableId, key: u64 },
    /// The storage layer failed or aborted the transaction.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl TxnError {
    /// True for outcomes a benchmark counts as an abort rather than a failure.
    pub fn is_abort(&self) -> bool {
        matches!(self, TxnError::Rollback(_) | TxnError::Storage(StorageError::Conflict(_)))
    }

    /// Whether the transaction failed because concurrency control aborted it (a wait-die
    /// victim): re-execute it with the same input and timestamp.
    pub fn is_conflict(&self) -> bool {
        matches!(self, TxnError::Storage(StorageError::Conflict(_)))
    }
}

/// Why a database load failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The warehouse range holds no warehouse.
    #[error("nothing to load: the warehouse range {start}..={end} is empty (at least one warehouse is needed)")]
    NoWarehouses { start: u16, end: u16 },
    /// Warehouse ids start at 1 (TPC-C clause 4.3.3.1: W_ID unique within [number_of_configured_warehouses]).
    #[error("warehouse ids start at 1; the range {start}..={end} includes warehouse 0")]
    WarehouseZero { start: u16, end: u16 },
    /// The storage engine refused a row.
    #[error("storage error while loading: {0}")]
    Storage(#[from] StorageError),
}

/// A transaction names a warehouse no partition holds (`crate::distributed::partitions_touched`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("warehouse {warehouse} belongs to no partition")]
pub struct UnknownWarehouse {
    pub warehouse: u16,
}
