//! The driver's claim handling on the fixtures of real nodes, without root: which configuration
//! applies, what is refused and why, and exactly which RDMA char devices each pod's containers
//! get. Moving links into pods is covered as root by dranet-podnet's tests and `e2e.rs`.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use dranet_core::{CharDeviceKind, Discover, Inventory};
use dranet_driver::{ClaimReader, NetworkDriver};
use dranet_kubeletplugin::ClaimToPrepare;
use dranet_kubeletplugin::k8s_openapi::api::resource::v1::{
    DeviceAllocationConfiguration, ResourceClaimConsumerReference,
};
use dranet_nri::PodSandbox;
use dranet_podnet::Attached;

use crate::support::{
    self,
    claims::{claim, opaque},
};

struct Node {
    _dir: tempfile::TempDir,
    state: tempfile::TempDir,
    sysfs: std::path::PathBuf,
    scans: Arc<AtomicUsize>,
}

impl Node {
    fn new(build: fn(&Path) -> std::io::Result<()>) -> Node {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path()).unwrap();
        Node {
            sysfs: dir.path().join("sys"),
            _dir: dir,
            state: tempfile::tempdir().unwrap(),
            scans: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn inventory(&self) -> Inventory {
        dranet_discovery::host(&self.sysfs, Default::default())
            .discover()
            .unwrap()
    }

    fn driver(&self) -> NetworkDriver {
        self.build(None)
    }

    /// A driver that reads claims through `reader`.
    fn driver_reading(&self, reader: ClaimReader) -> NetworkDriver {
        self.build(Some(reader))
    }

    fn build(&self, reader: Option<ClaimReader>) -> NetworkDriver {
        let mut b = support::driver_builder(&self.sysfs, self.state.path(), self.scans.clone());
        if let Some(r) = reader {
            b = b.claim_reader(r);
        }
        b.build().unwrap()
    }

    /// The published name of the device with this RDMA link or interface.
    fn device(&self, rdma_or_netdev: &str) -> String {
        let inv = self.inventory();
        inv.devices
            .iter()
            .find(|d| {
                d.rdma.as_ref().is_some_and(|r| r.name == rdma_or_netdev)
                    || d.netdev.as_ref().is_some_and(|n| n.name == rdma_or_netdev)
            })
            .map(|d| d.name.clone())
            .unwrap_or_else(|| panic!("no device {rdma_or_netdev} in {:?}", inv.devices))
    }
}

fn pod(uid: &str) -> PodSandbox {
    PodSandbox {
        id: format!("sandbox-{uid}"),
        name: format!("pod-{uid}"),
        namespace: "ml".into(),
        uid: uid.into(),
        ..Default::default()
    }
}

fn devs(d: &NetworkDriver, pod_uid: &str) -> Vec<String> {
    d.container_devices(pod_uid)
        .iter()
        .map(|c| format!("{} {}:{}", c.path, c.major, c.minor))
        .collect()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn gb300_pods_get_exactly_their_rdma_char_devices() {
    let node = Node::new(dranet_discovery::fixture::azure_nd_gb300_v6);
    let d = node.driver();
    let mlx0 = node.device("mlx5_0");
    let mlx2 = node.device("mlx5_2");
    assert_eq!(mlx0, "pci-0101-00-00-0");
    let rt = rt();
    let one = claim("one", &["pa"], &[("rdma", &mlx0)], vec![]);
    let prepared = rt.block_on(d.prepare_claim(&one)).unwrap();
    assert_eq!(prepared.devices.len(), 1);
    assert!(
        prepared.devices[0].cdi_device_ids.is_empty(),
        "the work is in the NRI hooks, not CDI"
    );
    let two = claim("two", &["pb"], &[("rdma", &mlx2)], vec![]);
    let two_prepared = rt.block_on(d.prepare_claim(&two)).unwrap();
    assert_eq!(
        devs(&d, "pa"),
        [
            "/dev/infiniband/issm0 231:64",
            "/dev/infiniband/rdma_cm 10:58",
            "/dev/infiniband/umad0 231:0",
            "/dev/infiniband/uverbs0 231:192",
        ]
    );
    assert_eq!(
        devs(&d, "pb"),
        [
            "/dev/infiniband/issm2 231:66",
            "/dev/infiniband/rdma_cm 10:58",
            "/dev/infiniband/umad2 231:2",
            "/dev/infiniband/uverbs2 231:194",
        ]
    );
    assert!(devs(&d, "someone-else").is_empty());

    // The NRI hook gives the container these, with cgroup rules, and nothing else.
    let adj = rt
        .block_on(dranet_nri::NriPlugin::create_container(
            &d,
            &pod("pa"),
            &Default::default(),
        ))
        .unwrap();
    let paths: Vec<&str> = adj.devices().iter().map(|x| x.path.as_str()).collect();
    assert_eq!(paths.len(), 4);
    assert!(
        !paths
            .iter()
            .any(|p| p.contains("uverbs1") || p.contains("uverbs2"))
    );

    // A pod with two claims gets both links' devices and rdma_cm once.
    rt.block_on(d.prepare_claim(&claim("three", &["pc"], &[("rdma", &mlx0)], vec![])))
        .unwrap();
    rt.block_on(d.prepare_claim(&claim("four", &["pc"], &[("rdma", &mlx2)], vec![])))
        .unwrap();
    let both = devs(&d, "pc");
    assert_eq!(both.len(), 7, "{both:?}");
    assert_eq!(both.iter().filter(|p| p.contains("rdma_cm")).count(), 1);

    // A restarted daemon knows what was prepared: the kubelet plugin hands back its checkpoint.
    drop(d);
    let d = node.driver();
    assert!(devs(&d, "pb").is_empty());
    d.restore_claims(vec![
        dranet_kubeletplugin::PreparedClaim {
            claim_ref: one.claim_ref.clone(),
            prepared,
        },
        dranet_kubeletplugin::PreparedClaim {
            claim_ref: two.claim_ref.clone(),
            prepared: two_prepared,
        },
    ]);
    assert_eq!(devs(&d, "pb").len(), 4);
    // Unprepare forgets; twice, or for a claim never seen, is fine.
    rt.block_on(d.unprepare_claim("uid-two")).unwrap();
    rt.block_on(d.unprepare_claim("uid-two")).unwrap();
    rt.block_on(d.unprepare_claim("never-prepared")).unwrap();
    assert!(devs(&d, "pb").is_empty());
    assert_eq!(devs(&d, "pa").len(), 4);
}

/// Soft-RoCE (`rxe`) on a veth and on a PCI NIC's netdev: the kernel deletes such a link when
/// its netdev changes namespace (seen on Debian's 6.1 in `tests/real_kernel.rs`), so a pod gets
/// its char devices and the netdev stays on the host; a config that needs the netdev is refused,
/// but for a child of it.
#[test]
fn a_software_rdma_link_is_given_as_char_devices_and_its_netdev_stays() {
    let node = Node::new(dranet_discovery::fixture::edge_cases);
    let d = node.driver();
    let rt = rt();
    for (rxe, netdev, uverbs) in [
        ("rxe1", "veth-a", "/dev/infiniband/uverbs"),
        ("rxe0", "rail0", "/dev/infiniband/uverbs"),
    ] {
        let dev = node.device(rxe);
        let pod_uid = format!("p-{rxe}");
        rt.block_on(d.prepare_claim(&claim(rxe, &[&pod_uid], &[("rdma", &dev)], vec![])))
            .unwrap();
        let c = d.claims_of_pod(&pod_uid);
        assert_eq!(
            c[0].devices[0].netdev, None,
            "{rxe}: {netdev} must not move"
        );
        assert_eq!(c[0].devices[0].rdma.as_deref(), Some(rxe));
        let given = devs(&d, &pod_uid);
        assert!(given.iter().any(|p| p.starts_with(uverbs)), "{given:?}");
        assert!(given.iter().any(|p| p.contains("rdma_cm")), "{given:?}");
        // Nothing moves, so even a pod on the host network may have it.
        rt.block_on(d.start_pod(&pod(&pod_uid))).unwrap();

        let err = rt
            .block_on(d.prepare_claim(&claim(
                &format!("{rxe}-cfg"),
                &["q"],
                &[("rdma", &dev)],
                vec![opaque(
                    "FromClaim",
                    None,
                    serde_json::json!({"interface": {"name": "net1"}}),
                )],
            )))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is a software RDMA link")
                && !err.contains(&format!("{rxe} on {netdev}"))
                && err.contains("deletes it when")
                && err.contains("may not set interface"),
            "{err}"
        );

        // A child of the netdev leaves it on the host, with its RDMA link: that is allowed,
        // and the netdev is the child's parent (seen with ipvlan on Debian's 6.1).
        let child_pod = format!("c-{rxe}");
        rt.block_on(d.prepare_claim(&claim(
            &format!("{rxe}-child"),
            &[&child_pod],
            &[("rdma", &dev)],
            vec![opaque(
                "FromClaim",
                None,
                serde_json::json!({"interface": {"name": "net1", "type": "IPVLAN",
                    "addresses": ["10.9.0.2/24"]}}),
            )],
        )))
        .unwrap();
        let c = d.claims_of_pod(&child_pod);
        assert_eq!(c[0].devices[0].netdev.as_deref(), Some(netdev), "{rxe}");
        assert_eq!(c[0].devices[0].rdma.as_deref(), Some(rxe));
    }
}

#[test]
fn multi_port_hca_and_ucm_devices_are_all_given() {
    let node = Node::new(dranet_discovery::fixture::edge_cases);
    // A ucm device for mlx4_0, as old kernels (ib_ucm) expose it.
    let hca = std::fs::canonicalize(node.sysfs.join("class/infiniband/mlx4_0")).unwrap();
    let pci = hca.parent().unwrap().parent().unwrap();
    let ucm = pci.join("infiniband_cm/ucm0");
    std::fs::create_dir_all(&ucm).unwrap();
    std::fs::write(ucm.join("ibdev"), "mlx4_0").unwrap();
    std::fs::write(ucm.join("dev"), "231:224").unwrap();
    std::fs::create_dir_all(node.sysfs.join("class/infiniband_cm")).unwrap();
    std::os::unix::fs::symlink(&ucm, node.sysfs.join("class/infiniband_cm/ucm0")).unwrap();

    let d = node.driver();
    let dev = node.device("mlx4_0");
    rt().block_on(d.prepare_claim(&claim("hca", &["p"], &[("ib", &dev)], vec![])))
        .unwrap();
    let got = d.container_devices("p");
    let kinds = |k: CharDeviceKind| got.iter().filter(|c| c.kind == k).count();
    assert_eq!(kinds(CharDeviceKind::Uverbs), 1);
    assert_eq!(kinds(CharDeviceKind::Umad), 2, "one per port: {got:?}");
    assert_eq!(kinds(CharDeviceKind::Issm), 2, "one per port: {got:?}");
    assert_eq!(kinds(CharDeviceKind::Ucm), 1, "{got:?}");
    assert!(
        got.iter()
            .any(|c| c.path == "/dev/infiniband/ucm0" && c.minor == 224)
    );
}

#[test]
fn bad_claims_are_refused_with_the_reason() {
    let node = Node::new(dranet_discovery::fixture::azure_nd_gb300_v6);
    let d = node.driver();
    let mlx0 = node.device("mlx5_0");
    let rt = rt();
    let err = |c: ClaimToPrepare| rt.block_on(d.prepare_claim(&c)).unwrap_err().to_string();

    // Network settings on an IB-only device.
    let e = err(claim(
        "ib",
        &["p"],
        &[("rdma", &mlx0)],
        vec![opaque(
            "FromClaim",
            None,
            serde_json::json!({"interface": {"mtu": 4000}}),
        )],
    ));
    assert!(
        e.contains("ml/ib") && e.contains("has no network interface"),
        "{e}"
    );

    // An unknown key, named.
    let e = err(claim(
        "typo",
        &["p"],
        &[("rdma", &mlx0)],
        vec![opaque(
            "FromClaim",
            Some(&["rdma"]),
            serde_json::json!({"interfaces": {}}),
        )],
    ));
    assert!(e.contains("interfaces"), "{e}");

    // Not consumed by a pod.
    let mut c = claim("dep", &["p"], &[("rdma", &mlx0)], vec![]);
    if let Some(s) = c.claim.status.as_mut() {
        s.reserved_for = Some(vec![ResourceClaimConsumerReference {
            api_group: Some("batch".into()),
            resource: "jobs".into(),
            name: "train".into(),
            uid: "j".into(),
        }]);
    }
    let e = err(c);
    assert!(e.contains("jobs.batch") && e.contains("only pods"), "{e}");

    // A device this node does not have: one rescan, then a clear error.
    let before = node.scans.load(Ordering::SeqCst);
    let e = err(claim(
        "gone",
        &["p"],
        &[("rdma", "pci-0999-00-00-0")],
        vec![],
    ));
    assert!(
        e.contains("pci-0999-00-00-0") && e.contains("not on this node"),
        "{e}"
    );
    assert_eq!(
        node.scans.load(Ordering::SeqCst),
        before + 1,
        "rescanned once"
    );
    assert!(
        d.container_devices("p").is_empty(),
        "nothing recorded for refused claims"
    );
}

#[test]
fn vf_mtu_above_its_pf_is_refused_and_host_network_pods_too() {
    let node = Node::new(|d| dranet_discovery::fixture::sriov_node(d, 4));
    let d = node.driver();
    let vf = node.device("ens1f0v1");
    let rt = rt();
    let e = rt
        .block_on(d.prepare_claim(&claim(
            "jumbo",
            &["p"],
            &[("nic", &vf)],
            vec![opaque(
                "FromClass",
                None,
                serde_json::json!({"interface": {"mtu": 9500}}),
            )],
        )))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("9500") && e.contains("PF") && e.contains("9000"),
        "{e}"
    );

    // At the PF's MTU it is fine; a pod without its own network namespace cannot take it.
    rt.block_on(d.prepare_claim(&claim(
        "ok",
        &["hostnet"],
        &[("nic", &vf)],
        vec![opaque(
            "FromClass",
            None,
            serde_json::json!({"interface": {"mtu": 9000}}),
        )],
    )))
    .unwrap();
    let e = rt
        .block_on(d.start_pod(&pod("hostnet")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ml/pod-hostnet") && e.contains("host network") && e.contains(&vf),
        "{e}"
    );
}

#[test]
fn status_says_what_the_pod_got() {
    let node = Node::new(dranet_discovery::fixture::azure_nd_gb300_v6);
    let d = node.driver();
    let mlx0 = node.device("mlx5_0");
    rt().block_on(d.prepare_claim(&claim("s", &["p"], &[("rdma", &mlx0)], vec![])))
        .unwrap();
    let rec = &d.claims_of_pod("p")[0];
    let now = dranet_kubeletplugin::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        dranet_kubeletplugin::k8s_openapi::jiff::Timestamp::now(),
    );
    let s = dranet_driver::driver::device_status(&rec.devices[0], None, &now);
    let conds: Vec<(String, String)> = s
        .conditions
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.reason))
        .collect();
    assert_eq!(
        conds,
        [
            ("Ready".to_string(), "RDMAOnlyDeviceReady".to_string()),
            ("RDMALinkReady".to_string(), "RDMALinkReady".to_string())
        ]
    );
    assert!(s.network_data.is_none());
    // A netdev in the pod reports its name, addresses and MAC.
    let mut nic = rec.devices[0].clone();
    nic.netdev = Some("eth1".into());
    let a = Attached {
        pod_name: "net1".into(),
        pod_index: 3,
        addresses: vec!["10.0.0.2/24".into()],
        mac: Some("02:00:00:00:00:01".into()),
        mtu: Some(1500),
    };
    let s = dranet_driver::driver::device_status(&nic, Some(&a), &now);
    let nd = s.network_data.unwrap();
    assert_eq!(nd.interface_name.as_deref(), Some("net1"));
    assert_eq!(nd.ips.unwrap(), ["10.0.0.2/24"]);
    assert_eq!(s.conditions.unwrap()[0].reason, "NetworkDeviceReady");
    // SLAAC: the addresses the kernel autoconfigured, as upstream's SLAACReady says them.
    let mut cfg = (*nic.config).clone();
    cfg.interface.addressing = Some(dranet_core::Addressing::Slaac);
    cfg.interface.addresses = vec!["10.0.0.2/24".into()];
    nic.config = std::sync::Arc::new(cfg);
    let mut a = a;
    a.addresses.push("2001:db8:77:0:aa:bbff:fecc:1/64".into());
    let s = dranet_driver::driver::device_status(&nic, Some(&a), &now);
    let slaac = s
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "SLAACReady")
        .expect("SLAACReady");
    assert_eq!(
        (
            slaac.status.as_str(),
            slaac.reason.as_str(),
            slaac.message.as_str()
        ),
        (
            "True",
            "SLAACReady",
            "autoconfigured addresses: 2001:db8:77:0:aa:bbff:fecc:1/64"
        )
    );
    assert_eq!(
        s.network_data.unwrap().ips.unwrap(),
        ["10.0.0.2/24", "2001:db8:77:0:aa:bbff:fecc:1/64"]
    );
}

/// The example of docs/claims.md (`examples/azure_aks/nic-config.yaml`) merges as it says.
#[test]
fn the_documented_config_example_merges_as_documented() {
    use dranet_kubeletplugin::k8s_openapi::api::resource::v1::{
        DeviceClass, ResourceClaimTemplate,
    };
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/azure_aks/nic-config.yaml"),
    )
    .unwrap();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_str_multiple(&text).unwrap();
    let class: DeviceClass = serde_json::from_value(docs[0].clone()).unwrap();
    let template: ResourceClaimTemplate = serde_json::from_value(docs[1].clone()).unwrap();
    // What the scheduler writes into the allocation: the class's entries, then the claim's.
    let mut config: Vec<DeviceAllocationConfiguration> = class
        .spec
        .config
        .unwrap_or_default()
        .into_iter()
        .map(|c| DeviceAllocationConfiguration {
            source: "FromClass".into(),
            requests: None,
            opaque: c.opaque,
        })
        .collect();
    config.extend(
        template
            .spec
            .spec
            .devices
            .and_then(|d| d.config)
            .unwrap_or_default()
            .into_iter()
            .map(|c| DeviceAllocationConfiguration {
                source: "FromClaim".into(),
                requests: c.requests,
                opaque: c.opaque,
            }),
    );
    let node = Node::new(|d| dranet_discovery::fixture::sriov_node(d, 2));
    let d = node.driver();
    let vf = node.device("ens1f0v0");
    rt().block_on(d.prepare_claim(&claim("doc", &["p"], &[("nic", &vf)], config)))
        .unwrap();
    let got = &d.claims_of_pod("p")[0].devices[0].config;
    assert_eq!(got.interface.name, "net1");
    assert_eq!(got.interface.mtu, Some(9000));
    assert_eq!(got.interface.addresses, ["10.9.8.7/24"]);
    let dests: Vec<&str> = got.routes.iter().map(|r| r.destination.as_str()).collect();
    assert_eq!(dests, ["10.10.0.0/16", "10.20.0.0/16"]);
}

/// The `NetworkConfig` example of docs/claims.md is valid as written.
#[test]
fn the_documented_network_config_example_parses() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/claims.md"))
            .unwrap();
    let block = doc
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains("privateFlags"))
        .expect("docs/claims.md has the NetworkConfig example");
    let v: serde_json::Value = serde_saphyr::from_str(block).unwrap();
    let params = &v["config"][0]["opaque"]["parameters"];
    let json = serde_json::to_value(params).unwrap();
    let c = dranet_driver::claim::parse_parameters(&json).unwrap();
    assert_eq!(c.interface.name, "net1");
    assert_eq!(c.routes.len(), 2);
    assert_eq!(c.ethtool.map(|e| e.features.len()), Some(2));
}

/// The daemon's wrapper records upstream's events on failures and counts every call.
#[test]
fn failures_become_events_on_the_claim_and_the_pod() {
    use dranet_driver::daemon::metrics::DaemonMetrics;
    use dranet_driver::daemon::{EventWriter, Instrumented};
    use dranet_kubeletplugin::Driver;
    use dranet_kubeletplugin::k8s_openapi::api::core::v1::Event;
    use dranet_nri::NriPlugin;

    let node = Node::new(dranet_discovery::fixture::azure_nd_gb300_v6);
    let mlx0 = node.device("mlx5_0");
    let events: Arc<std::sync::Mutex<Vec<Event>>> = Arc::default();
    let sink = events.clone();
    let writer: EventWriter = Arc::new(move |ev| {
        sink.lock().unwrap().push(ev);
        Box::pin(async { Ok(()) })
    });
    let metrics = Arc::new(DaemonMetrics::new());
    let hooks = Instrumented::new(
        Arc::new(node.driver()),
        metrics.clone(),
        Some(writer),
        "node-a",
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // A claim for a device this node does not have.
        let bad = claim("gone", &["p1"], &[("nic", "pci-ffff-00-00-0")], vec![]);
        assert!(hooks.prepare(bad).await.is_err());
        // An IB-only claim prepares, and its pod starts with no event.
        let ok = claim("fine", &["p2"], &[("nic", &mlx0)], vec![]);
        hooks.prepare(ok).await.unwrap();
        hooks.run_pod_sandbox(&pod("p2")).await.unwrap();
        // A pod with no claim of ours: noop.
        hooks.run_pod_sandbox(&pod("p3")).await.unwrap();
        // Events are written in the background.
        for _ in 0..100 {
            if !events.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
    // A netdev for a pod on the host network (no network namespace to move it into).
    let sriov = Node::new(|d| dranet_discovery::fixture::sriov_node(d, 2));
    let vf = sriov
        .inventory()
        .devices
        .iter()
        .find(|d| d.netdev.is_some())
        .map(|d| d.name.clone())
        .expect("a device with a netdev");
    let on_sriov = Instrumented::new(
        Arc::new(sriov.driver()),
        metrics.clone(),
        Some({
            let sink = events.clone();
            Arc::new(move |ev| {
                sink.lock().unwrap().push(ev);
                Box::pin(async { Ok(()) })
            })
        }),
        "node-b",
    );
    rt.block_on(async {
        on_sriov
            .prepare(claim("vf", &["p4"], &[("nic", &vf)], vec![]))
            .await
            .unwrap();
        assert!(on_sriov.run_pod_sandbox(&pod("p4")).await.is_err());
        for _ in 0..100 {
            if events.lock().unwrap().len() == 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    let pod_ev = &events[1];
    assert_eq!(pod_ev.reason.as_deref(), Some("NetworkDeviceAttachFailed"));
    assert_eq!(pod_ev.involved_object.kind.as_deref(), Some("Pod"));
    assert_eq!(pod_ev.involved_object.uid.as_deref(), Some("p4"));
    assert!(
        pod_ev
            .message
            .as_deref()
            .unwrap_or("")
            .contains("host network"),
        "{pod_ev:?}"
    );
    let ev = &events[0];
    assert_eq!(ev.reason.as_deref(), Some("ClaimPrepareFailed"));
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(ev.involved_object.kind.as_deref(), Some("ResourceClaim"));
    assert_eq!(ev.involved_object.name.as_deref(), Some("gone"));
    assert_eq!(ev.involved_object.namespace.as_deref(), Some("ml"));
    assert_eq!(ev.metadata.namespace.as_deref(), Some("ml"));
    assert!(
        ev.message
            .as_deref()
            .unwrap_or("")
            .contains("pci-ffff-00-00-0"),
        "{ev:?}"
    );
    let text = metrics.encode();
    for want in [
        r#"dranet_driver_nri_plugin_requests_total{method="RunPodSandbox",status="success"} 1"#,
        r#"dranet_driver_nri_plugin_requests_total{method="RunPodSandbox",status="noop"} 1"#,
        r#"dranet_driver_pod_device_attach_total{op="attach",status="success"} 1"#,
        r#"dranet_driver_pod_device_attach_total{op="attach",status="failed"} 1"#,
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }
}

/// A device with a network interface lives in one pod's network namespace: a claim of one that
/// is reserved for two pods is refused at prepare. Claims of RDMA-only devices may be shared
/// (in the kernel's shared RDMA mode every namespace sees the device).
#[test]
fn a_netdev_claim_reserved_for_two_pods_is_refused_at_prepare() {
    let node = Node::new(|d| dranet_discovery::fixture::sriov_node(d, 2));
    let d = node.driver();
    let vf = node.device("ens1f0v0");
    let rt = rt();
    let e = rt
        .block_on(d.prepare_claim(&claim("two", &["pa", "pb"], &[("nic", &vf)], vec![])))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ml/two") && e.contains("2 pods") && e.contains(&vf) && e.contains("one pod"),
        "{e}"
    );
    assert!(!e.contains("ens1f0v0"), "host link name in {e}");
    assert!(d.claims_of_pod("pa").is_empty() && d.claims_of_pod("pb").is_empty());

    let gb = Node::new(dranet_discovery::fixture::azure_nd_gb300_v6);
    let d = gb.driver();
    let mlx0 = gb.device("mlx5_0");
    rt.block_on(d.prepare_claim(&claim("shared", &["pa", "pb"], &[("rdma", &mlx0)], vec![])))
        .unwrap();
    assert_eq!(devs(&d, "pa"), devs(&d, "pb"));
    assert_eq!(devs(&d, "pa").len(), 4);
}

/// The kubelet prepares a claim once per node: a pod added to its `reservedFor` later is never
/// announced. At its sandbox start the driver reads the claims of the pod's namespace it holds
/// for other pods: a netdev claim is refused with an error saying why; an RDMA-only one gives
/// the late pod its devices too.
#[test]
fn a_pod_added_to_a_claim_after_prepare_gets_an_error_or_its_shared_devices() {
    let node = Node::new(|d| dranet_discovery::fixture::sriov_node(d, 2));
    let vf = node.device("ens1f0v0");
    let api = FakeClaims::default();
    let d = node.driver_reading(api.reader());
    let rt = rt();
    rt.block_on(d.prepare_claim(&claim("nic", &["pa"], &[("nic", &vf)], vec![])))
        .unwrap();
    // Later the scheduler adds pod b to the claim.
    api.put(claim("nic", &["pa", "pb"], &[("nic", &vf)], vec![]));
    let e = rt
        .block_on(d.start_pod(&pod("pb")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ml/pod-pb") && e.contains("ml/nic") && e.contains("after"),
        "{e}"
    );
    assert!(!e.contains("ens1f0v0"), "host link name in {e}");
    // A pod of the namespace that is not a consumer starts as before; one of another namespace
    // costs no read.
    rt.block_on(d.start_pod(&pod("pc"))).unwrap();
    let before = api.reads.load(Ordering::SeqCst);
    let mut elsewhere = pod("pd");
    elsewhere.namespace = "other".into();
    rt.block_on(d.start_pod(&elsewhere)).unwrap();
    assert_eq!(api.reads.load(Ordering::SeqCst), before);

    // RDMA-only, shared: the late pod gets the devices.
    let gb = Node::new(dranet_discovery::fixture::azure_nd_gb300_v6);
    let mlx0 = gb.device("mlx5_0");
    let api = FakeClaims::default();
    let d = gb.driver_reading(api.reader());
    let ib = claim("ib", &["pa"], &[("rdma", &mlx0)], vec![]);
    let ib_prepared = rt.block_on(d.prepare_claim(&ib)).unwrap();
    api.put(claim("ib", &["pa", "pb"], &[("rdma", &mlx0)], vec![]));
    assert!(devs(&d, "pb").is_empty());
    rt.block_on(d.start_pod(&pod("pb"))).unwrap();
    let want = devs(&d, "pa");
    assert_eq!(devs(&d, "pb"), want);

    // A restarted daemon gets back the checkpoint's record, which names the pods of prepare
    // time; the late pod's sandbox record says it joined, and its new containers still get
    // the devices.
    drop(d);
    let d = gb.driver_reading(api.reader());
    d.restore_claims(vec![dranet_kubeletplugin::PreparedClaim {
        claim_ref: ib.claim_ref.clone(),
        prepared: ib_prepared,
    }]);
    assert_eq!(devs(&d, "pb"), want);
}

/// Claims as the API server holds them now, read through a [`ClaimReader`] that counts reads.
#[derive(Default)]
struct FakeClaims {
    claims: Arc<Mutex<Vec<ClaimToPrepare>>>,
    reads: Arc<AtomicUsize>,
}

impl FakeClaims {
    fn put(&self, c: ClaimToPrepare) {
        self.claims.lock().unwrap().push(c);
    }

    fn reader(&self) -> ClaimReader {
        let (held, count) = (self.claims.clone(), self.reads.clone());
        Arc::new(move |ns: String, name: String| {
            count.fetch_add(1, Ordering::SeqCst);
            let found = held
                .lock()
                .unwrap()
                .iter()
                .find(|c| c.claim_ref.namespace == ns && c.claim_ref.name == name)
                .map(|c| c.claim.clone());
            Box::pin(async move { found.ok_or_else(|| format!("claim {ns}/{name} not found")) })
        })
    }
}

/// Everything the kernel or this driver would refuse at every sandbox start is refused at
/// prepare, naming the field; fields dranet-rs does not implement yet say so. No message names
/// the host's interface.
#[test]
fn claim_config_that_cannot_be_applied_is_refused_at_prepare() {
    let node = Node::new(|d| dranet_discovery::fixture::sriov_node(d, 2));
    let d = node.driver();
    let vf = node.device("ens1f0v0");
    let rt = rt();
    let cases = [
        (
            serde_json::json!({"interface": {"dhcp": true, "addresses": ["10.0.0.2/24"]}}),
            &[
                "interface.addresses",
                "DHCP gives the interface its address",
            ][..],
        ),
        (
            serde_json::json!({"profile": "fast"}),
            &["profile \"fast\"", "no profile provider is configured"],
        ),
        (
            serde_json::json!({"interface": {"hardwareAddr": "02:00:00:00:00"}}),
            &["interface.hardwareAddr", "02:00:00:00:00"],
        ),
        (
            serde_json::json!({"interface": {"hardwareAddr": "01:00:5e:00:00:01"}}),
            &["interface.hardwareAddr", "multicast"],
        ),
        (
            serde_json::json!({"interface": {"hardwareAddr": "00:00:00:00:00:00"}}),
            &["interface.hardwareAddr", "zero"],
        ),
        (
            serde_json::json!({"interface": {"name": "net/1"}}),
            &["interface.name", "net/1"],
        ),
        (
            serde_json::json!({"interface": {"name": "net%d"}}),
            &["interface.name", "%"],
        ),
        (
            serde_json::json!({"interface": {"name": ".."}}),
            &["interface.name", ".."],
        ),
        (
            serde_json::json!({"interface": {"name": "a-very-long-name"}}),
            &["interface.name", "15"],
        ),
        (
            serde_json::json!({"interface": {"gsoMaxSize": -1}}),
            &["interface.gsoMaxSize", "-1"],
        ),
        (
            serde_json::json!({"neighbors": [{"destination": "10.0.0.9", "hardwareAddr": "zz"}]}),
            &["neighbors[0].hardwareAddr", "zz"],
        ),
        (
            serde_json::json!({"routes": [{"destination": "10.0.0.0/8", "gateway": "fd00::1"}]}),
            &["routes[0]", "family"],
        ),
        (
            serde_json::json!({"interface": {"vrf": {"name": "blue/1", "table": 10}}}),
            &["interface.vrf.name", "blue/1"],
        ),
        (
            serde_json::json!({"interface": {"vrf": {"name": "blue", "table": 0}}}),
            &["interface.vrf.table", "0"],
        ),
    ];
    for (i, (cfg, needles)) in cases.iter().enumerate() {
        let c = claim(
            &format!("bad{i}"),
            &["p"],
            &[("nic", &vf)],
            vec![opaque("FromClaim", None, cfg.clone())],
        );
        let e = match rt.block_on(d.prepare_claim(&c)) {
            Ok(_) => panic!("{cfg} was accepted"),
            Err(e) => e.to_string(),
        };
        for n in *needles {
            assert!(e.contains(n), "{cfg}: {n:?} not in {e}");
        }
        assert!(!e.contains("ens1f0v0"), "host link name in {e}");
    }
    // `false` for the fields not implemented is what dranet-rs does anyway.
    rt.block_on(d.prepare_claim(&claim(
        "fine",
        &["p"],
        &[("nic", &vf)],
        vec![opaque(
            "FromClaim",
            None,
            serde_json::json!({"interface": {"dhcp": false, "disableEbpfPrograms": false}}),
        )],
    )))
    .unwrap();
}

/// A cloud whose refresh ends when the test opens `gate`, and which from then on gives every
/// NIC MTU 9000.
struct GatedCloud {
    gate: tokio::sync::watch::Receiver<bool>,
    answered: std::sync::atomic::AtomicBool,
}

impl dranet_core::CloudProvider for GatedCloud {
    fn name(&self) -> &str {
        "gated"
    }
    fn node_attributes(&self) -> dranet_core::Attributes {
        dranet_core::Attributes::new()
    }
    fn device_config(
        &self,
        _: &dranet_core::DeviceIdentifiers,
    ) -> Option<dranet_core::NetworkConfig> {
        self.answered.load(Ordering::SeqCst).then(|| {
            serde_json::from_value(serde_json::json!({"interface": {"mtu": 9000}})).unwrap()
        })
    }
    fn refresh<'a>(
        &'a self,
        _: &'a [dranet_core::DeviceIdentifiers],
    ) -> dranet_core::BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut gate = self.gate.clone();
            let _ = gate.wait_for(|open| *open).await;
            self.answered.store(true, Ordering::SeqCst);
        })
    }
}

/// Just after the daemon starts, the cloud provider is still being asked about the devices (off
/// the daemon's main loop): a claim prepared then waits for the answer, and gets the provider's
/// configuration under its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepare_waits_for_the_cloud_providers_answer_about_its_devices() {
    let node = Node::new(|d| dranet_discovery::fixture::sriov_node(d, 2));
    let (open, gate) = tokio::sync::watch::channel(false);
    let cloud = Arc::new(GatedCloud {
        gate,
        answered: Default::default(),
    });
    let d = Arc::new(
        support::driver_builder(&node.sysfs, node.state.path(), node.scans.clone())
            .cloud(cloud)
            .build()
            .unwrap(),
    );
    // As the daemon does after its first scan.
    let ids = d
        .inventory()
        .devices
        .iter()
        .map(dranet_core::DeviceIdentifiers::of)
        .collect();
    d.provider_refresh().request(ids);
    let vf = node.device("ens1f0v0");
    let prepare = {
        let d = d.clone();
        tokio::spawn(async move {
            d.prepare_claim(&claim("nic", &["pa"], &[("nic", &vf)], vec![]))
                .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !prepare.is_finished(),
        "prepared before the provider answered about the device"
    );
    open.send_replace(true);
    tokio::time::timeout(std::time::Duration::from_secs(60), prepare)
        .await
        .expect("the prepare still waits once the provider answered")
        .unwrap()
        .unwrap();
    let mtu = d.claims_of_pod("pa")[0].devices[0].config.interface.mtu;
    assert_eq!(
        mtu,
        Some(9000),
        "the provider's configuration under the claim's"
    );
}
