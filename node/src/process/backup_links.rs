//! Passive modes, at a primary: the links to its backup nodes. The writer task sends each
//! batch's shipment (encoded once) to a link per backup node, which the node dials and keeps;
//! the partition's [`ShipGate`] holds the results until the backups acknowledged them
//! (`shipping = "sync"`) and measures their lag. A backup whose link cannot take
//! [`PEER_QUEUE_MAX`] more shipments is dropped from shipping (logged) rather than let the
//! writer — and the node's heartbeats — wait for it.
//!
//! Guarantees: queuing a shipment never waits (a backup whose queue is full or whose link is
//! gone is dropped from shipping instead); a backup's acknowledgements reach the writer task,
//! in the order the backup sent them; a backup is dialled when the node machine says so
//! (`NodeEffect::OpenPeer`, `NodeEffect::DialPeer`: at first, then [`CONNECT_RETRY_MS`] after
//! each failed dial), and each dial's outcome goes back to the machine
//! (`NodeMachine::on_peer_dial`); a link the machine closes, or replaces, ends at once — a
//! send blocked on a backup that does not read included — and what was queued on it is
//! dropped.
//!
//! [`ShipGate`]: crate::shipping::ShipGate

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};
use wire::channel::{ChannelMessage, PeerReply, PeerRequest};
use wire::endpoint::Link;
use wire::messages::{NodeId, Shipment};

use super::coordinator_links::{dial_once, DialFailure};
use super::{Node, OutboxEvent};
use crate::carrier::{Queued, PEER_QUEUE_MAX};
use crate::machine::{NodeMachine, PeerDial};

#[cfg(doc)]
use super::CONNECT_RETRY_MS;

/// The node's link to one backup's node, as the writer task queues on it.
#[derive(Debug)]
pub(super) struct PeerQueue {
    /// The link's generation (`NodeEffect::OpenPeer`).
    generation: u64,
    /// Encoded shipments, sent once the link is up.
    frames: mpsc::Sender<Arc<Vec<u8>>>,
    /// A dial the node machine asked for (`NodeEffect::DialPeer`); dropped with the link,
    /// which ends its task.
    dial: mpsc::Sender<()>,
}

/// Dials backup node `peer` each time the node machine says so, telling the machine how each
/// dial ended, until one is up (the link), the node is refused (`None`), the link is closed
/// or replaced, or the node stops.
async fn dial_backup(node: &Node, peer: NodeId, generation: u64, dials: &mut mpsc::Receiver<()>) -> Option<Link> {
    let address = node.config.node(peer).map(|n| n.address.clone())?;
    let what = format!("nodes[{peer}].address");
    let mut attempt = 0u32;
    loop {
        tokio::select! {
            d = dials.recv() => d?,
            () = node.stopped() => return None,
        }
        let (outcome, link) = match dial_once(node, wire::tls::Identity::Node(peer), &what, &address, attempt).await {
            Ok(link) => (PeerDial::Up, Some(link)),
            Err(DialFailure::Stopped) => return None,
            Err(DialFailure::Refused) => (PeerDial::Refused, None),
            Err(DialFailure::Unreachable) => {
                attempt = attempt.wrapping_add(1);
                (PeerDial::Unreachable, None)
            }
        };
        if node.events.send(OutboxEvent::PeerDial { backup: peer, generation, outcome }).await.is_err() {
            return None;
        }
        match (outcome, link) {
            (PeerDial::Up, Some(link)) => {
                info!(backup = peer, %address, "shipping to backup");
                return Some(link);
            }
            (PeerDial::Refused, _) => return None,
            _ => {}
        }
    }
}

/// Queues an encoded shipment for each of `backups`, pushing onto `queued` what became of
/// it: lost for a backup whose queue is full or whose link task ended (the machine drops it
/// from shipping), or how many shipments the backup's queue holds now.
pub(super) fn ship(node: &Node, backups: &[NodeId], shipment: Shipment, queued: &mut Vec<(NodeId, Queued)>) {
    let (partition, seq) = (shipment.partition, shipment.seq);
    let frame = match wire::codec::encode(&PeerRequest::Ship(shipment), node.config.limits.frame_bytes_max as usize) {
        Ok(frame) => Arc::new(frame),
        Err(e) => {
            error!(partition, seq, error = %e, "cannot encode a shipment; backups dropped");
            queued.extend(backups.iter().map(|&b| (b, Queued::Lost)));
            return;
        }
    };
    let peers = node.peers.lock().unwrap_or_else(|e| e.into_inner());
    let mut sent = 0u64;
    for &backup in backups {
        let peer = peers.get(&backup).map(|p| &p.frames);
        let q = match peer.map(|p| (p, p.try_send(frame.clone()))) {
            Some((p, Ok(()))) => {
                sent += 1;
                Queued::Holds(p.max_capacity() - p.capacity())
            }
            Some((_, Err(mpsc::error::TrySendError::Full(_)))) => {
                error!(partition, backup, limit = PEER_QUEUE_MAX, "backup too far behind; no longer shipped to");
                Queued::Lost
            }
            _ => {
                error!(partition, backup, "the link to the backup is gone; no longer shipped to");
                Queued::Lost
            }
        };
        queued.push((backup, q));
    }
    if let Some(r) = node.replicas.get(&partition) {
        r.shared.shipped_bytes.fetch_add(sent * frame.len() as u64, Ordering::Relaxed);
    }
}

/// A new link to backup node `backup` (replacing any older one), dialled at once.
pub(super) fn open_peer(node: &Node, backup: NodeId, generation: u64) {
    let (frames, rx) = mpsc::channel(PEER_QUEUE_MAX);
    let (dial, mut dials) = mpsc::channel(1);
    let _ = dial.try_send(());
    node.peers.lock().unwrap_or_else(|e| e.into_inner()).insert(backup, PeerQueue { generation, frames, dial });
    let Some(me) = node.me.upgrade() else { return };
    tokio::spawn(async move {
        if let Some(link) = dial_backup(&me, backup, generation, &mut dials).await {
            peer_link(me, backup, link, rx, dials).await;
        }
    });
}

/// Dials the link to backup node `backup` again, if it is still the link of `generation`.
pub(super) fn dial_peer(node: &Node, backup: NodeId, generation: u64) {
    if let Some(p) = node.peers.lock().unwrap_or_else(|e| e.into_inner()).get(&backup) {
        if p.generation == generation {
            // Full: a dial is already due.
            let _ = p.dial.try_send(());
        }
    }
}

/// Closes the link to backup node `backup`: its task ends at once, and what is queued on it
/// is dropped.
pub(super) fn close_peer(node: &Node, backup: NodeId) {
    if node.peers.lock().unwrap_or_else(|e| e.into_inner()).remove(&backup).is_some() {
        info!(backup, "no partition ships to the backup any more; its link is closed");
    }
}

/// Copies the gates' lag figures to their replicas' shared state.
pub(super) fn publish_gates(node: &Node, machine: &NodeMachine) {
    for (&partition, r) in &node.replicas {
        // No gate (no longer a primary, or its backups dropped): nothing lags behind it now.
        let st = machine.gate_stats(partition).unwrap_or_default();
        r.shared.acks.store(st.acks, Ordering::Relaxed);
        r.shared.ack_delay_us_sum.store(st.ack_delay_us_sum, Ordering::Relaxed);
        r.shared.ack_delay_us_max.store(st.ack_delay_us_max, Ordering::Relaxed);
    }
}

/// The link to backup node `peer`, once up: sends the shipments queued on `rx`, and hands
/// its acknowledgements to the writer task.
/// It ends at once when the node machine closes or replaces the link (its [`PeerQueue`] is
/// dropped), a send blocked on a backup that does not read included.
async fn peer_link(
    node: Arc<Node>,
    peer: NodeId,
    link: Link,
    mut rx: mpsc::Receiver<Arc<Vec<u8>>>,
    mut dials: mpsc::Receiver<()>,
) {
    let (mut sender, mut receiver) = link.split();
    let events = node.events.clone();
    let reader = tokio::spawn(async move {
        loop {
            match receiver.recv::<PeerReply>().await {
                Ok(Some(PeerReply::ShipAck { partition, seq })) => {
                    if events.send(OutboxEvent::Ack { from: peer, partition, seq }).await.is_err() {
                        return;
                    }
                }
                // This link asks for no transfer.
                Ok(Some(reply @ (PeerReply::SnapshotChunk(_) | PeerReply::LogBaseChunk(_)))) => {
                    warn!(backup = peer, message = reply.name(), "a backup sent a transfer piece unasked; ignored")
                }
                Ok(None) => return,
                Err(e) if e.is_protocol_violation() => {
                    warn!(backup = peer, error = %e, "the backup broke the protocol; its link is closed");
                    return;
                }
                Err(e) => {
                    debug!(backup = peer, error = %e, "the link to the backup ended");
                    return;
                }
            }
        }
    });
    // Ends when the link's `PeerQueue` is dropped (a dial asked for after it came up is moot).
    let closed = async { while dials.recv().await.is_some() {} };
    tokio::pin!(closed);
    loop {
        let frame = tokio::select! {
            f = rx.recv() => match f {
                Some(f) => f,
                None => break,
            },
            () = &mut closed => break,
            () = node.stopped() => break,
        };
        tokio::select! {
            sent = sender.send_encoded(&frame) => if let Err(e) = sent {
                if !*node.stopping.borrow() {
                    error!(backup = peer, error = %e, "the link to the backup failed");
                }
                break;
            },
            () = &mut closed => {
                debug!(backup = peer, "the link to the backup is closed while a shipment waits for it to read");
                break;
            }
        }
    }
    reader.abort();
}
