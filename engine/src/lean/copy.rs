//! A copy of a partition taken while it executes on (docs/design.md §10, "Copying without
//! stopping"): a *copy-on-write snapshot* of the state at the moment the copy began (a batch
//! boundary), streamed a slice at a time. The executor calls [`LeanDb::copy_step`] between
//! batches, each call copying at most a slice of rows, and runs its batches as usual in
//! between; the receiver installs the rows ([`LeanDb::install_copy_rows`]) and has the
//! source's state at that batch, from which it executes the batches that followed.
//!
//! How the copy stays at its moment: the first time a transaction commits a change to a row
//! the scan has not passed yet (or, in a hash table, to any row of a table whose scan is not
//! finished), the row's image from before that transaction — or the fact that it did not
//! exist — is kept aside; the scan sends the kept image instead of the row's current one (or
//! nothing, for a row that did not exist), and at the end of each table's pass it sends the
//! kept images of rows deleted since (those it did not already send). HISTORY, the one heap
//! table, only grows: its rows up to the copy's beginning are copied, the later ones are not.
//! Unlike a fuzzy copy, nothing of what happened after the beginning is sent: the joiner gets
//! those transactions as the batches it holds, about a tenth of the bytes of their changes.
//!
//! The scan visits tables in [`TableId::ALL`] order: an ordered table by key (resuming after
//! the last key copied), a hash table by row id in its pool (allocation order, the order a
//! load inserts rows in: copied in slot order, they would cluster in the receiver's smaller,
//! growing table). An insert or a delete can reuse a released id, so a hash table whose rows
//! came or went under its scan is scanned again from the start (the receiver lets the rows
//! sent again replace the ones sent before); past [`COPY_HASH_RESCANS_MAX`] rescans the rest
//! of that table is copied in one step. TPC-C's hash tables never change size after the load,
//! so under TPC-C no rescan ever happens.
//!
//! The digest: each table's accumulator ([`TableDigest`], a sum of row hashes) sums the rows
//! as sent, so the end carries the digest of the state at the beginning without a second
//! scan; the receiver recomputes the digest of what it installed and refuses a copy whose
//! digest differs — a check of the transfer and of this construction, on every copy.
//!
//! Cost to the source while a copy runs: one lookup in the kept rows for each row a
//! transaction changes, and the kept images (bounded: past [`COPY_KEPT_BYTES_MAX`] the copy
//! gives up, [`LeanDb::copy_over_budget`]). No single call costs time in proportion to what
//! is kept — under saturation a copy of a 20-warehouse partition keeps millions of rows, and
//! a map or buffer of that size growing in one piece stalled the executor for hundreds of
//! milliseconds: the kept rows are spread over [`KEPT_SHARDS`] maps per table (a map doubling
//! moves a 1/256th of them), their images over fixed [`KEPT_SEGMENT_BYTES`] segments (never
//! moved), a rescan forgets what its table's pass sent by starting a new pass number, the
//! flush at a pass's end lists one shard a step, and what the copy kept is freed a few maps
//! and segments at a time by the executor: a table's kept rows once its pass is over, by the
//! steps that follow, and the rest once the copy is over ([`LeanDb::free_copy_leftovers`]).
//! (Freed in one piece, a table's took the executor 15 ms at 10 warehouses; freed on a thread
//! of their own, the frees — page unmapping — stalled both partitions of a node for
//! 400–600 ms at a time: measured with `glass failover` at 4 and 20 warehouses.)

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::digest::{digest_of, Digest, TableDigest};
use crate::lean::{LeanDb, UndoOp, UndoRecord};
use crate::schema::{t, Organisation, Table, TableId};
use crate::StorageError;

/// Maps the kept rows of one table are spread over.
pub const KEPT_SHARDS: usize = 256;
/// Bytes of one segment of kept images (no image straddles two).
pub const KEPT_SEGMENT_BYTES: usize = 4 << 20;

/// Kept rows a [`LeanDb::copy_step`] looks through at most when it lists a pass's end (a
/// step that lists this many and finds nothing due returns with no rows).
pub const KEPT_LISTED_PER_STEP_MAX: usize = 1 << 16;

/// Kept maps, and kept image segments, freed at most in one [`LeanDb::copy_step`] or
/// [`LeanDb::free_copy_leftovers`].
pub const COPY_FREED_PER_STEP: usize = 8;

/// Rescans of one hash table a copy makes before it copies the rest of that table at once.
pub const COPY_HASH_RESCANS_MAX: u32 = 3;
/// Bytes of row images a copy keeps aside before it gives up.
pub const COPY_KEPT_BYTES_MAX: usize = 1 << 30;

/// What one [`LeanDb::copy_step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyStep {
    /// `rows` rows of `table` were appended to the output (none, now and then, at a pass's
    /// end: the step looked through [`KEPT_LISTED_PER_STEP_MAX`] kept rows and found none
    /// due).
    Rows { table: TableId, rows: u32 },
    /// Every table has been sent: the copy can end ([`LeanDb::finish_copy`]).
    Done,
}

/// Where a copy stands, for progress reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CopyProgress {
    /// Tables fully sent, of nine.
    pub tables_done: usize,
    /// Rows copied so far (rescans included).
    pub rows: u64,
    /// Bytes of rows copied so far.
    pub bytes: u64,
    /// Hash tables scanned again because rows came or went under the scan.
    pub rescans: u32,
    /// Rows whose image at the beginning was kept aside, and the bytes kept.
    pub kept_rows: u64,
    pub kept_bytes: u64,
}

/// The scan's position in the table it is at.
#[derive(Debug, Clone)]
enum Position {
    /// Hash table: the next row id of its pool; `layout` is the table's layout counter when
    /// its pass began.
    Hash { id: u32, layout: u64, rescans: u32 },
    /// Ordered table: the next key to copy (`None`: past the largest key).
    Ordered { next: Option<u64> },
    /// Heap table: the next row id, and the rows it held when the copy began.
    Heap { id: u32, end: u32 },
    /// The table's pass is over: the kept images of rows deleted since go out, shard by
    /// shard (`due`: the current shard's, in key order, from `next`).
    Flush { shard: usize, due: Option<Box<[(u64, u32)]>>, next: usize },
}

impl Position {
    const FLUSH: Position = Position::Flush { shard: 0, due: None, next: 0 };
}

/// A row's image at the copy's beginning, kept aside: where in [`CopyState::kept_bytes`]
/// (`None`: the row did not exist), and the pass of its table that sent it (0: none; see
/// [`CopyState::passes`]).
#[derive(Debug, Clone, Copy)]
struct Kept {
    at: Option<u32>,
    sent_pass: u32,
}

/// One table's kept rows, spread over [`KEPT_SHARDS`] maps by key.
#[derive(Debug, Default)]
struct KeptRows {
    shards: Vec<KeptMap>,
}

impl KeptRows {
    /// The shard of `key`: by another multiplier than [`KeyHasher`]'s, whose top bits the
    /// map's probe uses as its tag (the same bits would give every key of a shard the same
    /// tag, and a lookup would compare keys all along its probe).
    fn shard_of(key: u64) -> usize {
        (key.wrapping_mul(0xD6E8_FEB8_6659_FD93) >> 56) as usize % KEPT_SHARDS
    }

    fn get_mut(&mut self, key: u64) -> Option<&mut Kept> {
        self.shards.get_mut(Self::shard_of(key))?.get_mut(&key)
    }

    fn contains(&self, key: u64) -> bool {
        self.shards.get(Self::shard_of(key)).is_some_and(|m| m.contains_key(&key))
    }

    fn insert(&mut self, key: u64, kept: Kept) {
        if self.shards.is_empty() {
            self.shards.resize_with(KEPT_SHARDS, KeptMap::default);
        }
        self.shards[Self::shard_of(key)].insert(key, kept);
    }

    /// Shard `shard`'s rows not sent by pass `pass` that existed at the beginning, in key
    /// order.
    fn due(&self, shard: usize, pass: u32) -> Box<[(u64, u32)]> {
        let Some(map) = self.shards.get(shard) else { return Box::default() };
        let mut due: Vec<(u64, u32)> =
            map.iter().filter(|(_, v)| v.sent_pass != pass).filter_map(|(&k, v)| v.at.map(|at| (k, at))).collect();
        due.sort_unstable();
        due.into_boxed_slice()
    }
}

/// What a copy kept and no longer needs, waiting to be freed a little at a time.
#[derive(Debug, Default)]
pub(crate) struct CopyLeftovers {
    maps: Vec<KeptMap>,
    segments: Vec<Vec<u8>>,
}

impl CopyLeftovers {
    /// Frees at most [`COPY_FREED_PER_STEP`] maps and as many segments; whether any is left.
    fn free_some(&mut self) -> bool {
        let maps = self.maps.len().saturating_sub(COPY_FREED_PER_STEP);
        self.maps.truncate(maps);
        let segments = self.segments.len().saturating_sub(COPY_FREED_PER_STEP);
        self.segments.truncate(segments);
        !self.maps.is_empty() || !self.segments.is_empty()
    }

    fn take(&mut self, c: Box<CopyState>) {
        let c = *c;
        self.maps.extend(c.kept.into_iter().flat_map(|k| k.shards));
        self.segments.extend(c.kept_bytes.segments);
    }
}

/// Kept row images in fixed segments of [`KEPT_SEGMENT_BYTES`]: appending never moves what
/// is there (a buffer doubling would copy every image kept). An image's place is its offset
/// as if the segments were back to back.
#[derive(Debug, Default)]
struct KeptBytes {
    segments: Vec<Vec<u8>>,
    bytes: usize,
}

impl KeptBytes {
    fn push(&mut self, image: &[u8]) -> u32 {
        let fits = self.segments.last().is_some_and(|s| s.len() + image.len() <= KEPT_SEGMENT_BYTES);
        if !fits {
            self.segments.push(Vec::with_capacity(KEPT_SEGMENT_BYTES));
        }
        let index = self.segments.len() - 1;
        let segment = &mut self.segments[index];
        let at = index * KEPT_SEGMENT_BYTES + segment.len();
        segment.extend_from_slice(image);
        self.bytes += image.len();
        u32::try_from(at).unwrap_or(u32::MAX)
    }

    fn get(&self, at: u32, size: usize) -> &[u8] {
        let (index, offset) = (at as usize / KEPT_SEGMENT_BYTES, at as usize % KEPT_SEGMENT_BYTES);
        &self.segments[index][offset..offset + size]
    }
}

/// A multiplicative hasher for the kept rows' (table, key) pairs: keys are packed integers,
/// and SipHash would cost more than the lookup (no iteration order of this map reaches the
/// stream: the flush sorts).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u8(&mut self, b: u8) {
        self.write_u64(u64::from(b));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type KeptMap = HashMap<u64, Kept, BuildHasherDefault<KeyHasher>>;

/// A copy in progress (held by the [`LeanDb`] it copies).
#[derive(Debug)]
pub(crate) struct CopyState {
    /// The copier's name for this copy ([`LeanDb::begin_copy`]).
    id: u64,
    /// Index in [`TableId::ALL`] of the table being scanned (9: all done).
    table: usize,
    pos: Position,
    /// HISTORY's rows when the copy began.
    heap_end: u32,
    sums: [TableDigest; 9],
    /// Per table (by index in [`TableId::ALL`]): its kept rows, and the number of its
    /// current pass (a rescan starts a new one: what earlier passes sent is not sent).
    kept: [KeptRows; 9],
    passes: [u32; 9],
    kept_bytes: KeptBytes,
    /// Kept rows looked through by the current step's listings, and the bound on them
    /// ([`KEPT_LISTED_PER_STEP_MAX`]; lower in tests).
    listed: usize,
    listed_max: usize,
    progress: CopyProgress,
}

impl std::fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyHasher")
    }
}

impl LeanDb {
    /// Begins a copy of this database's state now, named `id` by the copier
    /// ([`LeanDb::copy_id`]); `false` (and nothing changes) when one is already being taken.
    /// Call between transactions (the copy is of the state between them).
    pub fn begin_copy(&mut self, id: u64) -> bool {
        if self.copy.is_some() {
            return false;
        }
        self.copy_leftovers = CopyLeftovers::default();
        debug_assert!(!self.in_txn, "a copy begins between transactions");
        let heap_end = self.history.rows.allocated();
        let mut state = CopyState {
            id,
            table: 0,
            pos: Position::FLUSH,
            heap_end,
            sums: [TableDigest::default(); 9],
            kept: Default::default(),
            passes: [1; 9],
            kept_bytes: KeptBytes::default(),
            listed: 0,
            listed_max: KEPT_LISTED_PER_STEP_MAX,
            progress: CopyProgress::default(),
        };
        state.pos = self.start_position(0, heap_end);
        self.copy = Some(Box::new(state));
        true
    }

    /// Lowers the kept rows a step's listing looks through, for the copy under way.
    #[cfg(test)]
    pub(crate) fn set_copy_listed_max(&mut self, n: usize) {
        if let Some(c) = self.copy.as_mut() {
            c.listed_max = n.max(1);
        }
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

    /// Whether the copy under way keeps more than [`COPY_KEPT_BYTES_MAX`] bytes of images
    /// aside (its copier should give it up: [`LeanDb::abort_copy`]).
    pub fn copy_over_budget(&self) -> bool {
        self.copy.as_ref().is_some_and(|c| c.kept_bytes.bytes > COPY_KEPT_BYTES_MAX)
    }

    /// Copies the next rows — at most `bytes_max` bytes of them, at least one row — of one
    /// table into `out` (their Pod bytes, back to back), as they were when the copy began.
    /// Call between transactions.
    ///
    /// # Panics
    /// Without a copy under way.
    pub fn copy_step(&mut self, bytes_max: usize, out: &mut Vec<u8>) -> CopyStep {
        self.copy.as_mut().expect("a copy is under way").listed = 0;
        self.copy_leftovers.free_some();
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
                // Nothing of this table is sent any more: its kept rows go, a few a step.
                self.copy_leftovers.maps.extend(std::mem::take(&mut c.kept[table]).shards);
                c.table += 1;
                c.pos = next;
                c.progress.tables_done = c.table;
            }
            let c = self.copy.as_ref().expect("under way");
            if rows > 0 || c.listed >= c.listed_max {
                return CopyStep::Rows { table: id, rows };
            }
        }
    }

    /// Ends the copy once every table is sent: the state digest of this database when the
    /// copy began, from the sums of what was sent (no scan).
    ///
    /// # Panics
    /// Without a copy under way, or before [`CopyStep::Done`].
    pub fn finish_copy(&mut self) -> Digest {
        let c = self.copy.take().expect("a copy is under way");
        assert_eq!(c.table, TableId::ALL.len(), "the copy's scan is not done");
        let digest = digest_of(&c.sums);
        self.copy_leftovers.take(c);
        digest
    }

    /// Drops the copy under way (its receiver went away), if any; what it kept is freed a
    /// little at a time ([`LeanDb::free_copy_leftovers`]).
    pub fn abort_copy(&mut self) {
        if let Some(c) = self.copy.take() {
            self.copy_leftovers.take(c);
        }
    }

    /// Frees a little of what the last copy kept — at most [`COPY_FREED_PER_STEP`] maps and
    /// image segments, each a few MiB at most — and says whether any is left. The executor
    /// calls it between batches once a copy is over, until nothing is left (the next copy
    /// frees what is left at once, when it begins).
    pub fn free_copy_leftovers(&mut self) -> bool {
        self.copy_leftovers.free_some()
    }

    /// Whether the last copy left anything to free ([`LeanDb::free_copy_leftovers`]).
    pub fn has_copy_leftovers(&self) -> bool {
        !self.copy_leftovers.maps.is_empty() || !self.copy_leftovers.segments.is_empty()
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

    /// Where the pass over table `table` (index in [`TableId::ALL`]) starts.
    fn start_position(&mut self, table: usize, heap_end: u32) -> Position {
        match TableId::ALL.get(table).map(|id| (*id, id.organisation())) {
            Some((id, Organisation::Hash)) => Position::Hash { id: 0, layout: self.hash_layout(id), rescans: 0 },
            Some((_, Organisation::Ordered)) => Position::Ordered { next: Some(0) },
            Some((_, Organisation::Heap)) => Position::Heap { id: 0, end: heap_end },
            None => Position::FLUSH,
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

    /// One step of the pass over `T`: (rows copied, whether the table is done).
    fn scan_step<T: Table>(&mut self, bytes_max: usize, out: &mut Vec<u8>) -> (u32, bool) {
        let size = std::mem::size_of::<T::Row>();
        let mut c = self.copy.take().expect("a copy is under way");
        let mut emit = Emitter { out, bytes_max, size, rows: 0, sum: c.sums[T::ID as usize] };
        let pos = std::mem::replace(&mut c.pos, Position::FLUSH);
        let finished = match pos {
            Position::Hash { mut id, layout, mut rescans } => {
                let store = self.hash::<T>();
                if store.layout != layout {
                    // Rows came or went under the scan (a released id may now hold another
                    // key): the pass starts again.
                    rescans += 1;
                    c.progress.rescans += 1;
                    id = 0;
                    emit.sum = TableDigest::default();
                    c.passes[T::ID as usize] += 1;
                }
                let unbounded = rescans > COPY_HASH_RESCANS_MAX;
                let end = store.rows.allocated();
                while id < end && (unbounded || emit.room()) {
                    let row = store.rows.get(id);
                    let key = T::key(row);
                    // A released id holds garbage: live rows are those their key finds.
                    if store.find(key) == Some(id) {
                        emit.row_as_it_was::<T>(&mut c, key, row);
                    }
                    id += 1;
                }
                let done = id >= end;
                c.pos = if done { Position::FLUSH } else { Position::Hash { id, layout: store.layout, rescans } };
                false
            }
            Position::Ordered { next } => {
                let store = self.ordered::<T>();
                let mut last = None;
                let mut stopped = false;
                if let Some(from) = next {
                    let pool = &store.rows;
                    store.index.range(&from, &u64::MAX, true, &mut |&k, &i| {
                        if !emit.room() {
                            stopped = true;
                            return false;
                        }
                        emit.row_as_it_was::<T>(&mut c, k, pool.get(i));
                        last = Some(k);
                        true
                    });
                }
                let next = match last {
                    Some(k) => k.checked_add(1),
                    None => next,
                };
                c.pos = if stopped { Position::Ordered { next } } else { Position::FLUSH };
                false
            }
            Position::Heap { mut id, end } => {
                let pool = &self.heap::<T>().rows;
                while id < end && emit.room() {
                    emit.row::<T>(pool.get(id));
                    id += 1;
                }
                c.pos = Position::Heap { id, end };
                id >= end
            }
            Position::Flush { shard, due, next } => Self::flush_kept::<T>(&mut c, &mut emit, shard, due, next),
        };
        c.sums[T::ID as usize] = emit.sum;
        c.progress.rows += u64::from(emit.rows);
        c.progress.bytes += u64::from(emit.rows) * size as u64;
        let rows = emit.rows;
        self.copy = Some(c);
        (rows, finished)
    }

    /// The end of a keyed table's pass: the kept images of its rows not sent by the pass (rows
    /// deleted since the copy began), shard by shard and in key order within a shard, as
    /// room allows; `true` once all are out. A step lists shards until it has looked through
    /// [`KEPT_LISTED_PER_STEP_MAX`] kept rows.
    fn flush_kept<T: Table>(
        c: &mut CopyState,
        emit: &mut Emitter<'_>,
        mut shard: usize,
        mut due: Option<Box<[(u64, u32)]>>,
        mut next: usize,
    ) -> bool {
        let (table, pass) = (T::ID as usize, c.passes[T::ID as usize]);
        let size = std::mem::size_of::<T::Row>();
        loop {
            let rows = match &due {
                Some(rows) => rows,
                None if shard >= KEPT_SHARDS => return true,
                None if c.listed >= c.listed_max => {
                    c.pos = Position::Flush { shard, due, next };
                    return false;
                }
                None => {
                    next = 0;
                    c.listed += c.kept[table].shards.get(shard).map_or(1, |m| m.len().max(1));
                    due.insert(c.kept[table].due(shard, pass))
                }
            };
            while let Some(&(key, at)) = rows.get(next) {
                if !emit.room() {
                    c.pos = Position::Flush { shard, due, next };
                    return false;
                }
                let row: T::Row = bytemuck::pod_read_unaligned(c.kept_bytes.get(at, size));
                emit.row::<T>(&row);
                c.kept[table].get_mut(key).expect("listed").sent_pass = pass;
                next += 1;
            }
            due = None;
            shard += 1;
        }
    }

    /// Keeps aside, for the copy under way, the image from before the committing transaction
    /// (the undo buffer holds it) of every row it changed that the copy has yet to send.
    pub(crate) fn copy_capture(&mut self) {
        let mut c = self.copy.take().expect("a copy is under way");
        let records = std::mem::take(&mut self.undo.records);
        for rec in &records {
            if rec.table == TableId::History {
                continue;
            }
            if c.kept[rec.table as usize].contains(rec.key) || !self.unsent(&c, rec.table, rec.key) {
                continue;
            }
            let of_key = || records.iter().filter(|r| (r.table, r.key) == (rec.table, rec.key));
            match rec.table {
                TableId::Warehouse => self.keep::<t::Warehouses>(&mut c, rec.key, of_key()),
                TableId::District => self.keep::<t::Districts>(&mut c, rec.key, of_key()),
                TableId::Customer => self.keep::<t::Customers>(&mut c, rec.key, of_key()),
                TableId::History => unreachable!("skipped above"),
                TableId::Orders => self.keep::<t::Orders>(&mut c, rec.key, of_key()),
                TableId::NewOrder => self.keep::<t::NewOrders>(&mut c, rec.key, of_key()),
                TableId::OrderLine => self.keep::<t::OrderLines>(&mut c, rec.key, of_key()),
                TableId::Item => self.keep::<t::Items>(&mut c, rec.key, of_key()),
                TableId::Stock => self.keep::<t::Stocks>(&mut c, rec.key, of_key()),
            }
        }
        self.undo.records = records;
        self.copy = Some(c);
    }

    /// Whether the copy has yet to send `key` of `table`: its table's pass is not over and,
    /// in an ordered table, the scan has not passed the key (a hash table's rows may be sent
    /// again by a rescan: every row of one whose pass is not over counts).
    fn unsent(&self, c: &CopyState, table: TableId, key: u64) -> bool {
        let at = table as usize;
        if at != c.table {
            return at > c.table;
        }
        match c.pos {
            Position::Ordered { next } => next.is_some_and(|n| key >= n),
            Position::Hash { .. } => true,
            Position::Heap { .. } | Position::Flush { .. } => false,
        }
    }

    /// Keeps `key`'s image from before the transaction (rebuilt from its undo records
    /// `of_key`, newest undone first; `None` if it did not exist).
    fn keep<'r, T: Table>(
        &mut self,
        c: &mut CopyState,
        key: u64,
        of_key: impl DoubleEndedIterator<Item = &'r UndoRecord>,
    ) {
        let mut before: Option<T::Row> = self.raw_row_mut::<T>(key).map(|r| *r);
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
        let at = before.map(|row| c.kept_bytes.push(bytemuck::bytes_of(&row)));
        // A hash table's pass may have sent the row already, as it was then (its first change
        // is this one): the pass must not send it again. (A rescan starts every row over.)
        let sent = match c.pos {
            Position::Hash { id: cursor, .. } if T::ID as usize == c.table => {
                self.hash::<T>().find(key).is_some_and(|id| id < cursor)
            }
            _ => false,
        };
        let sent_pass = if sent { c.passes[T::ID as usize] } else { 0 };
        c.progress.kept_rows += 1;
        c.progress.kept_bytes = c.kept_bytes.bytes as u64;
        c.kept[T::ID as usize].insert(key, Kept { at, sent_pass });
    }
}

/// Appends rows to a step's output, within its budget, summing their hashes.
struct Emitter<'a> {
    out: &'a mut Vec<u8>,
    bytes_max: usize,
    size: usize,
    rows: u32,
    sum: TableDigest,
}

impl Emitter<'_> {
    /// Whether another row fits (the first always does).
    fn room(&self) -> bool {
        self.rows == 0 || self.out.len() + self.size <= self.bytes_max
    }

    fn row<T: Table>(&mut self, row: &T::Row) {
        self.out.extend_from_slice(bytemuck::bytes_of(row));
        self.sum.add::<T>(row);
        self.rows += 1;
    }

    /// `row` (of `key`), or its image kept from the copy's beginning, or nothing if it did
    /// not exist then.
    fn row_as_it_was<T: Table>(&mut self, c: &mut CopyState, key: u64, row: &T::Row) {
        let pass = c.passes[T::ID as usize];
        match c.kept[T::ID as usize].get_mut(key) {
            None => self.row::<T>(row),
            Some(kept) => {
                kept.sent_pass = pass;
                if let Some(at) = kept.at {
                    let old: T::Row = bytemuck::pod_read_unaligned(c.kept_bytes.get(at, self.size));
                    self.row::<T>(&old);
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
