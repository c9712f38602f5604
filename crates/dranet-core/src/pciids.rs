//! Vendor and device names from a `pci.ids` database (the format of pciutils' `pci.ids`).
//!
//! Only the names asked for are kept: discovery collects the ids it saw and parses the database
//! once for them, so a 1.3 MB file costs a single pass and little memory.

use std::collections::{HashMap, HashSet};

use crate::{Error, Result};

/// Names for a set of PCI vendor and device ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciNames {
    vendors: HashMap<u16, String>,
    devices: HashMap<(u16, u16), String>,
}

impl PciNames {
    /// Parses `text` (a `pci.ids` database), keeping names for `wanted` (vendor, device) pairs and
    /// their vendors. Malformed vendor or device lines are an error naming the line; class
    /// sections (`C …`) and subsystem lines are skipped.
    pub fn parse(text: &str, wanted: &HashSet<(u16, u16)>) -> Result<Self> {
        let vendors_wanted: HashSet<u16> = wanted.iter().map(|&(v, _)| v).collect();
        let mut names = PciNames::default();
        let mut vendor: Option<u16> = None;
        for (i, line) in text.lines().enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line.starts_with("C ") {
                // Device classes follow until the end of the file.
                break;
            }
            if let Some(rest) = line.strip_prefix('\t') {
                if rest.starts_with('\t') {
                    continue; // subsystem line
                }
                let Some(v) = vendor else { continue };
                if !vendors_wanted.contains(&v) {
                    continue;
                }
                let (id, name) = split_entry(rest, i + 1)?;
                if wanted.contains(&(v, id)) {
                    names.devices.insert((v, id), name.to_string());
                }
            } else {
                let (id, name) = split_entry(line, i + 1)?;
                vendor = Some(id);
                if vendors_wanted.contains(&id) {
                    names.vendors.insert(id, name.to_string());
                }
            }
        }
        Ok(names)
    }

    /// The vendor's name.
    pub fn vendor(&self, vendor: u16) -> Option<&str> {
        self.vendors.get(&vendor).map(String::as_str)
    }

    /// The device's name.
    pub fn device(&self, vendor: u16, device: u16) -> Option<&str> {
        self.devices.get(&(vendor, device)).map(String::as_str)
    }
}

fn split_entry(s: &str, line: usize) -> Result<(u16, &str)> {
    let bad = |reason| Error::InvalidPciIds { line, reason };
    let (id, name) = s
        .split_once("  ")
        .ok_or(bad("expected 4 hex digits, two spaces and a name"))?;
    if id.len() != 4 {
        return Err(bad("id is not 4 hex digits"));
    }
    let id = u16::from_str_radix(id, 16).map_err(|_| bad("id is not 4 hex digits"))?;
    Ok((id, name.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DB: &str = "# comment\n15b3  Mellanox Technologies\n\t101e  ConnectX Family mlx5Gen Virtual Function\n\t\t15b3 0061  Some subsystem\n\t1021  MT2910 Family [ConnectX-7]\n1af4  Red Hat, Inc.\n\t1041  Virtio 1.0 network device\nC 02  Network controller\n\t00  Ethernet controller\n";

    #[test]
    fn keeps_only_what_is_wanted() {
        let wanted = HashSet::from([(0x15b3, 0x101e), (0x1234, 0x0001)]);
        let n = PciNames::parse(DB, &wanted).unwrap();
        assert_eq!(n.vendor(0x15b3), Some("Mellanox Technologies"));
        assert_eq!(
            n.device(0x15b3, 0x101e),
            Some("ConnectX Family mlx5Gen Virtual Function")
        );
        assert_eq!(n.device(0x15b3, 0x1021), None);
        assert_eq!(n.vendor(0x1af4), None);
        assert_eq!(n.vendor(0x1234), None);
    }

    #[test]
    fn malformed_line_is_named() {
        let err = PciNames::parse("15b3 Mellanox\n", &HashSet::from([(0x15b3, 1)])).unwrap_err();
        assert_eq!(
            err,
            Error::InvalidPciIds {
                line: 1,
                reason: "expected 4 hex digits, two spaces and a name"
            }
        );
        let err = PciNames::parse("zzzz  X\n", &HashSet::new()).unwrap_err();
        assert!(err.to_string().contains("line 1"));
    }
}
