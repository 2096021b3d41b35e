//! `glass node --config … --id …`: one node process in the foreground (what `glass cluster
//! up` starts in the background, and what an operator starts by hand on each host of a
//! multi-host cluster: docs/cluster.md). Logs go to stderr through `tracing` (`RUST_LOG`,
//! default `info`); SIGTERM or SIGINT shut it down cleanly.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use wire::config::ClusterConfig;

use super::logging;

/// Threads of the node's network runtime (the replicas' executors are threads of their own).
const NODE_RUNTIME_THREADS: usize = 1;

#[derive(Args, Debug)]
pub struct NodeArgs {
    /// The cluster's description (the same file on every host).
    #[arg(long, default_value = "cluster.toml")]
    config: PathBuf,
    /// This node's id in [[nodes]].
    #[arg(long)]
    id: u16,
    /// Listen on this address instead of the node's address in cluster.toml (e.g.
    /// `0.0.0.0:7401` behind address translation); peers still dial the configured address.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Rejoin a running cluster after a failure instead of loading from the seed:
    /// active-active copies each partition from a live replica and executes every batch
    /// since; active-passive comes back as a backup (a copy of the primary plus its
    /// shipments); full-stack recovers from its own write-ahead log (cut where a promoted
    /// primary's copy of it ended) and catches up from the primary's log.
    #[arg(long, conflicts_with = "join")]
    rejoin: bool,
    /// Join a running cluster as a new replica of these partitions (comma-separated ids),
    /// besides those the file places here: the node copies them as a rejoining node would.
    /// A node the file places nothing on is a spare (`cluster up` does not start it).
    #[arg(long, value_delimiter = ',')]
    join: Vec<u16>,
}

pub fn run(a: NodeArgs) -> Result<ExitCode> {
    logging::init("info");
    let config = ClusterConfig::load(&a.config).with_context(|| format!("read {}", a.config.display()))?;
    let (i, n) = config
        .nodes
        .iter()
        .enumerate()
        .find(|(_, n)| n.id == a.id)
        .with_context(|| format!("node {} is not listed in [[nodes]] of {}", a.id, a.config.display()))?;
    let address = match a.listen {
        Some(addr) => addr,
        None => wire::config::resolve(&format!("nodes[{i}].address"), &n.address)?,
    };
    // Before the runtime starts, so that every thread the node creates inherits the mask.
    if let Some(cpus) = &n.cpus {
        let on =
            node::affinity::pin(cpus).with_context(|| format!("pin node {} to nodes[{i}].cpus = {cpus:?}", a.id))?;
        tracing::info!(node = a.id, cpus = ?cpus, on = ?on, "pinned to CPUs");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(NODE_RUNTIME_THREADS)
        .thread_name(format!("node-{}-net", a.id))
        .enable_all()
        .build()
        .context("start the tokio runtime")?;
    rt.block_on(async {
        let listener = node::process::bind(&config, a.id, address).await?;
        tracing::info!(
            node = a.id,
            address = %listener.local_addr(),
            pid = std::process::id(),
            udp_buffers = %wire::endpoint::udp_socket_buffers(),
            "listening"
        );
        let start = match (a.rejoin, a.join.is_empty()) {
            (true, _) => node::process::Start::Rejoin,
            (false, false) => node::process::Start::Join(a.join.clone()),
            (false, true) => node::process::Start::Load,
        };
        node::process::run(config, a.id, listener, logging::shutdown_signal(), start).await
    })?;
    Ok(ExitCode::SUCCESS)
}
