//! dranet-kubeletplugin: what the kubelet waits for and what a resync costs.
//!
//! - `prepare_round_trip/<n>`: one NodePrepareResources (v1) call for n new claims, from the fake
//!   kubelet over the unix socket: claim lookups from the fake API server over loopback HTTP, two
//!   fsynced checkpoint writes per claim, the driver call, the reply. Unprepare (untimed) resets
//!   the state between iterations so every timed call does the full work.
//! - `checkpoint_write/<n>`: recording one claim in a checkpoint that holds n claims (encode, CRC,
//!   write, fsync, rename, fsync of the directory).
//! - `slice_plan/<n>/…`: planning the writes for a pool of n devices with realistic attributes,
//!   when nothing changed (every resync and watch echo) and when one device changed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dranet_kubeletplugin::checkpoint::{Checkpoint, CheckpointEntry, Phase};
use dranet_kubeletplugin::fake::{FakeApiServer, FakeKubelet, allocated_claim};
use dranet_kubeletplugin::publisher::{MAX_DEVICES_PER_SLICE, PoolParams, SlicePlan, plan};
use dranet_kubeletplugin::{
    CheckpointPolicy, ClaimRef, ClaimToPrepare, ClaimToUnprepare, Driver, HandlerError,
    KubeletPlugin, Prepared, PreparedDevice,
};
use k8s_openapi::api::resource::v1::{
    Device, DeviceAttribute, DeviceRequestAllocationResult, ResourceClaim, ResourceSlice,
};

const DRIVER: &str = "dra.net";
const NODE: &str = "bench-node";

/// Does nothing but answer: the bench measures the library, not a driver.
struct Echo;

impl Driver for Echo {
    async fn prepare(&self, claim: ClaimToPrepare) -> Result<Prepared, HandlerError> {
        Ok(Prepared {
            devices: claim.results.iter().map(prepared_device).collect(),
            state: Some(serde_json::json!({"netns": "/var/run/netns/cni-0000"})),
        })
    }

    async fn unprepare(&self, _claim: ClaimToUnprepare) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn prepared_device(r: &DeviceRequestAllocationResult) -> PreparedDevice {
    PreparedDevice {
        requests: vec![r.request.clone()],
        pool: r.pool.clone(),
        device: r.device.clone(),
        cdi_device_ids: vec![format!("dra.net/nic={}", r.device)],
        share_id: None,
        metadata: None,
    }
}

fn claim(i: usize) -> ResourceClaim {
    // Two NICs per claim, as a GPU+NIC pair claim on a GB300 node asks for.
    let results = (0..2)
        .map(|n| DeviceRequestAllocationResult {
            driver: DRIVER.into(),
            pool: NODE.into(),
            device: format!("pci-0000-{:02x}-00-{n}", i % 256),
            request: "nic".into(),
            ..Default::default()
        })
        .collect();
    allocated_claim(&claim_ref(i), results)
}

fn claim_ref(i: usize) -> ClaimRef {
    ClaimRef {
        namespace: "ml".into(),
        name: format!("trainer-{i}-nics"),
        uid: format!("0a6f3c1e-0000-4000-8000-{i:012}"),
    }
}

fn prepare_round_trip(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (api, plugin, kubelet) = rt.block_on(async {
        let api = FakeApiServer::start().await.unwrap();
        api.add_node(NODE);
        for i in 0..16 {
            api.put_claim(claim(i));
        }
        let plugin = KubeletPlugin::builder(Echo, api.client().unwrap().field_manager(DRIVER))
            .driver_name(DRIVER)
            .node_name(NODE)
            .kubelet_root_dir(dir.path())
            .start()
            .await
            .unwrap();
        let kubelet = FakeKubelet::connect(plugin.registration_socket())
            .await
            .unwrap();
        (api, plugin, kubelet)
    });
    let mut g = c.benchmark_group("prepare_round_trip");
    for n in [1usize, 16] {
        let claims: Vec<ClaimRef> = (0..n).map(claim_ref).collect();
        g.bench_with_input(BenchmarkId::from_parameter(n), &claims, |b, claims| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let start = Instant::now();
                        let resp = kubelet.prepare(black_box(claims)).await.unwrap();
                        total += start.elapsed();
                        assert!(resp.claims.values().all(|c| c.error.is_empty()));
                        kubelet.unprepare(claims).await.unwrap();
                    }
                    total
                })
            })
        });
    }
    g.finish();
    rt.block_on(plugin.shutdown()).unwrap();
    drop(api);
}

/// One NodePrepareResources call with 10,000 claims (a hostile or buggy kubelet), in the
/// normal and the rolling-update mode (shared checkpoint, re-checked on every lookup).
fn prepare_many(c: &mut Criterion) {
    const N: usize = 10_000;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("prepare_10000_claims");
    g.sample_size(10);
    for rolling in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (api, plugin, kubelet) = rt.block_on(async {
            let api = FakeApiServer::start().await.unwrap();
            api.add_node(NODE);
            for i in 0..N {
                api.put_claim(claim(i));
            }
            let mut b = KubeletPlugin::builder(Echo, api.client().unwrap().field_manager(DRIVER))
                .driver_name(DRIVER)
                .node_name(NODE)
                .kubelet_root_dir(dir.path());
            if rolling {
                b = b.rolling_update("0a6f3c1e-5a1b-4c2d-8e3f-123456789abc");
            }
            let plugin = b.start().await.unwrap();
            let kubelet = FakeKubelet::connect(plugin.registration_socket())
                .await
                .unwrap();
            (api, plugin, kubelet)
        });
        let claims: Vec<ClaimRef> = (0..N).map(claim_ref).collect();
        let name = if rolling { "rolling_update" } else { "normal" };
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let start = Instant::now();
                        let resp = kubelet.prepare(black_box(&claims)).await.unwrap();
                        total += start.elapsed();
                        assert_eq!(resp.claims.len(), N);
                        assert!(resp.claims.values().all(|c| c.error.is_empty()));
                        kubelet.unprepare(&claims).await.unwrap();
                    }
                    total
                })
            })
        });
        rt.block_on(plugin.shutdown()).unwrap();
        drop(api);
    }
    g.finish();
}

fn entry(i: usize) -> CheckpointEntry {
    let c = claim(i);
    let results = c
        .status
        .and_then(|s| s.allocation)
        .and_then(|a| a.devices)
        .and_then(|d| d.results)
        .unwrap_or_default();
    CheckpointEntry {
        claim: claim_ref(i),
        phase: Phase::Prepared,
        prepared: Some(Prepared {
            devices: results.iter().map(prepared_device).collect(),
            state: Some(serde_json::json!({"netns": "/var/run/netns/cni-0000"})),
        }),
        pod_claim_name: None,
    }
}

fn checkpoint_write(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("checkpoint_write");
    for held in [1usize, 64] {
        let dir = tempfile::tempdir().unwrap();
        let (cp, _) =
            Checkpoint::open(dir.path().join("checkpoint"), CheckpointPolicy::Refuse).unwrap();
        rt.block_on(async {
            for i in 0..held - 1 {
                cp.put(entry(i)).await.unwrap();
            }
        });
        let e = entry(held);
        // Each put must change something: an unchanged checkpoint is not rewritten.
        let mut n = 0u64;
        g.bench_with_input(BenchmarkId::from_parameter(held), &e, |b, e| {
            b.iter(|| {
                n += 1;
                let mut e = e.clone();
                if let Some(p) = e.prepared.as_mut() {
                    p.state =
                        Some(serde_json::json!({ "netns": "/var/run/netns/cni-0000", "n": n }));
                }
                rt.block_on(cp.put(black_box(e))).unwrap()
            })
        });
    }
    g.finish();
}

/// A device as dranet publishes an RDMA NIC: about 20 attributes.
fn device(i: usize) -> Device {
    let mut attrs = std::collections::BTreeMap::new();
    let s = |v: String| DeviceAttribute {
        string: Some(v),
        ..Default::default()
    };
    let n = |v: i64| DeviceAttribute {
        int: Some(v),
        ..Default::default()
    };
    let b = |v: bool| DeviceAttribute {
        bool: Some(v),
        ..Default::default()
    };
    attrs.insert("ifName".into(), s(format!("ib{i}")));
    attrs.insert("pciAddress".into(), s(format!("0000:{:02x}:00.1", i % 256)));
    attrs.insert("pciVendor".into(), s("Mellanox Technologies".into()));
    attrs.insert("pciDevice".into(), s("MT2910 Family [ConnectX-7]".into()));
    attrs.insert("numaNode".into(), n((i % 2) as i64));
    attrs.insert("rdma".into(), b(true));
    attrs.insert("rdmaDevice".into(), s(format!("mlx5_{i}")));
    attrs.insert("linkType".into(), s("infiniband".into()));
    attrs.insert("mtu".into(), n(4092));
    attrs.insert("sriov".into(), b(false));
    attrs.insert("virtual".into(), b(true));
    attrs.insert("state".into(), s("up".into()));
    attrs.insert("encapsulation".into(), s("infiniband".into()));
    attrs.insert("alias".into(), s(String::new()));
    attrs.insert(
        "resource.kubernetes.io/pcieRoot".into(),
        s(format!("pci{:04x}:00", i % 8)),
    );
    attrs.insert(
        "resource.kubernetes.io/pciBusID".into(),
        s(format!("0000:{:02x}:00.1", i % 256)),
    );
    attrs.insert(
        "azure.dra.net/vmSize".into(),
        s("Standard_ND128isr_GB300_v6".into()),
    );
    attrs.insert("azure.dra.net/region".into(), s("eastus2".into()));
    attrs.insert(
        "azure.dra.net/placementGroupId".into(),
        s("pg-0123456789".into()),
    );
    attrs.insert(
        "macAddress".into(),
        s(format!("00:15:5d:00:{:02x}:01", i % 256)),
    );
    Device {
        name: format!("pci-0000-{:02x}-{:02x}-1", i / 256, i % 256),
        attributes: Some(attrs),
        ..Default::default()
    }
}

/// Applies a plan as the API server would, for the "current" state of the no-change case.
fn applied(p: &SlicePlan) -> Vec<ResourceSlice> {
    p.creates
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut s = s.clone();
            s.metadata.uid = Some(format!("uid-{i}"));
            s.metadata.resource_version = Some(format!("{}", 100 + i));
            s
        })
        .collect()
}

fn slice_plan(c: &mut Criterion) {
    let params = PoolParams {
        node_name: NODE.into(),
        driver_name: DRIVER.into(),
        node_uid: Some("node-uid".into()),
        max_devices_per_slice: MAX_DEVICES_PER_SLICE,
    };
    let mut g = c.benchmark_group("slice_plan");
    for n in [128usize, 1024] {
        let devices: Vec<Device> = (0..n).map(device).collect();
        let current = applied(&plan(&devices, &[], &params).unwrap());
        let mut one_changed = devices.clone();
        one_changed[n / 2].attributes.as_mut().unwrap().insert(
            "state".into(),
            DeviceAttribute {
                string: Some("down".into()),
                ..Default::default()
            },
        );
        g.bench_function(BenchmarkId::new(n.to_string(), "unchanged"), |b| {
            b.iter(|| {
                let p = plan(black_box(&devices), black_box(&current), &params).unwrap();
                assert!(p.is_empty());
            })
        });
        g.bench_function(BenchmarkId::new(n.to_string(), "one_device_changed"), |b| {
            b.iter(|| {
                let p = plan(black_box(&one_changed), black_box(&current), &params).unwrap();
                assert_eq!(p.updates.len(), 1);
            })
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    prepare_round_trip,
    checkpoint_write,
    slice_plan,
    prepare_many
);
criterion_main!(benches);
