//! The QUIC transport over real sockets on 127.0.0.1 with real mutual TLS (docs/cluster.md,
//! "Who talks to whom"): peers with the cluster's certificates exchange Hellos and frames;
//! peers with another CA's certificate or none are refused before any message is read; bad
//! frames cost their sender its connection and nobody else theirs; `glass cluster init`'s
//! files are safe. Defect #14: a certificate acts only as its own identity (item 3), a peer
//! refused or abandoned around the Hello learns it at once with a code and a reason (item 4),
//! and certificates already issued are checked against the current cluster.toml (item 5).

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use engine::procedures::{CustomerSelector, PaymentInput, TxnInput};
use rustls::pki_types::pem::PemObject;
use wire::channel::{ClientToCoordinator, CoordinatorToNode};
use wire::codec;
use wire::endpoint::{
    connect, connect_to, listen, EndpointError, EndpointLimits, Link, Listener, CLOSE_HELLO_REFUSED,
    CLOSE_HELLO_TIMEOUT, CLOSE_IDENTITY_REFUSED, CLOSE_PROTOCOL_VIOLATION,
};
use wire::messages::{Batch, BatchTxn, ClientRequest, Hello, PeerKind};
use wire::tls::{self, init_cluster, Identity, IdentityProblem, TlsError};
use wire::{ChannelMessage, ClusterConfig, Timestamp, PROTOCOL_VERSION};

const WAIT: Duration = Duration::from_secs(10);

/// A fresh directory under the system's temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("glass-transport-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The committed cluster.toml with its certificates in a fresh directory, initialised.
fn cluster(name: &str) -> (ClusterConfig, TempDir) {
    let dir = TempDir::new(name);
    let mut cfg = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
    cfg.cert_dir = dir.0.clone();
    init_cluster(&cfg, false).unwrap();
    (cfg, dir)
}

fn hello(role: PeerKind, id: u16, cfg: &ClusterConfig) -> Hello {
    Hello { protocol_version: PROTOCOL_VERSION, role, id, config_fingerprint: cfg.fingerprint() }
}

fn limits() -> EndpointLimits {
    EndpointLimits { handshake_timeout: Duration::from_secs(5), ..EndpointLimits::default() }
}

async fn coordinator(cfg: &ClusterConfig, limits: EndpointLimits) -> Listener {
    let tls = tls::server_config(&cfg.cert_dir, Identity::Coordinator(0)).unwrap();
    listen("127.0.0.1:0".parse().unwrap(), tls, hello(PeerKind::Coordinator, 0, cfg), limits).await.unwrap()
}

async fn client(cfg: &ClusterConfig, addr: SocketAddr, server_name: &str) -> Result<Link, EndpointError> {
    let tls = tls::client_config(&cfg.cert_dir, Identity::Client).unwrap();
    connect(addr, server_name, tls, hello(PeerKind::Client, 7, cfg), limits()).await
}

async fn accept(listener: &mut Listener) -> Result<Link, EndpointError> {
    tokio::time::timeout(WAIT, listener.accept()).await.expect("accept timed out")
}

async fn recv<M: ChannelMessage>(link: &mut Link) -> Option<M> {
    tokio::time::timeout(WAIT, link.recv()).await.expect("recv timed out").unwrap()
}

fn payment(i: u32) -> TxnInput {
    TxnInput::Payment(PaymentInput {
        w_id: 1,
        d_id: 2,
        c_w_id: 1,
        c_d_id: 3,
        customer: CustomerSelector::ById(i),
        h_amount: 12_345,
        date: 1_213_056_000,
    })
}

fn batch(txns: u32) -> CoordinatorToNode {
    let txns = (0..txns)
        .map(|i| BatchTxn::whole(Timestamp::new(1 + u64::from(i >> 13), u64::from(i & 0x1fff), 0), payment(i)))
        .collect();
    CoordinatorToNode::Batch(Batch { partition: 1, seq: 9, txns, digest_after: true, answerer: None })
}

/// The largest batch of payments whose frame fits in `frame_bytes_max` (binary search).
fn batch_near(frame_bytes_max: usize) -> CoordinatorToNode {
    let fits = |n| codec::encode(&batch(n), frame_bytes_max).is_ok();
    let (mut lo, mut hi) = (0u32, 1u32);
    while fits(hi) {
        (lo, hi) = (hi, hi * 2);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    batch(lo)
}

/// An echo server: answers every message (of `M`'s channel) with itself until the peer
/// leaves; returns what ended the link.
fn echo<M: ChannelMessage>(link: Link) -> tokio::task::JoinHandle<Result<usize, EndpointError>> {
    tokio::spawn(async move {
        let (mut tx, mut rx) = link.split();
        let mut echoed = 0;
        while let Some(msg) = rx.recv::<M>().await? {
            tx.send(&msg).await?;
            echoed += 1;
        }
        Ok(echoed)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_peers_exchange_hellos_and_messages_both_ways() {
    let (cfg, _cfg_dir) = cluster("exchange");
    let mut listener = coordinator(&cfg, limits()).await;
    let (client_link, server_link) =
        tokio::join!(client(&cfg, listener.local_addr(), "localhost"), accept(&mut listener));
    let (mut c, mut s) = (client_link.unwrap(), server_link.unwrap());
    assert_eq!(c.peer_hello(), &hello(PeerKind::Coordinator, 0, &cfg));
    assert_eq!(s.peer_hello(), &hello(PeerKind::Client, 7, &cfg));
    assert_eq!(c.remote_address(), listener.local_addr());
    assert!(s.remote_address().ip().is_loopback());

    // Client → coordinator.
    let requests = ClientToCoordinator::ClientRequests(vec![ClientRequest::new(7, 1, Timestamp(0), payment(1))]);
    c.send(&requests).await.unwrap();
    assert_eq!(recv(&mut s).await, Some(requests));

    // Coordinator → client: a batch within a few hundred bytes of the frame limit, encoded
    // once and sent twice.
    let frame_bytes_max = s.frame_bytes_max();
    let big = batch_near(frame_bytes_max);
    let frame = codec::encode(&big, frame_bytes_max).unwrap();
    assert!(frame.len() > frame_bytes_max - 200, "{} of {frame_bytes_max}", frame.len());
    // (Receiving while sending: two such frames exceed QUIC's stream window.)
    let sending = async {
        s.send_encoded(&frame).await.unwrap();
        s.send(&big).await.unwrap();
    };
    let receiving = async { [recv(&mut c).await, recv(&mut c).await] };
    let ((), received) = tokio::join!(sending, receiving);
    assert_eq!(received, [Some(big.clone()), Some(big.clone())]);

    // One more transaction would not fit: refused locally, nothing sent, the link usable.
    let CoordinatorToNode::Batch(mut too_big) = big.clone() else { unreachable!() };
    too_big.txns.push(too_big.txns[0]);
    assert!(matches!(s.send(&CoordinatorToNode::Batch(too_big)).await, Err(EndpointError::Encode { .. })));

    // Split halves in separate tasks, many small messages both ways.
    let server = echo::<CoordinatorToNode>(s);
    let (mut tx, mut rx) = c.split();
    let sending = tokio::spawn(async move {
        for i in 0..1_000 {
            tx.send(&CoordinatorToNode::Heartbeat { now_ms: i }).await.unwrap();
        }
        tx.finish(WAIT).await;
    });
    for i in 0..1_000 {
        let got = tokio::time::timeout(WAIT, rx.recv()).await.unwrap().unwrap();
        assert_eq!(got, Some(CoordinatorToNode::Heartbeat { now_ms: i }));
    }
    sending.await.unwrap();
    assert_eq!(server.await.unwrap().unwrap(), 1_000);
    // The echo server's end of the link is gone: the client's stream ends.
    assert_eq!(tokio::time::timeout(WAIT, rx.recv::<CoordinatorToNode>()).await.unwrap().unwrap(), None);
}

/// The client trusts this cluster's CA (it could verify the coordinator) but presents a
/// certificate from another cluster's CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_from_another_ca_is_refused() {
    let (cfg, _cfg_dir) = cluster("foreign-server");
    let (other, _other_dir) = cluster("foreign-other");
    let mut listener = coordinator(&cfg, limits()).await;

    let mut identity = tls::load_credentials(&other.cert_dir, Identity::Client).unwrap();
    identity.ca = tls::load_ca(&cfg.cert_dir).unwrap();
    let foreign = tls::client_config_for(identity).unwrap();
    let addr = listener.local_addr();
    let refused = connect(addr, "127.0.0.1", foreign, hello(PeerKind::Client, 7, &cfg), limits()).await;
    let err = refused.expect_err("a foreign client certificate must be refused");
    assert!(matches!(err, EndpointError::CertificateRefused { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("refused this client's certificate"), "{text}");
    assert!(text.contains("run `glass cluster init`"), "{text}");

    // The listener reports the refused peer, never a link for it, and keeps serving.
    let err = accept(&mut listener).await.expect_err("no link for a foreign certificate");
    assert!(matches!(err, EndpointError::ClientCertificateRejected { .. }), "{err:?}");
    let (good, served) = tokio::join!(client(&cfg, listener.local_addr(), "127.0.0.1"), accept(&mut listener));
    assert_eq!(served.unwrap().peer_hello().id, 7);
    drop(good.unwrap());
}

/// A client of another cluster altogether does not trust the coordinator's certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_from_another_ca_is_not_trusted() {
    let (cfg, _cfg_dir) = cluster("untrusted-server");
    let (other, _other_dir) = cluster("untrusted-other");
    let mut listener = coordinator(&cfg, limits()).await;
    let err =
        client(&other, listener.local_addr(), "127.0.0.1").await.expect_err("another CA's server must not be trusted");
    assert!(matches!(err, EndpointError::PeerCertificateInvalid { .. }), "{err:?}");
    assert!(err.to_string().contains("run `glass cluster init`"), "{err}");
    // A name the certificate does not carry is refused as well.
    let err = client(&cfg, listener.local_addr(), "coordinator.elsewhere").await.expect_err("wrong name");
    assert!(matches!(err, EndpointError::PeerCertificateInvalid { .. }), "{err:?}");
    // Neither became a link on the listener's side.
    let (good, served) = tokio::join!(client(&cfg, listener.local_addr(), "localhost"), async {
        loop {
            if let Ok(link) = accept(&mut listener).await {
                return link;
            }
        }
    });
    assert_eq!(served.peer_hello().id, 7);
    drop(good);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_certificate_is_refused() {
    let (cfg, _cfg_dir) = cluster("anonymous");
    let mut listener = coordinator(&cfg, limits()).await;
    let identity = tls::load_credentials(&cfg.cert_dir, Identity::Client).unwrap();
    let mut anonymous = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(identity.roots().unwrap())
        .with_no_client_auth();
    anonymous.alpn_protocols = vec![tls::ALPN.to_vec()];
    let addr = listener.local_addr();
    let err = connect(addr, "localhost", Arc::new(anonymous), hello(PeerKind::Client, 7, &cfg), limits())
        .await
        .expect_err("a client without a certificate must be refused");
    assert!(matches!(err, EndpointError::CertificateRefused { .. }), "{err:?}");
    let err = accept(&mut listener).await.expect_err("no link without a certificate");
    assert!(matches!(err, EndpointError::ClientCertificateRejected { .. }), "{err:?}");
}

/// Bad frames close their sender's connection (during the Hello and after it); a
/// well-behaved client on the same listener is served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_cost_only_their_sender_its_connection() {
    let (cfg, _cfg_dir) = cluster("bad-frames");
    let mut listener = coordinator(&cfg, limits()).await;
    let (good, served) = tokio::join!(client(&cfg, listener.local_addr(), "127.0.0.1"), accept(&mut listener));
    let mut good = good.unwrap();
    let server = echo::<CoordinatorToNode>(served.unwrap());
    let ping = |i| CoordinatorToNode::Heartbeat { now_ms: i };
    good.send(&ping(1)).await.unwrap();
    assert_eq!(recv(&mut good).await, Some(ping(1)));

    // Garbage instead of a Hello, on a raw QUIC stream with a valid certificate.
    let raw = raw_client(&cfg, &listener).await;
    let (mut send, recv_stream) = raw.open_bi().await.unwrap();
    send.write_all(&[2, 0, 0, 0, PROTOCOL_VERSION, 200]).await.unwrap();
    let err = accept(&mut listener).await.expect_err("garbage is no Hello");
    assert!(matches!(err, EndpointError::Frame { source: wire::CodecError::Malformed(_), .. }), "{err:?}");
    match tokio::time::timeout(WAIT, raw.closed()).await.unwrap() {
        quinn::ConnectionError::ApplicationClosed(close) => {
            assert_eq!(close.error_code, quinn::VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION))
        }
        other => panic!("{other:?}"),
    }
    drop((send, recv_stream));

    // After a proper Hello: a malformed frame, then (other clients) an oversized prefix, a
    // tag naming no message of the channel, and a frame of another protocol version.
    let mut old_version = codec::encode(&ping(9), 1 << 10).unwrap();
    old_version[codec::LENGTH_PREFIX_BYTES] = PROTOCOL_VERSION - 1;
    let cases: [(&str, Vec<u8>); 4] = [
        ("malformed", vec![2, 0, 0, 0, PROTOCOL_VERSION, 200]),
        ("oversized", ((8u32 << 20) - 4).to_le_bytes().to_vec()),
        ("unknown tag", vec![5, 0, 0, 0, PROTOCOL_VERSION, 200, 0, 0, 0]),
        ("wrong version", old_version),
    ];
    for (what, bytes) in cases {
        let (bad, served) = tokio::join!(client(&cfg, listener.local_addr(), "localhost"), accept(&mut listener));
        let (mut bad, mut served) = (bad.unwrap(), served.unwrap());
        bad.send_encoded(&bytes).await.unwrap();
        let err = tokio::time::timeout(WAIT, served.recv::<CoordinatorToNode>()).await.unwrap().expect_err(what);
        let EndpointError::Frame { source, .. } = &err else { panic!("{what}: {err:?}") };
        match what {
            "malformed" => assert!(matches!(source, wire::CodecError::Malformed(_)), "{err:?}"),
            "oversized" => assert!(matches!(source, wire::CodecError::TooLarge { .. }), "{err:?}"),
            "unknown tag" => assert_eq!(
                source,
                &wire::CodecError::UnknownTag { channel: CoordinatorToNode::CHANNEL, tag: 200 },
                "{err:?}"
            ),
            _ => assert_eq!(
                source,
                &wire::CodecError::Version { got: PROTOCOL_VERSION - 1, expected: PROTOCOL_VERSION },
                "{err:?}"
            ),
        }
        // The bad client learns it was cut off, with the protocol-violation code.
        match tokio::time::timeout(WAIT, bad.recv::<CoordinatorToNode>()).await.unwrap() {
            Err(EndpointError::ClosedByPeer { code, .. }) => assert_eq!(code, u64::from(CLOSE_PROTOCOL_VIOLATION)),
            other => panic!("{what}: {other:?}"),
        }
        // The good client is still served.
        good.send(&ping(2)).await.unwrap();
        assert_eq!(recv(&mut good).await, Some(ping(2)));
    }
    drop(good);
    assert_eq!(server.await.unwrap().unwrap(), 5);
}

async fn raw_client(cfg: &ClusterConfig, listener: &Listener) -> quinn::Connection {
    let tls = tls::client_config(&cfg.cert_dir, Identity::Client).unwrap();
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    endpoint.connect(listener.local_addr(), "localhost").unwrap().await.unwrap()
}

/// The protocol version is checked at connection time: a Hello naming another version, or a
/// first frame in another version altogether, is refused with a typed error naming both
/// versions, and the dialler is told why; the listener goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_in_another_protocol_version_is_refused() {
    let (cfg, _cfg_dir) = cluster("other-version");
    let mut listener = coordinator(&cfg, limits()).await;
    let addr = listener.local_addr();
    let expected = wire::HelloMismatch::Version { theirs: PROTOCOL_VERSION + 1, ours: PROTOCOL_VERSION };

    // A Hello of this build's framing claiming another version.
    let tls = tls::client_config(&cfg.cert_dir, Identity::Client).unwrap();
    let mut newer = hello(PeerKind::Client, 7, &cfg);
    newer.protocol_version = PROTOCOL_VERSION + 1;
    let (dialled, accepted) = tokio::join!(connect(addr, "localhost", tls, newer, limits()), accept(&mut listener));
    match dialled {
        Err(EndpointError::HelloRefused { reason, .. }) => assert_eq!(reason, expected.to_string()),
        other => panic!("{other:?}"),
    }
    match accepted {
        Err(EndpointError::HelloRejected { mismatch, .. }) => assert_eq!(mismatch, expected),
        other => panic!("{other:?}"),
    }

    // A Hello framed in another version: refused the same way, with the close code and a
    // reason naming both versions.
    let raw = raw_client(&cfg, &listener).await;
    let (mut send, recv_stream) = raw.open_bi().await.unwrap();
    let mut frame = codec::encode(&wire::channel::Handshake::Hello(hello(PeerKind::Client, 7, &cfg)), 1 << 10).unwrap();
    frame[codec::LENGTH_PREFIX_BYTES] = PROTOCOL_VERSION + 1;
    send.write_all(&frame).await.unwrap();
    match accept(&mut listener).await {
        Err(EndpointError::HelloRejected { mismatch, .. }) => assert_eq!(mismatch, expected),
        other => panic!("{other:?}"),
    }
    match tokio::time::timeout(WAIT, raw.closed()).await.unwrap() {
        quinn::ConnectionError::ApplicationClosed(close) => {
            assert_eq!(close.error_code, quinn::VarInt::from_u32(CLOSE_HELLO_REFUSED));
            assert_eq!(String::from_utf8_lossy(&close.reason), expected.to_string());
        }
        other => panic!("{other:?}"),
    }
    drop((send, recv_stream));

    // The listener still serves this build's peers.
    let (good, served) = tokio::join!(client(&cfg, addr, "localhost"), accept(&mut listener));
    assert_eq!(served.unwrap().peer_hello().id, 7);
    drop(good.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_from_another_cluster_is_refused() {
    let (cfg, _cfg_dir) = cluster("other-fingerprint");
    let mut listener = coordinator(&cfg, limits()).await;
    let tls = tls::client_config(&cfg.cert_dir, Identity::Client).unwrap();
    let mut stranger = hello(PeerKind::Client, 7, &cfg);
    stranger.config_fingerprint ^= 1;
    let addr = listener.local_addr();
    let (dialled, accepted) = tokio::join!(connect(addr, "localhost", tls, stranger, limits()), accept(&mut listener));
    match dialled {
        Err(EndpointError::HelloRefused { reason, .. }) => assert!(reason.contains("fingerprint"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(accepted, Err(EndpointError::HelloRejected { .. })), "{accepted:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_refused() {
    let (cfg, _cfg_dir) = cluster("cap");
    let mut listener = coordinator(&cfg, EndpointLimits { connections_max: 1, ..limits() }).await;
    let (first, served) = tokio::join!(client(&cfg, listener.local_addr(), "localhost"), accept(&mut listener));
    let (first, served) = (first.unwrap(), served.unwrap());
    let err = client(&cfg, listener.local_addr(), "localhost").await.expect_err("past the cap");
    assert!(matches!(err, EndpointError::Busy { .. }), "{err:?}");
    assert!(matches!(accept(&mut listener).await, Err(EndpointError::TooManyConnections { .. })));
    // Closing the first frees its slot.
    drop(first);
    drop(served);
    let mut again = None;
    for _ in 0..50 {
        if let Ok(link) = client(&cfg, listener.local_addr(), "localhost").await {
            again = Some(link);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(again.is_some(), "the slot was never freed");
}

#[test]
fn init_writes_private_keys_0600_and_refuses_to_overwrite_without_force() {
    let mut cfg = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
    let dir = TempDir::new("init");
    cfg.cert_dir = dir.0.join("certs");
    let report = init_cluster(&cfg, false).unwrap();
    assert!(!report.replaced_ca);
    let roles: Vec<Identity> = report.identities.iter().map(|i| i.role).collect();
    // The default file's three coordinators, each its own identity.
    assert_eq!(
        roles,
        [
            Identity::Coordinator(0),
            Identity::Coordinator(1),
            Identity::Coordinator(2),
            Identity::Node(1),
            Identity::Node(2),
            Identity::Client
        ]
    );
    let mut keys = vec![report.ca_key.clone()];
    keys.extend(report.identities.iter().map(|i| i.key.clone()));
    for name in [
        "ca.key",
        "coordinator-0.key",
        "coordinator-1.key",
        "coordinator-2.key",
        "node-1.key",
        "node-2.key",
        "client.key",
    ] {
        let path = cfg.cert_dir.join(name);
        assert!(keys.contains(&path), "{name}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{name} has mode {mode:o}");
    }
    for name in ["ca.pem", "coordinator-0.pem", "coordinator-2.pem", "node-1.pem", "node-2.pem", "client.pem"] {
        assert!(cfg.cert_dir.join(name).is_file(), "{name}");
    }
    let coordinator = &report.identities[0];
    assert_eq!(coordinator.names, ["127.0.0.1", "localhost", "::1"]);

    let ca_before = std::fs::read(&report.ca_cert).unwrap();
    match init_cluster(&cfg, false) {
        Err(e @ TlsError::CaExists { .. }) => assert!(e.to_string().contains("--force"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(&report.ca_cert).unwrap(), ca_before, "the CA was not touched");

    let forced = init_cluster(&cfg, true).unwrap();
    assert!(forced.replaced_ca);
    assert_ne!(std::fs::read(&forced.ca_cert).unwrap(), ca_before);
    let mode = std::fs::metadata(&forced.ca_key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // And what it wrote loads.
    tls::server_config(&cfg.cert_dir, Identity::Node(2)).unwrap();
    tls::client_config(&cfg.cert_dir, Identity::Client).unwrap();
    assert!(matches!(tls::server_config(&cfg.cert_dir, Identity::Node(9)), Err(TlsError::Pem { .. })));
}

/// How long a refused peer may take to learn it before the test calls it waiting: far more
/// than a refusal takes, far less than QUIC's 30 s idle timeout a silent drop would cost.
const PROMPT: Duration = Duration::from_secs(10);

/// Dials `listener` presenting `cert`'s certificate with a Hello claiming `(role, id)`; the
/// dialler's own timeout is far beyond [`PROMPT`], so only a refusal the listener sends ends
/// it in time.
async fn dial_as(
    cfg: &ClusterConfig,
    addr: SocketAddr,
    cert: Identity,
    role: PeerKind,
    id: u16,
) -> Result<Link, EndpointError> {
    let tls = tls::client_config(&cfg.cert_dir, cert).unwrap();
    let patient = EndpointLimits { handshake_timeout: Duration::from_secs(60), ..limits() };
    let dialled = connect(addr, "localhost", tls, hello(role, id, cfg), patient);
    tokio::time::timeout(PROMPT, dialled).await.expect("the refusal never reached the dialler")
}

/// Defect #14, item 3: a certificate is bound to one identity; a Hello claiming another is
/// refused by the listener (typed, the connection closed with CLOSE_IDENTITY_REFUSED) and —
/// item 4 — the dialler learns it at once, with the reason, as a typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_claiming_another_identity_than_its_certificate_is_refused() {
    let (cfg, _cfg_dir) = cluster("identity-claims");
    let mut listener = coordinator(&cfg, limits()).await;
    let addr = listener.local_addr();
    for (cert, role, id, holder) in [
        (Identity::Client, PeerKind::Node, 1, "client"),
        (Identity::Client, PeerKind::Coordinator, 0, "client"),
        (Identity::Node(1), PeerKind::Node, 2, "node 1"),
        (Identity::Node(1), PeerKind::Coordinator, 0, "node 1"),
        (Identity::Node(2), PeerKind::Client, 7, "node 2"),
    ] {
        let claimed = Identity::claimed_by(&hello(role, id, &cfg));
        let (dialled, accepted) = tokio::join!(dial_as(&cfg, addr, cert, role, id), accept(&mut listener));
        match dialled {
            Err(EndpointError::IdentityRefused { reason, .. }) => {
                assert!(reason.contains(&format!("claims to be the {claimed}")), "{reason}");
                assert!(reason.contains(&format!("the certificate is the {holder}'s")), "{reason}");
            }
            other => panic!("{cert} claiming {claimed}: {other:?}"),
        }
        match accepted {
            Err(EndpointError::IdentityMismatch {
                claimed: c, problem: IdentityProblem::Other { holder: h }, ..
            }) => {
                assert_eq!((c, h.as_str()), (claimed, holder))
            }
            other => panic!("{cert} claiming {claimed}: {other:?}"),
        }
    }
    // Each certificate's own identity is served.
    for (cert, role, id) in [(Identity::Node(1), PeerKind::Node, 1), (Identity::Client, PeerKind::Client, 9)] {
        let (dialled, accepted) = tokio::join!(dial_as(&cfg, addr, cert, role, id), accept(&mut listener));
        dialled.unwrap();
        assert_eq!(accepted.unwrap().peer_hello(), &hello(role, id, &cfg));
    }
}

/// Defect #14, item 3, dialling side: a node dialling the coordinator must reach the
/// coordinator's certificate, not a node's that also carries 127.0.0.1; and any dialler
/// refuses a listener whose Hello is not its certificate's identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialler_refuses_a_listener_that_is_not_the_identity_it_meant() {
    let (cfg, _cfg_dir) = cluster("identity-dial");
    let node1_tls = || tls::server_config(&cfg.cert_dir, Identity::Node(1)).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut node1 = listen(any, node1_tls(), hello(PeerKind::Node, 1, &cfg), limits()).await.unwrap();
    let node2 = tls::client_config(&cfg.cert_dir, Identity::Node(2)).unwrap();
    let addr = node1.local_addr();
    let dialled = connect_to(
        Identity::Coordinator(0),
        addr,
        "127.0.0.1",
        node2.clone(),
        hello(PeerKind::Node, 2, &cfg),
        limits(),
    );
    let (dialled, accepted) = tokio::join!(tokio::time::timeout(PROMPT, dialled), accept(&mut node1));
    match dialled.expect("connect_to waited") {
        Err(e @ EndpointError::WrongPeer { expected: Identity::Coordinator(0), .. }) => {
            assert!(e.to_string().contains("is not the coordinator 0: the certificate is the node 1's"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    // The listener learns why at once: closed before any Hello, with the identity code.
    match accepted {
        Err(EndpointError::ClosedByPeer { code, reason, .. }) => {
            assert_eq!(code, u64::from(CLOSE_IDENTITY_REFUSED));
            assert!(reason.contains("meant to reach the coordinator 0"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // connect_to node 1 reaches it.
    let (dialled, accepted) = tokio::join!(
        connect_to(Identity::Node(1), addr, "127.0.0.1", node2.clone(), hello(PeerKind::Node, 2, &cfg), limits()),
        accept(&mut node1)
    );
    assert_eq!(dialled.unwrap().peer_hello(), &hello(PeerKind::Node, 1, &cfg));
    accepted.unwrap();

    // Node 1's certificate answering with the coordinator's Hello.
    let mut posing = listen(any, node1_tls(), hello(PeerKind::Coordinator, 0, &cfg), limits()).await.unwrap();
    let dialled = connect(posing.local_addr(), "localhost", node2, hello(PeerKind::Node, 2, &cfg), limits());
    let (dialled, _) = tokio::join!(dialled, accept(&mut posing));
    match dialled {
        Err(EndpointError::IdentityMismatch { claimed: Identity::Coordinator(0), problem, .. }) => {
            assert_eq!(problem, IdentityProblem::Other { holder: "node 1".into() })
        }
        other => panic!("{other:?}"),
    }
}

/// A client certificate and key (PEM) as `glass cluster init` issued them before identities
/// were bound (no identity name), from this cluster's CA.
fn client_certificate_without_identity(cfg: &ClusterConfig) -> (String, String) {
    use rcgen::{CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::from_pem(&std::fs::read_to_string(cfg.cert_dir.join("ca.key")).unwrap()).unwrap();
    let mut ca = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "glass cluster CA");
    ca.distinguished_name = dn;
    ca.is_ca = IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    let issuer = Issuer::from_params(&ca, &ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "glass client");
    leaf.distinguished_name = dn;
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    leaf.use_authority_key_identifier_extension = true;
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Defect #14, item 3: a certificate issued before identities were bound is refused, by a
/// listener and when a process loads its own, with an error that says to run
/// `glass cluster init --force`; so is a process's certificate from another CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_without_an_identity_is_refused_with_what_to_run() {
    let (cfg, cfg_dir) = cluster("identity-old");
    let mut listener = coordinator(&cfg, limits()).await;
    // The old certificate in a directory of its own, with this cluster's CA.
    let old_dir = cfg_dir.0.join("old");
    std::fs::create_dir_all(&old_dir).unwrap();
    std::fs::copy(cfg.cert_dir.join("ca.pem"), old_dir.join("ca.pem")).unwrap();
    let (cert, key) = client_certificate_without_identity(&cfg);
    std::fs::write(old_dir.join("client.pem"), cert).unwrap();
    std::fs::write(old_dir.join("client.key"), key).unwrap();

    // Loaded as a process's own: refused.
    match tls::load_credentials(&old_dir, Identity::Client) {
        Err(e @ TlsError::WrongIdentity { problem: IdentityProblem::NoIdentity, .. }) => {
            assert!(e.to_string().contains("glass cluster init --force"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    // Presented to a listener (a tool built before the check): refused, and told why.
    let old = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(tls::load_credentials(&cfg.cert_dir, Identity::Client).unwrap().roots().unwrap())
        .with_client_auth_cert(
            vec![rustls::pki_types::CertificateDer::from_pem_file(old_dir.join("client.pem")).unwrap()],
            rustls::pki_types::PrivateKeyDer::from_pem_file(old_dir.join("client.key")).unwrap(),
        )
        .unwrap();
    let mut old = old;
    old.alpn_protocols = vec![tls::ALPN.to_vec()];
    let dialled =
        connect(listener.local_addr(), "localhost", Arc::new(old), hello(PeerKind::Client, 7, &cfg), limits());
    let (dialled, accepted) = tokio::join!(tokio::time::timeout(PROMPT, dialled), accept(&mut listener));
    match dialled.expect("the refusal never reached the dialler") {
        Err(EndpointError::IdentityRefused { reason, .. }) => {
            assert!(reason.contains("carries no glass identity"), "{reason}");
            assert!(reason.contains("glass cluster init --force"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(accepted, Err(EndpointError::IdentityMismatch { problem: IdentityProblem::NoIdentity, .. })),
        "{accepted:?}"
    );

    // Another CA's certificate as a process's own: refused when loaded.
    let (other, _other_dir) = cluster("identity-old-other");
    std::fs::copy(other.cert_dir.join("client.pem"), old_dir.join("client.pem")).unwrap();
    match tls::load_credentials(&old_dir, Identity::Client) {
        Err(e @ TlsError::NotFromCa { .. }) => assert!(e.to_string().contains("glass cluster init --force"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// Defect #14, item 4, dialling side: a dialler that gives up waiting for the Hello reply
/// closes the connection with a code and a reason, so the listener does not hold it until the
/// idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialler_giving_up_tells_the_listener_at_once() {
    let (cfg, _cfg_dir) = cluster("dialler-gives-up");
    // A listener that takes the Hello and never answers it.
    let tls = tls::server_config(&cfg.cert_dir, Identity::Coordinator(0)).unwrap();
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).unwrap();
    let server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mute = quinn::Endpoint::server(server, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = mute.local_addr().unwrap();
    let serving = tokio::spawn(async move {
        let conn = mute.accept().await.unwrap().await.unwrap();
        let (_send, mut recv) = conn.accept_bi().await.unwrap();
        let mut byte = [0u8; 1];
        recv.read_exact(&mut byte).await.unwrap();
        tokio::time::timeout(PROMPT, conn.closed()).await
    });
    let hasty = EndpointLimits { handshake_timeout: Duration::from_millis(500), ..limits() };
    let tls = tls::client_config(&cfg.cert_dir, Identity::Client).unwrap();
    let err = connect(addr, "localhost", tls, hello(PeerKind::Client, 7, &cfg), hasty).await.unwrap_err();
    assert!(matches!(err, EndpointError::Timeout { .. }), "{err:?}");
    match serving.await.unwrap().expect("the dialler's close never reached the listener") {
        quinn::ConnectionError::ApplicationClosed(close) => {
            assert_eq!(close.error_code, quinn::VarInt::from_u32(CLOSE_HELLO_TIMEOUT));
            assert!(String::from_utf8_lossy(&close.reason).contains("stopped waiting for the Hello reply"));
        }
        other => panic!("{other:?}"),
    }
}

/// Defect #14, item 4: a close is sent even while the congestion window is full (quinn holds
/// a CONNECTION_CLOSE back behind in-flight data it will never see acknowledged once closed:
/// quinn issue #2785) — the peer learns the code and reason at once, not at its idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_closed_while_sending_tells_its_peer_at_once() {
    let (cfg, _cfg_dir) = cluster("close-while-sending");
    let mut listener = coordinator(&cfg, limits()).await;
    let (dialled, served) = tokio::join!(client(&cfg, listener.local_addr(), "localhost"), accept(&mut listener));
    let (mut dialled, mut served) = (dialled.unwrap(), served.unwrap());
    // Frames within the send window (the writes return at once) and far beyond the congestion
    // window of a young connection; once the peer has the first, the rest is in flight or
    // queued behind the congestion window.
    let frame = codec::encode(&batch_near(16 << 10), 16 << 10).unwrap();
    let frames: Vec<u8> = (0..64).flat_map(|_| frame.iter().copied()).collect();
    served.send_encoded(&frames).await.unwrap();
    assert!(recv::<CoordinatorToNode>(&mut dialled).await.is_some());
    served.close(CLOSE_PROTOCOL_VIOLATION, "closed while sending");
    let ended = tokio::time::timeout(PROMPT, async {
        loop {
            match dialled.recv::<CoordinatorToNode>().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    });
    match ended.await.expect("the close never reached the peer") {
        Err(EndpointError::ClosedByPeer { code, reason, .. }) => {
            assert_eq!(code, u64::from(CLOSE_PROTOCOL_VIOLATION));
            assert_eq!(reason, "closed while sending");
        }
        other => panic!("{other:?}"),
    }
}

/// Defect #14, item 5: certificates already in `cert_dir` are checked against the current
/// cluster.toml before a local cluster starts; what does not fit is named with what to run.
#[test]
fn existing_certificates_are_checked_against_the_current_addresses_and_ca() {
    let (cfg, _cfg_dir) = cluster("check-certificates");
    tls::check_certificates(&cfg).unwrap();

    // A port change keeps the certificates valid (they name hosts); a host change does not.
    let mut moved = cfg.clone();
    moved.nodes[0].address = moved.nodes[0].address.replace("127.0.0.1:", "127.0.0.1:1");
    tls::check_certificates(&moved).unwrap();
    moved.nodes[0].address = "127.0.0.2:7401".into();
    match tls::check_certificates(&moved) {
        Err(e @ TlsError::NotForAddress(_)) => {
            let text = e.to_string();
            for part in
                ["node-1.pem", "nodes[0].address = \"127.0.0.2:7401\"", "`127.0.0.2`", "glass cluster init --force"]
            {
                assert!(text.contains(part), "{part}: {text}");
            }
        }
        other => panic!("{other:?}"),
    }

    // A certificate from another CA (a CA replaced without reissuing, files mixed).
    let (other, _other_dir) = cluster("check-certificates-other");
    std::fs::copy(other.cert_dir.join("coordinator-0.pem"), cfg.cert_dir.join("coordinator-0.pem")).unwrap();
    match tls::check_certificates(&cfg) {
        Err(e @ TlsError::NotFromCa { .. }) => {
            let text = e.to_string();
            assert!(text.contains("coordinator-0.pem") && text.contains("glass cluster init --force"), "{text}");
        }
        other => panic!("{other:?}"),
    }

    // A node added to cluster.toml after `cluster init` has no certificate yet.
    let (mut grown, _grown_dir) = cluster("check-certificates-grown");
    grown.nodes.push(wire::config::NodeConfig {
        id: 3,
        address: "127.0.0.1:7405".into(),
        metrics: None,
        ssh: None,
        cpus: None,
    });
    match tls::check_certificates(&grown) {
        Err(e @ TlsError::Missing { role: Identity::Node(3), .. }) => {
            assert!(e.to_string().contains("node-3.pem") && e.to_string().contains("init --force"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}
