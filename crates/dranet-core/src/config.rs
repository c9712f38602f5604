//! Per-device network configuration: what a claim (or a cloud provider) asks dranet to set up on a
//! NIC when it moves into a pod. The JSON shape is upstream dranet's `NetworkConfig`, so claims
//! written for it keep working.

use std::collections::HashSet;
use std::hash::Hash;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::interface_type::{Addressing, InterfaceType, IpvlanConfig, table_for_name};
use crate::{Error, Result};

/// The configuration of one device in a pod.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkConfig {
    /// A named profile (resolved by a profile provider).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub profile: String,
    /// The interface itself.
    #[serde(default)]
    pub interface: InterfaceConfig,
    /// Routes to add.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteConfig>,
    /// Policy-routing rules to add.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleConfig>,
    /// Static neighbours (ARP/NDP entries).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub neighbors: Vec<NeighborConfig>,
    /// ethtool features and private flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ethtool: Option<EthtoolConfig>,
}

/// Interface settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InterfaceConfig {
    /// Name inside the pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// How the device reaches the pod (`Passthrough` when unset); see
    /// [`interface_type`](crate::interface_type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<InterfaceType>,
    /// How it gets addresses (`Static` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addressing: Option<Addressing>,
    /// Addresses in CIDR form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// Obtain addresses by DHCP (deprecated: `addressing: DHCP`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhcp: Option<bool>,
    /// MTU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<i32>,
    /// MAC address to set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_addr: Option<String>,
    /// GSO max size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gso_max_size: Option<i32>,
    /// GRO max size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gro_max_size: Option<i32>,
    /// GSO max size for IPv4.
    #[serde(
        default,
        rename = "gsoIPv4MaxSize",
        skip_serializing_if = "Option::is_none"
    )]
    pub gso_ipv4_max_size: Option<i32>,
    /// GRO max size for IPv4.
    #[serde(
        default,
        rename = "groIPv4MaxSize",
        skip_serializing_if = "Option::is_none"
    )]
    pub gro_ipv4_max_size: Option<i32>,
    /// Detach eBPF programs from the interface.
    #[serde(
        default,
        rename = "disableEbpfPrograms",
        skip_serializing_if = "Option::is_none"
    )]
    pub disable_ebpf_programs: Option<bool>,
    /// IP forwarding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarding: Option<bool>,
    /// `arp_ignore` sysctl.
    #[serde(default, rename = "arpIgnore", skip_serializing_if = "Option::is_none")]
    pub arp_ignore: Option<i32>,
    /// `arp_announce` sysctl.
    #[serde(
        default,
        rename = "arpAnnounce",
        skip_serializing_if = "Option::is_none"
    )]
    pub arp_announce: Option<i32>,
    /// `accept_ra` sysctl (IPv6): 0 ignores router advertisements, 1 accepts them unless the
    /// interface forwards, 2 accepts them also then.
    #[serde(default, rename = "acceptRA", skip_serializing_if = "Option::is_none")]
    pub accept_ra: Option<i32>,
    /// `dad_transmits` sysctl (IPv6): duplicate address detection probes (0: none).
    #[serde(
        default,
        rename = "dadTransmits",
        skip_serializing_if = "Option::is_none"
    )]
    pub dad_transmits: Option<i32>,
    /// `router_solicitation_delay` sysctl (IPv6), seconds before the first solicitation.
    #[serde(
        default,
        rename = "routerSolicitationDelay",
        skip_serializing_if = "Option::is_none"
    )]
    pub router_solicitation_delay: Option<i32>,
    /// `router_solicitation_interval` sysctl (IPv6), seconds between solicitations.
    #[serde(
        default,
        rename = "routerSolicitationInterval",
        skip_serializing_if = "Option::is_none"
    )]
    pub router_solicitation_interval: Option<i32>,
    /// `disable_ipv6` sysctl.
    #[serde(
        default,
        rename = "disableIPv6",
        skip_serializing_if = "Option::is_none"
    )]
    pub disable_ipv6: Option<bool>,
    /// `addr_gen_mode` sysctl (IPv6): how the interface identifier is made (0 EUI-64, 1 none, 2
    /// stable privacy, 3 random).
    #[serde(
        default,
        rename = "addrGenMode",
        skip_serializing_if = "Option::is_none"
    )]
    pub addr_gen_mode: Option<i32>,
    /// Put the interface in a VRF.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vrf: Option<VrfConfig>,
    /// IPVLAN child settings (`type: IPVLAN` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipvlan: Option<IpvlanConfig>,
}

/// A VRF.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VrfConfig {
    /// VRF device name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Its routing table; [`VrfConfig::table_id`] when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
}

impl VrfConfig {
    /// The VRF's routing table: `table`, or derived from the name as upstream does
    /// ([`table_for_name`]), so every interface that joins the VRF by name alone shares its
    /// table.
    pub fn table_id(&self) -> u32 {
        self.table.unwrap_or_else(|| table_for_name(&self.name))
    }
}

/// A route.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteConfig {
    /// Destination CIDR (`0.0.0.0/0` for a default route).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub destination: String,
    /// Next hop.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gateway: String,
    /// Preferred source address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// Route scope (0 universe, 253 link, 254 host).
    #[serde(default, skip_serializing_if = "is_zero_u8")]
    pub scope: u8,
    /// Routing table (0 = main).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub table: u32,
}

/// A policy-routing rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuleConfig {
    /// Rule priority.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub priority: u32,
    /// Source CIDR.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// Destination CIDR.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub destination: String,
    /// Table to look up.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub table: u32,
}

/// A static neighbour.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NeighborConfig {
    /// IP address.
    pub destination: String,
    /// Its MAC address.
    pub hardware_addr: String,
}

/// ethtool settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EthtoolConfig {
    /// Features to turn on or off.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub features: std::collections::BTreeMap<String, bool>,
    /// Driver private flags.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub private_flags: std::collections::BTreeMap<String, bool>,
}

/// The most entries of each list one device's configuration may hold, after the claim's and its
/// DeviceClass's entries are merged. Each is one netlink request when the device moves into its
/// pod, and each is kept in the record of the prepared claim: far more than any NIC needs (the
/// DRA API lets a claim's author write about 6,000 routes), few enough that the attach stays
/// short and the record small.
pub mod limits {
    /// `routes`.
    pub const ROUTES: usize = 1024;
    /// `rules`.
    pub const RULES: usize = 1024;
    /// `neighbors`.
    pub const NEIGHBORS: usize = 1024;
    /// `interface.addresses`.
    pub const ADDRESSES: usize = 256;
    /// `ethtool.features`, and `ethtool.privateFlags`, each.
    pub const ETHTOOL_NAMES: usize = 256;
}

fn is_zero_u8(v: &u8) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

fn check_cidr(field: &str, v: &str) -> Result<()> {
    let bad = |why: &str| refuse(field, &format!("{v:?} {why}"));
    let (ip, len) = v
        .split_once('/')
        .ok_or_else(|| bad("is not an address/prefix"))?;
    let ip: IpAddr = ip.parse().map_err(|_| bad("has no valid IP address"))?;
    let len: u8 = len.parse().map_err(|_| bad("has no valid prefix length"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(bad("has a prefix length out of range"));
    }
    Ok(())
}

fn check_ip(field: &str, v: &str) -> Result<()> {
    v.parse::<IpAddr>()
        .map(|_| ())
        .map_err(|_| refuse(field, &format!("{v:?} is not an IP address")))
}

impl NetworkConfig {
    /// Checks the size of each list against [`limits`]; the error names the list and its limit.
    /// Cheap: a merge checks it after each entry, so an oversized claim is refused before the
    /// work grows with it.
    pub fn check_limits(&self) -> Result<()> {
        let ethtool = self.ethtool.as_ref();
        let lists = [
            ("routes", self.routes.len(), limits::ROUTES),
            ("rules", self.rules.len(), limits::RULES),
            ("neighbors", self.neighbors.len(), limits::NEIGHBORS),
            (
                "interface.addresses",
                self.interface.addresses.len(),
                limits::ADDRESSES,
            ),
            (
                "ethtool.features",
                ethtool.map_or(0, |e| e.features.len()),
                limits::ETHTOOL_NAMES,
            ),
            (
                "ethtool.privateFlags",
                ethtool.map_or(0, |e| e.private_flags.len()),
                limits::ETHTOOL_NAMES,
            ),
        ];
        for (field, len, max) in lists {
            if len > max {
                return Err(refuse(
                    field,
                    &format!(
                        "{len} entries; one device's configuration may hold at most {max} \
                         (the claim's and its DeviceClass's entries together)"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks list sizes ([`Self::check_limits`]), addresses, routes and rules; the error names
    /// the field (`routes[1].gateway`).
    pub fn validate(&self) -> Result<()> {
        self.check_limits()?;
        for (i, a) in self.interface.addresses.iter().enumerate() {
            let field = format!("interface.addresses[{i}]");
            check_cidr(&field, a)?;
            // An interface address's prefix is its subnet: /0 would make every address of the
            // family on-link through this interface.
            if a.ends_with("/0") {
                return Err(refuse(
                    &field,
                    &format!("{a:?} has prefix length 0: give the subnet's prefix"),
                ));
            }
        }
        if let Some(m) = self.interface.mtu
            && !(68..=65535).contains(&m)
        {
            return Err(refuse(
                "interface.mtu",
                &format!("{m} is outside 68..=65535"),
            ));
        }
        for (i, r) in self.routes.iter().enumerate() {
            if !r.destination.is_empty() {
                check_cidr(&format!("routes[{i}].destination"), &r.destination)?;
            }
            if !r.gateway.is_empty() {
                check_ip(&format!("routes[{i}].gateway"), &r.gateway)?;
            }
            if !r.source.is_empty() {
                check_ip(&format!("routes[{i}].source"), &r.source)?;
            }
            if r.destination.is_empty() && r.gateway.is_empty() {
                return Err(refuse(
                    &format!("routes[{i}]"),
                    "needs a destination or a gateway",
                ));
            }
        }
        if let Some(vrf) = &self.interface.vrf {
            // Upstream's rules: the VRF's table is the interface's routing (every route goes
            // there), and the kernel's own tables are not a VRF's.
            if !self.rules.is_empty() {
                return Err(refuse(
                    "rules",
                    "not supported with interface.vrf: the interface's routes all go to the \
                     VRF's table",
                ));
            }
            if let Some(t @ (253..=255)) = vrf.table {
                return Err(refuse(
                    "interface.vrf.table",
                    &format!("{t} is one of the kernel's own tables (local, main, default)"),
                ));
            }
        }
        for (i, r) in self.rules.iter().enumerate() {
            if !r.source.is_empty() {
                check_cidr(&format!("rules[{i}].source"), &r.source)?;
            }
            if !r.destination.is_empty() {
                check_cidr(&format!("rules[{i}].destination"), &r.destination)?;
            }
        }
        for (i, n) in self.neighbors.iter().enumerate() {
            check_ip(&format!("neighbors[{i}].destination"), &n.destination)?;
        }
        if let Some(v) = self.interface.accept_ra
            && !(0..=2).contains(&v)
        {
            return Err(refuse(
                "interface.acceptRA",
                &format!("{v} is not 0, 1 or 2"),
            ));
        }
        self.validate_type()
    }

    /// Lays this (a claim's own) configuration over `base` (a cloud provider's): set scalars of
    /// the claim win, lists are the base's followed by the claim's, and duplicates keep the
    /// claim's entry (addresses by value, routes by destination and table, rules and neighbours
    /// by value / destination). Linear in the lists' lengths.
    pub fn merged_over(&self, base: &NetworkConfig) -> NetworkConfig {
        fn pick<T: Clone>(top: &Option<T>, base: &Option<T>) -> Option<T> {
            top.clone().or_else(|| base.clone())
        }
        fn pick_s(top: &str, base: &str) -> String {
            if top.is_empty() { base } else { top }.to_string()
        }
        let (t, b) = (&self.interface, &base.interface);
        let interface = InterfaceConfig {
            name: pick_s(&t.name, &b.name),
            r#type: pick(&t.r#type, &b.r#type),
            addressing: pick(&t.addressing, &b.addressing),
            addresses: last_of_each(&b.addresses, &t.addresses, |a| a.as_str()),
            dhcp: pick(&t.dhcp, &b.dhcp),
            mtu: pick(&t.mtu, &b.mtu),
            hardware_addr: pick(&t.hardware_addr, &b.hardware_addr),
            gso_max_size: pick(&t.gso_max_size, &b.gso_max_size),
            gro_max_size: pick(&t.gro_max_size, &b.gro_max_size),
            gso_ipv4_max_size: pick(&t.gso_ipv4_max_size, &b.gso_ipv4_max_size),
            gro_ipv4_max_size: pick(&t.gro_ipv4_max_size, &b.gro_ipv4_max_size),
            disable_ebpf_programs: pick(&t.disable_ebpf_programs, &b.disable_ebpf_programs),
            forwarding: pick(&t.forwarding, &b.forwarding),
            arp_ignore: pick(&t.arp_ignore, &b.arp_ignore),
            arp_announce: pick(&t.arp_announce, &b.arp_announce),
            accept_ra: pick(&t.accept_ra, &b.accept_ra),
            dad_transmits: pick(&t.dad_transmits, &b.dad_transmits),
            router_solicitation_delay: pick(
                &t.router_solicitation_delay,
                &b.router_solicitation_delay,
            ),
            router_solicitation_interval: pick(
                &t.router_solicitation_interval,
                &b.router_solicitation_interval,
            ),
            disable_ipv6: pick(&t.disable_ipv6, &b.disable_ipv6),
            addr_gen_mode: pick(&t.addr_gen_mode, &b.addr_gen_mode),
            vrf: pick(&t.vrf, &b.vrf),
            ipvlan: match (t.ipvlan, b.ipvlan) {
                (Some(t), Some(b)) => Some(IpvlanConfig {
                    mode: t.mode.or(b.mode),
                    flag: t.flag.or(b.flag),
                }),
                (t, b) => t.or(b),
            },
        };
        let ethtool = match (&self.ethtool, &base.ethtool) {
            (Some(t), Some(b)) => {
                let mut e = b.clone();
                e.features.extend(t.features.clone());
                e.private_flags.extend(t.private_flags.clone());
                Some(e)
            }
            (t, b) => pick(t, b),
        };
        NetworkConfig {
            profile: pick_s(&self.profile, &base.profile),
            interface,
            routes: last_of_each(&base.routes, &self.routes, |r| {
                (r.destination.as_str(), r.table)
            }),
            rules: last_of_each(&base.rules, &self.rules, |r| r),
            neighbors: last_of_each(&base.neighbors, &self.neighbors, |n| n.destination.as_str()),
            ethtool,
        }
    }
}

/// The refusal of `field`'s value, saying why.
fn refuse(field: &str, reason: &str) -> Error {
    Error::InvalidConfig {
        field: field.to_string(),
        reason: reason.to_string(),
    }
}

impl NetworkConfig {
    /// The interface's type (`Passthrough` when unset).
    pub fn interface_type(&self) -> InterfaceType {
        self.interface.r#type.unwrap_or_default()
    }

    /// The addressing in effect: `addressing`, else `DHCP` for the deprecated `dhcp: true`,
    /// else `Static`.
    pub fn addressing(&self) -> Addressing {
        match (self.interface.addressing, self.interface.dhcp) {
            (Some(a), _) => a,
            (None, Some(true)) => Addressing::Dhcp,
            (None, _) => Addressing::Static,
        }
    }

    /// The IPv6 sysctls the interface gets in the pod, by name under `net.ipv6.conf.<if>.`:
    /// those the claim sets, and for `addressing: SLAAC` upstream's defaults for the others
    /// (`accept_ra` 2, `dad_transmits` 0 unless the claim sets the MAC, `router_solicitation_delay`
    /// 0, `router_solicitation_interval` 1, `disable_ipv6` 0, and `addr_gen_mode` 3 for an
    /// IPVLAN child, whose MAC is its parent's), so the first solicitation goes out at once and
    /// the address is usable without waiting for duplicate address detection.
    pub fn ipv6_sysctls(&self) -> Vec<(&'static str, i32)> {
        let i = &self.interface;
        let slaac = self.addressing() == Addressing::Slaac;
        let default = |set: Option<i32>, d: Option<i32>| set.or(if slaac { d } else { None });
        let dad = if i.hardware_addr.is_some() {
            None
        } else {
            Some(0)
        };
        let gen_mode = (self.interface_type() == InterfaceType::Ipvlan).then_some(3);
        [
            (
                "disable_ipv6",
                default(i.disable_ipv6.map(i32::from), Some(0)),
            ),
            ("accept_ra", default(i.accept_ra, Some(2))),
            ("dad_transmits", default(i.dad_transmits, dad)),
            (
                "router_solicitation_delay",
                default(i.router_solicitation_delay, Some(0)),
            ),
            (
                "router_solicitation_interval",
                default(i.router_solicitation_interval, Some(1)),
            ),
            ("addr_gen_mode", default(i.addr_gen_mode, gen_mode)),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect()
    }

    /// The sharing rules of the module docs; the error names the field.
    fn validate_type(&self) -> Result<()> {
        let iface = &self.interface;
        let ty = self.interface_type();
        if iface.dhcp.is_some() && iface.addressing.is_some() {
            return Err(refuse(
                "interface.dhcp",
                "is deprecated and cannot be set with interface.addressing; keep only \
                 addressing",
            ));
        }
        if iface.ipvlan.is_some() && ty != InterfaceType::Ipvlan {
            return Err(refuse(
                "interface.ipvlan",
                &format!("applies to type IPVLAN only, not {}", ty.as_str()),
            ));
        }
        let addressing = self.addressing();
        if addressing == Addressing::Unnumbered {
            if !ty.is_child() {
                return Err(refuse(
                    "interface.addressing",
                    "Unnumbered is for a child interface only (type IPVLAN or Macvlan)",
                ));
            }
            if !iface.addresses.is_empty() {
                return Err(refuse(
                    "interface.addresses",
                    "an Unnumbered interface gets no addresses; remove them or use Static",
                ));
            }
        }
        if addressing == Addressing::Slaac {
            if iface.disable_ipv6 == Some(true) {
                return Err(refuse(
                    "interface.disableIPv6",
                    "SLAAC is IPv6 autoconfiguration: it cannot be disabled with it",
                ));
            }
            if iface.accept_ra == Some(0) {
                return Err(refuse(
                    "interface.acceptRA",
                    "0 ignores the router advertisements SLAAC takes its prefix from; use 1 or 2",
                ));
            }
        }
        for (field, v, range) in [
            ("interface.acceptRA", iface.accept_ra, 0..=2),
            ("interface.dadTransmits", iface.dad_transmits, 0..=i32::MAX),
            (
                "interface.routerSolicitationDelay",
                iface.router_solicitation_delay,
                0..=i32::MAX,
            ),
            (
                "interface.routerSolicitationInterval",
                iface.router_solicitation_interval,
                0..=i32::MAX,
            ),
            ("interface.addrGenMode", iface.addr_gen_mode, 0..=3),
        ] {
            if let Some(v) = v
                && !range.contains(&v)
            {
                return Err(refuse(
                    field,
                    &format!("{v} is out of range ({}..={})", range.start(), range.end()),
                ));
            }
        }
        if addressing == Addressing::Dhcp {
            // Upstream: "dhcp and addresses are mutually exclusive".
            if !iface.addresses.is_empty() {
                return Err(refuse(
                    "interface.addresses",
                    "DHCP gives the interface its address: remove addresses, or DHCP",
                ));
            }
            if ty.is_child() {
                return Err(refuse(
                    "interface.addressing",
                    &format!(
                        "DHCP is for type Passthrough only: a {} child is made in the pod, \
                         where dranet-rs runs no DHCP client; give it addresses",
                        ty.as_str()
                    ),
                ));
            }
        }
        if !ty.is_child() {
            return Ok(());
        }
        let child = |field: &str, what: &str| {
            refuse(
                field,
                &format!("cannot be set for type {}: {what}", ty.as_str()),
            )
        };
        if iface.hardware_addr.is_some() {
            return Err(child(
                "interface.hardwareAddr",
                "a child's MAC is its parent's (IPVLAN) or the kernel's choice (Macvlan)",
            ));
        }
        if iface.vrf.is_some() {
            return Err(child(
                "interface.vrf",
                "not supported for a child interface",
            ));
        }
        if self.ethtool.is_some() {
            return Err(child(
                "ethtool",
                "offloads belong to the parent NIC, which every pod sharing it uses",
            ));
        }
        if addressing == Addressing::Static && iface.addresses.is_empty() {
            return Err(refuse(
                "interface.addresses",
                &format!(
                    "a {} child never gets the host's addresses: give it addresses, or set \
                     interface.addressing: Unnumbered",
                    ty.as_str()
                ),
            ));
        }
        Ok(())
    }
}

/// `base` then `top`, keeping of the entries with one identity (`key`) only the last, where it
/// stands. One pass from the end with a set of the identities seen, borrowed, not cloned.
fn last_of_each<'a, T: Clone, K: Eq + Hash>(
    base: &'a [T],
    top: &'a [T],
    key: impl Fn(&'a T) -> K,
) -> Vec<T> {
    let mut seen = HashSet::with_capacity(base.len() + top.len());
    let mut out: Vec<T> = base
        .iter()
        .chain(top)
        .rev()
        .filter(|x| seen.insert(key(x)))
        .cloned()
        .collect();
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slaac_gets_upstreams_ipv6_sysctls_unless_the_claim_sets_them() {
        let c: NetworkConfig = serde_json::from_str(
            r#"{"interface":{"name":"net1","addressing":"SLAAC","routerSolicitationDelay":2}}"#,
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.addressing(), Addressing::Slaac);
        assert_eq!(
            c.ipv6_sysctls(),
            [
                ("disable_ipv6", 0),
                ("accept_ra", 2),
                ("dad_transmits", 0),
                ("router_solicitation_delay", 2),
                ("router_solicitation_interval", 1),
            ]
        );
        // A MAC set by the claim keeps duplicate address detection; an IPVLAN child gets a
        // random interface identifier (its MAC is its parent's).
        let c: NetworkConfig = serde_json::from_str(
            r#"{"interface":{"name":"net1","type":"IPVLAN","addressing":"SLAAC"}}"#,
        )
        .unwrap();
        let s = c.ipv6_sysctls();
        assert!(s.contains(&("addr_gen_mode", 3)), "{s:?}");
        let mut c: NetworkConfig = serde_json::from_str(
            r#"{"interface":{"addressing":"SLAAC","hardwareAddr":"02:00:00:00:00:01"}}"#,
        )
        .unwrap();
        assert!(!c.ipv6_sysctls().iter().any(|(k, _)| *k == "dad_transmits"));
        // Static: only what the claim sets.
        c.interface.addressing = None;
        c.interface.accept_ra = Some(1);
        assert_eq!(c.ipv6_sysctls(), [("accept_ra", 1)]);
        // What would keep SLAAC from working, refused naming the field.
        for (j, field) in [
            (
                r#"{"interface":{"addressing":"SLAAC","disableIPv6":true}}"#,
                "interface.disableIPv6",
            ),
            (
                r#"{"interface":{"addressing":"SLAAC","acceptRA":0}}"#,
                "interface.acceptRA",
            ),
            (
                r#"{"interface":{"addrGenMode":4}}"#,
                "interface.addrGenMode",
            ),
        ] {
            let c: NetworkConfig = serde_json::from_str(j).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(field), "{j}: {e}");
        }
    }

    #[test]
    fn upstream_json_round_trips() {
        let j = r#"{"interface":{"name":"eth1","addresses":["10.0.0.2/24"],"mtu":9000,"gsoIPv4MaxSize":65536},
                    "routes":[{"destination":"0.0.0.0/0","gateway":"10.0.0.1","table":100}],
                    "rules":[{"source":"10.0.0.0/24","table":100}]}"#;
        let c: NetworkConfig = serde_json::from_str(j).unwrap();
        assert_eq!(c.interface.gso_ipv4_max_size, Some(65536));
        assert_eq!(c.routes[0].table, 100);
        c.validate().unwrap();
        let back: NetworkConfig =
            serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        let err = serde_json::from_str::<NetworkConfig>(r#"{"interfce":{}}"#).unwrap_err();
        assert!(err.to_string().contains("interfce"));
    }

    #[test]
    fn a_vrf_without_a_table_gets_upstreams_and_refuses_rules() {
        let c: NetworkConfig =
            serde_json::from_str(r#"{"interface":{"vrf":{"name":"test-vrf"}}}"#).unwrap();
        let vrf = c.interface.vrf.as_ref().unwrap();
        // FNV-1a("test-vrf") = 0x6e92fd6a = 1855126890; % 1000 + 1000.
        assert_eq!(vrf.table_id(), 1890);
        c.validate().unwrap();
        let with_table = VrfConfig {
            name: "test-vrf".into(),
            table: Some(100),
        };
        assert_eq!(with_table.table_id(), 100);
        let rules: NetworkConfig = serde_json::from_str(
            r#"{"interface":{"vrf":{"name":"v"}},"rules":[{"source":"10.0.0.0/24","table":100}]}"#,
        )
        .unwrap();
        let e = rules.validate().unwrap_err().to_string();
        assert!(e.contains("rules") && e.contains("interface.vrf"), "{e}");
        let main: NetworkConfig =
            serde_json::from_str(r#"{"interface":{"vrf":{"name":"v","table":254}}}"#).unwrap();
        let e = main.validate().unwrap_err().to_string();
        assert!(e.contains("interface.vrf.table"), "{e}");
    }

    #[test]
    fn an_interface_address_needs_a_subnet() {
        for a in ["10.0.0.5/0", "fd00::5/0"] {
            let c: NetworkConfig =
                serde_json::from_value(serde_json::json!({"interface": {"addresses": [a]}}))
                    .unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(
                e.contains("interface.addresses[0]") && e.contains("prefix length 0"),
                "{e}"
            );
        }
        let route: NetworkConfig = serde_json::from_str(
            r#"{"interface":{"addresses":["10.0.0.5/24"]},"routes":[{"destination":"0.0.0.0/0","gateway":"10.0.0.1"}]}"#,
        )
        .unwrap();
        route.validate().unwrap();
    }

    #[test]
    fn accept_ra_parses_and_is_checked() {
        let c: NetworkConfig = serde_json::from_str(r#"{"interface":{"acceptRA":2}}"#).unwrap();
        assert_eq!(c.interface.accept_ra, Some(2));
        c.validate().unwrap();
        let c: NetworkConfig = serde_json::from_str(r#"{"interface":{"acceptRA":3}}"#).unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("interface.acceptRA"), "{e}");
    }

    #[test]
    fn validation_names_the_field() {
        let mut c = NetworkConfig::default();
        c.routes.push(RouteConfig {
            destination: "0.0.0.0/0".into(),
            gateway: "10.0.0.1".into(),
            ..Default::default()
        });
        c.routes.push(RouteConfig {
            destination: "10.1.0.0/16".into(),
            gateway: "nope".into(),
            ..Default::default()
        });
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("routes[1].gateway") && e.contains("nope"), "{e}");
        let c = NetworkConfig {
            interface: InterfaceConfig {
                addresses: vec!["10.0.0.1/33".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("interface.addresses[0]")
        );
    }

    #[test]
    fn claim_config_wins_over_the_cloud_and_lists_merge() {
        let cloud = NetworkConfig {
            interface: InterfaceConfig {
                mtu: Some(1500),
                addresses: vec!["10.0.0.4/24".into()],
                ..Default::default()
            },
            routes: vec![RouteConfig {
                destination: "0.0.0.0/0".into(),
                gateway: "10.0.0.1".into(),
                table: 100,
                ..Default::default()
            }],
            rules: vec![RuleConfig {
                source: "10.0.0.0/24".into(),
                table: 100,
                ..Default::default()
            }],
            ..Default::default()
        };
        let claim = NetworkConfig {
            interface: InterfaceConfig {
                name: "net1".into(),
                mtu: Some(9000),
                ..Default::default()
            },
            routes: vec![
                RouteConfig {
                    destination: "0.0.0.0/0".into(),
                    gateway: "10.0.0.254".into(),
                    table: 100,
                    ..Default::default()
                },
                RouteConfig {
                    destination: "192.168.0.0/16".into(),
                    gateway: "10.0.0.1".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let m = claim.merged_over(&cloud);
        assert_eq!(m.interface.name, "net1");
        assert_eq!(m.interface.mtu, Some(9000));
        assert_eq!(m.interface.addresses, vec!["10.0.0.4/24"]);
        assert_eq!(m.routes.len(), 2);
        assert_eq!(
            m.routes[0].gateway, "10.0.0.254",
            "the claim's default route replaces the cloud's"
        );
        assert_eq!(m.rules, cloud.rules);
        assert_eq!(NetworkConfig::default().merged_over(&cloud), cloud);
    }

    #[test]
    fn each_list_is_bounded_and_the_error_names_the_list_and_its_limit() {
        let route = |i: usize| RouteConfig {
            destination: format!("10.{}.{}.0/24", i >> 8, i & 0xff),
            gateway: "10.0.0.1".into(),
            ..Default::default()
        };
        let mut c = NetworkConfig {
            routes: (0..limits::ROUTES).map(route).collect(),
            ..Default::default()
        };
        c.validate().unwrap();
        c.routes.push(route(limits::ROUTES));
        let e = c.validate().unwrap_err();
        assert_eq!(
            e,
            Error::InvalidConfig {
                field: "routes".into(),
                reason: format!(
                    "1025 entries; one device's configuration may hold at most {} (the claim's \
                     and its DeviceClass's entries together)",
                    limits::ROUTES
                ),
            }
        );
        let c = NetworkConfig {
            neighbors: vec![
                NeighborConfig {
                    destination: "10.0.0.9".into(),
                    hardware_addr: "02:00:00:00:00:09".into(),
                };
                limits::NEIGHBORS + 1
            ],
            ..Default::default()
        };
        assert!(
            c.check_limits()
                .unwrap_err()
                .to_string()
                .contains("neighbors")
        );
        let c = NetworkConfig {
            rules: vec![RuleConfig::default(); limits::RULES + 1],
            ..Default::default()
        };
        assert!(c.check_limits().unwrap_err().to_string().contains("rules"));
        let mut features = std::collections::BTreeMap::new();
        for i in 0..=limits::ETHTOOL_NAMES {
            features.insert(format!("f{i}"), true);
        }
        let c = NetworkConfig {
            ethtool: Some(EthtoolConfig {
                features,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(
            c.check_limits()
                .unwrap_err()
                .to_string()
                .contains("ethtool.features")
        );
        let c = NetworkConfig {
            interface: InterfaceConfig {
                addresses: vec!["10.0.0.2/24".into(); limits::ADDRESSES + 1],
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(
            c.check_limits()
                .unwrap_err()
                .to_string()
                .contains("interface.addresses")
        );
    }

    /// The merge as it was written first (quadratic): what the linear one must still do.
    fn dedup_last_model<T: Clone, K: PartialEq>(v: Vec<T>, key: impl Fn(&T) -> K) -> Vec<T> {
        let mut out: Vec<T> = Vec::new();
        for (i, x) in v.iter().enumerate() {
            if !v[i + 1..].iter().any(|y| key(y) == key(x)) {
                out.push(x.clone());
            }
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn the_merge_keeps_the_last_of_each_identity_where_it_stands(
            base in proptest::collection::vec((0u8..6, 0u32..3, 0u8..4), 0..24),
            top in proptest::collection::vec((0u8..6, 0u32..3, 0u8..4), 0..24),
        ) {
            let routes = |v: &[(u8, u32, u8)]| -> Vec<RouteConfig> {
                v.iter()
                    .map(|(d, t, g)| RouteConfig {
                        destination: format!("10.{d}.0.0/16"),
                        gateway: format!("10.0.0.{g}"),
                        table: *t,
                        ..Default::default()
                    })
                    .collect()
            };
            let rules = |v: &[(u8, u32, u8)]| -> Vec<RuleConfig> {
                v.iter()
                    .map(|(d, t, p)| RuleConfig {
                        priority: u32::from(*p),
                        source: format!("10.{d}.0.0/16"),
                        table: *t,
                        ..Default::default()
                    })
                    .collect()
            };
            let neighbors = |v: &[(u8, u32, u8)]| -> Vec<NeighborConfig> {
                v.iter()
                    .map(|(d, _, m)| NeighborConfig {
                        destination: format!("10.0.0.{d}"),
                        hardware_addr: format!("02:00:00:00:00:0{m}"),
                    })
                    .collect()
            };
            let addresses = |v: &[(u8, u32, u8)]| -> Vec<String> {
                v.iter().map(|(d, _, _)| format!("10.0.{d}.1/24")).collect()
            };
            let cfg = |v: &[(u8, u32, u8)]| NetworkConfig {
                interface: InterfaceConfig {
                    addresses: addresses(v),
                    ..Default::default()
                },
                routes: routes(v),
                rules: rules(v),
                neighbors: neighbors(v),
                ..Default::default()
            };
            let (b, t) = (cfg(&base), cfg(&top));
            let m = t.merged_over(&b);
            proptest::prop_assert_eq!(
                m.routes,
                dedup_last_model([b.routes.clone(), t.routes.clone()].concat(), |r| {
                    (r.destination.clone(), r.table)
                })
            );
            proptest::prop_assert_eq!(
                m.rules,
                dedup_last_model([b.rules.clone(), t.rules.clone()].concat(), |r| r.clone())
            );
            proptest::prop_assert_eq!(
                m.neighbors,
                dedup_last_model([b.neighbors.clone(), t.neighbors.clone()].concat(), |n| {
                    n.destination.clone()
                })
            );
            proptest::prop_assert_eq!(
                m.interface.addresses,
                dedup_last_model(
                    [b.interface.addresses.clone(), t.interface.addresses.clone()].concat(),
                    |a| a.clone()
                )
            );
        }
    }
}
