//! The crate's error type.

use std::path::PathBuf;

/// What can stop discovery as a whole. Problems with single devices are not errors: they become
/// warnings in the inventory and the scan goes on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory that must exist could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// What was read.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// libudev failed (enumeration or monitor).
    #[error("udev: {0}")]
    Udev(#[source] std::io::Error),
    /// Link state could not be read: netlink, or the thread or task that talks to it, failed.
    #[error("netlink: {action}: {source}")]
    Netlink {
        /// What was being done, e.g. "dump links".
        action: &'static str,
        /// The failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Link state cannot be had at all: the crate was built without netlink, or the thread
    /// reading it died.
    #[error("netlink: {0}")]
    NetlinkUnavailable(&'static str),
    /// A link-state fixture file is malformed.
    #[error("{}: {source}", path.display())]
    Fixture {
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
