//! The harness's errors. Each variant is an expected way an experiment or a cluster's life
//! ends early; a variant that wraps a cause shows its own context only, and leaves the cause
//! to [`std::error::Error::source`] (the binary prints the whole chain, `context: cause`), so
//! a message is never repeated.

use std::path::PathBuf;
use std::process::ExitStatus;

use wire::messages::{NodeId, PartitionId};
use workload::bench::BenchError;
use workload::client::ClientError;
use workload::error::{DumpError, GenError};

/// Why a harness operation failed.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A file or directory could not be read, written, created or removed; `what` says which
    /// and why it was touched.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A host of the cluster could not be reached through SSH, or a command there failed.
    #[error("host {host}: {what}: {problem}")]
    Host { host: String, what: String, problem: String },
    /// What was asked cannot be done with processes on other hosts yet.
    #[error("{what} runs processes on this host only; {process} runs on {host} (cluster.toml's `ssh`)")]
    LocalOnly { what: &'static str, process: String, host: String },
    /// A host already runs glass processes that are not this cluster's (by its pid files).
    #[error(
        "host {host} already runs glass processes that are not this cluster's: {each}; stop them first (`glass \
         cluster down --config` with their cluster.toml)"
    )]
    Occupied { host: String, each: String },
    /// A host runs another build of glass than this one.
    #[error("host {host} runs {remote}, this is {local}: run `glass cluster deploy` first")]
    OtherBuild { host: String, remote: String, local: String },
    /// A `cluster.toml` cannot be read, is refused, or a derived one cannot be made.
    #[error("{what}")]
    Config {
        what: String,
        #[source]
        source: wire::ConfigError,
    },
    /// A cluster description refused as it stands.
    #[error(transparent)]
    Cluster(#[from] wire::ConfigError),
    /// Certificates refused as they stand.
    #[error(transparent)]
    Certificates(#[from] wire::tls::TlsError),
    /// The cluster's certificates cannot be made, or do not fit its `cluster.toml`.
    #[error("{what}")]
    Tls {
        what: String,
        #[source]
        source: wire::tls::TlsError,
    },
    /// A derived `cluster.toml` cannot be written as TOML.
    #[error("write the derived cluster.toml")]
    Toml(#[source] toml::ser::Error),
    /// A client of the cluster failed (dial, request, check, driver).
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Bench(#[from] BenchError),
    #[error(transparent)]
    Gen(#[from] GenError),
    #[error(transparent)]
    Dump(#[from] DumpError),
    /// A picture cannot be drawn.
    #[error(transparent)]
    Svg(#[from] crate::compare::SvgError),
    /// The conventional stack refused to open or to answer (an acknowledged-commit check).
    #[error(transparent)]
    Conventional(#[from] engine::conventional::ConventionalError),
    /// The conventional stack refused a setting, or to open or to checkpoint; `what` says
    /// which (the flags, the directory).
    #[error("{what}")]
    ConventionalWith {
        what: String,
        #[source]
        source: engine::conventional::ConventionalError,
    },
    #[error(transparent)]
    Storage(#[from] engine::StorageError),
    /// An output file cannot be written; `what` names the flag that gave it.
    #[error("{what}")]
    Output {
        what: String,
        #[source]
        source: BenchError,
    },
    /// One run of an experiment failed; `what` names the run (`the active-active run`).
    #[error("{what}")]
    Run {
        what: String,
        #[source]
        source: Box<HarnessError>,
    },
    /// A setting is impossible; the message names the flag.
    #[error("{0}")]
    Invalid(String),
    /// Some of the cluster's processes run here, not all.
    #[error("the cluster is partly running ({running}); run `glass cluster down --config {}` first", path.display())]
    PartlyRunning { running: String, path: PathBuf },
    /// An experiment's own cluster was found running before it started it.
    #[error("a cluster already runs from {}", path.display())]
    AlreadyRunning { path: PathBuf },
    /// An experiment would start clusters on the addresses of one that runs.
    #[error(
        "the cluster of {} is running; {what} — run `glass cluster down --config {}` first",
        path.display(),
        given.display()
    )]
    ClusterRunning { path: PathBuf, given: PathBuf, what: &'static str },
    /// A process exited while `up` waited for the cluster to serve.
    #[error("the {process} exited ({status}) before the cluster was ready; its log ({}) ends with:\n{tail}", log.display())]
    Exited { process: String, status: ExitStatus, log: PathBuf, tail: String },
    /// A process on another host was gone while `up` waited for the cluster to serve.
    #[error("the {process} on {host} exited before the cluster was ready; its log there ends with:\n{tail}")]
    ExitedThere { process: String, host: String, tail: String },
    /// The cluster did not serve in time.
    #[error(
        "the cluster was not ready within timeouts.load_timeout_s ({load_timeout_s} s) plus {slack_s} s; see the logs in {}",
        run_dir.display()
    )]
    NotReady { load_timeout_s: u64, slack_s: u64, run_dir: PathBuf },
    #[error("partition {partition} failed to load on node {node}: {reason}")]
    LoadFailed { partition: PartitionId, node: NodeId, reason: String },
    #[error("partition {partition} stopped: {phase}")]
    PartitionStopped { partition: PartitionId, phase: wire::messages::PartitionPhase },
    #[error("partition {partition} cannot serve: {phase}")]
    CannotServe { partition: PartitionId, phase: wire::messages::PartitionPhase },
    #[error("the cluster's partitions did not all serve within {secs} s")]
    ServeTimeout { secs: u64 },
    /// Processes outlived `down`'s SIGKILL.
    #[error("processes survived SIGKILL: {0}")]
    Survived(String),
    /// Processes on hosts that cannot be reached (`each`), after the others were stopped
    /// (`rest`: what `down` did to them).
    #[error(
        "cannot reach the host of {each}: it may still run (reach the host and run this again, or stop it there \
         and remove its pid file); of the others: {rest}"
    )]
    Unreachable { each: String, rest: String },
    /// The cluster's processes run here but its coordinator does not answer.
    #[error(
        "the cluster's processes run here but the coordinator does not answer; see `glass cluster status --config {}`",
        path.display()
    )]
    NotAnswering { path: PathBuf },
    /// A node an experiment acts on is not one of the processes it started here.
    #[error("node {0} is not running (no live pid file)")]
    NotHere(NodeId),
    #[error("no node of {} runs (no live pid file)", path.display())]
    NoNodeHere { path: PathBuf },
    /// The thread that kills and restarts nodes failed (its message) or panicked.
    #[error("{0}")]
    Killer(String),
    #[error("the node was not killed within the run")]
    NotKilled,
    #[error("the run was not sampled")]
    NotSampled,
    /// A signal was taken (Ctrl-C): nothing more is started ([`crate::interrupt`]).
    #[error("interrupted: no process is started any more")]
    Interrupted,
    /// Processes of clusters derived by an earlier `compare` or `failover` still run here
    /// (their `glass` was killed before it could stop them).
    #[error("processes left by an earlier run still run here: {running}; run `glass cluster down --config {}` first", path.display())]
    Strays { running: String, path: PathBuf },
    /// A line of a record of acknowledged transactions is not one.
    #[error("{}:{line}: {why}, found `{text}`", path.display())]
    AckRecord { path: PathBuf, line: usize, why: &'static str, text: String },
    /// A line of `glass bench --ack-log`'s record of acknowledged commits is not one.
    #[error("{} line {line}: not an acknowledged commit: `{text}`", path.display())]
    NotAnAck { path: PathBuf, line: usize, text: String },
}

impl HarnessError {
    /// An I/O error with what was being done.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> HarnessError {
        HarnessError::Io { what: what.into(), source }
    }

    /// A configuration error with what was being done.
    pub fn config(what: impl Into<String>, source: wire::ConfigError) -> HarnessError {
        HarnessError::Config { what: what.into(), source }
    }
}

/// The error and its causes, `context: cause: …` (as the binary prints it).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}
