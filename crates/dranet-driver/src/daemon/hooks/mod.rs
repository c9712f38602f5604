//! The driver as the daemon runs it: every kubelet call and NRI hook timed, counted, logged
//! (one line per claim prepare and per pod attach) and, when it fails, recorded as a Kubernetes
//! Event on the claim or the pod, as upstream does.

mod attach;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use dranet_kubeletplugin::k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use dranet_kubeletplugin::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use dranet_kubeletplugin::{
    ClaimToPrepare, ClaimToUnprepare, Driver, DriverRecords, HandlerError, Prepared, PreparedClaim,
};
use dranet_nri::{Container, ContainerAdjustment, NriPlugin, PodSandbox};
use futures::future::BoxFuture;
use tokio::sync::Notify;

use super::metrics::{DaemonMetrics, FAILED, NOOP, SUCCESS};
use crate::attach::{AttachGate, AttachPolicy};
use crate::{Error, NetworkDriver};

/// Writes one Event; the daemon gives it the kubelet plugin's API client.
pub type EventWriter = Arc<dyn Fn(Event) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// An [`EventWriter`] on a [`dranet_kubeletplugin::KubeApi`].
pub fn event_writer<A: dranet_kubeletplugin::KubeApi + Clone>(api: A) -> EventWriter {
    Arc::new(move |ev: Event| {
        let api = api.clone();
        Box::pin(async move { api.create_event(&ev).await.map_err(|e| e.to_string()) })
    })
}

/// [`NetworkDriver`] with the daemon's instrumentation around it.
pub struct Instrumented {
    driver: Arc<NetworkDriver>,
    metrics: Arc<DaemonMetrics>,
    events: Option<EventWriter>,
    node: String,
    in_flight: AtomicUsize,
    idle: Notify,
    /// Where each pod's attach stands ([`crate::attach`]).
    gate: Arc<AttachGate>,
    policy: AttachPolicy,
    /// Itself, for the attaches that go on after RunPodSandbox answered.
    me: Weak<Instrumented>,
}

impl std::fmt::Debug for Instrumented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instrumented")
            .field("driver", &self.driver)
            .finish_non_exhaustive()
    }
}

/// Counts a hook in flight while it lives.
struct InFlight<'a>(&'a Instrumented);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// [`InFlight`] for work on a task of its own, counted from before the task is spawned.
struct Owned(Arc<Instrumented>);

impl Drop for Owned {
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl Instrumented {
    /// Wraps `driver` with the default [`AttachPolicy`]; `events` records failures as Events,
    /// `node` names the reporter.
    pub fn new(
        driver: Arc<NetworkDriver>,
        metrics: Arc<DaemonMetrics>,
        events: Option<EventWriter>,
        node: impl Into<String>,
    ) -> Arc<Self> {
        Self::with_policy(driver, metrics, events, node, AttachPolicy::default())
    }

    /// [`Instrumented::new`] timing attaches by `policy`.
    pub fn with_policy(
        driver: Arc<NetworkDriver>,
        metrics: Arc<DaemonMetrics>,
        events: Option<EventWriter>,
        node: impl Into<String>,
        policy: AttachPolicy,
    ) -> Arc<Self> {
        metrics.nri_request_timeout(policy.nri_request_timeout);
        Arc::new_cyclic(|me| Self {
            driver,
            metrics,
            events,
            node: node.into(),
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
            gate: Arc::new(AttachGate::new()),
            policy,
            me: me.clone(),
        })
    }

    /// The attach policy in force.
    pub fn policy(&self) -> &AttachPolicy {
        &self.policy
    }

    /// The driver.
    pub fn driver(&self) -> &Arc<NetworkDriver> {
        &self.driver
    }

    fn enter(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self)
    }

    /// Counts work about to be spawned, while the returned guard (moved into the task) lives;
    /// `None` while the daemon drops its hooks.
    fn enter_owned(&self) -> Option<Owned> {
        let me = self.me.upgrade()?;
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Some(Owned(me))
    }

    fn leave(&self) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Waits until no NRI hook is running, for at most `limit`; false if some still were.
    pub async fn wait_idle(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let idle = self.idle.notified();
            if self.in_flight.load(Ordering::Acquire) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.in_flight.load(Ordering::Acquire) == 0;
            }
        }
    }

    /// Records a Warning Event in the background (a hook never waits on the API server).
    fn warn(&self, object: ObjectReference, reason: &'static str, message: String) {
        self.event(object, "Warning", reason, message);
    }

    /// Records an Event of `kind` (`Normal`, `Warning`) in the background.
    fn event(
        &self,
        object: ObjectReference,
        kind: &'static str,
        reason: &'static str,
        message: String,
    ) {
        let Some(w) = self.events.clone() else {
            return;
        };
        let now = Time(dranet_kubeletplugin::k8s_openapi::jiff::Timestamp::now());
        let ev = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", object.name.as_deref().unwrap_or("dranet"))),
                namespace: object.namespace.clone(),
                ..Default::default()
            },
            involved_object: object,
            reason: Some(reason.into()),
            // The API server's limit is 1 KiB.
            message: Some(message.chars().take(1000).collect()),
            type_: Some(kind.into()),
            source: Some(EventSource {
                component: Some("dranet".into()),
                host: Some(self.node.clone()),
            }),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Default::default()
        };
        tokio::spawn(async move {
            if let Err(e) = w(ev).await {
                tracing::warn!(reason, error = %e, "could not record the event");
            }
        });
    }

    fn pod_ref(pod: &PodSandbox) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(pod.namespace.clone()),
            name: Some(pod.name.clone()),
            uid: Some(pod.uid.clone()),
            ..Default::default()
        }
    }

    /// Names of the pod's devices, for the log line.
    fn pod_devices(&self, pod: &PodSandbox) -> (Vec<String>, Vec<String>) {
        let claims = self.driver.claims_of_pod(&pod.uid);
        let names = claims
            .iter()
            .map(|c| format!("{}/{}", c.namespace, c.name))
            .collect();
        let devices = claims
            .iter()
            .flat_map(|c| c.devices.iter().map(|d| d.device.clone()))
            .collect();
        (names, devices)
    }
}

impl Driver for Instrumented {
    async fn prepare(&self, claim: ClaimToPrepare) -> Result<Prepared, HandlerError> {
        let t = Instant::now();
        let who = claim.claim_ref.to_string();
        let devices: Vec<&str> = claim.results.iter().map(|r| r.device.as_str()).collect();
        match self.driver.prepare_claim(&claim).await {
            Ok(p) => {
                tracing::info!(claim = %who, devices = ?devices, duration_ms = ms(t), "claim prepared");
                Ok(p)
            }
            Err(e) => {
                tracing::warn!(claim = %who, devices = ?devices, duration_ms = ms(t), error = %e, "claim prepare failed");
                self.warn(
                    ObjectReference {
                        api_version: Some("resource.k8s.io/v1".into()),
                        kind: Some("ResourceClaim".into()),
                        namespace: Some(claim.claim_ref.namespace.clone()),
                        name: Some(claim.claim_ref.name.clone()),
                        uid: Some(claim.claim_ref.uid.clone()),
                        ..Default::default()
                    },
                    "ClaimPrepareFailed",
                    e.to_string(),
                );
                Err(e.into())
            }
        }
    }

    async fn unprepare(&self, claim: ClaimToUnprepare) -> Result<(), HandlerError> {
        let t = Instant::now();
        let r = self.driver.unprepare_claim(&claim.claim_ref.uid).await;
        tracing::info!(claim = %claim.claim_ref, duration_ms = ms(t), ok = r.is_ok(), "claim unprepared");
        Ok(r?)
    }

    async fn restore_records(&self, records: DriverRecords) {
        self.driver.restore_records(records).await;
    }

    async fn restore_prepared(&self, claims: Vec<PreparedClaim>) {
        let driver = self.driver.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || driver.restore_claims(claims)).await {
            tracing::error!(error = %e, "taking back the prepared claims failed");
        }
    }
}

/// The Event reason of a failed attach, as upstream names them.
fn attach_failure_reason(e: &Error) -> &'static str {
    match e {
        Error::RdmaAttach { .. } => "RDMADeviceAttachFailed",
        e if e.is_slaac_timeout() => "NetworkDeviceNotReady",
        _ => "NetworkDeviceAttachFailed",
    }
}

fn ms(t: Instant) -> f64 {
    (t.elapsed().as_secs_f64() * 1e6).round() / 1e3
}

impl NriPlugin for Instrumented {
    async fn synchronize(
        &self,
        pods: &[PodSandbox],
        _containers: &[Container],
    ) -> Result<(), HandlerError> {
        let _g = self.enter();
        let t = Instant::now();
        // Answered at once: a plugin whose Synchronize passes the runtime's deadline is kept
        // connected by containerd but sent no event again. The work goes on in the background.
        self.synchronize_in_background(pods.to_vec());
        self.metrics
            .nri_request("Synchronize", SUCCESS, t.elapsed());
        Ok(())
    }

    async fn run_pod_sandbox(&self, pod: &PodSandbox) -> Result<(), HandlerError> {
        let _g = self.enter();
        let t = Instant::now();
        let r = self.answer_sandbox(pod).await;
        let status = match &r {
            Ok(false) => NOOP,
            Ok(true) => SUCCESS,
            Err(_) => FAILED,
        };
        self.metrics
            .nri_request("RunPodSandbox", status, t.elapsed());
        r.map(drop).map_err(HandlerError::from)
    }

    async fn stop_pod_sandbox(&self, pod: &PodSandbox) -> Result<(), HandlerError> {
        let _g = self.enter();
        let t = Instant::now();
        // An attach still running is undone when it ends; what it did so far goes back now.
        self.gate
            .expire(&pod.id, format!("pod {} stopped", pod.qualified_name()));
        let has_claims = !self.driver.claims_of_pod(&pod.uid).is_empty();
        self.detach_within_deadline(pod.clone(), false).await;
        let status = if has_claims { SUCCESS } else { NOOP };
        self.metrics
            .nri_request("StopPodSandbox", status, t.elapsed());
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: &PodSandbox) -> Result<(), HandlerError> {
        let _g = self.enter();
        let t = Instant::now();
        self.gate.forget(&pod.id);
        self.remove_marker(&pod.id);
        self.detach_within_deadline(pod.clone(), true).await;
        self.metrics
            .nri_request("RemovePodSandbox", SUCCESS, t.elapsed());
        Ok(())
    }

    async fn create_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<ContainerAdjustment, HandlerError> {
        let _g = self.enter();
        let t = Instant::now();
        let r = match self.container_barrier(pod, container).await {
            Ok(()) => NriPlugin::create_container(&*self.driver, pod, container).await,
            Err(e) => Err(e.into()),
        };
        let status = match &r {
            Err(_) => FAILED,
            Ok(_) if self.driver.claims_of_pod(&pod.uid).is_empty() => NOOP,
            Ok(_) => SUCCESS,
        };
        self.metrics
            .nri_request("CreateContainer", status, t.elapsed());
        r
    }
}
