//! `glass cluster init | up | status | down`: a local cluster's life, as [`harness::cluster`]
//! runs it (`up` starts the coordinator and every node of `cluster.toml` here and waits until
//! every partition serves; `down` stops every process and checks that none is left). This
//! module turns the flags into those calls and prints what they did; `status` prints each
//! process, its partitions, their state and digests, and exits 1 unless the cluster is healthy.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use harness::cluster::{describe, Down, StatusSample};
use harness::{Cluster, Proc, Up};
use wire::config::ClusterConfig;
use wire::messages::{LoadState, NodeId, PartitionPhase, ProcessStatus};

use super::progress::{glass_exe, Console};

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
    /// Show each process — address, pid, uptime, role — and its partitions: state, batch,
    /// transactions, CPU, committed txn/s over a second, lag in batches behind the furthest
    /// replica, and state digests. Exits 1 unless the cluster is healthy; says at once when
    /// nothing runs.
    Status {
        #[arg(long, default_value = "cluster.toml")]
        config: PathBuf,
        /// Print the status as one JSON document instead of tables.
        #[arg(long)]
        json: bool,
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
            match c.up(&glass_exe()?, &mut Console::new(true))? {
                Up::Started(_) => Ok(ExitCode::SUCCESS),
                Up::AlreadyRunning(pids) => {
                    println!("the cluster is already running ({}); nothing started", describe(&pids));
                    Ok(ExitCode::SUCCESS)
                }
            }
        }
        ClusterCommand::Status { config, json } => status(&Cluster::open(&config)?, json),
        ClusterCommand::Down { config } => {
            let c = Cluster::open(&config)?;
            // First what a killed `compare` or `failover` left running from the clusters it
            // derived (they share this cluster's addresses), by their pid files.
            for (derived, running) in c.derived_running() {
                println!("found {} left by an earlier run, from {}", describe(&running), derived.path.display());
                print_down(&derived, &derived.down()?);
            }
            print_down(&c, &c.down()?);
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

/// Prints what `down` did.
pub fn print_down(c: &Cluster, d: &Down) {
    if d.stopped.is_empty() {
        if d.asked.is_empty() {
            println!(
                "no process of this cluster is running here (no live pid files in {})",
                c.config.run_dir.display()
            );
        } else {
            println!("asked {} to shut down (not started here)", d.asked.join(", "));
        }
    } else {
        println!("cluster down: {}; no process left", d.how.join(", "));
    }
}

/// `glass cluster status`.
fn status(c: &Cluster, json: bool) -> Result<ExitCode> {
    let s = c.sample_status()?;
    let rates = c.sample_rates(&s, std::time::Duration::from_secs(1))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&s.to_json(&c.config, &rates))?);
        return Ok(if s.healthy() { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    println!(
        "cluster {} (mode {}, {} partitions, {} nodes); run_dir {}",
        c.path.display(),
        c.config.mode().name(),
        c.config.partitions.len(),
        c.config.nodes.len(),
        c.config.run_dir.display()
    );
    let up =
        |st: Option<&ProcessStatus>| st.map_or("-".to_string(), |st| format!("up {:.0} s", st.uptime_ms as f64 / 1e3));
    let group = c.config.coordinators.len() > 1;
    for (i, co) in c.config.coordinators.iter().enumerate() {
        let (name, st) = match s.coordinators.get(i) {
            Some((id, st)) if group => (format!("coordinator {id}"), st.as_ref()),
            _ => ("coordinator".to_string(), s.coordinator.as_ref()),
        };
        println!("  {name:<16} {:<24} {}", co.address, up(st));
    }
    for (n, (_, st)) in c.config.nodes.iter().zip(&s.nodes) {
        println!("  {:<16} {:<24} {}", format!("node {}", n.id), n.address, up(st.as_ref()));
    }
    println!(
        "{:<12} {:>8} {:<6} {:>9} {:<28} {:>8} {:>10} {:>8} {:>9} {:>5}  digest",
        "process", "pid", "alive", "partition", "state", "batch", "txns", "cpu_s", "txn/s", "lag"
    );
    for (id, st) in &s.coordinators {
        let label = format!("coordinator {id}");
        match st {
            Some(st) if st.leader == Some(u16::from(*id)) => {}
            Some(st) => {
                let state = match st.leader {
                    Some(l) => format!("standby (leader: {l})"),
                    None => "standby (no leader known)".to_string(),
                };
                println!("{:<12} {:>8} {:<6} {:>9} {:<28}", label, st.pid, "yes", "-", state);
            }
            None => print_silent(&label, s.pid_of(&Proc::Coordinator(Some(*id)))),
        }
    }
    let leader = match &s.coordinator {
        Some(st) if !s.coordinators.is_empty() => format!("coordinator {}", st.id),
        _ => "coordinator".to_string(),
    };
    match &s.coordinator {
        Some(st) => {
            for p in &st.partitions {
                println!(
                    "{:<12} {:>8} {:<6} {:>9} {:<28} {:>8} {:>10} {:>8}  -",
                    leader,
                    st.pid,
                    "yes",
                    p.partition,
                    truncate(&p.phase.to_string(), 28),
                    p.seq,
                    format!("{} open", p.txns),
                    "-",
                );
            }
        }
        None if s.coordinators.is_empty() => print_silent("coordinator", s.pid_of(&Proc::Coordinator(None))),
        None => println!("no coordinator leads"),
    }
    for (id, st) in &s.nodes {
        match st {
            Some(st) => print_node(&s, *id, st, &rates),
            None => print_silent(&format!("node {id}"), s.pid_of(&Proc::Node(*id))),
        }
    }
    for d in &s.digests {
        if s.mode.is_passive() {
            println!(
                "partition {}: the primary's digest at batch {} is above; backups are compared once they applied the \
                 same shipments (`glass check`)",
                d.partition, d.seq
            );
        } else {
            println!(
                "partition {}: the digests of its {} live replicas at batch {} are {}",
                d.partition,
                d.digests.len(),
                d.seq,
                if d.equal() { "equal" } else { "DIFFERENT" }
            );
        }
    }
    if s.local.is_empty() && s.coordinator.is_none() && s.nodes.iter().all(|(_, st)| st.is_none()) {
        println!(
            "the cluster is not running: no process of it runs here, and none answered (start it: glass cluster up)"
        );
    }
    Ok(if s.healthy() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// A status line for a process that did not answer (`pid`: it runs here).
fn print_silent(name: &str, pid: Option<u32>) {
    println!(
        "{:<12} {:>8} {:<6} {:>9} {:<28}",
        name,
        pid.map_or("-".to_string(), |p| p.to_string()),
        if pid.is_some() { "yes" } else { "no" },
        "-",
        if pid.is_some() { "not answering" } else { "not running" }
    );
}

/// A node's status lines: one per partition it holds.
fn print_node(s: &StatusSample, id: NodeId, st: &ProcessStatus, rates: &[(NodeId, wire::messages::PartitionId, f64)]) {
    let name = format!("node {id}");
    for p in &st.partitions {
        let state = match &p.load {
            Some(LoadState::Loading { rows_loaded, rows_total }) if p.phase == PartitionPhase::Loading => {
                format!("loading {rows_loaded}/{rows_total} rows")
            }
            _ => match p.replication.role {
                None => p.phase.to_string(),
                Some(role) => format!("{} ({role})", p.phase),
            },
        };
        let rate = rates.iter().find(|(n, q, _)| *n == id && *q == p.partition);
        println!(
            "{:<12} {:>8} {:<6} {:>9} {:<28} {:>8} {:>10} {:>8.1} {:>9} {:>5}  {}",
            name,
            st.pid,
            "yes",
            p.partition,
            truncate(&state, 28),
            p.seq,
            p.txns,
            p.cpu_ms as f64 / 1000.0,
            rate.map_or("-".to_string(), |r| format!("{:.0}", r.2)),
            s.lag_batches(id, p.partition).map_or("-".to_string(), |l| l.to_string()),
            s.digest_text(id, p).unwrap_or_else(|| "-".to_string())
        );
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).collect::<String>() + "…"
    }
}
