//! What a claim asks of a device: its opaque `dra.net` parameters selected and merged, checked
//! against the device as discovered, and who may consume it.
//!
//! # Which configuration applies
//!
//! A device's configuration is built from, least specific first:
//!
//! 1. the cloud's configuration of the device (on Azure: per-NIC policy routing);
//! 2. the DeviceClass's `config` entries;
//! 3. the claim's `config` entries that name no request;
//! 4. the claim's entries naming the device's request (for a `firstAvailable` subrequest such
//!    as `nic/fast`, its parent `nic`);
//! 5. the claim's entries naming the subrequest itself.
//!
//! Each is laid over the ones before with [`NetworkConfig::merged_over`]: a field set by a more
//! specific entry wins, lists are joined (a more specific route to the same destination and table
//! replaces the less specific one). So a DeviceClass can set `mtu: 9000` for every NIC, a claim
//! its addresses, and one request its own interface name.
//!
//! When the result names a `profile`, the profile provider's configuration for it goes under all
//! of these (upstream's order: what the claim and the cloud say wins over what the profile
//! resolves to); see the driver's `profiles` module.
//!
//! # Who may consume a claim
//!
//! Only pods ([`pods_of`]). A claim reserved for several pods (a shared claim) is prepared only
//! when none of its devices moves into a pod's network namespace: a device with a network
//! interface lives in one namespace at a time, and so does an RDMA device when the kernel's RDMA
//! subsystem is in exclusive mode. Claims of RDMA-only devices may be shared in shared mode (the
//! kernel's default), where every namespace sees the device: each pod's containers get its
//! character devices.
//!
//! The kubelet prepares a claim once per node, so a pod added to a claim's `reservedFor` after
//! that is never announced to the driver. At such a pod's sandbox start the driver reads (from
//! the API server) the claims of the pod's namespace it holds for other pods: a shareable claim
//! gives the late pod its devices; any other is refused with an error on the pod.

use dranet_core::{
    CloudProvider, DeviceIdentifiers, Inventory, NetworkConfig, NetworkDevice, PciAddress,
    RdmaLink, SriovRole,
};
use dranet_kubeletplugin::ClaimToPrepare;
use dranet_kubeletplugin::k8s_openapi::api::resource::v1::{
    DeviceRequestAllocationResult, ResourceClaim,
};
use serde::{Deserialize, Serialize};

pub use dranet_core::DRIVER_NAME;

/// A pod a claim is reserved for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PodRef {
    /// The pod's name.
    pub name: String,
    /// The pod's UID: how the NRI hooks find the pod's claims.
    pub uid: String,
}

/// Why a claim's consumers cannot have its devices ([`pods_of`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConsumerError {
    /// `status.reservedFor` is empty.
    #[error("it is not reserved for any pod (status.reservedFor is empty)")]
    NotReserved,
    /// A consumer that is not a pod.
    #[error("it is reserved for {resource} {name:?}: only pods can consume {DRIVER_NAME} devices")]
    NotAPod {
        /// Its resource, with its API group when it has one (`deployments.apps`).
        resource: String,
        /// Its name.
        name: String,
    },
}

/// A `dra.net` configuration that cannot be used ([`parse_parameters`], [`config_for`]).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Opaque parameters that are not a `NetworkConfig`: an unknown key, a wrong type.
    #[error(transparent)]
    Parse(serde_json::Error),
    /// A configuration whose values are wrong (the error names the field).
    #[error(transparent)]
    Invalid(dranet_core::Error),
    /// A configuration the kernel would refuse, or with a field dranet-rs does not implement
    /// yet (the error names the field).
    #[error(transparent)]
    Refused(dranet_podnet::ConfigRefusal),
    /// One config entry of the claim or its DeviceClass, for the request it applies to.
    #[error("opaque config of driver {DRIVER_NAME} for request {request:?}: {source}")]
    Entry {
        /// The device's request.
        request: String,
        /// What is wrong with the entry.
        #[source]
        source: Box<ConfigError>,
    },
}

/// A configuration the device as discovered cannot take ([`check_device`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceMismatch {
    /// Network settings for a device without a network interface.
    #[error(
        "it has no network interface (an RDMA-only device): its config may not set interface, \
         routes, rules, neighbors or ethtool"
    )]
    NoNetdev {
        /// The DRA device.
        device: String,
    },
    /// Network settings for a device whose netdev carries a software RDMA link
    /// ([`software_rdma`]): the netdev stays on the host.
    #[error(
        "device {device} is a software RDMA link: the kernel deletes it when its network \
         interface leaves the host namespace, so a pod gets its RDMA char devices and the \
         interface stays on the host; its config may not set interface, routes, rules, neighbors \
         or ethtool, unless it makes a child of the interface (interface.type IPVLAN or Macvlan)"
    )]
    SoftwareRdma {
        /// The DRA device.
        device: String,
        /// The software RDMA link (`rxe0`).
        link: String,
        /// Its netdev.
        netdev: String,
    },
    /// A VF's MTU above its PF's (the message leaves out the host's names for them).
    #[error(
        "interface.mtu {mtu} is above the MTU {pf_mtu} of the device's SR-IOV physical function \
         (PF)"
    )]
    MtuAbovePf {
        /// The MTU asked for.
        mtu: i32,
        /// The DRA device.
        device: String,
        /// Its network interface.
        netdev: String,
        /// The PF's MTU.
        pf_mtu: u32,
        /// The PF.
        pf: PciAddress,
    },
}

/// The pods a claim is reserved for. Only pods may consume `dra.net` devices: anything else in
/// `status.reservedFor`, or nothing there, is an error saying so.
pub fn pods_of(claim: &ResourceClaim) -> Result<Vec<PodRef>, ConsumerError> {
    let consumers = claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or_default();
    if consumers.is_empty() {
        return Err(ConsumerError::NotReserved);
    }
    consumers
        .iter()
        .map(|c| {
            let group = c.api_group.as_deref().unwrap_or_default();
            if group.is_empty() && c.resource == "pods" {
                Ok(PodRef {
                    name: c.name.clone(),
                    uid: c.uid.clone(),
                })
            } else {
                let resource = if group.is_empty() {
                    c.resource.clone()
                } else {
                    format!("{}.{group}", c.resource)
                };
                Err(ConsumerError::NotAPod {
                    resource,
                    name: c.name.clone(),
                })
            }
        })
        .collect()
}

/// Parses the opaque parameters of one config entry: a bare `NetworkConfig`, strict (an unknown
/// key is an error naming it), validated.
pub fn parse_parameters(parameters: &serde_json::Value) -> Result<NetworkConfig, ConfigError> {
    let config: NetworkConfig =
        serde_json::from_value(parameters.clone()).map_err(ConfigError::Parse)?;
    config.validate().map_err(ConfigError::Invalid)?;
    Ok(config)
}

/// The configuration of one allocated device: the cloud's, then every applying config entry of
/// the claim and its DeviceClass, least specific first (see the [module docs](self)), merged and
/// checked ([`dranet_podnet::check_config`]: what the kernel refuses, fields not implemented
/// yet). Errors name the entry's source and requests.
pub fn config_for(
    claim: &ClaimToPrepare,
    result: &DeviceRequestAllocationResult,
    cloud_base: Option<NetworkConfig>,
) -> Result<NetworkConfig, ConfigError> {
    let mut config = cloud_base.unwrap_or_default();
    for opaque in claim.config_for(result) {
        if opaque.driver != DRIVER_NAME {
            continue;
        }
        let entry = parse_parameters(&opaque.parameters.0).map_err(|e| ConfigError::Entry {
            request: result.request.clone(),
            source: Box::new(e),
        })?;
        config = entry.merged_over(&config);
        // Merging only adds identities: past a limit now, past it at the end.
        config.check_limits().map_err(ConfigError::Invalid)?;
    }
    dranet_podnet::check_config(&config).map_err(ConfigError::Refused)?;
    Ok(config)
}

/// The cloud's configuration of a device, if it has one.
pub fn cloud_config(cloud: &dyn CloudProvider, dev: &NetworkDevice) -> Option<NetworkConfig> {
    cloud.device_config(&DeviceIdentifiers::of(dev))
}

/// Whether a configuration asks for anything that needs a network interface.
pub fn wants_netdev(c: &NetworkConfig) -> bool {
    c.interface != Default::default()
        || !c.routes.is_empty()
        || !c.rules.is_empty()
        || !c.neighbors.is_empty()
        || c.ethtool.is_some()
}

/// The device's software RDMA link (soft-RoCE `rxe`, `siw`): an RDMA link with no PCI function
/// of its own, bound to the device's netdev. The kernel deletes such a link when its netdev
/// changes namespace, and cannot move the link itself, so a pod gets it as an RDMA-only device:
/// its char devices, the netdev left in the host namespace where the link lives.
pub fn software_rdma(dev: &NetworkDevice) -> Option<&RdmaLink> {
    let link = dev.rdma.as_ref()?;
    let netdev = dev.netdev.as_ref()?;
    (link.pci.is_none() && link.parent_netdev.as_deref() == Some(netdev.name.as_str()))
        .then_some(link)
}

/// The netdev a pod of this device works on (moved into it, or the parent of its child): none
/// for an IB-only device, nor for a software RDMA link's moved whole. A child type leaves the
/// netdev on the host, so a software RDMA link's netdev can be a child's parent.
pub fn pod_netdev<'a>(dev: &'a NetworkDevice, config: &NetworkConfig) -> Option<&'a str> {
    if software_rdma(dev).is_some() && !config.interface_type().is_child() {
        return None;
    }
    dev.netdev.as_ref().map(|n| n.name.as_str())
}

/// Checks a configuration against the device as discovered: an IB-only device, or one whose
/// netdev carries a software RDMA link (unless the config makes a child of it, which leaves the
/// netdev on the host), takes no network settings; a VF's MTU may not exceed its PF's.
pub fn check_device(
    config: &NetworkConfig,
    dev: &NetworkDevice,
    inventory: &Inventory,
) -> Result<(), DeviceMismatch> {
    if let (Some(link), Some(netdev)) = (software_rdma(dev), &dev.netdev)
        && wants_netdev(config)
        && !config.interface_type().is_child()
    {
        return Err(DeviceMismatch::SoftwareRdma {
            device: dev.name.clone(),
            link: link.name.clone(),
            netdev: netdev.name.clone(),
        });
    }
    let Some(netdev) = &dev.netdev else {
        if wants_netdev(config) {
            return Err(DeviceMismatch::NoNetdev {
                device: dev.name.clone(),
            });
        }
        return Ok(());
    };
    if let (Some(mtu), Some(pci)) = (config.interface.mtu, &dev.pci)
        && let SriovRole::VirtualFunction { pf: Some(pf) } = pci.sriov
        && let Some(pf_mtu) = inventory
            .devices
            .iter()
            .filter(|d| d.pci.as_ref().is_some_and(|p| p.address == pf))
            .find_map(|d| d.netdev.as_ref().and_then(|n| n.mtu))
        && i64::from(mtu) > i64::from(pf_mtu)
    {
        return Err(DeviceMismatch::MtuAbovePf {
            mtu,
            device: dev.name.clone(),
            netdev: netdev.name.clone(),
            pf_mtu,
            pf,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dranet_kubeletplugin::ClaimRef;
    use dranet_kubeletplugin::k8s_openapi::api::resource::v1::{
        DeviceAllocationConfiguration, OpaqueDeviceConfiguration, ResourceClaimConsumerReference,
        ResourceClaimStatus,
    };
    use dranet_kubeletplugin::k8s_openapi::apimachinery::pkg::runtime::RawExtension;

    fn entry(
        source: &str,
        requests: Option<&[&str]>,
        params: serde_json::Value,
    ) -> DeviceAllocationConfiguration {
        DeviceAllocationConfiguration {
            source: source.into(),
            requests: requests.map(|r| r.iter().map(|s| s.to_string()).collect()),
            opaque: Some(OpaqueDeviceConfiguration {
                driver: DRIVER_NAME.into(),
                parameters: RawExtension(params),
            }),
        }
    }

    fn claim(config: Vec<DeviceAllocationConfiguration>) -> ClaimToPrepare {
        ClaimToPrepare {
            claim_ref: ClaimRef {
                namespace: "ns".into(),
                name: "c".into(),
                uid: "u".into(),
            },
            claim: ResourceClaim::default(),
            results: vec![],
            config,
        }
    }

    fn result(request: &str) -> DeviceRequestAllocationResult {
        DeviceRequestAllocationResult {
            request: request.into(),
            driver: DRIVER_NAME.into(),
            pool: "node".into(),
            device: "pci-0101-00-00-0".into(),
            ..Default::default()
        }
    }

    #[test]
    fn most_specific_config_wins_field_by_field() {
        let c = claim(vec![
            entry(
                "FromClaim",
                Some(&["nic"]),
                serde_json::json!({"interface": {"name": "net1"}}),
            ),
            entry(
                "FromClaim",
                None,
                serde_json::json!({"interface": {"name": "eth9", "addresses": ["10.0.0.2/24"]}}),
            ),
            entry(
                "FromClass",
                None,
                serde_json::json!({"interface": {"mtu": 9000, "name": "cls0"}}),
            ),
        ]);
        let cloud = NetworkConfig {
            routes: vec![dranet_core::RouteConfig {
                destination: "0.0.0.0/0".into(),
                gateway: "10.0.0.1".into(),
                table: 100,
                ..Default::default()
            }],
            ..Default::default()
        };
        let got = config_for(&c, &result("nic"), Some(cloud)).unwrap();
        assert_eq!(got.interface.name, "net1", "the request's entry wins");
        assert_eq!(got.interface.addresses, ["10.0.0.2/24"], "claim-wide kept");
        assert_eq!(got.interface.mtu, Some(9000), "class kept");
        assert_eq!(
            got.routes.len(),
            1,
            "the cloud's route stays under the claim"
        );
        // Another request only gets the claim-wide and class entries.
        let other = config_for(&c, &result("gpu"), None).unwrap();
        assert_eq!(other.interface.name, "eth9");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let c = claim(vec![entry(
            "FromClaim",
            Some(&["nic"]),
            serde_json::json!({"interface": {"nmae": "net1"}}),
        )]);
        let e = config_for(&c, &result("nic"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nmae") && e.contains("\"nic\""), "{e}");
        let c = claim(vec![entry(
            "FromClass",
            None,
            serde_json::json!({"routes": [{"destination": "10.0.0.0/8", "gateway": "x"}]}),
        )]);
        let e = config_for(&c, &result("nic"), None).unwrap_err();
        assert!(
            matches!(&e, ConfigError::Entry { request, source } if request == "nic" && matches!(**source, ConfigError::Invalid(_))),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(e.contains("routes[0].gateway"), "{e}");
        // Another driver's config is not ours to parse.
        let mut other = entry("FromClaim", None, serde_json::json!({"anything": 1}));
        if let Some(o) = other.opaque.as_mut() {
            o.driver = "gpu.example.com".into();
        }
        assert_eq!(
            config_for(&claim(vec![other]), &result("nic"), None).unwrap(),
            NetworkConfig::default()
        );
    }

    fn reserved(refs: Vec<(Option<&str>, &str, &str)>) -> ResourceClaim {
        ResourceClaim {
            status: Some(ResourceClaimStatus {
                reserved_for: Some(
                    refs.into_iter()
                        .map(|(g, r, n)| ResourceClaimConsumerReference {
                            api_group: g.map(Into::into),
                            resource: r.into(),
                            name: n.into(),
                            uid: format!("uid-{n}"),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_pods_consume() {
        let pods = pods_of(&reserved(vec![
            (None, "pods", "a"),
            (Some(""), "pods", "b"),
        ]))
        .unwrap();
        assert_eq!(pods.len(), 2);
        assert_eq!(pods[1].uid, "uid-b");
        let e = pods_of(&reserved(vec![(Some("apps"), "deployments", "d")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("deployments.apps") && e.contains("only pods"),
            "{e}"
        );
        let e = pods_of(&reserved(vec![])).unwrap_err();
        assert_eq!(e, ConsumerError::NotReserved);
        assert!(e.to_string().contains("not reserved for any pod"), "{e}");
        assert!(pods_of(&ResourceClaim::default()).is_err());
    }
}
