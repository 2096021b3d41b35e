//! The tool channel: a tool (`glass cluster status`, `check`, `dump`, `down`, the load
//! driver's checks) and a node. Everything here is answered at once or between two batches,
//! outside the coordinator's ordered path.

use engine::procedures::TxnInput;

use crate::channel::{channel_enum, SnapshotChannel};
use crate::messages::{DigestOutcome, PartitionId, ProcessStatus, Seq, SnapshotChunk, TxnOutcome};

channel_enum! {
    /// Tool → node.
    pub enum ToolRequest = "tool → node" {
        /// Report your state; answered with [`ToolReply::StatusReply`].
        StatusRequest { request_id: u64 },
        /// This node's replica's state digest of `partition`, now.
        DigestRequest { request_id: u64, partition: PartitionId },
        /// Stream a consistent copy of one partition replica's rows as
        /// [`ToolReply::SnapshotChunk`]s, reflecting at least every batch up to `after_seq`
        /// (0 = now). The copy is taken between two batches.
        SnapshotRequest { request_id: u64, partition: PartitionId, after_seq: Seq },
        /// Run a read-only transaction (OrderStatus, StockLevel) on this node's replica of
        /// `partition` now, outside the ordered path.
        ReplicaRead { request_id: u64, partition: PartitionId, input: TxnInput },
        /// Shut down (what `glass cluster down` sends; only holders of a cluster certificate
        /// can).
        Shutdown { reason: String },
    }
}

channel_enum! {
    /// Node → tool.
    pub enum ToolReply = "node → tool" {
        /// The answer to a [`ToolRequest::StatusRequest`].
        StatusReply { request_id: u64, status: ProcessStatus },
        /// The answer to a [`ToolRequest::DigestRequest`].
        DigestReply { request_id: u64, partition: PartitionId, outcome: DigestOutcome },
        /// One piece of a snapshot; the last one has `end` set.
        SnapshotChunk(SnapshotChunk),
        /// The answer to a [`ToolRequest::ReplicaRead`]: the outcome against the replica's
        /// state after batch `seq`; `possibly_stale` when the replica is a backup that may lag
        /// its primary.
        ReplicaReadReply { request_id: u64, partition: PartitionId, seq: Seq, possibly_stale: bool, outcome: TxnOutcome },
    }
}

/// The tool channel, as a [`SnapshotChannel`] (`glass cluster check` and `dump`).
#[derive(Debug, Clone, Copy)]
pub struct ToolChannel;

impl SnapshotChannel for ToolChannel {
    type Request = ToolRequest;
    type Reply = ToolReply;

    fn snapshot_request(request_id: u64, partition: PartitionId, after_seq: Seq) -> ToolRequest {
        ToolRequest::SnapshotRequest { request_id, partition, after_seq }
    }

    fn snapshot_chunk(reply: ToolReply) -> Option<SnapshotChunk> {
        match reply {
            ToolReply::SnapshotChunk(c) => Some(c),
            ToolReply::StatusReply { .. } | ToolReply::DigestReply { .. } | ToolReply::ReplicaReadReply { .. } => None,
        }
    }
}
