//! Target `log_base_install`: a full-stack primary's log base (its write-ahead log from its
//! last checkpoint, headed by its checkpoint image for a base backup), as a hostile or broken
//! peer node could send it, collected and installed the way a rejoining full-stack backup does
//! (docs/design.md §13, "Fuzzing"; §10, "A full-stack backup that rejoins"; the transfer:
//! `node::snapshot`, the installation: `node::machine::base_restart`,
//! `node::fullstack::FullStack::restart_on` and `FullStack::apply_log`).
//!
//! Input: one flags byte, then the bytes of the peer link — frames of
//! `wire::channel::PeerReply` (`wire::codec`). Flags bit 0: the backup asked for the
//! checkpoint image (a base backup). Frames are decoded one after the other; a codec error or
//! the input's end ends it; replies other than a `LogBaseChunk` of this request are skipped
//! (`wire::endpoint::recv_matching`); every piece goes to a `node::snapshot::LogBaseReceiver`
//! of partition [`PARTITION`] as of batch [`AFTER_SEQ`], until it refuses or yields the base.
//!
//! Properties (a panic is a finding):
//! - nothing panics, hangs or allocates beyond a small multiple of the input;
//! - every refusal is typed: `TransferError::Snapshot` of this partition and peer, or
//!   `TransferError::Refused` — never another variant;
//! - a base yielded is exactly what the accepted pieces carried: the image followed by the
//!   records is the concatenation of the pieces' bytes in order; the image is there if and
//!   only if it was asked for, and is as long as every piece announced; its batch and fork
//!   point are every piece's, and no earlier than the batch asked for; it came with the
//!   piece marked last, and nothing is yielded before it;
//! - installing it on an in-memory medium as the node does (the image, or the backup's own
//!   log — here the primary's load checkpoint — cut to follow it; then the records applied
//!   as shipped log, checksummed record by record) either refuses with a typed error or
//!   leaves a database that can be read whole (its state digest and the TPC-C consistency
//!   conditions of clause 3.3.2 evaluate, `engine::check`). For the unmodified seeds the
//!   installed backup holds the primary's state (equal digests) and passes every condition
//!   (a unit test). A forged base is not required to be consistent: the pieces carry no
//!   total, so a base cut at a record boundary inside a transaction installs the prefix (the
//!   next shipment, starting where the primary's base ended, is then refused as a gap:
//!   `engine::conventional::ship`).
//!
//! The seeds are real log bases produced by `node::snapshot::log_base_pieces` (what the node
//! sends, `node::process`) from a full-stack primary at a small scale (1 warehouse, [`SCALE`])
//! that ran some NewOrder and Payment transactions after its load: the log alone in several
//! pieces, the same headed by the primary's checkpoint image, a refusal.

use std::sync::{Arc, OnceLock};

use engine::conventional::{install_image_on, Medium, MemoryMedium};
use engine::loader::Scale;
use node::fullstack::{FullStack, Restart};
use node::replica::LogBase;
use node::snapshot::{LogBaseReceived, LogBaseReceiver};
use node::TransferError;
use wire::channel::PeerReply;
use wire::codec;
use wire::messages::{BatchTxn, LogBaseChunk, PartitionId, Seq, StateDigest, Timestamp, REASON_BYTES_MAX};

/// The partition the receiver asks for.
pub const PARTITION: PartitionId = 1;
/// The request id `node::snapshot::log_base` uses for [`PARTITION`].
pub const REQUEST_ID: u64 = PARTITION as u64 + 3_000;
/// The batch the receiver asks for the base as of (or later).
pub const AFTER_SEQ: Seq = 4;
/// The batch the seeds' base ends with.
const SEED_SEQ: Seq = 5;
/// The peer's name in errors.
const PEER: &str = "node 2";
/// The frame limit of the decoding.
const FRAME_BYTES_MAX: usize = codec::FRAME_BYTES_MAX_DEFAULT;
/// Flags bit 0: the checkpoint image was asked for.
pub const IMAGE: u8 = 1;
/// The population of the seeds' primary: small enough for its checkpoint image to fit a seed.
pub const SCALE: Scale = Scale { items: 20, customers_per_district: 3 };
/// The load's seed.
const LOAD_SEED: u64 = 7;
/// Bytes per piece of the seeds.
const SEED_PIECE_BYTES: usize = 16 << 10;

/// What the seeds' primary holds: its load checkpoint image (a backup's own medium after its
/// load), the log base it sends, its checkpoint image (for a base backup, taken at the same
/// position as the base's start) and its state digest after the transactions.
pub struct Primary {
    pub load_image: Vec<u8>,
    pub base: LogBase,
    pub image: Vec<u8>,
    pub digest: StateDigest,
}

/// The seeds' primary, built once.
pub fn primary() -> &'static Primary {
    static PRIMARY: OnceLock<Primary> = OnceLock::new();
    PRIMARY.get_or_init(|| {
        let medium = Medium::Memory(MemoryMedium::new());
        let mut f = FullStack::load_scaled_on(medium, 1..=1, LOAD_SEED, SCALE, 0, true, &mut |_| {})
            .expect("the primary loads");
        let load_image = f.checkpoint_image().expect("the load's checkpoint image");
        // One transaction a batch: the log base with the checkpoint image must fit -max_len.
        let inputs = crate::redo::tpcc_inputs(LOAD_SEED ^ 99, SEED_SEQ as usize, SCALE);
        for pair in inputs.chunks(1) {
            let txns: Vec<BatchTxn> =
                pair.iter().map(|(ts, input)| BatchTxn::whole(Timestamp(1_000 + ts), *input)).collect();
            f.execute(&txns);
            f.take_log().expect("the shipped log, taken between batches as a primary does");
        }
        let records = f.log_base().expect("the primary's log base");
        let image = f.checkpoint_image().expect("the checkpoint image");
        let digest = StateDigest::from(engine::digest::digest(f.session()));
        Primary {
            load_image,
            base: LogBase { seq: SEED_SEQ, fork_lsn: None, records: Arc::new(records) },
            image,
            digest,
        }
    })
}

/// The property check; see the module documentation.
pub fn check(data: &[u8]) {
    let Some((&flags, mut rest)) = data.split_first() else { return };
    let asked = flags & IMAGE != 0;
    let mut receiver = LogBaseReceiver::new(PARTITION, PEER.to_string(), AFTER_SEQ, asked);
    let mut pieces: Vec<LogBaseChunk> = Vec::new();
    loop {
        let Ok((reply, used)) = codec::decode::<PeerReply>(rest, FRAME_BYTES_MAX) else { return };
        assert!(used > 0 && used <= rest.len(), "the codec consumed {used} of {} bytes", rest.len());
        rest = &rest[used..];
        let PeerReply::LogBaseChunk(piece) = reply else { continue };
        if piece.request_id != REQUEST_ID {
            continue;
        }
        let kept = LogBaseChunk { records: Vec::new(), ..piece.clone() };
        let bytes = piece.records.clone();
        match receiver.accept(piece) {
            Err(e) => return refused(e),
            Ok(None) => {
                assert!(!kept.last, "the last piece yields the base");
                pieces.push(LogBaseChunk { records: bytes, ..kept });
            }
            Ok(Some(base)) => {
                pieces.push(LogBaseChunk { records: bytes, ..kept });
                yielded(&base, &pieces, asked);
                return install(&base);
            }
        }
    }
}

/// A refusal must be typed and name this transfer.
fn refused(e: TransferError) {
    match e {
        TransferError::Snapshot { partition, peer, .. } => {
            assert_eq!((partition, peer.as_str()), (PARTITION, PEER), "a refusal names the transfer")
        }
        TransferError::Refused { peer, reason } => {
            assert_eq!(peer, PEER);
            assert!(reason.len() <= REASON_BYTES_MAX, "a reason of {} bytes", reason.len());
        }
        other => panic!("a log base refused with an untyped error: {other}"),
    }
}

/// A base yielded is what the accepted pieces carried.
fn yielded(base: &LogBaseReceived, pieces: &[LogBaseChunk], asked: bool) {
    let last = pieces.last().expect("a base comes with a piece");
    assert!(last.last, "a base is yielded by the piece marked last");
    for (i, p) in pieces.iter().enumerate() {
        assert_eq!((p.index as usize, p.partition), (i, PARTITION), "pieces in order, of the partition");
        assert_eq!((p.seq, p.fork_lsn, p.checkpoint_bytes), (base.seq, base.fork_lsn, last.checkpoint_bytes));
        assert!(p.refused.is_none());
    }
    assert!(base.seq >= AFTER_SEQ, "a base as of batch {} yielded for batch {AFTER_SEQ}", base.seq);
    assert_eq!(base.checkpoint.is_some(), asked, "an image if and only if asked for");
    let image = base.checkpoint.as_deref().unwrap_or_default();
    assert_eq!(image.len() as u64, last.checkpoint_bytes, "the image is as long as announced");
    let sent: Vec<u8> = pieces.iter().flat_map(|p| p.records.iter().copied()).collect();
    assert_eq!([image, &base.records[..]].concat(), sent, "image and records are the pieces' concatenation");
}

/// Installs `base` on a fresh in-memory medium as a rejoining backup does: refused, or a
/// database that reads whole.
fn install(base: &LogBaseReceived) {
    let Ok(restart) = node::machine::base_restart(base) else { return };
    let medium = MemoryMedium::new();
    if let Restart::FollowBase { .. } = restart {
        // The backup's own medium: the load checkpoint every replica starts from.
        install_image_on(&Medium::Memory(medium.clone()), &primary().load_image).expect("the load image installs");
    }
    let Ok((mut f, _cut)) = FullStack::restart_on(Medium::Memory(medium), 0, &restart) else { return };
    if f.apply_log(&base.records).is_err() {
        return;
    }
    let _ = engine::digest::digest(f.session());
    let _ = engine::check::check(f.session());
}

/// The seed corpus; see the module documentation.
pub fn seeds() -> Vec<Vec<u8>> {
    let p = primary();
    let encode = |flags: u8, pieces: Vec<LogBaseChunk>| {
        let mut out = vec![flags];
        for piece in pieces {
            codec::encode_into(&PeerReply::LogBaseChunk(piece), &mut out, FRAME_BYTES_MAX).expect("a piece fits");
        }
        out
    };
    let log = node::snapshot::log_base_pieces(&p.base, None, REQUEST_ID, PARTITION, SEED_PIECE_BYTES / 4);
    let with_image = node::snapshot::log_base_pieces(&p.base, Some(&p.image), REQUEST_ID, PARTITION, SEED_PIECE_BYTES);
    let refusal = vec![node::snapshot::log_base_refusal(REQUEST_ID, PARTITION, "a backup has no log base")];
    vec![encode(0, log), encode(IMAGE, with_image), encode(0, refusal)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use node::error::SnapshotProblem;

    fn pieces_of(seed: &[u8]) -> Vec<LogBaseChunk> {
        let piece = |r| match r {
            PeerReply::LogBaseChunk(c) => c,
            other => panic!("a seed holds pieces only, not {other:?}"),
        };
        crate::peer_input::replies(&seed[1..]).map(piece).collect()
    }

    fn encode(flags: u8, pieces: &[LogBaseChunk]) -> Vec<u8> {
        crate::peer_input::encode(flags, pieces.iter().cloned().map(PeerReply::LogBaseChunk))
    }

    fn receive(asked: bool, pieces: &[LogBaseChunk]) -> Result<Option<LogBaseReceived>, TransferError> {
        let mut r = LogBaseReceiver::new(PARTITION, PEER.to_string(), AFTER_SEQ, asked);
        for c in pieces {
            if let Some(b) = r.accept(c.clone())? {
                return Ok(Some(b));
            }
        }
        Ok(None)
    }

    fn problem(outcome: Result<Option<LogBaseReceived>, TransferError>) -> SnapshotProblem {
        match outcome {
            Err(TransferError::Snapshot { problem, .. }) => problem,
            other => panic!("not a broken log base: {other:?}"),
        }
    }

    /// The unmodified seeds install a backup holding the primary's state, consistent.
    #[test]
    fn seeds_fit_and_install_the_primarys_state() {
        let seeds = seeds();
        let max_len = crate::target("log_base_install").unwrap().max_len;
        let p = primary();
        assert!(!p.base.records.is_empty(), "the primary logged its transactions");
        for (i, seed) in seeds.iter().enumerate().take(2) {
            assert!(seed.len() <= max_len, "a seed of {} bytes", seed.len());
            let pieces = pieces_of(seed);
            assert!(pieces.len() > 1, "seed {i} in several pieces");
            let base = receive(seed[0] & IMAGE != 0, &pieces).unwrap().expect("a whole base");
            let restart = node::machine::base_restart(&base).expect("a real base");
            let medium = MemoryMedium::new();
            if let Restart::FollowBase { .. } = restart {
                install_image_on(&Medium::Memory(medium.clone()), &p.load_image).unwrap();
            }
            let (mut f, _) = FullStack::restart_on(Medium::Memory(medium), 0, &restart).expect("it restarts");
            f.apply_log(&base.records).expect("the log applies");
            assert_eq!(StateDigest::from(engine::digest::digest(f.session())), p.digest, "seed {i}");
            assert!(engine::check::check(f.session()).all_passed(), "seed {i}");
        }
        for seed in &seeds {
            check(seed);
        }
    }

    #[test]
    fn adversarial_bases_are_refused() {
        let seeds = seeds();
        let log = pieces_of(&seeds[0]);
        let image = pieces_of(&seeds[1]);
        let n = log.len();
        // Truncated: nothing yielded.
        assert!(matches!(receive(false, &log[..n - 1]), Ok(None)));
        // Out of order, repeated, another partition.
        let mut swapped = log.clone();
        swapped.swap(0, 1);
        assert!(matches!(problem(receive(false, &swapped)), SnapshotProblem::PieceGap { .. }));
        let mut repeated = log.clone();
        repeated.insert(1, log[0].clone());
        assert!(matches!(problem(receive(false, &repeated)), SnapshotProblem::PieceGap { .. }));
        let mut other = log.clone();
        other[1].partition = 9;
        assert!(matches!(problem(receive(false, &other)), SnapshotProblem::PieceGap { .. }));
        // A changed batch midway, a stale batch, an image unasked.
        let mut changed = log.clone();
        changed[1].seq += 1;
        assert_eq!(problem(receive(false, &changed)), SnapshotProblem::PieceChanged { index: 1 });
        let mut stale = log.clone();
        stale.iter_mut().for_each(|p| p.seq = AFTER_SEQ - 1);
        assert!(matches!(problem(receive(false, &stale)), SnapshotProblem::StaleBase { .. }));
        assert!(matches!(problem(receive(false, &image)), SnapshotProblem::ImageUnasked { .. }));
        // A huge claimed image.
        let mut huge = image.clone();
        huge.iter_mut().for_each(|p| p.checkpoint_bytes = u64::MAX);
        assert!(matches!(problem(receive(true, &huge)), SnapshotProblem::ImageTruncated { .. }));
        // A flipped byte in a record, in the image: yielded, refused at installation.
        let mut flipped = log.clone();
        flipped[0].records[40] ^= 1;
        let mut flipped_image = image.clone();
        flipped_image[0].records[100] ^= 1;
        for (flags, pieces) in [
            (0, &swapped),
            (0, &repeated),
            (0, &other),
            (0, &changed),
            (0, &stale),
            (0, &image),
            (IMAGE, &huge),
            (0, &flipped),
            (IMAGE, &flipped_image),
            (IMAGE, &log),
        ] {
            check(&encode(flags, pieces));
        }
        check(&[]);
        check(&[1]);
        check(&[0, 0xff, 0xff, 0xff, 0xff]);
    }

    /// A tiny mutational fuzzer over the seeds (deterministic).
    #[test]
    fn mutated_seeds_hold_the_property() {
        let seeds = seeds();
        let mut rng = engine::rng::Rng::stream(12, 0);
        for i in 0..100 {
            let mut s = seeds[i % seeds.len()].clone();
            for _ in 0..=rng.uniform(0, 2) {
                let at = rng.uniform(1, s.len() as u64 - 1) as usize;
                match rng.uniform(0, 3) {
                    0 => s[at] ^= 1 << rng.uniform(0, 7),
                    1 => s[at] = rng.uniform(0, 255) as u8,
                    2 => s.truncate(at.max(2)),
                    _ => s[0] ^= IMAGE,
                }
            }
            check(&s);
        }
    }
}
