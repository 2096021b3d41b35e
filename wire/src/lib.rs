//! glass's wire protocol: the cluster description (`cluster.toml`, [`config`]), every message
//! processes exchange ([`messages`]), and their framing ([`codec`]). Synchronous and free of
//! any network runtime: the QUIC endpoints that carry these frames live beside them.

pub mod codec;
pub mod config;
pub mod error;
pub mod messages;

pub use config::{check_ports_free, ClusterConfig, Mode};
pub use error::{CodecError, ConfigError, Problem};
pub use messages::{Message, NodeId, PartitionId, Timestamp, PROTOCOL_VERSION};
