//! glass's harness: running local clusters of real `glass` processes and the experiments over
//! them, with their verdict policy. It owns a cluster's life on this machine ([`cluster`]:
//! spawning the coordinator and the nodes from the `glass` executable it is given, pid files,
//! readiness, stopping, what `status` samples, and [`status`], how it reads), reading processes through `/proc`
//! ([`procfs`]), one measured run of the TPC-C driver against a serving cluster with the
//! node-side figures filled in ([`measure`]), the experiments — `glass compare`'s runs and
//! their renderings ([`compare`], the multi-partition curve in [`compare::multi`]) and `glass
//! failover`'s kill and kill-loop runs and their records ([`failover`]) — and the one rule
//! that judges them ([`verdict`]), plus the records of acknowledged transactions that outlive
//! a process ([`acks`]). The in-process experiments are here too: the embedded bench's
//! decisions and runs, and restart recovery's report ([`bench`](mod@bench)), how the
//! breakdown counts instructions ([`breakdown`]), the folders a run makes for itself and
//! removes ([`scratch`]), and the simulator's seeds run on several threads ([`seeds`]).
//!
//! It drives processes, not the libraries' internals: the cluster is reached through
//! `workload`'s client and `wire`'s configuration, as any other client would. It prints
//! nothing (but for the one line of [`measure::StopOnDrop`], whose drop has no caller left to
//! tell): progress goes to a [`cluster::Progress`] the caller implements, results come back
//! as values (and their `Display` or rendering functions). Errors are [`HarnessError`].

pub mod acks;
pub mod bench;
pub mod breakdown;
pub mod cluster;
pub mod compare;
pub mod error;
pub mod failover;
pub mod hosts;
pub mod html;
pub mod interrupt;
pub mod measure;
pub mod place;
pub mod procfs;
pub mod record;
pub mod remote;
pub mod scratch;
pub mod seeds;
pub mod status;
pub mod verdict;

pub use cluster::{runtime, Cluster, Proc, Progress, Running, Up};
pub use error::HarnessError;

/// `Result` with [`HarnessError`].
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;
