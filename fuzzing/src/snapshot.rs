//! Target `snapshot_install`: a snapshot chunk stream, as a hostile or broken peer node could
//! send it, received the way a rejoining lean replica receives it (docs/design.md §13,
//! "Fuzzing"; the transfer itself: `node::snapshot`).
//!
//! Input: one flags byte, then the bytes of the peer link — frames of
//! `wire::channel::PeerReply` (`wire::codec`). Frames are decoded one after the other; a
//! codec error ends the input (the node closes the connection), as does its end; replies other
//! than a `SnapshotChunk` of this request are skipped (`wire::endpoint::recv_matching`); every
//! chunk goes to a `node::snapshot::SnapshotReceiver` of partition [`PARTITION`] installing into
//! a fresh `engine::LeanDb`, until it refuses or reports the snapshot complete. Flags bit 0
//! reseals every chunk's checksum before it is handed over: the checksum is no keyed MAC, a
//! hostile peer computes it, so with the bit set mutated rows reach the database.
//!
//! Properties (a panic is a finding):
//! - nothing panics, hangs or allocates beyond a small multiple of the input (the codec's
//!   frame-bounded decoding, the receiver's per-chunk checks);
//! - every refusal is typed: `TransferError::Snapshot` of this partition and peer, or
//!   `TransferError::Refused` — never another variant;
//! - a snapshot reported complete installed exactly the rows the accepted chunks carried (of
//!   a hash table's key sent more than once, the last: a copy rescans a hash table whose rows
//!   came or went under its scan)
//!   (per table: the same row count and the same multiset of rows, compared through the
//!   state digest's per-table accumulators, `engine::digest`), its figures (`SnapshotInfo`:
//!   partition, chunks, rows, bytes, rows per table) are those of the accepted chunks, and the
//!   installed database's state digest is the one its end (`SnapshotEnd::Complete`) claims —
//!   the replica a rejoin installs is the state its source vouched for (docs/design.md §4's
//!   "a copy has the state digest of its source"; TPC-C clause 3.5's durability needs the
//!   replica to hold what was committed, no other state).
//!
//! The seeds are the real encoded streams of small lean databases: the rows of a TPC-C
//! database at `engine::loader::Scale::tiny()` (one warehouse), split into consecutive parts
//! that each fit `max_len`, every part streamed by `node::snapshot::stream` (as a node serves
//! a snapshot request) in chunks of at most [`SEED_CHUNK_BYTES`]; a refusal; and one stream
//! with the reseal flag. Their copies' digests equal their sources' (a unit test).

use std::sync::OnceLock;

use engine::schema::TableId;
use engine::LeanDb;
use node::snapshot::{SnapshotInfo, SnapshotReceiver};
use node::TransferError;
use wire::channel::PeerReply;
use wire::codec;
use wire::messages::{PartitionId, SnapshotChunk, StateDigest, REASON_BYTES_MAX, SNAPSHOT_CHUNK_OVERHEAD_BYTES_MAX};

/// The partition the receiver asks for.
pub const PARTITION: PartitionId = 1;
/// The request id `node::snapshot::snapshot_after` uses for [`PARTITION`].
pub const REQUEST_ID: u64 = PARTITION as u64 + 2_000;
/// The peer's name in errors.
const PEER: &str = "node 2";
/// The frame limit of the decoding (the default `limits.frame_bytes_max` is larger than any
/// input).
const FRAME_BYTES_MAX: usize = codec::FRAME_BYTES_MAX_DEFAULT;
/// Flags bit 0: reseal every chunk's checksum.
pub const RESEAL: u8 = 1;
/// Row bytes per chunk of the seeds (several chunks per table).
pub const SEED_CHUNK_BYTES: usize = 16 << 10;
/// Row bytes of one seed's source database at most (its frames then fit `max_len`).
const SEED_ROW_BYTES: usize = 200 << 10;

/// The per-table accumulators of the state digest (`engine::digest::TableDigest`) of
/// `rows_bytes`, whole rows of `table`.
fn add_rows(acc: &mut engine::digest::TableDigest, table: TableId, rows_bytes: &[u8], row_bytes: usize) {
    let mut buf = Vec::with_capacity(1 + row_bytes);
    for row in rows_bytes.chunks_exact(row_bytes) {
        buf.clear();
        buf.push(table as u8);
        buf.extend_from_slice(row);
        acc.sum = acc.sum.wrapping_add(xxhash_rust::xxh3::xxh3_128(&buf));
        acc.rows += 1;
    }
}

/// The primary key of a row of `table` if the table is a hash table: a copy's rows of one may
/// come again (a rescan), the later replacing the earlier (docs/design.md §10, "Copying
/// without stopping").
fn hash_key(table: TableId, row: &[u8]) -> Option<u64> {
    use engine::schema::{t, Table};
    fn key<T: Table>(row: &[u8]) -> u64 {
        T::key(&bytemuck::pod_read_unaligned::<T::Row>(row))
    }
    Some(match table {
        TableId::Warehouse => key::<t::Warehouses>(row),
        TableId::District => key::<t::Districts>(row),
        TableId::Customer => key::<t::Customers>(row),
        TableId::Item => key::<t::Items>(row),
        TableId::Stock => key::<t::Stocks>(row),
        TableId::History | TableId::Orders | TableId::NewOrder | TableId::OrderLine => return None,
    })
}

/// The property check; see the module documentation.
pub fn check(data: &[u8]) {
    let Some((&flags, mut rest)) = data.split_first() else { return };
    let mut db = LeanDb::new();
    let mut receiver = SnapshotReceiver::new(PARTITION, PEER.to_string());
    // What the accepted chunks carried: every row counted, and the rows a receiver keeps —
    // each hash-table key's last row, every other table's rows.
    let mut sent = [engine::digest::TableDigest::default(); 9];
    let mut kept = [engine::digest::TableDigest::default(); 9];
    let mut last: std::collections::BTreeMap<(u8, u64), Vec<u8>> = std::collections::BTreeMap::new();
    let (mut chunks, mut bytes) = (0u32, 0u64);
    loop {
        let Ok((reply, used)) = codec::decode::<PeerReply>(rest, FRAME_BYTES_MAX) else { return };
        assert!(used > 0 && used <= rest.len(), "the codec consumed {used} of {} bytes", rest.len());
        rest = &rest[used..];
        let PeerReply::SnapshotChunk(mut chunk) = reply else { continue };
        if chunk.request_id != REQUEST_ID {
            continue;
        }
        if flags & RESEAL != 0 {
            chunk.checksum = SnapshotChunk::checksum_of(&chunk.rows_bytes);
        }
        let table = TableId::ALL.get(usize::from(chunk.table)).copied();
        let rows_bytes = chunk.rows_bytes.clone();
        match receiver.accept(chunk, &mut db) {
            Err(e) => return refused(e),
            Ok(done) => {
                // Accepted: a known table and whole rows of it.
                let table = table.expect("an accepted chunk names a table of the schema");
                let row_bytes = node::snapshot::row_size(table);
                assert_eq!(rows_bytes.len() % row_bytes, 0, "an accepted chunk holds whole rows");
                add_rows(&mut sent[table as usize], table, &rows_bytes, row_bytes);
                for row in rows_bytes.chunks_exact(row_bytes) {
                    match hash_key(table, row) {
                        Some(k) => drop(last.insert((table as u8, k), row.to_vec())),
                        None => add_rows(&mut kept[table as usize], table, row, row_bytes),
                    }
                }
                chunks += 1;
                bytes += rows_bytes.len() as u64;
                if let Some(info) = done {
                    for ((table, _), row) in &last {
                        let table = TableId::ALL[usize::from(*table)];
                        add_rows(&mut kept[table as usize], table, row, row.len());
                    }
                    return complete(&info, &mut db, &sent, &kept, chunks, bytes);
                }
            }
        }
    }
}

/// A refusal must be typed and name this transfer.
fn refused(e: TransferError) {
    match e {
        TransferError::Snapshot { partition, peer, .. } => {
            assert_eq!((partition, peer.as_str()), (PARTITION, PEER), "a refusal names the transfer")
        }
        TransferError::Refused { peer, reason } => {
            assert_eq!(peer, PEER);
            assert!(reason.len() <= REASON_BYTES_MAX, "a reason of {} bytes", reason.len());
        }
        other => panic!("a snapshot stream refused with an untyped error: {other}"),
    }
}

/// A complete snapshot: what was installed is what was sent, and what its end claims.
fn complete(
    info: &SnapshotInfo,
    db: &mut LeanDb,
    sent: &[engine::digest::TableDigest; 9],
    kept: &[engine::digest::TableDigest; 9],
    chunks: u32,
    bytes: u64,
) {
    let rows: u64 = sent.iter().map(|t| t.rows).sum();
    assert_eq!(
        (info.partition, info.chunks, info.rows, info.bytes),
        (PARTITION, chunks, rows, bytes),
        "the snapshot's figures are the accepted chunks'"
    );
    let table_rows: Vec<u64> = sent.iter().map(|t| t.rows).collect();
    assert_eq!(info.table_rows.to_vec(), table_rows, "rows per table");
    let installed = engine::digest::table_digests(db);
    assert_eq!(&installed, kept, "the installed rows are exactly the rows the stream carried (a hash table's last)");
    let digest = StateDigest::from(engine::digest::digest(db));
    assert_eq!(digest, info.digest, "a complete snapshot installed a state other than the one its end claims");
}

/// The tiny TPC-C database the seeds stream, loaded once.
fn source() -> &'static [SnapshotChunk] {
    static CHUNKS: OnceLock<Vec<SnapshotChunk>> = OnceLock::new();
    CHUNKS.get_or_init(|| {
        let mut db = LeanDb::new();
        let scale = engine::loader::Scale::tiny();
        engine::loader::load_database_scaled(&mut db, 1..=1, 7, scale, &mut |_| {}).expect("the tiny load");
        let mut chunks = Vec::new();
        let frame = SEED_CHUNK_BYTES + SNAPSHOT_CHUNK_OVERHEAD_BYTES_MAX + codec::FRAME_HEADER_BYTES;
        node::snapshot::stream(&mut db, 0, PARTITION, 0, StateDigest(0), frame, &mut |c| {
            chunks.push(c);
            true
        });
        chunks
    })
}

/// The source databases of the seeds: consecutive runs of the tiny database's chunks, each at
/// most [`SEED_ROW_BYTES`] of rows, installed in a lean database.
pub fn seed_sources() -> Vec<LeanDb> {
    let mut out = Vec::new();
    let mut db = LeanDb::new();
    let mut held = 0;
    for c in source().iter().filter(|c| c.rows > 0) {
        if held > 0 && held + c.rows_bytes.len() > SEED_ROW_BYTES {
            out.push(std::mem::take(&mut db));
            held = 0;
        }
        let table = TableId::ALL[usize::from(c.table)];
        node::snapshot::insert_table(&mut db, table, &c.rows_bytes).expect("rows of a real database");
        held += c.rows_bytes.len();
    }
    out.push(db);
    out
}

/// The encoded frames of `db`'s snapshot as a node serves it (batch `seq`), behind `flags`.
pub fn encode_stream(db: &mut LeanDb, seq: u64, flags: u8) -> Vec<u8> {
    let digest = StateDigest::from(engine::digest::digest(db));
    let frame = SEED_CHUNK_BYTES + SNAPSHOT_CHUNK_OVERHEAD_BYTES_MAX + codec::FRAME_HEADER_BYTES;
    let mut out = vec![flags];
    node::snapshot::stream(db, REQUEST_ID, PARTITION, seq, digest, frame, &mut |c| {
        codec::encode_into(&PeerReply::SnapshotChunk(c), &mut out, FRAME_BYTES_MAX).expect("a chunk fits its frame");
        true
    });
    out
}

/// The seed corpus; see the module documentation.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    for (i, mut db) in seed_sources().into_iter().enumerate() {
        out.push(encode_stream(&mut db, 40 + i as u64, 0));
    }
    // An empty database: the end alone.
    out.push(encode_stream(&mut LeanDb::new(), 3, 0));
    // The first part again with the reseal flag.
    let mut first = seed_sources().swap_remove(0);
    out.push(encode_stream(&mut first, 41, RESEAL));
    // A refusal.
    let refusal = node::snapshot::refusal(REQUEST_ID, PARTITION, "the replica is loading".into());
    let mut bytes = vec![0];
    codec::encode_into(&PeerReply::SnapshotChunk(refusal), &mut bytes, FRAME_BYTES_MAX).expect("a refusal fits");
    out.push(bytes);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use node::error::SnapshotProblem;

    /// Decodes a seed's frames back into chunks.
    fn chunks_of(seed: &[u8]) -> Vec<SnapshotChunk> {
        let chunk = |r| match r {
            PeerReply::SnapshotChunk(c) => c,
            other => panic!("a seed holds chunks only, not {other:?}"),
        };
        crate::peer_input::replies(&seed[1..]).map(chunk).collect()
    }

    fn encode(flags: u8, chunks: &[SnapshotChunk]) -> Vec<u8> {
        crate::peer_input::encode(flags, chunks.iter().cloned().map(PeerReply::SnapshotChunk))
    }

    /// Receives `chunks` as `check` does, returning the outcome and the database.
    fn receive(chunks: &[SnapshotChunk]) -> (Result<Option<SnapshotInfo>, TransferError>, LeanDb) {
        let mut db = LeanDb::new();
        let mut r = SnapshotReceiver::new(PARTITION, PEER.to_string());
        for c in chunks {
            match r.accept(c.clone(), &mut db) {
                Ok(None) => {}
                other => return (other, db),
            }
        }
        (Ok(None), db)
    }

    fn problem(outcome: Result<Option<SnapshotInfo>, TransferError>) -> SnapshotProblem {
        match outcome {
            Err(TransferError::Snapshot { problem, .. }) => problem,
            other => panic!("not a broken snapshot: {other:?}"),
        }
    }

    #[test]
    fn seeds_fit_and_copies_equal_their_sources() {
        let seeds = seeds();
        let max_len = crate::target("snapshot_install").unwrap().max_len;
        let sources = seed_sources();
        assert!(sources.len() >= 2, "the tiny database is split into parts");
        for (seed, mut src) in seeds.iter().zip(sources) {
            assert!(seed.len() <= max_len, "a seed of {} bytes", seed.len());
            let chunks = chunks_of(seed);
            assert!(chunks.len() > 2);
            let (outcome, mut copy) = receive(&chunks);
            let info = outcome.unwrap().expect("a whole stream completes");
            let digest = StateDigest::from(engine::digest::digest(&mut src));
            assert_eq!(info.digest, digest);
            assert_eq!(StateDigest::from(engine::digest::digest(&mut copy)), digest, "the copy equals its source");
        }
        // Every row of the tiny database is in one part.
        let rows: u64 = seed_sources()
            .iter_mut()
            .map(engine::digest::table_digests)
            .map(|t| t.iter().map(|t| t.rows).sum::<u64>())
            .sum();
        let total: u64 = source().iter().map(|c| u64::from(c.rows)).sum();
        assert_eq!(rows, total);
        for seed in &seeds {
            check(seed);
        }
    }

    /// The defect this target found: a stream whose rows were changed (checksums resealed)
    /// but whose end still claims the source's digest completed, installing a state other
    /// than the one claimed. Now refused (`SnapshotProblem::Digest`).
    #[test]
    fn a_forged_row_with_the_sources_digest_is_refused() {
        let seed = &seeds()[0];
        let mut chunks = chunks_of(seed);
        let c = &mut chunks[1];
        c.rows_bytes[0] ^= 1;
        c.checksum = SnapshotChunk::checksum_of(&c.rows_bytes);
        let (outcome, _) = receive(&chunks);
        assert!(matches!(problem(outcome), SnapshotProblem::Digest { .. }));
        check(&encode(0, &chunks));
        // The same through the reseal flag, without resealing here.
        let mut chunks = chunks_of(seed);
        chunks[1].rows_bytes[0] ^= 1;
        check(&encode(RESEAL, &chunks));
    }

    #[test]
    fn adversarial_streams_are_refused() {
        let chunks = chunks_of(&seeds()[0]);
        let n = chunks.len();
        // Truncated: no end, no completion.
        assert!(matches!(receive(&chunks[..n - 1]).0, Ok(None)));
        check(&encode(0, &chunks[..n - 1]));
        // Out of order.
        let mut swapped = chunks.clone();
        swapped.swap(1, 2);
        assert_eq!(problem(receive(&swapped).0), SnapshotProblem::ChunkGap { expected: 1, got: 2 });
        // Repeated.
        let mut repeated = chunks.clone();
        repeated.insert(1, chunks[0].clone());
        assert_eq!(problem(receive(&repeated).0), SnapshotProblem::ChunkGap { expected: 1, got: 0 });
        // Another partition.
        let mut other = chunks.clone();
        other[1].partition = 9;
        assert_eq!(problem(receive(&other).0), SnapshotProblem::WrongPartition { index: 1, got: 9 });
        // Another table's rows under a chunk's table (different row width, or duplicate keys).
        let mut table = chunks.clone();
        table[1].table = table[0].table;
        assert!(receive(&table).0.is_err());
        // A huge claimed row count.
        let mut huge = chunks.clone();
        huge[1].rows = u32::MAX;
        assert!(matches!(problem(receive(&huge).0), SnapshotProblem::RowSize { .. }));
        // A flipped byte in a row.
        let mut flipped = chunks.clone();
        flipped[1].rows_bytes[7] ^= 0x40;
        assert_eq!(problem(receive(&flipped).0), SnapshotProblem::Checksum { index: 1 });
        // An end with a wrong digest.
        let mut wrong = chunks.clone();
        if let Some(wire::messages::SnapshotEnd::Complete { digest, .. }) = &mut wrong[n - 1].end {
            digest.0 ^= 1;
        }
        assert!(matches!(problem(receive(&wrong).0), SnapshotProblem::Digest { .. }));
        // Each through the check, with and without resealing.
        for bytes in [&swapped, &repeated, &other, &table, &huge, &flipped, &wrong] {
            check(&encode(0, bytes));
            check(&encode(RESEAL, bytes));
        }
        // Arbitrary bytes.
        check(&[]);
        check(&[0]);
        check(&[0, 0xff, 0xff, 0xff, 0xff]);
        check(&[1, 5, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    /// A tiny mutational fuzzer over the seeds (deterministic): byte flips, truncations and
    /// splices, with and without resealing.
    #[test]
    fn mutated_seeds_hold_the_property() {
        let seeds = seeds();
        let mut rng = engine::rng::Rng::stream(11, 0);
        for i in 0..300 {
            let mut s = seeds[i % seeds.len()].clone();
            for _ in 0..=rng.uniform(0, 3) {
                let at = rng.uniform(1, s.len() as u64 - 1) as usize;
                match rng.uniform(0, 3) {
                    0 => s[at] ^= 1 << rng.uniform(0, 7),
                    1 => s[at] = rng.uniform(0, 255) as u8,
                    2 => s.truncate(at.max(2)),
                    _ => s[0] = rng.uniform(0, 1) as u8,
                }
            }
            check(&s);
        }
    }
}
