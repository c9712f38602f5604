//! `dranet-core`: the model of a GPU node's network devices, with no I/O.
//!
//! - [`PciAddress`], [`PciDevice`] and [`PcieRoot`]: PCI functions, their ids, NUMA node, PCIe root
//!   and bridge path, SR-IOV role.
//! - [`Netdev`] and [`LinkState`]: network interfaces and what netlink adds to sysfs.
//! - [`RdmaLink`] and [`CharDevice`]: RDMA links and the `/dev/infiniband` nodes a pod needs.
//! - [`NumaTopology`]: nodes, SLIT distances, sockets.
//! - [`NetworkDevice`] and [`Inventory`]: what dranet publishes, plus GPUs for topology.
//! - [`topology::relation`]: PIX/PXB/PHB/NODE/SYS between any two PCI devices.
//! - [`attributes`] and [`slice`](mod@slice): DRA attributes within the API limits, and ResourceSlices.
//! - [`names`]: DRA device names.
//! - [`NetworkConfig`]: per-device network configuration (upstream's claim format), validated
//!   and merged over a cloud's.
//! - [`CloudProvider`]: what a cloud adds (attributes, per-NIC config); [`NoCloud`] by default.
//!   [`ProfileProvider`]: named profiles a claim asks for, resolved and released by a provider.
//! - [`Discover`] and [`LinkSource`]: the seams discovery implements (real host or fixtures).
//!
//! - [`alloc`]: which devices the scheduler would give a claim, with [`cel`] for its selectors.
//! - [`report`]: a claim checked on each node: its devices, the GPU × NIC relations, the verdict
//!   (fits, fits unaligned, does not fit, invalid) — what `dranet check` prints.
//!
//! `dranet-discovery` fills the model from a host; anything that has an [`Inventory`] (a test, a
//! tool reading a saved one) can use the rest.
//!
//! The allocator and CEL stay in this crate rather than a crate of their own: they are pure logic
//! over the same DRA types as the rest, with no I/O and no dependencies beyond k8s-openapi, serde
//! and thiserror (the CEL evaluator is our own), so a separate crate would save an embedder
//! nothing; every user so far (`dranet check`, the benches, the scheduler-oracle tests) wants the
//! model too.
//!
//! # Example: would the scheduler put a NIC next to GPU 1?
//!
//! A claim template's request, checked against a node's published devices without a cluster:
//!
//! ```
//! use dranet_core::alloc::Allocator;
//! use dranet_core::k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimSpec};
//! use serde_json::json;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // What `dranet run` publishes: one slice of the node's pool (trimmed to two NICs).
//! let slice = json!({
//!     "metadata": {"name": "node-1-dra.net-0"},
//!     "spec": {
//!         "driver": "dra.net", "nodeName": "node-1",
//!         "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
//!         "devices": [
//!             {"name": "pci-0000-0c-00-0", "attributes": {"dra.net/numaNode": {"int": 0}, "dra.net/rdma": {"bool": true}}},
//!             {"name": "pci-0000-8c-00-0", "attributes": {"dra.net/numaNode": {"int": 1}, "dra.net/rdma": {"bool": true}}}
//!         ]
//!     }
//! });
//! let class: DeviceClass = serde_json::from_value(json!({
//!     "metadata": {"name": "dranet"},
//!     "spec": {"selectors": [{"cel": {"expression": "device.driver == 'dra.net'"}}]}
//! }))?;
//! let claim: ResourceClaimSpec = serde_json::from_value(json!({
//!     "devices": {"requests": [{"name": "nic", "exactly": {
//!         "deviceClassName": "dranet",
//!         "selectors": [{"cel": {"expression":
//!             "device.attributes['dra.net'].rdma && device.attributes['dra.net'].numaNode == 1"}}]
//!     }}]}
//! }))?;
//!
//! let alloc = Allocator::from_json(&[slice], &[class])?;
//! let result = alloc.allocate_spec(&claim, &[])?;
//! assert_eq!(result.results[0].device, "pci-0000-8c-00-0");
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

// Kubernetes API 1.34 or newer (resource.k8s.io/v1); the application picks the exact version.
k8s_openapi::k8s_if_le_1_33! {
    compile_error!("dranet-core needs the Kubernetes 1.34 API or newer: enable k8s-openapi's v1_34 (or a newer) feature in your application");
}

/// The Kubernetes API types this crate's public items use, at the version the application picked.
pub use k8s_openapi;

pub mod alloc;
pub mod attributes;
pub mod cel;
pub mod cloud;
mod config;
mod device;
mod error;
pub mod names;
mod netdev;
mod numa;
mod pci;
pub mod pciids;
mod rdma;
pub mod report;
pub mod slice;
pub mod topology;

pub use attributes::{AttributeOptions, AttributeValue, Attributes, DRIVER_NAME};
pub use cloud::{
    BoxFuture, CloudProvider, DeviceIdentifiers, NoCloud, ProfileError, ProfileProvider,
    ProfileRequest,
};
pub use config::{
    EthtoolConfig, InterfaceConfig, NeighborConfig, NetworkConfig, RouteConfig, RuleConfig,
    VrfConfig,
};
pub use device::{Discover, Excluded, GpuNicMatrix, Inventory, LinkSource, NetworkDevice};
pub use error::{Error, Result};
pub use netdev::{DefaultRoute, IpFamily, LinkState, MAIN_TABLE, Netdev, arphrd_name, uplinks};
pub use numa::{NumaNode, NumaTopology};
pub use pci::{PASSTHROUGH_DRIVERS, PciAddress, PciClass, PciDevice, PciIds, PcieRoot, SriovRole};
pub use rdma::{CharDevice, CharDeviceKind, RdmaLink, RdmaPort};
pub use topology::Relation;
