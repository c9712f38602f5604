//! The OCI `createRuntime` hook's side of the barrier: the request the hook sends the daemon
//! over a unix socket, the daemon's answer, and both ends of the exchange.
//!
//! The runtime runs the hook (`dranet hook wait`) for a container whose claim's CDI device
//! carries it, after the pod's namespaces exist and before the container's process runs, with
//! the container's OCI state on stdin. It needs no NRI connection: a daemon that missed
//! RunPodSandbox (stalled, restarting, dropped by the runtime) learns of the pod here and
//! attaches it now; a daemon that is down is waited for, within the hook's limit.
//!
//! A pod whose attach finished leaves a marker file named after its sandbox: the hook of a later
//! or restarted container finds it and returns at once, daemon or not.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The largest request line, in bytes.
pub const MAX_MESSAGE: usize = 16 * 1024;
/// The largest answer line, in bytes: it carries the pod's runtime hooks, each with up to
/// [`dranet_core::runtime_hook::MAX_DATA_BYTES`] of data.
pub const MAX_ANSWER: usize = 1 << 20;

/// What the hook asks: attach this pod (if not yet) and say when it is done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookRequest {
    /// The runtime's sandbox id.
    pub sandbox_id: String,
    /// The pod's UID.
    pub pod_uid: String,
    /// The pod's name.
    pub pod_name: String,
    /// The pod's namespace.
    pub pod_namespace: String,
    /// The pod's network namespace, as the daemon can open it.
    pub netns: String,
    /// How long the daemon may take to answer, in milliseconds.
    pub wait_ms: u64,
    /// The container the hook runs for (for the provider's runtime hooks).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container_name: String,
}

/// The daemon's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookAnswer {
    /// Every device of the pod is in its namespace, configured.
    pub attached: bool,
    /// Why not, in the pod owner's terms.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The provider's runtime hooks the pod's first container runs ([`super::runtime`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_hooks: Vec<super::runtime::PodHook>,
}

impl HookRequest {
    /// The pod and container the provider's runtime hooks run for.
    pub fn target(&self) -> super::runtime::Target<'_> {
        super::runtime::Target {
            sandbox_id: &self.sandbox_id,
            pod_uid: &self.pod_uid,
            pod_namespace: &self.pod_namespace,
            pod_name: &self.pod_name,
            container: &self.container_name,
            netns: &self.netns,
        }
    }
}

/// Why the hook could not see the pod attached.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The OCI state on stdin is not what a runtime gives a hook.
    #[error("the container state on stdin: {0}")]
    State(String),
    /// The daemon could not be reached or answered nothing usable before the limit.
    #[error("the dranet daemon at {socket} did not answer within {limit:?}: {last}")]
    NoAnswer {
        /// The socket.
        socket: PathBuf,
        /// The hook's limit.
        limit: Duration,
        /// The last thing that went wrong.
        last: String,
    },
    /// The daemon says the pod's devices could not be attached.
    #[error("the pod's network devices were not attached: {0}")]
    Refused(String),
}

/// The part of the OCI state (runtime-spec `state`) the hook reads.
#[derive(Debug, Deserialize)]
struct OciState {
    #[serde(default)]
    pid: u32,
    #[serde(default)]
    annotations: HashMap<String, String>,
}

/// The sandbox annotations of containerd's CRI, then CRI-O's.
const SANDBOX_ID: [&str; 2] = [
    "io.kubernetes.cri.sandbox-id",
    "io.kubernetes.cri-o.SandboxID",
];
const POD_UID: [&str; 2] = ["io.kubernetes.cri.sandbox-uid", "io.kubernetes.pod.uid"];
const POD_NAME: [&str; 2] = ["io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"];
const POD_NAMESPACE: [&str; 2] = [
    "io.kubernetes.cri.sandbox-namespace",
    "io.kubernetes.pod.namespace",
];
const CONTAINER_NAME: [&str; 2] = [
    "io.kubernetes.cri.container-name",
    "io.kubernetes.container.name",
];
/// `sandbox` on the pause container: it never waits (its namespaces are what is attached to).
const CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";

/// Where pinned network namespaces live on the host (and, mounted, in the daemon).
pub const NETNS_DIR: &str = "/var/run/netns";

/// What the hook does with the state it was given.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Ask the daemon.
    Ask(HookRequest),
    /// Nothing to wait for (the pod's own sandbox container).
    Skip,
}

/// Reads the OCI state a runtime gives a hook. `netns_dir` is searched for the pinned name of
/// the container's network namespace, so that the daemon can open it from its own mount.
pub fn parse_state(state: &[u8], netns_dir: &Path, wait: Duration) -> Result<Parsed, HookError> {
    let s: OciState = serde_json::from_slice(state).map_err(|e| HookError::State(e.to_string()))?;
    if s.annotations.get(CONTAINER_TYPE).map(String::as_str) == Some("sandbox") {
        return Ok(Parsed::Skip);
    }
    let get = |keys: [&str; 2]| keys.iter().find_map(|k| s.annotations.get(*k)).cloned();
    let missing = |what: &str| {
        HookError::State(format!(
            "no {what} annotation: not a Kubernetes pod's container"
        ))
    };
    let sandbox_id = get(SANDBOX_ID).ok_or_else(|| missing("sandbox id"))?;
    let pod_uid = get(POD_UID).ok_or_else(|| missing("pod UID"))?;
    if s.pid == 0 {
        return Err(HookError::State(
            "no pid: the hook runs before the container has a process".into(),
        ));
    }
    let own = PathBuf::from(format!("/proc/{}/ns/net", s.pid));
    let netns = pinned(&own, netns_dir).unwrap_or(own);
    Ok(Parsed::Ask(HookRequest {
        sandbox_id,
        pod_uid,
        pod_name: get(POD_NAME).unwrap_or_default(),
        pod_namespace: get(POD_NAMESPACE).unwrap_or_default(),
        netns: netns.to_string_lossy().into_owned(),
        wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        container_name: get(CONTAINER_NAME).unwrap_or_default(),
    }))
}

/// The entry of `dir` that is the namespace `ns` (same device and inode), if any.
fn pinned(ns: &Path, dir: &Path) -> Option<PathBuf> {
    let want = std::fs::metadata(ns).ok()?;
    std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        let m = std::fs::metadata(e.path()).ok()?;
        (m.dev() == want.dev() && m.ino() == want.ino()).then(|| e.path())
    })
}

/// The marker of a sandbox whose attach finished.
pub fn marker(dir: &Path, sandbox_id: &str) -> Option<PathBuf> {
    // A sandbox id is hex from the runtime; anything else never names a file.
    let ok = !sandbox_id.is_empty()
        && sandbox_id.len() <= 128
        && sandbox_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    ok.then(|| dir.join(sandbox_id))
}

/// The hook's side: asks the daemon at `socket` and waits for its answer, reconnecting while
/// the daemon is down, for at most `limit` in all; the pod's runtime hooks once it is attached.
/// Blocking: the hook is a short process.
pub fn ask(
    socket: &Path,
    req: &HookRequest,
    limit: Duration,
) -> Result<Vec<super::runtime::PodHook>, HookError> {
    let deadline = Instant::now() + limit;
    let mut line = serde_json::to_vec(req).map_err(|e| HookError::State(e.to_string()))?;
    line.push(b'\n');
    loop {
        let last = match exchange(socket, &line, deadline) {
            Ok(a) if a.attached => return Ok(a.runtime_hooks),
            Ok(a) => return Err(HookError::Refused(a.reason)),
            Err(e) => e,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HookError::NoAnswer {
                socket: socket.to_path_buf(),
                limit,
                last,
            });
        }
        std::thread::sleep(left.min(Duration::from_millis(200)));
    }
}

fn exchange(socket: &Path, line: &[u8], deadline: Instant) -> Result<HookAnswer, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(left)).map_err(|e| e.to_string())?;
    s.write_all(line).map_err(|e| format!("send: {e}"))?;
    let mut buf = Vec::new();
    BufReader::new(s.take(MAX_ANSWER as u64))
        .read_until(b'\n', &mut buf)
        .map_err(|e| format!("read: {e}"))?;
    if buf.last() != Some(&b'\n') {
        return Err("the daemon closed the connection without an answer".into());
    }
    serde_json::from_slice(&buf).map_err(|e| format!("the answer: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(annotations: &[(&str, &str)], pid: u32) -> Vec<u8> {
        let a: HashMap<&str, &str> = annotations.iter().copied().collect();
        serde_json::to_vec(&serde_json::json!({
            "ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": pid,
            "bundle": "/run/containerd/x", "annotations": a,
        }))
        .unwrap()
    }

    #[test]
    fn a_containerd_container_asks_with_its_pod() {
        let me = std::process::id();
        let s = state(
            &[
                ("io.kubernetes.cri.container-type", "container"),
                ("io.kubernetes.cri.sandbox-id", "abc123"),
                ("io.kubernetes.cri.sandbox-uid", "u-1"),
                ("io.kubernetes.cri.sandbox-name", "p"),
                ("io.kubernetes.cri.sandbox-namespace", "ns"),
            ],
            me,
        );
        let dir = tempfile::tempdir().unwrap();
        let Parsed::Ask(r) = parse_state(&s, dir.path(), Duration::from_secs(3)).unwrap() else {
            panic!("skipped")
        };
        assert_eq!(
            (
                r.sandbox_id.as_str(),
                r.pod_uid.as_str(),
                r.pod_name.as_str(),
                r.pod_namespace.as_str()
            ),
            ("abc123", "u-1", "p", "ns")
        );
        assert_eq!(
            r.netns,
            format!("/proc/{me}/ns/net"),
            "nothing pinned: the process's own"
        );
        assert_eq!(r.wait_ms, 3000);
    }

    #[test]
    fn a_pinned_namespace_is_named_by_its_pin() {
        let dir = tempfile::tempdir().unwrap();
        // A bind mount is what the runtime makes; a symlink to the same inode reads alike.
        std::os::unix::fs::symlink("/proc/self/ns/net", dir.path().join("cni-1")).unwrap();
        let s = state(
            &[
                ("io.kubernetes.cri-o.SandboxID", "abc"),
                ("io.kubernetes.pod.uid", "u"),
            ],
            std::process::id(),
        );
        let Parsed::Ask(r) = parse_state(&s, dir.path(), Duration::ZERO).unwrap() else {
            panic!("skipped")
        };
        assert_eq!(r.netns, dir.path().join("cni-1").to_string_lossy());
    }

    #[test]
    fn the_sandbox_container_skips_and_foreign_state_is_refused() {
        let d = Path::new("/nonexistent");
        let sb = state(&[("io.kubernetes.cri.container-type", "sandbox")], 1);
        assert_eq!(parse_state(&sb, d, Duration::ZERO).unwrap(), Parsed::Skip);
        for (bad, says) in [
            (b"{".to_vec(), "container state"),
            (state(&[], 1), "no sandbox id annotation"),
            (
                state(&[("io.kubernetes.cri.sandbox-id", "a")], 1),
                "no pod UID",
            ),
            (
                state(
                    &[
                        ("io.kubernetes.cri.sandbox-id", "a"),
                        ("io.kubernetes.pod.uid", "u"),
                    ],
                    0,
                ),
                "no pid",
            ),
        ] {
            let e = parse_state(&bad, d, Duration::ZERO)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn markers_are_named_only_by_plain_ids() {
        let d = Path::new("/m");
        assert_eq!(marker(d, "ab12-3_x"), Some(PathBuf::from("/m/ab12-3_x")));
        for bad in ["", "../x", "a/b", ".", &"a".repeat(129)] {
            assert_eq!(marker(d, bad), None, "{bad}");
        }
    }

    #[test]
    fn asking_a_socket_nobody_serves_ends_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let req = HookRequest {
            sandbox_id: "s".into(),
            pod_uid: "u".into(),
            pod_name: String::new(),
            pod_namespace: String::new(),
            netns: "/proc/1/ns/net".into(),
            wait_ms: 0,
            container_name: String::new(),
        };
        let e = ask(
            &dir.path().join("none.sock"),
            &req,
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(matches!(e, HookError::NoAnswer { .. }), "{e}");
    }
}
