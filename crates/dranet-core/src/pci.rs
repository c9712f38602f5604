//! PCI addresses, ids, classes, PCIe roots and the PCI device model.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A PCI function address, `dddd:bb:dd.f` (domain, bus, device, function).
///
/// Parsing accepts upper- or lowercase hex and a domain of 4 to 8 hex digits (Hyper-V vPCI uses
/// domains such as `0101` or `7870`); formatting is always lowercase with a 4-digit minimum domain,
/// exactly as the kernel names devices in `/sys/bus/pci/devices`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// PCI domain (segment).
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device (slot) number, 0..=0x1f.
    pub device: u8,
    /// Function number, 0..=7.
    pub function: u8,
}

impl PciAddress {
    /// Builds an address, checking the device and function ranges.
    pub fn new(domain: u32, bus: u8, device: u8, function: u8) -> Result<Self> {
        let s = Self {
            domain,
            bus,
            device,
            function,
        };
        if device > 0x1f {
            return Err(Error::InvalidPciAddress {
                input: s.to_string(),
                reason: "device number above 1f",
            });
        }
        if function > 7 {
            return Err(Error::InvalidPciAddress {
                input: s.to_string(),
                reason: "function number above 7",
            });
        }
        Ok(s)
    }

    /// The PCIe root (host bridge) this address's domain and a given root bus belong to.
    pub fn root_with_bus(&self, bus: u8) -> PcieRoot {
        PcieRoot {
            domain: self.domain,
            bus,
        }
    }
}

fn hex_field<T: TryFrom<u32>>(
    input: &str,
    field: &str,
    min: usize,
    max: usize,
    what: &'static str,
) -> Result<T> {
    let bad = || Error::InvalidPciAddress {
        input: input.to_string(),
        reason: what,
    };
    if field.len() < min || field.len() > max || !field.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let v = u32::from_str_radix(field, 16).map_err(|_| bad())?;
    T::try_from(v).map_err(|_| bad())
}

impl FromStr for PciAddress {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let mut parts = s.split(':');
        let (Some(dom), Some(bus), Some(devfn), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Error::InvalidPciAddress {
                input: s.to_string(),
                reason: "expected dddd:bb:dd.f",
            });
        };
        let Some((dev, func)) = devfn.split_once('.') else {
            return Err(Error::InvalidPciAddress {
                input: s.to_string(),
                reason: "missing '.' before the function number",
            });
        };
        let domain = hex_field::<u32>(s, dom, 4, 8, "domain must be 4 to 8 hex digits")?;
        let bus = hex_field::<u8>(s, bus, 2, 2, "bus must be 2 hex digits")?;
        let device = hex_field::<u8>(s, dev, 2, 2, "device must be 2 hex digits")?;
        let function = hex_field::<u8>(s, func, 1, 1, "function must be 1 hex digit")?;
        PciAddress::new(domain, bus, device, function).map_err(|_| Error::InvalidPciAddress {
            input: s.to_string(),
            reason: if device > 0x1f {
                "device number above 1f"
            } else {
                "function number above 7"
            },
        })
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl Serialize for PciAddress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PciAddress {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A PCIe root complex (host bridge), named as the kernel names its sysfs directory and as the
/// standard attribute `resource.kubernetes.io/pcieRoot` spells it: `pci<domain>:<bus>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PcieRoot {
    /// PCI domain.
    pub domain: u32,
    /// Root bus number.
    pub bus: u8,
}

impl FromStr for PcieRoot {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::InvalidPcieRoot {
            input: s.to_string(),
        };
        let rest = s.strip_prefix("pci").ok_or_else(bad)?;
        let (dom, bus) = rest.split_once(':').ok_or_else(bad)?;
        let ok = |f: &str, min, max| {
            f.len() >= min && f.len() <= max && f.bytes().all(|b| b.is_ascii_hexdigit())
        };
        if !ok(dom, 4, 8) || !ok(bus, 2, 2) {
            return Err(bad());
        }
        Ok(PcieRoot {
            domain: u32::from_str_radix(dom, 16).map_err(|_| bad())?,
            bus: u8::from_str_radix(bus, 16).map_err(|_| bad())?,
        })
    }
}

impl fmt::Display for PcieRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pci{:04x}:{:02x}", self.domain, self.bus)
    }
}

impl Serialize for PcieRoot {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PcieRoot {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The 24-bit PCI class code (base class, subclass, programming interface), as in sysfs `class`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PciClass(pub u32);

impl PciClass {
    /// Base class (the top byte): 0x02 network, 0x03 display, 0x12 processing accelerator.
    pub fn base(self) -> u8 {
        (self.0 >> 16) as u8
    }
    /// Subclass: with base 0x02, 0x00 Ethernet and 0x07 InfiniBand.
    pub fn sub(self) -> u8 {
        (self.0 >> 8) as u8
    }
    /// A network controller (base class 02: Ethernet, InfiniBand, fabric, …).
    pub fn is_network(self) -> bool {
        self.base() == 0x02
    }
    /// A GPU or accelerator: display controllers (03xx) and processing accelerators (1200,
    /// as AMD Instinct parts report themselves).
    pub fn is_gpu(self) -> bool {
        self.base() == 0x03 || (self.base() == 0x12 && self.sub() == 0x00)
    }
}

/// Vendor, device and subsystem ids of a PCI function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct PciIds {
    /// Vendor id (e.g. 0x15b3 Mellanox).
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// Subsystem vendor id.
    pub subsystem_vendor: u16,
    /// Subsystem device id.
    pub subsystem_device: u16,
}

/// The SR-IOV role of a PCI function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "camelCase")]
pub enum SriovRole {
    /// Neither a physical function with SR-IOV capability nor a virtual function we can trace.
    #[default]
    None,
    /// A physical function that can create virtual functions.
    #[serde(rename_all = "camelCase")]
    PhysicalFunction {
        /// `sriov_totalvfs`: how many VFs the PF supports.
        total_vfs: u32,
        /// `sriov_numvfs`: how many are enabled now.
        num_vfs: u32,
    },
    /// A virtual function.
    #[serde(rename_all = "camelCase")]
    VirtualFunction {
        /// Its physical function, when the kernel shows it (`physfn`). Hyper-V VFs have none.
        pf: Option<PciAddress>,
    },
}

/// A PCI function as discovery saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PciDevice {
    /// Its address.
    pub address: PciAddress,
    /// Class code.
    pub class: PciClass,
    /// Vendor/device/subsystem ids.
    pub ids: PciIds,
    /// Vendor name from the PCI ID database, when it knows the vendor.
    pub vendor_name: Option<String>,
    /// Device name from the PCI ID database, when it knows the device.
    pub device_name: Option<String>,
    /// The bound kernel driver, if any (`driver` link).
    pub driver: Option<String>,
    /// NUMA node; `None` when the kernel reports -1 or nothing usable.
    pub numa_node: Option<u32>,
    /// The host bridge it hangs under, from its sysfs path.
    pub pcie_root: Option<PcieRoot>,
    /// Upstream bridges from the root port down to the device's parent, from its sysfs path.
    /// Used for the PIX/PXB/PHB distinction; empty for a device directly on a root bus.
    pub bridges: Vec<PciAddress>,
    /// SR-IOV role.
    pub sriov: SriovRole,
}

/// Drivers that bind a NIC for user-space or VM passthrough: the kernel gives such a device no
/// netdev and no RDMA link, so dranet does not publish it.
pub const PASSTHROUGH_DRIVERS: &[&str] = &["vfio-pci", "uio_pci_generic", "igb_uio", "pci-stub"];

/// A PCI function of an adapter that is not a NIC: a side function (a DMA engine, a management
/// function) with no netdev or RDMA link of its own, whatever class it reports. dranet never
/// publishes one as a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SideFunction {
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// What it is, for `dranet inventory --show-excluded`.
    pub what: &'static str,
}

/// The side functions dranet knows. Data, not code: an adapter generation that adds one adds a
/// row. ConnectX-8's Data Direct function (`15b3:2100`, "CX8 Data Direct Interface") is bound to
/// `mlx5_ib` and may report a network class; a class-based scan would publish it as a NIC with
/// nothing to give a pod.
pub const SIDE_FUNCTIONS: &[SideFunction] = &[SideFunction {
    vendor: 0x15b3,
    device: 0x2100,
    what: "the Data Direct function of a ConnectX-8 (its DMA engine toward GPU memory), not a NIC",
}];

impl PciDevice {
    /// The side function this is ([`SIDE_FUNCTIONS`]), if it is one.
    pub fn side_function(&self) -> Option<&'static SideFunction> {
        SIDE_FUNCTIONS
            .iter()
            .find(|s| s.vendor == self.ids.vendor && s.device == self.ids.device)
    }

    /// Whether the function is bound to a kernel driver that dranet can hand to a pod
    /// (bound, and not a passthrough stub).
    pub fn has_usable_driver(&self) -> bool {
        self.driver
            .as_deref()
            .is_some_and(|d| !PASSTHROUGH_DRIVERS.contains(&d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_lowercase() {
        let a: PciAddress = "0000:8A:00.1".parse().unwrap();
        assert_eq!(a.to_string(), "0000:8a:00.1");
        let b: PciAddress = "0101:00:00.0".parse().unwrap();
        assert_eq!((b.domain, b.bus, b.device, b.function), (0x101, 0, 0, 0));
        let c: PciAddress = "10000:01:1f.7".parse().unwrap();
        assert_eq!(c.to_string(), "10000:01:1f.7");
    }

    #[test]
    fn rejects_malformed_addresses_with_the_reason() {
        for (input, reason) in [
            ("", "expected dddd:bb:dd.f"),
            ("00:00.0", "expected dddd:bb:dd.f"),
            ("0000:00:00:00.0", "expected dddd:bb:dd.f"),
            ("0000:00:00", "missing '.' before the function number"),
            ("000:00:00.0", "domain must be 4 to 8 hex digits"),
            ("0000:0g:00.0", "bus must be 2 hex digits"),
            ("0000:00:20.0", "device number above 1f"),
            ("0000:00:00.8", "function number above 7"),
            ("0000:00:00.10", "function must be 1 hex digit"),
            ("+000:00:00.0", "domain must be 4 to 8 hex digits"),
        ] {
            let err = input.parse::<PciAddress>().unwrap_err();
            assert_eq!(
                err,
                Error::InvalidPciAddress {
                    input: input.into(),
                    reason
                },
                "{input}"
            );
            assert!(err.to_string().contains(input));
        }
    }

    #[test]
    fn pcie_root_round_trips() {
        let r: PcieRoot = "pci0008:00".parse().unwrap();
        assert_eq!(r.to_string(), "pci0008:00");
        assert!("0008:00".parse::<PcieRoot>().is_err());
        assert!("pci08:00".parse::<PcieRoot>().is_err());
        assert!("pci0008:0".parse::<PcieRoot>().is_err());
    }

    #[test]
    fn class_predicates() {
        assert!(PciClass(0x020000).is_network());
        assert!(PciClass(0x020700).is_network());
        assert!(PciClass(0x030200).is_gpu());
        assert!(PciClass(0x120000).is_gpu());
        assert!(!PciClass(0x060400).is_gpu());
    }

    proptest::proptest! {
        #[test]
        fn any_address_round_trips(d in 0u32..0x1_0000, b: u8, dev in 0u8..0x20, f in 0u8..8) {
            let a = PciAddress::new(d, b, dev, f).unwrap();
            proptest::prop_assert_eq!(a.to_string().parse::<PciAddress>().unwrap(), a);
        }

        #[test]
        fn parsing_never_panics(s in "\\PC{0,20}") {
            let _ = s.parse::<PciAddress>();
            let _ = s.parse::<PcieRoot>();
        }
    }
}
