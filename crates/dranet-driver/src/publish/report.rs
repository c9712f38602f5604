//! What a publication says besides its devices: the devices it leaves out, each with its reason,
//! and its warnings, as values (the daemon logs each once; `Display` is the log line).

use std::fmt;

/// Something the operator should know about a publication. Ordered and comparable, so that the
/// daemon can say each one once: a warning that persists across rescans is the same value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Warning {
    /// Discovery's warning about the node (a sysfs file it could not read, …).
    Scan(String),
    /// An attribute left out of a device to keep it within the API's limits.
    Attribute(String),
    /// `--filter` failed on a device: it is not published.
    Filter {
        /// The device.
        device: String,
        /// The expression's error.
        error: String,
    },
    /// `--share-filter` failed on a device: it is published unshared.
    Share {
        /// The device.
        device: String,
        /// The expression's error.
        error: String,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::Scan(s) | Warning::Attribute(s) => f.write_str(s),
            Warning::Filter { device, error } => write!(
                f,
                "device {device} is not published: --filter failed on it: {error}"
            ),
            Warning::Share { device, error } => write!(
                f,
                "device {device} is published unshared: --share-filter failed on it: {error}"
            ),
        }
    }
}

/// Why a device found on the node is not published.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// Discovery left it out: the uplink and what is stacked on it or under it (its sentence).
    Discovery(String),
    /// The default `--filter` leaves out a virtual interface of this link type.
    DefaultFilter {
        /// The link type (`veth`, `bridge`, …).
        kind: String,
    },
    /// The operator's `--filter` leaves it out.
    Filter,
    /// `--filter` failed on it (the expression's error).
    FilterFailed(String),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Discovery(s) => f.write_str(s),
            Reason::DefaultFilter { kind } => write!(
                f,
                "a virtual interface of type {kind}, without a PCI function: the default --filter \
                 publishes PCI functions, SR-IOV VFs, IPoIB and RDMA-only devices; name type \
                 {kind} in --filter to publish it"
            ),
            Reason::Filter => f.write_str("left out by --filter"),
            Reason::FilterFailed(e) => write!(f, "--filter failed on it: {e}"),
        }
    }
}

impl Reason {
    /// Whether discovery, not the policy, left the device out.
    pub fn by_discovery(&self) -> bool {
        matches!(self, Reason::Discovery(_))
    }
}

/// A device found and not published.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Excluded {
    /// The interface name, PCI address, RDMA link name or device name.
    pub device: String,
    /// Why.
    pub reason: Reason,
}

impl fmt::Display for Excluded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.device, self.reason)
    }
}
