//! The `dra.net` driver: [`NetworkDriver`] is both the kubelet plugin's
//! [`Driver`] (prepare and unprepare claims) and an
//! [`NriPlugin`] (give each pod its devices when its sandbox starts, take
//! them back when it stops).
//!
//! The data flows one way: discovery's inventory → prepare (which device, configured how, for which
//! pods; recorded durably) → RunPodSandbox (netdevs into the pod's namespace, through
//! [`PodNet`]) → CreateContainer (RDMA character devices) → StopPodSandbox (everything back).
//!
//! Like upstream dranet, prepare returns no CDI devices: the network namespace a netdev moves into
//! only exists once the sandbox runs, which is after the kubelet's prepare, so the work is done in
//! the NRI hooks, and the char devices are added there too so that one place decides what a pod
//! sees.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use dranet_core::{CharDevice, CloudProvider, Inventory, NoCloud};
use dranet_kubeletplugin::k8s_openapi::api::resource::v1::{
    AllocatedDeviceStatus, NetworkDeviceData, ResourceClaim,
};
use dranet_kubeletplugin::k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use dranet_kubeletplugin::{
    ClaimToPrepare, ClaimToUnprepare, Driver, HandlerError, KubeApi, Prepared, PreparedDevice,
};
use dranet_nri::{Container, ContainerAdjustment, LinuxDevice, NriPlugin, PodSandbox};
use futures::future::BoxFuture;

use crate::claim::{self, DRIVER_NAME};
use crate::podnet::{AttachRequest, Attached, PodNet};
use crate::rdma::NetnsMode;
use crate::store::{ClaimRecord, DeviceRecord, PodRecord, STORE_VERSION, Store};
use crate::{Error, Result};

/// How often a claim status write is tried before it is left (the status is informational; the
/// pod runs regardless).
const STATUS_ATTEMPTS: u32 = 6;

/// Takes a fresh inventory of the node (blocking: it runs on tokio's blocking pool).
pub type Rescan = Arc<dyn Fn() -> std::result::Result<Inventory, String> + Send + Sync>;

/// Writes a claim's `status.devices` entries of this driver (server-side apply).
pub type StatusWriter = Arc<
    dyn Fn(
            String,
            String,
            Vec<AllocatedDeviceStatus>,
        ) -> BoxFuture<'static, std::result::Result<(), String>>
        + Send
        + Sync,
>;

/// Reads a ResourceClaim (namespace, name) as the API server holds it now.
pub type ClaimReader = Arc<
    dyn Fn(String, String) -> BoxFuture<'static, std::result::Result<ResourceClaim, String>>
        + Send
        + Sync,
>;

/// A [`ClaimReader`] on any [`KubeApi`].
pub fn claim_reader<A: KubeApi + Clone>(api: A) -> ClaimReader {
    Arc::new(move |ns, name| {
        let api = api.clone();
        Box::pin(async move {
            api.get_claim(&ns, &name)
                .await
                .map_err(|e| dranet_kubeletplugin::error_chain(&e))
        })
    })
}

/// How long a sandbox start waits for the API server when it looks for claims the pod was added
/// to after they were prepared; past it the pod starts as if there were none (logged).
const LATE_CLAIMS_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// What [`NetworkDriver::synchronize_pods`] did for the live pods.
#[derive(Debug, Default)]
pub struct Synchronized {
    /// Sandboxes that started while the runtime could not reach this plugin and got their
    /// devices now.
    pub attached: Vec<String>,
    /// Such sandboxes whose devices could not be attached, with why (in the pod owner's terms).
    pub failed: Vec<(String, Error)>,
}

/// A [`StatusWriter`] on any [`KubeApi`] (its field manager should be `dra.net`).
pub fn status_writer<A: KubeApi + Clone>(api: A) -> StatusWriter {
    Arc::new(move |ns, name, devices| {
        let api = api.clone();
        Box::pin(async move {
            api.apply_claim_status(&ns, &name, &devices)
                .await
                .map_err(|e| dranet_util::error_chain(&e))
        })
    })
}

/// Builds a [`NetworkDriver`].
pub struct NetworkDriverBuilder {
    podnet: PodNet,
    state_dir: PathBuf,
    rescan: Rescan,
    cloud: Arc<dyn CloudProvider>,
    status: Option<StatusWriter>,
    claims: Option<ClaimReader>,
    rdma_mode: Option<NetnsMode>,
}

impl std::fmt::Debug for NetworkDriverBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetworkDriverBuilder")
            .field("state_dir", &self.state_dir)
            .field("cloud", &self.cloud.name())
            .finish_non_exhaustive()
    }
}

impl NetworkDriverBuilder {
    /// Adds the cloud's per-device configuration (Azure's policy routing) under each claim's.
    #[must_use]
    pub fn cloud(mut self, cloud: Arc<dyn CloudProvider>) -> Self {
        self.cloud = cloud;
        self
    }

    /// Writes claim status (network data and conditions) through `writer`.
    #[must_use]
    pub fn status(mut self, writer: StatusWriter) -> Self {
        self.status = Some(writer);
        self
    }

    /// Reads claims through `reader`: at a sandbox start, the claims of the pod's namespace
    /// prepared for other pods, to find a pod added to a claim's `reservedFor` after the
    /// kubelet prepared it (see [`crate::claim`]). Without a reader such a pod is not found.
    #[must_use]
    pub fn claim_reader(mut self, reader: ClaimReader) -> Self {
        self.claims = Some(reader);
        self
    }

    /// The RDMA subsystem's namespace mode, when known; otherwise it is read from the kernel.
    #[must_use]
    pub fn rdma_mode(mut self, mode: NetnsMode) -> Self {
        self.rdma_mode = Some(mode);
        self
    }

    /// Opens the store, loads what earlier runs recorded and takes the first inventory
    /// (blocking: call it before starting the plugins, or from a blocking task).
    pub fn build(self) -> Result<NetworkDriver> {
        let store = Store::open(&self.state_dir)?;
        let inventory = (self.rescan)().map_err(|reason| Error::Claim {
            claim: "(none)".into(),
            reason: format!("discovery: {reason}"),
        })?;
        let mut state = State::default();
        for c in store.claims()? {
            state.insert_claim(c);
        }
        for p in store.pods()? {
            state.pods.insert(p.sandbox_id.clone(), p);
        }
        let rdma_mode = match self.rdma_mode {
            Some(m) => m,
            None => crate::rdma::netns_mode().unwrap_or_else(|e| {
                tracing::info!(error = %e, "RDMA netns mode unknown (no RDMA netlink); treating it as shared");
                NetnsMode::Shared
            }),
        };
        Ok(NetworkDriver {
            podnet: self.podnet,
            store,
            rescan: self.rescan,
            cloud: self.cloud,
            status: self.status,
            claims: self.claims,
            rdma_mode,
            inventory: RwLock::new(Arc::new(inventory)),
            state: Mutex::new(state),
            restores_owed: AtomicUsize::new(0),
            synchronized: tokio::sync::watch::Sender::new(false),
        })
    }
}

#[derive(Default)]
struct State {
    claims: HashMap<String, Arc<ClaimRecord>>,
    /// Pod UID → the UIDs of its claims.
    by_pod: HashMap<String, Vec<String>>,
    /// Sandbox ID → what we did to it.
    pods: HashMap<String, PodRecord>,
}

impl State {
    fn insert_claim(&mut self, c: ClaimRecord) {
        self.remove_claim(&c.uid);
        for p in &c.pods {
            self.by_pod
                .entry(p.uid.clone())
                .or_default()
                .push(c.uid.clone());
        }
        self.claims.insert(c.uid.clone(), Arc::new(c));
    }

    fn remove_claim(&mut self, uid: &str) {
        if let Some(old) = self.claims.remove(uid) {
            for p in &old.pods {
                if let Some(v) = self.by_pod.get_mut(&p.uid) {
                    v.retain(|c| c != uid);
                    if v.is_empty() {
                        self.by_pod.remove(&p.uid);
                    }
                }
            }
        }
    }

    fn claims_of(&self, pod_uid: &str) -> Vec<Arc<ClaimRecord>> {
        self.by_pod
            .get(pod_uid)
            .into_iter()
            .flatten()
            .filter_map(|c| self.claims.get(c).cloned())
            .collect()
    }
}

/// The `dra.net` driver. Share it (`Arc`) between the kubelet plugin and the NRI runner.
pub struct NetworkDriver {
    podnet: PodNet,
    store: Store,
    rescan: Rescan,
    cloud: Arc<dyn CloudProvider>,
    status: Option<StatusWriter>,
    claims: Option<ClaimReader>,
    rdma_mode: NetnsMode,
    inventory: RwLock<Arc<Inventory>>,
    state: Mutex<State>,
    /// Journal entries of gone pods whose restore failed at the last synchronize.
    restores_owed: AtomicUsize,
    /// Set once the runtime's first Synchronize was handled (host restores owed are done).
    synchronized: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for NetworkDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetworkDriver")
            .field("podnet", &self.podnet)
            .field("store", &self.store)
            .field("cloud", &self.cloud.name())
            .field("rdma_mode", &self.rdma_mode)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl NetworkDriver {
    /// A driver moving links with `podnet`, recording its state under `state_dir` (created 0700),
    /// and taking inventories with `rescan`.
    pub fn builder(
        podnet: PodNet,
        state_dir: impl Into<PathBuf>,
        rescan: Rescan,
    ) -> NetworkDriverBuilder {
        NetworkDriverBuilder {
            podnet,
            state_dir: state_dir.into(),
            rescan,
            cloud: Arc::new(NoCloud),
            status: None,
            claims: None,
            rdma_mode: None,
        }
    }

    /// The inventory prepare looks devices up in.
    pub fn inventory(&self) -> Arc<Inventory> {
        self.inventory
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the inventory (the daemon calls this after a hot-plug rescan).
    pub fn set_inventory(&self, inventory: Inventory) {
        *self
            .inventory
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(inventory);
    }

    async fn rescan(&self) -> Result<Arc<Inventory>> {
        let rescan = self.rescan.clone();
        let inv = tokio::task::spawn_blocking(move || rescan())
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r)
            .map_err(|reason| Error::Claim {
                claim: "(rescan)".into(),
                reason: format!("discovery: {reason}"),
            })?;
        self.set_inventory(inv);
        Ok(self.inventory())
    }

    /// The devices of prepared claims, each with its claim (`namespace/name`): they are in use
    /// even while their netdev is in a pod's namespace and out of the host's sight.
    pub fn devices_in_use(&self) -> BTreeMap<String, String> {
        let st = lock(&self.state);
        st.claims
            .values()
            .flat_map(|c| {
                c.devices
                    .iter()
                    .map(move |d| (d.device.clone(), format!("{}/{}", c.namespace, c.name)))
            })
            .collect()
    }

    /// Devices the last synchronize could not give back to the host (their pods are gone);
    /// retried at the next synchronize.
    pub fn restores_owed(&self) -> usize {
        self.restores_owed.load(Ordering::Relaxed)
    }

    /// Turns true once the runtime's first Synchronize was handled: every pod that went away
    /// while the daemon was down has given its devices back (or [`Self::restores_owed`] says
    /// how many could not be).
    pub fn watch_synchronized(&self) -> tokio::sync::watch::Receiver<bool> {
        self.synchronized.subscribe()
    }

    /// The prepared claims whose pods include `pod_uid`.
    pub fn claims_of_pod(&self, pod_uid: &str) -> Vec<Arc<ClaimRecord>> {
        lock(&self.state).claims_of(pod_uid)
    }

    /// What [`Driver::prepare`] does, with this crate's error. Everything that would fail at
    /// every sandbox start is refused here, so the claim's author sees it on the claim: the
    /// config (see [`crate::podnet::check_config`]), the device's own limits and ethtool names
    /// when its interface is on the host, and a device that moves into a pod's namespace
    /// (a network interface; an RDMA device in exclusive mode) reserved for more than one pod.
    /// Claims of RDMA-only devices may be shared by pods in the kernel's shared RDMA mode, where
    /// every namespace sees the device.
    pub async fn prepare_claim(&self, claim: &ClaimToPrepare) -> Result<Prepared> {
        let cref = claim.claim_ref.to_string();
        let fail = |reason: String| Error::Claim {
            claim: cref.clone(),
            reason,
        };
        let pods = claim::pods_of(&claim.claim).map_err(|e| fail(e.to_string()))?;
        let mut inv = self.inventory();
        let mut rescanned = false;
        let mut devices = Vec::with_capacity(claim.results.len());
        for r in &claim.results {
            if inv.device(&r.device).is_none() && !rescanned {
                rescanned = true;
                inv = self.rescan().await.map_err(|e| {
                    tracing::warn!(claim = %cref, error = %e, "rescan at prepare failed");
                    fail(
                        "the node's devices could not be scanned (see the dranet log on the node)"
                            .into(),
                    )
                })?;
            }
            let dev = inv.device(&r.device).ok_or_else(|| {
                fail(format!(
                    "device {} (pool {}) is not on this node: it may have been unplugged or \
                     renamed since it was allocated",
                    r.device, r.pool
                ))
            })?;
            let base = claim::cloud_config(&*self.cloud, dev);
            let config = claim::config_for(claim, r, base)
                .map_err(|e| fail(format!("device {}: {e}", r.device)))?;
            claim::check_device(&config, dev, &inv)
                .map_err(|e| fail(format!("device {}: {e}", r.device)))?;
            let netdev = claim::pod_netdev(dev);
            if let Some(nd) = netdev {
                self.check_on_host(nd, &config)
                    .await
                    .map_err(|e| fail(format!("device {}: {e}", r.device)))?;
            }
            devices.push(DeviceRecord {
                request: r.request.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
                share_id: r.share_id.clone(),
                netdev: netdev.map(str::to_string),
                config,
                rdma: dev.rdma.as_ref().map(|l| l.name.clone()),
                char_devices: dev
                    .rdma
                    .as_ref()
                    .map(|l| l.char_devices.clone())
                    .unwrap_or_default(),
            });
        }
        if pods.len() > 1
            && let Some(d) = devices.iter().find(|d| self.moves_into_pod(d))
        {
            let names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
            return Err(fail(format!(
                "it is reserved for {} pods ({}), but device {} {}, which can be in one pod \
                 only: give each pod a claim of its own (a ResourceClaimTemplate)",
                pods.len(),
                names.join(", "),
                d.device,
                self.why_one_pod(d)
            )));
        }
        let record = ClaimRecord {
            version: STORE_VERSION,
            namespace: claim.claim_ref.namespace.clone(),
            name: claim.claim_ref.name.clone(),
            uid: claim.claim_ref.uid.clone(),
            pods,
            devices,
        };
        self.store.put_claim(&record).map_err(|e| {
            tracing::error!(claim = %cref, error = %e, "could not record the prepared claim");
            fail(e.user_message())
        })?;
        lock(&self.state).insert_claim(record);
        Ok(Prepared {
            devices: claim
                .results
                .iter()
                .map(|r| PreparedDevice::for_result(r, Vec::new()))
                .collect(),
            state: None,
        })
    }

    /// Whether a device moves into its pod's network namespace (and so serves one pod).
    fn moves_into_pod(&self, d: &DeviceRecord) -> bool {
        d.netdev.is_some() || (d.rdma.is_some() && self.rdma_mode == NetnsMode::Exclusive)
    }

    fn why_one_pod(&self, d: &DeviceRecord) -> &'static str {
        if d.netdev.is_some() {
            "has a network interface"
        } else {
            "is an RDMA device, which the kernel's exclusive RDMA mode moves into the pod"
        }
    }

    /// Checks a config against the device's interface on the host: its own limits
    /// ([`crate::podnet::check_link`]), ethtool feature names and private flags. An interface
    /// the host does not see now (still in a pod) is checked by the attach instead. The
    /// message is in the claim's terms.
    async fn check_on_host(
        &self,
        link: &str,
        config: &dranet_core::NetworkConfig,
    ) -> std::result::Result<(), String> {
        let host = self.podnet.host();
        let found = match host.rtnl().await {
            Ok(rtnl) => rtnl.link_by_name(link).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let l = match found {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(()),
            Err(e) => {
                tracing::debug!(link, error = %e, "link not readable at prepare; checked at attach");
                return Ok(());
            }
        };
        crate::podnet::check_link(&l, config).map_err(|e| e.to_string())?;
        let Some(e) = &config.ethtool else {
            return Ok(());
        };
        if !e.features.is_empty() {
            match crate::ethtool::features(host, link) {
                Ok(f) => {
                    crate::ethtool::resolve(&e.features, &f).map_err(|e| e.to_string())?;
                }
                Err(err) => {
                    tracing::debug!(link, error = %err, "ethtool features not readable at prepare; checked at attach");
                }
            }
        }
        if !e.private_flags.is_empty() {
            match crate::ethtool::private_flags(host, link) {
                Ok((all, _)) => crate::ethtool::check_private_flags(&e.private_flags, &all)
                    .map_err(|e| e.to_string())?,
                Err(err) => {
                    tracing::debug!(link, error = %err, "private flags not readable at prepare; checked at attach");
                }
            }
        }
        Ok(())
    }

    /// What [`Driver::unprepare`] does: forgets the claim. Idempotent.
    pub fn unprepare_claim(&self, uid: &str) -> Result<()> {
        self.store.remove_claim(uid)?;
        lock(&self.state).remove_claim(uid);
        Ok(())
    }

    /// What RunPodSandbox does, with this crate's error. The error says what is wrong in the
    /// pod owner's terms ([`Error::user_message`]); the host's details go to the log.
    pub async fn start_pod(&self, pod: &PodSandbox) -> Result<()> {
        let mut claims = self.claims_of_pod(&pod.uid);
        claims.extend(self.late_claims(pod).await?);
        if claims.is_empty() {
            return Ok(());
        }
        let who = pod.qualified_name();
        let netdevs: Vec<(&ClaimRecord, &DeviceRecord)> = claims
            .iter()
            .flat_map(|c| c.devices.iter().map(move |d| (&**c, d)))
            .filter(|(_, d)| d.netdev.is_some())
            .collect();
        let netns = pod.netns_path().map(PathBuf::from);
        if netns.is_none() && !netdevs.is_empty() {
            let (c, d) = netdevs[0];
            return Err(Error::Pod {
                pod: who,
                reason: format!(
                    "it uses the host network, so device {} of claim {}/{} cannot be moved into \
                     it: remove hostNetwork or claim an RDMA-only device",
                    d.device, c.namespace, c.name
                ),
            });
        }
        let mut record = PodRecord {
            version: STORE_VERSION,
            sandbox_id: pod.id.clone(),
            uid: pod.uid.clone(),
            pod: who.clone(),
            netns: netns.clone(),
            rdma_moved: Vec::new(),
        };
        // Kept in memory; written to the store only when an RDMA-only device moves into the
        // pod: for netdevs the attach journal already keeps the pod's namespace, durably, before
        // anything moves.
        lock(&self.state)
            .pods
            .insert(pod.id.clone(), record.clone());

        let mut attached: Vec<(String, Attached)> = Vec::new();
        let mut result = Ok(());
        if let Some(ns) = &netns {
            // The links of a pod move side by side: podnet locks per link, and the time of an
            // attach is mostly waiting for the kernel and the journal's fsyncs, so a pod of 8
            // NICs stays well inside the runtime's 2 s NRI timeout.
            let attaches = netdevs.iter().filter_map(|&(c, d)| {
                let link = d.netdev.as_deref()?;
                let key = d.key(&c.uid);
                Some(async move {
                    let req = AttachRequest {
                        key: &key,
                        owner: &pod.id,
                        link,
                        pod_netns: ns,
                        config: &d.config,
                        rdma_device: d.rdma.as_deref(),
                    };
                    let r = self.podnet.attach(&req).await;
                    (c, d, link, key, r)
                })
            });
            for (c, d, link, key, r) in futures::future::join_all(attaches).await {
                match r {
                    Ok(a) => attached.push((key, a)),
                    Err(e) => {
                        tracing::warn!(pod = %who, claim = %format!("{}/{}", c.namespace, c.name), device = %d.device, link, netns = %ns.display(), error = %e, "attach failed");
                        if result.is_ok() {
                            result = Err(Error::Pod {
                                pod: who.clone(),
                                reason: device_failure(c, d, &e),
                            });
                        }
                    }
                }
            }
            // RDMA-only devices belong to the pod's namespace in exclusive mode.
            if result.is_ok() && self.rdma_mode == NetnsMode::Exclusive {
                result = self.move_rdma_only(&claims, ns, &mut record).await;
            }
        }
        if let Err(e) = result {
            // Give back what was done, newest first; the failure is what the runtime reports.
            for (key, _) in attached.iter().rev() {
                if let Err(x) = self.podnet.detach(key).await {
                    tracing::error!(pod = %who, key, error = %x, "rolling back an attach failed; recovery retries");
                }
            }
            self.return_rdma(&mut record).await;
            return Err(e);
        }
        self.report_status(&claims, &attached);
        Ok(())
    }

    async fn move_rdma_only(
        &self,
        claims: &[Arc<ClaimRecord>],
        netns: &Path,
        record: &mut PodRecord,
    ) -> Result<()> {
        let pod = record.pod.clone();
        let fail = |c: &ClaimRecord, d: &DeviceRecord, e: Error| {
            tracing::warn!(pod = %pod, claim = %format!("{}/{}", c.namespace, c.name), device = %d.device, rdma = ?d.rdma, error = %e, "moving an RDMA-only device into the pod failed");
            Error::RdmaAttach {
                pod: pod.clone(),
                reason: device_failure(c, d, &e),
            }
        };
        let mut pod_ns = None;
        for c in claims {
            for d in c.devices.iter().filter(|d| d.netdev.is_none()) {
                let Some(dev) = &d.rdma else { continue };
                if pod_ns.is_none() {
                    pod_ns = Some(crate::netns::Netns::open(netns).map_err(|e| fail(c, d, e))?);
                }
                let Some(ns) = pod_ns.as_ref() else { continue };
                // Recorded first: a crash after the move still knows to give it back.
                record.rdma_moved.push(dev.clone());
                self.store.put_pod(record).map_err(|e| fail(c, d, e))?;
                crate::rdma::move_device(dev, self.podnet.host(), ns).map_err(|e| fail(c, d, e))?;
            }
        }
        lock(&self.state)
            .pods
            .insert(record.sandbox_id.clone(), record.clone());
        Ok(())
    }

    /// Moves RDMA-only devices back to the host. Never fails: a device left in a namespace goes
    /// back to the host by itself when the namespace is deleted.
    async fn return_rdma(&self, record: &mut PodRecord) {
        if record.rdma_moved.is_empty() {
            return;
        }
        if let Some(ns) = record
            .netns
            .as_ref()
            .and_then(|p| crate::netns::Netns::open(p).ok())
        {
            for dev in &record.rdma_moved {
                let here = crate::rdma::devices(&ns)
                    .map(|d| d.iter().any(|(_, n)| n == dev))
                    .unwrap_or(false);
                if here && let Err(e) = crate::rdma::move_device(dev, &ns, self.podnet.host()) {
                    tracing::warn!(pod = %record.pod, device = %dev, error = %e, "could not move the RDMA device back; the kernel returns it when the pod's namespace goes");
                }
            }
        }
        record.rdma_moved.clear();
        if let Err(e) = self.store.put_pod(record) {
            tracing::warn!(pod = %record.pod, error = %e, "could not update the pod record");
        }
    }

    /// The devices a container of `pod_uid` gets: every char device of every RDMA link of its
    /// claims, once each, sorted by path.
    pub fn container_devices(&self, pod_uid: &str) -> Vec<CharDevice> {
        let st = lock(&self.state);
        let Some(claims) = st.by_pod.get(pod_uid) else {
            return Vec::new();
        };
        let mut out: BTreeMap<&str, &CharDevice> = BTreeMap::new();
        for c in claims.iter().filter_map(|c| st.claims.get(c)) {
            for d in &c.devices {
                for cd in &d.char_devices {
                    out.entry(cd.path.as_str()).or_insert(cd);
                }
            }
        }
        out.into_values().cloned().collect()
    }

    /// What StopPodSandbox does: RDMA devices back first, then each netdev, restoring the host.
    /// Never fails; what could not be restored stays recorded for [`NetworkDriver::synchronize_pods`].
    pub async fn stop_pod(&self, pod: &PodSandbox) {
        let record = lock(&self.state).pods.get(&pod.id).cloned();
        if let Some(mut r) = record {
            self.return_rdma(&mut r).await;
            lock(&self.state).pods.insert(r.sandbox_id.clone(), r);
        }
        // The journal knows every link this sandbox holds, even one whose attach was cut off.
        let keys: Vec<String> = match self.podnet.journal().entries() {
            Ok(es) => es
                .into_iter()
                .filter(|e| e.owner == pod.id)
                .map(|e| e.key)
                .collect(),
            Err(e) => {
                tracing::error!(pod = %pod.qualified_name(), error = %e, "cannot read the attach journal");
                return;
            }
        };
        for key in keys {
            if let Err(e) = self.podnet.detach(&key).await {
                tracing::error!(pod = %pod.qualified_name(), key, error = %e, "could not give the host its link back; recovery retries");
            }
        }
    }

    /// What RemovePodSandbox does: forgets the sandbox.
    pub async fn remove_pod(&self, pod: &PodSandbox) {
        self.stop_pod(pod).await;
        lock(&self.state).pods.remove(&pod.id);
        if let Err(e) = self.store.remove_pod(&pod.id) {
            tracing::warn!(pod = %pod.qualified_name(), error = %e, "could not forget the pod");
        }
    }

    /// What Synchronize does (after a daemon or runtime restart, or a reconnection): sandboxes
    /// in `live` keep their devices; everything given to sandboxes that are gone comes back to
    /// the host; and live sandboxes with prepared netdevs that nothing was attached to (they
    /// started while the runtime could not reach this plugin, which containerd allows) get them
    /// now, side by side. Their failures are in the answer, for the caller to report on the
    /// pods: they do not fail the Synchronize, which would only disconnect the plugin again.
    pub async fn synchronize_pods(&self, live: &[PodSandbox]) -> Result<Synchronized> {
        let live_ids: HashSet<&str> = live.iter().map(|p| p.id.as_str()).collect();
        let recovery = self
            .podnet
            .recover(|e| live_ids.contains(e.owner.as_str()))
            .await?;
        self.restores_owed
            .store(recovery.failed.len(), Ordering::Relaxed);
        if !recovery.restored.is_empty() || !recovery.failed.is_empty() {
            tracing::info!(restored = ?recovery.restored, gone = ?recovery.gone, failed = recovery.failed.len(), "links of pods that went away");
        }
        let dead: Vec<PodRecord> = lock(&self.state)
            .pods
            .values()
            .filter(|p| !live_ids.contains(p.sandbox_id.as_str()))
            .cloned()
            .collect();
        for mut p in dead {
            self.return_rdma(&mut p).await;
            lock(&self.state).pods.remove(&p.sandbox_id);
            self.store.remove_pod(&p.sandbox_id)?;
        }
        let held: HashSet<(String, String)> = self
            .podnet
            .journal()
            .entries()?
            .into_iter()
            .map(|e| (e.key, e.owner))
            .collect();
        let mut owed: Vec<&PodSandbox> = Vec::new();
        for pod in live {
            let claims = self.claims_of_pod(&pod.uid);
            let unattached = claims.iter().any(|c| {
                c.devices
                    .iter()
                    .any(|d| d.netdev.is_some() && !held.contains(&(d.key(&c.uid), pod.id.clone())))
            });
            if unattached {
                owed.push(pod);
                continue;
            }
            // A live sandbox we never saw start (this daemon was down): remember its namespace.
            let known = lock(&self.state).pods.contains_key(&pod.id);
            if !known && !claims.is_empty() {
                let r = PodRecord {
                    version: STORE_VERSION,
                    sandbox_id: pod.id.clone(),
                    uid: pod.uid.clone(),
                    pod: pod.qualified_name(),
                    netns: pod.netns_path().map(PathBuf::from),
                    rdma_moved: Vec::new(),
                };
                if let Err(e) = self.store.put_pod(&r) {
                    tracing::warn!(pod = %r.pod, error = %e, "could not record the pod; it is kept in memory");
                }
                lock(&self.state).pods.insert(pod.id.clone(), r);
            }
        }
        let mut out = Synchronized::default();
        let results = futures::future::join_all(owed.iter().map(|p| self.start_pod(p))).await;
        for (pod, r) in owed.iter().zip(results) {
            match r {
                Ok(()) => {
                    tracing::info!(pod = %pod.qualified_name(), "pod started while the runtime could not reach this plugin: devices attached now");
                    out.attached.push(pod.id.clone());
                }
                Err(e) => {
                    tracing::error!(pod = %pod.qualified_name(), error = %e, "pod started while the runtime could not reach this plugin, and its devices cannot be attached");
                    out.failed.push((pod.id.clone(), e));
                }
            }
        }
        self.synchronized.send_replace(true);
        Ok(out)
    }

    /// The claims of `pod`'s namespace prepared for other pods that now list `pod` in their
    /// `reservedFor` (read from the API server): the kubelet does not prepare a claim twice on
    /// a node, so the driver is never told. A shareable claim (see [`crate::claim`]) is
    /// extended to the pod and returned; any other is an error.
    async fn late_claims(&self, pod: &PodSandbox) -> Result<Vec<Arc<ClaimRecord>>> {
        let Some(reader) = &self.claims else {
            return Ok(Vec::new());
        };
        let candidates: Vec<Arc<ClaimRecord>> = lock(&self.state)
            .claims
            .values()
            .filter(|c| c.namespace == pod.namespace && !c.pods.iter().any(|p| p.uid == pod.uid))
            .cloned()
            .collect();
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let reads = futures::future::join_all(
            candidates
                .iter()
                .map(|c| reader(c.namespace.clone(), c.name.clone())),
        );
        let Ok(now) = tokio::time::timeout(LATE_CLAIMS_TIMEOUT, reads).await else {
            tracing::warn!(pod = %pod.qualified_name(), claims = candidates.len(), "the API server did not answer in time; a claim this pod was added to after it was prepared would be missed");
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (c, read) in candidates.into_iter().zip(now) {
            let claim = match read {
                Ok(claim) => claim,
                Err(e) => {
                    tracing::debug!(claim = %format!("{}/{}", c.namespace, c.name), error = %e, "claim not readable");
                    continue;
                }
            };
            // The same name may be a new claim by now.
            if claim.metadata.uid.as_deref().is_some_and(|u| u != c.uid) {
                continue;
            }
            let Ok(pods) = claim::pods_of(&claim) else {
                continue;
            };
            let Some(late) = pods.into_iter().find(|p| p.uid == pod.uid) else {
                continue;
            };
            if let Some(d) = c.devices.iter().find(|d| self.moves_into_pod(d)) {
                let first: Vec<&str> = c.pods.iter().map(|p| p.name.as_str()).collect();
                return Err(Error::Pod {
                    pod: pod.qualified_name(),
                    reason: format!(
                        "claim {}/{} was prepared on this node for {}; this pod was added to its \
                         reservedFor after, but device {} {}, which can be in one pod only: \
                         give this pod a claim of its own",
                        c.namespace,
                        c.name,
                        first.join(", "),
                        d.device,
                        self.why_one_pod(d)
                    ),
                });
            }
            let mut shared = (*c).clone();
            shared.pods.push(late);
            self.store.put_claim(&shared).map_err(|e| {
                tracing::error!(claim = %format!("{}/{}", c.namespace, c.name), error = %e, "could not record the claim's new pod");
                Error::Pod {
                    pod: pod.qualified_name(),
                    reason: format!("claim {}/{}: {}", c.namespace, c.name, e.user_message()),
                }
            })?;
            tracing::info!(claim = %format!("{}/{}", c.namespace, c.name), pod = %pod.qualified_name(), "pod added to a shared claim after it was prepared: it gets the claim's devices");
            lock(&self.state).insert_claim(shared);
            out.extend(
                self.claims_of_pod(&pod.uid)
                    .into_iter()
                    .filter(|x| x.uid == c.uid),
            );
        }
        Ok(out)
    }

    /// Writes the status of the pod's claims in the background: the hook does not wait on the
    /// API server.
    fn report_status(&self, claims: &[Arc<ClaimRecord>], attached: &[(String, Attached)]) {
        let Some(writer) = self.status.clone() else {
            return;
        };
        let by_key: HashMap<&str, &Attached> =
            attached.iter().map(|(k, a)| (k.as_str(), a)).collect();
        let now = Time(jiff_now());
        for c in claims {
            let devices: Vec<AllocatedDeviceStatus> = c
                .devices
                .iter()
                .map(|d| device_status(d, by_key.get(d.key(&c.uid).as_str()).copied(), &now))
                .collect();
            let (ns, name) = (c.namespace.clone(), c.name.clone());
            let writer = writer.clone();
            tokio::spawn(async move {
                let backoff = dranet_util::Backoff::new(
                    std::time::Duration::from_millis(200),
                    std::time::Duration::from_secs(10),
                );
                for attempt in 0..STATUS_ATTEMPTS {
                    match writer(ns.clone(), name.clone(), devices.clone()).await {
                        Ok(()) => return,
                        Err(e) => {
                            tracing::warn!(claim = %format!("{ns}/{name}"), attempt, error = %e, "writing claim status failed");
                            tokio::time::sleep(backoff.delay(attempt)).await;
                        }
                    }
                }
            });
        }
    }
}

/// What a pod's owner is told when one device of a claim could not be given to the pod.
fn device_failure(c: &ClaimRecord, d: &DeviceRecord, e: &Error) -> String {
    format!(
        "claim {}/{} device {}: {}",
        c.namespace,
        c.name,
        d.device,
        e.user_message()
    )
}

fn jiff_now() -> dranet_kubeletplugin::k8s_openapi::jiff::Timestamp {
    dranet_kubeletplugin::k8s_openapi::jiff::Timestamp::now()
}

fn condition(kind: &str, reason: &str, message: String, now: &Time) -> Condition {
    Condition {
        type_: kind.into(),
        status: "True".into(),
        reason: reason.into(),
        message,
        last_transition_time: now.clone(),
        observed_generation: None,
    }
}

/// The status entry of one device: network data when its netdev is in the pod, and conditions.
pub fn device_status(
    d: &DeviceRecord,
    attached: Option<&Attached>,
    now: &Time,
) -> AllocatedDeviceStatus {
    let mut conditions = Vec::new();
    let mut network_data = None;
    match (attached, &d.netdev) {
        (Some(a), Some(_)) => {
            conditions.push(condition(
                "Ready",
                "NetworkDeviceReady",
                format!("{} is {} in the pod", d.device, a.pod_name),
                now,
            ));
            conditions.push(condition(
                "NetworkReady",
                "NetworkReady",
                format!("{} configured", a.pod_name),
                now,
            ));
            network_data = Some(NetworkDeviceData {
                interface_name: Some(a.pod_name.clone()),
                ips: Some(a.addresses.clone()).filter(|v| !v.is_empty()),
                hardware_address: a.mac.clone(),
            });
        }
        (None, None) if d.rdma.is_some() => conditions.push(condition(
            "Ready",
            "RDMAOnlyDeviceReady",
            format!(
                "{} character devices given to the pod",
                d.char_devices.len()
            ),
            now,
        )),
        _ => {}
    }
    if let Some(link) = &d.rdma {
        conditions.push(condition(
            "RDMALinkReady",
            "RDMALinkReady",
            format!("RDMA link {link} available to the pod"),
            now,
        ));
    }
    AllocatedDeviceStatus {
        driver: DRIVER_NAME.into(),
        pool: d.pool.clone(),
        device: d.device.clone(),
        share_id: d.share_id.clone(),
        conditions: Some(conditions).filter(|c| !c.is_empty()),
        network_data,
        data: None,
    }
}

impl Driver for NetworkDriver {
    async fn prepare(&self, claim: ClaimToPrepare) -> std::result::Result<Prepared, HandlerError> {
        Ok(self.prepare_claim(&claim).await?)
    }

    async fn unprepare(&self, claim: ClaimToUnprepare) -> std::result::Result<(), HandlerError> {
        Ok(self.unprepare_claim(&claim.claim_ref.uid)?)
    }
}

impl NriPlugin for NetworkDriver {
    async fn synchronize(
        &self,
        pods: &[PodSandbox],
        _containers: &[Container],
    ) -> std::result::Result<(), HandlerError> {
        // The failures are logged by synchronize_pods; the daemon's wrapper also records them
        // as Events on the pods.
        self.synchronize_pods(pods).await.map(drop)?;
        Ok(())
    }

    async fn run_pod_sandbox(&self, pod: &PodSandbox) -> std::result::Result<(), HandlerError> {
        Ok(self.start_pod(pod).await?)
    }

    async fn stop_pod_sandbox(&self, pod: &PodSandbox) -> std::result::Result<(), HandlerError> {
        self.stop_pod(pod).await;
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: &PodSandbox) -> std::result::Result<(), HandlerError> {
        self.remove_pod(pod).await;
        Ok(())
    }

    async fn create_container(
        &self,
        pod: &PodSandbox,
        _container: &Container,
    ) -> std::result::Result<ContainerAdjustment, HandlerError> {
        let mut adj = ContainerAdjustment::new();
        for d in self.container_devices(&pod.uid) {
            adj.add_device(LinuxDevice::char(
                d.path,
                i64::from(d.major),
                i64::from(d.minor),
            ))?;
        }
        Ok(adj)
    }
}
