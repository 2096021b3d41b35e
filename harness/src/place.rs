//! Where a process of the cluster runs, and the one interface through which the harness
//! acts on it there (issue 37; docs/design.md §8): [`ProcessHost`] starts a process, tells
//! whether a pid is still that process, signals it (a kill, a freeze, a thaw), notices that
//! it exited, and reads its CPU, resident memory and the host's network counters. It has two
//! implementations: [`Local`] — fork/exec, kill(2) and this host's `/proc` — and
//! [`SshHost`] — the same, through one OpenSSH command each ([`crate::hosts`],
//! [`crate::remote`]). [`crate::Cluster::host_of`] picks one per process from its `ssh` key;
//! `up`, `down`, `status`, the measurements, `compare` and `failover` reach processes only
//! through it.
//!
//! Guarantees: a pid is signalled only after its host showed it is a live `glass` running
//! that process of that cluster (a recycled pid is never signalled); a host that cannot be
//! asked is an error naming it, never taken for a process that is gone; the instant a signal
//! was sent is read on the host that sent it (see [`Signalled`]).

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant, SystemTime};

use crate::cluster::{is_ours, log_tail, Cluster, Proc, Running};
use crate::error::HarnessError;
use crate::hosts::{quote, SshHost, COMMAND_TIMEOUT};
use crate::procfs::{local_net_bytes, process_cpu_seconds, process_rss_bytes, thread_cpu_seconds};
use crate::remote::HostReading;
use crate::Result;

/// How reports name this host.
pub const THIS_HOST: &str = "this host";

/// A process a host started: its pid there, and — on this host — the child, which this
/// process may wait on.
#[derive(Debug)]
pub struct Launched {
    pub pid: u32,
    pub child: Option<Child>,
}

/// When a signal was sent, on this host's monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct Signalled {
    /// The instant kill(2) returned on the process's host.
    pub at: Instant,
    /// How far `at` may be off: zero here; on another host, the round trip of the command
    /// that sent it when the host's clock could not be read, else zero (the host read its own
    /// clock right after kill(2); the two clocks are taken to agree, as NTP keeps them to
    /// well under a millisecond on one network — namespaces share one clock).
    pub uncertainty: Duration,
}

/// Where a process runs, and what the harness can do to it there (see the module
/// documentation).
pub trait ProcessHost: Send + Sync {
    /// How reports and errors name the host (`this host`, `user@host`).
    fn name(&self) -> String;

    /// Whether it is the host this process runs on.
    fn is_local(&self) -> bool;

    /// Starts process `p` of `cluster` with `extra` flags (`--rejoin`) — from `exe` here, from
    /// the `glass` that `glass cluster deploy` installed elsewhere — its output appended to
    /// its log (which `fresh` first moves aside, as `up` does).
    fn start(&self, cluster: &Cluster, exe: &Path, p: &Proc, extra: &[&str], fresh: bool) -> Result<Launched>;

    /// Whether `pid` is a live (not zombie) `glass` running `p` of `cluster`; an error when
    /// the host cannot be asked.
    fn is_ours(&self, cluster: &Cluster, pid: u32, p: &Proc) -> Result<bool>;

    /// Sends `sig` to `r`, after checking it is still ours; when it was sent, or an error when
    /// it is gone or cannot be signalled.
    fn signal(&self, cluster: &Cluster, r: &Running, sig: libc::c_int) -> Result<Signalled>;

    /// Whether the process `up` launched (`launched`, process `p`) has exited: the error
    /// that says so, with its status where known and the end of its log.
    fn exited(&self, cluster: &Cluster, p: &Proc, launched: &mut Launched) -> Result<Option<HarnessError>>;

    /// The CPU seconds (per thread too) and resident bytes of `procs` and the host's network
    /// counters, at one moment.
    fn read(&self, procs: &[Running]) -> Result<HostReading>;

    /// Runs `program` with `args` on the host (a tool: `ip route add prohibit …` for a
    /// network partition); its standard output, or an error naming the host, the command
    /// and what it printed.
    fn run_tool(&self, program: &str, args: &[&str]) -> Result<String>;
}

/// This host.
#[derive(Debug, Clone, Copy, Default)]
pub struct Local;

impl ProcessHost for Local {
    fn name(&self) -> String {
        THIS_HOST.to_string()
    }

    fn is_local(&self) -> bool {
        true
    }

    fn start(&self, cluster: &Cluster, exe: &Path, p: &Proc, extra: &[&str], fresh: bool) -> Result<Launched> {
        let child = cluster.spawn_here(exe, p, extra, fresh)?;
        Ok(Launched { pid: child.id(), child: Some(child) })
    }

    fn is_ours(&self, cluster: &Cluster, pid: u32, p: &Proc) -> Result<bool> {
        Ok(is_ours(pid, p, &cluster.path))
    }

    fn signal(&self, cluster: &Cluster, r: &Running, sig: libc::c_int) -> Result<Signalled> {
        if !is_ours(r.pid, &r.proc, &cluster.path) {
            return Err(gone(r, &self.name()));
        }
        let pid = libc::pid_t::try_from(r.pid).map_err(|_| gone(r, &self.name()))?;
        // SAFETY: kill(2) with a pid just shown to be this cluster's process; no memory is
        // involved.
        if unsafe { libc::kill(pid, sig) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(HarnessError::io(format!("signal the {} (pid {})", r.proc.label(), r.pid), e));
        }
        Ok(Signalled { at: Instant::now(), uncertainty: Duration::ZERO })
    }

    fn exited(&self, cluster: &Cluster, p: &Proc, launched: &mut Launched) -> Result<Option<HarnessError>> {
        let Some(child) = launched.child.as_mut() else {
            // Not started by this process (a pid file): gone is all that can be said.
            return Ok((!is_ours(launched.pid, p, &cluster.path)).then(|| gone_at_start(cluster, p, &self.name())));
        };
        Ok(match child.try_wait() {
            Ok(Some(status)) => {
                let log = cluster.log_file(p);
                let tail = log_tail(&log, crate::cluster::LOG_TAIL_LINES);
                Some(HarnessError::Exited { process: p.label(), status, log, tail })
            }
            _ => None,
        })
    }

    fn read(&self, procs: &[Running]) -> Result<HostReading> {
        let mut reading = HostReading { net: local_net_bytes(), ..HostReading::default() };
        for r in procs {
            if let Some(cpu) = process_cpu_seconds(r.pid) {
                let rss = process_rss_bytes(r.pid).unwrap_or(0);
                reading.processes.push((r.proc.label(), cpu, thread_cpu_seconds(r.pid), rss));
            }
        }
        Ok(reading)
    }

    fn run_tool(&self, program: &str, args: &[&str]) -> Result<String> {
        let what = format!("{program} {}", args.join(" "));
        let out = std::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| HarnessError::io(format!("run {what} here"), e))?;
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        Err(HarnessError::Host {
            host: self.name(),
            what,
            problem: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

impl ProcessHost for SshHost {
    fn name(&self) -> String {
        self.config.to_string()
    }

    fn is_local(&self) -> bool {
        false
    }

    fn start(&self, cluster: &Cluster, _exe: &Path, p: &Proc, extra: &[&str], _fresh: bool) -> Result<Launched> {
        // The remote log is appended to in every case: `deploy` keeps no earlier run's there.
        let pid = crate::interrupt::spawn_registered_remote(p, cluster.path.clone(), cluster.pid_file(p), || {
            cluster.spawn_remote(self, p, extra)
        })
        .ok_or(HarnessError::Interrupted)??;
        Ok(Launched { pid, child: None })
    }

    fn is_ours(&self, cluster: &Cluster, pid: u32, p: &Proc) -> Result<bool> {
        cluster.remote_is_ours(self, pid, p)
    }

    fn signal(&self, cluster: &Cluster, r: &Running, sig: libc::c_int) -> Result<Signalled> {
        // One call: the check that the pid is still ours, the signal, and the host's clock
        // read right after kill(2) returns — the instant does not depend on how long the
        // command took to arrive and to answer.
        let test = cluster.remote_ours_test(self, r.pid, &r.proc);
        let line = format!("if {test}; then kill -{sig} {pid} && date +%s.%N; else echo gone; fi", pid = r.pid);
        let sent = Instant::now();
        let out = self.run(&line, COMMAND_TIMEOUT)?;
        let answered = Instant::now();
        if out.trim() == "gone" {
            return Err(gone(r, &self.name()));
        }
        Ok(signalled_at(out.trim(), sent, answered, crate::record::wall_clock()))
    }

    fn exited(&self, cluster: &Cluster, p: &Proc, launched: &mut Launched) -> Result<Option<HarnessError>> {
        if cluster.remote_is_ours(self, launched.pid, p)? {
            return Ok(None);
        }
        let tail = cluster.remote_log_tail(self, p, crate::cluster::LOG_TAIL_LINES);
        Ok(Some(HarnessError::ExitedThere { process: p.label(), host: self.name(), tail }))
    }

    fn read(&self, procs: &[Running]) -> Result<HostReading> {
        crate::remote::read_host(self, procs)
    }

    fn run_tool(&self, program: &str, args: &[&str]) -> Result<String> {
        let words: Vec<String> = std::iter::once(program).chain(args.iter().copied()).map(quote).collect();
        self.run(&words.join(" "), COMMAND_TIMEOUT)
    }
}

/// The error for a process that no longer runs on `host`.
fn gone(r: &Running, host: &str) -> HarnessError {
    HarnessError::Host {
        host: host.to_string(),
        what: format!("signal the {} (pid {})", r.proc.label(), r.pid),
        problem: "it no longer runs".into(),
    }
}

fn gone_at_start(cluster: &Cluster, p: &Proc, host: &str) -> HarnessError {
    HarnessError::ExitedThere {
        process: p.label(),
        host: host.to_string(),
        tail: log_tail(&cluster.log_file(p), crate::cluster::LOG_TAIL_LINES),
    }
}

/// When a signal was sent, from what the host printed right after kill(2) (`host_clock`:
/// its wall clock, `seconds.nanoseconds`), the command's round trip on this host's monotonic
/// clock (`sent`, `answered`) and this host's wall clock at `answered`: the host's instant
/// carried to this host's monotonic clock and kept within the round trip (a clock that
/// disagrees by more is not believed past it); the middle of the round trip, as uncertain as
/// the round trip is long, when the host printed no clock.
pub fn signalled_at(host_clock: &str, sent: Instant, answered: Instant, now: SystemTime) -> Signalled {
    let host = host_clock.split_once('.').and_then(|(s, n)| {
        let (s, n) = (s.parse::<u64>().ok()?, n.parse::<u32>().ok()?);
        (n < 1_000_000_000).then(|| SystemTime::UNIX_EPOCH + Duration::new(s, n))
    });
    let Some(host) = host else {
        return Signalled { at: sent + (answered - sent) / 2, uncertainty: answered - sent };
    };
    // How long before `answered` the host's clock says the signal went.
    let before = now.duration_since(host).unwrap_or(Duration::ZERO);
    let at = answered.checked_sub(before).unwrap_or(sent).max(sent);
    Signalled { at, uncertainty: Duration::ZERO }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's clock places the kill inside the round trip; a clock far off is held to it;
    /// no clock gives the middle, with the round trip as uncertainty.
    #[test]
    fn a_remote_kill_is_placed_by_the_hosts_clock_within_the_round_trip() {
        let sent = Instant::now();
        let answered = sent + Duration::from_millis(40);
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        // 30 ms before the answer: 10 ms after it was sent.
        let s = signalled_at("9999.970000000", sent, answered, now);
        assert_eq!(s.at, sent + Duration::from_millis(10));
        assert_eq!(s.uncertainty, Duration::ZERO);
        // A host clock an hour behind: held to the moment the command was sent.
        assert_eq!(signalled_at("6400.000000000", sent, answered, now).at, sent);
        // Ahead of this host's: held to the answer.
        assert_eq!(signalled_at("10001.000000000", sent, answered, now).at, answered);
        // Nothing readable: the middle.
        let s = signalled_at("", sent, answered, now);
        assert_eq!((s.at, s.uncertainty), (sent + Duration::from_millis(20), Duration::from_millis(40)));
    }
}
