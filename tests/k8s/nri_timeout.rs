//! A pod never runs without its NICs, on a real node whose containerd gives NRI plugins 100 ms
//! (`NRI_REQUEST_TIMEOUT=100ms`, a cluster of its own per version): upstream's `nri_timeout.bats`
//! cases, named after them, and the daemon stalled, restarted or killed while a pod starts.
//!
//! Every pod claims eight host veths (`drtnt0`…`drtnt7`, named `net0`…`net7` in the pod) and its
//! container prints the links it sees **at its start** (`SEEN …`): the test passes only if all
//! eight were there, configured, before the container's process ran.
//!
//! - `hook_installed`: with the hook, the eight are in when the container starts; a restart of
//!   the container is not held, even with the daemon stopped (the marker answers);
//! - the daemon SIGSTOPped right after it prepared the claim, for 3 s (containerd drops the
//!   plugin; the hook waits for the daemon and has the pod attached when it wakes);
//! - the daemon SIGKILLed right after it prepared the claim and started again;
//! - the daemon SIGKILLed while a deferred attach is half done, then started again;
//! - `without_the_hook_creation_fails_until_attached` (`--hook-path=`);
//! - `device_attach_timeout_0_fails_the_sandbox`: the pod never runs with fewer than eight.
//!
//! After each pod the host has its eight veths back as they were. On the main cluster (2 s),
//! [`a_larger_containerd_timeout_attaches_at_sandbox_creation`] runs as its own scenario.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use dranet_testkit::kit::{Daemon, Kit, free_port, http_get, tail, wait_for};
use dranet_testkit::netns::Veths;

use crate::links::{VETH_FILTER, claim_pod, host_link};
use crate::manifests::{claim_template, device_class};

const LIMIT: Duration = Duration::from_secs(90);
/// The NRI request timeout of this module's cluster.
pub const NRI_TIMEOUT: &str = "100ms";
const CLASS: &str = "dranet-nt";
/// The NICs of each scenario's pods.
const N: usize = 8;

fn veth(i: usize) -> String {
    format!("drtnt{i}")
}

/// The template of `n` requests.
fn template(n: usize) -> String {
    format!("nics-{n}")
}

/// A DeviceClass of dra.net's devices and a template of `n` requests, one veth each.
fn manifests(n: usize) -> String {
    let mut requests = String::new();
    let mut config = String::new();
    for i in 0..n {
        let v = veth(i);
        requests += &format!(
            "      - name: n{i}\n        exactly:\n          deviceClassName: {CLASS}\n          selectors:\n          - cel: {{expression: 'device.attributes[\"dra.net\"].ifName == \"{v}\"'}}\n"
        );
        config += &format!(
            "      - requests: [n{i}]\n        opaque:\n          driver: dra.net\n          parameters:\n            interface: {{name: net{i}, addresses: [\"10.81.{i}.2/24\"]}}\n"
        );
    }
    let devices = format!("      requests:\n{requests}      config:\n{config}");
    format!(
        "{}---{}",
        device_class(CLASS, "dra.net"),
        claim_template(&template(n), &devices)
    )
}

/// What the container sees at its start: its links and the last NIC's address, then `END`.
fn script(n: usize) -> String {
    format!(
        r"echo SEEN $(ls /sys/class/net | tr '\n' ' '); ip -o -4 addr show dev net{}; echo END; trap 'exit 0' TERM; sleep 100000 & wait",
        n - 1
    )
}

pub(crate) struct Bench<'a> {
    kit: &'a Kit,
    /// The NICs of each pod.
    n: usize,
    tmp: tempfile::TempDir,
    veths: Veths,
    before: Vec<serde_json::Value>,
    port: u16,
    image: String,
    started: usize,
}

impl<'a> Bench<'a> {
    fn new(kit: &'a Kit) -> Bench<'a> {
        Bench::of(kit, N)
    }

    /// Pods of `n` NICs.
    pub(crate) fn of(kit: &'a Kit, n: usize) -> Bench<'a> {
        let mut veths = Veths::default();
        for i in 0..n {
            veths.add(&veth(i));
        }
        let before = (0..n)
            .map(|i| host_link(&veth(i)).expect("the veth exists"))
            .collect();
        kit.apply(&manifests(n));
        Bench {
            kit,
            n,
            tmp: tempfile::tempdir().unwrap(),
            veths,
            before,
            port: free_port(),
            image: kit.var("DRANET_K8S_BUSYBOX_IMAGE").to_string(),
            started: 0,
        }
    }

    fn state(&self) -> std::path::PathBuf {
        self.tmp.path().join("state")
    }

    /// `dranet run` told the runtime's timeout, with `extra` flags (the hook by default).
    pub(crate) fn daemon(&mut self, extra: &[&str]) -> Daemon {
        self.started += 1;
        let bin = env!("CARGO_BIN_EXE_dranet");
        let mut cmd = self.kit.dranet_run(bin, &self.state(), self.port);
        cmd.args(["--cloud-provider-hint", "none", "--filter", VETH_FILTER])
            .args(["--nri-request-timeout", self.kit.nri_request_timeout])
            .args(extra)
            .args(["--log", "info"]);
        let d = Daemon::spawn(
            cmd,
            self.tmp.path().join(format!("dranet-{}.log", self.started)),
        );
        self.wait_ready(&d);
        d
    }

    /// Waits for `d` to be ready with the veths published.
    fn wait_ready(&self, d: &Daemon) {
        let (port, kit, n) = (self.port, self.kit, self.n);
        wait_for(
            "the daemon ready with the veths published",
            LIMIT,
            || {
                let ready = http_get(port, "/readyz")?.0 == 200;
                let all = (0..n).all(|i| kit.node_devices("dra.net").contains(&veth(i)));
                (ready && all).then_some(())
            },
            || tail(&d.output(), 40),
        );
    }

    pub(crate) fn pod(&self, name: &str) {
        self.kit.apply(&claim_pod(
            name,
            &template(self.n),
            &self.image,
            &script(self.n),
        ));
    }

    /// Waits for `pod`'s container's first words and checks that all its NICs were in,
    /// configured.
    pub(crate) fn all_at_start(&self, pod: &str, daemon: &Daemon) {
        let out = wait_for(
            &format!("{pod}'s container to print what it saw at its start"),
            LIMIT,
            || {
                let out = self.kit.logs(pod);
                out.contains("END").then_some(out)
            },
            || {
                format!(
                    "pod: {}\ndaemon:\n{}",
                    self.kit.kubectl_ok(&["describe", "pod", pod]),
                    tail(&daemon.output(), 60)
                )
            },
        );
        let seen: BTreeSet<&str> = out
            .lines()
            .find_map(|l| l.strip_prefix("SEEN "))
            .unwrap_or("")
            .split_whitespace()
            .collect();
        for i in 0..self.n {
            assert!(
                seen.contains(format!("net{i}").as_str()),
                "{pod}'s container started without net{i}: {out}"
            );
        }
        let last = self.n - 1;
        assert!(
            out.contains(&format!("10.81.{last}.2/24")),
            "net{last} configured at start: {out}"
        );
    }

    /// Deletes `pod`; the host has its veths back as they were.
    pub(crate) fn delete(&self, pod: &str, daemon: &Daemon) {
        self.kit
            .kubectl_ok(&["delete", "pod", pod, "--wait=true", "--timeout=60s"]);
        wait_for(
            "the host to have its veths back as they were",
            LIMIT,
            || {
                let now: Vec<_> = (0..self.n).filter_map(|i| host_link(&veth(i))).collect();
                (now == self.before).then_some(())
            },
            || tail(&daemon.output(), 40),
        );
    }

    /// Waits for `line` in the daemon's log.
    fn logged(&self, daemon: &Daemon, line: &str) {
        wait_for(
            &format!("the daemon to log {line:?}"),
            LIMIT,
            || daemon.output().contains(line).then_some(()),
            || tail(&daemon.output(), 40),
        );
    }

    pub(crate) fn metric(&self, name_and_labels: &str) -> f64 {
        let Some((200, body)) = http_get(self.port, "/metrics") else {
            return 0.0;
        };
        body.lines()
            .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
            .unwrap_or(0.0)
    }
}

impl Drop for Bench<'_> {
    fn drop(&mut self) {
        let _ = self
            .kit
            .kubectl(&["delete", "resourceclaimtemplate", &template(self.n)]);
        let _ = self.kit.kubectl(&["delete", "deviceclass", CLASS]);
        let _ = &self.veths;
    }
}

fn signal(daemon: &Daemon, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &daemon.child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig}");
}

fn restarts(kit: &Kit, pod: &str) -> i64 {
    kit.get_json(&["pod", pod])["status"]["containerStatuses"][0]["restartCount"]
        .as_i64()
        .unwrap_or(0)
}

/// Upstream's `hook_installed` and `slow_attach_continues_and_containers_wait`, then
/// `only_the_first_container_waits`: with the daemon stopped, a killed container restarts.
pub(crate) fn hook_installed_eight_nics_at_container_start(kit: &Kit) {
    let mut b = Bench::new(kit);
    let mut d = b.daemon(&[]);
    let t = Instant::now();
    b.pod("nt-hook");
    b.all_at_start("nt-hook", &d);
    kit.say(format_args!(
        "8 NICs at the container's start in {:.1?}",
        t.elapsed()
    ));
    let deferred = b.metric("dranet_driver_sandbox_attach_results_total{result=\"deferred\"}");
    let attached = b.metric("dranet_driver_sandbox_attach_results_total{result=\"attached\"}");
    assert_eq!(deferred + attached, 1.0, "one sandbox answered");
    kit.say(format_args!(
        "RunPodSandbox: deferred {deferred}, attached in time {attached}; hook waits: {}",
        b.metric("dranet_driver_hook_waits_total{result=\"attached\"}")
    ));

    // A restart is not held: the daemon stopped, the container killed, it runs again.
    wait_for(
        "nt-hook Ready",
        LIMIT,
        || kit.pod_ready("nt-hook").then_some(()),
        || kit.kubectl_ok(&["describe", "pod", "nt-hook"]),
    );
    signal(&d, "-STOP");
    let killed = kit.kill_container("nt-hook");
    let restarted = killed
        && wait_for_opt(LIMIT, || {
            (restarts(kit, "nt-hook") >= 1 && kit.pod_ready("nt-hook")).then_some(())
        });
    signal(&d, "-CONT");
    assert!(killed, "ctr task kill of nt-hook's container");
    assert!(
        restarted,
        "the container did not restart while the daemon was stopped: {}",
        kit.kubectl_ok(&["describe", "pod", "nt-hook"])
    );
    b.delete("nt-hook", &d);

    // Stalled right after the prepare: the runtime drops the plugin, the hook waits.
    b.pod("nt-stall");
    b.logged(&d, "claim prepared");
    signal(&d, "-STOP");
    std::thread::sleep(Duration::from_secs(3));
    signal(&d, "-CONT");
    b.all_at_start("nt-stall", &d);
    b.delete("nt-stall", &d);

    // Restarted right after the prepare.
    let log_before = d.output().matches("claim prepared").count();
    b.pod("nt-restart");
    wait_for(
        "the claim of nt-restart prepared",
        LIMIT,
        || (d.output().matches("claim prepared").count() > log_before).then_some(()),
        || tail(&d.output(), 40),
    );
    d.kill();
    std::thread::sleep(Duration::from_secs(1));
    let mut d = b.daemon(&[]);
    b.all_at_start("nt-restart", &d);
    b.delete("nt-restart", &d);

    // Killed while a deferred attach is half done (or, on a fast machine, just done).
    b.pod("nt-killed");
    b.logged(&d, "claim prepared");
    wait_for_opt(Duration::from_secs(10), || {
        d.output()
            .contains("still attaching past the NRI deadline")
            .then_some(())
    });
    d.kill();
    let d = b.daemon(&[]);
    b.all_at_start("nt-killed", &d);
    b.delete("nt-killed", &d);
    let mut d = d;
    d.stop(Duration::from_secs(30));
}

/// Upstream's `without_the_hook_creation_fails_until_attached`: CreateContainer holds the
/// container until the eight are in.
pub(crate) fn without_the_hook_creation_fails_until_attached(kit: &Kit) {
    let mut b = Bench::new(kit);
    let mut d = b.daemon(&["--hook-path="]);
    b.pod("nt-nohook");
    b.all_at_start("nt-nohook", &d);
    b.delete("nt-nohook", &d);
    d.stop(Duration::from_secs(30));
}

/// Upstream's `device_attach_timeout_0_fails_the_sandbox`: the sandbox fails rather than run
/// without its NICs; a pod that does run has all eight.
pub(crate) fn device_attach_timeout_0_fails_the_sandbox(kit: &Kit) {
    let mut b = Bench::new(kit);
    // With the hook: a runtime that dropped the plugin (an answer late on a loaded machine)
    // starts the sandbox anyway, and only the hook then holds its containers.
    let mut d = b.daemon(&["--device-attach-timeout", "0"]);
    b.pod("nt-zero");
    let outcome = wait_for(
        "nt-zero to run or fail naming --device-attach-timeout=0",
        LIMIT,
        || {
            // The sandbox fails (RunPodSandbox refused in time), or, when the runtime dropped
            // the plugin and started it anyway, its container does (the hook refuses it).
            let ev = kit.get_json(&[
                "events",
                "--field-selector",
                "involvedObject.name=nt-zero,type=Warning",
            ]);
            let failed = ev["items"].as_array().is_some_and(|items| {
                items.iter().any(|e| {
                    e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("--device-attach-timeout=0"))
                })
            });
            if failed {
                return Some("failed");
            }
            kit.logs("nt-zero").contains("END").then_some("ran")
        },
        || {
            format!(
                "pod: {}\ndaemon:\n{}",
                kit.kubectl_ok(&["describe", "pod", "nt-zero"]),
                tail(&d.output(), 40)
            )
        },
    );
    kit.say(format_args!("--device-attach-timeout=0: the pod {outcome}"));
    if outcome == "ran" {
        b.all_at_start("nt-zero", &d);
    }
    b.delete("nt-zero", &d);
    d.stop(Duration::from_secs(30));
}

/// Upstream's `a_larger_containerd_timeout_attaches_at_sandbox_creation` (the main cluster's
/// 2 s): RunPodSandbox answers with the eight in.
pub(crate) fn a_larger_containerd_timeout_attaches_at_sandbox_creation(kit: &Kit) {
    let mut b = Bench::new(kit);
    let mut d = b.daemon(&[]);
    b.pod("nt-2s");
    b.all_at_start("nt-2s", &d);
    let attached = b.metric("dranet_driver_sandbox_attach_results_total{result=\"attached\"}");
    let deferred = b.metric("dranet_driver_sandbox_attach_results_total{result=\"deferred\"}");
    kit.say(format_args!(
        "2 s: attached at sandbox creation {attached}, deferred {deferred}"
    ));
    assert_eq!(attached + deferred, 1.0);
    b.delete("nt-2s", &d);
    d.stop(Duration::from_secs(30));
}

/// `f` until it gives a value or `limit` passes: whether it did.
fn wait_for_opt(limit: Duration, mut f: impl FnMut() -> Option<()>) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f().is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}
