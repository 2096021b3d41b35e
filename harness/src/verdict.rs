//! The verdict policy of the experiments, in one place: when a run passed its checks, and
//! when losing acknowledged transactions to a failure is what a mode promises rather than a
//! defect. `glass compare`, `glass compare --failover`, `glass failover` and its kill loop all
//! judge by these functions, and exit non-zero when a run fails them.
//!
//! The rule for loss (the paper's Section 5.3, docs/design.md): active-active, synchronous
//! active-passive and the full stack answer only once every live replica holds the
//! transaction (or its log record is durable), so a failure must not lose an acknowledged
//! transaction; asynchronous active-passive answers once the primary committed, so a failed
//! primary may take its unshipped tail with it.

use wire::config::Replication;

/// Whether a failure of a node may lose acknowledged transactions under `replication`: only
/// in active-passive with asynchronous shipping.
pub fn loss_allowed(replication: &Replication) -> bool {
    match replication {
        Replication::ActivePassive { shipping } => !shipping.waits_for_backups(),
        Replication::ActiveActive | Replication::FullStack { .. } => false,
    }
}

/// What the checks after a run with a failure found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureOutcome {
    /// Acknowledged NewOrders and Payments missing from the data.
    pub lost_acknowledged: u64,
    /// Every partition's replicas agreed and the copy matched.
    pub digests_equal: bool,
    /// TPC-C's consistency conditions held.
    pub consistent: bool,
    /// Some transaction ran twice: the data holds more rows than the acknowledgements and
    /// the requests of unknown outcome account for (docs/design.md §11, "Exactly-once
    /// answers").
    pub ran_twice: bool,
}

/// Whether a run with a failure (a kill, a stop, a kill loop) passed: replicas equal,
/// consistency held, nothing ran twice, and nothing acknowledged lost unless the mode allows
/// it ([`loss_allowed`]).
pub fn failure_passed(replication: &Replication, o: FailureOutcome) -> bool {
    (o.lost_acknowledged == 0 || loss_allowed(replication)) && o.digests_equal && o.consistent && !o.ran_twice
}

/// Whether a run without a failure passed: replicas equal, consistency held (acknowledged
/// transactions all present), and reads on replicas matched where they were compared.
pub fn run_passed(digests_equal: bool, consistent: bool, replica_reads_consistent: Option<bool>) -> bool {
    digests_equal && consistent && replica_reads_consistent != Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::config::{FullStackConfig, Mode, Shipping};

    #[test]
    fn only_async_active_passive_may_lose_acknowledged_transactions() {
        for mode in Mode::ALL {
            for shipping in [Shipping::Sync, Shipping::Async] {
                let r = Replication::of(mode, shipping, FullStackConfig::default());
                let lost =
                    FailureOutcome { lost_acknowledged: 3, digests_equal: true, consistent: true, ran_twice: false };
                let allowed = match mode {
                    Mode::ActivePassive => shipping == Shipping::Async,
                    Mode::ActiveActive | Mode::FullStack => false,
                };
                assert_eq!(loss_allowed(&r), allowed);
                assert_eq!(failure_passed(&r, lost), allowed, "{mode} {shipping:?}");
                let none = FailureOutcome { lost_acknowledged: 0, ..lost };
                assert!(failure_passed(&r, none));
                assert!(!failure_passed(&r, FailureOutcome { digests_equal: false, ..none }));
                assert!(!failure_passed(&r, FailureOutcome { consistent: false, ..none }));
                assert!(!failure_passed(&r, FailureOutcome { ran_twice: true, ..none }));
            }
        }
    }

    #[test]
    fn a_run_fails_on_differing_digests_inconsistency_or_differing_replica_reads() {
        assert!(run_passed(true, true, None));
        assert!(run_passed(true, true, Some(true)));
        assert!(!run_passed(true, true, Some(false)));
        assert!(!run_passed(false, true, None));
        assert!(!run_passed(true, false, None));
    }
}
