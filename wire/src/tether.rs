//! The liveness tether: a TCP connection whose only job is to close when the process at
//! either end ends (docs/cluster.md, "Failure detection"). A node holds one to every
//! coordinator, a coordinator to every coordinator of a higher id, and a client to the
//! coordinator it uses; both ends watch it.
//!
//! QUIC runs over UDP, and a process killed with SIGKILL leaves no trace on UDP: its socket
//! just disappears, and the coordinator learns of it only when heartbeats stop
//! (`timeouts.failure_timeout_ms`). The kernel closes a dead process's TCP sockets at once,
//! whatever killed it — a FIN, or a reset — so a TCP connection held by the node for as long
//! as its link to a coordinator lives tells that coordinator, within a round trip, that the
//! process is gone.
//!
//! A coordinator's death is seen the same way, from the other end: the standbys learn within
//! a round trip that the leader's process is gone and elect another at once, and a client
//! stops waiting for answers from it (docs/design.md §11, "A leader's death").
//!
//! Protocol: the holder connects over TCP to the coordinator's address (the IP and port
//! number of the coordinator's QUIC socket: TCP and UDP ports are separate spaces) and writes
//! one [`HEADER_BYTES`]-byte [`Header`] — a magic naming who holds it ([`MAGIC`] for a node,
//! [`MAGIC_COORDINATOR`], [`MAGIC_CLIENT`]), its id (u64, little-endian; 0 for a client) and
//! a [`TetherKey`] — then never writes again, and closes the stream when its link to that
//! coordinator ends. The coordinator, once it matched the key to the holder's current link,
//! writes one byte, [`ACCEPTED`], and nothing after: an end before that byte is a refusal, an
//! end after it the coordinator's death ([`hold`]). A holder that lets go of its tether on
//! purpose (its link ended) writes [`RELEASED`] before it closes, so that the other end does
//! not take a link's end for a process's ([`Cut::Released`]).
//!
//! Guarantees:
//! - the key binds the tether to one authenticated QUIC connection: both ends derive it from
//!   that connection's TLS session with the keying-material exporter (RFC 5705 / RFC 8446
//!   §7.5, label [`KEY_LABEL`]; `endpoint::Link::tether_key`), so a TCP peer without that
//!   session cannot make the coordinator fail a node, and a tether cannot outlive its link's
//!   meaning (a newer link has another key). Keys are compared in constant time and never
//!   printed;
//! - [`read_header`] reads at most [`HEADER_BYTES`] bytes and gives up after its timeout: a
//!   wrong magic, a short header or silence is refused ([`TetherError`]) and costs the
//!   coordinator one bounded read;
//! - [`cut`] ends only when the connection does, and says how ([`Cut`]); a byte sent after
//!   the header is a broken protocol, not a death ([`Cut::Spoke`]).
//!
//! The tether is an optimisation of failure detection, never a requirement: a node that
//! cannot open one (a coordinator of an older build, a port taken on the coordinator's host)
//! is still detected by its heartbeats.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::messages::{CoordinatorId, NodeId};

/// The first bytes of a node's tether.
pub const MAGIC: [u8; 8] = *b"glasstth";
/// The first bytes of a coordinator's tether to another coordinator.
pub const MAGIC_COORDINATOR: [u8; 8] = *b"glasstco";
/// The first bytes of a client's tether.
pub const MAGIC_CLIENT: [u8; 8] = *b"glasstcl";
/// The one byte a holder writes when it lets go of its tether on purpose.
pub const RELEASED: u8 = 0x02;
/// How long a holder may take to connect a tether and send its header.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a coordinator reads a tether's header and matches it to the holder's link (which
/// it may learn of a moment after the holder opened the tether).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a holder waits for [`ACCEPTED`]: past the coordinator's [`HEADER_TIMEOUT`].
pub const ACCEPT_TIMEOUT: Duration = Duration::from_secs(3);
/// The one byte a coordinator writes on a tether it accepted.
pub const ACCEPTED: u8 = 0x01;
/// Bytes of a tether's key.
pub const KEY_BYTES: usize = 32;
/// Bytes of a tether's header: magic, holder's id (u64 LE), key.
pub const HEADER_BYTES: usize = MAGIC.len() + 8 + KEY_BYTES;
/// The label under which both ends export a tether's key from their QUIC connection's TLS
/// session (with an empty context).
pub const KEY_LABEL: &[u8] = b"glass tether v1";

/// The secret that binds a tether to one QUIC connection (its `Debug` does not show it).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TetherKey(pub [u8; KEY_BYTES]);

impl TetherKey {
    /// Whether `self` and `other` are the same key, in time independent of where they differ.
    pub fn matches(&self, other: &TetherKey) -> bool {
        let diff = self.0.iter().zip(other.0.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

impl std::fmt::Debug for TetherKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TetherKey(..)")
    }
}

/// Who holds a tether.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    Node(NodeId),
    Coordinator(CoordinatorId),
    /// A client (a bench's terminal, a tool): its link has no id the client knows.
    Client,
}

impl Holder {
    fn magic(self) -> [u8; 8] {
        match self {
            Holder::Node(_) => MAGIC,
            Holder::Coordinator(_) => MAGIC_COORDINATOR,
            Holder::Client => MAGIC_CLIENT,
        }
    }

    fn id(self) -> u64 {
        match self {
            Holder::Node(n) => u64::from(n),
            Holder::Coordinator(c) => u64::from(c),
            Holder::Client => 0,
        }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::Node(n) => write!(f, "node {n}"),
            Holder::Coordinator(c) => write!(f, "coordinator {c}"),
            Holder::Client => f.write_str("a client"),
        }
    }
}

/// The one message of a tether: who holds it, and the key of its link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub holder: Holder,
    pub key: TetherKey,
}

fn known_magic(found: &[u8; 8]) -> bool {
    [MAGIC, MAGIC_COORDINATOR, MAGIC_CLIENT].contains(found)
}

/// Why a tether's header was refused, or a tether could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum TetherError {
    #[error("not a liveness tether: it starts with {found:02x?}, not {MAGIC:02x?}")]
    WrongMagic { found: [u8; 8] },
    #[error("the tether's header ended after {got} of {HEADER_BYTES} bytes")]
    Short { got: usize },
    #[error("the tether names node {node}, which no node id can be")]
    NodeOutOfRange { node: u64 },
    #[error("the tether names coordinator {coordinator}, which no coordinator id can be")]
    CoordinatorOutOfRange { coordinator: u64 },
    #[error("a client's tether names id {id}; a client's is 0")]
    ClientWithId { id: u64 },
    #[error("no complete tether header within {ms} ms")]
    Timeout { ms: u64 },
    #[error("cannot read the tether's header: {0}")]
    Read(#[source] std::io::Error),
    #[error("cannot open a liveness tether to {addr}: {source}")]
    Open {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open a liveness tether to {addr}: no connection within {ms} ms")]
    OpenTimeout { addr: SocketAddr, ms: u64 },
}

impl Header {
    /// The header's bytes: magic, holder's id (u64 little-endian), key.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[..8].copy_from_slice(&self.holder.magic());
        out[8..16].copy_from_slice(&self.holder.id().to_le_bytes());
        out[16..].copy_from_slice(&self.key.0);
        out
    }

    /// Decodes exactly one header; fewer bytes are [`TetherError::Short`] (a wrong magic is
    /// reported as soon as its 8 bytes are there).
    pub fn decode(bytes: &[u8]) -> Result<Header, TetherError> {
        if let Some(found) = bytes.first_chunk::<8>() {
            if !known_magic(found) {
                return Err(TetherError::WrongMagic { found: *found });
            }
        }
        let Some(bytes) = bytes.first_chunk::<HEADER_BYTES>() else {
            return Err(TetherError::Short { got: bytes.len() });
        };
        let mut id = [0u8; 8];
        id.copy_from_slice(&bytes[8..16]);
        let id = u64::from_le_bytes(id);
        let holder = match bytes.first_chunk::<8>().copied() {
            Some(MAGIC) => Holder::Node(NodeId::try_from(id).map_err(|_| TetherError::NodeOutOfRange { node: id })?),
            Some(MAGIC_COORDINATOR) => Holder::Coordinator(
                CoordinatorId::try_from(id).map_err(|_| TetherError::CoordinatorOutOfRange { coordinator: id })?,
            ),
            _ if id != 0 => return Err(TetherError::ClientWithId { id }),
            _ => Holder::Client,
        };
        let mut key = [0u8; KEY_BYTES];
        key.copy_from_slice(&bytes[16..]);
        Ok(Header { holder, key: TetherKey(key) })
    }
}

/// Opens a tether to `addr` (within `timeout`) and sends `header`; the caller keeps the
/// stream for as long as the link it stands for lives.
pub async fn open(addr: SocketAddr, header: &Header, timeout: Duration) -> Result<TcpStream, TetherError> {
    let ms = timeout.as_millis() as u64;
    let opening = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        stream.write_all(&header.encode()).await?;
        Ok(stream)
    };
    match tokio::time::timeout(timeout, opening).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(source)) => Err(TetherError::Open { addr, source }),
        Err(_) => Err(TetherError::OpenTimeout { addr, ms }),
    }
}

/// Reads a tether's header from `stream`: at most [`HEADER_BYTES`] bytes, within `timeout`.
pub async fn read_header(stream: &mut TcpStream, timeout: Duration) -> Result<Header, TetherError> {
    let mut buf = [0u8; HEADER_BYTES];
    let mut got = 0;
    let reading = async {
        while got < HEADER_BYTES {
            match stream.read(&mut buf[got..]).await {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(TetherError::Read(e)),
            }
            // A wrong magic is refused without waiting for the rest.
            if let Some(found) = buf[..got].first_chunk::<8>() {
                if !known_magic(found) {
                    return Err(TetherError::WrongMagic { found: *found });
                }
            }
        }
        Header::decode(&buf[..got])
    };
    match tokio::time::timeout(timeout, reading).await {
        Ok(r) => r,
        Err(_) => Err(TetherError::Timeout { ms: timeout.as_millis() as u64 }),
    }
}

/// What became of a tether [`hold`] held.
#[derive(Debug)]
pub enum Held {
    /// It could not be opened, or the coordinator did not accept it (its key matches no
    /// current link, or the coordinator is of a build without tethers): it says nothing about
    /// the coordinator's process.
    NotAccepted(String),
    /// The holder let go of it (its link ended; the stream, if it was open, to drop when the
    /// holder likes: a stopping node keeps it a moment, its link's clean close goes first),
    /// or the coordinator did (it forgot the link; no stream then).
    Released(Option<TcpStream>),
    /// The coordinator's end closed after it accepted the tether: its process ended.
    Ended(Cut),
}

/// Opens a tether to `addr` with `header` (within `open_timeout`), waits up to
/// `accept_timeout` for the coordinator to accept it ([`ACCEPTED`]), then holds it until
/// `released` completes or the coordinator's end closes.
pub async fn hold(
    addr: SocketAddr,
    header: &Header,
    open_timeout: Duration,
    accept_timeout: Duration,
    released: impl std::future::Future<Output = ()>,
) -> Held {
    tokio::pin!(released);
    let mut stream = tokio::select! {
        opened = open(addr, header, open_timeout) => match opened {
            Ok(s) => s,
            Err(e) => return Held::NotAccepted(e.to_string()),
        },
        () = &mut released => return Held::Released(None),
    };
    let mut byte = [0u8; 1];
    let accepted = tokio::select! {
        read = tokio::time::timeout(accept_timeout, stream.read(&mut byte)) => read,
        () = &mut released => return Held::Released(Some(let_go(stream).await)),
    };
    match accepted {
        Ok(Ok(1)) if byte[0] == ACCEPTED => {}
        Ok(Ok(1)) => {
            return Held::NotAccepted(format!("the coordinator answered {:#04x}, not {ACCEPTED:#04x}", byte[0]))
        }
        Ok(Ok(_)) => return Held::NotAccepted("the coordinator ended it without accepting it".into()),
        Ok(Err(e)) => return Held::NotAccepted(format!("the coordinator ended it without accepting it: {e}")),
        Err(_) => {
            return Held::NotAccepted(format!("not accepted within {} ms", accept_timeout.as_millis()));
        }
    }
    tokio::select! {
        // The coordinator let go of it (it forgot the link), or broke the protocol: that says
        // nothing about its process.
        end = cut(&mut stream) => match end.how() {
            Some(_) => Held::Ended(end),
            None => Held::Released(None),
        },
        () = &mut released => Held::Released(Some(let_go(stream).await)),
    }
}

/// Lets go of a tether on purpose, either end: [`RELEASED`], then the end of this side's
/// writing; what the other end sent is read first (a socket closed with unread bytes is
/// reset, which could overtake the byte).
pub async fn let_go(mut stream: TcpStream) -> TcpStream {
    let mut sink = [0u8; 8];
    while matches!(stream.try_read(&mut sink), Ok(n) if n > 0) {}
    let _ = stream.write_all(&[RELEASED]).await;
    let _ = stream.shutdown().await;
    stream
}

/// Tells the holder of `stream` that its tether is accepted ([`ACCEPTED`]).
pub async fn accept(stream: &mut TcpStream) -> std::io::Result<()> {
    stream.write_all(&[ACCEPTED]).await
}

/// How a tether ended.
#[derive(Debug)]
pub enum Cut {
    /// The peer's end was closed: FIN (the kernel closes a dead process's sockets).
    Closed,
    /// The peer's end was reset (a process that died with unread data, or a host that forgot
    /// the connection).
    Reset,
    /// Another error of the connection.
    Failed(std::io::Error),
    /// The other end let go of it on purpose ([`RELEASED`]): its link ended, not its process.
    Released,
    /// The peer sent bytes after the header: not a tether any more (its end says nothing
    /// about the process).
    Spoke,
}

impl Cut {
    /// How a node was lost, for `Detection::ConnectionLost` — `None` when the tether's end
    /// says nothing about the process ([`Cut::Spoke`]).
    pub fn how(&self) -> Option<String> {
        match self {
            Cut::Closed => Some("its process ended: the kernel closed its liveness tether (EOF)".to_string()),
            Cut::Reset => {
                Some("its process ended: the kernel reset its liveness tether (connection reset)".to_string())
            }
            Cut::Failed(e) => Some(format!("its liveness tether failed: {e}")),
            Cut::Released | Cut::Spoke => None,
        }
    }
}

/// Waits until the tether on `stream` ends, and says how. Reads nothing but the end (a byte
/// is [`Cut::Spoke`]); cancel-safe.
pub async fn cut(stream: &mut TcpStream) -> Cut {
    let mut byte = [0u8; 1];
    loop {
        return match stream.read(&mut byte).await {
            Ok(0) => Cut::Closed,
            Ok(_) if byte[0] == RELEASED => Cut::Released,
            Ok(_) => Cut::Spoke,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Cut::Reset,
            Err(e) => Cut::Failed(e),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        let mut key = [0u8; KEY_BYTES];
        for (i, b) in key.iter_mut().enumerate() {
            *b = i as u8;
        }
        Header { holder: Holder::Node(7), key: TetherKey(key) }
    }

    #[test]
    fn a_header_decodes_to_itself() {
        let bytes = header().encode();
        assert_eq!(bytes.len(), HEADER_BYTES);
        assert_eq!(&bytes[..8], b"glasstth");
        assert_eq!(&bytes[8..16], &7u64.to_le_bytes());
        assert_eq!(Header::decode(&bytes).unwrap(), header());
    }

    #[test]
    fn a_wrong_magic_is_refused_at_once() {
        let mut bytes = header().encode();
        bytes[0] = b'G';
        assert!(matches!(Header::decode(&bytes), Err(TetherError::WrongMagic { .. })));
        // Before the rest of the header is there.
        assert!(matches!(Header::decode(&bytes[..9]), Err(TetherError::WrongMagic { .. })));
        assert!(matches!(Header::decode(b"GET / HTTP/1.1\r\n"), Err(TetherError::WrongMagic { .. })));
    }

    #[test]
    fn a_short_header_is_refused() {
        let bytes = header().encode();
        for len in [0, 5, 8, 16, HEADER_BYTES - 1] {
            assert!(
                matches!(Header::decode(&bytes[..len]), Err(TetherError::Short { got }) if got == len),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn a_node_id_out_of_range_is_refused() {
        let mut bytes = header().encode();
        bytes[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(matches!(Header::decode(&bytes), Err(TetherError::NodeOutOfRange { .. })));
    }

    #[test]
    fn coordinators_and_clients_hold_tethers_of_their_own_kind() {
        let key = header().key;
        for holder in [Holder::Coordinator(2), Holder::Client, Holder::Node(u16::MAX)] {
            let bytes = Header { holder, key }.encode();
            assert_eq!(Header::decode(&bytes).unwrap(), Header { holder, key });
        }
        assert_eq!(&Header { holder: Holder::Client, key }.encode()[..8], b"glasstcl");
        let mut bytes = Header { holder: Holder::Coordinator(2), key }.encode();
        bytes[8..16].copy_from_slice(&256u64.to_le_bytes());
        assert!(matches!(Header::decode(&bytes), Err(TetherError::CoordinatorOutOfRange { coordinator: 256 })));
        let mut bytes = Header { holder: Holder::Client, key }.encode();
        bytes[8..16].copy_from_slice(&1u64.to_le_bytes());
        assert!(matches!(Header::decode(&bytes), Err(TetherError::ClientWithId { id: 1 })));
    }

    #[test]
    fn keys_match_only_themselves_and_are_not_printed() {
        let a = header().key;
        let mut other = a;
        other.0[31] ^= 1;
        assert!(a.matches(&a));
        assert!(!a.matches(&other));
        assert_eq!(format!("{a:?}"), "TetherKey(..)");
    }

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (dialled, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (dialled.unwrap(), accepted.unwrap().0)
    }

    #[tokio::test]
    async fn read_header_takes_an_opened_tether_and_refuses_others() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sent = header();
        let (opened, accepted) = tokio::join!(open(addr, &sent, Duration::from_secs(5)), listener.accept());
        let mut opened = opened.unwrap();
        let mut accepted = accepted.unwrap().0;
        assert_eq!(read_header(&mut accepted, Duration::from_secs(5)).await.unwrap(), header());

        // Its end is seen as a close.
        opened.shutdown().await.unwrap();
        drop(opened);
        assert!(matches!(cut(&mut accepted).await, Cut::Closed));

        // A short header, then the end: refused.
        let (mut a, mut b) = pair().await;
        a.write_all(&header().encode()[..20]).await.unwrap();
        drop(a);
        assert!(matches!(read_header(&mut b, Duration::from_secs(5)).await, Err(TetherError::Short { got: 20 })));

        // Silence: refused after the timeout.
        let (_a, mut b) = pair().await;
        let silent = read_header(&mut b, Duration::from_millis(50)).await;
        assert!(matches!(silent, Err(TetherError::Timeout { ms: 50 })));

        // A wrong magic: refused without waiting for the rest.
        let (mut a, mut b) = pair().await;
        a.write_all(b"GET / HT").await.unwrap();
        let wrong = read_header(&mut b, Duration::from_secs(5)).await;
        assert!(matches!(wrong, Err(TetherError::WrongMagic { .. })));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn both_ends_of_a_link_derive_its_key_and_no_other_link_has_it() {
        use crate::endpoint::{connect, listen, EndpointLimits};
        use crate::messages::{Hello, PeerKind};
        use crate::tls::{self, Identity};

        let dir = std::env::temp_dir().join(format!("glass-tether-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut cfg = crate::ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
        cfg.cert_dir = dir.clone();
        tls::init_cluster(&cfg, false).unwrap();
        let hello = |role, id| Hello {
            protocol_version: crate::PROTOCOL_VERSION,
            role,
            id,
            config_fingerprint: cfg.fingerprint(),
        };
        let limits = EndpointLimits { handshake_timeout: Duration::from_secs(5), ..EndpointLimits::default() };
        let server = tls::server_config(&cfg.cert_dir, Identity::Coordinator(0)).unwrap();
        let mut listener =
            listen("127.0.0.1:0".parse().unwrap(), server, hello(PeerKind::Coordinator, 0), limits.clone())
                .await
                .unwrap();
        let mut keys = Vec::new();
        for _ in 0..2 {
            let client = tls::client_config(&cfg.cert_dir, Identity::Client).unwrap();
            let dialled =
                connect(listener.local_addr(), "localhost", client, hello(PeerKind::Client, 7), limits.clone());
            let (dialled, accepted) = tokio::join!(dialled, listener.accept());
            let (dialled, accepted) = (dialled.unwrap(), accepted.unwrap());
            let key = dialled.tether_key().expect("TLS 1.3 exports keying material");
            assert!(key.matches(&accepted.tether_key().unwrap()), "both ends of one link derive one key");
            let (sender, receiver) = accepted.split();
            assert!(key.matches(&sender.tether_key().unwrap()) && key.matches(&receiver.tether_key().unwrap()));
            keys.push(key);
        }
        assert!(!keys[0].matches(&keys[1]), "two links, two keys");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_held_tether_ends_as_refused_released_or_cut() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let second = Duration::from_secs(5);
        let never = std::future::pending::<()>();
        let h = header();

        // Dropped without the accepting byte: a refusal, not a death.
        let refusing = async {
            let (mut s, _) = listener.accept().await.unwrap();
            read_header(&mut s, second).await.unwrap();
        };
        let (held, ()) = tokio::join!(hold(addr, &h, second, second, never), refusing);
        assert!(matches!(held, Held::NotAccepted(_)), "{held:?}");

        // Accepted, then its end closes: the coordinator's process ended.
        let dying = async {
            let (mut s, _) = listener.accept().await.unwrap();
            read_header(&mut s, second).await.unwrap();
            accept(&mut s).await.unwrap();
        };
        let (held, ()) = tokio::join!(hold(addr, &h, second, second, std::future::pending()), dying);
        assert!(matches!(held, Held::Ended(Cut::Closed)), "{held:?}");

        // Accepted, then let go of by the coordinator (it forgot the link): no death.
        let forgetting = async {
            let (mut s, _) = listener.accept().await.unwrap();
            read_header(&mut s, second).await.unwrap();
            accept(&mut s).await.unwrap();
            drop(let_go(s).await);
        };
        let (held, ()) = tokio::join!(hold(addr, &h, second, second, std::future::pending()), forgetting);
        assert!(matches!(held, Held::Released(None)), "{held:?}");

        // Accepted and let go of by the holder: the coordinator sees the close.
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let watching = async {
            let (mut s, _) = listener.accept().await.unwrap();
            read_header(&mut s, second).await.unwrap();
            accept(&mut s).await.unwrap();
            let _ = release.send(());
            cut(&mut s).await
        };
        // (The stream it hands back is dropped at once, which the coordinator sees.)
        let holding = async {
            let held = hold(addr, &h, second, second, async {
                let _ = released.await;
            });
            matches!(held.await, Held::Released(Some(_)))
        };
        let (released_with_stream, end) = tokio::join!(holding, watching);
        assert!(released_with_stream);
        assert!(matches!(end, Cut::Released), "a link's end, not a death: {end:?}");
        assert!(end.how().is_none());
    }

    #[tokio::test]
    async fn bytes_after_the_header_are_not_a_death() {
        let (mut a, mut b) = pair().await;
        a.write_all(&header().encode()).await.unwrap();
        a.write_all(b"x").await.unwrap();
        read_header(&mut b, Duration::from_secs(5)).await.unwrap();
        let c = cut(&mut b).await;
        assert!(matches!(c, Cut::Spoke));
        assert!(c.how().is_none());
    }
}
