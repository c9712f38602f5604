//! The metadata file's JSON (`metadata.resource.k8s.io/v1alpha1`, kind `DeviceMetadata`).
//! Attribute values and network data are the resource.k8s.io/v1 types, as in ResourceSlices
//! and claim status.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{DeviceAttribute, NetworkDeviceData};
use serde::{Deserialize, Serialize};

/// The file's `apiVersion`.
pub const API_VERSION: &str = "metadata.resource.k8s.io/v1alpha1";

/// The file's `kind`.
pub const KIND: &str = "DeviceMetadata";

/// One metadata file: a claim and, for one of its requests, the devices of this driver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceMetadata {
    /// [`API_VERSION`].
    pub api_version: String,
    /// [`KIND`].
    pub kind: String,
    /// Which claim, and how often its file was written.
    pub metadata: ClaimMeta,
    /// The request the file is about.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<MetadataRequest>,
}

/// The claim a file is about: only these four of a Kubernetes object's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimMeta {
    /// The claim's name.
    pub name: String,
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's UID.
    pub uid: String,
    /// 1 for the first write, one more for each later one.
    pub generation: i64,
}

/// One request of the claim and its devices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetadataRequest {
    /// The request's name as allocated (`nic`, or the subrequest `nic/fast`).
    pub name: String,
    /// Its devices of this driver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<MetadataDevice>,
}

/// What a container learns about one device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetadataDevice {
    /// The device's name in its pool.
    pub name: String,
    /// The driver's name; [`super::MetadataUpdater`] fills it when empty.
    pub driver: String,
    /// The device's pool.
    pub pool: String,
    /// Its attributes by qualified name, as the ResourceSlice publishes them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, DeviceAttribute>,
    /// Its network interface as the pod sees it, for a network device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data: Option<NetworkDeviceData>,
}

impl MetadataDevice {
    /// Device `name` of `pool`, with no attributes or network data yet.
    pub fn new(pool: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            pool: pool.into(),
            ..Self::default()
        }
    }
}
