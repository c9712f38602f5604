//! Side by side with the scheduler's allocator (issue 18): every case is written as YAML files
//! that `scripts/alloc-side-by-side.sh` also hands to allocbench (the Kubernetes 1.34.9
//! scheduler's allocator), so both engines decide on identical inputs.
//!
//! Cases: a 4-NIC `pcieRoot` claim on a 128-device slice, each of the seeds' templates
//! (`examples/azure_aks/{gb300,mi300x}`) on its fixture node, and a 4-NIC claim on a
//! 1024-device node. Each claim is measured two ways:
//!
//! - `cold`: the device index built from the typed ResourceSlices, the claim allocated, compiled
//!   selectors kept in a [`ProgramCache`] across iterations — what allocbench's default timing
//!   covers (NewAllocator + Allocate, the scheduler's CEL cache kept);
//! - `cold-cel`: the same with every DeviceClass and claim selector compiled anew, as allocbench
//!   `-cold-cel` (a new CEL cache every iteration);
//! - `warm`: the allocator (and the cache) kept, only the claim's allocation timed, as allocbench
//!   `-reuse`.
//!
//! The files and a manifest (`case<TAB>claim<TAB>files…`) go to
//! `$CARGO_TARGET_TMPDIR/alloc-side-by-side/`.

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{Criterion, criterion_group, criterion_main};
use std::sync::Arc;

use dranet_alloc::cel::ProgramCache;
use dranet_alloc::{Allocator, Options};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate, ResourceSlice};
use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn out_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("alloc-side-by-side")
}

fn docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str_multiple::<Value, Vec<_>>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// Writes generated objects as one multi-document YAML file (JSON documents are YAML).
fn write_docs(path: &Path, objs: &[Value]) -> PathBuf {
    let text: Vec<String> = objs.iter().map(|o| o.to_string()).collect();
    std::fs::write(path, text.join("\n---\n") + "\n").expect("write case file");
    path.to_path_buf()
}

fn class(name: &str, driver: &str) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{driver}\"")}}]}})
}

/// `count` slices of `per_slice` NICs on node `node`; every 4th device (interleaved) shares a
/// PCIe root, so a 4-device `pcieRoot` match must skip the devices of other roots.
fn nic_slices(node: &str, count: usize, per_slice: usize) -> Vec<Value> {
    let roots = count * per_slice / 4;
    (0..count)
        .map(|s| {
            let devices: Vec<Value> = (0..per_slice)
                .map(|i| {
                    let n = s * per_slice + i;
                    json!({"name": format!("nic-{n}"), "attributes": {
                        "rdma": {"bool": true},
                        "numaNode": {"int": (n % roots) * 2 / roots},
                        "rdmaDevice": {"string": format!("mlx5_{n}")},
                        "resource.kubernetes.io/pcieRoot": {"string": format!("pci{:04x}:00", n % roots)},
                    }})
                })
                .collect();
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": format!("{node}-dra.net-{s}")},
                "spec": {"driver": "dra.net", "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
                    "devices": devices}})
        })
        .collect()
}

fn nic_template() -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "4nic-same-root", "namespace": "default"},
        "spec": {"spec": {"devices": {
            "requests": [{"name": "nics", "exactly": {"deviceClassName": "dranet.net", "count": 4,
                "selectors": [{"cel": {"expression": "device.attributes[\"dra.net\"].rdma == true"}}]}}],
            "constraints": [{"requests": ["nics"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]}}}})
}

/// One case: the files allocbench reads and the claim templates to allocate, each alone.
struct Case {
    name: String,
    files: Vec<PathBuf>,
}

fn cases() -> Vec<Case> {
    let dir = out_dir();
    std::fs::create_dir_all(&dir).expect("case directory");
    let mut out = Vec::new();
    for (name, slices) in [
        ("pcie128", nic_slices("node-128", 1, 128)),
        ("node1024", nic_slices("node-1024", 8, 128)),
    ] {
        let mut objs = slices;
        objs.push(class("dranet.net", "dra.net"));
        objs.push(nic_template());
        out.push(Case {
            name: name.into(),
            files: vec![write_docs(&dir.join(format!("{name}.yaml")), &objs)],
        });
    }
    for (name, node) in [
        ("gb300", "azure-nd-gb300-v6"),
        ("mi300x", "azure-nd-mi300x-v5"),
    ] {
        let r = root();
        out.push(Case {
            name: name.into(),
            files: vec![
                r.join(format!("testdata/slices/{node}-dranet.yaml")),
                r.join(format!("testdata/slices/{node}-gpu.yaml")),
                r.join("examples/azure_aks/deviceclasses.yaml"),
                r.join(format!("examples/azure_aks/{name}/templates.yaml")),
            ],
        });
    }
    out
}

fn side_by_side(c: &mut Criterion) {
    let mut manifest = String::new();
    for case in cases() {
        let (mut slices, mut classes, mut templates) = (Vec::new(), Vec::new(), Vec::new());
        for f in &case.files {
            for v in docs(f) {
                match v["kind"].as_str() {
                    Some("ResourceSlice") => {
                        slices.push(serde_json::from_value::<ResourceSlice>(v).expect("slice"))
                    }
                    Some("DeviceClass") => {
                        classes.push(serde_json::from_value::<DeviceClass>(v).expect("class"))
                    }
                    Some("ResourceClaimTemplate") => templates.push(
                        serde_json::from_value::<ResourceClaimTemplate>(v).expect("template"),
                    ),
                    _ => {}
                }
            }
        }
        let cache = Arc::new(ProgramCache::default());
        let cached = Options {
            programs: Some(Arc::clone(&cache)),
            ..Options::default()
        };
        let alloc = Allocator::with_options(&slices, &classes, &cached).expect("allocator");
        for t in &templates {
            let claim = &t.spec.spec;
            let tname = t.metadata.name.clone().unwrap_or_default();
            // Only claims that allocate are timed: the comparison is of decisions, not errors.
            if let Err(e) = alloc.allocate_spec(claim, &[]) {
                eprintln!("{}/{tname}: not timed: {e}", case.name);
                continue;
            }
            let files: Vec<String> = case.files.iter().map(|f| f.display().to_string()).collect();
            manifest.push_str(&format!("{}\t{tname}\t{}\n", case.name, files.join("\t")));
            let mut g = c.benchmark_group(format!("{}-{tname}", case.name));
            g.bench_function("warm", |b| {
                b.iter(|| {
                    alloc
                        .allocate_spec(black_box(claim), &[])
                        .map(|a| a.results.len())
                })
            });
            g.bench_function("cold", |b| {
                b.iter(|| {
                    let a = Allocator::with_options(black_box(&slices), &classes, &cached)?;
                    a.allocate_spec(claim, &[]).map(|a| a.results.len())
                })
            });
            g.bench_function("cold-cel", |b| {
                b.iter(|| {
                    let a = Allocator::new(black_box(&slices), &classes)?;
                    a.allocate_spec(claim, &[]).map(|a| a.results.len())
                })
            });
            g.finish();
        }
    }
    std::fs::write(out_dir().join("manifest.tsv"), manifest).expect("manifest");
}

criterion_group!(benches, side_by_side);
criterion_main!(benches);
