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
    /// It carries a default route (IPv4 or IPv6).
    pub default_route: bool,
    /// The IPv6 default gateway through this interface, if any.
    pub ipv6_gateway: Option<String>,
}

/// Link state that only netlink knows (or a fixture file stands in for): addresses, routes, kind.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LinkState {
    /// Interface name.
    pub name: String,
    /// Interface index.
    pub ifindex: Option<u32>,
    /// rtnetlink link kind (`veth`, `macvlan`, …); `None` for hardware devices.
    pub kind: Option<String>,
    /// Operational state, overriding sysfs when present.
    pub operstate: Option<String>,
    /// MTU, overriding sysfs when present.
    pub mtu: Option<u32>,
    /// IPv4 addresses in CIDR form.
    pub ipv4: Vec<String>,
    /// IPv6 addresses in CIDR form.
    pub ipv6: Vec<String>,
    /// Carries a default route.
    pub default_route: bool,
    /// Master interface name (bond, bridge, Hyper-V netvsc for an accelerated VF).
    pub master: Option<String>,
    /// The lower interface it is stacked on (a macvlan's or VLAN's parent).
    pub lower: Option<String>,
    /// The IPv6 default gateway through this interface, if any.
    pub ipv6_gateway: Option<String>,
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
