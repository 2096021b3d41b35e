//! glass's node: partition replicas that execute the coordinator's ordered batches, one
//! thread each. The deciding logic is the synchronous [`replica::Replica`] state machine
//! (STYLE.md habit 2); the node process ([`process`]) only carries its messages and feeds
//! each replica's executor thread; [`snapshot`] streams a replica's rows (for `glass check`,
//! `glass dump`, and rejoin later).

pub mod error;
pub mod faults;
pub mod fullstack;
pub mod process;
pub mod replica;
pub mod shipping;
pub mod snapshot;

pub use error::ReplicaError;
pub use replica::{Replica, ReplicaStats};
