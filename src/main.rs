//! `glass`: the one front door. Thin: parses flags and hands each subcommand to its module
//! under `cmd/`, which turns the flags into calls of the library crates (engine, workload,
//! harness, node, coordinator, sim) and prints what they return. Every decision lives in the
//! library crates.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "glass",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("GLASS_GIT_COMMIT"), ")"),
    about = "OLTP Through the Looking Glass, measured: a lean single-threaded main-memory TPC-C kernel, \
             the conventional stack, and the replication modes of the paper's Section 5.3"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The main job: run the same TPC-C workload on the cluster in each replication mode
    /// (active-active, active-passive log shipping, the full conventional stack), check each,
    /// and print them side by side — the paper's Section 5.3, measured.
    Compare(cmd::compare::CompareArgs),
    /// Kill (or stop) a node mid-run, optionally restart it, and measure detection,
    /// unavailability per partition, recovery, and acknowledged transactions lost.
    Failover(cmd::failover::FailoverArgs),
    /// Run TPC-C against a database and report throughput and latency.
    Bench(cmd::bench::BenchArgs),
    /// Walk the paper's staircase: NewOrder and Payment on the full conventional stack, then
    /// after each component removal, down to the lean kernel; instructions and time per
    /// transaction beside the paper's Figures 5 and 6.
    Breakdown(cmd::breakdown::BreakdownArgs),
    /// Restart the conventional stack from its checkpoint and log (ARIES: analysis, redo,
    /// undo), report what recovery did, verify acknowledged commits and check consistency.
    Recover(cmd::recover::RecoverArgs),
    /// A local cluster: `init` its certificates, `up` (start every process here and wait
    /// until every partition serves), `status`, `down` (stop them; none is left).
    Cluster(cmd::cluster::ClusterArgs),
    /// Run one node process in the foreground (what `cluster up` starts; by hand on each host
    /// of a multi-host cluster).
    Node(cmd::node::NodeArgs),
    /// Run the coordinator process in the foreground (what `cluster up` starts; by hand on its
    /// host).
    Coordinator(cmd::coordinator::CoordinatorArgs),
    /// Check a running cluster: equal replica digests, TPC-C consistency over all partitions,
    /// acknowledged NewOrders present.
    Check(cmd::check::CheckArgs),
    /// Copy a running cluster's whole database into one CSV per table.
    Dump(cmd::dump::DumpArgs),
    /// Rebuild a run record's report.html (`glass report DIR`), or set two records (compare,
    /// sweep, bench or failover) side by side with the ratio of each figure (`glass report A B`).
    Report(cmd::report::ReportArgs),
    /// Run the seeded whole-cluster simulator: the real coordinator and replicas in one
    /// thread, faults drawn from each seed, then heal and check; a failing seed replays.
    Sim(cmd::sim::SimArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Ctrl-C and SIGTERM stop every process the command started (harness::interrupt); the
    // servers keep their own handling, as `cluster up` leaves them running on purpose.
    if !matches!(cli.command, Command::Node(_) | Command::Coordinator(_)) {
        if let Err(e) = harness::interrupt::install(cmd::report_interrupt) {
            eprintln!("glass: error: cannot take Ctrl-C and SIGTERM: {e}");
            return ExitCode::from(2);
        }
    }
    let result = match cli.command {
        Command::Compare(a) => cmd::compare::run(a),
        Command::Failover(a) => cmd::failover::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Breakdown(a) => cmd::breakdown::run(a),
        Command::Recover(a) => cmd::recover::run(a),
        Command::Cluster(a) => cmd::cluster::run(a),
        Command::Node(a) => cmd::node::run(a),
        Command::Coordinator(a) => cmd::coordinator::run(a),
        Command::Check(a) => cmd::check::run(a),
        Command::Dump(a) => cmd::dump::run(a),
        Command::Sim(a) => cmd::sim::run(a),
        Command::Report(a) => cmd::report::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("glass: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
