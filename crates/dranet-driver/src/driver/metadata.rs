//! The device metadata of a pod's claims (KEP-5304, see [`dranet_kubeletplugin::metadata`]): once
//! its devices are in, each request's file says what the pod's containers got.

use dranet_kubeletplugin::k8s_openapi::api::resource::v1::{Device, DeviceAttribute};
use dranet_kubeletplugin::metadata::{MetadataDevice, top_request};
use dranet_kubeletplugin::{MetadataError, MetadataUpdater};

use super::*;

/// The attributes each published device carries, by device name.
pub(super) type PublishedAttributes = HashMap<String, BTreeMap<String, DeviceAttribute>>;

impl NetworkDriver {
    /// Fills the claims' device metadata files through `updater` (the kubelet plugin's; without
    /// one the driver writes none). Set before the NRI plugin runs.
    pub fn set_metadata_updater(&self, updater: MetadataUpdater) {
        if self.metadata.set(updater).is_err() {
            tracing::warn!("the device metadata updater was set twice; the first is kept");
        }
    }

    /// Tells the driver what each device is published with: the attributes its metadata
    /// carries (the same names and values as its ResourceSlice entry). The daemon calls it
    /// with every publication.
    pub fn set_published(&self, devices: &[Device]) {
        let attributes: PublishedAttributes = devices
            .iter()
            .map(|d| (d.name.clone(), d.attributes.clone().unwrap_or_default()))
            .collect();
        *self
            .published
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(attributes);
    }

    /// Writes each request's metadata file of `claims` once the pod's devices are in: every
    /// device's published attributes, and for a netdev its network data as the pod sees it (as
    /// in the claim status). A claim shared by several pods (child interfaces) holds what the
    /// pod that attached last sees. A failure is logged: the pod runs regardless, and the
    /// claim's status says the same.
    pub(super) async fn write_metadata(
        &self,
        claims: &[Arc<ClaimRecord>],
        attached: &[(String, Attached)],
    ) {
        let Some(updater) = self.metadata.get() else {
            return;
        };
        let published = self
            .published
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let by_key: HashMap<&str, &Attached> =
            attached.iter().map(|(k, a)| (k.as_str(), a)).collect();
        for c in claims {
            let mut requests: BTreeMap<&str, Vec<MetadataDevice>> = BTreeMap::new();
            for d in &c.devices {
                let devices = requests.entry(top_request(&d.request)).or_default();
                if devices
                    .iter()
                    .any(|m| m.name == d.device && m.pool == d.pool)
                {
                    continue;
                }
                let a = by_key.get(d.key(&c.uid).as_str()).copied();
                devices.push(MetadataDevice {
                    attributes: published.get(&d.device).cloned().unwrap_or_default(),
                    network_data: status::network_data(d, a),
                    ..MetadataDevice::new(d.pool.clone(), d.device.clone())
                });
            }
            for (request, devices) in requests {
                match updater
                    .update_request_metadata(&c.namespace, &c.name, request, devices)
                    .await
                {
                    Ok(generation) => {
                        tracing::debug!(claim = %format!("{}/{}", c.namespace, c.name), request, generation, "device metadata written")
                    }
                    // Prepared by a dranet without device metadata: no container mounts it.
                    Err(e @ MetadataError::NotMounted { .. }) => {
                        tracing::debug!(error = %e, "no device metadata written")
                    }
                    Err(e) => {
                        tracing::warn!(claim = %format!("{}/{}", c.namespace, c.name), request, error = %dranet_util::error_chain(&e), "could not write the device metadata; the pod runs without it")
                    }
                }
            }
        }
    }
}
