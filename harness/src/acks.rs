//! The records of acknowledged transactions that outlive the process that wrote them, and
//! the checks against them.
//!
//! An embedded bench's record (`glass bench --ack-log FILE`, read by `glass recover
//! --ack-log`): one line per transaction whose commit returned, written and handed to the
//! kernel before the worker starts its next transaction ([`AckLog`]), so it survives the
//! bench process being killed.
//!
//! ```text
//! neworder W D O_ID
//! payment W D C_W C_D C_ID H_AMOUNT H_DATE
//! ```
//!
//! A NewOrder is present when its ORDER row exists; a Payment when a HISTORY row with the same
//! (H_W_ID, H_D_ID, H_C_W_ID, H_C_D_ID, H_C_ID, H_AMOUNT, H_DATE) exists (counted as a
//! multiset: two identical acknowledged payments need two rows) (`engine::acks`, [`missing`];
//! what it found, as printed: [`render_missing`]). Other transaction types are not recorded. A
//! last line without its newline (the writer killed mid-line) is ignored.
//!
//! A cluster bench's record (`glass bench --config … --ack-log`, read by `glass check
//! --ack-log`): `neworder W D O_ID` lines ([`write_acks`], [`read_acks`]).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub use engine::acks::Ack;
use engine::acks::{NewOrderAck, PaymentAck};
use engine::conventional::Session;
use engine::procedures::{TxnInput, TxnOutput};
use workload::bench::BenchError;

use crate::error::HarnessError;
use crate::Result;

/// An acknowledgement's line in the record, newline included.
pub fn line(ack: &Ack) -> String {
    match *ack {
        Ack::NewOrder(NewOrderAck { w, d, o_id }) => format!("neworder {w} {d} {o_id}\n"),
        Ack::Payment(PaymentAck { w, d, c_w, c_d, c_id, amount, date }) => {
            format!("payment {w} {d} {c_w} {c_d} {c_id} {amount} {date}\n")
        }
    }
}

/// The acknowledgement a record's line (without its newline) names.
fn parse(line: &str) -> Option<Ack> {
    let mut f = line.split_ascii_whitespace();
    let kind = f.next()?;
    let mut next = || f.next().and_then(|v| v.parse::<i64>().ok());
    let ack = match kind {
        "neworder" => Ack::NewOrder(NewOrderAck {
            w: u16::try_from(next()?).ok()?,
            d: u8::try_from(next()?).ok()?,
            o_id: u32::try_from(next()?).ok()?,
        }),
        "payment" => Ack::Payment(PaymentAck {
            w: u16::try_from(next()?).ok()?,
            d: u8::try_from(next()?).ok()?,
            c_w: u16::try_from(next()?).ok()?,
            c_d: u8::try_from(next()?).ok()?,
            c_id: u32::try_from(next()?).ok()?,
            amount: next()?,
            date: next()?,
        }),
        _ => return None,
    };
    f.next().is_none().then_some(ack)
}

/// Reads a record of acknowledged commits (ignoring an unterminated last line).
pub fn read_ack_log(path: &Path) -> Result<Vec<Ack>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| HarnessError::io(format!("read --ack-log {}", path.display()), e))?;
    let complete = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    complete
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            parse(l).ok_or_else(|| HarnessError::NotAnAck {
                path: path.to_path_buf(),
                line: n + 1,
                text: l.to_string(),
            })
        })
        .collect()
}

/// The acknowledged transactions that are not in the database (`engine::acks::missing`), in
/// the record's order.
pub fn missing(s: &mut Session, acks: &[Ack]) -> Result<Vec<Ack>> {
    let new_orders = acks.iter().filter_map(|a| match a {
        Ack::NewOrder(a) => Some(a),
        Ack::Payment(_) => None,
    });
    let payments = acks.iter().filter_map(|a| match a {
        Ack::Payment(a) => Some(a),
        Ack::NewOrder(_) => None,
    });
    let gone = engine::acks::missing(s, new_orders, payments)?;
    let (mut orders, mut payments) = (gone.new_orders.into_iter().peekable(), gone.payments.into_iter().peekable());
    // Both lists keep the record's order: merge them back into it.
    Ok(acks
        .iter()
        .filter_map(|a| match a {
            Ack::NewOrder(o) if orders.peek() == Some(o) => orders.next().map(Ack::NewOrder),
            Ack::Payment(p) if payments.peek() == Some(p) => payments.next().map(Ack::Payment),
            _ => None,
        })
        .collect())
}

/// Missing acknowledged transactions [`render_missing`] lists.
pub const MISSING_SHOWN_MAX: usize = 10;

/// What the check of `acks` against the database found (`gone`: [`missing`]), as printed:
/// the acknowledged commits by type, how many are missing, and the first
/// [`MISSING_SHOWN_MAX`] of those.
pub fn render_missing(acks: &[Ack], gone: &[Ack]) -> String {
    let neworders = acks.iter().filter(|a| matches!(a, Ack::NewOrder { .. })).count();
    let mut s = format!(
        "\nacknowledged commits: {} ({neworders} NewOrder, {} Payment); missing: {}\n",
        acks.len(),
        acks.len() - neworders,
        gone.len()
    );
    for g in gone.iter().take(MISSING_SHOWN_MAX) {
        s.push_str("  missing: ");
        s.push_str(&line(g));
    }
    s
}

/// The record of acknowledged commits an embedded bench writes (`--ack-log`; format above).
pub struct AckLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl AckLog {
    pub fn create(path: &Path) -> Result<AckLog> {
        let file =
            File::create(path).map_err(|e| HarnessError::io(format!("create --ack-log {}", path.display()), e))?;
        Ok(AckLog { path: path.to_path_buf(), file: Mutex::new(file) })
    }

    /// Appends the transaction's line with one `write` (so it reaches the kernel, and
    /// survives the process being killed, before the worker goes on).
    pub fn acknowledge(&self, input: &TxnInput, output: &TxnOutput) -> Result<(), BenchError> {
        let Some(ack) = Ack::of(input, output) else { return Ok(()) };
        let line = line(&ack);
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(line.as_bytes())
            .and_then(|()| file.flush())
            .map_err(|e| BenchError::Output { path: self.path.clone(), why: e.to_string() })
    }
}

/// Reads the `neworder W D O_ID` lines of a cluster's acknowledgement record (other lines are skipped).
pub fn read_acks(path: &Path) -> Result<Vec<NewOrderAck>> {
    let text = std::fs::read_to_string(path).map_err(|e| HarnessError::io(format!("read {}", path.display()), e))?;
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
            _ => {
                return Err(HarnessError::AckRecord {
                    path: path.to_path_buf(),
                    line: i + 1,
                    why: "expected `neworder W D O_ID`",
                    text: line.to_string(),
                })
            }
        }
    }
    Ok(acks)
}

/// Writes a cluster's acknowledgement record (`neworder W D O_ID` lines).
pub fn write_acks(path: &Path, acks: &[NewOrderAck]) -> Result<()> {
    let mut text = String::with_capacity(acks.len() * 24);
    for a in acks {
        text.push_str(&a.to_string());
        text.push('\n');
    }
    workload::bench::write_atomic(path, text.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_lines_round_trip() {
        for ack in [
            Ack::NewOrder(NewOrderAck { w: 3, d: 10, o_id: 3001 }),
            Ack::Payment(PaymentAck { w: 1, d: 2, c_w: 4, c_d: 5, c_id: 2999, amount: 500_000, date: 1_213_056_777 }),
        ] {
            let text = line(&ack);
            assert!(text.ends_with('\n'));
            assert_eq!(parse(text.trim_end()), Some(ack));
        }
        assert_eq!(parse("neworder 1 2"), None);
        assert_eq!(parse("neworder 1 2 3 4"), None);
        assert_eq!(parse("delivery 1"), None);
    }
}
