//! glass's coordinator, as synchronous state machines that take messages and return messages
//! (docs/design.md): the H-Store style timestamp clock ([`timestamp`]), routing of a
//! transaction to its partition ([`router`]), per-partition batching with bounded in-flight
//! work ([`sequencer`]), agreement of the replicas' results ([`agreement`]), and the
//! [`Coordinator`] that combines them with the partitions' lifecycle and failure detection
//! ([`leader`]: the state machine the group's leader runs, docs/design.md §11). No I/O, no
//! clock, no async runtime: the network code ([`process`], the coordinator process on tokio
//! and QUIC) feeds them and carries their outputs. The coordinator group ([`group`],
//! [`member`]) decides membership and who leads; [`store`] keeps a member's raft state on
//! disk; [`carrier`] is where a member meets its links, the one piece the process and the
//! simulator share; [`metrics`] counts what its Prometheus endpoint serves.

pub mod agreement;
pub mod carrier;
pub mod catch_up;
pub mod error;
pub mod group;
pub mod leader;
pub mod member;
pub mod metrics;
pub mod process;
pub mod router;
pub mod sequencer;
pub mod store;
pub mod timestamp;

pub use error::{CoordinatorError, RouteError};
pub use leader::{ClientId, ClientRef, Coordinator, Detection, Event, Output, PartitionStatus, Phase};
