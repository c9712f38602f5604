//! `dranet run` as the DRA driver of a real Kubernetes node, v1.34.9 and v1.36.3 (one test each;
//! the kit in `../shared/k8s/`:
//! stock API server, scheduler, controller-manager and kubelet, containerd 1.7 with NRI on).
//!
//! Discovery sees the host (through `--sysfs /sys` and netlink) plus the Azure ND GB300 v6
//! fixture (`--fixture-sysfs`: four IB-only ConnectX VFs, `mlx5_0`…`mlx5_3`). The test makes a
//! veth `drt0` on the host and a filter that publishes it. Then:
//!
//! - the kubelet registers the driver, `/readyz` turns 200, the slices carry the fixture's four
//!   devices and `drt0`;
//! - a DeviceClass and a claim template like the seeds' `1nic-aligned` (an RDMA NIC on NUMA
//!   node 0, and the veth with a config) are allocated by the real scheduler and prepared by the
//!   real kubelet; the container sees exactly its RDMA link's char devices and the veth named,
//!   addressed and sized as claimed; the claim's status carries networkData;
//! - `/metrics` counts the prepare and the attach under upstream's names; `/healthz` is 200;
//! - veths created and deleted while the daemon runs appear in and vanish from the published
//!   slice (the latency is printed);
//! - SIGKILL and a restart with the pod running: the pod keeps its devices; deleting it gives
//!   the host its veth back as it was;
//! - SIGTERM: the daemon deregisters, removes its sockets and exits 0.
//!
//! Needs root and the kit; skipped with a message otherwise.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::links::{
    VETH_FILTER, Veths, check_veth_in_pod, host_link, ip, nic_and_veth_template, nic_pod,
    printed_line, printed_metadata,
};
use crate::manifests::device_class;
use dranet_core::Discover;
use dranet_testkit::kit::{Daemon, Kit, free_port, http_get, wait_for};

const LIMIT: Duration = Duration::from_secs(90);
const VETH: &str = "drt0";

struct Run<'a> {
    kit: &'a Kit,
    fixture: PathBuf,
    state: PathBuf,
    port: u16,
    logs: PathBuf,
}

impl Run<'_> {
    fn start(&self, n: u32) -> Daemon {
        // DRANET_DAEMON_BIN measures another build (e.g. target/release/dranet).
        let mut cmd = self
            .kit
            .dranet_run(env!("CARGO_BIN_EXE_dranet"), &self.state, self.port);
        cmd.arg("--fixture-sysfs")
            .arg(self.fixture.join("sys"))
            .args(["--cloud-provider-hint", "none", "--filter", VETH_FILTER])
            .args(["--log", "info,dranet_kubeletplugin=debug"]);
        Daemon::spawn(cmd, self.logs.join(format!("dranet-{n}.log")))
    }

    fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.port, path)
    }

    fn wait_ready(&self, daemon: &Daemon, what: &str) {
        wait_for(
            what,
            LIMIT,
            || (self.get("/readyz")?.0 == 200).then_some(()),
            || {
                format!(
                    "readyz: {:?}\ndaemon:\n{}",
                    self.get("/readyz"),
                    tail(&daemon.output())
                )
            },
        );
    }
}

/// VmRSS of a process, in kB (0 if unreadable).
fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn tail(s: &str) -> String {
    dranet_testkit::kit::tail(s, 60)
}

/// A DeviceClass for every dra.net device, and a claim template like the seeds' `1nic-aligned`
/// (an RDMA NIC on NUMA node 0) plus the veth.
fn class_and_template() -> String {
    let class = device_class("dranet.net", "dra.net");
    let template = nic_and_veth_template(
        "nic-aligned",
        "dranet.net",
        r#"device.attributes["dra.net"]["rdma"] == true && device.attributes["dra.net"]["numaNode"] == 0"#,
        VETH,
    );
    format!("{class}---{template}")
}

pub(crate) fn dranet_run_on_a_real_node(kit: &Kit) {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let fixture = tmp.path().join("fixture");
    dranet_discovery::fixture::azure_nd_gb300_v6(&fixture).unwrap();
    let logs = tmp.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut veths = Veths::default();
    veths.add(VETH);
    ip(&["link", "set", VETH, "mtu", "1450"]);
    ip(&["addr", "add", "192.0.2.10/24", "dev", VETH]);
    let before = host_link(VETH).expect("the veth exists");

    let run = Run {
        kit,
        fixture: fixture.clone(),
        state: tmp.path().join("state"),
        port: free_port(),
        logs: logs.clone(),
    };
    let t0 = Instant::now();
    let mut daemon = run.start(1);

    // Ready: registered with the kubelet and NRI, first publication done.
    run.wait_ready(&daemon, "/readyz to answer 200");
    let own = daemon
        .output()
        .lines()
        .find_map(|l| {
            Some(
                l.split("startup_ms=")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .to_string(),
            )
        })
        .unwrap_or_default();
    kit.say(format_args!(
        "daemon ready {:.0?} after start (polled every 100 ms; its own count: {own} ms); resident memory {} kB",
        t0.elapsed(),
        rss_kb(daemon.child.id())
    ));
    assert_eq!(run.get("/healthz").map(|r| r.0), Some(200));
    // `dranet doctor` on this node sees the runtime's NRI socket and the kubelet's directories.
    let doctor = Command::new(env!("CARGO_BIN_EXE_dranet"))
        .args(["doctor", "--nri-socket", kit.var("DRANET_K8S_NRI_SOCKET")])
        .arg("--kubelet-root-dir")
        .arg(kit.kubelet_root_dir())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(report.contains("OK   runtime   NRI socket"), "{report}");
    assert!(!report.contains("FAIL kubelet"), "{report}");
    let expected: BTreeSet<String> = [
        "pci-0101-00-00-0",
        "pci-0102-00-00-0",
        "pci-0103-00-00-0",
        "pci-0104-00-00-0",
        VETH,
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let published = kit.node_devices("dra.net");
    assert!(
        expected.is_subset(&published),
        "published {published:?}, want at least {expected:?}"
    );

    // A pod with an aligned RDMA NIC and the veth.
    kit.apply(&format!(
        "{}---{}",
        class_and_template(),
        nic_pod(
            "rdma-pod",
            "nic-aligned",
            kit.var("DRANET_K8S_BUSYBOX_IMAGE")
        )
    ));
    wait_for(
        "pod rdma-pod to be Ready",
        LIMIT,
        || kit.pod_ready("rdma-pod").then_some(()),
        || {
            format!(
                "pod: {}\ndaemon:\n{}",
                kit.kubectl_ok(&["describe", "pod", "rdma-pod"]),
                tail(&daemon.output())
            )
        },
    );
    let out = wait_for(
        "the container's output",
        LIMIT,
        || {
            let out = kit.logs("rdma-pod");
            out.contains("END").then_some(out)
        },
        || tail(&daemon.output()),
    );
    kit.say(format_args!(
        "pod running {:.1?} after start:\n{}",
        started.elapsed(),
        out.trim()
    ));

    // Exactly the char devices of the RDMA link the scheduler chose.
    let claim = kit.pod_claim("rdma-pod").expect("the pod's claim");
    let claim_json = kit.get_json(&["resourceclaim", &claim]);
    let results = claim_json["status"]["allocation"]["devices"]["results"]
        .as_array()
        .expect("allocation results")
        .clone();
    let nic = results
        .iter()
        .find(|r| r["request"] == "nic")
        .and_then(|r| r["device"].as_str())
        .expect("the nic result")
        .to_string();
    assert!(
        nic == "pci-0101-00-00-0" || nic == "pci-0102-00-00-0",
        "an RDMA NIC on NUMA node 0, got {nic}"
    );
    let inv = dranet_discovery::host(&fixture.join("sys"), Default::default())
        .discover()
        .unwrap();
    let want: BTreeSet<String> = inv
        .device(&nic)
        .and_then(|d| d.rdma.as_ref())
        .expect("the fixture's RDMA link")
        .char_devices
        .iter()
        .filter_map(|c| {
            Path::new(&c.path)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .collect();
    let dev_line = out
        .lines()
        .find_map(|l| l.strip_prefix("DEV "))
        .expect("the DEV line");
    let got: BTreeSet<String> = dev_line.split_whitespace().map(str::to_string).collect();
    assert_eq!(got, want, "the container's /dev/infiniband");

    // The veth, configured as claimed, and networkData in the claim's status.
    check_veth_in_pod(kit, &out, &claim, VETH, LIMIT, || tail(&daemon.output()));

    // Each request's device metadata file: the RDMA-only NIC's published attributes (no network
    // data: it has no netdev), the veth's as the pod sees it.
    let meta = printed_metadata(&out);
    assert_eq!(
        meta.keys().map(String::as_str).collect::<Vec<_>>(),
        ["eth", "nic"],
        "{out}"
    );
    let dev = |r: &str| meta[r]["requests"][0]["devices"][0].clone();
    let (nic_meta, eth_meta) = (dev("nic"), dev("eth"));
    assert_eq!(meta["nic"]["metadata"]["name"], claim.as_str());
    assert_eq!(nic_meta["name"], nic.as_str(), "{out}");
    let rdma_name = &inv
        .device(&nic)
        .and_then(|d| d.rdma.as_ref())
        .expect("rdma")
        .name;
    assert_eq!(
        nic_meta["attributes"]["rdmaDevice"]["string"],
        rdma_name.as_str(),
        "{nic_meta}"
    );
    assert_eq!(nic_meta["attributes"]["numaNode"]["int"], 0, "{nic_meta}");
    assert!(nic_meta.get("networkData").is_none(), "{nic_meta}");
    assert_eq!(eth_meta["name"], VETH);
    assert_eq!(
        eth_meta["networkData"]["interfaceName"], "net1",
        "{eth_meta}"
    );
    assert!(
        eth_meta["networkData"]["ips"]
            .as_array()
            .is_some_and(|v| v.iter().any(|ip| ip == "10.77.0.2/24")),
        "{eth_meta}"
    );
    assert_eq!(
        eth_meta["networkData"]["hardwareAddress"].as_str(),
        Some(printed_line(&out, "MAC ").as_str()),
        "{out}"
    );

    // Metrics under upstream's names.
    let (code, metrics) = run.get("/metrics").expect("/metrics");
    assert_eq!(code, 200);
    for want in [
        r#"dranet_driver_dra_plugin_requests_total{method="PrepareResourceClaims",status="success"}"#,
        r#"dranet_driver_nri_plugin_requests_total{method="RunPodSandbox",status="success"}"#,
        r#"dranet_driver_published_devices_total{feature="rdma"} 4"#,
        "dranet_driver_last_published_time_seconds ",
    ] {
        assert!(metrics.contains(want), "missing {want} in\n{metrics}");
    }

    // Hot-plug: veths appear in and vanish from the slice while the daemon runs.
    let mut appear = Vec::new();
    let mut vanish = Vec::new();
    for i in 1..=5 {
        let name = format!("drt{i}");
        let t = Instant::now();
        veths.add(&name);
        wait_for(
            &format!("{name} in the slice"),
            Duration::from_secs(30),
            || kit.node_devices("dra.net").contains(&name).then_some(()),
            || tail(&daemon.output()),
        );
        appear.push(t.elapsed());
        let t = Instant::now();
        veths.del(&name);
        wait_for(
            &format!("{name} gone from the slice"),
            Duration::from_secs(30),
            || (!kit.node_devices("dra.net").contains(&name)).then_some(()),
            || tail(&daemon.output()),
        );
        vanish.push(t.elapsed());
    }
    let inside: Vec<String> = daemon
        .output()
        .lines()
        .filter(|l| l.contains("hot-plug change published"))
        .filter_map(|l| l.split("latency_ms=").nth(1))
        .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    kit.say(format_args!(
        "hot-plug seen through kubectl polling: appear {appear:?}, vanish {vanish:?}; daemon's own hot-plug-to-publish latencies (ms): {inside:?}"
    ));
    assert!(
        inside.len() >= 10,
        "each change was published through hot-plug, not a periodic rescan: {inside:?}"
    );

    kit.say(format_args!(
        "resident memory after the pod and hot-plug: {} kB",
        rss_kb(daemon.child.id())
    ));

    // SIGKILL with the pod running, then a restart: the pod keeps its devices.
    daemon.kill();
    let mut daemon = run.start(2);
    run.wait_ready(&daemon, "/readyz to answer 200 after the restart");
    assert!(
        kit.node_devices("dra.net").contains(VETH),
        "the veth in the pod is still published"
    );
    let in_pod = kit.kubectl_ok(&["exec", "rdma-pod", "--", "cat", "/sys/class/net/net1/mtu"]);
    assert_eq!(in_pod.trim(), "1400");
    let dev_now = kit.kubectl_ok(&["exec", "rdma-pod", "--", "ls", "/dev/infiniband"]);
    let dev_now: BTreeSet<String> = dev_now.split_whitespace().map(str::to_string).collect();
    assert_eq!(dev_now, want);

    // Deleting the pod gives the host its veth back as it was.
    kit.kubectl_ok(&["delete", "pod", "rdma-pod", "--wait=true", "--timeout=60s"]);
    let after = wait_for(
        "the veth back on the host",
        LIMIT,
        || host_link(VETH),
        || tail(&daemon.output()),
    );
    assert_eq!(after, before, "the host's veth after the pod");

    // SIGTERM: exit 0, sockets removed.
    let reg_dir = kit.kubelet_root_dir().join("plugins_registry");
    let ours = |dir: &Path| {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("dra.net"))
            .count()
    };
    assert_eq!(ours(&reg_dir), 1, "the registration socket while running");
    daemon.stop(Duration::from_secs(30));
    assert_eq!(ours(&reg_dir), 0, "registration socket removed");
    let dra_sock = kit.kubelet_root_dir().join("plugins/dra.net/dra.sock");
    assert!(!dra_sock.exists(), "{} removed", dra_sock.display());
    let _ = kit.kubectl(&["delete", "resourceclaimtemplate", "nic-aligned"]);
    let _ = kit.kubectl(&["delete", "deviceclass", "dranet.net"]);
}
