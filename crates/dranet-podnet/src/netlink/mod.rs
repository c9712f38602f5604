//! Netlink framing for the protocols dranet speaks without a crate of their own: generic netlink
//! (the `ethtool` family, [`crate::ethtool`]) and RDMA netlink ([`crate::rdma`]). rtnetlink goes
//! through the `rtnetlink` crate ([`crate::netns::Rtnl`]).
//!
//! - [`attr`]: attributes (type, length, value, padded to 4 bytes): encoding and parsing.
//! - [`message`]: the message header: a request's bytes, and a datagram's answers.
//! - [`socket`]: one request on a fresh socket, and its answer up to the ack, the kernel's error
//!   or the end of a dump.
//! - [`genl`]: the generic netlink header and the lookup of a family by name.
//!
//! Everything is native-endian, as netlink is. Malformed input is an `io::Error` of kind
//! `InvalidData`, never a panic.

pub mod attr;
pub mod genl;
pub mod message;
pub mod socket;

pub use attr::Attr;
pub use message::{Message, Reply};

/// `NLM_F_REQUEST`: set on every request.
pub const NLM_F_REQUEST: u16 = 1;
/// `NLM_F_ACK`: asks for an acknowledgement (an `NLMSG_ERROR` with error 0).
pub const NLM_F_ACK: u16 = 4;
/// `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`): every object, ended by `NLMSG_DONE`.
pub const NLM_F_DUMP: u16 = 0x300;
/// `NLMSG_ERROR`: an error, or with error 0 an acknowledgement.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`: the end of a dump.
pub const NLMSG_DONE: u16 = 3;

fn invalid(why: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.into())
}

/// `len` rounded up to the next multiple of 4 (`NLMSG_ALIGN`, `NLA_ALIGN`).
const fn align(len: usize) -> usize {
    (len + 3) & !3
}
