//! The files and specs through a claim's life: made at prepare, removed at unprepare, and put
//! right at start for what the checkpoint holds.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use super::error::MetadataError;
use super::layout::{check_pod_claim_name, check_request, check_uid, claim_dir_name, top_request};
use super::schema::{ClaimMeta, DeviceMetadata, MetadataDevice};
use super::update::{request_file, write_request};
use super::{Metadata, cdi_spec, in_place};
use crate::checkpoint::Phase;
use crate::driver::{ClaimRef, Prepared};
use crate::error::{Error, Result};

impl Metadata {
    /// At prepare, once the driver has returned: an empty file and a CDI spec for each request
    /// of the claim's devices, and the spec's CDI ID added to the first device of each request.
    /// `pod_claim_name`: the claim's [`super::layout::POD_CLAIM_NAME_ANNOTATION`], which puts
    /// the file under the template claims' directory in the container. The claim fails when they
    /// cannot be written (its unprepare removes what was).
    pub(crate) async fn prepared(
        self: &Arc<Self>,
        c: &ClaimRef,
        pod_claim_name: Option<&str>,
        prepared: &mut Prepared,
    ) -> Result<()> {
        let requests: BTreeSet<String> = prepared
            .devices
            .iter()
            .flat_map(|d| &d.requests)
            .map(|r| top_request(r).to_string())
            .collect();
        if requests.is_empty() {
            return Ok(());
        }
        check_uid(&c.uid).map_err(Error::InvalidRequest)?;
        for r in &requests {
            check_request(r).map_err(Error::InvalidRequest)?;
        }
        if let Some(p) = pod_claim_name {
            check_pod_claim_name(p).map_err(Error::InvalidRequest)?;
        }
        let files = self.at_prepare(c, pod_claim_name, prepared);
        let (this, claim) = (Arc::clone(self), c.clone());
        let pod_claim = pod_claim_name.map(str::to_string);
        tokio::task::spawn_blocking(move || {
            this.create(&claim, pod_claim.as_deref(), &requests, false)?;
            for (path, file) in files {
                write_request(&path, file, &this.versions).map_err(|e| match e {
                    MetadataError::Io {
                        action,
                        path,
                        source,
                    } => Error::Io {
                        action,
                        path,
                        source,
                    },
                    other => Error::Driver {
                        action: "prepare",
                        claim: claim.to_string(),
                        source: Box::new(other),
                    },
                })?;
            }
            Ok::<_, Error>(())
        })
        .await
        .map_err(|_| Error::Task("device metadata files"))??;
        // Once per request: the kubelet gives a container the CDI IDs of every device of the
        // requests it uses, and each repetition would be one more bind mount of the same file.
        let mut given: HashSet<String> = HashSet::new();
        for d in &mut prepared.devices {
            for r in &d.requests {
                let id = self.layout.cdi_id(&c.uid, r);
                if given.insert(id.clone()) && !d.cdi_device_ids.contains(&id) {
                    d.cdi_device_ids.push(id);
                }
            }
        }
        Ok(())
    }

    /// The file and spec of each of `requests` of claim `c`. `keep`: a file that exists keeps
    /// what it holds.
    /// The files the driver's prepare filled ([`crate::PreparedDevice::metadata`]), taken out of
    /// `prepared` (the checkpoint keeps the file, not them): per request, every device of it,
    /// those without metadata by name only; requests none of whose devices has any get none.
    fn at_prepare(
        &self,
        c: &ClaimRef,
        pod_claim_name: Option<&str>,
        prepared: &mut Prepared,
    ) -> Vec<(std::path::PathBuf, DeviceMetadata)> {
        let mut by_request: BTreeMap<&str, (String, Vec<MetadataDevice>, bool)> = BTreeMap::new();
        let taken: Vec<_> = prepared
            .devices
            .iter_mut()
            .map(|d| d.metadata.take())
            .collect();
        for (d, m) in prepared.devices.iter().zip(&taken) {
            for r in &d.requests {
                let entry = by_request
                    .entry(top_request(r))
                    .or_insert_with(|| (r.clone(), Vec::new(), false));
                let mut device = MetadataDevice::new(d.pool.clone(), d.device.clone());
                device.driver = self.layout.driver().to_string();
                if let Some(m) = m {
                    device.attributes = m.attributes.clone();
                    device.network_data = m.network_data.clone();
                    entry.2 = true;
                }
                entry.1.push(device);
            }
        }
        by_request
            .into_values()
            .filter(|(_, _, filled)| *filled)
            .map(|(request, devices, _)| {
                let claim = ClaimMeta {
                    name: c.name.clone(),
                    namespace: c.namespace.clone(),
                    uid: c.uid.clone(),
                    generation: 0,
                };
                let path = self.layout.file(&c.namespace, &c.name, &request);
                let file =
                    request_file(claim, pod_claim_name.map(str::to_string), request, devices);
                (path, file)
            })
            .collect()
    }

    fn create(
        &self,
        c: &ClaimRef,
        pod_claim_name: Option<&str>,
        requests: &BTreeSet<String>,
        keep: bool,
    ) -> Result<()> {
        for r in requests {
            let file = self.layout.file(&c.namespace, &c.name, r);
            in_place::placeholder(&file, keep)
                .map_err(|e| Error::io("create device metadata file", &file, e))?;
            cdi_spec::write(
                &self.layout,
                &c.namespace,
                &c.name,
                pod_claim_name,
                &c.uid,
                r,
            )?;
        }
        Ok(())
    }

    /// At unprepare, once the driver has returned: the claim's files and specs go. A claim
    /// without any is fine.
    pub(crate) async fn unprepared(self: &Arc<Self>, c: &ClaimRef) -> Result<()> {
        let (this, claim) = (Arc::clone(self), c.clone());
        tokio::task::spawn_blocking(move || this.remove(&claim))
            .await
            .map_err(|_| Error::Task("device metadata files"))?
    }

    fn remove(&self, c: &ClaimRef) -> Result<()> {
        let dir = self.layout.claim_dir(&c.namespace, &c.name);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove device metadata", &dir, e)),
        }
        cdi_spec::remove_claim(&self.layout, &c.uid)
    }

    /// At start, before the kubelet is served: removes the files and specs of claims the
    /// checkpoint does not hold (unprepared while the plugin was down, or left by a crash), and
    /// writes again the spec (and an empty file, where it is missing) of each prepared claim that
    /// has metadata: the CDI directory is usually a tmpfs, gone after a reboot that the
    /// checkpoint survives. Failures are logged; the plugin starts regardless. Blocking.
    pub(crate) fn restore(&self) {
        // Listed before the checkpoint is read: in a rolling update the other instance records a
        // claim before it creates its files, so every claim listed here is in what is read next.
        let dirs = self.claim_dirs();
        let specs = cdi_spec::list(&self.layout).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "device metadata: the CDI directory is not readable");
            Vec::new()
        });
        let entries = match self.checkpoint.entries_now() {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "device metadata: the checkpoint is not readable; nothing cleaned up");
                return;
            }
        };
        let held: HashSet<String> = entries
            .values()
            .map(|e| claim_dir_name(&e.claim.namespace, &e.claim.name))
            .collect();
        for name in dirs.iter().filter(|n| !held.contains(*n)) {
            let dir = self.layout.root().join(name);
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "device metadata of a claim no longer prepared removed")
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "device metadata of a claim no longer prepared could not be removed")
                }
            }
        }
        for (path, uid) in specs.iter().filter(|(_, uid)| !entries.contains_key(uid)) {
            if let Err(e) = cdi_spec::remove(path) {
                tracing::warn!(claim_uid = %uid, error = %e, "a device metadata CDI spec of a claim no longer prepared could not be removed");
            }
        }
        for e in entries.values() {
            let (Phase::Prepared, Some(p)) = (e.phase, &e.prepared) else {
                continue;
            };
            // Only the requests prepared with metadata: one of their devices carries the spec's ID.
            let requests: BTreeSet<String> = p
                .devices
                .iter()
                .flat_map(|d| d.requests.iter().map(move |r| (d, r)))
                .filter(|(d, r)| {
                    d.cdi_device_ids
                        .contains(&self.layout.cdi_id(&e.claim.uid, r))
                })
                .map(|(_, r)| top_request(r).to_string())
                .collect();
            // An entry without the pod claim name (written before it was recorded) is a
            // direct claim's.
            let pod_claim = e.pod_claim_name.as_deref();
            if let Err(err) = self.create(&e.claim, pod_claim, &requests, true) {
                tracing::error!(claim = %e.claim, error = %err, "device metadata of a prepared claim could not be restored: its pods' containers may fail to start");
            }
        }
    }

    /// The names of the claim directories there are.
    fn claim_dirs(&self) -> Vec<String> {
        let root = self.layout.root();
        let entries = match std::fs::read_dir(root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => {
                tracing::warn!(dir = %root.display(), error = %e, "device metadata: the directory is not readable");
                return Vec::new();
            }
        };
        entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect()
    }
}
