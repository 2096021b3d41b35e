//! Where a coordinator keeps its raft state across a crash (docs/design.md §11): the
//! [`GroupState`] — term, vote, commit index and the few membership entries — in one file of
//! its run directory, `coordinator-<id>.raft`. This is a log of decisions, a handful per
//! failure, never of transactions.
//!
//! Guarantees:
//! - [`GroupStore::save`] returns only once the new state is durable (`fsync` of the file,
//!   then of the directory after the rename): a caller sends nothing that depends on the state
//!   before that;
//! - a crash mid-save leaves the previous state or the new one, never a mix (the new state is
//!   written to a temporary file and renamed over the old one);
//! - [`GroupStore::load`] refuses a file that is not exactly what `save` wrote — a flipped
//!   byte, a truncated tail, a foreign file — with [`StoreError::Corrupt`] naming the file,
//!   and changes nothing: a coordinator must not vote again in a term it already voted in,
//!   so a damaged state is an operator's problem, not something to guess around.

use std::io::Write;
use std::path::{Path, PathBuf};

use wire::messages::CoordinatorId;

use crate::group::GroupState;

/// The first bytes of a stored state (and its format's version).
const MAGIC: &[u8; 12] = b"glass-raft-1";
/// Bytes after the state: its xxh3-64 checksum.
const CHECKSUM_BYTES: usize = 8;

/// Why the stored state cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{} is not a coordinator-group state this build wrote: {problem} (move it aside only if this coordinator never voted: it may be a majority's memory)", path.display())]
    Corrupt { path: PathBuf, problem: String },
}

/// One coordinator's stored raft state.
#[derive(Debug, Clone)]
pub struct GroupStore {
    dir: PathBuf,
    me: CoordinatorId,
}

impl GroupStore {
    /// The store of coordinator `me` in `run_dir` (created on the first save).
    pub fn new(run_dir: impl Into<PathBuf>, me: CoordinatorId) -> GroupStore {
        GroupStore { dir: run_dir.into(), me }
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
        std::fs::create_dir_all(&self.dir).map_err(io("create", &self.dir))?;
        let (tmp, path) = (self.tmp_path(), self.path());
        let mut file = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
        file.write_all(&encode_file(state)).map_err(io("write", &tmp))?;
        file.sync_all().map_err(io("fsync", &tmp))?;
        drop(file);
        std::fs::rename(&tmp, &path).map_err(io("rename into", &path))?;
        std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(io("fsync", &self.dir))
    }
}

/// `MAGIC`, the state's length (u32 LE), the state, its checksum (u64 LE).
fn encode_file(state: &GroupState) -> Vec<u8> {
    let body = state.encode();
    let len = u32::try_from(body.len()).expect("a group state holds a handful of entries");
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + body.len() + CHECKSUM_BYTES);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&body).to_le_bytes());
    out
}

fn decode_file(bytes: &[u8]) -> Result<GroupState, String> {
    let rest = bytes.strip_prefix(MAGIC.as_slice()).ok_or("it does not start with the format's magic bytes")?;
    let (len, rest) = rest.split_first_chunk::<4>().ok_or("it ends inside its length")?;
    let len = u32::from_le_bytes(*len) as usize;
    if rest.len() != len + CHECKSUM_BYTES {
        return Err(format!("it holds {} bytes after its length, not {}", rest.len(), len + CHECKSUM_BYTES));
    }
    let (body, sum) = rest.split_at(len);
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

    /// A flipped byte anywhere, a truncated file, trailing bytes: refused, naming the file.
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
