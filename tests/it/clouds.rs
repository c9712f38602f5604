//! `dranet inventory` with each cloud's saved metadata (`--<cloud>-metadata-file`) and with a
//! webhook, on the MI300X fixture: what a node would publish, offline; and the flags' mistakes
//! refused with the flag named.

use std::collections::BTreeMap;
use std::process::Command;

use dranet_cloud::fake::{FakeServer, Reply, clouds};
use k8s_openapi::api::resource::v1::{DeviceAttribute, ResourceSlice};

const MI300X: &str = "testdata/nodes/bm-mi300x-8/sys";

fn dranet(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dranet"))
        .args(args)
        .env_remove("NODE_NAME")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run dranet");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The published devices' attributes, by device name.
fn inventory(extra: &[&str]) -> BTreeMap<String, BTreeMap<String, DeviceAttribute>> {
    let mut args = vec![
        "inventory",
        "--sysfs",
        MI300X,
        "--node-name",
        "n1",
        "-o",
        "json",
    ];
    args.extend_from_slice(extra);
    let (ok, out, err) = dranet(&args);
    assert!(ok, "{err}");
    let slice: ResourceSlice = serde_json::from_str(&out).unwrap();
    slice
        .spec
        .devices
        .unwrap_or_default()
        .into_iter()
        .map(|d| (d.name, d.attributes.unwrap_or_default()))
        .collect()
}

/// The device whose netdev is `ifname`.
fn by_ifname<'a>(
    devs: &'a BTreeMap<String, BTreeMap<String, DeviceAttribute>>,
    ifname: &str,
) -> &'a BTreeMap<String, DeviceAttribute> {
    devs.values()
        .find(|a| a.get("ifName").and_then(|v| v.string.as_deref()) == Some(ifname))
        .unwrap_or_else(|| panic!("no {ifname}"))
}

fn string<'a>(a: &'a BTreeMap<String, DeviceAttribute>, k: &str) -> Option<&'a str> {
    a.get(k).and_then(|v| v.string.as_deref())
}

#[test]
fn each_clouds_saved_metadata_shows_its_attributes() {
    let gce = inventory(&[
        "--cloud-provider-hint",
        "GCE",
        "--gce-metadata-file",
        "testdata/gce/a3-ultragpu-8g-instance.json",
    ]);
    assert_eq!(gce.len(), 8);
    for a in gce.values() {
        assert_eq!(string(a, "gce.dra.net/machineType"), Some("a3-ultragpu-8g"));
        assert_eq!(string(a, "gce.dra.net/subBlock"), Some("7e1d0b3a"));
        assert_eq!(string(a, "gce.dra.net/networkName"), Some("a3u-rdma"));
        assert_eq!(
            a["gce.dra.net/networkProjectNumber"].int,
            Some(628944397724)
        );
    }

    let aws = inventory(&["--aws-metadata-file", "testdata/aws/p5-48xlarge.json"]);
    let rdma2 = by_ifname(&aws, "rdma2");
    assert_eq!(
        string(rdma2, "aws.dra.net/instanceType"),
        Some("p5.48xlarge")
    );
    assert_eq!(
        string(rdma2, "aws.dra.net/placementGroupName"),
        Some("p5-training-cluster")
    );
    assert_eq!(rdma2["aws.dra.net/networkCardIndex"].int, Some(8));

    let oke = inventory(&[
        "--cloud-provider-hint",
        "oke",
        "--oke-metadata-file",
        "testdata/oke/bm-gpu-gb200-4-host.json",
    ]);
    for a in oke.values() {
        assert_eq!(
            string(a, "oke.dra.net/hpcIslandId").map(str::len),
            Some(60),
            "an OCID's unique part fits the 64-byte limit"
        );
        assert_eq!(string(a, "oke.dra.net/rackId"), Some("3c41be92f07d8a15"));
    }

    let ali = inventory(&[
        "--alibaba-metadata-file",
        "testdata/alibaba/ebmgn8v-48xlarge.json",
    ]);
    assert!(
        ali.values()
            .all(|a| string(a, "alibaba.dra.net/instanceType") == Some("ecs.ebmgn8v.48xlarge"))
    );
    assert!(
        ali.values()
            .all(|a| !a.contains_key("alibaba.dra.net/erdma")),
        "no eRDMA device on this fixture"
    );
}

#[test]
fn a_webhook_adds_its_attributes_over_tcp_and_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("webhook.sock");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (tcp, _) = clouds::webhook("rdma3", 1450, "p", "10.0.0.1/24");
    let (unix, _) = clouds::webhook("rdma3", 1450, "p", "10.0.0.1/24");
    let tcp = rt.block_on(FakeServer::start(tcp)).unwrap();
    let unix = rt.block_on(FakeServer::start_unix(&sock, unix)).unwrap();
    for url in [&tcp.endpoint, &unix.endpoint] {
        let devs = inventory(&["--cloud-provider-hint", "webhook", "--webhook-url", url]);
        assert_eq!(
            string(by_ifname(&devs, "rdma3"), "webhook_attr"),
            Some("python"),
            "{url}"
        );
        assert!(!by_ifname(&devs, "rdma2").contains_key("webhook_attr"));
    }
    // Asked once per device, with its identifiers.
    let asked: Vec<String> = tcp
        .seen()
        .iter()
        .filter(|r| r.path() == "/GetDeviceAttributes")
        .map(|r| r.json()["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(asked.len(), 8, "{asked:?}");
    // A webhook that fails: a warning, the devices without its attributes, exit 0.
    let down = rt
        .block_on(FakeServer::start(|_, _| {
            Reply::Json(404, "no such path".into())
        }))
        .unwrap();
    let (ok, out, err) = dranet(&[
        "inventory",
        "--sysfs",
        MI300X,
        "--cloud-provider-hint",
        "webhook",
        "--webhook-url",
        &down.endpoint,
        "-o",
        "name",
    ]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 8);
    assert!(
        err.contains("HTTP 404") && err.contains("no webhook attributes"),
        "{err}"
    );
}

#[test]
fn cloud_flag_mistakes_are_refused_with_the_flag_named() {
    for (args, needle) in [
        (
            vec![
                "--cloud-provider-hint",
                "aws",
                "--gce-metadata-file",
                "testdata/gce/a3-ultragpu-8g-instance.json",
            ],
            "--gce-metadata-file is gce's metadata; it cannot go with --cloud-provider-hint aws",
        ),
        (
            vec!["--gce-metadata-file", "testdata/aws/p5-48xlarge.json"],
            "--gce-metadata-file testdata/aws/p5-48xlarge.json: GCE instance document: no machineType",
        ),
        (
            vec![
                "--aws-metadata-file",
                "testdata/aws/p5-48xlarge.json",
                "--oke-metadata-file",
                "testdata/oke/bm-gpu-gb200-4-host.json",
            ],
            "--aws-metadata-file and --oke-metadata-file: give one cloud's metadata file",
        ),
        (
            vec!["--oke-metadata-file", "testdata/nope.json"],
            "--oke-metadata-file testdata/nope.json: No such file",
        ),
        (
            vec!["--cloud-provider-hint", "webhook"],
            "--cloud-provider-hint webhook needs --webhook-url",
        ),
        (
            vec![
                "--cloud-provider-hint",
                "webhook",
                "--webhook-url",
                "ftp://x",
            ],
            "endpoint \"ftp://x\": expected http://host[:port], https://host[:port] or unix:///path/to.sock",
        ),
        (
            vec![
                "--cloud-provider-hint",
                "webhook",
                "--webhook-url",
                "https://x",
            ],
            "endpoint \"https://x\": https needs a CA bundle to check the server's certificate with (--webhook-ca-file)",
        ),
        (
            vec![
                "--cloud-provider-hint",
                "webhook",
                "--webhook-url",
                "https://x",
                "--webhook-ca-file",
                "testdata/nope.pem",
            ],
            "--webhook-ca-file: CA bundle testdata/nope.pem: No such file",
        ),
    ] {
        let mut a = vec!["inventory", "--sysfs", MI300X];
        a.extend(args.iter().copied());
        let (ok, _, err) = dranet(&a);
        if needle.starts_with("endpoint") {
            // A bad webhook URL is the webhook failing: a warning, not an error.
            assert!(ok && err.contains(needle), "{args:?}: {err}");
        } else {
            assert!(!ok && err.contains(needle), "{args:?}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "{err}");
        }
    }
}

#[test]
fn run_refuses_a_profile_provider_it_cannot_use() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let no_profiles = rt
        .block_on(FakeServer::start(|_, _| {
            Reply::Json(
                200,
                r#"{"cloudProvider": true, "profileProvider": false}"#.into(),
            )
        }))
        .unwrap();
    for (extra, needle) in [
        (
            vec!["--profile-provider", "webhook"],
            "--profile-provider webhook needs --webhook-url",
        ),
        (
            vec![
                "--profile-provider",
                "webhook",
                "--webhook-url",
                no_profiles.endpoint.as_str(),
            ],
            "does not serve profiles (its /health says profileProvider: false)",
        ),
    ] {
        let mut a = vec![
            "run",
            "--sysfs",
            MI300X,
            "--hostname-override",
            "n1",
            "--kubeconfig",
            "/nonexistent",
        ];
        a.extend(extra.iter().copied());
        let (ok, _, err) = dranet(&a);
        assert!(!ok && err.contains(needle), "{extra:?}: {err}");
    }
}

/// CoreWeave CKS offline: the Node's labels saved as `kubectl get node -o yaml` prints them give
/// every device the node's `coreweave.dra.net` attributes, and the RDMA device the neighbour label
/// names its leaf switch.
#[test]
fn cks_attributes_come_from_the_nodes_labels() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("node.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  labels:\n    cks.coreweave.com/cluster: cw-a\n    backend.coreweave.cloud/fabric: fab-1\n    backend.coreweave.cloud/superpod: sp-2\n    node.kubernetes.io/instance-type: gd-8xmi300x\n    backend.coreweave.cloud/neighbors.expected.mlx5_0.device: leaf-9\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    // (Detection would find OCI first on this fixture, whose DMI names it: the hint says CKS.)
    {
        let hint = "cks";
        let devs = inventory(&["--cloud-provider-hint", hint, "--node-labels-file", file]);
        assert!(
            devs.values()
                .all(|a| string(a, "coreweave.dra.net/fabric") == Some("fab-1")
                    && string(a, "coreweave.dra.net/instanceType") == Some("gd-8xmi300x")),
            "{devs:?}"
        );
        let leaves: Vec<&str> = devs
            .values()
            .filter_map(|a| string(a, "coreweave.dra.net/leafSwitch"))
            .collect();
        assert_eq!(leaves, ["leaf-9"], "only mlx5_0's device: {hint:?}");
        let mlx5_0 = devs
            .values()
            .find(|a| a.get("rdmaDevice").and_then(|v| v.string.as_deref()) == Some("mlx5_0"))
            .expect("mlx5_0");
        assert_eq!(
            string(mlx5_0, "coreweave.dra.net/leafSwitch"),
            Some("leaf-9")
        );
    }
    // Not a CKS node: the hint says so, naming the label.
    std::fs::write(
        dir.path().join("other.json"),
        r#"{"kubernetes.io/os": "linux"}"#,
    )
    .unwrap();
    let other = dir.path().join("other.json");
    let (ok, _, err) = dranet(&[
        "inventory",
        "--sysfs",
        MI300X,
        "--node-name",
        "n1",
        "--cloud-provider-hint",
        "cks",
        "--node-labels-file",
        other.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("no cks.coreweave.com/cluster label"), "{err}");
    // A file that is no map of labels: refused, the flag named.
    std::fs::write(dir.path().join("bad.json"), r#"{"a": 1}"#).unwrap();
    let bad = dir.path().join("bad.json");
    let (ok, _, err) = dranet(&[
        "inventory",
        "--sysfs",
        MI300X,
        "--node-labels-file",
        bad.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("--node-labels-file") && err.contains("labels must map names to strings"),
        "{err}"
    );
}
