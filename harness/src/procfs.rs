//! Reading processes through `/proc`: CPU seconds of a process and of each of its threads (by
//! thread name), resident memory, and a host's network bytes — read here, or parsed from what
//! another host's `/proc` said (`crate::remote`); and, while a failover runs, where this
//! machine's CPU time goes ([`CpuSampler`]: stolen, idle, and each watched process's share).
//! A process that is gone, or a file that does not parse, yields `None` (or nothing), never
//! a guess.

use std::collections::HashSet;
use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

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

/// The machine's CPU time so far, in clock ticks, from the first line of `/proc/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MachineTicks {
    /// Time the hypervisor ran something else while a CPU of this machine had work.
    pub steal: u64,
    /// Time the CPUs had nothing to run (idle and iowait).
    pub idle: u64,
    /// All of it: user, nice, system, idle, iowait, irq, softirq and steal (guest time is in
    /// user already).
    pub all: u64,
}

/// [`MachineTicks`] of this machine; `None` where the line has no steal field.
pub fn machine_cpu_ticks() -> Option<MachineTicks> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let f: Vec<u64> = line.split_whitespace().take(8).map(|v| v.parse().ok()).collect::<Option<_>>()?;
    (f.len() == 8).then(|| MachineTicks { steal: f[7], idle: f[3] + f[4], all: f.iter().sum() })
}

/// How often a [`CpuSampler`] reads `/proc`.
pub const CPU_SAMPLE: Duration = Duration::from_millis(20);
/// How often a [`CpuSampler`] looks for new processes to watch.
pub const CPU_RESCAN: Duration = Duration::from_millis(500);

/// One reading of a [`CpuSampler`]: the machine's ticks and each watched process's CPU ticks
/// (user + system), by pid.
#[derive(Debug, Clone)]
pub struct CpuSample {
    pub at: Instant,
    pub machine: MachineTicks,
    pub processes: Vec<(u32, u64)>,
}

/// A thread that reads the machine's CPU time ([`machine_cpu_ticks`]) and that of the
/// processes it watches every [`CPU_SAMPLE`] until finished. On a virtual machine it says when
/// the CPUs were taken away by the hypervisor — a shared VM loses its CPUs in bursts of a few
/// hundred ms, and every process of a local cluster stalls in them — and, for a run's
/// stretches without a commit, which processes had the CPUs meanwhile. Processes of this host
/// only: a process on another host is not seen.
#[derive(Debug)]
pub struct CpuSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<CpuTrace>,
}

impl CpuSampler {
    /// Starts sampling: this process under the name `own`, and every process whose command
    /// line (its arguments, the program first) `watch` names, looked for every [`CPU_RESCAN`].
    /// `None` where `/proc/stat` has no steal field (or the thread cannot be started).
    pub fn start(own: &str, watch: impl Fn(&[String]) -> Option<String> + Send + 'static) -> Option<CpuSampler> {
        machine_cpu_ticks()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let me = std::process::id();
        let own = own.to_string();
        let thread = std::thread::Builder::new()
            .name("cpu-sampler".into())
            .spawn(move || {
                let mut trace = CpuTrace { samples: Vec::new(), names: vec![(me, own)] };
                let mut watched = vec![me];
                let mut passed: HashSet<u32> = HashSet::new();
                let mut scanned: Option<Instant> = None;
                // A child this process forked shows this process's command line until it
                // executes its own: it is looked at again, not passed over.
                let forked = command_line(me);
                while !flag.load(Ordering::Relaxed) {
                    if scanned.is_none_or(|t| t.elapsed() >= CPU_RESCAN) {
                        scanned = Some(Instant::now());
                        for pid in new_processes(&watched, &passed) {
                            let args = command_line(pid);
                            match args.as_deref().and_then(&watch) {
                                Some(name) => {
                                    watched.push(pid);
                                    trace.names.push((pid, name));
                                }
                                None if args.is_some() && args == forked => {}
                                None => {
                                    passed.insert(pid);
                                }
                            }
                        }
                    }
                    let at = Instant::now();
                    if let Some(machine) = machine_cpu_ticks() {
                        let mut processes = Vec::with_capacity(watched.len());
                        watched.retain(|&pid| match process_cpu_ticks(pid) {
                            Some(t) => {
                                processes.push((pid, t));
                                true
                            }
                            None => false,
                        });
                        trace.samples.push(CpuSample { at, machine, processes });
                    }
                    std::thread::sleep(CPU_SAMPLE);
                }
                trace
            })
            .ok()?;
        Some(CpuSampler { stop, thread })
    }

    /// Stops sampling and returns what was read.
    pub fn finish(self) -> CpuTrace {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Pids in `/proc` neither watched nor passed over yet.
fn new_processes(watched: &[u32], passed: &HashSet<u32>) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| !watched.contains(pid) && !passed.contains(pid))
        .collect()
}

/// A local process's arguments, the program first (`/proc/PID/cmdline`); `None` for a kernel
/// thread or a process gone.
fn command_line(pid: u32) -> Option<Vec<String>> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> =
        raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    (!args.is_empty()).then_some(args)
}

/// CPU ticks (user + system) a local process has used.
fn process_cpu_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat_cpu_ticks(&stat)?.1 as u64)
}

/// The samples of a [`CpuSampler`], in time order, and the names of the processes watched.
#[derive(Debug, Clone, Default)]
pub struct CpuTrace {
    pub samples: Vec<CpuSample>,
    pub names: Vec<(u32, String)>,
}

/// Where the machine's CPU time went in a window ([`CpuTrace::split`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuSplit {
    /// The window read: from the last sample at or before its start to the first at or after
    /// its end, ms (a little wider than asked).
    pub window_ms: f64,
    /// The share of the machine's CPU time the hypervisor took, percent.
    pub stolen_pct: f64,
    /// The share the CPUs had nothing to run, percent.
    pub idle_pct: f64,
    /// CPU time of each watched process that ran in the window, most first (a process that
    /// started in it counts from its start).
    pub processes: Vec<ProcessCpu>,
}

/// One process's CPU time in a [`CpuSplit`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessCpu {
    pub process: String,
    pub cpu_ms: f64,
}

impl CpuTrace {
    /// The samples enclosing `from`..`until` (the last at or before `from`, the first at or
    /// after `until`), by index.
    fn enclosing(&self, from: Instant, until: Instant) -> Option<(usize, usize)> {
        let s = &self.samples;
        let a = s.iter().rposition(|x| x.at <= from)?;
        let b = s.iter().position(|x| x.at >= until)?;
        Some((a, b))
    }

    /// The share of the machine's CPU time the hypervisor took between `from` and `until`,
    /// percent, over the samples enclosing the window (a window shorter than [`CPU_SAMPLE`]
    /// reads a little wider); `None` when the samples do not enclose it or no tick passed.
    pub fn stolen_pct(&self, from: Instant, until: Instant) -> Option<f64> {
        let (ia, ib) = self.enclosing(from, until)?;
        let (a, b) = (self.samples[ia].machine, self.samples[ib].machine);
        let all = b.all.checked_sub(a.all).filter(|&d| d > 0)?;
        Some(100.0 * b.steal.saturating_sub(a.steal) as f64 / all as f64)
    }

    /// Where the machine's CPU time went between `from` and `until`: stolen, idle, and each
    /// watched process's share; `None` when the samples do not enclose the window or no tick
    /// passed.
    pub fn split(&self, from: Instant, until: Instant) -> Option<CpuSplit> {
        let (ia, ib) = self.enclosing(from, until)?;
        let (a, b) = (&self.samples[ia], &self.samples[ib]);
        let all = b.machine.all.checked_sub(a.machine.all).filter(|&d| d > 0)?;
        let pct = |d: u64| 100.0 * d as f64 / all as f64;
        // SAFETY: sysconf has no preconditions.
        let ms_per_tick = 1e3 / (unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64).max(1.0);
        let mut processes: Vec<ProcessCpu> = Vec::new();
        for (pid, name) in &self.names {
            let ticks = |s: &CpuSample| s.processes.iter().find(|p| p.0 == *pid).map(|p| p.1);
            let Some(last) = self.samples[ia..=ib].iter().rev().find_map(ticks) else { continue };
            // A process not there at the window's start started in it: all its time counts.
            let used = last.saturating_sub(ticks(a).unwrap_or(0));
            if used > 0 {
                processes.push(ProcessCpu { process: name.clone(), cpu_ms: used as f64 * ms_per_tick });
            }
        }
        processes.sort_by(|x, y| y.cpu_ms.total_cmp(&x.cpu_ms));
        Some(CpuSplit {
            window_ms: b.at.duration_since(a.at).as_secs_f64() * 1e3,
            stolen_pct: pct(b.machine.steal.saturating_sub(a.machine.steal)),
            idle_pct: pct(b.machine.idle.saturating_sub(a.machine.idle)),
            processes,
        })
    }
}

impl std::fmt::Display for CpuSplit {
    /// `stolen 26%, idle 2%; node 2 160 ms, node 1 (rejoining) 140 ms, … in 356 ms`: the five
    /// processes that used the most.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stolen {:.0}%, idle {:.0}%", self.stolen_pct, self.idle_pct)?;
        let top: Vec<String> =
            self.processes.iter().take(5).map(|p| format!("{} {:.0} ms", p.process, p.cpu_ms)).collect();
        if !top.is_empty() {
            write!(f, "; {}", top.join(", "))?;
        }
        write!(f, " (of {:.0} ms)", self.window_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: Instant, steal: u64, idle: u64, all: u64, processes: &[(u32, u64)]) -> CpuSample {
        CpuSample { at: t, machine: MachineTicks { steal, idle, all }, processes: processes.to_vec() }
    }

    /// The share is read between the samples enclosing the window; outside them, nothing.
    #[test]
    fn the_stolen_share_is_read_between_the_enclosing_samples() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let trace = CpuTrace {
            samples: vec![
                sample(at(0), 10, 0, 1_000, &[]),
                sample(at(20), 10, 0, 1_004, &[]),
                sample(at(40), 13, 0, 1_008, &[]),
                sample(at(60), 13, 0, 1_012, &[]),
            ],
            names: Vec::new(),
        };
        assert_eq!(trace.stolen_pct(at(20), at(40)), Some(75.0));
        assert_eq!(trace.stolen_pct(at(25), at(35)), Some(75.0), "a short window reads its enclosing samples");
        assert_eq!(trace.stolen_pct(at(0), at(60)), Some(25.0));
        assert_eq!(trace.stolen_pct(at(0), at(61)), None, "no sample after the window");
        assert_eq!(CpuTrace::default().stolen_pct(at(0), at(1)), None);
    }

    /// Each process's time in a window: from the enclosing sample before it, or from its start
    /// when it started inside; up to its last sample when it ended inside.
    #[test]
    fn a_window_s_cpu_time_is_split_by_process() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // SAFETY: sysconf has no preconditions.
        let tick_ms = 1e3 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let names = vec![(1, "node 2".to_string()), (2, "node 1 (rejoining)".to_string()), (3, "node 1".to_string())];
        let trace = CpuTrace {
            samples: vec![
                sample(at(0), 0, 0, 0, &[(1, 100), (3, 50)]),
                sample(at(20), 1, 2, 10, &[(1, 104), (3, 52)]),
                sample(at(40), 2, 3, 20, &[(1, 108), (2, 3)]),
                sample(at(60), 4, 4, 40, &[(1, 112), (2, 9)]),
            ],
            names,
        };
        let split = trace.split(at(0), at(60)).expect("enclosed");
        assert_eq!(split.window_ms, 60.0);
        assert_eq!((split.stolen_pct, split.idle_pct), (10.0, 10.0));
        let got: Vec<(&str, f64)> = split.processes.iter().map(|p| (p.process.as_str(), p.cpu_ms)).collect();
        assert_eq!(
            got,
            vec![("node 2", 12.0 * tick_ms), ("node 1 (rejoining)", 9.0 * tick_ms), ("node 1", 2.0 * tick_ms)],
            "most first; the joiner counts from its start, the killed node up to its last sample"
        );
        let later = trace.split(at(40), at(60)).expect("enclosed");
        assert_eq!(later.processes.len(), 2, "a process with no time in the window is left out: {later:?}");
        let shown = format!(
            "stolen 10%, idle 5%; node 1 (rejoining) {:.0} ms, node 2 {:.0} ms (of 20 ms)",
            6.0 * tick_ms,
            4.0 * tick_ms
        );
        assert_eq!(later.to_string(), shown);
        assert_eq!(trace.split(at(0), at(61)), None);
    }

    /// A live sampler watches this process and the processes its rule names, and reads their
    /// time.
    #[test]
    fn a_sampler_reads_the_processes_it_is_told_to_watch() {
        let Some(_) = machine_cpu_ticks() else {
            eprintln!("no steal field in /proc/stat here: nothing to check");
            return;
        };
        let marker = "2.7182818";
        let mut sleeper = std::process::Command::new("sleep").arg(marker).spawn().expect("sleep runs");
        // Until it executes `sleep`, the child shows this test's command line (the sampler
        // would look at it again only at its next rescan).
        while command_line(sleeper.id()).is_none_or(|a| a.last().map(String::as_str) != Some(marker)) {
            std::thread::yield_now();
        }
        let sampler = CpuSampler::start("this test", move |args| {
            (args.len() == 2 && args[0].ends_with("sleep") && args[1] == marker).then(|| "the sleeper".to_string())
        })
        .expect("the sampler starts");
        // Work this process can be seen doing: 30 ms of its own CPU time.
        let me = std::process::id();
        let start = process_cpu_seconds(me).expect("own stat");
        let mut x = 0u64;
        while process_cpu_seconds(me).expect("own stat") - start < 0.03 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        std::thread::sleep(CPU_SAMPLE * 3);
        let trace = sampler.finish();
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        let names: Vec<&str> = trace.names.iter().map(|(_, n)| n.as_str()).collect();
        assert!(names.contains(&"this test") && names.contains(&"the sleeper"), "{names:?}");
        let (first, last) = (trace.samples.first().expect("samples").at, trace.samples.last().expect("samples").at);
        let split = trace.split(first, last).expect("the samples enclose their own span");
        assert!(split.processes.iter().any(|p| p.process == "this test" && p.cpu_ms > 0.0), "{split:?}");
        assert!(split.idle_pct >= 0.0 && split.idle_pct <= 100.0 && split.stolen_pct <= 100.0);
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
        let Some(t) = machine_cpu_ticks() else {
            eprintln!("no steal field in /proc/stat here: nothing to check");
            return;
        };
        assert!(t.all > 0 && t.steal + t.idle <= t.all);
    }
}
