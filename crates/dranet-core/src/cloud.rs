//! Cloud providers: node-wide attributes, per-device attributes and per-device network
//! configuration that only the cloud knows (placement group, VM size, per-NIC routing).
//!
//! `dranet-azure` implements [`CloudProvider`] for Azure; [`NoCloud`] is the default.

use std::net::IpAddr;

use crate::{Attributes, NetworkConfig};

/// How a cloud recognises one of the node's devices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceIdentifiers {
    /// Interface name, when the device has a netdev.
    pub name: Option<String>,
    /// Hardware address, when the device has a netdev.
    pub mac: Option<String>,
    /// PCI address, when it has one.
    pub pci_address: Option<crate::PciAddress>,
    /// The IPv6 default gateway the host sees on this interface, when there is one (a cloud adds
    /// IPv6 routing only where the host already routes IPv6 through the NIC).
    pub ipv6_gateway: Option<IpAddr>,
}

impl DeviceIdentifiers {
    /// The identifiers of a discovered device.
    pub fn of(dev: &crate::NetworkDevice) -> Self {
        Self {
            name: dev.netdev.as_ref().map(|n| n.name.clone()),
            mac: dev.netdev.as_ref().and_then(|n| n.mac.clone()),
            pci_address: dev.pci.as_ref().map(|p| p.address),
            ipv6_gateway: dev
                .netdev
                .as_ref()
                .and_then(|n| n.ipv6_gateway.as_deref())
                .and_then(|g| g.parse().ok()),
        }
    }
}

/// What a cloud adds to discovery.
pub trait CloudProvider: Send + Sync {
    /// Short name for logs (`azure`, `none`).
    fn name(&self) -> &str;

    /// Attributes every device of the node carries (placement group, VM size, …).
    fn node_attributes(&self) -> Attributes;

    /// Attributes of one device, on top of the node's.
    fn device_attributes(&self, _id: &DeviceIdentifiers) -> Attributes {
        Attributes::new()
    }

    /// Network configuration the cloud needs on this device in a pod; a claim's own
    /// configuration is laid over it with [`NetworkConfig::merged_over`].
    fn device_config(&self, _id: &DeviceIdentifiers) -> Option<NetworkConfig> {
        None
    }
}

/// No cloud: adds nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCloud;

impl CloudProvider for NoCloud {
    fn name(&self) -> &str {
        "none"
    }

    fn node_attributes(&self) -> Attributes {
        Attributes::new()
    }
}
