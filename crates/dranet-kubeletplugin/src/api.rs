//! Access to the Kubernetes API server: the [`KubeApi`] trait (the seam) and [`KubeClient`], its
//! implementation on kube-rs.
//!
//! Writes use plain create/update/delete with optimistic concurrency: an update carries the
//! `resourceVersion` it was based on and a delete carries UID and resourceVersion preconditions, so a
//! concurrent writer makes the API server answer 409 and the publisher re-reads instead of
//! overwriting. Every write names a field manager.

use std::future::Future;
use std::ops::ControlFlow;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{
    AllocatedDeviceStatus, DeviceClass, ResourceClaim, ResourceSlice,
};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    Preconditions, WatchEvent, WatchParams,
};

use crate::error::{Error, Result};

/// ResourceSlices as listed, with the list's resourceVersion to start a watch from.
#[derive(Debug, Clone, Default)]
pub struct SliceList {
    /// The slices.
    pub items: Vec<ResourceSlice>,
    /// The list's resourceVersion.
    pub resource_version: String,
}

/// One event of a ResourceSlice watch.
#[derive(Debug, Clone)]
pub enum SliceEvent {
    /// A slice was added, modified or deleted; the publisher re-reads on any of them.
    Changed,
    /// A bookmark: nothing changed, the watch is at this resourceVersion.
    Bookmark(String),
}

/// The stream of a watch. It ends when the server closes the watch; an `Err` item with code 410
/// means the resourceVersion is too old and the caller must list again.
pub type SliceEvents = BoxStream<'static, Result<SliceEvent>>;

/// One event of a Node watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEvent {
    /// The Node exists (added or modified) with this UID.
    Present {
        /// The Node's UID; a re-created Node has a new one.
        uid: String,
    },
    /// The Node was deleted.
    Deleted,
    /// Nothing changed.
    Bookmark,
}

/// The stream of a Node watch; it ends when the server closes the watch.
pub type NodeEvents = BoxStream<'static, Result<NodeEvent>>;

/// What the plugin needs from the API server. [`KubeClient`] implements it for a real cluster;
/// tests can implement it in memory or point a [`KubeClient`] at a fake server.
pub trait KubeApi: Send + Sync + 'static {
    /// Reads a ResourceClaim.
    fn get_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<ResourceClaim>> + Send;

    /// Reads the UID of a Node (for the slices' owner reference).
    fn get_node_uid(&self, name: &str) -> impl Future<Output = Result<String>> + Send;

    /// Watches the Node `name`, starting with its current state, so that slices are republished
    /// at once (with the new owner UID) when the Node is re-created. The default never reports
    /// anything: the publisher then relies on its retries.
    fn watch_node(&self, name: &str) -> impl Future<Output = Result<NodeEvents>> + Send {
        let _ = name;
        async { Ok(futures::stream::pending().boxed()) }
    }

    /// Lists the ResourceSlices of `driver` on `node`.
    fn list_slices(
        &self,
        node: &str,
        driver: &str,
    ) -> impl Future<Output = Result<SliceList>> + Send;

    /// Watches the ResourceSlices of `driver` on `node` from `resource_version`.
    fn watch_slices(
        &self,
        node: &str,
        driver: &str,
        resource_version: &str,
    ) -> impl Future<Output = Result<SliceEvents>> + Send;

    /// Creates a slice; 409 if the name is taken.
    fn create_slice(
        &self,
        slice: &ResourceSlice,
    ) -> impl Future<Output = Result<ResourceSlice>> + Send;

    /// Replaces a slice; its `metadata.resourceVersion` must be current or the answer is 409.
    fn update_slice(
        &self,
        slice: &ResourceSlice,
    ) -> impl Future<Output = Result<ResourceSlice>> + Send;

    /// Deletes a slice if it still has this UID and resourceVersion (409 otherwise, 404 if gone).
    fn delete_slice(
        &self,
        name: &str,
        uid: &str,
        resource_version: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Sets the driver's entries of a claim's `status.devices` by server-side apply with the
    /// client's field manager (forced: the driver owns its devices' status). Entries this
    /// manager applied before and `devices` leaves out are removed; other managers' entries stay.
    /// The default answers [`Error::Config`]: an implementation that cannot write claim status.
    fn apply_claim_status(
        &self,
        namespace: &str,
        name: &str,
        devices: &[AllocatedDeviceStatus],
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = devices;
        let what = format!("{namespace}/{name}");
        async move {
            Err(Error::Config(format!(
                "this KubeApi cannot write the status of ResourceClaim {what}"
            )))
        }
    }

    /// Records a core/v1 Event in `event.metadata.namespace` (what `kubectl describe` shows).
    /// The default answers [`Error::Config`]: an implementation that cannot write events.
    fn create_event(
        &self,
        event: &k8s_openapi::api::core::v1::Event,
    ) -> impl Future<Output = Result<()>> + Send {
        let reason = event.reason.clone().unwrap_or_default();
        async move {
            Err(Error::Config(format!(
                "this KubeApi cannot record events (event {reason})"
            )))
        }
    }
}

/// [`KubeApi`] on a kube-rs client.
#[derive(Clone)]
pub struct KubeClient {
    client: kube::Client,
    field_manager: String,
}

impl std::fmt::Debug for KubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeClient")
            .field("field_manager", &self.field_manager)
            .finish()
    }
}

/// The field selector that limits lists and watches to our own slices.
pub fn slice_field_selector(node: &str, driver: &str) -> String {
    format!("spec.nodeName={node},spec.driver={driver}")
}

/// Objects per page of [`KubeClient::for_each_slice`] and [`KubeClient::list_device_classes`]
/// (kubectl's page size).
pub const LIST_PAGE: u32 = 500;

/// How much JSON [`KubeClient::for_each_slice`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListLimits {
    /// The most bytes of one page's body. A page over it is asked again in smaller pages (an
    /// eighth of the objects each time), down to one object.
    pub page_bytes: usize,
    /// The most bytes of all pages' bodies together.
    pub total_bytes: u64,
}

impl ListLimits {
    /// The most bytes of one page by default: 16 MiB, 5 objects of the API server's largest
    /// (3 MiB, its request size limit), 2,000 of a GB300 node's slices (8 kB).
    pub const PAGE_BYTES: usize = 16 << 20;
}

/// What [`KubeClient::for_each_slice`] read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListStats {
    /// Pages read (not counting pages over [`ListLimits::page_bytes`], asked again smaller).
    pub pages: usize,
    /// Objects given to the caller's function.
    pub items: usize,
    /// Bytes of the pages' bodies.
    pub bytes: u64,
}

/// One page of a list, decoded object by object: each item goes to `each` as soon as it is
/// parsed, and only the list's `metadata.continue` is kept.
struct Page<'a, F> {
    each: &'a mut F,
    api_version: &'a str,
    kind: &'a str,
    items: usize,
    stopped: bool,
    continue_: Option<String>,
}

impl<'de, F: FnMut(serde_json::Value) -> ControlFlow<()>> serde::de::DeserializeSeed<'de>
    for &mut Page<'_, F>
{
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, F: FnMut(serde_json::Value) -> ControlFlow<()>> serde::de::Visitor<'de>
    for &mut Page<'_, F>
{
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<(), A::Error> {
        use serde::de::IgnoredAny;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "metadata" => {
                    let meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta =
                        map.next_value()?;
                    self.continue_ = meta.continue_;
                }
                "items" => map.next_value_seed(Items(&mut *self))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// The `items` of a [`Page`].
struct Items<'p, 'a, F>(&'p mut Page<'a, F>);

impl<'de, F: FnMut(serde_json::Value) -> ControlFlow<()>> serde::de::DeserializeSeed<'de>
    for Items<'_, '_, F>
{
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        // Any, not seq: `null` reaches `visit_unit`.
        d.deserialize_any(self)
    }
}

impl<'de, F: FnMut(serde_json::Value) -> ControlFlow<()>> serde::de::Visitor<'de>
    for Items<'_, '_, F>
{
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list's items")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<(), A::Error> {
        let page = self.0;
        loop {
            if page.stopped {
                // The caller has what it wanted: the rest is skipped, not built.
                if seq.next_element::<serde::de::IgnoredAny>()?.is_none() {
                    return Ok(());
                }
                continue;
            }
            let Some(mut item) = seq.next_element::<serde_json::Value>()? else {
                return Ok(());
            };
            // List items come without their type.
            if let Some(obj) = item.as_object_mut() {
                obj.insert("apiVersion".into(), page.api_version.into());
                obj.insert("kind".into(), page.kind.into());
            }
            page.items += 1;
            if (page.each)(item).is_break() {
                page.stopped = true;
            }
        }
    }

    /// `"items": null`, as some servers write an empty list.
    fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<(), E> {
        Ok(())
    }
}

/// The field manager of writes until [`KubeClient::field_manager`] says otherwise.
pub const DEFAULT_FIELD_MANAGER: &str = "dranet-kubeletplugin";

impl KubeClient {
    /// Wraps a client. Writes are attributed to [`DEFAULT_FIELD_MANAGER`]; set your driver's
    /// name with [`Self::field_manager`].
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            field_manager: DEFAULT_FIELD_MANAGER.into(),
        }
    }

    /// Attributes this client's writes (`fieldManager`) to `name`, usually the driver name.
    pub fn field_manager(mut self, name: impl Into<String>) -> Self {
        self.field_manager = name.into();
        self
    }

    /// A client from the environment: in-cluster service account, else `$KUBECONFIG` or
    /// `~/.kube/config`. Must be called inside a Tokio runtime.
    pub async fn infer() -> Result<Self> {
        let client = kube::Client::try_default()
            .await
            .map_err(|e| Error::ApiTransport {
                action: "find API server credentials (in-cluster config or kubeconfig)".into(),
                source: Box::new(e),
            })?;
        Ok(Self::new(client))
    }

    /// A client from the kubeconfig file at `path` (its current context). Must be called inside
    /// a Tokio runtime.
    pub async fn from_kubeconfig(path: &std::path::Path) -> Result<Self> {
        let action = || format!("load kubeconfig {}", path.display());
        let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| Error::ApiTransport {
            action: action(),
            source: Box::new(e),
        })?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| Error::ApiTransport {
                    action: action(),
                    source: Box::new(e),
                })?;
        let client = kube::Client::try_from(config).map_err(|e| Error::ApiTransport {
            action: action(),
            source: Box::new(e),
        })?;
        Ok(Self::new(client))
    }

    /// A client for an unauthenticated API server at `url` (e.g. a fake on loopback in tests).
    /// Must be called inside a Tokio runtime.
    pub fn for_url(url: &str) -> Result<Self> {
        let uri = url
            .parse()
            .map_err(|e| Error::Config(format!("API server URL {url:?}: {e}")))?;
        let config = kube::Config::new(uri);
        let client = kube::Client::try_from(config).map_err(|e| Error::ApiTransport {
            action: format!("build API client for {url}"),
            source: Box::new(e),
        })?;
        Ok(Self::new(client))
    }

    /// Every ResourceSlice of the cluster, of all nodes and drivers (what `kubectl get
    /// resourceslices` lists), for tools that look at the whole cluster, such as `dranet check
    /// --kubeconfig`: `each` is given the slices one at a time, as the API server serves them
    /// (`resource.k8s.io/v1` JSON, with `apiVersion` and `kind`), fields newer than this build's
    /// types included; it returns [`ControlFlow::Break`] to stop the listing.
    ///
    /// Read in pages of [`LIST_PAGE`] objects as kubectl does (`limit` and `continue`), each page
    /// dropped before the next is asked for, so what is held is one page's text, one object's
    /// JSON and what `each` keeps. A page's body is read up to [`ListLimits::page_bytes`]: a page
    /// over it is asked again in smaller pages, down to one object, which is
    /// [`Error::TooLarge`] if it is still over. All pages together are read up to
    /// [`ListLimits::total_bytes`], then [`Error::TooLarge`].
    pub async fn for_each_slice(
        &self,
        limits: ListLimits,
        mut each: impl FnMut(serde_json::Value) -> ControlFlow<()>,
    ) -> Result<ListStats> {
        let action = "list ResourceSlices";
        let resource = ApiResource::erase::<ResourceSlice>(&());
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let request = kube::core::Request::new(api.resource_url());
        let mut stats = ListStats::default();
        let mut limit = LIST_PAGE;
        let mut token: Option<String> = None;
        loop {
            let mut lp = ListParams::default().limit(limit);
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let left = limits.total_bytes.saturating_sub(stats.bytes);
            let cap = usize::try_from(left)
                .unwrap_or(usize::MAX)
                .min(limits.page_bytes);
            let req = request
                .list(&lp)
                .map_err(|e| map_kube_error(action, kube::Error::BuildRequest(e)))?;
            let body = match self.read_bounded(req, cap, action).await? {
                Some(body) => body,
                // Over the total: no smaller page helps.
                None if cap < limits.page_bytes => {
                    return Err(Error::TooLarge {
                        action: action.into(),
                        what: "the list",
                        limit: limits.total_bytes,
                    });
                }
                None if limit > 1 => {
                    limit = (limit / 8).max(1);
                    continue;
                }
                None => {
                    return Err(Error::TooLarge {
                        action: action.into(),
                        what: "one object",
                        limit: u64::try_from(limits.page_bytes).unwrap_or(u64::MAX),
                    });
                }
            };
            stats.pages += 1;
            let body = body.as_ref();
            stats.bytes += u64::try_from(body.len()).unwrap_or(u64::MAX);
            let mut page = Page {
                each: &mut each,
                api_version: &resource.api_version,
                kind: &resource.kind,
                items: 0,
                stopped: false,
                continue_: None,
            };
            let mut de = serde_json::Deserializer::from_slice(body);
            serde::de::DeserializeSeed::deserialize(&mut page, &mut de)
                .and_then(|()| de.end())
                .map_err(|e| Error::ApiTransport {
                    action: action.into(),
                    source: Box::new(e),
                })?;
            stats.items += page.items;
            if page.stopped {
                return Ok(stats);
            }
            match page.continue_ {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok(stats),
            }
        }
    }

    /// The body of the answer to `req`, if it is at most `cap` bytes (`None` when it is longer:
    /// no more than `cap + 1` bytes of it are read). An error status is [`Error::ApiStatus`].
    async fn read_bounded(
        &self,
        req: http::Request<Vec<u8>>,
        cap: usize,
        action: &str,
    ) -> Result<Option<impl AsRef<[u8]> + use<>>> {
        use http_body_util::BodyExt;
        let res = self
            .client
            .send(req.map(kube::client::Body::from))
            .await
            .map_err(|e| map_kube_error(action, e))?;
        let code = res.status();
        if !code.is_success() {
            // A Status object is small; read no more than its first 64 KiB.
            let text = http_body_util::Limited::new(res.into_body(), 64 << 10)
                .collect()
                .await
                .map(|c| c.to_bytes().to_vec())
                .unwrap_or_default();
            return Err(match serde_json::from_slice::<kube::core::Status>(&text) {
                Ok(s) => Error::ApiStatus {
                    action: action.into(),
                    code: code.as_u16(),
                    reason: s.reason,
                    message: s.message,
                },
                Err(_) => Error::ApiStatus {
                    action: action.into(),
                    code: code.as_u16(),
                    reason: code.canonical_reason().unwrap_or_default().into(),
                    message: String::from_utf8_lossy(&text).chars().take(512).collect(),
                },
            });
        }
        match http_body_util::Limited::new(res.into_body(), cap)
            .collect()
            .await
        {
            Ok(c) => Ok(Some(c.to_bytes())),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Ok(None),
            Err(e) => Err(Error::ApiTransport {
                action: action.into(),
                source: e,
            }),
        }
    }

    /// The API server's Kubernetes version, `(major, minor)` as `/version` gives them (a
    /// provider's minor may end in `+`).
    pub async fn server_version(&self) -> Result<(String, String)> {
        let info = self
            .client
            .apiserver_version()
            .await
            .map_err(|e| map_kube_error("read the server version", e))?;
        Ok((info.major, info.minor))
    }

    /// Every DeviceClass of the cluster (the classes a claim's requests name).
    pub async fn list_device_classes(&self) -> Result<Vec<DeviceClass>> {
        self.list_all(Api::all(self.client.clone()), "list DeviceClasses")
            .await
    }

    /// The labels of Node `name` (a provider that reads the node's place from them: CoreWeave
    /// CKS).
    pub async fn node_labels(
        &self,
        name: &str,
    ) -> Result<std::collections::BTreeMap<String, String>> {
        let api: Api<Node> = Api::all(self.client.clone());
        let node = api
            .get(name)
            .await
            .map_err(|e| map_kube_error(format!("get Node {name}"), e))?;
        Ok(node.metadata.labels.unwrap_or_default())
    }

    /// Every DeviceTaintRule of the cluster, as JSON, from the newest version the API server
    /// serves of `resource.k8s.io` `v1` (1.37: GA), `v1beta2` (1.36: beta) and `v1alpha3`
    /// (1.33 to 1.35: alpha); none when it serves none of them (the `DRADeviceTaintRules`
    /// gate off, or the beta or alpha API not enabled), as then the scheduler applies none.
    pub async fn list_device_taint_rules(&self) -> Result<Vec<serde_json::Value>> {
        for version in ["v1", "v1beta2", "v1alpha3"] {
            let resource = ApiResource {
                group: "resource.k8s.io".into(),
                version: version.into(),
                api_version: format!("resource.k8s.io/{version}"),
                kind: "DeviceTaintRule".into(),
                plural: "devicetaintrules".into(),
            };
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
            match self.list_all(api, "list DeviceTaintRules").await {
                Ok(rules) => {
                    return rules
                        .into_iter()
                        .map(|mut r| {
                            // A list's items carry no type; the list's is theirs.
                            r.types.get_or_insert_with(|| kube::core::TypeMeta {
                                api_version: resource.api_version.clone(),
                                kind: resource.kind.clone(),
                            });
                            serde_json::to_value(r).map_err(|e| Error::ApiTransport {
                                action: "list DeviceTaintRules".into(),
                                source: Box::new(e),
                            })
                        })
                        .collect();
                }
                Err(Error::ApiStatus { code: 404, .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(Vec::new())
    }

    /// Every object `api` lists, following the list's continue tokens.
    async fn list_all<K>(&self, api: Api<K>, action: &str) -> Result<Vec<K>>
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let mut lp = ListParams::default().limit(LIST_PAGE);
        let mut items = Vec::new();
        loop {
            let page = api.list(&lp).await.map_err(|e| map_kube_error(action, e))?;
            items.extend(page.items);
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => lp = lp.continue_token(&token),
                _ => return Ok(items),
            }
        }
    }

    fn post_params(&self) -> PostParams {
        PostParams {
            dry_run: false,
            field_manager: Some(self.field_manager.clone()),
        }
    }
}

/// Turns a kube error into ours, keeping the HTTP status where there is one.
pub(crate) fn map_kube_error(action: impl Into<String>, err: kube::Error) -> Error {
    let action = action.into();
    match err {
        kube::Error::Api(status) => Error::ApiStatus {
            action,
            code: status.code,
            reason: status.reason.clone(),
            message: status.message.clone(),
        },
        other => Error::ApiTransport {
            action,
            source: Box::new(other),
        },
    }
}

impl KubeApi for KubeClient {
    async fn apply_claim_status(
        &self,
        namespace: &str,
        name: &str,
        devices: &[AllocatedDeviceStatus],
    ) -> Result<()> {
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), namespace);
        let patch = serde_json::json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": { "name": name, "namespace": namespace },
            "status": { "devices": devices },
        });
        let pp = PatchParams::apply(&self.field_manager).force();
        api.patch_status(name, &pp, &Patch::Apply(&patch))
            .await
            .map(|_| ())
            .map_err(|e| {
                map_kube_error(
                    format!("apply status of ResourceClaim {namespace}/{name}"),
                    e,
                )
            })
    }

    async fn create_event(&self, event: &k8s_openapi::api::core::v1::Event) -> Result<()> {
        let ns = event.metadata.namespace.as_deref().unwrap_or("default");
        let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(self.client.clone(), ns);
        api.create(&kube::api::PostParams::default(), event)
            .await
            .map(|_| ())
            .map_err(|e| {
                map_kube_error(
                    format!(
                        "create Event {} in {ns}",
                        event.reason.as_deref().unwrap_or_default()
                    ),
                    e,
                )
            })
    }

    async fn get_claim(&self, namespace: &str, name: &str) -> Result<ResourceClaim> {
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), namespace);
        api.get(name)
            .await
            .map_err(|e| map_kube_error(format!("get ResourceClaim {namespace}/{name}"), e))
    }

    async fn get_node_uid(&self, name: &str) -> Result<String> {
        let api: Api<Node> = Api::all(self.client.clone());
        let node = api
            .get(name)
            .await
            .map_err(|e| map_kube_error(format!("get Node {name}"), e))?;
        node.metadata.uid.ok_or_else(|| Error::ApiTransport {
            action: format!("get Node {name}"),
            source: "the API server returned the Node without metadata.uid".into(),
        })
    }

    async fn watch_node(&self, name: &str) -> Result<NodeEvents> {
        let api: Api<Node> = Api::all(self.client.clone());
        let wp = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290);
        // "0": start with the Node's current state as an ADDED event.
        let stream = api
            .watch(&wp, "0")
            .await
            .map_err(|e| map_kube_error(format!("watch Node {name}"), e))?;
        let action = format!("watch Node {name}");
        Ok(stream
            .map(move |item| match item {
                Ok(WatchEvent::Added(n) | WatchEvent::Modified(n)) => Ok(NodeEvent::Present {
                    uid: n.metadata.uid.unwrap_or_default(),
                }),
                Ok(WatchEvent::Deleted(_)) => Ok(NodeEvent::Deleted),
                Ok(WatchEvent::Bookmark(_)) => Ok(NodeEvent::Bookmark),
                Ok(WatchEvent::Error(status)) => Err(Error::ApiStatus {
                    action: action.clone(),
                    code: status.code,
                    reason: status.reason.clone(),
                    message: status.message.clone(),
                }),
                Err(e) => Err(map_kube_error(action.clone(), e)),
            })
            .boxed())
    }

    async fn list_slices(&self, node: &str, driver: &str) -> Result<SliceList> {
        let api: Api<ResourceSlice> = Api::all(self.client.clone());
        let lp = ListParams::default().fields(&slice_field_selector(node, driver));
        let list = api
            .list(&lp)
            .await
            .map_err(|e| map_kube_error("list ResourceSlices", e))?;
        Ok(SliceList {
            resource_version: list.metadata.resource_version.unwrap_or_default(),
            items: list.items,
        })
    }

    async fn watch_slices(
        &self,
        node: &str,
        driver: &str,
        resource_version: &str,
    ) -> Result<SliceEvents> {
        let api: Api<ResourceSlice> = Api::all(self.client.clone());
        // Servers end watches after a while anyway; asking for a bounded one makes that explicit.
        let wp = WatchParams::default()
            .fields(&slice_field_selector(node, driver))
            .timeout(290);
        let stream = api
            .watch(&wp, resource_version)
            .await
            .map_err(|e| map_kube_error("watch ResourceSlices", e))?;
        Ok(stream
            .map(|item| match item {
                Ok(WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_)) => {
                    Ok(SliceEvent::Changed)
                }
                Ok(WatchEvent::Bookmark(b)) => {
                    Ok(SliceEvent::Bookmark(b.metadata.resource_version))
                }
                Ok(WatchEvent::Error(status)) => Err(Error::ApiStatus {
                    action: "watch ResourceSlices".into(),
                    code: status.code,
                    reason: status.reason.clone(),
                    message: status.message.clone(),
                }),
                Err(e) => Err(map_kube_error("watch ResourceSlices", e)),
            })
            .boxed())
    }

    async fn create_slice(&self, slice: &ResourceSlice) -> Result<ResourceSlice> {
        let api: Api<ResourceSlice> = Api::all(self.client.clone());
        let name = slice.metadata.name.clone().unwrap_or_default();
        api.create(&self.post_params(), slice)
            .await
            .map_err(|e| map_kube_error(format!("create ResourceSlice {name}"), e))
    }

    async fn update_slice(&self, slice: &ResourceSlice) -> Result<ResourceSlice> {
        let api: Api<ResourceSlice> = Api::all(self.client.clone());
        let name = slice.metadata.name.clone().unwrap_or_default();
        api.replace(&name, &self.post_params(), slice)
            .await
            .map_err(|e| map_kube_error(format!("update ResourceSlice {name}"), e))
    }

    async fn delete_slice(&self, name: &str, uid: &str, resource_version: &str) -> Result<()> {
        let api: Api<ResourceSlice> = Api::all(self.client.clone());
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: Some(resource_version.to_string()),
            }),
            ..DeleteParams::default()
        };
        api.delete(name, &dp)
            .await
            .map(|_| ())
            .map_err(|e| map_kube_error(format!("delete ResourceSlice {name}"), e))
    }
}
