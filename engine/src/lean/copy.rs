//! A copy of a partition taken while it executes on (docs/design.md §10, "Copying without
//! stopping"): the executor calls [`LeanDb::copy_step`] between batches, each call copying at
//! most a slice of rows, and runs its batches as usual in between. The copy is *fuzzy* — each
//! row as it was when the scan reached it — and the changes committed since the copy began
//! are recorded beside it as redo records ([`LeanDb::take_copy_redo`]). Installing the rows
//! and then applying those changes ([`LeanDb::install_copy_rows`],
//! [`LeanDb::apply_copy_redo`]) gives exactly the source's state at the batch where the copy
//! ended.
//!
//! Why that holds, per row: a key's copied image is its state at some moment after the copy
//! began; the changes recorded from the beginning, applied in order on top, end in its final
//! state, because a whole-row change (insert, overwrite, delete) sets the row whatever came
//! before, and a patch (an update of the row's updatable prefix) of a row the copy lacks can
//! only come before a whole-row change of it (a row present at the patch and never deleted
//! after is present in every later state, so the copy holds it). HISTORY, the one heap table,
//! is copied only up to the rows it held when the copy began; every row appended after is a
//! recorded change, so the receiver appends the same rows in the same order.
//!
//! The scan visits tables in [`TableId::ALL`] order: an ordered table by key (resuming after
//! the last key copied), a hash table by slot. An insert or a delete moves keys between slots,
//! so a hash table whose slots changed under its scan is scanned again from the start (its
//! rows sent again replace the ones sent before); past [`COPY_HASH_RESCANS_MAX`] rescans the
//! rest of that table is copied in one step. TPC-C's hash tables never change size after the
//! load, so under TPC-C no rescan ever happens.
//!
//! The digest: the copy also computes the source's state digest at its end without a second
//! scan. Each table's accumulator ([`TableDigest`], a sum of row hashes) sums the rows as
//! copied, and every change committed to a row the scan already passed corrects it (the row's
//! hash before the transaction out, after it in). Rows the scan has not reached need no
//! correction: the scan reads them as they are. The receiver recomputes the digest of what it
//! installed and refuses a copy whose digest differs: that checks the transfer and this
//! construction together, on every copy.

use crate::digest::{digest_of, Digest, TableDigest};
use crate::lean::{LeanDb, UndoOp, UndoRecord, EMPTY};
use crate::redo::RedoBatch;
use crate::schema::{t, Organisation, Table, TableId};
use crate::StorageError;

/// Rescans of one hash table a copy makes before it copies the rest of that table at once.
pub const COPY_HASH_RESCANS_MAX: u32 = 3;

/// What one [`LeanDb::copy_step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyStep {
    /// `rows` rows of `table` were appended to the output.
    Rows { table: TableId, rows: u32 },
    /// Every table has been scanned: the copy can end ([`LeanDb::finish_copy`]).
    Done,
}

/// Where a copy stands, for progress reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CopyProgress {
    /// Tables fully scanned, of nine.
    pub tables_done: usize,
    /// Rows copied so far (rescans included).
    pub rows: u64,
    /// Bytes of rows copied so far.
    pub bytes: u64,
    /// Hash tables scanned again because their slots changed under the scan.
    pub rescans: u32,
    /// Transactions whose changes were recorded for the copy.
    pub txns_recorded: u64,
}

/// The scan's position in the table it is at.
#[derive(Debug, Clone, Copy)]
enum Position {
    /// Hash table: the next slot; `layout` is the table's layout counter when its scan began.
    Hash { slot: usize, layout: u64, rescans: u32 },
    /// Ordered table: the next key to copy (`None`: past the largest key).
    Ordered { next: Option<u64> },
    /// Heap table: the next row id, and the rows it held when the copy began.
    Heap { id: u32, end: u32 },
}

/// A copy in progress (held by the [`LeanDb`] it copies).
#[derive(Debug)]
pub(crate) struct CopyState {
    /// The copier's name for this copy ([`LeanDb::begin_copy`]).
    id: u64,
    /// Index in [`TableId::ALL`] of the table being scanned (9: all done).
    table: usize,
    pos: Position,
    /// HISTORY's rows when the copy began: the scan copies those, the changes the rest.
    heap_end: u32,
    sums: [TableDigest; 9],
    redo: RedoBatch,
    progress: CopyProgress,
}

impl LeanDb {
    /// Begins a copy of this database as it executes on, named `id` by the copier
    /// ([`LeanDb::copy_id`]); `false` (and nothing changes) when one is already being taken.
    /// Call between transactions.
    pub fn begin_copy(&mut self, id: u64) -> bool {
        if self.copy.is_some() {
            return false;
        }
        debug_assert!(!self.in_txn, "a copy begins between transactions");
        let heap_end = self.history.rows.allocated();
        let mut state = CopyState {
            id,
            table: 0,
            pos: Position::Heap { id: 0, end: 0 },
            heap_end,
            sums: [TableDigest::default(); 9],
            redo: RedoBatch::default(),
            progress: CopyProgress::default(),
        };
        state.pos = self.start_position(0, heap_end);
        self.copy = Some(Box::new(state));
        true
    }

    /// Whether a copy is being taken.
    pub fn copy_active(&self) -> bool {
        self.copy.is_some()
    }

    /// The name of the copy being taken, if any.
    pub fn copy_id(&self) -> Option<u64> {
        self.copy.as_ref().map(|c| c.id)
    }

    /// Where the copy being taken stands.
    pub fn copy_progress(&self) -> Option<CopyProgress> {
        self.copy.as_ref().map(|c| c.progress)
    }

    /// Copies the next rows — at most `bytes_max` bytes of them, at least one row — of one
    /// table into `out` (their Pod bytes, back to back). Call between transactions.
    ///
    /// # Panics
    /// Without a copy under way.
    pub fn copy_step(&mut self, bytes_max: usize, out: &mut Vec<u8>) -> CopyStep {
        loop {
            let table = self.copy.as_ref().expect("a copy is under way").table;
            let Some(&id) = TableId::ALL.get(table) else { return CopyStep::Done };
            let (rows, finished) = match id {
                TableId::Warehouse => self.scan_step::<t::Warehouses>(bytes_max, out),
                TableId::District => self.scan_step::<t::Districts>(bytes_max, out),
                TableId::Customer => self.scan_step::<t::Customers>(bytes_max, out),
                TableId::History => self.scan_step::<t::Histories>(bytes_max, out),
                TableId::Orders => self.scan_step::<t::Orders>(bytes_max, out),
                TableId::NewOrder => self.scan_step::<t::NewOrders>(bytes_max, out),
                TableId::OrderLine => self.scan_step::<t::OrderLines>(bytes_max, out),
                TableId::Item => self.scan_step::<t::Items>(bytes_max, out),
                TableId::Stock => self.scan_step::<t::Stocks>(bytes_max, out),
            };
            if finished {
                let heap_end = self.copy.as_ref().expect("under way").heap_end;
                let next = self.start_position(table + 1, heap_end);
                let c = self.copy.as_mut().expect("under way");
                c.table += 1;
                c.pos = next;
                c.progress.tables_done = c.table;
            }
            if rows > 0 {
                return CopyStep::Rows { table: id, rows };
            }
        }
    }

    /// The changes committed since the last call (since the copy began, the first time),
    /// sealed; empty when none or no copy is under way.
    pub fn take_copy_redo(&mut self) -> RedoBatch {
        let mut batch = match &mut self.copy {
            Some(c) => std::mem::take(&mut c.redo),
            None => RedoBatch::default(),
        };
        batch.seal();
        batch
    }

    /// Ends the copy once every table is scanned: the state digest of this database now,
    /// computed from the copy's sums (no scan). The changes not yet taken are dropped: take
    /// them first ([`LeanDb::take_copy_redo`]).
    ///
    /// # Panics
    /// Without a copy under way, or before [`CopyStep::Done`].
    pub fn finish_copy(&mut self) -> Digest {
        let c = self.copy.take().expect("a copy is under way");
        assert_eq!(c.table, TableId::ALL.len(), "the copy's scan is not done");
        digest_of(&c.sums)
    }

    /// Drops the copy under way (its receiver went away), if any.
    pub fn abort_copy(&mut self) {
        self.copy = None;
    }

    /// Inserts a copy's rows of `table` (Pod rows back to back, as [`LeanDb::copy_step`]
    /// wrote them); a hash table's row replaces one with the same key (a rescan sends rows
    /// again), a row of another table already present is a [`StorageError::Duplicate`].
    pub fn install_copy_rows(&mut self, table: TableId, bytes: &[u8]) -> Result<(), StorageError> {
        match table {
            TableId::Warehouse => self.install_rows::<t::Warehouses>(bytes),
            TableId::District => self.install_rows::<t::Districts>(bytes),
            TableId::Customer => self.install_rows::<t::Customers>(bytes),
            TableId::History => self.install_rows::<t::Histories>(bytes),
            TableId::Orders => self.install_rows::<t::Orders>(bytes),
            TableId::NewOrder => self.install_rows::<t::NewOrders>(bytes),
            TableId::OrderLine => self.install_rows::<t::OrderLines>(bytes),
            TableId::Item => self.install_rows::<t::Items>(bytes),
            TableId::Stock => self.install_rows::<t::Stocks>(bytes),
        }
    }

    fn install_rows<T: Table>(&mut self, bytes: &[u8]) -> Result<(), StorageError> {
        let size = std::mem::size_of::<T::Row>();
        for row in bytes.chunks_exact(size) {
            let row: T::Row = bytemuck::pod_read_unaligned(row);
            if T::ORG == Organisation::Hash {
                if let Some(old) = self.raw_row_mut::<T>(T::key(&row)) {
                    if !T::HAS_SECONDARY || T::secondary(old) == T::secondary(&row) {
                        *old = row;
                        continue;
                    }
                    self.raw_delete::<T>(T::key(&row));
                }
            }
            self.raw_insert::<T>(&row)?;
        }
        Ok(())
    }

    /// Where the scan of table `table` (index in [`TableId::ALL`]) starts.
    fn start_position(&mut self, table: usize, heap_end: u32) -> Position {
        match TableId::ALL.get(table).map(|id| (*id, id.organisation())) {
            Some((id, Organisation::Hash)) => Position::Hash { slot: 0, layout: self.hash_layout(id), rescans: 0 },
            Some((_, Organisation::Ordered)) => Position::Ordered { next: Some(0) },
            Some((_, Organisation::Heap)) | None => Position::Heap { id: 0, end: heap_end },
        }
    }

    fn hash_layout(&mut self, id: TableId) -> u64 {
        match id {
            TableId::Warehouse => self.warehouse.layout,
            TableId::District => self.district.layout,
            TableId::Customer => self.customer.layout,
            TableId::Item => self.item.layout,
            TableId::Stock => self.stock.layout,
            _ => 0,
        }
    }

    /// One step of the scan of `T`: (rows copied, whether the table is done).
    fn scan_step<T: Table>(&mut self, bytes_max: usize, out: &mut Vec<u8>) -> (u32, bool) {
        let size = std::mem::size_of::<T::Row>();
        let room = |out: &Vec<u8>, rows: u32| rows == 0 || out.len() + size <= bytes_max;
        let mut c = self.copy.take().expect("a copy is under way");
        let mut sum = c.sums[T::ID as usize];
        let mut rows = 0u32;
        let finished = match c.pos {
            Position::Hash { mut slot, layout, mut rescans } => {
                let store = self.hash::<T>();
                if store.layout != layout {
                    // Keys moved between slots under the scan: start the table again.
                    rescans += 1;
                    c.progress.rescans += 1;
                    slot = 0;
                    sum = TableDigest::default();
                }
                let unbounded = rescans > COPY_HASH_RESCANS_MAX;
                while slot < store.slots.len() && (unbounded || room(out, rows)) {
                    let s = store.slots[slot];
                    slot += 1;
                    if s.row == EMPTY {
                        continue;
                    }
                    let row = store.rows.get(s.row);
                    out.extend_from_slice(bytemuck::bytes_of(row));
                    sum.add::<T>(row);
                    rows += 1;
                }
                c.pos = Position::Hash { slot, layout: store.layout, rescans };
                slot >= store.slots.len()
            }
            Position::Ordered { next } => {
                let store = self.ordered::<T>();
                let mut last = None;
                let mut stopped = false;
                if let Some(from) = next {
                    let pool = &store.rows;
                    store.index.range(&from, &u64::MAX, true, &mut |&k, &i| {
                        if !room(out, rows) {
                            stopped = true;
                            return false;
                        }
                        let row = pool.get(i);
                        out.extend_from_slice(bytemuck::bytes_of(row));
                        sum.add::<T>(row);
                        rows += 1;
                        last = Some(k);
                        true
                    });
                }
                let next = match last {
                    Some(k) => k.checked_add(1),
                    None => next,
                };
                c.pos = Position::Ordered { next: if stopped { next } else { None } };
                !stopped
            }
            Position::Heap { mut id, end } => {
                let pool = &self.heap::<T>().rows;
                while id < end && room(out, rows) {
                    let row = pool.get(id);
                    out.extend_from_slice(bytemuck::bytes_of(row));
                    sum.add::<T>(row);
                    rows += 1;
                    id += 1;
                }
                c.pos = Position::Heap { id, end };
                id >= end
            }
        };
        c.sums[T::ID as usize] = sum;
        c.progress.rows += u64::from(rows);
        c.progress.bytes += u64::from(rows) * size as u64;
        self.copy = Some(c);
        (rows, finished)
    }

    /// Records, for the copy under way, the transaction the undo buffer holds (it committed):
    /// its redo records, and the digest corrections of the rows the scan already passed.
    pub(crate) fn copy_capture(&mut self) {
        let mut c = self.copy.take().expect("a copy is under way");
        self.redo_of_txn(&mut c.redo);
        c.progress.txns_recorded += 1;
        let records = std::mem::take(&mut self.undo.records);
        let mut seen: Vec<(TableId, u64)> = Vec::with_capacity(records.len());
        let mut appended = 0u32;
        for rec in &records {
            if rec.table == TableId::History {
                appended += (rec.op == UndoOp::Inserted) as u32;
                continue;
            }
            if seen.contains(&(rec.table, rec.key)) {
                continue;
            }
            seen.push((rec.table, rec.key));
            let of_key = || records.iter().filter(|r| (r.table, r.key) == (rec.table, rec.key));
            match rec.table {
                TableId::Warehouse => self.correct::<t::Warehouses>(&mut c, rec.key, of_key()),
                TableId::District => self.correct::<t::Districts>(&mut c, rec.key, of_key()),
                TableId::Customer => self.correct::<t::Customers>(&mut c, rec.key, of_key()),
                TableId::History => unreachable!("heap rows are counted as appended"),
                TableId::Orders => self.correct::<t::Orders>(&mut c, rec.key, of_key()),
                TableId::NewOrder => self.correct::<t::NewOrders>(&mut c, rec.key, of_key()),
                TableId::OrderLine => self.correct::<t::OrderLines>(&mut c, rec.key, of_key()),
                TableId::Item => self.correct::<t::Items>(&mut c, rec.key, of_key()),
                TableId::Stock => self.correct::<t::Stocks>(&mut c, rec.key, of_key()),
            }
        }
        // HISTORY rows appended after the copy began are never scanned: always counted here.
        let heap = &self.history.rows;
        let sum = &mut c.sums[TableId::History as usize];
        for id in heap.allocated() - appended..heap.allocated() {
            sum.add::<t::Histories>(heap.get(id));
        }
        self.undo.records = records;
        self.copy = Some(c);
    }

    /// Whether the scan already passed key `key` of `T` (so a change to it must correct the
    /// sums); `None` when the table's slots changed under its scan (it will be rescanned).
    fn scanned<T: Table>(&mut self, c: &CopyState, key: u64) -> Option<bool> {
        let at = T::ID as usize;
        if at < c.table {
            return Some(true);
        }
        if at > c.table {
            return Some(false);
        }
        match c.pos {
            Position::Hash { slot, layout, .. } => {
                let store = self.hash::<T>();
                if store.layout != layout {
                    return None;
                }
                Some(store.find_slot(key).is_ok_and(|i| i < slot))
            }
            Position::Ordered { next } => Some(next.is_none_or(|n| key < n)),
            Position::Heap { .. } => Some(false),
        }
    }

    /// Corrects `T`'s sum for one key the transaction changed, if the scan passed it: the
    /// row before the transaction (rebuilt from the undo records `of_key`, newest undone
    /// first) out, the row now in.
    fn correct<'r, T: Table>(
        &mut self,
        c: &mut CopyState,
        key: u64,
        of_key: impl DoubleEndedIterator<Item = &'r UndoRecord>,
    ) {
        if self.scanned::<T>(c, key) != Some(true) {
            return;
        }
        let after: Option<T::Row> = self.raw_row_mut::<T>(key).map(|r| *r);
        let mut before = after;
        let images = &self.undo.images;
        let size = std::mem::size_of::<T::Row>();
        for rec in of_key.rev() {
            let at = rec.at as usize;
            match rec.op {
                UndoOp::Inserted => before = None,
                UndoOp::Updated => {
                    let row = before.as_mut().expect("an updated row existed when it was updated");
                    let n = T::UPDATABLE_PREFIX;
                    bytemuck::bytes_of_mut(row)[..n].copy_from_slice(&images[at..at + n]);
                }
                UndoOp::Overwritten | UndoOp::Deleted => {
                    before = Some(bytemuck::pod_read_unaligned(&images[at..at + size]));
                }
            }
        }
        let sum = &mut c.sums[T::ID as usize];
        if let Some(b) = &before {
            sum.remove::<T>(b);
        }
        if let Some(a) = &after {
            sum.add::<T>(a);
        }
    }
}

#[cfg(test)]
mod tests;
