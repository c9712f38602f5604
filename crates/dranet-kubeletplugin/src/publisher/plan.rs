//! The writes that turn the slices the API server has into the ones the driver wants.

use std::collections::BTreeMap;

use dranet_core::slice::NodePool;
use k8s_openapi::api::resource::v1::{Device, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::MAX_DEVICES_PER_SLICE;
use super::compare::{keep_taint_times, normalize, spec_unchanged};
use super::memory::{WrittenSlices, our_copy};
use crate::error::{Error, Result};

/// Who publishes: the inputs of [`plan`] besides the devices.
#[derive(Debug, Clone)]
pub struct PoolParams {
    /// Node name; also the pool name.
    pub node_name: String,
    /// Driver name.
    pub driver_name: String,
    /// UID of the Node object, for the owner reference; `None` publishes without one.
    pub node_uid: Option<String>,
    /// Devices per slice, at most [`MAX_DEVICES_PER_SLICE`].
    pub max_devices_per_slice: usize,
}

impl PoolParams {
    /// The pool these parameters describe, or why it cannot be published.
    fn pool(&self) -> Result<NodePool<'_>> {
        NodePool::new(&self.node_name, &self.driver_name)
            .with_max_devices_per_slice(self.max_devices_per_slice)
            .ok_or_else(|| {
                Error::Config(format!(
                    "max devices per slice is {}, must be 1..={MAX_DEVICES_PER_SLICE}",
                    self.max_devices_per_slice
                ))
            })
    }

    /// The name of the slice at `index`.
    pub fn slice_name(&self, index: usize) -> String {
        NodePool::new(&self.node_name, &self.driver_name).slice_name(index)
    }
}

/// A slice to delete, with the preconditions that keep the delete from hitting a newer object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceDelete {
    /// Slice name.
    pub name: String,
    /// UID it must still have.
    pub uid: String,
    /// resourceVersion it must still have.
    pub resource_version: String,
}

/// The writes that turn the current slices into the desired ones.
#[derive(Debug, Clone, Default)]
pub struct SlicePlan {
    /// Slices to delete (first, so devices the driver no longer has disappear even if a later
    /// write fails).
    pub deletes: Vec<SliceDelete>,
    /// Slices to replace, carrying the resourceVersion they are based on.
    pub updates: Vec<ResourceSlice>,
    /// Slices to create.
    pub creates: Vec<ResourceSlice>,
    /// The pool generation after the plan is carried out.
    pub generation: i64,
}

impl SlicePlan {
    /// True when nothing needs writing.
    pub fn is_empty(&self) -> bool {
        self.deletes.is_empty() && self.updates.is_empty() && self.creates.is_empty()
    }

    /// Number of API writes.
    pub fn writes(&self) -> usize {
        self.deletes.len() + self.updates.len() + self.creates.len()
    }
}

/// Computes the writes that publish `devices` given the `existing` slices of our node and driver.
///
/// Fails only on input that can never be published (a device without a name, a duplicate
/// device name, or a bad per-slice limit).
pub fn plan(
    devices: &[Device],
    existing: &[ResourceSlice],
    params: &PoolParams,
) -> Result<SlicePlan> {
    plan_with(devices, existing, params, &WrittenSlices::new())
}

/// [`plan`], comparing with what we wrote where the server still has exactly that.
pub(crate) fn plan_with(
    devices: &[Device],
    existing: &[ResourceSlice],
    params: &PoolParams,
    written: &WrittenSlices,
) -> Result<SlicePlan> {
    let pool = params.pool()?;
    let mut seen = std::collections::HashSet::with_capacity(devices.len());
    for d in devices {
        if d.name.is_empty() {
            return Err(Error::InvalidRequest(
                "a device to publish has an empty name".into(),
            ));
        }
        if !seen.insert(d.name.as_str()) {
            return Err(Error::InvalidRequest(format!(
                "device {:?} is listed twice",
                d.name
            )));
        }
    }
    // An empty pool is still published as one empty slice: it says "this driver runs here and has
    // no devices", which is different from no slices at all.
    let chunks = pool.chunks(devices);

    let mut generation = existing
        .iter()
        .map(|s| s.spec.pool.generation)
        .max()
        .unwrap_or(0);
    let mut matched: BTreeMap<usize, &ResourceSlice> = BTreeMap::new();
    let mut obsolete: Vec<&ResourceSlice> = Vec::new();
    for slice in existing {
        let name = slice.metadata.name.as_deref().unwrap_or_default();
        match pool.slice_index(name) {
            Some(i)
                if i < chunks.len()
                    && slice.spec.pool.generation == generation
                    && slice.spec.pool.name == params.node_name
                    && !matched.contains_key(&i) =>
            {
                matched.insert(i, slice);
            }
            _ => obsolete.push(slice),
        }
    }

    let owner = params.node_uid.as_ref().map(|uid| OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: params.node_name.clone(),
        uid: uid.clone(),
        controller: Some(true),
        block_owner_deletion: None,
    });
    // The devices of slice `index` as the server will store them.
    let desired_devices = |index: usize, current: Option<&ResourceSlice>| {
        let mut devices = chunks[index].to_vec();
        devices.iter_mut().for_each(normalize);
        if let Some(cur) = current {
            keep_taint_times(
                &mut devices,
                cur.spec.devices.as_deref().unwrap_or_default(),
            );
        }
        devices
    };

    // Compared in place: building the desired spec clones every device, which is most of a
    // resync's cost when nothing changed (the common case). The rest of the spec is the pool's.
    let shape = pool.spec(generation, chunks.len(), Vec::new());
    let changed: Vec<usize> = matched
        .iter()
        .filter(|(i, cur)| {
            let base = our_copy(cur, written).unwrap_or(cur);
            !spec_unchanged(&base.spec, &shape, chunks[**i])
                || owner.as_ref().is_some_and(|o| {
                    base.metadata.owner_references.as_deref() != Some(std::slice::from_ref(o))
                })
        })
        .map(|(i, _)| *i)
        .collect();
    let new = chunks.len() - matched.len();
    let bump = new > 0 || changed.len() > 1;
    if bump {
        // Anyone who may write ResourceSlices can set the generation to i64::MAX; wrapping would
        // give a negative generation the API server refuses, and the node would never publish
        // again. Start the pool over at 1: every slice is rewritten with it (`bump`) and the
        // stale ones deleted, so readers see one consistent generation once the writes land.
        generation = match generation.checked_add(1) {
            Some(g) => g,
            None => {
                tracing::warn!(
                    pool = %params.node_name,
                    "pool generation is at i64::MAX; restarting it at 1"
                );
                1
            }
        };
    }

    let mut out = SlicePlan {
        generation,
        ..SlicePlan::default()
    };
    out.deletes = obsolete
        .iter()
        .map(|s| SliceDelete {
            name: s.metadata.name.clone().unwrap_or_default(),
            uid: s.metadata.uid.clone().unwrap_or_default(),
            resource_version: s.metadata.resource_version.clone().unwrap_or_default(),
        })
        .collect();
    for (i, cur) in &matched {
        if !bump && !changed.contains(i) {
            continue;
        }
        let mut slice = (*cur).clone();
        slice.spec = pool.spec(generation, chunks.len(), desired_devices(*i, Some(cur)));
        if let Some(o) = &owner {
            slice.metadata.owner_references = Some(vec![o.clone()]);
        }
        out.updates.push(slice);
    }
    for i in (0..chunks.len()).filter(|i| !matched.contains_key(i)) {
        let mut slice = pool.slice(i, generation, chunks.len(), desired_devices(i, None));
        slice.metadata.owner_references = owner.as_ref().map(|o| vec![o.clone()]);
        out.creates.push(slice);
    }
    Ok(out)
}
