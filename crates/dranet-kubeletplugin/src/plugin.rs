//! [`KubeletPluginBuilder`] starts the plugin; [`KubeletPlugin`] is the running plugin's handle.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::resource::v1::Device;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;

use crate::api::KubeApi;
use crate::authority;
use crate::checkpoint::{Checkpoint, CheckpointPolicy, LoadOutcome, Phase};
use crate::driver::{Driver, PreparedClaim};
use crate::error::{Error, Result};
use crate::grpc::{DraV1, DraV1beta1, HealthService, Registration, RegistrationState};
use crate::health::HealthReporter;
use crate::metadata::{Metadata, MetadataConfig, MetadataLayout, MetadataUpdater, MetadataVersion};
use crate::metrics::{Metrics, NoMetrics};
use crate::node::NodeService;
use crate::proto::{self, service_names};
use crate::publisher::{self, MAX_DEVICES_PER_SLICE, PublishState, PublisherConfig};
use crate::socket::{self, SocketGuard};
use dranet_util::Backoff;

/// The kubelet's default root directory.
pub const DEFAULT_KUBELET_ROOT_DIR: &str = "/var/lib/kubelet";

/// Configures and starts a plugin: [`KubeletPlugin::builder`], then the driver and node names
/// (required), adjustments, and [`KubeletPluginBuilder::start`].
#[must_use = "a builder does nothing until start() is called"]
pub struct KubeletPluginBuilder<D, A> {
    driver: D,
    api: A,
    driver_name: String,
    node_name: String,
    kubelet_root_dir: PathBuf,
    checkpoint_path: Option<PathBuf>,
    checkpoint_policy: CheckpointPolicy,
    metrics: Arc<dyn Metrics>,
    health: Option<HealthReporter>,
    resync: Duration,
    backoff: Backoff,
    max_devices_per_slice: usize,
    serve_v1beta1: bool,
    rolling_update: Option<String>,
    claim_lookup_timeout: Duration,
    device_metadata: Option<MetadataConfig>,
    metadata_versions: Vec<String>,
}

impl<D: Driver, A: KubeApi> KubeletPluginBuilder<D, A> {
    /// A plugin calling `driver` and reaching the API server through `api` (usually a
    /// [`crate::KubeClient`]). Set [`Self::driver_name`] and [`Self::node_name`] before
    /// [`Self::start`].
    pub fn new(driver: D, api: A) -> Self {
        Self {
            driver,
            api,
            driver_name: String::new(),
            node_name: String::new(),
            kubelet_root_dir: PathBuf::from(DEFAULT_KUBELET_ROOT_DIR),
            checkpoint_path: None,
            checkpoint_policy: CheckpointPolicy::default(),
            metrics: Arc::new(NoMetrics),
            health: None,
            resync: Duration::from_secs(300),
            backoff: publisher::DEFAULT_BACKOFF,
            max_devices_per_slice: MAX_DEVICES_PER_SLICE,
            serve_v1beta1: true,
            rolling_update: None,
            claim_lookup_timeout: Duration::from_secs(20),
            device_metadata: None,
            metadata_versions: MetadataVersion::ALL
                .iter()
                .map(|v| v.api_version().to_string())
                .collect(),
        }
    }

    /// The driver's name (e.g. `dra.net`): the DRA driver name in ResourceSlices and claims, and
    /// the name the plugin registers under. Required.
    pub fn driver_name(mut self, name: impl Into<String>) -> Self {
        self.driver_name = name.into();
        self
    }

    /// The node's name as the kubelet knows it (downward API `spec.nodeName`). Required.
    pub fn node_name(mut self, name: impl Into<String>) -> Self {
        self.node_name = name.into();
        self
    }

    /// The kubelet root directory (default [`DEFAULT_KUBELET_ROOT_DIR`]); sockets go into its
    /// `plugins_registry/` and `plugins/<driver>/`.
    pub fn kubelet_root_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.kubelet_root_dir = dir.into();
        self
    }

    /// Where the checkpoint lives (default `<kubelet dir>/plugins/<driver>/checkpoint`).
    pub fn checkpoint_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.checkpoint_path = Some(path.into());
        self
    }

    /// What to do with a checkpoint that fails its checks (default: refuse to start).
    pub fn checkpoint_policy(mut self, policy: CheckpointPolicy) -> Self {
        self.checkpoint_policy = policy;
        self
    }

    /// Where request counts and latencies go.
    pub fn metrics(mut self, metrics: Arc<dyn Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Serves `v1.DRAResourceHealth` and `v1alpha1.DRAResourceHealth` with the health the driver
    /// sets on `reporter`, and advertises both to the kubelet.
    pub fn health(mut self, reporter: HealthReporter) -> Self {
        self.health = Some(reporter);
        self
    }

    /// How often slices are compared with the API server even without a change (default 5 min).
    pub fn resync_interval(mut self, every: Duration) -> Self {
        self.resync = every;
        self
    }

    /// Retry timing after failed API calls while publishing.
    pub fn retry_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Devices per ResourceSlice (default and maximum [`MAX_DEVICES_PER_SLICE`]).
    pub fn max_devices_per_slice(mut self, n: usize) -> Self {
        self.max_devices_per_slice = n;
        self
    }

    /// Whether to also serve and advertise the v1beta1 DRAPlugin API for kubelets older than 1.34
    /// (default true).
    pub fn serve_v1beta1(mut self, yes: bool) -> Self {
        self.serve_v1beta1 = yes;
        self
    }

    /// Lets two instances run side by side while a DaemonSet with `maxSurge: 1` replaces the old
    /// pod by a new one (kubelet 1.33 or newer). `pod_uid` is this pod's UID (downward API
    /// `metadata.uid`); it makes the socket names unique (`<driver>-<uid>-reg.sock`,
    /// `dra-<uid>.sock`), so the kubelet talks to both.
    ///
    /// Both instances share the plugin directory and the checkpoint. Calls for one claim are
    /// serialized across them with a lock file per claim, every checkpoint change re-reads the file
    /// under a lock, so a claim prepared by one instance can be unprepared by the other; and only
    /// one instance publishes ResourceSlices at a time (the one holding
    /// `<plugin dir>/publisher.lock`; the newer one takes over when the older one exits), so two
    /// versions never fight over the slices. Sockets left by instances that died are removed at
    /// start.
    ///
    /// Every instance that may overlap must use this: one started without it keeps the checkpoint
    /// in memory only. So the rollout that first turns it on must still be `maxSurge: 0`.
    pub fn rolling_update(mut self, pod_uid: impl Into<String>) -> Self {
        self.rolling_update = Some(pod_uid.into());
        self
    }

    /// How long reading a claim from the API server may take before its prepare fails with an
    /// error the kubelet retries (default 20 s, well inside the kubelet's deadline for the call).
    pub fn claim_lookup_timeout(mut self, limit: Duration) -> Self {
        self.claim_lookup_timeout = limit;
        self
    }

    /// Turns on device metadata in the container (KEP-5304, see [`crate::metadata`]): every
    /// prepared request gets a metadata file under `<kubelet dir>/plugins/<driver>/`, bind-mounted
    /// into the containers that use the request through a CDI spec written to `cdi_dir` (the
    /// runtime's CDI spec directory, e.g. `/var/run/cdi`), and the driver fills it through
    /// [`KubeletPlugin::metadata_updater`]. Off by default: no files, no specs.
    pub fn device_metadata(mut self, cdi_dir: impl Into<PathBuf>) -> Self {
        self.device_metadata = Some(MetadataConfig {
            cdi_dir: cdi_dir.into(),
        });
        self
    }

    /// The versions of the device metadata schema each file holds, by `apiVersion`
    /// (`metadata.resource.k8s.io/v1beta1`) or version alone (`v1beta1`); see
    /// [`MetadataVersion`]. Written newest first whatever the order given, so readers built for
    /// older and newer Kubernetes releases each find theirs. Default: all of them. With
    /// [`Self::device_metadata`] on, an unknown version or none at all fails [`Self::start`]
    /// ([`Error::UnknownMetadataVersion`], [`Error::Config`]).
    pub fn metadata_versions<I, S>(mut self, versions: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.metadata_versions = versions.into_iter().map(Into::into).collect();
        self
    }

    fn validate(&self) -> Result<()> {
        if self.device_metadata.is_some() {
            MetadataVersion::parse_list(&self.metadata_versions)?;
        }
        if let Some(uid) = &self.rolling_update
            && !socket::is_uuid(uid)
        {
            return Err(Error::Config(format!(
                "rolling update pod UID {uid:?} is not a UID like 0a6f3c1e-5a1b-4c2d-8e3f-123456789abc \
                 (pass the pod's metadata.uid from the downward API)"
            )));
        }
        if self.driver_name.is_empty() {
            return Err(Error::Config(
                "no driver name: call driver_name(\"example.com\") on the builder".into(),
            ));
        }
        if self.node_name.is_empty() {
            return Err(Error::Config(
                "no node name: call node_name(..) on the builder with the kubelet's node name \
                 (downward API spec.nodeName)"
                    .into(),
            ));
        }
        check_dns_subdomain("driver name", &self.driver_name, 63)?;
        check_dns_subdomain("node name", &self.node_name, 253)?;
        // The longest slice name we may create must still be a valid object name.
        let longest = format!("{}-{}-{}", self.node_name, self.driver_name, usize::MAX);
        if longest.len() > 253 {
            return Err(Error::Config(format!(
                "node name {:?} and driver name {:?} are too long together for ResourceSlice names",
                self.node_name, self.driver_name
            )));
        }
        if self.max_devices_per_slice == 0 || self.max_devices_per_slice > MAX_DEVICES_PER_SLICE {
            return Err(Error::Config(format!(
                "max devices per slice is {}, must be 1..={MAX_DEVICES_PER_SLICE}",
                self.max_devices_per_slice
            )));
        }
        if self.resync.is_zero() {
            return Err(Error::Config(
                "resync interval must be greater than zero".into(),
            ));
        }
        Ok(())
    }

    /// Opens the checkpoint, hands the driver its records ([`Driver::restore_records`]) and the
    /// claims it holds as prepared ([`Driver::restore_prepared`]), binds both sockets (DRA
    /// first, so the kubelet never learns of an endpoint that is not served yet) and starts
    /// serving. Must be called inside a Tokio runtime.
    pub async fn start(self) -> Result<KubeletPlugin> {
        self.validate()?;
        let plugin_dir = self
            .kubelet_root_dir
            .join("plugins")
            .join(&self.driver_name);
        let registry_dir = self.kubelet_root_dir.join("plugins_registry");
        let instance = self
            .rolling_update
            .as_ref()
            .map(|uid| format!("-{uid}"))
            .unwrap_or_default();
        let dra_path = plugin_dir.join(format!("dra{instance}.sock"));
        let reg_path = registry_dir.join(format!("{}{instance}-reg.sock", self.driver_name));
        let rolling = self.rolling_update.is_some();
        if rolling {
            socket::remove_dead_instances(&registry_dir, &plugin_dir, &self.driver_name);
        }
        let checkpoint_path = self
            .checkpoint_path
            .clone()
            .unwrap_or_else(|| plugin_dir.join("checkpoint"));
        let (checkpoint, checkpoint_outcome) = Checkpoint::open_with_metrics(
            &checkpoint_path,
            self.checkpoint_policy,
            Arc::clone(&self.metrics),
            rolling,
        )?;
        let checkpoint_trusted = !matches!(checkpoint_outcome, LoadOutcome::Quarantined { .. });

        // Before the kubelet can call: a driver that remembers its claims in memory has them
        // back when the first call (or pod) comes.
        let driver = Arc::new(self.driver);
        driver.restore_records(checkpoint.records()).await;
        let prepared: Vec<PreparedClaim> = checkpoint
            .entries()
            .into_values()
            .filter_map(|e| match (e.phase, e.prepared) {
                (Phase::Prepared, Some(prepared)) => Some(PreparedClaim {
                    claim_ref: e.claim,
                    prepared,
                }),
                _ => None,
            })
            .collect();
        let restored = prepared.len();
        driver.restore_prepared(prepared).await;
        tracing::debug!(
            claims = restored,
            "prepared claims handed back to the driver"
        );

        let api = Arc::new(self.api);
        let mut node = NodeService::new(
            driver,
            Arc::clone(&api),
            self.driver_name.clone(),
            checkpoint,
            checkpoint_trusted,
            Arc::clone(&self.metrics),
            rolling.then(|| plugin_dir.join("claims")),
        );
        node.lookup_timeout = self.claim_lookup_timeout;
        // Checked by validate(); parsed here into what the files hold.
        let versions = match &self.device_metadata {
            Some(_) => MetadataVersion::parse_list(&self.metadata_versions)?,
            None => Vec::new(),
        };
        let metadata = self.device_metadata.as_ref().map(|cfg| {
            let layout =
                MetadataLayout::new(&self.kubelet_root_dir, &self.driver_name, &cfg.cdi_dir);
            Metadata::new(
                layout,
                versions.clone(),
                node.checkpoint.clone(),
                node.locks(),
            )
        });
        if let Some(m) = &metadata {
            let m = Arc::clone(m);
            tokio::task::spawn_blocking(move || m.restore())
                .await
                .map_err(|_| Error::Task("device metadata restore"))?;
        }
        node.metadata = metadata.clone();
        let node = Arc::new(node);

        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let mut tasks: Vec<(&'static str, JoinHandle<Result<()>>)> = Vec::new();

        let (dra_listener, dra_guard) = socket::bind(&dra_path)?;
        let mut router = tonic::transport::Server::builder().add_service(
            proto::dra_v1::dra_plugin_server::DraPluginServer::new(DraV1(Arc::clone(&node))),
        );
        // The kubelet uses the first entry it knows, so the newest API comes first.
        let mut versions = vec![service_names::DRA_V1.to_string()];
        if self.serve_v1beta1 {
            router =
                router.add_service(proto::dra_v1beta1::dra_plugin_server::DraPluginServer::new(
                    DraV1beta1(Arc::clone(&node)),
                ));
            versions.push(service_names::DRA_V1BETA1.to_string());
        }
        // Served always, advertised only with a reporter: kubelets with the health feature open
        // the stream whether or not it is advertised, and log an error every few seconds when
        // the service is missing. Without a reporter the stream says nothing about any device.
        let reporter = self.health.clone().unwrap_or_default();
        let health = HealthService {
            reports: reporter.subscribe(),
            shutdown: shutdown_rx.clone(),
            metrics: Arc::clone(&self.metrics),
        };
        router = router
            .add_service(
                proto::dra_health_v1::dra_resource_health_server::DraResourceHealthServer::new(
                    health.clone(),
                ),
            )
            .add_service(
                proto::dra_health_v1alpha1::dra_resource_health_server::DraResourceHealthServer::new(
                    health,
                ),
            );
        if self.health.is_some() {
            versions.push(service_names::HEALTH_V1.to_string());
            versions.push(service_names::HEALTH_V1ALPHA1.to_string());
        }
        let stop = wait_for(shutdown_rx.clone());
        tasks.push((
            "DRA gRPC server",
            tokio::spawn(async move {
                router
                    .serve_with_incoming_shutdown(repaired(dra_listener), stop)
                    .await
                    .map_err(Error::from)
            }),
        ));

        let (status_tx, status_rx) = watch::channel(RegistrationState::Waiting);
        let registration = Registration {
            info: proto::pluginregistration::PluginInfo {
                r#type: service_names::DRA_PLUGIN_TYPE.to_string(),
                name: self.driver_name.clone(),
                endpoint: dra_path.to_string_lossy().into_owned(),
                supported_versions: versions,
            },
            status: status_tx,
            metrics: Arc::clone(&self.metrics),
        };
        let (reg_listener, reg_guard) = socket::bind(&reg_path)?;
        let stop = wait_for(shutdown_rx.clone());
        tasks.push((
            "registration gRPC server",
            tokio::spawn(async move {
                tonic::transport::Server::builder()
                    .add_service(
                        proto::pluginregistration::registration_server::RegistrationServer::new(
                            registration,
                        ),
                    )
                    .serve_with_incoming_shutdown(repaired(reg_listener), stop)
                    .await
                    .map_err(Error::from)
            }),
        ));

        tasks.push((
            "registration watchdog",
            tokio::spawn(registration_watchdog(
                status_rx.clone(),
                shutdown_rx.clone(),
                self.driver_name.clone(),
                reg_path.clone(),
            )),
        ));

        let (devices_tx, devices_rx) = watch::channel(None);
        let cfg = PublisherConfig {
            node_name: self.node_name.clone(),
            driver_name: self.driver_name.clone(),
            max_devices_per_slice: self.max_devices_per_slice,
            resync: self.resync,
            backoff: self.backoff,
            exclusive: rolling.then(|| plugin_dir.join("publisher.lock")),
        };
        let metrics = Arc::clone(&self.metrics);
        let shutdown = shutdown_rx.clone();
        let (publish_state_tx, publish_state_rx) = watch::channel(PublishState::NotStarted);
        tasks.push((
            "ResourceSlice publisher",
            tokio::spawn(async move {
                publisher::run(api, cfg, devices_rx, shutdown, metrics, publish_state_tx).await;
                Ok(())
            }),
        ));

        // Every task runs until shutdown; one that ends before is reported by `failed()`.
        let (died_tx, died_rx) = watch::channel(None);
        let died_tx = Arc::new(died_tx);
        let tasks = tasks
            .into_iter()
            .map(|(name, task)| {
                let died = Arc::clone(&died_tx);
                let shutdown = shutdown_rx.clone();
                let supervised = tokio::spawn(async move {
                    let r = match task.await {
                        Ok(r) => r,
                        Err(e) if e.is_panic() => Err(Error::TaskDied {
                            task: name,
                            reason: "it panicked".into(),
                        }),
                        Err(_) => Err(Error::Task(name)),
                    };
                    if !*shutdown.borrow() {
                        let reason = match &r {
                            Ok(()) => "it ended".to_string(),
                            Err(e) => dranet_util::error_chain(e),
                        };
                        tracing::error!(task = name, %reason, "a plugin task stopped while the plugin runs");
                        died.send_replace(Some((name, reason)));
                    }
                    r
                });
                (name, supervised)
            })
            .collect();

        tracing::info!(
            driver = %self.driver_name,
            node = %self.node_name,
            dra_socket = %dra_path.display(),
            registration_socket = %reg_path.display(),
            ?checkpoint_outcome,
            "DRA kubelet plugin started"
        );
        Ok(KubeletPlugin {
            metadata: metadata.map(MetadataUpdater::new),
            driver_name: self.driver_name,
            dra_socket: dra_path,
            registration_socket: reg_path,
            checkpoint_outcome,
            devices: devices_tx,
            shutdown: shutdown_tx,
            registration: status_rx,
            publish_state: publish_state_rx,
            died: died_rx,
            tasks,
            registration_guard: Some(reg_guard),
            _dra_guard: dra_guard,
        })
    }
}

/// The connections of `listener`, each behind the `:authority` repair (see [`crate::authority`]):
/// the kubelet's grpc-go dials the registration socket with an authority h2 refuses. The DRA
/// socket gets it too, so a kubelet that changes how it dials that one keeps working.
fn repaired(
    listener: tokio::net::UnixListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::io::DuplexStream>> {
    use futures::StreamExt;
    UnixListenerStream::new(listener)
        .map(|conn| conn.map(|c| authority::serve_side(c, authority::Authority::RepairInvalid)))
}

/// How long after start a missing registration is worth a warning.
const REGISTRATION_GRACE: Duration = Duration::from_secs(10);
/// How often the warning is repeated while the kubelet stays away.
const REGISTRATION_REMINDER: Duration = Duration::from_secs(300);

/// Warns while the kubelet has not registered the plugin: the slices are published anyway, so
/// pods get devices allocated and then hang in ContainerCreating without a word from us.
async fn registration_watchdog(
    mut state: watch::Receiver<RegistrationState>,
    mut shutdown: watch::Receiver<bool>,
    driver: String,
    socket: PathBuf,
) -> Result<()> {
    let mut wait = REGISTRATION_GRACE;
    loop {
        let registered = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return Ok(()),
            r = tokio::time::timeout(wait, state.wait_for(|s| *s == RegistrationState::Registered)) => match r {
                Ok(Ok(_)) => true,
                Ok(Err(_)) => return Ok(()),
                Err(_) => false,
            },
        };
        if registered {
            // Watch for a later change: a restarted kubelet asks again.
            tokio::select! {
                _ = shutdown.wait_for(|s| *s) => return Ok(()),
                r = state.wait_for(|s| *s != RegistrationState::Registered) => if r.is_err() { return Ok(()) },
            }
            wait = REGISTRATION_GRACE;
            continue;
        }
        let now = state.borrow().clone();
        match now {
            RegistrationState::Waiting => tracing::warn!(
                driver = %driver,
                socket = %socket.display(),
                "the kubelet has not called the registration socket: it watches \
                 <kubelet root dir>/plugins_registry; check that the kubelet directory is the \
                 kubelet's --root-dir and is mounted at the same path. Until it registers the \
                 driver, pods whose claims use it stay in ContainerCreating (\"DRA driver ... is \
                 not registered\")"
            ),
            RegistrationState::InfoRequested => tracing::warn!(
                driver = %driver,
                "the kubelet asked for the plugin's info but has not registered it (does it \
                 support the advertised DRA API versions?)"
            ),
            RegistrationState::Refused { error } => tracing::error!(
                driver = %driver,
                %error,
                "the kubelet refused to register the plugin"
            ),
            RegistrationState::Registered => {}
        }
        wait = REGISTRATION_REMINDER;
    }
}

async fn wait_for(mut shutdown: watch::Receiver<bool>) {
    // An error means the sender is gone, which also means stop.
    let _ = shutdown.wait_for(|stop| *stop).await;
}

fn check_dns_subdomain(what: &str, value: &str, max: usize) -> Result<()> {
    let bad = |why: &str| Err(Error::Config(format!("{what} {value:?} {why}")));
    if value.len() > max {
        return bad(&format!("is longer than {max} characters"));
    }
    dranet_core::names::check_dns1123_subdomain(value).or_else(|why| bad(&why.to_string()))
}

/// A running plugin. Dropping it stops serving; [`KubeletPlugin::shutdown`] also waits for that and
/// reports failures. Either way both sockets are removed.
#[must_use = "dropping the plugin stops serving the kubelet"]
pub struct KubeletPlugin {
    driver_name: String,
    dra_socket: PathBuf,
    registration_socket: PathBuf,
    checkpoint_outcome: LoadOutcome,
    devices: watch::Sender<Option<Vec<Device>>>,
    shutdown: watch::Sender<bool>,
    registration: watch::Receiver<RegistrationState>,
    publish_state: watch::Receiver<PublishState>,
    died: watch::Receiver<Option<(&'static str, String)>>,
    tasks: Vec<(&'static str, JoinHandle<Result<()>>)>,
    // Removed first at shutdown, so the kubelet stops sending calls before the service stops.
    registration_guard: Option<SocketGuard>,
    // Dropped last, after the servers stopped.
    _dra_guard: SocketGuard,
    metadata: Option<MetadataUpdater>,
}

impl std::fmt::Debug for KubeletPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletPlugin")
            .field("driver_name", &self.driver_name)
            .field("dra_socket", &self.dra_socket)
            .field("registration_socket", &self.registration_socket)
            .finish()
    }
}

impl KubeletPlugin {
    /// Shorthand for [`KubeletPluginBuilder::new`].
    pub fn builder<D: Driver, A: KubeApi>(driver: D, api: A) -> KubeletPluginBuilder<D, A> {
        KubeletPluginBuilder::new(driver, api)
    }

    /// Publishes these devices as the node's pool, replacing what was published before. Nothing
    /// is published until the first call; the publisher retries in the background until the API
    /// server has exactly this ([`Self::watch_publish_state`] says how it goes).
    ///
    /// A list the API server would refuse is an error here, and nothing is published: an empty or
    /// invalid device name, a name listed twice, too many attributes and capacities, an invalid
    /// attribute name, a value over the size limit, a name qualified with the driver's own
    /// domain (see [`dranet_core::slice::validate_device_of`]).
    pub fn publish(&self, devices: Vec<Device>) -> Result<()> {
        let mut seen = std::collections::HashSet::with_capacity(devices.len());
        for d in &devices {
            dranet_core::slice::validate_device_of(&self.driver_name, d)
                .map_err(|e| Error::InvalidRequest(e.to_string()))?;
            if !seen.insert(d.name.as_str()) {
                return Err(Error::InvalidRequest(format!(
                    "device {:?} is listed twice",
                    d.name
                )));
            }
        }
        self.devices.send_replace(Some(devices));
        Ok(())
    }

    /// Where publishing stands now.
    pub fn publish_state(&self) -> PublishState {
        self.publish_state.borrow().clone()
    }

    /// A receiver that sees every change of [`Self::publish_state`]: the last sync's outcome,
    /// including errors the publisher keeps retrying (API server down, Node missing, RBAC).
    pub fn watch_publish_state(&self) -> watch::Receiver<PublishState> {
        self.publish_state.clone()
    }

    /// Resolves when one of the plugin's tasks (a gRPC server, the publisher, the registration
    /// watchdog) stops while the plugin is running, with the reason; never resolves otherwise.
    /// A daemon selects on it next to its signals and exits, so that it is restarted.
    pub async fn failed(&self) -> Error {
        let mut died = self.died.clone();
        match died.wait_for(Option::is_some).await {
            Ok(v) => {
                let (task, reason) = v.clone().unwrap_or(("unknown", String::new()));
                Error::TaskDied { task, reason }
            }
            // The senders live as long as the tasks; they are gone only after shutdown.
            Err(_) => std::future::pending().await,
        }
    }

    /// The handle that fills the device metadata files of prepared claims
    /// ([`MetadataUpdater::update_request_metadata`]); `None` unless the plugin was built with
    /// [`KubeletPluginBuilder::device_metadata`].
    pub fn metadata_updater(&self) -> Option<MetadataUpdater> {
        self.metadata.clone()
    }

    /// The DRA service socket.
    pub fn dra_socket(&self) -> &Path {
        &self.dra_socket
    }

    /// The registration socket.
    pub fn registration_socket(&self) -> &Path {
        &self.registration_socket
    }

    /// What was found in the checkpoint at start.
    pub fn checkpoint_outcome(&self) -> &LoadOutcome {
        &self.checkpoint_outcome
    }

    /// Where the kubelet's registration of the plugin stands now.
    pub fn registration_state(&self) -> RegistrationState {
        self.registration.borrow().clone()
    }

    /// A receiver that sees every change of [`Self::registration_state`] (for readiness checks
    /// and metrics).
    pub fn watch_registration(&self) -> watch::Receiver<RegistrationState> {
        self.registration.clone()
    }

    /// Waits until the kubelet registers or refuses the plugin, for at most `timeout`; `None` if
    /// it has not decided by then.
    pub async fn wait_for_registration(&self, timeout: Duration) -> Option<RegistrationState> {
        let mut rx = self.registration.clone();
        tokio::time::timeout(timeout, rx.wait_for(RegistrationState::is_decided))
            .await
            .ok()
            .and_then(|r| r.ok().map(|s| s.clone()))
    }

    /// Stops serving and publishing, waits for in-flight requests, and removes both sockets.
    /// Published ResourceSlices stay: the kubelet removes them when the plugin stays away.
    pub async fn shutdown(mut self) -> Result<()> {
        // The kubelet's plugin watcher deregisters the driver when the registration socket goes.
        drop(self.registration_guard.take());
        self.shutdown.send_replace(true);
        let mut first_err = None;
        for (name, task) in self.tasks.drain(..) {
            let r = match task.await {
                Ok(r) => r,
                Err(_) => Err(Error::Task(name)),
            };
            if let Err(e) = r {
                tracing::error!(task = name, error = %e, "plugin task failed");
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for KubeletPlugin {
    fn drop(&mut self) {
        drop(self.registration_guard.take());
        self.shutdown.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use super::check_dns_subdomain;

    #[test]
    fn names_are_checked() {
        assert!(check_dns_subdomain("driver name", "dra.net", 63).is_ok());
        assert!(check_dns_subdomain("driver name", "a-b.c1", 63).is_ok());
        for bad in ["", "Dra.net", "dra..net", "-dra.net", "dra_net", "dra.net-"] {
            let e = check_dns_subdomain("driver name", bad, 63).unwrap_err();
            assert!(e.to_string().contains("driver name"), "{e}");
        }
        assert!(
            check_dns_subdomain("driver name", &"a".repeat(64), 63)
                .unwrap_err()
                .to_string()
                .contains("63")
        );
    }
}
