//! The NRI connection multiplexer: one unix stream carries two logical byte streams.
//!
//! Every frame is an 8-byte big-endian header (`u32` connection id, `u32` payload length) followed by
//! the payload. Connection [`PLUGIN_CONN`] carries the plugin service (the runtime calls us),
//! [`RUNTIME_CONN`] the runtime service (we call the runtime). Each connection's payloads,
//! concatenated, form a ttrpc byte stream; frame boundaries mean nothing to ttrpc.
//!
//! The runtime reads each frame into a 4 KiB buffer, so everything written here is split into
//! frames of at most [`MAX_FRAME_LEN`] bytes, header included. Frames read may be larger (runtimes
//! write a whole ttrpc message per frame) up to [`MAX_INCOMING_PAYLOAD`].

use crate::error::{Error, Result};
use crate::framing::{Decoder, Framing, be_u32};
use crate::ttrpc::{Message, MessageDecoder, MessageType};

/// Length of a frame header.
pub const HEADER_LEN: usize = 8;
/// Largest frame this crate writes, header included.
pub const MAX_FRAME_LEN: usize = 4096;
/// Largest payload of a frame this crate writes.
pub const MAX_FRAME_PAYLOAD: usize = MAX_FRAME_LEN - HEADER_LEN;
/// Largest frame payload accepted from the peer (the runtime side's own limit); larger lengths
/// mean a corrupt or foreign stream.
pub const MAX_INCOMING_PAYLOAD: u32 = 1 << 24;
/// Mux connection carrying the plugin service (runtime → plugin calls).
pub const PLUGIN_CONN: u32 = 1;
/// Mux connection carrying the runtime service (plugin → runtime calls).
pub const RUNTIME_CONN: u32 = 2;

/// One of the two logical connections inside the NRI socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// Connection 1: the runtime calls the plugin.
    Plugin,
    /// Connection 2: the plugin calls the runtime.
    Runtime,
}

impl Channel {
    /// The channel's mux connection id.
    pub fn conn_id(self) -> u32 {
        match self {
            Channel::Plugin => PLUGIN_CONN,
            Channel::Runtime => RUNTIME_CONN,
        }
    }

    /// The channel for a mux connection id, or [`Error::UnknownConnection`].
    pub fn from_conn_id(id: u32) -> Result<Self> {
        match id {
            PLUGIN_CONN => Ok(Channel::Plugin),
            RUNTIME_CONN => Ok(Channel::Runtime),
            other => Err(Error::UnknownConnection(other)),
        }
    }
}

/// Appends `payload` to `out` as mux frames on `conn_id`, none longer than [`MAX_FRAME_LEN`].
///
/// An empty payload writes nothing: an empty frame carries no bytes of the stream.
pub fn encode_frames(conn_id: u32, payload: &[u8], out: &mut Vec<u8>) {
    out.reserve(payload.len() + HEADER_LEN * payload.len().div_ceil(MAX_FRAME_PAYLOAD));
    for chunk in payload.chunks(MAX_FRAME_PAYLOAD) {
        out.extend_from_slice(&conn_id.to_be_bytes());
        // chunk.len() <= MAX_FRAME_PAYLOAD, which fits in u32.
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
        out.extend_from_slice(chunk);
    }
}

/// Appends one ttrpc message for `channel` to `out`, split into mux frames.
pub fn encode_message(channel: Channel, msg: &Message, out: &mut Vec<u8>) -> Result<()> {
    let mut raw = Vec::with_capacity(crate::ttrpc::HEADER_LEN + msg.body.len());
    msg.encode(&mut raw)?;
    encode_frames(channel.conn_id(), &raw, out);
    Ok(())
}

/// One unary ttrpc message (`kind`, no flags) of `stream_id` for `channel`, as the mux frames to
/// write.
pub fn frame_message(
    channel: Channel,
    stream_id: u32,
    kind: MessageType,
    body: Vec<u8>,
) -> Result<Vec<u8>> {
    let msg = Message {
        stream_id,
        kind,
        flags: 0,
        body,
    };
    let mut out = Vec::new();
    encode_message(channel, &msg, &mut out)?;
    Ok(out)
}

/// A decoded mux frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Connection id from the header.
    pub conn_id: u32,
    /// The frame's payload.
    pub payload: Vec<u8>,
}

/// The mux framing: an 8-byte header (connection id, payload length) before each payload.
#[derive(Debug, Clone, Copy, Default)]
pub struct Frames;

impl Framing for Frames {
    const HEADER_LEN: usize = HEADER_LEN;
    const LEN_AT: usize = 4;
    const MAX_PAYLOAD: u32 = MAX_INCOMING_PAYLOAD;
    type Record = Frame;

    fn too_large(header: &[u8], len: u32) -> Error {
        Error::FrameTooLarge {
            conn_id: be_u32(header, 0),
            len,
            max: MAX_INCOMING_PAYLOAD,
        }
    }

    fn record(header: &[u8], payload: Vec<u8>) -> Frame {
        Frame {
            conn_id: be_u32(header, 0),
            payload,
        }
    }
}

/// Incremental mux frame decoder: push bytes as they arrive, pop whole frames.
///
/// Errors are final: after one, the stream has lost sync and the connection must be dropped.
pub type FrameDecoder = Decoder<Frames>;

impl FrameDecoder {
    /// The next complete frame, `Ok(None)` if more bytes are needed, or an error for a header no
    /// NRI peer sends.
    pub fn next_frame(&mut self) -> Result<Option<Frame>> {
        self.next_record()
    }

    /// Length (header included) of the largest frame decoded so far.
    pub fn largest_frame(&self) -> usize {
        self.largest()
    }
}

/// Both layers of the NRI socket's receive side: mux frames in, whole ttrpc messages out, each
/// tagged with the channel it arrived on. Messages split across frames are reassembled; frames of
/// the two channels may interleave freely.
#[derive(Debug, Default)]
pub struct Demux {
    frames: FrameDecoder,
    plugin: MessageDecoder,
    runtime: MessageDecoder,
}

impl Demux {
    /// An empty demultiplexer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes read from the socket.
    pub fn push(&mut self, bytes: &[u8]) {
        self.frames.push(bytes);
    }

    /// The next complete ttrpc message from either channel, `Ok(None)` if more bytes are needed.
    /// Errors are final: drop the connection.
    pub fn next_message(&mut self) -> Result<Option<(Channel, Message)>> {
        loop {
            // Drain reassembled messages first so one big push yields all its messages in order.
            if let Some(m) = self.plugin.next_message()? {
                return Ok(Some((Channel::Plugin, m)));
            }
            if let Some(m) = self.runtime.next_message()? {
                return Ok(Some((Channel::Runtime, m)));
            }
            let Some(frame) = self.frames.next_frame()? else {
                return Ok(None);
            };
            match Channel::from_conn_id(frame.conn_id)? {
                Channel::Plugin => self.plugin.push(&frame.payload),
                Channel::Runtime => self.runtime.push(&frame.payload),
            }
        }
    }

    /// Length (header included) of the largest frame received so far.
    pub fn largest_frame(&self) -> usize {
        self.frames.largest_frame()
    }

    /// Call at end of stream: an error if a partial frame or message is left over.
    pub fn finish(&self) -> Result<()> {
        self.frames.finish()?;
        match self.plugin.pending() + self.runtime.pending() {
            0 => Ok(()),
            n => Err(Error::Truncated(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_payload_is_one_frame() {
        let mut out = Vec::new();
        encode_frames(2, b"hello", &mut out);
        assert_eq!(out, [0, 0, 0, 2, 0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o']);
    }

    #[test]
    fn large_payload_is_split_at_the_frame_limit() {
        let payload: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut out = Vec::new();
        encode_frames(1, &payload, &mut out);
        let mut dec = FrameDecoder::new();
        dec.push(&out);
        let mut joined = Vec::new();
        let mut n = 0;
        while let Some(f) = dec.next_frame().unwrap() {
            assert_eq!(f.conn_id, 1);
            assert!(f.payload.len() + HEADER_LEN <= MAX_FRAME_LEN);
            joined.extend_from_slice(&f.payload);
            n += 1;
        }
        assert_eq!(n, 3);
        assert_eq!(joined, payload);
        dec.finish().unwrap();
    }

    #[test]
    fn oversized_header_is_an_error() {
        let mut dec = FrameDecoder::new();
        dec.push(&[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]);
        let err = dec.next_frame().unwrap_err();
        assert!(
            matches!(err, Error::FrameTooLarge { conn_id: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn unknown_connection_is_an_error() {
        let mut d = Demux::new();
        let mut out = Vec::new();
        encode_frames(7, b"x", &mut out);
        d.push(&out);
        assert!(matches!(d.next_message(), Err(Error::UnknownConnection(7))));
    }

    #[test]
    fn truncated_frame_is_reported_at_finish() {
        let mut dec = FrameDecoder::new();
        dec.push(&[0, 0, 0, 1, 0, 0, 0, 4, b'a']);
        assert!(dec.next_frame().unwrap().is_none());
        assert!(matches!(dec.finish(), Err(Error::Truncated(9))));
    }
}
