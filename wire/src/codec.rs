//! Framing of channel messages ([`ChannelMessage`]: one enum per direction of each channel,
//! [`crate::channel`]): bincode (2.x, serde, little-endian fixed-width integers) behind a
//! length prefix and a version byte. Fixed-width integers decode in about two thirds of the
//! time varints take (`examples/codec_cost.rs`) for about a fifth more bytes; a NewOrder's
//! order lines travel packed (`engine::procedures::packed_lines`).
//!
//! ```text
//! frame := length: u32 little-endian | version: u8 | body: bincode(M)
//!          `length` counts the version byte and the body (so it is at least 1);
//! body   := tag: u32 little-endian (the variant's index in M) | the variant's fields
//!          the whole frame, the 4 length bytes included, is at most `frame_bytes_max`.
//! ```
//!
//! Guarantees: decoding never panics and never allocates more than the frame it was given
//! (bincode's decode limit is the frame's length); a partial frame is
//! [`CodecError::Incomplete`] (read more), an oversized one is [`CodecError::TooLarge`] as soon
//! as its 4-byte prefix is seen (close the connection without reading the body); a foreign
//! version ([`CodecError::Version`]), a tag naming no variant of the channel's enum
//! ([`CodecError::UnknownTag`], checked before the fields are decoded), a malformed body or
//! bytes left over inside a frame are errors, never a message.
//! Encoding refuses to produce a frame over the limit.

use crate::channel::ChannelMessage;
use crate::error::CodecError;
use crate::messages::PROTOCOL_VERSION;

/// Bytes of the length prefix.
pub const LENGTH_PREFIX_BYTES: usize = 4;
/// Bytes before the body: the length prefix and the version byte.
pub const FRAME_HEADER_BYTES: usize = LENGTH_PREFIX_BYTES + 1;
/// Bytes of a body's variant tag (a `u32`: integers are fixed-width).
pub const TAG_BYTES: usize = 4;
/// Default for `limits.frame_bytes_max` in `cluster.toml`: 4 MiB.
pub const FRAME_BYTES_MAX_DEFAULT: usize = 4 << 20;
/// The largest frame any configuration may allow: 256 MiB.
pub const FRAME_BYTES_MAX_CEILING: usize = 256 << 20;

/// bincode's decode limit: no single decode may claim more than the ceiling.
type Config = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Fixint,
    bincode::config::Limit<FRAME_BYTES_MAX_CEILING>,
>;

fn config() -> Config {
    bincode::config::standard().with_fixed_int_encoding().with_limit::<FRAME_BYTES_MAX_CEILING>()
}

/// Appends `msg` as one frame to `out` and returns the frame's length in bytes. On error `out`
/// is left as it was.
pub fn encode_into<M: ChannelMessage>(msg: &M, out: &mut Vec<u8>, frame_bytes_max: usize) -> Result<usize, CodecError> {
    let start = out.len();
    out.extend_from_slice(&[0; LENGTH_PREFIX_BYTES]);
    out.push(PROTOCOL_VERSION);
    if let Err(e) = bincode::serde::encode_into_std_write(msg, out, config()) {
        out.truncate(start);
        return Err(CodecError::Encode(e.to_string()));
    }
    let frame_bytes = out.len() - start;
    if frame_bytes > frame_bytes_max.min(FRAME_BYTES_MAX_CEILING) {
        out.truncate(start);
        return Err(CodecError::TooLarge { frame_bytes: frame_bytes as u64, frame_bytes_max });
    }
    let length = (frame_bytes - LENGTH_PREFIX_BYTES) as u32;
    out[start..start + LENGTH_PREFIX_BYTES].copy_from_slice(&length.to_le_bytes());
    Ok(frame_bytes)
}

/// `msg` as one frame.
pub fn encode<M: ChannelMessage>(msg: &M, frame_bytes_max: usize) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    encode_into(msg, &mut out, frame_bytes_max)?;
    Ok(out)
}

/// The whole frame's length (prefix included) announced by a 4-byte length prefix, checked
/// against the limit: what a stream reader calls before reading the rest of a frame.
pub fn frame_len(prefix: [u8; LENGTH_PREFIX_BYTES], frame_bytes_max: usize) -> Result<usize, CodecError> {
    let length = u32::from_le_bytes(prefix) as u64;
    if length == 0 {
        return Err(CodecError::Empty);
    }
    let frame_bytes = length + LENGTH_PREFIX_BYTES as u64;
    if frame_bytes > frame_bytes_max.min(FRAME_BYTES_MAX_CEILING) as u64 {
        return Err(CodecError::TooLarge { frame_bytes, frame_bytes_max });
    }
    Ok(frame_bytes as usize)
}

/// Decodes a frame's body as a message of `M`'s channel: the version byte, the variant tag
/// (checked against `M`'s variants before anything else is decoded) and the bincode
/// encoding, nothing else.
pub fn decode_body<M: ChannelMessage>(body: &[u8]) -> Result<M, CodecError> {
    let (&version, payload) = body.split_first().ok_or(CodecError::Empty)?;
    if version != PROTOCOL_VERSION {
        return Err(CodecError::Version { got: version, expected: PROTOCOL_VERSION });
    }
    if let Some(tag) = payload.first_chunk::<TAG_BYTES>().map(|t| u32::from_le_bytes(*t)) {
        if tag >= M::VARIANTS {
            return Err(CodecError::UnknownTag { channel: M::CHANNEL, tag });
        }
    }
    let (msg, used) = bincode::serde::decode_from_slice::<M, _>(payload, config())
        .map_err(|e| CodecError::Malformed(e.to_string()))?;
    if used != payload.len() {
        return Err(CodecError::TrailingBytes { extra_bytes: payload.len() - used });
    }
    Ok(msg)
}

/// Decodes the frame at the start of `buf`; returns the message and the frame's length (the
/// bytes to consume). [`CodecError::Incomplete`] when `buf` holds less than a frame.
pub fn decode<M: ChannelMessage>(buf: &[u8], frame_bytes_max: usize) -> Result<(M, usize), CodecError> {
    let Some(prefix) = buf.first_chunk::<LENGTH_PREFIX_BYTES>() else {
        return Err(CodecError::Incomplete { have_bytes: buf.len(), needed_bytes: LENGTH_PREFIX_BYTES });
    };
    let frame_bytes = frame_len(*prefix, frame_bytes_max)?;
    if buf.len() < frame_bytes {
        return Err(CodecError::Incomplete { have_bytes: buf.len(), needed_bytes: frame_bytes });
    }
    let msg = decode_body(&buf[LENGTH_PREFIX_BYTES..frame_bytes])?;
    Ok((msg, frame_bytes))
}

/// Reassembles frames from a byte stream delivered in arbitrary pieces.
///
/// Holds at most one partial frame plus the last piece pushed; after an error other than
/// [`CodecError::Incomplete`] the stream is unusable (the framing is lost) and the connection
/// should be closed.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    /// Bytes of `buf` already consumed.
    start: usize,
    frame_bytes_max: usize,
}

impl FrameDecoder {
    /// A decoder refusing frames over `frame_bytes_max` bytes.
    pub fn new(frame_bytes_max: usize) -> FrameDecoder {
        FrameDecoder { buf: Vec::new(), start: 0, frame_bytes_max }
    }

    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > self.frame_bytes_max {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message of `M`'s channel, `Ok(None)` when more bytes are needed.
    pub fn next_message<M: ChannelMessage>(&mut self) -> Result<Option<M>, CodecError> {
        match decode(&self.buf[self.start..], self.frame_bytes_max) {
            Ok((msg, used)) => {
                self.start += used;
                Ok(Some(msg))
            }
            Err(CodecError::Incomplete { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Bytes received and not yet decoded.
    pub fn buffered_bytes(&self) -> usize {
        self.buf.len() - self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::*;
    use crate::messages::*;
    use engine::procedures::{
        DeliveryOutput, NewOrderInput, OrderLineInput, OrderStatusOutput, TxnInput, TxnOutput, DISTRICTS_PER_WAREHOUSE,
        ORDER_LINES_MAX,
    };
    use proptest::prelude::*;

    const MAX: usize = FRAME_BYTES_MAX_DEFAULT;

    use crate::samples::*;

    /// The samples of the control channel's downstream direction (the busiest frames).
    fn samples() -> Vec<CoordinatorToNode> {
        to_nodes()
    }

    fn round_trips<M: ChannelMessage + PartialEq>(msgs: &[M]) {
        for msg in msgs {
            let frame = encode(msg, MAX).unwrap();
            assert_eq!(frame[LENGTH_PREFIX_BYTES], PROTOCOL_VERSION);
            let (back, used) = decode::<M>(&frame, MAX).unwrap();
            assert_eq!(&back, msg);
            assert_eq!(used, frame.len());
        }
    }

    /// The variant tag of a frame (the body's first 4 bytes).
    fn tag_of(frame: &[u8]) -> u32 {
        u32::from_le_bytes(*frame[FRAME_HEADER_BYTES..].first_chunk::<TAG_BYTES>().unwrap())
    }

    /// Every channel's frames: each variant round-trips, its tag is its index, the count is
    /// the enum's; a tag past the count and a frame of another version are refused with their
    /// typed errors, without panicking.
    fn channel_checks<M: ChannelMessage + PartialEq>(msgs: &[M]) {
        round_trips(msgs);
        assert_eq!(msgs.len() as u32, M::VARIANTS, "{}: one sample per variant", M::CHANNEL);
        for (i, msg) in msgs.iter().enumerate() {
            assert_eq!(tag_of(&encode(msg, MAX).unwrap()), i as u32, "{}", msg.name());
        }
        let mut unknown = encode(&msgs[0], MAX).unwrap();
        for tag in [M::VARIANTS, M::VARIANTS + 1, u32::MAX] {
            unknown[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + TAG_BYTES].copy_from_slice(&tag.to_le_bytes());
            assert_eq!(decode::<M>(&unknown, MAX).unwrap_err(), CodecError::UnknownTag { channel: M::CHANNEL, tag });
            let mut dec = FrameDecoder::new(MAX);
            dec.push(&unknown);
            assert_eq!(dec.next_message::<M>().unwrap_err(), CodecError::UnknownTag { channel: M::CHANNEL, tag });
        }
        let mut old = encode(&msgs[0], MAX).unwrap();
        old[LENGTH_PREFIX_BYTES] = PROTOCOL_VERSION - 1;
        assert_eq!(
            decode::<M>(&old, MAX).unwrap_err(),
            CodecError::Version { got: PROTOCOL_VERSION - 1, expected: PROTOCOL_VERSION }
        );
    }

    #[test]
    fn every_channel_encodes_each_variant_and_refuses_unknown_tags_and_versions() {
        channel_checks(&handshakes());
        channel_checks(&client_requests());
        channel_checks(&client_replies());
        channel_checks(&to_nodes());
        channel_checks(&from_coordinator());
        // Some variants (LoadStatus, StateDigest) have a second sample each, for their other
        // forms; `round_trips` below covers them, `channel_checks` the first of each.
        let mut nodes = from_nodes();
        nodes.dedup_by(|b, a| a.name() == b.name());
        channel_checks(&nodes);
        round_trips(&from_nodes());
        channel_checks(&peer_requests());
        channel_checks(&peer_replies());
        channel_checks(&tool_requests());
        channel_checks(&tool_replies());
        channel_checks(&[CoordinatorToCoordinator::Raft(vec![1, 2, 3])]);
    }

    /// A message of one channel arriving on another is refused, never read as one of its
    /// messages: a tag past the receiving enum's is `UnknownTag`, one within it fails to decode
    /// or is another message (the channel is chosen by who the peer is, so that takes a peer
    /// sending a foreign enum on purpose — a protocol violation the receiver closes on).
    #[test]
    fn a_foreign_channels_frame_is_refused_or_decodes_as_something_else() {
        let promoted = encode(&NodeToCoordinator::Promoted { partition: 1, applied_seq: 3, next_seq: 4 }, MAX).unwrap();
        assert_eq!(
            decode::<ClientToCoordinator>(&promoted, MAX).unwrap_err(),
            CodecError::UnknownTag { channel: ClientToCoordinator::CHANNEL, tag: 6 }
        );
        let hello = encode(&handshakes()[0], MAX).unwrap();
        assert!(decode::<PeerReply>(&hello, MAX).is_err());
    }

    /// The bound `cluster.toml` validation relies on: one batch entry and one result entry
    /// each encode in at most `TXN_ENTRY_BYTES_MAX` bytes, whatever the transaction.
    #[test]
    fn entries_fit_their_documented_bound() {
        let ts = Timestamp(u64::MAX);
        let size = |m: &CoordinatorToNode| encode(m, MAX).unwrap().len() as u64 - FRAME_HEADER_BYTES as u64;
        let rsize = |m: &NodeToCoordinator| encode(m, MAX).unwrap().len() as u64 - FRAME_HEADER_BYTES as u64;
        let one_txn = |input| {
            CoordinatorToNode::Batch(Batch {
                partition: u16::MAX,
                seq: u64::MAX,
                txns: vec![BatchTxn {
                    id: RequestId { client: u64::MAX, seq: u64::MAX },
                    ..BatchTxn::whole(ts, input)
                }],
                digest_after: true,
                answerer: Some(u16::MAX),
            })
        };
        let empty = size(&CoordinatorToNode::Batch(Batch {
            partition: u16::MAX,
            seq: u64::MAX,
            txns: vec![],
            digest_after: true,
            answerer: Some(u16::MAX),
        }));
        assert!(empty <= BATCH_OVERHEAD_BYTES_MAX);
        for input in [worst_new_order(), payment()] {
            assert!(size(&one_txn(input)) - empty <= TXN_ENTRY_BYTES_MAX);
        }
        let outcomes = [
            TxnOutcome::Aborted { reason: bounded_reason("x".repeat(1000)) },
            TxnOutcome::Failed { reason: bounded_reason("y".repeat(1000)) },
            TxnOutcome::Committed(TxnOutput::Delivery(DeliveryOutput {
                delivered: [u32::MAX; DISTRICTS_PER_WAREHOUSE as usize],
            })),
            TxnOutcome::Committed(TxnOutput::OrderStatus(OrderStatusOutput {
                c_id: u32::MAX,
                c_balance: i64::MIN,
                last_order: Some((u32::MAX, u8::MAX, u8::MAX, i64::MIN)),
            })),
        ];
        let results = |results| NodeToCoordinator::Results(Results { partition: u16::MAX, seq: u64::MAX, results });
        let empty = rsize(&results(vec![]));
        assert!(empty <= BATCH_OVERHEAD_BYTES_MAX);
        for outcome in outcomes {
            let r = TxnResult { ts, outcome, digest: u64::MAX };
            assert!(rsize(&results(vec![r])) - empty <= TXN_ENTRY_BYTES_MAX);
        }
    }

    /// A NewOrder's lines travel packed (`engine::procedures::packed_lines`): every array
    /// round-trips, a default line inside the used ones included, and a packed string that is
    /// not a whole number of lines, or holds more than 15, is refused.
    #[test]
    fn packed_order_lines_round_trip_and_refuse_bad_lengths() {
        let mut lines = [OrderLineInput::default(); ORDER_LINES_MAX];
        lines[0] = OrderLineInput { i_id: 7, supply_w_id: 2, quantity: 5 };
        lines[2] = OrderLineInput { i_id: u32::MAX, supply_w_id: u16::MAX, quantity: 10 };
        for ol_cnt in [0, 3, ORDER_LINES_MAX as u8, u8::MAX] {
            let input = TxnInput::NewOrder(NewOrderInput { w_id: 1, d_id: 1, c_id: 1, ol_cnt, lines, entry_d: 9 });
            let msg = ToolRequest::ReplicaRead { request_id: 1, partition: 1, input };
            assert_eq!(decode::<ToolRequest>(&encode(&msg, MAX).unwrap(), MAX).unwrap().0, msg);
        }
        let json = serde_json::to_string(&NewOrderInput { w_id: 1, d_id: 1, c_id: 1, ol_cnt: 3, lines, entry_d: 9 });
        let back: NewOrderInput = serde_json::from_str(&json.unwrap()).unwrap();
        assert_eq!(back.lines, lines);
        // The packed string of a 3-line order with one byte cut off, then with a 16th line.
        let msg = ToolRequest::ReplicaRead {
            request_id: 1,
            partition: 1,
            input: TxnInput::NewOrder(NewOrderInput { w_id: 1, d_id: 1, c_id: 1, ol_cnt: 3, lines, entry_d: 9 }),
        };
        let frame = encode(&msg, MAX).unwrap();
        // The string is its length (u64, fixed-width integers) and 21 bytes from line 0 on.
        let first_line = [7, 0, 0, 0, 2, 0, 5];
        let body = frame.windows(7).position(|w| w == first_line).expect("the packed lines");
        let len_at = body - 8;
        assert_eq!(frame[len_at..body], 21u64.to_le_bytes());
        let reframe = |len: u64, packed: &[u8]| {
            let mut f = frame[..len_at].to_vec();
            f.extend_from_slice(&len.to_le_bytes());
            f.extend_from_slice(packed);
            f.extend_from_slice(&frame[body + 21..]);
            let n = (f.len() - LENGTH_PREFIX_BYTES) as u32;
            f[..LENGTH_PREFIX_BYTES].copy_from_slice(&n.to_le_bytes());
            f
        };
        assert_eq!(decode::<ToolRequest>(&reframe(21, &frame[body..body + 21]), MAX).unwrap().0, msg);
        for bad in [reframe(20, &frame[body..body + 20]), reframe(16 * 7, &[1; 16 * 7])] {
            let decoded = decode::<ToolRequest>(&bad, MAX);
            assert!(matches!(decoded, Err(CodecError::Malformed(_))), "{decoded:?}");
        }
    }

    #[test]
    fn partial_frames_are_incomplete_at_every_cut() {
        let frame = encode(&samples()[0], MAX).unwrap();
        for cut in 0..frame.len() {
            match decode::<CoordinatorToNode>(&frame[..cut], MAX) {
                Err(CodecError::Incomplete { have_bytes, needed_bytes }) => {
                    assert_eq!(have_bytes, cut);
                    assert!(needed_bytes > cut);
                }
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
    }

    #[test]
    fn oversized_frames_are_refused_from_the_prefix_alone() {
        let prefix = (MAX as u32).to_le_bytes();
        assert!(matches!(decode::<Handshake>(&prefix, MAX), Err(CodecError::TooLarge { .. })));
        assert!(matches!(frame_len(prefix, MAX), Err(CodecError::TooLarge { .. })));
        assert!(matches!(frame_len(u32::MAX.to_le_bytes(), usize::MAX), Err(CodecError::TooLarge { .. })));
        // And encoding refuses to build one, leaving the buffer untouched.
        let big = Handshake::HelloRefused { reason: "z".repeat(1000) };
        let mut out = vec![1, 2, 3];
        assert!(matches!(encode_into(&big, &mut out, 100), Err(CodecError::TooLarge { .. })));
        assert_eq!(out, vec![1, 2, 3]);
    }

    #[test]
    fn wrong_version_empty_trailing_and_garbage_are_errors() {
        let mut frame = encode(&CoordinatorToNode::Heartbeat { now_ms: 5 }, MAX).unwrap();
        frame[LENGTH_PREFIX_BYTES] = PROTOCOL_VERSION + 1;
        assert_eq!(
            decode::<CoordinatorToNode>(&frame, MAX).unwrap_err(),
            CodecError::Version { got: PROTOCOL_VERSION + 1, expected: PROTOCOL_VERSION }
        );

        assert_eq!(decode::<CoordinatorToNode>(&[0, 0, 0, 0], MAX).unwrap_err(), CodecError::Empty);

        let mut frame = encode(&CoordinatorToNode::Heartbeat { now_ms: 5 }, MAX).unwrap();
        frame.push(0);
        let length = (frame.len() - LENGTH_PREFIX_BYTES) as u32;
        frame[..4].copy_from_slice(&length.to_le_bytes());
        assert_eq!(decode::<CoordinatorToNode>(&frame, MAX).unwrap_err(), CodecError::TrailingBytes { extra_bytes: 1 });

        // An unknown variant index (a u32: integers are fixed-width).
        let garbage = [5, 0, 0, 0, PROTOCOL_VERSION, 200, 0, 0, 0];
        assert_eq!(
            decode::<CoordinatorToNode>(&garbage, MAX).unwrap_err(),
            CodecError::UnknownTag { channel: "coordinator → node", tag: 200 }
        );
        // A tag cut short.
        let short = [3, 0, 0, 0, PROTOCOL_VERSION, 0, 0];
        assert!(matches!(decode::<CoordinatorToNode>(&short, MAX), Err(CodecError::Malformed(_))));
        // A vector claiming 2^60 elements in a tiny frame.
        let mut lie = vec![0, 0, 0, 0, PROTOCOL_VERSION, 0, 0, 0, 0]; // ClientRequests
        lie.extend_from_slice(&(1u64 << 60).to_le_bytes());
        let length = (lie.len() - LENGTH_PREFIX_BYTES) as u32;
        lie[..4].copy_from_slice(&length.to_le_bytes());
        assert!(matches!(decode::<ClientToCoordinator>(&lie, MAX), Err(CodecError::Malformed(_))));
    }

    #[test]
    fn the_stream_decoder_reassembles_frames_split_anywhere() {
        let msgs = samples();
        let mut stream = Vec::new();
        for m in &msgs {
            encode_into(m, &mut stream, MAX).unwrap();
        }
        for piece in [1, 2, 3, 7, 64, stream.len()] {
            let mut dec = FrameDecoder::new(MAX);
            let mut got = Vec::new();
            for chunk in stream.chunks(piece) {
                dec.push(chunk);
                while let Some(m) = dec.next_message::<CoordinatorToNode>().unwrap() {
                    got.push(m);
                }
            }
            assert_eq!(got, msgs, "pieces of {piece} bytes");
            assert_eq!(dec.buffered_bytes(), 0);
        }
    }

    proptest! {
        /// Arbitrary bytes never panic the decoder; whatever decodes is consistent with its
        /// prefix.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok((_, used)) = decode::<CoordinatorToNode>(&bytes, MAX) {
                prop_assert!(used <= bytes.len());
            }
            let _ = decode::<ToolRequest>(&bytes, MAX);
            let mut dec = FrameDecoder::new(MAX);
            dec.push(&bytes);
            let _ = dec.next_message::<NodeToCoordinator>();
        }

        /// Valid frames with their body bytes flipped never panic the decoder.
        #[test]
        fn corrupted_frames_never_panic(which in 0usize..12, at in any::<usize>(), to in any::<u8>()) {
            let mut frame = encode(&samples()[which], MAX).unwrap();
            let at = FRAME_HEADER_BYTES + at % (frame.len() - FRAME_HEADER_BYTES);
            frame[at] = to;
            let _ = decode::<CoordinatorToNode>(&frame, MAX);
        }
    }
}
