//! DHCPv4 messages (RFC 2131 §2, options of RFC 2132 and RFC 3442): the BOOTP header, the magic
//! cookie and the options, encoded and decoded. Only what the client sends and reads; options
//! overloaded into `sname`/`file` (option 52) are not read.

use std::net::Ipv4Addr;

/// `op` of a client's message.
const BOOTREQUEST: u8 = 1;
/// `op` of a server's message.
const BOOTREPLY: u8 = 2;
/// `htype` of Ethernet.
const HTYPE_ETHER: u8 = 1;
/// The fixed header, up to and including `file`.
const HEADER: usize = 236;
/// RFC 2131 §3: the options start with 99.130.83.99.
const MAGIC_COOKIE: [u8; 4] = [99, 130, 83, 99];
/// The broadcast bit of `flags`: the client cannot receive unicast before it has an address.
pub(super) const FLAG_BROADCAST: u16 = 0x8000;

/// Option codes this client uses.
pub(super) mod code {
    pub const PAD: u8 = 0;
    pub const SUBNET_MASK: u8 = 1;
    pub const ROUTER: u8 = 3;
    pub const INTERFACE_MTU: u8 = 26;
    pub const REQUESTED_ADDRESS: u8 = 50;
    pub const LEASE_TIME: u8 = 51;
    pub const MESSAGE_TYPE: u8 = 53;
    pub const SERVER_ID: u8 = 54;
    pub const PARAMETER_LIST: u8 = 55;
    pub const MAX_MESSAGE_SIZE: u8 = 57;
    pub const RENEWAL_TIME: u8 = 58;
    pub const REBINDING_TIME: u8 = 59;
    pub const CLASSLESS_ROUTES: u8 = 121;
    pub const END: u8 = 255;
}

/// DHCP message types (option 53).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Discover = 1,
    Offer = 2,
    Request = 3,
    Ack = 5,
    Nak = 6,
    Release = 7,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Discover,
            2 => Kind::Offer,
            3 => Kind::Request,
            5 => Kind::Ack,
            6 => Kind::Nak,
            7 => Kind::Release,
            _ => return None,
        })
    }
}

/// One DHCP message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Message {
    pub reply: bool,
    pub xid: u32,
    pub secs: u16,
    pub flags: u16,
    pub ciaddr: Ipv4Addr,
    pub yiaddr: Ipv4Addr,
    pub chaddr: [u8; 6],
    /// In the order sent or received; one code may appear more than once (RFC 3396).
    pub options: Vec<(u8, Vec<u8>)>,
}

impl Message {
    /// A client's message of `kind`, its type option first.
    pub fn request(kind: Kind, xid: u32, chaddr: [u8; 6]) -> Message {
        Message {
            reply: false,
            xid,
            secs: 0,
            flags: 0,
            ciaddr: Ipv4Addr::UNSPECIFIED,
            yiaddr: Ipv4Addr::UNSPECIFIED,
            chaddr,
            options: vec![(code::MESSAGE_TYPE, vec![kind as u8])],
        }
    }

    /// Adds an option.
    pub fn with(mut self, code: u8, value: impl Into<Vec<u8>>) -> Message {
        self.options.push((code, value.into()));
        self
    }

    /// The wire form. An option longer than 255 bytes is split (RFC 3396).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER];
        b[0] = if self.reply { BOOTREPLY } else { BOOTREQUEST };
        b[1] = HTYPE_ETHER;
        b[2] = 6;
        b[4..8].copy_from_slice(&self.xid.to_be_bytes());
        b[8..10].copy_from_slice(&self.secs.to_be_bytes());
        b[10..12].copy_from_slice(&self.flags.to_be_bytes());
        b[12..16].copy_from_slice(&self.ciaddr.octets());
        b[16..20].copy_from_slice(&self.yiaddr.octets());
        b[28..34].copy_from_slice(&self.chaddr);
        b.extend_from_slice(&MAGIC_COOKIE);
        for (c, v) in &self.options {
            if v.is_empty() {
                b.extend_from_slice(&[*c, 0]);
            }
            for chunk in v.chunks(255) {
                b.push(*c);
                b.push(chunk.len() as u8);
                b.extend_from_slice(chunk);
            }
        }
        b.push(code::END);
        // RFC 2131 §2: a client must accept messages of 576 octets; old relays drop shorter
        // BOOTP messages than the 300 of RFC 951, so pad to that.
        if b.len() < 300 {
            b.resize(300, code::PAD);
        }
        b
    }

    /// Reads a message; `None` when it is not a DHCP message over Ethernet.
    pub fn decode(b: &[u8]) -> Option<Message> {
        if b.len() < HEADER + MAGIC_COOKIE.len()
            || b[1] != HTYPE_ETHER
            || b[2] != 6
            || b[HEADER..HEADER + 4] != MAGIC_COOKIE
        {
            return None;
        }
        let reply = match b[0] {
            BOOTREPLY => true,
            BOOTREQUEST => false,
            _ => return None,
        };
        let ip = |at: usize| Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3]);
        let mut options = Vec::new();
        let mut rest = &b[HEADER + 4..];
        while let Some((&c, tail)) = rest.split_first() {
            match c {
                code::PAD => rest = tail,
                code::END => break,
                _ => {
                    let (&len, tail) = tail.split_first()?;
                    let len = usize::from(len);
                    if tail.len() < len {
                        return None;
                    }
                    options.push((c, tail[..len].to_vec()));
                    rest = &tail[len..];
                }
            }
        }
        let mut chaddr = [0u8; 6];
        chaddr.copy_from_slice(&b[28..34]);
        Some(Message {
            reply,
            xid: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            secs: u16::from_be_bytes([b[8], b[9]]),
            flags: u16::from_be_bytes([b[10], b[11]]),
            ciaddr: ip(12),
            yiaddr: ip(16),
            chaddr,
            options,
        })
    }

    /// An option's value, its instances concatenated (RFC 3396).
    pub fn option(&self, code: u8) -> Option<Vec<u8>> {
        let mut found = None::<Vec<u8>>;
        for (c, v) in &self.options {
            if *c == code {
                found.get_or_insert_with(Vec::new).extend_from_slice(v);
            }
        }
        found
    }

    /// The message type.
    pub fn kind(&self) -> Option<Kind> {
        match self.option(code::MESSAGE_TYPE)?.as_slice() {
            [k] => Kind::from_u8(*k),
            _ => None,
        }
    }

    /// An option holding one IPv4 address (the first of a list).
    pub fn ipv4(&self, code: u8) -> Option<Ipv4Addr> {
        let v = self.option(code)?;
        let o: [u8; 4] = v.get(..4)?.try_into().ok()?;
        Some(Ipv4Addr::from(o))
    }

    /// An option holding one 32-bit number.
    pub fn u32(&self, code: u8) -> Option<u32> {
        let v = self.option(code)?;
        Some(u32::from_be_bytes(v.as_slice().try_into().ok()?))
    }

    /// An option holding one 16-bit number.
    pub fn u16(&self, code: u8) -> Option<u16> {
        let v = self.option(code)?;
        Some(u16::from_be_bytes(v.as_slice().try_into().ok()?))
    }
}

/// The routes of option 121 (RFC 3442): `(destination, prefix length, router)`; `None` when the
/// option is malformed (then RFC 3442 §3 says ignore it whole).
pub(super) fn classless_routes(v: &[u8]) -> Option<Vec<(Ipv4Addr, u8, Ipv4Addr)>> {
    let mut out = Vec::new();
    let mut rest = v;
    while let Some((&width, tail)) = rest.split_first() {
        if width > 32 {
            return None;
        }
        let significant = usize::from(width).div_ceil(8);
        if tail.len() < significant + 4 {
            return None;
        }
        let mut dst = [0u8; 4];
        dst[..significant].copy_from_slice(&tail[..significant]);
        let router: [u8; 4] = tail[significant..significant + 4].try_into().ok()?;
        out.push((Ipv4Addr::from(dst), width, Ipv4Addr::from(router)));
        rest = &tail[significant + 4..];
    }
    Some(out)
}

/// The prefix length of a subnet mask; `None` for a mask that is not contiguous ones.
pub(super) fn prefix_len(mask: Ipv4Addr) -> Option<u8> {
    let m = u32::from(mask);
    let len = m.leading_ones();
    (m.checked_shl(len).unwrap_or(0) == 0).then_some(len as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_and_decodes_a_request() {
        let m = Message::request(Kind::Request, 0xdead_beef, [2, 0, 0, 0, 0, 1])
            .with(code::REQUESTED_ADDRESS, [10, 0, 0, 5])
            .with(code::SERVER_ID, [10, 0, 0, 1]);
        let b = m.encode();
        assert!(b.len() >= 300);
        assert_eq!(b[0], BOOTREQUEST);
        assert_eq!(&b[236..240], &MAGIC_COOKIE);
        let back = Message::decode(&b).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.kind(), Some(Kind::Request));
        assert_eq!(back.ipv4(code::SERVER_ID), Some(Ipv4Addr::new(10, 0, 0, 1)));
    }

    #[test]
    fn long_options_split_and_join() {
        let long: Vec<u8> = (0..=255u8).chain(0..44).collect();
        let m = Message::request(Kind::Discover, 1, [0; 6]).with(200, long.clone());
        let back = Message::decode(&m.encode()).unwrap();
        assert_eq!(back.options.iter().filter(|(c, _)| *c == 200).count(), 2);
        assert_eq!(back.option(200), Some(long));
    }

    #[test]
    fn truncated_and_foreign_messages_are_not_read() {
        let b = Message::request(Kind::Discover, 1, [0; 6])
            .with(code::SERVER_ID, [1, 2, 3, 4])
            .encode();
        assert!(Message::decode(&b[..200]).is_none());
        let mut bad = b.clone();
        bad[236] = 0;
        assert!(Message::decode(&bad).is_none(), "no magic cookie");
        // An option whose length runs past the end.
        let mut cut = b[..240].to_vec();
        cut.extend_from_slice(&[code::SERVER_ID, 4, 1, 2]);
        assert!(Message::decode(&cut).is_none());
    }

    #[test]
    fn classless_routes_of_rfc_3442() {
        // 0/0 via 10.0.0.1; 10.17/16 via 10.0.0.2; 192.168.1.128/25 via 10.0.0.3
        let v = [
            0, 10, 0, 0, 1, 16, 10, 17, 10, 0, 0, 2, 25, 192, 168, 1, 128, 10, 0, 0, 3,
        ];
        assert_eq!(
            classless_routes(&v).unwrap(),
            vec![
                (Ipv4Addr::UNSPECIFIED, 0, Ipv4Addr::new(10, 0, 0, 1)),
                (Ipv4Addr::new(10, 17, 0, 0), 16, Ipv4Addr::new(10, 0, 0, 2)),
                (
                    Ipv4Addr::new(192, 168, 1, 128),
                    25,
                    Ipv4Addr::new(10, 0, 0, 3)
                ),
            ]
        );
        assert!(classless_routes(&[33, 1, 2, 3, 4, 5, 6, 7, 8]).is_none());
        assert!(
            classless_routes(&[8, 10, 1, 2]).is_none(),
            "router cut short"
        );
    }

    #[test]
    fn prefix_lengths() {
        assert_eq!(prefix_len(Ipv4Addr::new(255, 255, 255, 0)), Some(24));
        assert_eq!(prefix_len(Ipv4Addr::new(255, 255, 255, 255)), Some(32));
        assert_eq!(prefix_len(Ipv4Addr::UNSPECIFIED), Some(0));
        assert_eq!(prefix_len(Ipv4Addr::new(255, 0, 255, 0)), None);
    }
}
