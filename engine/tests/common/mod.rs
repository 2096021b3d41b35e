//! Helpers shared by the engine's integration tests: a fresh directory per test.
#![allow(dead_code)] // each test crate uses its own subset

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

static DIRS: AtomicU64 = AtomicU64::new(0);

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `glass-<prefix>-<pid>-<name>-<n>`: unique per process and call.
    pub fn new(prefix: &str, name: &str) -> TempDir {
        let n = DIRS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("glass-{prefix}-{}-{name}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Transaction at timestamp `ts` on a conventional-stack session: sets stock `i`'s quantity
/// to `1000 + i` and its YTD to `i`, and commits.
pub fn commit_stock(s: &mut engine::conventional::Session, ts: u64, i: u32) {
    use engine::schema::{keys, t};
    use engine::Storage;
    s.begin(ts);
    s.update::<t::Stocks, _>(keys::stock(1, i), |r| {
        r.s_quantity = 1000 + i as i32;
        r.s_ytd = i;
    })
    .unwrap();
    s.commit().unwrap();
}

/// The state digest of a conventional-stack database, on a session of its own.
pub fn state(db: &std::sync::Arc<engine::conventional::ConventionalDb>) -> engine::digest::Digest {
    engine::digest::digest(&mut db.session().unwrap())
}
