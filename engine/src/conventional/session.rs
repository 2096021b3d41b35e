//! Worker sessions: one per worker thread, each implementing [`Storage`] over the shared
//! engine, so the TPC-C procedures run on the conventional stack unchanged.
//!
//! Owns: the transaction a worker runs (its id and wait-die priority, the locks it holds,
//! its undo information), the directory strategy (catalog lookup per access, or handles
//! cached at session start), and the worker's component counters.
//!
//! Every access goes the conventional way (Shore's storage manager per call): look the table
//! up in the directory, request the locks (strict 2PL, below), descend the primary index with
//! latch coupling to the record id, fix and latch the heap page, decode the record into a
//! typed copy, run the procedure's closure, log the before and after images and stamp the
//! page LSN under the page's latch, re-encode, unlatch, unfix. Operations outside
//! `begin`/`commit` are a bulk load: no locks, no log.
//!
//! Locking, as Shore does it (hierarchical locks, Gray & Reuter ch. 7, §7.8; the lock names
//! are in [`super::lock`]). Intention locks go top-down before the lock below them: IS for a
//! read, IX for a write, on the volume and then on the store. The transaction caches the mode
//! it holds on the volume and on each store, so a repeated intention is not requested again
//! (a stronger one is: IS then IX converts); page, record and key locks are requested on
//! every access, held or not, as Shore re-requests them. What each access locks:
//! - `get`: S on the row's primary key, then IS on the heap page holding the record;
//! - `update`: X on the primary key, then IX on the heap page;
//! - `delete`: X on the primary key, X on the secondary key it removes (if the table has a
//!   secondary index), X on the record id it frees (held to commit: no one reuses the slot
//!   before), IX on the primary-index leaf, the heap page and the secondary-index leaf;
//! - `insert`: X on the primary key and the secondary key it adds, X on the record id it
//!   takes (conditionally under the heap page's latch: a freed slot whose deleter holds it is
//!   passed by, a fresh one cannot be held), IX on the heap page and on each index leaf it
//!   changes (HISTORY: the record id and the page only);
//! - `scan`: S on each row's primary key it returns, IS on the heap page of each record it
//!   reads; `scan_secondary`: S on each secondary key it returns and on its row's primary key
//!   (IS on both stores). Entries are locked conditionally under the leaf's latch; a request
//!   that would wait stops the leaf's batch, waits with no latch held, and the scan
//!   re-descends at that key.
//!
//! The page holding a record or an entry is known only under its latch, so a page intention
//! lock is requested there, conditionally (it never waits under a latch). No one requests S, SIX or
//! X on a page (there is no lock escalation), so it is always granted — which also makes it
//! sound to request it after the record lock: the point of the top-down order is that no
//! coarser S or X lock on the page can be granted past a lock below it, and there is none; a
//! refusal would be answered with `StorageError::Conflict` (abort and retry). The record and
//! key locks of point accesses come before the descent because they may wait, must lock
//! absent keys too (a `get` of a missing key, an `insert`), and a B+tree change cannot be
//! taken back inside its latch. Scans take IS on each leaf they read, and a secondary-index
//! entry's insert or delete IX on the index leaf it changes, the same way. Not locked: key
//! ranges (no phantom protection, as in Shore's default record locking). Deadlocks are
//! prevented by wait-die in the lock manager; a transaction that died keeps its priority for
//! its retry and, after its abort, waits for the lock it died on (the restart delay).
//!
//! Undo: with log records on, the transaction keeps a copy of the records it appended and
//! abort walks them backwards, applying each before image and writing a compensation log
//! record (CLR) whose undo-next LSN is the undone record's previous LSN (ARIES); with log
//! records off, a private undo list of before images does the same without a log.

use std::cell::RefCell;
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64;

use super::btree::{BTree, Cursor, KeyBuf, ScanNext};
use super::heap::Rid;
use super::lock::{Granted, LockMode, LockName, Refused};
use super::log::{decode, encode, ClrAction, Head, Kind};
use super::page::PageNo;
use super::stats::{bump, Counters, Stats};
use super::{heap_store, rid_value, secondary_store, undo_action, undo_of, ConventionalDb, Index, TableEntry, STORES};
use crate::error::StorageError;
use crate::schema::{Organisation, SecondaryKey, Table, TableId};
use crate::storage::{ScanDir, Storage};

/// How a session finds a table's handles (the paper's directory-lookup switch).
enum Directory {
    /// Look the table up by name in the catalog, under its latch, on every access.
    Catalog,
    /// Handles cached when the session opened.
    Cached(Box<[Arc<TableEntry>]>),
}

enum TableRef<'a> {
    Looked(Arc<TableEntry>),
    Cached(&'a TableEntry),
}

impl std::ops::Deref for TableRef<'_> {
    type Target = TableEntry;
    #[inline]
    fn deref(&self) -> &TableEntry {
        match self {
            TableRef::Looked(e) => e,
            TableRef::Cached(e) => e,
        }
    }
}

impl Directory {
    #[inline]
    fn entry<'a>(&'a self, db: &ConventionalDb, id: TableId, stats: &Stats) -> TableRef<'a> {
        match self {
            Directory::Catalog => TableRef::Looked(db.lookup(id, stats)),
            Directory::Cached(tables) => TableRef::Cached(&tables[id as usize]),
        }
    }
}

struct Txn {
    id: u64,
    priority: u64,
    /// LSN of this transaction's last log record (0 = none).
    last_lsn: u64,
    /// Every lock granted anew (released at commit or abort).
    locks: Vec<LockName>,
    /// The mode held on the volume (cached: requested again only for a stronger mode).
    volume: Option<LockMode>,
    /// The mode held on each store (cached likewise).
    stores: [Option<LockMode>; STORES],
}

#[derive(Clone, Copy)]
struct PrivateUndo {
    table: TableId,
    action: ClrAction,
    key: u64,
    at: usize,
    len: usize,
}

/// The running transaction's undo information.
enum Undo {
    /// Copies of the transaction's own log records (exact bytes as appended).
    Log { records: Vec<u8>, starts: Vec<usize> },
    /// Before images without a log (log records switched off).
    Private { entries: Vec<PrivateUndo>, images: Vec<u8> },
}

impl Undo {
    fn clear(&mut self) {
        match self {
            Undo::Log { records, starts } => {
                records.clear();
                starts.clear();
            }
            Undo::Private { entries, images } => {
                entries.clear();
                images.clear();
            }
        }
    }
}

/// One undo action: what to apply and, for the CLR, the undone record's previous LSN.
struct UndoStep {
    table: TableId,
    action: ClrAction,
    key: u64,
    image_at: usize,
    image_len: usize,
    undo_next: u64,
}

/// Per-worker mutable state, split from the directory so both can be borrowed at once.
struct Work {
    txn: Option<Txn>,
    /// Wait-die priority kept from a transaction that died, for its retry.
    retry_priority: Option<u64>,
    /// The lock the running transaction died on (awaited after its abort).
    died_on: Option<(LockName, LockMode)>,
    /// The held-locks list of the last transaction, emptied, kept for the next one.
    spare_locks: Vec<LockName>,
    undo: Undo,
    batch: Vec<u8>,
    session_id: u64,
    local_txns: u64,
    /// The running transaction's timestamp, written into its commit record.
    ts: u64,
    /// Heap pages the running transaction freed records on: offered to the free-space map
    /// when it commits.
    freed: Vec<(TableId, PageNo)>,
}

/// A worker's session on a [`ConventionalDb`]; implements [`Storage`].
pub struct Session {
    db: Arc<ConventionalDb>,
    dir: Directory,
    stats: Stats,
    work: Work,
    totals: Counters,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("session_id", &self.work.session_id).finish_non_exhaustive()
    }
}

const CONFLICT_WAIT_DIE: &str = "wait-die: a younger transaction requested a lock an older one holds";
const CONFLICT_PAGE: &str = "a page intention lock was refused under the page's latch";

/// The lock name of a secondary index key: its store and a hash of its encoded bytes.
#[inline]
pub(super) fn key_lock(store: u16, key: &[u8]) -> LockName {
    LockName::Key(store, xxh3_64(key))
}

/// The encoded secondary key of a row of `T`.
pub(super) fn secondary_key<T: Table>(row: &T::Row) -> KeyBuf {
    let mut buf = [0u8; super::btree::KEY_BYTES_MAX];
    T::secondary(row).encode(&mut buf);
    KeyBuf::new(&buf[..T::Sec::LEN])
}

/// What a scan locks on each entry it returns: the secondary key (a scan of a secondary
/// index, whose store is `key_store`) and the row's primary key in `row_store`.
#[derive(Clone, Copy)]
struct EntryLocks {
    key_store: Option<u16>,
    row_store: u16,
    pk_of: fn(&[u8], &[u8]) -> u64,
}

impl EntryLocks {
    #[inline]
    fn names(&self, k: &[u8], v: &[u8]) -> [Option<LockName>; 2] {
        [self.key_store.map(|s| key_lock(s, k)), Some(LockName::Record(self.row_store, (self.pk_of)(k, v)))]
    }
}

impl Work {
    /// Whether this access takes locks: inside a transaction, with the lock manager on.
    #[inline]
    fn locking(&self, db: &ConventionalDb) -> bool {
        self.txn.is_some() && db.locks.enabled()
    }

    /// Requests `mode` on `name`, waiting if wait-die allows; a death is `Conflict`, and the
    /// lock is remembered for the restart delay after the abort.
    fn lock(&mut self, db: &ConventionalDb, stats: &Stats, name: LockName, mode: LockMode) -> Result<(), StorageError> {
        match self.request(db, stats, name, mode, true) {
            Ok(()) => Ok(()),
            Err(Refused::Die) => {
                self.retry_priority = self.txn.as_ref().map(|t| t.priority);
                self.died_on = Some((name, mode));
                Err(StorageError::Conflict(CONFLICT_WAIT_DIE))
            }
            Err(Refused::WouldWait) => unreachable!("waiting requests never report WouldWait"),
        }
    }

    /// A conditional request (never waits): true when granted.
    fn try_lock(&mut self, db: &ConventionalDb, stats: &Stats, name: LockName, mode: LockMode) -> bool {
        self.request(db, stats, name, mode, false).is_ok()
    }

    fn request(
        &mut self,
        db: &ConventionalDb,
        stats: &Stats,
        name: LockName,
        mode: LockMode,
        wait: bool,
    ) -> Result<(), Refused> {
        let Some(txn) = self.txn.as_mut() else { return Ok(()) };
        if db.locks.acquire(txn.id, txn.priority, name, mode, wait, stats)? == Granted::New {
            txn.locks.push(name);
        }
        Ok(())
    }

    /// The intention locks above a lock in `mode` on something in `store`, top-down: the
    /// volume, then the store, each in `mode.intention()` — requested only when the mode the
    /// transaction holds there (cached) does not cover it.
    fn intend(&mut self, db: &ConventionalDb, stats: &Stats, store: u16, mode: LockMode) -> Result<(), StorageError> {
        let intent = mode.intention();
        let Some(txn) = self.txn.as_ref() else { return Ok(()) };
        if !db.locks.enabled() {
            return Ok(());
        }
        if !txn.volume.is_some_and(|held| held.covers(intent)) {
            self.lock(db, stats, LockName::Volume, intent)?;
            let txn = self.txn.as_mut().expect("in a transaction");
            txn.volume = Some(txn.volume.map_or(intent, |held| held.supremum(intent)));
        }
        let txn = self.txn.as_ref().expect("in a transaction");
        if !txn.stores[store as usize].is_some_and(|held| held.covers(intent)) {
            self.lock(db, stats, LockName::Store(store), intent)?;
            let txn = self.txn.as_mut().expect("in a transaction");
            let held = &mut txn.stores[store as usize];
            *held = Some(held.map_or(intent, |h| h.supremum(intent)));
        }
        Ok(())
    }

    /// The intention lock (IS or IX, by `mode`) on the page `page` of `store`, requested
    /// conditionally under the page's latch; a refusal (which no lock anyone requests can
    /// cause) is `Conflict` rather than a wait under a latch.
    fn lock_page(
        &mut self,
        db: &ConventionalDb,
        stats: &Stats,
        store: u16,
        page: PageNo,
        mode: LockMode,
    ) -> Result<(), StorageError> {
        if !self.locking(db) || self.try_lock(db, stats, LockName::Page(store, page), mode.intention()) {
            return Ok(());
        }
        self.retry_priority = self.txn.as_ref().map(|t| t.priority);
        Err(StorageError::Conflict(CONFLICT_PAGE))
    }

    /// Logs a page a structure modification (a B+tree split) or a heap page allocation
    /// changed, as a redo-only image outside the transaction's undo chain; returns the LSN to
    /// stamp. Outside a transaction (a bulk load) nothing is logged.
    fn smo(
        &mut self,
        db: &ConventionalDb,
        stats: &Stats,
        table: TableId,
        store: u16,
        page: PageNo,
        bytes: &[u8],
    ) -> Option<u64> {
        let txn = self.txn.as_ref()?;
        match self.undo {
            Undo::Log { .. } => {
                bump(&stats.log_records);
                db.log_page_image(table, store, page, bytes, txn.id)
            }
            Undo::Private { .. } => db.switches().page_lsns.then(|| db.log.next_lsn_only()),
        }
    }

    /// Records a change for undo and redo (inside a transaction) and returns the LSN to stamp
    /// on the page, if LSNs are maintained.
    fn record(
        &mut self,
        db: &ConventionalDb,
        stats: &Stats,
        mut head: Head,
        before: &[u8],
        after: &[u8],
    ) -> Result<Option<u64>, StorageError> {
        let Some(txn) = self.txn.as_mut() else { return Ok(None) };
        match &mut self.undo {
            Undo::Log { records, starts } => {
                head.txn = txn.id;
                head.prev = txn.last_lsn;
                let start = encode(records, &head, before, after);
                let lsn = db.log.append(&mut records[start..])?;
                starts.push(start);
                txn.last_lsn = lsn;
                bump(&stats.log_records);
                Ok(db.switches().page_lsns.then_some(lsn))
            }
            Undo::Private { entries, images } => {
                let table = head.table.expect("changes name their table");
                let (action, image) = undo_action(head.kind, before, after);
                let at = images.len();
                images.extend_from_slice(image);
                entries.push(PrivateUndo { table, action, key: head.key, at, len: image.len() });
                Ok(db.switches().page_lsns.then(|| db.log.next_lsn_only()))
            }
        }
    }

    /// The undo steps of the running transaction, newest first.
    fn undo_steps(&self) -> Vec<UndoStep> {
        match &self.undo {
            Undo::Log { records, starts } => starts
                .iter()
                .rev()
                .map(|&start| {
                    let r = decode(&records[start..]).expect("a transaction's own log record passes its checksum");
                    let table = r.head.table.expect("changes name their table");
                    let (action, image) = undo_of(&r);
                    // An empty image (a freed record id's) need not point into the records.
                    let image_at =
                        if image.is_empty() { 0 } else { image.as_ptr() as usize - records.as_ptr() as usize };
                    UndoStep {
                        table,
                        action,
                        key: r.head.key,
                        image_at,
                        image_len: image.len(),
                        undo_next: r.head.prev,
                    }
                })
                .collect(),
            Undo::Private { entries, .. } => entries
                .iter()
                .rev()
                .map(|e| UndoStep {
                    table: e.table,
                    action: e.action,
                    key: e.key,
                    image_at: e.at,
                    image_len: e.len,
                    undo_next: 0,
                })
                .collect(),
        }
    }

    fn undo_bytes(&self) -> &[u8] {
        match &self.undo {
            Undo::Log { records, .. } => records,
            Undo::Private { images, .. } => images,
        }
    }

    /// A leaf-at-a-time scan of `tree` over `[lo, hi]` that S-locks what `locks` names for
    /// each entry before handing it to `visit`: conditionally under the leaf latch; if that
    /// would wait, the batch stops, the lock is awaited without latches, and the scan
    /// re-descends at that key (whose locks are then requested again, and held).
    #[allow(clippy::too_many_arguments)]
    fn locked_scan(
        &mut self,
        db: &ConventionalDb,
        stats: &Stats,
        tree: &BTree,
        locks: EntryLocks,
        lo: KeyBuf,
        hi: KeyBuf,
        forward: bool,
        mut visit: impl FnMut(&mut Work, &[u8], &[u8]) -> Result<bool, StorageError>,
    ) -> Result<(), StorageError> {
        let locking = self.locking(db);
        let mut batch = std::mem::take(&mut self.batch);
        let mut cursor = Cursor::At(if forward { lo } else { hi });
        let key_len = tree.key_len();
        // The scanned tree's store: the pages locked are its leaves.
        let page_store = locks.key_store.unwrap_or(locks.row_store);
        let mut page_locked = None;
        let result = loop {
            batch.clear();
            let mut blocked = None;
            let mut page_refused = false;
            let mut cell = 0;
            let next = tree.scan_step(cursor, forward, lo.as_slice(), hi.as_slice(), stats, |leaf, k, v| {
                if locking {
                    // IS on each leaf the scan reads from, conditionally under its latch (see
                    // `lock_page`: nobody requests S or X on a page, so it is granted).
                    if page_locked != Some(leaf) {
                        if !self.try_lock(db, stats, LockName::Page(page_store, leaf), LockMode::IntentionShared) {
                            page_refused = true;
                            return false;
                        }
                        page_locked = Some(leaf);
                    }
                    for name in locks.names(k, v).into_iter().flatten() {
                        if !self.try_lock(db, stats, name, LockMode::Shared) {
                            blocked = Some(name);
                            return false;
                        }
                    }
                }
                cell = k.len() + v.len();
                batch.extend_from_slice(k);
                batch.extend_from_slice(v);
                true
            });
            if page_refused {
                self.retry_priority = self.txn.as_ref().map(|t| t.priority);
                break Err(StorageError::Conflict(CONFLICT_PAGE));
            }
            let mut stopped = Ok(false);
            if cell > 0 {
                for c in batch.chunks_exact(cell) {
                    match visit(self, &c[..key_len], &c[key_len..]) {
                        Ok(true) => {}
                        other => {
                            stopped = other.map(|_| true);
                            break;
                        }
                    }
                }
            }
            match stopped {
                Ok(false) => {}
                Ok(true) => break Ok(()),
                Err(e) => break Err(e),
            }
            match next {
                ScanNext::Done => break Ok(()),
                ScanNext::Resume(c) => {
                    if let Some(name) = blocked {
                        if let Err(e) = self.lock(db, stats, name, LockMode::Shared) {
                            break Err(e);
                        }
                    }
                    cursor = c;
                }
            }
        };
        self.batch = batch;
        result
    }
}

/// The session's state shared between the closures of one access (a record's logging, an
/// index entry's, a split's), and the failure any of them met.
type Shared<'w, 'f> = RefCell<(&'w mut Work, &'f mut Option<StorageError>)>;

/// Inserts index entry `k → value` into `tree` (`which` index of `table`): the split it may
/// cause is logged first, page by page, then the entry under its leaf's latch after an IX
/// lock on the leaf (conditional; a refusal is kept in the failure and the change is still
/// logged, so that the abort it causes undoes it).
#[allow(clippy::too_many_arguments)]
fn index_insert(
    shared: &Shared<'_, '_>,
    db: &ConventionalDb,
    stats: &Stats,
    table: TableId,
    tree: &BTree,
    which: Index,
    k: &[u8],
    value: u64,
) -> Result<(), StorageError> {
    let store = tree.store().id();
    let kind = if which == Index::Primary { Kind::KeyInsert } else { Kind::IndexInsert };
    let inserted = tree.insert(
        k,
        &value.to_le_bytes(),
        stats,
        |page| {
            let (work, failure) = &mut *shared.borrow_mut();
            index_entry(work, failure, db, stats, table, store, kind, k, value, page)
        },
        &mut |page, image| {
            let (work, _) = &mut *shared.borrow_mut();
            work.smo(db, stats, table, store, page, image)
        },
    );
    // The caller holds X on the key and probed the primary index; secondary keys are unique.
    debug_assert!(inserted.is_ok(), "index entry of {table} already present");
    inserted.map_err(|()| StorageError::Duplicate { table, key: value })
}

/// Deletes index entry `k` (value `value`) from `tree`, logged under its leaf's latch as in
/// [`index_insert`].
#[allow(clippy::too_many_arguments)]
fn index_delete(
    shared: &Shared<'_, '_>,
    db: &ConventionalDb,
    stats: &Stats,
    table: TableId,
    tree: &BTree,
    which: Index,
    k: &[u8],
    value: u64,
) {
    let store = tree.store().id();
    let kind = if which == Index::Primary { Kind::KeyDelete } else { Kind::IndexDelete };
    let gone = tree.delete(k, stats, |_, page| {
        let (work, failure) = &mut *shared.borrow_mut();
        ((), index_entry(work, failure, db, stats, table, store, kind, k, value, page))
    });
    debug_assert!(gone.is_some(), "index entry of {table} present under its X lock");
}

/// Logs an index entry `k → value` of `table` inserted into or deleted from the leaf `page`
/// of `store`, under that leaf's latch, after the IX lock on the leaf (conditional; a refusal
/// is kept in `failure` and the change is still logged, so that the abort it causes undoes
/// it). Returns the LSN to stamp.
#[allow(clippy::too_many_arguments)]
fn index_entry(
    work: &mut Work,
    failure: &mut Option<StorageError>,
    db: &ConventionalDb,
    stats: &Stats,
    table: TableId,
    store: u16,
    kind: Kind,
    k: &[u8],
    value: u64,
    page: PageNo,
) -> Option<u64> {
    if let Err(e) = work.lock_page(db, stats, store, page, LockMode::Exclusive) {
        failure.get_or_insert(e);
    }
    let head = Head { table: Some(table), key: value, page, ..Head::new(kind, 0, 0) };
    let insert = matches!(kind, Kind::KeyInsert | Kind::IndexInsert);
    let (before, after) = if insert { (&[][..], k) } else { (k, &[][..]) };
    work.record(db, stats, head, before, after).unwrap_or_else(|e| {
        failure.get_or_insert(e);
        None
    })
}

fn pk_from_key(k: &[u8], _v: &[u8]) -> u64 {
    u64::from_be_bytes(k.try_into().expect("8-byte primary key"))
}

fn pk_from_value(_k: &[u8], v: &[u8]) -> u64 {
    u64::from_le_bytes(v.try_into().expect("8-byte primary key value"))
}

impl Session {
    pub(crate) fn new(db: Arc<ConventionalDb>, session_id: u64) -> Session {
        let sw = db.switches();
        let dir = if sw.catalog_lookup {
            Directory::Catalog
        } else {
            Directory::Cached(TableId::ALL.iter().map(|&id| db.lookup(id, &Stats::default())).collect())
        };
        let undo = if sw.log_records {
            Undo::Log { records: Vec::new(), starts: Vec::new() }
        } else {
            Undo::Private { entries: Vec::new(), images: Vec::new() }
        };
        Session {
            db,
            dir,
            stats: Stats::default(),
            work: Work {
                txn: None,
                retry_priority: None,
                died_on: None,
                spare_locks: Vec::new(),
                undo,
                batch: Vec::new(),
                session_id,
                local_txns: 0,
                ts: 0,
                freed: Vec::new(),
            },
            totals: Counters::default(),
        }
    }

    /// The engine this session works on.
    pub fn db(&self) -> &Arc<ConventionalDb> {
        &self.db
    }

    /// This session's component counters since it opened (log bytes and fsyncs are the
    /// engine's: the log device is shared).
    pub fn counters(&mut self) -> Counters {
        self.merge();
        let log = self.db.counters();
        Counters { log_bytes_written: log.log_bytes_written, fsyncs: log.fsyncs, ..self.totals }
    }

    /// Whether a transaction is running.
    pub fn in_transaction(&self) -> bool {
        self.work.txn.is_some()
    }

    fn merge(&mut self) {
        let c = self.stats.take();
        self.db.counters.merge(&c);
        let t = &mut self.totals;
        t.lock_requests_granted += c.lock_requests_granted;
        t.lock_waits += c.lock_waits;
        t.lock_conflicts += c.lock_conflicts;
        t.latches_acquired += c.latches_acquired;
        t.pages_fixed += c.pages_fixed;
        t.log_records += c.log_records;
        t.committed += c.committed;
        t.aborted += c.aborted;
    }

    /// Ends the transaction: releases its locks, leaves the transaction table, merges counters.
    fn finish(&mut self, mut txn: Txn) {
        self.db.locks.release_all(txn.id, &txn.locks);
        txn.locks.clear();
        self.work.spare_locks = std::mem::take(&mut txn.locks);
        self.db.txns.end(txn.id, &self.stats);
        self.work.undo.clear();
        self.work.freed.clear();
        self.merge();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.work.txn.is_some() {
            self.abort();
        }
        self.merge();
        self.db.session_closed();
    }
}

impl Storage for Session {
    fn begin(&mut self, ts: u64) {
        assert!(self.work.txn.is_none(), "begin inside a transaction");
        self.work.ts = ts;
        self.work.local_txns += 1;
        let id = self.db.txns.begin(self.work.session_id, self.work.local_txns, &self.stats);
        let priority = self.work.retry_priority.take().unwrap_or(id);
        let locks = std::mem::take(&mut self.work.spare_locks);
        self.work.txn = Some(Txn { id, priority, last_lsn: 0, locks, volume: None, stores: [None; STORES] });
    }

    /// Commits: appends the commit record and forces the log up to its end (WAL: the commit
    /// is durable before the locks are released and the caller is told). If the log cannot be
    /// forced, the transaction is rolled back in memory and the error returned (a later
    /// `abort` is then a no-op); whether its commit record reached the device is in doubt, as
    /// for any client whose commit failed.
    fn commit(&mut self) -> Result<(), StorageError> {
        let txn = self.work.txn.as_ref().expect("commit outside a transaction");
        if txn.last_lsn != 0 {
            let mut rec = Vec::with_capacity(64);
            // The commit record carries the transaction's timestamp (docs/design.md §10: a
            // partition back alone from its log skips what it already committed).
            let head = Head { extra: self.work.ts, ..Head::new(Kind::Commit, txn.id, txn.last_lsn) };
            encode(&mut rec, &head, &[], &[]);
            let forced = self.db.log.append(&mut rec).and_then(|lsn| {
                bump(&self.stats.log_records);
                self.db.log.flush_to(lsn + rec.len() as u64)
            });
            if let Err(e) = forced {
                self.abort();
                return Err(e);
            }
        }
        let txn = self.work.txn.take().expect("transaction present");
        // The slots its deletes freed are free for good now (heap.rs).
        for (table, page) in self.work.freed.drain(..) {
            self.db.table(table).heap.release(page, &self.stats);
        }
        bump(&self.stats.committed);
        self.work.retry_priority = None;
        self.work.died_on = None;
        self.finish(txn);
        Ok(())
    }

    /// Undoes every change since `begin` (a no-op when no transaction is running, e.g. after a
    /// failed commit already rolled it back).
    fn abort(&mut self) {
        let Some(mut txn) = self.work.txn.take() else { return };
        let Session { db, stats, work, .. } = self;
        let logging = matches!(work.undo, Undo::Log { .. });
        let mut clr = Vec::with_capacity(1024);
        let txn_id = txn.id;
        for step in work.undo_steps() {
            let image = &work.undo_bytes()[step.image_at..step.image_at + step.image_len];
            let entry = db.table(step.table);
            let mut stamp = |page: u32| -> Option<u64> {
                if !logging {
                    return db.switches().page_lsns.then(|| db.log.next_lsn_only());
                }
                clr.clear();
                let head = Head {
                    table: Some(step.table),
                    action: Some(step.action),
                    key: step.key,
                    page,
                    extra: step.undo_next,
                    ..Head::new(Kind::Clr, txn.id, txn.last_lsn)
                };
                encode(&mut clr, &head, &[], image);
                // A failed log device fails every later commit; undo in memory goes on.
                let lsn = db.log.append(&mut clr).ok()?;
                bump(&stats.log_records);
                txn.last_lsn = lsn;
                db.switches().page_lsns.then_some(lsn)
            };
            let mut smo = |store: u16, page: u32, bytes: &[u8]| -> Option<u64> {
                if !logging {
                    return db.switches().page_lsns.then(|| db.log.next_lsn_only());
                }
                bump(&stats.log_records);
                db.log_page_image(step.table, store, page, bytes, txn_id)
            };
            db.apply(entry, step.action, step.key, image, stats, &mut stamp, &mut smo)
                .expect("undo applies to the transaction's own locked records");
        }
        if logging && txn.last_lsn != 0 {
            let mut rec = Vec::with_capacity(64);
            encode(&mut rec, &Head::new(Kind::Abort, txn.id, txn.last_lsn), &[], &[]);
            if db.log.append(&mut rec).is_ok() {
                bump(&stats.log_records);
            }
        }
        bump(&stats.aborted);
        self.finish(txn);
        if let Some((name, mode)) = self.work.died_on.take() {
            self.db.locks.await_release(name, mode);
        }
    }

    fn get<T: Table, R>(&mut self, key: u64, f: impl FnOnce(&T::Row) -> R) -> Result<Option<R>, StorageError> {
        if T::ORG == Organisation::Heap {
            return Err(StorageError::Unsupported { table: T::ID, op: "get by key" });
        }
        let Session { db, dir, stats, work, .. } = self;
        let entry = dir.entry(db, T::ID, stats);
        let store = T::ID as u16;
        if work.locking(db) {
            work.intend(db, stats, store, LockMode::Shared)?;
            work.lock(db, stats, LockName::Record(store, key), LockMode::Shared)?;
        }
        // The index lookup yields the record id; the heap page is fixed, latched and read.
        let Some(rid) = entry.rid_of(key, stats) else { return Ok(None) };
        work.intend(db, stats, heap_store(T::ID), LockMode::Shared)?;
        let r = entry.heap.read(rid, stats, |v, page| {
            work.lock_page(db, stats, heap_store(T::ID), page, LockMode::Shared)?;
            let row = bytemuck::pod_read_unaligned::<T::Row>(v);
            debug_assert_eq!(T::key(&row), key, "the index of {} points at another row", T::ID);
            Ok(f(&row))
        });
        r.transpose()
    }

    fn update<T: Table, R>(&mut self, key: u64, f: impl FnOnce(&mut T::Row) -> R) -> Result<Option<R>, StorageError> {
        if T::ORG == Organisation::Heap {
            return Err(StorageError::Unsupported { table: T::ID, op: "update by key" });
        }
        let Session { db, dir, stats, work, .. } = self;
        let entry = dir.entry(db, T::ID, stats);
        let store = T::ID as u16;
        if work.locking(db) {
            work.intend(db, stats, store, LockMode::Exclusive)?;
            work.lock(db, stats, LockName::Record(store, key), LockMode::Exclusive)?;
        }
        let Some(rid) = entry.rid_of(key, stats) else { return Ok(None) };
        work.intend(db, stats, heap_store(T::ID), LockMode::Exclusive)?;
        let mut failure = None;
        let r = entry.heap.update(rid, stats, |val, page| {
            if let Err(e) = work.lock_page(db, stats, heap_store(T::ID), page, LockMode::Exclusive) {
                failure = Some(e); // nothing changed: the page is left as found
                return (None, None);
            }
            let mut row: T::Row = bytemuck::pod_read_unaligned(val);
            let r = f(&mut row);
            #[cfg(debug_assertions)]
            {
                let old: T::Row = bytemuck::pod_read_unaligned(val);
                assert_eq!(T::key(&old), T::key(&row), "update changed the primary key of {}", T::ID);
                if T::HAS_SECONDARY {
                    assert_eq!(T::secondary(&old), T::secondary(&row), "update changed a secondary key of {}", T::ID);
                }
            }
            let after = bytemuck::bytes_of(&row);
            let head = Head { table: Some(T::ID), key: rid.pack(), page, ..Head::new(Kind::Update, 0, 0) };
            let lsn = work.record(db, stats, head, val, after).unwrap_or_else(|e| {
                failure = Some(e);
                None
            });
            val.copy_from_slice(after);
            (Some(r), lsn)
        });
        match failure {
            Some(e) => Err(e),
            None => Ok(r.map(|r| r.expect("no failure: the closure ran"))),
        }
    }

    /// Record creation (Shore's "create record" then index inserts): X locks on the primary
    /// and secondary keys first, a probe of the primary index for a duplicate, the record
    /// through the free-space map (X on its record id and IX on its page, conditionally under
    /// the page latch), then its primary-index entry and its secondary-index entry, each
    /// logged under its leaf's latch after any split it caused.
    fn insert<T: Table>(&mut self, row: &T::Row) -> Result<(), StorageError> {
        let Session { db, dir, stats, work, .. } = self;
        let entry = dir.entry(db, T::ID, stats);
        let bytes = bytemuck::bytes_of(row);
        let (store, heap) = (T::ID as u16, heap_store(T::ID));
        let locking = work.locking(db);
        let key = (T::ORG != Organisation::Heap).then(|| T::key(row));
        if let (true, Some(key)) = (locking, key) {
            work.intend(db, stats, store, LockMode::Exclusive)?;
            work.lock(db, stats, LockName::Record(store, key), LockMode::Exclusive)?;
            if T::HAS_SECONDARY {
                let (index, _) = secondary_store(T::ID);
                work.intend(db, stats, index, LockMode::Exclusive)?;
                let sk = secondary_key::<T>(row);
                work.lock(db, stats, key_lock(index, sk.as_slice()), LockMode::Exclusive)?;
            }
        }
        if let Some(key) = key {
            if entry.rid_of(key, stats).is_some() {
                return Err(StorageError::Duplicate { table: T::ID, key });
            }
        }
        if locking {
            work.intend(db, stats, heap, LockMode::Exclusive)?;
        }
        let mut failure = None;
        let shared = RefCell::new((work, &mut failure));
        let rid = entry.heap.insert(
            bytes,
            stats,
            |rid, fresh| {
                let (work, failure) = &mut *shared.borrow_mut();
                if !locking {
                    return true;
                }
                // A freed slot is taken only with its record-id lock: its deleter holds X on
                // it until commit (heap.rs). A fresh slot cannot be locked by anyone; a
                // refusal there still takes the slot and is answered with `Conflict`.
                let granted = work.try_lock(db, stats, LockName::Record(heap, rid.pack()), LockMode::Exclusive);
                if fresh && !granted {
                    failure.get_or_insert(StorageError::Conflict("a fresh record id was locked"));
                }
                granted
            },
            |rid| {
                let (work, failure) = &mut *shared.borrow_mut();
                // A refusal still logs the insert, so that the abort it causes undoes it.
                if let Err(e) = work.lock_page(db, stats, heap, rid.page, LockMode::Exclusive) {
                    failure.get_or_insert(e);
                }
                let head =
                    Head { table: Some(T::ID), key: rid.pack(), page: rid.page, ..Head::new(Kind::Insert, 0, 0) };
                work.record(db, stats, head, &[], bytes).unwrap_or_else(|e| {
                    failure.get_or_insert(e);
                    None
                })
            },
            |page, image| {
                let (work, _) = &mut *shared.borrow_mut();
                work.smo(db, stats, T::ID, heap, page, image)
            },
        );
        if let Some(key) = key {
            let primary = entry.primary.as_ref().expect("keyed tables have a primary index");
            index_insert(&shared, db, stats, T::ID, primary, Index::Primary, &key.to_be_bytes(), rid.pack())?;
        }
        if let (Some(s), Some(key)) = (&entry.secondary, key) {
            let sk = secondary_key::<T>(row);
            index_insert(&shared, db, stats, T::ID, &s.tree, Index::Secondary, sk.as_slice(), key)?;
        }
        let _ = shared.into_inner();
        failure.map_or(Ok(()), Err)
    }

    /// Deletes the row under `key`: X on the key (and on the secondary key it removes), the
    /// primary-index entry, the record (X on its record id, kept to commit so that no one
    /// reuses the slot before; the page goes to the free-space map at commit), then the
    /// secondary-index entry.
    fn delete<T: Table>(&mut self, key: u64) -> Result<Option<T::Row>, StorageError> {
        if T::ORG == Organisation::Heap {
            return Err(StorageError::Unsupported { table: T::ID, op: "delete by key" });
        }
        let Session { db, dir, stats, work, .. } = self;
        let entry = dir.entry(db, T::ID, stats);
        let (store, heap) = (T::ID as u16, heap_store(T::ID));
        let locking = work.locking(db);
        if locking {
            work.intend(db, stats, store, LockMode::Exclusive)?;
            work.lock(db, stats, LockName::Record(store, key), LockMode::Exclusive)?;
        }
        let Some(rid) = entry.rid_of(key, stats) else { return Ok(None) };
        // The secondary key the delete removes, read under the row's X lock (the row cannot
        // change meanwhile; updates never change a secondary key).
        let sk = match &entry.secondary {
            Some(_) => entry.heap.read(rid, stats, |v, _| secondary_key::<T>(&bytemuck::pod_read_unaligned(v))),
            None => None,
        };
        if locking {
            if let Some(sk) = &sk {
                let (index, _) = secondary_store(T::ID);
                work.intend(db, stats, index, LockMode::Exclusive)?;
                work.lock(db, stats, key_lock(index, sk.as_slice()), LockMode::Exclusive)?;
            }
            work.intend(db, stats, heap, LockMode::Exclusive)?;
            work.lock(db, stats, LockName::Record(heap, rid.pack()), LockMode::Exclusive)?;
        }
        let mut failure = None;
        let primary = entry.primary.as_ref().expect("keyed tables have a primary index");
        let shared = RefCell::new((work, &mut failure));
        index_delete(&shared, db, stats, T::ID, primary, Index::Primary, &key.to_be_bytes(), rid.pack());
        let row = entry.heap.delete(rid, stats, |before, page| {
            let (work, failure) = &mut *shared.borrow_mut();
            // A refusal still logs the delete, so that the abort it causes undoes it.
            if let Err(e) = work.lock_page(db, stats, heap, page, LockMode::Exclusive) {
                failure.get_or_insert(e);
            }
            let row: T::Row = bytemuck::pod_read_unaligned(before);
            let head = Head { table: Some(T::ID), key: rid.pack(), page, ..Head::new(Kind::Delete, 0, 0) };
            let lsn = work.record(db, stats, head, before, &[]).unwrap_or_else(|e| {
                failure.get_or_insert(e);
                None
            });
            (row, lsn)
        });
        if let (Some(s), Some(sk)) = (&entry.secondary, sk) {
            index_delete(&shared, db, stats, T::ID, &s.tree, Index::Secondary, sk.as_slice(), key);
        }
        let (work, _) = shared.into_inner();
        if work.txn.is_some() {
            work.freed.push((T::ID, rid.page));
        } else {
            entry.heap.release(rid.page, stats);
        }
        failure.map_or(Ok(row), Err)
    }

    fn scan<T: Table>(
        &mut self,
        lo: u64,
        hi: u64,
        dir: ScanDir,
        mut f: impl FnMut(&T::Row) -> bool,
    ) -> Result<(), StorageError> {
        if T::ORG != Organisation::Ordered {
            return Err(StorageError::Unsupported { table: T::ID, op: "ordered scan" });
        }
        if lo > hi {
            return Ok(());
        }
        let Session { db, dir: directory, stats, work, .. } = self;
        let entry = directory.entry(db, T::ID, stats);
        let (store, heap) = (T::ID as u16, heap_store(T::ID));
        work.intend(db, stats, store, LockMode::Shared)?;
        work.intend(db, stats, heap, LockMode::Shared)?;
        let (lo, hi) = (KeyBuf::new(&lo.to_be_bytes()), KeyBuf::new(&hi.to_be_bytes()));
        let locks = EntryLocks { key_store: None, row_store: store, pk_of: pk_from_key };
        let primary = entry.primary.as_ref().expect("ordered tables have a primary index");
        // Each entry's record is fixed and read after the leaf's latch is gone, under the
        // row's S lock (so it cannot be deleted meanwhile).
        work.locked_scan(db, stats, primary, locks, lo, hi, dir == ScanDir::Forward, |work, _, v| {
            let rid = Rid::unpack(rid_value(v));
            let r = entry.heap.read(rid, stats, |row, page| {
                work.lock_page(db, stats, heap, page, LockMode::Shared)?;
                Ok(f(&bytemuck::pod_read_unaligned::<T::Row>(row)))
            });
            r.expect("an index entry under its S lock points at a live record")
        })
    }

    fn scan_secondary<T: Table>(
        &mut self,
        lo: T::Sec,
        hi: T::Sec,
        dir: ScanDir,
        mut f: impl FnMut(u64) -> bool,
    ) -> Result<(), StorageError> {
        if !T::HAS_SECONDARY {
            return Err(StorageError::Unsupported { table: T::ID, op: "secondary index scan" });
        }
        if lo > hi {
            return Ok(());
        }
        let mut buf = [0u8; super::btree::KEY_BYTES_MAX];
        lo.encode(&mut buf);
        let lo = KeyBuf::new(&buf[..T::Sec::LEN]);
        hi.encode(&mut buf);
        let hi = KeyBuf::new(&buf[..T::Sec::LEN]);
        let Session { db, dir: directory, stats, work, .. } = self;
        let entry = directory.entry(db, T::ID, stats);
        let index = &entry.secondary.as_ref().expect("table has a secondary index").tree;
        let (store, key_store) = (T::ID as u16, secondary_store(T::ID).0);
        work.intend(db, stats, key_store, LockMode::Shared)?;
        work.intend(db, stats, store, LockMode::Shared)?;
        let locks = EntryLocks { key_store: Some(key_store), row_store: store, pk_of: pk_from_value };
        work.locked_scan(db, stats, index, locks, lo, hi, dir == ScanDir::Forward, |_, k, v| Ok(f(pk_from_value(k, v))))
    }

    fn for_each<T: Table>(&mut self, mut f: impl FnMut(&T::Row)) {
        let Session { db, dir, stats, .. } = self;
        let entry = dir.entry(db, T::ID, stats);
        entry.heap.for_each(stats, |v| f(&bytemuck::pod_read_unaligned::<T::Row>(v)));
    }
}
