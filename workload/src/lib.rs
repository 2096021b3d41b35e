//! glass's workload: the TPC-C input generator, dumps, the benchmark driver, its metrics and
//! reports (the loader and TPC-C's random functions are `engine::loader` and `engine::rng`).
//! Everything random is drawn from seeded generators passed in.

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
