//! Errors of the coordinator crate. Refusals a client must see (an unknown warehouse, an
//! input outside TPC-C's domains) are [`RouteError`] variants that become `wire` rejections; a
//! refused configuration is [`CoordinatorError`].

use engine::input::InputError;
use wire::messages::{Rejection, WarehouseId};

/// Why a transaction cannot be routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// A warehouse of the transaction belongs to no partition.
    #[error("warehouse {warehouse} belongs to no partition of this cluster")]
    UnknownWarehouse { warehouse: WarehouseId },
    /// The input lies outside TPC-C's domains (clauses 2.4.1–2.8.1).
    #[error("input outside TPC-C's domains: {0}")]
    OutOfDomain(#[from] InputError),
}

impl From<RouteError> for Rejection {
    fn from(e: RouteError) -> Rejection {
        match e {
            RouteError::UnknownWarehouse { warehouse } => Rejection::UnknownWarehouse { warehouse },
            RouteError::OutOfDomain(e) => Rejection::OutOfDomain(e),
        }
    }
}

/// Why a coordinator cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// The configuration does not validate for this build.
    #[error(transparent)]
    Config(#[from] wire::ConfigError),
}
