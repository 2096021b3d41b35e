//! Errors of the engine crate. Expected outcomes of a transaction (a TPC-C rollback, a lock
//! conflict that aborts the transaction) are variants, never strings; [`TxnError::is_conflict`]
//! is the one classification of a concurrency-control abort. A failed TPC-C load is a
//! [`LoadError`]; an input outside TPC-C's domains is `crate::input::InputError`. A failed
//! log or device operation keeps what failed and the OS error ([`IoFailure`]).

use std::sync::Arc;

use crate::conventional::error::ConventionalError;
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
    Io(IoFailure),
}

/// What I/O failed. `std::io::Error` is neither `Clone` nor `Eq`, which a [`StorageError`] is:
/// it is shared, and two failures compare equal by what failed and the OS error's kind.
#[derive(Debug, Clone, thiserror::Error)]
pub enum IoFailure {
    /// An operation on a device failed.
    #[error("{what}: {source}")]
    Device {
        what: &'static str,
        kind: std::io::ErrorKind,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The log cannot serve the operation in its present state.
    #[error(transparent)]
    Log(#[from] LogUnavailable),
    /// The conventional stack failed.
    #[error(transparent)]
    Conventional(Arc<ConventionalError>),
}

impl IoFailure {
    /// A failed device operation, `what` naming it.
    pub fn device(what: &'static str, source: std::io::Error) -> IoFailure {
        IoFailure::Device { what, kind: source.kind(), source: Arc::new(source) }
    }
}

impl PartialEq for IoFailure {
    fn eq(&self, other: &IoFailure) -> bool {
        match (self, other) {
            (IoFailure::Device { what: a, kind: k, .. }, IoFailure::Device { what: b, kind: l, .. }) => {
                (a, k) == (b, l)
            }
            (IoFailure::Log(a), IoFailure::Log(b)) => a == b,
            (IoFailure::Conventional(a), IoFailure::Conventional(b)) => {
                Arc::ptr_eq(a, b) || a.to_string() == b.to_string()
            }
            _ => false,
        }
    }
}

impl Eq for IoFailure {}

/// Why the write-ahead log refused an operation without touching its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LogUnavailable {
    /// A write to the device failed before; the log accepts nothing more.
    #[error("log device failed earlier")]
    FailedEarlier,
    /// The log has no device (the flush switch is off).
    #[error("no log device")]
    NoDevice,
    /// Records wait in the shipping buffer.
    #[error("shipped records not taken yet")]
    ShippedNotTaken,
    /// Records were appended while the log was read.
    #[error("records appended while the log was read")]
    AppendedWhileRead,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_failure_keeps_its_text_and_kind() {
        let e = StorageError::Io(IoFailure::device("log device", std::io::Error::other("disk gone")));
        assert_eq!(e.to_string(), "I/O error: log device: disk gone");
        assert!(matches!(&e, StorageError::Io(IoFailure::Device { kind: std::io::ErrorKind::Other, .. })));
        assert_eq!(e.clone(), e);
        assert_eq!(StorageError::Io(LogUnavailable::NoDevice.into()).to_string(), "I/O error: no log device");
    }
}
