//! PCI addresses, PCIe roots, pci.ids databases and link-state JSON from arbitrary bytes:
//! errors are fine, panics are not, and what parses must print back the same.
#![no_main]

use std::collections::HashSet;

use dranet_core::pciids::PciNames;
use dranet_core::{LinkState, PciAddress, PcieRoot};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(a) = s.parse::<PciAddress>() {
        assert_eq!(a.to_string().parse::<PciAddress>(), Ok(a));
    }
    if let Ok(r) = s.parse::<PcieRoot>() {
        assert_eq!(r.to_string().parse::<PcieRoot>(), Ok(r));
    }
    let wanted: HashSet<(u16, u16)> = [(0x15b3, 0x101e), (0x8086, 0x1592)].into();
    let _ = PciNames::parse(s, &wanted);
    let _ = serde_json::from_str::<Vec<LinkState>>(s);
});
