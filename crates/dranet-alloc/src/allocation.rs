//! What an allocation gives a claim, as the scheduler writes it into `status.allocation`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::{DeviceAllocationConfiguration, DeviceToleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use serde::{Deserialize, Serialize};

/// One allocated device in the result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceResult {
    /// The request, or `request/sub-request` for `firstAvailable`.
    pub request: String,
    /// Driver name.
    pub driver: String,
    /// Pool name.
    pub pool: String,
    /// Device name.
    pub device: String,
    /// `Some(true)` when allocated for a request with `adminAccess: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_access: Option<bool>,
    /// The share of a device that allows multiple allocations (consumable capacity): a new
    /// UID-shaped ID per allocation. The scheduler's is random; this one is derived from the
    /// device and the allocation, so answers are reproducible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    /// What the share consumes of each of the device's capacities, as the scheduler writes it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub consumed_capacity: BTreeMap<String, String>,
    /// The device's `bindingConditions` (with the `DRADeviceBindingConditions` feature).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_conditions: Vec<String>,
    /// The device's `bindingFailureConditions` (with the `DRADeviceBindingConditions` feature).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_failure_conditions: Vec<String>,
    /// The request's tolerations (Kubernetes 1.35 and newer copy them into the result).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<DeviceToleration>,
}

impl From<&DeviceResult> for k8s_openapi::api::resource::v1::DeviceRequestAllocationResult {
    fn from(r: &DeviceResult) -> Self {
        let nonempty = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        Self {
            request: r.request.clone(),
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
            admin_access: r.admin_access,
            share_id: r.share_id.clone(),
            consumed_capacity: (!r.consumed_capacity.is_empty()).then(|| {
                r.consumed_capacity
                    .iter()
                    .map(|(k, v)| (k.clone(), K8sQuantity(v.clone())))
                    .collect()
            }),
            binding_conditions: nonempty(&r.binding_conditions),
            binding_failure_conditions: nonempty(&r.binding_failure_conditions),
            tolerations: (!r.tolerations.is_empty()).then(|| r.tolerations.clone()),
        }
    }
}

impl From<&k8s_openapi::api::resource::v1::DeviceRequestAllocationResult> for DeviceResult {
    fn from(r: &k8s_openapi::api::resource::v1::DeviceRequestAllocationResult) -> Self {
        Self {
            request: r.request.clone(),
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
            admin_access: r.admin_access,
            share_id: r.share_id.clone(),
            consumed_capacity: r
                .consumed_capacity
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect(),
            binding_conditions: r.binding_conditions.clone().unwrap_or_default(),
            binding_failure_conditions: r.binding_failure_conditions.clone().unwrap_or_default(),
            tolerations: r.tolerations.clone().unwrap_or_default(),
        }
    }
}

/// The devices chosen for a claim, in request order, with what the scheduler writes beside
/// them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Allocation {
    /// One entry per device.
    pub results: Vec<DeviceResult>,
    /// The configuration the driver gets: the classes' (`source: FromClass`, each class once,
    /// naming the requests that use it), then the claim's (`FromClaim`), as the scheduler copies
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<DeviceAllocationConfiguration>,
    /// The nodes the allocation can be used from: `metadata.name` of the node when a device
    /// is local to it, the slices' node selectors merged, or `None` for every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<NodeSelector>,
}

impl Allocation {
    /// The allocation as the scheduler writes it into a claim's `status.allocation`.
    pub fn to_k8s(&self) -> k8s_openapi::api::resource::v1::AllocationResult {
        k8s_openapi::api::resource::v1::AllocationResult {
            devices: Some(k8s_openapi::api::resource::v1::DeviceAllocationResult {
                results: Some(self.results.iter().map(Into::into).collect()),
                config: (!self.config.is_empty()).then(|| self.config.clone()),
            }),
            node_selector: self.node_selector.clone(),
            ..Default::default()
        }
    }
}
