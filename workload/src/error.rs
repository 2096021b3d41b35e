//! Errors of the workload crate's generator configuration and dumps, as thiserror enums: every
//! failure is a variant carrying what went wrong (the offending name, value or path), never a
//! preformatted string. A load's errors are `engine::error::LoadError`.

use std::path::PathBuf;

/// A bad profile name, transaction mix or generator setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenError {
    #[error("unknown profile `{given}`; valid profiles: paper, standard")]
    UnknownProfile { given: String },
    #[error("empty entry in transaction mix `{mix}`; expected name=weight[,name=weight...]")]
    MixEmptyEntry { mix: String },
    #[error("mix entry `{entry}` is not of the form name=weight")]
    MixMissingWeight { entry: String },
    #[error("unknown transaction `{name}` in mix; valid names: neworder, payment, orderstatus, delivery, stocklevel")]
    MixUnknownName { name: String },
    #[error("transaction `{name}` appears more than once in the mix")]
    MixDuplicate { name: String },
    #[error("weight `{value}` of `{name}` is not a non-negative integer (at most {max})", max = u32::MAX)]
    MixNotInteger { name: String, value: String },
    #[error("the transaction mix has no weight: at least one transaction needs a weight above 0")]
    MixAllZero,
    #[error("{what} is {value}%, above 100%")]
    PercentOutOfRange { what: &'static str, value: u32 },
    #[error("the generator's warehouse range {start}..={end} is empty or includes warehouse 0")]
    BadWarehouses { start: u16, end: u16 },
    #[error("order lines per NewOrder must lie within 5..=15 (clause 2.4.1.3); got {min}..={max}")]
    BadOrderLines { min: u8, max: u8 },
    #[error("the home partition {first}..={last} is empty or not within the generator's warehouses {start}..={end}")]
    BadHomePartition { first: u16, last: u16, start: u16, end: u16 },
    #[error(
        "{pct}% of NewOrders should be multi-partition, but every warehouse is in the home partition {first}..={last}: \
         forcing multi-partition transactions needs a cluster of at least two partitions"
    )]
    NoForeignWarehouse { pct: u32, first: u16, last: u16 },
}

/// Why a dump failed. Files already written are removed; the target files are left as they
/// were before the dump.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("cannot create dump directory {}: {source}", path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot rename {} to {}: {source}", from.display(), to.display())]
    Rename { from: PathBuf, to: PathBuf, source: std::io::Error },
}
