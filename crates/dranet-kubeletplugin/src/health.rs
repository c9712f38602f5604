//! Device health reports for the kubelet's `DRAResourceHealth` stream.

use std::time::{Duration, SystemTime};

use tokio::sync::watch;

/// Health of one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// The driver cannot tell.
    Unknown,
    /// Usable.
    Healthy,
    /// Not usable; the kubelet reflects this in the pod status of pods using it.
    Unhealthy,
}

/// The health of one device at one time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceHealthReport {
    /// Pool of the device (the node name for node-local devices).
    pub pool: String,
    /// Device name.
    pub device: String,
    /// Its health.
    pub health: Health,
    /// Human readable detail.
    pub message: String,
    /// When the driver last checked.
    pub checked_at: SystemTime,
    /// How long the kubelet may trust this report; `None` leaves it to the kubelet.
    pub valid_for: Option<Duration>,
}

/// Hands device health to every connected kubelet stream. Create one, give a clone to
/// [`crate::KubeletPluginBuilder::health`] (which makes the plugin advertise the health service), and call
/// [`HealthReporter::set`] whenever health changes.
#[derive(Debug, Clone)]
pub struct HealthReporter {
    tx: watch::Sender<Vec<DeviceHealthReport>>,
}

impl Default for HealthReporter {
    fn default() -> Self {
        Self::new()
    }
}

impl HealthReporter {
    /// A reporter with no devices yet.
    pub fn new() -> Self {
        Self {
            tx: watch::channel(Vec::new()).0,
        }
    }

    /// Replaces the health of all devices; streams send the full list on each change.
    pub fn set(&self, reports: Vec<DeviceHealthReport>) {
        self.tx.send_replace(reports);
    }

    /// The current reports.
    pub fn current(&self) -> Vec<DeviceHealthReport> {
        self.tx.borrow().clone()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Vec<DeviceHealthReport>> {
        self.tx.subscribe()
    }
}
