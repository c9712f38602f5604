//! The IMDS documents and what dranet makes of them.

use std::net::{IpAddr, Ipv4Addr};

use dranet_core::{
    Attributes, CloudProvider, DeviceIdentifiers, NetworkConfig, RouteConfig, RuleConfig,
};
use serde::Deserialize;

use crate::http::{Result, json_object};

/// Attribute names (fully qualified in the `azure.dra.net` domain).
pub mod attr {
    /// Placement group: VMs in one share an InfiniBand fabric.
    pub const PLACEMENT_GROUP_ID: &str = "azure.dra.net/placementGroupId";
    /// VM size (`Standard_ND96isr_MI300X_v5`).
    pub const VM_SIZE: &str = "azure.dra.net/vmSize";
    /// Interconnect group.
    pub const INTERCONNECT_GROUP_ID: &str = "azure.dra.net/interconnectGroupId";
    /// Interconnect subgroup.
    pub const INTERCONNECT_SUBGROUP_ID: &str = "azure.dra.net/interconnectSubgroupId";
    /// Region.
    pub const LOCATION: &str = "azure.dra.net/location";
    /// Availability zone.
    pub const ZONE: &str = "azure.dra.net/zone";
    /// The scale set (an AKS node pool).
    pub const VM_SCALE_SET_NAME: &str = "azure.dra.net/vmScaleSetName";
}

/// The fields of `/metadata/instance/compute` that dranet uses (IMDS adds fields over time;
/// unknown ones are ignored, missing ones are empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Compute {
    /// Placement group id.
    pub placement_group_id: String,
    /// VM size.
    pub vm_size: String,
    /// Interconnect group id.
    pub interconnect_group_id: String,
    /// Interconnect subgroup id.
    pub interconnect_subgroup_id: String,
    /// Region.
    pub location: String,
    /// Availability zone.
    pub zone: String,
    /// Scale set name.
    pub vm_scale_set_name: String,
    /// VM id.
    pub vm_id: String,
}

/// `/metadata/instance/network`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Network {
    /// The VM's NICs, in IMDS order.
    pub interface: Vec<Interface>,
}

/// One NIC.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Interface {
    /// IPv4 addresses and subnets.
    pub ipv4: Ipv4,
    /// IPv6 addresses.
    pub ipv6: Ipv6,
    /// MAC address, as IMDS prints it (`000D3AF806EC`).
    pub mac_address: String,
}

/// IPv4 configuration of a NIC.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Ipv4 {
    /// Addresses.
    pub ip_address: Vec<IpAddress>,
    /// Subnets.
    pub subnet: Vec<Subnet>,
}

/// IPv6 configuration of a NIC.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Ipv6 {
    /// Addresses.
    pub ip_address: Vec<IpAddress>,
}

/// An address.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IpAddress {
    /// Private address.
    pub private_ip_address: String,
    /// Public address.
    pub public_ip_address: String,
}

/// A subnet: network address and prefix length, both strings in IMDS.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Subnet {
    /// Network address.
    pub address: String,
    /// Prefix length.
    pub prefix: String,
}

/// Parses the compute document.
pub fn parse_compute(body: &[u8]) -> Result<Compute> {
    json_object("Azure IMDS compute document", body)
}

/// Parses the network document.
pub fn parse_network(body: &[u8]) -> Result<Network> {
    json_object("Azure IMDS network document", body)
}

/// An IMDS document saved on the node (`curl -H Metadata:true
/// "http://169.254.169.254/metadata/instance?api-version=2021-02-01"`): the whole instance document
/// (`compute` and `network`), or its `compute` part alone.
pub fn parse_instance_document(body: &[u8]) -> Result<AzureInstance> {
    let v: serde_json::Value = json_object("Azure IMDS instance document", body)?;
    let part = |k: &str| serde_json::to_vec(&v[k]).unwrap_or_default();
    if v.get("compute").is_none() {
        return Ok(AzureInstance {
            compute: parse_compute(body)?,
            network: Network::default(),
        });
    }
    Ok(AzureInstance {
        compute: parse_compute(&part("compute"))?,
        network: match v.get("network") {
            Some(_) => parse_network(&part("network"))?,
            None => Network::default(),
        },
    })
}

/// What IMDS said about this VM.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AzureInstance {
    /// The compute document.
    pub compute: Compute,
    /// The network document (empty when it could not be read: attributes still work).
    pub network: Network,
}

/// Policy-routing tables start here; NIC `i` of IMDS uses table `100 + i`.
pub const ROUTING_TABLE_BASE: u32 = 100;

/// The policy-routing table of the NIC at `index` in IMDS: [`ROUTING_TABLE_BASE`] + index,
/// skipping the kernel's reserved tables 253 (default), 254 (main) and 255 (local), which a node
/// with more than 152 NICs would otherwise reach.
pub fn routing_table(index: usize) -> u32 {
    let t = ROUTING_TABLE_BASE.saturating_add(u32::try_from(index).unwrap_or(u32::MAX - 1000));
    if t >= 253 { t.saturating_add(3) } else { t }
}

fn normalize_mac(m: &str) -> String {
    m.chars()
        .filter(|c| c.is_ascii_hexdigit())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The subnet's gateway: Azure answers on the first host address of every subnet.
fn subnet_gateway(s: &Subnet) -> Option<(Ipv4Addr, u8)> {
    let net: Ipv4Addr = s.address.parse().ok()?;
    let prefix: u8 = s.prefix.parse().ok()?;
    if prefix > 30 {
        return None;
    }
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    let base = u32::from(net) & mask;
    Some((Ipv4Addr::from(base + 1), prefix))
}

impl CloudProvider for AzureInstance {
    fn name(&self) -> &str {
        "azure"
    }

    fn node_attributes(&self) -> Attributes {
        let c = &self.compute;
        crate::attrs::strings([
            (attr::PLACEMENT_GROUP_ID, c.placement_group_id.as_str()),
            (attr::VM_SIZE, &c.vm_size),
            (attr::INTERCONNECT_GROUP_ID, &c.interconnect_group_id),
            (attr::INTERCONNECT_SUBGROUP_ID, &c.interconnect_subgroup_id),
            (attr::LOCATION, &c.location),
            (attr::ZONE, &c.zone),
            (attr::VM_SCALE_SET_NAME, &c.vm_scale_set_name),
        ])
    }

    fn device_config(&self, id: &DeviceIdentifiers) -> Option<NetworkConfig> {
        let mac = normalize_mac(id.mac.as_deref()?);
        if mac.is_empty() {
            return None;
        }
        let (index, nic) = self
            .network
            .interface
            .iter()
            .enumerate()
            .find(|(_, n)| normalize_mac(&n.mac_address) == mac)?;
        let table = routing_table(index);
        let mut cfg = NetworkConfig::default();
        if let Some(s) = nic.ipv4.subnet.first() {
            match subnet_gateway(s) {
                Some((gw, prefix)) => {
                    cfg.rules.push(RuleConfig {
                        source: format!("{}/{prefix}", s.address),
                        table,
                        ..RuleConfig::default()
                    });
                    cfg.routes.push(RouteConfig {
                        destination: "0.0.0.0/0".into(),
                        gateway: gw.to_string(),
                        table,
                        ..RouteConfig::default()
                    });
                }
                None => tracing::warn!(
                    "IMDS NIC {}: subnet {:?}/{:?} is not an IPv4 network with a gateway; no IPv4 routing",
                    nic.mac_address,
                    s.address,
                    s.prefix
                ),
            }
        }
        // IPv6 only when IMDS gives the NIC a global address and the host routes IPv6 through it.
        let v6 = nic
            .ipv6
            .ip_address
            .first()
            .and_then(|a| a.private_ip_address.parse::<IpAddr>().ok())
            .filter(|a| matches!(a, IpAddr::V6(v) if (v.segments()[0] & 0xffc0) != 0xfe80));
        if let (Some(addr), Some(gw)) = (v6, id.ipv6_gateway) {
            cfg.rules.push(RuleConfig {
                source: format!("{addr}/128"),
                table,
                ..RuleConfig::default()
            });
            cfg.routes.push(RouteConfig {
                destination: "::/0".into(),
                gateway: gw.to_string(),
                table,
                ..RouteConfig::default()
            });
        }
        (!cfg.routes.is_empty()).then_some(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_tables_skip_the_kernels_reserved_ones() {
        assert_eq!(routing_table(0), 100);
        assert_eq!(routing_table(152), 252);
        assert_eq!(routing_table(153), 256);
        let tables: Vec<u32> = (0..400).map(routing_table).collect();
        assert!(tables.iter().all(|t| !(253..=255).contains(t)));
        let mut sorted = tables.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), 400, "one table per NIC");
    }

    #[test]
    fn gateways() {
        let s = |a: &str, p: &str| Subnet {
            address: a.into(),
            prefix: p.into(),
        };
        assert_eq!(
            subnet_gateway(&s("10.0.0.0", "24")),
            Some(("10.0.0.1".parse().unwrap(), 24))
        );
        assert_eq!(
            subnet_gateway(&s("10.1.2.128", "25")),
            Some(("10.1.2.129".parse().unwrap(), 25))
        );
        assert_eq!(subnet_gateway(&s("10.0.0.0", "31")), None);
        assert_eq!(subnet_gateway(&s("fd00::", "64")), None);
        assert_eq!(subnet_gateway(&s("10.0.0.0", "x")), None);
        assert_eq!(normalize_mac("00-0D-3A:F8:06:EC"), "000d3af806ec");
    }
}
