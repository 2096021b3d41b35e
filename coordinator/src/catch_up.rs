//! The catch-up admission policy of docs/design.md §10, "Catching up under load": while a
//! replica of a partition rejoins — it copies a live replica's state, then executes the
//! batches it held meanwhile — the coordinator admits fewer transactions on the partition
//! than it did before, so that the joiner, executing no faster than the survivors, gains on
//! them instead of trailing them for ever under a saturating closed-loop load.
//!
//! It owns, per partition ([`CatchUp`]):
//! - an admitted-rate [`Meter`]: the transactions admitted on the partition (a
//!   multi-partition transaction counts on each partition it touches) in 100 ms buckets over
//!   the last second;
//! - while a replica of the partition rejoins, a [`Throttle`]: a token bucket refilled at
//!   `(100 − share) %` of the rate the meter saw before the rejoin plan, with
//!   `share = catch_up_share_pct` until `catch_up_deadline_ms` after the plan and
//!   `catch_up_share_after_deadline_pct` past it.
//!
//! Guarantees:
//! - `catch_up_share_pct = 0` starts no throttle, ever: admission is as if this module did
//!   not exist (the meter still counts);
//! - while a throttle runs, the partition admits at most `capacity + rate × elapsed`
//!   transactions (`capacity`: 10 ms at the rate, at least `batch_txns_max`); a refusal
//!   takes no token and keeps nothing — the caller answers `Busy`, as the sequencer's
//!   in-flight limit does;
//! - the base is the rate the partition typically admitted before a replica failed: the
//!   median of the last [`SECONDS`] whole seconds, or the last second's rate when that is
//!   higher or there is no whole second yet ([`Meter::typical_txn_per_s`]), so a stall just
//!   before the failure does not make the base next to nothing; with no failure noted, the
//!   rate of the second before the plan (or of the time since the first admission, when
//!   shorter); a catch-up beginning within a second of another's end takes at least that
//!   one's base;
//! - it never stalls a partition: the rate is at least one transaction a second, and a
//!   partition that admitted nothing in the second before the plan is allowed one batch
//!   every 10 ms;
//! - the hot path ([`CatchUp::allows`], [`CatchUp::admitted`]) is a few integer operations,
//!   with no allocation and no lookup;
//! - each catch-up reports [`Event::CatchUpBegan`], [`Event::CatchUpHarder`] at the
//!   deadline, and [`Event::CatchUpEnded`] with its length and the transactions it refused,
//!   the last once no replica of the partition is rejoining any more (every joiner rejoined,
//!   failed, or had its plan dropped) or the partition stopped or lost its replicas;
//! - no clock, no I/O: time is the `now_us` the coordinator receives; a clock going back is
//!   read as standing still.

use wire::config::Limits;
use wire::messages::{NodeId, PartitionId};

use crate::leader::Event;

/// Width of one meter bucket, in microseconds.
pub const BUCKET_US: u64 = 100_000;
/// Buckets the meter keeps: one second.
pub const BUCKETS: usize = 10;
/// Whole seconds the meter keeps, for the typical rate a catch-up takes as its base.
pub const SECONDS: usize = 10;
/// One transaction's worth of tokens (the bucket counts millionths of a transaction, so that
/// a refill is `elapsed_us × txn_per_s` with no division).
const TOKEN: u64 = 1_000_000;
const US_PER_S: u64 = 1_000_000;
/// Halvings of the throttle's rate that shipping pressure may stack
/// ([`CatchUp::slow_down`]): at most down to 1/32 of the policy's rate.
pub const SLOWDOWN_HALVINGS_MAX: u32 = 5;
/// Shipping pressure halves the rate at most this often, and with none for this long one
/// halving is taken back.
pub const SLOWDOWN_STEP_US: u64 = 250_000;
pub const SLOWDOWN_EASE_US: u64 = 1_000_000;

/// The policy of `cluster.toml`'s `[limits]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUpPolicy {
    /// Percent of the pre-rejoin rate given up while catching up (0: no throttle).
    pub share_pct: u32,
    /// After this long since the plan, still catching up, give up `share_after_deadline_pct`.
    pub deadline_us: u64,
    pub share_after_deadline_pct: u32,
    /// The smallest burst the throttle lets through (a full batch).
    pub batch_txns_max: u64,
}

impl CatchUpPolicy {
    /// The policy of `cluster.toml`.
    pub fn from_config(limits: &Limits) -> CatchUpPolicy {
        CatchUpPolicy {
            share_pct: limits.catch_up_share_pct.min(100),
            deadline_us: limits.catch_up_deadline_ms.saturating_mul(1_000),
            share_after_deadline_pct: limits.catch_up_share_after_deadline_pct.clamp(limits.catch_up_share_pct, 100),
            batch_txns_max: u64::from(limits.batch_txns_max.max(1)),
        }
    }

    /// Whether the policy is off (`catch_up_share_pct = 0`).
    pub fn is_off(&self) -> bool {
        self.share_pct == 0
    }

    /// Transactions per second admitted while `share_pct` percent of `base_txn_per_s` is
    /// given up: never zero, and one batch every 10 ms for a partition that was idle.
    pub fn allowed_txn_per_s(&self, base_txn_per_s: u64, share_pct: u32) -> u64 {
        if base_txn_per_s == 0 {
            return self.batch_txns_max * 100;
        }
        let keep = u64::from(100u32.saturating_sub(share_pct));
        (base_txn_per_s.saturating_mul(keep) / 100).max(1)
    }

    /// The throttle's burst at `txn_per_s`, in tokens: 10 ms worth, at least a batch.
    fn capacity(&self, txn_per_s: u64) -> u64 {
        (txn_per_s / 100).max(self.batch_txns_max).saturating_mul(TOKEN)
    }
}

/// Transactions admitted on one partition, in [`BUCKETS`] buckets of [`BUCKET_US`], and in
/// the [`SECONDS`] whole seconds before.
#[derive(Debug, Clone, Default)]
pub struct Meter {
    /// Admissions per bucket; bucket number `n` is slot `n % BUCKETS`.
    counts: [u32; BUCKETS],
    /// The number (`now_us / BUCKET_US`) of the latest bucket counted into.
    bucket: u64,
    /// Admissions per second; second number `n` (`now_us / 1 s`) is slot `n % SECONDS`.
    seconds: [u32; SECONDS],
    /// When the first admission was counted (`None`: none yet).
    since_us: Option<u64>,
}

impl Meter {
    /// A meter that has seen nothing.
    pub fn new() -> Meter {
        Meter::default()
    }

    /// Counts one admission at `now_us`.
    #[inline]
    pub fn record(&mut self, now_us: u64) {
        let bucket = now_us / BUCKET_US;
        if bucket > self.bucket || self.since_us.is_none() {
            self.advance(bucket, now_us);
        }
        let slot = &mut self.counts[(self.bucket % BUCKETS as u64) as usize];
        *slot = slot.saturating_add(1);
        let second = &mut self.seconds[(self.second() % SECONDS as u64) as usize];
        *second = second.saturating_add(1);
    }

    /// The number of the latest second counted into.
    fn second(&self) -> u64 {
        self.bucket * BUCKET_US / US_PER_S
    }

    /// Moves to bucket `bucket`, emptying the slots of the buckets skipped (at most every
    /// 100 ms).
    #[cold]
    fn advance(&mut self, bucket: u64, now_us: u64) {
        let second = bucket * BUCKET_US / US_PER_S;
        if self.since_us.is_none() {
            self.since_us = Some(now_us);
            self.counts = [0; BUCKETS];
            self.seconds = [0; SECONDS];
        } else {
            if bucket - self.bucket >= BUCKETS as u64 {
                self.counts = [0; BUCKETS];
            } else {
                for n in self.bucket + 1..=bucket {
                    self.counts[(n % BUCKETS as u64) as usize] = 0;
                }
            }
            if second - self.second() >= SECONDS as u64 {
                self.seconds = [0; SECONDS];
            } else {
                for n in self.second() + 1..=second {
                    self.seconds[(n % SECONDS as u64) as usize] = 0;
                }
            }
        }
        self.bucket = bucket;
    }

    /// The rate the partition typically admits, as of the last admission: the median of the
    /// whole seconds counted in the [`SECONDS`] before it (those after the first admission's
    /// second), or the last second's rate if that is higher (a load still rising) or no whole
    /// second was counted yet. A stall just before — the failure of a replica is often
    /// preceded by one — does not make it the base of a throttle that would then admit next
    /// to nothing (`glass failover --mode active-passive` at 4 warehouses: a 0.9 s stall
    /// before the kill made the base 71 txn/s instead of ~50,000, and the partition next to
    /// idle for 4.5 s while the node rejoined).
    pub fn typical_txn_per_s(&self) -> u64 {
        let latest = self.latest_txn_per_s();
        let Some(since_us) = self.since_us else { return 0 };
        let first = (since_us / US_PER_S + 1).max((self.second() + 1).saturating_sub(SECONDS as u64));
        let mut whole: Vec<u32> = (first..self.second()).map(|n| self.seconds[(n % SECONDS as u64) as usize]).collect();
        if whole.is_empty() {
            return latest;
        }
        whole.sort_unstable();
        u64::from(whole[whole.len() / 2]).max(latest)
    }

    /// [`Meter::txn_per_s`] as of the last admission's bucket.
    pub fn latest_txn_per_s(&self) -> u64 {
        self.txn_per_s((self.bucket + 1) * BUCKET_US)
    }

    /// Transactions per second admitted over the second before `now_us` — over the time since
    /// the first admission when that is shorter (at least one bucket's time); 0 if nothing
    /// was ever admitted.
    pub fn txn_per_s(&self, now_us: u64) -> u64 {
        let Some(since_us) = self.since_us else { return 0 };
        let now_bucket = (now_us / BUCKET_US).max(self.bucket);
        // The window: the current bucket (partial) and the nine before it.
        let first = (now_bucket + 1).saturating_sub(BUCKETS as u64);
        let admitted: u64 = (first..=self.bucket).map(|n| u64::from(self.counts[(n % BUCKETS as u64) as usize])).sum();
        let window_start_us = (first * BUCKET_US).max(since_us);
        let window_us = now_us.max(self.bucket * BUCKET_US).saturating_sub(window_start_us).max(BUCKET_US);
        admitted.saturating_mul(US_PER_S) / window_us
    }
}

/// The token bucket of one catch-up.
#[derive(Debug, Clone)]
pub struct Throttle {
    /// The first joiner, when it began.
    node: NodeId,
    began_us: u64,
    /// When the share becomes the after-deadline one.
    deadline_us: u64,
    /// Whether [`Event::CatchUpHarder`] was reported.
    harder: bool,
    base_txn_per_s: u64,
    share_pct: u32,
    share_after_deadline_pct: u32,
    /// Refill rates before and after the deadline, in transactions per second.
    txn_per_s: u64,
    txn_per_s_after_deadline: u64,
    /// Tokens (millionths of a transaction) and their bounds before and after the deadline.
    tokens: u64,
    capacity: u64,
    capacity_after_deadline: u64,
    /// When the tokens were last refilled.
    refilled_us: u64,
    /// Admissions refused.
    refused_txns: u64,
    /// Halvings of the refill rate for shipping pressure, and when the last was taken or
    /// eased ([`CatchUp::slow_down`]).
    halvings: u32,
    halved_us: u64,
}

impl Throttle {
    /// A throttle for a catch-up of `node` beginning at `now_us`, after the partition
    /// admitted `base_txn_per_s`: its bucket starts full.
    pub fn new(policy: &CatchUpPolicy, node: NodeId, base_txn_per_s: u64, now_us: u64) -> Throttle {
        let txn_per_s = policy.allowed_txn_per_s(base_txn_per_s, policy.share_pct);
        let txn_per_s_after_deadline = policy.allowed_txn_per_s(base_txn_per_s, policy.share_after_deadline_pct);
        let capacity = policy.capacity(txn_per_s);
        Throttle {
            node,
            began_us: now_us,
            deadline_us: now_us.saturating_add(policy.deadline_us),
            harder: false,
            base_txn_per_s,
            share_pct: policy.share_pct,
            share_after_deadline_pct: policy.share_after_deadline_pct,
            txn_per_s,
            txn_per_s_after_deadline,
            tokens: capacity,
            capacity,
            capacity_after_deadline: policy.capacity(txn_per_s_after_deadline),
            refilled_us: now_us,
            refused_txns: 0,
            halvings: 0,
            halved_us: now_us,
        }
    }

    /// Adds the tokens earned since the last refill: at one rate before the deadline, at the
    /// other after it.
    #[inline]
    fn refill(&mut self, now_us: u64) {
        if now_us <= self.refilled_us {
            return;
        }
        if self.halvings > 0 && now_us.saturating_sub(self.halved_us) >= SLOWDOWN_EASE_US {
            self.halvings -= 1;
            self.halved_us = now_us;
        }
        let before = now_us.min(self.deadline_us).saturating_sub(self.refilled_us);
        let after = now_us.saturating_sub(self.refilled_us.max(self.deadline_us));
        let earned =
            before.saturating_mul(self.txn_per_s).saturating_add(after.saturating_mul(self.txn_per_s_after_deadline))
                >> self.halvings;
        let capacity = if now_us >= self.deadline_us { self.capacity_after_deadline } else { self.capacity };
        self.tokens = self.tokens.saturating_add(earned).min(capacity);
        self.refilled_us = now_us;
    }

    /// Whether a transaction may be admitted at `now_us` (a refusal is counted).
    #[inline]
    pub fn allows(&mut self, now_us: u64) -> bool {
        self.refill(now_us);
        if self.tokens >= TOKEN {
            return true;
        }
        self.refused_txns += 1;
        false
    }

    /// A transaction was admitted: it takes a token.
    #[inline]
    pub fn take(&mut self) {
        self.tokens = self.tokens.saturating_sub(TOKEN);
    }

    /// The share of the pre-rejoin rate given up at `now_us`, in percent.
    pub fn share_pct(&self, now_us: u64) -> u32 {
        if now_us >= self.deadline_us {
            self.share_after_deadline_pct
        } else {
            self.share_pct
        }
    }

    /// Transactions per second admitted at `now_us` (tokens aside), shipping pressure
    /// included.
    pub fn txn_per_s(&self, now_us: u64) -> u64 {
        let rate = if now_us >= self.deadline_us { self.txn_per_s_after_deadline } else { self.txn_per_s };
        (rate >> self.halvings).max(1)
    }

    /// Halvings of the rate shipping pressure has stacked now.
    pub fn halvings(&self) -> u32 {
        self.halvings
    }

    /// The first joiner of the catch-up.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// When the catch-up began.
    pub fn began_us(&self) -> u64 {
        self.began_us
    }

    /// The rate the partition admitted before the catch-up began.
    pub fn base_txn_per_s(&self) -> u64 {
        self.base_txn_per_s
    }

    /// Admissions refused so far.
    pub fn refused_txns(&self) -> u64 {
        self.refused_txns
    }
}

/// One partition's meter and, while a replica of it catches up, its throttle.
#[derive(Debug, Clone)]
pub struct CatchUp {
    policy: CatchUpPolicy,
    meter: Meter,
    throttle: Option<Throttle>,
    /// The base rate of the last catch-up and when it ended: a catch-up beginning less than a
    /// second later takes at least that base, not the rate its predecessor throttled (a
    /// joiner failing and asking again would otherwise compound the shares).
    last: Option<(u64, u64)>,
    /// The admitted rate over the second before a replica of the partition failed: the rate
    /// the partition sustains with every replica, which the next catch-up takes as its base.
    /// (Measured after the failure instead, the base would include what the failed replica's
    /// share of shared cores gave the survivors: on one machine, 1.3–2× the rate with every
    /// replica, and a throttle at 75% of it throttles nothing.)
    before_failure: Option<u64>,
}

impl CatchUp {
    /// A partition's, under `policy`: no throttle yet.
    pub fn new(policy: CatchUpPolicy) -> CatchUp {
        CatchUp { policy, meter: Meter::new(), throttle: None, last: None, before_failure: None }
    }

    /// Whether a transaction may be admitted at `now_us`: always, unless a throttle runs and
    /// has no token left (the refusal is counted; the caller answers `Busy`). Takes nothing:
    /// [`CatchUp::admitted`] does, once the transaction is admitted everywhere it goes.
    #[inline]
    pub fn allows(&mut self, now_us: u64) -> bool {
        self.throttle.as_mut().is_none_or(|t| t.allows(now_us))
    }

    /// A transaction (or a multi-partition transaction's piece) was admitted at `now_us`.
    #[inline]
    pub fn admitted(&mut self, now_us: u64) {
        self.meter.record(now_us);
        if let Some(t) = &mut self.throttle {
            t.take();
        }
    }

    /// Brings the throttle in line with the partition at `now_us`: `joiner` is a replica of
    /// it rejoining (`None`: none is, or the partition stopped or has no live replica). A
    /// throttle begins when a replica starts rejoining (the policy on), ends when none is
    /// rejoining any more, and gives up the after-deadline share past the deadline. Returns
    /// what to report.
    pub fn watch(&mut self, partition: PartitionId, joiner: Option<NodeId>, now_us: u64) -> Option<Event> {
        match (&mut self.throttle, joiner) {
            (None, Some(node)) if !self.policy.is_off() => {
                let recent = self.last.filter(|&(_, ended_us)| now_us.saturating_sub(ended_us) < US_PER_S);
                let measured = self.before_failure.take().unwrap_or_else(|| self.meter.txn_per_s(now_us));
                let base_txn_per_s = measured.max(recent.map_or(0, |(base, _)| base));
                let t = Throttle::new(&self.policy, node, base_txn_per_s, now_us);
                let share_pct = t.share_pct;
                self.throttle = Some(t);
                Some(Event::CatchUpBegan { partition, node, base_txn_per_s, share_pct })
            }
            (Some(t), None) => {
                let elapsed_ms = now_us.saturating_sub(t.began_us) / 1_000;
                let refused_txns = t.refused_txns;
                self.last = Some((t.base_txn_per_s, now_us));
                self.throttle = None;
                Some(Event::CatchUpEnded { partition, elapsed_ms, refused_txns })
            }
            (Some(t), Some(_)) if !t.harder && now_us >= t.deadline_us => {
                t.harder = true;
                Some(Event::CatchUpHarder { partition, share_pct: t.share_after_deadline_pct })
            }
            _ => None,
        }
    }

    /// A replica of the partition failed: the rate it typically admitted before (as of the
    /// last admission, [`Meter::typical_txn_per_s`]) is the next catch-up's base. A later failure before that catch-up
    /// keeps the first one's.
    pub fn note_failure(&mut self) {
        if self.before_failure.is_none() && self.throttle.is_none() {
            self.before_failure = Some(self.meter.typical_txn_per_s()).filter(|&r| r > 0);
        }
    }

    /// A primary's queue of shipments to `backup` is long ([`NodeToCoordinator::ShippingBehind`]
    /// at `now_us`): if `backup` is the joiner this partition's throttle runs for, its rate is
    /// halved (at most every [`SLOWDOWN_STEP_US`], down to 1/2^[`SLOWDOWN_HALVINGS_MAX`]) and
    /// the tokens it holds are spent. Each [`SLOWDOWN_EASE_US`] with no further pressure gives
    /// one halving back. A joiner installing a copy on a node short of CPU reads its
    /// shipments more slowly than the partition commits even at the policy's rate: without
    /// this, the primary's queue fills and the joiner is dropped from shipping and fails
    /// (docs/design.md §10, "Catching up under load"). Returns the event to report.
    ///
    /// [`NodeToCoordinator::ShippingBehind`]: wire::channel::control::NodeToCoordinator::ShippingBehind
    pub fn slow_down(&mut self, partition: PartitionId, backup: NodeId, queued: u32, now_us: u64) -> Option<Event> {
        let t = self.throttle.as_mut().filter(|t| t.node == backup)?;
        t.refill(now_us);
        if t.halvings > 0 && now_us.saturating_sub(t.halved_us) < SLOWDOWN_STEP_US {
            return None;
        }
        t.halvings = (t.halvings + 1).min(SLOWDOWN_HALVINGS_MAX);
        t.halved_us = now_us;
        t.tokens = 0;
        let txn_per_s = t.txn_per_s(now_us);
        Some(Event::CatchUpSlowed { partition, backup, queued, txn_per_s })
    }

    /// When [`CatchUp::watch`] must next be called: the running throttle's deadline.
    pub fn deadline_us(&self) -> Option<u64> {
        self.throttle.as_ref().filter(|t| !t.harder).map(|t| t.deadline_us)
    }

    /// The running throttle, if a replica of the partition is catching up.
    pub fn throttle(&self) -> Option<&Throttle> {
        self.throttle.as_ref()
    }

    /// The partition's admitted rate over the last second, as of `now_us`.
    pub fn txn_per_s(&self, now_us: u64) -> u64 {
        self.meter.txn_per_s(now_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;
    const T0: u64 = 1_700_000_000 * S;

    fn policy(share_pct: u32, deadline_ms: u64, after_pct: u32) -> CatchUpPolicy {
        CatchUpPolicy {
            share_pct,
            deadline_us: deadline_ms * 1_000,
            share_after_deadline_pct: after_pct,
            batch_txns_max: 16,
        }
    }

    /// Offers one transaction every `every_us` from `from_us` to `to_us` (excluded); returns
    /// how many were admitted.
    fn offer(c: &mut CatchUp, from_us: u64, to_us: u64, every_us: u64) -> u64 {
        let mut admitted = 0;
        let mut now = from_us;
        while now < to_us {
            if c.allows(now) {
                c.admitted(now);
                admitted += 1;
            }
            now += every_us;
        }
        admitted
    }

    #[test]
    fn the_meter_counts_the_last_second() {
        let mut m = Meter::new();
        assert_eq!(m.txn_per_s(T0), 0, "nothing seen");
        // 5 000 per second for two seconds.
        for i in 0..10_000 {
            m.record(T0 + i * 200);
        }
        assert_eq!(m.txn_per_s(T0 + 2 * S), 5_000);
        assert_eq!(m.txn_per_s(T0 + 2 * S + 50_000), 4_500 * S / 950_000, "half a bucket of silence");
        // Less than a second of history: what it has.
        let mut m = Meter::new();
        for i in 0..1_000 {
            m.record(T0 + i * 300);
        }
        let r = m.txn_per_s(T0 + 300_000);
        assert!((3_300..=3_340).contains(&r), "{r}");
        // Silence for more than a second forgets everything; a clock going back counts in the
        // latest bucket.
        assert_eq!(m.txn_per_s(T0 + 3 * S), 0);
        m.record(T0 + 3 * S);
        m.record(T0 + 3 * S - 500_000);
        assert_eq!(m.txn_per_s(T0 + 3 * S + 100_000), 2, "two in the 0.9 s since the window began");
    }

    /// A stall just before a replica fails (found by `glass failover --mode active-passive`
    /// at 4 warehouses) leaves the catch-up's base at the rate the partition typically
    /// admitted, not at the stall's.
    #[test]
    fn a_stall_before_the_failure_does_not_become_the_base() {
        let mut c = CatchUp::new(policy(25, 10_000, 60));
        // 20 000 a second for five seconds, then 0.9 s of three admissions only.
        offer(&mut c, T0, T0 + 5 * S, 50);
        for i in 0..3 {
            c.admitted(T0 + 5 * S + 300_000 * i);
        }
        assert!(c.txn_per_s(T0 + 5 * S + 900_000) < 20, "the last second saw next to nothing");
        c.note_failure();
        let began = c.watch(1, Some(4), T0 + 8 * S);
        assert!(matches!(began, Some(Event::CatchUpBegan { base_txn_per_s: 20_000, .. })), "{began:?}");
        // A load still rising: the last second, above the median, is the base.
        let mut c = CatchUp::new(policy(25, 10_000, 60));
        offer(&mut c, T0, T0 + 3 * S, 100);
        offer(&mut c, T0 + 3 * S, T0 + 4 * S, 25);
        c.note_failure();
        assert!(matches!(c.watch(1, Some(4), T0 + 5 * S), Some(Event::CatchUpBegan { base_txn_per_s: 40_000, .. })));
        // Less than a whole second of history: the rate over it.
        let mut m = Meter::new();
        for i in 0..1_000 {
            m.record(T0 + 500_000 + i * 300);
        }
        assert_eq!(m.typical_txn_per_s(), m.latest_txn_per_s());
    }

    #[test]
    fn the_throttle_admits_the_kept_share_then_less_past_the_deadline() {
        let mut c = CatchUp::new(policy(25, 2_000, 60));
        assert_eq!(offer(&mut c, T0, T0 + S, 50), 20_000, "no throttle before a rejoin");
        let began = c.watch(1, Some(4), T0 + S);
        assert_eq!(began, Some(Event::CatchUpBegan { partition: 1, node: 4, base_txn_per_s: 20_000, share_pct: 25 }));
        assert_eq!(c.deadline_us(), Some(T0 + 3 * S));
        // 15 000 a second, plus the full bucket at the start (10 ms worth: 150), less the
        // fraction of a token earned in the last 50 µs, still in the bucket.
        assert_eq!(offer(&mut c, T0 + S, T0 + 2 * S, 50), 15_149);
        assert_eq!(offer(&mut c, T0 + 2 * S, T0 + 3 * S, 50), 15_000);
        assert_eq!(c.watch(1, Some(4), T0 + 3 * S), Some(Event::CatchUpHarder { partition: 1, share_pct: 60 }));
        assert_eq!(c.deadline_us(), None);
        assert_eq!(offer(&mut c, T0 + 3 * S, T0 + 4 * S, 50), 8_000);
        assert_eq!(c.watch(1, Some(4), T0 + 4 * S), None);
        let refused = 3 * 20_000 - 15_149 - 15_000 - 8_000;
        assert_eq!(
            c.watch(1, None, T0 + 4 * S),
            Some(Event::CatchUpEnded { partition: 1, elapsed_ms: 3_000, refused_txns: refused })
        );
        assert_eq!(offer(&mut c, T0 + 4 * S, T0 + 5 * S, 50), 20_000, "unthrottled again");
    }

    /// Shipping pressure from the joiner's primary halves the catch-up's rate, at most every
    /// `SLOWDOWN_STEP_US`; a second with none gives one halving back; pressure about another
    /// node, or with no catch-up running, changes nothing (docs/design.md §10).
    #[test]
    fn shipping_pressure_halves_the_rate_until_it_eases() {
        let mut c = CatchUp::new(policy(25, 10_000, 60));
        assert_eq!(c.slow_down(1, 4, 2_000, T0), None, "no catch-up runs");
        assert_eq!(offer(&mut c, T0, T0 + S, 50), 20_000);
        c.watch(1, Some(4), T0 + S);
        assert_eq!(c.slow_down(1, 5, 2_000, T0 + S), None, "another node is not the joiner");
        let slowed = |txn_per_s| Some(Event::CatchUpSlowed { partition: 1, backup: 4, queued: 2_000, txn_per_s });
        assert_eq!(c.slow_down(1, 4, 2_000, T0 + S), slowed(7_500));
        assert_eq!(c.slow_down(1, 4, 2_000, T0 + S + 100_000), None, "within one step");
        let t1 = T0 + S + SLOWDOWN_STEP_US;
        assert_eq!(c.slow_down(1, 4, 2_000, t1), slowed(3_750));
        // The tokens were spent: a second at a quarter of the policy's rate.
        let admitted = offer(&mut c, t1, t1 + S, 50);
        assert!((3_700..=3_750).contains(&admitted), "{admitted}");
        // No pressure for a second: one halving back, then the other.
        let admitted = offer(&mut c, t1 + S, t1 + 2 * S, 50);
        assert!((7_450..=7_650).contains(&admitted), "{admitted}");
        assert_eq!(c.throttle().map(Throttle::halvings), Some(1));
        offer(&mut c, t1 + 2 * S, t1 + 3 * S, 50);
        assert_eq!(c.throttle().map(Throttle::halvings), Some(0));
        let admitted = offer(&mut c, t1 + 3 * S, t1 + 4 * S, 50);
        assert!((14_900..=15_000).contains(&admitted), "{admitted}");
        // Never below 1/2^SLOWDOWN_HALVINGS_MAX of the policy's rate.
        for i in 0..10 {
            c.slow_down(1, 4, 4_000, t1 + 4 * S + i * SLOWDOWN_STEP_US);
        }
        assert_eq!(c.throttle().map(Throttle::halvings), Some(SLOWDOWN_HALVINGS_MAX));
        assert_eq!(c.throttle().map(|t| t.txn_per_s(t1 + 4 * S)), Some(15_000 >> SLOWDOWN_HALVINGS_MAX));
    }

    #[test]
    fn an_idle_partition_still_admits_a_batch_every_10_ms_and_the_policy_off_never_throttles() {
        let mut c = CatchUp::new(policy(25, 2_000, 60));
        assert!(matches!(c.watch(1, Some(2), T0), Some(Event::CatchUpBegan { base_txn_per_s: 0, .. })));
        // The full bucket (a batch), then 1 600 a second but for the last 10 µs' fraction.
        assert_eq!(offer(&mut c, T0, T0 + S, 10), 16 + 1_600 - 1);

        let mut c = CatchUp::new(policy(0, 2_000, 60));
        offer(&mut c, T0, T0 + S, 50);
        assert_eq!(c.watch(1, Some(2), T0 + S), None);
        assert!(c.throttle().is_none());
        assert_eq!(offer(&mut c, T0 + S, T0 + 2 * S, 50), 20_000);
        assert_eq!(c.watch(1, None, T0 + 2 * S), None);
    }

    #[test]
    fn a_catch_up_right_after_another_keeps_its_base() {
        let mut c = CatchUp::new(policy(25, 2_000, 60));
        offer(&mut c, T0, T0 + S, 50);
        c.watch(1, Some(2), T0 + S);
        offer(&mut c, T0 + S, T0 + 2 * S, 50);
        assert!(matches!(c.watch(1, None, T0 + 2 * S), Some(Event::CatchUpEnded { elapsed_ms: 1_000, .. })));
        // The joiner asks again at once: the base is the first catch-up's, not the 15 000 it
        // let through.
        let again = c.watch(1, Some(2), T0 + 2 * S);
        assert!(matches!(again, Some(Event::CatchUpBegan { base_txn_per_s: 20_000, .. })), "{again:?}");
        c.watch(1, None, T0 + 2 * S);
        // A second later, the meter's own.
        offer(&mut c, T0 + 2 * S, T0 + 3 * S + 100_000, 100);
        let later = c.watch(1, Some(2), T0 + 3 * S + 100_000);
        assert!(matches!(later, Some(Event::CatchUpBegan { base_txn_per_s: 10_000, .. })), "{later:?}");
    }

    #[test]
    fn a_refusal_takes_no_token() {
        let mut c = CatchUp::new(policy(50, 2_000, 60));
        offer(&mut c, T0, T0 + S, 1_000);
        c.watch(1, Some(2), T0 + S);
        // 500 a second, a burst of 16: the bucket drains, then refills one token every 2 ms.
        for _ in 0..16 {
            assert!(c.allows(T0 + S));
            c.admitted(T0 + S);
        }
        assert!(!c.allows(T0 + S));
        assert!(!c.allows(T0 + S + 1_999));
        assert!(c.allows(T0 + S + 2_000));
        assert_eq!(c.throttle().unwrap().refused_txns(), 2);
    }
}
