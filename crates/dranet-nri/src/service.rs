//! The plugin service: decodes the runtime's calls, runs the [`NriPlugin`]'s handlers, encodes answers.
//! Transport-free, so it is tested without sockets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::adjust::ContainerAdjustment;
use crate::error::{Error, Result};
use crate::events::{Event, EventMask};
use crate::plugin::NriPlugin;
use crate::proto::nri as pb;
use crate::ttrpc::{Request, Response, code};
use crate::types::{Container, PodSandbox, RuntimeInfo};

/// ttrpc service name of the plugin service (served by the plugin).
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// ttrpc service name of the runtime service (served by the runtime).
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

/// Per-connection state: a Synchronize split over several calls is collected here.
#[derive(Debug, Default)]
pub(crate) struct ConnState {
    sync: Mutex<(Vec<PodSandbox>, Vec<Container>)>,
}

/// Routes plugin-service calls to a [`NriPlugin`]. Lives as long as the runner, across connections.
pub(crate) struct Dispatcher<P> {
    plugin: Arc<P>,
    events: EventMask,
    /// What the runtime is asked for: `events` plus what the netns cache needs.
    wire_events: EventMask,
    /// Pod id → network namespace path. containerd 1.7 sends no namespaces when a pod stops, so
    /// the path from RunPodSandbox (or Synchronize) is kept to hand to later events.
    netns: Mutex<HashMap<String, String>>,
}

fn decode<M: prost::Message + Default>(what: &'static str, payload: &[u8]) -> Result<M> {
    M::decode(payload).map_err(|source| Error::Decode { what, source })
}

fn ok(msg: impl prost::Message) -> Response {
    Response::Ok(msg.encode_to_vec())
}

/// Most pods and containers one synchronization may carry (a node runs a few hundred pods).
pub(crate) const MAX_SYNC_ITEMS: usize = 100_000;

fn failure(err: &Error) -> Response {
    let code = match err {
        Error::Decode { .. } | Error::InvalidInput(_) | Error::HostDevice { .. } => {
            code::INVALID_ARGUMENT
        }
        _ => code::UNKNOWN,
    };
    Response::Err {
        code,
        message: dranet_util::error_chain(err),
    }
}

fn unimplemented(what: String) -> Response {
    Response::Err {
        code: code::UNIMPLEMENTED,
        message: format!("{what} is not implemented by this plugin"),
    }
}

impl<P: NriPlugin> Dispatcher<P> {
    /// A dispatcher for the plugin's `events` (empty: all). RunPodSandbox and RemovePodSandbox
    /// are always subscribed: the first fills the netns cache, the second frees its entry, so the
    /// cache neither misses paths nor grows with every pod a plugin that skips them ever saw.
    /// The plugin is called only for the events it asked for.
    pub(crate) fn new(plugin: Arc<P>, events: EventMask) -> Self {
        Dispatcher {
            plugin,
            wire_events: if events.is_empty() {
                events
            } else {
                events
                    .with(Event::RunPodSandbox)
                    .with(Event::RemovePodSandbox)
            },
            events,
            netns: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn plugin(&self) -> &Arc<P> {
        &self.plugin
    }

    fn wants(&self, event: Event) -> bool {
        self.events.is_empty() || self.events.contains(event)
    }

    /// Answers one call. Never fails: errors become a ttrpc status for the runtime.
    pub(crate) async fn handle(&self, conn: &ConnState, req: &Request) -> Response {
        if req.service != PLUGIN_SERVICE {
            return unimplemented(format!("service {:?}", req.service));
        }
        match self.dispatch(conn, &req.method, &req.payload).await {
            Ok(Some(resp)) => resp,
            Ok(None) => unimplemented(format!("method {PLUGIN_SERVICE}/{}", req.method)),
            Err(e) => {
                tracing::warn!(method = %req.method, error = %e, "NRI call failed");
                failure(&e)
            }
        }
    }

    async fn dispatch(
        &self,
        conn: &ConnState,
        method: &str,
        payload: &[u8],
    ) -> Result<Option<Response>> {
        let resp = match method {
            "Configure" => {
                let r: pb::ConfigureRequest = decode("ConfigureRequest", payload)?;
                let info = RuntimeInfo {
                    runtime_name: r.runtime_name,
                    runtime_version: r.runtime_version,
                    nri_version: r.nri_version,
                    config: r.config,
                    request_timeout: u64::try_from(r.request_timeout)
                        .ok()
                        .filter(|ms| *ms > 0)
                        .map(std::time::Duration::from_millis),
                };
                tracing::info!(runtime = %info.runtime_name, version = %info.runtime_version, "NRI configure");
                self.plugin.configure(&info).await?;
                // A new connection starts a new synchronization.
                *lock(&conn.sync) = Default::default();
                ok(pb::ConfigureResponse {
                    // The mask has at most 14 bits set, so it fits in i32.
                    events: self.wire_events.bits() as i32,
                })
            }
            "Synchronize" => {
                let r: pb::SynchronizeRequest = decode("SynchronizeRequest", payload)?;
                let (pods, containers) = {
                    let mut buf = lock(&conn.sync);
                    // Pages accumulate until the last one: bound them, so that a runtime (or
                    // anything speaking for one) cannot grow our memory without end.
                    let total = buf.0.len() + buf.1.len() + r.pods.len() + r.containers.len();
                    if total > MAX_SYNC_ITEMS {
                        *buf = Default::default();
                        return Err(Error::InvalidInput(format!(
                            "Synchronize sent more than {MAX_SYNC_ITEMS} pods and containers"
                        )));
                    }
                    buf.0.extend(r.pods.into_iter().map(PodSandbox::from));
                    buf.1.extend(r.containers.into_iter().map(Container::from));
                    if r.more {
                        // Partial page: acknowledge with `more` echoed and no updates, as runtimes
                        // require of plugins that handle split synchronization.
                        return Ok(Some(ok(pb::SynchronizeResponse {
                            update: Vec::new(),
                            more: true,
                        })));
                    }
                    std::mem::take(&mut *buf)
                };
                let pods = self.remember_synced(pods);
                self.plugin.synchronize(&pods, &containers).await?;
                ok(pb::SynchronizeResponse::default())
            }
            "Shutdown" => {
                self.plugin.shutdown().await;
                ok(pb::Empty {})
            }
            "RunPodSandbox"
            | "StopPodSandbox"
            | "RemovePodSandbox"
            | "UpdatePodSandbox"
            | "PostUpdatePodSandbox" => {
                let Some(event) = event_by_name(method) else {
                    return Ok(None);
                };
                let r: pb::PodRequest = decode("pod sandbox request", payload)?;
                self.pod_event(event, r.pod).await?;
                ok(pb::Empty {})
            }
            "CreateContainer" => {
                let r: pb::ContainerRequest = decode("CreateContainerRequest", payload)?;
                let adj = self
                    .container_event(Event::CreateContainer, r.pod, r.container)
                    .await?;
                ok(pb::CreateContainerResponse {
                    adjust: adj.filter(|a| !a.is_empty()).map(|a| (&a).into()),
                    update: Vec::new(),
                    evict: Vec::new(),
                })
            }
            "PostCreateContainer"
            | "StartContainer"
            | "PostStartContainer"
            | "UpdateContainer"
            | "PostUpdateContainer"
            | "StopContainer"
            | "RemoveContainer" => {
                let Some(event) = event_by_name(method) else {
                    return Ok(None);
                };
                let r: pb::ContainerRequest = decode("container request", payload)?;
                self.container_event(event, r.pod, r.container).await?;
                match event {
                    Event::UpdateContainer => ok(pb::UpdateContainerResponse::default()),
                    Event::StopContainer => ok(pb::StopContainerResponse::default()),
                    _ => ok(pb::Empty {}),
                }
            }
            "StateChange" => {
                let r: pb::StateChangeEvent = decode("StateChangeEvent", payload)?;
                let event = Event::from_wire(r.event).ok_or_else(|| {
                    Error::InvalidInput(format!("StateChange with unknown event {}", r.event))
                })?;
                match event {
                    Event::RunPodSandbox
                    | Event::StopPodSandbox
                    | Event::RemovePodSandbox
                    | Event::UpdatePodSandbox
                    | Event::PostUpdatePodSandbox => self.pod_event(event, r.pod).await?,
                    Event::CreateContainer | Event::ValidateContainerAdjustment => {
                        // These need an answer with content, which StateChange cannot carry.
                        return Err(Error::InvalidInput(format!(
                            "{event} cannot be delivered as a StateChange"
                        )));
                    }
                    _ => {
                        self.container_event(event, r.pod, r.container).await?;
                    }
                }
                ok(pb::Empty {})
            }
            "ValidateContainerAdjustment" => {
                // This plugin validates nothing: accept what other plugins asked for.
                ok(pb::ValidateContainerAdjustmentResponse {
                    reject: false,
                    reason: String::new(),
                })
            }
            _ => return Ok(None),
        };
        Ok(Some(resp))
    }

    /// Converts a pod off the wire and keeps the netns cache in step with its lifecycle.
    fn pod_view(&self, event: Event, pod: Option<pb::PodSandbox>) -> Result<PodSandbox> {
        let mut pod = PodSandbox::from(
            pod.ok_or_else(|| Error::InvalidInput(format!("{event} request without a pod")))?,
        );
        let mut cache = lock(&self.netns);
        match (event, pod.netns_path()) {
            (Event::RunPodSandbox, Some(path)) => {
                cache.insert(pod.id.clone(), path.to_owned());
            }
            (_, None) => {
                if let Some(path) = cache.get(&pod.id) {
                    pod.fill_netns(path);
                }
            }
            _ => {}
        }
        if event == Event::RemovePodSandbox {
            cache.remove(&pod.id);
        }
        Ok(pod)
    }

    async fn pod_event(&self, event: Event, pod: Option<pb::PodSandbox>) -> Result<()> {
        let pod = self.pod_view(event, pod)?;
        tracing::debug!(%event, pod = %pod.qualified_name(), netns = ?pod.netns_path(), "NRI pod event");
        if !self.wants(event) {
            // Subscribed only to keep the netns cache in step (see `Dispatcher::new`).
            return Ok(());
        }
        match event {
            Event::RunPodSandbox => self
                .plugin
                .run_pod_sandbox(&pod)
                .await
                .map_err(Error::Handler),
            Event::StopPodSandbox => self
                .plugin
                .stop_pod_sandbox(&pod)
                .await
                .map_err(Error::Handler),
            Event::RemovePodSandbox => self
                .plugin
                .remove_pod_sandbox(&pod)
                .await
                .map_err(Error::Handler),
            Event::UpdatePodSandbox => self
                .plugin
                .update_pod_sandbox(&pod)
                .await
                .map_err(Error::Handler),
            Event::PostUpdatePodSandbox => self
                .plugin
                .post_update_pod_sandbox(&pod)
                .await
                .map_err(Error::Handler),
            other => Err(Error::InvalidInput(format!("{other} is not a pod event"))),
        }
    }

    async fn container_event(
        &self,
        event: Event,
        pod: Option<pb::PodSandbox>,
        container: Option<pb::Container>,
    ) -> Result<Option<ContainerAdjustment>> {
        let pod = self.pod_view(event, pod)?;
        let c =
            Container::from(container.ok_or_else(|| {
                Error::InvalidInput(format!("{event} request without a container"))
            })?);
        tracing::debug!(%event, pod = %pod.qualified_name(), container = %c.name, "NRI container event");
        let p = &self.plugin;
        match event {
            Event::CreateContainer => return Ok(Some(p.create_container(&pod, &c).await?)),
            Event::PostCreateContainer => p.post_create_container(&pod, &c).await?,
            Event::StartContainer => p.start_container(&pod, &c).await?,
            Event::PostStartContainer => p.post_start_container(&pod, &c).await?,
            Event::UpdateContainer => p.update_container(&pod, &c).await?,
            Event::PostUpdateContainer => p.post_update_container(&pod, &c).await?,
            Event::StopContainer => p.stop_container(&pod, &c).await?,
            Event::RemoveContainer => p.remove_container(&pod, &c).await?,
            other => {
                return Err(Error::InvalidInput(format!(
                    "{other} is not a container event"
                )));
            }
        }
        Ok(None)
    }

    /// Replaces the netns cache with the synchronized pods, filling in paths the runtime left out.
    fn remember_synced(&self, mut pods: Vec<PodSandbox>) -> Vec<PodSandbox> {
        let mut cache = lock(&self.netns);
        let mut fresh = HashMap::with_capacity(pods.len());
        for pod in &mut pods {
            if let Some(path) = pod
                .netns_path()
                .map(str::to_owned)
                .or_else(|| cache.get(&pod.id).cloned())
            {
                pod.fill_netns(&path);
                fresh.insert(pod.id.clone(), path);
            }
        }
        *cache = fresh;
        pods
    }
}

fn event_by_name(method: &str) -> Option<Event> {
    Event::ALL.into_iter().find(|e| e.name() == method)
}

/// Locks a mutex whose data stays consistent even if a holder panicked (every critical section
/// here is a plain field update), so poisoning is ignored rather than turned into a panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HandlerError;
    use crate::types::{LinuxDevice, Namespace};
    use prost::Message as _;

    #[derive(Default)]
    struct Recorder {
        seen: Mutex<Vec<(String, Option<String>)>>,
    }

    impl NriPlugin for Recorder {
        async fn run_pod_sandbox(&self, pod: &PodSandbox) -> Result<(), HandlerError> {
            lock(&self.seen).push(("run".into(), pod.netns_path().map(Into::into)));
            Ok(())
        }
        async fn stop_pod_sandbox(&self, pod: &PodSandbox) -> Result<(), HandlerError> {
            lock(&self.seen).push(("stop".into(), pod.netns_path().map(Into::into)));
            Ok(())
        }
        async fn synchronize(
            &self,
            pods: &[PodSandbox],
            c: &[Container],
        ) -> Result<(), HandlerError> {
            lock(&self.seen).push((format!("sync {} {}", pods.len(), c.len()), None));
            Ok(())
        }
        async fn create_container(
            &self,
            _: &PodSandbox,
            c: &Container,
        ) -> Result<ContainerAdjustment, HandlerError> {
            if c.name == "bad" {
                return Err(HandlerError::from("no devices for bad"));
            }
            let mut a = ContainerAdjustment::new();
            a.add_device(LinuxDevice::char("/dev/x", 231, 192))?;
            Ok(a)
        }
    }

    fn pod(id: &str, netns: Option<&str>) -> pb::PodSandbox {
        let mut p = PodSandbox {
            id: id.into(),
            ..Default::default()
        };
        if let Some(n) = netns {
            p.namespaces.push(Namespace {
                kind: "network".into(),
                path: n.into(),
            });
        }
        (&p).into()
    }

    fn call(method: &str, payload: Vec<u8>) -> Request {
        Request {
            service: PLUGIN_SERVICE.into(),
            method: method.into(),
            payload,
            timeout_nano: 0,
        }
    }

    fn state_change(event: Event, p: pb::PodSandbox) -> Request {
        call(
            "StateChange",
            pb::StateChangeEvent {
                event: event as i32,
                pod: Some(p),
                container: None,
            }
            .encode_to_vec(),
        )
    }

    #[tokio::test]
    async fn stop_gets_the_netns_remembered_from_run() {
        let d = Dispatcher::new(Arc::new(Recorder::default()), EventMask::empty());
        let conn = ConnState::default();
        let r = d
            .handle(
                &conn,
                &state_change(Event::RunPodSandbox, pod("p1", Some("/run/netns/x"))),
            )
            .await;
        assert_eq!(r, Response::Ok(Vec::new()));
        d.handle(&conn, &state_change(Event::StopPodSandbox, pod("p1", None)))
            .await;
        // Dedicated-method delivery (NRI v0.12 runtimes) takes the same path.
        let req = call(
            "StopPodSandbox",
            pb::PodRequest {
                pod: Some(pod("p1", None)),
            }
            .encode_to_vec(),
        );
        d.handle(&conn, &req).await;
        d.handle(
            &conn,
            &state_change(Event::RemovePodSandbox, pod("p1", None)),
        )
        .await;
        d.handle(&conn, &state_change(Event::StopPodSandbox, pod("p1", None)))
            .await;
        let seen = lock(&d.plugin.seen).clone();
        let want = |s: &str, n: Option<&str>| (s.to_string(), n.map(String::from));
        assert_eq!(
            seen,
            vec![
                want("run", Some("/run/netns/x")),
                want("stop", Some("/run/netns/x")),
                want("stop", Some("/run/netns/x")),
                want("stop", None),
            ]
        );
    }

    #[tokio::test]
    async fn unknown_service_and_method_are_unimplemented() {
        let d = Dispatcher::new(Arc::new(Recorder::default()), EventMask::empty());
        let conn = ConnState::default();
        let mut req = call("Nope", Vec::new());
        assert!(matches!(
            d.handle(&conn, &req).await,
            Response::Err { code: 12, .. }
        ));
        req.service = "other.Service".into();
        req.method = "Configure".into();
        assert!(matches!(
            d.handle(&conn, &req).await,
            Response::Err { code: 12, .. }
        ));
    }

    #[tokio::test]
    async fn garbage_payload_is_invalid_argument_not_a_panic() {
        let d = Dispatcher::new(Arc::new(Recorder::default()), EventMask::empty());
        let r = d
            .handle(
                &ConnState::default(),
                &call("CreateContainer", vec![0xff, 0xff, 0xff]),
            )
            .await;
        let Response::Err { code, message } = r else {
            panic!("expected an error")
        };
        assert_eq!(code, code::INVALID_ARGUMENT);
        assert!(message.contains("CreateContainerRequest"), "{message}");
        let r = d
            .handle(&ConnState::default(), &call("RunPodSandbox", Vec::new()))
            .await;
        assert!(
            matches!(r, Response::Err { code: 3, ref message } if message.contains("without a pod")),
            "{r:?}"
        );
    }

    #[tokio::test]
    async fn create_container_answers_the_adjustment_or_the_handler_error() {
        let d = Dispatcher::new(Arc::new(Recorder::default()), EventMask::empty());
        let conn = ConnState::default();
        let ctr = |name: &str| pb::Container {
            name: name.into(),
            ..Default::default()
        };
        let req = pb::ContainerRequest {
            pod: Some(pod("p", None)),
            container: Some(ctr("app")),
        };
        let Response::Ok(body) = d
            .handle(&conn, &call("CreateContainer", req.encode_to_vec()))
            .await
        else {
            panic!("expected OK")
        };
        let resp = pb::CreateContainerResponse::decode(body.as_slice()).unwrap();
        let dev = &resp.adjust.unwrap().linux.unwrap().devices[0];
        assert_eq!((dev.major, dev.minor), (231, 192));
        let req = pb::ContainerRequest {
            pod: Some(pod("p", None)),
            container: Some(ctr("bad")),
        };
        let r = d
            .handle(&conn, &call("CreateContainer", req.encode_to_vec()))
            .await;
        assert!(
            matches!(r, Response::Err { code: 2, ref message } if message == "no devices for bad"),
            "{r:?}"
        );
    }

    #[tokio::test]
    async fn split_synchronize_is_collected_before_the_handler_runs() {
        let d = Dispatcher::new(Arc::new(Recorder::default()), EventMask::empty());
        let conn = ConnState::default();
        let page = |id: &str, more: bool| {
            call(
                "Synchronize",
                pb::SynchronizeRequest {
                    pods: vec![pod(id, Some("/n"))],
                    containers: vec![],
                    more,
                }
                .encode_to_vec(),
            )
        };
        let Response::Ok(b) = d.handle(&conn, &page("a", true)).await else {
            panic!()
        };
        assert!(pb::SynchronizeResponse::decode(b.as_slice()).unwrap().more);
        assert!(lock(&d.plugin.seen).is_empty());
        let Response::Ok(b) = d.handle(&conn, &page("b", false)).await else {
            panic!()
        };
        assert!(!pb::SynchronizeResponse::decode(b.as_slice()).unwrap().more);
        assert_eq!(lock(&d.plugin.seen)[0].0, "sync 2 0");
        assert_eq!(lock(&d.netns).len(), 2);
    }

    #[tokio::test]
    async fn the_netns_cache_stays_bounded_for_a_plugin_without_remove() {
        // The documented mask of a network plugin: run and stop, no remove.
        let mask = EventMask::of(&[Event::RunPodSandbox, Event::StopPodSandbox]);
        let d = Dispatcher::new(Arc::new(Recorder::default()), mask);
        let conn = ConnState::default();
        for i in 0..2000 {
            let id = format!("p{i}");
            let path = format!("/run/netns/{id}");
            for (event, netns) in [
                (Event::RunPodSandbox, Some(path.as_str())),
                (Event::StopPodSandbox, None),
                (Event::RemovePodSandbox, None),
            ] {
                let r = d.handle(&conn, &state_change(event, pod(&id, netns))).await;
                assert_eq!(r, Response::Ok(Vec::new()));
            }
            assert!(lock(&d.netns).len() <= 1);
        }
        assert!(lock(&d.netns).is_empty());
        let seen = lock(&d.plugin.seen).clone();
        assert_eq!(seen.len(), 4000, "only run and stop reach the plugin");
        assert!(seen.iter().all(|(e, _)| e == "run" || e == "stop"));
    }

    #[tokio::test]
    async fn synchronize_pages_are_bounded() {
        let d = Dispatcher::new(Arc::new(Recorder::default()), EventMask::empty());
        let conn = ConnState::default();
        let big = |more: bool| {
            call(
                "Synchronize",
                pb::SynchronizeRequest {
                    pods: (0..MAX_SYNC_ITEMS / 4)
                        .map(|i| pod(&format!("p{i}"), None))
                        .collect(),
                    containers: Vec::new(),
                    more,
                }
                .encode_to_vec(),
            )
        };
        for _ in 0..4 {
            assert!(matches!(d.handle(&conn, &big(true)).await, Response::Ok(_)));
        }
        let Response::Err { message, .. } = d.handle(&conn, &big(true)).await else {
            panic!("an unbounded Synchronize was accepted")
        };
        assert!(message.contains("more than 100000"), "{message}");
        assert!(lock(&conn.sync).0.is_empty(), "pages were not dropped");
        assert!(lock(&d.plugin.seen).is_empty());
    }

    #[tokio::test]
    async fn configure_answers_the_event_mask() {
        let mask = EventMask::of(&[Event::RunPodSandbox, Event::CreateContainer]);
        let d = Dispatcher::new(Arc::new(Recorder::default()), mask);
        let req = call(
            "Configure",
            pb::ConfigureRequest {
                runtime_name: "containerd".into(),
                ..Default::default()
            }
            .encode_to_vec(),
        );
        let Response::Ok(b) = d.handle(&ConnState::default(), &req).await else {
            panic!()
        };
        // RemovePodSandbox is added for the netns cache; the plugin is not called for it.
        assert_eq!(
            pb::ConfigureResponse::decode(b.as_slice()).unwrap().events as u32,
            mask.with(Event::RemovePodSandbox).bits()
        );
    }
}
