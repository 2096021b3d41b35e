//! Snapshot transfer, the sending side: a partition replica's rows streamed as
//! [`SnapshotChunk`]s, table by table in [`TableId::ALL`] order, each chunk holding whole rows
//! of one table as their fixed-width Pod bytes, checksummed, and numbered from 0.
//!
//! Guarantees:
//! - the stream shows one state: the caller (the replica's executor thread) streams between
//!   two batches and executes nothing meanwhile;
//! - every chunk's rows fit in [`chunk_bytes_max`] for the frame limit (at least one row per
//!   chunk, whatever the limit);
//! - the last chunk carries [`SnapshotEnd::Complete`] with the number of chunks and rows sent
//!   and the state digest of the streamed state, so the receiver can prove it rebuilt the same
//!   state; a stream whose receiver went away stops at once.
//!
//! `glass check` and `glass dump` use it, and a rejoining lean replica copies a live peer's
//! state through it. A rejoining full-stack backup gets its primary's log base instead
//! ([`log_base_pieces`]): whole log records, each carrying its own checksum.
//!
//! What it builds are payloads ([`SnapshotChunk`], [`LogBaseChunk`]); the caller sends them on
//! the channel the request came on (a tool's or a peer node's, `wire::channel`).

use crate::replica::LogBase;
use engine::schema::{t, Table, TableId};
use engine::Storage;
use wire::codec::FRAME_HEADER_BYTES;
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

/// The one-piece answer refusing log base request `request_id`.
pub fn log_base_refusal(request_id: u64, partition: PartitionId, reason: &str) -> LogBaseChunk {
    LogBaseChunk {
        request_id,
        partition,
        seq: 0,
        fork_lsn: None,
        index: 0,
        records: Vec::new(),
        last: true,
        refused: Some(wire::messages::bounded_reason(reason.to_string())),
    }
}

/// A full-stack primary's log base for a rejoining backup, in pieces of at most `piece_max`
/// bytes (the last one marked).
pub fn log_base_pieces(base: &LogBase, request_id: u64, partition: PartitionId, piece_max: usize) -> Vec<LogBaseChunk> {
    let pieces: Vec<&[u8]> =
        if base.records.is_empty() { vec![&[][..]] } else { base.records.chunks(piece_max.max(1)).collect() };
    let n = pieces.len();
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, records)| LogBaseChunk {
            request_id,
            partition,
            seq: base.seq,
            fork_lsn: base.fork_lsn,
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

#[cfg(test)]
mod tests {
    use super::*;
    use engine::LeanDb;
    use wire::channel::{PeerReply, ToolReply};
    use wire::codec;

    /// Every chunk of a small partition's snapshot fits its frame, carries whole rows of one
    /// table with a valid checksum, and the stream ends with the totals.
    #[test]
    fn chunks_fit_the_frame_and_count_every_row() {
        let mut db = LeanDb::new();
        workload::loader::load_items(&mut db, 3).unwrap();
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

    #[test]
    fn a_receiver_going_away_stops_the_stream() {
        let mut db = LeanDb::new();
        workload::loader::load_items(&mut db, 3).unwrap();
        let mut sent = 0;
        let s = stream(&mut db, 1, 1, 0, StateDigest(0), 64 * 1024, &mut |_| {
            sent += 1;
            sent < 3
        });
        assert!(!s.complete);
        assert_eq!(sent, 3);
    }
}
