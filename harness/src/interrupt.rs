//! Ctrl-C and SIGTERM for commands that start processes (`compare`, `failover`, `bench
//! --config`, `cluster up`). The cluster's processes run in their own process groups (so a
//! terminal's Ctrl-C reaches only `glass`), which makes stopping them `glass`'s job:
//! [`install`] catches SIGINT, SIGTERM and SIGHUP with a handler that only writes the
//! signal's number to a pipe, and a thread of its own acts on what the pipe delivers. When one
//! arrives it stops every process this `glass` started that still runs (SIGTERM,
//! then SIGKILL after [`TERM_GRACE`]), removes their pid files and the temporary folders
//! registered, marks the run record `interrupted` (its `run.json`, the JSON results it headed and its
//! `report.html`), reports what it stopped (the caller prints [`Interrupted`]'s one line) and
//! exits with 128 + the signal's number (130 for SIGINT, 143 for SIGTERM).
//!
//! Guarantees: every process [`crate::cluster`] spawns is registered under the registry's
//! lock, and once a signal is taken no process is spawned any more (the spawn checks under the
//! same lock), so none can start after the sweep; a registered pid is signalled only while
//! `/proc` shows it running the subcommand and configuration it was started with (a recycled
//! pid is never signalled). A process whose `glass` was itself SIGKILLed is left to `glass
//! cluster down`, which finds it by its pid file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::cluster::{is_ours, signal, wait_gone, Proc, Running};
use crate::record::RunMeta;

/// How long stopped processes get between SIGTERM and SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_secs(3);
/// How long to wait for them after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(2);

/// A process this `glass` started.
#[derive(Debug, Clone)]
struct Started {
    proc: Proc,
    pid: u32,
    /// Its `cluster.toml` (what `/proc/PID/cmdline` must show) and pid file.
    config: PathBuf,
    pid_file: PathBuf,
    /// It runs on another host (`crate::remote`): stopped through ssh.
    remote: bool,
}

#[derive(Default)]
struct Registry {
    /// A signal was taken: spawn nothing more.
    interrupted: bool,
    started: Vec<Started>,
    /// Folders to remove on interrupt (temporary WAL directories).
    temporary: Vec<PathBuf>,
    /// The run record's metadata, `run.json` and the JSON results it headed, marked
    /// `interrupted`.
    record: Option<(RunMeta, PathBuf, Vec<PathBuf>)>,
}

static REGISTRY: Mutex<Registry> =
    Mutex::new(Registry { interrupted: false, started: Vec::new(), temporary: Vec::new(), record: None });

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What an interrupt did, for the caller's report.
#[derive(Debug)]
pub struct Interrupted {
    pub signal: libc::c_int,
    /// "node 1 pid 4242 (SIGTERM)", …
    pub stopped: Vec<String>,
    /// Processes that outlived SIGKILL (should never happen; named so the user can act).
    pub left: Vec<String>,
    pub removed: Vec<PathBuf>,
}

impl Interrupted {
    /// The signal's name.
    pub fn signal_name(&self) -> &'static str {
        match self.signal {
            libc::SIGINT => "SIGINT",
            libc::SIGTERM => "SIGTERM",
            libc::SIGHUP => "SIGHUP",
            _ => "a signal",
        }
    }

    /// The exit code: 128 + the signal's number, as a shell reports a death by it.
    pub fn exit_code(&self) -> i32 {
        128 + self.signal
    }
}

/// What an interrupt did, in one line: the signal, what it stopped and removed, and what
/// outlived SIGKILL.
impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "glass: interrupted by {}", self.signal_name())?;
        if self.stopped.is_empty() {
            f.write_str("; no process of this run was running")?;
        } else {
            write!(f, "; stopped {}", self.stopped.join(", "))?;
        }
        for d in &self.removed {
            write!(f, "; removed {}", d.display())?;
        }
        if !self.left.is_empty() {
            write!(f, "; STILL RUNNING after SIGKILL: {}", self.left.join(", "))?;
        }
        Ok(())
    }
}

/// The write end of the pipe the signal handler writes the signal's number to.
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

/// The signal handler: writes the signal's number to the pipe, nothing else (write(2) is
/// async-signal-safe).
extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = sig as u8;
        // SAFETY: writes one byte from a live stack variable to a pipe we own.
        unsafe {
            libc::write(fd, (&byte as *const u8).cast(), 1);
        }
    }
}

/// Catches SIGINT, SIGTERM and SIGHUP and starts the thread that acts on them: it stops what
/// was started, calls `report`, and exits the process.
///
/// A handler, not a blocked mask and `sigwait`: a blocked mask is inherited by every process
/// this one starts (the nodes would no longer stop on SIGTERM), while a caught signal's
/// disposition is reset to the default by `exec`.
pub fn install(report: fn(&Interrupted)) -> std::io::Result<()> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let [read_end, write_end] = fds;
    SIGNAL_PIPE.store(write_end, Ordering::Relaxed);
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with our handler, an empty mask and SA_RESTART (so the
        // other threads' system calls resume) is a valid argument to sigaction(2).
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    std::thread::Builder::new().name("signals".into()).spawn(move || loop {
        let mut byte = 0u8;
        // SAFETY: reads one byte into a live stack variable from the pipe we own.
        let n = unsafe { libc::read(read_end, (&mut byte as *mut u8).cast(), 1) };
        if n != 1 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        let done = stop_everything(libc::c_int::from(byte));
        report(&done);
        std::process::exit(done.exit_code());
    })?;
    Ok(())
}

/// Spawns through `spawn` and registers what it started, unless a signal was taken (then
/// `None`). Holding the registry's lock across the spawn closes the window in which a process
/// could start unseen by the sweep.
pub fn spawn_registered<E>(
    proc: &Proc,
    config: PathBuf,
    pid_file: PathBuf,
    spawn: impl FnOnce() -> Result<std::process::Child, E>,
) -> Option<Result<std::process::Child, E>> {
    let mut r = registry();
    if r.interrupted {
        return None;
    }
    let child = spawn();
    if let Ok(c) = &child {
        r.started.push(Started { proc: proc.clone(), pid: c.id(), config, pid_file, remote: false });
    }
    Some(child)
}

/// [`spawn_registered`] for a process started on another host through ssh (`spawn` returns
/// its pid there): the sweep stops it through ssh.
pub fn spawn_registered_remote<E>(
    proc: &Proc,
    config: PathBuf,
    pid_file: PathBuf,
    spawn: impl FnOnce() -> Result<u32, E>,
) -> Option<Result<u32, E>> {
    let mut r = registry();
    if r.interrupted {
        return None;
    }
    let pid = spawn();
    if let Ok(pid) = &pid {
        r.started.push(Started { proc: proc.clone(), pid: *pid, config, pid_file, remote: true });
    }
    Some(pid)
}

/// Whether a signal was taken (the run is being stopped).
pub fn interrupted() -> bool {
    registry().interrupted
}

/// Removes `dir` if the run is interrupted (a temporary WAL folder).
pub fn register_temporary(dir: PathBuf) {
    registry().temporary.push(dir);
}

/// `dir` no longer needs removing on interrupt.
pub fn unregister_temporary(dir: &std::path::Path) {
    registry().temporary.retain(|d| d != dir);
}

/// The run record to mark `interrupted` (its metadata as last written, and `run.json`).
pub fn set_record(meta: &RunMeta, run_json: PathBuf) {
    registry().record = Some((meta.clone(), run_json, Vec::new()));
}

/// The run record wrote a JSON result headed by its metadata at `path`: marked too.
pub fn add_headed(path: &Path) {
    if let Some((_, _, headed)) = &mut registry().record {
        if !headed.iter().any(|p| p == path) {
            headed.push(path.to_path_buf());
        }
    }
}

/// The run ended on its own: no record to mark any more.
pub fn clear_record() {
    registry().record = None;
}

/// Stops the registered processes on other hosts: what stopped, and what is left.
fn stop_remote(remote: &[Started]) -> (Vec<String>, Vec<String>) {
    let (mut stopped, mut left) = (Vec::new(), Vec::new());
    let configs: std::collections::BTreeSet<&PathBuf> = remote.iter().map(|s| &s.config).collect();
    for config in configs {
        let mine: Vec<Running> = remote
            .iter()
            .filter(|s| &s.config == config)
            .map(|s| Running { proc: s.proc.clone(), pid: s.pid })
            .collect();
        let Ok(cluster) = crate::cluster::Cluster::open(config) else {
            left.extend(mine.iter().map(|r| format!("{} pid {} (on another host)", r.proc.label(), r.pid)));
            continue;
        };
        let (gone, still) = cluster.stop_remote(&mine, TERM_GRACE);
        stopped.extend(gone.iter().map(|r| format!("{} pid {} on its host", r.proc.label(), r.pid)));
        left.extend(still.iter().map(|r| format!("{} pid {} on its host", r.proc.label(), r.pid)));
        for r in &gone {
            let _ = std::fs::remove_file(cluster.pid_file(&r.proc));
        }
    }
    (stopped, left)
}

/// Stops every registered process still running, removes their pid files and the temporary
/// folders, marks the record. Runs on the signal thread.
fn stop_everything(sig: libc::c_int) -> Interrupted {
    let (started, temporary, record) = {
        let mut r = registry();
        r.interrupted = true;
        (r.started.clone(), std::mem::take(&mut r.temporary), r.record.take())
    };
    // Those on other hosts first, through ssh, each cluster at once (SIGTERM, a grace, SIGKILL).
    let (remote, started): (Vec<Started>, Vec<Started>) = started.into_iter().partition(|s| s.remote);
    let (mut stopped, mut left) = stop_remote(&remote);
    let alive: Vec<&Started> = started.iter().filter(|s| is_ours(s.pid, &s.proc, &s.config)).collect();
    for s in &alive {
        signal(s.pid, libc::SIGTERM);
    }
    let running = |list: &[&Started]| -> Vec<Running> {
        list.iter().map(|s| Running { proc: s.proc.clone(), pid: s.pid }).collect()
    };
    // All at once: one grace period, not one per process.
    let mut killed = Vec::new();
    let configs: std::collections::BTreeSet<&PathBuf> = alive.iter().map(|s| &s.config).collect();
    for config in configs {
        let mine: Vec<&Started> = alive.iter().copied().filter(|s| &s.config == config).collect();
        let after_term = wait_gone(&running(&mine), TERM_GRACE, config);
        for r in &after_term {
            signal(r.pid, libc::SIGKILL);
            killed.push(r.pid);
        }
        left.extend(
            wait_gone(&after_term, KILL_WAIT, config).iter().map(|r| format!("{} pid {}", r.proc.label(), r.pid)),
        );
    }
    for s in &alive {
        if left.iter().any(|l| l.ends_with(&format!(" pid {}", s.pid))) {
            continue;
        }
        let how = if killed.contains(&s.pid) { "SIGKILL" } else { "SIGTERM" };
        stopped.push(format!("{} pid {} ({how})", s.proc.label(), s.pid));
        let _ = std::fs::remove_file(&s.pid_file);
    }
    // Reap what we can: the children are ours, and zombies keep nothing bound, but a tidy
    // exit leaves none.
    loop {
        // SAFETY: waitpid with WNOHANG on any child; status is ours to write.
        let mut status = 0;
        if unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } <= 0 {
            break;
        }
    }
    let mut removed = Vec::new();
    for dir in temporary {
        if std::fs::remove_dir_all(&dir).is_ok() {
            removed.push(dir);
        }
    }
    if let Some((mut meta, path, headed)) = record {
        meta.status = "interrupted".into();
        meta.ended_utc = Some(crate::record::rfc3339(crate::record::wall_clock()));
        let _ = crate::record::write_json(&path, &meta);
        for result in &headed {
            let _ = crate::record::rehead(result, &meta);
        }
        if let Some(dir) = path.parent().filter(|d| d.join(crate::html::REPORT_HTML).exists()) {
            let _ = crate::html::write_record_page(dir);
        }
    }
    Interrupted { signal: sig, stopped, left, removed }
}
