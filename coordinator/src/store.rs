//! Where a coordinator keeps its raft state across a crash (docs/design.md §11): the
//! [`GroupState`] — term, vote, commit index and the few membership entries — in one file of
//! its run directory, `coordinator-<id>.raft`. This is a log of decisions, a handful per
//! failure, never of transactions.
//!
//! Every election waits for a save on the candidate and on each voter, and the new leader's
//! first entry for another on each (docs/design.md §11, "A leader's death"), so a save is
//! kept to one device flush where it can be. A state whose record fits in one disk sector
//! ([`SECTOR`] bytes, which the record of a handful of entries does) is stored padded to the
//! sector and, after the first save of a process, overwritten in place: one write of the
//! sector at offset 0, then `fdatasync` — the file's size and blocks never change, so no
//! metadata is flushed. A write of one aligned sector is atomic on disks (PostgreSQL keeps
//! its `pg_control` under 512 bytes for the same reason), so a crash leaves the old record or
//! the new one. A larger state, and a process's first save, go the long way: a temporary
//! file, `fsync`, rename over the old one, `fsync` of the directory.
//!
//! Guarantees:
//! - [`GroupStore::save`] returns only once the new state is durable (`fdatasync` of the
//!   sector overwritten in place, or `fsync` of the file, then of the directory after the
//!   rename): a caller sends nothing that depends on the state before that;
//! - a crash mid-save leaves the previous state or the new one, never a mix (one sector is
//!   written whole or not at all; a larger state is written to a temporary file and renamed
//!   over the old one);
//! - [`GroupStore::load`] refuses a file that is not exactly what `save` wrote — a flipped
//!   byte, a truncated tail, a foreign file — with [`StoreError::Corrupt`] naming the file,
//!   and changes nothing: a coordinator must not vote again in a term it already voted in,
//!   so a damaged state is an operator's problem, not something to guess around.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use wire::messages::CoordinatorId;

use crate::group::GroupState;

/// The first bytes of a stored state (and its format's version).
const MAGIC: &[u8; 12] = b"glass-raft-1";
/// Bytes after the state: its xxh3-64 checksum.
const CHECKSUM_BYTES: usize = 8;
/// A disk sector: a record that fits is stored padded with zeros to exactly this length, and
/// overwritten in place (module comment).
pub const SECTOR: usize = 512;

/// Why the stored state cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{} is not a coordinator-group state this build wrote: {problem} (move it aside only if this coordinator never voted: it may be a majority's memory)", path.display())]
    Corrupt { path: PathBuf, problem: String },
}

/// One coordinator's stored raft state.
#[derive(Debug)]
pub struct GroupStore {
    dir: PathBuf,
    me: CoordinatorId,
    /// The state file, open for writing, once this process stored a one-sector record by
    /// renaming it into place: later one-sector records overwrite it ([`SECTOR`]).
    in_place: Mutex<Option<std::fs::File>>,
}

impl GroupStore {
    /// The store of coordinator `me` in `run_dir` (created on the first save).
    pub fn new(run_dir: impl Into<PathBuf>, me: CoordinatorId) -> GroupStore {
        GroupStore { dir: run_dir.into(), me, in_place: Mutex::new(None) }
    }

    /// The state file.
    pub fn path(&self) -> PathBuf {
        wire::config::coordinator_state_file(&self.dir, self.me)
    }

    fn tmp_path(&self) -> PathBuf {
        self.dir.join(format!("coordinator-{}.raft.tmp", self.me))
    }

    /// The stored state, or `None` if this coordinator never stored one (a fresh cluster).
    pub fn load(&self) -> Result<Option<GroupState>, StoreError> {
        let path = self.path();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StoreError::Io { what: "read", path, source }),
        };
        decode_file(&bytes).map(Some).map_err(|problem| StoreError::Corrupt { path, problem })
    }

    /// Replaces the stored state with `state`, durably.
    pub fn save(&self, state: &GroupState) -> Result<(), StoreError> {
        let io = |what: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { what, path, source }
        };
        let record = encode_file(state);
        let path = self.path();
        let mut in_place = self.in_place.lock().unwrap_or_else(|e| e.into_inner());
        if record.len() == SECTOR {
            if let Some(file) = in_place.as_ref() {
                file.write_all_at(&record, 0).map_err(io("write", &path))?;
                return file.sync_data().map_err(io("fdatasync", &path));
            }
        }
        // The long way; a failure in it leaves no file open for writing in place.
        *in_place = None;
        std::fs::create_dir_all(&self.dir).map_err(io("create", &self.dir))?;
        let tmp = self.tmp_path();
        let mut file = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
        file.write_all(&record).map_err(io("write", &tmp))?;
        file.sync_all().map_err(io("fsync", &tmp))?;
        drop(file);
        std::fs::rename(&tmp, &path).map_err(io("rename into", &path))?;
        std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(io("fsync", &self.dir))?;
        if record.len() == SECTOR {
            *in_place = Some(std::fs::OpenOptions::new().write(true).open(&path).map_err(io("open", &path))?);
        }
        Ok(())
    }
}

/// `MAGIC`, the state's length (u32 LE), the state, its checksum (u64 LE); padded with zeros
/// to [`SECTOR`] bytes when it fits in one.
fn encode_file(state: &GroupState) -> Vec<u8> {
    let body = state.encode();
    let len = u32::try_from(body.len()).expect("a group state holds a handful of entries");
    let mut out = Vec::with_capacity((MAGIC.len() + 4 + body.len() + CHECKSUM_BYTES).max(SECTOR));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&body).to_le_bytes());
    if out.len() < SECTOR {
        out.resize(SECTOR, 0);
    }
    out
}

fn decode_file(bytes: &[u8]) -> Result<GroupState, String> {
    let rest = bytes.strip_prefix(MAGIC.as_slice()).ok_or("it does not start with the format's magic bytes")?;
    let (len, rest) = rest.split_first_chunk::<4>().ok_or("it ends inside its length")?;
    let len = u32::from_le_bytes(*len) as usize;
    let record = MAGIC.len() + 4 + len + CHECKSUM_BYTES;
    // Exactly the record, or the record of one sector's room padded to the sector with zeros.
    let padded = record < SECTOR && bytes.len() == SECTOR;
    let expected = if padded { SECTOR - MAGIC.len() - 4 } else { len + CHECKSUM_BYTES };
    if rest.len() != expected {
        return Err(format!("it holds {} bytes after its length, not {expected}", rest.len()));
    }
    let (body, rest) = rest.split_at(len);
    let (sum, padding) = rest.split_at(CHECKSUM_BYTES);
    if padding.iter().any(|&b| b != 0) {
        return Err("its padding after the checksum is not zeros (a damaged file)".into());
    }
    let sum = u64::from_le_bytes(sum.try_into().expect("split at the checksum's length"));
    if xxhash_rust::xxh3::xxh3_64(body) != sum {
        return Err("its checksum does not match (a damaged file)".into());
    }
    GroupState::decode(body).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::{Decision, PartitionView, StoredEntry, ViewState};

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("glass-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn state() -> GroupState {
        let view = PartitionView { partition: 1, replicas: vec![1, 2], state: ViewState::Serving };
        let data = bincode::serde::encode_to_vec(Decision::Views(vec![view]), bincode::config::standard()).unwrap();
        GroupState {
            term: 7,
            vote: 2,
            commit: 1,
            entries: vec![StoredEntry { term: 7, index: 1, data: Vec::new() }, StoredEntry { term: 7, index: 2, data }],
        }
    }

    /// docs/design.md §11: what a coordinator stored comes back after a restart; a fresh
    /// coordinator has nothing stored.
    #[test]
    fn a_saved_state_loads_back() {
        let d = dir("roundtrip");
        let store = GroupStore::new(&d, 2);
        assert!(store.load().unwrap().is_none());
        store.save(&state()).unwrap();
        assert_eq!(store.load().unwrap(), Some(state()));
        let mut newer = state();
        newer.term = 8;
        store.save(&newer).unwrap();
        assert_eq!(store.load().unwrap(), Some(newer));
        assert!(!store.tmp_path().exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A state of one sector's room is overwritten in place after the process's first save:
    /// the same file (inode), the same length, the newest state read back; a state that
    /// outgrows the sector goes the long way, and one that fits again returns to the sector.
    #[test]
    fn a_one_sector_state_is_overwritten_in_place() {
        use std::os::unix::fs::MetadataExt;
        let d = dir("in-place");
        let store = GroupStore::new(&d, 1);
        store.save(&state()).unwrap();
        let inode = std::fs::metadata(store.path()).unwrap().ino();
        for term in 8..12 {
            let s = GroupState { term, ..state() };
            store.save(&s).unwrap();
            let meta = std::fs::metadata(store.path()).unwrap();
            assert_eq!((meta.ino(), meta.len()), (inode, SECTOR as u64), "overwritten in place");
            assert_eq!(GroupStore::new(&d, 1).load().unwrap(), Some(s));
        }
        let mut big = state();
        let views = (1..=200).map(|p| PartitionView { partition: p, replicas: vec![1, 2], state: ViewState::Serving });
        let data =
            bincode::serde::encode_to_vec(Decision::Views(views.collect()), bincode::config::standard()).unwrap();
        big.entries.push(StoredEntry { term: 9, index: 3, data });
        store.save(&big).unwrap();
        let meta = std::fs::metadata(store.path()).unwrap();
        assert!(meta.len() > SECTOR as u64 && meta.ino() != inode, "a larger state is renamed into place");
        assert_eq!(store.load().unwrap(), Some(big));
        store.save(&state()).unwrap();
        assert_eq!(
            (std::fs::metadata(store.path()).unwrap().len(), store.load().unwrap()),
            (SECTOR as u64, Some(state()))
        );
        assert!(!store.tmp_path().exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A file an earlier build wrote (the record unpadded) still loads.
    #[test]
    fn an_unpadded_record_loads() {
        let d = dir("unpadded");
        let store = GroupStore::new(&d, 0);
        store.save(&state()).unwrap();
        let padded = std::fs::read(store.path()).unwrap();
        let record = MAGIC.len() + 4 + state().encode().len() + CHECKSUM_BYTES;
        std::fs::write(store.path(), &padded[..record]).unwrap();
        assert_eq!(store.load().unwrap(), Some(state()));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A flipped byte anywhere (the padding included), a truncated file, trailing bytes:
    /// refused, naming the file.
    #[test]
    fn a_damaged_state_is_refused() {
        let d = dir("damaged");
        let store = GroupStore::new(&d, 0);
        store.save(&state()).unwrap();
        let good = std::fs::read(store.path()).unwrap();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            std::fs::write(store.path(), &bad).unwrap();
            match store.load() {
                Err(StoreError::Corrupt { path, .. }) => assert_eq!(path, store.path()),
                other => panic!("byte {at} flipped: {other:?}"),
            }
        }
        for bad in [&good[..good.len() - 1], &[good.as_slice(), &[0]].concat()[..]] {
            std::fs::write(store.path(), bad).unwrap();
            assert!(matches!(store.load(), Err(StoreError::Corrupt { .. })));
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
