//! The coordinator group's channel: one coordinator and another (docs/design.md §11). The
//! lower id dials the higher; the one connection then carries raft messages both ways. The
//! bytes are the group's own encoding (`coordinator::group`), opaque here: raft checks its
//! terms and indices itself, so a message lost or late is only a retry.

use crate::channel::channel_enum;

channel_enum! {
    /// Coordinator ↔ coordinator (both directions).
    pub enum CoordinatorToCoordinator = "coordinator ↔ coordinator" {
        /// One raft message of the coordinator group.
        Raft(Vec<u8>),
    }
}
