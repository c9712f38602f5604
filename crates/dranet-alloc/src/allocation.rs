//! What an allocation gives a claim, as the scheduler writes it into `status.allocation`.

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::DeviceAllocationConfiguration;
use serde::{Deserialize, Serialize};

/// One allocated device in the result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
}

impl From<&DeviceResult> for k8s_openapi::api::resource::v1::DeviceRequestAllocationResult {
    fn from(r: &DeviceResult) -> Self {
        Self {
            request: r.request.clone(),
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
            admin_access: r.admin_access,
            ..Default::default()
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
