//! Each cloud's provider against a fake of its metadata service that answers as the real one
//! does (paths, required headers, tokens), serving the documents saved under `testdata/`; and the
//! same documents read as `--<cloud>-metadata-file` give the same provider.

use crate::support::{detector, doc, function, sysfs};
use dranet_cloud::PathMap;
use dranet_cloud::aws::{self, AwsInstance};
use dranet_cloud::detect::{Hint, Provider};
use dranet_cloud::dmi::Cloud;
use dranet_cloud::fake::{FakeServer, Reply, clouds};
use dranet_cloud::{alibaba, gce, oke};
use dranet_core::{AttributeValue, CloudProvider, DeviceIdentifiers};

fn s(v: &str) -> AttributeValue {
    AttributeValue::String(v.into())
}

fn mac(m: &str) -> DeviceIdentifiers {
    DeviceIdentifiers {
        name: Some("nic".into()),
        mac: Some(m.into()),
        ..DeviceIdentifiers::default()
    }
}

fn pci(a: &str) -> DeviceIdentifiers {
    DeviceIdentifiers {
        pci_address: Some(a.parse().unwrap()),
        ..DeviceIdentifiers::default()
    }
}

#[tokio::test]
async fn gce_machine_type_placement_and_networks_by_mac() {
    let text = doc("gce/a3-ultragpu-8g-instance.json");
    let fake = FakeServer::start(clouds::gce(&text)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path(), Some(Some(Cloud::Gce)), |_| Ok(()));
    let d = detector(&fake.endpoint, &sys, Hint::Auto).detect().await;
    assert!(d.how.contains("DMI says gce"), "{}", d.how);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let Some(Provider::Gce(g)) = d.provider else {
        panic!("{:?}", d.provider)
    };
    let n = g.node_attributes();
    assert_eq!(n[gce::attr::MACHINE_TYPE], s("a3-ultragpu-8g"));
    assert_eq!(n[gce::attr::BLOCK], s("c9f0a2e71b5d4f36"));
    assert_eq!(n[gce::attr::SUB_BLOCK], s("7e1d0b3a"));
    assert_eq!(n[gce::attr::HOST], s("5f2c8a94e6d1"));
    let fe = g.device_attributes(&mac("B8:3F:D2:3A:20:00"));
    assert_eq!(fe[gce::attr::NETWORK_NAME], s("default"));
    assert_eq!(
        fe[gce::attr::NETWORK_PROJECT_NUMBER],
        AttributeValue::Int(628944397724)
    );
    assert_eq!(fe[gce::attr::IP_ALIASES], s("10.24.3.0/24,10.24.4.0/24"));
    let rdma = g.device_attributes(&mac("b8:3f:d2:3a:10:03"));
    assert_eq!(rdma[gce::attr::NETWORK_NAME], s("a3u-rdma"));
    assert!(!rdma.contains_key(gce::attr::IP_ALIASES));
    assert!(g.device_attributes(&mac("aa:bb:cc:dd:ee:ff")).is_empty());
    assert!(
        g.device_attributes(&DeviceIdentifiers::default())
            .is_empty()
    );
    let seen = fake.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen.iter()
            .all(|r| r.method == "GET" && r.header("Metadata-Flavor") == Some("Google")),
        "{seen:?}"
    );
    let (file, _) = gce::parse_instance_document(text.as_bytes()).unwrap();
    assert_eq!(file, g, "the saved document gives what the server gave");
}

#[tokio::test]
async fn gce_without_physical_host_has_no_placement() {
    let mut v: serde_json::Value =
        serde_json::from_str(&doc("gce/a3-ultragpu-8g-instance.json")).unwrap();
    v["attributes"] = serde_json::json!({});
    let fake = FakeServer::start(clouds::gce(&v.to_string()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path(), Some(Some(Cloud::Gce)), |_| Ok(()));
    let d = detector(&fake.endpoint, &sys, Hint::Auto).detect().await;
    let Some(Provider::Gce(g)) = d.provider else {
        panic!("{:?}", d.warnings)
    };
    assert!(
        d.warnings.is_empty(),
        "a 404 is no placement, not a warning"
    );
    assert_eq!(g.node_attributes().len(), 1);
}

/// An AWS node: an EFA function, an ENA function, and IMDS serving `file`.
async fn aws_on(file: &str, efa: &str) -> (FakeServer, tempfile::TempDir, AwsInstance) {
    let text = doc(file);
    let fake = FakeServer::start(clouds::aws(&text)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path(), Some(Some(Cloud::Aws)), |b| {
        function(b, efa, "efa")?;
        function(b, "0000:20:1c.0", "ena").map(|_| ())
    });
    let d = detector(&fake.endpoint, &sys, Hint::Auto).detect().await;
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let Some(Provider::Aws(a)) = d.provider else {
        panic!("{:?}", d.provider)
    };
    let (file, _) =
        AwsInstance::from_paths(&PathMap::parse("file", text.as_bytes()).unwrap(), &sys).unwrap();
    assert_eq!(file, a, "the saved answers give what IMDS gave");
    (fake, dir, a)
}

#[tokio::test]
async fn aws_instance_type_placement_group_network_cards_and_efa() {
    let (fake, _dir, a) = aws_on("aws/p5-48xlarge.json", "0000:10:1c.0").await;
    let n = a.node_attributes();
    assert_eq!(n[aws::attr::INSTANCE_TYPE], s("p5.48xlarge"));
    assert_eq!(n[aws::attr::PLACEMENT_GROUP_NAME], s("p5-training-cluster"));
    assert_eq!(
        a.device_attributes(&mac("b8:3f:d2:3a:10:02"))[aws::attr::NETWORK_CARD_INDEX],
        AttributeValue::Int(8)
    );
    let efa = a.device_attributes(&pci("0000:10:1c.0"));
    assert_eq!(efa[aws::attr::EFA], AttributeValue::Bool(true));
    assert_eq!(efa.len(), 1, "no Neuron groups on a p5: {efa:?}");
    assert!(a.device_attributes(&pci("0000:20:1c.0")).is_empty());
    // IMDSv2: a token first, then every request carries it.
    let seen = fake.seen();
    assert_eq!(seen[0].method, "PUT");
    assert_eq!(seen[0].path(), aws::TOKEN_PATH);
    assert!(seen[0].header(aws::TOKEN_TTL_HEADER).is_some());
    assert!(
        seen[1..]
            .iter()
            .all(|r| r.method == "GET" && r.header(aws::TOKEN_HEADER) == Some(clouds::FAKE_TOKEN)),
        "{seen:?}"
    );
}

#[tokio::test]
async fn aws_neuron_efa_functions_carry_upstreams_device_groups() {
    let (_fake, _dir, a) = aws_on("aws/trn2-48xlarge.json", "0000:c9:00.0").await;
    let efa = a.device_attributes(&pci("0000:c9:00.0"));
    assert_eq!(efa[aws::attr::EFA], AttributeValue::Bool(true));
    assert_eq!(efa[aws::neuron::attr::DEVICE_GROUP_1], s("0000:c9:00.0"));
    assert_eq!(
        efa[aws::neuron::attr::DEVICE_GROUP_4],
        s("13713e551cd37c19")
    );
    assert_eq!(
        efa[aws::neuron::attr::DEVICE_GROUP_16],
        s("821d14afaf11327d")
    );
    assert_eq!(
        a.node_attributes()[aws::attr::PLACEMENT_GROUP_NAME],
        s("trn2-ultraserver-7")
    );
}

#[tokio::test]
async fn aws_without_imdsv2_is_not_read_through_imdsv1() {
    // A service that refuses tokens (no IMDSv2) but would answer plain GETs.
    let fake = FakeServer::start(|r, _| match r.method.as_str() {
        "PUT" => Reply::Json(403, "{}".into()),
        _ => Reply::Json(200, r#"{"instanceType": "p5.48xlarge"}"#.into()),
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path(), Some(Some(Cloud::Aws)), |_| Ok(()));
    let d = detector(&fake.endpoint, &sys, Hint::Auto).detect().await;
    assert!(d.provider.is_none());
    assert!(d.warnings[0].contains("HTTP 403"), "{:?}", d.warnings);
    assert!(
        fake.seen().iter().all(|r| r.method == "PUT"),
        "no GET without a token"
    );
}

#[tokio::test]
async fn oke_topology_from_the_host_document() {
    let text = doc("oke/bm-gpu-gb200-4-host.json");
    let fake = FakeServer::start(clouds::oke(&text)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path(), Some(Some(Cloud::Oke)), |_| Ok(()));
    let d = detector(&fake.endpoint, &sys, Hint::Auto).detect().await;
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let Some(Provider::Oke(o)) = d.provider else {
        panic!("{:?}", d.provider)
    };
    let n = o.node_attributes();
    assert_eq!(n.len(), 5, "{n:?}");
    let unique = |c: char| s(&format!("anuwcljt{}", c.to_string().repeat(52)));
    assert_eq!(n[oke::attr::HPC_ISLAND_ID], unique('a'));
    assert_eq!(n[oke::attr::NETWORK_BLOCK_ID], unique('b'));
    assert_eq!(n[oke::attr::LOCAL_BLOCK_ID], unique('c'));
    assert_eq!(n[oke::attr::GPU_MEMORY_FABRIC_ID], unique('f'));
    assert_eq!(n[oke::attr::RACK_ID], s("3c41be92f07d8a15"));
    assert!(
        fake.seen()
            .iter()
            .all(|r| r.header("Authorization") == Some("Bearer Oracle"))
    );
    assert_eq!(oke::parse_host_document(text.as_bytes()).unwrap().0, o);
    // A shape without RDMA topology data: the top-level ids only.
    let (mi, w) =
        oke::parse_host_document(doc("oke/bm-gpu-mi300x-8-host.json").as_bytes()).unwrap();
    assert!(w.is_empty());
    let n = mi.node_attributes();
    assert_eq!(n.len(), 2, "{n:?}");
    assert_eq!(n[oke::attr::NETWORK_BLOCK_ID], s("a71c09e3d25b84f6"));
}

#[tokio::test]
async fn alibaba_instance_type_and_erdma_functions() {
    let text = doc("alibaba/ebmgn8v-48xlarge.json");
    let fake = FakeServer::start(clouds::alibaba(&text)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path(), Some(Some(Cloud::Alibaba)), |b| {
        let f = function(b, "0000:00:05.0", "erdma")?;
        b.rdma(&f, "erdma_0", &["Ethernet"])?;
        function(b, "0000:00:06.0", "virtio-pci").map(|_| ())
    });
    let d = detector(&fake.endpoint, &sys, Hint::Auto).detect().await;
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let Some(Provider::Alibaba(a)) = d.provider else {
        panic!("{:?}", d.provider)
    };
    assert_eq!(
        a.node_attributes()[alibaba::attr::INSTANCE_TYPE],
        s("ecs.ebmgn8v.48xlarge")
    );
    assert_eq!(
        a.device_attributes(&pci("0000:00:05.0"))[alibaba::attr::ERDMA],
        AttributeValue::Bool(true)
    );
    assert!(a.device_attributes(&pci("0000:00:06.0")).is_empty());
    let seen = fake.seen();
    assert_eq!(seen[0].method, "PUT");
    assert!(seen[0].header(alibaba::TOKEN_TTL_HEADER).is_some());
    assert_eq!(
        seen[1].header(alibaba::TOKEN_HEADER),
        Some(clouds::FAKE_TOKEN)
    );
    let file = alibaba::AlibabaInstance::from_paths(
        &PathMap::parse("file", text.as_bytes()).unwrap(),
        &sys,
    )
    .unwrap();
    assert_eq!(file, a);
    // IMDS down: a warning, and the eRDMA devices are still known from sysfs (as upstream).
    let down = FakeServer::start(|_, _| Reply::Json(404, "{}".into()))
        .await
        .unwrap();
    let d = detector(&down.endpoint, &sys, Hint::Auto).detect().await;
    let Some(Provider::Alibaba(a)) = d.provider else {
        panic!("{:?}", d.provider)
    };
    assert!(a.instance_type.is_empty());
    assert_eq!(a.erdma.len(), 1);
    assert!(d.warnings[0].contains("HTTP 404"), "{:?}", d.warnings);
}
