//! `glass sim`: runs the seeded whole-cluster simulator ([`sim`]) over a range of seeds in
//! each replication mode asked for — the real coordinator and the nodes' real machines in one
//! thread, faults drawn from each seed, healed and checked — on several threads
//! ([`harness::seeds`]), with a progress bar and a summary per mode of what it covered. A
//! failing seed is printed with the one command that replays it, and the command exits 1.
//!
//! Guarantees: seeds run in order from `--seed`; each run is a pure function of its seed and
//! the flags, so the printed replay command reproduces a failure exactly (with `--trace` to
//! watch it); a panic inside a run (an assertion of the coordinator or a replica) names its
//! seed too, even in a release build that aborts on panic.

use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::Result;
use clap::{Args, ValueEnum};
use harness::seeds::{self, Seeds};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sim::cluster::{Faults, SimStats};
use sim::run::replay_command;
use sim::{run_seed, SeedFailure, SeedReport, SimOptions};
use wire::config::{AgreementRule, Mode, Shipping};

#[derive(Args, Debug)]
pub struct SimArgs {
    /// How many seeds to run, one after another from `--seed`.
    #[arg(long, default_value_t = 1_000)]
    pub seeds: u64,
    /// The first seed. A failure prints the command that replays it:
    /// `glass sim --seed S --seeds 1`.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Steps of each run's fault phase (submit a request, deliver a message, let time pass,
    /// maybe a fault); the heal phase that follows runs until the cluster converges.
    #[arg(long, default_value_t = SimOptions::default().steps)]
    pub steps: usize,
    /// Nodes in the simulated cluster (every partition has a replica on each; at least 2).
    #[arg(long, default_value_t = SimOptions::default().nodes, value_parser = clap::value_parser!(u8).range(2..=8))]
    pub nodes: u8,
    /// Coordinators in the simulated group (one leads; raft decides which). With three or
    /// more, coordinators crash and restart and are cut off from one another too.
    #[arg(long, default_value_t = SimOptions::default().coordinators, value_parser = clap::value_parser!(u8).range(1..=7))]
    pub coordinators: u8,
    /// When an active-active client is answered: `majority` (of a partition's replicas; the
    /// others are compared when they report) or `all` (every live replica). They differ with
    /// three nodes or more (docs/cluster.md, "Agreement").
    #[arg(long, default_value_t = SimOptions::default().agreement, value_name = "all|majority")]
    pub agreement: AgreementRule,
    /// `limits.replica_lag_batches_max`: answered batches a replica may leave unreported
    /// before it is failed as lagging (a small value exercises that path).
    #[arg(long, default_value_t = SimOptions::default().lag_batches, value_parser = clap::value_parser!(u32).range(1..))]
    pub lag_batches: u32,
    /// Which faults to draw: `all` (reordering, duplicates, delays, broken links, lost
    /// heartbeats, crashes and restarts, nodes that start listening late), `network`
    /// (reordering, duplicates and delays only) or `none`.
    #[arg(long, value_enum, default_value_t = FaultSet::All)]
    pub faults: FaultSet,
    /// Which replication modes to simulate: `active-active`, `active-passive`, `full-stack`,
    /// or `all` of them, one after another (each over the same seeds).
    #[arg(long, value_enum, default_value_t = ModeSet::All)]
    pub mode: ModeSet,
    /// How the passive modes ship (`sync`: results wait for the backups; `async`: they do
    /// not, and a failover may lose acknowledged transactions the backup had not applied —
    /// counted, never a divergence), or `both`, one after the other.
    #[arg(long, value_enum, default_value_t = ShippingSet::Both)]
    pub shipping: ShippingSet,
    /// Seed of the (tiny, simulation-only) TPC-C population.
    #[arg(long, default_value_t = SimOptions::default().load_seed)]
    pub load_seed: u64,
    /// Print every coordinator event and every fault as it happens (use with `--seeds 1`).
    #[arg(long)]
    pub trace: bool,
    /// Run every seed even after a failure, and list the failing ones at the end.
    #[arg(long)]
    pub keep_going: bool,
    /// Seeds run at once, one thread each (runs are independent: each is still a pure
    /// function of its seed) [default: the machine's cores].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
}

/// The modes `--mode` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeSet {
    ActiveActive,
    ActivePassive,
    FullStack,
    All,
}

/// The shipping settings `--shipping` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShippingSet {
    Sync,
    Async,
    Both,
}

impl ModeSet {
    fn modes(self) -> &'static [Mode] {
        match self {
            ModeSet::ActiveActive => &[Mode::ActiveActive],
            ModeSet::ActivePassive => &[Mode::ActivePassive],
            ModeSet::FullStack => &[Mode::FullStack],
            ModeSet::All => &[Mode::ActiveActive, Mode::ActivePassive, Mode::FullStack],
        }
    }
}

impl ShippingSet {
    fn shippings(self) -> &'static [Shipping] {
        match self {
            ShippingSet::Sync => &[Shipping::Sync],
            ShippingSet::Async => &[Shipping::Async],
            ShippingSet::Both => &[Shipping::Sync, Shipping::Async],
        }
    }
}

/// The fault sets `--faults` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FaultSet {
    All,
    Network,
    None,
}

impl FaultSet {
    fn faults(self) -> Faults {
        match self {
            FaultSet::All => Faults::ALL,
            FaultSet::Network => Faults::NETWORK,
            FaultSet::None => Faults::NONE,
        }
    }
}

pub fn run(args: SimArgs) -> Result<ExitCode> {
    let range = Seeds::new(args.seed, args.seeds)?;
    let base = SimOptions {
        nodes: args.nodes,
        coordinators: args.coordinators,
        steps: args.steps,
        faults: args.faults.faults(),
        load_seed: args.load_seed,
        trace: args.trace,
        agreement: args.agreement,
        lag_batches: args.lag_batches,
        ..SimOptions::default()
    };
    let variants = seeds::variants(args.mode.modes(), args.shipping.shippings());
    eprintln!(
        "glass sim: seeds {}..{} ({} seeds) in {} mode(s), {} nodes, {} steps, faults {:?} (tiny population: simulation only, not TPC-C compliant)",
        args.seed,
        range.end - 1,
        args.seeds,
        variants.len(),
        args.nodes,
        args.steps,
        args.faults
    );
    static CURRENT_OPTS: Mutex<Option<SimOptions>> = Mutex::new(None);
    seeds::report_panics(|seed| {
        if let Some(opts) = *CURRENT_OPTS.lock().unwrap_or_else(|e| e.into_inner()) {
            eprintln!("glass sim: seed {seed} panicked\n  replay: {}", replay_command(seed, &opts));
        }
    });

    let jobs = args.jobs.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), usize::from);
    let mut status = ExitCode::SUCCESS;
    for (mode, shipping) in variants {
        let opts = SimOptions { mode, shipping, ..base };
        *CURRENT_OPTS.lock().unwrap_or_else(|e| e.into_inner()) = Some(opts);
        println!("== {}", seeds::label(mode, shipping));
        let t0 = Instant::now();
        let results = run_seeds(&args, range, &opts, jobs);
        if summarise(&args, results, t0.elapsed().as_secs_f64(), jobs)? != ExitCode::SUCCESS {
            status = ExitCode::from(1);
            if !args.keep_going {
                break;
            }
        }
    }
    Ok(status)
}

/// Runs the seeds of `range` on `jobs` threads ([`harness::seeds::run`]: stopping at the
/// first failure unless `--keep-going`), with a progress bar; the results in the order they
/// finished.
fn run_seeds(
    args: &SimArgs,
    range: Seeds,
    opts: &SimOptions,
    jobs: usize,
) -> Vec<Result<SeedReport, Box<SeedFailure>>> {
    let bar = ProgressBar::with_draw_target(Some(args.seeds), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("simulating [{bar:40}] {pos}/{len} seeds ({per_sec}, eta {eta}) {msg}")
            .expect("valid progress template")
            .progress_chars("=> "),
    );
    let results = seeds::run(
        range,
        jobs,
        args.keep_going,
        |seed| run_seed(seed, opts),
        |f| bar.suspend(|| eprintln!("{f}")),
        |failed| {
            if failed > 0 {
                bar.set_message(format!("{failed} failed"));
            }
            bar.inc(1);
        },
    );
    bar.finish_and_clear();
    results
}

/// Prints the totals over every seed run and the failing seeds; exit status 1 if any failed.
fn summarise(
    args: &SimArgs,
    results: Vec<Result<SeedReport, Box<SeedFailure>>>,
    secs: f64,
    jobs: usize,
) -> Result<ExitCode> {
    let mut totals = SimStats::default();
    let (mut committed, mut aborted, mut refused, mut unknown, mut acks) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut acks_lost, mut acks_renumbered, mut waived) = (0u64, 0u64, 0u64);
    let (mut committed_multi, mut committed_single, mut multi_requests) = (0u64, 0u64, 0u64);
    let mut failures = Vec::new();
    let ran = results.len() as u64;
    for result in results {
        match result {
            Ok(r) => {
                totals.add(&r.stats);
                committed += r.committed;
                committed_multi += r.committed_multi;
                committed_single += r.committed_single;
                multi_requests += r.multi_requests;
                aborted += r.aborted;
                refused += r.refused;
                unknown += r.outcome_unknown;
                acks += r.acks_checked;
                acks_lost += r.acks_lost_async;
                acks_renumbered += r.acks_renumbered_async;
                waived += u64::from(r.consistency_waived);
            }
            Err(f) => {
                totals.add(&f.stats);
                failures.push(f);
            }
        }
    }
    failures.sort_by_key(|f| f.seed);

    println!(
        "seeds run        {ran} in {secs:.2} s on {jobs} threads ({:.0} seeds/s; {:.2} ms of a thread each)",
        ran as f64 / secs,
        secs * 1e3 * jobs.min(args.seeds as usize) as f64 / ran as f64
    );
    println!("failures         {}", failures.len());
    println!(
        "requests         {} ({committed} committed, of which {committed_multi} multi-partition; {aborted} aborted, {refused} refused or busy, {unknown} outcome unknown)",
        totals.requests
    );
    println!(
        "multi-partition  {committed_multi} committed of {multi_requests} requests spanning partitions ({committed_single} single-partition commits)"
    );
    println!(
        "acks verified    {acks} acknowledged NewOrders and Payments looked up in the final state: {} found ({acks_renumbered} of them NewOrders under another order number, run again after an async-shipping failover lost an earlier one of their district), {acks_lost} lost in async-shipping failovers (allowed only there, each in a promotion's window)",
        acks - acks_lost
    );
    if waived > 0 {
        println!(
            "async losses     {waived} runs lost batches in a failover: there, the consistency conditions across partitions were not required (a multi-partition transaction may lose one half)"
        );
    }
    println!(
        "node faults      {} crashes ({} while rejoining, {} of a rejoin's source), {} drops (broken links), {} heartbeat outages",
        totals.crashes, totals.crashes_while_rejoining, totals.crashes_of_rejoin_source, totals.drops, totals.mutes
    );
    println!(
        "recovery         {} nodes declared down ({} lagging), {} restarts, {} rejoins ({} given up and restarted), {} reconnections after a broken link, {} failed dials of a backup's node (dialled again)",
        totals.nodes_down, totals.lagging, totals.restarts, totals.rejoins, totals.rejoins_given_up, totals.reconnects, totals.peer_dials_failed
    );
    println!(
        "failover         {} promotions, {} restart recoveries (of them {} rejoining backups whose own log could not follow, over the primary's checkpoint image), {} starting-state fetches ({} failed and retried or given up, {} abandoned by the joiner, {} of them for its patience)",
        totals.promotions, totals.recoveries, totals.base_backups, totals.fetches, totals.fetches_failed, totals.fetches_abandoned, totals.fetches_out_of_patience
    );
    println!(
        "copies           {} taken while their source executed ({} raced its batches), {} cut mid-copy by a crash, restart or rejoin",
        totals.copies, totals.copies_raced, totals.copies_cut
    );
    println!(
        "state digests    {} asked for during the runs; {} taken from copies ({} raced later batches), {} refused as their replica went",
        totals.digest_requests, totals.digest_copies, totals.digest_copies_raced, totals.digest_copies_refused
    );
    println!(
        "coordinators     {} crashes ({} seen at once by the others), {} cut off from the others, {} take-overs, {} leaders deposed",
        totals.coordinator_crashes, totals.coordinator_deaths_seen, totals.coordinator_cuts, totals.take_overs, totals.deposed
    );
    println!(
        "retries          {} requests asked again after a failure took their answer; {} answers came from a retry",
        totals.retries, totals.answers_from_retries
    );
    println!(
        "outcome unknown  {unknown} (still unknown after asking again: \"outcome unknown\", or an outcome the replicas had forgotten)"
    );
    println!("messages lost    {} (with broken links and crashed processes)", totals.messages_lost);
    println!(
        "invariants       {} checks at every step ({} a run; docs/design.md §14)",
        totals.invariant_checks,
        totals.invariant_checks / ran.max(1)
    );
    if failures.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    println!("failing seeds:");
    for f in &failures {
        println!("  {}  ({})", f.replay, f.reason.lines().next().unwrap_or_default());
    }
    Ok(ExitCode::from(1))
}
