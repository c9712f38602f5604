//! [`MetadataUpdater::update_request_metadata`]: a driver fills a request's file.

use super::error::MetadataError;
use super::layout::top_request;
use super::schema::{
    ClaimMeta, DeviceMetadata, KIND, MetadataDevice, MetadataRequest, encode_stream,
};
use super::{MetadataUpdater, in_place};
use crate::checkpoint::{CheckpointEntry, Phase};
use crate::driver::PreparedDevice;

impl MetadataUpdater {
    /// Writes the metadata file of request `request` of claim `namespace/name` with `devices`
    /// (one object per version of [`Self::versions`]), and returns the file's new generation
    /// (1 for its first write).
    ///
    /// Refused unless the claim is prepared by this driver (the checkpoint says so), `request`
    /// (a request, or a `firstAvailable` subrequest `nic/fast`, whose file is `nic`'s) is one of
    /// its devices' requests, and each device is one prepared for it (an empty `driver` is this
    /// driver). The file is rewritten in place (see [`super`]), under the claim's lock, so an
    /// update never crosses the claim's unprepare.
    ///
    /// Call it before the pod's containers run (a network driver: from its NRI
    /// `RunPodSandbox`), never from [`crate::Driver::prepare`] or [`crate::Driver::unprepare`]:
    /// they hold the claim's lock and the update would wait for them.
    pub async fn update_request_metadata(
        &self,
        namespace: &str,
        name: &str,
        request: &str,
        devices: Vec<MetadataDevice>,
    ) -> Result<i64, MetadataError> {
        let unknown = || MetadataError::UnknownClaim {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let m = &self.inner;
        let entries = m
            .checkpoint
            .entries_async()
            .await
            .map_err(MetadataError::Checkpoint)?;
        let uid = entries
            .values()
            .find(|e| is_prepared(e, namespace, name))
            .map(|e| e.claim.uid.clone())
            .ok_or_else(unknown)?;
        let _guard = m.locks.lock(uid.as_str()).await;
        // Again under the lock: the claim may have been unprepared meanwhile.
        let entry = m
            .checkpoint
            .entries_async()
            .await
            .map_err(MetadataError::Checkpoint)?
            .remove(&uid)
            .filter(|e| is_prepared(e, namespace, name))
            .ok_or_else(unknown)?;
        let claim = entry.claim.to_string();
        let prepared = entry.prepared.map(|p| p.devices).unwrap_or_default();
        let of_request: Vec<(&PreparedDevice, &String)> = prepared
            .iter()
            .flat_map(|d| d.requests.iter().map(move |r| (d, r)))
            .filter(|(_, r)| r.as_str() == request || top_request(r) == request)
            .collect();
        let Some(&(_, full_request)) = of_request.first() else {
            let mut known: Vec<String> = prepared.iter().flat_map(|d| d.requests.clone()).collect();
            known.sort();
            known.dedup();
            return Err(MetadataError::UnknownRequest {
                claim,
                request: request.to_string(),
                known,
            });
        };
        let id = m.layout.cdi_id(&uid, full_request);
        if !of_request
            .iter()
            .any(|(d, _)| d.cdi_device_ids.contains(&id))
        {
            return Err(MetadataError::NotMounted {
                claim,
                request: request.to_string(),
            });
        }
        let driver = m.layout.driver();
        let mut devices = devices;
        for d in &mut devices {
            if d.driver.is_empty() {
                d.driver = driver.to_string();
            }
            let known = d.driver == driver
                && of_request
                    .iter()
                    .any(|(p, _)| p.pool == d.pool && p.device == d.name);
            if !known {
                return Err(MetadataError::UnknownDevice {
                    claim,
                    request: request.to_string(),
                    driver: d.driver.clone(),
                    pool: d.pool.clone(),
                    device: d.name.clone(),
                });
            }
        }
        let path = m.layout.file(namespace, name, full_request);
        let claim_meta = ClaimMeta {
            name: name.to_string(),
            namespace: namespace.to_string(),
            uid,
            generation: 0,
        };
        let file = request_file(
            claim_meta,
            entry.pod_claim_name,
            full_request.clone(),
            devices,
        );
        let versions = m.versions.clone();
        let written = path.clone();
        tokio::task::spawn_blocking(move || write_request(&path, file, &versions))
            .await
            .map_err(|e| io_error("write device metadata", &written, std::io::Error::other(e)))?
    }
}

/// The file of one request: `devices` for request `request` (as allocated: `nic/fast` for a
/// `firstAvailable` subrequest) of the claim `claim`.
pub(super) fn request_file(
    claim: ClaimMeta,
    pod_claim_name: Option<String>,
    request: String,
    devices: Vec<MetadataDevice>,
) -> DeviceMetadata {
    DeviceMetadata {
        kind: KIND.into(),
        // Set per version by encode_stream.
        api_version: String::new(),
        metadata: claim,
        pod_claim_name,
        requests: vec![MetadataRequest {
            name: request,
            devices,
        }],
    }
}

/// Writes `file` at `path` in place, one object per version, its generation one past the
/// file's (1 for the first write), and returns that generation. Blocking.
pub(super) fn write_request(
    path: &std::path::Path,
    mut file: DeviceMetadata,
    versions: &[super::MetadataVersion],
) -> Result<i64, MetadataError> {
    let previous =
        in_place::generation(path).map_err(|e| io_error("read device metadata", path, e))?;
    file.metadata.generation = previous.saturating_add(1);
    let bytes = encode_stream(&file, versions)
        .map_err(|e| io_error("encode device metadata", path, std::io::Error::other(e)))?;
    in_place::write(path, &bytes).map_err(|e| io_error("write device metadata", path, e))?;
    Ok(file.metadata.generation)
}

fn io_error(action: &'static str, path: &std::path::Path, source: std::io::Error) -> MetadataError {
    MetadataError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

fn is_prepared(e: &CheckpointEntry, namespace: &str, name: &str) -> bool {
    e.phase == Phase::Prepared && e.claim.namespace == namespace && e.claim.name == name
}
