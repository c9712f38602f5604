//! Whether a stored slice already is the one we would write, compared the way the API server
//! stores slices (empty lists and maps dropped, taint times stamped), and what we write made to
//! match that.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{Device, DeviceCapacity, DeviceTaint, ResourceSliceSpec};

/// True when `cur` already is the spec we would write for `devices`: `shape`'s driver, node and
/// pool (the pool's spec, without devices). What we never set must be unset; unset and empty
/// lists are the same to the server.
pub(super) fn spec_unchanged(
    cur: &ResourceSliceSpec,
    shape: &ResourceSliceSpec,
    devices: &[Device],
) -> bool {
    let current = cur.devices.as_deref().unwrap_or_default();
    cur.driver == shape.driver
        && cur.node_name == shape.node_name
        && cur.pool == shape.pool
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
pub(super) fn normalize(d: &mut Device) {
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
pub(super) fn keep_taint_times(desired: &mut [Device], current: &[Device]) {
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
