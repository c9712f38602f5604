//! Topology distance between two PCI devices, in the vocabulary of `nvidia-smi topo -m`.
//!
//! Computed from the PCI hierarchy alone, so it works for any GPU vendor:
//!
//! | relation | meaning |
//! |---|---|
//! | `PIX` | both sit under one PCIe switch (at most one bridge level below their common bridge) |
//! | `PXB` | they meet at a common bridge but the path crosses several switches; same root |
//! | `PHB` | same PCIe root (host bridge), no common bridge below it |
//! | `NODE` | different PCIe roots on the same NUMA node |
//! | `SYS` | different NUMA nodes: the path crosses the inter-socket interconnect |
//! | `N/A` | different PCIe roots, and one device's NUMA node is unknown |
//!
//! When one device's NUMA node is unknown (the kernel says -1: firmware without `_PXM`, many
//! virtual machines' devices) and the other's is known, sysfs does not show whether the path
//! between different roots crosses sockets: the relation is `N/A`, not a claimed `SYS`. When
//! both are unknown, the machine is taken to have one NUMA node (a kernel without NUMA reports
//! -1 for every device) and different roots are `NODE`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::PciDevice;

/// How two PCI devices are connected, from closest to farthest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Relation {
    /// Under one PCIe switch.
    Pix,
    /// Several bridges, same root.
    Pxb,
    /// Same host bridge.
    Phb,
    /// Same NUMA node, different roots.
    Node,
    /// Across NUMA nodes.
    Sys,
    /// Different roots, and the NUMA node of one device is unknown: sysfs cannot tell whether
    /// the path crosses sockets. Ranked after `SYS`, since nothing better can be promised.
    #[serde(rename = "N/A")]
    Unknown,
}

impl Relation {
    /// All relations with what they mean, for legends.
    pub const LEGEND: [(Relation, &'static str); 6] = [
        (
            Relation::Pix,
            "at most a single PCIe switch between the devices",
        ),
        (
            Relation::Pxb,
            "multiple PCIe bridges, without crossing the host bridge",
        ),
        (Relation::Phb, "through a PCIe host bridge (same PCIe root)"),
        (
            Relation::Node,
            "across PCIe host bridges within one NUMA node",
        ),
        (
            Relation::Sys,
            "across the interconnect between NUMA nodes (QPI/UPI/xGMI)",
        ),
        (
            Relation::Unknown,
            "across PCIe host bridges; a NUMA node is unknown (-1), so a socket crossing cannot be told",
        ),
    ];

    /// The short name (`PIX`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Relation::Pix => "PIX",
            Relation::Pxb => "PXB",
            Relation::Phb => "PHB",
            Relation::Node => "NODE",
            Relation::Sys => "SYS",
            Relation::Unknown => "N/A",
        }
    }
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// The relation between two PCI devices.
pub fn relation(a: &PciDevice, b: &PciDevice) -> Relation {
    if a.pcie_root.is_none() || a.pcie_root != b.pcie_root {
        return match (a.numa_node, b.numa_node) {
            (Some(x), Some(y)) if x != y => Relation::Sys,
            (Some(_), None) | (None, Some(_)) => Relation::Unknown,
            _ => Relation::Node,
        };
    }
    // Same root. Bridges are listed root port first, so the common prefix is the shared path.
    let common = a
        .bridges
        .iter()
        .zip(&b.bridges)
        .take_while(|(x, y)| x == y)
        .count();
    if common == 0 {
        return Relation::Phb;
    }
    // Below the deepest common bridge, a device directly behind one switch downstream port has
    // one more bridge on its side; more than that means another switch level on the path.
    let below_a = a.bridges.len() - common;
    let below_b = b.bridges.len() - common;
    if below_a <= 1 && below_b <= 1 {
        Relation::Pix
    } else {
        Relation::Pxb
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PciAddress, PciClass, PciIds, PcieRoot, SriovRole};

    fn dev(addr: &str, numa: Option<u32>, root: &str, bridges: &[&str]) -> PciDevice {
        PciDevice {
            address: addr.parse().unwrap(),
            class: PciClass(0x020000),
            ids: PciIds::default(),
            vendor_name: None,
            device_name: None,
            driver: None,
            numa_node: numa,
            pcie_root: Some(root.parse::<PcieRoot>().unwrap()),
            bridges: bridges
                .iter()
                .map(|b| b.parse::<PciAddress>().unwrap())
                .collect(),
            sriov: SriovRole::None,
        }
    }

    #[test]
    fn relations_follow_the_hierarchy() {
        let sw = ["0000:00:01.0", "0000:01:00.0"];
        let gpu = dev(
            "0000:03:00.0",
            Some(0),
            "pci0000:00",
            &[sw[0], sw[1], "0000:02:00.0"],
        );
        let nic = dev(
            "0000:04:00.0",
            Some(0),
            "pci0000:00",
            &[sw[0], sw[1], "0000:02:01.0"],
        );
        assert_eq!(relation(&gpu, &nic), Relation::Pix);
        // Same downstream port (multi-function).
        let nic_fn1 = dev(
            "0000:03:00.1",
            Some(0),
            "pci0000:00",
            &gpu.bridges
                .iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        assert_eq!(relation(&gpu, &nic_fn1), Relation::Pix);
        // Two nested switches below a common one.
        let deep_a = dev(
            "0000:07:00.0",
            Some(0),
            "pci0000:00",
            &[sw[0], sw[1], "0000:02:00.0", "0000:05:00.0", "0000:06:00.0"],
        );
        let deep_b = dev(
            "0000:0b:00.0",
            Some(0),
            "pci0000:00",
            &[sw[0], sw[1], "0000:02:01.0", "0000:09:00.0", "0000:0a:00.0"],
        );
        assert_eq!(relation(&deep_a, &deep_b), Relation::Pxb);
        // Different root ports of one host bridge.
        let other_port = dev("0000:41:00.0", Some(0), "pci0000:00", &["0000:00:03.0"]);
        assert_eq!(relation(&gpu, &other_port), Relation::Phb);
        // Other host bridge, same node; other node.
        let other_root = dev("0000:81:00.0", Some(0), "pci0000:80", &["0000:80:01.0"]);
        assert_eq!(relation(&gpu, &other_root), Relation::Node);
        let far = dev("0000:c1:00.0", Some(1), "pci0000:c0", &["0000:c0:01.0"]);
        assert_eq!(relation(&gpu, &far), Relation::Sys);
        // Symmetric.
        for (x, y) in [(&gpu, &nic), (&deep_a, &deep_b), (&gpu, &far)] {
            assert_eq!(relation(x, y), relation(y, x));
        }
    }

    #[test]
    fn unknown_numa() {
        let a = dev("0000:01:00.0", None, "pci0000:00", &["0000:00:01.0"]);
        let b = dev("0000:81:00.0", None, "pci0000:80", &["0000:80:01.0"]);
        let c = dev("0000:c1:00.0", Some(1), "pci0000:c0", &["0000:c0:01.0"]);
        assert_eq!(relation(&a, &b), Relation::Node);
        // Known on one side only: a socket crossing cannot be told.
        assert_eq!(relation(&a, &c), Relation::Unknown);
        assert_eq!(relation(&c, &a), Relation::Unknown);
        assert_eq!(Relation::Unknown.as_str(), "N/A");
    }
}
