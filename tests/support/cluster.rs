//! A GB300 cluster's ResourceSlices as `kubectl get resourceslices -o json` prints them: the
//! fixture node's two slices (its GPUs', its NICs') once per node, each node named
//! `aks-gb300-<i>`, for the tests and the bench of `dranet check` at cluster scale.
#![allow(dead_code)]

use std::path::Path;

use serde_json::Value;

/// The fixture node's slices: the GPU driver's, then dranet's.
const FIXTURES: [&str; 2] = [
    "testdata/slices/azure-nd-gb300-v6-gpu.yaml",
    "testdata/slices/azure-nd-gb300-v6-dranet.yaml",
];

/// The name of node `i`.
pub fn node(i: usize) -> String {
    format!("aks-gb300-{i}")
}

/// The fixture node's slices, as JSON.
fn fixture_slices() -> Vec<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    FIXTURES
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(root.join(f)).expect("GB300 fixture slices");
            serde_saphyr::from_str_multiple::<Value, Vec<Value>>(&text)
                .expect("GB300 fixture slices are YAML")
        })
        .collect()
}

/// The slices of `nodes` GB300 nodes, two per node in node order; `edit` changes node `i`'s
/// (GPU slice first, NIC slice second) before they are added: to take a node's NICs away, or
/// change an attribute.
pub fn gb300_slices(nodes: usize, mut edit: impl FnMut(usize, &mut Vec<Value>)) -> Vec<Value> {
    let fixture = fixture_slices();
    let mut out = Vec::with_capacity(nodes * fixture.len());
    for i in 0..nodes {
        let name = node(i);
        let mut slices = fixture.clone();
        for s in &mut slices {
            let driver = s["spec"]["driver"].as_str().unwrap_or_default().to_string();
            s["metadata"]["name"] = format!("{name}-{driver}-0").into();
            s["spec"]["nodeName"] = name.clone().into();
            s["spec"]["pool"]["name"] = name.clone().into();
        }
        edit(i, &mut slices);
        out.extend(slices);
    }
    out
}

/// `slices` as the `List` of `kubectl get resourceslices -o json` (indented as kubectl does).
pub fn list_json(slices: Vec<Value>) -> String {
    let list = serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": slices,
    });
    let mut out = Vec::new();
    let indent = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, indent);
    k8s_openapi::serde::Serialize::serialize(&list, &mut ser).expect("a JSON value serializes");
    String::from_utf8(out).expect("JSON is UTF-8")
}

/// `dranet check` of the GB300 template `1nic-aligned` on the slices of `slices` (the AKS
/// example's DeviceClasses), with `extra` flags, as an operator runs it.
pub fn check_1nic_aligned(slices: &Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_dranet"))
        .args([
            "check",
            "examples/azure_aks/gb300/templates.yaml",
            "--name",
            "1nic-aligned",
            "--slices",
        ])
        .arg(slices)
        .args(["--classes", "examples/azure_aks/deviceclasses.yaml"])
        .args(extra)
        .env_remove("NODE_NAME")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run dranet")
}
