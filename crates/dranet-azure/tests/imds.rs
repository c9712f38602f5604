//! The IMDS client, detection and the Azure provider against a fake IMDS on 127.0.0.1 serving
//! documents recorded from Microsoft's documented schema.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dranet_azure::fake::{FakeImds, Reply};
use dranet_azure::{Detection, Detector, Hint, ImdsClient, RetryPolicy, attr};
use dranet_core::{AttributeValue, CloudProvider, DeviceIdentifiers};

fn doc(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/imds")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

fn fixture_sys(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/nodes")
        .join(name)
        .join("sys")
}

fn no_dmi() -> PathBuf {
    fixture_sys("edge-cases")
}

fn detector(endpoint: &str, sys: PathBuf, hint: Hint) -> Detector {
    let mut d = Detector::new(
        ImdsClient {
            endpoint: endpoint.into(),
            request_timeout: Duration::from_millis(400),
            ..ImdsClient::default()
        },
        sys,
        hint,
    );
    d.retry = RetryPolicy {
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        budget: Duration::from_secs(2),
    };
    d
}

/// Detection on the fixture node `fixture` with IMDS serving `testdata/imds/<kind>-*.json`.
async fn detect_on(kind: &str, fixture: &str) -> (FakeImds, Detection) {
    let imds = FakeImds::start(FakeImds::documents(
        doc(&format!("{kind}-compute.json")),
        doc(&format!("{kind}-network.json")),
    ))
    .await
    .unwrap();
    let d = detector(&imds.endpoint, fixture_sys(fixture), Hint::Auto)
        .detect()
        .await;
    (imds, d)
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::String(v.into())
}

#[tokio::test]
async fn gb300_documents_give_the_fabric_attributes() {
    let (imds, d) = detect_on("gb300", "azure-nd-gb300-v6").await;
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert!(d.how.contains("DMI says azure"), "{}", d.how);
    let az = d.provider.expect("on Azure");
    let a = az.node_attributes();
    assert_eq!(
        a[attr::PLACEMENT_GROUP_ID],
        s("8f0c7c3e-5d1a-4b8e-9f3e-2a6b1c4d7e90")
    );
    assert_eq!(a[attr::VM_SIZE], s("Standard_ND128isr_GB300_v6"));
    assert_eq!(a[attr::INTERCONNECT_GROUP_ID], s("icg-eastus2-0042"));
    assert_eq!(a[attr::INTERCONNECT_SUBGROUP_ID], s("icsg-0042-07"));
    assert_eq!(a[attr::LOCATION], s("eastus2"));
    assert_eq!(a[attr::ZONE], s("1"));
    assert_eq!(a[attr::VM_SCALE_SET_NAME], s("aks-gb300pool-12345678-vmss"));
    assert_eq!(a.len(), 7);
    let seen = imds.seen();
    assert_eq!(seen.len(), 2);
    for r in &seen {
        assert!(r.metadata_header, "{r:?}");
        assert!(
            r.target.contains("api-version=2025-11-11") && r.target.contains("format=json"),
            "{r:?}"
        );
    }
}

#[tokio::test]
async fn empty_fields_are_left_out() {
    let az = detect_on("mi300x", "azure-nd-mi300x-v5")
        .await
        .1
        .provider
        .unwrap();
    let a = az.node_attributes();
    assert_eq!(a[attr::VM_SIZE], s("Standard_ND96isr_MI300X_v5"));
    assert!(!a.contains_key(attr::ZONE) && !a.contains_key(attr::INTERCONNECT_GROUP_ID));
}

fn id(mac: &str, v6gw: Option<&str>) -> DeviceIdentifiers {
    DeviceIdentifiers {
        name: Some("eth1".into()),
        mac: Some(mac.into()),
        pci_address: None,
        ipv6_gateway: v6gw.map(|g| g.parse().unwrap()),
    }
}

#[tokio::test]
async fn per_nic_routing_is_matched_by_mac_with_a_table_per_nic() {
    let az = detect_on("mi300x", "azure-nd-mi300x-v5")
        .await
        .1
        .provider
        .unwrap();

    let c0 = az
        .device_config(&id("00:0d:3a:6e:00:02", None))
        .expect("NIC 0");
    assert_eq!(c0.rules.len(), 1);
    assert_eq!(
        (c0.rules[0].source.as_str(), c0.rules[0].table),
        ("10.10.1.0/24", 100)
    );
    assert_eq!(c0.routes.len(), 1, "no IPv6 without a host IPv6 gateway");
    assert_eq!(
        (
            c0.routes[0].destination.as_str(),
            c0.routes[0].gateway.as_str(),
            c0.routes[0].table
        ),
        ("0.0.0.0/0", "10.10.1.1", 100)
    );
    c0.validate().unwrap();

    let c1 = az
        .device_config(&id("7c:1e:52:00:00:05", Some("fe80::1234:5678")))
        .expect("NIC 1");
    assert!(c1.routes.iter().all(|r| r.table == 101));
    let v6 = c1
        .routes
        .iter()
        .find(|r| r.destination == "::/0")
        .expect("IPv6 default route");
    assert_eq!(v6.gateway, "fe80::1234:5678");
    assert!(c1.rules.iter().any(|r| r.source == "fd00:20::5/128"));

    assert!(az.device_config(&id("aa:bb:cc:dd:ee:ff", None)).is_none());
    assert!(az.device_config(&DeviceIdentifiers::default()).is_none());

    // The claim's own config is laid over the cloud's.
    let claim: dranet_core::NetworkConfig = serde_json::from_str(r#"{"interface":{"name":"net1"},"routes":[{"destination":"0.0.0.0/0","gateway":"10.10.1.254","table":100}]}"#).unwrap();
    let merged = claim.merged_over(&c0);
    assert_eq!(merged.interface.name, "net1");
    assert_eq!(merged.routes.len(), 1);
    assert_eq!(merged.routes[0].gateway, "10.10.1.254");
    assert_eq!(merged.rules, c0.rules);
}

#[tokio::test]
async fn ipv6_needs_the_document_too() {
    let az = detect_on("gb300", "azure-nd-gb300-v6")
        .await
        .1
        .provider
        .unwrap();
    let c = az
        .device_config(&id("00-0D-3A-6E-00-01", Some("fe80::1")))
        .unwrap();
    assert!(c.routes.iter().all(|r| r.destination != "::/0"));
}

async fn detect_with(
    script: impl Fn(&str, usize) -> Reply + Send + Sync + 'static,
    hint: Hint,
) -> (Detection, Vec<dranet_azure::fake::Seen>) {
    let imds = FakeImds::start(script).await.unwrap();
    let sys = if hint == Hint::Auto {
        fixture_sys("azure-nd-gb300-v6")
    } else {
        no_dmi()
    };
    let d = detector(&imds.endpoint, sys, hint).detect().await;
    (d, imds.seen())
}

#[tokio::test]
async fn malformed_documents_are_a_warning_and_no_attributes() {
    for (body, needle) in [
        ("{not json", "compute document"),
        ("[]", "compute document"),
        (r#"{"placementGroupId": 5}"#, "invalid type"),
    ] {
        let body = body.to_string();
        let (d, _) = detect_with(move |_, _| Reply::Json(200, body.clone()), Hint::Auto).await;
        assert!(d.provider.is_none());
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
        assert!(
            d.warnings[0].contains(needle) && d.warnings[0].contains("no azure.dra.net attributes"),
            "{:?}",
            d.warnings
        );
    }
    // Missing fields are just empty.
    let (d, _) = detect_with(|_, _| Reply::Json(200, "{}".into()), Hint::Auto).await;
    assert!(d.provider.unwrap().node_attributes().is_empty());
}

#[tokio::test]
async fn a_broken_network_document_keeps_the_attributes() {
    let compute = doc("gb300-compute.json");
    let (d, _) = detect_with(
        move |t, _| {
            if t.contains("/compute") {
                Reply::Json(200, compute.clone())
            } else {
                Reply::Json(200, "{\"interface\": 3}".into())
            }
        },
        Hint::Auto,
    )
    .await;
    let az = d.provider.expect("attributes still published");
    assert_eq!(az.node_attributes().len(), 7);
    assert!(
        d.warnings[0].contains("network document") && d.warnings[0].contains("no per-NIC routing"),
        "{:?}",
        d.warnings
    );
}

#[tokio::test]
async fn http_errors_retry_only_when_transient() {
    let compute = doc("gb300-compute.json");
    let (d, seen) = detect_with(
        |_, _| Reply::Json(404, "{\"error\":\"not found\"}".into()),
        Hint::Azure,
    )
    .await;
    assert!(d.provider.is_none());
    assert_eq!(seen.len(), 1, "a 404 is not retried");
    assert!(d.warnings[0].contains("HTTP 404"), "{:?}", d.warnings);

    for status in [500u16, 429, 410] {
        let c = compute.clone();
        let (d, seen) = detect_with(
            move |t, n| {
                if n < 2 && t.contains("/compute") {
                    Reply::Json(status, "{}".into())
                } else if t.contains("/compute") {
                    Reply::Json(200, c.clone())
                } else {
                    Reply::Json(200, "{}".into())
                }
            },
            Hint::Azure,
        )
        .await;
        assert!(d.provider.is_some(), "{status}: {:?}", d.warnings);
        assert_eq!(
            seen.iter()
                .filter(|s| s.target.contains("/compute"))
                .count(),
            3,
            "{status}"
        );
    }
    let c = compute.clone();
    let (d, _) = detect_with(
        move |_, n| {
            if n == 0 {
                Reply::Close
            } else {
                Reply::Json(200, c.clone())
            }
        },
        Hint::Azure,
    )
    .await;
    assert!(
        d.provider.is_some(),
        "a dropped connection is retried: {:?}",
        d.warnings
    );
}

#[tokio::test]
async fn an_unsupported_api_version_falls_back_to_the_newest_listed() {
    let compute = doc("gb300-compute.json");
    let (d, seen) = detect_with(
        move |t, _| {
            if t.contains("api-version=2025-11-11") {
                Reply::Json(400, r#"{"error": "Bad request. api-version is invalid", "newest-versions": ["2025-04-07", "2024-07-17"]}"#.into())
            } else {
                Reply::Json(200, compute.clone())
            }
        },
        Hint::Azure,
    )
    .await;
    assert!(d.provider.is_some(), "{:?}", d.warnings);
    assert!(
        seen[1].target.contains("api-version=2025-04-07"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_silent_imds_gives_up_within_the_budget() {
    // How long it takes is measured in benches/clouds.rs; here: it ends, retried, with the reason.
    let (d, seen) = detect_with(|_, _| Reply::Hang, Hint::Azure).await;
    assert!(d.provider.is_none());
    assert!(seen.len() >= 2, "retried: {seen:?}");
    assert!(
        d.warnings[0].contains("did not answer within"),
        "{:?}",
        d.warnings
    );
}

#[tokio::test]
async fn a_huge_answer_is_refused_at_the_cap_not_read_into_memory() {
    let huge = format!("{{\"x\": \"{}\"}}", "a".repeat(4 << 20));
    let (d, seen) = detect_with(move |_, _| Reply::Json(200, huge.clone()), Hint::Azure).await;
    assert!(d.provider.is_none());
    assert_eq!(seen.len(), 1, "not retried: {seen:?}");
    assert!(
        d.warnings[0].contains("larger than 1048576 bytes"),
        "{:?}",
        d.warnings
    );
}

#[tokio::test]
async fn off_azure_detection_is_quick_and_silent() {
    // DMI says not Azure: no request at all.
    let imds = FakeImds::start(|_, _| Reply::Hang).await.unwrap();
    let d = detector(&imds.endpoint, fixture_sys("bm-mi300x-8"), Hint::Auto)
        .detect()
        .await;
    assert!(d.provider.is_none() && d.warnings.is_empty());
    assert!(imds.seen().is_empty());
    // No DMI and an IMDS address that never answers: one bounded probe, no warning.
    let mut det = detector(&imds.endpoint, no_dmi(), Hint::Auto);
    det.probe_timeout = Duration::from_millis(300);
    let before = imds.seen().len();
    let d = det.detect().await;
    assert_eq!(imds.seen().len(), before + 1, "exactly one probe");
    assert!(
        d.provider.is_none() && d.warnings.is_empty(),
        "{:?}",
        d.warnings
    );
    assert!(d.how.contains("none answered"), "{}", d.how);
    // Hint none: nothing is asked.
    let before = imds.seen().len();
    let d = detector(&imds.endpoint, no_dmi(), Hint::None)
        .detect()
        .await;
    assert!(d.provider.is_none() && imds.seen().len() == before);
}

#[tokio::test]
async fn a_bad_endpoint_is_named() {
    let d = detector("ftp://example", no_dmi(), Hint::Azure)
        .detect()
        .await;
    assert!(d.warnings[0].contains("ftp://example"), "{:?}", d.warnings);
}
