//! Running a range of seeds on several threads, each run a pure function of its seed (`glass
//! sim`: the seeded simulator's runs, docs/design.md §5), and the replication modes they run
//! in ([`variants`]). What one seed's run is, and what its results say, are the caller's (the
//! simulator's): this module knows seeds, threads and modes only.
//!
//! Guarantees: seeds are handed out in order from the first, each to one thread; unless asked
//! to keep going, no seed starts once one has failed (the runs under way finish); every result
//! comes back, in the order the runs finished; [`current_seed`] names the seed the calling
//! thread is running, so that a panic hook can name it too ([`report_panics`]). It prints
//! nothing: each failure, each finished run and each panic's seed is told to the caller's
//! callbacks.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use wire::config::{Mode, Shipping};

use crate::error::HarnessError;
use crate::Result;

thread_local! {
    /// The seed this thread is running, for the panic hook.
    static CURRENT_SEED: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The seed the calling thread is running ([`run`]), if any.
pub fn current_seed() -> Option<u64> {
    CURRENT_SEED.with(Cell::get)
}

/// Installs a panic hook that, after the default one, tells `report` the seed the panicking
/// thread was running ([`current_seed`]), if it was running one.
pub fn report_panics(report: impl Fn(u64) + Send + Sync + 'static) {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        if let Some(seed) = current_seed() {
            report(seed);
        }
    }));
}

/// Seeds `first..end`: `count` of them, one after another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seeds {
    pub first: u64,
    pub count: u64,
    pub end: u64,
}

impl Seeds {
    /// `count` seeds from `first` (`--seeds`, `--seed`); refuses none, or a range past `u64`.
    pub fn new(first: u64, count: u64) -> Result<Seeds> {
        if count == 0 {
            return Err(HarnessError::Invalid("--seeds must be at least 1".into()));
        }
        let Some(end) = first.checked_add(count) else {
            return Err(HarnessError::Invalid("--seed + --seeds overflows u64".into()));
        };
        Ok(Seeds { first, count, end })
    }
}

/// The (mode, shipping) pairs to run, in order: each of `modes`, a passive one once per each
/// of `shippings`, active-active once (it ships nothing: its pair says `Sync`).
pub fn variants(modes: &[Mode], shippings: &[Shipping]) -> Vec<(Mode, Shipping)> {
    let mut out = Vec::new();
    for &m in modes {
        match m.every_replica_executes() {
            true => out.push((m, Shipping::Sync)),
            false => out.extend(shippings.iter().map(|&s| (m, s))),
        }
    }
    out
}

/// A variant's name: the mode, and for a passive one its shipping.
pub fn label(mode: Mode, shipping: Shipping) -> String {
    if !mode.every_replica_executes() {
        format!("{mode}, {shipping} shipping")
    } else {
        mode.to_string()
    }
}

/// Runs `seeds` with `run` on `jobs` threads (stopping at the first failure unless
/// `keep_going`); `failed` hears of each failure as it happens, `done` after each run with
/// the failures so far. Returns the results in the order the runs finished.
pub fn run<R: Send, E: Send>(
    seeds: Seeds,
    jobs: usize,
    keep_going: bool,
    run: impl Fn(u64) -> Result<R, E> + Sync,
    failed: impl Fn(&E) + Sync,
    done: impl Fn(usize) + Sync,
) -> Vec<Result<R, E>> {
    let next = AtomicU64::new(seeds.first);
    let stop = AtomicBool::new(false);
    let results: Mutex<Vec<Result<R, E>>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(seeds.count as usize) {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= seeds.end {
                        break;
                    }
                    CURRENT_SEED.with(|c| c.set(Some(seed)));
                    let result = run(seed);
                    CURRENT_SEED.with(|c| c.set(None));
                    if let Err(e) = &result {
                        failed(e);
                        if !keep_going {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                    let mut all = results.lock().unwrap_or_else(|e| e.into_inner());
                    all.push(result);
                    let failures = all.iter().filter(|r| r.is_err()).count();
                    drop(all);
                    done(failures);
                }
            });
        }
    });
    results.into_inner().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_runs_once_and_a_failure_stops_the_rest() {
        let seeds = Seeds::new(10, 50).unwrap();
        let mut ran: Vec<u64> =
            run(seeds, 3, true, Ok::<u64, u64>, |_| {}, |_| {}).into_iter().map(|r| r.unwrap()).collect();
        ran.sort_unstable();
        assert_eq!(ran, (10..60).collect::<Vec<_>>());
        let results = run(seeds, 1, false, |s| if s == 12 { Err(s) } else { Ok(s) }, |_| {}, |_| {});
        assert_eq!(results.len(), 3, "seeds 10 and 11 ran, 12 failed, none after");
        assert_eq!(current_seed(), None);
        assert!(Seeds::new(1, 0).is_err() && Seeds::new(u64::MAX, 1).is_err());
    }

    #[test]
    fn active_active_runs_once_whatever_the_shipping() {
        let all = [Mode::ActiveActive, Mode::ActivePassive, Mode::FullStack];
        let v = variants(&all, &[Shipping::Sync, Shipping::Async]);
        assert_eq!(v.len(), 5);
        assert_eq!(v[0], (Mode::ActiveActive, Shipping::Sync));
        assert_eq!(label(Mode::ActivePassive, Shipping::Async), "active-passive, async shipping");
    }
}
