//! What `dranet inventory -o json` previews is what the kubelet plugin publishes: the same slice
//! name, pool and devices.

use std::process::Command;

use dranet_kubeletplugin::publisher::{MAX_DEVICES_PER_SLICE, PoolParams, plan};
use k8s_openapi::api::resource::v1::ResourceSlice;

#[test]
fn inventory_preview_matches_the_published_slice() {
    let out = Command::new(env!("CARGO_BIN_EXE_dranet"))
        .args([
            "inventory",
            "--sysfs",
            "testdata/nodes/sriov-64vf/sys",
            "--node-name",
            "node-7",
            "-o",
            "json",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let preview: ResourceSlice = serde_json::from_slice(&out.stdout).unwrap();
    let devices = preview.spec.devices.clone().unwrap();
    assert!(devices.len() > 64, "the fixture has a PF and 64 VFs");

    let params = PoolParams {
        node_name: "node-7".into(),
        driver_name: dranet_core::attributes::DRIVER_NAME.into(),
        node_uid: Some("uid-of-node-7".into()),
        max_devices_per_slice: MAX_DEVICES_PER_SLICE,
    };
    let p = plan(&devices, &[], &params).unwrap();
    assert_eq!(p.creates.len(), 1);
    let published = &p.creates[0];
    assert_eq!(published.metadata.name, preview.metadata.name);
    assert_eq!(published.spec.driver, preview.spec.driver);
    assert_eq!(published.spec.node_name, preview.spec.node_name);
    assert_eq!(published.spec.pool.name, preview.spec.pool.name);
    assert_eq!(
        published.spec.pool.resource_slice_count,
        preview.spec.pool.resource_slice_count
    );
    assert_eq!(published.spec.devices.as_ref(), Some(&devices));
}
