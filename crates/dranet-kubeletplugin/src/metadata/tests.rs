use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use dranet_util::NamedLocks;
use k8s_openapi::api::resource::v1::{DeviceAttribute, NetworkDeviceData};

use super::*;
use crate::checkpoint::{Checkpoint, CheckpointEntry, CheckpointPolicy, Phase};
use crate::driver::{ClaimRef, Prepared, PreparedDevice};

const DRIVER: &str = "net.example.com";
const UID: &str = "0a6f3c1e-5a1b-4c2d-8e3f-123456789abc";

struct Fixture {
    dir: tempfile::TempDir,
    meta: Arc<Metadata>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let meta = Self::open(dir.path());
        Fixture { dir, meta }
    }

    /// The metadata of a plugin (re)started on the checkpoint under `dir`.
    fn open(dir: &Path) -> Arc<Metadata> {
        let (checkpoint, _) =
            Checkpoint::open(dir.join("checkpoint"), CheckpointPolicy::Refuse).unwrap();
        let layout = MetadataLayout::new(&dir.join("kubelet"), DRIVER, &dir.join("cdi"));
        Metadata::new(
            layout,
            MetadataVersion::ALL.to_vec(),
            checkpoint,
            Arc::new(NamedLocks::default()),
        )
    }

    fn updater(&self) -> MetadataUpdater {
        MetadataUpdater::new(Arc::clone(&self.meta))
    }

    fn layout(&self) -> &MetadataLayout {
        &self.meta.layout
    }

    /// What the plugin does for a claim the pod names directly, whose driver prepared `devices`
    /// (request, device).
    async fn prepare(&self, c: &ClaimRef, devices: &[(&str, &str)]) -> Prepared {
        self.prepare_as(c, None, devices).await
    }

    /// The same for a claim generated from a template, the pod's name for it `pod_claim_name`
    /// (`None`: a direct claim).
    async fn prepare_as(
        &self,
        c: &ClaimRef,
        pod_claim_name: Option<&str>,
        devices: &[(&str, &str)],
    ) -> Prepared {
        let mut prepared = Prepared {
            devices: devices
                .iter()
                .map(|(r, d)| PreparedDevice {
                    requests: vec![r.to_string()],
                    pool: "node-a".into(),
                    device: d.to_string(),
                    cdi_device_ids: vec![format!("{DRIVER}/net={d}")],
                    share_id: None,
                    metadata: None,
                })
                .collect(),
            state: None,
        };
        self.meta
            .prepared(c, pod_claim_name, &mut prepared)
            .await
            .unwrap();
        self.meta
            .checkpoint
            .put(CheckpointEntry {
                claim: c.clone(),
                phase: Phase::Prepared,
                prepared: Some(prepared.clone()),
                pod_claim_name: pod_claim_name.map(str::to_string),
            })
            .await
            .unwrap();
        prepared
    }

    /// What the plugin does at unprepare.
    async fn unprepare(&self, c: &ClaimRef) {
        self.meta.unprepared(c).await.unwrap();
        self.meta.checkpoint.remove(&c.uid).await.unwrap();
    }
}

fn claim(name: &str, uid: &str) -> ClaimRef {
    ClaimRef {
        namespace: "ml".into(),
        name: name.into(),
        uid: uid.into(),
    }
}

fn string(s: &str) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(s.into()),
        ..Default::default()
    }
}

fn nic(device: &str, ifname: &str) -> MetadataDevice {
    MetadataDevice {
        network_data: Some(NetworkDeviceData {
            interface_name: Some(ifname.into()),
            ips: Some(vec!["10.0.0.2/24".into()]),
            hardware_address: Some("02:00:00:00:00:01".into()),
        }),
        ..MetadataDevice::new("node-a", device)
    }
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A metadata file as a container built for `version` reads it.
fn read_metadata(path: &Path, version: MetadataVersion) -> DeviceMetadata {
    read_stream(&std::fs::read(path).unwrap(), &[version])
        .unwrap()
        .unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn layout_names_the_kep_paths_and_ids() {
    let l = MetadataLayout::new(
        Path::new("/var/lib/kubelet"),
        "dra.net",
        Path::new("/var/run/cdi"),
    );
    assert_eq!(
        l.file("ml", "nics", "nic"),
        Path::new("/var/lib/kubelet/plugins/dra.net/dra-device-metadata/ml_nics/nic/metadata.json")
    );
    assert_eq!(
        l.container_path("nics", None, "nic"),
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/nics/nic/dra.net-metadata.json"
    );
    // A template's claim (`pod-nics-x7k2q`): the pod's name for it, not the random claim name.
    assert_eq!(
        l.container_path("pod-nics-x7k2q", Some("nics"), "nic/fast"),
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/nics/nic/dra.net-metadata.json"
    );
    assert_eq!(l.cdi_kind(), "dra.net/metadata");
    assert_eq!(l.cdi_id(UID, "nic"), format!("dra.net/metadata={UID}_nic"));
    // A subrequest's file, device and spec are its request's: the container names the request.
    assert_eq!(
        l.file("ml", "nics", "nic/fast"),
        l.file("ml", "nics", "nic")
    );
    assert_eq!(l.cdi_id(UID, "nic/fast"), l.cdi_id(UID, "nic"));
    let spec = l.spec_path(UID, "nic");
    assert_eq!(
        spec,
        Path::new(&format!("/var/run/cdi/dra.net-metadata.{UID}.nic.json"))
    );
    let name = spec.file_name().unwrap().to_str().unwrap();
    assert_eq!(
        l.parse_spec_name(name),
        Some((UID.to_string(), "nic".to_string()))
    );
    // Another driver's specs, and the driver's own CdiWriter specs, are not this layout's.
    assert_eq!(l.parse_spec_name(&format!("dra.net_pod-{UID}.json")), None);
    let other = MetadataLayout::new(Path::new("/k"), "other.net", Path::new("/var/run/cdi"));
    assert_eq!(other.parse_spec_name(name), None);
}

#[test]
fn prepare_makes_an_empty_file_a_spec_and_adds_the_id_to_the_first_device_of_each_request() {
    rt().block_on(async {
        let f = Fixture::new();
        let c = claim("nics", UID);
        let p = f
            .prepare(&c, &[("nic", "eth1"), ("nic", "eth2"), ("rdma/fast", "mlx5_0")])
            .await;
        let nic_id = f.layout().cdi_id(UID, "nic");
        let rdma_id = f.layout().cdi_id(UID, "rdma");
        assert_eq!(p.devices[0].cdi_device_ids, [format!("{DRIVER}/net=eth1"), nic_id.clone()]);
        // Once per request: a container using `nic` gets both devices' IDs, one mount.
        assert_eq!(p.devices[1].cdi_device_ids, [format!("{DRIVER}/net=eth2")]);
        assert_eq!(p.devices[2].cdi_device_ids, [format!("{DRIVER}/net=mlx5_0"), rdma_id]);
        for r in ["nic", "rdma"] {
            let file = f.layout().file("ml", "nics", r);
            let m = std::fs::metadata(&file).unwrap();
            assert_eq!(m.len(), 0, "{r}: a placeholder until the driver writes");
            assert_eq!(m.permissions().mode() & 0o777, 0o644);
        }
        let spec = read_json(&f.layout().spec_path(UID, "nic"));
        let want = serde_json::json!({
            "cdiVersion": crate::cdi::CDI_VERSION,
            "kind": "net.example.com/metadata",
            "devices": [{
                "name": format!("{UID}_nic"),
                "containerEdits": {"mounts": [{
                    "hostPath": f.layout().file("ml", "nics", "nic").display().to_string(),
                    "containerPath": "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/nics/nic/net.example.com-metadata.json",
                    "options": ["ro", "bind"],
                }]},
            }],
        });
        assert_eq!(spec, want);
        // The ID the devices carry is the spec's kind and device.
        assert_eq!(nic_id, format!("{}={}", want["kind"].as_str().unwrap(), want["devices"][0]["name"].as_str().unwrap()));
    });
}

/// A device with one attribute of each type.
fn attributed_nic() -> MetadataDevice {
    let mut dev = nic("eth1", "net1");
    dev.attributes = BTreeMap::from([
        ("net.example.com/ifName".to_string(), string("eth1")),
        (
            "net.example.com/mtu".to_string(),
            DeviceAttribute {
                int: Some(9000),
                ..Default::default()
            },
        ),
        (
            "net.example.com/sriov".to_string(),
            DeviceAttribute {
                bool: Some(false),
                ..Default::default()
            },
        ),
        (
            "net.example.com/firmware".to_string(),
            DeviceAttribute {
                version: Some("1.2.3".into()),
                ..Default::default()
            },
        ),
        (
            "resource.kubernetes.io/pcieRoot".to_string(),
            string("pci0000:00"),
        ),
    ]);
    dev
}

/// The golden object of version `api` for claim `name` (`pod_claim`: its template's entry).
fn golden_object(api: &str, name: &str, pod_claim: Option<&str>) -> String {
    let pod_claim = pod_claim
        .map(|p| format!(r#""podClaimName":"{p}","#))
        .unwrap_or_default();
    [
        r#"{"kind":"DeviceMetadata","#,
        &format!(r#""apiVersion":"{api}","#),
        &format!(r#""metadata":{{"name":"{name}","namespace":"ml","uid":"{UID}","generation":1}},"#),
        &pod_claim,
        r#""requests":[{"name":"nic","devices":[{"#,
        r#""driver":"net.example.com","pool":"node-a","name":"eth1","#,
        r#""attributes":{"#,
        r#""net.example.com/firmware":{"version":"1.2.3"},"#,
        r#""net.example.com/ifName":{"string":"eth1"},"#,
        r#""net.example.com/mtu":{"int":9000},"#,
        r#""net.example.com/sriov":{"bool":false},"#,
        r#""resource.kubernetes.io/pcieRoot":{"string":"pci0000:00"}},"#,
        r#""networkData":{"interfaceName":"net1","ips":["10.0.0.2/24"],"hardwareAddress":"02:00:00:00:00:01"}"#,
        r#"}]}]}"#,
        "\n",
    ]
    .concat()
}

#[test]
fn an_update_writes_the_documented_stream_for_a_direct_claim() {
    rt().block_on(async {
        let f = Fixture::new();
        let c = claim("nics", UID);
        f.prepare(&c, &[("nic", "eth1")]).await;
        let generation = f
            .updater()
            .update_request_metadata("ml", "nics", "nic", vec![attributed_nic()])
            .await
            .unwrap();
        assert_eq!(generation, 1);
        // v1beta1 first, then v1alpha1, one object a line, no podClaimName.
        let golden = [
            golden_object("metadata.resource.k8s.io/v1beta1", "nics", None),
            golden_object("metadata.resource.k8s.io/v1alpha1", "nics", None),
        ]
        .concat();
        let file = f.layout().file("ml", "nics", "nic");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), golden);
        // A reader of either version finds its own; one of both takes the newest.
        for v in MetadataVersion::ALL {
            let m = read_metadata(&file, v);
            assert_eq!(m.api_version, v.api_version());
            assert_eq!(m.pod_claim_name, None);
            assert_eq!(m.requests[0].devices[0], {
                let mut d = attributed_nic();
                d.driver = DRIVER.into();
                d
            });
        }
        let both = read_stream(&std::fs::read(&file).unwrap(), &MetadataVersion::ALL)
            .unwrap()
            .unwrap();
        assert_eq!(both.api_version, "metadata.resource.k8s.io/v1beta1");
    });
}

#[test]
fn a_template_claim_is_mounted_under_its_pod_claim_name_and_says_it() {
    rt().block_on(async {
        let f = Fixture::new();
        // The resourceclaim controller's name for the pod's `nics` entry.
        let c = claim("web-0-nics-x7k2q", UID);
        f.prepare_as(&c, Some("nics"), &[("nic", "eth1")]).await;
        let spec = read_json(&f.layout().spec_path(UID, "nic"));
        assert_eq!(
            spec["devices"][0]["containerEdits"]["mounts"][0]["containerPath"],
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/nics/nic/net.example.com-metadata.json"
        );
        f.updater()
            .update_request_metadata("ml", "web-0-nics-x7k2q", "nic", vec![attributed_nic()])
            .await
            .unwrap();
        let golden = [
            golden_object(
                "metadata.resource.k8s.io/v1beta1",
                "web-0-nics-x7k2q",
                Some("nics"),
            ),
            golden_object(
                "metadata.resource.k8s.io/v1alpha1",
                "web-0-nics-x7k2q",
                Some("nics"),
            ),
        ]
        .concat();
        let file = f.layout().file("ml", "web-0-nics-x7k2q", "nic");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), golden);
        let m = read_metadata(&file, MetadataVersion::V1Alpha1);
        assert_eq!(m.pod_claim_name.as_deref(), Some("nics"));
        // An annotation that is no pod claim name (edited by hand) fails the claim.
        let mut p = Prepared {
            devices: vec![PreparedDevice {
                requests: vec!["nic".into()],
                pool: "node-a".into(),
                device: "eth2".into(),
                cdi_device_ids: vec![],
                share_id: None,
                metadata: None,
            }],
            state: None,
        };
        let other = claim("other", "0a6f3c1e-0000-4000-8000-000000000002");
        let e = f
            .meta
            .prepared(&other, Some("../x"), &mut p)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("pod-claim-name"), "{e}");
    });
}

#[test]
fn only_the_versions_asked_for_are_written_newest_first() {
    rt().block_on(async {
        let f = Fixture::new();
        let c = claim("nics", UID);
        f.prepare(&c, &[("nic", "eth1")]).await;
        // A plugin restarted with v1alpha1 only.
        let layout = f.layout().clone();
        let (checkpoint, _) =
            Checkpoint::open(f.dir.path().join("checkpoint"), CheckpointPolicy::Refuse).unwrap();
        let alpha = Metadata::new(
            layout,
            MetadataVersion::parse_list(&["v1alpha1"]).unwrap(),
            checkpoint,
            Arc::new(NamedLocks::default()),
        );
        MetadataUpdater::new(alpha)
            .update_request_metadata("ml", "nics", "nic", vec![attributed_nic()])
            .await
            .unwrap();
        let file = f.layout().file("ml", "nics", "nic");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            golden_object("metadata.resource.k8s.io/v1alpha1", "nics", None)
        );
        let bytes = std::fs::read(&file).unwrap();
        assert_eq!(
            read_stream(&bytes, &[MetadataVersion::V1Beta1]).unwrap(),
            None
        );
    });
}

#[test]
fn versions_parse_newest_first_and_unknown_ones_are_named() {
    use MetadataVersion::{V1Alpha1, V1Beta1};
    assert_eq!(
        MetadataVersion::parse_list(&["metadata.resource.k8s.io/v1alpha1", "v1beta1", "v1alpha1"])
            .unwrap(),
        [V1Beta1, V1Alpha1]
    );
    let e = MetadataVersion::parse_list(&["v1alpha1", "metadata.resource.k8s.io/v2"]).unwrap_err();
    match &e {
        crate::Error::UnknownMetadataVersion { version, known } => {
            assert_eq!(version, "metadata.resource.k8s.io/v2");
            assert_eq!(known.len(), 2);
        }
        other => panic!("{other}"),
    }
    assert!(
        e.to_string().contains("\"metadata.resource.k8s.io/v2\""),
        "{e}"
    );
    let none: [&str; 0] = [];
    assert!(matches!(
        MetadataVersion::parse_list(&none),
        Err(crate::Error::Config(_))
    ));
}

#[test]
fn updates_count_generations_on_the_inode_the_mount_pinned() {
    rt().block_on(async {
        let f = Fixture::new();
        let c = claim("nics", UID);
        f.prepare(&c, &[("nic/fast", "eth1")]).await;
        let file = f.layout().file("ml", "nics", "nic");
        let inode = std::fs::metadata(&file).unwrap().ino();
        // What a container's bind mount holds: the file opened before any write.
        let pinned = std::fs::File::open(&file).unwrap();
        let u = f.updater();
        for (i, ifname) in ["a-much-longer-interface-name", "net1", "n"]
            .iter()
            .enumerate()
        {
            let g = u
                .update_request_metadata("ml", "nics", "nic", vec![nic("eth1", ifname)])
                .await
                .unwrap();
            assert_eq!(g, i64::try_from(i).unwrap() + 1);
        }
        assert_eq!(std::fs::metadata(&file).unwrap().ino(), inode);
        // Read through the pinned inode: the last write, whole (a shorter write left no tail).
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut &pinned, &mut bytes).unwrap();
        let seen = read_stream(&bytes, &MetadataVersion::ALL).unwrap().unwrap();
        assert_eq!(seen.metadata.generation, 3);
        assert_eq!(
            seen.requests[0].name, "nic/fast",
            "the subrequest allocated"
        );
        let nd = seen.requests[0].devices[0].network_data.as_ref().unwrap();
        assert_eq!(nd.interface_name.as_deref(), Some("n"));
        // The subrequest's own name reaches the same file.
        let g = u
            .update_request_metadata("ml", "nics", "nic/fast", vec![nic("eth1", "x")])
            .await
            .unwrap();
        assert_eq!(g, 4);
    });
}

#[test]
fn updates_of_what_was_not_prepared_are_refused_with_what_is_wrong() {
    rt().block_on(async {
        let f = Fixture::new();
        let c = claim("nics", UID);
        f.prepare(&c, &[("nic", "eth1")]).await;
        let u = f.updater();
        let e = u
            .update_request_metadata("ml", "other", "nic", vec![])
            .await
            .unwrap_err();
        assert!(matches!(e, MetadataError::UnknownClaim { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "claim ml/other is not prepared by this driver"
        );
        let e = u
            .update_request_metadata("ml", "nics", "gpu", vec![])
            .await
            .unwrap_err();
        assert!(matches!(e, MetadataError::UnknownRequest { .. }), "{e}");
        assert!(e.to_string().contains("its requests: nic"), "{e}");
        let e = u
            .update_request_metadata("ml", "nics", "nic", vec![nic("eth9", "net1")])
            .await
            .unwrap_err();
        assert!(matches!(e, MetadataError::UnknownDevice { .. }), "{e}");
        assert!(e.to_string().contains("net.example.com/node-a/eth9"), "{e}");
        let mut foreign = nic("eth1", "net1");
        foreign.driver = "gpu.example.com".into();
        let e = u
            .update_request_metadata("ml", "nics", "nic", vec![foreign])
            .await
            .unwrap_err();
        assert!(matches!(e, MetadataError::UnknownDevice { .. }), "{e}");
        // A claim the checkpoint holds as prepared without the metadata's ID (prepared while
        // metadata was off): its file is mounted nowhere.
        let old = claim("old", "0a6f3c1e-0000-4000-8000-000000000001");
        f.meta
            .checkpoint
            .put(CheckpointEntry {
                claim: old.clone(),
                phase: Phase::Prepared,
                prepared: Some(Prepared {
                    devices: vec![PreparedDevice {
                        requests: vec!["nic".into()],
                        pool: "node-a".into(),
                        device: "eth2".into(),
                        cdi_device_ids: vec![],
                        share_id: None,
                        metadata: None,
                    }],
                    state: None,
                }),
                pod_claim_name: None,
            })
            .await
            .unwrap();
        let e = u
            .update_request_metadata("ml", "old", "nic", vec![nic("eth2", "net1")])
            .await
            .unwrap_err();
        assert!(matches!(e, MetadataError::NotMounted { .. }), "{e}");
        // Nothing refused was written.
        assert_eq!(
            std::fs::metadata(f.layout().file("ml", "nics", "nic"))
                .unwrap()
                .len(),
            0
        );
        assert!(!f.layout().claim_dir("ml", "old").exists());
        // An unprepared claim is unknown again.
        f.unprepare(&c).await;
        let e = u
            .update_request_metadata("ml", "nics", "nic", vec![nic("eth1", "net1")])
            .await
            .unwrap_err();
        assert!(matches!(e, MetadataError::UnknownClaim { .. }), "{e}");
    });
}

#[test]
fn unprepare_removes_the_claims_files_and_specs_only() {
    rt().block_on(async {
        let f = Fixture::new();
        let (a, b) = (
            claim("a", "0a6f3c1e-0000-4000-8000-00000000000a"),
            claim("b", "0a6f3c1e-0000-4000-8000-00000000000b"),
        );
        f.prepare(&a, &[("nic", "eth1"), ("rdma", "mlx5_0")]).await;
        f.prepare(&b, &[("nic", "eth2")]).await;
        f.unprepare(&a).await;
        assert!(!f.layout().claim_dir("ml", "a").exists());
        assert!(!f.layout().spec_path(&a.uid, "nic").exists());
        assert!(!f.layout().spec_path(&a.uid, "rdma").exists());
        assert!(f.layout().file("ml", "b", "nic").exists());
        assert!(f.layout().spec_path(&b.uid, "nic").exists());
        // Again (a kubelet retry): nothing left to remove is fine.
        f.meta.unprepared(&a).await.unwrap();
    });
}

#[test]
fn a_restart_keeps_what_prepared_claims_have_and_removes_the_rest() {
    rt().block_on(async {
        let f = Fixture::new();
        let (kept, gone) = (
            claim("kept", "0a6f3c1e-0000-4000-8000-00000000000a"),
            claim("gone", "0a6f3c1e-0000-4000-8000-00000000000b"),
        );
        f.prepare(&kept, &[("nic", "eth1")]).await;
        f.prepare(&gone, &[("nic", "eth2")]).await;
        f.updater()
            .update_request_metadata("ml", "kept", "nic", vec![nic("eth1", "net1")])
            .await
            .unwrap();
        let file = f.layout().file("ml", "kept", "nic");
        let written = std::fs::read(&file).unwrap();
        let inode = std::fs::metadata(&file).unwrap().ino();
        // `gone` was unprepared while the plugin was down (its record went, its files stayed),
        // and a reboot emptied the CDI directory.
        f.meta.checkpoint.remove(&gone.uid).await.unwrap();
        std::fs::remove_file(f.layout().spec_path(&kept.uid, "nic")).unwrap();
        let interrupted = dranet_util::temp_path(&f.layout().spec_path(&gone.uid, "nic"));
        std::fs::write(&interrupted, b"{").unwrap();

        let restarted = Fixture::open(f.dir.path());
        restarted.restore();
        assert_eq!(
            std::fs::read(&file).unwrap(),
            written,
            "a running pod's file is kept"
        );
        assert_eq!(std::fs::metadata(&file).unwrap().ino(), inode);
        assert!(
            f.layout().spec_path(&kept.uid, "nic").exists(),
            "the spec is written again"
        );
        assert!(!f.layout().claim_dir("ml", "gone").exists());
        assert!(!f.layout().spec_path(&gone.uid, "nic").exists());
        assert!(!interrupted.exists());
        // The generation goes on from the file.
        let g = MetadataUpdater::new(restarted)
            .update_request_metadata("ml", "kept", "nic", vec![nic("eth1", "net1")])
            .await
            .unwrap();
        assert_eq!(g, 2);
    });
}

#[test]
fn a_claim_without_devices_of_the_driver_gets_nothing() {
    rt().block_on(async {
        let f = Fixture::new();
        let p = f.prepare(&claim("empty", UID), &[]).await;
        assert!(p.devices.is_empty());
        assert!(!f.layout().root().exists());
        assert!(!f.layout().cdi_dir().exists());
    });
}

#[test]
fn a_restart_writes_a_template_claims_spec_at_its_pod_claim_path_again() {
    rt().block_on(async {
        let f = Fixture::new();
        let c = claim("web-0-nics-x7k2q", UID);
        f.prepare_as(&c, Some("nics"), &[("nic", "eth1")]).await;
        let spec = f.layout().spec_path(UID, "nic");
        let before = std::fs::read(&spec).unwrap();
        std::fs::remove_file(&spec).unwrap();
        Fixture::open(f.dir.path()).restore();
        assert_eq!(std::fs::read(&spec).unwrap(), before);
        let g = MetadataUpdater::new(Fixture::open(f.dir.path()))
            .update_request_metadata("ml", "web-0-nics-x7k2q", "nic", vec![nic("eth1", "net1")])
            .await
            .unwrap();
        assert_eq!(g, 1);
        let m = read_metadata(
            &f.layout().file("ml", "web-0-nics-x7k2q", "nic"),
            MetadataVersion::V1Beta1,
        );
        assert_eq!(
            m.pod_claim_name.as_deref(),
            Some("nics"),
            "kept by the checkpoint"
        );
    });
}

#[test]
fn a_checkpoint_from_before_pod_claim_names_reads_as_direct_claims() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        // An entry as the plugin wrote it before it recorded pod claim names.
        let body = format!(
            r#"{{"claims":{{"{UID}":{{"claim":{{"namespace":"ml","name":"nics","uid":"{UID}"}},"phase":"prepared","prepared":{{"devices":[{{"requests":["nic"],"pool":"node-a","device":"eth1","cdi_device_ids":["{DRIVER}/net=eth1","{DRIVER}/metadata={UID}_nic"]}}],"state":null}}}}}}}}"#
        );
        let contents: crate::checkpoint::Contents = serde_json::from_str(&body).unwrap();
        assert_eq!(contents.claims[UID].pod_claim_name, None);
        std::fs::write(
            dir.path().join("checkpoint"),
            crate::checkpoint::encode(&contents),
        )
        .unwrap();
        let meta = Fixture::open(dir.path());
        meta.restore();
        let spec = read_json(&meta.layout.spec_path(UID, "nic"));
        assert_eq!(
            spec["devices"][0]["containerEdits"]["mounts"][0]["containerPath"],
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/nics/nic/net.example.com-metadata.json"
        );
        // And such an entry is written back without the field: the bytes stay as they were.
        assert!(!String::from_utf8(crate::checkpoint::encode(&contents)).unwrap().contains("pod_claim_name"));
    });
}

#[test]
fn metadata_given_at_prepare_is_in_the_file_before_prepare_returns() {
    rt().block_on(async {
        let f = Fixture::new();
        let c = claim("gpus", UID);
        let device = |request: &str, name: &str, index: Option<i64>| PreparedDevice {
            requests: vec![request.to_string()],
            pool: "node-a".into(),
            device: name.into(),
            cdi_device_ids: vec![format!("{DRIVER}/gpu={name}")],
            share_id: None,
            metadata: index.map(|i| crate::PreparedMetadata {
                attributes: BTreeMap::from([(
                    "index".to_string(),
                    DeviceAttribute {
                        int: Some(i),
                        ..Default::default()
                    },
                )]),
                network_data: None,
            }),
        };
        let mut prepared = Prepared {
            devices: vec![
                device("gpu/big", "gpu0", Some(0)),
                device("gpu/big", "gpu1", None),
                device("nic", "eth1", None),
            ],
            state: None,
        };
        f.meta
            .prepared(&c, Some("acc"), &mut prepared)
            .await
            .unwrap();
        // Taken out: the checkpoint keeps the file, not the driver's copy.
        assert!(prepared.devices.iter().all(|d| d.metadata.is_none()));
        let file = f.layout().file("ml", "gpus", "gpu");
        let m = read_metadata(&file, MetadataVersion::V1Alpha1);
        assert_eq!(m.metadata.generation, 1);
        assert_eq!(m.metadata.uid, UID);
        assert_eq!(m.pod_claim_name.as_deref(), Some("acc"));
        assert_eq!(m.requests.len(), 1);
        assert_eq!(m.requests[0].name, "gpu/big");
        let devices = &m.requests[0].devices;
        assert_eq!(
            devices
                .iter()
                .map(|d| (d.driver.as_str(), d.name.as_str(), d.attributes.len()))
                .collect::<Vec<_>>(),
            [(DRIVER, "gpu0", 1), (DRIVER, "gpu1", 0)]
        );
        assert_eq!(devices[0].attributes["index"].int, Some(0));
        // A request no device of which had metadata: the empty file, for the updater.
        let nic = f.layout().file("ml", "gpus", "nic");
        assert_eq!(std::fs::read(&nic).unwrap(), b"");
    });
}
