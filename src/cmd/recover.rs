//! `glass recover`: opens the conventional stack's database directory with ARIES restart
//! recovery (analysis, redo, undo of losers; see `engine::conventional`), prints what recovery
//! found and did (a torn log tail it truncated: where, how many bytes), verifies that every
//! transaction a record of acknowledged commits names is present, and checks TPC-C
//! consistency. A log recovery refuses — a damaged record followed by valid ones (issue #14,
//! item 7), a missing checkpoint or log, a damaged checkpoint — ends the command with the
//! error (file, offset, what follows the damage) and exit status 2, the directory unchanged.
//!
//! The acknowledged-commit record (`glass bench --ack-log FILE` writes it) and the check
//! against it are [`harness::acks`]'s.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;

use engine::conventional::{Config, ConventionalDb, Step, LOG_FILE, SNAPSHOT_FILE};
use harness::acks::{missing, read_ack_log, Ack};

/// Acknowledged transactions listed when some are missing.
const MISSING_SHOWN_MAX: usize = 10;

#[derive(Args, Debug)]
pub struct RecoverArgs {
    /// The conventional stack's database directory (holding checkpoint.db and wal.log), as
    /// given to `glass bench --engine conventional --wal-dir`.
    #[arg(long)]
    wal_dir: PathBuf,
    /// The switch step the database ran at: 0 or 1, the steps that keep a durable log.
    #[arg(long, default_value_t = 0)]
    step: u8,
    /// A record of acknowledged commits (as `glass bench --ack-log` writes it): verify that
    /// every transaction it names survived; exit non-zero if one is missing.
    #[arg(long)]
    ack_log: Option<PathBuf>,
    /// Check TPC-C consistency conditions 1–10 and 12 after recovery; exit non-zero on a
    /// violation.
    #[arg(long)]
    check: bool,
    /// After recovery, write one CSV per table into this directory.
    #[arg(long)]
    dump: Option<PathBuf>,
}

pub fn run(a: RecoverArgs) -> Result<ExitCode> {
    let step = Step::new(a.step).with_context(|| format!("--step must be 0 or 1, not {}", a.step))?;
    let config = Config::for_step(step, 1);
    if !config.switches.durable() {
        bail!("--step {} keeps no durable log (log flush or log records are off): recovery needs step 0 or 1", a.step);
    }
    if !a.wal_dir.is_dir() {
        bail!("--wal-dir {} is not a directory", a.wal_dir.display());
    }
    if !a.wal_dir.join(SNAPSHOT_FILE).exists() && !a.wal_dir.join(LOG_FILE).exists() {
        bail!("--wal-dir {} holds no glass database (neither {SNAPSHOT_FILE} nor {LOG_FILE})", a.wal_dir.display());
    }
    // Read the record first: a malformed one fails before recovery changes the directory.
    let acks = a.ack_log.as_deref().map(read_ack_log).transpose()?;
    let t0 = Instant::now();
    let db = ConventionalDb::open(&a.wal_dir, config)
        .with_context(|| format!("recover the database in {}", a.wal_dir.display()))?;
    let took = t0.elapsed().as_secs_f64();
    let r = db.recovery_report();
    println!("recovered {} at step {step}", a.wal_dir.display());
    let lsn = r.snapshot_lsn.map_or_else(|| "none".to_string(), |l| l.to_string());
    println!("  checkpoint snapshot LSN   {lsn}");
    println!("  log records scanned       {}", r.log_records);
    match r.torn_tail {
        Some(t) => println!(
            "  torn tail truncated       yes: {} damaged bytes at {} offset {} (LSN {}); the log now ends there",
            t.bytes, LOG_FILE, t.offset, t.lsn
        ),
        None => println!("  torn tail truncated       no"),
    }
    println!("  winners (committed)       {}", r.winners);
    println!("  changes redone            {}", r.redone);
    println!("  of which page images      {} (B+tree splits, page allocations)", r.page_images);
    println!("  losers (rolled back)      {}", r.losers);
    println!("  changes undone            {}", r.undone);
    println!("  took                      {took:.2} s (recovery and the checkpoint after it)");

    let mut s = db.session()?;
    let mut code = ExitCode::SUCCESS;
    if let Some(acks) = &acks {
        let gone = missing(&mut s, acks)?;
        let neworders = acks.iter().filter(|a| matches!(a, Ack::NewOrder { .. })).count();
        println!(
            "\nacknowledged commits: {} ({neworders} NewOrder, {} Payment); missing: {}",
            acks.len(),
            acks.len() - neworders,
            gone.len()
        );
        for g in gone.iter().take(MISSING_SHOWN_MAX) {
            print!("  missing: {}", harness::acks::line(g));
        }
        if !gone.is_empty() {
            eprintln!("glass: error: {} acknowledged commits are missing after recovery", gone.len());
            code = ExitCode::from(1);
        }
    }
    if a.check {
        let report = engine::check::check(&mut s);
        println!("\nTPC-C consistency (clause 3.3.2):\n{report}");
        if !report.all_passed() {
            eprintln!("glass: error: consistency check failed");
            code = ExitCode::from(1);
        }
    }
    if let Some(d) = &a.dump {
        let summary = workload::dump::dump(&mut s, d)?;
        println!("dumped {summary} into {}", d.display());
    }
    Ok(code)
}
