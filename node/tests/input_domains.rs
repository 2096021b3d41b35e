//! Issue #14, item 6, at a partition replica: a batch carrying an input outside TPC-C's
//! domains (clauses 2.4.1–2.8.1), or one naming a warehouse the partition does not hold,
//! reports that transaction failed (a remote piece: aborted) and changes nothing — the
//! replica's state digest is what it is without that transaction — while the batch's other
//! transactions run as usual. Checked on the lean kernel (active-active replica, and a
//! multi-partition transaction's pieces) and on the conventional stack (`full-stack`).

use std::path::{Path, PathBuf};

use engine::input::{InputError, InputField};
use engine::loader::{load_database_scaled, Scale};
use engine::procedures::*;
use engine::LeanDb;
use node::replica::{Emit, Replica, ReplicaRole, Store};
use wire::channel::{CoordinatorToNode, NodeToCoordinator, ToolReply};
use wire::config::{ClusterConfig, Mode, WarehouseRange};
use wire::messages::*;

const LOAD_SEED: u64 = 99;
/// A date in TPC-C's domain (2008-06-10).
const DATE: i64 = 1_213_056_000;

fn loaded(warehouses: std::ops::RangeInclusive<u16>) -> LeanDb {
    let mut db = LeanDb::new();
    load_database_scaled(&mut db, warehouses, LOAD_SEED, Scale::tiny(), &mut |_| {}).unwrap();
    db
}

/// A NewOrder of warehouse 1 in the tiny population (items 1–5, customer 1).
fn new_order() -> NewOrderInput {
    let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
    for (n, l) in lines.iter_mut().take(5).enumerate() {
        *l = OrderLineInput { i_id: n as u32 + 1, supply_w_id: 1, quantity: 3 };
    }
    NewOrderInput { w_id: 1, d_id: 1, c_id: 1, ol_cnt: 5, lines, entry_d: DATE }
}

fn payment() -> PaymentInput {
    PaymentInput {
        w_id: 1,
        d_id: 1,
        c_w_id: 1,
        c_d_id: 1,
        customer: CustomerSelector::ById(1),
        h_amount: 100,
        date: DATE,
    }
}

fn delivery() -> DeliveryInput {
    DeliveryInput { w_id: 1, o_carrier_id: 1, date: DATE }
}

/// Inputs outside the domains (the issue's, and one of each other kind), each with the
/// reason a replica of a partition holding warehouse 1 (and not 5) must report.
fn out_of_domain() -> Vec<(TxnInput, InputError)> {
    let mut quantity_0 = new_order();
    quantity_0.lines[0].quantity = 0;
    let mut quantity_255 = new_order();
    quantity_255.lines[4].quantity = 255;
    let mut supplied_elsewhere = new_order();
    supplied_elsewhere.lines[1].supply_w_id = 5;
    let threshold = |value| InputError::Threshold { value, min: THRESHOLD_MIN, max: THRESHOLD_MAX };
    let date = |txn, field, value| InputError::Date { txn, field, value, min: DATE_MIN, max: DATE_MAX };
    vec![
        // Clause 2.4.1.5 (item 3).
        (TxnInput::NewOrder(quantity_0), InputError::Quantity { line: 1, value: 0, min: 1, max: 10 }),
        (TxnInput::NewOrder(quantity_255), InputError::Quantity { line: 5, value: 255, min: 1, max: 10 }),
        // Clause 2.4.1.6.
        (
            TxnInput::NewOrder(NewOrderInput { entry_d: i64::MIN, ..new_order() }),
            date(TxnKind::NewOrder, InputField::OEntryD, i64::MIN),
        ),
        // Clause 2.5.1.3.
        (
            TxnInput::Payment(PaymentInput { h_amount: 0, ..payment() }),
            InputError::Amount { value: 0, min: 100, max: 500_000 },
        ),
        // Clause 2.8.1.2 (read-only: refused all the same).
        (TxnInput::StockLevel(StockLevelInput { w_id: 1, d_id: 1, threshold: i32::MIN }), threshold(i32::MIN)),
        (TxnInput::StockLevel(StockLevelInput { w_id: 1, d_id: 1, threshold: i32::MAX }), threshold(i32::MAX)),
        // Clause 2.7.1.2, 2.7.1.3: a carrier and a date (0 would read as "not delivered").
        (
            TxnInput::Delivery(DeliveryInput { o_carrier_id: 0, ..delivery() }),
            InputError::Carrier { value: 0, min: 1, max: 10 },
        ),
        (
            TxnInput::Delivery(DeliveryInput { date: 0, ..delivery() }),
            date(TxnKind::Delivery, InputField::OlDeliveryD, 0),
        ),
        // The partition's population: warehouse 5 is not held here.
        (
            TxnInput::Delivery(DeliveryInput { w_id: 5, ..delivery() }),
            InputError::NotHeld { txn: TxnKind::Delivery, field: InputField::WId, value: 5 },
        ),
        (
            TxnInput::NewOrder(supplied_elsewhere),
            InputError::NotHeld { txn: TxnKind::NewOrder, field: InputField::OlSupplyWId { line: 2 }, value: 5 },
        ),
    ]
}

/// The in-domain transactions the refused ones are mixed with: their outputs do not depend
/// on each other's order (the conventional stack's workers may run them in either).
fn in_domain() -> [TxnInput; 2] {
    [TxnInput::NewOrder(new_order()), TxnInput::Payment(payment())]
}

/// Batch 1 of partition 1 holding `inputs` at timestamps 1000, 1001, …
fn mixed_batch(inputs: &[TxnInput]) -> Batch {
    let txns = inputs.iter().enumerate().map(|(n, i)| BatchTxn::whole(Timestamp(1_000 + n as u64), *i)).collect();
    Batch { partition: 1, seq: 1, txns, digest_after: false, answerer: None }
}

/// Runs, on `refusing` and on `reference` (two replicas loaded alike), the in-domain
/// transactions with the out-of-domain ones between them (on `refusing` only), and checks
/// every refused one failed with its reason, the others committed alike, and both end in the
/// same state.
fn refused_inputs_change_nothing(mut refusing: Replica, mut reference: Replica) {
    let loaded = refusing.state_digest();
    assert_eq!(reference.state_digest(), loaded);
    let bad = out_of_domain();
    let good = in_domain();
    let mut inputs = vec![good[0]];
    inputs.extend(bad.iter().map(|(i, _)| *i));
    inputs.extend(&good[1..]);
    let batch = mixed_batch(&inputs);
    let results = refusing.on_batch(batch.clone()).unwrap();
    let [results] = &results[..] else { panic!("one batch, one result: {results:?}") };
    assert_eq!(results.results.len(), inputs.len());
    for (r, (input, reason)) in results.results[1..=bad.len()].iter().zip(&bad) {
        assert_eq!(r.outcome, TxnOutcome::Failed { reason: reason.to_string() }, "{input:?}");
    }
    let good_results: Vec<&TxnResult> =
        std::iter::once(&results.results[0]).chain(&results.results[bad.len() + 1..]).collect();
    assert!(good_results.iter().all(|r| matches!(r.outcome, TxnOutcome::Committed(_))), "{good_results:?}");

    // The reference runs the same batch without the refused transactions (same timestamps).
    let mut without = batch;
    without.txns.retain(|t| !bad.iter().any(|(i, _)| *i == t.input));
    assert_eq!(without.txns.len(), good.len());
    let expected = reference.on_batch(without).unwrap().remove(0);
    let outcomes = |rs: &[&TxnResult]| rs.iter().map(|r| (r.ts, r.outcome.clone())).collect::<Vec<_>>();
    assert_eq!(outcomes(&good_results), outcomes(&expected.results.iter().collect::<Vec<_>>()));
    assert_ne!(reference.state_digest(), loaded, "the in-domain transactions changed the state");
    assert_eq!(refusing.state_digest(), reference.state_digest(), "the refused transactions changed nothing");
    assert_eq!(refusing.stats().txns_failed, bad.len() as u64);

    // A batch of refused transactions alone leaves the state exactly as it was.
    let before = refusing.state_digest();
    let txns = bad.iter().enumerate().map(|(n, (i, _))| BatchTxn::whole(Timestamp(2_000 + n as u64), *i)).collect();
    let alone =
        refusing.on_batch(Batch { partition: 1, seq: 2, txns, digest_after: false, answerer: None }).unwrap().remove(0);
    assert!(alone.results.iter().all(|r| matches!(r.outcome, TxnOutcome::Failed { .. })), "{alone:?}");
    assert_eq!(refusing.state_digest(), before);
}

#[test]
fn a_lean_replica_reports_out_of_domain_inputs_failed_and_changes_nothing() {
    let replica = || Replica::new(1, 1, loaded(1..=2), 16);
    refused_inputs_change_nothing(replica(), replica());
}

/// A multi-partition NewOrder whose line supplied by partition 2 (warehouse 3) asks for 0
/// items (clause 2.4.1.5, item 3): the remote piece aborts, changing nothing, and the home
/// piece fails, changing nothing.
#[test]
fn out_of_domain_pieces_change_nothing_on_either_partition() {
    let mut input = new_order();
    input.lines[2].supply_w_id = 3;
    input.lines[2].quantity = 0;
    let input = TxnInput::NewOrder(input);
    let reason = InputError::Quantity { line: 3, value: 0, min: 1, max: 10 };
    let ts = Timestamp(1_000);

    let mut remote = Replica::new(2, 2, loaded(3..=3), 16);
    let before = remote.state_digest();
    let txns = vec![BatchTxn { ts, input, part: Part::Remote { home: 1 }, id: RequestId::NONE }];
    let out = remote
        .on_control(CoordinatorToNode::Batch(Batch { partition: 2, seq: 1, txns, digest_after: false, answerer: None }))
        .unwrap();
    let [Emit::ToCoordinator(NodeToCoordinator::PieceReads(reads)), Emit::ToCoordinator(NodeToCoordinator::Results(results))] =
        &out[..]
    else {
        panic!("{out:?}")
    };
    assert_eq!((reads.home, reads.from, reads.ts), (1, 2, ts));
    assert_eq!(reads.outcome, PieceOutcome::Aborted { reason: reason.to_string() });
    assert_eq!(results.results.len(), 1);
    assert_eq!(remote.state_digest(), before, "the remote piece changed nothing");

    let mut home = Replica::new(1, 1, loaded(1..=2), 16);
    let before = home.state_digest();
    let txns = vec![BatchTxn { ts, input, part: Part::Home { remotes: 1 }, id: RequestId::NONE }];
    assert!(home
        .on_control(CoordinatorToNode::Batch(Batch { partition: 1, seq: 1, txns, digest_after: false, answerer: None }))
        .unwrap()
        .is_empty());
    let out = home.on_control(CoordinatorToNode::PieceReads(reads.clone())).unwrap();
    let [Emit::ToCoordinator(NodeToCoordinator::Results(results))] = &out[..] else { panic!("{out:?}") };
    assert_eq!(results.results[0].outcome, TxnOutcome::Failed { reason: reason.to_string() });
    assert_eq!(home.state_digest(), before, "the home piece changed nothing");
}

/// Replica reads (OrderStatus, StockLevel outside the ordered path) are checked alike.
#[test]
fn an_out_of_domain_replica_read_fails() {
    let mut r = Replica::new(1, 1, loaded(1..=2), 16);
    let read = |r: &mut Replica, input| match r.replica_read(1, 1, &input).unwrap() {
        ToolReply::ReplicaReadReply { outcome, .. } => outcome,
        out => panic!("{out:?}"),
    };
    let level = |threshold| TxnInput::StockLevel(StockLevelInput { w_id: 1, d_id: 1, threshold });
    assert!(matches!(read(&mut r, level(THRESHOLD_MAX)), TxnOutcome::Committed(_)));
    let reason = InputError::Threshold { value: i32::MAX, min: THRESHOLD_MIN, max: THRESHOLD_MAX }.to_string();
    assert_eq!(read(&mut r, level(i32::MAX)), TxnOutcome::Failed { reason });
    let status = |w_id| TxnInput::OrderStatus(OrderStatusInput { w_id, d_id: 1, customer: CustomerSelector::ById(1) });
    assert!(matches!(read(&mut r, status(2)), TxnOutcome::Committed(_)));
    let reason = InputError::NotHeld { txn: TxnKind::OrderStatus, field: InputField::WId, value: 3 }.to_string();
    assert_eq!(read(&mut r, status(3)), TxnOutcome::Failed { reason });
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("glass-node-input-domains-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `full-stack`: the worker pool refuses the same inputs before running anything.
#[test]
fn a_full_stack_replica_reports_out_of_domain_inputs_failed_and_changes_nothing() {
    let mut config = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
    config = config.with_mode(Mode::FullStack, None);
    config.seed = LOAD_SEED;
    config.partitions[0].warehouses = WarehouseRange { first: 1, last: 1 };
    config.partitions[0].replicas = vec![1];
    config.partitions[1].warehouses = WarehouseRange { first: 2, last: 2 };
    config.validate().unwrap();
    let partition = &config.partitions[0];
    let (a, b) = (TempDir::new("refusing"), TempDir::new("reference"));
    let load = |dir: &Path| {
        let r = Replica::load_for(Mode::FullStack, 1, partition, LOAD_SEED, 16, dir, 2, &mut |_| {}).unwrap();
        assert_eq!(r.role(), ReplicaRole::Replica);
        r
    };
    let (mut refusing, reference) = (load(&a.0), load(&b.0));
    assert!(matches!(refusing.store_mut(), Store::Full(_)));
    refused_inputs_change_nothing(refusing, reference);
}
