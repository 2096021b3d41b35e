//! Planted divergences, for tests only (docs/design.md §14, "Planted divergences"): a test
//! built with the `plant` feature switches one protocol rule off, on the current thread, and
//! shows that the simulator then fails. Each [`Plant`] names a rule that once lived in only
//! one of the two carriers (the processes' or the simulator's) and now lives in the shared
//! machine or carrier code that both run.
//!
//! Guarantees: without the feature, [`planted`] is the constant `false` and no rule can be
//! switched off; with it, a plant holds only on the thread that set it, and only until its
//! [`Planted`] guard is dropped (the simulator runs a seed on one thread, so tests running
//! at once do not see each other's plants).

/// A protocol rule a test may switch off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// The node machine never asks its carrier to dial a coordinator again after a failed
    /// dial or a broken link (`NodeMachine::tick` emits no `NodeEffect::Dial`): the rule the
    /// node process once kept on a timer of its own.
    NoRedial,
    /// The node machine never dials a backup's node again after a failed dial
    /// (`NodeMachine::tick` emits no `NodeEffect::DialPeer`): the rule the node process once
    /// kept in its peer link's own retry loop.
    NoPeerRedial,
    /// The coordinator's carrier keeps the link of a node it declared failed (it closed only
    /// a lagging node's link): the rule the simulator once kept apart from the process.
    KeepFailedNodeLinked,
}

/// Whether `plant` is switched on for this thread (never, without the `plant` feature).
#[inline]
pub fn planted(plant: Plant) -> bool {
    #[cfg(feature = "plant")]
    {
        PLANTED.with(|p| p.get() == Some(plant))
    }
    #[cfg(not(feature = "plant"))]
    {
        let _ = plant;
        false
    }
}

#[cfg(feature = "plant")]
thread_local! {
    static PLANTED: std::cell::Cell<Option<Plant>> = const { std::cell::Cell::new(None) };
}

/// Switches `plant` on for this thread until the guard is dropped.
#[cfg(feature = "plant")]
pub fn plant(plant: Plant) -> Planted {
    PLANTED.with(|p| p.set(Some(plant)));
    Planted(())
}

/// Switches the thread's plant off when dropped.
#[cfg(feature = "plant")]
#[derive(Debug)]
pub struct Planted(());

#[cfg(feature = "plant")]
impl Drop for Planted {
    fn drop(&mut self) {
        PLANTED.with(|p| p.set(None));
    }
}
