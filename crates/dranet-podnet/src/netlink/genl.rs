//! Generic netlink: the 4-byte header after the netlink one (command, version), and families
//! found by name through the controller (`nlctrl`).

use std::io;

use super::attr::{self, Attr};
use super::message::{self, Message};
use super::{NLM_F_ACK, socket};

/// `NETLINK_GENERIC`.
pub const NETLINK_GENERIC: isize = 16;
/// The generic netlink header's length: command, version, two reserved bytes.
pub const HEADER_LEN: usize = 4;

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_VERSION: u8 = 1;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;

/// Encodes a request to `family`: netlink header, generic header (`cmd`, `version`),
/// attributes.
pub fn request(
    family: u16,
    flags: u16,
    cmd: u8,
    version: u8,
    attrs: &[Attr<'_>],
) -> io::Result<Vec<u8>> {
    message::request(family, flags, 1, &[cmd, version, 0, 0], attrs)
}

/// The attributes of a generic netlink message: what follows its generic header.
pub fn attributes(m: &Message) -> &[u8] {
    m.payload.get(HEADER_LEN..).unwrap_or(&[])
}

/// One acknowledged request to `family` in the calling thread's namespace; the answer's
/// messages.
pub fn call(family: u16, cmd: u8, version: u8, attrs: &[Attr<'_>]) -> io::Result<Vec<Message>> {
    socket::transact(
        NETLINK_GENERIC,
        &request(family, NLM_F_ACK, cmd, version, attrs)?,
    )
}

/// The id of the family `name` (`ethtool`, …) in the calling thread's namespace.
pub fn family_id(name: &str) -> io::Result<u16> {
    let answer = call(
        GENL_ID_CTRL,
        CTRL_CMD_GETFAMILY,
        CTRL_VERSION,
        &[Attr::Str(CTRL_ATTR_FAMILY_NAME, name)],
    )?;
    family_id_in(&answer, name)
}

/// The family id in the controller's answer about `name`.
fn family_id_in(answer: &[Message], name: &str) -> io::Result<u16> {
    for m in answer {
        let attrs = attr::parse(attributes(m))?;
        if let Some(id) = attr::find(&attrs, CTRL_ATTR_FAMILY_ID).and_then(attr::u16_value) {
            return Ok(id);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("the kernel has no {name} generic netlink family"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_family_id_is_read_from_the_controllers_answer() {
        let req = request(
            GENL_ID_CTRL,
            NLM_F_ACK,
            CTRL_CMD_GETFAMILY,
            1,
            &[Attr::Str(CTRL_ATTR_FAMILY_NAME, "ethtool")],
        )
        .unwrap();
        assert_eq!(&req[16..20], &[CTRL_CMD_GETFAMILY, 1, 0, 0]);
        assert_eq!(&req[20..24], &[12, 0, 2, 0]);
        assert_eq!(&req[24..32], b"ethtool\0");

        // The answer: generic header, name, then the id (u16, padded).
        let mut payload = vec![1, 2, 0, 0];
        Attr::Str(CTRL_ATTR_FAMILY_NAME, "ethtool")
            .encode(&mut payload)
            .unwrap();
        payload.extend_from_slice(&[6, 0, 1, 0, 0x15, 0, 0, 0]);
        let answer = [Message {
            kind: GENL_ID_CTRL,
            payload,
        }];
        assert_eq!(family_id_in(&answer, "ethtool").unwrap(), 0x15);

        let e = family_id_in(&[], "ethtool").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("ethtool"), "{e}");
        // A message shorter than its generic header has no attributes.
        let bare = [Message {
            kind: GENL_ID_CTRL,
            payload: vec![1],
        }];
        assert!(family_id_in(&bare, "ethtool").is_err());
    }

    #[test]
    fn this_kernel_has_the_controller_and_ethtool_families() {
        // The controller answers in every namespace; ethtool netlink is in every kernel since
        // 5.6. An error here is the kernel's, not a decoding slip.
        match family_id("ethtool") {
            Ok(id) => assert!(id > GENL_ID_CTRL, "{id}"),
            Err(e) => assert_ne!(e.kind(), io::ErrorKind::InvalidData, "{e}"),
        }
        let e = family_id("dranet-no-such-family").unwrap_err();
        assert_ne!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }
}
