//! Cloud providers: node-wide attributes, per-device attributes and per-device network
//! configuration that only the cloud knows (placement group, VM size, per-NIC routing), and
//! profile providers, which resolve a claim's named `profile` into configuration (an address from
//! an IPAM, say) and release it when the claim goes.
//!
//! `dranet-cloud` implements [`CloudProvider`] for Azure, GCE, AWS, OCI, Alibaba and an operator's
//! webhook, and [`ProfileProvider`] for the webhook; [`NoCloud`] is the default.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

use crate::{Attributes, NetworkConfig};

/// A boxed future: the async methods of the provider traits, which stay object safe and need no
/// async runtime or extra crate here.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a cloud recognises one of the node's devices.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceIdentifiers {
    /// Interface name, when the device has a netdev.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Hardware address, when the device has a netdev.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// PCI address, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<crate::PciAddress>,
    /// The IPv6 default gateway the host sees on this interface, when there is one (a cloud adds
    /// IPv6 routing only where the host already routes IPv6 through the NIC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_gateway: Option<IpAddr>,
}

impl DeviceIdentifiers {
    /// The identifiers of a discovered device.
    pub fn of(dev: &crate::NetworkDevice) -> Self {
        Self {
            name: dev.netdev.as_ref().map(|n| n.name.clone()),
            mac: dev.netdev.as_ref().and_then(|n| n.mac.clone()),
            pci_address: dev.pci.as_ref().map(|p| p.address),
            ipv6_gateway: dev
                .netdev
                .as_ref()
                .and_then(|n| n.ipv6_gateway.as_deref())
                .and_then(|g| g.parse().ok()),
        }
    }
}

/// What a cloud adds to discovery.
pub trait CloudProvider: Send + Sync {
    /// Short name for logs (`azure`, `none`).
    fn name(&self) -> &str;

    /// Attributes every device of the node carries (placement group, VM size, …).
    fn node_attributes(&self) -> Attributes;

    /// Attributes of one device, on top of the node's.
    fn device_attributes(&self, _id: &DeviceIdentifiers) -> Attributes {
        Attributes::new()
    }

    /// Network configuration the cloud needs on this device in a pod; a claim's own
    /// configuration is laid over it with [`NetworkConfig::merged_over`].
    fn device_config(&self, _id: &DeviceIdentifiers) -> Option<NetworkConfig> {
        None
    }

    /// Brings what the provider knows of `devices` up to date; the daemon calls it after each
    /// scan, before publishing. A provider that learns everything once at start (a cloud's
    /// metadata service) needs nothing here; one that is asked per device (the webhook) asks
    /// here, so that the synchronous methods above answer from memory.
    fn refresh<'a>(&'a self, _devices: &'a [DeviceIdentifiers]) -> BoxFuture<'a, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// What a profile provider is asked: for `device` of claim `claim_uid`, resolve `config.profile`
/// (`config` is the claim's configuration merged over the cloud's, as upstream sends it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileRequest {
    /// The device.
    pub device: DeviceIdentifiers,
    /// The claim's UID: a provider keys what it allocates by it, so that asking twice for the
    /// same claim and device gives the same answer.
    pub claim_uid: String,
    /// The configuration so far; its `profile` names the profile.
    pub config: NetworkConfig,
}

/// Why a profile could not be resolved or released.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The provider could not be asked, or did not answer usably.
    #[error("profile provider {provider}: {source}")]
    Provider {
        /// The provider (`webhook`).
        provider: String,
        /// What went wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// It answered with a runtime hook that is not valid.
    #[error("profile provider {provider} answered a runtime hook that is not valid: {reason}")]
    InvalidHook {
        /// The provider.
        provider: String,
        /// What is wrong with it ([`crate::RuntimeHook::validate`]).
        reason: String,
    },
    /// It answered with a configuration that is not valid.
    #[error("profile provider {provider} answered a configuration that is not valid: {source}")]
    Invalid {
        /// The provider.
        provider: String,
        /// What is wrong with it.
        #[source]
        source: crate::Error,
    },
}

/// Resolves named profiles (upstream's `ProfileProvider`): stateful configuration such as an
/// address leased from an IPAM, asked for at prepare and given back at unprepare.
pub trait ProfileProvider: Send + Sync {
    /// Short name for logs (`webhook`).
    fn name(&self) -> &str;

    /// The configuration of `req.config.profile` for this device and claim. The driver lays the
    /// claim's (and cloud's) configuration over it: what the claim says wins.
    fn get_profile_config<'a>(
        &'a self,
        req: &'a ProfileRequest,
    ) -> BoxFuture<'a, Result<NetworkConfig, ProfileError>>;

    /// Frees what [`ProfileProvider::get_profile_config`] allocated for this device and claim.
    /// The driver may call it more than once, and for a request whose resolution it never saw
    /// answered (a crash in between): releasing what is not held must succeed.
    fn release_profile_config<'a>(
        &'a self,
        req: &'a ProfileRequest,
    ) -> BoxFuture<'a, Result<(), ProfileError>>;

    /// Whether the provider has runtime hooks to give ([`ProfileProvider::get_runtime_hook`]):
    /// the driver asks for every device at prepare only then. The default: no.
    fn serves_runtime_hooks(&self) -> bool {
        false
    }

    /// The program the provider wants run once for each pod that gets this device, in the pod's
    /// network namespace before its first container ([`crate::RuntimeHook`]); `None` for none.
    /// Asked at prepare, after the device's profile. The default: none.
    fn get_runtime_hook<'a>(
        &'a self,
        _req: &'a ProfileRequest,
    ) -> BoxFuture<'a, Result<Option<crate::RuntimeHook>, ProfileError>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}

/// No cloud: adds nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCloud;

impl CloudProvider for NoCloud {
    fn name(&self) -> &str {
        "none"
    }

    fn node_attributes(&self) -> Attributes {
        Attributes::new()
    }
}
