//! Helpers shared by the tests that start real clusters (tests/cluster.rs,
//! tests/compare.rs): running the built binary, scratch directories, free ports, a
//! cluster.toml with one warehouse per partition, the processes a test started, and a guard
//! that leaves none behind.
#![allow(dead_code)] // each test crate uses its own subset

pub mod netns;

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn glass(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_glass"))
        .env("GLASS_RESULTS_DIR", std::env::temp_dir().join("glass-test-results"))
        .args(args)
        .output()
        .expect("run glass")
}

pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("glass-cluster-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `N` UDP ports free right now on loopback, from below the kernel's ephemeral range: the
/// processes' outgoing QUIC sockets take ephemeral ports, and with a coordinator group there
/// are many (every node and client dials every coordinator), so a port picked from that range
/// and released could be taken by one before the process configured for it binds it. Where
/// the search starts is spread by process id and call, so tests running at once pick apart.
pub fn free_ports<const N: usize>() -> [u16; N] {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768);
    let (first, last) = (10_000u32, low.max(12_000) - 1);
    let span = last - first;
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut at = (std::process::id().wrapping_mul(7_919) + call * 613) % span;
    let mut sockets = Vec::new();
    while sockets.len() < N {
        let port = (first + at) as u16;
        at = (at + 1) % span;
        // A coordinator's liveness-tether listener takes the same port over TCP.
        if let (Ok(s), Ok(t)) = (UdpSocket::bind(("127.0.0.1", port)), std::net::TcpListener::bind(("127.0.0.1", port)))
        {
            sockets.push((s, t));
        }
    }
    std::array::from_fn(|i| sockets[i].0.local_addr().unwrap().port())
}

/// The committed cluster-rf3.toml — three nodes, every partition on all three — with one
/// coordinator, free ports and one warehouse per partition.
pub fn rf3_single_coordinator_toml(dir: &Path) -> PathBuf {
    let [c0, n1, n2, n3] = free_ports();
    let text = include_str!("../../cluster-rf3.toml");
    let first = text.find("[[coordinators]]").expect("the group");
    let nodes = text.find("[[nodes]]").expect("the nodes");
    let text = format!("{}[coordinator]\nid = 0\naddress = \"127.0.0.1:{c0}\"\n\n{}", &text[..first], &text[nodes..])
        .replace("127.0.0.1:7411", &format!("127.0.0.1:{n1}"))
        .replace("127.0.0.1:7412", &format!("127.0.0.1:{n2}"))
        .replace("127.0.0.1:7415", &format!("127.0.0.1:{n3}"))
        .replace("warehouses = { first = 1, last = 2 }", "warehouses = { first = 1, last = 1 }")
        .replace("warehouses = { first = 3, last = 4 }", "warehouses = { first = 2, last = 2 }");
    assert!(text.contains("first = 2, last = 2") && text.contains(&format!(":{n3}\"")), "{text}");
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The committed cluster.toml — three coordinators, two nodes — with free ports and one
/// warehouse per partition.
pub fn cluster_toml(dir: &Path, cert_dir: &str) -> PathBuf {
    let [c0, c1, c2, n1, n2] = free_ports();
    let text = include_str!("../../cluster.toml")
        .replace("127.0.0.1:7400", &format!("127.0.0.1:{c0}"))
        .replace("127.0.0.1:7403", &format!("127.0.0.1:{c1}"))
        .replace("127.0.0.1:7404", &format!("127.0.0.1:{c2}"))
        .replace("127.0.0.1:7401", &format!("127.0.0.1:{n1}"))
        .replace("127.0.0.1:7402", &format!("127.0.0.1:{n2}"))
        .replace("warehouses = { first = 1, last = 2 }", "warehouses = { first = 1, last = 1 }")
        .replace("warehouses = { first = 3, last = 4 }", "warehouses = { first = 2, last = 2 }")
        .replace("cert_dir = \"run/certs\"", &format!("cert_dir = \"{cert_dir}\""));
    assert!(text.contains("first = 2, last = 2") && text.contains(&format!(":{n2}\"")), "{text}");
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Gives every process of the cluster file `config` a metrics endpoint on a free port
/// (docs/usage.md, "Metrics"); returns each one's address, coordinators first.
pub fn with_metrics(config: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(config).unwrap();
    let ports = free_ports::<8>();
    let mut endpoints = Vec::new();
    let mut out = String::new();
    for line in text.lines() {
        out.push_str(line);
        out.push('\n');
        if line.starts_with("address = ") {
            let address = format!("127.0.0.1:{}", ports[endpoints.len()]);
            out.push_str(&format!("metrics = \"{address}\"\n"));
            endpoints.push(address);
        }
    }
    std::fs::write(config, out).unwrap();
    endpoints
}

/// `GET /metrics` of the endpoint at `address`: the body, parsed by a Prometheus text
/// parser (not glass's own code).
pub fn scrape(address: &str) -> prometheus_parse::Scrape {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(address).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: glass\r\n\r\n").unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200 OK") && head.contains("text/plain; version=0.0.4"), "{head}");
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text")
}

/// The committed cluster.toml with one coordinator instead of the group (the setting
/// without a take-over), free ports and one warehouse per partition.
pub fn single_coordinator_toml(dir: &Path, cert_dir: &str) -> PathBuf {
    let path = cluster_toml(dir, cert_dir);
    let text = std::fs::read_to_string(&path).unwrap();
    let first = text.find("[[coordinators]]").expect("the group");
    let second = first + 1 + text[first + 1..].find("[[coordinators]]").expect("a second coordinator");
    let after = text[second..].find("[[nodes]]").expect("the nodes") + second;
    let text = format!(
        "{}{}",
        text[..first].to_string() + &text[first..second].replacen("[[coordinators]]", "[coordinator]", 1),
        &text[after..]
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The pids `glass` processes running with `config` — or, for a directory, with any
/// configuration under it — have (from /proc), zombies excluded.
pub fn processes_of(config: &Path) -> Vec<u32> {
    let config = std::fs::canonicalize(config).unwrap_or(config.to_path_buf());
    let needle = config.to_string_lossy().into_owned();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        let is_server = args.iter().any(|a| a == "node" || a == "coordinator");
        if !is_server || !args.iter().any(|a| a.starts_with(&needle)) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        if stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next()) == Some('Z') {
            continue;
        }
        pids.push(pid);
    }
    pids
}

/// Stops the test's cluster and kills whatever is left, when the test ends.
pub struct Teardown(pub PathBuf);

impl Drop for Teardown {
    fn drop(&mut self) {
        let _ = glass(&["cluster", "down", "--config", self.0.to_str().unwrap()]);
        let dir = self.0.parent().unwrap().to_path_buf();
        for pid in processes_of(&dir) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        if std::thread::panicking() {
            // Show the processes' logs with the failure; keep the directory.
            for log_path in logs_under(&dir) {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                eprintln!("--- {} (last lines)", log_path.display());
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
            eprintln!("--- kept {}", dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// Every process log (`*.log`) under `dir`.
pub fn logs_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A short checked cluster bench against the running cluster of `cfg` — 3 s after 0.5 s of
/// warm-up, 4 connections × 16 in flight, `--check` — writing its JSON report to `json` and
/// the acknowledged NewOrders to `acks`, with `extra` flags (a profile, shares).
pub fn short_checked_bench(cfg: &str, json: &Path, acks: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["bench", "--config", cfg];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--duration", "3", "--warmup", "0.5", "--clients", "4", "--inflight", "16", "--quiet"]);
    args.extend_from_slice(&["--json", json.to_str().unwrap(), "--ack-log", acks.to_str().unwrap(), "--check"]);
    glass(&args)
}

/// `glass cluster init` then `glass cluster up` for `cfg`, asserting both succeed; returns
/// the output of `up`.
pub fn init_and_up(cfg: &str) -> Output {
    let o = glass(&["cluster", "init", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    let o = glass(&["cluster", "up", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    o
}

/// Every file under `dir` (at any depth), sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Holds the machine for one timing-sensitive cluster at a time within a test binary: the
/// failover tests measure detection, unavailability and rejoin against a 500 ms failure
/// timeout, and two clusters sharing these two cores starve each other's heartbeats (a
/// restarted node installing a rejoin copy went silent for 500 ms under that load and was
/// declared failed again). Poison-tolerant: one failed test does not fail the others.
pub fn one_cluster_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    MACHINE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
