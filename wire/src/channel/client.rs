//! The client channel: a client (the load driver, or a tool) and the coordinator. Clients
//! send transactions in batches and are answered in batches, in any order; tools ask for
//! status, ordered digests, or a shutdown.

use crate::channel::channel_enum;
use crate::messages::{ClientReply, ClientRequest, DigestOutcome, PartitionId, ProcessStatus};

channel_enum! {
    /// Client → coordinator.
    pub enum ClientToCoordinator = "client → coordinator" {
        /// Transactions to run.
        ClientRequests(Vec<ClientRequest>),
        /// The partition's state digests, through the ordered path: every live replica
        /// digests its state at the same point of the stream.
        DigestRequest { request_id: u64, partition: PartitionId },
        /// Report your state; answered with [`CoordinatorToClient::StatusReply`].
        StatusRequest { request_id: u64 },
        /// Shut the cluster down (what `glass cluster down` sends; only holders of a cluster
        /// certificate can).
        Shutdown { reason: String },
    }
}

channel_enum! {
    /// Coordinator → client.
    pub enum CoordinatorToClient = "coordinator → client" {
        /// Answers to [`ClientToCoordinator::ClientRequests`], in any order.
        ClientReplies(Vec<ClientReply>),
        /// The answer to a [`ClientToCoordinator::DigestRequest`].
        DigestReply { request_id: u64, partition: PartitionId, outcome: DigestOutcome },
        /// The answer to a [`ClientToCoordinator::StatusRequest`].
        StatusReply { request_id: u64, status: ProcessStatus },
        /// The cluster is shutting down.
        Shutdown { reason: String },
    }
}
