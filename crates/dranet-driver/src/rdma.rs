//! RDMA netlink (`NETLINK_RDMA`, the `nldev` client): the RDMA subsystem's network-namespace
//! mode, the RDMA devices a namespace sees, and moving a device into another namespace.
//!
//! In `shared` mode (the kernel default) every namespace sees every RDMA device, and a pod
//! needs only the `/dev/infiniband` char devices. In `exclusive` mode a device is visible in one
//! namespace only and must move with its NIC. There is no crate for this protocol: the messages
//! are built here from the kernel's uapi numbers (`include/uapi/rdma/rdma_netlink.h`), and the
//! encoding is unit-tested against them. The CI host has no RDMA device; the real-kernel test's
//! soft-RoCE guest (`tests/real_kernel.rs`) sends a real move, which Debian's 6.1 kernel refuses
//! for `rxe` with `EOPNOTSUPP` (software RDMA cannot change namespace), so a move that succeeds
//! runs only on hardware whose driver supports it (mlx5 and the like).

use std::io;

use crate::netns::Netns;
use crate::{Error, Result};

/// `NETLINK_RDMA`.
pub const NETLINK_RDMA: isize = 20;
/// `RDMA_NL_NLDEV`: the netlink client for device management.
pub const RDMA_NL_NLDEV: u16 = 5;
/// `RDMA_NLDEV_CMD_GET`.
pub const CMD_GET: u16 = 1;
/// `RDMA_NLDEV_CMD_SET`.
pub const CMD_SET: u16 = 2;
/// `RDMA_NLDEV_CMD_SYS_GET`.
pub const CMD_SYS_GET: u16 = 6;
/// `RDMA_NLDEV_ATTR_DEV_INDEX` (u32).
pub const ATTR_DEV_INDEX: u16 = 1;
/// `RDMA_NLDEV_ATTR_DEV_NAME` (string).
pub const ATTR_DEV_NAME: u16 = 2;
/// `RDMA_NLDEV_SYS_ATTR_NETNS_MODE` (u8; 1 = shared).
pub const ATTR_SYS_NETNS_MODE: u16 = 66;
/// `RDMA_NLDEV_NET_NS_FD` (u32).
pub const ATTR_NET_NS_FD: u16 = 68;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_DUMP: u16 = 0x300;
const HDR: usize = 16;

/// The netlink message type of an `nldev` command: `RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op)`.
pub const fn nldev_type(op: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) + op
}

/// The RDMA subsystem's network-namespace mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetnsMode {
    /// Every namespace sees every RDMA device.
    Shared,
    /// A device belongs to one namespace and moves with it.
    Exclusive,
}

/// An attribute value to encode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attr {
    /// A u32.
    U32(u16, u32),
    /// A u8.
    U8(u16, u8),
    /// A NUL-terminated string.
    Str(u16, String),
}

/// Encodes one request: netlink header (native endian), then attributes, each padded to 4.
pub fn encode(op: u16, flags: u16, seq: u32, attrs: &[Attr]) -> Vec<u8> {
    let mut body = Vec::new();
    for a in attrs {
        let (kind, payload) = match a {
            Attr::U32(k, v) => (*k, v.to_ne_bytes().to_vec()),
            Attr::U8(k, v) => (*k, vec![*v]),
            Attr::Str(k, s) => {
                let mut p = s.as_bytes().to_vec();
                p.push(0);
                (*k, p)
            }
        };
        let len = 4 + payload.len();
        body.extend_from_slice(&(len as u16).to_ne_bytes());
        body.extend_from_slice(&kind.to_ne_bytes());
        body.extend_from_slice(&payload);
        while body.len() % 4 != 0 {
            body.push(0);
        }
    }
    let total = HDR + body.len();
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_ne_bytes());
    out.extend_from_slice(&nldev_type(op).to_ne_bytes());
    out.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&body);
    out
}

/// A decoded answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A message with its attributes (type, payload).
    Message {
        /// Netlink message type.
        kind: u16,
        /// Attributes.
        attrs: Vec<(u16, Vec<u8>)>,
    },
    /// `NLMSG_ERROR`: 0 is an acknowledgement, otherwise a negative errno.
    Error(i32),
    /// End of a dump.
    Done,
}

/// Decodes a datagram of netlink messages; malformed input is an error, never a panic.
pub fn decode(mut buf: &[u8]) -> io::Result<Vec<Reply>> {
    let bad =
        |why: &str| io::Error::new(io::ErrorKind::InvalidData, format!("rdma netlink: {why}"));
    let mut out = Vec::new();
    while buf.len() >= HDR {
        let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if len < HDR || len > buf.len() {
            return Err(bad("message length out of bounds"));
        }
        let payload = &buf[HDR..len];
        match kind {
            NLMSG_ERROR => {
                if payload.len() < 4 {
                    return Err(bad("short error message"));
                }
                out.push(Reply::Error(i32::from_ne_bytes([
                    payload[0], payload[1], payload[2], payload[3],
                ])));
            }
            NLMSG_DONE => out.push(Reply::Done),
            _ => {
                let mut attrs = Vec::new();
                let mut p = payload;
                while p.len() >= 4 {
                    let alen = u16::from_ne_bytes([p[0], p[1]]) as usize;
                    let akind = u16::from_ne_bytes([p[2], p[3]]) & 0x3fff;
                    if alen < 4 || alen > p.len() {
                        return Err(bad("attribute length out of bounds"));
                    }
                    attrs.push((akind, p[4..alen].to_vec()));
                    let padded = (alen + 3) & !3;
                    p = &p[padded.min(p.len())..];
                }
                out.push(Reply::Message { kind, attrs });
            }
        }
        let padded = (len + 3) & !3;
        buf = &buf[padded.min(buf.len())..];
    }
    Ok(out)
}

fn attr(attrs: &[(u16, Vec<u8>)], kind: u16) -> Option<&[u8]> {
    attrs
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, v)| v.as_slice())
}

/// The mode from a `SYS_GET` answer.
pub fn parse_netns_mode(replies: &[Reply]) -> io::Result<NetnsMode> {
    for r in replies {
        match r {
            Reply::Error(e) if *e != 0 => return Err(io::Error::from_raw_os_error(-e)),
            Reply::Message { attrs, .. } => {
                if let Some(v) = attr(attrs, ATTR_SYS_NETNS_MODE) {
                    return Ok(if v.first() == Some(&1) {
                        NetnsMode::Shared
                    } else {
                        NetnsMode::Exclusive
                    });
                }
            }
            _ => {}
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "rdma netlink: no netns mode in the answer",
    ))
}

/// `(index, name)` of each device in a `GET` dump.
pub fn parse_devices(replies: &[Reply]) -> io::Result<Vec<(u32, String)>> {
    let mut out = Vec::new();
    for r in replies {
        match r {
            Reply::Error(e) if *e != 0 => return Err(io::Error::from_raw_os_error(-e)),
            Reply::Message { attrs, .. } => {
                let idx = attr(attrs, ATTR_DEV_INDEX)
                    .and_then(|v| <[u8; 4]>::try_from(v).ok())
                    .map(u32::from_ne_bytes);
                let name = attr(attrs, ATTR_DEV_NAME).map(|v| {
                    String::from_utf8_lossy(v.split(|b| *b == 0).next().unwrap_or(&[])).into_owned()
                });
                if let (Some(i), Some(n)) = (idx, name) {
                    out.push((i, n));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Sends one request on a fresh socket in the calling thread's namespace and collects the
/// answers up to the ack or the end of the dump.
/// Opens a netlink socket of `protocol` in the calling thread's namespace and sends `req`; the
/// answers are read from the returned socket, which gives up after 5 s of silence (a kernel that
/// never answers must not hang a prepare).
pub(crate) fn send_request(protocol: isize, req: &[u8]) -> io::Result<rtnetlink::sys::Socket> {
    let mut sock = rtnetlink::sys::Socket::new(protocol)?;
    sock.bind_auto()?;
    nix::sys::socket::setsockopt(
        &sock,
        nix::sys::socket::sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(5, 0),
    )
    .map_err(io::Error::from)?;
    sock.connect(&rtnetlink::sys::SocketAddr::new(0, 0))?;
    sock.send(req, 0)?;
    Ok(sock)
}

fn transact(req: &[u8], dump: bool) -> io::Result<Vec<Reply>> {
    let sock = send_request(NETLINK_RDMA, req)?;
    let mut all = Vec::new();
    loop {
        let (buf, _) = sock.recv_from_full()?;
        let replies = decode(&buf)?;
        let end = replies
            .iter()
            .any(|r| matches!(r, Reply::Done) || (!dump && matches!(r, Reply::Error(_))));
        all.extend(replies);
        if end || buf.is_empty() {
            return Ok(all);
        }
    }
}

/// The RDMA subsystem's namespace mode (a system-wide setting).
pub fn netns_mode() -> Result<NetnsMode> {
    let replies = transact(&encode(CMD_SYS_GET, NLM_F_ACK, 1, &[]), false)
        .map_err(|e| Error::Rdma(format!("read the netns mode: {e}")))?;
    parse_netns_mode(&replies).map_err(|e| Error::Rdma(format!("read the netns mode: {e}")))
}

/// The RDMA devices visible in `ns`, as `(index, name)`.
pub fn devices(ns: &Netns) -> Result<Vec<(u32, String)>> {
    let replies = ns
        .run(|| transact(&encode(CMD_GET, NLM_F_DUMP, 1, &[]), true))?
        .map_err(|e| Error::Rdma(format!("list devices in {}: {e}", ns.path().display())))?;
    parse_devices(&replies).map_err(|e| Error::Rdma(e.to_string()))
}

/// Moves the RDMA device `name` from namespace `from` into `to` (exclusive mode only).
pub fn move_device(name: &str, from: &Netns, to: &Netns) -> Result<()> {
    use std::os::fd::{AsFd, AsRawFd};
    let index = devices(from)?
        .into_iter()
        .find(|(_, n)| n == name)
        .map(|(i, _)| i)
        .ok_or_else(|| {
            Error::Rdma(format!(
                "no RDMA device {name} in {}",
                from.path().display()
            ))
        })?;
    let fd = u32::try_from(to.as_fd().as_raw_fd())
        .map_err(|_| Error::Rdma("namespace fd out of range".into()))?;
    let req = encode(
        CMD_SET,
        NLM_F_ACK,
        1,
        &[
            Attr::U32(ATTR_DEV_INDEX, index),
            Attr::U32(ATTR_NET_NS_FD, fd),
        ],
    );
    let replies = from
        .run(|| transact(&req, false))?
        .map_err(|e| Error::Rdma(format!("move {name} to {}: {e}", to.path().display())))?;
    for r in replies {
        if let Reply::Error(e) = r
            && e != 0
        {
            return Err(Error::Rdma(format!(
                "move {name} to {}: {}{}",
                to.path().display(),
                io::Error::from_raw_os_error(-e),
                refusal_hint(-e)
            )));
        }
    }
    Ok(())
}

/// What the kernel means by refusing a move with `errno`.
fn refusal_hint(errno: i32) -> &'static str {
    if errno == nix::errno::Errno::EOPNOTSUPP as i32 {
        // ib_device_set_netns_put(): the fd and the device were fine; the mode or the driver
        // (no disassociate_ucontext, as in soft-RoCE and siw) is not.
        " (the kernel moves an RDMA device only in exclusive netns mode, and only if its \
         driver can detach its users: software RDMA such as rxe and siw never can)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_types_follow_the_uapi_macro() {
        // RDMA_NL_GET_TYPE(RDMA_NL_NLDEV=5, op) = (5 << 10) + op
        assert_eq!(nldev_type(CMD_GET), 0x1401);
        assert_eq!(nldev_type(CMD_SET), 0x1402);
        assert_eq!(nldev_type(CMD_SYS_GET), 0x1406);
    }

    #[test]
    fn a_move_request_has_the_index_and_fd_attributes_padded() {
        let m = encode(
            CMD_SET,
            NLM_F_ACK,
            7,
            &[Attr::U32(ATTR_DEV_INDEX, 3), Attr::U32(ATTR_NET_NS_FD, 9)],
        );
        assert_eq!(m.len(), 16 + 8 + 8);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 32);
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), 0x1402);
        assert_eq!(
            u16::from_ne_bytes(m[6..8].try_into().unwrap()),
            NLM_F_REQUEST | NLM_F_ACK
        );
        assert_eq!(u32::from_ne_bytes(m[8..12].try_into().unwrap()), 7);
        // attr 1: len 8, type DEV_INDEX, value 3
        assert_eq!(u16::from_ne_bytes(m[16..18].try_into().unwrap()), 8);
        assert_eq!(u16::from_ne_bytes(m[18..20].try_into().unwrap()), 1);
        assert_eq!(u32::from_ne_bytes(m[20..24].try_into().unwrap()), 3);
        // attr 2: type NET_NS_FD (68), value 9
        assert_eq!(u16::from_ne_bytes(m[26..28].try_into().unwrap()), 68);
        assert_eq!(u32::from_ne_bytes(m[28..32].try_into().unwrap()), 9);
        // Our own decoder reads back what we wrote.
        let r = decode(&m).unwrap();
        assert_eq!(
            r,
            vec![Reply::Message {
                kind: 0x1402,
                attrs: vec![
                    (1, 3u32.to_ne_bytes().to_vec()),
                    (68, 9u32.to_ne_bytes().to_vec())
                ]
            }]
        );
    }

    #[test]
    fn answers_as_the_kernel_sends_them_are_understood() {
        // SYS_GET answer: netns mode (u8, padded) and copy-on-fork.
        let mut ans = encode(
            CMD_SYS_GET,
            0,
            1,
            &[Attr::U8(ATTR_SYS_NETNS_MODE, 0), Attr::U8(90, 1)],
        );
        assert_eq!(
            parse_netns_mode(&decode(&ans).unwrap()).unwrap(),
            NetnsMode::Exclusive
        );
        ans = encode(CMD_SYS_GET, 0, 1, &[Attr::U8(ATTR_SYS_NETNS_MODE, 1)]);
        assert_eq!(
            parse_netns_mode(&decode(&ans).unwrap()).unwrap(),
            NetnsMode::Shared
        );

        // A dump of two devices followed by NLMSG_DONE, in one datagram.
        let mut dump = encode(
            CMD_GET,
            0,
            1,
            &[
                Attr::U32(ATTR_DEV_INDEX, 0),
                Attr::Str(ATTR_DEV_NAME, "mlx5_0".into()),
            ],
        );
        dump.extend(encode(
            CMD_GET,
            0,
            1,
            &[
                Attr::U32(ATTR_DEV_INDEX, 4),
                Attr::Str(ATTR_DEV_NAME, "rxe0".into()),
            ],
        ));
        let mut done = vec![0u8; 20];
        done[0..4].copy_from_slice(&20u32.to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        dump.extend(done);
        let r = decode(&dump).unwrap();
        assert_eq!(r.last(), Some(&Reply::Done));
        assert_eq!(
            parse_devices(&r).unwrap(),
            vec![(0, "mlx5_0".to_string()), (4, "rxe0".to_string())]
        );

        // NLMSG_ERROR with -EPERM.
        let mut err = vec![0u8; 36];
        err[0..4].copy_from_slice(&36u32.to_ne_bytes());
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[16..20].copy_from_slice(&(-1i32).to_ne_bytes());
        let r = decode(&err).unwrap();
        assert_eq!(r, vec![Reply::Error(-1)]);
        assert_eq!(
            parse_devices(&r).unwrap_err().raw_os_error(),
            Some(1),
            "EPERM surfaces as an errno"
        );
    }

    #[test]
    fn malformed_datagrams_are_errors_not_panics() {
        let mut m = encode(CMD_GET, 0, 1, &[Attr::U32(ATTR_DEV_INDEX, 1)]);
        m[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(decode(&m).is_err());
        let mut m = encode(CMD_GET, 0, 1, &[Attr::U32(ATTR_DEV_INDEX, 1)]);
        m[16..18].copy_from_slice(&200u16.to_ne_bytes());
        assert!(decode(&m).is_err());
        for len in 0..40 {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37 % 251) as u8).collect();
            let _ = decode(&junk);
        }
    }

    #[test]
    fn without_rdma_the_kernel_answer_is_an_error_not_a_hang() {
        // This host has no RDMA netlink (ENOENT/EPROTONOSUPPORT) or no devices; either way
        // the call returns.
        match netns_mode() {
            Ok(m) => eprintln!("rdma netns mode here: {m:?}"),
            Err(e) => assert!(e.to_string().contains("netns mode"), "{e}"),
        }
    }
}
