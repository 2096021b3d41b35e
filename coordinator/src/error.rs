//! Errors of the coordinator crate. Refusals a client must see (an unknown warehouse, an
//! invalid input) are [`RouteError`] variants that become `wire` rejections; a refused
//! configuration is [`CoordinatorError`].

use wire::messages::{Rejection, WarehouseId};

/// Why a transaction cannot be routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// A warehouse of the transaction belongs to no partition.
    #[error("warehouse {warehouse} belongs to no partition of this cluster")]
    UnknownWarehouse { warehouse: WarehouseId },
    /// The input is not a valid TPC-C input.
    #[error("invalid input: {problem}")]
    InvalidInput { problem: &'static str },
}

impl From<RouteError> for Rejection {
    fn from(e: RouteError) -> Rejection {
        match e {
            RouteError::UnknownWarehouse { warehouse } => Rejection::UnknownWarehouse { warehouse },
            RouteError::InvalidInput { problem } => Rejection::InvalidInput { problem: problem.to_string() },
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
