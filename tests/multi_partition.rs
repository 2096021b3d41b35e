//! Multi-partition transactions end to end (issue 7): the standard TPC-C profile — remote
//! order lines (clause 2.4.1.5) and remote customers (clause 2.5.1.2) drawn from every
//! warehouse of the cluster, and a fifth of NewOrders forced to span partitions — on a real
//! 2-partition cluster (coordinator + 2 node processes on loopback, QUIC with mutual TLS), in
//! each of the three modes. Afterwards, from outside: TPC-C's consistency conditions over the
//! whole database (conditions 8–10 and 12 join HISTORY, CUSTOMER, ORDER and ORDER-LINE across
//! both partitions: a transaction half applied breaks them), every replica's digest equal,
//! every acknowledged NewOrder present.

mod common;

use common::*;

/// Runs the standard profile with `--multi-partition 20` on a cluster in `mode`; checks it.
fn standard_profile_across_partitions(mode: &str) {
    let dir = scratch(&format!("multi-{mode}"));
    let config = cluster_toml(&dir, "run/certs");
    let toml = std::fs::read_to_string(&config).unwrap();
    let toml = toml.replacen("mode = \"active-active\"", &format!("mode = \"{mode}\""), 1);
    assert!(toml.contains(&format!("mode = \"{mode}\"")));
    std::fs::write(&config, toml).unwrap();
    let _teardown = Teardown(config.clone());
    let cfg = config.to_str().unwrap();
    init_and_up(cfg);

    let json = dir.join("r.json");
    let acks = dir.join("acks.txt");
    let o = short_checked_bench(cfg, &json, &acks, &["--profile", "standard", "--multi-partition", "20"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    // Every acknowledged NewOrder's ORDER row and Payment's HISTORY row is in the data.
    assert!(out.contains("acknowledged NewOrders:") && out.contains("acknowledged Payments:"), "{out}");
    assert_eq!(out.matches(" missing").count(), out.matches(" 0 missing").count(), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["mode"], mode);
    let multi = v["committed_multi_partition"].as_u64().unwrap();
    let single = v["committed_single_partition"].as_u64().unwrap();
    assert!(multi > 20 && single > multi, "{mode}: {single} single-, {multi} multi-partition commits");

    // The standalone verdict: every replica equal, consistency over both partitions.
    let o = glass(&["check", "--config", cfg, "--ack-log", acks.to_str().unwrap()]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(!out.contains("DIFFER") && !out.contains("FAIL"), "{out}");
    assert!(out.contains(" 0 missing"), "{out}");
    let o = glass(&["cluster", "down", "--config", cfg]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn active_active_runs_the_standard_mix_across_partitions_consistently() {
    standard_profile_across_partitions("active-active");
}

#[test]
fn active_passive_runs_the_standard_mix_across_partitions_consistently() {
    standard_profile_across_partitions("active-passive");
}

#[test]
fn full_stack_runs_the_standard_mix_across_partitions_consistently() {
    standard_profile_across_partitions("full-stack");
}
