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
//!   `/var/run/dra-device-attributes/<claim>/<request>/<driver>-metadata.json`;
//! - adds the CDI ID `<driver>/metadata=<claim UID>_<request>` to the CDI IDs of each device of
//!   the request that prepare returned, so the kubelet hands it to the runtime for exactly the
//!   containers that use the request;
//! - removes the files and specs at unprepare; at start, removes those of claims the
//!   checkpoint no longer holds and writes again what a prepared claim lacks (the CDI directory
//!   is usually a tmpfs, gone after a reboot that the checkpoint survives).
//!
//! The driver fills the file when it knows what to say, through the [`MetadataUpdater`] that
//! [`crate::KubeletPlugin::metadata_updater`] gives it; a network driver does that in its NRI
//! `RunPodSandbox` hook, once the pod's interfaces exist. Every write increments
//! `metadata.generation` (the first is 1).
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
//! contents on the same inode ([`in_place`]). A driver writes before the pod's containers run
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
pub use layout::{CONTAINER_DIR, MetadataLayout, top_request};
pub use schema::{API_VERSION, ClaimMeta, DeviceMetadata, KIND, MetadataDevice, MetadataRequest};

/// The device metadata of one plugin: its layout, the checkpoint that says which claims are
/// prepared, and the per-claim locks the plugin serializes prepare and unprepare with.
#[derive(Debug)]
pub(crate) struct Metadata {
    pub layout: MetadataLayout,
    pub checkpoint: Checkpoint,
    pub locks: Arc<NamedLocks>,
}

impl Metadata {
    /// The metadata kept as `layout` says, for the claims `checkpoint` holds.
    pub fn new(
        layout: MetadataLayout,
        checkpoint: Checkpoint,
        locks: Arc<NamedLocks>,
    ) -> Arc<Self> {
        Arc::new(Self {
            layout,
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
}

/// What the builder keeps for [`crate::KubeletPluginBuilder::device_metadata`].
#[derive(Debug, Clone)]
pub(crate) struct MetadataConfig {
    pub cdi_dir: PathBuf,
}
