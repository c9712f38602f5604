//! A real single-node Kubernetes cluster for end-to-end tests, in each version the kit runs
//! ([`VERSIONS`]: v1.34.9 and v1.36.3): the kit in `../shared/k8s/` next to the repository (stock
//! kube-apiserver, scheduler, controller-manager and kubelet, its own containerd with NRI and
//! CDI). `DRANET_K8S_KIT` names another `kit.sh`.
//!
//! The harness of the root package's `tests/k8s/main.rs` brings up each version's cluster once ([`Kit::start`]) and
//! takes it down when done ([`Kit`]'s drop wipes its state); [`Kit::say`] prefixes the version to
//! a scenario's log lines. Where the kit cannot run (not root, no kit) it prints a `SKIP` line
//! and the scenarios pass. One cluster per machine: test binaries of other checkouts on the same
//! machine wait for it on the file lock `/tmp/dranet-k8s-kit.lock`.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod api;

static ONE_CLUSTER: Mutex<()> = Mutex::new(());

/// A Kubernetes version the kit runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    /// What `KUBE_VERSION` selects it by.
    pub kit: &'static str,
    /// The API server's `gitVersion`.
    pub full: &'static str,
}

/// Kubernetes v1.34.9, the kit's default.
pub const V1_34: Version = Version {
    kit: "1.34",
    full: "v1.34.9",
};
/// Kubernetes v1.36.3 (`KUBE_VERSION=1.36`).
pub const V1_36: Version = Version {
    kit: "1.36",
    full: "v1.36.3",
};
/// Every version the real-cluster tests run on, oldest first.
pub const VERSIONS: [Version; 2] = [V1_34, V1_36];

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kubernetes {}", self.full)
    }
}

/// The kubelet reports disk pressure, taints the node and evicts pods when less than this share
/// of a filesystem is free (the kit's `evictionHard`: `nodefs.available` and `imagefs.available`
/// at 1%).
const EVICTION_PERCENT: u64 = 1;
/// What a test's cluster writes besides (images, pod logs, snapshots), kept free on top.
const DISK_MARGIN: u64 = 1 << 30;

/// `(size, available)` bytes of the filesystem holding `path`, from `df`.
fn disk_room(path: &str) -> Option<(u64, u64)> {
    let out = Command::new("df")
        .args(["-B1", "--output=size,avail", path])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut nums = text.lines().nth(1)?.split_whitespace();
    Some((nums.next()?.parse().ok()?, nums.next()?.parse().ok()?))
}

/// The API versions (`--runtime-config`) the API server needs besides its defaults for the
/// feature gates `gates`: a beta API is served only when asked for, so 1.36's DeviceTaintRule
/// (`DRADeviceTaintRules`, beta) needs `resource.k8s.io/v1beta2`.
pub fn runtime_config(gates: &str) -> &'static str {
    if gates
        .split(',')
        .any(|g| g.trim() == "DRADeviceTaintRules=true")
    {
        "resource.k8s.io/v1beta2=true"
    } else {
        ""
    }
}

/// containerd's default NRI `plugin_request_timeout`, the kit's too.
pub const DEFAULT_NRI_REQUEST_TIMEOUT: &str = "2s";

/// A running kit cluster; taken down when dropped.
pub struct Kit {
    script: PathBuf,
    /// The version running.
    pub version: Version,
    /// The feature gates it runs with besides the version's defaults (`FEATURE_GATES`).
    pub gates: &'static str,
    /// containerd's NRI `plugin_request_timeout` (`NRI_REQUEST_TIMEOUT`), e.g. `2s`.
    pub nri_request_timeout: &'static str,
    /// What `kit.sh env` exports (KUBECONFIG, DRANET_K8S_*).
    pub env: HashMap<String, String>,
    /// Reads without kubectl (none when the kubeconfig or curl do not allow them).
    api: Option<api::Api>,
    _lock: MutexGuard<'static, ()>,
    /// Held while the cluster is up: other processes' tests wait on it (fields drop in order, so
    /// the cluster is down before it is released).
    _machine_lock: std::fs::File,
}

pub use crate::root::is_root;

/// Where the kit script is, if anywhere.
pub fn kit_script() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("DRANET_K8S_KIT") {
        return Some(PathBuf::from(p)).filter(|p| p.exists());
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/k8s/kit.sh");
    p.exists().then_some(p)
}

/// Whether the kit's pods get a default route from the CNI, as on every real cluster (a
/// driver adding routes in the pod must live with it: issue 47's M5 hid behind pods without
/// one). On unless `POD_DEFAULT_ROUTE=0`.
pub fn pod_default_route() -> bool {
    std::env::var("POD_DEFAULT_ROUTE").map_or(true, |v| v != "0")
}

impl Kit {
    /// Starts `version`'s cluster, or says why `test` is skipped and returns `None`.
    pub fn start(test: &str, version: Version) -> Option<Kit> {
        Kit::start_with_gates(test, version, "")
    }

    /// [`Kit::start`] with `--feature-gates=GATES` on every component (`""`: the version's
    /// defaults). A cluster left running is taken down first: `up` would keep its gates.
    pub fn start_with_gates(test: &str, version: Version, gates: &'static str) -> Option<Kit> {
        Kit::start_with(test, version, gates, DEFAULT_NRI_REQUEST_TIMEOUT)
    }

    /// [`Kit::start_with_gates`] with containerd's NRI `plugin_request_timeout` set to
    /// `nri_request_timeout` (e.g. `100ms`; the kit's default is [`DEFAULT_NRI_REQUEST_TIMEOUT`]).
    pub fn start_with(
        test: &str,
        version: Version,
        gates: &'static str,
        nri_request_timeout: &'static str,
    ) -> Option<Kit> {
        if !is_root() {
            eprintln!(
                "SKIP {test} on {version}: needs root (the kubelet and containerd run as root)"
            );
            return None;
        }
        let Some(script) = kit_script() else {
            eprintln!(
                "SKIP {test} on {version}: no Kubernetes kit at ../shared/k8s/kit.sh next to the \
                 repository (set DRANET_K8S_KIT)"
            );
            return None;
        };
        let lock = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
        let machine_lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open("/tmp/dranet-k8s-kit.lock")
            .expect("open /tmp/dranet-k8s-kit.lock");
        let waited = Instant::now();
        machine_lock.lock().expect("lock /tmp/dranet-k8s-kit.lock");
        if waited.elapsed() > Duration::from_secs(1) {
            eprintln!(
                "[{version}] waited {:.1?} for another test's cluster",
                waited.elapsed()
            );
        }
        let mut kit = Kit {
            script,
            version,
            gates,
            nri_request_timeout,
            env: HashMap::new(),
            api: None,
            _lock: lock,
            _machine_lock: machine_lock,
        };
        if !gates.is_empty() {
            kit.down();
        }
        if !kit.up() {
            kit.say("a cluster with other settings was running: down, and up again");
            kit.down();
            assert!(
                kit.up(),
                "[{version}] kit.sh up kept other settings after down"
            );
        }
        // A cluster left running (a killed test) keeps the version it was started with: `up`
        // leaves running pieces alone. Then start over.
        let running = kit.server_version();
        if running != version.full {
            kit.say(format_args!("{running} was running: down, and up again"));
            kit.down();
            assert!(
                kit.up(),
                "[{version}] kit.sh up kept other settings after down"
            );
            let running = kit.server_version();
            assert_eq!(
                running, version.full,
                "[{version}] the API server's version"
            );
        }
        kit.check_disk_room();
        Some(kit)
    }

    /// Fails at once, naming the filesystem, when the kubelet would soon taint the node for disk
    /// pressure: its pods would stay Pending ("untolerated taint") and a test time out later.
    fn check_disk_room(&self) {
        let kubelet_root = self.kubelet_root_dir();
        let kubelet_root = kubelet_root.to_string_lossy();
        for dir in [self.var("DRANET_K8S_DIR"), &kubelet_root] {
            let Some((size, avail)) = disk_room(dir) else {
                continue;
            };
            let need = size / 100 * EVICTION_PERCENT + DISK_MARGIN;
            assert!(
                avail >= need,
                "[{}] {:.1} GiB free on the filesystem of {dir}, {:.1} GiB needed: the kubelet \
                 taints the node (disk pressure) when less than {EVICTION_PERCENT}% of its {:.0} GiB is free; \
                 free some disk (a build's target/ directory?)",
                self.version,
                gib(avail),
                gib(need),
                gib(size),
            );
        }
    }

    /// The node's taints, its conditions and the free disk of the kit's directories, for a
    /// failure message.
    pub fn node_report(&self) -> String {
        let mut out = String::new();
        let node = self.get_json(&["node", self.node()]);
        out += &format!("taints: {}\n", node["spec"]["taints"]);
        for c in node["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            out += &format!(
                "condition {}={} ({}: {})\n",
                c["type"].as_str().unwrap_or("?"),
                c["status"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or("")
            );
        }
        let kubelet_root = self.kubelet_root_dir();
        for dir in [self.var("DRANET_K8S_DIR"), &kubelet_root.to_string_lossy()] {
            if let Some((size, avail)) = disk_room(dir) {
                out += &format!(
                    "{dir}: {:.1} GiB free of {:.0} GiB\n",
                    gib(avail),
                    gib(size)
                );
            }
        }
        out
    }

    /// `kit.sh up` of this version, then its environment; false if a cluster running with
    /// other settings was kept (`kit.sh up` leaves it; take it down first).
    fn up(&mut self) -> bool {
        let t = Instant::now();
        let up = Command::new(&self.script)
            .arg("up")
            .env("KUBE_VERSION", self.version.kit)
            .env("FEATURE_GATES", self.gates)
            .env("RUNTIME_CONFIG", runtime_config(self.gates))
            .env("NRI_REQUEST_TIMEOUT", self.nri_request_timeout)
            .env(
                "POD_DEFAULT_ROUTE",
                if pod_default_route() { "1" } else { "0" },
            )
            .output()
            .expect("run kit.sh up");
        assert!(
            up.status.success(),
            "[{}] kit.sh up failed:\n{}\n{}",
            self.version,
            String::from_utf8_lossy(&up.stdout),
            String::from_utf8_lossy(&up.stderr)
        );
        self.say(format_args!("kit up in {:.1?}", t.elapsed()));
        let out = Command::new(&self.script)
            .arg("env")
            .output()
            .expect("run kit.sh env");
        self.env.clear();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some(kv) = line.strip_prefix("export ") else {
                continue;
            };
            if let Some((k, v)) = kv.split_once('=') {
                self.env
                    .insert(k.to_string(), v.trim_matches(['"', '\'']).to_string());
            }
        }
        self.api = api::Api::new(&mut self.command("kubectl"));
        !String::from_utf8_lossy(&up.stdout).contains("with other settings")
    }

    /// `kit.sh down`, saying how long it took or why it failed.
    fn down(&self) {
        let t = Instant::now();
        match Command::new(&self.script).arg("down").output() {
            Ok(o) if o.status.success() => {
                self.say(format_args!("kit down in {:.1?}", t.elapsed()))
            }
            Ok(o) => self.say(format_args!(
                "kit.sh down failed:\n{}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )),
            Err(e) => self.say(format_args!("kit.sh down: {e}")),
        }
    }

    /// The API server's `gitVersion`.
    pub fn server_version(&self) -> String {
        let v: serde_json::Value =
            serde_json::from_str(&self.kubectl_ok(&["version", "-o", "json"])).expect("JSON");
        v["serverVersion"]["gitVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// A line of the test's log, prefixed with the version.
    pub fn say(&self, msg: impl std::fmt::Display) {
        eprintln!("[{}] {msg}", self.version);
    }

    /// A variable of `kit.sh env`.
    pub fn var(&self, name: &str) -> &str {
        self.env
            .get(name)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("kit.sh env has no {name}"))
    }

    /// The kit's `kit.sh`.
    pub fn script(&self) -> &Path {
        &self.script
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        self.var("DRANET_K8S_NODE_NAME")
    }

    /// The kubelet's root directory.
    pub fn kubelet_root_dir(&self) -> PathBuf {
        PathBuf::from(self.var("DRANET_K8S_KUBELET_ROOT_DIR"))
    }

    /// A command with the kit's environment (KUBECONFIG, PATH with kubectl).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.envs(&self.env);
        c
    }

    /// Runs kubectl and returns its output, whatever the exit code.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.command("kubectl")
            .args(args)
            .output()
            .expect("run kubectl")
    }

    /// Runs kubectl, which must succeed; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "[{}] kubectl {args:?} failed: {}{}",
            self.version,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl apply` of these manifests.
    pub fn apply(&self, yaml: &str) {
        let mut child = self
            .command("kubectl")
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl apply");
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(yaml.as_bytes())
            .expect("write manifests");
        let out = child.wait_with_output().expect("kubectl apply");
        assert!(
            out.status.success(),
            "[{}] kubectl apply failed: {}\n{yaml}",
            self.version,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kubectl get ... -o json`, parsed; it must succeed. Read straight from the API server
    /// where the arguments allow (see `kit/api.rs`), else by kubectl.
    pub fn get_json(&self, args: &[&str]) -> serde_json::Value {
        if let (Some(api), Some(path)) = (&self.api, api::path_of(args)) {
            let read = api.get(&path);
            return match read {
                Ok((200, body)) => serde_json::from_str(&body)
                    .unwrap_or_else(|e| panic!("[{}] GET {path}: {e}: {body}", self.version)),
                Ok((code, body)) => {
                    panic!(
                        "[{}] get {args:?}: GET {path}: {code}: {body}",
                        self.version
                    )
                }
                Err(e) => panic!("[{}] get {args:?}: {e}", self.version),
            };
        }
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.kubectl_ok(&a)).expect("kubectl JSON")
    }

    /// The logs of `pod`'s (in `default`) one container so far; empty while there are none.
    pub fn logs(&self, pod: &str) -> String {
        if let Some(api) = &self.api {
            let path = format!("/api/v1/namespaces/default/pods/{pod}/log");
            return match api.get(&path) {
                Ok((200, body)) => body,
                _ => String::new(),
            };
        }
        String::from_utf8_lossy(&self.kubectl(&["logs", pod]).stdout).into_owned()
    }

    /// Whether `pod` (in `default`) has condition Ready.
    pub fn pod_ready(&self, pod: &str) -> bool {
        let p = self.get_json(&["pod", pod]);
        p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    }

    /// The devices `driver` publishes for this node, as the API server holds them.
    pub fn node_device_list(&self, driver: &str) -> Vec<serde_json::Value> {
        let list = self.get_json(&["resourceslices"]);
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["spec"]["driver"] == driver && s["spec"]["nodeName"] == self.node())
            .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
            .collect()
    }

    /// The names of the devices `driver` publishes for this node.
    pub fn node_devices(&self, driver: &str) -> std::collections::BTreeSet<String> {
        self.node_device_list(driver)
            .iter()
            .filter_map(|d| d["name"].as_str().map(str::to_string))
            .collect()
    }

    /// `ctr` on the kit's containerd, in the `k8s.io` namespace (where the kubelet's containers
    /// are).
    pub fn ctr(&self, args: &[&str]) -> std::process::Output {
        // The machine's ctr, not the kit's PATH (which holds the cluster's binaries only).
        Command::new("ctr")
            .args(["--address", self.var("DRANET_K8S_CONTAINERD_SOCKET")])
            .args(["-n", "k8s.io"])
            .args(args)
            .output()
            .expect("run ctr")
    }

    /// The id of `pod`'s first container, as containerd knows it (empty before it has one).
    pub fn container_id(&self, pod: &str) -> String {
        let p = self.get_json(&["pod", pod]);
        p["status"]["containerStatuses"][0]["containerID"]
            .as_str()
            .and_then(|s| s.strip_prefix("containerd://"))
            .unwrap_or_default()
            .to_string()
    }

    /// Kills `pod`'s first container with SIGKILL behind the kubelet's back (it restarts it);
    /// whether containerd did.
    pub fn kill_container(&self, pod: &str) -> bool {
        let id = self.container_id(pod);
        !id.is_empty()
            && self
                .ctr(&["task", "kill", "-s", "SIGKILL", &id])
                .status
                .success()
    }

    /// The name of the first ResourceClaim of `pod` (from its status).
    pub fn pod_claim(&self, pod: &str) -> Option<String> {
        let p = self.get_json(&["pod", pod]);
        p["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
            .as_str()
            .map(str::to_string)
    }

    /// `dranet run` as this node's driver: the kit's kubeconfig, kubelet and NRI socket, its
    /// state in `state`, probes and metrics on `127.0.0.1:port`, hot-plug published without rate
    /// limit (tests change links back to back). The caller adds its filters and providers.
    /// `bin` is the `dranet` to run; `DRANET_DAEMON_BIN` runs another build (e.g.
    /// target/release/dranet).
    pub fn dranet_run(&self, bin: &str, state: &Path, port: u16) -> Command {
        let bin = std::env::var("DRANET_DAEMON_BIN").unwrap_or_else(|_| bin.to_string());
        let mut cmd = self.command(&bin);
        cmd.arg("run")
            .args(["--hostname-override", self.node()])
            .args(["--kubeconfig", self.var("KUBECONFIG")])
            .arg("--kubelet-root-dir")
            .arg(self.kubelet_root_dir())
            .args(["--nri-socket", self.var("DRANET_K8S_NRI_SOCKET")])
            .arg("--state-dir")
            .arg(state)
            .args(["--bind-address", &format!("127.0.0.1:{port}")])
            .args(["--inventory-min-poll-interval", "0"]);
        self.hook_env(&mut cmd, &bin);
        cmd
    }

    /// The hook of a `dranet run` on this node: `bin` itself, through the kit containerd's CDI
    /// directory (as environment, so that a test's own `--hook-path` or `--cdi-dir` wins).
    pub fn hook_env(&self, cmd: &mut Command, bin: &str) {
        cmd.env("DRANET_HOOK_PATH", bin)
            .env("DRANET_CDI_DIR", self.var("DRANET_K8S_CDI_DIR"));
    }

    /// The kit component's log, e.g. `kubelet`.
    pub fn log(&self, component: &str) -> String {
        let path = Path::new(self.var("DRANET_K8S_DIR"))
            .join("logs")
            .join(format!("{component}.log"));
        std::fs::read_to_string(path).unwrap_or_default()
    }
}

impl Drop for Kit {
    fn drop(&mut self) {
        self.down();
    }
}

pub use crate::wait::{tail, wait_for};

/// Bytes in GiB, for messages.
fn gib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 30)
}

/// A child process whose stderr (and stdout) go to a file, killed when dropped.
pub struct Daemon {
    /// The process.
    pub child: Child,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl Daemon {
    /// Starts `cmd` with its output in `log`.
    pub fn spawn(mut cmd: Command, log: PathBuf) -> Daemon {
        let f = std::fs::File::create(&log).expect("create daemon log");
        let f2 = f.try_clone().expect("clone daemon log");
        let child = cmd
            .stdout(Stdio::from(f))
            .stderr(Stdio::from(f2))
            .spawn()
            .expect("start daemon");
        Daemon { child, log }
    }

    /// What it printed so far.
    pub fn output(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// SIGKILL, and wait for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait up to `limit` for the exit status.
    pub fn terminate(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Daemon {
    /// SIGTERM, which it must answer by exiting 0 within `limit` (its log's tail says why not).
    pub fn stop(&mut self, limit: Duration) {
        let status = self.terminate(limit);
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "exit status after SIGTERM\n{}",
            tail(&self.output(), 60)
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A minimal HTTP/1.0 GET on loopback (no client crate needed).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}

/// A TCP port on loopback that nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
