//! The control channel: a node and the coordinator. The coordinator sends each partition's
//! batches and everything that decides a replica's part (membership, promotion, rejoin,
//! stop); a node sends its replicas' results, load progress, heartbeats and rejoin and
//! promotion progress. Multi-partition transactions' remote piece outcomes travel both ways
//! (node → coordinator → the home partition's replicas). Every coordinator → node message
//! travels [`Epoched`]: a node refuses one from an older epoch than it heard of (fencing,
//! docs/design.md §11).

use engine::procedures::TxnInput;

use crate::channel::channel_enum;
use crate::messages::{
    Batch, Epoch, LoadState, NodeId, PartitionId, PieceReads, RecalledOutcome, ReplicaStanding, RequestId, Results,
    ResultsDigest, Seq, StateDigest, Timestamp,
};

channel_enum! {
    /// Coordinator → node.
    pub enum CoordinatorToNode = "coordinator → node" {
        /// The next transactions of a partition.
        Batch(Batch),
        /// Every `timeouts.heartbeat_ms`: the coordinator is alive. `now_ms` is its clock, for
        /// diagnostics only.
        Heartbeat { now_ms: u64 },
        /// The live replica set of a partition changed (a replica failed); `epoch` counts the
        /// changes: the leader's epoch in the high 32 bits, its changes in the low
        /// ([`membership_epoch`] reads it).
        Membership { partition: PartitionId, epoch: u64, live: Vec<NodeId> },
        /// The partition is stopped (its replicas diverged); execute nothing more of it.
        PartitionStopped { partition: PartitionId, reason: String },
        /// The cluster is shutting down.
        Shutdown { reason: String },
        /// To a rejoining node: copy the partition from `source` as of batch `from_seq - 1`
        /// or later; every batch from `from_seq` on is sent to you too — hold them until the
        /// copy is installed.
        RejoinPlan { partition: PartitionId, source: NodeId, from_seq: Seq },
        /// To a rejoining node: not now, and why.
        RejoinRefused { partition: PartitionId, reason: String },
        /// To a restarted full-stack node that recovered `partition` from its own write-ahead
        /// log, when no live replica of the partition is left and the node was its last
        /// primary: its recovered state is the partition's; execute from batch `from_seq` on.
        /// (Batches sent to it before it failed and never answered were answered "outcome
        /// unknown": restart recovery kept those whose commit record was on disk.)
        ResumeFromLog { partition: PartitionId, from_seq: Seq },
        /// To a backup's node (passive modes, its primary failed): become the primary once
        /// every shipment received is applied. `first_unanswered` is the first batch no client
        /// was answered for; the new primary continues from it or after what it applied.
        Promote { partition: PartitionId, first_unanswered: Seq },
        /// To a passive partition's primary: ship the log records of every batch from the next
        /// one on to `backup` too (a backup rejoining); wait for its acknowledgements only once
        /// a membership names it.
        ShipTo { partition: PartitionId, backup: NodeId },
        /// A remote piece's outcome, forwarded to the executing replicas of the home partition
        /// (docs/cluster.md, "Multi-partition transactions").
        PieceReads(PieceReads),
        /// To a partition's replicas: every replica batch `seq` was sent to failed before
        /// answering, and the outcome of its remote piece of transaction `ts` never reached the
        /// home partition; a replica whose state includes batch `seq` derives the piece's reads
        /// again (changing nothing) and sends them as [`NodeToCoordinator::PieceReads`].
        RederivePiece { partition: PartitionId, home: PartitionId, seq: Seq, ts: Timestamp, input: TxnInput },
        /// A coordinator leads `epoch` (docs/design.md §11): from now on refuse anything from
        /// an older epoch, drop batches held past a gap, and report each partition's
        /// [`NodeToCoordinator::Standing`].
        TakeOver { epoch: Epoch },
        /// A new leader bringing `partition` level: send the batches after `after` that you
        /// executed recently or hold ([`NodeToCoordinator::HeldBatches`]), at most
        /// [`HELD_BATCHES_PER_REPLY_MAX`] of them with transactions. Those through
        /// `whole_after` every replica that counts executed: the leader needs only where
        /// their multi-partition pieces are, and they come with those alone.
        SendBatches { partition: PartitionId, after: Seq, whole_after: Seq },
        /// To an executing replica of `partition`, for retried requests whose answers were
        /// lost (docs/design.md §11, "Exactly-once answers"): once you executed every batch
        /// through `through`, answer [`NodeToCoordinator::Recalled`] with the outcomes you
        /// remember of `ids` (at most [`RECALL_IDS_MAX`]).
        RecallOutcomes { partition: PartitionId, recall: u64, through: Seq, ids: Vec<RequestId> },
        /// To a replica that sent only the digest of these batches' outputs
        /// ([`NodeToCoordinator::ResultsDigest`]) when the replica named to send them
        /// ([`Batch::answerer`]) failed first: send them in full ([`NodeToCoordinator::Results`]),
        /// or [`NodeToCoordinator::ResultsForgotten`] for those no longer kept (at most
        /// [`SEND_RESULTS_MAX`] batches; docs/design.md §10, "One replica answers").
        SendResults { partition: PartitionId, seqs: Vec<Seq> },
    }
}

/// Batches one [`CoordinatorToNode::SendResults`] asks for, at most.
pub const SEND_RESULTS_MAX: usize = 1_024;

/// Request ids one [`CoordinatorToNode::RecallOutcomes`] asks about, at most.
pub const RECALL_IDS_MAX: usize = 1_024;

/// Batches one [`NodeToCoordinator::HeldBatches`] carries, at most.
pub const HELD_BATCHES_PER_REPLY_MAX: usize = 64;

/// A coordinator's message to a node with the epoch of the coordinator that sent it
/// (docs/design.md §11, fencing).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Epoched {
    pub epoch: Epoch,
    pub msg: CoordinatorToNode,
}

channel_enum! {
    /// Coordinator → node, as it travels: every message with its sender's epoch.
    pub enum FromCoordinator = "coordinator → node" {
        Epoched(Epoched),
    }
}

/// A [`CoordinatorToNode::Membership`] epoch as people read it: `"<leader epoch>.<change>"`
/// (`4294967299` is `1.3`, the third change made by the leader of epoch 1).
pub fn membership_epoch(epoch: u64) -> String {
    format!("{}.{}", epoch >> 32, epoch & u64::from(u32::MAX))
}

impl CoordinatorToNode {
    /// The partition whose replicas the message is for (a piece's outcome: the home
    /// partition's); `None` for what concerns the node as a whole (heartbeat, shutdown).
    pub fn partition(&self) -> Option<PartitionId> {
        match self {
            CoordinatorToNode::Batch(b) => Some(b.partition),
            CoordinatorToNode::PieceReads(r) => Some(r.home),
            CoordinatorToNode::Membership { partition, .. }
            | CoordinatorToNode::PartitionStopped { partition, .. }
            | CoordinatorToNode::RejoinPlan { partition, .. }
            | CoordinatorToNode::RejoinRefused { partition, .. }
            | CoordinatorToNode::ResumeFromLog { partition, .. }
            | CoordinatorToNode::Promote { partition, .. }
            | CoordinatorToNode::ShipTo { partition, .. }
            | CoordinatorToNode::RederivePiece { partition, .. } => Some(*partition),
            CoordinatorToNode::SendBatches { partition, .. }
            | CoordinatorToNode::RecallOutcomes { partition, .. }
            | CoordinatorToNode::SendResults { partition, .. } => Some(*partition),
            CoordinatorToNode::Heartbeat { .. }
            | CoordinatorToNode::Shutdown { .. }
            | CoordinatorToNode::TakeOver { .. } => None,
        }
    }
}

channel_enum! {
    /// Node → coordinator.
    pub enum NodeToCoordinator = "node → coordinator" {
        /// Progress loading a partition replica.
        LoadStatus { partition: PartitionId, state: LoadState },
        /// A replica's results for one batch.
        Results(Results),
        /// Every `timeouts.heartbeat_ms`: the node is alive. `now_ms` is its clock, for
        /// diagnostics only.
        Heartbeat { now_ms: u64 },
        /// A restarted node (`glass node --rejoin`): let me rejoin `partition`.
        RejoinRequest { partition: PartitionId },
        /// With every heartbeat (passive modes): the backup of `partition` applied every
        /// shipment up to batch `seq`. The coordinator promotes the most up-to-date backup
        /// when the primary fails.
        BackupApplied { partition: PartitionId, seq: Seq },
        /// A rejoining node: the copy (as of batch `snapshot_seq`) is installed and every batch
        /// held since has executed: count me as live.
        Rejoined { partition: PartitionId, snapshot_seq: Seq },
        /// A promoted backup: it applied every batch up to `applied_seq` and executes from
        /// `next_seq` on.
        Promoted { partition: PartitionId, applied_seq: Seq, next_seq: Seq },
        /// A remote piece's outcome, for the coordinator to forward to the home partition.
        PieceReads(PieceReads),
        /// To a new leader, for its [`CoordinatorToNode::TakeOver`]: where this replica of
        /// `partition` stands.
        Standing { epoch: Epoch, partition: PartitionId, standing: ReplicaStanding },
        /// To a new leader, for its [`CoordinatorToNode::SendBatches`]: the batches asked for
        /// that this replica has, in order (none: it has none of them), and the remote
        /// pieces' outcomes their home pieces ran with or hold.
        HeldBatches { partition: PartitionId, batches: Vec<Batch>, reads: Vec<PieceReads> },
        /// To a coordinator whose message came from an older epoch than `epoch`: it was
        /// refused; a newer leader exists (docs/design.md §11).
        Fenced { epoch: Epoch },
        /// A primary (passive modes): its queue of shipments to backup node `backup` holds
        /// `queued` of them, more than a quarter of its bound. A backup that rejoins reads
        /// them more slowly than the partition commits (it installs a copy meanwhile); the
        /// coordinator admits less on `partition` while it catches up, before the queue fills
        /// and the backup is dropped from shipping (docs/design.md §10, "Catching up under
        /// load"). Sent at most every 100 ms per backup; last of the channel, so frames recorded
        /// before it keep their meaning.
        ShippingBehind { partition: PartitionId, backup: NodeId, queued: u32 },
        /// The state digest of `partition` after batch `seq`, which asked for one
        /// ([`Batch::digest_after`]), or why this replica could not take it. Taken from a copy
        /// of the state begun right after the batch, while the partition executes on (docs/
        /// design.md §10, "Checks during traffic"), so it comes after the batch's results.
        StateDigest { partition: PartitionId, seq: Seq, digest: Result<StateDigest, String> },
        /// The answer to [`CoordinatorToNode::RecallOutcomes`]: the outcomes this replica
        /// remembers of the ids asked about. Of the others, none ran after
        /// `remembered_after` through batch `executed_seq` here; what ran before it is
        /// forgotten.
        Recalled {
            partition: PartitionId,
            recall: u64,
            executed_seq: Seq,
            remembered_after: Timestamp,
            found: Vec<RecalledOutcome>,
        },
        /// A replica's report of a batch another replica answers ([`Batch::answerer`]): the
        /// digest of its outputs, which it keeps.
        ResultsDigest(ResultsDigest),
        /// The answer to [`CoordinatorToNode::SendResults`] for batch `seq`, whose outputs
        /// this replica no longer keeps (it executed it; they are lost).
        ResultsForgotten { partition: PartitionId, seq: Seq },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_membership_epoch_reads_as_leader_epoch_and_change() {
        assert_eq!(super::membership_epoch(4_294_967_299), "1.3");
        assert_eq!(super::membership_epoch(0), "0.0");
        assert_eq!(super::membership_epoch(u64::MAX), "4294967295.4294967295");
    }
}
