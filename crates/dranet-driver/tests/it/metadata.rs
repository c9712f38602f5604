//! Device metadata in the container (KEP-5304), root only, real links in namespaces: the kubelet
//! plugin prepares a claim of two veths (an empty file per request, mounted through CDI), the
//! pod's sandbox starts, and each request's file then says what `ip` shows in the pod, on the
//! inode a container's bind mount pinned before the write; unprepare removes the claim's files.

use std::collections::BTreeMap;
use std::sync::Arc;

use dranet_driver::claim::DRIVER_NAME;
use dranet_kubeletplugin::fake::{FakeApiServer, FakeKubelet, allocated_claim};
use dranet_kubeletplugin::k8s_openapi::api::resource::v1::{
    Device, DeviceAttribute, DeviceRequestAllocationResult, ResourceClaimConsumerReference,
};
use dranet_kubeletplugin::{ClaimRef, KubeletPlugin};

use crate::support::{self, Ns, can_run, claims, pod};

const NODE: &str = "node-a";

fn string(s: &str) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(s.into()),
        ..Default::default()
    }
}

/// The claim `ml/nics` of the veths' devices, request `nic<i>` for `links[i]`, each named
/// `net<i>` in pod `uid` with address `10.61.<i>.2/24`.
fn put_claim(api: &FakeApiServer, links: &[&str], uid: &str) -> ClaimRef {
    let r = ClaimRef {
        namespace: "ml".into(),
        name: "nics".into(),
        uid: "0a6f3c1e-0000-4000-8000-00000000e7a1".into(),
    };
    let results = links
        .iter()
        .enumerate()
        .map(|(i, l)| DeviceRequestAllocationResult {
            request: format!("nic{i}"),
            driver: DRIVER_NAME.into(),
            pool: NODE.into(),
            device: format!("dev-{l}"),
            ..Default::default()
        })
        .collect();
    let mut claim = allocated_claim(&r, results);
    let config = (0..links.len())
        .map(|i| {
            let request = format!("nic{i}");
            claims::opaque(
                "FromClaim",
                Some(&[request.as_str()]),
                serde_json::json!({"interface": {"name": format!("net{i}"), "addresses": [format!("10.61.{i}.2/24")]}}),
            )
        })
        .collect();
    if let Some(s) = claim.status.as_mut() {
        s.reserved_for = Some(vec![ResourceClaimConsumerReference {
            api_group: None,
            resource: "pods".into(),
            name: format!("pod-{uid}"),
            uid: uid.into(),
        }]);
        if let Some(d) = s.allocation.as_mut().and_then(|a| a.devices.as_mut()) {
            d.config = Some(config);
        }
    }
    api.put_claim(claim);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_requests_file_says_what_the_pod_sees_and_goes_with_the_claim() {
    if !can_run("each_requests_file_says_what_the_pod_sees_and_goes_with_the_claim") {
        return;
    }
    let links = ["m0", "m1"];
    let host = Ns::new("meta");
    for l in links {
        let peer = format!("{l}p");
        host.ip(&["link", "add", l, "type", "veth", "peer", "name", &peer]);
        host.ip(&["link", "set", l, "up"]);
    }
    let p = Ns::new("meta-p");
    let (state, kubelet_dir, cdi) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let driver = Arc::new(support::veth_driver(&host, state.path(), &links));
    // What the daemon does with each publication.
    let published: Vec<Device> = links
        .iter()
        .map(|l| Device {
            name: format!("dev-{l}"),
            attributes: Some(BTreeMap::from([
                // dra.net's own attributes are published unqualified.
                ("ifName".to_string(), string(l)),
                ("type".to_string(), string("veth")),
            ])),
            ..Default::default()
        })
        .collect();
    driver.set_published(&published);

    let api = FakeApiServer::start().await.unwrap();
    api.add_node(NODE);
    let plugin = KubeletPlugin::builder(
        driver.clone(),
        api.client().unwrap().field_manager(DRIVER_NAME),
    )
    .driver_name(DRIVER_NAME)
    .node_name(NODE)
    .kubelet_root_dir(kubelet_dir.path())
    .device_metadata(cdi.path())
    .start()
    .await
    .unwrap();
    let updater = plugin.metadata_updater().unwrap();
    driver.set_metadata_updater(updater.clone());
    let kubelet = FakeKubelet::connect(plugin.registration_socket())
        .await
        .unwrap();
    let claim = put_claim(&api, &links, "pm");
    let resp = kubelet.prepare(std::slice::from_ref(&claim)).await.unwrap();
    let entry = &resp.claims[&claim.uid];
    assert_eq!(entry.error, "");
    let layout = updater.layout();
    for (i, d) in entry.devices.iter().enumerate() {
        let request = format!("nic{i}");
        assert_eq!(d.cdi_device_ids, [layout.cdi_id(&claim.uid, &request)]);
        let spec: serde_json::Value =
            serde_json::from_slice(&std::fs::read(layout.spec_path(&claim.uid, &request)).unwrap())
                .unwrap();
        let mount = &spec["devices"][0]["containerEdits"]["mounts"][0];
        assert_eq!(
            mount["containerPath"],
            format!(
                "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/nics/{request}/dra.net-metadata.json"
            )
        );
        assert_eq!(
            mount["hostPath"],
            layout.file("ml", "nics", &request).display().to_string()
        );
    }
    // What the containers' bind mounts hold: the files as prepare made them.
    let pinned: Vec<std::fs::File> = (0..links.len())
        .map(|i| std::fs::File::open(layout.file("ml", "nics", &format!("nic{i}"))).unwrap())
        .collect();

    let sandbox = pod("pm", &p);
    driver.start_pod(&sandbox).await.unwrap();
    for (i, f) in pinned.iter().enumerate() {
        // The stream: v1beta1, then the same as v1alpha1.
        let objects: Vec<serde_json::Value> = serde_json::Deserializer::from_reader(f)
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0]["apiVersion"], "metadata.resource.k8s.io/v1beta1");
        assert_eq!(
            objects[1]["apiVersion"],
            "metadata.resource.k8s.io/v1alpha1"
        );
        let mut alpha = objects[1].clone();
        alpha["apiVersion"] = objects[0]["apiVersion"].clone();
        assert_eq!(alpha, objects[0]);
        let m = &objects[1];
        assert_eq!(m["kind"], "DeviceMetadata");
        assert!(m.get("podClaimName").is_none(), "a claim the pod names");
        assert_eq!(
            m["metadata"],
            serde_json::json!({"name": "nics", "namespace": "ml", "uid": claim.uid, "generation": 1})
        );
        let request = &m["requests"][0];
        assert_eq!(request["name"], format!("nic{i}"));
        let dev = &request["devices"][0];
        assert_eq!(dev["name"], format!("dev-{}", links[i]));
        assert_eq!(dev["driver"], DRIVER_NAME);
        assert_eq!(dev["pool"], NODE);
        assert_eq!(dev["attributes"]["ifName"]["string"], links[i]);
        // The network data as `ip` shows the interface in the pod.
        let ifname = format!("net{i}");
        let shown = &p.json(&["addr", "show", &ifname])[0];
        let ips: Vec<String> = shown["addr_info"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["family"] == "inet")
            .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
            .collect();
        assert_eq!(ips, [format!("10.61.{i}.2/24")]);
        let nd = &dev["networkData"];
        assert_eq!(nd["interfaceName"], ifname);
        assert_eq!(nd["ips"], serde_json::json!(ips));
        assert_eq!(nd["hardwareAddress"], shown["address"]);
    }

    driver.stop_pod(&sandbox).await;
    driver.remove_pod(&sandbox).await;
    let resp = kubelet
        .unprepare(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(resp.claims[&claim.uid].error, "");
    assert!(!layout.claim_dir("ml", "nics").exists());
    assert!(!layout.spec_path(&claim.uid, "nic0").exists());
    plugin.shutdown().await.unwrap();
}

/// The example of docs/claims.md is a metadata file as the plugin writes it (pretty-printed), at
/// the path the layout mounts it.
#[test]
fn the_documented_example_is_what_the_plugin_writes() {
    use dranet_kubeletplugin::metadata::{DeviceMetadata, MetadataLayout, MetadataVersion};
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/claims.md"),
    )
    .unwrap();
    let section = doc
        .split("## Device metadata in the container")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/claims.md has the section");
    let block = section
        .split("```json\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the section shows a file");
    let objects: Vec<serde_json::Value> = serde_json::Deserializer::from_str(block)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    let versions: Vec<&str> = objects
        .iter()
        .map(|o| o["apiVersion"].as_str().unwrap())
        .collect();
    let written: Vec<&str> = MetadataVersion::ALL
        .iter()
        .map(|v| v.api_version())
        .collect();
    assert_eq!(versions, written, "every version, newest first");
    let m: DeviceMetadata = serde_json::from_value(objects[0].clone()).unwrap();
    assert_eq!(m.kind, "DeviceMetadata");
    let d = &m.requests[0].devices[0];
    assert_eq!(d.driver, DRIVER_NAME);
    assert!(d.network_data.as_ref().is_some_and(|n| n.ips.is_some()));
    for o in &objects {
        // The same JSON back (nothing the types do not carry), in the order written.
        let back: DeviceMetadata = serde_json::from_value(o.clone()).unwrap();
        assert_eq!(&serde_json::to_value(&back).unwrap(), o);
        let mut same = back.clone();
        same.api_version = m.api_version.clone();
        assert_eq!(same, m, "the versions differ in apiVersion only");
    }
    // Field order as written: kind, apiVersion, metadata, podClaimName, requests.
    let at = |k: &str| block.find(&format!("\"{k}\"")).unwrap();
    assert!(at("kind") < at("apiVersion") && at("apiVersion") < at("metadata"));
    assert!(at("metadata") < at("podClaimName") && at("podClaimName") < at("requests"));
    let layout = MetadataLayout::new(
        std::path::Path::new("/var/lib/kubelet"),
        DRIVER_NAME,
        std::path::Path::new("/var/run/cdi"),
    );
    let path = layout.container_path(
        &m.metadata.name,
        m.pod_claim_name.as_deref(),
        &m.requests[0].name,
    );
    assert!(section.contains(&path), "the section reads {path}");
}
