//! The metadata file's JSON (kind `DeviceMetadata`, group `metadata.resource.k8s.io`).
//! Attribute values and network data are the resource.k8s.io/v1 types, as in ResourceSlices
//! and claim status.
//!
//! The file is a stream of JSON objects, one per version the plugin writes, newest first
//! ([`MetadataVersion`]); a reader takes the first `apiVersion` it understands
//! ([`read_stream`]). The versions written so far have the same shape, so one
//! [`DeviceMetadata`] serves them all.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{DeviceAttribute, NetworkDeviceData};
use serde::{Deserialize, Serialize};

/// The file's `kind`.
pub const KIND: &str = "DeviceMetadata";

/// A version of the metadata schema the plugin can write. Ordered newest first, the order of the
/// objects in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum MetadataVersion {
    /// `metadata.resource.k8s.io/v1beta1` (Kubernetes 1.37).
    V1Beta1,
    /// `metadata.resource.k8s.io/v1alpha1` (Kubernetes 1.36).
    V1Alpha1,
}

impl MetadataVersion {
    /// Every version, newest first: what a plugin writes unless told otherwise.
    pub const ALL: [MetadataVersion; 2] = [MetadataVersion::V1Beta1, MetadataVersion::V1Alpha1];

    /// The `apiVersion` of the objects of this version.
    pub fn api_version(self) -> &'static str {
        match self {
            MetadataVersion::V1Beta1 => "metadata.resource.k8s.io/v1beta1",
            MetadataVersion::V1Alpha1 => "metadata.resource.k8s.io/v1alpha1",
        }
    }

    /// The version named `name`: its `apiVersion`, or the version alone (`v1beta1`).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| {
            let api = v.api_version();
            name == api || api.rsplit_once('/').is_some_and(|(_, short)| short == name)
        })
    }

    /// The versions `names` name, newest first and each once. Refused with the first name that
    /// is no version ([`crate::Error::UnknownMetadataVersion`]) or when there is none.
    pub fn parse_list<S: AsRef<str>>(names: &[S]) -> crate::Result<Vec<Self>> {
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            let n = n.as_ref().trim();
            let v = Self::parse(n).ok_or_else(|| crate::Error::UnknownMetadataVersion {
                version: n.to_string(),
                known: Self::ALL
                    .iter()
                    .map(|v| v.api_version().to_string())
                    .collect(),
            })?;
            out.push(v);
        }
        if out.is_empty() {
            return Err(crate::Error::Config(
                "no device metadata version: name at least one".into(),
            ));
        }
        // Newest first whatever the order given: a reader takes the first it understands.
        out.sort();
        out.dedup();
        Ok(out)
    }
}

impl std::fmt::Display for MetadataVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.api_version())
    }
}

/// One object of a metadata file: a claim and, for one of its requests, the devices of this
/// driver. Serialized in the field order of the Kubernetes documentation's example.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceMetadata {
    /// [`KIND`].
    pub kind: String,
    /// One of [`MetadataVersion::api_version`].
    pub api_version: String,
    /// Which claim, and how often its file was written.
    pub metadata: ClaimMeta,
    /// For a claim generated from a template, the pod's name for it (its
    /// `spec.resourceClaims[].name`); absent for a claim the pod names directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_claim_name: Option<String>,
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
    /// The driver's name; [`super::MetadataUpdater`] fills it when empty.
    pub driver: String,
    /// The device's pool.
    pub pool: String,
    /// The device's name in its pool.
    pub name: String,
    /// Its attributes by qualified name, as the ResourceSlice publishes them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, DeviceAttribute>,
    /// Its network interface as the pod sees it, for a network device.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "network_data_in_order"
    )]
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

/// Network data in the order of the claim status's Go type (k8s-openapi writes its fields
/// alphabetically), so the file reads like the documented example.
fn network_data_in_order<S: serde::Serializer>(
    data: &Option<NetworkDeviceData>,
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Ordered<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        interface_name: Option<&'a String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        ips: Option<&'a Vec<String>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        hardware_address: Option<&'a String>,
    }
    data.as_ref()
        .map(|d| Ordered {
            interface_name: d.interface_name.as_ref(),
            ips: d.ips.as_ref(),
            hardware_address: d.hardware_address.as_ref(),
        })
        .serialize(s)
}

/// Encodes `metadata` once per version of `versions`, in their order, each object compact on a
/// line of its own (so line-oriented readers work too).
pub(crate) fn encode_stream(
    metadata: &DeviceMetadata,
    versions: &[MetadataVersion],
) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut object = metadata.clone();
    for v in versions {
        object.api_version = v.api_version().to_string();
        serde_json::to_writer(&mut out, &object)?;
        out.push(b'\n');
    }
    Ok(out)
}

/// Reads a metadata file's bytes as a container does: the first object whose `apiVersion` is one
/// of `understood` (objects of other versions are skipped unread). `Ok(None)`: none is, or the
/// file is empty (not written yet).
pub fn read_stream(
    bytes: &[u8],
    understood: &[MetadataVersion],
) -> serde_json::Result<Option<DeviceMetadata>> {
    for object in serde_json::Deserializer::from_slice(bytes).into_iter::<serde_json::Value>() {
        let object = object?;
        let api = object.get("apiVersion").and_then(|v| v.as_str());
        let known = understood.iter().any(|v| api == Some(v.api_version()));
        if known {
            return serde_json::from_value(object).map(Some);
        }
    }
    Ok(None)
}
