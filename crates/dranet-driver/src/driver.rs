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
//!
//! A claim's named `profile` is resolved by the profile provider at prepare and released at
//! unprepare (see [`NetworkDriver::release_profiles`]); what was asked is recorded in the kubelet
//! plugin's checkpoint, which the plugin hands the driver at start ([`Driver::restore_records`]).

mod leases;
mod metadata;
mod profiles;
mod rdma_only;
mod restore;
mod runtime_hooks;
mod source_tables;
mod status;

use status::Stage;
mod sync;

pub use status::device_status;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use dranet_core::{
    CharDevice, CloudProvider, DeviceIdentifiers, Inventory, NetworkConfig, NetworkDevice, NoCloud,
    ProfileProvider,
};
use dranet_kubeletplugin::cdi::{CdiDevice, CdiWriter, ContainerEdits, Hook as CdiHook};
use dranet_kubeletplugin::k8s_openapi::api::resource::v1::{
    AllocatedDeviceStatus, NetworkDeviceData, ResourceClaim,
};
use dranet_kubeletplugin::k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use dranet_kubeletplugin::{
    ClaimToPrepare, ClaimToUnprepare, Driver, DriverRecords, HandlerError, KubeApi, Prepared,
    PreparedClaim, PreparedDevice,
};
use dranet_nri::{Container, ContainerAdjustment, LinuxDevice, NriPlugin, PodSandbox};
use dranet_podnet::rdma::NetnsMode;
use dranet_podnet::{AttachRequest, Attached, PodNet, PreflightError, check_parent_addresses};
use futures::StreamExt;
use futures::future::BoxFuture;

use crate::attach::HookConfig;
use crate::claim::PodRef;
use crate::claim::{self, DRIVER_NAME};
use crate::record::{self, ClaimRecord, DeviceRecord};
use crate::refresh::{DEFAULT_REFRESH_TIMEOUT, ProviderRefresh};
use crate::store::{PodRecord, STORE_VERSION, Store};
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

/// Told how one device's attach into a pod ended (`true`: it is in) and how long it took.
pub type DeviceTimer = Arc<dyn Fn(bool, std::time::Duration) + Send + Sync>;

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
    profiles: Option<Arc<dyn ProfileProvider>>,
    status: Option<StatusWriter>,
    device_timer: Option<DeviceTimer>,
    claims: Option<ClaimReader>,
    rdma_mode: Option<NetnsMode>,
    boot_id: Option<Option<String>>,
    refresh_timeout: std::time::Duration,
    barrier: Option<Barrier>,
}

/// The hook a claim's CDI device gives its pod's containers ([`crate::attach`]).
#[derive(Debug, Clone)]
struct Barrier {
    cdi: CdiWriter,
    hook: HookConfig,
}

/// The CDI kind of the device that carries the hook.
pub const CDI_KIND: &str = "dra.net/pod";

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

    /// How long one refresh of the cloud provider may take, all devices together (default
    /// [`DEFAULT_REFRESH_TIMEOUT`]; see [`crate::refresh`]).
    #[must_use]
    pub fn refresh_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.refresh_timeout = timeout;
        self
    }

    /// Resolves claims' named profiles with `provider` (upstream's `--profile-provider`); without
    /// one, a claim that names a profile is refused.
    #[must_use]
    pub fn profiles(mut self, provider: Arc<dyn ProfileProvider>) -> Self {
        self.profiles = Some(provider);
        self
    }

    /// Writes claim status (network data and conditions) through `writer`: each device's
    /// entry as it attaches, the newest entries of a claim winning over any not yet written.
    #[must_use]
    pub fn status(mut self, writer: StatusWriter) -> Self {
        self.status = Some(writer);
        self
    }

    /// Tells `timer` how each device's attach into a pod ended and how long it took.
    #[must_use]
    pub fn device_timer(mut self, timer: DeviceTimer) -> Self {
        self.device_timer = Some(timer);
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

    /// The boot the driver runs in, instead of the kernel's
    /// `/proc/sys/kernel/random/boot_id` (tests simulate a reboot with it; see
    /// [`crate::record`]). `None`: no boot is known, and every restored record is checked.
    #[must_use]
    pub fn boot_id(mut self, id: Option<String>) -> Self {
        self.boot_id = Some(id);
        self
    }

    /// Gives every prepared claim a CDI device, written in `cdi_dir`, that adds `hook` to its
    /// pod's containers as an OCI `createRuntime` hook: the container waits there for its
    /// pod's devices, with or without the NRI connection ([`crate::attach`]).
    pub fn hook(mut self, cdi_dir: impl Into<PathBuf>, hook: HookConfig) -> Result<Self> {
        let dir = cdi_dir.into();
        let cdi = CdiWriter::new(&dir, CDI_KIND).map_err(|e| Error::Store {
            path: dir,
            reason: e.to_string(),
        })?;
        self.barrier = Some(Barrier { cdi, hook });
        Ok(self)
    }

    /// Opens the store of pod sandboxes, loads what earlier runs of this boot recorded and takes
    /// the first inventory (blocking: call it before starting the plugins, or from a blocking
    /// task). The prepared claims come back from the kubelet plugin's checkpoint
    /// ([`NetworkDriver::restore_claims`]).
    pub fn build(self) -> Result<NetworkDriver> {
        let store = Store::open(&self.state_dir)?;
        let inventory = (self.rescan)().map_err(|reason| Error::Claim {
            claim: "(none)".into(),
            reason: format!("discovery: {reason}"),
        })?;
        let mut state = State::default();
        for p in store.pods()? {
            state.pods.insert(p.sandbox_id.clone(), p);
        }
        let rdma_mode = match self.rdma_mode {
            Some(m) => m,
            None => dranet_podnet::rdma::netns_mode().unwrap_or_else(|e| {
                tracing::info!(error = %e, "RDMA netns mode unknown (no RDMA netlink); treating it as shared");
                NetnsMode::Shared
            }),
        };
        Ok(NetworkDriver {
            podnet: self.podnet,
            store,
            quarantine: self.state_dir.join("quarantine"),
            boot_id: self.boot_id.unwrap_or_else(record::boot_id),
            rescan: self.rescan,
            refresh: ProviderRefresh::new(self.cloud.clone(), self.refresh_timeout),
            cloud: self.cloud,
            profiles: self.profiles,
            profile_locks: dranet_util::NamedLocks::default(),
            records: RwLock::new(None),
            status: self.status.map(status::StatusBoard::new),
            device_timer: self.device_timer,
            claims: self.claims,
            rdma_mode,
            inventory: RwLock::new(Arc::new(inventory)),
            state: Mutex::new(state),
            restores_owed: AtomicUsize::new(0),
            synchronized: tokio::sync::watch::Sender::new(false),
            barrier: self.barrier,
            metadata: OnceLock::new(),
            published: RwLock::new(Arc::default()),
        })
    }
}

/// A claim the checkpoint holds as prepared whose record cannot be read: its pods fail to start
/// with this reason until the claim is unprepared.
#[derive(Debug)]
struct Unusable {
    namespace: String,
    name: String,
    pods: Vec<PodRef>,
    reason: String,
}

#[derive(Default)]
struct State {
    claims: HashMap<String, Arc<ClaimRecord>>,
    unusable: HashMap<String, Arc<Unusable>>,
    /// Pod UID → the UIDs of its claims (usable or not).
    by_pod: HashMap<String, Vec<String>>,
    /// Sandbox ID → what we did to it.
    pods: HashMap<String, PodRecord>,
}

impl State {
    fn insert_claim(&mut self, c: ClaimRecord) -> Arc<ClaimRecord> {
        self.remove_claim(&c.uid);
        self.index(&c.uid, &c.pods);
        let c = Arc::new(c);
        self.claims.insert(c.uid.clone(), c.clone());
        c
    }

    fn insert_unusable(&mut self, uid: &str, u: Unusable) {
        self.remove_claim(uid);
        self.index(uid, &u.pods);
        self.unusable.insert(uid.to_string(), Arc::new(u));
    }

    fn index(&mut self, uid: &str, pods: &[PodRef]) {
        for p in pods {
            self.by_pod
                .entry(p.uid.clone())
                .or_default()
                .push(uid.to_string());
        }
    }

    fn remove_claim(&mut self, uid: &str) {
        let pods = match (self.claims.remove(uid), self.unusable.remove(uid)) {
            (Some(c), _) => c.pods.clone(),
            (None, Some(u)) => u.pods.clone(),
            (None, None) => return,
        };
        for p in &pods {
            if let Some(v) = self.by_pod.get_mut(&p.uid) {
                v.retain(|c| c != uid);
                if v.is_empty() {
                    self.by_pod.remove(&p.uid);
                }
            }
        }
    }

    fn unusable_of(&self, pod_uid: &str) -> Vec<Arc<Unusable>> {
        self.by_pod
            .get(pod_uid)
            .into_iter()
            .flatten()
            .filter_map(|c| self.unusable.get(c).cloned())
            .collect()
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
    /// Where unreadable claim records from the checkpoint are copied for an operator.
    quarantine: PathBuf,
    /// The boot this driver runs in ([`crate::record`]).
    boot_id: Option<String>,
    rescan: Rescan,
    /// Refreshes of `cloud`, off the callers' tasks (the daemon's too).
    refresh: ProviderRefresh,
    cloud: Arc<dyn CloudProvider>,
    profiles: Option<Arc<dyn ProfileProvider>>,
    /// A claim's profiles are asked for or released by one task at a time, so that a release
    /// retried in the background never crosses a prepare of the same claim; other claims go on.
    profile_locks: dranet_util::NamedLocks,
    /// The driver's records in the kubelet plugin's checkpoint (profile records), once the
    /// plugin has handed them over ([`NetworkDriver::restore_records`]).
    records: RwLock<Option<DriverRecords>>,
    status: Option<Arc<status::StatusBoard>>,
    device_timer: Option<DeviceTimer>,
    claims: Option<ClaimReader>,
    rdma_mode: NetnsMode,
    inventory: RwLock<Arc<Inventory>>,
    state: Mutex<State>,
    /// Journal entries of gone pods whose restore failed at the last synchronize.
    restores_owed: AtomicUsize,
    /// Set once the runtime's first Synchronize was handled (host restores owed are done).
    synchronized: tokio::sync::watch::Sender<bool>,
    barrier: Option<Barrier>,
    /// Fills the claims' device metadata files, once the kubelet plugin has handed it over.
    metadata: OnceLock<dranet_kubeletplugin::MetadataUpdater>,
    /// What each device is published with, for its metadata.
    published: RwLock<Arc<metadata::PublishedAttributes>>,
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
            profiles: None,
            status: None,
            device_timer: None,
            claims: None,
            rdma_mode: None,
            boot_id: None,
            refresh_timeout: DEFAULT_REFRESH_TIMEOUT,
            barrier: None,
        }
    }

    /// The refreshes of the cloud provider: the daemon requests one after each of its scans,
    /// and republishes when one ends.
    pub fn provider_refresh(&self) -> &ProviderRefresh {
        &self.refresh
    }

    /// What [`Driver::restore_records`] does: keeps the handle of the driver's records in the
    /// kubelet plugin's checkpoint (where profile records are kept), and moves there the profile
    /// records an earlier version left in the state directory.
    pub async fn restore_records(&self, records: DriverRecords) {
        *self.records.write().unwrap_or_else(PoisonError::into_inner) = Some(records.clone());
        self.adopt_legacy_profiles(&records).await;
    }

    /// The driver's records in the checkpoint, once the kubelet plugin has handed them over.
    fn records(&self) -> Option<DriverRecords> {
        self.records
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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
        // Not waited for: a prepare waits only for what its devices need (see prepare_claim).
        self.refresh
            .request(inv.devices.iter().map(DeviceIdentifiers::of).collect());
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

    /// The state of the netdevs in pods, by device name ([`PodNet::pod_link_faults`]; the
    /// journal's keys are [`crate::record::DeviceRecord::key`]s, `<claim UID>.<device>`).
    pub async fn pod_link_faults(&self) -> BTreeMap<String, Option<dranet_core::health::Fault>> {
        self.podnet
            .pod_link_faults()
            .await
            .into_iter()
            .filter_map(|(key, f)| Some((key.rsplit_once('.')?.1.to_string(), f)))
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
    /// config (see [`dranet_podnet::check_config`]), the device's own limits and ethtool names
    /// when its interface is on the host, and a device that moves into a pod's namespace
    /// (a network interface; an RDMA device in exclusive mode) reserved for more than one pod.
    /// Claims of RDMA-only devices may be shared by pods in the kernel's shared RDMA mode, where
    /// every namespace sees the device.
    ///
    /// The claim's record is the returned [`Prepared::state`], for the kubelet plugin's
    /// checkpoint (see [`crate::record`]).
    pub async fn prepare_claim(&self, claim: &ClaimToPrepare) -> Result<Prepared> {
        let cref = claim.claim_ref.to_string();
        let fail = |reason: String| Error::Claim {
            claim: cref.clone(),
            reason,
        };
        let pods = claim::pods_of(&claim.claim).map_err(|e| fail(e.to_string()))?;
        let mut inv = self.inventory();
        if claim
            .results
            .iter()
            .any(|r| inv.device(&r.device).is_none())
        {
            inv = self.rescan().await.map_err(|e| {
                tracing::warn!(claim = %cref, error = %e, "rescan at prepare failed");
                fail(
                    "the node's devices could not be scanned (see the dranet log on the node)"
                        .into(),
                )
            })?;
        }
        // The provider's configuration of a device goes under the claim's: a device it was not
        // asked about yet (just after a start, or just plugged) waits for the refresh that asks,
        // bounded by the refresh timeout.
        let needed: Vec<DeviceIdentifiers> = claim
            .results
            .iter()
            .filter_map(|r| inv.device(&r.device))
            .map(DeviceIdentifiers::of)
            .collect();
        let all = || inv.devices.iter().map(DeviceIdentifiers::of).collect();
        if !self.refresh.cover(&needed, all).await {
            tracing::warn!(claim = %cref, provider = self.cloud.name(), timeout = ?self.refresh.timeout(), "no refresh of the cloud provider asking about the claim's devices ended within the refresh timeout; the claim gets the provider's configuration as far as it answered before");
        }
        // Parsing, merging and checking what the claim's author wrote is CPU work that grows with
        // it: off the async workers, which serve every other claim and pod meanwhile.
        let mut devices = {
            let (c, inv, cloud) = (claim.clone(), inv.clone(), self.cloud.clone());
            off_workers(&cref, move || record::device_records(&c, &inv, &*cloud))
                .await?
                .map_err(fail)?
        };
        // Devices whose configuration names a profile, checked once it is resolved.
        let mut profiled = Vec::new();
        for (i, d) in devices.iter().enumerate() {
            if !d.config.profile.is_empty() {
                if let Some(dev) = inv.device(&d.device) {
                    profiled.push((i, DeviceIdentifiers::of(dev)));
                }
                continue;
            }
            self.check_on_node(&d.config, d.rdma.is_some(), d.netdev.as_deref())
                .await
                .map_err(|e| fail(format!("device {}: {e}", d.device)))?;
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
        if profiled.is_empty() {
            self.ask_runtime_hooks(&claim.claim_ref, &mut devices, &inv)
                .await?;
            return self.complete_prepare(claim, pods, devices).await;
        }
        let prepared_before = lock(&self.state).claims.contains_key(&claim.claim_ref.uid);
        self.resolve_profiles(&claim.claim_ref, &mut devices, profiled, &inv)
            .await?;
        let done = match self
            .ask_runtime_hooks(&claim.claim_ref, &mut devices, &inv)
            .await
        {
            Ok(()) => self.complete_prepare(claim, pods, devices).await,
            Err(e) => Err(e),
        };
        // What the provider gave a claim that is not prepared now goes back (a claim prepared
        // before keeps its profiles, released at its unprepare).
        if done.is_err()
            && !prepared_before
            && let Err(e) = self.release_profiles(&claim.claim_ref.uid).await
        {
            tracing::error!(claim = %cref, error = %e, "the profiles of a failed prepare are kept unreleased; released at the claim's unprepare");
        }
        done
    }

    /// The end of [`NetworkDriver::prepare_claim`], once the devices' configurations are final:
    /// what can still refuse the claim, then its DHCP leases and its record.
    async fn complete_prepare(
        &self,
        claim: &ClaimToPrepare,
        pods: Vec<PodRef>,
        mut devices: Vec<DeviceRecord>,
    ) -> Result<Prepared> {
        let cref = claim.claim_ref.to_string();
        let fail = |reason: String| Error::Claim {
            claim: cref.clone(),
            reason,
        };
        // A share (consumable capacity) is one of several claims on the device: moving the NIC
        // into this pod would take it from the others.
        for d in &devices {
            let ty = d.config.interface_type();
            if let Some(share) = &d.share_id
                && !ty.is_child()
            {
                return Err(fail(format!(
                    "device {} is allocated as a share (shareID {share}) and other claims may \
                     hold it too: interface type {} would move the NIC into one pod; use a \
                     child type (Macvlan or IPVLAN)",
                    d.device,
                    ty.as_str()
                )));
            }
        }
        // Last, once nothing else can refuse the claim: a lease is taken from a server.
        self.take_leases(&claim.claim_ref, &mut devices).await?;
        let record = ClaimRecord {
            boot_id: self.boot_id.clone(),
            namespace: claim.claim_ref.namespace.clone(),
            name: claim.claim_ref.name.clone(),
            uid: claim.claim_ref.uid.clone(),
            pods,
            devices,
        };
        let (record, state) = off_workers(&cref, move || {
            let state = record.to_state();
            (record, state)
        })
        .await?;
        let state = match state {
            Ok(s) => s,
            Err(e) => {
                let mut devices = record.devices;
                self.release_leases(&cref, &mut devices).await;
                return Err(fail(e.to_string()));
            }
        };
        let hook_ids = match self.write_hook(&record) {
            Ok(ids) => ids,
            Err(e) => {
                let mut devices = record.devices;
                self.release_leases(&cref, &mut devices).await;
                return Err(e);
            }
        };
        lock(&self.state).insert_claim(record);
        Ok(Prepared {
            devices: claim
                .results
                .iter()
                .map(|r| {
                    let ids = hook_ids.get(&r.device).cloned().into_iter().collect();
                    PreparedDevice::for_result(r, ids)
                })
                .collect(),
            state: Some(state),
        })
    }

    /// The CDI spec of a claim whose netdevs go into its pods: a CDI device for each of its
    /// devices, each carrying the hook (the kubelet names a device by its CDI ID where it has
    /// one, in the pod's `allocatedResourcesStatus`, so every device gets its own, named after
    /// it). The IDs by device.
    fn write_hook(&self, c: &ClaimRecord) -> Result<BTreeMap<String, String>> {
        let Some(b) = &self.barrier else {
            return Ok(BTreeMap::new());
        };
        // A claim with nothing to attach to the pod's network and no runtime hook has nothing
        // to wait for.
        if !c
            .devices
            .iter()
            .any(|d| d.netdev.is_some() || d.runtime_hook.is_some())
        {
            return Ok(BTreeMap::new());
        }
        let runtime_hooks_bound = if c.devices.iter().any(|d| d.runtime_hook.is_some()) {
            use dranet_core::runtime_hook::{MAX_HOOKS_PER_POD, MAX_TIMEOUT_SECONDS};
            (MAX_HOOKS_PER_POD as u64) * u64::from(MAX_TIMEOUT_SECONDS)
        } else {
            0
        };
        let hook = CdiHook {
            hook_name: "createRuntime".into(),
            path: b.hook.path.to_string_lossy().into_owned(),
            args: b.hook.args(),
            env: Vec::new(),
            // The runtime's own bound, past the hook's and, with runtime hooks, past the most
            // the pod's may take.
            timeout: i64::try_from(b.hook.timeout.as_secs() + 10 + runtime_hooks_bound).ok(),
        };
        // A device shared by two results of the claim is one CDI device.
        let names: Vec<String> = c
            .devices
            .iter()
            .map(|d| d.device.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let devices = names
            .iter()
            .map(|n| CdiDevice::new(n.clone(), ContainerEdits::default().hook(hook.clone())))
            .collect();
        let ids = b.cdi.write_claim(&c.uid, devices).map_err(|e| Error::Claim {
            claim: format!("{}/{}", c.namespace, c.name),
            reason: format!(
                "could not write the CDI spec that holds the pod's containers until its devices \
                 are in: {e}"
            ),
        })?;
        Ok(names.into_iter().zip(ids).collect())
    }

    /// Checks a device's final configuration against the device as discovered and against its
    /// interface on the host.
    async fn check_config(
        &self,
        config: &NetworkConfig,
        dev: &NetworkDevice,
        inv: &Inventory,
    ) -> std::result::Result<(), String> {
        claim::check_device(config, dev, inv).map_err(|e| e.to_string())?;
        self.check_on_node(config, dev.rdma.is_some(), claim::pod_netdev(dev, config))
            .await
    }

    /// The checks of a configuration that need the node: the RDMA mode, and the interface on
    /// the host.
    async fn check_on_node(
        &self,
        config: &NetworkConfig,
        rdma: bool,
        netdev: Option<&str>,
    ) -> std::result::Result<(), String> {
        let ty = config.interface_type();
        if ty.is_child() && rdma && self.rdma_mode == NetnsMode::Exclusive {
            return Err(format!(
                "interface type {} is not supported with exclusive RDMA mode; use shared RDMA mode",
                ty.as_str()
            ));
        }
        if let Some(nd) = netdev {
            self.check_on_host(nd, config).await?;
        }
        Ok(())
    }

    /// Whether a device moves into its pod's network namespace (and so serves one pod).
    fn moves_into_pod(&self, d: &DeviceRecord) -> bool {
        // A child type leaves the netdev on the host: each pod gets a child of its own.
        (d.netdev.is_some() && !d.config.interface_type().is_child())
            || (d.rdma.is_some() && self.rdma_mode == NetnsMode::Exclusive)
    }

    fn why_one_pod(&self, d: &DeviceRecord) -> &'static str {
        if d.netdev.is_some() {
            "has a network interface"
        } else {
            "is an RDMA device, which the kernel's exclusive RDMA mode moves into the pod"
        }
    }

    /// Checks a config against the device's interface on the host ([`dranet_podnet::preflight`]:
    /// its own limits, ethtool feature names and private flags; for a child, the parent's
    /// addresses, [`check_parent_addresses`]). An interface the host does not see now (still in
    /// a pod), or whose ethtool settings or addresses cannot be read, is checked by the attach
    /// instead. The message is in the claim's terms.
    async fn check_on_host(
        &self,
        link: &str,
        config: &dranet_core::NetworkConfig,
    ) -> std::result::Result<(), String> {
        let host = self.podnet.host();
        let rtnl = match host.rtnl().await {
            Ok(rtnl) => rtnl,
            Err(e) => {
                tracing::debug!(link, error = %e, "host not readable at prepare; checked at attach");
                return Ok(());
            }
        };
        let l = match rtnl.link_by_name(link).await {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(()),
            Err(e) => {
                tracing::debug!(link, error = %e, "link not readable at prepare; checked at attach");
                return Ok(());
            }
        };
        if config.interface_type().is_child() {
            match rtnl.addresses(l.header.index).await {
                Ok(ips) => check_parent_addresses(config, &ips).map_err(|r| r.to_string())?,
                Err(e) => {
                    tracing::debug!(link, error = %e, "addresses not readable at prepare; checked at attach");
                }
            }
        }
        match dranet_podnet::preflight(host, &l, config) {
            Ok(_) => Ok(()),
            Err(PreflightError::Refused(r)) => Err(r.to_string()),
            Err(PreflightError::Unreadable(e)) => {
                tracing::debug!(link, error = %e, "ethtool settings not readable at prepare; checked at attach");
                Ok(())
            }
        }
    }

    /// What [`Driver::unprepare`] does: releases the claim's profiles (what the provider does
    /// not release now stays recorded and is released later, see
    /// [`NetworkDriver::retry_profile_releases`]) and its DHCP leases (sent once, from the
    /// record, which the checkpoint kept across restarts), and forgets the claim (its record
    /// goes with the checkpoint's entry). Idempotent. Fails, changing nothing else, when the
    /// claim's profile record cannot be updated: the kubelet's retry releases them.
    pub async fn unprepare_claim(&self, uid: &str) -> Result<()> {
        self.release_profiles(uid).await?;
        let leased = lock(&self.state).claims.get(uid).and_then(|c| {
            c.devices
                .iter()
                .any(|d| d.dhcp.is_some())
                .then(|| (format!("{}/{}", c.namespace, c.name), c.devices.clone()))
        });
        if let Some((cref, mut devices)) = leased {
            self.release_leases(&cref, &mut devices).await;
        }
        if let Some(b) = &self.barrier
            && let Err(e) = b.cdi.remove_claim(uid)
        {
            // A spec left behind names a claim that is gone: harmless, and retried by the
            // kubelet's next unprepare of it.
            tracing::warn!(claim = uid, error = %e, "could not remove the claim's CDI spec");
        }
        lock(&self.state).remove_claim(uid);
        Ok(())
    }

    /// What RunPodSandbox does, with this crate's error. The error says what is wrong in the
    /// pod owner's terms ([`Error::user_message`]); the host's details go to the log.
    pub async fn start_pod(&self, pod: &PodSandbox) -> Result<()> {
        let mut claims = self.sandbox_claims(pod).await?;
        let late = self.late_claims(pod).await?;
        let late_uids: Vec<String> = late.iter().map(|c| c.uid.clone()).collect();
        claims.extend(late);
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
        let devices: Vec<&DeviceRecord> = netdevs.iter().map(|&(_, d)| d).collect();
        let configs = source_tables::pod_configs(&devices).map_err(|reason| Error::Pod {
            pod: who.clone(),
            reason,
        })?;
        let mut record = PodRecord {
            version: STORE_VERSION,
            sandbox_id: pod.id.clone(),
            uid: pod.uid.clone(),
            pod: who.clone(),
            netns: netns.clone(),
            rdma_moved: Vec::new(),
            late_claims: late_uids,
        };
        // Kept in memory; written to the store only when an RDMA-only device moves into the
        // pod, or the pod joined a claim after its prepare: for netdevs the attach journal
        // already keeps the pod's namespace, durably, before anything moves.
        if !record.late_claims.is_empty()
            && let Err(e) = self.store.put_pod(&record)
        {
            tracing::error!(pod = %who, error = %e, "could not record the claims this pod joined after their prepare");
            return Err(Error::Pod {
                pod: who,
                reason: e.user_message(),
            });
        }
        lock(&self.state)
            .pods
            .insert(pod.id.clone(), record.clone());

        let mut attached: Vec<(String, Attached)> = Vec::new();
        let mut result = Ok(());
        if let Some(ns) = &netns {
            // The links of a pod move side by side: podnet locks per link, and the time of an
            // attach is mostly waiting for the kernel and the journal's fsyncs, so a pod of 8
            // NICs stays well inside the runtime's 2 s NRI timeout.
            let attaches = netdevs.iter().zip(&configs).filter_map(|(&(c, d), pc)| {
                let link = d.netdev.as_deref()?;
                let key = d.key(&c.uid);
                Some(async move {
                    let req = AttachRequest {
                        key: &key,
                        owner: &pod.id,
                        link,
                        pod_netns: ns,
                        config: &pc.config,
                        rdma_device: d.rdma.as_deref(),
                        source_table: pc.source_table,
                    };
                    let t = std::time::Instant::now();
                    let r = self.podnet.attach(&req).await;
                    (c, d, link, key, r, t.elapsed())
                })
            });
            let mut attaches: futures::stream::FuturesUnordered<_> = attaches.collect();
            let total = attaches.len();
            // Each device's status as it ends: a pod of many NICs shows how far it has come.
            while let Some((c, d, link, key, r, took)) = attaches.next().await {
                if let Some(timer) = &self.device_timer {
                    timer(r.is_ok(), took);
                }
                match r {
                    Ok(a) => {
                        attached.push((key, a));
                        if result.is_ok() && attached.len() < total {
                            self.report_status(&claims, &attached, Stage::Attaching);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(pod = %who, claim = %format!("{}/{}", c.namespace, c.name), device = %d.device, link, netns = %ns.display(), error = %e, "attach failed");
                        if result.is_ok() {
                            let slaac = e.is_slaac_timeout();
                            let reason = device_failure(c, d, &Error::from(e));
                            let pod = who.clone();
                            result = Err(if slaac {
                                Error::SlaacNotReady { pod, reason }
                            } else {
                                Error::Pod { pod, reason }
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
                // One of the two has it: the link journal, or the children journal (per pod).
                let undone = match self.podnet.detach(key).await {
                    Ok(()) => self.podnet.detach_child(key, &pod.id).await,
                    Err(x) => Err(x),
                };
                if let Err(x) = undone {
                    tracing::error!(pod = %who, key, error = %x, "rolling back an attach failed; recovery retries");
                }
            }
            self.return_rdma(&mut record).await;
            self.report_status(
                &claims,
                &[],
                Stage::Failed(&e.user_message(), e.is_slaac_timeout()),
            );
            return Err(e);
        }
        self.report_status(&claims, &attached, Stage::Done);
        // Before the attach ends: the pod's containers, held until then, read it whole.
        self.write_metadata(&claims, &attached).await;
        Ok(())
    }

    /// The devices a container of `pod_uid` gets: every char device of every RDMA link of its
    /// claims, once each, sorted by path.
    pub fn container_devices(&self, pod_uid: &str) -> Vec<CharDevice> {
        let st = lock(&self.state);
        let Some(claims) = st.by_pod.get(pod_uid) else {
            return Vec::new();
        };
        let mut out: BTreeMap<&str, &CharDevice> = BTreeMap::new();
        // A record of an earlier boot names that boot's char devices: only once checked (at
        // the sandbox's start) are they this boot's.
        let boot = self.boot_id.as_deref();
        for c in claims
            .iter()
            .filter_map(|c| st.claims.get(c))
            .filter(|c| c.of_boot(boot))
        {
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
        // Its children of shared NICs, each deleted on its own; other pods' stay.
        if let Err(e) = self.podnet.detach_children_of(&pod.id).await {
            tracing::error!(pod = %pod.qualified_name(), error = %e, "could not delete the pod's children; recovery retries");
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

/// Runs CPU work of a claim's prepare on the blocking pool.
async fn off_workers<T: Send + 'static>(
    claim: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Claim {
            claim: claim.to_string(),
            reason: format!("the prepare task failed: {e}"),
        })
}

impl Driver for NetworkDriver {
    async fn prepare(&self, claim: ClaimToPrepare) -> std::result::Result<Prepared, HandlerError> {
        Ok(self.prepare_claim(&claim).await?)
    }

    async fn unprepare(&self, claim: ClaimToUnprepare) -> std::result::Result<(), HandlerError> {
        Ok(self.unprepare_claim(&claim.claim_ref.uid).await?)
    }

    /// Inline: it runs once, before the plugin serves anything.
    async fn restore_prepared(&self, claims: Vec<PreparedClaim>) {
        self.restore_claims(claims);
    }

    async fn restore_records(&self, records: DriverRecords) {
        NetworkDriver::restore_records(self, records).await;
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
