//! `glass cluster init | up | status | down`: a local cluster's life, as [`harness::cluster`]
//! runs it (`up` starts the coordinator and every node of `cluster.toml` here and waits until
//! every partition serves; `down` stops every process and checks that none is left). This
//! module turns the flags into those calls and prints what they did; `status` prints each
//! process, its partitions, their state and digests, and exits 1 unless the cluster is healthy.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use harness::cluster::{describe, Down};
use harness::{Cluster, Up};
use wire::config::ClusterConfig;

use super::progress::{glass_exe, Console};

#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// Create the cluster's CA and a certificate for the coordinator, each node and the
    /// client, in `cert_dir`; each certificate is bound to its process's identity. When
    /// processes run on other hosts (`ssh` keys), also write one bundle per host in
    /// `cert_dir/hosts/`: `ca.pem` and that host's own processes' certificates and keys.
    Init {
        #[arg(long, default_value = "cluster.toml")]
        config: PathBuf,
        /// Replace an existing CA (every certificate is reissued).
        #[arg(long)]
        force: bool,
    },
    /// Issue one process's certificate again, from the cluster's CA, for its address in
    /// cluster.toml now (after that process moved); every other certificate and key stays.
    /// Then `glass cluster deploy` sends it to its host.
    #[command(group(clap::ArgGroup::new("process").required(true).args(["node", "coordinator", "client"])))]
    Cert {
        #[arg(long, default_value = "cluster.toml")]
        config: PathBuf,
        /// The node whose certificate to reissue.
        #[arg(long)]
        node: Option<u16>,
        /// The coordinator (its id) whose certificate to reissue.
        #[arg(long)]
        coordinator: Option<u16>,
        /// The client's certificate (the tools' and benchmark's).
        #[arg(long)]
        client: bool,
    },
    /// Install this build of glass, cluster.toml and each host's certificates on every host
    /// named by an `ssh` key of cluster.toml (through the system's ssh and scp), then check
    /// that each runs this build. A host gets the CA's certificate and its own processes'
    /// certificates and keys, never the CA's key. Creates the certificates first if
    /// `cert_dir` holds none.
    Deploy {
        #[arg(long, default_value = "cluster.toml")]
        config: PathBuf,
    },
    /// Start the coordinators and every node, in the background — here, or through ssh on
    /// the host a process's `ssh` key names (after `glass cluster deploy`) — and wait until
    /// every partition serves.
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
        ClusterCommand::Cert { config, node, coordinator, client } => {
            let role = match (node, coordinator, client) {
                (Some(n), _, _) => wire::tls::Identity::Node(n),
                (_, Some(c), _) => wire::tls::Identity::Coordinator(c),
                _ => wire::tls::Identity::Client,
            };
            let cfg = ClusterConfig::load(&config).with_context(|| format!("read {}", config.display()))?;
            let issued = wire::tls::reissue(&cfg, role)?;
            let names =
                if issued.names.is_empty() { String::new() } else { format!(" for {}", issued.names.join(", ")) };
            println!(
                "reissued the {role}'s certificate{names}: {} and {}",
                issued.cert.display(),
                issued.key.display()
            );
            print_bundles(&Cluster::open(&config)?)?;
            Ok(ExitCode::SUCCESS)
        }
        ClusterCommand::Deploy { config } => deploy(&Cluster::open(&config)?),
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
    print!("{}", harness::cluster::render_init(&wire::tls::init_cluster(&cfg, force)?));
    print_bundles(&Cluster::open(config)?)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes each other host's bundle of certificates (`Cluster::write_host_bundles`) and says
/// what each holds; nothing when every process runs here.
fn print_bundles(c: &Cluster) -> Result<()> {
    let bundles = c.write_host_bundles()?;
    if !bundles.is_empty() {
        println!("a bundle per host, for `glass cluster deploy` to copy (never the CA's key):");
    }
    for b in bundles {
        println!("  {:<24} {} ({}: {})", b.host, b.dir.display(), b.processes.join(", "), b.files.join(", "));
    }
    Ok(())
}

/// `glass cluster deploy`.
fn deploy(c: &Cluster) -> Result<ExitCode> {
    let hosts = c.remote_hosts();
    if hosts.is_empty() {
        println!("no process of {} names another host (an `ssh` key): nothing to deploy", c.path.display());
        return Ok(ExitCode::SUCCESS);
    }
    println!("deploying to {} host{}…", hosts.len(), if hosts.len() == 1 { "" } else { "s" });
    c.deploy(&glass_exe()?, &mut |d| {
        println!("  {:<24} {} in {}: {} ({} files)", d.host, d.processes.join(", "), d.dir, d.version, d.files.len());
    })?;
    println!("every host runs this build; start the cluster with `glass cluster up --config {}`", c.path.display());
    Ok(ExitCode::SUCCESS)
}

/// Prints what `down` did.
pub fn print_down(c: &Cluster, d: &Down) {
    println!("{}", d.line(&c.config.run_dir));
}

/// `glass cluster status`.
fn status(c: &Cluster, json: bool) -> Result<ExitCode> {
    let s = c.sample_status()?;
    let window = c.sample_window(&s, std::time::Duration::from_secs(1))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&s.to_json(&c.config, &window))?);
    } else {
        print!("{}", harness::status::render(c, &s, &window));
    }
    Ok(if s.healthy() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
