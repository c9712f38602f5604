//! RDMA netlink (`NETLINK_RDMA`, the `nldev` client): the RDMA subsystem's network-namespace
//! mode, the RDMA devices a namespace sees, and moving a device into another namespace.
//!
//! In `shared` mode (the kernel default) every namespace sees every RDMA device, and a pod
//! needs only the `/dev/infiniband` char devices. In `exclusive` mode a device is visible in one
//! namespace only and must move with its NIC. There is no crate for this protocol: its numbers are
//! the kernel's uapi (`include/uapi/rdma/rdma_netlink.h`), the framing is [`crate::netlink`]'s,
//! and the messages are unit-tested against both. The CI host has no RDMA device; the real-kernel
//! test's soft-RoCE guest (`tests/real_kernel.rs`) sends a real move, which Debian's 6.1 kernel
//! refuses for `rxe` with `EOPNOTSUPP` (software RDMA cannot change namespace), so a move that
//! succeeds runs only on hardware whose driver supports it (mlx5 and the like).

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;

use crate::netlink::socket::transact;
use crate::netlink::{self, Attr, Message, NLM_F_ACK, NLM_F_DUMP, attr};
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

/// What an RDMA netlink call was doing when it failed ([`Error::Rdma`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// Reading the subsystem's namespace mode.
    ReadNetnsMode,
    /// Listing the devices a namespace sees.
    ListDevices {
        /// The namespace.
        netns: PathBuf,
    },
    /// Moving a device from one namespace into another.
    Move {
        /// The RDMA device (`mlx5_0`).
        device: String,
        /// Where it was.
        from: PathBuf,
        /// Where it was to go.
        to: PathBuf,
    },
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operation::ReadNetnsMode => f.write_str("read the netns mode"),
            Operation::ListDevices { netns } => write!(f, "list devices in {}", netns.display()),
            Operation::Move { device, to, .. } => write!(f, "move {device} to {}", to.display()),
        }
    }
}

/// An `nldev` request.
pub fn request(op: u16, flags: u16, attrs: &[Attr<'_>]) -> io::Result<Vec<u8>> {
    netlink::message::request(nldev_type(op), flags, 1, &[], attrs)
}

/// The mode in a `SYS_GET` answer.
pub fn parse_netns_mode(answer: &[Message]) -> io::Result<NetnsMode> {
    for m in answer {
        let attrs = attr::parse(&m.payload)?;
        if let Some(v) = attr::find(&attrs, ATTR_SYS_NETNS_MODE) {
            return Ok(if v.first() == Some(&1) {
                NetnsMode::Shared
            } else {
                NetnsMode::Exclusive
            });
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "no netns mode in the answer",
    ))
}

/// `(index, name)` of each device in a `GET` dump.
pub fn parse_devices(answer: &[Message]) -> io::Result<Vec<(u32, String)>> {
    let mut out = Vec::new();
    for m in answer {
        let attrs = attr::parse(&m.payload)?;
        let index = attr::find(&attrs, ATTR_DEV_INDEX).and_then(attr::u32_value);
        let name = attr::find(&attrs, ATTR_DEV_NAME).map(attr::string_value);
        if let (Some(i), Some(n)) = (index, name) {
            out.push((i, n));
        }
    }
    Ok(out)
}

/// The RDMA subsystem's namespace mode (a system-wide setting).
pub fn netns_mode() -> Result<NetnsMode> {
    let err = |source| Error::Rdma {
        operation: Operation::ReadNetnsMode,
        source,
    };
    let answer = transact(
        NETLINK_RDMA,
        &request(CMD_SYS_GET, NLM_F_ACK, &[]).map_err(err)?,
    )
    .map_err(err)?;
    parse_netns_mode(&answer).map_err(err)
}

/// The RDMA devices visible in `ns`, as `(index, name)`.
pub fn devices(ns: &Netns) -> Result<Vec<(u32, String)>> {
    let err = |source| Error::Rdma {
        operation: Operation::ListDevices {
            netns: ns.path().to_path_buf(),
        },
        source,
    };
    let req = request(CMD_GET, NLM_F_DUMP, &[]).map_err(err)?;
    let answer = ns.run(|| transact(NETLINK_RDMA, &req))?.map_err(err)?;
    parse_devices(&answer).map_err(err)
}

/// Moves the RDMA device `name` from namespace `from` into `to` (exclusive mode only).
pub fn move_device(name: &str, from: &Netns, to: &Netns) -> Result<()> {
    let err = |source| Error::Rdma {
        operation: Operation::Move {
            device: name.to_string(),
            from: from.path().to_path_buf(),
            to: to.path().to_path_buf(),
        },
        source,
    };
    let index = devices(from)?
        .into_iter()
        .find(|(_, n)| n == name)
        .map(|(i, _)| i)
        .ok_or_else(|| {
            err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no such RDMA device in {}", from.path().display()),
            ))
        })?;
    let fd = u32::try_from(to.as_fd().as_raw_fd()).map_err(|_| {
        err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "namespace fd out of range",
        ))
    })?;
    let req = request(
        CMD_SET,
        NLM_F_ACK,
        &[
            Attr::U32(ATTR_DEV_INDEX, index),
            Attr::U32(ATTR_NET_NS_FD, fd),
        ],
    )
    .map_err(err)?;
    from.run(|| transact(NETLINK_RDMA, &req))?
        .map_err(|e| err(explain_refusal(e)))?;
    Ok(())
}

/// The kernel's refusal of a move, with what it means when the errno alone does not say.
pub(crate) fn explain_refusal(e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(nix::errno::Errno::EOPNOTSUPP as i32) {
        // ib_device_set_netns_put(): the fd and the device were fine; the mode or the driver
        // (no disassociate_ucontext, as in soft-RoCE and siw) is not.
        return io::Error::new(
            e.kind(),
            format!(
                "{e} (the kernel moves an RDMA device only in exclusive netns mode, and only if \
                 its driver can detach its users: software RDMA such as rxe and siw never can)"
            ),
        );
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::message::kernel_message;
    use crate::netlink::socket::read_answer;

    #[test]
    fn message_types_follow_the_uapi_macro() {
        // RDMA_NL_GET_TYPE(RDMA_NL_NLDEV=5, op) = (5 << 10) + op
        assert_eq!(nldev_type(CMD_GET), 0x1401);
        assert_eq!(nldev_type(CMD_SET), 0x1402);
        assert_eq!(nldev_type(CMD_SYS_GET), 0x1406);
    }

    #[test]
    fn a_move_request_has_the_index_and_fd_attributes_padded() {
        let m = request(
            CMD_SET,
            NLM_F_ACK,
            &[Attr::U32(ATTR_DEV_INDEX, 3), Attr::U32(ATTR_NET_NS_FD, 9)],
        )
        .unwrap();
        assert_eq!(m.len(), 16 + 8 + 8);
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), 0x1402);
        assert_eq!(
            u16::from_ne_bytes(m[6..8].try_into().unwrap()),
            netlink::NLM_F_REQUEST | NLM_F_ACK
        );
        // attr 1: len 8, type DEV_INDEX, value 3
        assert_eq!(&m[16..20], &[8, 0, 1, 0]);
        assert_eq!(u32::from_ne_bytes(m[20..24].try_into().unwrap()), 3);
        // attr 2: type NET_NS_FD (68), value 9
        assert_eq!(u16::from_ne_bytes(m[26..28].try_into().unwrap()), 68);
        assert_eq!(u32::from_ne_bytes(m[28..32].try_into().unwrap()), 9);
    }

    /// What the kernel answers: `nldev` messages with `attrs`.
    fn answer(attrs: &[&[Attr<'_>]]) -> Vec<Message> {
        let mut dgram = Vec::new();
        for a in attrs {
            let mut payload = Vec::new();
            for x in *a {
                x.encode(&mut payload).unwrap();
            }
            dgram.extend(kernel_message(nldev_type(CMD_GET), &payload));
        }
        dgram.extend(kernel_message(netlink::NLMSG_DONE, &[0; 4]));
        let mut out = Vec::new();
        assert!(read_answer(&dgram, &mut out).unwrap());
        out
    }

    #[test]
    fn answers_as_the_kernel_sends_them_are_understood() {
        // SYS_GET answer: netns mode (u8, padded) and copy-on-fork.
        let exclusive = answer(&[&[Attr::U8(ATTR_SYS_NETNS_MODE, 0), Attr::U8(90, 1)]]);
        assert_eq!(parse_netns_mode(&exclusive).unwrap(), NetnsMode::Exclusive);
        let shared = answer(&[&[Attr::U8(ATTR_SYS_NETNS_MODE, 1)]]);
        assert_eq!(parse_netns_mode(&shared).unwrap(), NetnsMode::Shared);
        assert!(parse_netns_mode(&answer(&[&[Attr::U8(90, 1)]])).is_err());

        // A dump of two devices followed by NLMSG_DONE, in one datagram.
        let dump = answer(&[
            &[
                Attr::U32(ATTR_DEV_INDEX, 0),
                Attr::Str(ATTR_DEV_NAME, "mlx5_0"),
            ],
            &[
                Attr::U32(ATTR_DEV_INDEX, 4),
                Attr::Str(ATTR_DEV_NAME, "rxe0"),
            ],
        ]);
        assert_eq!(
            parse_devices(&dump).unwrap(),
            vec![(0, "mlx5_0".to_string()), (4, "rxe0".to_string())]
        );
        // A truncated attribute is an error, not a panic.
        let mut cut = dump.clone();
        cut[0].payload[0] = 200;
        assert!(parse_devices(&cut).is_err());
    }

    #[test]
    fn errors_name_the_operation_and_keep_the_kernels_errno() {
        let e = Error::Rdma {
            operation: Operation::Move {
                device: "mlx5_0".into(),
                from: "/proc/self/ns/net".into(),
                to: "/run/netns/pod".into(),
            },
            source: io::Error::from_raw_os_error(1),
        };
        let text = e.to_string();
        assert!(
            text.starts_with("rdma netlink: move mlx5_0 to /run/netns/pod: "),
            "{text}"
        );
        let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(source.and_then(io::Error::raw_os_error), Some(1));
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
