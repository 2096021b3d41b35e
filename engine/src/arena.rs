//! Memory for the lean kernel's rows and index nodes: buffers aligned to 2 MiB and advised
//! for transparent huge pages, and chunked pools of plain-old-data elements built on them.
//!
//! Why: at TPC-C's working set (hundreds of MB) dependent loads cost 150–250 ns and TLB misses
//! add to them; huge pages cut that (measured on this VM: docs/usage.md, "Design notes"), so
//! what the load fills sits in huge pages, and a pool grows in whole 2 MiB steps and never
//! copies: a chunk, once allocated, never moves.
//!
//! Memory allocated while the tables grow (after loading: pre-faulting is on) takes the page
//! size [`GrowthPages`] names, small (4 KiB) pages by default: on a virtual machine whose host
//! takes back the guest's free memory (virtio-balloon free page reporting, as on the machines
//! glass is measured on), a huge page the guest has not touched since it was freed costs the
//! host's backing on first touch, 1.2–2.5 ns per byte, against 0.35 for small pages and 0.06
//! for a huge page the guest still holds (docs/results.md, "What a fresh page costs"); the
//! database grows by ~900 bytes per NewOrder, so that choice decides a fifth of a replicated
//! cluster's CPU. On a host that backs memory up front, `huge` is the cheaper choice.
//!
//! Guarantees: ids are dense `u32`s handed out in allocation order (released ids are reused
//! first, most recently released first); an element's address never changes while it lives.

use std::alloc::{alloc, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Mutex, OnceLock};

/// Transparent huge page size on x86-64 Linux.
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// A fixed-capacity buffer of `T` aligned to 2 MiB, advised for huge pages, uninitialised
/// until written (untouched capacity costs no memory).
pub struct HugeBuf<T> {
    ptr: NonNull<T>,
    cap: usize,
    layout: Layout,
}

// SAFETY: HugeBuf owns its allocation exclusively, like a Box<[T]>.
unsafe impl<T: Send> Send for HugeBuf<T> {}
// SAFETY: shared access only hands out shared references.
unsafe impl<T: Sync> Sync for HugeBuf<T> {}

impl<T: Copy> HugeBuf<T> {
    /// A buffer for at least `cap` elements. Buffers of 2 MiB or more are aligned to 2 MiB,
    /// rounded up to whole huge pages and advised — for huge pages, or for small ones if they
    /// are allocated while the tables grow and [`growth_pages`] says so; smaller ones are plain
    /// allocations (a huge page would make a small buffer cost 2 MiB of memory).
    pub fn new(cap: usize) -> Self {
        Self::advised(cap, prefault_enabled(), growth_pages())
    }

    fn advised(cap: usize, growing: bool, growth: GrowthPages) -> Self {
        let size = std::mem::size_of::<T>().max(1);
        let want = cap.max(1) * size;
        let advice = advice(want, growing, growth);
        let (bytes, align) = match advice {
            Advice::Plain => (want, 64),
            Advice::Huge | Advice::Small => (want.div_ceil(HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES, HUGE_PAGE_BYTES),
        };
        let layout = Layout::from_size_align(bytes, align.max(std::mem::align_of::<T>())).expect("buffer layout");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc(layout) };
        let ptr = NonNull::new(raw as *mut T).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        match advice {
            Advice::Plain => {}
            Advice::Huge => advise_huge(raw, bytes),
            Advice::Small => advise_small(raw, bytes),
        }
        HugeBuf { ptr, cap: bytes / size, layout }
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Writes element `i`.
    #[inline]
    pub fn write(&mut self, i: usize, v: T) {
        assert!(i < self.cap);
        // SAFETY: i is within the allocation; T is Copy (no drop of the old value needed).
        unsafe { self.ptr.as_ptr().add(i).write(v) }
    }

    /// Element `i`.
    ///
    /// # Safety
    /// `i` must be below the capacity and have been written.
    #[inline]
    pub unsafe fn get(&self, i: usize) -> &T {
        debug_assert!(i < self.cap);
        // SAFETY: the caller guarantees i is in bounds and initialised.
        unsafe { &*self.ptr.as_ptr().add(i) }
    }

    /// Element `i`, mutably.
    ///
    /// # Safety
    /// `i` must be below the capacity and have been written.
    #[inline]
    pub unsafe fn get_mut(&mut self, i: usize) -> &mut T {
        debug_assert!(i < self.cap);
        // SAFETY: the caller guarantees i is in bounds and initialised.
        unsafe { &mut *self.ptr.as_ptr().add(i) }
    }

    /// Address of element `i`, for prefetching (never dereferenced here).
    #[inline]
    pub fn addr(&self, i: usize) -> *const T {
        self.ptr.as_ptr().wrapping_add(i)
    }
}

impl<T> Drop for HugeBuf<T> {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; elements are Copy (nothing to drop).
        unsafe { dealloc(self.ptr.as_ptr() as *mut u8, self.layout) }
    }
}

/// The pages of memory allocated while the tables grow (after loading: while pre-faulting is
/// on). Loaded tables are always advised for huge pages; this only decides the growth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GrowthPages {
    /// 4 KiB pages (`MADV_NOHUGEPAGE`): the cheaper first touch where the host takes freed
    /// guest memory back (module documentation).
    #[default]
    Small,
    /// Transparent huge pages (`MADV_HUGEPAGE`), like the loaded tables.
    Huge,
}

impl GrowthPages {
    /// The name `cluster.toml` and `--growth-pages` use.
    pub fn name(self) -> &'static str {
        match self {
            GrowthPages::Small => "small",
            GrowthPages::Huge => "huge",
        }
    }
}

impl std::fmt::Display for GrowthPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for GrowthPages {
    type Err = String;
    fn from_str(s: &str) -> Result<GrowthPages, String> {
        match s {
            "small" => Ok(GrowthPages::Small),
            "huge" => Ok(GrowthPages::Huge),
            other => Err(format!("unknown growth pages '{other}' (expected small or huge)")),
        }
    }
}

static GROWTH_HUGE: AtomicBool = AtomicBool::new(false);

/// Sets the pages of memory allocated from now on while pre-faulting is on (a process-wide
/// setting, like pre-faulting: a node or a bench sets it once, before its tables grow).
pub fn set_growth_pages(pages: GrowthPages) {
    GROWTH_HUGE.store(pages == GrowthPages::Huge, Ordering::Relaxed);
}

pub fn growth_pages() -> GrowthPages {
    if GROWTH_HUGE.load(Ordering::Relaxed) {
        GrowthPages::Huge
    } else {
        GrowthPages::Small
    }
}

/// What a buffer's pages are advised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Advice {
    /// Too small to hold a huge page: a plain allocation, no advice.
    Plain,
    Huge,
    Small,
}

/// The advice for a buffer of `bytes`: huge pages for 2 MiB or more, unless it is allocated
/// while the tables grow and growth takes small pages.
fn advice(bytes: usize, growing: bool, growth: GrowthPages) -> Advice {
    match (bytes >= HUGE_PAGE_BYTES, growing, growth) {
        (false, _, _) => Advice::Plain,
        (true, true, GrowthPages::Small) => Advice::Small,
        (true, _, _) => Advice::Huge,
    }
}

static PREFAULT_ENABLED: AtomicBool = AtomicBool::new(false);
/// Ranges waiting for the pre-faulter (a hint: when full, a range is simply not pre-faulted).
const PREFAULT_QUEUE_MAX: usize = 64;

/// Turns background pre-faulting of growing pools on or off (off by default: a bulk load
/// does not need it, and memory pre-faulted ahead of tables that stop growing after the load
/// would only inflate the resident set; benchmarks turn it on once loading is done).
pub fn set_prefault(enabled: bool) {
    PREFAULT_ENABLED.store(enabled, Ordering::Relaxed);
}

pub fn prefault_enabled() -> bool {
    PREFAULT_ENABLED.load(Ordering::Relaxed)
}

/// Hands `[ptr, ptr + bytes)` to the pre-faulter thread, which populates its pages
/// (`MADV_POPULATE_WRITE`) before the executor thread first writes there. On this VM a first
/// touch costs 1.2–2.6 ns per byte (a 2 MiB page 2.5–5 ms: the host backs it on first
/// touch), which would otherwise land inside transactions. The thread only asks the kernel to fault pages in: it never reads
/// or writes the data, and it is only a hint (the executor faults the pages itself if the
/// pre-faulter has not got there).
fn prefault_async(ptr: *mut u8, bytes: usize) {
    static QUEUE: OnceLock<Mutex<SyncSender<(usize, usize)>>> = OnceLock::new();
    if !prefault_enabled() {
        return;
    }
    let q = QUEUE.get_or_init(|| {
        let (tx, rx) = sync_channel::<(usize, usize)>(PREFAULT_QUEUE_MAX);
        let spawned = std::thread::Builder::new().name("glass-prefault".into()).spawn(move || {
            run_where_the_process_runs();
            for (start, len) in rx {
                populate(start, len);
            }
        });
        if spawned.is_err() {
            set_prefault(false);
        }
        Mutex::new(tx)
    });
    if let Ok(tx) = q.lock() {
        let _ = tx.try_send((ptr as usize, bytes));
    }
}

/// Gives the calling thread the CPUs of the process's main thread: the pre-faulter is started
/// by whichever executor first grows, and an executor pinned to one CPU (a node's `cpus` in
/// `cluster.toml`) must not take the pre-faulter with it.
fn run_where_the_process_runs() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: an all-zero cpu_set_t is a valid empty set; both calls get its size.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: `set` is a live cpu_set_t of `size` bytes; the main thread's id is the pid.
        if unsafe { libc::sched_getaffinity(libc::getpid(), size, &mut set) } == 0 {
            // SAFETY: as above; 0 is the calling thread. A refusal leaves it where it was.
            unsafe { libc::sched_setaffinity(0, size, &set) };
        }
    }
}

fn populate(start: usize, len: usize) {
    #[cfg(target_os = "linux")]
    {
        let step = HUGE_PAGE_BYTES;
        let mut off = 0;
        while off < len {
            let n = step.min(len - off);
            // SAFETY: populating is a hint about an owned anonymous mapping; if the mapping is
            // gone the call fails with ENOMEM and nothing happens.
            let rc = unsafe { libc::madvise((start + off) as *mut libc::c_void, n, libc::MADV_POPULATE_WRITE) };
            if rc != 0 {
                return;
            }
            off += n;
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, len);
}

/// Asks for small pages over `[ptr, ptr + bytes)`, even where transparent huge pages are on
/// for every mapping. A hint: failure is harmless.
fn advise_small(ptr: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: the range lies inside an allocation we own; madvise only records a hint.
    unsafe {
        libc::madvise(ptr as *mut libc::c_void, bytes, libc::MADV_NOHUGEPAGE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}

/// Asks for transparent huge pages over `[ptr, ptr + bytes)`. A hint: failure is harmless.
pub fn advise_huge(ptr: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: the range lies inside an allocation we own; madvise only records a hint.
    unsafe {
        libc::madvise(ptr as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}

/// A chunked pool of `T` addressed by `u32` ids, with a free list. Chunk sizes double from
/// about 64 KiB, so a small table costs little, a large one sits in huge pages, and finding an
/// id's chunk is a few instructions; chunks never move, so a growing pool never copies. Only
/// touched pages cost memory: the unfilled tail of the newest chunk is address space only.
/// While a pool grows, the pages just ahead of its frontier are pre-faulted in the background
/// ([`prefault_async`]), a few MiB at a time.
pub struct Pool<T> {
    chunks: Vec<HugeBuf<T>>,
    /// log2 of the first chunk's capacity.
    base: u32,
    len: u32,
    free: Vec<u32>,
    /// Byte offset in the chunk being filled up to which pre-faulting has been requested.
    populated: usize,
    /// The same for the chunk created ahead of need, once filling reaches it.
    next_populated: usize,
}

/// How far ahead of the frontier of a growing pool pages are pre-faulted, and in what steps.
const PREFAULT_LEAD_BYTES: usize = 4 * HUGE_PAGE_BYTES;
const PREFAULT_STEP_BYTES: usize = 2 * HUGE_PAGE_BYTES;

impl<T: Copy> Pool<T> {
    pub fn new() -> Self {
        const FIRST_CHUNK_BYTES: usize = 64 << 10;
        let size = std::mem::size_of::<T>().max(1);
        let base = usize::BITS - 1 - (FIRST_CHUNK_BYTES / size).max(1).leading_zeros();
        Pool { chunks: Vec::new(), base, len: 0, free: Vec::new(), populated: 0, next_populated: 0 }
    }

    fn chunk_capacity(&self, c: usize) -> usize {
        1usize << (self.base as usize + c)
    }

    /// (chunk, index within the chunk) of an id: chunk `c` holds ids
    /// `[(2^c − 1)·2^base, (2^(c+1) − 1)·2^base)`.
    #[inline]
    fn split(&self, id: u32) -> (usize, usize) {
        let q = (id as u64 >> self.base) + 1;
        let c = 63 - q.leading_zeros();
        let first = ((1u64 << c) - 1) << self.base;
        (c as usize, (id as u64 - first) as usize)
    }

    /// Stores `v` and returns its id.
    #[inline]
    pub fn alloc(&mut self, v: T) -> u32 {
        if let Some(id) = self.free.pop() {
            *self.get_mut(id) = v;
            return id;
        }
        let id = self.len;
        let (c, i) = self.split(id);
        if c == self.chunks.len() {
            self.chunks.push(HugeBuf::new(self.chunk_capacity(c)));
            self.populated = 0;
        } else if i == 0 {
            // Filling reaches the chunk that was created ahead of need.
            self.populated = std::mem::take(&mut self.next_populated);
        }
        self.chunks[c].write(i, v);
        self.len = id.checked_add(1).expect("fewer than 2^32 elements per pool");
        self.provision(c, i);
        id
    }

    /// Keeps pre-faulting between `PREFAULT_LEAD_BYTES − PREFAULT_STEP_BYTES` and
    /// `PREFAULT_LEAD_BYTES` ahead of the frontier of a growing pool, creating the next chunk
    /// before the newest one fills.
    #[inline]
    fn provision(&mut self, c: usize, i: usize) {
        let frontier = (i + 1) * std::mem::size_of::<T>();
        if frontier + PREFAULT_LEAD_BYTES <= self.populated || !prefault_enabled() {
            return;
        }
        let bytes = self.chunks[c].layout.size();
        if bytes < HUGE_PAGE_BYTES {
            return;
        }
        if self.populated < bytes {
            let from = self.populated.max(frontier.next_multiple_of(HUGE_PAGE_BYTES));
            let to = (from + PREFAULT_STEP_BYTES).min(bytes);
            if to > from {
                prefault_async((self.chunks[c].ptr.as_ptr() as *mut u8).wrapping_add(from), to - from);
            }
            self.populated = to;
        } else if c + 1 == self.chunks.len() {
            // Near the end of the newest chunk: create the next one and start on it.
            let next = HugeBuf::new(self.chunk_capacity(c + 1));
            let n = next.layout.size();
            let first = PREFAULT_STEP_BYTES.min(n);
            if n >= HUGE_PAGE_BYTES {
                prefault_async(next.ptr.as_ptr() as *mut u8, first);
            }
            self.chunks.push(next);
            self.next_populated = first;
        }
    }

    /// Returns `id` to the free list (its contents become garbage).
    #[inline]
    pub fn release(&mut self, id: u32) {
        debug_assert!(id < self.len);
        self.free.push(id);
    }

    /// Removes the most recently allocated element if it is `id` (heap tables pop on undo).
    pub fn pop(&mut self, id: u32) {
        assert_eq!(id + 1, self.len, "pop of an element that is not the last");
        self.len -= 1;
    }

    #[inline]
    pub fn get(&self, id: u32) -> &T {
        assert!(id < self.len, "pool id out of range");
        let (c, i) = self.split(id);
        // SAFETY: id < len, so its chunk exists and the element was written.
        unsafe { self.chunks[c].get(i) }
    }

    #[inline]
    pub fn get_mut(&mut self, id: u32) -> &mut T {
        assert!(id < self.len, "pool id out of range");
        let (c, i) = self.split(id);
        // SAFETY: id < len, so its chunk exists and the element was written.
        unsafe { self.chunks[c].get_mut(i) }
    }

    /// Address of an element, for prefetching.
    #[inline]
    pub fn addr(&self, id: u32) -> *const T {
        let (c, i) = self.split(id);
        match self.chunks.get(c) {
            Some(ch) => ch.addr(i),
            None => std::ptr::null(),
        }
    }

    /// Ids ever allocated (live or released).
    pub fn allocated(&self) -> u32 {
        self.len
    }

    /// Elements live (allocated and not released).
    pub fn live(&self) -> usize {
        self.len as usize - self.free.len()
    }
}

impl<T: Copy> Default for Pool<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Advises the 2 MiB-aligned part of a vector's allocation for huge pages (for vectors that
/// are allocated once at their final size, such as hash index slot arrays).
pub fn advise_vec<T>(v: &Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    let start = (v.as_ptr() as usize).div_ceil(HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES;
    let end = (v.as_ptr() as usize + bytes) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
    if end > start {
        advise_huge(start as *mut u8, end - start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_ids_map_to_stable_addresses_across_chunks() {
        let mut p = Pool::<[u64; 7]>::new();
        let ids: Vec<u32> = (0..300_000u64).map(|i| p.alloc([i; 7])).collect();
        for id in [0u32, 1, 1000, 1169, 1170, 50_000, 299_999] {
            let (c, i) = p.split(id);
            assert!(i < p.chunk_capacity(c), "id {id} -> ({c}, {i})");
        }
        assert!(ids.iter().enumerate().all(|(i, &id)| id as usize == i));
        let a = p.addr(12_345);
        for i in 300_000..400_000u64 {
            p.alloc([i; 7]);
        }
        assert_eq!(a, p.addr(12_345), "chunks never move");
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(p.get(id)[3], i as u64);
        }
        p.release(7);
        assert_eq!(p.alloc([1; 7]), 7, "released ids are reused");
        assert_eq!(p.live(), 400_000);
    }
}

#[cfg(test)]
mod page_tests {
    use super::*;

    #[test]
    fn loaded_tables_take_huge_pages_and_growth_the_pages_it_names() {
        let big = 4 * HUGE_PAGE_BYTES;
        assert_eq!(advice(HUGE_PAGE_BYTES - 1, false, GrowthPages::Huge), Advice::Plain);
        assert_eq!(advice(HUGE_PAGE_BYTES - 1, true, GrowthPages::Small), Advice::Plain);
        assert_eq!(advice(big, false, GrowthPages::Small), Advice::Huge, "loading: huge whatever growth takes");
        assert_eq!(advice(big, true, GrowthPages::Small), Advice::Small);
        assert_eq!(advice(big, true, GrowthPages::Huge), Advice::Huge);
        assert_eq!(GrowthPages::default(), GrowthPages::Small);
        for p in [GrowthPages::Small, GrowthPages::Huge] {
            assert_eq!(p.name().parse::<GrowthPages>(), Ok(p));
        }
        let err = "large".parse::<GrowthPages>().unwrap_err();
        assert!(err.contains("large") && err.contains("small or huge"), "{err}");
    }

    /// The kernel's flags for the mapping holding `addr` (`VmFlags` of /proc/self/smaps:
    /// `hg` advised for huge pages, `nh` for none).
    #[cfg(target_os = "linux")]
    fn vm_flags(addr: usize) -> Vec<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
                let (lo, hi) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16));
                inside = matches!((lo, hi), (Ok(lo), Ok(hi)) if lo <= addr && addr < hi);
            } else if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return flags.split_whitespace().map(str::to_string).collect();
                }
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_kernel_records_the_advice() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            eprintln!("skipped: this kernel has no transparent huge pages to advise");
            return;
        }
        let cap = 4 * HUGE_PAGE_BYTES;
        let loaded = HugeBuf::<u8>::advised(cap, false, GrowthPages::Small);
        let grown_small = HugeBuf::<u8>::advised(cap, true, GrowthPages::Small);
        let grown_huge = HugeBuf::<u8>::advised(cap, true, GrowthPages::Huge);
        let flags = |b: &HugeBuf<u8>| vm_flags(b.addr(cap / 2) as usize);
        assert!(flags(&loaded).contains(&"hg".to_string()), "{:?}", flags(&loaded));
        assert!(flags(&grown_small).contains(&"nh".to_string()), "{:?}", flags(&grown_small));
        assert!(flags(&grown_huge).contains(&"hg".to_string()), "{:?}", flags(&grown_huge));
    }
}

#[cfg(test)]
mod split_tests {
    use super::*;

    #[test]
    fn split_is_a_bijection_onto_chunk_slots() {
        let p = Pool::<[u8; 300]>::new();
        let mut expect = (0usize, 0usize);
        for id in 0..2_000_000u32 {
            assert_eq!(p.split(id), expect, "id {id}");
            expect.1 += 1;
            if expect.1 == p.chunk_capacity(expect.0) {
                expect = (expect.0 + 1, 0);
            }
        }
    }
}
