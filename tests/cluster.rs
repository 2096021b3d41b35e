//! End-to-end tests of the cluster: real processes of the built `glass` binary on loopback
//! (coordinator + 2 nodes, 2 partitions × 2 replicas, one warehouse each), started with
//! `glass cluster up` or by `glass bench --config` itself, driven by the cluster bench, then
//! verified from outside: every replica's digest equal (Section 5.3's claim: replicas
//! executing the same ordered stream stay identical without a log), TPC-C's consistency
//! conditions (clause 3.3.2) over the cluster's data, every acknowledged NewOrder present,
//! and no process left after `glass cluster down`.
//!
//! Each test uses its own directory and free ports; a guard runs `cluster down` and kills any
//! process left when the test ends, whatever happened.

mod common;

use common::*;
use std::path::PathBuf;

#[test]
fn a_three_process_cluster_runs_stays_consistent_and_leaves_nothing_behind() {
    let dir = scratch("run");
    let config = cluster_toml(&dir, "run/certs");
    let endpoints = with_metrics(&config);
    // Node 2 pinned, each executor to a CPU of its own in turn; node 1 left to the kernel
    // (docs/design.md §2, "A core per executor").
    let file = std::fs::read_to_string(&config).unwrap();
    let node2 = file.split("[[nodes]]").nth(2).and_then(|t| t.lines().find(|l| l.starts_with("address")));
    let node2 = node2.expect("the file's second node has an address").to_string();
    std::fs::write(&config, file.replacen(&node2, &format!("{node2}\ncpus = [1, 0]"), 1)).unwrap();
    let _teardown = Teardown(config.clone());
    let cfg = config.to_str().unwrap();

    // `up` from a parent holding a descriptor it lets children inherit (as a shell holding a
    // lock does): the cluster's processes must not keep it (issue 40, daemon hygiene).
    let o = glass(&["cluster", "init", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    let held_path = dir.join("held-by-the-shell");
    let held = std::fs::File::create(&held_path).unwrap();
    let o = {
        use std::os::fd::AsRawFd;
        // SAFETY: clears FD_CLOEXEC on a descriptor this test owns.
        unsafe { libc::fcntl(held.as_raw_fd(), libc::F_SETFD, 0) };
        glass(&["cluster", "up", "--config", cfg])
    };
    drop(held);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("cluster up"), "{}", text(&o));
    let pids = processes_of(&config);
    assert_eq!(pids.len(), 5, "three coordinators and two nodes run");
    for pid in pids {
        let fds: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .collect();
        assert!(!fds.contains(&held_path), "process {pid} kept the launcher's descriptor: {fds:?}");
        let files: Vec<&PathBuf> = fds.iter().filter(|f| f.is_absolute() && f.exists()).collect();
        assert!(
            files.iter().all(|f| f.starts_with(&dir) || f.starts_with("/dev") || f.starts_with("/proc")),
            "process {pid} holds only stdio and its own files: {files:?}"
        );
    }

    // Node 2 runs on the CPUs its `cpus` names among those this machine lets the processes
    // use (modulo their number); its executors (partition 1, then 2: the file's order) each
    // on one of them in turn, its other threads on all of them; node 1 where it started.
    let allowed = cpu_list(&std::fs::read_to_string("/proc/self/status").unwrap());
    let on = |i: usize| allowed[i % allowed.len()];
    let mut node2_on = vec![on(1), on(0)];
    node2_on.sort_unstable();
    node2_on.dedup();
    let mut pinned = 0;
    for (node, pid) in processes_of(&config).into_iter().filter_map(|pid| Some((node_id(pid)?, pid))) {
        for (name, cpus) in thread_cpus(pid) {
            pinned += usize::from(node == 2 && name.starts_with("replica-p"));
            let want = match (node, name.as_str()) {
                (2, "replica-p1") => vec![on(1)],
                (2, "replica-p2") => vec![on(0)],
                (2, _) => node2_on.clone(),
                _ => allowed.clone(),
            };
            assert_eq!(cpus, want, "node {node}'s thread {name}");
        }
    }
    assert_eq!(pinned, 2, "node 2's two executors were seen");

    // `up` on a running cluster says so and starts nothing.
    let o = glass(&["cluster", "up", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("already running"), "{}", text(&o));
    assert_eq!(processes_of(&config).len(), 5);

    // A few seconds of the paper's profile, closed loop, several requests in flight.
    let json = dir.join("r.json");
    let acks = dir.join("acks.txt");
    let o = short_checked_bench(cfg, &json, &acks, &["--profile", "paper"]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.starts_with("seed: 1"), "{stdout}");
    assert!(stdout.contains("acknowledged NewOrders:") && stdout.contains(" 0 missing"), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["mode"], "active-active");
    assert_eq!(v["replicas"], 2);
    assert_eq!(v["nodes"], 2);
    assert_eq!(v["warehouses"], 2);
    // Issue 38: the memory after load is read before the warm-up, and counted per copy of a
    // warehouse (each of the 2 warehouses is held by both replicas of its partition).
    assert_eq!(v["warehouse_copies"], 4, "{v}");
    assert_eq!(v["growth_pages"], "small", "cluster.toml's growth_pages: {v}");
    assert!(v["rss_after_load_bytes"].as_u64().unwrap() > 0, "{v}");
    assert!(v["committed"].as_u64().unwrap() > 0, "{v}");
    // Issue 40: the commits counted and the single- and multi-partition commits agree.
    let parts = v["committed_single_partition"].as_u64().unwrap() + v["committed_multi_partition"].as_u64().unwrap();
    assert_eq!(v["committed"].as_u64(), Some(parts), "{v}");
    for field in ["txn_per_sec", "p50_us", "p99_us", "per_txn", "timeline", "clients", "inflight", "busy"] {
        assert!(!v[field].is_null(), "JSON lacks {field}: {v}");
    }
    let acked = std::fs::read_to_string(&acks).unwrap().lines().count();
    assert!(acked > 0, "NewOrders were acknowledged");

    // The same verdict from the standalone command: digests equal, consistency, acks present.
    let o = glass(&["check", "--config", cfg, "--ack-log", acks.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(stdout.matches(" equal ").count(), 2, "both partitions' replicas agree: {stdout}");
    assert_eq!(stdout.matches(" matches").count(), 2, "both copies match their replica: {stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    assert!(stdout.contains(&format!("acknowledged NewOrders: {acked} checked, 0 missing")), "{stdout}");

    // Issue 40, metrics: every process answers a scrape that a Prometheus parser reads, with
    // the figures the run produced.
    let scrapes: Vec<prometheus_parse::Scrape> = endpoints.iter().map(|a| scrape(a)).collect();
    let leader = sample(&scrapes[0], "glass_coordinator_leader", &[]).expect("a leader is known");
    assert!(scrapes[..3].iter().all(|s| sample(s, "glass_coordinator_leader", &[]) == Some(leader)));
    let leading = &scrapes[leader as usize];
    assert_eq!(
        sample(leading, "glass_process_info", &[("role", "coordinator"), ("id", &leader.to_string())]),
        Some(1.0)
    );
    let answered = sample(leading, "glass_coordinator_answers", &[("outcome", "committed")]).unwrap_or(0.0);
    assert!(answered >= v["committed"].as_f64().unwrap(), "every measured commit was answered: {answered}");
    for p in ["1", "2"] {
        assert_eq!(
            sample(leading, "glass_coordinator_partition_state", &[("partition", p), ("phase", "serving")]),
            Some(1.0)
        );
        assert_eq!(sample(leading, "glass_coordinator_live_replicas", &[("partition", p)]), Some(2.0));
        assert!(sample(leading, "glass_coordinator_batches", &[("partition", p)]).unwrap_or(0.0) > 0.0);
        assert!(histogram_count(leading, "glass_coordinator_replica_result_seconds", &[("partition", p)]) > 0);
    }
    for node in &scrapes[3..] {
        assert!(sample(node, "glass_link_bytes", &[("direction", "received")]).unwrap_or(0.0) > 0.0);
        for p in ["1", "2"] {
            let committed = sample(node, "glass_replica_transactions", &[("partition", p), ("outcome", "committed")]);
            assert!(committed.unwrap_or(0.0) > 0.0, "partition {p}");
            assert!(histogram_count(node, "glass_replica_batch_seconds", &[("partition", p)]) > 0);
            let state = [("partition", p), ("role", "replica"), ("phase", "ready")];
            assert_eq!(sample(node, "glass_replica_state", &state), Some(1.0));
        }
    }

    // Status: every process, its partitions, ready, digests equal.
    let o = glass(&["cluster", "status", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(stdout.matches(" ready ").count(), 4, "{stdout}");
    assert_eq!(stdout.matches("are equal").count(), 2, "{stdout}");
    // The same as one JSON document (issue 40): every process with its address, answering,
    // its uptime; the nodes' replicas with their rate and lag; the digests compared.
    let o = glass(&["cluster", "status", "--config", cfg, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["running"].as_bool(), v["healthy"].as_bool()), (Some(true), Some(true)), "{v}");
    let processes = v["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 5, "{v}");
    assert!(processes.iter().all(|p| p["answers"] == true && p["uptime_s"].as_f64().is_some_and(|u| u > 0.0)), "{v}");
    assert_eq!(processes.iter().filter(|p| p["role"] == "leader").count(), 1, "{v}");
    let replicas: Vec<&serde_json::Value> =
        processes.iter().filter(|p| p["role"] == "node").flat_map(|p| p["partitions"].as_array().unwrap()).collect();
    assert_eq!(replicas.len(), 4, "{v}");
    assert!(replicas.iter().all(|r| r["txn_per_s"].is_number() && r["lag_batches"].is_number()), "{v}");
    assert!(v["digests"].as_array().unwrap().iter().all(|d| d["equal"] == true), "{v}");

    // Issue 35, "Checks during traffic": `check` while a client's load runs. The replicas'
    // digests agree at the marked batch and come from copies the executors step between
    // batches, never from a scan of the whole state on the executor.
    // Long enough to outlast the status and check calls below on a loaded machine (each
    // status takes a one-second window plus the digests' copies): the test waits for the
    // traffic's end only after them.
    let traffic = std::process::Command::new(env!("CARGO_BIN_EXE_glass"))
        .env("GLASS_RESULTS_DIR", std::env::temp_dir().join("glass-test-results"))
        .args(["bench", "--config", cfg, "--duration", "20", "--warmup", "0", "--clients", "2", "--quiet"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let committed = || -> u64 {
        let o = glass(&["cluster", "status", "--config", cfg, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        let nodes = v["processes"].as_array().cloned().unwrap_or_default();
        nodes
            .iter()
            .flat_map(|p| p["partitions"].as_array().cloned().unwrap_or_default())
            .filter_map(|r| r["committed"].as_u64())
            .sum()
    };
    let quiet = committed();
    while committed() == quiet {}
    // Under traffic, status times what ran in its one-second window: each replica's executor
    // per batch, and at the leader each partition's batches until a replica's results.
    let o = glass(&["cluster", "status", "--config", cfg, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let processes = v["processes"].as_array().unwrap();
    let timed = |role: &str, field: &str| -> Vec<f64> {
        let rows = processes.iter().filter(|p| p["role"] == role).flat_map(|p| p["partitions"].as_array().unwrap());
        rows.filter_map(|r| r[field].as_f64()).collect()
    };
    let (batch, result) = (timed("node", "batch_p99_ms"), timed("leader", "result_p99_ms"));
    println!("under traffic: executor p99 per batch {batch:?} ms, batch to results p99 {result:?} ms");
    assert_eq!(batch.len(), 4, "every replica timed its batches: {v}");
    assert_eq!(result.len(), 2, "the leader timed both partitions: {v}");
    assert!(batch.iter().chain(&result).all(|ms| *ms > 0.0), "{v}");
    let o = glass(&["check", "--config", cfg]);
    let during = traffic.wait_with_output().unwrap();
    assert!(during.status.success(), "{}", String::from_utf8_lossy(&during.stderr));
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(stdout.matches(" equal ").count(), 2, "both partitions' replicas agree: {stdout}");
    let logs: String =
        (1..=2).map(|n| std::fs::read_to_string(dir.join(format!("run/node-{n}.log"))).unwrap()).collect();
    assert!(logs.matches("state digest taken from a copy").count() >= 4, "{logs}");
    assert!(!logs.contains("state digest taken on the executor"), "{logs}");

    // The whole database as CSV, as the embedded dump writes it.
    let out = dir.join("dump");
    let o = glass(&["dump", "--config", cfg, "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let warehouse_csv = std::fs::read_to_string(out.join("warehouse.csv")).unwrap();
    assert_eq!(warehouse_csv.lines().count(), 3, "a header and two warehouses: {warehouse_csv}");
    let items = std::fs::read_to_string(out.join("item.csv")).unwrap().lines().count();
    assert_eq!(items, 100_001, "ITEM once, not once per partition");

    // A client whose certificate comes from another CA is refused.
    let foreign = scratch("foreign");
    let foreign_cfg = foreign.join("cluster.toml");
    std::fs::write(&foreign_cfg, std::fs::read_to_string(&config).unwrap()).unwrap();
    let o = glass(&["cluster", "init", "--config", foreign_cfg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let o = glass(&["check", "--config", foreign_cfg.to_str().unwrap()]);
    assert!(!o.status.success(), "a foreign client must be refused: {}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("certificate"), "the refusal names the certificate: {stderr}");

    // Down: every process stops, none is left, pid files are gone.
    let o = glass(&["cluster", "down", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("no process left"), "{}", text(&o));
    assert!(processes_of(&config).is_empty(), "processes left: {:?}", processes_of(&config));
    assert!((0..3).all(|c| !dir.join(format!("run/coordinator-{c}.pid")).exists()));
    let o = glass(&["cluster", "status", "--config", cfg]);
    assert!(!o.status.success(), "status of a stopped cluster is not healthy: {}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("the cluster is not running"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&foreign);
}

#[test]
fn a_bench_without_a_running_cluster_starts_one_and_stops_it() {
    let dir = scratch("auto");
    let config = cluster_toml(&dir, "run/certs");
    let _teardown = Teardown(config.clone());
    let cfg = config.to_str().unwrap();
    let o = glass(&["bench", "--config", cfg, "--duration", "1", "--warmup", "0", "--clients", "2", "--quiet"]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("starting one"), "{stdout}");
    assert!(stdout.contains("committed txn/s"), "{stdout}");
    assert!(stdout.contains("no process left"), "{stdout}");
    assert!(processes_of(&config).is_empty(), "processes left: {:?}", processes_of(&config));

    // Again, in another mode, in the same run folder: a new cluster, whose coordinators do not
    // resume the memberships the first one's stored (they put both passive primaries on one
    // node, found measuring; every node keeps the primaries cluster.toml gives it).
    let text_before = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text_before.replace("mode = \"active-active\"", "mode = \"active-passive\"")).unwrap();
    let o = glass(&["bench", "--config", cfg, "--duration", "1", "--warmup", "0", "--clients", "2", "--quiet"]);
    assert!(o.status.success(), "{}", text(&o));
    let coordinator = std::fs::read_to_string(dir.join("run/coordinator-0.log")).unwrap();
    let last_start = coordinator.lines().rfind(|l| l.contains("coordinator starting")).unwrap();
    assert!(last_start.contains("restart=false"), "a new cluster starts afresh: {last_start}");
    for n in 1..=2 {
        let log = std::fs::read_to_string(dir.join(format!("run/node-{n}.log"))).unwrap();
        assert!(!log.contains("left out of the partition's membership"), "node {n}: {log}");
    }
    assert!(processes_of(&config).is_empty(), "processes left: {:?}", processes_of(&config));
}

/// The value of the sample of `name` (a counter's with or without `_total`) whose labels
/// include `labels`.
/// The CPUs of a `Cpus_allowed_list:` line of a `/proc/…/status` text (`0-1,4`).
fn cpu_list(status: &str) -> Vec<usize> {
    let line = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("a Cpus_allowed_list line");
    let mut cpus = Vec::new();
    for range in line.trim().split(',') {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        cpus.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
    }
    cpus
}

/// The node id of process `pid` (its `--id`), if it is a node.
fn node_id(pid: u32) -> Option<u16> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    if !args.iter().any(|a| a == "node") {
        return None;
    }
    args.iter().position(|a| a == "--id").and_then(|i| args.get(i + 1)?.parse().ok())
}

/// Each thread of process `pid`: its name and the CPUs it may run on.
fn thread_cpus(pid: u32) -> Vec<(String, Vec<usize>)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .flatten()
        .filter_map(|t| {
            let name = std::fs::read_to_string(t.path().join("comm")).ok()?.trim().to_string();
            Some((name, cpu_list(&std::fs::read_to_string(t.path().join("status")).ok()?)))
        })
        .collect()
}

fn sample(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let total = format!("{name}_total");
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name || s.metric == total)
        .find(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            other => panic!("{name} is not a number: {other:?}"),
        })
}

/// Observations in histogram `name` summed over its series whose labels include `labels`.
fn histogram_count(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> u64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count) as u64,
            _ => 0,
        })
        .sum()
}
