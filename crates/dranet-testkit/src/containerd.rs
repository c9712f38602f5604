//! A containerd 1.7 with NRI of a test's own, driven through CRI as the kubelet would: shared by
//! the NRI crate's integration test and the driver's end-to-end test. The CRI client is `cri.py`
//! in this crate's `containerd/` directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const PYTHON: &str = "/usr/bin/python3";
pub const WAIT: Duration = Duration::from_secs(30);

pub fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Polls `f` every 10 ms until it returns `Some`, for at most [`WAIT`].
pub fn wait_for<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    crate::wait::poll(what, WAIT, Duration::from_millis(10), f, String::new)
}

pub fn run(cmd: &mut Command) -> String {
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
pub struct Lab {
    dir: tempfile::TempDir,
    containerd: Option<Child>,
    t0: Instant,
    bridge: String,
}

impl Lab {
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn nri_socket(&self) -> PathBuf {
        self.path("nri/nri.sock")
    }

    pub fn step(&self, msg: &str) {
        eprintln!("[{:>6} ms] {msg}", self.t0.elapsed().as_millis());
    }

    /// A lab whose pods get addresses from `subnet` on the CNI bridge `bridge` (distinct per
    /// test binary, so two labs never share one).
    pub fn new(t0: Instant, bridge: &str, subnet: &str) -> Lab {
        let dir = tempfile::Builder::new()
            .prefix(&format!("{bridge}-lab"))
            .tempdir()
            .unwrap();
        let lab = Lab {
            dir,
            containerd: None,
            t0,
            bridge: bridge.to_string(),
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
  {{"type": "bridge", "bridge": "{bridge}", "isGateway": false, "ipMasq": false,
   "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "{subnet}"}}]], "dataDir": "{w}/cni/ipam"}}}},
  {{"type": "loopback"}}]}}"#
            ),
        )
        .unwrap();
        lab
    }

    /// Starts containerd; returns once its CRI and NRI sockets exist.
    pub fn start_containerd(&mut self) {
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

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.path("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    pub fn stop_containerd(&mut self) {
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

    pub fn ctr(&self, args: &[&str]) -> String {
        run(Command::new("ctr")
            .arg("--address")
            .arg(self.path("containerd.sock"))
            .args(["-n", "k8s.io"])
            .args(args))
    }

    pub fn cri(&self, args: &[&str]) -> Value {
        let out = run(Command::new(PYTHON)
            .arg(helper("cri.py"))
            .args(args)
            .env("CRI_SOCK", self.path("containerd.sock"))
            .env("CRI_STUBS", self.path("cri")));
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("cri.py {args:?} printed {out:?}: {e}"))
    }

    /// Creates (does not start) a busybox container `name` that sleeps an hour in pod sandbox
    /// `pod` (of UID `uid`), its logs under `logdir`; returns its id.
    pub fn create_sleeper(&self, pod: &str, name: &str, uid: &str, logdir: &str) -> String {
        self.cri(&[
            "create",
            pod,
            name,
            uid,
            logdir,
            "localhost/dranet-nri/busybox:1",
            "/bin/sh",
            "-c",
            "sleep 3600",
        ])["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    pub fn prepare_images_and_stubs(&self) {
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
            .args(["link", "del", &self.bridge])
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

/// A helper script of this crate's `containerd/` directory.
pub fn helper(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("containerd")
        .join(name)
}

/// Installs containerd and the rest (`.ci/containerd-nri.sh`, idempotent).
pub fn install() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    run(Command::new("bash").arg(here.join("../../.ci/containerd-nri.sh")));
}

/// For a test that needs the lab: true as root, after installing what the lab needs; otherwise
/// says why `test` is skipped and returns false. Written to stderr directly: libtest captures
/// `eprintln!`, which would hide the skip.
pub fn ready_or_skip(test: &str) -> bool {
    if !crate::root::root_or_skip(test, "containerd, runc, CNI, network namespaces") {
        return false;
    }
    install();
    true
}
