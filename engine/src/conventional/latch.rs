//! Latches: short-term reader/writer spin latches guarding in-memory structures (page-table
//! shards, pages and B+tree nodes, the catalog, the transaction table, heap tails), distinct
//! from transaction locks (Gray & Reuter, ch. 8).
//!
//! Owns: [`Latch`], a reader/writer latch over a value, whose mode is fixed at construction:
//! enabled (a real latch: an atomic state word, spinning then yielding) or disabled (the
//! paper's "latching removed": acquiring returns at once and takes nothing).
//!
//! Guarantees: an enabled latch gives the usual reader/writer exclusion. A disabled latch is
//! only ever constructed when the engine admits a single session at a time (the
//! configuration refuses the latching switch with several workers, and the engine caps open
//! sessions at the configured workers), so its value is only reached from one thread at a
//! time. In debug builds a disabled latch still tracks its state and panics on an acquire
//! that a real latch would block on (which, with one thread, would be a self-deadlock or an
//! aliasing bug).

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, Ordering};

use super::stats::{bump, Stats};

const WRITER: u32 = 1 << 31;
/// Spins before yielding the processor while waiting for a latch (2-core machines run more
/// workers than cores; spinning past a descheduled holder wastes the quantum).
const SPINS_BEFORE_YIELD: u32 = 64;

/// A reader/writer latch over a `T`; see the module documentation.
pub(crate) struct Latch<T> {
    state: AtomicU32,
    enabled: bool,
    value: UnsafeCell<T>,
}

// SAFETY: an enabled latch hands out `&T` only under a shared hold and `&mut T` only under the
// exclusive hold, like `RwLock`. A disabled latch is used only while the engine admits one
// session (see the module documentation), so no two threads reach the value concurrently.
unsafe impl<T: Send> Send for Latch<T> {}
// SAFETY: as above; `T: Sync` because shared holds hand `&T` to several threads at once.
unsafe impl<T: Send + Sync> Sync for Latch<T> {}

impl<T> Latch<T> {
    pub fn new(value: T, enabled: bool) -> Latch<T> {
        Latch { state: AtomicU32::new(0), enabled, value: UnsafeCell::new(value) }
    }

    #[inline]
    fn tracks_state(&self) -> bool {
        self.enabled || cfg!(debug_assertions)
    }

    #[inline]
    fn try_shared(&self) -> bool {
        let s = self.state.load(Ordering::Relaxed);
        s & WRITER == 0 && self.state.compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    #[inline]
    fn try_exclusive(&self) -> bool {
        self.state.compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    fn wait(&self, mut attempt: impl FnMut() -> bool) {
        let mut spins = 0u32;
        while !attempt() {
            if !self.enabled {
                panic!("a disabled latch was acquired in a conflicting mode (self-deadlock or aliasing)");
            }
            spins += 1;
            if spins < SPINS_BEFORE_YIELD {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Acquires the latch in shared mode.
    #[inline]
    pub fn read<'a>(&'a self, stats: &Stats) -> ReadGuard<'a, T> {
        if self.enabled {
            bump(&stats.latches);
        }
        if self.tracks_state() && !self.try_shared() {
            self.wait(|| self.try_shared());
        }
        ReadGuard { latch: self }
    }

    /// Acquires the latch in exclusive mode.
    #[inline]
    pub fn write<'a>(&'a self, stats: &Stats) -> WriteGuard<'a, T> {
        if self.enabled {
            bump(&stats.latches);
        }
        if self.tracks_state() && !self.try_exclusive() {
            self.wait(|| self.try_exclusive());
        }
        WriteGuard { latch: self }
    }
}

/// A shared hold; released on drop.
pub(crate) struct ReadGuard<'a, T> {
    latch: &'a Latch<T>,
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: a shared hold (or, disabled, the single-session rule) excludes writers.
        unsafe { &*self.latch.value.get() }
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.latch.tracks_state() {
            self.latch.state.fetch_sub(1, Ordering::Release);
        }
    }
}

/// An exclusive hold; released on drop.
pub(crate) struct WriteGuard<'a, T> {
    latch: &'a Latch<T>,
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the exclusive hold (or, disabled, the single-session rule) excludes others.
        unsafe { &*self.latch.value.get() }
    }
}

impl<T> DerefMut for WriteGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the exclusive hold (or, disabled, the single-session rule) excludes others,
        // and `&mut self` makes this the only reference derived from this guard.
        unsafe { &mut *self.latch.value.get() }
    }
}

impl<T> Drop for WriteGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.latch.tracks_state() {
            self.latch.state.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn enabled_latch_excludes_writers_across_threads() {
        let latch = Arc::new(Latch::new(0u64, true));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let latch = Arc::clone(&latch);
                std::thread::spawn(move || {
                    let stats = Stats::default();
                    for _ in 0..10_000 {
                        *latch.write(&stats) += 1;
                    }
                    stats.latches.get()
                })
            })
            .collect();
        let acquired: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(*latch.read(&Stats::default()), 40_000);
        assert_eq!(acquired, 40_000);
    }

    #[test]
    fn disabled_latch_counts_nothing() {
        let latch = Latch::new(5u32, false);
        let stats = Stats::default();
        *latch.write(&stats) += 1;
        assert_eq!(*latch.read(&stats), 6);
        assert_eq!(stats.latches.get(), 0);
    }
}
