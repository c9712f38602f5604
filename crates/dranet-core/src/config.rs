//! Per-device network configuration: what a claim (or a cloud provider) asks dranet to set up on a
//! NIC when it moves into a pod. The JSON shape is upstream dranet's `NetworkConfig`, so claims
//! written for it keep working.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

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
    /// How the device reaches the pod: moved into it (unset, `Passthrough`) or as an IPVLAN
    /// child of it (`IPVLAN`). An empty string is unset, as upstream reads it.
    #[serde(
        default,
        rename = "type",
        deserialize_with = "empty_is_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub r#type: Option<InterfaceType>,
    /// Where the addresses come from: `Static` (unset: `addresses`), `DHCP` or `Unnumbered`
    /// (none, an IPVLAN child only). [`InterfaceConfig::effective_addressing`] folds in `dhcp`.
    #[serde(
        default,
        deserialize_with = "empty_is_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub addressing: Option<AddressingMode>,
    /// Addresses in CIDR form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// Obtain addresses by DHCP: upstream's older spelling of `addressing: DHCP`.
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
    /// Put the interface in a VRF.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vrf: Option<VrfConfig>,
    /// The IPVLAN child's mode and flag (`type: IPVLAN` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipvlan: Option<IpvlanConfig>,
}

impl InterfaceConfig {
    /// The type asked for, `Passthrough` when unset.
    pub fn effective_type(&self) -> InterfaceType {
        self.r#type.unwrap_or_default()
    }

    /// How the addresses are obtained: `addressing`, else `DHCP` for `dhcp: true`, else
    /// `Static`.
    pub fn effective_addressing(&self) -> AddressingMode {
        match (self.addressing, self.dhcp) {
            (Some(a), _) => a,
            (None, Some(true)) => AddressingMode::Dhcp,
            (None, _) => AddressingMode::Static,
        }
    }
}

/// How an allocated device reaches the pod (`interface.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum InterfaceType {
    /// The device itself moves into the pod's network namespace.
    #[default]
    Passthrough,
    /// The device stays on the host; the pod gets an IPVLAN child of it.
    #[serde(rename = "IPVLAN")]
    Ipvlan,
}

/// Where an interface's addresses come from (`interface.addressing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum AddressingMode {
    /// From `addresses` (or the host's, moved with the device).
    #[default]
    Static,
    /// A DHCPv4 lease, obtained on the host before the move.
    #[serde(rename = "DHCP")]
    Dhcp,
    /// None at all: the interface only comes up (an IPVLAN child).
    Unnumbered,
}

/// An IPVLAN child's settings (`interface.ipvlan`); unset fields take upstream's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IpvlanConfig {
    /// Its mode (`L2` when unset).
    #[serde(
        default,
        deserialize_with = "empty_is_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub mode: Option<IpvlanMode>,
    /// Its flag (`Bridge` when unset).
    #[serde(
        default,
        deserialize_with = "empty_is_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub flag: Option<IpvlanFlag>,
}

/// An IPVLAN mode: upstream offers L2 only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum IpvlanMode {
    /// The children answer ARP/NDP themselves (`IPVLAN_MODE_L2`).
    #[default]
    L2,
}

/// An IPVLAN flag: upstream offers bridge only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum IpvlanFlag {
    /// Children of one parent reach each other inside the host (`IPVLAN_F_BRIDGE`, 0).
    #[default]
    Bridge,
}

/// Reads an optional enum whose empty string means unset (Go's zero value, which upstream's
/// claims may carry).
fn empty_is_none<'de, D, T>(d: D) -> std::result::Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    use serde::de::IntoDeserializer;
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => T::deserialize(s.into_deserializer()).map(Some),
    }
}

/// A VRF.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VrfConfig {
    /// VRF device name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Its routing table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
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
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
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

fn is_zero_u8(v: &u8) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

fn check_cidr(field: &str, v: &str) -> Result<()> {
    let bad = |why: &str| Error::InvalidConfig {
        field: field.to_string(),
        reason: format!("{v:?} {why}"),
    };
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
        .map_err(|_| Error::InvalidConfig {
            field: field.to_string(),
            reason: format!("{v:?} is not an IP address"),
        })
}

impl NetworkConfig {
    /// Checks addresses, routes and rules; the error names the field (`routes[1].gateway`).
    pub fn validate(&self) -> Result<()> {
        for (i, a) in self.interface.addresses.iter().enumerate() {
            check_cidr(&format!("interface.addresses[{i}]"), a)?;
        }
        if let Some(m) = self.interface.mtu
            && !(68..=65535).contains(&m)
        {
            return Err(Error::InvalidConfig {
                field: "interface.mtu".into(),
                reason: format!("{m} is outside 68..=65535"),
            });
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
                return Err(Error::InvalidConfig {
                    field: format!("routes[{i}]"),
                    reason: "needs a destination or a gateway".into(),
                });
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
        let iface = &self.interface;
        if let Some(v) = iface.accept_ra
            && !(0..=2).contains(&v)
        {
            return Err(Error::InvalidConfig {
                field: "interface.acceptRA".into(),
                reason: format!("{v} is not 0, 1 or 2"),
            });
        }
        if let (Some(dhcp), Some(a)) = (iface.dhcp, iface.addressing)
            && dhcp != (a == AddressingMode::Dhcp)
        {
            return Err(Error::InvalidConfig {
                field: "interface.dhcp".into(),
                reason: format!(
                    "{dhcp} contradicts interface.addressing {:?}; set addressing only",
                    a
                ),
            });
        }
        Ok(())
    }

    /// Checks the configuration a device gets (every entry merged, see
    /// [`merged_over`](Self::merged_over)): [`validate`](Self::validate), and the rules between
    /// fields that separate entries may set (a DeviceClass the IPVLAN mode, a claim the type).
    pub fn validate_final(&self) -> Result<()> {
        self.validate()?;
        let iface = &self.interface;
        let bad = |field: &str, reason: String| {
            Err(Error::InvalidConfig {
                field: field.into(),
                reason,
            })
        };
        let ipvlan = iface.effective_type() == InterfaceType::Ipvlan;
        match iface.effective_addressing() {
            AddressingMode::Static => {}
            a @ (AddressingMode::Dhcp | AddressingMode::Unnumbered)
                if !iface.addresses.is_empty() =>
            {
                let a = if a == AddressingMode::Dhcp {
                    "DHCP"
                } else {
                    "Unnumbered"
                };
                return bad(
                    "interface.addresses",
                    format!("addressing {a} takes no addresses; set one or the other"),
                );
            }
            AddressingMode::Unnumbered if !ipvlan => {
                return bad(
                    "interface.addressing",
                    "Unnumbered is for an IPVLAN child (interface.type: IPVLAN) only".into(),
                );
            }
            AddressingMode::Dhcp if ipvlan => {
                return bad(
                    "interface.addressing",
                    "DHCP cannot address an IPVLAN child: the client runs on the parent, on \
                     the host"
                        .into(),
                );
            }
            AddressingMode::Dhcp | AddressingMode::Unnumbered => {}
        }
        if iface.ipvlan.is_some() && !ipvlan {
            return bad(
                "interface.ipvlan",
                "applies to interface.type IPVLAN only".into(),
            );
        }
        if ipvlan && iface.hardware_addr.is_some() {
            return bad(
                "interface.hardwareAddr",
                "an IPVLAN child has its parent's hardware address".into(),
            );
        }
        Ok(())
    }

    /// Lays this (a claim's own) configuration over `base` (a cloud provider's): set scalars of
    /// the claim win, lists are the base's followed by the claim's, and duplicates keep the
    /// claim's entry (addresses by value, routes by destination and table, rules and neighbours
    /// by value / destination).
    pub fn merged_over(&self, base: &NetworkConfig) -> NetworkConfig {
        fn pick<T: Clone>(top: &Option<T>, base: &Option<T>) -> Option<T> {
            top.clone().or_else(|| base.clone())
        }
        fn pick_s(top: &str, base: &str) -> String {
            if top.is_empty() { base } else { top }.to_string()
        }
        fn dedup_last<T: Clone, K: PartialEq>(v: Vec<T>, key: impl Fn(&T) -> K) -> Vec<T> {
            let mut out: Vec<T> = Vec::new();
            for (i, x) in v.iter().enumerate() {
                if !v[i + 1..].iter().any(|y| key(y) == key(x)) {
                    out.push(x.clone());
                }
            }
            out
        }
        let (t, b) = (&self.interface, &base.interface);
        let interface = InterfaceConfig {
            name: pick_s(&t.name, &b.name),
            r#type: pick(&t.r#type, &b.r#type),
            addressing: pick(&t.addressing, &b.addressing),
            addresses: dedup_last([b.addresses.clone(), t.addresses.clone()].concat(), |a| {
                a.clone()
            }),
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
            vrf: pick(&t.vrf, &b.vrf),
            ipvlan: match (&t.ipvlan, &b.ipvlan) {
                (Some(t), Some(b)) => Some(IpvlanConfig {
                    mode: t.mode.or(b.mode),
                    flag: t.flag.or(b.flag),
                }),
                (t, b) => pick(t, b),
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
            routes: dedup_last([base.routes.clone(), self.routes.clone()].concat(), |r| {
                (r.destination.clone(), r.table)
            }),
            rules: dedup_last([base.rules.clone(), self.rules.clone()].concat(), |r| {
                r.clone()
            }),
            neighbors: dedup_last(
                [base.neighbors.clone(), self.neighbors.clone()].concat(),
                |n| n.destination.clone(),
            ),
            ethtool,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn upstream_fields_since_1_4_parse_and_are_checked() {
        let j = r#"{"interface":{"type":"IPVLAN","addressing":"Unnumbered","acceptRA":2,
                    "ipvlan":{"mode":"L2","flag":"Bridge"}}}"#;
        let c: NetworkConfig = serde_json::from_str(j).unwrap();
        assert_eq!(c.interface.r#type, Some(InterfaceType::Ipvlan));
        assert_eq!(c.interface.addressing, Some(AddressingMode::Unnumbered));
        assert_eq!(c.interface.accept_ra, Some(2));
        assert_eq!(
            c.interface.ipvlan,
            Some(IpvlanConfig {
                mode: Some(IpvlanMode::L2),
                flag: Some(IpvlanFlag::Bridge)
            })
        );
        c.validate_final().unwrap();
        let back: NetworkConfig =
            serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        // An empty string is unset, as upstream reads it.
        let c: NetworkConfig =
            serde_json::from_str(r#"{"interface":{"type":"","addressing":""}}"#).unwrap();
        assert_eq!((c.interface.r#type, c.interface.addressing), (None, None));
        // Unknown values name the known ones.
        let e = serde_json::from_str::<NetworkConfig>(r#"{"interface":{"type":"MACVLAN"}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("Passthrough") && e.contains("IPVLAN"), "{e}");
        let e = serde_json::from_str::<NetworkConfig>(r#"{"interface":{"addressing":"Auto"}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("Static") && e.contains("Unnumbered"), "{e}");
        // `dhcp: true` is `addressing: DHCP`.
        let c: NetworkConfig = serde_json::from_str(r#"{"interface":{"dhcp":true}}"#).unwrap();
        assert_eq!(c.interface.effective_addressing(), AddressingMode::Dhcp);
        assert_eq!(
            InterfaceConfig::default().effective_addressing(),
            AddressingMode::Static
        );
        let bad = |j: &str, field: &str| {
            let c: NetworkConfig = serde_json::from_str(j).unwrap();
            let e = c
                .validate()
                .and_then(|()| c.validate_final())
                .unwrap_err()
                .to_string();
            assert!(e.contains(field), "{j}: {e}");
        };
        bad(r#"{"interface":{"acceptRA":3}}"#, "interface.acceptRA");
        bad(
            r#"{"interface":{"dhcp":true,"addressing":"Static"}}"#,
            "interface.dhcp",
        );
        bad(
            r#"{"interface":{"addressing":"DHCP","addresses":["10.0.0.1/24"]}}"#,
            "interface.addresses",
        );
        bad(
            r#"{"interface":{"addressing":"Unnumbered"}}"#,
            "interface.addressing",
        );
        bad(
            r#"{"interface":{"ipvlan":{"mode":"L2"}}}"#,
            "interface.ipvlan",
        );
        bad(
            r#"{"interface":{"type":"IPVLAN","hardwareAddr":"02:00:00:00:00:01"}}"#,
            "interface.hardwareAddr",
        );
        bad(
            r#"{"interface":{"type":"IPVLAN","addressing":"DHCP"}}"#,
            "interface.addressing",
        );
        // A partial entry (a DeviceClass giving the IPVLAN mode, the claim the type) is fine on
        // its own; the merged configuration is what must be whole.
        let class: NetworkConfig =
            serde_json::from_str(r#"{"interface":{"ipvlan":{"flag":"Bridge"}}}"#).unwrap();
        class.validate().unwrap();
        let claim: NetworkConfig = serde_json::from_str(
            r#"{"interface":{"type":"IPVLAN","ipvlan":{"mode":"L2"}}}"#,
        )
        .unwrap();
        let m = claim.merged_over(&class);
        assert_eq!(
            m.interface.ipvlan,
            Some(IpvlanConfig {
                mode: Some(IpvlanMode::L2),
                flag: Some(IpvlanFlag::Bridge)
            })
        );
        m.validate_final().unwrap();
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
}
