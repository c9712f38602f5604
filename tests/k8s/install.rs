//! The installs an operator does, on the real node of `../shared/k8s/` (Kubernetes v1.34.9 and
//! v1.36.3, one test each): the image built offline (`deploy/image/oci-archive.py`) and imported
//! into the node's containerd, then, one after the other on the same cluster (helm on v1.36 only:
//! its objects are install.yaml's, which both versions take, and its release does not depend on
//! the version),
//!
//! 1. **kubectl**: `deploy/install.yaml` applied with this test's patch (below):
//!    - while the node carries the control plane's taint, the DaemonSet schedules no pod (the
//!      default tolerations are a choice, not "everything");
//!    - the DaemonSet's pod is Ready (its probes answer), its slices are published, the
//!      ValidatingAdmissionPolicy type-checks;
//!    - a pod with a claim for `mlx5_0` and the host's veth `drt0` (with a config) sees exactly
//!      that link's char devices and the veth configured, and **networkData reaches the claim's
//!      status**: written by the daemon with its pod's own projected token, so on 1.36 it passes
//!      only with the `resourceclaims/driver` `associated-node:patch` rule;
//!    - the admission policy, with a token bound to the daemon's pod: its own node's slice is
//!      accepted, another node's is refused (created or deleted) with the policy's message, and a
//!      token not bound to a pod writes none;
//!    - deleting the pod gives the host its veth back as it was; `kubectl delete -f` removes it all
//!      (the slices the kubelet removes later are checked after the helm uninstall).
//! 2. **helm**: `helm install` of `deploy/helm/dranet` with the same patch as values (so
//!    `extraArgs`, `extraEnv`, `extraVolumes` and `nriSocket` are exercised), the pod with the claim
//!    gets its devices and networkData; `helm upgrade` with a changed value (`log.level`) rolls the
//!    DaemonSet (a new pod with the new argument) and the running pod keeps its devices, which the
//!    new daemon gives back to the host when the pod goes; `helm uninstall` removes every object the
//!    release made, and the node is as before but for the documented state (the state dir and the
//!    kubelet plugin's checkpoint).
//!
//! Before either, every manifest passes `kubectl apply --dry-run=server`: `deploy/install.yaml`,
//! `kubectl apply -k deploy`, the chart rendered with `ci/*-values.yaml` but the ServiceMonitor one
//! (no prometheus-operator CRDs here; `tests/it/deploy.rs` checks it), and `examples/azure_aks/` (but
//! the MPIJobs: the kit has no MPI Operator; `tests/it/deploy.rs` checks their pod specs).
//!
//! The patch, and why: the image is the one just built (`localhost/dranet:test`, never pulled);
//! the GB300 fixture is added with `--fixture-sysfs` from a host directory (this node has no RDMA
//! hardware) and veths named `drt*` are published (`--filter`); the state directory is the
//! test's own (a killed run's records stay out of the next); the NRI socket is the kit
//! containerd's, and its pods' network namespaces live under its state dir, mounted like
//! `/run/netns`; the API server is reached at 127.0.0.1 (`KUBERNETES_SERVICE_HOST`/`_PORT`), since
//! the kit has no service routing, the daemon being on the host network. Everything else is as
//! shipped: the DaemonSet pod's own service account token (bound to the pod, as on any cluster),
//! its RBAC and admission policy, capabilities, probes, host paths.
//!
//! Needs root, the kit and helm (`.ci/helm.sh`); skipped with a message otherwise.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::links::{
    VETH_FILTER, Veths, check_veth_in_pod, host_link, ip, nic_and_veth_template, nic_pod,
};
use crate::support::chart::{
    CHART_KINDS, GUIDE_HELM_INSTALL, GUIDE_HELM_UNINSTALL, GUIDE_HELM_UPGRADE, documents, helm,
    root,
};
use dranet_testkit::kit::{Kit, tail, wait_for};

const LIMIT: Duration = Duration::from_secs(120);
const IMAGE: &str = "localhost/dranet:test";
const NS: &str = "dranet";
const VETH: &str = "drt0";
/// What the daemon's pods carry.
const DAEMON_SELECTOR: &str = "app.kubernetes.io/name=dranet";

/// The image archive, built once per test process (both versions import it).
fn image_archive() -> &'static Path {
    static ARCHIVE: OnceLock<PathBuf> = OnceLock::new();
    ARCHIVE.get_or_init(|| {
        let archive = Path::new(env!("CARGO_TARGET_TMPDIR")).join("k8s-install-dranet.tar");
        let built = Command::new("python3")
            .arg(root().join("deploy/image/oci-archive.py"))
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
        archive
    })
}

/// `program ARGS` with `input` on its stdin.
fn with_stdin(mut cmd: Command, input: &str) -> Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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

fn ok(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sh(cmd: &str) {
    let out = Command::new("sh").args(["-c", cmd]).output().expect("sh");
    ok(cmd, &out);
}

/// A directory made a shared mount (bound onto itself first if it is no mount point), so the
/// DaemonSet's `HostToContainer` mount of it sees the network namespaces mounted there later (a
/// systemd host's `/` is shared, and `ip netns add` leaves `/run/netns` so). Left in place.
fn share(dir: &Path) {
    let d = dir.display();
    sh(&format!(
        "mkdir -p {d} && {{ mountpoint -q {d} || mount --bind {d} {d}; }} && mount --make-shared {d}"
    ));
}

/// Names under `dir`, recursively, relative to it (empty when it does not exist).
fn tree(dir: &Path) -> BTreeSet<String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            out.insert(p.strip_prefix(base).unwrap().display().to_string());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(base, &p, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, dir, &mut out);
    out
}

/// What an install may leave on the node, for before/after comparison.
#[derive(Debug, PartialEq)]
struct NodeState {
    registry: BTreeSet<String>,
    plugin: BTreeSet<String>,
    state: BTreeSet<String>,
    links: BTreeSet<String>,
    veth: Option<serde_json::Value>,
}

/// The cluster and host pieces both installs use.
struct Node<'a> {
    kit: &'a Kit,
    _tmp: tempfile::TempDir,
    fixture: PathBuf,
    /// The daemon's state directory on the host: the test's own, so a killed earlier run's
    /// records do not reach this one.
    state_dir: PathBuf,
    /// Where the kit's containerd mounts pods' network namespaces.
    pod_netns: PathBuf,
    /// The API server as the daemon on the host network reaches it.
    api_host: String,
    api_port: String,
    _veths: Veths,
}

impl<'a> Node<'a> {
    fn prepare(kit: &'a Kit) -> Node<'a> {
        let tmp = tempfile::tempdir().unwrap();
        let fixture = tmp.path().join("fixture");
        dranet_discovery::fixture::azure_nd_gb300_v6(&fixture).unwrap();
        let state_dir = tmp.path().join("state");
        let t = Instant::now();
        let imported = kit.ctr(&["images", "import", image_archive().to_str().unwrap()]);
        ok("ctr images import", &imported);
        kit.say(format_args!(
            "image built and imported in {:.1?}",
            t.elapsed()
        ));
        share(Path::new("/run/netns"));
        let pod_netns = Path::new(kit.var("DRANET_K8S_DIR"))
            .join("containerd/state/io.containerd.grpc.v1.cri/netns");
        share(&pod_netns);
        let server = kit.kubectl_ok(&[
            "config",
            "view",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ]);
        let (host, port) = server
            .trim()
            .trim_start_matches("https://")
            .rsplit_once(':')
            .expect("the API server's host:port");
        let mut veths = Veths::default();
        veths.add(VETH);
        ip(&["link", "set", VETH, "mtu", "1450"]);
        ip(&["addr", "add", "192.0.2.10/24", "dev", VETH]);
        Node {
            kit,
            _tmp: tmp,
            fixture,
            state_dir,
            pod_netns,
            api_host: host.to_string(),
            api_port: port.to_string(),
            _veths: veths,
        }
    }

    /// What the daemon's container gets beside what is shipped (see the module docs).
    fn extra_args(&self) -> Vec<String> {
        vec![
            "--fixture-sysfs=/fixture/sys".into(),
            "--cloud-provider-hint=none".into(),
            "--inventory-min-poll-interval=0".into(),
            format!("--filter={VETH_FILTER}"),
        ]
    }

    fn extra_env(&self) -> serde_json::Value {
        serde_json::json!([
            {"name": "KUBERNETES_SERVICE_HOST", "value": self.api_host},
            {"name": "KUBERNETES_SERVICE_PORT", "value": self.api_port},
        ])
    }

    fn extra_volumes(&self) -> serde_json::Value {
        serde_json::json!([
            {"name": "fixture", "hostPath": {"path": self.fixture, "type": "Directory"}},
            {"name": "pod-netns", "hostPath": {"path": self.pod_netns, "type": "Directory"}},
        ])
    }

    fn extra_mounts(&self) -> serde_json::Value {
        serde_json::json!([
            {"name": "fixture", "mountPath": "/fixture", "readOnly": true},
            {"name": "pod-netns", "mountPath": self.pod_netns, "mountPropagation": "HostToContainer"},
        ])
    }

    fn nri_socket(&self) -> &str {
        self.kit.var("DRANET_K8S_NRI_SOCKET")
    }

    fn state(&self) -> NodeState {
        let kubelet = self.kit.kubelet_root_dir();
        let links = ip(&["-j", "link", "show"]);
        let links: serde_json::Value = serde_json::from_str(&links).unwrap();
        NodeState {
            registry: tree(&kubelet.join("plugins_registry")),
            plugin: tree(&kubelet.join("plugins/dra.net")),
            state: tree(&self.state_dir),
            links: links
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|l| l["ifname"].as_str().map(str::to_string))
                .collect(),
            veth: host_link(VETH),
        }
    }

    /// The DaemonSet's Ready pod (name, uid), waiting for it.
    fn daemon_pod(&self, not: Option<&str>) -> (String, String) {
        let kit = self.kit;
        wait_for(
            "the DaemonSet's pod to be Ready",
            LIMIT,
            || {
                let pods = kit.get_json(&["pods", "-n", NS, "-l", DAEMON_SELECTOR]);
                pods["items"].as_array()?.iter().find_map(|p| {
                    let uid = p["metadata"]["uid"].as_str()?;
                    let name = p["metadata"]["name"].as_str()?;
                    let ready = p["status"]["conditions"]
                        .as_array()?
                        .iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True");
                    (ready && Some(uid) != not && p["metadata"]["deletionTimestamp"].is_null())
                        .then(|| (name.to_string(), uid.to_string()))
                })
            },
            || self.daemon_context(),
        )
    }

    fn daemon_context(&self) -> String {
        let kit = self.kit;
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&kit.kubectl(&["describe", "pods", "-n", NS]).stdout),
            self.daemon_logs()
        )
    }

    fn daemon_logs(&self) -> String {
        let out = self
            .kit
            .kubectl(&["logs", "-n", NS, "-l", DAEMON_SELECTOR, "--tail=60"]);
        tail(&String::from_utf8_lossy(&out.stdout), 60)
    }

    fn wait_slices(&self) {
        let kit = self.kit;
        wait_for(
            "the fixture's devices and the veth in the node's slices",
            LIMIT,
            || {
                let names = kit.node_devices("dra.net");
                (names.contains("pci-0101-00-00-0") && names.contains(VETH)).then_some(())
            },
            || self.daemon_logs(),
        );
    }

    /// A pod with a claim for mlx5_0 and the veth (configured); checks what it sees and the
    /// claim's networkData; returns the pod's char devices.
    fn user_pod(&self, pod: &str) -> BTreeSet<String> {
        let kit = self.kit;
        kit.apply(&format!(
            "{}---{}",
            claim_template(),
            nic_pod(pod, "mlx5-0-and-veth", kit.var("DRANET_K8S_BUSYBOX_IMAGE"))
        ));
        let out = wait_for(
            &format!("pod {pod}'s output"),
            LIMIT,
            || {
                let o = kit.kubectl(&["logs", pod]);
                let s = String::from_utf8_lossy(&o.stdout).into_owned();
                s.contains("END").then_some(s)
            },
            || {
                format!(
                    "{}\n{}",
                    kit.kubectl_ok(&["describe", "pod", pod]),
                    self.daemon_logs()
                )
            },
        );
        let got: BTreeSet<String> = out
            .lines()
            .find_map(|l| l.strip_prefix("DEV "))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let want: BTreeSet<String> = ["issm0", "rdma_cm", "umad0", "uverbs0"]
            .map(String::from)
            .into();
        assert_eq!(got, want, "the container's /dev/infiniband\n{out}");
        // networkData, written by the daemon with its pod's own token.
        let claim = kit.pod_claim(pod).expect("the pod's claim");
        check_veth_in_pod(kit, &out, &claim, VETH, Duration::from_secs(60), || {
            self.daemon_logs()
        });
        got
    }

    /// Deletes the pod and its template; the host gets its veth back as it was.
    fn delete_user_pod(&self, pod: &str, veth_before: &Option<serde_json::Value>) {
        let kit = self.kit;
        kit.kubectl_ok(&["delete", "pod", pod, "--wait=true", "--timeout=60s"]);
        kit.kubectl_ok(&["delete", "resourceclaimtemplate", "mlx5-0-and-veth"]);
        let after = wait_for(
            "the veth back on the host",
            LIMIT,
            || host_link(VETH),
            || self.daemon_logs(),
        );
        assert_eq!(
            &Some(after),
            veth_before,
            "the host's veth after the pod\n{}",
            self.daemon_logs()
        );
    }
}

/// A claim template for mlx5_0 and the veth, through the shipped DeviceClass `dranet`.
fn claim_template() -> String {
    // A selector that reads a missing attribute is an error for the whole claim in the
    // scheduler: this node also publishes netdevs without RDMA.
    nic_and_veth_template(
        "mlx5-0-and-veth",
        "dranet",
        r#""rdmaDevice" in device.attributes["dra.net"] && device.attributes["dra.net"].rdmaDevice == "mlx5_0""#,
        VETH,
    )
}

pub(crate) fn installs_with_kubectl_then_helm(kit: &Kit) {
    let Some(helm) = helm() else {
        panic!("no helm: run .ci/helm.sh (it caches helm in /var/cache/dranet-helm)");
    };
    let node = Node::prepare(kit);
    let before = node.state();
    dry_runs(kit, &helm);
    let t = Instant::now();
    kubectl_install(&node, &before);
    kit.say(format_args!(
        "kubectl install and uninstall in {:.1?}",
        t.elapsed()
    ));
    if kit.version.kit == dranet_testkit::kit::V1_34.kit {
        // The chart renders the objects install.yaml holds, which 1.34 just took; the release's
        // life (values, upgrade, uninstall) does not depend on the version and runs on 1.36.
        kit.say("helm: on v1.36 only (the chart's objects were just installed with kubectl)");
        return;
    }
    let t = Instant::now();
    helm_install(&node, &helm, &before);
    kit.say(format_args!(
        "helm install, upgrade and uninstall in {:.1?}",
        t.elapsed()
    ));
}

/// Every manifest passes the API server's validation (the namespace first: objects in it cannot
/// be dry-run before it exists).
fn dry_runs(kit: &Kit, helm: &Path) {
    kit.kubectl_ok(&["create", "namespace", NS]);
    let dry = |args: &[&str], what: &str| {
        let mut a = vec!["apply", "--dry-run=server"];
        a.extend_from_slice(args);
        ok(what, &kit.kubectl(&a));
    };
    for f in [
        "deploy/install.yaml",
        "examples/azure_aks/deviceclasses.yaml",
        "examples/azure_aks/gb300/templates.yaml",
        "examples/azure_aks/mi300x/templates.yaml",
        "examples/azure_aks/nic-config.yaml",
    ] {
        dry(&["-f", root().join(f).to_str().unwrap()], f);
    }
    dry(
        &["-k", root().join("deploy").to_str().unwrap()],
        "-k deploy",
    );
    let chart = crate::support::chart::chart();
    for values in ["ci/custom-values.yaml", "ci/minimal-values.yaml"] {
        let values_file = chart.join(values);
        let rendered = ok(
            values,
            &crate::support::chart::template(helm, &["-f", values_file.to_str().unwrap()]),
        );
        let mut cmd = kit.command("kubectl");
        cmd.args(["apply", "--dry-run=server", "-f", "-"]);
        ok(values, &with_stdin(cmd, &rendered));
    }
}

/// install.yaml with the test's patch (see the module docs).
fn patched_install(node: &Node) -> String {
    let text = std::fs::read_to_string(root().join("deploy/install.yaml")).unwrap();
    let mut docs = documents(&text);
    let ds = docs
        .iter_mut()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    let pod = &mut ds["spec"]["template"]["spec"];
    // The hook's installer runs the same image.
    for init in pod["initContainers"].as_array_mut().into_iter().flatten() {
        init["image"] = IMAGE.into();
        init["imagePullPolicy"] = "Never".into();
    }
    let c = &mut pod["containers"][0];
    c["image"] = IMAGE.into();
    c["imagePullPolicy"] = "Never".into();
    // The state directory at its host path inside too, as the chart's stateDir does: the hook
    // runs on the host and dials the socket the daemon names from inside.
    let state = node.state_dir.to_string_lossy().to_string();
    for m in c["volumeMounts"].as_array_mut().into_iter().flatten() {
        if m["name"] == "state" {
            m["mountPath"] = state.clone().into();
        }
    }
    for a in c["args"].as_array_mut().into_iter().flatten() {
        if a.as_str().is_some_and(|a| a.starts_with("--state-dir=")) {
            *a = format!("--state-dir={state}").into();
        }
    }
    let args = c["args"].as_array_mut().unwrap();
    args.extend(node.extra_args().into_iter().map(serde_json::Value::from));
    let env = c["env"].as_array_mut().unwrap();
    env.extend(node.extra_env().as_array().unwrap().iter().cloned());
    let mounts = c["volumeMounts"].as_array_mut().unwrap();
    mounts.extend(node.extra_mounts().as_array().unwrap().iter().cloned());
    let volumes = pod["volumes"].as_array_mut().unwrap();
    volumes.extend(node.extra_volumes().as_array().unwrap().iter().cloned());
    // The kit's containerd has its NRI socket elsewhere, under the same file name.
    let nri = Path::new(node.nri_socket());
    assert_eq!(nri.file_name().unwrap(), "nri.sock");
    for v in volumes.iter_mut() {
        if v["name"] == "nri" {
            v["hostPath"]["path"] = nri.parent().unwrap().to_string_lossy().into();
        }
        if v["name"] == "state" {
            v["hostPath"]["path"] = node.state_dir.to_string_lossy().into();
        }
        // The kit's containerd reads its CDI specs from a directory of its own.
        if v["name"] == "cdi" {
            v["hostPath"]["path"] = node.kit.var("DRANET_K8S_CDI_DIR").into();
        }
    }
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": docs}).to_string()
}

/// A token kubeconfig for the daemon's service account, bound to `pod` when given.
fn token_kubeconfig(node: &Node, dir: &Path, pod: Option<(&str, &str)>) -> PathBuf {
    let kit = node.kit;
    let mut args = vec!["-n", NS, "create", "token", "dranet", "--duration=10m"];
    if let Some((name, uid)) = pod {
        args.extend([
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            name,
            "--bound-object-uid",
            uid,
        ]);
    }
    let token = kit.kubectl_ok(&args);
    let path = dir.join(format!(
        "token-{}.kubeconfig",
        pod.map_or("unbound", |p| p.0)
    ));
    let ca = Path::new(kit.var("DRANET_K8S_DIR")).join("pki/ca.crt");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kit\n  cluster: {{server: \"https://{}:{}\", certificate-authority: \"{}\"}}\nusers:\n- name: dranet\n  user: {{token: \"{}\"}}\ncontexts:\n- name: dranet\n  context: {{cluster: kit, user: dranet}}\ncurrent-context: dranet\n",
            node.api_host,
            node.api_port,
            ca.display(),
            token.trim()
        ),
    )
    .unwrap();
    path
}

fn slice_yaml(name: &str, node: &str, pool: &str) -> String {
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {name}}}\nspec: {{driver: dra.net, nodeName: {node}, pool: {{name: {pool}, generation: 1, resourceSliceCount: 1}}, devices: [{{name: d0}}]}}\n"
    )
}

/// The admission policy, with tokens of the daemon's service account.
fn admission_policy(node: &Node, daemon_pod: &(String, String)) {
    let kit = node.kit;
    let dir = tempfile::tempdir().unwrap();
    let bound = token_kubeconfig(node, dir.path(), Some((&daemon_pod.0, &daemon_pod.1)));
    let unbound = token_kubeconfig(node, dir.path(), None);
    let as_daemon = |kubeconfig: &Path, args: &[&str], input: Option<&str>| {
        let mut cmd = kit.command("kubectl");
        cmd.arg("--kubeconfig").arg(kubeconfig).args(args);
        match input {
            Some(i) => with_stdin(cmd, i),
            None => cmd.output().unwrap(),
        }
    };
    // Dry run: the daemon deletes any slice of its driver and node it did not publish. That it
    // writes its own node's slices under the policy, the slices it published show.
    let node_name = kit.node();
    let own = slice_yaml(&format!("{node_name}-dra.net-99"), node_name, node_name);
    let out = as_daemon(
        &bound,
        &["create", "--dry-run=server", "-f", "-"],
        Some(&own),
    );
    ok("the daemon's token writes its own node's slice", &out);

    // A taken-over node squatting another node's slice name (with its own nodeName), or
    // writing into another node's pool: refused, so the other node's daemon keeps its names.
    for (name, pool) in [
        ("another-node-dra.net-0".to_string(), node_name.to_string()),
        (
            format!("{node_name}-dra.net-98"),
            "another-node".to_string(),
        ),
        (format!("{node_name}-dra.net-x"), node_name.to_string()),
    ] {
        let squat = slice_yaml(&name, node_name, &pool);
        let out = as_daemon(
            &bound,
            &["create", "--dry-run=server", "-f", "-"],
            Some(&squat),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && err.contains(&format!(
                    "(pool {pool}, name {name}; this node's are named {node_name}-dra.net-<index>)"
                )),
            "slice {name} in pool {pool}: {err}"
        );
    }

    let other = slice_yaml("dranet-test-other", "another-node", "another-node");
    let out = as_daemon(&bound, &["create", "-f", "-"], Some(&other));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("denied request")
            && err.contains(&format!(
                "dranet on node {} writes only that node's dra.net ResourceSlices, not one with nodeName another-node and driver dra.net",
                kit.node()
            )),
        "another node's slice: {err}"
    );
    // Nor another node's existing slice (made by the admin) may it delete.
    kit.apply(&other);
    let out = as_daemon(
        &bound,
        &["delete", "resourceslice", "dranet-test-other"],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("nodeName another-node"),
        "deleting another node's slice: {err}"
    );
    kit.kubectl_ok(&["delete", "resourceslice", "dranet-test-other"]);

    let out = as_daemon(
        &unbound,
        &["create", "--dry-run=server", "-f", "-"],
        Some(&own),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("writes ResourceSlices only with a token bound to a pod on a node"),
        "a token not bound to a pod: {err}"
    );
    kit.say("admission policy: own node's slice accepted; another node's, another node's slice names and pool refused; an unbound token refused");
}

fn kubectl_install(node: &Node, before: &NodeState) {
    let kit = node.kit;
    let manifest = patched_install(node);

    // Tainted as a control-plane node: the default tolerations do not reach it.
    let taint = "node-role.kubernetes.io/control-plane:NoSchedule";
    kit.kubectl_ok(&["taint", "node", kit.node(), taint]);
    let mut apply = kit.command("kubectl");
    apply.args(["apply", "-f", "-"]);
    ok("apply install.yaml", &with_stdin(apply, &manifest));
    wait_for(
        "the DaemonSet's controller to schedule no pod on the control-plane node",
        LIMIT,
        || {
            let ds = kit.get_json(&["daemonset", "-n", NS, "dranet"]);
            (ds["status"]["observedGeneration"] == ds["metadata"]["generation"]
                && ds["status"]["desiredNumberScheduled"] == 0)
                .then_some(())
        },
        || kit.kubectl_ok(&["describe", "daemonset", "-n", NS, "dranet"]),
    );
    kit.kubectl_ok(&["taint", "node", kit.node(), &format!("{taint}-")]);
    let daemon = node.daemon_pod(None);

    // The admission policy's expressions type-check against this API server's types.
    let vap = kit.get_json(&["validatingadmissionpolicy", "dranet-own-node-slices"]);
    assert!(
        vap["status"]["typeChecking"]["expressionWarnings"].is_null(),
        "type checking: {}",
        vap["status"]
    );

    // The image's other commands, in a container of the same image through CRI.
    let version = kit.kubectl_ok(&["exec", "-n", NS, &daemon.0, "--", "dranet", "--version"]);
    assert!(version.starts_with("dranet "), "{version}");
    let inv = kit.kubectl_ok(&[
        "exec",
        "-n",
        NS,
        &daemon.0,
        "--",
        "dranet",
        "inventory",
        "--sysfs",
        "/fixture/sys",
    ]);
    assert!(inv.contains("mlx5_3"), "{inv}");

    node.wait_slices();
    node.user_pod("installed-user");
    admission_policy(node, &daemon);
    node.delete_user_pod("installed-user", &before.veth);

    let mut del = kit.command("kubectl");
    del.args(["delete", "--wait=true", "-f", "-"]);
    ok(
        "kubectl delete -f install.yaml",
        &with_stdin(del, &manifest),
    );
    node_as_before(node, before, "kubectl delete", false);
}

/// The node after an uninstall: no daemon pod, no registration socket, no socket in the plugin
/// directory, the same links; the state directory and the checkpoint may stay (documented). With
/// `slices`, also no slice of this node: the kubelet deletes them about 30 s after the driver went
/// (so that a restart keeps them); checked after the helm uninstall (v1.36).
fn node_as_before(node: &Node, before: &NodeState, what: &str, slices: bool) {
    let kit = node.kit;
    let t = Instant::now();
    wait_for(
        &format!("{what}: the daemon's pods gone"),
        LIMIT,
        || {
            let pods = kit.get_json(&["pods", "-A", "-l", DAEMON_SELECTOR]);
            pods["items"].as_array()?.is_empty().then_some(())
        },
        || node.daemon_context(),
    );
    if slices {
        wait_for(
            &format!("{what}: the node's dra.net slices gone"),
            LIMIT,
            || kit.node_devices("dra.net").is_empty().then_some(()),
            || kit.kubectl_ok(&["get", "resourceslices", "-o", "wide"]),
        );
        kit.say(format_args!(
            "{what}: the daemon's pods and the node's slices gone {:.1?} after the uninstall",
            t.elapsed()
        ));
    }
    let after = node.state();
    assert_eq!(after.registry, before.registry, "{what}: plugins_registry");
    // The kit's CNI bridge (dranetk8s*) comes with the first pod.
    let gone: Vec<_> = before.links.difference(&after.links).collect();
    let new: Vec<_> = after
        .links
        .difference(&before.links)
        .filter(|l| !l.starts_with("dranetk8s"))
        .collect();
    assert!(
        gone.is_empty() && new.is_empty(),
        "{what}: the host's links: gone {gone:?}, new {new:?}"
    );
    assert_eq!(after.veth, before.veth, "{what}: the veth");
    let sockets: Vec<&String> = after
        .plugin
        .iter()
        .filter(|f| f.ends_with(".sock"))
        .collect();
    assert!(
        sockets.is_empty(),
        "{what}: sockets left in plugins/dra.net: {sockets:?}"
    );
    for (dir, was, is) in [
        ("plugins/dra.net", &before.plugin, &after.plugin),
        ("the state directory", &before.state, &after.state),
    ] {
        if was != is {
            let new: Vec<_> = is.difference(was).collect();
            let gone: Vec<_> = was.difference(is).collect();
            kit.say(format_args!(
                "{what}: {dir} changed (documented): new {new:?}, gone {gone:?}"
            ));
        }
    }
}

/// The test's patch as chart values.
fn helm_values(node: &Node) -> String {
    serde_json::json!({
        "image": {"repository": IMAGE.split_once(':').unwrap().0, "tag": IMAGE.split_once(':').unwrap().1, "pullPolicy": "Never"},
        "nriSocket": node.nri_socket(),
        "stateDir": node.state_dir,
        "cdiDir": node.kit.var("DRANET_K8S_CDI_DIR"),
        "extraArgs": node.extra_args(),
        "extraEnv": node.extra_env(),
        "extraVolumes": node.extra_volumes(),
        "extraVolumeMounts": node.extra_mounts(),
    })
    .to_string()
}

fn helm_install(node: &Node, helm: &Path, before: &NodeState) {
    let kit = node.kit;
    let values = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(values.path(), helm_values(node)).unwrap();
    let run_helm = |args: &[&str]| {
        let out = kit.command(helm).args(args).output().expect("run helm");
        ok(&format!("helm {args:?}\n{}", node.daemon_context()), &out)
    };
    // A line of the install guide, run from the repository's root.
    let guide = |line: &str, extra: &[&str]| {
        let mut words = line.split_whitespace();
        let mut cmd = match words.next() {
            Some("helm") => kit.command(helm),
            Some("kubectl") => kit.command("kubectl"),
            other => panic!("{line}: not helm or kubectl: {other:?}"),
        };
        cmd.args(words).args(extra).current_dir(root());
        ok(
            &format!("{line}\n{}", node.daemon_context()),
            &cmd.output().unwrap(),
        )
    };

    // The install guide's commands; the test's values are its patch (see the module docs).
    for line in GUIDE_HELM_INSTALL {
        let extra: &[&str] = if line.starts_with("helm ") {
            &["-f", values.path().to_str().unwrap()]
        } else {
            &[]
        };
        guide(line, extra);
    }
    let first = node.daemon_pod(None);
    node.wait_slices();
    let devices = node.user_pod("helm-user");

    // An upgrade with a changed value rolls the DaemonSet; the pod keeps its devices.
    let t = Instant::now();
    guide(GUIDE_HELM_UPGRADE, &[]);
    let second = node.daemon_pod(Some(&first.1));
    kit.say(format_args!(
        "helm upgrade: a new daemon pod Ready {:.1?} after the upgrade began",
        t.elapsed()
    ));
    let ds = kit.get_json(&["daemonset", "-n", NS, "dranet"]);
    let args = &ds["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array().unwrap().iter().any(|a| a == "--log=debug"),
        "the upgraded DaemonSet's arguments: {args}"
    );
    let pods = kit.get_json(&["pods", "-n", NS, "-l", DAEMON_SELECTOR]);
    let uids: Vec<&str> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["metadata"]["uid"].as_str())
        .collect();
    assert_eq!(uids, [second.1.as_str()], "only the new daemon pod runs");
    let now = kit.kubectl_ok(&["exec", "helm-user", "--", "ls", "/dev/infiniband"]);
    let now: BTreeSet<String> = now.split_whitespace().map(str::to_string).collect();
    assert_eq!(now, devices, "the pod's char devices after the upgrade");
    let mtu = kit.kubectl_ok(&["exec", "helm-user", "--", "cat", "/sys/class/net/net1/mtu"]);
    assert_eq!(mtu.trim(), "1400", "the pod's net1 after the upgrade");
    // The new daemon gives the veth back when the pod goes.
    node.delete_user_pod("helm-user", &before.veth);

    // Uninstall: every object the release made goes.
    let manifest = run_helm(&["get", "manifest", "dranet", "--namespace", NS]);
    let objects: Vec<(String, String, Option<String>)> = documents(&manifest)
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_string(),
                d["metadata"]["name"].as_str().unwrap().to_string(),
                d["metadata"]["namespace"].as_str().map(str::to_string),
            )
        })
        .collect();
    let kinds: BTreeSet<&str> = objects.iter().map(|o| o.0.as_str()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from(CHART_KINDS),
        "the release's objects: {objects:?}"
    );
    guide(GUIDE_HELM_UNINSTALL[0], &[]);
    for (kind, name, ns) in &objects {
        let mut args = vec![
            "get",
            kind.as_str(),
            name.as_str(),
            "--ignore-not-found",
            "-o",
            "name",
        ];
        if let Some(ns) = ns {
            args.extend(["-n", ns.as_str()]);
        }
        let left = kit.kubectl_ok(&args);
        assert!(
            left.trim().is_empty(),
            "helm uninstall left {kind} {name}: {left}"
        );
    }
    guide(GUIDE_HELM_UNINSTALL[1], &[]);
    node_as_before(node, before, "helm uninstall", true);
}
