//! Test doubles for drivers built on this crate (feature `fake`).
//!
//! - [`FakeApiServer`]: an in-process kube-apiserver stand-in on a loopback TCP port that speaks
//!   the real JSON over HTTP/1.1 for what the plugin uses, with resourceVersions, optimistic
//!   concurrency (409), preconditions, field selectors, watches and fault injection.
//! - [`FakeKubelet`]: a gRPC client over the plugin's unix sockets, calling it as the kubelet does.

mod apiserver;
mod kubelet;

pub use apiserver::{FakeApiServer, WriteCounts};
pub use kubelet::{FakeKubelet, grpc_go_authority, kubelet_registration_channel, unix_channel};

use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult, ResourceClaim,
    ResourceClaimStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::ClaimRef;

/// A ResourceClaim as the scheduler leaves it: `claim`'s namespace, name and UID, allocated with
/// these results. Store it with [`FakeApiServer::put_claim`], then prepare `claim` through a
/// [`FakeKubelet`].
pub fn allocated_claim(
    claim: &ClaimRef,
    results: Vec<DeviceRequestAllocationResult>,
) -> ResourceClaim {
    ResourceClaim {
        metadata: ObjectMeta {
            namespace: Some(claim.namespace.clone()),
            name: Some(claim.name.clone()),
            uid: Some(claim.uid.clone()),
            ..Default::default()
        },
        spec: Default::default(),
        status: Some(ResourceClaimStatus {
            allocation: Some(AllocationResult {
                devices: Some(DeviceAllocationResult {
                    results: Some(results),
                    config: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}
