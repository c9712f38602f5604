//! Are we on Azure? The crate's detection with Azure as the only candidate (`dranet-azure`'s
//! `Detector`).

use std::path::PathBuf;
use std::time::Duration;

use crate::azure::{AzureInstance, ImdsClient};
use crate::detect::{self, Clients, Provider};
use crate::dmi::Cloud;
use crate::retry::RetryPolicy;

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

/// Decides whether the node is on Azure and reads IMDS if so: DMI first (no request off Azure
/// when DMI is readable), one short probe when it is not.
#[derive(Debug, Clone)]
pub struct Detector {
    /// The IMDS client.
    pub client: ImdsClient,
    /// The sysfs root, for DMI (`class/dmi/id/chassis_asset_tag`).
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

    fn general(&self) -> detect::Detector {
        detect::Detector {
            hint: match self.hint {
                Hint::Auto => detect::Hint::Auto,
                Hint::Azure => detect::Hint::Cloud(Cloud::Azure),
                Hint::None => detect::Hint::None,
            },
            clients: Clients {
                azure: self.client.clone(),
                ..Clients::default()
            },
            retry: self.retry,
            probe_timeout: self.probe_timeout,
            candidates: vec![Cloud::Azure],
            ..detect::Detector::new(self.sysfs.clone(), detect::Hint::None)
        }
    }

    fn azure_only(d: detect::Detection) -> Detection {
        Detection {
            provider: match d.provider {
                Some(Provider::Azure(a)) => Some(a),
                _ => None,
            },
            how: d.how,
            warnings: d.warnings,
            elapsed: d.elapsed,
        }
    }

    /// Detects.
    pub async fn detect(&self) -> Detection {
        Self::azure_only(self.general().detect().await)
    }

    /// [`Detector::detect`] on a private current-thread runtime, for synchronous callers.
    pub fn detect_blocking(&self) -> Detection {
        Self::azure_only(self.general().detect_blocking())
    }
}
