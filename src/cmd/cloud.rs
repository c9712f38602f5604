//! The cloud provider flags shared by the commands that publish attributes, and the webhook's.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dranet_cloud::detect::{Clients, Detector, Hint, Provider, WebhookOptions};
use dranet_cloud::dmi::Cloud;
use dranet_cloud::webhook::Webhook;
use dranet_core::{CloudProvider, DeviceIdentifiers, Inventory};

use super::CliError;

/// `--cloud-provider-hint` values (upstream's, case-insensitive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "lower")]
pub enum CloudHint {
    /// Detect: DMI, then a short probe of each metadata service; the webhook last, when
    /// `--webhook-url` is given.
    Auto,
    /// Azure: read IMDS without detecting.
    Azure,
    /// GCE: read the metadata server without detecting.
    Gce,
    /// AWS: read IMDS (v2) without detecting.
    Aws,
    /// OCI (OKE's nodes): read the metadata service without detecting.
    Oke,
    /// Alibaba Cloud: read the metadata service without detecting.
    Alibaba,
    /// CoreWeave CKS: the fabric from the Node's labels (its own Node, from the API server; or
    /// --node-labels-file).
    Cks,
    /// The webhook at `--webhook-url`.
    Webhook,
    /// No cloud: never query a metadata service.
    None,
}

impl CloudHint {
    fn cloud(self) -> Option<Cloud> {
        Some(match self {
            CloudHint::Azure => Cloud::Azure,
            CloudHint::Gce => Cloud::Gce,
            CloudHint::Aws => Cloud::Aws,
            CloudHint::Oke => Cloud::Oke,
            CloudHint::Alibaba => Cloud::Alibaba,
            _ => return None,
        })
    }
}

/// Cloud provider options shared by the commands that publish attributes.
#[derive(Debug, Clone, clap::Args)]
pub struct CloudArgs {
    /// Cloud provider: auto, azure, gce, aws, oke, alibaba, cks, webhook or none
    /// (case-insensitive).
    /// With a `--sysfs` other than `/sys` (a fixture or another machine's tree) the default is
    /// none, since this machine's metadata service does not describe it, unless an Azure IMDS
    /// endpoint or a webhook URL is given.
    #[arg(
        long,
        value_enum,
        ignore_case = true,
        value_name = "HINT",
        env = "DRANET_CLOUD_PROVIDER_HINT"
    )]
    pub cloud_provider_hint: Option<CloudHint>,
    /// Azure IMDS base URL.
    #[arg(long, value_name = "URL", default_value = dranet_cloud::azure::DEFAULT_ENDPOINT, env = "DRANET_AZURE_IMDS_ENDPOINT")]
    pub azure_imds_endpoint: String,
    /// Azure IMDS api-version.
    #[arg(long, value_name = "VERSION", default_value = dranet_cloud::azure::DEFAULT_API_VERSION, env = "DRANET_AZURE_IMDS_API_VERSION")]
    pub azure_imds_api_version: String,
    /// An IMDS document saved on the node (`curl -H Metadata:true
    /// "http://169.254.169.254/metadata/instance?api-version=2021-02-01"`, or its `compute` part):
    /// the Azure attributes without a metadata service, e.g. to check `ib-same-fabric` offline.
    #[arg(long, value_name = "FILE", env = "DRANET_AZURE_IMDS_FILE")]
    pub azure_imds_file: Option<PathBuf>,
    /// GCE's instance document saved on the node (`curl -H Metadata-Flavor:Google
    /// "http://169.254.169.254/computeMetadata/v1/instance/?recursive=true&alt=json"`): the
    /// gce.dra.net attributes without a metadata server.
    #[arg(long, value_name = "FILE", env = "DRANET_GCE_METADATA_FILE")]
    pub gce_metadata_file: Option<PathBuf>,
    /// AWS IMDS answers saved on the node, a JSON object by path under `/latest/`
    /// (`dynamic/instance-identity/document`, `meta-data/placement/group-name`, …): the
    /// aws.dra.net attributes without IMDS.
    #[arg(long, value_name = "FILE", env = "DRANET_AWS_METADATA_FILE")]
    pub aws_metadata_file: Option<PathBuf>,
    /// OCI's host document saved on the node (`curl -H "Authorization: Bearer Oracle"
    /// http://169.254.169.254/opc/v2/host/`): the oke.dra.net attributes without a metadata
    /// service.
    #[arg(long, value_name = "FILE", env = "DRANET_OKE_METADATA_FILE")]
    pub oke_metadata_file: Option<PathBuf>,
    /// Alibaba IMDS answers saved on the node, a JSON object by path under `/latest/`
    /// (`meta-data/instance/instance-type`): the alibaba.dra.net attributes without IMDS.
    #[arg(long, value_name = "FILE", env = "DRANET_ALIBABA_METADATA_FILE")]
    pub alibaba_metadata_file: Option<PathBuf>,
    /// The Node's labels saved on the node (`kubectl get node NAME -o yaml`, or a map of labels;
    /// JSON or YAML): CKS's attributes without the API server, e.g. to preview them with
    /// `inventory`.
    #[arg(long, value_name = "FILE", env = "DRANET_NODE_LABELS_FILE")]
    pub node_labels_file: Option<PathBuf>,
    /// The webhook provider's URL (`http://127.0.0.1:8081`, `unix:///run/dranet-webhook.sock`,
    /// `https://dranet-webhook.ops.svc:8443` off the node): for `--cloud-provider-hint webhook`
    /// and `--profile-provider webhook`.
    #[arg(long, value_name = "URL", env = "DRANET_WEBHOOK_URL")]
    pub webhook_url: Option<String>,
    /// The CA bundle (PEM) an `https://` webhook's certificate is checked with; by default the
    /// cluster's CA from the pod's service account, when there is one.
    #[arg(long, value_name = "FILE", env = "DRANET_WEBHOOK_CA_FILE")]
    pub webhook_ca_file: Option<PathBuf>,
    /// Timeout of each webhook request (upstream's: 10s).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = super::run::parse_duration, env = "DRANET_WEBHOOK_TIMEOUT")]
    pub webhook_timeout: Duration,
    /// How long one refresh of the cloud provider may take, all devices together (the webhook is
    /// asked about each). `run` publishes without what it has not answered yet, and again when
    /// it has; the others show what it answered in time.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = super::run::parse_duration, env = "DRANET_PROVIDER_REFRESH_TIMEOUT")]
    pub provider_refresh_timeout: Duration,
}

impl Default for CloudArgs {
    /// The flags' defaults.
    fn default() -> Self {
        Self {
            cloud_provider_hint: None,
            azure_imds_endpoint: dranet_cloud::azure::DEFAULT_ENDPOINT.into(),
            azure_imds_api_version: dranet_cloud::azure::DEFAULT_API_VERSION.into(),
            azure_imds_file: None,
            gce_metadata_file: None,
            aws_metadata_file: None,
            oke_metadata_file: None,
            alibaba_metadata_file: None,
            node_labels_file: None,
            webhook_url: None,
            webhook_ca_file: None,
            webhook_timeout: dranet_cloud::webhook::DEFAULT_TIMEOUT,
            provider_refresh_timeout: dranet_driver::refresh::DEFAULT_REFRESH_TIMEOUT,
        }
    }
}

/// The cloud provider chosen, and the webhook when it is the provider.
pub struct Chosen {
    /// Attributes and device configuration.
    pub provider: Arc<dyn CloudProvider>,
    /// The webhook, when it is the provider (it may also serve profiles).
    pub webhook: Option<Arc<Webhook>>,
}

impl CloudArgs {
    /// How an `https://` webhook is trusted: `--webhook-ca-file`, else the service account's CA
    /// when the daemon runs in a pod; `None` for other URLs (and for https without either, which
    /// the webhook then refuses, naming the flag).
    fn webhook_tls(&self) -> Result<Option<dranet_cloud::tls::Tls>, CliError> {
        let https = self
            .webhook_url
            .as_deref()
            .is_some_and(|u| u.starts_with("https://"));
        let ca = match &self.webhook_ca_file {
            Some(f) => f.clone(),
            None if https && Path::new(dranet_cloud::tls::SERVICE_ACCOUNT_CA).exists() => {
                PathBuf::from(dranet_cloud::tls::SERVICE_ACCOUNT_CA)
            }
            None => return Ok(None),
        };
        dranet_cloud::tls::Tls::from_ca_file(&ca)
            .map(Some)
            .map_err(|e| CliError::Usage(format!("--webhook-ca-file: {e}")))
    }

    /// The metadata file given, with its flag and cloud; more than one is an error.
    fn metadata_file(&self) -> Result<Option<(&'static str, Cloud, &Path)>, CliError> {
        let given: Vec<(&'static str, Cloud, &Path)> = [
            ("--azure-imds-file", Cloud::Azure, &self.azure_imds_file),
            ("--gce-metadata-file", Cloud::Gce, &self.gce_metadata_file),
            ("--aws-metadata-file", Cloud::Aws, &self.aws_metadata_file),
            ("--oke-metadata-file", Cloud::Oke, &self.oke_metadata_file),
            (
                "--alibaba-metadata-file",
                Cloud::Alibaba,
                &self.alibaba_metadata_file,
            ),
        ]
        .into_iter()
        .filter_map(|(f, c, p)| Some((f, c, p.as_deref()?)))
        .collect();
        match given.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(*one)),
            [a, b, ..] => Err(CliError::Usage(format!(
                "{} and {}: give one cloud's metadata file",
                a.0, b.0
            ))),
        }
    }

    /// The detection hint for a node read from `sysfs` (no metadata file given): the flag, else
    /// detection on this machine's `/sys`, none for another tree (a fixture) unless a
    /// metadata service, a webhook or the Node's labels are named.
    fn hint(&self, sysfs: &Path) -> Hint {
        let endpoint_given = self.azure_imds_endpoint != dranet_cloud::azure::DEFAULT_ENDPOINT;
        match self.cloud_provider_hint {
            Some(CloudHint::Auto) => Hint::Auto,
            Some(CloudHint::Webhook) => Hint::Webhook,
            Some(CloudHint::Cks) => Hint::Cks,
            Some(CloudHint::None) => Hint::None,
            Some(h) => h.cloud().map_or(Hint::None, Hint::Cloud),
            None if sysfs != Path::new("/sys")
                && !endpoint_given
                && self.webhook_url.is_none()
                && self.node_labels_file.is_none() =>
            {
                Hint::None
            }
            None => Hint::Auto,
        }
    }

    /// Whether the provider chosen for `sysfs` may need the Node's labels from the API server
    /// (CKS, hinted or detected) and no file gives them.
    pub fn wants_node_labels(&self, sysfs: &Path) -> bool {
        self.node_labels_file.is_none()
            && matches!(self.metadata_file(), Ok(None))
            && matches!(self.hint(sysfs), Hint::Auto | Hint::Cks)
    }

    /// `--node-labels-file`, read: `None` when not given.
    fn labels_from_file(&self) -> Result<Option<dranet_cloud::cks::Labels>, CliError> {
        let Some(f) = &self.node_labels_file else {
            return Ok(None);
        };
        let bad =
            |why: String| CliError::Usage(format!("--node-labels-file {}: {why}", f.display()));
        let mut errors = Vec::new();
        let docs = super::load::documents(f, &mut errors);
        if let Some(e) = errors.first() {
            return Err(CliError::Usage(format!("--node-labels-file: {e}")));
        }
        let [doc] = docs.as_slice() else {
            return Err(bad(format!(
                "{} documents; give one Node or one map of labels",
                docs.len()
            )));
        };
        dranet_cloud::cks::labels_of(&doc.value)
            .map(Some)
            .map_err(bad)
    }

    /// Chooses the cloud provider for a node read from `sysfs`, logging how it was decided: a
    /// metadata file when one is given, else the hint (detection by default). `node_labels`:
    /// the Node's labels as the caller read them from the API server, or why it could not
    /// (`--node-labels-file` takes their place).
    pub fn choose(
        &self,
        sysfs: &Path,
        node_labels: Option<Result<dranet_cloud::cks::Labels, String>>,
    ) -> Result<Chosen, CliError> {
        if let Some((flag, cloud, file)) = self.metadata_file()? {
            if let Some(h) = self.cloud_provider_hint
                && h != CloudHint::Auto
                && h.cloud() != Some(cloud)
            {
                let hint = clap::ValueEnum::to_possible_value(&h)
                    .map(|v| v.get_name().to_string())
                    .unwrap_or_default();
                return Err(CliError::Usage(format!(
                    "{flag} is {cloud}'s metadata; it cannot go with --cloud-provider-hint {hint}"
                )));
            }
            let bad = |why: String| CliError::Usage(format!("{flag} {}: {why}", file.display()));
            let body = std::fs::read(file).map_err(|e| bad(e.to_string()))?;
            let (p, warnings) =
                Provider::from_file(cloud, &body, sysfs).map_err(|e| bad(e.to_string()))?;
            for w in &warnings {
                tracing::warn!("{w}");
            }
            tracing::info!("cloud provider: {cloud} (from {flag} {})", file.display());
            return Ok(Chosen {
                provider: p.into_cloud_provider(),
                webhook: None,
            });
        }
        let hint = self.hint(sysfs);
        let node_labels = match self.labels_from_file()? {
            Some(l) => Some(Ok(l)),
            None => node_labels,
        };
        if hint == Hint::Webhook && self.webhook_url.is_none() {
            return Err(CliError::Usage(
                "--cloud-provider-hint webhook needs --webhook-url".into(),
            ));
        }
        let detector = Detector {
            clients: Clients {
                azure: dranet_cloud::azure::ImdsClient {
                    endpoint: self.azure_imds_endpoint.clone(),
                    api_version: self.azure_imds_api_version.clone(),
                    ..Default::default()
                },
                ..Clients::default()
            },
            webhook: match &self.webhook_url {
                Some(url) => Some(WebhookOptions {
                    url: url.clone(),
                    tls: self.webhook_tls()?,
                    timeout: self.webhook_timeout,
                }),
                None => None,
            },
            node_labels,
            ..Detector::new(sysfs, hint)
        };
        let d = detector.detect_blocking();
        let name = d.provider.as_ref().map_or("none", |p| match p {
            Provider::Azure(_) => "azure",
            Provider::Gce(_) => "gce",
            Provider::Aws(_) => "aws",
            Provider::Oke(_) => "oke",
            Provider::Alibaba(_) => "alibaba",
            Provider::Cks(_) => "cks",
            Provider::Webhook(_) => "webhook",
        });
        tracing::info!("cloud provider: {name} ({}, {:?})", d.how, d.elapsed);
        for w in &d.warnings {
            tracing::warn!("{w}");
        }
        Ok(match d.provider {
            Some(Provider::Webhook(w)) => Chosen {
                provider: w.clone(),
                webhook: Some(w),
            },
            Some(p) => Chosen {
                provider: p.into_cloud_provider(),
                webhook: None,
            },
            None => Chosen {
                provider: Arc::new(dranet_core::NoCloud),
                webhook: None,
            },
        })
    }

    /// The cloud provider for `inv`, read from `sysfs`, brought up to date for its devices (the
    /// webhook is asked about each): what `inventory` and `check` publish.
    pub fn provider(
        &self,
        sysfs: &Path,
        inv: &Inventory,
    ) -> Result<Arc<dyn CloudProvider>, CliError> {
        let timeout = self.refresh_timeout()?;
        let cloud = self.choose(sysfs, None)?.provider;
        refresh_blocking(cloud.as_ref(), inv, timeout)?;
        Ok(cloud)
    }

    /// `--provider-refresh-timeout`, which may not be zero (no provider answers at once).
    pub fn refresh_timeout(&self) -> Result<Duration, CliError> {
        if self.provider_refresh_timeout.is_zero() {
            return Err(CliError::Usage(
                "--provider-refresh-timeout: must be more than 0".into(),
            ));
        }
        Ok(self.provider_refresh_timeout)
    }

    /// The webhook as a profile provider (`--profile-provider webhook`): `chosen`'s when the
    /// webhook is the cloud provider, else connected now. It must serve profiles.
    pub fn profile_webhook(&self, chosen: &Chosen) -> Result<Arc<Webhook>, CliError> {
        let w = match &chosen.webhook {
            Some(w) => w.clone(),
            None => {
                let url = self.webhook_url.as_deref().ok_or_else(|| {
                    CliError::Usage("--profile-provider webhook needs --webhook-url".into())
                })?;
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| CliError::Usage(format!("start a runtime: {e}")))?;
                let w = rt
                    .block_on(Webhook::connect(
                        url,
                        self.webhook_tls()?,
                        self.webhook_timeout,
                        dranet_cloud::RetryPolicy::default(),
                    ))
                    .map_err(|e| CliError::Usage(format!("--webhook-url {url}: {e}")))?;
                Arc::new(w)
            }
        };
        if !w.capabilities().profile_provider {
            return Err(CliError::Usage(format!(
                "--profile-provider webhook: the webhook at {} does not serve profiles \
                 (its /health says profileProvider: false)",
                w.url()
            )));
        }
        Ok(w)
    }
}

/// Asks `cloud` about every device of `inv` (the webhook; the clouds know everything already),
/// for at most `timeout`: what it has not answered by then is left out, with a warning.
fn refresh_blocking(
    cloud: &dyn CloudProvider,
    inv: &Inventory,
    timeout: Duration,
) -> Result<(), CliError> {
    let ids: Vec<DeviceIdentifiers> = inv.devices.iter().map(DeviceIdentifiers::of).collect();
    let ended = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Usage(format!("start a runtime: {e}")))?
        .block_on(async { tokio::time::timeout(timeout, cloud.refresh(&ids)).await });
    if ended.is_err() {
        tracing::warn!(
            provider = cloud.name(),
            ?timeout,
            "the cloud provider did not answer for every device within --provider-refresh-timeout; shown without what it had not answered"
        );
    }
    Ok(())
}
