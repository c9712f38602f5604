//! `dranet check --kubeconfig` at cluster scale against a real API server (v1.36.3, the kit in
//! `../shared/k8s/`; on v1.34.9 it says why it does not run: the scale is the client's paging and
//! the report's memory, which do not depend on the server's version, and
//! `check::check_reads_slices_and_classes_from_a_real_cluster` reads each version's slices): the
//! ResourceSlices of 1,000 fake GB300 nodes (two slices a node,
//! as `tests/it/check_scale.rs` writes them to a file; the API server does not need the Nodes)
//! created in the cluster, then checked. The answers must be those of the same slices read from
//! a file, and the client must read the 2,000 slices in pages. Times are logged, not asserted
//! (the `check` bench and docs/check.md have the figures). Needs root and the kit; skipped with
//! a message otherwise.

use std::collections::BTreeMap;
use std::process::Output;
use std::time::Instant;

use crate::support::cluster::{
    check_1nic_aligned, check_1nic_aligned_from, list_json, mixed_gb300_slices,
};
use dranet_kubeletplugin::{KubeApi, KubeClient};
use dranet_testkit::kit::Kit;
use k8s_openapi::api::resource::v1::ResourceSlice;
use serde_json::Value;

const NODES: usize = 1000;

/// The label of this test's slices, for the one request that deletes them.
const LABEL: (&str, &str) = ("dranet.test/check-scale", "1");

/// Requests in flight while the slices are created: the API server writes them in parallel.
const PARALLEL: usize = 16;

/// Creates `slices` in the cluster, [`PARALLEL`] at a time.
fn create_slices(kubeconfig: &str, slices: Vec<ResourceSlice>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let api = KubeClient::from_kubeconfig(std::path::Path::new(kubeconfig))
            .await
            .expect("a client of the kit's kubeconfig");
        let slices = std::sync::Arc::new(slices);
        let mut tasks = tokio::task::JoinSet::new();
        for first in 0..PARALLEL {
            let (api, slices) = (api.clone(), slices.clone());
            tasks.spawn(async move {
                for s in slices.iter().skip(first).step_by(PARALLEL) {
                    api.create_slice(s).await.expect("create a ResourceSlice");
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.expect("a creating task");
        }
    });
}

/// How many LIST requests of ResourceSlices the API server has answered (its
/// `apiserver_request_total`).
fn slice_lists(kit: &Kit) -> u64 {
    kit.kubectl_ok(&["get", "--raw", "/metrics"])
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains("resource=\"resourceslices\"")
                && l.contains("verb=\"LIST\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The report of `-o json` output.
fn report(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// How many nodes give each verdict.
fn verdicts(report: &Value) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for c in report["claims"].as_array().expect("claims") {
        let v = c["verdict"].as_str().unwrap_or_default().to_string();
        *counts.entry(v).or_default() += 1;
    }
    counts
}

pub(crate) fn check_answers_a_thousand_nodes_from_the_api_server(kit: &Kit) {
    if kit.version.kit == dranet_testkit::kit::V1_34.kit {
        kit.say(
            "1,000 nodes: on v1.36 only (a 1,000-node list pages the same on either server; \
             check_reads_slices_and_classes_from_a_real_cluster reads 1.34's slices)",
        );
        return;
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let bin = env!("CARGO_BIN_EXE_dranet");
    let kubeconfig = kit.var("KUBECONFIG").to_string();
    let values = mixed_gb300_slices(NODES);
    let slices: Vec<ResourceSlice> = values
        .iter()
        .map(|v| {
            let mut s: ResourceSlice = serde_json::from_value(v.clone()).expect("a v1 slice");
            s.metadata.labels = Some([(LABEL.0.into(), LABEL.1.into())].into());
            s
        })
        .collect();
    let count = slices.len();
    kit.apply(
        &std::fs::read_to_string(format!("{root}/examples/azure_aks/deviceclasses.yaml"))
            .expect("the example's DeviceClasses"),
    );
    let t = Instant::now();
    create_slices(&kubeconfig, slices);
    kit.say(format_args!(
        "{count} ResourceSlices of {NODES} nodes created in {:.1?}, {PARALLEL} in parallel",
        t.elapsed()
    ));

    // The same slices from a file: the answers to compare with.
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("slices.json");
    std::fs::write(&file, list_json(values)).expect("write the slices");
    let from_file = report(&check_1nic_aligned(&file, &["-o", "json"]));

    let lists = slice_lists(kit);
    let t = Instant::now();
    let flags = ["--kubeconfig", &kubeconfig, "-o", "json"].map(std::ffi::OsStr::new);
    let out = check_1nic_aligned_from(kit.command(bin), &flags);
    kit.say(format_args!(
        "dranet check --kubeconfig of {NODES} nodes: {:.1?}",
        t.elapsed()
    ));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let from_cluster = report(&out);
    assert_eq!(
        verdicts(&from_cluster),
        BTreeMap::from([
            ("does-not-fit".into(), 140),
            ("fits".into(), 840),
            ("fits-unaligned".into(), 20)
        ])
    );
    // Node by node, the devices, the reasons and the warnings are the file's.
    assert_eq!(from_cluster["claims"], from_file["claims"]);
    // 2,000 slices in pages of 500 (kubectl's size), not in one response.
    let pages = slice_lists(kit) - lists;
    assert!(
        pages >= count.div_ceil(500) as u64,
        "{pages} LIST request(s) for {count} slices"
    );

    // The table starts with the counts, and why.
    let out = check_1nic_aligned_from(kit.command(bin), &["--from-cluster".as_ref()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(
            "ResourceClaimTemplate 1nic-aligned on 1000 nodes:\n  fits            840\n  fits unaligned  20\n  does not fit    140\n"
        ),
        "{text}"
    );
    let head: Vec<&str> = text.lines().take(14).collect();
    kit.say(format_args!("the table's head:\n{}", head.join("\n")));

    // One DELETE of the collection: `kubectl delete -l` deletes them one by one, within
    // kubectl's client-side rate limit (minutes for 2,000).
    kit.kubectl_ok(&[
        "delete",
        "--raw",
        &format!(
            "/apis/resource.k8s.io/v1/resourceslices?labelSelector={}%3D{}",
            LABEL.0, LABEL.1
        ),
    ]);
    let left = kit.kubectl_ok(&[
        "get",
        "resourceslices",
        "-l",
        &format!("{}={}", LABEL.0, LABEL.1),
        "-o",
        "name",
    ]);
    assert_eq!(left, "", "slices left");
    kit.kubectl_ok(&[
        "delete",
        "-f",
        &format!("{root}/examples/azure_aks/deviceclasses.yaml"),
    ]);
}
