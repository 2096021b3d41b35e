//! Where one database's durable state lives: its log device and its checkpoint snapshot —
//! together, its *medium* ([`Medium`]).
//!
//! Owns the [`CheckpointStore`] trait and its two implementations, and the in-memory medium
//! the simulator and the tests crash ([`MemoryMedium`]). Guarantees:
//! - a checkpoint is replaced atomically: a crash at any point of
//!   [`CheckpointStore::replace`] leaves either the old checkpoint or the new one, whole
//!   (the file store: temporary file, `fsync`, rename, directory `fsync`, exactly as
//!   `docs/conventional.md` § Checkpoints describes; the memory store: the new bytes are
//!   built aside and swapped in under a lock);
//! - [`Medium::Dir`] is the database directory as it always was (`wal.log` and
//!   `checkpoint.db`, the same files, the same calls);
//! - [`MemoryMedium::crash`] is a power loss with the semantics ARIES assumes of a disk
//!   (Mohan et al., TODS 1992, Section 1.1: what was forced survives): synced log bytes
//!   survive; of the unsynced writes, a chosen prefix (in write order) reaches the medium
//!   (a torn write) and the rest is lost; the checkpoint is the last one whose replacement
//!   completed. Every database handle opened before the crash is fenced off for good (its
//!   I/O fails, even after [`MemoryMedium::restart`]); restart recovery on the medium then
//!   keeps exactly the transactions whose commit record was synced (docs/design.md §10,
//!   full-stack).

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::log::{CrashingLogDevice, FileLogDevice, LogDevice};
use super::{ConventionalError, LOG_FILE, SNAPSHOT_FILE};

const SNAPSHOT_TMP_FILE: &str = "checkpoint.tmp";
/// The directory name errors give an in-memory medium's log and checkpoint.
const MEMORY_NAME: &str = "<memory medium>";

/// Where a database's checkpoint snapshot is kept.
pub trait CheckpointStore: Send + Sync + fmt::Debug {
    /// Makes the store ready to be written (the file store creates its directory).
    fn prepare(&self) -> Result<(), ConventionalError> {
        Ok(())
    }
    /// Replaces the checkpoint with the bytes `fill` writes, atomically: a crash at any point
    /// leaves the old checkpoint or the new one, never a mixture. `Ok` means the new one is
    /// durable.
    fn replace(&self, fill: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>) -> Result<(), ConventionalError>;
    /// The checkpoint's bytes, `None` when there is none.
    fn read(&self) -> Result<Option<Vec<u8>>, ConventionalError>;
    /// Whether a checkpoint exists.
    fn exists(&self) -> bool;
    /// What errors call the checkpoint (the file's path; an in-memory medium's name).
    fn path(&self) -> PathBuf;
    /// Another handle on the same store, to read the checkpoint later on another thread
    /// ([`super::base::ImageRead`]).
    fn reopen(&self) -> Box<dyn CheckpointStore>;
}

/// The checkpoint as the file `checkpoint.db` in a database directory: written to
/// `checkpoint.tmp`, `fsync`ed, renamed over `checkpoint.db`, and the directory `fsync`ed (so
/// the rename itself is durable).
#[derive(Debug, Clone)]
pub struct FileCheckpoint {
    dir: PathBuf,
}

impl FileCheckpoint {
    pub fn new(dir: impl Into<PathBuf>) -> FileCheckpoint {
        FileCheckpoint { dir: dir.into() }
    }
}

impl CheckpointStore for FileCheckpoint {
    fn prepare(&self) -> Result<(), ConventionalError> {
        std::fs::create_dir_all(&self.dir).map_err(ConventionalError::io("create database directory"))
    }

    fn replace(&self, fill: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>) -> Result<(), ConventionalError> {
        let io = ConventionalError::io;
        let tmp = self.dir.join(SNAPSHOT_TMP_FILE);
        let file = std::fs::File::create(&tmp).map_err(io("create snapshot"))?;
        let mut out = io::BufWriter::with_capacity(1 << 20, file);
        fill(&mut out).map_err(io("write snapshot"))?;
        let file =
            out.into_inner().map_err(|e| ConventionalError::Io { what: "write snapshot", source: e.into_error() })?;
        file.sync_all().map_err(io("sync snapshot"))?;
        drop(file);
        std::fs::rename(&tmp, self.path()).map_err(io("rename snapshot"))?;
        std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(io("sync database directory"))
    }

    fn read(&self) -> Result<Option<Vec<u8>>, ConventionalError> {
        match std::fs::read(self.path()) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ConventionalError::Io { what: "read snapshot", source: e }),
        }
    }

    fn exists(&self) -> bool {
        self.path().exists()
    }

    fn path(&self) -> PathBuf {
        self.dir.join(SNAPSHOT_FILE)
    }

    fn reopen(&self) -> Box<dyn CheckpointStore> {
        Box::new(self.clone())
    }
}

/// Where a power failure strikes the next checkpoint written to a [`MemoryMedium`]
/// ([`MemoryMedium::crash_at_next_checkpoint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointCrash {
    /// While the new checkpoint is being written (before it replaces the old one): the old
    /// checkpoint survives, with the log generation that goes with it.
    WhileWriting,
    /// Right after the new checkpoint replaced the old one, before the checkpoint's new log
    /// generation was started: the new checkpoint survives beside the old generation.
    AfterReplacing,
}

#[derive(Debug, Default)]
struct CheckpointState {
    /// The checkpoint on the medium.
    current: Option<Arc<Vec<u8>>>,
    crashed: bool,
    /// Bumped by every crash, restart and erase: handles attached before are fenced off.
    epoch: u64,
    crash_next: Option<CheckpointCrash>,
    /// Checkpoints that replaced the previous one.
    replaced: u64,
}

#[derive(Debug, Default)]
struct MemoryState {
    checkpoint: Mutex<CheckpointState>,
}

/// An in-memory medium: a [`CrashingLogDevice`] and an in-memory checkpoint, for the
/// simulator and tests (see the module documentation for its crash semantics). A cheap
/// handle: clones share the medium, so a test keeps one while the database owns another.
///
/// Lifecycle: open a database on it ([`Medium::Memory`] and
/// [`super::ConventionalDb::open_on`]); [`MemoryMedium::crash`] it (power loss); then
/// [`MemoryMedium::restart`] (power returns) and open again: restart recovery runs over what
/// the medium kept.
#[derive(Debug, Clone, Default)]
pub struct MemoryMedium {
    log: CrashingLogDevice,
    state: Arc<MemoryState>,
}

fn medium_crashed() -> io::Error {
    io::Error::other("medium crashed")
}

impl MemoryMedium {
    /// An empty medium.
    pub fn new() -> MemoryMedium {
        MemoryMedium::default()
    }

    fn checkpoint_state(&self) -> MutexGuard<'_, CheckpointState> {
        self.state.checkpoint.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Power loss now. Synced log bytes survive; of the log writes not yet synced, the first
    /// `torn_bytes` bytes in write order reach the medium (a torn write; 0: they are lost
    /// cleanly) and the rest is lost; the checkpoint is the last one whose replacement
    /// completed. Every operation of a database opened before fails from now on, also after
    /// [`MemoryMedium::restart`]. On a medium already down (a crash injected at a sync or a
    /// checkpoint), only applies the tear.
    pub fn crash(&self, torn_bytes: usize) {
        self.log.crash();
        self.log.tear(torn_bytes);
        let mut c = self.checkpoint_state();
        if !c.crashed {
            c.crashed = true;
            c.epoch += 1;
        }
    }

    /// Power returns: the medium holds what the crash left, and a database may be opened on
    /// it again (restart recovery). Without a crash first, this is a power cycle (unsynced
    /// log writes are lost).
    pub fn restart(&self) {
        self.log.restart();
        let mut c = self.checkpoint_state();
        c.crashed = false;
        c.crash_next = None;
        c.epoch += 1;
    }

    /// Whether the medium is down (crashed, not restarted).
    pub fn is_crashed(&self) -> bool {
        self.log.is_crashed() || self.checkpoint_state().crashed
    }

    /// After `n` more successful log syncs, power fails during the next one: that sync fails
    /// (the commit waiting for it is not acknowledged), its writes stay unsynced, and the
    /// medium is down; [`MemoryMedium::crash`] then says how many of those bytes reached it.
    pub fn crash_after_syncs(&self, n: u64) {
        self.log.crash_after_syncs(n);
    }

    /// Power fails during the next checkpoint written to the medium, at `at`: that
    /// checkpoint fails and the medium is down (the log's unsynced writes are lost).
    pub fn crash_at_next_checkpoint(&self, at: CheckpointCrash) {
        self.checkpoint_state().crash_next = Some(at);
    }

    /// Whether a checkpoint is on the medium.
    pub fn has_checkpoint(&self) -> bool {
        self.checkpoint_state().current.is_some()
    }

    /// Checkpoints written to the medium (replacing the previous one) so far.
    pub fn checkpoints_written(&self) -> u64 {
        self.checkpoint_state().replaced
    }

    /// Puts `bytes` on the medium as its checkpoint (`None`: no checkpoint), whatever they
    /// hold, as a damaged or foreign disk would: for tests and for fuzzing restart recovery
    /// (docs/design.md §13, target `wal_recovery`). Database handles stay attached.
    pub fn put_checkpoint(&self, bytes: Option<Vec<u8>>) {
        self.checkpoint_state().current = bytes.map(Arc::new);
    }

    /// The log device, for inspection and fault injection (its bytes on the medium, syncs,
    /// flipping a byte).
    pub fn log_device(&self) -> &CrashingLogDevice {
        &self.log
    }

    /// Empties the medium (a fresh disk): no log, no checkpoint; every database handle opened
    /// before is fenced off.
    pub fn erase(&self) {
        self.log.erase();
        let mut c = self.checkpoint_state();
        let epoch = c.epoch + 1;
        *c = CheckpointState { epoch, ..CheckpointState::default() };
    }

    /// The handles a database opening now works through.
    fn attach(&self) -> (CrashingLogDevice, MemoryCheckpoint) {
        let epoch = self.checkpoint_state().epoch;
        (self.log.attach(), MemoryCheckpoint { medium: self.clone(), epoch })
    }
}

/// The checkpoint store of a [`MemoryMedium`], as one opened database holds it.
#[derive(Debug)]
struct MemoryCheckpoint {
    medium: MemoryMedium,
    /// The medium's epoch this handle was attached in.
    epoch: u64,
}

impl MemoryCheckpoint {
    /// The state, for an operation through this handle: refused when the medium is down or
    /// the handle is from an earlier epoch.
    fn live(&self) -> io::Result<MutexGuard<'_, CheckpointState>> {
        let c = self.medium.checkpoint_state();
        if c.crashed || c.epoch != self.epoch {
            return Err(medium_crashed());
        }
        Ok(c)
    }
}

impl CheckpointStore for MemoryCheckpoint {
    fn replace(&self, fill: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>) -> Result<(), ConventionalError> {
        let io = ConventionalError::io;
        drop(self.live().map_err(io("create snapshot"))?);
        // Built aside (the temporary file), then swapped in whole (the rename).
        let mut bytes = Vec::new();
        fill(&mut bytes).map_err(io("write snapshot"))?;
        let mut c = self.live().map_err(io("rename snapshot"))?;
        let strike = c.crash_next.take();
        if strike != Some(CheckpointCrash::WhileWriting) {
            c.current = Some(Arc::new(bytes));
            c.replaced += 1;
        }
        drop(c);
        let Some(strike) = strike else { return Ok(()) };
        self.medium.crash(0);
        let what = match strike {
            CheckpointCrash::WhileWriting => "write snapshot",
            CheckpointCrash::AfterReplacing => "sync database directory",
        };
        Err(ConventionalError::Io { what, source: medium_crashed() })
    }

    fn read(&self) -> Result<Option<Vec<u8>>, ConventionalError> {
        let c = self.live().map_err(ConventionalError::io("read snapshot"))?;
        Ok(c.current.as_ref().map(|b| b.as_ref().clone()))
    }

    fn exists(&self) -> bool {
        self.medium.has_checkpoint()
    }

    fn path(&self) -> PathBuf {
        Path::new(MEMORY_NAME).join(SNAPSHOT_FILE)
    }

    fn reopen(&self) -> Box<dyn CheckpointStore> {
        Box::new(MemoryCheckpoint { medium: self.medium.clone(), epoch: self.epoch })
    }
}

/// Where one database's durable state lives.
#[derive(Debug, Clone)]
pub enum Medium {
    /// A directory holding `wal.log` and `checkpoint.db` (created when missing).
    Dir(PathBuf),
    /// An in-memory medium with crash semantics.
    Memory(MemoryMedium),
}

impl From<&Path> for Medium {
    fn from(dir: &Path) -> Medium {
        Medium::Dir(dir.to_path_buf())
    }
}

impl From<PathBuf> for Medium {
    fn from(dir: PathBuf) -> Medium {
        Medium::Dir(dir)
    }
}

impl From<MemoryMedium> for Medium {
    fn from(m: MemoryMedium) -> Medium {
        Medium::Memory(m)
    }
}

impl fmt::Display for Medium {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Medium::Dir(dir) => write!(f, "{}", dir.display()),
            Medium::Memory(_) => f.write_str(MEMORY_NAME),
        }
    }
}

impl Medium {
    /// What errors call the log (`DIR/wal.log`; an in-memory medium's name).
    pub fn log_path(&self) -> PathBuf {
        match self {
            Medium::Dir(dir) => dir.join(LOG_FILE),
            Medium::Memory(_) => Path::new(MEMORY_NAME).join(LOG_FILE),
        }
    }

    /// What errors call the checkpoint (`DIR/checkpoint.db`; an in-memory medium's name).
    pub fn checkpoint_path(&self) -> PathBuf {
        match self {
            Medium::Dir(dir) => dir.join(SNAPSHOT_FILE),
            Medium::Memory(_) => Path::new(MEMORY_NAME).join(SNAPSHOT_FILE),
        }
    }

    /// Whether a checkpoint is on the medium.
    pub fn has_checkpoint(&self) -> bool {
        match self {
            Medium::Dir(dir) => dir.join(SNAPSHOT_FILE).exists(),
            Medium::Memory(m) => m.has_checkpoint(),
        }
    }

    /// Empties the medium: removes the directory (and everything in it), or erases the
    /// in-memory medium.
    pub fn erase(&self) -> io::Result<()> {
        match self {
            Medium::Dir(dir) if dir.exists() => std::fs::remove_dir_all(dir),
            Medium::Dir(_) => Ok(()),
            Medium::Memory(m) => {
                m.erase();
                Ok(())
            }
        }
    }

    /// The checkpoint store a database opening now uses.
    pub(crate) fn checkpoint_store(&self) -> Box<dyn CheckpointStore> {
        match self {
            Medium::Dir(dir) => Box::new(FileCheckpoint::new(dir.clone())),
            Medium::Memory(m) => Box::new(m.attach().1),
        }
    }

    /// The log device a database opening now uses. A directory holding a checkpoint but no
    /// log is refused ([`ConventionalError::MissingLog`]) before anything is created.
    pub(crate) fn log_device(&self) -> Result<Box<dyn LogDevice>, ConventionalError> {
        match self {
            Medium::Dir(dir) => {
                let log = dir.join(LOG_FILE);
                // Opening creates a missing log file: refuse first when a checkpoint implies one.
                if dir.join(SNAPSHOT_FILE).exists() && !log.exists() {
                    return Err(ConventionalError::MissingLog { path: log });
                }
                std::fs::create_dir_all(dir).map_err(ConventionalError::io("create database directory"))?;
                Ok(Box::new(FileLogDevice::open(&log).map_err(ConventionalError::io("open log"))?))
            }
            Medium::Memory(m) => Ok(Box::new(m.attach().0)),
        }
    }

    /// The log device as [`super::cut_log_on`] opens it (the file is created when missing,
    /// as it always was).
    pub(crate) fn log_device_for_cut(&self) -> io::Result<Box<dyn LogDevice>> {
        match self {
            Medium::Dir(dir) => Ok(Box::new(FileLogDevice::open(&dir.join(LOG_FILE))?)),
            Medium::Memory(m) => Ok(Box::new(m.attach().0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(store: &dyn CheckpointStore, bytes: &[u8]) -> Result<(), ConventionalError> {
        store.replace(&mut |w| w.write_all(bytes))
    }

    /// `docs/conventional.md` § Checkpoints: a checkpoint replaces the last one atomically;
    /// a crash while writing leaves the old one, a crash after replacing the new one.
    #[test]
    fn a_memory_checkpoint_is_replaced_atomically() {
        let m = MemoryMedium::new();
        let store = Medium::Memory(m.clone()).checkpoint_store();
        assert_eq!(store.read().unwrap(), None);
        write(store.as_ref(), b"old").unwrap();
        m.crash_at_next_checkpoint(CheckpointCrash::WhileWriting);
        assert!(write(store.as_ref(), b"new").is_err());
        assert!(m.is_crashed());
        assert!(store.read().is_err(), "the crashed medium answers nothing");
        m.restart();
        assert!(store.read().is_err(), "a handle from before the crash stays fenced off");
        let store = Medium::Memory(m.clone()).checkpoint_store();
        assert_eq!(store.read().unwrap().as_deref(), Some(&b"old"[..]));

        m.crash_at_next_checkpoint(CheckpointCrash::AfterReplacing);
        assert!(write(store.as_ref(), b"new").is_err());
        m.restart();
        let store = Medium::Memory(m.clone()).checkpoint_store();
        assert_eq!(store.read().unwrap().as_deref(), Some(&b"new"[..]));
        assert_eq!(m.checkpoints_written(), 2);
    }

    /// ARIES's disk model (Mohan et al., Section 1.1): forced log bytes survive a crash, a
    /// torn write keeps a prefix of the unforced ones in write order, the rest is lost.
    #[test]
    fn a_memory_crash_keeps_synced_bytes_and_a_torn_prefix() {
        let m = MemoryMedium::new();
        let mut dev = Medium::Memory(m.clone()).log_device().unwrap();
        dev.write_at(0, &[1; 8]).unwrap();
        dev.sync_data().unwrap();
        dev.write_at(8, &[2; 8]).unwrap();
        dev.write_at(16, &[3; 8]).unwrap();
        m.crash(10);
        assert!(dev.write_at(0, &[9; 8]).is_err(), "the old handle's writes fail");
        m.restart();
        assert!(dev.size().is_err(), "and stay fenced off after the restart");
        let mut dev = Medium::Memory(m.clone()).log_device().unwrap();
        let mut got = vec![0; dev.size().unwrap() as usize];
        dev.read_at(0, &mut got).unwrap();
        assert_eq!(got, [&[1u8; 8][..], &[2; 8], &[3, 3]].concat());

        m.erase();
        let dev = Medium::Memory(m.clone()).log_device().unwrap();
        assert_eq!(dev.size().unwrap(), 0);
        assert!(!m.has_checkpoint());
    }
}
