//! Errors of the coordinator crate. Refusals a client must see (an unknown warehouse, an
//! input outside TPC-C's domains) are [`RouteError`] variants that become `wire` rejections; a
//! refused configuration is [`CoordinatorError`]; a refused restart recovery is
//! [`ResumeRefused`].

use engine::input::InputError;
use wire::messages::{NodeId, PartitionId, Rejection, WarehouseId};

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
    /// The coordinator group cannot start (docs/design.md §11).
    #[error(transparent)]
    Group(crate::group::GroupError),
}

/// Why a restarted full-stack node may not bring its partition back from its own write-ahead
/// log (it is told so in a `RejoinRefused`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResumeRefused {
    /// Another node was the partition's last primary: only its log holds every acknowledged
    /// transaction.
    #[error(
        "partition {partition} has no live replica, and node {node} was not its last primary: start node \
         {last_primary}, whose write-ahead log holds every acknowledged transaction (a backup's log holds only the \
         load)"
    )]
    NotLastPrimary { partition: PartitionId, node: NodeId, last_primary: NodeId },
    #[error("partition {partition} has no live replica and no known last primary")]
    NoLastPrimary { partition: PartitionId },
    #[error("partition {partition} has a live primary: rejoin as its backup")]
    PrimaryLive { partition: PartitionId },
    #[error("partition {partition} is still loading")]
    Loading { partition: PartitionId },
    #[error("partition {partition} is recovering on node {node} from its log")]
    Recovering { partition: PartitionId, node: NodeId },
    #[error("partition {partition} is stopped: {reason}")]
    Stopped { partition: PartitionId, reason: String },
}
