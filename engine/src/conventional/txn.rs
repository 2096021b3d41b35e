//! The transaction manager: transaction ids, the transaction table, and the gate that lets a
//! checkpoint wait for a quiet moment (no transaction active) while holding new ones back.
//!
//! With full bookkeeping (the default), `begin` passes the gate, takes a global id and enters
//! the transaction in the latched transaction table; `end` removes it and leaves the gate.
//! With the transaction-management switch off, bookkeeping is trimmed to the minimum: an id
//! made from the session id and a session-local counter (unique, so locks and log records
//! stay well defined), no table and no gate (so checkpoints are unavailable).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::latch::{Latch, LatchMode};
use super::stats::Stats;

/// Bits of a trimmed transaction id that count transactions within a session.
const LOCAL_TXN_BITS: u32 = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxnState {
    Active,
}

#[derive(Default)]
struct Gate {
    active: usize,
    checkpointing: bool,
}

pub(crate) struct TxnManager {
    full: bool,
    next_id: AtomicU64,
    table: Latch<HashMap<u64, TxnState>>,
    gate: Mutex<Gate>,
    changed: Condvar,
}

/// Held by a checkpoint: no transaction is active and none can begin until it drops.
pub(crate) struct Quiesced<'a> {
    txns: &'a TxnManager,
}

impl Drop for Quiesced<'_> {
    fn drop(&mut self) {
        self.txns.lock_gate().checkpointing = false;
        self.txns.changed.notify_all();
    }
}

impl TxnManager {
    pub fn new(full: bool, latch: LatchMode, first_id: u64) -> TxnManager {
        TxnManager {
            full,
            next_id: AtomicU64::new(first_id.max(1)),
            table: Latch::new(HashMap::new(), latch),
            gate: Mutex::new(Gate::default()),
            changed: Condvar::new(),
        }
    }

    fn lock_gate(&self) -> MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a transaction; returns its id (also its wait-die priority: smaller is older).
    pub fn begin(&self, session: u64, local: u64, stats: &Stats) -> u64 {
        if !self.full {
            return (session << LOCAL_TXN_BITS) | (local & ((1 << LOCAL_TXN_BITS) - 1));
        }
        {
            let mut gate = self.lock_gate();
            while gate.checkpointing {
                gate = self.changed.wait(gate).unwrap_or_else(|e| e.into_inner());
            }
            gate.active += 1;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.table.write(stats).insert(id, TxnState::Active);
        id
    }

    /// Ends transaction `id` (committed or aborted).
    pub fn end(&self, id: u64, stats: &Stats) {
        if !self.full {
            return;
        }
        let state = self.table.write(stats).remove(&id);
        debug_assert_eq!(state, Some(TxnState::Active));
        let mut gate = self.lock_gate();
        gate.active -= 1;
        if gate.active == 0 {
            self.changed.notify_all();
        }
    }

    /// Waits until no transaction is active, holding new ones back until the guard drops.
    pub fn quiesce(&self) -> Quiesced<'_> {
        let mut gate = self.lock_gate();
        while gate.checkpointing {
            gate = self.changed.wait(gate).unwrap_or_else(|e| e.into_inner());
        }
        gate.checkpointing = true;
        while gate.active > 0 {
            gate = self.changed.wait(gate).unwrap_or_else(|e| e.into_inner());
        }
        Quiesced { txns: self }
    }
}
