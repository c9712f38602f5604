//! One publication: `dranet check --sysfs`, `dranet inventory --sysfs -o json` and the daemon's
//! publication ([`dranet_driver::publish::publication`], as `Daemon::publish` calls it) give the
//! same devices for every node fixture and every combination of the publishing flags.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use dranet_core::Discover;
use dranet_driver::publish::{InUse, PodFaults, Policy, PolicyFlags, publication};

const NODE: &str = "node-1";

/// The flag sets tried on every fixture: the defaults, an operator's `--filter` and an empty one,
/// sharing, and each feature gate the code knows.
fn flag_sets() -> Vec<Vec<&'static str>> {
    vec![
        vec![],
        vec![
            "--filter",
            r#"!("type" in device.attributes["dra.net"]) || device.attributes["dra.net"].type != "veth""#,
        ],
        vec!["--filter", ""],
        vec![
            "--share-filter",
            r#""pciAddress" in device.attributes["dra.net"]"#,
            "--share-children",
            "3",
        ],
        vec![
            "--filter",
            "",
            "--share-filter",
            r#"device.attributes["dra.net"].type == "bridge""#,
            "--share-children",
            "2",
        ],
        vec!["--feature-gates", "DRAListTypeAttributes=true"],
        vec![
            "--feature-gates",
            "DRAListTypeAttributes=false,PersistentResourceSliceAttributes=true",
        ],
    ]
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixtures() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join("testdata/nodes"))
        .unwrap()
        .map(|e| e.unwrap().path().join("sys"))
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    assert!(out.len() >= 5, "{out:?}");
    out
}

fn dranet(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dranet"))
        .args(args)
        .current_dir(root())
        .env_remove("NODE_NAME")
        .env_remove("DRANET_FILTER")
        .env_remove("DRANET_SHARE_FILTER")
        .env_remove("DRANET_SHARE_CHILDREN")
        .env_remove("DRANET_FEATURE_GATES")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What a node publishes, as comparable sets.
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen {
    devices: BTreeSet<String>,
    shared: BTreeSet<String>,
    tainted: BTreeSet<String>,
}

fn from_slice_devices<'a>(devices: impl Iterator<Item = &'a serde_json::Value>) -> Seen {
    let mut s = Seen::default();
    for d in devices {
        let name = d["name"].as_str().unwrap().to_string();
        if d["allowMultipleAllocations"] == true {
            s.shared.insert(name.clone());
        }
        if d["taints"].as_array().is_some_and(|t| !t.is_empty()) {
            s.tainted.insert(name.clone());
        }
        s.devices.insert(name);
    }
    s
}

fn inventory(sys: &Path, flags: &[&str]) -> Seen {
    let sys = sys.to_str().unwrap();
    let mut args = vec![
        "inventory",
        "--sysfs",
        sys,
        "--node-name",
        NODE,
        "-o",
        "json",
    ];
    args.extend(flags);
    let (ok, out, err) = dranet(&args);
    assert!(ok, "{args:?}: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let slices = match v["kind"].as_str() {
        Some("List") => v["items"].as_array().unwrap().clone(),
        _ => vec![v],
    };
    from_slice_devices(
        slices
            .iter()
            .flat_map(|s| s["spec"]["devices"].as_array().unwrap()),
    )
}

/// The claims `check` allocates: `allocationMode: All` of class `dranet.net`, tolerating every
/// taint, split so that no claim needs more than the API's 32 devices: the devices without a PCI
/// function, then the PCI functions by the last digit of their address.
fn claims() -> String {
    let mut selectors = vec![r#"!("pciAddress" in device.attributes["dra.net"])"#.to_string()];
    for f in 0..8 {
        selectors.push(format!(
            r#""pciAddress" in device.attributes["dra.net"] && device.attributes["dra.net"].pciAddress.endsWith("{f}")"#
        ));
    }
    selectors
        .iter()
        .enumerate()
        .map(|(i, cel)| {
            format!(
                "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: part-{i}\n\
                 spec:\n  devices:\n    requests:\n    - name: nics\n      exactly:\n        \
                 deviceClassName: dranet.net\n        allocationMode: All\n        tolerations:\n        \
                 - operator: Exists\n        selectors:\n        - cel:\n            expression: '{cel}'\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

fn check(sys: &Path, claims: &Path, flags: &[&str]) -> BTreeSet<String> {
    let sys = sys.to_str().unwrap();
    let claims = claims.to_str().unwrap();
    let mut args = vec![
        "check", claims, "--sysfs", sys, "--node", NODE, "-o", "json",
    ];
    args.extend(flags);
    let (_, out, err) = dranet(&args);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}{err}"));
    let mut devices = BTreeSet::new();
    for c in v["claims"].as_array().unwrap() {
        match c["verdict"].as_str().unwrap() {
            "fits" => devices.extend(
                c["devices"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d["device"].as_str().unwrap().to_string()),
            ),
            // A part no device falls in.
            _ => assert!(c["devices"].as_array().unwrap().is_empty(), "{args:?}: {c}"),
        }
    }
    devices
}

/// What `Daemon::publish` computes for the node with these flags, the daemon's first
/// publication (nothing in use, no pod).
fn daemon(sys: &Path, flags: &[&str]) -> Seen {
    daemon_with(sys, flags, None)
}

/// [`daemon`] with the attributes of the webhook at `webhook` (refreshed first, as the daemon
/// does before it publishes them).
fn daemon_with(sys: &Path, flags: &[&str], webhook: Option<&str>) -> Seen {
    let mut f = PolicyFlags::default();
    let mut it = flags.iter();
    let mut children = String::new();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        match *k {
            "--filter" => f.filter = v,
            "--share-filter" => f.share_filter = v,
            "--share-children" => children = v.to_string(),
            "--feature-gates" => f.feature_gates = v,
            other => panic!("unknown flag {other}"),
        }
    }
    if !children.is_empty() {
        f.share_children = children.parse().unwrap();
    }
    let policy = Policy::from_flags(&f).unwrap();
    let inv = dranet_discovery::host(sys, dranet_discovery::Options::default())
        .discover()
        .unwrap();
    let hook = webhook.map(|url| {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let w = rt
            .block_on(dranet_cloud::webhook::Webhook::connect(
                url,
                None,
                std::time::Duration::from_secs(10),
                dranet_cloud::RetryPolicy::default(),
            ))
            .unwrap();
        let ids: Vec<dranet_core::DeviceIdentifiers> = inv
            .devices
            .iter()
            .map(dranet_core::DeviceIdentifiers::of)
            .collect();
        rt.block_on(dranet_core::CloudProvider::refresh(&w, &ids));
        w
    });
    let cloud: &dyn dranet_core::CloudProvider = match &hook {
        Some(w) => w,
        None => &dranet_core::NoCloud,
    };
    let p = publication(&inv, cloud, &policy, &InUse::none(), &PodFaults::new());
    let list = p.k8s_devices();
    let json: Vec<serde_json::Value> = list
        .iter()
        .map(|d| serde_json::to_value(d).unwrap())
        .collect();
    from_slice_devices(json.iter())
}

#[test]
fn check_inventory_and_the_daemon_publish_the_same_devices() {
    let dir = tempfile::tempdir().unwrap();
    let claims_file = dir.path().join("claims.yaml");
    std::fs::write(&claims_file, claims()).unwrap();
    let mut compared = 0;
    let (mut shared, mut distinct) = (0, BTreeSet::new());
    for sys in fixtures() {
        for flags in flag_sets() {
            let what = format!("{} {flags:?}", sys.display());
            let daemon = daemon(&sys, &flags);
            let inventory = inventory(&sys, &flags);
            assert_eq!(inventory, daemon, "{what}: inventory vs the daemon");
            let checked = check(&sys, &claims_file, &flags);
            assert_eq!(checked, daemon.devices, "{what}: check vs the daemon");
            compared += 1;
            shared += daemon.shared.len();
            distinct.insert((sys.clone(), daemon.devices));
        }
    }
    assert_eq!(compared, fixtures().len() * flag_sets().len());
    // The flags made a difference somewhere, and sharing was compared (no fixture has a link
    // down: taints are compared, and tested with faults in the pipeline's unit tests).
    assert!(distinct.len() > fixtures().len(), "{distinct:?}");
    assert!(shared > 0, "nothing shared");
}

/// The new user's claim of the review: every NIC of class dranet.net on the edge-cases node.
/// The bridge, the ifb and the veths are not published, so `check` does not count them.
#[test]
fn check_sysfs_counts_no_bridge_ifb_or_veth_on_the_edge_cases_node() {
    let dir = tempfile::tempdir().unwrap();
    let claim = dir.path().join("all.yaml");
    std::fs::write(
        &claim,
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: all-nics\n\
         spec:\n  devices:\n    requests:\n    - name: nics\n      exactly:\n        \
         deviceClassName: dranet.net\n        allocationMode: All\n",
    )
    .unwrap();
    let claim = claim.to_str().unwrap();
    let sys = "testdata/nodes/edge-cases/sys";
    let (ok, out, err) = dranet(&["check", claim, "--sysfs", sys]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("ResourceClaim all-nics on node"), "{out}");
    for gone in ["cni0", "ifb0", "Veth_B", "veth-a", "net-kzsxi2c7ii"] {
        assert!(!out.contains(gone), "{gone} counted:\n{out}");
    }
    assert!(out.contains("pci-0000-00-03-0"), "{out}");
    // With --filter "" the daemon would publish them, and check says so too.
    let (ok, out, err) = dranet(&["check", claim, "--sysfs", sys, "--filter", ""]);
    assert!(ok, "{out}{err}");
    for there in ["cni0", "ifb0", "veth-a"] {
        assert!(out.contains(there), "{there} missing:\n{out}");
    }
}

/// Issue 47 M7: a webhook giving every device 30 attributes (named to sort before dranet's own)
/// costs no device what the default `--filter` reads: the veths and the bridge stay out (their
/// `type` is kept), the PCI NIC and the RDMA link without a netdev (`ibOnly`) stay in, and
/// `dranet inventory`, `dranet check --sysfs` and the daemon's publication agree.
#[test]
fn a_webhooks_thirty_attributes_neither_publish_a_veth_nor_hide_a_nic() {
    use dranet_cloud::fake::{FakeServer, Reply};
    let attrs: serde_json::Map<String, serde_json::Value> = (0..30)
        .map(|i| {
            (
                format!("a-webhook.example.com/attr{i:02}"),
                serde_json::json!({"int": i}),
            )
        })
        .collect();
    let attrs = serde_json::Value::Object(attrs).to_string();
    let hook = FakeServer::start_blocking(move |r, _| match (r.method.as_str(), r.path()) {
        ("GET", "/health") => Reply::Json(
            200,
            r#"{"cloudProvider": true, "profileProvider": false}"#.into(),
        ),
        ("POST", "/GetDeviceAttributes") => Reply::Json(200, attrs.clone()),
        ("POST", "/GetDeviceConfig") => Reply::Json(200, "{}".into()),
        _ => Reply::Json(404, "{}".into()),
    })
    .unwrap();
    let sys = root().join("testdata/nodes/edge-cases/sys");
    let flags = [
        "--cloud-provider-hint",
        "webhook",
        "--webhook-url",
        hook.endpoint.as_str(),
    ];
    let daemon = daemon_with(&sys, &[], Some(&hook.endpoint));
    assert_eq!(inventory(&sys, &flags), daemon, "inventory vs the daemon");
    let dir = tempfile::tempdir().unwrap();
    let claims_file = dir.path().join("claims.yaml");
    std::fs::write(&claims_file, claims()).unwrap();
    assert_eq!(
        check(&sys, &claims_file, &flags),
        daemon.devices,
        "check vs the daemon"
    );
    // The same devices as without the webhook.
    assert_eq!(daemon.devices, self::daemon(&sys, &[]).devices);

    // By name: what inventory shows, with the webhook's attributes where they fit.
    let sys = sys.to_str().unwrap();
    let mut args = vec![
        "inventory",
        "--sysfs",
        sys,
        "--node-name",
        NODE,
        "-o",
        "json",
    ];
    args.extend(flags);
    let (ok, out, err) = dranet(&args);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let devices = v["spec"]["devices"].as_array().unwrap();
    let by = |k: &str, want: &str| {
        devices
            .iter()
            .find(|d| d["attributes"][k]["string"] == want)
            .unwrap_or_else(|| panic!("no device with {k} {want}: {out}"))
    };
    let nic = by("pciAddress", "0000:00:03.0");
    assert_eq!(nic["attributes"].as_object().unwrap().len(), 32);
    assert!(nic["attributes"]["a-webhook.example.com/attr00"].is_object());
    let ib = devices
        .iter()
        .find(|d| d["attributes"]["ibOnly"]["bool"] == true)
        .unwrap_or_else(|| panic!("the RDMA link without a netdev is published: {out}"));
    assert!(ib["attributes"]["rdmaDevice"].is_object());
    for veth in ["veth-a", "Veth_B", "cni0", "ifb0"] {
        assert!(
            !devices
                .iter()
                .any(|d| d["attributes"]["ifName"]["string"] == veth),
            "{veth} published: {out}"
        );
    }
}
