//! A pod never runs without its NICs: the attach of a pod's devices is not bound by the
//! runtime's NRI deadline, and the pod's first container waits for it.
//!
//! containerd gives an NRI plugin `plugin_request_timeout` (2 s by default) to answer
//! RunPodSandbox and then drops it, starting the pod without what the plugin had yet to do. So
//! RunPodSandbox answers within [`AttachPolicy::answer_within`] whatever the attach's length; an
//! attach that takes longer goes on in the background (journaled as any other), bounded by
//! [`AttachPolicy::device_attach_timeout`]. Two barriers keep the containers out until it ends:
//!
//! - CreateContainer refuses while the pod's attach runs, naming the devices still attaching
//!   (the kubelet retries the container), unless the container carries the hook;
//! - the OCI `createRuntime` hook ([`hook`]) that a claim's CDI device adds to the container:
//!   the runtime runs it whether or not any NRI plugin is connected, so a daemon that stalled or
//!   restarted while the pod started is asked (and waited for) there.
//!
//! [`gate`] keeps where each pod's attach stands for all of them.

pub mod gate;
pub mod hook;
pub mod runtime;
mod serve;

pub use gate::{AttachGate, Begun, Phase, Settled, Ticket};
pub use hook::{HookAnswer, HookError, HookRequest};
pub use serve::{HookHandler, serve};

use std::path::PathBuf;
use std::time::Duration;

/// containerd's default `plugin_request_timeout`.
pub const DEFAULT_NRI_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a pod's attach may take in all, by default.
pub const DEFAULT_DEVICE_ATTACH_TIMEOUT: Duration = Duration::from_secs(60);

/// How the daemon times a pod's attach against the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachPolicy {
    /// The runtime's NRI request timeout (containerd's `plugin_request_timeout`): the runtime
    /// passes none, so the operator says it (`--nri-request-timeout`).
    pub nri_request_timeout: Duration,
    /// How long an attach may go on after RunPodSandbox answered (`--device-attach-timeout`);
    /// zero: it may not, and a sandbox whose attach does not end in time fails.
    pub device_attach_timeout: Duration,
    /// The OCI hook the claims' CDI devices carry; `None`: no hook, CreateContainer is the
    /// only barrier.
    pub hook: Option<HookConfig>,
}

/// Where the hook is and how it reaches the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookConfig {
    /// The `dranet` executable on the host, as the runtime runs it (`--hook-path`).
    pub path: PathBuf,
    /// The daemon's socket for the hook, a host path.
    pub socket: PathBuf,
    /// Where a finished attach leaves its marker, a host path.
    pub markers: PathBuf,
    /// How long the hook waits for the daemon in all.
    pub timeout: Duration,
}

impl HookConfig {
    /// The hook's arguments, `argv[0]` first, as the CDI spec gives them to the runtime.
    pub fn args(&self) -> Vec<String> {
        vec![
            "dranet".into(),
            "hook".into(),
            "wait".into(),
            format!("--socket={}", self.socket.display()),
            format!("--markers={}", self.markers.display()),
            format!("--timeout={}s", self.timeout.as_secs()),
        ]
    }

    /// Whether `hook` is this one (the container will wait in it).
    pub fn is(&self, hook: &dranet_nri::Hook) -> bool {
        std::path::Path::new(&hook.path) == self.path
            && hook.args.get(1..3) == Some(&["hook".to_string(), "wait".to_string()][..])
    }
}

impl Default for AttachPolicy {
    fn default() -> Self {
        Self {
            nri_request_timeout: DEFAULT_NRI_REQUEST_TIMEOUT,
            device_attach_timeout: DEFAULT_DEVICE_ATTACH_TIMEOUT,
            hook: None,
        }
    }
}

impl AttachPolicy {
    /// How long a hook may wait for its work before it answers: the runtime's timeout less a
    /// margin for the request's and the answer's way on a loaded machine (a quarter of it, at
    /// least 250 ms or half of it, whichever is less): 1.5 s of 2 s, 50 ms of 100 ms.
    pub fn answer_within(&self) -> Duration {
        let t = self.nri_request_timeout;
        t - (t / 4).max((t / 2).min(Duration::from_millis(250)))
    }

    /// How long CreateContainer waits for an attach to end before it refuses the container:
    /// half of [`Self::answer_within`]. A refusal that reaches the runtime after its timeout
    /// has the plugin dropped and the container created without it, so the refusal keeps the
    /// wider margin (a refused container is only retried): 750 ms of 2 s, 25 ms of 100 ms.
    pub fn refuse_within(&self) -> Duration {
        self.answer_within() / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_leaves_the_wider_margin() {
        let mut p = AttachPolicy::default();
        assert_eq!(p.refuse_within(), Duration::from_millis(750));
        p.nri_request_timeout = Duration::from_millis(100);
        assert_eq!(p.refuse_within(), Duration::from_millis(25));
    }

    #[test]
    fn the_answer_leaves_a_margin_under_the_runtime_timeout() {
        let mut p = AttachPolicy::default();
        assert_eq!(p.answer_within(), Duration::from_millis(1500));
        p.nri_request_timeout = Duration::from_millis(100);
        assert_eq!(p.answer_within(), Duration::from_millis(50));
        p.nri_request_timeout = Duration::from_millis(400);
        assert_eq!(p.answer_within(), Duration::from_millis(200));
        p.nri_request_timeout = Duration::from_secs(10);
        assert_eq!(p.answer_within(), Duration::from_millis(7500));
    }

    #[test]
    fn the_hook_is_recognised_by_path_and_verb() {
        let h = HookConfig {
            path: "/opt/dranet/bin/dranet".into(),
            socket: "/var/run/dranet/hook.sock".into(),
            markers: "/var/run/dranet/attached".into(),
            timeout: Duration::from_secs(90),
        };
        let mine = dranet_nri::Hook {
            path: "/opt/dranet/bin/dranet".into(),
            args: h.args(),
        };
        assert!(h.is(&mine));
        assert!(mine.args.contains(&"--timeout=90s".to_string()));
        let other = dranet_nri::Hook {
            path: "/usr/bin/nvidia-ctk".into(),
            args: vec!["nvidia-ctk".into(), "hook".into(), "wait".into()],
        };
        assert!(!h.is(&other));
    }
}
