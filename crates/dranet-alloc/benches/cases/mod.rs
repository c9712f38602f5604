//! The allocation cases the benches share: the side-by-side bench times them with criterion
//! (and hands the same files to allocbench), the instruction-count guard counts them under
//! callgrind. One construction, so the guard measures exactly what the timings are of.
//!
//! Cases: a 4-NIC `pcieRoot` claim on a 128-device slice, each of the seeds' templates
//! (`examples/azure_aks/{gb300,mi300x}`) on its fixture node, and a 4-NIC claim on a
//! 1024-device node. The generated files go to `$CARGO_TARGET_TMPDIR/alloc-side-by-side/`.

use std::path::{Path, PathBuf};

use dranet_alloc::{AllocError, Allocator, Options};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaimSpec, ResourceClaimTemplate, ResourceSlice,
};
use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the generated case files (and the side-by-side bench's manifest) are written.
pub fn out_dir() -> PathBuf {
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

/// One case: the files allocbench reads, and the typed objects parsed from them.
pub struct Case {
    /// `pcie128`, `node1024`, `gb300` or `mi300x`.
    pub name: String,
    /// The YAML files the case is read from (allocbench gets the same).
    pub files: Vec<PathBuf>,
    /// The node's ResourceSlices.
    pub slices: Vec<ResourceSlice>,
    /// The DeviceClasses the claims name.
    pub classes: Vec<DeviceClass>,
    /// The claim templates, each allocated alone.
    pub templates: Vec<ResourceClaimTemplate>,
}

fn case(name: &str, files: Vec<PathBuf>) -> Case {
    let (mut slices, mut classes, mut templates) = (Vec::new(), Vec::new(), Vec::new());
    for f in &files {
        for v in docs(f) {
            match v["kind"].as_str() {
                Some("ResourceSlice") => {
                    slices.push(serde_json::from_value::<ResourceSlice>(v).expect("slice"))
                }
                Some("DeviceClass") => {
                    classes.push(serde_json::from_value::<DeviceClass>(v).expect("class"))
                }
                Some("ResourceClaimTemplate") => templates
                    .push(serde_json::from_value::<ResourceClaimTemplate>(v).expect("template")),
                _ => {}
            }
        }
    }
    Case {
        name: name.into(),
        files,
        slices,
        classes,
        templates,
    }
}

/// Every case, its generated files written and all of them parsed.
pub fn cases() -> Vec<Case> {
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
        out.push(case(
            name,
            vec![write_docs(&dir.join(format!("{name}.yaml")), &objs)],
        ));
    }
    for (name, node) in [
        ("gb300", "azure-nd-gb300-v6"),
        ("mi300x", "azure-nd-mi300x-v5"),
    ] {
        let r = root();
        out.push(case(
            name,
            vec![
                r.join(format!("testdata/slices/{node}-dranet.yaml")),
                r.join(format!("testdata/slices/{node}-gpu.yaml")),
                r.join("examples/azure_aks/deviceclasses.yaml"),
                r.join(format!("examples/azure_aks/{name}/templates.yaml")),
            ],
        ));
    }
    out
}

/// What one iteration of a measurement covers, as allocbench's three timing modes.
#[derive(Clone, Copy)]
pub enum Mode {
    /// The allocator (and its compiled selectors) kept; the claim's allocation alone.
    Warm,
    /// The allocator built from the typed slices and the claim allocated; compiled selectors
    /// kept in the options' `ProgramCache`.
    Cold,
    /// The same with every selector compiled anew (no cache).
    ColdCel,
}

impl Mode {
    /// Every mode, in the order the benches report them.
    pub const ALL: [Mode; 3] = [Mode::Warm, Mode::Cold, Mode::ColdCel];

    /// The name criterion's groups and the guard's paths use.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Warm => "warm",
            Mode::Cold => "cold",
            Mode::ColdCel => "cold-cel",
        }
    }

    /// One iteration: `kept` is the allocator built once with `cached` (the warm mode's),
    /// the result is the number of devices allocated.
    pub fn run(
        self,
        case: &Case,
        kept: &Allocator,
        cached: &Options,
        claim: &ResourceClaimSpec,
    ) -> Result<usize, AllocError> {
        let fresh;
        let alloc = match self {
            Mode::Warm => kept,
            Mode::Cold => {
                fresh = Allocator::with_options(&case.slices, &case.classes, cached)?;
                &fresh
            }
            Mode::ColdCel => {
                fresh = Allocator::new(&case.slices, &case.classes)?;
                &fresh
            }
        };
        alloc.allocate_spec(claim, &[]).map(|a| a.results.len())
    }
}
