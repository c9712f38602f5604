//! How a device reaches the pod (`interface.type`) and how its child gets addresses
//! (`interface.addressing`): upstream dranet's claim API for sharing one NIC between pods.
//!
//! `Passthrough` (the default) moves the NIC itself into the pod. `IPVLAN` leaves the NIC on the
//! host and creates a child of it directly in the pod's namespace, so several pods can each have
//! one. `Macvlan` is a dranet-rs addition, not upstream's: the same child as a macvlan (bridge
//! mode, a MAC of its own), for kernels built without ipvlan and for L2 uses that want a distinct
//! MAC per pod. A claim that says `Macvlan` is refused by upstream dranet.
//!
//! The rules, checked by [`NetworkConfig::validate`](crate::NetworkConfig::validate):
//! - a child never gets the host's addresses: it needs `interface.addresses` or
//!   `addressing: Unnumbered` (up, with no address);
//! - `Unnumbered` is for children only, and excludes addresses;
//! - a child cannot take `hardwareAddr` (an IPVLAN child has its parent's MAC), a VRF or
//!   ethtool settings (they belong to the parent NIC, shared by every pod);
//! - `ipvlan` is for `type: IPVLAN` only; its mode is `L2` and its flag `Bridge`;
//! - the deprecated `dhcp: true` reads as `addressing: DHCP`; setting both is refused.

use serde::{Deserialize, Serialize};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_upstreams_fnv1a() {
        // FNV-1a 32 of "" is the offset basis 2166136261; of "a" 0xe40c292c = 3826002220.
        assert_eq!(table_for_name(""), 2_166_136_261 % 1000 + 1000);
        assert_eq!(table_for_name("a"), 3_826_002_220 % 1000 + 1000);
        assert!((1000..2000).contains(&table_for_name("net1")));
    }
}
