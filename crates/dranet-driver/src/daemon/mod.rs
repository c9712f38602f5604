//! The node daemon (`dranet run`): discovery, the driver, the kubelet plugin and the NRI runner
//! composed into one process, with hot-plug, device health, metrics and a graceful shutdown.
//!
//! Start-up runs in this order, and `/readyz` answers 200 only at its end:
//!
//! 1. the first inventory scan (a failure here is fatal: nothing sensible can be published);
//! 2. the driver's store of pods and the attach journal are loaded;
//! 3. the kubelet plugin's sockets are served (its checkpoint gives the driver its prepared
//!    claims and profile records) and the kubelet registers the driver;
//! 4. the NRI plugin registers with the runtime, whose Synchronize gives back to the host every
//!    device a crash left in a pod that is gone;
//! 5. the first publication reaches the API server.
//!
//! The cloud provider's refresh (the webhook is asked about every device) is none of these: it
//! is requested after each scan and runs beside the main loop, bounded as a whole by
//! `refresh_timeout` ([`crate::refresh`]). The first publication goes without what the refresh
//! has not answered yet, and each refresh that ends is published again (only what changed is
//! written); a refresh that fails or is cut keeps the attributes of the last answers.
//!
//! Then the daemon rescans when the node changes (uevents and rtnetlink events, debounced),
//! and at least every `max_interval`, republishing when the device list changed and updating
//! device health for the kubelet. On shutdown it stops taking kubelet calls (the registration
//! socket goes first), lets running NRI hooks finish, and removes its sockets.

pub mod devices;
mod hooks;
pub mod http;
pub mod metrics;
mod process;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dranet_core::slice::PublishedDevice;
use dranet_core::{
    CloudProvider, DRIVER_NAME, DeviceIdentifiers, Inventory, NoCloud, ProfileProvider,
};
use dranet_kubeletplugin::{
    HealthReporter, KubeApi, KubeletPlugin, PublishState, RegistrationState,
};
use dranet_nri::{ConnectionState, RunnerBuilder};
use dranet_podnet::PodNet;
use dranet_podnet::netns::Netns;
use dranet_podnet::rdma::NetnsMode;
use tokio::sync::watch;

pub use hooks::{EventWriter, Instrumented, event_writer};

use crate::attach::{self, AttachPolicy, HookConfig};
use crate::publish::{Excluded, InUse, Policy, Warning, publication};
use crate::refresh::{DEFAULT_REFRESH_TIMEOUT, ProviderRefresh, Refreshed};
use crate::{NetworkDriver, Rescan, claim_reader, status_writer};

/// When the daemon rescans the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollConfig {
    /// Rescan at least this often, changes or not (upstream's `--inventory-max-poll-interval`).
    pub max_interval: Duration,
    /// Scans are rate limited to one per `min_interval` after a burst of `burst`
    /// (upstream's `--inventory-min-poll-interval` and `--inventory-poll-burst`).
    pub min_interval: Duration,
    /// See `min_interval`.
    pub burst: u32,
    /// After a change, wait until no other came for this long (a VF batch is dozens of
    /// uevents) before scanning, but never longer than 4× this after the first.
    pub debounce: Duration,
    /// Listen for uevents and rtnetlink events; off, only the periodic rescan sees changes.
    pub hotplug: bool,
}

impl Default for PollConfig {
    fn default() -> Self {
        Self {
            max_interval: Duration::from_secs(60),
            min_interval: Duration::from_secs(2),
            burst: 5,
            debounce: Duration::from_millis(50),
            hotplug: true,
        }
    }
}

/// Everything `dranet run` decides from its flags.
pub struct DaemonConfig {
    /// The node's name: the pool, the slices' `nodeName`.
    pub node_name: String,
    /// The kubelet's `--root-dir`.
    pub kubelet_root_dir: PathBuf,
    /// Where the driver keeps prepared claims and the attach journal.
    pub state_dir: PathBuf,
    /// The runtime's NRI socket.
    pub nri_socket: PathBuf,
    /// The NRI plugin index (order among plugins).
    pub nri_index: u8,
    /// `/metrics`, `/healthz`, `/readyz`; `None` serves none.
    pub bind_address: Option<SocketAddr>,
    /// What is published: attributes, `--filter`, `--share-filter` (default: every device,
    /// none shared).
    pub policy: Policy,
    /// Cloud attributes and per-NIC cloud config.
    pub cloud: Arc<dyn CloudProvider>,
    /// How long one refresh of `cloud` may take, all devices together.
    pub refresh_timeout: Duration,
    /// How long an attach with `addressing: SLAAC` waits for an autoconfigured IPv6 address
    /// (`--slaac-ready-timeout`).
    pub slaac_timeout: Duration,
    /// Resolves claims' named profiles (`--profile-provider`); `None` refuses them.
    pub profiles: Option<Arc<dyn ProfileProvider>>,
    /// RDMA namespace mode; `None` reads the kernel's.
    pub rdma_mode: Option<NetnsMode>,
    /// Rescans.
    pub poll: PollConfig,
    /// Longest wait for running NRI hooks at shutdown.
    pub shutdown_grace: Duration,
    /// How a pod's attach is timed against the runtime, and the hook its containers wait in
    /// ([`crate::attach`]).
    pub attach: AttachPolicy,
    /// The runtime's CDI directory, where the hook's CDI specs go (`--cdi-dir`), and the device
    /// metadata's.
    pub cdi_dir: PathBuf,
    /// Device metadata in the containers (`--enable-device-metadata`, KEP-5304): each claim
    /// request's devices described in a file mounted into the containers that use it.
    pub device_metadata: bool,
    /// The versions each device metadata file holds, newest first
    /// (`--device-metadata-versions`; default all).
    pub device_metadata_versions: Vec<dranet_kubeletplugin::metadata::MetadataVersion>,
}

impl std::fmt::Debug for DaemonConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonConfig")
            .field("node_name", &self.node_name)
            .field("kubelet_root_dir", &self.kubelet_root_dir)
            .field("state_dir", &self.state_dir)
            .field("nri_socket", &self.nri_socket)
            .field("bind_address", &self.bind_address)
            .field("policy", &self.policy)
            .field("cloud", &self.cloud.name())
            .field("refresh_timeout", &self.refresh_timeout)
            .field("profiles", &self.profiles.as_ref().map(|p| p.name()))
            .field("poll", &self.poll)
            .field("attach", &self.attach)
            .field("cdi_dir", &self.cdi_dir)
            .field("device_metadata", &self.device_metadata)
            .field("device_metadata_versions", &self.device_metadata_versions)
            .finish_non_exhaustive()
    }
}

impl DaemonConfig {
    /// Defaults for `node_name` as upstream has them.
    pub fn new(node_name: impl Into<String>) -> Self {
        Self {
            node_name: node_name.into(),
            kubelet_root_dir: PathBuf::from(dranet_kubeletplugin::DEFAULT_KUBELET_ROOT_DIR),
            state_dir: PathBuf::from("/var/run/dranet"),
            nri_socket: PathBuf::from(dranet_nri::DEFAULT_SOCKET_PATH),
            nri_index: 10,
            bind_address: None,
            policy: Policy::default(),
            cloud: Arc::new(NoCloud),
            refresh_timeout: DEFAULT_REFRESH_TIMEOUT,
            slaac_timeout: dranet_podnet::DEFAULT_SLAAC_TIMEOUT,
            profiles: None,
            rdma_mode: None,
            poll: PollConfig::default(),
            shutdown_grace: Duration::from_secs(20),
            attach: AttachPolicy::default(),
            cdi_dir: PathBuf::from(DEFAULT_CDI_DIR),
            // Off unless asked for (`dranet run` asks by default): it writes to `cdi_dir`.
            device_metadata: false,
            device_metadata_versions: dranet_kubeletplugin::metadata::MetadataVersion::ALL.to_vec(),
        }
    }
}

/// The runtime's default CDI directory.
pub const DEFAULT_CDI_DIR: &str = "/var/run/cdi";

/// The hook's socket, bound afresh (a socket file of an earlier run is replaced), and the
/// markers' directory.
fn hook_listener(h: &HookConfig) -> Result<tokio::net::UnixListener, DaemonError> {
    let io = |what: &str, path: &std::path::Path, e: std::io::Error| {
        DaemonError::Hook(format!("{what} {}: {e}", path.display()))
    };
    std::fs::create_dir_all(&h.markers).map_err(|e| io("create", &h.markers, e))?;
    if let Some(dir) = h.socket.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
    }
    match std::fs::remove_file(&h.socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(io("remove the old socket", &h.socket, e));
        }
        _ => {}
    }
    tokio::net::UnixListener::bind(&h.socket).map_err(|e| io("listen on", &h.socket, e))
}

/// Why the daemon could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The first inventory scan failed.
    #[error("discovery: {0}")]
    Discovery(String),
    /// The driver could not load its state.
    #[error("{0}")]
    Driver(#[from] crate::Error),
    /// The kubelet plugin could not start or one of its tasks died.
    #[error("kubelet plugin: {0}")]
    Plugin(#[from] dranet_kubeletplugin::Error),
    /// The NRI runner could not be built.
    #[error("NRI: {0}")]
    Nri(#[from] dranet_nri::Error),
    /// The hook's socket or markers could not be set up.
    #[error("hook: {0}")]
    Hook(String),
    /// The metrics endpoint could not listen.
    #[error("--bind-address {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// What `/healthz` and `/readyz` look at.
struct Probes {
    started: Instant,
    /// Milliseconds since `started` of the main loop's last turn.
    heartbeat: AtomicU64,
    ready: watch::Sender<bool>,
    registration: watch::Receiver<RegistrationState>,
    nri: watch::Receiver<ConnectionState>,
    publish: watch::Receiver<PublishState>,
}

/// The main loop turns at least this often.
const TICK: Duration = Duration::from_secs(1);

impl Probes {
    /// Whether the process itself is stuck: its main loop has not turned for ten ticks. The
    /// only thing a restart mends, so the only thing `/healthz` reports.
    fn stuck(&self) -> Option<String> {
        let beat = Duration::from_millis(self.heartbeat.load(Ordering::Relaxed));
        let since = self.started.elapsed().saturating_sub(beat);
        (since > TICK * 10).then(|| format!("main loop: last turned {since:?} ago"))
    }

    /// What is down, one line each: the process, and what it depends on (the kubelet, the
    /// runtime's NRI, the API server), which a restart does not mend.
    fn down(&self) -> Vec<String> {
        let mut down: Vec<String> = self.stuck().into_iter().collect();
        match &*self.registration.borrow() {
            RegistrationState::Registered => {}
            RegistrationState::Refused { error } => {
                down.push(format!("kubelet registration: refused: {error}"))
            }
            other => down.push(format!("kubelet registration: {other:?}")),
        }
        match &*self.nri.borrow() {
            ConnectionState::Registered => {}
            ConnectionState::Connecting => down.push("NRI: connecting".into()),
            ConnectionState::Disconnected { error } => {
                down.push(format!("NRI: disconnected: {error}"))
            }
        }
        match &*self.publish.borrow() {
            PublishState::Retrying { error, attempts } => down.push(format!(
                "ResourceSlice publishing: retrying ({attempts} attempts): {error}"
            )),
            PublishState::Refused { error } => {
                down.push(format!("ResourceSlice publishing: refused: {error}"))
            }
            _ => {}
        }
        down
    }

    /// The liveness probe's answer: 503 only when the process is stuck. An API server outage,
    /// a kubelet restart or a lost NRI connection are waited out (and shown by `/readyz` and
    /// the metrics): restarting the daemon for them would mend nothing and cost its pods' starts.
    fn healthz(&self) -> http::Answer {
        match self.stuck() {
            None => (200, "text/plain", "ok\n".into()),
            Some(why) => (503, "text/plain", format!("{why}\n")),
        }
    }

    /// The readiness probe's answer: 200 once start-up is done and while nothing is down.
    fn readyz(&self) -> http::Answer {
        let mut why = self.down();
        if why.is_empty() && *self.ready.borrow() {
            return (200, "text/plain", "ready\n".into());
        }
        if why.is_empty() {
            why.push("starting".into());
        }
        (503, "text/plain", format!("{}\n", why.join("\n")))
    }
}

/// A running daemon. [`Daemon::run`] drives it until shutdown.
pub struct Daemon {
    config: DaemonConfig,
    rescan: Rescan,
    plugin: KubeletPlugin,
    hooks: Arc<Instrumented>,
    nri_task: tokio::task::JoinHandle<()>,
    health: HealthReporter,
    metrics: Arc<metrics::DaemonMetrics>,
    probes: Arc<Probes>,
    http_stop: watch::Sender<bool>,
    published: BTreeMap<String, PublishedDevice>,
    known: BTreeSet<String>,
    /// The publication's warnings, as last logged.
    warnings: BTreeSet<Warning>,
    /// The devices left out, as last logged.
    excluded: BTreeSet<Excluded>,
    /// A hot-plug change waiting for the API server to hold its publication.
    awaiting_publish: Option<Instant>,
    /// What [`IN_USE_FILE`] holds.
    saved_in_use: BTreeMap<String, PublishedDevice>,
    /// The state of the netdevs in pods at the last rescan, by device.
    pod_links: BTreeMap<String, Option<dranet_core::health::Fault>>,
    /// The cloud provider's refreshes, requested after each scan.
    refresh: ProviderRefresh,
    /// Each refresh as it ends: the devices are published again.
    refreshed: watch::Receiver<Refreshed>,
}

/// The published description of each device in use, kept across restarts: after one, the scan
/// no longer sees a netdev that is in a pod, and the device must still be published as before.
const IN_USE_FILE: &str = "in-use-devices.json";
const IN_USE_MAX: u64 = 16 << 20;

fn load_in_use(dir: &std::path::Path) -> BTreeMap<String, PublishedDevice> {
    let path = dir.join(IN_USE_FILE);
    match dranet_podnet::durable::read(&path, IN_USE_MAX) {
        Ok(Some(b)) => serde_json::from_slice(&b).unwrap_or_else(|e| {
            tracing::warn!(path = %path.display(), error = %e, "ignoring an unreadable list of devices in use; they are described as scanned");
            BTreeMap::new()
        }),
        Ok(None) => BTreeMap::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "ignoring the list of devices in use");
            BTreeMap::new()
        }
    }
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Scans the node (the cloud provider's refresh follows, off the main loop: see the module
/// docs).
async fn scan(rescan: &Rescan) -> Result<Inventory, String> {
    let r = rescan.clone();
    tokio::task::spawn_blocking(move || r())
        .await
        .map_err(|e| format!("scan task: {e}"))?
}

/// The identifiers the cloud provider is asked about.
fn identifiers(inv: &Inventory) -> Vec<DeviceIdentifiers> {
    inv.devices.iter().map(DeviceIdentifiers::of).collect()
}

/// Releases the profiles whose release is owed, in the background: a provider that does not
/// answer must not hold up rescans.
fn retry_profile_releases(driver: &Arc<NetworkDriver>) {
    let d = driver.clone();
    tokio::spawn(async move {
        let owed = d.retry_profile_releases().await;
        if owed > 0 {
            tracing::warn!(owed, "profile releases still owed to the profile provider");
        }
    });
}

impl Daemon {
    /// Runs the start-up sequence up to the first publication being sent (readiness follows
    /// when the API server holds it; see the module docs). `api` reads claims, publishes
    /// slices, writes claim status and records events.
    pub async fn start<A: KubeApi + Clone>(
        config: DaemonConfig,
        rescan: Rescan,
        api: A,
    ) -> Result<Daemon, DaemonError> {
        let started = Instant::now();
        let metrics = Arc::new(metrics::DaemonMetrics::new());

        // 1. Inventory.
        let t = Instant::now();
        let inv = scan(&rescan).await;
        metrics.scan("start", inv.is_ok(), t.elapsed());
        let inv = inv.map_err(DaemonError::Discovery)?;
        tracing::info!(
            devices = inv.devices.len(),
            duration_ms = t.elapsed().as_secs_f64() * 1e3,
            "inventory scanned"
        );

        // 2. The driver's state: prepared claims, pods, the attach journal.
        let host = Netns::current().map_err(crate::Error::from)?;
        let podnet = PodNet::new(host, config.state_dir.join("podnet"))
            .map_err(crate::Error::from)?
            .slaac_timeout(config.slaac_timeout);
        let mut builder =
            NetworkDriver::builder(podnet, config.state_dir.join("driver"), rescan.clone())
                .cloud(config.cloud.clone())
                .refresh_timeout(config.refresh_timeout)
                .status(status_writer(api.clone()))
                .device_timer({
                    let m = metrics.clone();
                    Arc::new(move |ok, took| m.device_attach(ok, took))
                })
                .claim_reader(claim_reader(api.clone()));
        if let Some(p) = &config.profiles {
            builder = builder.profiles(p.clone());
        }
        if let Some(m) = config.rdma_mode {
            builder = builder.rdma_mode(m);
        }
        if let Some(h) = &config.attach.hook {
            builder = builder.hook(&config.cdi_dir, h.clone())?;
        }
        let driver = tokio::task::spawn_blocking(move || builder.build())
            .await
            .map_err(|e| DaemonError::Discovery(format!("driver start task: {e}")))??;
        driver.set_inventory(inv.clone());
        let driver = Arc::new(driver);
        // Requested now, waited for by nothing: its end is published again.
        let refresh = driver.provider_refresh().clone();
        let refreshed = refresh.watch();
        refresh.request(identifiers(&inv));
        let hooks = Instrumented::with_policy(
            driver.clone(),
            metrics.clone(),
            Some(event_writer(api.clone())),
            &config.node_name,
            config.attach.clone(),
        );

        // 3. Kubelet plugin: sockets, registration, the publisher.
        let health = HealthReporter::new();
        let mut plugin = KubeletPlugin::builder(hooks.clone(), api)
            .max_devices_per_slice(crate::publish::DEVICES_PER_SLICE)
            .driver_name(DRIVER_NAME)
            .node_name(&config.node_name)
            .kubelet_root_dir(&config.kubelet_root_dir)
            .metrics(metrics.clone())
            .health(health.clone());
        if config.device_metadata {
            plugin = plugin.device_metadata(&config.cdi_dir).metadata_versions(
                config
                    .device_metadata_versions
                    .iter()
                    .map(|v| v.api_version()),
            );
        }
        let plugin = plugin.start().await?;
        // Before NRI runs: every pod that starts gets its metadata.
        if let Some(updater) = plugin.metadata_updater() {
            hooks.driver().set_metadata_updater(updater);
        }
        // The plugin has given the driver its records (the profiles owed among them).
        retry_profile_releases(hooks.driver());

        // 4. NRI.
        let runner = RunnerBuilder::new()
            .socket(&config.nri_socket)
            .name("dranet")
            .index(config.nri_index)
            .from_env(false)
            .build_shared(hooks.clone())?;
        let nri_state = runner.watch_connection();
        let nri_task = tokio::spawn(async move {
            if let Err(e) = runner.run().await {
                tracing::error!(error = %e, "the NRI runner stopped");
            }
        });

        let (ready, _) = watch::channel(false);
        let probes = Arc::new(Probes {
            started,
            heartbeat: AtomicU64::new(0),
            ready,
            registration: plugin.watch_registration(),
            nri: nri_state,
            publish: plugin.watch_publish_state(),
        });
        let (http_stop, http_stop_rx) = watch::channel(false);
        if let Some(addr) = config.bind_address {
            let listener = http::bind(addr)
                .await
                .map_err(|source| DaemonError::Bind { addr, source })?;
            let (m, p) = (metrics.clone(), probes.clone());
            let handler: http::Handler = Arc::new(move |path| match path {
                "/metrics" => Some((200, metrics::DaemonMetrics::CONTENT_TYPE, m.encode())),
                "/healthz" => Some(p.healthz()),
                "/readyz" => Some(p.readyz()),
                _ => None,
            });
            tokio::spawn(http::serve(listener, handler, http_stop_rx.clone()));
        }
        if let Some(h) = &config.attach.hook {
            let listener = hook_listener(h)?;
            let on = hooks.clone();
            let handler: attach::HookHandler = Arc::new(move |req| {
                let on = on.clone();
                Box::pin(async move { on.hook_request(req).await })
            });
            tokio::spawn(attach::serve(listener, handler, http_stop_rx));
        }

        let mut d = Daemon {
            config,
            rescan,
            plugin,
            hooks,
            nri_task,
            health,
            metrics,
            probes,
            http_stop,
            published: BTreeMap::new(),
            known: BTreeSet::new(),
            warnings: BTreeSet::new(),
            excluded: BTreeSet::new(),
            awaiting_publish: None,
            saved_in_use: BTreeMap::new(),
            pod_links: BTreeMap::new(),
            refresh,
            refreshed,
        };
        d.saved_in_use = load_in_use(&d.config.state_dir);
        d.published = d.saved_in_use.clone();
        // 5. The first publication.
        d.publish(&inv)?;
        Ok(d)
    }

    /// The driver.
    pub fn driver(&self) -> &Arc<NetworkDriver> {
        self.hooks.driver()
    }

    /// The kubelet plugin.
    pub fn plugin(&self) -> &KubeletPlugin {
        &self.plugin
    }

    /// The daemon's metrics.
    pub fn metrics(&self) -> &Arc<metrics::DaemonMetrics> {
        &self.metrics
    }

    /// Turns true when start-up is complete (see the module docs).
    pub fn watch_ready(&self) -> watch::Receiver<bool> {
        self.probes.ready.subscribe()
    }

    /// Publishes what `inv` yields if it differs from what is published, and updates health.
    fn publish(&mut self, inv: &Inventory) -> Result<bool, DaemonError> {
        let driver = self.hooks.driver().clone();
        driver.set_inventory(inv.clone());
        let in_use = driver.devices_in_use();
        let next = publication(
            inv,
            self.config.cloud.as_ref(),
            &self.config.policy,
            &InUse {
                claims: &in_use,
                previous: &self.published,
            },
            &self.pod_links,
        );
        for w in next.warnings.difference(&self.warnings) {
            tracing::warn!("{w}");
        }
        self.warnings.clone_from(&next.warnings);
        // Each exclusion once, when it appears: an operator must be able to see why a NIC is
        // not published without raising the log level. What the filter leaves out (veths come
        // and go with pods) is logged at debug.
        let excluded: BTreeSet<Excluded> = next.excluded.iter().cloned().collect();
        for e in excluded.difference(&self.excluded) {
            if e.reason.by_discovery() {
                tracing::info!("not published: {e}");
            } else {
                tracing::debug!("not published: {e}");
            }
        }
        self.excluded = excluded;
        let changed = next.devices != self.published || self.known.is_empty();
        if changed {
            let devices = next.k8s_devices();
            driver.set_published(&devices);
            self.plugin.publish(devices)?;
            self.metrics
                .published(next.devices.len(), devices::rdma_count(&next.devices));
            tracing::info!(devices = ?next.devices.keys().collect::<Vec<_>>(), "publishing");
            self.published = next.devices;
        }
        let in_use_now: BTreeMap<String, PublishedDevice> = self
            .published
            .iter()
            .filter(|(k, _)| in_use.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if in_use_now != self.saved_in_use {
            let saved = serde_json::to_vec(&in_use_now)
                .map_err(std::io::Error::other)
                .and_then(|b| {
                    dranet_podnet::durable::create_dir(&self.config.state_dir)?;
                    dranet_podnet::durable::write(&self.config.state_dir, IN_USE_FILE, &b)
                });
            match saved {
                Ok(()) => self.saved_in_use = in_use_now,
                Err(e) => {
                    tracing::warn!(error = %e, "could not save the devices in use; after a restart a netdev in a pod is published only when it is back")
                }
            }
        }
        let reports = devices::health(
            &self.config.node_name,
            inv,
            &self.published,
            &in_use,
            &self.pod_links,
            &mut self.known,
            self.config.poll.max_interval * 3,
        );
        if reports != self.health.current() {
            self.health.set(reports);
        }
        Ok(changed)
    }

    async fn rescan(&mut self, trigger: &str, since: Option<Instant>) {
        let t = Instant::now();
        let inv = scan(&self.rescan).await;
        self.pod_links = self.hooks.driver().pod_link_faults().await;
        self.metrics.scan(trigger, inv.is_ok(), t.elapsed());
        match inv {
            Ok(inv) => {
                self.refresh.request(identifiers(&inv));
                match self.publish(&inv) {
                    Ok(true) => {
                        if let Some(s) = since {
                            self.awaiting_publish.get_or_insert(s);
                        }
                    }
                    Ok(false) => {}
                    Err(e) => tracing::error!(error = %e, "the device list was refused"),
                }
            }
            Err(e) => {
                tracing::warn!(trigger, error = %e, "inventory scan failed; keeping what is published")
            }
        }
    }

    /// Runs until `shutdown` resolves (then shuts down gracefully) or a part of the daemon
    /// fails for good (the error; the caller exits non-zero and is restarted).
    pub async fn run(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), DaemonError> {
        let mut watcher = if self.config.poll.hotplug {
            match dranet_discovery::watch::Watcher::start() {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(error = %e, "hot-plug events unavailable; changes are seen by the periodic rescan only");
                    None
                }
            }
        } else {
            None
        };
        let mut publish_state = self.plugin.watch_publish_state();
        let mut registration = self.plugin.watch_registration();
        let mut nri = self.probes.nri.clone();
        let mut synchronized = self.hooks.driver().watch_synchronized();
        let poll = self.config.poll;
        let mut tokens = poll.burst.max(1) as f64;
        let mut last_refill = Instant::now();
        let mut next_periodic = tokio::time::Instant::now() + poll.max_interval;
        // (first change, deadline for the debounced scan)
        let mut pending: Option<(Instant, tokio::time::Instant)> = None;
        let mut tick = tokio::time::interval(TICK);
        tokio::pin!(shutdown);
        let result = loop {
            self.update_ready(*synchronized.borrow());
            let scan_at = pending.map(|(_, at)| at);
            tokio::select! {
                _ = &mut shutdown => break Ok(()),
                e = self.plugin.failed() => break Err(DaemonError::Plugin(e)),
                ch = async { match watcher.as_mut() { Some(w) => w.recv().await, None => std::future::pending().await } } => {
                    let Some(ch) = ch else {
                        tracing::warn!("hot-plug listeners stopped; changes are seen by the periodic rescan only");
                        watcher = None;
                        continue;
                    };
                    tracing::debug!(source = ch.source.as_str(), what = %ch.what, "node changed");
                    let now = tokio::time::Instant::now();
                    let (first, _) = pending.unwrap_or((ch.at, now));
                    let cap = tokio::time::Instant::from_std(first) + poll.debounce * 4;
                    pending = Some((first, (now + poll.debounce).min(cap)));
                }
                _ = async { match scan_at { Some(at) => tokio::time::sleep_until(at).await, None => std::future::pending().await } } => {
                    // Rate limit: tokens refill at one per min_interval, up to burst.
                    let now = Instant::now();
                    if !poll.min_interval.is_zero() {
                        tokens = (tokens + now.duration_since(last_refill).as_secs_f64() / poll.min_interval.as_secs_f64()).min(poll.burst.max(1) as f64);
                    }
                    last_refill = now;
                    if tokens < 1.0 && !poll.min_interval.is_zero() {
                        let wait = poll.min_interval.mul_f64(1.0 - tokens);
                        pending = pending.map(|(f, _)| (f, tokio::time::Instant::now() + wait));
                        continue;
                    }
                    tokens -= 1.0;
                    let since = pending.take().map(|(f, _)| f);
                    self.rescan("hotplug", since).await;
                    next_periodic = tokio::time::Instant::now() + poll.max_interval;
                }
                _ = tokio::time::sleep_until(next_periodic) => {
                    self.rescan("periodic", None).await;
                    retry_profile_releases(self.hooks.driver());
                    next_periodic = tokio::time::Instant::now() + poll.max_interval;
                }
                r = publish_state.changed() => {
                    if r.is_err() { continue; }
                    let published = matches!(*publish_state.borrow_and_update(), PublishState::Published { .. });
                    if published {
                        self.metrics.published_now();
                        if let Some(s) = self.awaiting_publish.take() {
                            let dt = s.elapsed();
                            self.metrics.hotplug_published(dt);
                            tracing::info!(latency_ms = dt.as_secs_f64() * 1e3, "hot-plug change published");
                        }
                    }
                }
                r = self.refreshed.changed() => {
                    if r.is_err() { continue; }
                    let ended = self.refreshed.borrow_and_update().clone();
                    self.metrics.provider_refresh(ended.timed_out || ended.panicked, ended.elapsed);
                    // The provider's answers are read from memory: the inventory is the last scan's.
                    let inv = self.hooks.driver().inventory();
                    if let Err(e) = self.publish(&inv) {
                        tracing::error!(error = %e, "the device list was refused");
                    }
                }
                _ = registration.changed() => {}
                _ = nri.changed() => {}
                _ = synchronized.changed() => {}
                _ = tick.tick() => {
                    let ms = self.probes.started.elapsed().as_millis();
                    self.probes.heartbeat.store(u64::try_from(ms).unwrap_or(u64::MAX), Ordering::Relaxed);
                    self.metrics.restores_owed(self.hooks.driver().restores_owed());
                }
            }
        };
        self.shutdown().await;
        result
    }

    fn update_ready(&self, synced: bool) {
        if *self.probes.ready.borrow() {
            return;
        }
        let registered = *self.probes.registration.borrow() == RegistrationState::Registered;
        let nri = *self.probes.nri.borrow() == ConnectionState::Registered;
        let published = matches!(
            *self.probes.publish.borrow(),
            PublishState::Published { .. }
        );
        if registered && nri && synced && published {
            self.probes.ready.send_replace(true);
            tracing::info!(
                startup_ms = self.probes.started.elapsed().as_secs_f64() * 1e3,
                "ready: registered with the kubelet and the runtime, devices published"
            );
        }
    }

    /// Stops taking kubelet calls, lets running NRI hooks finish, removes the sockets.
    async fn shutdown(self) {
        tracing::info!("shutting down");
        let Daemon {
            plugin,
            hooks,
            nri_task,
            http_stop,
            config,
            ..
        } = self;
        // The registration socket goes first: the kubelet stops calling.
        if let Err(e) = plugin.shutdown().await {
            tracing::warn!(error = %e, "kubelet plugin shutdown");
        }
        if !hooks.wait_idle(config.shutdown_grace).await {
            tracing::warn!("NRI hooks still running at the end of the grace period");
        }
        nri_task.abort();
        http_stop.send_replace(true);
        tracing::info!("stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Probes whose dependencies are as given and whose main loop just turned.
    fn probes(publish: PublishState, nri: ConnectionState, ready: bool) -> Probes {
        let (ready_tx, _) = watch::channel(ready);
        Probes {
            started: Instant::now(),
            heartbeat: AtomicU64::new(0),
            ready: ready_tx,
            registration: watch::channel(RegistrationState::Registered).1,
            nri: watch::channel(nri).1,
            publish: watch::channel(publish).1,
        }
    }

    #[test]
    fn an_api_outage_makes_the_daemon_unready_never_restarted() {
        let retrying = PublishState::Retrying {
            error: "connection refused".into(),
            attempts: 6,
        };
        let p = probes(retrying, ConnectionState::Registered, true);
        assert_eq!(p.healthz().0, 200, "liveness: the process is fine");
        let (code, _, body) = p.readyz();
        assert_eq!(code, 503);
        assert!(
            body.contains("ResourceSlice publishing: retrying (6 attempts)"),
            "{body}"
        );
        let lost = ConnectionState::Disconnected {
            error: "EOF".into(),
        };
        let p = probes(PublishState::NotStarted, lost, true);
        assert_eq!(p.healthz().0, 200);
        assert!(p.readyz().2.contains("NRI: disconnected: EOF"));
        let p = probes(PublishState::NotStarted, ConnectionState::Registered, true);
        assert_eq!(p.readyz(), (200, "text/plain", "ready\n".to_string()));
        let p = probes(PublishState::NotStarted, ConnectionState::Registered, false);
        assert_eq!(p.readyz().0, 503, "still starting");
    }

    #[test]
    fn a_stuck_main_loop_fails_the_liveness_probe() {
        let p = probes(PublishState::NotStarted, ConnectionState::Registered, true);
        p.heartbeat.store(0, Ordering::Relaxed);
        let p = Probes {
            started: Instant::now() - TICK * 11,
            ..p
        };
        let (code, _, body) = p.healthz();
        assert_eq!(code, 503);
        assert!(body.contains("main loop: last turned"), "{body}");
    }
}
