//! The netlink message: a 16-byte header (`struct nlmsghdr`: length, type, flags, sequence
//! number, port) and a payload. Requests are encoded here; answers decoded, a datagram at a time.

use std::io;

use super::attr::Attr;
use super::{NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR, align, invalid};

/// The length of the message header.
pub const HEADER_LEN: usize = 16;

/// Encodes a request of type `kind`: the header (`flags` with `NLM_F_REQUEST`, the kernel
/// picks the port), then `head` (a protocol's fixed header, as generic netlink's; empty for
/// RDMA), then `attrs`.
pub fn request(
    kind: u16,
    flags: u16,
    seq: u32,
    head: &[u8],
    attrs: &[Attr<'_>],
) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(head);
    out.resize(align(out.len()), 0);
    for a in attrs {
        a.encode(&mut out)?;
    }
    let len = u32::try_from(out.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "netlink request too long"))?;
    out[0..4].copy_from_slice(&len.to_ne_bytes());
    Ok(out)
}

/// A message of an answer: its type and what follows its header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The netlink message type.
    pub kind: u16,
    /// Its payload: a protocol's fixed header, if it has one, then attributes.
    pub payload: Vec<u8>,
}

/// One message of a datagram, by what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// An answer.
    Message(Message),
    /// `NLMSG_ERROR`: 0 acknowledges the request, anything else is a negative errno.
    Error(i32),
    /// `NLMSG_DONE`: the end of a dump.
    Done,
}

/// The messages of one datagram. A length that does not fit, or an error message too short
/// for its errno, is an error.
pub fn decode(mut buf: &[u8]) -> io::Result<Vec<Reply>> {
    let mut out = Vec::new();
    while buf.len() >= HEADER_LEN {
        let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if len < HEADER_LEN || len > buf.len() {
            return Err(invalid("netlink message length out of bounds"));
        }
        let payload = &buf[HEADER_LEN..len];
        out.push(match kind {
            NLMSG_ERROR => {
                let errno = payload
                    .get(0..4)
                    .ok_or_else(|| invalid("netlink error message too short for its errno"))?;
                Reply::Error(i32::from_ne_bytes([errno[0], errno[1], errno[2], errno[3]]))
            }
            NLMSG_DONE => Reply::Done,
            _ => Reply::Message(Message {
                kind,
                payload: payload.to_vec(),
            }),
        });
        buf = &buf[align(len).min(buf.len())..];
    }
    Ok(out)
}

/// A message as the kernel sends it: the header, then `payload`, padded.
#[cfg(test)]
pub(crate) fn kernel_message(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut m = ((HEADER_LEN + payload.len()) as u32).to_ne_bytes().to_vec();
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&[0; 10]);
    m.extend_from_slice(payload);
    m.resize(align(m.len()), 0);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_has_the_header_then_the_attributes() {
        let m = request(0x1402, 4, 7, &[], &[Attr::U32(1, 3), Attr::U32(68, 9)]).unwrap();
        assert_eq!(m.len(), 16 + 8 + 8);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 32);
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), 0x1402);
        assert_eq!(
            u16::from_ne_bytes(m[6..8].try_into().unwrap()),
            NLM_F_REQUEST | 4
        );
        assert_eq!(u32::from_ne_bytes(m[8..12].try_into().unwrap()), 7);
        assert_eq!(u32::from_ne_bytes(m[12..16].try_into().unwrap()), 0, "port");
        assert_eq!(&m[16..24], &[8, 0, 1, 0, 3, 0, 0, 0]);
        // A protocol header goes between the two.
        let g = request(0x10, 0, 1, &[3, 1, 0, 0], &[Attr::U8(2, 5)]).unwrap();
        assert_eq!(&g[16..], &[3, 1, 0, 0, 5, 0, 2, 0, 5, 0, 0, 0]);
        assert_eq!(u32::from_ne_bytes(g[0..4].try_into().unwrap()), 28);
    }

    #[test]
    fn a_dump_of_two_messages_and_its_end() {
        let mut dgram = kernel_message(0x1401, &[8, 0, 1, 0, 0, 0, 0, 0]);
        dgram.extend(kernel_message(0x1401, &[5, 0, 2, 0, b'x']));
        dgram.extend(kernel_message(NLMSG_DONE, &0i32.to_ne_bytes()));
        let r = decode(&dgram).unwrap();
        assert_eq!(r.len(), 3);
        // The payload ends where the header's length says, before the padding.
        assert_eq!(
            r[1],
            Reply::Message(Message {
                kind: 0x1401,
                payload: vec![5, 0, 2, 0, b'x']
            })
        );
        assert_eq!(r[2], Reply::Done);
    }

    #[test]
    fn an_error_reply_carries_the_negative_errno() {
        // NLMSG_ERROR: errno, then the request's header.
        let mut payload = (-1i32).to_ne_bytes().to_vec();
        payload.extend_from_slice(&[0; 16]);
        assert_eq!(
            decode(&kernel_message(NLMSG_ERROR, &payload)).unwrap(),
            [Reply::Error(-1)]
        );
        assert_eq!(
            decode(&kernel_message(NLMSG_ERROR, &[0; 20])).unwrap(),
            [Reply::Error(0)]
        );
        let short = kernel_message(NLMSG_ERROR, &[]);
        assert_eq!(
            decode(&short).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn malformed_datagrams_are_errors_not_panics() {
        let mut m = kernel_message(0x1401, &[8, 0, 1, 0, 1, 0, 0, 0]);
        m[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(decode(&m).is_err(), "longer than the datagram");
        m[0..4].copy_from_slice(&8u32.to_ne_bytes());
        assert!(decode(&m).is_err(), "shorter than its header");
        for len in 0..60usize {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37 % 251) as u8).collect();
            let _ = decode(&junk);
        }
    }
}
