//! End to end: the `dra.net` driver (its kubelet plugin and NRI plugin in one process, as
//! `dranet run` has them) against a real containerd 1.7 with NRI. The test plays the kubelet:
//! claims live in the fake API server, NodePrepareResources goes over the plugin's socket, and
//! pods are started through CRI.
//!
//! Discovery sees the Azure ND GB300 v6 fixture (four IB-only ConnectX VFs, `mlx5_0`…`mlx5_3`)
//! plus one real link: a veth `v0` in a network namespace the test creates, which the driver
//! treats as its host namespace. The driver runs as a child process so that it can be SIGKILLed
//! and restarted in the middle. Checked:
//!
//! - a container of a pod allocated `mlx5_0` sees `uverbs0` (c 231:192), `umad0`, `issm0` and
//!   `rdma_cm`, and none of `uverbs1-3`; a pod allocated `mlx5_2` sees only its own;
//! - a pod allocated the veth gets it named, addressed and routed as its claim says;
//! - the claims' status carries the network data and conditions;
//! - after the driver is SIGKILLed (the veth in the pod) and restarted, stopping the pod gives
//!   the host its link back exactly as it was;
//! - a pod started while the driver is down (containerd runs it without the plugin) gets its
//!   veth `v1` when the restarted driver's Synchronize comes.
//!
//! Needs root; without root it prints a SKIP line and passes.

use dranet_testkit::containerd as lab;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dranet_core::{Discover, Netdev, NetworkDevice};
use dranet_driver::{NetworkDriver, Rescan, status_writer};
use dranet_kubeletplugin::fake::{FakeApiServer, FakeKubelet, allocated_claim};
use dranet_kubeletplugin::k8s_openapi::api::resource::v1::{
    AllocatedDeviceStatus, DeviceAllocationConfiguration, DeviceRequestAllocationResult,
    OpaqueDeviceConfiguration, ResourceClaimConsumerReference,
};
use dranet_kubeletplugin::k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use dranet_kubeletplugin::{ClaimRef, KubeClient, KubeletPlugin};
use dranet_nri::RunnerBuilder;
use dranet_podnet::PodNet;
use dranet_podnet::netns::Netns;
use dranet_podnet::rdma::NetnsMode;
use lab::Lab;

use crate::support::{Ns, host_with_veth};

const NODE: &str = "node-a";
const DRIVER: &str = "dra.net";
const LINK: &str = "v0";
/// The veth a pod started while the driver is down claims.
const LATE_LINK: &str = "v1";

/// A veth as discovery describes a non-PCI netdev: device `v0` for link `v0`.
fn veth_device(ns: &Netns, link: &str) -> NetworkDevice {
    let read = |attr: &str| {
        ns.run(|| std::fs::read_to_string(format!("/sys/class/net/{link}/{attr}")))
            .ok()
            .and_then(|r| r.ok())
            .map(|s| s.trim().to_string())
    };
    let mac = read("address");
    let mtu = read("mtu").and_then(|m| m.parse().ok());
    NetworkDevice {
        name: dranet_core::names::netdev_device_name(link),
        pci: None,
        netdev: Some(Netdev {
            name: link.into(),
            mac,
            mtu,
            kind: Some("veth".into()),
            virtual_: true,
            ..Default::default()
        }),
        rdma: None,
    }
}

/// The driver daemon, when the e2e test runs this binary as its child.
#[test]
fn driver_child() {
    let Ok(state) = std::env::var("DRANET_E2E_STATE") else {
        return; // only meaningful as the e2e test's child
    };
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let (kubelet, nri, api_url, sysfs, hostns) = (
        env("DRANET_E2E_KUBELET"),
        env("DRANET_E2E_NRI"),
        env("DRANET_E2E_API"),
        PathBuf::from(env("DRANET_E2E_SYSFS")),
        env("DRANET_E2E_HOSTNS"),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let host = Netns::open(&hostns).unwrap();
        let veths = [veth_device(&host, LINK), veth_device(&host, LATE_LINK)];
        let podnet = PodNet::new(host, Path::new(&state).join("podnet")).unwrap();
        let rescan: Rescan = Arc::new(move || {
            let mut inv = dranet_discovery::host(&sysfs, Default::default())
                .discover()
                .map_err(|e| e.to_string())?;
            inv.devices.extend(veths.iter().cloned());
            Ok(inv)
        });
        let api = KubeClient::for_url(&api_url).unwrap().field_manager(DRIVER);
        let writer = status_writer(api.clone());
        let driver = tokio::task::spawn_blocking(move || {
            NetworkDriver::builder(podnet, Path::new(&state).join("driver"), rescan)
                .status(writer)
                .rdma_mode(NetnsMode::Shared)
                .build()
        })
        .await
        .unwrap()
        .unwrap();
        let driver = Arc::new(driver);
        let plugin = KubeletPlugin::builder(driver.clone(), api)
            .driver_name(DRIVER)
            .node_name(NODE)
            .kubelet_root_dir(&kubelet)
            .start()
            .await
            .unwrap();
        let runner = RunnerBuilder::new()
            .socket(&nri)
            .name("dranet")
            .index(10)
            .from_env(false)
            .build_shared(driver)
            .unwrap();
        let connected = runner.watch_connection();
        tokio::spawn(runner.run());
        for _ in 0..2000 {
            if *connected.borrow() == dranet_nri::ConnectionState::Registered {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        println!("READY {}", plugin.registration_socket().display());
        std::future::pending::<()>().await;
    });
}

struct Daemon {
    child: Child,
    registration: PathBuf,
}

impl Daemon {
    fn start(env: &[(&str, String)]) -> Daemon {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "e2e::driver_child",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let mut lines = BufReader::new(out).lines();
        let registration = loop {
            match lines.next() {
                Some(Ok(l)) => {
                    // libtest may have written "test driver_child ... " on the same line.
                    if let Some((_, p)) = l.split_once("READY ") {
                        break PathBuf::from(p.trim());
                    }
                }
                _ => panic!("the driver child exited before it was ready"),
            }
        };
        // Keep draining its stdout so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Daemon {
            child,
            registration,
        }
    }

    fn kill(mut self) {
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn opaque(v: serde_json::Value) -> DeviceAllocationConfiguration {
    DeviceAllocationConfiguration {
        source: "FromClaim".into(),
        requests: None,
        opaque: Some(OpaqueDeviceConfiguration {
            driver: DRIVER.into(),
            parameters: RawExtension(v),
        }),
    }
}

/// Puts an allocated claim of one device, reserved for one pod, into the API server.
fn put_claim(
    api: &FakeApiServer,
    name: &str,
    device: &str,
    pod: (&str, &str),
    config: Vec<DeviceAllocationConfiguration>,
) -> ClaimRef {
    let r = ClaimRef {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    };
    let mut claim = allocated_claim(
        &r,
        vec![DeviceRequestAllocationResult {
            request: "nic".into(),
            driver: DRIVER.into(),
            pool: NODE.into(),
            device: device.into(),
            ..Default::default()
        }],
    );
    if let Some(s) = claim.status.as_mut() {
        s.reserved_for = Some(vec![ResourceClaimConsumerReference {
            api_group: None,
            resource: "pods".into(),
            name: pod.0.into(),
            uid: pod.1.into(),
        }]);
        if let Some(d) = s.allocation.as_mut().and_then(|a| a.devices.as_mut()) {
            d.config = Some(config);
        }
    }
    api.put_claim(claim);
    r
}

fn device_status(api: &FakeApiServer, name: &str) -> Vec<AllocatedDeviceStatus> {
    api.claim("default", name)
        .and_then(|c| c.status)
        .and_then(|s| s.devices)
        .unwrap_or_default()
}

fn out(v: &serde_json::Value) -> String {
    v["out"].as_str().unwrap_or_default().to_string()
}

#[test]
fn driver_against_real_containerd() {
    let t0 = Instant::now();
    if !lab::ready_or_skip("dranet-driver e2e test") {
        return;
    }
    let mut lab = Lab::new(t0, "dranete2e0", "10.244.198.0/24");
    lab.start_containerd();
    lab.prepare_images_and_stubs();
    lab.step("containerd up, images imported");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let api = rt.block_on(FakeApiServer::start()).unwrap();
    api.add_node(NODE);
    let fixture = tempfile::tempdir().unwrap();
    dranet_discovery::fixture::azure_nd_gb300_v6(fixture.path()).unwrap();
    let host: Ns = host_with_veth("e2e");
    host.ip(&[
        "link", "add", LATE_LINK, "type", "veth", "peer", "name", "v1p",
    ]);
    let host_before = host.dump();
    let state = tempfile::tempdir().unwrap();
    let kubelet_root_dir = tempfile::tempdir().unwrap();
    let env = vec![
        ("DRANET_E2E_STATE", state.path().display().to_string()),
        (
            "DRANET_E2E_KUBELET",
            kubelet_root_dir.path().display().to_string(),
        ),
        ("DRANET_E2E_NRI", lab.nri_socket().display().to_string()),
        ("DRANET_E2E_API", api.url()),
        (
            "DRANET_E2E_SYSFS",
            fixture.path().join("sys").display().to_string(),
        ),
        ("DRANET_E2E_HOSTNS", host.path().display().to_string()),
    ];
    let daemon = Daemon::start(&env);
    lab.step("driver up: kubelet plugin registered, NRI plugin connected");
    let kubelet = rt
        .block_on(FakeKubelet::connect(&daemon.registration))
        .unwrap();

    // Three pods: two RDMA-only, one taking the veth with a config.
    let (uid_a, uid_b, uid_c) = (
        "0a6f3c1e-0000-4000-8000-0000000000a1",
        "0a6f3c1e-0000-4000-8000-0000000000b2",
        "0a6f3c1e-0000-4000-8000-0000000000c3",
    );
    let claim_a = put_claim(&api, "rdma-a", "pci-0101-00-00-0", ("pod-a", uid_a), vec![]);
    let claim_b = put_claim(&api, "rdma-b", "pci-0103-00-00-0", ("pod-b", uid_b), vec![]);
    let claim_c = put_claim(
        &api,
        "nic-c",
        &dranet_core::names::netdev_device_name(LINK),
        ("pod-c", uid_c),
        vec![opaque(serde_json::json!({
            "interface": {"name": "net1", "addresses": ["10.9.8.7/24"], "mtu": 1300},
            "routes": [{"destination": "10.10.0.0/16", "gateway": "10.9.8.1"}]
        }))],
    );
    let uid_d = "0a6f3c1e-0000-4000-8000-0000000000d4";
    let claim_d = put_claim(
        &api,
        "nic-d",
        &dranet_core::names::netdev_device_name(LATE_LINK),
        ("pod-d", uid_d),
        vec![opaque(serde_json::json!({
            "interface": {"name": "net2", "addresses": ["10.9.7.7/24"]}
        }))],
    );
    let resp = rt
        .block_on(kubelet.prepare(&[
            claim_a.clone(),
            claim_b.clone(),
            claim_c.clone(),
            claim_d.clone(),
        ]))
        .unwrap();
    for (uid, r) in &resp.claims {
        assert!(r.error.is_empty(), "prepare of {uid} failed: {}", r.error);
        assert_eq!(r.devices.len(), 1);
        assert!(r.devices[0].cdi_device_ids.is_empty());
    }
    lab.step("four claims prepared through the kubelet plugin socket");

    let logdir = lab.path("podlogs").display().to_string();
    let start = |name: &str, uid: &str| -> (String, String) {
        let pod = lab.cri(&["runp", name, uid, &logdir])["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let cid = lab.create_sleeper(&pod, name, uid, &logdir);
        lab.cri(&["start", &cid]);
        (pod, cid)
    };

    // 1. RDMA char devices: exactly the pod's own.
    let (pod_a, cid_a) = start("pod-a", uid_a);
    let ls = out(&lab.cri(&["exec", &cid_a, "ls", "-l", "/dev/infiniband"]));
    lab.step(&format!("pod-a sees:\n{ls}"));
    let line = |name: &str| {
        ls.lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .map(str::to_string)
    };
    let uverbs0 = line("uverbs0").expect("uverbs0 missing");
    assert!(
        uverbs0.starts_with('c') && uverbs0.contains("231, 192"),
        "{uverbs0}"
    );
    for present in ["umad0", "issm0", "rdma_cm"] {
        assert!(line(present).is_some(), "{present} missing in pod-a: {ls}");
    }
    for absent in ["uverbs1", "uverbs2", "uverbs3", "umad1", "issm2"] {
        assert!(line(absent).is_none(), "{absent} visible in pod-a: {ls}");
    }
    let (pod_b, cid_b) = start("pod-b", uid_b);
    let ls_b = out(&lab.cri(&["exec", &cid_b, "ls", "/dev/infiniband"]));
    let mut names_b: Vec<&str> = ls_b.split_whitespace().collect();
    names_b.sort();
    assert_eq!(
        names_b,
        ["issm2", "rdma_cm", "umad2", "uverbs2"],
        "pod-b: {ls_b}"
    );
    lab.step("RDMA pods see exactly their own char devices");

    // 2. The veth in pod-c, configured as claimed.
    let (pod_c, cid_c) = start("pod-c", uid_c);
    let addr = out(&lab.cri(&["exec", &cid_c, "ip", "addr", "show", "net1"]));
    assert!(
        addr.contains("10.9.8.7/24") && addr.contains("mtu 1300"),
        "{addr}"
    );
    let routes = out(&lab.cri(&["exec", &cid_c, "ip", "route"]));
    assert!(
        routes.contains("10.10.0.0/16 via 10.9.8.1 dev net1"),
        "{routes}"
    );
    assert!(
        !host.try_ip(&["link", "show", LINK]),
        "v0 still on the host"
    );
    lab.step(&format!("pod-c has net1:\n{addr}"));

    // 3. Claim status, written in the background.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status_c = loop {
        let s = device_status(&api, "nic-c");
        if !s.is_empty() || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status_c.len(), 1, "no status on nic-c");
    let nd = status_c[0].network_data.clone().expect("networkData");
    assert_eq!(nd.interface_name.as_deref(), Some("net1"));
    assert_eq!(nd.ips.unwrap_or_default(), ["10.9.8.7/24"]);
    assert_eq!(nd.hardware_address.as_deref(), Some("02:00:00:00:00:01"));
    let reasons: Vec<String> = status_c[0]
        .conditions
        .iter()
        .flatten()
        .map(|c| format!("{}={}", c.type_, c.reason))
        .collect();
    assert!(
        reasons.contains(&"Ready=NetworkDeviceReady".to_string()),
        "{reasons:?}"
    );
    let status_a = device_status(&api, "rdma-a");
    let ready_a = status_a
        .iter()
        .flat_map(|d| d.conditions.iter().flatten())
        .any(|c| c.type_ == "Ready" && c.reason == "RDMAOnlyDeviceReady");
    assert!(ready_a, "rdma-a status: {status_a:?}");
    lab.step("claim status carries networkData and conditions");

    // 4. SIGKILL the driver with v0 in pod-c; start pod-d while it is down (containerd runs it
    // without the plugin); restart it: Synchronize gives pod-d its veth; stopping the pods
    // restores the host.
    daemon.kill();
    lab.step("driver SIGKILLed");
    let (pod_d, cid_d) = start("pod-d", uid_d);
    let before = out(&lab.cri(&["exec", &cid_d, "ip", "link"]));
    assert!(!before.contains("net2"), "pod-d has net2 already: {before}");
    lab.step("pod-d started while the driver was down, without its NIC");
    let daemon = Daemon::start(&env);
    lab.step("driver restarted");
    let deadline = Instant::now() + Duration::from_secs(20);
    let addr_d = loop {
        let a = out(&lab.cri(&["exec", &cid_d, "ip", "addr", "show", "net2"]));
        if a.contains("10.9.7.7/24") || Instant::now() > deadline {
            break a;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        addr_d.contains("10.9.7.7/24"),
        "pod-d never got net2: {addr_d}"
    );
    lab.step(&format!("Synchronize gave pod-d its NIC:\n{addr_d}"));
    for (pod, cid) in [(&pod_c, &cid_c), (&pod_d, &cid_d)] {
        lab.cri(&["stop", cid]);
        lab.cri(&["rm", cid]);
        lab.cri(&["stopp", pod]);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while host.dump() != host_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        host.dump(),
        host_before,
        "the host did not get v0 back intact"
    );
    lab.step("pod-c and pod-d stopped: v0 and v1 back on the host exactly as they were");

    // 5. The rest stops; unprepare forgets the claims.
    for (pod, cid) in [(&pod_a, &cid_a), (&pod_b, &cid_b)] {
        lab.cri(&["stop", cid]);
        lab.cri(&["rm", cid]);
        lab.cri(&["stopp", pod]);
        lab.cri(&["rmp", pod]);
    }
    lab.cri(&["rmp", &pod_c]);
    lab.cri(&["rmp", &pod_d]);
    let kubelet = rt
        .block_on(FakeKubelet::connect(&daemon.registration))
        .unwrap();
    let resp = rt
        .block_on(kubelet.unprepare(&[claim_a, claim_b, claim_c, claim_d]))
        .unwrap();
    for (uid, r) in &resp.claims {
        assert!(r.error.is_empty(), "unprepare of {uid} failed: {}", r.error);
    }
    // A prepared claim is recorded once, in the kubelet plugin's checkpoint (header line, then
    // the JSON body): empty again after unprepare.
    let checkpoint =
        std::fs::read_to_string(kubelet_root_dir.path().join("plugins/dra.net/checkpoint"))
            .unwrap();
    let body = checkpoint.split_once('\n').map_or("", |(_, b)| b);
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        body["claims"],
        serde_json::json!({}),
        "claims still recorded after unprepare: {checkpoint}"
    );
    daemon.kill();
    lab.step("all pods gone, claims unprepared");
    drop(rt);
}
