//! What a link had on the host before it was given to a pod, recorded so that detach can put
//! every piece of it back.
//!
//! Addresses, routes, rules and neighbours are kept as the kernel's own netlink messages (hex in
//! the journal), so that flags, lifetimes, metrics, preferences and tables survive the round
//! trip without a field-by-field model that could forget one.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io;

use rtnetlink::packet_core::{Emitable, ParseableParametrized};
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use rtnetlink::packet_route::neighbour::{NeighbourMessage, NeighbourState};
use rtnetlink::packet_route::route::{
    RouteAttribute, RouteFlags, RouteMessage, RouteNextHopFlags, RouteProtocol, RouteType,
};
use rtnetlink::packet_route::rule::{RuleAttribute, RuleMessage};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};
use serde::{Deserialize, Serialize};

use crate::netns::{Rtnl, link_name};

/// One rtnetlink message as the kernel sent it: its type and payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawMessage {
    /// Netlink message type (`RTM_NEWADDR`, …).
    pub kind: u16,
    /// The payload, hex.
    pub hex: String,
    /// A readable one-line summary, for logs and operators reading the journal.
    pub summary: String,
}

impl RawMessage {
    /// Records a message.
    pub fn new(msg: &RouteNetlinkMessage) -> Self {
        let mut buf = vec![0u8; msg.buffer_len()];
        msg.emit(&mut buf);
        let mut hex = String::with_capacity(buf.len() * 2);
        for b in &buf {
            let _ = write!(hex, "{b:02x}");
        }
        Self {
            kind: msg.message_type(),
            hex,
            summary: summarize(msg),
        }
    }

    /// Decodes the recorded message.
    pub fn decode(&self) -> io::Result<RouteNetlinkMessage> {
        let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
        if !self.hex.len().is_multiple_of(2) {
            return Err(bad("odd-length hex".into()));
        }
        let bytes = (0..self.hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&self.hex[i..i + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|e| bad(format!("hex: {e}")))?;
        RouteNetlinkMessage::parse_with_param(&bytes[..], self.kind)
            .map_err(|e| bad(format!("netlink message type {}: {e}", self.kind)))
    }
}

fn summarize(msg: &RouteNetlinkMessage) -> String {
    match msg {
        RouteNetlinkMessage::NewAddress(a) => {
            let addr = a.attributes.iter().find_map(|x| match x {
                AddressAttribute::Address(ip) => Some(ip.to_string()),
                _ => None,
            });
            format!(
                "address {}/{}",
                addr.unwrap_or_default(),
                a.header.prefix_len
            )
        }
        RouteNetlinkMessage::NewRoute(r) => format!("route {r:?}").chars().take(300).collect(),
        RouteNetlinkMessage::NewRule(r) => format!("rule {r:?}").chars().take(300).collect(),
        RouteNetlinkMessage::NewNeighbour(n) => {
            format!("neighbour {n:?}").chars().take(300).collect()
        }
        other => format!("{other:?}").chars().take(300).collect(),
    }
}

/// The link a virtual link hangs off (`IFLA_LINK`) as one namespace sees it: its index there and,
/// when it is in another namespace, that namespace's id in this one (`IFLA_LINK_NETNSID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    /// Its index, in its own namespace.
    pub index: u32,
    /// The id its namespace has in the observer's, when it is another namespace.
    pub netnsid: Option<i32>,
}

/// A link as it was on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostLink {
    /// Interface name.
    pub name: String,
    /// Interface index on the host.
    pub index: u32,
    /// MTU.
    pub mtu: Option<u32>,
    /// MAC address (hex bytes).
    pub mac: Option<Vec<u8>>,
    /// Permanent MAC address (physical NICs), the identity that survives renames.
    pub perm_mac: Option<Vec<u8>>,
    /// Parent device (the PCI address for a PCI NIC).
    pub parent_dev: Option<String>,
    /// Link kind (`veth`, `macvlan`, `ipoib`, …), none for a physical NIC.
    pub kind: Option<String>,
    /// The index of the link it hangs off (`IFLA_LINK`: a veth's peer, a macvlan's lower
    /// device), part of a virtual link's identity.
    #[serde(default)]
    pub peer_index: Option<u32>,
    /// Administratively up.
    pub up: bool,
    /// GSO max size.
    pub gso_max_size: Option<u32>,
    /// GRO max size.
    pub gro_max_size: Option<u32>,
    /// GSO max size for IPv4.
    pub gso_ipv4_max_size: Option<u32>,
    /// GRO max size for IPv4.
    pub gro_ipv4_max_size: Option<u32>,
    /// Addresses (`RTM_NEWADDR`).
    pub addresses: Vec<RawMessage>,
    /// Routes through the link in every table, except those the kernel derives from addresses
    /// and link state (`proto kernel`, the local table) and router advertisements.
    pub routes: Vec<RawMessage>,
    /// Policy rules that select the tables of those routes, or name the link.
    pub rules: Vec<RawMessage>,
    /// Permanent neighbours on the link.
    pub neighbours: Vec<RawMessage>,
    /// The original values of the ethtool features the claim changes (kernel names).
    #[serde(default)]
    pub ethtool_features: BTreeMap<String, bool>,
    /// The original values of the private flags the claim changes.
    #[serde(default)]
    pub ethtool_private_flags: BTreeMap<String, bool>,
    /// The link's own sysctls on the host (those that decide its traffic and addresses, e.g.
    /// `ipv6/accept_ra` → `0`): a move
    /// between namespaces resets them to the namespace's defaults, so they are put back.
    #[serde(default)]
    pub sysctls: BTreeMap<String, String>,
}

/// The per-link sysctls (under `/proc/sys/net/<family>/conf/<link>/`) recorded on the host and
/// put back: those that decide what the host does with the link's traffic and addresses.
pub(crate) const HOST_SYSCTLS: [&str; 14] = [
    "ipv4/arp_ignore",
    "ipv4/arp_announce",
    "ipv4/rp_filter",
    "ipv4/forwarding",
    "ipv4/accept_redirects",
    "ipv6/disable_ipv6",
    "ipv6/addr_gen_mode",
    "ipv6/accept_ra",
    "ipv6/autoconf",
    "ipv6/accept_dad",
    "ipv6/dad_transmits",
    "ipv6/forwarding",
    "ipv6/use_tempaddr",
    "ipv6/accept_redirects",
];

/// The path of sysctl `key` (`ipv6/accept_ra`) of link `name` under `/proc/sys/net`.
pub(crate) fn sysctl_path(key: &str, name: &str) -> Option<std::path::PathBuf> {
    let (family, leaf) = key.split_once('/')?;
    Some(
        std::path::Path::new("/proc/sys/net")
            .join(family)
            .join("conf")
            .join(name)
            .join(leaf),
    )
}

/// The `HOST_SYSCTLS` link `name` has, read in the calling thread's namespace (those the
/// kernel does not have, e.g. IPv6 off, are left out).
pub(crate) fn read_sysctls(name: &str) -> BTreeMap<String, String> {
    HOST_SYSCTLS
        .iter()
        .filter_map(|k| {
            let v = std::fs::read_to_string(sysctl_path(k, name)?).ok()?;
            Some((k.to_string(), v.trim().to_string()))
        })
        .collect()
}

/// Reads what a link has on the host.
pub(crate) async fn capture(rtnl: &Rtnl, link: &LinkMessage) -> io::Result<HostLink> {
    let index = link.header.index;
    let mut h = HostLink {
        name: link_name(link).unwrap_or_default().to_string(),
        index,
        mtu: None,
        mac: None,
        perm_mac: None,
        parent_dev: None,
        kind: None,
        peer_index: None,
        up: link.header.flags.contains(LinkFlags::Up),
        gso_max_size: None,
        gro_max_size: None,
        gso_ipv4_max_size: None,
        gro_ipv4_max_size: None,
        addresses: Vec::new(),
        routes: Vec::new(),
        rules: Vec::new(),
        neighbours: Vec::new(),
        ethtool_features: BTreeMap::new(),
        ethtool_private_flags: BTreeMap::new(),
        sysctls: BTreeMap::new(),
    };
    for a in &link.attributes {
        match a {
            LinkAttribute::Mtu(m) => h.mtu = Some(*m),
            LinkAttribute::Address(m) => h.mac = Some(m.clone()),
            LinkAttribute::PermAddress(m) if m.iter().any(|b| *b != 0) => {
                h.perm_mac = Some(m.clone())
            }
            LinkAttribute::ParentDevName(p) => h.parent_dev = Some(p.clone()),
            LinkAttribute::Link(i) => h.peer_index = Some(*i),
            LinkAttribute::GsoMaxSize(v) => h.gso_max_size = Some(*v),
            LinkAttribute::GroMaxSize(v) => h.gro_max_size = Some(*v),
            LinkAttribute::GsoIpv4MaxSize(v) => h.gso_ipv4_max_size = Some(*v),
            LinkAttribute::GroIpv4MaxSize(v) => h.gro_ipv4_max_size = Some(*v),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    if let LinkInfo::Kind(k) = i {
                        h.kind = Some(k.to_string());
                    }
                }
            }
            _ => {}
        }
    }

    for m in rtnl
        .dump(RouteNetlinkMessage::GetAddress(AddressMessage::default()))
        .await?
    {
        if let RouteNetlinkMessage::NewAddress(a) = &m
            && a.header.index == index
        {
            h.addresses.push(RawMessage::new(&m));
        }
    }

    let mut tables = BTreeSet::new();
    for family in FAMILIES {
        // A rule is relevant by the tables of the routes read so far (this family's and those
        // before it).
        let (routes, rules) = routes_and_rules(rtnl, family).await?;
        for m in routes {
            if let RouteNetlinkMessage::NewRoute(r) = &m
                && route_uses(r, index)
                && replayable(r)
            {
                tables.insert(route_table(r));
                h.routes.push(RawMessage::new(&m));
            }
        }
        for m in rules {
            if let RouteNetlinkMessage::NewRule(r) = &m
                && rule_relevant(r, &tables, &h.name)
            {
                h.rules.push(RawMessage::new(&m));
            }
        }
        let mut q = NeighbourMessage::default();
        q.header.family = family;
        for m in rtnl.dump(RouteNetlinkMessage::GetNeighbour(q)).await? {
            if let RouteNetlinkMessage::NewNeighbour(n) = &m
                && n.header.ifindex == index
                && n.header.state == NeighbourState::Permanent
            {
                h.neighbours.push(RawMessage::new(&m));
            }
        }
    }
    Ok(h)
}

/// The address families whose routes, rules and neighbours a namespace is read for.
pub(crate) const FAMILIES: [AddressFamily; 2] = [AddressFamily::Inet, AddressFamily::Inet6];

/// The routes (every table) and the rules of `family` in `rtnl`'s namespace, dumped in that order.
pub(crate) async fn routes_and_rules(
    rtnl: &Rtnl,
    family: AddressFamily,
) -> io::Result<(Vec<RouteNetlinkMessage>, Vec<RouteNetlinkMessage>)> {
    let mut q = RouteMessage::default();
    q.header.address_family = family;
    let routes = rtnl.dump(RouteNetlinkMessage::GetRoute(q)).await?;
    let mut q = RuleMessage::default();
    q.header.family = family;
    let rules = rtnl.dump(RouteNetlinkMessage::GetRule(q)).await?;
    Ok((routes, rules))
}

/// Whether a route goes through link `index` (directly or as one of its next hops).
pub(crate) fn route_uses(r: &RouteMessage, index: u32) -> bool {
    r.attributes.iter().any(|a| match a {
        RouteAttribute::Oif(i) => *i == index,
        RouteAttribute::MultiPath(hops) => hops.iter().any(|h| h.interface_index == index),
        _ => false,
    })
}

/// The table of a route (the attribute wins over the 8-bit header field).
pub(crate) fn route_table(r: &RouteMessage) -> u32 {
    r.attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(r.header.table))
}

/// A recorded route made into a request the kernel takes. A dump reports state a request may not
/// carry: a link without carrier marks its routes `LINKDOWN`, which a new route refuses with
/// EINVAL ("invalid flags for nexthop"), as it refuses `DEAD`; offload, trap, notify and cache
/// flags are the kernel's own. Only `ONLINK` and `PERVASIVE` are asked for; cache info goes too.
pub(crate) fn as_request(r: &mut RouteMessage) {
    let asked = RouteFlags::Onlink | RouteFlags::Pervasive;
    r.header.flags &= asked;
    let hop_asked = RouteNextHopFlags::Onlink | RouteNextHopFlags::Pervasive;
    r.attributes
        .retain(|a| !matches!(a, RouteAttribute::CacheInfo(_)));
    for a in &mut r.attributes {
        if let RouteAttribute::MultiPath(hops) = a {
            for hop in hops {
                hop.flags &= hop_asked;
            }
        }
    }
}

/// Routes worth replaying: not those the kernel makes from addresses and link state, and not
/// router advertisements (replayed, they would become static and never expire).
fn replayable(r: &RouteMessage) -> bool {
    const LOCAL_TABLE: u32 = 255;
    !matches!(r.header.protocol, RouteProtocol::Kernel | RouteProtocol::Ra)
        && route_table(r) != LOCAL_TABLE
        && !matches!(
            r.header.kind,
            RouteType::Local | RouteType::Broadcast | RouteType::Multicast | RouteType::Anycast
        )
}

/// The table a rule looks up (the attribute wins over the 8-bit header field).
pub(crate) fn rule_table(r: &RuleMessage) -> u32 {
    r.attributes
        .iter()
        .find_map(|a| match a {
            RuleAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(r.header.table))
}

fn rule_relevant(r: &RuleMessage, tables: &BTreeSet<u32>, name: &str) -> bool {
    let table = rule_table(r);
    // main (254), local (255) and default (253) are selected by the kernel's own rules.
    !(253..=255).contains(&table) && tables.contains(&table)
        || r.attributes.iter().any(|a| match a {
            RuleAttribute::Iifname(n) | RuleAttribute::Oifname(n) => n == name,
            _ => false,
        })
}

/// Global-scope addresses of a recorded link (the default addresses in the pod), as CIDR.
pub(crate) fn global_addresses(h: &HostLink) -> Vec<String> {
    let mut out = Vec::new();
    for raw in &h.addresses {
        if let Ok(RouteNetlinkMessage::NewAddress(a)) = raw.decode()
            && a.header.scope == AddressScope::Universe
        {
            let ip = a.attributes.iter().find_map(|x| match x {
                AddressAttribute::Local(ip) => Some(*ip),
                _ => None,
            });
            let ip = ip.or_else(|| {
                a.attributes.iter().find_map(|x| match x {
                    AddressAttribute::Address(ip) => Some(*ip),
                    _ => None,
                })
            });
            if let Some(ip) = ip {
                out.push(format!("{ip}/{}", a.header.prefix_len));
            }
        }
    }
    out
}
