//! How a device reaches the pod (`interface.type`) and how its child gets addresses
//! (`interface.addressing`): upstream dranet's claim API for sharing one NIC between pods.
//!
//! `Passthrough` (the default) moves the NIC itself into the pod. `IPVLAN` leaves the NIC on the
//! host and creates a child of it directly in the pod's namespace, so several pods can each have
//! one. `Macvlan` is a dranet-rs addition, not upstream's: the same child as a macvlan (bridge
//! mode, a MAC of its own), for kernels built without ipvlan and for L2 uses that want a distinct
//! MAC per pod. A claim that says `Macvlan` is refused by upstream dranet.
//!
//! The rules, checked by [`NetworkConfig::validate`]:
//! - a child never gets the host's addresses: it needs `interface.addresses` or
//!   `addressing: Unnumbered` (up, with no address);
//! - `Unnumbered` is for children only, and excludes addresses;
//! - a child cannot take `hardwareAddr` (an IPVLAN child has its parent's MAC), a VRF or
//!   ethtool settings (they belong to the parent NIC, shared by every pod);
//! - `ipvlan` is for `type: IPVLAN` only; its mode is `L2` and its flag `Bridge`;
//! - the deprecated `dhcp: true` reads as `addressing: DHCP`; setting both is refused.

use serde::{Deserialize, Serialize};

use crate::config::NetworkConfig;
use crate::{Error, Result};

/// How the allocated device is presented to the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum InterfaceType {
    /// The device itself moves into the pod's namespace.
    #[default]
    Passthrough,
    /// An ipvlan child of the device is created in the pod; the device stays on the host.
    #[serde(rename = "IPVLAN")]
    Ipvlan,
    /// A macvlan child (bridge mode) of the device is created in the pod (dranet-rs only).
    Macvlan,
}

impl InterfaceType {
    /// Whether the pod gets a child of the device rather than the device.
    pub fn is_child(self) -> bool {
        self != InterfaceType::Passthrough
    }

    /// The claim's spelling (`IPVLAN`).
    pub fn as_str(self) -> &'static str {
        match self {
            InterfaceType::Passthrough => "Passthrough",
            InterfaceType::Ipvlan => "IPVLAN",
            InterfaceType::Macvlan => "Macvlan",
        }
    }
}

/// How the pod's interface gets its IP configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Addressing {
    /// The claim's (or the cloud profile's) addresses.
    #[default]
    Static,
    /// DHCP.
    #[serde(rename = "DHCP")]
    Dhcp,
    /// Brought up with no address (children only).
    Unnumbered,
}

/// Settings of an IPVLAN child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IpvlanConfig {
    /// The ipvlan mode (default `L2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<IpvlanMode>,
    /// The ipvlan flag (default `Bridge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flag: Option<IpvlanFlag>,
}

/// The ipvlan mode; upstream defines `L2` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum IpvlanMode {
    /// Children answer ARP/ND themselves.
    #[default]
    L2,
}

/// The ipvlan flag; upstream defines `Bridge` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum IpvlanFlag {
    /// Children of one parent reach each other directly.
    #[default]
    Bridge,
}

/// The routing table of a child's source-based routing: FNV-1a of its name, modulo 1000, plus
/// 1000, as upstream derives it, so the same claim gets the same table under either driver.
pub fn table_for_name(name: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h % 1000 + 1000
}

/// The priority of the `from <address>` rule a child gets when the claim has no routes.
pub const SOURCE_RULE_PRIORITY: u32 = 32000;

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

    /// The sharing rules of the module docs; the error names the field.
    pub(crate) fn validate_type(&self) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(j: &str) -> Result<NetworkConfig> {
        let c: NetworkConfig = serde_json::from_str(j).map_err(|e| Error::InvalidConfig {
            field: "json".into(),
            reason: e.to_string(),
        })?;
        c.validate()?;
        Ok(c)
    }

    fn refused(j: &str, field: &str, words: &str) {
        match parse(j) {
            Err(Error::InvalidConfig { field: f, reason }) => {
                assert_eq!(f, field, "{j}: {reason}");
                assert!(reason.contains(words), "{j}: {reason}");
            }
            other => panic!("{j}: {other:?}"),
        }
    }

    #[test]
    fn upstream_claims_parse_with_their_defaults() {
        let c = parse(
            r#"{"interface":{"name":"net1","type":"IPVLAN","addresses":["10.0.0.5/24"],
                "mtu":1400,"ipvlan":{"mode":"L2","flag":"Bridge"}}}"#,
        )
        .unwrap();
        assert_eq!(c.interface_type(), InterfaceType::Ipvlan);
        assert_eq!(c.addressing(), Addressing::Static);
        assert_eq!(
            c.interface.ipvlan,
            Some(IpvlanConfig {
                mode: Some(IpvlanMode::L2),
                flag: Some(IpvlanFlag::Bridge)
            })
        );
        let c = parse(r#"{"interface":{"type":"IPVLAN","addressing":"Unnumbered"}}"#).unwrap();
        assert_eq!(c.addressing(), Addressing::Unnumbered);
        let c = parse(r#"{"interface":{"name":"eth1"}}"#).unwrap();
        assert_eq!(c.interface_type(), InterfaceType::Passthrough);
        let c = parse(r#"{"interface":{"dhcp":true}}"#).unwrap();
        assert_eq!(
            c.addressing(),
            Addressing::Dhcp,
            "deprecated dhcp still read"
        );
        let c = parse(r#"{"interface":{"type":"Macvlan","addresses":["10.0.0.6/24"]}}"#).unwrap();
        assert!(c.interface_type().is_child());
        // Round trip keeps the claim's spelling.
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["interface"]["type"], "Macvlan");
    }

    #[test]
    fn unknown_values_name_the_accepted_ones() {
        for (j, want) in [
            (r#"{"interface":{"type":"ipvlan"}}"#, "IPVLAN"),
            (r#"{"interface":{"addressing":"SLAAC"}}"#, "Unnumbered"),
            (
                r#"{"interface":{"type":"IPVLAN","ipvlan":{"mode":"L3"}}}"#,
                "L2",
            ),
            (
                r#"{"interface":{"type":"IPVLAN","ipvlan":{"flag":"Private"}}}"#,
                "Bridge",
            ),
            (
                r#"{"interface":{"type":"IPVLAN","ipvlan":{"mdoe":"L2"}}}"#,
                "mdoe",
            ),
        ] {
            let e = serde_json::from_str::<NetworkConfig>(j)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{j}: {e}");
        }
    }

    #[test]
    fn the_sharing_rules_refuse_with_the_field() {
        refused(
            r#"{"interface":{"type":"IPVLAN"}}"#,
            "interface.addresses",
            "never gets the host's addresses",
        );
        refused(
            r#"{"interface":{"addressing":"Unnumbered"}}"#,
            "interface.addressing",
            "child interface only",
        );
        refused(
            r#"{"interface":{"type":"Macvlan","addressing":"Unnumbered","addresses":["10.0.0.1/24"]}}"#,
            "interface.addresses",
            "no addresses",
        );
        refused(
            r#"{"interface":{"type":"IPVLAN","addresses":["10.0.0.1/24"],"hardwareAddr":"02:00:00:00:00:01"}}"#,
            "interface.hardwareAddr",
            "type IPVLAN",
        );
        refused(
            r#"{"interface":{"ipvlan":{"mode":"L2"}}}"#,
            "interface.ipvlan",
            "type IPVLAN only",
        );
        refused(
            r#"{"interface":{"dhcp":true,"addressing":"DHCP"}}"#,
            "interface.dhcp",
            "deprecated",
        );
        refused(
            r#"{"interface":{"type":"IPVLAN","addresses":["10.0.0.1/24"],"vrf":{"name":"v"}}}"#,
            "interface.vrf",
            "child",
        );
        refused(
            r#"{"interface":{"type":"IPVLAN","addresses":["10.0.0.1/24"]},"ethtool":{"features":{"tso":true}}}"#,
            "ethtool",
            "parent NIC",
        );
    }

    #[test]
    fn table_matches_upstreams_fnv1a() {
        // FNV-1a 32 of "" is the offset basis 2166136261; of "a" 0xe40c292c = 3826002220.
        assert_eq!(table_for_name(""), 2_166_136_261 % 1000 + 1000);
        assert_eq!(table_for_name("a"), 3_826_002_220 % 1000 + 1000);
        assert!((1000..2000).contains(&table_for_name("net1")));
    }
}
