//! Device metadata in the container (KEP-5304): a JSON file per claim request that tells the
//! containers using the request what their devices are (attributes, network data).
//!
//! Turned on with [`crate::KubeletPluginBuilder::device_metadata`]. Then, for every claim the
//! driver prepares, the plugin:
//!
//! - creates an empty file per request of the claim on the host,
//!   `<kubelet root>/plugins/<driver>/dra-device-metadata/<namespace>_<claim>/<request>/metadata.json`
//!   (mode 0644), and a CDI spec per request (kind `<driver>/metadata`, device
//!   `<claim UID>_<request>`) that bind-mounts it read-only into the containers at
//!   - `/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/<driver>-metadata.json`
//!     for a claim the pod names directly (`spec.resourceClaims[].resourceClaimName`), or
//!   - `/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/<pod claim name>/<request>/<driver>-metadata.json`
//!     for a claim generated from a template, `<pod claim name>` being the pod's
//!     `spec.resourceClaims[].name`, which the plugin reads from the claim's
//!     [`POD_CLAIM_NAME_ANNOTATION`] (and keeps in the checkpoint);
//! - adds the CDI ID `<driver>/metadata=<claim UID>_<request>` to the CDI IDs of the first device
//!   of each request that prepare returned: the kubelet hands a container the IDs of every device
//!   of the requests it uses, so the file is mounted into exactly those containers, once;
//! - removes the files and specs at unprepare; at start, removes those of claims the
//!   checkpoint no longer holds and writes again what a prepared claim lacks (the CDI directory
//!   is usually a tmpfs, gone after a reboot that the checkpoint survives).
//!
//! The driver fills the file when it knows what to say, through the [`MetadataUpdater`] that
//! [`crate::KubeletPlugin::metadata_updater`] gives it; a network driver does that in its NRI
//! `RunPodSandbox` hook, once the pod's interfaces exist. Every write increments
//! `metadata.generation` (the first is 1).
//!
//! The file holds one JSON object per [`MetadataVersion`] the plugin writes
//! ([`crate::KubeletPluginBuilder::metadata_versions`], by default all), newest first, each on
//! a line of its own: a reader takes the first `apiVersion` it understands ([`read_stream`]),
//! so containers built for an older Kubernetes still find theirs.
//!
//! For a request of a `firstAvailable` subrequest (`nic/fast`), the path and the CDI device name
//! use the request the container names (`nic`); the JSON's `requests[].name` says which
//! subrequest was allocated.
//!
//! # Why the file is rewritten in place
//!
//! The runtime performs the container's mounts before it runs its OCI `createRuntime` hooks, and a
//! bind mount of a file pins the inode the host path had when it was mounted. A write to a
//! temporary file renamed over the placeholder would leave a container that was already created
//! seeing the old, empty inode. So every write opens the existing file and rewrites its
//! contents on the same inode. A driver writes before the pod's containers run
//! (dranet's containers wait in the hook until its attach, which writes the file, has ended), so
//! no container reads a half-written file.

mod cdi_spec;
mod error;
mod in_place;
mod layout;
mod lifecycle;
mod schema;
mod update;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;

use dranet_util::NamedLocks;

use crate::checkpoint::Checkpoint;

pub use error::MetadataError;
pub use layout::{
    CONTAINER_DIR, MetadataLayout, POD_CLAIM_NAME_ANNOTATION, RESOURCE_CLAIM_TEMPLATES_SUBDIR,
    RESOURCE_CLAIMS_SUBDIR, top_request,
};
pub use schema::{
    ClaimMeta, DeviceMetadata, KIND, MetadataDevice, MetadataRequest, MetadataVersion, read_stream,
};

/// The device metadata of one plugin: its layout, the versions its files hold, the checkpoint
/// that says which claims are prepared, and the per-claim locks the plugin serializes prepare
/// and unprepare with.
#[derive(Debug)]
pub(crate) struct Metadata {
    pub layout: MetadataLayout,
    /// Newest first, each once ([`MetadataVersion::parse_list`]).
    pub versions: Vec<MetadataVersion>,
    pub checkpoint: Checkpoint,
    pub locks: Arc<NamedLocks>,
}

impl Metadata {
    /// The metadata kept as `layout` says, in `versions`, for the claims `checkpoint` holds.
    pub fn new(
        layout: MetadataLayout,
        versions: Vec<MetadataVersion>,
        checkpoint: Checkpoint,
        locks: Arc<NamedLocks>,
    ) -> Arc<Self> {
        Arc::new(Self {
            layout,
            versions,
            checkpoint,
            locks,
        })
    }
}

/// Fills the device metadata files of prepared claims ([`MetadataUpdater::update_request_metadata`]).
/// Cheap to clone; clones share the plugin's state. It stays usable while the plugin runs.
#[derive(Debug, Clone)]
pub struct MetadataUpdater {
    inner: Arc<Metadata>,
}

impl MetadataUpdater {
    pub(crate) fn new(inner: Arc<Metadata>) -> Self {
        Self { inner }
    }

    /// Where the files and specs are.
    pub fn layout(&self) -> &MetadataLayout {
        &self.inner.layout
    }

    /// The CDI spec directory the specs go to.
    pub fn cdi_dir(&self) -> &std::path::Path {
        self.inner.layout.cdi_dir()
    }

    /// The versions each file holds, in the order written (newest first).
    pub fn versions(&self) -> &[MetadataVersion] {
        &self.inner.versions
    }
}

/// What the builder keeps for [`crate::KubeletPluginBuilder::device_metadata`].
#[derive(Debug, Clone)]
pub(crate) struct MetadataConfig {
    pub cdi_dir: PathBuf,
}
