//! glass's workload, the benchmark driver: the TPC-C input generator ([`gen`]), the embedded
//! bench ([`bench`]) and its worker threads over the conventional stack ([`workers`]), replay
//! of recorded batches ([`replay`]), the cluster client and its checks ([`client`]), dumps
//! ([`dump`]), metrics and reports ([`metrics`], [`report`]) and the paper's staircase of
//! component removals ([`breakdown`]). The loader and TPC-C's random functions are
//! `engine::loader` and `engine::rng`. Everything random is drawn from seeded generators
//! passed in.

pub mod bench;
pub mod breakdown;
pub mod client;
pub mod dump;
pub mod error;
pub mod gen;
pub mod metrics;
pub mod replay;
pub mod report;
pub mod workers;
