//! Property tests of the two framing layers: whatever is encoded decodes back, whatever the chunking
//! and interleaving, and no input makes the decoders panic.

use dranet_nri::mux::{Channel, Demux, FrameDecoder, MAX_FRAME_LEN, encode_message};
use dranet_nri::ttrpc::{Message, MessageType};
use proptest::prelude::*;

fn channel() -> impl Strategy<Value = Channel> {
    prop_oneof![Just(Channel::Plugin), Just(Channel::Runtime)]
}

fn message() -> impl Strategy<Value = Message> {
    (
        any::<u32>(),
        prop_oneof![Just(MessageType::Request), Just(MessageType::Response)],
        // Up to 3 frames' worth, so multi-frame messages are common.
        prop::collection::vec(any::<u8>(), 0..13_000),
    )
        .prop_map(|(stream_id, kind, body)| Message {
            stream_id,
            kind,
            flags: 0,
            body,
        })
}

/// Feeds `bytes` to a demux in chunks of the given sizes (cycled) and collects all messages.
fn decode_chunked(bytes: &[u8], chunks: &[usize]) -> (Vec<(Channel, Message)>, Demux) {
    let mut d = Demux::new();
    let mut out = Vec::new();
    let mut rest = bytes;
    let mut i = 0;
    while !rest.is_empty() {
        let n = chunks[i % chunks.len()].clamp(1, rest.len());
        i += 1;
        d.push(&rest[..n]);
        rest = &rest[n..];
        while let Some(m) = d.next_message().expect("valid stream") {
            out.push(m);
        }
    }
    (out, d)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn messages_roundtrip_across_any_chunking(
        msgs in prop::collection::vec((channel(), message()), 1..6),
        chunks in prop::collection::vec(1usize..9000, 1..8),
    ) {
        let mut wire = Vec::new();
        for (ch, m) in &msgs {
            encode_message(*ch, m, &mut wire).unwrap();
        }
        let (got, d) = decode_chunked(&wire, &chunks);
        prop_assert_eq!(&got, &msgs);
        prop_assert!(d.finish().is_ok());
        prop_assert!(d.largest_frame() <= MAX_FRAME_LEN);
    }

    #[test]
    fn interleaved_frames_of_two_channels_reassemble(
        a in message(), b in message(), chunks in prop::collection::vec(1usize..5000, 1..4),
    ) {
        // Encode each message separately, then interleave their frames one by one.
        let frames = |ch: Channel, m: &Message| {
            let mut w = Vec::new();
            encode_message(ch, m, &mut w).unwrap();
            let mut fd = FrameDecoder::new();
            fd.push(&w);
            let mut v = Vec::new();
            while let Some(f) = fd.next_frame().unwrap() {
                prop_assert!(f.payload.len() + 8 <= MAX_FRAME_LEN);
                let mut one = f.conn_id.to_be_bytes().to_vec();
                one.extend_from_slice(&(f.payload.len() as u32).to_be_bytes());
                one.extend_from_slice(&f.payload);
                v.push(one);
            }
            Ok(v)
        };
        let fa = frames(Channel::Plugin, &a)?;
        let fb = frames(Channel::Runtime, &b)?;
        let mut wire = Vec::new();
        for i in 0..fa.len().max(fb.len()) {
            if let Some(f) = fa.get(i) { wire.extend_from_slice(f); }
            if let Some(f) = fb.get(i) { wire.extend_from_slice(f); }
        }
        let (got, _) = decode_chunked(&wire, &chunks);
        prop_assert_eq!(got.len(), 2);
        for (ch, m) in got {
            match ch {
                Channel::Plugin => prop_assert_eq!(&m, &a),
                Channel::Runtime => prop_assert_eq!(&m, &b),
            }
        }
    }

    #[test]
    fn truncated_streams_are_reported_not_lost(msg in message(), cut in 1usize..64) {
        let mut wire = Vec::new();
        encode_message(Channel::Plugin, &msg, &mut wire).unwrap();
        // Keep at least one byte: an empty stream is not a truncated one.
        let cut = cut.min(wire.len() - 1);
        let mut d = Demux::new();
        d.push(&wire[..wire.len() - cut]);
        while let Ok(Some(_)) = d.next_message() {}
        prop_assert!(d.finish().is_err());
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        let mut d = Demux::new();
        d.push(&bytes);
        // Either messages, a need for more bytes, or a clean error: all without panicking.
        for _ in 0..1024 {
            match d.next_message() {
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => break,
            }
        }
    }
}

#[test]
fn a_garbage_header_is_a_clear_error() {
    let mut d = Demux::new();
    d.push(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let err = d.next_message().unwrap_err().to_string();
    assert!(err.contains("mux frame"), "{err}");
}
