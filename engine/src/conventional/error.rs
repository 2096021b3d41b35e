//! Errors of the conventional stack: configuration refusals, snapshot and log corruption found
//! at restart, shipped log chunks a backup refuses, and I/O. Expected outcomes are variants,
//! never strings. (Lives here rather than in the crate's `error.rs` because this module is
//! owned separately; it converts into [`crate::StorageError`] where the `Storage` trait
//! reports.)

use std::path::PathBuf;

use crate::error::StorageError;

/// What opening, configuring, checkpointing or recovering the conventional stack can report.
#[derive(Debug, thiserror::Error)]
pub enum ConventionalError {
    /// A switch that removes concurrency control (locking or latching) is only sound when one
    /// worker runs transactions (the paper's stripped Shore runs one transaction at a time).
    #[error("switch `{switch}` is only sound with one worker, but {workers} workers were configured")]
    UnsafeWithWorkers { switch: &'static str, workers: usize },
    /// A bounded buffer pool too small for its workers' fixes (see `Config::buffer_pool_bytes`).
    #[error(
        "a buffer pool of {bytes} bytes holds {frames} pages of {page_bytes} bytes; {workers} worker(s) need at \
         least {frames_min} frames ({per_worker} per worker)"
    )]
    BufferPoolTooSmall { bytes: u64, page_bytes: usize, frames: u64, workers: usize, frames_min: u64, per_worker: u64 },
    /// A configuration must allow at least one worker.
    #[error("a configuration needs at least one worker")]
    NoWorkers,
    /// More sessions than configured workers were requested at once.
    #[error("all {workers} configured worker sessions are open")]
    TooManySessions { workers: usize },
    /// A checkpoint needs the components it relies on (see `ConventionalDb::checkpoint`).
    #[error("checkpoint unavailable: {reason}")]
    CheckpointUnavailable { reason: &'static str },
    /// An image copy (`ConventionalDb::begin_image_copy`) cannot begin or go on: one is
    /// already under way, none is, or it was dropped while a step ran.
    #[error("image copy refused: {what}")]
    ImageCopy { what: &'static str },
    /// The image copy under way would have kept more than `kept_bytes_max` bytes of page
    /// before-images (pages changed before it sent them) and was given up; what it kept is
    /// dropped, and a new copy may begin.
    #[error("image copy given up: it would have kept more than {kept_bytes_max} bytes of page before-images")]
    ImageCopyOverBudget { kept_bytes_max: usize },
    /// The checkpoint snapshot is damaged or not a snapshot.
    #[error("checkpoint snapshot {path}: {what}")]
    BadSnapshot { path: PathBuf, what: &'static str },
    /// The snapshot was written with another page size (the page-size switch changed).
    #[error("checkpoint snapshot has {found}-byte pages, the configuration uses {configured}-byte pages")]
    PageSizeMismatch { found: usize, configured: usize },
    /// The log starts after the snapshot's LSN: records between them are missing.
    #[error("the log starts at LSN {log_start} but the snapshot is at LSN {snapshot}: records are missing")]
    LogGap { log_start: u64, snapshot: u64 },
    /// The checkpoint snapshot is missing although the log says a checkpoint was taken (the
    /// log's first record is a checkpoint record, or its generation starts past the first
    /// LSN): the log alone cannot rebuild the database. Nothing was changed.
    #[error(
        "checkpoint snapshot {path} is missing, but the write-ahead log starts from a checkpoint (log \
         generation at LSN {log_start}): the log alone cannot rebuild the database; nothing changed"
    )]
    MissingCheckpoint { path: PathBuf, log_start: u64 },
    /// The log file is missing although a checkpoint snapshot exists (every checkpoint
    /// leaves a log holding its checkpoint record): the committed transactions logged after
    /// the snapshot would be lost. Nothing was changed.
    #[error(
        "write-ahead log {path} is missing, but the checkpoint snapshot exists: the transactions committed \
         after the checkpoint would be lost; nothing changed"
    )]
    MissingLog { path: PathBuf },
    /// A record in the middle of the log fails its length, checksum or LSN test, yet valid
    /// records of the same log generation follow it: corruption, not a torn tail (a crash
    /// tears only the log's last write). Truncating would drop the records after it, so
    /// recovery refuses; nothing was changed.
    #[error(
        "write-ahead log {path} is corrupt at byte offset {offset} (the record expected there, LSN \
         {lsn_expected}, fails its length, checksum or LSN check), but {records_after} valid records of the \
         same log generation follow from offset {next_valid_offset} ({bytes_after} bytes, {commits_after} \
         commit records): this is damage, not a torn tail; recovery refused and nothing was changed"
    )]
    CorruptLog {
        path: PathBuf,
        offset: u64,
        lsn_expected: u64,
        next_valid_offset: u64,
        records_after: u64,
        commits_after: u64,
        bytes_after: u64,
    },
    /// A log record that passed its checksum cannot be applied (the log does not belong to
    /// this snapshot).
    #[error("recovery cannot apply the log record at LSN {lsn}: {what}")]
    Recovery { lsn: u64, what: &'static str },
    /// Log shipping needs log records (the tap copies them); this configuration has none.
    #[error("log shipping unavailable: {reason}")]
    ShippingUnavailable { reason: &'static str },
    /// A shipped log chunk is damaged: a record fails its checksum or its fields, or the chunk
    /// ends inside a record (truncated). Nothing of the chunk was applied.
    #[error("shipped log chunk damaged at byte {offset}: {what}; nothing applied")]
    ShipCorrupt { offset: usize, what: &'static str },
    /// A shipped log record is not the one the backup expects next: `found < expected` is a
    /// chunk (or record) already applied, a duplicate; `found > expected` means records are
    /// missing. Nothing of the chunk was applied.
    #[error(
        "shipped log record at LSN {found} where LSN {expected} was expected (a duplicate or a gap); nothing applied"
    )]
    ShipOutOfOrder { expected: u64, found: u64 },
    /// A shipped log record passed its checksum but cannot be applied to this database's
    /// catalog (no table, an action the table's organisation does not have, a wrong image
    /// width). Nothing of the chunk was applied.
    #[error("shipped log record at LSN {lsn} does not fit this database: {what}; nothing applied")]
    ShipUnfit { lsn: u64, what: &'static str },
    /// Applying a shipped log record failed against the backup's rows (the backup did not
    /// start from the primary's state): the records before it were applied, so the backup
    /// has diverged and refuses every later chunk; it must be rebuilt.
    #[error("backup diverged from the primary at LSN {lsn}: {what}")]
    ShipDiverged { lsn: u64, what: &'static str },
    /// The log device or a snapshot file failed.
    #[error("I/O error ({what}): {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl ConventionalError {
    pub(crate) fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> ConventionalError {
        move |source| ConventionalError::Io { what, source }
    }
}

impl From<ConventionalError> for StorageError {
    fn from(e: ConventionalError) -> StorageError {
        StorageError::Io(crate::error::IoFailure::Conventional(std::sync::Arc::new(e)))
    }
}
