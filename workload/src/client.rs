//! The cluster's client side: connecting to the coordinator and to nodes with the cluster's
//! client certificate, the tool requests (status, ordered digests, snapshots, shutdown), the
//! cluster-wide checks built on them, and the benchmark driver ([`driver`]).
//!
//! Guarantees:
//! - every connection is mutually authenticated (the transport refuses a peer whose
//!   certificate is not from the cluster's CA) and every request has a deadline;
//! - a snapshot (received by `node::snapshot`, which owns the transfer) is accepted only whole:
//!   chunks numbered without gaps, every checksum and row size right, the totals of its end
//!   matching what arrived, and — when every table was kept — the state digest recomputed
//!   here equal to the one the replica sent;
//! - [`check`] proves, per partition, that every live replica's state digest is equal at one
//!   point of the ordered stream (the coordinator's ordered digest), that a copy of one
//!   replica rebuilt here has that state, that TPC-C's consistency conditions hold across all
//!   partitions, and that every acknowledged NewOrder it is given has its ORDER row; in the
//!   passive modes, that every backup, once it applied the same shipments, has the primary's
//!   digest; and that read-only transactions run on every replica
//!   ([`ToolRequest::ReplicaRead`]) return the same results everywhere.
//!
//! A link's channel is chosen by who is at the other end (its Hello): the coordinator is
//! asked on the client channel ([`ClientToCoordinator`]), a node on the tool channel
//! ([`ToolRequest`]).

pub mod driver;

use std::time::Duration;

use engine::acks::{NewOrderAck, PaymentAck};
use engine::check::{CheckReport, Checker};
use engine::schema::TableId;
use engine::LeanDb;
use node::error::SnapshotProblem;
use node::snapshot::{snapshot_into, SnapshotInfo};
use node::TransferError;
use wire::channel::{ClientToCoordinator, CoordinatorToClient, ToolReply, ToolRequest};
use wire::config::{resolve, split_address, ClusterConfig};
use wire::endpoint::{self, recv_matching, EndpointError, EndpointLimits, Link, RecvError};
use wire::messages::{
    DigestOutcome, Hello, NodeId, PartitionId, PeerKind, ProcessStatus, Rejection, Seq, StateDigest, PROTOCOL_VERSION,
};

/// How long a status or digest request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Acknowledged NewOrders listed when some are missing.
pub const MISSING_ACKS_SHOWN_MAX: usize = 10;
/// How long [`check`] waits for a backup to apply the shipments up to the primary's digest.
pub const BACKUP_CATCH_UP_TIMEOUT: Duration = Duration::from_secs(60);
/// Read-only transactions [`check`] runs on every replica of each partition.
pub const REPLICA_READS_PER_PARTITION: usize = 100;

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Config(#[from] wire::ConfigError),
    #[error(transparent)]
    Tls(#[from] wire::tls::TlsError),
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// An answer from a node or the coordinator did not come: a timeout, a closed link.
    #[error(transparent)]
    Recv(#[from] RecvError),
    /// A snapshot transfer failed: refused or broken ([`node::snapshot`]'s errors).
    #[error(transparent)]
    Transfer(#[from] TransferError),
    /// A process refused a request, or the request could not be made.
    #[error("{peer} refused: {reason}")]
    Refused { peer: String, reason: String },
    /// The copy of a partition could not be read.
    #[error("reading a partition's copy: {0}")]
    Storage(#[from] engine::StorageError),
    /// The coordinator rejected a request.
    #[error("the coordinator rejected the request: {0}")]
    Rejected(Rejection),
    #[error(transparent)]
    Bench(#[from] crate::bench::BenchError),
    #[error(transparent)]
    Gen(#[from] crate::error::GenError),
    #[error(transparent)]
    Dump(#[from] crate::error::DumpError),
    /// A transaction ended in a way that means the cluster is broken (not an abort).
    #[error("{count} transactions failed or were rejected; the first: {first}")]
    Transactions { count: u64, first: String },
}

/// How long [`ClusterClient::connect_coordinator`] looks for the leading coordinator of a
/// group before it gives up (an election takes about `timeouts.failure_timeout_ms`).
pub const LEADER_SEARCH_TIMEOUT: Duration = Duration::from_secs(20);
/// Pause between two rounds over the coordinators while none leads: a status request and
/// its answer on a link already open, a few hundred bytes — short, because a new leader that
/// took over serves as soon as a client knows (docs/design.md §11, "A leader's death").
const LEADER_SEARCH_PAUSE: Duration = Duration::from_millis(2);
/// How long one coordinator may take to say whether it leads.
const LEADER_ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// Connects to a cluster's processes as a client.
#[derive(Debug, Clone)]
pub struct ClusterClient {
    config: ClusterConfig,
    /// The id this client gives in its Hello.
    id: u16,
}

impl ClusterClient {
    /// A client of the cluster `config` describes (certificates from its `cert_dir`).
    pub fn new(config: ClusterConfig, id: u16) -> ClusterClient {
        ClusterClient { config, id }
    }

    /// The cluster's configuration.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// This client with another Hello id (one per connection of a benchmark).
    pub fn with_id(&self, id: u16) -> ClusterClient {
        ClusterClient { config: self.config.clone(), id }
    }

    fn hello(&self) -> Hello {
        Hello {
            protocol_version: PROTOCOL_VERSION,
            role: PeerKind::Client,
            id: self.id,
            config_fingerprint: self.config.fingerprint(),
        }
    }

    /// A link to `peer` at `address`, refusing a listener that is not that identity.
    async fn connect(&self, peer: wire::tls::Identity, field: &str, address: &str) -> Result<Link, ClientError> {
        let addr = resolve(field, address)?;
        let server_name = split_address(address)
            .map_err(|problem| wire::ConfigError::Invalid { field: field.to_string(), problem })?
            .0
            .to_string();
        let tls = wire::tls::client_config(&self.config.cert_dir, wire::tls::Identity::Client)?;
        let limits = match peer {
            wire::tls::Identity::Coordinator(_) => EndpointLimits::to_coordinator(&self.config),
            _ => EndpointLimits::from_config(&self.config),
        };
        Ok(endpoint::connect_to(peer, addr, &server_name, tls, self.hello(), limits).await?)
    }

    /// A link to the leading coordinator: the only one, or, of a group (docs/design.md §11),
    /// the one whose status says it leads and has taken over. Every coordinator is asked at
    /// once, each again every [`LEADER_SEARCH_PAUSE`] until one leads (a killed one does not
    /// hold up the others while its connection times out), for up to
    /// [`LEADER_SEARCH_TIMEOUT`].
    pub async fn connect_coordinator(&self) -> Result<Link, ClientError> {
        if self.config.coordinators.len() == 1 {
            return self.connect_coordinator_id(self.config.coordinator().id).await;
        }
        let deadline = tokio::time::Instant::now() + LEADER_SEARCH_TIMEOUT;
        // Dropped (every search still running aborted) once a leader answers.
        let mut asked = tokio::task::JoinSet::new();
        for c in self.config.coordinator_ids() {
            let me = self.clone();
            asked.spawn(async move { me.ask_until_leading(c, deadline).await });
        }
        let mut last = None;
        while let Some(joined) = asked.join_next().await {
            match joined {
                Ok(Ok(link)) => return Ok(link),
                Ok(Err(e)) => last = Some(e),
                Err(e) => last = Some(ClientError::Refused { peer: "a coordinator".into(), reason: e.to_string() }),
            }
        }
        Err(last.unwrap_or(ClientError::Refused { peer: "the coordinators".into(), reason: "none leads".into() }))
    }

    /// Asks coordinator `c` every [`LEADER_SEARCH_PAUSE`] until it leads (its link, then) or
    /// `deadline` passes (why it did not, then).
    async fn ask_until_leading(&self, c: u8, deadline: tokio::time::Instant) -> Result<Link, ClientError> {
        let mut link: Option<Link> = None;
        loop {
            let outcome = match link.as_mut() {
                Some(l) => match tokio::time::timeout(LEADER_ASK_TIMEOUT, status(l)).await {
                    Ok(Ok(s)) if s.leader == Some(s.id) && !s.partitions.is_empty() => {
                        return Ok(link.take().expect("matched"));
                    }
                    Ok(Ok(s)) => ClientError::Refused {
                        peer: format!("coordinator {c}"),
                        reason: match s.leader {
                            Some(l) if l == s.id => "taking over; not serving yet".to_string(),
                            Some(l) => format!("not the leader (coordinator {l} is)"),
                            None => "not the leader, and knows of none".to_string(),
                        },
                    },
                    Ok(Err(e)) => {
                        link = None;
                        e
                    }
                    Err(_) => {
                        link = None;
                        ClientError::Refused {
                            peer: format!("coordinator {c}"),
                            reason: format!("no status within {LEADER_ASK_TIMEOUT:?}"),
                        }
                    }
                },
                None => match self.connect_coordinator_id(c).await {
                    Ok(l) => {
                        link = Some(l);
                        continue;
                    }
                    Err(e) => e,
                },
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(outcome);
            }
            tokio::time::sleep(LEADER_SEARCH_PAUSE).await;
        }
    }

    /// A link to coordinator `id` (leading or not).
    pub async fn connect_coordinator_id(&self, id: u8) -> Result<Link, ClientError> {
        let coordinator = self.config.coordinator_by_id(id).ok_or_else(|| ClientError::Refused {
            peer: format!("coordinator {id}"),
            reason: "not in cluster.toml".into(),
        })?;
        let role = wire::tls::Identity::Coordinator(u16::from(coordinator.id));
        self.connect(role, &format!("the address of coordinator {id}"), &coordinator.address).await
    }

    /// A link to node `node`.
    pub async fn connect_node(&self, node: NodeId) -> Result<Link, ClientError> {
        let (i, n) = self.config.nodes.iter().enumerate().find(|(_, n)| n.id == node).ok_or_else(|| {
            ClientError::Refused { peer: format!("node {node}"), reason: "not in cluster.toml".into() }
        })?;
        self.connect(wire::tls::Identity::Node(node), &format!("nodes[{i}].address"), &n.address).await
    }
}

/// A client's liveness tether to the coordinator at the other end of a link
/// ([`wire::tether`]): it learns within a round trip that the coordinator's process ended,
/// where the link itself, over UDP, would wait for QUIC's idle timeout. Dropping the watch
/// lets go of the tether.
#[derive(Debug)]
pub struct CoordinatorWatch {
    died: Option<tokio::sync::oneshot::Receiver<String>>,
    _held: tokio::sync::oneshot::Sender<()>,
}

impl CoordinatorWatch {
    /// Starts holding a tether to `link`'s coordinator (on the runtime of the caller). A
    /// coordinator that does not accept one leaves the watch silent: its death is then the
    /// link's to notice.
    pub fn start(link: &Link) -> CoordinatorWatch {
        let (held, released) = tokio::sync::oneshot::channel::<()>();
        let (tell, died) = tokio::sync::oneshot::channel();
        if let Some(key) = link.tether_key().filter(|_| to_coordinator(link)) {
            let addr = link.remote_address();
            tokio::spawn(async move {
                let header = wire::tether::Header { holder: wire::tether::Holder::Client, key };
                let released = async {
                    let _ = released.await;
                };
                let (open, accept) = (wire::tether::OPEN_TIMEOUT, wire::tether::ACCEPT_TIMEOUT);
                if let wire::tether::Held::Ended(end) = wire::tether::hold(addr, &header, open, accept, released).await
                {
                    let how = end.how().unwrap_or_else(|| "its liveness tether ended".into());
                    let _ = tell.send(format!("the coordinator's process ended ({how})"));
                }
            });
        }
        CoordinatorWatch { died: Some(died), _held: held }
    }

    /// Completes when the coordinator's process ended, saying how; never otherwise.
    pub async fn died(&mut self) -> String {
        if let Some(died) = self.died.as_mut() {
            if let Ok(how) = died.await {
                return how;
            }
            self.died = None;
        }
        std::future::pending().await
    }
}

/// Whether `link` reaches the coordinator (the client channel) rather than a node (the tool
/// channel).
fn to_coordinator(link: &Link) -> bool {
    link.peer_hello().role == PeerKind::Coordinator
}

/// Asks the process at the other end of `link` for its status.
pub async fn status(link: &mut Link) -> Result<ProcessStatus, ClientError> {
    let request_id = 1;
    let what = "a status request";
    if to_coordinator(link) {
        link.send(&ClientToCoordinator::StatusRequest { request_id }).await?;
        recv_matching(link, what, REQUEST_TIMEOUT, |m| match m {
            CoordinatorToClient::StatusReply { request_id: r, status } if r == request_id => Some(status),
            _ => None,
        })
        .await
        .map_err(ClientError::from)
    } else {
        link.send(&ToolRequest::StatusRequest { request_id }).await?;
        recv_matching(link, what, REQUEST_TIMEOUT, |m| match m {
            ToolReply::StatusReply { request_id: r, status } if r == request_id => Some(status),
            _ => None,
        })
        .await
        .map_err(ClientError::from)
    }
}

/// Asks the coordinator (through the ordered path: every live replica digests its state
/// after the same batch) or a node (its replica at once) for `partition`'s state digests.
pub async fn digests(
    link: &mut Link,
    partition: PartitionId,
) -> Result<(Seq, Vec<(NodeId, StateDigest)>), ClientError> {
    let request_id = u64::from(partition) + 1_000;
    let what = "a digest request";
    let outcome = if to_coordinator(link) {
        link.send(&ClientToCoordinator::DigestRequest { request_id, partition }).await?;
        recv_matching(link, what, REQUEST_TIMEOUT, |m| match m {
            CoordinatorToClient::DigestReply { request_id: r, outcome, .. } if r == request_id => Some(outcome),
            _ => None,
        })
        .await?
    } else {
        link.send(&ToolRequest::DigestRequest { request_id, partition }).await?;
        recv_matching(link, what, REQUEST_TIMEOUT, |m| match m {
            ToolReply::DigestReply { request_id: r, outcome, .. } if r == request_id => Some(outcome),
            _ => None,
        })
        .await?
    };
    match outcome {
        DigestOutcome::Digests { seq, digests } => Ok((seq, digests)),
        DigestOutcome::Rejected(r) => Err(ClientError::Rejected(r)),
        DigestOutcome::Busy => Err(ClientError::Refused { peer: link.peer_name(), reason: "busy; retry later".into() }),
    }
}

/// Asks the process at the other end of `link` to shut down, and closes the link once the
/// request is delivered.
pub async fn shutdown(link: Link, reason: &str) -> Result<(), ClientError> {
    let coordinator = to_coordinator(&link);
    let (mut sender, _receiver) = link.split();
    let reason = reason.to_string();
    match coordinator {
        true => sender.send(&ClientToCoordinator::Shutdown { reason }).await?,
        false => sender.send(&ToolRequest::Shutdown { reason }).await?,
    }
    sender.finish(Duration::from_secs(2)).await;
    Ok(())
}

/// One partition's verdict in [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionCheck {
    pub partition: PartitionId,
    /// The batch after which every live replica digested its state.
    pub seq: Seq,
    pub digests: Vec<(NodeId, StateDigest)>,
    /// Backups (passive modes) that had not applied up to `seq` within
    /// [`BACKUP_CATCH_UP_TIMEOUT`], with the shipment they had reached.
    pub behind: Vec<(NodeId, Seq)>,
    /// Every replica's digest equal.
    pub agreed: bool,
    /// Read-only transactions run on every replica, and those whose results differed.
    pub reads: usize,
    pub reads_differing: usize,
    /// Batches the partition was sent while the reads ran (0: the cluster was quiet and the
    /// results must be the same everywhere; else the replicas were read at different points
    /// of the stream, and differing results say nothing).
    pub reads_during_batches: Seq,
    /// The replica copied, and what arrived.
    pub copied_from: NodeId,
    pub snapshot: SnapshotInfo,
    /// The digest recomputed from the copy.
    pub copy_digest: StateDigest,
    /// The copy has the replica's state: its digest equals the one sent, and the agreed one
    /// when the copy shows the same batch.
    pub copy_ok: bool,
}

impl PartitionCheck {
    /// Whether the replica reads passed: the same results everywhere, or read during traffic
    /// (not comparable).
    pub fn reads_agree(&self) -> bool {
        self.reads_differing == 0 || self.reads_during_batches > 0
    }
}

/// The verdict of [`check`].
#[derive(Debug)]
pub struct ClusterCheck {
    pub partitions: Vec<PartitionCheck>,
    pub consistency: CheckReport,
    pub acks_checked: u64,
    pub acks_missing: Vec<NewOrderAck>,
    /// Acknowledged Payments looked up, and those whose HISTORY row is missing.
    pub payments_checked: u64,
    pub payments_missing: Vec<PaymentAck>,
    /// The districts holding more ORDER or HISTORY rows added since the load than the
    /// acknowledgements given account for: transactions that ran without a "committed"
    /// answer — of unknown outcome, or run twice (docs/design.md §11, "Exactly-once
    /// answers"). Meaningful after a run on a freshly loaded cluster whose every client's
    /// acknowledgements were given.
    pub unaccounted: Vec<Unaccounted>,
}

/// A district whose rows added since the load outnumber its acknowledgements
/// ([`ClusterCheck::unaccounted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Unaccounted {
    /// `"orders"` (NewOrders) or `"history"` (Payments).
    pub table: &'static str,
    pub w: u16,
    pub d: u8,
    /// Rows added since the load.
    pub added: u64,
    /// Acknowledgements of transactions that added one.
    pub acknowledged: u64,
}

impl ClusterCheck {
    /// Rows added that no acknowledgement accounts for, over every district.
    pub fn unaccounted_rows(&self) -> u64 {
        self.unaccounted.iter().map(|u| u.added - u.acknowledged).sum()
    }
}

impl ClusterCheck {
    /// Whether every part of the check passed.
    pub fn passed(&self) -> bool {
        self.partitions.iter().all(|p| p.agreed && p.copy_ok && p.reads_agree())
            && self.consistency.all_passed()
            && self.acks_missing.is_empty()
            && self.payments_missing.is_empty()
    }
}

impl std::fmt::Display for ClusterCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "replica digests (ordered: every live replica after the same batch):")?;
        for p in &self.partitions {
            let digests: Vec<String> = p.digests.iter().map(|(n, d)| format!("node {n} {d}")).collect();
            writeln!(
                f,
                "  partition {:<3} batch {:<8} {}  {}",
                p.partition,
                p.seq,
                if p.agreed { "equal " } else { "DIFFER" },
                digests.join(", ")
            )?;
            for (n, seq) in &p.behind {
                writeln!(f, "  partition {:<3} backup on node {n} stayed at shipment {seq}: BEHIND", p.partition)?;
            }
            writeln!(
                f,
                "  partition {:<3} {} read-only transactions on every replica: {}",
                p.partition,
                p.reads,
                if p.reads_differing == 0 {
                    "same results everywhere".to_string()
                } else if p.reads_during_batches > 0 {
                    format!(
                        "{} differed, not compared: {} batches ran while the replicas were read one after another",
                        p.reads_differing, p.reads_during_batches
                    )
                } else {
                    format!("{} DIFFERED", p.reads_differing)
                }
            )?;
            writeln!(
                f,
                "  partition {:<3} copy of node {} at batch {}: {} rows in {} chunks ({:.1} MiB), digest {} {}",
                p.partition,
                p.copied_from,
                p.snapshot.seq,
                p.snapshot.rows,
                p.snapshot.chunks,
                p.snapshot.bytes as f64 / (1 << 20) as f64,
                p.copy_digest,
                if p.copy_ok { "matches" } else { "DOES NOT MATCH" }
            )?;
        }
        writeln!(f, "\nTPC-C consistency (clause 3.3.2), over every partition:\n{}", self.consistency)?;
        if self.acks_checked > 0 || !self.acks_missing.is_empty() {
            writeln!(f, "acknowledged NewOrders: {} checked, {} missing", self.acks_checked, self.acks_missing.len())?;
            for a in self.acks_missing.iter().take(MISSING_ACKS_SHOWN_MAX) {
                writeln!(f, "  missing: {a}")?;
            }
        }
        if self.payments_checked > 0 || !self.payments_missing.is_empty() {
            writeln!(
                f,
                "acknowledged Payments: {} checked, {} missing",
                self.payments_checked,
                self.payments_missing.len()
            )?;
            for a in self.payments_missing.iter().take(MISSING_ACKS_SHOWN_MAX) {
                writeln!(f, "  missing: {a:?}")?;
            }
        }
        Ok(())
    }
}

/// Checks the running cluster (see the module documentation); `acks` and `payments` are
/// NewOrders and Payments some client saw acknowledged.
pub async fn check(
    client: &ClusterClient,
    acks: &[NewOrderAck],
    payments: &[PaymentAck],
) -> Result<ClusterCheck, ClientError> {
    let config = client.config().clone();
    let mut coordinator = client.connect_coordinator().await?;
    let mut checker = Checker::new();
    let mut partitions = Vec::new();
    let mut acks_checked = 0u64;
    let mut acks_missing = Vec::new();
    let mut payments_checked = 0u64;
    let mut payments_missing = Vec::new();
    let mut unaccounted = Vec::new();
    // Failed replicas (a killed node) are left out: only live ones are compared and read.
    let live_of = status(&mut coordinator).await?;
    for p in &config.partitions {
        let live: Vec<NodeId> = live_of
            .partitions
            .iter()
            .find(|r| r.partition == p.id)
            .map(|r| r.replicas.clone())
            .unwrap_or_else(|| p.replicas.clone());
        let (seq, mut digests) = digests(&mut coordinator, p.id).await?;
        // Backups (passive modes) are not in the ordered digest: ask each once it caught up.
        let mut behind = Vec::new();
        let backups: Vec<NodeId> = match config.mode().every_replica_executes() {
            true => Vec::new(),
            false => live.iter().copied().filter(|n| !digests.iter().any(|(d, _)| d == n)).collect(),
        };
        for backup in backups {
            let mut link = client.connect_node(backup).await?;
            let deadline = tokio::time::Instant::now() + BACKUP_CATCH_UP_TIMEOUT;
            loop {
                let (at, d) = self::digests(&mut link, p.id).await?;
                if at >= seq || tokio::time::Instant::now() > deadline {
                    if at == seq {
                        digests.extend(d);
                    } else {
                        behind.push((backup, at));
                    }
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let sent_seq = |s: &ProcessStatus| s.partitions.iter().find(|r| r.partition == p.id).map_or(0, |r| r.seq);
        let before = sent_seq(&status(&mut coordinator).await?);
        let (reads, reads_differing) = replica_reads(client, p.id, &live, &p.warehouses.range()).await?;
        let reads_during_batches = sent_seq(&status(&mut coordinator).await?).saturating_sub(before);
        let agreed = !digests.is_empty() && behind.is_empty() && digests.iter().all(|(_, d)| *d == digests[0].1);
        let copied_from = digests.first().map_or(p.replicas[0], |(n, _)| *n);
        let mut link = client.connect_node(copied_from).await?;
        let mut db = LeanDb::new();
        let snapshot = snapshot_into(&mut link, p.id, &mut db, &[]).await?;
        drop(link);
        let copy_digest = StateDigest::from(engine::digest::digest(&mut db));
        let same_point_ok = snapshot.seq != seq || digests.iter().all(|(_, d)| *d == copy_digest);
        let copy_ok = copy_digest == snapshot.digest && same_point_ok;
        checker.add(&mut db);
        // Clause 1.3 and 2.5.2.2 (`engine::acks`): ORDER rows by key, HISTORY rows as a multiset.
        let mine_orders: Vec<&NewOrderAck> = acks.iter().filter(|a| p.warehouses.contains(a.w)).collect();
        let mine_payments: Vec<&PaymentAck> = payments.iter().filter(|a| p.warehouses.contains(a.w)).collect();
        acks_checked += mine_orders.len() as u64;
        payments_checked += mine_payments.len() as u64;
        unaccounted.extend(unaccounted_rows(&mut db, &mine_orders, &mine_payments));
        let gone = engine::acks::missing(&mut db, mine_orders, mine_payments)?;
        acks_missing.extend(gone.new_orders);
        payments_missing.extend(gone.payments);
        partitions.push(PartitionCheck {
            partition: p.id,
            seq,
            digests,
            behind,
            agreed,
            reads,
            reads_differing,
            reads_during_batches,
            copied_from,
            snapshot,
            copy_digest,
            copy_ok,
        });
    }
    // Acknowledgements naming a warehouse of no partition are missing by definition.
    for a in acks.iter().filter(|a| config.partition_of_warehouse(a.w).is_none()) {
        acks_checked += 1;
        acks_missing.push(*a);
    }
    Ok(ClusterCheck {
        partitions,
        consistency: checker.finish(),
        acks_checked,
        acks_missing,
        payments_checked,
        payments_missing,
        unaccounted,
    })
}

/// The districts of `db` (one partition's state) whose ORDER or HISTORY rows added since the
/// load (clause 4.3.3.1: 3,000 of each per district) outnumber the acknowledgements.
fn unaccounted_rows(db: &mut LeanDb, orders: &[&NewOrderAck], payments: &[&PaymentAck]) -> Vec<Unaccounted> {
    use std::collections::BTreeMap;
    let mut rows: BTreeMap<(&'static str, u16, u8), (u64, u64)> = BTreeMap::new();
    engine::storage::Storage::for_each::<engine::schema::t::Orders>(db, |o| {
        rows.entry(("orders", o.o_w_id, o.o_d_id)).or_default().0 += 1;
    });
    engine::storage::Storage::for_each::<engine::schema::t::Histories>(db, |h| {
        rows.entry(("history", h.h_w_id, h.h_d_id)).or_default().0 += 1;
    });
    for a in orders {
        rows.entry(("orders", a.w, a.d)).or_default().1 += 1;
    }
    for a in payments {
        rows.entry(("history", a.w, a.d)).or_default().1 += 1;
    }
    let loaded = |table| match table {
        "orders" => u64::from(engine::loader::ORDERS_PER_DISTRICT),
        _ => u64::from(engine::loader::CUSTOMERS_PER_DISTRICT),
    };
    rows.into_iter()
        .filter_map(|((table, w, d), (count, acknowledged))| {
            let added = count.saturating_sub(loaded(table));
            (added > acknowledged).then_some(Unaccounted { table, w, d, added, acknowledged })
        })
        .collect()
}

/// Runs [`REPLICA_READS_PER_PARTITION`] read-only transactions (OrderStatus and StockLevel,
/// drawn from a fixed seed) on every replica of `partition` outside the ordered path, and
/// counts those whose results were not the same on all of them. Meaningful on a quiet
/// cluster (after a run): replicas at different points of the stream may differ.
pub async fn replica_reads(
    client: &ClusterClient,
    partition: PartitionId,
    replicas: &[NodeId],
    warehouses: &std::ops::RangeInclusive<u16>,
) -> Result<(usize, usize), ClientError> {
    use crate::gen::{GenConfig, Generator, Mix, Profile};
    let mut cfg = GenConfig::for_profile(Profile::Standard, warehouses.clone());
    cfg.mix = Some(Mix::new([0, 0, 1, 0, 1]).expect("a valid mix"));
    let config = client.config();
    let mut gen = Generator::new(cfg, 0x5245_4144, config.seed).map_err(|e| ClientError::Refused {
        peer: format!("partition {partition}"),
        reason: format!("cannot draw read-only transactions: {e}"),
    })?;
    let inputs: Vec<_> = (0..REPLICA_READS_PER_PARTITION).map(|_| gen.next(engine::loader::LOAD_TIMESTAMP)).collect();
    let mut answers: Vec<Vec<wire::messages::TxnOutcome>> = Vec::new();
    for &node in replicas {
        let mut link = client.connect_node(node).await?;
        let mut outcomes = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.iter().enumerate() {
            let request_id = i as u64 + 1;
            link.send(&ToolRequest::ReplicaRead { request_id, partition, input: *input }).await?;
            let outcome = recv_matching(&mut link, "a replica read", REQUEST_TIMEOUT, |m| match m {
                ToolReply::ReplicaReadReply { request_id: r, outcome, .. } if r == request_id => Some(outcome),
                _ => None,
            })
            .await?;
            outcomes.push(outcome);
        }
        answers.push(outcomes);
    }
    let differing = (0..inputs.len()).filter(|&i| answers.iter().any(|a| a[i] != answers[0][i])).count();
    Ok((inputs.len(), differing))
}

/// Copies the whole database — every partition, from one live replica each, ITEM once — into
/// `db` (empty before). Returns what each transfer brought.
pub async fn fetch_all(client: &ClusterClient, db: &mut LeanDb) -> Result<Vec<SnapshotInfo>, ClientError> {
    let config = client.config().clone();
    let mut coordinator = client.connect_coordinator().await?;
    let status = status(&mut coordinator).await?;
    let mut out = Vec::new();
    for (i, p) in config.partitions.iter().enumerate() {
        let live =
            status.partitions.iter().find(|r| r.partition == p.id).map(|r| r.replicas.clone()).unwrap_or_default();
        let node = live.first().copied().unwrap_or(p.replicas[0]);
        let mut link = client.connect_node(node).await?;
        let skip: &[TableId] = if i == 0 { &[] } else { &[TableId::Item] };
        let info = snapshot_into(&mut link, p.id, db, skip).await?;
        if let Some(first) = out.first().map(|f: &SnapshotInfo| f.table_rows[TableId::Item as usize]) {
            if info.table_rows[TableId::Item as usize] != first {
                return Err(ClientError::Transfer(TransferError::Snapshot {
                    partition: p.id,
                    peer: format!("node {node}"),
                    problem: SnapshotProblem::ItemTableDiffers,
                }));
            }
        }
        out.push(info);
    }
    Ok(out)
}
