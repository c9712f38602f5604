//! The `dra.net` driver's own costs, on the Azure ND GB300 v6 fixture (4 IB-only ConnectX VFs):
//!
//! - `create_container/4_rdma_links`: the CreateContainer hook for a pod whose claim holds all
//!   four RDMA links, in-process: look up the pod's claims and build the adjustment with 13 char
//!   devices (4 × uverbs, umad, issm, and rdma_cm once).
//! - `prepare/4_devices_plugin_round_trip`: NodePrepareResources for one claim with those four
//!   devices from the fake kubelet over the plugin's unix socket: claim read from the fake API
//!   server, the plugin's checkpoint (two fsynced writes), the driver's config merge and its own
//!   fsynced claim record. Unprepare (untimed) resets between iterations.
//! - `prepare/4_devices_driver_only`: the driver's part of that (config merge, validation, its
//!   fsynced record), called directly.
//! - `run_pod_sandbox/{1_netdev,4_netdevs,8_netdevs}` (root only): the RunPodSandbox hook for a
//!   pod whose claim holds 1, 4 or 8 veths (podnet attach of each plus the hook's lookups and
//!   fsynced pod record; the share of containerd's 2 s NRI timeout dranet uses), and
//!   `run_pod_sandbox/1_netdev_podnet_attach_alone`, the same attach without the hook.
//!
//! - `daemon_rescan/<fixture>_scan_publish_health`: what `dranet run` does on every rescan:
//!   discovery of the fixture tree, the published attributes, the default `--filter` on each
//!   device, the devices-in-use merge and the health reports; `…_publish_health` without the
//!   scan. On the GB300 fixture and on an E810 with 64 VFs (65 devices).
//!
//! `cargo bench -p dranet-driver --bench driver`

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};

// The tests' namespace helpers (root check, named netns deleted on drop).
#[path = "../tests/it/support/mod.rs"]
mod support;
use dranet_core::{Discover, Netdev, NetworkDevice};
use dranet_driver::{NetworkDriver, Rescan};
use dranet_kubeletplugin::fake::{FakeApiServer, FakeKubelet, allocated_claim};
use dranet_kubeletplugin::k8s_openapi::api::resource::v1::{
    ResourceClaim, ResourceClaimConsumerReference,
};
use dranet_kubeletplugin::{ClaimRef, ClaimToPrepare, KubeletPlugin};
use dranet_nri::{Container, NriPlugin, PodSandbox};
use dranet_podnet::PodNet;
use dranet_podnet::netns::Netns;
use dranet_podnet::rdma::NetnsMode;

const NODE: &str = "bench-node";

fn claim(r: &ClaimRef, devices: &[&str], pod_uid: &str) -> ResourceClaim {
    let mut c = allocated_claim(r, support::claims::nic_results(NODE, devices));
    if let Some(s) = c.status.as_mut() {
        s.reserved_for = Some(vec![ResourceClaimConsumerReference {
            api_group: None,
            resource: "pods".into(),
            name: "p".into(),
            uid: pod_uid.into(),
        }]);
    }
    c
}

fn to_prepare(c: &ResourceClaim, r: &ClaimRef) -> ClaimToPrepare {
    ClaimToPrepare {
        claim_ref: r.clone(),
        results: c
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.clone())
            .unwrap_or_default(),
        claim: c.clone(),
        config: vec![],
    }
}

fn driver(sysfs: &Path, state: &Path, host: Netns, extra: Vec<NetworkDevice>) -> NetworkDriver {
    let sysfs = sysfs.to_path_buf();
    let rescan: Rescan = Arc::new(move || {
        let mut inv = dranet_discovery::host(&sysfs, Default::default())
            .discover()
            .map_err(|e| e.to_string())?;
        inv.devices.extend(extra.clone());
        Ok(inv)
    });
    let podnet = PodNet::new(host, state.join("podnet")).expect("podnet");
    NetworkDriver::builder(podnet, state.join("driver"), rescan)
        .rdma_mode(NetnsMode::Shared)
        .build()
        .expect("driver")
}

const GB300: [&str; 4] = [
    "pci-0101-00-00-0",
    "pci-0102-00-00-0",
    "pci-0103-00-00-0",
    "pci-0104-00-00-0",
];

fn bench(c: &mut Criterion) {
    let fixture = tempfile::tempdir().expect("tempdir");
    dranet_discovery::fixture::azure_nd_gb300_v6(fixture.path()).expect("fixture");
    let sysfs = fixture.path().join("sys");
    let state = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");

    // The hook.
    let d = Arc::new(driver(
        &sysfs,
        state.path(),
        Netns::current().expect("netns"),
        Vec::new(),
    ));
    let r = ClaimRef {
        namespace: "ml".into(),
        name: "four".into(),
        uid: "uid-four".into(),
    };
    rt.block_on(d.prepare_claim(&to_prepare(&claim(&r, &GB300, "pod-4"), &r)))
        .expect("prepare");
    let pod = PodSandbox {
        id: "sandbox".into(),
        uid: "pod-4".into(),
        ..Default::default()
    };
    let ctr = Container::default();
    let mut g = c.benchmark_group("create_container");
    g.bench_function("4_rdma_links", |b| {
        b.iter(|| {
            let adj = rt.block_on(d.create_container(&pod, &ctr)).expect("adjust");
            assert_eq!(adj.devices().len(), 13);
            adj
        })
    });
    g.finish();

    // Prepare, through the plugin and alone.
    let mut g = c.benchmark_group("prepare");
    g.sample_size(30);
    g.bench_function("4_devices_driver_only", |b| {
        let prep = to_prepare(&claim(&r, &GB300, "pod-4"), &r);
        b.iter(|| rt.block_on(d.prepare_claim(&prep)).expect("prepare"))
    });
    // The client's connector spawns on the runtime it is built in.
    let _in_runtime = rt.enter();
    let api = rt.block_on(FakeApiServer::start()).expect("api");
    api.add_node(NODE);
    let kubelet_root_dir = tempfile::tempdir().expect("tempdir");
    let plugin = rt
        .block_on(
            KubeletPlugin::builder(d.clone(), api.client().expect("client"))
                .driver_name("dra.net")
                .node_name(NODE)
                .kubelet_root_dir(kubelet_root_dir.path())
                .start(),
        )
        .expect("plugin");
    let kubelet = rt
        .block_on(FakeKubelet::connect(plugin.registration_socket()))
        .expect("kubelet");
    let r2 = ClaimRef {
        namespace: "ml".into(),
        name: "round-trip".into(),
        uid: "uid-round-trip".into(),
    };
    api.put_claim(claim(&r2, &GB300, "pod-rt"));
    g.bench_function("4_devices_plugin_round_trip", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let resp = rt
                    .block_on(kubelet.prepare(std::slice::from_ref(&r2)))
                    .expect("prepare");
                total += t.elapsed();
                assert!(resp.claims.values().all(|c| c.error.is_empty()));
                rt.block_on(kubelet.unprepare(std::slice::from_ref(&r2)))
                    .expect("unprepare");
            }
            total
        })
    });
    g.finish();
    rt.block_on(plugin.shutdown()).expect("shutdown");

    run_pod_sandbox(c, &rt, &sysfs);
}

fn run_pod_sandbox(c: &mut Criterion, rt: &tokio::runtime::Runtime, sysfs: &Path) {
    if !support::can_run("run_pod_sandbox bench") {
        return;
    }
    let (h, p) = (support::Ns::new("bd-h"), support::Ns::new("bd-p"));
    // Eight veths v0…v7 on the host, each addressed and up; claims take the first 1, 4 or 8.
    let mut veths = Vec::new();
    for i in 0..8 {
        let (v, peer) = (format!("v{i}"), format!("v{i}p"));
        h.ip(&["link", "add", &v, "type", "veth", "peer", "name", &peer]);
        h.ip(&["addr", "add", &format!("10.1.{i}.2/24"), "dev", &v]);
        h.ip(&["link", "set", &v, "up"]);
        veths.push(NetworkDevice {
            name: v.clone(),
            pci: None,
            netdev: Some(Netdev {
                name: v,
                ..Default::default()
            }),
            rdma: None,
        });
    }
    let state = tempfile::tempdir().expect("tempdir");
    let host = Netns::open(h.path()).expect("host netns");
    let d = driver(sysfs, state.path(), host, veths);
    let mut g = c.benchmark_group("run_pod_sandbox");
    g.sample_size(30);
    for (n, bench) in [(1, "1_netdev"), (4, "4_netdevs"), (8, "8_netdevs")] {
        let r = ClaimRef {
            namespace: "ml".into(),
            name: format!("nic{n}"),
            uid: format!("uid-nic{n}"),
        };
        let names: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let uid = format!("pod-nic{n}");
        rt.block_on(d.prepare_claim(&to_prepare(&claim(&r, &names, &uid), &r)))
            .expect("prepare");
        let pod = PodSandbox {
            id: format!("sandbox-nic{n}"),
            uid,
            namespace: "ml".into(),
            name: "p".into(),
            namespaces: vec![dranet_nri::Namespace {
                kind: "network".into(),
                path: p.path().display().to_string(),
            }],
            ..Default::default()
        };
        g.bench_function(bench, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    rt.block_on(d.run_pod_sandbox(&pod)).expect("run");
                    total += t.elapsed();
                    rt.block_on(d.stop_pod_sandbox(&pod)).expect("stop");
                }
                total
            })
        });
    }
    // The same link and config through podnet alone: the difference is the hook's own cost.
    let pn = PodNet::new(
        Netns::open(h.path()).expect("host netns"),
        state.path().join("podnet-alone"),
    )
    .expect("podnet");
    let cfg = dranet_core::NetworkConfig::default();
    let pod_ns = p.path();
    let req = dranet_podnet::AttachRequest {
        key: "alone",
        owner: "alone",
        link: "v0",
        pod_netns: &pod_ns,
        config: &cfg,
        rdma_device: None,
        source_table: None,
    };
    g.bench_function("1_netdev_podnet_attach_alone", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                rt.block_on(pn.attach(&req)).expect("attach");
                total += t.elapsed();
                rt.block_on(pn.detach("alone")).expect("detach");
            }
            total
        })
    });
    g.finish();
}

fn daemon_rescan(c: &mut Criterion) {
    use dranet_driver::daemon::devices::health;
    use dranet_driver::publish::{InUse, PodFaults, Policy, PolicyFlags, publication};
    use std::collections::{BTreeMap, BTreeSet};

    let policy = Policy::from_flags(&PolicyFlags::default()).expect("default policy");
    let not_in_use: BTreeMap<String, String> = BTreeMap::new();
    let mut g = c.benchmark_group("daemon_rescan");
    type Gen = fn(&Path) -> std::io::Result<()>;
    let fixtures: [(&str, Gen); 2] = [
        ("gb300", dranet_discovery::fixture::azure_nd_gb300_v6),
        ("sriov_64vf", |d| {
            dranet_discovery::fixture::sriov_node(d, 64)
        }),
    ];
    for (name, make) in fixtures {
        let dir = tempfile::tempdir().expect("tempdir");
        make(dir.path()).expect("fixture");
        let disc = dranet_discovery::host(&dir.path().join("sys"), Default::default());
        let publish_health = |inv: &dranet_core::Inventory| {
            let published = publication(
                inv,
                &dranet_core::NoCloud,
                &policy,
                &InUse::none(),
                &PodFaults::new(),
            )
            .devices;
            let mut known = BTreeSet::new();
            let reports = health(
                NODE,
                inv,
                &published,
                &not_in_use,
                &Default::default(),
                &mut known,
                Duration::from_secs(180),
            );
            assert_eq!(reports.len(), published.len());
            reports.len()
        };
        g.bench_function(format!("{name}_scan_publish_health"), |b| {
            b.iter(|| publish_health(&disc.discover().expect("scan")))
        });
        let inv = disc.discover().expect("scan");
        g.bench_function(format!("{name}_publish_health"), |b| {
            b.iter(|| publish_health(&inv))
        });
    }
    g.finish();
}

criterion_group!(benches, bench, daemon_rescan);
criterion_main!(benches);
