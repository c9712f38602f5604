//! End to end against a real containerd 1.7 with NRI, driven through CRI like the kubelet would.
//!
//! The test installs what it needs (`.ci/containerd-nri.sh`), starts its own containerd in a
//! temporary directory, runs a plugin built on this crate in-process, and checks: registration;
//! RunPodSandbox with the pod's netns path; a device node injected at CreateContainer that is
//! visible and permitted inside the running container; StopPodSandbox carrying the netns path
//! remembered from RunPodSandbox; and, after a containerd restart, the plugin back within a second
//! and seeing the next pod. It needs root; without root it prints a SKIP line and passes.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dranet_nri::{
    Container, ContainerAdjustment, HandlerError, LinuxDevice, NriPlugin, PodSandbox, Result,
    RunnerBuilder, RuntimeInfo,
};
use serde_json::Value;

const PYTHON: &str = "/usr/bin/python3";
const BRIDGE: &str = "dranetnri0";
const WAIT: Duration = Duration::from_secs(30);

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

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A containerd of our own, in a temporary directory; torn down on drop, even after a failure.
struct Lab {
    dir: tempfile::TempDir,
    containerd: Option<Child>,
    t0: Instant,
}

impl Lab {
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn nri_socket(&self) -> PathBuf {
        self.path("nri/nri.sock")
    }

    fn step(&self, msg: &str) {
        eprintln!("[{:>6} ms] {msg}", self.t0.elapsed().as_millis());
    }

    fn new(t0: Instant) -> Lab {
        let dir = tempfile::Builder::new()
            .prefix("dranet-nri-e2e")
            .tempdir()
            .unwrap();
        let lab = Lab {
            dir,
            containerd: None,
            t0,
        };
        let w = lab.dir.path().display().to_string();
        for d in ["root", "state", "nri", "cni/net.d", "podlogs", "img", "cri"] {
            std::fs::create_dir_all(lab.path(d)).unwrap();
        }
        std::fs::write(
            lab.path("containerd.toml"),
            format!(
                r#"version = 2
root = "{w}/root"
state = "{w}/state"
[grpc]
  address = "{w}/containerd.sock"
[ttrpc]
  address = "{w}/containerd.sock.ttrpc"
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "{w}/nri/nri.sock"
  plugin_path = "{w}/nri/plugins"
  plugin_config_path = "{w}/nri/conf.d"
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "2s"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/dranet-nri/pause:1"
  # No CAP_SYS_RESOURCE on CI machines: runc fails on the pause process's oom_score_adj otherwise.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{w}/cni/net.d"
"#
            ),
        )
        .unwrap();
        std::fs::write(
            lab.path("cni/net.d/10-dranet-nri.conflist"),
            format!(
                r#"{{"cniVersion": "1.0.0", "name": "dranet-nri-test", "plugins": [
  {{"type": "bridge", "bridge": "{BRIDGE}", "isGateway": false, "ipMasq": false,
   "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "10.244.199.0/24"}}]], "dataDir": "{w}/cni/ipam"}}}},
  {{"type": "loopback"}}]}}"#
            ),
        )
        .unwrap();
        lab
    }

    /// Starts containerd; returns once its CRI and NRI sockets exist.
    fn start_containerd(&mut self) {
        let _ = std::fs::remove_file(self.nri_socket());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("containerd.log"))
            .unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(self.path("containerd.toml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting containerd");
        self.containerd = Some(child);
        let (cri, nri) = (self.path("containerd.sock"), self.nri_socket());
        let deadline = Instant::now() + WAIT;
        while !(cri.exists() && nri.exists()) {
            if Instant::now() > deadline {
                panic!("containerd did not come up:\n{}", self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.path("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn stop_containerd(&mut self) {
        if let Some(mut child) = self.containerd.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    fn ctr(&self, args: &[&str]) -> String {
        run(Command::new("ctr")
            .arg("--address")
            .arg(self.path("containerd.sock"))
            .args(["-n", "k8s.io"])
            .args(args))
    }

    fn cri(&self, args: &[&str]) -> Value {
        let out = run(Command::new(PYTHON)
            .arg(helper("cri.py"))
            .args(args)
            .env("CRI_SOCK", self.path("containerd.sock"))
            .env("CRI_STUBS", self.path("cri")));
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("cri.py {args:?} printed {out:?}: {e}"))
    }

    fn prepare_images_and_stubs(&self) {
        for (file, reference, cmd) in [
            (
                "pause.tar",
                "localhost/dranet-nri/pause:1",
                &["/bin/sleep", "2147483"][..],
            ),
            (
                "busybox.tar",
                "localhost/dranet-nri/busybox:1",
                &["/bin/sh"][..],
            ),
        ] {
            let tar = self.path("img").join(file);
            run(Command::new(PYTHON)
                .arg(helper("mkimage.py"))
                .arg(&tar)
                .arg(reference)
                .args(cmd));
            self.ctr(&["images", "import", &tar.display().to_string()]);
        }
        let proto_dir = Path::new("/usr/share/gocode/src");
        std::fs::copy(
            proto_dir.join("k8s.io/cri-api/pkg/apis/runtime/v1/api.proto"),
            self.path("cri/api.proto"),
        )
        .unwrap();
        run(Command::new(PYTHON)
            .args(["-m", "grpc_tools.protoc"])
            .arg(format!("-I{}", self.path("cri").display()))
            .arg(format!("-I{}", proto_dir.display()))
            .arg(format!("--python_out={}", self.path("cri").display()))
            .arg(format!("--grpc_python_out={}", self.path("cri").display()))
            .arg(self.path("cri/api.proto"))
            .arg(proto_dir.join("github.com/gogo/protobuf/gogoproto/gogo.proto")));
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.containerd.is_some() {
            // Best effort: pods and containers first, so no shim or netns outlives the test.
            let _ = Command::new(PYTHON)
                .arg(helper("cri.py"))
                .arg("cleanup")
                .env("CRI_SOCK", self.path("containerd.sock"))
                .env("CRI_STUBS", self.path("cri"))
                .stdout(Stdio::null())
                .status();
        }
        self.stop_containerd();
        let _ = Command::new("ip")
            .args(["link", "del", BRIDGE])
            .stderr(Stdio::null())
            .status();
        // Snapshots may still be mounted if containerd died early; unmount before removing.
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "grep -o ' {0}[^ ]*' /proc/self/mounts | sort -r | xargs -r -n1 umount -l",
                self.dir.path().display()
            ))
            .status();
        self.step("lab torn down");
    }
}

fn helper(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/containerd")
        .join(name)
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

#[test]
fn plugin_against_real_containerd() {
    if !is_root() {
        // Written to the stream directly: libtest captures print!/eprint!, which would hide it.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIP dranet-nri containerd integration test: needs root (containerd, runc, CNI)"
        );
        return;
    }
    let t0 = Instant::now();
    let setup = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/containerd-nri.sh");
    run(Command::new("bash").arg(setup));
    eprintln!("[{:>6} ms] packages present", t0.elapsed().as_millis());

    let mut lab = Lab::new(t0);
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
    let cid = lab.cri(&[
        "create",
        &pod1,
        "pod-one",
        uid1,
        &logdir,
        "localhost/dranet-nri/busybox:1",
        "/bin/sh",
        "-c",
        "sleep 3600",
    ])["id"]
        .as_str()
        .unwrap()
        .to_owned();
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

    // 4. containerd restarts: the plugin is back within a second and sees the next pod.
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
        back < Duration::from_secs(1),
        "plugin took {back:?} to come back"
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
