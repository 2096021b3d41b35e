//! The QUIC transport (tokio + quinn, mutual TLS from [`crate::tls`]): listening, dialling,
//! and [`Link`], one authenticated connection carrying [`codec`](crate::codec) frames on one
//! bidirectional stream in each direction.
//!
//! A connection's life:
//!
//! ```text
//! dialler (connect, connect_to)              listener (Listener::accept)
//!   QUIC + TLS 1.3 handshake  ─────────────▶  client certificate checked against the CA
//!   connect_to: the listener's certificate
//!   must be the identity dialled
//!   open stream, send Hello   ─────────────▶  read Hello (within handshake_timeout);
//!                                             certificate not the identity the Hello
//!                                             claims → closed, CLOSE_IDENTITY_REFUSED;
//!                                             version or fingerprint differs → HelloRefused
//!   read the reply; it must   ◀─────────────  our Hello → Link handed to accept()'s caller
//!   match the listener's certificate
//! ```
//!
//! Guarantees:
//! - no [`Link`] exists before both sides' certificates were verified against the cluster's CA
//!   and both Hellos were exchanged; under TLS 1.3 a client whose certificate the server
//!   refuses still sees its handshake complete, so [`connect`] waits for the reply Hello and
//!   turns the refusal into [`EndpointError::CertificateRefused`];
//! - identities (defect #14, item 3): every certificate is bound to one identity —
//!   coordinator N, node N or the client ([`crate::tls::check_identity`]). A listener refuses a
//!   Hello whose role (and, for a node, id) is not the identity of the certificate presented
//!   ([`EndpointError::IdentityMismatch`]; the dialler gets
//!   [`EndpointError::IdentityRefused`]), so a client can never act as a node or a
//!   coordinator, nor node 1 as node 2; a dialler refuses a reply Hello that is not its
//!   listener's certificate's identity, and [`connect_to`] refuses a listener that is not the
//!   identity it meant to reach ([`EndpointError::WrongPeer`]) before sending anything;
//! - a failing peer (bad certificate, no Hello, a bad frame) is an error of that peer alone:
//!   [`Listener::accept`] returns it and the listener keeps serving; only
//!   [`EndpointError::ListenerClosed`] ends a listener;
//! - every way a connection ends between the handshake and the handover of its [`Link`] —
//!   a refused Hello or identity, a bad or missing Hello, a timeout, the listener or the
//!   dialler giving up — closes it at once with an application code (`CLOSE_*`) and a reason
//!   the peer reads (defect #14, item 4): a peer never waits out the idle timeout to learn it
//!   was refused;
//! - the protocol version is checked at connection time: a Hello naming another version, or
//!   framed in another, is refused ([`EndpointError::HelloRejected`] with
//!   [`HelloMismatch::Version`], naming both versions; the peer is told why);
//! - after the Hellos a link carries one channel's messages ([`crate::channel`]), the enum
//!   the caller names in [`LinkReceiver::recv`]; a malformed or oversized frame, one of another
//!   protocol version or one whose tag names no message of the channel makes `recv` return
//!   [`EndpointError::Frame`] and closes that connection — only that one — with
//!   [`CLOSE_PROTOCOL_VIOLATION`];
//! - a peer closing with [`CLOSE_NORMAL`] or finishing its stream ends [`LinkReceiver::recv`]
//!   with `Ok(None)`; dropping a link (or its sender half) finishes its stream and keeps the
//!   connection until the peer has everything sent before (at most a few seconds), so the last
//!   frames are not lost; [`Link::close`] closes at once.
//!
//! Memory (defect #14, item 2). Every buffer a peer can fill is bounded by `cluster.toml`
//! ([`EndpointLimits`], docs/cluster.md "Limits"). For one connection:
//! - QUIC's receive buffers hold at most `limits.receive_window_bytes`: that is both the
//!   connection's window (all its streams together) and its one stream's. A link uses one
//!   bidirectional stream, opened by the dialler, so a listener grants a peer exactly one
//!   ([`STREAMS_PER_CONNECTION`]) and a dialler none: a further stream cannot be opened (the
//!   peer waits for a credit that never comes), never buffered; unidirectional streams and
//!   unreliable datagrams are refused;
//! - the link's frame buffer holds at most one frame of `limits.frame_bytes_max` bytes; it
//!   grows with the bytes actually received, and before the Hellos are exchanged a frame may
//!   not exceed [`HELLO_FRAME_BYTES_MAX`];
//! - QUIC keeps at most `limits.send_window_bytes` of what this process sent and the peer has
//!   not acknowledged.
//!
//! So the most a peer can make a process hold for one connection is
//! [`EndpointLimits::peer_bytes_max`] = `receive_window_bytes + send_window_bytes +
//! frame_bytes_max`, and for a listener [`EndpointLimits::listener_bytes_max`] =
//! `connections_max × peer_bytes_max` plus [`INCOMING_BUFFER_BYTES_TOTAL`] for connection
//! attempts not yet accepted. (What the process does with the messages it decodes is bounded
//! by its own queues, not here.)
//!
//! Replying to a Hello beyond version, fingerprint and identity (an unknown node id, a second
//! coordinator) is the caller's: [`Link::refuse`] sends `HelloRefused` and closes.
//!
//! Awaiting one answer among a channel's messages, with a deadline, is [`recv_matching`]
//! (failing with a [`RecvError`] that names the peer by [`Link::peer_name`]).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{ConnectionError, ReadError, RecvStream, SendStream, TransportConfig, VarInt, WriteError};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use rustls::pki_types::CertificateDer;

use crate::channel::{ChannelMessage, Handshake};
use crate::codec::{self, FRAME_BYTES_MAX_DEFAULT, LENGTH_PREFIX_BYTES};
use crate::config::{ClusterConfig, Limits};
use crate::error::{CodecError, HelloMismatch};
use crate::messages::{bounded_reason, Hello, PeerKind, PROTOCOL_VERSION};
use crate::tether::{self, TetherKey};
use crate::tls::{self, Identity, IdentityProblem};

/// Application close code: the link is done (not an error).
pub const CLOSE_NORMAL: u32 = 0;
/// Application close code: the peer sent a frame that is oversized, malformed or unexpected.
pub const CLOSE_PROTOCOL_VIOLATION: u32 = 1;
/// Application close code: the peer's Hello was refused.
pub const CLOSE_HELLO_REFUSED: u32 = 2;
/// Application close code: the peer sent no Hello in time (or, from a dialler, got no reply
/// in time).
pub const CLOSE_HELLO_TIMEOUT: u32 = 3;
/// Application close code: the peer's certificate is not the identity its Hello claims, or
/// not the identity the dialler meant to reach.
pub const CLOSE_IDENTITY_REFUSED: u32 = 4;
/// Application close code: the listener stopped (its process is shutting down) before the
/// Hello exchange finished.
pub const CLOSE_LISTENER_CLOSED: u32 = 5;

/// Bidirectional streams a listener lets a peer open on one connection: a link uses one
/// (opened by the dialler). A dialler lets the listener open none.
pub const STREAMS_PER_CONNECTION: u32 = 1;
/// Largest frame accepted before the Hellos are exchanged: a Hello or a `HelloRefused` (its
/// reason at most `messages::REASON_BYTES_MAX` bytes) needs far less.
pub const HELLO_FRAME_BYTES_MAX: usize = 1_024;
/// Bytes a listener buffers for one connection attempt it has not accepted yet (handshake
/// packets arriving before `accept`; quinn's default is 10 MiB).
pub const INCOMING_BUFFER_BYTES: u64 = 64 << 10;
/// Bytes a listener buffers for all connection attempts it has not accepted yet (quinn's
/// default is 100 MiB).
pub const INCOMING_BUFFER_BYTES_TOTAL: u64 = 1 << 20;

/// Initial size of a receiver's buffer; it grows to the largest frame received, at most
/// `frame_bytes_max`.
const RECV_BUFFER_BYTES_INITIAL: usize = 64 << 10;
/// Period of QUIC keep-alives, so an idle link is not timed out.
const KEEP_ALIVE_MS: u64 = 2_000;
/// QUIC idle timeout: a peer silent this long (keep-alives included) is gone.
pub const IDLE_TIMEOUT_MS: u32 = 30_000;
/// How long a dropped link's connection stays open for its last frames to be delivered.
const LINGER_MS: u64 = 3_000;

/// Packets a peer may receive before it must acknowledge (quinn's default: 1, every other one).
const ACK_ELICITING_THRESHOLD: u32 = 16;
/// How long a peer may delay an acknowledgement.
const MAX_ACK_DELAY_MS: u64 = 2;
/// The largest UDP payload an endpoint accepts and MTU discovery may probe for. QUIC starts
/// every path at 1,200 bytes and probes upward (RFC 9000 §14.3); quinn stops at 1,452 by
/// default, which on loopback (MTU 65,536) or a jumbo-frame network splits a 64-transaction
/// batch into four or more packets, each decrypted, acknowledged and woken for separately.
/// Where the path is narrower the probes are simply lost and discovery settles below it.
const UDP_PAYLOAD_BYTES_MAX: u16 = 65_000;

/// The limits a listener or a dialler applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointLimits {
    /// Largest frame sent or accepted, length prefix included (`limits.frame_bytes_max`).
    pub frame_bytes_max: usize,
    /// Connections a listener holds at once, handshaking or established
    /// (`limits.client_connections_max`); ignored when dialling.
    pub connections_max: usize,
    /// Time for the QUIC handshake and the Hello exchange (`timeouts.connect_timeout_ms`).
    pub handshake_timeout: Duration,
    /// QUIC receive window of a connection — bytes the peer may have sent that this process
    /// has not read, all streams together — and of its one stream
    /// (`limits.receive_window_bytes`).
    pub receive_window_bytes: u32,
    /// Bytes QUIC keeps of what this process sent on a connection and the peer has not
    /// acknowledged (`limits.send_window_bytes`); a write past it waits.
    pub send_window_bytes: u32,
    /// How long a connection may receive nothing (keep-alives included) before it counts as
    /// gone; the shorter of the two ends' wins. [`IDLE_TIMEOUT_MS`] by default; links to the
    /// coordinators of a group dial with less ([`EndpointLimits::to_coordinator`]).
    pub idle_timeout_ms: u32,
    /// Period of this end's QUIC keep-alives ([`KEEP_ALIVE_MS`] by default).
    pub keep_alive_ms: u64,
}

impl EndpointLimits {
    /// The limits `cluster.toml` sets.
    pub fn from_config(cfg: &ClusterConfig) -> EndpointLimits {
        EndpointLimits {
            frame_bytes_max: cfg.limits.frame_bytes_max as usize,
            connections_max: cfg.limits.client_connections_max as usize,
            handshake_timeout: Duration::from_millis(cfg.timeouts.connect_timeout_ms),
            receive_window_bytes: cfg.limits.receive_window_bytes,
            send_window_bytes: cfg.limits.send_window_bytes,
            idle_timeout_ms: IDLE_TIMEOUT_MS,
            keep_alive_ms: KEEP_ALIVE_MS,
        }
    }

    /// The most bytes a peer can make this process hold for one connection: QUIC's receive
    /// window, its send window and one frame buffer (see the module documentation).
    pub fn peer_bytes_max(&self) -> u64 {
        u64::from(self.receive_window_bytes) + u64::from(self.send_window_bytes) + self.frame_bytes_max as u64
    }

    /// The limits of a link dialled to a coordinator of `cfg`. With a coordinator group
    /// (docs/design.md §11), a coordinator killed without a word (SIGKILL: no close frame)
    /// must count as gone as soon as a node would for the coordinator: after
    /// `timeouts.failure_timeout_ms` without a packet, keep-alives every
    /// `timeouts.heartbeat_ms` × 2 (each acknowledged within [`MAX_ACK_DELAY_MS`]). A client
    /// then turns to the new leader, and a node dials the killed one again — it may restart
    /// and lead — instead of holding a dead link for [`IDLE_TIMEOUT_MS`]. With one coordinator
    /// nothing takes over, and the defaults stand.
    pub fn to_coordinator(cfg: &ClusterConfig) -> EndpointLimits {
        let mut limits = EndpointLimits::from_config(cfg);
        if cfg.coordinators.len() > 1 {
            let idle = cfg.timeouts.failure_timeout_ms.max(4 * cfg.timeouts.heartbeat_ms).max(100);
            limits.idle_timeout_ms = u32::try_from(idle).unwrap_or(IDLE_TIMEOUT_MS);
            limits.keep_alive_ms = (2 * cfg.timeouts.heartbeat_ms).clamp(10, KEEP_ALIVE_MS);
        }
        limits
    }

    /// The most bytes the peers of a listener can make it hold: `connections_max` times
    /// [`EndpointLimits::peer_bytes_max`], plus [`INCOMING_BUFFER_BYTES_TOTAL`].
    pub fn listener_bytes_max(&self) -> u64 {
        self.connections_max as u64 * self.peer_bytes_max() + INCOMING_BUFFER_BYTES_TOTAL
    }
}

impl Default for EndpointLimits {
    fn default() -> EndpointLimits {
        let limits = Limits::default();
        EndpointLimits {
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
            connections_max: limits.client_connections_max as usize,
            handshake_timeout: Duration::from_millis(5_000),
            receive_window_bytes: limits.receive_window_bytes,
            send_window_bytes: limits.send_window_bytes,
            idle_timeout_ms: IDLE_TIMEOUT_MS,
            keep_alive_ms: KEEP_ALIVE_MS,
        }
    }
}

/// Why a connection could not be made, accepted or used.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The UDP socket could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The TLS configuration cannot carry QUIC (it lacks TLS 1.3's initial cipher suite).
    #[error("TLS configuration unusable for QUIC: {detail}")]
    TlsConfig { detail: String },
    /// The connection could not be started (an invalid server name, a closed endpoint).
    #[error("cannot connect to {server_name} ({addr}): {detail}")]
    Connect { addr: SocketAddr, server_name: String, detail: String },
    /// The handshake or the Hello exchange took longer than the limit.
    #[error("{addr}: no {what} within {timeout:?}")]
    Timeout { addr: SocketAddr, what: &'static str, timeout: Duration },
    /// The peer refused this process's certificate (after a handshake that looked complete:
    /// TLS 1.3 clients learn it on their first stream operation).
    #[error(
        "{server_name} ({addr}) refused this {role}'s certificate (is it from this cluster's CA? run `glass \
         cluster init`): {detail}"
    )]
    CertificateRefused { addr: SocketAddr, server_name: String, role: PeerKind, detail: String },
    /// The dialled peer's certificate is not valid for this cluster (another CA, or the dialled
    /// name is not among its names).
    #[error(
        "the certificate of {server_name} ({addr}) is not valid here: {detail} (is it from this cluster's CA, and \
         is `{server_name}` one of its names? run `glass cluster init`)"
    )]
    PeerCertificateInvalid { addr: SocketAddr, server_name: String, detail: String },
    /// A peer dialling the listener presented no certificate, or one not from the CA.
    #[error("refused {addr}: its certificate is missing or not from this cluster's CA ({detail})")]
    ClientCertificateRejected { addr: SocketAddr, detail: String },
    /// Any other handshake failure.
    #[error("handshake with {addr} failed: {detail}")]
    Handshake { addr: SocketAddr, detail: String },
    /// The listener already holds `connections_max` connections; the peer was refused.
    #[error("refused {addr}: already {connections_max} connections")]
    TooManyConnections { addr: SocketAddr, connections_max: usize },
    /// The dialled listener is full and refused the connection.
    #[error("{server_name} ({addr}) refused the connection: it has too many connections")]
    Busy { addr: SocketAddr, server_name: String },
    /// The peer answered the Hello with `HelloRefused`.
    #[error("{addr} refused this process: {reason}")]
    HelloRefused { addr: SocketAddr, reason: String },
    /// This side refused the peer's Hello (another protocol version or cluster): the peer
    /// was told why ([`CLOSE_HELLO_REFUSED`]).
    #[error("refused {addr}'s Hello: {mismatch}")]
    HelloRejected {
        addr: SocketAddr,
        #[source]
        mismatch: HelloMismatch,
    },
    /// The peer's Hello claims an identity its certificate is not (a client's certificate
    /// with a node's Hello, node 1's with node 2's); the connection was closed with
    /// [`CLOSE_IDENTITY_REFUSED`].
    #[error("refused {addr}: its Hello claims to be the {claimed}, but {problem}")]
    IdentityMismatch { addr: SocketAddr, claimed: Identity, problem: IdentityProblem },
    /// The peer refused this process's Hello because this process's certificate is not the
    /// identity the Hello claims (it closed with [`CLOSE_IDENTITY_REFUSED`]).
    #[error("{addr} refused this process's identity: {reason}")]
    IdentityRefused { addr: SocketAddr, reason: String },
    /// The dialled listener is not the process [`connect_to`] meant to reach: its certificate
    /// is another identity's (another process holds the address, or `cluster.toml` names the
    /// wrong address).
    #[error("{server_name} ({addr}) is not the {expected}: {problem}")]
    WrongPeer { addr: SocketAddr, server_name: String, expected: Identity, problem: IdentityProblem },
    /// The peer's first message was not a Hello.
    #[error("{addr} sent {got} instead of a Hello")]
    NoHello { addr: SocketAddr, got: String },
    /// The peer sent an oversized or malformed frame; the connection was closed.
    #[error("{addr} sent a bad frame, connection closed: {source}")]
    Frame {
        addr: SocketAddr,
        #[source]
        source: CodecError,
    },
    /// The peer's stream ended in the middle of a frame.
    #[error("{addr} ended its stream inside a frame ({buffered_bytes} bytes pending)")]
    Truncated { addr: SocketAddr, buffered_bytes: usize },
    /// The peer closed the connection with an error code.
    #[error("{addr} closed the connection (code {code}): {reason}")]
    ClosedByPeer { addr: SocketAddr, code: u64, reason: String },
    /// The connection was lost (timeout, reset, transport error).
    #[error("connection to {addr} lost: {source}")]
    ConnectionLost {
        addr: SocketAddr,
        #[source]
        source: ConnectionError,
    },
    /// The peer reset or stopped the stream (the connection itself may still be open).
    #[error("{addr} reset or stopped the stream: {detail}")]
    Stream { addr: SocketAddr, detail: String },
    /// A message could not become a frame (it exceeds `frame_bytes_max`); nothing was sent.
    #[error("cannot send to {addr}: {source}")]
    Encode {
        addr: SocketAddr,
        #[source]
        source: CodecError,
    },
    /// The listener's endpoint is closed: [`Listener::accept`] will return nothing more.
    #[error("the listener is closed")]
    ListenerClosed,
}

/// Why [`recv_matching`] brought no answer.
#[derive(Debug, thiserror::Error)]
pub enum RecvError {
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The peer did not answer in time.
    #[error("{peer} did not answer {what} within {timeout:?}")]
    Timeout { peer: String, what: &'static str, timeout: Duration },
    /// The peer closed the link before answering.
    #[error("{peer} closed the link before answering {what}")]
    Closed { peer: String, what: &'static str },
}

impl EndpointError {
    /// Whether the error ends the listener (rather than concerning one peer).
    pub fn is_listener_closed(&self) -> bool {
        matches!(self, EndpointError::ListenerClosed)
    }

    /// Whether the peer broke the protocol after the handshake — a frame oversized,
    /// malformed, of another protocol version, with a tag naming no message of the channel, or
    /// cut off — so the link closed it ([`CLOSE_PROTOCOL_VIOLATION`]): worth a warning naming
    /// the peer, unlike a peer that merely went away.
    pub fn is_protocol_violation(&self) -> bool {
        matches!(self, EndpointError::Frame { .. } | EndpointError::Truncated { .. })
    }

    /// Whether a listener refused the peer for who it claims to be (another identity, cluster
    /// or CA) — worth an operator's look, unlike a peer that merely went away or timed out.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            EndpointError::IdentityMismatch { .. }
                | EndpointError::HelloRejected { .. }
                | EndpointError::ClientCertificateRejected { .. }
        )
    }
}

/// Whether a QUIC error code is a TLS alert (RFC 9001 §4.8: `0x100 + alert`).
fn is_crypto_code(code: u64) -> bool {
    (0x100..0x200).contains(&code)
}

/// What ends a link's use: a closed connection as seen from one side.
fn lost(addr: SocketAddr, e: ConnectionError) -> EndpointError {
    match e {
        ConnectionError::ApplicationClosed(close) => EndpointError::ClosedByPeer {
            addr,
            code: close.error_code.into_inner(),
            reason: String::from_utf8_lossy(&close.reason).into_owned(),
        },
        other => EndpointError::ConnectionLost { addr, source: other },
    }
}

/// The error a dialler sees when the connection fails after `connect()` succeeded.
fn lost_while_dialling(addr: SocketAddr, server_name: &str, role: PeerKind, e: ConnectionError) -> EndpointError {
    match &e {
        ConnectionError::ConnectionClosed(close) if is_crypto_code(close.error_code.into()) => {
            EndpointError::CertificateRefused {
                addr,
                server_name: server_name.to_string(),
                role,
                detail: close.to_string(),
            }
        }
        ConnectionError::ConnectionClosed(close) if u64::from(close.error_code) == 0x2 => {
            EndpointError::Busy { addr, server_name: server_name.to_string() }
        }
        ConnectionError::TransportError(t) if is_crypto_code(t.code.into()) => {
            EndpointError::PeerCertificateInvalid { addr, server_name: server_name.to_string(), detail: t.to_string() }
        }
        _ => refused_at_hello(lost(addr, e)),
    }
}

/// A dialler's reading of the listener closing the connection during the Hello exchange: the
/// close codes of a refusal become their typed errors.
fn refused_at_hello(e: EndpointError) -> EndpointError {
    match e {
        EndpointError::ClosedByPeer { addr, code, reason } if code == u64::from(CLOSE_IDENTITY_REFUSED) => {
            EndpointError::IdentityRefused { addr, reason }
        }
        EndpointError::ClosedByPeer { addr, code, reason } if code == u64::from(CLOSE_HELLO_REFUSED) => {
            EndpointError::HelloRefused { addr, reason }
        }
        other => other,
    }
}

/// Closes `conn` with `code` and `reason` (at most [`crate::messages::REASON_BYTES_MAX`]
/// bytes), making sure the CONNECTION_CLOSE is sent: see [`CloseableCubic`].
fn close(conn: &quinn::Connection, code: u32, reason: &str) {
    if let Ok(congestion) = conn.congestion_state().into_any().downcast::<CloseableCubic>() {
        congestion.closing.store(true, Ordering::Relaxed);
    }
    conn.close(VarInt::from_u32(code), bounded_reason(reason.to_string()).as_bytes());
}

/// The key of the liveness tether standing for `conn` ([`crate::tether`]): exported from
/// the connection's TLS session under [`tether::KEY_LABEL`], the same at both ends of one
/// connection and different for every other. `None` if the session cannot export (then the
/// link has no tether; heartbeats still detect a dead peer).
fn tether_key(conn: &quinn::Connection) -> Option<TetherKey> {
    let mut key = [0u8; tether::KEY_BYTES];
    conn.export_keying_material(&mut key, tether::KEY_LABEL, b"").ok()?;
    Some(TetherKey(key))
}

/// quinn's Cubic congestion controller, whose window opens once its connection is closing.
///
/// quinn-proto 0.11.19 (quinn issue #2785, fixed upstream by PR #2787 but not released)
/// holds a CONNECTION_CLOSE back while the congestion window is full, and once closed it
/// processes no acknowledgement and no loss timer, so the window never empties: the close is
/// never sent and the peer waits out its idle timeout. Right after a handshake the window is
/// often full — MTU discovery probes up to [`UDP_PAYLOAD_BYTES_MAX`]-byte packets against an
/// initial window of 14,720 bytes — which is exactly when a refused Hello is closed. [`close`]
/// sets `closing` (shared by the clones `congestion_state` returns) before closing, so the
/// close leaves at once; nothing but the close is sent after it. Remove once a quinn-proto
/// with the fix is used.
struct CloseableCubic {
    inner: Box<dyn quinn::congestion::Controller>,
    closing: Arc<AtomicBool>,
}

/// Builds a [`CloseableCubic`] for each connection.
#[derive(Debug, Default)]
struct CloseableCubicFactory {
    cubic: Arc<quinn::congestion::CubicConfig>,
}

impl quinn::congestion::ControllerFactory for CloseableCubicFactory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn quinn::congestion::Controller> {
        let inner = self.cubic.clone().build(now, current_mtu);
        Box::new(CloseableCubic { inner, closing: Arc::new(AtomicBool::new(false)) })
    }
}

impl quinn::congestion::Controller for CloseableCubic {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.inner.on_sent(now, bytes, last_packet_number)
    }

    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool, rtt: &quinn_proto::RttEstimator) {
        self.inner.on_ack(now, sent, bytes, app_limited, rtt)
    }

    fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool, largest_acked: Option<u64>) {
        self.inner.on_end_acks(now, in_flight, app_limited, largest_acked)
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant, is_persistent_congestion: bool, lost_bytes: u64) {
        self.inner.on_congestion_event(now, sent, is_persistent_congestion, lost_bytes)
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.inner.on_mtu_update(new_mtu)
    }

    fn window(&self) -> u64 {
        if self.closing.load(Ordering::Relaxed) {
            // Far above anything in flight, far below overflowing a sum with it.
            u64::MAX >> 2
        } else {
            self.inner.window()
        }
    }

    fn metrics(&self) -> quinn::congestion::ControllerMetrics {
        self.inner.metrics()
    }

    fn clone_box(&self) -> Box<dyn quinn::congestion::Controller> {
        Box::new(CloseableCubic { inner: self.inner.clone_box(), closing: self.closing.clone() })
    }

    fn initial_window(&self) -> u64 {
        self.inner.initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// Which end of a connection a transport configuration is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Listener,
    Dialler,
}

/// QUIC's transport parameters: every receive and send buffer bounded by `limits` (see the
/// module documentation, "Memory").
fn transport_config(limits: &EndpointLimits, side: Side) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    t.keep_alive_interval(Some(Duration::from_millis(limits.keep_alive_ms)));
    t.max_idle_timeout(Some(VarInt::from_u32(limits.idle_timeout_ms).into()));
    // The dialler opens the link's one stream; the listener opens none.
    let streams = match side {
        Side::Listener => STREAMS_PER_CONNECTION,
        Side::Dialler => 0,
    };
    t.max_concurrent_bidi_streams(VarInt::from_u32(streams));
    t.max_concurrent_uni_streams(VarInt::from_u32(0));
    let window = VarInt::from_u32(limits.receive_window_bytes);
    t.stream_receive_window(window);
    t.receive_window(window);
    t.send_window(u64::from(limits.send_window_bytes));
    // No unreliable datagrams: a peer's would sit unread in a buffer.
    t.datagram_receive_buffer_size(None);
    let mut ack = quinn::AckFrequencyConfig::default();
    ack.ack_eliciting_threshold(VarInt::from_u32(ACK_ELICITING_THRESHOLD));
    ack.max_ack_delay(Some(Duration::from_millis(MAX_ACK_DELAY_MS)));
    t.ack_frequency_config(Some(ack));
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(UDP_PAYLOAD_BYTES_MAX);
    t.mtu_discovery_config(Some(mtu));
    t.congestion_controller_factory(Arc::new(CloseableCubicFactory::default()));
    Arc::new(t)
}

/// The receive and send buffer each endpoint's UDP socket asks of the kernel. Linux grants at
/// most `net.core.rmem_max` / `wmem_max` (and doubles it for its own bookkeeping). With the
/// kernel's default (208 KiB) a process whose threads were busy for a few milliseconds — a
/// joiner installing a copy on a shared machine, a survivor streaming one — had datagrams
/// dropped (`RcvbufErrors` in /proc/net/snmp: 50,984 over one session's failover runs), and
/// QUIC's loss recovery then held up whatever the lost packets carried — heartbeats,
/// batches, results — for a probe timeout that grows with each loss.
pub const UDP_SOCKET_BUFFER_BYTES: usize = 8 << 20;

/// A UDP endpoint on `addr` that accepts datagrams of up to [`UDP_PAYLOAD_BYTES_MAX`] (quinn's
/// default endpoint refuses more than 1,472), its socket's buffers sized
/// [`UDP_SOCKET_BUFFER_BYTES`] where the kernel allows.
fn endpoint(addr: SocketAddr, server: Option<quinn::ServerConfig>) -> std::io::Result<quinn::Endpoint> {
    let mut config = quinn::EndpointConfig::default();
    config.max_udp_payload_size(UDP_PAYLOAD_BYTES_MAX).map_err(std::io::Error::other)?;
    let runtime = quinn::default_runtime().ok_or_else(|| std::io::Error::other("no tokio runtime"))?;
    let socket = std::net::UdpSocket::bind(addr)?;
    let sized = socket2::SockRef::from(&socket);
    // Best effort: a kernel that grants less still works, as before.
    let _ = sized.set_recv_buffer_size(UDP_SOCKET_BUFFER_BYTES);
    let _ = sized.set_send_buffer_size(UDP_SOCKET_BUFFER_BYTES);
    quinn::Endpoint::new(config, server, socket, runtime)
}

/// What the kernel grants an endpoint's UDP socket, for the processes' start-up log: the
/// receive and send buffers (asked of a socket bound to an ephemeral loopback port), and what
/// to raise when they are short of [`UDP_SOCKET_BUFFER_BYTES`].
pub fn udp_socket_buffers() -> String {
    let granted = std::net::UdpSocket::bind("127.0.0.1:0").and_then(|socket| {
        let sized = socket2::SockRef::from(&socket);
        let _ = sized.set_recv_buffer_size(UDP_SOCKET_BUFFER_BYTES);
        let _ = sized.set_send_buffer_size(UDP_SOCKET_BUFFER_BYTES);
        Ok((sized.recv_buffer_size()?, sized.send_buffer_size()?))
    });
    match granted {
        Ok((r, w)) => {
            let short = if r < UDP_SOCKET_BUFFER_BYTES || w < UDP_SOCKET_BUFFER_BYTES {
                " (less than asked: raise net.core.rmem_max and wmem_max)"
            } else {
                ""
            };
            format!("receive {} KiB, send {} KiB{short}", r >> 10, w >> 10)
        }
        Err(e) => format!("unknown ({e})"),
    }
}

/// Checks a peer's Hello against ours: same protocol version, same cluster. (Public for the
/// `hello` fuzz target, which runs a listener's checks on arbitrary Hellos and certificates.)
pub fn check_hello(ours: &Hello, theirs: &Hello) -> Result<(), HelloMismatch> {
    if theirs.protocol_version != PROTOCOL_VERSION {
        return Err(HelloMismatch::Version { theirs: theirs.protocol_version, ours: PROTOCOL_VERSION });
    }
    if theirs.config_fingerprint != ours.config_fingerprint {
        return Err(HelloMismatch::Fingerprint { theirs: theirs.config_fingerprint, ours: ours.config_fingerprint });
    }
    Ok(())
}

/// The refusal of a first frame in another protocol version: its version byte is the peer's
/// version (a Hello of it cannot be decoded, nor one of ours by the peer).
fn foreign_version(e: &EndpointError) -> Option<HelloMismatch> {
    match e {
        EndpointError::Frame { source: CodecError::Version { got, expected }, .. } => {
            Some(HelloMismatch::Version { theirs: *got, ours: *expected })
        }
        _ => None,
    }
}

/// A short description of a first frame for errors, without its contents.
fn kind(msg: Option<&Handshake>) -> String {
    msg.map_or("nothing", Handshake::name).to_string()
}

/// Reassembles frames from a QUIC stream in a buffer that never exceeds one maximum frame and
/// grows only with the bytes of a frame actually received.
#[derive(Debug)]
struct FrameReader {
    buf: Vec<u8>,
    /// `buf[start..end]` is received and not yet decoded.
    start: usize,
    end: usize,
    frame_bytes_max: usize,
}

impl FrameReader {
    fn new(frame_bytes_max: usize) -> FrameReader {
        let initial = RECV_BUFFER_BYTES_INITIAL.min(frame_bytes_max).max(LENGTH_PREFIX_BYTES);
        FrameReader { buf: vec![0; initial], start: 0, end: 0, frame_bytes_max }
    }

    /// The next message of `M`'s channel; `Ok(None)` when the stream ended cleanly between
    /// frames.
    async fn next<M: ChannelMessage>(
        &mut self,
        stream: &mut RecvStream,
        addr: SocketAddr,
    ) -> Result<Option<M>, EndpointError> {
        loop {
            let pending = &self.buf[self.start..self.end];
            let mut needed = LENGTH_PREFIX_BYTES;
            if let Some(prefix) = pending.first_chunk::<LENGTH_PREFIX_BYTES>() {
                needed = codec::frame_len(*prefix, self.frame_bytes_max)
                    .map_err(|source| EndpointError::Frame { addr, source })?;
                if pending.len() >= needed {
                    let msg = codec::decode_body(&pending[LENGTH_PREFIX_BYTES..needed])
                        .map_err(|source| EndpointError::Frame { addr, source })?;
                    crate::record::frame(&msg, &pending[..needed]);
                    crate::metrics::LINK_TRAFFIC.received(needed);
                    self.start += needed;
                    return Ok(Some(msg));
                }
            }
            // Need more bytes: move the partial frame to the front; if the buffer is full,
            // double it (at most to the frame's length): a prefix alone, announcing a large
            // frame, does not make the buffer large.
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.end == self.buf.len() {
                debug_assert!(needed > self.buf.len() && needed <= self.frame_bytes_max);
                let grown = (self.buf.len() * 2).max(RECV_BUFFER_BYTES_INITIAL).min(needed);
                self.buf.resize(grown, 0);
            }
            debug_assert!(self.end < self.buf.len());
            match stream.read(&mut self.buf[self.end..]).await {
                Ok(Some(n)) => self.end += n,
                Ok(None) if self.end == 0 => return Ok(None),
                Ok(None) => return Err(EndpointError::Truncated { addr, buffered_bytes: self.end }),
                Err(ReadError::ConnectionLost(e)) => return closed_or(addr, e),
                Err(e) => return Err(EndpointError::Stream { addr, detail: e.to_string() }),
            }
        }
    }
}

/// `Ok(None)` for a normal close (by the peer with [`CLOSE_NORMAL`], or locally), else the
/// error.
fn closed_or<M>(addr: SocketAddr, e: ConnectionError) -> Result<Option<M>, EndpointError> {
    match &e {
        ConnectionError::ApplicationClosed(close) if close.error_code.into_inner() == u64::from(CLOSE_NORMAL) => {
            Ok(None)
        }
        ConnectionError::LocallyClosed => Ok(None),
        _ => Err(lost(addr, e)),
    }
}

/// Keeps a connection's listener slot and client endpoint alive while either half exists.
#[derive(Debug)]
struct Shared {
    peer_hello: Hello,
    remote: SocketAddr,
    _permit: Option<OwnedSemaphorePermit>,
    endpoint: Option<quinn::Endpoint>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(endpoint) = self.endpoint.take() {
            linger(endpoint);
        }
    }
}

/// Keeps a dialler's own endpoint (one per [`connect`]) until its connection has drained, at
/// most [`LINGER_MS`] and a second: the endpoint is what sends a closed connection's
/// CONNECTION_CLOSE, and answers the peer's late packets with it. Dropped at once, the close
/// may never leave and the peer would wait out its idle timeout.
fn linger(endpoint: quinn::Endpoint) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    runtime.spawn(async move {
        let _ = tokio::time::timeout(Duration::from_millis(LINGER_MS + 1_000), endpoint.wait_idle()).await;
    });
}

/// The sending half of a [`Link`].
#[derive(Debug)]
pub struct LinkSender {
    conn: quinn::Connection,
    stream: SendStream,
    buf: Vec<u8>,
    frame_bytes_max: usize,
    shared: Arc<Shared>,
}

/// The receiving half of a [`Link`].
#[derive(Debug)]
pub struct LinkReceiver {
    conn: quinn::Connection,
    stream: RecvStream,
    reader: FrameReader,
    shared: Arc<Shared>,
}

/// An authenticated connection whose Hellos have been exchanged.
#[derive(Debug)]
pub struct Link {
    sender: LinkSender,
    receiver: LinkReceiver,
}

impl LinkSender {
    /// Encodes `msg` (a message of the link's channel) as one frame and sends it.
    pub async fn send<M: ChannelMessage>(&mut self, msg: &M) -> Result<(), EndpointError> {
        self.buf.clear();
        let addr = self.shared.remote;
        codec::encode_into(msg, &mut self.buf, self.frame_bytes_max)
            .map_err(|source| EndpointError::Encode { addr, source })?;
        let result = self.stream.write_all(&self.buf).await;
        if result.is_ok() {
            crate::metrics::LINK_TRAFFIC.sent(self.buf.len());
        }
        if self.buf.capacity() > RECV_BUFFER_BYTES_INITIAL {
            // Keep a big frame's buffer no longer than its send.
            self.buf = Vec::new();
        }
        result.map_err(|e| write_error(addr, e))
    }

    /// Sends frames already encoded with [`codec::encode`] (encode once, send to many).
    pub async fn send_encoded(&mut self, frames: &[u8]) -> Result<(), EndpointError> {
        debug_assert!(
            frames.first_chunk::<LENGTH_PREFIX_BYTES>().is_none_or(|p| codec::frame_len(*p, usize::MAX).is_ok()),
            "send_encoded takes whole frames"
        );
        self.stream.write_all(frames).await.map_err(|e| write_error(self.shared.remote, e))?;
        crate::metrics::LINK_TRAFFIC.sent(frames.len());
        Ok(())
    }

    /// Ends the stream after everything sent so far and waits (up to `timeout`) for the peer
    /// to have received it; the peer's `recv` then returns `Ok(None)`.
    pub async fn finish(mut self, timeout: Duration) {
        if self.stream.finish().is_ok() {
            let _ = tokio::time::timeout(timeout, self.stream.stopped()).await;
        }
    }

    /// Closes the connection at once with `code` and `reason` (unsent data is dropped).
    pub fn close(&self, code: u32, reason: &str) {
        close(&self.conn, code, reason);
    }

    /// Resolves once the connection is closed, by either side or by its idle timeout (a
    /// sender with nothing to send learns it here, not at its next send).
    pub async fn closed(&self) {
        self.conn.closed().await;
    }

    /// The peer's Hello.
    pub fn peer_hello(&self) -> &Hello {
        &self.shared.peer_hello
    }

    /// The peer's address.
    pub fn remote_address(&self) -> SocketAddr {
        self.shared.remote
    }

    /// The frame limit this sender encodes with.
    pub fn frame_bytes_max(&self) -> usize {
        self.frame_bytes_max
    }

    /// The key of this link's liveness tether; see [`Link::tether_key`].
    pub fn tether_key(&self) -> Option<TetherKey> {
        tether_key(&self.conn)
    }
}

impl Drop for LinkSender {
    /// quinn closes a connection the moment its last handle goes, dropping data not yet
    /// delivered: the stream is finished (by quinn's own drop) and the connection kept until
    /// the peer has acknowledged everything, at most [`LINGER_MS`].
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let delivered = self.stream.stopped();
        runtime.spawn(async move {
            let _ = tokio::time::timeout(Duration::from_millis(LINGER_MS), delivered).await;
        });
    }
}

fn write_error(addr: SocketAddr, e: WriteError) -> EndpointError {
    match e {
        WriteError::ConnectionLost(e) => lost(addr, e),
        other => EndpointError::Stream { addr, detail: other.to_string() },
    }
}

impl LinkReceiver {
    /// The next message of the link's channel, `M` (the caller knows the channel from who the
    /// peer is: [`LinkReceiver::peer_hello`]); `Ok(None)` once the peer has finished its
    /// stream or closed the link normally. A bad frame — oversized, malformed, of another
    /// protocol version ([`CodecError::Version`]) or with a tag naming no message of `M`
    /// ([`CodecError::UnknownTag`]) — closes this connection (only) with
    /// [`CLOSE_PROTOCOL_VIOLATION`] and is returned as [`EndpointError::Frame`] (or
    /// [`EndpointError::Truncated`]).
    pub async fn recv<M: ChannelMessage>(&mut self) -> Result<Option<M>, EndpointError> {
        let result = self.reader.next(&mut self.stream, self.shared.remote).await;
        if let Err(e @ (EndpointError::Frame { .. } | EndpointError::Truncated { .. })) = &result {
            close(&self.conn, CLOSE_PROTOCOL_VIOLATION, &e.to_string());
        }
        result
    }

    /// Closes the connection at once with `code` and `reason`.
    pub fn close(&self, code: u32, reason: &str) {
        close(&self.conn, code, reason);
    }

    /// The peer's Hello.
    pub fn peer_hello(&self) -> &Hello {
        &self.shared.peer_hello
    }

    /// The peer's address.
    pub fn remote_address(&self) -> SocketAddr {
        self.shared.remote
    }

    /// The key of this link's liveness tether; see [`Link::tether_key`].
    pub fn tether_key(&self) -> Option<TetherKey> {
        tether_key(&self.conn)
    }
}

impl Link {
    /// Closes the connection with [`CLOSE_NORMAL`] and `reason`, and waits (at most
    /// [`LINGER_MS`]) until a dialler's endpoint has sent the close: for a dialler whose
    /// runtime ends next, which would otherwise drop the close with it and leave the peer to
    /// wait out its idle timeout.
    pub async fn close_and_drain(self, reason: &str) {
        self.sender.close(CLOSE_NORMAL, reason);
        let endpoint = self.sender.shared.endpoint.clone();
        drop(self);
        if let Some(endpoint) = endpoint {
            let _ = tokio::time::timeout(Duration::from_millis(LINGER_MS), endpoint.wait_idle()).await;
        }
    }

    /// Encodes `msg` (a message of the link's channel) as one frame and sends it.
    pub async fn send<M: ChannelMessage>(&mut self, msg: &M) -> Result<(), EndpointError> {
        self.sender.send(msg).await
    }

    /// Sends frames already encoded with [`codec::encode`].
    pub async fn send_encoded(&mut self, frames: &[u8]) -> Result<(), EndpointError> {
        self.sender.send_encoded(frames).await
    }

    /// The next message of the link's channel; see [`LinkReceiver::recv`].
    pub async fn recv<M: ChannelMessage>(&mut self) -> Result<Option<M>, EndpointError> {
        self.receiver.recv().await
    }

    /// The peer's Hello.
    pub fn peer_hello(&self) -> &Hello {
        &self.sender.shared.peer_hello
    }

    /// How the process at the other end names itself in errors: "node 2", "the
    /// coordinator", "client 7".
    pub fn peer_name(&self) -> String {
        let h = self.peer_hello();
        match h.role {
            PeerKind::Node => format!("node {}", h.id),
            PeerKind::Coordinator => format!("coordinator {}", h.id),
            PeerKind::Client => format!("client {}", h.id),
        }
    }

    /// The peer's address.
    pub fn remote_address(&self) -> SocketAddr {
        self.sender.shared.remote
    }

    /// The frame limit of this link.
    pub fn frame_bytes_max(&self) -> usize {
        self.sender.frame_bytes_max
    }

    /// The key of this link's liveness tether ([`crate::tether`]): both ends of one
    /// connection get the same key (exported from its TLS session), any other connection
    /// another. `None` if the TLS session cannot export keying material: no tether then.
    pub fn tether_key(&self) -> Option<TetherKey> {
        self.sender.tether_key()
    }

    /// The two halves, for a sending task and a receiving task.
    pub fn split(self) -> (LinkSender, LinkReceiver) {
        (self.sender, self.receiver)
    }

    /// Closes the connection at once with `code` and `reason`.
    pub fn close(&self, code: u32, reason: &str) {
        self.sender.close(code, reason);
    }

    /// Refuses the peer after reading its Hello: sends `HelloRefused { reason }`, waits
    /// briefly for it to be delivered, and closes with [`CLOSE_HELLO_REFUSED`].
    pub async fn refuse(mut self, reason: &str) {
        let msg = Handshake::HelloRefused { reason: bounded_reason(reason.to_string()) };
        if self.sender.send(&msg).await.is_ok() && self.sender.stream.finish().is_ok() {
            let _ = tokio::time::timeout(Duration::from_millis(500), self.sender.stream.stopped()).await;
        }
        self.close(CLOSE_HELLO_REFUSED, reason);
    }
}

/// Receives messages of `M`'s channel on `link` until `pick` accepts one (others are
/// skipped), within `limit`; `what` names the awaited answer in the error.
pub async fn recv_matching<M: ChannelMessage, T>(
    link: &mut Link,
    what: &'static str,
    limit: Duration,
    mut pick: impl FnMut(M) -> Option<T>,
) -> Result<T, RecvError> {
    let wait = async {
        loop {
            match link.recv::<M>().await? {
                Some(m) => {
                    if let Some(t) = pick(m) {
                        return Ok(t);
                    }
                }
                None => return Err(RecvError::Closed { peer: link.peer_name(), what }),
            }
        }
    };
    match tokio::time::timeout(limit, wait).await {
        Ok(r) => r,
        Err(_) => Err(RecvError::Timeout { peer: link.peer_name(), what, timeout: limit }),
    }
}

/// Accepts authenticated connections; see the module documentation.
#[derive(Debug)]
pub struct Listener {
    endpoint: quinn::Endpoint,
    local_addr: SocketAddr,
    accepted: mpsc::Receiver<Result<Link, EndpointError>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Connections being handshaked are dropped with the task; established links live on.
        self.task.abort();
    }
}

/// Listens on `addr` (port 0 picks a free port: see [`Listener::local_addr`]) with `tls`
/// (from [`crate::tls::server_config`]); `hello` is this process's Hello, sent to every peer
/// whose Hello matches its version and fingerprint.
pub async fn listen(
    addr: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    hello: Hello,
    limits: EndpointLimits,
) -> Result<Listener, EndpointError> {
    let crypto = QuicServerConfig::try_from(tls).map_err(|e| EndpointError::TlsConfig { detail: e.to_string() })?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(transport_config(&limits, Side::Listener));
    server.incoming_buffer_size(INCOMING_BUFFER_BYTES);
    server.incoming_buffer_size_total(INCOMING_BUFFER_BYTES_TOTAL);
    let endpoint = endpoint(addr, Some(server)).map_err(|source| EndpointError::Bind { addr, source })?;
    let local_addr = endpoint.local_addr().map_err(|source| EndpointError::Bind { addr, source })?;
    let (tx, accepted) = mpsc::channel(limits.connections_max.max(1));
    let task = tokio::spawn(accept_loop(endpoint.clone(), hello, limits, tx));
    Ok(Listener { endpoint, local_addr, accepted, task })
}

impl Listener {
    /// The next authenticated peer whose Hello matched, or the error of one that failed (keep
    /// calling: only [`EndpointError::ListenerClosed`] ends the listener). The peer's Hello is
    /// [`Link::peer_hello`]; this side's Hello has already been sent.
    pub async fn accept(&mut self) -> Result<Link, EndpointError> {
        self.accepted.recv().await.unwrap_or(Err(EndpointError::ListenerClosed))
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Closes the endpoint: every connection of this listener is closed with `code`.
    pub fn close(&self, code: u32, reason: &str) {
        self.task.abort();
        self.endpoint.close(VarInt::from_u32(code), reason.as_bytes());
    }
}

async fn accept_loop(
    endpoint: quinn::Endpoint,
    hello: Hello,
    limits: EndpointLimits,
    tx: mpsc::Sender<Result<Link, EndpointError>>,
) {
    let slots = Arc::new(Semaphore::new(limits.connections_max));
    let mut handshakes = JoinSet::new();
    loop {
        let incoming = tokio::select! {
            incoming = endpoint.accept() => incoming,
            Some(_) = handshakes.join_next() => continue,
        };
        let Some(incoming) = incoming else { break };
        let addr = incoming.remote_address();
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            incoming.refuse();
            let _ =
                tx.try_send(Err(EndpointError::TooManyConnections { addr, connections_max: limits.connections_max }));
            continue;
        };
        let (hello, limits, tx) = (hello.clone(), limits.clone(), tx.clone());
        handshakes.spawn(async move {
            let result = accept_one(incoming, permit, hello, &limits).await;
            match result {
                Ok(link) => {
                    if let Err(mpsc::error::SendError(Ok(link))) = tx.send(Ok(link)).await {
                        link.close(CLOSE_LISTENER_CLOSED, "the listener stopped before taking the connection");
                    }
                }
                Err(e) => {
                    let _ = tx.try_send(Err(e));
                }
            }
        });
    }
}

/// A connection being set up: closed with `code` and `reason` when dropped — an error, a
/// timeout, or its task aborted (the listener or the dialler gone) — unless its [`Link`] was
/// handed over ([`Setup::done`]). The peer reads the code and the reason at once.
struct Setup {
    conn: Option<quinn::Connection>,
    /// A dialler's own endpoint, kept until the close has left ([`linger`]).
    endpoint: Option<quinn::Endpoint>,
    code: u32,
    reason: String,
}

impl Setup {
    fn new(conn: &quinn::Connection, code: u32, reason: &str) -> Setup {
        Setup { conn: Some(conn.clone()), endpoint: None, code, reason: reason.to_string() }
    }

    /// A dialler's connection on its own `endpoint`.
    fn dialled(conn: &quinn::Connection, endpoint: &quinn::Endpoint, code: u32, reason: &str) -> Setup {
        let mut setup = Setup::new(conn, code, reason);
        setup.endpoint = Some(endpoint.clone());
        setup
    }

    /// Closes the connection now with `code` and `reason`, and returns `e`.
    fn fail(&mut self, code: u32, reason: &str, e: EndpointError) -> EndpointError {
        self.code = code;
        self.reason = reason.to_string();
        self.close();
        e
    }

    fn close(&mut self) {
        if let Some(conn) = self.conn.take() {
            close(&conn, self.code, &self.reason);
        }
        if let Some(endpoint) = self.endpoint.take() {
            linger(endpoint);
        }
    }

    /// The link is handed over: nothing to close.
    fn done(mut self) {
        self.conn = None;
        self.endpoint = None;
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.close();
    }
}

/// The certificates the peer of `conn` presented (its leaf first).
fn peer_certificates(conn: &quinn::Connection) -> Vec<CertificateDer<'static>> {
    conn.peer_identity()
        .and_then(|any| any.downcast::<Vec<CertificateDer<'static>>>().ok())
        .map(|chain| *chain)
        .unwrap_or_default()
}

async fn accept_one(
    incoming: quinn::Incoming,
    permit: OwnedSemaphorePermit,
    hello: Hello,
    limits: &EndpointLimits,
) -> Result<Link, EndpointError> {
    let addr = incoming.remote_address();
    let timeout = limits.handshake_timeout;
    let connecting = incoming.accept().map_err(|e| EndpointError::Handshake { addr, detail: e.to_string() })?;
    let conn = match tokio::time::timeout(timeout, connecting).await {
        Err(_) => return Err(EndpointError::Timeout { addr, what: "TLS handshake", timeout }),
        Ok(Ok(conn)) => conn,
        Ok(Err(ConnectionError::TransportError(t))) if is_crypto_code(t.code.into()) => {
            return Err(EndpointError::ClientCertificateRejected { addr, detail: t.to_string() })
        }
        Ok(Err(e)) => return Err(EndpointError::Handshake { addr, detail: e.to_string() }),
    };
    let mut setup = Setup::new(&conn, CLOSE_LISTENER_CLOSED, "the listener stopped before the Hello exchange finished");
    let first = async {
        let (send, mut recv) = conn.accept_bi().await.map_err(|e| lost(addr, e))?;
        let mut reader = FrameReader::new(HELLO_FRAME_BYTES_MAX);
        let first = reader.next::<Handshake>(&mut recv, addr).await?;
        Ok::<_, EndpointError>((send, recv, reader, first))
    };
    let (send, recv, mut reader, first) = match tokio::time::timeout(timeout, first).await {
        Err(_) => {
            let reason = format!("no Hello within {timeout:?}");
            return Err(setup.fail(
                CLOSE_HELLO_TIMEOUT,
                &reason,
                EndpointError::Timeout { addr, what: "Hello", timeout },
            ));
        }
        Ok(Err(e)) => match foreign_version(&e) {
            Some(mismatch) => {
                let e = EndpointError::HelloRejected { addr, mismatch: mismatch.clone() };
                return Err(setup.fail(CLOSE_HELLO_REFUSED, &mismatch.to_string(), e));
            }
            None => return Err(setup.fail(CLOSE_PROTOCOL_VIOLATION, &e.to_string(), e)),
        },
        Ok(Ok(parts)) => parts,
    };
    let peer_hello = match first {
        Some(Handshake::Hello(h)) => h,
        other => {
            let got = kind(other.as_ref());
            let e = EndpointError::NoHello { addr, got };
            return Err(setup.fail(CLOSE_PROTOCOL_VIOLATION, "the first message must be a Hello", e));
        }
    };
    let claimed = Identity::claimed_by(&peer_hello);
    if let Err(problem) = tls::check_peer_identity(&peer_certificates(&conn), claimed) {
        let reason = format!("the Hello claims to be the {claimed}, but {problem}");
        return Err(setup.fail(
            CLOSE_IDENTITY_REFUSED,
            &reason,
            EndpointError::IdentityMismatch { addr, claimed, problem },
        ));
    }
    let shared =
        Arc::new(Shared { peer_hello: peer_hello.clone(), remote: addr, _permit: Some(permit), endpoint: None });
    reader.frame_bytes_max = limits.frame_bytes_max;
    let mut link = assemble(conn, send, recv, reader, limits.frame_bytes_max, shared);
    if let Err(mismatch) = check_hello(&hello, &peer_hello) {
        setup.done();
        link.refuse(&mismatch.to_string()).await;
        return Err(EndpointError::HelloRejected { addr, mismatch });
    }
    if let Err(e) = link.send(&Handshake::Hello(hello)).await {
        return Err(setup.fail(CLOSE_PROTOCOL_VIOLATION, &format!("cannot send the Hello: {e}"), e));
    }
    setup.done();
    Ok(link)
}

fn assemble(
    conn: quinn::Connection,
    stream: SendStream,
    recv: RecvStream,
    reader: FrameReader,
    frame_bytes_max: usize,
    shared: Arc<Shared>,
) -> Link {
    Link {
        sender: LinkSender { conn: conn.clone(), stream, buf: Vec::new(), frame_bytes_max, shared: shared.clone() },
        receiver: LinkReceiver { conn, stream: recv, reader, shared },
    }
}

/// Dials `addr`, verifying that its certificate names `server_name` and comes from the CA
/// `tls` trusts (from [`crate::tls::client_config`]), sends `hello` and waits for the peer's
/// Hello, all within `limits.handshake_timeout`. The peer may be any identity of the cluster
/// whose Hello matches its certificate: [`connect_to`] when a given one is meant.
pub async fn connect(
    addr: SocketAddr,
    server_name: &str,
    tls: Arc<rustls::ClientConfig>,
    hello: Hello,
    limits: EndpointLimits,
) -> Result<Link, EndpointError> {
    dial(addr, server_name, None, tls, hello, limits).await
}

/// [`connect`] to `peer` only: a listener whose certificate is not `peer`'s identity (another
/// process answering at the address) is refused with [`EndpointError::WrongPeer`] before
/// anything is sent to it.
pub async fn connect_to(
    peer: Identity,
    addr: SocketAddr,
    server_name: &str,
    tls: Arc<rustls::ClientConfig>,
    hello: Hello,
    limits: EndpointLimits,
) -> Result<Link, EndpointError> {
    dial(addr, server_name, Some(peer), tls, hello, limits).await
}

async fn dial(
    addr: SocketAddr,
    server_name: &str,
    peer: Option<Identity>,
    tls: Arc<rustls::ClientConfig>,
    hello: Hello,
    limits: EndpointLimits,
) -> Result<Link, EndpointError> {
    let timeout = limits.handshake_timeout;
    match tokio::time::timeout(timeout, connect_inner(addr, server_name, peer, tls, hello, &limits)).await {
        Ok(result) => result,
        Err(_) => Err(EndpointError::Timeout { addr, what: "handshake and Hello reply", timeout }),
    }
}

async fn connect_inner(
    addr: SocketAddr,
    server_name: &str,
    peer: Option<Identity>,
    tls: Arc<rustls::ClientConfig>,
    hello: Hello,
    limits: &EndpointLimits,
) -> Result<Link, EndpointError> {
    let role = hello.role;
    let crypto = QuicClientConfig::try_from(tls).map_err(|e| EndpointError::TlsConfig { detail: e.to_string() })?;
    let mut client = quinn::ClientConfig::new(Arc::new(crypto));
    client.transport_config(transport_config(limits, Side::Dialler));
    let bind: SocketAddr = match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let endpoint = endpoint(bind, None).map_err(|source| EndpointError::Bind { addr: bind, source })?;
    let connect_error = |detail: String| EndpointError::Connect { addr, server_name: server_name.to_string(), detail };
    let connecting = endpoint.connect_with(client, addr, server_name).map_err(|e| connect_error(e.to_string()))?;
    let dial_error = |e| lost_while_dialling(addr, server_name, role, e);
    let conn = connecting.await.map_err(dial_error)?;
    // Dropped before the link is handed over: this dialler gave up (its timeout, or its caller).
    let mut setup =
        Setup::dialled(&conn, &endpoint, CLOSE_HELLO_TIMEOUT, "the dialler stopped waiting for the Hello reply");
    let certificates = peer_certificates(&conn);
    if let Some(expected) = peer {
        if let Err(problem) = tls::check_peer_identity(&certificates, expected) {
            let reason = format!("this dialler meant to reach the {expected}, but {problem}");
            let e = EndpointError::WrongPeer { addr, server_name: server_name.to_string(), expected, problem };
            return Err(setup.fail(CLOSE_IDENTITY_REFUSED, &reason, e));
        }
    }
    let (mut send, mut recv) = conn.open_bi().await.map_err(dial_error)?;

    let frame = codec::encode(&Handshake::Hello(hello.clone()), HELLO_FRAME_BYTES_MAX)
        .map_err(|source| EndpointError::Encode { addr, source })?;
    if let Err(e) = send.write_all(&frame).await {
        return Err(match e {
            WriteError::ConnectionLost(e) => dial_error(e),
            other => {
                let e = connect_error(other.to_string());
                setup.fail(CLOSE_PROTOCOL_VIOLATION, "cannot send the Hello", e)
            }
        });
    }
    let mut reader = FrameReader::new(HELLO_FRAME_BYTES_MAX);
    let reply = match reader.next::<Handshake>(&mut recv, addr).await {
        Ok(reply) => reply,
        Err(EndpointError::ConnectionLost { source, .. }) => return Err(dial_error(source)),
        Err(e @ EndpointError::ClosedByPeer { .. }) => return Err(refused_at_hello(e)),
        Err(e) => match foreign_version(&e) {
            Some(mismatch) => {
                let e = EndpointError::HelloRejected { addr, mismatch: mismatch.clone() };
                return Err(setup.fail(CLOSE_HELLO_REFUSED, &mismatch.to_string(), e));
            }
            None => return Err(setup.fail(CLOSE_PROTOCOL_VIOLATION, &e.to_string(), e)),
        },
    };
    let peer_hello = match reply {
        Some(Handshake::Hello(h)) => h,
        Some(Handshake::HelloRefused { reason }) => {
            return Err(setup.fail(CLOSE_NORMAL, "", EndpointError::HelloRefused { addr, reason }));
        }
        None => {
            let got = kind(None);
            let e = EndpointError::NoHello { addr, got };
            return Err(setup.fail(CLOSE_PROTOCOL_VIOLATION, "the first message must be a Hello", e));
        }
    };
    let claimed = Identity::claimed_by(&peer_hello);
    if let Err(problem) = tls::check_peer_identity(&certificates, claimed) {
        let reason = format!("the Hello claims to be the {claimed}, but {problem}");
        return Err(setup.fail(
            CLOSE_IDENTITY_REFUSED,
            &reason,
            EndpointError::IdentityMismatch { addr, claimed, problem },
        ));
    }
    let shared =
        Arc::new(Shared { peer_hello: peer_hello.clone(), remote: addr, _permit: None, endpoint: Some(endpoint) });
    reader.frame_bytes_max = limits.frame_bytes_max;
    let link = assemble(conn, send, recv, reader, limits.frame_bytes_max, shared);
    setup.done();
    if let Err(mismatch) = check_hello(&hello, &peer_hello) {
        link.refuse(&mismatch.to_string()).await;
        return Err(EndpointError::HelloRejected { addr, mismatch });
    }
    Ok(link)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crypto_codes_are_tls_alerts() {
        assert!(is_crypto_code(0x100 + 116)); // certificate_required
        assert!(is_crypto_code(0x100 + 48)); // unknown_ca
        assert!(!is_crypto_code(0x2)); // CONNECTION_REFUSED
        assert!(!is_crypto_code(0x200));
    }

    #[test]
    fn hellos_must_agree_on_version_and_cluster() {
        let ours =
            Hello { protocol_version: PROTOCOL_VERSION, role: PeerKind::Coordinator, id: 0, config_fingerprint: 7 };
        let good = Hello { role: PeerKind::Client, id: 9, ..ours.clone() };
        assert!(check_hello(&ours, &good).is_ok());
        let other_cluster = Hello { config_fingerprint: 8, ..good.clone() };
        assert_eq!(check_hello(&ours, &other_cluster), Err(HelloMismatch::Fingerprint { theirs: 8, ours: 7 }));
        assert!(check_hello(&ours, &other_cluster).unwrap_err().to_string().contains("fingerprint"));
        let other_version = Hello { protocol_version: PROTOCOL_VERSION + 1, ..good };
        let mismatch = check_hello(&ours, &other_version).unwrap_err();
        assert_eq!(mismatch, HelloMismatch::Version { theirs: PROTOCOL_VERSION + 1, ours: PROTOCOL_VERSION });
        assert_eq!(
            mismatch.to_string(),
            format!("protocol version {} is not this build's version {PROTOCOL_VERSION}", PROTOCOL_VERSION + 1)
        );
    }

    #[test]
    fn message_kinds_name_the_variant_only() {
        assert_eq!(kind(Some(&Handshake::HelloRefused { reason: "long reason".into() })), "HelloRefused");
        assert_eq!(kind(None), "nothing");
    }
}
