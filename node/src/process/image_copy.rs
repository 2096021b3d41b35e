//! The executor's side of a tool's copy of a full-stack replica taken while the partition
//! executes on (docs/design.md §10, "Copying without stopping"): the conventional engine's
//! copy-on-write page image ([`engine::conventional::ConventionalDb::begin_image_copy`]) is
//! stepped by the executor — under load at most `limits.copy_share_pct` percent of its time,
//! with an empty inbox as fast as the image is taken — and handed, a step at a time, to a
//! thread of its own, which rebuilds the database from the image
//! ([`ConventionalDb::open_from_image`]) and streams its rows and digest to the requester, as
//! a lean replica's copy does.
//!
//! Guarantees:
//! - the executor never blocks on the rebuilding thread: at most [`IMAGE_PIECES_AHEAD`] pieces
//!   wait for it, past that the copy pauses until the thread makes room (it wakes the
//!   executor); the engine bounds what the copy keeps of pages changed under it;
//! - the rows sent are the state at the batch the copy began after, with its digest computed
//!   from the rebuilt database; the replica's own state is never scanned on the executor;
//! - a replica replaced, stopped or gone ends the copy with a refusal, and the thread sends
//!   nothing more: never a stream that mixes two states.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::conventional::{ConventionalDb, ImageCopyStep};
use tokio::sync::mpsc;
use tracing::{info, warn};
use wire::messages::{PartitionId, Seq, SnapshotChunk, StateDigest};

use super::copy::{forward, Forwarding, Step};
use crate::replica::{Replica, Store};
use crate::snapshot;

/// Image pieces waiting for the rebuilding thread.
pub const IMAGE_PIECES_AHEAD: usize = 4;
/// Bytes of the image one executor step takes at most.
pub const IMAGE_STEP_BYTES_MAX: usize = 256 << 10;

/// What the executor hands the rebuilding thread.
enum Piece {
    Bytes(Vec<u8>),
    /// The image is whole.
    End,
}

/// The rebuilding thread's hold on its copy's count ([`Forwarding::held_by_thread`]):
/// released, and the executor woken, when the thread ends however it ends.
struct Held<'w, W: Fn()>(Option<Arc<std::sync::atomic::AtomicUsize>>, &'w W);

impl<W: Fn()> Drop for Held<'_, W> {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.fetch_sub(1, Ordering::SeqCst);
            (self.1)();
        }
    }
}

/// A tool's copy of a full-stack replica under way on an executor.
pub struct ImageCopyTask {
    to_rebuild: std::sync::mpsc::SyncSender<Piece>,
    /// For a refusal.
    out: mpsc::Sender<SnapshotChunk>,
    room: Arc<AtomicBool>,
    blocked: Option<Piece>,
    partition: PartitionId,
    request_id: u64,
    begun_seq: Seq,
    started: Instant,
    busy: Duration,
    share: f64,
    stalled: bool,
    bytes: u64,
    /// The image is all taken: the end is due to the rebuilding thread.
    ending: bool,
}

impl std::fmt::Debug for ImageCopyTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageCopyTask").field("partition", &self.partition).finish()
    }
}

impl ImageCopyTask {
    /// Begins a copy of `replica` (a full-stack one), carried as `to` says (`to.wake` is
    /// called when the rebuilding thread made room). Refused (why) when the replica cannot be
    /// copied this way now.
    pub fn begin<R: Send + 'static>(
        replica: &mut Replica,
        request_id: u64,
        frame_bytes_max: usize,
        to: Forwarding<'_, R, impl Fn() + Send + 'static>,
    ) -> Result<ImageCopyTask, String> {
        let Store::Full(f) = replica.store_mut() else { return Err("not a full-stack replica".into()) };
        f.database().begin_image_copy().map_err(|e| e.to_string())?;
        let begun_seq = replica.applied_seq();
        ImageCopyTask::around(replica, begun_seq, request_id, frame_bytes_max, to)
    }

    /// Carries the image copy of `replica` already begun
    /// ([`ConventionalDb::begin_image_copy`] was called right after batch `begun_seq`), as
    /// `to` says.
    pub fn around<R: Send + 'static>(
        replica: &mut Replica,
        begun_seq: Seq,
        request_id: u64,
        frame_bytes_max: usize,
        to: Forwarding<'_, R, impl Fn() + Send + 'static>,
    ) -> Result<ImageCopyTask, String> {
        let Forwarding { requester, digest_only, share_pct, reply, wrap, runtime, wake, held_by_thread } = to;
        let partition = replica.partition();
        let Store::Full(f) = replica.store_mut() else { return Err("not a full-stack replica".into()) };
        let db = f.database();
        let config = db.config().clone();
        let (out, _) = forward(runtime, partition, reply, wrap, |_| {});
        let (to_rebuild, pieces) = std::sync::mpsc::sync_channel::<Piece>(IMAGE_PIECES_AHEAD);
        let room = Arc::new(AtomicBool::new(false));
        let (thread_out, thread_room) = (out.clone(), room.clone());
        // Counted from here until the thread ends (or could not start).
        let held = held_by_thread.inspect(|c| {
            c.fetch_add(1, Ordering::SeqCst);
        });
        let release = held.clone();
        let rebuild = move || {
            let _held = Held(held, &wake);
            let mut image = Vec::new();
            loop {
                let piece = pieces.recv();
                if thread_room.swap(false, Ordering::SeqCst) {
                    wake();
                }
                match piece {
                    Ok(Piece::Bytes(b)) => image.extend_from_slice(&b),
                    Ok(Piece::End) => break,
                    // Given up on the executor's side, which said why.
                    Err(_) => return,
                }
            }
            let t0 = Instant::now();
            let streamed = ConventionalDb::open_from_image(config, &image).map_err(|e| e.to_string()).and_then(|db| {
                drop(std::mem::take(&mut image));
                let mut session = db.session().map_err(|e| e.to_string())?;
                let digest = StateDigest::from(engine::digest::digest(&mut session));
                let mut send = |c| thread_out.blocking_send(c).is_ok();
                if digest_only {
                    let complete = send(snapshot::digest_only(request_id, partition, begun_seq, digest));
                    return Ok(snapshot::Streamed { chunks: 1, rows: 0, bytes: 0, complete });
                }
                Ok(snapshot::stream(&mut session, request_id, partition, begun_seq, digest, frame_bytes_max, &mut send))
            });
            match streamed {
                Ok(s) => info!(
                    partition,
                    seq = begun_seq,
                    rows = s.rows,
                    mib = s.bytes as f64 / (1 << 20) as f64,
                    rebuild_and_stream_seconds = t0.elapsed().as_secs_f64(),
                    "full-stack copy rebuilt from its page image and sent"
                ),
                Err(why) => {
                    warn!(partition, reason = %why, "full-stack copy refused: its image did not rebuild");
                    let _ = thread_out.blocking_send(snapshot::refusal(request_id, partition, why));
                }
            }
        };
        std::thread::Builder::new()
            .name(format!("image-copy-p{partition}"))
            .spawn(move || {
                crate::affinity::spread();
                rebuild()
            })
            .map_err(|e| format!("cannot start the thread rebuilding the copy: {e}"))
            .inspect_err(|_| {
                db.abort_image_copy();
                if let Some(c) = &release {
                    c.fetch_sub(1, Ordering::SeqCst);
                }
            })?;
        info!(partition, seq = begun_seq, requester = %requester, "copying the full-stack partition's pages while it executes");
        Ok(ImageCopyTask {
            to_rebuild,
            out,
            room,
            blocked: None,
            partition,
            request_id,
            begun_seq,
            started: Instant::now(),
            busy: Duration::ZERO,
            share: f64::from(share_pct.clamp(1, 100)) / 100.0,
            stalled: false,
            bytes: 0,
            ending: false,
        })
    }

    /// Whether a step can move the copy now (it is not waiting to be woken).
    pub fn can_move(&self) -> bool {
        !self.stalled
    }

    /// Bytes of the page image taken so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Moves the copy on by at most one piece (see [`super::copy::CopyTask::step`]).
    pub fn step(&mut self, replica: Option<&mut Replica>, under_load: bool) -> Step {
        let step = self.step_once(replica, under_load);
        self.stalled = step == Step::Blocked;
        step
    }

    fn step_once(&mut self, replica: Option<&mut Replica>, under_load: bool) -> Step {
        let Some(replica) = replica else { return self.refuse(None, "the replica is rejoining") };
        if let Some(reason) = replica.stopped() {
            let why = format!("stopped: {reason}");
            return self.refuse(Some(replica), &why);
        }
        let Store::Full(f) = replica.store_mut() else { return self.refuse(None, "the replica changed") };
        let db = f.database();
        if let Some(piece) = self.blocked.take() {
            match self.hand(piece) {
                Step::Stepped => {}
                other => return other,
            }
        }
        if self.ending {
            return self.hand(Piece::End);
        }
        if !db.image_copy_active() {
            return self.refuse(None, "the replica's state was replaced");
        }
        if under_load && self.busy.as_secs_f64() > self.share * self.started.elapsed().as_secs_f64() {
            return Step::Stepped;
        }
        let t0 = Instant::now();
        let mut bytes = Vec::with_capacity(IMAGE_STEP_BYTES_MAX);
        let step = db.image_copy_step(IMAGE_STEP_BYTES_MAX, &mut bytes);
        self.busy += t0.elapsed();
        self.bytes += bytes.len() as u64;
        match step {
            Ok(ImageCopyStep::More) => self.hand(Piece::Bytes(bytes)),
            Ok(ImageCopyStep::Done { .. }) => {
                let mib = self.bytes as f64 / (1 << 20) as f64;
                let busy = self.busy.as_secs_f64();
                info!(
                    partition = self.partition,
                    seq = self.begun_seq,
                    mib,
                    seconds = self.started.elapsed().as_secs_f64(),
                    executor_seconds = busy,
                    executor_ms_per_mib = if mib > 0.0 { busy * 1e3 / mib } else { 0.0 },
                    "full-stack page image taken while executing"
                );
                self.ending = true;
                match self.hand(Piece::Bytes(bytes)) {
                    Step::Stepped => self.hand(Piece::End),
                    other => other,
                }
            }
            Err(e) => self.refuse(None, &format!("the page image copy failed: {e}")),
        }
    }

    /// Hands `piece` to the rebuilding thread: `Over` once the end went, `Blocked` when it has
    /// no room.
    fn hand(&mut self, piece: Piece) -> Step {
        let end = matches!(piece, Piece::End);
        let mut piece = piece;
        for attempt in 0..2 {
            match self.to_rebuild.try_send(piece) {
                Ok(()) if end => return Step::Over,
                Ok(()) => return Step::Stepped,
                Err(std::sync::mpsc::TrySendError::Disconnected(_)) => return Step::Over,
                Err(std::sync::mpsc::TrySendError::Full(p)) => {
                    piece = p;
                    if attempt == 0 {
                        self.room.store(true, Ordering::SeqCst);
                    }
                }
            }
        }
        self.blocked = Some(piece);
        Step::Blocked
    }

    /// Ends the copy with a refusal; the rebuilding thread, its channel closed, sends nothing.
    fn refuse(&mut self, replica: Option<&mut Replica>, why: &str) -> Step {
        if let Some(Store::Full(f)) = replica.map(Replica::store_mut) {
            f.database().abort_image_copy();
        }
        self.blocked = None;
        warn!(partition = self.partition, reason = why, "full-stack copy refused");
        let _ = self.out.try_send(snapshot::refusal(self.request_id, self.partition, why.to_string()));
        Step::Over
    }
}
