//! Heap files: HISTORY's records, which have no key (TPC-C clause 1.3), appended into a chain
//! of slotted pages.
//!
//! Owns: append (under the file's tail latch, then the tail page's latch), placement at a
//! given record id for redo, tombstoning for undo, and visiting records in file order.
//!
//! Guarantees: record ids `(page, slot)` are assigned in append order and never reused (an
//! undone append leaves a tombstone: slot offset 0), so visiting order is append order of
//! the surviving records, and redo in log order re-creates the same record ids.

use super::latch::{Latch, LatchMode};
use super::page::{hdr, PageNo, Store, HEADER_BYTES, KIND_HEAP};
use super::stats::Stats;

/// A record id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rid {
    pub page: PageNo,
    pub slot: u16,
}

impl Rid {
    /// The rid packed for lock names and log records.
    pub fn pack(self) -> u64 {
        ((self.page as u64) << 16) | self.slot as u64
    }
    pub fn unpack(v: u64) -> Rid {
        Rid { page: (v >> 16) as PageNo, slot: v as u16 }
    }
}

/// A heap file in its own store.
pub(crate) struct HeapFile {
    store: Store,
    row_len: usize,
    /// The last page of the chain.
    tail: Latch<PageNo>,
}

impl HeapFile {
    pub fn new(store: Store, row_len: usize, latch: LatchMode, stats: &Stats) -> HeapFile {
        let (no, mut p) = store.allocate(stats);
        hdr::init(&mut p, KIND_HEAP, 0);
        drop(p);
        HeapFile { store, row_len, tail: Latch::new(no, latch) }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Appends `row`; `log(rid)` runs under the page's exclusive latch and returns the LSN to
    /// stamp.
    pub fn append(&self, row: &[u8], stats: &Stats, log: impl FnOnce(Rid) -> Option<u64>) -> Rid {
        let mut tail = self.tail.write(stats);
        let mut page = self.store.write(*tail, stats);
        if !hdr::has_room(&page, self.row_len) {
            let (no, mut fresh) = self.store.allocate(stats);
            hdr::init(&mut fresh, KIND_HEAP, 0);
            hdr::set_next(&mut page, no);
            drop(page);
            *tail = no;
            page = fresh;
        }
        let slot = hdr::count(&page);
        let at = hdr::alloc_cell(&mut page, self.row_len);
        page[at..at + self.row_len].copy_from_slice(row);
        hdr::set_slot(&mut page, slot, at);
        hdr::set_count(&mut page, slot + 1);
        let rid = Rid { page: *tail, slot: slot as u16 };
        if let Some(lsn) = log(rid) {
            hdr::set_lsn(&mut page, lsn);
        }
        rid
    }

    /// Redo of an append: places `row` at `rid`, which must be the next record id (log order
    /// is append order). Skipped when the page LSN shows the change applied.
    pub fn place(&self, rid: Rid, row: &[u8], lsn: u64, stats: &Stats) -> Result<(), &'static str> {
        let mut tail = self.tail.write(stats);
        if rid.page == *tail + 1 {
            let mut old = self.store.write(*tail, stats);
            let (no, mut fresh) = self.store.allocate(stats);
            hdr::init(&mut fresh, KIND_HEAP, 0);
            hdr::set_next(&mut old, no);
            *tail = no;
        }
        if rid.page != *tail {
            return Err("heap append is not at the tail");
        }
        let mut page = self.store.write(rid.page, stats);
        if hdr::lsn(&page) >= lsn {
            return Ok(());
        }
        if hdr::count(&page) != rid.slot as usize || !hdr::has_room(&page, self.row_len) {
            return Err("heap append is not the next slot");
        }
        let at = hdr::alloc_cell(&mut page, self.row_len);
        page[at..at + self.row_len].copy_from_slice(row);
        hdr::set_slot(&mut page, rid.slot as usize, at);
        hdr::set_count(&mut page, rid.slot as usize + 1);
        hdr::set_lsn(&mut page, lsn);
        Ok(())
    }

    /// Undo of an append: tombstones `rid` (the cell is not reused: record ids stay unique).
    pub fn kill(&self, rid: Rid, stats: &Stats, lsn: Option<u64>) -> Result<(), &'static str> {
        if rid.page == 0 || rid.page > self.store.pages() {
            return Err("heap record id out of range");
        }
        let mut page = self.store.write(rid.page, stats);
        if rid.slot as usize >= hdr::count(&page) || hdr::slot(&page, rid.slot as usize) == 0 {
            return Err("heap record id not live");
        }
        hdr::set_slot(&mut page, rid.slot as usize, 0);
        if let Some(lsn) = lsn {
            hdr::set_lsn(&mut page, lsn);
        }
        Ok(())
    }

    /// Visits live records in append order (one page's records copied out per latch hold).
    pub fn for_each(&self, stats: &Stats, mut f: impl FnMut(&[u8])) {
        let mut batch = Vec::new();
        let mut no = 1;
        while no != 0 {
            batch.clear();
            {
                let page = self.store.read(no, stats);
                for i in 0..hdr::count(&page) {
                    let at = hdr::slot(&page, i);
                    if at != 0 {
                        batch.extend_from_slice(&page[at..at + self.row_len]);
                    }
                }
                no = hdr::next(&page);
            }
            batch.chunks_exact(self.row_len).for_each(&mut f);
        }
    }
}

const _: () = assert!(HEADER_BYTES > 0, "slot offset 0 marks a tombstone");

impl HeapFile {
    /// After a snapshot load: the tail is the last page (pages are allocated in chain order).
    pub fn reset_tail(&self, stats: &Stats) {
        *self.tail.write(stats) = self.store.pages();
    }
}
