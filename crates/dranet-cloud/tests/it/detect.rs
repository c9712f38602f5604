//! Which cloud: off every cloud nothing is asked at all (the start-up cost there is reading a few
//! DMI files); on a cloud, only that cloud's service is asked; without DMI, short probes of the
//! shared metadata address find the cloud that answers, and silence means no cloud.

use std::time::Duration;

use crate::support::{detector, doc, sysfs};
use dranet_cloud::detect::{Detection, Hint, Provider};
use dranet_cloud::dmi::Cloud;
use dranet_cloud::fake::{FakeServer, Reply, Script, clouds};

/// A fake of `cloud`'s metadata service serving the saved documents.
fn script(cloud: Cloud) -> Box<Script> {
    match cloud {
        Cloud::Azure => {
            let docs = clouds::FakeImds::documents(
                doc("imds/gb300-compute.json"),
                doc("imds/gb300-network.json"),
            );
            Box::new(move |r, n| {
                if r.header("metadata") == Some("true") {
                    docs(&r.target, n)
                } else {
                    Reply::Json(
                        400,
                        r#"{"error": "Required metadata header not specified"}"#.into(),
                    )
                }
            })
        }
        Cloud::Gce => Box::new(clouds::gce(&doc("gce/a3-ultragpu-8g-instance.json"))),
        Cloud::Aws => Box::new(clouds::aws(&doc("aws/p5-48xlarge.json"))),
        Cloud::Oke => Box::new(clouds::oke(&doc("oke/bm-gpu-gb200-4-host.json"))),
        Cloud::Alibaba => Box::new(clouds::alibaba(&doc("alibaba/ebmgn8v-48xlarge.json"))),
    }
}

fn provider_cloud(p: &Provider) -> Option<Cloud> {
    Some(match p {
        Provider::Azure(_) => Cloud::Azure,
        Provider::Gce(_) => Cloud::Gce,
        Provider::Aws(_) => Cloud::Aws,
        Provider::Oke(_) => Cloud::Oke,
        Provider::Alibaba(_) => Cloud::Alibaba,
        Provider::Webhook(_) | Provider::Cks(_) => return None,
    })
}

/// Auto-detection on a node of `cloud` whose DMI says `dmi` (`None`: unreadable), its service a
/// fake; it must find `cloud`, without a warning.
async fn detect_on(cloud: Cloud, dmi: Option<Cloud>) -> (FakeServer, Detection) {
    let fake = FakeServer::start(script(cloud)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path(), dmi.map(Some), |_| Ok(()));
    let d = detector(&fake.endpoint, &sys, Hint::Auto).detect().await;
    assert!(d.warnings.is_empty(), "{cloud}: {:?}", d.warnings);
    assert_eq!(
        d.provider.as_ref().and_then(provider_cloud),
        Some(cloud),
        "{cloud}: {}",
        d.how
    );
    (fake, d)
}

#[tokio::test]
async fn off_every_cloud_nothing_is_asked() {
    // A metadata address that would hang every request: detection must not wait on it.
    let fake = FakeServer::start(|_, _| Reply::Hang).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path(), Some(None), |_| Ok(()));
    let d = detector(&fake.endpoint, &sys, Hint::Auto).detect().await;
    assert!(d.provider.is_none() && d.warnings.is_empty(), "{d:?}");
    assert_eq!(d.how, "DMI names no cloud");
    assert!(fake.seen().is_empty(), "{:?}", fake.seen());
    // Hint none: nothing is asked even on a cloud.
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path(), Some(Some(Cloud::Aws)), |_| Ok(()));
    let d = detector(&fake.endpoint, &sys, Hint::None).detect().await;
    assert!(d.provider.is_none() && fake.seen().is_empty());
}

#[tokio::test]
async fn on_each_cloud_only_its_own_service_is_asked() {
    for cloud in Cloud::ALL {
        let (fake, _) = detect_on(cloud, Some(cloud)).await;
        // Every request was this cloud's: no other cloud's probe went out.
        let prefix = match cloud {
            Cloud::Azure => "/metadata/instance/",
            Cloud::Gce => "/computeMetadata/v1/",
            Cloud::Aws | Cloud::Alibaba => "/latest/",
            Cloud::Oke => "/opc/v2/",
        };
        let seen = fake.seen();
        assert!(
            seen.iter().all(|r| r.target.starts_with(prefix)),
            "{cloud}: {seen:?}"
        );
    }
}

#[tokio::test]
async fn without_dmi_the_cloud_that_answers_the_probes_is_found() {
    for cloud in Cloud::ALL {
        // All clouds share the address; only the one that is there answers its own probe.
        let (_, d) = detect_on(cloud, None).await;
        assert!(d.how.contains(&format!("{cloud} answered")), "{}", d.how);
    }
    // Silence: one bounded round of probes, no cloud, no warning.
    let fake = FakeServer::start(|_, _| Reply::Hang).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path(), None, |_| Ok(()));
    let mut det = detector(&fake.endpoint, &sys, Hint::Auto);
    det.probe_timeout = Duration::from_millis(200);
    let d = det.detect().await;
    assert!(d.provider.is_none() && d.warnings.is_empty(), "{d:?}");
    assert!(d.how.contains("none answered"), "{}", d.how);
    assert_eq!(fake.seen().len(), Cloud::ALL.len(), "one probe per cloud");
}

#[tokio::test]
async fn a_hint_reads_that_cloud_without_detecting() {
    let fake = FakeServer::start(script(Cloud::Oke)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // DMI says another cloud: the hint wins.
    let sys = sysfs(dir.path(), Some(Some(Cloud::Gce)), |_| Ok(()));
    let d = detector(&fake.endpoint, &sys, Hint::Cloud(Cloud::Oke))
        .detect()
        .await;
    assert_eq!(
        d.provider.as_ref().and_then(provider_cloud),
        Some(Cloud::Oke)
    );
    assert_eq!(d.how, "cloud provider hint: oke");
}

/// A CKS node's labels (`cks.coreweave.com/cluster` and its fabric).
fn cks_labels(cluster: &str) -> dranet_cloud::cks::Labels {
    [
        ("cks.coreweave.com/cluster", cluster),
        ("backend.coreweave.cloud/fabric", "fab-1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

#[tokio::test]
async fn cks_is_told_by_the_nodes_labels_after_the_metadata_services() {
    // DMI names no cloud: no metadata service is asked, the labels say CKS.
    let fake = FakeServer::start(|_, _| Reply::Hang).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path(), Some(None), |_| Ok(()));
    let mut det = detector(&fake.endpoint, &sys, Hint::Auto);
    det.node_labels = Some(Ok(cks_labels("cw")));
    let d = det.detect().await;
    assert!(
        matches!(d.provider, Some(Provider::Cks(ref n)) if n.node.get("coreweave.dra.net/fabric").map(String::as_str) == Some("fab-1")),
        "{d:?}"
    );
    assert_eq!(
        d.how,
        "DMI names no cloud; the Node has cks.coreweave.com/cluster"
    );
    assert!(d.warnings.is_empty() && fake.seen().is_empty(), "{d:?}");
    // A metadata service that is the cloud comes first, as upstream orders them.
    let fake = FakeServer::start(script(Cloud::Azure)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sys = sysfs(dir.path(), Some(Some(Cloud::Azure)), |_| Ok(()));
    let mut det = detector(&fake.endpoint, &sys, Hint::Auto);
    det.node_labels = Some(Ok(cks_labels("cw")));
    let d = det.detect().await;
    assert_eq!(
        d.provider.as_ref().and_then(provider_cloud),
        Some(Cloud::Azure)
    );
    // Labels without the cluster's, or unread: not CKS, and no warning when detecting.
    for labels in [Ok(cks_labels("")), Err("403 Forbidden".to_string())] {
        let dir = tempfile::tempdir().unwrap();
        let sys = sysfs(dir.path(), Some(None), |_| Ok(()));
        let mut det = detector(&fake.endpoint, &sys, Hint::Auto);
        det.node_labels = Some(labels);
        let d = det.detect().await;
        assert!(d.provider.is_none() && d.warnings.is_empty(), "{d:?}");
    }
    // Hinted: what is missing is said.
    for (labels, want) in [
        (None, "CKS needs the Node's labels"),
        (
            Some(Ok(cks_labels(""))),
            "the Node has no cks.coreweave.com/cluster label",
        ),
        (
            Some(Err("403 Forbidden".to_string())),
            "cannot read the Node's labels: 403 Forbidden",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let sys = sysfs(dir.path(), Some(None), |_| Ok(()));
        let mut det = detector(&fake.endpoint, &sys, Hint::Cks);
        det.node_labels = labels;
        let d = det.detect().await;
        assert!(d.provider.is_none(), "{d:?}");
        assert!(
            d.warnings.iter().any(|w| w.starts_with(want)),
            "{:?}",
            d.warnings
        );
    }
}
