//! The QUIC transport over real sockets on 127.0.0.1 with real mutual TLS (DESIGN.md,
//! "Security"): peers with the cluster's certificates exchange Hellos and frames; peers with
//! another CA's certificate or none are refused before any message is read; bad frames cost
//! their sender its connection and nobody else theirs; `glass cluster init`'s files are safe.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use engine::procedures::{CustomerSelector, PaymentInput, TxnInput};
use wire::codec;
use wire::endpoint::{connect, listen, EndpointError, EndpointLimits, Link, Listener, CLOSE_PROTOCOL_VIOLATION};
use wire::messages::{Batch, BatchTxn, ClientRequest, Hello, Role as PeerRole};
use wire::tls::{self, init_cluster, Role, TlsError};
use wire::{ClusterConfig, Message, Timestamp, PROTOCOL_VERSION};

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

fn hello(role: PeerRole, id: u16, cfg: &ClusterConfig) -> Hello {
    Hello { protocol_version: PROTOCOL_VERSION, role, id, config_fingerprint: cfg.fingerprint() }
}

fn limits() -> EndpointLimits {
    EndpointLimits { handshake_timeout: Duration::from_secs(5), ..EndpointLimits::default() }
}

async fn coordinator(cfg: &ClusterConfig, limits: EndpointLimits) -> Listener {
    let tls = tls::server_config(&cfg.cert_dir, Role::Coordinator).unwrap();
    listen("127.0.0.1:0".parse().unwrap(), tls, hello(PeerRole::Coordinator, 0, cfg), limits).await.unwrap()
}

async fn client(cfg: &ClusterConfig, addr: SocketAddr, server_name: &str) -> Result<Link, EndpointError> {
    let tls = tls::client_config(&cfg.cert_dir, Role::Client).unwrap();
    connect(addr, server_name, tls, hello(PeerRole::Client, 7, cfg), limits()).await
}

async fn accept(listener: &mut Listener) -> Result<Link, EndpointError> {
    tokio::time::timeout(WAIT, listener.accept()).await.expect("accept timed out")
}

async fn recv(link: &mut Link) -> Option<Message> {
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

fn batch(txns: u32) -> Message {
    let txns = (0..txns)
        .map(|i| BatchTxn::whole(Timestamp::new(1 + u64::from(i >> 13), u64::from(i & 0x1fff), 0), payment(i)))
        .collect();
    Message::Batch(Batch { partition: 1, seq: 9, txns, digest_after: true })
}

/// The largest batch of payments whose frame fits in `frame_bytes_max` (binary search).
fn batch_near(frame_bytes_max: usize) -> Message {
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

/// An echo server: answers every message with itself until the peer leaves; returns what
/// ended the link.
fn echo(link: Link) -> tokio::task::JoinHandle<Result<usize, EndpointError>> {
    tokio::spawn(async move {
        let (mut tx, mut rx) = link.split();
        let mut echoed = 0;
        while let Some(msg) = rx.recv().await? {
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
    assert_eq!(c.peer_hello(), &hello(PeerRole::Coordinator, 0, &cfg));
    assert_eq!(s.peer_hello(), &hello(PeerRole::Client, 7, &cfg));
    assert_eq!(c.remote_address(), listener.local_addr());
    assert!(s.remote_address().ip().is_loopback());

    // Client → coordinator.
    let requests = Message::ClientRequests(vec![ClientRequest { request_id: 1, input: payment(1) }]);
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
    let Message::Batch(mut too_big) = big.clone() else { unreachable!() };
    too_big.txns.push(too_big.txns[0]);
    assert!(matches!(s.send(&Message::Batch(too_big)).await, Err(EndpointError::Encode { .. })));

    // Split halves in separate tasks, many small messages both ways.
    let server = echo(s);
    let (mut tx, mut rx) = c.split();
    let sending = tokio::spawn(async move {
        for i in 0..1_000 {
            tx.send(&Message::Heartbeat { now_ms: i }).await.unwrap();
        }
        tx.finish(WAIT).await;
    });
    for i in 0..1_000 {
        let got = tokio::time::timeout(WAIT, rx.recv()).await.unwrap().unwrap();
        assert_eq!(got, Some(Message::Heartbeat { now_ms: i }));
    }
    sending.await.unwrap();
    assert_eq!(server.await.unwrap().unwrap(), 1_000);
    // The echo server's end of the link is gone: the client's stream ends.
    assert_eq!(tokio::time::timeout(WAIT, rx.recv()).await.unwrap().unwrap(), None);
}

/// The client trusts this cluster's CA (it could verify the coordinator) but presents a
/// certificate from another cluster's CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_from_another_ca_is_refused() {
    let (cfg, _cfg_dir) = cluster("foreign-server");
    let (other, _other_dir) = cluster("foreign-other");
    let mut listener = coordinator(&cfg, limits()).await;

    let mut identity = tls::load_identity(&other.cert_dir, Role::Client).unwrap();
    identity.ca = tls::load_ca(&cfg.cert_dir).unwrap();
    let foreign = tls::client_config_for(identity).unwrap();
    let addr = listener.local_addr();
    let refused = connect(addr, "127.0.0.1", foreign, hello(PeerRole::Client, 7, &cfg), limits()).await;
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
    let identity = tls::load_identity(&cfg.cert_dir, Role::Client).unwrap();
    let mut anonymous = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(identity.roots().unwrap())
        .with_no_client_auth();
    anonymous.alpn_protocols = vec![tls::ALPN.to_vec()];
    let addr = listener.local_addr();
    let err = connect(addr, "localhost", Arc::new(anonymous), hello(PeerRole::Client, 7, &cfg), limits())
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
    let server = echo(served.unwrap());
    let ping = |i| Message::Heartbeat { now_ms: i };
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

    // After a proper Hello: a malformed frame, then (another client) an oversized prefix.
    let cases: [(&str, Vec<u8>); 2] = [
        ("malformed", vec![2, 0, 0, 0, PROTOCOL_VERSION, 200]),
        ("oversized", ((8u32 << 20) - 4).to_le_bytes().to_vec()),
    ];
    for (what, bytes) in cases {
        let (bad, served) = tokio::join!(client(&cfg, listener.local_addr(), "localhost"), accept(&mut listener));
        let (mut bad, mut served) = (bad.unwrap(), served.unwrap());
        bad.send_encoded(&bytes).await.unwrap();
        let err = tokio::time::timeout(WAIT, served.recv()).await.unwrap().expect_err(what);
        match what {
            "malformed" => {
                assert!(matches!(err, EndpointError::Frame { source: wire::CodecError::Malformed(_), .. }), "{err:?}")
            }
            _ => assert!(
                matches!(err, EndpointError::Frame { source: wire::CodecError::TooLarge { .. }, .. }),
                "{err:?}"
            ),
        }
        // The bad client learns it was cut off, with the protocol-violation code.
        match tokio::time::timeout(WAIT, bad.recv()).await.unwrap() {
            Err(EndpointError::ClosedByPeer { code, .. }) => assert_eq!(code, u64::from(CLOSE_PROTOCOL_VIOLATION)),
            other => panic!("{what}: {other:?}"),
        }
        // The good client is still served.
        good.send(&ping(2)).await.unwrap();
        assert_eq!(recv(&mut good).await, Some(ping(2)));
    }
    drop(good);
    assert_eq!(server.await.unwrap().unwrap(), 3);
}

async fn raw_client(cfg: &ClusterConfig, listener: &Listener) -> quinn::Connection {
    let tls = tls::client_config(&cfg.cert_dir, Role::Client).unwrap();
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    endpoint.connect(listener.local_addr(), "localhost").unwrap().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_from_another_cluster_is_refused() {
    let (cfg, _cfg_dir) = cluster("other-fingerprint");
    let mut listener = coordinator(&cfg, limits()).await;
    let tls = tls::client_config(&cfg.cert_dir, Role::Client).unwrap();
    let mut stranger = hello(PeerRole::Client, 7, &cfg);
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
    let roles: Vec<Role> = report.identities.iter().map(|i| i.role).collect();
    assert_eq!(roles, [Role::Coordinator, Role::Node(1), Role::Node(2), Role::Client]);
    let mut keys = vec![report.ca_key.clone()];
    keys.extend(report.identities.iter().map(|i| i.key.clone()));
    for name in ["ca.key", "coordinator.key", "node-1.key", "node-2.key", "client.key"] {
        let path = cfg.cert_dir.join(name);
        assert!(keys.contains(&path), "{name}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{name} has mode {mode:o}");
    }
    for name in ["ca.pem", "coordinator.pem", "node-1.pem", "node-2.pem", "client.pem"] {
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
    tls::server_config(&cfg.cert_dir, Role::Node(2)).unwrap();
    tls::client_config(&cfg.cert_dir, Role::Client).unwrap();
    assert!(matches!(tls::server_config(&cfg.cert_dir, Role::Node(9)), Err(TlsError::Pem { .. })));
}
