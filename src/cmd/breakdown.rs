//! `glass breakdown` (placeholder while it is being written).

use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct BreakdownArgs {}

pub fn run(_a: BreakdownArgs) -> Result<ExitCode> {
    bail!("glass breakdown is not built yet")
}
