//! Why a metadata update was refused or failed.

use std::path::PathBuf;

/// What [`super::MetadataUpdater::update_request_metadata`] reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetadataError {
    /// No claim of that namespace and name is prepared by this driver on this node.
    #[error("claim {namespace}/{name} is not prepared by this driver")]
    UnknownClaim {
        /// The namespace asked about.
        namespace: String,
        /// The name asked about.
        name: String,
    },

    /// The claim is prepared, but none of its devices of this driver is for that request.
    #[error(
        "claim {claim} has no request {request:?} of this driver (its requests: {})",
        known.join(", ")
    )]
    UnknownRequest {
        /// `namespace/name`.
        claim: String,
        /// The request asked about.
        request: String,
        /// The requests the claim's devices of this driver are for.
        known: Vec<String>,
    },

    /// A device given is not one prepared for the request.
    #[error(
        "device {driver}/{pool}/{device} is not prepared for request {request:?} of claim {claim}"
    )]
    UnknownDevice {
        /// `namespace/name`.
        claim: String,
        /// The request.
        request: String,
        /// The device's driver as given.
        driver: String,
        /// The device's pool.
        pool: String,
        /// The device's name.
        device: String,
    },

    /// The claim was prepared while device metadata was off: no container mounts its file.
    #[error(
        "request {request:?} of claim {claim} was prepared without device metadata (no container mounts its file)"
    )]
    NotMounted {
        /// `namespace/name`.
        claim: String,
        /// The request.
        request: String,
    },

    /// Reading or writing the file failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// The plugin's checkpoint, which says what is prepared, could not be read.
    #[error("read the plugin's checkpoint: {0}")]
    Checkpoint(#[source] crate::Error),
}
