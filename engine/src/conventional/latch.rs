//! Latches: short-term reader/writer latches guarding in-memory structures (page-table
//! shards, frames and B+tree nodes, the catalog, the transaction table, free-space maps), distinct
//! from transaction locks (Gray & Reuter, ch. 8).
//!
//! Owns: [`Latch`], a reader/writer latch over a value, whose [`LatchMode`] is fixed at
//! construction:
//! - [`LatchMode::Mutex`] (the default, as Shore's `latch_t`): an atomic state word; a
//!   waiter spins briefly, then sleeps on the state word (a futex) and is woken by the
//!   release — which makes the wake-up system call only when someone sleeps; every hold is
//!   entered in the holding thread's list of latches held (Shore's latch holder
//!   bookkeeping), which refuses, with a panic naming the latch, an acquire that would
//!   deadlock the thread on itself (exclusive over any hold of its own, shared over its own
//!   exclusive hold), and the exclusive holder's thread is recorded on the latch;
//! - [`LatchMode::Spin`] (the cheap latch, kept as an option: `Config::latch`): the same
//!   state word, one compare-and-swap to take and one store to release, waiters spin then
//!   yield, no bookkeeping;
//! - [`LatchMode::Off`] (the paper's "latching removed"): acquiring returns at once and
//!   takes nothing.
//!
//! Guarantees: an enabled latch gives the usual reader/writer exclusion. A disabled latch is
//! only ever constructed when the engine admits a single session at a time (the
//! configuration refuses the latching switch with several workers, and the engine caps open
//! sessions at the configured workers), so its value is only reached from one thread at a
//! time. In debug builds a disabled latch still tracks its state and panics on an acquire
//! that a real latch would block on (which, with one thread, would be a self-deadlock or an
//! aliasing bug).

use std::cell::{Cell, RefCell, UnsafeCell};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::stats::{bump, Stats};

const WRITER: u32 = 1 << 31;
/// Spins before a waiter sleeps (mutex latch) or yields the processor (spin latch): 2-core
/// machines run more workers than cores, and spinning past a descheduled holder wastes the
/// quantum.
const SPINS_BEFORE_WAIT: u32 = 64;
/// Latches one thread holds at once, most: a B+tree split holds its whole path and two new
/// pages; beyond this the bookkeeping list grows (it never refuses).
const HELD_EXPECTED: usize = 16;

/// How a latch behaves; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LatchMode {
    /// Latching switched off: nothing is taken.
    Off,
    /// The cheap spin latch: compare-and-swap, spin then yield, no bookkeeping.
    Spin,
    /// The mutex-style latch with holder bookkeeping (Shore's).
    Mutex,
}

/// Which latch an enabled latch is (a configuration choice; the paper's latching switch
/// decides whether latches exist at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LatchKind {
    /// Mutex-style: waiters sleep, holders are recorded per thread and checked (Shore's).
    #[default]
    Mutex,
    /// One compare-and-swap to take, one store to release, waiters spin.
    Spin,
}

impl LatchKind {
    /// The mode of a latch of this kind, latching on or off.
    pub fn mode(self, latching: bool) -> LatchMode {
        match (latching, self) {
            (false, _) => LatchMode::Off,
            (true, LatchKind::Mutex) => LatchMode::Mutex,
            (true, LatchKind::Spin) => LatchMode::Spin,
        }
    }
}

thread_local! {
    /// This thread's id for latch ownership (0 = none; assigned on first use).
    static THREAD_ID: Cell<u64> = const { Cell::new(0) };
    /// The latches this thread holds: (latch address, exclusive, holds).
    static HELD: RefCell<Vec<(usize, bool, u32)>> = RefCell::new(Vec::with_capacity(HELD_EXPECTED));
}

static NEXT_THREAD_ID: AtomicU64 = AtomicU64::new(1);

fn thread_id() -> u64 {
    THREAD_ID.with(|id| {
        if id.get() == 0 {
            id.set(NEXT_THREAD_ID.fetch_add(1, Ordering::Relaxed));
        }
        id.get()
    })
}

/// Enters a hold of the latch at `addr` in this thread's list, refusing a self-deadlock.
fn enter_hold(addr: usize, exclusive: bool) {
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        if let Some(h) = held.iter_mut().find(|h| h.0 == addr) {
            assert!(
                !exclusive && !h.1,
                "latch {addr:#x} requested {} by a thread that already holds it {}: the thread would wait for itself",
                if exclusive { "exclusive" } else { "shared" },
                if h.1 { "exclusive" } else { "shared" },
            );
            h.2 += 1;
        } else {
            held.push((addr, exclusive, 1));
        }
    });
}

/// Removes one hold of the latch at `addr` from this thread's list.
fn leave_hold(addr: usize) {
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        let i = held.iter().rposition(|h| h.0 == addr).expect("a released latch is in its holder's list");
        if held[i].2 > 1 {
            held[i].2 -= 1;
        } else {
            held.swap_remove(i);
        }
    });
}

#[cfg(target_os = "linux")]
fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: FUTEX_WAIT reads the aligned u32 behind a live atomic; it sleeps only while the
    // word still holds `expected`, and a spurious return is harmless (the caller re-checks).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

#[cfg(target_os = "linux")]
fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX);
    }
}

#[cfg(not(target_os = "linux"))]
fn futex_wait(_word: &AtomicU32, _expected: u32) {
    std::thread::yield_now();
}

#[cfg(not(target_os = "linux"))]
fn futex_wake_all(_word: &AtomicU32) {}

/// A reader/writer latch over a `T`; see the module documentation.
pub(crate) struct Latch<T> {
    state: AtomicU32,
    /// Threads asleep on `state` (mutex latches).
    sleepers: AtomicU32,
    /// The exclusive holder's thread (mutex latches; 0 = none).
    owner: AtomicU64,
    mode: LatchMode,
    value: UnsafeCell<T>,
}

// SAFETY: an enabled latch hands out `&T` only under a shared hold and `&mut T` only under the
// exclusive hold, like `RwLock`. A disabled latch is used only while the engine admits one
// session (see the module documentation), so no two threads reach the value concurrently.
unsafe impl<T: Send> Send for Latch<T> {}
// SAFETY: as above; `T: Sync` because shared holds hand `&T` to several threads at once.
unsafe impl<T: Send + Sync> Sync for Latch<T> {}

impl<T> Latch<T> {
    pub fn new(value: T, mode: LatchMode) -> Latch<T> {
        Latch {
            state: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            owner: AtomicU64::new(0),
            mode,
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    fn enabled(&self) -> bool {
        self.mode != LatchMode::Off
    }

    #[inline]
    fn tracks_state(&self) -> bool {
        self.enabled() || cfg!(debug_assertions)
    }

    #[inline]
    fn addr(&self) -> usize {
        self as *const Self as usize
    }

    #[inline]
    fn try_shared(&self) -> bool {
        let s = self.state.load(Ordering::Relaxed);
        s & WRITER == 0 && self.state.compare_exchange_weak(s, s + 1, Ordering::SeqCst, Ordering::Relaxed).is_ok()
    }

    #[inline]
    fn try_exclusive(&self) -> bool {
        self.state.compare_exchange(0, WRITER, Ordering::SeqCst, Ordering::Relaxed).is_ok()
    }

    /// Waits until `attempt` succeeds; `blocks(state)` says whether a state keeps it from
    /// succeeding (the futex sleeps only on such a state).
    #[cold]
    fn wait(&self, mut attempt: impl FnMut() -> bool, blocks: impl Fn(u32) -> bool) {
        let mut spins = 0u32;
        while !attempt() {
            if !self.enabled() {
                panic!("a disabled latch was acquired in a conflicting mode (self-deadlock or aliasing)");
            }
            spins += 1;
            if spins < SPINS_BEFORE_WAIT {
                std::hint::spin_loop();
                continue;
            }
            match self.mode {
                LatchMode::Mutex => {
                    // Sleepers are counted before the state is read again, and releases
                    // change the state before they read the count (all SeqCst): either the
                    // release sees this sleeper and wakes it, or this thread sees the release
                    // and does not sleep.
                    self.sleepers.fetch_add(1, Ordering::SeqCst);
                    let s = self.state.load(Ordering::SeqCst);
                    if blocks(s) {
                        futex_wait(&self.state, s);
                    }
                    self.sleepers.fetch_sub(1, Ordering::SeqCst);
                }
                _ => std::thread::yield_now(),
            }
        }
    }

    #[inline]
    fn wake(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            futex_wake_all(&self.state);
        }
    }

    /// Acquires the latch in shared mode.
    #[inline]
    pub fn read<'a>(&'a self, stats: &Stats) -> ReadGuard<'a, T> {
        if self.enabled() {
            bump(&stats.latches);
        }
        if self.mode == LatchMode::Mutex {
            enter_hold(self.addr(), false);
        }
        if self.tracks_state() && !self.try_shared() {
            self.wait(|| self.try_shared(), |s| s & WRITER != 0);
        }
        ReadGuard { latch: self }
    }

    /// Acquires the latch in exclusive mode.
    #[inline]
    pub fn write<'a>(&'a self, stats: &Stats) -> WriteGuard<'a, T> {
        if self.enabled() {
            bump(&stats.latches);
        }
        if self.mode == LatchMode::Mutex {
            enter_hold(self.addr(), true);
        }
        if self.tracks_state() && !self.try_exclusive() {
            self.wait(|| self.try_exclusive(), |s| s != 0);
        }
        if self.mode == LatchMode::Mutex {
            self.owner.store(thread_id(), Ordering::Relaxed);
        }
        WriteGuard { latch: self }
    }

    /// The thread holding the latch exclusive (mutex latches), for diagnostics.
    #[cfg(test)]
    fn owner(&self) -> u64 {
        self.owner.load(Ordering::Relaxed)
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
        let l = self.latch;
        if l.tracks_state() {
            let before = l.state.fetch_sub(1, Ordering::SeqCst);
            if l.mode == LatchMode::Mutex {
                leave_hold(l.addr());
                if before == 1 {
                    l.wake();
                }
            }
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
        let l = self.latch;
        if l.tracks_state() {
            if l.mode == LatchMode::Mutex {
                l.owner.store(0, Ordering::Relaxed);
            }
            l.state.store(0, Ordering::SeqCst);
            if l.mode == LatchMode::Mutex {
                leave_hold(l.addr());
                l.wake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn hammer(mode: LatchMode) {
        let latch = Arc::new(Latch::new(0u64, mode));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let latch = Arc::clone(&latch);
                std::thread::spawn(move || {
                    let stats = Stats::default();
                    for i in 0..10_000 {
                        if i % 3 == 0 {
                            let _ = *latch.read(&stats);
                        } else {
                            *latch.write(&stats) += 1;
                        }
                    }
                    stats.latches.get()
                })
            })
            .collect();
        let acquired: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(*latch.read(&Stats::default()), 4 * 6_666);
        assert_eq!(acquired, 40_000);
    }

    #[test]
    fn enabled_latches_exclude_writers_across_threads() {
        hammer(LatchMode::Spin);
        hammer(LatchMode::Mutex);
    }

    #[test]
    fn mutex_latch_records_its_holder_and_sleeping_waiters_are_woken() {
        let latch = Arc::new(Latch::new(0u32, LatchMode::Mutex));
        let stats = Stats::default();
        let guard = latch.write(&stats);
        assert_eq!(latch.owner(), thread_id());
        let waiter = {
            let latch = Arc::clone(&latch);
            std::thread::spawn(move || {
                *latch.write(&Stats::default()) += 1;
            })
        };
        // The waiter ends up asleep on the state word (it cannot get the latch).
        while latch.sleepers.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        drop(guard);
        waiter.join().unwrap();
        assert_eq!(*latch.read(&stats), 1);
        assert_eq!(latch.owner(), 0);
        HELD.with(|h| assert!(h.borrow().is_empty(), "every hold left the list"));
    }

    #[test]
    #[should_panic(expected = "would wait for itself")]
    fn mutex_latch_refuses_a_self_deadlock() {
        let latch = Latch::new(0u32, LatchMode::Mutex);
        let stats = Stats::default();
        let _r = latch.read(&stats);
        let _w = latch.write(&stats);
    }

    #[test]
    fn shared_holds_nest_in_one_thread() {
        let latch = Latch::new(7u32, LatchMode::Mutex);
        let stats = Stats::default();
        let a = latch.read(&stats);
        let b = latch.read(&stats);
        assert_eq!(*a + *b, 14);
        drop((a, b));
        drop(latch.write(&stats));
    }

    #[test]
    fn disabled_latch_counts_nothing() {
        let latch = Latch::new(5u32, LatchMode::Off);
        let stats = Stats::default();
        *latch.write(&stats) += 1;
        assert_eq!(*latch.read(&stats), 6);
        assert_eq!(stats.latches.get(), 0);
    }
}
