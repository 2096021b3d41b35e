//! glass's node: partition replicas that execute the coordinator's ordered batches, one
//! thread each. The deciding logic is the synchronous [`replica::Replica`] state machine
//! (STYLE.md habit 2); the node process's network code only carries its messages.

pub mod error;
pub mod replica;

pub use error::ReplicaError;
pub use replica::{Replica, ReplicaStats};
