//! The log manager: ARIES-style write-ahead log records (Mohan et al., TODS 1992), an
//! in-memory log buffer, group commit with `fdatasync` on a preallocated log device, and the
//! scan that restart recovery reads the log with.
//!
//! Record layout (little-endian; every record is a multiple of 8 bytes):
//!
//! ```text
//! 0..4    length of the whole record, checksum included
//! 4       kind: 1 update, 2 insert, 3 delete, 4 compensation (CLR), 5 commit,
//!         6 end of rollback (abort), 7 checkpoint
//! 5       table id (255 = none)
//! 6       CLR redo action: 1 restore image, 2 re-insert image, 3 delete key, 4 tombstone rid
//! 7       reserved (0)
//! 8..16   LSN: the record's byte position in the log stream
//! 16..24  previous LSN of the same transaction (0 = none)
//! 24..32  transaction id
//! 32..40  packed primary key, or heap record id (page << 16 | slot)
//! 40..44  page number the change was applied to
//! 44..48  image length (the table's row width)
//! 48..56  CLR: undo-next LSN; checkpoint: snapshot LSN
//! 56..    images: update = before then after; insert = after; delete = before;
//!         CLR = the image its action writes (actions 1 and 2)
//! ..      zero padding to a multiple of 8
//! last 8  xxh3-64 of every preceding byte of the record
//! ```
//!
//! Guarantees: a record's LSN equals `base + offset` where `base` is the LSN of the record at
//! device offset 0, so the scan rejects stale records left from earlier log generations; the
//! checksum is computed at append and verified at every read, and the scan stops at the first
//! record that fails either test: a torn or corrupt tail is truncated, never replayed.
//! `flush_to(lsn)` returns only after every record up to `lsn` is on the device and
//! `fdatasync` returned (group commit: whichever committer holds the device flushes every
//! record appended so far, for all waiting committers at once).
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

use crate::error::StorageError;
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
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Update,
            2 => Kind::Insert,
            3 => Kind::Delete,
            4 => Kind::Clr,
            5 => Kind::Commit,
            6 => Kind::Abort,
            7 => Kind::Checkpoint,
            _ => return None,
        })
    }
}

/// What a CLR (or an undo) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum ClrAction {
    Restore = 1,
    Reinsert = 2,
    Remove = 3,
    Tombstone = 4,
}

impl ClrAction {
    fn from_u8(v: u8) -> Option<ClrAction> {
        Some(match v {
            1 => ClrAction::Restore,
            2 => ClrAction::Reinsert,
            3 => ClrAction::Remove,
            4 => ClrAction::Tombstone,
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
        (Kind::Insert, _) => (0, image_len),
        (Kind::Delete, _) => (image_len, 0),
        (Kind::Clr, Some(ClrAction::Restore | ClrAction::Reinsert)) => (0, image_len),
        (Kind::Clr, Some(_)) => (0, 0),
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
    /// allocated blocks: MACHINE.md measured that this halves `fdatasync` time).
    fn preallocate(&mut self, size: u64) -> io::Result<()>;
    /// Makes every completed write durable (`fdatasync`).
    fn sync_data(&mut self) -> io::Result<()>;
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
}

/// A crash-injecting in-memory log device for tests (redb's crash-injecting backend): writes
/// are volatile until `sync_data`; a crash loses them (or, torn, keeps a prefix of them);
/// after a crash every operation fails until [`CrashingLogDevice::restart`]. Clones share the
/// medium, so a test keeps one handle while the engine owns another.
#[derive(Debug, Clone, Default)]
pub struct CrashingLogDevice {
    state: Arc<Mutex<CrashState>>,
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
    /// unsynced writes stay pending for [`CrashingLogDevice::tear`]).
    pub fn crash_after_syncs(&self, n: u64) {
        self.lock().syncs_left = Some(n);
    }

    /// Power loss now: unsynced writes are lost; operations fail until `restart`.
    pub fn crash(&self) {
        self.lock().crashed = true;
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

    /// The device as found after power returns: the medium's contents, working again.
    pub fn restart(&self) -> CrashingLogDevice {
        let mut s = self.lock();
        s.crashed = false;
        s.syncs_left = None;
        s.pending.clear();
        s.volatile = s.durable.clone();
        self.clone()
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
        let s = self.lock();
        if s.crashed {
            return Err(crashed());
        }
        Ok(s.volatile.len() as u64)
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let s = self.lock();
        if s.crashed {
            return Err(crashed());
        }
        let at = offset as usize;
        buf.copy_from_slice(
            s.volatile.get(at..at + buf.len()).ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?,
        );
        Ok(())
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut s = self.lock();
        if s.crashed {
            return Err(crashed());
        }
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
        let mut s = self.lock();
        if s.crashed {
            return Err(crashed());
        }
        match s.syncs_left {
            Some(0) => {
                s.crashed = true;
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
}

/// The valid prefix of a log device, as recovery's scan found it.
#[derive(Debug)]
pub(crate) struct LogScan {
    /// LSN of the record at offset 0 (`None`: no valid record).
    pub base: Option<u64>,
    /// The device's bytes up to the end of the last valid record.
    pub bytes: Vec<u8>,
    /// Whether damaged bytes follow the last valid record (a torn or corrupt tail; a stale
    /// earlier generation does not count).
    pub garbage_after: bool,
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

/// Reads the device and finds its valid prefix (checksums and LSN continuity).
pub(crate) fn scan(device: &mut dyn LogDevice) -> io::Result<LogScan> {
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
    // A checksummed record with the wrong LSN is a stale earlier generation (a checkpoint
    // restarted the log at offset 0): expected, not damage. Anything else non-zero is a torn
    // or corrupt tail.
    let stale = decode(&bytes[at..]).is_some();
    let garbage_after = !stale && bytes[at..].iter().any(|&b| b != 0);
    bytes.truncate(at);
    Ok(LogScan { base: if at == 0 { None } else { base }, bytes, garbage_after, device_size: size })
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
    StorageError::Io(format!("log device: {e}"))
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
            return Err(StorageError::Io("log device failed earlier".into()));
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
        let mut rec = Vec::new();
        encode(&mut rec, &Head { extra: lsn, ..Head::new(Kind::Checkpoint, 0, 0) }, &[], &[]);
        seal(&mut rec, lsn);
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
    /// appended, reads the current log generation — from its first record (the last
    /// checkpoint's) to its end — and switches the shipping tap on, all while holding the
    /// device and buffer locks, so the bytes returned and the records shipped from now on
    /// are contiguous. Refused when records wait in the shipping buffer (take them first).
    pub fn generation_then_ship(&self) -> Result<Vec<u8>, StorageError> {
        self.flush_to(self.end())?;
        let mut guard = self.device();
        let Some(d) = guard.as_mut() else { return Err(StorageError::Io("no log device".into())) };
        let b = self.buffer();
        if !b.shipped.is_empty() {
            return Err(StorageError::Io("shipped records not taken yet".into()));
        }
        if !b.bytes.is_empty() || d.written != b.next {
            return Err(StorageError::Io("records appended while the log was read".into()));
        }
        let mut bytes = vec![0u8; (d.written - d.base) as usize];
        d.device.read_at(0, &mut bytes).map_err(io_error)?;
        self.shipping.store(true, Ordering::Relaxed);
        Ok(bytes)
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

    #[test]
    fn scan_stops_at_a_torn_record_and_at_stale_generations() {
        let mut dev = CrashingLogDevice::new();
        let mut log = Vec::new();
        for i in 0..3u64 {
            let at = encode(&mut log, &Head::new(Kind::Commit, i, 0), &[], &[]);
            let lsn = LSN_FIRST + at as u64;
            seal(&mut log[at..], lsn);
        }
        dev.write_at(0, &log).unwrap();
        dev.sync_data().unwrap();
        let s = scan(&mut dev).unwrap();
        assert_eq!((s.base, s.records().count(), s.garbage_after), (Some(LSN_FIRST), 3, false));
        // Tear the last record.
        let last = log.len() - 3;
        dev.write_at(last as u64, &[0xAB]).unwrap();
        let s = scan(&mut dev).unwrap();
        assert_eq!((s.records().count(), s.garbage_after), (2, true));
        // A new generation at offset 0 with a higher base hides the old records.
        let mut g = Vec::new();
        encode(&mut g, &Head::new(Kind::Checkpoint, 0, 0), &[], &[]);
        seal(&mut g, 1 << 20);
        dev.write_at(0, &g).unwrap();
        let s = scan(&mut dev).unwrap();
        assert_eq!((s.base, s.records().count()), (Some(1 << 20), 1));
    }
}
