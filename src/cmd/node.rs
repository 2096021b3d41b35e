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
    /// Rejoin a running cluster after a failure (active-active): copy each partition from a
    /// live replica instead of loading it from the seed, executing every batch since.
    #[arg(long)]
    rejoin: bool,
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(NODE_RUNTIME_THREADS)
        .thread_name(format!("node-{}-net", a.id))
        .enable_all()
        .build()
        .context("start the tokio runtime")?;
    rt.block_on(async {
        let listener = node::process::bind(&config, a.id, address).await?;
        tracing::info!(node = a.id, address = %listener.local_addr(), pid = std::process::id(), "listening");
        node::process::run(config, a.id, listener, logging::shutdown_signal(), a.rejoin).await
    })?;
    Ok(ExitCode::SUCCESS)
}
