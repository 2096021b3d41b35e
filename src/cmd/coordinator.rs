//! `glass coordinator --config …`: the coordinator process in the foreground (what `glass
//! cluster up` starts in the background, and what an operator starts by hand on the
//! coordinator's host: docs/cluster.md). Logs go to stderr through `tracing` (`RUST_LOG`,
//! default `info`); SIGTERM or SIGINT shut it down cleanly.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use wire::config::ClusterConfig;

use super::logging;

#[derive(Args, Debug)]
pub struct CoordinatorArgs {
    /// The cluster's description (the same file on every host).
    #[arg(long, default_value = "cluster.toml")]
    config: PathBuf,
    /// Listen on this address instead of coordinator.address (e.g. `0.0.0.0:7400` behind
    /// address translation); peers still dial the configured address.
    #[arg(long)]
    listen: Option<SocketAddr>,
}

pub fn run(a: CoordinatorArgs) -> Result<ExitCode> {
    logging::init("info");
    let config = ClusterConfig::load(&a.config).with_context(|| format!("read {}", a.config.display()))?;
    let address = match a.listen {
        Some(addr) => addr,
        None => wire::config::resolve("coordinator.address", &config.coordinator().address)?,
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("start the tokio runtime")?;
    rt.block_on(async {
        let listener = coordinator::process::bind(&config, address).await?;
        tracing::info!(address = %listener.local_addr(), pid = std::process::id(), "listening");
        coordinator::process::run(config, listener, logging::shutdown_signal()).await
    })?;
    Ok(ExitCode::SUCCESS)
}
