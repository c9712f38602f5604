//! Publishing the driver's devices as ResourceSlices.
//!
//! The pool is named after the node; its slices are named `<node>-<driver>-<index>` and hold at most
//! [`MAX_DEVICES_PER_SLICE`] devices each. [`plan`] compares the desired slices with what the API
//! server has and returns the fewest writes that get there; the plugin keeps doing that, triggered by
//! device changes, watch events on our slices and a periodic resync, retrying with backoff.
//!
//! Pool generation: consumers only trust the slices of a pool's highest generation and need all
//! `resourceSliceCount` of them. A single in-place update cannot leave a mix of old and new
//! slices, so it keeps the generation; anything more (new slices, several changed slices) bumps the
//! generation and rewrites every slice, so that a reader never combines old and new contents.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::resource::v1::{
    Device, DeviceCapacity, DeviceTaint, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use tokio::sync::{Notify, watch};

use crate::api::KubeApi;
use crate::error::{Error, Result};
use crate::metrics::Metrics;

pub use dranet_core::Backoff;
pub use dranet_core::slice::MAX_DEVICES_PER_SLICE;

/// How long one sync pass (list and writes) may take before it is abandoned and retried.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

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
    fn prefix(&self) -> String {
        format!("{}-{}-", self.node_name, self.driver_name)
    }

    /// The name of the slice at `index`.
    pub fn slice_name(&self, index: usize) -> String {
        dranet_core::slice::slice_name(&self.node_name, &self.driver_name, index)
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

/// What this publisher last wrote to one slice, with the UID and resourceVersion the server gave
/// the result.
///
/// The server normalises what it stores (canonical quantities, fields of disabled features
/// dropped, timestamps added): comparing the wanted slice with the stored one would see a change
/// on every sync and rewrite forever, each write's watch event triggering the next. While the
/// stored slice is still the object we wrote (same UID and resourceVersion), the wanted slice is
/// compared with what we sent instead.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    uid: String,
    resource_version: String,
    sent: ResourceSlice,
}

/// [`Written`] by slice name.
pub(crate) type WrittenSlices = std::collections::HashMap<String, Written>;

/// [`plan`], comparing with what we wrote where the server still has exactly that.
pub(crate) fn plan_with(
    devices: &[Device],
    existing: &[ResourceSlice],
    params: &PoolParams,
    written: &WrittenSlices,
) -> Result<SlicePlan> {
    if params.max_devices_per_slice == 0 || params.max_devices_per_slice > MAX_DEVICES_PER_SLICE {
        return Err(Error::Config(format!(
            "max devices per slice is {}, must be 1..={MAX_DEVICES_PER_SLICE}",
            params.max_devices_per_slice
        )));
    }
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
    let chunks: Vec<&[Device]> = if devices.is_empty() {
        vec![&[]]
    } else {
        devices.chunks(params.max_devices_per_slice).collect()
    };

    let mut generation = existing
        .iter()
        .map(|s| s.spec.pool.generation)
        .max()
        .unwrap_or(0);
    let prefix = params.prefix();
    let mut matched: BTreeMap<usize, &ResourceSlice> = BTreeMap::new();
    let mut obsolete: Vec<&ResourceSlice> = Vec::new();
    for slice in existing {
        let name = slice.metadata.name.as_deref().unwrap_or_default();
        let index = name
            .strip_prefix(&prefix)
            .and_then(|i| i.parse::<usize>().ok())
            // "01" parses as 1 but is not our name for it.
            .filter(|i| params.slice_name(*i) == name);
        match index {
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

    let count = chunks.len() as i64;
    let owner = params.node_uid.as_ref().map(|uid| OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: params.node_name.clone(),
        uid: uid.clone(),
        controller: Some(true),
        block_owner_deletion: None,
    });
    let desired_spec = |index: usize, generation: i64, current: Option<&ResourceSlice>| {
        let mut devices = chunks[index].to_vec();
        devices.iter_mut().for_each(normalize);
        if let Some(cur) = current {
            keep_taint_times(
                &mut devices,
                cur.spec.devices.as_deref().unwrap_or_default(),
            );
        }
        ResourceSliceSpec {
            driver: params.driver_name.clone(),
            node_name: Some(params.node_name.clone()),
            pool: ResourcePool {
                name: params.node_name.clone(),
                generation,
                resource_slice_count: count,
            },
            devices: Some(devices),
            ..ResourceSliceSpec::default()
        }
    };

    // Compared in place: building the desired spec clones every device, which is most of a
    // resync's cost when nothing changed (the common case).
    let changed: Vec<usize> = matched
        .iter()
        .filter(|(i, cur)| {
            let base = our_copy(cur, written).unwrap_or(cur);
            !spec_unchanged(&base.spec, chunks[**i], params, generation, count)
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
        slice.spec = desired_spec(*i, generation, Some(cur));
        if let Some(o) = &owner {
            slice.metadata.owner_references = Some(vec![o.clone()]);
        }
        out.updates.push(slice);
    }
    for i in (0..chunks.len()).filter(|i| !matched.contains_key(i)) {
        out.creates.push(ResourceSlice {
            metadata: ObjectMeta {
                name: Some(params.slice_name(i)),
                owner_references: owner.as_ref().map(|o| vec![o.clone()]),
                ..ObjectMeta::default()
            },
            spec: desired_spec(i, generation, None),
        });
    }
    Ok(out)
}

/// What we sent for `stored`, if the server still holds exactly the object that write made.
fn our_copy<'a>(stored: &ResourceSlice, written: &'a WrittenSlices) -> Option<&'a ResourceSlice> {
    let w = written.get(stored.metadata.name.as_deref()?)?;
    (stored.metadata.uid.as_deref() == Some(w.uid.as_str())
        && stored.metadata.resource_version.as_deref() == Some(w.resource_version.as_str()))
    .then_some(&w.sent)
}

/// True when `cur` already is the spec we would write for `devices` at `generation`. What we
/// never set must be unset; unset and empty lists are the same to the server.
fn spec_unchanged(
    cur: &ResourceSliceSpec,
    devices: &[Device],
    params: &PoolParams,
    generation: i64,
    count: i64,
) -> bool {
    let current = cur.devices.as_deref().unwrap_or_default();
    cur.driver == params.driver_name
        && cur.node_name.as_deref() == Some(params.node_name.as_str())
        && cur.pool.name == params.node_name
        && cur.pool.generation == generation
        && cur.pool.resource_slice_count == count
        && cur.node_selector.is_none()
        && !cur.all_nodes.unwrap_or(false)
        && !cur.per_device_node_selection.unwrap_or(false)
        && cur
            .shared_counters
            .as_deref()
            .unwrap_or_default()
            .is_empty()
        && current.len() == devices.len()
        && devices
            .iter()
            .zip(current)
            .all(|(d, c)| device_unchanged(d, c))
}

/// Compares a device we want with the server's copy the way the server stores it: it drops empty
/// lists and maps (so `Some(empty)` comes back as `None`) and stamps `timeAdded` on taints that
/// lack one. Without this, a device with an empty attribute map would be rewritten on every
/// sync, and each write's watch event would trigger the next.
fn device_unchanged(desired: &Device, current: &Device) -> bool {
    // No `..`: a field added to `Device` must be added here too, or this stops compiling.
    let Device {
        all_nodes,
        allow_multiple_allocations,
        attributes,
        binding_conditions,
        binding_failure_conditions,
        binds_to_node,
        capacity,
        consumes_counters,
        name,
        node_name,
        node_selector,
        taints,
    } = desired;
    *name == current.name
        && *all_nodes == current.all_nodes
        && *allow_multiple_allocations == current.allow_multiple_allocations
        && *binds_to_node == current.binds_to_node
        && *node_name == current.node_name
        && *node_selector == current.node_selector
        && same_map(attributes.as_ref(), current.attributes.as_ref())
        && same_capacity(capacity.as_ref(), current.capacity.as_ref())
        && binding_conditions.as_deref().unwrap_or_default()
            == current.binding_conditions.as_deref().unwrap_or_default()
        && binding_failure_conditions.as_deref().unwrap_or_default()
            == current
                .binding_failure_conditions
                .as_deref()
                .unwrap_or_default()
        && consumes_counters.as_deref().unwrap_or_default()
            == current.consumes_counters.as_deref().unwrap_or_default()
        && taints_unchanged(
            taints.as_deref().unwrap_or_default(),
            current.taints.as_deref().unwrap_or_default(),
        )
}

fn same_map<V: PartialEq>(
    a: Option<&BTreeMap<String, V>>,
    b: Option<&BTreeMap<String, V>>,
) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        (Some(m), None) | (None, Some(m)) => m.is_empty(),
        (None, None) => true,
    }
}

/// Capacities compared by value as the server stores them (`1024Mi` is `1Gi`).
fn same_capacity(
    a: Option<&BTreeMap<String, DeviceCapacity>>,
    b: Option<&BTreeMap<String, DeviceCapacity>>,
) -> bool {
    let empty = BTreeMap::new();
    let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
    a.len() == b.len()
        && a.iter().zip(b).all(|((ka, va), (kb, vb))| {
            ka == kb
                && dranet_core::Quantity::same_canonical(&va.value.0, &vb.value.0)
                && va.request_policy == vb.request_policy
        })
}

fn taints_unchanged(desired: &[DeviceTaint], current: &[DeviceTaint]) -> bool {
    desired.len() == current.len()
        && desired.iter().zip(current).all(|(d, c)| {
            let DeviceTaint {
                effect,
                key,
                time_added,
                value,
            } = d;
            *effect == c.effect
                && *key == c.key
                && *value == c.value
                && (time_added.is_none() || *time_added == c.time_added)
        })
}

/// Drops empty lists and maps as the server would, so what we write is what we read back.
fn normalize(d: &mut Device) {
    if d.attributes.as_ref().is_some_and(BTreeMap::is_empty) {
        d.attributes = None;
    }
    if d.capacity.as_ref().is_some_and(BTreeMap::is_empty) {
        d.capacity = None;
    }
    for list in [&mut d.binding_conditions, &mut d.binding_failure_conditions] {
        if list.as_ref().is_some_and(Vec::is_empty) {
            *list = None;
        }
    }
    if d.consumes_counters.as_ref().is_some_and(Vec::is_empty) {
        d.consumes_counters = None;
    }
    if d.taints.as_ref().is_some_and(Vec::is_empty) {
        d.taints = None;
    }
}

/// The API server stamps `timeAdded` on taints that lack it; carrying it over keeps a republish of
/// the same taints from counting as a change.
fn keep_taint_times(desired: &mut [Device], current: &[Device]) {
    for d in desired.iter_mut() {
        let Some(cur) = current.iter().find(|c| c.name == d.name) else {
            continue;
        };
        let (Some(taints), Some(cur_taints)) = (d.taints.as_mut(), cur.taints.as_ref()) else {
            continue;
        };
        for t in taints.iter_mut().filter(|t| t.time_added.is_none()) {
            if let Some(c) = cur_taints
                .iter()
                .find(|c| c.key == t.key && c.value == t.value && c.effect == t.effect)
            {
                t.time_added = c.time_added.clone();
            }
        }
    }
}

/// The publisher's default retry timing: 250 ms doubling up to 30 s.
pub(crate) const DEFAULT_BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(250), Duration::from_secs(30));

/// Settings of the publishing loop.
#[derive(Debug, Clone)]
pub(crate) struct PublisherConfig {
    pub node_name: String,
    pub driver_name: String,
    pub max_devices_per_slice: usize,
    pub resync: Duration,
    pub backoff: Backoff,
    /// Rolling updates: publish only while holding this lock file, so that an old and a new
    /// instance never rewrite each other's slices.
    pub exclusive: Option<std::path::PathBuf>,
}

/// Waits until this instance may publish: at once without a lock file, else when it holds the
/// lock (the other instance exited). `None` if shutdown came first.
async fn publisher_lock(
    path: Option<&std::path::Path>,
    shutdown: &mut watch::Receiver<bool>,
    state: &watch::Sender<PublishState>,
) -> Option<Option<std::fs::File>> {
    let Some(path) = path else {
        return Some(None);
    };
    let mut told = false;
    loop {
        let p = path.to_path_buf();
        let r = tokio::task::spawn_blocking(move || {
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| Error::io("create lock directory", dir, e))?;
            }
            crate::flock::try_lock(&p)
        })
        .await
        .unwrap_or(Err(Error::Task("publisher lock")));
        match r {
            Ok(Some(f)) => {
                if told {
                    tracing::info!("the other instance is gone; publishing ResourceSlices now");
                }
                return Some(Some(f));
            }
            Ok(None) if !told => {
                state.send_replace(PublishState::StandingBy);
                tracing::info!(lock = %path.display(), "another instance of this driver publishes ResourceSlices; standing by until it exits");
                told = true;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot take the publisher lock; retrying"),
        }
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return None,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {},
        }
    }
}

/// Where publishing stands; see [`crate::KubeletPlugin::watch_publish_state`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishState {
    /// No device list was published yet.
    NotStarted,
    /// Another instance of the driver holds the publisher lock (rolling update); this one
    /// publishes when it exits.
    StandingBy,
    /// The API server holds exactly the last published device list.
    Published {
        /// Devices published.
        devices: usize,
        /// The pool generation.
        generation: i64,
    },
    /// The last attempt failed and is retried with backoff: API server unreachable, the Node
    /// missing, access denied (RBAC), a conflict.
    Retrying {
        /// The error, with its causes.
        error: String,
        /// Failed attempts in a row.
        attempts: u32,
    },
    /// The API server refused the device list (e.g. 422 Invalid): it is not retried until the
    /// next publish.
    Refused {
        /// The error, with its causes.
        error: String,
    },
}

/// Runs until `shutdown` flips to true: publishes every device list sent on `devices` (nothing
/// until the first one), and repairs drift seen by the watch or the periodic resync. Shutdown
/// cancels whatever is in flight (an API call, a backoff wait) at once.
pub(crate) async fn run<A: KubeApi>(
    api: Arc<A>,
    cfg: PublisherConfig,
    mut devices: watch::Receiver<Option<Vec<Device>>>,
    mut shutdown: watch::Receiver<bool>,
    metrics: Arc<dyn Metrics>,
    state: watch::Sender<PublishState>,
) {
    let Some(_publisher_lock) =
        publisher_lock(cfg.exclusive.as_deref(), &mut shutdown, &state).await
    else {
        return;
    };
    state.send_if_modified(|s| {
        let was = *s == PublishState::StandingBy;
        if was {
            *s = PublishState::NotStarted;
        }
        was
    });
    let poke = Arc::new(Notify::new());
    let watcher = tokio::spawn(watch_loop(
        Arc::clone(&api),
        cfg.clone(),
        Arc::clone(&poke),
        shutdown.clone(),
    ));
    let node_watcher = tokio::spawn(node_watch_loop(
        Arc::clone(&api),
        cfg.clone(),
        Arc::clone(&poke),
        shutdown.clone(),
    ));
    let mut memory = Memory::default();
    let mut resync = tokio::time::interval(cfg.resync);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    'run: loop {
        if *shutdown.borrow() {
            break;
        }
        tokio::select! {
            r = shutdown.changed() => if r.is_err() { break } else { continue },
            r = devices.changed() => if r.is_err() { break },
            _ = poke.notified() => {},
            _ = resync.tick() => {},
        }
        let mut attempt = 0u32;
        loop {
            let Some(desired) = devices.borrow_and_update().clone() else {
                break;
            };
            let start = Instant::now();
            // A hung API server must not stall publishing forever: give up and retry. Shutdown
            // drops the sync, cancelling its API call.
            let sync = tokio::time::timeout(
                SYNC_TIMEOUT,
                sync_once(api.as_ref(), &cfg, &desired, &mut memory),
            );
            let result = tokio::select! {
                r = sync => r.unwrap_or_else(|_| {
                    Err(Error::ApiTransport {
                        action: "sync ResourceSlices".into(),
                        source: format!("no answer within {SYNC_TIMEOUT:?}").into(),
                    })
                }),
                _ = shutdown.wait_for(|s| *s) => break 'run,
            };
            match result {
                Ok((writes, generation)) => {
                    metrics.slice_sync(true, writes, start.elapsed());
                    if writes > 0 {
                        tracing::debug!(writes, "ResourceSlices published");
                    }
                    state.send_replace(PublishState::Published {
                        devices: desired.len(),
                        generation,
                    });
                    break;
                }
                // The driver's device list itself is unpublishable (e.g. a duplicate name, or
                // the API server's validation refuses it: 422): retrying the same list cannot
                // help, so wait for the next list (or the periodic resync).
                Err(e)
                    if matches!(e, Error::InvalidRequest(_) | Error::Config(_))
                        || e.api_code() == Some(422) =>
                {
                    metrics.slice_sync(false, 0, start.elapsed());
                    let error = crate::error::error_chain(&e);
                    tracing::error!(%error, "cannot publish these devices; waiting for a corrected device list");
                    state.send_replace(PublishState::Refused { error });
                    break;
                }
                Err(e) => {
                    metrics.slice_sync(false, 0, start.elapsed());
                    let delay = if e.is_conflict() {
                        cfg.backoff.initial
                    } else {
                        cfg.backoff.delay(attempt)
                    };
                    let error = crate::error::error_chain(&e);
                    tracing::warn!(%error, retry_in = ?delay, "publishing ResourceSlices failed");
                    attempt = attempt.saturating_add(1);
                    state.send_replace(PublishState::Retrying {
                        error,
                        attempts: attempt,
                    });
                    // A watch event (our slices changed, the Node appeared) ends the wait early:
                    // a re-created Node gets its slices at once, not after the backoff.
                    tokio::select! {
                        _ = shutdown.wait_for(|s| *s) => break 'run,
                        _ = tokio::time::sleep(delay) => {},
                        _ = poke.notified() => {},
                    }
                }
            }
        }
    }
    watcher.abort();
    node_watcher.abort();
}

/// Watches our Node and pokes the sync loop when it appears or is re-created (a new UID), so the
/// slices are republished with the right owner without waiting for a retry.
async fn node_watch_loop<A: KubeApi>(
    api: Arc<A>,
    cfg: PublisherConfig,
    poke: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut attempt = 0u32;
    let mut last_uid: Option<String> = None;
    loop {
        let result: Result<()> = async {
            let mut events = api.watch_node(&cfg.node_name).await?;
            attempt = 0;
            while let Some(ev) = events.next().await {
                match ev? {
                    crate::api::NodeEvent::Present { uid } => {
                        if last_uid.as_deref() != Some(uid.as_str()) {
                            if last_uid.is_some() {
                                tracing::info!(node = %cfg.node_name, %uid, "the Node was re-created; republishing ResourceSlices");
                            }
                            last_uid = Some(uid);
                            poke.notify_one();
                        }
                    }
                    crate::api::NodeEvent::Deleted => {
                        tracing::warn!(node = %cfg.node_name, "the Node was deleted; its ResourceSlices go with it until it is back");
                        last_uid = None;
                    }
                    crate::api::NodeEvent::Bookmark => {}
                }
            }
            Ok(())
        }
        .await;
        // A watch the server ends normally is restarted after a short pause (never a hot loop).
        let delay = match result {
            Ok(()) => cfg.backoff.initial,
            Err(e) => {
                let d = cfg.backoff.delay(attempt);
                attempt = attempt.saturating_add(1);
                tracing::debug!(error = %e, retry_in = ?d, "Node watch failed");
                d
            }
        };
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(delay) => {},
        }
    }
}

/// What the publisher remembers between syncs.
#[derive(Debug, Default)]
struct Memory {
    written: WrittenSlices,
    /// Fields the server dropped that we already warned about.
    warned: std::collections::HashSet<&'static str>,
}

impl Memory {
    /// Records the server's answer to a write of `sent`, and warns (once per field) when the
    /// server dropped something we sent.
    fn record(&mut self, sent: &ResourceSlice, stored: &ResourceSlice) {
        for (field, gate) in dropped_fields(sent, stored) {
            if self.warned.insert(field) {
                tracing::warn!(
                    field,
                    feature_gate = gate,
                    "the API server dropped {field} from the ResourceSlices we wrote: the \
                     {gate} feature gate is probably off on the API server, so the scheduler \
                     will not see it"
                );
            }
        }
        let (Some(name), Some(uid), Some(rv)) = (
            stored.metadata.name.clone(),
            stored.metadata.uid.clone(),
            stored.metadata.resource_version.clone(),
        ) else {
            return;
        };
        self.written.insert(
            name,
            Written {
                uid,
                resource_version: rv,
                sent: sent.clone(),
            },
        );
    }
}

/// Fields we sent that the stored slice lacks, with the Kubernetes 1.34 feature gate (alpha,
/// off by default) whose absence makes the API server drop them.
fn dropped_fields(
    sent: &ResourceSlice,
    stored: &ResourceSlice,
) -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    let mut note = |cond: bool, field, gate| {
        if cond && !out.iter().any(|(f, _)| *f == field) {
            out.push((field, gate));
        }
    };
    note(
        sent.spec
            .shared_counters
            .as_ref()
            .is_some_and(|c| !c.is_empty())
            && stored
                .spec
                .shared_counters
                .as_ref()
                .is_none_or(Vec::is_empty),
        "spec.sharedCounters",
        "DRAPartitionableDevices",
    );
    note(
        sent.spec.per_device_node_selection == Some(true)
            && stored.spec.per_device_node_selection != Some(true),
        "spec.perDeviceNodeSelection",
        "DRAPartitionableDevices",
    );
    let stored_devices = stored.spec.devices.as_deref().unwrap_or_default();
    for d in sent.spec.devices.iter().flatten() {
        let Some(s) = stored_devices.iter().find(|s| s.name == d.name) else {
            continue;
        };
        let lost_list = |a: &Option<Vec<String>>, b: &Option<Vec<String>>| {
            a.as_ref().is_some_and(|v| !v.is_empty()) && b.as_ref().is_none_or(Vec::is_empty)
        };
        note(
            d.taints.as_ref().is_some_and(|t| !t.is_empty())
                && s.taints.as_ref().is_none_or(Vec::is_empty),
            "devices[].taints",
            "DRADeviceTaints",
        );
        note(
            d.binds_to_node.is_some() && s.binds_to_node.is_none(),
            "devices[].bindsToNode",
            "DRADeviceBindingConditions",
        );
        note(
            lost_list(&d.binding_conditions, &s.binding_conditions),
            "devices[].bindingConditions",
            "DRADeviceBindingConditions",
        );
        note(
            lost_list(&d.binding_failure_conditions, &s.binding_failure_conditions),
            "devices[].bindingFailureConditions",
            "DRADeviceBindingConditions",
        );
        note(
            d.allow_multiple_allocations.is_some() && s.allow_multiple_allocations.is_none(),
            "devices[].allowMultipleAllocations",
            "DRAConsumableCapacity",
        );
        note(
            d.capacity.iter().flatten().any(|(k, c)| {
                c.request_policy.is_some()
                    && s.capacity
                        .as_ref()
                        .and_then(|m| m.get(k))
                        .is_none_or(|sc| sc.request_policy.is_none())
            }),
            "devices[].capacity[].requestPolicy",
            "DRAConsumableCapacity",
        );
        note(
            d.consumes_counters.as_ref().is_some_and(|c| !c.is_empty())
                && s.consumes_counters.as_ref().is_none_or(Vec::is_empty),
            "devices[].consumesCounters",
            "DRAPartitionableDevices",
        );
        note(
            (d.node_name.is_some() && s.node_name.is_none())
                || (d.node_selector.is_some() && s.node_selector.is_none())
                || (d.all_nodes.is_some() && s.all_nodes.is_none()),
            "devices[].nodeName/nodeSelector/allNodes",
            "DRAPartitionableDevices",
        );
    }
    out
}

async fn sync_once<A: KubeApi>(
    api: &A,
    cfg: &PublisherConfig,
    devices: &[Device],
    memory: &mut Memory,
) -> Result<(usize, i64)> {
    // Read every pass, not cached: a Node deleted and re-created under the same name has a new
    // UID, and slices owned by the old one would be garbage-collected as soon as we wrote them.
    let node_uid = api.get_node_uid(&cfg.node_name).await?;
    let params = PoolParams {
        node_name: cfg.node_name.clone(),
        driver_name: cfg.driver_name.clone(),
        node_uid: Some(node_uid),
        max_devices_per_slice: cfg.max_devices_per_slice,
    };
    let existing = api.list_slices(&cfg.node_name, &cfg.driver_name).await?;
    // Forget writes to slices that are gone: a slice re-created under the same name is new.
    memory.written.retain(|name, _| {
        existing
            .items
            .iter()
            .any(|s| s.metadata.name.as_deref() == Some(name))
    });
    let p = plan_with(devices, &existing.items, &params, &memory.written)?;
    let writes = p.writes();
    for d in &p.deletes {
        memory.written.remove(&d.name);
        match api.delete_slice(&d.name, &d.uid, &d.resource_version).await {
            Err(e) if e.is_not_found() => {}
            other => other?,
        }
    }
    for s in &p.updates {
        let stored = api.update_slice(s).await?;
        memory.record(s, &stored);
    }
    for s in &p.creates {
        let stored = api.create_slice(s).await?;
        memory.record(s, &stored);
    }
    Ok((writes, p.generation))
}

/// Lists and watches our slices, poking the sync loop on every change (including our own writes,
/// which then cost one list and no write).
async fn watch_loop<A: KubeApi>(
    api: Arc<A>,
    cfg: PublisherConfig,
    poke: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut attempt = 0u32;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let result: Result<()> = async {
            let list = api.list_slices(&cfg.node_name, &cfg.driver_name).await?;
            // Whatever happened while we were not watching counts as a change.
            poke.notify_one();
            let mut rv = list.resource_version;
            let mut events = api
                .watch_slices(&cfg.node_name, &cfg.driver_name, &rv)
                .await?;
            attempt = 0;
            while let Some(ev) = events.next().await {
                match ev? {
                    SliceEventKind::Changed => poke.notify_one(),
                    SliceEventKind::Bookmark(v) => rv = v,
                }
            }
            let _ = rv;
            Ok(())
        }
        .await;
        let delay = match result {
            // A normal end of a watch: start over at once.
            Ok(()) => Duration::ZERO,
            // 410 Gone: our resourceVersion is too old; list again at once.
            Err(e) if e.api_code() == Some(410) => Duration::ZERO,
            Err(e) => {
                let d = cfg.backoff.delay(attempt);
                attempt = attempt.saturating_add(1);
                tracing::debug!(error = %e, retry_in = ?d, "ResourceSlice watch failed");
                d
            }
        };
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(delay) => {},
        }
    }
}

use crate::api::SliceEvent as SliceEventKind;

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(name: &str) -> Device {
        Device {
            name: name.into(),
            ..Device::default()
        }
    }

    fn devs(n: usize) -> Vec<Device> {
        (0..n).map(|i| dev(&format!("dev{i}"))).collect()
    }

    fn params() -> PoolParams {
        PoolParams {
            node_name: "node1".into(),
            driver_name: "net.example.com".into(),
            node_uid: Some("node-uid".into()),
            max_devices_per_slice: MAX_DEVICES_PER_SLICE,
        }
    }

    /// Applies a plan the way an API server would, giving each write a new resourceVersion.
    fn apply(existing: &[ResourceSlice], p: &SlicePlan) -> Vec<ResourceSlice> {
        let mut out: Vec<ResourceSlice> = existing
            .iter()
            .filter(|s| {
                !p.deletes
                    .iter()
                    .any(|d| Some(&d.name) == s.metadata.name.as_ref())
            })
            .cloned()
            .collect();
        for u in &p.updates {
            let slot = out
                .iter_mut()
                .find(|s| s.metadata.name == u.metadata.name)
                .unwrap();
            *slot = u.clone();
            slot.metadata.resource_version =
                Some(format!("{}x", u.metadata.resource_version.clone().unwrap()));
        }
        for c in &p.creates {
            let mut c = c.clone();
            c.metadata.uid = Some(format!("uid-{}", c.metadata.name.clone().unwrap()));
            c.metadata.resource_version = Some("1".into());
            out.push(c);
        }
        out
    }

    #[test]
    fn splits_into_slices_of_at_most_128_and_converges() {
        let p = plan(&devs(300), &[], &params()).unwrap();
        assert_eq!(p.creates.len(), 3);
        assert_eq!(p.generation, 1);
        let sizes: Vec<usize> = p
            .creates
            .iter()
            .map(|s| s.spec.devices.as_ref().unwrap().len())
            .collect();
        assert_eq!(sizes, vec![128, 128, 44]);
        let names: Vec<_> = p
            .creates
            .iter()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(
            names,
            vec![
                "node1-net.example.com-0",
                "node1-net.example.com-1",
                "node1-net.example.com-2"
            ]
        );
        for s in &p.creates {
            assert_eq!(s.spec.pool.resource_slice_count, 3);
            assert_eq!(s.spec.pool.name, "node1");
            assert_eq!(s.spec.node_name.as_deref(), Some("node1"));
            let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
            assert_eq!(
                (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
                ("Node", "node1", "node-uid")
            );
        }
        let state = apply(&[], &p);
        let again = plan(&devs(300), &state, &params()).unwrap();
        assert!(again.is_empty(), "{again:?}");
    }

    #[test]
    fn one_changed_slice_is_updated_in_place_without_bumping() {
        let state = apply(&[], &plan(&devs(300), &[], &params()).unwrap());
        let mut d = devs(300);
        d[200].all_nodes = Some(false);
        let p = plan(&d, &state, &params()).unwrap();
        assert_eq!(
            (p.deletes.len(), p.updates.len(), p.creates.len()),
            (0, 1, 0)
        );
        assert_eq!(p.generation, 1);
        assert_eq!(
            p.updates[0].metadata.name.as_deref(),
            Some("node1-net.example.com-1")
        );
        // The update is based on what the server had.
        assert_eq!(p.updates[0].metadata.resource_version.as_deref(), Some("1"));
    }

    #[test]
    fn growing_bumps_generation_and_rewrites_all() {
        let state = apply(&[], &plan(&devs(128), &[], &params()).unwrap());
        let p = plan(&devs(129), &state, &params()).unwrap();
        assert_eq!(p.generation, 2);
        assert_eq!((p.updates.len(), p.creates.len()), (1, 1));
        assert!(
            p.updates
                .iter()
                .chain(&p.creates)
                .all(|s| s.spec.pool.generation == 2 && s.spec.pool.resource_slice_count == 2)
        );
        let state = apply(&state, &p);
        assert!(plan(&devs(129), &state, &params()).unwrap().is_empty());
    }

    #[test]
    fn a_generation_at_i64_max_restarts_the_pool_instead_of_overflowing() {
        let mut state = apply(&[], &plan(&devs(128), &[], &params()).unwrap());
        for s in &mut state {
            s.spec.pool.generation = i64::MAX;
        }
        // Unchanged: nothing to write, the generation stays.
        assert!(plan(&devs(128), &state, &params()).unwrap().is_empty());
        // Growing needs a bump: the pool restarts at 1, every slice rewritten with it.
        let p = plan(&devs(129), &state, &params()).unwrap();
        assert_eq!(p.generation, 1);
        assert_eq!((p.updates.len(), p.creates.len()), (1, 1));
        assert!(
            p.updates
                .iter()
                .chain(&p.creates)
                .all(|s| s.spec.pool.generation == 1)
        );
        let state = apply(&state, &p);
        assert!(plan(&devs(129), &state, &params()).unwrap().is_empty());
    }

    #[test]
    fn shrinking_deletes_stale_slices() {
        let state = apply(&[], &plan(&devs(300), &[], &params()).unwrap());
        let p = plan(&devs(10), &state, &params()).unwrap();
        let deleted: Vec<_> = p.deletes.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            deleted,
            vec!["node1-net.example.com-1", "node1-net.example.com-2"]
        );
        assert_eq!(p.deletes[0].uid, "uid-node1-net.example.com-1");
        assert_eq!(p.updates.len(), 1);
        assert_eq!(p.updates[0].spec.pool.resource_slice_count, 1);
        let state = apply(&state, &p);
        assert!(plan(&devs(10), &state, &params()).unwrap().is_empty());
    }

    #[test]
    fn old_generation_and_foreign_names_are_obsolete() {
        let mut state = apply(&[], &plan(&devs(2), &[], &params()).unwrap());
        let mut old = state[0].clone();
        old.metadata.name = Some("node1-net.example.com-07".into());
        state.push(old);
        let mut older = state[0].clone();
        older.metadata.name = Some("node1-net.example.com-5".into());
        older.spec.pool.generation = 0;
        state.push(older);
        let p = plan(&devs(2), &state, &params()).unwrap();
        let mut deleted: Vec<_> = p.deletes.iter().map(|d| d.name.clone()).collect();
        deleted.sort();
        assert_eq!(
            deleted,
            vec!["node1-net.example.com-07", "node1-net.example.com-5"]
        );
        assert!(p.updates.is_empty() && p.creates.is_empty());
    }

    #[test]
    fn empty_pool_is_one_empty_slice() {
        let p = plan(&[], &[], &params()).unwrap();
        assert_eq!(p.creates.len(), 1);
        assert_eq!(p.creates[0].spec.devices.as_deref(), Some(&[][..]));
    }

    #[test]
    fn bad_input_is_an_error_naming_it() {
        let e = plan(&[dev("a"), dev("a")], &[], &params()).unwrap_err();
        assert!(e.to_string().contains("\"a\" is listed twice"), "{e}");
        let e = plan(&[dev("")], &[], &params()).unwrap_err();
        assert!(e.to_string().contains("empty name"), "{e}");
        let mut p = params();
        p.max_devices_per_slice = 129;
        assert!(
            plan(&devs(1), &[], &p)
                .unwrap_err()
                .to_string()
                .contains("129")
        );
    }

    #[test]
    fn server_stamped_taint_times_are_not_a_change() {
        let mut d = devs(1);
        d[0].taints = Some(vec![DeviceTaint {
            key: "k".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]);
        let mut state = apply(&[], &plan(&d, &[], &params()).unwrap());
        let t = &mut state[0].spec.devices.as_mut().unwrap()[0]
            .taints
            .as_mut()
            .unwrap()[0];
        t.time_added = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Default::default(),
        ));
        assert!(plan(&d, &state, &params()).unwrap().is_empty());
    }

    #[test]
    fn empty_lists_and_maps_read_back_as_unset_are_not_a_change() {
        let mut d = devs(2);
        d[0].attributes = Some(Default::default());
        d[0].taints = Some(Vec::new());
        d[1].capacity = Some(Default::default());
        let p = plan(&d, &[], &params()).unwrap();
        // What we write is already what the server stores...
        let written = &p.creates[0].spec.devices.as_ref().unwrap()[0];
        assert!(written.attributes.is_none() && written.taints.is_none());
        // ...and the server's copy, which drops empty maps and lists, is not a change.
        let mut state = apply(&[], &p);
        for dev in state[0].spec.devices.as_mut().unwrap() {
            dev.attributes = None;
            dev.taints = None;
            dev.capacity = None;
        }
        assert!(plan(&d, &state, &params()).unwrap().is_empty());
        // A real change still is one.
        d[1].binds_to_node = Some(true);
        assert_eq!(plan(&d, &state, &params()).unwrap().updates.len(), 1);
    }

    #[test]
    fn dropped_fields_name_the_feature_gate() {
        let mut d = devs(2);
        d[0].taints = Some(vec![DeviceTaint {
            key: "k".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]);
        d[1].binds_to_node = Some(true);
        d[1].allow_multiple_allocations = Some(true);
        let sent = plan(&d, &[], &params()).unwrap().creates.remove(0);
        let mut stored = sent.clone();
        for dev in stored.spec.devices.as_mut().unwrap() {
            dev.taints = None;
            dev.binds_to_node = None;
        }
        assert_eq!(
            dropped_fields(&sent, &stored),
            vec![
                ("devices[].taints", "DRADeviceTaints"),
                ("devices[].bindsToNode", "DRADeviceBindingConditions"),
            ]
        );
        assert!(dropped_fields(&sent, &sent).is_empty());
        // Remembering the write makes the stored copy "unchanged" while it is still that object.
        let mut stored = apply(
            &[],
            &SlicePlan {
                creates: vec![stored],
                ..Default::default()
            },
        );
        let mut memory = Memory::default();
        memory.record(&sent, &stored[0]);
        assert!(
            plan_with(&d, &stored, &params(), &memory.written)
                .unwrap()
                .is_empty()
        );
        assert!(!plan(&d, &stored, &params()).unwrap().is_empty());
        // Someone else wrote it meanwhile: compared as stored again.
        stored[0].metadata.resource_version = Some("99".into());
        assert!(
            !plan_with(&d, &stored, &params(), &memory.written)
                .unwrap()
                .is_empty()
        );
    }
}
