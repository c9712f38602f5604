//! A slice as the real API server stores it, and what it refuses to store.

use dranet_core::slice::{MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS, SliceDevice};
use k8s_openapi::api::resource::v1::ResourceSlice;
use serde_json::Value;

/// What the real server does to a slice before storing it: fields of feature gates that are off
/// are dropped, quantities are made canonical, empty lists and maps are dropped (Go's
/// `omitempty`), and taints without `timeAdded` get the current time. An unparsable quantity is
/// an error, as it is for the real server's decoder.
pub(super) fn as_stored(
    slice: &mut ResourceSlice,
    gates: &std::collections::HashSet<String>,
) -> std::result::Result<(), String> {
    let on = |g: &str| gates.contains(g);
    let canonical = |q: &mut k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
        dranet_core::Quantity::canonical(&q.0)
            .map(std::borrow::Cow::into_owned)
            .map(|c| q.0 = c)
            .map_err(|_| format!("quantities must match the regular expression: {:?}", q.0))
    };
    if !on("DRAPartitionableDevices") {
        slice.spec.shared_counters = None;
        slice.spec.per_device_node_selection = None;
    }
    for set in slice.spec.shared_counters.iter_mut().flatten() {
        for c in set.counters.values_mut() {
            canonical(&mut c.value)?;
        }
    }
    for d in slice.spec.devices.iter_mut().flatten() {
        if !on("DRADeviceTaints") {
            d.taints = None;
        }
        if !on("DRADeviceBindingConditions") {
            d.binds_to_node = None;
            d.binding_conditions = None;
            d.binding_failure_conditions = None;
        }
        if !on("DRAConsumableCapacity") {
            d.allow_multiple_allocations = None;
            for c in d.capacity.iter_mut().flat_map(|m| m.values_mut()) {
                c.request_policy = None;
            }
        }
        if !on("DRAPartitionableDevices") {
            d.consumes_counters = None;
            d.node_name = None;
            d.node_selector = None;
            d.all_nodes = None;
        }
        for c in d.capacity.iter_mut().flat_map(|m| m.values_mut()) {
            canonical(&mut c.value)?;
        }
        for cc in d.consumes_counters.iter_mut().flatten() {
            for c in cc.counters.values_mut() {
                canonical(&mut c.value)?;
            }
        }
    }
    as_stored_shape(slice);
    Ok(())
}

fn as_stored_shape(slice: &mut ResourceSlice) {
    fn prune(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.values_mut().for_each(prune);
                m.retain(|_, x| match x {
                    Value::Array(a) => !a.is_empty(),
                    Value::Object(o) => !o.is_empty(),
                    _ => true,
                });
            }
            Value::Array(a) => a.iter_mut().for_each(prune),
            _ => {}
        }
    }
    for d in slice.spec.devices.iter_mut().flatten() {
        if let Ok(mut v) = serde_json::to_value(&*d) {
            prune(&mut v);
            if let Ok(pruned) = serde_json::from_value(v) {
                *d = pruned;
            }
        }
        for t in d.taints.iter_mut().flatten() {
            if t.time_added.is_none() {
                t.time_added = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                ));
            }
        }
    }
}

/// What the real server validates and the plugin could get wrong.
pub(super) fn validate(slice: &ResourceSlice) -> std::result::Result<(), String> {
    let s = &slice.spec;
    let devices = s.devices.as_deref().unwrap_or_default();
    // The 1.35+ API server's limits (this fake keeps taints, as 1.35+ does).
    let max = if devices.iter().any(SliceDevice::has_taints_or_counters) {
        MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS
    } else {
        crate::publisher::MAX_DEVICES_PER_SLICE
    };
    if devices.len() > max {
        return Err(format!(
            "spec.devices: Too many: {}: must have at most {max} items",
            devices.len()
        ));
    }
    if s.driver.is_empty() {
        return Err("spec.driver: Required value".into());
    }
    if s.pool.name.is_empty() {
        return Err("spec.pool.name: Required value".into());
    }
    if s.pool.resource_slice_count < 1 {
        return Err(
            "spec.pool.resourceSliceCount: Invalid value: must be greater than zero".into(),
        );
    }
    if s.pool.generation < 0 {
        return Err(
            "spec.pool.generation: Invalid value: must be greater than or equal to 0".into(),
        );
    }
    let node_set = s.node_name.as_deref().is_some_and(|n| !n.is_empty());
    if !node_set
        && s.node_selector.is_none()
        && s.all_nodes != Some(true)
        && s.per_device_node_selection != Some(true)
    {
        return Err("spec: Required value: exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection".into());
    }
    let mut names = std::collections::HashSet::new();
    for d in devices {
        if !names.insert(d.name.as_str()) {
            return Err(format!("spec.devices: Duplicate value: {:?}", d.name));
        }
    }
    let name = slice.metadata.name.as_deref().unwrap_or_default();
    if name.len() > 253 {
        return Err("metadata.name: must be no more than 253 characters".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::resource::v1::{Device, DeviceTaint, ResourceSlice};

    fn slice(devices: usize, tainted: Option<usize>) -> ResourceSlice {
        let mut s = dranet_core::slice::NodePool::new("node1", "dra.net").slice(
            0,
            1,
            1,
            (0..devices)
                .map(|i| Device {
                    name: format!("dev{i}"),
                    ..Device::default()
                })
                .collect(),
        );
        if let Some(i) = tainted {
            s.spec.devices.as_mut().unwrap()[i].taints = Some(vec![DeviceTaint {
                key: "dra.net/unhealthy".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]);
        }
        s
    }

    #[test]
    fn device_limits_are_the_api_servers() {
        assert!(super::validate(&slice(128, None)).is_ok());
        assert_eq!(
            super::validate(&slice(129, None)).unwrap_err(),
            "spec.devices: Too many: 129: must have at most 128 items"
        );
        assert!(super::validate(&slice(64, Some(63))).is_ok());
        // What the 1.36.3 API server answers a 65-device slice with one taint.
        assert_eq!(
            super::validate(&slice(65, Some(0))).unwrap_err(),
            "spec.devices: Too many: 65: must have at most 64 items"
        );
    }
}
