//! What `dranet inventory -o json` previews is what the kubelet plugin publishes: the same slice
//! names, pool and devices, cut as the daemon cuts them.

use std::process::Command;

use dranet_kubeletplugin::publisher::{PoolParams, plan};
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
    // A List of the pool's slices: 65 devices, 64 a slice (dranet's, the API's limit once one of
    // them is tainted).
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let previews: Vec<ResourceSlice> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| serde_json::from_value(v.clone()).unwrap())
        .collect();
    let devices: Vec<_> = previews
        .iter()
        .flat_map(|s| s.spec.devices.clone().unwrap())
        .collect();
    assert_eq!(devices.len(), 65, "the fixture has a PF and 64 VFs");

    let params = PoolParams {
        node_name: "node-7".into(),
        driver_name: dranet_core::attributes::DRIVER_NAME.into(),
        node_uid: Some("uid-of-node-7".into()),
        max_devices_per_slice: dranet_driver::publish::DEVICES_PER_SLICE,
    };
    let p = plan(&devices, &[], &params).unwrap();
    assert_eq!(p.creates.len(), previews.len());
    assert_eq!(previews.len(), 2);
    for (published, preview) in p.creates.iter().zip(&previews) {
        assert_eq!(published.metadata.name, preview.metadata.name);
        assert_eq!(published.spec.driver, preview.spec.driver);
        assert_eq!(published.spec.node_name, preview.spec.node_name);
        assert_eq!(published.spec.pool.name, preview.spec.pool.name);
        assert_eq!(
            published.spec.pool.resource_slice_count,
            preview.spec.pool.resource_slice_count
        );
        assert_eq!(published.spec.devices, preview.spec.devices);
    }
}
