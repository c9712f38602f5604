//! Are we on Azure? Decided locally when possible, by a short probe otherwise.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::client::{ImdsClient, RetryPolicy};
use crate::imds::AzureInstance;

/// The DMI chassis asset tag of every Azure VM.
pub const AZURE_ASSET_TAG: &str = "7783-7084-3265-9085";

/// What the operator said (`--cloud-provider-hint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// Detect.
    Auto,
    /// Azure: skip detection, read IMDS (with retries).
    Azure,
    /// No cloud: never touch the network.
    None,
}

/// The outcome of detection.
#[derive(Debug, Clone, Default)]
pub struct Detection {
    /// The instance, when on Azure and IMDS answered.
    pub provider: Option<AzureInstance>,
    /// How it was decided (for the log).
    pub how: String,
    /// What went wrong, each a sentence for the log.
    pub warnings: Vec<String>,
    /// Time spent.
    pub elapsed: Duration,
}

/// Decides whether the node is on Azure and reads IMDS if so.
#[derive(Debug, Clone)]
pub struct Detector {
    /// The IMDS client.
    pub client: ImdsClient,
    /// The sysfs root, for the DMI asset tag (`class/dmi/id/chassis_asset_tag`).
    pub sysfs: PathBuf,
    /// The operator's hint.
    pub hint: Hint,
    /// Retries once known to be on Azure.
    pub retry: RetryPolicy,
    /// Total time of the probe when DMI cannot tell.
    pub probe_timeout: Duration,
}

impl Detector {
    /// A detector with default retry policy and a 500 ms probe.
    pub fn new(client: ImdsClient, sysfs: impl Into<PathBuf>, hint: Hint) -> Self {
        Self {
            client,
            sysfs: sysfs.into(),
            hint,
            retry: RetryPolicy::default(),
            probe_timeout: Duration::from_millis(500),
        }
    }

    fn dmi_says_azure(&self) -> Option<bool> {
        let tag =
            std::fs::read_to_string(self.sysfs.join("class/dmi/id/chassis_asset_tag")).ok()?;
        Some(tag.trim() == AZURE_ASSET_TAG)
    }

    /// Detects.
    pub async fn detect(&self) -> Detection {
        let start = Instant::now();
        let mut d = Detection::default();
        let policy = match self.hint {
            Hint::None => {
                d.how = "cloud provider hint: none".into();
                return d;
            }
            Hint::Azure => {
                d.how = "cloud provider hint: azure".into();
                self.retry
            }
            Hint::Auto => match self.dmi_says_azure() {
                Some(false) => {
                    d.how = "DMI chassis asset tag is not Azure's".into();
                    d.elapsed = start.elapsed();
                    return d;
                }
                Some(true) => {
                    d.how = "DMI chassis asset tag is Azure's".into();
                    self.retry
                }
                None => {
                    d.how = format!(
                        "no DMI asset tag; probed IMDS for at most {:?}",
                        self.probe_timeout
                    );
                    // One attempt: a refusal or silence within the probe time means "not Azure".
                    RetryPolicy::once()
                }
            },
        };
        let probing = policy.budget.is_zero() && self.hint == Hint::Auto;
        let client = if probing {
            ImdsClient {
                request_timeout: self.probe_timeout,
                ..self.client.clone()
            }
        } else {
            self.client.clone()
        };
        match client.instance(policy).await {
            Ok((inst, warnings)) => {
                d.provider = Some(inst);
                d.warnings = warnings;
            }
            // A probe that finds nothing just means "not Azure".
            Err(e) if probing => {
                tracing::debug!("IMDS probe: {e}");
                d.how.push_str(": no answer, not Azure");
            }
            Err(e) => d.warnings.push(format!("{e}; no Azure attributes")),
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
                    "cannot start a runtime for IMDS: {e}; no Azure attributes"
                )],
                ..Detection::default()
            },
        }
    }
}
