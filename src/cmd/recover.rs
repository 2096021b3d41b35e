//! `glass recover`: opens the conventional stack's database directory with ARIES restart
//! recovery (analysis, redo, undo of losers; see `engine::conventional`), prints what recovery
//! found and did (a torn log tail it truncated: where, how many bytes), verifies that every
//! transaction a record of acknowledged commits names is present, and checks TPC-C
//! consistency. A log recovery refuses — a damaged record followed by valid ones (issue #14,
//! item 7), a missing checkpoint or log, a damaged checkpoint — ends the command with the
//! error (file, offset, what follows the damage) and exit status 2, the directory unchanged.
//!
//! Also owns the acknowledged-commit record (`glass bench --ack-log FILE` writes it): one
//! line per transaction whose commit returned, written and handed to the kernel before the
//! worker starts its next transaction, so it survives the bench process being killed.
//!
//! ```text
//! neworder W D O_ID
//! payment W D C_W C_D C_ID H_AMOUNT H_DATE
//! ```
//!
//! A NewOrder is present when its ORDER row exists; a Payment when a HISTORY row with the same
//! (H_W_ID, H_D_ID, H_C_W_ID, H_C_D_ID, H_C_ID, H_AMOUNT, H_DATE) exists (counted as a
//! multiset: two identical acknowledged payments need two rows). Other transaction types are
//! not recorded. A last line without its newline (the writer killed mid-line) is ignored.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;

use engine::conventional::{Config, ConventionalDb, Session, Step, LOG_FILE, SNAPSHOT_FILE};
use engine::procedures::{TxnInput, TxnOutput};
use engine::schema::{keys, t};
use engine::Storage;

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

/// One acknowledged commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ack {
    NewOrder { w: u16, d: u8, o_id: u32 },
    Payment { w: u16, d: u8, c_w: u16, c_d: u8, c_id: u32, amount: i64, date: i64 },
}

impl Ack {
    /// The record of a committed transaction, for the types that are recorded.
    pub fn of(input: &TxnInput, output: &TxnOutput) -> Option<Ack> {
        match (input, output) {
            (TxnInput::NewOrder(i), TxnOutput::NewOrder(o)) => {
                Some(Ack::NewOrder { w: i.w_id, d: i.d_id, o_id: o.o_id })
            }
            (TxnInput::Payment(i), TxnOutput::Payment(o)) => Some(Ack::Payment {
                w: i.w_id,
                d: i.d_id,
                c_w: i.c_w_id,
                c_d: i.c_d_id,
                c_id: o.c_id,
                amount: i.h_amount,
                date: i.date,
            }),
            _ => None,
        }
    }

    /// The record's line, newline included.
    pub fn line(&self) -> String {
        match *self {
            Ack::NewOrder { w, d, o_id } => format!("neworder {w} {d} {o_id}\n"),
            Ack::Payment { w, d, c_w, c_d, c_id, amount, date } => {
                format!("payment {w} {d} {c_w} {c_d} {c_id} {amount} {date}\n")
            }
        }
    }

    fn parse(line: &str) -> Option<Ack> {
        let mut f = line.split_ascii_whitespace();
        let kind = f.next()?;
        let mut next = || f.next().and_then(|v| v.parse::<i64>().ok());
        let ack = match kind {
            "neworder" => Ack::NewOrder {
                w: u16::try_from(next()?).ok()?,
                d: u8::try_from(next()?).ok()?,
                o_id: u32::try_from(next()?).ok()?,
            },
            "payment" => Ack::Payment {
                w: u16::try_from(next()?).ok()?,
                d: u8::try_from(next()?).ok()?,
                c_w: u16::try_from(next()?).ok()?,
                c_d: u8::try_from(next()?).ok()?,
                c_id: u32::try_from(next()?).ok()?,
                amount: next()?,
                date: next()?,
            },
            _ => return None,
        };
        f.next().is_none().then_some(ack)
    }
}

/// Reads a record of acknowledged commits (ignoring an unterminated last line).
pub fn read_ack_log(path: &Path) -> Result<Vec<Ack>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read --ack-log {}", path.display()))?;
    let complete = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    complete
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            Ack::parse(l)
                .with_context(|| format!("{} line {}: not an acknowledged commit: `{l}`", path.display(), n + 1))
        })
        .collect()
}

type PaymentKey = (u16, u8, u16, u8, u32, i64, i64);

/// The acknowledged transactions that are not in the database.
fn missing(s: &mut Session, acks: &[Ack]) -> Result<Vec<Ack>> {
    let mut history: HashMap<PaymentKey, u64> = HashMap::new();
    if acks.iter().any(|a| matches!(a, Ack::Payment { .. })) {
        s.for_each::<t::Histories>(|h| {
            *history
                .entry((h.h_w_id, h.h_d_id, h.h_c_w_id, h.h_c_d_id, h.h_c_id, h.h_amount, h.h_date))
                .or_default() += 1;
        });
    }
    let mut gone = Vec::new();
    for &ack in acks {
        let present = match ack {
            Ack::NewOrder { w, d, o_id } => s.get::<t::Orders, _>(keys::order(w, d, o_id), |_| ())?.is_some(),
            Ack::Payment { w, d, c_w, c_d, c_id, amount, date } => {
                match history.get_mut(&(w, d, c_w, c_d, c_id, amount, date)) {
                    Some(n) if *n > 0 => {
                        *n -= 1;
                        true
                    }
                    _ => false,
                }
            }
        };
        if !present {
            gone.push(ack);
        }
    }
    Ok(gone)
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
            print!("  missing: {}", g.line());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_lines_round_trip() {
        for ack in [
            Ack::NewOrder { w: 3, d: 10, o_id: 3001 },
            Ack::Payment { w: 1, d: 2, c_w: 4, c_d: 5, c_id: 2999, amount: 500_000, date: 1_213_056_777 },
        ] {
            let line = ack.line();
            assert!(line.ends_with('\n'));
            assert_eq!(Ack::parse(line.trim_end()), Some(ack));
        }
        assert_eq!(Ack::parse("neworder 1 2"), None);
        assert_eq!(Ack::parse("neworder 1 2 3 4"), None);
        assert_eq!(Ack::parse("delivery 1"), None);
    }
}
