//! Which partition a transaction belongs to, from the warehouses it touches: NewOrder's home
//! and supply warehouses, Payment's home and customer warehouses, the home warehouse of the
//! others (TPC-C clauses 2.4–2.8), as `engine::distributed::partitions_touched` classifies it.
//!
//! Guarantees: a transaction is routed to its home warehouse's partition, with the other
//! partitions it touches (a multi-partition transaction: NewOrder's remote supplying
//! warehouses, Payment's remote customer). An input outside TPC-C's domains (clauses
//! 2.4.1–2.8.1, `engine::input::check_input`) is refused with [`RouteError::OutOfDomain`],
//! one naming a warehouse outside the cluster's configuration with
//! [`RouteError::UnknownWarehouse`]; either way nothing is routed. Routing is a table lookup
//! per warehouse, without allocation on the single-partition path.

use engine::distributed::{partitions_touched, PartitionsTouched};
use engine::error::UnknownWarehouse;
use engine::input::check_input;
use engine::procedures::TxnInput;
use wire::config::ClusterConfig;
use wire::messages::{PartitionId, WarehouseId};

use crate::error::RouteError;

/// Warehouse → partition, from `cluster.toml`.
#[derive(Debug, Clone)]
pub struct Router {
    /// Indexed by warehouse id; `None` for warehouse 0 and unknown ones.
    by_warehouse: Vec<Option<PartitionId>>,
}

impl Router {
    /// The router of a validated configuration.
    pub fn new(config: &ClusterConfig) -> Router {
        let mut by_warehouse = vec![None; usize::from(config.warehouses_total()) + 1];
        for p in &config.partitions {
            for w in p.warehouses.range() {
                by_warehouse[usize::from(w)] = Some(p.id);
            }
        }
        Router { by_warehouse }
    }

    /// The partition of warehouse `w`.
    pub fn partition_of(&self, w: WarehouseId) -> Option<PartitionId> {
        self.by_warehouse.get(usize::from(w)).copied().flatten()
    }

    /// The partitions `input` touches: its home warehouse's, then the others in increasing
    /// order (none for a single-partition transaction).
    pub fn route(&self, input: &TxnInput) -> Result<Route, RouteError> {
        check_input(input)?;
        partitions_touched(input, |w| self.partition_of(w))
            .map_err(|UnknownWarehouse { warehouse }| RouteError::UnknownWarehouse { warehouse })
    }
}

/// Where a transaction runs: the home warehouse's partition, and the other partitions it
/// touches in increasing order (empty for a single-partition transaction).
pub type Route = PartitionsTouched<PartitionId>;

#[cfg(test)]
mod tests {
    use super::*;
    use engine::input::{InputError, InputField};
    use engine::procedures::*;

    /// A date in TPC-C's domain (2008-06-10, the load's date).
    const DATE: i64 = 1_213_056_000;

    fn router() -> Router {
        Router::new(&ClusterConfig::parse(include_str!("../../cluster.toml")).unwrap())
    }

    fn new_order(w_id: u16, supply: &[u16]) -> TxnInput {
        let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
        for (n, &s) in supply.iter().enumerate() {
            lines[n] = OrderLineInput { i_id: n as u32 + 1, supply_w_id: s, quantity: 5 };
        }
        TxnInput::NewOrder(NewOrderInput { w_id, d_id: 1, c_id: 1, ol_cnt: supply.len() as u8, lines, entry_d: DATE })
    }

    fn payment(w_id: u16, c_w_id: u16) -> TxnInput {
        TxnInput::Payment(PaymentInput {
            w_id,
            d_id: 1,
            c_w_id,
            c_d_id: 2,
            customer: CustomerSelector::ById(7),
            h_amount: 500,
            date: DATE,
        })
    }

    fn home(p: PartitionId) -> Result<Route, RouteError> {
        Ok(Route { home: p, remotes: Vec::new() })
    }

    #[test]
    fn single_partition_transactions_go_to_their_home_partition() {
        let r = router();
        assert_eq!(r.route(&new_order(1, &[1, 2, 2, 1, 1])), home(1));
        assert_eq!(r.route(&new_order(4, &[3, 4, 4, 4, 3])), home(2));
        assert_eq!(r.route(&payment(2, 1)), home(1));
        assert_eq!(
            r.route(&TxnInput::OrderStatus(OrderStatusInput { w_id: 3, d_id: 1, customer: CustomerSelector::ById(1) })),
            home(2)
        );
        assert_eq!(r.route(&TxnInput::Delivery(DeliveryInput { w_id: 2, o_carrier_id: 3, date: DATE })), home(1));
        assert_eq!(r.route(&TxnInput::StockLevel(StockLevelInput { w_id: 4, d_id: 10, threshold: 15 })), home(2));
    }

    /// TPC-C clause 2.4.1.5 (remote supply warehouses) and 2.5.1.2 (remote customers) make
    /// transactions span partitions: routed home first, with the others.
    #[test]
    fn transactions_spanning_partitions_name_their_home_and_the_others() {
        let r = router();
        assert_eq!(r.route(&new_order(1, &[1, 1, 3, 1, 1])), Ok(Route { home: 1, remotes: vec![2] }));
        assert_eq!(r.route(&new_order(3, &[1, 3, 2, 4, 3])), Ok(Route { home: 2, remotes: vec![1] }));
        assert_eq!(r.route(&payment(4, 1)), Ok(Route { home: 2, remotes: vec![1] }));
    }

    #[test]
    fn unknown_warehouses_and_invalid_inputs_are_refused() {
        let r = router();
        assert_eq!(r.route(&new_order(5, &[5, 5, 5, 5, 5])), Err(RouteError::UnknownWarehouse { warehouse: 5 }));
        assert_eq!(r.route(&payment(1, 9)), Err(RouteError::UnknownWarehouse { warehouse: 9 }));
        assert!(matches!(r.route(&new_order(1, &[])), Err(RouteError::OutOfDomain(InputError::OrderLineCount { .. }))));
        assert!(matches!(r.route(&payment(0, 1)), Err(RouteError::OutOfDomain(InputError::Warehouse { .. }))));
    }

    /// Issue #14, item 6: the router refuses every input outside TPC-C's domains (clauses
    /// 2.4.1.3, 2.4.1.5, 2.4.1.6, 2.5.1.3, 2.7.1.2, 2.8.1.2) with the typed reason, before
    /// looking at its warehouses — so such a request is never sent to a partition.
    #[test]
    fn out_of_domain_inputs_are_refused_with_the_typed_reason() {
        let r = router();
        let TxnInput::NewOrder(no) = new_order(1, &[1, 1, 1, 1, 1]) else { unreachable!() };
        let mut quantity_0 = no;
        quantity_0.lines[0].quantity = 0;
        let mut quantity_255 = no;
        quantity_255.lines[4].quantity = 255;
        let entry_d_min = NewOrderInput { entry_d: i64::MIN, ..no };
        let TxnInput::Payment(pay) = payment(1, 1) else { unreachable!() };
        let cases = [
            (TxnInput::NewOrder(quantity_0), InputError::Quantity { line: 1, value: 0, min: 1, max: 10 }),
            (TxnInput::NewOrder(quantity_255), InputError::Quantity { line: 5, value: 255, min: 1, max: 10 }),
            (
                TxnInput::NewOrder(entry_d_min),
                InputError::Date {
                    txn: TxnKind::NewOrder,
                    field: InputField::OEntryD,
                    value: i64::MIN,
                    min: DATE_MIN,
                    max: DATE_MAX,
                },
            ),
            (
                TxnInput::Payment(PaymentInput { h_amount: 0, ..pay }),
                InputError::Amount { value: 0, min: 100, max: 500_000 },
            ),
            (
                TxnInput::StockLevel(StockLevelInput { w_id: 1, d_id: 1, threshold: i32::MIN }),
                InputError::Threshold { value: i32::MIN, min: 10, max: 20 },
            ),
            (
                TxnInput::StockLevel(StockLevelInput { w_id: 1, d_id: 1, threshold: i32::MAX }),
                InputError::Threshold { value: i32::MAX, min: 10, max: 20 },
            ),
            (
                TxnInput::Delivery(DeliveryInput { w_id: 1, o_carrier_id: 0, date: DATE }),
                InputError::Carrier { value: 0, min: 1, max: 10 },
            ),
        ];
        for (input, e) in cases {
            assert_eq!(r.route(&input), Err(RouteError::OutOfDomain(e)), "{input:?}");
        }
        // The domain is checked first: an out-of-domain input on an unknown warehouse too.
        let unknown = StockLevelInput { w_id: 9, d_id: 1, threshold: 0 };
        assert!(matches!(r.route(&TxnInput::StockLevel(unknown)), Err(RouteError::OutOfDomain(_))));
    }
}
