//! The host's configuration of a link that goes with it into the pod, as upstream dranet does:
//! its routes of every table, the rules that select those tables, and its permanent
//! neighbours, rewritten for the link's index and name in the pod. The claim's own entries add
//! to these or override them.
//!
//! Routes the kernel derives itself (from addresses and link state) are not carried: the pod's
//! kernel makes its own from the pod's addresses (the recorded snapshot leaves them out).

use std::io;
use std::net::IpAddr;

use dranet_core::NetworkConfig;
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::neighbour::NeighbourMessage;
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use rtnetlink::packet_route::rule::{RuleAttribute, RuleMessage};

use super::messages::parse_cidr;
use super::state::{HostLink, RawMessage, route_table};

/// What goes into the pod with the link.
#[derive(Debug, Default)]
pub(super) struct Carried {
    /// Routes, link-scope ones first (the others' gateways are reached through them).
    pub routes: Vec<RouteMessage>,
    /// Rules selecting the routes' tables (none when the link joins a VRF: it selects them).
    pub rules: Vec<RuleMessage>,
    /// Permanent neighbours.
    pub neighbours: Vec<NeighbourMessage>,
}

/// Where the link is in the pod, and what the claim sets there.
pub(super) struct PodSide<'a> {
    /// Its index in the pod.
    pub index: u32,
    /// Its name in the pod.
    pub name: &'a str,
    /// The addresses it gets there.
    pub addresses: &'a [IpAddr],
    /// The VRF table it joins, if any: the routes go there.
    pub vrf_table: Option<u32>,
    /// The claim's (merged) configuration.
    pub config: &'a NetworkConfig,
}

/// The host's routes, rules and neighbours of `h`, rewritten for the pod. A route through other
/// links too (a multipath one) stays on the host; one the claim gives a route for (same
/// destination and table) is the claim's.
pub(super) fn carried(h: &HostLink, pod: &PodSide<'_>) -> io::Result<Carried> {
    let overridden = claim_route_keys(pod.config)?;
    let mut out = Carried::default();
    for raw in &h.routes {
        let RouteNetlinkMessage::NewRoute(mut r) = decode(raw)? else {
            continue;
        };
        super::state::as_request(&mut r);
        if let Some(table) = pod.vrf_table {
            r.header.table = u8::try_from(table).unwrap_or(0);
            r.attributes
                .retain(|a| !matches!(a, RouteAttribute::Table(_)));
            r.attributes.push(RouteAttribute::Table(table));
        }
        if overridden.contains(&route_key(&r)) {
            continue;
        }
        let mut only_this_link = true;
        for a in &mut r.attributes {
            match a {
                RouteAttribute::Oif(i) if *i == h.index => *i = pod.index,
                RouteAttribute::MultiPath(hops) => {
                    for hop in hops {
                        if hop.interface_index == h.index {
                            hop.interface_index = pod.index;
                        } else {
                            only_this_link = false;
                        }
                    }
                }
                _ => {}
            }
        }
        if !only_this_link {
            continue;
        }
        // A preferred source the pod does not have would make the kernel refuse the route
        // (EINVAL): the claim gave the link other addresses. The kernel picks one instead.
        r.attributes.retain(|a| match a {
            RouteAttribute::PrefSource(s) => ip_of(s).is_some_and(|ip| pod.addresses.contains(&ip)),
            _ => true,
        });
        out.routes.push(r);
    }
    out.routes
        .sort_by_key(|r| std::cmp::Reverse(u8::from(r.header.scope)));
    if pod.vrf_table.is_none() {
        for raw in &h.rules {
            let RouteNetlinkMessage::NewRule(mut r) = decode(raw)? else {
                continue;
            };
            for a in &mut r.attributes {
                if let RuleAttribute::Iifname(n) | RuleAttribute::Oifname(n) = a
                    && *n == h.name
                {
                    *n = pod.name.to_string();
                }
            }
            out.rules.push(r);
        }
    }
    for raw in &h.neighbours {
        if let RouteNetlinkMessage::NewNeighbour(mut n) = decode(raw)? {
            n.header.ifindex = pod.index;
            out.neighbours.push(n);
        }
    }
    Ok(out)
}

/// A route as `ip route` shows it, short: `10.3.0.0/16 via 10.1.0.1 table 100`.
pub(super) fn describe(r: &RouteMessage) -> String {
    let (_, dst, len, table) = route_key(r);
    let mut s = match dst {
        Some(ip) => format!("{ip}/{len}"),
        None => "default".to_string(),
    };
    let gw = r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Gateway(g) => ip_of(g),
        _ => None,
    });
    if let Some(g) = gw {
        s.push_str(&format!(" via {g}"));
    }
    s.push_str(&format!(" table {table}"));
    s
}

fn decode(raw: &RawMessage) -> io::Result<RouteNetlinkMessage> {
    raw.decode()
}

/// What makes two routes the same route to the kernel, for the claim's override: family,
/// destination, prefix length, table.
type RouteKey = (bool, Option<IpAddr>, u8, u32);

fn route_key(r: &RouteMessage) -> RouteKey {
    let dst = r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Destination(d) => ip_of(d),
        _ => None,
    });
    let v6 = r.header.address_family == rtnetlink::packet_route::AddressFamily::Inet6;
    (v6, dst, r.header.destination_prefix_length, route_table(r))
}

fn claim_route_keys(cfg: &NetworkConfig) -> io::Result<Vec<RouteKey>> {
    let mut keys = Vec::new();
    for r in &cfg.routes {
        let msg = super::messages::route_message(0, r)?;
        keys.push(route_key(&msg));
    }
    Ok(keys)
}

fn ip_of(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(ip) => Some(IpAddr::V4(*ip)),
        RouteAddress::Inet6(ip) => Some(IpAddr::V6(*ip)),
        _ => None,
    }
}

/// The pod's addresses as IPs (the CIDRs configure adds).
pub(super) fn address_ips(cidrs: &[String]) -> io::Result<Vec<IpAddr>> {
    cidrs
        .iter()
        .map(|c| parse_cidr(c).map(|(ip, _)| ip))
        .collect()
}
