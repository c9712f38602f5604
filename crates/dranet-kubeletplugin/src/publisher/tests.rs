//! The planner and the publisher's memory, against slices as an API server would store them.

use k8s_openapi::api::resource::v1::{Device, DeviceTaint, ResourceSlice};

use super::memory::{Memory, dropped_fields};
use super::plan::plan_with;
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

#[test]
fn a_tainted_device_keeps_its_slice_within_what_the_api_server_takes() {
    // 65 devices, one link down: the 1.35+ API server takes at most 64 devices in a slice
    // in which one has taints (one slice of 65 would be refused, and the node's devices lost).
    let mut d = devs(65);
    d[40].taints = Some(vec![DeviceTaint {
        key: "dra.net/unhealthy".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    }]);
    let sizes = |p: &SlicePlan| -> Vec<usize> {
        p.creates
            .iter()
            .chain(&p.updates)
            .map(|s| s.spec.devices.as_ref().map_or(0, Vec::len))
            .collect()
    };
    let tainted = plan(&d, &[], &params()).unwrap();
    assert_eq!(sizes(&tainted), [64, 1]);
    let state = apply(&[], &tainted);
    assert!(plan(&d, &state, &params()).unwrap().is_empty());
    // The carrier back: one slice again, the second one deleted.
    let healed = plan(&devs(65), &state, &params()).unwrap();
    assert_eq!(sizes(&healed), [65]);
    assert_eq!(healed.deletes.len(), 1);
}
