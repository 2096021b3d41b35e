//! The lock manager: a hashed lock table of named locks with hierarchical modes (table IS/IX,
//! record S/X; Gray & Reuter, ch. 7), held under strict two-phase locking (released only at
//! commit or abort).
//!
//! Deadlocks are prevented by **wait-die** (Rosenkrantz, Stearns & Lewis, 1978): every
//! transaction carries a priority (smaller = older); a requester may wait only for holders
//! younger than itself, and a younger requester that conflicts with an older holder "dies"
//! at once ([`Refused::Die`]: the caller aborts with `StorageError::Conflict` and retries).
//! Waits-for edges therefore always point from older to younger, so no cycle can form. A
//! retried transaction keeps its first priority (see the session), so it eventually becomes
//! the oldest and cannot starve; and it restarts only once the lock it died on is free (or
//! after [`RESTART_WAIT_MAX`]), the usual restart delay that keeps a young transaction from
//! dying again and again while an older holder waits for its commit's `fdatasync`.
//!
//! With the locking switch off the manager is built disabled and every call returns at once,
//! granting nothing and counting nothing.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::stats::{bump, Stats};
use crate::schema::TableId;

/// Buckets of the lock table (each a mutex and a condition variable).
const LOCK_TABLE_BUCKETS: usize = 256;
/// Longest a transaction that died under wait-die waits for the lock it died on before it
/// restarts (holding no locks, so the wait cannot deadlock).
pub(crate) const RESTART_WAIT_MAX: Duration = Duration::from_millis(50);

/// Lock modes: intention modes on tables, shared/exclusive on records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LockMode {
    IntentionShared,
    IntentionExclusive,
    Shared,
    Exclusive,
}

impl LockMode {
    /// The standard compatibility matrix (without SIX, which nothing here requests).
    fn compatible(self, other: LockMode) -> bool {
        use LockMode::*;
        matches!(
            (self, other),
            (IntentionShared, IntentionShared | IntentionExclusive | Shared)
                | (IntentionExclusive, IntentionShared | IntentionExclusive)
                | (Shared, IntentionShared | Shared)
        )
    }

    /// The weakest mode at least as strong as both.
    fn supremum(self, other: LockMode) -> LockMode {
        use LockMode::*;
        match (self.max(other), self.min(other)) {
            (Shared, IntentionExclusive) => Exclusive, // SIX, rounded up
            (m, _) => m,
        }
    }

    fn covers(self, wanted: LockMode) -> bool {
        self.supremum(wanted) == self
    }
}

/// A lock name: a table, or a record of a table (its packed primary key or heap rid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LockName {
    pub table: TableId,
    pub record: Option<u64>,
}

impl LockName {
    fn bucket(&self) -> usize {
        let k = self.record.unwrap_or(u64::MAX) ^ ((self.table as u64) << 56);
        ((k ^ (k >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize % LOCK_TABLE_BUCKETS
    }
}

#[derive(Debug, Clone, Copy)]
struct Holder {
    txn: u64,
    priority: u64,
    mode: LockMode,
}

#[derive(Default)]
struct Bucket {
    locks: HashMap<LockName, Vec<Holder>>,
}

/// Why a lock was not granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A conditional request would have had to wait.
    WouldWait,
    /// Wait-die: the requester is younger than a conflicting holder.
    Die,
}

/// What a granted request changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Granted {
    /// Newly held (the caller records it for release).
    New,
    /// Already held in this or a stronger mode, or upgraded in place.
    Held,
}

/// The lock table.
pub(crate) struct LockManager {
    enabled: bool,
    buckets: Box<[(Mutex<Bucket>, Condvar)]>,
}

impl LockManager {
    pub fn new(enabled: bool) -> LockManager {
        let n = if enabled { LOCK_TABLE_BUCKETS } else { 0 };
        LockManager { enabled, buckets: (0..n).map(|_| (Mutex::default(), Condvar::new())).collect() }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn lock_bucket(&self, i: usize) -> MutexGuard<'_, Bucket> {
        self.buckets[i].0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Requests `mode` on `name` for transaction `txn` (wait-die priority `priority`);
    /// `wait` false makes the request conditional (never blocks, never dies).
    pub fn acquire(
        &self,
        txn: u64,
        priority: u64,
        name: LockName,
        mode: LockMode,
        wait: bool,
        stats: &Stats,
    ) -> Result<Granted, Refused> {
        if !self.enabled {
            return Ok(Granted::Held);
        }
        let b = name.bucket();
        let mut bucket = self.lock_bucket(b);
        let mut waited = false;
        loop {
            let holders = bucket.locks.entry(name).or_default();
            let mine = holders.iter().position(|h| h.txn == txn);
            let target = match mine {
                Some(i) if holders[i].mode.covers(mode) => {
                    bump(&stats.locks);
                    return Ok(Granted::Held);
                }
                Some(i) => holders[i].mode.supremum(mode),
                None => mode,
            };
            let mut oldest_conflict = None::<u64>;
            for h in holders.iter().filter(|h| h.txn != txn && !target.compatible(h.mode)) {
                oldest_conflict = Some(oldest_conflict.map_or(h.priority, |p| p.min(h.priority)));
            }
            match oldest_conflict {
                None => {
                    bump(&stats.locks);
                    return Ok(match mine {
                        Some(i) => {
                            holders[i].mode = target;
                            Granted::Held
                        }
                        None => {
                            holders.push(Holder { txn, priority, mode: target });
                            Granted::New
                        }
                    });
                }
                Some(_) if !wait => {
                    if holders.is_empty() {
                        bucket.locks.remove(&name);
                    }
                    return Err(Refused::WouldWait);
                }
                Some(oldest) if priority > oldest => {
                    if holders.is_empty() {
                        bucket.locks.remove(&name);
                    }
                    bump(&stats.lock_conflicts);
                    return Err(Refused::Die);
                }
                Some(_) => {
                    if !waited {
                        bump(&stats.lock_waits);
                        waited = true;
                    }
                    bucket = self.buckets[b].1.wait(bucket).unwrap_or_else(|e| e.into_inner());
                }
            }
        }
    }

    /// Wait-die's restart delay: blocks, holding no locks, until `mode` on `name` is
    /// compatible with every holder, for at most [`RESTART_WAIT_MAX`].
    pub fn await_release(&self, name: LockName, mode: LockMode) {
        if !self.enabled {
            return;
        }
        let b = name.bucket();
        let deadline = Instant::now() + RESTART_WAIT_MAX;
        let mut bucket = self.lock_bucket(b);
        loop {
            let free = bucket.locks.get(&name).is_none_or(|hs| hs.iter().all(|h| mode.compatible(h.mode)));
            let now = Instant::now();
            if free || now >= deadline {
                return;
            }
            bucket = self.buckets[b].1.wait_timeout(bucket, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Releases every lock in `held` for `txn` (strict 2PL: at commit or abort) and wakes
    /// waiters.
    pub fn release_all(&self, txn: u64, held: &[LockName]) {
        if !self.enabled {
            return;
        }
        for name in held {
            let b = name.bucket();
            let mut bucket = self.lock_bucket(b);
            if let Some(holders) = bucket.locks.get_mut(name) {
                holders.retain(|h| h.txn != txn);
                if holders.is_empty() {
                    bucket.locks.remove(name);
                }
            }
            drop(bucket);
            self.buckets[b].1.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LockMode::*;

    fn rec(k: u64) -> LockName {
        LockName { table: TableId::Stock, record: Some(k) }
    }

    #[test]
    fn compatibility_matrix() {
        assert!(IntentionShared.compatible(IntentionExclusive));
        assert!(IntentionExclusive.compatible(IntentionExclusive));
        assert!(!IntentionExclusive.compatible(Shared));
        assert!(Shared.compatible(Shared));
        assert!(!Exclusive.compatible(IntentionShared));
        assert_eq!(Shared.supremum(IntentionExclusive), Exclusive);
    }

    #[test]
    fn wait_die_kills_the_younger_requester_and_lets_the_older_wait() {
        let lm = LockManager::new(true);
        let s = Stats::default();
        // Old transaction 1 (priority 1) holds X; young 2 (priority 2) dies requesting S.
        assert_eq!(lm.acquire(1, 1, rec(7), Exclusive, true, &s), Ok(Granted::New));
        assert_eq!(lm.acquire(2, 2, rec(7), Shared, true, &s), Err(Refused::Die));
        assert_eq!(lm.acquire(2, 2, rec(7), Shared, false, &s), Err(Refused::WouldWait));
        // Young 2 holds X on 8; old 1 waits until 2 releases.
        assert_eq!(lm.acquire(2, 2, rec(8), Exclusive, true, &s), Ok(Granted::New));
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| lm.acquire(1, 1, rec(8), Shared, true, &Stats::default()));
            std::thread::sleep(std::time::Duration::from_millis(20));
            lm.release_all(2, &[rec(8)]);
            assert_eq!(waiter.join().unwrap(), Ok(Granted::New));
        });
        assert_eq!(lm.acquire(1, 1, rec(7), Shared, true, &s), Ok(Granted::Held));
        let off = LockManager::new(false);
        let s = Stats::default();
        assert_eq!(off.acquire(1, 1, rec(7), Exclusive, true, &s), Ok(Granted::Held));
        assert_eq!(s.locks.get(), 0);
    }
}
