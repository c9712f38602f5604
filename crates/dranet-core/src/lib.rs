//! `dranet-core`: the model of a GPU node's network devices and the DRA vocabulary they are
//! published in, with no I/O.
//!
//! - [`PciAddress`], [`PciDevice`] and [`PcieRoot`]: PCI functions, their ids, NUMA node, PCIe root
//!   and bridge path, SR-IOV role.
//! - [`Netdev`] and [`LinkState`]: network interfaces and what netlink adds to sysfs.
//! - [`RdmaLink`] and [`CharDevice`]: RDMA links and the `/dev/infiniband` nodes a pod needs.
//! - [`NumaTopology`]: nodes, SLIT distances, sockets.
//! - [`NetworkDevice`] and [`Inventory`]: what dranet publishes, plus GPUs for topology.
//! - [`topology::relation`]: PIX/PXB/PHB/NODE/SYS between any two PCI devices.
//! - [`attributes`] and [`slice`](mod@slice): DRA attributes within the API limits, and ResourceSlices.
//! - [`Semver`] and [`Quantity`]: the values of `version` attributes and of capacities, read as
//!   Kubernetes reads them.
//! - [`names`]: DRA device names.
//! - [`NetworkConfig`]: per-device network configuration (upstream's claim format), validated
//!   and merged over a cloud's.
//! - [`CloudProvider`]: what a cloud adds (attributes, per-NIC config); [`NoCloud`] by default.
//!   [`ProfileProvider`]: named profiles a claim asks for, resolved and released by a provider.
//! - [`Discover`] and [`LinkSource`]: the seams discovery implements (real host or fixtures).
//!
//! `dranet-discovery` fills the model from a host; anything that has an [`Inventory`] (a test, a
//! tool reading a saved one) can use the rest. Which devices the scheduler would give a claim,
//! with the CEL of its selectors, is `dranet-alloc`'s, built on this crate.
//!
//! Its dependencies are k8s-openapi (the DRA types, at the version the application picks),
//! serde, serde_json and thiserror.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

/// The README's example, compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// Kubernetes API 1.34 or newer (resource.k8s.io/v1); the application picks the exact version.
k8s_openapi::k8s_if_le_1_33! {
    compile_error!("dranet-core needs the Kubernetes 1.34 API or newer: enable k8s-openapi's v1_34 (or a newer) feature in your application");
}

/// The Kubernetes API types this crate's public items use, at the version the application picked.
pub use k8s_openapi;

pub mod attributes;
pub mod cloud;
mod config;
mod device;
mod error;
pub mod health;
pub mod interface_type;
pub mod names;
mod netdev;
mod numa;
mod pci;
pub mod pciids;
mod quantity;
mod rdma;
pub mod runtime_hook;
mod semver;
pub mod share;
pub mod slice;
pub mod topology;

pub use attributes::{AttributeOptions, AttributeValue, Attributes, DRIVER_NAME};
pub use cloud::{
    BoxFuture, CloudProvider, DeviceIdentifiers, NoCloud, ProfileError, ProfileProvider,
    ProfileRequest,
};
pub use config::{
    EthtoolConfig, InterfaceConfig, NeighborConfig, NetworkConfig, RouteConfig, RuleConfig,
    VrfConfig, limits,
};
pub use device::{Discover, Excluded, GpuNicMatrix, Inventory, LinkSource, NetworkDevice};
pub use error::{Error, Result};
pub use interface_type::{Addressing, InterfaceType, IpvlanConfig, IpvlanFlag, IpvlanMode};
pub use netdev::{
    DefaultRoute, EbpfPrograms, IpFamily, LinkState, MAIN_TABLE, Netdev, arphrd_name, uplinks,
};
pub use numa::{NumaNode, NumaTopology};
pub use pci::{
    PASSTHROUGH_DRIVERS, PciAddress, PciClass, PciDevice, PciIds, PcieRoot, SIDE_FUNCTIONS,
    SideFunction, SriovRole,
};
pub use quantity::{Quantity, QuantityError};
pub use rdma::{CharDevice, CharDeviceKind, RdmaLink, RdmaPort};
pub use runtime_hook::RuntimeHook;
pub use semver::{Semver, SemverError, VersionPart};
pub use topology::Relation;
