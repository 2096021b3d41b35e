//! The TPC-C input generator: which transaction to run next and its inputs (clauses 2.4.1,
//! 2.5.1, 2.6.1, 2.7.1, 2.8.1), under either the paper's profile or the standard one.
//!
//! Owns: [`Profile`], [`Mix`] (the transaction mix and its command-line syntax),
//! [`GenConfig`] (every knob in one type; the profiles are just values of it) and
//! [`Generator`].
//!
//! Guarantees: the sequence of inputs is a pure function of the configuration, the run seed
//! and the load seed (the load seed fixes C_LOAD, from which the run's C_LAST constant is
//! chosen per clause 2.1.6.1); timestamps are parameters. Every warehouse an input names lies
//! in the configured range; a "remote" choice with a single warehouse falls back to the home
//! warehouse. Home warehouses lie in the home partition ([`GenConfig::home_partition`], the
//! whole range by default); remote warehouses (clauses 2.4.1.5, 2.5.1.2) are drawn uniformly
//! from every configured warehouse but the home one, so on a partitioned cluster the standard
//! profile produces multi-partition transactions as TPC-C does. On top of that,
//! [`GenConfig::multi_partition_pct`] percent of NewOrders have one order line supplied by a
//! warehouse of another partition (the H-Store experiment's knob); with a zero percentage the
//! stream is exactly what it was without the knob. Item ids, customer ids and last-name numbers are drawn over the configured
//! [`Scale`] (the TPC-C population by default, where the inputs are exactly the clause's; a
//! smaller scale is for simulation and tests only and is not TPC-C compliant). Every input
//! lies within TPC-C's input domains as `engine::input::check_input` enforces them (clauses
//! 2.4.1–2.8.1; tested over both profiles), given a date `ts` within
//! `engine::procedures::DATE_MIN..=DATE_MAX` — the callers pass `engine::loader::LOAD_TIMESTAMP` plus
//! seconds.

use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;

use engine::procedures::{
    CustomerSelector, DeliveryInput, NewOrderInput, OrderLineInput, OrderStatusInput, PaymentInput, StockLevelInput,
    TxnInput, TxnKind, DISTRICTS_PER_WAREHOUSE, ORDER_LINES_MAX, ORDER_LINES_MIN,
};

use crate::error::GenError;
use engine::loader::{Scale, ITEMS};
use engine::rng::{last_name, NuRandConstants, Rng, NURAND_A_C_ID, NURAND_A_C_LAST, NURAND_A_OL_I_ID};

/// The item id a rolled-back NewOrder carries as its last item: not a valid I_ID
/// (clause 2.4.1.4, "an unused value"). At a smaller [`Scale`] it is `scale.items + 1`
/// ([`GenConfig::unused_item_id`]).
pub const UNUSED_ITEM_ID: u32 = ITEMS + 1;

/// Stream identifier of the generator's random source (separates it from other uses of the
/// run seed).
const STREAM_GENERATOR: u64 = 0x4745_4E45_5241_544F; // "GENERATO"

/// A named set of generator settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    /// The Looking Glass paper's simplified TPC-C (Section 4): 50% NewOrder / 50% Payment,
    /// 10 local items per NewOrder, no rollbacks, Payment by C_ID in the home warehouse.
    Paper,
    /// Standard TPC-C (clauses 2.4–2.8, 5.2.3): 45/43/4/4/4, remote items and payments, last
    /// names, rollbacks.
    Standard,
}

impl Profile {
    pub const ALL: [Profile; 2] = [Profile::Paper, Profile::Standard];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Paper => "paper",
            Profile::Standard => "standard",
        }
    }

    /// Parses "paper" or "standard" (case-insensitive).
    pub fn parse(s: &str) -> Result<Profile, GenError> {
        let lower = s.trim().to_ascii_lowercase();
        Profile::ALL
            .into_iter()
            .find(|p| p.name() == lower)
            .ok_or_else(|| GenError::UnknownProfile { given: s.to_owned() })
    }

    /// The profile's transaction mix.
    pub fn mix(self) -> Mix {
        match self {
            Profile::Paper => Mix::PAPER,
            Profile::Standard => Mix::STANDARD,
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Profile {
    type Err = GenError;
    fn from_str(s: &str) -> Result<Profile, GenError> {
        Profile::parse(s)
    }
}

/// Relative weights of the five transactions, indexed by `TxnKind as usize`. A mix with a
/// zero total is rejected by [`Mix::new`], [`Mix::parse`] and [`Generator::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mix {
    pub weights: [u32; 5],
}

impl Mix {
    /// The paper's mix: 50% NewOrder, 50% Payment.
    pub const PAPER: Mix = Mix { weights: [50, 50, 0, 0, 0] };
    /// The standard minimum mix (clause 5.2.3): 45/43/4/4/4.
    pub const STANDARD: Mix = Mix { weights: [45, 43, 4, 4, 4] };

    /// A mix from weights indexed by `TxnKind as usize`; all zero is an error.
    pub fn new(weights: [u32; 5]) -> Result<Mix, GenError> {
        if weights.iter().all(|&w| w == 0) {
            return Err(GenError::MixAllZero);
        }
        Ok(Mix { weights })
    }

    /// Parses `name=weight[,name=weight...]` with names from neworder, payment, orderstatus,
    /// delivery, stocklevel (case-insensitive; spaces around names and weights are ignored).
    /// Names left out get weight 0; unknown or repeated names, weights that are not
    /// non-negative integers, and an all-zero total are errors.
    pub fn parse(s: &str) -> Result<Mix, GenError> {
        let mut weights = [0u32; 5];
        let mut seen = [false; 5];
        for entry in s.split(',') {
            let entry = entry.trim();
            if entry.is_empty() {
                return Err(GenError::MixEmptyEntry { mix: s.to_owned() });
            }
            let (name, value) =
                entry.split_once('=').ok_or_else(|| GenError::MixMissingWeight { entry: entry.to_owned() })?;
            let name = name.trim().to_ascii_lowercase();
            let value = value.trim();
            let kind = TxnKind::from_name(&name).ok_or_else(|| GenError::MixUnknownName { name: name.clone() })?;
            if std::mem::replace(&mut seen[kind as usize], true) {
                return Err(GenError::MixDuplicate { name });
            }
            // `u32::from_str` accepts a leading '+'; a weight is plain digits.
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(GenError::MixNotInteger { name, value: value.to_owned() });
            }
            weights[kind as usize] =
                value.parse().map_err(|_| GenError::MixNotInteger { name, value: value.to_owned() })?;
        }
        Mix::new(weights)
    }

    /// The weights, indexed by `TxnKind as usize`.
    pub fn weights(&self) -> [u32; 5] {
        self.weights
    }

    /// The weight of one transaction.
    pub fn weight(&self, kind: TxnKind) -> u32 {
        self.weights[kind as usize]
    }

    /// Sum of the weights.
    pub fn total(&self) -> u64 {
        self.weights.iter().map(|&w| u64::from(w)).sum()
    }

    /// The share of `kind`, in percent.
    pub fn percent(&self, kind: TxnKind) -> f64 {
        f64::from(self.weight(kind)) * 100.0 / self.total() as f64
    }

    /// Draws a transaction kind with probability weight / total.
    fn draw(&self, rng: &mut Rng) -> TxnKind {
        let mut r = rng.uniform(0, self.total() - 1);
        for kind in TxnKind::ALL {
            let w = u64::from(self.weights[kind as usize]);
            if r < w {
                return kind;
            }
            r -= w;
        }
        unreachable!("a draw below the total falls in some weight")
    }
}

/// Formats as [`Mix::parse`] reads: every transaction, in `TxnKind` order.
impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, kind) in TxnKind::ALL.into_iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}={}", kind.name(), self.weights[i])?;
        }
        Ok(())
    }
}

impl FromStr for Mix {
    type Err = GenError;
    fn from_str(s: &str) -> Result<Mix, GenError> {
        Mix::parse(s)
    }
}

/// Every setting of the generator. The profiles are values of this type
/// ([`GenConfig::for_profile`]); the generator never branches on the profile itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenConfig {
    /// The profile these settings started from (for reports).
    pub profile: Profile,
    /// Overrides the profile's mix when set.
    pub mix: Option<Mix>,
    /// The warehouses this generator may name: every one may be a remote warehouse
    /// (clauses 2.4.1.5, 2.5.1.2); home warehouses are drawn from [`GenConfig::home_partition`]
    /// (the whole range when that is `None`). A cluster terminal gets all of the cluster's
    /// warehouses here.
    pub warehouses: RangeInclusive<u16>,
    /// The warehouses of the home partition: a sub-range of `warehouses` holding every home
    /// warehouse ([`Generator::next`] draws from it; [`Generator::next_for`] refuses a home
    /// outside it). The other warehouses of `warehouses` are the *foreign* ones, those of
    /// other partitions, from which [`GenConfig::multi_partition_pct`] draws. `None`: one
    /// partition holds every warehouse (the embedded bench), so there is no foreign one.
    pub home_partition: Option<RangeInclusive<u16>>,
    /// Order lines per NewOrder (clause 2.4.1.3: 5–15; the paper: exactly 10). Within 5..=15:
    /// [`GenConfig::validate`] refuses anything else.
    pub order_lines: RangeInclusive<u8>,
    /// Percent of order lines supplied by another warehouse (clause 2.4.1.5: 1).
    pub remote_item_pct: u32,
    /// Percent of Payments whose customer is in another warehouse (clause 2.5.1.2: 15).
    pub remote_payment_pct: u32,
    /// Percent of Payments and OrderStatus selecting the customer by last name
    /// (clauses 2.5.1.2, 2.6.1.2: 60).
    pub by_last_name_pct: u32,
    /// Percent of NewOrders that roll back (clause 2.4.1.4: 1).
    pub rollback_pct: u32,
    /// Percent of NewOrders forced multi-partition (default 0; not a TPC-C setting): one
    /// order line, chosen uniformly, is supplied by a warehouse drawn uniformly from the
    /// foreign ones (outside [`GenConfig::home_partition`]). Applied after the line's usual
    /// draw, so a NewOrder may also have ordinary remote lines. Above 0 it needs a foreign
    /// warehouse, else [`Generator::new`] fails with [`GenError::NoForeignWarehouse`].
    pub multi_partition_pct: u32,
    /// The population the inputs name: item ids NURand(8191, 1, items), customer ids
    /// NURand(1023, 1, customers), last names NURand(255, 0, last_name_max). The profiles
    /// start at [`Scale::TPCC`]; a smaller one must match the database's load.
    pub scale: Scale,
}

impl GenConfig {
    /// The settings of `profile` over `warehouses`.
    pub fn for_profile(profile: Profile, warehouses: RangeInclusive<u16>) -> GenConfig {
        match profile {
            Profile::Paper => GenConfig {
                profile,
                mix: None,
                warehouses,
                home_partition: None,
                order_lines: 10..=10,
                remote_item_pct: 0,
                remote_payment_pct: 0,
                by_last_name_pct: 0,
                rollback_pct: 0,
                multi_partition_pct: 0,
                scale: Scale::TPCC,
            },
            Profile::Standard => GenConfig {
                profile,
                mix: None,
                warehouses,
                home_partition: None,
                order_lines: ORDER_LINES_MIN as u8..=ORDER_LINES_MAX as u8,
                remote_item_pct: 1,
                remote_payment_pct: 15,
                by_last_name_pct: 60,
                rollback_pct: 1,
                multi_partition_pct: 0,
                scale: Scale::TPCC,
            },
        }
    }

    /// These settings over a population of `scale` (simulation and tests only, unless
    /// [`Scale::TPCC`]).
    pub fn with_scale(mut self, scale: Scale) -> GenConfig {
        self.scale = scale;
        self
    }

    /// These settings with home warehouses in `home_partition`, a sub-range of the
    /// configured warehouses (the partition of a cluster terminal's home warehouse).
    pub fn with_home_partition(mut self, home_partition: RangeInclusive<u16>) -> GenConfig {
        self.home_partition = Some(home_partition);
        self
    }

    /// The range home warehouses are drawn from: the home partition, else every warehouse.
    pub fn home_range(&self) -> RangeInclusive<u16> {
        self.home_partition.clone().unwrap_or_else(|| self.warehouses.clone())
    }

    /// How many warehouses lie outside the home partition (0 without one).
    pub fn foreign_warehouses(&self) -> u32 {
        let len = |r: &RangeInclusive<u16>| (u32::from(*r.end()) + 1).saturating_sub(u32::from(*r.start()));
        len(&self.warehouses) - len(&self.home_range()).min(len(&self.warehouses))
    }

    /// The item id a rolled-back NewOrder names: one past the last item loaded.
    pub fn unused_item_id(&self) -> u32 {
        self.scale.items + 1
    }

    /// The mix in effect: the override, else the profile's.
    pub fn effective_mix(&self) -> Mix {
        self.mix.unwrap_or_else(|| self.profile.mix())
    }

    /// Checks the settings: a non-empty warehouse range without warehouse 0, a home partition
    /// (if any) that is a non-empty sub-range of it, a mix with a non-zero total, order lines
    /// within 5..=15 (clause 2.4.1.3), percentages at most 100, and a foreign warehouse when NewOrders are
    /// forced multi-partition.
    pub fn validate(&self) -> Result<(), GenError> {
        let (start, end) = (*self.warehouses.start(), *self.warehouses.end());
        if self.warehouses.is_empty() || start == 0 {
            return Err(GenError::BadWarehouses { start, end });
        }
        if let Some(home) = &self.home_partition {
            let (first, last) = (*home.start(), *home.end());
            if home.is_empty() || first < start || last > end {
                return Err(GenError::BadHomePartition { first, last, start, end });
            }
        }
        assert!(
            self.scale.items >= 1 && self.scale.customers_per_district >= 1,
            "an empty population: {:?}",
            self.scale
        );
        if let Some(mix) = &self.mix {
            Mix::new(mix.weights)?;
        }
        let (min, max) = (*self.order_lines.start(), *self.order_lines.end());
        if (min as usize) < ORDER_LINES_MIN || min > max || max as usize > ORDER_LINES_MAX {
            return Err(GenError::BadOrderLines { min, max });
        }
        for (what, value) in [
            ("remote_item_pct", self.remote_item_pct),
            ("remote_payment_pct", self.remote_payment_pct),
            ("by_last_name_pct", self.by_last_name_pct),
            ("rollback_pct", self.rollback_pct),
            ("multi_partition_pct", self.multi_partition_pct),
        ] {
            if value > 100 {
                return Err(GenError::PercentOutOfRange { what, value });
            }
        }
        if self.multi_partition_pct > 0 && self.foreign_warehouses() == 0 {
            let home = self.home_range();
            return Err(GenError::NoForeignWarehouse {
                pct: self.multi_partition_pct,
                first: *home.start(),
                last: *home.end(),
            });
        }
        Ok(())
    }
}

/// Produces transaction inputs, one at a time.
#[derive(Debug, Clone)]
pub struct Generator {
    cfg: GenConfig,
    mix: Mix,
    constants: NuRandConstants,
    rng: Rng,
}

impl Generator {
    /// A generator for `cfg`, drawing from `run_seed`; NURand's run constants are chosen
    /// against the C_LOAD of a database loaded with `load_seed` (clause 2.1.6.1).
    pub fn new(cfg: GenConfig, run_seed: u64, load_seed: u64) -> Result<Generator, GenError> {
        cfg.validate()?;
        let constants = NuRandConstants::for_run(&NuRandConstants::for_load(load_seed), run_seed);
        Ok(Generator { mix: cfg.effective_mix(), cfg, constants, rng: Rng::stream(run_seed, STREAM_GENERATOR) })
    }

    /// The configuration.
    pub fn config(&self) -> &GenConfig {
        &self.cfg
    }

    /// The transaction mix in effect.
    pub fn mix(&self) -> &Mix {
        &self.mix
    }

    /// The NURand constants of this run.
    pub fn constants(&self) -> NuRandConstants {
        self.constants
    }

    /// The next input, for a home warehouse drawn uniformly from the home partition (every
    /// configured warehouse without one); `ts` becomes the input's entry date or date.
    pub fn next(&mut self, ts: i64) -> TxnInput {
        let home = self.cfg.home_range();
        let (lo, hi) = (*home.start(), *home.end());
        let home = self.rng.uniform(u64::from(lo), u64::from(hi)) as u16;
        self.next_for(home, ts)
    }

    /// The next input for home warehouse `home_w` (a terminal's fixed warehouse).
    ///
    /// Panics if `home_w` is outside the configured range or the home partition.
    pub fn next_for(&mut self, home_w: u16, ts: i64) -> TxnInput {
        assert!(
            self.cfg.warehouses.contains(&home_w),
            "home warehouse {home_w} is outside the generator's range {:?}",
            self.cfg.warehouses
        );
        assert!(
            self.cfg.home_range().contains(&home_w),
            "home warehouse {home_w} is outside the generator's home partition {:?}",
            self.cfg.home_range()
        );
        match self.mix.draw(&mut self.rng) {
            TxnKind::NewOrder => TxnInput::NewOrder(self.new_order(home_w, ts)),
            TxnKind::Payment => TxnInput::Payment(self.payment(home_w, ts)),
            TxnKind::OrderStatus => TxnInput::OrderStatus(self.order_status(home_w)),
            TxnKind::Delivery => TxnInput::Delivery(self.delivery(home_w, ts)),
            TxnKind::StockLevel => TxnInput::StockLevel(self.stock_level(home_w)),
        }
    }

    fn district(&mut self) -> u8 {
        self.rng.uniform(1, u64::from(DISTRICTS_PER_WAREHOUSE)) as u8
    }

    fn c_id(&mut self) -> u32 {
        self.rng.nurand(NURAND_A_C_ID, 1, self.cfg.scale.customers_per_district, self.constants.c_id)
    }

    /// A warehouse of the range other than `home`, or `home` when it is the only one.
    fn other_warehouse(&mut self, home: u16) -> u16 {
        let (lo, hi) = (*self.cfg.warehouses.start(), *self.cfg.warehouses.end());
        if lo == hi {
            return home;
        }
        let w = self.rng.uniform(u64::from(lo), u64::from(hi) - 1) as u16;
        if w >= home {
            w + 1
        } else {
            w
        }
    }

    /// A warehouse outside the home partition, uniformly ([`GenConfig::validate`] ensured one
    /// exists when this is called).
    fn foreign_warehouse(&mut self) -> u16 {
        let (lo, hi) = (*self.cfg.warehouses.start(), *self.cfg.warehouses.end());
        let home = self.cfg.home_range();
        let (first, last) = (*home.start(), *home.end());
        let foreign = u64::from(self.cfg.foreign_warehouses());
        debug_assert!(foreign > 0, "no warehouse outside the home partition {home:?}");
        // Below the home partition: lo..first; above it: last+1..=hi.
        let k = self.rng.uniform(0, foreign - 1);
        let below = u64::from(first - lo);
        let w = if k < below { u64::from(lo) + k } else { u64::from(last) + 1 + (k - below) };
        debug_assert!(w <= u64::from(hi) && !home.contains(&(w as u16)));
        w as u16
    }

    /// By last name `by_last_name_pct` of the time (C_LAST from NURand(255,0,999)), else by
    /// C_ID NURand(1023,1,3000) (clauses 2.5.1.2, 2.6.1.2).
    fn customer(&mut self) -> CustomerSelector {
        if self.rng.percent(self.cfg.by_last_name_pct) {
            let mut name = [0u8; 16];
            let max = self.cfg.scale.last_name_max();
            last_name(self.rng.nurand(NURAND_A_C_LAST, 0, max, self.constants.c_last), &mut name);
            CustomerSelector::ByLastName(name)
        } else {
            CustomerSelector::ById(self.c_id())
        }
    }

    /// Clause 2.4.1.
    fn new_order(&mut self, w_id: u16, ts: i64) -> NewOrderInput {
        let d_id = self.district();
        let c_id = self.c_id();
        let (min, max) = (*self.cfg.order_lines.start(), *self.cfg.order_lines.end());
        let ol_cnt = self.rng.uniform(u64::from(min), u64::from(max)) as u8;
        let rollback = self.rng.percent(self.cfg.rollback_pct);
        let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
        for line in &mut lines[..ol_cnt as usize] {
            let i_id = self.rng.nurand(NURAND_A_OL_I_ID, 1, self.cfg.scale.items, self.constants.ol_i_id);
            let supply_w_id =
                if self.rng.percent(self.cfg.remote_item_pct) { self.other_warehouse(w_id) } else { w_id };
            let quantity = self.rng.uniform(1, 10) as u8;
            *line = OrderLineInput { i_id, supply_w_id, quantity };
        }
        if rollback {
            lines[ol_cnt as usize - 1].i_id = self.cfg.unused_item_id();
        }
        // Drawn only when the knob is on, so that a zero share leaves the stream unchanged.
        if self.cfg.multi_partition_pct > 0 && self.rng.percent(self.cfg.multi_partition_pct) {
            let k = self.rng.uniform(0, u64::from(ol_cnt) - 1) as usize;
            lines[k].supply_w_id = self.foreign_warehouse();
        }
        NewOrderInput { w_id, d_id, c_id, ol_cnt, lines, entry_d: ts }
    }

    /// Clause 2.5.1.
    fn payment(&mut self, w_id: u16, ts: i64) -> PaymentInput {
        let d_id = self.district();
        let (c_w_id, c_d_id) = if self.rng.percent(self.cfg.remote_payment_pct) {
            let c_w_id = self.other_warehouse(w_id);
            (c_w_id, self.district())
        } else {
            (w_id, d_id)
        };
        let customer = self.customer();
        let h_amount = self.rng.uniform(100, 500_000) as i64;
        PaymentInput { w_id, d_id, c_w_id, c_d_id, customer, h_amount, date: ts }
    }

    /// Clause 2.6.1.
    fn order_status(&mut self, w_id: u16) -> OrderStatusInput {
        let d_id = self.district();
        OrderStatusInput { w_id, d_id, customer: self.customer() }
    }

    /// Clause 2.7.1.
    fn delivery(&mut self, w_id: u16, ts: i64) -> DeliveryInput {
        DeliveryInput { w_id, o_carrier_id: self.rng.uniform(1, 10) as u8, date: ts }
    }

    /// Clause 2.8.1 (the district is drawn per transaction rather than fixed per terminal).
    fn stock_level(&mut self, w_id: u16) -> StockLevelInput {
        let d_id = self.district();
        StockLevelInput { w_id, d_id, threshold: self.rng.uniform(10, 20) as i32 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(cfg: GenConfig, n: usize) -> Vec<TxnInput> {
        let mut g = Generator::new(cfg, 17, 5).unwrap();
        (0..n).map(|i| g.next(1_000 + i as i64)).collect()
    }

    fn counts(inputs: &[TxnInput]) -> [usize; 5] {
        let mut c = [0; 5];
        for i in inputs {
            c[i.kind() as usize] += 1;
        }
        c
    }

    #[test]
    fn profiles_parse_and_reject_unknown_names() {
        assert_eq!(Profile::parse("paper").unwrap(), Profile::Paper);
        assert_eq!("Standard".parse::<Profile>().unwrap(), Profile::Standard);
        let err = Profile::parse("tpcc").unwrap_err();
        assert_eq!(err, GenError::UnknownProfile { given: "tpcc".into() });
        let msg = err.to_string();
        assert!(msg.contains("tpcc") && msg.contains("paper") && msg.contains("standard"), "{msg}");
    }

    #[test]
    fn mix_parses_subsets_and_round_trips() {
        let m = Mix::parse("neworder=50,payment=50").unwrap();
        assert_eq!(m, Mix::PAPER);
        let m = Mix::parse(" payment = 3 , StockLevel=1").unwrap();
        assert_eq!(m.weights(), [0, 3, 0, 0, 1]);
        assert_eq!(Mix::parse(&Mix::STANDARD.to_string()).unwrap(), Mix::STANDARD);
        assert_eq!(Mix::STANDARD.to_string(), "neworder=45,payment=43,orderstatus=4,delivery=4,stocklevel=4");
        assert!((Mix::STANDARD.percent(TxnKind::NewOrder) - 45.0).abs() < 1e-9);
    }

    #[test]
    fn mix_parse_errors_name_the_problem() {
        let e = Mix::parse("neworder=50,refund=50").unwrap_err();
        assert_eq!(e, GenError::MixUnknownName { name: "refund".into() });
        assert!(e.to_string().contains("refund") && e.to_string().contains("stocklevel"));
        let e = Mix::parse("payment=1,payment=2").unwrap_err();
        assert_eq!(e, GenError::MixDuplicate { name: "payment".into() });
        assert!(e.to_string().contains("more than once"));
        for bad in ["x", "-5", "1.5", "", "+3", "99999999999"] {
            let e = Mix::parse(&format!("neworder={bad}")).unwrap_err();
            assert_eq!(e, GenError::MixNotInteger { name: "neworder".into(), value: bad.into() }, "{bad}");
            assert!(e.to_string().contains("neworder"));
        }
        assert_eq!(Mix::parse("neworder=0,payment=0").unwrap_err(), GenError::MixAllZero);
        assert!(matches!(Mix::parse("neworder").unwrap_err(), GenError::MixMissingWeight { .. }));
        assert!(matches!(Mix::parse("").unwrap_err(), GenError::MixEmptyEntry { .. }));
        assert!(matches!(Mix::parse("neworder=1,").unwrap_err(), GenError::MixEmptyEntry { .. }));
        assert_eq!(Mix::new([0; 5]).unwrap_err(), GenError::MixAllZero);
    }

    #[test]
    fn bad_configs_are_rejected() {
        let mut cfg = GenConfig::for_profile(Profile::Standard, 1..=2);
        cfg.rollback_pct = 101;
        assert_eq!(
            Generator::new(cfg, 1, 1).unwrap_err(),
            GenError::PercentOutOfRange { what: "rollback_pct", value: 101 }
        );
        #[allow(clippy::reversed_empty_ranges)]
        let cfg = GenConfig::for_profile(Profile::Paper, 2..=1);
        assert!(matches!(Generator::new(cfg, 1, 1), Err(GenError::BadWarehouses { .. })));
        let cfg = GenConfig::for_profile(Profile::Paper, 0..=1);
        assert!(matches!(Generator::new(cfg, 1, 1), Err(GenError::BadWarehouses { .. })));
        let mut cfg = GenConfig::for_profile(Profile::Paper, 1..=1);
        cfg.order_lines = 5..=16;
        assert_eq!(Generator::new(cfg, 1, 1).unwrap_err(), GenError::BadOrderLines { min: 5, max: 16 });
        // Clause 2.4.1.3: at least 5 lines; fewer would generate inputs the cluster refuses.
        let mut cfg = GenConfig::for_profile(Profile::Paper, 1..=1);
        cfg.order_lines = 4..=15;
        assert_eq!(Generator::new(cfg, 1, 1).unwrap_err(), GenError::BadOrderLines { min: 4, max: 15 });
        let mut cfg = GenConfig::for_profile(Profile::Paper, 1..=1);
        cfg.mix = Some(Mix { weights: [0; 5] });
        assert_eq!(Generator::new(cfg, 1, 1).unwrap_err(), GenError::MixAllZero);
    }

    #[test]
    fn same_seeds_same_sequence() {
        let cfg = GenConfig::for_profile(Profile::Standard, 1..=5);
        assert_eq!(draws(cfg.clone(), 10_000), draws(cfg.clone(), 10_000));
        let mut g = Generator::new(cfg.clone(), 18, 5).unwrap();
        let other: Vec<TxnInput> = (0..100).map(|i| g.next(1_000 + i)).collect();
        assert_ne!(draws(cfg, 100), other);
    }

    #[test]
    fn standard_mix_proportions_over_100k() {
        let inputs = draws(GenConfig::for_profile(Profile::Standard, 1..=5), 100_000);
        let c = counts(&inputs);
        for (kind, expected) in TxnKind::ALL.into_iter().zip([45_000, 43_000, 4_000, 4_000, 4_000]) {
            let got = c[kind as usize];
            assert!(got.abs_diff(expected) < 1_000, "{kind:?}: {got} vs {expected}");
        }
    }

    /// Clauses 2.4.1–2.8.1: input domains, remote and rollback rates, last-name rate.
    #[test]
    fn standard_inputs_respect_the_clauses() {
        let inputs = draws(GenConfig::for_profile(Profile::Standard, 1..=5), 100_000);
        let (mut lines, mut remote_lines, mut rollbacks, mut new_orders) = (0, 0, 0, 0);
        let (mut payments, mut remote_pay, mut by_name, mut by_name_status, mut status) = (0, 0, 0, 0, 0);
        for (n, input) in inputs.iter().enumerate() {
            match input {
                TxnInput::NewOrder(no) => {
                    new_orders += 1;
                    assert_eq!(no.entry_d, 1_000 + n as i64);
                    assert!((1..=5).contains(&no.w_id) && (1..=10).contains(&no.d_id));
                    assert!((1..=3000).contains(&no.c_id) && (5..=15).contains(&no.ol_cnt));
                    for (k, l) in no.lines().iter().enumerate() {
                        lines += 1;
                        remote_lines += usize::from(l.supply_w_id != no.w_id);
                        assert!((1..=5).contains(&l.supply_w_id) && (1..=10).contains(&l.quantity));
                        if l.i_id == UNUSED_ITEM_ID {
                            assert_eq!(k + 1, no.lines().len(), "only the last item is unused");
                            rollbacks += 1;
                        } else {
                            assert!((1..=100_000).contains(&l.i_id));
                        }
                    }
                    assert!(no.lines[no.ol_cnt as usize..].iter().all(|l| *l == OrderLineInput::default()));
                }
                TxnInput::Payment(p) => {
                    payments += 1;
                    assert_eq!(p.date, 1_000 + n as i64);
                    assert!((100..=500_000).contains(&p.h_amount) && (1..=10).contains(&p.c_d_id));
                    if p.c_w_id != p.w_id {
                        remote_pay += 1;
                    } else {
                        assert_eq!(p.c_d_id, p.d_id);
                    }
                    match p.customer {
                        CustomerSelector::ByLastName(name) => {
                            by_name += 1;
                            assert!(!engine::schema::text(&name).is_empty());
                        }
                        CustomerSelector::ById(c) => assert!((1..=3000).contains(&c)),
                    }
                }
                TxnInput::OrderStatus(o) => {
                    status += 1;
                    by_name_status += usize::from(matches!(o.customer, CustomerSelector::ByLastName(_)));
                }
                TxnInput::Delivery(d) => assert!((1..=10).contains(&d.o_carrier_id) && d.date == 1_000 + n as i64),
                TxnInput::StockLevel(s) => assert!((10..=20).contains(&s.threshold) && (1..=10).contains(&s.d_id)),
            }
        }
        let pct = |a: usize, b: usize| a as f64 * 100.0 / b as f64;
        assert!((0.8..1.2).contains(&pct(remote_lines, lines)), "remote lines {}", pct(remote_lines, lines));
        assert!((0.8..1.2).contains(&pct(rollbacks, new_orders)), "rollbacks {}", pct(rollbacks, new_orders));
        assert!((14.0..16.0).contains(&pct(remote_pay, payments)), "remote payments");
        assert!((59.0..61.0).contains(&pct(by_name, payments)), "by last name");
        assert!((56.0..64.0).contains(&pct(by_name_status, status)), "order status by last name");
    }

    /// The paper's profile (Section 4): 50/50, 10 local items, no rollbacks, by C_ID at home.
    #[test]
    fn paper_profile_matches_section_4() {
        let inputs = draws(GenConfig::for_profile(Profile::Paper, 1..=5), 100_000);
        let c = counts(&inputs);
        assert_eq!(c[2] + c[3] + c[4], 0);
        assert!(c[0].abs_diff(50_000) < 1_000, "{c:?}");
        let mut homes = [0usize; 6];
        for input in &inputs {
            match input {
                TxnInput::NewOrder(no) => {
                    homes[no.w_id as usize] += 1;
                    assert_eq!(no.ol_cnt, 10);
                    assert!(no.lines().iter().all(|l| l.supply_w_id == no.w_id && l.i_id <= 100_000));
                }
                TxnInput::Payment(p) => {
                    homes[p.w_id as usize] += 1;
                    assert_eq!((p.c_w_id, p.c_d_id), (p.w_id, p.d_id));
                    assert!(matches!(p.customer, CustomerSelector::ById(_)));
                }
                _ => unreachable!(),
            }
        }
        // Home warehouses uniform over the range.
        assert_eq!(homes[0], 0);
        assert!(homes[1..].iter().all(|&h| h.abs_diff(20_000) < 1_000), "{homes:?}");
    }

    #[test]
    fn single_warehouse_falls_back_to_home_and_mix_overrides() {
        let mut cfg = GenConfig::for_profile(Profile::Standard, 3..=3);
        cfg.remote_item_pct = 100;
        cfg.remote_payment_pct = 100;
        cfg.mix = Some(Mix::parse("neworder=1,payment=1").unwrap());
        assert_eq!(Generator::new(cfg.clone(), 1, 1).unwrap().mix().weights, [1, 1, 0, 0, 0]);
        for input in draws(cfg, 2_000) {
            match input {
                TxnInput::NewOrder(no) => assert!(no.lines().iter().all(|l| l.supply_w_id == 3)),
                TxnInput::Payment(p) => assert_eq!(p.c_w_id, 3),
                _ => unreachable!("mix override excludes the others"),
            }
        }
        // With two warehouses, "remote" always means the other one.
        let mut cfg = GenConfig::for_profile(Profile::Standard, 1..=2);
        cfg.remote_payment_pct = 100;
        cfg.mix = Some(Mix::parse("payment=1").unwrap());
        let mut g = Generator::new(cfg, 1, 1).unwrap();
        for _ in 0..1_000 {
            let TxnInput::Payment(p) = g.next_for(2, 1) else { unreachable!() };
            assert_eq!((p.w_id, p.c_w_id), (2, 1));
        }
    }

    #[test]
    #[should_panic(expected = "outside the generator's range")]
    fn next_for_rejects_a_foreign_home() {
        let mut g = Generator::new(GenConfig::for_profile(Profile::Paper, 1..=2), 1, 1).unwrap();
        g.next_for(3, 1);
    }

    /// A scaled generator names only rows a load of that scale has (simulation only).
    #[test]
    fn a_scaled_generator_stays_within_the_population() {
        let scale = Scale::tiny();
        let cfg = GenConfig::for_profile(Profile::Standard, 1..=2).with_scale(scale);
        assert_eq!(cfg.unused_item_id(), 501);
        let (mut rollbacks, mut names) = (0, std::collections::BTreeSet::new());
        for input in draws(cfg, 20_000) {
            let customer = match input {
                TxnInput::NewOrder(no) => {
                    assert!((1..=30).contains(&no.c_id));
                    for l in no.lines() {
                        rollbacks += usize::from(l.i_id == 501);
                        assert!((1..=501).contains(&l.i_id));
                    }
                    continue;
                }
                TxnInput::Payment(p) => p.customer,
                TxnInput::OrderStatus(o) => o.customer,
                _ => continue,
            };
            match customer {
                CustomerSelector::ById(c) => assert!((1..=30).contains(&c)),
                CustomerSelector::ByLastName(n) => {
                    assert!((0..30).any(|k| engine::rng::last_name_field(k) == n));
                    names.insert(n);
                }
            }
        }
        assert!(rollbacks > 0 && names.len() > 10);
        // The default scale is the clause's, and the profiles start there.
        assert_eq!(GenConfig::for_profile(Profile::Paper, 1..=1).scale, Scale::TPCC);
    }

    /// `n` NewOrders of `cfg` with its mix replaced by NewOrder only.
    fn new_orders(mut cfg: GenConfig, n: usize) -> Vec<NewOrderInput> {
        cfg.mix = Some(Mix::parse("neworder=1").unwrap());
        draws(cfg, n)
            .into_iter()
            .map(|i| match i {
                TxnInput::NewOrder(no) => no,
                other => unreachable!("only NewOrders: {other:?}"),
            })
            .collect()
    }

    /// The forced share: `multi_partition_pct` = 10 makes 10% ± 2 of 20,000 NewOrders
    /// multi-partition. The paper profile (Section 4: every line local) keeps every other
    /// line at home, so exactly the forced NewOrders leave the home partition.
    #[test]
    fn forced_multi_partition_share_within_tolerance() {
        let mut cfg = GenConfig::for_profile(Profile::Paper, 1..=4).with_home_partition(1..=2);
        cfg.multi_partition_pct = 10;
        let orders = new_orders(cfg, 20_000);
        let multi = orders.iter().filter(|no| no.lines().iter().any(|l| !(1..=2).contains(&l.supply_w_id))).count();
        let pct = multi as f64 * 100.0 / orders.len() as f64;
        assert!((8.0..=12.0).contains(&pct), "forced share {pct}%");
        for no in &orders {
            assert!((1..=2).contains(&no.w_id), "homes stay in the home partition");
            let away = no.lines().iter().filter(|l| l.supply_w_id != no.w_id).count();
            assert!(away <= 1, "one forced line per NewOrder: {no:?}");
        }
    }

    /// A forced line's supply warehouse (clause 2.4.1.5's OL_SUPPLY_W_ID) lies in another
    /// partition, drawn uniformly over the foreign warehouses below and above the home
    /// partition; the line chosen is uniform over the order's lines.
    #[test]
    fn forced_lines_land_in_another_partition() {
        // Partitions 1..=2, 3..=4, 5..=6; the terminal's home partition is the middle one.
        let mut cfg = GenConfig::for_profile(Profile::Standard, 1..=6).with_home_partition(3..=4);
        cfg.remote_item_pct = 0;
        cfg.rollback_pct = 0;
        cfg.multi_partition_pct = 100;
        assert_eq!(cfg.foreign_warehouses(), 4);
        let mut foreign = [0usize; 7];
        let mut position = [0usize; 15];
        for no in new_orders(cfg, 8_000) {
            assert!((3..=4).contains(&no.w_id));
            let away: Vec<(usize, u16)> = no
                .lines()
                .iter()
                .enumerate()
                .filter(|(_, l)| !(3..=4).contains(&l.supply_w_id))
                .map(|(k, l)| (k, l.supply_w_id))
                .collect();
            assert_eq!(away.len(), 1, "exactly the forced line leaves the partition: {no:?}");
            let (k, w) = away[0];
            foreign[w as usize] += 1;
            position[k] += 1;
            assert!(no.lines().iter().enumerate().all(|(j, l)| j == k || l.supply_w_id == no.w_id));
        }
        assert_eq!(foreign[3] + foreign[4] + foreign[0], 0);
        for w in [1, 2, 5, 6] {
            assert!(foreign[w].abs_diff(2_000) < 200, "foreign warehouses uniform: {foreign:?}");
        }
        assert!(position[..5].iter().all(|&n| n > 0), "every line can be the forced one: {position:?}");
    }

    /// Clauses 2.4.1.5 and 2.5.1.2 over a two-partition layout (warehouses 1–2 and 3–4, homes
    /// in 1–2): remote order lines stay ≈1% and remote payments ≈15%, their warehouse drawn
    /// from every warehouse but the home one — so 2 of 3 remote choices cross partitions and
    /// the standard profile yields multi-partition transactions with no forcing.
    #[test]
    fn standard_profile_over_two_partitions_crosses_them() {
        let cfg = GenConfig::for_profile(Profile::Standard, 1..=4).with_home_partition(1..=2);
        let (mut lines, mut remote_lines, mut foreign_lines) = (0usize, 0usize, 0usize);
        let (mut payments, mut remote_pay, mut foreign_pay) = (0usize, 0usize, 0usize);
        for input in draws(cfg, 200_000) {
            match input {
                TxnInput::NewOrder(no) => {
                    assert!((1..=2).contains(&no.w_id));
                    for l in no.lines() {
                        lines += 1;
                        remote_lines += usize::from(l.supply_w_id != no.w_id);
                        foreign_lines += usize::from(!(1..=2).contains(&l.supply_w_id));
                    }
                }
                TxnInput::Payment(p) => {
                    assert!((1..=2).contains(&p.w_id));
                    payments += 1;
                    remote_pay += usize::from(p.c_w_id != p.w_id);
                    foreign_pay += usize::from(!(1..=2).contains(&p.c_w_id));
                }
                _ => {}
            }
        }
        let pct = |a: usize, b: usize| a as f64 * 100.0 / b as f64;
        assert!((0.9..1.1).contains(&pct(remote_lines, lines)), "remote lines {}", pct(remote_lines, lines));
        assert!((14.5..15.5).contains(&pct(remote_pay, payments)), "remote payments {}", pct(remote_pay, payments));
        let cross_lines = pct(foreign_lines, remote_lines);
        let cross_pay = pct(foreign_pay, remote_pay);
        assert!((60.0..73.0).contains(&cross_lines), "remote lines in the other partition {cross_lines}%");
        assert!((63.0..70.0).contains(&cross_pay), "remote payments in the other partition {cross_pay}%");
    }

    #[test]
    fn forcing_needs_another_partition_and_a_valid_home_partition() {
        let mut cfg = GenConfig::for_profile(Profile::Standard, 1..=4);
        cfg.multi_partition_pct = 10;
        let e = Generator::new(cfg.clone(), 1, 1).unwrap_err();
        assert_eq!(e, GenError::NoForeignWarehouse { pct: 10, first: 1, last: 4 });
        assert!(e.to_string().contains("at least two partitions"), "{e}");
        let e = Generator::new(cfg.clone().with_home_partition(1..=4), 1, 1).unwrap_err();
        assert!(matches!(e, GenError::NoForeignWarehouse { .. }));
        assert!(Generator::new(cfg.clone().with_home_partition(4..=4), 1, 1).is_ok());
        cfg.multi_partition_pct = 101;
        assert_eq!(
            Generator::new(cfg.clone().with_home_partition(1..=2), 1, 1).unwrap_err(),
            GenError::PercentOutOfRange { what: "multi_partition_pct", value: 101 }
        );
        cfg.multi_partition_pct = 0;
        for bad in [0..=2, 3..=5] {
            let e = Generator::new(cfg.clone().with_home_partition(bad.clone()), 1, 1).unwrap_err();
            assert!(matches!(e, GenError::BadHomePartition { .. }), "{bad:?}: {e}");
        }
        // A zero share draws nothing extra: the stream is the one without the knob.
        let plain = GenConfig::for_profile(Profile::Standard, 1..=4);
        let mut forced = plain.clone();
        forced.multi_partition_pct = 0;
        assert_eq!(draws(plain, 5_000), draws(forced, 5_000));
        // Forced streams are seeded like the rest.
        let mut forced = GenConfig::for_profile(Profile::Standard, 1..=4).with_home_partition(3..=4);
        forced.multi_partition_pct = 50;
        assert_eq!(draws(forced.clone(), 5_000), draws(forced, 5_000));
    }

    #[test]
    #[should_panic(expected = "outside the generator's home partition")]
    fn next_for_rejects_a_home_outside_the_home_partition() {
        let cfg = GenConfig::for_profile(Profile::Paper, 1..=4).with_home_partition(1..=2);
        Generator::new(cfg, 1, 1).unwrap().next_for(3, 1);
    }

    #[test]
    fn run_constants_come_from_the_load_seed() {
        let g = Generator::new(GenConfig::for_profile(Profile::Standard, 1..=1), 11, 22).unwrap();
        let load = NuRandConstants::for_load(22);
        assert_eq!(g.constants(), NuRandConstants::for_run(&load, 11));
        assert!(engine::rng::c_last_delta_ok(g.constants().c_last, load.c_last));
    }

    /// Issue #14, item 6: every input either profile generates — home-only and partitioned,
    /// forced multi-partition, at the simulator's scale — lies within TPC-C's domains
    /// (clauses 2.4.1–2.8.1) as the cluster checks them, at the dates the callers use.
    #[test]
    fn every_generated_input_is_within_the_clauses_domains() {
        let mut forced = GenConfig::for_profile(Profile::Standard, 1..=4).with_home_partition(3..=4);
        forced.multi_partition_pct = 50;
        let mut paper_forced = GenConfig::for_profile(Profile::Paper, 1..=4).with_home_partition(1..=2);
        paper_forced.multi_partition_pct = 10;
        let configs = [
            GenConfig::for_profile(Profile::Paper, 1..=5),
            GenConfig::for_profile(Profile::Standard, 1..=5),
            GenConfig::for_profile(Profile::Standard, 7..=7),
            forced,
            paper_forced,
            GenConfig::for_profile(Profile::Standard, 1..=2).with_scale(Scale::tiny()),
        ];
        for cfg in configs {
            let mut g = Generator::new(cfg.clone(), 3, 4).unwrap();
            for n in 0..50_000 {
                let input = g.next(engine::loader::LOAD_TIMESTAMP + n);
                assert_eq!(engine::input::check_input(&input), Ok(()), "{:?}: {input:?}", cfg.profile);
            }
        }
        for ts in [engine::procedures::DATE_MIN, 1_000, engine::procedures::DATE_MAX] {
            let mut g = Generator::new(GenConfig::for_profile(Profile::Standard, 1..=2), 3, 4).unwrap();
            assert!((0..1_000).all(|_| engine::input::check_input(&g.next(ts)).is_ok()));
        }
    }

    /// The domains the cluster checks (`engine::procedures`) are the population the loader
    /// loads and the generator draws from (clauses 1.2.1, 4.3.2.3, 4.3.3.1).
    #[test]
    fn the_checked_domains_are_the_loaded_population() {
        use engine::procedures::{c_last_number, CUSTOMERS_PER_DISTRICT, C_LAST_SYLLABLES};
        assert_eq!(engine::loader::ITEMS, engine::procedures::ITEMS);
        assert_eq!(engine::loader::CUSTOMERS_PER_DISTRICT, CUSTOMERS_PER_DISTRICT);
        assert_eq!(
            Scale::TPCC,
            Scale { items: engine::procedures::ITEMS, customers_per_district: CUSTOMERS_PER_DISTRICT }
        );
        assert_eq!(engine::rng::LAST_NAME_SYLLABLES, C_LAST_SYLLABLES);
        for n in 0..=999 {
            assert_eq!(c_last_number(&engine::rng::last_name_field(n)), Some(n));
        }
        assert_eq!(UNUSED_ITEM_ID, engine::procedures::ITEMS + 1);
    }
}
