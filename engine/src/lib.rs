//! glass's storage engine: the TPC-C schema and procedures, written once over the
//! [`storage::Storage`] trait, and the engines that implement it: the lean single-threaded
//! main-memory kernel ([`lean`]) and (later) the conventional stack. No networking; every
//! procedure is deterministic in its inputs.

pub mod arena;
pub mod btree;
pub mod check;
pub mod conventional;
pub mod digest;
pub mod distributed;
pub mod error;
pub mod lean;
pub mod procedures;
pub mod redo;
pub mod schema;
pub mod storage;

pub use error::{StorageError, TxnError};
pub use lean::LeanDb;
pub use storage::{Prefetch, ScanDir, Storage};
