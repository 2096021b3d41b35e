//! The frame targets, one per channel (`frame_handshake`, `frame_client`, `frame_control`,
//! `frame_group`, `frame_peer`, `frame_tool`): bytes a peer sends on a connection, decoded as
//! that channel's messages (docs/design.md §13).
//!
//! Input: `selector | piece | stream`. `selector` picks the direction (the channel's enum the
//! receiver decodes); `piece` the size of the pieces the stream arrives in (`piece % 64 + 1`
//! bytes, `0` for all at once); `stream` is the bytes a peer sent.
//!
//! Properties, for every input:
//! - decoding never panics and every failure is a [`CodecError`] (the type guarantees the
//!   second; the first is what is fuzzed);
//! - a frame that decodes re-encodes to exactly the bytes it was decoded from: no two byte
//!   strings mean the same message, so nothing a peer sends can slip past a check made on the
//!   encoding (a digest, a length bound) and mean something else once decoded;
//! - [`CodecError::Incomplete`] only when the stream really ends inside a frame;
//! - the stream decoder ([`FrameDecoder`]), fed the bytes in pieces, yields exactly the
//!   messages and the error that decoding the whole stream at once does, and never buffers
//!   more than one frame and one piece.
//!
//! Memory: the frame limit is the configuration's default (4 MiB); libFuzzer's
//! `-rss_limit_mb`/`-malloc_limit_mb` (the target's [`crate::Target::rss_limit_mb`]) catches a
//! decode allocating past what its frame holds.

use wire::channel::{
    ChannelMessage, ClientToCoordinator, CoordinatorToClient, CoordinatorToCoordinator, CoordinatorToNode,
    FromCoordinator, Handshake, NodeToCoordinator, PeerReply, PeerRequest, ToolReply, ToolRequest,
};
use wire::codec::{self, FrameDecoder, FRAME_BYTES_MAX_DEFAULT};
use wire::endpoint::HELLO_FRAME_BYTES_MAX;
use wire::error::CodecError;
use wire::samples;

/// Largest piece size the stream is cut into.
const PIECE_BYTES_MAX: usize = 64;

/// The messages decoding `stream` at once yields, and how it stopped (`None`: at the end,
/// between frames).
fn decode_all<M: ChannelMessage + PartialEq>(stream: &[u8], frame_max: usize) -> (Vec<M>, Option<CodecError>) {
    let mut at = 0;
    let mut msgs = Vec::new();
    while at < stream.len() {
        match codec::decode::<M>(&stream[at..], frame_max) {
            Ok((msg, used)) => {
                assert!(used > 0 && at + used <= stream.len(), "{}: frame of {used} bytes at {at}", M::CHANNEL);
                let again = codec::encode(&msg, frame_max)
                    .unwrap_or_else(|e| panic!("{}: a decoded {} does not re-encode: {e}", M::CHANNEL, msg.name()));
                assert_eq!(
                    again,
                    &stream[at..at + used],
                    "{}: a decoded {} re-encodes to other bytes",
                    M::CHANNEL,
                    msg.name()
                );
                msgs.push(msg);
                at += used;
            }
            Err(e) => {
                if let CodecError::Incomplete { have_bytes, needed_bytes } = e {
                    assert_eq!(have_bytes, stream.len() - at, "{}: Incomplete inside the stream", M::CHANNEL);
                    assert!(needed_bytes > have_bytes && needed_bytes <= frame_max, "{}: {e}", M::CHANNEL);
                }
                return (msgs, Some(e));
            }
        }
    }
    (msgs, None)
}

/// The property for one direction of one channel (see the module documentation).
fn stream_of<M: ChannelMessage + PartialEq>(piece: u8, stream: &[u8], frame_max: usize) {
    let (whole, stop) = decode_all::<M>(stream, frame_max);
    let piece = if piece == 0 { stream.len().max(1) } else { usize::from(piece) % PIECE_BYTES_MAX + 1 };
    let mut dec = FrameDecoder::new(frame_max);
    let mut got = Vec::new();
    let mut failed = None;
    'pieces: for chunk in stream.chunks(piece) {
        dec.push(chunk);
        assert!(
            dec.buffered_bytes() <= frame_max + piece,
            "{}: the stream decoder holds {} bytes",
            M::CHANNEL,
            dec.buffered_bytes()
        );
        loop {
            match dec.next_message::<M>() {
                Ok(Some(m)) => got.push(m),
                Ok(None) => break,
                Err(e) => {
                    failed = Some(e);
                    break 'pieces;
                }
            }
        }
    }
    assert_eq!(got, whole, "{}: the stream decoder and the one-shot decoder disagree", M::CHANNEL);
    match (&stop, &failed) {
        (None, None) => assert_eq!(dec.buffered_bytes(), 0),
        (Some(CodecError::Incomplete { have_bytes, .. }), None) => assert_eq!(dec.buffered_bytes(), *have_bytes),
        (Some(a), Some(b)) => assert_eq!(a, b, "{}: the two decoders stop on different errors", M::CHANNEL),
        (a, b) => panic!("{}: one-shot stopped on {a:?}, the stream decoder on {b:?}", M::CHANNEL),
    }
}

/// Splits an input into its selector, piece size and stream.
fn parts(data: &[u8]) -> Option<(u8, u8, &[u8])> {
    match data {
        [selector, piece, stream @ ..] => Some((*selector, *piece, stream)),
        _ => None,
    }
}

/// An input: `selector`, whole-stream delivery, the frames of `msgs`.
fn seed<M: ChannelMessage>(selector: u8, msgs: &[M], frame_max: usize) -> Vec<u8> {
    let mut out = vec![selector, 0];
    for m in msgs {
        codec::encode_into(m, &mut out, frame_max).expect("samples encode");
    }
    out
}

/// One seed per sample message and one with all of them in a row.
fn seeds_of<M: ChannelMessage>(selector: u8, msgs: &[M], frame_max: usize) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = msgs.iter().map(|m| seed(selector, std::slice::from_ref(m), frame_max)).collect();
    let mut all = seed(selector, msgs, frame_max);
    all[1] = 7; // in pieces of 8 bytes
    out.push(all);
    out
}

/// `frame_handshake`: the first frame of a connection, limited to [`HELLO_FRAME_BYTES_MAX`]
/// (both directions share the enum).
pub fn handshake(data: &[u8]) {
    if let Some((_, piece, stream)) = parts(data) {
        stream_of::<Handshake>(piece, stream, HELLO_FRAME_BYTES_MAX);
    }
}

pub fn handshake_seeds() -> Vec<Vec<u8>> {
    seeds_of(0, &samples::handshakes(), HELLO_FRAME_BYTES_MAX)
}

/// `frame_client`: even selector, client → coordinator; odd, coordinator → client.
pub fn client(data: &[u8]) {
    if let Some((selector, piece, stream)) = parts(data) {
        match selector % 2 {
            0 => stream_of::<ClientToCoordinator>(piece, stream, FRAME_BYTES_MAX_DEFAULT),
            _ => stream_of::<CoordinatorToClient>(piece, stream, FRAME_BYTES_MAX_DEFAULT),
        }
    }
}

pub fn client_seeds() -> Vec<Vec<u8>> {
    let mut out = seeds_of(0, &samples::client_requests(), FRAME_BYTES_MAX_DEFAULT);
    out.extend(seeds_of(1, &samples::client_replies(), FRAME_BYTES_MAX_DEFAULT));
    out
}

/// `frame_control`: selector % 3 = 0, node → coordinator; 1, coordinator → node as it
/// travels (epoched); 2, a coordinator → node message on its own.
pub fn control(data: &[u8]) {
    if let Some((selector, piece, stream)) = parts(data) {
        match selector % 3 {
            0 => stream_of::<NodeToCoordinator>(piece, stream, FRAME_BYTES_MAX_DEFAULT),
            1 => stream_of::<FromCoordinator>(piece, stream, FRAME_BYTES_MAX_DEFAULT),
            _ => stream_of::<CoordinatorToNode>(piece, stream, FRAME_BYTES_MAX_DEFAULT),
        }
    }
}

pub fn control_seeds() -> Vec<Vec<u8>> {
    let epoched: Vec<FromCoordinator> = samples::to_nodes()
        .into_iter()
        .enumerate()
        .map(|(i, msg)| FromCoordinator::Epoched(wire::channel::Epoched { epoch: i as u64, msg }))
        .collect();
    let mut out = seeds_of(0, &samples::from_nodes(), FRAME_BYTES_MAX_DEFAULT);
    out.extend(seeds_of(1, &epoched, FRAME_BYTES_MAX_DEFAULT));
    out.extend(seeds_of(2, &samples::to_nodes(), FRAME_BYTES_MAX_DEFAULT));
    out
}

/// `frame_group`: coordinator ↔ coordinator (raft messages, opaque here).
pub fn group(data: &[u8]) {
    if let Some((_, piece, stream)) = parts(data) {
        stream_of::<CoordinatorToCoordinator>(piece, stream, FRAME_BYTES_MAX_DEFAULT);
    }
}

pub fn group_seeds() -> Vec<Vec<u8>> {
    seeds_of(
        0,
        &[CoordinatorToCoordinator::Raft(vec![1, 2, 3]), CoordinatorToCoordinator::Raft(Vec::new())],
        FRAME_BYTES_MAX_DEFAULT,
    )
}

/// `frame_peer`: even selector, the dialling node's requests; odd, the replies.
pub fn peer(data: &[u8]) {
    if let Some((selector, piece, stream)) = parts(data) {
        match selector % 2 {
            0 => stream_of::<PeerRequest>(piece, stream, FRAME_BYTES_MAX_DEFAULT),
            _ => stream_of::<PeerReply>(piece, stream, FRAME_BYTES_MAX_DEFAULT),
        }
    }
}

pub fn peer_seeds() -> Vec<Vec<u8>> {
    let mut out = seeds_of(0, &samples::peer_requests(), FRAME_BYTES_MAX_DEFAULT);
    out.extend(seeds_of(1, &samples::peer_replies(), FRAME_BYTES_MAX_DEFAULT));
    out
}

/// `frame_tool`: even selector, a tool's requests; odd, the node's replies.
pub fn tool(data: &[u8]) {
    if let Some((selector, piece, stream)) = parts(data) {
        match selector % 2 {
            0 => stream_of::<ToolRequest>(piece, stream, FRAME_BYTES_MAX_DEFAULT),
            _ => stream_of::<ToolReply>(piece, stream, FRAME_BYTES_MAX_DEFAULT),
        }
    }
}

pub fn tool_seeds() -> Vec<Vec<u8>> {
    let mut out = seeds_of(0, &samples::tool_requests(), FRAME_BYTES_MAX_DEFAULT);
    out.extend(seeds_of(1, &samples::tool_replies(), FRAME_BYTES_MAX_DEFAULT));
    out
}

/// The selector byte of a recorded frame of channel direction `channel` (a
/// [`ChannelMessage::CHANNEL`]) in its target, and the target's name: how `fuzz-seeds
/// --traffic` files frames recorded from a real cluster (`GLASS_RECORD_FRAMES`).
pub fn target_of_channel(channel: &str) -> Option<(&'static str, u8)> {
    let pairs: [(&str, &str, u8); 10] = [
        (Handshake::CHANNEL, "frame_handshake", 0),
        (ClientToCoordinator::CHANNEL, "frame_client", 0),
        (CoordinatorToClient::CHANNEL, "frame_client", 1),
        (NodeToCoordinator::CHANNEL, "frame_control", 0),
        (FromCoordinator::CHANNEL, "frame_control", 1),
        (CoordinatorToCoordinator::CHANNEL, "frame_group", 0),
        (PeerRequest::CHANNEL, "frame_peer", 0),
        (PeerReply::CHANNEL, "frame_peer", 1),
        (ToolRequest::CHANNEL, "frame_tool", 0),
        (ToolReply::CHANNEL, "frame_tool", 1),
    ];
    pairs.iter().find(|(c, _, _)| *c == channel).map(|(_, t, s)| (*t, *s))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes the codec's own tests found refused are refused here too, and the property
    /// holds over every cut and piece size of the seeds.
    #[test]
    fn seeds_hold_at_every_cut_and_piece_size() {
        for seed in control_seeds().iter().chain(&peer_seeds()) {
            for cut in (2..seed.len()).step_by(7) {
                for piece in [0, 1, 5, 63] {
                    let mut input = seed[..cut].to_vec();
                    input[1] = piece;
                    control(&input);
                    peer(&input);
                }
            }
        }
    }

    /// A flipped byte anywhere in a frame is refused or decodes to a message that re-encodes
    /// to the flipped bytes (the property, over every position of every sample).
    #[test]
    fn a_flipped_byte_anywhere_keeps_the_property() {
        for seed in client_seeds().iter().chain(&tool_seeds()).chain(&handshake_seeds()) {
            for at in 2..seed.len() {
                for flip in [0x01, 0x80, 0xff] {
                    let mut input = seed.clone();
                    input[at] ^= flip;
                    client(&input);
                    tool(&input);
                    handshake(&input);
                }
            }
        }
    }
}
