//! Pages and where they live: the buffer pool (frame control blocks, a page table from page
//! id to frame, fix/unfix with pin counts, a clock for replacement, write-back of dirty pages
//! to a page file) or, with the buffer-pool switch off, plain heap memory reached by direct
//! index.
//!
//! Owns: the page header layout shared by B+tree and heap pages, the frame arena, the
//! [`BufferPool`], where evicted pages go ([`Backing`]), and the per-file [`PageStore`] that hands
//! out fixed and latched pages.
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
//! The buffer manager does per call what Shore's does (the paper, Section 4.2: "buffer
//! manager"): a fix looks the page id up in its page-table shard under the shard's latch, pins
//! the frame there (so the clock cannot take it), sets the frame's reference bit and
//! returns; the caller latches the frame and checks that it still holds the page id it
//! asked for; a fix for writing marks the frame dirty; an unfix unpins. A page not in the
//! table is brought in by the miss path, one at a time (holding the clock hand): a free frame
//! if the pool has one, else the clock sweeps frames, skipping pinned ones and clearing
//! reference bits, and takes the first unpinned, unreferenced frame, removing its page from
//! the page table under that shard's latch (a pin is only ever taken under the same latch,
//! so none can slip in), writing it back to its [`Backing`] page file first if it is dirty;
//! then the page is read from its page file (or zeroed, for a new page) and entered in the
//! table, pinned.
//!
//! Guarantees: by default the pool is unbounded — a new page gets a fresh frame and nothing
//! is ever evicted — so the database is memory-resident, as in the paper, and the log is the
//! only I/O on the commit path. With a bound (`Config::buffer_pool_bytes`), pages beyond it
//! are evicted and read back; the page files are scratch space, not durable state (restart
//! recovery rebuilds every page from the checkpoint and the log, docs/design.md §7), so they
//! are unnamed (unlinked at creation) and vanish with the process; a failed write-back or
//! read-back is fatal to the process, like a failed page write in a disk-based system, and
//! restart recovery then restores the database. A fixed page is pinned until its [`Fixed`]
//! drops; latches are taken only on fixed pages, and released before the unpin.

use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::copy::StoreCopy;
use super::latch::{Latch, LatchMode, ReadGuard, WriteGuard};
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
/// Fewest frames a bounded pool may have per worker: a B+tree split pins its latched path
/// and two new pages, a scan one leaf and one heap page, a record creation one heap page and
/// a new one; the rest is room to evict.
pub const BUFFER_POOL_FRAMES_PER_WORKER_MIN: u64 = 64;
/// A frame holding no page.
const NO_PID: u64 = u64::MAX;

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

/// What the pages of a store hold, for [`hdr::verify`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum PageShape {
    /// Heap pages of fixed-width records.
    Heap { row_len: usize },
    /// B+tree pages: leaf cells (key and value) and internal cells (key and child page
    /// number); `pages` is the store's page count (children and siblings lie within it).
    Tree { key_len: usize, leaf_cell: usize, internal_cell: usize, pages: PageNo },
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

    /// Appends `p`'s image, compacted: the header and slot array, then the cell area from
    /// the free-space top on (the unused gap between them is left out; it is zeros or dead
    /// bytes no slot points into). Self-describing: the header says where the gap was.
    pub fn image(p: &[u8], out: &mut Vec<u8>) {
        let slots_end = HEADER_BYTES + 2 * count(p);
        out.extend_from_slice(&p[..slots_end]);
        out.extend_from_slice(&p[free_top(p).max(slots_end)..]);
    }

    /// Installs an image made by [`image`] over `p` (the redo of a page's structure
    /// modification or allocation); `Err` when the image does not describe a page this size.
    pub fn install_image(p: &mut [u8], image: &[u8]) -> Result<(), &'static str> {
        if image.len() < HEADER_BYTES {
            return Err("page image shorter than a page header");
        }
        let slots_end = HEADER_BYTES + 2 * count(image);
        let top = free_top(image).max(slots_end);
        if top > p.len() || image.len() != slots_end + (p.len() - top) {
            return Err("page image does not fit the page size");
        }
        p[..slots_end].copy_from_slice(&image[..slots_end]);
        p[slots_end..top].fill(0);
        p[top..].copy_from_slice(&image[slots_end..]);
        Ok(())
    }

    /// Checks that `p` is a well-formed page of `shape` before it is trusted: a page read
    /// from a checkpoint or installed from a logged image passed its checksum, but a
    /// checksum says only that the bytes are the ones written (or forged whole), not that
    /// they describe a page the code can walk. Refuses a kind the store does not hold, a slot
    /// array past the free-space top, a cell or free-list entry outside the page, and (B+tree
    /// internal pages) a child that is not a page of the store (found by the `wal_recovery`
    /// fuzz target, docs/design.md §13). An all-zero page (allocated, never formatted) passes.
    pub fn verify(p: &[u8], shape: &PageShape) -> Result<(), &'static str> {
        if p.len() < HEADER_BYTES {
            return Err("page shorter than its header");
        }
        if p[..HEADER_BYTES].iter().all(|&b| b == 0) {
            return Ok(());
        }
        let (cell, heap) = match (kind(p), shape) {
            (KIND_HEAP, PageShape::Heap { row_len }) => (*row_len, true),
            (KIND_LEAF, PageShape::Tree { leaf_cell, .. }) => (*leaf_cell, false),
            (KIND_INTERNAL, PageShape::Tree { internal_cell, .. }) => (*internal_cell, false),
            _ => return Err("page of a kind its store does not hold"),
        };
        let slots_end = HEADER_BYTES + 2 * count(p);
        let top = free_top(p);
        if slots_end > top || top > p.len() {
            return Err("slot array past the free-space top, or the top past the page");
        }
        let in_cells = |at: usize| at >= top && at + cell <= p.len();
        for i in 0..count(p) {
            let at = if heap { slot(p, i) & !0x8000 } else { slot(p, i) };
            if !(in_cells(at) || heap && at == 0) {
                return Err("a slot names a cell outside the page's cell area");
            }
        }
        let head = free_list(p);
        if head != 0 && !(in_cells(head) && head + 2 <= p.len()) {
            return Err("the free list starts outside the page's cell area");
        }
        if let PageShape::Tree { key_len, pages, .. } = shape {
            if kind(p) == KIND_INTERNAL {
                let child_ok = |c: PageNo| c != NO_PAGE && c <= *pages;
                if !child_ok(leftmost(p)) {
                    return Err("an internal page's leftmost child is not a page of its store");
                }
                for i in 0..count(p) {
                    if !child_ok(get_u32(p, slot(p, i) + key_len)) {
                        return Err("an internal page's child is not a page of its store");
                    }
                }
            }
            if next(p) > *pages {
                return Err("a page's right sibling is not a page of its store");
            }
        }
        Ok(())
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

/// A frame control block and its frame (buffer pool), or a heap-memory page (the pool
/// switched off, where only the latch and the bytes are used).
pub(crate) struct Frame {
    /// The page latch; it guards the bytes.
    pub latch: Latch<PageBuf>,
    /// The page id the frame holds ([`NO_PID`]: none). Written only on the miss path.
    pid: AtomicU64,
    /// Fixes outstanding; taken only under the page's page-table shard latch.
    pin: AtomicU32,
    /// Changed since it was last read from or written to its page file.
    dirty: AtomicBool,
    /// The clock's reference bit: set by every fix, cleared by the sweeping hand.
    referenced: AtomicBool,
}

impl Frame {
    fn new(page_bytes: usize, latch: LatchMode) -> Frame {
        Frame {
            latch: Latch::new(PageBuf::zeroed(page_bytes), latch),
            pid: AtomicU64::new(NO_PID),
            pin: AtomicU32::new(0),
            dirty: AtomicBool::new(false),
            referenced: AtomicBool::new(false),
        }
    }
}

/// Chunked, append-only frame memory indexable without a lock.
pub(crate) struct Arena {
    chunks: Box<[OnceLock<Box<[Frame]>>]>,
    page_bytes: usize,
    latch: LatchMode,
}

impl Arena {
    fn new(page_bytes: usize, latch: LatchMode) -> Arena {
        Arena { chunks: (0..ARENA_CHUNKS_MAX).map(|_| OnceLock::new()).collect(), page_bytes, latch }
    }

    #[inline]
    fn get(&self, idx: u32) -> &Frame {
        let idx = idx as usize;
        let chunk = self.chunks[idx / ARENA_CHUNK_PAGES].get().expect("page allocated");
        &chunk[idx % ARENA_CHUNK_PAGES]
    }

    fn ensure(&self, idx: u32) -> &Frame {
        let idx = idx as usize;
        assert!(idx / ARENA_CHUNK_PAGES < ARENA_CHUNKS_MAX, "page arena full ({idx} pages)");
        let chunk = self.chunks[idx / ARENA_CHUNK_PAGES]
            .get_or_init(|| (0..ARENA_CHUNK_PAGES).map(|_| Frame::new(self.page_bytes, self.latch)).collect());
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

/// The store id of a page id.
fn store_of(pid: u64) -> u16 {
    (pid >> 32) as u16
}

/// The page number of a page id.
fn page_of(pid: u64) -> PageNo {
    pid as PageNo
}

/// Where a bounded buffer pool writes evicted pages back and reads them again: page files,
/// one per store (see the module documentation: scratch space, unnamed).
pub(crate) enum Backing {
    /// Unnamed files in this directory (the database's), created on the first write-back.
    Dir { dir: PathBuf, files: Mutex<HashMap<u16, File>> },
    /// In memory (a database on an in-memory medium).
    Memory(Mutex<HashMap<u64, Box<[u8]>>>),
}

/// Files made so far for page files (their names only live for an instant).
static PAGE_FILES_MADE: AtomicU64 = AtomicU64::new(0);

impl Backing {
    pub fn dir(dir: PathBuf) -> Backing {
        Backing::Dir { dir, files: Mutex::new(HashMap::new()) }
    }

    pub fn memory() -> Backing {
        Backing::Memory(Mutex::new(HashMap::new()))
    }

    fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a fresh page file for `store` in `dir`, unlinked at once so that nothing of it
    /// outlives the process.
    fn page_file(dir: &std::path::Path, store: u16) -> std::io::Result<File> {
        std::fs::create_dir_all(dir)?;
        let n = PAGE_FILES_MADE.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(".pages-{}-{n}-{store}", std::process::id()));
        let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        std::fs::remove_file(&path)?;
        Ok(file)
    }

    /// Writes page `pid` back. A failure is fatal (see the module documentation).
    fn write(&self, pid: u64, bytes: &[u8]) {
        match self {
            Backing::Dir { dir, files } => {
                let mut files = Self::lock(files);
                let store = store_of(pid);
                let file = match files.entry(store) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(v) => {
                        let f = Self::page_file(dir, store).unwrap_or_else(|e| {
                            panic!("buffer pool: cannot create a page file in {}: {e}", dir.display())
                        });
                        v.insert(f)
                    }
                };
                let offset = u64::from(page_of(pid) - 1) * bytes.len() as u64;
                file.write_all_at(bytes, offset).unwrap_or_else(|e| {
                    panic!(
                        "buffer pool: cannot write page {} of store {store} back to its page file: {e}",
                        page_of(pid)
                    )
                });
            }
            Backing::Memory(pages) => {
                Self::lock(pages).insert(pid, bytes.into());
            }
        }
    }

    /// Reads page `pid` into `out`; false when it was never written back.
    fn read(&self, pid: u64, out: &mut [u8]) -> bool {
        match self {
            Backing::Dir { files, .. } => {
                let files = Self::lock(files);
                let Some(file) = files.get(&store_of(pid)) else { return false };
                let offset = u64::from(page_of(pid) - 1) * out.len() as u64;
                match file.read_exact_at(out, offset) {
                    Ok(()) => true,
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => false,
                    Err(e) => panic!(
                        "buffer pool: cannot read page {} of store {} from its page file: {e}",
                        page_of(pid),
                        store_of(pid)
                    ),
                }
            }
            Backing::Memory(pages) => match Self::lock(pages).get(&pid) {
                Some(p) => {
                    out.copy_from_slice(p);
                    true
                }
                None => false,
            },
        }
    }
}

/// How the miss path fills a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    /// An existing page: read it from its page file.
    Read,
    /// A new page: zeroes.
    Zero,
}

/// The buffer pool: frame control blocks and frames, a sharded page table from page id
/// (file, page number) to frame, the clock, and the page files; see the module
/// documentation.
pub(crate) struct BufferPool {
    frames: Arena,
    /// Frames handed out so far; changed only under the clock hand.
    used: AtomicU32,
    /// Most frames; `None`: unbounded (a fresh frame per page, nothing evicted).
    capacity: Option<u32>,
    table: Box<[Latch<PageTable>]>,
    /// The clock hand (a frame index). Held for the whole miss path, which it serialises.
    clock: Mutex<u32>,
    backing: Backing,
    /// Pages read back from page files.
    pub reads: AtomicU64,
    /// Dirty pages written back to page files.
    pub writes: AtomicU64,
    /// Pages evicted (clean or dirty).
    pub evictions: AtomicU64,
}

impl BufferPool {
    /// A pool of at most `capacity` frames (`None`: unbounded) writing evicted pages to
    /// `backing`.
    pub fn new(page_bytes: usize, latch: LatchMode, capacity: Option<u32>, backing: Backing) -> BufferPool {
        BufferPool {
            frames: Arena::new(page_bytes, latch),
            used: AtomicU32::new(0),
            capacity,
            table: (0..PAGE_TABLE_SHARDS).map(|_| Latch::new(PageTable::default(), latch)).collect(),
            clock: Mutex::new(0),
            backing,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    #[inline]
    fn shard(&self, pid: u64) -> &Latch<PageTable> {
        &self.table[(pid.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % PAGE_TABLE_SHARDS]
    }

    /// Looks `pid` up and, when present, pins its frame under the shard latch.
    #[inline]
    fn lookup(&self, pid: u64, stats: &Stats) -> Option<&Frame> {
        let shard = self.shard(pid).read(stats);
        let &f = shard.get(&pid)?;
        let frame = self.frames.get(f);
        frame.pin.fetch_add(1, Ordering::Acquire);
        frame.referenced.store(true, Ordering::Relaxed);
        Some(frame)
    }

    /// Fixes page `pid`: pinned, through the page table, brought in on a miss.
    #[inline]
    fn fix(&self, pid: u64, stats: &Stats) -> &Frame {
        bump(&stats.fixes);
        match self.lookup(pid, stats) {
            Some(frame) => frame,
            None => self.bring_in(pid, Fill::Read, stats),
        }
    }

    /// Gives the new page `pid` a frame, zeroed, entered in the page table, pinned.
    fn allocate(&self, pid: u64, stats: &Stats) -> &Frame {
        bump(&stats.fixes);
        self.bring_in(pid, Fill::Zero, stats)
    }

    fn hand(&self) -> MutexGuard<'_, u32> {
        self.clock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The miss path (see the module documentation).
    #[cold]
    fn bring_in(&self, pid: u64, fill: Fill, stats: &Stats) -> &Frame {
        let mut hand = self.hand();
        if fill == Fill::Read {
            // Another thread may have brought the page in while this one waited for the hand.
            if let Some(frame) = self.lookup(pid, stats) {
                return frame;
            }
        }
        let f = self.victim(&mut hand, stats);
        let frame = self.frames.get(f);
        {
            // Unpinned and in no page table: nobody else can reach the frame.
            let mut page = frame.latch.write(stats);
            match fill {
                Fill::Zero => page.bytes_mut().fill(0),
                Fill::Read => {
                    if !self.backing.read(pid, page.bytes_mut()) {
                        panic!(
                            "buffer pool: page {} of store {} is neither in the pool nor in its page file",
                            page_of(pid),
                            store_of(pid)
                        );
                    }
                    self.reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        frame.pid.store(pid, Ordering::Relaxed);
        frame.dirty.store(fill == Fill::Zero, Ordering::Relaxed);
        frame.referenced.store(true, Ordering::Relaxed);
        frame.pin.store(1, Ordering::Release);
        let previous = self.shard(pid).write(stats).insert(pid, f);
        debug_assert!(previous.is_none(), "page {pid:#x} brought in twice");
        frame
    }

    /// A frame for the miss path, unpinned and in no page table: a free one, else the
    /// clock's choice, written back first if dirty. Called holding the hand.
    fn victim(&self, hand: &mut u32, stats: &Stats) -> u32 {
        let used = self.used.load(Ordering::Relaxed);
        if self.capacity.is_none_or(|c| used < c) {
            self.used.store(used + 1, Ordering::Relaxed);
            self.frames.ensure(used);
            return used;
        }
        let capacity = self.capacity.expect("a full pool is bounded");
        loop {
            // Two sweeps: the first may only clear reference bits.
            for _ in 0..2 * capacity {
                let f = *hand;
                *hand = (f + 1) % capacity;
                let frame = self.frames.get(f);
                if frame.pin.load(Ordering::Acquire) != 0 || frame.referenced.swap(false, Ordering::Relaxed) {
                    continue;
                }
                let old = frame.pid.load(Ordering::Relaxed);
                {
                    let mut shard = self.shard(old).write(stats);
                    if frame.pin.load(Ordering::Acquire) != 0 {
                        continue;
                    }
                    shard.remove(&old);
                }
                self.evictions.fetch_add(1, Ordering::Relaxed);
                if frame.dirty.swap(false, Ordering::Relaxed) {
                    let page = frame.latch.read(stats);
                    self.backing.write(old, page.bytes());
                    self.writes.fetch_add(1, Ordering::Relaxed);
                }
                frame.pid.store(NO_PID, Ordering::Relaxed);
                return f;
            }
            // Every frame pinned: the other workers' fixes end soon (the pool holds at least
            // `BUFFER_POOL_FRAMES_PER_WORKER_MIN` frames per worker).
            std::thread::yield_now();
        }
    }

    /// Frames in use.
    pub fn frames_used(&self) -> u32 {
        self.used.load(Ordering::Relaxed)
    }
}

enum Access {
    Pool(Arc<BufferPool>),
    Direct(Arena),
}

/// A pinned page; unpinned on drop.
pub(crate) struct Fixed<'a> {
    frame: &'a Frame,
    pinned: bool,
}

impl Drop for Fixed<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.pinned {
            let before = self.frame.pin.fetch_sub(1, Ordering::Release);
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
pub(crate) struct PageStore {
    id: u16,
    next: AtomicU32,
    access: Access,
    page_bytes: usize,
    /// The copy-on-write hook of an image copy under way ([`super::copy`]): disarmed (one
    /// relaxed load in [`PageStore::write`]) when none is.
    copy: StoreCopy,
}

impl PageStore {
    /// A store in `pool`, or in its own heap memory when `pool` is `None`.
    pub fn new(id: u16, pool: Option<&Arc<BufferPool>>, page_bytes: usize, latch: LatchMode) -> PageStore {
        let access = match pool {
            Some(p) => Access::Pool(Arc::clone(p)),
            None => Access::Direct(Arena::new(page_bytes, latch)),
        };
        PageStore { id, next: AtomicU32::new(1), access, page_bytes, copy: StoreCopy::default() }
    }

    #[inline]
    fn pid(&self, no: PageNo) -> u64 {
        ((self.id as u64) << 32) | no as u64
    }

    pub fn page_bytes(&self) -> usize {
        self.page_bytes
    }

    /// The store id (its page ids' high half, its lock names').
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Pages allocated so far (numbered 1..=pages).
    pub fn pages(&self) -> PageNo {
        self.next.load(Ordering::Acquire) - 1
    }

    /// The store's copy-on-write hook for image copies ([`super::copy`]).
    pub(crate) fn copy(&self) -> &StoreCopy {
        &self.copy
    }

    #[inline]
    fn fix(&self, no: PageNo, stats: &Stats) -> Fixed<'_> {
        debug_assert!(no != NO_PAGE && no <= self.pages(), "page {no} of store {} not allocated", self.id);
        match &self.access {
            Access::Pool(pool) => Fixed { frame: pool.fix(self.pid(no), stats), pinned: true },
            Access::Direct(arena) => Fixed { frame: arena.get(no), pinned: false },
        }
    }

    /// The page-id check after latching (Shore's): the latched frame holds the page asked
    /// for. It always holds here — a pin is taken under the page-table latch, and a pinned
    /// frame is never chosen by the clock — and a violation is a buffer-manager bug.
    #[inline]
    fn check(&self, fix: &Fixed<'_>, no: PageNo) {
        if fix.pinned {
            let held = fix.frame.pid.load(Ordering::Relaxed);
            assert!(held == self.pid(no), "buffer pool: frame holds page {held:#x}, fixed for {:#x}", self.pid(no));
        }
    }

    /// Fixes page `no` and latches it shared.
    #[inline]
    pub fn read(&self, no: PageNo, stats: &Stats) -> PageRead<'_> {
        let fix = self.fix(no, stats);
        let guard = fix.frame.latch.read(stats);
        self.check(&fix, no);
        PageRead { guard, _fix: fix }
    }

    /// Fixes page `no`, latches it exclusive and marks it dirty. Every change to an existing
    /// page goes through here (redo and undo too, by [`PageStore::write_logged`] and
    /// [`PageStore::ensure`]; [`PageStore::allocate`] only makes new pages), so this is where an image
    /// copy under way keeps the page's before-image, under the exclusive latch and before the
    /// caller can change a byte ([`StoreCopy::before_write`]). With no copy under way that
    /// costs one relaxed atomic load.
    #[inline]
    pub fn write(&self, no: PageNo, stats: &Stats) -> PageWrite<'_> {
        let fix = self.fix(no, stats);
        let guard = fix.frame.latch.write(stats);
        self.check(&fix, no);
        if fix.pinned {
            fix.frame.dirty.store(true, Ordering::Relaxed);
        }
        if self.copy.armed() {
            self.copy.before_write(no, guard.bytes());
        }
        PageWrite { guard, _fix: fix }
    }

    /// Page `no` latched exclusive for a logged change to it by redo or undo: `Err` when the
    /// store has no such page or it is not of `kind` (a record that does not fit the pages);
    /// `Ok(None)` when the page LSN shows the change, logged at `lsn` (redo), applied.
    pub fn write_logged(
        &self,
        no: PageNo,
        kind: u8,
        lsn: Option<u64>,
        stats: &Stats,
    ) -> Result<Option<PageWrite<'_>>, &'static str> {
        if no == NO_PAGE || no > self.pages() {
            return Err("the record names a page its store does not have");
        }
        let page = self.write(no, stats);
        if hdr::kind(&page) != kind {
            return Err("the record names a page of another kind");
        }
        if lsn.is_some_and(|lsn| hdr::lsn(&page) >= lsn) {
            return Ok(None);
        }
        Ok(Some(page))
    }

    /// Page `no`, allocating zeroed pages up to it first if the store is shorter (redo of a
    /// page's allocation: allocations of different pages may be logged out of order), fixed
    /// and latched exclusive.
    pub fn ensure(&self, no: PageNo, stats: &Stats) -> PageWrite<'_> {
        assert!(no != NO_PAGE, "page 0 is no page");
        while self.pages() < no {
            drop(self.allocate(stats));
        }
        self.write(no, stats)
    }

    /// Allocates a new zeroed page, fixed and latched exclusive (nobody else can reach it yet).
    pub fn allocate(&self, stats: &Stats) -> (PageNo, PageWrite<'_>) {
        let no = self.next.fetch_add(1, Ordering::AcqRel);
        let fix = match &self.access {
            Access::Pool(pool) => Fixed { frame: pool.allocate(self.pid(no), stats), pinned: true },
            Access::Direct(arena) => Fixed { frame: arena.ensure(no), pinned: false },
        };
        (no, PageWrite { guard: fix.frame.latch.write(stats), _fix: fix })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_pool_fixes_through_the_page_table_and_pins() {
        let pool = Arc::new(BufferPool::new(8192, LatchMode::Mutex, None, Backing::memory()));
        let a = PageStore::new(1, Some(&pool), 8192, LatchMode::Mutex);
        let b = PageStore::new(2, Some(&pool), 8192, LatchMode::Mutex);
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
        assert_eq!(fixed.frame.pin.load(Ordering::Relaxed), 1);
        drop(fixed);
        assert_eq!(stats.fixes.get(), 5);

        let direct = PageStore::new(3, None, 8192, LatchMode::Mutex);
        let stats = Stats::default();
        direct.allocate(&stats);
        direct.read(1, &stats);
        assert_eq!(stats.fixes.get(), 0);
    }

    /// A pool of 8 frames over 40 pages: every page survives eviction and read-back with its
    /// contents, dirty pages are written back, clean ones are not, and pinned frames are
    /// never taken.
    fn evicts_and_reads_back(backing: Backing) {
        let pool = Arc::new(BufferPool::new(8192, LatchMode::Mutex, Some(8), backing));
        let s = PageStore::new(4, Some(&pool), 8192, LatchMode::Mutex);
        let stats = Stats::default();
        for i in 1..=40u32 {
            let (no, mut p) = s.allocate(&stats);
            assert_eq!(no, i);
            hdr::init(&mut p, KIND_HEAP, 0);
            put_u32(&mut p, 100, i * 7);
        }
        assert_eq!(pool.frames_used(), 8);
        assert!(pool.writes.load(Ordering::Relaxed) >= 32, "new pages are dirty");
        // Hold one page pinned while sweeping through all of them twice.
        let held = s.read(3, &stats);
        for round in 0..2 {
            for i in 1..=40u32 {
                if i == 3 {
                    continue;
                }
                if round == 0 {
                    let mut p = s.write(i, &stats);
                    let v = get_u32(&p, 100);
                    put_u32(&mut p, 100, v + 1);
                } else {
                    assert_eq!(get_u32(&s.read(i, &stats), 100), i * 7 + 1, "page {i}");
                }
            }
        }
        assert_eq!(get_u32(&held, 100), 21, "the pinned page stayed");
        drop(held);
        assert!(pool.reads.load(Ordering::Relaxed) >= 60);
        // Every page resident now was read back after its last change: clean.
        let writes = pool.writes.load(Ordering::Relaxed);
        // Reading only: nothing more to write back.
        for i in 1..=40u32 {
            let _ = s.read(i, &stats);
        }
        for i in 1..=40u32 {
            let _ = s.read(i, &stats);
        }
        assert_eq!(pool.writes.load(Ordering::Relaxed), writes, "clean pages are evicted without a write");
    }

    #[test]
    fn a_bounded_pool_evicts_writes_back_and_reads_back_in_memory() {
        evicts_and_reads_back(Backing::memory());
    }

    #[test]
    fn a_bounded_pool_evicts_writes_back_and_reads_back_through_a_page_file() {
        let dir = std::env::temp_dir().join(format!("glass-page-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        evicts_and_reads_back(Backing::dir(dir.clone()));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "page files are unnamed");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn concurrent_fixes_under_eviction_keep_every_page() {
        let pool = Arc::new(BufferPool::new(8192, LatchMode::Mutex, Some(16), Backing::memory()));
        let s = Arc::new(PageStore::new(5, Some(&pool), 8192, LatchMode::Mutex));
        let stats = Stats::default();
        for _ in 0..64 {
            let (_, mut p) = s.allocate(&stats);
            hdr::init(&mut p, KIND_HEAP, 0);
        }
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    let stats = Stats::default();
                    for i in 0..2_000u32 {
                        let no = (i * 7 + t * 13) % 64 + 1;
                        let mut p = s.write(no, &stats);
                        let v = get_u32(&p, 200);
                        put_u32(&mut p, 200, v + 1);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let total: u32 = (1..=64).map(|no| get_u32(&s.read(no, &stats), 200)).sum();
        assert_eq!(total, 8_000);
    }
}
