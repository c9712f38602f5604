//! A node of 65 NICs, one of which loses its carrier (v1.34.9 and v1.36.3, one test each): what
//! a node of 65+ devices has, and what a slice of 65 devices with one tainted would lose (the
//! 1.35+ API server takes at most 64 devices in a slice with a taint, and refuses the slice:
//! every device of the node gone).
//!
//! `dranet run` publishes 65 veths (`drb0`…`drb64`) in slices of at most 64; `drb7`'s peer goes
//! down. On 1.36 `drb7` gets the `dra.net/unhealthy` taint and the API server takes every slice
//! (on 1.34 it drops the taint, as `health.rs` shows); the pool stays whole, and a pod whose
//! three claims take all 65 (a claim holds at most 32 devices; each `allocationMode: All` over
//! its range, tolerating the taint) is scheduled with every one and runs; after it the host has its 65 veths back, and with the carrier back the taint goes.
//!
//! Needs root and the kit; skipped with a message otherwise.

use std::time::Duration;

use crate::links::{Veths, host_link, ip};
use crate::manifests::{claim_template, device_class};
use dranet_testkit::kit::{Daemon, Kit, V1_34, free_port, http_get, tail, wait_for};

const LIMIT: Duration = Duration::from_secs(120);
const N: usize = 65;
const DOWN: &str = "drb7";
const CLASS: &str = "dranet-big";
const TAINT_KEY: &str = "dra.net/unhealthy";

fn veth(i: usize) -> String {
    format!("drb{i}")
}

/// This node's dra.net slices: the device count of each.
fn slice_sizes(kit: &Kit) -> Vec<usize> {
    let list = kit.get_json(&["resourceslices"]);
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["spec"]["driver"] == "dra.net" && s["spec"]["nodeName"] == kit.node())
        .map(|s| s["spec"]["devices"].as_array().map_or(0, Vec::len))
        .collect()
}

/// The taints of `drb7` as published.
fn taints(kit: &Kit) -> Vec<serde_json::Value> {
    kit.node_device_list("dra.net")
        .into_iter()
        .find(|d| d["name"] == DOWN)
        .and_then(|d| d["taints"].as_array().cloned())
        .unwrap_or_default()
}

/// The claims of the pod: a claim holds at most 32 devices, so three templates take the 65,
/// each every veth of its range (`allocationMode: All`), tolerating the taint.
const PARTS: [(&str, &str); 3] = [
    ("all-65-a", "^drb([0-9]|[12][0-9]|3[01])$"),
    ("all-65-b", "^drb(3[2-9]|[45][0-9]|6[0-3])$"),
    ("all-65-c", "^drb64$"),
];

fn manifests() -> String {
    let mut out = device_class(CLASS, "dra.net");
    for (name, re) in PARTS {
        let devices = format!(
            r#"      requests:
      - name: nics
        exactly:
          deviceClassName: {CLASS}
          allocationMode: All
          selectors:
          - cel: {{expression: 'device.attributes["dra.net"].ifName.matches("{re}")'}}
          tolerations:
          - {{key: {TAINT_KEY}, operator: Exists}}
"#
        );
        out += "---";
        out += &claim_template(name, &devices);
    }
    out
}

/// A pod with the three claims.
fn pod(image: &str) -> String {
    let claims: String = PARTS
        .iter()
        .enumerate()
        .map(|(i, (t, _))| format!("  - {{name: c{i}, resourceClaimTemplateName: {t}}}\n"))
        .collect();
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: big-all, namespace: default}}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  resourceClaims:
{claims}  containers:
  - name: c
    image: {image}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 100000 & wait"]
    resources:
      claims: [{{name: c0}}, {{name: c1}}, {{name: c2}}]
"#
    )
}

pub(crate) fn sixty_five_nics_with_one_link_down_stay_allocatable(kit: &Kit) {
    let tmp = tempfile::tempdir().unwrap();
    let mut veths = Veths::default();
    for i in 0..N {
        veths.add(&veth(i));
    }
    let before: Vec<_> = (0..N).filter_map(|i| host_link(&veth(i))).collect();
    assert_eq!(before.len(), N);
    let port = free_port();
    let mut cmd = kit.dranet_run(
        env!("CARGO_BIN_EXE_dranet"),
        &tmp.path().join("state"),
        port,
    );
    cmd.args(["--cloud-provider-hint", "none"])
        .args([
            "--filter",
            r#""ifName" in device.attributes["dra.net"] && device.attributes["dra.net"].ifName.matches("^drb[0-9]+$")"#,
        ])
        .args(["--inventory-max-poll-interval", "2s"])
        .args(["--log", "info"]);
    let mut daemon = Daemon::spawn(cmd, tmp.path().join("dranet.log"));
    let logs = |d: &Daemon| tail(&d.output(), 40);
    wait_for(
        "the daemon ready with 65 veths published",
        LIMIT,
        || {
            let ready = http_get(port, "/readyz")?.0 == 200;
            (ready && kit.node_devices("dra.net").len() == N).then_some(())
        },
        || logs(&daemon),
    );
    let sizes = slice_sizes(kit);
    assert!(
        sizes.len() >= 2 && sizes.iter().all(|&n| n <= 64),
        "slices of at most 64 devices: {sizes:?}"
    );

    ip(&["link", "set", &format!("{DOWN}p"), "down"]);
    if kit.version == V1_34 {
        wait_for(
            "the daemon's warning that the API server dropped the taint",
            LIMIT,
            || {
                daemon
                    .output()
                    .contains("dropped devices[].taints")
                    .then_some(())
            },
            || logs(&daemon),
        );
    } else {
        wait_for(
            "drb7 tainted in its slice",
            LIMIT,
            || {
                taints(kit)
                    .iter()
                    .any(|t| t["key"] == TAINT_KEY)
                    .then_some(())
            },
            || logs(&daemon),
        );
    }
    // The API server took every slice: all 65 still published, none refused.
    assert_eq!(kit.node_devices("dra.net").len(), N, "{}", logs(&daemon));
    assert!(
        !daemon.output().contains("Too many"),
        "a slice was refused: {}",
        logs(&daemon)
    );

    kit.apply(&manifests());
    let image = kit.var("DRANET_K8S_BUSYBOX_IMAGE");
    kit.apply(&pod(image));
    wait_for(
        "big-all Ready with its 65 NICs",
        LIMIT,
        || kit.pod_ready("big-all").then_some(()),
        || kit.kubectl_ok(&["describe", "pod", "big-all"]) + &logs(&daemon),
    );
    let p = kit.get_json(&["pod", "big-all"]);
    let results: Vec<serde_json::Value> = p["status"]["resourceClaimStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["resourceClaimName"].as_str())
        .flat_map(|name| {
            let c = kit.get_json(&["resourceclaim", name]);
            c["status"]["allocation"]["devices"]["results"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(results.len(), N, "allocated: {results:?}");
    assert!(
        results.iter().any(|r| r["device"] == DOWN),
        "the tainted device, tolerated, is allocated"
    );
    let in_pod = kit.kubectl_ok(&["exec", "big-all", "--", "ls", "/sys/class/net"]);
    let moved = in_pod
        .split_whitespace()
        .filter(|l| l.starts_with("drb"))
        .count();
    assert_eq!(moved, N, "the pod's links: {in_pod}");

    kit.kubectl_ok(&["delete", "pod", "big-all", "--wait=true", "--timeout=90s"]);
    wait_for(
        "the host's 65 veths back",
        LIMIT,
        || {
            let now: Vec<_> = (0..N).filter_map(|i| host_link(&veth(i))).collect();
            (now.len() == N).then_some(())
        },
        || logs(&daemon),
    );
    ip(&["link", "set", &format!("{DOWN}p"), "up"]);
    if kit.version != V1_34 {
        wait_for(
            "drb7's taint gone with its carrier back",
            LIMIT,
            || taints(kit).is_empty().then_some(()),
            || logs(&daemon),
        );
    }
    // The veths back on the host are published again as the rescans see them.
    wait_for(
        "all 65 published again",
        LIMIT,
        || (kit.node_devices("dra.net").len() == N).then_some(()),
        || logs(&daemon),
    );
    for (t, _) in PARTS {
        let _ = kit.kubectl(&["delete", "resourceclaimtemplate", t]);
    }
    let _ = kit.kubectl(&["delete", "deviceclass", CLASS]);
    daemon.stop(Duration::from_secs(30));
    drop(veths);
}
