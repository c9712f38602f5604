//! The scheduler's feature gates and, to reproduce a given Kubernetes version exactly, its bugs.

/// Optional allocator features, named after the scheduler's feature gates. The default is
/// Kubernetes 1.34's: the beta features on, the alpha ones off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// `DRAAdminAccess` (beta, on): requests with `adminAccess: true`.
    pub admin_access: bool,
    /// `DRAPrioritizedList` (beta, on): `firstAvailable` requests.
    pub prioritized_list: bool,
    /// `DRADeviceTaints` (alpha, off): device taints must be tolerated; when off, taints are
    /// ignored (the API server drops them).
    pub device_taints: bool,
    /// `DRAPartitionableDevices` (alpha, off): shared counters and `perDeviceNodeSelection`;
    /// when off, slices with `perDeviceNodeSelection` and devices consuming counters are
    /// skipped.
    pub partitionable_devices: bool,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            admin_access: true,
            prioritized_list: true,
            device_taints: false,
            partitionable_devices: false,
        }
    }
}

/// Bugs of the Kubernetes scheduler's allocator that change which devices it picks, to
/// reproduce a given version exactly. The default has none: the API's semantics, as the
/// scheduler of Kubernetes 1.36 allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedulerBugs {
    /// Kubernetes 1.34 and older: `distinctAttribute` compares pointers instead of values, so
    /// it only requires the attribute and lets equal values through (fixed in 1.35).
    pub distinct_attribute_not_enforced: bool,
    /// Kubernetes 1.35 and older mishandle `allocationMode: All` in `firstAvailable`
    /// sub-requests (fixed in 1.36): an `All` sub-request other than the first takes its first
    /// device, then goes on as the first sub-request (its devices, its count, its name in the
    /// results); and an `All` second sub-request after an `All` first one gets the first one's
    /// devices instead of evaluating its own selectors (a cache keyed by the wrong
    /// sub-request).
    pub first_available_all_mode: bool,
}

impl SchedulerBugs {
    /// The bugs of the Kubernetes 1.34 scheduler.
    pub fn kubernetes_1_34() -> SchedulerBugs {
        SchedulerBugs {
            distinct_attribute_not_enforced: true,
            first_available_all_mode: true,
        }
    }

    /// The bugs of the Kubernetes 1.35 scheduler.
    pub fn kubernetes_1_35() -> SchedulerBugs {
        SchedulerBugs {
            distinct_attribute_not_enforced: false,
            first_available_all_mode: true,
        }
    }
}
