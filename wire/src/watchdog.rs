//! A watch on the thread that carries a process's messages: a task that wakes every
//! [`TICK`] and, when it wakes [`LATE_REPORTED`] or more late, reports how late and where the
//! time went — on the CPU running other tasks of the same thread (one of them held it), waiting
//! for a CPU (the machine's cores were busy elsewhere), or neither (the thread was blocked in
//! a system call, or the process stopped). A stretch in which a partition commits nothing
//! is then placed on the carrier, on the machine, or elsewhere (docs/design.md §10, "Copying
//! without stopping").
//!
//! Guarantees: one small allocation-free read of `/proc/thread-self/schedstat` a tick; no
//! report when nothing was late; reads that fail (no procfs) leave the report's CPU and
//! wait figures `None`, never zero.

use std::time::{Duration, Instant};

/// How often the watch wakes.
pub const TICK: Duration = Duration::from_millis(10);
/// Lateness reported.
pub const LATE_REPORTED: Duration = Duration::from_millis(50);

/// One late wake-up of the watch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stall {
    /// How much later than asked the watch woke.
    pub late: Duration,
    /// Of the time since the previous wake-up, the thread's time on a CPU (its other tasks).
    pub on_cpu: Option<Duration>,
    /// Of the same time, the thread's time runnable but waiting for a CPU.
    pub waiting_for_cpu: Option<Duration>,
}

/// The thread's `(on CPU, waiting for a CPU)` so far, from `/proc/thread-self/schedstat`.
pub fn thread_sched() -> Option<(Duration, Duration)> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut f = text.split_whitespace().map(|v| v.parse::<u64>().ok());
    Some((Duration::from_nanos(f.next()??), Duration::from_nanos(f.next()??)))
}

/// Watches the thread it runs on until dropped, calling `report` for each late wake-up. Spawn
/// it on the runtime to watch (on a runtime of several threads it watches whichever it runs
/// on).
pub async fn watch(mut report: impl FnMut(Stall)) {
    let mut last = (Instant::now(), thread_sched());
    loop {
        tokio::time::sleep(TICK).await;
        let now = (Instant::now(), thread_sched());
        let late = now.0.saturating_duration_since(last.0).saturating_sub(TICK);
        if late >= LATE_REPORTED {
            let delta = match (last.1, now.1) {
                (Some(a), Some(b)) => Some((b.0.saturating_sub(a.0), b.1.saturating_sub(a.1))),
                _ => None,
            };
            report(Stall { late, on_cpu: delta.map(|d| d.0), waiting_for_cpu: delta.map(|d| d.1) });
        }
        last = now;
    }
}

/// The watch, spawned on the current runtime; it ends when this is dropped.
#[derive(Debug)]
pub struct Watch(tokio::task::JoinHandle<()>);

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Spawns [`watch`] on the current runtime.
pub fn spawn(report: impl FnMut(Stall) + Send + 'static) -> Watch {
    Watch(tokio::spawn(watch(report)))
}

/// `late_ms=… on_cpu_ms=… waiting_for_cpu_ms=…`, a figure that could not be read as `?`: the
/// fields of a log line.
impl std::fmt::Display for Stall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Option<Duration>| d.map_or("?".to_string(), |d| d.as_millis().to_string());
        write!(
            f,
            "late_ms={} on_cpu_ms={} waiting_for_cpu_ms={}",
            self.late.as_millis(),
            ms(self.on_cpu),
            ms(self.waiting_for_cpu)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spins until the thread has had `cpu` more time on a CPU (not wall time: a busy
    /// machine only makes it take longer).
    fn spin_for_cpu(cpu: Duration) {
        let (start, _) = thread_sched().expect("schedstat");
        while thread_sched().expect("schedstat").0 - start < cpu {
            std::hint::black_box(0);
        }
    }

    /// A thread that spins reads as on the CPU; one that sleeps does not.
    #[test]
    fn the_thread_s_own_cpu_time_is_read() {
        let Some((cpu0, _)) = thread_sched() else {
            eprintln!("no /proc/thread-self/schedstat here: nothing to check");
            return;
        };
        spin_for_cpu(Duration::from_millis(30));
        let (cpu1, _) = thread_sched().unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let (cpu2, _) = thread_sched().unwrap();
        assert!(cpu1 - cpu0 >= Duration::from_millis(30));
        assert!(cpu2 - cpu1 < Duration::from_millis(10), "a sleeping thread is not on a CPU: {:?}", cpu2 - cpu1);
    }

    /// A task that holds the runtime's one thread makes the watch late, and the report says
    /// the thread was on the CPU meanwhile.
    #[test]
    fn a_task_holding_the_thread_is_reported() {
        if thread_sched().is_none() {
            eprintln!("no /proc/thread-self/schedstat here: nothing to check");
            return;
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let stalls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = stalls.clone();
        rt.block_on(async move {
            let w = tokio::spawn(watch(move |s| seen.lock().unwrap().push(s)));
            tokio::time::sleep(TICK * 3).await;
            spin_for_cpu(Duration::from_millis(120));
            tokio::time::sleep(TICK * 3).await;
            w.abort();
        });
        let stalls = stalls.lock().unwrap();
        let held = stalls.iter().find(|s| s.on_cpu.is_some_and(|c| c >= Duration::from_millis(120)));
        let held = held.unwrap_or_else(|| panic!("the stall is reported, on the CPU: {stalls:?}"));
        assert!(held.late >= Duration::from_millis(100), "{stalls:?}");
        assert!(held.to_string().starts_with("late_ms="), "{held}");
    }
}
