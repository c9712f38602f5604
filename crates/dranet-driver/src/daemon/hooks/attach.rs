//! RunPodSandbox answered within the runtime's deadline, the rest of the attach in the
//! background, and the barriers a container waits at until it ends ([`crate::attach`]).

use std::time::{Duration, Instant};

use dranet_nri::{Container, Namespace, PodSandbox};

use super::{Instrumented, attach_failure_reason, ms};
use crate::Error;
use crate::attach::runtime::{self, Marker, PodHook};
use crate::attach::{Begun, HookAnswer, HookRequest, Phase, Settled, Ticket, hook};

/// The longest a hook may ask the daemon to wait, whatever it says.
const MAX_HOOK_WAIT: Duration = Duration::from_secs(600);

impl Instrumented {
    /// What RunPodSandbox answers: `Ok(true)` when the pod has devices and they are attached or
    /// still attaching (deferred), `Ok(false)` when it has none, an error when the attach failed
    /// (or, with `--device-attach-timeout=0`, did not end in time).
    pub(super) async fn answer_sandbox(&self, pod: &PodSandbox) -> crate::Result<bool> {
        let phase = self
            .attach_within(pod, self.policy.answer_within(), true)
            .await;
        let has_devices = !self.driver.claims_of_pod(&pod.uid).is_empty();
        match phase {
            Phase::Attached => {
                if has_devices {
                    self.metrics.sandbox_attach("attached");
                }
                Ok(has_devices)
            }
            Phase::Failed(reason) => {
                self.metrics.sandbox_attach("failed");
                Err(self.refusal(pod, &reason))
            }
            Phase::Attaching if self.policy.device_attach_timeout.is_zero() => {
                let reason = self.zero_timeout_reason();
                self.gate.expire(&pod.id, reason.clone());
                self.metrics.sandbox_attach("rejected");
                Err(self.refusal(pod, &reason))
            }
            Phase::Attaching => {
                self.metrics.sandbox_attach("deferred");
                let (_, devices) = self.pod_devices(pod);
                tracing::info!(pod = %pod.qualified_name(), devices = ?devices, "pod devices still attaching past the NRI deadline: the attach goes on, the containers wait for it");
                self.event(
                    Self::pod_ref(pod),
                    "Normal",
                    "NetworkDeviceAttachDeferred",
                    format!(
                        "attaching {} network device(s) takes longer than the runtime's NRI \
                         deadline; the pod's containers start once they are in (at most {:?})",
                        devices.len(),
                        self.policy.device_attach_timeout
                    ),
                );
                Ok(true)
            }
        }
    }

    fn zero_timeout_reason(&self) -> String {
        format!(
            "its network devices were not attached within the runtime's NRI deadline ({:?}) and \
             --device-attach-timeout=0 does not let the attach go on",
            self.policy.nri_request_timeout
        )
    }

    fn refusal(&self, pod: &PodSandbox, reason: &str) -> Error {
        Error::Pod {
            pod: pod.qualified_name(),
            reason: reason.to_string(),
        }
    }

    /// Starts the attach of `pod` unless one runs or ran (`again`: or failed), and waits for
    /// it at most `limit`.
    async fn attach_within(&self, pod: &PodSandbox, limit: Duration, again: bool) -> Phase {
        let begun = if again {
            self.gate.restart(&pod.id)
        } else {
            self.gate.begin(&pod.id)
        };
        if let Begun::Started(ticket) = begun {
            let Some(g) = self.enter_owned() else {
                // Only while the daemon drops its hooks: nothing will attach.
                let _ = self
                    .gate
                    .finish(&pod.id, ticket, Err("the daemon is stopping".into()));
                return Phase::Failed("the daemon is stopping".into());
            };
            let pod = pod.clone();
            tokio::spawn(async move { g.0.run_attach(pod, ticket).await });
        }
        self.gate
            .wait(&pod.id, limit)
            .await
            .unwrap_or(Phase::Failed("the pod's sandbox was removed".into()))
    }

    /// One pod's attach, to its end: bounded by the policy (past it the waiters are told it
    /// timed out and what it did is given back when it ends), logged, counted and, when it
    /// fails, recorded on the pod.
    async fn run_attach(&self, pod: PodSandbox, ticket: Ticket) {
        let t = Instant::now();
        let limit = self.policy.answer_within() + self.policy.device_attach_timeout;
        let attach = self.driver.start_pod(&pod);
        tokio::pin!(attach);
        let r = tokio::select! {
            r = &mut attach => r,
            () = tokio::time::sleep(limit) => {
                let reason = if self.policy.device_attach_timeout.is_zero() {
                    self.zero_timeout_reason()
                } else {
                    format!(
                        "its network devices were not attached within {limit:?} \
                         (--device-attach-timeout)"
                    )
                };
                if self.gate.expire(&pod.id, reason.clone()) {
                    tracing::warn!(pod = %pod.qualified_name(), "{reason}");
                    self.warn(Self::pod_ref(&pod), "NetworkDeviceAttachTimeout", reason);
                }
                // To its end, so that what it did is journaled and can be given back.
                attach.await
            }
        };
        let (claims, devices) = self.pod_devices(&pod);
        let settled = self.gate.finish(
            &pod.id,
            ticket,
            r.as_ref().map(drop).map_err(|e| e.to_string()),
        );
        if claims.is_empty() && r.is_ok() {
            return;
        }
        self.metrics
            .pod_devices("attach", r.is_ok(), t.elapsed(), devices.len());
        match (&r, settled) {
            (Ok(()), Settled::Kept) => {
                tracing::info!(pod = %pod.qualified_name(), claims = ?claims, devices = ?devices, duration_ms = ms(t), "pod devices attached");
                self.write_marker(&pod);
            }
            (Ok(()), Settled::Undo) => {
                tracing::warn!(pod = %pod.qualified_name(), devices = ?devices, duration_ms = ms(t), "pod devices attached too late (the pod timed out or stopped): giving them back");
                self.driver.stop_pod(&pod).await;
            }
            (Err(e), _) => {
                tracing::warn!(pod = %pod.qualified_name(), claims = ?claims, devices = ?devices, duration_ms = ms(t), error = %e, "pod devices attach failed");
                self.warn(Self::pod_ref(&pod), attach_failure_reason(e), e.to_string());
            }
        }
    }

    /// CreateContainer's barrier: a container of a pod whose attach still runs is refused
    /// (the kubelet retries it) unless it carries the hook, which waits instead; one of a pod
    /// whose attach failed is refused with why.
    pub(super) async fn container_barrier(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> crate::Result<()> {
        // A container carrying the hook waits there (with or without this connection).
        let hooked = self
            .policy
            .hook
            .as_ref()
            .is_some_and(|h| container.create_runtime_hooks.iter().any(|x| h.is(x)));
        let phase = match self.gate.phase(&pod.id) {
            Some(Phase::Attaching) if hooked => return Ok(()),
            // It may end within this call's own deadline (less a wide margin: a late refusal
            // lets the container start).
            Some(Phase::Attaching) => self
                .gate
                .wait(&pod.id, self.policy.refuse_within())
                .await
                .unwrap_or(Phase::Attached),
            Some(p) => p,
            // A sandbox whose start this daemon missed (the runtime could not reach it, or
            // dropped it): its attach starts now; the container waits for it in the hook, or
            // within this call's deadline, or is refused until it is done.
            None if self.driver.owes_attach(pod) => {
                tracing::info!(pod = %pod.qualified_name(), "a container of a pod this daemon has not attached: attaching it now");
                let limit = if hooked {
                    Duration::ZERO
                } else {
                    self.policy.refuse_within()
                };
                match self.attach_within(pod, limit, false).await {
                    Phase::Attaching if hooked => return Ok(()),
                    p => p,
                }
            }
            None => return Ok(()),
        };
        match phase {
            Phase::Attached => Ok(()),
            Phase::Failed(reason) => Err(self.refusal(pod, &reason)),
            Phase::Attaching => {
                let (_, devices) = self.pod_devices(pod);
                Err(self.refusal(
                    pod,
                    &format!(
                        "container {} waits for its pod's network devices, still attaching: {}; \
                         the kubelet retries it",
                        container.name,
                        devices.join(", ")
                    ),
                ))
            }
        }
    }

    /// Answers the OCI hook of a starting container: its pod attached (now, if the daemon
    /// missed the pod's RunPodSandbox), failed, or still attaching when the hook's wait ends.
    pub async fn hook_request(&self, req: HookRequest) -> HookAnswer {
        let t = Instant::now();
        let limit = Duration::from_millis(req.wait_ms).min(MAX_HOOK_WAIT);
        let known = self.gate.phase(&req.sandbox_id).is_some();
        let pod_uid = req.pod_uid.clone();
        let phase = if !known && self.marker_exists(&req.sandbox_id) {
            Phase::Attached
        } else {
            let pod = PodSandbox {
                id: req.sandbox_id.clone(),
                uid: req.pod_uid,
                name: req.pod_name,
                namespace: req.pod_namespace,
                namespaces: vec![Namespace {
                    kind: "network".into(),
                    path: req.netns,
                }],
                ..Default::default()
            };
            if !known {
                tracing::info!(pod = %pod.qualified_name(), "a container's hook asked for a pod this daemon has not attached: attaching it now");
            }
            self.attach_within(&pod, limit, false).await
        };
        let (result, answer) = match phase {
            Phase::Attached => (
                "attached",
                HookAnswer {
                    attached: true,
                    reason: String::new(),
                    runtime_hooks: self.runtime_hooks(&pod_uid),
                },
            ),
            Phase::Failed(r) => (
                "failed",
                HookAnswer {
                    attached: false,
                    reason: r.to_string(),
                    runtime_hooks: Vec::new(),
                },
            ),
            Phase::Attaching => (
                "timeout",
                HookAnswer {
                    attached: false,
                    reason: format!(
                        "the pod's network devices are still attaching after {limit:?}"
                    ),
                    runtime_hooks: Vec::new(),
                },
            ),
        };
        self.metrics.hook_wait(result, t.elapsed());
        answer
    }

    /// StopPodSandbox's (or, `remove`, RemovePodSandbox's) work on its own task, waited for
    /// within the runtime's deadline: the runtime gets its answer in time and the detach its
    /// end, whatever becomes of the connection (the pod's namespace is held open until every
    /// link is back, see dranet-podnet).
    pub(super) async fn detach_within_deadline(&self, pod: PodSandbox, remove: bool) {
        let Some(g) = self.enter_owned() else {
            return;
        };
        let task = tokio::spawn(async move {
            let me = &g.0;
            let t = Instant::now();
            let (claims, devices) = me.pod_devices(&pod);
            // The journal, not the claims, knows what the sandbox holds (its claim may be gone
            // or prepared again for another pod): the driver always looks.
            if remove {
                me.driver.remove_pod(&pod).await;
            } else {
                me.driver.stop_pod(&pod).await;
            }
            if !remove && !claims.is_empty() {
                me.metrics
                    .pod_devices("detach", true, t.elapsed(), devices.len());
                tracing::info!(pod = %pod.qualified_name(), claims = ?claims, devices = ?devices, duration_ms = ms(t), "pod devices detached");
            }
        });
        if tokio::time::timeout(self.policy.answer_within(), task)
            .await
            .is_err()
        {
            tracing::info!("a pod's detach goes on past the NRI deadline");
        }
    }

    /// Synchronize's work: what gone sandboxes held comes back to the host, and the live ones
    /// owed an attach get it, each through the gate (as if its RunPodSandbox came now).
    pub(super) fn synchronize_in_background(&self, pods: Vec<PodSandbox>) {
        let Some(g) = self.enter_owned() else {
            return;
        };
        tokio::spawn(async move {
            let me = &g.0;
            let t = Instant::now();
            let owed: Vec<PodSandbox> = match me.driver.settle_gone(&pods).await {
                Ok(owed) => owed.into_iter().cloned().collect(),
                Err(e) => {
                    tracing::error!(error = %e, "synchronizing with the runtime failed; the next reconnection tries again");
                    return;
                }
            };
            me.metrics.restores_owed(me.driver.restores_owed());
            for pod in &owed {
                tracing::info!(pod = %pod.qualified_name(), "pod started while the runtime could not reach this plugin: attaching its devices now");
                let _ = me.attach_within(pod, Duration::ZERO, true).await;
            }
            me.prune_markers(&pods);
            tracing::info!(
                pods = pods.len(),
                owed = owed.len(),
                duration_ms = ms(t),
                "synchronized with the runtime"
            );
        });
    }

    /// The marker of `sandbox`, when the hook is on.
    fn marker(&self, sandbox: &str) -> Option<std::path::PathBuf> {
        let h = self.policy.hook.as_ref()?;
        hook::marker(&h.markers, sandbox)
    }

    fn marker_exists(&self, sandbox: &str) -> bool {
        self.marker(sandbox).is_some_and(|m| m.exists())
    }

    /// The provider's runtime hooks of the pod `pod_uid`: those its prepared claims' devices
    /// were given, each once with the devices it was given for.
    fn runtime_hooks(&self, pod_uid: &str) -> Vec<PodHook> {
        let claims = self.driver.claims_of_pod(pod_uid);
        runtime::pod_hooks(claims.iter().flat_map(|c| {
            let name = format!("{}/{}", c.namespace, c.name);
            c.devices
                .iter()
                .filter_map(move |d| d.hook_for_pod(&name, &c.uid))
        }))
    }

    /// Leaves the marker the hooks of later containers find without asking: with the pod's
    /// runtime hooks, which its first container runs whether or not the daemon answers then.
    fn write_marker(&self, pod: &PodSandbox) {
        let Some(m) = self.marker(&pod.id) else {
            return;
        };
        let marker = Marker {
            runtime_hooks: self.runtime_hooks(&pod.uid),
        };
        if let Err(e) = dranet_util::AtomicWrite::new(&m).write(&marker.to_bytes()) {
            // The hook asks the daemon instead.
            tracing::warn!(marker = %m.display(), error = %e, "could not leave the attach marker");
        }
    }

    pub(super) fn remove_marker(&self, sandbox: &str) {
        if let Some(m) = self.marker(sandbox) {
            let _ = std::fs::remove_file(runtime::done_marker(&m));
            let _ = std::fs::remove_file(m);
        }
    }

    /// Removes the markers of sandboxes the runtime no longer has.
    pub(super) fn prune_markers(&self, live: &[PodSandbox]) {
        let Some(h) = &self.policy.hook else {
            return;
        };
        let Ok(dir) = std::fs::read_dir(&h.markers) else {
            return;
        };
        for e in dir.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let sandbox = name.strip_suffix(runtime::DONE_SUFFIX).unwrap_or(&name);
            if !live.iter().any(|p| sandbox == p.id.as_str()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}
