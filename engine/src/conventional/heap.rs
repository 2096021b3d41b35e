//! Heap files: every table's records, in slotted pages found through a free-space map, named
//! by record ids (Shore's file of records; docs/conventional.md, "access path").
//!
//! Owns: record creation (a free slot on a page the free-space map names, else a new slot on
//! the file's last page, else a newly allocated page, formatted and logged), reading,
//! updating and freeing a record by its id, placing a record at a given id (redo, and the
//! undo of a delete), the free-space map, and visiting records in file order.
//!
//! A record id `(page, slot)` never moves while its record lives: indexes map keys to it.
//! Records of a file have one width (TPC-C rows are fixed-width), so a freed slot keeps its
//! cell and the next record placed there reuses it. Slot states: an offset (live) or the
//! offset with [`FREE`] set (free, cell kept).
//!
//! Guarantees:
//! - a freed slot is taken again only by a creator that gets the record-id lock `claim`
//!   asks for (conditionally, under the page latch): a deleter holds its X lock on the
//!   record id to commit, so its undo finds the slot still free and re-places the record at
//!   the same id;
//! - the free-space map is a hint: pages are added when a deleting transaction commits (the
//!   caller calls [`HeapFile::release`]), when an undone creation frees a slot, when redo
//!   frees one, and when the map is rebuilt from the pages at open; a page whose free slots
//!   are all claimed by others is dropped from it (and comes back when they commit);
//! - page allocation is logged (`format`: the new page's image, a redo-only record) while
//!   the new page is latched and before any record on it is logged, so redo in log order
//!   finds every page it places a record on;
//! - latches: the map's latch is never held while waiting for a page latch, except that a
//!   new page (which no one else can reach yet) is latched under it.

use std::collections::BTreeSet;

use super::latch::{Latch, LatchMode};
use super::page::{hdr, PageNo, PageStore, HEADER_BYTES, KIND_HEAP};
use super::stats::Stats;

/// A slot whose record was freed (the low bits keep its cell's offset).
const FREE: usize = 0x8000;

/// A record id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rid {
    pub page: PageNo,
    pub slot: u16,
}

impl Rid {
    /// The rid packed for lock names, index entries and log records.
    pub fn pack(self) -> u64 {
        ((self.page as u64) << 16) | self.slot as u64
    }
    pub fn unpack(v: u64) -> Rid {
        Rid { page: (v >> 16) as PageNo, slot: v as u16 }
    }
}

/// The free-space map: pages that may have a free slot, and the last page of the file.
struct FreeSpace {
    pages: BTreeSet<PageNo>,
    last: PageNo,
}

/// A heap file in its own store.
pub(crate) struct HeapFile {
    store: PageStore,
    row_len: usize,
    fsm: Latch<FreeSpace>,
}

/// Why a record id given to redo or undo does not fit the file.
pub(crate) type HeapError = &'static str;

impl HeapFile {
    /// An empty file (its first page formatted; at open, before any log record).
    pub fn new(store: PageStore, row_len: usize, latch: LatchMode, stats: &Stats) -> HeapFile {
        let (no, mut p) = store.allocate(stats);
        hdr::init(&mut p, KIND_HEAP, 0);
        drop(p);
        HeapFile { store, row_len, fsm: Latch::new(FreeSpace { pages: BTreeSet::new(), last: no }, latch) }
    }

    pub fn store(&self) -> &PageStore {
        &self.store
    }

    #[inline]
    fn live(p: &[u8], slot: usize) -> Option<usize> {
        if slot >= hdr::count(p) {
            return None;
        }
        let at = hdr::slot(p, slot);
        (at != 0 && at & FREE == 0).then_some(at)
    }

    /// Creates a record holding `row` and returns its id. `claim(rid, fresh)` runs under the
    /// page's exclusive latch for each slot considered and says whether the creator may take
    /// it (its record-id lock); a freed slot it refuses is passed over, a fresh slot (never
    /// used) is taken whatever it says. `log(rid)` runs under the same latch once the record
    /// is in place and returns the LSN to stamp; `format(page, image)` logs a newly
    /// allocated page's image and returns the LSN to stamp on it.
    pub fn insert(
        &self,
        row: &[u8],
        stats: &Stats,
        mut claim: impl FnMut(Rid, bool) -> bool,
        log: impl FnOnce(Rid) -> Option<u64>,
        mut format: impl FnMut(PageNo, &[u8]) -> Option<u64>,
    ) -> Rid {
        debug_assert_eq!(row.len(), self.row_len);
        // Pages with free slots first, in page order.
        let mut after = 0;
        loop {
            let candidate = self.fsm.read(stats).pages.range(after + 1..).next().copied();
            let Some(no) = candidate else { break };
            after = no;
            let mut page = self.store.write(no, stats);
            let free = (0..hdr::count(&page)).find(|&s| {
                let at = hdr::slot(&page, s);
                at & FREE != 0 && claim(Rid { page: no, slot: s as u16 }, false)
            });
            if let Some(slot) = free {
                let at = hdr::slot(&page, slot) & !FREE;
                page[at..at + self.row_len].copy_from_slice(row);
                hdr::set_slot(&mut page, slot, at);
                let rid = Rid { page: no, slot: slot as u16 };
                if let Some(lsn) = log(rid) {
                    hdr::set_lsn(&mut page, lsn);
                }
                return rid;
            }
            drop(page);
            self.fsm.write(stats).pages.remove(&no);
        }
        // A fresh slot on the last page, else a new page.
        loop {
            let last = self.fsm.read(stats).last;
            let mut page = self.store.write(last, stats);
            if hdr::has_room(&page, self.row_len) {
                let slot = hdr::count(&page);
                let rid = Rid { page: last, slot: slot as u16 };
                claim(rid, true);
                let at = hdr::alloc_cell(&mut page, self.row_len);
                page[at..at + self.row_len].copy_from_slice(row);
                hdr::set_slot(&mut page, slot, at);
                hdr::set_count(&mut page, slot + 1);
                if let Some(lsn) = log(rid) {
                    hdr::set_lsn(&mut page, lsn);
                }
                return rid;
            }
            drop(page);
            let mut fsm = self.fsm.write(stats);
            if fsm.last == last {
                let (no, mut fresh) = self.store.allocate(stats);
                hdr::init(&mut fresh, KIND_HEAP, 0);
                if let Some(lsn) = format(no, &fresh) {
                    hdr::set_lsn(&mut fresh, lsn);
                }
                fsm.last = no;
            }
        }
    }

    /// Calls `f(row, page)` with the live record `rid` under its page's shared latch.
    pub fn read<R>(&self, rid: Rid, stats: &Stats, f: impl FnOnce(&[u8], PageNo) -> R) -> Option<R> {
        if rid.page == 0 || rid.page > self.store.pages() {
            return None;
        }
        let page = self.store.read(rid.page, stats);
        let at = Self::live(&page, rid.slot as usize)?;
        Some(f(&page[at..at + self.row_len], rid.page))
    }

    /// Calls `f(row, page)` with the live record `rid` writable under its page's exclusive
    /// latch; `f` returns its result and the LSN to stamp, if any.
    pub fn update<R>(
        &self,
        rid: Rid,
        stats: &Stats,
        f: impl FnOnce(&mut [u8], PageNo) -> (R, Option<u64>),
    ) -> Option<R> {
        if rid.page == 0 || rid.page > self.store.pages() {
            return None;
        }
        let mut page = self.store.write(rid.page, stats);
        let at = Self::live(&page, rid.slot as usize)?;
        let (r, lsn) = f(&mut page[at..at + self.row_len], rid.page);
        if let Some(lsn) = lsn {
            hdr::set_lsn(&mut page, lsn);
        }
        Some(r)
    }

    /// Frees the live record `rid` (its cell stays for the slot's next record);
    /// `f(before, page)` runs under the page's exclusive latch first and returns its result
    /// and the LSN to stamp. The page is not offered to the free-space map: the caller does
    /// that once the freeing transaction committed ([`HeapFile::release`]).
    pub fn delete<R>(&self, rid: Rid, stats: &Stats, f: impl FnOnce(&[u8], PageNo) -> (R, Option<u64>)) -> Option<R> {
        if rid.page == 0 || rid.page > self.store.pages() {
            return None;
        }
        let mut page = self.store.write(rid.page, stats);
        let at = Self::live(&page, rid.slot as usize)?;
        let (r, lsn) = f(&page[at..at + self.row_len], rid.page);
        hdr::set_slot(&mut page, rid.slot as usize, at | FREE);
        if let Some(lsn) = lsn {
            hdr::set_lsn(&mut page, lsn);
        }
        Some(r)
    }

    /// Offers `page` to the free-space map (a slot on it was freed for good).
    pub fn release(&self, page: PageNo, stats: &Stats) {
        self.fsm.write(stats).pages.insert(page);
    }

    /// Places `row` at `rid`, which must be free or the next fresh slot of its page: the
    /// redo of a creation, and the undo of a delete (whose record-id lock kept the slot
    /// free). `lsn` (redo) skips a change the page LSN shows applied; `stamp(page)` gives the
    /// LSN to stamp.
    pub fn place(
        &self,
        rid: Rid,
        row: &[u8],
        lsn: Option<u64>,
        stats: &Stats,
        stamp: impl FnOnce(PageNo) -> Option<u64>,
    ) -> Result<(), HeapError> {
        if row.len() != self.row_len {
            return Err("heap record width");
        }
        let Some(mut page) = self.store.write_logged(rid.page, KIND_HEAP, lsn, stats)? else { return Ok(()) };
        let slot = rid.slot as usize;
        let count = hdr::count(&page);
        let at = if slot < count {
            let at = hdr::slot(&page, slot);
            if at & FREE == 0 {
                return Err("heap record id already holds a record");
            }
            hdr::set_slot(&mut page, slot, at & !FREE);
            at & !FREE
        } else if slot == count && hdr::has_room(&page, self.row_len) {
            let at = hdr::alloc_cell(&mut page, self.row_len);
            hdr::set_slot(&mut page, slot, at);
            hdr::set_count(&mut page, slot + 1);
            at
        } else {
            return Err("heap record id is not the page's next slot");
        };
        page[at..at + self.row_len].copy_from_slice(row);
        if let Some(l) = stamp(rid.page) {
            hdr::set_lsn(&mut page, l);
        }
        let last = &mut self.fsm.write(stats).last;
        *last = (*last).max(rid.page);
        Ok(())
    }

    /// Writes `row` over the live record `rid` (the redo of an update, and its undo), skipped
    /// when `lsn` shows it applied.
    pub fn restore(
        &self,
        rid: Rid,
        row: &[u8],
        lsn: Option<u64>,
        stats: &Stats,
        stamp: impl FnOnce(PageNo) -> Option<u64>,
    ) -> Result<(), HeapError> {
        if row.len() != self.row_len {
            return Err("heap record width");
        }
        let Some(mut page) = self.store.write_logged(rid.page, KIND_HEAP, lsn, stats)? else { return Ok(()) };
        let at = Self::live(&page, rid.slot as usize).ok_or("restore of a heap record id that holds no record")?;
        page[at..at + self.row_len].copy_from_slice(row);
        if let Some(l) = stamp(rid.page) {
            hdr::set_lsn(&mut page, l);
        }
        Ok(())
    }

    /// Frees `rid` (the redo of a delete, and the undo of a creation) and offers its page to
    /// the free-space map; skipped when `lsn` shows it applied.
    pub fn free(
        &self,
        rid: Rid,
        lsn: Option<u64>,
        stats: &Stats,
        stamp: impl FnOnce(PageNo) -> Option<u64>,
    ) -> Result<(), HeapError> {
        {
            let Some(mut page) = self.store.write_logged(rid.page, KIND_HEAP, lsn, stats)? else { return Ok(()) };
            let at = Self::live(&page, rid.slot as usize).ok_or("free of a heap record id that holds no record")?;
            hdr::set_slot(&mut page, rid.slot as usize, at | FREE);
            if let Some(l) = stamp(rid.page) {
                hdr::set_lsn(&mut page, l);
            }
        }
        self.release(rid.page, stats);
        Ok(())
    }

    /// Visits live records in file order (one page's records copied out per latch hold).
    pub fn for_each(&self, stats: &Stats, mut f: impl FnMut(&[u8])) {
        let mut batch = Vec::new();
        for no in 1..=self.store.pages() {
            batch.clear();
            {
                let page = self.store.read(no, stats);
                for s in 0..hdr::count(&page) {
                    if let Some(at) = Self::live(&page, s) {
                        batch.extend_from_slice(&page[at..at + self.row_len]);
                    }
                }
            }
            batch.chunks_exact(self.row_len).for_each(&mut f);
        }
    }

    /// Rebuilds the free-space map from the pages (at open, after the snapshot load and
    /// restart recovery, when no transaction runs: every free slot is free for good).
    pub fn rebuild_free_space(&self, stats: &Stats) {
        let mut pages = BTreeSet::new();
        let mut last = 1;
        for no in 1..=self.store.pages() {
            let page = self.store.read(no, stats);
            if hdr::kind(&page) != KIND_HEAP {
                continue; // allocated by redo for a later page's sake, never formatted
            }
            last = no;
            if (0..hdr::count(&page)).any(|s| hdr::slot(&page, s) & FREE != 0) {
                pages.insert(no);
            }
        }
        *self.fsm.write(stats) = FreeSpace { pages, last };
    }
}

const _: () = assert!(HEADER_BYTES > 0, "slot offset 0 is never a cell");
