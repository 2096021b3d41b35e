//! `glass check --config …`: checks a running cluster — every live replica of each partition
//! has the same state digest at the same point of the ordered stream, a copy of one replica
//! per partition (streamed here) has exactly that state, TPC-C's consistency conditions hold
//! over all partitions, and (with `--ack-log`) every acknowledged NewOrder is in the data.
//! Exits 1 when anything fails. The record is read by [`harness::acks::read_acks`].

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use harness::acks::read_acks;
use harness::{runtime, Cluster};
use workload::client;

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[arg(long, default_value = "cluster.toml")]
    config: PathBuf,
    /// A record of acknowledged NewOrders (`neworder W D O_ID` lines, as `glass bench
    /// --config … --ack-log` writes): each must have its ORDER row.
    #[arg(long)]
    ack_log: Option<PathBuf>,
}

pub fn run(a: CheckArgs) -> Result<ExitCode> {
    let cluster = Cluster::open(&a.config)?;
    let acks = match &a.ack_log {
        Some(p) => read_acks(p)?,
        None => Vec::new(),
    };
    let rt = runtime()?;
    let verdict = rt
        .block_on(client::check(&cluster.client(), &acks, &[]))
        .context("check the cluster (is it running? `glass cluster status`)")?;
    print!("{verdict}");
    if verdict.passed() {
        println!("check passed");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("glass: error: check failed");
        Ok(ExitCode::from(1))
    }
}
