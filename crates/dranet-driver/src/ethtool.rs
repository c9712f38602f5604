//! Ethtool features and private flags over generic netlink (the `ethtool` family), without
//! the `ethtool` binary: what a claim's `ethtool` config sets on a NIC in the pod, and what
//! detach puts back.
//!
//! Feature names are the kernel's (`tx-tcp-segmentation`, `rx-gro`, …); the short names of the
//! `ethtool -K` command (`tso`, `gro`, `sg`, …) are translated. A name the device does not know,
//! or a feature it cannot change, is an error naming it.

use std::collections::BTreeMap;
use std::fmt;
use std::io;

use crate::netlink::{Attr, Message, attr, genl};
use crate::netns::Netns;
use crate::{Error, Result};

const ETHTOOL_GENL_NAME: &str = "ethtool";
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

/// A feature name a claim asks for that the device cannot change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureError {
    /// An `ethtool -K` short name none of whose kernel features the device can change.
    #[error("ethtool feature {name:?} ({}) cannot be changed on this device", features.join(", "))]
    Fixed {
        /// The short name (`lro`).
        name: String,
        /// The kernel features it stands for.
        features: &'static [&'static str],
    },
    /// A kernel feature name the device does not have, or cannot change.
    #[error("ethtool feature {name:?} is unknown or cannot be changed on this device")]
    Unknown {
        /// The name.
        name: String,
    },
    /// A private flag the device does not have.
    #[error(
        "{name:?} is not a private flag of this device (it has: {})",
        if has.is_empty() { "none".to_string() } else { has.join(", ") }
    )]
    UnknownPrivateFlag {
        /// The name.
        name: String,
        /// The device's private flags.
        has: Vec<String>,
    },
}

/// Checks that every private flag in `wanted` is one of the device's (`has`, as
/// [`private_flags`] lists them).
pub fn check_private_flags(
    wanted: &BTreeMap<String, bool>,
    has: &[String],
) -> std::result::Result<(), FeatureError> {
    match wanted.keys().find(|k| !has.contains(k)) {
        Some(name) => Err(FeatureError::UnknownPrivateFlag {
            name: name.clone(),
            has: has.to_vec(),
        }),
        None => Ok(()),
    }
}

/// What an ethtool call was doing when it failed ([`Error::Ethtool`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Reading the device's features.
    ReadFeatures,
    /// Setting features, and checking they took.
    SetFeatures,
    /// Reading the device's private flags.
    ReadPrivateFlags,
    /// Setting private flags.
    SetPrivateFlags,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::ReadFeatures => "read features",
            Operation::SetFeatures => "set features",
            Operation::ReadPrivateFlags => "read private flags",
            Operation::SetPrivateFlags => "set private flags",
        })
    }
}

/// Expands `ethtool -K` short names into kernel feature names (other names pass through) and
/// checks each against what the device can change. The result is what to set.
pub fn resolve(
    wanted: &BTreeMap<String, bool>,
    f: &Features,
) -> std::result::Result<BTreeMap<String, bool>, FeatureError> {
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
                    return Err(FeatureError::Fixed {
                        name: name.clone(),
                        features: full,
                    });
                }
                have
            }
            None => {
                if !f.changeable.iter().any(|c| c == name) {
                    return Err(FeatureError::Unknown { name: name.clone() });
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

/// One request to the ethtool family in the calling thread's namespace; the answer's
/// messages.
fn call(cmd: u8, attrs: &[Attr<'_>]) -> io::Result<Vec<Message>> {
    let family = genl::family_id(ETHTOOL_GENL_NAME)?;
    genl::call(family, cmd, ETHTOOL_GENL_VERSION, attrs)
}

/// The request header naming the device, with `ETHTOOL_FLAG_*` flags.
fn header(kind: u16, dev: &str, flags: u32) -> Attr<'_> {
    let mut children = vec![Attr::Str(ETHTOOL_A_HEADER_DEV_NAME, dev)];
    if flags != 0 {
        children.push(Attr::U32(ETHTOOL_A_HEADER_FLAGS, flags));
    }
    Attr::Nested(kind, children)
}

/// Every bit a verbose bitset lists, with whether it is set (with NOMASK every listed bit is
/// set; otherwise those with the VALUE flag).
fn bitset_bits(bitset: &[u8]) -> io::Result<Vec<(String, bool)>> {
    let attrs = attr::parse(bitset)?;
    let nomask = attrs.iter().any(|(k, _)| *k == ETHTOOL_A_BITSET_NOMASK);
    let mut out = Vec::new();
    for (k, bits) in attrs {
        if k != ETHTOOL_A_BITSET_BITS {
            continue;
        }
        for (bk, bit) in attr::parse(bits)? {
            if bk != ETHTOOL_A_BITSET_BITS_BIT {
                continue;
            }
            let fields = attr::parse(bit)?;
            let name = attr::find(&fields, ETHTOOL_A_BITSET_BIT_NAME).map(attr::string_value);
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
fn bitset_change(kind: u16, changes: &BTreeMap<String, bool>) -> Attr<'_> {
    let bits = changes
        .iter()
        .map(|(name, on)| {
            let mut f = vec![Attr::Str(ETHTOOL_A_BITSET_BIT_NAME, name)];
            if *on {
                f.push(Attr::Flag(ETHTOOL_A_BITSET_BIT_VALUE));
            }
            Attr::Nested(ETHTOOL_A_BITSET_BITS_BIT, f)
        })
        .collect();
    Attr::Nested(kind, vec![Attr::Nested(ETHTOOL_A_BITSET_BITS, bits)])
}

fn err(dev: &str, operation: Operation) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Ethtool {
        device: dev.to_string(),
        operation,
        source,
    }
}

/// The features of `dev` as seen in `ns`.
pub fn features(ns: &Netns, dev: &str) -> Result<Features> {
    ns.run(|| -> io::Result<Features> {
        let answer = call(
            ETHTOOL_MSG_FEATURES_GET,
            &[header(ETHTOOL_A_FEATURES_HEADER, dev, 0)],
        )?;
        let mut f = Features::default();
        for m in &answer {
            for (k, v) in attr::parse(genl::attributes(m))? {
                match k {
                    ETHTOOL_A_FEATURES_HW => f.changeable = bitset_names(v)?,
                    ETHTOOL_A_FEATURES_ACTIVE => f.active = bitset_names(v)?,
                    _ => {}
                }
            }
        }
        Ok(f)
    })?
    .map_err(err(dev, Operation::ReadFeatures))
}

/// Sets features of `dev` in `ns` (kernel names, as [`resolve`] gives) and checks they took.
pub fn set_features(ns: &Netns, dev: &str, changes: &BTreeMap<String, bool>) -> Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    ns.run(|| -> io::Result<()> {
        call(
            ETHTOOL_MSG_FEATURES_SET,
            &[
                header(ETHTOOL_A_FEATURES_HEADER, dev, ETHTOOL_FLAG_OMIT_REPLY),
                bitset_change(ETHTOOL_A_FEATURES_WANTED, changes),
            ],
        )?;
        Ok(())
    })?
    .map_err(err(dev, Operation::SetFeatures))?;
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
        Err(err(dev, Operation::SetFeatures)(io::Error::other(format!(
            "the device did not take {}",
            missed.join(", ")
        ))))
    }
}

/// The private flags of `dev` in `ns`: all names, and those on.
pub fn private_flags(ns: &Netns, dev: &str) -> Result<(Vec<String>, Vec<String>)> {
    ns.run(|| -> io::Result<(Vec<String>, Vec<String>)> {
        let answer = call(
            ETHTOOL_MSG_PRIVFLAGS_GET,
            &[header(ETHTOOL_A_PRIVFLAGS_HEADER, dev, 0)],
        )?;
        let (mut all, mut on) = (Vec::new(), Vec::new());
        for m in &answer {
            for (k, v) in attr::parse(genl::attributes(m))? {
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
            Err(err(dev, Operation::ReadPrivateFlags)(e))
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
        return Err(err(dev, Operation::SetPrivateFlags)(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{unknown:?} is not a private flag of this device (it has: {})",
                if all.is_empty() {
                    "none".to_string()
                } else {
                    all.join(", ")
                }
            ),
        )));
    }
    ns.run(|| -> io::Result<()> {
        call(
            ETHTOOL_MSG_PRIVFLAGS_SET,
            &[
                header(ETHTOOL_A_PRIVFLAGS_HEADER, dev, ETHTOOL_FLAG_OMIT_REPLY),
                bitset_change(ETHTOOL_A_PRIVFLAGS_FLAGS, changes),
            ],
        )?;
        Ok(())
    })?
    .map_err(err(dev, Operation::SetPrivateFlags))
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
        let e = resolve(&bad, &f).unwrap_err().to_string();
        assert!(e.contains("tx-warp-drive"), "{e}");
        let fixed: BTreeMap<String, bool> = [("lro".to_string(), true)].into();
        let e = resolve(&fixed, &f).unwrap_err();
        assert_eq!(
            e,
            FeatureError::Fixed {
                name: "lro".into(),
                features: &["rx-lro"]
            }
        );
        let e = e.to_string();
        assert!(e.contains("lro") && e.contains("rx-lro"), "{e}");
    }

    #[test]
    fn bitsets_encode_and_decode() {
        let changes: BTreeMap<String, bool> =
            [("rx-gro".to_string(), true), ("tx-sg".to_string(), false)].into();
        let mut b = Vec::new();
        bitset_change(ETHTOOL_A_FEATURES_WANTED, &changes)
            .encode(&mut b)
            .unwrap();
        let top = attr::parse(&b).unwrap();
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].0, ETHTOOL_A_FEATURES_WANTED);
        // Only bits with the VALUE flag count as on in a bitset with a mask.
        assert_eq!(bitset_names(top[0].1).unwrap(), vec!["rx-gro".to_string()]);
        assert_eq!(
            bitset_bits(top[0].1).unwrap(),
            [("rx-gro".to_string(), true), ("tx-sg".to_string(), false)]
        );
        // A bit cut off in its name is an error, not a panic.
        let cut = &top[0].1[..top[0].1.len() - 4];
        assert!(bitset_bits(cut).is_err());
    }

    #[test]
    fn errors_name_the_device_and_operation_and_keep_the_cause() {
        let e = err("eth3", Operation::SetFeatures)(io::Error::from_raw_os_error(1));
        let text = e.to_string();
        assert!(text.starts_with("ethtool: eth3: set features: "), "{text}");
        let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(source.and_then(io::Error::raw_os_error), Some(1));
    }
}
