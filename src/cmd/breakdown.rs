//! `glass breakdown`: the paper's staircase (Figures 5, 6 and 8; Section 4.3), with full /
//! stripped and full / lean ratios and the full stack beside Shore. Parses flags, checks output
//! paths before any work, has [`harness::breakdown`] choose how instructions are counted
//! (hardware counters, else callgrind children re-executing this binary with the hidden
//! `--worker-step`, else none), and hands the run to `workload::breakdown` in a working
//! directory of its own ([`harness::scratch`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;

use engine::conventional::Step;
use harness::record::Record;
use harness::scratch::Scratch;
use workload::breakdown::{self, BreakdownConfig, ConsoleProgress};

use super::{close_record, finish_record, wrote, RecordArgs};

#[derive(Args, Debug)]
pub struct BreakdownArgs {
    /// Warehouses of the timed runs (the paper used 5; ≈90 MB each).
    #[arg(long, default_value_t = 5)]
    warehouses: u16,
    /// Transactions of each type (NewOrder, Payment) per timed repetition, per configuration.
    #[arg(long, default_value_t = 2000)]
    txns: u64,
    /// Timed repetitions per type and configuration; the median is reported.
    #[arg(long, default_value_t = 5)]
    reps: u32,
    /// Mixed (50/50) transactions run before timing each configuration.
    #[arg(long, default_value_t = 500)]
    warmup_txns: u64,
    /// Warehouses loaded by each callgrind child; default: --warehouses. Instructions per
    /// transaction depend on it only through B+tree depth (a few per cent from 1 to 5); the
    /// load runs uninstrumented, so it costs little under valgrind.
    #[arg(long)]
    count_warehouses: Option<u16>,
    /// Transactions of each type counted by each callgrind child (counting runs ≈50x slower
    /// than the machine; the count is exact, so a few hundred suffice).
    #[arg(long, default_value_t = 500)]
    count_txns: u64,
    /// Mixed transactions each callgrind child runs, uncounted, before counting.
    #[arg(long, default_value_t = 200)]
    count_warmup_txns: u64,
    /// Time only: do not count instructions.
    #[arg(long)]
    no_instructions: bool,
    /// Seed of the loader and the input streams (printed first).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Directory under which a fresh working directory (the WAL of the durable steps, the
    /// callgrind output) is made and removed at the end; default: the system temp dir.
    #[arg(long)]
    wal_dir: Option<PathBuf>,
    /// Write the rows (txn, step, instructions, ns_per_txn, source, …), the component shares,
    /// the time shares beside Figure 8 and the summary (throughputs, ratios, instructions
    /// against Shore's) as one JSON object to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the stacked bars of Figures 5 and 6 and NewOrder's time beside Figure 8 (glass
    /// beside the paper) into this SVG file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// The run record's folder (breakdown.json headed by the run's metadata, breakdown.svg,
    /// the table as printed, report.html, command.txt, run.json) [default:
    /// results/<UTC time>-breakdown/, or under $GLASS_RESULTS_DIR].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Run even when the working directory (the durable steps' write-ahead log) is on tmpfs
    /// or ramfs, where fsync costs nothing, with a loud warning.
    #[arg(long)]
    allow_tmpfs: bool,
    /// Internal: run as a callgrind child counting this step (0–11); `--wal-dir` is then the
    /// working directory itself.
    #[arg(long, hide = true)]
    worker_step: Option<u8>,
}

fn config(a: &BreakdownArgs, work_dir: PathBuf) -> BreakdownConfig {
    BreakdownConfig {
        warehouses: a.warehouses,
        txns: a.txns,
        reps: a.reps,
        warmup_txns: a.warmup_txns,
        count_warehouses: a.count_warehouses.unwrap_or(a.warehouses),
        count_txns: a.count_txns,
        count_warmup_txns: a.count_warmup_txns,
        seed: a.seed,
        work_dir,
    }
}

/// The arguments a callgrind child gets before `--worker-step N --wal-dir DIR`.
fn worker_args(a: &BreakdownArgs) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec!["breakdown".into()];
    for (flag, value) in [
        ("--count-warehouses", a.count_warehouses.unwrap_or(a.warehouses).to_string()),
        ("--count-txns", a.count_txns.to_string()),
        ("--count-warmup-txns", a.count_warmup_txns.to_string()),
        ("--seed", a.seed.to_string()),
    ] {
        v.push(flag.into());
        v.push(value.into());
    }
    v
}

fn run_worker(a: &BreakdownArgs, n: u8) -> Result<ExitCode> {
    let step = Step::new(n).with_context(|| format!("--worker-step {n}: steps are 0 to 11"))?;
    let dir = a.wal_dir.clone().context("--worker-step needs --wal-dir")?;
    let report = breakdown::run_worker(step, &config(a, dir))?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(ExitCode::SUCCESS)
}

pub fn run(a: BreakdownArgs) -> Result<ExitCode> {
    if let Some(n) = a.worker_step {
        return run_worker(&a, n);
    }
    let parent = a.wal_dir.clone().unwrap_or_else(std::env::temp_dir);
    // Validate everything before doing any work.
    config(&a, parent.clone()).validate()?;
    if let Some(p) = &a.json {
        breakdown::check_writable_file(p).context("--json")?;
    }
    if let Some(p) = &a.svg {
        breakdown::check_writable_file(p).context("--svg")?;
    }
    let record_args = RecordArgs { out: a.out.clone(), keep_logs: false, allow_tmpfs: a.allow_tmpfs };
    record_args.check_durable(&parent, &format!("the working directory under {}", parent.display()))?;
    let mut record = record_args.open("breakdown", &parent)?;
    let outcome = breakdown_run(&a, &parent, &record);
    close_record(&mut record, outcome)
}

/// The staircase proper, its record kept in `record`.
fn breakdown_run(a: &BreakdownArgs, parent: &Path, record: &Record) -> Result<ExitCode> {
    let work = Scratch::fresh(parent)?;
    let cfg = config(a, work.path.clone());

    println!("seed: {}", a.seed);
    let plan = harness::breakdown::choose_plan(a.no_instructions, worker_args(a))?;
    println!("{}", harness::breakdown::plan_line(&plan, a.count_warehouses.unwrap_or(a.warehouses), a.count_txns));
    let started = Instant::now();
    let mut progress = ConsoleProgress::new();
    let b = breakdown::run(&cfg, plan, &mut progress)?;
    let summary = breakdown::render(&b);
    print!("{summary}");
    println!("\nglass breakdown took {:.0}s", started.elapsed().as_secs_f64());
    record.write_headed(&record.path("breakdown.json"), "breakdown", &b)?;
    breakdown::write_svg(&b, &record.path("breakdown.svg"))?;
    if let Some(p) = &a.json {
        record.write_headed(p, "breakdown", &b)?;
        wrote(p);
    }
    if let Some(p) = &a.svg {
        breakdown::write_svg(&b, p)?;
        wrote(p);
    }
    finish_record(record, &summary, &[])?;
    Ok(ExitCode::SUCCESS)
}
