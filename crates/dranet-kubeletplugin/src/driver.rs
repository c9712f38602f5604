//! The seam between this library and a DRA driver: the [`Driver`] trait and what flows through it.

use std::collections::BTreeMap;
use std::future::Future;

use k8s_openapi::api::resource::v1::{
    DeviceAllocationConfiguration, DeviceAttribute, DeviceRequestAllocationResult,
    NetworkDeviceData, OpaqueDeviceConfiguration, ResourceClaim,
};
use serde::{Deserialize, Serialize};

/// The error a driver's handler returns (any error type, through `?`). It is kept with its
/// source chain: the claim's error string sent to the kubelet is the whole chain
/// (`prepare claim ns/name: <error>: <cause>: ...`), and [`crate::Error::Driver`] keeps the error
/// itself. `dranet-nri` uses the same type for its handlers.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// What a DRA driver implements. The library calls it once per claim, never twice at the same time
/// for the same claim UID, and records the outcome in its checkpoint.
///
/// Both methods must be idempotent: after a crash the kubelet retries, and the library may call
/// [`Driver::prepare`] again for a claim whose earlier prepare was interrupted, or
/// [`Driver::unprepare`] for a claim whose prepare never finished.
///
/// A call is never cancelled half way because the kubelet stopped waiting for it (its deadline
/// passed): it runs to the end, its outcome is recorded, and the kubelet's retry gets it.
pub trait Driver: Send + Sync + 'static {
    /// Makes the devices allocated to `claim` usable on this node (e.g. moves a NIC into a pod's
    /// network namespace later, writes CDI specs) and says how the container runtime finds them.
    fn prepare(
        &self,
        claim: ClaimToPrepare,
    ) -> impl Future<Output = Result<Prepared, HandlerError>> + Send;

    /// Undoes [`Driver::prepare`]. `claim.state` says what the checkpoint knows about the claim.
    fn unprepare(
        &self,
        claim: ClaimToUnprepare,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;

    /// Called once when the plugin starts, before it serves the kubelet, with every claim the
    /// checkpoint holds as prepared and what [`Driver::prepare`] returned for it (its
    /// [`Prepared::state`] included). The kubelet answers its own retries from the checkpoint
    /// without calling the driver again, so a driver that keeps what it prepared in memory
    /// learns it back here after a restart, or a reboot: the checkpoint lives on the kubelet's
    /// disk. Claims whose prepare was interrupted are not passed: the kubelet prepares them
    /// again. The default does nothing.
    fn restore_prepared(&self, claims: Vec<PreparedClaim>) -> impl Future<Output = ()> + Send {
        let _ = claims;
        std::future::ready(())
    }

    /// Called once when the plugin starts, before [`Driver::restore_prepared`] and before it
    /// serves the kubelet, with the driver's own records in the checkpoint
    /// ([`crate::DriverRecords`]): what the driver must keep through restarts and reboots beyond
    /// a claim's prepared state, such as what it asked of another system for a claim and owes
    /// back after the claim's unprepare. Keep the handle; it stays usable as long as the plugin
    /// runs. The default does nothing.
    fn restore_records(&self, records: crate::DriverRecords) -> impl Future<Output = ()> + Send {
        let _ = records;
        std::future::ready(())
    }
}

/// A shared driver is a driver: a process that is also an NRI plugin (or anything else) keeps an
/// `Arc` of its state and hands a clone to the kubelet plugin.
impl<D: Driver> Driver for std::sync::Arc<D> {
    fn restore_prepared(&self, claims: Vec<PreparedClaim>) -> impl Future<Output = ()> + Send {
        (**self).restore_prepared(claims)
    }

    fn restore_records(&self, records: crate::DriverRecords) -> impl Future<Output = ()> + Send {
        (**self).restore_records(records)
    }

    fn prepare(
        &self,
        claim: ClaimToPrepare,
    ) -> impl Future<Output = Result<Prepared, HandlerError>> + Send {
        (**self).prepare(claim)
    }

    fn unprepare(
        &self,
        claim: ClaimToUnprepare,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        (**self).unprepare(claim)
    }
}

/// Identifies a claim the way the kubelet does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClaimRef {
    /// Namespace of the ResourceClaim.
    pub namespace: String,
    /// Name of the ResourceClaim.
    pub name: String,
    /// UID of the ResourceClaim; tells a claim apart from a later one with the same name.
    pub uid: String,
}

impl std::fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A claim to prepare, as read from the API server and checked by the library.
#[derive(Debug, Clone)]
pub struct ClaimToPrepare {
    /// Who the claim is.
    pub claim_ref: ClaimRef,
    /// The whole ResourceClaim object (allocated, with the UID the kubelet asked about).
    pub claim: ResourceClaim,
    /// The allocation results for this driver only, in the order the scheduler wrote them.
    pub results: Vec<DeviceRequestAllocationResult>,
    /// Allocation-time configuration (from the claim and its DeviceClass) that applies to this
    /// driver, i.e. entries whose opaque config names this driver.
    pub config: Vec<DeviceAllocationConfiguration>,
}

impl ClaimToPrepare {
    /// The opaque configuration of this driver that applies to one of its results, least
    /// specific first: the DeviceClass's entries, then the claim's entries that name no request,
    /// then those naming the result's request (or, for a `firstAvailable` subrequest such as
    /// `gpu/large`, its parent `gpu`), then those naming the subrequest itself; within each
    /// group in the order written. Merge them in order and let later ones win: the most
    /// specific configuration wins.
    pub fn config_for(
        &self,
        result: &DeviceRequestAllocationResult,
    ) -> Vec<&OpaqueDeviceConfiguration> {
        let parent = result.request.split_once('/').map(|(p, _)| p);
        // How specific an entry is for this result; None when it does not apply.
        let scope = |c: &DeviceAllocationConfiguration| -> Option<u8> {
            let source = match c.source.as_str() {
                "FromClass" => 0,
                "FromClaim" => 1,
                _ => return None,
            };
            let reach = match c.requests.as_deref() {
                None | Some([]) => 0,
                Some(reqs) if reqs.contains(&result.request) => {
                    if parent.is_some() {
                        2
                    } else {
                        1
                    }
                }
                Some(reqs) if reqs.iter().any(|r| Some(r.as_str()) == parent) => 1,
                Some(_) => return None,
            };
            Some(source * 3 + reach)
        };
        let mut applying: Vec<(u8, &OpaqueDeviceConfiguration)> = self
            .config
            .iter()
            .filter_map(|c| Some((scope(c)?, c.opaque.as_ref()?)))
            .collect();
        // Stable: entries of one group keep the order they were written in.
        applying.sort_by_key(|(s, _)| *s);
        applying.into_iter().map(|(_, o)| o).collect()
    }
}

/// One device handed to the container runtime for a claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreparedDevice {
    /// The claim's request names this device satisfies.
    pub requests: Vec<String>,
    /// The pool the device belongs to.
    pub pool: String,
    /// The device name within its pool.
    pub device: String,
    /// Fully qualified CDI device IDs for the container runtime.
    pub cdi_device_ids: Vec<String>,
    /// The share ID when the device is shared (consumable capacity); only the v1 API carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    /// What the device's metadata file says of it, when the driver knows that at prepare (the
    /// Go helper's `Device.Metadata`): with device metadata on, the plugin writes each request's
    /// file from it before prepare returns, so its containers never see an empty one. A
    /// driver that learns it later (a network driver, once the pod's interface exists) leaves
    /// it `None` and calls [`crate::MetadataUpdater::update_request_metadata`]. Not kept in the
    /// checkpoint: the file is.
    #[serde(skip)]
    pub metadata: Option<PreparedMetadata>,
}

/// A device's attributes and network data as its metadata file gives them
/// ([`PreparedDevice::metadata`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PreparedMetadata {
    /// Its attributes by qualified name, as the ResourceSlice publishes them.
    pub attributes: BTreeMap<String, DeviceAttribute>,
    /// Its network interface as the pod sees it, for a network device.
    pub network_data: Option<NetworkDeviceData>,
}

impl PreparedDevice {
    /// The device of an allocation result, handed to the runtime through these CDI device IDs.
    pub fn for_result(result: &DeviceRequestAllocationResult, cdi_device_ids: Vec<String>) -> Self {
        Self {
            requests: vec![result.request.clone()],
            pool: result.pool.clone(),
            device: result.device.clone(),
            cdi_device_ids,
            share_id: result.share_id.clone(),
            metadata: None,
        }
    }
}

/// A successful prepare.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    /// The devices to report to the kubelet.
    pub devices: Vec<PreparedDevice>,
    /// Anything the driver needs again at unprepare time (e.g. which interface went where); it is
    /// stored in the checkpoint and survives restarts.
    pub state: Option<serde_json::Value>,
}

/// A claim the checkpoint holds as prepared ([`Driver::restore_prepared`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedClaim {
    /// Who the claim is.
    pub claim_ref: ClaimRef,
    /// What [`Driver::prepare`] returned for it.
    pub prepared: Prepared,
}

/// What the checkpoint knows about a claim being unprepared.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PrepareState {
    /// Prepare finished; here is what it returned.
    Prepared(Prepared),
    /// Prepare was started (the driver was called) but did not finish: the process died or the
    /// driver failed. The driver may have done part of the work.
    Interrupted,
    /// The checkpoint was not trustworthy at start and was set aside, so nothing is known; the
    /// driver should clean up whatever it finds for this claim.
    Unknown,
}

/// A claim to unprepare.
#[derive(Debug, Clone)]
pub struct ClaimToUnprepare {
    /// Who the claim is.
    pub claim_ref: ClaimRef,
    /// What is known about its preparation.
    pub state: PrepareState,
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::runtime::RawExtension;

    fn cfg(source: &str, requests: Option<&[&str]>, tag: &str) -> DeviceAllocationConfiguration {
        DeviceAllocationConfiguration {
            source: source.into(),
            requests: requests.map(|r| r.iter().map(|s| s.to_string()).collect()),
            opaque: Some(OpaqueDeviceConfiguration {
                driver: "dra.net".into(),
                parameters: RawExtension(serde_json::json!({ "tag": tag })),
            }),
        }
    }

    fn result(request: &str) -> DeviceRequestAllocationResult {
        DeviceRequestAllocationResult {
            request: request.into(),
            driver: "dra.net".into(),
            pool: "p".into(),
            device: "d".into(),
            ..Default::default()
        }
    }

    #[test]
    fn config_for_scopes_by_request_and_puts_the_class_first() {
        let claim = ClaimToPrepare {
            claim_ref: ClaimRef {
                namespace: "ns".into(),
                name: "c".into(),
                uid: "u".into(),
            },
            claim: ResourceClaim::default(),
            results: vec![],
            config: vec![
                cfg("FromClaim", Some(&["nic/fast"]), "claim-nic-fast"),
                cfg("FromClaim", Some(&["nic"]), "claim-nic"),
                cfg("FromClaim", None, "claim-wide"),
                cfg("FromClass", None, "class"),
                cfg("FromClaim", Some(&["gpu"]), "claim-gpu"),
                cfg("FromClaim", None, "claim-wide-2"),
            ],
        };
        let tags = |r: &str| -> Vec<String> {
            claim
                .config_for(&result(r))
                .iter()
                .map(|c| c.parameters.0["tag"].as_str().unwrap().to_string())
                .collect()
        };
        // Most specific last, whatever order the claim wrote them in.
        assert_eq!(
            tags("nic"),
            ["class", "claim-wide", "claim-wide-2", "claim-nic"]
        );
        assert_eq!(
            tags("gpu"),
            ["class", "claim-wide", "claim-wide-2", "claim-gpu"]
        );
        // A firstAvailable subrequest takes its parent's config and then its own.
        assert_eq!(
            tags("nic/fast"),
            [
                "class",
                "claim-wide",
                "claim-wide-2",
                "claim-nic",
                "claim-nic-fast"
            ]
        );
        assert_eq!(
            tags("nic/slow"),
            ["class", "claim-wide", "claim-wide-2", "claim-nic"]
        );
    }
}
