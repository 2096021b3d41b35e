//! The log manager: ARIES-style write-ahead log records (Mohan et al., TODS 1992), an
//! in-memory log buffer, group commit with `fdatasync` on a preallocated log device, and the
//! scan that restart recovery reads the log with.
//!
//! Record layout (little-endian; every record is a multiple of 8 bytes):
//!
//! ```text
//! 0..4    length of the whole record, checksum included
//! 4       kind: 1 update, 2 insert, 3 delete (of a heap record), 4 compensation (CLR),
//!         5 commit, 6 end of rollback (abort), 7 checkpoint, 8 secondary-index entry
//!         inserted, 9 secondary-index entry deleted, 10 primary-index entry inserted,
//!         11 primary-index entry deleted, 12 page image (a page allocated or changed by a
//!         B+tree split; redo-only)
//! 5       table id (255 = none; for 8–11 the table whose index changed; for 12 the table
//!         owning the store)
//! 6       CLR redo action: 1 write image over the record at the record id, 2 place image
//!         at the record id, 4 free the record id, 5 remove a secondary-index entry,
//!         6 re-insert a secondary-index entry, 7 remove a primary-index entry,
//!         8 re-insert a primary-index entry
//! 7       reserved (0)
//! 8..16   LSN: the record's byte position in the log stream
//! 16..24  previous LSN of the same transaction (0 = none)
//! 24..32  transaction id
//! 32..40  heap record id (page << 16 | slot) of the record changed; for an index entry
//!         (8–11, and CLR actions 5–8) its value: the primary key (secondary index) or the
//!         record id (primary index); for a page image its store id
//! 40..44  page number the change was applied to (index entries: the leaf; redo applies
//!         them to that page)
//! 44..48  image length (the table's row width)
//! 48..56  CLR: undo-next LSN; checkpoint: snapshot LSN; commit: the transaction's timestamp
//! 56..    images: update = before then after; insert = after; delete = before;
//!         index-entry insert = the entry's key (after: the encoded secondary key, or the
//!         primary key big-endian), delete = the same (before);
//!         page image = the page compacted (header and slots, then the cells);
//!         CLR = the image its action writes (actions 1 and 2) or the key of the entry it
//!         removes or re-inserts (actions 5–8)
//! ..      zero padding to a multiple of 8
//! last 8  xxh3-64 of every preceding byte of the record
//! ```
//!
//! Guarantees: a record's LSN equals `base + offset` where `base` is the LSN of the record at
//! device offset 0, so the scan rejects stale records left from earlier log generations; the
//! checksum is computed at append and verified at every read, and the valid prefix ends at the
//! first record that fails either test. The scan then looks past that record for records of
//! the same generation (checksum and `LSN = base + offset`, at 8-byte-aligned offsets): if
//! there are none, the damage is a torn tail (the write a crash cut short), which recovery
//! truncates and reports ([`TornTail`]); if there are, it is corruption in the middle of the
//! log ([`LogCorruption`]), which recovery refuses without changing anything. Nothing after
//! the valid prefix is ever replayed.
//! `flush_to(lsn)` returns only after every record up to `lsn` is on the device and
//! `fdatasync` returned (group commit: whichever committer holds the device flushes every
//! record appended so far, for all waiting committers at once).
//!
//! The devices: [`FileLogDevice`] (a preallocated file) and [`CrashingLogDevice`] (in memory,
//! for tests and the simulator: unsynced writes lost or torn at a crash; a handle attached
//! before a crash or restart is fenced off for good, so a database opened before a power loss
//! never writes to the medium after it).
//!
//! Log shipping (see [`super::ship`]): while the shipping tap is on, every record appended
//! (changes, CLRs, commit, end-of-rollback and checkpoint records) is also copied, sealed, into
//! an in-memory shipping buffer inside the same critical section that assigns its LSN, so the
//! buffer holds whole records in LSN order, contiguous while the tap stays on; taking it
//! returns whole records only. When the tap is off, an append pays one relaxed atomic load.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{IoFailure, LogUnavailable, StorageError};
use crate::schema::TableId;

/// LSN of the first record of a fresh log (0 means "no LSN").
pub(crate) const LSN_FIRST: u64 = 4096;
/// The log buffer is written out (without sync) when it holds this many bytes.
const LOG_BUFFER_BYTES_MAX: usize = 1 << 20;
/// Zeros are written in chunks of this size when preallocating.
const ZERO_CHUNK_BYTES: usize = 1 << 20;
pub(crate) const HEADER_BYTES: usize = 56;
pub(crate) const CHECKSUM_BYTES: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Update = 1,
    Insert = 2,
    Delete = 3,
    Clr = 4,
    Commit = 5,
    Abort = 6,
    Checkpoint = 7,
    IndexInsert = 8,
    IndexDelete = 9,
    KeyInsert = 10,
    KeyDelete = 11,
    PageImage = 12,
}

impl Kind {
    /// A change a transaction's rollback undoes (its record is in the undo chain).
    pub fn is_undoable(self) -> bool {
        matches!(
            self,
            Kind::Update
                | Kind::Insert
                | Kind::Delete
                | Kind::IndexInsert
                | Kind::IndexDelete
                | Kind::KeyInsert
                | Kind::KeyDelete
        )
    }

    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Update,
            2 => Kind::Insert,
            3 => Kind::Delete,
            4 => Kind::Clr,
            5 => Kind::Commit,
            6 => Kind::Abort,
            7 => Kind::Checkpoint,
            8 => Kind::IndexInsert,
            9 => Kind::IndexDelete,
            10 => Kind::KeyInsert,
            11 => Kind::KeyDelete,
            12 => Kind::PageImage,
            _ => return None,
        })
    }
}

/// What a CLR (or an undo) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum ClrAction {
    /// Write the image over the record at the record id (the undo of an update).
    Restore = 1,
    /// Place the image at the record id (the undo of a delete).
    Reinsert = 2,
    /// Free the record id (the undo of an insert).
    Free = 4,
    /// Remove a secondary-index entry (the undo of its insert).
    IndexRemove = 5,
    /// Re-insert a secondary-index entry (the undo of its delete).
    IndexReinsert = 6,
    /// Remove a primary-index entry (the undo of its insert).
    KeyRemove = 7,
    /// Re-insert a primary-index entry (the undo of its delete).
    KeyReinsert = 8,
}

impl ClrAction {
    fn from_u8(v: u8) -> Option<ClrAction> {
        Some(match v {
            1 => ClrAction::Restore,
            2 => ClrAction::Reinsert,
            4 => ClrAction::Free,
            5 => ClrAction::IndexRemove,
            6 => ClrAction::IndexReinsert,
            7 => ClrAction::KeyRemove,
            8 => ClrAction::KeyReinsert,
            _ => return None,
        })
    }
}

/// The fixed fields of a record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Head {
    pub kind: Kind,
    pub table: Option<TableId>,
    pub action: Option<ClrAction>,
    pub prev: u64,
    pub txn: u64,
    pub key: u64,
    pub page: u32,
    pub extra: u64,
}

impl Head {
    pub fn new(kind: Kind, txn: u64, prev: u64) -> Head {
        Head { kind, table: None, action: None, prev, txn, key: 0, page: 0, extra: 0 }
    }
}

/// A decoded record borrowing its images.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record<'a> {
    pub head: Head,
    pub lsn: u64,
    pub len: usize,
    pub before: &'a [u8],
    pub after: &'a [u8],
}

/// Appends an unsealed record (LSN and checksum zero) to `out`; returns its start.
pub(crate) fn encode(out: &mut Vec<u8>, h: &Head, before: &[u8], after: &[u8]) -> usize {
    let start = out.len();
    let image_len = before.len().max(after.len());
    debug_assert!(before.is_empty() || after.is_empty() || before.len() == after.len());
    let len = (HEADER_BYTES + before.len() + after.len()).div_ceil(8) * 8 + CHECKSUM_BYTES;
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.push(h.kind as u8);
    out.push(h.table.map_or(255, |t| t as u8));
    out.push(h.action.map_or(0, |a| a as u8));
    out.push(0);
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&h.prev.to_le_bytes());
    out.extend_from_slice(&h.txn.to_le_bytes());
    out.extend_from_slice(&h.key.to_le_bytes());
    out.extend_from_slice(&h.page.to_le_bytes());
    out.extend_from_slice(&(image_len as u32).to_le_bytes());
    out.extend_from_slice(&h.extra.to_le_bytes());
    out.extend_from_slice(before);
    out.extend_from_slice(after);
    out.resize(start + len, 0);
    start
}

/// The sealed checkpoint record that starts a log generation at `lsn` (the checkpoint
/// snapshot's LSN).
pub(crate) fn checkpoint_record(lsn: u64) -> Vec<u8> {
    let mut rec = Vec::new();
    encode(&mut rec, &Head { extra: lsn, ..Head::new(Kind::Checkpoint, 0, 0) }, &[], &[]);
    seal(&mut rec, lsn);
    rec
}

/// Writes the LSN and the checksum into an encoded record.
pub(crate) fn seal(rec: &mut [u8], lsn: u64) {
    rec[8..16].copy_from_slice(&lsn.to_le_bytes());
    let end = rec.len() - CHECKSUM_BYTES;
    let sum = xxh3_64(&rec[..end]);
    rec[end..].copy_from_slice(&sum.to_le_bytes());
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Decodes the record at the start of `b`, verifying its length, checksum and fields.
pub(crate) fn decode(b: &[u8]) -> Option<Record<'_>> {
    if b.len() < HEADER_BYTES + CHECKSUM_BYTES {
        return None;
    }
    let len = u32_at(b, 0) as usize;
    if len < HEADER_BYTES + CHECKSUM_BYTES || len % 8 != 0 || len > b.len() {
        return None;
    }
    let end = len - CHECKSUM_BYTES;
    if xxh3_64(&b[..end]) != u64_at(b, end) {
        return None;
    }
    let kind = Kind::from_u8(b[4])?;
    let table = match b[5] {
        255 => None,
        t => Some(TableId::from_u8(t)?),
    };
    let action = match b[6] {
        0 => None,
        a => Some(ClrAction::from_u8(a)?),
    };
    let image_len = u32_at(b, 44) as usize;
    let (nb, na) = match (kind, action) {
        (Kind::Update, _) => (image_len, image_len),
        (Kind::Insert | Kind::IndexInsert | Kind::KeyInsert | Kind::PageImage, _) => (0, image_len),
        (Kind::Delete | Kind::IndexDelete | Kind::KeyDelete, _) => (image_len, 0),
        (Kind::Clr, Some(ClrAction::Free)) => (0, 0),
        (Kind::Clr, Some(_)) => (0, image_len),
        (Kind::Clr, None) => return None,
        _ => (0, 0),
    };
    if HEADER_BYTES + nb + na > end {
        return None;
    }
    let head = Head {
        kind,
        table,
        action,
        prev: u64_at(b, 16),
        txn: u64_at(b, 24),
        key: u64_at(b, 32),
        page: u32_at(b, 40),
        extra: u64_at(b, 48),
    };
    Some(Record {
        head,
        lsn: u64_at(b, 8),
        len,
        before: &b[HEADER_BYTES..HEADER_BYTES + nb],
        after: &b[HEADER_BYTES + nb..HEADER_BYTES + nb + na],
    })
}

/// The device the log lives on (redb's `StorageBackend`, narrowed to what a log needs).
/// Implementations: [`FileLogDevice`] (a preallocated file) and [`CrashingLogDevice`] (an
/// in-memory double that loses unsynced writes, tears them, or fails on demand).
pub trait LogDevice: Send {
    /// Bytes the device holds (written or preallocated).
    fn size(&self) -> io::Result<u64>;
    /// Reads `buf.len()` bytes at `offset` (within `size`).
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `data` at `offset` (within `size`); durable only after `sync_data`.
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Grows the device to `size` bytes by writing zeros (so later log writes overwrite
    /// allocated blocks: measured on this machine, that halves `fdatasync` time).
    fn preallocate(&mut self, size: u64) -> io::Result<()>;
    /// Makes every completed write durable (`fdatasync`).
    fn sync_data(&mut self) -> io::Result<()>;
    /// Another handle on the same device, for reading a range that no longer changes later
    /// and on another thread ([`GenerationRead`]).
    fn reopen(&self) -> io::Result<Box<dyn LogDevice>>;
}

/// The bytes of one log generation, from its first record to an end fixed when it was taken
/// ([`LogManager::generation_then_ship`]), read later through a handle of its own — on a
/// thread other than the executor's, so a primary keeps committing while a rejoining
/// backup's log base is read (docs/design.md §10, "Copying without stopping"). Those bytes
/// are durable and only appended after, so they read the same until a new generation
/// starts over them: a checkpoint, which a primary takes only when promoted, never while it
/// serves a base. Should one still overwrite them, the reader gets records of another
/// generation or none, which the backup refuses (every record carries its LSN and
/// checksum, and a base must start with the generation's checkpoint record).
pub struct GenerationRead {
    device: Box<dyn LogDevice>,
    /// The generation's first LSN and the bytes fixed when it was taken.
    base: u64,
    len: u64,
}

impl std::fmt::Debug for GenerationRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenerationRead").field("base", &self.base).field("len", &self.len).finish()
    }
}

impl GenerationRead {
    /// The generation's bytes taken: its first record's LSN is [`GenerationRead::base`].
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The LSN of the generation's first record.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The generation's first `n` bytes (at most [`GenerationRead::len`]).
    pub fn read(&mut self, n: u64) -> io::Result<Vec<u8>> {
        let n = n.min(self.len);
        let mut bytes = vec![0u8; n as usize];
        self.device.read_at(0, &mut bytes)?;
        Ok(bytes)
    }
}

/// The log in a file.
#[derive(Debug)]
pub struct FileLogDevice {
    file: File,
}

impl FileLogDevice {
    /// Opens (creating if needed) the log file at `path`.
    pub fn open(path: &Path) -> io::Result<FileLogDevice> {
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        Ok(FileLogDevice { file })
    }
}

impl LogDevice for FileLogDevice {
    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }
    fn preallocate(&mut self, size: u64) -> io::Result<()> {
        let zeros = vec![0u8; ZERO_CHUNK_BYTES];
        let mut at = self.size()?;
        while at < size {
            let n = (size - at).min(ZERO_CHUNK_BYTES as u64) as usize;
            self.file.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        Ok(())
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn reopen(&self) -> io::Result<Box<dyn LogDevice>> {
        Ok(Box::new(FileLogDevice { file: self.file.try_clone()? }))
    }
}

#[derive(Debug, Default)]
struct CrashState {
    /// What the medium holds (as of the last sync, plus torn writes).
    durable: Vec<u8>,
    /// What reads see before a crash.
    volatile: Vec<u8>,
    /// Writes since the last sync, in order.
    pending: Vec<(u64, Vec<u8>)>,
    /// Syncs that still succeed before the device crashes.
    syncs_left: Option<u64>,
    crashed: bool,
    syncs: u64,
    /// Bumped by every crash and restart: a handle attached before it is fenced off.
    epoch: u64,
}

impl CrashState {
    /// Power loss: the medium stops answering and every handle attached so far is fenced.
    fn power_loss(&mut self) {
        self.crashed = true;
        self.epoch += 1;
    }
}

/// A crash-injecting in-memory log device for tests and the simulator (redb's
/// crash-injecting backend): writes are volatile until `sync_data`; a crash loses them (or,
/// torn, keeps a prefix of them); after a crash every operation fails until
/// [`CrashingLogDevice::restart`]. Clones share the medium, so a test keeps one handle while
/// the engine owns another.
///
/// Fencing: each handle belongs to an *epoch* of the medium; a crash and a restart each start
/// a new one. The device operations ([`LogDevice`]) of a handle from an earlier epoch fail
/// for good, so a database opened before a crash can never write to the medium after power
/// returned (its process is gone); [`CrashingLogDevice::restart`] hands out a handle of the
/// new epoch. The test controls (`crash`, `tear`, `corrupt`, `durable_bytes`, ...) act on the
/// medium through any handle.
#[derive(Debug, Clone, Default)]
pub struct CrashingLogDevice {
    state: Arc<Mutex<CrashState>>,
    /// The medium's epoch this handle was attached in.
    epoch: u64,
}

fn crashed() -> io::Error {
    io::Error::other("log device crashed")
}

impl CrashingLogDevice {
    pub fn new() -> CrashingLogDevice {
        CrashingLogDevice::default()
    }

    fn lock(&self) -> MutexGuard<'_, CrashState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After `n` more successful syncs the next sync fails and the device crashes (its
    /// unsynced writes stay pending for [`CrashingLogDevice::tear`]; handles are fenced).
    pub fn crash_after_syncs(&self, n: u64) {
        self.lock().syncs_left = Some(n);
    }

    /// Power loss now: unsynced writes are lost (unless [`CrashingLogDevice::tear`] keeps a
    /// prefix of them); operations fail until `restart`, and for good on every handle
    /// attached before. Crashing a crashed device changes nothing.
    pub fn crash(&self) {
        let mut s = self.lock();
        if !s.crashed {
            s.power_loss();
        }
    }

    /// Whether the device is down (crashed and not restarted).
    pub fn is_crashed(&self) -> bool {
        self.lock().crashed
    }

    /// After a crash: the first `bytes` bytes of the writes pending at the crash (in write
    /// order) reached the medium anyway (a torn write).
    pub fn tear(&self, bytes: usize) {
        let mut s = self.lock();
        let mut left = bytes;
        let pending = std::mem::take(&mut s.pending);
        for (offset, data) in &pending {
            let n = data.len().min(left);
            let at = *offset as usize;
            if s.durable.len() < at + n {
                s.durable.resize(at + n, 0);
            }
            s.durable[at..at + n].copy_from_slice(&data[..n]);
            left -= n;
        }
        s.pending = pending;
    }

    /// Flips the bits of the byte at `offset` on the medium.
    pub fn corrupt(&self, offset: u64) {
        let mut s = self.lock();
        s.durable[offset as usize] ^= 0xFF;
        s.volatile = s.durable.clone();
    }

    /// The device as found after power returns: the medium's contents, working again, through
    /// the handle returned (of a new epoch: handles attached before stay fenced off). Without a
    /// crash first, a restart is a power cycle: unsynced writes are lost.
    pub fn restart(&self) -> CrashingLogDevice {
        let mut s = self.lock();
        s.crashed = false;
        s.syncs_left = None;
        s.pending.clear();
        s.volatile = s.durable.clone();
        s.epoch += 1;
        CrashingLogDevice { state: Arc::clone(&self.state), epoch: s.epoch }
    }

    /// A working handle of the current epoch (for a database opening on the medium; fails
    /// like any handle while the device is crashed).
    pub(crate) fn attach(&self) -> CrashingLogDevice {
        CrashingLogDevice { state: Arc::clone(&self.state), epoch: self.lock().epoch }
    }

    /// A new, empty medium in place of this one (every handle attached before is fenced).
    pub(crate) fn erase(&self) {
        let mut s = self.lock();
        let epoch = s.epoch + 1;
        *s = CrashState { epoch, ..CrashState::default() };
    }

    /// The state for a device operation through this handle: refused when the device is
    /// crashed or the handle is from an earlier epoch.
    fn live(&self) -> io::Result<MutexGuard<'_, CrashState>> {
        let s = self.lock();
        if s.crashed || s.epoch != self.epoch {
            return Err(crashed());
        }
        Ok(s)
    }

    /// Bytes on the medium.
    pub fn durable_bytes(&self) -> Vec<u8> {
        self.lock().durable.clone()
    }

    /// Successful syncs so far.
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }
}

impl LogDevice for CrashingLogDevice {
    fn size(&self) -> io::Result<u64> {
        Ok(self.live()?.volatile.len() as u64)
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let s = self.live()?;
        let at = offset as usize;
        buf.copy_from_slice(
            s.volatile.get(at..at + buf.len()).ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?,
        );
        Ok(())
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut s = self.live()?;
        let at = offset as usize;
        if s.volatile.len() < at + data.len() {
            s.volatile.resize(at + data.len(), 0);
        }
        s.volatile[at..at + data.len()].copy_from_slice(data);
        s.pending.push((offset, data.to_vec()));
        Ok(())
    }
    fn preallocate(&mut self, size: u64) -> io::Result<()> {
        let len = self.size()?;
        if size > len {
            self.write_at(len, &vec![0u8; (size - len) as usize])?;
        }
        Ok(())
    }
    fn sync_data(&mut self) -> io::Result<()> {
        let mut s = self.live()?;
        match s.syncs_left {
            Some(0) => {
                s.power_loss();
                return Err(crashed());
            }
            Some(n) => s.syncs_left = Some(n - 1),
            None => {}
        }
        let pending = std::mem::take(&mut s.pending);
        for (offset, data) in pending {
            let at = offset as usize;
            if s.durable.len() < at + data.len() {
                s.durable.resize(at + data.len(), 0);
            }
            s.durable[at..at + data.len()].copy_from_slice(&data);
        }
        s.syncs += 1;
        Ok(())
    }
    fn reopen(&self) -> io::Result<Box<dyn LogDevice>> {
        drop(self.live()?);
        Ok(Box::new(CrashingLogDevice { state: Arc::clone(&self.state), epoch: self.epoch }))
    }
}

/// A torn tail: damaged bytes after the log's last valid record with no record of the same
/// log generation anywhere after them — the write a crash cut short. Restart recovery
/// truncates it (overwrites it with zeros) and reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Device offset of the first damaged byte (the end of the last valid record).
    pub offset: u64,
    /// The LSN a record at `offset` would carry: where the log ends once the tail is cut (0
    /// when the scan knew no base: the record at offset 0 unreadable and no base expected).
    pub lsn: u64,
    /// Bytes from `offset` to the last non-zero byte before the next stale record of an
    /// earlier generation (or the device's end): the damaged bytes the truncation drops.
    pub bytes: u64,
}

/// Damage in the middle of the log: the record at `offset` fails its length, checksum or
/// LSN test, yet valid records of the same log generation follow it. A crash tears only the
/// last write, so this is corruption, not a torn tail; restart recovery refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogCorruption {
    /// Device offset of the damaged record (the end of the valid prefix).
    pub offset: u64,
    /// The LSN the record at `offset` should carry (`base + offset`).
    pub lsn_expected: u64,
    /// Device offset of the first valid record of the generation after the damage.
    pub next_valid_offset: u64,
    /// Valid records of the generation after the damage.
    pub records_after: u64,
    /// Of those, commit records (committed transactions a truncation would lose).
    pub commits_after: u64,
    /// Bytes those records hold.
    pub bytes_after: u64,
}

/// What follows the valid prefix of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Zeros, or a stale record of an earlier generation (a checkpoint restarted the log at
    /// offset 0, so older records follow the live end): nothing to cut.
    Clean,
    /// Damage with nothing valid of this generation after it.
    Torn(TornTail),
    /// Damage followed by valid records of this generation.
    Corrupt(LogCorruption),
}

/// The valid prefix of a log device, as recovery's scan found it.
#[derive(Debug)]
pub(crate) struct LogScan {
    /// LSN of the record at offset 0 (`None`: no valid record there).
    pub base: Option<u64>,
    /// The device's bytes up to the end of the last valid record.
    pub bytes: Vec<u8>,
    /// What follows the valid prefix.
    pub tail: Tail,
    /// When the record at offset 0 is unreadable: the newest generation (highest `LSN −
    /// offset`) among the valid records found after it, `None` if there is none.
    pub newest_base_after: Option<u64>,
    pub device_size: u64,
}

impl LogScan {
    /// The records in log order.
    pub fn records(&self) -> impl Iterator<Item = Record<'_>> {
        let mut at = 0;
        std::iter::from_fn(move || {
            let r = decode(&self.bytes[at..])?;
            at += r.len;
            Some(r)
        })
    }
}

/// Whether the 8 bytes at `at` could start a record (length and kind bytes in range): a cheap
/// filter before [`decode`] hashes the record.
fn plausible_head(b: &[u8], at: usize) -> bool {
    if at + HEADER_BYTES + CHECKSUM_BYTES > b.len() {
        return false;
    }
    let len = u32_at(b, at) as usize;
    len >= HEADER_BYTES + CHECKSUM_BYTES && len % 8 == 0 && len <= b.len() - at && Kind::from_u8(b[at + 4]).is_some()
}

/// Reads the device and finds its valid prefix (checksums and LSN continuity) and what
/// follows it; see [`scan_expecting`]. Used where the live generation's first LSN is unknown
/// (a record at offset 0 that fails its checksum then leaves the tail unclassified: torn).
pub(crate) fn scan(device: &mut dyn LogDevice) -> io::Result<LogScan> {
    scan_expecting(device, None)
}

/// Reads the device and finds its valid prefix — records passing their checksum whose LSN is
/// `base + offset`, `base` being the LSN of the record at offset 0 — and classifies what
/// follows it ([`Tail`]) by looking, at every 8-byte-aligned offset after the prefix, for a
/// record of the same generation (its checksum verifies and its LSN is `base + offset`): one
/// found means corruption, none a torn tail (or a clean end). Stale records of earlier
/// generations never match, since each checkpoint starts a generation at a higher base.
/// `first_lsn` is the base the live generation should have (the snapshot's LSN) when the
/// record at offset 0 is itself unreadable. Cost: one pass over the device already read
/// into memory; an LSN comparison per aligned offset, a checksum only where it matches (and,
/// when the record at offset 0 is unreadable, wherever a record header is plausible).
pub(crate) fn scan_expecting(device: &mut dyn LogDevice, first_lsn: Option<u64>) -> io::Result<LogScan> {
    let size = device.size()?;
    let mut bytes = vec![0u8; size as usize];
    device.read_at(0, &mut bytes)?;
    let mut at = 0usize;
    let mut base = None;
    while let Some(r) = decode(&bytes[at..]) {
        let b = *base.get_or_insert(r.lsn.wrapping_sub(at as u64));
        if r.lsn != b + at as u64 {
            break;
        }
        at += r.len;
    }
    if at == 0 {
        base = None;
    }
    let end = at;
    // Records of the live generation after the prefix (chains of them are walked whole).
    let mut after: Option<LogCorruption> = None;
    if let Some(g) = base.or(first_lsn) {
        // From `end` itself: a record there that verifies but failed the prefix carries the
        // wrong LSN for its place.
        let mut p = end;
        while p + HEADER_BYTES + CHECKSUM_BYTES <= bytes.len() {
            // A record of the live generation: at its place (LSN = base + offset), or out of
            // place — an LSN of this generation (every stale record's is below its base: a
            // generation starts at or past the previous one's end) at another offset, as a
            // record duplicated, dropped or shifted mid-log leaves it (found by the
            // `wal_recovery` fuzz target, docs/design.md §13). Either means the log went on
            // after the damage: corruption, never a torn tail to truncate silently.
            let lsn = u64_at(&bytes, p + 8);
            let live = lsn == g.wrapping_add(p as u64) || (lsn >= g && lsn - g < bytes.len() as u64);
            let r = live.then(|| decode(&bytes[p..])).flatten();
            let Some(r) = r else {
                p += 8;
                continue;
            };
            let c = after.get_or_insert(LogCorruption {
                offset: end as u64,
                lsn_expected: g.wrapping_add(end as u64),
                next_valid_offset: p as u64,
                records_after: 0,
                commits_after: 0,
                bytes_after: 0,
            });
            c.records_after += 1;
            c.commits_after += u64::from(r.head.kind == Kind::Commit);
            c.bytes_after += r.len as u64;
            p += r.len;
        }
    }
    // The record at offset 0 unreadable: which generations do the records after it belong to?
    let mut newest_base_after = None;
    if base.is_none() {
        let mut p = 8;
        while p < bytes.len() {
            match plausible_head(&bytes, p).then(|| decode(&bytes[p..])).flatten() {
                Some(r) => {
                    let g = r.lsn.wrapping_sub(p as u64);
                    newest_base_after = Some(newest_base_after.map_or(g, |n: u64| n.max(g)));
                    p += r.len;
                }
                None => p += 8,
            }
        }
    }
    let tail = match after {
        Some(c) => Tail::Corrupt(c),
        // A checksummed record with the wrong LSN right at the end is a stale generation.
        None if decode(&bytes[end..]).is_some() || bytes[end..].iter().all(|&b| b == 0) => Tail::Clean,
        None => {
            // The damage reaches up to the next stale record (or the device's end).
            let mut stop = end + 8;
            while stop < bytes.len() && !(plausible_head(&bytes, stop) && decode(&bytes[stop..]).is_some()) {
                stop += 8;
            }
            let stop = stop.min(bytes.len());
            let last = bytes[end..stop].iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            let lsn = base.or(first_lsn).map_or(0, |g| g.wrapping_add(end as u64));
            Tail::Torn(TornTail { offset: end as u64, lsn, bytes: last as u64 })
        }
    };
    bytes.truncate(end);
    Ok(LogScan { base, bytes, tail, newest_base_after, device_size: size })
}

struct LogBuffer {
    bytes: Vec<u8>,
    /// LSN of `bytes[0]`.
    start: u64,
    /// LSN the next record gets.
    next: u64,
    /// Records appended while the shipping tap was on, not yet taken (whole, sealed, in LSN
    /// order).
    shipped: Vec<u8>,
}

struct DeviceState {
    device: Box<dyn LogDevice>,
    /// LSN at device offset 0.
    base: u64,
    /// Bytes allocated on the device.
    capacity: u64,
    /// LSN up to which bytes are written (synced or not).
    written: u64,
    /// A recycled buffer swapped with the log buffer at each write.
    spare: Vec<u8>,
}

/// The log manager; see the module documentation.
pub(crate) struct LogManager {
    flush: bool,
    prealloc_bytes: u64,
    buf: Mutex<LogBuffer>,
    dev: Mutex<Option<DeviceState>>,
    durable: AtomicU64,
    /// LSNs handed out when records are off but page LSNs are on.
    lsn_counter: AtomicU64,
    failed: AtomicBool,
    /// The shipping tap (written under the buffer mutex, so it switches between records).
    shipping: AtomicBool,
    pub bytes_written: AtomicU64,
    pub fsyncs: AtomicU64,
    /// Bytes handed out by [`LogManager::take_shipped`].
    pub bytes_shipped: AtomicU64,
}

fn io_error(e: io::Error) -> StorageError {
    StorageError::Io(IoFailure::device("log device", e))
}

impl LogManager {
    /// A log manager appending at `next` (device offset `next - base`); `device` is `None`
    /// when the flush switch is off.
    pub fn new(
        flush: bool,
        prealloc_bytes: u64,
        device: Option<(Box<dyn LogDevice>, u64, u64)>,
        next: u64,
    ) -> LogManager {
        let dev = match device {
            Some((device, base, capacity)) if flush => {
                Some(DeviceState { device, base, capacity, written: next, spare: Vec::new() })
            }
            _ => None,
        };
        LogManager {
            flush: dev.is_some(),
            prealloc_bytes: prealloc_bytes.max(ZERO_CHUNK_BYTES as u64),
            buf: Mutex::new(LogBuffer {
                bytes: Vec::with_capacity(LOG_BUFFER_BYTES_MAX),
                start: next,
                next,
                shipped: Vec::new(),
            }),
            dev: Mutex::new(dev),
            durable: AtomicU64::new(next),
            lsn_counter: AtomicU64::new(next),
            failed: AtomicBool::new(false),
            shipping: AtomicBool::new(false),
            bytes_written: AtomicU64::new(0),
            fsyncs: AtomicU64::new(0),
            bytes_shipped: AtomicU64::new(0),
        }
    }

    fn buffer(&self) -> MutexGuard<'_, LogBuffer> {
        self.buf.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn device(&self) -> MutexGuard<'_, Option<DeviceState>> {
        self.dev.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether records reach a device (flush on and a device present).
    pub fn has_device(&self) -> bool {
        self.flush
    }

    /// The LSN the next record gets.
    pub fn end(&self) -> u64 {
        self.buffer().next
    }

    /// An LSN for a page when records are off (LSN handling without log records).
    pub fn next_lsn_only(&self) -> u64 {
        self.lsn_counter.fetch_add(1, Ordering::Relaxed)
    }

    /// Seals `rec` (an encoded record) with the next LSN and copies it into the log buffer
    /// (and into the shipping buffer when the tap is on).
    pub fn append(&self, rec: &mut [u8]) -> Result<u64, StorageError> {
        let mut b = self.buffer();
        let lsn = b.next;
        seal(rec, lsn);
        b.bytes.extend_from_slice(rec);
        if self.shipping.load(Ordering::Relaxed) {
            b.shipped.extend_from_slice(rec);
        }
        b.next += rec.len() as u64;
        let full = b.bytes.len() >= LOG_BUFFER_BYTES_MAX;
        if full && !self.flush {
            // No log device: the buffer's bytes are generated and dropped.
            b.start = b.next;
            b.bytes.clear();
        }
        drop(b);
        if full && self.flush {
            self.write_out(false, 0)?;
        }
        Ok(lsn)
    }

    /// Switches the shipping tap. The switch happens between two records (under the buffer
    /// mutex); records already in the shipping buffer stay there for the next take.
    pub fn set_shipping(&self, on: bool) {
        let _b = self.buffer();
        self.shipping.store(on, Ordering::Relaxed);
    }

    /// Whether the shipping tap is on.
    pub fn shipping(&self) -> bool {
        self.shipping.load(Ordering::Relaxed)
    }

    /// Returns and clears the records the tap copied since the last take: whole records, in
    /// LSN order (appends copy whole records under the mutex this takes).
    pub fn take_shipped(&self) -> Vec<u8> {
        let taken = std::mem::take(&mut self.buffer().shipped);
        self.bytes_shipped.fetch_add(taken.len() as u64, Ordering::Relaxed);
        taken
    }

    /// Returns once every record below `lsn` is durable (group commit).
    pub fn flush_to(&self, lsn: u64) -> Result<(), StorageError> {
        if !self.flush || self.durable.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        self.write_out(true, lsn)
    }

    /// Writes the buffered records to the device, then syncs if `sync` and the durable LSN
    /// is still below `upto`.
    fn write_out(&self, sync: bool, upto: u64) -> Result<(), StorageError> {
        let mut guard = self.device();
        let Some(d) = guard.as_mut() else { return Ok(()) };
        if self.failed.load(Ordering::Acquire) {
            return Err(StorageError::Io(LogUnavailable::FailedEarlier.into()));
        }
        if sync && self.durable.load(Ordering::Acquire) >= upto {
            return Ok(()); // another committer's flush covered us
        }
        let start = {
            let mut b = self.buffer();
            std::mem::swap(&mut b.bytes, &mut d.spare);
            let start = b.start;
            b.start = b.next;
            start
        };
        let result = (|| -> io::Result<()> {
            if !d.spare.is_empty() {
                debug_assert_eq!(start, d.written);
                let offset = start - d.base;
                let end = offset + d.spare.len() as u64;
                if end > d.capacity {
                    let capacity = end.div_ceil(self.prealloc_bytes) * self.prealloc_bytes;
                    d.device.preallocate(capacity)?;
                    d.capacity = capacity;
                }
                d.device.write_at(offset, &d.spare)?;
                self.bytes_written.fetch_add(d.spare.len() as u64, Ordering::Relaxed);
                d.written = start + d.spare.len() as u64;
            }
            if sync {
                d.device.sync_data()?;
                self.fsyncs.fetch_add(1, Ordering::Relaxed);
                self.durable.store(d.written, Ordering::Release);
            }
            Ok(())
        })();
        d.spare.clear();
        result.map_err(|e| {
            self.failed.store(true, Ordering::Release);
            io_error(e)
        })
    }

    /// Checkpoint: starts a new log generation at device offset 0 whose first record is a
    /// checkpoint record at `lsn` (the snapshot's LSN), and syncs it. The buffer must be
    /// empty (flushed) and no transaction active. `lsn` may lie beyond the log's end (a
    /// backup's pages carry the LSNs of the primary's records it applied: its log moves past
    /// them, see [`super::ship`]); it never moves back.
    pub fn restart_at(&self, lsn: u64) -> Result<(), StorageError> {
        let mut guard = self.device();
        let Some(d) = guard.as_mut() else { return Ok(()) };
        let mut b = self.buffer();
        assert!(b.bytes.is_empty() && b.next <= lsn, "checkpoint with unflushed log records");
        let rec = checkpoint_record(lsn);
        let r = (|| -> io::Result<()> {
            if (rec.len() as u64) > d.capacity {
                d.device.preallocate(self.prealloc_bytes)?;
                d.capacity = d.capacity.max(self.prealloc_bytes);
            }
            d.device.write_at(0, &rec)?;
            d.device.sync_data()
        })();
        r.map_err(|e| {
            self.failed.store(true, Ordering::Release);
            io_error(e)
        })?;
        self.bytes_written.fetch_add(rec.len() as u64, Ordering::Relaxed);
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        if self.shipping.load(Ordering::Relaxed) {
            b.shipped.extend_from_slice(&rec);
        }
        d.base = lsn;
        let next = lsn + rec.len() as u64;
        d.written = next;
        b.start = next;
        b.next = next;
        self.durable.store(next, Ordering::Release);
        Ok(())
    }
}

impl LogManager {
    /// A base for a new backup (see [`super::ship`]): writes out and syncs every record
    /// appended, takes the current log generation — from its first record (the last
    /// checkpoint's) to its end, to be read later ([`GenerationRead`]) — and switches the
    /// shipping tap on, all while holding the device and buffer locks, so the bytes taken
    /// and the records shipped from now on are contiguous. Reads nothing: the cost here is
    /// the sync alone, whatever the generation's length. Refused when records wait in the
    /// shipping buffer (take them first).
    pub fn generation_then_ship(&self) -> Result<GenerationRead, StorageError> {
        self.flush_to(self.end())?;
        let mut guard = self.device();
        let Some(d) = guard.as_mut() else { return Err(StorageError::Io(LogUnavailable::NoDevice.into())) };
        let b = self.buffer();
        if !b.shipped.is_empty() {
            return Err(StorageError::Io(LogUnavailable::ShippedNotTaken.into()));
        }
        if !b.bytes.is_empty() || d.written != b.next {
            return Err(StorageError::Io(LogUnavailable::AppendedWhileRead.into()));
        }
        let read =
            GenerationRead { device: d.device.reopen().map_err(io_error)?, base: d.base, len: d.written - d.base };
        self.shipping.store(true, Ordering::Relaxed);
        Ok(read)
    }
}

/// Overwrites a truncated tail with zeros (so a later scan cannot mistake stale bytes that
/// happen to line up with new records for records) and syncs.
pub(crate) fn zero_tail(device: &mut dyn LogDevice, from: u64, size: u64) -> io::Result<()> {
    let zeros = vec![0u8; ZERO_CHUNK_BYTES];
    let mut at = from;
    while at < size {
        let n = (size - at).min(ZERO_CHUNK_BYTES as u64) as usize;
        device.write_at(at, &zeros[..n])?;
        at += n as u64;
    }
    device.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_detect_corruption() {
        let mut buf = Vec::new();
        let h = Head { table: Some(TableId::Stock), key: 42, page: 7, ..Head::new(Kind::Update, 9, 100) };
        encode(&mut buf, &h, &[1, 2, 3], &[4, 5, 6]);
        seal(&mut buf, 4096);
        let r = decode(&buf).unwrap();
        assert_eq!((r.lsn, r.head.txn, r.head.key, r.head.page, r.head.prev), (4096, 9, 42, 7, 100));
        assert_eq!((r.before, r.after), (&[1u8, 2, 3][..], &[4u8, 5, 6][..]));
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert!(decode(&bad).is_none(), "flip at {i} undetected");
        }
    }

    /// `n` commit records of the generation starting at `base`, sealed.
    fn generation(base: u64, n: u64, txn0: u64) -> Vec<u8> {
        let mut log = Vec::new();
        for i in 0..n {
            let at = encode(&mut log, &Head::new(Kind::Commit, txn0 + i, 0), &[], &[]);
            seal(&mut log[at..], base + at as u64);
        }
        log
    }

    fn device_with(bytes: &[u8]) -> CrashingLogDevice {
        let mut dev = CrashingLogDevice::new();
        dev.write_at(0, bytes).unwrap();
        dev.sync_data().unwrap();
        dev
    }

    #[test]
    fn scan_stops_at_a_torn_record_and_at_stale_generations() {
        let log = generation(LSN_FIRST, 3, 0);
        let mut dev = device_with(&log);
        let s = scan(&mut dev).unwrap();
        assert_eq!((s.base, s.records().count(), s.tail), (Some(LSN_FIRST), 3, Tail::Clean));
        // Tear the last record: nothing of the generation follows it.
        let last = log.len() - 64;
        dev.write_at(log.len() as u64 - 3, &[0xAB]).unwrap();
        let s = scan(&mut dev).unwrap();
        let torn = TornTail { offset: last as u64, lsn: LSN_FIRST + last as u64, bytes: 64 };
        assert_eq!((s.records().count(), s.tail), (2, Tail::Torn(torn)));
        // A new generation at offset 0 with a higher base hides the old records.
        let g = generation(1 << 20, 1, 9);
        dev.write_at(0, &g).unwrap();
        let s = scan(&mut dev).unwrap();
        assert_eq!((s.base, s.records().count(), s.tail), (Some(1 << 20), 1, Tail::Clean));
    }

    /// Issue #14, item 7: a damaged record followed by valid records of its generation is
    /// corruption (the scan says where and what follows), not a torn tail; stale records of
    /// an earlier generation after the damage do not count.
    #[test]
    fn scan_tells_mid_log_corruption_from_a_torn_tail() {
        // Generation 2 (10 records) over the remains of generation 1 (20 records).
        let mut log = generation(LSN_FIRST, 20, 100);
        let live = generation(1 << 20, 10, 0);
        log[..live.len()].copy_from_slice(&live);
        for (flip, want) in [(3 * 64 + 20, Some(6)), (9 * 64 + 20, None)] {
            let mut bad = log.clone();
            bad[flip] ^= 0x01;
            let s = scan(&mut device_with(&bad)).unwrap();
            let at = flip / 64 * 64;
            assert_eq!(s.bytes.len(), at, "flip at {flip}");
            match want {
                Some(after) => assert_eq!(
                    s.tail,
                    Tail::Corrupt(LogCorruption {
                        offset: at as u64,
                        lsn_expected: (1 << 20) + at as u64,
                        next_valid_offset: at as u64 + 64,
                        records_after: after,
                        commits_after: after,
                        bytes_after: after * 64,
                    })
                ),
                // The last live record damaged, stale records after it: a torn tail.
                None => assert_eq!(
                    s.tail,
                    Tail::Torn(TornTail { offset: at as u64, lsn: (1 << 20) + at as u64, bytes: 64 })
                ),
            }
        }
        // The record at offset 0 damaged: the expected base finds the rest of its generation
        // (another base finds nothing: a torn tail), and the newest generation found is told.
        let mut bad = log.clone();
        bad[20] ^= 0x01;
        let s = scan_expecting(&mut device_with(&bad), Some(1 << 20)).unwrap();
        assert!(matches!(s.tail, Tail::Corrupt(c) if c.offset == 0 && c.records_after == 9), "{:?}", s.tail);
        assert_eq!((s.base, s.newest_base_after), (None, Some(1 << 20)));
        let s = scan_expecting(&mut device_with(&bad), Some(1 << 30)).unwrap();
        assert!(matches!(s.tail, Tail::Torn(t) if t.offset == 0), "{:?}", s.tail);
    }

    /// A record of the live generation duplicated, or dropped, mid-log shifts every record
    /// after it off its place: corruption, not a clean end or a torn tail (which recovery
    /// would truncate, losing the commits after it without a word).
    #[test]
    fn records_shifted_mid_log_are_corruption() {
        let mut log = generation(LSN_FIRST, 20, 100);
        let live = generation(1 << 20, 10, 0);
        log[..live.len()].copy_from_slice(&live);
        let mut duplicated = live[..5 * 64].to_vec();
        duplicated.extend_from_slice(&live[4 * 64..]);
        let mut dropped = live[..4 * 64].to_vec();
        dropped.extend_from_slice(&live[5 * 64..]);
        for (what, shifted) in [("duplicated", duplicated), ("dropped", dropped)] {
            let mut bad = log.clone();
            bad[..shifted.len()].copy_from_slice(&shifted);
            let s = scan(&mut device_with(&bad)).unwrap();
            assert!(
                matches!(s.tail, Tail::Corrupt(c) if c.offset == (if what == "dropped" { 4 } else { 5 }) * 64),
                "{what}: {:?}",
                s.tail
            );
        }
    }
}
