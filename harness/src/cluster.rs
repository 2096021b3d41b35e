//! A local cluster's life: `up` starts the coordinator and every node of `cluster.toml` as
//! background processes of the `glass` executable it is given (each in its own process
//! group, with no descriptor but stdio and its own files, output to `run_dir/<name>.log` —
//! an earlier run's log moved to `<name>.log.1`, never truncated — pid in
//! `run_dir/<name>.pid`), waits until every
//! partition serves (every replica loaded the same state), and stops what it started if
//! anything fails. [`Cluster::sample_status`] gathers what `glass cluster status` shows: each
//! process, its partitions, their state and digests, and whether that is healthy; `down`
//! asks each process to shut down, then sends SIGTERM, then SIGKILL after
//! `timeouts.shutdown_timeout_ms`, and checks that no process is left. Processes on other
//! hosts named by a process's `ssh` key are started, watched and signalled through ssh
//! (`crate::remote`; docs/cluster.md, "Several hosts"); `status` and `down` reach processes
//! started by hand elsewhere through the network too.
//!
//! A pid file is trusted only when `/proc/PID/cmdline` shows the binary's subcommand and the
//! same `cluster.toml`: a recycled pid is never signalled.
//!
//! `up` checks everything before it creates anything (no run directory, no certificate for a
//! refused file): every address resolves and can be bound here, and when `cert_dir` already
//! holds a CA, every certificate is from it, is its process's identity and is valid for that
//! process's current address (`wire::tls::check_certificates`); a certificate that does not
//! fit is named, with its address and what to run (`glass cluster init --force`).
//!
//! Nothing here prints: `up` reports to an [`Progress`], `down` returns a [`Down`] (whose
//! [`Down::line`] says what it did), and what `glass cluster init` made is rendered by
//! [`render_init`].

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use wire::config::{ClusterConfig, Mode};
use wire::messages::{CoordinatorId, LoadState, NodeId, PartitionId, PartitionPhase, ProcessStatus, Seq, StateDigest};
use workload::client::{self, ClusterClient};

use crate::error::HarnessError;
use crate::place::{Launched, Local, ProcessHost};
use crate::Result;

/// Lines of a failed process's log shown.
pub(crate) const LOG_TAIL_LINES: usize = 20;
/// Period of `up`'s readiness polls.
const READY_POLL: Duration = Duration::from_millis(250);
/// Time `up` allows beyond `timeouts.load_timeout_s` (process start, connections).
const READY_SLACK: Duration = Duration::from_secs(30);
/// How long `down` waits for a local node to go after the coordinator was asked to stop.
const NODE_GONE_WAIT: Duration = Duration::from_millis(500);
/// How long `down` waits for a process to go after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(2);
/// How deep under `run_dir` [`Cluster::derived_running`] looks for derived clusters
/// (`run/compare/<mode>-r<k>/failover/cluster.toml` is three down).
pub const DERIVED_DEPTH_MAX: usize = 4;
/// The client id tools use in their Hello.
pub const TOOL_CLIENT_ID: u16 = 60_000;

/// What `up` and the experiments tell their caller while they work (the binary draws it; an
/// experiment run with `--quiet` passes [`Silent`]). Every method has an empty default.
pub trait Progress {
    /// A cluster's check after a run failed (the experiment goes on; its record says so).
    fn check_failed(&mut self, _verdict: &workload::client::ClusterCheck) {}
    /// No CA existed: the cluster's certificates were created in `dir`.
    fn certificates_created(&mut self, _dir: &Path) {}
    /// Rows loaded so far over every node, of `rows_total` (polled every 250 ms).
    fn loading(&mut self, _rows_loaded: u64, _rows_total: u64) {}
    /// Partitions the coordinator reports serving, of all.
    fn serving(&mut self, _serving: usize, _partitions: usize) {}
    /// The wait ended (ready or not): clear what was drawn.
    fn waited(&mut self) {}
    /// Every process started and every partition serves, `elapsed` after `up` began.
    fn up(&mut self, _elapsed: Duration, _started: &[Running], _run_dir: &Path) {}
}

/// Reports nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Progress for Silent {}

/// A process of the cluster, as `up` starts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proc {
    /// The only coordinator (`None`), or coordinator `id` of a group (docs/design.md §11).
    Coordinator(Option<CoordinatorId>),
    Node(NodeId),
}

impl Proc {
    /// The name of its files in `run_dir` (`coordinator`, `coordinator-1`, `node-1`).
    pub fn name(&self) -> String {
        match self {
            Proc::Coordinator(None) => "coordinator".to_string(),
            Proc::Coordinator(Some(id)) => format!("coordinator-{id}"),
            Proc::Node(id) => format!("node-{id}"),
        }
    }

    /// The name people read (`coordinator`, `coordinator 1`, `node 1`).
    pub fn label(&self) -> String {
        match self {
            Proc::Coordinator(None) => "coordinator".to_string(),
            Proc::Coordinator(Some(id)) => format!("coordinator {id}"),
            Proc::Node(id) => format!("node {id}"),
        }
    }

    /// The `glass` arguments that run it with `config`.
    pub fn args(&self, config: &Path) -> Vec<String> {
        let config = config.display().to_string();
        match self {
            Proc::Coordinator(None) => vec!["coordinator".into(), "--config".into(), config],
            Proc::Coordinator(Some(id)) => {
                vec!["coordinator".into(), "--config".into(), config, "--id".into(), id.to_string()]
            }
            Proc::Node(id) => vec!["node".into(), "--config".into(), config, "--id".into(), id.to_string()],
        }
    }

    /// The name people read of the process whose command line (the program first) is `args`,
    /// if [`Proc::args`] made it for `config`: `node 1`, `node 1 (rejoining)` for a node
    /// started with `--rejoin`, `coordinator 2`.
    pub fn label_of(args: &[String], config: &Path) -> Option<String> {
        let rest = args.get(1..)?;
        let id = rest.iter().position(|a| a == "--id").and_then(|i| rest.get(i + 1));
        let proc = match (rest.first()?.as_str(), id) {
            ("coordinator", None) => Proc::Coordinator(None),
            ("coordinator", Some(id)) => Proc::Coordinator(Some(id.parse().ok()?)),
            ("node", Some(id)) => Proc::Node(id.parse().ok()?),
            _ => return None,
        };
        let want = proc.args(config);
        if !rest.starts_with(&want) {
            return None;
        }
        let rejoining = rest[want.len()..].iter().any(|a| a == "--rejoin");
        Some(if rejoining { format!("{} (rejoining)", proc.label()) } else { proc.label() })
    }
}

/// A live process found through its pid file.
#[derive(Debug, Clone)]
pub struct Running {
    pub proc: Proc,
    pub pid: u32,
}

/// `coordinator pid 10, node 1 pid 11, …`.
pub fn describe(running: &[Running]) -> String {
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

/// A process `up` started, on its host.
type Started = (Proc, Box<dyn ProcessHost>, Launched);

/// A cluster described by a `cluster.toml`.
#[derive(Debug)]
pub struct Cluster {
    /// The canonical path of `cluster.toml` (what the processes are started with).
    pub path: PathBuf,
    pub config: ClusterConfig,
}

/// What `down` did.
#[derive(Debug, Default)]
pub struct Down {
    /// The processes of this cluster that ran here (by their pid files), now stopped.
    pub stopped: Vec<Running>,
    /// How each of them went (`node 1 (pid 11) shut down`, `… stopped by SIGTERM`, `… killed`).
    pub how: Vec<String>,
    /// Processes asked over the network to shut down (`coordinator`, `node 2`).
    pub asked: Vec<String>,
}

impl Down {
    /// What `down` did, in one line (`run_dir`: where it looked for pid files).
    pub fn line(&self, run_dir: &Path) -> String {
        if !self.stopped.is_empty() {
            format!("cluster down: {}; no process left", self.how.join(", "))
        } else if !self.asked.is_empty() {
            format!("asked {} to shut down (not started here)", self.asked.join(", "))
        } else {
            format!("no process of this cluster is running here (no live pid files in {})", run_dir.display())
        }
    }
}

/// What `glass cluster init` made, as printed: the CA, each process's certificate with the
/// names it may be dialled by and its identity, and what to do with them.
pub fn render_init(r: &wire::tls::InitReport) -> String {
    let mut s =
        format!("{} the cluster CA in {}\n", if r.replaced_ca { "replaced" } else { "created" }, r.cert_dir.display());
    for id in &r.identities {
        let names = if id.names.is_empty() { String::new() } else { format!(" for {}", id.names.join(", ")) };
        s.push_str(&format!("  {:<12} {}{names} (identity {})\n", id.role.to_string(), id.cert.display(), id.identity));
    }
    s.push_str(&format!(
        "on several hosts, `glass cluster deploy` copies to each host only ca.pem and its own processes' \
         certificates and keys ({} keeps the CA's key)\n",
        r.cert_dir.display()
    ));
    s
}

/// A tokio runtime for the client side of a command.
pub fn runtime() -> Result<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| HarnessError::io("start the tokio runtime", e))
}

impl Cluster {
    pub fn open(path: &Path) -> Result<Cluster> {
        let path =
            fs::canonicalize(path).map_err(|e| HarnessError::io(format!("cannot find {}", path.display()), e))?;
        let config =
            ClusterConfig::load(&path).map_err(|e| HarnessError::config(format!("read {}", path.display()), e))?;
        Ok(Cluster { path, config })
    }

    /// A cluster derived from another's description (another mode or placement) with
    /// `config.run_dir` as its own, emptied, run directory; its `cluster.toml` is written
    /// there, headed by `note`.
    /// `what`: the experiment, named in a refusal when it runs processes on this host only
    /// and `config` places some elsewhere; `None` when it runs them anywhere — then each other
    /// host gets the derived cluster in its own directory under the process's `ssh.dir`
    /// ([`crate::remote`]).
    pub fn derived(config: &ClusterConfig, note: &str, remote: Option<&'static str>) -> Result<Cluster> {
        config.validate()?;
        if let Some(what) = remote {
            let procs = config.coordinators.iter().map(|c| (format!("coordinator {}", c.id), &c.ssh));
            let mut procs = procs.chain(config.nodes.iter().map(|n| (format!("node {}", n.id), &n.ssh)));
            if let Some((process, Some(ssh))) = procs.find(|(_, ssh)| ssh.is_some()) {
                return Err(HarnessError::LocalOnly { what, process, host: ssh.to_string() });
            }
        }
        let dir = &config.run_dir;
        // An earlier run's processes may still run from here (their `glass` was killed):
        // removing their pid files would leave them beyond `cluster down`'s reach.
        if let Ok(earlier) = Cluster::open(&dir.join("cluster.toml")) {
            let running = earlier.running_procs();
            if !running.is_empty() {
                return Err(HarnessError::Strays { running: describe(&running), path: earlier.path });
            }
        }
        if dir.exists() {
            fs::remove_dir_all(dir).map_err(|e| HarnessError::io(format!("empty {}", dir.display()), e))?;
        }
        fs::create_dir_all(dir).map_err(|e| HarnessError::io(format!("create {}", dir.display()), e))?;
        let path = dir.join("cluster.toml");
        let (written, moves) = crate::remote::place_derived(config, dir)?;
        let text = format!("# {note}\n{}", toml::to_string(&written).map_err(HarnessError::Toml)?);
        fs::write(&path, text).map_err(|e| HarnessError::io(format!("write {}", path.display()), e))?;
        let cluster = Cluster::open(&path)?;
        cluster.prepare_derived_hosts(&moves)?;
        Ok(cluster)
    }

    /// The clusters `compare` and `failover` derived from this one that still have
    /// processes running here (found by the `cluster.toml` each left under `run_dir`, at most
    /// [`DERIVED_DEPTH_MAX`] folders down): what a `glass` killed before it could stop them
    /// leaves behind.
    pub fn derived_running(&self) -> Vec<(Cluster, Vec<Running>)> {
        let mut found = Vec::new();
        let mut stack = vec![(self.config.run_dir.clone(), 0)];
        while let Some((dir, depth)) = stack.pop() {
            let Ok(entries) = fs::read_dir(&dir) else { continue };
            for e in entries.flatten() {
                let path = e.path();
                if path.is_dir() && depth < DERIVED_DEPTH_MAX && path != self.config.cert_dir {
                    stack.push((path, depth + 1));
                } else if depth > 0 && path.file_name().is_some_and(|n| n == "cluster.toml") {
                    if let Ok(c) = Cluster::open(&path) {
                        let running = c.running_procs();
                        if !running.is_empty() && c.path != self.path {
                            found.push((c, running));
                        }
                    }
                }
            }
        }
        found.sort_by(|a, b| a.0.path.cmp(&b.0.path));
        found
    }

    pub fn client(&self) -> ClusterClient {
        ClusterClient::new(self.config.clone(), TOOL_CLIENT_ID)
    }

    /// The processes `up` starts: the coordinators and every node the file places a replica
    /// on (a node with none is a spare, started by hand with `glass node --join`).
    pub fn procs(&self) -> Vec<Proc> {
        let placed = self.config.nodes.iter().filter(|n| self.config.partitions_on_node(n.id).next().is_some());
        self.coordinator_procs().into_iter().chain(placed.map(|n| Proc::Node(n.id))).collect()
    }

    /// The coordinator processes: the only one, or each of the group.
    pub fn coordinator_procs(&self) -> Vec<Proc> {
        match self.config.coordinators.len() {
            1 => vec![Proc::Coordinator(None)],
            _ => self.config.coordinator_ids().into_iter().map(|c| Proc::Coordinator(Some(c))).collect(),
        }
    }

    /// Where `up` records `p`'s pid.
    pub fn pid_file(&self, p: &Proc) -> PathBuf {
        self.config.run_dir.join(format!("{}.pid", p.name()))
    }

    pub fn log_file(&self, p: &Proc) -> PathBuf {
        self.config.run_dir.join(format!("{}.log", p.name()))
    }

    /// The pid in `p`'s pid file, if the file exists and names a live process of this
    /// cluster; a stale file is removed.
    pub(crate) fn running(&self, p: &Proc) -> Option<u32> {
        let file = self.pid_file(p);
        let pid: u32 = fs::read_to_string(&file).ok()?.trim().parse().ok()?;
        // A host that cannot be reached keeps its pid file: the process may well live.
        let ours = self.host_of(p).is_ours(self, pid, p).ok()?;
        if ours {
            Some(pid)
        } else {
            let _ = fs::remove_file(&file);
            None
        }
    }

    /// Whether `r` still runs (on its host).
    fn alive(&self, r: &Running) -> bool {
        // Unreachable is not gone: `down` then says the process survived.
        self.host_of(&r.proc).is_ours(self, r.pid, &r.proc).unwrap_or(true)
    }

    /// Sends `sig` to `r` (on its host), if it is still the process its pid file names.
    pub fn signal_proc(&self, r: &Running, sig: libc::c_int) {
        let _ = self.host_of(&r.proc).signal(self, r, sig);
    }

    /// Sends `sig` to `r` for an experiment (a kill, a freeze): the instant it was sent, read
    /// on its host ([`crate::place::Signalled`]); an error when the process is gone or cannot
    /// be signalled.
    pub fn kill(&self, r: &Running, sig: libc::c_int) -> Result<Instant> {
        self.host_of(&r.proc).signal(self, r, sig).map(|s| s.at)
    }

    /// Where process `p` runs: this host, or the one its `ssh` key names — the one interface
    /// through which the harness starts, watches, signals and reads it
    /// ([`crate::place`]).
    pub fn host_of(&self, p: &Proc) -> Box<dyn ProcessHost> {
        match self.ssh_of(p) {
            None => Box::new(Local),
            Some(host) => Box::new(host),
        }
    }

    /// Waits up to `limit` for the processes to exit (each on its host); those still alive.
    pub(crate) fn wait_gone_anywhere(&self, procs: &[Running], limit: Duration) -> Vec<Running> {
        let deadline = Instant::now() + limit;
        loop {
            let alive: Vec<Running> = procs.iter().filter(|r| self.alive(r)).cloned().collect();
            if alive.is_empty() || Instant::now() >= deadline {
                return alive;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The addresses of the processes `up` starts on this host, with the fields naming them.
    fn local_addresses(&self) -> Vec<(String, String)> {
        let c = &self.config;
        let mut out = Vec::new();
        for (i, co) in c.coordinators.iter().enumerate().filter(|(_, co)| co.ssh.is_none()) {
            out.push((c.coordinator_field(i), co.address.clone()));
            if let Some(m) = &co.metrics {
                out.push((c.coordinator_field(i).replace(".address", ".metrics"), m.clone()));
            }
        }
        for (i, n) in c.nodes.iter().enumerate().filter(|(_, n)| n.ssh.is_none()) {
            out.push((format!("nodes[{i}].address"), n.address.clone()));
            if let Some(m) = &n.metrics {
                out.push((format!("nodes[{i}].metrics"), m.clone()));
            }
        }
        out
    }

    /// The processes of this cluster running here, by their pid files.
    pub fn running_procs(&self) -> Vec<Running> {
        self.procs().into_iter().filter_map(|p| self.running(&p).map(|pid| Running { proc: p, pid })).collect()
    }

    /// The processes whose pid file names a pid on another host that cannot be reached now
    /// (they may well run), with why.
    pub fn unreachable_procs(&self) -> Vec<(Running, String)> {
        let mut out = Vec::new();
        for p in self.procs() {
            let Ok(text) = fs::read_to_string(self.pid_file(&p)) else { continue };
            let Ok(pid) = text.trim().parse::<u32>() else { continue };
            if let Err(e) = self.host_of(&p).is_ours(self, pid, &p) {
                let why = match e {
                    HarnessError::Host { host, problem, .. } => format!("{host}: {problem}"),
                    e => crate::error::chain(&e),
                };
                out.push((Running { proc: p, pid }, why));
            }
        }
        out
    }

    /// The processes of this cluster running on this host (none of another host's pids,
    /// which mean nothing in this host's `/proc`).
    pub fn running_here(&self) -> Vec<Running> {
        let here = self.procs().into_iter().filter(|p| self.host_of(p).is_local());
        here.filter_map(|p| self.running(&p).map(|pid| Running { proc: p, pid })).collect()
    }

    /// Refuses to start an experiment's own clusters while this one runs here (`given`: the
    /// path the user named it by; `what`: why that matters), or — with `strays` — while
    /// processes of clusters derived from it by an earlier run do ([`Cluster::derived_running`]).
    pub fn refuse_running(&self, given: &Path, what: &'static str, strays: bool) -> Result<()> {
        if !self.running_procs().is_empty() {
            return Err(HarnessError::ClusterRunning { path: self.path.clone(), given: given.to_path_buf(), what });
        }
        let left = if strays { self.derived_running() } else { Vec::new() };
        if !left.is_empty() {
            let running: Vec<String> = left.iter().map(|(_, r)| describe(r)).collect();
            return Err(HarnessError::Strays { running: running.join(", "), path: self.path.clone() });
        }
        Ok(())
    }

    /// Starts every process from the `glass` executable `exe` and waits until every
    /// partition serves (see the module documentation), reporting to `progress`.
    pub fn up(&self, exe: &Path, progress: &mut dyn Progress) -> Result<Up> {
        let running = self.running_procs();
        let all = self.procs();
        if !running.is_empty() {
            if running.len() == all.len() {
                return Ok(Up::AlreadyRunning(running));
            }
            return Err(HarnessError::PartlyRunning { running: describe(&running), path: self.path.clone() });
        }
        // Everything is checked before anything is created (defect #14, item 5): every address
        // resolves and can be bound here, and certificates already issued fit the addresses
        // and identities of this cluster.toml; a refused `up` leaves no file behind.
        let here = self.local_addresses();
        wire::config::check_addresses_free(here.iter().map(|(f, a)| (f.as_str(), a.as_str())))
            .map_err(|e| HarnessError::config("cannot start the processes of cluster.toml here", e))?;
        // Every other host runs this build (`glass cluster deploy` installs it), and no
        // other cluster's process.
        self.check_builds(exe)?;
        self.check_hosts_free()?;
        let cert_dir = &self.config.cert_dir;
        let has_ca = cert_dir.join(wire::tls::CA_CERT_FILE).exists();
        if has_ca {
            wire::tls::check_certificates(&self.config).map_err(|source| HarnessError::Tls {
                what: format!("the certificates in {} do not fit {}", cert_dir.display(), self.path.display()),
                source,
            })?;
        }
        fs::create_dir_all(&self.config.run_dir)
            .map_err(|e| HarnessError::io(format!("create run_dir {}", self.config.run_dir.display()), e))?;
        // A new cluster: every node loads its partitions from the seed, so the memberships an
        // earlier run's coordinators stored describe replicas that no longer exist — and,
        // under another cluster.toml (a mode changed), name primaries the nodes do not have
        // (measured: both passive primaries on one node, half the throughput). Only a
        // coordinator started alone (`glass coordinator --id N`) resumes its stored state.
        for c in self.config.coordinator_ids() {
            let state = wire::config::coordinator_state_file(&self.config.run_dir, c);
            match fs::remove_file(&state) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(HarnessError::io(format!("remove {}", state.display()), e)),
            }
        }
        if !has_ca {
            let r = wire::tls::init_cluster(&self.config, false)?;
            progress.certificates_created(&r.cert_dir);
        }
        let t0 = Instant::now();
        let mut children: Vec<Started> = Vec::new();
        for p in all {
            let host = self.host_of(&p);
            match host.start(self, exe, &p, &[], true) {
                Ok(launched) => {
                    self.write_pid(&p, launched.pid)?;
                    children.push((p, host, launched));
                }
                Err(e) => {
                    self.abandon(&mut children);
                    return Err(e);
                }
            }
        }
        let ready = self.wait_ready(&mut children, progress);
        progress.waited();
        match ready {
            Ok(()) => {
                let started: Vec<Running> =
                    children.iter().map(|(p, _, c)| Running { proc: p.clone(), pid: c.pid }).collect();
                progress.up(t0.elapsed(), &started, &self.config.run_dir);
                Ok(Up::Started(children.drain(..).filter_map(|(_, _, c)| c.child).collect()))
            }
            Err(e) => {
                self.abandon(&mut children);
                Err(e)
            }
        }
    }

    /// Starts node `id` again in the background from `exe` (its log appended to), with
    /// `extra` flags (`--rejoin`), and writes its pid file; its child, when it runs here.
    pub fn restart_node(&self, exe: &Path, id: NodeId, extra: &[&str]) -> Result<Option<Child>> {
        self.restart(exe, &Proc::Node(id), extra)
    }

    /// Starts process `p` again in the background, on its host (its log appended to), with
    /// `extra` flags, and writes its pid file; its child, when it runs here.
    pub fn restart(&self, exe: &Path, p: &Proc, extra: &[&str]) -> Result<Option<Child>> {
        let launched = self.host_of(p).start(self, exe, p, extra, false)?;
        self.write_pid(p, launched.pid)?;
        Ok(launched.child)
    }

    fn write_pid(&self, p: &Proc, pid: u32) -> Result<()> {
        let file = self.pid_file(p);
        fs::write(&file, format!("{pid}\n")).map_err(|e| HarnessError::io(format!("write {}", file.display()), e))
    }

    /// Starts `p` on this host from `exe` ([`crate::place::Local`]), its log moved aside
    /// first when `fresh`.
    pub(crate) fn spawn_here(&self, exe: &Path, p: &Proc, extra: &[&str], fresh: bool) -> Result<Child> {
        use std::os::unix::process::CommandExt;
        let log_path = self.log_file(p);
        if fresh {
            rotate_log(&log_path)?;
        }
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| HarnessError::io(format!("create {}", log_path.display()), e))?;
        let err = log.try_clone().map_err(|e| HarnessError::io(format!("open {}", log_path.display()), e))?;
        let mut cmd = Command::new(exe);
        cmd.args(p.args(&self.path)).args(extra).stdin(Stdio::null()).stdout(log).stderr(err).process_group(0);
        // SAFETY: the closure makes only async-signal-safe system calls (close_range, fcntl,
        // getrlimit) between fork and exec, and allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                close_inherited_on_exec();
                Ok(())
            });
        }
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        // Registered for Ctrl-C (crate::interrupt); refused once a signal was taken.
        crate::interrupt::spawn_registered(p, self.path.clone(), self.pid_file(p), || cmd.spawn())
            .ok_or(HarnessError::Interrupted)?
            .map_err(|e| HarnessError::io(format!("start the {}", p.label()), e))
    }

    /// Stops what `up` started after a failure, and removes their pid files.
    fn abandon(&self, children: &mut Vec<Started>) {
        for (p, host, launched) in children.iter_mut() {
            match launched.child.as_mut() {
                Some(child) => {
                    signal(child.id(), libc::SIGKILL);
                    let _ = child.wait();
                }
                None => {
                    let _ = host.signal(self, &Running { proc: p.clone(), pid: launched.pid }, libc::SIGKILL);
                }
            }
            let _ = fs::remove_file(self.pid_file(p));
        }
        children.clear();
    }

    /// Polls until every partition serves; fails when a process exits, a partition stops or
    /// time runs out.
    fn wait_ready(&self, children: &mut [Started], progress: &mut dyn Progress) -> Result<()> {
        let rt = runtime()?;
        let client = self.client();
        let deadline = Instant::now() + Duration::from_secs(self.config.timeouts.load_timeout_s) + READY_SLACK;
        rt.block_on(async {
            let mut coordinator = None;
            let mut nodes: Vec<(NodeId, Option<wire::endpoint::Link>)> =
                self.config.nodes.iter().map(|n| (n.id, None)).collect();
            loop {
                for (p, host, launched) in children.iter_mut() {
                    if let Some(e) = host.exited(self, p, launched)? {
                        return Err(e);
                    }
                }
                if Instant::now() > deadline {
                    return Err(HarnessError::NotReady {
                        load_timeout_s: self.config.timeouts.load_timeout_s,
                        slack_s: READY_SLACK.as_secs(),
                        run_dir: self.config.run_dir.clone(),
                    });
                }
                // Load progress, from the nodes.
                let (loaded, total) = load_progress(&client, &mut nodes).await?;
                progress.loading(loaded, total);
                // Readiness, from the coordinator.
                if coordinator.is_none() {
                    coordinator = client.connect_coordinator().await.ok();
                }
                if let Some(c) = &mut coordinator {
                    match client::status(c).await {
                        Ok(s) => {
                            if let Some(p) = s.partitions.iter().find(|p| p.phase.is_stopped()) {
                                return Err(HarnessError::PartitionStopped {
                                    partition: p.partition,
                                    phase: p.phase.clone(),
                                });
                            }
                            let serving = s.partitions.iter().filter(|p| p.phase.is_serving()).count();
                            // (A coordinator that reports no partition serves none yet.)
                            if serving == s.partitions.len() && serving > 0 {
                                return Ok(());
                            }
                            progress.serving(serving, s.partitions.len());
                        }
                        Err(_) => coordinator = None,
                    }
                }
                tokio::time::sleep(READY_POLL).await;
            }
        })
    }

    /// Gathers what `glass cluster status` shows (see [`StatusSample`]).
    pub fn sample_status(&self) -> Result<StatusSample> {
        let rt = runtime()?;
        let client = self.client();
        let local: Vec<Running> = self.running_procs();
        if local.is_empty() && !rt.block_on(self.any_answers(&client)) {
            // Nothing runs here and nothing answers anywhere: said at once, not after every
            // probe's own timeout one by one.
            let coordinators = if self.config.coordinators.len() > 1 {
                self.config.coordinator_ids().into_iter().map(|c| (c, None)).collect()
            } else {
                Vec::new()
            };
            let nodes = self.config.nodes.iter().map(|n| (n.id, None)).collect();
            let mode = self.config.mode();
            return Ok(StatusSample { local, coordinator: None, coordinators, digests: Vec::new(), nodes, mode });
        }
        let (coordinator, coordinators, digests, nodes) = rt.block_on(async {
            let mut coordinators = Vec::new();
            if self.config.coordinators.len() > 1 {
                for c in self.config.coordinator_ids() {
                    let s = match client.connect_coordinator_id(c).await {
                        Ok(mut link) => client::status(&mut link).await.ok(),
                        Err(_) => None,
                    };
                    coordinators.push((c, s));
                }
            }
            let mut coordinator: Option<ProcessStatus> = None;
            let mut digests = Vec::new();
            if let Ok(mut link) = client.connect_coordinator().await {
                coordinator = client::status(&mut link).await.ok();
                if let Some(s) = &coordinator {
                    for p in s.partitions.iter().filter(|p| p.phase.is_serving()) {
                        if let Ok((seq, ds)) = client::digests(&mut link, p.partition).await {
                            digests.push(PartitionDigests { partition: p.partition, seq, digests: ds });
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
            (coordinator, coordinators, digests, nodes)
        });
        Ok(StatusSample { local, coordinator, coordinators, digests, nodes, mode: self.config.mode() })
    }

    /// What `glass cluster status` measures over `window` after `first`, from a second status
    /// of each answering node and of the leading coordinator (the interval is each process's
    /// own uptime difference; a process restarted meanwhile gives nothing): each replica's
    /// committed transactions per second and its executor's p99 time per batch, and each
    /// partition's p99 time from a batch's send to a replica's results, at the leader.
    pub fn sample_window(&self, first: &StatusSample, window: Duration) -> Result<Window> {
        let answering: Vec<(NodeId, ProcessStatus)> =
            first.nodes.iter().filter_map(|(n, s)| s.clone().map(|s| (*n, s))).collect();
        if answering.is_empty() && first.coordinator.is_none() {
            return Ok(Window::default());
        }
        std::thread::sleep(window);
        let rt = runtime()?;
        let client = self.client();
        let (again, leader): (Vec<(NodeId, Option<ProcessStatus>)>, Option<ProcessStatus>) = rt.block_on(async {
            let mut out = Vec::new();
            for (n, _) in &answering {
                let s = match tokio::time::timeout(PROBE_PATIENCE, client.connect_node(*n)).await {
                    Ok(Ok(mut link)) => client::status(&mut link).await.ok(),
                    _ => None,
                };
                out.push((*n, s));
            }
            let leader = match tokio::time::timeout(PROBE_PATIENCE, client.connect_coordinator()).await {
                Ok(Ok(mut link)) if first.coordinator.is_some() => client::status(&mut link).await.ok(),
                _ => None,
            };
            (out, leader)
        });
        let same = |before: &ProcessStatus, after: &ProcessStatus| {
            after.pid == before.pid && after.uptime_ms > before.uptime_ms
        };
        let mut w = Window::default();
        for ((node, before), (_, after)) in answering.iter().zip(&again) {
            let Some(after) = after.as_ref().filter(|a| same(before, a)) else { continue };
            let seconds = (after.uptime_ms - before.uptime_ms) as f64 / 1e3;
            for p in &after.partitions {
                if let Some(b) = before.partitions.iter().find(|b| b.partition == p.partition) {
                    w.rates.push((*node, p.partition, p.txns.saturating_sub(b.txns) as f64 / seconds));
                    if let Some(p99) = wire::metrics::p99_between(&b.latency_buckets, &p.latency_buckets) {
                        w.node_p99.push((*node, p.partition, p99));
                    }
                }
            }
        }
        if let (Some(before), Some(after)) = (&first.coordinator, &leader) {
            if same(before, after) {
                for p in &after.partitions {
                    let b = before.partitions.iter().find(|b| b.partition == p.partition);
                    let b = b.map_or(&[][..], |b| &b.latency_buckets[..]);
                    if let Some(p99) = wire::metrics::p99_between(b, &p.latency_buckets) {
                        w.leader_p99.push((p.partition, p99));
                    }
                }
            }
        }
        Ok(w)
    }

    /// Whether any process of the cluster accepts a connection within [`PROBE_PATIENCE`]:
    /// every one is tried at once.
    async fn any_answers(&self, client: &ClusterClient) -> bool {
        let mut probes = tokio::task::JoinSet::new();
        for c in self.config.coordinator_ids() {
            let client = client.clone();
            probes.spawn(async move {
                matches!(tokio::time::timeout(PROBE_PATIENCE, client.connect_coordinator_id(c)).await, Ok(Ok(_)))
            });
        }
        for n in self.config.nodes.iter().map(|n| n.id) {
            let client = client.clone();
            probes.spawn(async move {
                matches!(tokio::time::timeout(PROBE_PATIENCE, client.connect_node(n)).await, Ok(Ok(_)))
            });
        }
        while let Some(answered) = probes.join_next().await {
            if answered.unwrap_or(false) {
                return true;
            }
        }
        false
    }

    /// Stops the cluster (see the module documentation); says what it stopped and how.
    pub fn down(&self) -> Result<Down> {
        // A host that cannot be reached may still run its process: `down` stops the others,
        // then says so and keeps its pid file, rather than report a cluster stopped.
        let unreachable = self.unreachable_procs();
        let down = self.down_reachable()?;
        if !unreachable.is_empty() {
            let each: Vec<String> =
                unreachable.iter().map(|(r, why)| format!("{} (pid {}, {why})", r.proc.label(), r.pid)).collect();
            return Err(HarnessError::Unreachable { each: each.join("; "), rest: down.line(&self.config.run_dir) });
        }
        Ok(down)
    }

    /// [`Cluster::down`] of the processes whose hosts answer.
    fn down_reachable(&self) -> Result<Down> {
        let running = self.running_procs();
        let rt = runtime()?;
        let client = self.client();
        // Ask every process, local or not, to shut down: the coordinators first (the leader
        // tells the nodes), then, at once, each node not seen gone.
        let wait = Duration::from_millis(self.config.timeouts.connect_timeout_ms.min(2_000));
        let asked = rt.block_on(async {
            let mut asked = Vec::new();
            // The leader first: with the standbys gone first it would lose its majority and no
            // longer speak for the cluster.
            let mut order = self.config.coordinator_ids();
            if order.len() > 1 {
                if let Ok(Ok(mut link)) = tokio::time::timeout(wait, client.connect_coordinator()).await {
                    let leader = client::status(&mut link).await.ok().map(|s| s.id);
                    order.sort_by_key(|c| Some(u16::from(*c)) != leader);
                }
            }
            let group = order.len() > 1;
            for c in order {
                let p = Proc::Coordinator(group.then_some(c));
                if let Ok(Ok(link)) = tokio::time::timeout(wait, client.connect_coordinator_id(c)).await {
                    if client::shutdown(link, "glass cluster down").await.is_ok() {
                        asked.push(p.label());
                    }
                }
            }
            let mut tasks = Vec::new();
            for n in &self.config.nodes {
                let p = Proc::Node(n.id);
                if let Some(r) = running.iter().find(|r| r.proc == p) {
                    if self.wait_gone_anywhere(std::slice::from_ref(r), NODE_GONE_WAIT).is_empty() {
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
            return Ok(Down { stopped: running, how: Vec::new(), asked });
        }
        let grace = Duration::from_millis(self.config.timeouts.shutdown_timeout_ms);
        let mut how = Vec::new();
        let mut left = self.wait_gone_anywhere(&running, grace);
        for r in &running {
            if !left.iter().any(|l| l.pid == r.pid) {
                how.push(format!("{} (pid {}) shut down", r.proc.label(), r.pid));
            }
        }
        if !left.is_empty() {
            for r in &left {
                self.signal_proc(r, libc::SIGTERM);
            }
            let after_term = self.wait_gone_anywhere(&left, grace);
            for r in &left {
                if !after_term.iter().any(|l| l.pid == r.pid) {
                    how.push(format!("{} (pid {}) stopped by SIGTERM", r.proc.label(), r.pid));
                }
            }
            left = after_term;
        }
        if !left.is_empty() {
            for r in &left {
                self.signal_proc(r, libc::SIGKILL);
            }
            let after_kill = self.wait_gone_anywhere(&left, KILL_WAIT);
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
            return Err(HarnessError::Survived(describe(&left)));
        }
        Ok(Down { stopped: running, how, asked })
    }
}

/// Rows loaded and to load over every node that answers (`nodes`: each node's link, dialled
/// again when lost); a partition that failed to load is an error.
async fn load_progress(
    client: &ClusterClient,
    nodes: &mut [(NodeId, Option<wire::endpoint::Link>)],
) -> Result<(u64, u64)> {
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
                        return Err(HarnessError::LoadFailed {
                            partition: p.partition,
                            node: *id,
                            reason: reason.clone(),
                        });
                    }
                }
            }
            Err(_) => *link = None,
        }
    }
    Ok((loaded, total))
}

/// The digests of one serving partition's live replicas after one batch, through the
/// coordinator's ordered path.
#[derive(Debug, Clone)]
pub struct PartitionDigests {
    pub partition: PartitionId,
    pub seq: Seq,
    pub digests: Vec<(NodeId, StateDigest)>,
}

impl PartitionDigests {
    /// Whether every replica's digest is the same.
    pub fn equal(&self) -> bool {
        self.digests.windows(2).all(|w| w[0].1 == w[1].1)
    }
}

/// What [`Cluster::sample_window`] measured between two status samples.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// Per (node, partition): the replica's committed transactions per second.
    pub rates: Vec<(NodeId, PartitionId, f64)>,
    /// Per (node, partition): the replica's executor's p99 time on a batch, in seconds (the
    /// upper bound of its bucket, [`wire::metrics::latency_bounds`]).
    pub node_p99: Vec<(NodeId, PartitionId, f64)>,
    /// Per partition, at the leading coordinator: the p99 time from sending a batch to a
    /// replica's results for it, in seconds (likewise a bucket's bound).
    pub leader_p99: Vec<(PartitionId, f64)>,
}

impl Window {
    pub fn rate(&self, node: NodeId, partition: PartitionId) -> Option<f64> {
        self.rates.iter().find(|(n, p, _)| *n == node && *p == partition).map(|r| r.2)
    }

    pub fn node_p99(&self, node: NodeId, partition: PartitionId) -> Option<f64> {
        self.node_p99.iter().find(|(n, p, _)| *n == node && *p == partition).map(|r| r.2)
    }

    pub fn leader_p99(&self, partition: PartitionId) -> Option<f64> {
        self.leader_p99.iter().find(|(p, _)| *p == partition).map(|r| r.1)
    }
}

/// A p99 in seconds as milliseconds for a table or JSON: `None` above every bucket's bound.
pub fn p99_ms(seconds: f64) -> Option<f64> {
    seconds.is_finite().then_some(seconds * 1e3)
}

/// What `glass cluster status` shows: the processes running here (by their pid files), the
/// coordinator's and each node's own status (`None`: it did not answer), and the digests of
/// each serving partition.
#[derive(Debug, Clone)]
pub struct StatusSample {
    pub local: Vec<Running>,
    /// The leading coordinator's status (the only one's, without a group).
    pub coordinator: Option<ProcessStatus>,
    /// With a coordinator group: each coordinator's own status, in the file's order.
    pub coordinators: Vec<(CoordinatorId, Option<ProcessStatus>)>,
    pub digests: Vec<PartitionDigests>,
    /// Every node of cluster.toml, in its order.
    pub nodes: Vec<(NodeId, Option<ProcessStatus>)>,
    /// The cluster's mode (in the passive ones, backups' digests are not compared here).
    pub mode: Mode,
}

impl StatusSample {
    /// The pid of `p` if it runs here.
    pub fn pid_of(&self, p: &Proc) -> Option<u32> {
        self.local.iter().find(|r| r.proc == *p).map(|r| r.pid)
    }

    /// Healthy: the coordinator answers and every partition serves, every node answers and
    /// each of its replicas is ready, and the digests of each partition's live replicas are
    /// equal (in the passive modes, the primary's digest alone is sampled).
    pub fn healthy(&self) -> bool {
        let coordinator = self
            .coordinator
            .as_ref()
            .is_some_and(|s| !s.partitions.is_empty() && s.partitions.iter().all(|p| p.phase.is_serving()));
        let nodes = self
            .nodes
            .iter()
            .all(|(_, s)| s.as_ref().is_some_and(|s| s.partitions.iter().all(|p| p.phase == PartitionPhase::Ready)));
        coordinator && nodes && self.digests.iter().all(PartitionDigests::equal)
    }

    /// How many batches node `node`'s replica of `partition` is behind the furthest replica
    /// of it that answered (0 for the furthest).
    pub fn lag_batches(&self, node: NodeId, partition: PartitionId) -> Option<u64> {
        let seq_of = |s: &ProcessStatus| s.partitions.iter().find(|p| p.partition == partition).map(|p| p.seq);
        let mine = self.nodes.iter().find(|(n, _)| *n == node)?.1.as_ref().and_then(seq_of)?;
        let furthest = self.nodes.iter().filter_map(|(_, s)| s.as_ref().and_then(seq_of)).max()?;
        Some(furthest.saturating_sub(mine))
    }

    /// The sample as a JSON document (`glass cluster status --json`): each process with its
    /// address, pid, whether it runs here and answers, its role, uptime and partitions (state,
    /// batch, transactions, CPU, committed txn/s over `rates`' window, lag in batches behind
    /// the furthest replica, digest), the digests compared, and whether it is all healthy.
    pub fn to_json(&self, config: &ClusterConfig, window: &Window) -> serde_json::Value {
        use serde_json::json;
        let running = |p: Proc| self.pid_of(&p);
        let mut processes = Vec::new();
        let group = config.coordinators.len() > 1;
        for (i, c) in config.coordinators.iter().enumerate() {
            let id = config.coordinator_ids()[i];
            let st = if group {
                self.coordinators.iter().find(|(c, _)| *c == id).and_then(|(_, s)| s.as_ref())
            } else {
                self.coordinator.as_ref()
            };
            let leads = st.is_some_and(|s| s.leader == Some(s.id) || !group);
            let partitions: Vec<serde_json::Value> = match (leads, &self.coordinator) {
                (true, Some(lead)) => lead
                    .partitions
                    .iter()
                    .map(|p| {
                        let p99 = window.leader_p99(p.partition);
                        json!({"partition": p.partition, "state": p.phase.to_string(), "batch": p.seq,
                                    "in_flight": p.txns, "replicas": p.replicas,
                                    "result_p99_ms": p99.and_then(p99_ms), "result_p99_over": p99.map(|s| s.is_infinite())})
                    })
                    .collect(),
                _ => Vec::new(),
            };
            processes.push(json!({
                "process": if group { format!("coordinator {id}") } else { "coordinator".to_string() },
                "address": c.address,
                "pid": st.map(|s| s.pid).or_else(|| running(Proc::Coordinator(group.then_some(id)))),
                "runs_here": running(Proc::Coordinator(group.then_some(id))).is_some(),
                "answers": st.is_some(),
                "role": st.map(|s| if leads { "leader".to_string() } else {
                    s.leader.map_or("standby (no leader known)".to_string(), |l| format!("standby (leader: {l})"))
                }),
                "uptime_s": st.map(|s| s.uptime_ms as f64 / 1e3),
                "partitions": partitions,
            }));
        }
        for n in &config.nodes {
            let st = self.nodes.iter().find(|(id, _)| *id == n.id).and_then(|(_, s)| s.as_ref());
            let partitions: Vec<serde_json::Value> = st.map_or_else(Vec::new, |s| {
                s.partitions
                    .iter()
                    .map(|p| {
                        let rate = window.rate(n.id, p.partition);
                        let p99 = window.node_p99(n.id, p.partition);
                        json!({
                            "partition": p.partition,
                            "state": p.phase.to_string(),
                            "role": p.replication.role.map(|r| r.to_string()),
                            "batch": p.seq,
                            "committed": p.txns,
                            "cpu_s": p.cpu_ms as f64 / 1e3,
                            "txn_per_s": rate,
                            "batch_p99_ms": p99.and_then(p99_ms),
                            "batch_p99_over": p99.map(|s| s.is_infinite()),
                            "lag_batches": self.lag_batches(n.id, p.partition),
                            "backup_ack_delay_ms_mean": (p.replication.acks > 0)
                                .then(|| p.replication.ack_delay_us_sum as f64 / p.replication.acks as f64 / 1e3),
                            "digest": self.digest_text(n.id, p),
                        })
                    })
                    .collect()
            });
            processes.push(json!({
                "process": format!("node {}", n.id),
                "address": n.address,
                "pid": st.map(|s| s.pid).or_else(|| running(Proc::Node(n.id))),
                "runs_here": running(Proc::Node(n.id)).is_some(),
                "answers": st.is_some(),
                "role": st.map(|_| "node"),
                "uptime_s": st.map(|s| s.uptime_ms as f64 / 1e3),
                "partitions": partitions,
            }));
        }
        let digests: Vec<serde_json::Value> = self
            .digests
            .iter()
            .map(|d| {
                json!({"partition": d.partition, "batch": d.seq, "equal": d.equal(),
                       "digests": d.digests.iter().map(|(n, x)| json!({"node": n, "digest": x.to_string()})).collect::<Vec<_>>()})
            })
            .collect();
        let running_any = processes.iter().any(|p| p["answers"] == true || p["runs_here"] == true);
        json!({
            "mode": self.mode.name(),
            "running": running_any,
            "healthy": self.healthy(),
            "processes": processes,
            "digests": digests,
        })
    }

    /// Node `node`'s digest of `partition`: at the sampled batch, else the one its load
    /// reported.
    pub fn digest_text(&self, node: NodeId, p: &wire::messages::PartitionReport) -> Option<String> {
        self.digests
            .iter()
            .find(|d| d.partition == p.partition)
            .and_then(|d| d.digests.iter().find(|(n, _)| *n == node).map(|(_, x)| format!("{x} (at batch {})", d.seq)))
            .or_else(|| match &p.load {
                Some(LoadState::Ready { digest }) => Some(format!("{digest} (after load)")),
                _ => None,
            })
    }
}

/// Waits up to `limit` for the processes to exit; returns those still alive.
pub fn wait_gone(procs: &[Running], limit: Duration, config: &Path) -> Vec<Running> {
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

/// Sends `sig` to `pid` (a process of this cluster, or a child of this process).
pub fn signal(pid: u32, sig: libc::c_int) {
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

/// How long `status` waits for any process to accept a connection before it says none runs
/// (when none runs here either).
pub const PROBE_PATIENCE: Duration = Duration::from_millis(800);

/// How many earlier runs' logs `up` keeps beside the current one (`node-1.log.1` the last, up
/// to `node-1.log.5`).
pub const LOGS_KEPT: usize = 5;

/// Moves the log at `path` of an earlier run aside (`<name>.log` to `<name>.log.1`, `.1` to
/// `.2`, …, dropping the oldest past [`LOGS_KEPT`]), so that `up` starts every process on a
/// fresh log and truncates none.
fn rotate_log(path: &Path) -> Result<()> {
    if fs::metadata(path).map_or(true, |m| m.len() == 0) {
        return Ok(());
    }
    let numbered = |n: usize| {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    };
    for n in (1..LOGS_KEPT).rev() {
        let from = numbered(n);
        if from.exists() {
            fs::rename(&from, numbered(n + 1))
                .map_err(|e| HarnessError::io(format!("rotate {}", from.display()), e))?;
        }
    }
    fs::rename(path, numbered(1)).map_err(|e| HarnessError::io(format!("rotate {}", path.display()), e))
}

/// In a child between fork and exec: marks every descriptor past stdio close-on-exec, so a
/// cluster process keeps none that `glass` inherited from whatever started it (a lock a shell
/// held stayed held by the whole cluster). Marked, not closed: the pipe through which the
/// standard library reports a failed exec must stay open until the exec.
fn close_inherited_on_exec() {
    /// `CLOSE_RANGE_CLOEXEC` (Linux 5.11): set the flag instead of closing.
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: plain system calls on descriptor numbers; none is dereferenced.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 3 as libc::c_uint, libc::c_uint::MAX, CLOSE_RANGE_CLOEXEC) == 0 {
            return;
        }
        // An older kernel: each descriptor the limit allows, one at a time.
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        let max =
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 { limit.rlim_cur.min(1 << 20) } else { 1024 };
        for fd in 3..max as libc::c_int {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process is named by the command line `Proc::args` made for this configuration, and
    /// only by it.
    #[test]
    fn a_cluster_process_is_named_from_its_command_line() {
        let config = Path::new("/runs/a/cluster.toml");
        let line = |p: &Proc, extra: &[&str]| {
            let mut args = vec!["/bin/glass".to_string()];
            args.extend(p.args(config));
            args.extend(extra.iter().map(|a| a.to_string()));
            args
        };
        let label = |args: &[String]| Proc::label_of(args, config);
        assert_eq!(label(&line(&Proc::Node(2), &[])), Some("node 2".to_string()));
        assert_eq!(label(&line(&Proc::Node(1), &["--rejoin"])), Some("node 1 (rejoining)".to_string()));
        assert_eq!(label(&line(&Proc::Coordinator(Some(0)), &[])), Some("coordinator 0".to_string()));
        assert_eq!(label(&line(&Proc::Coordinator(None), &[])), Some("coordinator".to_string()));
        let other = Proc::label_of(&line(&Proc::Node(2), &[]), Path::new("/runs/b/cluster.toml"));
        assert_eq!(other, None, "another cluster's node");
        assert_eq!(label(&["/bin/glass".to_string(), "bench".to_string()]), None);
        assert_eq!(label(&["glass".to_string()]), None);
    }

    /// Issue 40: `up` never truncates a log; it keeps the last [`LOGS_KEPT`] runs' aside.
    #[test]
    fn an_earlier_runs_log_is_moved_aside_not_truncated() {
        let dir = std::env::temp_dir().join(format!("glass-rotate-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let log = dir.join("node-1.log");
        rotate_log(&log).unwrap();
        assert!(!log.exists(), "no log yet: nothing to move");
        for run in 1..=LOGS_KEPT + 2 {
            rotate_log(&log).unwrap();
            fs::write(&log, format!("run {run}\n")).unwrap();
        }
        let read = |p: &Path| fs::read_to_string(p).unwrap();
        let runs = LOGS_KEPT + 2;
        assert_eq!(read(&log), format!("run {runs}\n"));
        for n in 1..=LOGS_KEPT {
            assert_eq!(read(&dir.join(format!("node-1.log.{n}"))), format!("run {}\n", runs - n));
        }
        assert!(!dir.join(format!("node-1.log.{}", LOGS_KEPT + 1)).exists(), "the oldest is dropped");
        fs::write(&log, "").unwrap();
        rotate_log(&log).unwrap();
        assert_eq!(read(&dir.join("node-1.log.1")), format!("run {}\n", runs - 1), "an empty log is not kept");
        fs::remove_dir_all(&dir).unwrap();
    }
}
