//! One module per subcommand.

pub mod bench;
pub mod breakdown;
pub mod recover;
