//! The scheduler's feature gates and, to reproduce a given Kubernetes version exactly, its bugs.

use crate::version::KubernetesVersion;

/// Optional allocator features, named after the scheduler's feature gates. The default is the
/// newest supported version's ([`Features::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// `DRAAdminAccess`: requests with `adminAccess: true`.
    pub admin_access: bool,
    /// `DRAPrioritizedList`: `firstAvailable` requests.
    pub prioritized_list: bool,
    /// `DRADeviceTaints`: device taints must be tolerated; when off, taints are ignored (the
    /// API server drops them).
    pub device_taints: bool,
    /// `DRAPartitionableDevices`: shared counters and `perDeviceNodeSelection`; when off, slices
    /// with `perDeviceNodeSelection` and devices consuming counters are skipped.
    pub partitionable_devices: bool,
    /// `DRAConsumableCapacity`: devices with `allowMultipleAllocations` shared by several
    /// claims, capacity requests with each capacity's `requestPolicy`, `consumedCapacity` and
    /// `shareID` in the results; when off, a request with `capacity` is refused.
    pub consumable_capacity: bool,
    /// `DRADeviceBindingConditions` (with `DRAResourceClaimDeviceStatus`, which it requires):
    /// devices with `bindingConditions` can be allocated (after the others), their conditions
    /// are copied into the result, and `bindsToNode` pins the allocation to the node; when
    /// off, devices with `bindingConditions` are never selected.
    pub device_binding_conditions: bool,
}

impl Features {
    /// The features the scheduler of `version` enables with its default feature gates
    /// (`pkg/features/versioned_kube_features.go` of Kubernetes):
    ///
    /// - 1.34 and 1.35: `DRAAdminAccess` and `DRAPrioritizedList` (beta); taints, partitionable
    ///   devices, consumable capacity and binding conditions are alpha and off.
    /// - 1.36: all of them (`DRAAdminAccess` and `DRAPrioritizedList` GA, the others beta).
    /// - 1.37: all of them (`DRADeviceTaints` GA, the others as in 1.36); of the gates this
    ///   struct does not hold, `DRADeviceTaintRules` turns on (see
    ///   [`KubernetesVersion::applies_taint_rules_by_default`]).
    pub fn of(version: KubernetesVersion) -> Features {
        let beta_in_1_36 = version >= KubernetesVersion::V1_36;
        Features {
            admin_access: true,
            prioritized_list: true,
            device_taints: beta_in_1_36,
            partitionable_devices: beta_in_1_36,
            consumable_capacity: beta_in_1_36,
            device_binding_conditions: beta_in_1_36,
        }
    }
}

impl Default for Features {
    /// [`Features::of`] the newest supported version.
    fn default() -> Self {
        Features::of(KubernetesVersion::default())
    }
}

/// How a version's allocator treats `distinctAttribute` constraints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DistinctAttribute {
    /// As the API defines it: no two devices of the requests it covers share a value.
    #[default]
    Enforced,
    /// Kubernetes 1.34: values are compared by pointer, so only a missing attribute is
    /// rejected and equal values pass.
    NotEnforced,
    /// Kubernetes 1.35 (the allocator of its default feature gates): the constraint is unknown
    /// to it and the claim fails (the API server drops `distinctAttribute` while
    /// `DRAConsumableCapacity` is off, so such a claim cannot be created there).
    Refused,
    /// Kubernetes 1.36: the values taken are kept per request, and a request's device replaces
    /// the value its previous device recorded, so a value taken by an earlier device of the
    /// same request can be taken again; removing a device while backtracking forgets its
    /// request's value altogether.
    LastPerRequest,
}

/// Bugs of the Kubernetes scheduler's allocator that change which devices it picks, to
/// reproduce a given version exactly. The default has none: the API's semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedulerBugs {
    /// How `distinctAttribute` is enforced.
    pub distinct_attribute: DistinctAttribute,
    /// Kubernetes 1.35 and older mishandle `allocationMode: All` in `firstAvailable`
    /// sub-requests (fixed in 1.36): an `All` sub-request other than the first takes its first
    /// device, then goes on as the first sub-request (its devices, its count, its name in the
    /// results); and an `All` second sub-request after an `All` first one gets the first one's
    /// devices instead of evaluating its own selectors (a cache keyed by the wrong
    /// sub-request).
    pub first_available_all_mode: bool,
    /// Kubernetes 1.35 and older (fixed in 1.36.3, kubernetes#140431): when a device that allows multiple
    /// allocations has too little capacity left for an `allocationMode: All` request, which is
    /// checked after the claim's constraints, the device stays in those constraints: a
    /// `matchAttribute` keeps its value for the rest of the call, so a later choice with
    /// another value is rejected.
    pub all_capacity_keeps_constraints: bool,
}

impl SchedulerBugs {
    /// The bugs of the scheduler of `version`.
    pub fn of(version: KubernetesVersion) -> SchedulerBugs {
        match version {
            KubernetesVersion::V1_34 => SchedulerBugs {
                distinct_attribute: DistinctAttribute::NotEnforced,
                first_available_all_mode: true,
                all_capacity_keeps_constraints: true,
            },
            KubernetesVersion::V1_35 => SchedulerBugs {
                distinct_attribute: DistinctAttribute::Refused,
                first_available_all_mode: true,
                all_capacity_keeps_constraints: true,
            },
            // 1.37's changelog fixes none of these (its allocator fixes are a panic and pods
            // stuck behind multi-node claims, which this crate does not reproduce).
            KubernetesVersion::V1_36 | KubernetesVersion::V1_37 => SchedulerBugs {
                distinct_attribute: DistinctAttribute::LastPerRequest,
                first_available_all_mode: false,
                all_capacity_keeps_constraints: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_1_37_scheduler_allocates_with_1_36_s_features_and_bugs() {
        // What 1.37 changed in default gates (DRADeviceTaints and DRAExtendedResource GA,
        // DRADeviceTaintRules on) leaves these as 1.36 has them.
        let (v36, v37) = (KubernetesVersion::V1_36, KubernetesVersion::V1_37);
        assert_eq!(Features::of(v37), Features::of(v36));
        assert_eq!(SchedulerBugs::of(v37), SchedulerBugs::of(v36));
        assert!(v37.applies_taint_rules_by_default() && !v36.applies_taint_rules_by_default());
        assert_eq!(Features::default(), Features::of(v37));
    }
}
