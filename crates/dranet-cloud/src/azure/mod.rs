//! Azure: the Instance Metadata Service (IMDS).
//!
//! VMs in different Azure placement groups do not share an InfiniBand fabric, and nothing in node
//! labels says so. IMDS is read once at start:
//!
//! - node-wide attributes on every device: `azure.dra.net/placementGroupId`, `vmSize`,
//!   `interconnectGroupId`, `interconnectSubgroupId` (as upstream dranet), plus `location`, `zone`
//!   and `vmScaleSetName` — the fields a region-, zone- or node-pool-aware claim selects on. Empty
//!   fields are left out.
//! - per-NIC routing for Azure NICs with a netdev, matched by MAC: a policy-routing table per NIC
//!   (100 + its index in IMDS) with a default route via the subnet gateway and a source rule, and
//!   the same for IPv6 when both IMDS and the host route IPv6 through the NIC.

//!
//! Detection is [`crate::detect`]'s; [`crate::detect::azure`] has it with Azure as the only
//! candidate.

mod client;
mod imds;

pub use client::{DEFAULT_API_VERSION, DEFAULT_ENDPOINT, ImdsClient};
pub use imds::{
    AzureInstance, Compute, Interface, IpAddress, Ipv4, Ipv6, Network, ROUTING_TABLE_BASE, Subnet,
    attr, parse_compute, parse_instance_document, parse_network, routing_table,
};
