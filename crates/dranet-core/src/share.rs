//! A NIC published for sharing on consumable capacity (Kubernetes `DRAConsumableCapacity`: beta
//! and on by default in 1.36, alpha and off in 1.34): `allowMultipleAllocations: true` and a
//! capacity [`CHILDREN`] holding how many children the NIC carries, each claim consuming one
//! unless it asks for more, so the scheduler never gives a NIC more pods than that.
//!
//! Which NICs are shared is the operator's choice (`dranet run --share-filter`); this module only
//! shapes the device.

use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, Device, DeviceCapacity,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The capacity a shared NIC offers: children (one per claim by default).
pub const CHILDREN: &str = "children";

/// The first Kubernetes minor version whose API server keeps consumable-capacity fields by
/// default (the gate is beta there).
pub const FIRST_MINOR_WITH_CONSUMABLE_CAPACITY: u32 = 36;

/// Whether an API server of version `1.<minor>` keeps the fields [`shared`] sets without a
/// feature gate turned on by hand.
pub fn consumable_capacity_by_default(major: u32, minor: u32) -> bool {
    major > 1 || (major == 1 && minor >= FIRST_MINOR_WITH_CONSUMABLE_CAPACITY)
}

/// How many capacities [`shared`] gives a device (they count against the attribute limit).
pub const CAPACITIES: usize = 1;

/// `device` made allocatable to up to `children` claims at once, each consuming one child unless
/// its request says `capacity.requests.children` (a whole number from 1 to `children`).
pub fn shared(mut device: Device, children: u32) -> Device {
    let q = |n: u32| Quantity(n.to_string());
    device.allow_multiple_allocations = Some(true);
    device.capacity.get_or_insert_with(Default::default).insert(
        CHILDREN.to_string(),
        DeviceCapacity {
            value: q(children),
            request_policy: Some(CapacityRequestPolicy {
                default: Some(q(1)),
                valid_range: Some(CapacityRequestPolicyRange {
                    min: q(1),
                    max: Some(q(children)),
                    step: Some(q(1)),
                }),
                valid_values: None,
            }),
        },
    );
    device
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_device_is_what_the_1_36_api_expects() {
        let d = shared(
            Device {
                name: "pci-0000-03-00-0".into(),
                ..Device::default()
            },
            8,
        );
        let j = serde_json::to_value(&d).unwrap();
        assert_eq!(j["allowMultipleAllocations"], true);
        let c = &j["capacity"]["children"];
        assert_eq!(c["value"], "8");
        assert_eq!(c["requestPolicy"]["default"], "1");
        assert_eq!(c["requestPolicy"]["validRange"]["min"], "1");
        assert_eq!(c["requestPolicy"]["validRange"]["max"], "8");
        assert_eq!(c["requestPolicy"]["validRange"]["step"], "1");
        assert!(crate::slice::validate_device(&d).is_ok());
    }

    #[test]
    fn the_gate_is_on_by_default_from_1_36() {
        assert!(!consumable_capacity_by_default(1, 34));
        assert!(!consumable_capacity_by_default(1, 35));
        assert!(consumable_capacity_by_default(1, 36));
        assert!(consumable_capacity_by_default(2, 0));
    }
}
