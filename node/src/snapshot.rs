//! Snapshot and log-base transfer, both halves. The sending side: a partition replica's rows
//! streamed as [`SnapshotChunk`]s, table by table in [`TableId::ALL`] order, each chunk
//! holding whole rows of one table as their fixed-width Pod bytes, checksummed, and numbered
//! from 0 ([`stream`]); a full-stack primary's log base in pieces ([`log_base_pieces`]); the
//! refusals of either ([`refusal`], [`log_base_refusal`]). The receiving side, sans I/O:
//! [`SnapshotReceiver`] checks each chunk and rebuilds a copy in a lean database,
//! [`LogBaseReceiver`] checks and collects a log base's pieces; over a link,
//! [`snapshot_after`] (and [`snapshot_into`]) and [`log_base`] receive and hand them over.
//! The simulator runs the same receiver on the chunks it streams.
//!
//! A lean replica's copy is taken while it executes on ([`CopySender`], docs/design.md §10,
//! "Copying without stopping"): a copy-on-write snapshot of its state when the copy began,
//! streamed a slice at a time between batches. A full-stack replica's copy ([`stream`]) is
//! still taken whole between two batches.
//!
//! Guarantees:
//! - the stream shows one state, the source's after batch `seq` (every chunk's): [`stream`]'s
//!   caller executes nothing while it streams; a [`CopySender`] sends each row as it was when
//!   the copy began, whatever the batches executed since changed;
//! - every chunk's rows fit in [`chunk_bytes_max`] for the frame limit (at least one row per
//!   chunk, whatever the limit);
//! - the last chunk carries [`SnapshotEnd::Complete`] with the number of chunks and rows sent
//!   and the state digest of the streamed state, so the receiver can prove it rebuilt the same
//!   state; a stream whose receiver went away stops at once;
//! - a snapshot is accepted only whole: chunks numbered without gaps, every checksum and row
//!   size right, the totals of its end matching what arrived, and (no table skipped) the
//!   state digest of what was installed equal to the end's; a log base only in order (pieces
//!   numbered without gaps, one batch and fork point throughout). Anything else is a
//!   [`TransferError`].
//!
//! `glass check` and `glass dump` use it, and a rejoining lean replica copies a live peer's
//! state through it. A rejoining full-stack backup gets its primary's log base instead
//! ([`log_base_pieces`]): whole log records, each carrying its own checksum.
//!
//! What it builds are payloads ([`SnapshotChunk`], [`LogBaseChunk`]); the caller sends them on
//! the channel the request came on (a tool's or a peer node's, `wire::channel`).

use std::time::Duration;

use crate::error::{InsertError, SnapshotProblem, TransferError};
use crate::replica::LogBase;
use engine::schema::{t, Table, TableId};
use engine::{LeanDb, Storage};
use wire::channel::{PeerReply, PeerRequest, SnapshotChannel, ToolChannel};
use wire::codec::FRAME_HEADER_BYTES;
use wire::endpoint::{recv_matching, Link};
use wire::messages::{
    LogBaseChunk, PartitionId, Seq, SnapshotChunk, SnapshotEnd, StateDigest, SNAPSHOT_CHUNK_BYTES_MAX,
    SNAPSHOT_CHUNK_OVERHEAD_BYTES_MAX,
};

/// Bytes of rows one chunk may carry under a frame limit of `frame_bytes_max`.
pub fn chunk_bytes_max(frame_bytes_max: usize) -> usize {
    SNAPSHOT_CHUNK_BYTES_MAX.min(frame_bytes_max.saturating_sub(SNAPSHOT_CHUNK_OVERHEAD_BYTES_MAX + FRAME_HEADER_BYTES))
}

/// What [`stream`] sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Streamed {
    pub chunks: u32,
    pub rows: u64,
    pub bytes: u64,
    /// False when the receiver went away before the end.
    pub complete: bool,
}

/// Builds chunks and hands them to `send` (which returns false once the receiver is gone).
struct Writer<'a> {
    request_id: u64,
    partition: PartitionId,
    seq: Seq,
    bytes_max: usize,
    buf: Vec<u8>,
    buf_rows: u32,
    buf_table: TableId,
    index: u32,
    rows: u64,
    bytes: u64,
    alive: bool,
    send: &'a mut dyn FnMut(SnapshotChunk) -> bool,
}

impl Writer<'_> {
    fn chunk(&mut self, end: Option<SnapshotEnd>) -> SnapshotChunk {
        let rows_bytes = std::mem::take(&mut self.buf);
        let chunk = SnapshotChunk {
            request_id: self.request_id,
            partition: self.partition,
            seq: self.seq,
            index: self.index,
            table: self.buf_table as u8,
            rows: std::mem::take(&mut self.buf_rows),
            checksum: SnapshotChunk::checksum_of(&rows_bytes),
            rows_bytes,
            end,
        };
        self.index += 1;
        chunk
    }

    fn flush(&mut self) {
        if self.buf_rows == 0 || !self.alive {
            return;
        }
        let msg = self.chunk(None);
        self.alive = (self.send)(msg);
        self.buf = Vec::with_capacity(self.bytes_max);
    }

    fn table<S: Storage, T: Table>(&mut self, db: &mut S) {
        self.flush();
        self.buf_table = T::ID;
        let row_bytes = std::mem::size_of::<T::Row>();
        db.for_each::<T>(|row| {
            if !self.alive {
                return;
            }
            if self.buf_rows > 0 && self.buf.len() + row_bytes > self.bytes_max {
                self.flush();
            }
            self.buf.extend_from_slice(bytemuck::bytes_of(row));
            self.buf_rows += 1;
            self.rows += 1;
            self.bytes += row_bytes as u64;
        });
    }
}

/// Streams every row of `db` — the replica of `partition` after batch `seq` — to `send`, the
/// last chunk carrying [`SnapshotEnd::Complete`] with `digest` (the caller's state digest of
/// `db`, computed just before).
pub fn stream<S: Storage>(
    db: &mut S,
    request_id: u64,
    partition: PartitionId,
    seq: Seq,
    digest: StateDigest,
    frame_bytes_max: usize,
    send: &mut dyn FnMut(SnapshotChunk) -> bool,
) -> Streamed {
    let bytes_max = chunk_bytes_max(frame_bytes_max).max(1);
    let mut w = Writer {
        request_id,
        partition,
        seq,
        bytes_max,
        buf: Vec::with_capacity(bytes_max),
        buf_rows: 0,
        buf_table: TableId::Warehouse,
        index: 0,
        rows: 0,
        bytes: 0,
        alive: true,
        send,
    };
    for id in TableId::ALL {
        match id {
            TableId::Warehouse => w.table::<S, t::Warehouses>(db),
            TableId::District => w.table::<S, t::Districts>(db),
            TableId::Customer => w.table::<S, t::Customers>(db),
            TableId::History => w.table::<S, t::Histories>(db),
            TableId::Orders => w.table::<S, t::Orders>(db),
            TableId::NewOrder => w.table::<S, t::NewOrders>(db),
            TableId::OrderLine => w.table::<S, t::OrderLines>(db),
            TableId::Item => w.table::<S, t::Items>(db),
            TableId::Stock => w.table::<S, t::Stocks>(db),
        }
    }
    if w.alive {
        // The last chunk: the remaining rows of the last table (possibly none) and the end.
        let end = SnapshotEnd::Complete { chunks: w.index + 1, rows: w.rows, digest };
        let msg = w.chunk(Some(end));
        w.alive = (w.send)(msg);
    }
    Streamed { chunks: w.index, rows: w.rows, bytes: w.bytes, complete: w.alive }
}

/// Bytes of rows one step of a copy taken under load copies at most: small enough that a step
/// between two batches holds the next batch up by a fraction of a millisecond.
pub const COPY_STEP_BYTES_MAX: usize = 256 << 10;

/// The sending side of a copy of a lean replica taken while it executes on, sans I/O (docs/
/// design.md §10, "Copying without stopping"): the state when the copy began (after batch
/// `seq`), a slice of rows per [`CopySender::next`], which the executor calls between
/// transactions — after a batch, and while it has nothing else to do.
#[derive(Debug)]
pub struct CopySender {
    copy_id: u64,
    request_id: u64,
    partition: PartitionId,
    /// The copy shows the state after this batch.
    seq: Seq,
    bytes_max: usize,
    index: u32,
    rows: u64,
    bytes: u64,
    ended: bool,
}

/// A name for a new copy, unique within the process ([`CopySender::begin`]'s `copy_id`).
pub fn next_copy_id() -> u64 {
    static COPIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// What [`CopySender::next`] has for the receiver.
#[derive(Debug)]
pub enum CopyNext {
    /// A chunk to send (the last carries the end, or a refusal).
    Chunk(SnapshotChunk),
    /// The copy is over (its end was built).
    Over,
}

impl CopySender {
    /// Begins a copy of `db`, the replica of `partition` after batch `seq` (call between
    /// batches), named `copy_id` (unique to the caller); `None` when `db` is already being
    /// copied (one copy at a time: the caller defers the request).
    pub fn begin(
        db: &mut LeanDb,
        copy_id: u64,
        request_id: u64,
        partition: PartitionId,
        seq: Seq,
        frame_bytes_max: usize,
    ) -> Option<Self> {
        if !db.begin_copy(copy_id) {
            return None;
        }
        Some(CopySender {
            copy_id,
            request_id,
            partition,
            seq,
            bytes_max: chunk_bytes_max(frame_bytes_max).clamp(1, COPY_STEP_BYTES_MAX),
            index: 0,
            rows: 0,
            bytes: 0,
            ended: false,
        })
    }

    fn chunk(&mut self, table: u8, rows: u32, rows_bytes: Vec<u8>, end: Option<SnapshotEnd>) -> SnapshotChunk {
        let chunk = SnapshotChunk {
            request_id: self.request_id,
            partition: self.partition,
            seq: self.seq,
            index: self.index,
            table,
            rows,
            checksum: SnapshotChunk::checksum_of(&rows_bytes),
            rows_bytes,
            end,
        };
        self.index += 1;
        chunk
    }

    /// The next chunk of rows, then the end with the digest of the copied state; a refusal
    /// (and the copy dropped) when the copy keeps too many rows' images aside
    /// (`engine::lean::COPY_KEPT_BYTES_MAX`: its receiver is too slow for the source's
    /// changes).
    pub fn next(&mut self, db: &mut LeanDb) -> CopyNext {
        if self.ended {
            return CopyNext::Over;
        }
        if db.copy_over_budget() {
            db.abort_copy();
            self.ended = true;
            let why = format!(
                "the copy kept over {} bytes of rows changed under it: its receiver does not keep up",
                engine::lean::COPY_KEPT_BYTES_MAX
            );
            return CopyNext::Chunk(refusal(self.request_id, self.partition, why));
        }
        let mut out = Vec::with_capacity(self.bytes_max);
        match db.copy_step(self.bytes_max, &mut out) {
            engine::lean::CopyStep::Rows { table, rows } => {
                self.rows += u64::from(rows);
                self.bytes += out.len() as u64;
                CopyNext::Chunk(self.chunk(table as u8, rows, out, None))
            }
            engine::lean::CopyStep::Done => {
                let digest = StateDigest::from(db.finish_copy());
                self.ended = true;
                let end = SnapshotEnd::Complete { chunks: self.index + 1, rows: self.rows, digest };
                CopyNext::Chunk(self.chunk(0, 0, Vec::new(), Some(end)))
            }
        }
    }

    /// Whether `db` is the database this copy is of: still being copied, or this copy's end
    /// was built (it may still wait to be sent).
    pub fn is_copying(&self, db: &LeanDb) -> bool {
        self.ended || db.copy_id() == Some(self.copy_id)
    }

    /// The request this copy answers.
    pub fn request_id(&self) -> u64 {
        self.request_id
    }

    /// The batch the copy shows the state after.
    pub fn seq(&self) -> Seq {
        self.seq
    }

    /// Rows and bytes sent so far.
    pub fn sent(&self) -> (u64, u64) {
        (self.rows, self.bytes)
    }
}

/// A copy's whole stream when only its digest is wanted: the end alone, no rows.
pub fn digest_only(request_id: u64, partition: PartitionId, seq: Seq, digest: StateDigest) -> SnapshotChunk {
    SnapshotChunk {
        request_id,
        partition,
        seq,
        index: 0,
        table: 0,
        rows: 0,
        checksum: SnapshotChunk::checksum_of(&[]),
        rows_bytes: Vec::new(),
        end: Some(SnapshotEnd::Complete { chunks: 1, rows: 0, digest }),
    }
}

/// The one-piece answer refusing log base request `request_id`.
pub fn log_base_refusal(request_id: u64, partition: PartitionId, reason: &str) -> LogBaseChunk {
    LogBaseChunk {
        request_id,
        partition,
        seq: 0,
        fork_lsn: None,
        checkpoint_bytes: 0,
        index: 0,
        records: Vec::new(),
        last: true,
        refused: Some(wire::messages::bounded_reason(reason.to_string())),
    }
}

/// A full-stack primary's log base for a rejoining backup, in pieces of at most `piece_max`
/// bytes (the last one marked), headed by the primary's checkpoint image when the backup
/// asked for one (`image`: a base backup).
pub fn log_base_pieces(
    base: &LogBase,
    image: Option<&[u8]>,
    request_id: u64,
    partition: PartitionId,
    piece_max: usize,
) -> Vec<LogBaseChunk> {
    let image = image.unwrap_or_default();
    let whole: Vec<u8>;
    let stream: &[u8] = if image.is_empty() {
        &base.records
    } else {
        whole = [image, &base.records[..]].concat();
        &whole
    };
    let pieces: Vec<&[u8]> = if stream.is_empty() { vec![&[][..]] } else { stream.chunks(piece_max.max(1)).collect() };
    let n = pieces.len();
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, records)| LogBaseChunk {
            request_id,
            partition,
            seq: base.seq,
            fork_lsn: base.fork_lsn,
            checkpoint_bytes: image.len() as u64,
            index: i as u32,
            records: records.to_vec(),
            last: i + 1 == n,
            refused: None,
        })
        .collect()
}

/// The one-chunk stream refusing snapshot request `request_id`.
pub fn refusal(request_id: u64, partition: PartitionId, reason: String) -> SnapshotChunk {
    SnapshotChunk {
        request_id,
        partition,
        seq: 0,
        index: 0,
        table: 0,
        rows: 0,
        rows_bytes: Vec::new(),
        checksum: SnapshotChunk::checksum_of(&[]),
        end: Some(SnapshotEnd::Refused { reason: wire::messages::bounded_reason(reason) }),
    }
}

// --- The receiving side.

/// How long one chunk of a tool's copy may take to arrive, and how long a copy's source
/// waits for its receiver to take one (a rejoining partition's patience is its machine's:
/// `PartitionMachine::tick`).
pub const SNAPSHOT_CHUNK_TIMEOUT: Duration = Duration::from_secs(30);

/// What a snapshot transfer brought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub partition: PartitionId,
    /// The copy shows the replica after batch `seq`.
    pub seq: Seq,
    pub chunks: u32,
    pub rows: u64,
    pub bytes: u64,
    /// The replica's state digest of what it sent.
    pub digest: StateDigest,
    /// Rows per table, in [`TableId::ALL`] order.
    pub table_rows: [u64; 9],
}

/// Inserts `bytes` (whole rows of table `T`) into `db` as a bulk load.
fn insert_rows<T: Table>(db: &mut LeanDb, bytes: &[u8]) -> Result<(), InsertError> {
    let size = std::mem::size_of::<T::Row>();
    for row in bytes.chunks_exact(size) {
        let row: T::Row = bytemuck::pod_read_unaligned(row);
        db.insert::<T>(&row).map_err(|source| InsertError { table: T::ID, source })?;
    }
    Ok(())
}

/// Bytes of one row of `table` (its fixed-width Pod encoding).
pub fn row_size(table: TableId) -> usize {
    match table {
        TableId::Warehouse => std::mem::size_of::<<t::Warehouses as Table>::Row>(),
        TableId::District => std::mem::size_of::<<t::Districts as Table>::Row>(),
        TableId::Customer => std::mem::size_of::<<t::Customers as Table>::Row>(),
        TableId::History => std::mem::size_of::<<t::Histories as Table>::Row>(),
        TableId::Orders => std::mem::size_of::<<t::Orders as Table>::Row>(),
        TableId::NewOrder => std::mem::size_of::<<t::NewOrders as Table>::Row>(),
        TableId::OrderLine => std::mem::size_of::<<t::OrderLines as Table>::Row>(),
        TableId::Item => std::mem::size_of::<<t::Items as Table>::Row>(),
        TableId::Stock => std::mem::size_of::<<t::Stocks as Table>::Row>(),
    }
}

/// Inserts the rows of one snapshot chunk of `table` (fixed-width Pod rows, back to back).
pub fn insert_table(db: &mut LeanDb, table: TableId, bytes: &[u8]) -> Result<(), InsertError> {
    match table {
        TableId::Warehouse => insert_rows::<t::Warehouses>(db, bytes),
        TableId::District => insert_rows::<t::Districts>(db, bytes),
        TableId::Customer => insert_rows::<t::Customers>(db, bytes),
        TableId::History => insert_rows::<t::Histories>(db, bytes),
        TableId::Orders => insert_rows::<t::Orders>(db, bytes),
        TableId::NewOrder => insert_rows::<t::NewOrders>(db, bytes),
        TableId::OrderLine => insert_rows::<t::OrderLines>(db, bytes),
        TableId::Item => insert_rows::<t::Items>(db, bytes),
        TableId::Stock => insert_rows::<t::Stocks>(db, bytes),
    }
}

/// Streams a copy of `partition` from the node at the other end of `link` into `db`, leaving
/// out the tables in `skip` (their chunks are still checked). With nothing skipped and `db`
/// empty before, the digest recomputed here must equal the replica's.
pub async fn snapshot_into(
    link: &mut Link,
    partition: PartitionId,
    db: &mut LeanDb,
    skip: &[TableId],
) -> Result<SnapshotInfo, TransferError> {
    snapshot_after::<ToolChannel>(link, partition, 0, db, skip, SNAPSHOT_CHUNK_TIMEOUT, &|_| {}).await
}

/// What a full-stack primary's node sent for a rejoining backup: its log from its last
/// checkpoint to the end of batch `seq` (whole records, each checksummed), where its copy of
/// the requester's log ended, if it is a promoted backup, and its checkpoint image when asked
/// for (checked whole when installed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBaseReceived {
    pub seq: Seq,
    pub fork_lsn: Option<u64>,
    pub records: Vec<u8>,
    pub checkpoint: Option<Vec<u8>>,
}

/// Collects a log base from its pieces, checking each as it comes (sans I/O: the caller
/// receives the pieces, [`log_base`] over a link, and hands them to [`LogBaseReceiver::accept`]):
/// pieces numbered from 0 without gaps, all of the partition asked for, one batch, fork point
/// and image size throughout, the batch no earlier than the one asked for, an image when one
/// was asked for (and none otherwise), the stream at least as long as the image.
#[derive(Debug)]
pub struct LogBaseReceiver {
    partition: PartitionId,
    peer: String,
    after_seq: Seq,
    checkpoint: bool,
    next_index: u32,
    base: Option<(LogBaseReceived, u64)>,
    done: bool,
}

impl LogBaseReceiver {
    /// A receiver of `partition`'s log base as of batch `after_seq` or later from `peer` (its
    /// name in errors: "node 2"), headed by the checkpoint image if `checkpoint`.
    pub fn new(partition: PartitionId, peer: String, after_seq: Seq, checkpoint: bool) -> LogBaseReceiver {
        LogBaseReceiver { partition, peer, after_seq, checkpoint, next_index: 0, base: None, done: false }
    }

    fn bad(&self, problem: SnapshotProblem) -> TransferError {
        TransferError::Snapshot { partition: self.partition, peer: self.peer.clone(), problem }
    }

    /// Takes the next piece: the whole base once the last piece arrived, `None` before.
    pub fn accept(&mut self, piece: LogBaseChunk) -> Result<Option<LogBaseReceived>, TransferError> {
        if let Some(reason) = piece.refused {
            return Err(TransferError::Refused { peer: self.peer.clone(), reason });
        }
        if self.done || piece.partition != self.partition || piece.index != self.next_index {
            let problem = SnapshotProblem::PieceGap {
                expected: self.next_index,
                partition: self.partition,
                got: piece.index,
                got_partition: piece.partition,
            };
            return Err(self.bad(problem));
        }
        if (piece.checkpoint_bytes > 0) != self.checkpoint {
            return Err(self.bad(SnapshotProblem::ImageUnasked { asked: self.checkpoint, index: piece.index }));
        }
        let fresh = LogBaseReceived { seq: piece.seq, fork_lsn: piece.fork_lsn, records: Vec::new(), checkpoint: None };
        let (b, image_bytes) = self.base.get_or_insert((fresh, piece.checkpoint_bytes));
        if (b.seq, b.fork_lsn, *image_bytes) != (piece.seq, piece.fork_lsn, piece.checkpoint_bytes) {
            return Err(self.bad(SnapshotProblem::PieceChanged { index: piece.index }));
        }
        if b.seq < self.after_seq {
            let seq = b.seq;
            return Err(self.bad(SnapshotProblem::StaleBase { seq, after_seq: self.after_seq }));
        }
        b.records.extend_from_slice(&piece.records);
        self.next_index += 1;
        if piece.last {
            self.done = true;
            let (mut b, image_bytes) = self.base.take().expect("collected above");
            if image_bytes > 0 {
                let Some(records) = usize::try_from(image_bytes).ok().and_then(|n| b.records.get(n..)) else {
                    return Err(self.bad(SnapshotProblem::ImageTruncated { image_bytes, got: b.records.len() }));
                };
                let records = records.to_vec();
                b.records.truncate(image_bytes as usize);
                b.checkpoint = Some(std::mem::replace(&mut b.records, records));
            }
            return Ok(Some(b));
        }
        Ok(None)
    }
}

/// Asks the node at the other end of `link` (a full-stack primary's, dialled by a node: the
/// peer channel) for its log base as of batch `after_seq` or later, headed by its checkpoint
/// image if `checkpoint`, and collects the pieces ([`LogBaseReceiver`]), telling `progress`
/// the bytes of each. The records' own checksums are checked when applied, the image's when
/// installed. A piece that takes longer than `guard` fails the transfer (the rejoining
/// partition's machine abandons a silent fetch first: `PartitionMachine::tick`).
pub async fn log_base(
    link: &mut Link,
    partition: PartitionId,
    after_seq: Seq,
    checkpoint: bool,
    guard: Duration,
    progress: &dyn Fn(u64),
) -> Result<LogBaseReceived, TransferError> {
    let request_id = u64::from(partition) + 3_000;
    link.send(&PeerRequest::LogBaseRequest { request_id, partition, after_seq, checkpoint }).await?;
    let mut receiver = LogBaseReceiver::new(partition, link.peer_name(), after_seq, checkpoint);
    loop {
        let piece = recv_matching(link, "a log base piece", guard, |m| match m {
            PeerReply::LogBaseChunk(c) if c.request_id == request_id => Some(c),
            _ => None,
        })
        .await?;
        progress(piece.records.len() as u64);
        if let Some(base) = receiver.accept(piece)? {
            return Ok(base);
        }
    }
}

/// Rebuilds a snapshot in a lean database from its chunks, checking each as it comes (sans
/// I/O: the caller receives the chunks, [`snapshot_after`] over a link, and hands them to
/// [`SnapshotReceiver::accept`]): chunks of the partition asked for, numbered from 0 without
/// gaps, one batch throughout, every checksum and row size right, the totals of the end
/// matching what arrived, and — with no table skipped — the state digest recomputed over the
/// database at the end equal to the one the end carries (the database must have been empty
/// before: a copy installed is the state its source vouched for). The rows of the tables it
/// skips are checked, not inserted.
#[derive(Debug)]
pub struct SnapshotReceiver {
    peer: String,
    skip: Vec<TableId>,
    /// Whether the end's digest is checked against the database (no table skipped).
    verify_digest: bool,
    next_index: u32,
    info: SnapshotInfo,
    done: bool,
}

impl SnapshotReceiver {
    /// A receiver of a snapshot of `partition` from `peer` (its name in errors: "node 2").
    pub fn new(partition: PartitionId, peer: String) -> SnapshotReceiver {
        let info = SnapshotInfo {
            partition,
            seq: 0,
            chunks: 0,
            rows: 0,
            bytes: 0,
            digest: StateDigest(0),
            table_rows: [0; 9],
        };
        SnapshotReceiver { peer, skip: Vec::new(), verify_digest: true, next_index: 0, info, done: false }
    }

    /// This receiver, leaving out the rows of the tables in `skip`.
    /// (the end's digest then cannot be checked).
    pub fn skipping(mut self, skip: &[TableId]) -> SnapshotReceiver {
        self.skip = skip.to_vec();
        self.verify_digest &= skip.is_empty();
        self
    }

    /// This receiver, trusting the end's digest instead of recomputing it (the simulator's
    /// release builds, whose sources send no digest: their copies are compared at the end).
    pub fn trusting_digest(mut self) -> SnapshotReceiver {
        self.verify_digest = false;
        self
    }

    fn bad(&self, problem: SnapshotProblem) -> TransferError {
        TransferError::Snapshot { partition: self.info.partition, peer: self.peer.clone(), problem }
    }

    /// Checks `chunk` and inserts its rows into `db`: what the snapshot brought once its end
    /// arrived and its totals matched, `None` before.
    pub fn accept(&mut self, chunk: SnapshotChunk, db: &mut LeanDb) -> Result<Option<SnapshotInfo>, TransferError> {
        if let Some(SnapshotEnd::Refused { reason }) = chunk.end {
            return Err(TransferError::Refused { peer: self.peer.clone(), reason });
        }
        if self.done {
            return Err(self.bad(SnapshotProblem::AfterEnd { index: chunk.index }));
        }
        let index = chunk.index;
        if chunk.partition != self.info.partition {
            return Err(self.bad(SnapshotProblem::WrongPartition { index, got: chunk.partition }));
        }
        if index != self.next_index {
            return Err(self.bad(SnapshotProblem::ChunkGap { expected: self.next_index, got: index }));
        }
        if self.next_index == 0 {
            self.info.seq = chunk.seq;
        } else if chunk.seq != self.info.seq {
            return Err(self.bad(SnapshotProblem::BatchChanged { index, got: chunk.seq, stream: self.info.seq }));
        }
        if SnapshotChunk::checksum_of(&chunk.rows_bytes) != chunk.checksum {
            return Err(self.bad(SnapshotProblem::Checksum { index }));
        }
        let Some(&table) = TableId::ALL.get(usize::from(chunk.table)) else {
            return Err(self.bad(SnapshotProblem::UnknownTable { index, table: chunk.table }));
        };
        let row_bytes = row_size(table);
        if chunk.rows_bytes.len() != chunk.rows as usize * row_bytes {
            let (bytes, rows) = (chunk.rows_bytes.len(), chunk.rows);
            return Err(self.bad(SnapshotProblem::RowSize { index, bytes, rows, table, row_bytes }));
        }
        if !self.skip.contains(&table) {
            db.install_copy_rows(table, &chunk.rows_bytes)
                .map_err(|source| self.bad(SnapshotProblem::Insert(InsertError { table, source })))?;
        }
        let info = &mut self.info;
        info.rows += u64::from(chunk.rows);
        info.bytes += chunk.rows_bytes.len() as u64;
        info.table_rows[table as usize] += u64::from(chunk.rows);
        self.next_index += 1;
        let Some(SnapshotEnd::Complete { chunks, rows, digest }) = chunk.end else { return Ok(None) };
        if chunks != self.next_index || rows != self.info.rows {
            let problem =
                SnapshotProblem::Totals { chunks, rows, got_chunks: self.next_index, got_rows: self.info.rows };
            return Err(self.bad(problem));
        }
        if self.verify_digest {
            let got = StateDigest::from(engine::digest::digest(db));
            if got != digest {
                return Err(self.bad(SnapshotProblem::Digest { claimed: digest, got }));
            }
        }
        self.done = true;
        self.info.chunks = chunks;
        self.info.digest = digest;
        Ok(Some(self.info.clone()))
    }
}

/// [`snapshot_into`] of the replica's state after batch `after_seq` or later (what a
/// rejoining node asks for), on channel `C` (a tool's, or a node's: [`SnapshotChannel`]),
/// telling `progress` the bytes of each chunk. A chunk that takes longer than `guard` fails
/// the transfer (a rejoining partition's machine abandons a silent fetch first).
#[allow(clippy::too_many_arguments)]
pub async fn snapshot_after<C: SnapshotChannel>(
    link: &mut Link,
    partition: PartitionId,
    after_seq: Seq,
    db: &mut LeanDb,
    skip: &[TableId],
    guard: Duration,
    progress: &dyn Fn(u64),
) -> Result<SnapshotInfo, TransferError> {
    let request_id = u64::from(partition) + 2_000;
    link.send(&C::snapshot_request(request_id, partition, after_seq)).await?;
    let mut receiver = SnapshotReceiver::new(partition, link.peer_name()).skipping(skip);
    loop {
        let chunk: SnapshotChunk = recv_matching(link, "a snapshot chunk", guard, |m: C::Reply| {
            C::snapshot_chunk(m).filter(|c| c.request_id == request_id)
        })
        .await?;
        progress(chunk.rows_bytes.len() as u64);
        if let Some(info) = receiver.accept(chunk, db)? {
            return Ok(info);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::{LeanDb, Storage};
    use wire::channel::{PeerReply, ToolReply};
    use wire::codec;

    /// Every chunk of a small partition's snapshot fits its frame, carries whole rows of one
    /// table with a valid checksum, and the stream ends with the totals.
    #[test]
    fn chunks_fit_the_frame_and_count_every_row() {
        let mut db = LeanDb::new();
        engine::loader::load_items(&mut db, 3).unwrap();
        let digest = StateDigest::from(engine::digest::digest(&mut db));
        let frame_bytes_max = 64 * 1024;
        let mut got = Vec::new();
        let s = stream(&mut db, 9, 1, 4, digest, frame_bytes_max, &mut |m| {
            got.push(m);
            true
        });
        assert!(s.complete);
        assert_eq!(s.rows, 100_000);
        assert_eq!(got.len() as u32, s.chunks);
        let mut rows = 0u64;
        for (i, c) in got.iter().enumerate() {
            // The larger of the two channels' frames carrying it.
            let frame = codec::encode(&ToolReply::SnapshotChunk(c.clone()), frame_bytes_max)
                .expect("every chunk fits the frame limit");
            assert!(frame.len() <= frame_bytes_max);
            let peer = codec::encode(&PeerReply::SnapshotChunk(c.clone()), frame_bytes_max).unwrap();
            assert_eq!(peer.len(), frame.len());
            assert_eq!((c.index as usize, c.request_id, c.partition, c.seq), (i, 9, 1, 4));
            assert_eq!(c.checksum, SnapshotChunk::checksum_of(&c.rows_bytes));
            if c.rows > 0 {
                assert_eq!(c.table, TableId::Item as u8);
                assert_eq!(c.rows_bytes.len(), c.rows as usize * std::mem::size_of::<engine::schema::Item>());
            }
            rows += u64::from(c.rows);
            assert_eq!(c.end.is_some(), i + 1 == got.len());
        }
        assert_eq!(rows, 100_000);
        let last = got.last().unwrap();
        assert_eq!(last.end, Some(SnapshotEnd::Complete { chunks: s.chunks, rows: 100_000, digest }));
    }

    /// The chunks of a small partition's snapshot (ITEM only), and its digest.
    fn items_stream() -> (Vec<SnapshotChunk>, StateDigest) {
        let mut db = LeanDb::new();
        engine::loader::load_items(&mut db, 3).unwrap();
        let digest = StateDigest::from(engine::digest::digest(&mut db));
        let mut got = Vec::new();
        stream(&mut db, 9, 1, 4, digest, 64 * 1024, &mut |m| {
            got.push(m);
            true
        });
        assert!(got.len() > 2);
        (got, digest)
    }

    /// Feeds `chunks` to a fresh receiver until it finishes or fails.
    fn receive(chunks: Vec<SnapshotChunk>, db: &mut LeanDb) -> Result<Option<SnapshotInfo>, TransferError> {
        let mut r = SnapshotReceiver::new(1, "node 2".to_string());
        for c in chunks {
            if let Some(info) = r.accept(c, db)? {
                return Ok(Some(info));
            }
        }
        Ok(None)
    }

    fn problem(e: TransferError) -> SnapshotProblem {
        match e {
            TransferError::Snapshot { partition: 1, peer, problem } if peer == "node 2" => problem,
            other => panic!("not a broken snapshot: {other}"),
        }
    }

    #[test]
    fn a_whole_stream_rebuilds_the_state() {
        let (chunks, digest) = items_stream();
        let n = chunks.len() as u32;
        let mut db = LeanDb::new();
        let info = receive(chunks, &mut db).unwrap().expect("the end arrived");
        assert_eq!((info.partition, info.seq, info.chunks, info.rows, info.digest), (1, 4, n, 100_000, digest));
        assert_eq!(info.table_rows[TableId::Item as usize], 100_000);
        assert_eq!(StateDigest::from(engine::digest::digest(&mut db)), digest);
    }

    #[test]
    fn a_gap_is_refused() {
        let (mut chunks, _) = items_stream();
        chunks.remove(1);
        let e = receive(chunks, &mut LeanDb::new()).unwrap_err();
        assert_eq!(problem(e), SnapshotProblem::ChunkGap { expected: 1, got: 2 });
    }

    #[test]
    fn a_bad_checksum_is_refused() {
        let (mut chunks, _) = items_stream();
        chunks[1].rows_bytes[0] ^= 1;
        let e = receive(chunks, &mut LeanDb::new()).unwrap_err();
        assert_eq!(problem(e), SnapshotProblem::Checksum { index: 1 });
        assert_eq!(
            TransferError::Snapshot {
                partition: 1,
                peer: "node 2".into(),
                problem: SnapshotProblem::Checksum { index: 1 }
            }
            .to_string(),
            "snapshot of partition 1 from node 2: chunk 1: checksum mismatch"
        );
    }

    #[test]
    fn a_wrong_total_is_refused() {
        let (mut chunks, digest) = items_stream();
        let n = chunks.len() as u32;
        chunks.last_mut().unwrap().end = Some(SnapshotEnd::Complete { chunks: n, rows: 99_999, digest });
        let e = receive(chunks, &mut LeanDb::new()).unwrap_err();
        assert_eq!(problem(e), SnapshotProblem::Totals { chunks: n, rows: 99_999, got_chunks: n, got_rows: 100_000 });
    }

    #[test]
    fn a_refusal_and_a_chunk_after_the_end_are_errors() {
        let mut r = SnapshotReceiver::new(1, "node 2".to_string());
        let e = r.accept(refusal(9, 1, "busy".into()), &mut LeanDb::new()).unwrap_err();
        assert!(matches!(e, TransferError::Refused { reason, .. } if reason == "busy"));
        let (chunks, _) = items_stream();
        let extra = chunks[0].clone();
        let mut db = LeanDb::new();
        let mut r = SnapshotReceiver::new(1, "node 2".to_string());
        for c in chunks {
            r.accept(c, &mut db).unwrap();
        }
        assert_eq!(problem(r.accept(extra, &mut db).unwrap_err()), SnapshotProblem::AfterEnd { index: 0 });
    }

    #[test]
    fn a_log_base_is_collected_in_order() {
        let base = LogBase { seq: 7, fork_lsn: Some(3), records: std::sync::Arc::new((0..=255u8).collect()) };
        let pieces = log_base_pieces(&base, None, 5, 1, 100);
        assert_eq!(pieces.len(), 3);
        let mut r = LogBaseReceiver::new(1, "node 2".to_string(), 6, false);
        assert_eq!(r.accept(pieces[0].clone()).unwrap(), None);
        assert_eq!(r.accept(pieces[1].clone()).unwrap(), None);
        let got = r.accept(pieces[2].clone()).unwrap().expect("the last piece");
        assert_eq!((got.seq, got.fork_lsn, &got.records, got.checkpoint), (7, Some(3), &*base.records, None));

        let mut r = LogBaseReceiver::new(1, "node 2".to_string(), 6, false);
        let e = r.accept(pieces[1].clone()).unwrap_err();
        assert_eq!(problem(e), SnapshotProblem::PieceGap { expected: 0, partition: 1, got: 1, got_partition: 1 });
        let mut r = LogBaseReceiver::new(1, "node 2".to_string(), 8, false);
        let e = r.accept(pieces[0].clone()).unwrap_err();
        assert_eq!(problem(e), SnapshotProblem::StaleBase { seq: 7, after_seq: 8 });
        let mut r = LogBaseReceiver::new(1, "node 2".to_string(), 6, true);
        let e = r.accept(pieces[0].clone()).unwrap_err();
        assert_eq!(problem(e), SnapshotProblem::ImageUnasked { asked: true, index: 0 });
    }

    /// docs/design.md §10, the base backup: the checkpoint image heads the stream, its size in
    /// every piece; the receiver splits image and log records apart again, and refuses a
    /// stream that ends inside the image.
    #[test]
    fn a_base_backup_splits_into_the_image_and_the_log_base() {
        let base = LogBase { seq: 7, fork_lsn: None, records: std::sync::Arc::new((0..=99u8).collect()) };
        let image: Vec<u8> = (0..150u32).map(|i| (i * 7) as u8).collect();
        let pieces = log_base_pieces(&base, Some(&image), 5, 1, 64);
        assert_eq!(pieces.len(), 4, "250 bytes in pieces of 64");
        assert!(pieces.iter().all(|p| p.checkpoint_bytes == 150));
        let mut r = LogBaseReceiver::new(1, "node 2".to_string(), 6, true);
        let got = pieces.iter().find_map(|p| r.accept(p.clone()).unwrap()).expect("the last piece");
        assert_eq!((got.checkpoint.as_deref(), &got.records), (Some(&image[..]), &*base.records));

        let mut short = pieces[0].clone();
        short.last = true;
        let mut r = LogBaseReceiver::new(1, "node 2".to_string(), 6, true);
        let e = r.accept(short).unwrap_err();
        assert_eq!(problem(e), SnapshotProblem::ImageTruncated { image_bytes: 150, got: 64 });
        let mut r = LogBaseReceiver::new(1, "node 2".to_string(), 6, false);
        let e = r.accept(pieces[0].clone()).unwrap_err();
        assert_eq!(problem(e), SnapshotProblem::ImageUnasked { asked: false, index: 0 });
    }

    /// A few transactions on a small partition: ITEM prices updated, NEW-ORDER rows inserted
    /// and deleted, HISTORY rows appended.
    fn churn(db: &mut LeanDb, round: u32) {
        use bytemuck::Zeroable;
        use engine::schema::{keys, t, History, NewOrder};
        for k in 0..20u32 {
            let ts = u64::from(round * 100 + k);
            db.begin(ts);
            let item = u64::from(1 + (round * 37 + k * 13) % 1000);
            db.update::<t::Items, _>(item, |r| r.i_price += 1).unwrap();
            let o = round * 20 + k;
            db.insert::<t::NewOrders>(&NewOrder { no_o_id: o, no_w_id: 1, no_d_id: 1, _pad: 0 }).unwrap();
            if o >= 7 {
                db.delete::<t::NewOrders>(keys::new_order(1, 1, o - 7)).unwrap();
            }
            db.insert::<t::Histories>(&History { h_amount: i64::from(o), ..History::zeroed() }).unwrap();
            db.commit().unwrap();
        }
    }

    /// docs/design.md §10, "Copying without stopping": chunks taken between transactions
    /// that change rows; the receiver rebuilds the source's state when the copy began and
    /// verifies the digest the source summed along the copy.
    #[test]
    fn a_copy_taken_while_executing_rebuilds_the_state_at_its_beginning() {
        let mut db = LeanDb::new();
        engine::loader::load_items(&mut db, 3).unwrap();
        churn(&mut db, 0);
        let at_beginning = StateDigest::from(engine::digest::digest(&mut db));
        let mut sender = CopySender::begin(&mut db, 7, 9, 1, 4, 64 * 1024).expect("no copy under way");
        assert!(CopySender::begin(&mut db, 8, 9, 1, 4, 64 * 1024).is_none(), "one copy at a time");
        let mut receiver = SnapshotReceiver::new(1, "node 2".to_string());
        let mut copy = LeanDb::new();
        let mut round = 1;
        let info = loop {
            churn(&mut db, round);
            round += 1;
            let CopyNext::Chunk(chunk) = sender.next(&mut db) else { panic!("over before its end") };
            assert_eq!(chunk.seq, 4);
            if let Some(info) = receiver.accept(chunk, &mut copy).unwrap() {
                break info;
            }
        };
        assert!(matches!(sender.next(&mut db), CopyNext::Over));
        assert_eq!((info.seq, info.digest), (4, at_beginning));
        assert_eq!(StateDigest::from(engine::digest::digest(&mut copy)), at_beginning);
        assert_ne!(StateDigest::from(engine::digest::digest(&mut db)), at_beginning, "the source went on");
    }

    #[test]
    fn a_receiver_going_away_stops_the_stream() {
        let mut db = LeanDb::new();
        engine::loader::load_items(&mut db, 3).unwrap();
        let mut sent = 0;
        let s = stream(&mut db, 1, 1, 0, StateDigest(0), 64 * 1024, &mut |_| {
            sent += 1;
            sent < 3
        });
        assert!(!s.complete);
        assert_eq!(sent, 3);
    }
}
