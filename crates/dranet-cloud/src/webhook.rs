//! An operator's webhook (upstream's "bring your own data plane"): device attributes, device
//! configuration and named profiles (an address from an IPAM, say) from an HTTP server the
//! operator runs on the node, over TCP or a unix socket.
//!
//! The protocol is upstream dranet's:
//!
//! - `GET /health` → 200 and `{"cloudProvider": bool, "profileProvider": bool, "runtimeHook":
//!   bool}`: what it serves;
//! - `POST /GetDeviceAttributes` with the device's identifiers (`{"name": "eth1",
//!   "mac_address": "…", "pci_address": "…"}`, empty ones left out but `name`) → a map of
//!   attributes in the DRA API's form (`{"dra.net/webhook_attr": {"string": "python"}}`);
//! - `POST /GetDeviceConfig` with the same → a `NetworkConfig` (a claim's opaque parameters'
//!   shape), laid under the claim's;
//! - `POST /GetProfileConfig` with `{"device": …, "claim_uid": "…", "config": {…}}` → the
//!   `NetworkConfig` of `config.profile` for this claim and device;
//! - `POST /ReleaseProfileConfig` with the same → 200 once whatever it allocated is free;
//! - `POST /GetRuntimeHook` with the same, asked for every device at prepare when `/health` says
//!   `"runtimeHook": true` → `null` (or `{}`), or a [`RuntimeHook`] (`{"path": "/abs/prog",
//!   "args": [...], "timeoutSeconds": 10, "data": {...}}`) that the driver runs once for each
//!   pod that gets the device (see `dranet_driver::runtime_hooks`).
//!
//! Attributes and device configuration are asked for every device after each scan
//! ([`CloudProvider::refresh`]), a few requests at a time, and answered from memory in between;
//! a device the webhook fails to answer for keeps its last answer. Each answer is kept as it
//! comes, so a refresh cut short (the daemon bounds a refresh as a whole) keeps those it got. Every request has a timeout and
//! every answer a size limit; an answer that is not the documented JSON is an error naming what
//! is wrong (an unknown configuration field included), never ignored.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use dranet_core::{
    Attributes, BoxFuture, CloudProvider, DRIVER_NAME, DeviceIdentifiers, NetworkConfig,
    ProfileError, ProfileProvider, ProfileRequest, RuntimeHook,
};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::http::{Endpoint, Error, Request, Result};
use crate::retry::RetryPolicy;

/// `GET`: capabilities.
pub const PATH_HEALTH: &str = "/health";
/// `POST`: a device's attributes.
pub const PATH_GET_DEVICE_ATTRIBUTES: &str = "/GetDeviceAttributes";
/// `POST`: a device's configuration.
pub const PATH_GET_DEVICE_CONFIG: &str = "/GetDeviceConfig";
/// `POST`: a profile's configuration for a claim's device.
pub const PATH_GET_PROFILE_CONFIG: &str = "/GetProfileConfig";
/// `POST`: release what a profile allocated.
pub const PATH_RELEASE_PROFILE_CONFIG: &str = "/ReleaseProfileConfig";

/// `POST`: the runtime hook for a claim's device.
pub const PATH_GET_RUNTIME_HOOK: &str = "/GetRuntimeHook";

/// Upstream's request timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Requests to the webhook at once during a refresh.
const CONCURRENCY: usize = 8;

/// What the webhook serves (`GET /health`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    /// Attributes and device configuration.
    #[serde(default)]
    pub cloud_provider: bool,
    /// Profiles.
    #[serde(default)]
    pub profile_provider: bool,
    /// Runtime hooks (`POST /GetRuntimeHook`).
    #[serde(default)]
    pub runtime_hook: bool,
}

/// A device's identifiers on the wire (upstream's `DeviceIdentifiers`): `name` is the interface
/// name, empty for a device without one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireDevice {
    /// MAC address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac_address: String,
    /// PCI address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pci_address: String,
    /// Interface name.
    #[serde(default)]
    pub name: String,
}

impl From<&DeviceIdentifiers> for WireDevice {
    fn from(id: &DeviceIdentifiers) -> Self {
        Self {
            mac_address: id.mac.clone().unwrap_or_default(),
            pci_address: id.pci_address.map(|p| p.to_string()).unwrap_or_default(),
            name: id.name.clone().unwrap_or_default(),
        }
    }
}

/// A profile request on the wire (upstream's `ProfileRequest`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireProfileRequest {
    /// The device.
    pub device: WireDevice,
    /// The claim's UID.
    pub claim_uid: String,
    /// The configuration so far; `profile` names the profile.
    pub config: NetworkConfig,
}

impl From<&ProfileRequest> for WireProfileRequest {
    fn from(r: &ProfileRequest) -> Self {
        Self {
            device: (&r.device).into(),
            claim_uid: r.claim_uid.clone(),
            config: r.config.clone(),
        }
    }
}

/// What the webhook last said about one device.
#[derive(Debug, Clone, Default)]
struct Answer {
    attributes: Attributes,
    config: Option<NetworkConfig>,
}

/// A connected webhook.
#[derive(Debug)]
pub struct Webhook {
    endpoint: Endpoint,
    timeout: Duration,
    capabilities: Capabilities,
    answers: Mutex<HashMap<DeviceIdentifiers, Answer>>,
}

impl Webhook {
    /// Asks `GET /health` (retrying transient errors within `policy`) and keeps the
    /// capabilities. `url` is `http://host[:port][/base]`, `unix:///path/to.sock` or
    /// `https://host[:port][/base]`, whose certificate `tls` checks (an off-node webhook's
    /// answers over plain HTTP can be spoofed); `timeout` bounds each request.
    pub async fn connect(
        url: &str,
        tls: Option<crate::tls::Tls>,
        timeout: Duration,
        policy: RetryPolicy,
    ) -> Result<Self> {
        let endpoint = Endpoint::parse_with(url, true, tls)?;
        let health = Request::get(PATH_HEALTH);
        let resp = policy
            .run(timeout, "webhook health", |t| endpoint.fetch(&health, t))
            .await?;
        let capabilities = crate::http::json_object("webhook /health answer", &resp.body)?;
        Ok(Self {
            endpoint,
            timeout,
            capabilities,
            answers: Mutex::new(HashMap::new()),
        })
    }

    /// What it serves.
    pub fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        self.endpoint.as_str()
    }

    async fn post<T: Serialize>(&self, path: &str, body: &T) -> Result<hyper::body::Bytes> {
        let body = serde_json::to_vec(body).map_err(|source| Error::Json {
            what: "webhook request",
            source,
        })?;
        let req = Request::post_json(path, body);
        Ok(self.endpoint.fetch(&req, self.timeout).await?.body)
    }

    /// `POST /GetDeviceAttributes` for one device.
    pub async fn get_device_attributes(&self, id: &DeviceIdentifiers) -> Result<Attributes> {
        let body = self
            .post(PATH_GET_DEVICE_ATTRIBUTES, &WireDevice::from(id))
            .await?;
        let attrs: Option<Attributes> =
            serde_json::from_slice(&body).map_err(|source| Error::Json {
                what: "webhook GetDeviceAttributes answer",
                source,
            })?;
        // `dra.net/x` is the driver's own `x`: published under the one name, so that the
        // webhook's value replaces discovery's instead of standing beside it.
        let own = format!("{DRIVER_NAME}/");
        Ok(attrs
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| match k.strip_prefix(&own) {
                Some(short) => (short.to_string(), v),
                None => (k, v),
            })
            .collect())
    }

    /// `POST /GetDeviceConfig` for one device; `None` for an empty configuration.
    pub async fn get_device_config(&self, id: &DeviceIdentifiers) -> Result<Option<NetworkConfig>> {
        let body = self
            .post(PATH_GET_DEVICE_CONFIG, &WireDevice::from(id))
            .await?;
        let what = "webhook GetDeviceConfig answer";
        let config = network_config(what, &body)?;
        if let Some(c) = &config {
            c.validate().map_err(|e| Error::Invalid {
                what,
                reason: e.to_string(),
            })?;
        }
        Ok(config.filter(|c| *c != NetworkConfig::default()))
    }

    /// Asks the attributes and configuration of one device.
    async fn ask<'a>(&self, id: &'a DeviceIdentifiers) -> (&'a DeviceIdentifiers, Result<Answer>) {
        let answer = async {
            Ok(Answer {
                attributes: self.get_device_attributes(id).await?,
                config: self.get_device_config(id).await?,
            })
        };
        (id, answer.await)
    }

    fn answers(&self) -> std::sync::MutexGuard<'_, HashMap<DeviceIdentifiers, Answer>> {
        self.answers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn profile_error(&self, e: Error) -> ProfileError {
        ProfileError::Provider {
            provider: format!("webhook {}", self.url()),
            source: Box::new(e),
        }
    }
}

/// Why a `GetRuntimeHook` answer is not taken.
enum HookAnswer {
    Json(serde_json::Error),
    Invalid(String),
}

/// A `GetRuntimeHook` answer: `null` or `{}` is none; a hook must be valid
/// ([`RuntimeHook::validate`]), and an unknown field is an error naming it.
fn runtime_hook(body: &[u8]) -> std::result::Result<Option<RuntimeHook>, HookAnswer> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(HookAnswer::Json)?;
    if v.is_null() || v.as_object().is_some_and(|o| o.is_empty()) {
        return Ok(None);
    }
    let hook: RuntimeHook = serde_json::from_value(v).map_err(HookAnswer::Json)?;
    hook.validate().map_err(HookAnswer::Invalid)?;
    Ok(Some(hook))
}

/// A `NetworkConfig` answer, strict: an unknown field is an error naming it; `null` is none.
fn network_config(what: &'static str, body: &[u8]) -> Result<Option<NetworkConfig>> {
    serde_json::from_slice(body).map_err(|source| Error::Json { what, source })
}

impl CloudProvider for Webhook {
    fn name(&self) -> &str {
        "webhook"
    }

    fn node_attributes(&self) -> Attributes {
        Attributes::new()
    }

    fn device_attributes(&self, id: &DeviceIdentifiers) -> Attributes {
        self.answers()
            .get(id)
            .map(|a| a.attributes.clone())
            .unwrap_or_default()
    }

    fn device_config(&self, id: &DeviceIdentifiers) -> Option<NetworkConfig> {
        self.answers().get(id).and_then(|a| a.config.clone())
    }

    fn refresh<'a>(&'a self, devices: &'a [DeviceIdentifiers]) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if !self.capabilities.cloud_provider {
                return;
            }
            // The devices no longer on the node are forgotten first; then each answer is kept
            // as it comes, so that a refresh dropped half way (cut by the caller's timeout)
            // keeps what it got.
            {
                let now: HashSet<&DeviceIdentifiers> = devices.iter().collect();
                self.answers().retain(|id, _| now.contains(id));
            }
            // Collected first: a lazy `map` closure here trips rustc's higher-ranked `Send`
            // check on the returned future.
            let asks: Vec<_> = devices.iter().map(|id| self.ask(id)).collect();
            let mut results = futures::stream::iter(asks).buffer_unordered(CONCURRENCY);
            let mut failed = 0usize;
            let mut first = None;
            while let Some((id, r)) = results.next().await {
                match r {
                    Ok(a) => {
                        self.answers().insert(id.clone(), a);
                    }
                    // A webhook that fails for a moment must not make devices flap in and out
                    // of the claims that select on its attributes: the last answer stays.
                    Err(e) => {
                        failed += 1;
                        first.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = first {
                tracing::warn!(
                    failed,
                    devices = devices.len(),
                    error = %e,
                    "the webhook did not answer for every device; those keep their last answer"
                );
            }
        })
    }
}

impl ProfileProvider for Webhook {
    fn name(&self) -> &str {
        "webhook"
    }

    fn get_profile_config<'a>(
        &'a self,
        req: &'a ProfileRequest,
    ) -> BoxFuture<'a, std::result::Result<NetworkConfig, ProfileError>> {
        Box::pin(async move {
            let body = self
                .post(PATH_GET_PROFILE_CONFIG, &WireProfileRequest::from(req))
                .await
                .map_err(|e| self.profile_error(e))?;
            let config = network_config("webhook GetProfileConfig answer", &body)
                .map_err(|e| self.profile_error(e))?
                .unwrap_or_default();
            config.validate().map_err(|source| ProfileError::Invalid {
                provider: format!("webhook {}", self.url()),
                source,
            })?;
            Ok(config)
        })
    }

    fn release_profile_config<'a>(
        &'a self,
        req: &'a ProfileRequest,
    ) -> BoxFuture<'a, std::result::Result<(), ProfileError>> {
        Box::pin(async move {
            self.post(PATH_RELEASE_PROFILE_CONFIG, &WireProfileRequest::from(req))
                .await
                .map(|_| ())
                .map_err(|e| self.profile_error(e))
        })
    }

    fn serves_runtime_hooks(&self) -> bool {
        self.capabilities.runtime_hook
    }

    fn get_runtime_hook<'a>(
        &'a self,
        req: &'a ProfileRequest,
    ) -> BoxFuture<'a, std::result::Result<Option<RuntimeHook>, ProfileError>> {
        Box::pin(async move {
            if !self.capabilities.runtime_hook {
                return Ok(None);
            }
            let body = self
                .post(PATH_GET_RUNTIME_HOOK, &WireProfileRequest::from(req))
                .await
                .map_err(|e| self.profile_error(e))?;
            runtime_hook(&body).map_err(|e| match e {
                HookAnswer::Json(source) => self.profile_error(Error::Json {
                    what: "webhook GetRuntimeHook answer",
                    source,
                }),
                HookAnswer::Invalid(reason) => ProfileError::InvalidHook {
                    provider: format!("webhook {}", self.url()),
                    reason,
                },
            })
        })
    }
}
