//! Ethtool features and private flags over generic netlink (the `ethtool` family), without
//! the `ethtool` binary: what a claim's `ethtool` config sets on a NIC in the pod, and what
//! detach puts back.
//!
//! Feature names are the kernel's (`tx-tcp-segmentation`, `rx-gro`, …); the short names of the
//! `ethtool -K` command (`tso`, `gro`, `sg`, …) are translated. A name the device does not know,
//! or a feature it cannot change, is an error naming it.

use std::collections::BTreeMap;
use std::io;

use crate::netns::Netns;
use crate::{Error, Result};

const NETLINK_GENERIC: isize = 16;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const ETHTOOL_GENL_VERSION: u8 = 1;

const ETHTOOL_MSG_FEATURES_GET: u8 = 11;
const ETHTOOL_MSG_FEATURES_SET: u8 = 12;
const ETHTOOL_MSG_PRIVFLAGS_GET: u8 = 13;
const ETHTOOL_MSG_PRIVFLAGS_SET: u8 = 14;

const ETHTOOL_A_HEADER_DEV_NAME: u16 = 2;
const ETHTOOL_A_HEADER_FLAGS: u16 = 3;
/// `ETHTOOL_FLAG_OMIT_REPLY`: no reply message to a SET, only the ack.
const ETHTOOL_FLAG_OMIT_REPLY: u32 = 1 << 1;

const ETHTOOL_A_FEATURES_HEADER: u16 = 1;
const ETHTOOL_A_FEATURES_HW: u16 = 2;
const ETHTOOL_A_FEATURES_WANTED: u16 = 3;
const ETHTOOL_A_FEATURES_ACTIVE: u16 = 4;
const ETHTOOL_A_PRIVFLAGS_HEADER: u16 = 1;
const ETHTOOL_A_PRIVFLAGS_FLAGS: u16 = 2;

const ETHTOOL_A_BITSET_NOMASK: u16 = 1;
const ETHTOOL_A_BITSET_BITS: u16 = 3;
const ETHTOOL_A_BITSET_BITS_BIT: u16 = 1;
const ETHTOOL_A_BITSET_BIT_NAME: u16 = 2;
const ETHTOOL_A_BITSET_BIT_VALUE: u16 = 3;

const NLA_F_NESTED: u16 = 1 << 15;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;

/// The `ethtool -K` short names and the kernel features each stands for.
pub const LEGACY_NAMES: &[(&str, &[&str])] = &[
    ("rx", &["rx-checksum"]),
    (
        "tx",
        &[
            "tx-checksum-ipv4",
            "tx-checksum-ip-generic",
            "tx-checksum-ipv6",
            "tx-checksum-fcoe-crc",
            "tx-checksum-sctp",
        ],
    ),
    ("sg", &["tx-scatter-gather", "tx-scatter-gather-fraglist"]),
    (
        "tso",
        &[
            "tx-tcp-segmentation",
            "tx-tcp-ecn-segmentation",
            "tx-tcp-mangleid-segmentation",
            "tx-tcp6-segmentation",
        ],
    ),
    ("ufo", &["tx-udp-fragmentation"]),
    ("gso", &["tx-generic-segmentation"]),
    ("gro", &["rx-gro"]),
    ("lro", &["rx-lro"]),
    ("rxvlan", &["rx-vlan-hw-parse"]),
    ("txvlan", &["tx-vlan-hw-insert"]),
    ("ntuple", &["rx-ntuple-filter"]),
    ("rxhash", &["rx-hashing"]),
];

/// A device's features: which it can change, and which are on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Features {
    /// Features the device lets the user change.
    pub changeable: Vec<String>,
    /// Features currently on.
    pub active: Vec<String>,
}

impl Features {
    /// Whether `name` is on.
    pub fn is_on(&self, name: &str) -> bool {
        self.active.iter().any(|a| a == name)
    }
}

/// Expands `ethtool -K` short names into kernel feature names (other names pass through) and
/// checks each against what the device can change. The result is what to set.
pub fn resolve(
    wanted: &BTreeMap<String, bool>,
    f: &Features,
) -> std::result::Result<BTreeMap<String, bool>, String> {
    let mut out = BTreeMap::new();
    for (name, on) in wanted {
        let names: Vec<&str> = match LEGACY_NAMES.iter().find(|(short, _)| *short == name) {
            // Only the parts the device has: `tso` on a NIC without tx-tcp6-segmentation.
            Some((_, full)) => {
                let have: Vec<&str> = full
                    .iter()
                    .copied()
                    .filter(|n| f.changeable.iter().any(|c| c == n))
                    .collect();
                if have.is_empty() {
                    return Err(format!(
                        "ethtool feature {name:?} ({}) cannot be changed on this device",
                        full.join(", ")
                    ));
                }
                have
            }
            None => {
                if !f.changeable.iter().any(|c| c == name) {
                    return Err(format!(
                        "ethtool feature {name:?} is unknown or cannot be changed on this device"
                    ));
                }
                vec![name.as_str()]
            }
        };
        for n in names {
            out.insert(n.to_string(), *on);
        }
    }
    Ok(out)
}

fn nla(kind: u16, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + data.len() + 3);
    out.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(data);
    while out.len() % 4 != 0 {
        out.push(0);
    }
    out
}

fn nested(kind: u16, children: &[Vec<u8>]) -> Vec<u8> {
    nla(kind | NLA_F_NESTED, &children.concat())
}

fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// One generic netlink request: header, genl header (`cmd`, `version`), attributes.
pub fn genl_message(family: u16, flags: u16, cmd: u8, version: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
    let body = attrs.concat();
    let len = 16 + 4 + body.len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&family.to_ne_bytes());
    out.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    out.extend_from_slice(&1u32.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&[cmd, version, 0, 0]);
    out.extend_from_slice(&body);
    out
}

/// The attributes in `buf` as `(type without flags, payload)`; malformed input is an error.
pub fn parse_attrs(mut buf: &[u8]) -> io::Result<Vec<(u16, &[u8])>> {
    let mut out = Vec::new();
    while buf.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([buf[0], buf[1]]));
        let kind = u16::from_ne_bytes([buf[2], buf[3]]) & 0x3fff;
        if len < 4 || len > buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "netlink attribute length out of bounds",
            ));
        }
        out.push((kind, &buf[4..len]));
        buf = &buf[((len + 3) & !3).min(buf.len())..];
    }
    Ok(out)
}

/// Sends `req` on a generic netlink socket of the calling thread's namespace; returns the
/// payloads (after the genl header) of the answers, or the kernel's error.
fn transact(req: &[u8]) -> io::Result<Vec<Vec<u8>>> {
    let sock = crate::rdma::send_request(NETLINK_GENERIC, req)?;
    let mut out = Vec::new();
    loop {
        let (buf, _) = sock.recv_from_full()?;
        let mut b = &buf[..];
        if b.is_empty() {
            return Ok(out);
        }
        while b.len() >= 16 {
            let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
            let kind = u16::from_ne_bytes([b[4], b[5]]);
            if len < 16 || len > b.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "netlink message length out of bounds",
                ));
            }
            let payload = &b[16..len];
            match kind {
                NLMSG_ERROR => {
                    let code = payload
                        .get(0..4)
                        .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                        .unwrap_or(-libc_einval());
                    if code != 0 {
                        return Err(io::Error::from_raw_os_error(-code));
                    }
                    return Ok(out);
                }
                NLMSG_DONE => return Ok(out),
                _ => out.push(payload.get(4..).unwrap_or(&[]).to_vec()),
            }
            b = &b[((len + 3) & !3).min(b.len())..];
        }
    }
}

const fn libc_einval() -> i32 {
    22
}

fn family_id() -> io::Result<u16> {
    let req = genl_message(
        GENL_ID_CTRL,
        NLM_F_ACK,
        CTRL_CMD_GETFAMILY,
        1,
        &[nla(CTRL_ATTR_FAMILY_NAME, &cstr("ethtool"))],
    );
    for payload in transact(&req)? {
        for (k, v) in parse_attrs(&payload)? {
            if k == CTRL_ATTR_FAMILY_ID && v.len() >= 2 {
                return Ok(u16::from_ne_bytes([v[0], v[1]]));
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        "the kernel has no ethtool netlink family",
    ))
}

/// One request to the ethtool family in the calling thread's namespace.
fn ethtool_request(cmd: u8, attrs: &[Vec<u8>]) -> io::Result<Vec<Vec<u8>>> {
    let req = genl_message(family_id()?, NLM_F_ACK, cmd, ETHTOOL_GENL_VERSION, attrs);
    transact(&req)
}

fn header(kind: u16, dev: &str, flags: u32) -> Vec<u8> {
    let mut children = vec![nla(ETHTOOL_A_HEADER_DEV_NAME, &cstr(dev))];
    if flags != 0 {
        children.push(nla(ETHTOOL_A_HEADER_FLAGS, &flags.to_ne_bytes()));
    }
    nested(kind, &children)
}

/// Every bit a verbose bitset lists, with whether it is set (with NOMASK every listed bit is
/// set; otherwise those with the VALUE flag).
fn bitset_bits(bitset: &[u8]) -> io::Result<Vec<(String, bool)>> {
    let attrs = parse_attrs(bitset)?;
    let nomask = attrs.iter().any(|(k, _)| *k == ETHTOOL_A_BITSET_NOMASK);
    let mut out = Vec::new();
    for (k, bits) in attrs {
        if k != ETHTOOL_A_BITSET_BITS {
            continue;
        }
        for (bk, bit) in parse_attrs(bits)? {
            if bk != ETHTOOL_A_BITSET_BITS_BIT {
                continue;
            }
            let fields = parse_attrs(bit)?;
            let name = fields
                .iter()
                .find(|(k, _)| *k == ETHTOOL_A_BITSET_BIT_NAME)
                .map(|(_, v)| {
                    String::from_utf8_lossy(v.split(|b| *b == 0).next().unwrap_or(&[])).into_owned()
                });
            let on = nomask || fields.iter().any(|(k, _)| *k == ETHTOOL_A_BITSET_BIT_VALUE);
            if let Some(n) = name {
                out.push((n, on));
            }
        }
    }
    Ok(out)
}

/// Names of the bits set in a verbose bitset.
fn bitset_names(bitset: &[u8]) -> io::Result<Vec<String>> {
    Ok(bitset_bits(bitset)?
        .into_iter()
        .filter_map(|(n, on)| on.then_some(n))
        .collect())
}

/// A verbose bitset that sets the named bits on or off and leaves the rest alone.
fn bitset_change(kind: u16, changes: &BTreeMap<String, bool>) -> Vec<u8> {
    let bits: Vec<Vec<u8>> = changes
        .iter()
        .map(|(name, on)| {
            let mut f = vec![nla(ETHTOOL_A_BITSET_BIT_NAME, &cstr(name))];
            if *on {
                f.push(nla(ETHTOOL_A_BITSET_BIT_VALUE, &[]));
            }
            nested(ETHTOOL_A_BITSET_BITS_BIT, &f)
        })
        .collect();
    nested(kind, &[nested(ETHTOOL_A_BITSET_BITS, &bits)])
}

fn err(dev: &str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Ethtool(format!("{dev}: {what}: {e}"))
}

/// The features of `dev` as seen in `ns`.
pub fn features(ns: &Netns, dev: &str) -> Result<Features> {
    ns.run(|| -> io::Result<Features> {
        let answers = ethtool_request(
            ETHTOOL_MSG_FEATURES_GET,
            &[header(ETHTOOL_A_FEATURES_HEADER, dev, 0)],
        )?;
        let mut f = Features::default();
        for payload in answers {
            for (k, v) in parse_attrs(&payload)? {
                match k {
                    ETHTOOL_A_FEATURES_HW => f.changeable = bitset_names(v)?,
                    ETHTOOL_A_FEATURES_ACTIVE => f.active = bitset_names(v)?,
                    _ => {}
                }
            }
        }
        Ok(f)
    })?
    .map_err(|e| err(dev, "read features", e))
}

/// Sets features of `dev` in `ns` (kernel names, as [`resolve`] gives) and checks they took.
pub fn set_features(ns: &Netns, dev: &str, changes: &BTreeMap<String, bool>) -> Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    ns.run(|| -> io::Result<()> {
        ethtool_request(
            ETHTOOL_MSG_FEATURES_SET,
            &[
                header(ETHTOOL_A_FEATURES_HEADER, dev, ETHTOOL_FLAG_OMIT_REPLY),
                bitset_change(ETHTOOL_A_FEATURES_WANTED, changes),
            ],
        )?;
        Ok(())
    })?
    .map_err(|e| err(dev, "set features", e))?;
    // The kernel accepts a wish it cannot grant (a feature that depends on another): check.
    let now = features(ns, dev)?;
    let missed: Vec<String> = changes
        .iter()
        .filter(|(n, on)| now.is_on(n) != **on)
        .map(|(n, on)| format!("{n} {}", if *on { "on" } else { "off" }))
        .collect();
    if missed.is_empty() {
        Ok(())
    } else {
        Err(err(
            dev,
            "features the device did not take",
            missed.join(", "),
        ))
    }
}

/// The private flags of `dev` in `ns`: all names, and those on.
pub fn private_flags(ns: &Netns, dev: &str) -> Result<(Vec<String>, Vec<String>)> {
    ns.run(|| -> io::Result<(Vec<String>, Vec<String>)> {
        let answers = ethtool_request(
            ETHTOOL_MSG_PRIVFLAGS_GET,
            &[header(ETHTOOL_A_PRIVFLAGS_HEADER, dev, 0)],
        )?;
        let (mut all, mut on) = (Vec::new(), Vec::new());
        for payload in answers {
            for (k, v) in parse_attrs(&payload)? {
                if k == ETHTOOL_A_PRIVFLAGS_FLAGS {
                    // Every listed bit, set or not, is a flag the driver has.
                    for (name, set) in bitset_bits(v)? {
                        if set {
                            on.push(name.clone());
                        }
                        all.push(name);
                    }
                }
            }
        }
        Ok((all, on))
    })?
    .or_else(|e| {
        // EOPNOTSUPP: a driver without private flags.
        if e.raw_os_error() == Some(95) {
            Ok((Vec::new(), Vec::new()))
        } else {
            Err(err(dev, "read private flags", e))
        }
    })
}

/// Sets private flags of `dev` in `ns`; a name the driver does not have is an error naming it.
pub fn set_private_flags(ns: &Netns, dev: &str, changes: &BTreeMap<String, bool>) -> Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let (all, _) = private_flags(ns, dev)?;
    if let Some(unknown) = changes.keys().find(|k| !all.contains(k)) {
        return Err(err(
            dev,
            "private flags",
            format!(
                "{unknown:?} is not a private flag of this device (it has: {})",
                if all.is_empty() {
                    "none".to_string()
                } else {
                    all.join(", ")
                }
            ),
        ));
    }
    ns.run(|| -> io::Result<()> {
        ethtool_request(
            ETHTOOL_MSG_PRIVFLAGS_SET,
            &[
                header(ETHTOOL_A_PRIVFLAGS_HEADER, dev, ETHTOOL_FLAG_OMIT_REPLY),
                bitset_change(ETHTOOL_A_PRIVFLAGS_FLAGS, changes),
            ],
        )?;
        Ok(())
    })?
    .map_err(|e| err(dev, "set private flags", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feats(changeable: &[&str]) -> Features {
        Features {
            changeable: changeable.iter().map(|s| s.to_string()).collect(),
            active: Vec::new(),
        }
    }

    #[test]
    fn short_names_expand_to_what_the_device_has_and_unknown_names_are_named() {
        let f = feats(&["tx-tcp-segmentation", "tx-tcp6-segmentation", "rx-gro"]);
        let w: BTreeMap<String, bool> =
            [("tso".to_string(), false), ("rx-gro".to_string(), true)].into();
        let r = resolve(&w, &f).unwrap();
        assert_eq!(
            r,
            [
                ("rx-gro".to_string(), true),
                ("tx-tcp-segmentation".to_string(), false),
                ("tx-tcp6-segmentation".to_string(), false)
            ]
            .into()
        );
        let bad: BTreeMap<String, bool> = [("tx-warp-drive".to_string(), true)].into();
        let e = resolve(&bad, &f).unwrap_err();
        assert!(e.contains("tx-warp-drive"), "{e}");
        let fixed: BTreeMap<String, bool> = [("lro".to_string(), true)].into();
        let e = resolve(&fixed, &f).unwrap_err();
        assert!(e.contains("lro") && e.contains("rx-lro"), "{e}");
    }

    #[test]
    fn bitsets_encode_and_decode() {
        let changes: BTreeMap<String, bool> =
            [("rx-gro".to_string(), true), ("tx-sg".to_string(), false)].into();
        let b = bitset_change(ETHTOOL_A_FEATURES_WANTED, &changes);
        let top = parse_attrs(&b).unwrap();
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].0, ETHTOOL_A_FEATURES_WANTED);
        // Only bits with the VALUE flag count as on in a bitset with a mask.
        assert_eq!(bitset_names(top[0].1).unwrap(), vec!["rx-gro".to_string()]);
        assert!(
            parse_attrs(&[8, 0, 1, 0]).is_err(),
            "length beyond the buffer"
        );
    }
}
