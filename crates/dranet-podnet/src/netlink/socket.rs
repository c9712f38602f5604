//! One request on a fresh netlink socket, and its answer: the messages up to the
//! acknowledgement or the end of a dump, or the kernel's error.

use std::io;

use rtnetlink::sys::{Socket, SocketAddr};

use super::message::{Message, Reply, decode};

/// Sends `request` on a new socket of `protocol` (`NETLINK_GENERIC`, `NETLINK_RDMA`) in the
/// calling thread's network namespace, and returns the answer's messages. The kernel's error
/// is an `io::Error` with its errno. The socket gives up after 5 s of silence: a kernel that
/// never answers must not hang a prepare.
pub fn transact(protocol: isize, request: &[u8]) -> io::Result<Vec<Message>> {
    let mut sock = Socket::new(protocol)?;
    sock.bind_auto()?;
    nix::sys::socket::setsockopt(
        &sock,
        nix::sys::socket::sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(5, 0),
    )
    .map_err(io::Error::from)?;
    sock.connect(&SocketAddr::new(0, 0))?;
    sock.send(request, 0)?;
    let mut messages = Vec::new();
    loop {
        let (datagram, _) = sock.recv_from_full()?;
        if datagram.is_empty() || read_answer(&datagram, &mut messages)? {
            return Ok(messages);
        }
    }
}

/// Adds the messages of one datagram of an answer to `messages`; `Ok(true)` once the answer
/// is complete (an acknowledgement, or the end of a dump). An error from the kernel is an
/// `io::Error` with its errno.
pub fn read_answer(datagram: &[u8], messages: &mut Vec<Message>) -> io::Result<bool> {
    for reply in decode(datagram)? {
        match reply {
            Reply::Message(m) => messages.push(m),
            Reply::Error(0) | Reply::Done => return Ok(true),
            Reply::Error(errno) => {
                return Err(io::Error::from_raw_os_error(errno.saturating_neg()));
            }
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::super::message::kernel_message;
    use super::super::{NLMSG_DONE, NLMSG_ERROR};
    use super::*;

    #[test]
    fn a_dump_over_two_datagrams_ends_at_done() {
        let mut out = Vec::new();
        let first = kernel_message(0x1401, &[8, 0, 1, 0, 0, 0, 0, 0]);
        assert!(!read_answer(&first, &mut out).unwrap(), "no end yet");
        let mut second = kernel_message(0x1401, &[8, 0, 1, 0, 4, 0, 0, 0]);
        second.extend(kernel_message(NLMSG_DONE, &0i32.to_ne_bytes()));
        assert!(read_answer(&second, &mut out).unwrap());
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].payload[4..8], 4u32.to_ne_bytes());
    }

    #[test]
    fn an_ack_ends_the_answer_and_an_error_is_the_kernels_errno() {
        let mut out = Vec::new();
        let mut dgram = kernel_message(0x1406, &[5, 0, 66, 0, 1, 0, 0, 0]);
        dgram.extend(kernel_message(NLMSG_ERROR, &[0; 20]));
        assert!(read_answer(&dgram, &mut out).unwrap());
        assert_eq!(out.len(), 1);

        let mut eperm = (-1i32).to_ne_bytes().to_vec();
        eperm.extend_from_slice(&[0; 16]);
        let e = read_answer(&kernel_message(NLMSG_ERROR, &eperm), &mut out).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(1), "EPERM surfaces as an errno");
        let mut odd = i32::MIN.to_ne_bytes().to_vec();
        odd.extend_from_slice(&[0; 16]);
        assert!(read_answer(&kernel_message(NLMSG_ERROR, &odd), &mut out).is_err());
    }

    #[test]
    fn a_truncated_datagram_is_an_error() {
        let mut m = kernel_message(0x1401, &[8, 0, 1, 0, 0, 0, 0, 0]);
        m.truncate(20);
        let e = read_answer(&m, &mut Vec::new()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}
