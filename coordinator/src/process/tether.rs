//! The liveness tethers held to this coordinator ([`wire::tether`]): each node, each client
//! and each coordinator of a lower id also holds a TCP connection to this coordinator's
//! address (the TCP port of the QUIC socket's number), keyed to its QUIC link, which the
//! kernel closes the moment either process ends — SIGKILL included — where a dead process's
//! UDP socket says nothing. A second listener takes them: at most [`TETHERS_READING_MAX`]
//! headers are read at once, each within [`TETHER_HEADER_TIMEOUT`]; once matched to its link,
//! the tether is told it is accepted ([`wire::tether::accept`]), so that its holder can tell
//! this coordinator's death from a refusal.
//!
//! Guarantees: a header whose key is not that of the holder's current link is refused; an
//! accepted tether is watched until it ends or its link is forgotten. A node's end means the
//! node is lost (`Detection::ConnectionLost`, its link closed at once); a coordinator's, that
//! the peer died (an election at once if it led: docs/design.md §11, "A leader's death"); a
//! client's, nothing (its link ends by itself). Without the listener (its port taken) nodes
//! are still detected by their heartbeats, and a dead leader by raft's election timeout.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tracing::{debug, warn};
use wire::tether;

use super::{CoreEvent, TETHERS_READING_MAX, TETHER_HEADER_TIMEOUT, TETHER_RETRY};

/// Accepts the nodes' liveness tethers ([`wire::tether`]) until the coordinator stops; at
/// most [`TETHERS_READING_MAX`] are read at once.
pub(super) async fn tether_accept_loop(
    listener: tokio::net::TcpListener,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
) {
    let reading = Arc::new(Semaphore::new(TETHERS_READING_MAX));
    loop {
        let permit = tokio::select! {
            p = reading.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = stopping.wait_for(|s| *s) => return,
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopping.wait_for(|s| *s) => return,
        };
        match accepted {
            Ok((stream, from)) => {
                tokio::spawn(tether_connection(stream, from, permit, core.clone(), stopping.clone()));
            }
            Err(e) => {
                debug!(error = %e, "cannot accept a liveness tether");
                // (Out of file descriptors, say: do not spin.)
                tokio::time::sleep(TETHER_RETRY).await;
            }
        }
    }
}

/// One liveness tether: its header read (holding `permit`) and matched to its node's current
/// link, then watched until it ends — the node is lost — or the core forgets that link, or
/// the coordinator stops.
async fn tether_connection(
    mut stream: tokio::net::TcpStream,
    from: SocketAddr,
    permit: tokio::sync::OwnedSemaphorePermit,
    core: mpsc::Sender<CoreEvent>,
    mut stopping: watch::Receiver<bool>,
) {
    let deadline = tokio::time::Instant::now() + TETHER_HEADER_TIMEOUT;
    let header = match tether::read_header(&mut stream, TETHER_HEADER_TIMEOUT).await {
        Ok(h) => h,
        Err(e) => {
            debug!(%from, error = %e, "a TCP connection that is no liveness tether; dropped");
            return;
        }
    };
    let holder = header.holder;
    // The holder opens its tether once its link is up, which the core may learn a moment later.
    let (conn, mut forgotten) = loop {
        let (reply, answer) = oneshot::channel();
        if core.send(CoreEvent::Tether { holder, key: header.key, reply }).await.is_err() {
            return;
        }
        if let Ok(Some(accepted)) = answer.await {
            break accepted;
        }
        if tokio::time::Instant::now() + TETHER_RETRY > deadline {
            debug!(%holder, %from, "a liveness tether matching no current link of its holder; dropped");
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(TETHER_RETRY) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    };
    drop(permit);
    if let Err(e) = tether::accept(&mut stream).await {
        debug!(%holder, error = %e, "cannot accept a liveness tether; dropped");
        return;
    }
    let cut = tokio::select! {
        cut = tether::cut(&mut stream) => Some(cut),
        _ = &mut forgotten => None,
        // A clean stop ends the tether as a death would: the standbys elect at once.
        _ = stopping.wait_for(|s| *s) => return,
    };
    let Some(cut) = cut else {
        // The link is forgotten, not this process's end: the holder must not read a death.
        drop(tether::let_go(stream).await);
        return;
    };
    match cut.how() {
        Some(how) => {
            let _ = core.send(CoreEvent::TetherCut { holder, conn, how }).await;
        }
        None if matches!(cut, tether::Cut::Released) => debug!(%holder, "{holder} let go of its liveness tether"),
        None => warn!(%holder, "{holder} wrote on its liveness tether, which it must not; no longer watched"),
    }
}
