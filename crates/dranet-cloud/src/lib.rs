//! `dranet-cloud`: what the cloud knows about a node, for dranet. Each provider implements
//! [`dranet_core::CloudProvider`]; the webhook also [`dranet_core::ProfileProvider`].
//!
//! | provider | service | attributes |
//! |---|---|---|
//! | [`azure`] | IMDS, `Metadata: true` | `azure.dra.net/*`: placement group, VM size, interconnect groups; per-NIC routing |
//! | [`gce`] | metadata server, `Metadata-Flavor: Google` | `gce.dra.net/*`: machine type, block, sub-block, host; per NIC network and alias ranges |
//! | [`aws`] | IMDSv2 (session token) | `aws.dra.net/*`: instance type, placement group, EFA, network card; Neuron device groups |
//! | [`oke`] | OCI IMDS v2, `Authorization: Bearer Oracle` | `oke.dra.net/*`: HPC island, network and local block, rack, GPU memory fabric |
//! | [`alibaba`] | IMDS (session token) + sysfs | `alibaba.dra.net/*`: instance type, eRDMA |
//! | [`cks`] | the Node's labels (CoreWeave CKS) + sysfs | `coreweave.dra.net/*`: fabric, superpod, leaf group, rack, link speed, instance type; per device leaf switch |
//! | [`webhook`] | the operator's HTTP server | whatever it answers; device config; profiles |
//!
//! [`detect::Detector`] decides which cloud the node is on: from DMI when it can tell, so a node
//! off every cloud makes no request at all; by short parallel probes when DMI is unreadable.
//! Every request goes through one client ([`http`]): bounded time (connect, request and whole
//! answer), bounded body ([`MAX_BODY_BYTES`]), no proxy; a service known to be there is retried
//! within a budget ([`RetryPolicy`]). Every failure is a warning and no attributes, never a crash.
//!
//! ```no_run
//! use dranet_cloud::detect::{Detector, Hint};
//! let d = Detector::new("/sys", Hint::Auto).detect_blocking();
//! for w in &d.warnings { eprintln!("{w}"); }
//! let cloud = d.provider.map(|p| p.into_cloud_provider());
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

/// The README's example, compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub mod alibaba;
mod attrs;
pub mod aws;
pub mod azure;
pub mod cks;
mod client;
pub mod detect;
pub mod dmi;
#[cfg(feature = "fake")]
pub mod fake;
pub mod gce;
pub mod http;
pub mod oke;
mod paths;
mod retry;
pub mod tls;
pub mod webhook;

pub use client::{LINK_LOCAL_ENDPOINT, MetadataClient};
pub use http::{Error, MAX_BODY_BYTES, Result};
pub use paths::PathMap;
pub use retry::RetryPolicy;

/// The PCI function of each RDMA device of `<sysfs>/class/infiniband/*`, by device name: each
/// link resolves to `…/<pci address>/infiniband/<device>` (providers that mark devices by their
/// RDMA device: Alibaba's eRDMA, CoreWeave's neighbour labels).
pub(crate) fn rdma_functions(
    sysfs: &std::path::Path,
) -> std::collections::BTreeMap<String, String> {
    std::fs::read_dir(sysfs.join("class/infiniband"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let dev = std::fs::canonicalize(e.path()).ok()?;
            let pci = dev
                .parent()?
                .parent()?
                .file_name()?
                .to_string_lossy()
                .into_owned();
            pci.parse::<dranet_core::PciAddress>().ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), pci))
        })
        .collect()
}
