//! `glass coordinator --config … [--id N]`: a coordinator process in the foreground (what `glass
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
    /// Which coordinator of cluster.toml this process is (its `[[coordinators]]` id); may be
    /// left out when the file lists one coordinator.
    #[arg(long)]
    id: Option<u8>,
    /// Listen on this address instead of the coordinator's address (e.g. `0.0.0.0:7400` behind
    /// address translation); peers still dial the configured address.
    #[arg(long)]
    listen: Option<SocketAddr>,
}

pub fn run(a: CoordinatorArgs) -> Result<ExitCode> {
    logging::init("info");
    let config = ClusterConfig::load(&a.config).with_context(|| format!("read {}", a.config.display()))?;
    let me = match a.id {
        Some(id) => id,
        None if config.coordinators.len() == 1 => config.coordinator().id,
        None => anyhow::bail!(
            "{} lists {} coordinators ({:?}): say which one this process is with --id",
            a.config.display(),
            config.coordinators.len(),
            config.coordinator_ids()
        ),
    };
    let Some(own) = config.coordinator_by_id(me) else {
        anyhow::bail!(
            "coordinator {me} is not in {} (its coordinators are {:?})",
            a.config.display(),
            config.coordinator_ids()
        );
    };
    let address = match a.listen {
        Some(addr) => addr,
        None => wire::config::resolve(&format!("the address of coordinator {me}"), &own.address)?,
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("start the tokio runtime")?;
    rt.block_on(async {
        let listener = coordinator::process::bind(&config, me, address).await?;
        tracing::info!(
            address = %listener.local_addr(),
            pid = std::process::id(),
            udp_buffers = %wire::endpoint::udp_socket_buffers(),
            "listening"
        );
        coordinator::process::run(config, me, listener, logging::shutdown_signal()).await
    })?;
    Ok(ExitCode::SUCCESS)
}
