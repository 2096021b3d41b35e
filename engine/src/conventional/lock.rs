//! The lock manager: a hashed lock table of hierarchical locks as Shore has them — volume,
//! store, page, record, and key locks on indexes — in the modes IS, IX, S, SIX and X with the
//! standard compatibility matrix (Gray & Reuter, ch. 7, §7.8 "granular locks"), held under
//! strict two-phase locking (released only at commit or abort).
//!
//! What is locked (the session takes these; see its module documentation):
//! - [`LockName::Volume`]: the whole database, the root of the hierarchy;
//! - [`LockName::Store`]: a table's primary file (its table id) or a secondary index's store
//!   (CUSTOMER's name index is store 9, ORDERS' customer index store 10);
//! - [`LockName::Page`]: a page of a store (the B+tree leaf holding a row, a heap page);
//! - [`LockName::Record`]: a row, by its packed primary key (for a B+tree table this is the
//!   key lock on its primary index) or by its heap record id;
//! - [`LockName::Key`]: a secondary index key, by a 64-bit hash of its encoded bytes (a
//!   collision can only make two keys conflict that need not, never let a conflict pass).
//!
//! Intention modes (Gray & Reuter §7.8): before S or IS on a node a transaction holds IS (or
//! stronger) on every ancestor, before X, SIX or IX it holds IX (or stronger). IS and IX
//! coexist (two transactions reading and writing different rows of one table); S on a node
//! conflicts with IX on it (a whole-table reader against a row writer); SIX (S on the whole
//! node plus the intention to write some descendants) is the supremum of S and IX, kept as
//! such rather than rounded up to X. Nothing in the engine requests S, SIX or X on a volume,
//! store or page (there is no lock escalation), so an intention lock on a page is compatible
//! with every lock anyone requests on it; the session relies on that to request page
//! intention locks conditionally under the page's latch.
//!
//! Deadlocks are prevented by **wait-die** (Rosenkrantz, Stearns & Lewis, 1978), across all
//! levels alike: every transaction carries a priority (smaller = older); a requester may wait
//! only for holders younger than itself, and a younger requester that conflicts with an older
//! holder "dies" at once ([`Refused::Die`]: the caller aborts with `StorageError::Conflict` and
//! retries). Waits-for edges therefore always point from older to younger, so no cycle can
//! form. A retried transaction keeps its first priority (see the session), so it eventually
//! becomes the oldest and cannot starve; and it restarts only once the lock it died on is
//! free (or after [`RESTART_WAIT_MAX`]), the usual restart delay that keeps a young
//! transaction from dying again and again while an older holder waits for its commit's
//! `fdatasync`. Requests are not queued: a waiter re-examines the holders whenever a lock in
//! its bucket is released, and is granted as soon as it is compatible with all of them.
//!
//! The table: [`LOCK_TABLE_BUCKETS`] buckets, each a mutex, a condition variable and a count
//! of the threads waiting on it; a lock name is hashed multiplicatively (no SipHash). A bucket
//! keeps its lock heads in a vector whose first `live` entries are in use and whose tail is a
//! free list of heads kept with their holder vectors' capacity, so acquiring and releasing a
//! lock in steady state allocates nothing. A release wakes the bucket's waiters only when it
//! has any (lock waiters and [`LockManager::await_release`] alike).
//!
//! With the locking switch off (the paper's locking removal, Harizopoulos et al., SIGMOD 2008,
//! Section 4) the manager is built disabled and every call returns at once, granting nothing
//! and counting nothing.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::page::PageNo;
use super::stats::{bump, Stats};

/// Buckets of the lock table (a power of two).
pub(crate) const LOCK_TABLE_BUCKETS: usize = 1 << BUCKET_BITS;
const BUCKET_BITS: u32 = 10;
/// Holder slots a fresh lock head is given (grown, rarely, and then kept).
const HOLDERS_INITIAL: usize = 4;
/// Longest a transaction that died under wait-die waits for the lock it died on before it
/// restarts (holding no locks, so the wait cannot deadlock).
pub(crate) const RESTART_WAIT_MAX: Duration = Duration::from_millis(50);

/// Lock modes (Gray & Reuter §7.8): intention shared, intention exclusive, shared, shared
/// with intention exclusive, exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockMode {
    IntentionShared,
    IntentionExclusive,
    Shared,
    SharedIntentionExclusive,
    Exclusive,
}

use LockMode::{
    Exclusive as X, IntentionExclusive as IX, IntentionShared as IS, Shared as S, SharedIntentionExclusive as SIX,
};

/// The compatibility matrix, rows and columns in [`LockMode`] order (IS, IX, S, SIX, X).
const COMPATIBLE: [[bool; 5]; 5] = [
    //  IS     IX     S      SIX    X
    [true, true, true, true, false],     // IS
    [true, true, false, false, false],   // IX
    [true, false, true, false, false],   // S
    [true, false, false, false, false],  // SIX
    [false, false, false, false, false], // X
];

/// The supremum in the mode lattice IS < {IX, S} < SIX < X: the weakest mode at least as
/// strong as both (what a conversion grants).
const SUPREMUM: [[LockMode; 5]; 5] = [
    //  IS   IX   S    SIX  X
    [IS, IX, S, SIX, X],     // IS
    [IX, IX, SIX, SIX, X],   // IX
    [S, SIX, S, SIX, X],     // S
    [SIX, SIX, SIX, SIX, X], // SIX
    [X, X, X, X, X],         // X
];

impl LockMode {
    /// Whether a lock in this mode may be granted while another transaction holds `other`.
    #[inline]
    pub fn compatible(self, other: LockMode) -> bool {
        COMPATIBLE[self as usize][other as usize]
    }

    /// The weakest mode at least as strong as both.
    #[inline]
    pub fn supremum(self, other: LockMode) -> LockMode {
        SUPREMUM[self as usize][other as usize]
    }

    /// Whether holding this mode grants `wanted` too.
    #[inline]
    pub fn covers(self, wanted: LockMode) -> bool {
        self.supremum(wanted) == self
    }

    /// The intention mode the ancestors must be held in before this mode is requested on a
    /// node: IS under IS and S, IX under IX, SIX and X (Gray & Reuter §7.8).
    #[inline]
    pub fn intention(self) -> LockMode {
        match self {
            IS | S => IS,
            IX | SIX | X => IX,
        }
    }
}

/// A lock name: one node of the hierarchy volume → store → page → record, or a key of a
/// secondary index (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockName {
    /// The whole database.
    Volume,
    /// A store: a table's primary file or a secondary index.
    Store(u16),
    /// A page of a store.
    Page(u16, PageNo),
    /// A row of a store: its packed primary key or its heap record id.
    Record(u16, u64),
    /// A key of a secondary index's store, by the hash of its encoded bytes.
    Key(u16, u64),
}

impl LockName {
    /// A cheap multiplicative hash (Fibonacci hashing: the product's high bits pick the bucket).
    #[inline]
    fn bucket(self) -> usize {
        let (tag, store, id) = match self {
            LockName::Volume => (0u64, 0u16, 0u64),
            LockName::Store(s) => (1, s, 0),
            LockName::Page(s, p) => (2, s, p as u64),
            LockName::Record(s, k) => (3, s, k),
            LockName::Key(s, h) => (4, s, h),
        };
        let k = id ^ (((tag << 16) | store as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F));
        ((k ^ (k >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - BUCKET_BITS)) as usize
    }
}

#[derive(Debug, Clone, Copy)]
struct Holder {
    txn: u64,
    priority: u64,
    mode: LockMode,
}

/// A lock head: a name and the transactions holding it.
struct Head {
    name: LockName,
    holders: Vec<Holder>,
}

/// One bucket's lock heads: `heads[..live]` are in use; `heads[live..]` are free heads kept
/// (with their holder vectors' capacity) for the next lock hashed here.
#[derive(Default)]
struct Bucket {
    heads: Vec<Head>,
    live: usize,
    /// Threads blocked on this bucket's condition variable (lock waiters and restart delays).
    waiters: usize,
}

impl Bucket {
    #[inline]
    fn find(&self, name: LockName) -> Option<usize> {
        self.heads[..self.live].iter().position(|h| h.name == name)
    }

    /// Grants `mode` on `name` to `txn` if it is compatible with every other holder;
    /// otherwise returns the priority of the oldest conflicting holder.
    fn grant(&mut self, txn: u64, priority: u64, name: LockName, mode: LockMode) -> Result<Granted, u64> {
        let Some(i) = self.find(name) else {
            self.open(name).push(Holder { txn, priority, mode });
            return Ok(Granted::New);
        };
        let holders = &mut self.heads[i].holders;
        let mine = holders.iter().position(|h| h.txn == txn);
        let target = match mine {
            Some(j) if holders[j].mode.covers(mode) => return Ok(Granted::Held),
            Some(j) => holders[j].mode.supremum(mode),
            None => mode,
        };
        let oldest = holders.iter().filter(|h| h.txn != txn && !target.compatible(h.mode)).map(|h| h.priority).min();
        if let Some(p) = oldest {
            return Err(p);
        }
        match mine {
            Some(j) => {
                holders[j].mode = target;
                Ok(Granted::Held)
            }
            None => {
                holders.push(Holder { txn, priority, mode: target });
                Ok(Granted::New)
            }
        }
    }

    /// A head for `name` (which has none), taken from the free tail when there is one.
    fn open(&mut self, name: LockName) -> &mut Vec<Holder> {
        if self.live == self.heads.len() {
            self.heads.push(Head { name, holders: Vec::with_capacity(HOLDERS_INITIAL) });
        }
        let head = &mut self.heads[self.live];
        self.live += 1;
        debug_assert!(head.holders.is_empty());
        head.name = name;
        &mut head.holders
    }

    /// Drops `txn` from `name`'s holders; a head left without holders goes to the free tail.
    fn release(&mut self, txn: u64, name: LockName) {
        let Some(i) = self.find(name) else { return };
        let holders = &mut self.heads[i].holders;
        if let Some(j) = holders.iter().position(|h| h.txn == txn) {
            holders.swap_remove(j);
        }
        if holders.is_empty() {
            self.live -= 1;
            self.heads.swap(i, self.live);
        }
    }

    /// Whether `mode` on `name` is compatible with every holder.
    fn free_for(&self, name: LockName, mode: LockMode) -> bool {
        self.find(name).is_none_or(|i| self.heads[i].holders.iter().all(|h| mode.compatible(h.mode)))
    }
}

/// A bucket and the condition variable its waiters block on, on a cache line of its own.
#[repr(align(64))]
struct Slot {
    bucket: Mutex<Bucket>,
    released: Condvar,
}

impl Slot {
    #[inline]
    fn lock(&self) -> MutexGuard<'_, Bucket> {
        self.bucket.lock().unwrap_or_else(|e| e.into_inner())
    }
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
    /// Already held in this or a stronger mode, or converted in place (to the supremum of the
    /// held and requested modes).
    Held,
}

/// The lock table.
pub(crate) struct LockManager {
    enabled: bool,
    slots: Box<[Slot]>,
}

impl LockManager {
    pub fn new(enabled: bool) -> LockManager {
        let n = if enabled { LOCK_TABLE_BUCKETS } else { 0 };
        LockManager {
            enabled,
            slots: (0..n).map(|_| Slot { bucket: Mutex::default(), released: Condvar::new() }).collect(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    #[inline]
    fn slot(&self, name: LockName) -> &Slot {
        &self.slots[name.bucket()]
    }

    /// Requests `mode` on `name` for transaction `txn` (wait-die priority `priority`);
    /// `wait` false makes the request conditional (never blocks, never dies). A request for a
    /// lock the transaction holds converts it to the supremum of both modes (S then IX is
    /// SIX). Counts one granted request, one wait per request that waited, one conflict per
    /// death.
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
        let slot = self.slot(name);
        let mut bucket = slot.lock();
        let mut waited = false;
        loop {
            let outcome = match bucket.grant(txn, priority, name, mode) {
                Ok(granted) => {
                    bump(&stats.locks);
                    Ok(granted)
                }
                Err(_) if !wait => Err(Refused::WouldWait),
                Err(oldest) if priority > oldest => {
                    bump(&stats.lock_conflicts);
                    Err(Refused::Die)
                }
                Err(_) => {
                    if !waited {
                        bump(&stats.lock_waits);
                        bucket.waiters += 1;
                        waited = true;
                    }
                    bucket = slot.released.wait(bucket).unwrap_or_else(|e| e.into_inner());
                    continue;
                }
            };
            if waited {
                bucket.waiters -= 1;
            }
            return outcome;
        }
    }

    /// Wait-die's restart delay: blocks, holding no locks, until `mode` on `name` is
    /// compatible with every holder, for at most [`RESTART_WAIT_MAX`].
    pub fn await_release(&self, name: LockName, mode: LockMode) {
        if !self.enabled {
            return;
        }
        let slot = self.slot(name);
        let deadline = Instant::now() + RESTART_WAIT_MAX;
        let mut bucket = slot.lock();
        if bucket.free_for(name, mode) {
            return;
        }
        bucket.waiters += 1;
        loop {
            let now = Instant::now();
            if bucket.free_for(name, mode) || now >= deadline {
                bucket.waiters -= 1;
                return;
            }
            bucket = slot.released.wait_timeout(bucket, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Releases every lock in `held` for `txn` (strict 2PL: at commit or abort), waking a
    /// bucket's waiters only when it has any.
    pub fn release_all(&self, txn: u64, held: &[LockName]) {
        if !self.enabled {
            return;
        }
        for &name in held {
            let slot = self.slot(name);
            let mut bucket = slot.lock();
            bucket.release(txn, name);
            let wake = bucket.waiters > 0;
            drop(bucket);
            if wake {
                slot.released.notify_all();
            }
        }
    }

    /// Threads waiting in `name`'s bucket (tests: to see a waiter blocked).
    #[cfg(test)]
    pub fn waiters(&self, name: LockName) -> usize {
        self.slot(name).lock().waiters
    }

    /// Who holds `name`, in what mode (tests).
    #[cfg(test)]
    pub fn holders(&self, name: LockName) -> Vec<(u64, LockMode)> {
        let bucket = self.slot(name).lock();
        let mut v: Vec<_> =
            bucket.find(name).map_or(Vec::new(), |i| bucket.heads[i].holders.iter().map(|h| (h.txn, h.mode)).collect());
        v.sort_by_key(|h| h.0);
        v
    }

    /// Lock heads allocated and holder slots reserved over the whole table (tests: steady
    /// state allocates nothing).
    #[cfg(test)]
    fn footprint(&self) -> (usize, usize, usize) {
        self.slots.iter().fold((0, 0, 0), |(heads, slots, live), s| {
            let b = s.lock();
            (heads + b.heads.len(), slots + b.heads.iter().map(|h| h.holders.capacity()).sum::<usize>(), live + b.live)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conventional::session::{key_lock, secondary_key};
    use crate::conventional::{Config, ConventionalDb, Medium, MemoryMedium, Step};
    use crate::schema::{fixed, keys, t, Customer, CustomerNameKey, Stock, TableId};
    use crate::{ScanDir, Storage};
    use bytemuck::Zeroable;

    const ALL: [LockMode; 5] = [IS, IX, S, SIX, X];

    fn rec(k: u64) -> LockName {
        LockName::Record(TableId::Stock as u16, k)
    }

    fn store() -> LockName {
        LockName::Store(TableId::Stock as u16)
    }

    /// Spins (no sleep) until a thread waits in `name`'s bucket.
    fn until_waiting(lm: &LockManager, name: LockName) {
        while lm.waiters(name) == 0 {
            std::thread::yield_now();
        }
    }

    /// Gray & Reuter §7.8: the compatibility matrix of IS, IX, S, SIX, X — symmetric, IS
    /// compatible with all but X, IX with intentions only, S with IS and S, SIX with IS only,
    /// X with nothing — and the lattice IS < {IX, S} < SIX < X.
    #[test]
    fn compatibility_matrix_with_six() {
        let want = |a: LockMode, b: LockMode| match (a, b) {
            (X, _) | (_, X) => false,
            (IS, _) | (_, IS) => true,
            (IX, IX) | (S, S) => true,
            _ => false,
        };
        for a in ALL {
            for b in ALL {
                assert_eq!(a.compatible(b), want(a, b), "{a:?} vs {b:?}");
                assert_eq!(a.compatible(b), b.compatible(a), "symmetric: {a:?} vs {b:?}");
                let sup = a.supremum(b);
                assert!(sup.covers(a) && sup.covers(b), "{a:?} ∨ {b:?} = {sup:?}");
                // The supremum is the weakest: no weaker mode covers both.
                for m in ALL {
                    if m.covers(a) && m.covers(b) {
                        assert!(m.covers(sup), "{m:?} covers {a:?} and {b:?} but not {sup:?}");
                    }
                }
            }
        }
        assert_eq!(S.supremum(IX), SIX, "S and IX make SIX, not X");
        assert_eq!(SIX.supremum(IS), SIX);
        assert_eq!(SIX.supremum(S), SIX);
        assert_eq!(X.intention(), IX);
        assert_eq!(SIX.intention(), IX);
        assert_eq!(S.intention(), IS);
    }

    /// Gray & Reuter §7.8: IS and IX on one table coexist (readers and writers of different
    /// rows); S on the table conflicts with another transaction's IX and X with its IS.
    #[test]
    fn table_intentions_coexist_and_table_s_conflicts_with_ix() {
        let lm = LockManager::new(true);
        let s = Stats::default();
        assert_eq!(lm.acquire(1, 1, store(), IX, true, &s), Ok(Granted::New));
        assert_eq!(lm.acquire(2, 2, store(), IS, true, &s), Ok(Granted::New));
        assert_eq!(lm.acquire(3, 3, store(), IX, true, &s), Ok(Granted::New));
        assert_eq!(lm.acquire(4, 4, store(), S, false, &s), Err(Refused::WouldWait));
        assert_eq!(lm.acquire(4, 4, store(), S, true, &s), Err(Refused::Die));
        lm.release_all(1, &[store()]);
        lm.release_all(3, &[store()]);
        // Only IS remains: S is compatible, X is not.
        assert_eq!(lm.acquire(4, 4, store(), S, true, &s), Ok(Granted::New));
        assert_eq!(lm.acquire(5, 5, store(), X, false, &s), Err(Refused::WouldWait));
        assert_eq!(s.locks.get(), 4);
        assert_eq!(s.lock_conflicts.get(), 1);
    }

    /// Gray & Reuter §7.8: a transaction holding S on a table that asks for IX holds SIX: it
    /// still admits readers of single rows (IS) but no other writer (IX) nor reader of the
    /// whole table (S); then X converts SIX up.
    #[test]
    fn s_then_ix_converts_to_six_not_x() {
        let lm = LockManager::new(true);
        let s = Stats::default();
        assert_eq!(lm.acquire(1, 1, store(), S, true, &s), Ok(Granted::New));
        assert_eq!(lm.acquire(1, 1, store(), IX, true, &s), Ok(Granted::Held));
        assert_eq!(lm.holders(store()), vec![(1, SIX)]);
        assert_eq!(lm.acquire(1, 1, store(), IS, true, &s), Ok(Granted::Held), "SIX covers IS");
        assert_eq!(lm.acquire(2, 2, store(), IS, false, &s), Ok(Granted::New), "SIX admits IS");
        assert_eq!(lm.acquire(3, 3, store(), IX, false, &s), Err(Refused::WouldWait));
        assert_eq!(lm.acquire(3, 3, store(), S, false, &s), Err(Refused::WouldWait));
        // 1 converting SIX to X conflicts with 2's IS: older 1 waits for younger 2.
        std::thread::scope(|scope| {
            let up = scope.spawn(|| lm.acquire(1, 1, store(), X, true, &Stats::default()));
            until_waiting(&lm, store());
            assert!(!up.is_finished());
            assert_eq!(lm.holders(store()), vec![(1, SIX), (2, IS)], "the waiter holds SIX meanwhile");
            lm.release_all(2, &[store()]);
            assert_eq!(up.join().unwrap(), Ok(Granted::Held));
        });
        assert_eq!(lm.holders(store()), vec![(1, X)]);
        assert_eq!(lm.waiters(store()), 0);
    }

    /// Wait-die (Rosenkrantz et al.; Gray & Reuter ch. 7) on a record: the younger requester
    /// dies, the older one waits and is granted after the release; the disabled manager grants
    /// and counts nothing.
    #[test]
    fn wait_die_kills_the_younger_requester_and_lets_the_older_wait() {
        let lm = LockManager::new(true);
        let s = Stats::default();
        assert_eq!(lm.acquire(1, 1, rec(7), X, true, &s), Ok(Granted::New));
        assert_eq!(lm.acquire(2, 2, rec(7), S, true, &s), Err(Refused::Die));
        assert_eq!(lm.acquire(2, 2, rec(7), S, false, &s), Err(Refused::WouldWait));
        assert_eq!(lm.acquire(2, 2, rec(8), X, true, &s), Ok(Granted::New));
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let s = Stats::default();
                (lm.acquire(1, 1, rec(8), S, true, &s), s.lock_waits.get())
            });
            until_waiting(&lm, rec(8));
            assert!(!waiter.is_finished());
            lm.release_all(2, &[rec(8)]);
            assert_eq!(waiter.join().unwrap(), (Ok(Granted::New), 1));
        });
        assert_eq!(lm.acquire(1, 1, rec(7), S, true, &s), Ok(Granted::Held));
        assert_eq!(lm.waiters(rec(8)), 0);
        let off = LockManager::new(false);
        let s = Stats::default();
        assert_eq!(off.acquire(1, 1, rec(7), X, true, &s), Ok(Granted::Held));
        off.release_all(1, &[rec(7)]);
        off.await_release(rec(7), X);
        assert_eq!((s.locks.get(), s.lock_waits.get(), s.lock_conflicts.get()), (0, 0, 0));
    }

    /// Wait-die's restart delay waits until the lock is free, registered as a waiter so that
    /// the release wakes it.
    #[test]
    fn await_release_returns_when_the_lock_is_free() {
        let lm = LockManager::new(true);
        let s = Stats::default();
        lm.await_release(rec(1), X); // free: returns at once
        assert_eq!(lm.acquire(1, 1, rec(1), S, true, &s), Ok(Granted::New));
        lm.await_release(rec(1), S); // compatible: returns at once
        std::thread::scope(|scope| {
            let delayed = scope.spawn(|| lm.await_release(rec(1), X));
            until_waiting(&lm, rec(1));
            lm.release_all(1, &[rec(1)]);
            delayed.join().unwrap();
        });
        assert_eq!(lm.waiters(rec(1)), 0);
    }

    /// The lock table recycles its heads: after a warm-up, acquiring and releasing locks on
    /// ever new names allocates no head and no holder slot.
    #[test]
    fn steady_state_acquire_and_release_allocate_nothing() {
        let lm = LockManager::new(true);
        let s = Stats::default();
        let names = |round: u64| {
            (0..64u64).map(move |i| match i % 4 {
                0 => LockName::Record(1, round * 64 + i),
                1 => LockName::Page(2, (round * 64 + i) as PageNo),
                2 => LockName::Key(9, (round * 64 + i).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                _ => LockName::Store((i % 11) as u16),
            })
        };
        let round = |r: u64| {
            let held: Vec<LockName> = names(r).collect();
            for txn in 1..=3 {
                for &n in &held {
                    lm.acquire(txn, txn, n, IS, true, &s).unwrap();
                }
            }
            for txn in 1..=3 {
                lm.release_all(txn, &held);
            }
        };
        for r in 0..200 {
            round(r);
        }
        let warm = lm.footprint();
        assert_eq!(warm.2, 0, "every head released");
        // The warm-up's rounds again: each round's names differ from the last round's, so
        // every head serves another name than before, taken from its bucket's free tail.
        for r in 0..200 {
            round(r);
        }
        assert_eq!(lm.footprint(), warm, "steady state reuses heads and holder slots");
    }

    /// Shore's hierarchy through the engine (Gray & Reuter §7.8; wait-die across levels): a
    /// session's update holds IX on the volume, the table's stores and the heap page holding the
    /// row and X on the row;
    /// a younger transaction asking S on the table (store) or the volume dies at once, an
    /// older one waits, blocked, until the session commits, then is granted.
    #[test]
    fn wait_die_across_levels_against_a_session() {
        let db =
            ConventionalDb::open_on(&Medium::Memory(MemoryMedium::new()), Config::for_step(Step::new(2).unwrap(), 2))
                .unwrap();
        let mut s = db.session().unwrap();
        s.insert::<t::Stocks>(&Stock { s_w_id: 1, s_i_id: 5, s_quantity: 10, ..Stock::zeroed() }).unwrap();
        s.begin(1);
        s.update::<t::Stocks, _>(keys::stock(1, 5), |r| r.s_quantity += 1).unwrap().unwrap();
        let lm = &db.locks;
        let stock = LockName::Store(TableId::Stock as u16);
        let row = LockName::Record(TableId::Stock as u16, keys::stock(1, 5));
        let (holder, _) = lm.holders(row)[0];
        assert_eq!(lm.holders(row), vec![(holder, X)]);
        assert_eq!(lm.holders(stock), vec![(holder, IX)]);
        assert_eq!(lm.holders(LockName::Volume), vec![(holder, IX)]);
        let heap = crate::conventional::heap_store(TableId::Stock);
        assert_eq!(lm.holders(LockName::Store(heap)), vec![(holder, IX)], "the heap file");
        assert_eq!(lm.holders(LockName::Page(heap, 1)), vec![(holder, IX)], "the heap page holding the row");
        let st = Stats::default();
        let (young, old) = (u64::MAX - 1, u64::MAX - 2);
        assert_eq!(lm.acquire(young, u64::MAX, stock, S, true, &st), Err(Refused::Die));
        assert_eq!(lm.acquire(young, u64::MAX, LockName::Volume, X, true, &st), Err(Refused::Die));
        assert_eq!(lm.acquire(young, u64::MAX, stock, IS, true, &st), Ok(Granted::New), "IS and IX coexist");
        lm.release_all(young, &[stock]);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| lm.acquire(old, 0, stock, S, true, &Stats::default()));
            until_waiting(lm, stock);
            assert!(!waiter.is_finished());
            s.commit().unwrap();
            assert_eq!(waiter.join().unwrap(), Ok(Granted::New));
        });
        assert_eq!(lm.holders(stock), vec![(old, S)]);
        assert!(lm.holders(row).is_empty() && lm.holders(LockName::Volume).is_empty());
        lm.release_all(old, &[stock]);
    }

    /// Key locks on a secondary index (Gray & Reuter ch. 7): an insert X-locks the secondary
    /// key it adds and a delete the one it removes, each under IX on the index's store (9:
    /// CUSTOMER's name index) and the volume, beside X on the rows' primary keys; a scan by
    /// name S-locks the name keys it returns under IS on the index's store. All of it is
    /// released at commit.
    #[test]
    fn writes_and_scans_lock_secondary_keys_on_the_index_store() {
        let db =
            ConventionalDb::open_on(&Medium::Memory(MemoryMedium::new()), Config::for_step(Step::new(2).unwrap(), 1))
                .unwrap();
        let customer =
            |c: u32, last: &[u8]| Customer { c_w_id: 1, c_d_id: 1, c_id: c, c_last: fixed(last), ..Customer::zeroed() };
        let (old, new) = (customer(1, b"ABLE"), customer(2, b"BAR"));
        let mut s = db.session().unwrap();
        s.insert::<t::Customers>(&old).unwrap();
        let (index, table) = (9u16, TableId::Customer as u16);
        let name = |c: &Customer| key_lock(index, secondary_key::<t::Customers>(c).as_slice());
        let lm = &db.locks;

        s.begin(1);
        let mut found = Vec::new();
        let (lo, hi) = (
            CustomerNameKey { w_id: 1, d_id: 1, ..Default::default() },
            CustomerNameKey { w_id: 1, d_id: 1, last: [0xFF; 16], first: [0xFF; 16], c_id: u32::MAX },
        );
        s.scan_secondary::<t::Customers>(lo, hi, ScanDir::Forward, |pk| {
            found.push(pk);
            true
        })
        .unwrap();
        assert_eq!(found, vec![keys::customer(1, 1, 1)]);
        let txn = lm.holders(LockName::Volume)[0].0;
        assert_eq!(lm.holders(name(&old)), vec![(txn, S)]);
        assert_eq!(lm.holders(LockName::Record(table, keys::customer(1, 1, 1))), vec![(txn, S)]);
        assert_eq!(lm.holders(LockName::Store(index)), vec![(txn, IS)]);

        s.insert::<t::Customers>(&new).unwrap();
        assert!(s.delete::<t::Customers>(keys::customer(1, 1, 1)).unwrap().is_some());
        assert_eq!(lm.holders(name(&new)), vec![(txn, X)], "the key the insert adds");
        assert_eq!(lm.holders(name(&old)), vec![(txn, X)], "the key the delete removes");
        assert_eq!(lm.holders(LockName::Record(table, keys::customer(1, 1, 2))), vec![(txn, X)]);
        assert_eq!(lm.holders(LockName::Store(index)), vec![(txn, IX)]);
        assert_eq!(lm.holders(LockName::Store(table)), vec![(txn, IX)]);
        assert_eq!(lm.holders(LockName::Volume), vec![(txn, IX)]);
        s.commit().unwrap();
        for n in [name(&old), name(&new), LockName::Store(index), LockName::Store(table), LockName::Volume] {
            assert!(lm.holders(n).is_empty(), "{n:?} released at commit");
        }
    }
}
