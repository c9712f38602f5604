//! `dranet-azure`: Azure Instance Metadata Service (IMDS) support for dranet — the Azure provider
//! of [`dranet_cloud`], re-exported under its original paths so that embedders keep compiling.
//! New code can use [`dranet_cloud::azure`] (and the other clouds beside it) directly.
//!
//! VMs in different Azure placement groups do not share an InfiniBand fabric, and nothing in node
//! labels says so. IMDS is read once at start and [`AzureInstance`] implements
//! `dranet_core::CloudProvider` with what it learned:
//!
//! - node-wide attributes on every device: `azure.dra.net/placementGroupId`, `vmSize`,
//!   `interconnectGroupId`, `interconnectSubgroupId` (as upstream dranet), plus `location`, `zone`
//!   and `vmScaleSetName`. Empty fields are left out.
//! - per-NIC routing for Azure NICs with a netdev, matched by MAC: a policy-routing table per NIC
//!   (100 + its index in IMDS) with a default route via the subnet gateway and a source rule, and
//!   the same for IPv6 when both IMDS and the host route IPv6 through the NIC.
//!
//! Detection ([`Detector`]) costs nothing off Azure when DMI is readable (Azure's chassis asset tag
//! is `7783-7084-3265-9085`), and one short probe otherwise; on Azure it retries transient IMDS
//! errors with backoff within a bounded time. Every failure is a warning and no Azure attributes,
//! never a crash.
//!
//! ```no_run
//! use dranet_azure::{Detector, Hint, ImdsClient};
//! let d = Detector::new(ImdsClient::default(), "/sys", Hint::Auto).detect_blocking();
//! for w in &d.warnings { eprintln!("{w}"); }
//! if let Some(azure) = d.provider { println!("{:?}", azure.compute.placement_group_id); }
//! ```

#![warn(missing_docs)]

pub use dranet_cloud::azure::*;
pub use dranet_cloud::detect::azure::{Detection, Detector, Hint};
pub use dranet_cloud::dmi::AZURE_ASSET_TAG;
pub use dranet_cloud::{Error, MAX_BODY_BYTES, Result, RetryPolicy};

/// A fake IMDS for tests (feature `fake`): [`dranet_cloud::fake`]'s server with Azure's view.
#[cfg(feature = "fake")]
pub mod fake {
    pub use dranet_cloud::fake::Reply;
    pub use dranet_cloud::fake::clouds::{FakeImds, Seen};
}
