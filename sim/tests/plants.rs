//! Planted divergences (docs/design.md §14): each test switches one protocol rule off — a
//! rule that once lived in only one of the two carriers and now lives in the machine or
//! carrier code that the processes and the simulator both run — and shows that the
//! simulator then fails a seed that passes with the rule in place. A rule the simulator did
//! not run could be switched off without any seed noticing.
//!
//! The plants are thread-local (`wire::plant`) and a seed runs on the calling thread, so
//! these tests do not disturb one another.

use sim::{run_seed, SimOptions};
use wire::config::Mode;
use wire::plant::{plant, Plant};

/// Seeds tried, at most, before a planted rule must have made one fail.
const SEEDS_MAX: u64 = 200;

/// With one and with three coordinators in `mode`: the first of seeds `1..=SEEDS_MAX` that
/// fails with `rule` switched off, which must pass with the rule in place (printed, with why
/// it failed).
fn fails_without(rule: Plant, mode: Mode) {
    for coordinators in [1, 3] {
        let opts = SimOptions { coordinators, mode, ..SimOptions::default() };
        let failure = (1..=SEEDS_MAX).find_map(|seed| {
            let _planted = plant(rule);
            run_seed(seed, &opts).err().map(|f| (seed, f.reason))
        });
        let Some((seed, reason)) = failure else {
            panic!("{rule:?}: no seed of 1..={SEEDS_MAX} failed; the simulator does not run this rule");
        };
        if let Err(e) = run_seed(seed, &opts) {
            panic!("seed {seed} fails with every rule in place too: {}", e.reason);
        }
        eprintln!("{rule:?}, {mode}, {coordinators} coordinator(s): seed {seed} fails: {reason}");
    }
}

/// The node machine decides when a node dials a coordinator again (`NodeEffect::Dial`); the
/// node process once redialled on a timer of its own. Without the machine's redial, a node
/// whose link broke never comes back and the cluster does not heal.
#[test]
fn a_node_machine_that_never_redials_fails_the_simulator() {
    fails_without(Plant::NoRedial, Mode::ActiveActive);
}

/// The coordinator's carrier closes the link of every node it declares failed, so a live
/// but excluded node learns it was excluded and rejoins by itself; the simulator once closed
/// only a lagging node's link. With the rule switched off, the heal finds a live process
/// still on the link it was declared failed on (`SimError::FailedButLinked`). Live nodes are
/// declared failed most often in active-passive (a backup silent while it catches up).
#[test]
fn a_carrier_that_keeps_a_failed_node_linked_fails_the_simulator() {
    fails_without(Plant::KeepFailedNodeLinked, Mode::ActivePassive);
}

/// The node machine decides when a primary's node dials a backup's node again
/// (`NodeEffect::DialPeer`); the node process once retried in its peer link's own loop, and
/// the simulator's link reached the backup at once or never. Without the machine's redial, a
/// link whose first dial found the backup's process down never comes up: what is shipped on
/// it waits there for good.
#[test]
fn a_node_machine_that_never_redials_a_backup_fails_the_simulator() {
    fails_without(Plant::NoPeerRedial, Mode::ActivePassive);
}
