//! End to end against a real containerd 1.7 with NRI, driven through CRI like the kubelet would.
//!
//! The test installs what it needs (`.ci/containerd-nri.sh`), starts its own containerd in a
//! temporary directory, runs a plugin built on this crate in-process, and checks: registration;
//! RunPodSandbox with the pod's netns path; a device node injected at CreateContainer that is
//! visible and permitted inside the running container; StopPodSandbox carrying the netns path
//! remembered from RunPodSandbox; and, after a containerd restart, the plugin back within a second
//! and seeing the next pod. It needs root; without root it prints a SKIP line and passes.

use dranet_testkit::containerd as lab;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lab::{Lab, short, wait_for};

use dranet_nri::{
    Container, ContainerAdjustment, HandlerError, LinuxDevice, NriPlugin, PodSandbox, Result,
    RunnerBuilder, RuntimeInfo,
};

#[derive(Debug, Clone)]
struct Seen {
    event: String,
    pod: String,
    netns: Option<String>,
}

#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<Seen>>,
}

impl Recorder {
    fn record(&self, event: &str, pod: &PodSandbox) {
        let s = Seen {
            event: event.into(),
            pod: pod.id.clone(),
            netns: pod.netns_path().map(Into::into),
        };
        eprintln!(
            "  plugin: {} pod={} netns={:?}",
            s.event,
            short(&s.pod),
            s.netns
        );
        self.seen.lock().unwrap().push(s);
    }

    fn find(&self, event: &str, pod: &str) -> Option<Seen> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .find(|s| s.event == event && (pod.is_empty() || s.pod == pod))
            .cloned()
    }

    fn count(&self, event: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.event == event)
            .count()
    }
}

impl NriPlugin for Recorder {
    async fn configure(&self, rt: &RuntimeInfo) -> Result<(), HandlerError> {
        eprintln!(
            "  plugin: Configure by {} {}",
            rt.runtime_name, rt.runtime_version
        );
        self.seen.lock().unwrap().push(Seen {
            event: "Configure".into(),
            pod: String::new(),
            netns: None,
        });
        Ok(())
    }
    async fn run_pod_sandbox(&self, pod: &PodSandbox) -> Result<(), HandlerError> {
        self.record("RunPodSandbox", pod);
        Ok(())
    }
    async fn stop_pod_sandbox(&self, pod: &PodSandbox) -> Result<(), HandlerError> {
        self.record("StopPodSandbox", pod);
        Ok(())
    }
    async fn remove_pod_sandbox(&self, pod: &PodSandbox) -> Result<(), HandlerError> {
        self.record("RemovePodSandbox", pod);
        Ok(())
    }
    async fn create_container(
        &self,
        pod: &PodSandbox,
        c: &Container,
    ) -> Result<ContainerAdjustment, HandlerError> {
        self.record("CreateContainer", pod);
        let mut adj = ContainerAdjustment::new();
        if c.name == "app" {
            adj.add_device(LinuxDevice::char("/dev/infiniband/uverbs0", 231, 192))?
                .add_env("DRANET_NRI", "seen")?;
        }
        Ok(adj)
    }
    async fn stop_container(&self, pod: &PodSandbox, _: &Container) -> Result<(), HandlerError> {
        self.record("StopContainer", pod);
        Ok(())
    }
}

#[test]
fn plugin_against_real_containerd() {
    let t0 = Instant::now();
    if !lab::ready_or_skip("dranet-nri containerd integration test") {
        return;
    }
    eprintln!("[{:>6} ms] packages present", t0.elapsed().as_millis());

    let mut lab = Lab::new(t0, "dranetnri0", "10.244.199.0/24");
    lab.start_containerd();
    lab.step("containerd up");
    lab.prepare_images_and_stubs();
    lab.step("images imported, CRI stubs generated");

    let tokio_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let plugin = Arc::new(Recorder::default());
    let runner = RunnerBuilder::new()
        .socket(lab.nri_socket())
        .name("dranet-nri-test")
        .index(50)
        .from_env(false)
        .build_shared(plugin.clone())
        .unwrap();
    let _plugin_task = tokio_rt.spawn(runner.run());
    wait_for("plugin registration", || {
        (plugin.count("Configure") == 1).then_some(())
    });
    lab.step("plugin registered and configured");

    // 1. A pod started through CRI reaches RunPodSandbox with its network namespace.
    let logdir = lab.path("podlogs").display().to_string();
    let uid1 = "0a6f3c1e-0000-4000-8000-000000000001";
    let pod1 = lab.cri(&["runp", "pod-one", uid1, &logdir])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let run1 = wait_for("RunPodSandbox", || plugin.find("RunPodSandbox", &pod1));
    let netns = run1
        .netns
        .clone()
        .expect("RunPodSandbox carried a netns path");
    assert!(
        Path::new(&netns).exists(),
        "netns path {netns} does not exist"
    );
    lab.step(&format!("RunPodSandbox seen, netns {netns}"));

    // 2. The CreateContainer adjustment adds a usable char device 231:192.
    let cid = lab.create_sleeper(&pod1, "pod-one", uid1, &logdir);
    lab.cri(&["start", &cid]);
    let ls = lab.cri(&["exec", &cid, "ls", "-l", "/dev/infiniband/uverbs0"]);
    let out = ls["out"].as_str().unwrap_or_default();
    assert_eq!(ls["rc"], 0, "device missing in the container: {out}");
    assert!(
        out.starts_with('c') && out.contains("231, 192"),
        "wrong device node: {out}"
    );
    // No driver behind 231:192 on this host: opening must fail with ENXIO, not with the EPERM a
    // missing cgroup allow rule would give.
    let open = lab.cri(&[
        "exec",
        &cid,
        "sh",
        "-c",
        "cat /dev/infiniband/uverbs0 2>&1; true",
    ]);
    let open = open["out"].as_str().unwrap_or_default();
    assert!(
        open.contains("No such device or address"),
        "device not permitted by cgroup: {open}"
    );
    let env = lab.cri(&["exec", &cid, "sh", "-c", "echo $DRANET_NRI"]);
    assert_eq!(env["out"].as_str().map(str::trim), Some("seen"));
    let spec = lab.cri(&["spec", &cid]);
    let rules = spec["linux"]["resources"]["devices"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        rules.iter().any(|r| r["allow"] == true
            && r["type"] == "c"
            && r["major"] == 231
            && r["minor"] == 192),
        "no cgroup allow rule for c 231:192 in {rules:?}"
    );
    lab.step(&format!("device visible in container: {}", out.trim()));

    // 3. StopPodSandbox arrives with the netns path remembered from RunPodSandbox.
    lab.cri(&["stop", &cid]);
    lab.cri(&["rm", &cid]);
    lab.cri(&["stopp", &pod1]);
    let stop1 = wait_for("StopPodSandbox", || plugin.find("StopPodSandbox", &pod1));
    assert_eq!(stop1.netns.as_deref(), Some(netns.as_str()));
    lab.cri(&["rmp", &pod1]);
    wait_for("RemovePodSandbox", || {
        plugin.find("RemovePodSandbox", &pod1)
    });
    lab.step("StopPodSandbox and RemovePodSandbox seen");

    // 4. containerd restarts: the plugin comes back by itself (its backoff is capped at 250 ms;
    //    the bound below only catches a backoff that grew without limit) and sees the next pod.
    lab.stop_containerd();
    lab.step("containerd stopped");
    lab.start_containerd();
    let up = Instant::now();
    lab.step("containerd restarted");
    wait_for("re-registration", || {
        (plugin.count("Configure") == 2).then_some(())
    });
    let back = up.elapsed();
    lab.step(&format!(
        "plugin back {} ms after the NRI socket reappeared",
        back.as_millis()
    ));
    assert!(
        back < Duration::from_secs(15),
        "plugin took {back:?} to come back: the reconnect backoff is not capped"
    );

    let uid2 = "0a6f3c1e-0000-4000-8000-000000000002";
    let pod2 = lab.cri(&["runp", "pod-two", uid2, &logdir])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let run2 = wait_for("RunPodSandbox after restart", || {
        plugin.find("RunPodSandbox", &pod2)
    });
    assert!(run2.netns.is_some(), "second pod without netns");
    lab.cri(&["stopp", &pod2]);
    let stop2 = wait_for("StopPodSandbox after restart", || {
        plugin.find("StopPodSandbox", &pod2)
    });
    assert_eq!(stop2.netns, run2.netns);
    lab.cri(&["rmp", &pod2]);
    lab.step("second pod seen after the restart");
    drop(tokio_rt);
}
