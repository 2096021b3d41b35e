//! `glass check --config …`: checks a running cluster — every live replica of each partition
//! has the same state digest at the same point of the ordered stream, a copy of one replica
//! per partition (streamed here) has exactly that state, TPC-C's consistency conditions hold
//! over all partitions, and (with `--ack-log`) every acknowledged NewOrder is in the data.
//! Exits 1 when anything fails.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use workload::client::{self, NewOrderAck};

use super::cluster::{runtime, Cluster};

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[arg(long, default_value = "cluster.toml")]
    config: PathBuf,
    /// A record of acknowledged NewOrders (`neworder W D O_ID` lines, as `glass bench
    /// --config … --ack-log` writes): each must have its ORDER row.
    #[arg(long)]
    ack_log: Option<PathBuf>,
}

/// Reads the `neworder W D O_ID` lines of an acknowledgement record (other lines are skipped).
pub fn read_acks(path: &Path) -> Result<Vec<NewOrderAck>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let mut acks = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() != Some(&"neworder") {
            continue;
        }
        let parse = || -> Option<NewOrderAck> {
            Some(NewOrderAck { w: f.get(1)?.parse().ok()?, d: f.get(2)?.parse().ok()?, o_id: f.get(3)?.parse().ok()? })
        };
        match parse() {
            Some(a) if f.len() == 4 => acks.push(a),
            _ => bail!("{}:{}: expected `neworder W D O_ID`, found `{line}`", path.display(), i + 1),
        }
    }
    Ok(acks)
}

/// Writes an acknowledgement record.
pub fn write_acks(path: &Path, acks: &[NewOrderAck]) -> Result<()> {
    let mut text = String::with_capacity(acks.len() * 24);
    for a in acks {
        text.push_str(&a.to_string());
        text.push('\n');
    }
    workload::bench::write_atomic(path, text.as_bytes())?;
    Ok(())
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
