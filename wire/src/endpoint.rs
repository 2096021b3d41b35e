//! The QUIC transport (tokio + quinn, mutual TLS from [`crate::tls`]): listening, dialling,
//! and [`Link`], one authenticated connection carrying [`codec`](crate::codec) frames on one
//! bidirectional stream in each direction.
//!
//! A connection's life:
//!
//! ```text
//! dialler (connect)                          listener (Listener::accept)
//!   QUIC + TLS 1.3 handshake  ─────────────▶  client certificate checked against the CA
//!   open stream, send Hello   ─────────────▶  read Hello (within handshake_timeout);
//!                                             version or fingerprint differs → HelloRefused
//!   read the reply            ◀─────────────  our Hello → Link handed to accept()'s caller
//! ```
//!
//! Guarantees:
//! - no [`Link`] exists before both sides' certificates were verified against the cluster's CA
//!   and both Hellos were exchanged; under TLS 1.3 a client whose certificate the server
//!   refuses still sees its handshake complete, so [`connect`] waits for the reply Hello and
//!   turns the refusal into [`EndpointError::CertificateRefused`];
//! - a failing peer (bad certificate, no Hello, a bad frame) is an error of that peer alone:
//!   [`Listener::accept`] returns it and the listener keeps serving; only
//!   [`EndpointError::ListenerClosed`] ends a listener;
//! - every buffer is bounded: a receiver holds at most one frame of `frame_bytes_max` bytes,
//!   a frame whose prefix announces more is refused before its body is read, QUIC's stream
//!   window is bounded, and a listener holds at most `connections_max` connections (handshaking
//!   or established; extras are refused at once);
//! - a malformed or oversized frame makes [`LinkReceiver::recv`] return
//!   [`EndpointError::Frame`] and closes the connection with [`CLOSE_PROTOCOL_VIOLATION`];
//! - a peer closing with [`CLOSE_NORMAL`] or finishing its stream ends [`LinkReceiver::recv`]
//!   with `Ok(None)`; dropping a link (or its sender half) finishes its stream and keeps the
//!   connection until the peer has everything sent before (at most a few seconds), so the last
//!   frames are not lost; [`Link::close`] closes at once.
//!
//! Replying to a Hello beyond version and fingerprint (an unknown node id, a second
//! coordinator) is the caller's: [`Link::refuse`] sends `HelloRefused` and closes.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{ConnectionError, ReadError, RecvStream, SendStream, TransportConfig, VarInt, WriteError};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::codec::{self, FRAME_BYTES_MAX_DEFAULT, LENGTH_PREFIX_BYTES};
use crate::config::ClusterConfig;
use crate::error::CodecError;
use crate::messages::{Hello, Message, Role, PROTOCOL_VERSION};

/// Application close code: the link is done (not an error).
pub const CLOSE_NORMAL: u32 = 0;
/// Application close code: the peer sent a frame that is oversized, malformed or unexpected.
pub const CLOSE_PROTOCOL_VIOLATION: u32 = 1;
/// Application close code: the peer's Hello was refused.
pub const CLOSE_HELLO_REFUSED: u32 = 2;
/// Application close code: the peer sent no Hello in time.
pub const CLOSE_HELLO_TIMEOUT: u32 = 3;

/// Initial size of a receiver's buffer; it grows to the largest frame received, at most
/// `frame_bytes_max`.
const RECV_BUFFER_BYTES_INITIAL: usize = 64 << 10;
/// Period of QUIC keep-alives, so an idle link is not timed out.
const KEEP_ALIVE_MS: u64 = 2_000;
/// QUIC idle timeout: a peer silent this long (keep-alives included) is gone.
const IDLE_TIMEOUT_MS: u32 = 30_000;
/// How long a dropped link's connection stays open for its last frames to be delivered.
const LINGER_MS: u64 = 3_000;
/// QUIC's per-stream receive window at least (it is raised to `frame_bytes_max`).
const STREAM_WINDOW_BYTES_MIN: usize = 1_250_000;

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
}

impl EndpointLimits {
    /// The limits `cluster.toml` sets.
    pub fn from_config(cfg: &ClusterConfig) -> EndpointLimits {
        EndpointLimits {
            frame_bytes_max: cfg.limits.frame_bytes_max as usize,
            connections_max: cfg.limits.client_connections_max as usize,
            handshake_timeout: Duration::from_millis(cfg.timeouts.connect_timeout_ms),
        }
    }
}

impl Default for EndpointLimits {
    fn default() -> EndpointLimits {
        EndpointLimits {
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
            connections_max: 256,
            handshake_timeout: Duration::from_millis(5_000),
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
    CertificateRefused { addr: SocketAddr, server_name: String, role: Role, detail: String },
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
    /// This side refused the peer's Hello (another protocol version or cluster).
    #[error("refused {addr}'s Hello: {reason}")]
    HelloRejected { addr: SocketAddr, reason: String },
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

impl EndpointError {
    /// Whether the error ends the listener (rather than concerning one peer).
    pub fn is_listener_closed(&self) -> bool {
        matches!(self, EndpointError::ListenerClosed)
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
fn lost_while_dialling(addr: SocketAddr, server_name: &str, role: Role, e: ConnectionError) -> EndpointError {
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
        _ => lost(addr, e),
    }
}

fn transport_config(limits: &EndpointLimits) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    t.keep_alive_interval(Some(Duration::from_millis(KEEP_ALIVE_MS)));
    t.max_idle_timeout(Some(VarInt::from_u32(IDLE_TIMEOUT_MS).into()));
    t.max_concurrent_uni_streams(VarInt::from_u32(0));
    let window = limits.frame_bytes_max.max(STREAM_WINDOW_BYTES_MIN) as u32;
    t.stream_receive_window(VarInt::from_u32(window));
    let mut ack = quinn::AckFrequencyConfig::default();
    ack.ack_eliciting_threshold(VarInt::from_u32(ACK_ELICITING_THRESHOLD));
    ack.max_ack_delay(Some(Duration::from_millis(MAX_ACK_DELAY_MS)));
    t.ack_frequency_config(Some(ack));
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(UDP_PAYLOAD_BYTES_MAX);
    t.mtu_discovery_config(Some(mtu));
    Arc::new(t)
}

/// A UDP endpoint on `addr` that accepts datagrams of up to [`UDP_PAYLOAD_BYTES_MAX`] (quinn's
/// default endpoint refuses more than 1,472).
fn endpoint(addr: SocketAddr, server: Option<quinn::ServerConfig>) -> std::io::Result<quinn::Endpoint> {
    let mut config = quinn::EndpointConfig::default();
    config.max_udp_payload_size(UDP_PAYLOAD_BYTES_MAX).map_err(std::io::Error::other)?;
    let runtime = quinn::default_runtime().ok_or_else(|| std::io::Error::other("no tokio runtime"))?;
    quinn::Endpoint::new(config, server, std::net::UdpSocket::bind(addr)?, runtime)
}

/// Checks a peer's Hello against ours: same protocol version, same cluster.
fn check_hello(ours: &Hello, theirs: &Hello) -> Result<(), String> {
    if theirs.protocol_version != PROTOCOL_VERSION {
        return Err(format!(
            "protocol version {} is not this build's version {PROTOCOL_VERSION}",
            theirs.protocol_version
        ));
    }
    if theirs.config_fingerprint != ours.config_fingerprint {
        return Err(format!(
            "cluster.toml fingerprint {:016x} differs from this process's {:016x} (another cluster, or an edited \
             cluster.toml)",
            theirs.config_fingerprint, ours.config_fingerprint
        ));
    }
    Ok(())
}

/// A short description of a message for errors, without its contents.
fn kind(msg: &Message) -> String {
    let debug = match msg {
        // Not the whole batch's Debug text for one word.
        Message::Batch(_) => return "Batch".to_string(),
        Message::Results(_) => return "Results".to_string(),
        Message::ClientRequests(_) => return "ClientRequests".to_string(),
        Message::ClientReplies(_) => return "ClientReplies".to_string(),
        other => format!("{other:?}"),
    };
    let end = debug.find(|c: char| !c.is_alphanumeric()).unwrap_or(debug.len());
    debug[..end].to_string()
}

/// Reassembles frames from a QUIC stream in a buffer that never exceeds one maximum frame.
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

    /// The next message; `Ok(None)` when the stream ended cleanly between frames.
    async fn next(&mut self, stream: &mut RecvStream, addr: SocketAddr) -> Result<Option<Message>, EndpointError> {
        loop {
            let pending = &self.buf[self.start..self.end];
            let mut needed = LENGTH_PREFIX_BYTES;
            if let Some(prefix) = pending.first_chunk::<LENGTH_PREFIX_BYTES>() {
                needed = codec::frame_len(*prefix, self.frame_bytes_max)
                    .map_err(|source| EndpointError::Frame { addr, source })?;
                if pending.len() >= needed {
                    let msg = codec::decode_body(&pending[LENGTH_PREFIX_BYTES..needed])
                        .map_err(|source| EndpointError::Frame { addr, source })?;
                    self.start += needed;
                    return Ok(Some(msg));
                }
            }
            // Need more bytes: move the partial frame to the front, make room for all of it.
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() < needed {
                debug_assert!(needed <= self.frame_bytes_max);
                self.buf.resize(needed, 0);
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
fn closed_or(addr: SocketAddr, e: ConnectionError) -> Result<Option<Message>, EndpointError> {
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
    _endpoint: Option<quinn::Endpoint>,
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
    /// Encodes `msg` as one frame and sends it.
    pub async fn send(&mut self, msg: &Message) -> Result<(), EndpointError> {
        self.buf.clear();
        let addr = self.shared.remote;
        codec::encode_into(msg, &mut self.buf, self.frame_bytes_max)
            .map_err(|source| EndpointError::Encode { addr, source })?;
        let result = self.stream.write_all(&self.buf).await;
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
        self.stream.write_all(frames).await.map_err(|e| write_error(self.shared.remote, e))
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
        self.conn.close(VarInt::from_u32(code), reason.as_bytes());
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
    /// The next message; `Ok(None)` once the peer has finished its stream or closed the link
    /// normally. A bad frame closes the connection with [`CLOSE_PROTOCOL_VIOLATION`] and is
    /// returned as [`EndpointError::Frame`] (or [`EndpointError::Truncated`]).
    pub async fn recv(&mut self) -> Result<Option<Message>, EndpointError> {
        let result = self.reader.next(&mut self.stream, self.shared.remote).await;
        if let Err(e @ (EndpointError::Frame { .. } | EndpointError::Truncated { .. })) = &result {
            self.conn.close(VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION), e.to_string().as_bytes());
        }
        result
    }

    /// Closes the connection at once with `code` and `reason`.
    pub fn close(&self, code: u32, reason: &str) {
        self.conn.close(VarInt::from_u32(code), reason.as_bytes());
    }

    /// The peer's Hello.
    pub fn peer_hello(&self) -> &Hello {
        &self.shared.peer_hello
    }

    /// The peer's address.
    pub fn remote_address(&self) -> SocketAddr {
        self.shared.remote
    }
}

impl Link {
    /// Encodes `msg` as one frame and sends it.
    pub async fn send(&mut self, msg: &Message) -> Result<(), EndpointError> {
        self.sender.send(msg).await
    }

    /// Sends frames already encoded with [`codec::encode`].
    pub async fn send_encoded(&mut self, frames: &[u8]) -> Result<(), EndpointError> {
        self.sender.send_encoded(frames).await
    }

    /// The next message; see [`LinkReceiver::recv`].
    pub async fn recv(&mut self) -> Result<Option<Message>, EndpointError> {
        self.receiver.recv().await
    }

    /// The peer's Hello.
    pub fn peer_hello(&self) -> &Hello {
        &self.sender.shared.peer_hello
    }

    /// The peer's address.
    pub fn remote_address(&self) -> SocketAddr {
        self.sender.shared.remote
    }

    /// The frame limit of this link.
    pub fn frame_bytes_max(&self) -> usize {
        self.sender.frame_bytes_max
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
        let msg = Message::HelloRefused { reason: crate::messages::bounded_reason(reason.to_string()) };
        if self.sender.send(&msg).await.is_ok() && self.sender.stream.finish().is_ok() {
            let _ = tokio::time::timeout(Duration::from_millis(500), self.sender.stream.stopped()).await;
        }
        self.close(CLOSE_HELLO_REFUSED, reason);
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
    server.transport_config(transport_config(&limits));
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
                    let _ = tx.send(Ok(link)).await;
                }
                Err(e) => {
                    let _ = tx.try_send(Err(e));
                }
            }
        });
    }
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
    let first = async {
        let (send, mut recv) = conn.accept_bi().await.map_err(|e| lost(addr, e))?;
        let mut reader = FrameReader::new(limits.frame_bytes_max);
        let first = reader.next(&mut recv, addr).await?;
        Ok::<_, EndpointError>((send, recv, reader, first))
    };
    let (send, recv, reader, first) = match tokio::time::timeout(timeout, first).await {
        Err(_) => {
            conn.close(VarInt::from_u32(CLOSE_HELLO_TIMEOUT), b"no Hello in time");
            return Err(EndpointError::Timeout { addr, what: "Hello", timeout });
        }
        Ok(Err(e)) => {
            conn.close(VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION), e.to_string().as_bytes());
            return Err(e);
        }
        Ok(Ok(parts)) => parts,
    };
    let peer_hello = match first {
        Some(Message::Hello(h)) => h,
        other => {
            let got = other.as_ref().map_or("nothing".to_string(), kind);
            conn.close(VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION), b"the first message must be a Hello");
            return Err(EndpointError::NoHello { addr, got });
        }
    };
    let shared =
        Arc::new(Shared { peer_hello: peer_hello.clone(), remote: addr, _permit: Some(permit), _endpoint: None });
    let mut link = assemble(conn, send, recv, reader, limits.frame_bytes_max, shared);
    if let Err(reason) = check_hello(&hello, &peer_hello) {
        link.refuse(&reason).await;
        return Err(EndpointError::HelloRejected { addr, reason });
    }
    link.send(&Message::Hello(hello)).await?;
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
/// Hello, all within `limits.handshake_timeout`.
pub async fn connect(
    addr: SocketAddr,
    server_name: &str,
    tls: Arc<rustls::ClientConfig>,
    hello: Hello,
    limits: EndpointLimits,
) -> Result<Link, EndpointError> {
    let timeout = limits.handshake_timeout;
    match tokio::time::timeout(timeout, connect_inner(addr, server_name, tls, hello, &limits)).await {
        Ok(result) => result,
        Err(_) => Err(EndpointError::Timeout { addr, what: "handshake and Hello reply", timeout }),
    }
}

async fn connect_inner(
    addr: SocketAddr,
    server_name: &str,
    tls: Arc<rustls::ClientConfig>,
    hello: Hello,
    limits: &EndpointLimits,
) -> Result<Link, EndpointError> {
    let role = hello.role;
    let crypto = QuicClientConfig::try_from(tls).map_err(|e| EndpointError::TlsConfig { detail: e.to_string() })?;
    let mut client = quinn::ClientConfig::new(Arc::new(crypto));
    client.transport_config(transport_config(limits));
    let bind: SocketAddr = match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let endpoint = endpoint(bind, None).map_err(|source| EndpointError::Bind { addr: bind, source })?;
    let connect_error = |detail: String| EndpointError::Connect { addr, server_name: server_name.to_string(), detail };
    let connecting = endpoint.connect_with(client, addr, server_name).map_err(|e| connect_error(e.to_string()))?;
    let dial_error = |e| lost_while_dialling(addr, server_name, role, e);
    let conn = connecting.await.map_err(dial_error)?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(dial_error)?;

    let frame = codec::encode(&Message::Hello(hello.clone()), limits.frame_bytes_max)
        .map_err(|source| EndpointError::Encode { addr, source })?;
    send.write_all(&frame).await.map_err(|e| match e {
        WriteError::ConnectionLost(e) => dial_error(e),
        other => connect_error(other.to_string()),
    })?;
    let mut reader = FrameReader::new(limits.frame_bytes_max);
    let reply = match reader.next(&mut recv, addr).await {
        Ok(reply) => reply,
        Err(EndpointError::ConnectionLost { source, .. }) => return Err(dial_error(source)),
        Err(e) => {
            conn.close(VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION), e.to_string().as_bytes());
            return Err(e);
        }
    };
    let peer_hello = match reply {
        Some(Message::Hello(h)) => h,
        Some(Message::HelloRefused { reason }) => {
            conn.close(VarInt::from_u32(CLOSE_NORMAL), b"");
            return Err(EndpointError::HelloRefused { addr, reason });
        }
        other => {
            let got = other.as_ref().map_or("nothing".to_string(), kind);
            conn.close(VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION), b"the first message must be a Hello");
            return Err(EndpointError::NoHello { addr, got });
        }
    };
    let shared =
        Arc::new(Shared { peer_hello: peer_hello.clone(), remote: addr, _permit: None, _endpoint: Some(endpoint) });
    let link = assemble(conn, send, recv, reader, limits.frame_bytes_max, shared);
    if let Err(reason) = check_hello(&hello, &peer_hello) {
        link.refuse(&reason).await;
        return Err(EndpointError::HelloRejected { addr, reason });
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
        let ours = Hello { protocol_version: PROTOCOL_VERSION, role: Role::Coordinator, id: 0, config_fingerprint: 7 };
        let good = Hello { role: Role::Client, id: 9, ..ours.clone() };
        assert!(check_hello(&ours, &good).is_ok());
        let other_cluster = Hello { config_fingerprint: 8, ..good.clone() };
        assert!(check_hello(&ours, &other_cluster).unwrap_err().contains("fingerprint"));
        let other_version = Hello { protocol_version: PROTOCOL_VERSION + 1, ..good };
        assert!(check_hello(&ours, &other_version).unwrap_err().contains("protocol version"));
    }

    #[test]
    fn message_kinds_name_the_variant_only() {
        assert_eq!(kind(&Message::Heartbeat { now_ms: 3 }), "Heartbeat");
        assert_eq!(kind(&Message::ClientRequests(vec![])), "ClientRequests");
    }
}
