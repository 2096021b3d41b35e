//! Reading local processes through `/proc`: CPU seconds of a process and of each of its
//! threads (by thread name), and resident memory. A process that is gone, or a file that does
//! not parse, yields `None` (or nothing), never a guess.

use std::fs;

/// CPU seconds (user + system) a local process has used, from `/proc/PID/stat`.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the state (field 3), utime and stime are fields 14 and 15 of stat(5).
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / ticks.max(1.0))
}

/// CPU seconds of a local process's threads, summed per thread name (`/proc/PID/task`).
pub fn thread_cpu_seconds(pid: u32) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    // SAFETY: sysconf has no preconditions.
    let ticks = (unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64).max(1.0);
    for task in tasks.flatten() {
        let Ok(stat) = fs::read_to_string(task.path().join("stat")) else { continue };
        let (Some(open), Some((_, rest))) = (stat.find('('), stat.rsplit_once(") ")) else { continue };
        let name = stat[open + 1..stat.len() - rest.len() - 2].to_string();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let cpu = match (
            fields.get(11).and_then(|f| f.parse::<f64>().ok()),
            fields.get(12).and_then(|f| f.parse::<f64>().ok()),
        ) {
            (Some(u), Some(s)) => (u + s) / ticks,
            _ => continue,
        };
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some(e) => e.1 += cpu,
            None => out.push((name, cpu)),
        }
    }
    out
}

/// Resident memory of a local process in bytes, from `/proc/PID/statm`.
pub fn process_rss_bytes(pid: u32) -> Option<u64> {
    let statm = fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}
