//! Errors of the engine crate. Expected outcomes of a transaction (a TPC-C rollback, a lock
//! conflict that aborts the transaction) are variants, never strings.

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
}
