//! Worker sessions: one per worker thread, each implementing [`Storage`] over the shared
//! engine, so the TPC-C procedures run on the conventional stack unchanged.
//!
//! Owns: the transaction a worker runs (its id and wait-die priority, the locks it holds,
//! its undo information), the directory strategy (catalog lookup per access, or handles
//! cached at session start), and the worker's component counters.
//!
//! Every access goes the conventional way: look the table up in the directory, request the
//! table intention lock and the record lock (strict 2PL), descend the B+tree with latch
//! coupling, fixing pages, decode the record into a typed copy, run the procedure's closure,
//! log the before and after images and stamp the page LSN under the leaf's latch, re-encode,
//! unlatch, unfix. Operations outside `begin`/`commit` are a bulk load: no locks, no log.
//!
//! Undo: with log records on, the transaction keeps a copy of the records it appended and
//! abort walks them backwards, applying each before image and writing a compensation log
//! record (CLR) whose undo-next LSN is the undone record's previous LSN (ARIES); with log
//! records off, a private undo list of before images does the same without a log.

use std::sync::Arc;

use super::btree::{BTree, Cursor, KeyBuf, ScanNext};
use super::heap::Rid;
use super::lock::{Granted, LockMode, LockName, Refused};
use super::log::{decode, encode, ClrAction, Head, Kind};
use super::stats::{bump, Counters, Stats};
use super::{ConventionalDb, TableEntry};
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
    /// Record and table locks held (released at commit or abort).
    locks: Vec<LockName>,
    /// Intention mode held on each table.
    intents: [Option<LockMode>; 9],
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
    undo: Undo,
    batch: Vec<u8>,
    session_id: u64,
    local_txns: u64,
    /// The running transaction's timestamp, written into its commit record.
    ts: u64,
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

impl Work {
    /// Requests a lock, waiting if wait-die allows; a death is `Conflict`.
    fn lock(
        &mut self,
        db: &ConventionalDb,
        stats: &Stats,
        table: TableId,
        record: u64,
        mode: LockMode,
    ) -> Result<(), StorageError> {
        match self.request(db, stats, table, record, mode, true) {
            Ok(()) => Ok(()),
            Err(Refused::Die) => {
                self.retry_priority = self.txn.as_ref().map(|t| t.priority);
                self.died_on = Some((LockName { table, record: Some(record) }, mode));
                Err(StorageError::Conflict(CONFLICT_WAIT_DIE))
            }
            Err(Refused::WouldWait) => unreachable!("waiting requests never report WouldWait"),
        }
    }

    /// A conditional request (never waits): true when granted.
    fn try_lock(&mut self, db: &ConventionalDb, stats: &Stats, table: TableId, record: u64, mode: LockMode) -> bool {
        self.request(db, stats, table, record, mode, false).is_ok()
    }

    fn request(
        &mut self,
        db: &ConventionalDb,
        stats: &Stats,
        table: TableId,
        record: u64,
        mode: LockMode,
        wait: bool,
    ) -> Result<(), Refused> {
        let Some(txn) = self.txn.as_mut() else { return Ok(()) };
        if !db.locks.enabled() {
            return Ok(());
        }
        let intent = if mode == LockMode::Shared { LockMode::IntentionShared } else { LockMode::IntentionExclusive };
        let held = txn.intents[table as usize];
        if held.is_none_or(|h| h < intent) {
            let name = LockName { table, record: None };
            if db.locks.acquire(txn.id, txn.priority, name, intent, true, stats)? == Granted::New {
                txn.locks.push(name);
            }
            txn.intents[table as usize] = Some(intent);
        }
        let name = LockName { table, record: Some(record) };
        if db.locks.acquire(txn.id, txn.priority, name, mode, wait, stats)? == Granted::New {
            txn.locks.push(name);
        }
        Ok(())
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
                let action = match head.kind {
                    Kind::Update => ClrAction::Restore,
                    Kind::Delete => ClrAction::Reinsert,
                    Kind::Insert if table == TableId::History => ClrAction::Tombstone,
                    Kind::Insert => ClrAction::Remove,
                    k => unreachable!("{k:?} is not a change"),
                };
                let at = images.len();
                images.extend_from_slice(before);
                entries.push(PrivateUndo { table, action, key: head.key, at, len: before.len() });
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
                    let (action, image) = match r.head.kind {
                        Kind::Update => (ClrAction::Restore, r.before),
                        Kind::Delete => (ClrAction::Reinsert, r.before),
                        Kind::Insert if table == TableId::History => (ClrAction::Tombstone, r.before),
                        Kind::Insert => (ClrAction::Remove, r.before),
                        k => unreachable!("{k:?} is not a change"),
                    };
                    let image_at = image.as_ptr() as usize - records.as_ptr() as usize;
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

    /// A leaf-at-a-time scan of `tree` over `[lo, hi]` that S-locks each entry's record
    /// (named by `pk_of(key, value)`) before handing it to `visit`: conditionally under the
    /// leaf latch; if that would wait, the batch stops, the lock is awaited without latches,
    /// and the scan re-descends at that key.
    #[allow(clippy::too_many_arguments)]
    fn locked_scan(
        &mut self,
        db: &ConventionalDb,
        stats: &Stats,
        tree: &BTree,
        table: TableId,
        pk_of: fn(&[u8], &[u8]) -> u64,
        lo: KeyBuf,
        hi: KeyBuf,
        forward: bool,
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StorageError> {
        let mut batch = std::mem::take(&mut self.batch);
        let mut cursor = Cursor::At(if forward { lo } else { hi });
        let key_len = tree.key_len();
        let result = loop {
            batch.clear();
            let mut blocked = None;
            let mut cell = 0;
            let next = tree.scan_step(cursor, forward, lo.as_slice(), hi.as_slice(), stats, |k, v| {
                let pk = pk_of(k, v);
                if !self.try_lock(db, stats, table, pk, LockMode::Shared) {
                    blocked = Some(pk);
                    return false;
                }
                cell = k.len() + v.len();
                batch.extend_from_slice(k);
                batch.extend_from_slice(v);
                true
            });
            if cell > 0 && !batch.chunks_exact(cell).all(|c| visit(&c[..key_len], &c[key_len..])) {
                break Ok(());
            }
            match next {
                ScanNext::Done => break Ok(()),
                ScanNext::Resume(c) => {
                    if let Some(pk) = blocked {
                        if let Err(e) = self.lock(db, stats, table, pk, LockMode::Shared) {
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
                undo,
                batch: Vec::new(),
                session_id,
                local_txns: 0,
                ts: 0,
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
    fn finish(&mut self, txn: Txn) {
        self.db.locks.release_all(txn.id, &txn.locks);
        self.db.txns.end(txn.id, &self.stats);
        self.work.undo.clear();
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
        self.work.txn = Some(Txn { id, priority, last_lsn: 0, locks: Vec::new(), intents: [None; 9] });
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
                let clr_image =
                    if matches!(step.action, ClrAction::Restore | ClrAction::Reinsert) { image } else { &[] };
                encode(&mut clr, &head, &[], clr_image);
                // A failed log device fails every later commit; undo in memory goes on.
                let lsn = db.log.append(&mut clr).ok()?;
                bump(&stats.log_records);
                txn.last_lsn = lsn;
                db.switches().page_lsns.then_some(lsn)
            };
            db.apply(entry, step.action, step.key, image, None, stats, &mut stamp)
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
        work.lock(db, stats, T::ID, key, LockMode::Shared)?;
        Ok(entry.tree().get(&key.to_be_bytes(), stats, |v| f(&bytemuck::pod_read_unaligned::<T::Row>(v))))
    }

    fn update<T: Table, R>(&mut self, key: u64, f: impl FnOnce(&mut T::Row) -> R) -> Result<Option<R>, StorageError> {
        if T::ORG == Organisation::Heap {
            return Err(StorageError::Unsupported { table: T::ID, op: "update by key" });
        }
        let Session { db, dir, stats, work, .. } = self;
        let entry = dir.entry(db, T::ID, stats);
        work.lock(db, stats, T::ID, key, LockMode::Exclusive)?;
        let mut failure = None;
        let r = entry.tree().update(&key.to_be_bytes(), stats, |val, page, _| {
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
            let head = Head { table: Some(T::ID), key, page, ..Head::new(Kind::Update, 0, 0) };
            let lsn = work.record(db, stats, head, val, after).unwrap_or_else(|e| {
                failure = Some(e);
                None
            });
            val.copy_from_slice(after);
            (r, lsn)
        });
        match failure {
            Some(e) => Err(e),
            None => Ok(r),
        }
    }

    fn insert<T: Table>(&mut self, row: &T::Row) -> Result<(), StorageError> {
        let Session { db, dir, stats, work, .. } = self;
        let entry = dir.entry(db, T::ID, stats);
        let bytes = bytemuck::bytes_of(row);
        let mut failure = None;
        if T::ORG == Organisation::Heap {
            entry.heap().append(bytes, stats, |rid: Rid| {
                // A fresh record id: the conditional X lock cannot conflict.
                let granted = work.try_lock(db, stats, T::ID, rid.pack(), LockMode::Exclusive);
                debug_assert!(granted, "a new heap record is unlocked");
                let head =
                    Head { table: Some(T::ID), key: rid.pack(), page: rid.page, ..Head::new(Kind::Insert, 0, 0) };
                work.record(db, stats, head, &[], bytes).unwrap_or_else(|e| {
                    failure = Some(e);
                    None
                })
            });
            return failure.map_or(Ok(()), Err);
        }
        let key = T::key(row);
        work.lock(db, stats, T::ID, key, LockMode::Exclusive)?;
        let inserted = entry.insert_row(key, bytes, stats, |page| {
            let head = Head { table: Some(T::ID), key, page, ..Head::new(Kind::Insert, 0, 0) };
            work.record(db, stats, head, &[], bytes).unwrap_or_else(|e| {
                failure = Some(e);
                None
            })
        });
        if inserted.is_err() {
            return Err(StorageError::Duplicate { table: T::ID, key });
        }
        failure.map_or(Ok(()), Err)
    }

    fn delete<T: Table>(&mut self, key: u64) -> Result<Option<T::Row>, StorageError> {
        if T::ORG == Organisation::Heap {
            return Err(StorageError::Unsupported { table: T::ID, op: "delete by key" });
        }
        let Session { db, dir, stats, work, .. } = self;
        let entry = dir.entry(db, T::ID, stats);
        work.lock(db, stats, T::ID, key, LockMode::Exclusive)?;
        let mut failure = None;
        let row = entry.delete_row(key, stats, |before, page| {
            let row: T::Row = bytemuck::pod_read_unaligned(before);
            let head = Head { table: Some(T::ID), key, page, ..Head::new(Kind::Delete, 0, 0) };
            let lsn = work.record(db, stats, head, before, &[]).unwrap_or_else(|e| {
                failure = Some(e);
                None
            });
            (row, lsn)
        });
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
        let (lo, hi) = (KeyBuf::new(&lo.to_be_bytes()), KeyBuf::new(&hi.to_be_bytes()));
        work.locked_scan(db, stats, entry.tree(), T::ID, pk_from_key, lo, hi, dir == ScanDir::Forward, |_, v| {
            f(&bytemuck::pod_read_unaligned::<T::Row>(v))
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
        work.locked_scan(db, stats, index, T::ID, pk_from_value, lo, hi, dir == ScanDir::Forward, |k, v| {
            f(pk_from_value(k, v))
        })
    }

    fn for_each<T: Table>(&mut self, mut f: impl FnMut(&T::Row)) {
        let Session { db, dir, stats, .. } = self;
        let entry = dir.entry(db, T::ID, stats);
        let decode = |v: &[u8]| bytemuck::pod_read_unaligned::<T::Row>(v);
        if T::ORG == Organisation::Heap {
            entry.heap().for_each(stats, |v| f(&decode(v)));
        } else {
            entry.tree().for_each(stats, |_, v| f(&decode(v)));
        }
    }
}
