//! `glass bench --config cluster.toml`: the TPC-C driver as a client of a running cluster
//! ([`workload::client::driver`], measured by [`harness::measure`]). Without a running cluster
//! it starts one from the file (`glass cluster up`), runs, and stops it, so one command does
//! the whole job.
//!
//! Beside the embedded bench's lines, table and JSON (plus `mode`, `replicas`, `nodes` and the
//! other [`ClusterInfo`](workload::client::driver::ClusterInfo) fields), it says where the
//! time went: CPU seconds of each local process during the measured phase, the nodes'
//! executor threads apart from their network threads (from the nodes' status), and batches
//! sent. `--check` then verifies the cluster (equal replica digests, consistency, and every
//! NewOrder acknowledged during the run present in the data); `--ack-log` writes that record.
//! `--remote-items`, `--remote-payments` and `--multi-partition` set how many transactions
//! reach beyond their home partition ([`RemoteShares`]); the report counts committed
//! single- and multi-partition transactions.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use engine::LeanDb;
use harness::acks::write_acks;
use harness::measure::{
    attach_or_start, check_after, check_partitions, measure_with, render_report, Measurement,
    CLIENTS_PER_WAREHOUSE_DEFAULT, INFLIGHT_DEFAULT,
};
use harness::record::Record;
use harness::{runtime, Cluster};
use workload::bench::{self, StopAfter};
use workload::client;
use workload::client::driver::{DriverConfig, RemoteShares};
use workload::gen::Mix;

use super::progress::{glass_exe, Console};
use super::{close_record, finish_record, wrote, ProfileArg, RecordArgs};

/// The flags of `glass bench` a cluster bench uses.
#[derive(Debug)]
pub struct ClusterBench {
    pub config: PathBuf,
    pub clients: Option<usize>,
    pub inflight: Option<usize>,
    pub rate: Option<f64>,
    /// `--remote-items`, `--remote-payments`, `--multi-partition` (see [`RemoteShares`]).
    pub remote_items: Option<u32>,
    pub remote_payments: Option<u32>,
    pub multi_partition: u32,
    pub profile: ProfileArg,
    pub mix: Option<String>,
    pub duration: f64,
    pub txns: Option<u64>,
    pub warmup: f64,
    pub seed: u64,
    pub json: Option<PathBuf>,
    pub dump: Option<PathBuf>,
    pub check: bool,
    pub per_type: bool,
    pub quiet: bool,
    pub ack_log: Option<PathBuf>,
    /// The run record (`--keep-logs` does not apply: the cluster's run_dir is its own).
    pub record: RecordArgs,
    /// Flags of the embedded bench only, refused here when given.
    pub embedded_only: Vec<&'static str>,
}

pub fn run(b: ClusterBench) -> Result<ExitCode> {
    if let Some(flag) = b.embedded_only.first() {
        bail!("{flag} applies to --embedded benches only; a cluster bench runs what cluster.toml describes");
    }
    let cluster = Cluster::open(&b.config)?;
    let config = &cluster.config;
    let mix = b.mix.as_deref().map(Mix::parse).transpose()?;
    let warehouses = usize::from(config.warehouses_total());
    let cfg = DriverConfig {
        profile: b.profile.into(),
        mix,
        clients: b.clients.unwrap_or(warehouses * CLIENTS_PER_WAREHOUSE_DEFAULT),
        inflight: b.inflight.unwrap_or(INFLIGHT_DEFAULT),
        rate: b.rate,
        warmup_s: b.warmup,
        stop: match b.txns {
            Some(n) => StopAfter::Transactions(n),
            None => StopAfter::Seconds(b.duration),
        },
        seed: b.seed,
        outages: false,
        retries: true,
    };
    cfg.validate()?;
    let shares = RemoteShares {
        remote_item_pct: b.remote_items,
        remote_payment_pct: b.remote_payments,
        multi_partition_pct: b.multi_partition,
    };
    shares.validate()?;
    check_partitions(config, &shares)?;
    if let Some(p) = &b.json {
        bench::check_writable_file(p).context("--json")?;
    }
    if let Some(p) = &b.ack_log {
        bench::check_writable_file(p).context("--ack-log")?;
    }
    if config.mode().replica_keeps_own_log() {
        let what = format!("run_dir {} (where the full stack writes its log)", config.run_dir.display());
        b.record.check_durable(&config.run_dir, &what)?;
    }
    let mut record = b.record.open("bench", &config.run_dir)?;
    record.copy_config(&cluster.path, "cluster.toml")?;
    let outcome = bench(&b, &cluster, cfg, shares, &record);
    close_record(&mut record, outcome)
}

/// The cluster bench proper, its record kept in `record`.
fn bench(
    b: &ClusterBench,
    cluster: &Cluster,
    cfg: DriverConfig,
    shares: RemoteShares,
    record: &Record,
) -> Result<ExitCode> {
    println!("seed: {}", b.seed);
    let rt = runtime()?;
    let client = cluster.client();

    // A running cluster, or one started here.
    let path = cluster.path.display().to_string();
    let mut attached = attach_or_start(&rt, cluster, &glass_exe()?, &mut Console::new(!b.quiet), &mut |start| {
        if start {
            println!("cluster: none running; starting one from {path}");
        } else {
            println!("cluster: using the running cluster of {path}");
        }
    })?;

    let echo = harness::measure::Echo { quiet: b.quiet, per_type: b.per_type };
    let Measurement { mut report, acks, payments, time_lines, .. } =
        measure_with(&rt, cluster, &client, &cfg, &shares, echo, None)?;
    report.load_seconds = attached.load_seconds;
    let mut summary = render_report(&report, &time_lines);
    print!("{summary}");
    record.write_result("bench.json", "bench", &report, b.json.as_deref(), &mut wrote)?;
    let mut checks = Vec::new();
    if let Some(p) = &b.ack_log {
        write_acks(p, &acks)?;
        println!("wrote {} acknowledged NewOrders to {}", acks.len(), p.display());
    }
    let mut code = ExitCode::SUCCESS;
    if b.check {
        let (verdict, check) = check_after(&rt, &client, &acks, &payments)?;
        println!();
        print!("{verdict}");
        summary.push_str(&format!("\n{verdict}"));
        if !check.passed {
            eprintln!("glass: error: the cluster check failed");
            code = ExitCode::from(1);
        }
        checks.push(check);
    }
    if let Some(dir) = &b.dump {
        let mut db = LeanDb::new();
        rt.block_on(client::fetch_all(&client, &mut db))?;
        let summary = workload::dump::dump(&mut db, dir)?;
        println!("dumped {summary} into {}", dir.display());
    }
    if attached.guard.armed {
        attached.guard.armed = false;
        super::cluster::print_down(cluster, &cluster.down()?);
    }
    finish_record(record, &summary, &checks)?;
    Ok(code)
}
