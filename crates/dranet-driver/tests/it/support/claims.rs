//! Claims as the kubelet hands them to the driver: namespace `ml`, pool `node-a`, each pod
//! `pod-<uid>` with UID `<uid>`.

use dranet_driver::claim::DRIVER_NAME;
use dranet_kubeletplugin::k8s_openapi::api::resource::v1::{
    DeviceAllocationConfiguration, DeviceRequestAllocationResult, OpaqueDeviceConfiguration,
    ResourceClaim, ResourceClaimConsumerReference, ResourceClaimStatus,
};
use dranet_kubeletplugin::k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use dranet_kubeletplugin::{ClaimRef, ClaimToPrepare};

/// Claim `name` (UID `uid-<name>`) reserved for `pods`, allocated `devices` (request, device).
pub fn claim(
    name: &str,
    pods: &[&str],
    devices: &[(&str, &str)],
    config: Vec<DeviceAllocationConfiguration>,
) -> ClaimToPrepare {
    let reserved = pods
        .iter()
        .map(|p| ResourceClaimConsumerReference {
            api_group: None,
            resource: "pods".into(),
            name: format!("pod-{p}"),
            uid: p.to_string(),
        })
        .collect();
    ClaimToPrepare {
        claim_ref: ClaimRef {
            namespace: "ml".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        },
        claim: ResourceClaim {
            status: Some(ResourceClaimStatus {
                reserved_for: Some(reserved),
                ..Default::default()
            }),
            ..Default::default()
        },
        results: devices
            .iter()
            .map(|(req, dev)| DeviceRequestAllocationResult {
                request: req.to_string(),
                driver: DRIVER_NAME.into(),
                pool: "node-a".into(),
                device: dev.to_string(),
                ..Default::default()
            })
            .collect(),
        config,
    }
}

/// Claim `name` of the veth `link`'s device (`dev-<link>`, see [`super::veth`]) as request
/// `nic`, for one pod, with one config entry from the claim.
pub fn nic(name: &str, pod: &str, link: &str, config: serde_json::Value) -> ClaimToPrepare {
    claim(
        name,
        &[pod],
        &[("nic", &format!("dev-{link}"))],
        vec![opaque("FromClaim", None, config)],
    )
}

/// `devices` of pool `pool`, each allocated for request `nic`.
pub fn nic_results(pool: &str, devices: &[&str]) -> Vec<DeviceRequestAllocationResult> {
    devices
        .iter()
        .map(|d| DeviceRequestAllocationResult {
            request: "nic".into(),
            driver: DRIVER_NAME.into(),
            pool: pool.into(),
            device: d.to_string(),
            ..Default::default()
        })
        .collect()
}

/// One opaque `dra.net` config entry.
pub fn opaque(
    source: &str,
    requests: Option<&[&str]>,
    v: serde_json::Value,
) -> DeviceAllocationConfiguration {
    DeviceAllocationConfiguration {
        source: source.into(),
        requests: requests.map(|r| r.iter().map(|s| s.to_string()).collect()),
        opaque: Some(OpaqueDeviceConfiguration {
            driver: DRIVER_NAME.into(),
            parameters: RawExtension(v),
        }),
    }
}
