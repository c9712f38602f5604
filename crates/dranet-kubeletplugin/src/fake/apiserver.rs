//! The fake API server.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio::task::{JoinHandle, JoinSet};

use crate::api::KubeClient;
use crate::error::{Error, Result};

/// How many watch events are kept for watches that start from an older resourceVersion.
const HISTORY: usize = 1000;

/// Writes the fake accepted, by verb.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteCounts {
    /// Successful creates.
    pub creates: usize,
    /// Successful updates.
    pub updates: usize,
    /// Successful deletes.
    pub deletes: usize,
}

impl WriteCounts {
    /// All writes.
    pub fn total(&self) -> usize {
        self.creates + self.updates + self.deletes
    }
}

#[derive(Clone)]
struct Event {
    rv: u64,
    kind: &'static str,
    object: Value,
}

struct Fault {
    method: Method,
    code: u16,
    remaining: usize,
}

#[derive(Default)]
struct State {
    rv: u64,
    slices: BTreeMap<String, ResourceSlice>,
    claims: HashMap<(String, String), ResourceClaim>,
    nodes: HashMap<String, Node>,
    history: VecDeque<Event>,
    counts: WriteCounts,
    field_managers: Vec<String>,
    faults: Vec<Fault>,
    down: bool,
    claim_delay: Duration,
    uid_seq: u64,
    /// Feature gates turned on (see [`FakeApiServer::enable_feature_gate`]).
    feature_gates: std::collections::HashSet<String>,
    /// Which field manager applied which `status.devices` entries of a claim (server-side apply
    /// ownership: a manager's later apply removes its entries it leaves out).
    status_owners: HashMap<(String, String), HashMap<String, Vec<DeviceKey>>>,
}

/// `status.devices` is a map list keyed by driver, pool, device and shareID.
type DeviceKey = (String, String, String, Option<String>);

struct Shared {
    state: Mutex<State>,
    events: broadcast::Sender<Event>,
    /// Node watch events: ADDED/MODIFIED/DELETED and the Node.
    node_events: broadcast::Sender<(&'static str, Node)>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An in-process API server for tests; see the [module docs](crate::fake). Stops when dropped.
pub struct FakeApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for FakeApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApiServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeApiServer {
    /// Starts serving on a free port of 127.0.0.1.
    pub async fn start() -> Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| Error::io("bind fake API server", "127.0.0.1:0", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("fake API server address", "127.0.0.1", e))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                rv: 1,
                ..State::default()
            }),
            events: broadcast::channel(1024).0,
            node_events: broadcast::channel(64).0,
        });
        let s = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            // Connections live in the set, so stopping the server also ends open watches.
            let mut conns = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let s = Arc::clone(&s);
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let s = Arc::clone(&s);
                        async move { Ok::<_, Infallible>(handle(&s, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(Self { addr, shared, task })
    }

    /// The base URL, e.g. `http://127.0.0.1:34567`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A [`KubeClient`] for this server (set its field manager with
    /// [`KubeClient::field_manager`]). Must be called inside a Tokio runtime.
    pub fn client(&self) -> Result<KubeClient> {
        KubeClient::for_url(&self.url())
    }

    /// Adds a Node and returns its UID.
    pub fn add_node(&self, name: &str) -> String {
        let mut st = self.shared.lock();
        let uid = next_uid(&mut st, "node");
        let rv = bump(&mut st);
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid.clone()),
                resource_version: Some(rv.to_string()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        let kind = if st.nodes.contains_key(name) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        st.nodes.insert(name.into(), node.clone());
        let _ = self.shared.node_events.send((kind, node));
        uid
    }

    /// Deletes a Node (the kubelet re-creates it only when it restarts).
    pub fn delete_node(&self, name: &str) {
        let mut st = self.shared.lock();
        if let Some(node) = st.nodes.remove(name) {
            let _ = self.shared.node_events.send(("DELETED", node));
        }
    }

    /// Stores a ResourceClaim as given (set its UID and status yourself); replaces one of the
    /// same namespace/name.
    pub fn put_claim(&self, mut claim: ResourceClaim) {
        let mut st = self.shared.lock();
        let rv = bump(&mut st);
        claim.metadata.resource_version = Some(rv.to_string());
        let key = (
            claim.metadata.namespace.clone().unwrap_or_default(),
            claim.metadata.name.clone().unwrap_or_default(),
        );
        st.claims.insert(key, claim);
    }

    /// The stored ResourceClaim, with the status drivers applied.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<ResourceClaim> {
        self.shared
            .lock()
            .claims
            .get(&(namespace.into(), name.into()))
            .cloned()
    }

    /// Removes a ResourceClaim.
    pub fn delete_claim(&self, namespace: &str, name: &str) {
        self.shared
            .lock()
            .claims
            .remove(&(namespace.into(), name.into()));
    }

    /// Makes every ResourceClaim read take this long (to widen race windows in tests).
    pub fn set_claim_delay(&self, delay: Duration) {
        self.shared.lock().claim_delay = delay;
    }

    /// The ResourceSlices stored, by name.
    pub fn slices(&self) -> Vec<ResourceSlice> {
        self.shared.lock().slices.values().cloned().collect()
    }

    /// Writes a slice as another client would (bumping its resourceVersion, emitting a watch
    /// event), e.g. to simulate drift or a concurrent writer. Not counted in [`Self::write_counts`].
    pub fn put_slice_externally(&self, mut slice: ResourceSlice) {
        let mut st = self.shared.lock();
        let rv = bump(&mut st);
        let name = slice.metadata.name.clone().unwrap_or_default();
        let existed = st.slices.contains_key(&name);
        if slice.metadata.uid.is_none() {
            slice.metadata.uid = Some(next_uid(&mut st, "slice"));
        }
        slice.metadata.resource_version = Some(rv.to_string());
        st.slices.insert(name, slice.clone());
        let kind = if existed { "MODIFIED" } else { "ADDED" };
        emit(&self.shared, &mut st, kind, &slice);
    }

    /// Deletes a slice as another client would.
    pub fn delete_slice_externally(&self, name: &str) {
        let mut st = self.shared.lock();
        if let Some(mut slice) = st.slices.remove(name) {
            let rv = bump(&mut st);
            slice.metadata.resource_version = Some(rv.to_string());
            emit(&self.shared, &mut st, "DELETED", &slice);
        }
    }

    /// Successful writes so far.
    pub fn write_counts(&self) -> WriteCounts {
        self.shared.lock().counts
    }

    /// The `fieldManager` of every write, in order.
    pub fn field_managers(&self) -> Vec<String> {
        self.shared.lock().field_managers.clone()
    }

    /// Answers the next `count` requests with `method` (GET, POST, PUT, DELETE) with HTTP `code`
    /// and a Status body, before looking at them.
    pub fn fail_next(&self, method: &str, code: u16, count: usize) {
        let method = Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET);
        self.shared.lock().faults.push(Fault {
            method,
            code,
            remaining: count,
        });
    }

    /// Turns on an API server feature gate (e.g. `DRADeviceTaints`). Like a v1.34 kube-apiserver
    /// with its default gates, the fake silently drops the ResourceSlice fields of the alpha
    /// features that are off: device `taints` (`DRADeviceTaints`); `bindsToNode`,
    /// `bindingConditions`, `bindingFailureConditions` (`DRADeviceBindingConditions`);
    /// `allowMultipleAllocations` and capacity `requestPolicy` (`DRAConsumableCapacity`);
    /// `sharedCounters`, `consumesCounters`, per-device `nodeName`/`nodeSelector`/`allNodes` and
    /// `perDeviceNodeSelection` (`DRAPartitionableDevices`).
    pub fn enable_feature_gate(&self, gate: &str) {
        self.shared.lock().feature_gates.insert(gate.to_string());
    }

    /// While down, every request gets 503.
    pub fn set_down(&self, down: bool) {
        self.shared.lock().down = down;
    }
}

fn bump(st: &mut State) -> u64 {
    st.rv += 1;
    st.rv
}

fn next_uid(st: &mut State, what: &str) -> String {
    st.uid_seq += 1;
    format!("{what}-uid-{:08}", st.uid_seq)
}

fn emit(shared: &Shared, st: &mut State, kind: &'static str, slice: &ResourceSlice) {
    let ev = Event {
        rv: st.rv,
        kind,
        object: serde_json::to_value(slice).unwrap_or(Value::Null),
    };
    st.history.push_back(ev.clone());
    while st.history.len() > HISTORY {
        st.history.pop_front();
    }
    // No receiver is fine: nobody watches.
    let _ = shared.events.send(ev);
}

type Body = BoxBody<Bytes, Infallible>;

fn full(bytes: Vec<u8>) -> Body {
    Full::new(Bytes::from(bytes)).boxed()
}

fn json_response(code: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(full(serde_json::to_vec(v).unwrap_or_default()));
    *r.status_mut() = code;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn status(code: u16, reason: &str, message: impl Into<String>) -> Response<Body> {
    let v = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message.into(), "reason": reason, "code": code,
    });
    json_response(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &v,
    )
}

/// The object as JSON, or the API server's 404 Status naming it.
fn found_or_404<T: serde::Serialize>(
    obj: Option<&T>,
    resource: &str,
    name: &str,
) -> Response<Body> {
    match obj {
        Some(o) => json_response(
            StatusCode::OK,
            &serde_json::to_value(o).unwrap_or(Value::Null),
        ),
        None => not_found(resource, name),
    }
}

fn not_found(resource: &str, name: &str) -> Response<Body> {
    status(404, "NotFound", format!("{resource} \"{name}\" not found"))
}

fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    }
}

fn query(req: &Request<Incoming>) -> HashMap<String, String> {
    req.uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), percent_decode(v)))
        .collect()
}

fn percent_decode(s: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let decoded = match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => Some(hi * 16 + lo),
            _ => None,
        };
        match decoded {
            Some(v) => {
                out.push(v);
                i += 3;
            }
            None => {
                out.push(if b[i] == b'+' { b' ' } else { b[i] });
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `spec.nodeName=a,spec.driver=b` as (field, value) pairs; unsupported fields are an error, as on
/// the real server.
fn parse_selector(sel: Option<&String>) -> std::result::Result<Vec<(String, String)>, String> {
    let Some(sel) = sel.filter(|s| !s.is_empty()) else {
        return Ok(Vec::new());
    };
    sel.split(',')
        .map(|term| {
            let (k, v) = term
                .split_once('=')
                .ok_or_else(|| format!("invalid field selector term {term:?}"))?;
            let k = k.trim_end_matches('=');
            match k {
                "spec.nodeName" | "spec.driver" | "spec.pool.name" | "metadata.name" => {
                    Ok((k.to_string(), v.to_string()))
                }
                _ => Err(format!("field label not supported: {k}")),
            }
        })
        .collect()
}

fn selected(slice: &ResourceSlice, sel: &[(String, String)]) -> bool {
    sel.iter().all(|(k, v)| {
        let actual = match k.as_str() {
            "spec.nodeName" => slice.spec.node_name.clone().unwrap_or_default(),
            "spec.driver" => slice.spec.driver.clone(),
            "spec.pool.name" => slice.spec.pool.name.clone(),
            _ => slice.metadata.name.clone().unwrap_or_default(),
        };
        &actual == v
    })
}

/// Like the real server, list items carry no apiVersion/kind.
fn list_item(slice: &ResourceSlice) -> Value {
    let mut v = serde_json::to_value(slice).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.remove("apiVersion");
        o.remove("kind");
    }
    v
}

/// What the real server does to a slice before storing it: fields of feature gates that are off
/// are dropped, quantities are made canonical, empty lists and maps are dropped (Go's
/// `omitempty`), and taints without `timeAdded` get the current time. An unparsable quantity is
/// an error, as it is for the real server's decoder.
fn as_stored(
    slice: &mut ResourceSlice,
    gates: &std::collections::HashSet<String>,
) -> std::result::Result<(), String> {
    let on = |g: &str| gates.contains(g);
    let canonical = |q: &mut k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
        dranet_core::Quantity::canonical(&q.0)
            .map(std::borrow::Cow::into_owned)
            .map(|c| q.0 = c)
            .map_err(|_| format!("quantities must match the regular expression: {:?}", q.0))
    };
    if !on("DRAPartitionableDevices") {
        slice.spec.shared_counters = None;
        slice.spec.per_device_node_selection = None;
    }
    for set in slice.spec.shared_counters.iter_mut().flatten() {
        for c in set.counters.values_mut() {
            canonical(&mut c.value)?;
        }
    }
    for d in slice.spec.devices.iter_mut().flatten() {
        if !on("DRADeviceTaints") {
            d.taints = None;
        }
        if !on("DRADeviceBindingConditions") {
            d.binds_to_node = None;
            d.binding_conditions = None;
            d.binding_failure_conditions = None;
        }
        if !on("DRAConsumableCapacity") {
            d.allow_multiple_allocations = None;
            for c in d.capacity.iter_mut().flat_map(|m| m.values_mut()) {
                c.request_policy = None;
            }
        }
        if !on("DRAPartitionableDevices") {
            d.consumes_counters = None;
            d.node_name = None;
            d.node_selector = None;
            d.all_nodes = None;
        }
        for c in d.capacity.iter_mut().flat_map(|m| m.values_mut()) {
            canonical(&mut c.value)?;
        }
        for cc in d.consumes_counters.iter_mut().flatten() {
            for c in cc.counters.values_mut() {
                canonical(&mut c.value)?;
            }
        }
    }
    as_stored_shape(slice);
    Ok(())
}

fn as_stored_shape(slice: &mut ResourceSlice) {
    fn prune(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.values_mut().for_each(prune);
                m.retain(|_, x| match x {
                    Value::Array(a) => !a.is_empty(),
                    Value::Object(o) => !o.is_empty(),
                    _ => true,
                });
            }
            Value::Array(a) => a.iter_mut().for_each(prune),
            _ => {}
        }
    }
    for d in slice.spec.devices.iter_mut().flatten() {
        if let Ok(mut v) = serde_json::to_value(&*d) {
            prune(&mut v);
            if let Ok(pruned) = serde_json::from_value(v) {
                *d = pruned;
            }
        }
        for t in d.taints.iter_mut().flatten() {
            if t.time_added.is_none() {
                t.time_added = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                ));
            }
        }
    }
}

/// What the real server validates and the plugin could get wrong.
fn validate(slice: &ResourceSlice) -> std::result::Result<(), String> {
    let s = &slice.spec;
    let devices = s.devices.as_deref().unwrap_or_default();
    if devices.len() > crate::publisher::MAX_DEVICES_PER_SLICE {
        return Err(format!(
            "spec.devices: Too many: {}: must have at most 128 items",
            devices.len()
        ));
    }
    if s.driver.is_empty() {
        return Err("spec.driver: Required value".into());
    }
    if s.pool.name.is_empty() {
        return Err("spec.pool.name: Required value".into());
    }
    if s.pool.resource_slice_count < 1 {
        return Err(
            "spec.pool.resourceSliceCount: Invalid value: must be greater than zero".into(),
        );
    }
    if s.pool.generation < 0 {
        return Err(
            "spec.pool.generation: Invalid value: must be greater than or equal to 0".into(),
        );
    }
    let node_set = s.node_name.as_deref().is_some_and(|n| !n.is_empty());
    if !node_set
        && s.node_selector.is_none()
        && s.all_nodes != Some(true)
        && s.per_device_node_selection != Some(true)
    {
        return Err("spec: Required value: exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection".into());
    }
    let mut names = std::collections::HashSet::new();
    for d in devices {
        if !names.insert(d.name.as_str()) {
            return Err(format!("spec.devices: Duplicate value: {:?}", d.name));
        }
    }
    let name = slice.metadata.name.as_deref().unwrap_or_default();
    if name.len() > 253 {
        return Err("metadata.name: must be no more than 253 characters".into());
    }
    Ok(())
}

async fn handle(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    {
        let mut st = shared.lock();
        if st.down {
            return status(503, "ServiceUnavailable", "the fake API server is down");
        }
        if let Some(f) = st
            .faults
            .iter_mut()
            .find(|f| f.method == method && f.remaining > 0)
        {
            f.remaining -= 1;
            let code = f.code;
            st.faults.retain(|f| f.remaining > 0);
            return status(code, reason_for(code), format!("injected failure {code}"));
        }
    }
    let path = req.uri().path().to_string();
    let q = query(&req);
    let content_type = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return status(400, "BadRequest", format!("reading body: {e}")),
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (&method, parts.as_slice()) {
        (&Method::GET, ["api", "v1", "nodes"])
            if q.get("watch").is_some_and(|w| w == "true" || w == "1") =>
        {
            let Some(name) = q
                .get("fieldSelector")
                .and_then(|f| f.strip_prefix("metadata.name="))
                .map(str::to_string)
            else {
                return status(
                    400,
                    "BadRequest",
                    "the fake serves Node watches by metadata.name only",
                );
            };
            // Subscribe before reading the current state: nothing can fall between them.
            let rx = shared.node_events.subscribe();
            let current = shared.lock().nodes.get(&name).cloned();
            let line = |kind: &str, n: &Node| {
                let mut bytes =
                    serde_json::to_vec(&json!({"type": kind, "object": n})).unwrap_or_default();
                bytes.push(b'\n');
                Ok::<_, Infallible>(Frame::data(Bytes::from(bytes)))
            };
            let first: Vec<_> = current.iter().map(|n| line("ADDED", n)).collect();
            let live = tokio_stream::wrappers::BroadcastStream::new(rx).filter_map(move |r| {
                let out = r
                    .ok()
                    .filter(|(_, n)| n.metadata.name.as_deref() == Some(name.as_str()))
                    .map(|(kind, n)| line(kind, &n));
                async move { out }
            });
            let stream = futures::stream::iter(first).chain(live);
            let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            r
        }
        (&Method::GET, ["api", "v1", "nodes", name]) => {
            let st = shared.lock();
            match st.nodes.get(*name) {
                Some(n) => json_response(
                    StatusCode::OK,
                    &serde_json::to_value(n).unwrap_or(Value::Null),
                ),
                None => status(404, "NotFound", format!("nodes \"{name}\" not found")),
            }
        }
        (
            &Method::GET,
            [
                "apis",
                "resource.k8s.io",
                "v1",
                "namespaces",
                ns,
                "resourceclaims",
                name,
            ],
        ) => {
            let delay = shared.lock().claim_delay;
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let st = shared.lock();
            found_or_404(
                st.claims.get(&(ns.to_string(), name.to_string())),
                "resourceclaims.resource.k8s.io",
                name,
            )
        }
        (
            &Method::PATCH,
            [
                "apis",
                "resource.k8s.io",
                "v1",
                "namespaces",
                ns,
                "resourceclaims",
                name,
                "status",
            ],
        ) => apply_claim_status(shared, ns, name, &q, &content_type, &body),
        (&Method::GET, ["apis", "resource.k8s.io", "v1", "resourceslices"]) => {
            let sel = match parse_selector(q.get("fieldSelector")) {
                Ok(s) => s,
                Err(e) => return status(400, "BadRequest", e),
            };
            if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
                return watch(shared, &q, sel);
            }
            let st = shared.lock();
            let items: Vec<Value> = st
                .slices
                .values()
                .filter(|s| selected(s, &sel))
                .map(list_item)
                .collect();
            json_response(
                StatusCode::OK,
                &json!({
                    "kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1",
                    "metadata": {"resourceVersion": st.rv.to_string()}, "items": items,
                }),
            )
        }
        (&Method::GET, ["apis", "resource.k8s.io", "v1", "resourceslices", name]) => {
            let st = shared.lock();
            found_or_404(st.slices.get(*name), "resourceslices.resource.k8s.io", name)
        }
        (&Method::POST, ["apis", "resource.k8s.io", "v1", "resourceslices"]) => {
            let mut slice: ResourceSlice = match serde_json::from_slice(&body) {
                Ok(s) => s,
                Err(e) => return status(400, "BadRequest", format!("decoding ResourceSlice: {e}")),
            };
            if slice
                .metadata
                .resource_version
                .as_deref()
                .is_some_and(|v| !v.is_empty())
            {
                return status(
                    400,
                    "BadRequest",
                    "resourceVersion should not be set on objects to be created",
                );
            }
            let gates = shared.lock().feature_gates.clone();
            if let Err(e) = as_stored(&mut slice, &gates) {
                return status(400, "BadRequest", e);
            }
            if let Err(e) = validate(&slice) {
                return status(422, "Invalid", format!("ResourceSlice is invalid: {e}"));
            }
            let mut st = shared.lock();
            let name = match (
                slice.metadata.name.clone(),
                slice.metadata.generate_name.clone(),
            ) {
                (Some(n), _) if !n.is_empty() => n,
                (_, Some(prefix)) => format!("{prefix}{:05}", st.uid_seq + 1),
                _ => return status(422, "Invalid", "metadata.name: Required value"),
            };
            if st.slices.contains_key(&name) {
                return status(
                    409,
                    "AlreadyExists",
                    format!("resourceslices.resource.k8s.io \"{name}\" already exists"),
                );
            }
            let rv = bump(&mut st);
            slice.metadata.name = Some(name.clone());
            slice.metadata.uid = Some(next_uid(&mut st, "slice"));
            slice.metadata.resource_version = Some(rv.to_string());
            slice.metadata.generation = Some(1);
            if let Some(m) = q.get("fieldManager") {
                st.field_managers.push(m.clone());
            }
            st.slices.insert(name, slice.clone());
            st.counts.creates += 1;
            emit(shared, &mut st, "ADDED", &slice);
            json_response(
                StatusCode::CREATED,
                &serde_json::to_value(&slice).unwrap_or(Value::Null),
            )
        }
        (&Method::PUT, ["apis", "resource.k8s.io", "v1", "resourceslices", name]) => {
            let mut slice: ResourceSlice = match serde_json::from_slice(&body) {
                Ok(s) => s,
                Err(e) => return status(400, "BadRequest", format!("decoding ResourceSlice: {e}")),
            };
            if slice.metadata.name.as_deref() != Some(*name) {
                return status(
                    400,
                    "BadRequest",
                    "the name of the object does not match the name on the URL",
                );
            }
            let gates = shared.lock().feature_gates.clone();
            if let Err(e) = as_stored(&mut slice, &gates) {
                return status(400, "BadRequest", e);
            }
            if let Err(e) = validate(&slice) {
                return status(
                    422,
                    "Invalid",
                    format!("ResourceSlice {name} is invalid: {e}"),
                );
            }
            let mut st = shared.lock();
            let Some(current) = st.slices.get(*name).cloned() else {
                return not_found("resourceslices.resource.k8s.io", name);
            };
            let Some(rv) = slice
                .metadata
                .resource_version
                .clone()
                .filter(|v| !v.is_empty())
            else {
                return status(
                    422,
                    "Invalid",
                    "metadata.resourceVersion: Invalid value: 0: must be specified for an update",
                );
            };
            if Some(&rv) != current.metadata.resource_version.as_ref() {
                return status(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on resourceslices.resource.k8s.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                    ),
                );
            }
            let new_rv = bump(&mut st);
            slice.metadata.uid = current.metadata.uid.clone();
            slice.metadata.resource_version = Some(new_rv.to_string());
            slice.metadata.generation = Some(current.metadata.generation.unwrap_or(1) + 1);
            if let Some(m) = q.get("fieldManager") {
                st.field_managers.push(m.clone());
            }
            st.slices.insert(name.to_string(), slice.clone());
            st.counts.updates += 1;
            emit(shared, &mut st, "MODIFIED", &slice);
            json_response(
                StatusCode::OK,
                &serde_json::to_value(&slice).unwrap_or(Value::Null),
            )
        }
        (&Method::DELETE, ["apis", "resource.k8s.io", "v1", "resourceslices", name]) => {
            let opts: Value = if body.is_empty() {
                Value::Null
            } else {
                match serde_json::from_slice(&body) {
                    Ok(v) => v,
                    Err(e) => {
                        return status(400, "BadRequest", format!("decoding DeleteOptions: {e}"));
                    }
                }
            };
            let mut st = shared.lock();
            let Some(current) = st.slices.get(*name).cloned() else {
                return not_found("resourceslices.resource.k8s.io", name);
            };
            let pre = &opts["preconditions"];
            if let Some(uid) = pre["uid"].as_str()
                && Some(uid) != current.metadata.uid.as_deref()
            {
                return status(
                    409,
                    "Conflict",
                    format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        current.metadata.uid.clone().unwrap_or_default()
                    ),
                );
            }
            if let Some(rv) = pre["resourceVersion"].as_str()
                && Some(rv) != current.metadata.resource_version.as_deref()
            {
                return status(
                    409,
                    "Conflict",
                    format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        current
                            .metadata
                            .resource_version
                            .clone()
                            .unwrap_or_default()
                    ),
                );
            }
            st.slices.remove(*name);
            let rv = bump(&mut st);
            let mut gone = current;
            gone.metadata.resource_version = Some(rv.to_string());
            st.counts.deletes += 1;
            emit(shared, &mut st, "DELETED", &gone);
            json_response(
                StatusCode::OK,
                &serde_json::to_value(&gone).unwrap_or(Value::Null),
            )
        }
        _ => status(
            404,
            "NotFound",
            format!("the fake API server does not serve {method} {path}"),
        ),
    }
}

/// Server-side apply of a claim's `status.devices`, checked as the real API server checks it:
/// apply needs a field manager, each entry must name an allocated device, conditions need type,
/// status, a CamelCase reason and lastTransitionTime (at most 8), networkData limits its fields
/// and its IPs must be addresses in CIDR form.
fn apply_claim_status(
    shared: &Shared,
    ns: &str,
    name: &str,
    q: &HashMap<String, String>,
    content_type: &str,
    body: &[u8],
) -> Response<Body> {
    if content_type != "application/apply-patch+yaml" {
        return status(
            415,
            "UnsupportedMediaType",
            format!("the fake serves only server-side apply on status, not {content_type:?}"),
        );
    }
    let Some(manager) = q.get("fieldManager").filter(|m| !m.is_empty()) else {
        return status(
            400,
            "BadRequest",
            "PATCH with apply requires fieldManager to be set",
        );
    };
    let force = q.get("force").is_some_and(|f| f == "true");
    let patch: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return status(400, "BadRequest", format!("decoding apply patch: {e}")),
    };
    if patch["apiVersion"] != "resource.k8s.io/v1" || patch["kind"] != "ResourceClaim" {
        return status(
            400,
            "BadRequest",
            "apply patch needs apiVersion resource.k8s.io/v1 and kind ResourceClaim",
        );
    }
    let entries: Vec<k8s_openapi::api::resource::v1::AllocatedDeviceStatus> =
        match serde_json::from_value(patch["status"]["devices"].clone()) {
            Ok(d) => d,
            Err(e) => return status(400, "BadRequest", format!("status.devices: {e}")),
        };
    let mut st = shared.lock();
    let key = (ns.to_string(), name.to_string());
    let Some(claim) = st.claims.get(&key).cloned() else {
        return not_found("resourceclaims.resource.k8s.io", name);
    };
    let allocated: Vec<DeviceKey> = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .map(|d| {
            d.results
                .iter()
                .flatten()
                .map(|r| {
                    (
                        r.driver.clone(),
                        r.pool.clone(),
                        r.device.clone(),
                        r.share_id.clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut keys = Vec::new();
    for (i, d) in entries.iter().enumerate() {
        let k: DeviceKey = (
            d.driver.clone(),
            d.pool.clone(),
            d.device.clone(),
            d.share_id.clone(),
        );
        if let Err(msg) = check_device_status(d, &allocated, &k) {
            return status(
                422,
                "Invalid",
                format!(
                    "ResourceClaim.resource.k8s.io \"{name}\" is invalid: status.devices[{i}]{msg}"
                ),
            );
        }
        keys.push(k);
    }
    let owners = st.status_owners.entry(key.clone()).or_default();
    if !force {
        for k in &keys {
            if owners.iter().any(|(m, ks)| m != manager && ks.contains(k)) {
                return status(
                    409,
                    "Conflict",
                    format!(
                        "Apply failed with 1 conflict: conflict with another manager over status.devices {k:?}"
                    ),
                );
            }
        }
    }
    let dropped: Vec<DeviceKey> = owners
        .get(manager)
        .map(|old| old.iter().filter(|k| !keys.contains(k)).cloned().collect())
        .unwrap_or_default();
    for (m, ks) in owners.iter_mut() {
        if m != manager {
            ks.retain(|k| !keys.contains(k));
        }
    }
    owners.insert(manager.clone(), keys.clone());
    let mut claim = claim;
    let status_obj = claim.status.get_or_insert_with(Default::default);
    let devices = status_obj.devices.get_or_insert_with(Vec::new);
    let key_of = |d: &k8s_openapi::api::resource::v1::AllocatedDeviceStatus| -> DeviceKey {
        (
            d.driver.clone(),
            d.pool.clone(),
            d.device.clone(),
            d.share_id.clone(),
        )
    };
    devices.retain(|d| !dropped.contains(&key_of(d)));
    for e in entries {
        match devices.iter_mut().find(|d| key_of(d) == key_of(&e)) {
            Some(d) => *d = e,
            None => devices.push(e),
        }
    }
    let rv = bump(&mut st);
    claim.metadata.resource_version = Some(rv.to_string());
    st.claims.insert(key, claim.clone());
    st.field_managers.push(manager.clone());
    json_response(
        StatusCode::OK,
        &serde_json::to_value(&claim).unwrap_or(Value::Null),
    )
}

fn check_device_status(
    d: &k8s_openapi::api::resource::v1::AllocatedDeviceStatus,
    allocated: &[DeviceKey],
    key: &DeviceKey,
) -> std::result::Result<(), String> {
    if !allocated.contains(key) {
        return Err(format!(
            ": Invalid value: {key:?}: must be an allocated device in the claim"
        ));
    }
    let conditions = d.conditions.as_deref().unwrap_or_default();
    if conditions.len() > 8 {
        return Err(".conditions: Too many: must have at most 8 items".into());
    }
    for (j, c) in conditions.iter().enumerate() {
        let reason_ok = {
            let b = c.reason.as_bytes();
            !b.is_empty()
                && b.len() <= 1024
                && b[0].is_ascii_alphabetic()
                && b.iter()
                    .all(|x| x.is_ascii_alphanumeric() || matches!(x, b'_' | b',' | b':'))
                && !matches!(b[b.len() - 1], b',' | b':')
        };
        if c.type_.is_empty() {
            return Err(format!(".conditions[{j}].type: Required value"));
        }
        if !matches!(c.status.as_str(), "True" | "False" | "Unknown") {
            return Err(format!(
                ".conditions[{j}].status: Unsupported value: {:?}",
                c.status
            ));
        }
        if !reason_ok {
            return Err(format!(
                ".conditions[{j}].reason: Invalid value: {:?}",
                c.reason
            ));
        }
        if c.last_transition_time.0 == Default::default() {
            return Err(format!(
                ".conditions[{j}].lastTransitionTime: Required value"
            ));
        }
    }
    if let Some(n) = &d.network_data {
        if n.interface_name.as_ref().is_some_and(|s| s.len() > 256) {
            return Err(
                ".networkData.interfaceName: Too long: may not be more than 256 bytes".into(),
            );
        }
        if n.hardware_address.as_ref().is_some_and(|s| s.len() > 128) {
            return Err(
                ".networkData.hardwareAddress: Too long: may not be more than 128 bytes".into(),
            );
        }
        for (j, ip) in n.ips.as_deref().unwrap_or_default().iter().enumerate() {
            let ok = ip.split_once('/').is_some_and(|(a, p)| {
                a.parse::<std::net::IpAddr>()
                    .ok()
                    .zip(p.parse::<u8>().ok())
                    .is_some_and(|(a, p)| p <= if a.is_ipv4() { 32 } else { 128 })
            });
            if !ok {
                return Err(format!(
                    ".networkData.ips[{j}]: Invalid value: {ip:?}: must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)"
                ));
            }
        }
    }
    Ok(())
}

fn watch(
    shared: &Shared,
    q: &HashMap<String, String>,
    sel: Vec<(String, String)>,
) -> Response<Body> {
    let since: u64 = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => 0,
        Some(v) => match v.parse() {
            Ok(n) => n,
            Err(_) => return status(400, "BadRequest", format!("invalid resourceVersion {v:?}")),
        },
    };
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(Duration::from_secs(1800), Duration::from_secs);
    // Subscribe and read history under one lock: no event can fall between them.
    let (backlog, rx) = {
        let st = shared.lock();
        let rx = shared.events.subscribe();
        let oldest = st.history.front().map_or(st.rv, |e| e.rv.saturating_sub(1));
        if since != 0 && since < oldest {
            let line = json!({"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("too old resource version: {since} ({oldest})"), "reason": "Expired", "code": 410,
            }});
            let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
            bytes.push(b'\n');
            return Response::new(full(bytes));
        }
        let backlog: Vec<Event> = st
            .history
            .iter()
            .filter(|e| e.rv > since)
            .cloned()
            .collect();
        (backlog, rx)
    };
    let matches = move |e: &Event| {
        serde_json::from_value::<ResourceSlice>(e.object.clone()).is_ok_and(|s| selected(&s, &sel))
    };
    let matches2 = matches.clone();
    let line = |e: Event| {
        let mut bytes =
            serde_json::to_vec(&json!({"type": e.kind, "object": e.object})).unwrap_or_default();
        bytes.push(b'\n');
        Ok::<_, Infallible>(Frame::data(Bytes::from(bytes)))
    };
    let live = tokio_stream::wrappers::BroadcastStream::new(rx)
        .filter_map(move |r| {
            let keep = r.ok().filter(|e| e.rv > since && matches2(e));
            async move { keep }
        })
        .map(line);
    let backlog = futures::stream::iter(backlog.into_iter().filter(matches)).map(line);
    let stream = backlog.chain(live).take_until(tokio::time::sleep(timeout));
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_and_selectors() {
        assert_eq!(
            percent_decode("spec.nodeName%3Dn1%2Cspec.driver%3Dd"),
            "spec.nodeName=n1,spec.driver=d"
        );
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        let sel = parse_selector(Some(&"spec.nodeName=n1,spec.driver=d".to_string())).unwrap();
        assert_eq!(sel.len(), 2);
        assert!(
            parse_selector(Some(&"spec.foo=x".to_string()))
                .unwrap_err()
                .contains("not supported")
        );
    }
}
