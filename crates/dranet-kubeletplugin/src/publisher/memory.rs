//! What the publisher remembers between syncs: what it wrote to each slice, so that the server's
//! normalised copy is not mistaken for a change, and which dropped fields it warned about.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::resource::v1::ResourceSlice;

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
pub(crate) type WrittenSlices = HashMap<String, Written>;

/// What we sent for `stored`, if the server still holds exactly the object that write made.
pub(super) fn our_copy<'a>(
    stored: &ResourceSlice,
    written: &'a WrittenSlices,
) -> Option<&'a ResourceSlice> {
    let w = written.get(stored.metadata.name.as_deref()?)?;
    (stored.metadata.uid.as_deref() == Some(w.uid.as_str())
        && stored.metadata.resource_version.as_deref() == Some(w.resource_version.as_str()))
    .then_some(&w.sent)
}

/// What the publisher remembers between syncs.
#[derive(Debug, Default)]
pub(super) struct Memory {
    pub(super) written: WrittenSlices,
    /// Fields the server dropped that we already warned about.
    warned: HashSet<&'static str>,
}

impl Memory {
    /// Records the server's answer to a write of `sent`, and warns (once per field) when the
    /// server dropped something we sent.
    pub(super) fn record(&mut self, sent: &ResourceSlice, stored: &ResourceSlice) {
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
pub(super) fn dropped_fields(
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
