//! Ethtool features and private flags over generic netlink (the `ethtool` family), without
//! the `ethtool` binary: what a claim's `ethtool` config sets on a NIC in the pod, and what
//! detach puts back.
//!
//! Feature names are the kernel's (`tx-tcp-segmentation`, `rx-gro`, …); the names of the
//! `ethtool -K` command, short (`tso`, `gro`) and long (`tcp-segmentation-offload`,
//! `generic-receive-offload`, as `ethtool -k` prints them and upstream's claims use), are
//! translated. A fixed feature asked for at the value it has is left alone; a name the device
//! does not know, or a change it cannot make, is an error naming it.

use std::collections::BTreeMap;
use std::fmt;
use std::io;

use crate::netlink::{Attr, Message, attr, genl};
use crate::netns::Netns;
use crate::{Error, Result};

const ETHTOOL_GENL_NAME: &str = "ethtool";
const ETHTOOL_GENL_VERSION: u8 = 1;

const ETHTOOL_MSG_STRSET_GET: u8 = 1;
const ETHTOOL_MSG_FEATURES_GET: u8 = 11;
const ETHTOOL_MSG_FEATURES_SET: u8 = 12;
const ETHTOOL_MSG_PRIVFLAGS_GET: u8 = 13;
const ETHTOOL_MSG_PRIVFLAGS_SET: u8 = 14;

const ETHTOOL_A_HEADER_DEV_NAME: u16 = 2;
const ETHTOOL_A_HEADER_FLAGS: u16 = 3;
/// `ETHTOOL_FLAG_OMIT_REPLY`: no reply message to a SET, only the ack.
const ETHTOOL_FLAG_OMIT_REPLY: u32 = 1 << 1;

const ETHTOOL_A_STRSET_HEADER: u16 = 1;
const ETHTOOL_A_STRSET_STRINGSETS: u16 = 2;
const ETHTOOL_A_STRINGSETS_STRINGSET: u16 = 1;
const ETHTOOL_A_STRINGSET_ID: u16 = 1;
const ETHTOOL_A_STRINGSET_STRINGS: u16 = 3;
const ETHTOOL_A_STRINGS_STRING: u16 = 1;
const ETHTOOL_A_STRING_VALUE: u16 = 2;
/// `ETH_SS_FEATURES`: the names of every netdev feature the kernel has.
const ETH_SS_FEATURES: u32 = 4;

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

/// The `ethtool -K` names, short and long, and the pattern of the kernel features each stands
/// for, as ethtool's `off_flag_def` has them (`*` stands for any run of characters): `tso` is
/// every `tx-tcp*-segmentation` the kernel has, `tx-tcp-accecn-segmentation` (6.18) included.
pub const LEGACY_NAMES: &[(&str, &str, &str)] = &[
    ("rx", "rx-checksumming", "rx-checksum"),
    ("tx", "tx-checksumming", "tx-checksum-*"),
    ("sg", "scatter-gather", "tx-scatter-gather*"),
    ("tso", "tcp-segmentation-offload", "tx-tcp*-segmentation"),
    ("ufo", "udp-fragmentation-offload", "tx-udp-fragmentation"),
    (
        "gso",
        "generic-segmentation-offload",
        "tx-generic-segmentation",
    ),
    ("gro", "generic-receive-offload", "rx-gro"),
    ("lro", "large-receive-offload", "rx-lro"),
    ("rxvlan", "rx-vlan-offload", "rx-vlan-hw-parse"),
    ("txvlan", "tx-vlan-offload", "tx-vlan-hw-insert"),
    ("ntuple", "ntuple-filters", "rx-ntuple-filter"),
    ("rxhash", "receive-hashing", "rx-hashing"),
];

/// Whether the kernel feature `name` matches an [`LEGACY_NAMES`] pattern (at most one `*`).
fn glob_matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        Some((head, tail)) => {
            name.len() >= head.len() + tail.len() && name.starts_with(head) && name.ends_with(tail)
        }
        None => pattern == name,
    }
}

/// A device's features: which it can change, and which are on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Features {
    /// Every feature name the kernel has (its `ETH_SS_FEATURES` strings), changeable or not.
    pub known: Vec<String>,
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

    /// Whether `name` is a kernel feature name.
    pub fn knows(&self, name: &str) -> bool {
        [&self.known, &self.changeable, &self.active]
            .iter()
            .any(|l| l.iter().any(|n| n == name))
    }

    /// Every feature name known, each once.
    fn names(&self) -> impl Iterator<Item = &str> {
        let all: std::collections::BTreeSet<&str> = [&self.known, &self.changeable, &self.active]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        all.into_iter()
    }

    /// Whether the device lets the user change `name`.
    pub fn is_changeable(&self, name: &str) -> bool {
        self.changeable.iter().any(|n| n == name)
    }
}

/// A feature name a claim asks for that the device cannot change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureError {
    /// A feature (or every kernel feature an `ethtool -K` name stands for) that the device
    /// does not let the user change, asked for at a value it does not have.
    #[error(
        "ethtool feature {name:?} ({}) is fixed on this device and cannot be turned {}",
        features.join(", "),
        if *on { "on" } else { "off" }
    )]
    Fixed {
        /// The name asked for (`lro`, `large-receive-offload`, `rx-lro`).
        name: String,
        /// The kernel features it stands for.
        features: Vec<String>,
        /// The value asked for.
        on: bool,
    },
    /// A name that is neither a kernel feature nor an `ethtool -K` name of one the device has.
    #[error("ethtool feature {name:?} is unknown on this device")]
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

/// Expands `ethtool -K` names (short and long) into kernel feature names (other names pass
/// through) and checks each against the device. The result is what to set: the changeable
/// features asked for. A fixed feature already at the value asked for is left out (nothing to
/// do, as upstream and `ethtool -K` treat it); one at the other value is an error.
pub fn resolve(
    wanted: &BTreeMap<String, bool>,
    f: &Features,
) -> std::result::Result<BTreeMap<String, bool>, FeatureError> {
    let mut out = BTreeMap::new();
    for (name, on) in wanted {
        let parts: Vec<&str> = match LEGACY_NAMES
            .iter()
            .find(|(short, long, _)| short == name || long == name)
        {
            // The features of the running kernel that match: `tso` on a kernel without
            // tx-tcp-accecn-segmentation has one part fewer.
            Some((_, _, pattern)) => f.names().filter(|n| glob_matches(pattern, n)).collect(),
            None if f.knows(name) => vec![name.as_str()],
            None => Vec::new(),
        };
        if parts.is_empty() {
            return Err(FeatureError::Unknown { name: name.clone() });
        }
        let changeable: Vec<&str> = parts
            .iter()
            .copied()
            .filter(|n| f.is_changeable(n))
            .collect();
        if changeable.is_empty() {
            if parts.iter().all(|n| f.is_on(n) == *on) {
                continue;
            }
            return Err(FeatureError::Fixed {
                name: name.clone(),
                features: parts.iter().map(|n| n.to_string()).collect(),
                on: *on,
            });
        }
        for n in changeable {
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

/// Every netdev feature name of the running kernel (the `ETH_SS_FEATURES` string set).
fn feature_names() -> io::Result<Vec<String>> {
    let answer = call(
        ETHTOOL_MSG_STRSET_GET,
        &[
            Attr::Nested(ETHTOOL_A_STRSET_HEADER, Vec::new()),
            Attr::Nested(
                ETHTOOL_A_STRSET_STRINGSETS,
                vec![Attr::Nested(
                    ETHTOOL_A_STRINGSETS_STRINGSET,
                    vec![Attr::U32(ETHTOOL_A_STRINGSET_ID, ETH_SS_FEATURES)],
                )],
            ),
        ],
    )?;
    let mut names = Vec::new();
    for m in &answer {
        for (k, sets) in attr::parse(genl::attributes(m))? {
            if k != ETHTOOL_A_STRSET_STRINGSETS {
                continue;
            }
            for (_, set) in attr::parse(sets)? {
                let set = attr::parse(set)?;
                if attr::find(&set, ETHTOOL_A_STRINGSET_ID).and_then(attr::u32_value)
                    != Some(ETH_SS_FEATURES)
                {
                    continue;
                }
                let Some(strings) = attr::find(&set, ETHTOOL_A_STRINGSET_STRINGS) else {
                    continue;
                };
                for (sk, string) in attr::parse(strings)? {
                    if sk != ETHTOOL_A_STRINGS_STRING {
                        continue;
                    }
                    if let Some(v) = attr::find(&attr::parse(string)?, ETHTOOL_A_STRING_VALUE) {
                        names.push(attr::string_value(v));
                    }
                }
            }
        }
    }
    Ok(names)
}

/// The features of `dev` as seen in `ns`.
pub fn features(ns: &Netns, dev: &str) -> Result<Features> {
    ns.run(|| -> io::Result<Features> {
        let answer = call(
            ETHTOOL_MSG_FEATURES_GET,
            &[header(ETHTOOL_A_FEATURES_HEADER, dev, 0)],
        )?;
        let mut f = Features {
            known: feature_names()?,
            ..Features::default()
        };
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
            known: ["rx-lro", "tx-tcp-ecn-segmentation"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            changeable: changeable.iter().map(|s| s.to_string()).collect(),
            active: vec!["tx-tcp-ecn-segmentation".into()],
        }
    }

    fn ask(pairs: &[(&str, bool)]) -> BTreeMap<String, bool> {
        pairs.iter().map(|(n, on)| (n.to_string(), *on)).collect()
    }

    #[test]
    fn short_names_expand_to_what_the_device_has_and_unknown_names_are_named() {
        let f = feats(&["tx-tcp-segmentation", "tx-tcp6-segmentation", "rx-gro"]);
        let r = resolve(&ask(&[("tso", false), ("rx-gro", true)]), &f).unwrap();
        assert_eq!(
            r,
            ask(&[
                ("rx-gro", true),
                ("tx-tcp-segmentation", false),
                ("tx-tcp6-segmentation", false)
            ])
        );
        let e = resolve(&ask(&[("tx-warp-drive", true)]), &f)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tx-warp-drive") && e.contains("unknown"), "{e}");
        let e = resolve(&ask(&[("lro", true)]), &f).unwrap_err();
        assert_eq!(
            e,
            FeatureError::Fixed {
                name: "lro".into(),
                features: vec!["rx-lro".into()],
                on: true,
            }
        );
        let e = e.to_string();
        assert!(
            e.contains("\"lro\" (rx-lro) is fixed") && e.ends_with("turned on"),
            "{e}"
        );
    }

    #[test]
    fn long_names_as_upstream_claims_spell_them_resolve_like_short_ones() {
        let f = feats(&["tx-tcp-segmentation", "tx-tcp6-segmentation", "rx-gro"]);
        let long = ask(&[
            ("tcp-segmentation-offload", false),
            ("generic-receive-offload", true),
        ]);
        let short = ask(&[("tso", false), ("gro", true)]);
        assert_eq!(resolve(&long, &f).unwrap(), resolve(&short, &f).unwrap());
        assert!(!resolve(&long, &f).unwrap().is_empty());
    }

    #[test]
    fn legacy_names_stand_for_every_kernel_feature_their_pattern_matches() {
        // 6.18 added tx-tcp-accecn-segmentation: `ethtool -k` counts it in
        // tcp-segmentation-offload, so turning that off must turn it off too.
        let tcp = [
            "tx-tcp-segmentation",
            "tx-tcp-ecn-segmentation",
            "tx-tcp-mangleid-segmentation",
            "tx-tcp6-segmentation",
            "tx-tcp-accecn-segmentation",
        ];
        let f = Features {
            known: tcp.iter().map(|s| s.to_string()).collect(),
            changeable: tcp.iter().map(|s| s.to_string()).collect(),
            active: Vec::new(),
        };
        let want: BTreeMap<String, bool> = tcp.iter().map(|n| (n.to_string(), false)).collect();
        assert_eq!(
            resolve(&ask(&[("tcp-segmentation-offload", false)]), &f).unwrap(),
            want
        );
        assert!(glob_matches("tx-checksum-*", "tx-checksum-sctp"));
        assert!(!glob_matches("tx-checksum-*", "tx-checksumming"));
        assert!(glob_matches("tx-scatter-gather*", "tx-scatter-gather"));
        assert!(!glob_matches("tx-tcp*-segmentation", "tx-udp-segmentation"));
        assert!(!glob_matches("rx-gro", "rx-gro-hw"));
    }

    #[test]
    fn a_fixed_feature_at_its_value_is_nothing_to_do_and_at_the_other_an_error() {
        let f = feats(&["rx-gro"]);
        // rx-lro is fixed off: off is a no-op, whatever the name.
        for name in ["lro", "large-receive-offload", "rx-lro"] {
            assert_eq!(resolve(&ask(&[(name, false)]), &f).unwrap(), ask(&[]));
            let e = resolve(&ask(&[(name, true)]), &f).unwrap_err();
            assert!(matches!(e, FeatureError::Fixed { on: true, .. }), "{e}");
        }
        // A fixed-on feature: on is a no-op.
        let e = ask(&[("tx-tcp-ecn-segmentation", true)]);
        assert_eq!(resolve(&e, &f).unwrap(), ask(&[]));
        assert!(resolve(&ask(&[("tx-tcp-ecn-segmentation", false)]), &f).is_err());
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
