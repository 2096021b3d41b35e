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
