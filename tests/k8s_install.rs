//! The install a user does, on the real Kubernetes v1.34.9 node of `../shared/k8s/`: the image
//! built offline (`deploy/image/oci-archive.py`) and imported into the node's containerd, then
//! `deploy/install.yaml` applied with this test's patch (below), and:
//!
//! - every manifest of `deploy/` and `examples/azure_aks/` passes `kubectl apply --dry-run=server`
//!   (but the MPIJobs: the kit has no MPI Operator, so their kind is unknown; `tests/deploy.rs`
//!   checks their pod specs and the templates they name);
//! - the image runs `dranet --version` and `dranet inventory` in a container (through CRI, as
//!   the DaemonSet's pod);
//! - the DaemonSet's pod is Running and Ready (its probes answer), its slices are published;
//! - a pod with a claim for `mlx5_0` sees exactly that link's char devices.
//!
//! The patch, and why: the image is the one just built (`localhost/dranet:test`, never pulled);
//! the GB300 fixture is added with `--fixture-sysfs` from a host directory (this node has no
//! RDMA hardware); the NRI socket is the kit containerd's; the API server is reached through a
//! token kubeconfig of the DaemonSet's own service account (`kit.sh sa-kubeconfig`), since the
//! kit's API server listens on the host's loopback only and has no service routing. Everything
//! else is install.yaml as shipped: the service account's RBAC (so the least-privilege
//! ClusterRole is what the daemon really runs with), capabilities, probes, host paths.
//!
//! Needs root and the kit; skipped with a message otherwise.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::k8s::{Kit, tail, wait_for};

const LIMIT: Duration = Duration::from_secs(120);
const IMAGE: &str = "localhost/dranet:test";

fn documents(text: &str) -> Vec<serde_json::Value> {
    serde_saphyr::from_str_multiple::<serde_json::Value, Vec<_>>(text)
        .expect("YAML")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// install.yaml with the test's patch (see the module docs).
fn patched_install(fixture: &Path, nri_socket: &Path, kubeconfig: &Path) -> String {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/install.yaml"))
            .unwrap();
    let mut docs = documents(&text);
    let ds = docs
        .iter_mut()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    let pod = &mut ds["spec"]["template"]["spec"];
    let c = &mut pod["containers"][0];
    c["image"] = IMAGE.into();
    c["imagePullPolicy"] = "Never".into();
    let sock = nri_socket.file_name().unwrap().to_string_lossy();
    c["args"] = serde_json::json!([
        "run",
        "--fixture-sysfs=/fixture/sys",
        "--cloud-provider-hint=none",
        format!("--nri-socket=/var/run/nri/{sock}"),
        "--inventory-min-poll-interval=0",
        "--kubeconfig=/etc/dranet/kubeconfig",
    ]);
    let mounts = c["volumeMounts"].as_array_mut().unwrap();
    mounts.push(serde_json::json!({"name": "fixture", "mountPath": "/fixture", "readOnly": true}));
    mounts.push(serde_json::json!(
        {"name": "kubeconfig", "mountPath": "/etc/dranet/kubeconfig", "readOnly": true}
    ));
    let volumes = pod["volumes"].as_array_mut().unwrap();
    volumes.push(serde_json::json!(
        {"name": "fixture", "hostPath": {"path": fixture, "type": "Directory"}}
    ));
    volumes.push(serde_json::json!(
        {"name": "kubeconfig", "hostPath": {"path": kubeconfig, "type": "File"}}
    ));
    for v in volumes.iter_mut() {
        if v["name"] == "nri" {
            v["hostPath"]["path"] = nri_socket.parent().unwrap().to_string_lossy().into();
        }
    }
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": docs}).to_string()
}

/// kubectl with `input` on its stdin (`-f -`).
fn kubectl_stdin(kit: &Kit, args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = kit
        .command("kubectl")
        .args(args)
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Makes `/run/netns` a shared mount, as it is on a systemd host (whose `/` is shared) and as
/// `ip netns add` leaves it: the DaemonSet mounts it with HostToContainer propagation, which the
/// runtime refuses on a private mount. Left in place afterwards, as iproute2 leaves it.
fn share_netns_dir() {
    let sh = |cmd: &str| {
        let out = Command::new("sh").args(["-c", cmd]).output().expect("sh");
        assert!(
            out.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    sh(
        "mkdir -p /run/netns && { mountpoint -q /run/netns || mount --bind /run/netns /run/netns; } && mount --make-shared /run/netns",
    );
}

fn ctr(kit: &Kit, args: &[&str]) -> std::process::Output {
    Command::new("ctr")
        .args([
            "--address",
            kit.var("DRANET_K8S_CONTAINERD_SOCKET"),
            "-n",
            "k8s.io",
        ])
        .args(args)
        .output()
        .expect("run ctr")
}

#[test]
fn the_install_a_user_does() {
    let Some(kit) = Kit::start("install on a real node") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let fixture = tmp.path().join("fixture");
    dranet_discovery::fixture::azure_nd_gb300_v6(&fixture).unwrap();

    // The image, offline, into the node's containerd.
    let archive = tmp.path().join("dranet.tar");
    let built = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/image/oci-archive.py"))
        .arg(env!("CARGO_BIN_EXE_dranet"))
        .arg(&archive)
        .args(["--name", IMAGE, "--strip"])
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "oci-archive.py: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let imported = ctr(&kit, &["images", "import", archive.to_str().unwrap()]);
    assert!(
        imported.status.success(),
        "ctr import: {}",
        String::from_utf8_lossy(&imported.stderr)
    );

    // Every manifest passes the API server's validation (the namespace first: objects in it
    // cannot be dry-run before it exists).
    kit.kubectl_ok(&["create", "namespace", "dranet"]);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for f in [
        "deploy/install.yaml",
        "examples/azure_aks/deviceclasses.yaml",
        "examples/azure_aks/gb300/templates.yaml",
        "examples/azure_aks/mi300x/templates.yaml",
        "examples/azure_aks/nic-config.yaml",
    ] {
        let out = kit.kubectl(&[
            "apply",
            "--dry-run=server",
            "-f",
            root.join(f).to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The install.
    share_netns_dir();
    let nri = Path::new(kit.var("DRANET_K8S_NRI_SOCKET")).to_path_buf();
    kit.kubectl_ok(&["-n", "dranet", "create", "serviceaccount", "dranet"]);
    // Not kit.command(): the kit's own script needs the machine's PATH.
    let out = Command::new(kit.script())
        .args(["sa-kubeconfig", "dranet", "dranet"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sa-kubeconfig: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kubeconfig = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let manifest = patched_install(&fixture, &nri, Path::new(&kubeconfig));
    let out = kubectl_stdin(&kit, &["apply"], &manifest);
    assert!(
        out.status.success(),
        "apply install.yaml: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pod_name = wait_for(
        "the DaemonSet's pod to be Ready",
        LIMIT,
        || {
            let pods = kit.get_json(&["pods", "-n", "dranet"]);
            pods["items"].as_array()?.iter().find_map(|p| {
                let ready = p["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                ready.then(|| p["metadata"]["name"].as_str().map(str::to_string))?
            })
        },
        || {
            format!(
                "{}\n{}",
                kit.kubectl_ok(&["describe", "pods", "-n", "dranet"]),
                String::from_utf8_lossy(
                    &kit.kubectl(&[
                        "logs",
                        "-n",
                        "dranet",
                        "-l",
                        "app.kubernetes.io/name=dranet"
                    ])
                    .stdout
                )
            )
        },
    );
    let daemon_logs = || {
        tail(
            &String::from_utf8_lossy(&kit.kubectl(&["logs", "-n", "dranet", &pod_name]).stdout),
            40,
        )
    };

    // The image's other commands, in a container of the same image through CRI.
    let version = kit.kubectl_ok(&[
        "exec",
        "-n",
        "dranet",
        &pod_name,
        "--",
        "dranet",
        "--version",
    ]);
    assert!(version.starts_with("dranet "), "{version}");
    let inv = kit.kubectl_ok(&[
        "exec",
        "-n",
        "dranet",
        &pod_name,
        "--",
        "dranet",
        "inventory",
        "--sysfs",
        "/fixture/sys",
    ]);
    assert!(inv.contains("mlx5_3"), "{inv}");

    // Its slices.
    wait_for(
        "the fixture's devices in the node's slices",
        LIMIT,
        || {
            let list = kit.get_json(&["resourceslices"]);
            let names: BTreeSet<String> = list["items"]
                .as_array()?
                .iter()
                .filter(|s| s["spec"]["driver"] == "dra.net")
                .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
                .filter_map(|d| d["name"].as_str().map(str::to_string))
                .collect();
            names.contains("pci-0101-00-00-0").then_some(())
        },
        daemon_logs,
    );

    // A pod with a claim for mlx5_0, through the shipped DeviceClass.
    kit.apply(&format!(
        r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: mlx5-0, namespace: default}}
spec:
  spec:
    devices:
      requests:
      - name: nic
        exactly:
          deviceClassName: dranet
          selectors:
          # A selector that reads a missing attribute is an error for the whole claim in the
          # scheduler: this node also publishes netdevs without RDMA (bridges, ifb).
          - cel: {{expression: '"rdmaDevice" in device.attributes["dra.net"] && device.attributes["dra.net"].rdmaDevice == "mlx5_0"'}}
---
apiVersion: v1
kind: Pod
metadata: {{name: installed-user, namespace: default}}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  resourceClaims:
  - {{name: nic, resourceClaimTemplateName: mlx5-0}}
  containers:
  - name: c
    image: {image}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo DEV $(ls /dev/infiniband | tr '\n' ' '); sleep 100000"]
    resources:
      claims: [{{name: nic}}]
"#,
        image = kit.var("DRANET_K8S_BUSYBOX_IMAGE")
    ));
    let out = wait_for(
        "pod installed-user's output",
        LIMIT,
        || {
            let o = kit.kubectl(&["logs", "installed-user"]);
            let s = String::from_utf8_lossy(&o.stdout).into_owned();
            s.contains("DEV").then_some(s)
        },
        || {
            format!(
                "{}\n{}",
                kit.kubectl_ok(&["describe", "pod", "installed-user"]),
                daemon_logs()
            )
        },
    );
    let got: BTreeSet<&str> = out
        .lines()
        .find_map(|l| l.strip_prefix("DEV "))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let want: BTreeSet<&str> = ["issm0", "rdma_cm", "umad0", "uverbs0"].into();
    assert_eq!(got, want, "the container's /dev/infiniband");

    let _ = kit.kubectl(&["delete", "pod", "installed-user", "--wait=true"]);
    let _ = kit.kubectl(&["delete", "resourceclaimtemplate", "mlx5-0"]);
    let del = kubectl_stdin(&kit, &["delete", "--wait=true"], &manifest);
    assert!(
        del.status.success(),
        "uninstall: {}",
        String::from_utf8_lossy(&del.stderr)
    );
}
