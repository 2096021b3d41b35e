//! The paper's switches (Harizopoulos et al., SIGMOD 2008, Section 4 and Figures 5–6) as one
//! configuration type, chosen in one place.
//!
//! Owns: [`Step`] (0 = the full conventional stack … 10 = every component removed; 11 names
//! the lean kernel, [`crate::LeanDb`]), [`Switches`] (which components are present) and
//! [`Config`] (switches plus the number of workers). Guarantees: `Switches::for_step(n)`
//! removes exactly the first `n` components in the paper's order, cumulatively; a
//! configuration that removes locking or latching is refused with more than one worker.

use super::error::ConventionalError;
pub use super::latch::LatchKind;
use super::page::BUFFER_POOL_FRAMES_PER_WORKER_MIN;

/// Page size of the full stack (Shore's 8 KiB).
pub const PAGE_BYTES_SMALL: usize = 8 << 10;
/// Page size after the page-size switch (32 KiB).
pub const PAGE_BYTES_LARGE: usize = 32 << 10;
/// Default size the log file is preallocated (and grown) by, in bytes.
pub const LOG_PREALLOC_BYTES_DEFAULT: u64 = 64 << 20;

/// One step of the paper's staircase: `Step(n)` has the first `n` components removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Step(u8);

const STEP_NAMES: [(&str, &str); 12] = [
    ("full stack", "the conventional stack: buffer pool, B+trees with a generic key comparator, 2PL, latches, WAL with group-commit fsync"),
    ("B-tree keys", "B-tree key evaluation: the generic byte-key comparator is replaced by specialised integer comparison"),
    ("log flush", "log flush: commit no longer writes the log to disk nor calls fdatasync"),
    ("log records", "log records: no log record is generated (an in-memory undo list keeps abort working)"),
    ("LSNs", "LSN handling: no LSNs are assigned and no page LSN is maintained"),
    ("locking", "locking: lock manager calls return at once (one worker only)"),
    ("latching", "latching: latches on the page table, frames, B+tree nodes and catalog are no-ops (one worker only)"),
    ("page size", "page size: 8 KiB pages become 32 KiB pages"),
    ("directory", "directory lookup: table and index handles are cached in the session instead of looked up in the catalog per access"),
    ("transactions", "transaction management: begin/commit bookkeeping (transaction table, checkpoint gate, global ids) trimmed to the minimum"),
    ("buffer pool", "buffer pool: pages live in plain heap memory reached by direct pointer; no page table, no fix/unfix, no pin counts"),
    ("lean kernel", "lean kernel: the same procedures on LeanDb (hash and ordered maps over typed rows, nothing else)"),
];

impl Step {
    /// The full conventional stack.
    pub const FULL_STACK: Step = Step(0);
    /// Every component of the conventional stack removed (still its code).
    pub const STRIPPED: Step = Step(10);
    /// Step 11: the lean kernel, [`crate::LeanDb`] (not run by the conventional stack).
    pub const LEAN_KERNEL: Step = Step(11);
    /// Every step in order, 0 to 11.
    pub const ALL: [Step; 12] =
        [Step(0), Step(1), Step(2), Step(3), Step(4), Step(5), Step(6), Step(7), Step(8), Step(9), Step(10), Step(11)];

    /// `Some` for 0..=11.
    pub fn new(n: u8) -> Option<Step> {
        (n <= Step::LEAN_KERNEL.0).then_some(Step(n))
    }

    pub fn number(self) -> u8 {
        self.0
    }

    /// Short name of the component removed at this step ("full stack" for step 0).
    pub fn name(self) -> &'static str {
        STEP_NAMES[self.0 as usize].0
    }

    /// One-line description of what this step removes, for reports.
    pub fn description(self) -> &'static str {
        STEP_NAMES[self.0 as usize].1
    }

    /// True for step 11, which runs [`crate::LeanDb`] rather than the conventional stack.
    pub fn runs_lean_kernel(self) -> bool {
        self == Step::LEAN_KERNEL
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.0, self.name())
    }
}

/// Which components of the conventional stack are present (`true` = the conventional
/// component is in place; the paper's switches turn them off in field order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Switches {
    /// 1: B+tree keys compared by a generic comparator interpreting a key descriptor field by
    /// field (off: specialised big-endian integer comparison).
    pub generic_keys: bool,
    /// 2: commit writes the log buffer to the device and calls `fdatasync` (group commit).
    pub log_flush: bool,
    /// 3: log records (before/after images, CLRs, commit records) are generated.
    pub log_records: bool,
    /// 4: LSNs are assigned and stamped on pages.
    pub page_lsns: bool,
    /// 5: strict two-phase locking through the lock manager.
    pub locking: bool,
    /// 6: latches are taken on the page table, pages and catalog.
    pub latching: bool,
    /// 7: 8 KiB pages (off: 32 KiB).
    pub small_pages: bool,
    /// 8: the catalog is looked up on every access (off: handles cached per session).
    pub catalog_lookup: bool,
    /// 9: full transaction bookkeeping (off: trimmed to a session-local id).
    pub full_txn: bool,
    /// 10: pages live in a buffer pool: page table, frames, fix/unfix with pin counts (off:
    /// plain heap memory by direct pointer).
    pub buffer_pool: bool,
}

impl Switches {
    /// Every component present (step 0).
    pub const FULL: Switches = Switches {
        generic_keys: true,
        log_flush: true,
        log_records: true,
        page_lsns: true,
        locking: true,
        latching: true,
        small_pages: true,
        catalog_lookup: true,
        full_txn: true,
        buffer_pool: true,
    };

    /// The switches of `step`: the first `step` components removed, in the paper's order.
    /// Steps 10 and 11 both give every component removed (step 11 runs `LeanDb` instead).
    pub fn for_step(step: Step) -> Switches {
        let n = step.number();
        let on = |i: u8| n < i;
        Switches {
            generic_keys: on(1),
            log_flush: on(2),
            log_records: on(3),
            page_lsns: on(4),
            locking: on(5),
            latching: on(6),
            small_pages: on(7),
            catalog_lookup: on(8),
            full_txn: on(9),
            buffer_pool: on(10),
        }
    }

    /// Page size in bytes.
    pub fn page_bytes(&self) -> usize {
        if self.small_pages {
            PAGE_BYTES_SMALL
        } else {
            PAGE_BYTES_LARGE
        }
    }

    /// Whether committed transactions survive a crash (records generated and flushed).
    pub fn durable(&self) -> bool {
        self.log_records && self.log_flush
    }
}

impl Default for Switches {
    fn default() -> Self {
        Switches::FULL
    }
}

/// A conventional stack's configuration: its switches and how many worker sessions may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub switches: Switches,
    /// Most sessions open at once (one per worker thread).
    pub workers: usize,
    /// The log file is preallocated (zero-filled) in chunks of this many bytes.
    pub log_prealloc_bytes: u64,
    /// Whether opening a durable database takes a checkpoint once restart recovery is done
    /// (starting a new log generation). Off for a partition that comes back alone from its
    /// own log (docs/design.md §10): its log generation must keep the commit records of the
    /// transactions it ran before the failure, so that a second restart still knows which of
    /// the batches replayed to it already took effect.
    pub checkpoint_on_open: bool,
    /// The buffer pool's size in bytes; `None` (the default): unbounded, the whole database
    /// stays in memory, as in the paper. With a bound, pages beyond it are evicted by the
    /// clock and written back to page files (see `page`). Ignored when the buffer-pool switch
    /// is off (step 10: no pool).
    pub buffer_pool_bytes: Option<u64>,
    /// Which latch the latching switch leaves in place: the mutex-style latch with holder
    /// bookkeeping (the default, Shore's) or the cheap spin latch.
    pub latch: LatchKind,
}

impl Config {
    pub fn new(switches: Switches, workers: usize) -> Config {
        Config {
            switches,
            workers,
            log_prealloc_bytes: LOG_PREALLOC_BYTES_DEFAULT,
            checkpoint_on_open: true,
            buffer_pool_bytes: None,
            latch: LatchKind::default(),
        }
    }

    /// The number of frames a bounded pool has (`None`: unbounded, or no pool).
    pub fn buffer_pool_frames(&self) -> Option<u64> {
        let bytes = self.buffer_pool_bytes.filter(|_| self.switches.buffer_pool)?;
        Some(bytes / self.switches.page_bytes() as u64)
    }

    /// The configuration of `step` with `workers` workers.
    pub fn for_step(step: Step, workers: usize) -> Config {
        Config::new(Switches::for_step(step), workers)
    }

    /// Refuses configurations that are unsound: removing locking or latching with more than
    /// one worker.
    pub fn validate(&self) -> Result<(), ConventionalError> {
        if self.workers == 0 {
            return Err(ConventionalError::NoWorkers);
        }
        if let (Some(frames), Some(bytes)) = (self.buffer_pool_frames(), self.buffer_pool_bytes) {
            let per_worker = BUFFER_POOL_FRAMES_PER_WORKER_MIN;
            let frames_min = per_worker * self.workers as u64;
            if frames < frames_min {
                return Err(ConventionalError::BufferPoolTooSmall {
                    bytes,
                    page_bytes: self.switches.page_bytes(),
                    frames,
                    workers: self.workers,
                    frames_min,
                    per_worker,
                });
            }
        }
        if self.workers > 1 {
            if !self.switches.locking {
                return Err(ConventionalError::UnsafeWithWorkers { switch: "locking", workers: self.workers });
            }
            if !self.switches.latching {
                return Err(ConventionalError::UnsafeWithWorkers { switch: "latching", workers: self.workers });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_remove_components_cumulatively_in_the_papers_order() {
        assert_eq!(Switches::for_step(Step::FULL_STACK), Switches::FULL);
        let s5 = Switches::for_step(Step::new(5).unwrap());
        assert!(!s5.generic_keys && !s5.log_flush && !s5.log_records && !s5.page_lsns && !s5.locking);
        assert!(s5.latching && s5.small_pages && s5.catalog_lookup && s5.full_txn && s5.buffer_pool);
        assert_eq!(Switches::for_step(Step::STRIPPED), Switches::for_step(Step::LEAN_KERNEL));
        assert_eq!(Step::new(12), None);
        assert_eq!(Switches::for_step(Step::new(7).unwrap()).page_bytes(), PAGE_BYTES_LARGE);
    }

    #[test]
    fn removing_concurrency_control_is_refused_with_several_workers() {
        assert!(Config::for_step(Step::new(4).unwrap(), 4).validate().is_ok());
        assert!(matches!(
            Config::for_step(Step::new(5).unwrap(), 2).validate(),
            Err(ConventionalError::UnsafeWithWorkers { switch: "locking", workers: 2 })
        ));
        assert!(Config::for_step(Step::STRIPPED, 1).validate().is_ok());
    }

    #[test]
    fn a_buffer_pool_too_small_for_its_workers_is_refused() {
        let small = Config { buffer_pool_bytes: Some(64 * 8192 * 2 - 1), ..Config::for_step(Step::FULL_STACK, 2) };
        assert!(matches!(
            small.validate(),
            Err(ConventionalError::BufferPoolTooSmall { frames: 127, frames_min: 128, .. })
        ));
        let enough = Config { buffer_pool_bytes: Some(64 * 8192 * 2), ..small.clone() };
        assert!(enough.validate().is_ok());
        // Without a buffer pool (step 10) the bound means nothing.
        let none = Config { buffer_pool_bytes: Some(1), ..Config::for_step(Step::STRIPPED, 1) };
        assert_eq!(none.buffer_pool_frames(), None);
        assert!(none.validate().is_ok());
    }
}
