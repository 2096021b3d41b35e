//! The coordinator process on real QUIC over loopback: a client that breaks the protocol
//! after its Hello — a frame whose tag names no message of the client channel, or a frame of
//! another protocol version — is refused (logged at `warn`, naming it) and loses its own
//! connection, closed with the protocol-violation code; the coordinator goes on serving its
//! other clients.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use wire::channel::{ClientToCoordinator, CoordinatorToClient};
use wire::endpoint::{self, EndpointError, EndpointLimits, Link, CLOSE_PROTOCOL_VIOLATION};
use wire::messages::{Hello, PeerKind, PROTOCOL_VERSION};
use wire::tls;
use wire::ClusterConfig;

const WAIT: Duration = Duration::from_secs(10);

/// A fresh directory under the system's temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The committed cluster.toml with its certificates and run directory in a fresh directory.
fn cluster(name: &str) -> (ClusterConfig, TempDir) {
    let dir = std::env::temp_dir().join(format!("glass-coordinator-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
    cfg.cert_dir = dir.join("certs");
    cfg.run_dir = dir.join("run");
    tls::init_cluster(&cfg, false).unwrap();
    (cfg, TempDir(dir))
}

/// A client link to the coordinator at `addr`.
async fn client(cfg: &ClusterConfig, addr: SocketAddr, id: u16) -> Link {
    let tls = tls::client_config(&cfg.cert_dir, tls::Identity::Client).unwrap();
    let hello =
        Hello { protocol_version: PROTOCOL_VERSION, role: PeerKind::Client, id, config_fingerprint: cfg.fingerprint() };
    let limits = EndpointLimits { handshake_timeout: WAIT, ..EndpointLimits::default() };
    endpoint::connect_to(tls::Identity::Coordinator(0), addr, "127.0.0.1", tls, hello, limits).await.unwrap()
}

/// The coordinator's status, asked on `link` (it answers before every node joined too).
async fn status(link: &mut Link, request_id: u64) {
    link.send(&ClientToCoordinator::StatusRequest { request_id }).await.unwrap();
    match tokio::time::timeout(WAIT, link.recv::<CoordinatorToClient>()).await.unwrap().unwrap() {
        Some(CoordinatorToClient::StatusReply { request_id: r, status }) => {
            assert_eq!(r, request_id);
            assert_eq!(status.role, PeerKind::Coordinator);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_frame_costs_only_its_sender_its_connection() {
    let (cfg, _dir) = cluster("bad-frame");
    let listener = coordinator::process::bind(&cfg, 0, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(coordinator::process::run(cfg.clone(), 0, listener, async {
        let _ = stopped.await;
    }));

    let mut good = client(&cfg, addr, 1).await;
    status(&mut good, 1).await;

    let mut old_version = wire::codec::encode(&ClientToCoordinator::StatusRequest { request_id: 9 }, 1 << 10).unwrap();
    old_version[wire::codec::LENGTH_PREFIX_BYTES] = PROTOCOL_VERSION - 1;
    let unknown_tag = vec![5, 0, 0, 0, PROTOCOL_VERSION, 200, 0, 0, 0];
    for (i, (what, frame)) in [("unknown tag", unknown_tag), ("wrong version", old_version)].into_iter().enumerate() {
        let mut bad = client(&cfg, addr, 10 + i as u16).await;
        status(&mut bad, 2).await;
        bad.send_encoded(&frame).await.unwrap();
        match tokio::time::timeout(WAIT, bad.recv::<CoordinatorToClient>()).await.expect(what) {
            Err(EndpointError::ClosedByPeer { code, .. }) => {
                assert_eq!(code, u64::from(CLOSE_PROTOCOL_VIOLATION), "{what}")
            }
            other => panic!("{what}: {other:?}"),
        }
        // The well-behaved client is still served.
        status(&mut good, 3 + i as u64).await;
    }

    let _ = stop.send(());
    tokio::time::timeout(WAIT, server).await.unwrap().unwrap().unwrap();
}
