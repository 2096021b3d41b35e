//! `cluster.toml`: the schema of a glass cluster (its processes, partitions, replica placement,
//! replication mode, directories, timeouts and limits), its parsing and its validation.
//!
//! Guarantees:
//! - parsing ([`ClusterConfig::parse`]) rejects unknown keys, missing fields and wrong types,
//!   naming the field's path (`partitions[1]`) and the line and column;
//! - validation ([`ClusterConfig::validate`], separate from parsing) accepts only a usable
//!   cluster: unique node and partition ids, distinct `host:port` addresses, every partition
//!   with at least one replica and at most one per node, replicas only on listed nodes,
//!   warehouse ranges that do not overlap and cover `1..=W` without gaps, limits that can be
//!   met (a full batch fits in a frame and in the in-flight bound), transport windows within
//!   [`WINDOW_BYTES_MIN`]..=[`WINDOW_BYTES_MAX`], a full-stack worker count within bounds, and
//!   a non-empty `run_dir` and `cert_dir` (an empty one is not made the file's directory:
//!   [`ClusterConfig::from_file`] leaves it empty for validation to refuse), and a node's
//!   `cpus`, when given, non-empty, without repeats and within the kernel's CPU set;
//! - errors name the field (`partitions[1].replicas: node 2 holds two replicas of partition 1`);
//! - [`check_ports_free`] (what a launcher calls before starting processes) binds a UDP
//!   socket on every address and names the first one that fails.
//!
//! The doc comment of each field is the schema's documentation.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use engine::arena::GrowthPages;

use crate::codec::{FRAME_BYTES_MAX_CEILING, FRAME_BYTES_MAX_DEFAULT, FRAME_HEADER_BYTES};
use crate::error::{ConfigError, Problem};
use crate::messages::{CoordinatorId, NodeId, PartitionId, WarehouseId, BATCH_OVERHEAD_BYTES_MAX, TXN_ENTRY_BYTES_MAX};

mod ssh;
pub use ssh::{SshConfig, DEFAULT_REMOTE_DIR};

/// Where the glass binary looks for the cluster description by default.
pub const DEFAULT_PATH: &str = "cluster.toml";

/// A glass cluster: its coordinators (one leads; docs/design.md §11), nodes holding partition
/// replicas, and how they replicate.
///
/// `cluster.toml` spells the replication as three flat keys, `mode`, `shipping` and
/// `[full_stack]`; parsed, they become one [`Replication`] that carries only what its mode
/// uses (`ClusterConfig` reads and writes the file through a private flat form, so the file's
/// keys, defaults and errors are unchanged). In a mode that does not use them, `shipping` and
/// `[full_stack]` are still accepted (and checked: a known `shipping`, a `workers` count within
/// bounds): the running mode never reads them, and they are what a cluster derived from the
/// file for another mode takes ([`ClusterConfig::with_mode`], as `glass compare` and
/// `glass failover` do), and what is written back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RawClusterConfig", into = "RawClusterConfig")]
pub struct ClusterConfig {
    /// The replication mode and its own settings (`mode`, `shipping`, `[full_stack]`).
    pub replication: Replication,
    /// Seed of the TPC-C initial population: every replica of a partition loads its
    /// warehouses from it and so starts from the same state.
    pub seed: u64,
    /// Directory for the run's files (process logs, reports). A relative path is relative to
    /// the directory holding `cluster.toml`.
    pub run_dir: PathBuf,
    /// Directory of the cluster's CA and the processes' certificates and keys (written by
    /// `glass cluster init`). A relative path is relative to the directory holding
    /// `cluster.toml`.
    pub cert_dir: PathBuf,
    /// The coordinators: one leads (timestamps, batching, result agreement), the others stand
    /// by; raft among them decides who (docs/design.md §11). At least one; the file gives
    /// either one `[coordinator]` table or `[[coordinators]]` entries.
    pub coordinators: Vec<CoordinatorConfig>,
    /// The nodes: processes executing partition replicas.
    pub nodes: Vec<NodeConfig>,
    /// The partitions: disjoint warehouse ranges, each replicated on some nodes.
    pub partitions: Vec<PartitionConfig>,
    /// How many replicas' agreeing results answer a client in active-active (`agreement`;
    /// default `majority`, the same as `all` with two replicas or fewer).
    pub agreement: AgreementRule,
    /// The pages a node's tables grow into after loading (`growth_pages`: `"small"`, the
    /// default, or `"huge"`; `engine::arena::GrowthPages` says why small is the default).
    pub growth_pages: GrowthPages,
    /// Batching and resource limits (defaults apply to omitted keys).
    pub limits: Limits,
    /// Timeouts and periods (defaults apply to omitted keys).
    pub timeouts: Timeouts,
    /// The file's `shipping` and `[full_stack]` for the modes that use them: what
    /// [`ClusterConfig::with_mode`] gives a mode whose settings `replication` does not hold,
    /// and what the file form writes for them.
    file: ModeSettings,
    /// The directory of the file this was read from ([`ClusterConfig::from_file`]); not a key
    /// of the file. A cluster derived from this one on other hosts places its processes'
    /// directories relative to it (`harness::cluster::Cluster::derived`).
    pub source_dir: Option<PathBuf>,
}

/// `shipping` and `[full_stack]` as the file gives them, whatever the mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ModeSettings {
    shipping: Shipping,
    full_stack: FullStackConfig,
}

/// `cluster.toml` as written: [`ClusterConfig`] with the replication as three flat keys. The
/// doc comment of each field is the schema's documentation.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClusterConfig {
    /// Replication mode: `"active-active"` (every replica executes every transaction in
    /// timestamp order; no log), `"active-passive"` (a primary ships redo records to backups)
    /// or `"full-stack"` (the conventional stack shipping its WAL). In the passive modes the
    /// first node of a partition's `replicas` is its primary, the others its backups.
    mode: Mode,
    /// Passive modes: `"sync"` answers a client once every live backup holds the
    /// transaction's log records, `"async"` once the primary committed (default `"sync"`).
    /// Not read in `active-active` (see [`ClusterConfig`]).
    #[serde(default)]
    shipping: Shipping,
    /// Active-active: `"majority"` answers a client once a majority of the partition's
    /// replicas returned the same result (the rest are still compared when they arrive);
    /// `"all"` once every live replica did (default `"majority"`; with two replicas the two
    /// are the same). Not read in the passive modes, whose primary alone executes.
    #[serde(default)]
    agreement: AgreementRule,
    /// The pages a node's tables grow into once loaded: `"small"` (4 KiB, the default) or
    /// `"huge"` (transparent huge pages, as the loaded tables use). On a virtual machine whose
    /// host takes freed guest memory back, a fresh huge page costs several times what small
    /// pages cost to touch first (docs/results.md, "What a fresh page costs"); on a host
    /// that backs memory up front, `"huge"` is cheaper. Results are the same either way.
    #[serde(default)]
    growth_pages: GrowthPages,
    seed: u64,
    run_dir: PathBuf,
    cert_dir: PathBuf,
    /// A cluster with a single coordinator may name it in one `[coordinator]` table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    coordinator: Option<CoordinatorConfig>,
    /// The coordinators (docs/design.md §11): one leads, the others stand by.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    coordinators: Vec<CoordinatorConfig>,
    nodes: Vec<NodeConfig>,
    partitions: Vec<PartitionConfig>,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    timeouts: Timeouts,
    /// The conventional stack of `full-stack` mode (defaults apply to omitted keys); not read
    /// in the other modes (see [`ClusterConfig`]).
    #[serde(default)]
    full_stack: FullStackConfig,
}

impl From<RawClusterConfig> for ClusterConfig {
    fn from(raw: RawClusterConfig) -> ClusterConfig {
        let file = ModeSettings { shipping: raw.shipping, full_stack: raw.full_stack };
        ClusterConfig {
            replication: Replication::of(raw.mode, file.shipping, file.full_stack),
            agreement: raw.agreement,
            growth_pages: raw.growth_pages,
            seed: raw.seed,
            run_dir: raw.run_dir,
            cert_dir: raw.cert_dir,
            coordinators: raw.coordinator.into_iter().chain(raw.coordinators).collect(),
            nodes: raw.nodes,
            partitions: raw.partitions,
            limits: raw.limits,
            timeouts: raw.timeouts,
            file,
            source_dir: None,
        }
    }
}

impl From<ClusterConfig> for RawClusterConfig {
    fn from(c: ClusterConfig) -> RawClusterConfig {
        let settings = c.settings();
        RawClusterConfig {
            mode: c.mode(),
            shipping: settings.shipping,
            agreement: c.agreement,
            growth_pages: c.growth_pages,
            seed: c.seed,
            run_dir: c.run_dir,
            cert_dir: c.cert_dir,
            coordinator: (c.coordinators.len() == 1).then(|| c.coordinators[0].clone()),
            coordinators: if c.coordinators.len() == 1 { Vec::new() } else { c.coordinators },
            nodes: c.nodes,
            partitions: c.partitions,
            limits: c.limits,
            timeouts: c.timeouts,
            full_stack: settings.full_stack,
        }
    }
}

/// The replication mode with the settings only it uses (docs/design.md, "The three modes").
/// What the mode decides is asked of [`Mode`]'s methods (a [`Replication`] is a `Mode` with
/// settings; [`Replication::mode`]); what the settings decide, of `Replication`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// Every replica executes every transaction in timestamp order; no log anywhere.
    ActiveActive,
    /// The primary (the first of a partition's `replicas`) executes and ships redo records to
    /// passive backups.
    ActivePassive {
        /// When the primary answers a client.
        shipping: Shipping,
    },
    /// The conventional stack (buffer pool, 2PL, latches, WAL) on every node; the primary
    /// ships its WAL.
    FullStack {
        /// When the primary answers a client.
        shipping: Shipping,
        /// The conventional stack each node runs.
        full_stack: FullStackConfig,
    },
}

impl Replication {
    /// `mode` with the settings it uses among `shipping` and `full_stack`.
    pub fn of(mode: Mode, shipping: Shipping, full_stack: FullStackConfig) -> Replication {
        match mode {
            Mode::ActiveActive => Replication::ActiveActive,
            Mode::ActivePassive => Replication::ActivePassive { shipping },
            Mode::FullStack => Replication::FullStack { shipping, full_stack },
        }
    }

    /// The mode, as a plain tag.
    pub fn mode(&self) -> Mode {
        match self {
            Replication::ActiveActive => Mode::ActiveActive,
            Replication::ActivePassive { .. } => Mode::ActivePassive,
            Replication::FullStack { .. } => Mode::FullStack,
        }
    }

    /// When a passive mode's primary answers; `None` in active-active, which ships nothing.
    pub fn shipping(&self) -> Option<Shipping> {
        match self {
            Replication::ActiveActive => None,
            Replication::ActivePassive { shipping } | Replication::FullStack { shipping, .. } => Some(*shipping),
        }
    }

    /// The conventional stack of full-stack mode; `None` in the other modes.
    pub fn full_stack(&self) -> Option<&FullStackConfig> {
        match self {
            Replication::FullStack { full_stack, .. } => Some(full_stack),
            Replication::ActiveActive | Replication::ActivePassive { .. } => None,
        }
    }

    /// Whether a primary answers a client only once every live backup holds the
    /// transaction's log records (sync shipping); never in active-active, which has no
    /// backups (every replica executes, and answers for itself).
    pub fn answers_wait_for_backups(&self) -> bool {
        match self {
            Replication::ActiveActive => false,
            Replication::ActivePassive { shipping } | Replication::FullStack { shipping, .. } => {
                shipping.waits_for_backups()
            }
        }
    }

    /// Whether a primary may answer a client before its backups hold the transaction's log
    /// records (async shipping): a failover may then lose the last answers, the window that
    /// setting gives up. Never in active-active, which has no primary.
    pub fn answers_may_outrun_backups(&self) -> bool {
        match self {
            Replication::ActiveActive => false,
            Replication::ActivePassive { shipping } | Replication::FullStack { shipping, .. } => {
                !shipping.waits_for_backups()
            }
        }
    }
}

/// When a passive mode's primary answers (docs/design.md, "The three modes").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shipping {
    /// After every live backup holds (has applied) the transaction's log records.
    #[default]
    Sync,
    /// After the primary committed; backups lag, and a primary failure may lose the tail.
    Async,
}

impl Shipping {
    /// The name `cluster.toml` uses.
    pub fn name(self) -> &'static str {
        match self {
            Shipping::Sync => "sync",
            Shipping::Async => "async",
        }
    }

    /// Whether the primary holds a transaction's answer until every live backup acknowledged
    /// its log records.
    pub fn waits_for_backups(self) -> bool {
        match self {
            Shipping::Sync => true,
            Shipping::Async => false,
        }
    }
}

impl std::fmt::Display for Shipping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Shipping {
    type Err = crate::error::UnknownName;
    fn from_str(s: &str) -> Result<Shipping, crate::error::UnknownName> {
        match s {
            "sync" => Ok(Shipping::Sync),
            "async" => Ok(Shipping::Async),
            other => Err(crate::error::UnknownName { what: "shipping", name: other.to_string(), valid: "sync, async" }),
        }
    }
}

/// How many replicas' agreeing results answer a client in active-active (docs/cluster.md,
/// "Agreement").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgreementRule {
    /// Every live replica the batch was sent to: a failed replica holds its partition's
    /// answers up until it is declared failed.
    All,
    /// A majority of the partition's replicas (every live one, if fewer are left); the rest
    /// are compared when they report, and a replica too far behind is failed.
    #[default]
    Majority,
}

impl AgreementRule {
    /// The name `cluster.toml` uses.
    pub fn name(self) -> &'static str {
        match self {
            AgreementRule::All => "all",
            AgreementRule::Majority => "majority",
        }
    }
}

impl std::fmt::Display for AgreementRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for AgreementRule {
    type Err = crate::error::UnknownName;
    fn from_str(s: &str) -> Result<AgreementRule, crate::error::UnknownName> {
        match s {
            "all" => Ok(AgreementRule::All),
            "majority" => Ok(AgreementRule::Majority),
            other => {
                Err(crate::error::UnknownName { what: "agreement", name: other.to_string(), valid: "all, majority" })
            }
        }
    }
}

/// Most worker threads of one full-stack partition.
pub const FULL_STACK_WORKERS_MAX: u32 = 64;

/// The conventional stack each node runs in `full-stack` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FullStackConfig {
    /// Worker threads executing one partition's transactions concurrently under two-phase
    /// locking (1–64); their commits share the log's group-commit `fsync`.
    pub workers: u32,
}

impl Default for FullStackConfig {
    fn default() -> FullStackConfig {
        FullStackConfig { workers: 4 }
    }
}
/// The replication mode (docs/design.md, "The three modes"). Its behaviour lives here: every
/// decision that depends on the mode asks one of the methods below, each an exhaustive `match`
/// on the mode, so a new mode is a compile error in each of them and nowhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Every replica executes every transaction in timestamp order; no log anywhere.
    ActiveActive,
    /// The primary executes and ships redo records to passive backups.
    ActivePassive,
    /// The conventional stack (buffer pool, 2PL, latches, WAL) shipping its WAL.
    FullStack,
}

impl Mode {
    /// Every mode, in the order `glass compare` runs them.
    pub const ALL: [Mode; 3] = [Mode::ActiveActive, Mode::ActivePassive, Mode::FullStack];

    /// The name `cluster.toml` uses.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ActiveActive => "active-active",
            Mode::ActivePassive => "active-passive",
            Mode::FullStack => "full-stack",
        }
    }

    /// Whether every replica of a partition executes every batch, in timestamp order
    /// (active-active); otherwise one replica, the primary, executes and ships its log records
    /// to the others, its backups, which apply them and execute nothing (the passive modes).
    pub fn every_replica_executes(self) -> bool {
        match self {
            Mode::ActiveActive => true,
            Mode::ActivePassive | Mode::FullStack => false,
        }
    }

    /// Whether a replica keeps a durable log of its own (the conventional stack's write-ahead
    /// log): a replica that comes back recovers from it, and an unavailable partition's last
    /// primary alone may bring it back by restart recovery (docs/design.md §10). Otherwise
    /// no replica keeps a log (active-active), or the primary's redo records live only in
    /// the backups' memory (active-passive).
    pub fn replica_keeps_own_log(self) -> bool {
        match self {
            Mode::FullStack => true,
            Mode::ActiveActive | Mode::ActivePassive => false,
        }
    }

    /// Whether a replica runs the conventional stack (buffer pool, B+trees, two-phase
    /// locking, latches, write-ahead log: the paper's full Shore stack) rather than the lean
    /// kernel.
    pub fn conventional_stack(self) -> bool {
        match self {
            Mode::FullStack => true,
            Mode::ActiveActive | Mode::ActivePassive => false,
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = crate::error::UnknownName;
    fn from_str(s: &str) -> Result<Mode, crate::error::UnknownName> {
        Mode::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| crate::error::UnknownName {
            what: "mode",
            name: s.to_string(),
            valid: "active-active, active-passive, full-stack",
        })
    }
}

/// The coordinator process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoordinatorConfig {
    /// The coordinator's id, 0–255: the low 8 bits of every timestamp it issues.
    #[serde(default)]
    pub id: CoordinatorId,
    /// `host:port` the coordinator listens on (UDP, QUIC) and nodes and clients dial; the host
    /// is an IP address or a DNS name, and is the name in the coordinator's certificate.
    pub address: String,
    /// `host:port` (TCP) on which the coordinator serves its Prometheus metrics
    /// (`GET /metrics`; docs/usage.md, "Metrics"); none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// The SSH destination of the host that runs the coordinator ([`SshConfig`]); none: the
    /// host that runs `glass`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh: Option<SshConfig>,
}

/// A node process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// The node's id, unique in the cluster; partitions name their replicas by it.
    pub id: NodeId,
    /// `host:port` the node listens on (UDP, QUIC); the host is an IP address or a DNS name,
    /// and is the name in the node's certificate.
    pub address: String,
    /// `host:port` (TCP) on which the node serves its Prometheus metrics (`GET /metrics`;
    /// docs/usage.md, "Metrics"); none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// The SSH destination of the host that runs the node ([`SshConfig`]); none: the host
    /// that runs `glass`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh: Option<SshConfig>,
    /// The CPUs the node runs on, `cpus = [0, 1]`: indices into the CPUs the process may use
    /// when it starts (ascending), taken modulo their number, so that the file pins on a
    /// machine with fewer CPUs too. Each executor runs on one of them, the node's replicas
    /// taking the list in turn in the order of `[[partitions]]`; its other threads on any
    /// (docs/design.md §2, "A core per executor"). None: the kernel places every thread. At
    /// most [`CPU_INDICES_MAX`] entries, each below [`CPU_SET_SIZE`], none twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Vec<usize>>,
}

/// The most entries a node's `cpus` may list.
pub const CPU_INDICES_MAX: usize = 64;
/// One past the largest CPU index `cpus` may name: the size of the kernel's CPU set type.
pub const CPU_SET_SIZE: usize = 1024;

/// A partition: a contiguous range of warehouses and the nodes holding its replicas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionConfig {
    /// The partition's id, unique in the cluster.
    pub id: PartitionId,
    /// The warehouses the partition holds, `{ first = 1, last = 2 }` (inclusive). The
    /// partitions' ranges together cover `1..=W` without overlap or gap.
    pub warehouses: WarehouseRange,
    /// Ids of the nodes holding a replica of the partition, at most one per node; the number
    /// of entries is the replication factor.
    pub replicas: Vec<NodeId>,
}

/// An inclusive range of warehouse ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarehouseRange {
    /// First warehouse id (from 1).
    pub first: WarehouseId,
    /// Last warehouse id (inclusive, at least `first`).
    pub last: WarehouseId,
}

impl WarehouseRange {
    /// The range as a Rust range.
    pub fn range(self) -> std::ops::RangeInclusive<WarehouseId> {
        self.first..=self.last
    }

    /// Whether warehouse `w` is in the range.
    pub fn contains(self, w: WarehouseId) -> bool {
        self.range().contains(&w)
    }

    /// Number of warehouses (0 for an inverted range).
    pub fn len(self) -> u32 {
        (u32::from(self.last) + 1).saturating_sub(u32::from(self.first))
    }

    /// Whether the range holds no warehouse.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// Batching and resource limits. Each limit bounds a queue or a buffer; nothing grows past it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Transactions per batch: a partition's open batch is sent when it holds this many.
    pub batch_txns_max: u32,
    /// Microseconds a batch stays open for more transactions before it is sent anyway.
    pub batch_wait_us: u64,
    /// Transactions accepted for one partition and not yet answered; past it the coordinator
    /// answers `Busy`.
    pub inflight_txns_max: u32,
    /// Largest frame (length prefix included) a process sends or accepts, in bytes.
    pub frame_bytes_max: u32,
    /// Batches a replica holds that arrived ahead of a missing earlier one; past it the
    /// replica refuses the batch as a protocol violation.
    pub replica_pending_batches_max: u32,
    /// Under `agreement = "majority"`: batches a majority answered that one replica may leave
    /// unreported; past it the coordinator fails the replica as lagging, which bounds what it
    /// keeps for the comparison (docs/cluster.md, "Agreement").
    pub replica_lag_batches_max: u32,
    /// Client connections the coordinator accepts at once.
    pub client_connections_max: u32,
    /// QUIC receive window of one connection, in bytes: what a peer may have sent that this
    /// process has not read yet, all streams together (a connection carries one stream, whose
    /// window is the same). Bounds what a peer can make a process buffer; throughput on one
    /// connection is at most about this much per round trip. 64 KiB to 256 MiB.
    pub receive_window_bytes: u32,
    /// Bytes a process keeps of what it sent on one connection and the peer has not
    /// acknowledged yet; a send past it waits. 64 KiB to 256 MiB.
    ///
    /// What one peer can make a process hold for its connection is at most
    /// `receive_window_bytes + send_window_bytes + frame_bytes_max`; the coordinator has
    /// `client_connections_max` + one per node of them, a node 16 (docs/cluster.md, "Limits").
    pub send_window_bytes: u32,
    /// Percent of a partition executor's time that a copy for a rejoining replica or a tool
    /// (`glass check`, `dump`) may take while batches wait (docs/design.md §10, "Copying
    /// without stopping"); an idle executor copies at full speed. 1 to 100.
    pub copy_share_pct: u32,
    /// Active-active catch-up policy (docs/design.md §10, "Catching up under load"): while a
    /// rejoining replica catches up, the coordinator admits at most `100 − catch_up_share_pct`
    /// percent of the transactions per second the partition committed before the rejoin
    /// began, so the joiner gains on it. 0 turns the policy off: at saturation a joiner that
    /// executes no faster than the survivors then never catches up. 0 to 90.
    pub catch_up_share_pct: u32,
    /// Milliseconds after a rejoin's plan past which, still catching up, the coordinator
    /// gives up `catch_up_share_after_deadline_pct` percent instead.
    pub catch_up_deadline_ms: u64,
    /// The share of throughput given up past `catch_up_deadline_ms`. 0 to 95, at least
    /// `catch_up_share_pct`.
    pub catch_up_share_after_deadline_pct: u32,
}

/// Smallest `limits.receive_window_bytes` and `limits.send_window_bytes`.
pub const WINDOW_BYTES_MIN: u32 = 64 << 10;
/// Largest `limits.receive_window_bytes` and `limits.send_window_bytes`.
pub const WINDOW_BYTES_MAX: u32 = 256 << 20;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            batch_txns_max: 128,
            batch_wait_us: 200,
            inflight_txns_max: 8_192,
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT as u32,
            replica_pending_batches_max: 1_024,
            replica_lag_batches_max: 1_024,
            client_connections_max: 256,
            receive_window_bytes: 2 << 20,
            send_window_bytes: 2 << 20,
            copy_share_pct: 25,
            catch_up_share_pct: 25,
            catch_up_deadline_ms: 20_000,
            catch_up_share_after_deadline_pct: 60,
        }
    }
}

/// Timeouts and periods, with their units in their names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// Period of heartbeats between the coordinator and each node, in milliseconds.
    pub heartbeat_ms: u64,
    /// Silence after which the coordinator declares a node failed and stops waiting for its
    /// replicas, in milliseconds (at least twice `heartbeat_ms`).
    pub failure_timeout_ms: u64,
    /// Time the replicas of a partition have to load before the partition is stopped, in
    /// seconds.
    pub load_timeout_s: u64,
    /// Time to establish a connection (QUIC handshake and Hello), in milliseconds.
    pub connect_timeout_ms: u64,
    /// Time a process waits for in-flight work to drain when shutting down, in milliseconds.
    pub shutdown_timeout_ms: u64,
    /// Time a rejoining replica waits for the next piece of its starting state (a copy's
    /// chunk, a log base's piece) before it abandons that fetch and fetches again, in
    /// milliseconds.
    pub transfer_patience_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            heartbeat_ms: 100,
            failure_timeout_ms: 1_000,
            load_timeout_s: 600,
            connect_timeout_ms: 5_000,
            shutdown_timeout_ms: 5_000,
            transfer_patience_ms: 30_000,
        }
    }
}

/// What is wrong with a node's `cpus`, if anything: an empty list, too many entries, an
/// index past the CPU set, or a repeat.
fn cpus_problem(cpus: &[usize]) -> Option<Problem> {
    if cpus.is_empty() {
        return Some(Problem::NoCpus);
    }
    if cpus.len() > CPU_INDICES_MAX {
        return Some(Problem::TooManyCpus { count: cpus.len(), max: CPU_INDICES_MAX });
    }
    if let Some(&cpu) = cpus.iter().find(|&&c| c >= CPU_SET_SIZE) {
        return Some(Problem::CpuOutOfRange { cpu, size: CPU_SET_SIZE });
    }
    let mut seen = BTreeSet::new();
    cpus.iter().find(|c| !seen.insert(**c)).map(|&cpu| Problem::DuplicateCpu { cpu })
}

/// The first failing field: `Err(Invalid { field, problem })`.
fn invalid(field: impl Into<String>, problem: Problem) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid { field: field.into(), problem })
}

/// 1-based line and column of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Splits `host:port` (IPv6 hosts in brackets), checking the port is a non-zero number.
pub fn split_address(address: &str) -> Result<(&str, u16), Problem> {
    let bad = |why| Problem::BadAddress { address: address.to_string(), why };
    let (host, port) = address.rsplit_once(':').ok_or(bad("no `:port`"))?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if host.is_empty() {
        return Err(bad("no host"));
    }
    if host.contains(':') && !address.starts_with('[') {
        return Err(bad("an IPv6 host must be in brackets"));
    }
    let port: u16 = port.parse().map_err(|_| bad("the port is not a number within 1–65535"))?;
    if port == 0 {
        return Err(bad("port 0 is not a fixed port"));
    }
    Ok((host, port))
}

/// Where coordinator `id` of a group keeps its raft state: `run_dir/coordinator-<id>.raft`
/// (docs/cluster.md; written by `coordinator::store`). A few hundred bytes of decisions about
/// membership, never transactions.
pub fn coordinator_state_file(run_dir: &Path, id: CoordinatorId) -> PathBuf {
    run_dir.join(format!("coordinator-{id}.raft"))
}

/// Resolves `address` (`host:port`) to its first socket address; `field` names it in errors.
pub fn resolve(field: &str, address: &str) -> Result<SocketAddr, ConfigError> {
    let resolve_error =
        |reason: String| ConfigError::Resolve { field: field.to_string(), address: address.to_string(), reason };
    address
        .to_socket_addrs()
        .map_err(|e| resolve_error(e.to_string()))?
        .next()
        .ok_or_else(|| resolve_error("no address found".to_string()))
}

impl ClusterConfig {
    /// Parses `cluster.toml` text (no validation: see [`ClusterConfig::validate`]).
    pub fn parse(text: &str) -> Result<ClusterConfig, ConfigError> {
        let located = |field: String, e: toml::de::Error| {
            let (line, column) = e.span().map_or((1, 1), |s| line_column(text, s.start));
            ConfigError::Parse { field, message: e.message().trim().to_string(), line, column }
        };
        let de = toml::Deserializer::parse(text).map_err(|e| located("top level".to_string(), e))?;
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." { "top level".to_string() } else { path };
            located(field, e.into_inner())
        })
    }

    /// Reads and parses the file at `path`, and makes a relative `run_dir` or `cert_dir`
    /// relative to the file's directory (no validation; an empty one stays empty, so that
    /// [`ClusterConfig::validate`] refuses it rather than take the file's directory).
    pub fn from_file(path: &Path) -> Result<ClusterConfig, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        let mut config = ClusterConfig::parse(&text)?;
        let base = path.parent().unwrap_or(Path::new(""));
        // On another host the file sits in the process's `ssh.dir`: its directories must mean
        // the same there, relative to it.
        if config.any_ssh() {
            for (field, dir) in [("run_dir", &config.run_dir), ("cert_dir", &config.cert_dir)] {
                if dir.is_absolute() {
                    let problem = Problem::AbsoluteWithSsh { path: dir.display().to_string() };
                    return Err(ConfigError::Invalid { field: field.to_string(), problem });
                }
            }
        }
        config.source_dir = Some(base.to_path_buf());
        let identities = config
            .coordinators
            .iter_mut()
            .filter_map(|c| c.ssh.as_mut())
            .chain(config.nodes.iter_mut().filter_map(|n| n.ssh.as_mut()));
        for ssh in identities {
            if let Some(key) = ssh.identity.as_mut().filter(|k| k.is_relative() && !k.as_os_str().is_empty()) {
                *key = base.join(&*key);
            }
        }
        for dir in [&mut config.run_dir, &mut config.cert_dir] {
            if dir.is_relative() && !dir.as_os_str().is_empty() {
                *dir = base.join(&*dir);
            }
        }
        Ok(config)
    }

    /// [`ClusterConfig::from_file`], then [`ClusterConfig::validate`].
    pub fn load(path: &Path) -> Result<ClusterConfig, ConfigError> {
        let config = ClusterConfig::from_file(path)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks that the configuration describes a usable cluster; the error names the first
    /// field found wrong (see the module documentation for the rules).
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, dir) in [("run_dir", &self.run_dir), ("cert_dir", &self.cert_dir)] {
            if dir.as_os_str().is_empty() {
                return invalid(field, Problem::EmptyPath);
            }
        }
        self.validate_processes()?;
        self.validate_partitions()?;
        self.validate_limits()
    }

    fn validate_processes(&self) -> Result<(), ConfigError> {
        if self.nodes.is_empty() {
            return invalid("nodes", Problem::NoNodes);
        }
        // Address → the field that first used it.
        let mut addresses: BTreeMap<(String, u16), String> = BTreeMap::new();
        let mut check_address = |field: String, address: &str| -> Result<(), ConfigError> {
            let (host, port) =
                split_address(address).map_err(|problem| ConfigError::Invalid { field: field.clone(), problem })?;
            let key = (host.to_ascii_lowercase(), port);
            if let Some(other) = addresses.get(&key) {
                return invalid(
                    field,
                    Problem::DuplicateAddress { address: address.to_string(), other: other.clone() },
                );
            }
            addresses.insert(key, field.trim_end_matches(".address").to_string());
            Ok(())
        };
        if self.coordinators.is_empty() {
            return invalid("coordinators", Problem::NoCoordinators);
        }
        let mut coordinator_ids: BTreeMap<CoordinatorId, usize> = BTreeMap::new();
        for (i, c) in self.coordinators.iter().enumerate() {
            if let Some(other) = coordinator_ids.insert(c.id, i) {
                return invalid(
                    format!("coordinators[{i}].id"),
                    Problem::DuplicateCoordinatorId { coordinator: c.id, other: format!("coordinators[{other}]") },
                );
            }
            check_address(self.coordinator_field(i), &c.address)?;
        }
        let mut ids: BTreeMap<NodeId, usize> = BTreeMap::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(other) = ids.insert(node.id, i) {
                return invalid(
                    format!("nodes[{i}].id"),
                    Problem::DuplicateNodeId { node: node.id, other: format!("nodes[{other}]") },
                );
            }
            check_address(format!("nodes[{i}].address"), &node.address)?;
            if let Some(problem) = node.cpus.as_deref().and_then(cpus_problem) {
                return invalid(format!("nodes[{i}].cpus"), problem);
            }
        }
        let ssh = self.coordinators.iter().enumerate().map(|(i, c)| (self.coordinator_field(i), c.ssh.as_ref()));
        let ssh =
            ssh.chain(self.nodes.iter().enumerate().map(|(i, n)| (format!("nodes[{i}].address"), n.ssh.as_ref())));
        for (field, ssh) in ssh {
            if let Some((key, problem)) = ssh.and_then(SshConfig::problem) {
                return invalid(field.replace("address", key), problem);
            }
        }
        // A metrics endpoint is TCP, as a coordinator's liveness tethers are on its address:
        // it shares no address with a process or another endpoint.
        for (field, address) in self.metrics_addresses() {
            check_address(field, address)?;
        }
        Ok(())
    }

    fn validate_partitions(&self) -> Result<(), ConfigError> {
        if self.partitions.is_empty() {
            return invalid("partitions", Problem::NoPartitions);
        }
        let mut ids: BTreeMap<PartitionId, usize> = BTreeMap::new();
        for (i, p) in self.partitions.iter().enumerate() {
            if let Some(other) = ids.insert(p.id, i) {
                return invalid(
                    format!("partitions[{i}].id"),
                    Problem::DuplicatePartitionId { partition: p.id, other: format!("partitions[{other}]") },
                );
            }
            let field = format!("partitions[{i}].warehouses");
            if p.warehouses.first == 0 {
                return invalid(field, Problem::WarehouseZero);
            }
            if p.warehouses.is_empty() {
                return invalid(
                    field,
                    Problem::EmptyWarehouseRange { first: p.warehouses.first, last: p.warehouses.last },
                );
            }
            let field = format!("partitions[{i}].replicas");
            if p.replicas.is_empty() {
                return invalid(field, Problem::NoReplicas { partition: p.id });
            }
            for (j, &node) in p.replicas.iter().enumerate() {
                if self.node(node).is_none() {
                    return invalid(field, Problem::UnknownNode { node });
                }
                if p.replicas[..j].contains(&node) {
                    return invalid(field, Problem::DuplicateReplica { node, partition: p.id });
                }
            }
        }
        // Ranges in warehouse order: no overlap, no gap, starting at 1.
        let mut order: Vec<usize> = (0..self.partitions.len()).collect();
        order.sort_by_key(|&i| (self.partitions[i].warehouses.first, i));
        let total = self.partitions.iter().map(|p| p.warehouses.last).max().unwrap_or(0);
        let mut covered_through: WarehouseId = 0;
        let mut previous: Option<usize> = None;
        for &i in &order {
            let w = self.partitions[i].warehouses;
            if let Some(prev) = previous.filter(|_| w.first <= covered_through) {
                // Report at whichever of the two is listed later.
                let (at, other) = if i > prev { (i, prev) } else { (prev, i) };
                let (a, b) = (self.partitions[at].warehouses, self.partitions[other].warehouses);
                return invalid(
                    format!("partitions[{at}].warehouses"),
                    Problem::OverlappingWarehouses {
                        first: a.first,
                        last: a.last,
                        other: format!("partitions[{other}]"),
                        other_first: b.first,
                        other_last: b.last,
                    },
                );
            }
            if w.first > covered_through + 1 {
                return invalid(
                    "partitions",
                    Problem::WarehouseGap { missing_first: covered_through + 1, missing_last: w.first - 1, total },
                );
            }
            covered_through = w.last;
            previous = Some(i);
        }
        Ok(())
    }

    fn validate_limits(&self) -> Result<(), ConfigError> {
        let l = &self.limits;
        for (field, value) in [
            ("limits.batch_txns_max", u64::from(l.batch_txns_max)),
            ("limits.inflight_txns_max", u64::from(l.inflight_txns_max)),
            ("limits.replica_pending_batches_max", u64::from(l.replica_pending_batches_max)),
            ("limits.replica_lag_batches_max", u64::from(l.replica_lag_batches_max)),
            ("limits.client_connections_max", u64::from(l.client_connections_max)),
            ("timeouts.heartbeat_ms", self.timeouts.heartbeat_ms),
            ("timeouts.load_timeout_s", self.timeouts.load_timeout_s),
            ("timeouts.connect_timeout_ms", self.timeouts.connect_timeout_ms),
            ("timeouts.transfer_patience_ms", self.timeouts.transfer_patience_ms),
        ] {
            if value == 0 {
                return invalid(field, Problem::Zero);
            }
        }
        let frame_min = (FRAME_HEADER_BYTES as u64 + BATCH_OVERHEAD_BYTES_MAX + TXN_ENTRY_BYTES_MAX) as u32;
        if l.frame_bytes_max < frame_min {
            return invalid(
                "limits.frame_bytes_max",
                Problem::FrameTooSmall { value: l.frame_bytes_max, min: frame_min },
            );
        }
        if l.frame_bytes_max as usize > FRAME_BYTES_MAX_CEILING {
            let ceiling = FRAME_BYTES_MAX_CEILING as u32;
            return invalid("limits.frame_bytes_max", Problem::FrameTooLarge { value: l.frame_bytes_max, ceiling });
        }
        if l.batch_txns_max > l.inflight_txns_max {
            return invalid(
                "limits.batch_txns_max",
                Problem::BatchAboveInflight { value: l.batch_txns_max, inflight_txns_max: l.inflight_txns_max },
            );
        }
        let needed_bytes =
            FRAME_HEADER_BYTES as u64 + BATCH_OVERHEAD_BYTES_MAX + u64::from(l.batch_txns_max) * TXN_ENTRY_BYTES_MAX;
        if needed_bytes > u64::from(l.frame_bytes_max) {
            return invalid(
                "limits.batch_txns_max",
                Problem::BatchAboveFrame {
                    batch_txns_max: l.batch_txns_max,
                    needed_bytes,
                    frame_bytes_max: l.frame_bytes_max,
                },
            );
        }
        for (field, value) in
            [("limits.receive_window_bytes", l.receive_window_bytes), ("limits.send_window_bytes", l.send_window_bytes)]
        {
            if !(WINDOW_BYTES_MIN..=WINDOW_BYTES_MAX).contains(&value) {
                return invalid(
                    field,
                    Problem::OutOfRange {
                        value: u64::from(value),
                        min: u64::from(WINDOW_BYTES_MIN),
                        max: u64::from(WINDOW_BYTES_MAX),
                    },
                );
            }
        }
        for (field, value, min, max) in [
            ("limits.copy_share_pct", l.copy_share_pct, 1, 100),
            ("limits.catch_up_share_pct", l.catch_up_share_pct, 0, 90),
            ("limits.catch_up_share_after_deadline_pct", l.catch_up_share_after_deadline_pct, l.catch_up_share_pct, 95),
        ] {
            if !(min..=max).contains(&value) {
                let (value, min, max) = (u64::from(value), u64::from(min), u64::from(max));
                return invalid(field, Problem::OutOfRange { value, min, max });
            }
        }
        // Checked in every mode: the file's `[full_stack]` is what a derived full-stack run takes.
        let workers = self.settings().full_stack.workers;
        if !(1..=FULL_STACK_WORKERS_MAX).contains(&workers) {
            return invalid("full_stack.workers", Problem::OutOfRange { value: u64::from(workers), min: 1, max: 64 });
        }
        if self.timeouts.failure_timeout_ms < 2 * self.timeouts.heartbeat_ms {
            return invalid(
                "timeouts.failure_timeout_ms",
                Problem::FailureTimeoutTooShort {
                    value: self.timeouts.failure_timeout_ms,
                    heartbeat_ms: self.timeouts.heartbeat_ms,
                },
            );
        }
        Ok(())
    }

    /// The replication mode, as a plain tag.
    pub fn mode(&self) -> Mode {
        self.replication.mode()
    }

    /// When a passive mode's primary answers; `None` in active-active.
    pub fn shipping(&self) -> Option<Shipping> {
        self.replication.shipping()
    }

    /// The conventional stack of full-stack mode; `None` in the other modes.
    pub fn full_stack(&self) -> Option<&FullStackConfig> {
        self.replication.full_stack()
    }

    /// `shipping` and `[full_stack]` as the file form holds them: the mode's own where it has
    /// them, the file's otherwise.
    fn settings(&self) -> ModeSettings {
        ModeSettings {
            shipping: self.shipping().unwrap_or(self.file.shipping),
            full_stack: *self.full_stack().unwrap_or(&self.file.full_stack),
        }
    }

    /// The same cluster in `mode`, shipping `shipping` where given; the settings `mode` uses
    /// and this one's does not hold come from the file (see [`ClusterConfig`]).
    pub fn with_mode(&self, mode: Mode, shipping: Option<Shipping>) -> ClusterConfig {
        let mut c = self.clone();
        let mut file = self.settings();
        if let Some(s) = shipping {
            file.shipping = s;
        }
        c.replication = Replication::of(mode, file.shipping, file.full_stack);
        c.file = file;
        c
    }

    /// The node with id `id`.
    pub fn node(&self, id: NodeId) -> Option<&NodeConfig> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The partition with id `id`.
    pub fn partition(&self, id: PartitionId) -> Option<&PartitionConfig> {
        self.partitions.iter().find(|p| p.id == id)
    }

    /// The same cluster with every partition replicated `factor` times: partition `i` (in file
    /// order) on `factor` consecutive nodes starting at node `i mod n`, so primaries spread
    /// over the nodes. An error names `replicas` when the nodes cannot hold that many.
    pub fn with_replication(&self, factor: usize) -> Result<ClusterConfig, ConfigError> {
        if factor == 0 || factor > self.nodes.len() {
            return Err(ConfigError::Invalid {
                field: "partitions[].replicas".into(),
                problem: Problem::ReplicationFactor { factor, nodes: self.nodes.len() },
            });
        }
        let mut c = self.clone();
        let n = self.nodes.len();
        for (i, p) in c.partitions.iter_mut().enumerate() {
            p.replicas = (0..factor).map(|k| self.nodes[(i + k) % n].id).collect();
        }
        c.validate()?;
        Ok(c)
    }

    /// The replication factor: the most replicas any partition has.
    pub fn replication_factor(&self) -> usize {
        self.partitions.iter().map(|p| p.replicas.len()).max().unwrap_or(0)
    }

    /// The partitions with a replica on node `node`.
    pub fn partitions_on_node(&self, node: NodeId) -> impl Iterator<Item = &PartitionConfig> + '_ {
        self.partitions.iter().filter(move |p| p.replicas.contains(&node))
    }

    /// The partition holding warehouse `w`.
    pub fn partition_of_warehouse(&self, w: WarehouseId) -> Option<PartitionId> {
        self.partitions.iter().find(|p| p.warehouses.contains(w)).map(|p| p.id)
    }

    /// Number of warehouses W (the largest warehouse id of any partition).
    pub fn warehouses_total(&self) -> WarehouseId {
        self.partitions.iter().map(|p| p.warehouses.last).max().unwrap_or(0)
    }

    /// The first coordinator listed: the one a single-coordinator cluster has.
    pub fn coordinator(&self) -> &CoordinatorConfig {
        &self.coordinators[0]
    }

    /// Coordinator `id`'s configuration.
    pub fn coordinator_by_id(&self, id: CoordinatorId) -> Option<&CoordinatorConfig> {
        self.coordinators.iter().find(|c| c.id == id)
    }

    /// The coordinators' ids, in the file's order.
    pub fn coordinator_ids(&self) -> Vec<CoordinatorId> {
        self.coordinators.iter().map(|c| c.id).collect()
    }

    /// The `cluster.toml` field naming coordinator `i`'s address (in error messages).
    pub fn coordinator_field(&self, i: usize) -> String {
        match self.coordinators.len() {
            1 => "coordinator.address".to_string(),
            _ => format!("coordinators[{i}].address"),
        }
    }

    /// Every process address with the field naming it: the coordinators', then each node's.
    pub fn addresses(&self) -> Vec<(String, &str)> {
        let mut out: Vec<(String, &str)> = self
            .coordinators
            .iter()
            .enumerate()
            .map(|(i, c)| (self.coordinator_field(i), c.address.as_str()))
            .collect();
        out.extend(self.nodes.iter().enumerate().map(|(i, n)| (format!("nodes[{i}].address"), n.address.as_str())));
        out
    }

    /// Whether any process runs on another host (has an `ssh` key).
    pub fn any_ssh(&self) -> bool {
        self.coordinators.iter().any(|c| c.ssh.is_some()) || self.nodes.iter().any(|n| n.ssh.is_some())
    }

    /// Every metrics endpoint with the field naming it (`coordinators[0].metrics`, …).
    pub fn metrics_addresses(&self) -> Vec<(String, &str)> {
        let coordinators = self.coordinators.iter().enumerate().filter_map(|(i, c)| {
            let field = self.coordinator_field(i).replace(".address", ".metrics");
            Some((field, c.metrics.as_deref()?))
        });
        let nodes = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| Some((format!("nodes[{i}].metrics"), n.metrics.as_deref()?)));
        coordinators.chain(nodes).collect()
    }

    /// A 64-bit fingerprint of what every process of a cluster must agree on (mode, seed,
    /// coordinator, nodes, partitions), exchanged in `Hello`: a process started with another
    /// `cluster.toml` is refused.
    pub fn fingerprint(&self) -> u64 {
        let settings = self.settings();
        // A process's metrics endpoint, the way to its host and its CPUs are its own business:
        // the others need not agree on them.
        let coordinators: Vec<CoordinatorConfig> =
            self.coordinators.iter().map(|c| CoordinatorConfig { metrics: None, ssh: None, ..c.clone() }).collect();
        let nodes: Vec<NodeConfig> =
            self.nodes.iter().map(|n| NodeConfig { metrics: None, ssh: None, cpus: None, ..n.clone() }).collect();
        let shared =
            (self.mode(), settings.shipping, self.seed, &coordinators, &nodes, &self.partitions, &settings.full_stack);
        let bytes = bincode::serde::encode_to_vec(shared, bincode::config::standard())
            .expect("the configuration types are encodable");
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }
}

/// Checks that every address of `config` can be bound here (UDP, as QUIC uses), binding them
/// all at once; the error names the first that cannot (another process holds the port, or the
/// address is not one of this machine's). A launcher of a local cluster calls it before
/// starting any process.
pub fn check_ports_free(config: &ClusterConfig) -> Result<(), ConfigError> {
    let mut addresses = config.addresses();
    addresses.extend(config.metrics_addresses());
    check_addresses_free(addresses.iter().map(|(f, a)| (f.as_str(), *a)))
}

/// [`check_ports_free`] for chosen `(field, address)` pairs (the processes one host starts).
pub fn check_addresses_free<'a>(addresses: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<(), ConfigError> {
    let mut held = Vec::new();
    let mut held_tcp = Vec::new();
    for (field, address) in addresses {
        let addr = resolve(field, address)?;
        let in_use = |source| ConfigError::PortInUse { field: field.to_string(), address: addr, source };
        // A metrics endpoint is TCP only (docs/usage.md, "Metrics").
        if field.ends_with(".metrics") {
            held_tcp.push(std::net::TcpListener::bind(addr).map_err(in_use)?);
            continue;
        }
        held.push(UdpSocket::bind(addr).map_err(in_use)?);
        // A coordinator also listens on its port over TCP, for the nodes' liveness tethers
        // (docs/cluster.md, "Failure detection").
        if field.starts_with("coordinator") {
            held_tcp.push(std::net::TcpListener::bind(addr).map_err(in_use)?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
