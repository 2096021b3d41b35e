//! The coordinator's timestamp clock, as H-Store issues transaction ids: 64 bits of
//! milliseconds, a counter within the millisecond and the coordinator's id
//! ([`wire::Timestamp`]).
//!
//! Guarantees: timestamps are strictly increasing, whatever the milliseconds passed in do
//! (they may stand still or go backwards); they never read a clock — the caller passes the
//! current milliseconds — so tests and simulations replay exactly. When more than
//! [`Timestamp::COUNTER_MAX`]` + 1` timestamps are issued within one millisecond, the clock
//! runs ahead by a millisecond rather than repeat or wrap. One coordinator orders all
//! transactions, so H-Store's wait for earlier ids from other sites is not needed.

use wire::messages::{CoordinatorId, Timestamp};

/// Issues strictly increasing timestamps for one coordinator.
#[derive(Debug, Clone)]
pub struct TimestampClock {
    coordinator: CoordinatorId,
    /// Milliseconds of the last timestamp issued.
    millis: u64,
    /// Counter for the next timestamp within `millis`.
    next_counter: u64,
}

impl TimestampClock {
    /// A clock for coordinator `coordinator` that has issued nothing.
    pub fn new(coordinator: CoordinatorId) -> TimestampClock {
        TimestampClock { coordinator, millis: 0, next_counter: 0 }
    }

    /// A clock that only issues timestamps after `last` (a restarted coordinator resuming
    /// after the last timestamp it had issued).
    pub fn resume_after(coordinator: CoordinatorId, last: Timestamp) -> TimestampClock {
        TimestampClock { coordinator, millis: last.millis(), next_counter: last.counter() + 1 }
    }

    /// The coordinator id in the low bits of every timestamp.
    pub fn coordinator(&self) -> CoordinatorId {
        self.coordinator
    }

    /// The next timestamp, `now_ms` being the current time in milliseconds since the Unix
    /// epoch.
    ///
    /// Panics past the year 2248 (milliseconds beyond [`Timestamp::MILLIS_MAX`]).
    pub fn next(&mut self, now_ms: u64) -> Timestamp {
        if now_ms > self.millis {
            self.millis = now_ms;
            self.next_counter = 0;
        } else if self.next_counter > Timestamp::COUNTER_MAX {
            self.millis += 1;
            self.next_counter = 0;
        }
        let ts = Timestamp::new(self.millis, self.next_counter, self.coordinator);
        self.next_counter += 1;
        ts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn timestamps_carry_millis_counter_and_coordinator() {
        let mut c = TimestampClock::new(3);
        let a = c.next(1_000);
        let b = c.next(1_000);
        let d = c.next(1_002);
        assert_eq!((a.millis(), a.counter(), a.coordinator()), (1_000, 0, 3));
        assert_eq!((b.millis(), b.counter()), (1_000, 1));
        assert_eq!((d.millis(), d.counter()), (1_002, 0));
    }

    #[test]
    fn a_clock_going_backwards_does_not_reorder() {
        let mut c = TimestampClock::new(0);
        let a = c.next(5_000);
        let b = c.next(4_000);
        assert!(b > a);
        assert_eq!(b.millis(), 5_000);
    }

    #[test]
    fn an_exhausted_counter_runs_ahead_by_a_millisecond() {
        let mut c = TimestampClock::new(1);
        let mut last = c.next(10);
        for _ in 0..Timestamp::COUNTER_MAX {
            let t = c.next(10);
            assert!(t > last);
            last = t;
        }
        assert_eq!((last.millis(), last.counter()), (10, Timestamp::COUNTER_MAX));
        let t = c.next(10);
        assert_eq!((t.millis(), t.counter()), (11, 0));
        // Real time catching up does not repeat (11, 0).
        assert!(c.next(11) > t);
    }

    #[test]
    fn resuming_continues_after_the_last_timestamp() {
        let last = Timestamp::new(77, 5, 2);
        let mut c = TimestampClock::resume_after(2, last);
        assert!(c.next(70) > last);
        let last = Timestamp::new(77, Timestamp::COUNTER_MAX, 2);
        let mut c = TimestampClock::resume_after(2, last);
        assert_eq!(c.next(0), Timestamp::new(78, 0, 2));
    }

    proptest! {
        /// Whatever the sequence of clock readings, timestamps strictly increase.
        #[test]
        fn strictly_increasing(steps in proptest::collection::vec((0u64..3, any::<bool>()), 1..2_000)) {
            let mut c = TimestampClock::new(9);
            let mut now = 1_000_000u64;
            let mut last = None;
            for (delta, back) in steps {
                now = if back { now.saturating_sub(delta) } else { now + delta };
                let t = c.next(now);
                prop_assert!(last.is_none_or(|l| t > l));
                prop_assert_eq!(t.coordinator(), 9);
                last = Some(t);
            }
        }
    }
}
