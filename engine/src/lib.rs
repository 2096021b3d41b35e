//! glass's storage engine and TPC-C in one place: the schema ([`schema`]) and the five
//! procedures ([`procedures`]), written once over the [`storage::Storage`] trait; the seeded
//! loader ([`loader`]) and TPC-C's random functions ([`rng`]); input validation ([`input`]);
//! which warehouses and partitions a transaction touches and its pieces ([`distributed`]);
//! conflict classification ([`TxnError::is_conflict`]); the consistency checker ([`check`])
//! and what an acknowledged transaction leaves in the data ([`acks`]);
//! the state digest ([`digest`]); the redo records a passive primary ships ([`redo`]); and the
//! engines that implement the trait: the lean single-threaded main-memory kernel
//! ([`lean`]) and the conventional stack ([`conventional`]). No networking and no other
//! workspace crate; every procedure is deterministic in its inputs.

pub mod acks;
pub mod arena;
pub mod btree;
pub mod check;
pub mod conventional;
pub mod digest;
pub mod distributed;
pub mod error;
pub mod input;
pub mod lean;
pub mod loader;
pub mod procedures;
pub mod redo;
pub mod rng;
pub mod schema;
pub mod storage;

pub use error::{LoadError, StorageError, TxnError};
pub use lean::LeanDb;
pub use storage::{Prefetch, ScanDir, Storage};
