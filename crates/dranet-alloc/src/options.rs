//! How an [`Allocator`](crate::Allocator) is built: the version, gates, bugs and node.

use std::sync::Arc;

use crate::cel::ProgramCache;
use crate::error::AllocError;
use crate::features::{Features, SchedulerBugs};
use crate::node::Node;
use crate::version::KubernetesVersion;

/// How to build an [`Allocator`](crate::Allocator): the Kubernetes version whose scheduler it reproduces, with
/// that version's feature gates and bugs ([`Options::for_version`]; the default is the newest
/// version's), and the node.
#[derive(Debug, Clone)]
pub struct Options {
    /// The Kubernetes version whose scheduler allocates: how pools are gathered and searched,
    /// and the CEL environment selectors compile in.
    pub version: KubernetesVersion,
    /// The node to allocate for: only slices and devices it can reach are used, and the
    /// allocation's node selector names it. `None` takes every slice given to be on the node
    /// (a node's own slices, as `dranet check` reads them).
    pub node: Option<Node>,
    /// The scheduler's feature gates.
    pub features: Features,
    /// The scheduler's bugs to reproduce.
    pub bugs: SchedulerBugs,
    /// Compiled selectors to reuse across allocators, as the scheduler keeps its CEL cache;
    /// `None` compiles every DeviceClass and claim selector anew. Its version must be
    /// [`Options::version`].
    pub programs: Option<Arc<ProgramCache>>,
}

impl Options {
    /// The scheduler of `version` with its default feature gates and its bugs, every slice on
    /// the node.
    pub fn for_version(version: KubernetesVersion) -> Options {
        Options {
            version,
            node: None,
            features: Features::of(version),
            bugs: SchedulerBugs::of(version),
            programs: None,
        }
    }

    /// What these options cannot build: a feature this crate does not model for the version,
    /// or a program cache of another version.
    pub(crate) fn check(&self) -> Result<(), AllocError> {
        if self.features.consumable_capacity && self.version < KubernetesVersion::V1_36 {
            return Err(AllocError::Options(format!(
                "consumable capacity (DRAConsumableCapacity) is modelled as Kubernetes 1.36 allocates, not as {}'s alpha",
                self.version
            )));
        }
        if self.version.needs_incubating_features()
            && !self.features.consumable_capacity
            && !self.features.device_binding_conditions
        {
            return Err(AllocError::Options(format!(
                "with both DRAConsumableCapacity and DRADeviceBindingConditions off, the Kubernetes {} scheduler runs another allocator variant (\"stable\"), which is not modelled; turn one of them on (its default gates turn on both)",
                self.version
            )));
        }
        if let Some(cache) = &self.programs
            && cache.version() != self.version
        {
            return Err(AllocError::Options(format!(
                "the program cache compiles for Kubernetes {}, the allocator is for {}",
                cache.version(),
                self.version
            )));
        }
        Ok(())
    }
}

impl Default for Options {
    /// [`Options::for_version`] the newest supported version.
    fn default() -> Self {
        Options::for_version(KubernetesVersion::default())
    }
}
