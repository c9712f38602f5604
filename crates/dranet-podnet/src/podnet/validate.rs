//! What in a [`NetworkConfig`] cannot be applied, found before anything changes: the values the
//! kernel refuses (checked as the kernel checks them), the fields dranet-rs does not implement
//! yet, and the limits of the device itself. A driver runs [`check_config`] when it reads a
//! claim, and [`preflight`] (the device's limits and its ethtool names) and, for a child,
//! [`check_parent_addresses`] at prepare, so a claim's author sees the error on the claim;
//! [`PodNet::attach`](super::PodNet::attach) runs them again before its journal is written.
//!
//! Messages speak of the claim's fields (`interface.mtu`), never of the host.

use std::collections::BTreeMap;
use std::net::IpAddr;

use dranet_core::NetworkConfig;
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};

use super::messages::{parse_cidr, parse_mac};
use crate::ethtool::{self, FeatureError};
use crate::netns::Netns;

/// Why a configuration cannot be applied, in the claim's terms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigRefusal {
    /// A value the kernel or the device would refuse.
    #[error("{field}: {reason}")]
    Invalid {
        /// The field (`interface.name`, `routes[2]`).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An ethtool feature or private flag the device does not have or cannot change.
    #[error(transparent)]
    Ethtool(#[from] FeatureError),
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ConfigRefusal {
    ConfigRefusal::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

/// The kernel's `IFNAMSIZ` less its terminating NUL.
const IFNAME_MAX: usize = 15;
/// The kernel's `GRO_MAX_SIZE` (`8 * 65535`).
const GRO_MAX_SIZE: u32 = 8 * 65535;

/// Checks everything that does not depend on the device: the config's own rules
/// ([`NetworkConfig::validate`]) and what the kernel refuses of names, MACs, sizes and address
/// families.
pub fn check_config(c: &NetworkConfig) -> Result<(), ConfigRefusal> {
    c.validate().map_err(|e| match e {
        dranet_core::Error::InvalidConfig { field, reason } => invalid(field, reason),
        other => invalid("config", other.to_string()),
    })?;
    let iface = &c.interface;
    if !iface.name.is_empty() {
        check_ifname("interface.name", &iface.name)?;
    }
    if let Some(mac) = &iface.hardware_addr {
        check_unicast("interface.hardwareAddr", mac)?;
    }
    for (what, v) in [
        ("mtu", iface.mtu),
        ("gsoMaxSize", iface.gso_max_size),
        ("groMaxSize", iface.gro_max_size),
        ("gsoIPv4MaxSize", iface.gso_ipv4_max_size),
        ("groIPv4MaxSize", iface.gro_ipv4_max_size),
    ] {
        if let Some(v) = v
            && v < 0
        {
            return Err(invalid(
                format!("interface.{what}"),
                format!("{v} is negative"),
            ));
        }
    }
    for (what, v) in [
        ("groMaxSize", iface.gro_max_size),
        ("groIPv4MaxSize", iface.gro_ipv4_max_size),
    ] {
        if let Some(v) = v.and_then(|v| u32::try_from(v).ok())
            && v > GRO_MAX_SIZE
        {
            return Err(invalid(
                format!("interface.{what}"),
                format!("{v} is above the kernel's maximum {GRO_MAX_SIZE}"),
            ));
        }
    }
    if let Some(vrf) = &iface.vrf {
        check_ifname("interface.vrf.name", &vrf.name)?;
        if vrf.table == Some(0) {
            return Err(invalid(
                "interface.vrf.table",
                "0 is not a routing table a VRF can have",
            ));
        }
    }
    for (i, r) in c.routes.iter().enumerate() {
        let dst = if r.destination.is_empty() || r.destination == "default" {
            None
        } else {
            parse_cidr(&r.destination).ok().map(|(ip, _)| ip)
        };
        let gw = r.gateway.parse::<IpAddr>().ok();
        let src = r.source.parse::<IpAddr>().ok();
        one_family(
            &format!("routes[{i}]"),
            "destination, gateway and source",
            &[dst, gw, src],
        )?;
    }
    for (i, r) in c.rules.iter().enumerate() {
        let src = parse_cidr(&r.source).ok().map(|(ip, _)| ip);
        let dst = parse_cidr(&r.destination).ok().map(|(ip, _)| ip);
        one_family(
            &format!("rules[{i}]"),
            "source and destination",
            &[src, dst],
        )?;
    }
    for (i, n) in c.neighbors.iter().enumerate() {
        let field = format!("neighbors[{i}].hardwareAddr");
        parse_mac(&n.hardware_addr).map_err(|e| invalid(&field, e.to_string()))?;
    }
    Ok(())
}

/// Checks the config against the device's own limits, read from its rtnetlink attributes: the
/// MTU within `IFLA_MIN_MTU..=IFLA_MAX_MTU`, a MAC as long as the device's, GSO sizes within
/// what it can segment (`IFLA_TSO_MAX_SIZE`).
pub fn check_link(link: &LinkMessage, c: &NetworkConfig) -> Result<(), ConfigRefusal> {
    let attr = |f: fn(&LinkAttribute) -> Option<u32>| link.attributes.iter().find_map(f);
    let iface = &c.interface;
    if let Some(mtu) = iface.mtu.and_then(|m| u32::try_from(m).ok()) {
        let min = attr(|a| match a {
            LinkAttribute::MinMtu(v) => Some(*v),
            _ => None,
        });
        let max = attr(|a| match a {
            LinkAttribute::MaxMtu(v) => Some(*v),
            _ => None,
        });
        // A device that reports no range (0) takes what its driver takes.
        if let (Some(min), Some(max)) = (min, max)
            && max != 0
            && !(min..=max).contains(&mtu)
        {
            return Err(invalid(
                "interface.mtu",
                format!("{mtu} is outside the device's range {min}..={max}"),
            ));
        }
    }
    if let Some(mac) = &iface.hardware_addr
        && let Ok(want) = parse_mac(mac)
        && let Some(have) = link.attributes.iter().find_map(|a| match a {
            LinkAttribute::Address(m) => Some(m.len()),
            _ => None,
        })
        && want.len() != have
    {
        return Err(invalid(
            "interface.hardwareAddr",
            format!(
                "{mac} has {} bytes; the device's hardware addresses have {have}",
                want.len()
            ),
        ));
    }
    let tso_max = attr(|a| match a {
        LinkAttribute::TsoMaxSize(v) => Some(*v),
        _ => None,
    });
    for (what, v) in [
        ("gsoMaxSize", iface.gso_max_size),
        ("gsoIPv4MaxSize", iface.gso_ipv4_max_size),
    ] {
        if let (Some(v), Some(max)) = (v.and_then(|v| u32::try_from(v).ok()), tso_max)
            && v > max
        {
            return Err(invalid(
                format!("interface.{what}"),
                format!("{v} is above what the device can segment ({max})"),
            ));
        }
    }
    Ok(())
}

/// Checks a child's addresses against those its parent NIC has on the host (`parent`, as
/// [`Rtnl::addresses`](crate::netns::Rtnl::addresses) reads them): a child with one of them
/// would take the host's own traffic to it. An IPVLAN child in L2 mode is handed the packets for
/// its addresses before the host sees them, and answers ARP and neighbour solicitations for
/// them; a Macvlan child answers them with a MAC of its own. Other configurations pass.
pub fn check_parent_addresses(c: &NetworkConfig, parent: &[IpAddr]) -> Result<(), ConfigRefusal> {
    let ty = c.interface_type();
    if !ty.is_child() {
        return Ok(());
    }
    for (i, cidr) in c.interface.addresses.iter().enumerate() {
        // A malformed address is check_config's to refuse.
        let Ok((ip, _)) = parse_cidr(cidr) else {
            continue;
        };
        if parent.contains(&ip) {
            return Err(invalid(
                format!("interface.addresses[{i}]"),
                format!(
                    "{ip} is an address the shared NIC (the child's parent) has on the node: an \
                     {} child with it would take the node's own traffic to it; give the child an \
                     address of its own",
                    ty.as_str()
                ),
            ));
        }
    }
    Ok(())
}

/// What [`preflight`] read of the device: the ethtool settings to apply and their values now,
/// which [`PodNet::attach`](super::PodNet::attach) records so that detach can put them back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preflight {
    /// The features to set, by kernel name (`ethtool -K` names expanded; fixed features
    /// already at the value asked for left out).
    pub features: BTreeMap<String, bool>,
    /// The values of [`features`](Self::features) now.
    pub features_before: BTreeMap<String, bool>,
    /// The private flags asked for, with their values now.
    pub private_flags_before: BTreeMap<String, bool>,
}

/// Why [`preflight`] did not pass a configuration.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// The configuration cannot be applied to this device (in the claim's terms).
    #[error(transparent)]
    Refused(#[from] ConfigRefusal),
    /// The device's ethtool settings could not be read, so the configuration was not checked
    /// against them.
    #[error(transparent)]
    Unreadable(#[from] crate::Error),
}

/// Checks `config` against the device `link` (as the host namespace `host` lists it) before
/// anything changes: its limits ([`check_link`]), then the ethtool features and private flags
/// asked for against the device's, read over ethtool netlink in `host`. What the device has now
/// is returned for the caller to record. The configuration's own rules are [`check_config`]'s.
pub fn preflight(
    host: &Netns,
    link: &LinkMessage,
    config: &NetworkConfig,
) -> Result<Preflight, PreflightError> {
    check_link(link, config)?;
    let mut out = Preflight::default();
    let Some(e) = config
        .ethtool
        .as_ref()
        .filter(|e| !e.features.is_empty() || !e.private_flags.is_empty())
    else {
        return Ok(out);
    };
    let name = link
        .attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::IfName(n) => Some(n.as_str()),
            _ => None,
        })
        .ok_or_else(|| crate::Error::LinkNotFound {
            link: format!("index {}", link.header.index),
            netns: host.path().to_path_buf(),
        })?;
    if !e.features.is_empty() {
        let now = ethtool::features(host, name)?;
        out.features = ethtool::resolve(&e.features, &now).map_err(ConfigRefusal::from)?;
        out.features_before = out
            .features
            .keys()
            .map(|n| (n.clone(), now.is_on(n)))
            .collect();
    }
    if !e.private_flags.is_empty() {
        let (all, on) = ethtool::private_flags(host, name)?;
        ethtool::check_private_flags(&e.private_flags, &all).map_err(ConfigRefusal::from)?;
        out.private_flags_before = e
            .private_flags
            .keys()
            .map(|n| (n.clone(), on.contains(n)))
            .collect();
    }
    Ok(out)
}

/// The kernel's `dev_valid_name`, and no `%` (the kernel reads `net%d` as a pattern and picks a
/// name of its own).
fn check_ifname(field: &str, name: &str) -> Result<(), ConfigRefusal> {
    let bad = |why: &str| Err(invalid(field, format!("{name:?} {why}")));
    if name.is_empty() {
        return bad("is empty");
    }
    if name.len() > IFNAME_MAX {
        return bad(&format!(
            "is {} bytes long; an interface name has at most {IFNAME_MAX}",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return bad("is not a name the kernel accepts");
    }
    // The kernel's isspace() includes 0xa0 (Latin-1 no-break space), which a UTF-8 name can hold.
    if name.bytes().any(|b| {
        matches!(
            b,
            b'/' | b':' | b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0xa0 | 0
        )
    }) {
        return bad("has a '/', ':', NUL or white space, which the kernel refuses");
    }
    if name.contains('%') {
        return bad(
            "has a '%': the kernel reads it as a pattern (net%d) and picks a name of its own",
        );
    }
    Ok(())
}

/// A MAC the kernel accepts for a link: well formed, not multicast (nor broadcast), not zero.
fn check_unicast(field: &str, mac: &str) -> Result<(), ConfigRefusal> {
    let bytes = parse_mac(mac).map_err(|e| invalid(field, e.to_string()))?;
    if bytes.iter().all(|b| *b == 0) {
        return Err(invalid(field, format!("{mac} is all zeros")));
    }
    // Ethernet: the group bit of the first byte.
    if bytes.len() == 6 && bytes[0] & 1 == 1 {
        return Err(invalid(
            field,
            format!("{mac} is a multicast address; a link needs a unicast one"),
        ));
    }
    Ok(())
}

fn one_family(field: &str, what: &str, ips: &[Option<IpAddr>]) -> Result<(), ConfigRefusal> {
    let mut set = ips.iter().flatten();
    if let Some(first) = set.next()
        && set.any(|ip| ip.is_ipv4() != first.is_ipv4())
    {
        return Err(invalid(
            field,
            format!("its {what} are not all of one address family"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use dranet_core::InterfaceType;

    use super::*;

    fn with(f: impl FnOnce(&mut NetworkConfig)) -> NetworkConfig {
        let mut c = NetworkConfig::default();
        f(&mut c);
        c
    }

    #[test]
    fn names_are_checked_as_the_kernel_does() {
        for ok in ["net1", "a", "abcdefghijklmno", "eth-0.100", "é"] {
            check_config(&with(|c| c.interface.name = ok.into())).unwrap();
        }
        for bad in [
            "net/1",
            "net:1",
            "net 1",
            "n\u{a0}",
            "net%d",
            ".",
            "..",
            "abcdefghijklmnop",
            "a\0b",
        ] {
            let e = check_config(&with(|c| c.interface.name = bad.into())).unwrap_err();
            assert!(
                matches!(&e, ConfigRefusal::Invalid { field, .. } if field == "interface.name"),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn macs_must_be_unicast_and_not_zero() {
        check_config(&with(|c| {
            c.interface.hardware_addr = Some("02:00:00:00:00:01".into())
        }))
        .unwrap();
        for (bad, why) in [
            ("03:00:00:00:00:01", "multicast"),
            ("ff:ff:ff:ff:ff:ff", "multicast"),
            ("00:00:00:00:00:00", "zeros"),
            ("02:00:00:00:00", "colon-separated"),
        ] {
            let e = check_config(&with(|c| c.interface.hardware_addr = Some(bad.into())))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("interface.hardwareAddr") && e.contains(why),
                "{e}"
            );
        }
    }

    #[test]
    fn every_field_of_upstreams_config_is_implemented() {
        check_config(&with(|c| c.interface.disable_ebpf_programs = Some(true))).unwrap();
        check_config(&with(|c| c.interface.dhcp = Some(true))).unwrap();
        // A profile is resolved by the profile provider at prepare, not refused here.
        check_config(&with(|c| c.profile = "x".into())).unwrap();
    }

    #[test]
    fn routes_and_rules_keep_to_one_family() {
        let e = check_config(&with(|c| {
            c.routes.push(dranet_core::RouteConfig {
                destination: "10.0.0.0/8".into(),
                gateway: "fd00::1".into(),
                ..Default::default()
            })
        }))
        .unwrap_err()
        .to_string();
        assert!(e.contains("routes[0]") && e.contains("family"), "{e}");
        let e = check_config(&with(|c| {
            c.rules.push(dranet_core::RuleConfig {
                source: "10.0.0.0/8".into(),
                destination: "fd00::/64".into(),
                table: 100,
                ..Default::default()
            })
        }))
        .unwrap_err()
        .to_string();
        assert!(e.contains("rules[0]"), "{e}");
    }

    #[test]
    fn a_child_never_has_an_address_of_its_parent() {
        let parent: Vec<IpAddr> = ["10.9.0.2", "fd00:9::2", "fe80::1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        for ty in [InterfaceType::Ipvlan, InterfaceType::Macvlan] {
            let own = with(|c| {
                c.interface.r#type = Some(ty);
                c.interface.addresses = vec!["10.9.0.11/24".into(), "fd00:9::11/64".into()];
            });
            check_parent_addresses(&own, &parent).unwrap();
            // The parent's address under any prefix, IPv4 or IPv6.
            for taken in ["10.9.0.2/32", "fd00:9::2/64"] {
                let c = with(|c| {
                    c.interface.r#type = Some(ty);
                    c.interface.addresses = vec!["10.9.0.11/24".into(), taken.into()];
                });
                let e = check_parent_addresses(&c, &parent).unwrap_err().to_string();
                let ip = taken.split('/').next().unwrap_or_default();
                assert!(
                    e.starts_with(&format!(
                        "interface.addresses[1]: {ip} is an address the shared NIC"
                    )) && e.contains(ty.as_str()),
                    "{e}"
                );
            }
        }
        // A passthrough NIC leaves the host with its addresses: nothing to take from it.
        let pt = with(|c| c.interface.addresses = vec!["10.9.0.2/24".into()]);
        check_parent_addresses(&pt, &parent).unwrap();
    }

    fn link(attrs: Vec<LinkAttribute>) -> LinkMessage {
        let mut l = LinkMessage::default();
        l.attributes = attrs;
        l
    }

    #[test]
    fn the_devices_own_limits_come_from_its_attributes() {
        let l = link(vec![
            LinkAttribute::MinMtu(68),
            LinkAttribute::MaxMtu(9216),
            LinkAttribute::Address(vec![2, 0, 0, 0, 0, 1]),
            LinkAttribute::TsoMaxSize(65536),
        ]);
        check_link(&l, &with(|c| c.interface.mtu = Some(9000))).unwrap();
        let e = check_link(&l, &with(|c| c.interface.mtu = Some(9500)))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("interface.mtu") && e.contains("68..=9216"),
            "{e}"
        );
        let e = check_link(
            &l,
            &with(|c| {
                c.interface.hardware_addr =
                    Some("00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:01".into())
            }),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("20 bytes") && e.contains("have 6"), "{e}");
        let e = check_link(&l, &with(|c| c.interface.gso_max_size = Some(65537)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("interface.gsoMaxSize"), "{e}");
        // No range reported (0/0): no opinion.
        let none = link(vec![LinkAttribute::MinMtu(0), LinkAttribute::MaxMtu(0)]);
        check_link(&none, &with(|c| c.interface.mtu = Some(9000))).unwrap();
    }
}
