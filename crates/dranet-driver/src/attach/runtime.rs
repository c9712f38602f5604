//! The provider's runtime hooks ([`dranet_core::RuntimeHook`]), run by the OCI hook once the
//! pod's devices are in: once per pod, in the pod's network namespace, before its first
//! container's process.
//!
//! The daemon names a pod's hooks in its answer to the OCI hook and in the pod's attach marker,
//! so the first container's hook has them whether it asked the daemon or found the marker (the
//! daemon down or not). The hooks run in order, each bounded by its timeout; when all succeed the
//! hook leaves a second marker (`<sandbox>.runtime-hooks`) and the pod's later or restarted
//! containers run none. One that fails fails the container with its message, and the kubelet's
//! retry runs the pod's hooks again: a provider's hook must be idempotent.
//!
//! What a hook gets: the provider's `data` as JSON on its standard input; its arguments; the
//! environment `DRANET_POD_UID`, `DRANET_POD_NAMESPACE`, `DRANET_POD_NAME`,
//! `DRANET_CONTAINER_NAME`, `DRANET_SANDBOX_ID`, `DRANET_NETNS` (the pod's network namespace)
//! and `DRANET_DEVICES` (a JSON list of the pod's devices the provider gave this hook for:
//! claim, claim UID, request, device, interface in the pod), with `PATH` and nothing else of
//! the runtime's. It runs as the runtime's hooks do (root, the host's mount namespace) but in the
//! pod's network namespace: what it changes in the network is the pod's.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dranet_core::RuntimeHook;
use dranet_core::runtime_hook::MAX_HOOKS_PER_POD;
use serde::{Deserialize, Serialize};

/// The pod and container the hooks run for (from the OCI state the runtime gave the hook).
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The runtime's sandbox ID.
    pub sandbox_id: &'a str,
    /// The pod's UID.
    pub pod_uid: &'a str,
    /// The pod's namespace.
    pub pod_namespace: &'a str,
    /// The pod's name.
    pub pod_name: &'a str,
    /// The container whose start runs the hooks.
    pub container: &'a str,
    /// The pod's network namespace, a path.
    pub netns: &'a str,
}

/// One of the pod's devices a hook was given for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookDevice {
    /// The claim, `namespace/name`.
    pub claim: String,
    /// The claim's UID.
    pub claim_uid: String,
    /// The claim's request the device satisfies.
    pub request: String,
    /// The device's name in the slice.
    pub device: String,
    /// Its network interface in the pod, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
}

/// A hook to run for a pod, with the devices it was given for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodHook {
    /// What to run.
    pub hook: RuntimeHook,
    /// For which of the pod's devices.
    pub devices: Vec<HookDevice>,
}

/// What an attach marker holds: an empty file is a pod without hooks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Marker {
    /// The pod's runtime hooks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_hooks: Vec<PodHook>,
}

impl Marker {
    /// The marker's bytes (empty without hooks, as markers were before hooks).
    pub fn to_bytes(&self) -> Vec<u8> {
        if self.runtime_hooks.is_empty() {
            return Vec::new();
        }
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a marker's bytes.
    pub fn from_bytes(b: &[u8]) -> Result<Marker, RunError> {
        if b.iter().all(u8::is_ascii_whitespace) {
            return Ok(Marker::default());
        }
        serde_json::from_slice(b).map_err(|e| RunError::Marker(e.to_string()))
    }
}

/// Groups `(hook, device)` pairs by hook, in the order the hooks first appear: a hook the
/// provider gave for several devices runs once, given all of them.
pub fn pod_hooks(pairs: impl IntoIterator<Item = (RuntimeHook, HookDevice)>) -> Vec<PodHook> {
    let mut out: Vec<PodHook> = Vec::new();
    for (hook, device) in pairs {
        match out.iter_mut().find(|p| p.hook == hook) {
            Some(p) => p.devices.push(device),
            None => out.push(PodHook {
                hook,
                devices: vec![device],
            }),
        }
    }
    out
}

/// The marker left once a pod's runtime hooks all ran.
pub fn done_marker(attach_marker: &Path) -> PathBuf {
    let mut name = attach_marker.as_os_str().to_os_string();
    name.push(DONE_SUFFIX);
    PathBuf::from(name)
}

/// The suffix of [`done_marker`]s.
pub const DONE_SUFFIX: &str = ".runtime-hooks";

/// Why the pod's runtime hooks did not all run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The marker is not what the daemon writes.
    #[error("the pod's attach marker is not readable: {0}")]
    Marker(String),
    /// More hooks than a pod may have.
    #[error("the pod has {0} runtime hooks, more than the {MAX_HOOKS_PER_POD} a pod may run")]
    TooMany(usize),
    /// The pod's network namespace could not be opened.
    #[error("the pod's network namespace {path}: {source}")]
    Netns {
        /// Its path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The hook could not be started.
    #[error("runtime hook {path}: could not start it: {source}")]
    Start {
        /// The hook's program.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It ran past its timeout and was killed.
    #[error("runtime hook {path} did not end within {timeout:?} and was killed{stderr}")]
    Timeout {
        /// The hook's program.
        path: String,
        /// Its timeout.
        timeout: Duration,
        /// The end of what it wrote on stderr, as `: ...`, or empty.
        stderr: String,
    },
    /// It failed.
    #[error("runtime hook {path} failed ({status}){stderr}")]
    Failed {
        /// The hook's program.
        path: String,
        /// How it ended.
        status: std::process::ExitStatus,
        /// The end of what it wrote on stderr, as `: ...`, or empty.
        stderr: String,
    },
}

/// The most bytes of a hook's stderr kept for the message.
const STDERR_TAIL: usize = 2048;

/// Runs `hooks` for `target`, in order, in the pod's network namespace; the first failure stops
/// them.
pub fn run(hooks: &[PodHook], target: Target<'_>) -> Result<(), RunError> {
    if hooks.len() > MAX_HOOKS_PER_POD {
        return Err(RunError::TooMany(hooks.len()));
    }
    if hooks.is_empty() {
        return Ok(());
    }
    let netns = std::fs::File::open(target.netns).map_err(|source| RunError::Netns {
        path: target.netns.to_string(),
        source,
    })?;
    for h in hooks {
        run_one(h, target, &netns)?;
    }
    Ok(())
}

fn run_one(h: &PodHook, t: Target<'_>, netns: &std::fs::File) -> Result<(), RunError> {
    let path = h.hook.path.clone();
    let devices = serde_json::to_string(&h.devices).unwrap_or_else(|_| "[]".into());
    let mut cmd = Command::new(&h.hook.path);
    cmd.args(&h.hook.args)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("DRANET_POD_UID", t.pod_uid)
        .env("DRANET_POD_NAMESPACE", t.pod_namespace)
        .env("DRANET_POD_NAME", t.pod_name)
        .env("DRANET_CONTAINER_NAME", t.container)
        .env("DRANET_SANDBOX_ID", t.sandbox_id)
        .env("DRANET_NETNS", t.netns)
        .env("DRANET_DEVICES", devices)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let fd = netns.as_raw_fd();
    // SAFETY: between fork and exec only async-signal-safe calls: setns(2) on a descriptor
    // opened before the fork, and reading errno.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|source| RunError::Start {
        path: path.clone(),
        source,
    })?;
    let data = serde_json::to_vec(&h.hook.data).unwrap_or_else(|_| b"null".to_vec());
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that does not read its input may close it: not an error of ours.
        let _ = stdin.write_all(&data);
    }
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(s) = stderr {
            let _ = s.take(1 << 20).read_to_end(&mut buf);
        }
        buf
    });
    let timeout = h.hook.timeout();
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(source) => {
                let _ = child.kill();
                return Err(RunError::Start { path, source });
            }
        }
    };
    let stderr = tail(&reader.join().unwrap_or_default());
    match status {
        Some(s) if s.success() => Ok(()),
        Some(status) => Err(RunError::Failed {
            path,
            status,
            stderr,
        }),
        None => Err(RunError::Timeout {
            path,
            timeout,
            stderr,
        }),
    }
}

/// `: <the end of stderr>`, or empty.
fn tail(b: &[u8]) -> String {
    let text = String::from_utf8_lossy(&b[b.len().saturating_sub(STDERR_TAIL)..]);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(device: &str) -> HookDevice {
        HookDevice {
            claim: "ns/c".into(),
            claim_uid: "u1".into(),
            request: "nic".into(),
            device: device.into(),
            interface: Some(format!("if-{device}")),
        }
    }

    fn hook(path: &str) -> RuntimeHook {
        RuntimeHook {
            path: path.into(),
            args: vec![],
            timeout_seconds: 0,
            data: serde_json::Value::Null,
        }
    }

    #[test]
    fn one_hook_given_for_several_devices_runs_once_with_all_of_them() {
        let hooks = pod_hooks([
            (hook("/a"), dev("d1")),
            (hook("/b"), dev("d2")),
            (hook("/a"), dev("d3")),
        ]);
        assert_eq!(hooks.len(), 2);
        assert_eq!(hooks[0].hook.path, "/a");
        assert_eq!(hooks[0].devices, vec![dev("d1"), dev("d3")]);
        assert_eq!(hooks[1].devices, vec![dev("d2")]);
    }

    #[test]
    fn a_marker_without_hooks_is_an_empty_file_as_before() {
        assert_eq!(Marker::default().to_bytes(), Vec::<u8>::new());
        assert_eq!(Marker::from_bytes(b"").unwrap(), Marker::default());
        let m = Marker {
            runtime_hooks: pod_hooks([(hook("/a"), dev("d1"))]),
        };
        assert_eq!(Marker::from_bytes(&m.to_bytes()).unwrap(), m);
        assert!(matches!(
            Marker::from_bytes(b"{not json"),
            Err(RunError::Marker(_))
        ));
        assert_eq!(
            done_marker(Path::new("/run/dranet/attached/abc")),
            PathBuf::from("/run/dranet/attached/abc.runtime-hooks")
        );
    }

    fn target(netns: &str) -> Target<'_> {
        Target {
            sandbox_id: "sb1",
            pod_uid: "pod-uid",
            pod_name: "p",
            pod_namespace: "ns",
            container: "app",
            netns,
        }
    }

    /// Root: setns(2) needs CAP_SYS_ADMIN. The namespace is the test's own, so the hook sees
    /// the same network; what is checked is what it is given and how its end is read.
    #[test]
    fn hooks_get_their_data_and_the_pod_and_their_failures_are_named() {
        if !root() {
            eprintln!(
                "SKIP hooks_get_their_data_and_the_pod_and_their_failures_are_named: needs root (setns)"
            );
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let script = dir.path().join("hook.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\n{{ echo \"ARGS $*\"; echo \"DATA $(cat)\"; env | grep ^DRANET_ | sort; }} >> {}\n",
                out.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let mut h = hook(&script.to_string_lossy());
        h.args = vec!["--vlan".into(), "7".into()];
        h.data = serde_json::json!({"port": "eth3"});
        let hooks = pod_hooks([(h, dev("d1"))]);
        let req = target("/proc/self/ns/net");
        run(&hooks, req).unwrap();
        let got = std::fs::read_to_string(&out).unwrap();
        assert!(got.contains("ARGS --vlan 7"), "{got}");
        assert!(got.contains(r#"DATA {"port":"eth3"}"#), "{got}");
        assert!(got.contains("DRANET_CONTAINER_NAME=app"), "{got}");
        assert!(got.contains("DRANET_POD_UID=pod-uid"), "{got}");
        assert!(got.contains("DRANET_NETNS=/proc/self/ns/net"), "{got}");
        assert!(
            got.contains(r#"DRANET_DEVICES=[{"claim":"ns/c","claimUid":"u1","request":"nic","device":"d1","interface":"if-d1"}]"#),
            "{got}"
        );

        // A failure names the hook and ends with its stderr; a hook past its timeout is killed.
        std::fs::write(&script, "#!/bin/sh\necho port busy >&2\nexit 3\n").unwrap();
        let e = run(&hooks, req).unwrap_err().to_string();
        assert!(e.contains("failed (exit status: 3): port busy"), "{e}");
        std::fs::write(&script, "#!/bin/sh\nexec sleep 30\n").unwrap();
        let mut slow = hooks.clone();
        slow[0].hook.timeout_seconds = 1;
        let t = Instant::now();
        let e = run(&slow, req).unwrap_err().to_string();
        assert!(e.contains("did not end within 1s and was killed"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10));
        let e = run(&hooks, target("/nonexistent/netns"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("network namespace /nonexistent/netns"), "{e}");
        let many: Vec<PodHook> = (0..9)
            .map(|i| pod_hooks([(hook(&format!("/h{i}")), dev("d"))]).remove(0))
            .collect();
        assert!(matches!(run(&many, req), Err(RunError::TooMany(9))));
    }

    pub(super) fn root() -> bool {
        // SAFETY: geteuid(2) has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }
}
