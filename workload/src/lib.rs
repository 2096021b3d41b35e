//! glass's workload: the TPC-C loader and input generator, dumps, the benchmark driver, its
//! metrics and reports. Everything random is drawn from seeded generators passed in.

pub mod bench;
pub mod breakdown;
pub mod client;
pub mod dump;
pub mod error;
pub mod gen;
pub mod loader;
pub mod metrics;
pub mod replay;
pub mod report;
pub mod rng;
pub mod workers;
