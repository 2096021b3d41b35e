//! The liveness tether on real processes (docs/cluster.md, "Failure detection"): a node
//! killed with SIGKILL is declared failed by the coordinator because the kernel closed its
//! tether — long before the failure timeout, which these tests set far out of reach — and a
//! node stopped with SIGTERM closes its link cleanly, so the coordinator reads its death
//! notice rather than a lost connection.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// The tiny cluster with one coordinator and a failure timeout of 30 s: a node declared
/// failed within a few seconds was not found by its silence.
fn patient_cluster(dir: &Path) -> PathBuf {
    let config = single_coordinator_toml(dir, "run/certs");
    let text =
        std::fs::read_to_string(&config).unwrap().replace("failure_timeout_ms = 1000", "failure_timeout_ms = 30000");
    assert!(text.contains("failure_timeout_ms = 30000"), "{text}");
    std::fs::write(&config, text).unwrap();
    config
}

/// The line of `path` that contains `needle`, waiting at most `limit` for it.
fn wait_for_line(path: &Path, needle: &str, limit: Duration) -> String {
    let t0 = Instant::now();
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(line) = log.lines().find(|l| l.contains(needle)) {
            return line.to_string();
        }
        assert!(t0.elapsed() < limit, "`{needle}` did not appear in {} within {limit:?}:\n{log}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn pid_of_node(dir: &Path, node: u16) -> u32 {
    let mut s = String::new();
    std::fs::File::open(dir.join(format!("run/node-{node}.pid"))).unwrap().read_to_string(&mut s).unwrap();
    s.trim().parse().unwrap()
}

/// Starts the cluster and waits until both nodes' tethers are up (`cluster up` returns once
/// the partitions serve, by then every link is).
fn up(dir: &Path, config: &Path) -> PathBuf {
    init_and_up(config.to_str().unwrap());
    dir.join("run/coordinator.log")
}

#[test]
fn a_killed_node_is_declared_failed_by_its_tether_not_its_silence() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("tether-kill");
    let config = patient_cluster(&dir);
    let _guard = Teardown(config.clone());
    let log = up(&dir, &config);
    let killed = Instant::now();
    let _ = Command::new("kill").args(["-9", &pid_of_node(&dir, 1).to_string()]).status();
    let line = wait_for_line(&log, "node 1 failed", Duration::from_secs(5));
    let detected = killed.elapsed();
    assert!(line.contains("liveness tether"), "detected by the tether: {line}");
    assert!(line.contains("connection lost"), "{line}");
    eprintln!("SIGKILL → declared failed in {detected:?} (with the log polled every 10 ms)");
    assert!(detected < Duration::from_secs(3), "{detected:?}: {line}");
}

#[test]
fn a_node_stopped_with_sigterm_sends_a_death_notice() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("tether-term");
    let config = patient_cluster(&dir);
    let _guard = Teardown(config.clone());
    let log = up(&dir, &config);
    let stopped = Instant::now();
    let _ = Command::new("kill").args(["-TERM", &pid_of_node(&dir, 2).to_string()]).status();
    let line = wait_for_line(&log, "node 2 failed", Duration::from_secs(5));
    let detected = stopped.elapsed();
    assert!(line.contains("its death notice"), "a clean stop is a death notice: {line}");
    eprintln!("SIGTERM → declared failed in {detected:?}");
    assert!(detected < Duration::from_secs(3), "{detected:?}: {line}");
}
