//! Which devices exist: by walking the sysfs tree, or by asking libudev.

use crate::{Error, Result, Sysfs};

/// The names of the devices of the three subsystems discovery looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceNames {
    /// PCI functions (`0000:03:00.0`).
    pub pci: Vec<String>,
    /// Netdevs (`eth0`).
    pub net: Vec<String>,
    /// RDMA links (`mlx5_0`).
    pub infiniband: Vec<String>,
}

/// Lists devices. Implemented by [`SysfsEnumerator`] (works on any root) and [`UdevEnumerator`]
/// (libudev, the host's `/sys` only); tests can supply their own.
pub trait Enumerate {
    /// The devices present now, each list sorted.
    fn enumerate(&self, sysfs: &Sysfs) -> Result<DeviceNames>;
}

/// Lists `bus/pci/devices`, `class/net` and `class/infiniband` under the reader's root.
#[derive(Debug, Clone, Copy, Default)]
pub struct SysfsEnumerator;

impl Enumerate for SysfsEnumerator {
    fn enumerate(&self, sysfs: &Sysfs) -> Result<DeviceNames> {
        let list = |rel: &str| {
            sysfs.list(rel).map_err(|source| Error::Io {
                path: sysfs.path(rel),
                source,
            })
        };
        Ok(DeviceNames {
            pci: list("bus/pci/devices")?,
            net: list("class/net")?,
            infiniband: list("class/infiniband")?,
        })
    }
}

/// Asks libudev (which reads the host's `/sys`) for the `pci`, `net` and `infiniband` devices.
/// Needs no udev daemon (feature `udev`).
#[cfg(feature = "udev")]
#[derive(Debug, Clone, Copy, Default)]
pub struct UdevEnumerator;

#[cfg(feature = "udev")]
impl Enumerate for UdevEnumerator {
    fn enumerate(&self, _sysfs: &Sysfs) -> Result<DeviceNames> {
        let scan = |subsystem: &str| -> Result<Vec<String>> {
            let mut e = udev::Enumerator::new().map_err(Error::Udev)?;
            e.match_subsystem(subsystem).map_err(Error::Udev)?;
            let mut v: Vec<String> = e
                .scan_devices()
                .map_err(Error::Udev)?
                .map(|d| d.sysname().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v.dedup();
            Ok(v)
        };
        Ok(DeviceNames {
            pci: scan("pci")?,
            net: scan("net")?,
            infiniband: scan("infiniband")?,
        })
    }
}
