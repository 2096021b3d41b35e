//! Executing the coordinator's stream: batches taken in sequence order, their transactions
//! run in timestamp order on the partition's storage, the pieces of multi-partition
//! transactions run and their outcomes exchanged, each finished batch's results (and a
//! primary's shipment) returned.
//!
//! Guarantees:
//! - batches execute in sequence order 1, 2, 3, … exactly once: a batch ahead of a missing one
//!   waits for it (at most `pending_batches_max` wait), a duplicate of an executed or waiting
//!   batch is dropped;
//! - every transaction runs through [`engine::procedures::execute`] with the coordinator's
//!   timestamp, in strictly increasing timestamp order (checked before a batch runs: a
//!   regression stops the replica); so replicas fed the same stream reach bit-identical states;
//! - an input outside TPC-C's domains (`engine::input::check_input`), or naming a warehouse
//!   this partition does not hold where it must (`engine::input::check_held`), is reported as
//!   failed (a remote piece: aborted), never run — it changes nothing;
//! - multi-partition transactions (`engine::distributed`, Calvin style): a *remote* piece runs
//!   at its timestamp without waiting and its outcome leaves at once as [`PieceReads`] for the
//!   home partition (not at the end of the batch: two partitions each waiting for the other's
//!   batch to end would wait forever); a *home* piece runs once the outcomes of all its remote
//!   pieces arrived, and aborts, changing nothing, if one of them aborted. Until then the
//!   batch is parked at that transaction — nothing after it runs — and the replica goes on
//!   taking messages. Since every partition executes in timestamp order and remote pieces
//!   never wait, the smallest waiting timestamp's remote pieces always run: no wait cycle.
//!   In `full-stack` the batch's single-partition transactions run first on the worker pool,
//!   then its pieces one at a time in timestamp order on the executor thread (a worker
//!   waiting for another node while holding locks could deadlock across nodes).

use std::collections::BTreeMap;

use engine::distributed::{execute_piece, touched, Piece};
use engine::input::{check_held, check_input, InputError};
use engine::procedures::{execute, TxnInput};
use engine::storage::Storage;
use wire::channel::NodeToCoordinator;
use wire::messages::{
    bounded_reason, Batch, BatchTxn, Part, PartitionId, PieceOutcome, PieceReads, Results, Seq, Shipment, ShippedLog,
    Timestamp, TxnOutcome, TxnResult, WarehouseId,
};

use super::{Emit, Parked, Recent, Replica, ReplicaRole, Store};
use crate::error::ReplicaError;

/// Remote pieces' outcomes a replica holds for home pieces it has not run yet, at most (one
/// per multi-partition transaction in flight; the coordinator bounds those).
pub const PIECE_READS_HELD_MAX: usize = 1 << 20;

impl Replica {
    /// Takes a batch; returns the results of every batch this made executable, in order
    /// (none when it must wait for an earlier batch or was a duplicate).
    pub fn on_batch(&mut self, batch: Batch) -> Result<Vec<Results>, ReplicaError> {
        let mut out = Vec::new();
        self.take_batch(batch, &mut out)?;
        Ok(out
            .into_iter()
            .filter_map(|m| match m {
                Emit::ToCoordinator(NodeToCoordinator::Results(r)) => Some(r),
                Emit::ToCoordinator(_) | Emit::Ship(_) => None,
            })
            .collect())
    }

    /// Takes a batch: executes it and every batch it made executable, in order, until one
    /// parks at a home piece; appends to `out`, in order, the pieces' outcomes as they run and
    /// each batch's shipment (a primary) and results. Nothing when it must wait for an earlier
    /// batch or was a duplicate.
    pub fn take_batch(&mut self, batch: Batch, out: &mut Vec<Emit>) -> Result<(), ReplicaError> {
        if self.role() == ReplicaRole::Backup {
            return Err(ReplicaError::Unexpected { what: "a batch (a backup applies its primary's log records)" });
        }
        if let Some(reason) = &self.stopped {
            return Err(ReplicaError::Stopped { reason: reason.clone() });
        }
        self.check_partition(batch.partition)?;
        let seq = batch.seq;
        if let Some(parked) = &self.parked {
            if seq == parked.batch.seq {
                if parked.batch != batch {
                    return Err(self.stop(ReplicaError::ConflictingDuplicate { seq }));
                }
                self.stats.duplicate_batches += 1;
                return Ok(());
            }
        }
        if seq < self.next_seq && self.answer_again.contains(&seq) {
            // A new leader sent again a batch executed before it took over: it has not seen
            // the results (docs/design.md §11).
            let kept = self.recent.iter().find(|r| r.batch.seq == seq).expect("answer_again only names kept batches");
            if kept.batch != batch {
                return Err(self.stop(ReplicaError::ConflictingDuplicate { seq }));
            }
            let results = kept.results.clone();
            self.answer_again.remove(&seq);
            out.push(Emit::ToCoordinator(NodeToCoordinator::Results(results)));
            return Ok(());
        }
        let Some(batch) = self.in_order(seq, batch, |r| &mut r.waiting)? else { return Ok(()) };
        self.start(batch)?;
        self.advance(out)
    }

    /// A remote piece's outcome for one of this partition's home pieces: held until the piece
    /// runs (a duplicate, or one for a transaction already run, is dropped), and the parked
    /// batch goes on if it was waiting for it.
    pub fn on_piece_reads(&mut self, reads: PieceReads, out: &mut Vec<Emit>) -> Result<(), ReplicaError> {
        self.check_partition(reads.home)?;
        if self.stopped.is_some() || self.role() == ReplicaRole::Backup {
            return Ok(());
        }
        let passed = match &self.parked {
            Some(p) => p.order.get(p.pos).is_none_or(|&i| p.batch.txns[i].ts > reads.ts),
            None => self.last_ts.is_some_and(|l| reads.ts <= l),
        };
        if passed {
            return Ok(());
        }
        if self.piece_reads.len() >= PIECE_READS_HELD_MAX && !self.piece_reads.contains_key(&reads.ts) {
            let why = format!("more than {PIECE_READS_HELD_MAX} multi-partition transactions' piece outcomes held");
            return Err(self.stop(ReplicaError::Stopped { reason: why }));
        }
        let held = self.piece_reads.entry(reads.ts).or_default();
        if held.iter().all(|(from, _)| *from != reads.from) {
            held.push((reads.from, reads.outcome));
        }
        if self.parked.is_some() {
            self.advance(out)?;
        }
        Ok(())
    }

    /// The coordinator lost a remote piece's outcome (every replica that ran batch `seq`
    /// failed before it arrived): derived again from this replica's state if that state
    /// includes the batch ([`engine::distributed::rederive_reads`]); `None` if this replica
    /// will run the batch itself (and send the outcome then), or cannot execute.
    pub fn rederive_piece(
        &mut self,
        home: PartitionId,
        seq: Seq,
        ts: Timestamp,
        input: &TxnInput,
    ) -> Option<PieceReads> {
        // A piece that ran in the batch under way (parked at a later home piece) counts: its
        // outcome went out when it ran, and may have been lost with a coordinator.
        let ran_in_parked = self
            .parked
            .as_ref()
            .is_some_and(|p| p.batch.seq == seq && p.order[..p.pos].iter().any(|&i| p.batch.txns[i].ts == ts));
        if self.stopped.is_some() || self.role() == ReplicaRole::Backup || (self.applied_seq() < seq && !ran_in_parked)
        {
            return None;
        }
        self.derive_reads(home, ts, input)
    }

    /// A remote piece's outcome derived from the current state, which includes the piece's
    /// effects ([`engine::distributed::rederive_reads`]); `None` if the replica stopped.
    fn derive_reads(&mut self, home: PartitionId, ts: Timestamp, input: &TxnInput) -> Option<PieceReads> {
        let t = BatchTxn { ts, input: *input, part: Part::Remote { home }, id: wire::messages::RequestId::NONE };
        let result = match &mut self.db {
            Store::Lean(db) => rederive(db, &t),
            Store::Full(f) => {
                let reads = rederive(f.session(), &t);
                // What it logged (its writes rolled back) goes out with the next shipment.
                match f.take_log() {
                    Ok(records) => self.unshipped_log.extend_from_slice(&records),
                    Err(e) => {
                        self.stop(e);
                        return None;
                    }
                }
                reads
            }
        };
        let outcome = match result {
            Ok(reads) => PieceOutcome::Reads(reads),
            Err(e) => PieceOutcome::Aborted { reason: bounded_reason(e.to_string()) },
        };
        Some(PieceReads { home, from: self.partition, ts, outcome })
    }

    /// Checks batch `next_seq`'s timestamps follow those executed, runs its single-partition
    /// transactions on the worker pool in `full-stack`, and parks it ready to run the rest.
    pub(super) fn start(&mut self, batch: Batch) -> Result<(), ReplicaError> {
        assert_eq!(batch.seq, self.next_seq, "a batch starts only as the next one");
        assert!(self.parked.is_none(), "one batch under way at a time");
        let mut last = self.last_ts;
        for t in &batch.txns {
            if let Some(l) = last.filter(|l| t.ts <= *l) {
                return Err(self.stop(ReplicaError::TimestampRegression { seq: batch.seq, ts: t.ts, last: l }));
            }
            last = Some(t.ts);
        }
        // Timestamps only grow: what restart recovery found committed before this batch's
        // first can no longer be replayed.
        if let Some(first) = batch.txns.first().filter(|_| !self.committed_before_restart.is_empty()) {
            self.committed_before_restart = self.committed_before_restart.split_off(&first.ts);
        }
        let mut outcomes = vec![None; batch.txns.len()];
        let order: Vec<usize> = match &mut self.db {
            Store::Lean(_) => (0..batch.txns.len()).collect(),
            Store::Full(f) => {
                let skip = &self.committed_before_restart;
                let whole: Vec<BatchTxn> =
                    batch.txns.iter().filter(|t| t.part == Part::Whole && !skip.contains(&t.ts)).copied().collect();
                let mut done = f.execute(&whole).into_iter();
                let mut pieces = Vec::new();
                for (i, t) in batch.txns.iter().enumerate() {
                    if t.part != Part::Whole {
                        pieces.push(i);
                    } else if skip.contains(&t.ts) {
                        outcomes[i] = Some(committed_before_restart());
                    } else {
                        outcomes[i] = done.next();
                    }
                }
                pieces
            }
        };
        self.parked =
            Some(Parked { batch, order, pos: 0, outcomes, last_ts: last, parked_at_pos: None, used_reads: Vec::new() });
        Ok(())
    }

    /// Runs the parked batch on from where it stopped, then every batch waiting behind it,
    /// until one parks at a home piece or none is left.
    pub(super) fn advance(&mut self, out: &mut Vec<Emit>) -> Result<(), ReplicaError> {
        loop {
            let Some(mut p) = self.parked.take() else { return Ok(()) };
            while let Some(&i) = p.order.get(p.pos) {
                let t = p.batch.txns[i];
                let outcome = match t.part {
                    // A replayed piece that took effect before the failure (docs/design.md
                    // §10): a home piece is not run again; a remote piece's reads are derived
                    // again from the state, for a home piece that may still wait for them.
                    Part::Home { .. } if self.committed_before_restart.contains(&t.ts) => committed_before_restart(),
                    Part::Remote { home } if self.committed_before_restart.contains(&t.ts) => {
                        let reads = self.derive_reads(home, t.ts, &t.input);
                        out.extend(reads.map(|r| Emit::ToCoordinator(NodeToCoordinator::PieceReads(r))));
                        committed_before_restart()
                    }
                    Part::Whole => self.run_whole(&t),
                    Part::Remote { home } => {
                        let outcome = self.run_remote_piece(&t);
                        out.push(Emit::ToCoordinator(NodeToCoordinator::PieceReads(PieceReads {
                            home,
                            from: self.partition,
                            ts: t.ts,
                            outcome: outcome.clone(),
                        })));
                        outcome.txn_outcome()
                    }
                    Part::Home { remotes } => {
                        let arrived = self.piece_reads.get(&t.ts).map_or(0, Vec::len);
                        if arrived < usize::from(remotes) {
                            if p.parked_at_pos != Some(p.pos) {
                                p.parked_at_pos = Some(p.pos);
                                self.stats.parks += 1;
                            }
                            self.parked = Some(p);
                            return Ok(());
                        }
                        // Outcomes of earlier timestamps can no longer be used.
                        let mut later = self.piece_reads.split_off(&t.ts);
                        let reads = later.remove(&t.ts).unwrap_or_default();
                        self.piece_reads = later;
                        let home = self.partition;
                        p.used_reads.extend(reads.iter().map(|(from, outcome)| PieceReads {
                            home,
                            from: *from,
                            ts: t.ts,
                            outcome: outcome.clone(),
                        }));
                        self.run_home_piece(&t, reads)
                    }
                };
                p.outcomes[i] = Some(outcome);
                p.pos += 1;
            }
            let digest_after = p.batch.digest_after;
            let answered_here = p.batch.answered_by(self.node);
            let (results, shipment) = self.finish(p)?;
            let seq = results.seq;
            out.extend(shipment.map(Emit::Ship));
            // Another replica sends the outputs; this one their digest, keeping them in
            // `recent` should the coordinator ask (docs/design.md §10, "One replica answers").
            let report = match answered_here {
                true => NodeToCoordinator::Results(results),
                false => NodeToCoordinator::ResultsDigest(results.digest()),
            };
            out.push(Emit::ToCoordinator(report));
            self.answer_recalls(out);
            if digest_after {
                if let Some(digest) = self.begin_digest(seq) {
                    let partition = self.partition;
                    out.push(Emit::ToCoordinator(NodeToCoordinator::StateDigest {
                        partition,
                        seq,
                        digest: Ok(digest),
                    }));
                }
            }
            let applied = self.applied_seq();
            if let Some(e) = self.role.executing_mut().filter(|e| e.ship_after.is_some_and(|s| s <= applied)) {
                e.ship_after = None;
                self.ship_from_now_on()?;
            }
            if !self.chains_waiting() {
                // Held batches run one at a time (`take_over`).
                return Ok(());
            }
            let Some(next) = self.waiting.remove(&self.next_seq) else { return Ok(()) };
            self.start(next)?;
        }
    }

    /// A single-partition transaction, whole (the lean kernel; the worker pool runs them in
    /// `full-stack`).
    fn run_whole(&mut self, t: &BatchTxn) -> TxnOutcome {
        if let Err(problem) = self.check(&t.input, Part::Whole) {
            return TxnOutcome::Failed { reason: bounded_reason(problem.to_string()) };
        }
        match &mut self.db {
            Store::Lean(db) => TxnOutcome::from_result(execute(db, t.ts.0, &t.input)),
            Store::Full(f) => TxnOutcome::from_result(execute(f.session(), t.ts.0, &t.input)),
        }
    }

    /// A remote piece: its reads, or why it changed nothing.
    fn run_remote_piece(&mut self, t: &BatchTxn) -> PieceOutcome {
        if let Err(problem) = self.check(&t.input, t.part) {
            return PieceOutcome::Aborted { reason: bounded_reason(problem.to_string()) };
        }
        let result = match &mut self.db {
            Store::Lean(db) => run_piece(db, t, None),
            Store::Full(f) => run_piece(f.session(), t, None),
        };
        match result {
            Ok(Piece::Reads(reads)) => {
                self.stats.pieces_committed += 1;
                PieceOutcome::Reads(reads)
            }
            Ok(Piece::Output(_)) => PieceOutcome::Aborted { reason: "a remote piece produced an output".into() },
            Err(e) => PieceOutcome::Aborted { reason: bounded_reason(e.to_string()) },
        }
    }

    /// A home piece, given every remote piece's outcome: aborts, changing nothing, if one of
    /// them aborted; runs with their reads otherwise.
    fn run_home_piece(&mut self, t: &BatchTxn, reads: Vec<(PartitionId, PieceOutcome)>) -> TxnOutcome {
        if let Err(problem) = self.check(&t.input, t.part) {
            return TxnOutcome::Failed { reason: bounded_reason(problem.to_string()) };
        }
        let mut remote = Vec::with_capacity(reads.len());
        for (from, outcome) in reads {
            match outcome {
                PieceOutcome::Reads(r) => remote.push(r),
                PieceOutcome::Aborted { reason } => {
                    return TxnOutcome::Aborted {
                        reason: bounded_reason(format!("partition {from}'s piece rolled back: {reason}")),
                    }
                }
            }
        }
        let result = match &mut self.db {
            Store::Lean(db) => run_piece(db, t, Some(&remote)),
            Store::Full(f) => run_piece(f.session(), t, Some(&remote)),
        };
        match result {
            Ok(Piece::Output(output)) => TxnOutcome::Committed(output),
            Ok(Piece::Reads(_)) => TxnOutcome::Failed { reason: "a home piece produced reads".into() },
            Err(e) => TxnOutcome::from_result(Err(e)),
        }
    }

    /// The ordering rule batches and shipments share: `item` numbered `seq` is returned when it
    /// is the next to run (unless batches are held for a take-over: `take_over`); a duplicate
    /// of one run or held is dropped; one ahead of a gap is held in `held(self)` (at most
    /// `pending_batches_max` ahead); a different item under a number already held stops the
    /// replica.
    pub(super) fn in_order<T: PartialEq>(
        &mut self,
        seq: Seq,
        item: T,
        held: impl Fn(&mut Self) -> &mut BTreeMap<Seq, T>,
    ) -> Result<Option<T>, ReplicaError> {
        if seq < self.next_seq {
            self.stats.duplicate_batches += 1;
            return Ok(None);
        }
        if seq - self.next_seq >= self.pending_batches_max as u64 {
            return Err(ReplicaError::TooFarAhead {
                seq,
                next_seq: self.next_seq,
                pending_batches_max: self.pending_batches_max,
            });
        }
        // A held copy of this number (the next one included, while held batches are run a
        // turn at a time: `take_over`).
        let runs_now = seq == self.next_seq && !self.holding();
        match held(self).get(&seq) {
            Some(h) if *h == item => self.stats.duplicate_batches += 1,
            Some(_) => return Err(self.stop(ReplicaError::ConflictingDuplicate { seq })),
            None if runs_now => return Ok(Some(item)),
            None => {
                match self.holding() {
                    true => self.stats.batches_held_for_take_over += 1,
                    false => self.stats.batches_waited += 1,
                }
                held(self).insert(seq, item);
            }
        }
        Ok(None)
    }

    /// The outputs of executed batch `seq` in full, as the coordinator asks for them when the
    /// replica named to send them failed ([`wire::channel::CoordinatorToNode::SendResults`]);
    /// or that they are no longer kept.
    pub(super) fn kept_results(&self, seq: Seq) -> NodeToCoordinator {
        match self.kept_outputs(seq) {
            Some(results) => NodeToCoordinator::Results(results.clone()),
            None => NodeToCoordinator::ResultsForgotten { partition: self.partition, seq },
        }
    }

    /// The outputs of executed batch `seq`, while this replica keeps them (its recent batches).
    pub fn kept_outputs(&self, seq: Seq) -> Option<&Results> {
        self.recent.iter().find(|r| r.batch.seq == seq).map(|r| &r.results)
    }

    /// Runs a read-only transaction against the current state (a replica read); anything else
    /// fails without running.
    pub fn read(&mut self, input: &TxnInput) -> TxnOutcome {
        if !matches!(input, TxnInput::OrderStatus(_) | TxnInput::StockLevel(_)) {
            return TxnOutcome::Failed { reason: "replica reads run OrderStatus and StockLevel only".into() };
        }
        if let Err(problem) = self.check(input, Part::Whole) {
            return TxnOutcome::Failed { reason: bounded_reason(problem.to_string()) };
        }
        let ts = self.last_ts.map_or(0, |t| t.0);
        match &mut self.db {
            Store::Lean(db) => TxnOutcome::from_result(execute(db, ts, input)),
            Store::Full(f) => TxnOutcome::from_result(execute(f.session(), ts, input)),
        }
    }

    /// Whether this replica may run `part` of `input`: the input lies within TPC-C's domains
    /// and the warehouses `part` runs on are this partition's (those with a WAREHOUSE row here).
    fn check(&mut self, input: &TxnInput, part: Part) -> Result<(), InputError> {
        check_input(input)?;
        match &mut self.db {
            Store::Lean(db) => check_held(input, part.kind(), |w| holds_warehouse(db, w)),
            Store::Full(f) => check_held(input, part.kind(), |w| holds_warehouse(f.session(), w)),
        }
    }

    /// Batch `next_seq` ran to its end: counts, results, the state digest if asked, and a
    /// primary's shipment.
    fn finish(&mut self, p: Parked) -> Result<(Results, Option<Shipment>), ReplicaError> {
        let batch = p.batch;
        // Boundary assertions (docs/design.md §4): batches finish in sequence, every
        // transaction answered, timestamps never going back.
        assert_eq!(batch.seq, self.next_seq, "a batch finishes only as the next one");
        assert_eq!(p.outcomes.len(), batch.txns.len(), "one outcome per transaction");
        assert!(p.last_ts >= self.last_ts, "timestamps never go back");
        let mut results = Vec::with_capacity(batch.txns.len());
        for (t, outcome) in batch.txns.iter().zip(p.outcomes) {
            let outcome = outcome.expect("every transaction of a finished batch ran");
            match outcome {
                TxnOutcome::Committed(_) => self.stats.txns_committed += 1,
                TxnOutcome::Aborted { .. } => self.stats.txns_aborted += 1,
                TxnOutcome::Failed { .. } => self.stats.txns_failed += 1,
                TxnOutcome::PieceDone { .. } => {}
            }
            results.push(TxnResult { ts: t.ts, digest: outcome.digest(), outcome });
        }
        self.last_ts = p.last_ts;
        self.next_seq += 1;
        self.stats.batches_executed += 1;
        let seq = batch.seq;
        let shipment = if self.role() == ReplicaRole::Primary {
            let log = match &mut self.db {
                Store::Lean(db) => ShippedLog::Redo(db.take_redo()),
                Store::Full(f) => match f.take_log() {
                    Ok(records) => {
                        let mut all = std::mem::take(&mut self.unshipped_log);
                        all.extend_from_slice(&records);
                        ShippedLog::Wal(all)
                    }
                    Err(e) => return Err(self.stop(e)),
                },
            };
            let pieces = batch.txns.iter().filter(|t| t.part != Part::Whole).cloned().collect();
            let answers = super::recall::answers_of(&batch, &results);
            let (partition, primary, last_ts) = (self.partition, self.node, self.last_ts);
            Some(Shipment { partition, primary, seq, last_ts, pieces, log, answers })
        } else {
            None
        };
        let results = Results { partition: self.partition, seq, results };
        while self.recent.len() >= self.recent_kept_max() {
            let forgotten = self.recent.pop_front().expect("full");
            self.answer_again.remove(&forgotten.batch.seq);
            self.remembers_since_load = false;
            // A promoted backup's shipped outcomes are older still: what lies between them
            // and the kept batches is forgotten with them.
            self.shipped_answers.clear();
        }
        self.recent.push_back(Recent { batch, results: results.clone(), used_reads: p.used_reads });
        Ok((results, shipment))
    }
}

/// Runs one piece of transaction `t` on `db` (`engine::distributed::execute_piece`): the
/// warehouses this partition holds are those of the transaction found in WAREHOUSE here.
fn run_piece<S: Storage>(
    db: &mut S,
    t: &BatchTxn,
    remote: Option<&[engine::distributed::RemoteReads]>,
) -> Result<Piece, engine::TxnError> {
    let local = local_warehouses(db, t);
    execute_piece(db, t.ts.0, &t.input, &|w| local.contains(&w), remote)
}

/// [`engine::distributed::rederive_reads`] of transaction `t` on `db`.
fn rederive<S: Storage>(db: &mut S, t: &BatchTxn) -> Result<engine::distributed::RemoteReads, engine::TxnError> {
    let local = local_warehouses(db, t);
    engine::distributed::rederive_reads(db, t.ts.0, &t.input, &|w| local.contains(&w))
}

/// Whether `db` holds warehouse `w` (its WAREHOUSE row is here).
pub(crate) fn holds_warehouse<S: Storage>(db: &mut S, w: WarehouseId) -> bool {
    db.get::<engine::schema::t::Warehouses, _>(engine::schema::keys::warehouse(w), |_| ()).is_ok_and(|r| r.is_some())
}

/// The warehouses of transaction `t` this partition holds (those found in its WAREHOUSE).
fn local_warehouses<S: Storage>(db: &mut S, t: &BatchTxn) -> Vec<u16> {
    let mut local = touched(&t.input);
    local.retain(|&w| {
        db.get::<engine::schema::t::Warehouses, _>(engine::schema::keys::warehouse(w), |_| ())
            .is_ok_and(|r| r.is_some())
    });
    local
}

/// The outcome of a replayed transaction that restart recovery found committed: not run
/// again (docs/design.md §10). Its client was answered "outcome unknown" when the partition's
/// last replica failed; the coordinator expects no answer for a replayed batch.
pub fn committed_before_restart() -> TxnOutcome {
    TxnOutcome::Failed { reason: "committed before the restart (restart recovery kept it); not run again".into() }
}
