//! Network interfaces (netdevs) and their live link state.

use serde::{Deserialize, Serialize};

use crate::PciAddress;

/// A network interface as sysfs and netlink describe it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Netdev {
    /// Interface name (`ifName`).
    pub name: String,
    /// Interface index, when known.
    pub ifindex: Option<u32>,
    /// Hardware address, lowercase colon-separated (20 bytes for IPoIB).
    pub mac: Option<String>,
    /// MTU in bytes.
    pub mtu: Option<u32>,
    /// Operational state as the kernel spells it (`up`, `down`, `unknown`, …).
    pub operstate: Option<String>,
    /// Whether the link is administratively up (`IFF_UP` in `flags`): an operational state
    /// `down` means a lost carrier only when this is true ([`crate::health::Fault::of_link`]).
    /// `None` when not known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_up: Option<bool>,
    /// Link kind: `device` for hardware interfaces, or the rtnetlink kind (`veth`, `macvlan`,
    /// `ipoib`, `bond`, …).
    pub kind: Option<String>,
    /// Link-layer encapsulation from the ARPHRD type (`ether`, `infiniband`, `loopback`, …).
    pub encapsulation: Option<String>,
    /// `ifalias`.
    pub alias: Option<String>,
    /// IPv4 addresses in CIDR form.
    pub ipv4: Vec<String>,
    /// IPv6 addresses in CIDR form (link-local excluded).
    pub ipv6: Vec<String>,
    /// True when the interface has no device behind it (`/sys/devices/virtual/net`).
    pub virtual_: bool,
    /// Its PCI function, when it has one.
    pub pci: Option<PciAddress>,
    /// The interface it is enslaved to (bond, bridge, Hyper-V netvsc for an accelerated VF).
    pub master: Option<String>,
    /// The interface it is stacked on (macvlan, VLAN).
    pub lower: Option<String>,
    /// The default routes through it, in any routing table (see [`uplinks`] for which count).
    pub default_routes: Vec<DefaultRoute>,
    /// The IPv6 default gateway through this interface, if any.
    pub ipv6_gateway: Option<String>,
    /// The eBPF programs on its traffic-control hooks; `None` when not known (a fixture that
    /// does not say, a link source that cannot see them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ebpf: Option<EbpfPrograms>,
}

/// The eBPF programs attached to a link's ingress and egress.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EbpfPrograms {
    /// The names of its TC filters of kind `bpf` on the clsact hooks, one per filter (empty for
    /// a filter without a name).
    pub tc_filters: Vec<String>,
    /// The names of the programs on its TCX hooks (kernel 6.6+), one per program.
    pub tcx_programs: Vec<String>,
}

impl EbpfPrograms {
    /// Whether any program is attached.
    pub fn any(&self) -> bool {
        !self.tc_filters.is_empty() || !self.tcx_programs.is_empty()
    }
}

/// Link state that only netlink knows (or a fixture file stands in for): addresses, routes, kind.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct LinkState {
    /// Interface name.
    pub name: String,
    /// Interface index.
    pub ifindex: Option<u32>,
    /// rtnetlink link kind (`veth`, `macvlan`, …); `None` for hardware devices.
    pub kind: Option<String>,
    /// Operational state, overriding sysfs when present.
    pub operstate: Option<String>,
    /// `IFF_UP` from the link's flags, overriding sysfs when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_up: Option<bool>,
    /// MTU, overriding sysfs when present.
    pub mtu: Option<u32>,
    /// IPv4 addresses in CIDR form.
    pub ipv4: Vec<String>,
    /// IPv6 addresses in CIDR form.
    pub ipv6: Vec<String>,
    /// The default routes through it, in every routing table; a multipath default lists each
    /// hop's interface.
    pub default_routes: Vec<DefaultRoute>,
    /// Master interface name (bond, bridge, Hyper-V netvsc for an accelerated VF).
    pub master: Option<String>,
    /// The lower interface it is stacked on (a macvlan's or VLAN's parent).
    pub lower: Option<String>,
    /// The IPv6 default gateway through this interface, if any.
    pub ipv6_gateway: Option<String>,
    /// The eBPF programs on its traffic-control hooks, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ebpf: Option<EbpfPrograms>,
}

/// The routing table the kernel calls `main` (`RT_TABLE_MAIN`), where `ip route` adds routes.
pub const MAIN_TABLE: u32 = 254;

/// An address family of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IpFamily {
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
}

impl std::fmt::Display for IpFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IpFamily::Ipv4 => "IPv4",
            IpFamily::Ipv6 => "IPv6",
        })
    }
}

/// A default route (`0.0.0.0/0` or `::/0`, unicast) through one interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DefaultRoute {
    /// Its address family.
    pub family: IpFamily,
    /// Its routing table (`254` is `main`).
    #[serde(default = "main_table")]
    pub table: u32,
    /// Its metric (`priority`); the kernel's default is 0 for IPv4 and 1024 for IPv6.
    #[serde(default)]
    pub metric: u32,
    /// Its gateway, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// Who installed it, as `ip route` names the protocol (`kernel`, `boot`, `static`, `dhcp`,
    /// `ra` for an IPv6 router advertisement, or the number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

fn main_table() -> u32 {
    MAIN_TABLE
}

impl DefaultRoute {
    /// A main-table default of `family` at `metric`, with no gateway or protocol.
    pub fn main(family: IpFamily, metric: u32) -> Self {
        Self {
            family,
            table: MAIN_TABLE,
            metric,
            gateway: None,
            protocol: None,
        }
    }
}

impl std::fmt::Display for DefaultRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} default", self.family)?;
        if let Some(g) = &self.gateway {
            write!(f, " via {g}")?;
        }
        match self.table {
            MAIN_TABLE => f.write_str(", table main")?,
            t => write!(f, ", table {t}")?,
        }
        write!(f, ", metric {}", self.metric)?;
        if let Some(p) = &self.protocol {
            write!(f, ", proto {p}")?;
        }
        Ok(())
    }
}

/// The host's uplink: which interfaces carry the route the node itself depends on, and why.
///
/// The rule is upstream's:
/// - only the `main` table counts. A default in another table is policy routing (`ip rule …
///   table N`), the normal set-up of every rail of a multi-rail RoCE host and of cloud nodes with
///   one table per NIC; those NICs are exactly the ones to publish;
/// - per address family, only the lowest-metric default counts (all of them on a tie, every hop
///   of a multipath default): a higher-metric default is a backup path, not the uplink;
/// - whoever installed it: an IPv6 default learned from a router advertisement (`proto ra`) counts
///   beside an IPv4 default elsewhere, since moving its interface into a pod takes the host's IPv6
///   default away. Where routers advertise on every rail, the operator names the real uplinks
///   (`--uplink-interfaces`).
///
/// Returns the uplink interfaces with the route that makes each one an uplink, by name.
pub fn uplinks<'a>(
    links: impl IntoIterator<Item = (&'a str, &'a [DefaultRoute])>,
) -> std::collections::BTreeMap<String, DefaultRoute> {
    let links: Vec<(&str, &[DefaultRoute])> = links.into_iter().collect();
    let in_main = |f: IpFamily| {
        links
            .iter()
            .flat_map(|(n, rs)| rs.iter().map(move |r| (*n, r)))
            .filter(move |(_, r)| r.family == f && r.table == MAIN_TABLE)
    };
    let mut out = std::collections::BTreeMap::new();
    for family in [IpFamily::Ipv4, IpFamily::Ipv6] {
        let counted: Vec<(&str, &DefaultRoute)> = in_main(family).collect();
        let Some(best) = counted.iter().map(|(_, r)| r.metric).min() else {
            continue;
        };
        for (name, r) in counted.into_iter().filter(|(_, r)| r.metric == best) {
            out.entry(name.to_string()).or_insert_with(|| r.clone());
        }
    }
    out
}

/// Name of the ARPHRD link type, as iproute2 prints it (`link/ether`, `link/infiniband`).
pub fn arphrd_name(t: u16) -> Option<&'static str> {
    Some(match t {
        1 => "ether",
        24 => "ieee1394",
        32 => "infiniband",
        512 => "ppp",
        768 => "ipip",
        769 => "tunnel6",
        772 => "loopback",
        776 => "sit",
        778 => "gre",
        823 => "ip6gre",
        65534 => "none",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(family: IpFamily, table: u32, metric: u32, proto: Option<&str>) -> DefaultRoute {
        DefaultRoute {
            family,
            table,
            metric,
            gateway: None,
            protocol: proto.map(str::to_string),
        }
    }

    fn names(links: &[(&str, Vec<DefaultRoute>)]) -> Vec<String> {
        uplinks(links.iter().map(|(n, rs)| (*n, rs.as_slice())))
            .into_keys()
            .collect()
    }

    use IpFamily::{Ipv4, Ipv6};

    #[test]
    fn a_policy_table_default_is_not_the_uplink() {
        let links = [
            ("eth0", vec![r(Ipv4, MAIN_TABLE, 100, Some("dhcp"))]),
            ("rail0", vec![r(Ipv4, 101, 0, Some("static"))]),
            ("rail1", vec![r(Ipv4, 102, 0, Some("static"))]),
        ];
        assert_eq!(names(&links), ["eth0"]);
    }

    #[test]
    fn a_backup_default_with_a_higher_metric_is_not_the_uplink() {
        let links = [
            ("eth0", vec![r(Ipv4, MAIN_TABLE, 0, None)]),
            ("eth1", vec![r(Ipv4, MAIN_TABLE, 500, None)]),
        ];
        assert_eq!(names(&links), ["eth0"]);
    }

    #[test]
    fn equal_metrics_are_all_uplinks() {
        let links = [
            ("eth0", vec![r(Ipv4, MAIN_TABLE, 0, None)]),
            ("eth1", vec![r(Ipv4, MAIN_TABLE, 0, None)]),
        ];
        assert_eq!(names(&links), ["eth0", "eth1"]);
    }

    #[test]
    fn a_router_advertised_ipv6_default_counts_beside_ipv4() {
        let rails = |v4: bool| {
            let mut l = vec![("rail0", vec![r(Ipv6, MAIN_TABLE, 1024, Some("ra"))])];
            if v4 {
                l.push(("eth0", vec![r(Ipv4, MAIN_TABLE, 100, None)]));
            }
            l
        };
        assert_eq!(names(&rails(true)), ["eth0", "rail0"]);
        assert_eq!(names(&rails(false)), ["rail0"]);
    }

    #[test]
    fn a_static_ipv6_default_counts_beside_ipv4() {
        let links = [
            ("eth0", vec![r(Ipv4, MAIN_TABLE, 100, None)]),
            ("eth1", vec![r(Ipv6, MAIN_TABLE, 1024, Some("static"))]),
        ];
        assert_eq!(names(&links), ["eth0", "eth1"]);
    }

    #[test]
    fn the_reason_names_table_metric_and_gateway() {
        let mut d = r(Ipv4, MAIN_TABLE, 100, Some("dhcp"));
        d.gateway = Some("10.0.0.1".into());
        let u = uplinks([("eth0", std::slice::from_ref(&d))]);
        assert_eq!(
            u["eth0"].to_string(),
            "IPv4 default via 10.0.0.1, table main, metric 100, proto dhcp"
        );
    }
}
