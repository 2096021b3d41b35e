//! What a replica tells of its state: its state digest — taken at once on the executor, or
//! after a batch that asks for it by a copy of the state its carrier digests off the executor
//! (docs/design.md §10, "Checks during traffic") — and a tool's read-only transactions and
//! digest requests, outside the ordered path.
//!
//! Guarantees: a digest copy shows the state right after the batch that asked for it, one
//! copy at a time (a second digest batch meanwhile digests at once); a tool's read runs only
//! OrderStatus and StockLevel and changes nothing, and a backup's answer says it may lag its
//! primary.

use engine::procedures::TxnInput;
use wire::channel::ToolReply;
use wire::messages::{DigestOutcome, PartitionId, Seq, StateDigest};

use super::{Replica, ReplicaRole, Store};
use crate::error::ReplicaError;

/// A copy of the state begun right after batch `seq`, which asked for the state digest
/// (docs/design.md §10, "Checks during traffic"): its carrier steps it while the partition
/// executes on and reports the digest of the state it shows in
/// [`NodeToCoordinator::StateDigest`].
///
/// [`NodeToCoordinator::StateDigest`]: wire::channel::NodeToCoordinator::StateDigest
#[derive(Debug)]
pub enum DigestCopy {
    /// A lean replica's rows: the sender's end carries the digest.
    Rows { seq: Seq, sender: crate::snapshot::CopySender },
    /// A full-stack replica's page image (`ConventionalDb::begin_image_copy` was called):
    /// the database rebuilt from it is digested.
    Image { seq: Seq },
}

impl DigestCopy {
    /// The batch whose state the copy shows.
    pub fn seq(&self) -> Seq {
        match self {
            DigestCopy::Rows { seq, .. } | DigestCopy::Image { seq } => *seq,
        }
    }
}

impl Replica {
    /// A tool's read-only transaction (OrderStatus, StockLevel) on this replica now, outside
    /// the ordered path; a backup's answer may lag its primary (`possibly_stale`).
    pub fn replica_read(
        &mut self,
        request_id: u64,
        partition: PartitionId,
        input: &TxnInput,
    ) -> Result<ToolReply, ReplicaError> {
        self.check_partition(partition)?;
        let outcome = self.read(input);
        let possibly_stale = self.role() == ReplicaRole::Backup;
        Ok(ToolReply::ReplicaReadReply { request_id, partition, seq: self.applied_seq(), possibly_stale, outcome })
    }

    /// A tool's digest request: this replica's state digest now.
    pub fn digest_reply(&mut self, request_id: u64, partition: PartitionId) -> Result<ToolReply, ReplicaError> {
        self.check_partition(partition)?;
        let digests = vec![(self.node, self.state_digest())];
        let outcome = DigestOutcome::Digests { seq: self.applied_seq(), digests };
        Ok(ToolReply::DigestReply { request_id, partition, outcome })
    }

    /// Batch `seq`, which asked for the state digest, just ended: begins a copy of the state
    /// for the carrier to digest ([`Replica::take_digest_copy`]) and returns `None`, or, when
    /// the replica digests at once (not told to copy, or a copy of it is under way already:
    /// one at a time), returns the digest.
    pub(super) fn begin_digest(&mut self, seq: Seq) -> Option<StateDigest> {
        if self.digest_by_copy && self.digest_copy.is_none() {
            let partition = self.partition;
            let begun = match &mut self.db {
                Store::Lean(db) => crate::snapshot::CopySender::begin(
                    db,
                    crate::snapshot::next_copy_id(),
                    0,
                    partition,
                    seq,
                    usize::MAX,
                )
                .map(|sender| DigestCopy::Rows { seq, sender }),
                Store::Full(f) => f.database().begin_image_copy().ok().map(|()| DigestCopy::Image { seq }),
            };
            if let Some(copy) = begun {
                self.digest_copy = Some(copy);
                return None;
            }
        }
        Some(self.state_digest())
    }

    /// Has a batch that asks for the state digest begin a copy of the state after it, taken
    /// by the carrier ([`Replica::take_digest_copy`]), rather than digest the state at once
    /// on the executor.
    pub fn set_digest_by_copy(&mut self, by_copy: bool) {
        self.digest_by_copy = by_copy;
    }

    /// The digest copy begun after a batch that asked for the state digest, for the carrier
    /// to step and report. A carrier that digests by copy takes it after every message that
    /// can execute a batch; one not taken makes the next digest batch digest at once.
    pub fn take_digest_copy(&mut self) -> Option<DigestCopy> {
        self.digest_copy.take()
    }

    /// The partition's state digest now (a full scan: costly).
    pub fn state_digest(&mut self) -> StateDigest {
        match &mut self.db {
            Store::Lean(db) => engine::digest::digest(db).into(),
            Store::Full(f) => engine::digest::digest(f.session()).into(),
        }
    }
}
