//! `dranet check --kubeconfig` / `--from-cluster` against a real Kubernetes API server (v1.34.9
//! and v1.36.3, one test each; the kit in `../shared/k8s/`): ResourceSlices of two nodes and DeviceClasses created in the
//! cluster, the claim template from a file, the verdict per node. Needs root and the kit;
//! skipped with a message otherwise. The flag errors need no cluster.

use std::process::{Command, Output, Stdio};

use std::time::Duration;

use dranet_testkit::kit::{Kit, wait_for};

use crate::manifests::{claim_template, device_class};

/// The cluster's DeviceClasses: one per driver, as a GPU driver and dranet install them.
fn classes() -> String {
    format!(
        "{}---{}",
        device_class("gpu.example.com", "gpu.example.com"),
        device_class("dranet.net", "dra.net")
    )
}

/// A node's GPU slice (GPUs on NUMA 0 and 1) and dra.net slice (NICs on `nic_numa`).
fn node_slices(node: &str, nic_numa: &[i64]) -> String {
    let nics: Vec<String> = nic_numa
        .iter()
        .enumerate()
        .map(|(i, numa)| {
            format!(
                r#"
  - name: pci-0000-0{i}-00-0
    attributes:
      rdma: {{bool: true}}
      rdmaDevice: {{string: mlx5_{i}}}
      numaNode: {{int: {numa}}}
      resource.kubernetes.io/numaNode: {{int: {numa}}}"#
            )
        })
        .collect();
    format!(
        r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: {node}-gpu}}
spec:
  driver: gpu.example.com
  nodeName: {node}
  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}
  devices:
  - name: gpu-0
    attributes:
      productName: {{string: NVIDIA GB300}}
      resource.kubernetes.io/numaNode: {{int: 0}}
  - name: gpu-1
    attributes:
      productName: {{string: NVIDIA GB300}}
      resource.kubernetes.io/numaNode: {{int: 1}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: {node}-dra.net}}
spec:
  driver: dra.net
  nodeName: {node}
  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}
  devices:{}
"#,
        nics.concat()
    )
}

/// A template named `name`: a GPU on NUMA 0, and a NIC (with `nic_selectors`).
fn template(name: &str, nic_selectors: &str) -> String {
    let devices = format!(
        r#"      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.example.com
          selectors:
          - cel: {{expression: 'device.attributes["resource.kubernetes.io"].numaNode == 0'}}
      - name: nic
        exactly:
          deviceClassName: dranet.net{nic_selectors}
"#
    );
    claim_template(name, &devices)
}

/// Two templates: a GPU and a NIC both on NUMA 0; a GPU on NUMA 0 and any NIC.
fn templates() -> String {
    let numa0 = r#"
          selectors:
          - cel: {expression: 'device.attributes["dra.net"].numaNode == 0'}"#;
    format!(
        "{}---{}",
        template("gpu-nic-numa0", numa0),
        template("gpu0-any-nic", "")
    )
}

/// `dranet check` with `cmd`'s environment, the templates on stdin.
fn check(mut cmd: Command, args: &[&str]) -> Output {
    use std::io::Write;
    let mut child = cmd
        .arg("check")
        .arg("-")
        .args(args)
        .env_remove("NODE_NAME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run dranet");
    let written = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(templates().as_bytes());
    // A flag error ends dranet before it reads its input: the pipe is closed then.
    if let Err(e) = written {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe,
            "write the templates: {e}"
        );
    }
    child.wait_with_output().expect("dranet check")
}

/// (node, verdict) of each report in `-o json` output.
fn verdicts(out: &Output) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    json["claims"]
        .as_array()
        .expect("claims")
        .iter()
        .map(|c| {
            (
                c["node"].as_str().unwrap_or_default().to_string(),
                c["verdict"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

pub(crate) fn check_reads_slices_and_classes_from_a_real_cluster(kit: &Kit) {
    let bin = env!("CARGO_BIN_EXE_dranet");
    let kubeconfig = kit.var("KUBECONFIG").to_string();
    // Node a has a NIC on each NUMA node; node b only on NUMA 1. Neither is the kit's kubelet's
    // node, so the kubelet's slice clean-up cannot race the test.
    kit.apply(&classes());
    kit.apply(&node_slices("check-node-a", &[0, 1]));
    kit.apply(&node_slices("check-node-b", &[1]));
    // The templates are valid API objects: the API server takes them.
    kit.apply(&templates());
    // `dranet check --name NAME --kubeconfig K -o json EXTRA...`.
    let check_json = |name: &str, extra: &[&str]| {
        let mut args = vec!["--name", name, "--kubeconfig", &kubeconfig, "-o", "json"];
        args.extend_from_slice(extra);
        check(kit.command(bin), &args)
    };

    let out = check_json("gpu-nic-numa0", &[]);
    assert_eq!(
        verdicts(&out),
        pairs(&[("check-node-a", "fits"), ("check-node-b", "does-not-fit")])
    );
    assert_eq!(out.status.code(), Some(0), "fits on a node");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    // The scheduler modelled is the API server's version (1.34 or 1.36), not the default.
    assert_eq!(json["kubernetesVersion"], kit.version.kit, "{json}");
    let devices: Vec<(&str, &str)> = json["claims"][0]["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| (d["pool"].as_str().unwrap(), d["device"].as_str().unwrap()))
        .collect();
    assert_eq!(
        devices,
        [
            ("check-node-a", "gpu-0"),
            ("check-node-a", "pci-0000-00-00-0")
        ]
    );
    // The table: docs/check.md shows its verdict line.
    let out = check(
        kit.command(bin),
        &["--name", "gpu-nic-numa0", "--kubeconfig", &kubeconfig],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.ends_with(
            "Verdict:\n  ResourceClaimTemplate gpu-nic-numa0: fits on check-node-a; does not fit on 1 other node(s)\n"
        ),
        "{text}"
    );
    // The classes are the cluster's: no default classes were made up.
    assert!(
        json["notes"].as_array().is_none_or(|n| n
            .iter()
            .all(|n| !n.as_str().unwrap_or("").contains("DeviceClass"))),
        "{json}"
    );

    // The table, and --from-cluster with $KUBECONFIG (the kit's environment sets it).
    let out = check(
        kit.command(bin),
        &["--name", "gpu0-any-nic", "--from-cluster"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("ResourceClaimTemplate gpu0-any-nic on node check-node-a: fits\n"),
        "{text}"
    );
    assert!(
        text.contains("ResourceClaimTemplate gpu0-any-nic on node check-node-b: fits unaligned\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "warning: GPU gpu-0 is on NUMA node 0 but the claim's NICs mlx5_0 (NUMA 1) are on other NUMA nodes"
        ),
        "{text}"
    );
    assert!(
        text.contains("ResourceClaimTemplate gpu0-any-nic: fits on check-node-a; fits unaligned on check-node-b"),
        "{text}"
    );

    // One node, and unaligned as a failure: exit 4.
    let out = check_json(
        "gpu0-any-nic",
        &["--node", "check-node-b", "--fail-on", "warning"],
    );
    assert_eq!(verdicts(&out), pairs(&[("check-node-b", "fits-unaligned")]));
    assert_eq!(out.status.code(), Some(4));

    // A node the cluster does not have is named, with the ones it has.
    let out = check(
        kit.command(bin),
        &["--kubeconfig", &kubeconfig, "--node", "no-such-node"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--node no-such-node: no slice is on that node")
            && err.contains("check-node-a, check-node-b"),
        "{err}"
    );

    // Without the cluster's classes (deleted), the claim's classes are unknown: invalid, as the
    // scheduler would fail the pod.
    kit.kubectl_ok(&["delete", "deviceclass", "gpu.example.com", "dranet.net"]);
    let out = check_json("gpu-nic-numa0", &[]);
    assert_eq!(
        verdicts(&out),
        pairs(&[("check-node-a", "invalid"), ("check-node-b", "invalid")])
    );
    assert_eq!(out.status.code(), Some(3));
    kit.kubectl_ok(&[
        "delete",
        "resourceslices",
        "check-node-a-gpu",
        "check-node-a-dra.net",
        "check-node-b-gpu",
        "check-node-b-dra.net",
    ]);
    kit.kubectl_ok(&[
        "delete",
        "resourceclaimtemplates",
        "gpu-nic-numa0",
        "gpu0-any-nic",
    ]);
}

/// A 1.36 cluster with the alpha `DRAListTypeAttributes` gate keeps list-valued attributes
/// (`numaNode: {ints: [0, 1]}`, a NIC between two NUMA nodes), which the v1 types of
/// Kubernetes 1.34 that dranet is built with do not have: `check --kubeconfig` must read the
/// slices as the API server serves them, not through those types (which left such an attribute
/// without a value: "attribute numaNode: no value").
///
/// The same cluster has the beta `DRADeviceTaintRules` gate on (1.37's default): a
/// DeviceTaintRule on a device of the kit's node keeps the real scheduler from allocating it,
/// and `check --kubeconfig` reads the rule and says the same; without the rule both allocate.
///
/// The gates of [`check_reads_list_attributes_of_a_1_36_cluster_with_the_gate`]'s cluster.
pub(crate) const LIST_GATES: &str = "DRAListTypeAttributes=true,DRADeviceTaintRules=true";

pub(crate) fn check_reads_list_attributes_of_a_1_36_cluster_with_the_gate(kit: &Kit) {
    let nic_slice = |node: &str, numa: &str| {
        format!(
            r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: {node}-dra.net}}
spec:
  driver: dra.net
  nodeName: {node}
  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}
  devices:
  - name: pci-0000-01-00-0
    attributes:
      ifName: {{string: eth1}}
      numaNode: {{ints: {numa}}}
"#
        )
    };
    kit.apply(&classes());
    kit.apply(&nic_slice("list-node-a", "[0, 1]"));
    kit.apply(&nic_slice("list-node-b", "[1]"));
    let stored = kit.get_json(&["resourceslice", "list-node-a-dra.net"]);
    assert_eq!(
        stored["spec"]["devices"][0]["attributes"]["numaNode"],
        serde_json::json!({"ints": [0, 1]}),
        "the API server with {LIST_GATES} keeps the list"
    );
    let template = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: nic-on-both-numa}
spec:
  spec:
    devices:
      requests:
      - name: nic
        exactly:
          deviceClassName: dranet.net
          selectors:
          - cel: {expression: 'device.attributes["dra.net"].numaNode == [0, 1]'}
"#;
    kit.apply(template);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("template.yaml");
    std::fs::write(&file, template).expect("write the template");
    let kubeconfig = kit.var("KUBECONFIG").to_string();
    let out = kit
        .command(env!("CARGO_BIN_EXE_dranet"))
        .args(["check", file.to_str().expect("utf-8 path")])
        .args(["--kubeconfig", &kubeconfig, "-o", "json"])
        .env_remove("NODE_NAME")
        .output()
        .expect("run dranet check");
    assert_eq!(
        verdicts(&out),
        pairs(&[("list-node-a", "fits"), ("list-node-b", "does-not-fit")]),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The harness checks that a scenario leaves the cluster as it found it.
    kit.kubectl_ok(&["delete", "deviceclasses", "gpu.example.com", "dranet.net"]);
    kit.kubectl_ok(&[
        "delete",
        "resourceslices",
        "list-node-a-dra.net",
        "list-node-b-dra.net",
    ]);
    kit.kubectl_ok(&["delete", "resourceclaimtemplate", "nic-on-both-numa"]);
    a_device_taint_rule_keeps_the_scheduler_and_check_off_a_device(kit);
}

/// A device of a driver that runs nowhere (`taint.example.com`), on the kit's node, claimed by
/// a pod: a DeviceTaintRule (`resource.k8s.io/v1beta2` on 1.36) tainting it `NoSchedule` leaves
/// the pod unscheduled and `check` says it does not fit; once the rule is gone the scheduler
/// allocates it and `check` says it fits.
fn a_device_taint_rule_keeps_the_scheduler_and_check_off_a_device(kit: &Kit) {
    let node = kit.node();
    kit.apply(&format!(
        r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: taint-example}}
spec:
  selectors:
  - cel: {{expression: 'device.driver == "taint.example.com"'}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: taint-example}}
spec:
  driver: taint.example.com
  nodeName: {node}
  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}
  devices:
  - name: dev-0
---
apiVersion: resource.k8s.io/v1beta2
kind: DeviceTaintRule
metadata: {{name: maintenance}}
spec:
  deviceSelector: {{driver: taint.example.com, device: dev-0}}
  taint: {{key: example.com/maintenance, effect: NoSchedule}}
"#
    ));
    let template = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: taint-example}
spec:
  spec:
    devices:
      requests:
      - name: dev
        exactly: {deviceClassName: taint-example}
"#;
    kit.apply(template);
    let image = kit.var("DRANET_K8S_BUSYBOX_IMAGE");
    kit.apply(&crate::links::claim_pod(
        "taint-pod",
        "taint-example",
        image,
        "trap 'exit 0' TERM; sleep 100000 & wait",
    ));
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("template.yaml");
    std::fs::write(&file, template).expect("write the template");
    let kubeconfig = kit.var("KUBECONFIG").to_string();
    let check_json = || {
        let out = kit
            .command(env!("CARGO_BIN_EXE_dranet"))
            .args(["check", file.to_str().expect("utf-8 path")])
            .args(["--kubeconfig", &kubeconfig, "-o", "json", "--node", node])
            .env_remove("NODE_NAME")
            .output()
            .expect("run dranet check");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        v
    };
    let scheduled = || {
        let p = kit.get_json(&["pod", "taint-pod"]);
        p["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "PodScheduled"))
            .and_then(|c| c["status"].as_str().map(str::to_string))
    };
    wait_for(
        "the scheduler to have tried taint-pod",
        Duration::from_secs(60),
        &scheduled,
        || kit.kubectl_ok(&["describe", "pod", "taint-pod"]),
    );
    assert_eq!(
        scheduled().as_deref(),
        Some("False"),
        "the tainted device is not allocated: {}",
        kit.kubectl_ok(&["describe", "pod", "taint-pod"])
    );
    let r = check_json();
    let c = &r["claims"][0];
    assert_eq!(c["verdict"], "does-not-fit", "{r}");
    assert_eq!(
        c["reason"],
        "request dev: each of the node's devices of DeviceClass taint-example that pass the selectors has a taint the request does not tolerate (example.com/maintenance:NoSchedule)",
        "{r}"
    );
    assert!(
        r["notes"].as_array().is_some_and(|n| n.iter().any(|n| n
            .as_str()
            .is_some_and(|n| n.starts_with("1 DeviceTaintRule(s)")))),
        "{r}"
    );

    kit.kubectl_ok(&["delete", "devicetaintrule", "maintenance"]);
    wait_for(
        "the scheduler to place taint-pod once the rule is gone",
        Duration::from_secs(60),
        || (scheduled().as_deref() == Some("True")).then_some(()),
        || kit.kubectl_ok(&["describe", "pod", "taint-pod"]),
    );
    let r = check_json();
    assert_eq!(r["claims"][0]["verdict"], "fits", "{r}");

    // Nothing prepares this driver's devices: the pod never starts and is removed by force.
    kit.kubectl_ok(&[
        "delete",
        "pod",
        "taint-pod",
        "--grace-period=0",
        "--force",
        "--wait=true",
    ]);
    kit.kubectl_ok(&["delete", "resourceclaimtemplate", "taint-example"]);
    kit.kubectl_ok(&["delete", "resourceslice", "taint-example"]);
    kit.kubectl_ok(&["delete", "deviceclass", "taint-example"]);
}

pub(crate) fn cluster_flags_name_what_is_wrong_without_a_cluster() {
    let bin = env!("CARGO_BIN_EXE_dranet");
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-kubeconfig");
    let out = check(
        Command::new(bin),
        &["--kubeconfig", missing.to_str().expect("utf-8 path")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("--kubeconfig {}", missing.display())),
        "{err}"
    );
    // A kubeconfig whose server does not answer: an error naming the flag, not a hang or a panic.
    let dead = dir.path().join("dead.yaml");
    std::fs::write(
        &dead,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:1'}\n\
         contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\nusers:\n- name: u\n  user: {}\n",
    )
    .expect("write kubeconfig");
    let out = check(
        Command::new(bin),
        &["--kubeconfig", dead.to_str().expect("utf-8")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // The server's version is the first thing asked (it picks the scheduler modelled).
    assert!(err.contains("read the server version"), "{err}");
    // Files and a cluster are one source or the other; a usage error exits 1, not clap's 2
    // (2 is "fits on no node").
    let out = check(Command::new(bin), &["--kubeconfig", "x", "--slices", "y"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
}
