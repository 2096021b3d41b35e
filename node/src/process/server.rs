//! The node's listener, on its own address: tools (`glass cluster status`, `check`, `dump`,
//! `down`) on the tool channel (`wire::channel::ToolRequest`): status, replica digests,
//! snapshots, replica reads, shutdown; and other nodes on the peer channel
//! (`wire::channel::PeerRequest`): the primaries of partitions it backs up (passive modes),
//! whose shipments go to the backup's executor and whose acknowledgements go back on the
//! same link, and rejoining nodes fetching a copy or a log base; the peer's Hello (checked
//! against its certificate) says which channel a connection carries; at most
//! [`TOOL_CONNECTIONS_MAX`] connections at once.
//!
//! Guarantees: a connection past the limit, and a coordinator's, is refused; a shipment for a
//! partition this node does not hold, or naming another primary than the link's
//! (authenticated) peer, is ignored (logged); a copy, digest or log base request for a
//! replica that is not loaded is refused at once, without reaching its executor; status
//! requests and shutdowns are served by the connection's task, never queued behind batches;
//! a connection's replies queue at most [`TOOL_OUTBOX_MAX`] deep.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};
use tracing::{debug, info, warn};
use wire::channel::{ChannelMessage, PeerReply, PeerRequest, ToolReply, ToolRequest};
use wire::endpoint::{self, Link, Listener};
use wire::messages::{DigestOutcome, LoadState, PartitionId, PeerKind, Rejection};

use super::{Node, Work, TOOL_CONNECTIONS_MAX, TOOL_OUTBOX_MAX};
use crate::snapshot;

/// Accepts tool connections until the node stops.
pub(super) async fn serve_tools(node: Arc<Node>, mut listener: Listener) {
    let permits = Arc::new(Semaphore::new(TOOL_CONNECTIONS_MAX));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = node.stopped() => return,
        };
        let link = match accepted {
            Ok(l) => l,
            Err(e) => {
                match e.is_refusal() {
                    true => warn!(error = %e, "a connection was refused"),
                    false => debug!(error = %e, "a connection attempt failed"),
                }
                continue;
            }
        };
        let hello = link.peer_hello().clone();
        if hello.role == PeerKind::Coordinator {
            warn!(id = hello.id, "the coordinator does not connect to nodes; refused");
            tokio::spawn(link.refuse("only tools and primaries connect to a node"));
            continue;
        }
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            warn!(limit = TOOL_CONNECTIONS_MAX, "too many tool connections; refused");
            tokio::spawn(link.refuse("too many tool connections"));
            continue;
        };
        let node = node.clone();
        tokio::spawn(async move {
            match hello.role {
                PeerKind::Node => serve_peer(node, link).await,
                PeerKind::Client | PeerKind::Coordinator => serve_tool(node, link).await,
            }
            drop(permit);
        });
    }
}

/// The writer of one connection's replies: sends what the queue returned holds until every
/// sender is gone, then finishes the stream. Once the connection is closed it drops the
/// queue at once, even with nothing to send: whoever still feeds it (a copy's forwarder
/// stalled on its executor) learns that its requester is gone (`mpsc::Sender::closed`).
fn reply_writer<R: ChannelMessage>(mut sender: endpoint::LinkSender) -> (mpsc::Sender<R>, tokio::task::JoinHandle<()>) {
    let (reply_tx, mut reply_rx) = mpsc::channel::<R>(TOOL_OUTBOX_MAX);
    let writer = tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                m = reply_rx.recv() => m,
                () = sender.closed() => return,
            };
            let Some(m) = next else { break };
            if sender.send(&m).await.is_err() {
                return;
            }
        }
        sender.finish(Duration::from_secs(1)).await;
    });
    (reply_tx, writer)
}

/// The next request of a tool or peer connection, `None` once it ended, the node stops, or
/// the peer broke the protocol (logged at `warn`, naming it: its connection is closed).
async fn next_request<M: ChannelMessage>(node: &Node, receiver: &mut endpoint::LinkReceiver, peer: &str) -> Option<M> {
    let received = tokio::select! {
        r = receiver.recv::<M>() => r,
        () = node.stopped() => return None,
    };
    match received {
        Ok(m) => m,
        Err(e) if e.is_protocol_violation() => {
            warn!(peer, address = %receiver.remote_address(), error = %e, "a peer broke the protocol; its link is closed");
            None
        }
        Err(e) => {
            debug!(peer, error = %e, "link failed");
            None
        }
    }
}

/// Whether node's replica of `partition` can serve a copy or a digest: why not, if not.
fn not_ready(node: &Node, partition: PartitionId) -> Option<String> {
    let ready = node.replicas.get(&partition).map(|r| matches!(*r.shared.load.borrow(), LoadState::Ready { .. }));
    match ready {
        None => Some(format!("node {} holds no replica of partition {partition}", node.id)),
        Some(false) => Some(format!("the replica of partition {partition} is not loaded")),
        Some(true) => None,
    }
}

/// One peer node's connection (the peer channel): a primary's shipments, a rejoining node's
/// snapshot and log base requests.
async fn serve_peer(node: Arc<Node>, link: Link) {
    let from = link.peer_hello().id;
    let who = format!("node {from}");
    debug!(node = from, "peer node connected");
    let (sender, mut receiver) = link.split();
    let (reply_tx, writer) = reply_writer::<PeerReply>(sender);
    while let Some(req) = next_request::<PeerRequest>(&node, &mut receiver, &who).await {
        let partition = match &req {
            PeerRequest::Ship(shipment) => shipment.partition,
            PeerRequest::SnapshotRequest { partition, .. } | PeerRequest::LogBaseRequest { partition, .. } => {
                *partition
            }
        };
        let refusal = match &req {
            PeerRequest::Ship(_) if !node.replicas.contains_key(&partition) => {
                warn!(node = from, partition, "shipment for a partition this node does not hold; ignored");
                continue;
            }
            // The link's peer is authenticated (its certificate is its Hello's node): a
            // shipment naming another primary would slip past the backup's ship gate.
            PeerRequest::Ship(shipment) if shipment.primary != from => {
                warn!(node = from, partition, claimed = shipment.primary, "shipment claiming another primary; ignored");
                continue;
            }
            PeerRequest::Ship(_) => None,
            PeerRequest::SnapshotRequest { request_id, .. } => not_ready(&node, partition)
                .map(|reason| PeerReply::SnapshotChunk(snapshot::refusal(*request_id, partition, reason))),
            PeerRequest::LogBaseRequest { request_id, .. } => not_ready(&node, partition)
                .map(|reason| PeerReply::LogBaseChunk(snapshot::log_base_refusal(*request_id, partition, &reason))),
        };
        if let Some(refusal) = refusal {
            let _ = reply_tx.send(refusal).await;
            continue;
        }
        let r = &node.replicas[&partition];
        if r.deliver(partition, &who, Work::Peer { req, reply: reply_tx.clone() }).await.is_err() {
            break;
        }
    }
    drop(reply_tx);
    // Let queued replies (a snapshot's last chunks) go out.
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    debug!(node = from, "peer node disconnected");
}

/// One tool connection (the tool channel): status, digest and snapshot requests, replica
/// reads, shutdown.
async fn serve_tool(node: Arc<Node>, link: Link) {
    let client = link.peer_hello().id;
    let who = format!("client {client}");
    debug!(client, "tool connected");
    let (sender, mut receiver) = link.split();
    let (reply_tx, writer) = reply_writer::<ToolReply>(sender);
    while let Some(req) = next_request::<ToolRequest>(&node, &mut receiver, &who).await {
        let partition = match &req {
            ToolRequest::StatusRequest { request_id } => {
                let _ = reply_tx.send(ToolReply::StatusReply { request_id: *request_id, status: node.status() }).await;
                continue;
            }
            ToolRequest::Shutdown { reason } => {
                info!(client, reason = %reason, "shutdown requested by a tool");
                node.stop("a tool asked");
                break;
            }
            ToolRequest::ReplicaRead { request_id, partition, .. } if !node.replicas.contains_key(partition) => {
                let outcome = wire::messages::TxnOutcome::Failed {
                    reason: format!("node {} holds no replica of partition {partition}", node.id),
                };
                let (request_id, partition) = (*request_id, *partition);
                let reply =
                    ToolReply::ReplicaReadReply { request_id, partition, seq: 0, possibly_stale: false, outcome };
                let _ = reply_tx.send(reply).await;
                continue;
            }
            ToolRequest::ReplicaRead { partition, .. } => *partition,
            ToolRequest::DigestRequest { request_id, partition } => {
                if let Some(reason) = not_ready(&node, *partition) {
                    let outcome = DigestOutcome::Rejected(Rejection::InvalidInput { problem: reason });
                    let reply = ToolReply::DigestReply { request_id: *request_id, partition: *partition, outcome };
                    let _ = reply_tx.send(reply).await;
                    continue;
                }
                *partition
            }
            ToolRequest::SnapshotRequest { request_id, partition, .. } => {
                if let Some(reason) = not_ready(&node, *partition) {
                    let refusal = snapshot::refusal(*request_id, *partition, reason);
                    let _ = reply_tx.send(ToolReply::SnapshotChunk(refusal)).await;
                    continue;
                }
                *partition
            }
        };
        let r = &node.replicas[&partition];
        if r.inbox.send(Work::Tool { req, reply: reply_tx.clone() }).await.is_err() {
            break;
        }
    }
    drop(reply_tx);
    // Let queued replies (a snapshot's last chunks) go out.
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    debug!(client, "tool disconnected");
}
