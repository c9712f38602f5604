//! The `dranet` binary as an operator runs it, on the fixtures.

use std::process::Command;

use k8s_openapi::api::resource::v1::ResourceSlice;

fn dranet(args: &[&str]) -> (bool, String, String) {
    dranet_with_env(args, &[])
}

fn dranet_with_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let (code, out, err) = dranet_io(args, env, None);
    (code == Some(0), out, err)
}

/// The binary with `env` (and no inherited `$NODE_NAME`) and `stdin`: exit code, stdout, stderr.
fn dranet_io(
    args: &[&str],
    env: &[(&str, &str)],
    stdin: Option<&str>,
) -> (Option<i32>, String, String) {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_dranet"))
        .args(args)
        .env_remove("NODE_NAME")
        .envs(env.iter().copied())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run dranet");
    if let (Some(s), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(s.as_bytes()).expect("write stdin");
    }
    let out = child.wait_with_output().expect("dranet output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `dranet inventory --sysfs <sysfs> args…`.
fn inventory(sysfs: &str, args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["inventory", "--sysfs", sysfs];
    all.extend_from_slice(args);
    dranet(&all)
}

/// Runs the binary with `env`, which must fail with each of `words` in its stderr.
fn fails_saying(args: &[&str], env: &[(&str, &str)], words: &[&str]) {
    let (ok, _, err) = dranet_with_env(args, env);
    assert!(!ok, "{args:?} must fail");
    for w in words {
        assert!(err.contains(w), "{w:?} not in {err}");
    }
}

const GB300: &str = "testdata/nodes/azure-nd-gb300-v6/sys";

/// `dranet check` of one GB300 template on the GB300 fixture with its GPU slices, plus `extra`.
fn check_gb300(name: &str, extra: &[&str]) -> (bool, String, String) {
    let (code, out, err) = check_gb300_code(name, extra);
    (code == Some(0), out, err)
}

/// [`check_gb300`] with the exit code.
fn check_gb300_code(name: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut args = vec![
        "check",
        "examples/azure_aks/gb300/templates.yaml",
        "--name",
        name,
        "--sysfs",
        GB300,
        "--slices",
        "testdata/slices/azure-nd-gb300-v6-gpu.yaml",
        "--classes",
        "examples/azure_aks/deviceclasses.yaml",
    ];
    args.extend_from_slice(extra);
    dranet_io(&args, &[], None)
}

#[test]
fn inventory_json_is_the_resource_slice_the_daemon_publishes() {
    let (ok, out, err) = inventory(GB300, &["--node-name", "aks-gb300-0", "-o", "json"]);
    assert!(ok, "{err}");
    let slice: ResourceSlice = serde_json::from_str(&out).expect("a v1 ResourceSlice");
    let raw: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(raw["apiVersion"], "resource.k8s.io/v1");
    assert_eq!(raw["kind"], "ResourceSlice");
    assert_eq!(
        slice.metadata.name.as_deref(),
        Some("aks-gb300-0-dra.net-0")
    );
    assert_eq!(slice.spec.driver, "dra.net");
    assert_eq!(slice.spec.node_name.as_deref(), Some("aks-gb300-0"));
    assert_eq!(slice.spec.pool.name, "aks-gb300-0");
    assert_eq!(slice.spec.pool.resource_slice_count, 1);
    let devices = slice.spec.devices.unwrap();
    let rows: Vec<(String, String, i64, bool)> = devices
        .iter()
        .map(|d| {
            let a = d.attributes.as_ref().unwrap();
            (
                d.name.clone(),
                a["rdmaDevice"].string.clone().unwrap(),
                a["numaNode"].int.unwrap(),
                a["ibOnly"].bool.unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("pci-0101-00-00-0".into(), "mlx5_0".into(), 0, true),
            ("pci-0102-00-00-0".into(), "mlx5_1".into(), 0, true),
            ("pci-0103-00-00-0".into(), "mlx5_2".into(), 1, true),
            ("pci-0104-00-00-0".into(), "mlx5_3".into(), 1, true),
        ]
    );
}

#[test]
fn inventory_yaml_and_table() {
    let (ok, out, err) = inventory(
        "testdata/nodes/sriov-64vf/sys",
        &["--node-name", "n1", "-o", "yaml"],
    );
    assert!(ok, "{err}");
    let docs: Vec<ResourceSlice> = out
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).expect("a ResourceSlice"))
        .collect();
    // 65 devices: a slice of 64 (the API's limit once a device has a taint, which dranet sets
    // whenever a link loses its carrier) and one of 1, one pool.
    let sizes: Vec<usize> = docs
        .iter()
        .map(|d| d.spec.devices.as_ref().map_or(0, Vec::len))
        .collect();
    assert_eq!(sizes, [64, 1]);
    for (i, d) in docs.iter().enumerate() {
        assert_eq!(
            d.metadata.name.as_deref(),
            Some(format!("n1-dra.net-{i}").as_str())
        );
        assert_eq!(d.spec.pool.resource_slice_count, 2);
    }

    let (ok, out, _) = dranet(&["inventory", "--sysfs", GB300]);
    assert!(ok);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("NAME"));
    assert_eq!(lines.len(), 5);
    assert!(
        lines[3].starts_with("pci-0103-00-00-0")
            && lines[3].contains("mlx5_2")
            && lines[3].contains(" 1 "),
        "{}",
        lines[3]
    );
}

#[test]
fn topo_shows_the_seed_matrix() {
    let (ok, out, err) = dranet(&["topo", "--sysfs", GB300]);
    assert!(ok, "{err}");
    let row = |g: &str| {
        out.lines()
            .find(|l| l.starts_with(g))
            .unwrap()
            .split_whitespace()
            .skip(1)
            .collect::<Vec<_>>()
    };
    // Relations, then CPU and NUMA affinity as nvidia-smi topo -m prints them.
    assert_eq!(row("GPU0"), ["NODE", "NODE", "SYS", "SYS", "0-71", "0"]);
    assert_eq!(row("GPU3"), ["SYS", "SYS", "NODE", "NODE", "72-143", "1"]);
    assert!(
        out.contains("GPU0: 0008:06:00.0 NUMA 0 pci0008:00"),
        "{out}"
    );
    // JSON for scripts: the same matrix.
    let (ok, json, _) = dranet(&["topo", "--sysfs", GB300, "-o", "json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        v["relations"][0],
        serde_json::json!(["NODE", "NODE", "SYS", "SYS"])
    );
    assert_eq!(v["gpus"][3]["cpuAffinity"], "72-143");
    assert_eq!(v["nics"][2]["rdmaDevice"], "mlx5_2");
    assert!(out.contains("NIC2: mlx5_2 pci-0103-00-00-0 NUMA 1"));
    let (ok, out, _) = dranet(&["topo", "--sysfs", "testdata/nodes/bm-mi300x-8/sys"]);
    assert!(ok);
    for g in 0..8 {
        let cells: Vec<&str> = out
            .lines()
            .find(|l| l.starts_with(&format!("GPU{g} ")))
            .unwrap()
            .split_whitespace()
            .skip(1)
            .collect();
        assert_eq!(cells[g], "PIX", "GPU{g}");
        assert_eq!(cells.iter().filter(|c| **c == "PIX").count(), 1);
    }
}

/// GPUs from another driver's slices: one the sysfs tree has is that GPU (no second row); one it
/// lacks is placed by its attributes (PHB at best, as attributes cannot tell switches apart).
#[test]
fn topo_takes_gpus_from_slices() {
    let (ok, out, err) = dranet(&[
        "topo",
        "--sysfs",
        GB300,
        "--slices",
        "testdata/slices/azure-nd-gb300-v6-gpu.yaml",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("GPU3 ") && !out.contains("GPU4 "), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let slice = dir.path().join("gpu.yaml");
    std::fs::write(
        &slice,
        r#"apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: extra}
spec:
  driver: gpu.example.com
  nodeName: aks-gb300-0
  pool: {name: aks-gb300-0, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-9
    attributes:
      resource.kubernetes.io/pciBusID: {string: "0109:00:00.0"}
      resource.kubernetes.io/pcieRoot: {string: "pci0101:00"}
      numaNode: {int: 0}
      productName: {string: Example GPU}
"#,
    )
    .unwrap();
    let slice = slice.to_str().unwrap();
    let (ok, out, err) = dranet(&["topo", "--sysfs", GB300, "--slices", slice]);
    assert!(ok, "{err}");
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("GPU4 "))
        .unwrap_or_else(|| panic!("{out}"))
        .split_whitespace()
        .skip(1)
        .collect();
    assert_eq!(row, ["PHB", "NODE", "SYS", "SYS", "0-71", "0"], "{out}");
    assert!(
        out.contains(
            "GPU4: 0109:00:00.0 NUMA 0 pci0101:00 Example GPU (slice device \
             gpu.example.com/aks-gb300-0/gpu-9: relations from its attributes)"
        ),
        "{out}"
    );
    let (ok, json, _) = dranet(&["topo", "--sysfs", GB300, "--slices", slice, "-o", "json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        v["relations"][4],
        serde_json::json!(["PHB", "NODE", "SYS", "SYS"])
    );
    assert_eq!(
        v["gpus"][4]["sliceDevice"],
        "gpu.example.com/aks-gb300-0/gpu-9"
    );
    // Not a slice: named, with the file.
    let (ok, _, err) = dranet(&[
        "topo",
        "--sysfs",
        GB300,
        "--slices",
        "examples/azure_aks/deviceclasses.yaml",
    ]);
    assert!(
        !ok && err.contains("deviceclasses.yaml") && err.contains("is not ResourceSlice"),
        "{err}"
    );
}

#[test]
fn errors_are_one_line_and_a_nonzero_exit() {
    let (ok, out, err) = dranet(&["inventory", "--sysfs", "/no/such/dir"]);
    assert!(!ok);
    assert!(out.is_empty());
    assert_eq!(
        err.trim(),
        "dranet: error: --sysfs /no/such/dir: not a directory"
    );
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("sys/devices")).unwrap();
    std::fs::write(tmp.path().join("links.json"), "not json").unwrap();
    let sys = tmp.path().join("sys");
    let (ok, _, err) = dranet(&["topo", "--sysfs", sys.to_str().unwrap()]);
    assert!(!ok);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("links.json"), "{err}");
}

#[test]
fn edge_case_warnings_go_to_stderr_and_do_not_fail() {
    let (ok, out, err) = dranet(&["inventory", "--sysfs", "testdata/nodes/edge-cases/sys"]);
    assert!(ok);
    assert!(err.contains("vfio-pci"), "{err}");
    // A header and the five PCI devices the default --filter publishes.
    assert_eq!(out.lines().count(), 6, "{out}");
}

#[test]
fn inventory_with_azure_imds_shows_the_fabric_attributes_on_every_device() {
    use dranet_azure::fake::FakeImds;
    let doc = |n: &str| {
        std::fs::read_to_string(format!("{}/testdata/imds/{n}", env!("CARGO_MANIFEST_DIR")))
            .unwrap()
    };
    let imds = FakeImds::start_blocking(FakeImds::documents(
        doc("gb300-compute.json"),
        doc("gb300-network.json"),
    ))
    .unwrap();
    let (ok, out, err) = inventory(
        GB300,
        &["--azure-imds-endpoint", &imds.endpoint, "-o", "json"],
    );
    assert!(ok, "{err}");
    let slice: ResourceSlice = serde_json::from_str(&out).unwrap();
    let devices = slice.spec.devices.unwrap();
    assert_eq!(devices.len(), 4);
    for d in &devices {
        let a = d.attributes.as_ref().unwrap();
        assert_eq!(
            a["azure.dra.net/placementGroupId"].string.as_deref(),
            Some("8f0c7c3e-5d1a-4b8e-9f3e-2a6b1c4d7e90"),
            "{}",
            d.name
        );
        assert_eq!(
            a["azure.dra.net/vmSize"].string.as_deref(),
            Some("Standard_ND128isr_GB300_v6")
        );
        assert_eq!(
            a["azure.dra.net/interconnectGroupId"].string.as_deref(),
            Some("icg-eastus2-0042")
        );
        assert_eq!(
            a["azure.dra.net/interconnectSubgroupId"].string.as_deref(),
            Some("icsg-0042-07")
        );
        assert!(a.len() <= 32);
    }
    // A fixture without an endpoint never asks this machine's metadata service.
    let (ok, out, _) = inventory(GB300, &["-o", "json"]);
    assert!(ok && !out.contains("azure.dra.net"));
    // Hint none wins over an endpoint.
    let (ok, out, _) = inventory(
        GB300,
        &[
            "--azure-imds-endpoint",
            &imds.endpoint,
            "--cloud-provider-hint",
            "NONE",
            "-o",
            "json",
        ],
    );
    assert!(ok && !out.contains("azure.dra.net"));
}

/// Issue 5's test of record: the seeds' `ib-same-fabric` template selects the GB300 NICs when the
/// node's placement group (from IMDS) is the job's, and nothing when it is another.
#[test]
fn ib_same_fabric_follows_the_placement_group_from_imds() {
    use dranet_azure::fake::FakeImds;
    let doc = |n: &str| {
        std::fs::read_to_string(format!("{}/testdata/imds/{n}", env!("CARGO_MANIFEST_DIR")))
            .unwrap()
    };
    let check = |compute: String| {
        let imds =
            FakeImds::start_blocking(FakeImds::documents(compute, doc("gb300-network.json")))
                .unwrap();
        check_gb300(
            "ib-same-fabric",
            &["--azure-imds-endpoint", &imds.endpoint, "-o", "json"],
        )
    };
    let (ok, out, err) = check(doc("gb300-compute.json"));
    assert!(ok, "{err}\n{out}");
    for nic in ["mlx5_0", "mlx5_1"] {
        assert!(out.contains(nic), "{nic} not allocated:\n{out}");
    }
    assert!(!out.contains("mlx5_2") && !out.contains("mlx5_3"), "{out}");

    let other = doc("gb300-compute.json").replace(
        "8f0c7c3e-5d1a-4b8e-9f3e-2a6b1c4d7e90",
        "11111111-2222-3333-4444-555555555555",
    );
    let (ok, out, err) = check(other);
    assert!(!ok, "allocated on another fabric:\n{out}");
    assert!(!out.contains("pci-0101-00-00-0"), "{out}");
    assert!(
        err.contains("cannot be allocated") || out.contains("cannot allocate"),
        "{err}\n{out}"
    );
}

#[test]
fn check_shows_the_seeds_relations() {
    let (ok, out, err) = dranet(&[
        "check",
        "examples/azure_aks/gb300/templates.yaml",
        "--name",
        "1nic-unaligned",
        "--sysfs",
        GB300,
        "--slices",
        "testdata/slices/azure-nd-gb300-v6-gpu.yaml",
        "--classes",
        "examples/azure_aks/deviceclasses.yaml",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("pci-0103-00-00-0") && out.contains("mlx5_2"),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("gpu-0") && l.contains("SYS"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains("SYS"));
    assert!(
        out.contains("warning: GPU gpu-0 is on NUMA node 0"),
        "{out}"
    );
}

#[test]
fn check_refuses_unknown_fields_like_the_api_server() {
    let dir = tempfile::tempdir().unwrap();
    let claim = dir.path().join("typo.yaml");
    std::fs::write(
        &claim,
        r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: typo
spec:
  spec:
    devices:
      requests:
      - name: nic
        exactly:
          deviceClassName: dranet.net
          selector:
          - cel:
              expression: device.attributes["dra.net"].numaNode == 1
"#,
    )
    .unwrap();
    let (ok, out, err) = dranet(&["check", claim.to_str().unwrap(), "--sysfs", GB300]);
    assert!(!ok, "a typo must not pick a NIC: {out}");
    assert!(
        err.contains("devices.requests[0].exactly.selector") && err.contains("unknown field"),
        "{err}"
    );
}

#[test]
fn a_sysfs_that_is_not_a_sysfs_tree_is_an_error_with_a_hint() {
    // The fixture's folder instead of its sys/.
    let (ok, out, err) = dranet(&["inventory", "--sysfs", "testdata/nodes/azure-nd-gb300-v6"]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("not a sysfs tree")
            && err.contains("did you mean --sysfs testdata/nodes/azure-nd-gb300-v6/sys"),
        "{err}"
    );
    let empty = tempfile::tempdir().unwrap();
    for cmd in ["inventory", "topo"] {
        let (ok, _, err) = dranet(&[cmd, "--sysfs", empty.path().to_str().unwrap()]);
        assert!(!ok && err.contains("not a sysfs tree"), "{cmd}: {err}");
    }
}

#[test]
fn check_names_the_sysfs_node_like_inventory_does() {
    let (ok, stdout, err) = dranet_with_env(
        &[
            "check",
            "examples/azure_aks/mi300x/templates.yaml",
            "--name",
            "gpu1-same-pcie-root",
            "--sysfs",
            "testdata/nodes/bm-mi300x-8/sys",
            "--slices",
            "testdata/slices/bm-mi300x-8-gpu.yaml",
            "--classes",
            "examples/azure_aks/deviceclasses.yaml",
        ],
        &[("NODE_NAME", "bm-mi300x-8")],
    );
    assert!(ok, "{err}");
    let nic = stdout
        .lines()
        .find(|l| l.contains("mlx5_1"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        nic.contains("bm-mi300x-8"),
        "the NIC's pool is the node from $NODE_NAME: {nic}"
    );
}

/// `--node` is the node checked and, with `--sysfs`, the node the tree is; the deprecated
/// `--node-name` still works, says so on stderr, and is not in `--help`.
#[test]
fn check_node_is_the_sysfs_node_and_node_name_is_a_deprecated_spelling() {
    let (ok, by_node, err) = check_gb300("1nic-aligned", &["--node", "aks-gb300-0"]);
    assert!(ok, "{err}");
    assert!(
        by_node.contains("1nic-aligned on node aks-gb300-0: fits"),
        "{by_node}"
    );
    assert!(!err.contains("deprecated"), "{err}");
    let (ok, by_node_name, err) = check_gb300("1nic-aligned", &["--node-name", "aks-gb300-0"]);
    assert!(ok, "{err}");
    assert_eq!(by_node_name, by_node);
    assert!(
        err.contains("--node-name is deprecated for check; use --node"),
        "{err}"
    );
    let (_, _, err) = check_gb300(
        "1nic-aligned",
        &["--node", "aks-gb300-0", "--node-name", "aks-gb300-0"],
    );
    assert!(err.contains("cannot be used with"), "{err}");
    let (ok, help, err) = dranet(&["check", "--help"]);
    assert!(ok, "{err}");
    assert!(help.contains("--node <NODE>"), "{help}");
    assert!(!help.contains("--node-name"), "{help}");
}

#[test]
fn run_refuses_bad_flags_at_start_naming_the_flag() {
    let cases: [(&[&str], &str); 6] = [
        (&["--bind-address", "9177"], "--bind-address"),
        (
            &["--provider-refresh-timeout", "0"],
            "--provider-refresh-timeout: must be more than 0",
        ),
        (
            &[
                "--filter",
                r#"attributes["dra.net/type"].StringValue != "veth""#,
            ],
            r#"device.attributes["dra.net"].type"#,
        ),
        (&["--filter", "device.attributes["], "--filter"),
        (
            &["--inventory-max-poll-interval", "1x"],
            "--inventory-max-poll-interval",
        ),
        (&["--sysfs", "/nonexistent"], "--sysfs /nonexistent"),
    ];
    for (args, want) in cases {
        let mut all = vec!["run", "--kubeconfig", "/nonexistent/kubeconfig"];
        all.extend_from_slice(args);
        let (ok, _, err) = dranet(&all);
        assert!(!ok, "{args:?} must fail");
        assert!(
            err.contains(want),
            "{args:?}: stderr {err:?} lacks {want:?}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    // Every flag also reads an environment variable.
    fails_saying(
        &["run", "--kubeconfig", "/nonexistent/kubeconfig"],
        &[("DRANET_BIND_ADDRESS", "nope")],
        &["--bind-address"],
    );
    // Good flags reach the API client, which names the kubeconfig that is not there.
    fails_saying(
        &[
            "run",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--sysfs",
            "testdata/nodes/azure-nd-gb300-v6/sys",
        ],
        &[],
        &["/nonexistent/kubeconfig"],
    );
}

#[test]
fn doctor_on_the_gb300_fixture_shows_links_topology_and_the_uplink() {
    let (ok, out, err) = dranet(&["doctor", "--sysfs", "testdata/nodes/azure-nd-gb300-v6/sys"]);
    assert!(ok, "{out}{err}");
    for i in 0..4 {
        assert!(
            out.contains(&format!("RDMA link mlx5_{i} (/dev/infiniband/uverbs{i}")),
            "{out}"
        );
    }
    assert!(
        out.contains(
            "GPU 0008:06:00.0 (NUMA 0): nearest NICs pci-0101-00-00-0, pci-0102-00-00-0 (NODE)"
        ),
        "{out}"
    );
    assert!(
        out.contains("OK   uplink    eth0 carries the host's default route (IPv4 default via 10.224.0.1, table main, metric 100, proto dhcp)"),
        "{out}"
    );
    assert!(!out.contains("FAIL"), "{out}");
    // JSON for scripts.
    let (ok, out, _) = dranet(&[
        "doctor",
        "--sysfs",
        "testdata/nodes/azure-nd-gb300-v6/sys",
        "-o",
        "json",
    ]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v.as_array().unwrap().iter().all(|f| f["status"] == "ok"),
        "{out}"
    );
}

#[test]
fn doctor_on_this_machine_names_each_problem_with_its_fix_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, out, err) = dranet(&[
        "doctor",
        "--nri-socket",
        "/nonexistent/nri.sock",
        "--kubelet-root-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!ok, "{out}");
    assert!(err.contains("checks failed"), "{err}");
    assert!(
        out.contains("FAIL runtime   no NRI socket at /nonexistent/nri.sock"),
        "{out}"
    );
    assert!(out.contains("fix: enable NRI"), "{out}");
    assert!(out.contains("plugins_registry is missing"), "{out}");
    // With the directories there, the kubelet check passes.
    std::fs::create_dir_all(dir.path().join("plugins_registry")).unwrap();
    std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
    let (_, out, _) = dranet(&[
        "doctor",
        "--nri-socket",
        "/nonexistent/nri.sock",
        "--kubelet-root-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!out.contains("FAIL kubelet"), "{out}");
    assert!(out.contains("OK   kubelet"), "{out}");
}

/// kubectl reads YAML 1.1, where an unquoted `0101:00:00.0` is a sexagesimal number: the slices
/// `inventory -o yaml` prints must quote such strings (serde_yaml did not; serde-saphyr does).
#[test]
fn inventory_yaml_quotes_what_yaml_1_1_would_read_as_numbers() {
    let (ok, out, err) = inventory("testdata/nodes/azure-nd-gb300-v6/sys", &["-o", "yaml"]);
    assert!(ok, "{err}");
    let mut seen = 0;
    for line in out.lines() {
        if let Some(v) = line.trim().strip_prefix("string: ") {
            let bare = v.trim_matches(['"', '\'']);
            if bare.contains(':')
                && bare
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
            {
                seen += 1;
                assert!(v.starts_with(['"', '\'']), "unquoted {v} in\n{out}");
            }
        }
    }
    assert!(
        seen >= 8,
        "the PCI addresses of 4 devices (pciAddress, pciBusID): {seen}"
    );
}

const EDGE: &str = "testdata/nodes/edge-cases/sys";

#[test]
fn inventory_shows_what_is_not_published_and_why() {
    let (ok, out, err) = inventory(EDGE, &["--show-excluded"]);
    assert!(ok, "{err}");
    let section = out
        .split("NOT PUBLISHED")
        .nth(1)
        .unwrap_or_else(|| panic!("no exclusion section in\n{out}"));
    assert!(
        section.contains("eth0") && section.contains("table main, metric 100"),
        "{section}"
    );
    assert!(section.contains("rxe2") && section.contains("on eth0, which is not published"));
    // The host's only IPv6 default, learned from a router advertisement, makes an uplink too.
    assert!(
        section.lines().any(|l| l.starts_with("rail2 ")
            && l.contains("uplink: IPv6 default via fe80::1, table main, metric 1024, proto ra")),
        "{section}"
    );
    // What is stacked on the uplink is held with it; virtual interfaces are left out by the
    // default --filter, which says how to publish them.
    assert!(
        section.lines().any(|l| l.starts_with("mvlan0 ")
            && l.ends_with("stacked on eth0, part of the node's uplink")),
        "{section}"
    );
    assert!(
        section.lines().any(|l| l.starts_with("cni0 ")
            && l.contains("a virtual interface of type bridge")
            && l.ends_with("name type bridge in --filter to publish it")),
        "{section}"
    );
    // An empty --filter publishes them.
    let (ok, all, err) = inventory(EDGE, &["--filter", ""]);
    assert!(ok, "{err}");
    assert!(all.lines().any(|l| l.starts_with("cni0 ")), "{all}");
    // The rails (policy-table default, backup default) are published.
    assert!(out.contains("rail0") && out.contains("rail1"), "{out}");
    // Without the flag, no section.
    let (_, plain, _) = dranet(&["inventory", "--sysfs", EDGE]);
    assert!(!plain.contains("NOT PUBLISHED"));
}

#[test]
fn uplink_interfaces_override_detection() {
    let (ok, out, err) = inventory(EDGE, &["--uplink-interfaces", "rail1", "--show-excluded"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("pci-0000-00-02-0") && out.contains("pci-0000-00-0c-0"),
        "eth0 and rail2 are published now:\n{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("rail1 ") && l.ends_with("uplink named by --uplink-interfaces (its PCI function 0000:00:0b.0 is not published either)")),
        "{out}"
    );
}

#[test]
fn an_invalid_node_name_is_an_error_naming_where_it_came_from() {
    fails_saying(
        &["inventory", "--sysfs", EDGE, "-o", "json"],
        &[("NODE_NAME", "(none)")],
        &["\"(none)\" (from $NODE_NAME)", "--node-name"],
    );
    fails_saying(
        &[
            "inventory",
            "--sysfs",
            EDGE,
            "-o",
            "yaml",
            "--node-name",
            "Node_1",
        ],
        &[],
        &["\"Node_1\" (from --node-name)"],
    );
}

#[test]
fn inventory_wide_and_name_outputs() {
    let (ok, out, err) = inventory(GB300, &["-o", "name"]);
    assert!(ok, "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "pci-0101-00-00-0",
            "pci-0102-00-00-0",
            "pci-0103-00-00-0",
            "pci-0104-00-00-0"
        ]
    );
    let (ok, out, err) = inventory(GB300, &["-o", "wide"]);
    assert!(ok, "{err}");
    let head: Vec<&str> = out
        .lines()
        .next()
        .unwrap()
        .split("  ")
        .filter(|c| !c.is_empty())
        .map(str::trim)
        .collect();
    assert!(
        head.contains(&"PORT STATE") && head.contains(&"LINK LAYER"),
        "{head:?}"
    );
    let mlx5_0 = out.lines().find(|l| l.contains("mlx5_0")).unwrap();
    assert!(
        mlx5_0.contains("ACTIVE") && mlx5_0.contains("InfiniBand"),
        "{mlx5_0}"
    );
}

#[test]
fn a_saved_imds_document_gives_the_azure_attributes_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let compute = std::fs::read_to_string(format!(
        "{}/testdata/imds/gb300-compute.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    // The whole instance document, as curl …/metadata/instance returns it.
    let doc = tmp.path().join("imds.json");
    std::fs::write(&doc, format!("{{\"compute\": {compute}}}")).unwrap();
    let (ok, out, err) = inventory(
        GB300,
        &[
            "--node-name",
            "aks-gb300-0",
            "-o",
            "json",
            "--azure-imds-file",
            doc.to_str().unwrap(),
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("8f0c7c3e-5d1a-4b8e-9f3e-2a6b1c4d7e90"),
        "placementGroupId missing:\n{out}"
    );
    // ib-same-fabric can then be checked without a metadata service.
    let (ok, out, err) = check_gb300(
        "ib-same-fabric",
        &["--azure-imds-file", doc.to_str().unwrap()],
    );
    assert!(ok, "{out}\n{err}");
    std::fs::write(&doc, "[1]").unwrap();
    fails_saying(
        &[
            "inventory",
            "--sysfs",
            GB300,
            "--azure-imds-file",
            doc.to_str().unwrap(),
        ],
        &[],
        &["--azure-imds-file", "expected a JSON object"],
    );
}

/// `dranet check`'s exit codes tell the outcomes apart, and `-` reads the claim from stdin.
#[test]
fn check_exit_codes_and_stdin() {
    let code = check_gb300_code;
    assert_eq!(code("1nic-aligned", &[]).0, Some(0));
    let (c, out, err) = code("1nic-unaligned", &[]);
    assert_eq!(c, Some(0), "{err}");
    assert!(out.contains("fits unaligned"), "{out}");
    assert_eq!(code("1nic-unaligned", &["--fail-on", "warning"]).0, Some(4));
    // Without IMDS the placement-group selector hits a missing attribute: a CEL runtime error,
    // which fails the pod in the scheduler.
    let (c, _, err) = code("ib-same-fabric", &[]);
    assert_eq!(c, Some(3), "{err}");
    assert!(err.contains("invalid: ib-same-fabric"), "{err}");
    assert_eq!(code("no-such", &[]).0, Some(1));
    let too_many = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: nine}\nspec:\n  devices:\n    requests:\n    - name: nic\n      exactly: {deviceClassName: dranet.net, count: 9}\n";
    let (c, out, err) = dranet_io(
        &[
            "check",
            "-",
            "--sysfs",
            GB300,
            "--classes",
            "examples/azure_aks/deviceclasses.yaml",
        ],
        &[],
        Some(too_many),
    );
    assert_eq!(c, Some(2), "{out}{err}");
    assert!(out.contains("ResourceClaim nine on node"), "{out}");
    // An error in standard input says so.
    let typo = too_many.replace("count: 9", "cuont: 9");
    let (c, _, err) = dranet_io(&["check", "-", "--sysfs", GB300], &[], Some(&typo));
    assert_eq!(c, Some(1), "{err}");
    assert!(
        err.starts_with("dranet: error: <stdin>:8:46: document 1 (ResourceClaim nine): spec.devices.requests[0].exactly.cuont: unknown field, did you mean \"count\"?"),
        "{err}"
    );
}

#[test]
fn version_names_the_commit() {
    let (ok, out, _) = dranet(&["--version"]);
    assert!(ok);
    // `dranet 0.1.0 (commit 0123456789ab)`, or `unknown` outside git without $DRANET_COMMIT.
    let commit = out
        .trim()
        .strip_suffix(')')
        .and_then(|s| s.rsplit_once("(commit "))
        .map(|(_, c)| c.to_string())
        .unwrap_or_else(|| panic!("no commit in {out:?}"));
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "{out}"
    );
    assert!(
        out.starts_with(&format!("dranet {}", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
}

/// `dranet check` on files written into a temporary directory: exit code, stdout, stderr.
fn check_files(claims: &str, slices: &str) -> (Option<i32>, String, String) {
    check_files_with(claims, slices, &[])
}

/// [`check_files`] with `extra` arguments.
fn check_files_with(claims: &str, slices: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let (c, s) = (
        dir.path().join("claims.yaml"),
        dir.path().join("slices.yaml"),
    );
    std::fs::write(&c, claims).unwrap();
    std::fs::write(&s, slices).unwrap();
    let (c, s) = (c.to_str().unwrap(), s.to_str().unwrap());
    let mut args = vec!["check", c, "--slices", s];
    args.extend_from_slice(extra);
    let (code, out, err) = dranet_io(&args, &[], None);
    // Paths in messages are the temporary ones: shown relative for the assertions.
    let dir = format!("{}/", dir.path().display());
    (code, out.replace(&dir, ""), err.replace(&dir, ""))
}

const GOOD_SLICE: &str = "apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-nics}
spec:
  driver: dra.net
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: nic0
    attributes:
      dra.net/numaNode: {int: 0}
";

const GOOD_TEMPLATE: &str = "apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: good}
spec:
  spec:
    devices:
      requests:
      - name: nic
        exactly: {deviceClassName: dra.net}
";

/// Strict decoding as the API server does it, with the place of each problem: file, line and
/// column, document, kind and name, field path. Every bad document is reported, not only the
/// first, and nothing is checked (exit 1, empty stdout): an answer without the bad documents
/// would be about other claims or other devices.
#[test]
fn every_bad_document_is_reported_with_its_field_path_and_line() {
    // A typo three levels down a selector list, and a wrong type in a v1beta1 request (whose
    // fields have no `exactly`: the path is the one in the file).
    let claims = format!(
        "{GOOD_TEMPLATE}---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: typo}}
spec:
  spec:
    devices:
      requests:
      - name: nic
        exactly:
          deviceClassName: dra.net
          selectors:
          - cel: {{expression: 'true'}}
          - cel:
              expresion: device.attributes[\"dra.net\"].numaNode == 0
          zzz: 1
---
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaimTemplate
metadata: {{name: wrong-type}}
spec:
  spec:
    devices:
      requests:
      - name: nic
        deviceClassName: dra.net
        count: two
"
    );
    let (code, out, err) = check_files(&claims, GOOD_SLICE);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.is_empty(), "no partial report: {out}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines,
        [
            "dranet: error: claims.yaml:24:15: document 2 (ResourceClaimTemplate typo): \
             spec.spec.devices.requests[0].exactly.selectors[1].cel.expresion: unknown field, \
             did you mean \"expression\"? (the API server rejects unknown fields)",
            "dranet: error: claims.yaml:25:11: document 2 (ResourceClaimTemplate typo): \
             spec.spec.devices.requests[0].exactly.zzz: unknown field (the API server rejects \
             unknown fields; the fields here are adminAccess, allocationMode, capacity, count, \
             deviceClassName, selectors, tolerations)",
            "dranet: error: claims.yaml:36:16: document 3 (ResourceClaimTemplate wrong-type): \
             spec.spec.devices.requests[0].count: invalid type: string \"two\", expected i64",
        ],
        "{err}"
    );
}

/// A bad second document of three (a YAML syntax error) does not hide a bad third one, in the
/// slices too; the slices' own errors name the field, in a `kind: List` as kubectl prints them.
#[test]
fn a_bad_second_document_of_three_does_not_hide_the_third() {
    let claims = format!(
        "{GOOD_TEMPLATE}---
kind: ResourceClaimTemplate
metadata: {{name: broken, labels: [a, }}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: third}}
spec:
  devices:
    requests:
    - name: nic
      exactly: {{deviceClassName: dra.net, count: '2'}}
"
    );
    let slices = format!(
        "apiVersion: v1
kind: List
items:
- {}
---
kind: DeviceClass
metadata: {{name: x}}
spec: {{selectors: {{cel: {{expression: 'true'}}}}}}
",
        GOOD_SLICE
            .trim_end()
            .replace("{int: 0}", "{int: zero}")
            .replace('\n', "\n  ")
    );
    let (code, out, err) = check_files(&claims, &slices);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.is_empty(), "{out}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines,
        [
            "dranet: error: slices.yaml:14:33: document 1 (ResourceSlice n1-nics): \
             spec.devices[0].attributes.dra.net/numaNode.int: invalid type: string \"zero\", expected i64",
            "dranet: error: slices.yaml:18:19: document 2 (DeviceClass x): spec.selectors: \
             invalid type: map, expected a sequence",
            "dranet: error: claims.yaml:12:34: document 2: invalid YAML: mismatched bracket '[' closed by '}'",
            "dranet: error: claims.yaml:21:50: document 3 (ResourceClaim third): \
             spec.devices.requests[0].exactly.count: invalid type: string \"2\", expected i64",
        ],
        "{err}"
    );
}

/// The completion and man commands as a user runs them: a script bash accepts, one page on
/// stdout, every page with `--out-dir`, and a clear error for an unknown command.
#[test]
fn completion_and_man_pages_from_the_binary() {
    let (ok, script, err) = dranet(&["completion", "bash"]);
    assert!(ok, "{err}");
    assert!(script.contains("complete -F _dranet"), "{script}");
    // What the script holds, and that bash parses it: the unit tests in src/main.rs.
    let dir = tempfile::tempdir().unwrap();
    let (ok, page, err) = dranet(&["man", "check"]);
    assert!(ok, "{err}");
    assert!(page.contains(".TH dranet-check 1"), "{page}");
    let out = dir.path().join("man1");
    let (ok, _, err) = dranet(&["man", "--out-dir", out.to_str().unwrap()]);
    assert!(ok, "{err}");
    for page in [
        "dranet.1",
        "dranet-check.1",
        "dranet-inventory.1",
        "dranet-man.1",
    ] {
        let text = std::fs::read_to_string(out.join(page)).unwrap_or_default();
        assert!(
            text.starts_with(".ie") && text.contains(".SH NAME"),
            "{page}"
        );
    }
    fails_saying(&["man", "nope"], &[], &["no command \"nope\"", "check"]);
}

/// What the allocator refuses in a slice (a version that is not semver, a quantity with an
/// unknown suffix) is an input error of that slice's document, at the field, for every slice.
#[test]
fn a_slice_the_allocator_refuses_is_an_error_at_its_field() {
    let slices = format!(
        "{}---\n{}",
        GOOD_SLICE.replace(
            "{int: 0}",
            "{int: 0}\n      dra.net/firmwareVersion: {version: '1.2'}"
        ),
        GOOD_SLICE.replace("n1", "n2").replace(
            "    attributes:",
            "    capacity:\n      dra.net/bandwidth: {value: 12Q}\n    attributes:"
        )
    );
    let (code, out, err) = check_files(GOOD_TEMPLATE, &slices);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.is_empty(), "{out}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with(
            "dranet: error: slices.yaml:12:7: document 1 (ResourceSlice n1-nics): \
             spec.devices[0].attributes.dra.net/firmwareVersion: invalid semver \"1.2\""
        ),
        "{err}"
    );
    assert!(
        lines[1].starts_with(
            "dranet: error: slices.yaml:24:7: document 2 (ResourceSlice n2-nics): \
             spec.devices[0].capacity.dra.net/bandwidth: invalid quantity \"12Q\""
        ),
        "{err}"
    );
}

/// `--kubernetes-version` picks the scheduler that answers: 1.37 (the default) and 1.36 honour device
/// taints, 1.34 (whose API server drops them, the gate being off) does not; an unsupported
/// version is a usage error naming the supported ones.
#[test]
fn check_answers_as_the_kubernetes_version_asked_for() {
    let tainted = GOOD_SLICE.replace(
        "      dra.net/numaNode: {int: 0}\n",
        "      dra.net/numaNode: {int: 0}\n    taints:\n    - {key: dra.net/down, effect: NoSchedule}\n",
    );
    let run = |extra: &[&str]| check_files_with(GOOD_TEMPLATE, &tainted, extra);
    let (code, out, err) = run(&[]);
    assert_ne!(
        code,
        Some(0),
        "1.37 (the default) must refuse the tainted NIC:\n{out}\n{err}"
    );
    for v in ["1.36", "1.37"] {
        let (code, out, err) = run(&["--kubernetes-version", v]);
        assert_ne!(code, Some(0), "{v}: {out}\n{err}");
    }
    let (code, out, err) = run(&["--kubernetes-version", "v1.34.9"]);
    assert_eq!(code, Some(0), "1.34 ignores taints:\n{out}\n{err}");
    let (code, _, err) = run(&["--kubernetes-version", "1.33"]);
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("1.33 is not supported (supported: 1.34, 1.35, 1.36, 1.37)"),
        "{err}"
    );
}
