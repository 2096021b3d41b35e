//! The executor's side of a copy of its lean replica taken while the partition executes on
//! (docs/design.md §10, "Copying without stopping"): for a rejoining node or a tool (`glass
//! check`, `dump`). The executor owns the [`CopyTask`] and calls [`CopyTask::step`] between
//! work items: after each one (under load), at most `limits.copy_share_pct` percent of its
//! time since the copy began; and, while its inbox is empty, as fast as the receiver takes
//! the chunks. A task on the runtime forwards the chunks to the requester's connection.
//!
//! Guarantees:
//! - the executor never blocks on the receiver: at most [`COPY_CHUNKS_AHEAD`] chunks wait for
//!   the forwarder, past that the copy pauses until the forwarder makes room (it wakes the
//!   executor) — and the images the copy keeps of rows changed under it grow meanwhile,
//!   bounded by `engine::lean::COPY_KEPT_BYTES_MAX`, past which the copy is refused;
//! - a receiver that reads nothing for [`COPY_RECEIVER_PATIENCE`] ends the copy (the forwarder
//!   stops, the executor drops the copy at its next step);
//! - a replica replaced (a rejoin), stopped or gone ends the copy with a refusal, never a
//!   stream that mixes two states.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tracing::{info, warn};
use wire::messages::{PartitionId, Seq, SnapshotChunk};

use crate::replica::{Replica, Store};
use crate::snapshot::{self, CopyNext, CopySender};

/// Chunks a copy keeps queued for its forwarder.
pub const COPY_CHUNKS_AHEAD: usize = 4;
/// How long the forwarder waits for the requester to take one chunk before it ends the copy.
pub const COPY_RECEIVER_PATIENCE: Duration = snapshot::SNAPSHOT_CHUNK_TIMEOUT;

/// What one [`CopyTask::step`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A chunk went out (or the copy's share of the executor is used up for now).
    Stepped,
    /// Nothing can move until the forwarder makes room: the executor may block on its inbox
    /// (it is woken).
    Blocked,
    /// The copy is over: sent whole, refused, or its receiver is gone.
    Over,
}

/// A copy under way on an executor: of a lean replica's rows, or of a full-stack replica's
/// pages ([`super::image_copy::ImageCopyTask`]).
#[derive(Debug)]
pub enum Copying {
    Rows(CopyTask),
    Image(super::image_copy::ImageCopyTask),
}

impl Copying {
    /// Whether a step can move the copy now (it is not waiting to be woken).
    pub fn can_move(&self) -> bool {
        match self {
            Copying::Rows(t) => t.can_move(),
            Copying::Image(t) => t.can_move(),
        }
    }

    /// Whether a rejoining node's request ends this copy (a tool's copy of a lean replica).
    pub fn preemptible(&self) -> bool {
        matches!(self, Copying::Rows(t) if t.preemptible)
    }

    /// Ends a preemptible copy now, the requester told `why` ([`CopyTask::preempt`]).
    pub fn preempt(&mut self, replica: Option<&mut Replica>, why: &str) {
        if let Copying::Rows(t) = self {
            t.preempt(replica, why);
        }
    }

    /// Bytes of rows (or page image) taken for the copy so far.
    pub fn sent_bytes(&self) -> u64 {
        match self {
            Copying::Rows(t) => t.sender.sent().1,
            Copying::Image(t) => t.bytes(),
        }
    }

    /// Moves the copy on by at most one step.
    pub fn step(&mut self, replica: Option<&mut Replica>, under_load: bool) -> Step {
        match self {
            Copying::Rows(t) => t.step(replica, under_load),
            Copying::Image(t) => t.step(replica, under_load),
        }
    }
}

/// A copy's last word when it is ended from outside (a rejoining node's copy goes first):
/// the forwarder drops what is still queued and sends this refusal instead.
pub(super) type Cut = Arc<std::sync::Mutex<Option<SnapshotChunk>>>;

/// Starts the task on `runtime` that carries a copy's chunks, wrapped by `wrap`, to `reply`,
/// calling `sent_one(false)` after each chunk and `sent_one(true)` when it ends; returns its queue
/// ([`COPY_CHUNKS_AHEAD`] chunks) and its [`Cut`]. A receiver that takes nothing for
/// [`COPY_RECEIVER_PATIENCE`] ends it.
pub(super) fn forward<R: Send + 'static>(
    runtime: &tokio::runtime::Handle,
    partition: PartitionId,
    reply: mpsc::Sender<R>,
    wrap: fn(SnapshotChunk) -> R,
    sent_one: impl Fn(bool) + Send + 'static,
) -> (mpsc::Sender<SnapshotChunk>, Cut) {
    let (out, mut rx) = mpsc::channel::<SnapshotChunk>(COPY_CHUNKS_AHEAD);
    let cut: Cut = Arc::default();
    let last_word = cut.clone();
    let take_cut = move || last_word.lock().unwrap_or_else(|e| e.into_inner()).take();
    runtime.spawn(async move {
        loop {
            let next = match take_cut() {
                Some(refusal) => Some((refusal, true)),
                None => match rx.recv().await {
                    Some(chunk) => Some((chunk, false)),
                    None => take_cut().map(|refusal| (refusal, true)),
                },
            };
            let Some((chunk, last)) = next else { break };
            let sent = tokio::time::timeout(COPY_RECEIVER_PATIENCE, reply.send(wrap(chunk))).await;
            sent_one(false);
            if !matches!(sent, Ok(Ok(()))) {
                if sent.is_err() {
                    warn!(partition, "a copy's receiver took nothing for {COPY_RECEIVER_PATIENCE:?}; copy ended");
                }
                break;
            }
            if last {
                break;
            }
            if crate::faults::stall_snapshot() {
                // `GLASS_FAULTS=stall-snapshot`: the stream stays open and silent until its
                // receiver goes away.
                let _ = tokio::time::timeout(COPY_RECEIVER_PATIENCE, reply.closed()).await;
                break;
            }
        }
        drop(rx);
        sent_one(true);
    });
    (out, cut)
}

/// Where a copy's chunks go, and what it may take of the executor: `requester` (named in the
/// log), at most `share_pct` percent of the executor's time under load, each chunk wrapped by
/// `wrap` and sent to `reply` by a task on `runtime`, which calls `wake` when it made room or
/// the copy ended. `digest_only`: only the end, with the digest, is wanted — a full-stack
/// copy then sends no rows (a lean copy's rows are built all the same: its digest is theirs).
pub struct Forwarding<'a, R, W> {
    pub requester: String,
    pub digest_only: bool,
    pub share_pct: u32,
    pub reply: mpsc::Sender<R>,
    pub wrap: fn(SnapshotChunk) -> R,
    pub runtime: &'a tokio::runtime::Handle,
    pub wake: W,
    /// Counts the copy while a thread of its own still holds it (a full-stack copy's
    /// rebuilding thread): one more while it runs; `wake` is called when it ends.
    pub held_by_thread: Option<Arc<std::sync::atomic::AtomicUsize>>,
}

/// A copy under way on an executor.
pub struct CopyTask {
    sender: CopySender,
    out: mpsc::Sender<SnapshotChunk>,
    /// Set while the executor waits for room; the forwarder then wakes it.
    room: Arc<AtomicBool>,
    /// A chunk that found no room yet.
    blocked: Option<SnapshotChunk>,
    partition: PartitionId,
    requester: String,
    begun_seq: Seq,
    started: Instant,
    /// Executor time spent building chunks.
    busy: Duration,
    share: f64,
    /// The last step found nothing to do until woken.
    stalled: bool,
    /// A tool's copy, which a rejoining node's request ends ([`CopyTask::preempt`]).
    preemptible: bool,
    cut: Cut,
}

impl std::fmt::Debug for CopyTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopyTask").field("partition", &self.partition).field("requester", &self.requester).finish()
    }
}

impl CopyTask {
    /// Begins a copy of `replica` (a lean one), carried as `to` says; `None` when the replica
    /// is being copied already.
    pub fn begin<R: Send + 'static>(
        replica: &mut Replica,
        request_id: u64,
        frame_bytes_max: usize,
        to: Forwarding<'_, R, impl Fn() + Send + 'static>,
    ) -> Option<CopyTask> {
        let partition = replica.partition();
        let begun_seq = replica.applied_seq();
        let Store::Lean(db) = replica.store_mut() else { return None };
        let copy_id = snapshot::next_copy_id();
        let sender = CopySender::begin(db, copy_id, request_id, partition, begun_seq, frame_bytes_max)?;
        Some(CopyTask::around(sender, partition, to))
    }

    /// Carries a copy already begun (`sender`, of `partition`) to its requester.
    pub fn around<R: Send + 'static>(
        sender: CopySender,
        partition: PartitionId,
        to: Forwarding<'_, R, impl Fn() + Send + 'static>,
    ) -> CopyTask {
        let Forwarding { requester, share_pct, reply, wrap, runtime, wake, .. } = to;
        let begun_seq = sender.seq();
        let room = Arc::new(AtomicBool::new(false));
        let forwarder_room = room.clone();
        let sent_one = move |ended: bool| {
            if forwarder_room.swap(false, Ordering::SeqCst) || ended {
                wake();
            }
        };
        let (out, cut) = forward(runtime, partition, reply, wrap, sent_one);
        info!(partition, seq = begun_seq, requester = %requester, "copying the partition while it executes");
        CopyTask {
            sender,
            out,
            room,
            blocked: None,
            partition,
            requester,
            begun_seq,
            started: Instant::now(),
            busy: Duration::ZERO,
            share: f64::from(share_pct.clamp(1, 100)) / 100.0,
            stalled: false,
            preemptible: false,
            cut,
        }
    }

    /// Marks a tool's copy: a rejoining node's request for a copy of the same partition ends
    /// it ([`CopyTask::preempt`]).
    pub fn preemptible(mut self) -> CopyTask {
        self.preemptible = true;
        self
    }

    /// Ends the copy now, for `why`: the engine's copy of `replica` is dropped and the
    /// requester is sent a refusal saying why, in place of the chunks not yet sent. (A tool
    /// that reads slowly, or not at all, would otherwise hold the partition's one copy for
    /// up to [`COPY_RECEIVER_PATIENCE`], and a rejoining node's request with it.)
    pub fn preempt(&mut self, replica: Option<&mut Replica>, why: &str) {
        if let Some(Store::Lean(db)) = replica.map(Replica::store_mut) {
            if self.sender.is_copying(db) {
                db.abort_copy();
            }
        }
        self.blocked = None;
        warn!(partition = self.partition, requester = %self.requester, reason = why, "copy ended");
        let refusal = snapshot::refusal(self.sender.request_id(), self.partition, why.to_string());
        *self.cut.lock().unwrap_or_else(|e| e.into_inner()) = Some(refusal);
    }

    /// Moves the copy on by at most one chunk. `under_load`: batches wait, so the copy keeps
    /// to its share of the executor's time. `replica` is the executor's replica now (`None`
    /// when it does not serve).
    pub fn step(&mut self, replica: Option<&mut Replica>, under_load: bool) -> Step {
        let step = self.step_once(replica, under_load);
        self.stalled = step == Step::Blocked;
        step
    }

    /// Whether a step can move the copy now (it is not waiting to be woken).
    pub fn can_move(&self) -> bool {
        !self.stalled
    }

    fn step_once(&mut self, replica: Option<&mut Replica>, under_load: bool) -> Step {
        let Some(replica) = replica else { return self.refuse("the replica is rejoining") };
        if let Some(reason) = replica.stopped() {
            let why = format!("stopped: {reason}");
            return self.refuse(&why);
        }
        let Store::Lean(db) = replica.store_mut() else { return self.refuse("the replica changed") };
        if !self.sender.is_copying(db) {
            return self.refuse("the replica's state was replaced");
        }
        if let Some(chunk) = self.blocked.take() {
            match self.send(chunk, db) {
                Step::Stepped => {}
                other => return other,
            }
        }
        if under_load && self.busy.as_secs_f64() > self.share * self.started.elapsed().as_secs_f64() {
            return Step::Stepped;
        }
        let t0 = Instant::now();
        let next = self.sender.next(db);
        self.busy += t0.elapsed();
        match next {
            CopyNext::Chunk(mut chunk) => {
                // `GLASS_FAULTS=corrupt-snapshot`: the first rows this process sends are damaged.
                crate::faults::corrupt_snapshot(std::slice::from_mut(&mut chunk));
                self.send(chunk, db)
            }
            CopyNext::Over => Step::Over,
        }
    }

    /// Hands `chunk` to the forwarder: `Over` once the end went out or the receiver is gone.
    fn send(&mut self, chunk: SnapshotChunk, db: &mut engine::LeanDb) -> Step {
        let end = chunk.end.is_some();
        let mut chunk = chunk;
        for attempt in 0..2 {
            match self.out.try_send(chunk) {
                Ok(()) if end => {
                    self.finished();
                    return Step::Over;
                }
                Ok(()) => return Step::Stepped,
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    db.abort_copy();
                    info!(partition = self.partition, requester = %self.requester, "copy ended: its receiver went away");
                    return Step::Over;
                }
                Err(mpsc::error::TrySendError::Full(c)) => {
                    chunk = c;
                    if attempt == 0 {
                        // Ask to be woken, then look once more: the forwarder may have made
                        // room before it could see the request.
                        self.room.store(true, Ordering::SeqCst);
                    }
                }
            }
        }
        self.blocked = Some(chunk);
        Step::Blocked
    }

    /// Ends the copy with a refusal (its database is gone or no longer this copy's).
    fn refuse(&mut self, why: &str) -> Step {
        self.blocked = None;
        warn!(partition = self.partition, requester = %self.requester, reason = why, "copy refused");
        let request_id = self.sender.request_id();
        let _ = self.out.try_send(snapshot::refusal(request_id, self.partition, why.to_string()));
        Step::Over
    }

    fn finished(&self) {
        let (rows, bytes) = self.sender.sent();
        let mib = bytes as f64 / (1 << 20) as f64;
        let seconds = self.started.elapsed().as_secs_f64();
        let busy = self.busy.as_secs_f64();
        info!(
            partition = self.partition,
            requester = %self.requester,
            seq = self.begun_seq,
            rows,
            mib,
            seconds,
            mib_per_s = if seconds > 0.0 { mib / seconds } else { 0.0 },
            executor_seconds = busy,
            executor_ms_per_mib = if mib > 0.0 { busy * 1e3 / mib } else { 0.0 },
            "copy sent while executing"
        );
    }
}
