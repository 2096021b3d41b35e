//! A rejoining replica's fetches and copies, and the state digests taken from copies
//! (docs/design.md §10). A rejoining replica holds the batches the coordinator sends it, copies
//! the named source's state once the source executed up to the plan's point — a lean source
//! copies its state at that moment while it executes on, a seeded number of chunks at each
//! step of time (`node::snapshot::CopySender`, sent and received, every chunk checked and the
//! end's digest verified, by `node::snapshot`), so the copy races the batches the source
//! executes meanwhile — then catches up on what it held and keeps receiving, a seeded slice at
//! each step of time (`PartitionMachine::catch_up`), and reports `Rejoined`; if the source
//! cannot serve the copy for `REJOIN_FETCH_ATTEMPTS × CONNECT_RETRY_MS`, or the coordinator
//! refuses, it gives up and waits for an operator's restart, as the real executor does. A
//! full-stack backup fetches its primary's log base instead — headed by the primary's
//! checkpoint image (a base backup) when its own log cannot reach the point the base starts
//! from.
//!
//! Guarantees: a copy is received as a node receives one — every chunk or piece checked, the
//! end's digest verified — and one that does not arrive whole is recorded as a violation; a
//! fetch or copy dies with the process that began it, and a copy whose joiner is gone is cut
//! at its source.

use node::error::RejoinError;
use node::machine::{FetchKind, Fetched};
use node::replica::{LogBase, Store};
use node::snapshot::{LogBaseReceived, SnapshotInfo};
use node::{Replica, TransferError};
use wire::channel::NodeToCoordinator;
use wire::messages::{NodeId, PartitionId, StateDigest};

use super::{DigestCopying, DigestInCopy, InCopy, Partition, PendingFetch, Sim};
use crate::error::{SimError, Violation};

/// Bytes of a frame as the simulator's copies see it: small chunks, so that a copy spans many
/// steps of time and races the batches its source executes.
const SIM_COPY_FRAME_BYTES: usize = 4 << 10;

/// Bytes of a full-stack page image one simulated step takes (a node's executor takes 256
/// KiB; smaller here, so that the simulator's small partitions' copies race their batches).
const IMAGE_STEP_BYTES: usize = 16 << 10;

/// Moves a digest copy of `replica` on by `steps` steps; its outcome once it has one: the
/// digest, or why there is none. A full-stack image, once whole, is rebuilt into a database
/// of its own and digested there, as a node's rebuilding thread does.
fn step_digest_copy(
    copy: &mut DigestCopying,
    replica: &mut Replica,
    steps: u64,
) -> Option<Result<StateDigest, String>> {
    match (copy, replica.store_mut()) {
        (DigestCopying::Rows(sender), Store::Lean(db)) => {
            if !sender.is_copying(db) {
                return Some(Err("the replica's state was replaced".to_string()));
            }
            for _ in 0..steps {
                match sender.next(db) {
                    node::snapshot::CopyNext::Chunk(chunk) => match chunk.end {
                        Some(wire::messages::SnapshotEnd::Complete { digest, .. }) => return Some(Ok(digest)),
                        Some(wire::messages::SnapshotEnd::Refused { reason }) => return Some(Err(reason)),
                        None => {}
                    },
                    node::snapshot::CopyNext::Over => return Some(Err("the copy is over".to_string())),
                }
            }
            None
        }
        (DigestCopying::Image(image), Store::Full(f)) => {
            let db = f.database();
            if !db.image_copy_active() {
                return Some(Err("the replica's state was replaced".to_string()));
            }
            for _ in 0..steps {
                match db.image_copy_step(IMAGE_STEP_BYTES, image) {
                    Ok(engine::conventional::ImageCopyStep::More) => {}
                    Ok(engine::conventional::ImageCopyStep::Done { .. }) => {
                        let rebuilt = engine::conventional::ConventionalDb::open_from_image(db.config().clone(), image)
                            .and_then(|db| db.session())
                            .map(|mut session| StateDigest::from(engine::digest::digest(&mut session)))
                            .map_err(|e| format!("the image did not rebuild: {e}"));
                        return Some(rebuilt);
                    }
                    Err(e) => return Some(Err(format!("the page image copy failed: {e}"))),
                }
            }
            None
        }
        _ => Some(Err("the replica changed".to_string())),
    }
}

impl Sim {
    /// Takes the digest copy that node `node`'s replica of `partition` began, if any.
    pub(super) fn take_digest_copy(&mut self, node: NodeId, partition: PartitionId) {
        let process = self.nodes[&node].process;
        let Some(m) = self.node_mut(node).partitions.get_mut(&partition) else { return };
        let (seq, copy) = match m.take_digest_copy() {
            Some((node::replica::DigestCopy::Rows { seq, sender }, _)) => (seq, DigestCopying::Rows(sender)),
            Some((node::replica::DigestCopy::Image { seq }, _)) => (seq, DigestCopying::Image(Vec::new())),
            None => return,
        };
        self.digest_copies.push(DigestInCopy { node, process, partition, seq, copy });
    }

    /// Moves each digest copy on by a seeded number of chunks (batches run in between: the
    /// copies race them), and reports each digest taken, or why none, to the coordinator as
    /// the node's executor does. A copy whose node crashed or restarted is dropped with it.
    pub(super) fn progress_digest_copies(&mut self) {
        let mut i = 0;
        while i < self.digest_copies.len() {
            let steps = self.rng.below(3);
            let c = &mut self.digest_copies[i];
            let (node, partition, seq) = (c.node, c.partition, c.seq);
            let Some(n) = self.nodes.get_mut(&node).filter(|n| n.up && n.process == c.process) else {
                self.digest_copies.swap_remove(i);
                continue;
            };
            let replica = n.partitions.get_mut(&partition).and_then(Partition::executing_replica_mut);
            let outcome = match replica {
                None => Some(Err("the replica is rejoining".to_string())),
                Some(r) if r.stopped().is_some() => Some(Err("stopped".to_string())),
                Some(r) => {
                    let raced = r.applied_seq() > seq;
                    let outcome = step_digest_copy(&mut c.copy, r, steps);
                    if raced && matches!(outcome, Some(Ok(_))) {
                        self.stats.digest_copies_raced += 1;
                    }
                    outcome
                }
            };
            let Some(digest) = outcome else {
                i += 1;
                continue;
            };
            self.digest_copies.swap_remove(i);
            match &digest {
                Ok(_) => self.stats.digest_copies += 1,
                Err(_) => self.stats.digest_copies_refused += 1,
            }
            let now = self.now_us;
            let msg = NodeToCoordinator::StateDigest { partition, seq, digest };
            let effects = self.node_mut(node).machine.on_emit(node::replica::Emit::ToCoordinator(msg), now);
            self.perform(node, effects);
        }
    }

    /// Completes the fetches that can complete now: a copy once its source executed up to the
    /// plan's point (and is not parked at a home piece: a half-run batch is not copied), a
    /// log base once its primary took one that far; a fetch from a source that is gone, or
    /// cannot serve, fails (and the rejoining machine retries or gives up).
    pub(super) fn progress_fetches(&mut self) {
        self.drop_orphan_copies();
        let mut i = 0;
        while i < self.fetches.len() {
            let f = self.fetches[i];
            let fetcher = &self.nodes[&f.node];
            if !fetcher.up || fetcher.process != f.process {
                self.fetches.swap_remove(i);
                continue;
            }
            if f.at_us > self.now_us {
                i += 1;
                continue;
            }
            // A fetch waits for its source as long as the joiner's machine lets it: its
            // patience abandons one that brings nothing (`PartitionMachine::tick`).
            let Some(outcome) = self.try_fetch(f) else {
                i += 1;
                continue;
            };
            self.fetches.swap_remove(i);
            if outcome.is_err() {
                self.stats.fetches_failed += 1;
            }
            let Some(m) = self.node_mut(f.node).partitions.get_mut(&f.partition) else { continue };
            let effects = m.on_fetched(f.order, outcome);
            self.perform_partition(f.node, f.partition, effects);
        }
    }

    /// The outcome of fetch `f` now, or `None` while its source is to be waited for.
    fn try_fetch(&mut self, f: PendingFetch) -> Option<Result<Fetched, RejoinError>> {
        let refused = |reason: &str| {
            Some(Err(RejoinError::Transfer(node::TransferError::Refused {
                peer: format!("node {}", f.source),
                reason: reason.to_string(),
            })))
        };
        let src = self.nodes.get_mut(&f.source).filter(|s| s.up);
        let Some(r) = src.and_then(|s| s.partitions.get_mut(&f.partition)).and_then(Partition::replica_mut) else {
            return refused("the source does not serve the partition");
        };
        if r.stopped().is_some() {
            return refused("stopped");
        }
        match f.kind {
            FetchKind::Copy if matches!(r.store_mut(), Store::Lean(_)) => self.step_copy(f),
            FetchKind::Copy => {
                if r.parked_at().is_some() || r.applied_seq() < f.after_seq {
                    return None;
                }
                // The source's digest closes the stream and the joiner checks its copy against
                // it, as `node::snapshot::snapshot_after` does. Two full digests per rejoin
                // are the simulator's largest cost, so that check runs under
                // `debug_assertions` only; the final convergence check compares every
                // replica's digest in every build.
                let digest = cfg!(debug_assertions).then(|| r.state_digest());
                match snapshot_copy(f.source, r, digest) {
                    Ok((db, info)) => Some(Ok(Fetched::Copy { db: Box::new(db), info })),
                    Err(e) => {
                        let error = std::sync::Arc::new(e);
                        self.violations.push(Violation::BadSnapshot { node: f.node, partition: f.partition, error });
                        refused("the copy did not arrive whole")
                    }
                }
            }
            FetchKind::LogBase | FetchKind::BaseBackup => {
                let base = match r.log_base_for(f.after_seq) {
                    Ok(base) => base?.clone(),
                    Err(why) => return refused(why),
                };
                let (base, image) = match base.read(f.kind == FetchKind::BaseBackup) {
                    Ok(read) => read,
                    Err(e) => return refused(&format!("cannot read the log base: {e}")),
                };
                let copy = log_base_copy(f.source, f.partition, &base, image.as_deref());
                Some(copy.map(Fetched::LogBase).map_err(RejoinError::Transfer))
            }
        }
    }

    /// Copies under way whose fetch is gone (the joiner crashed, gave up, or started over):
    /// dropped, and their source's copy with them.
    fn drop_orphan_copies(&mut self) {
        let live: std::collections::BTreeSet<u64> = self.fetches.iter().map(|f| f.id).collect();
        let orphans: Vec<u64> = self.copies.keys().filter(|id| !live.contains(id)).copied().collect();
        for id in orphans {
            let c = self.copies.remove(&id).expect("listed above");
            self.stats.copies_cut += 1;
            let Some(src) = self.nodes.get_mut(&c.source).filter(|s| s.up && s.process == c.source_process) else {
                continue;
            };
            for m in src.partitions.values_mut() {
                if let Some(Store::Lean(db)) = m.replica_mut().map(Replica::store_mut) {
                    if c.sender.is_copying(db) {
                        db.abort_copy();
                    }
                }
            }
        }
    }

    /// Moves fetch `f`'s copy from a lean source on by a seeded number of chunks, beginning it
    /// once the source executed up to the plan's point (and is not parked at a home piece):
    /// the fetched copy once its end arrived, `None` while it goes on.
    fn step_copy(&mut self, f: PendingFetch) -> Option<Result<Fetched, RejoinError>> {
        let refused = |reason: &str| {
            Some(Err(RejoinError::Transfer(node::TransferError::Refused {
                peer: format!("node {}", f.source),
                reason: reason.to_string(),
            })))
        };
        // A chunk at every other step of time, on average: the source executes batches in
        // between, so copies race them.
        let steps = self.rng.below(2);
        let Sim { nodes, copies, next_id, violations, stats, .. } = self;
        let src = nodes.get_mut(&f.source).filter(|s| s.up)?;
        let source_process = src.process;
        let r = src.partitions.get_mut(&f.partition).and_then(Partition::replica_mut)?;
        let (seq, at_boundary) = (r.applied_seq(), r.parked_at().is_none());
        let Store::Lean(db) = r.store_mut() else { return refused("not a lean replica") };
        let Some(c) = copies.get_mut(&f.id) else {
            if !at_boundary || seq < f.after_seq {
                return None;
            }
            *next_id += 1;
            // `None`: the source is being copied for another joiner; this one waits.
            let sender = node::snapshot::CopySender::begin(db, *next_id, 1, f.partition, seq, SIM_COPY_FRAME_BYTES)?;
            let receiver = node::snapshot::SnapshotReceiver::new(f.partition, format!("node {}", f.source));
            let db = engine::LeanDb::new();
            let c = InCopy { source: f.source, source_process, begun_seq: seq, sender, receiver, db, chunks: 0 };
            copies.insert(f.id, c);
            return None;
        };
        if c.source_process != source_process || !c.sender.is_copying(db) {
            copies.remove(&f.id);
            stats.copies_cut += 1;
            return refused("the source's state was replaced");
        }
        let chunks_before = c.chunks;
        for _ in 0..steps {
            let node::snapshot::CopyNext::Chunk(chunk) = c.sender.next(db) else { break };
            c.chunks += 1;
            match c.receiver.accept(chunk, &mut c.db) {
                Ok(None) => {}
                Ok(Some(info)) => {
                    let c = copies.remove(&f.id).expect("under way");
                    stats.copies += 1;
                    stats.copies_raced += u64::from(seq > c.begun_seq);
                    return Some(Ok(Fetched::Copy { db: Box::new(c.db), info }));
                }
                Err(e) => {
                    copies.remove(&f.id);
                    if matches!(e, TransferError::Refused { .. }) {
                        return Some(Err(RejoinError::Transfer(e)));
                    }
                    let error = std::sync::Arc::new(SimError::Transfer(e));
                    violations.push(Violation::BadSnapshot { node: f.node, partition: f.partition, error });
                    return refused("the copy did not arrive whole");
                }
            }
        }
        // The joiner's machine hears of the chunks that arrived, as a fetching thread reports
        // them (its patience restarts).
        let chunks = c.chunks;
        if chunks > chunks_before {
            let now = self.now_us;
            if let Some(m) = self.node_mut(f.node).partitions.get_mut(&f.partition) {
                m.on_fetch_progress(f.order, chunks, now);
            }
        }
        None
    }

    /// Every replica catching up after its copy executes a seeded slice of what it holds.
    pub(super) fn progress_catch_ups(&mut self) {
        let catching: Vec<(NodeId, PartitionId)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.up)
            .flat_map(|(&id, n)| n.partitions.iter().filter(|(_, m)| m.catching_up()).map(move |(&p, _)| (id, p)))
            .collect();
        for (node, partition) in catching {
            let slice = 1 + self.rng.below(node::machine::CATCH_UP_SLICE_IDLE as u64) as usize;
            let Some(m) = self.node_mut(node).partitions.get_mut(&partition) else { continue };
            let effects = m.catch_up(slice, true);
            self.perform_partition(node, partition, effects);
        }
    }
}

/// A copy of replica `r`'s partition (on node `source`) as a rejoin takes it: streamed as
/// snapshot chunks (`node::snapshot::stream`, closing with `digest`) and received by
/// `node::snapshot::SnapshotReceiver` into a fresh database, every chunk checked as a
/// rejoining node checks it — and, given the source's `digest`, the copy's digest against it;
/// without one the stream closes with a zero digest the receiver is told to trust.
pub(super) fn snapshot_copy(
    source: NodeId,
    r: &mut Replica,
    digest: Option<wire::messages::StateDigest>,
) -> Result<(engine::LeanDb, SnapshotInfo), SimError> {
    let (partition, seq) = (r.partition(), r.applied_seq());
    let trust = digest.is_none();
    let digest = digest.unwrap_or(wire::messages::StateDigest(0));
    let mut chunks = Vec::new();
    let mut keep = |m| {
        chunks.push(m);
        true
    };
    match r.store_mut() {
        Store::Lean(db) => node::snapshot::stream(db, 1, partition, seq, digest, 1 << 22, &mut keep),
        Store::Full(f) => node::snapshot::stream(f.session(), 1, partition, seq, digest, 1 << 22, &mut keep),
    };
    let mut copy = engine::LeanDb::new();
    let mut receiver = node::snapshot::SnapshotReceiver::new(partition, format!("node {source}"));
    if trust {
        receiver = receiver.trusting_digest();
    }
    for c in chunks {
        if let Some(info) = receiver.accept(c, &mut copy)? {
            return Ok((copy, info));
        }
    }
    Err(SimError::Transfer(closed(source)))
}

/// A full-stack primary's log base as a rejoining backup receives it: cut into pieces
/// (`node::snapshot::log_base_pieces`) and collected by `node::snapshot::LogBaseReceiver`,
/// every piece checked.
fn log_base_copy(
    source: NodeId,
    partition: PartitionId,
    base: &LogBase,
    image: Option<&[u8]>,
) -> Result<LogBaseReceived, TransferError> {
    let mut receiver =
        node::snapshot::LogBaseReceiver::new(partition, format!("node {source}"), base.seq, image.is_some());
    for piece in node::snapshot::log_base_pieces(base, image, 1, partition, 1 << 20) {
        if let Some(received) = receiver.accept(piece)? {
            return Ok(received);
        }
    }
    Err(closed(source))
}

fn closed(source: NodeId) -> TransferError {
    TransferError::Recv(wire::endpoint::RecvError::Closed { peer: format!("node {source}"), what: "a transfer piece" })
}
