//! The fake API server.
//!
//! - this file: the server, its state and what tests call on it;
//! - `routes`: the requests it answers, as the real API server does;
//! - `http`: responses, Status objects and query strings;
//! - `stored`: what the real server does to a slice before storing it, and what it refuses;
//! - `claim_status`: server-side apply of a claim's `status.devices`, checked;
//! - `watch`: ResourceSlice watches from a resourceVersion.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper::Method;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio::task::{JoinHandle, JoinSet};

use crate::api::KubeClient;
use crate::error::{Error, Result};
use routes::handle;

mod claim_status;
mod http;
mod routes;
mod stored;
mod watch;

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
    /// ResourceSlice list requests (pages) answered.
    slice_lists: usize,
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

    /// ResourceSlice list requests answered so far: one per page.
    pub fn slice_list_requests(&self) -> usize {
        self.shared.lock().slice_lists
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
