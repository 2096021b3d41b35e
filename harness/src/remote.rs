//! A cluster's processes on other hosts (issue 37; docs/cluster.md, "Several hosts"): a
//! coordinator or node whose table in cluster.toml has an `ssh` key runs on that host, in its
//! `ssh.dir`, started, watched and stopped through [`crate::hosts::SshHost`].
//!
//! What a host holds (`glass cluster deploy` installs it): `glass` (this build), cluster.toml
//! byte for byte, and in its `cert_dir` the CA's certificate and the certificate and key of
//! each process it runs — never the CA's key, nor another host's keys. Processes run from
//! `ssh.dir` as `./glass node --config cluster.toml --id N`, in a session of their own
//! (`setsid`), output appended to `run_dir/<name>.log` there; their pid is kept in this host's
//! pid file, as a local process's is.
//!
//! Guarantees: a remote pid is signalled only after the host showed it is a live `glass`
//! running that process's arguments from that directory (as [`crate::cluster::is_ours`] checks
//! a local one); a host that runs another build than this one is refused before anything is
//! started; a host that cannot be reached is an error naming it, never taken for a process
//! that is gone.

use std::path::{Path, PathBuf};
use std::process::Command;

use wire::config::{ClusterConfig, SshConfig};
use wire::tls::Identity;

use crate::cluster::{Cluster, Proc, Running};
use crate::error::HarnessError;
use crate::hosts::{quote, SshHost, COMMAND_TIMEOUT};
use crate::Result;

/// What `deploy` installed on one host.
#[derive(Debug, Clone)]
pub struct Deployed {
    pub host: String,
    pub dir: String,
    /// The processes it runs (`coordinator 1`, `node 2`).
    pub processes: Vec<String>,
    /// The files installed, relative to `dir`.
    pub files: Vec<String>,
    /// What `glass --version` says there.
    pub version: String,
}

impl Cluster {
    /// The host that runs `p`, when not this one.
    pub fn ssh_of(&self, p: &Proc) -> Option<SshHost> {
        let ssh = match p {
            Proc::Coordinator(None) => self.config.coordinators.first()?.ssh.as_ref(),
            Proc::Coordinator(Some(id)) => self.config.coordinators.iter().find(|c| c.id == *id)?.ssh.as_ref(),
            Proc::Node(id) => self.config.nodes.iter().find(|n| n.id == *id)?.ssh.as_ref(),
        }?;
        Some(SshHost::new(ssh, &self.config.run_dir))
    }

    /// Each other host and the processes `up` starts there, in the order of cluster.toml.
    pub fn remote_hosts(&self) -> Vec<(SshHost, Vec<Proc>)> {
        // One host per destination, port and directory, in the order first named.
        let mut hosts: Vec<(SshHost, Vec<Proc>)> = Vec::new();
        for p in self.procs() {
            let Some(h) = self.ssh_of(&p) else { continue };
            let key = |c: &SshConfig| (c.to.clone(), c.port, c.dir.clone());
            match hosts.iter_mut().find(|(o, _)| key(&o.config) == key(&h.config)) {
                Some((_, procs)) => procs.push(p),
                None => hosts.push((h, vec![p])),
            }
        }
        hosts
    }

    /// Refuses `what` (an experiment that starts, kills or measures processes by itself) when
    /// any process runs on another host: it does so on this host only.
    pub fn refuse_remote(&self, what: &'static str) -> Result<()> {
        match self.procs().into_iter().find_map(|p| self.ssh_of(&p).map(|h| (p, h))) {
            Some((p, h)) => Err(HarnessError::LocalOnly { what, process: p.label(), host: h.config.to_string() }),
            None => Ok(()),
        }
    }

    /// `dir` (the run or certificate directory), relative to the directory holding
    /// cluster.toml, as a process on another host finds it under its `ssh.dir`.
    fn relative(&self, dir: &Path) -> Result<String> {
        let base = self.path.parent().unwrap_or(Path::new("/"));
        let rel = dir.strip_prefix(base).map_err(|_| {
            HarnessError::io(
                format!("{} is not under {}, where cluster.toml is", dir.display(), base.display()),
                std::io::Error::from(std::io::ErrorKind::InvalidInput),
            )
        })?;
        Ok(match rel.to_string_lossy().into_owned() {
            s if s.is_empty() => ".".to_string(),
            s => s,
        })
    }

    /// Installs on every other host this build of glass (`exe`), cluster.toml and the
    /// certificates of the processes it runs (see the module documentation); `done` hears of
    /// each host as it is finished.
    pub fn deploy(&self, exe: &Path, done: &mut dyn FnMut(&Deployed)) -> Result<Vec<Deployed>> {
        let local = local_version(exe)?;
        let run_rel = self.relative(&self.config.run_dir)?;
        let cert_rel = self.relative(&self.config.cert_dir)?;
        let cert_dir = &self.config.cert_dir;
        if !cert_dir.join(wire::tls::CA_CERT_FILE).exists() {
            wire::tls::init_cluster(&self.config, false)?;
        }
        wire::tls::check_certificates(&self.config).map_err(|source| HarnessError::Tls {
            what: format!("the certificates in {} do not fit {}", cert_dir.display(), self.path.display()),
            source,
        })?;
        let mut out = Vec::new();
        for (host, procs) in self.remote_hosts() {
            let dir = host.config.dir.clone();
            let q = |rel: &str| quote(&format!("{dir}/{rel}"));
            host.run(
                &format!(
                    "mkdir -p -- {} {} {} && chmod 700 -- {}",
                    quote(&dir),
                    q(&run_rel),
                    q(&cert_rel),
                    q(&cert_rel)
                ),
                COMMAND_TIMEOUT,
            )?;
            let mut files = Vec::new();
            // The binary under another name first: a running one is never overwritten.
            host.copy_to(exe, &format!("{dir}/glass.new"))?;
            host.run(
                &format!("chmod 755 -- {} && mv -f -- {} {}", q("glass.new"), q("glass.new"), q("glass")),
                COMMAND_TIMEOUT,
            )?;
            files.push("glass".to_string());
            host.copy_to(&self.path, &format!("{dir}/cluster.toml"))?;
            files.push("cluster.toml".to_string());
            let mut bundle = vec![cert_dir.join(wire::tls::CA_CERT_FILE)];
            for p in &procs {
                let id = self.identity(p);
                bundle.push(id.cert_path(cert_dir));
                bundle.push(id.key_path(cert_dir));
            }
            for f in &bundle {
                let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let to = format!("{cert_rel}/{name}");
                host.copy_to(f, &format!("{dir}/{to}"))?;
                let mode = if name.ends_with(".key") { "600" } else { "644" };
                host.run(&format!("chmod {mode} -- {}", q(&to)), COMMAND_TIMEOUT)?;
                files.push(to);
            }
            let version = self.check_build(&host, &local)?;
            let d = Deployed {
                host: host.config.to_string(),
                dir,
                processes: procs.iter().map(Proc::label).collect(),
                files,
                version,
            };
            done(&d);
            out.push(d);
        }
        Ok(out)
    }

    /// Checks that `host` runs the build `local` (`glass --version` of this one); what it runs.
    pub fn check_build(&self, host: &SshHost, local: &str) -> Result<String> {
        let (ran, out) =
            host.probe(&format!("cd -- {} && ./glass --version", quote(&host.config.dir)), COMMAND_TIMEOUT)?;
        let remote = String::from_utf8_lossy(&out).trim().to_string();
        if !ran || remote != local {
            let remote = if ran { remote } else { "no glass in its directory".to_string() };
            return Err(HarnessError::OtherBuild { host: host.config.to_string(), remote, local: local.to_string() });
        }
        Ok(remote)
    }

    /// Checks every other host's build against `exe`'s before `up` starts anything.
    pub(crate) fn check_builds(&self, exe: &Path) -> Result<()> {
        let hosts = self.remote_hosts();
        if hosts.is_empty() {
            return Ok(());
        }
        let local = local_version(exe)?;
        for (host, _) in hosts {
            self.check_build(&host, &local)?;
        }
        Ok(())
    }

    /// Starts `p` on `host` in the background (see the module documentation), with `extra`
    /// flags; its pid there.
    pub(crate) fn spawn_remote(&self, host: &SshHost, p: &Proc, extra: &[&str]) -> Result<u32> {
        let log = format!("{}/{}.log", self.relative(&self.config.run_dir)?, p.name());
        let args: Vec<String> = p.args(Path::new("cluster.toml")).iter().map(|a| quote(a)).collect();
        let extra: Vec<String> = extra.iter().map(|a| quote(a)).collect();
        let rust_log = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_string());
        let line = format!(
            "cd -- {} && {{ RUST_LOG={} setsid nohup ./glass {} {} >> {} 2>&1 < /dev/null & echo $!; }}",
            quote(&host.config.dir),
            quote(&rust_log),
            args.join(" "),
            extra.join(" "),
            quote(&log),
        );
        let out = host.run(&line, COMMAND_TIMEOUT)?;
        out.trim().parse().map_err(|_| HarnessError::Host {
            host: host.config.to_string(),
            what: format!("start the {}", p.label()),
            problem: format!("the host answered `{}`, not a pid", out.trim()),
        })
    }

    /// Whether `pid` on `host` is a live `glass` running `p` from the host's directory.
    pub(crate) fn remote_is_ours(&self, host: &SshHost, pid: u32, p: &Proc) -> Result<bool> {
        let line = format!(
            "cd -- {} && [ \"$(readlink /proc/{pid}/cwd)\" = \"$(pwd -P)\" ] && cat /proc/{pid}/stat /proc/{pid}/cmdline",
            quote(&host.config.dir)
        );
        let (ran, out) = host.probe(&line, COMMAND_TIMEOUT)?;
        if !ran {
            return Ok(false);
        }
        let Some(nl) = out.iter().position(|b| *b == b'\n') else { return Ok(false) };
        let stat = String::from_utf8_lossy(&out[..nl]);
        let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
        if matches!(state, Some('Z') | Some('X') | None) {
            return Ok(false);
        }
        let args: Vec<String> =
            out[nl + 1..].split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        let want = p.args(Path::new("cluster.toml"));
        Ok(args.len() > want.len() && args[1..=want.len()] == want[..])
    }

    /// Sends `sig` to `r` on `host`, if it is still the process its pid file names.
    pub(crate) fn remote_signal(&self, host: &SshHost, r: &Running, sig: libc::c_int) -> Result<()> {
        if self.remote_is_ours(host, r.pid, &r.proc)? {
            host.probe(&format!("kill -{sig} {}", r.pid), COMMAND_TIMEOUT)?;
        }
        Ok(())
    }

    /// The last lines of `p`'s log on `host` (for an error).
    pub(crate) fn remote_log_tail(&self, host: &SshHost, p: &Proc, n: usize) -> String {
        let Ok(run_rel) = self.relative(&self.config.run_dir) else { return String::new() };
        let log = format!("{}/{run_rel}/{}.log", host.config.dir, p.name());
        match host.run(&format!("tail -n {n} -- {}", quote(&log)), COMMAND_TIMEOUT) {
            Ok(s) => s.lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n"),
            Err(e) => format!("  (cannot read it: {e})"),
        }
    }
}

impl Cluster {
    /// The certificate identity of process `p`.
    fn identity(&self, p: &Proc) -> Identity {
        match p {
            Proc::Coordinator(Some(id)) => Identity::Coordinator(u16::from(*id)),
            Proc::Coordinator(None) => {
                Identity::Coordinator(self.config.coordinators.first().map_or(0, |c| c.id.into()))
            }
            Proc::Node(id) => Identity::Node(*id),
        }
    }
}

/// What `exe --version` prints (the build: version and commit).
pub fn local_version(exe: &Path) -> Result<String> {
    let out = Command::new(exe)
        .arg("--version")
        .output()
        .map_err(|e| HarnessError::io(format!("run {} --version", exe.display()), e))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// What one host's `/proc` said of the cluster's processes there, at one moment.
#[derive(Debug, Clone, Default)]
pub struct HostReading {
    /// Per process found: its label, CPU seconds, CPU seconds per thread name, resident bytes.
    pub processes: Vec<(String, f64, crate::measure::ThreadCpu, u64)>,
    /// Bytes received and sent over every interface of the host so far.
    pub net: Option<(u64, u64)>,
}

impl Cluster {
    /// The processes of this cluster on other hosts, by their pid files, grouped by host.
    pub fn running_remote(&self) -> Vec<(SshHost, Vec<Running>)> {
        self.remote_hosts()
            .into_iter()
            .map(|(host, procs)| {
                let running = procs.into_iter().filter_map(|p| self.running(&p).map(|pid| Running { proc: p, pid }));
                (host, running.collect())
            })
            .collect()
    }
}

/// Reads `procs` and the network counters on `host` in one call (see [`HostReading`]).
pub fn read_host(host: &SshHost, procs: &[Running]) -> Result<HostReading> {
    let pids: Vec<String> = procs.iter().map(|r| r.pid.to_string()).collect();
    let line = format!(
        "getconf CLK_TCK; getconf PAGESIZE; for p in {}; do echo \"== $p\"; cat /proc/$p/stat /proc/$p/statm \
         2>/dev/null; cat /proc/$p/task/*/stat 2>/dev/null; done; echo '== net'; cat /proc/net/dev",
        pids.join(" ")
    );
    let text = host.run(&line, COMMAND_TIMEOUT)?;
    Ok(parse_reading(&text, procs))
}

/// Parses what [`read_host`]'s command printed.
fn parse_reading(text: &str, procs: &[Running]) -> HostReading {
    use crate::procfs::{add_thread, net_dev_bytes, stat_cpu_ticks};
    let mut lines = text.lines();
    let ticks: f64 = lines.next().and_then(|l| l.trim().parse().ok()).unwrap_or(100.0_f64).max(1.0);
    let page: u64 = lines.next().and_then(|l| l.trim().parse().ok()).unwrap_or(4096);
    let rest: Vec<&str> = lines.collect();
    let mut reading = HostReading::default();
    let mut i = 0;
    while i < rest.len() {
        let Some(head) = rest[i].strip_prefix("== ") else {
            i += 1;
            continue;
        };
        let end = rest[i + 1..].iter().position(|l| l.starts_with("== ")).map_or(rest.len(), |k| i + 1 + k);
        let body = &rest[i + 1..end];
        if head == "net" {
            reading.net = net_dev_bytes(&body.join("\n"));
        } else if let Some(r) = head.parse::<u32>().ok().and_then(|pid| procs.iter().find(|r| r.pid == pid)) {
            if let (Some(stat), Some(statm)) = (body.first(), body.get(1)) {
                let cpu = stat_cpu_ticks(stat).map(|(_, t)| t / ticks);
                let rss = statm.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).map(|p| p * page);
                if let (Some(cpu), Some(rss)) = (cpu, rss) {
                    let mut threads = Vec::new();
                    for (name, t) in body[2..].iter().filter_map(|l| stat_cpu_ticks(l)) {
                        add_thread(&mut threads, name, t / ticks);
                    }
                    reading.processes.push((r.proc.label(), cpu, threads, rss));
                }
            }
        }
        i = end;
    }
    reading
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One call's output: the clock and page sizes, then each process's stat, statm and
    /// threads, then the network counters; a process that is gone reads as absent.
    #[test]
    fn a_host_reading_parses() {
        let text = "100\n4096\n== 7\n7 (glass) S 1 7 7 0 -1 0 0 0 0 0 300 100 0 0 20 0 3 0 1 1 1\n1000 250 0 0 0 0 0\n\
                    7 (glass) S 1 7 7 0 -1 0 0 0 0 0 100 0 0 0 20 0 3 0 1 1 1\n\
                    8 (replica-p1) S 1 7 7 0 -1 0 0 0 0 0 200 100 0 0 20 0 3 0 1 1 1\n\
                    == 9\n== net\nInter-| Receive | Transmit\n face |bytes\n  eth0: 10 1 0 0 0 0 0 0 20 1 0 0 0 0 0 0\n";
        let procs = [Running { proc: Proc::Node(1), pid: 7 }, Running { proc: Proc::Node(2), pid: 9 }];
        let r = parse_reading(text, &procs);
        assert_eq!(r.net, Some((10, 20)));
        assert_eq!(r.processes.len(), 1, "node 2 is gone");
        let (label, cpu, threads, rss) = &r.processes[0];
        assert_eq!((label.as_str(), *cpu, *rss), ("node 1", 4.0, 250 * 4096));
        assert_eq!(threads, &vec![("glass".to_string(), 1.0), ("replica-p1".to_string(), 3.0)]);
    }
}

impl Cluster {
    /// Stops `procs` on their hosts (Ctrl-C's sweep, `crate::interrupt`): SIGTERM, then
    /// SIGKILL after `grace`; those that went, and those still there.
    pub fn stop_remote(&self, procs: &[Running], grace: std::time::Duration) -> (Vec<Running>, Vec<Running>) {
        for r in procs {
            self.signal_proc(r, libc::SIGTERM);
        }
        let mut left = self.wait_gone_anywhere(procs, grace);
        if !left.is_empty() {
            for r in &left {
                self.signal_proc(r, libc::SIGKILL);
            }
            left = self.wait_gone_anywhere(&left, std::time::Duration::from_secs(2));
        }
        let gone = procs.iter().filter(|r| !left.iter().any(|l| l.pid == r.pid && l.proc == r.proc)).cloned().collect();
        (gone, left)
    }
}

/// One host's move for a derived cluster: its processes' files go from `from` (the
/// directory `glass cluster deploy` filled) to `to` (the derived cluster's, under it).
#[derive(Debug, Clone)]
pub struct DerivedMove {
    pub host: SshConfig,
    pub from: String,
    pub to: String,
}

/// What a derived cluster's file says, written in `dir`: on other hosts each process's
/// directory is its own one's, followed by the path of `dir` under the directory of the file
/// `config` was read from, so the derived run directory is `.` and the certificates are
/// those `deploy` installed; the moves [`Cluster::prepare_derived_hosts`] makes. A cluster
/// with no process elsewhere is written as it is.
pub fn place_derived(config: &ClusterConfig, dir: &Path) -> Result<(ClusterConfig, Vec<DerivedMove>)> {
    let mut written = config.clone();
    if !config.any_ssh() {
        return Ok((written, Vec::new()));
    }
    let unplaced = |why: String| HarnessError::io(why, std::io::Error::from(std::io::ErrorKind::InvalidInput));
    let source = config.source_dir.clone().ok_or_else(|| unplaced("a derived cluster's file has no source".into()))?;
    let rel = dir.strip_prefix(&source).map_err(|_| {
        unplaced(format!("{} is not under {}, the directory of cluster.toml", dir.display(), source.display()))
    })?;
    let rel = rel.to_string_lossy().into_owned();
    if rel.is_empty() {
        return Err(unplaced(format!(
            "a derived cluster cannot run in {}, the directory of cluster.toml",
            dir.display()
        )));
    }
    written.run_dir = PathBuf::from(".");
    written.cert_dir = relative_path(dir, &config.cert_dir);
    let mut moves: Vec<DerivedMove> = Vec::new();
    let ssh = written.coordinators.iter_mut().filter_map(|c| c.ssh.as_mut());
    for s in ssh.chain(written.nodes.iter_mut().filter_map(|n| n.ssh.as_mut())) {
        let from = s.dir.clone();
        s.dir = format!("{}/{rel}", s.dir.trim_end_matches('/'));
        if !moves.iter().any(|m| m.host.to == s.to && m.host.port == s.port && m.to == s.dir) {
            moves.push(DerivedMove { host: s.clone(), from, to: s.dir.clone() });
        }
    }
    Ok((written, moves))
}

/// `to` as seen from directory `from` (both absolute): `../../certs`.
fn relative_path(from: &Path, to: &Path) -> PathBuf {
    let (f, t): (Vec<_>, Vec<_>) = (from.components().collect(), to.components().collect());
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..f.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c);
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

impl Cluster {
    /// Gives each other host a derived cluster's directory ([`place_derived`]): emptied, with
    /// `glass` linked (or copied) from the deployed directory and this cluster.toml.
    pub fn prepare_derived_hosts(&self, moves: &[DerivedMove]) -> Result<()> {
        for m in moves {
            let host = SshHost::new(&m.host, &self.config.run_dir);
            let (from, to) = (quote(&format!("{}/glass", m.from)), quote(&m.to));
            host.run(
                &format!(
                    "rm -rf -- {to} && mkdir -p -- {to} && {{ ln -f -- {from} {to}/glass 2>/dev/null || cp -- {from} \
                     {to}/glass; }}"
                ),
                COMMAND_TIMEOUT,
            )?;
            host.copy_to(&self.path, &format!("{}/cluster.toml", m.to))?;
        }
        Ok(())
    }
}

impl Cluster {
    /// Copies each remote process's log into this host's `run_dir` (`node-1.log`, …),
    /// replacing what is there, for the figures read from logs; a log that cannot be fetched
    /// is left out.
    pub fn fetch_remote_logs(&self) {
        let Ok(run_rel) = self.relative(&self.config.run_dir) else { return };
        for (host, procs) in self.remote_hosts() {
            for p in procs {
                let from = format!("{}/{run_rel}/{}.log", host.config.dir, p.name());
                let _ = host.copy_from(&from, &self.log_file(&p));
            }
        }
    }
}

impl Cluster {
    /// Bytes of the files this cluster's processes left in their directories on other hosts
    /// besides what the launcher writes (logs, the raft state, cluster.toml, `glass`): the
    /// nodes' databases, logs and checkpoints, as `compare` counts them here; removed unless
    /// `keep`.
    pub fn remote_data_bytes(&self, keep: bool) -> Result<u64> {
        let filter = "-type f ! -name '*.log' ! -name '*.log.[0-9]*' ! -name '*.raft' ! -name cluster.toml \
                      ! -name glass ! -name glass.new";
        let mut bytes = 0u64;
        for (host, _) in self.remote_hosts() {
            let dir = quote(&host.config.dir);
            let out = host.run(&format!("cd -- {dir} && find . {filter} -printf '%s\\n'"), COMMAND_TIMEOUT)?;
            bytes += out.lines().filter_map(|l| l.trim().parse::<u64>().ok()).sum::<u64>();
            if !keep {
                host.run(&format!("cd -- {dir} && find . {filter} -delete"), COMMAND_TIMEOUT)?;
            }
        }
        Ok(bytes)
    }
}
