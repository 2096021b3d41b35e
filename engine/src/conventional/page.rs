//! Pages and where they live: the buffer pool (frames, a page table from page id to frame,
//! fix/unfix with pin counts) or, with the buffer-pool switch off, plain heap memory reached
//! by direct index.
//!
//! Owns: the page header layout shared by B+tree and heap pages, the frame arena, the
//! [`BufferPool`] and the per-file [`Store`] that hands out fixed and latched pages.
//!
//! Page layout (all integers little-endian):
//!
//! ```text
//! 0..8    page LSN (u64): LSN of the last logged change applied to the page
//! 8..10   slot count (u16)
//! 10..12  free_top (u16): start of the cell area, which grows down from the page end
//! 12..14  free list (u16): offset of the first freed cell (0 = none); a freed cell's first
//!         two bytes hold the next freed cell's offset
//! 14      kind (u8): 1 B+tree leaf, 2 B+tree internal, 3 heap page
//! 15      level (u8): 0 for leaves
//! 16..20  next page (u32): right sibling / next heap page (0 = none)
//! 20..24  leftmost child (u32, internal nodes)
//! 24..32  reserved
//! 32..    slot directory: one u16 cell offset per slot (B+tree pages keep it in key order;
//!         heap pages in append order, 0 = deleted)
//! ...     free space
//! ..end   fixed-width cells (key bytes then value bytes; heap cells are record bytes)
//! ```
//!
//! Guarantees: the database is memory-resident: pages are allocated zeroed and never evicted
//! or written back (the log is the only I/O; checkpoints copy pages out). A fixed page is
//! pinned until its [`Fixed`] drops; latches are taken only on fixed pages.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use super::latch::{Latch, ReadGuard, WriteGuard};
use super::stats::{bump, Stats};

/// A page number within its file (store); 0 is "no page".
pub(crate) type PageNo = u32;
pub(crate) const NO_PAGE: PageNo = 0;
pub(crate) const HEADER_BYTES: usize = 32;

pub(crate) const KIND_LEAF: u8 = 1;
pub(crate) const KIND_INTERNAL: u8 = 2;
pub(crate) const KIND_HEAP: u8 = 3;

/// Pages per arena chunk (allocated together, zeroed lazily by the OS).
const ARENA_CHUNK_PAGES: usize = 256;
/// Chunks per arena: 4M pages (32 GiB of 8 KiB pages) per store or buffer pool.
const ARENA_CHUNKS_MAX: usize = 1 << 14;
/// Page-table shards (each its own latch).
const PAGE_TABLE_SHARDS: usize = 64;

#[inline]
pub(crate) fn get_u16(p: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([p[at], p[at + 1]])
}
#[inline]
pub(crate) fn put_u16(p: &mut [u8], at: usize, v: u16) {
    p[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(crate) fn get_u32(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(p[at..at + 4].try_into().expect("4 bytes"))
}
#[inline]
pub(crate) fn put_u32(p: &mut [u8], at: usize, v: u32) {
    p[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Header field accessors.
pub(crate) mod hdr {
    use super::*;

    #[inline]
    pub fn lsn(p: &[u8]) -> u64 {
        u64::from_le_bytes(p[0..8].try_into().expect("8 bytes"))
    }
    #[inline]
    pub fn set_lsn(p: &mut [u8], lsn: u64) {
        p[0..8].copy_from_slice(&lsn.to_le_bytes());
    }
    #[inline]
    pub fn count(p: &[u8]) -> usize {
        get_u16(p, 8) as usize
    }
    #[inline]
    pub fn set_count(p: &mut [u8], n: usize) {
        put_u16(p, 8, u16::try_from(n).expect("slot count fits u16"));
    }
    #[inline]
    pub fn free_top(p: &[u8]) -> usize {
        get_u16(p, 10) as usize
    }
    #[inline]
    pub fn set_free_top(p: &mut [u8], v: usize) {
        put_u16(p, 10, u16::try_from(v).expect("offset fits u16"));
    }
    #[inline]
    pub fn free_list(p: &[u8]) -> usize {
        get_u16(p, 12) as usize
    }
    #[inline]
    pub fn set_free_list(p: &mut [u8], v: usize) {
        put_u16(p, 12, u16::try_from(v).expect("offset fits u16"));
    }
    #[inline]
    pub fn kind(p: &[u8]) -> u8 {
        p[14]
    }
    #[inline]
    pub fn level(p: &[u8]) -> u8 {
        p[15]
    }
    #[inline]
    pub fn next(p: &[u8]) -> PageNo {
        get_u32(p, 16)
    }
    #[inline]
    pub fn set_next(p: &mut [u8], v: PageNo) {
        put_u32(p, 16, v);
    }
    #[inline]
    pub fn leftmost(p: &[u8]) -> PageNo {
        get_u32(p, 20)
    }
    #[inline]
    pub fn set_leftmost(p: &mut [u8], v: PageNo) {
        put_u32(p, 20, v);
    }
    #[inline]
    pub fn slot(p: &[u8], i: usize) -> usize {
        get_u16(p, HEADER_BYTES + 2 * i) as usize
    }
    #[inline]
    pub fn set_slot(p: &mut [u8], i: usize, off: usize) {
        put_u16(p, HEADER_BYTES + 2 * i, u16::try_from(off).expect("offset fits u16"));
    }

    /// Formats an empty page (keeps the page LSN).
    pub fn init(p: &mut [u8], kind: u8, level: u8) {
        let lsn = lsn(p);
        p[..HEADER_BYTES].fill(0);
        set_lsn(p, lsn);
        p[14] = kind;
        p[15] = level;
        // 32 KiB pages: the end offset 32768 fits u16.
        set_free_top(p, p.len());
    }

    /// Whether one more cell of `cell_bytes` (plus its slot) fits.
    #[inline]
    pub fn has_room(p: &[u8], cell_bytes: usize) -> bool {
        let slots_end = HEADER_BYTES + 2 * (count(p) + 1);
        if free_list(p) != 0 {
            slots_end <= free_top(p)
        } else {
            slots_end + cell_bytes <= free_top(p)
        }
    }

    /// Takes a cell for a new entry (from the free list, else from free space); the caller
    /// has checked [`has_room`].
    pub fn alloc_cell(p: &mut [u8], cell_bytes: usize) -> usize {
        let head = free_list(p);
        if head != 0 {
            let next = get_u16(p, head) as usize;
            set_free_list(p, next);
            head
        } else {
            let at = free_top(p) - cell_bytes;
            set_free_top(p, at);
            at
        }
    }

    /// Returns a cell to the free list.
    pub fn free_cell(p: &mut [u8], at: usize) {
        let head = free_list(p);
        put_u16(p, at, u16::try_from(head).expect("offset fits u16"));
        set_free_list(p, at);
    }
}

/// A page's bytes (u64 words keep the header aligned).
pub(crate) struct PageBuf(Box<[u64]>);

impl PageBuf {
    fn zeroed(page_bytes: usize) -> PageBuf {
        PageBuf(vec![0u64; page_bytes / 8].into_boxed_slice())
    }
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.0)
    }
}

/// A frame (buffer pool) or a heap-memory page: the page latch, the pin count, the bytes.
pub(crate) struct Page {
    pub latch: Latch<PageBuf>,
    pin: AtomicU32,
}

/// Chunked, append-only page memory indexable without a lock.
pub(crate) struct Arena {
    chunks: Box<[OnceLock<Box<[Page]>>]>,
    page_bytes: usize,
    latching: bool,
}

impl Arena {
    fn new(page_bytes: usize, latching: bool) -> Arena {
        Arena { chunks: (0..ARENA_CHUNKS_MAX).map(|_| OnceLock::new()).collect(), page_bytes, latching }
    }

    #[inline]
    fn get(&self, idx: u32) -> &Page {
        let idx = idx as usize;
        let chunk = self.chunks[idx / ARENA_CHUNK_PAGES].get().expect("page allocated");
        &chunk[idx % ARENA_CHUNK_PAGES]
    }

    fn ensure(&self, idx: u32) -> &Page {
        let idx = idx as usize;
        assert!(idx / ARENA_CHUNK_PAGES < ARENA_CHUNKS_MAX, "page arena full ({idx} pages)");
        let chunk = self.chunks[idx / ARENA_CHUNK_PAGES].get_or_init(|| {
            (0..ARENA_CHUNK_PAGES)
                .map(|_| Page {
                    latch: Latch::new(PageBuf::zeroed(self.page_bytes), self.latching),
                    pin: AtomicU32::new(0),
                })
                .collect()
        });
        &chunk[idx % ARENA_CHUNK_PAGES]
    }
}

/// Multiplicative hashing of page ids for the page table.
#[derive(Default)]
pub(crate) struct PageIdHasher(u64);

impl Hasher for PageIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type PageTable = HashMap<u64, u32, BuildHasherDefault<PageIdHasher>>;

/// The buffer pool: frames, and a sharded page table from page id (file, page number) to
/// frame. Memory-resident: a new page takes a fresh frame; nothing is evicted.
pub(crate) struct BufferPool {
    frames: Arena,
    next_frame: AtomicU32,
    table: Box<[Latch<PageTable>]>,
}

impl BufferPool {
    pub fn new(page_bytes: usize, latching: bool) -> BufferPool {
        BufferPool {
            frames: Arena::new(page_bytes, latching),
            next_frame: AtomicU32::new(0),
            table: (0..PAGE_TABLE_SHARDS).map(|_| Latch::new(PageTable::default(), latching)).collect(),
        }
    }

    #[inline]
    fn shard(&self, pid: u64) -> &Latch<PageTable> {
        &self.table[(pid.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % PAGE_TABLE_SHARDS]
    }

    /// Looks the page up in the page table and pins its frame.
    #[inline]
    fn fix(&self, pid: u64, stats: &Stats) -> &Page {
        let frame = *self.shard(pid).read(stats).get(&pid).expect("page in the page table");
        let page = self.frames.get(frame);
        page.pin.fetch_add(1, Ordering::Relaxed);
        bump(&stats.fixes);
        page
    }

    /// Gives the new page a frame and enters it in the page table, pinned.
    fn allocate(&self, pid: u64, stats: &Stats) -> &Page {
        let frame = self.next_frame.fetch_add(1, Ordering::Relaxed);
        let page = self.frames.ensure(frame);
        page.pin.fetch_add(1, Ordering::Relaxed);
        bump(&stats.fixes);
        let previous = self.shard(pid).write(stats).insert(pid, frame);
        debug_assert!(previous.is_none(), "page {pid:#x} allocated twice");
        page
    }
}

enum Access {
    Pool(Arc<BufferPool>),
    Direct(Arena),
}

/// A pinned page; unpinned on drop.
pub(crate) struct Fixed<'a> {
    page: &'a Page,
    pinned: bool,
}

impl Drop for Fixed<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.pinned {
            let before = self.page.pin.fetch_sub(1, Ordering::Relaxed);
            debug_assert!(before > 0, "unfix of an unpinned frame");
        }
    }
}

/// A fixed page under a shared latch. Fields drop in order: unlatch, then unfix.
pub(crate) struct PageRead<'a> {
    guard: ReadGuard<'a, PageBuf>,
    _fix: Fixed<'a>,
}

impl std::ops::Deref for PageRead<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.guard.bytes()
    }
}

/// A fixed page under an exclusive latch. Fields drop in order: unlatch, then unfix.
pub(crate) struct PageWrite<'a> {
    guard: WriteGuard<'a, PageBuf>,
    _fix: Fixed<'a>,
}

impl std::ops::Deref for PageWrite<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.guard.bytes()
    }
}

impl std::ops::DerefMut for PageWrite<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        self.guard.bytes_mut()
    }
}

/// One file of pages (a B+tree or a heap file), numbered from 1.
pub(crate) struct Store {
    id: u16,
    next: AtomicU32,
    access: Access,
    page_bytes: usize,
}

impl Store {
    /// A store in `pool`, or in its own heap memory when `pool` is `None`.
    pub fn new(id: u16, pool: Option<&Arc<BufferPool>>, page_bytes: usize, latching: bool) -> Store {
        let access = match pool {
            Some(p) => Access::Pool(Arc::clone(p)),
            None => Access::Direct(Arena::new(page_bytes, latching)),
        };
        Store { id, next: AtomicU32::new(1), access, page_bytes }
    }

    #[inline]
    fn pid(&self, no: PageNo) -> u64 {
        ((self.id as u64) << 32) | no as u64
    }

    pub fn page_bytes(&self) -> usize {
        self.page_bytes
    }

    /// Pages allocated so far (numbered 1..=pages).
    pub fn pages(&self) -> PageNo {
        self.next.load(Ordering::Acquire) - 1
    }

    #[inline]
    fn fix(&self, no: PageNo, stats: &Stats) -> Fixed<'_> {
        debug_assert!(no != NO_PAGE && no <= self.pages(), "page {no} of store {} not allocated", self.id);
        match &self.access {
            Access::Pool(pool) => Fixed { page: pool.fix(self.pid(no), stats), pinned: true },
            Access::Direct(arena) => Fixed { page: arena.get(no), pinned: false },
        }
    }

    /// Fixes page `no` and latches it shared.
    #[inline]
    pub fn read(&self, no: PageNo, stats: &Stats) -> PageRead<'_> {
        let fix = self.fix(no, stats);
        PageRead { guard: fix.page.latch.read(stats), _fix: fix }
    }

    /// Fixes page `no` and latches it exclusive.
    #[inline]
    pub fn write(&self, no: PageNo, stats: &Stats) -> PageWrite<'_> {
        let fix = self.fix(no, stats);
        PageWrite { guard: fix.page.latch.write(stats), _fix: fix }
    }

    /// Allocates a new zeroed page, fixed and latched exclusive (nobody else can reach it yet).
    pub fn allocate(&self, stats: &Stats) -> (PageNo, PageWrite<'_>) {
        let no = self.next.fetch_add(1, Ordering::AcqRel);
        let fix = match &self.access {
            Access::Pool(pool) => Fixed { page: pool.allocate(self.pid(no), stats), pinned: true },
            Access::Direct(arena) => Fixed { page: arena.ensure(no), pinned: false },
        };
        (no, PageWrite { guard: fix.page.latch.write(stats), _fix: fix })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_pool_fixes_through_the_page_table_and_pins() {
        let pool = Arc::new(BufferPool::new(8192, true));
        let a = Store::new(1, Some(&pool), 8192, true);
        let b = Store::new(2, Some(&pool), 8192, true);
        let stats = Stats::default();
        for s in [&a, &b] {
            let (no, mut p) = s.allocate(&stats);
            assert_eq!(no, 1);
            hdr::init(&mut p, KIND_HEAP, 0);
            p[100] = s.id as u8;
        }
        assert_eq!(a.read(1, &stats)[100], 1);
        assert_eq!(b.read(1, &stats)[100], 2);
        let fixed = a.fix(1, &stats);
        assert_eq!(fixed.page.pin.load(Ordering::Relaxed), 1);
        drop(fixed);
        assert_eq!(stats.fixes.get(), 5);

        let direct = Store::new(3, None, 8192, true);
        let stats = Stats::default();
        direct.allocate(&stats);
        direct.read(1, &stats);
        assert_eq!(stats.fixes.get(), 0);
    }
}
