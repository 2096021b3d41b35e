//! Component counters: each is bumped at the one entry point of its component (lock grant,
//! latch acquire, page fix, log record generation, log write, fsync), never twice for one
//! event. Workers count into their session's plain cells and merge into the engine's relaxed
//! atomics at transaction end and when the session closes (DBx1000's per-thread counters
//! merged on commit), so counting costs no shared cache line on the hot path.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What the components did, summed over sessions (see [`super::ConventionalDb::counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Lock requests the lock manager granted (including re-requests of held locks).
    pub lock_requests_granted: u64,
    /// Lock requests that had to wait for another transaction.
    pub lock_waits: u64,
    /// Lock requests refused by wait-die (the requester aborts).
    pub lock_conflicts: u64,
    /// Latches acquired (page table shards, pages, catalog, transaction table, free-space maps).
    pub latches_acquired: u64,
    /// Pages fixed in the buffer pool.
    pub pages_fixed: u64,
    /// Log records generated.
    pub log_records: u64,
    /// Bytes written to the log device.
    pub log_bytes_written: u64,
    /// `fdatasync` calls on the log device.
    pub fsyncs: u64,
    /// Pages the buffer pool read back from its page files (a bounded pool's misses).
    pub page_reads: u64,
    /// Dirty pages the buffer pool wrote back to its page files.
    pub page_writes: u64,
    /// Pages the buffer pool's clock evicted.
    pub page_evictions: u64,
    /// Transactions committed.
    pub committed: u64,
    /// Transactions aborted.
    pub aborted: u64,
}

impl Counters {
    /// Field-wise difference `self − earlier` (for per-run deltas).
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            lock_requests_granted: self.lock_requests_granted - earlier.lock_requests_granted,
            lock_waits: self.lock_waits - earlier.lock_waits,
            lock_conflicts: self.lock_conflicts - earlier.lock_conflicts,
            latches_acquired: self.latches_acquired - earlier.latches_acquired,
            pages_fixed: self.pages_fixed - earlier.pages_fixed,
            log_records: self.log_records - earlier.log_records,
            log_bytes_written: self.log_bytes_written - earlier.log_bytes_written,
            fsyncs: self.fsyncs - earlier.fsyncs,
            page_reads: self.page_reads - earlier.page_reads,
            page_writes: self.page_writes - earlier.page_writes,
            page_evictions: self.page_evictions - earlier.page_evictions,
            committed: self.committed - earlier.committed,
            aborted: self.aborted - earlier.aborted,
        }
    }
}

/// A session's (or recovery's) own counters; not shared between threads.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub locks: Cell<u64>,
    pub lock_waits: Cell<u64>,
    pub lock_conflicts: Cell<u64>,
    pub latches: Cell<u64>,
    pub fixes: Cell<u64>,
    pub log_records: Cell<u64>,
    pub committed: Cell<u64>,
    pub aborted: Cell<u64>,
}

#[inline]
pub(crate) fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

impl Stats {
    /// Returns the counts so far and zeroes them.
    pub fn take(&self) -> Counters {
        Counters {
            lock_requests_granted: self.locks.take(),
            lock_waits: self.lock_waits.take(),
            lock_conflicts: self.lock_conflicts.take(),
            latches_acquired: self.latches.take(),
            pages_fixed: self.fixes.take(),
            log_records: self.log_records.take(),
            log_bytes_written: 0,
            fsyncs: 0,
            page_reads: 0,
            page_writes: 0,
            page_evictions: 0,
            committed: self.committed.take(),
            aborted: self.aborted.take(),
        }
    }
}

/// The engine's merged counters.
#[derive(Debug, Default)]
pub(crate) struct SharedCounters {
    locks: AtomicU64,
    lock_waits: AtomicU64,
    lock_conflicts: AtomicU64,
    latches: AtomicU64,
    fixes: AtomicU64,
    log_records: AtomicU64,
    committed: AtomicU64,
    aborted: AtomicU64,
}

impl SharedCounters {
    pub fn merge(&self, c: &Counters) {
        let add = |a: &AtomicU64, v: u64| {
            if v != 0 {
                a.fetch_add(v, Relaxed);
            }
        };
        add(&self.locks, c.lock_requests_granted);
        add(&self.lock_waits, c.lock_waits);
        add(&self.lock_conflicts, c.lock_conflicts);
        add(&self.latches, c.latches_acquired);
        add(&self.fixes, c.pages_fixed);
        add(&self.log_records, c.log_records);
        add(&self.committed, c.committed);
        add(&self.aborted, c.aborted);
    }

    pub fn load(&self) -> Counters {
        Counters {
            lock_requests_granted: self.locks.load(Relaxed),
            lock_waits: self.lock_waits.load(Relaxed),
            lock_conflicts: self.lock_conflicts.load(Relaxed),
            latches_acquired: self.latches.load(Relaxed),
            pages_fixed: self.fixes.load(Relaxed),
            log_records: self.log_records.load(Relaxed),
            log_bytes_written: 0,
            fsyncs: 0,
            page_reads: 0,
            page_writes: 0,
            page_evictions: 0,
            committed: self.committed.load(Relaxed),
            aborted: self.aborted.load(Relaxed),
        }
    }
}
