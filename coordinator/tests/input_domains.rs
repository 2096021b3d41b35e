//! Issue #14, item 6, at the coordinator state machine: a client request whose input lies
//! outside TPC-C's domains (clauses 2.4.1–2.8.1) is refused with the typed reason
//! ([`Rejection::OutOfDomain`]) and nothing is sent to the replicas — not at once, not when
//! the open batch is flushed — so nothing it names can change.

mod common;
use common::{batches, replies};

use coordinator::{Coordinator, Output, Phase};
use engine::input::{InputError, InputField};
use engine::procedures::*;
use wire::channel::NodeToCoordinator;
use wire::config::ClusterConfig;
use wire::messages::*;

const MS: u64 = 1_000;
const START_US: u64 = 1_700_000_000_000 * MS;
/// A date in TPC-C's domain (2008-06-10).
const DATE: i64 = 1_213_056_000;

/// The committed `cluster.toml` (partitions 1: warehouses 1–2, 2: warehouses 3–4, each on
/// nodes 1 and 2), every replica loaded, one transaction a batch.
fn serving() -> Coordinator {
    let mut config = ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap();
    config.limits.batch_txns_max = 1;
    config.limits.batch_wait_us = 500;
    let mut c = Coordinator::new(&config, START_US).unwrap();
    for node in [1, 2] {
        for partition in [1, 2] {
            let ready =
                NodeToCoordinator::LoadStatus { partition, state: LoadState::Ready { digest: StateDigest(99) } };
            c.on_node_message(node, ready, START_US);
        }
    }
    assert!(c.status().iter().all(|p| p.phase == Phase::Serving));
    c
}

fn new_order(supply: [u16; 5]) -> NewOrderInput {
    let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
    for (n, s) in supply.into_iter().enumerate() {
        lines[n] = OrderLineInput { i_id: n as u32 + 1, supply_w_id: s, quantity: 1 };
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

/// Every out-of-domain input the issue names, and one of each other domain, with the
/// reason the client must be given.
fn out_of_domain() -> Vec<(TxnInput, InputError)> {
    let local = new_order([1; 5]);
    let mut quantity_0 = local;
    quantity_0.lines[0].quantity = 0;
    let mut quantity_255 = local;
    quantity_255.lines[4].quantity = 255;
    // Multi-partition (a line supplied by warehouse 3, partition 2): refused as well.
    let mut remote_quantity_0 = new_order([1, 1, 3, 1, 1]);
    remote_quantity_0.lines[2].quantity = 0;
    let mut unused_item_not_last = local;
    unused_item_not_last.lines[0].i_id = ITEMS + 1;
    let date = |txn, field, value| InputError::Date { txn, field, value, min: DATE_MIN, max: DATE_MAX };
    let threshold = |value| InputError::Threshold { value, min: THRESHOLD_MIN, max: THRESHOLD_MAX };
    vec![
        // Clause 2.4.1.5 (item 3): OL_QUANTITY 1..=10.
        (TxnInput::NewOrder(quantity_0), InputError::Quantity { line: 1, value: 0, min: 1, max: 10 }),
        (TxnInput::NewOrder(quantity_255), InputError::Quantity { line: 5, value: 255, min: 1, max: 10 }),
        (TxnInput::NewOrder(remote_quantity_0), InputError::Quantity { line: 3, value: 0, min: 1, max: 10 }),
        // Clause 2.4.1.6: O_ENTRY_D a date.
        (
            TxnInput::NewOrder(NewOrderInput { entry_d: i64::MIN, ..local }),
            date(TxnKind::NewOrder, InputField::OEntryD, i64::MIN),
        ),
        // Clause 2.4.1.3: O_OL_CNT 5..=15.
        (
            TxnInput::NewOrder(NewOrderInput { ol_cnt: 4, ..local }),
            InputError::OrderLineCount { value: 4, min: 5, max: 15 },
        ),
        // Clause 2.4.1.5 (item 1): an unused item only on the last line.
        (TxnInput::NewOrder(unused_item_not_last), InputError::Item { line: 1, value: ITEMS + 1, min: 1, max: ITEMS }),
        // Clause 2.4.1.2: C_ID 1..=3,000.
        (
            TxnInput::NewOrder(NewOrderInput { c_id: 3_001, ..local }),
            InputError::Customer { txn: TxnKind::NewOrder, value: 3_001, min: 1, max: 3_000 },
        ),
        // Clause 2.5.1.3: H_AMOUNT 1.00..=5,000.00.
        (
            TxnInput::Payment(PaymentInput { h_amount: 0, ..payment() }),
            InputError::Amount { value: 0, min: 100, max: 500_000 },
        ),
        // A remote Payment (customer in warehouse 3) with a date out of range (clause 2.5.1.4).
        (
            TxnInput::Payment(PaymentInput { c_w_id: 3, date: 0, ..payment() }),
            date(TxnKind::Payment, InputField::HDate, 0),
        ),
        // Clauses 2.5.1.2, 4.3.2.3: C_LAST from the syllable table.
        (
            TxnInput::Payment(PaymentInput {
                customer: CustomerSelector::ByLastName(*b"SMITH\0\0\0\0\0\0\0\0\0\0\0"),
                ..payment()
            }),
            InputError::LastName { txn: TxnKind::Payment, name: *b"SMITH\0\0\0\0\0\0\0\0\0\0\0" },
        ),
        // Clause 2.6.1.2: D_ID 1..=10.
        (
            TxnInput::OrderStatus(OrderStatusInput { w_id: 1, d_id: 0, customer: CustomerSelector::ById(1) }),
            InputError::District { txn: TxnKind::OrderStatus, field: InputField::DId, value: 0, min: 1, max: 10 },
        ),
        // Clause 2.7.1.2: O_CARRIER_ID 1..=10; 2.7.1.3: OL_DELIVERY_D a date.
        (
            TxnInput::Delivery(DeliveryInput { w_id: 1, o_carrier_id: 11, date: DATE }),
            InputError::Carrier { value: 11, min: 1, max: 10 },
        ),
        (
            TxnInput::Delivery(DeliveryInput { w_id: 1, o_carrier_id: 1, date: -1 }),
            date(TxnKind::Delivery, InputField::OlDeliveryD, -1),
        ),
        // Clause 2.8.1.2: threshold 10..=20.
        (TxnInput::StockLevel(StockLevelInput { w_id: 1, d_id: 1, threshold: i32::MIN }), threshold(i32::MIN)),
        (TxnInput::StockLevel(StockLevelInput { w_id: 1, d_id: 1, threshold: i32::MAX }), threshold(i32::MAX)),
    ]
}

fn nothing_to_nodes(out: &[Output]) -> bool {
    !out.iter().any(|o| matches!(o, Output::ToNodes { .. }))
}

#[test]
fn out_of_domain_requests_are_refused_with_the_typed_reason_and_never_sent() {
    let mut c = serving();
    for (n, (input, reason)) in out_of_domain().into_iter().enumerate() {
        let request_id = n as u64 + 1;
        let out = c.on_client_request(1, ClientRequest::new(7, request_id, Timestamp(0), input), START_US);
        let r = replies(&out);
        assert_eq!(r.len(), 1, "{input:?}: {out:?}");
        assert_eq!(r[0].1.request_id, request_id);
        assert_eq!(r[0].1.result, ClientResult::Rejected(Rejection::OutOfDomain(reason)), "{input:?}");
        assert!(nothing_to_nodes(&out), "{input:?} was sent: {out:?}");
    }
    assert!(c.status().iter().all(|p| p.inflight_txns == 0), "nothing was admitted");
    // Nothing is waiting in an open batch either: flushing sends no batch (heartbeats only).
    assert!(batches(&c.tick(START_US + 10 * MS)).is_empty());
}

/// The control: the same requests brought back into the domain are sent to the replicas at
/// once (one transaction a batch), so the test above can tell "refused" from "not sent yet".
#[test]
fn the_same_requests_in_domain_are_sent() {
    let mut c = serving();
    let local = new_order([1; 5]);
    let inputs = [
        TxnInput::NewOrder(local),
        TxnInput::NewOrder(new_order([1, 1, 3, 1, 1])),
        TxnInput::Payment(payment()),
        TxnInput::Payment(PaymentInput { c_w_id: 3, ..payment() }),
        TxnInput::StockLevel(StockLevelInput { w_id: 1, d_id: 1, threshold: THRESHOLD_MAX }),
        TxnInput::Delivery(DeliveryInput { w_id: 1, o_carrier_id: CARRIERS, date: DATE_MAX }),
    ];
    for (n, input) in inputs.into_iter().enumerate() {
        let out = c.on_client_request(1, ClientRequest::new(7, n as u64 + 1, Timestamp(0), input), START_US);
        assert!(replies(&out).is_empty(), "{input:?}: {out:?}");
        let sent = batches(&out);
        assert!(!sent.is_empty(), "{input:?} was not sent: {out:?}");
        assert!(sent.iter().all(|(_, b)| b.txns.iter().all(|t| t.input == input)));
    }
}
