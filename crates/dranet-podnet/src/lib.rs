//! `dranet-podnet`: host networking for a DRA network driver. It moves a host NIC into a pod's
//! network namespace, configures it there from a [`dranet_core::NetworkConfig`], and gives the
//! host back exactly what it had, with a journal that survives a crash at any point.
//!
//! It is the only dranet crate that changes host network state, and it knows nothing of claims,
//! the kubelet or NRI: a driver of its own can use it without compiling them.
//!
//! - [`PodNet`]: attach a link to a pod ([`PodNet::attach`]), give it back
//!   ([`PodNet::detach`]), and give back at start what a crash left in pods
//!   ([`PodNet::recover`]). [`preflight`] checks a config against the device before anything
//!   changes.
//! - [`netns`]: network namespaces held by file descriptor, and rtnetlink sockets opened inside
//!   one (the caller's threads never switch namespaces).
//! - [`dhcp`]: a DHCPv4 client that leases an address for an interface still on the host.
//! - [`ethtool`]: features and private flags over generic netlink.
//! - [`rdma`]: the RDMA subsystem's namespace mode and moving RDMA devices between namespaces
//!   (RDMA netlink).
//! - [`netlink`]: the framing both speak: messages, attributes, one request's answer, generic
//!   netlink families.
//! - [`durable`]: small JSON records written so that a crash leaves the old or the new file.
//!
//! ```no_run
//! use dranet_core::NetworkConfig;
//! use dranet_podnet::netns::Netns;
//! use dranet_podnet::{AttachRequest, PodNet};
//!
//! # async fn f() -> Result<(), dranet_podnet::Error> {
//! // At start: the daemon's own namespace, and give back what crashed pods left behind.
//! let podnet = PodNet::new(Netns::current()?, "/var/lib/dranet/podnet")?;
//! podnet.recover(|entry| entry.owner == "sandbox-still-running").await?;
//!
//! let mut config = NetworkConfig::default();
//! config.interface.name = "net1".into();
//! let attached = podnet
//!     .attach(&AttachRequest {
//!         key: "claim-uid-eth3",
//!         owner: "sandbox-id",
//!         link: "eth3",
//!         pod_netns: "/var/run/netns/cni-1234".as_ref(),
//!         config: &config,
//!         rdma_device: Some("mlx5_3"),
//!         source_table: None,
//!     })
//!     .await?;
//! println!("{} has {:?}", attached.pod_name, attached.addresses);
//!
//! // When the pod stops:
//! podnet.detach("claim-uid-eth3").await?;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

// The README's example compiles.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use std::io;
use std::path::PathBuf;

pub mod dhcp;
pub mod durable;
pub mod ethtool;
mod locks;
pub mod netlink;
pub mod netns;
mod podnet;
pub mod rdma;
mod source_tables;

pub use podnet::{
    AttachRequest, Attached, CHILD_JOURNAL_VERSION, ChildEntry, ChildJournal, ConfigRefusal,
    DEFAULT_SLAAC_TIMEOUT, Entry, HostLink, JOURNAL_VERSION, Journal, Peer, Phase, PodNet,
    Preflight, PreflightError, RawMessage, Recovery, StepHook, check_config, check_link,
    check_parent_addresses, format_mac, parse_cidr, parse_mac, preflight,
};
pub use source_tables::{PodInterface, plan_source_tables};

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A network namespace could not be opened or entered.
    #[error("network namespace {path}: {reason}")]
    Netns {
        /// Its path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The attach journal could not be read or written.
    #[error("podnet journal {path}: {reason}")]
    Journal {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A key that cannot name a journal entry.
    #[error("invalid attachment key {0:?}: use letters, digits, '-', '_' and '.' (at most 200)")]
    InvalidKey(String),
    /// A claim's network configuration that cannot be applied to this device.
    #[error("network config for {device}: {reason}")]
    InvalidConfig {
        /// The device.
        device: String,
        /// What is wrong.
        reason: String,
    },
    /// A link a live pod holds, asked for by another sandbox: it is never taken from the pod.
    #[error(
        "{link} is in use by sandbox {owner}, whose network namespace still exists: a link is \
         never taken from a live pod"
    )]
    InUse {
        /// The host link.
        link: String,
        /// The sandbox holding it.
        owner: String,
    },
    /// A pod namespace that is the host's (or the daemon's own): a confused runtime.
    #[error("{} is the host's network namespace, not a pod's", netns.display())]
    HostNetns {
        /// The path given as the pod's.
        netns: PathBuf,
    },
    /// A link that is not there.
    #[error("no link {link} in {netns}")]
    LinkNotFound {
        /// The link.
        link: String,
        /// Where it was looked for.
        netns: PathBuf,
    },
    /// An attach failed at `step`; everything done before was rolled back, unless `rollback`
    /// says why not (then the journal keeps the entry and detach or recovery retries).
    #[error("attach {link} to {netns}: {step}: {source}{}", rollback.as_ref().map(|r| format!(" (rolling back failed too: {r})")).unwrap_or_default(), netns = netns.display())]
    Attach {
        /// The host link.
        link: String,
        /// The pod namespace.
        netns: PathBuf,
        /// The step that failed.
        step: String,
        /// The kernel's error.
        #[source]
        source: io::Error,
        /// Why rolling back failed, if it did.
        rollback: Option<String>,
    },
    /// Giving a link back to the host failed at `step`; the journal keeps it for the next try.
    #[error("detach {link} from {netns}: {step}: {source}", netns = netns.display())]
    Detach {
        /// The host link.
        link: String,
        /// The pod namespace.
        netns: PathBuf,
        /// The step that failed.
        step: String,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// An RDMA netlink request failed.
    #[error("rdma netlink: {operation}: {source}")]
    Rdma {
        /// What it was doing, with the device and namespaces.
        operation: rdma::Operation,
        /// The kernel's error (its errno), the socket's, or why the answer was not understood.
        #[source]
        source: io::Error,
    },
    /// An ethtool netlink request failed, or the device did not take a setting.
    #[error("ethtool: {device}: {operation}: {source}")]
    Ethtool {
        /// The network interface.
        device: String,
        /// What it was doing.
        operation: ethtool::Operation,
        /// The kernel's error (its errno), the socket's, or what the device refused.
        #[source]
        source: io::Error,
    },
}

/// Where the details of a failure are, for the messages that leave them out.
pub const SEE_LOG: &str = "see the dranet log on the node";

impl Error {
    /// Whether this is an attach with `addressing: SLAAC` that got no autoconfigured address in
    /// time (the `slaac` step).
    pub fn is_slaac_timeout(&self) -> bool {
        matches!(self, Error::Attach { step, .. } if step == "slaac")
    }

    /// What the owner of the pod or its claim is told (in an error the runtime or the kubelet
    /// shows on the pod, or an Event): what is wrong in their terms, without the host's details
    /// (its link names, namespace paths, routes, state files). Those go to the daemon's log with
    /// the full error.
    pub fn user_message(&self) -> String {
        match self {
            // The device's name is published in the slice (`rdmaDevice`) and the kernel's answer
            // names no host path: both tell the claim's owner why, e.g. soft-RoCE in exclusive mode.
            Error::Rdma {
                operation: rdma::Operation::Move { device, .. },
                source,
            } => format!("its RDMA device {device} could not be moved into the pod: {source}"),
            Error::Rdma { .. } => {
                format!("its RDMA device could not be moved into the pod ({SEE_LOG})")
            }
            Error::InvalidConfig { reason, .. } => reason.clone(),
            Error::Netns { .. } => {
                "the pod's network namespace could not be opened (is the pod still running?)".into()
            }
            Error::Journal { .. } | Error::InvalidKey(_) => {
                format!("the node could not record its state ({SEE_LOG})")
            }
            Error::InUse { .. } => "the device is in use by another pod that is still running; \
                                    a device with a network interface serves one pod at a time"
                .into(),
            Error::HostNetns { .. } => {
                "the runtime gave the host's network namespace as the pod's; refused".into()
            }
            Error::LinkNotFound { .. } => "the device's network interface is not on the node \
                                           (unplugged, renamed, or still held by another pod)"
                .into(),
            Error::Attach {
                step,
                source,
                rollback,
                ..
            } => {
                // A cause that is one of ours (RDMA, ethtool, the journal) says its own part.
                let cause = source
                    .get_ref()
                    .and_then(|e| e.downcast_ref::<Error>())
                    .map_or_else(|| source.to_string(), Error::user_message);
                let what = format!("configuring it in the pod failed at {step}: {cause}");
                match rollback {
                    Some(_) => format!(
                        "{what}; giving the device back to the node failed too: the node's \
                         operator must look ({SEE_LOG})"
                    ),
                    None => format!("{what}; everything done was undone"),
                }
            }
            Error::Detach { .. } => {
                format!("an earlier attachment of the device could not be undone ({SEE_LOG})")
            }
            Error::Ethtool {
                operation, source, ..
            } => {
                format!("ethtool: {operation}: {source}")
            }
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_rdma_move_tells_the_pod_owner_the_device_and_why_but_no_host_path() {
        let e = Error::Rdma {
            operation: rdma::Operation::Move {
                device: "rxe0".into(),
                from: "/proc/1/ns/net".into(),
                to: "/var/run/netns/cni-1234".into(),
            },
            source: rdma::explain_refusal(io::Error::from_raw_os_error(
                nix::errno::Errno::EOPNOTSUPP as i32,
            )),
        };
        let m = e.user_message();
        assert!(m.contains("rxe0"), "{m}");
        assert!(m.contains("exclusive netns mode"), "{m}");
        assert!(
            !m.contains("/var/run/netns") && !m.contains("/proc/1"),
            "{m}"
        );
        // Other RDMA failures name nothing of the host.
        let e = Error::Rdma {
            operation: rdma::Operation::ListDevices {
                netns: "/var/run/netns/cni-1234".into(),
            },
            source: io::Error::from_raw_os_error(nix::errno::Errno::EPERM as i32),
        };
        assert!(!e.user_message().contains("cni-1234"));
    }
}
