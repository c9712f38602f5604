//! Device metadata through the kubelet's calls: the CDI ID in NodePrepareResources' answer (and
//! in a retry's, answered from the checkpoint), the file filled by the driver's updater, gone
//! after NodeUnprepareResources; off by default.

use dranet_kubeletplugin::metadata::MetadataDevice;

use crate::common::*;

#[tokio::test]
async fn a_prepared_request_gets_a_mounted_file_that_the_driver_fills_and_unprepare_removes() {
    let cdi = tempfile::tempdir().unwrap();
    let cdi_dir = cdi.path().to_path_buf();
    let h = Harness::start_with(|b| b.device_metadata(cdi_dir)).await;
    h.api.put_claim(claim(
        "m1",
        vec![
            result(DRIVER, "eth1", "nic"),
            result(DRIVER, "eth2", "nic"),
            result("gpu.other.com", "gpu0", "gpu"),
        ],
    ));
    let id = format!("{DRIVER}/metadata=uid-m1_nic");
    for _ in 0..2 {
        // The second time is a kubelet retry, answered from the checkpoint: the same IDs.
        let resp = h.kubelet.prepare(&[claim_ref("m1")]).await.unwrap();
        let entry = &resp.claims["uid-m1"];
        assert_eq!(entry.error, "");
        for (d, dev) in entry.devices.iter().zip(["eth1", "eth2"]) {
            assert_eq!(
                d.cdi_device_ids,
                [format!("{DRIVER}/net={dev}"), id.clone()]
            );
        }
    }
    let updater = h.plugin().metadata_updater().expect("metadata is on");
    let file = updater.layout().file("default", "m1", "nic");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"",
        "empty until the driver writes"
    );
    let spec = updater.layout().spec_path("uid-m1", "nic");
    assert!(
        spec.starts_with(cdi.path()) && spec.exists(),
        "{}",
        spec.display()
    );
    assert!(!updater.layout().spec_path("uid-m1", "gpu").exists());

    let devices = vec![
        MetadataDevice::new(NODE, "eth1"),
        MetadataDevice::new(NODE, "eth2"),
    ];
    let g = updater
        .update_request_metadata("default", "m1", "nic", devices)
        .await
        .unwrap();
    assert_eq!(g, 1);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(v["metadata"]["uid"], "uid-m1");
    assert_eq!(v["requests"][0]["devices"][1]["name"], "eth2");
    assert_eq!(v["requests"][0]["devices"][1]["driver"], DRIVER);

    let resp = h.kubelet.unprepare(&[claim_ref("m1")]).await.unwrap();
    assert_eq!(resp.claims["uid-m1"].error, "");
    assert!(!updater.layout().claim_dir("default", "m1").exists());
    assert!(!spec.exists());
    let e = updater
        .update_request_metadata("default", "m1", "nic", vec![])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not prepared"), "{e}");
}

#[tokio::test]
async fn without_the_option_nothing_is_written_or_added() {
    let h = Harness::start().await;
    h.api
        .put_claim(claim("m2", vec![result(DRIVER, "eth1", "nic")]));
    let resp = h.kubelet.prepare(&[claim_ref("m2")]).await.unwrap();
    let entry = &resp.claims["uid-m2"];
    assert_eq!(
        entry.devices[0].cdi_device_ids,
        [format!("{DRIVER}/net=eth1")]
    );
    assert!(h.plugin().metadata_updater().is_none());
    let root = h
        .dir
        .path()
        .join("plugins")
        .join(DRIVER)
        .join("dra-device-metadata");
    assert!(!root.exists());
}
