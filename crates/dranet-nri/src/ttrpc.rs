//! ttrpc framing: a 10-byte big-endian header (`u32` length, `u32` stream id, `u8` type, `u8` flags)
//! before a protobuf `Request` or `Response` envelope. Only unary calls exist in NRI.

use prost::Message as _;

use crate::error::{Error, Result};
use crate::framing::{Decoder, Framing, be_u32};
use crate::proto::ttrpc as pb;

/// Length of a ttrpc message header.
pub const HEADER_LEN: usize = 10;
/// Largest ttrpc message body (ttrpc's own limit, 4 MiB).
pub const MAX_MESSAGE_LEN: u32 = 4 << 20;

/// gRPC status codes used on the wire.
pub mod code {
    /// Success.
    pub const OK: i32 = 0;
    /// The handler failed for a reason of its own.
    pub const UNKNOWN: i32 = 2;
    /// The request payload could not be decoded.
    pub const INVALID_ARGUMENT: i32 = 3;
    /// The service or method is not served here; NRI runtimes fall back to older calls on this.
    pub const UNIMPLEMENTED: i32 = 12;
}

/// Type byte of a ttrpc message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    /// A call (1).
    Request,
    /// A call's answer (2).
    Response,
    /// Any other type (streaming data, 3, or garbage); NRI does not use it.
    Other(u8),
}

impl MessageType {
    fn from_byte(b: u8) -> Self {
        match b {
            1 => MessageType::Request,
            2 => MessageType::Response,
            other => MessageType::Other(other),
        }
    }

    fn to_byte(self) -> u8 {
        match self {
            MessageType::Request => 1,
            MessageType::Response => 2,
            MessageType::Other(b) => b,
        }
    }
}

/// One ttrpc message: header fields and the undecoded body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Stream id: odd ids are chosen by the caller; the answer carries the same id.
    pub stream_id: u32,
    /// Request or response.
    pub kind: MessageType,
    /// Type-specific flags (0 for unary calls).
    pub flags: u8,
    /// The protobuf `Request` or `Response` envelope.
    pub body: Vec<u8>,
}

impl Message {
    /// Appends this message (header and body) to `out` as one ttrpc byte sequence.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<()> {
        let len = u32::try_from(self.body.len())
            .ok()
            .filter(|l| *l <= MAX_MESSAGE_LEN)
            .ok_or(Error::MessageTooLarge {
                stream_id: self.stream_id,
                len: u32::try_from(self.body.len()).unwrap_or(u32::MAX),
                max: MAX_MESSAGE_LEN,
            })?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&self.stream_id.to_be_bytes());
        out.push(self.kind.to_byte());
        out.push(self.flags);
        out.extend_from_slice(&self.body);
        Ok(())
    }
}

/// The ttrpc framing: a 10-byte header (length, stream id, type, flags) before each body.
#[derive(Debug, Clone, Copy, Default)]
pub struct Messages;

impl Framing for Messages {
    const HEADER_LEN: usize = HEADER_LEN;
    const LEN_AT: usize = 0;
    const MAX_PAYLOAD: u32 = MAX_MESSAGE_LEN;
    type Record = Message;

    fn too_large(header: &[u8], len: u32) -> Error {
        Error::MessageTooLarge {
            stream_id: be_u32(header, 4),
            len,
            max: MAX_MESSAGE_LEN,
        }
    }

    fn record(header: &[u8], body: Vec<u8>) -> Message {
        Message {
            stream_id: be_u32(header, 4),
            kind: MessageType::from_byte(header[8]),
            flags: header[9],
            body,
        }
    }
}

/// Incremental ttrpc message decoder for one channel's byte stream.
///
/// Errors are final: after one, the stream has lost sync and the connection must be dropped.
pub type MessageDecoder = Decoder<Messages>;

impl MessageDecoder {
    /// The next complete message, `Ok(None)` if more bytes are needed, or an error for a header
    /// announcing more than ttrpc allows.
    pub fn next_message(&mut self) -> Result<Option<Message>> {
        self.next_record()
    }
}

/// A decoded ttrpc call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Fully qualified service name, e.g. `nri.pkg.api.v1alpha1.Plugin`.
    pub service: String,
    /// Method name, e.g. `CreateContainer`.
    pub method: String,
    /// The method's protobuf request.
    pub payload: Vec<u8>,
    /// The caller's deadline in nanoseconds (0: none).
    pub timeout_nano: i64,
}

impl Request {
    /// Decodes a request envelope.
    pub fn decode(body: &[u8]) -> Result<Self> {
        let r = pb::Request::decode(body).map_err(|source| Error::Decode {
            what: "ttrpc request",
            source,
        })?;
        Ok(Request {
            service: r.service,
            method: r.method,
            payload: r.payload,
            timeout_nano: r.timeout_nano,
        })
    }

    /// Encodes the request envelope.
    pub fn encode_to_vec(&self) -> Vec<u8> {
        pb::Request {
            service: self.service.clone(),
            method: self.method.clone(),
            payload: self.payload.clone(),
            timeout_nano: self.timeout_nano,
            metadata: Vec::new(),
        }
        .encode_to_vec()
    }
}

/// A decoded ttrpc answer: the payload on success, or a status code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// Status OK (or absent, which means OK) with the method's protobuf response.
    Ok(Vec<u8>),
    /// A non-OK status.
    Err {
        /// gRPC status code.
        code: i32,
        /// Human-readable reason.
        message: String,
    },
}

impl Response {
    /// Decodes a response envelope; a missing status means OK.
    pub fn decode(body: &[u8]) -> Result<Self> {
        let r = pb::Response::decode(body).map_err(|source| Error::Decode {
            what: "ttrpc response",
            source,
        })?;
        Ok(match r.status {
            Some(s) if s.code != code::OK => Response::Err {
                code: s.code,
                message: s.message,
            },
            _ => Response::Ok(r.payload),
        })
    }

    /// Encodes the response envelope; OK answers carry no status, as ttrpc servers send them.
    pub fn encode_to_vec(&self) -> Vec<u8> {
        match self {
            Response::Ok(payload) => pb::Response {
                status: None,
                payload: payload.clone(),
            },
            Response::Err { code, message } => pb::Response {
                status: Some(pb::Status {
                    code: *code,
                    message: message.clone(),
                }),
                payload: Vec::new(),
            },
        }
        .encode_to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout_is_big_endian() {
        let mut out = Vec::new();
        Message {
            stream_id: 3,
            kind: MessageType::Response,
            flags: 0,
            body: vec![9, 9],
        }
        .encode(&mut out)
        .unwrap();
        assert_eq!(out, [0, 0, 0, 2, 0, 0, 0, 3, 2, 0, 9, 9]);
        let mut d = MessageDecoder::new();
        d.push(&out[..5]);
        assert!(d.next_message().unwrap().is_none());
        d.push(&out[5..]);
        let m = d.next_message().unwrap().unwrap();
        assert_eq!(
            (m.stream_id, m.kind, m.body),
            (3, MessageType::Response, vec![9, 9])
        );
        assert_eq!(d.pending(), 0);
    }

    #[test]
    fn missing_status_means_ok() {
        let body = pb::Response {
            status: None,
            payload: vec![1],
        }
        .encode_to_vec();
        assert_eq!(Response::decode(&body).unwrap(), Response::Ok(vec![1]));
        let zero = pb::Response {
            status: Some(pb::Status {
                code: 0,
                message: String::new(),
            }),
            payload: vec![2],
        }
        .encode_to_vec();
        assert_eq!(Response::decode(&zero).unwrap(), Response::Ok(vec![2]));
    }

    #[test]
    fn error_status_roundtrips() {
        let r = Response::Err {
            code: code::UNIMPLEMENTED,
            message: "no".into(),
        };
        assert_eq!(Response::decode(&r.encode_to_vec()).unwrap(), r);
    }

    #[test]
    fn oversized_message_is_an_error() {
        let mut d = MessageDecoder::new();
        d.push(&[0xff, 0, 0, 0, 0, 0, 0, 1, 1, 0]);
        assert!(matches!(
            d.next_message(),
            Err(Error::MessageTooLarge { stream_id: 1, .. })
        ));
    }

    #[test]
    fn garbage_envelope_is_a_decode_error() {
        assert!(matches!(
            Request::decode(&[0xff, 0xff]),
            Err(Error::Decode { .. })
        ));
    }
}
