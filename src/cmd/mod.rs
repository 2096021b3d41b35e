//! One module per subcommand, and what several share ([`write_json`], the console's
//! [`progress`]). Each turns its flags into calls of the library crates (a cluster's life and
//! the experiments are [`harness`]'s) and prints what they return.

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
pub mod progress;
pub mod recover;
pub mod sim;

/// Writes `value` as pretty JSON (newline-terminated) to `path` atomically, and says so.
pub fn write_json(path: &std::path::Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    workload::bench::write_atomic(path, &bytes)?;
    println!("wrote {}", path.display());
    Ok(())
}
