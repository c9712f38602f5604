//! The rtnetlink messages podnet sends: addresses, routes, rules and neighbours built from a
//! [`dranet_core::NetworkConfig`]'s strings, link up/down, and the query for the kernel's
//! `l3mdev` rules.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use rtnetlink::packet_route::link::{LinkFlags, LinkMessage};
use rtnetlink::packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use rtnetlink::packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::netns::Rtnl;

/// The `l3mdev` rules of a namespace (IPv4 and IPv6), which the kernel adds with the first VRF.
pub(super) async fn l3mdev_rules(rtnl: &Rtnl) -> io::Result<Vec<RuleMessage>> {
    let mut out = Vec::new();
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let mut q = RuleMessage::default();
        q.header.family = family;
        for m in rtnl.dump(RouteNetlinkMessage::GetRule(q)).await? {
            if let RouteNetlinkMessage::NewRule(r) = m
                && r.attributes
                    .iter()
                    .any(|a| matches!(a, RuleAttribute::L3MDev(true)))
            {
                out.push(r);
            }
        }
    }
    Ok(out)
}

pub(crate) fn set_up(index: u32, up: bool) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.header.index = index;
    m.header.change_mask = LinkFlags::Up;
    if up {
        m.header.flags = LinkFlags::Up;
    }
    m
}

pub(super) fn family(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

/// Parses `aa:bb:cc:dd:ee:ff` (or any colon-separated hex bytes, as IPoIB's 20).
pub fn parse_mac(s: &str) -> io::Result<Vec<u8>> {
    let bytes: std::result::Result<Vec<u8>, _> =
        s.split(':').map(|p| u8::from_str_radix(p, 16)).collect();
    match bytes {
        Ok(b) if b.len() >= 6 && s.split(':').all(|p| p.len() == 2) => Ok(b),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("hardware address {s:?} is not colon-separated hex bytes"),
        )),
    }
}

/// Formats bytes as `aa:bb:…`.
pub fn format_mac(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `ip/len` (a bare IP is a host address).
pub fn parse_cidr(s: &str) -> io::Result<(IpAddr, u8)> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{s:?}: {why}"));
    let (ip, len) = match s.split_once('/') {
        Some((ip, len)) => (ip, Some(len)),
        None => (s, None),
    };
    let ip: IpAddr = ip.parse().map_err(|_| bad("not an IP address"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l.parse::<u8>().map_err(|_| bad("bad prefix length"))?,
        None => max,
    };
    if len > max {
        return Err(bad("prefix length too long"));
    }
    Ok((ip, len))
}

/// The IPv4 netmask of prefix length `len` (at most 32), as a number.
pub(crate) fn ipv4_mask(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

/// The IPv4 network of `ip/len`: `ip` without its host bits.
pub(crate) fn ipv4_network(ip: Ipv4Addr, len: u8) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(ip) & ipv4_mask(len))
}

/// The network of `ip/len` (at most 32 or 128 bits): `ip` without its host bits.
pub(crate) fn network_of(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v) => IpAddr::V4(ipv4_network(v, len)),
        IpAddr::V6(v) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v) & mask))
        }
    }
}

pub(super) fn address_message(index: u32, ip: IpAddr, len: u8) -> AddressMessage {
    let mut m = AddressMessage::default();
    m.header.family = family(ip);
    m.header.prefix_len = len;
    m.header.index = index;
    m.header.scope = AddressScope::Universe;
    m.attributes.push(AddressAttribute::Local(ip));
    m.attributes.push(AddressAttribute::Address(ip));
    if let IpAddr::V4(v4) = ip
        && len < 31
    {
        let host_mask = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
        let bcast = u32::from(v4) | host_mask;
        m.attributes
            .push(AddressAttribute::Broadcast(std::net::Ipv4Addr::from(bcast)));
    }
    m
}

/// A permanent neighbour entry: `ip` is at `mac` on link `index`.
pub(super) fn neighbour_message(index: u32, ip: IpAddr, mac: Vec<u8>) -> NeighbourMessage {
    let mut m = NeighbourMessage::default();
    m.header.family = family(ip);
    m.header.ifindex = index;
    m.header.state = NeighbourState::Permanent;
    m.header.kind = RouteType::Unicast;
    m.attributes.push(NeighbourAttribute::Destination(match ip {
        IpAddr::V4(v) => NeighbourAddress::Inet(v),
        IpAddr::V6(v) => NeighbourAddress::Inet6(v),
    }));
    m.attributes.push(NeighbourAttribute::LinkLayerAddress(mac));
    m
}

/// An IP address, or none for an empty string.
pub(super) fn optional_ip(what: &str, s: &str) -> io::Result<Option<IpAddr>> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse().map(Some).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {s:?} is not an IP address"),
        )
    })
}

pub(super) fn route_message(oif: u32, r: &dranet_core::RouteConfig) -> io::Result<RouteMessage> {
    let dst = if r.destination.is_empty() || r.destination == "default" {
        None
    } else {
        Some(parse_cidr(&r.destination)?)
    };
    let gw = optional_ip("gateway", &r.gateway)?;
    let src = optional_ip("source", &r.source)?;
    let fam_ip = dst
        .map(|d| d.0)
        .or(gw)
        .or(src)
        .unwrap_or(IpAddr::V4(0.into()));
    let mut m = RouteMessage::default();
    m.header.address_family = family(fam_ip);
    m.header.destination_prefix_length = dst.map(|d| d.1).unwrap_or(0);
    let table = if r.table == 0 { 254 } else { r.table };
    m.header.table = u8::try_from(table).unwrap_or(0);
    m.header.protocol = RouteProtocol::Boot;
    m.header.scope = if r.scope != 0 {
        RouteScope::from(r.scope)
    } else if gw.is_some() {
        RouteScope::Universe
    } else {
        RouteScope::Link
    };
    m.header.kind = RouteType::Unicast;
    if let Some((ip, _)) = dst {
        m.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(ip)));
    }
    if let Some(g) = gw {
        m.attributes
            .push(RouteAttribute::Gateway(RouteAddress::from(g)));
    }
    if let Some(s) = src {
        m.attributes
            .push(RouteAttribute::PrefSource(RouteAddress::from(s)));
    }
    m.attributes.push(RouteAttribute::Oif(oif));
    m.attributes.push(RouteAttribute::Table(table));
    Ok(m)
}

pub(super) fn rule_message(r: &dranet_core::RuleConfig) -> io::Result<RuleMessage> {
    let src = if r.source.is_empty() {
        None
    } else {
        Some(parse_cidr(&r.source)?)
    };
    let dst = if r.destination.is_empty() {
        None
    } else {
        Some(parse_cidr(&r.destination)?)
    };
    let fam_ip = src.or(dst).map(|x| x.0).unwrap_or(IpAddr::V4(0.into()));
    let mut m = RuleMessage::default();
    m.header.family = family(fam_ip);
    m.header.action = RuleAction::ToTable;
    m.header.table = u8::try_from(r.table).unwrap_or(0);
    if let Some((ip, len)) = src {
        m.header.src_len = len;
        m.attributes.push(RuleAttribute::Source(ip));
    }
    if let Some((ip, len)) = dst {
        m.header.dst_len = len;
        m.attributes.push(RuleAttribute::Destination(ip));
    }
    if r.priority != 0 {
        m.attributes.push(RuleAttribute::Priority(r.priority));
    }
    m.attributes.push(RuleAttribute::Table(r.table));
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podnet::RawMessage;

    #[test]
    fn cidr_and_mac_parsing_name_what_is_wrong() {
        assert_eq!(
            parse_cidr("10.0.0.1/24").unwrap(),
            ("10.0.0.1".parse().unwrap(), 24)
        );
        assert_eq!(parse_cidr("fd00::1").unwrap().1, 128);
        let e = parse_cidr("10.0.0.1/33").unwrap_err().to_string();
        assert!(e.contains("10.0.0.1/33") && e.contains("too long"), "{e}");
        assert!(parse_cidr("eth0").is_err());
        assert_eq!(
            parse_mac("02:00:00:00:00:0a").unwrap(),
            vec![2, 0, 0, 0, 0, 10]
        );
        assert!(parse_mac("02:00:00:00:00").is_err());
        assert!(parse_mac("2:0:0:0:0:a").is_err());
        assert_eq!(format_mac(&[2, 0, 0, 0, 0, 10]), "02:00:00:00:00:0a");
    }

    #[test]
    fn ipv4_addresses_get_their_broadcast() {
        let m = address_message(3, "10.1.2.3".parse().unwrap(), 24);
        assert!(
            m.attributes
                .contains(&AddressAttribute::Broadcast("10.1.2.255".parse().unwrap()))
        );
        let m = address_message(3, "10.1.2.3".parse().unwrap(), 32);
        assert!(
            !m.attributes
                .iter()
                .any(|a| matches!(a, AddressAttribute::Broadcast(_)))
        ); // Every prefix length has its broadcast without overflowing (a /0 once shifted by 32).
        for (len, bcast) in [
            (0, "255.255.255.255"),
            (1, "127.255.255.255"),
            (30, "10.1.2.3"),
        ] {
            let m = address_message(3, "10.1.2.3".parse().unwrap(), len);
            assert!(
                m.attributes
                    .contains(&AddressAttribute::Broadcast(bcast.parse().unwrap())),
                "/{len}"
            );
        }
    }

    #[test]
    fn routes_default_to_link_scope_without_gateway_and_keep_big_tables() {
        let r = dranet_core::RouteConfig {
            destination: "10.0.0.0/8".into(),
            table: 1000,
            ..Default::default()
        };
        let m = route_message(7, &r).unwrap();
        assert_eq!(m.header.scope, RouteScope::Link);
        assert!(m.attributes.contains(&RouteAttribute::Table(1000)));
        assert!(m.attributes.contains(&RouteAttribute::Oif(7)));
        let r = dranet_core::RouteConfig {
            destination: "default".into(),
            gateway: "fd00::1".into(),
            ..Default::default()
        };
        let m = route_message(7, &r).unwrap();
        assert_eq!(m.header.address_family, AddressFamily::Inet6);
        assert_eq!(m.header.scope, RouteScope::Universe);
        let bad = dranet_core::RouteConfig {
            destination: "10.0.0.0/8".into(),
            gateway: "router".into(),
            ..Default::default()
        };
        assert!(
            route_message(7, &bad)
                .unwrap_err()
                .to_string()
                .contains("router")
        );
    }

    #[test]
    fn raw_messages_round_trip() {
        let m =
            RouteNetlinkMessage::NewAddress(address_message(4, "192.168.1.5".parse().unwrap(), 24));
        let raw = RawMessage::new(&m);
        assert_eq!(raw.decode().unwrap(), m);
        assert!(raw.summary.contains("192.168.1.5/24"), "{}", raw.summary);
        let bad = RawMessage {
            hex: "zz".into(),
            ..raw
        };
        assert!(bad.decode().is_err());
    }
}
