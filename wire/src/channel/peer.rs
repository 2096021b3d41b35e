//! The peer channel: a node dialling another node. A passive partition's primary ships each
//! batch's log records to its backups' nodes and is acknowledged; a rejoining node asks a
//! live replica's node for a copy of the partition, or (full stack) the primary's node for
//! its log base.

use crate::channel::{channel_enum, SnapshotChannel};
use crate::messages::{LogBaseChunk, PartitionId, Seq, Shipment, SnapshotChunk};

channel_enum! {
    /// Node → node (the dialler: a primary, or a rejoining node).
    pub enum PeerRequest = "node → node" {
        /// Primary → backup (passive modes): the log records batch `seq` produced, to be
        /// applied in sequence order.
        Ship(Shipment),
        /// Stream a consistent copy of one partition replica's rows as
        /// [`PeerReply::SnapshotChunk`]s, reflecting at least every batch up to `after_seq`
        /// (0 = now). The copy is taken between two batches.
        SnapshotRequest { request_id: u64, partition: PartitionId, after_seq: Seq },
        /// Rejoining full-stack node → its partition's primary: send the log base (the
        /// primary's log from its last checkpoint to the end of batch `after_seq` or later, and
        /// where the primary's copy of this node's log ended if it is a promoted backup);
        /// with `checkpoint`, the primary's checkpoint image first (a base backup: the
        /// requester's own log cannot reach the point the log base starts from).
        LogBaseRequest { request_id: u64, partition: PartitionId, after_seq: Seq, checkpoint: bool },
    }
}

channel_enum! {
    /// Node → node (the listener's answers).
    pub enum PeerReply = "node → node (replies)" {
        /// Backup → primary: the backup applied every shipment up to `seq`.
        ShipAck { partition: PartitionId, seq: Seq },
        /// One piece of a snapshot; the last one has `end` set.
        SnapshotChunk(SnapshotChunk),
        /// A piece of the answer to a [`PeerRequest::LogBaseRequest`].
        LogBaseChunk(LogBaseChunk),
    }
}

/// The peer channel, as a [`SnapshotChannel`] (a rejoining node's copy).
#[derive(Debug, Clone, Copy)]
pub struct PeerChannel;

impl SnapshotChannel for PeerChannel {
    type Request = PeerRequest;
    type Reply = PeerReply;

    fn snapshot_request(request_id: u64, partition: PartitionId, after_seq: Seq) -> PeerRequest {
        PeerRequest::SnapshotRequest { request_id, partition, after_seq }
    }

    fn snapshot_chunk(reply: PeerReply) -> Option<SnapshotChunk> {
        match reply {
            PeerReply::SnapshotChunk(c) => Some(c),
            PeerReply::ShipAck { .. } | PeerReply::LogBaseChunk(_) => None,
        }
    }
}
