//! The conventional stack (issue 3): the OLTP engine the paper measured (Shore), built the
//! way real systems build it (Gray & Reuter; ARIES), with the paper's component removals as
//! switches (Harizopoulos et al., SIGMOD 2008, Section 4).
//!
//! What it owns and where:
//! - [`page`]: slotted 8 KiB / 32 KiB pages in a buffer pool (frame control blocks, a sharded
//!   page table, fix/unfix with pin counts, a clock with reference and dirty bits, eviction
//!   and write-back when the pool is bounded) or, switched off, in plain heap memory;
//! - [`btree`]: B+trees over pages for every primary index (key → record id) and secondary
//!   index (secondary key → primary key), latch coupling, splits logged page by page,
//!   a generic or a specialised key comparator;
//! - [`heap`]: the heap files holding every table's records, named by record ids, found
//!   through a free-space map, new pages allocated with a logged format;
//! - [`lock`]: a hashed lock table, IS/IX/S/X, strict 2PL, wait-die deadlock prevention;
//! - [`latch`]: reader/writer latches — mutex-style with holder bookkeeping (Shore's), or the
//!   cheap spin latch — that the latching switch turns into no-ops;
//! - [`log`]: ARIES log records with checksums, the log buffer, group commit with
//!   `fdatasync` on a preallocated device behind the [`LogDevice`] trait, a crash-injecting
//!   test double whose handles are fenced off by a crash;
//! - [`medium`]: where a database's durable state lives ([`Medium`]: a directory, or a
//!   [`MemoryMedium`] with crash semantics for the simulator), and the
//!   [`medium::CheckpointStore`] the snapshot is replaced in atomically;
//! - [`txn`]: transaction ids, the transaction table, the checkpoint gate;
//! - [`session`]: one [`Session`] per worker, implementing [`crate::Storage`];
//! - [`ship`]: WAL shipping to a passive backup (the tap on the primary's log, the backup
//!   applying shipped records with recovery's redo);
//! - this module: the catalog, opening (restart recovery), checkpoints;
//! - [`config`]: [`Step`], [`Switches`] and [`Config`], chosen in one place.
//!
//! Durability and recovery. The database is memory-resident and never flushed; the log is
//! the only I/O on the commit path. A checkpoint is *transaction-consistent*: it waits until
//! no transaction is active (holding new ones back), writes every page of every file to the
//! medium's checkpoint, replacing the last one atomically (in a directory, `checkpoint.db`:
//! temporary file, `fsync`, rename, directory `fsync`), then starts a new log generation
//! whose first record is a checkpoint record at the snapshot's LSN. Restart recovery (ARIES:
//! analysis, redo, undo) loads the snapshot, scans the log's valid prefix
//! (checksums and LSN continuity: a torn tail — damage with nothing valid of the log's
//! generation after it — is truncated, zeroed and reported in the [`RecoveryReport`], never
//! replayed), refuses before writing anything a log it cannot recover from as found (a damaged
//! record followed by valid ones, [`ConventionalError::CorruptLog`]; a missing snapshot the
//! log says was taken, a missing log beside a snapshot, a damaged snapshot, a log newer than
//! the snapshot), finds winners and losers (analysis), repeats history from the snapshot's LSN
//! (redo: physiological, in log order, each change skipped when its page's LSN shows it
//! applied — heap records by record id, index entries on the leaf page the record names, page
//! images over their page), rolls losers back writing CLRs (undo: heap records physically
//! by record id, index entries logically by key, since a split may have moved them;
//! honouring the undo-next LSNs of CLRs already written), and takes a checkpoint. A row's
//! record, its primary-index entry and its secondary-index entry are logged as separate
//! records, each redone and undone on its own file. Structure modifications are logged as
//! ARIES/IM does, redo-only and outside the transaction's undo chain (kept when it rolls
//! back): a B+tree split logs the image of every page it changed or allocated, before the
//! entry that caused it, and a heap page allocation logs the new page's format; redo
//! allocates pages up to the one an image names, so that the leaf an entry's record names is
//! there, as the entry found it, when the entry is redone. The free-space map is rebuilt from
//! the heap pages once recovery is done. The per-record redo (`ConventionalDb::redo_step`
//! deciding, `ConventionalDb::redo` doing) is also what a backup applies shipped log records with
//! ([`ship`]). Bulk-loaded rows (operations outside a transaction) are not logged: they
//! survive a crash once [`ConventionalDb::checkpoint`] has run after the load.
//!
//! Locking is Shore's hierarchy ([`lock`], [`session`]; Gray & Reuter ch. 7, §7.8): IS/IX
//! intention locks top-down on the volume (the database) and the store (a table's primary
//! index — store id = table id —, its heap file, or secondary index 9 or 10), cached per
//! transaction; IS/IX on the heap page holding the record and on the index leaf an entry
//! changes or a scan reads (taken conditionally under the page's latch); S/X on the row's
//! primary key (the key lock on the primary index); X on a record id a transaction creates
//! or frees (so that a freed slot is not reused before its deleter commits); and S/X key
//! locks on secondary index keys (a scan by secondary key S-locks the keys it returns, an
//! insert or delete X-locks the key it adds or removes). All are held to commit or abort
//! (strict 2PL), with wait-die at every level. Undo, restart recovery and a backup's redo run
//! without locks (a rollback under the transaction's own locks; recovery before any
//! session; shipped records under the checkpoint gate). There is no key-range locking, so
//! phantoms are possible as in Shore's default record locking; TPC-C's consistency
//! conditions are kept by the district row locks that serialise order-id assignment.

pub mod base;
pub mod btree;
pub mod config;
mod copy;
pub mod error;
pub mod heap;
pub mod latch;
pub mod lock;
pub mod log;
pub mod medium;
pub mod page;
pub mod session;
pub mod ship;
pub mod stats;
pub mod txn;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use self::btree::{BTree, Comparator, KeyField};
use self::heap::{HeapFile, Rid};
use self::latch::{Latch, LatchMode};
use self::lock::LockManager;
use self::log::{ClrAction, Kind, LogManager, LogScan, Record, Tail, LSN_FIRST};
use self::medium::{CheckpointStore, FileCheckpoint};
use self::page::{hdr, Backing, BufferPool, PageNo, PageShape, PageStore};
use self::stats::{SharedCounters, Stats};
use self::txn::TxnManager;
use crate::schema::{t, Organisation, SecondaryKey, Table, TableId};

pub use self::base::{follows_generation_on, generation_start, image_lsn, install_image_on};
pub use self::config::{Config, LatchKind, Step, Switches, PAGE_BYTES_LARGE, PAGE_BYTES_SMALL};
pub use self::copy::{ImageCopyProgress, ImageCopyStep, IMAGE_COPY_KEPT_BYTES_MAX};
pub use self::error::ConventionalError;
pub use self::log::{CrashingLogDevice, FileLogDevice, LogCorruption, LogDevice, TornTail};
pub use self::medium::{CheckpointCrash, Medium, MemoryMedium};
pub use self::page::BUFFER_POOL_FRAMES_PER_WORKER_MIN;
pub use self::session::Session;
pub use self::ship::{cut_log, cut_log_on, CutAt, LogCut, ShipApplyReport};
pub use self::stats::Counters;

/// File name of the checkpoint snapshot in the database directory.
pub const SNAPSHOT_FILE: &str = "checkpoint.db";
/// File name of the log in the database directory.
pub const LOG_FILE: &str = "wal.log";
const SNAPSHOT_MAGIC: &[u8; 8] = b"GLASSCK1";

use KeyField::{Bytes as B, Uint as U};
/// Key descriptors of the packed primary keys (big-endian bytes of the `u64`).
const WAREHOUSE_KEY: &[KeyField] = &[U(6), U(2)];
const DISTRICT_KEY: &[KeyField] = &[U(5), U(2), U(1)];
/// (pad, W_ID, D_ID, id): CUSTOMER, ORDER and NEW_ORDER.
const DISTRICT_ID_KEY: &[KeyField] = &[U(1), U(2), U(1), U(4)];
const ORDER_LINE_KEY: &[KeyField] = &[U(2), U(1), U(4), U(1)];
const ITEM_KEY: &[KeyField] = &[U(4), U(4)];
const STOCK_KEY: &[KeyField] = &[U(2), U(2), U(4)];
/// (C_W_ID, C_D_ID, C_LAST, C_FIRST, C_ID).
const CUSTOMER_NAME_KEY: &[KeyField] = &[U(2), U(1), B(16), B(16), U(4)];
/// (pad, O_W_ID, O_D_ID, O_C_ID, O_ID).
const ORDER_CUSTOMER_KEY: &[KeyField] = &[U(5), U(2), U(1), U(4), U(4)];

fn primary_descriptor(id: TableId) -> &'static [KeyField] {
    match id {
        TableId::Warehouse => WAREHOUSE_KEY,
        TableId::District => DISTRICT_KEY,
        TableId::Customer | TableId::Orders | TableId::NewOrder => DISTRICT_ID_KEY,
        TableId::OrderLine => ORDER_LINE_KEY,
        TableId::Item => ITEM_KEY,
        TableId::Stock => STOCK_KEY,
        TableId::History => &[],
    }
}

/// [`PageStore`] ids: a table's primary file has its table id; secondary indexes follow.
fn secondary_store(id: TableId) -> (u16, &'static [KeyField]) {
    match id {
        TableId::Customer => (9, CUSTOMER_NAME_KEY),
        TableId::Orders => (10, ORDER_CUSTOMER_KEY),
        other => unreachable!("table {other} has no secondary index"),
    }
}

/// The first heap file's store id: a table's heap file is `HEAP_STORE_BASE + table id`; its
/// primary index has the table's id (so its key locks are named by the table), the two
/// secondary indexes 9 and 10.
pub(crate) const HEAP_STORE_BASE: u16 = 11;
/// Stores in all: primary indexes 0–8 (none for HISTORY), secondary indexes 9 and 10, heap
/// files 11–19.
pub(crate) const STORES: usize = HEAP_STORE_BASE as usize + TableId::ALL.len();

/// The store id of a table's heap file.
#[inline]
pub(crate) fn heap_store(id: TableId) -> u16 {
    HEAP_STORE_BASE + id as u16
}

/// Which index of a table an entry record names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Index {
    /// Primary key (big-endian) → record id.
    Primary,
    /// Encoded secondary key → primary key.
    Secondary,
}

pub(crate) struct SecondaryIndex {
    pub tree: BTree,
}

/// A catalog entry: a table's heap file holding its records, the primary index mapping its
/// keys to record ids (every table but HISTORY, which has no key: TPC-C clause 1.3), and its
/// secondary index mapping secondary keys to primary keys (CUSTOMER and ORDERS).
pub(crate) struct TableEntry {
    pub id: TableId,
    pub row_len: usize,
    pub heap: HeapFile,
    pub primary: Option<BTree>,
    pub secondary: Option<SecondaryIndex>,
}

impl TableEntry {
    fn new<T: Table>(pool: Option<&Arc<BufferPool>>, sw: &Switches, latch: LatchMode, stats: &Stats) -> TableEntry {
        let row_len = std::mem::size_of::<T::Row>();
        let page_bytes = sw.page_bytes();
        let store = |id: u16| PageStore::new(id, pool, page_bytes, latch);
        let heap = HeapFile::new(store(heap_store(T::ID)), row_len, latch, stats);
        let primary = match T::ORG {
            Organisation::Heap => None,
            Organisation::Hash | Organisation::Ordered => {
                let cmp = Comparator::new(sw.generic_keys, primary_descriptor(T::ID), 8);
                Some(BTree::new(store(T::ID as u16), 8, 8, cmp, stats))
            }
        };
        let secondary = T::HAS_SECONDARY.then(|| {
            let (id, descriptor) = secondary_store(T::ID);
            let cmp = Comparator::new(sw.generic_keys, descriptor, T::Sec::LEN);
            SecondaryIndex { tree: BTree::new(store(id), T::Sec::LEN, 8, cmp, stats) }
        });
        TableEntry { id: T::ID, row_len, heap, primary, secondary }
    }

    /// The primary index (every table but HISTORY).
    pub fn primary(&self) -> Result<&BTree, &'static str> {
        self.primary.as_ref().ok_or("primary-index action on a table without a key")
    }

    /// The secondary index, for an action on it (redo, undo) that names this table.
    fn index(&self) -> Result<&SecondaryIndex, &'static str> {
        self.secondary.as_ref().ok_or("secondary-index action on a table without one")
    }

    /// The B+tree an index-entry record names.
    fn tree_of(&self, which: Index) -> Result<&BTree, &'static str> {
        match which {
            Index::Primary => self.primary(),
            Index::Secondary => Ok(&self.index()?.tree),
        }
    }

    /// The record id the primary index maps `key` to.
    pub fn rid_of(&self, key: u64, stats: &Stats) -> Option<Rid> {
        self.primary.as_ref()?.get(&key.to_be_bytes(), stats, |v, _| Rid::unpack(rid_value(v)))
    }

    /// Every store of the table, heap file first (the snapshot's order).
    fn stores(&self) -> Vec<&PageStore> {
        let mut v = vec![self.heap.store()];
        v.extend(self.primary.as_ref().map(|t| t.store()));
        v.extend(self.secondary.as_ref().map(|s| s.tree.store()));
        v
    }

    /// What the pages of `store` (one of [`TableEntry::stores`]) hold, the store having
    /// `pages` pages.
    fn page_shape(&self, store: &PageStore, pages: PageNo) -> PageShape {
        let tree = [self.primary.as_ref(), self.secondary.as_ref().map(|s| &s.tree)]
            .into_iter()
            .flatten()
            .find(|t| t.store().id() == store.id());
        match tree {
            Some(t) => t.page_shape(pages),
            None => PageShape::Heap { row_len: self.row_len },
        }
    }

    /// The store of this table with id `id` (a page image's store).
    fn store_by_id(&self, id: u64) -> Option<&PageStore> {
        self.stores().into_iter().find(|s| u64::from(s.id()) == id)
    }
}

/// Logs a page a structure modification changed (store, page, bytes) and returns the LSN to
/// stamp on it.
pub(crate) type SmoLog<'a> = dyn FnMut(u16, PageNo, &[u8]) -> Option<u64> + 'a;

/// How far past a store's last page a page image may lie: concurrent splits allocate pages in
/// one order and may log them in another, by at most a few pages per worker. A record naming
/// a page further out (a damaged or hostile shipped log) is refused rather than allocating
/// every page up to it.
const PAGE_IMAGE_AHEAD_MAX: PageNo = 4096;

/// The record id an index value holds (primary index) or the primary key (secondary).
#[inline]
pub(crate) fn rid_value(v: &[u8]) -> u64 {
    u64::from_le_bytes(v.try_into().expect("8-byte index value"))
}

/// One change's redo, as [`ConventionalDb::redo_step`] decided it from a log record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RedoStep<'a> {
    lsn: u64,
    table: TableId,
    action: RedoAction,
    key: u64,
    page: PageNo,
    image: &'a [u8],
}

/// How a change is redone: physically by record id on the heap, physiologically on the
/// index leaf the record names, physically for a page image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RedoAction {
    /// Place a record at its record id (an insert; a CLR undoing a delete).
    Place,
    /// Write a record over the one at its record id (an update; a CLR undoing one).
    Restore,
    /// Free a record id (a delete; a CLR undoing an insert).
    Free,
    /// Put an entry into the named index leaf.
    Put(Index),
    /// Remove an entry from the named index leaf.
    Cut(Index),
    /// Install a page image (a page allocated, or changed by a split), allocating the page
    /// if the store is shorter.
    Image,
}

/// What restart recovery found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// LSN of the checkpoint snapshot loaded (`None`: none existed).
    pub snapshot_lsn: Option<u64>,
    /// Valid log records at or after the snapshot's LSN.
    pub log_records: usize,
    /// Whether a torn tail after the last valid record was truncated (`torn_tail` says
    /// where and how much).
    pub truncated_tail: bool,
    /// The torn tail truncated: where the log now ends and how many damaged bytes were
    /// dropped. (Damage followed by valid records is refused instead:
    /// [`ConventionalError::CorruptLog`].)
    pub torn_tail: Option<TornTail>,
    /// Changes redone (repeating history, losers included).
    pub redone: usize,
    /// Of those, page images: pages B+tree splits changed or allocated, and heap pages
    /// allocated (structure modifications, redo-only).
    pub page_images: usize,
    /// Transactions with a commit record.
    pub winners: usize,
    /// The timestamps their commit records carry (each commit record holds its
    /// transaction's timestamp), sorted: which of the transactions replayed to a partition
    /// that came back alone from its log already took effect (docs/design.md §10).
    pub committed_ts: Vec<u64>,
    /// Transactions rolled back by recovery.
    pub losers: usize,
    /// Changes undone by recovery.
    pub undone: usize,
}

/// The conventional stack's database: shared by its worker [`Session`]s.
pub struct ConventionalDb {
    config: Config,
    /// What errors and `Debug` call the medium: where the log is.
    log_path: PathBuf,
    /// Where checkpoints go.
    checkpoint_store: Box<dyn CheckpointStore>,
    tables: Vec<Arc<TableEntry>>,
    catalog: Latch<HashMap<&'static str, Arc<TableEntry>>>,
    pub(crate) locks: LockManager,
    pub(crate) log: LogManager,
    pub(crate) txns: TxnManager,
    pub(crate) counters: SharedCounters,
    /// The buffer pool (`None`: the buffer-pool switch is off).
    pool: Option<Arc<BufferPool>>,
    sessions: AtomicUsize,
    next_session: AtomicU64,
    recovery: RecoveryReport,
    /// Where this database stands as a backup applying a primary's shipped log.
    standby: ship::Standby,
}

impl std::fmt::Debug for ConventionalDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConventionalDb")
            .field("config", &self.config)
            .field("log", &self.log_path)
            .field("checkpoint", &self.checkpoint_store.path())
            .finish_non_exhaustive()
    }
}

impl ConventionalDb {
    /// Opens the database in `dir` (created if missing) with the log in `dir/wal.log`:
    /// [`ConventionalDb::open_on`] with [`Medium::Dir`].
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Arc<ConventionalDb>, ConventionalError> {
        Self::open_on(&Medium::Dir(dir.as_ref().to_path_buf()), config)
    }

    /// Opens the database on `medium`. When the configuration is durable (log records and
    /// log flush on), restart recovery runs from the medium's checkpoint and log, and a
    /// checkpoint follows; otherwise the database starts empty and the medium is not touched.
    pub fn open_on(medium: &Medium, config: Config) -> Result<Arc<ConventionalDb>, ConventionalError> {
        let device = if config.switches.durable() { Some(medium.log_device()?) } else { None };
        let backing = match medium {
            Medium::Dir(dir) => Backing::dir(dir.clone()),
            Medium::Memory(_) => Backing::memory(),
        };
        Self::open_parts(medium.log_path(), medium.checkpoint_store(), config, device, backing)
    }

    /// As [`ConventionalDb::open`], with the log on `device` (e.g. a [`CrashingLogDevice`]);
    /// `dir` holds the checkpoint snapshot.
    pub fn open_with_device(
        dir: impl AsRef<Path>,
        config: Config,
        device: Option<Box<dyn LogDevice>>,
    ) -> Result<Arc<ConventionalDb>, ConventionalError> {
        let dir = dir.as_ref();
        let backing = Backing::dir(dir.to_path_buf());
        Self::open_parts(dir.join(LOG_FILE), Box::new(FileCheckpoint::new(dir)), config, device, backing)
    }

    /// Opens the database with the log on `device` (named `log_path` in errors) and
    /// checkpoints in `checkpoint_store` and evicted pages (a bounded pool) in `backing`;
    /// restart recovery as [`ConventionalDb::open_on`].
    fn open_parts(
        log_path: PathBuf,
        checkpoint_store: Box<dyn CheckpointStore>,
        config: Config,
        device: Option<Box<dyn LogDevice>>,
        backing: Backing,
    ) -> Result<Arc<ConventionalDb>, ConventionalError> {
        config.validate()?;
        let sw = config.switches;
        let latch = config.latch.mode(sw.latching);
        let stats = Stats::default();
        let frames = config.buffer_pool_frames().map(|f| u32::try_from(f).unwrap_or(u32::MAX));
        let pool = sw.buffer_pool.then(|| Arc::new(BufferPool::new(sw.page_bytes(), latch, frames, backing)));
        let p = pool.as_ref();
        let tables: Vec<Arc<TableEntry>> = vec![
            Arc::new(TableEntry::new::<t::Warehouses>(p, &sw, latch, &stats)),
            Arc::new(TableEntry::new::<t::Districts>(p, &sw, latch, &stats)),
            Arc::new(TableEntry::new::<t::Customers>(p, &sw, latch, &stats)),
            Arc::new(TableEntry::new::<t::Histories>(p, &sw, latch, &stats)),
            Arc::new(TableEntry::new::<t::Orders>(p, &sw, latch, &stats)),
            Arc::new(TableEntry::new::<t::NewOrders>(p, &sw, latch, &stats)),
            Arc::new(TableEntry::new::<t::OrderLines>(p, &sw, latch, &stats)),
            Arc::new(TableEntry::new::<t::Items>(p, &sw, latch, &stats)),
            Arc::new(TableEntry::new::<t::Stocks>(p, &sw, latch, &stats)),
        ];
        debug_assert!(tables.iter().enumerate().all(|(i, e)| e.id as usize == i));
        let catalog = tables.iter().map(|e| (e.id.name(), Arc::clone(e))).collect();

        let durable = sw.durable() && device.is_some();
        let mut snapshot_lsn = None;
        let mut scan = None;
        let mut device = device;
        if durable {
            checkpoint_store.prepare()?;
            snapshot_lsn = load_snapshot(checkpoint_store.as_ref(), &tables, sw.page_bytes(), &stats)?;
            let dev = device.as_mut().expect("durable configurations have a device");
            let s = log::scan_expecting(dev.as_mut(), Some(snapshot_lsn.unwrap_or(LSN_FIRST)))
                .map_err(ConventionalError::io("read log"))?;
            // Every refusal comes before the first write: a refused log is left as found.
            refuse_unrecoverable(&log_path, &checkpoint_store.path(), snapshot_lsn, &s)?;
            if let Tail::Torn(t) = s.tail {
                log::zero_tail(dev.as_mut(), t.offset, s.device_size)
                    .map_err(ConventionalError::io("truncate log tail"))?;
            }
            scan = Some(s);
        }
        let from = snapshot_lsn.unwrap_or(LSN_FIRST);
        let (base, next, max_txn) = match &scan {
            Some(LogScan { base: Some(base), bytes, .. }) => {
                let max_txn = scan.as_ref().map_or(0, |s| s.records().map(|r| r.head.txn).max().unwrap_or(0));
                (*base, base + bytes.len() as u64, max_txn)
            }
            _ => (from, from, 0),
        };
        let capacity = scan.as_ref().map_or(0, |s| s.device_size);
        let log = LogManager::new(
            sw.log_flush,
            config.log_prealloc_bytes,
            device.map(|d| (d, base, capacity)),
            next.max(from),
        );

        let db = ConventionalDb {
            locks: LockManager::new(sw.locking),
            txns: TxnManager::new(sw.full_txn, latch, max_txn + 1),
            log,
            catalog: Latch::new(catalog, latch),
            pool,
            tables,
            counters: SharedCounters::default(),
            sessions: AtomicUsize::new(0),
            next_session: AtomicU64::new(1),
            recovery: RecoveryReport::default(),
            standby: ship::Standby::default(),
            config,
            log_path,
            checkpoint_store,
        };
        let mut db = db;
        if let Some(scan) = &scan {
            db.recovery = db.recover(scan, from, &stats)?;
            db.recovery.snapshot_lsn = snapshot_lsn;
            if let Tail::Torn(t) = scan.tail {
                db.recovery.truncated_tail = true;
                db.recovery.torn_tail = Some(t);
            }
        }
        // Free slots are free for good now: no transaction runs (losers were rolled back).
        for e in &db.tables {
            e.heap.rebuild_free_space(&stats);
        }
        db.counters.merge(&stats.take());
        if durable && db.config.checkpoint_on_open && db.checkpoint_unavailable().is_none() {
            db.checkpoint()?;
        }
        Ok(Arc::new(db))
    }

    /// Opens a worker session; refused when `config.workers` sessions are open.
    pub fn session(self: &Arc<Self>) -> Result<Session, ConventionalError> {
        let workers = self.config.workers;
        self.sessions
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < workers).then_some(n + 1))
            .map_err(|_| ConventionalError::TooManySessions { workers })?;
        Ok(Session::new(Arc::clone(self), self.next_session.fetch_add(1, Ordering::Relaxed)))
    }

    pub(crate) fn session_closed(&self) {
        self.sessions.fetch_sub(1, Ordering::AcqRel);
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn switches(&self) -> &Switches {
        &self.config.switches
    }

    /// The component counters merged so far from every session (sessions merge at each
    /// transaction end and when they close), plus the log device's bytes and fsyncs.
    pub fn counters(&self) -> Counters {
        let pool = |c: fn(&BufferPool) -> &AtomicU64| self.pool.as_ref().map_or(0, |p| c(p).load(Ordering::Relaxed));
        Counters {
            log_bytes_written: self.log.bytes_written.load(Ordering::Relaxed),
            fsyncs: self.log.fsyncs.load(Ordering::Relaxed),
            page_reads: pool(|p| &p.reads),
            page_writes: pool(|p| &p.writes),
            page_evictions: pool(|p| &p.evictions),
            ..self.counters.load()
        }
    }

    /// Frames the buffer pool holds pages in (`None`: the buffer-pool switch is off). With an
    /// unbounded pool this is every page of the database; a bounded pool stops at its size.
    pub fn buffer_pool_frames_used(&self) -> Option<u64> {
        self.pool.as_ref().map(|p| u64::from(p.frames_used()))
    }

    /// What restart recovery did when this database was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// The catalog lookup: by table name, under the catalog latch.
    pub(crate) fn lookup(&self, id: TableId, stats: &Stats) -> Arc<TableEntry> {
        Arc::clone(self.catalog.read(stats).get(id.name()).expect("every table is in the catalog"))
    }

    pub(crate) fn table(&self, id: TableId) -> &TableEntry {
        &self.tables[id as usize]
    }

    /// Takes a transaction-consistent checkpoint (see the module documentation): waits for
    /// active transactions to finish, holds new ones back, writes the snapshot and starts a
    /// new log generation. Must not be called from a session inside a transaction. Needs
    /// durable logging, real latches and full transaction bookkeeping. On a backup that
    /// applied shipped log records, the snapshot's LSN (and the new log generation) lies past
    /// the last record applied, so every page LSN stays below every later record's LSN.
    pub fn checkpoint(&self) -> Result<(), ConventionalError> {
        let sw = self.switches();
        if let Some(reason) = self.checkpoint_unavailable() {
            return Err(ConventionalError::CheckpointUnavailable { reason });
        }
        let _quiet = self.txns.quiesce();
        let end = self.log.end();
        self.log
            .flush_to(end)
            .map_err(|e| ConventionalError::Io { what: "flush log", source: std::io::Error::other(e) })?;
        let lsn = end.max(self.standby.applied_end().unwrap_or(0));
        write_snapshot(self.checkpoint_store.as_ref(), &self.tables, sw.page_bytes(), lsn)?;
        self.log
            .restart_at(lsn)
            .map_err(|e| ConventionalError::Io { what: "start log generation", source: std::io::Error::other(e) })
    }

    /// Why [`ConventionalDb::checkpoint`] is refused under this configuration, if it is.
    pub fn checkpoint_unavailable(&self) -> Option<&'static str> {
        let sw = self.switches();
        if !sw.durable() || !self.log.has_device() {
            Some("log records and log flush are switched off, or there is no log device")
        } else if !sw.latching {
            Some("latching is switched off")
        } else if !sw.full_txn {
            Some("transaction bookkeeping is trimmed (no checkpoint gate)")
        } else {
            None
        }
    }

    /// Applies an undo action (a CLR's) to a table without locks: physically by record id on
    /// the heap, logically by key on an index (the entry may have moved since, by a split).
    /// `stamp(page)` runs under the changed page's latch and returns the LSN to stamp;
    /// `smo(store, page, bytes)` logs a page a B+tree split changed (a re-insert may split).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply(
        &self,
        entry: &TableEntry,
        action: ClrAction,
        key: u64,
        image: &[u8],
        stats: &Stats,
        stamp: &mut dyn FnMut(PageNo) -> Option<u64>,
        smo: &mut SmoLog<'_>,
    ) -> Result<(), &'static str> {
        let rid = Rid::unpack(key);
        let value = key.to_le_bytes();
        match action {
            ClrAction::Restore => entry.heap.restore(rid, image, None, stats, stamp),
            ClrAction::Reinsert => entry.heap.place(rid, image, None, stats, stamp),
            ClrAction::Free => entry.heap.free(rid, None, stats, stamp),
            ClrAction::KeyRemove | ClrAction::IndexRemove => {
                let which = if action == ClrAction::KeyRemove { Index::Primary } else { Index::Secondary };
                let tree = entry.tree_of(which)?;
                if image.len() != tree.key_len() {
                    return Err("index key width");
                }
                tree.delete(image, stats, |_, p| ((), stamp(p))).ok_or("removal of a missing index entry")
            }
            ClrAction::KeyReinsert | ClrAction::IndexReinsert => {
                let which = if action == ClrAction::KeyReinsert { Index::Primary } else { Index::Secondary };
                let tree = entry.tree_of(which)?;
                if image.len() != tree.key_len() {
                    return Err("index key width");
                }
                let store = tree.store().id();
                tree.insert(image, &value, stats, &mut *stamp, &mut |p, b| smo(store, p, b))
                    .map_err(|()| "re-insert of a present index entry")
            }
        }
    }

    /// Logs a page image (a page a B+tree split changed or allocated, or a heap page
    /// allocated) as a redo-only record of transaction `txn`, outside its undo chain; returns
    /// the LSN to stamp on the page. `None` when the log cannot take it (the transaction's
    /// commit will fail on the same device) or page LSNs are off.
    pub(crate) fn log_page_image(
        &self,
        table: TableId,
        store: u16,
        page: PageNo,
        bytes: &[u8],
        txn: u64,
    ) -> Option<u64> {
        let mut image = Vec::with_capacity(bytes.len());
        hdr::image(bytes, &mut image);
        let mut rec = Vec::with_capacity(image.len() + 64);
        let head =
            log::Head { table: Some(table), key: u64::from(store), page, ..log::Head::new(Kind::PageImage, txn, 0) };
        log::encode(&mut rec, &head, &[], &image);
        let lsn = self.log.append(&mut rec).ok()?;
        self.switches().page_lsns.then_some(lsn)
    }

    /// What redoing log record `r` does, decided from the record and the catalog alone (no
    /// page is read): `None` for records that change nothing (commit, end of rollback,
    /// checkpoint). Checks that the record names a table, that the table has the index or
    /// store it names, and that its images have the width they must.
    pub(crate) fn redo_step<'a>(&self, r: &Record<'a>) -> Result<Option<RedoStep<'a>>, &'static str> {
        use ClrAction as A;
        if matches!(r.head.kind, Kind::Commit | Kind::Abort | Kind::Checkpoint) {
            return Ok(None);
        }
        let table = r.head.table.ok_or("change record names no table")?;
        let entry = self.table(table);
        let (action, image) = match (r.head.kind, r.head.action) {
            (Kind::Update, _) | (Kind::Clr, Some(A::Restore)) => (RedoAction::Restore, r.after),
            (Kind::Insert, _) | (Kind::Clr, Some(A::Reinsert)) => (RedoAction::Place, r.after),
            (Kind::Delete, _) => (RedoAction::Free, r.before),
            (Kind::Clr, Some(A::Free)) => (RedoAction::Free, r.after),
            (Kind::KeyInsert, _) => (RedoAction::Put(Index::Primary), r.after),
            (Kind::Clr, Some(A::KeyReinsert)) => (RedoAction::Put(Index::Primary), r.after),
            (Kind::KeyDelete, _) => (RedoAction::Cut(Index::Primary), r.before),
            (Kind::Clr, Some(A::KeyRemove)) => (RedoAction::Cut(Index::Primary), r.after),
            (Kind::IndexInsert, _) => (RedoAction::Put(Index::Secondary), r.after),
            (Kind::Clr, Some(A::IndexReinsert)) => (RedoAction::Put(Index::Secondary), r.after),
            (Kind::IndexDelete, _) => (RedoAction::Cut(Index::Secondary), r.before),
            (Kind::Clr, Some(A::IndexRemove)) => (RedoAction::Cut(Index::Secondary), r.after),
            (Kind::PageImage, _) => (RedoAction::Image, r.after),
            _ => return Err("compensation record without an action"),
        };
        match action {
            RedoAction::Place | RedoAction::Restore if image.len() != entry.row_len => return Err("image width"),
            RedoAction::Free if !image.is_empty() && image.len() != entry.row_len => return Err("image width"),
            RedoAction::Put(w) | RedoAction::Cut(w) if image.len() != entry.tree_of(w)?.key_len() => {
                return Err("index key width")
            }
            RedoAction::Image => {
                let store = entry.store_by_id(r.head.key).ok_or("page image of a store the table does not have")?;
                if image.len() < page::HEADER_BYTES || image.len() > store.page_bytes() || r.head.page == 0 {
                    return Err("page image size");
                }
            }
            _ => {}
        }
        Ok(Some(RedoStep { lsn: r.lsn, table, action, key: r.head.key, page: r.head.page, image }))
    }

    /// Redoes one change (restart recovery's redo pass, and a backup applying shipped log
    /// records), each skipped when its page's LSN shows it applied: heap records physically
    /// at their record id, index entries on the leaf the record names, page images over
    /// their page. Pages are stamped with the record's LSN when LSNs are kept.
    pub(crate) fn redo(&self, step: &RedoStep<'_>, stats: &Stats) -> Result<(), &'static str> {
        let entry = self.table(step.table);
        let keep = self.switches().page_lsns;
        let stamp = |_page: PageNo| keep.then_some(step.lsn);
        let lsn = Some(step.lsn);
        let rid = Rid::unpack(step.key);
        match step.action {
            RedoAction::Place => entry.heap.place(rid, step.image, lsn, stats, stamp),
            RedoAction::Restore => entry.heap.restore(rid, step.image, lsn, stats, stamp),
            RedoAction::Free => entry.heap.free(rid, lsn, stats, stamp),
            RedoAction::Put(w) => {
                entry.tree_of(w)?.redo_put(step.page, step.image, &step.key.to_le_bytes(), lsn, stats, stamp)
            }
            RedoAction::Cut(w) => entry.tree_of(w)?.redo_cut(step.page, step.image, lsn, stats, stamp),
            RedoAction::Image => {
                let store = entry.store_by_id(step.key).ok_or("page image of a store the table does not have")?;
                if step.page > store.pages().saturating_add(PAGE_IMAGE_AHEAD_MAX) {
                    return Err("page image far past the end of its store");
                }
                let shape = entry.page_shape(store, store.pages().max(step.page).saturating_add(PAGE_IMAGE_AHEAD_MAX));
                let mut page = store.ensure(step.page, stats);
                if hdr::lsn(&page) >= step.lsn {
                    return Ok(());
                }
                let mut installed = vec![0u8; page.len()];
                hdr::install_image(&mut installed, step.image)?;
                hdr::verify(&installed, &shape)?;
                hdr::install_image(&mut page, step.image)?;
                hdr::set_lsn(&mut page, if keep { step.lsn } else { 0 });
                Ok(())
            }
        }
    }

    /// ARIES restart: analysis, redo (repeating history), undo of losers with CLRs.
    fn recover(&self, scan: &LogScan, from: u64, stats: &Stats) -> Result<RecoveryReport, ConventionalError> {
        let records: Vec<_> = scan.records().filter(|r| r.lsn >= from).collect();
        let mut report = RecoveryReport { log_records: records.len(), ..RecoveryReport::default() };
        let stamp_lsns = self.switches().page_lsns;

        // Analysis: the transaction table at the crash.
        #[derive(PartialEq)]
        enum Fate {
            Running,
            Committed,
            Ended,
        }
        let mut txns: HashMap<u64, (u64, Fate)> = HashMap::new();
        for r in &records {
            match r.head.kind {
                // Redo-only: outside every undo chain.
                Kind::PageImage => {}
                Kind::Commit => {
                    txns.entry(r.head.txn).or_insert((0, Fate::Running)).1 = Fate::Committed;
                    report.committed_ts.push(r.head.extra);
                }
                Kind::Abort => txns.entry(r.head.txn).or_insert((0, Fate::Running)).1 = Fate::Ended,
                Kind::Checkpoint => {}
                // An undoable change or a CLR: the transaction's last record so far.
                _ => {
                    debug_assert!(r.head.kind.is_undoable() || r.head.kind == Kind::Clr);
                    txns.entry(r.head.txn).or_insert((0, Fate::Running)).0 = r.lsn;
                }
            }
        }
        report.winners = txns.values().filter(|(_, f)| *f == Fate::Committed).count();
        report.committed_ts.sort_unstable();

        // Redo: every change from the snapshot on, losers' too.
        for r in &records {
            let fail = |what| ConventionalError::Recovery { lsn: r.lsn, what };
            if let Some(step) = self.redo_step(r).map_err(fail)? {
                self.redo(&step, stats).map_err(fail)?;
                report.redone += 1;
                report.page_images += usize::from(step.action == RedoAction::Image);
            }
        }

        // Undo: roll the losers back, newest change first across all of them.
        let by_lsn = |lsn: u64| records.binary_search_by_key(&lsn, |r| r.lsn).ok().map(|i| &records[i]);
        let mut to_undo: std::collections::BTreeMap<u64, u64> = txns
            .iter()
            .filter(|(_, (last, f))| *f == Fate::Running && *last != 0)
            .map(|(&txn, (last, _))| (*last, txn))
            .collect();
        report.losers = to_undo.len();
        let mut last_lsn: HashMap<u64, u64> = to_undo.iter().map(|(&lsn, &txn)| (txn, lsn)).collect();
        let mut clr = Vec::new();
        while let Some((lsn, txn)) = to_undo.pop_last() {
            let r = by_lsn(lsn).ok_or(ConventionalError::Recovery { lsn, what: "undo chain leaves the log" })?;
            let next = match r.head.kind {
                Kind::Clr => r.head.extra,
                k if k.is_undoable() => {
                    let table = r.head.table.expect("changes name their table");
                    let entry = self.table(table);
                    let (action, image) = undo_of(r);
                    let prev = last_lsn[&txn];
                    let mut written = None;
                    let mut stamp = |page: PageNo| -> Option<u64> {
                        clr.clear();
                        let head = log::Head {
                            table: Some(table),
                            action: Some(action),
                            key: r.head.key,
                            page,
                            extra: r.head.prev,
                            ..log::Head::new(Kind::Clr, txn, prev)
                        };
                        log::encode(&mut clr, &head, &[], image);
                        let lsn = self.log.append(&mut clr).ok()?;
                        written = Some(lsn);
                        stamp_lsns.then_some(lsn)
                    };
                    let mut smo =
                        |store: u16, page: PageNo, bytes: &[u8]| self.log_page_image(table, store, page, bytes, txn);
                    self.apply(entry, action, r.head.key, image, stats, &mut stamp, &mut smo)
                        .map_err(|what| ConventionalError::Recovery { lsn, what })?;
                    let clr_lsn = written.ok_or(ConventionalError::Recovery { lsn, what: "log append failed" })?;
                    last_lsn.insert(txn, clr_lsn);
                    report.undone += 1;
                    r.head.prev
                }
                _ => return Err(ConventionalError::Recovery { lsn, what: "undo chain reaches a non-change record" }),
            };
            if next >= from && next != 0 {
                to_undo.insert(next, txn);
            } else {
                let mut end = Vec::new();
                log::encode(&mut end, &log::Head::new(Kind::Abort, txn, last_lsn[&txn]), &[], &[]);
                self.log.append(&mut end).map_err(|e| ConventionalError::Io {
                    what: "log end of rollback",
                    source: std::io::Error::other(e),
                })?;
            }
        }
        self.log
            .flush_to(self.log.end())
            .map_err(|e| ConventionalError::Io { what: "flush recovery log", source: std::io::Error::other(e) })?;
        Ok(report)
    }
}

/// The undo of change record `r`: the CLR action and the image it writes (a row for the
/// heap, an entry's key for an index).
pub(crate) fn undo_of<'a>(r: &Record<'a>) -> (ClrAction, &'a [u8]) {
    undo_action(r.head.kind, r.before, r.after)
}

/// The undo of a change of `kind` with these images (see [`undo_of`]).
pub(crate) fn undo_action<'a>(kind: Kind, before: &'a [u8], after: &'a [u8]) -> (ClrAction, &'a [u8]) {
    match kind {
        Kind::Update => (ClrAction::Restore, before),
        Kind::Delete => (ClrAction::Reinsert, before),
        Kind::Insert => (ClrAction::Free, &[]),
        Kind::KeyInsert => (ClrAction::KeyRemove, after),
        Kind::KeyDelete => (ClrAction::KeyReinsert, before),
        Kind::IndexInsert => (ClrAction::IndexRemove, after),
        Kind::IndexDelete => (ClrAction::IndexReinsert, before),
        k => unreachable!("{k:?} is not an undoable change"),
    }
}

/// Refuses, before restart recovery writes anything, a log it cannot recover from as found:
/// a checkpoint snapshot missing although the log says one was taken (its first record is a
/// checkpoint record, or its generation starts past [`LSN_FIRST`]); a log that starts after
/// the snapshot; damage in the middle of the log ([`Tail::Corrupt`]).
fn refuse_unrecoverable(
    log_path: &Path,
    checkpoint_path: &Path,
    snapshot_lsn: Option<u64>,
    s: &LogScan,
) -> Result<(), ConventionalError> {
    // The log's generation: its first record's, or (that one unreadable) the newest found.
    let generation = s.base.or(s.newest_base_after);
    if snapshot_lsn.is_none() {
        let starts_at_checkpoint = s.records().next().is_some_and(|r| r.head.kind == Kind::Checkpoint);
        if starts_at_checkpoint || generation.is_some_and(|g| g > LSN_FIRST) {
            return Err(ConventionalError::MissingCheckpoint {
                path: checkpoint_path.to_path_buf(),
                log_start: generation.unwrap_or(LSN_FIRST),
            });
        }
    }
    let from = snapshot_lsn.unwrap_or(LSN_FIRST);
    if let Some(g) = generation.filter(|&g| g > from) {
        return Err(ConventionalError::LogGap { log_start: g, snapshot: from });
    }
    if let Tail::Corrupt(c) = s.tail {
        return Err(ConventionalError::CorruptLog {
            path: log_path.to_path_buf(),
            offset: c.offset,
            lsn_expected: c.lsn_expected,
            next_valid_offset: c.next_valid_offset,
            records_after: c.records_after,
            commits_after: c.commits_after,
            bytes_after: c.bytes_after,
        });
    }
    Ok(())
}

/// Writes every page of every file to the snapshot, replacing the last one atomically
/// ([`CheckpointStore::replace`]; the file store: temporary file, fsync, rename, directory
/// fsync). Layout: magic, page size (u32), store count (u32), LSN (u64); per store: id (u32),
/// page count (u32), the pages; then the xxh3-64 of everything before it.
fn write_snapshot(
    store: &dyn CheckpointStore,
    tables: &[Arc<TableEntry>],
    page_bytes: usize,
    lsn: u64,
) -> Result<(), ConventionalError> {
    let stats = Stats::default();
    let stores: Vec<&PageStore> = tables.iter().flat_map(|e| e.stores()).collect();
    store.replace(&mut |out: &mut dyn Write| {
        let mut hasher = Xxh3::new();
        let mut put = |bytes: &[u8]| -> std::io::Result<()> {
            hasher.update(bytes);
            out.write_all(bytes)
        };
        put(SNAPSHOT_MAGIC)?;
        put(&(page_bytes as u32).to_le_bytes())?;
        put(&(stores.len() as u32).to_le_bytes())?;
        put(&lsn.to_le_bytes())?;
        for (i, store) in stores.iter().enumerate() {
            let pages = store.pages();
            put(&(i as u32).to_le_bytes())?;
            put(&pages.to_le_bytes())?;
            for no in 1..=pages {
                put(&store.read(no, &stats))?;
            }
        }
        let sum = hasher.digest();
        out.write_all(&sum.to_le_bytes())
    })
}

/// Loads the snapshot into the (empty) stores; returns its LSN, `None` when there is none.
fn load_snapshot(
    store: &dyn CheckpointStore,
    tables: &[Arc<TableEntry>],
    page_bytes: usize,
    stats: &Stats,
) -> Result<Option<u64>, ConventionalError> {
    let path = store.path();
    let Some(bytes) = store.read()? else { return Ok(None) };
    let bad = |what| ConventionalError::BadSnapshot { path: path.clone(), what };
    if bytes.len() < 32 || &bytes[..8] != SNAPSHOT_MAGIC {
        return Err(bad("not a glass checkpoint snapshot"));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    if xxh3_64(body) != u64::from_le_bytes(sum.try_into().expect("8 bytes")) {
        return Err(bad("checksum mismatch"));
    }
    let u32_at = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().expect("4 bytes"));
    let found = u32_at(8) as usize;
    if found != page_bytes {
        return Err(ConventionalError::PageSizeMismatch { found, configured: page_bytes });
    }
    let stores: Vec<(&TableEntry, &PageStore)> =
        tables.iter().flat_map(|e| e.stores().into_iter().map(move |s| (&**e, s))).collect();
    if u32_at(12) as usize != stores.len() {
        return Err(bad("store count differs"));
    }
    let lsn = u64::from_le_bytes(body[16..24].try_into().expect("8 bytes"));
    let mut at = 24;
    for (i, (entry, store)) in stores.iter().enumerate() {
        if at + 8 > body.len() || u32_at(at) as usize != i {
            return Err(bad("store directory damaged"));
        }
        let pages = u32_at(at + 4);
        at += 8;
        if at + pages as usize * page_bytes > body.len() {
            return Err(bad("truncated"));
        }
        let shape = entry.page_shape(store, pages);
        for no in 1..=pages {
            let image = &body[at..at + page_bytes];
            hdr::verify(image, &shape).map_err(bad)?;
            let mut page = if no <= store.pages() { store.write(no, stats) } else { store.allocate(stats).1 };
            page.copy_from_slice(image);
            at += page_bytes;
        }
    }
    Ok(Some(lsn))
}
