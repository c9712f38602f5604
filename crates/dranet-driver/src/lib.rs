//! `dranet-driver`: the `dra.net` DRA driver: claims, NRI hooks and the node daemon.
//!
//! - [`NetworkDriver`]: prepares a claim's devices (their configuration, profiles and DHCP
//!   leases, checked against the device before the pod waits on it) and, in the runtime's hooks,
//!   gives a pod its devices through [`dranet_podnet`], the crate that changes host network
//!   state.
//! - [`claim`]: reading a claim's `dra.net` configuration; [`record`] and [`store`]: what the
//!   driver keeps of prepared claims, their profiles and pods across restarts (and reboots).
//! - [`refresh`]: the cloud provider brought up to date off the daemon's main loop, within a
//!   time limit.
//! - [`daemon`]: the node daemon (kubelet plugin, NRI plugin, device publication, metrics);
//!   [`doctor`]: the node's checks.
//! - [`publish`]: what the node publishes, one pure function of the scan and the operator's
//!   policy, shared by the daemon, `dranet inventory` and `dranet check --sysfs`.

#![warn(missing_docs)]

/// The README's example, compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

use std::path::PathBuf;

use dranet_podnet::SEE_LOG;

pub mod attach;
pub mod claim;
pub mod daemon;
pub mod doctor;
pub mod driver;
pub mod publish;
pub mod record;
pub mod refresh;
pub mod store;

pub use driver::{
    ClaimReader, NetworkDriver, NetworkDriverBuilder, Rescan, StatusWriter, Synchronized,
    claim_reader, status_writer,
};

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The driver's store of prepared claims and pods could not be read or written.
    #[error("dranet store {path}: {reason}")]
    Store {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A record the driver keeps in the kubelet plugin's checkpoint (see [`record`]) could not
    /// be read or written.
    #[error("{action}: {reason}")]
    Records {
        /// What was being done, naming the claim.
        action: String,
        /// Why.
        reason: String,
    },
    /// A claim this driver cannot prepare.
    #[error("claim {claim}: {reason}")]
    Claim {
        /// `namespace/name`.
        claim: String,
        /// Why.
        reason: String,
    },
    /// The profile provider did not resolve a device's profile.
    #[error("claim {claim}: device {device}: {source}")]
    Profile {
        /// `namespace/name`.
        claim: String,
        /// The device.
        device: String,
        /// The provider's error.
        #[source]
        source: Box<dranet_core::ProfileError>,
    },
    /// A pod the driver cannot give its devices to.
    #[error("pod {pod}: {reason}")]
    Pod {
        /// `namespace/name`.
        pod: String,
        /// Why.
        reason: String,
    },
    /// A device configured for SLAAC got no autoconfigured IPv6 address in time (its pod's
    /// devices were given back): upstream's `NetworkDeviceNotReady`.
    #[error("pod {pod}: {reason}")]
    SlaacNotReady {
        /// `namespace/name`.
        pod: String,
        /// Why, naming the claim and device.
        reason: String,
    },
    /// An RDMA device could not be moved into a pod's namespace (exclusive RDMA mode).
    #[error("pod {pod}: {reason}")]
    RdmaAttach {
        /// `namespace/name`.
        pod: String,
        /// Why.
        reason: String,
    },
    /// Host networking failed: attaching, detaching, the journal, RDMA or ethtool.
    #[error(transparent)]
    Podnet(#[from] dranet_podnet::Error),
}

impl Error {
    /// Whether this is an attach with `addressing: SLAAC` that got no autoconfigured address in
    /// time (upstream's `NetworkDeviceNotReady`, `SLAACReady=False`).
    pub fn is_slaac_timeout(&self) -> bool {
        match self {
            Error::SlaacNotReady { .. } => true,
            Error::Podnet(e) => e.is_slaac_timeout(),
            _ => false,
        }
    }

    /// What the owner of a claim or pod is told (in an error the runtime or the kubelet shows on
    /// the pod, or an Event): what is wrong in their terms, without the host's details (its link
    /// names, namespace paths, routes, state files). Those go to the daemon's log with the full
    /// error.
    pub fn user_message(&self) -> String {
        match self {
            // Built for the claim's or pod's owner already.
            Error::Claim { reason, .. }
            | Error::Pod { reason, .. }
            | Error::SlaacNotReady { reason, .. }
            | Error::RdmaAttach { reason, .. } => reason.clone(),
            // The provider's answer is what the claim's owner can act on (a range exhausted).
            Error::Profile { device, source, .. } => format!("device {device}: {source}"),
            Error::Store { .. } | Error::Records { .. } => {
                format!("the node could not record its state ({SEE_LOG})")
            }
            Error::Podnet(e) => e.user_message(),
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::io;

    use dranet_podnet::rdma;

    use super::*;

    #[test]
    fn a_refused_rdma_move_tells_the_pod_owner_the_device_and_why_but_no_host_path() {
        // Host networking's errors reach the pod's owner through the driver's.
        let e = Error::from(dranet_podnet::Error::Rdma {
            operation: rdma::Operation::Move {
                device: "rxe0".into(),
                from: "/proc/1/ns/net".into(),
                to: "/var/run/netns/cni-1234".into(),
            },
            source: io::Error::from_raw_os_error(libc::EPERM),
        });
        let m = e.user_message();
        assert!(m.contains("rxe0"), "{m}");
        assert!(
            !m.contains("/var/run/netns") && !m.contains("/proc/1"),
            "{m}"
        );
        let e = Error::Store {
            path: "/var/lib/dranet/driver/pods/x.json".into(),
            reason: "disk full".into(),
        };
        assert!(
            !e.user_message().contains("/var/lib"),
            "{}",
            e.user_message()
        );
    }
}
