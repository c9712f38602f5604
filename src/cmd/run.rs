//! `dranet run`: the node daemon. Flags and wiring; the daemon is `dranet_driver::daemon`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dranet_core::{Discover, Inventory};
use dranet_driver::attach::{AttachPolicy, HookConfig};
use dranet_driver::daemon::{Daemon, DaemonConfig, PollConfig};
use dranet_kubeletplugin::KubeClient;

use super::{CliError, CloudArgs, NodeArgs, PublishArgs, SourceArgs};

/// `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// `--profile-provider` values (upstream's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProfileProviderArg {
    /// The cloud provider's own profiles: the webhook's when it is the cloud provider and
    /// serves profiles; none otherwise (no cloud resolves profiles natively).
    Cloud,
    /// The webhook at `--webhook-url`; it must serve profiles.
    Webhook,
    /// None: a claim that names a profile is refused.
    None,
}

/// Arguments of `dranet run`. Upstream dranet's flag names where the meaning is the same.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    source: SourceArgs,
    #[command(flatten)]
    cloud: CloudArgs,
    /// Who resolves a claim's named `profile` (an address from an IPAM, …): cloud, webhook or
    /// none.
    #[arg(long, value_enum, default_value_t = ProfileProviderArg::Cloud, env = "DRANET_PROFILE_PROVIDER")]
    profile_provider: ProfileProviderArg,
    /// Kubeconfig file (default: in-cluster service account, else $KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "FILE", env = "DRANET_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    node: NodeArgs,
    /// Address of /metrics, /healthz and /readyz (`:PORT` listens on all addresses; empty: none).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = ":9177",
        env = "DRANET_BIND_ADDRESS"
    )]
    bind_address: String,
    #[command(flatten)]
    publish: PublishArgs,
    /// The kubelet's --root-dir: registration in DIR/plugins_registry, the socket in DIR/plugins/dra.net.
    #[arg(
        long,
        value_name = "DIR",
        default_value = dranet_kubeletplugin::DEFAULT_KUBELET_ROOT_DIR,
        env = "DRANET_KUBELET_ROOT_DIR"
    )]
    kubelet_root_dir: PathBuf,
    /// Directory of the prepared-claims store and the attach journal (keep it across restarts).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/var/run/dranet",
        env = "DRANET_STATE_DIR"
    )]
    state_dir: PathBuf,
    /// Upstream's database file: its directory becomes --state-dir (state is always kept).
    #[arg(long, value_name = "FILE", env = "DRANET_DB_PATH")]
    db_path: Option<PathBuf>,
    /// The container runtime's NRI socket.
    #[arg(
        long,
        value_name = "PATH",
        default_value = dranet_nri::DEFAULT_SOCKET_PATH,
        env = "DRANET_NRI_SOCKET"
    )]
    nri_socket: PathBuf,
    /// Rescans are rate limited to one per this interval after a burst (e.g. 2s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration, env = "DRANET_INVENTORY_MIN_POLL_INTERVAL")]
    inventory_min_poll_interval: Duration,
    /// Rescan at least this often, whether or not a hot-plug event came (e.g. 1m).
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_duration, env = "DRANET_INVENTORY_MAX_POLL_INTERVAL")]
    inventory_max_poll_interval: Duration,
    /// Rescans allowed at once before the rate limit applies.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..), env = "DRANET_INVENTORY_POLL_BURST")]
    inventory_poll_burst: u32,
    /// Rescan on uevents and netlink link events (false: only every max poll interval).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set, env = "DRANET_HOTPLUG")]
    hotplug: bool,
    /// Also publish the devices of this sysfs tree, e.g. a generated fixture: to try the daemon
    /// on a machine without the hardware (pods get their RDMA char devices; nothing else is done).
    #[arg(long, value_name = "DIR", env = "DRANET_FIXTURE_SYSFS")]
    fixture_sysfs: Option<PathBuf>,
    /// Log lines as text or JSON.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "DRANET_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// The runtime's NRI request timeout (containerd's `plugin_request_timeout`): RunPodSandbox
    /// answers within three quarters of it, and an attach that takes longer goes on while the
    /// pod's containers wait. The runtime does not tell it; `dranet doctor` reads it.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration, env = "DRANET_NRI_REQUEST_TIMEOUT")]
    nri_request_timeout: Duration,
    /// How long a pod's attach may go on after RunPodSandbox answered; past it the pod's
    /// containers fail with why. 0: it may not (a sandbox whose devices are not in within the
    /// NRI deadline fails).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration, env = "DRANET_DEVICE_ATTACH_TIMEOUT")]
    device_attach_timeout: Duration,
    /// How long the attach of a device configured with `addressing: SLAAC` waits for the
    /// kernel to autoconfigure a global IPv6 address from a router advertisement; none by then
    /// gives the pod's devices back to the host and fails the attach (upstream's flag).
    #[arg(long, value_name = "DURATION", default_value = "1500ms", value_parser = parse_duration, env = "DRANET_SLAAC_READY_TIMEOUT")]
    slaac_ready_timeout: Duration,
    /// The `dranet` executable on the host that the runtime runs as the pod containers' OCI
    /// hook (`dranet hook wait`), which holds a container until its pod's devices are in, with
    /// or without the NRI connection. Empty, or missing on the host: no hook (CreateContainer
    /// alone holds the containers).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/opt/dranet/bin/dranet",
        env = "DRANET_HOOK_PATH",
        // Empty is a value here: no hook.
        value_parser = clap::builder::TypedValueParser::map(clap::builder::OsStringValueParser::new(), PathBuf::from)
    )]
    hook_path: PathBuf,
    /// The runtime's CDI directory: the hook and the device metadata reach the containers
    /// through CDI devices.
    #[arg(long, value_name = "DIR", default_value = dranet_driver::daemon::DEFAULT_CDI_DIR, env = "DRANET_CDI_DIR")]
    cdi_dir: PathBuf,
    /// Device metadata in the containers (KEP-5304): each claim request's devices (attributes,
    /// interface name, addresses, MAC) in a JSON file under
    /// /var/run/kubernetes.io/dra-device-attributes in the containers that use it, mounted
    /// through a CDI spec in --cdi-dir. false: no files, no specs.
    #[arg(long, value_name = "BOOL", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, env = "DRANET_ENABLE_DEVICE_METADATA")]
    enable_device_metadata: bool,
    /// The versions of the device metadata format each file holds, comma-separated
    /// (metadata.resource.k8s.io/v1beta1 or v1beta1): written newest first, so that workloads
    /// built for Kubernetes 1.36 (v1alpha1) and 1.37 (v1beta1) each find theirs.
    #[arg(
        long,
        value_name = "VERSIONS",
        value_delimiter = ',',
        default_value = "v1beta1,v1alpha1",
        env = "DRANET_DEVICE_METADATA_VERSIONS"
    )]
    device_metadata_versions: Vec<String>,
}

/// Go-style durations as upstream takes them: `500ms`, `2s`, `1m`, `1m30s`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    dranet_util::parse_duration(s)
}

impl RunArgs {
    /// The daemon's configuration; every bad value is an error naming its flag.
    fn config(&self, node: String) -> Result<DaemonConfig, CliError> {
        let usage = CliError::Usage;
        let bind_address = if self.bind_address.is_empty() {
            None
        } else {
            Some(
                dranet_driver::daemon::http::parse_bind_address(&self.bind_address)
                    .map_err(|e| usage(format!("--bind-address: {e}")))?,
            )
        };
        let policy = self.publish.policy()?;
        if self.inventory_max_poll_interval.is_zero() {
            return Err(usage(
                "--inventory-max-poll-interval: must be more than 0".into(),
            ));
        }
        let state_dir = match &self.db_path {
            Some(p) => p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map(PathBuf::from)
                .ok_or_else(|| usage(format!("--db-path {}: has no directory", p.display())))?,
            None => self.state_dir.clone(),
        };
        let mut c = DaemonConfig::new(node);
        c.kubelet_root_dir = self.kubelet_root_dir.clone();
        c.state_dir = state_dir;
        c.nri_socket = self.nri_socket.clone();
        c.bind_address = bind_address;
        c.policy = policy;
        c.refresh_timeout = self.cloud.refresh_timeout()?;
        if self.nri_request_timeout.is_zero() {
            return Err(usage("--nri-request-timeout: must be more than 0".into()));
        }
        c.attach = AttachPolicy {
            nri_request_timeout: self.nri_request_timeout,
            device_attach_timeout: self.device_attach_timeout,
            hook: self.hook(&c.state_dir),
        };
        if self.slaac_ready_timeout.is_zero() {
            return Err(usage("--slaac-ready-timeout: must be more than 0".into()));
        }
        c.slaac_timeout = self.slaac_ready_timeout;
        c.cdi_dir = self.cdi_dir.clone();
        c.device_metadata = self.enable_device_metadata;
        c.device_metadata_versions = dranet_kubeletplugin::metadata::MetadataVersion::parse_list(
            &self.device_metadata_versions,
        )
        .map_err(|e| usage(format!("--device-metadata-versions: {e}")))?;
        c.poll = PollConfig {
            max_interval: self.inventory_max_poll_interval,
            min_interval: self.inventory_min_poll_interval,
            burst: self.inventory_poll_burst,
            hotplug: self.hotplug,
            ..PollConfig::default()
        };
        Ok(c)
    }

    /// The hook, if `--hook-path` names an executable that is there.
    fn hook(&self, state_dir: &std::path::Path) -> Option<HookConfig> {
        if self.hook_path.as_os_str().is_empty() {
            return None;
        }
        if !self.hook_path.is_file() {
            tracing::warn!(hook_path = %self.hook_path.display(), "the hook is not installed there: pods' containers are held by CreateContainer alone (a daemon that stalls while a pod starts cannot hold them)");
            return None;
        }
        Some(HookConfig {
            path: self.hook_path.clone(),
            socket: state_dir.join("hook.sock"),
            markers: state_dir.join("attached"),
            // The attach's own bound, and time for a restarting daemon to come back.
            timeout: self.device_attach_timeout.max(Duration::from_secs(30))
                + Duration::from_secs(30),
        })
    }

    /// How the node is scanned: the host (or `--sysfs`), plus `--fixture-sysfs`.
    fn rescan(&self) -> Result<dranet_driver::Rescan, CliError> {
        super::check_sysfs(&self.source.sysfs).map_err(CliError::Usage)?;
        let opts = self.source.discovery_options()?;
        let host = dranet_discovery::host(&self.source.sysfs, opts.clone());
        let fixture = match &self.fixture_sysfs {
            Some(dir) => {
                super::check_sysfs(dir)
                    .map_err(|e| CliError::Usage(e.replace("--sysfs", "--fixture-sysfs")))?;
                Some(dranet_discovery::host(dir, opts))
            }
            None => None,
        };
        Ok(Arc::new(move || {
            let mut inv = host.discover().map_err(|e| e.to_string())?;
            if let Some(f) = &fixture {
                let extra = f.discover().map_err(|e| format!("--fixture-sysfs: {e}"))?;
                merge(&mut inv, extra);
            }
            Ok(inv)
        }))
    }
}

/// The fixture's devices beside the host's (the host's win a name clash); its NUMA layout and
/// GPUs stand for the node's, since the fixture describes the hardware.
fn merge(inv: &mut Inventory, extra: Inventory) {
    for d in extra.devices {
        if inv.device(&d.name).is_none() {
            inv.devices.push(d);
        }
    }
    inv.devices.sort_by(|a, b| a.name.cmp(&b.name));
    inv.gpus.extend(extra.gpus);
    if !extra.numa.nodes.is_empty() {
        inv.numa = extra.numa;
    }
    inv.warnings.extend(extra.warnings);
    inv.excluded.extend(extra.excluded);
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn run(a: &RunArgs) -> Result<(), CliError> {
    let node = a.node.name()?;
    let mut config = a.config(node)?;
    let rescan = a.rescan()?;
    // Cloud detection blocks (a short metadata probe at most), before the runtime starts. CKS
    // is told by the Node's labels: read them first when it may be.
    let node_labels = a
        .cloud
        .wants_node_labels(&a.source.sysfs)
        .then(|| read_node_labels(a.kubeconfig.as_deref(), &config.node_name));
    let chosen = a.cloud.choose(&a.source.sysfs, node_labels)?;
    config.profiles = match a.profile_provider {
        ProfileProviderArg::Webhook => Some(a.cloud.profile_webhook(&chosen)? as _),
        ProfileProviderArg::Cloud => chosen
            .webhook
            .clone()
            .filter(|w| w.capabilities().profile_provider)
            .map(|w| w as _),
        ProfileProviderArg::None => None,
    };
    config.cloud = chosen.provider;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::Usage(format!("start the runtime: {e}")))?;
    rt.block_on(async move {
        let api = match &a.kubeconfig {
            Some(p) => KubeClient::from_kubeconfig(p).await,
            None => KubeClient::infer().await,
        }
        .map_err(|e| CliError::Usage(format!("--kubeconfig: {e}")))?
        .field_manager(dranet_core::DRIVER_NAME);
        tracing::info!(config = ?config, "starting");
        let daemon = Daemon::start(config, rescan, api)
            .await
            .map_err(|e| CliError::Usage(e.to_string()))?;
        daemon
            .run(signal())
            .await
            .map_err(|e| CliError::Usage(e.to_string()))
    })
}

/// The labels of Node `node` from the API server (a few seconds at most), or why not.
fn read_node_labels(
    kubeconfig: Option<&Path>,
    node: &str,
) -> Result<dranet_cloud::cks::Labels, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let read = async {
            let api = match kubeconfig {
                Some(p) => KubeClient::from_kubeconfig(p).await,
                None => KubeClient::infer().await,
            }
            .map_err(|e| e.to_string())?;
            api.node_labels(node).await.map_err(|e| e.to_string())
        };
        tokio::time::timeout(NODE_LABELS_TIMEOUT, read)
            .await
            .unwrap_or_else(|_| Err(format!("no answer in {NODE_LABELS_TIMEOUT:?}")))
    })
}

/// How long start-up waits for the Node's labels.
const NODE_LABELS_TIMEOUT: Duration = Duration::from_secs(5);

/// Resolves on SIGTERM or SIGINT.
async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot listen for signals; stop the daemon with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn the_node_name_and_the_publishing_flags_as_upstream_and_inventory_spell_them() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            run: super::RunArgs,
        }
        for flag in ["--node-name", "--hostname-override"] {
            let c = Cli::try_parse_from(["run", flag, "n1"]).unwrap();
            assert_eq!(c.run.node.node_name.as_deref(), Some("n1"), "{flag}");
            assert_eq!(c.run.node.name().unwrap(), "n1");
        }
        let c = Cli::try_parse_from([
            "run",
            "--filter",
            "",
            "--share-filter",
            "true",
            "--share-children",
            "3",
            "--feature-gates",
            "DRAListTypeAttributes=true",
        ])
        .unwrap();
        let config = c.run.config("n1".into()).unwrap();
        assert!(config.policy.filter.is_none());
        assert_eq!(config.policy.share.as_ref().map(|s| s.children), Some(3));
        assert!(config.policy.attributes.numa_node_list);
        let c = Cli::try_parse_from(["run", "--feature-gates", "Nope=true"]).unwrap();
        let e = c.run.config("n1".into()).unwrap_err().to_string();
        assert!(
            e.starts_with("--feature-gates: unknown feature gate"),
            "{e}"
        );
    }

    #[test]
    fn device_metadata_is_on_unless_turned_off() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            run: super::RunArgs,
        }
        let metadata = |args: &[&str]| {
            let c =
                Cli::try_parse_from(std::iter::once("run").chain(args.iter().copied())).unwrap();
            c.run.config("n1".into()).unwrap().device_metadata
        };
        assert!(metadata(&[]));
        assert!(metadata(&["--enable-device-metadata"]));
        assert!(metadata(&["--enable-device-metadata=true"]));
        assert!(!metadata(&["--enable-device-metadata=false"]));
        assert!(!metadata(&["--enable-device-metadata", "false"]));
        assert!(Cli::try_parse_from(["run", "--enable-device-metadata=maybe"]).is_err());
        use dranet_kubeletplugin::metadata::MetadataVersion::{V1Alpha1, V1Beta1};
        let versions = |args: &[&str]| {
            let c =
                Cli::try_parse_from(std::iter::once("run").chain(args.iter().copied())).unwrap();
            c.run
                .config("n1".into())
                .map(|c| c.device_metadata_versions)
                .map_err(|e| e.to_string())
        };
        assert_eq!(versions(&[]).unwrap(), [V1Beta1, V1Alpha1]);
        assert_eq!(
            versions(&[
                "--device-metadata-versions",
                "metadata.resource.k8s.io/v1alpha1"
            ])
            .unwrap(),
            [V1Alpha1]
        );
        assert_eq!(
            versions(&["--device-metadata-versions=v1alpha1,v1beta1"]).unwrap(),
            [V1Beta1, V1Alpha1]
        );
        let e = versions(&["--device-metadata-versions=v1alpha1,v2"]).unwrap_err();
        assert!(
            e.starts_with("--device-metadata-versions: unknown device metadata version \"v2\""),
            "{e}"
        );
    }

    #[test]
    fn durations_as_go_writes_them() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        for bad in ["", "2", "s", "2x", "-1s", "1m-"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains("not a duration"), "{bad}: {e}");
        }
    }
}
