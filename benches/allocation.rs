//! Allocation simulation benches (issue 6):
//!
//! - `pcie_root_4_of_128`: a 4-device claim with `matchAttribute: resource.kubernetes.io/pcieRoot`
//!   over one 128-device slice where the 32 roots are interleaved, so the search must skip
//!   devices of other roots;
//! - `gb300_1gpu_2nic_plus_1024`: 1 GPU + 2 NICs with a NUMA match on the GB300 fixture's
//!   slices plus 1024 devices of an unrelated driver.
//!
//! Each is measured three ways: `allocate` (claim compiled once, as a scheduler caching its CEL
//! does), `compile+allocate`, and `build+compile+allocate` (the device index built from the
//! typed ResourceSlices too, the whole cost of one cold decision).

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use dranet_alloc::Allocator;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimSpec, ResourceSlice};
use serde_json::{Value, json};

fn class(name: &str, driver: &str) -> DeviceClass {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{driver}\"")}}]}
    }))
    .expect("class")
}

fn slice(
    driver: &str,
    pool: &str,
    index: usize,
    count: usize,
    devices: Vec<Value>,
) -> ResourceSlice {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{pool}-{driver}-{index}")},
        "spec": {"driver": driver, "nodeName": pool,
                 "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
                 "devices": devices}
    }))
    .expect("slice")
}

fn pcie_case() -> (Vec<ResourceSlice>, Vec<DeviceClass>, ResourceClaimSpec) {
    let devices = (0..128)
        .map(|i| {
            json!({"name": format!("nic-{i}"), "attributes": {
                "rdma": {"bool": true},
                "numaNode": {"int": (i % 32) / 16},
                "rdmaDevice": {"string": format!("mlx5_{i}")},
                "resource.kubernetes.io/pcieRoot": {"string": format!("pci0000:{:02x}", (i % 32) * 8)},
            }})
        })
        .collect();
    let claim = serde_json::from_value(json!({"devices": {
        "requests": [{"name": "nics", "exactly": {"deviceClassName": "dranet.net", "count": 4,
            "selectors": [{"cel": {"expression": "device.attributes[\"dra.net\"].rdma == true"}}]}}],
        "constraints": [{"requests": ["nics"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    }}))
    .expect("claim");
    (
        vec![slice("dra.net", "node", 0, 1, devices)],
        vec![class("dranet.net", "dra.net")],
        claim,
    )
}

fn yaml_slices(path: &str) -> Vec<ResourceSlice> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    let text = std::fs::read_to_string(&p).expect("fixture slices");
    serde_saphyr::from_str_multiple::<serde_json::Value, Vec<_>>(&text)
        .expect("fixture slices are YAML")
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect()
}

fn gb300_case() -> (Vec<ResourceSlice>, Vec<DeviceClass>, ResourceClaimSpec) {
    let mut slices = yaml_slices("testdata/slices/azure-nd-gb300-v6-gpu.yaml");
    slices.extend(yaml_slices("testdata/slices/azure-nd-gb300-v6-dranet.yaml"));
    assert_eq!(slices.len(), 2, "fixture slices");
    // 1024 devices of another driver, 128 per slice, with attributes of the same names.
    for s in 0..8 {
        let devices = (0..128)
            .map(|i| {
                let n = s * 128 + i;
                json!({"name": format!("fpga-{n}"), "attributes": {
                    "resource.kubernetes.io/numaNode": {"int": n % 2},
                    "resource.kubernetes.io/pcieRoot": {"string": format!("pci{:04x}:00", n)},
                    "model": {"string": "u55c"},
                }})
            })
            .collect();
        slices.push(slice("fpga.example.com", "aks-gb300-0", s, 8, devices));
    }
    let claim = serde_json::from_value(json!({"devices": {
        "requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
            {"name": "nic", "exactly": {"deviceClassName": "dranet.net", "count": 2,
                "selectors": [{"cel": {"expression": "device.attributes[\"dra.net\"].rdma == true"}}]}}
        ],
        "constraints": [{"requests": ["gpu", "nic"], "matchAttribute": "resource.kubernetes.io/numaNode"}]
    }}))
    .expect("claim");
    let classes = vec![
        class("dranet.net", "dra.net"),
        class("gpu.nvidia.com", "gpu.nvidia.com"),
        class("fpga.example.com", "fpga.example.com"),
    ];
    (slices, classes, claim)
}

fn bench_case(
    c: &mut Criterion,
    name: &str,
    (slices, classes, claim): (Vec<ResourceSlice>, Vec<DeviceClass>, ResourceClaimSpec),
    expect: usize,
) {
    let alloc = Allocator::new(&slices, &classes).expect("allocator");
    let compiled = alloc.compile(&claim).expect("claim compiles");
    let got = alloc
        .allocate(&compiled, &[])
        .expect("claim is satisfiable");
    assert_eq!(got.results.len(), expect, "{name}: {got:?}");
    let mut g = c.benchmark_group(name);
    g.bench_function("allocate", |b| {
        b.iter(|| {
            alloc
                .allocate(black_box(&compiled), &[])
                .map(|a| a.results.len())
        })
    });
    g.bench_function("compile+allocate", |b| {
        b.iter(|| {
            alloc
                .allocate_spec(black_box(&claim), &[])
                .map(|a| a.results.len())
        })
    });
    g.bench_function("build+compile+allocate", |b| {
        b.iter(|| {
            let a = Allocator::new(black_box(&slices), &classes)?;
            a.allocate_spec(&claim, &[]).map(|a| a.results.len())
        })
    });
    g.finish();
}

fn allocation(c: &mut Criterion) {
    bench_case(c, "pcie_root_4_of_128", pcie_case(), 4);
    bench_case(c, "gb300_1gpu_2nic_plus_1024", gb300_case(), 3);
}

criterion_group!(benches, allocation);
criterion_main!(benches);
