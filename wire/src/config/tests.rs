//! Tests of `cluster.toml`'s parsing and validation: the committed files, and each rule of
//! the schema refused by field and message.

use super::*;

const COMMITTED: &str = include_str!("../../../cluster.toml");

fn base() -> ClusterConfig {
    ClusterConfig::parse(COMMITTED).unwrap()
}

fn problem_at(config: &ClusterConfig) -> (String, Problem, String) {
    match config.validate() {
        Err(e @ ConfigError::Invalid { .. }) => (e.field(), e.problem().cloned().unwrap(), e.to_string()),
        other => panic!("expected a validation problem, got {other:?}"),
    }
}

fn parse_error(text: &str) -> (String, String) {
    match ClusterConfig::parse(text) {
        Err(e @ ConfigError::Parse { .. }) => (e.field(), e.to_string()),
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn the_committed_cluster_toml_parses_and_validates() {
    let c = base();
    c.validate().unwrap();
    assert_eq!(c.mode(), Mode::ActiveActive);
    assert_eq!(c.nodes.len(), 2);
    assert_eq!(c.partitions.len(), 2);
    assert_eq!(c.warehouses_total(), 4);
    for p in &c.partitions {
        assert_eq!(p.warehouses.len(), 2);
        assert_eq!(p.replicas.len(), 2, "every partition is replicated on both nodes");
    }
    assert_eq!(c.partition_of_warehouse(2), Some(c.partitions[0].id));
    assert_eq!(c.partition_of_warehouse(3), Some(c.partitions[1].id));
    assert_eq!(c.partition_of_warehouse(5), None);
    assert_eq!(c.partitions_on_node(c.nodes[0].id).count(), 2);
}

/// The three-replica file beside the default (docs/cluster.md, "Agreement").
#[test]
fn the_committed_rf3_file_parses_with_majority_agreement() {
    let c = ClusterConfig::parse(include_str!("../../../cluster-rf3.toml")).unwrap();
    c.validate().unwrap();
    assert_eq!(c.replication_factor(), 3);
    assert_eq!(c.nodes.len(), 3);
    assert_eq!(c.agreement, AgreementRule::Majority);
    assert_eq!(base().agreement, AgreementRule::Majority, "the default when the key is left out");
    let all = COMMITTED.replace("mode = \"active-active\"", "mode = \"active-active\"\nagreement = \"all\"");
    assert_eq!(ClusterConfig::parse(&all).unwrap().agreement, AgreementRule::All);
    let bad = COMMITTED.replace("mode = \"active-active\"", "mode = \"active-active\"\nagreement = \"some\"");
    let (field, message) = parse_error(&bad);
    assert_eq!(field, "agreement", "{message}");
    assert!(message.contains("majority"), "{message}");
    // Written back with the key.
    let again = ClusterConfig::parse(&toml::to_string(&ClusterConfig::parse(&all).unwrap()).unwrap()).unwrap();
    assert_eq!(again.agreement, AgreementRule::All);
}

/// The pages tables grow into (engine::arena::GrowthPages): small unless the file says.
#[test]
fn growth_pages_default_to_small_and_refuse_unknown_names() {
    assert_eq!(base().growth_pages, GrowthPages::Small);
    let omitted = COMMITTED.replace("growth_pages = \"small\"\n", "");
    assert_ne!(omitted, COMMITTED);
    assert_eq!(ClusterConfig::parse(&omitted).unwrap().growth_pages, GrowthPages::Small, "the default");
    let huge = COMMITTED.replace("growth_pages = \"small\"", "growth_pages = \"huge\"");
    assert_eq!(ClusterConfig::parse(&huge).unwrap().growth_pages, GrowthPages::Huge);
    let again = ClusterConfig::parse(&toml::to_string(&ClusterConfig::parse(&huge).unwrap()).unwrap()).unwrap();
    assert_eq!(again.growth_pages, GrowthPages::Huge, "written back with the key");
    let bad = COMMITTED.replace("growth_pages = \"small\"", "growth_pages = \"giant\"");
    let (field, message) = parse_error(&bad);
    assert_eq!(field, "growth_pages", "{message}");
    assert!(message.contains("giant") && message.contains("small"), "{message}");
}

#[test]
fn defaults_fill_omitted_limits_and_timeouts() {
    let text: String = COMMITTED.lines().take_while(|l| !l.starts_with("[limits]")).collect::<Vec<_>>().join("\n");
    let c = ClusterConfig::parse(&text).unwrap();
    assert_eq!(c.limits, Limits::default());
    assert_eq!(c.timeouts, Timeouts::default());
    c.validate().unwrap();
}

#[test]
fn an_unknown_key_is_named_with_its_place() {
    let (field, msg) =
        parse_error(&COMMITTED.replace("[[partitions]]\nid = 2", "[[partitions]]\nid = 2\nreplica = [1]"));
    assert_eq!(field, "partitions[1].replica");
    assert!(msg.contains("unknown field `replica`"), "{msg}");
    assert!(msg.contains("line "), "{msg}");

    let (field, msg) = parse_error(&format!("colour = \"blue\"\n{COMMITTED}"));
    assert_eq!(field, "colour");
    assert!(msg.contains("unknown field `colour`") && msg.contains("line 1"), "{msg}");

    let (field, msg) = parse_error(&COMMITTED.replace("[limits]", "[limits]\nbatch_txns = 5"));
    assert_eq!(field, "limits.batch_txns");
    assert!(msg.contains("unknown field `batch_txns`"), "{msg}");
}

#[test]
fn a_wrong_type_or_missing_field_is_named() {
    let (field, msg) = parse_error(&COMMITTED.replace("seed = 42", "seed = \"forty-two\""));
    assert_eq!(field, "seed");
    assert!(msg.starts_with("seed: "), "{msg}");

    let (field, _) = parse_error(&COMMITTED.replace("mode = \"active-active\"", "mode = \"active-active-active\""));
    assert_eq!(field, "mode");

    let (_, msg) = parse_error(&COMMITTED.replace("seed = 42\n", ""));
    assert!(msg.contains("missing field `seed`"), "{msg}");

    let (_, msg) = parse_error("mode = ");
    assert!(msg.contains("line 1"), "{msg}");
}

#[test]
fn a_partition_without_replicas_is_refused() {
    let mut c = base();
    c.partitions[1].replicas.clear();
    let (field, problem, msg) = problem_at(&c);
    assert_eq!(field, "partitions[1].replicas");
    assert_eq!(problem, Problem::NoReplicas { partition: c.partitions[1].id });
    assert_eq!(msg, format!("partitions[1].replicas: partition {} has no replicas", c.partitions[1].id));
}

#[test]
fn two_replicas_of_one_partition_on_one_node_are_refused() {
    let mut c = base();
    let node = c.nodes[1].id;
    c.partitions[1].replicas = vec![node, node];
    let (field, problem, msg) = problem_at(&c);
    assert_eq!(field, "partitions[1].replicas");
    assert_eq!(problem, Problem::DuplicateReplica { node, partition: c.partitions[1].id });
    assert_eq!(
        msg,
        format!("partitions[1].replicas: node {node} holds two replicas of partition {}", c.partitions[1].id)
    );
}

#[test]
fn a_replica_on_an_unlisted_node_is_refused() {
    let mut c = base();
    c.partitions[0].replicas.push(99);
    let (field, problem, _) = problem_at(&c);
    assert_eq!(field, "partitions[0].replicas");
    assert_eq!(problem, Problem::UnknownNode { node: 99 });
}

#[test]
fn overlapping_warehouse_ranges_are_refused() {
    let mut c = base();
    c.partitions[1].warehouses = WarehouseRange { first: 2, last: 4 };
    let (field, problem, msg) = problem_at(&c);
    assert_eq!(field, "partitions[1].warehouses");
    assert!(matches!(problem, Problem::OverlappingWarehouses { first: 2, last: 4, other_first: 1, other_last: 2, .. }));
    assert!(msg.contains("overlap warehouses 1..=2 of partitions[0]"), "{msg}");

    // Listed in the other order, the later-listed one is still named.
    c.partitions.swap(0, 1);
    let (field, _, _) = problem_at(&c);
    assert_eq!(field, "partitions[1].warehouses");

    // One range inside another.
    let mut c = base();
    c.partitions[1].warehouses = WarehouseRange { first: 1, last: 4 };
    c.partitions[0].warehouses = WarehouseRange { first: 2, last: 2 };
    assert!(matches!(problem_at(&c).1, Problem::OverlappingWarehouses { .. }));
}

/// docs/design.md §11: several coordinators, in `[[coordinators]]` (the committed file
/// has three); one `[coordinator]` table still means one.
#[test]
fn several_coordinators_parse_validate_and_round_trip() {
    let c = ClusterConfig::parse(COMMITTED).unwrap();
    assert_eq!(c.coordinator_ids(), vec![0, 1, 2]);
    assert_eq!(c.coordinator_by_id(2).unwrap().address, "127.0.0.1:7404");
    assert_eq!(c.addresses()[1], ("coordinators[1].address".to_string(), "127.0.0.1:7403"));
    let written = toml::to_string(&c).unwrap();
    assert_eq!(ClusterConfig::parse(&written).unwrap(), c);
    assert!(written.contains("[[coordinators]]") && !written.contains("[coordinator]"), "{written}");
    // One coordinator is written back as the one table.
    let mut one = c.clone();
    one.coordinators.truncate(1);
    let written = toml::to_string(&one).unwrap();
    assert!(written.contains("[coordinator]") && !written.contains("[[coordinators]]"), "{written}");
    assert_eq!(ClusterConfig::parse(&written).unwrap().coordinator_ids(), vec![0]);

    let mut dup = c.clone();
    dup.coordinators[2].id = 0;
    let (field, problem, msg) = problem_at(&dup);
    assert_eq!(field, "coordinators[2].id");
    assert_eq!(problem, Problem::DuplicateCoordinatorId { coordinator: 0, other: "coordinators[0]".into() });
    assert!(msg.contains("also used by coordinators[0]"), "{msg}");
    let mut same_address = c.clone();
    same_address.coordinators[1].address = "127.0.0.1:7401".into();
    assert!(matches!(problem_at(&same_address).1, Problem::DuplicateAddress { .. }));
    let mut none = c;
    none.coordinators.clear();
    assert_eq!(problem_at(&none).1, Problem::NoCoordinators);
}

#[test]
fn a_gap_in_the_warehouses_is_refused() {
    let mut c = base();
    c.partitions[1].warehouses = WarehouseRange { first: 4, last: 5 };
    let (field, problem, msg) = problem_at(&c);
    assert_eq!(field, "partitions");
    assert_eq!(problem, Problem::WarehouseGap { missing_first: 3, missing_last: 3, total: 5 });
    assert!(msg.contains("1..=5 without gaps"), "{msg}");

    let mut c = base();
    c.partitions[0].warehouses = WarehouseRange { first: 2, last: 2 };
    assert_eq!(problem_at(&c).1, Problem::WarehouseGap { missing_first: 1, missing_last: 1, total: 4 });
}

#[test]
fn warehouse_zero_and_inverted_ranges_are_refused() {
    let mut c = base();
    c.partitions[0].warehouses = WarehouseRange { first: 0, last: 2 };
    assert_eq!(
        problem_at(&c),
        (
            "partitions[0].warehouses".into(),
            Problem::WarehouseZero,
            "partitions[0].warehouses: warehouse ids start at 1".into()
        )
    );
    let mut c = base();
    c.partitions[0].warehouses = WarehouseRange { first: 2, last: 1 };
    assert_eq!(problem_at(&c).1, Problem::EmptyWarehouseRange { first: 2, last: 1 });
}

#[test]
fn duplicate_ids_and_addresses_are_refused() {
    let mut c = base();
    c.nodes[1].id = c.nodes[0].id;
    let (field, problem, _) = problem_at(&c);
    assert_eq!(field, "nodes[1].id");
    assert_eq!(problem, Problem::DuplicateNodeId { node: c.nodes[0].id, other: "nodes[0]".into() });

    let mut c = base();
    c.partitions[1].id = c.partitions[0].id;
    assert_eq!(problem_at(&c).0, "partitions[1].id");

    let mut c = base();
    c.nodes[1].address = c.coordinator().address.clone();
    let (field, problem, msg) = problem_at(&c);
    assert_eq!(field, "nodes[1].address");
    assert!(matches!(problem, Problem::DuplicateAddress { .. }));
    assert!(msg.ends_with("is also used by coordinators[0]"), "{msg}");
}

/// docs/usage.md, "Metrics": an endpoint is optional, checked as an address, and shares
/// its address with no process (a coordinator's tethers are TCP on its own) or endpoint.
#[test]
fn metrics_endpoints_are_optional_and_checked_like_addresses() {
    let text = COMMITTED.replacen(
        "address = \"127.0.0.1:7401\"",
        "address = \"127.0.0.1:7401\"\nmetrics = \"127.0.0.1:9101\"",
        1,
    );
    let c = ClusterConfig::parse(&text).unwrap();
    assert_eq!(c.nodes[0].metrics.as_deref(), Some("127.0.0.1:9101"));
    assert_eq!(c.metrics_addresses(), vec![("nodes[0].metrics".to_string(), "127.0.0.1:9101")]);
    assert!(base().metrics_addresses().is_empty(), "the default file serves none");

    let mut c = base();
    c.nodes[1].metrics = Some("127.0.0.1".into());
    let (field, _, msg) = problem_at(&c);
    assert_eq!(field, "nodes[1].metrics");
    assert!(msg.contains("port"), "{msg}");

    let mut c = base();
    c.coordinators[1].metrics = Some(c.coordinators[0].address.clone());
    let (field, problem, msg) = problem_at(&c);
    assert_eq!(field, "coordinators[1].metrics");
    assert!(matches!(problem, Problem::DuplicateAddress { .. }), "{msg}");

    let mut c = base();
    c.coordinators[0].metrics = Some("127.0.0.1:9100".into());
    c.nodes[0].metrics = Some("127.0.0.1:9100".into());
    let (field, _, msg) = problem_at(&c);
    assert_eq!(field, "nodes[0].metrics");
    assert!(msg.ends_with("is also used by coordinators[0].metrics"), "{msg}");
}

/// docs/design.md §2, "A core per executor": `cpus` is optional, checked, and a process's
/// own business (the others need not agree on it).
#[test]
fn node_cpus_are_optional_checked_and_not_agreed_on() {
    let text = COMMITTED.replacen("address = \"127.0.0.1:7402\"", "address = \"127.0.0.1:7402\"\ncpus = [1, 0]", 1);
    let c = ClusterConfig::parse(&text).unwrap();
    c.validate().unwrap();
    assert_eq!(c.nodes[1].cpus, Some(vec![1, 0]));
    assert_eq!(base().nodes.iter().filter(|n| n.cpus.is_some()).count(), 0, "the default file pins nothing");
    assert_eq!(c.fingerprint(), base().fingerprint());

    let too_many: Vec<usize> = (0..=CPU_INDICES_MAX).collect();
    for (cpus, want) in [
        (vec![], "lists no CPU"),
        (vec![0, 2, 0], "CPU index 0 is listed twice"),
        (vec![CPU_SET_SIZE], "past the kernel's CPU set"),
        (too_many, "at most 64"),
    ] {
        let mut c = base();
        c.nodes[0].cpus = Some(cpus);
        let (field, _, msg) = problem_at(&c);
        assert_eq!(field, "nodes[0].cpus");
        assert!(msg.contains(want), "{msg}");
    }
    let (field, msg) = parse_error(&COMMITTED.replacen(
        "address = \"127.0.0.1:7401\"",
        "address = \"127.0.0.1:7401\"\ncpus = [-1]",
        1,
    ));
    assert!(field.starts_with("nodes"), "{field}: {msg}");
}

#[test]
fn malformed_addresses_are_refused() {
    for (address, why) in [
        ("localhost", "no `:port`"),
        (":7000", "no host"),
        ("127.0.0.1:seventy", "the port is not a number within 1–65535"),
        ("127.0.0.1:0", "port 0 is not a fixed port"),
        ("::1:7000", "an IPv6 host must be in brackets"),
    ] {
        let mut c = base();
        c.nodes[0].address = address.into();
        let (field, problem, _) = problem_at(&c);
        assert_eq!(field, "nodes[0].address");
        assert_eq!(problem, Problem::BadAddress { address: address.into(), why });
    }
    assert_eq!(split_address("[::1]:7000").unwrap(), ("::1", 7000));
    assert_eq!(split_address("node1.glass.test:7401").unwrap(), ("node1.glass.test", 7401));
}

#[test]
fn no_nodes_or_no_partitions_are_refused() {
    let mut c = base();
    c.nodes.clear();
    assert_eq!(problem_at(&c).0, "nodes");
    let mut c = base();
    c.partitions.clear();
    assert_eq!(
        problem_at(&c),
        ("partitions".into(), Problem::NoPartitions, "partitions: the cluster needs at least one partition".into())
    );
}

#[test]
fn empty_directories_are_refused() {
    let mut c = base();
    c.cert_dir = PathBuf::new();
    assert_eq!(problem_at(&c).0, "cert_dir");
}

/// Defect #14, item 5: `cert_dir = ""` (or `run_dir = ""`) in a file was made the file's
/// directory before validation, so `glass cluster up` wrote the CA key and every private
/// key next to cluster.toml. Read from a file, an empty directory is refused, by name.
#[test]
fn an_empty_directory_in_the_file_is_refused_not_made_the_files_directory() {
    let dir = std::env::temp_dir().join(format!("glass-config-empty-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cluster.toml");
    for (key, committed) in [("cert_dir", "cert_dir = \"run/certs\""), ("run_dir", "run_dir = \"run\"")] {
        std::fs::write(&path, COMMITTED.replace(committed, &format!("{key} = \"\""))).unwrap();
        let e = ClusterConfig::load(&path).unwrap_err();
        assert_eq!(e.field(), key);
        assert_eq!(e.problem(), Some(&Problem::EmptyPath));
        assert!(e.to_string().starts_with(&format!("{key}: is empty: name a directory")), "{e}");
        // A "." is the file's directory, said explicitly.
        std::fs::write(&path, COMMITTED.replace(committed, &format!("{key} = \".\""))).unwrap();
        let c = ClusterConfig::load(&path).unwrap();
        let loaded = if key == "cert_dir" { c.cert_dir } else { c.run_dir };
        assert_eq!(loaded, dir.join("."));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Defect #14, item 2: the transport's windows are configuration, within bounds.
#[test]
fn transport_windows_must_be_within_bounds() {
    for field in ["receive_window_bytes", "send_window_bytes"] {
        for (value, ok) in [
            (0, false),
            (WINDOW_BYTES_MIN - 1, false),
            (WINDOW_BYTES_MIN, true),
            (WINDOW_BYTES_MAX, true),
            (WINDOW_BYTES_MAX + 1, false),
        ] {
            let mut c = base();
            let slot = if field == "receive_window_bytes" {
                &mut c.limits.receive_window_bytes
            } else {
                &mut c.limits.send_window_bytes
            };
            *slot = value;
            if ok {
                c.validate().unwrap();
            } else {
                let (f, problem, _) = problem_at(&c);
                assert_eq!(f, format!("limits.{field}"));
                assert!(matches!(problem, Problem::OutOfRange { .. }), "{problem:?}");
            }
        }
    }
    let (field, msg) = parse_error(&COMMITTED.replace("receive_window_bytes = 2097152", "receive_window_bytes = -1"));
    assert_eq!(field, "limits.receive_window_bytes");
    assert!(!msg.is_empty());
}

#[test]
fn unusable_limits_are_refused() {
    let mut c = base();
    c.limits.inflight_txns_max = 0;
    assert_eq!(
        problem_at(&c),
        ("limits.inflight_txns_max".into(), Problem::Zero, "limits.inflight_txns_max: must be at least 1".into())
    );

    let mut c = base();
    c.limits.batch_txns_max = c.limits.inflight_txns_max + 1;
    assert_eq!(problem_at(&c).0, "limits.batch_txns_max");
    assert!(matches!(problem_at(&c).1, Problem::BatchAboveInflight { .. }));

    let mut c = base();
    c.limits.frame_bytes_max = 64 * 1024;
    c.limits.batch_txns_max = 1_000;
    let (field, problem, _) = problem_at(&c);
    assert_eq!(field, "limits.batch_txns_max");
    assert!(matches!(problem, Problem::BatchAboveFrame { batch_txns_max: 1_000, .. }));

    let mut c = base();
    c.limits.frame_bytes_max = 10;
    assert!(matches!(problem_at(&c), (f, Problem::FrameTooSmall { .. }, _) if f == "limits.frame_bytes_max"));
    c.limits.frame_bytes_max = u32::MAX;
    assert!(matches!(problem_at(&c), (f, Problem::FrameTooLarge { .. }, _) if f == "limits.frame_bytes_max"));

    let mut c = base();
    c.timeouts.failure_timeout_ms = c.timeouts.heartbeat_ms;
    assert_eq!(problem_at(&c).0, "timeouts.failure_timeout_ms");
}

#[test]
fn every_mode_validates_and_shipping_defaults_to_sync() {
    for (mode, shipping) in [("active-passive", "async"), ("full-stack", "sync")] {
        let text = COMMITTED
            .replace("mode = \"active-active\"", &format!("mode = \"{mode}\""))
            .replace("shipping = \"sync\"", &format!("shipping = \"{shipping}\""));
        let c = ClusterConfig::parse(&text).unwrap();
        c.validate().unwrap();
        assert_eq!(c.mode().name(), mode);
        assert_eq!(c.shipping().unwrap().name(), shipping);
    }
    let passive = COMMITTED.replace("mode = \"active-active\"", "mode = \"active-passive\"");
    assert_eq!(
        ClusterConfig::parse(&passive.replace("shipping = \"sync\"", "")).unwrap().shipping(),
        Some(Shipping::Sync)
    );
    let (field, _) = parse_error(&COMMITTED.replace("shipping = \"sync\"", "shipping = \"eventually\""));
    assert_eq!(field, "shipping");
    let mut c = base().with_mode(Mode::FullStack, None);
    if let Replication::FullStack { full_stack, .. } = &mut c.replication {
        full_stack.workers = 0;
    }
    assert!(matches!(problem_at(&c), (f, Problem::OutOfRange { .. }, _) if f == "full_stack.workers"));
    // In active-active the file's `[full_stack]` is still checked: a derived full-stack run takes it.
    let (field, _, _) = problem_at(&ClusterConfig::parse(&COMMITTED.replace("workers = 4", "workers = 0")).unwrap());
    assert_eq!(field, "full_stack.workers");
}

/// The keys `cluster.toml` has: top-level keys and tables, in order.
fn keys(text: &str) -> Vec<String> {
    let value: toml::Table = toml::from_str(text).unwrap();
    value.keys().cloned().collect()
}

#[test]
fn a_cluster_toml_of_each_mode_round_trips_with_the_same_keys() {
    for mode in Mode::ALL {
        for shipping in ["sync", "async"] {
            let text = COMMITTED
                .replace("mode = \"active-active\"", &format!("mode = \"{mode}\""))
                .replace("shipping = \"sync\"", &format!("shipping = \"{shipping}\""))
                .replace("workers = 4", "workers = 8")
                .replace("seed = 42", "agreement = \"majority\"\nseed = 42");
            let c = ClusterConfig::parse(&text).unwrap();
            assert_eq!(c.mode(), mode);
            let written = toml::to_string(&c).unwrap();
            assert_eq!(ClusterConfig::parse(&written).unwrap(), c, "{written}");
            assert_eq!(keys(&written), keys(&text), "{written}");
            let raw: toml::Table = toml::from_str(&written).unwrap();
            assert_eq!(raw["mode"].as_str(), Some(mode.name()));
            assert_eq!(raw["shipping"].as_str(), Some(shipping), "the file's shipping is written back");
            assert_eq!(raw["full_stack"]["workers"].as_integer(), Some(8));
            match &c.replication {
                Replication::ActiveActive => {
                    assert_eq!(c.shipping(), None);
                    assert_eq!(c.full_stack(), None);
                }
                Replication::ActivePassive { shipping: s } => {
                    assert_eq!(s.name(), shipping);
                    assert_eq!(c.full_stack(), None);
                }
                Replication::FullStack { shipping: s, full_stack } => {
                    assert_eq!(s.name(), shipping);
                    assert_eq!(full_stack.workers, 8);
                }
            }
        }
    }
}

#[test]
fn active_active_ships_nothing_and_a_derived_mode_takes_the_files_settings() {
    let text = COMMITTED.replace("shipping = \"sync\"", "shipping = \"async\"").replace("workers = 4", "workers = 8");
    let c = ClusterConfig::parse(&text).unwrap();
    assert_eq!(c.replication, Replication::ActiveActive);
    assert_eq!(c.shipping(), None);
    assert_eq!(c.full_stack(), None);
    let full = c.with_mode(Mode::FullStack, None);
    assert_eq!(
        full.replication,
        Replication::FullStack { shipping: Shipping::Async, full_stack: FullStackConfig { workers: 8 } }
    );
    let passive = c.with_mode(Mode::ActivePassive, Some(Shipping::Sync));
    assert_eq!(passive.replication, Replication::ActivePassive { shipping: Shipping::Sync });
    // Back in active-active, the shipping given and the file's workers are still written.
    let back = toml::to_string(&passive.with_mode(Mode::ActiveActive, None)).unwrap();
    let raw: toml::Table = toml::from_str(&back).unwrap();
    assert_eq!((raw["shipping"].as_str(), raw["full_stack"]["workers"].as_integer()), (Some("sync"), Some(8)));
    // The fingerprint hashes the same (mode, shipping, …, full_stack) as the file form.
    assert_eq!(ClusterConfig::parse(&toml::to_string(&c).unwrap()).unwrap().fingerprint(), c.fingerprint());
    assert_ne!(c.with_mode(Mode::ActivePassive, None).fingerprint(), c.fingerprint());
}

#[test]
fn replication_factor_rewrites_placement_or_names_the_shortfall() {
    let c = base();
    let one = c.with_replication(1).unwrap();
    assert_eq!(one.partitions.iter().map(|p| p.replicas.clone()).collect::<Vec<_>>(), vec![vec![1], vec![2]]);
    let two = c.with_replication(2).unwrap();
    assert_eq!(two.partitions[1].replicas, vec![2, 1], "primaries spread over the nodes");
    assert_eq!(two.replication_factor(), 2);
    let e = c.with_replication(3).unwrap_err();
    assert_eq!(
        e.to_string(),
        "partitions[].replicas: a replication factor of 3 needs at least 3 nodes; the cluster has 2"
    );
}

#[test]
fn a_port_in_use_is_named() {
    let holder = UdpSocket::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().to_string();
    let free = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    check_addresses_free([("coordinator.address", free.as_str())]).unwrap();
    let e = check_addresses_free([("coordinator.address", free.as_str()), ("nodes[1].address", taken.as_str())])
        .unwrap_err();
    assert_eq!(e.field(), "nodes[1].address");
    assert!(e.to_string().starts_with(&format!("nodes[1].address: cannot bind {taken}")), "{e}");
    assert!(matches!(e, ConfigError::PortInUse { .. }));
}

#[test]
fn relative_directories_follow_the_file_and_fingerprints_ignore_limits() {
    let dir = std::env::temp_dir().join(format!("glass-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cluster.toml");
    std::fs::write(&path, COMMITTED).unwrap();
    let c = ClusterConfig::load(&path).unwrap();
    assert!(c.run_dir.starts_with(&dir) && c.cert_dir.starts_with(&dir));
    std::fs::remove_dir_all(&dir).unwrap();

    let mut other = base();
    other.limits.batch_txns_max = 7;
    assert_eq!(other.fingerprint(), base().fingerprint());
    other.nodes[0].metrics = Some("127.0.0.1:9100".into());
    assert_eq!(other.fingerprint(), base().fingerprint(), "a metrics endpoint is the process's own");
    other.seed += 1;
    assert_ne!(other.fingerprint(), base().fingerprint());

    let e = ClusterConfig::from_file(Path::new("/nonexistent/cluster.toml")).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }));
}
