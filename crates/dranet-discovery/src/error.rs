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
        source: std::io::Error,
    },
    /// libudev failed (enumeration or monitor).
    #[error("udev: {0}")]
    Udev(std::io::Error),
    /// Netlink failed.
    #[error("netlink: {0}")]
    Netlink(String),
    /// A link-state fixture file is malformed.
    #[error("{}: {reason}", path.display())]
    Fixture {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
