//! The coordinator's links: one listener on the coordinator's address; nodes, clients and the
//! other coordinators dial it and say who they are in their `Hello` (the transport checked
//! their certificates and cluster fingerprint before); at most `limits.client_connections_max`
//! clients at once, further ones are dropped. With several coordinators, each dials every
//! coordinator of a higher id (again [`PEER_REDIAL`] after a link broke) and accepts those of
//! a lower id: one link per pair, carrying raft messages both ways
//! ([`CoordinatorToCoordinator`]); a peer's queue holds at most [`PEER_OUTBOX_MAX`] messages,
//! past it they are dropped (raft sends again).
//!
//! Each connection has a reader task (decode, queue to the core) and a writer task (a queue to
//! the link). A node's queue is bounded in bytes ([`NODE_OUTBOX_BYTES_MAX`], [`NodeOutbox`]);
//! a client's holds [`CLIENT_OUTBOX_MAX`] frames. Backpressure on healthy peers comes from the
//! partitions' bound on transactions in flight.
//!
//! Guarantees: a node not in `cluster.toml`, a client past the limit, and a coordinator that
//! should not dial this one are refused; a node's writer ends the connection when the core
//! asks ([`NodeOutbox::close`]), even in the middle of a send that a peer which never reads
//! would hold up; the core's inbox is bounded, so a full inbox makes a reader wait, and with it
//! its peer.
//!
//! [`NODE_OUTBOX_BYTES_MAX`]: super::NODE_OUTBOX_BYTES_MAX

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tracing::{debug, error, info, warn};
use wire::channel::{ChannelMessage, CoordinatorToClient, CoordinatorToCoordinator};
use wire::config::{split_address, ClusterConfig};
use wire::endpoint::{self, EndpointLimits, Link, LinkReceiver, Listener};
use wire::messages::{CoordinatorId, NodeId, PeerKind};
use wire::tether;

use super::{hello, CoreEvent, NodeOutbox, CLIENT_OUTBOX_MAX, CLOSE_NODE_FAILED, PEER_OUTBOX_MAX, PEER_REDIAL};
use crate::carrier::ConnId;
use crate::leader::{ClientId, Detection};

/// Accepts connections and starts their tasks until the coordinator stops.
pub(super) async fn accept_loop(
    config: ClusterConfig,
    me: CoordinatorId,
    mut listener: Listener,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
    done: mpsc::Sender<()>,
) {
    let clients = Arc::new(Semaphore::new(config.limits.client_connections_max as usize));
    let mut next_conn: u64 = 1;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopping.wait_for(|s| *s) => return,
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
        let conn = next_conn;
        next_conn += 1;
        let hello = link.peer_hello().clone();
        match hello.role {
            PeerKind::Node => {
                if config.node(hello.id).is_none() {
                    warn!(node = hello.id, "a node not in cluster.toml connected; refused");
                    tokio::spawn(link.refuse("this node id is not in the coordinator's cluster.toml"));
                    continue;
                }
                let (core, stopping, done) = (core.clone(), stopping.clone(), done.clone());
                tokio::spawn(async move {
                    node_connection(hello.id, conn, link, core, stopping).await;
                    drop(done);
                });
            }
            PeerKind::Client => {
                let Ok(permit) = clients.clone().try_acquire_owned() else {
                    warn!(
                        limit = config.limits.client_connections_max,
                        "too many client connections (limits.client_connections_max); refused"
                    );
                    tokio::spawn(link.refuse("too many client connections"));
                    continue;
                };
                let (core, stopping, done) = (core.clone(), stopping.clone(), done.clone());
                tokio::spawn(async move {
                    client_connection(conn, link, core, stopping).await;
                    drop(permit);
                    drop(done);
                });
            }
            PeerKind::Coordinator => {
                // The certificate was checked against the Hello's id: this is coordinator
                // `hello.id`. Only a lower id dials (one link per pair).
                let peer = u8::try_from(hello.id).ok().filter(|&p| p < me && config.coordinator_by_id(p).is_some());
                let Some(peer) = peer else {
                    warn!(id = hello.id, "a coordinator that should not dial this one connected; refused");
                    tokio::spawn(link.refuse("only a coordinator of cluster.toml with a lower id dials this one"));
                    continue;
                };
                let (core, stopping, done) = (core.clone(), stopping.clone(), done.clone());
                tokio::spawn(async move {
                    peer_connection(peer, conn, link, None, core, stopping).await;
                    drop(done);
                });
            }
        }
    }
}

/// Dials coordinator `peer` (a higher id than `me`) and carries the link; again
/// [`PEER_REDIAL`] after it broke or could not be made, until the coordinator stops.
pub(super) async fn dial_peer_loop(
    config: ClusterConfig,
    me: CoordinatorId,
    peer: CoordinatorId,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
    done: mpsc::Sender<()>,
) {
    // Held until this task ends (the shutdown waits for it).
    let _done = done;
    let Some(address) = config.coordinator_by_id(peer).map(|c| c.address.clone()) else { return };
    let field = format!("the address of coordinator {peer}");
    let tls = match wire::tls::client_config(&config.cert_dir, wire::tls::Identity::Coordinator(u16::from(me))) {
        Ok(t) => t,
        Err(e) => {
            error!(error = %e, peer, "cannot read this coordinator's certificates; not dialling the group");
            return;
        }
    };
    let server_name = split_address(&address).map(|(h, _)| h.to_string()).unwrap_or_default();
    // Dials are numbered apart from accepted connections (they share the core's conn ids).
    let mut conn: ConnId = 1 << 48;
    let mut attempts = 0u64;
    loop {
        if *stopping.borrow() {
            return;
        }
        let link = match wire::config::resolve(&field, &address) {
            Ok(addr) => {
                let limits = EndpointLimits::to_coordinator(&config);
                let peer_role = wire::tls::Identity::Coordinator(u16::from(peer));
                let attempt =
                    endpoint::connect_to(peer_role, addr, &server_name, tls.clone(), hello(&config, me), limits);
                tokio::select! {
                    r = attempt => r.map(|link| (link, addr)).map_err(|e| e.to_string()),
                    _ = stopping.wait_for(|s| *s) => return,
                }
            }
            Err(e) => Err(e.to_string()),
        };
        match link {
            Ok((link, addr)) => {
                attempts = 0;
                conn += 1;
                let tether = Some((me, addr));
                peer_connection(peer, conn, link, tether, core.clone(), stopping.clone()).await;
            }
            Err(e) => {
                if attempts % 50 == 0 {
                    info!(peer, %address, error = %e, "coordinator not reachable yet; retrying");
                }
                attempts += 1;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(PEER_REDIAL) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}

/// Holds this coordinator's liveness tether to coordinator `peer` at `addr`, keyed to link
/// `conn`, until the link ends; if the peer's end closes after it accepted the tether, the
/// peer's process is gone ([`CoreEvent::PeerDied`]).
async fn hold_peer_tether(
    me: CoordinatorId,
    peer: CoordinatorId,
    conn: ConnId,
    addr: std::net::SocketAddr,
    key: wire::tether::TetherKey,
    link_ended: oneshot::Receiver<()>,
    core: mpsc::Sender<CoreEvent>,
) {
    let header = tether::Header { holder: tether::Holder::Coordinator(me), key };
    let released = async {
        let _ = link_ended.await;
    };
    match tether::hold(addr, &header, tether::OPEN_TIMEOUT, tether::ACCEPT_TIMEOUT, released).await {
        tether::Held::NotAccepted(why) => {
            debug!(peer, why, "no liveness tether to coordinator {peer}; its death is raft's to notice")
        }
        tether::Held::Released(_) => {}
        tether::Held::Ended(end) => {
            let how = end.how().unwrap_or_else(|| "its liveness tether ended".into());
            let _ = core.send(CoreEvent::PeerDied { peer, conn, how }).await;
        }
    }
}

/// A link's writer task: sends what is queued in order, until the queue closes (then ends
/// the stream, waiting at most a second) or a send fails.
fn spawn_writer<M: ChannelMessage>(
    mut sender: endpoint::LinkSender,
    mut queued: mpsc::Receiver<M>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(msg) = queued.recv().await {
            if sender.send(&msg).await.is_err() {
                return;
            }
        }
        sender.finish(Duration::from_secs(1)).await;
    })
}

/// One other coordinator's link: a writer of its queue, and a reader feeding the core. The
/// end that dialled (`tether`: its own id, and the address it dialled) holds the link's
/// liveness tether and watches it; the other end watches it through its tether listener.
async fn peer_connection(
    peer: CoordinatorId,
    conn: ConnId,
    link: Link,
    tether: Option<(CoordinatorId, std::net::SocketAddr)>,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
) {
    let key = link.tether_key();
    let (sender, mut receiver) = link.split();
    let (out, out_rx) = mpsc::channel::<CoordinatorToCoordinator>(PEER_OUTBOX_MAX);
    let expected = if tether.is_none() { key } else { None };
    if core.send(CoreEvent::PeerUp { peer, conn, out, tether_key: expected }).await.is_err() {
        return;
    }
    // Dropped when this link ends: lets go of the tether.
    let (_link_alive, link_ended) = oneshot::channel::<()>();
    if let (Some((me, addr)), Some(key)) = (tether, key) {
        tokio::spawn(hold_peer_tether(me, peer, conn, addr, key, link_ended, core.clone()));
    }
    let writer = spawn_writer(sender, out_rx);
    match feed_core(&mut receiver, &core, &mut stopping, |msg| CoreEvent::FromPeer { peer, conn, msg }).await {
        LinkEnd::Failed(e) if e.is_protocol_violation() => {
            warn!(peer, error = %e, "coordinator {peer} broke the protocol; its link is closed")
        }
        LinkEnd::Failed(e) => debug!(peer, error = %e, "the link to coordinator {peer} failed"),
        LinkEnd::ClosedByPeer | LinkEnd::Stopping | LinkEnd::CoreGone => {}
    }
    let _ = core.send(CoreEvent::PeerLost { peer, conn }).await;
    writer.abort();
}

/// How a link's reader stopped.
enum LinkEnd {
    /// The process is shutting down.
    Stopping,
    /// The core is gone (shutting down too).
    CoreGone,
    /// The peer ended its stream or closed the connection cleanly.
    ClosedByPeer,
    /// The link failed (a bad frame, a lost connection, …).
    Failed(endpoint::EndpointError),
}

/// Feeds every message a link receives (of the peer's channel, `M`) to the core, wrapped by
/// `wrap`, until the link ends or the process stops. The core's inbox is bounded: a full
/// inbox makes this reader wait, and with it the peer (backpressure).
async fn feed_core<M: ChannelMessage>(
    receiver: &mut LinkReceiver,
    core: &mpsc::Sender<CoreEvent>,
    stopping: &mut watch::Receiver<bool>,
    wrap: impl Fn(M) -> CoreEvent,
) -> LinkEnd {
    loop {
        let received = tokio::select! {
            r = receiver.recv::<M>() => r,
            _ = stopping.wait_for(|s| *s) => return LinkEnd::Stopping,
        };
        match received {
            Ok(Some(msg)) => {
                if core.send(wrap(msg)).await.is_err() {
                    return LinkEnd::CoreGone;
                }
            }
            Ok(None) => return LinkEnd::ClosedByPeer,
            Err(e) => return LinkEnd::Failed(e),
        }
    }
}

/// One node's link: a writer of encoded frames, and a reader feeding the core. The writer
/// ends the connection when the core asks ([`NodeOutbox::close`]), even in the middle of a
/// send that a peer which never reads would hold up until QUIC's idle timeout.
async fn node_connection(
    node: NodeId,
    conn: ConnId,
    link: Link,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
) {
    let tether_key = link.tether_key();
    if tether_key.is_none() {
        debug!(node, "the link's TLS session exports no key; the node cannot hold a liveness tether");
    }
    let (mut sender, mut receiver) = link.split();
    let (frames, mut out_rx) = mpsc::unbounded_channel::<Arc<Vec<u8>>>();
    let outbox = NodeOutbox {
        node,
        conn,
        frames,
        queued: Arc::new(AtomicUsize::new(0)),
        close: Arc::new(std::sync::OnceLock::new()),
        closed: Arc::new(tokio::sync::Notify::new()),
        tether_key,
        tether: None,
    };
    let (queued, close, closed) = (outbox.queued.clone(), outbox.close.clone(), outbox.closed.clone());
    if core.send(CoreEvent::NodeUp { node, out: outbox }).await.is_err() {
        return;
    }
    let writer = tokio::spawn(async move {
        let close_now = |sender: &endpoint::LinkSender| {
            let reason = close.get().map_or("closed", String::as_str);
            sender.close(CLOSE_NODE_FAILED, reason);
        };
        loop {
            let frame = tokio::select! {
                biased;
                () = closed.notified() => return close_now(&sender),
                f = out_rx.recv() => match f {
                    Some(f) => f,
                    None => break,
                },
            };
            tokio::select! {
                biased;
                () = closed.notified() => return close_now(&sender),
                sent = sender.send_encoded(&frame) => {
                    if let Err(e) = sent {
                        debug!(node, error = %e, "cannot send to the node");
                        return;
                    }
                }
            }
            queued.fetch_sub(frame.len(), Ordering::Relaxed);
        }
        sender.finish(Duration::from_secs(1)).await;
    });
    let detection =
        match feed_core(&mut receiver, &core, &mut stopping, |msg| CoreEvent::FromNode { node, conn, msg }).await {
            LinkEnd::ClosedByPeer => {
                info!(node, "node closed its link");
                Detection::DeathNotice
            }
            LinkEnd::Failed(e) if e.is_protocol_violation() => {
                warn!(node, error = %e, "the node broke the protocol; its link is closed");
                Detection::ConnectionLost { how: format!("protocol violation: {e}") }
            }
            LinkEnd::Failed(e) => {
                warn!(node, error = %e, "node link failed");
                Detection::ConnectionLost { how: e.to_string() }
            }
            LinkEnd::Stopping | LinkEnd::CoreGone => {
                Detection::ConnectionLost { how: "this coordinator is stopping".into() }
            }
        };
    let _ = core.send(CoreEvent::NodeLost { node, conn, detection }).await;
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
}

/// One client's link: a writer of reply frames, and a reader feeding the core.
async fn client_connection(
    client: ClientId,
    link: Link,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
) {
    let tether_key = link.tether_key();
    let (sender, mut receiver) = link.split();
    let (out, out_rx) = mpsc::channel::<CoordinatorToClient>(CLIENT_OUTBOX_MAX);
    if core.send(CoreEvent::ClientUp { client, out, tether_key }).await.is_err() {
        return;
    }
    let writer = spawn_writer(sender, out_rx);
    let peer = receiver.remote_address();
    match feed_core(&mut receiver, &core, &mut stopping, |msg| CoreEvent::FromClient { client, msg }).await {
        LinkEnd::Failed(e) if e.is_protocol_violation() => {
            warn!(client, %peer, error = %e, "the client broke the protocol; its link is closed")
        }
        LinkEnd::Failed(e) => debug!(client, error = %e, "client link failed"),
        LinkEnd::ClosedByPeer | LinkEnd::Stopping | LinkEnd::CoreGone => {}
    }
    let _ = core.send(CoreEvent::ClientGone { client }).await;
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
}
