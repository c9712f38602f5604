//! `dranet-azure`: Azure Instance Metadata Service (IMDS) support for dranet.
//!
//! VMs in different Azure placement groups do not share an InfiniBand fabric, and nothing in node
//! labels says so. This crate reads IMDS once at start and implements
//! [`dranet_core::CloudProvider`] with what it learned:
//!
//! - node-wide attributes on every device: `azure.dra.net/placementGroupId`, `vmSize`,
//!   `interconnectGroupId`, `interconnectSubgroupId` (as upstream dranet), plus `location`, `zone`
//!   and `vmScaleSetName` — the fields a region-, zone- or node-pool-aware claim selects on. Empty
//!   fields are left out.
//! - per-NIC routing for Azure NICs with a netdev, matched by MAC: a policy-routing table per NIC
//!   (100 + its index in IMDS) with a default route via the subnet gateway and a source rule, and
//!   the same for IPv6 when both IMDS and the host route IPv6 through the NIC.
//!
//! Detection ([`Detector`]) costs nothing off Azure when the DMI chassis asset tag is readable
//! (Azure's is `7783-7084-3265-9085`), and one short probe otherwise; on Azure it retries transient
//! IMDS errors with backoff within a bounded time. Every failure is a warning and no Azure
//! attributes, never a crash.
//!
//! ```no_run
//! use dranet_azure::{Detector, Hint, ImdsClient};
//! let d = Detector::new(ImdsClient::default(), "/sys", Hint::Auto).detect_blocking();
//! for w in &d.warnings { eprintln!("{w}"); }
//! if let Some(azure) = d.provider { println!("{:?}", azure.compute.placement_group_id); }
//! ```

#![warn(missing_docs)]

mod client;
mod detect;
#[cfg(feature = "fake")]
pub mod fake;
mod imds;

pub use client::{
    DEFAULT_API_VERSION, DEFAULT_ENDPOINT, Error, ImdsClient, MAX_BODY_BYTES, Result, RetryPolicy,
};
pub use detect::{AZURE_ASSET_TAG, Detection, Detector, Hint};
pub use imds::{
    AzureInstance, Compute, Interface, IpAddress, Ipv4, Ipv6, Network, ROUTING_TABLE_BASE, Subnet,
    attr, parse_compute, parse_network, routing_table,
};
