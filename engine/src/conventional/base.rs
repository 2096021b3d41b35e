//! Where a rejoining backup of the conventional stack starts from (docs/design.md §10,
//! "A full-stack backup that rejoins"): its own write-ahead log, when that log reaches the
//! exact point its primary's log generation starts from, or else a *base backup* — the
//! primary's checkpoint snapshot, whose log generation then applies on top (as a PostgreSQL
//! standby falls back to `pg_basebackup` when the WAL it needs is gone).
//!
//! Owns: reading and validating a checkpoint image ([`ConventionalDb::checkpoint_image`],
//! [`image_lsn`]), the LSN a shipped log generation starts at ([`generation_start`]),
//! deciding whether a medium's own log, cut at a point, leaves exactly the state a primary's
//! generation starts from ([`follows_generation_on`]), and installing a checkpoint image on a
//! medium ([`install_image_on`]).
//!
//! Guarantees:
//! - a state is named by its *position* in the primary's log lineage: the LSN up to which
//!   the lineage's records are reflected. A checkpoint snapshot at LSN `c` is position `c`
//!   (its checkpoint record, which changes nothing, also leaves position `c + len`); a log
//!   cut at the end `x` of a record after its checkpoint is position `x`. A primary's log
//!   generation starts with its checkpoint record, at its snapshot's position. The load is
//!   deterministic, so every replica's load checkpoint has the same position, and a promoted
//!   backup's checkpoint lies exactly at the end of the failed primary's records it applied
//!   (its fork point, [`super::ConventionalDb::checkpoint`]).
//! - [`follows_generation_on`] reads and changes nothing but a missing log file (created
//!   empty, as [`super::cut_log_on`] does) and answers `true` only when the cut it is asked
//!   about would succeed and leave the generation's starting position. Anything else — a log
//!   that lags the fork point, records past a checkpoint its primary never applied, a
//!   generation that starts at a later checkpoint (a primary that recovered from its own log
//!   and checkpointed) — is `false`: the rejoin then needs the image.
//! - [`install_image_on`] accepts only a whole, checksummed image; it empties the medium and
//!   leaves it holding that checkpoint and a log generation of its checkpoint record alone,
//!   so restart recovery rebuilds exactly the image. A crash in the middle leaves a medium
//!   that recovery refuses (a checkpoint without its log, or the reverse), never a mixture:
//!   a backup's medium holds nothing of its own that a client was told committed (it applies
//!   its primary's records in memory, [`super::ship`]), and the next rejoin installs again.

use std::io::Write;

use xxhash_rust::xxh3::xxh3_64;

use super::log::{checkpoint_record, decode, scan, Kind};
use super::medium::{CheckpointStore, Medium};
use super::ship::CutAt;
use super::{ConventionalDb, ConventionalError, SNAPSHOT_MAGIC};

/// Bytes of a snapshot's header before its stores: magic, page size, store count, LSN.
const IMAGE_HEADER_BYTES: usize = 24;

/// Whatever an image names in errors (it travelled over a link; it has no path).
const IMAGE_NAME: &str = "<checkpoint image from the primary>";

fn bad_image(what: &'static str) -> ConventionalError {
    ConventionalError::BadSnapshot { path: IMAGE_NAME.into(), what }
}

/// The LSN of a checkpoint image (its position), after checking it is one: the snapshot
/// magic, a header, and the xxh3-64 of everything before its last 8 bytes.
pub fn image_lsn(image: &[u8]) -> Result<u64, ConventionalError> {
    if image.len() < IMAGE_HEADER_BYTES + 8 || &image[..8] != SNAPSHOT_MAGIC {
        return Err(bad_image("not a glass checkpoint snapshot"));
    }
    let (body, sum) = image.split_at(image.len() - 8);
    if xxh3_64(body) != u64::from_le_bytes(sum.try_into().expect("8 bytes")) {
        return Err(bad_image("checksum mismatch"));
    }
    Ok(u64::from_le_bytes(body[16..24].try_into().expect("8 bytes")))
}

/// The LSN a shipped log generation starts at: that of its first record, which must be a
/// whole, checksummed checkpoint record.
pub fn generation_start(records: &[u8]) -> Result<u64, ConventionalError> {
    let corrupt = |what| ConventionalError::ShipCorrupt { offset: 0, what };
    let r = decode(records).ok_or_else(|| corrupt("the log generation's first record fails its checksum"))?;
    if r.head.kind != Kind::Checkpoint {
        return Err(corrupt("the log generation does not start with a checkpoint record"));
    }
    Ok(r.lsn)
}

impl ConventionalDb {
    /// The current checkpoint snapshot's bytes (the image a rejoining backup installs),
    /// checked whole; refused when there is none.
    pub fn checkpoint_image(&self) -> Result<Vec<u8>, ConventionalError> {
        self.checkpoint_image_later().read()
    }

    /// The checkpoint snapshot, to be read later on another thread ([`ImageRead`]): costs
    /// the caller nothing, whatever the image's size.
    pub fn checkpoint_image_later(&self) -> ImageRead {
        ImageRead { store: self.checkpoint_store.reopen() }
    }
}

/// A database's checkpoint snapshot, read when asked through a handle of its own — off the
/// executor, for a rejoining backup's base (docs/design.md §10, "Copying without
/// stopping"). A primary replaces its checkpoint only when promoted, never while it serves a
/// base; the image read is checked whole, and the backup checks it starts where the log
/// generation it goes with does.
#[derive(Debug)]
pub struct ImageRead {
    store: Box<dyn CheckpointStore>,
}

impl ImageRead {
    /// The checkpoint's bytes, checked whole; refused when there is none.
    pub fn read(&self) -> Result<Vec<u8>, ConventionalError> {
        let path = self.store.path();
        let image = self.store.read()?.ok_or(ConventionalError::BadSnapshot { path, what: "missing" })?;
        image_lsn(&image)?;
        Ok(image)
    }
}

/// Whether the write-ahead log on `medium`, cut at `at`, would leave the state at position
/// `start` (see the module documentation): the state a primary's log generation starting at
/// `start` applies on top of. Changes nothing (a missing log file is created empty).
pub fn follows_generation_on(medium: &Medium, at: CutAt, start: u64) -> Result<bool, ConventionalError> {
    let io = |what: &'static str| move |e: std::io::Error| ConventionalError::Io { what, source: e };
    let mut device = medium.log_device_for_cut().map_err(io("open log"))?;
    let found = scan(device.as_mut()).map_err(io("read log"))?;
    let mut records = found.records();
    let Some(checkpoint) = records.next().filter(|r| r.head.kind == Kind::Checkpoint) else { return Ok(false) };
    let after: Vec<u64> = records.map(|r| r.lsn + r.len as u64).collect();
    // The positions the checkpoint alone leaves.
    let (c, c_end) = (checkpoint.lsn, checkpoint.lsn + checkpoint.len as u64);
    let at_checkpoint = start == c || start == c_end;
    Ok(match at {
        CutAt::Lsn(x) if x == c_end => at_checkpoint,
        CutAt::Lsn(x) if after.contains(&x) => start == x,
        // The log began after the fork (cut there and restarted once already): only its
        // checkpoint is left, as `cut_log_on` keeps it.
        CutAt::Lsn(x) => x <= c && after.is_empty() && at_checkpoint,
        CutAt::Checkpoint => after.is_empty() && at_checkpoint,
    })
}

/// Empties `medium` and installs `image` on it (see the module documentation): the
/// checkpoint, and a log generation holding its checkpoint record alone. Returns the
/// image's LSN. A damaged image is refused before anything is changed.
pub fn install_image_on(medium: &Medium, image: &[u8]) -> Result<u64, ConventionalError> {
    let lsn = image_lsn(image)?;
    medium.erase().map_err(ConventionalError::io("empty the medium"))?;
    let mut device = medium.log_device()?;
    let record = checkpoint_record(lsn);
    let io = ConventionalError::io;
    device.preallocate(record.len() as u64).map_err(io("preallocate log"))?;
    device.write_at(0, &record).map_err(io("write log"))?;
    device.sync_data().map_err(io("sync log"))?;
    let store = medium.checkpoint_store();
    store.prepare()?;
    store.replace(&mut |out: &mut dyn Write| out.write_all(image))?;
    Ok(lsn)
}
