//! The IMDS compute and network parsers, and the per-NIC routing built from any network
//! document: errors are fine, panics are not.
#![no_main]

use dranet_azure::{AzureInstance, parse_compute, parse_network};
use dranet_core::{CloudProvider, DeviceIdentifiers};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let compute = parse_compute(data).unwrap_or_default();
    let Ok(network) = parse_network(data) else {
        return;
    };
    let macs: Vec<String> = network
        .interface
        .iter()
        .map(|i| i.mac_address.clone())
        .collect();
    let inst = AzureInstance { compute, network };
    let _ = inst.node_attributes();
    for mac in macs {
        let id = DeviceIdentifiers {
            mac: Some(mac),
            ipv6_gateway: "fe80::1".parse().ok(),
            ..Default::default()
        };
        if let Some(cfg) = inst.device_config(&id) {
            // Whatever IMDS says, what we would program must be valid.
            assert!(cfg.validate().is_ok(), "{cfg:?}");
        }
    }
});
