//! Upstream dranet's end-to-end scenarios (`tests/e2e.bats` of kubernetes-sigs/dranet) on the
//! kit's real node, with `dranet run` as its DRA driver, on v1.34.9 and v1.36.3.
//!
//! Each scenario is one test, named after upstream's `@test` (`upstream::NAME::kubernetes_1_34`).
//! It uses upstream's claim from `testdata/upstream/` and asserts what upstream's bats asserts.
//! One daemon per version serves every scenario (the harness's cluster is shared with the other
//! modules' scenarios, which run before these).
//!
//! What differs from upstream, because of this kernel or this kit:
//! - **veth instead of dummy.** The kernel has no dummy links, so each scenario makes veths with
//!   upstream's names (`dummy0`, `mlx5_6`, ...). Their peers are named `upk*`, and the daemon's
//!   `--filter` names exactly the scenarios' links. A selector on `type == "dummy"` reads
//!   `type == "veth"`.
//! - **busybox instead of agnhost.** The kit has no registry, so the pods run busybox. Their
//!   `sleep` runs under a shell that exits on SIGTERM: busybox's `sleep` as the container's first
//!   process ignores it, and each deletion waited out the grace period.
//! - **Checks from the host, inside the pod's namespace.** The pod's network state is read with the
//!   host's iproute2 and ethtool under `nsenter`, since busybox has no ethtool. Debian 12's
//!   iproute2 6.1 does not print `gso_ipv4_max_size`/`gro_ipv4_max_size`, so those two come from a
//!   raw `RTM_GETLINK` (python3).
//! - **Driver down.** Upstream schedules its DaemonSet away and back; here the test stops and
//!   restarts the daemon. In "unprepare ... during driver downtime", upstream checks its bbolt
//!   `pod_configs` key of the pod. Here the test checks what dranet-rs keeps of the pod's claim:
//!   the attach journal's entry under `--state-dir` (keyed by claim UID) and the claim's entry in
//!   the kubelet plugin's checkpoint.
//! - **eBPF programs without clang or bpftool.** Upstream attaches a compiled object with `tc` and
//!   `bpftool`. Here the test loads `r0 = 0; exit` itself (the discovery tests' loader) and attaches
//!   it as upstream's would be: a direct-action TC filter named as `tc` names one from an object
//!   file (`dummy_bpf.o:[classifier]`), and a TCX ingress program named `handle_ingress`. Debian
//!   12's bpftool predates TCX, so the TCX hooks are listed with discovery's `BPF_PROG_QUERY`, in
//!   bpftool's words (`tcx/ingress handle_ingress prog_id N`). The slice's attributes are
//!   unqualified (`ebpf`, which the API reads as upstream's `dra.net/ebpf`). In "validate bpf
//!   programs are removed", the TC filter cannot reach the pod (the kernel drops a link's qdiscs
//!   when it changes namespace), so only the TCX check there rests on `disableEbpfPrograms`; the
//!   test also checks both programs are in the slice before the claim.
//! - **Reapply.** Upstream re-adds the veth's address by hand after the first deployment, because
//!   its dummy comes back without it. dranet-rs gives the address back, so the test asserts that
//!   instead.
//!
//! Not ported here:
//! - **"validate vrf routing"**: this kernel has no VRF. It belongs in the qemu guest.
//! - **DHCP and IPVLAN**: upstream's other suites (its webhook suites are `webhook.rs` and
//!   `whereabouts.rs`) and NIC sharing. This
//!   kernel has no ipvlan (the qemu guest runs it); DHCP is tested against dnsmasq
//!   (`crates/dranet-podnet/tests/it/dhcp.rs`).
//!
//! Needs root, the kit (`DRANET_K8S_KIT` or `../shared/k8s/kit.sh`), ethtool, tc, nsenter and
//! python3. Without root or the kit it prints a `SKIP` line and passes.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Args, Report};
use dranet_podnet::netns::Netns;
use dranet_testkit::kit::{Daemon, Kit, Version, free_port, http_get, wait_for};
use dranet_testkit::upstream;

use dranet_testkit::bpf;

const LIMIT: Duration = Duration::from_secs(60);

/// Every host link a scenario gives a pod: upstream's names. The daemon publishes these and no
/// other.
const LINKS: &[&str] = &[
    "dummy0",
    "dummy1",
    "dummy8",
    "mlx5_6",
    "dummy-downtime",
    "dummy-neigh",
    "dummy-rules",
    "dummy-ipv6",
    "pbr-test-pod-1",
    "pbr-test-pod-2",
    "pbr-rtr-1",
    "pbr-rtr-2",
];

/// One upstream scenario.
struct Scenario {
    /// The test's name: upstream's `@test` title in snake case.
    name: &'static str,
    /// Upstream's title.
    upstream: &'static str,
    run: fn(&mut Env),
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "dummy_interface_with_ip_addresses_resourceclaim",
        upstream: "dummy interface with IP addresses ResourceClaim",
        run: static_ip,
    },
    Scenario {
        name: "dummy_interface_with_ip_addresses_resourceclaim_and_normalized_name",
        upstream: "dummy interface with IP addresses ResourceClaim and normalized name",
        run: normalized_name,
    },
    Scenario {
        name: "validate_per_interface_arp_configuration_on_dummy_interface",
        upstream: "validate per-interface ARP configuration on dummy interface",
        run: arp,
    },
    Scenario {
        name: "dummy_interface_with_ip_addresses_resourceclaimtemplate",
        upstream: "dummy interface with IP addresses ResourceClaimTemplate",
        run: template,
    },
    Scenario {
        name: "dummy_interface_with_ip_addresses_resourceclaim_and_routes",
        upstream: "dummy interface with IP addresses ResourceClaim and routes",
        run: routes,
    },
    Scenario {
        name: "test_metric_server_is_up_and_operating_on_host",
        upstream: "test metric server is up and operating on host",
        run: metrics,
    },
    Scenario {
        name: "validate_advanced_network_configurations_with_dummy",
        upstream: "validate advanced network configurations with dummy",
        run: advanced,
    },
    Scenario {
        name: "validate_big_tcp_network_configurations_on_dummy_interface",
        upstream: "validate big tcp network configurations on dummy interface",
        run: big_tcp,
    },
    Scenario {
        name: "two_dummy_interfaces_with_ip_addresses_resourceclaimtemplate",
        upstream: "2 dummy interfaces with IP addresses ResourceClaimTemplate",
        run: two_interfaces,
    },
    Scenario {
        name: "reapply_pod_with_dummy_resource_claim",
        upstream: "reapply pod with dummy resource claim",
        run: reapply,
    },
    Scenario {
        name: "driver_should_gracefully_shutdown_when_terminated",
        upstream: "driver should gracefully shutdown when terminated",
        run: graceful_shutdown,
    },
    Scenario {
        name: "unprepare_claims_on_driver_restart_after_pod_deletion_during_driver_downtime",
        upstream: "unprepare claims on driver restart after pod deletion during driver downtime",
        run: unprepare_after_downtime,
    },
    Scenario {
        name: "permanent_neighbor_entry_is_copied_to_pod_namespace",
        upstream: "permanent neighbor entry is copied to pod namespace",
        run: permanent_neighbours,
    },
    Scenario {
        name: "route_rules_and_routes_with_non_default_table_are_copied_to_pod_namespace",
        upstream: "route rules and routes with non-default table are copied to pod namespace",
        run: rules_and_tables,
    },
    Scenario {
        name: "dummy_interface_with_ipv6_subnet_route",
        upstream: "dummy interface with IPv6 subnet route",
        run: ipv6_subnet_route,
    },
    Scenario {
        name: "validate_pbr_configuration",
        upstream: "validate pbr configuration",
        run: pbr,
    },
    Scenario {
        name: "allocated_device_in_resourceslice_remains_unchanged",
        upstream: "allocated device in ResourceSlice remains unchanged",
        run: slice_attributes_unchanged,
    },
    Scenario {
        name: "validate_bpf_filter_attributes",
        upstream: "validate bpf filter attributes",
        run: bpf_filter_attributes,
    },
    Scenario {
        name: "validate_tcx_bpf_filter_attributes",
        upstream: "validate tcx bpf filter attributes",
        run: tcx_filter_attributes,
    },
    Scenario {
        name: "validate_bpf_programs_are_removed",
        upstream: "validate bpf programs are removed",
        run: bpf_programs_removed,
    },
];

// ---- run from the harness (`main.rs`) ----

fn test_name(s: &Scenario, v: Version) -> String {
    crate::test_name(&format!("upstream::{}", s.name), v)
}

/// The names of the scenarios `args` chooses on `version`.
pub(crate) fn chosen(args: &Args, version: Version) -> Vec<String> {
    SCENARIOS
        .iter()
        .map(|s| test_name(s, version))
        .filter(|n| args.selects(n))
        .collect()
}

/// Runs the scenarios `args` chooses on `kit`'s cluster with one daemon of their own, each
/// cleaned up after (a scenario that cannot be cleaned up after fails too; the next starts
/// anyway); whether all passed.
pub(crate) fn run(kit: &Kit, args: &Args, report: &mut Report) -> bool {
    let bin_dir = tempfile::tempdir().expect("a temporary directory");
    let bin = bin_dir.path().join("dranet");
    std::fs::copy(env!("CARGO_BIN_EXE_dranet"), &bin).expect("copy the dranet binary");
    let started = Instant::now();
    let mut all = true;
    let mut env = Env::start(kit, &bin);
    for s in SCENARIOS {
        let name = test_name(s, kit.version);
        if !args.selects(&name) {
            continue;
        }
        let t = Instant::now();
        kit.say(format_args!("{name}: upstream's \"{}\"", s.upstream));
        let ok = crate::passes(|| (s.run)(&mut env)) && crate::passes(|| env.clean_up());
        all &= ok;
        report.record(Some(kit.version), &name, ok, t.elapsed());
    }
    all &= crate::passes(|| env.stop());
    kit.say(format_args!(
        "upstream's scenarios: done in {:.1?}",
        started.elapsed()
    ));
    all
}

// ---- the shared daemon, and what a scenario leaves behind ----

/// One version's cluster, its `dranet run`, and what the running scenario made.
struct Env<'a> {
    kit: &'a Kit,
    _tmp: tempfile::TempDir,
    state: PathBuf,
    logs: PathBuf,
    port: u16,
    /// The daemon's binary (a copy made at the start, so every start on every version runs
    /// the same build).
    bin: PathBuf,
    daemon: Option<Daemon>,
    starts: u32,
    /// Host veths the scenario made (deleted by `clean_up`).
    veths: Vec<String>,
    /// Manifests the scenario applied (deleted by `clean_up`).
    applied: Vec<String>,
    /// Host `ip rule` priorities the scenario added (deleted by `clean_up`).
    rules: Vec<u32>,
}

impl<'a> Env<'a> {
    fn start(kit: &'a Kit, bin: &Path) -> Env<'a> {
        let tmp = tempfile::tempdir().unwrap();
        let logs = tmp.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let mut env = Env {
            kit,
            bin: bin.to_path_buf(),
            state: tmp.path().join("state"),
            logs,
            _tmp: tmp,
            port: free_port(),
            daemon: None,
            starts: 0,
            veths: Vec::new(),
            applied: Vec::new(),
            rules: Vec::new(),
        };
        env.start_daemon();
        env
    }

    /// `dranet run` as the node's driver, publishing exactly [`LINKS`].
    fn start_daemon(&mut self) {
        self.starts += 1;
        let names: Vec<String> = LINKS.iter().map(|l| format!("{l:?}")).collect();
        let filter = format!(
            r#""ifName" in device.attributes["dra.net"] && device.attributes["dra.net"].ifName in [{}]"#,
            names.join(", ")
        );
        let mut cmd = self.kit.command(&self.bin);
        self.kit.hook_env(&mut cmd, &self.bin.to_string_lossy());
        cmd.arg("run")
            .args(["--hostname-override", self.kit.node()])
            .args(["--kubeconfig", self.kit.var("KUBECONFIG")])
            .arg("--kubelet-root-dir")
            .arg(self.kit.kubelet_root_dir())
            .args(["--nri-socket", self.kit.var("DRANET_K8S_NRI_SOCKET")])
            .arg("--state-dir")
            .arg(&self.state)
            .args(["--bind-address", &format!("127.0.0.1:{}", self.port)])
            .args(["--cloud-provider-hint", "none", "--filter", &filter])
            // What upstream's "allocated device ... remains unchanged" turns on.
            .args(["--feature-gates", "PersistentResourceSliceAttributes=true"])
            // Rate limiting would spread the scenarios' back-to-back link changes over seconds.
            .args(["--inventory-min-poll-interval", "0"])
            .args(["--log", "info,dranet_driver=debug"]);
        let daemon = Daemon::spawn(cmd, self.logs.join(format!("dranet-{}.log", self.starts)));
        self.daemon = Some(daemon);
        wait_for(
            "the daemon's /readyz to answer 200",
            LIMIT,
            || (http_get(self.port, "/readyz")?.0 == 200).then_some(()),
            || self.tail(),
        );
    }

    /// SIGTERM, as a DaemonSet rollout stops upstream's pod; exit 0 expected.
    fn stop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            let status = d.terminate(Duration::from_secs(30));
            assert_eq!(
                status.and_then(|s| s.code()),
                Some(0),
                "the daemon's exit status after SIGTERM\n{}",
                dranet_testkit::kit::tail(&d.output(), 40)
            );
        }
    }

    fn tail(&self) -> String {
        self.daemon
            .as_ref()
            .map(|d| dranet_testkit::kit::tail(&d.output(), 60))
            .unwrap_or_else(|| "(daemon stopped)".into())
    }

    /// A veth pair `name`/`peer` on the host, both up unless `up` is false (upstream's links
    /// are down until a scenario sets them up).
    fn veth(&mut self, name: &str, peer: &str, up: bool) {
        let _ = Command::new("ip")
            .args(["link", "del", name])
            .stderr(Stdio::null())
            .status();
        ip(&["link", "add", name, "type", "veth", "peer", "name", peer]);
        self.veths.push(name.to_string());
        ip(&["link", "set", peer, "up"]);
        if up {
            ip(&["link", "set", name, "up"]);
        }
    }

    /// Waits until the node's slice has these devices (by ifName).
    fn published(&self, links: &[&str]) {
        wait_for(
            &format!("{links:?} in the node's ResourceSlice"),
            LIMIT,
            || {
                let have = published_links(self.kit);
                links.iter().all(|l| have.contains(*l)).then_some(())
            },
            || self.tail(),
        );
    }

    /// `kubectl apply` of `testdata/upstream/FILE`, its `${IMAGE}` and `${PORT}` filled in.
    fn apply(&mut self, file: &str) {
        let text = manifest(file)
            .replace("${IMAGE}", self.kit.var("DRANET_K8S_BUSYBOX_IMAGE"))
            .replace("${PORT}", &self.port.to_string());
        self.kit.apply(&text);
        self.applied.push(text);
    }

    /// Waits for the pods labelled `selector` to exist and be Ready; their names.
    fn ready(&self, selector: &str) -> Vec<String> {
        wait_for(
            &format!("pods {selector} to be Ready"),
            LIMIT,
            || {
                let list = self.kit.get_json(&["pods", "-l", selector]);
                let pods = list["items"].as_array()?.clone();
                let ready = |p: &serde_json::Value| {
                    p["metadata"]["deletionTimestamp"].is_null()
                        && p["status"]["conditions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                };
                (!pods.is_empty() && pods.iter().all(ready)).then(|| {
                    pods.iter()
                        .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
                        .collect()
                })
            },
            || {
                format!(
                    "{}\n{}\ndaemon:\n{}",
                    self.kit
                        .kubectl(&["describe", "pods", "-l", selector])
                        .stdout
                        .escape_ascii(),
                    self.kit
                        .kubectl(&["get", "resourceclaims", "-o", "yaml"])
                        .stdout
                        .escape_ascii(),
                    self.tail()
                )
            },
        )
    }

    /// The one Ready pod labelled `selector`.
    fn ready_pod(&self, selector: &str) -> String {
        let pods = self.ready(selector);
        assert_eq!(pods.len(), 1, "pods {selector}: {pods:?}");
        pods[0].clone()
    }

    /// Deletes what the scenario made, waits for its pods to go and its links to leave the
    /// slice, and restarts the daemon if the scenario left it stopped.
    fn clean_up(&mut self) {
        if self.daemon.is_none() {
            self.start_daemon();
        }
        for text in std::mem::take(&mut self.applied).iter().rev() {
            let mut child = self
                .kit
                .command("kubectl")
                .args(["delete", "-f", "-", "--ignore-not-found", "--wait=true"])
                .args(["--timeout=60s"])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run kubectl delete");
            let _ = child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes());
            let out = child.wait_with_output().expect("kubectl delete");
            if !out.status.success() {
                self.kit.say(format_args!(
                    "clean-up: kubectl delete: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        wait_for(
            "the scenario's pods to be gone",
            LIMIT,
            || {
                let pods = self.kit.get_json(&["pods"]);
                pods["items"].as_array()?.is_empty().then_some(())
            },
            || self.tail(),
        );
        for p in std::mem::take(&mut self.rules) {
            let _ = Command::new("ip")
                .args(["rule", "del", "priority", &p.to_string()])
                .status();
        }
        let gone: Vec<String> = std::mem::take(&mut self.veths);
        for v in &gone {
            let _ = Command::new("ip")
                .args(["link", "del", v])
                .stderr(Stdio::null())
                .status();
        }
        wait_for(
            "the scenario's links to leave the slice",
            LIMIT,
            || {
                let have = published_links(self.kit);
                gone.iter().all(|l| !have.contains(l)).then_some(())
            },
            || self.tail(),
        );
    }
}

// ---- helpers ----

fn manifest(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/upstream")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `ip ARGS` on the host, which must succeed; its stdout.
fn ip(args: &[&str]) -> String {
    run_ok(Command::new("ip").args(args))
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `ifName`s of the devices dra.net publishes for the node.
fn published_links(kit: &Kit) -> BTreeSet<String> {
    kit.node_device_list("dra.net")
        .iter()
        .filter_map(|d| d["attributes"]["ifName"]["string"].as_str())
        .map(String::from)
        .collect()
}

/// The published attributes of the device whose ifName is `link`.
fn attributes_of(kit: &Kit, link: &str) -> Option<serde_json::Value> {
    kit.node_device_list("dra.net")
        .into_iter()
        .find(|d| d["attributes"]["ifName"]["string"] == link)
        .map(|d| d["attributes"].clone())
}

/// The host path of `pod`'s network namespace (`/proc/PID/ns/net` of a process in it).
fn pod_netns(kit: &Kit, pod: &str) -> PathBuf {
    let target = kit.kubectl_ok(&["exec", pod, "--", "readlink", "/proc/self/ns/net"]);
    let target = target.trim();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .map(|e| e.path().join("ns/net"))
        .find(|p| std::fs::read_link(p).is_ok_and(|l| l.to_string_lossy() == target))
        .unwrap_or_else(|| panic!("no host process in {pod}'s namespace {target}"))
}

/// `PROGRAM ARGS` on the host inside `pod`'s network namespace, which must succeed; its stdout.
fn in_pod(kit: &Kit, pod: &str, args: &[&str]) -> String {
    let ns = pod_netns(kit, pod);
    run_ok(
        Command::new("nsenter")
            .arg(format!("--net={}", ns.display()))
            .args(args),
    )
}

/// `kubectl exec POD -- ARGS`, which must succeed.
fn exec(kit: &Kit, pod: &str, args: &[&str]) -> String {
    let mut a = vec!["exec", pod, "--"];
    a.extend_from_slice(args);
    kit.kubectl_ok(&a)
}

#[track_caller]
fn assert_has(out: &str, want: &str) {
    assert!(out.contains(want), "want {want:?} in:\n{out}");
}

#[track_caller]
fn assert_lacks(out: &str, unwanted: &str) {
    assert!(
        !out.contains(unwanted),
        "{unwanted:?} unexpected in:\n{out}"
    );
}

/// Waits until `kubectl get ARGS` prints `want` (status is written after the pod starts).
fn eventually_has(env: &Env, args: &[&str], want: &str) {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    wait_for(
        &format!("{want:?} in kubectl {a:?}"),
        LIMIT,
        || env.kit.kubectl_ok(&a).contains(want).then_some(()),
        || env.kit.kubectl_ok(&a),
    );
}

/// `ip -d link show DEV` in the pod, with the IPv4 GSO/GRO limits Debian 12's iproute2 does not
/// print read from the kernel (`RTM_GETLINK`), in `ip`'s words.
fn link_details(kit: &Kit, pod: &str, dev: &str) -> String {
    const SCRIPT: &str = r#"
import socket, struct, sys
names = {41: "gso_max_size", 58: "gro_max_size", 63: "gso_ipv4_max_size", 64: "gro_ipv4_max_size"}
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
body = struct.pack("BxHiII", 0, 0, socket.if_nametoindex(sys.argv[1]), 0, 0)
s.send(struct.pack("IHHII", 16 + len(body), 18, 1, 1, 0) + body)
d = s.recv(65536)
length, kind = struct.unpack_from("IH", d)
assert kind == 16, "not RTM_NEWLINK"
off = 32
while off + 4 <= length:
    alen, atype = struct.unpack_from("HH", d, off)
    if alen < 4:
        break
    if atype in names and alen == 8:
        print(names[atype], struct.unpack_from("I", d, off + 4)[0])
    off += (alen + 3) & ~3
"#;
    let mut out = in_pod(kit, pod, &["ip", "-d", "link", "show", dev]);
    out += &in_pod(kit, pod, &["python3", "-c", SCRIPT, dev]);
    out
}

/// The claim's `status.devices[0].networkData.ips`, once written.
fn network_ips(env: &Env, claim: &str) -> String {
    wait_for(
        &format!("networkData.ips in {claim}'s status"),
        LIMIT,
        || {
            let c = env.kit.get_json(&["resourceclaim", claim]);
            let ips = c["status"]["devices"][0]["networkData"]["ips"].as_array()?;
            Some(
                ips.iter()
                    .filter_map(|i| i.as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        },
        || env.tail(),
    )
}

/// The files under the daemon's state dir that name `uid` (its attach journal's entries are keyed
/// by claim UID).
fn state_records(dir: &Path, uid: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(state_records(&p, uid));
        } else if std::fs::read_to_string(&p).is_ok_and(|t| t.contains(uid)) {
            out.push(p);
        }
    }
    out
}

/// Upstream's check of a template's pod: `ip addr show DEV` in the pod has `addr`, and so does
/// `kubectl get resourceclaims -o yaml`.
fn address_in_pod_and_claims(env: &Env, pod: &str, dev: &str, addr: &str) {
    assert_has(&in_pod(env.kit, pod, &["ip", "addr", "show", dev]), addr);
    eventually_has(env, &["resourceclaims", "-o", "yaml"], addr);
}

/// The name `tc` gives the filter upstream attaches (`obj dummy_bpf.o sec classifier`):
/// `FILE:[SECTION]`.
const TC_FILTER_NAME: &str = "dummy_bpf.o:[classifier]";
/// The name of upstream's TCX program (its function in `dummy_bpf_tcx.o`).
const TCX_PROGRAM_NAME: &str = "handle_ingress";

/// Upstream's `setup_bpf_device`: `dummy0` with a clsact qdisc and the program as a direct-action
/// filter on its ingress hook, then up.
fn bpf_device(env: &mut Env) {
    env.veth("dummy0", "upk0", false);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        let rtnl = Netns::current().unwrap().rtnl().await.unwrap();
        let index = rtnl.link_by_name("dummy0").await.unwrap().expect("dummy0");
        let prog = bpf::load_pass_program("classifier");
        bpf::attach_tc_ingress(rtnl.handle(), index.header.index, &prog, TC_FILTER_NAME).await;
    });
    ip(&["link", "set", "up", "dev", "dummy0"]);
}

/// Upstream's `setup_tcx_filter`: the program on `dummy0`'s TCX ingress hook, then the link down
/// and up, so the driver reads its programs again (no netlink event tells of an attach).
fn tcx_filter() {
    let host = Netns::current().unwrap();
    let index = host.run(|| ifindex("dummy0")).unwrap();
    let prog = bpf::load_pass_program(TCX_PROGRAM_NAME);
    bpf::attach_tcx_ingress(index, &prog);
    ip(&["link", "set", "down", "dev", "dummy0"]);
    ip(&["link", "set", "up", "dev", "dummy0"]);
}

/// The index of `link` in the calling thread's namespace.
fn ifindex(link: &str) -> u32 {
    let name = std::ffi::CString::new(link).unwrap();
    // SAFETY: `name` is a NUL-terminated string alive for the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert_ne!(index, 0, "{link}: {}", std::io::Error::last_os_error());
    index
}

/// What `bpftool net show dev LINK` lists of `link`'s TCX programs in namespace `ns`, in its
/// words (`tcx/ingress NAME prog_id ID`): Debian 12's bpftool predates TCX, so they come from
/// discovery's `BPF_PROG_QUERY`.
fn tcx_listing(ns: &Netns, link: &str) -> String {
    ns.run(|| {
        let programs = dranet_discovery::ebpf::tcx_programs(ifindex(link)).expect("query TCX");
        programs
            .iter()
            .map(|p| {
                let hook = match p.hook {
                    dranet_discovery::ebpf::TcxHook::Ingress => "ingress",
                    dranet_discovery::ebpf::TcxHook::Egress => "egress",
                };
                format!("tcx/{hook} {} prog_id {}\n", p.name, p.id)
            })
            .collect()
    })
    .unwrap()
}

/// Waits until `dummy0`'s attribute `name` in the slice is `want` (upstream polls too).
fn dummy0_attribute(env: &Env, name: &str, want: serde_json::Value) {
    wait_for(
        &format!("dummy0's {name} to be {want}"),
        LIMIT,
        || {
            let attrs = attributes_of(env.kit, "dummy0")?;
            let value = attrs[name].as_object()?.values().next()?.clone();
            (value == want).then_some(())
        },
        || format!("{:?}\n{}", attributes_of(env.kit, "dummy0"), env.tail()),
    );
}

// ---- the scenarios ----

/// Upstream's first two scenarios, on a link named `link`.
fn static_ip_on(env: &mut Env, link: &str) {
    env.veth(link, "upk0", true);
    env.published(&[link]);
    env.apply("deviceclass.yaml");
    env.apply("resourceclaim.yaml");
    let pod = env.ready_pod("app=pod");
    assert_has(
        &in_pod(env.kit, &pod, &["ip", "addr", "show", "eth99"]),
        "169.254.169.13",
    );
    assert_has(
        &network_ips(env, "dummy-interface-static-ip"),
        "169.254.169.13",
    );
}

fn static_ip(env: &mut Env) {
    static_ip_on(env, "dummy0");
}

fn normalized_name(env: &mut Env) {
    static_ip_on(env, "mlx5_6");
}

fn arp(env: &mut Env) {
    env.veth("dummy0", "upk0", true);
    env.published(&["dummy0"]);
    env.apply("deviceclass.yaml");
    env.apply("resourceclaim_arp.yaml");
    let pod = env.ready_pod("app=arp");
    let conf = "/proc/sys/net/ipv4/conf/dranet-arp";
    let ignore = exec(env.kit, &pod, &["cat", &format!("{conf}/arp_ignore")]);
    assert_eq!(ignore.trim(), "1");
    let announce = exec(env.kit, &pod, &["cat", &format!("{conf}/arp_announce")]);
    assert_eq!(announce.trim(), "2");
}

fn template(env: &mut Env) {
    // Upstream leaves this link down.
    env.veth("dummy0", "upk0", false);
    ip(&["addr", "add", "169.254.169.14/32", "dev", "dummy0"]);
    env.published(&["dummy0"]);
    env.apply("resourceclaimtemplate.yaml");
    let pod = env.ready_pod("app=MyApp");
    address_in_pod_and_claims(env, &pod, "dummy0", "169.254.169.14");
}

fn routes(env: &mut Env) {
    env.veth("dummy0", "upk0", true);
    env.published(&["dummy0"]);
    env.apply("deviceclass.yaml");
    env.apply("resourceclaim_route.yaml");
    let pod = env.ready_pod("app=pod");
    assert_has(
        &in_pod(env.kit, &pod, &["ip", "addr", "show", "eth99"]),
        "169.254.169.13",
    );
    let main = in_pod(env.kit, &pod, &["ip", "route", "show"]);
    assert_has(&main, "169.254.169.0/24 via 169.254.169.1");
    if dranet_testkit::kit::pod_default_route() {
        // The CNI's default route stays beside the claim's.
        assert_has(&main, "default via");
    }
    assert_has(
        &network_ips(env, "dummy-interface-static-ip-route"),
        "169.254.169.1",
    );
}

fn metrics(env: &mut Env) {
    env.apply("metrics_pod.yaml");
    wait_for(
        "pod test-metrics to succeed",
        LIMIT,
        || {
            let p = env.kit.get_json(&["pod", "test-metrics"]);
            (p["status"]["phase"] == "Succeeded").then_some(())
        },
        || env.kit.kubectl_ok(&["describe", "pod", "test-metrics"]),
    );
    let logs = env.kit.kubectl_ok(&["logs", "test-metrics"]);
    assert_eq!(logs.trim(), "ok");
}

fn advanced(env: &mut Env) {
    env.veth("dummy0", "upk0", true);
    env.published(&["dummy0"]);
    env.apply("deviceclass.yaml");
    env.apply("resourceclaim_advanced.yaml");
    env.ready_pod("app=pod");
    let pod = "pod-advanced-cfg";
    let addr = in_pod(env.kit, pod, &["ip", "addr", "show", "dranet0"]);
    assert_has(&addr, "169.254.169.14/24");
    assert_has(&addr, "mtu 4321");
    assert_has(&addr, "00:11:22:33:44:55");
    let features = in_pod(env.kit, pod, &["ethtool", "-k", "dranet0"]);
    assert_has(&features, "tcp-segmentation-offload: off");
    assert_has(&features, "generic-receive-offload: off");
    assert_has(&features, "large-receive-offload: off");
}

fn big_tcp(env: &mut Env) {
    env.veth("dummy0", "upk0", true);
    env.published(&["dummy0"]);
    env.apply("deviceclass.yaml");
    env.apply("resourceclaim_bigtcp.yaml");
    let pod = env.ready_pod("app=bigtcp");
    let link = link_details(env.kit, &pod, "dranet1");
    for want in [
        "mtu 8896",
        "gso_max_size 65536",
        "gro_max_size 65536",
        "gso_ipv4_max_size 65536",
        "gro_ipv4_max_size 65536",
    ] {
        assert_has(&link, want);
    }
    let features = in_pod(env.kit, &pod, &["ethtool", "-k", "dranet1"]);
    assert_has(&features, "tcp-segmentation-offload: on");
    assert_has(&features, "generic-receive-offload: on");
    assert_has(&features, "large-receive-offload: off");
}

fn two_interfaces(env: &mut Env) {
    env.veth("dummy0", "upk0", true);
    ip(&["addr", "add", "169.254.169.13/32", "dev", "dummy0"]);
    env.veth("dummy1", "upk1", true);
    ip(&["addr", "add", "169.254.169.14/32", "dev", "dummy1"]);
    env.published(&["dummy0", "dummy1"]);
    env.apply("deviceclass.yaml");
    env.apply("resourceclaimtemplate_double.yaml");
    let pod = env.ready_pod("app=MyApp");
    assert_has(
        &in_pod(env.kit, &pod, &["ip", "addr", "show", "dummy0"]),
        "169.254.169.13",
    );
    assert_has(
        &in_pod(env.kit, &pod, &["ip", "addr", "show", "dummy1"]),
        "169.254.169.14",
    );
    let devices = &[
        "resourceclaims",
        "-o=jsonpath={.items[0].status.devices[*]}",
    ];
    eventually_has(env, devices, "169.254.169.13");
    eventually_has(env, devices, "169.254.169.14");
}

fn reapply(env: &mut Env) {
    env.veth("dummy8", "upk0", true);
    ip(&["addr", "add", "169.254.169.14/32", "dev", "dummy8"]);
    env.published(&["dummy8"]);
    env.apply("repeatresourceclaimtemplate.yaml");
    let pod = env.ready_pod("app=reapplyApp");
    address_in_pod_and_claims(env, &pod, "dummy8", "169.254.169.14");

    env.kit.kubectl_ok(&[
        "delete",
        "deployment/server-deployment-reapply",
        "--wait",
        "--timeout=30s",
    ]);
    env.kit.kubectl_ok(&[
        "wait",
        "--for",
        "delete",
        "pod",
        "-l",
        "app=reapplyApp",
        "--timeout=60s",
    ]);
    // Upstream adds the address again here: its dummy comes back without it. dranet-rs gives
    // the host its link back as it was.
    let back = wait_for(
        "dummy8 back on the host",
        LIMIT,
        || {
            Command::new("ip")
                .args(["addr", "show", "dev", "dummy8"])
                .output()
                .ok()
                .filter(|o| o.status.success())
        },
        || env.tail(),
    );
    assert_has(&String::from_utf8_lossy(&back.stdout), "169.254.169.14/32");

    env.apply("repeatresourceclaimtemplate.yaml");
    let pod = env.ready_pod("app=reapplyApp");
    address_in_pod_and_claims(env, &pod, "dummy8", "169.254.169.14");
}

fn graceful_shutdown(env: &mut Env) {
    let root = env.kit.kubelet_root_dir();
    let dra = root.join("plugins/dra.net/dra.sock");
    let reg = root.join("plugins_registry/dra.net-reg.sock");
    assert!(dra.exists() && reg.exists(), "the sockets while running");
    env.stop();
    assert!(!dra.exists(), "{} after SIGTERM", dra.display());
    assert!(!reg.exists(), "{} after SIGTERM", reg.display());
}

fn unprepare_after_downtime(env: &mut Env) {
    env.veth("dummy-downtime", "upk0", true);
    env.published(&["dummy-downtime"]);
    env.apply("deviceclass.yaml");
    env.apply("resourceclaim.yaml");
    let pod = env.ready_pod("app=pod");
    let claim_uid = env
        .kit
        .get_json(&["resourceclaim", "dummy-interface-static-ip"])["metadata"]["uid"]
        .as_str()
        .expect("the claim's uid")
        .to_string();
    let checkpoint = env
        .kit
        .kubelet_root_dir()
        .join("plugins/dra.net/checkpoint");
    let in_checkpoint =
        || std::fs::read_to_string(&checkpoint).is_ok_and(|t| t.contains(claim_uid.as_str()));

    env.stop();
    env.kit.kubectl_ok(&["delete", "pod", &pod, "--force"]);
    assert!(
        !env.kit.kubectl(&["get", "pod", &pod]).status.success(),
        "the pod is gone from the API server"
    );
    // The driver was down: what it recorded of the claim in the pod is still there.
    assert!(
        !state_records(&env.state, &claim_uid).is_empty(),
        "the attach journal's entry of claim {claim_uid} while the driver is down"
    );
    assert!(
        in_checkpoint(),
        "the claim prepared in {}",
        checkpoint.display()
    );

    env.start_daemon();
    wait_for(
        "the driver to forget the deleted pod and unprepare its claim",
        LIMIT,
        || (state_records(&env.state, &claim_uid).is_empty() && !in_checkpoint()).then_some(()),
        || {
            format!(
                "records {:?}, claim in checkpoint: {}\n{}",
                state_records(&env.state, &claim_uid),
                in_checkpoint(),
                env.tail()
            )
        },
    );
}

fn permanent_neighbours(env: &mut Env) {
    env.veth("dummy-neigh", "upk0", true);
    upstream::add_permanent_neighbours("dummy-neigh", |a| {
        ip(a);
    });
    env.published(&["dummy-neigh"]);
    env.apply("deviceclass.yaml");
    env.apply("resourceclaim.yaml");
    let pod = env.ready_pod("app=pod");
    let neigh = in_pod(env.kit, &pod, &["ip", "neigh", "show"]);
    for want in upstream::PERMANENT_NEIGHBOURS_IN_POD {
        assert_has(&neigh, want);
    }
}

fn rules_and_tables(env: &mut Env) {
    env.veth("dummy-rules", "upk0", true);
    upstream::add_table_100_and_rule_500("dummy-rules", |a| {
        ip(a);
    });
    env.rules.push(500);
    env.published(&["dummy-rules"]);
    env.apply("deviceclass.yaml");
    env.apply("resourceclaim.yaml");
    let pod = env.ready_pod("app=pod");
    assert_has(
        &in_pod(env.kit, &pod, &["ip", "route", "show", "table", "100"]),
        upstream::TABLE_100_ROUTE_IN_POD,
    );
    let rules = in_pod(env.kit, &pod, &["ip", "rule", "show"]);
    // Upstream's regexp: "500:[[:space:]]+from 10.20.30.0/24 lookup 100".
    assert!(
        rules.lines().any(|l| l
            .strip_prefix("500:")
            .is_some_and(|r| r.starts_with(char::is_whitespace)
                && r.trim_start().starts_with("from 10.20.30.0/24 lookup 100"))),
        "want rule 500 from 10.20.30.0/24 lookup 100 in:\n{rules}"
    );
}

fn ipv6_subnet_route(env: &mut Env) {
    env.veth("dummy-ipv6", "upk0", false);
    upstream::add_ipv6_subnet("dummy-ipv6", |a| {
        ip(a);
    });
    ip(&["link", "set", "up", "dev", "dummy-ipv6"]);
    env.published(&["dummy-ipv6"]);
    env.apply("deviceclass.yaml");
    env.apply("resourceclaim_ipv6_subnet.yaml");
    let pod = env.ready_pod("app=pod-ipv6");
    let routes = in_pod(env.kit, &pod, &["ip", "-6", "route", "show"]);
    assert_has(
        &routes,
        "fd36::3:0:e:0:0/96 dev dummy-ipv6 proto kernel metric 256 pref medium",
    );
    assert_lacks(
        &routes,
        "fd36::3:0:e:0:0/96 dev dummy-ipv6 metric 1024 pref medium",
    );
}

fn pbr(env: &mut Env) {
    env.veth("pbr-test-pod-1", "pbr-rtr-1", true);
    env.veth("pbr-test-pod-2", "pbr-rtr-2", true);
    env.published(&["pbr-test-pod-1", "pbr-rtr-1", "pbr-test-pod-2", "pbr-rtr-2"]);
    env.apply("deviceclass.yaml");
    env.apply("resourceclaim_pbr.yaml");
    let pod1 = env.ready_pod("app=pod-pbr-1");
    env.ready_pod("app=pod-pbr-router");
    env.ready_pod("app=pod-pbr-2");
    // Pod 1 reaches pod 2 through the router: table 100's default via 192.168.100.2.
    exec(env.kit, &pod1, &["ping", "-c", "1", "192.168.200.10"]);
}

fn slice_attributes_unchanged(env: &mut Env) {
    env.veth("dummy0", "upk0", true);
    env.published(&["dummy0"]);
    // Upstream sleeps 5 s here. The link came up after it appeared, and each change is
    // published: the attributes to keep are those of the link up.
    let original = wait_for(
        "dummy0 published up",
        LIMIT,
        || attributes_of(env.kit, "dummy0").filter(|a| a["state"]["string"] == "up"),
        || env.tail(),
    );
    assert!(
        original.as_object().is_some_and(|o| !o.is_empty()),
        "{original}"
    );

    // Upstream reads the slice at two moments; a watch sees every version the API server
    // stored in between, so a publication that dropped the device for a moment fails too.
    let watch = SliceWatch::start(env.kit);
    env.apply("deviceclass.yaml");
    env.apply("resourceclaim.yaml");
    env.ready_pod("app=pod");
    assert_eq!(
        attributes_of(env.kit, "dummy0").as_ref(),
        Some(&original),
        "{}\ndaemon:\n{}",
        "dummy0's attributes once allocated and in the pod",
        env.tail()
    );

    // Upstream: `kubectl rollout restart daemonset/dranet`.
    env.stop();
    env.start_daemon();
    assert_eq!(
        attributes_of(env.kit, "dummy0").as_ref(),
        Some(&original),
        "{}\ndaemon:\n{}",
        "dummy0's attributes after the daemon's restart",
        env.tail()
    );
    let versions = watch.stop();
    env.kit.say(format_args!(
        "{} versions of the slices watched from the allocation to after the restart",
        versions.len()
    ));
    let node = env.kit.node().to_string();
    let mut slices: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for (i, (kind, slice)) in versions.iter().enumerate() {
        if slice["spec"]["driver"] != "dra.net" || slice["spec"]["nodeName"] != node.as_str() {
            continue;
        }
        let name = slice["metadata"]["name"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        if kind == "DELETED" {
            slices.remove(&name);
        } else {
            slices.insert(name, slice.clone());
        }
        let attrs = slices
            .values()
            .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
            .find(|d| d["attributes"]["ifName"]["string"] == "dummy0")
            .map(|d| d["attributes"].clone());
        assert_eq!(
            attrs.as_ref(),
            Some(&original),
            "dummy0's attributes in the node's slices after the API server's event {i} of {} \
             ({kind}): every version must have them",
            versions.len()
        );
    }
}

/// `kubectl get resourceslices --watch`: every version of every slice the API server stores
/// from its start to [`SliceWatch::stop`].
struct SliceWatch {
    child: std::process::Child,
    reader: std::thread::JoinHandle<Vec<(String, serde_json::Value)>>,
}

impl SliceWatch {
    /// Starts the watch and waits for its first event (the slices as they are).
    fn start(kit: &Kit) -> SliceWatch {
        let mut child = kit
            .command("kubectl")
            .args(["get", "resourceslices", "--watch", "--output-watch-events"])
            .args(["-o", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl get --watch");
        let stdout = child.stdout.take().expect("stdout");
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut events = Vec::new();
            let stream = serde_json::Deserializer::from_reader(std::io::BufReader::new(stdout))
                .into_iter::<serde_json::Value>();
            for ev in stream.map_while(Result::ok) {
                let kind = ev["type"].as_str().unwrap_or("?").to_string();
                events.push((kind, ev["object"].clone()));
                let _ = first_tx.send(());
            }
            events
        });
        first_rx
            .recv_timeout(LIMIT)
            .expect("the watch's first event (the slices as they are)");
        SliceWatch { child, reader }
    }

    /// Ends the watch; the events in order, as `(type, object)`.
    fn stop(mut self) -> Vec<(String, serde_json::Value)> {
        // The last writes reach the watch within moments of the reads that saw them.
        std::thread::sleep(Duration::from_millis(500));
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.reader.join().expect("the watch's reader")
    }
}

fn bpf_filter_attributes(env: &mut Env) {
    bpf_device(env);
    assert_has(
        &run_ok(Command::new("tc").args(["filter", "show", "dev", "dummy0", "ingress"])),
        "dummy_bpf.o:[classifier] direct-action",
    );
    dummy0_attribute(env, "ebpf", true.into());
    dummy0_attribute(env, "tcFilterNames", TC_FILTER_NAME.into());
}

fn tcx_filter_attributes(env: &mut Env) {
    bpf_device(env);
    tcx_filter();
    assert_has(
        &tcx_listing(&Netns::current().unwrap(), "dummy0"),
        "tcx/ingress handle_ingress prog_id",
    );
    dummy0_attribute(env, "ebpf", true.into());
    dummy0_attribute(env, "tcxProgramNames", TCX_PROGRAM_NAME.into());
}

fn bpf_programs_removed(env: &mut Env) {
    bpf_device(env);
    tcx_filter();
    // Not in upstream: both programs are there before the claim, so what follows can fail.
    dummy0_attribute(env, "tcFilterNames", TC_FILTER_NAME.into());
    dummy0_attribute(env, "tcxProgramNames", TCX_PROGRAM_NAME.into());

    env.apply("deviceclass.yaml");
    env.apply("resourceclaim_disable_ebpf.yaml");
    let pod = env.ready_pod("app=pod");
    assert_eq!(pod, "pod-ebpf");
    let ns = pod_netns(env.kit, &pod);
    // The TCX program went into the pod with the link; the claim's `disableEbpfPrograms`
    // detached it.
    assert_lacks(
        &tcx_listing(&Netns::open(&ns).unwrap(), "dummy0"),
        "tcx/ingress handle_ingress prog_id",
    );
    // The kernel drops a link's qdiscs, with their filters, when it changes namespace: the TC
    // filter never reaches the pod, with or without the flag.
    assert_lacks(
        &in_pod(
            env.kit,
            &pod,
            &["tc", "filter", "show", "dev", "dummy0", "ingress"],
        ),
        TC_FILTER_NAME,
    );
}
