//! One protocol per channel: every connection carries, after its [`handshake`], the messages
//! of exactly one channel, one enum per direction, chosen by who the two ends are (their
//! Hellos, checked against their certificates by [`crate::endpoint`]):
//!
//! | channel                 | dialler → listener            | listener → dialler            |
//! |-------------------------|-------------------------------|-------------------------------|
//! | every connection, first | [`Handshake`]                 | [`Handshake`]                 |
//! | client ↔ coordinator    | [`ClientToCoordinator`]       | [`CoordinatorToClient`]       |
//! | node ↔ coordinator      | [`NodeToCoordinator`]         | [`FromCoordinator`] (an epoch and a [`CoordinatorToNode`]) |
//! | coordinator ↔ coordinator (the lower id dials) | [`CoordinatorToCoordinator`] | [`CoordinatorToCoordinator`] |
//! | node ↔ node             | [`PeerRequest`]               | [`PeerReply`]                 |
//! | tool ↔ node             | [`ToolRequest`]               | [`ToolReply`]                 |
//!
//! (Tools — `glass cluster status`, `check`, `dump`, `down` — dial the coordinator on the
//! client channel and nodes on the tool channel.)
//!
//! Guarantees:
//! - a handler matches its channel's enum exhaustively: a message a peer may not send on a
//!   channel has no variant there, so it cannot be decoded, let alone handled;
//! - every enum is encoded by [`crate::codec`] as its variant index (a `u32`, fixed-width)
//!   then its fields; an index past the enum's [`ChannelMessage::VARIANTS`] is refused as
//!   [`crate::CodecError::UnknownTag`] before anything else is decoded;
//! - payload types (batches, results, chunks…) are shared by the channels in
//!   [`crate::messages`]; a variant may appear in several enums (a heartbeat, a shutdown, a
//!   snapshot request) and then carries the same fields in each;
//! - new variants go at the end of their enum; any change of an existing variant's encoding
//!   bumps [`crate::messages::PROTOCOL_VERSION`].

pub mod client;
pub mod control;
pub mod group;
pub mod handshake;
pub mod peer;
pub mod tool;

pub use client::{ClientToCoordinator, CoordinatorToClient};
pub use control::{CoordinatorToNode, Epoched, FromCoordinator, NodeToCoordinator};
pub use group::CoordinatorToCoordinator;
pub use handshake::Handshake;
pub use peer::{PeerChannel, PeerReply, PeerRequest};
pub use tool::{ToolChannel, ToolReply, ToolRequest};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::messages::{PartitionId, Seq, SnapshotChunk};

/// The messages of one direction of one channel: what [`crate::codec`] frames and
/// [`crate::endpoint::Link`] sends and receives.
pub trait ChannelMessage: Serialize + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static {
    /// The channel and direction, for errors and logs (`"node → coordinator"`).
    const CHANNEL: &'static str;
    /// How many variants the enum has: a tag at or past it is unknown.
    const VARIANTS: u32;
    /// The variant's name, for logs and reports.
    fn name(&self) -> &'static str;
}

/// A channel on which a consistent copy of a partition replica can be asked for and streamed
/// back as [`SnapshotChunk`]s: a tool's ([`ToolChannel`]) or a rejoining node's
/// ([`PeerChannel`]).
pub trait SnapshotChannel {
    type Request: ChannelMessage;
    type Reply: ChannelMessage;
    /// The request for a copy of `partition` reflecting at least batch `after_seq`.
    fn snapshot_request(request_id: u64, partition: PartitionId, after_seq: Seq) -> Self::Request;
    /// The chunk `reply` carries, or `None` for another reply.
    fn snapshot_chunk(reply: Self::Reply) -> Option<SnapshotChunk>;
}

/// Defines a channel enum (one direction of one channel) with its [`ChannelMessage`]
/// implementation: the variant count and names are derived from the variants listed.
macro_rules! channel_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident = $channel:literal {
            $(
                $(#[$vmeta:meta])*
                $variant:ident $( ( $($ty:ty),* $(,)? ) )? $( { $( $(#[$fmeta:meta])* $field:ident : $fty:ty ),* $(,)? } )?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $(
                $(#[$vmeta])*
                $variant $( ( $($ty),* ) )? $( { $( $(#[$fmeta])* $field : $fty ),* } )?
            ),*
        }

        impl $crate::channel::ChannelMessage for $name {
            const CHANNEL: &'static str = $channel;
            const VARIANTS: u32 = [$(stringify!($variant)),*].len() as u32;
            fn name(&self) -> &'static str {
                match self {
                    $( $name::$variant { .. } => stringify!($variant), )*
                }
            }
        }
    };
}
pub(crate) use channel_enum;
