//! `glass dump --config … --out DIR`: copies the whole database of a running cluster — each
//! partition from one live replica, ITEM once — and writes it as one CSV per table, in the
//! embedded bench's `--dump` format (so the two can be compared with `diff`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use engine::LeanDb;
use harness::{runtime, Cluster};
use workload::client;

#[derive(Args, Debug)]
pub struct DumpArgs {
    #[arg(long, default_value = "cluster.toml")]
    config: PathBuf,
    /// Directory for the CSV files (created if needed).
    #[arg(long)]
    out: PathBuf,
}

pub fn run(a: DumpArgs) -> Result<ExitCode> {
    let cluster = Cluster::open(&a.config)?;
    let rt = runtime()?;
    let mut db = LeanDb::new();
    let copies = rt
        .block_on(client::fetch_all(&cluster.client(), &mut db))
        .context("copy the cluster's data (is it running? `glass cluster status`)")?;
    for c in &copies {
        println!("partition {}: {} rows at batch {}", c.partition, c.rows, c.seq);
    }
    let summary = workload::dump::dump(&mut db, &a.out)?;
    println!("dumped {summary} into {}", a.out.display());
    Ok(ExitCode::SUCCESS)
}
