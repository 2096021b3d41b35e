//! The checkers run on a healed, drained cluster ([`crate::run`]); each returns what it
//! verified, or why the run failed.
//!
//! What they assert (issue 6; the paper's Section 5.3):
//! - [`every_request_answered_once`]: each client request got exactly one answer —
//!   committed, aborted, failed, busy, rejected or outcome-unknown all count;
//! - [`no_alarms`]: no divergence, no stopped or unavailable partition;
//! - [`replicas_converged`]: every configured replica of each partition is a live replica
//!   again, the coordinator's ordered digest shows them all after the same batch with equal
//!   digests (the passive modes: the primary's), and each replica, asked directly, is at that
//!   batch (and, under `debug_assertions` — always for the passive modes' backups — has that
//!   digest);
//! - [`acknowledged_present`]: every acknowledged NewOrder's ORDER row and every acknowledged
//!   Payment's HISTORY row (one per acknowledgement) are in the final state — the same
//!   lookups `workload::client::check` makes on a real cluster, through the same `engine::acks`;
//! - [`consistency`]: the TPC-C consistency conditions (clause 3.3.2, `engine::check`) over
//!   the final state of every partition;
//! - [`stock_agrees_with_order_lines`]: every STOCK row's S_YTD, S_ORDER_CNT and S_REMOTE_CNT
//!   moved by exactly what the ORDER_LINE rows it supplied account for, whichever partition
//!   holds them — a NewOrder whose supplying warehouse's piece committed without its home
//!   piece, or the reverse (half applied), breaks it. TPC-C has no such condition (stock is
//!   in no consistency condition), so the baseline is the loaded population's.

use engine::acks::{Ack, NewOrderAck, PaymentAck};
use engine::check::StockDifference;
use wire::messages::{ClientResult, DigestOutcome, PartitionId, Seq, StateDigest};

use crate::cluster::Sim;
use crate::error::SimError;

/// Every request was answered, and exactly once.
pub fn every_request_answered_once(sim: &Sim) -> Result<(), SimError> {
    let requests = sim.inputs().len();
    if sim.answers().len() != requests {
        let unanswered: Vec<u64> =
            (0..requests as u64).filter(|id| !sim.answers().keys().any(|(_, r)| r == id)).take(5).collect();
        return Err(SimError::Unanswered { answered: sim.answers().len(), requests, unanswered });
    }
    if let Some(((client, id), (result, n))) = sim.answers().iter().find(|(_, (_, n))| *n != 1) {
        return Err(SimError::AnsweredTwice { client: *client, id: *id, times: *n, last: result.clone() });
    }
    Ok(())
}

/// No divergence, stop, unavailability or load failure was reported, and the simulated
/// processes saw no protocol violation.
pub fn no_alarms(sim: &Sim) -> Result<(), SimError> {
    use coordinator::Event;
    if let Some(v) = sim.violations().first() {
        return Err(SimError::Violations { count: sim.violations().len(), first: v.clone() });
    }
    // The full stack may lose every executing replica of a partition and come back from the
    // last primary's log (docs/design.md §10): an unavailability it recovered from is its
    // design, not an alarm.
    let events = sim.events();
    let recovered_later = |i: usize, partition: PartitionId| {
        sim.mode().replica_keeps_own_log()
            && events[i..].iter().any(|e| matches!(e, Event::RecoveredFromLog { partition: p, .. } if *p == partition))
    };
    let bad = events.iter().enumerate().find(|&(i, e)| match e {
        Event::PartitionUnavailable { partition } => !recovered_later(i, *partition),
        Event::Diverged(_) | Event::PartitionStopped { .. } | Event::LoadFailed { .. } => true,
        _ => false,
    });
    let bad = bad.map(|(_, e)| e);
    match bad {
        Some(e) => Err(SimError::Alarm(e.clone())),
        None => Ok(()),
    }
}

/// Every replica of every partition is live and all are at the same batch with equal
/// digests; returns (partition, batch, digest) for each.
pub fn replicas_converged(sim: &mut Sim) -> Result<Vec<(PartitionId, Seq, StateDigest)>, SimError> {
    let partitions: Vec<(PartitionId, Vec<wire::messages::NodeId>)> =
        sim.config().partitions.iter().map(|p| (p.id, p.replicas.clone())).collect();
    let mut out = Vec::new();
    for (partition, replicas) in partitions {
        let outcome = sim.digests(partition)?;
        let DigestOutcome::Digests { seq, digests } = &outcome else {
            return Err(SimError::NoDigests { partition, outcome: outcome.clone() });
        };
        let mut nodes: Vec<_> = digests.iter().map(|(n, _)| *n).collect();
        nodes.sort_unstable();
        let mut expected = replicas.clone();
        expected.sort_unstable();
        // In the passive modes only the primary executes the digest batch: the backups'
        // digests are compared directly below, after they applied its shipment.
        let passive = !sim.mode().every_replica_executes();
        if passive && nodes.len() != 1 || !passive && nodes != expected {
            return Err(SimError::MissingReplicas { partition, nodes, expected });
        }
        if !outcome.agreed() {
            return Err(SimError::Diverged { partition, seq: *seq, digests: digests.clone() });
        }
        let digest = digests[0].1;
        for node in replicas {
            let r = sim.replica_mut(node, partition).ok_or(SimError::NotServing { partition, node })?;
            // The digest again, directly: nothing ran after the digest batch (a costly
            // check, so under `debug_assertions` only, except for the passive modes' backups,
            // whose digest nothing else checks; the batch is checked always).
            let direct = if cfg!(debug_assertions) || passive { r.state_digest() } else { digest };
            if r.applied_seq() != *seq || direct != digest {
                return Err(SimError::ReplicaElsewhere {
                    partition,
                    node,
                    at: r.applied_seq(),
                    digest: r.state_digest(),
                    seq: *seq,
                    reported: digest,
                });
            }
        }
        out.push((partition, *seq, digest));
    }
    Ok(out)
}

/// The acknowledged (committed and answered) NewOrders, each with its customer and entry
/// date (which name its order whatever number it was given), and Payments (`engine::acks`).
pub fn acknowledgements(sim: &Sim) -> (Vec<(NewOrderAck, u32, i64)>, Vec<PaymentAck>) {
    let (mut orders, mut payments) = (Vec::new(), Vec::new());
    for (&(_, id), (result, _)) in sim.answers() {
        let ClientResult::Committed { output, .. } = result else { continue };
        let input = &sim.inputs()[id as usize];
        match (input, Ack::of(input, output)) {
            (engine::procedures::TxnInput::NewOrder(i), Some(Ack::NewOrder(a))) => orders.push((a, i.c_id, i.entry_d)),
            (_, Some(Ack::Payment(a))) => payments.push(a),
            _ => {}
        }
    }
    (orders, payments)
}

/// Every acknowledged NewOrder's ORDER row — under the number its client was given, for the
/// customer and entry date it was given for — and every acknowledged Payment's HISTORY row is
/// in the final state of its home warehouse's partition (checked on each replica's first
/// node; [`replicas_converged`] showed the others equal). Returns the number checked.
pub fn acknowledged_present(sim: &mut Sim) -> Result<Acked, SimError> {
    let (orders, payments) = acknowledgements(sim);
    let partitions: Vec<(PartitionId, wire::config::WarehouseRange, wire::messages::NodeId)> =
        sim.config().partitions.iter().map(|p| (p.id, p.warehouses, p.replicas[0])).collect();
    let mut acked = Acked::default();
    let ts_of = acknowledged_timestamps(sim);
    let asynchronous = sim.config().replication.answers_may_outrun_backups();
    for (partition, warehouses, node) in partitions {
        let mut copy = None;
        let db = state(sim, node, partition, &mut copy)?;
        let storage = |source| SimError::Storage { partition, node, source };
        let mine_orders: Vec<&(NewOrderAck, u32, i64)> =
            orders.iter().filter(|(a, _, _)| warehouses.contains(a.w)).collect();
        let mine_payments: Vec<&PaymentAck> = payments.iter().filter(|a| warehouses.contains(a.w)).collect();
        acked.checked += (mine_orders.len() + mine_payments.len()) as u64;
        // By identity, not by number alone: an order renumbered onto a number another client
        // was given must not pass for that client's order.
        let mut gone_orders = Vec::new();
        for &&(ack, c_id, entry_d) in &mine_orders {
            let key = engine::schema::keys::order(ack.w, ack.d, ack.o_id);
            let row =
                engine::storage::Storage::get::<engine::schema::t::Orders, _>(db, key, |o| (o.o_c_id, o.o_entry_d))
                    .map_err(storage)?;
            if row != Some((c_id, entry_d)) {
                gone_orders.push((ack, c_id, entry_d));
            }
        }
        let gone = engine::acks::missing(db, [], mine_payments).map_err(storage)?;
        // The orders by customer and entry date (looked up only if some are missing).
        let mut orders_by_identity: std::collections::BTreeSet<(u16, u8, u32, i64)> = Default::default();
        if asynchronous && !gone_orders.is_empty() {
            engine::storage::Storage::for_each::<engine::schema::t::Orders>(db, |o| {
                orders_by_identity.insert((o.o_w_id, o.o_d_id, o.o_c_id, o.o_entry_d));
            });
        }
        // Async shipping: a transaction the failed primary answered and the promoted backup
        // had not applied is lost by design — allowed, and counted, only if its batch lies in
        // such a promotion's window.
        let any_ts = |key: Ack, f: fn(&Sim, PartitionId, wire::messages::Timestamp) -> bool| {
            asynchronous && ts_of.get(&key).is_some_and(|ts| ts.iter().any(|&ts| f(sim, partition, ts)))
        };
        let lost = |key: Ack| any_ts(key, Sim::lost_in_failover);
        // Async shipping: a transaction a later leader sent again after its first execution
        // lay in such a window runs again from a state that lost the window's earlier
        // batches, so its answer's numbers may differ from the ones its client was given
        // (a NewOrder's order number: an earlier NewOrder of its district was lost). It
        // counts as found if its order is there under another number — the same customer,
        // the same entry date.
        let renumbered = |key: Ack| any_ts(key, Sim::renumbered_in_failover);
        for (ack, c_id, entry_d) in gone_orders {
            if lost(Ack::NewOrder(ack)) {
                acked.lost_async += 1;
                continue;
            }
            let found_renumbered =
                renumbered(Ack::NewOrder(ack)) && orders_by_identity.contains(&(ack.w, ack.d, c_id, entry_d));
            if !found_renumbered {
                return Err(SimError::NewOrderMissing { ack, partition });
            }
            acked.renumbered_async += 1;
        }
        for &ack in &gone.payments {
            if !lost(Ack::Payment(ack)) {
                return Err(SimError::PaymentMissing { ack, partition });
            }
            acked.lost_async += 1;
        }
    }
    Ok(acked)
}

/// What [`acknowledged_present`] verified.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Acked {
    /// Acknowledged NewOrders and Payments looked up.
    pub checked: u64,
    /// Of those, lost in an async-shipping failover (batches the promoted backup never
    /// applied): always 0 unless `shipping = "async"`.
    pub lost_async: u64,
    /// Of those, NewOrders found under another order number: sent again after an
    /// async-shipping failover lost an earlier NewOrder of their district (always 0 unless
    /// `shipping = "async"`).
    pub renumbered_async: u64,
}

/// The timestamps each acknowledgement was committed at (the same NewOrder or Payment may be
/// acknowledged more than once — a payment of the same amount on the same day).
fn acknowledged_timestamps(sim: &Sim) -> std::collections::BTreeMap<Ack, Vec<wire::messages::Timestamp>> {
    let mut out: std::collections::BTreeMap<Ack, Vec<wire::messages::Timestamp>> = Default::default();
    for (&(_, id), (result, _)) in sim.answers() {
        let ClientResult::Committed { output, ts } = result else { continue };
        if let Some(ack) = Ack::of(&sim.inputs()[id as usize], output) {
            out.entry(ack).or_default().push(*ts);
        }
    }
    out
}

/// The state of `partition`'s replica on `node`, as a lean database: its own (the lean
/// kernel), or a copy taken through the snapshot stream into `copy` (the conventional stack).
fn state<'a>(
    sim: &'a mut Sim,
    node: wire::messages::NodeId,
    partition: PartitionId,
    copy: &'a mut Option<engine::LeanDb>,
) -> Result<&'a mut engine::LeanDb, SimError> {
    if sim.db_mut(node, partition).is_none() {
        *copy = Some(sim.copy_db(node, partition).ok_or(SimError::NotServing { partition, node })?);
        return Ok(copy.as_mut().expect("just set"));
    }
    sim.db_mut(node, partition).ok_or(SimError::NotServing { partition, node })
}

/// No transaction ran twice, read from the data (docs/design.md §11, "Exactly-once
/// answers"): in every district, the ORDER rows and the HISTORY rows the run added are no
/// more than the NewOrders and Payments of that district answered "committed", plus those
/// whose outcome stayed unknown. A request asked again after a failure that ran a second
/// time adds a row no answer accounts for. Returns the districts checked.
pub fn executed_at_most_once(sim: &mut Sim) -> Result<u64, SimError> {
    use engine::procedures::TxnInput;
    use std::collections::BTreeMap;
    // (table, warehouse, district) → (answered committed, unknown)
    let mut answered: BTreeMap<(&'static str, u16, u8), (u64, u64)> = BTreeMap::new();
    for (&(_, id), (result, _)) in sim.answers() {
        let key = match &sim.inputs()[id as usize] {
            TxnInput::NewOrder(i) => ("orders", i.w_id, i.d_id),
            TxnInput::Payment(i) => ("history", i.w_id, i.d_id),
            _ => continue,
        };
        let e = answered.entry(key).or_default();
        if matches!(result, ClientResult::Committed { .. }) {
            e.0 += 1;
        } else if crate::run::is_outcome_unknown(result) {
            e.1 += 1;
        }
    }
    let seed = sim.config().seed;
    let partitions: Vec<(wire::config::PartitionConfig, wire::messages::NodeId)> =
        sim.config().partitions.iter().map(|p| (p.clone(), p.replicas[0])).collect();
    let mut districts = 0;
    for (p, node) in partitions {
        let count = |db: &mut engine::LeanDb| {
            let mut rows: BTreeMap<(&'static str, u16, u8), u64> = BTreeMap::new();
            engine::storage::Storage::for_each::<engine::schema::t::Orders>(db, |o| {
                *rows.entry(("orders", o.o_w_id, o.o_d_id)).or_default() += 1;
            });
            engine::storage::Storage::for_each::<engine::schema::t::Histories>(db, |h| {
                *rows.entry(("history", h.h_w_id, h.h_d_id)).or_default() += 1;
            });
            rows
        };
        let loaded = count(&mut crate::population::partition_db(&p, seed).0);
        let mut copy = None;
        let now = count(state(sim, node, p.id, &mut copy)?);
        for (&key @ (table, w, d), &rows) in &now {
            let added = rows - loaded.get(&key).copied().unwrap_or(0).min(rows);
            let (committed, unknown) = answered.get(&key).copied().unwrap_or_default();
            districts += 1;
            if added > committed + unknown {
                return Err(SimError::RanTwice { table, w, d, added, committed, unknown });
            }
        }
    }
    Ok(districts / 2)
}

/// The TPC-C consistency conditions over every partition's final state (its first replica).
pub fn consistency(sim: &mut Sim) -> Result<(), SimError> {
    let partitions: Vec<(PartitionId, wire::messages::NodeId)> =
        sim.config().partitions.iter().map(|p| (p.id, p.replicas[0])).collect();
    let mut checker = engine::check::Checker::new();
    for (partition, node) in partitions {
        let mut copy = None;
        checker.add(state(sim, node, partition, &mut copy)?);
    }
    let report = checker.finish();
    if report.all_passed() {
        Ok(())
    } else {
        Err(SimError::Inconsistent { report })
    }
}

pub use engine::check::{add_stock_balance, StockBalance};

/// The stock balance of the loaded population of every partition of `config`.
pub fn initial_stock_balance(config: &wire::config::ClusterConfig) -> StockBalance {
    let mut balance = StockBalance::new();
    for p in &config.partitions {
        let (mut db, _) = crate::population::partition_db(p, config.seed);
        add_stock_balance(&mut db, &mut balance);
    }
    balance
}

/// Compares two stock balances; names the first row that differs
/// (`engine::check::stock_difference`).
pub fn same_stock_balance(expected: &StockBalance, found: &StockBalance) -> Result<(), SimError> {
    match engine::check::stock_difference(expected, found) {
        None => Ok(()),
        Some(StockDifference::Disagrees { w, i, found, loaded }) => {
            Err(SimError::StockDisagrees { w, i, found, loaded })
        }
        Some(StockDifference::Missing { w, i }) => Err(SimError::StockMissing { w, i }),
    }
}

/// Every partition's STOCK agrees with the ORDER_LINE rows of every partition (its first
/// replica's state), as in the loaded population.
pub fn stock_agrees_with_order_lines(sim: &mut Sim) -> Result<(), SimError> {
    let expected = initial_stock_balance(sim.config());
    let partitions: Vec<(PartitionId, wire::messages::NodeId)> =
        sim.config().partitions.iter().map(|p| (p.id, p.replicas[0])).collect();
    let mut found = StockBalance::new();
    for (partition, node) in partitions {
        let mut copy = None;
        add_stock_balance(state(sim, node, partition, &mut copy)?, &mut found);
    }
    same_stock_balance(&expected, &found)
}
