//! One module per subcommand.

pub mod bench;
pub mod bench_cluster;
pub mod breakdown;
pub mod check;
pub mod cluster;
pub mod compare;
pub mod coordinator;
pub mod dump;
pub mod failover;
pub mod logging;
pub mod node;
pub mod recover;
pub mod sim;
