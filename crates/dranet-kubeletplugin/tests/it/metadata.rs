//! Device metadata through the kubelet's calls: the CDI ID in NodePrepareResources' answer (and
//! in a retry's, answered from the checkpoint), the file filled by the driver's updater, gone
//! after NodeUnprepareResources; a template's claim mounted under its pod claim name; off by
//! default; unknown versions refused.

use dranet_kubeletplugin::fake::FakeApiServer;
use dranet_kubeletplugin::metadata::{
    MetadataDevice, MetadataVersion, POD_CLAIM_NAME_ANNOTATION, read_stream,
};

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
        // The request's ID on its first device only: one mount per container.
        assert_eq!(
            entry.devices[0].cdi_device_ids,
            [format!("{DRIVER}/net=eth1"), id.clone()]
        );
        assert_eq!(
            entry.devices[1].cdi_device_ids,
            [format!("{DRIVER}/net=eth2")]
        );
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
    let bytes = std::fs::read(&file).unwrap();
    for v in MetadataVersion::ALL {
        let m = read_stream(&bytes, &[v])
            .unwrap()
            .expect("every version is written");
        assert_eq!(m.metadata.uid, "uid-m1");
        assert_eq!(m.pod_claim_name, None);
        assert_eq!(m.requests[0].devices[1].name, "eth2");
        assert_eq!(m.requests[0].devices[1].driver, DRIVER);
    }

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

#[tokio::test]
async fn a_template_claim_is_mounted_under_the_pod_claim_name_its_annotation_gives() {
    let cdi = tempfile::tempdir().unwrap();
    let cdi_dir = cdi.path().to_path_buf();
    let h = Harness::start_with(|b| b.device_metadata(cdi_dir)).await;
    let mut c = claim("m3", vec![result(DRIVER, "eth1", "nic")]);
    c.metadata.annotations = Some(
        [(POD_CLAIM_NAME_ANNOTATION.to_string(), "nics".to_string())]
            .into_iter()
            .collect(),
    );
    h.api.put_claim(c);
    let resp = h.kubelet.prepare(&[claim_ref("m3")]).await.unwrap();
    assert_eq!(resp.claims["uid-m3"].error, "");
    let updater = h.plugin().metadata_updater().expect("metadata is on");
    let spec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(updater.layout().spec_path("uid-m3", "nic")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        spec["devices"][0]["containerEdits"]["mounts"][0]["containerPath"],
        format!(
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/nics/nic/{DRIVER}-metadata.json"
        )
    );
    updater
        .update_request_metadata(
            "default",
            "m3",
            "nic",
            vec![MetadataDevice::new(NODE, "eth1")],
        )
        .await
        .unwrap();
    let bytes = std::fs::read(updater.layout().file("default", "m3", "nic")).unwrap();
    let m = read_stream(&bytes, &[MetadataVersion::V1Alpha1])
        .unwrap()
        .unwrap();
    assert_eq!(m.pod_claim_name.as_deref(), Some("nics"));
}

#[tokio::test]
async fn an_unknown_metadata_version_fails_the_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApiServer::start().await.unwrap();
    api.add_node(NODE);
    let started = builder_for(RecordingDriver::default(), &api, dir.path())
        .device_metadata(dir.path().join("cdi"))
        .metadata_versions(["v1alpha1", "metadata.resource.k8s.io/v9"])
        .start()
        .await;
    let Err(e) = started else {
        panic!("started with an unknown version")
    };
    assert!(
        matches!(&e, dranet_kubeletplugin::Error::UnknownMetadataVersion { version, .. } if version == "metadata.resource.k8s.io/v9"),
        "{e}"
    );
}
