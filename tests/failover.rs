//! Failover on real processes (Section 5.3's availability half): a node of an active-active
//! cluster is killed with SIGKILL mid-run; the partitions keep committing after the failure
//! timeout, nothing any client saw acknowledged is lost (every acknowledged NewOrder's ORDER
//! row and Payment's HISTORY row is in the data), and the restarted node rejoins by copying
//! a live replica — no log anywhere — after which every replica's digest is equal again. A
//! node killed while it rejoins can rejoin cleanly when started again.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const FAILURE_TIMEOUT_MS: f64 = 500.0;

/// The tiny cluster with a short failure timeout, so the test runs in seconds, and one
/// coordinator: these tests time node failures against its log (the coordinator group's own
/// failover, and a node's under the group, are tests/coordinator_group.rs's).
fn quick_cluster(dir: &Path) -> PathBuf {
    let config = single_coordinator_toml(dir, "run/certs");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("heartbeat_ms = 100", "heartbeat_ms = 50")
        .replace("failure_timeout_ms = 1000", &format!("failure_timeout_ms = {FAILURE_TIMEOUT_MS}"));
    assert!(text.contains("failure_timeout_ms = 500"), "{text}");
    std::fs::write(&config, text).unwrap();
    config
}

/// The test: active-active, kill one of two replicas mid-run → zero acknowledged
/// transactions lost, each partition unavailable for less than twice the failure timeout,
/// the restarted node rejoins and its digest equals its peer's, consistency holds.
#[test]
fn killing_a_replica_loses_nothing_and_the_restarted_node_rejoins() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-aa");
    let config = quick_cluster(&dir);
    let _guard = Teardown(config.clone());
    let json = dir.join("f.json");
    let svg = dir.join("f.svg");
    let o = glass(&[
        "failover",
        "--config",
        config.to_str().unwrap(),
        "--duration",
        "16",
        "--at",
        "2",
        "--restart-after",
        "1.5",
        "--inflight",
        "8",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["mode"], "active-active");
    assert_eq!(r["lost_acknowledged"], 0, "{r}");
    assert_eq!(r["outcome_unknown"], 0, "the coordinator stayed up: every request was answered: {r}");
    assert_eq!(r["unaccounted_rows"], 0, "nothing ran twice: {r}");
    assert!(r["acknowledged_checked"].as_u64().unwrap() > 0);
    for p in r["partitions"].as_array().unwrap() {
        let window = p["unavailability_ms"].as_f64().or(p["unavailability_at_most_ms"].as_f64()).unwrap();
        assert!(window < 2.0 * FAILURE_TIMEOUT_MS, "partition unavailable too long: {p}");
    }
    assert!(r["detection_ms"].as_f64().is_some(), "the coordinator noticed: {r}");
    assert_eq!(r["recovery"], "rejoin");
    assert!(r["recovery_ms"].as_f64().is_some(), "the node rejoined within the run: {r}");
    assert_eq!(r["digests_equal"], true, "the rejoined replica has its peer's state: {r}");
    assert_eq!(r["consistent"], true);
    assert!(r["timeline"].as_array().unwrap().len() > 100, "a point per 100 ms");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("SIGKILL node 1"));
    assert!(processes_of(&dir).is_empty(), "failover left processes behind");
}

/// Issue 20, Section 5.3's near-instant failover: SIGKILL one of three active-active
/// replicas under load with `agreement = "majority"`: the two left are a majority and go on
/// answering; the gap each partition shows in the per-100 ms timeline is measured and
/// reported (not bounded here: the machine is shared), with what detected the failure. Zero
/// acknowledged transactions lost; the restarted node rejoins and every replica's digest is
/// equal; consistency holds.
#[test]
fn killing_one_of_three_active_active_replicas_loses_nothing_and_holds_nothing_up() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-aa-rf3");
    let config = rf3_single_coordinator_toml(&dir);
    let _guard = Teardown(config.clone());
    let r = failover_json(&config, &dir, "rf3", "14", &["--restart-after", "1.5"]);
    assert_eq!(r["mode"], "active-active");
    assert_eq!(r["lost_acknowledged"], 0, "{r}");
    assert!(r["acknowledged_checked"].as_u64().unwrap() > 0);
    let detected_by = r["detected_by"].as_str().unwrap_or_else(|| panic!("what detected it is reported: {r}"));
    let gaps: Vec<String> = r["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| match p["unavailability_ms"].as_f64() {
            Some(v) => format!("partition {}: {v:.0} ms", p["partition"]),
            None => format!("partition {}: < {} ms", p["partition"], p["unavailability_at_most_ms"]),
        })
        .collect();
    eprintln!("rf 3 majority, SIGKILL node 1: detected by {detected_by} after {} ms; gaps {gaps:?}", r["detection_ms"]);
    assert_eq!(r["recovery"], "rejoin");
    assert!(r["recovery_ms"].as_f64().is_some(), "the node rejoined within the run: {r}");
    assert_eq!(r["digests_equal"], true, "the rejoined replica has its peers' state: {r}");
    assert_eq!(r["consistent"], true);
    assert!(processes_of(&dir).is_empty(), "failover left processes behind");
}

/// Waits until `path` (a log) contains `needle` `times` times; panics after `limit`.
fn wait_for_log(path: &Path, needle: &str, times: usize, limit: Duration) {
    let t0 = Instant::now();
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.matches(needle).count() >= times {
            return;
        }
        assert!(
            t0.elapsed() < limit,
            "`{needle}` did not appear {times}× in {} within {limit:?}:\n{log}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `glass node --rejoin` for node 1, its output into `log`.
fn rejoining_node(config: &Path, log: &Path) -> Child {
    let out = std::fs::File::create(log).unwrap();
    Command::new(env!("CARGO_BIN_EXE_glass"))
        .env("GLASS_RESULTS_DIR", std::env::temp_dir().join("glass-test-results"))
        .args(["node", "--config", config.to_str().unwrap(), "--id", "1", "--rejoin"])
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

/// Starts the cluster of `config` (the processes' environment extended by `env`), runs a
/// second of the workload if `bench` (so the replicas have a history to copy), SIGKILLs node
/// 1 and waits until the coordinator declared it failed; returns the coordinator's log.
fn up_and_kill_node_1(dir: &Path, config: &Path, env: &[(&str, &str)], bench: bool) -> PathBuf {
    let cfg = config.to_str().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_glass"))
        .env("GLASS_RESULTS_DIR", std::env::temp_dir().join("glass-test-results"))
        .args(["cluster", "up", "--config", cfg])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    if bench {
        let o = glass(&["bench", "--config", cfg, "--duration", "1", "--warmup", "0", "--quiet", "--inflight", "8"]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let coordinator_log = dir.join("run/coordinator.log");
    let _ = Command::new("kill").args(["-9", &pid_of_node_1(dir).to_string()]).status();
    wait_for_log(&coordinator_log, "node 1 failed", 1, Duration::from_secs(20));
    coordinator_log
}

fn pid_of_node_1(dir: &Path) -> u32 {
    let mut s = String::new();
    std::fs::File::open(dir.join("run/node-1.pid")).unwrap().read_to_string(&mut s).unwrap();
    s.trim().parse().unwrap()
}

/// Kill during a rejoin: the joiner dies while it copies; the coordinator forgets it once the
/// failure timeout passes; started again, it rejoins and every replica's digest is equal.
#[test]
fn a_node_killed_while_rejoining_rejoins_when_started_again() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-rejoin-kill");
    let config = quick_cluster(&dir);
    let _guard = Teardown(config.clone());
    let cfg = config.to_str().unwrap();
    let coordinator_log = up_and_kill_node_1(&dir, &config, &[], true);

    let first_log = dir.join("rejoin-1.log");
    let mut first = rejoining_node(&config, &first_log);
    wait_for_log(&first_log, "fetching the starting state from a live replica", 1, Duration::from_secs(30));
    first.kill().unwrap();
    let _ = first.wait();
    wait_for_log(&coordinator_log, "node 1 failed", 2, Duration::from_secs(20));

    let second_log = dir.join("rejoin-2.log");
    let second = rejoining_node(&config, &second_log);
    wait_for_log(&second_log, "rejoined", 2, Duration::from_secs(60));
    check_equal_and_down(cfg, &["node 1", "node 2"], second);
}

/// `glass check` passes with every replica's digest equal, naming each of `nodes`; then the
/// cluster goes down and the hand-started `node` process is reaped.
fn check_equal_and_down(cfg: &str, nodes: &[&str], mut node: Child) {
    let o = glass(&["check", "--config", cfg]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(!out.contains("DIFFER") && nodes.iter().all(|n| out.contains(n)), "{out}");
    let o = glass(&["cluster", "down", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    let _ = node.kill();
    let _ = node.wait();
}

fn failover_json(config: &Path, dir: &Path, name: &str, duration: &str, extra: &[&str]) -> Value {
    let mut args = vec!["--duration", duration, "--at", "2", "--inflight", "8"];
    args.extend_from_slice(extra);
    failover_record(config, dir, name, &args)
}

/// `glass failover --config CONFIG ARGS --quiet --json DIR/NAME.json`, which must pass; its
/// record.
fn failover_record(config: &Path, dir: &Path, name: &str, args: &[&str]) -> Value {
    let json = dir.join(format!("{name}.json"));
    let mut all = vec!["failover", "--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--quiet", "--json", json.to_str().unwrap()]);
    let o = glass(&all);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

/// Active-passive: killing a partition's primary promotes its backup. Synchronous shipping
/// loses nothing acknowledged (the backup applied every answered batch before its client was
/// answered); the batches the backup applied whose results died with the primary are
/// answered, when their clients ask again, from the outcomes the primary shipped with their
/// log records (docs/design.md §11, "Exactly-once answers"): no outcome stays unknown, and
/// the data shows nothing ran twice. Asynchronous shipping's loss is measured and reported.
#[test]
fn killing_the_primary_promotes_the_backup_sync_loses_nothing_async_is_measured() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-ap");
    let config = quick_cluster(&dir);
    let _guard = Teardown(config.clone());
    let r = failover_json(&config, &dir, "sync", "6", &["--mode", "active-passive", "--shipping", "sync"]);
    assert_eq!(r["lost_acknowledged"], 0, "{r}");
    assert_eq!(r["recovery"], "promotion");
    assert!(r["recovery_ms"].as_f64().is_some(), "the backup took over within the run: {r}");
    assert!(r["detection_ms"].as_f64().is_some());
    assert_eq!(r["consistent"], true, "{r}");
    assert_eq!(r["digests_equal"], true, "{r}");
    assert_eq!(r["outcome_unknown"], 0, "{r}");
    assert_eq!(r["unaccounted_rows"], 0, "nothing ran twice: {r}");

    let r = failover_json(&config, &dir, "async", "6", &["--mode", "active-passive", "--shipping", "async"]);
    assert_eq!(r["shipping"], "async");
    assert!(r["lost_acknowledged"].as_u64().is_some(), "the loss is measured: {r}");
    assert_eq!(r["recovery"], "promotion");
    assert_eq!(r["consistent"], true, "{r}");
    assert!(processes_of(&dir).is_empty());
}

/// Full stack (Section 5.3: "the full stack must replay its log"): killing the primary's
/// node promotes the backup that replayed its WAL (after a checkpoint of its own), and
/// nothing acknowledged is lost. The killed node, started again, recovers from its own
/// write-ahead log — cut first where the promoted backup's copy of it ended, so the batches
/// no client heard committed go — and catches up from the new primary's log as its backup,
/// ending with the new primary's digest. With one replica per partition (the conventional
/// single-copy database) the restarted node's WAL recovery alone brings the partition back,
/// with every acknowledged transaction.
#[test]
fn killing_a_full_stack_node_loses_nothing_and_it_recovers_from_its_log() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-fs");
    let config = quick_cluster(&dir);
    let _guard = Teardown(config.clone());
    let r = failover_json(&config, &dir, "fs", "14", &["--mode", "full-stack", "--restart-after", "1.5"]);
    assert_eq!(r["lost_acknowledged"], 0, "{r}");
    assert_eq!(r["recovery"], "wal-recovery+catch-up", "{r}");
    assert!(r["recovery_ms"].as_f64().is_some(), "the old primary is a live backup again within the run: {r}");
    assert_eq!(r["digests_equal"], true, "the recovered backup has the new primary's state: {r}");
    assert_eq!(r["consistent"], true, "{r}");
    assert!(r["acknowledged_checked"].as_u64().unwrap() > 0);
    assert_eq!(r["outcome_unknown"], 0, "{r}");
    assert_eq!(r["unaccounted_rows"], 0, "nothing ran twice: {r}");
    let log = std::fs::read_to_string(find_file(&dir, "node-1.log", "full-stack")).unwrap();
    for needle in ["recovered from the write-ahead log", "the primary's log base applied", "rejoined"] {
        assert_eq!(log.matches(needle).count(), 2, "both partitions on node 1: `{needle}`\n{log}");
    }
    assert!(log.contains("cut=Some(Lsn("), "partition 1's log is cut at the fork point: {log}");
    // The consistency checks after the run read the primary's partitions through a copy of
    // their pages taken while they execute on, rebuilt and streamed off the executor
    // (docs/design.md §10, "Copying without stopping").
    let log = std::fs::read_to_string(find_file(&dir, "node-2.log", "full-stack")).unwrap();
    for needle in ["full-stack page image taken while executing", "full-stack copy rebuilt from its page image"] {
        assert!(log.matches(needle).count() >= 2, "both partitions on node 2: `{needle}`\n{log}");
    }

    // The conventional single-copy database: the node is its partitions' only replica, so
    // it comes back only by restart recovery — ARIES over its checkpoint and write-ahead log
    // — and every transaction acknowledged before the kill must be there.
    let r = failover_json(
        &config,
        &dir,
        "fs-wal",
        "9",
        &["--mode", "full-stack", "--replicas", "1", "--restart-after", "1.5"],
    );
    assert_eq!(r["recovery"], "wal-recovery", "{r}");
    assert_eq!(r["lost_acknowledged"], 0, "WAL recovery brings back every acknowledged transaction: {r}");
    assert!(r["recovery_ms"].as_f64().is_some(), "the node recovered and served within the run: {r}");
    assert_eq!(r["consistent"], true, "{r}");
    assert_eq!(r["digests_equal"], true, "{r}");
    // Every replica of the partition died: what ran and was never answered is truly unknown
    // to its client (restart recovery kept it, or not), and no more than that is unaccounted.
    let unknown = r["outcome_unknown"].as_u64().unwrap();
    assert!(r["unaccounted_rows"].as_u64().unwrap() <= unknown, "nothing ran twice: {r}");
    let restarted = r["restarted_at_s"].as_f64().unwrap();
    let after: f64 = r["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["t_s"].as_f64().unwrap() > restarted)
        .map(|p| p["per_partition"][0].as_f64().unwrap())
        .sum();
    assert!(after > 0.0, "partition 1 commits again after recovery: {r}");
    let log = std::fs::read_to_string(find_file(&dir, "node-1.log", "full-stack")).unwrap();
    let line = log.lines().find(|l| l.contains("recovered from the write-ahead log")).expect("a recovery line");
    let records: u64 = line.split("log_records=").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(records > 0, "recovery replayed the log: {line}");
}

/// The file named `name` under `dir` whose path contains `within`.
fn find_file(dir: &Path, name: &str, within: &str) -> PathBuf {
    files_under(dir)
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == name) && p.to_string_lossy().contains(within))
        .unwrap_or_else(|| panic!("no {name} under {} in a path with {within}", dir.display()))
}

/// Active-passive: the killed primary, started again, rejoins as a backup — it copies the
/// promoted primary's state while that primary ships it every later batch's redo records —
/// and once caught up its digest equals the new primary's; nothing acknowledged is lost.
#[test]
fn a_killed_primary_rejoins_as_a_backup_of_the_promoted_one() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-ap-rejoin");
    let config = quick_cluster(&dir);
    let _guard = Teardown(config.clone());
    let r = failover_json(&config, &dir, "rejoin", "16", &["--mode", "active-passive", "--restart-after", "1.5"]);
    assert_eq!(r["lost_acknowledged"], 0, "{r}");
    assert_eq!(r["recovery"], "rejoin");
    assert!(r["recovery_ms"].as_f64().is_some(), "the old primary is a live backup again within the run: {r}");
    assert_eq!(r["digests_equal"], true, "the rejoined backup has the new primary's state: {r}");
    assert_eq!(r["consistent"], true, "{r}");
}

/// Issue 6, logless rejoin: "the snapshot is checksummed; a corrupt or truncated one is
/// rejected and retried". The live replica's node damages the first copy it serves (one
/// byte flipped after the chunk's checksum, `GLASS_FAULTS=corrupt-snapshot`); the rejoining
/// node rejects that copy, fetches it again, and rejoins with its peer's digest.
#[test]
fn a_damaged_rejoin_copy_is_rejected_and_fetched_again() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-damaged-copy");
    let config = quick_cluster(&dir);
    let _guard = Teardown(config.clone());
    let cfg = config.to_str().unwrap();
    up_and_kill_node_1(&dir, &config, &[("GLASS_FAULTS", "corrupt-snapshot")], false);

    let log = dir.join("rejoin.log");
    let joiner = rejoining_node(&config, &log);
    wait_for_log(&log, "rejoined", 2, Duration::from_secs(60));
    let joined = std::fs::read_to_string(&log).unwrap();
    assert_eq!(joined.matches("copy rejected; fetching it again").count(), 1, "{joined}");
    let source = std::fs::read_to_string(dir.join("run/node-2.log")).unwrap();
    assert_eq!(source.matches("fault injected").count(), 1, "{source}");
    check_equal_and_down(cfg, &["node 1", "node 2"], joiner);
}

/// Issue 36, "every protocol timeout is a named timeout in the machine's tick", on real
/// processes: the live replica's node hangs the first copy it serves after its first chunk,
/// the stream left open (`GLASS_FAULTS=stall-snapshot`). The rejoining partition's machine
/// hears nothing more of that fetch for its patience (`timeouts.transfer_patience_ms`, 1.5 s
/// here), abandons it — its thread stops and its connection closes, which ends the stalled
/// copy on the source — and fetches again; the node rejoins with its peer's digest.
#[test]
fn a_rejoin_copy_that_stalls_is_abandoned_and_fetched_again() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-stalled-copy");
    let config = quick_cluster(&dir);
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("transfer_patience_ms = 30000", "transfer_patience_ms = 1500");
    assert!(text.contains("transfer_patience_ms = 1500"), "{text}");
    std::fs::write(&config, text).unwrap();
    let _guard = Teardown(config.clone());
    let cfg = config.to_str().unwrap();
    up_and_kill_node_1(&dir, &config, &[("GLASS_FAULTS", "stall-snapshot")], false);

    let log = dir.join("rejoin.log");
    let joiner = rejoining_node(&config, &log);
    wait_for_log(&log, "rejoined", 2, Duration::from_secs(60));
    let joined = std::fs::read_to_string(&log).unwrap();
    assert_eq!(joined.matches("fetch abandoned").count(), 1, "{joined}");
    assert_eq!(joined.matches("nothing of the transfer arrived for 1500 ms").count(), 1, "{joined}");
    let source = std::fs::read_to_string(dir.join("run/node-2.log")).unwrap();
    assert_eq!(source.matches("fault injected").count(), 1, "{source}");
    check_equal_and_down(cfg, &["node 1", "node 2"], joiner);
}

/// Attack, "a tool that never reads": a `glass dump` copying a partition from the only live
/// replica is stopped (SIGSTOP) mid-copy, so it reads nothing more; then the killed node
/// rejoins. The rejoining node's request ends the tool's copy (docs/design.md §10, "Copying
/// without stopping"): the partition's redundancy does not wait out the tool's patience.
/// Continued, the tool fails and says why.
#[test]
fn a_tool_stopped_mid_copy_does_not_hold_up_a_rejoin() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-stopped-tool");
    let config = quick_cluster(&dir);
    let _guard = Teardown(config.clone());
    let cfg = config.to_str().unwrap();
    up_and_kill_node_1(&dir, &config, &[], true);

    let source_log = dir.join("run/node-2.log");
    let copying = "copying the partition while it executes";
    let copies_before = std::fs::read_to_string(&source_log).unwrap().matches(copying).count();
    let dump_log = dir.join("dump.log");
    let out = std::fs::File::create(&dump_log).unwrap();
    let mut dump = Command::new(env!("CARGO_BIN_EXE_glass"))
        .args(["dump", "--config", cfg, "--out", dir.join("dump").to_str().unwrap()])
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_log(&source_log, copying, copies_before + 1, Duration::from_secs(30));
    let stopped = Command::new("kill").args(["-STOP", &dump.id().to_string()]).status().unwrap();
    assert!(stopped.success());

    let log = dir.join("rejoin.log");
    let joiner = rejoining_node(&config, &log);
    wait_for_log(&log, "rejoined", 2, Duration::from_secs(60));
    let source = std::fs::read_to_string(&source_log).unwrap();
    assert_eq!(source.matches("a rejoining node's copy of the partition goes first").count(), 1, "{source}");
    assert!(!source.contains("took nothing for"), "the tool's patience did not have to run out:\n{source}");

    let continued = Command::new("kill").args(["-CONT", &dump.id().to_string()]).status().unwrap();
    assert!(continued.success());
    let status = dump.wait().unwrap();
    let said = std::fs::read_to_string(&dump_log).unwrap();
    assert!(!status.success() && said.contains("goes first"), "{status}: {said}");
    check_equal_and_down(cfg, &["node 1", "node 2"], joiner);
}

/// Attack, "a peer that never reads", in active-passive with synchronous shipping: node 2 is
/// stopped (SIGSTOP), so partition 1's backup reads none of its shipments and partition 2's
/// primary goes silent. The leader counts it failed, promotes node 1's replica of partition 2
/// and drops node 2 from partition 1's shipping; node 1's machine then closes its link to
/// node 2 (docs/design.md §14), so nothing stays queued for, or blocked on, a backup that
/// reads nothing, and the cluster goes on committing on node 1 alone. Continued, node 2
/// finds it was counted failed and rejoins both partitions; the digests agree again.
#[test]
fn a_backup_that_stops_reading_is_dropped_and_rejoins_when_continued() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-stopped-backup");
    let config = quick_cluster(&dir);
    let toml =
        std::fs::read_to_string(&config).unwrap().replace("mode = \"active-active\"", "mode = \"active-passive\"");
    assert!(toml.contains("mode = \"active-passive\"") && toml.contains("shipping = \"sync\""), "{toml}");
    std::fs::write(&config, toml).unwrap();
    let _guard = Teardown(config.clone());
    let cfg = config.to_str().unwrap();
    let bench = ["bench", "--config", cfg, "--duration", "1", "--warmup", "0", "--quiet", "--inflight", "8"];
    let o = glass(&["cluster", "up", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    let o = glass(&bench);
    assert!(o.status.success(), "{}", text(&o));

    let mut s = String::new();
    std::fs::File::open(dir.join("run/node-2.pid")).unwrap().read_to_string(&mut s).unwrap();
    let node_2 = s.trim().to_string();
    assert!(Command::new("kill").args(["-STOP", &node_2]).status().unwrap().success());
    wait_for_log(&dir.join("run/coordinator.log"), "node 2 failed", 1, Duration::from_secs(20));
    let primary_log = dir.join("run/node-1.log");
    wait_for_log(&primary_log, "its link is closed", 1, Duration::from_secs(20));
    // Node 1 alone: partition 1 no longer waits for node 2, partition 2 is promoted.
    let json = dir.join("alone.json");
    let mut alone = bench.to_vec();
    alone.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let o = glass(&alone);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(v["committed"].as_u64().unwrap() > 0, "node 1 alone commits: {v}");

    assert!(Command::new("kill").args(["-CONT", &node_2]).status().unwrap().success());
    wait_for_log(&dir.join("run/node-2.log"), "rejoined", 2, Duration::from_secs(60));
    let o = glass(&["check", "--config", cfg]);
    let out = text(&o);
    assert!(o.status.success() && !out.contains("DIFFER"), "{out}");
    let o = glass(&["cluster", "down", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
}

/// Issue 6, logless rejoin "a restarted node (or a new one)": a spare node the file places
/// no replica on (so `cluster up` leaves it alone) joins partition 1 of a running
/// active-active cluster with `glass node --join 1`: it copies a live replica, executes
/// every batch since, and counts — partition 1 then has three replicas with one digest.
/// A partition the file does not have is refused by name.
#[test]
fn a_spare_node_joins_a_running_partition_as_a_new_replica() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-join");
    let config = quick_cluster(&dir);
    let [spare] = free_ports();
    let with_spare = std::fs::read_to_string(&config).unwrap().replacen(
        "[[nodes]]",
        &format!("[[nodes]]\nid = 3\naddress = \"127.0.0.1:{spare}\"\n\n[[nodes]]"),
        1,
    );
    std::fs::write(&config, with_spare).unwrap();
    let _guard = Teardown(config.clone());
    let cfg = config.to_str().unwrap();
    let o = glass(&["cluster", "up", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("node 3"), "a spare is not started: {}", text(&o));
    let o = glass(&["bench", "--config", cfg, "--duration", "1", "--warmup", "0", "--quiet", "--inflight", "8"]);
    assert!(o.status.success(), "{}", text(&o));

    let o = glass(&["node", "--config", cfg, "--id", "3", "--join", "9"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("--join 9: no such partition"), "{}", text(&o));

    let log = dir.join("join.log");
    let out = std::fs::File::create(&log).unwrap();
    let joiner = Command::new(env!("CARGO_BIN_EXE_glass"))
        .env("GLASS_RESULTS_DIR", std::env::temp_dir().join("glass-test-results"))
        .args(["node", "--config", cfg, "--id", "3", "--join", "1"])
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_log(&log, "rejoined", 1, Duration::from_secs(60));
    let o = glass(&["bench", "--config", cfg, "--duration", "1", "--warmup", "0", "--quiet", "--inflight", "8"]);
    assert!(o.status.success(), "{}", text(&o));
    // The new replica is checked too.
    check_equal_and_down(cfg, &["node 1", "node 2", "node 3"], joiner);
}

/// Issue 7: failover in the middle of multi-partition traffic — the standard mix with a
/// fifth of NewOrders spanning both partitions. Active-active: a replica killed and
/// restarted (it rejoins by copy while home pieces wait for remote pieces' reads, which the
/// coordinator sends it again); active-passive: the primary killed, its backup promoted and
/// re-executing the batches no client heard about (remote pieces' reads resent to it).
/// Nothing acknowledged is lost, nothing is half applied (the consistency conditions join
/// the partitions), the replicas end equal.
#[test]
fn failover_during_multi_partition_traffic_loses_nothing_and_applies_nothing_by_halves() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-multi");
    let config = quick_cluster(&dir);
    let _guard = Teardown(config.clone());
    let mp = ["--profile", "standard", "--multi-partition", "20"];
    let mut aa = vec!["--restart-after", "1"];
    aa.extend_from_slice(&mp);
    let r = failover_json(&config, &dir, "aa", "14", &aa);
    assert_eq!(r["recovery"], "rejoin", "{r}");
    assert!(r["recovery_ms"].as_f64().is_some(), "the node rejoined within the run: {r}");
    let mut ap = vec!["--mode", "active-passive", "--shipping", "sync"];
    ap.extend_from_slice(&mp);
    let r2 = failover_json(&config, &dir, "ap", "6", &ap);
    assert_eq!(r2["recovery"], "promotion", "{r2}");
    for r in [r, r2] {
        assert!(r["committed_multi_partition"].as_u64().unwrap() > 50, "multi-partition traffic ran: {r}");
        assert_eq!(r["lost_acknowledged"], 0, "{r}");
        assert_eq!(r["digests_equal"], true, "{r}");
        assert_eq!(r["consistent"], true, "{r}");
    }
    assert!(processes_of(&dir).is_empty());
}

/// Issue 14, item 1 — a kill loop during rejoins: nodes SIGKILLed again and again, each also
/// in the middle of its rejoin. It once stopped both partitions for about 30 s (the
/// coordinator's core waited for room in a dead joiner's queue until QUIC's idle timeout, so
/// its failure detector stopped too) and left a restarted node refused as "a second
/// connection". Now every restarted node rejoins, nothing acknowledged is lost, replicas agree,
/// and the longest stretch without a commit is printed. It is checked only against the
/// 30 s idle timeout — the kind of stall this guards against — not as a performance figure.
#[test]
fn a_kill_loop_during_rejoins_keeps_the_cluster_committing_and_loses_nothing() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-kill-loop");
    let config = quick_cluster(&dir);
    let _guard = Teardown(config.clone());
    let json = dir.join("loop.json");
    let o = glass(&[
        "failover",
        "--config",
        config.to_str().unwrap(),
        "--duration",
        "20",
        "--at",
        "2",
        "--kill-loop",
        "2",
        "--every",
        "6",
        "--restart-after",
        "0.7",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let cycles = r["cycles"].as_u64().unwrap();
    assert!(cycles >= 1, "{r}");
    assert_eq!(r["kills"].as_array().unwrap().len() as u64, 2 * cycles, "{r}");
    assert_eq!(r["rejoins_completed"].as_u64().unwrap(), cycles, "every restarted node rejoined: {r}");
    assert_eq!(r["lost_acknowledged"], 0, "{r}");
    assert_eq!(r["digests_equal"], true, "{r}");
    assert_eq!(r["consistent"], true, "{r}");
    let longest = r["longest_silence_ms"].as_f64().unwrap();
    eprintln!("kill loop: {cycles} cycles; longest stretch without any commit {longest:.0} ms");
    assert!(longest < 15_000.0, "a stall of the QUIC-idle-timeout kind: {r}");
    assert!(processes_of(&dir).is_empty(), "the kill loop left processes behind");
}

/// The longest run of 100 ms buckets in which partition `p` (0-based) committed nothing,
/// between `from_s` and `until_s` of the record's timeline.
fn zero_buckets(r: &Value, p: usize, from_s: f64, until_s: f64) -> usize {
    let (mut run, mut longest) = (0, 0);
    for point in r["timeline"].as_array().unwrap() {
        let t = point["t_s"].as_f64().unwrap();
        if t < from_s || t + 0.1 > until_s {
            continue;
        }
        if point["per_partition"][p].as_f64().unwrap() == 0.0 {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    longest
}

/// `glass failover` under closed-loop saturating load (128 requests in flight per
/// connection, for the whole run) on the quick cluster, `extra` flags added; its record.
fn saturated_failover(config: &Path, dir: &Path, name: &str, extra: &[&str]) -> Value {
    let mut args = vec!["--duration", "20", "--at", "2", "--restart-after", "1"];
    args.extend_from_slice(extra);
    failover_record(config, dir, name, &args)
}

/// Issue 35 (docs/design.md §10, "Copying without stopping", "Catching up under load"):
/// active-active under closed-loop saturating load for the whole run, a replica SIGKILLed and
/// restarted. It is live again while the load still runs; the survivor never stops to copy —
/// its timeline shows no stretch without a commit during the rejoin longer than the one at the
/// kill (counted in 100 ms buckets, one bucket of scheduling noise allowed: a ratio of two
/// measurements of the same run, not a wall-clock bound); nothing acknowledged is lost, the
/// digests are equal and TPC-C's consistency conditions hold. The gaps are printed.
#[test]
fn a_replica_rejoins_while_saturating_load_runs_and_the_survivor_never_stops() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-rejoin-under-load");
    let config = quick_cluster(&dir);
    let _guard = Teardown(config.clone());
    let r = saturated_failover(&config, &dir, "f", &[]);
    assert_eq!(r["recovery"], "rejoin", "{r}");
    let rejoin = &r["rejoin"];
    assert_eq!(rejoin["live_under_load"], true, "live again before the load ended: {rejoin}");
    let (kill, restart) = (r["killed_at_s"].as_f64().unwrap(), r["restarted_at_s"].as_f64().unwrap());
    let pct = |v: &serde_json::Value| v.as_f64().map_or("—".to_string(), |p| format!("{p:.0}%"));
    let live = restart + r["recovery_ms"].as_f64().unwrap() / 1e3;
    for p in 0..2 {
        let at_kill = zero_buckets(&r, p, kill - 0.1, restart);
        let during = zero_buckets(&r, p, restart, live);
        let outage = &r["partitions"][p];
        eprintln!(
            "partition {}: {at_kill} empty 100 ms buckets at the kill, {during} during the rejoin; no commit for \
             {:.0} ms at the kill, {:.0} ms at most in the steady state ({} of the CPUs stolen meanwhile), {:.0} \
             ms at most during the rejoin ({} stolen; one client waited {:.0} ms at most); {} batches replayed",
            p + 1,
            outage["silence_at_kill_ms"].as_f64().unwrap_or(0.0),
            outage["steady_silence_ms"],
            pct(&outage["steady_silence_cpu_stolen_pct"]),
            rejoin["longest_silence_ms"][p],
            pct(&rejoin["longest_silence_cpu_stolen_pct"][p]),
            rejoin["longest_gap_ms"][p],
            rejoin["replayed_batches"][p]
        );
        let split = |v: &Value| {
            let procs = v["processes"].as_array().map_or(String::new(), |ps| {
                ps.iter()
                    .map(|p| format!("{} {} ms", p["process"].as_str().unwrap_or("?"), p["cpu_ms"]))
                    .collect::<Vec<_>>()
                    .join(", ")
            });
            format!("stolen {}, idle {}; {procs}", pct(&v["stolen_pct"]), pct(&v["idle_pct"]))
        };
        eprintln!(
            "partition {}: CPU during the steady state's stretch: {}; during the rejoin's: {}",
            p + 1,
            split(&outage["steady_silence_cpu"]),
            split(&rejoin["longest_silence_cpu"][p])
        );
        assert!(during <= at_kill.max(1), "partition {}: the survivor stopped during the rejoin: {rejoin}", p + 1);
    }
    // Each stretch is read beside who had the CPUs: where the machine's CPU time could be read,
    // some stretch names a node of this cluster, known by its command line.
    if !r["cpu_stolen_pct"].is_null() {
        let splits =
            (0..2).flat_map(|p| [&r["partitions"][p]["steady_silence_cpu"], &rejoin["longest_silence_cpu"][p]]);
        let named: Vec<&str> =
            splits.filter_map(|s| s["processes"].as_array()).flatten().filter_map(|p| p["process"].as_str()).collect();
        assert!(named.iter().any(|n| n.starts_with("node ")), "no stretch names a node: {named:?} in {r}");
    }
    assert_eq!(r["lost_acknowledged"], 0, "{r}");
    assert_eq!(r["digests_equal"], true, "{r}");
    assert_eq!(r["consistent"], true, "{r}");
    // Issue 40: the record lists the run's events in time order, on the timeline's clock —
    // the harness's kill and restart where it says it killed and restarted, and the
    // coordinator's detection and rejoins between and after them.
    let events = r["events"].as_array().expect("the record lists the run's events");
    let at = |what: &str| {
        events.iter().find(|e| e["what"].as_str().is_some_and(|w| w.contains(what))).and_then(|e| e["t_s"].as_f64())
    };
    let times: Vec<f64> = events.iter().filter_map(|e| e["t_s"].as_f64()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "in time order: {events:?}");
    assert!((at("SIGKILL node 1").unwrap() - kill).abs() < 0.05, "the kill at the record's time: {events:?}");
    assert!((at("restarted node 1").unwrap() - restart).abs() < 0.05, "the restart too: {events:?}");
    let detected = at("node 1 failed (detected by").expect("the coordinator's detection is listed");
    assert!(kill <= detected && detected < restart, "{events:?}");
    assert!(at("is a live replica of partition").is_some_and(|t| t > restart), "{events:?}");
}

/// Issue 35: right after the first joiner is live again, the other replica's node is
/// SIGKILLed too: the rejoined node alone holds each partition, and nothing acknowledged —
/// before the first kill, during the rejoin or after — is lost.
#[test]
fn a_second_kill_right_after_the_rejoin_loses_nothing() {
    let _machine = one_cluster_at_a_time();
    let dir = scratch("failover-second-kill");
    let config = quick_cluster(&dir);
    let _guard = Teardown(config.clone());
    let r = saturated_failover(&config, &dir, "f", &["--then-kill", "2"]);
    assert!(r["then_killed_at_s"].as_f64().is_some(), "the second kill happened within the run: {r}");
    assert_eq!(r["rejoin"]["live_under_load"], true, "{r}");
    assert_eq!(r["lost_acknowledged"], 0, "{r}");
    assert_eq!(r["consistent"], true, "{r}");
}
