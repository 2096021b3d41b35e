//! The `cluster_toml` target: `cluster.toml` text as a user might write it (docs/cluster.md;
//! docs/design.md §13).
//!
//! Properties:
//! - parsing never panics; a text that is not a configuration is a [`ConfigError`] naming the
//!   field, line and column; one that parses but describes no usable cluster is a
//!   [`ConfigError`] from [`ClusterConfig::validate`] naming the first field found wrong;
//! - a configuration that validates is written back (`toml`) and read again as the same
//!   configuration with the same fingerprint (what every process of a cluster compares in its
//!   Hello), and it still validates;
//! - on a valid configuration the questions the processes ask of it answer without panicking
//!   and agree with each other: every warehouse of a partition's range is that partition's,
//!   the replication factor is each partition's replica count, and changing the replication
//!   factor or the mode gives a configuration that validates or a named error.

use wire::config::{ClusterConfig, Mode};

/// Warehouses of one partition checked against [`ClusterConfig::partition_of_warehouse`], at
/// most (a range may span all 65,535).
const WAREHOUSES_CHECKED_MAX: u32 = 256;

pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(cfg) = ClusterConfig::parse(text) else { return };
    if cfg.validate().is_err() {
        return;
    }
    let written = toml::to_string(&cfg).unwrap_or_else(|e| panic!("a valid configuration does not serialise: {e}"));
    let again = ClusterConfig::parse(&written)
        .unwrap_or_else(|e| panic!("a valid configuration, written back, does not parse: {e}\n{written}"));
    assert_eq!(again, cfg, "a valid configuration, written back, reads differently:\n{written}");
    assert_eq!(again.fingerprint(), cfg.fingerprint());
    again.validate().expect("a valid configuration, written back, validates");

    let factor = cfg.replication_factor();
    for p in &cfg.partitions {
        assert!(cfg.partition(p.id).is_some());
        for w in p.warehouses.range().take(WAREHOUSES_CHECKED_MAX as usize) {
            assert_eq!(cfg.partition_of_warehouse(w), Some(p.id), "warehouse {w} of partition {}", p.id);
        }
        for node in &p.replicas {
            assert!(cfg.node(*node).is_some(), "partition {}'s replica {node} is no node", p.id);
            assert!(cfg.partitions_on_node(*node).any(|q| q.id == p.id));
        }
    }
    assert!(cfg.warehouses_total() >= 1);
    assert!(factor >= 1);
    for k in 1..=3 {
        if let Ok(other) = cfg.with_replication(k) {
            other.validate().expect("with_replication gives a valid configuration or an error");
            assert_eq!(other.replication_factor(), k);
        }
    }
    for mode in Mode::ALL {
        let other = cfg.with_mode(mode, cfg.shipping());
        let _ = other.validate();
        let _ = other.fingerprint();
    }
}

pub fn seeds() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = [include_str!("../../cluster.toml"), include_str!("../../cluster-rf3.toml")]
        .iter()
        .map(|t| t.as_bytes().to_vec())
        .collect();
    let base = include_str!("../../cluster.toml");
    // Near misses of the real file: a duplicate id, no partitions, a port out of range.
    out.push(base.replacen("id = 2", "id = 1", 1).into_bytes());
    out.push(base.replace("[[partitions]]", "[[partitionz]]").into_bytes());
    out.push(base.replacen(":7", ":99999", 1).into_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repositorys_configurations_validate_and_round_trip() {
        for seed in seeds().iter().take(2) {
            let cfg = ClusterConfig::parse(std::str::from_utf8(seed).unwrap()).unwrap();
            cfg.validate().unwrap();
            check(seed);
        }
    }

    /// Every line of the real file deleted, one at a time, keeps the property.
    #[test]
    fn every_line_deleted_keeps_the_property() {
        let base = include_str!("../../cluster.toml");
        let lines: Vec<&str> = base.lines().collect();
        for i in 0..lines.len() {
            let text: Vec<&str> = lines.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, l)| *l).collect();
            check(text.join("\n").as_bytes());
        }
    }
}
