//! The crate's error type.

/// Everything that can go wrong in `dranet-core`: malformed input named precisely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A PCI address that is not `dddd:bb:dd.f` (hex, device ≤ 1f, function ≤ 7).
    #[error("invalid PCI address {input:?}: {reason}")]
    InvalidPciAddress {
        /// The text that was given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A PCIe root name that is not `pci<domain>:<bus>`.
    #[error("invalid PCIe root {input:?}: expected pci<domain>:<bus> such as pci0000:00")]
    InvalidPcieRoot {
        /// The text that was given.
        input: String,
    },
    /// A line of a `pci.ids` database that cannot be parsed.
    #[error("pci.ids line {line}: {reason}")]
    InvalidPciIds {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A network configuration value that is not valid.
    #[error("network config {field}: {reason}")]
    InvalidConfig {
        /// Where in the configuration (`routes[1].gateway`).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A value that does not fit the DRA API (name or value too long, bad characters).
    #[error("attribute {name:?}: {reason}")]
    InvalidAttribute {
        /// Attribute name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
