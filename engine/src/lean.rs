//! The lean kernel: the paper's "optimal" main-memory engine. One thread owns the partition
//! outright; there are no locks, no latches, no log and no buffer pool. Rows live in typed
//! pools ([`crate::arena`]); primary keys are packed `u64`s indexed by an open-addressing hash
//! index (point tables) or a B+tree ([`crate::btree`], ordered tables); secondary indexes are
//! B+trees from the secondary key to the primary key. An in-memory undo buffer records
//! before-images (of a row's updatable prefix, for updates) so that an aborted transaction
//! leaves no trace.
//!
//! Guarantees: the indexes are general-purpose (any key values; nothing is indexed by TPC-C's
//! dense ids); iteration order depends only on the sequence of operations, never on addresses
//! or process-specific hashing, so two replicas fed the same sequence are identical.

use std::any::Any;

pub(crate) mod copy;
pub use copy::{CopyProgress, CopyStep, COPY_HASH_RESCANS_MAX, COPY_KEPT_BYTES_MAX};

use crate::arena::{advise_vec, Pool};
use crate::btree::BTree;
use crate::error::StorageError;
use crate::redo::{RedoBatch, RedoOp};
use crate::schema::{t, Organisation, Table, TableId};
use crate::storage::{Prefetch, ScanDir, Storage};

const EMPTY: u32 = u32::MAX;
/// Hash index load factor bound: grow when `len / capacity` would exceed 5/8.
const LOAD_NUM: usize = 5;
const LOAD_DEN: usize = 8;
const HASH_CAPACITY_MIN: usize = 16;

#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    key: u64,
    row: u32,
    _pad: u32,
}

const EMPTY_SLOT: Slot = Slot { key: 0, row: EMPTY, _pad: 0 };

#[inline]
fn mix(key: u64) -> u64 {
    // Fibonacci hashing after folding the high half in: packed TPC-C keys put the warehouse in
    // the high bits, which a plain multiply would leave out of the top bits we index with.
    (key ^ (key >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[inline]
fn prefetch_ptr<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint; it never faults, even on an invalid address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Prefetches every cache line of a row (a STOCK row spans five).
#[inline]
fn prefetch_row<R>(row: *const R) {
    const LINE: usize = 64;
    let p = row as *const u8;
    let mut off = 0;
    while off < std::mem::size_of::<R>() {
        prefetch_ptr(p.wrapping_add(off));
        off += LINE;
    }
}

/// A point-access table: open-addressing (linear probing, backward-shift deletion) hash index
/// from the packed key to a row slot in a typed arena.
pub struct HashStore<T: Table> {
    slots: Vec<Slot>,
    shift: u32,
    len: usize,
    rows: Pool<T::Row>,
    secondary: BTree<T::Sec, u64>,
    /// Bumped by every insert, delete and resize: any change of which key sits in which slot
    /// (a copy scanning the slots restarts the table when it changed under it: [`copy`]).
    layout: u64,
}

impl<T: Table> Default for HashStore<T> {
    fn default() -> Self {
        HashStore {
            slots: vec![EMPTY_SLOT; HASH_CAPACITY_MIN],
            shift: 64 - HASH_CAPACITY_MIN.trailing_zeros(),
            len: 0,
            rows: Pool::new(),
            secondary: BTree::new(),
            layout: 0,
        }
    }
}

impl<T: Table> HashStore<T> {
    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        (mix(key) >> self.shift) as usize
    }

    #[inline]
    fn find_slot(&self, key: u64) -> Result<usize, usize> {
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let s = self.slots[i];
            if s.row == EMPTY {
                return Err(i);
            }
            if s.key == key {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    fn find(&self, key: u64) -> Option<u32> {
        self.find_slot(key).ok().map(|i| self.slots[i].row)
    }

    fn resize(&mut self, capacity: usize) {
        let capacity = capacity.next_power_of_two().max(HASH_CAPACITY_MIN);
        self.layout = self.layout.wrapping_add(1);
        let old = std::mem::replace(&mut self.slots, Vec::with_capacity(capacity));
        advise_vec(&self.slots);
        self.slots.resize(capacity, EMPTY_SLOT);
        self.shift = 64 - capacity.trailing_zeros();
        for s in old.into_iter().filter(|s| s.row != EMPTY) {
            let i = self.find_slot(s.key).expect_err("keys are unique");
            self.slots[i] = s;
        }
    }

    fn reserve(&mut self, additional: usize) {
        let want = self.len + additional;
        if want * LOAD_DEN > self.slots.len() * LOAD_NUM {
            self.resize(want * LOAD_DEN / LOAD_NUM + 1);
        }
    }

    fn insert(&mut self, key: u64, row: &T::Row) -> Result<(), StorageError> {
        if (self.len + 1) * LOAD_DEN > self.slots.len() * LOAD_NUM {
            self.resize(self.slots.len() * 2);
        }
        let i = match self.find_slot(key) {
            Ok(_) => return Err(StorageError::Duplicate { table: T::ID, key }),
            Err(i) => i,
        };
        let idx = self.rows.alloc(*row);
        self.slots[i] = Slot { key, row: idx, _pad: 0 };
        self.len += 1;
        self.layout = self.layout.wrapping_add(1);
        if T::HAS_SECONDARY {
            self.secondary.insert(T::secondary(row), key);
        }
        Ok(())
    }

    fn delete(&mut self, key: u64) -> Option<T::Row> {
        let mut i = self.find_slot(key).ok()?;
        let idx = self.slots[i].row;
        let row = *self.rows.get(idx);
        self.rows.release(idx);
        self.len -= 1;
        self.layout = self.layout.wrapping_add(1);
        // Backward-shift deletion keeps probe sequences unbroken without tombstones.
        let mask = self.mask();
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let s = self.slots[j];
            if s.row == EMPTY {
                break;
            }
            let k = self.home(s.key);
            let movable = if i <= j { k <= i || k > j } else { k <= i && k > j };
            if movable {
                self.slots[i] = s;
                i = j;
            }
        }
        self.slots[i] = EMPTY_SLOT;
        if T::HAS_SECONDARY {
            self.secondary.remove(&T::secondary(&row));
        }
        Some(row)
    }

    fn prefetch(&self, keys: &[u64], stage: Prefetch) {
        match stage {
            Prefetch::Index => {
                for &k in keys {
                    prefetch_ptr(&self.slots[self.home(k)]);
                }
            }
            Prefetch::Rows => {
                for &k in keys {
                    if let Some(idx) = self.find(k) {
                        prefetch_row(self.rows.addr(idx));
                    }
                }
            }
        }
    }

    fn for_each(&self, mut f: impl FnMut(&T::Row)) {
        for s in self.slots.iter().filter(|s| s.row != EMPTY) {
            f(self.rows.get(s.row));
        }
    }
}

/// An ordered table: a B+tree from the packed key to a row slot in a typed arena.
pub struct OrderedStore<T: Table> {
    index: BTree<u64, u32>,
    rows: Pool<T::Row>,
    secondary: BTree<T::Sec, u64>,
}

impl<T: Table> Default for OrderedStore<T> {
    fn default() -> Self {
        OrderedStore { index: BTree::new(), rows: Pool::new(), secondary: BTree::new() }
    }
}

impl<T: Table> OrderedStore<T> {
    fn insert(&mut self, key: u64, row: &T::Row) -> Result<(), StorageError> {
        let idx = self.rows.alloc(*row);
        if !self.index.insert(key, idx) {
            self.rows.release(idx);
            return Err(StorageError::Duplicate { table: T::ID, key });
        }
        if T::HAS_SECONDARY {
            self.secondary.insert(T::secondary(row), key);
        }
        Ok(())
    }

    fn delete(&mut self, key: u64) -> Option<T::Row> {
        let idx = self.index.remove(&key)?;
        let row = *self.rows.get(idx);
        self.rows.release(idx);
        if T::HAS_SECONDARY {
            self.secondary.remove(&T::secondary(&row));
        }
        Some(row)
    }

    #[inline]
    fn get(&self, key: u64) -> Option<&T::Row> {
        self.index.get(&key).map(|i| self.rows.get(i))
    }

    #[inline]
    fn get_mut(&mut self, key: u64) -> Option<&mut T::Row> {
        let i = self.index.get(&key)?;
        Some(self.rows.get_mut(i))
    }
}

/// A heap table (HISTORY): rows appended in commit order.
pub struct HeapStore<T: Table> {
    rows: Pool<T::Row>,
}

impl<T: Table> Default for HeapStore<T> {
    fn default() -> Self {
        HeapStore { rows: Pool::new() }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum UndoOp {
    /// Undo by deleting the key (or popping the heap).
    Inserted,
    /// Undo by restoring the before-image (of the updatable prefix).
    Updated,
    /// Undo by restoring the whole before-image (a redo upsert over a present row).
    Overwritten,
    /// Undo by re-inserting the before-image.
    Deleted,
}

#[derive(Clone, Copy)]
struct UndoRecord {
    table: TableId,
    op: UndoOp,
    key: u64,
    /// Offset of the before-image in the undo buffer's bytes.
    at: u32,
}

/// The in-memory undo buffer of the running transaction.
#[derive(Default)]
struct UndoBuffer {
    records: Vec<UndoRecord>,
    images: Vec<u8>,
}

impl UndoBuffer {
    /// Records an undo action; `image` is the before-image bytes to keep (a whole row for a
    /// delete, the updatable prefix for an update).
    fn push<T: Table>(&mut self, op: UndoOp, key: u64, image: &[u8]) {
        let at = u32::try_from(self.images.len()).expect("undo buffer under 4 GiB");
        self.images.extend_from_slice(image);
        self.records.push(UndoRecord { table: T::ID, op, key, at });
    }

    fn clear(&mut self) {
        self.records.clear();
        self.images.clear();
    }
}

/// What the kernel counts: transactions committed and aborted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    /// Transactions committed.
    pub committed: u64,
    /// Transactions aborted (undo applied).
    pub aborted: u64,
}

/// The lean kernel's database: one partition's tables.
#[derive(Default)]
pub struct LeanDb {
    warehouse: HashStore<t::Warehouses>,
    district: HashStore<t::Districts>,
    customer: HashStore<t::Customers>,
    history: HeapStore<t::Histories>,
    orders: OrderedStore<t::Orders>,
    new_order: OrderedStore<t::NewOrders>,
    order_line: OrderedStore<t::OrderLines>,
    item: HashStore<t::Items>,
    stock: HashStore<t::Stocks>,
    undo: UndoBuffer,
    in_txn: bool,
    /// Redo records of committed transactions, when capture is on.
    redo: Option<RedoBatch>,
    /// The copy being taken while the partition executes on, if any ([`copy`]).
    copy: Option<Box<copy::CopyState>>,
    /// What the last copy kept, freed a little at a time ([`LeanDb::free_copy_leftovers`]).
    copy_leftovers: copy::CopyLeftovers,
    /// Commit and abort counts.
    pub counters: Counters,
}

impl std::fmt::Debug for LeanDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeanDb").field("counters", &self.counters).finish_non_exhaustive()
    }
}

fn placement(table: TableId, org: Organisation) -> ! {
    panic!("table {table} is not stored as {org:?} in the lean kernel")
}

impl LeanDb {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts (or stops) recording redo records of committed transactions ([`crate::redo`]).
    pub fn set_redo_capture(&mut self, on: bool) {
        self.redo = on.then(RedoBatch::default);
    }

    /// The redo records captured since the last call, sealed with their checksum (empty when
    /// capture is off).
    pub fn take_redo(&mut self) -> RedoBatch {
        let mut batch = match &mut self.redo {
            Some(b) => std::mem::take(b),
            None => RedoBatch::default(),
        };
        batch.seal();
        batch
    }

    /// Rolls a backup forward: applies a primary's redo batch, outside any transaction, all
    /// or nothing. A batch that fails its checksum, names an unknown table, holds a record out
    /// of bounds, an operation the table's organisation does not have, an image of the wrong
    /// width or an upsert whose image is not of the row it names is refused before anything is
    /// applied; one that fails against the rows (a patch of a missing row, or one that would
    /// change a key) is rolled back through the undo buffer, as an aborted transaction is, so
    /// a refused batch changes nothing (docs/design.md §13: fuzz target `redo_apply`).
    pub fn apply_redo(&mut self, batch: &RedoBatch) -> Result<(), StorageError> {
        if !batch.verify() {
            return Err(StorageError::BadRedo("checksum mismatch"));
        }
        for r in &batch.records {
            let fits = (r.at as usize).checked_add(r.len as usize).is_some_and(|end| end <= batch.bytes.len());
            let Some(table) = r.table().filter(|_| fits) else {
                return Err(StorageError::BadRedo("record out of bounds or of an unknown table"));
            };
            let image = &batch.bytes[r.at as usize..r.at as usize + r.len as usize];
            match table {
                TableId::Warehouse => Self::check_redo::<t::Warehouses>(r.op, r.key, image)?,
                TableId::District => Self::check_redo::<t::Districts>(r.op, r.key, image)?,
                TableId::Customer => Self::check_redo::<t::Customers>(r.op, r.key, image)?,
                TableId::History => Self::check_redo::<t::Histories>(r.op, r.key, image)?,
                TableId::Orders => Self::check_redo::<t::Orders>(r.op, r.key, image)?,
                TableId::NewOrder => Self::check_redo::<t::NewOrders>(r.op, r.key, image)?,
                TableId::OrderLine => Self::check_redo::<t::OrderLines>(r.op, r.key, image)?,
                TableId::Item => Self::check_redo::<t::Items>(r.op, r.key, image)?,
                TableId::Stock => Self::check_redo::<t::Stocks>(r.op, r.key, image)?,
            }
        }
        debug_assert!(!self.in_txn, "redo applied inside a transaction");
        self.undo.clear();
        let applied = batch.records.iter().try_for_each(|r| {
            let image = &batch.bytes[r.at as usize..r.at as usize + r.len as usize];
            match r.table().expect("checked above") {
                TableId::Warehouse => self.apply_one::<t::Warehouses>(r.op, r.key, image),
                TableId::District => self.apply_one::<t::Districts>(r.op, r.key, image),
                TableId::Customer => self.apply_one::<t::Customers>(r.op, r.key, image),
                TableId::History => self.apply_one::<t::Histories>(r.op, r.key, image),
                TableId::Orders => self.apply_one::<t::Orders>(r.op, r.key, image),
                TableId::NewOrder => self.apply_one::<t::NewOrders>(r.op, r.key, image),
                TableId::OrderLine => self.apply_one::<t::OrderLines>(r.op, r.key, image),
                TableId::Item => self.apply_one::<t::Items>(r.op, r.key, image),
                TableId::Stock => self.apply_one::<t::Stocks>(r.op, r.key, image),
            }
        });
        if applied.is_err() {
            self.roll_back();
        } else if self.copy.is_some() {
            // A backup serving a copy: what it applied changes rows as a commit does.
            self.copy_capture();
        }
        self.undo.clear();
        applied
    }

    /// What a redo record must be, whatever the rows: an operation of the table's
    /// organisation (heap tables only append, keyed tables never do), an image of the width
    /// the operation writes, and an upsert's image the row of the key it names.
    fn check_redo<T: Table>(op: RedoOp, key: u64, image: &[u8]) -> Result<(), StorageError> {
        let heap = T::ORG == Organisation::Heap;
        let row_len = std::mem::size_of::<T::Row>();
        match op {
            RedoOp::Append if !heap => Err(StorageError::BadRedo("append to a keyed table")),
            RedoOp::Upsert | RedoOp::Patch | RedoOp::Delete if heap => {
                Err(StorageError::BadRedo("keyed change of a heap table"))
            }
            RedoOp::Upsert | RedoOp::Append if image.len() != row_len => {
                Err(StorageError::BadRedo("image size does not match the table's row"))
            }
            RedoOp::Patch if image.len() != T::UPDATABLE_PREFIX => {
                Err(StorageError::BadRedo("patch size does not match the table's updatable prefix"))
            }
            RedoOp::Upsert if T::key(&bytemuck::pod_read_unaligned::<T::Row>(image)) != key => {
                Err(StorageError::BadRedo("upsert image of another row than its key names"))
            }
            _ => Ok(()),
        }
    }

    /// Applies one redo record checked by [`LeanDb::check_redo`], recording in the undo
    /// buffer how to take it back.
    fn apply_one<T: Table>(&mut self, op: RedoOp, key: u64, image: &[u8]) -> Result<(), StorageError> {
        match op {
            RedoOp::Upsert => {
                let after: T::Row = bytemuck::pod_read_unaligned(image);
                let before = self.raw_row_mut::<T>(key).map(|r| *r);
                match before {
                    Some(before) if !T::HAS_SECONDARY || T::secondary(&before) == T::secondary(&after) => {
                        self.undo.push::<T>(UndoOp::Overwritten, key, bytemuck::bytes_of(&before));
                        *self.raw_row_mut::<T>(key).expect("present above") = after;
                    }
                    Some(before) => {
                        // The secondary key changes: re-index the row.
                        self.raw_delete::<T>(key);
                        self.undo.push::<T>(UndoOp::Deleted, key, bytemuck::bytes_of(&before));
                        self.raw_insert::<T>(&after)?;
                        self.undo.push::<T>(UndoOp::Inserted, key, &[]);
                    }
                    None => {
                        self.raw_insert::<T>(&after)?;
                        self.undo.push::<T>(UndoOp::Inserted, key, &[]);
                    }
                }
            }
            RedoOp::Patch => {
                let before = *self.raw_row_mut::<T>(key).ok_or(StorageError::BadRedo("patch of a missing row"))?;
                let mut after = before;
                bytemuck::bytes_of_mut(&mut after)[..image.len()].copy_from_slice(image);
                if T::key(&after) != key || (T::HAS_SECONDARY && T::secondary(&after) != T::secondary(&before)) {
                    return Err(StorageError::BadRedo("patch changes the row's primary or secondary key"));
                }
                self.undo.push::<T>(UndoOp::Updated, key, &bytemuck::bytes_of(&before)[..T::UPDATABLE_PREFIX]);
                *self.raw_row_mut::<T>(key).expect("present above") = after;
            }
            RedoOp::Delete => {
                if let Some(before) = self.raw_delete::<T>(key) {
                    self.undo.push::<T>(UndoOp::Deleted, key, bytemuck::bytes_of(&before));
                }
            }
            RedoOp::Append => {
                self.raw_insert::<T>(&bytemuck::pod_read_unaligned::<T::Row>(image))?;
                self.undo.push::<T>(UndoOp::Inserted, key, &[]);
            }
        }
        Ok(())
    }

    /// Undoes, newest first, every change the undo buffer records (an abort, or a refused
    /// redo batch).
    fn roll_back(&mut self) {
        let records = std::mem::take(&mut self.undo.records);
        for rec in records.iter().rev() {
            match rec.table {
                TableId::Warehouse => self.undo_one::<t::Warehouses>(*rec),
                TableId::District => self.undo_one::<t::Districts>(*rec),
                TableId::Customer => self.undo_one::<t::Customers>(*rec),
                TableId::History => self.undo_one::<t::Histories>(*rec),
                TableId::Orders => self.undo_one::<t::Orders>(*rec),
                TableId::NewOrder => self.undo_one::<t::NewOrders>(*rec),
                TableId::OrderLine => self.undo_one::<t::OrderLines>(*rec),
                TableId::Item => self.undo_one::<t::Items>(*rec),
                TableId::Stock => self.undo_one::<t::Stocks>(*rec),
            }
        }
        self.undo.records = records;
        self.undo.clear();
    }

    /// Turns the committing transaction's undo records into redo records: each changed row
    /// once, with its final state, then the HISTORY rows it appended.
    fn capture_redo(&mut self) {
        let mut batch = self.redo.take().expect("capture is on");
        self.redo_of_txn(&mut batch);
        self.redo = Some(batch);
    }

    /// Appends the redo records of the transaction the undo buffer holds to `batch`.
    fn redo_of_txn(&mut self, batch: &mut RedoBatch) {
        // (table, key, whether the transaction only updated the row).
        let mut rows: Vec<(TableId, u64, bool)> = Vec::with_capacity(self.undo.records.len());
        let mut appended = 0u32;
        for rec in &self.undo.records {
            let updated = rec.op == UndoOp::Updated;
            if rec.table == TableId::History {
                appended += (rec.op == UndoOp::Inserted) as u32;
            } else if let Some(r) = rows.iter_mut().find(|r| (r.0, r.1) == (rec.table, rec.key)) {
                r.2 &= updated;
            } else {
                rows.push((rec.table, rec.key, updated));
            }
        }
        for (table, key, patch) in rows {
            match table {
                TableId::Warehouse => self.emit_redo::<t::Warehouses>(batch, key, patch),
                TableId::District => self.emit_redo::<t::Districts>(batch, key, patch),
                TableId::Customer => self.emit_redo::<t::Customers>(batch, key, patch),
                TableId::History => unreachable!("heap rows are appended, not keyed"),
                TableId::Orders => self.emit_redo::<t::Orders>(batch, key, patch),
                TableId::NewOrder => self.emit_redo::<t::NewOrders>(batch, key, patch),
                TableId::OrderLine => self.emit_redo::<t::OrderLines>(batch, key, patch),
                TableId::Item => self.emit_redo::<t::Items>(batch, key, patch),
                TableId::Stock => self.emit_redo::<t::Stocks>(batch, key, patch),
            }
        }
        let heap = &self.history.rows;
        for id in heap.allocated() - appended..heap.allocated() {
            batch.push(TableId::History, RedoOp::Append, 0, bytemuck::bytes_of(heap.get(id)));
        }
        batch.txns += 1;
    }

    /// `patch`: the transaction only updated the row, so its updatable prefix is enough.
    fn emit_redo<T: Table>(&mut self, batch: &mut RedoBatch, key: u64, patch: bool) {
        match self.raw_row_mut::<T>(key) {
            Some(row) if patch => {
                batch.push(T::ID, RedoOp::Patch, key, &bytemuck::bytes_of(row)[..T::UPDATABLE_PREFIX])
            }
            Some(row) => batch.push(T::ID, RedoOp::Upsert, key, bytemuck::bytes_of(row)),
            None => batch.push(T::ID, RedoOp::Delete, key, &[]),
        }
    }

    fn field<T: Table>(&mut self) -> &mut dyn Any {
        match T::ID {
            TableId::Warehouse => &mut self.warehouse,
            TableId::District => &mut self.district,
            TableId::Customer => &mut self.customer,
            TableId::History => &mut self.history,
            TableId::Orders => &mut self.orders,
            TableId::NewOrder => &mut self.new_order,
            TableId::OrderLine => &mut self.order_line,
            TableId::Item => &mut self.item,
            TableId::Stock => &mut self.stock,
        }
    }

    fn field_ref<T: Table>(&self) -> &dyn Any {
        match T::ID {
            TableId::Warehouse => &self.warehouse,
            TableId::District => &self.district,
            TableId::Customer => &self.customer,
            TableId::History => &self.history,
            TableId::Orders => &self.orders,
            TableId::NewOrder => &self.new_order,
            TableId::OrderLine => &self.order_line,
            TableId::Item => &self.item,
            TableId::Stock => &self.stock,
        }
    }

    #[inline]
    fn hash<T: Table>(&mut self) -> &mut HashStore<T> {
        self.field::<T>().downcast_mut().unwrap_or_else(|| placement(T::ID, Organisation::Hash))
    }

    #[inline]
    fn ordered<T: Table>(&mut self) -> &mut OrderedStore<T> {
        self.field::<T>().downcast_mut().unwrap_or_else(|| placement(T::ID, Organisation::Ordered))
    }

    #[inline]
    fn heap<T: Table>(&mut self) -> &mut HeapStore<T> {
        self.field::<T>().downcast_mut().unwrap_or_else(|| placement(T::ID, Organisation::Heap))
    }

    fn raw_insert<T: Table>(&mut self, row: &T::Row) -> Result<(), StorageError> {
        let key = T::key(row);
        match T::ORG {
            Organisation::Hash => self.hash::<T>().insert(key, row),
            Organisation::Ordered => self.ordered::<T>().insert(key, row),
            Organisation::Heap => {
                self.heap::<T>().rows.alloc(*row);
                Ok(())
            }
        }
    }

    fn raw_delete<T: Table>(&mut self, key: u64) -> Option<T::Row> {
        match T::ORG {
            Organisation::Hash => self.hash::<T>().delete(key),
            Organisation::Ordered => self.ordered::<T>().delete(key),
            Organisation::Heap => {
                let rows = &mut self.heap::<T>().rows;
                let last = rows.allocated().checked_sub(1)?;
                let row = *rows.get(last);
                rows.pop(last);
                Some(row)
            }
        }
    }

    fn raw_row_mut<T: Table>(&mut self, key: u64) -> Option<&mut T::Row> {
        match T::ORG {
            Organisation::Hash => {
                let s = self.hash::<T>();
                let idx = s.find(key)?;
                Some(s.rows.get_mut(idx))
            }
            Organisation::Ordered => self.ordered::<T>().get_mut(key),
            Organisation::Heap => None,
        }
    }

    fn undo_one<T: Table>(&mut self, rec: UndoRecord) {
        let at = rec.at as usize;
        match rec.op {
            UndoOp::Inserted => {
                self.raw_delete::<T>(rec.key).expect("undo: inserted row present");
            }
            UndoOp::Updated => {
                let n = T::UPDATABLE_PREFIX;
                let images = std::mem::take(&mut self.undo.images);
                let row = self.raw_row_mut::<T>(rec.key).expect("undo: updated row present");
                bytemuck::bytes_of_mut(row)[..n].copy_from_slice(&images[at..at + n]);
                self.undo.images = images;
            }
            UndoOp::Overwritten => {
                let before: T::Row =
                    bytemuck::pod_read_unaligned(&self.undo.images[at..at + std::mem::size_of::<T::Row>()]);
                *self.raw_row_mut::<T>(rec.key).expect("undo: overwritten row present") = before;
            }
            UndoOp::Deleted => {
                let before: T::Row =
                    bytemuck::pod_read_unaligned(&self.undo.images[at..at + std::mem::size_of::<T::Row>()]);
                self.raw_insert::<T>(&before).expect("undo: deleted key free");
            }
        }
    }
}

impl Storage for LeanDb {
    fn begin(&mut self, _ts: u64) {
        debug_assert!(!self.in_txn, "begin inside a transaction");
        self.in_txn = true;
        self.undo.clear();
    }

    fn commit(&mut self) -> Result<(), StorageError> {
        debug_assert!(self.in_txn, "commit outside a transaction");
        self.in_txn = false;
        if self.redo.is_some() {
            self.capture_redo();
        }
        if self.copy.is_some() {
            self.copy_capture();
        }
        self.undo.clear();
        self.counters.committed += 1;
        Ok(())
    }

    fn abort(&mut self) {
        debug_assert!(self.in_txn, "abort outside a transaction");
        self.roll_back();
        self.in_txn = false;
        self.counters.aborted += 1;
    }

    #[inline]
    fn get<T: Table, R>(&mut self, key: u64, f: impl FnOnce(&T::Row) -> R) -> Result<Option<R>, StorageError> {
        match T::ORG {
            Organisation::Hash => {
                let s = self.hash::<T>();
                Ok(s.find(key).map(|idx| f(s.rows.get(idx))))
            }
            Organisation::Ordered => Ok(self.ordered::<T>().get(key).map(f)),
            Organisation::Heap => Err(StorageError::Unsupported { table: T::ID, op: "get by key" }),
        }
    }

    #[inline]
    fn update<T: Table, R>(&mut self, key: u64, f: impl FnOnce(&mut T::Row) -> R) -> Result<Option<R>, StorageError> {
        if T::ORG == Organisation::Heap {
            return Err(StorageError::Unsupported { table: T::ID, op: "update by key" });
        }
        let in_txn = self.in_txn;
        // Split borrows: the undo buffer and the table are distinct fields.
        let undo = &mut self.undo as *mut UndoBuffer;
        let Some(row) = self.raw_row_mut::<T>(key) else { return Ok(None) };
        if in_txn {
            // SAFETY: `undo` points to self.undo, disjoint from the table row borrowed by `row`.
            unsafe { (*undo).push::<T>(UndoOp::Updated, key, &bytemuck::bytes_of(row)[..T::UPDATABLE_PREFIX]) };
        }
        #[cfg(debug_assertions)]
        let (pk, sk, before) = (T::key(row), T::HAS_SECONDARY.then(|| T::secondary(row)), *row);
        let r = f(row);
        #[cfg(debug_assertions)]
        {
            assert_eq!(pk, T::key(row), "update changed the primary key of {}", T::ID);
            assert_eq!(sk, T::HAS_SECONDARY.then(|| T::secondary(row)), "update changed a secondary key");
            let n = T::UPDATABLE_PREFIX;
            assert!(
                !in_txn || bytemuck::bytes_of(&before)[n..] == bytemuck::bytes_of(row)[n..],
                "an update of {} changed bytes past its updatable prefix ({n})",
                T::ID
            );
        }
        Ok(Some(r))
    }

    #[inline]
    fn insert<T: Table>(&mut self, row: &T::Row) -> Result<(), StorageError> {
        self.raw_insert::<T>(row)?;
        if self.in_txn {
            self.undo.push::<T>(UndoOp::Inserted, T::key(row), &[]);
        }
        Ok(())
    }

    fn delete<T: Table>(&mut self, key: u64) -> Result<Option<T::Row>, StorageError> {
        if T::ORG == Organisation::Heap {
            return Err(StorageError::Unsupported { table: T::ID, op: "delete by key" });
        }
        let row = self.raw_delete::<T>(key);
        if let (Some(r), true) = (&row, self.in_txn) {
            self.undo.push::<T>(UndoOp::Deleted, key, bytemuck::bytes_of(r));
        }
        Ok(row)
    }

    fn scan<T: Table>(
        &mut self,
        lo: u64,
        hi: u64,
        dir: ScanDir,
        mut f: impl FnMut(&T::Row) -> bool,
    ) -> Result<(), StorageError> {
        if T::ORG != Organisation::Ordered {
            return Err(StorageError::Unsupported { table: T::ID, op: "ordered scan" });
        }
        if lo > hi {
            return Ok(());
        }
        let store = self.ordered::<T>();
        let rows = &store.rows;
        store.index.range(&lo, &hi, dir == ScanDir::Forward, &mut |_, &i| f(rows.get(i)));
        Ok(())
    }

    fn scan_secondary<T: Table>(
        &mut self,
        lo: T::Sec,
        hi: T::Sec,
        dir: ScanDir,
        mut f: impl FnMut(u64) -> bool,
    ) -> Result<(), StorageError> {
        if !T::HAS_SECONDARY {
            return Err(StorageError::Unsupported { table: T::ID, op: "secondary index scan" });
        }
        if lo > hi {
            return Ok(());
        }
        let index = match T::ORG {
            Organisation::Hash => &self.hash::<T>().secondary,
            Organisation::Ordered => &self.ordered::<T>().secondary,
            Organisation::Heap => unreachable!("heap tables have no secondary index"),
        };
        index.range(&lo, &hi, dir == ScanDir::Forward, &mut |_, &k| f(k));
        Ok(())
    }

    #[inline]
    fn prefetch<T: Table>(&self, keys: &[u64], stage: Prefetch) {
        if T::ORG == Organisation::Hash {
            if let Some(s) = self.field_ref::<T>().downcast_ref::<HashStore<T>>() {
                s.prefetch(keys, stage);
            }
        }
    }

    fn reserve<T: Table>(&mut self, additional: usize) {
        match T::ORG {
            Organisation::Hash => self.hash::<T>().reserve(additional),
            Organisation::Heap => {}
            Organisation::Ordered => {}
        }
    }

    fn for_each<T: Table>(&mut self, mut f: impl FnMut(&T::Row)) {
        match T::ORG {
            Organisation::Hash => self.hash::<T>().for_each(f),
            Organisation::Ordered => {
                let s = self.ordered::<T>();
                let rows = &s.rows;
                s.index.for_each(&mut |_, &i| f(rows.get(i)));
            }
            Organisation::Heap => {
                let rows = &self.heap::<T>().rows;
                (0..rows.allocated()).for_each(|i| f(rows.get(i)));
            }
        }
    }

    fn count<T: Table>(&mut self) -> usize {
        match T::ORG {
            Organisation::Hash => self.hash::<T>().len,
            Organisation::Ordered => self.ordered::<T>().index.len(),
            Organisation::Heap => self.heap::<T>().rows.live(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{keys, Item};
    use bytemuck::Zeroable;

    fn item(i: u32) -> Item {
        Item { i_id: i, i_price: i as i64, ..Item::zeroed() }
    }

    #[test]
    fn hash_store_survives_growth_and_backward_shift_deletes() {
        let mut s = HashStore::<t::Items>::default();
        // Sparse, adversarial keys: nothing assumes dense ids.
        let ks: Vec<u32> = (0..5000u32).map(|i| i.wrapping_mul(2_654_435_761) | 1).collect();
        for &k in &ks {
            s.insert(keys::item(k), &item(k)).unwrap();
        }
        for &k in ks.iter().step_by(3) {
            assert_eq!(s.delete(keys::item(k)).unwrap().i_id, k);
        }
        for (n, &k) in ks.iter().enumerate() {
            let found = s.find(keys::item(k)).map(|i| s.rows.get(i).i_id);
            assert_eq!(found, (n % 3 != 0).then_some(k), "key {k}");
        }
        assert!(matches!(s.insert(keys::item(ks[1]), &item(ks[1])), Err(StorageError::Duplicate { .. })));
    }

    #[test]
    fn abort_restores_updates_inserts_and_deletes() {
        let mut db = LeanDb::new();
        db.insert::<t::Items>(&item(7)).unwrap();
        db.insert::<t::Items>(&item(8)).unwrap();
        db.begin(1);
        db.update::<t::Items, _>(7, |r| r.i_price = 100).unwrap();
        db.insert::<t::Items>(&item(9)).unwrap();
        db.delete::<t::Items>(8).unwrap();
        db.update::<t::Items, _>(7, |r| r.i_price = 200).unwrap();
        db.abort();
        assert_eq!(db.get::<t::Items, _>(7, |r| r.i_price).unwrap(), Some(7));
        assert_eq!(db.get::<t::Items, _>(8, |r| r.i_price).unwrap(), Some(8));
        assert_eq!(db.get::<t::Items, _>(9, |r| r.i_price).unwrap(), None);
    }
}
