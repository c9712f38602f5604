//! Which cloud the node is on: decided from DMI when it can tell (so a node off every cloud asks
//! nothing and waits for nothing), by short parallel probes of the metadata services when it
//! cannot (a container without the host's DMI); then one read of that cloud's metadata, retried
//! within a budget. Every failure is a warning and no cloud attributes, never a crash.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dranet_core::CloudProvider;

use crate::alibaba::{self, AlibabaInstance};
use crate::aws::{self, AwsInstance};
use crate::azure::{AzureInstance, ImdsClient};
use crate::cks::{self, CksNode, Labels};
use crate::client::{LINK_LOCAL_ENDPOINT, MetadataClient};
use crate::dmi::{Cloud, Dmi};
use crate::gce::{self, GceInstance};
use crate::http::Result;
use crate::oke::{self, OkeInstance};
use crate::retry::RetryPolicy;
use crate::webhook::Webhook;

pub mod azure;

/// What the operator said (`--cloud-provider-hint`; upstream's values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// Detect: DMI, else a short probe of each metadata service; the webhook last, when one is
    /// configured.
    Auto,
    /// This cloud: skip detection, read its metadata (with retries).
    Cloud(Cloud),
    /// CoreWeave CKS: the Node's labels ([`Detector::node_labels`]).
    Cks,
    /// The webhook.
    Webhook,
    /// No cloud: never touch the network.
    None,
}

/// The metadata service of each cloud.
#[derive(Debug, Clone)]
pub struct Clients {
    /// Azure IMDS.
    pub azure: ImdsClient,
    /// GCE's metadata server.
    pub gce: MetadataClient,
    /// EC2 IMDS.
    pub aws: MetadataClient,
    /// OCI's metadata service.
    pub oke: MetadataClient,
    /// Alibaba's metadata service.
    pub alibaba: MetadataClient,
}

impl Default for Clients {
    fn default() -> Self {
        Self {
            azure: ImdsClient::default(),
            gce: MetadataClient::new(LINK_LOCAL_ENDPOINT),
            aws: MetadataClient::new(LINK_LOCAL_ENDPOINT),
            oke: MetadataClient::new(LINK_LOCAL_ENDPOINT),
            alibaba: MetadataClient::new(alibaba::DEFAULT_ENDPOINT),
        }
    }
}

/// The webhook to use (`--webhook-url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookOptions {
    /// `http://host[:port]`, `https://host[:port]` or `unix:///path/to.sock`.
    pub url: String,
    /// How an `https://` webhook's certificate is checked.
    pub tls: Option<crate::tls::Tls>,
    /// Timeout of each request.
    pub timeout: Duration,
}

/// A provider found.
#[derive(Debug, Clone)]
pub enum Provider {
    /// Azure.
    Azure(AzureInstance),
    /// GCE.
    Gce(GceInstance),
    /// AWS.
    Aws(AwsInstance),
    /// OCI.
    Oke(OkeInstance),
    /// Alibaba.
    Alibaba(AlibabaInstance),
    /// CoreWeave CKS.
    Cks(CksNode),
    /// The webhook (shared: it may also be the profile provider).
    Webhook(Arc<Webhook>),
}

impl Provider {
    /// `cloud`'s provider from a metadata document saved on the node (the
    /// `--<cloud>-metadata-file` flags), for a node whose sysfs is at `sysfs`:
    ///
    /// - azure: IMDS's instance document, or its `compute` part;
    /// - gce: `instance/?recursive=true&alt=json`;
    /// - aws, alibaba: a JSON object of IMDS answers by path under `/latest/`
    ///   ([`crate::PathMap`]);
    /// - oke: `/opc/v2/host/`.
    pub fn from_file(
        cloud: Cloud,
        body: &[u8],
        sysfs: &std::path::Path,
    ) -> Result<(Provider, Vec<String>)> {
        Ok(match cloud {
            Cloud::Azure => (
                Provider::Azure(crate::azure::parse_instance_document(body)?),
                Vec::new(),
            ),
            Cloud::Gce => {
                let (i, w) = gce::parse_instance_document(body)?;
                (Provider::Gce(i), w)
            }
            Cloud::Aws => {
                let m = crate::PathMap::parse("AWS metadata file", body)?;
                let (i, w) = AwsInstance::from_paths(&m, sysfs)?;
                (Provider::Aws(i), w)
            }
            Cloud::Oke => {
                let (i, w) = oke::parse_host_document(body)?;
                (Provider::Oke(i), w)
            }
            Cloud::Alibaba => {
                let m = crate::PathMap::parse("Alibaba metadata file", body)?;
                (
                    Provider::Alibaba(AlibabaInstance::from_paths(&m, sysfs)?),
                    Vec::new(),
                )
            }
        })
    }

    /// As the driver takes it.
    pub fn into_cloud_provider(self) -> Arc<dyn CloudProvider> {
        match self {
            Provider::Azure(p) => Arc::new(p),
            Provider::Gce(p) => Arc::new(p),
            Provider::Aws(p) => Arc::new(p),
            Provider::Oke(p) => Arc::new(p),
            Provider::Alibaba(p) => Arc::new(p),
            Provider::Cks(p) => Arc::new(p),
            Provider::Webhook(p) => p,
        }
    }
}

/// The outcome of detection.
#[derive(Debug, Default)]
pub struct Detection {
    /// The provider, when one was found and answered.
    pub provider: Option<Provider>,
    /// How it was decided (for the log).
    pub how: String,
    /// What went wrong, each a sentence for the log.
    pub warnings: Vec<String>,
    /// Time spent.
    pub elapsed: Duration,
}

/// Decides which cloud the node is on and reads its metadata.
#[derive(Debug, Clone)]
pub struct Detector {
    /// The sysfs root: DMI (`class/dmi/id/*`), and the `efa` and `erdma` devices.
    pub sysfs: PathBuf,
    /// The operator's hint.
    pub hint: Hint,
    /// The metadata services.
    pub clients: Clients,
    /// The webhook, when configured.
    pub webhook: Option<WebhookOptions>,
    /// Retries once the cloud is known.
    pub retry: RetryPolicy,
    /// Time of each probe when DMI cannot tell.
    pub probe_timeout: Duration,
    /// The clouds `Auto` considers.
    pub candidates: Vec<Cloud>,
    /// The node's labels (its Node object's, read by the caller, or why they could not be):
    /// CKS is told by them, after the metadata services and before the webhook, as upstream
    /// orders it. `None`: not read (CKS is not considered).
    pub node_labels: Option<std::result::Result<Labels, String>>,
}

impl Detector {
    /// A detector with the default services, retry policy and a 500 ms probe.
    pub fn new(sysfs: impl Into<PathBuf>, hint: Hint) -> Self {
        Self {
            sysfs: sysfs.into(),
            hint,
            clients: Clients::default(),
            webhook: None,
            retry: RetryPolicy::default(),
            probe_timeout: Duration::from_millis(500),
            candidates: Cloud::ALL.to_vec(),
            node_labels: None,
        }
    }

    /// Detects and reads.
    pub async fn detect(&self) -> Detection {
        let start = Instant::now();
        let mut d = Detection::default();
        let cloud = match self.hint {
            Hint::None => {
                d.how = "cloud provider hint: none".into();
                None
            }
            Hint::Webhook => {
                d.how = "cloud provider hint: webhook".into();
                self.connect_webhook(&mut d).await;
                None
            }
            Hint::Cloud(c) => {
                d.how = format!("cloud provider hint: {c}");
                Some(c)
            }
            Hint::Cks => {
                d.how = "cloud provider hint: cks".into();
                self.read_cks(&mut d, true);
                None
            }
            Hint::Auto => {
                let c = match Dmi::read(&self.sysfs) {
                    Some(dmi) => {
                        let c = dmi.cloud().filter(|c| self.candidates.contains(c));
                        d.how = match c {
                            Some(c) => format!("DMI says {c}"),
                            None => "DMI names no cloud".into(),
                        };
                        c
                    }
                    None => {
                        let c = self.probe_all().await;
                        d.how = format!(
                            "no DMI; probed {} for at most {:?}: {}",
                            names(&self.candidates),
                            self.probe_timeout,
                            c.map_or("none answered".to_string(), |c| format!("{c} answered"))
                        );
                        c
                    }
                };
                if c.is_none() {
                    self.read_cks(&mut d, false);
                }
                if c.is_none() && d.provider.is_none() && self.webhook.is_some() {
                    self.connect_webhook(&mut d).await;
                }
                c
            }
        };
        if let Some(c) = cloud {
            match self.read(c).await {
                Ok((p, warnings)) => {
                    d.provider = Some(p);
                    d.warnings.extend(warnings);
                }
                Err(e) => d.warnings.push(format!("{e}; no {c}.dra.net attributes")),
            }
        }
        d.elapsed = start.elapsed();
        d
    }

    /// [`Detector::detect`] on a private current-thread runtime, for synchronous callers.
    pub fn detect_blocking(&self) -> Detection {
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(self.detect()),
            Err(e) => Detection {
                warnings: vec![format!(
                    "cannot start a runtime for the metadata services: {e}; no cloud attributes"
                )],
                ..Detection::default()
            },
        }
    }

    /// CKS from the node's labels: with the hint (`told`), missing labels are a warning; when
    /// detecting, a node without [`cks::label::CLUSTER`] is not CKS.
    fn read_cks(&self, d: &mut Detection, told: bool) {
        match &self.node_labels {
            Some(Ok(labels)) if cks::is_cks(labels) => {
                if !told {
                    d.how.push_str(&format!("; the Node has {}", cks::label::CLUSTER));
                }
                let (node, warnings) = CksNode::from_labels(labels, &self.sysfs);
                d.provider = Some(Provider::Cks(node));
                d.warnings.extend(warnings);
            }
            Some(Ok(_)) if told => d.warnings.push(format!(
                "the Node has no {} label: not a CKS node; no coreweave.dra.net attributes",
                cks::label::CLUSTER
            )),
            Some(Err(e)) if told => d.warnings.push(format!(
                "cannot read the Node's labels: {e}; no coreweave.dra.net attributes"
            )),
            Some(Err(e)) => d
                .how
                .push_str(&format!("; the Node's labels unread ({e}), so not CKS")),
            None if told => d.warnings.push(
                "CKS needs the Node's labels (the API server, or --node-labels-file); no coreweave.dra.net attributes".into(),
            ),
            _ => {}
        }
    }

    async fn connect_webhook(&self, d: &mut Detection) {
        let Some(w) = &self.webhook else {
            d.warnings.push(
                "the webhook cloud provider needs --webhook-url; no webhook attributes".into(),
            );
            return;
        };
        match Webhook::connect(&w.url, w.tls.clone(), w.timeout, self.retry).await {
            Ok(h) if h.capabilities().cloud_provider => {
                d.how.push_str(&format!("; webhook {} answered", w.url));
                d.provider = Some(Provider::Webhook(Arc::new(h)));
            }
            Ok(_) => d.how.push_str(&format!(
                "; webhook {} serves no device attributes (cloudProvider: false)",
                w.url
            )),
            Err(e) => d
                .warnings
                .push(format!("webhook {}: {e}; no webhook attributes", w.url)),
        }
    }

    /// Probes every candidate at once; the first of upstream's order that answered.
    async fn probe_all(&self) -> Option<Cloud> {
        let probes = self.candidates.iter().map(|&c| async move {
            let yes = tokio::time::timeout(self.probe_timeout, self.probe(c))
                .await
                .unwrap_or(false);
            yes.then_some(c)
        });
        let found: Vec<Cloud> = futures::future::join_all(probes)
            .await
            .into_iter()
            .flatten()
            .collect();
        Cloud::ALL.into_iter().find(|c| found.contains(c))
    }

    async fn probe(&self, c: Cloud) -> bool {
        let quick = |m: &MetadataClient| MetadataClient {
            request_timeout: self.probe_timeout,
            ..m.clone()
        };
        match c {
            Cloud::Azure => self
                .clients
                .azure
                .get("compute", self.probe_timeout)
                .await
                .is_ok(),
            Cloud::Gce => gce::probe(&quick(&self.clients.gce)).await,
            Cloud::Aws => aws::probe(&quick(&self.clients.aws)).await,
            Cloud::Oke => oke::probe(&quick(&self.clients.oke)).await,
            Cloud::Alibaba => alibaba::probe(&quick(&self.clients.alibaba)).await,
        }
    }

    /// Reads `c`'s metadata within the retry policy.
    pub async fn read(&self, cloud: Cloud) -> Result<(Provider, Vec<String>)> {
        let policy = self.retry;
        let c = &self.clients;
        Ok(match cloud {
            Cloud::Azure => {
                let (i, w) = c.azure.instance(policy).await?;
                (Provider::Azure(i), w)
            }
            Cloud::Gce => {
                let (i, w) = gce::read(&c.gce, policy).await?;
                (Provider::Gce(i), w)
            }
            Cloud::Aws => {
                let (i, w) = aws::read(&c.aws, policy, &self.sysfs).await?;
                (Provider::Aws(i), w)
            }
            Cloud::Oke => {
                let (i, w) = oke::read(&c.oke, policy).await?;
                (Provider::Oke(i), w)
            }
            Cloud::Alibaba => {
                let (i, w) = alibaba::read(&c.alibaba, policy, &self.sysfs).await;
                (Provider::Alibaba(i), w)
            }
        })
    }
}

fn names(clouds: &[Cloud]) -> String {
    clouds
        .iter()
        .map(|c| c.name())
        .collect::<Vec<_>>()
        .join(", ")
}
