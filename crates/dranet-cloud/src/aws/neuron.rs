//! The device groups upstream dranet publishes on EFA functions of AWS Neuron (Trainium)
//! instances, from the `aws-neuron/connected-device-maps-over-efa-for-neuron` library it uses:
//! which EFA function (by PCI address) serves which Neuron device, per instance family, and
//! groups of 1, 4, 8 and 16 Neuron devices named by a hash of their EFA functions, so that a claim
//! can ask for EFA functions of one group (`matchAttribute: resource.aws.com/devicegroup4_id`).

use std::collections::BTreeMap;

/// Attribute names (the library's, in the `resource.aws.com` domain).
pub mod attr {
    /// The EFA function's own PCI address: aligned with its one Neuron device.
    pub const DEVICE_GROUP_1: &str = "resource.aws.com/devicegroup1_id";
    /// Neuron devices 4k…4k+3 and their EFA functions.
    pub const DEVICE_GROUP_4: &str = "resource.aws.com/devicegroup4_id";
    /// Neuron devices 8k…8k+7.
    pub const DEVICE_GROUP_8: &str = "resource.aws.com/devicegroup8_id";
    /// All 16 Neuron devices.
    pub const DEVICE_GROUP_16: &str = "resource.aws.com/devicegroup16_id";
}

// Neuron device i → the PCI address of its EFA function, per instance family (the library's
// `lookup/neuron/*.json`, v1.1.0). On trn1, two Neuron devices share each EFA function.
const TRN1: [&str; 16] = [
    "0000:10:1a.0",
    "0000:10:1a.0",
    "0000:a0:1a.0",
    "0000:a0:1a.0",
    "0000:20:19.0",
    "0000:20:19.0",
    "0000:90:19.0",
    "0000:90:19.0",
    "0000:20:1a.0",
    "0000:20:1a.0",
    "0000:90:1a.0",
    "0000:90:1a.0",
    "0000:10:19.0",
    "0000:10:19.0",
    "0000:a0:19.0",
    "0000:a0:19.0",
];
const TRN1N: [&str; 16] = [
    "0000:10:17.0",
    "0000:10:1a.0",
    "0000:a0:17.0",
    "0000:a0:1a.0",
    "0000:20:19.0",
    "0000:20:18.0",
    "0000:90:19.0",
    "0000:90:18.0",
    "0000:20:17.0",
    "0000:20:1a.0",
    "0000:90:17.0",
    "0000:90:1a.0",
    "0000:10:19.0",
    "0000:10:18.0",
    "0000:a0:19.0",
    "0000:a0:18.0",
];
const TRN2: [&str; 16] = [
    "0000:c9:00.0",
    "0000:b4:00.0",
    "0000:b3:00.0",
    "0000:ca:00.0",
    "0000:6c:00.0",
    "0000:57:00.0",
    "0000:56:00.0",
    "0000:6d:00.0",
    "0000:98:00.0",
    "0000:83:00.0",
    "0000:82:00.0",
    "0000:99:00.0",
    "0000:f5:00.0",
    "0000:e0:00.0",
    "0000:df:00.0",
    "0000:f6:00.0",
];
const TRN3: [&str; 16] = [
    "0000:be:00.0",
    "0000:a9:00.0",
    "0000:a8:00.0",
    "0000:bf:00.0",
    "0000:61:00.0",
    "0000:4c:00.0",
    "0000:4b:00.0",
    "0000:62:00.0",
    "0000:8d:00.0",
    "0000:78:00.0",
    "0000:77:00.0",
    "0000:8e:00.0",
    "0000:ea:00.0",
    "0000:d5:00.0",
    "0000:d4:00.0",
    "0000:eb:00.0",
];
const TRN3PDS: [&str; 16] = [
    "0000:a9:00.0",
    "0000:a8:00.0",
    "0000:bf:00.0",
    "0000:be:00.0",
    "0000:d5:00.0",
    "0000:d4:00.0",
    "0000:eb:00.0",
    "0000:ea:00.0",
    "0000:4c:00.0",
    "0000:4b:00.0",
    "0000:62:00.0",
    "0000:61:00.0",
    "0000:78:00.0",
    "0000:77:00.0",
    "0000:8e:00.0",
    "0000:8d:00.0",
];

/// The map of an instance type, when the library knows it as an EFA-enabled Neuron instance
/// (`lookup/config/efa-enabled-instances.json` and `instance-family-mappings.json`).
fn table(instance_type: &str) -> Option<&'static [&'static str; 16]> {
    Some(match instance_type {
        "trn1.32xlarge" => &TRN1,
        "trn1n.32xlarge" => &TRN1N,
        "trn2.48xlarge" | "trn2e.48xlarge" | "trn2u.48xlarge" => &TRN2,
        "trn3.48xlarge" | "trn3p.48xlarge" | "trn3pd98.48xlarge" | "trn3s.48xlarge" => &TRN3,
        "trn3-dev0.48xlarge" | "trn3-dev1.48xlarge" => &TRN3PDS,
        _ => return None,
    })
}

/// Whether the instance type is a Neuron (Trainium or Inferentia) one: upstream's rule, the
/// letters before the first digit are `trn` or `inf`.
pub fn is_neuron_instance(instance_type: &str) -> bool {
    let prefix: String = instance_type
        .chars()
        .take_while(|c| !c.is_ascii_digit())
        .collect::<String>()
        .to_ascii_lowercase();
    prefix == "trn" || prefix == "inf"
}

/// The group of `size` Neuron devices that `neuron` is in, named by the first 16 hex digits of
/// the SHA-256 of its EFA functions' addresses, deduplicated, sorted and comma-joined.
fn group_id(map: &[&str; 16], neuron: usize, size: usize) -> String {
    let first = neuron / size * size;
    let mut efa: Vec<&str> = map.iter().skip(first).take(size).copied().collect();
    efa.sort_unstable();
    efa.dedup();
    let digest = ring::digest::digest(&ring::digest::SHA256, efa.join(",").as_bytes());
    digest
        .as_ref()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The device-group attributes of the EFA function at `pci` on an `instance_type` instance;
/// empty when the library has no map for it or the function is not in it.
pub fn device_groups(instance_type: &str, pci: &str) -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    let Some(map) = table(instance_type) else {
        return out;
    };
    // The lowest Neuron device served by this function: on trn1 its pair shares every group.
    let Some(neuron) = map.iter().position(|a| a.eq_ignore_ascii_case(pci)) else {
        return out;
    };
    out.insert(attr::DEVICE_GROUP_1, map[neuron].to_string());
    out.insert(attr::DEVICE_GROUP_4, group_id(map, neuron, 4));
    out.insert(attr::DEVICE_GROUP_8, group_id(map, neuron, 8));
    out.insert(attr::DEVICE_GROUP_16, group_id(map, neuron, 16));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_match_the_librarys_own_test_vectors() {
        let g = device_groups("trn2.48xlarge", "0000:c9:00.0");
        assert_eq!(g[attr::DEVICE_GROUP_1], "0000:c9:00.0");
        assert_eq!(g[attr::DEVICE_GROUP_4], "13713e551cd37c19");
        assert_eq!(g[attr::DEVICE_GROUP_8], "3593812b8066a078");
        assert_eq!(g[attr::DEVICE_GROUP_16], "821d14afaf11327d");
        // Every function of a group of 4 carries the same id.
        let ids: Vec<String> = TRN2[..4]
            .iter()
            .map(|a| device_groups("trn2u.48xlarge", a)[attr::DEVICE_GROUP_4].clone())
            .collect();
        assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
        assert_ne!(
            device_groups("trn2.48xlarge", TRN2[4])[attr::DEVICE_GROUP_4],
            ids[0]
        );
        assert!(device_groups("trn2.3xlarge", "0000:c9:00.0").is_empty());
        assert!(device_groups("p5.48xlarge", "0000:c9:00.0").is_empty());
        assert!(device_groups("trn2.48xlarge", "0000:00:05.0").is_empty());
        assert!(!device_groups("trn1.32xlarge", "0000:10:1a.0").is_empty());
    }

    #[test]
    fn neuron_instances_as_upstream_tells_them() {
        for t in [
            "trn1.32xlarge",
            "trn2.48xlarge",
            "inf2.48xlarge",
            "Inf1.xlarge",
        ] {
            assert!(is_neuron_instance(t), "{t}");
        }
        for t in ["p5.48xlarge", "g5.xlarge", ""] {
            assert!(!is_neuron_instance(t), "{t}");
        }
        assert!(!is_neuron_instance("p5en.48xlarge"));
    }
}
