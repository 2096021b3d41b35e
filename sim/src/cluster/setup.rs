//! The simulated cluster's configuration — nodes, coordinators, partitions and the short
//! timeouts that let a run detect a crash within a few hundred steps — and the [`Faults`] a
//! run draws, at rates per 10,000 steps (docs/design.md §14).
//!
//! Guarantees: a configuration is a function of its arguments and the default `cluster.toml`,
//! and is valid (checked before it is returned).

use wire::config::{ClusterConfig, Mode, Shipping, WarehouseRange};
use wire::messages::NodeId;

use crate::net::NetFaults;

/// The simulated active-active cluster of [`config_for`].
pub fn config(nodes: u8, seed: u64) -> ClusterConfig {
    config_for(nodes, seed, Mode::ActiveActive, Shipping::Sync)
}

/// The simulated cluster: `nodes` nodes (2 or more), two partitions of one warehouse each,
/// every partition replicated on every node, in `mode` (the passive modes with `shipping`;
/// the full stack's workers run inline, deterministically, whatever the file's `workers`:
/// [`crate::disk`]); short timeouts (a 5 ms
/// heartbeat, failure after 40 ms of silence, a fetch abandoned after 100 ms without a piece)
/// so that crashes are detected within a few hundred steps; small batches. In the passive modes the primaries are spread: partition
/// `i`'s first replica is node `i + 1`.
pub fn config_for(nodes: u8, seed: u64, mode: Mode, shipping: Shipping) -> ClusterConfig {
    assert!(nodes >= 2, "a simulated cluster has at least two nodes");
    let mut c = ClusterConfig::parse(include_str!("../../../cluster.toml")).expect("the default cluster.toml parses");
    c.seed = seed;
    // One coordinator; [`with_coordinators`] makes a group.
    c.coordinators.truncate(1);
    c.nodes = (1..=nodes)
        .map(|id| wire::config::NodeConfig {
            id: NodeId::from(id),
            // Apart from the default file's coordinators (7400, 7403, 7404).
            address: format!("127.0.0.1:{}", 7500 + u16::from(id)),
            metrics: None,
            ssh: None,
            cpus: None,
        })
        .collect();
    for (i, p) in c.partitions.iter_mut().enumerate() {
        let w = i as u16 + 1;
        p.warehouses = WarehouseRange { first: w, last: w };
        p.replicas = (0..nodes).map(|k| NodeId::from((i as u8 + k) % nodes + 1)).collect();
    }
    c.partitions.truncate(2);
    c = c.with_mode(mode, (!mode.every_replica_executes()).then_some(shipping));
    c.limits.batch_txns_max = 8;
    c.limits.batch_wait_us = 300;
    c.limits.inflight_txns_max = 64;
    c.timeouts.heartbeat_ms = 5;
    c.timeouts.failure_timeout_ms = 40;
    // A copy arrives within a few hundred steps: a fetch silent for many times that was
    // abandoned by a node's machine too, at the simulator's scale.
    c.timeouts.transfer_patience_ms = 100;
    c.validate().expect("the simulated cluster's configuration is valid");
    c
}

/// `config` with `k` coordinators (ids 0..k, on loopback ports 7410 on): a coordinator group
/// (docs/design.md §11).
pub fn with_coordinators(mut config: ClusterConfig, k: u8) -> ClusterConfig {
    assert!(k >= 1, "a cluster has a coordinator");
    config.coordinators = (0..k)
        .map(|id| wire::config::CoordinatorConfig {
            id,
            address: format!("127.0.0.1:{}", 7410 + u16::from(id)),
            metrics: None,
            ssh: None,
        })
        .collect();
    config.validate().expect("the simulated cluster's configuration is valid");
    config
}

/// Which faults a run draws, and how often. Rates are per 10,000 steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    pub net: NetFaults,
    /// A node's process crashes.
    pub crash_per_10k: u64,
    /// A node's link breaks (a drop).
    pub drop_per_10k: u64,
    /// A node's heartbeats stop for a while.
    pub mute_per_10k: u64,
    /// A failed node is restarted and rejoins.
    pub restart_per_10k: u64,
    /// A coordinator crashes or is cut off from the others (with three or more).
    pub coordinator_per_10k: u64,
    /// A node's process, at the cluster's start, listens for other nodes only after
    /// [`LATE_LISTEN_US_MAX`] at most (processes start in any order): a primary's first dials
    /// of it fail, and the node machine dials again.
    pub late_listen_per_10k: u64,
}

/// How late, at most, a node's process starts listening for other nodes at the cluster's
/// start ([`Faults::late_listen_per_10k`]): two of the node machine's redial periods.
pub const LATE_LISTEN_US_MAX: u64 = 2 * node::machine::CONNECT_RETRY_MS * 1_000;

impl Faults {
    /// No faults at all.
    pub const NONE: Faults = Faults {
        net: NetFaults::CALM,
        crash_per_10k: 0,
        drop_per_10k: 0,
        mute_per_10k: 0,
        restart_per_10k: 0,
        coordinator_per_10k: 0,
        late_listen_per_10k: 0,
    };
    /// Reordering, duplication and delays, no node faults.
    pub const NETWORK: Faults = Faults { net: NetFaults::ADVERSARIAL, ..Faults::NONE };
    /// Everything: reordering, duplication, delays, drops, lost heartbeats, crashes and
    /// restarts at random times.
    pub const ALL: Faults = Faults {
        net: NetFaults { hold_steps: 100, ..NetFaults::ADVERSARIAL },
        crash_per_10k: 12,
        drop_per_10k: 6,
        mute_per_10k: 6,
        restart_per_10k: 60,
        coordinator_per_10k: 8,
        // Rare: a failed dial stalls a sync primary for a redial period, most of a run's
        // fault phase.
        late_listen_per_10k: 500,
    };

    pub(super) fn any_node_faults(&self) -> bool {
        self.crash_per_10k + self.drop_per_10k + self.mute_per_10k + self.restart_per_10k + self.coordinator_per_10k > 0
    }
}
