//! Folders a run makes for itself and removes when it ends ([`Scratch`]): the embedded
//! bench's write-ahead log folder (`glass bench --engine conventional`: the run record's `wal/`
//! unless `--wal-dir` names one) and the breakdown's working directory (the durable steps' log,
//! the callgrind output).
//!
//! Guarantees: a `--wal-dir` that is not a directory or already holds a database is refused
//! before anything is written ([`Scratch::check_wal_dir`]), and a folder the user named is
//! never removed; a folder made here is removed when its [`Scratch`] drops (the log folder not
//! with `--keep-logs`), the log folder on an interrupt too (docs/design.md §12, "Stopping what
//! was started"); a breakdown's working directory has a name no other run holds.

use std::path::{Path, PathBuf};

use engine::conventional::{LOG_FILE, SNAPSHOT_FILE};

use crate::error::HarnessError;
use crate::Result;

/// Names tried for a fresh working directory.
const WORK_DIR_ATTEMPTS_MAX: u32 = 1000;

/// A run's folder; one made for this run alone is removed when this drops.
#[derive(Debug)]
pub struct Scratch {
    pub path: PathBuf,
    temporary: bool,
}

impl Scratch {
    /// Refuses a `--wal-dir` that is not a directory or already holds a database.
    pub fn check_wal_dir(dir: &Path) -> Result<()> {
        if dir.exists() && !dir.is_dir() {
            return Err(HarnessError::Invalid(format!("--wal-dir {} exists and is not a directory", dir.display())));
        }
        if dir.join(SNAPSHOT_FILE).exists() || dir.join(LOG_FILE).exists() {
            return Err(HarnessError::Invalid(format!(
                "--wal-dir {} already holds a database; recover it with `glass recover --wal-dir {}` or choose an \
                 empty directory",
                dir.display(),
                dir.display()
            )));
        }
        Ok(())
    }

    /// The conventional stack's directory: `--wal-dir` (checked again), else `default` (the
    /// run record's `wal/`), created only when the configuration writes to it (`writes`) and
    /// removed at the end unless `keep`.
    pub fn wal_dir(given: Option<&Path>, writes: bool, default: PathBuf, keep: bool) -> Result<Scratch> {
        if let Some(dir) = given {
            Scratch::check_wal_dir(dir)?;
            return Ok(Scratch { path: dir.to_path_buf(), temporary: false });
        }
        if writes {
            std::fs::create_dir_all(&default)
                .map_err(|e| HarnessError::io(format!("create {}", default.display()), e))?;
            if !keep {
                crate::interrupt::register_temporary(default.clone());
            }
        }
        Ok(Scratch { path: default, temporary: writes && !keep })
    }

    /// The working directory of one breakdown run under `parent` (its `--wal-dir`): a fresh
    /// `glass-breakdown-<pid>-<n>`, removed when this drops.
    pub fn fresh(parent: &Path) -> Result<Scratch> {
        if !parent.is_dir() {
            return Err(HarnessError::Invalid(format!("--wal-dir {}: not a directory", parent.display())));
        }
        // A fresh name: the first of glass-breakdown-<pid>-<n> that does not exist yet.
        for n in 0..WORK_DIR_ATTEMPTS_MAX {
            let dir = parent.join(format!("glass-breakdown-{}-{n}", std::process::id()));
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok(Scratch { path: dir, temporary: true }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(HarnessError::Invalid(format!("--wal-dir: cannot create {}: {e}", dir.display())))
                }
            }
        }
        Err(HarnessError::Invalid(format!("--wal-dir {}: no fresh working directory name left", parent.display())))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.path);
            crate::interrupt::unregister_temporary(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_made_for_the_run_goes_with_it_and_a_given_one_stays() {
        let base = std::env::temp_dir().join(format!("glass-scratch-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let made = Scratch::wal_dir(None, true, base.join("wal"), false).unwrap();
        assert!(made.path.is_dir());
        drop(made);
        assert!(!base.join("wal").exists(), "the run's own log folder is removed");
        let kept = Scratch::wal_dir(None, true, base.join("kept"), true).unwrap();
        drop(kept);
        assert!(base.join("kept").is_dir(), "--keep-logs keeps it");
        let given = Scratch::wal_dir(Some(&base.join("kept")), true, base.join("unused"), false).unwrap();
        drop(given);
        assert!(base.join("kept").is_dir(), "a --wal-dir given is never removed");
        std::fs::write(base.join("kept").join(LOG_FILE), b"").unwrap();
        let e = Scratch::check_wal_dir(&base.join("kept")).unwrap_err().to_string();
        assert!(e.contains("already holds a database"), "{e}");
        let work = Scratch::fresh(&base).unwrap();
        let other = Scratch::fresh(&base).unwrap();
        assert_ne!(work.path, other.path, "each working directory is fresh");
        let path = work.path.clone();
        drop(work);
        assert!(!path.exists());
        drop(other);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
