//! `glass recover`: opens the conventional stack's database directory with ARIES restart
//! recovery (analysis, redo, undo of losers; see `engine::conventional`), prints what recovery
//! found and did (a torn log tail it truncated: where, how many bytes), verifies that every
//! transaction a record of acknowledged commits names is present, and checks TPC-C
//! consistency. A log recovery refuses — a damaged record followed by valid ones (issue #14,
//! item 7), a missing checkpoint or log, a damaged checkpoint — ends the command with the
//! error (file, offset, what follows the damage) and exit status 2, the directory unchanged.
//!
//! The flags are checked before recovery touches the directory, and what recovery did is
//! rendered, by [`harness::bench`]; the acknowledged-commit record (`glass bench --ack-log
//! FILE` writes it) and the check against it are [`harness::acks`]'s.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;

use engine::conventional::ConventionalDb;
use harness::acks::{missing, read_ack_log, render_missing};

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
    let (step, config) = harness::bench::recovery_config(&a.wal_dir, a.step)?;
    // Read the record first: a malformed one fails before recovery changes the directory.
    let acks = a.ack_log.as_deref().map(read_ack_log).transpose()?;
    let t0 = Instant::now();
    let db = ConventionalDb::open(&a.wal_dir, config)
        .with_context(|| format!("recover the database in {}", a.wal_dir.display()))?;
    let took = t0.elapsed().as_secs_f64();
    print!("{}", harness::bench::render_recovery(&a.wal_dir, step, db.recovery_report(), took));

    let mut s = db.session()?;
    let mut code = ExitCode::SUCCESS;
    if let Some(acks) = &acks {
        let gone = missing(&mut s, acks)?;
        print!("{}", render_missing(acks, &gone));
        if !gone.is_empty() {
            eprintln!("glass: error: {} acknowledged commits are missing after recovery", gone.len());
            code = ExitCode::from(1);
        }
    }
    if a.check {
        let (text, check) = harness::bench::consistency(&mut s);
        println!("{text}");
        if !check.passed {
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
