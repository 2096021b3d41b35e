//! glass's node: partition replicas that execute the coordinator's ordered batches, one
//! thread each. The deciding logic is the synchronous [`replica::Replica`] state machine
//! (docs/design.md); the node process ([`process`]) only carries its messages and feeds
//! each replica's executor thread; [`snapshot`] owns snapshot and log-base transfer, both
//! halves: it streams a replica's rows and receives them (for `glass check`, `glass dump`,
//! and a rejoining replica), and ships and collects a full-stack primary's log base; [`metrics`] names the figures a
//! node's Prometheus endpoint serves.

pub mod affinity;
pub mod carrier;
pub mod error;
pub mod faults;
pub mod fullstack;
pub mod machine;
pub mod metrics;
pub mod process;
pub mod replica;
pub mod shipping;
pub mod snapshot;

pub use error::{ReplicaError, TransferError};
pub use replica::{Replica, ReplicaStats};
