//! `dranet check` over a cluster's worth of nodes, as an operator runs it on
//! `kubectl get resourceslices -o json`: 1,000 GB300 nodes, some without their NICs, some
//! with another NIC than the claim asks for, some with it on the other NUMA node. The answers
//! are asserted, not the time (that is the `check` bench's).

use std::collections::BTreeMap;

use crate::support::cluster::{
    check_1nic_aligned, list_json, mixed_gb300_slices, nic_across_numa, node, renamed_nic,
    without_nics,
};
use serde_json::Value;

/// 1,000 nodes: 100 without NICs, 40 with the NIC renamed, 20 with it across NUMA nodes, the
/// other 840 as the fixture.
fn cluster_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("slices.json");
    std::fs::write(&path, list_json(mixed_gb300_slices(1000))).expect("write the cluster's slices");
    path
}

fn check(slices: &std::path::Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let out = check_1nic_aligned(slices, extra);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_thousand_nodes_from_kubectl_json_each_get_their_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let slices = cluster_file(tmp.path());
    assert!(
        std::fs::metadata(&slices).unwrap().len() > 10_000_000,
        "a cluster's list is megabytes: more nodes than the YAML parser's default budget allows"
    );

    // Every node, in node order (numbers as numbers), with the devices of its own slices.
    let (code, out, err) = check(&slices, &["-o", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let claims = report["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 1000);
    let mut verdicts: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, c) in claims.iter().enumerate() {
        let name = node(i);
        assert_eq!(c["node"], name.as_str());
        let verdict = c["verdict"].as_str().unwrap();
        *verdicts.entry(verdict).or_default() += 1;
        if without_nics(i) {
            assert_eq!(verdict, "does-not-fit", "{name}");
            assert_eq!(
                c["reason"],
                "request nic: DeviceClass dranet.net selects none of the node's devices"
            );
        } else if renamed_nic(i) {
            assert_eq!(verdict, "does-not-fit", "{name}");
            let reason = c["reason"].as_str().unwrap();
            assert!(
                reason.starts_with("request nic: selector #0 matches none of the node's devices"),
                "{reason}"
            );
        } else {
            let expected = if nic_across_numa(i) {
                "fits-unaligned"
            } else {
                "fits"
            };
            assert_eq!(verdict, expected, "{name}");
            for d in c["devices"].as_array().unwrap() {
                assert_eq!(d["pool"], name.as_str(), "{name}: a device of another node");
            }
            let devices: Vec<&str> = c["devices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["device"].as_str().unwrap())
                .collect();
            assert_eq!(devices, ["gpu-0", "pci-0101-00-00-0"], "{name}");
        }
    }
    assert_eq!(
        verdicts,
        BTreeMap::from([("does-not-fit", 140), ("fits", 840), ("fits-unaligned", 20)])
    );

    // The table: the counts and reasons first, then one row per node, then the verdict.
    let (code, out, err) = check(&slices, &[]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..9],
        [
            "ResourceClaimTemplate 1nic-aligned on 1000 nodes:",
            "  fits            840",
            "  fits unaligned  20",
            "  does not fit    140",
            "  invalid         0",
            "  why, by number of nodes:",
            "        20  fits unaligned: GPU gpu-0 is on NUMA node 0 but the claim's NICs mlx5_0 (NUMA 1) are on other NUMA nodes: traffic crosses the inter-socket link and GPUDirect RDMA is unlikely (measured on ND GB300 v6: about 25 GB/s per NIC unaligned against 56 GB/s aligned)",
            "       100  does not fit: request nic: DeviceClass dranet.net selects none of the node's devices",
            "        40  does not fit: request nic: selector #0 matches none of the node's devices of DeviceClass dranet.net: device.attributes[\"dra.net\"][\"rdmaDevice\"] == \"mlx5_0\"",
        ],
        "{out}"
    );
    let rows: Vec<&str> = lines
        .iter()
        .copied()
        .skip_while(|l| !l.starts_with("NODE "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(rows.len(), 1000);
    let row = |i: usize| rows[i].split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(row(0), "aks-gb300-0 fits gpu-0,pci-0101-00-00-0 -");
    assert_eq!(
        row(3),
        "aks-gb300-3 does not fit - request nic: DeviceClass dranet.net selects none of the node's devices"
    );
    assert_eq!(row(999), "aks-gb300-999 fits gpu-0,pci-0101-00-00-0 -");
    assert_eq!(
        lines.last().copied(),
        Some(
            "  ResourceClaimTemplate 1nic-aligned: fits on 840 nodes (aks-gb300-0, aks-gb300-1, aks-gb300-2, …); fits unaligned on 20 nodes (aks-gb300-21, aks-gb300-71, aks-gb300-121, …); does not fit on 140 other node(s)"
        )
    );

    // One node still picked by --node: one that does not fit, so the exit code says so.
    let (code, out, err) = check(&slices, &["-o", "json", "--node", "aks-gb300-13"]);
    assert_eq!(code, Some(2), "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["claims"].as_array().map(Vec::len), Some(1));
    assert_eq!(report["claims"][0]["node"], "aks-gb300-13");
    assert_eq!(report["claims"][0]["verdict"], "does-not-fit");

    // A node that is not there: the message names a few nodes, not all 1,000.
    let (code, _, err) = check(&slices, &["--node", "aks-gb300-1000"]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("--node aks-gb300-1000: no slice is on that node (nodes: aks-gb300-0, aks-gb300-1, aks-gb300-10, ")
            && err.contains(", … 990 more)")
            && err.len() < 400,
        "{err}"
    );
}
