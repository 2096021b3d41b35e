//! Redo records for log-shipping replication (the paper's Section 5.3 "active-passive"
//! alternative): the after-images of the rows each committed transaction changed, in commit
//! order, which a backup applies ("rolls forward") without executing any procedure logic.
//!
//! The lean kernel produces them from its undo buffer at commit, when capture is on (nothing
//! is recorded when it is off): every row a transaction inserted, updated or deleted appears
//! once with its final state — its whole after-image if the transaction inserted it, the
//! after-image of its updatable prefix if it only updated it, or a deletion — and every
//! HISTORY row it appended appears as an append. Aborted transactions produce nothing.
//!
//! Guarantees: applying a primary's redo batches, in order, to a backup that started from the
//! same state gives the backup the primary's state (equal digests); a batch carries a
//! checksum of its contents, checked before anything is applied.

use serde::{Deserialize, Serialize};

use crate::schema::TableId;

/// What a redo record does to its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RedoOp {
    /// Insert the after-image, or overwrite the row with the same primary key.
    Upsert,
    /// Overwrite the start of an existing row with the image: an update ships only the row's
    /// updatable prefix (`Table::UPDATABLE_PREFIX`), as a log records the changed columns.
    Patch,
    /// Remove the row with this primary key.
    Delete,
    /// Append the after-image to a heap table (HISTORY).
    Append,
}

/// One row change; its image (for `Upsert` and `Append`) is `bytes[at..at + len]` of its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedoRecord {
    pub table: u8,
    pub op: RedoOp,
    pub key: u64,
    pub at: u32,
    pub len: u32,
}

impl RedoRecord {
    pub fn table(&self) -> Option<TableId> {
        TableId::from_u8(self.table)
    }
}

/// The redo records of a run of committed transactions, in commit order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedoBatch {
    /// Committed transactions the batch covers.
    pub txns: u64,
    pub records: Vec<RedoRecord>,
    pub bytes: Vec<u8>,
    /// XXH3-64 of the records and bytes, set by [`RedoBatch::seal`].
    pub checksum: u64,
}

impl RedoBatch {
    pub fn is_empty(&self) -> bool {
        self.txns == 0 && self.records.is_empty()
    }

    fn compute_checksum(&self) -> u64 {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        h.update(&self.txns.to_le_bytes());
        for r in &self.records {
            h.update(&[r.table, r.op as u8]);
            h.update(&r.key.to_le_bytes());
            h.update(&r.at.to_le_bytes());
            h.update(&r.len.to_le_bytes());
        }
        h.update(&self.bytes);
        h.digest()
    }

    /// Sets the checksum over the batch's contents (done when the batch is taken).
    pub fn seal(&mut self) {
        self.checksum = self.compute_checksum();
    }

    /// Whether the contents match the checksum.
    pub fn verify(&self) -> bool {
        self.checksum == self.compute_checksum()
    }

    pub(crate) fn push(&mut self, table: TableId, op: RedoOp, key: u64, image: &[u8]) {
        let at = u32::try_from(self.bytes.len()).expect("redo batch under 4 GiB");
        self.bytes.extend_from_slice(image);
        self.records.push(RedoRecord { table: table as u8, op, key, at, len: image.len() as u32 });
    }
}

/// Bytes of one record in [`RedoBatch::to_bytes`]: table, op, key, at, len.
const RECORD_BYTES: usize = 1 + 1 + 8 + 4 + 4;
/// Bytes of the header in [`RedoBatch::to_bytes`]: txns, records, bytes, checksum.
const HEADER_BYTES: usize = 8 + 4 + 4 + 8;

impl RedoOp {
    fn from_u8(b: u8) -> Option<RedoOp> {
        Some(match b {
            0 => RedoOp::Upsert,
            1 => RedoOp::Patch,
            2 => RedoOp::Delete,
            3 => RedoOp::Append,
            _ => return None,
        })
    }
}

impl RedoBatch {
    /// The batch as bytes (little-endian): `txns: u64 | records: u32 | bytes: u32 |
    /// checksum: u64`, then each record as `table: u8 | op: u8 | key: u64 | at: u32 | len: u32`,
    /// then the image bytes. A copy carries the changes made while it was taken this way
    /// (docs/design.md §10, "Copying without stopping").
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + self.records.len() * RECORD_BYTES + self.bytes.len());
        out.extend_from_slice(&self.txns.to_le_bytes());
        out.extend_from_slice(&(self.records.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.checksum.to_le_bytes());
        for r in &self.records {
            out.push(r.table);
            out.push(r.op as u8);
            out.extend_from_slice(&r.key.to_le_bytes());
            out.extend_from_slice(&r.at.to_le_bytes());
            out.extend_from_slice(&r.len.to_le_bytes());
        }
        out.extend_from_slice(&self.bytes);
        out
    }

    /// Bytes of [`RedoBatch::to_bytes`]'s output.
    pub fn encoded_len(&self) -> usize {
        HEADER_BYTES + self.records.len() * RECORD_BYTES + self.bytes.len()
    }

    /// The batch cut, in order, into sealed batches that encode in at most `bytes_max` bytes
    /// each (one record alone may be larger); applied one after another they are the batch.
    /// The transactions are counted on the first.
    pub fn split(self, bytes_max: usize) -> Vec<RedoBatch> {
        if self.encoded_len() <= bytes_max {
            return vec![self];
        }
        let mut out: Vec<RedoBatch> = Vec::new();
        let mut cur = RedoBatch { txns: self.txns, ..RedoBatch::default() };
        for r in &self.records {
            let image = &self.bytes[r.at as usize..r.at as usize + r.len as usize];
            if !cur.records.is_empty() && cur.encoded_len() + RECORD_BYTES + image.len() > bytes_max {
                cur.seal();
                out.push(std::mem::take(&mut cur));
            }
            let at = cur.bytes.len() as u32;
            cur.bytes.extend_from_slice(image);
            cur.records.push(RedoRecord { at, ..*r });
        }
        cur.seal();
        out.push(cur);
        out
    }

    /// Reads what [`RedoBatch::to_bytes`] wrote: `None` for anything else (a length that
    /// does not add up, an unknown operation, trailing bytes). The contents are not checked
    /// against the checksum here: applying them does that ([`RedoBatch::verify`]).
    pub fn from_bytes(b: &[u8]) -> Option<RedoBatch> {
        let u32_at = |i: usize| b.get(i..i + 4).map(|s| u32::from_le_bytes(s.try_into().expect("4 bytes")));
        let u64_at = |i: usize| b.get(i..i + 8).map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")));
        let txns = u64_at(0)?;
        let n = u32_at(8)? as usize;
        let nbytes = u32_at(12)? as usize;
        let checksum = u64_at(16)?;
        let end = n.checked_mul(RECORD_BYTES)?.checked_add(HEADER_BYTES)?.checked_add(nbytes)?;
        if end != b.len() {
            return None;
        }
        let mut records = Vec::with_capacity(n);
        for i in 0..n {
            let at = HEADER_BYTES + i * RECORD_BYTES;
            records.push(RedoRecord {
                table: b[at],
                op: RedoOp::from_u8(b[at + 1])?,
                key: u64_at(at + 2)?,
                at: u32_at(at + 10)?,
                len: u32_at(at + 14)?,
            });
        }
        let bytes = b[HEADER_BYTES + n * RECORD_BYTES..].to_vec();
        Some(RedoBatch { txns, records, bytes, checksum })
    }
}

#[cfg(test)]
mod bytes_tests {
    use super::*;

    #[test]
    fn a_batch_survives_its_bytes_and_nothing_else_reads_as_one() {
        let mut b = RedoBatch::default();
        b.push(TableId::Stock, RedoOp::Patch, 7, &[1, 2, 3]);
        b.push(TableId::History, RedoOp::Append, 0, &[9; 5]);
        b.push(TableId::Orders, RedoOp::Delete, 9, &[]);
        b.txns = 2;
        b.seal();
        let bytes = b.to_bytes();
        assert_eq!(RedoBatch::from_bytes(&bytes), Some(b.clone()));
        for cut in 0..bytes.len() {
            assert_eq!(RedoBatch::from_bytes(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(RedoBatch::from_bytes(&longer), None);
        let mut bad_op = bytes;
        bad_op[HEADER_BYTES + 1] = 9;
        assert_eq!(RedoBatch::from_bytes(&bad_op), None);
    }

    #[test]
    fn a_split_batch_keeps_every_record_in_order_within_the_bound() {
        let mut b = RedoBatch::default();
        for k in 0..100u64 {
            b.push(TableId::Stock, RedoOp::Patch, k, &[k as u8; 40]);
        }
        b.txns = 7;
        b.seal();
        let parts = b.clone().split(1_000);
        assert!(parts.len() > 5);
        assert!(parts.iter().all(|p| p.encoded_len() <= 1_000 && p.verify()));
        assert_eq!(parts.iter().map(|p| p.txns).sum::<u64>(), 7);
        let keys: Vec<u64> = parts.iter().flat_map(|p| p.records.iter().map(|r| r.key)).collect();
        assert_eq!(keys, (0..100).collect::<Vec<_>>());
        for p in &parts {
            for r in &p.records {
                assert_eq!(&p.bytes[r.at as usize..(r.at + r.len) as usize], &[r.key as u8; 40][..]);
            }
        }
        assert_eq!(b.clone().split(usize::MAX), vec![b]);
    }
}
