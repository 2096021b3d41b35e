//! Reading processes through `/proc`: CPU seconds of a process and of each of its threads (by
//! thread name), resident memory, and a host's network bytes — read here, or parsed from what
//! another host's `/proc` said (`crate::remote`). A process that is gone, or a file that does
//! not parse, yields `None` (or nothing), never a guess.

use std::fs;

/// CPU seconds (user + system) a local process has used, from `/proc/PID/stat`.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(stat_cpu_ticks(&stat)?.1 / ticks.max(1.0))
}

/// The command name and the CPU ticks (user + system) of one `/proc/PID/stat` (or
/// `/proc/PID/task/TID/stat`) line.
pub fn stat_cpu_ticks(stat: &str) -> Option<(String, f64)> {
    let open = stat.find('(')?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let name = stat.get(open + 1..stat.len() - rest.len() - 2)?.to_string();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the state (field 3), utime and stime are fields 14 and 15 of stat(5).
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

/// Bytes received and sent over every interface, loopback included, from `/proc/net/dev`.
pub fn net_dev_bytes(text: &str) -> Option<(u64, u64)> {
    let (mut rx, mut tx, mut any) = (0u64, 0u64, false);
    for line in text.lines().skip(2) {
        let (_, counters) = line.split_once(':')?;
        let f: Vec<&str> = counters.split_whitespace().collect();
        // Receive: bytes packets errs drop fifo frame compressed multicast; then transmit.
        rx += f.first()?.parse::<u64>().ok()?;
        tx += f.get(8)?.parse::<u64>().ok()?;
        any = true;
    }
    any.then_some((rx, tx))
}

/// [`net_dev_bytes`] of this host.
pub fn local_net_bytes() -> Option<(u64, u64)> {
    net_dev_bytes(&fs::read_to_string("/proc/net/dev").ok()?)
}

/// CPU seconds of a local process's threads, summed per thread name (`/proc/PID/task`).
pub fn thread_cpu_seconds(pid: u32) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    // SAFETY: sysconf has no preconditions.
    let ticks = (unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64).max(1.0);
    for task in tasks.flatten() {
        let Ok(stat) = fs::read_to_string(task.path().join("stat")) else { continue };
        let Some((name, cpu)) = stat_cpu_ticks(&stat) else { continue };
        add_thread(&mut out, name, cpu / ticks);
    }
    out
}

/// Adds `cpu` seconds to thread name `name` in `out`.
pub fn add_thread(out: &mut Vec<(String, f64)>, name: String, cpu: f64) {
    match out.iter_mut().find(|(n, _)| *n == name) {
        Some(e) => e.1 += cpu,
        None => out.push((name, cpu)),
    }
}

/// Resident memory of a local process in bytes, from `/proc/PID/statm`.
pub fn process_rss_bytes(pid: u32) -> Option<u64> {
    let statm = fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// The machine's CPU time so far, in clock ticks, from the first line of `/proc/stat`: the
/// time the hypervisor ran something else while a CPU of this machine had work (`steal`), and
/// all of it (user, nice, system, idle, iowait, irq, softirq and steal; guest time is in
/// user already). `None` where the line has no steal field.
pub fn machine_cpu_ticks() -> Option<(u64, u64)> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let f: Vec<u64> = line.split_whitespace().take(8).map(|v| v.parse().ok()).collect::<Option<_>>()?;
    (f.len() == 8).then(|| (f[7], f.iter().sum()))
}

/// How often a [`StealSampler`] reads `/proc/stat`.
pub const STEAL_SAMPLE: std::time::Duration = std::time::Duration::from_millis(20);

/// A thread that reads [`machine_cpu_ticks`] every [`STEAL_SAMPLE`] until finished: on a
/// virtual machine, when its CPUs were taken away by the hypervisor. A shared VM loses its
/// CPUs in bursts of a few hundred ms; every process of a local cluster stalls in them, in
/// any phase of a run, so a run's stretches without a commit are read beside them.
#[derive(Debug)]
pub struct StealSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(std::time::Instant, u64, u64)>>,
}

impl StealSampler {
    /// Starts sampling; `None` where `/proc/stat` has no steal field (or the thread cannot be
    /// started).
    pub fn start() -> Option<StealSampler> {
        machine_cpu_ticks()?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("steal-sampler".into())
            .spawn(move || {
                let mut samples = Vec::new();
                while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Some((steal, all)) = machine_cpu_ticks() {
                        samples.push((std::time::Instant::now(), steal, all));
                    }
                    std::thread::sleep(STEAL_SAMPLE);
                }
                samples
            })
            .ok()?;
        Some(StealSampler { stop, thread })
    }

    /// Stops sampling and returns what was read.
    pub fn finish(self) -> StealTrace {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        StealTrace(self.thread.join().unwrap_or_default())
    }
}

/// The samples of a [`StealSampler`]: (when, steal ticks, all ticks), in time order.
#[derive(Debug, Clone, Default)]
pub struct StealTrace(pub Vec<(std::time::Instant, u64, u64)>);

impl StealTrace {
    /// The share of the machine's CPU time the hypervisor took between `from` and `until`,
    /// percent, over the samples enclosing the window (the last at or before `from`, the first
    /// at or after `until`: a window shorter than [`STEAL_SAMPLE`] reads a little wider);
    /// `None` when the samples do not enclose it or no tick passed.
    pub fn stolen_pct(&self, from: std::time::Instant, until: std::time::Instant) -> Option<f64> {
        let s = &self.0;
        let a = s.iter().rev().find(|x| x.0 <= from)?;
        let b = s.iter().find(|x| x.0 >= until)?;
        let all = b.2.checked_sub(a.2).filter(|&d| d > 0)?;
        Some(100.0 * b.1.saturating_sub(a.1) as f64 / all as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// The share is read between the samples enclosing the window; outside them, nothing.
    #[test]
    fn the_stolen_share_is_read_between_the_enclosing_samples() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let trace = StealTrace(vec![(at(0), 10, 1_000), (at(20), 10, 1_004), (at(40), 13, 1_008), (at(60), 13, 1_012)]);
        assert_eq!(trace.stolen_pct(at(20), at(40)), Some(75.0));
        assert_eq!(trace.stolen_pct(at(25), at(35)), Some(75.0), "a short window reads its enclosing samples");
        assert_eq!(trace.stolen_pct(at(0), at(60)), Some(25.0));
        assert_eq!(trace.stolen_pct(at(0), at(61)), None, "no sample after the window");
        assert_eq!(StealTrace::default().stolen_pct(at(0), at(1)), None);
    }

    /// A thread name may hold spaces and parentheses: the name is what lies between the first
    /// `(` and the last `) `.
    #[test]
    fn stat_lines_and_net_dev_parse() {
        let stat = "42 (tokio (rt) w) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1 1 1";
        assert_eq!(stat_cpu_ticks(stat), Some(("tokio (rt) w".to_string(), 300.0)));
        assert_eq!(stat_cpu_ticks("garbage"), None);
        let dev =
            "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes\n\
                       lo: 100 1 0 0 0 0 0 0 100 1 0 0 0 0 0 0\n  eth0: 5000 9 0 0 0 0 0 0 7000 8 0 0 0 0 0 0\n";
        assert_eq!(net_dev_bytes(dev), Some((5_100, 7_100)));
        assert!(local_net_bytes().is_some(), "this host's /proc/net/dev");
    }

    /// Where the kernel reports steal (every Linux since 2.6.11), the figures read.
    #[test]
    fn the_machine_s_ticks_are_read() {
        let Some((steal, all)) = machine_cpu_ticks() else {
            eprintln!("no steal field in /proc/stat here: nothing to check");
            return;
        };
        assert!(all > 0 && steal <= all);
    }
}
