//! The storage trait every TPC-C procedure is generic over.
//!
//! Procedures touch rows only through closures (`get`, `update`) and whole-row `insert` and
//! `delete`, plus ordered scans. This lets the conventional stack fix the page, take the lock,
//! latch, decode, log before and after images, re-encode and unfix around the procedure's code,
//! while the lean kernel hands the closure a reference into its own memory. Neither leaks into
//! the procedures, and both are monomorphised (no dynamic dispatch on the hot path).
//!
//! Transactions: `begin(ts)` … `commit()` or `abort()`. An `abort` undoes every change made
//! since `begin`, leaving no trace (the state digest is unchanged). Operations issued outside a
//! transaction are a *bulk load*: applied at once, not undoable and not logged.

use crate::error::StorageError;
use crate::schema::Table;

/// The stages of [`Storage::prefetch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefetch {
    /// Fetch the index entries of the keys.
    Index,
    /// Locate the rows (through the index entries fetched before) and fetch them.
    Rows,
}

/// Direction of an ordered scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanDir {
    Forward,
    Backward,
}

/// Row storage with transactions, generic over the TPC-C tables (see [`crate::schema::t`]).
pub trait Storage {
    /// Starts a transaction whose commit timestamp is `ts` (the determinism contract: the
    /// timestamp is an input, never read from a clock).
    fn begin(&mut self, ts: u64);
    /// Makes the transaction's changes durable as the implementation defines durability.
    fn commit(&mut self) -> Result<(), StorageError>;
    /// Undoes every change since `begin`.
    fn abort(&mut self);

    /// Calls `f` with the row whose primary key is `key`; `Ok(None)` when there is none.
    fn get<T: Table, R>(&mut self, key: u64, f: impl FnOnce(&T::Row) -> R) -> Result<Option<R>, StorageError>;
    /// Calls `f` with the row to modify in place; `Ok(None)` when there is none. `f` must not
    /// change the primary or secondary key.
    fn update<T: Table, R>(&mut self, key: u64, f: impl FnOnce(&mut T::Row) -> R) -> Result<Option<R>, StorageError>;
    /// Inserts a row; a row with the same primary key is [`StorageError::Duplicate`] (heap
    /// tables have no key and always append).
    fn insert<T: Table>(&mut self, row: &T::Row) -> Result<(), StorageError>;
    /// Removes and returns the row with this primary key.
    fn delete<T: Table>(&mut self, key: u64) -> Result<Option<T::Row>, StorageError>;
    /// Visits the rows with `lo <= key <= hi` in key order (`dir`) until `f` returns false.
    /// Only for [`crate::schema::Organisation::Ordered`] tables.
    fn scan<T: Table>(
        &mut self,
        lo: u64,
        hi: u64,
        dir: ScanDir,
        f: impl FnMut(&T::Row) -> bool,
    ) -> Result<(), StorageError>;
    /// Visits the primary keys of the rows whose secondary key lies in `lo..=hi`, in secondary
    /// key order (`dir`), until `f` returns false. Only for tables with a secondary index.
    fn scan_secondary<T: Table>(
        &mut self,
        lo: T::Sec,
        hi: T::Sec,
        dir: ScanDir,
        f: impl FnMut(u64) -> bool,
    ) -> Result<(), StorageError>;

    /// A hint that the rows with these keys are about to be accessed (lets an implementation
    /// overlap the cache misses of independent lookups). Never changes results. It comes in
    /// two stages so a procedure can do other work while each stage's misses resolve:
    /// `Index` starts fetching where the keys are indexed, `Rows` (issued later) the rows
    /// themselves.
    fn prefetch<T: Table>(&self, _keys: &[u64], _stage: Prefetch) {}
    /// A hint that `additional` rows are about to be bulk-loaded into table `T`.
    fn reserve<T: Table>(&mut self, _additional: usize) {}

    /// Visits every row of `T`, in an unspecified but deterministic order, outside any
    /// transaction (for the checker, the digest and dumps).
    fn for_each<T: Table>(&mut self, f: impl FnMut(&T::Row));
    /// Number of rows in `T`.
    fn count<T: Table>(&mut self) -> usize {
        let mut n = 0;
        self.for_each::<T>(|_| n += 1);
        n
    }
}
