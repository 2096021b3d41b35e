//! A copy of every page of every store taken while the database runs on (docs/design.md §10,
//! "Copying without stopping"): a *copy-on-write page image copy*, consistent at the instant
//! it began — a point between transactions — and streamed a few pages at a time while
//! transactions keep running between and during the steps. It is the conventional stack's
//! counterpart of the lean kernel's row copy (`crate::lean::copy`), and the paper's recovery
//! by copying state from a live replica (Harizopoulos et al., SIGMOD 2008, Section 5.3)
//! without the checkpoint that would hold every transaction back while all pages are written.
//!
//! Owns: the copy's state ([`ImageCopy`], shared by the sender and every store), each
//! store's copy-on-write hook ([`StoreCopy`], called by `PageStore::write`), the sender
//! ([`ConventionalDb::image_copy_step`]) and the receiver's rebuild
//! ([`ConventionalDb::open_from_image`]).
//!
//! Guarantees:
//! - the bytes are exactly a checkpoint snapshot as `write_snapshot` writes it — magic, page
//!   size, store count, LSN; per store its index, page count and pages; the xxh3-64 of all
//!   that — of the database at the instant [`ConventionalDb::begin_image_copy`] returned, at
//!   the LSN a checkpoint taken then would have had; so [`super::image_lsn`] and
//!   [`super::install_image_on`] take it as they take a checkpoint image, and restart
//!   recovery rebuilds exactly that state. An idle copy is byte for byte the snapshot a
//!   checkpoint at the same instant writes.
//! - the copy begins as a checkpoint does: under the checkpoint gate (it waits for running
//!   transactions, holding new ones back), the log flushed to its end, the LSN its end (on a
//!   backup, at least the end of the shipped records applied). It notes each store's page
//!   count there and arms each store's hook, then lets transactions run again.
//! - how the copy stays at its instant: the first time a page the copy has yet to send is
//!   latched exclusive (`PageStore::write`: every change to an existing page, redo and undo
//!   included, goes through it), the hook keeps the page's bytes aside before the caller can
//!   change one; the sender sends the kept before-image instead of the page's current bytes.
//!   The sender marks a page sent while it holds the page's shared latch, the hook checks and
//!   keeps while it holds the exclusive latch, so the two are serialised per page: a page is
//!   either sent before its first change (its bytes then are its bytes at the beginning) or
//!   kept before it. Pages allocated since the beginning are not part of the image (a store's
//!   page count is its count then); a page of the image that points at one holds its
//!   before-image, which does not.
//! - cost on the hot path: with no copy under way, one relaxed atomic load per exclusive
//!   latch. A relaxed load suffices: a store is armed under the checkpoint gate, and every
//!   transaction (and a backup applying shipped records) passes the gate's mutex before it
//!   latches a page, so it sees the store armed. With a copy under way, the store's mutex per
//!   exclusive latch, and one copy of a page the first time a page not yet sent is latched
//!   exclusive (a B+tree descent latches only the leaf exclusive; a split, the pages it
//!   changes). Each page is kept at most once, and its before-image freed when it is sent.
//! - memory: past [`IMAGE_COPY_KEPT_BYTES_MAX`] bytes of kept before-images (a bound per
//!   copy) the copy is given up — the hook that would pass it keeps nothing more, every
//!   store's kept images are dropped at the store's next change or the next step, which
//!   reports [`ConventionalError::ImageCopyOverBudget`] — never unbounded memory.
//! - one copy at a time per database; [`ConventionalDb::abort_image_copy`] drops it and all it
//!   kept. Lock order: the sender's mutex, then a page latch, then a store's copy mutex; the
//!   hook holds page latches and takes only its store's copy mutex, never the sender's.
//!   Needs what a checkpoint needs (durable logging, real latches, the checkpoint gate).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use xxhash_rust::xxh3::Xxh3;

use super::page::{PageNo, PageStore};
use super::stats::Stats;
use super::{install_image_on, Config, ConventionalDb, ConventionalError, Medium, MemoryMedium, SNAPSHOT_MAGIC};

/// Bytes of page before-images one copy keeps aside before it gives up.
pub const IMAGE_COPY_KEPT_BYTES_MAX: usize = 1 << 30;

/// Bytes of an image's header (magic, page size, store count, LSN), of a store's head (its
/// index and page count), and of the trailer (the xxh3-64).
const HEADER_BYTES: u64 = 24;
const STORE_HEAD_BYTES: u64 = 8;
const TRAILER_BYTES: u64 = 8;

/// What one [`ConventionalDb::image_copy_step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageCopyStep {
    /// Bytes of the image were appended; more follow.
    More,
    /// The trailer is out: the image is whole and the copy over. `lsn` is its LSN (its
    /// position in the log lineage), `bytes` its size.
    Done { lsn: u64, bytes: u64 },
}

/// Where an image copy stands, for progress reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ImageCopyProgress {
    /// The image's LSN.
    pub lsn: u64,
    /// Pages sent so far, of `pages_total` (every store's page count at the beginning).
    pub pages_sent: u64,
    pub pages_total: u64,
    /// Bytes of the image appended so far, of `bytes_total` (its whole size, trailer
    /// included).
    pub bytes_sent: u64,
    pub bytes_total: u64,
    /// Before-images kept now (pages changed before they were sent, not sent yet), and their
    /// bytes.
    pub kept_pages: u64,
    pub kept_bytes: u64,
    /// Pages kept since the copy began (sent ones included).
    pub kept_pages_all: u64,
    /// Whether the copy was given up past its bound on kept bytes (the next step reports
    /// it and ends the copy).
    pub given_up: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One image copy under way, shared by its sender and the hooks of every store.
pub(crate) struct ImageCopy {
    lsn: u64,
    page_bytes: usize,
    /// Each store's page count at the beginning, in the snapshot's store order.
    pages: Box<[PageNo]>,
    pages_total: u64,
    bytes_total: u64,
    kept_bytes_max: usize,
    /// Bytes and pages of before-images kept now; pages kept since the beginning.
    kept_bytes: AtomicUsize,
    kept_pages: AtomicU64,
    kept_pages_all: AtomicU64,
    /// Set by a hook that would have kept past `kept_bytes_max`.
    given_up: AtomicBool,
    pages_sent: AtomicU64,
    bytes_sent: AtomicU64,
    sender: Mutex<Sender>,
}

/// The sender's position in the image.
struct Sender {
    /// Over every byte appended so far (the trailer is its digest).
    hasher: Xxh3,
    header_out: bool,
    /// Index of the store being sent (`pages.len()`: all sent).
    store: usize,
    /// The next page of that store to send (0: the store's head is not out yet).
    next: PageNo,
}

impl ImageCopy {
    /// Reserves room for a before-image of `bytes`; `false` (nothing reserved) past the bound.
    fn reserve(&self, bytes: usize) -> bool {
        let max = self.kept_bytes_max;
        self.kept_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |k| k.checked_add(bytes).filter(|&n| n <= max))
            .is_ok()
    }

    /// Accounts for `pages` before-images of `bytes` in all no longer kept.
    fn release(&self, pages: usize, bytes: usize) {
        self.kept_pages.fetch_sub(pages as u64, Ordering::Relaxed);
        self.kept_bytes.fetch_sub(bytes, Ordering::AcqRel);
    }

    fn given_up(&self) -> bool {
        self.given_up.load(Ordering::Acquire)
    }

    fn progress(&self) -> ImageCopyProgress {
        ImageCopyProgress {
            lsn: self.lsn,
            pages_sent: self.pages_sent.load(Ordering::Relaxed),
            pages_total: self.pages_total,
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            bytes_total: self.bytes_total,
            kept_pages: self.kept_pages.load(Ordering::Relaxed),
            kept_bytes: self.kept_bytes.load(Ordering::Relaxed) as u64,
            kept_pages_all: self.kept_pages_all.load(Ordering::Relaxed),
            given_up: self.given_up(),
        }
    }
}

/// A store's copy-on-write hook (a field of every `PageStore`): disarmed unless an image copy
/// is under way and has yet to send some page of the store.
#[derive(Default)]
pub(crate) struct StoreCopy {
    /// Read relaxed on every exclusive latch (see the module documentation).
    armed: AtomicBool,
    state: Mutex<Option<StoreCopyState>>,
}

/// The store's part of the copy under way.
struct StoreCopyState {
    copy: Arc<ImageCopy>,
    /// The store's page count at the beginning: later pages are not part of the image.
    pages: PageNo,
    /// Pages 1..=sent have been sent (the sender goes in page order).
    sent: PageNo,
    /// Before-images of pages changed since the beginning and not sent yet.
    kept: HashMap<PageNo, Box<[u8]>>,
}

impl StoreCopyState {
    /// Drops every kept before-image (accounted on the copy); returns them, to be freed
    /// outside the store's mutex.
    fn drop_kept(&mut self) -> HashMap<PageNo, Box<[u8]>> {
        let kept = std::mem::take(&mut self.kept);
        self.copy.release(kept.len(), kept.values().map(|b| b.len()).sum());
        kept
    }
}

impl StoreCopy {
    /// Whether an image copy may need this store's before-images (the hot path's one load).
    #[inline]
    pub fn armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    /// The copy-on-write hook, called by `PageStore::write` with page `no` latched exclusive and
    /// not yet changed: keeps its bytes when it is part of the image, not sent and not kept
    /// yet. Past the copy's bound the copy is given up instead, and this store's kept
    /// images dropped.
    #[cold]
    #[inline(never)]
    pub fn before_write(&self, no: PageNo, page: &[u8]) {
        let dropped = {
            let mut state = lock(&self.state);
            let Some(s) = state.as_mut() else { return };
            if !s.copy.given_up() {
                if no <= s.sent || no > s.pages || s.kept.contains_key(&no) {
                    return;
                }
                if s.copy.reserve(page.len()) {
                    s.kept.insert(no, page.into());
                    s.copy.kept_pages.fetch_add(1, Ordering::Relaxed);
                    s.copy.kept_pages_all.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                s.copy.given_up.store(true, Ordering::Release);
            }
            // Given up: this store keeps nothing more (the state stays, so that the next
            // step finds the copy and reports why it ended).
            self.armed.store(false, Ordering::Relaxed);
            s.drop_kept()
        };
        drop(dropped);
    }

    /// Arms the hook for `copy`, the store having `pages` pages now.
    fn arm(&self, copy: &Arc<ImageCopy>, pages: PageNo) {
        *lock(&self.state) = Some(StoreCopyState { copy: Arc::clone(copy), pages, sent: 0, kept: HashMap::new() });
        self.armed.store(true, Ordering::Relaxed);
    }

    /// Disarms the hook and drops what it kept, when it is armed for `copy` (`None`: for
    /// any copy).
    fn disarm(&self, copy: Option<&Arc<ImageCopy>>) {
        let state = {
            let mut state = lock(&self.state);
            if !state.as_ref().is_some_and(|s| copy.is_none_or(|c| Arc::ptr_eq(&s.copy, c))) {
                return;
            }
            self.armed.store(false, Ordering::Relaxed);
            state.take()
        };
        if let Some(mut s) = state {
            drop(s.drop_kept());
        }
    }

    /// The copy the hook is armed for (or was, until the copy ends).
    fn copy(&self) -> Option<Arc<ImageCopy>> {
        lock(&self.state).as_ref().map(|s| Arc::clone(&s.copy))
    }

    /// No copy state at all (nothing kept, disarmed).
    #[cfg(test)]
    fn is_idle(&self) -> bool {
        !self.armed() && lock(&self.state).is_none()
    }
}

/// Appends `bytes` to `out` and to the image's running hash.
fn put(hasher: &mut Xxh3, out: &mut Vec<u8>, bytes: &[u8]) {
    hasher.update(bytes);
    out.extend_from_slice(bytes);
}

impl ConventionalDb {
    /// Begins an image copy of the database now (see the module documentation): waits for
    /// running transactions to finish and holds new ones back meanwhile (the checkpoint
    /// gate), flushes the log, takes the image's LSN as [`ConventionalDb::checkpoint`] does,
    /// notes every store's page count and arms every store's copy-on-write hook; then
    /// transactions run again. Refused when a copy is already under way
    /// ([`ConventionalError::ImageCopy`]) or the configuration cannot checkpoint
    /// ([`ConventionalError::CheckpointUnavailable`]). Must not be called from a session
    /// inside a transaction.
    pub fn begin_image_copy(&self) -> Result<(), ConventionalError> {
        self.begin_image_copy_bounded(IMAGE_COPY_KEPT_BYTES_MAX)
    }

    /// [`ConventionalDb::begin_image_copy`], giving up past `kept_bytes_max` bytes of kept
    /// before-images.
    pub(crate) fn begin_image_copy_bounded(&self, kept_bytes_max: usize) -> Result<(), ConventionalError> {
        if let Some(reason) = self.checkpoint_unavailable() {
            return Err(ConventionalError::CheckpointUnavailable { reason });
        }
        let _quiet = self.txns.quiesce();
        if self.image_copy().is_some() {
            return Err(ConventionalError::ImageCopy { what: "an image copy is already under way" });
        }
        let end = self.log.end();
        self.log
            .flush_to(end)
            .map_err(|e| ConventionalError::Io { what: "flush log", source: std::io::Error::other(e) })?;
        let lsn = end.max(self.standby.applied_end().unwrap_or(0));
        let stores = self.image_stores();
        debug_assert!(std::ptr::eq(stores[0], self.first_store()), "the first store in the snapshot's order");
        let pages: Box<[PageNo]> = stores.iter().map(|s| s.pages()).collect();
        let page_bytes = self.switches().page_bytes();
        let pages_total: u64 = pages.iter().map(|&p| u64::from(p)).sum();
        let bytes_total =
            HEADER_BYTES + STORE_HEAD_BYTES * pages.len() as u64 + pages_total * page_bytes as u64 + TRAILER_BYTES;
        let copy = Arc::new(ImageCopy {
            lsn,
            page_bytes,
            pages: pages.clone(),
            pages_total,
            bytes_total,
            kept_bytes_max,
            kept_bytes: AtomicUsize::new(0),
            kept_pages: AtomicU64::new(0),
            kept_pages_all: AtomicU64::new(0),
            given_up: AtomicBool::new(false),
            pages_sent: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            sender: Mutex::new(Sender { hasher: Xxh3::new(), header_out: false, store: 0, next: 0 }),
        });
        // The first store last: it is where the copy is found ([`ConventionalDb::image_copy`]).
        for (store, &n) in stores.iter().zip(pages.iter()).rev() {
            store.copy().arm(&copy, n);
        }
        Ok(())
    }

    /// Appends the next bytes of the image under way to `out` — at most about `bytes_max`
    /// (whole pages, at least one, plus the small header, store heads and trailer that fall
    /// in the step) — and returns [`ImageCopyStep::Done`] once the trailer is out (the copy
    /// is then over), [`ImageCopyStep::More`] before. Each page goes out as it was when the
    /// copy began: its kept before-image, else its current bytes read under its shared
    /// latch. Transactions may run on other threads meanwhile. Refused without a copy under
    /// way ([`ConventionalError::ImageCopy`]); a copy given up past its bound on kept bytes
    /// ends here with [`ConventionalError::ImageCopyOverBudget`].
    pub fn image_copy_step(&self, bytes_max: usize, out: &mut Vec<u8>) -> Result<ImageCopyStep, ConventionalError> {
        let copy = self.image_copy().ok_or(ConventionalError::ImageCopy { what: "no image copy is under way" })?;
        let stores = self.image_stores();
        let mut sender = lock(&copy.sender);
        if copy.given_up() {
            drop(sender);
            self.end_image_copy(Some(&copy));
            return Err(ConventionalError::ImageCopyOverBudget { kept_bytes_max: copy.kept_bytes_max });
        }
        let stats = Stats::default();
        let start = out.len();
        let mut pages_sent = 0u64;
        let s = &mut *sender;
        if !s.header_out {
            put(&mut s.hasher, out, SNAPSHOT_MAGIC);
            put(&mut s.hasher, out, &(copy.page_bytes as u32).to_le_bytes());
            put(&mut s.hasher, out, &(copy.pages.len() as u32).to_le_bytes());
            put(&mut s.hasher, out, &copy.lsn.to_le_bytes());
            s.header_out = true;
        }
        let result = loop {
            let Some((&store, &pages)) = stores.get(s.store).zip(copy.pages.get(s.store)) else {
                out.extend_from_slice(&s.hasher.digest().to_le_bytes());
                break Ok(ImageCopyStep::Done { lsn: copy.lsn, bytes: copy.bytes_total });
            };
            if s.next == 0 {
                put(&mut s.hasher, out, &(s.store as u32).to_le_bytes());
                put(&mut s.hasher, out, &pages.to_le_bytes());
                s.next = 1;
            }
            if s.next > pages {
                // Every page of the store is out: its hook has nothing more to keep.
                store.copy().armed.store(false, Ordering::Relaxed);
                s.store += 1;
                s.next = 0;
                continue;
            }
            if pages_sent > 0 && out.len() - start + copy.page_bytes > bytes_max {
                break Ok(ImageCopyStep::More);
            }
            if let Err(e) = Self::send_page(store, &copy, s.next, &stats, &mut s.hasher, out) {
                break Err(e);
            }
            s.next += 1;
            pages_sent += 1;
        };
        copy.pages_sent.fetch_add(pages_sent, Ordering::Relaxed);
        copy.bytes_sent.fetch_add((out.len() - start) as u64, Ordering::Relaxed);
        drop(sender);
        if matches!(result, Ok(ImageCopyStep::Done { .. })) {
            self.end_image_copy(Some(&copy));
        }
        result
    }

    /// Appends page `no` of `store` as it was when `copy` began and marks it sent, under the
    /// page's shared latch (see the module documentation). Refused when the store's hook is
    /// no longer armed for `copy` (the copy was aborted meanwhile).
    fn send_page(
        store: &PageStore,
        copy: &Arc<ImageCopy>,
        no: PageNo,
        stats: &Stats,
        hasher: &mut Xxh3,
        out: &mut Vec<u8>,
    ) -> Result<(), ConventionalError> {
        let page = store.read(no, stats);
        let kept = {
            let mut state = lock(&store.copy().state);
            let s = state
                .as_mut()
                .filter(|s| Arc::ptr_eq(&s.copy, copy))
                .ok_or(ConventionalError::ImageCopy { what: "the image copy was aborted during the step" })?;
            s.sent = no;
            let kept = s.kept.remove(&no);
            if let Some(image) = &kept {
                copy.release(1, image.len());
            }
            kept
        };
        match kept {
            Some(image) => {
                drop(page);
                put(hasher, out, &image);
            }
            None => put(hasher, out, &page),
        }
        Ok(())
    }

    /// Drops the image copy under way, if any, and every before-image it kept; a new copy
    /// may begin at once.
    pub fn abort_image_copy(&self) {
        self.end_image_copy(None);
    }

    /// Whether an image copy is under way (begun, not finished nor aborted; a copy given up
    /// past its bound counts until the next step reports it).
    pub fn image_copy_active(&self) -> bool {
        self.image_copy().is_some()
    }

    /// Where the image copy under way stands (`None`: none is).
    pub fn image_copy_progress(&self) -> Option<ImageCopyProgress> {
        self.image_copy().map(|c| c.progress())
    }

    /// A database rebuilt in memory from a whole image (a checkpoint snapshot, or an image
    /// copy's bytes): a fresh [`MemoryMedium`], the image installed on it
    /// ([`install_image_on`], which checks it whole first) and restart recovery over it
    /// ([`ConventionalDb::open_on`]), without the checkpoint opening otherwise takes. The
    /// medium then drops its copy of the image (the database holds every page; it is not
    /// meant to be restarted). `config` must be durable (log records and log flush on, or
    /// opening would ignore the medium: [`ConventionalError::CheckpointUnavailable`]) and have
    /// the image's page size ([`ConventionalError::PageSizeMismatch`]); its log lives in
    /// memory, preallocated `config.log_prealloc_bytes` at a time (keep that small).
    pub fn open_from_image(config: Config, image: &[u8]) -> Result<Arc<ConventionalDb>, ConventionalError> {
        if !config.switches.durable() {
            return Err(ConventionalError::CheckpointUnavailable {
                reason: "a database opened from an image needs log records and log flush",
            });
        }
        let memory = MemoryMedium::new();
        let medium = Medium::Memory(memory.clone());
        install_image_on(&medium, image)?;
        let db = ConventionalDb::open_on(&medium, Config { checkpoint_on_open: false, ..config })?;
        memory.put_checkpoint(None);
        Ok(db)
    }

    /// Every store, in the snapshot's order (`write_snapshot`'s).
    fn image_stores(&self) -> Vec<&PageStore> {
        self.tables.iter().flat_map(|e| e.stores()).collect()
    }

    /// The first store in the snapshot's order: its hook holds the copy under way (armed
    /// after every other store's when a copy begins, disarmed after every other store's when
    /// it ends).
    fn first_store(&self) -> &PageStore {
        self.tables[0].heap.store()
    }

    /// The copy under way, if any.
    fn image_copy(&self) -> Option<Arc<ImageCopy>> {
        self.first_store().copy().copy()
    }

    /// Disarms every store's hook for `copy` (`None`: whatever copy), dropping what it kept;
    /// the first store last.
    fn end_image_copy(&self, copy: Option<&Arc<ImageCopy>>) {
        for store in self.image_stores().iter().rev() {
            store.copy().disarm(copy);
        }
    }
}

#[cfg(test)]
mod tests;
