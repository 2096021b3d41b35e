//! Which CPUs a node process runs on: `cpus` in its `[[nodes]]` table of `cluster.toml`
//! (docs/design.md §2, "A core per executor"). The entries are indices into the CPUs the
//! process may use when it starts (its affinity mask, ascending), taken modulo their number,
//! so that a file written for one machine pins on another too: `cpus = [1]` is the second
//! CPU the process may use, or the first where it may use only one. The node runs on the CPUs
//! listed; each of its executors on one of them, taking the list in turn (the node's k-th
//! replica, in the order of `[[partitions]]`, on entry k modulo the list's length).
//!
//! Guarantees: [`pin`] sets the mask of every thread the process has when it is called, and
//! threads created later inherit it (the runtime's, the pre-fault threads); [`pin_executor`]
//! narrows the calling executor thread to its own CPU, and [`spread`] gives a thread an
//! executor started (the full stack's workers, a copy's sender) the node's CPUs back; both
//! do nothing in a process that was not pinned. When the kernel refuses, the error names the call and the thread.
//! [`resolve`] is the whole decision, pure, so tests check it without touching the test
//! process's own mask.

use std::io;
use std::sync::OnceLock;

/// The CPUs [`pin`] resolved, in the order `cpus` lists them.
static PINNED: OnceLock<Vec<usize>> = OnceLock::new();

/// The CPUs `cpus` names among `allowed` (the CPUs the process may use, ascending), in the
/// order `cpus` lists them: each index modulo `allowed.len()`. Empty when either is empty.
pub fn resolve(cpus: &[usize], allowed: &[usize]) -> Vec<usize> {
    if allowed.is_empty() {
        return Vec::new();
    }
    cpus.iter().map(|i| allowed[i % allowed.len()]).collect()
}

/// The CPUs this process may run on now, ascending (`sched_getaffinity`).
pub fn allowed() -> io::Result<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; the kernel writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads the set for indices below CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// Sets thread `tid`'s mask (0: the calling thread) to `cpus`.
fn set_mask(tid: libc::pid_t, cpus: &[usize]) -> io::Result<()> {
    // SAFETY: as in `allowed`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: every CPU came from `allowed`, so it is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a live cpu_set_t of the size passed.
    if unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("sched_setaffinity of thread {tid}: {e}")));
    }
    Ok(())
}

/// Pins every thread of this process to the CPUs `cpus` names (see [`resolve`]), keeps them
/// for [`pin_executor`], and returns them in `cpus`'s order. Call it once, before the
/// executors start.
pub fn pin(cpus: &[usize]) -> io::Result<Vec<usize>> {
    let resolved = resolve(cpus, &allowed()?);
    if resolved.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no CPU to run on"));
    }
    let threads: Vec<libc::pid_t> =
        std::fs::read_dir("/proc/self/task")?.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    for tid in threads {
        set_mask(tid, &resolved)?;
    }
    let _ = PINNED.set(resolved.clone());
    Ok(resolved)
}

/// Narrows the calling thread, the node's `k`-th executor, to its own CPU of those [`pin`]
/// resolved, and returns it; `None` (nothing changed) in a process that was not pinned.
pub fn pin_executor(k: usize) -> io::Result<Option<usize>> {
    let Some(cpus) = PINNED.get() else { return Ok(None) };
    let cpu = cpus[k % cpus.len()];
    set_mask(0, &[cpu])?;
    Ok(Some(cpu))
}

/// Gives the calling thread all the node's CPUs again: for a thread an executor starts (the
/// full stack's workers, a copy's sender), which would otherwise inherit the executor's one
/// CPU. Nothing changes in a process that was not pinned; a refusal leaves the thread where
/// it was (it still runs, on its executor's CPU).
pub fn spread() {
    if let Some(cpus) = PINNED.get() {
        let _ = set_mask(0, cpus);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_wrap_over_the_cpus_the_process_may_use_and_keep_their_order() {
        assert_eq!(resolve(&[0], &[0, 1]), vec![0]);
        assert_eq!(resolve(&[1, 0], &[0, 1]), vec![1, 0]);
        // A machine (or a cpuset) with fewer CPUs than the file was written for.
        assert_eq!(resolve(&[1], &[0]), vec![0]);
        assert_eq!(resolve(&[0, 1], &[0]), vec![0, 0]);
        assert_eq!(resolve(&[3], &[4, 5]), vec![5]);
        assert_eq!(resolve(&[0], &[]), Vec::<usize>::new());
    }

    #[test]
    fn the_process_may_run_somewhere() {
        let cpus = allowed().unwrap();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn an_executor_of_a_process_never_pinned_stays_where_it_is() {
        // This test process never calls `pin` (it would move every test's threads).
        assert_eq!(pin_executor(0).unwrap(), None);
    }
}
