//! How `glass breakdown` counts instructions for the paper's staircase (Figures 5 and 6,
//! docs/design.md §9): with the hardware counter where the machine has one, else with
//! callgrind children that re-execute the `glass` binary for one step each, else not at all —
//! and the line that says which ([`plan_line`]). The staircase itself is
//! `workload::breakdown`'s.
//!
//! Guarantees: the choice is made once, before any work; a plan that counts nothing carries its
//! reason (what was missing, and what to install where that is the cure), and the line says
//! `NOT COUNTED` with it.

use std::ffi::OsString;

use workload::breakdown::{callgrind, HwInstructions, InstrPlan};

use crate::error::HarnessError;
use crate::Result;

/// Hardware counters, else callgrind (a child per step, `glass` run with `worker_args` and
/// then the step's own), else nothing (with the reason); none with `no_instructions`
/// (`--no-instructions`).
pub fn choose_plan(no_instructions: bool, worker_args: Vec<OsString>) -> Result<InstrPlan> {
    if no_instructions {
        return Ok(InstrPlan::None { reason: "--no-instructions was given".into() });
    }
    let perf_error = match HwInstructions::open() {
        Ok(hw) => return Ok(InstrPlan::Perf(hw)),
        Err(e) => e.to_string(),
    };
    if !callgrind::SUPPORTED {
        return Ok(InstrPlan::None {
            reason: format!(
                "no hardware counter ({perf_error}), and callgrind client requests are only built for x86_64"
            ),
        });
    }
    match callgrind::valgrind_version() {
        Ok(valgrind) => Ok(InstrPlan::Callgrind {
            exe: std::env::current_exe()
                .map_err(|e| HarnessError::io("cannot find this executable to re-run it under valgrind", e))?,
            args: worker_args,
            valgrind,
            perf_error,
        }),
        Err(why) => Ok(InstrPlan::None {
            reason: format!(
                "no hardware counter ({perf_error}) and no valgrind to count with ({why}); install valgrind \
                 (apt-get install valgrind) for instruction counts"
            ),
        }),
    }
}

/// How instructions are counted, as said before the run (`count_warehouses`, `count_txns`:
/// what each callgrind child counts).
pub fn plan_line(plan: &InstrPlan, count_warehouses: u16, count_txns: u64) -> String {
    match plan {
        InstrPlan::Perf(_) => "instructions: hardware counter (perf_event_open)".into(),
        InstrPlan::Callgrind { valgrind, perf_error, .. } => format!(
            "instructions: no hardware counter ({perf_error});\n  counting with callgrind ({valgrind}), one child \
             per step at {count_warehouses} warehouse(s) and {count_txns} transactions per type (--count-warehouses, \
             --count-txns)"
        ),
        InstrPlan::None { reason } => format!("instructions: NOT COUNTED: {reason}; time only"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_without_counts_says_why() {
        let plan = choose_plan(true, Vec::new()).unwrap();
        assert_eq!(plan_line(&plan, 5, 500), "instructions: NOT COUNTED: --no-instructions was given; time only");
    }
}
