//! The cluster benchmark driver (`glass bench --config …`): `clients` connections to the
//! coordinator, each a terminal bound to one home warehouse, each keeping up to `inflight`
//! requests outstanding and sending its new requests grouped in one frame. A terminal's home
//! warehouse is fixed; its remote warehouses (clause 2.4.1.5's remote supply warehouse,
//! 2.5.1.2's remote customer warehouse) are drawn from all of the cluster's warehouses but the
//! home one, so the standard profile produces multi-partition NewOrders and Payments on a
//! partitioned cluster; [`RemoteShares`] overrides the profile's remote shares and forces a
//! share of NewOrders multi-partition ([`crate::gen::GenConfig::multi_partition_pct`]).
//!
//! Every committed transaction of the measured phase is classified single- or
//! multi-partition by the partitions of the warehouses it touches
//! ([`engine::distributed::partitions_touched`]); the coordinator executes both kinds, and the counts
//! are reported in [`ClusterInfo`].
//!
//! - closed loop (default): a connection sends a new request for every reply;
//! - open loop (`rate`): requests are issued on a schedule of `rate` per second over all
//!   connections; a request waiting for an in-flight slot counts its wait in its latency
//!   (latency runs from its scheduled time, so a slow cluster cannot hide it).
//!
//! Latency is measured per request from its send (or schedule) to its reply. The warm-up's
//! transactions run but are not measured. The per-second lines and the report have the
//! embedded bench's shape ([`crate::bench`]); every NewOrder answered "committed" is recorded
//! ([`NewOrderAck`]), and every Payment ([`PaymentAck`]), to be looked up in the data
//! afterwards. `Busy` answers (a partition at its in-flight limit, or admitting less while a
//! replica catches up) are counted and not retried; after one the terminal pauses before it
//! issues more, [`BUSY_BACKOFF_MIN`] doubling with each further round of `Busy` up to
//! [`BUSY_BACKOFF_MAX`], back to the smallest at the next commit or abort — as a client backs off an
//! overloaded server, rather than answer every refusal at once with a new request (during a
//! rejoin's catch-up that made ~230,000 refusals a second, the cluster's CPU spent on
//! refusing).
//!
//! With `outages` (what `glass failover` runs) a connection lost to the coordinator does not end
//! the run: the terminal reconnects, to the leader, and goes on; answers that a partition is
//! unavailable (no live replica, stopped, not ready) are counted, not fatal. Every request
//! carries its id (the terminal's random client id and its sequence number), and with
//! `retries` (the default) the terminal asks again about each request a failure took the
//! answer of — outstanding on the lost connection, or answered "outcome unknown" — until it
//! has a definite answer (docs/design.md §11, "Exactly-once answers"); a retry the cluster
//! cannot answer yet ("not the leader", "not ready") is asked again. What stays unknown —
//! forgotten by the replicas, unanswered when the run ended, or (without `retries`)
//! outstanding on a lost connection — is counted as *outcome unknown*, never silently
//! dropped. Commits are also counted per 100 ms per partition, so an outage shows in the
//! timeline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engine::procedures::{TxnInput, TxnKind, TxnOutput};
use serde::Serialize;
use tokio::runtime::Handle;
use tracing::debug;
use wire::channel::{ClientToCoordinator, CoordinatorToClient};
use wire::messages::{ClientReply, ClientRequest, ClientResult, PartitionId, Rejection};

use super::{ClientError, ClusterClient};
use crate::bench::{run_seed, BenchReport, IntervalLine, Measured, Observer, StopAfter};
use crate::gen::{GenConfig, Generator, Mix, Profile};
use crate::metrics::{cpu_seconds, Stats};
use engine::acks::{NewOrderAck, PaymentAck};
use engine::loader::LOAD_TIMESTAMP;

/// Connections a bench may open.
pub const CLIENTS_MAX: usize = 1_024;
/// Requests one connection may keep outstanding.
pub const INFLIGHT_MAX: usize = 4_096;
/// Requests in one `ClientRequests` frame (each ≤ 256 bytes).
pub const REQUESTS_PER_FRAME_MAX: usize = 1_024;
/// How long the end of a run waits for outstanding replies.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Period of the open loop's scheduler.
const OPEN_LOOP_TICK: Duration = Duration::from_millis(1);
/// Failed or rejected transactions whose reasons are kept.
const FAILURES_KEPT_MAX: usize = 8;
/// Width of a bucket of the fine timeline.
pub const BUCKET: Duration = Duration::from_millis(100);
/// A terminal's pause between two commits longer than this is recorded as a gap.
pub const GAP_MIN: Duration = Duration::from_millis(20);
/// Pause between two attempts to reconnect (`outages`).
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);
/// Outage mode: after an answer that the partition cannot serve now (no live replica, not
/// ready, stopped), the terminal waits this long before issuing again, as a client backs
/// off, rather than spin the coordinator and the machine while a node recovers.
pub const UNAVAILABLE_BACKOFF: Duration = Duration::from_millis(5);
/// After a `Busy` answer the terminal waits at least this long before issuing again…
pub const BUSY_BACKOFF_MIN: Duration = Duration::from_micros(200);
/// …doubling with each `Busy` in a row, up to this.
pub const BUSY_BACKOFF_MAX: Duration = Duration::from_millis(20);

const PHASE_WARMUP: u8 = 0;
const PHASE_MEASURE: u8 = 1;
const PHASE_DRAIN: u8 = 2;

/// Everything a cluster bench depends on.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    pub profile: Profile,
    pub mix: Option<Mix>,
    /// Connections (terminals).
    pub clients: usize,
    /// Requests each connection keeps outstanding (closed loop) or may have (open loop).
    pub inflight: usize,
    /// Open loop: transactions per second over all connections.
    pub rate: Option<f64>,
    pub warmup_s: f64,
    pub stop: StopAfter,
    pub seed: u64,
    /// Keep going through failures (see the module documentation).
    pub outages: bool,
    /// Ask again, with the same request id, about every request whose answer a failure
    /// took (docs/design.md §11, "Exactly-once answers"); without it, such requests count
    /// as outcome unknown.
    pub retries: bool,
}

impl DriverConfig {
    /// Rejects impossible settings, naming the flag.
    pub fn validate(&self) -> Result<(), crate::bench::BenchError> {
        use crate::bench::BenchError::Invalid;
        if !(1..=CLIENTS_MAX).contains(&self.clients) {
            return Err(Invalid(format!("--clients must be within 1..={CLIENTS_MAX}, not {}", self.clients)));
        }
        if !(1..=INFLIGHT_MAX).contains(&self.inflight) {
            return Err(Invalid(format!("--inflight must be within 1..={INFLIGHT_MAX}, not {}", self.inflight)));
        }
        if let Some(r) = self.rate {
            if !(r > 0.0 && r.is_finite()) {
                return Err(Invalid(format!("--rate must be a positive number of transactions per second, not {r}")));
            }
        }
        match self.stop {
            StopAfter::Seconds(s) if !(s > 0.0 && s.is_finite()) => {
                return Err(Invalid(format!("--duration must be a positive number of seconds, not {s}")))
            }
            StopAfter::Transactions(0) => return Err(Invalid("--txns must be at least 1".into())),
            _ => {}
        }
        if !(self.warmup_s >= 0.0 && self.warmup_s.is_finite()) {
            return Err(Invalid(format!("--warmup must be zero or more seconds, not {}", self.warmup_s)));
        }
        Ok(())
    }
}

/// How many transactions reach beyond their home warehouse's partition: the profile's remote
/// shares, optionally overridden, and a forced multi-partition share of NewOrders. The
/// default is the profile's shares and no forcing. Kept apart from [`DriverConfig`] so that
/// callers that do not vary it keep building one as before ([`run`] uses the default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteShares {
    /// Percent of order lines supplied by a remote warehouse (clause 2.4.1.5); `None`: the
    /// profile's (standard 1, paper 0). `--remote-items`.
    pub remote_item_pct: Option<u32>,
    /// Percent of Payments by a customer of a remote warehouse (clause 2.5.1.2); `None`: the
    /// profile's (standard 15, paper 0). `--remote-payments`.
    pub remote_payment_pct: Option<u32>,
    /// Percent of NewOrders with one line supplied by a warehouse of another partition.
    /// `--multi-partition`.
    pub multi_partition_pct: u32,
}

impl RemoteShares {
    /// Rejects a percentage above 100, naming the flag.
    pub fn validate(&self) -> Result<(), crate::bench::BenchError> {
        use crate::bench::BenchError::Invalid;
        for (flag, value) in [
            ("--remote-items", self.remote_item_pct),
            ("--remote-payments", self.remote_payment_pct),
            ("--multi-partition", Some(self.multi_partition_pct)),
        ] {
            if let Some(v) = value.filter(|&v| v > 100) {
                return Err(Invalid(format!("{flag} is a percentage within 0..=100, not {v}")));
            }
        }
        Ok(())
    }

    /// `gen` with these shares applied.
    pub fn apply(&self, mut gen: GenConfig) -> GenConfig {
        if let Some(p) = self.remote_item_pct {
            gen.remote_item_pct = p;
        }
        if let Some(p) = self.remote_payment_pct {
            gen.remote_payment_pct = p;
        }
        gen.multi_partition_pct = self.multi_partition_pct;
        gen
    }
}

/// The cluster figures a cluster bench adds to [`BenchReport`] (flattened into its JSON).
#[derive(Debug, Clone, Serialize)]
pub struct ClusterInfo {
    /// Replicas of each partition (the replication factor; the largest when they differ).
    pub replicas: usize,
    /// Node processes.
    pub nodes: usize,
    pub partitions: usize,
    /// Client connections (terminals).
    pub clients: usize,
    /// Requests each connection kept outstanding (closed loop) or could have (open loop).
    pub inflight: usize,
    /// Open loop: the scheduled rate, transactions per second (absent: closed loop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Answers "busy" (a partition at its in-flight limit) during the measured phase.
    pub busy: u64,
    /// Batches the coordinator sent during the measured phase, over all partitions (absent
    /// when unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batches: Option<u64>,
    /// CPU seconds of this client process during the measured phase.
    pub client_cpu_seconds: f64,
    /// The shares the generators ran with: remote order lines (clause 2.4.1.5), remote
    /// Payments (clause 2.5.1.2) and NewOrders forced multi-partition, in percent.
    pub remote_item_pct: u32,
    pub remote_payment_pct: u32,
    pub multi_partition_pct: u32,
    /// Committed transactions of the measured phase whose warehouses all lie in one
    /// partition; with `committed_multi_partition` they sum to the report's `committed`.
    pub committed_single_partition: u64,
    /// Committed transactions of the measured phase touching warehouses of more than one
    /// partition.
    pub committed_multi_partition: u64,
    /// Per host of the cluster, the figures of the measured phase (filled in by the harness,
    /// which reads the hosts; empty when not read).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostFigures>,
}

/// One host's share of a measured phase (docs/cluster.md, "Several hosts").
#[derive(Debug, Clone, Serialize)]
pub struct HostFigures {
    /// `this host` (the control host, which also runs the client), or an SSH destination.
    pub host: String,
    /// The cluster's processes on it (and `client` on this host).
    pub processes: Vec<String>,
    /// CPU seconds its processes used during the measured phase.
    pub cpu_seconds: f64,
    /// The same per 1,000 committed transactions.
    pub cpu_seconds_per_1000_txn: f64,
    /// Resident memory of its cluster processes at the end.
    pub rss_bytes: u64,
    /// Bytes received and sent over every interface of the host (loopback included) during
    /// the measured phase; absent when not read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net_rx_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net_tx_bytes: Option<u64>,
}

/// What a cluster bench produced.
#[derive(Debug)]
pub struct DriverOutcome {
    pub report: BenchReport,
    /// Every NewOrder answered "committed", warm-up included.
    pub acks: Vec<NewOrderAck>,
    /// Every Payment answered "committed", warm-up included.
    pub payments: Vec<PaymentAck>,
    /// Requests whose outcome the run never learnt (`outages`): outstanding on a connection
    /// that was lost (without `retries`), answered "outcome unknown" and not asked again,
    /// never answered before the run ended, or whose outcome the cluster had forgotten when
    /// asked again (`forgotten`, counted here too).
    pub outcome_unknown: u64,
    /// Requests asked again that the cluster answered "outcome forgotten".
    pub forgotten: u64,
    /// Answers (committed, aborted or failed) to a request asked again after a failure took
    /// its first answer.
    pub answers_from_retries: u64,
    /// Requests sent again (each time counts).
    pub resent: u64,
    /// Answers that the partition had no live replica, was stopped or not ready (`outages`).
    pub unavailable: u64,
    /// Commits per [`BUCKET`] from `origin`, per partition (in `cluster.toml` order):
    /// `fine[i][p]`.
    pub fine: Vec<Vec<u64>>,
    /// When the terminals started (the time base of `fine` and `gaps`).
    pub origin: Instant,
    /// Per partition, per terminal of it: the pauses longer than [`GAP_MIN`] between two
    /// consecutive commits of the terminal, as (start, end) offsets from `origin` — how long
    /// one client waited, which a refusal's back-off lengthens while the partition commits
    /// for others. Kept per terminal, so that one terminal's pause at a failure is told apart
    /// from another's ordinary wait just after it.
    pub gaps: Vec<Vec<Vec<(Duration, Duration)>>>,
    /// Per partition: the stretches longer than [`GAP_MIN`] in which none of its terminals
    /// committed, as (start, end) offsets from `origin` — the partition's own pauses, from its
    /// last commit before each to its first after ([`partition_silences`]). A terminal that
    /// ended early, or never committed, does not shorten them.
    pub silences: Vec<Vec<(Duration, Duration)>>,
}

/// What the connections share with the reporting thread.
#[derive(Debug, Default)]
struct Shared {
    /// Figures of the current second (measured phase only).
    interval: Mutex<Stats>,
    /// Replies received, any phase (for progress).
    replies: AtomicU64,
    busy: AtomicU64,
    failures: AtomicU64,
    first_failures: Mutex<Vec<String>>,
    acks: Mutex<Vec<NewOrderAck>>,
    payments: Mutex<Vec<PaymentAck>>,
    unknown: AtomicU64,
    forgotten: AtomicU64,
    answers_from_retries: AtomicU64,
    resent: AtomicU64,
    unavailable: AtomicU64,
    /// Measured phase: commits classified by partitions touched.
    committed_single: AtomicU64,
    committed_multi: AtomicU64,
    /// Commits per [`BUCKET`] since the run's origin (filled when the terminal ends).
    buckets: Mutex<Vec<u64>>,
    /// Pauses between commits longer than [`GAP_MIN`] (filled when the terminal ends).
    gaps: Mutex<Vec<(Duration, Duration)>>,
    /// The terminal's first and last commit, and when it ended (filled when it ends).
    span: Mutex<Option<TerminalSpan>>,
}

/// Stretches of time, as (start, end) offsets from the run's origin.
type Stretches = Vec<(Duration, Duration)>;

/// When a terminal committed first and last, and when it ended (offsets from the origin).
#[derive(Debug, Clone, Copy)]
struct TerminalSpan {
    commits: Option<(Duration, Duration)>,
    ended: Duration,
}

/// One request on its way.
#[derive(Debug, Clone, Copy)]
struct Pending {
    /// As first sent (sent again with `retry` set).
    request: ClientRequest,
    /// Sent again at least once: a failure took an answer to it.
    retried: bool,
    start: Instant,
    kind: TxnKind,
    w: u16,
    d: u8,
    /// A Payment's customer warehouse and district, H_DATE and H_AMOUNT.
    payment: Option<(u16, u8, i64, i64)>,
    /// Whether the warehouses the transaction touches lie in more than one partition.
    multi: bool,
}

/// The partition of each warehouse, indexed by warehouse id (`None` for 0 and ids no
/// partition holds).
#[derive(Debug)]
struct PartitionMap(Vec<Option<PartitionId>>);

impl PartitionMap {
    fn of(config: &wire::ClusterConfig) -> PartitionMap {
        let w = config.warehouses_total();
        PartitionMap((0..=w).map(|w| config.partition_of_warehouse(w)).collect())
    }

    /// Whether `input` touches warehouses of more than one partition
    /// (`engine::distributed::partitions_touched`; false when a warehouse is in none).
    fn is_multi(&self, input: &TxnInput) -> bool {
        engine::distributed::partitions_touched(input, |w| self.0.get(usize::from(w)).copied().flatten())
            .is_ok_and(|p| p.is_multi())
    }
}

/// [`run_with`] at the profile's remote shares, no NewOrder forced multi-partition.
pub fn run(
    client: &ClusterClient,
    rt: &Handle,
    cfg: &DriverConfig,
    obs: &mut dyn Observer,
) -> Result<DriverOutcome, ClientError> {
    run_with(client, rt, cfg, &RemoteShares::default(), obs)
}

/// Runs a bench on the cluster `client` reaches, on runtime `rt`, with the remote shares
/// `shares`, reporting to `obs`; fills the report's common fields and [`ClusterInfo`]
/// (node-side figures are the caller's). Forcing multi-partition NewOrders on a cluster of
/// one partition is an error ([`crate::error::GenError::NoForeignWarehouse`]).
pub fn run_with(
    client: &ClusterClient,
    rt: &Handle,
    cfg: &DriverConfig,
    shares: &RemoteShares,
    obs: &mut dyn Observer,
) -> Result<DriverOutcome, ClientError> {
    cfg.validate()?;
    shares.validate()?;
    let config = client.config().clone();
    let warehouses = config.warehouses_total();
    let phase = Arc::new(AtomicU8::new(PHASE_WARMUP));
    // Connect every terminal first, so the run starts with all of them.
    let mut links = Vec::with_capacity(cfg.clients);
    for i in 0..cfg.clients {
        let c = client.with_id(i as u16);
        links.push(rt.block_on(c.connect_coordinator())?);
    }
    let Terminals { shared, tasks, partition_of, mix, gen_shares, origin } =
        spawn_terminals(client, rt, cfg, shares, links, &phase)?;

    // Warm-up.
    let start = Instant::now();
    if cfg.warmup_s > 0.0 {
        obs.phase("warmup", StopAfter::Seconds(cfg.warmup_s));
        warm_up(obs, cfg.warmup_s, start, &shared, &tasks);
    }

    // Measured phase.
    obs.phase("run", cfg.stop);
    for s in &shared {
        std::mem::take(&mut *s.interval.lock().unwrap_or_else(|e| e.into_inner()));
        s.busy.store(0, Ordering::Relaxed);
    }
    let cpu_start = cpu_seconds();
    let measure_start = Instant::now();
    phase.store(PHASE_MEASURE, Ordering::SeqCst);
    let (mut total, timeline, elapsed) = measure(obs, cfg.stop, measure_start, &shared, &tasks);
    phase.store(PHASE_DRAIN, Ordering::SeqCst);
    let client_cpu = cpu_seconds() - cpu_start;
    obs.finished();
    let busy: u64 = shared.iter().map(|s| s.busy.load(Ordering::Relaxed)).sum();

    // Let outstanding requests finish (their acknowledgements count), then collect.
    let drained = rt.block_on(async {
        tokio::time::timeout(DRAIN_TIMEOUT, async {
            for t in tasks {
                let _ = t.await;
            }
        })
        .await
    });
    if drained.is_err() {
        debug!("some connections still had requests outstanding after the drain timeout");
    }
    // Replies measured between the last look of `measure` and the end of the measured phase:
    // counted with the rest, so the report's commits equal its single- plus multi-partition
    // commits (a compare table once showed 529,856 beside 530,112 single-partition ones).
    for s in &shared {
        total.merge(&std::mem::take(&mut *s.interval.lock().unwrap_or_else(|e| e.into_inner())));
    }
    let failures: u64 = shared.iter().map(|s| s.failures.load(Ordering::Relaxed)).sum();
    if failures > 0 {
        let first = shared
            .iter()
            .flat_map(|s| s.first_failures.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .next()
            .unwrap_or_default();
        return Err(ClientError::Transactions { count: failures, first });
    }
    let Collected { acks, payments, fine, gaps, silences } = collect(&shared, &partition_of, config.partitions.len());
    let outcome_unknown = shared.iter().map(|s| s.unknown.load(Ordering::Relaxed)).sum();
    let forgotten = shared.iter().map(|s| s.forgotten.load(Ordering::Relaxed)).sum();
    let answers_from_retries = shared.iter().map(|s| s.answers_from_retries.load(Ordering::Relaxed)).sum();
    let resent = shared.iter().map(|s| s.resent.load(Ordering::Relaxed)).sum();
    let unavailable = shared.iter().map(|s| s.unavailable.load(Ordering::Relaxed)).sum();
    let sum = |f: fn(&Shared) -> &AtomicU64| shared.iter().map(|s| f(s).load(Ordering::Relaxed)).sum::<u64>();
    let (committed_single, committed_multi) = (sum(|s| &s.committed_single), sum(|s| &s.committed_multi));
    let (remote_item_pct, remote_payment_pct, multi_partition_pct) = gen_shares.unwrap_or_default();

    let replicas = config.partitions.iter().map(|p| p.replicas.len()).max().unwrap_or(0);
    let mut report = BenchReport::assemble(Measured {
        mode: crate::bench::RunKind::Cluster(config.mode()),
        profile: cfg.profile.name(),
        mix: mix.unwrap_or_default(),
        warehouses,
        seed: cfg.seed,
        load_seconds: 0.0,
        warmup_seconds: cfg.warmup_s,
        seconds: elapsed.as_secs_f64(),
        cpu_seconds: None,
        stats: &total,
        memory: None,
        timeline,
    });
    report.engine = Some("lean".into());
    report.cluster = Some(ClusterInfo {
        replicas,
        nodes: config.nodes.len(),
        partitions: config.partitions.len(),
        clients: cfg.clients,
        inflight: cfg.inflight,
        rate: cfg.rate,
        busy,
        batches: None,
        client_cpu_seconds: client_cpu,
        remote_item_pct,
        remote_payment_pct,
        multi_partition_pct,
        committed_single_partition: committed_single,
        committed_multi_partition: committed_multi,
        hosts: Vec::new(),
    });
    Ok(DriverOutcome {
        report,
        acks,
        payments,
        outcome_unknown,
        forgotten,
        answers_from_retries,
        resent,
        unavailable,
        fine,
        origin,
        gaps,
        silences,
    })
}

/// The terminals [`run_with`] started, and what their generators chose.
struct Terminals {
    shared: Vec<Arc<Shared>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Each terminal's partition (its index in the configuration).
    partition_of: Vec<usize>,
    mix: Option<[u32; 5]>,
    gen_shares: Option<(u32, u32, u32)>,
    origin: Instant,
}

/// A client id for terminal `terminal` (docs/design.md §11, "Exactly-once answers"): random —
/// two runs against one cluster must not share ids — and never 0 (no identity). It names the
/// client only; no replica's state depends on it.
fn random_client_id(terminal: usize) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // The standard library seeds each `RandomState` from the operating system's randomness.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(terminal);
    h.write_u32(std::process::id());
    h.finish().max(1)
}

/// Starts one terminal per link on `rt`, each bound to its home warehouse (terminal `i`'s is
/// warehouse `i mod warehouses + 1`) with its own generator.
fn spawn_terminals(
    client: &ClusterClient,
    rt: &Handle,
    cfg: &DriverConfig,
    shares: &RemoteShares,
    links: Vec<wire::endpoint::Link>,
    phase: &Arc<AtomicU8>,
) -> Result<Terminals, ClientError> {
    let config = client.config().clone();
    let warehouses = config.warehouses_total();
    let partitions = Arc::new(PartitionMap::of(&config));
    let mut shared = Vec::with_capacity(cfg.clients);
    let mut tasks = Vec::with_capacity(cfg.clients);
    let mut mix = None;
    let mut gen_shares = None;
    let origin = Instant::now();
    let mut partition_of = Vec::with_capacity(cfg.clients);
    for (i, link) in links.into_iter().enumerate() {
        let home = (i % usize::from(warehouses)) as u16 + 1;
        let partition = config
            .partitions
            .iter()
            .find(|p| p.warehouses.contains(home))
            .expect("validated partitions cover every warehouse");
        // Remote warehouses from the whole cluster; the home one fixed in its partition.
        let mut gen_cfg = shares
            .apply(GenConfig::for_profile(cfg.profile, 1..=warehouses))
            .with_home_partition(partition.warehouses.range());
        gen_cfg.mix = cfg.mix;
        let gen =
            Generator::new(gen_cfg, run_seed(cfg.seed) ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15), config.seed)?;
        mix.get_or_insert(gen.mix().weights);
        let g = gen.config();
        gen_shares.get_or_insert((g.remote_item_pct, g.remote_payment_pct, g.multi_partition_pct));
        let s = Arc::new(Shared::default());
        shared.push(s.clone());
        partition_of.push(config.partitions.iter().position(|p| p.warehouses.contains(home)).unwrap_or(0));
        let terminal = Terminal {
            client: client.with_id(i as u16),
            outages: cfg.outages,
            origin,
            buckets: Vec::new(),
            first_commit: None,
            last_commit: None,
            gaps: Vec::new(),
            home,
            gen,
            partitions: partitions.clone(),
            inflight_max: cfg.inflight,
            rate: cfg.rate.map(|r| r / cfg.clients as f64),
            shared: s,
            phase: phase.clone(),
            next_id: 1,
            client_id: random_client_id(i),
            retries: cfg.retries,
            seen_ts: wire::messages::Timestamp(0),
            resend: std::collections::BTreeSet::new(),
            pending: HashMap::with_capacity(cfg.inflight),
            backoff_until: None,
            busy_backoff: BUSY_BACKOFF_MIN,
            not_leader: false,
        };
        tasks.push(rt.spawn(terminal.run(link)));
    }
    Ok(Terminals { shared, tasks, partition_of, mix, gen_shares, origin })
}

/// The warm-up: reports progress until `warmup_s` seconds from `start` have passed or every
/// terminal ended.
fn warm_up(
    obs: &mut dyn Observer,
    warmup_s: f64,
    start: Instant,
    shared: &[Arc<Shared>],
    tasks: &[tokio::task::JoinHandle<()>],
) {
    let replies = |shared: &[Arc<Shared>]| shared.iter().map(|s| s.replies.load(Ordering::Relaxed)).sum::<u64>();
    {
        let warmup = Duration::from_secs_f64(warmup_s);
        while start.elapsed() < warmup {
            std::thread::sleep(Duration::from_millis(100).min(warmup.saturating_sub(start.elapsed())));
            obs.progress(start.elapsed().as_secs_f64(), replies(shared));
            if tasks.iter().all(|t| t.is_finished()) {
                break;
            }
        }
    }
}

/// The measured phase from `measure_start` until `stop` or every terminal ended: a line a
/// second (a line per poll under a transaction limit). Returns the stats, the lines and the
/// phase's length.
fn measure(
    obs: &mut dyn Observer,
    stop: StopAfter,
    measure_start: Instant,
    shared: &[Arc<Shared>],
    tasks: &[tokio::task::JoinHandle<()>],
) -> (Stats, Vec<IntervalLine>, Duration) {
    let mut total = Stats::default();
    let mut timeline = Vec::new();
    let mut last_tick = Duration::ZERO;
    let mut next_tick = Duration::from_secs(1);
    let (limit_time, limit_txns) = match stop {
        StopAfter::Seconds(s) => (Duration::from_secs_f64(s), u64::MAX),
        StopAfter::Transactions(n) => (Duration::MAX, n),
    };
    let elapsed = loop {
        std::thread::sleep(Duration::from_millis(20));
        let e = measure_start.elapsed();
        let dead = tasks.iter().all(|t| t.is_finished());
        let mut interval = Stats::default();
        if e >= next_tick || e >= limit_time || dead || limit_txns != u64::MAX {
            for s in shared {
                interval.merge(&std::mem::take(&mut *s.interval.lock().unwrap_or_else(|e| e.into_inner())));
            }
            total.merge(&interval);
        }
        let done = total.committed() + total.aborted();
        if e >= next_tick || e >= limit_time || done >= limit_txns || dead {
            let line = IntervalLine::of(e.as_secs_f64(), (e - last_tick).as_secs_f64(), &interval);
            if limit_txns == u64::MAX || e >= next_tick || done >= limit_txns || dead {
                obs.interval(&line);
                timeline.push(line);
                last_tick = e;
                while next_tick <= e {
                    next_tick += Duration::from_secs(1);
                }
            }
        }
        obs.progress(e.as_secs_f64(), done);
        if e >= limit_time || done >= limit_txns || dead {
            break e;
        }
    };
    (total, timeline, elapsed)
}

/// What the terminals gathered, per partition where it matters.
struct Collected {
    acks: Vec<NewOrderAck>,
    payments: Vec<PaymentAck>,
    fine: Vec<Vec<u64>>,
    gaps: Vec<Vec<Vec<(Duration, Duration)>>>,
    silences: Vec<Vec<(Duration, Duration)>>,
}

/// Gathers the terminals' acknowledgements, fine buckets and gaps (`partition_of`: each
/// terminal's partition, of `partitions`).
fn collect(shared: &[Arc<Shared>], partition_of: &[usize], partitions: usize) -> Collected {
    let mut acks = Vec::new();
    let mut payments = Vec::new();
    let mut fine: Vec<Vec<u64>> = Vec::new();
    let mut gaps = vec![Vec::new(); partitions];
    let mut own: Vec<Vec<(TerminalSpan, Stretches)>> = vec![Vec::new(); partitions];
    for (s, &p) in shared.iter().zip(partition_of) {
        let mine = s.gaps.lock().unwrap_or_else(|e| e.into_inner()).clone();
        gaps[p].push(mine.clone());
        if let Some(span) = *s.span.lock().unwrap_or_else(|e| e.into_inner()) {
            own[p].push((span, mine));
        }
        acks.append(&mut s.acks.lock().unwrap_or_else(|e| e.into_inner()));
        payments.append(&mut s.payments.lock().unwrap_or_else(|e| e.into_inner()));
        for (i, n) in s.buckets.lock().unwrap_or_else(|e| e.into_inner()).iter().enumerate() {
            if fine.len() <= i {
                fine.resize(i + 1, vec![0; partitions]);
            }
            fine[i][p] += n;
        }
    }
    let silences = own.iter().map(|t| partition_silences(t.iter().map(|(s, g)| (*s, g.as_slice())))).collect();
    Collected { acks, payments, fine, gaps, silences }
}

/// When one terminal committed nothing, from its span and its gaps (sorted, disjoint): before
/// its first commit, its gaps, and from its last commit on (open-ended: a terminal that
/// ended early says nothing of the partition after it) — or all of the run.
fn terminal_silences(span: TerminalSpan, gaps: &[(Duration, Duration)]) -> Vec<(Duration, Duration)> {
    let Some((first, last)) = span.commits else { return vec![(Duration::ZERO, Duration::MAX)] };
    let mut out = Vec::with_capacity(gaps.len() + 2);
    out.push((Duration::ZERO, first));
    out.extend(gaps.iter().copied());
    out.push((last, Duration::MAX));
    out
}

/// A partition's stretches without a commit longer than [`GAP_MIN`], from its terminals'
/// spans and gaps: where every one of them is silent, the open end cut at the last terminal's
/// end.
fn partition_silences<'a>(
    terminals: impl Iterator<Item = (TerminalSpan, &'a [(Duration, Duration)])>,
) -> Vec<(Duration, Duration)> {
    let (mut all, mut ended): (Option<Vec<(Duration, Duration)>>, Duration) = (None, Duration::ZERO);
    for (span, gaps) in terminals {
        ended = ended.max(span.ended);
        let mine = terminal_silences(span, gaps);
        all = Some(match all {
            None => mine,
            Some(a) => intersect(&a, &mine),
        });
    }
    all.unwrap_or_default()
        .into_iter()
        .map(|(s, e)| (s, e.min(ended)))
        .filter(|&(s, e)| e > s && e - s > GAP_MIN)
        .collect()
}

/// The stretches in both `a` and `b` (each sorted and disjoint): a partition is silent where
/// every one of its terminals is.
fn intersect(a: &[(Duration, Duration)], b: &[(Duration, Duration)]) -> Vec<(Duration, Duration)> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let (s, e) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if e > s {
            out.push((s, e));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// One connection: a terminal bound to its home warehouse.
struct Terminal {
    /// To reconnect with (`outages`).
    client: ClusterClient,
    outages: bool,
    /// The run's start, for the fine timeline.
    origin: Instant,
    /// Commits per [`BUCKET`] since `origin`.
    buckets: Vec<u64>,
    /// The first and last commits' offsets from `origin`, and the gaps seen.
    first_commit: Option<Duration>,
    last_commit: Option<Duration>,
    gaps: Vec<(Duration, Duration)>,
    home: u16,
    gen: Generator,
    /// Which partition holds each warehouse (to classify commits).
    partitions: Arc<PartitionMap>,
    inflight_max: usize,
    /// Open loop: this terminal's requests per second.
    rate: Option<f64>,
    shared: Arc<Shared>,
    phase: Arc<AtomicU8>,
    next_id: u64,
    /// This client's id in every request's [`wire::messages::RequestId`]: drawn at random,
    /// never 0 (docs/design.md §11, "Exactly-once answers").
    client_id: u64,
    /// Ask again about outstanding requests a failure took the answer of (`retries`).
    retries: bool,
    /// The latest timestamp of any answer received: a request first sent now ran, if it ever
    /// runs, after it ([`ClientRequest::not_before`]).
    seen_ts: wire::messages::Timestamp,
    /// Outstanding requests to ask again about with the next frame.
    resend: std::collections::BTreeSet<u64>,
    pending: HashMap<u64, Pending>,
    /// No request is issued before this ([`UNAVAILABLE_BACKOFF`], [`BUSY_BACKOFF_MIN`]).
    backoff_until: Option<Instant>,
    /// The pause after the next `Busy` answer (none since the last commit or abort: the
    /// smallest).
    busy_backoff: Duration,
    /// Outage mode: the coordinator answered "not the leader" (a group's leader changed):
    /// issue nothing more on this link, and once every request on it is answered, find the
    /// leader again.
    not_leader: bool,
}

impl Terminal {
    fn request(&mut self, start: Instant) -> ClientRequest {
        let request_id = self.next_id;
        self.next_id += 1;
        let input = self.gen.next_for(self.home, LOAD_TIMESTAMP + request_id as i64);
        let (w, d) = match &input {
            TxnInput::NewOrder(i) => (i.w_id, i.d_id),
            TxnInput::Payment(i) => (i.w_id, i.d_id),
            TxnInput::OrderStatus(i) => (i.w_id, i.d_id),
            TxnInput::Delivery(i) => (i.w_id, 0),
            TxnInput::StockLevel(i) => (i.w_id, i.d_id),
        };
        let payment = match &input {
            TxnInput::Payment(i) => Some((i.c_w_id, i.c_d_id, i.date, i.h_amount)),
            _ => None,
        };
        let multi = self.partitions.is_multi(&input);
        let request = ClientRequest::new(self.client_id, request_id, self.seen_ts, input);
        let pending = Pending { request, retried: false, start, kind: input.kind(), w, d, payment, multi };
        self.pending.insert(request_id, pending);
        request
    }

    /// Asks again about request `request_id` (outstanding): with the next frame, or once
    /// the terminal found the leader.
    fn ask_again(&mut self, request_id: u64) {
        if let Some(p) = self.pending.get_mut(&request_id) {
            p.retried = true;
            self.resend.insert(request_id);
        }
    }

    /// The requests to ask again about now, marked as retries.
    fn resends(&mut self) -> Vec<ClientRequest> {
        let out: Vec<ClientRequest> = std::mem::take(&mut self.resend)
            .into_iter()
            .filter_map(|id| self.pending.get(&id))
            .map(|p| ClientRequest { retry: true, ..p.request })
            .collect();
        self.shared.resent.fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    fn on_reply(&mut self, reply: ClientReply, now: Instant, measuring: bool, stats: &mut Stats) {
        let Some(p) = self.pending.remove(&reply.request_id) else { return };
        let ns = now.saturating_duration_since(p.start).as_nanos() as u64;
        if let ClientResult::Committed { ts, .. } | ClientResult::Aborted { ts, .. } | ClientResult::Failed { ts, .. } =
            &reply.result
        {
            self.seen_ts = self.seen_ts.max(*ts);
            if p.retried {
                self.shared.answers_from_retries.fetch_add(1, Ordering::Relaxed);
            }
        }
        let retrying = self.outages && self.retries;
        match reply.result {
            ClientResult::Committed { output, .. } => {
                match output {
                    TxnOutput::NewOrder(o) => self
                        .shared
                        .acks
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(NewOrderAck { w: p.w, d: p.d, o_id: o.o_id }),
                    TxnOutput::Payment(o) => {
                        if let Some((c_w, c_d, date, amount)) = p.payment {
                            let ack = PaymentAck { w: p.w, d: p.d, c_w, c_d, c_id: o.c_id, date, amount };
                            self.shared.payments.lock().unwrap_or_else(|e| e.into_inner()).push(ack);
                        }
                    }
                    _ => {}
                }
                let at = now.saturating_duration_since(self.origin);
                if let Some(last) = self.last_commit.filter(|l| at.saturating_sub(*l) > GAP_MIN) {
                    self.gaps.push((last, at));
                }
                self.last_commit = Some(at);
                self.first_commit.get_or_insert(at);
                self.busy_backoff = BUSY_BACKOFF_MIN;
                let bucket = (at.as_millis() / BUCKET.as_millis()) as usize;
                if self.buckets.len() <= bucket {
                    self.buckets.resize(bucket + 1, 0);
                }
                self.buckets[bucket] += 1;
                if measuring {
                    stats.record(p.kind, ns, true);
                    let n = if p.multi { &self.shared.committed_multi } else { &self.shared.committed_single };
                    n.fetch_add(1, Ordering::Relaxed);
                }
            }
            ClientResult::Aborted { .. } => {
                self.busy_backoff = BUSY_BACKOFF_MIN;
                if measuring {
                    stats.record(p.kind, ns, false);
                }
            }
            ClientResult::Busy { .. } => {
                if measuring {
                    self.shared.busy.fetch_add(1, Ordering::Relaxed);
                }
                // Refusals of one round (issued before the pause) make one pause, not one each.
                if self.backoff_until.is_none_or(|t| t <= now) {
                    self.backoff_until = Some(now + self.busy_backoff);
                    self.busy_backoff = (self.busy_backoff * 2).min(BUSY_BACKOFF_MAX);
                }
            }
            ClientResult::Failed { ts, reason } => self.failure(format!("{} failed at {ts}: {reason}", p.kind.name())),
            // A leader deposed before answering, or a batch whose replicas all failed: ask
            // again (the next leader recalls it, or knows it is unknowable).
            ClientResult::OutcomeUnknown { .. } if retrying => {
                self.pending.insert(reply.request_id, p);
                self.ask_again(reply.request_id);
            }
            ClientResult::OutcomeUnknown { .. } if self.outages => {
                self.shared.unknown.fetch_add(1, Ordering::Relaxed);
            }
            ClientResult::Rejected(Rejection::OutcomeForgotten { .. }) if self.outages => {
                self.shared.forgotten.fetch_add(1, Ordering::Relaxed);
                self.shared.unknown.fetch_add(1, Ordering::Relaxed);
            }
            // A retry this coordinator cannot answer now (it does not lead, or the partition
            // cannot say yet): the first send may have run, so ask again, of the leader.
            ClientResult::Rejected(Rejection::NotLeader { .. }) if retrying && p.retried => {
                self.pending.insert(reply.request_id, p);
                self.ask_again(reply.request_id);
                self.not_leader = true;
            }
            ClientResult::Rejected(
                Rejection::NoLiveReplica { .. } | Rejection::PartitionStopped { .. } | Rejection::NotReady { .. },
            ) if retrying && p.retried => {
                self.pending.insert(reply.request_id, p);
                self.ask_again(reply.request_id);
                self.backoff_until = Some(now + UNAVAILABLE_BACKOFF);
            }
            ClientResult::OutcomeUnknown { ts, reason } => {
                self.failure(format!("{} outcome unknown at {ts}: {reason}", p.kind.name()))
            }
            ClientResult::Rejected(Rejection::NotLeader { .. }) if self.outages => {
                // Never sequenced: the request was not run; the terminal moves to the leader.
                self.shared.unavailable.fetch_add(1, Ordering::Relaxed);
                self.not_leader = true;
            }
            ClientResult::Rejected(
                Rejection::NoLiveReplica { .. } | Rejection::PartitionStopped { .. } | Rejection::NotReady { .. },
            ) if self.outages => {
                self.shared.unavailable.fetch_add(1, Ordering::Relaxed);
                self.backoff_until = Some(now + UNAVAILABLE_BACKOFF);
            }
            ClientResult::Rejected(r) => self.failure(format!("{} rejected: {r}", p.kind.name())),
        }
    }

    fn failure(&self, what: String) {
        self.shared.failures.fetch_add(1, Ordering::Relaxed);
        let mut first = self.shared.first_failures.lock().unwrap_or_else(|e| e.into_inner());
        if first.len() < FAILURES_KEPT_MAX {
            first.push(what);
        }
    }

    async fn run(mut self, link: wire::endpoint::Link) {
        let mut link = Some(link);
        while let Some(l) = link.take() {
            let lost = self.serve(l).await;
            if !(lost && self.outages) {
                break;
            }
            if self.retries {
                // The requests outstanding on the lost connection: asked again, of the leader.
                let ids: Vec<u64> = self.pending.keys().copied().collect();
                for id in ids {
                    self.ask_again(id);
                }
            } else {
                // Their outcome is unknown.
                self.shared.unknown.fetch_add(self.pending.len() as u64, Ordering::Relaxed);
                self.pending.clear();
            }
            // At once: a new leader may already serve (docs/design.md §11, "A leader's death").
            // While draining, only to learn what became of the requests outstanding.
            let drain_end = Instant::now() + DRAIN_TIMEOUT;
            loop {
                let draining = self.phase.load(Ordering::Relaxed) == PHASE_DRAIN;
                if draining && (self.pending.is_empty() || Instant::now() >= drain_end) {
                    break;
                }
                if let Ok(l) = self.client.connect_coordinator().await {
                    link = Some(l);
                    break;
                }
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
        }
        if self.outages {
            // Never answered: the run ended first.
            self.shared.unknown.fetch_add(self.pending.len() as u64, Ordering::Relaxed);
        }
        *self.shared.buckets.lock().unwrap_or_else(|e| e.into_inner()) = std::mem::take(&mut self.buckets);
        *self.shared.gaps.lock().unwrap_or_else(|e| e.into_inner()) = std::mem::take(&mut self.gaps);
        let commits = self.first_commit.zip(self.last_commit);
        *self.shared.span.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(TerminalSpan { commits, ended: self.origin.elapsed() });
    }

    /// Runs the terminal on one connection; returns whether the connection was lost (rather
    /// than the run ending).
    async fn serve(&mut self, link: wire::endpoint::Link) -> bool {
        // With outages, the coordinator's death is learnt from its tether at once.
        let mut watch = self.outages.then(|| super::CoordinatorWatch::start(&link));
        let (mut tx, mut rx) = link.split();
        let started = Instant::now();
        let mut issued = 0u64;
        let mut ticker = tokio::time::interval(OPEN_LOOP_TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut drain_deadline: Option<Instant> = None;
        loop {
            let phase = self.phase.load(Ordering::Relaxed);
            if phase == PHASE_DRAIN {
                if self.pending.is_empty() {
                    break;
                }
                let deadline = *drain_deadline.get_or_insert_with(|| Instant::now() + DRAIN_TIMEOUT);
                if Instant::now() >= deadline {
                    break;
                }
            }
            if self.not_leader && self.pending.len() == self.resend.len() {
                // Find the leader again (`run`), with nothing outstanding here (what is to be
                // asked again is asked of it).
                self.not_leader = false;
                tokio::time::sleep(RECONNECT_PAUSE).await;
                return true;
            }
            // Issue what is due, in one frame: first what to ask again about.
            let mut batch = Vec::new();
            let backing_off = self.backoff_until.filter(|&t| t > Instant::now());
            if backing_off.is_none() && !self.not_leader && !self.resend.is_empty() {
                batch = self.resends();
            }
            if phase != PHASE_DRAIN && backing_off.is_none() && !self.not_leader {
                let room = self.inflight_max.saturating_sub(self.pending.len()).min(REQUESTS_PER_FRAME_MAX);
                match self.rate {
                    None => {
                        let now = Instant::now();
                        for _ in 0..room {
                            batch.push(self.request(now));
                        }
                    }
                    Some(rate) => {
                        let due = (started.elapsed().as_secs_f64() * rate) as u64;
                        while issued < due && batch.len() < room {
                            let scheduled = started + Duration::from_secs_f64(issued as f64 / rate);
                            batch.push(self.request(scheduled));
                            issued += 1;
                        }
                    }
                }
            }
            if !batch.is_empty() && tx.send(&ClientToCoordinator::ClientRequests(batch)).await.is_err() {
                if !self.outages {
                    self.failure("cannot send to the coordinator".into());
                }
                return true;
            }
            let received = tokio::select! {
                r = rx.recv::<CoordinatorToClient>() => r,
                how = async {
                    match watch.as_mut() {
                        Some(w) => w.died().await,
                        None => std::future::pending().await,
                    }
                } => {
                    debug!(how, "the coordinator died; finding the next leader");
                    return true;
                }
                _ = ticker.tick(), if self.rate.is_some() || phase == PHASE_DRAIN => continue,
                _ = tokio::time::sleep_until(backing_off.unwrap_or_else(Instant::now).into()), if backing_off.is_some() => continue,
            };
            let replies = match received {
                Ok(Some(CoordinatorToClient::ClientReplies(replies))) => replies,
                Ok(Some(CoordinatorToClient::Shutdown { reason })) => {
                    self.failure(format!("the coordinator shut down: {reason}"));
                    break;
                }
                // The driver asks for neither.
                Ok(Some(CoordinatorToClient::DigestReply { .. } | CoordinatorToClient::StatusReply { .. })) => continue,
                Ok(None) => {
                    if self.pending.is_empty() {
                        break;
                    }
                    if !self.outages {
                        self.failure("the coordinator closed the link with requests outstanding".into());
                    }
                    return true;
                }
                Err(e) => {
                    if !self.outages {
                        self.failure(format!("the coordinator link failed: {e}"));
                    }
                    return true;
                }
            };
            let now = Instant::now();
            let measuring = self.phase.load(Ordering::Relaxed) == PHASE_MEASURE;
            let n = replies.len() as u64;
            let shared = self.shared.clone();
            let mut stats = shared.interval.lock().unwrap_or_else(|e| e.into_inner());
            for r in replies {
                self.on_reply(r, now, measuring, &mut stats);
            }
            drop(stats);
            self.shared.replies.fetch_add(n, Ordering::Relaxed);
        }
        tx.finish(Duration::from_millis(500)).await;
        false
    }
}

#[cfg(test)]
mod tests {
    use engine::procedures::{NewOrderInput, OrderLineInput, PaymentInput};

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A partition's pause is where none of its terminals commits: one terminal backing off
    /// for 300 ms while another commits is not one; a stretch every terminal waits through
    /// is, from the latest commit before it to the earliest after; a terminal that ended
    /// early, or never committed, does not cut the partition's pauses short.
    #[test]
    fn a_partition_pauses_only_where_every_terminal_does() {
        let span = |first, last, ended| TerminalSpan { commits: Some((ms(first), ms(last))), ended: ms(ended) };
        let a = [(ms(100), ms(400)), (ms(1_000), ms(1_200))];
        let b = [(ms(1_050), ms(1_150)), (ms(1_500), ms(1_600))];
        let c: [(Duration, Duration); 0] = [];
        let silent = partition_silences(
            [(span(5, 1_900, 2_000), &a[..]), (span(10, 1_950, 2_000), &b[..]), (span(8, 700, 750), &c[..])]
                .into_iter(),
        );
        assert_eq!(silent, vec![(ms(1_050), ms(1_150)), (ms(1_950), ms(2_000))]);
        let never = TerminalSpan { commits: None, ended: ms(2_000) };
        assert_eq!(
            partition_silences([(span(5, 1_900, 2_000), &a[..]), (never, &c[..])].into_iter()),
            vec![(ms(100), ms(400)), (ms(1_000), ms(1_200)), (ms(1_900), ms(2_000))]
        );
        assert!(partition_silences(std::iter::empty()).is_empty());
    }

    /// Four warehouses in two partitions (1–2, 3–4), as the default `cluster.toml`.
    const CLUSTER: &str = r#"
        mode = "active-active"
        seed = 42
        run_dir = "run"
        cert_dir = "run/certs"
        [coordinator]
        id = 0
        address = "127.0.0.1:7400"
        [[nodes]]
        id = 1
        address = "127.0.0.1:7401"
        [[partitions]]
        id = 1
        warehouses = { first = 1, last = 2 }
        replicas = [1]
        [[partitions]]
        id = 2
        warehouses = { first = 3, last = 4 }
        replicas = [1]
    "#;

    fn config() -> wire::ClusterConfig {
        wire::ClusterConfig::parse(CLUSTER).unwrap()
    }

    fn new_order(w_id: u16, supply: &[u16]) -> TxnInput {
        let mut lines = [OrderLineInput::default(); engine::procedures::ORDER_LINES_MAX];
        for (l, &s) in lines.iter_mut().zip(supply) {
            *l = OrderLineInput { i_id: 1, supply_w_id: s, quantity: 1 };
        }
        TxnInput::NewOrder(NewOrderInput { w_id, d_id: 1, c_id: 1, ol_cnt: supply.len() as u8, lines, entry_d: 0 })
    }

    fn payment(w_id: u16, c_w_id: u16) -> TxnInput {
        TxnInput::Payment(PaymentInput {
            w_id,
            d_id: 1,
            c_w_id,
            c_d_id: 1,
            customer: engine::procedures::CustomerSelector::ById(1),
            h_amount: 100,
            date: 0,
        })
    }

    /// A transaction is multi-partition when the warehouses it touches (the home one, each
    /// line's OL_SUPPLY_W_ID, clause 2.4.1.5; the customer's C_W_ID, clause 2.5.1.2) lie in
    /// more than one partition — not merely when it names a remote warehouse.
    #[test]
    fn commits_are_classified_by_the_partitions_touched() {
        let map = PartitionMap::of(&config());
        assert!(!map.is_multi(&new_order(1, &[1, 1, 1])));
        assert!(!map.is_multi(&new_order(1, &[2, 1, 2])), "remote, same partition");
        assert!(map.is_multi(&new_order(1, &[1, 3, 1])));
        assert!(map.is_multi(&new_order(4, &[4, 2])));
        assert!(!map.is_multi(&payment(3, 4)));
        assert!(map.is_multi(&payment(2, 3)));
    }

    #[test]
    fn shares_over_100_name_their_flag() {
        assert!(RemoteShares::default().validate().is_ok());
        for (shares, flag) in [
            (RemoteShares { remote_item_pct: Some(101), ..Default::default() }, "--remote-items"),
            (RemoteShares { remote_payment_pct: Some(150), ..Default::default() }, "--remote-payments"),
            (RemoteShares { multi_partition_pct: 101, ..Default::default() }, "--multi-partition"),
        ] {
            let e = shares.validate().unwrap_err().to_string();
            assert!(e.contains(flag), "{e}");
        }
        let ok = RemoteShares { remote_item_pct: Some(100), remote_payment_pct: Some(0), multi_partition_pct: 100 };
        assert!(ok.validate().is_ok());
    }

    /// The defaults keep the profile's shares (standard: clause 2.4.1.5's 1%, 2.5.1.2's 15%;
    /// paper: none); overrides replace them.
    #[test]
    fn shares_apply_over_the_profile() {
        let standard = RemoteShares::default().apply(GenConfig::for_profile(Profile::Standard, 1..=4));
        assert_eq!((standard.remote_item_pct, standard.remote_payment_pct, standard.multi_partition_pct), (1, 15, 0));
        let paper = RemoteShares::default().apply(GenConfig::for_profile(Profile::Paper, 1..=4));
        assert_eq!((paper.remote_item_pct, paper.remote_payment_pct), (0, 0));
        let set = RemoteShares { remote_item_pct: Some(5), remote_payment_pct: Some(30), multi_partition_pct: 20 };
        let g = set.apply(GenConfig::for_profile(Profile::Paper, 1..=4));
        assert_eq!((g.remote_item_pct, g.remote_payment_pct, g.multi_partition_pct), (5, 30, 20));
    }

    /// A terminal's generator as [`run_with`] builds it: forced NewOrders are classified
    /// multi-partition, at the forced share; the paper profile's others stay single.
    #[test]
    fn a_terminals_forced_share_is_classified_multi_partition() {
        let config = config();
        let map = PartitionMap::of(&config);
        let shares = RemoteShares { multi_partition_pct: 20, ..Default::default() };
        let mut gen_cfg = shares.apply(GenConfig::for_profile(Profile::Paper, 1..=4)).with_home_partition(3..=4);
        gen_cfg.mix = Some(Mix::parse("neworder=1").unwrap());
        let mut gen = Generator::new(gen_cfg, 5, config.seed).unwrap();
        let multi = (0..10_000).filter(|&i| map.is_multi(&gen.next_for(3, i))).count();
        assert!(multi.abs_diff(2_000) < 250, "{multi} of 10000");
    }
}
