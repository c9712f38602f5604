//! `dranet-discovery`: a Linux host's NICs, RDMA links, GPUs, NUMA and PCIe topology, read into
//! the [`dranet_core`] model.
//!
//! - [`Sysfs`]: one reader for every sysfs file, rooted anywhere (`/sys`, a host's sysfs mounted
//!   at `/host/sys`, a fixture tree), so the same parsing runs on all of them.
//! - [`Enumerate`]: which devices exist — [`UdevEnumerator`] (libudev, no udev daemon needed) or
//!   [`SysfsEnumerator`] (walks the rooted tree).
//! - [`links`]: what only netlink knows (addresses, default routes, link kinds, eBPF programs),
//!   from the kernel or a fixture file.
//! - `ebpf` (feature `netlink`): the TC and TCX programs on a link, and their removal.
//! - [`Discovery`]: puts them together and implements [`dranet_core::Discover`].
//! - [`monitor`]: kernel uevents for hot-plug.
//! - [`fixture`]: builds sysfs trees modelled on the kernel ABI, for tests of any driver.
//!
//! On a host, `dranet_discovery::host(Path::new("/sys"), Default::default())`. The same code on
//! the fixture of an Azure ND GB300 v6 node, asking which NICs sit next to each GPU:
//!
//! ```
//! use dranet_core::{Discover, Relation};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! dranet_discovery::fixture::azure_nd_gb300_v6(dir.path())?;
//! let inventory = dranet_discovery::host(&dir.path().join("sys"), Default::default()).discover()?;
//!
//! let matrix = inventory.gpu_nic_matrix();
//! assert_eq!((matrix.gpus.len(), matrix.nics.len()), (4, 4));
//! for gpu in &inventory.gpus {
//!     let (nic, relation) = inventory.nearest_nics(gpu)[0];
//!     println!("GPU {} -> {} ({relation})", gpu.address, nic.name);
//!     assert!(relation <= Relation::Node, "a NIC on the GPU's own NUMA node");
//! }
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

/// The README's example, compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(feature = "netlink")]
pub mod ebpf;
mod enumerate;
mod error;
pub mod fixture;
pub mod links;
#[cfg(feature = "udev")]
pub mod monitor;
mod scan;
mod sysfs;
pub mod vpd;
#[cfg(all(feature = "udev", feature = "netlink"))]
pub mod watch;

use std::path::Path;

#[cfg(feature = "udev")]
pub use enumerate::UdevEnumerator;
pub use enumerate::{DeviceNames, Enumerate, SysfsEnumerator};
pub use error::{Error, Result};
#[cfg(feature = "netlink")]
pub use links::NetlinkLinks;
pub use links::{FixtureLinks, NoLinks};
pub use scan::{Discovery, Options};
pub use sysfs::{Access, Sysfs};

/// Where link state comes from.
#[derive(Debug, Clone)]
pub enum Links {
    /// The kernel, through rtnetlink.
    #[cfg(feature = "netlink")]
    Netlink(NetlinkLinks),
    /// A fixture file.
    Fixture(FixtureLinks),
    /// None: the crate was built without the `netlink` feature. Discovery of a host fails
    /// (closed) rather than risk publishing the uplink.
    Unavailable,
}

impl dranet_core::LinkSource for Links {
    type Error = Error;

    fn links(&self) -> Result<Vec<dranet_core::LinkState>> {
        match self {
            #[cfg(feature = "netlink")]
            Links::Netlink(n) => n.links(),
            Links::Fixture(f) => f.links(),
            Links::Unavailable => Err(Error::NetlinkUnavailable(
                "dranet-discovery was built without its netlink feature",
            )),
        }
    }
}

/// Discovery of the tree at `sysfs` as the CLI and daemon do it: libudev enumeration when the
/// root is the host's `/sys`, a walk of the tree otherwise; link state from `links.json` beside a
/// fixture's `sys` directory when there is one, from netlink otherwise.
pub fn host(sysfs: &Path, options: Options) -> Discovery<Box<dyn Enumerate + Send + Sync>, Links> {
    let fixture = sysfs
        .parent()
        .map(|p| p.join("links.json"))
        .filter(|p| p.is_file());
    let links = match fixture {
        Some(path) => Links::Fixture(FixtureLinks { path }),
        #[cfg(feature = "netlink")]
        None => Links::Netlink(NetlinkLinks),
        #[cfg(not(feature = "netlink"))]
        None => Links::Unavailable,
    };
    #[cfg(feature = "udev")]
    let enumerator: Box<dyn Enumerate + Send + Sync> = if sysfs == Path::new("/sys") {
        Box::new(UdevEnumerator)
    } else {
        Box::new(SysfsEnumerator)
    };
    #[cfg(not(feature = "udev"))]
    let enumerator: Box<dyn Enumerate + Send + Sync> = Box::new(SysfsEnumerator);
    Discovery::new(Sysfs::new(sysfs), enumerator, links, options)
}

impl<T: Enumerate + ?Sized> Enumerate for Box<T> {
    fn enumerate(&self, sysfs: &Sysfs) -> Result<DeviceNames> {
        (**self).enumerate(sysfs)
    }
}
