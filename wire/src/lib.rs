//! glass's wire protocol: the cluster description (`cluster.toml`, [`config`]), one message
//! enum per direction of each channel ([`channel`]), the payloads they carry ([`messages`])
//! and their framing ([`codec`]), all synchronous; and the
//! transport carrying them: the cluster's CA and TLS configurations ([`tls`]) and the QUIC
//! endpoints on tokio and quinn ([`endpoint`]), with the TCP liveness tether that lets a
//! coordinator see a node's process end at once ([`tether`]), a watch on the thread that
//! carries them ([`watchdog`]), and the processes' Prometheus endpoint ([`metrics`]).

pub mod channel;
pub mod codec;
pub mod config;
pub mod endpoint;
pub mod error;
pub mod messages;
pub mod metrics;
pub mod plant;
pub mod record;
pub mod samples;
pub mod tether;
pub mod tls;
pub mod watchdog;

pub use channel::ChannelMessage;
pub use config::{check_ports_free, ClusterConfig, Mode, Replication};
pub use error::{CodecError, ConfigError, HelloMismatch, Problem, UnknownName};
pub use messages::{NodeId, PartitionId, Timestamp, PROTOCOL_VERSION};
