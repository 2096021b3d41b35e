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
use crate::place::{Local, ProcessHost};
use crate::Result;

/// The folder under `cert_dir` holding one bundle per other host.
pub const BUNDLES_DIR: &str = "hosts";

/// One host's bundle of certificates (see [`Cluster::write_host_bundles`]).
#[derive(Debug, Clone)]
pub struct HostBundle {
    /// The host, as cluster.toml names it (`root@10.0.0.3`, its port and directory).
    pub host: String,
    /// The bundle's folder, `cert_dir/hosts/<name>`.
    pub dir: PathBuf,
    /// Its files' names: `ca.pem`, then each process's certificate and key.
    pub files: Vec<String>,
    /// The processes whose keys it holds (`coordinator 1`, `node 2`).
    pub processes: Vec<String>,
}

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

    /// Writes, for each other host, the bundle of what it may hold in `cert_dir/hosts/<name>/`
    /// (`<name>`: its destination, port and a number where two hosts would share one): the
    /// CA's certificate and the certificate and key of each process it runs — never the CA's
    /// key, never another host's key. Written again whole each time (after `glass cluster
    /// cert` reissued one), so a bundle never keeps a key its host no longer runs; none when
    /// every process runs here. `deploy` copies each host's bundle and nothing else.
    pub fn write_host_bundles(&self) -> Result<Vec<HostBundle>> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let cert_dir = &self.config.cert_dir;
        let root = cert_dir.join(BUNDLES_DIR);
        match std::fs::remove_dir_all(&root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(HarnessError::io(format!("remove {}", root.display()), e)),
        }
        let hosts = self.remote_hosts();
        let mut out: Vec<HostBundle> = Vec::new();
        for (host, procs) in hosts {
            let c = &host.config;
            let mut name: String =
                c.to.chars()
                    .map(|ch| if ch.is_ascii_alphanumeric() || "._@-".contains(ch) { ch } else { '_' })
                    .collect();
            if let Some(port) = c.port {
                name.push_str(&format!("-p{port}"));
            }
            let base = name.clone();
            let mut k = 1;
            while out.iter().any(|b| b.dir.file_name().is_some_and(|n| n.to_string_lossy() == name)) {
                k += 1;
                name = format!("{base}-{k}");
            }
            let dir = root.join(&name);
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| HarnessError::io(format!("create {}", dir.display()), e))?;
            let mut sources = vec![cert_dir.join(wire::tls::CA_CERT_FILE)];
            for p in &procs {
                let id = self.identity(p);
                sources.push(id.cert_path(cert_dir));
                sources.push(id.key_path(cert_dir));
            }
            let mut files = Vec::new();
            for from in &sources {
                let file = from.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let to = dir.join(&file);
                let text = std::fs::read(from).map_err(|e| HarnessError::io(format!("read {}", from.display()), e))?;
                let mode = if file.ends_with(".key") { 0o600 } else { 0o644 };
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(mode)
                    .open(&to)
                    .map_err(|e| HarnessError::io(format!("create {}", to.display()), e))?;
                std::io::Write::write_all(&mut f, &text)
                    .map_err(|e| HarnessError::io(format!("write {}", to.display()), e))?;
                files.push(file);
            }
            out.push(HostBundle {
                host: c.to_string(),
                dir,
                files,
                processes: procs.iter().map(Proc::label).collect(),
            });
        }
        Ok(out)
    }

    /// Installs on every other host this build of glass (`exe`), cluster.toml and its bundle
    /// of certificates ([`Cluster::write_host_bundles`], written again first; see the module
    /// documentation); `done` hears of each host as it is finished.
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
        let bundles = self.write_host_bundles()?;
        let mut out = Vec::new();
        for ((host, procs), bundle) in self.remote_hosts().into_iter().zip(bundles) {
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
            for name in &bundle.files {
                let to = format!("{cert_rel}/{name}");
                host.copy_to(&bundle.dir.join(name), &format!("{dir}/{to}"))?;
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

    /// Opens (or keeps open) the shared ssh connection of each other host running one of
    /// `procs`, so that a signal timed by an experiment waits for no key exchange (seconds on
    /// a loaded machine); a host that does not answer is left to the signal to report.
    pub fn warm(&self, procs: &[Proc]) {
        for p in procs {
            if let Some(h) = self.ssh_of(p) {
                let _ = h.run("true", COMMAND_TIMEOUT);
            }
        }
    }

    /// Refuses `up` on a host that already runs a glass node or coordinator in its network
    /// namespace (the one its ports live in) while none of this cluster's pid files names a
    /// live process: another cluster's, or one left by hand — it would hold this cluster's
    /// ports, or answer for its addresses. Each is named with its pid, command line and
    /// directory.
    pub(crate) fn check_hosts_free(&self) -> Result<()> {
        // Read through /proc so no tool beyond a POSIX shell is needed; `/proc/self` is the
        // readlink itself, in the host's namespace.
        let line = "me=$(readlink /proc/self/ns/net); for d in /proc/[0-9]*; do \
                    [ \"$(cat $d/comm 2>/dev/null)\" = glass ] || continue; \
                    [ \"$(readlink $d/ns/net 2>/dev/null)\" = \"$me\" ] || continue; \
                    printf '%s\\t%s\\t' \"${d#/proc/}\" \"$(readlink $d/cwd 2>/dev/null)\"; \
                    tr '\\0' ' ' < $d/cmdline 2>/dev/null; echo; done";
        for (host, _) in self.remote_hosts() {
            let out = host.run(line, COMMAND_TIMEOUT)?;
            let each = foreign_glass(&out);
            if !each.is_empty() {
                return Err(HarnessError::Occupied { host: host.config.to_string(), each: each.join("; ") });
            }
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

    /// A shell condition that holds on `host` when `pid` is a live (not zombie) `glass`
    /// running `p` from the host's directory ([`ours_test`]), so that a check and what follows
    /// it (a signal) are one ssh call.
    pub(crate) fn remote_ours_test(&self, host: &SshHost, pid: u32, p: &Proc) -> String {
        ours_test(&host.config.dir, pid, &p.args(Path::new("cluster.toml")))
    }

    /// Whether `pid` on `host` is a live `glass` running `p` from the host's directory.
    pub(crate) fn remote_is_ours(&self, host: &SshHost, pid: u32, p: &Proc) -> Result<bool> {
        Ok(host.probe(&self.remote_ours_test(host, pid, p), COMMAND_TIMEOUT)?.0)
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

/// A POSIX shell condition that holds when `pid` is a live (not zombie) process whose working
/// directory is `dir` and whose arguments after argv[0] begin with `args` — read from `/proc`
/// on the host that runs it, as [`crate::cluster::is_ours`] reads them here.
pub fn ours_test(dir: &str, pid: u32, args: &[String]) -> String {
    // Each argument followed by a space: `--id 1 ` never matches `--id 12`; the words read are
    // not globbed (`set -f`).
    let want = format!("{} ", args.join(" "));
    format!(
        "cd -- {dir} && [ \"$(readlink /proc/{pid}/cwd)\" = \"$(pwd -P)\" ] && s=$(cat /proc/{pid}/stat) && \
         s=${{s##*) }} && [ \"${{s%% *}}\" != Z ] && [ \"${{s%% *}}\" != X ] && set -f && \
         set -- $(tr '\\0' ' ' < /proc/{pid}/cmdline) && shift && case \"$* \" in {want}*) true ;; *) false ;; esac",
        dir = quote(dir),
        want = quote(&want),
    )
}

/// The glass nodes and coordinators in what [`Cluster::check_hosts_free`]'s command printed
/// (`pid<TAB>cwd<TAB>argv…` per process), each as `pid N (`argv`) in cwd`: not the `glass`
/// running a command of the tools (`cluster up` itself, when the control host is one of the
/// hosts).
fn foreign_glass(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            let (pid, cwd, argv) = (f.next()?, f.next()?, f.next()?.trim());
            let sub = argv.split(' ').nth(1)?;
            matches!(sub, "node" | "coordinator").then(|| format!("pid {pid} (`{argv}`) in {cwd}"))
        })
        .collect()
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
    /// The processes of this cluster, by their pid files, grouped by the host that runs
    /// them: this host first (always, even with none: the client runs here), then each other
    /// host in the order of cluster.toml.
    pub fn running_by_host(&self) -> Vec<(Box<dyn ProcessHost>, Vec<Running>)> {
        let mut out: Vec<(Box<dyn ProcessHost>, Vec<Running>)> = vec![(Box::new(Local), self.running_here())];
        for (host, procs) in self.remote_hosts() {
            let running = procs.into_iter().filter_map(|p| self.running(&p).map(|pid| Running { proc: p, pid }));
            out.push((Box::new(host), running.collect()));
        }
        out
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

    /// The check run on a host before a signal, run here by `sh` on a real process: its
    /// directory and leading arguments match; another directory, other arguments (`3` is not
    /// `30`), a zombie and a pid that is gone do not.
    #[test]
    fn the_remote_check_tells_a_live_process_by_directory_and_arguments() {
        let dir = std::env::temp_dir().join(format!("glass-ours-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.to_str().unwrap();
        let holds = |line: String| Command::new("sh").arg("-c").arg(line).status().unwrap().success();
        let mut child = Command::new("sleep").arg("30").current_dir(&dir).spawn().unwrap();
        let pid = child.id();
        assert!(holds(ours_test(d, pid, &["30".into()])));
        assert!(!holds(ours_test(d, pid, &["3".into()])), "a prefix of an argument is not it");
        assert!(!holds(ours_test(d, pid, &["30".into(), "--rejoin".into()])));
        assert!(!holds(ours_test("/", pid, &["30".into()])), "another directory");
        child.kill().unwrap();
        // Killed and not yet waited for: a zombie.
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!holds(ours_test(d, pid, &["30".into()])), "a zombie");
        child.wait().unwrap();
        assert!(!holds(ours_test(d, pid, &["30".into()])), "gone");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A host's glass processes: nodes and coordinators count, a tool's `glass` does not.
    #[test]
    fn only_glass_nodes_and_coordinators_occupy_a_host() {
        let out = "41\t/srv/other\t./glass node --config cluster.toml --id 1 \n\
                   42\t/srv/tools\tglass cluster up --config cluster.toml \n\
                   43\t\t/usr/bin/glass coordinator --config /etc/c.toml --id 2 \n";
        assert_eq!(
            foreign_glass(out),
            [
                "pid 41 (`./glass node --config cluster.toml --id 1`) in /srv/other",
                "pid 43 (`/usr/bin/glass coordinator --config /etc/c.toml --id 2`) in "
            ]
        );
    }

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

#[cfg(test)]
mod bundle_tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// `glass cluster init` on a cluster spread over hosts (issue 37, "Certificates per
    /// host"): one bundle per host with `ca.pem` and its own processes' certificates and keys,
    /// no bundle for this host, never the CA's key, keys readable by their owner only; written
    /// again, a bundle follows a reissued certificate and drops what its host no longer runs.
    #[test]
    fn init_writes_one_bundle_per_host_with_only_its_own_keys() {
        let dir = std::env::temp_dir().join(format!("glass-bundles-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let toml = |node2_ssh: &str| {
            format!(
                "mode = \"active-active\"\nseed = 1\nrun_dir = \"run\"\ncert_dir = \"run/certs\"\n\n\
                 [[coordinators]]\nid = 0\naddress = \"10.9.0.1:7400\"\nssh = \"glass@10.9.0.1\"\n\n\
                 [[nodes]]\nid = 1\naddress = \"10.9.0.2:7401\"\nssh = {{ to = \"glass@10.9.0.2\", port = 2222 }}\n\n\
                 [[nodes]]\nid = 2\naddress = \"10.9.0.2:7402\"\n{node2_ssh}\n\n\
                 [[nodes]]\nid = 3\naddress = \"127.0.0.1:7403\"\n\n\
                 [[partitions]]\nid = 1\nwarehouses = {{ first = 1, last = 1 }}\nreplicas = [1, 2, 3]\n"
            )
        };
        let path = dir.join("cluster.toml");
        std::fs::write(&path, toml("ssh = { to = \"glass@10.9.0.2\", port = 2222 }")).unwrap();
        let c = Cluster::open(&path).unwrap();
        wire::tls::init_cluster(&c.config, false).unwrap();
        let bundles = c.write_host_bundles().unwrap();
        let hosts: Vec<(&str, Vec<&str>)> =
            bundles.iter().map(|b| (b.host.as_str(), b.files.iter().map(String::as_str).collect())).collect();
        assert_eq!(bundles.len(), 2, "{bundles:?}");
        assert_eq!(hosts[0].1, ["ca.pem", "coordinator-0.pem", "coordinator-0.key"], "{hosts:?}");
        assert_eq!(hosts[1].1, ["ca.pem", "node-1.pem", "node-1.key", "node-2.pem", "node-2.key"], "{hosts:?}");
        let certs = c.config.cert_dir.clone();
        for b in &bundles {
            assert!(b.dir.starts_with(certs.join(BUNDLES_DIR)), "{b:?}");
            assert_eq!(std::fs::metadata(&b.dir).unwrap().permissions().mode() & 0o777, 0o700);
            let mut on_disk: Vec<String> =
                std::fs::read_dir(&b.dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
            on_disk.sort();
            let mut listed = b.files.clone();
            listed.sort();
            assert_eq!(on_disk, listed, "nothing else in {}", b.dir.display());
            assert!(!on_disk.iter().any(|f| f == wire::tls::CA_KEY_FILE), "the CA's key in {}", b.dir.display());
            for f in &b.files {
                let copy = std::fs::read(b.dir.join(f)).unwrap();
                assert_eq!(copy, std::fs::read(certs.join(f)).unwrap(), "{f} as issued");
                let mode = std::fs::metadata(b.dir.join(f)).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, if f.ends_with(".key") { 0o600 } else { 0o644 }, "{f}");
            }
        }
        // Node 2 moves to this host and node 1's certificate is reissued: written again, the
        // second host's bundle holds node 1's new key and no longer node 2's.
        std::fs::write(&path, toml("")).unwrap();
        let c = Cluster::open(&path).unwrap();
        wire::tls::reissue(&c.config, Identity::Node(1)).unwrap();
        let bundles = c.write_host_bundles().unwrap();
        assert_eq!(bundles[1].files, ["ca.pem", "node-1.pem", "node-1.key"]);
        assert!(!bundles[1].dir.join("node-2.key").exists());
        assert_eq!(
            std::fs::read(bundles[1].dir.join("node-1.key")).unwrap(),
            std::fs::read(certs.join("node-1.key")).unwrap()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
