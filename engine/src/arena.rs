//! Memory for the lean kernel's rows and index nodes: buffers aligned to 2 MiB and advised
//! for transparent huge pages, and chunked pools of plain-old-data elements built on them.
//!
//! Why: at TPC-C's working set (hundreds of MB) dependent loads cost 150–250 ns and TLB misses
//! add to them; huge pages cut that (MACHINE.md), and on this VM every newly touched 4 KiB page
//! costs a fault and a zeroing, so a pool grows in whole 2 MiB pages and never copies: a chunk,
//! once allocated, never moves.
//!
//! Guarantees: ids are dense `u32`s handed out in allocation order (released ids are reused
//! first, most recently released first); an element's address never changes while it lives.

use std::alloc::{alloc, dealloc, Layout};
use std::ptr::NonNull;

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
    /// rounded up to whole huge pages and advised; smaller ones are plain allocations (a huge
    /// page would make a small buffer cost 2 MiB of memory).
    pub fn new(cap: usize) -> Self {
        let size = std::mem::size_of::<T>().max(1);
        let want = cap.max(1) * size;
        let huge = want >= HUGE_PAGE_BYTES;
        let (bytes, align) =
            if huge { (want.div_ceil(HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES, HUGE_PAGE_BYTES) } else { (want, 64) };
        let layout = Layout::from_size_align(bytes, align.max(std::mem::align_of::<T>())).expect("buffer layout");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc(layout) };
        let ptr = NonNull::new(raw as *mut T).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        if huge {
            advise_huge(raw, bytes);
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

/// A chunked pool of `T` addressed by `u32` ids, with a free list. Chunk `c` holds
/// `2^(base + c)` elements (geometric growth from about 64 KiB), so a small table costs little
/// and a large one sits in huge pages with no rounding waste; chunks never move, so a growing
/// pool never copies its contents.
pub struct Pool<T> {
    chunks: Vec<HugeBuf<T>>,
    base: u32,
    len: u32,
    free: Vec<u32>,
}

impl<T: Copy> Pool<T> {
    pub fn new() -> Self {
        const FIRST_CHUNK_BYTES: usize = 64 << 10;
        let per = (FIRST_CHUNK_BYTES / std::mem::size_of::<T>().max(1)).max(1);
        let base = usize::BITS - 1 - per.leading_zeros();
        Pool { chunks: Vec::new(), base, len: 0, free: Vec::new() }
    }

    /// (chunk, index within the chunk) of an id.
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
            self.chunks.push(HugeBuf::new(1 << (self.base as usize + c)));
        }
        self.chunks[c].write(i, v);
        self.len = id.checked_add(1).expect("fewer than 2^32 elements per pool");
        id
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
