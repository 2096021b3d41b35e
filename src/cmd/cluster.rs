//! `glass cluster init | up | status | down`: a local cluster's life. `up` starts the
//! coordinator and every node of `cluster.toml` as background processes of this same binary
//! (each in its own process group, output to `run_dir/<name>.log`, pid in
//! `run_dir/<name>.pid`), waits until every partition serves (every replica loaded the same
//! state), and stops what it started if anything fails. `status` shows each process, its
//! partitions, their state and digests; `down` asks each process to shut down, then sends
//! SIGTERM, then SIGKILL after `timeouts.shutdown_timeout_ms`, and checks that no process is
//! left. Processes on other hosts are started by hand (`glass coordinator`, `glass node`;
//! see docs/cluster.md); `status` and `down` reach them through the network too.
//!
//! A pid file is trusted only when `/proc/PID/cmdline` shows this binary's subcommand and the
//! same `cluster.toml`: a recycled pid is never signalled.
//!
//! `up` checks everything before it creates anything (no run directory, no certificate for a
//! refused file): every address resolves and can be bound here, and when `cert_dir` already
//! holds a CA, every certificate is from it, is its process's identity and is valid for that
//! process's current address (`wire::tls::check_certificates`); a certificate that does not
//! fit is named, with its address and what to run (`glass cluster init --force`).

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::runtime::Runtime;
use wire::config::ClusterConfig;
use wire::messages::{LoadState, NodeId, ProcessStatus};
use workload::client::{self, ClusterClient};

/// Lines of a failed process's log shown.
const LOG_TAIL_LINES: usize = 20;
/// Period of `up`'s readiness polls.
const READY_POLL: Duration = Duration::from_millis(250);
/// Time `up` allows beyond `timeouts.load_timeout_s` (process start, connections).
const READY_SLACK: Duration = Duration::from_secs(30);
/// How long `down` waits for a local node to go after the coordinator was asked to stop.
const NODE_GONE_WAIT: Duration = Duration::from_millis(500);
/// How long `down` waits for a process to go after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(2);
/// The client id tools use in their Hello.
pub const TOOL_CLIENT_ID: u16 = 60_000;

#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// Create the cluster's CA and a certificate for the coordinator, each node and the
    /// client, in `cert_dir`; each certificate is bound to its process's identity.
    Init {
        #[arg(long, default_value = "cluster.toml")]
        config: PathBuf,
        /// Replace an existing CA (every certificate is reissued).
        #[arg(long)]
        force: bool,
    },
    /// Start the coordinator and every node here, in the background, and wait until every
    /// partition serves.
    Up {
        #[arg(long, default_value = "cluster.toml")]
        config: PathBuf,
    },
    /// Show each process, its partitions, their state and state digests.
    Status {
        #[arg(long, default_value = "cluster.toml")]
        config: PathBuf,
    },
    /// Stop every process of the cluster and check that none is left.
    Down {
        #[arg(long, default_value = "cluster.toml")]
        config: PathBuf,
    },
}

pub fn run(a: ClusterArgs) -> Result<ExitCode> {
    match a.command {
        ClusterCommand::Init { config, force } => init(&config, force),
        ClusterCommand::Up { config } => {
            let c = Cluster::open(&config)?;
            match c.up(true)? {
                Up::Started(_) => Ok(ExitCode::SUCCESS),
                Up::AlreadyRunning(pids) => {
                    println!("the cluster is already running ({}); nothing started", describe(&pids));
                    Ok(ExitCode::SUCCESS)
                }
            }
        }
        ClusterCommand::Status { config } => Cluster::open(&config)?.status(),
        ClusterCommand::Down { config } => {
            let c = Cluster::open(&config)?;
            c.down(true)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn init(config: &Path, force: bool) -> Result<ExitCode> {
    let cfg = ClusterConfig::load(config).with_context(|| format!("read {}", config.display()))?;
    let r = wire::tls::init_cluster(&cfg, force)?;
    println!("{} the cluster CA in {}", if r.replaced_ca { "replaced" } else { "created" }, r.cert_dir.display());
    for id in &r.identities {
        let names = if id.names.is_empty() { String::new() } else { format!(" for {}", id.names.join(", ")) };
        println!("  {:<12} {}{names} (identity {})", id.role.to_string(), id.cert.display(), id.identity);
    }
    println!("copy {} to every host of the cluster (keys are private: mode 0600)", r.cert_dir.display());
    Ok(ExitCode::SUCCESS)
}

/// A process of the cluster, as `up` starts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proc {
    Coordinator,
    Node(NodeId),
}

impl Proc {
    fn name(&self) -> String {
        match self {
            Proc::Coordinator => "coordinator".to_string(),
            Proc::Node(id) => format!("node-{id}"),
        }
    }

    fn label(&self) -> String {
        match self {
            Proc::Coordinator => "coordinator".to_string(),
            Proc::Node(id) => format!("node {id}"),
        }
    }

    fn args(&self, config: &Path) -> Vec<String> {
        let config = config.display().to_string();
        match self {
            Proc::Coordinator => vec!["coordinator".into(), "--config".into(), config],
            Proc::Node(id) => vec!["node".into(), "--config".into(), config, "--id".into(), id.to_string()],
        }
    }
}

/// A live process found through its pid file.
#[derive(Debug, Clone)]
pub struct Running {
    pub proc: Proc,
    pub pid: u32,
}

fn describe(running: &[Running]) -> String {
    running.iter().map(|r| format!("{} pid {}", r.proc.label(), r.pid)).collect::<Vec<_>>().join(", ")
}

/// What `up` did.
#[derive(Debug)]
pub enum Up {
    /// Started every process (this process is their parent until it exits: it may reap
    /// them); the cluster serves.
    Started(Vec<Child>),
    /// Every process was already running.
    AlreadyRunning(Vec<Running>),
}

/// A cluster described by a `cluster.toml`.
#[derive(Debug)]
pub struct Cluster {
    /// The canonical path of `cluster.toml` (what the processes are started with).
    pub path: PathBuf,
    pub config: ClusterConfig,
}

/// A tokio runtime for the client side of a command.
pub fn runtime() -> Result<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("start the tokio runtime")
}

impl Cluster {
    pub fn open(path: &Path) -> Result<Cluster> {
        let path = fs::canonicalize(path).with_context(|| format!("cannot find {}", path.display()))?;
        let config = ClusterConfig::load(&path).with_context(|| format!("read {}", path.display()))?;
        Ok(Cluster { path, config })
    }

    /// A cluster derived from another's description (another mode or placement) with
    /// `config.run_dir` as its own, emptied, run directory; its `cluster.toml` is written
    /// there, headed by `note`.
    pub fn derived(config: &ClusterConfig, note: &str) -> Result<Cluster> {
        config.validate()?;
        let dir = &config.run_dir;
        if dir.exists() {
            fs::remove_dir_all(dir).with_context(|| format!("empty {}", dir.display()))?;
        }
        fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let path = dir.join("cluster.toml");
        let text = format!("# {note}\n{}", toml::to_string(config).context("write the derived cluster.toml")?);
        fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
        Cluster::open(&path)
    }

    pub fn client(&self) -> ClusterClient {
        ClusterClient::new(self.config.clone(), TOOL_CLIENT_ID)
    }

    /// The processes `up` starts: the coordinator and every node the file places a replica
    /// on (a node with none is a spare, started by hand with `glass node --join`).
    fn procs(&self) -> Vec<Proc> {
        let placed = self.config.nodes.iter().filter(|n| self.config.partitions_on_node(n.id).next().is_some());
        std::iter::once(Proc::Coordinator).chain(placed.map(|n| Proc::Node(n.id))).collect()
    }

    fn pid_file(&self, p: &Proc) -> PathBuf {
        self.config.run_dir.join(format!("{}.pid", p.name()))
    }

    pub fn log_file(&self, p: &Proc) -> PathBuf {
        self.config.run_dir.join(format!("{}.log", p.name()))
    }

    /// The pid in `p`'s pid file, if the file exists and names a live process of this
    /// cluster; a stale file is removed.
    fn running(&self, p: &Proc) -> Option<u32> {
        let file = self.pid_file(p);
        let pid: u32 = fs::read_to_string(&file).ok()?.trim().parse().ok()?;
        if is_ours(pid, p, &self.path) {
            Some(pid)
        } else {
            let _ = fs::remove_file(&file);
            None
        }
    }

    /// The processes of this cluster running here, by their pid files.
    pub fn running_procs(&self) -> Vec<Running> {
        self.procs().into_iter().filter_map(|p| self.running(&p).map(|pid| Running { proc: p, pid })).collect()
    }

    /// Starts every process and waits until every partition serves (see the module
    /// documentation). `chatty` prints progress.
    pub fn up(&self, chatty: bool) -> Result<Up> {
        let running = self.running_procs();
        let all = self.procs();
        if !running.is_empty() {
            if running.len() == all.len() {
                return Ok(Up::AlreadyRunning(running));
            }
            bail!(
                "the cluster is partly running ({}); run `glass cluster down --config {}` first",
                describe(&running),
                self.path.display()
            );
        }
        // Everything is checked before anything is created (defect #14, item 5): every address
        // resolves and can be bound here, and certificates already issued fit the addresses
        // and identities of this cluster.toml; a refused `up` leaves no file behind.
        wire::check_ports_free(&self.config).context("cannot start the processes of cluster.toml here")?;
        let cert_dir = &self.config.cert_dir;
        let has_ca = cert_dir.join(wire::tls::CA_CERT_FILE).exists();
        if has_ca {
            wire::tls::check_certificates(&self.config).with_context(|| {
                format!("the certificates in {} do not fit {}", cert_dir.display(), self.path.display())
            })?;
        }
        fs::create_dir_all(&self.config.run_dir)
            .with_context(|| format!("create run_dir {}", self.config.run_dir.display()))?;
        if !has_ca {
            let r = wire::tls::init_cluster(&self.config, false)?;
            if chatty {
                println!("created the cluster's certificates in {}", r.cert_dir.display());
            }
        }
        let exe = std::env::current_exe().context("find the glass binary")?;
        let t0 = Instant::now();
        let mut children: Vec<(Proc, Child)> = Vec::new();
        for p in all {
            match self.spawn(&exe, &p) {
                Ok(child) => {
                    fs::write(self.pid_file(&p), format!("{}\n", child.id()))
                        .with_context(|| format!("write {}", self.pid_file(&p).display()))?;
                    children.push((p, child));
                }
                Err(e) => {
                    self.abandon(&mut children);
                    return Err(e);
                }
            }
        }
        match self.wait_ready(&mut children, chatty) {
            Ok(()) => {
                let started: Vec<Running> =
                    children.iter().map(|(p, c)| Running { proc: p.clone(), pid: c.id() }).collect();
                if chatty {
                    println!(
                        "cluster up in {:.1} s: {}; logs in {}",
                        t0.elapsed().as_secs_f64(),
                        describe(&started),
                        self.config.run_dir.display()
                    );
                }
                Ok(Up::Started(children.drain(..).map(|(_, c)| c).collect()))
            }
            Err(e) => {
                self.abandon(&mut children);
                Err(e)
            }
        }
    }

    /// Starts node `id` again in the background (its log appended to), with `extra` flags
    /// (`--rejoin`), and writes its pid file.
    pub fn restart_node(&self, id: NodeId, extra: &[&str]) -> Result<Child> {
        let exe = std::env::current_exe().context("find the glass binary")?;
        let p = Proc::Node(id);
        let child = self.spawn_with(&exe, &p, extra, true)?;
        fs::write(self.pid_file(&p), format!("{}\n", child.id()))
            .with_context(|| format!("write {}", self.pid_file(&p).display()))?;
        Ok(child)
    }

    fn spawn(&self, exe: &Path, p: &Proc) -> Result<Child> {
        self.spawn_with(exe, p, &[], false)
    }

    fn spawn_with(&self, exe: &Path, p: &Proc, extra: &[&str], append: bool) -> Result<Child> {
        use std::os::unix::process::CommandExt;
        let log_path = self.log_file(p);
        let log = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(&log_path)
            .with_context(|| format!("create {}", log_path.display()))?;
        let err = log.try_clone()?;
        let mut cmd = Command::new(exe);
        cmd.args(p.args(&self.path)).args(extra).stdin(Stdio::null()).stdout(log).stderr(err).process_group(0);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        cmd.spawn().with_context(|| format!("start the {}", p.label()))
    }

    /// Stops what `up` started after a failure, and removes their pid files.
    fn abandon(&self, children: &mut Vec<(Proc, Child)>) {
        for (p, child) in children.iter_mut() {
            signal(child.id(), libc::SIGKILL);
            let _ = child.wait();
            let _ = fs::remove_file(self.pid_file(p));
        }
        children.clear();
    }

    /// Polls until every partition serves; fails when a process exits, a partition stops or
    /// time runs out.
    fn wait_ready(&self, children: &mut [(Proc, Child)], chatty: bool) -> Result<()> {
        let rt = runtime()?;
        let client = self.client();
        let deadline = Instant::now() + Duration::from_secs(self.config.timeouts.load_timeout_s) + READY_SLACK;
        let bar = if chatty {
            let bar = ProgressBar::with_draw_target(Some(1), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("loading  [{bar:40}] {pos}/{len} rows ({elapsed}) {msg}")
                    .expect("valid progress template")
                    .progress_chars("=> "),
            );
            Some(bar)
        } else {
            None
        };
        let result = rt.block_on(async {
            let mut coordinator = None;
            let mut nodes: Vec<(NodeId, Option<wire::endpoint::Link>)> =
                self.config.nodes.iter().map(|n| (n.id, None)).collect();
            loop {
                for (p, child) in children.iter_mut() {
                    if let Ok(Some(status)) = child.try_wait() {
                        return Err(anyhow!(
                            "the {} exited ({status}) before the cluster was ready; its log ({}) ends with:\n{}",
                            p.label(),
                            self.log_file(p).display(),
                            log_tail(&self.log_file(p), LOG_TAIL_LINES)
                        ));
                    }
                }
                if Instant::now() > deadline {
                    bail!(
                        "the cluster was not ready within timeouts.load_timeout_s ({} s) plus {} s; see the logs in {}",
                        self.config.timeouts.load_timeout_s,
                        READY_SLACK.as_secs(),
                        self.config.run_dir.display()
                    );
                }
                // Load progress, from the nodes.
                let (mut loaded, mut total) = (0u64, 0u64);
                for (id, link) in nodes.iter_mut() {
                    if link.is_none() {
                        *link = client.connect_node(*id).await.ok();
                    }
                    let Some(l) = link else { continue };
                    match client::status(l).await {
                        Ok(s) => {
                            for p in &s.partitions {
                                if let Some(LoadState::Loading { rows_loaded, rows_total }) = &p.load {
                                    loaded += rows_loaded;
                                    total += rows_total;
                                }
                                if let Some(LoadState::Failed { reason }) = &p.load {
                                    bail!("partition {} failed to load on node {id}: {reason}", p.partition);
                                }
                            }
                        }
                        Err(_) => *link = None,
                    }
                }
                if let Some(bar) = &bar {
                    bar.set_length(total.max(1));
                    bar.set_position(loaded);
                }
                // Readiness, from the coordinator.
                if coordinator.is_none() {
                    coordinator = client.connect_coordinator().await.ok();
                }
                if let Some(c) = &mut coordinator {
                    match client::status(c).await {
                        Ok(s) => {
                            if let Some(p) = s.partitions.iter().find(|p| p.phase.starts_with("stopped")) {
                                bail!("partition {} stopped: {}", p.partition, p.phase);
                            }
                            if s.partitions.iter().all(|p| p.phase == "serving") {
                                return Ok(());
                            }
                            if let Some(bar) = &bar {
                                let serving = s.partitions.iter().filter(|p| p.phase == "serving").count();
                                bar.set_message(format!("{serving}/{} partitions serving", s.partitions.len()));
                            }
                        }
                        Err(_) => coordinator = None,
                    }
                }
                tokio::time::sleep(READY_POLL).await;
            }
        });
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        result
    }

    /// `glass cluster status`.
    fn status(&self) -> Result<ExitCode> {
        let rt = runtime()?;
        let client = self.client();
        let local: Vec<Running> = self.running_procs();
        let pid_of = |p: &Proc| local.iter().find(|r| r.proc == *p).map(|r| r.pid);
        let (coordinator, digests, nodes) = rt.block_on(async {
            let mut coordinator: Option<ProcessStatus> = None;
            let mut digests = Vec::new();
            if let Ok(mut link) = client.connect_coordinator().await {
                coordinator = client::status(&mut link).await.ok();
                if let Some(s) = &coordinator {
                    for p in s.partitions.iter().filter(|p| p.phase == "serving") {
                        if let Ok(d) = client::digests(&mut link, p.partition).await {
                            digests.push((p.partition, d));
                        }
                    }
                }
            }
            let mut nodes = Vec::new();
            for n in &self.config.nodes {
                let s = match client.connect_node(n.id).await {
                    Ok(mut link) => client::status(&mut link).await.ok(),
                    Err(_) => None,
                };
                nodes.push((n.id, s));
            }
            (coordinator, digests, nodes)
        });
        println!(
            "cluster {} (mode {}, {} partitions, {} nodes); run_dir {}",
            self.path.display(),
            self.config.mode.name(),
            self.config.partitions.len(),
            self.config.nodes.len(),
            self.config.run_dir.display()
        );
        println!(
            "{:<12} {:>8} {:<6} {:>9} {:<28} {:>8} {:>10} {:>8}  digest",
            "process", "pid", "alive", "partition", "state", "batch", "txns", "cpu_s"
        );
        let mut healthy = true;
        let pid_text = |pid: Option<u32>| pid.map_or("-".to_string(), |p| p.to_string());
        match &coordinator {
            Some(s) => {
                for p in &s.partitions {
                    healthy &= p.phase == "serving";
                    println!(
                        "{:<12} {:>8} {:<6} {:>9} {:<28} {:>8} {:>10} {:>8}  -",
                        "coordinator",
                        s.pid,
                        "yes",
                        p.partition,
                        truncate(&p.phase, 28),
                        p.seq,
                        format!("{} open", p.txns),
                        "-",
                    );
                }
            }
            None => {
                healthy = false;
                let pid = pid_of(&Proc::Coordinator);
                println!(
                    "{:<12} {:>8} {:<6} {:>9} {:<28}",
                    "coordinator",
                    pid_text(pid),
                    if pid.is_some() { "yes" } else { "no" },
                    "-",
                    if pid.is_some() { "not answering" } else { "not running" }
                );
            }
        }
        for (id, s) in &nodes {
            let name = format!("node {id}");
            match s {
                Some(s) => {
                    for p in &s.partitions {
                        let state = match &p.load {
                            Some(LoadState::Loading { rows_loaded, rows_total }) if p.phase == "loading" => {
                                format!("loading {rows_loaded}/{rows_total} rows")
                            }
                            _ if p.replication.role.is_empty() => p.phase.clone(),
                            _ => format!("{} ({})", p.phase, p.replication.role),
                        };
                        healthy &= p.phase == "ready";
                        let digest = digests
                            .iter()
                            .find(|(pid, _)| *pid == p.partition)
                            .and_then(|(_, (seq, ds))| {
                                ds.iter().find(|(n, _)| n == id).map(|(_, d)| format!("{d} (at batch {seq})"))
                            })
                            .or_else(|| match &p.load {
                                Some(LoadState::Ready { digest }) => Some(format!("{digest} (after load)")),
                                _ => None,
                            })
                            .unwrap_or_else(|| "-".to_string());
                        println!(
                            "{:<12} {:>8} {:<6} {:>9} {:<28} {:>8} {:>10} {:>8.1}  {}",
                            name,
                            s.pid,
                            "yes",
                            p.partition,
                            truncate(&state, 28),
                            p.seq,
                            p.txns,
                            p.cpu_ms as f64 / 1000.0,
                            digest
                        );
                    }
                }
                None => {
                    healthy = false;
                    let pid = pid_of(&Proc::Node(*id));
                    println!(
                        "{:<12} {:>8} {:<6} {:>9} {:<28}",
                        name,
                        pid_text(pid),
                        if pid.is_some() { "yes" } else { "no" },
                        "-",
                        if pid.is_some() { "not answering" } else { "not running" }
                    );
                }
            }
        }
        for (partition, (seq, ds)) in &digests {
            let equal = ds.windows(2).all(|w| w[0].1 == w[1].1);
            healthy &= equal;
            if self.config.mode.is_passive() {
                println!(
                    "partition {partition}: the primary's digest at batch {seq} is above; backups are compared once \
                     they applied the same shipments (`glass check`)"
                );
            } else {
                println!(
                    "partition {partition}: the digests of its {} live replicas at batch {seq} are {}",
                    ds.len(),
                    if equal { "equal" } else { "DIFFERENT" }
                );
            }
        }
        Ok(if healthy { ExitCode::SUCCESS } else { ExitCode::from(1) })
    }

    /// Stops the cluster (see the module documentation). Returns the processes stopped.
    pub fn down(&self, chatty: bool) -> Result<Vec<Running>> {
        let running = self.running_procs();
        let rt = runtime()?;
        let client = self.client();
        // Ask every process, local or not, to shut down: the coordinator first (it tells the
        // nodes), then, at once, each node not seen gone.
        let wait = Duration::from_millis(self.config.timeouts.connect_timeout_ms.min(2_000));
        let asked = rt.block_on(async {
            let mut asked = Vec::new();
            if let Ok(Ok(link)) = tokio::time::timeout(wait, client.connect_coordinator()).await {
                if client::shutdown(link, "glass cluster down").await.is_ok() {
                    asked.push("coordinator".to_string());
                }
            }
            let mut tasks = Vec::new();
            for n in &self.config.nodes {
                let p = Proc::Node(n.id);
                if let Some(r) = running.iter().find(|r| r.proc == p) {
                    if wait_gone(std::slice::from_ref(r), NODE_GONE_WAIT, &self.path).is_empty() {
                        continue;
                    }
                }
                let (client, id) = (client.clone(), n.id);
                tasks.push(tokio::spawn(async move {
                    match tokio::time::timeout(wait, client.connect_node(id)).await {
                        Ok(Ok(link)) => client::shutdown(link, "glass cluster down").await.is_ok().then_some(id),
                        _ => None,
                    }
                }));
            }
            for t in tasks {
                if let Ok(Some(id)) = t.await {
                    asked.push(format!("node {id}"));
                }
            }
            asked
        });
        if running.is_empty() {
            if chatty {
                if asked.is_empty() {
                    println!(
                        "no process of this cluster is running here (no live pid files in {})",
                        self.config.run_dir.display()
                    );
                } else {
                    println!("asked {} to shut down (not started here)", asked.join(", "));
                }
            }
            return Ok(running);
        }
        let grace = Duration::from_millis(self.config.timeouts.shutdown_timeout_ms);
        let mut how = Vec::new();
        let mut left = wait_gone(&running, grace, &self.path);
        for r in &running {
            if !left.iter().any(|l| l.pid == r.pid) {
                how.push(format!("{} (pid {}) shut down", r.proc.label(), r.pid));
            }
        }
        if !left.is_empty() {
            for r in &left {
                signal(r.pid, libc::SIGTERM);
            }
            let after_term = wait_gone(&left, grace, &self.path);
            for r in &left {
                if !after_term.iter().any(|l| l.pid == r.pid) {
                    how.push(format!("{} (pid {}) stopped by SIGTERM", r.proc.label(), r.pid));
                }
            }
            left = after_term;
        }
        if !left.is_empty() {
            for r in &left {
                signal(r.pid, libc::SIGKILL);
            }
            let after_kill = wait_gone(&left, KILL_WAIT, &self.path);
            for r in &left {
                if !after_kill.iter().any(|l| l.pid == r.pid) {
                    how.push(format!("{} (pid {}) killed", r.proc.label(), r.pid));
                }
            }
            left = after_kill;
        }
        for r in &running {
            if !left.iter().any(|l| l.pid == r.pid) {
                let _ = fs::remove_file(self.pid_file(&r.proc));
            }
        }
        if !left.is_empty() {
            bail!("processes survived SIGKILL: {}", describe(&left));
        }
        if chatty {
            println!("cluster down: {}; no process left", how.join(", "));
        }
        Ok(running)
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).collect::<String>() + "…"
    }
}

/// Waits up to `limit` for the processes to exit; returns those still alive.
fn wait_gone(procs: &[Running], limit: Duration, config: &Path) -> Vec<Running> {
    let deadline = Instant::now() + limit;
    loop {
        let alive: Vec<Running> = procs.iter().filter(|r| is_ours(r.pid, &r.proc, config)).cloned().collect();
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `pid` is a live (not zombie) `glass` process running `p` with `config`.
pub fn is_ours(pid: u32, p: &Proc, config: &Path) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state follows the parenthesised command name.
    let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
    if matches!(state, Some('Z') | Some('X') | None) {
        return false;
    }
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    let want = p.args(config);
    args.len() > want.len() && args[1..=want.len()] == want[..]
}

/// Sends `sig` to `pid`.
fn signal(pid: u32, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: kill(2) has no memory-safety preconditions; the pid was checked to be one of
    // this cluster's processes (or is our own child).
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The last `n` lines of a file.
pub fn log_tail(path: &Path, n: usize) -> String {
    let Ok(f) = fs::File::open(path) else { return format!("  (cannot read {})", path.display()) };
    let lines: Vec<String> = BufReader::new(f).lines().map_while(Result::ok).collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
}

/// CPU seconds (user + system) a local process has used, from `/proc/PID/stat`.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the state (field 3), utime and stime are fields 14 and 15 of stat(5).
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / ticks.max(1.0))
}

/// CPU seconds of a local process's threads, summed per thread name (`/proc/PID/task`).
pub fn thread_cpu_seconds(pid: u32) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    // SAFETY: sysconf has no preconditions.
    let ticks = (unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64).max(1.0);
    for task in tasks.flatten() {
        let Ok(stat) = fs::read_to_string(task.path().join("stat")) else { continue };
        let (Some(open), Some((_, rest))) = (stat.find('('), stat.rsplit_once(") ")) else { continue };
        let name = stat[open + 1..stat.len() - rest.len() - 2].to_string();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let cpu = match (
            fields.get(11).and_then(|f| f.parse::<f64>().ok()),
            fields.get(12).and_then(|f| f.parse::<f64>().ok()),
        ) {
            (Some(u), Some(s)) => (u + s) / ticks,
            _ => continue,
        };
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some(e) => e.1 += cpu,
            None => out.push((name, cpu)),
        }
    }
    out
}

/// Resident memory of a local process in bytes, from `/proc/PID/statm`.
pub fn process_rss_bytes(pid: u32) -> Option<u64> {
    let statm = fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}
