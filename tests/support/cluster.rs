//! A GB300 cluster's ResourceSlices as `kubectl get resourceslices -o json` prints them: the
//! fixture node's two slices (its GPUs', its NICs') once per node, each node named
//! `aks-gb300-<i>`, for the tests and the bench of `dranet check` at cluster scale.

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

/// Nodes of [`mixed_gb300_slices`] whose NIC slice is missing: the claim does not fit.
pub fn without_nics(i: usize) -> bool {
    i % 10 == 3
}

/// Nodes of [`mixed_gb300_slices`] whose `mlx5_0` is called `mlx5_9`: the claim's selector
/// matches none of their NICs.
pub fn renamed_nic(i: usize) -> bool {
    i % 25 == 7
}

/// Nodes of [`mixed_gb300_slices`] whose `mlx5_0` is on NUMA node 1, away from the claim's
/// GPU (NUMA 0): the claim fits unaligned.
pub fn nic_across_numa(i: usize) -> bool {
    i % 50 == 21
}

/// The GB300 slices of `nodes` nodes, a cluster's mix for `1nic-aligned`: of 1,000 nodes, 100
/// without NICs ([`without_nics`]) and 40 with the NIC renamed ([`renamed_nic`]) do not fit, 20
/// fit unaligned ([`nic_across_numa`]), the other 840 fit.
pub fn mixed_gb300_slices(nodes: usize) -> Vec<Value> {
    gb300_slices(nodes, |i, slices| {
        if without_nics(i) {
            slices.truncate(1);
            return;
        }
        let nics = slices[1]["spec"]["devices"]
            .as_array_mut()
            .into_iter()
            .flatten();
        for d in nics.filter(|d| d["attributes"]["rdmaDevice"]["string"] == "mlx5_0") {
            let attrs = &mut d["attributes"];
            if renamed_nic(i) {
                attrs["rdmaDevice"]["string"] = "mlx5_9".into();
            } else if nic_across_numa(i) {
                attrs["numaNode"]["int"] = 1.into();
                attrs["resource.kubernetes.io/numaNode"]["int"] = 1.into();
            }
        }
    })
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
    let mut args = vec!["--slices".as_ref(), slices.as_os_str()];
    args.push("--classes".as_ref());
    args.push("examples/azure_aks/deviceclasses.yaml".as_ref());
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    check_1nic_aligned_from(
        std::process::Command::new(env!("CARGO_BIN_EXE_dranet")),
        &args,
    )
}

/// `cmd` (the `dranet` binary, in the environment wanted) checking the GB300 template
/// `1nic-aligned` with `args` (where the slices come from, output flags).
pub fn check_1nic_aligned_from(
    mut cmd: std::process::Command,
    args: &[&std::ffi::OsStr],
) -> std::process::Output {
    cmd.args([
        "check",
        "examples/azure_aks/gb300/templates.yaml",
        "--name",
        "1nic-aligned",
    ])
    .args(args)
    .env_remove("NODE_NAME")
    .current_dir(env!("CARGO_MANIFEST_DIR"))
    .output()
    .expect("run dranet")
}
