//! WAL shipping to a passive backup: the conventional systems' replication (the log-shipping
//! alternative of the paper's Section 5.3), built from the log manager and restart recovery.
//!
//! Owns: on the primary, switching the log's shipping tap and taking what it copied
//! ([`ConventionalDb::set_log_shipping`], [`ConventionalDb::take_shipped_log`]); on the
//! backup, validating a chunk of shipped records and applying it
//! ([`ConventionalDb::apply_shipped_log`]), and the backup's position in the primary's log.
//!
//! Guarantees:
//! - a chunk taken from the primary is a concatenation of whole, sealed records exactly as in
//!   its log (the layout in [`super::log`]), in LSN order, contiguous: the tap copies each
//!   record in the critical section that gives it its LSN, so a chunk never holds a torn
//!   record. Group commit (fsync) is unaffected; shipping is independent of flushing.
//! - a backup validates a whole chunk before applying any of it: every record's checksum and
//!   fields, LSN continuity (each record starts where the previous one ended, the first where
//!   the last chunk applied ended), and fit with the catalog. A damaged or truncated chunk
//!   ([`ConventionalError::ShipCorrupt`]), a duplicate or a gap
//!   ([`ConventionalError::ShipOutOfOrder`]) or a record that does not fit
//!   ([`ConventionalError::ShipUnfit`]) is refused with nothing applied.
//! - applying is restart recovery's redo pass, the same code (`ConventionalDb::redo_step`,
//!   `ConventionalDb::redo`), page-oriented: a heap record is placed, overwritten or freed at
//!   its record id, an index entry put into or removed from the leaf its record names, a page
//!   image installed over its page, a CLR does its action the same way; commit,
//!   end-of-rollback and checkpoint records apply nothing; pages are stamped with the
//!   primary's LSNs. Redo repeats history, rolled-back changes and their CLRs included, in log
//!   order, so applying chunk after chunk is applying their concatenation wherever the chunks
//!   were cut. A backup that started from the primary's state holds the primary's state
//!   (equal digests) once the records applied end where no transaction was active.
//! - a chunk is applied under the backup's checkpoint gate: no transaction of the backup runs
//!   meanwhile, and a backup checkpoint comes before or after a whole chunk.
//!
//! Where the data lives: the backup does not write the shipped records to its own log. The
//! standby's state is memory-resident and the primary's WAL is the durable copy of the
//! records. A checkpoint of the backup (at promotion, say) makes its state durable; its
//! snapshot LSN lies past every record applied, so the page LSNs the primary's records left
//! stay below the LSNs of the backup's own later records (see [`ConventionalDb::checkpoint`]).
//! The backup's position (the end LSN of the last record applied) is kept in memory: after
//! the backup is reopened, its first chunk is accepted at any LSN.
//!
//! What the records cannot show, and the caller ensures: the backup starts from the primary's
//! state at the first shipped record, page for page (the same single-session load and
//! checkpoint, or the primary's checkpoint image; shipping switched on before the first
//! transaction after it), since records are placed by record id and entries on the leaves
//! their records name; both use the same page size; the backup runs no write transactions of
//! its own. A chunk cut
//! at a record boundary is itself a valid chunk: what was cut off shows as a gap in the next.

use std::sync::{Mutex, MutexGuard};

use super::log::{decode, GenerationRead, Kind, Record, CHECKSUM_BYTES, HEADER_BYTES};
use super::medium::Medium;
use super::stats::Stats;
use super::{ConventionalDb, ConventionalError};

/// A backup's position in the primary's log.
#[derive(Debug, Default)]
pub(crate) struct Standby {
    state: Mutex<Position>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Position {
    /// End LSN of the last record applied: where the next chunk must start.
    applied_end: Option<u64>,
    /// Set when a record failed against the backup's rows: (its LSN, why).
    diverged: Option<(u64, &'static str)>,
}

impl Standby {
    fn lock(&self) -> MutexGuard<'_, Position> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// End LSN of the last shipped record applied (`None`: none applied since opening).
    pub fn applied_end(&self) -> Option<u64> {
        self.lock().applied_end
    }
}

/// What [`ConventionalDb::apply_shipped_log`] applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShipApplyReport {
    /// Records in the chunk.
    pub records: usize,
    /// Changes redone: updates, inserts, deletes and CLRs.
    pub changes: usize,
    /// Of `changes`, compensation log records (undo actions of rollbacks).
    pub compensations: usize,
    /// Commit records seen.
    pub commits: usize,
    /// End-of-rollback records seen.
    pub rollbacks: usize,
    /// Bytes in the chunk.
    pub bytes: usize,
    /// LSN of the chunk's first record (`None`: the chunk was empty).
    pub first_lsn: Option<u64>,
    /// The LSN the next chunk must start at (`None`: nothing applied yet).
    pub next_lsn: Option<u64>,
}

/// Decodes the record at byte `at` of a shipped chunk.
fn decode_at(bytes: &[u8], at: usize) -> Result<Record<'_>, ConventionalError> {
    let rest = &bytes[at..];
    let corrupt = |what| ConventionalError::ShipCorrupt { offset: at, what };
    if rest.len() < HEADER_BYTES + CHECKSUM_BYTES {
        return Err(corrupt("the chunk ends inside a record header (truncated)"));
    }
    let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
    if len > rest.len() {
        return Err(corrupt("the chunk ends inside a record (truncated, or its length is damaged)"));
    }
    decode(rest).ok_or_else(|| corrupt("the record fails its checksum or its fields"))
}

impl ConventionalDb {
    /// Switches the log's shipping tap (off when the database opens): while on, every record
    /// appended to the log is also copied into the shipping buffer that
    /// [`ConventionalDb::take_shipped_log`] empties. Switching off keeps what was copied for
    /// the next take. Refused when log records are switched off (there would be nothing to
    /// ship, and a backup would silently fall behind).
    pub fn set_log_shipping(&self, on: bool) -> Result<(), ConventionalError> {
        if on && !self.switches().log_records {
            return Err(ConventionalError::ShippingUnavailable { reason: "log records are switched off" });
        }
        self.log.set_shipping(on);
        Ok(())
    }

    /// Whether the shipping tap is on.
    pub fn log_shipping(&self) -> bool {
        self.log.shipping()
    }

    /// Returns and clears the records appended since the last take while the tap was on:
    /// whole sealed records, exactly as in the log, in LSN order (empty when shipping is off).
    /// Take after the transactions of a batch have finished to ship whole transactions; a
    /// chunk cut inside a transaction is still sound (redo repeats history).
    pub fn take_shipped_log(&self) -> Vec<u8> {
        self.log.take_shipped()
    }

    /// Bytes handed out by [`ConventionalDb::take_shipped_log`] since the database opened.
    pub fn log_bytes_shipped(&self) -> u64 {
        self.log.bytes_shipped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// [`ConventionalDb::take_shipped_log`], the records made durable first: a primary ships
    /// only what its own log holds on disk (as PostgreSQL's WAL sender sends only flushed
    /// WAL), so whatever a backup applied, the primary's log still has after a crash — the
    /// point a restarted primary cuts its log at to follow its promoted backup
    /// ([`cut_log`]). Costs an `fdatasync` only when records after the batch's last commit
    /// (a rollback's) are not durable yet.
    pub fn take_shipped_log_durable(&self) -> Result<Vec<u8>, ConventionalError> {
        let end = self.log.end();
        self.log
            .flush_to(end)
            .map_err(|e| ConventionalError::Io { what: "flush log", source: std::io::Error::other(e) })?;
        Ok(self.log.take_shipped())
    }

    /// On a primary, between transactions: the base a new backup starts from — this log
    /// generation from its first record (the last checkpoint's, whose snapshot the backup's
    /// state must equal) to its end, read later off the executor ([`GenerationRead`]) — with
    /// the shipping tap switched on in the same critical section, so the next
    /// [`ConventionalDb::take_shipped_log`] continues where the base ends. A promoted backup's generation starts at its promotion checkpoint; a primary
    /// that never was a backup's, at its load checkpoint.
    pub fn log_base_for_backup(&self) -> Result<GenerationRead, ConventionalError> {
        if !self.switches().log_records {
            return Err(ConventionalError::ShippingUnavailable { reason: "log records are switched off" });
        }
        let _quiet = self.txns.quiesce();
        self.log
            .generation_then_ship()
            .map_err(|e| ConventionalError::Io { what: "read the log generation", source: std::io::Error::other(e) })
    }

    /// On a backup: the LSN the next shipped chunk must start at (`None`: no chunk applied
    /// since the database opened, so the next one may start anywhere).
    pub fn shipped_log_position(&self) -> Option<u64> {
        self.standby.applied_end()
    }

    /// On a backup: applies a chunk of the primary's shipped log (see the module
    /// documentation): validates every record first, then redoes the changes in LSN order.
    /// Refused with nothing applied when the chunk is damaged, truncated, a duplicate, leaves
    /// a gap after the last chunk applied, or does not fit the catalog. A record that fails
    /// against the backup's rows ([`ConventionalError::ShipDiverged`]) leaves the records
    /// before it applied; the backup then refuses every later chunk. Waits for the backup's
    /// own transactions to finish (must not be called from a session inside a transaction).
    pub fn apply_shipped_log(&self, bytes: &[u8]) -> Result<ShipApplyReport, ConventionalError> {
        let _quiet = self.txns.quiesce();
        let mut pos = self.standby.lock();
        if let Some((lsn, what)) = pos.diverged {
            return Err(ConventionalError::ShipDiverged { lsn, what });
        }
        let mut report = ShipApplyReport { bytes: bytes.len(), next_lsn: pos.applied_end, ..Default::default() };
        let mut steps = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let r = decode_at(bytes, at)?;
            if let Some(expected) = report.next_lsn.filter(|&e| e != r.lsn) {
                return Err(ConventionalError::ShipOutOfOrder { expected, found: r.lsn });
            }
            report.first_lsn.get_or_insert(r.lsn);
            report.next_lsn = Some(r.lsn + r.len as u64);
            report.records += 1;
            match r.head.kind {
                Kind::Commit => report.commits += 1,
                Kind::Abort => report.rollbacks += 1,
                Kind::Clr => report.compensations += 1,
                _ => {}
            }
            if let Some(step) = self.redo_step(&r).map_err(|what| ConventionalError::ShipUnfit { lsn: r.lsn, what })? {
                steps.push(step);
            }
            at += r.len;
        }
        let stats = Stats::default();
        let applied = steps.iter().try_for_each(|step| {
            self.redo(step, &stats).map_err(|what| (step.lsn, what))?;
            report.changes += 1;
            Ok(())
        });
        self.counters.merge(&stats.take());
        // Even on failure, pages may carry LSNs up to the chunk's end: checkpoints stay past it.
        pos.applied_end = report.next_lsn;
        if let Err((lsn, what)) = applied {
            pos.diverged = Some((lsn, what));
            return Err(ConventionalError::ShipDiverged { lsn, what });
        }
        Ok(report)
    }
}

/// What [`cut_log`] did to a log before restart recovery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogCut {
    /// Records kept (the checkpoint record included).
    pub records_kept: usize,
    /// Records cut off the end.
    pub records_cut: usize,
    /// Bytes cut off the end.
    pub bytes_cut: u64,
}

/// Where [`cut_log`] cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutAt {
    /// At this LSN, which must end a record of the log (the end of what a promoted backup
    /// applied of this node's log: its "fork point").
    Lsn(u64),
    /// After the checkpoint record: the log must hold nothing else (a backup's log: it
    /// applies shipped records in memory and logs nothing).
    Checkpoint,
}

/// Before restart recovery of a database in `dir` whose process was a primary that failed
/// and was succeeded by its backup: [`cut_log_on`] with [`Medium::Dir`].
pub fn cut_log(dir: &std::path::Path, at: CutAt) -> Result<LogCut, ConventionalError> {
    cut_log_on(&Medium::Dir(dir.to_path_buf()), at)
}

/// Before restart recovery of a database on `medium` whose process was a primary that failed
/// and was succeeded by its backup: removes the records past `at` from the end of the
/// write-ahead log (overwriting them with zeros and syncing), so recovery rebuilds exactly the
/// state the successor started from — the records past it belong to transactions no client
/// was told committed (their batches were answered "outcome unknown" or re-executed by the
/// successor). Refused, changing nothing, when the log has no record ending at `at`, ends
/// before it, or (for [`CutAt::Checkpoint`]) holds records after its checkpoint. A directory
/// without a log gets an empty one (and the cut is refused: no record to cut at).
pub fn cut_log_on(medium: &Medium, at: CutAt) -> Result<LogCut, ConventionalError> {
    use super::log::{scan, zero_tail};
    let io = |what: &'static str| move |e: std::io::Error| ConventionalError::Io { what, source: e };
    let mut device = medium.log_device_for_cut().map_err(io("open log"))?;
    let found = scan(device.as_mut()).map_err(io("read log"))?;
    let Some(base) = found.base else {
        return Err(ConventionalError::Recovery { lsn: 0, what: "the log holds no record to cut at" });
    };
    let ends: Vec<u64> = found.records().map(|r| r.lsn + r.len as u64).collect();
    let keep = match at {
        CutAt::Lsn(lsn) => match ends.iter().position(|&e| e == lsn) {
            Some(i) => i + 1,
            // The log began after the fork (it was cut there before and restarted, when this
            // node first followed its successor) and holds nothing past its checkpoint: there
            // is nothing of the old lineage to cut. (Found by `glass sim --mode full-stack`: a
            // deposed primary that followed its successor once could never rejoin again.)
            None if lsn <= base && ends.len() <= 1 => ends.len(),
            None if lsn > base + found.bytes.len() as u64 => {
                return Err(ConventionalError::Recovery {
                    lsn,
                    what: "the log ends before the point to cut at: records the successor applied are missing",
                })
            }
            None => {
                return Err(ConventionalError::Recovery {
                    lsn,
                    what: "no record of the log ends at the point to cut at",
                })
            }
        },
        CutAt::Checkpoint if ends.len() <= 1 => ends.len(),
        CutAt::Checkpoint => {
            return Err(ConventionalError::Recovery {
                lsn: ends[0],
                what: "the log holds records after its checkpoint, which its primary never applied",
            })
        }
    };
    let offset = if keep == 0 { 0 } else { ends[keep - 1] - base };
    let cut =
        LogCut { records_kept: keep, records_cut: ends.len() - keep, bytes_cut: found.bytes.len() as u64 - offset };
    if cut.records_cut > 0 {
        let size = device.size().map_err(io("read log size"))?;
        zero_tail(device.as_mut(), offset, size).map_err(io("cut log"))?;
    }
    Ok(cut)
}
