//! An executor's rejoin (docs/design.md §10): the replica's starting state fetched from a
//! live replica on another node — a copy of it, or a full-stack primary's log base or base
//! backup — on a thread of its own, so that this node's heartbeats go on; and a full-stack
//! replica's restart recovery from its own write-ahead log, on the executor thread, timed and
//! logged.
//!
//! Guarantees: a fetch's outcome, a failure included (its thread could not start, the live
//! replica's node could not be reached, the transfer broke off), comes back to the executor's
//! inbox as `Work::Fetched`, and while it runs its progress comes as `Work::FetchProgress`
//! at least every [`FETCH_PROGRESS_PERIOD_MAX`]; what follows (installing it, fetching again,
//! abandoning a fetch that brings nothing) is the partition's machine's to decide. A fetch
//! the machine abandoned stops at once and reports nothing more.

use std::time::{Duration, Instant};

use tracing::info;
use wire::channel::PeerChannel;
use wire::config::{split_address, ClusterConfig};
use wire::endpoint::{self, EndpointLimits};
use wire::messages::NodeId;

use super::{node_hello, Executor, ReplicaStorage, Work};
use crate::error::RejoinError;
use crate::fullstack::Restart;
use crate::machine::{FetchKind, FetchOrder, Fetched};
use crate::snapshot;

/// The longest time between two progress reports of a fetch (shorter with a short
/// `timeouts.transfer_patience_ms`: an eighth of it, at least 10 ms).
pub const FETCH_PROGRESS_PERIOD_MAX: Duration = Duration::from_secs(1);

impl Executor {
    /// Fetches the starting state of a rejoin as `order` says, on a thread of its own (so
    /// this node's heartbeats go on): its progress and its result arrive in this executor's
    /// inbox under the order's id, until the machine abandons it
    /// (`ExecutorLinks::abandon_fetch` drops its stop sender).
    pub(super) fn fetch(&self, order: FetchOrder) {
        let FetchOrder { id, source, after_seq, kind, delay_ms, .. } = order;
        let (config, me, pid) = (self.config.clone(), self.node, self.partition.id);
        let shared = self.shared.clone();
        let inbox = self.self_inbox.clone();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        self.fetches.borrow_mut().insert(id, stop_tx);
        let patience = Duration::from_millis(config.timeouts.transfer_patience_ms);
        let period = (patience / 8).clamp(Duration::from_millis(10), FETCH_PROGRESS_PERIOD_MAX);
        let spawned = std::thread::Builder::new().name(format!("fetch-p{pid}")).spawn(move || {
            crate::affinity::spread();
            let received = std::sync::atomic::AtomicU64::new(0);
            let progress = |bytes: u64| {
                received.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
                shared.copy_received_bytes.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
            };
            // A guard should the executor stop ticking: the machine abandons the fetch first.
            let guard = patience.saturating_mul(2);
            // `None`: abandoned (the stop sender dropped); then nothing more is reported.
            let fetch = async {
                let mut stop = stop_rx;
                let dialled = tokio::select! {
                    link = async {
                        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                        dial_peer(&config, me, source).await
                    } => link,
                    _ = &mut stop => return None,
                };
                let mut link = match dialled {
                    Ok(link) => link,
                    Err(e) => return Some(Err(e)),
                };
                let transfer = async {
                    Ok(match kind {
                        FetchKind::Copy => {
                            let mut db = engine::LeanDb::new();
                            let info = snapshot::snapshot_after::<PeerChannel>(
                                &mut link,
                                pid,
                                after_seq,
                                &mut db,
                                &[],
                                guard,
                                &progress,
                            )
                            .await?;
                            Fetched::Copy { db: Box::new(db), info }
                        }
                        FetchKind::LogBase | FetchKind::BaseBackup => {
                            let image = kind == FetchKind::BaseBackup;
                            Fetched::LogBase(
                                snapshot::log_base(&mut link, pid, after_seq, image, guard, &progress).await?,
                            )
                        }
                    })
                };
                tokio::select! {
                    result = transfer => Some(result),
                    _ = &mut stop => {
                        // Closed at once: the source ends its copy for this fetch now, not
                        // after its idle timeout, and serves the next request.
                        link.close_and_drain("the rejoining partition abandoned this fetch").await;
                        None
                    }
                }
            };
            let ticking = async {
                let mut every = tokio::time::interval(period);
                loop {
                    every.tick().await;
                    let received = received.load(std::sync::atomic::Ordering::Relaxed);
                    // A full inbox skips a report: the next one carries the same count.
                    let _ = inbox.try_send(Work::FetchProgress { id, received });
                }
            };
            let outcome = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Err(e) => Some(Err(RejoinError::Thread(e))),
                Ok(rt) => rt.block_on(async {
                    tokio::select! {
                        outcome = fetch => outcome,
                        never = ticking => never,
                    }
                }),
            };
            if let Some(result) = outcome {
                let _ = inbox.blocking_send(Work::Fetched { id, fetched: Box::new(result) });
            }
        });
        if let Err(e) = spawned {
            let failed = Box::new(Err(RejoinError::Thread(e)));
            let _ = self.self_inbox.try_send(Work::Fetched { id, fetched: failed });
        }
    }

    /// Restart recovery of this replica's full-stack database (after cutting its log at
    /// `cut`), timed and logged; why not, if it failed.
    pub(super) fn restart_recovery(&self, restart: &Restart) -> Result<crate::fullstack::FullStack, RejoinError> {
        let pid = self.partition.id;
        let ReplicaStorage::Full { dir, workers } = &self.storage else {
            let what = "restart recovery (the lean kernel keeps no log)";
            return Err(RejoinError::Recovery(crate::error::ReplicaError::Unexpected { what }));
        };
        let t0 = Instant::now();
        match restart {
            Restart::OwnLog => {
                info!(partition = pid, dir = %dir.display(), "restart recovery from the write-ahead log")
            }
            Restart::FollowBase { cut, start } => info!(
                partition = pid,
                dir = %dir.display(),
                cut = ?Some(cut),
                base_start_lsn = start,
                "restart recovery from the write-ahead log, cut to follow the primary's log base"
            ),
            Restart::Image(image) => info!(
                partition = pid,
                dir = %dir.display(),
                image_mib = image.len() as f64 / (1 << 20) as f64,
                "installing the primary's checkpoint image (this node's own log cannot follow its log base)"
            ),
        }
        let medium = engine::conventional::Medium::Dir(dir.clone());
        let (f, cut) =
            crate::fullstack::FullStack::restart_on(medium, *workers, restart).map_err(RejoinError::Recovery)?;
        let r = f.recovery_report();
        info!(
            partition = pid,
            seconds = t0.elapsed().as_secs_f64(),
            log_records = r.log_records,
            redone = r.redone,
            committed_txns = r.winners,
            rolled_back_txns = r.losers,
            undone = r.undone,
            torn_tail = r.truncated_tail,
            records_cut = cut.map_or(0, |c| c.records_cut),
            bytes_cut = cut.map_or(0, |c| c.bytes_cut),
            "recovered from the write-ahead log"
        );
        self.shared.schedstat.lock().unwrap_or_else(|e| e.into_inner()).extend(f.worker_schedstats());
        Ok(f)
    }
}

/// A link from node `me` to node `source`, on the peer channel (snapshot and log base
/// requests).
async fn dial_peer(config: &ClusterConfig, me: NodeId, source: NodeId) -> Result<endpoint::Link, RejoinError> {
    let address = config.node(source).map(|n| n.address.clone()).ok_or(RejoinError::UnknownNode { node: source })?;
    let server_name = split_address(&address)
        .map(|(h, _)| h.to_string())
        .map_err(|problem| RejoinError::Address { node: source, problem })?;
    let addr = wire::config::resolve(&format!("nodes[{source}].address"), &address)?;
    let tls = wire::tls::client_config(&config.cert_dir, wire::tls::Identity::Node(me))?;
    let peer = wire::tls::Identity::Node(source);
    let limits = EndpointLimits::from_config(config);
    Ok(endpoint::connect_to(peer, addr, &server_name, tls, node_hello(config, me), limits).await?)
}
