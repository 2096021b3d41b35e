//! glass's deterministic whole-cluster simulator (docs/design.md: TigerBeetle's VOPR, turmoil's
//! fault vocabulary): the real sans-I/O [`coordinator::Coordinator`] and real
//! [`node::Replica`]s run in one thread over an in-memory network, and every choice — which
//! message moves next, which is held back or duplicated, which link breaks, which node
//! crashes or restarts and when — is drawn from one `u64` seed. A run is a pure function of
//! its seed, so a failing seed replays exactly (`glass sim --seed S --seeds 1`).
//!
//! It checks the paper's Section 5.3 claim under faults: replicas that execute the same
//! transactions in timestamp order stay identical without a log, a failed replica is
//! rebuilt by copying a live one, and nothing acknowledged is lost.
//!
//! Modules:
//! - [`population`]: the tiny TPC-C population, loaded once per process and copied per run;
//! - [`net`]: the in-flight messages of every node–coordinator link, and the link faults;
//! - [`cluster`]: the simulated cluster — coordinator, nodes, replicas, rejoin — and its
//!   steps;
//! - [`check`]: the checkers run on a healed cluster; [`error`]: why one failed ([`SimError`]);
//! - [`run`]: one seeded run (faults, then heal, then checks) and its report.
//!
//! Scaled populations are for simulation only: they are not TPC-C compliant.

pub mod check;
pub mod cluster;
pub mod disk;
pub mod error;
pub mod net;
pub mod population;
pub mod run;

pub use cluster::{Faults, Sim};
pub use error::SimError;
pub use run::{check_healed, heal, run_seed, SeedFailure, SeedReport, SimOptions};
