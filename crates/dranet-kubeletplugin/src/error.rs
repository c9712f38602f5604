//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong in this crate.
///
/// Per-claim failures reach the kubelet as the `error` string of that claim's response entry; the
/// `Display` text of these variants is that string, so each names the claim, path or object at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The builder was given something unusable (a bad driver or node name, a missing setting).
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A device metadata version ([`crate::KubeletPluginBuilder::metadata_versions`]) that this
    /// plugin does not write.
    #[error("unknown device metadata version {version:?} (known: {})", known.join(", "))]
    UnknownMetadataVersion {
        /// The version as given.
        version: String,
        /// The versions the plugin writes.
        known: Vec<String>,
    },

    /// A file system operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done, e.g. "bind socket".
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// A live process still answers on a socket we were asked to serve on.
    #[error(
        "socket {path} is in use by a running process (is another instance of this driver running?)"
    )]
    SocketInUse {
        /// The socket path.
        path: PathBuf,
    },

    /// The checkpoint file is torn, edited or unreadable, so what it says cannot be trusted.
    #[error(
        "checkpoint {path} cannot be trusted: {source}; inspect it, then move it away to start \
         with no record of prepared claims (or build the plugin with CheckpointPolicy::Quarantine)"
    )]
    CheckpointCorrupt {
        /// The checkpoint path.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: crate::CheckpointDefect,
    },

    /// The API server answered with an error status.
    #[error("{action}: API server answered {code} {reason}: {message}")]
    ApiStatus {
        /// What was being done, e.g. "get ResourceClaim ns/name".
        action: String,
        /// HTTP status code, e.g. 409.
        code: u16,
        /// The status reason, e.g. "Conflict".
        reason: String,
        /// The server's message.
        message: String,
    },

    /// The API server could not be reached or its answer could not be read.
    #[error("{action}: {source}")]
    ApiTransport {
        /// What was being done.
        action: String,
        /// The underlying client error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A list's answer is larger than the caller allows ([`crate::api::ListLimits`]): one
    /// object larger than a page may be, or all pages together more than the total.
    #[error("{action}: {what} is more than {limit} bytes")]
    TooLarge {
        /// What was being done, e.g. "list ResourceSlices".
        action: String,
        /// What was too large: "one object" (a page of one object over
        /// [`crate::api::ListLimits::page_bytes`]) or "the list" (all pages over
        /// [`crate::api::ListLimits::total_bytes`]).
        what: &'static str,
        /// The limit it exceeded, in bytes.
        limit: u64,
    },

    /// The claim is not allocated yet, so there is nothing to prepare.
    #[error("claim {namespace}/{name} not allocated")]
    ClaimNotAllocated {
        /// Claim namespace.
        namespace: String,
        /// Claim name.
        name: String,
    },

    /// The claim with that namespace/name now has another UID than the kubelet asked about.
    #[error(
        "claim {namespace}/{name} got replaced (kubelet asked for UID {expected}, API server has {actual})"
    )]
    ClaimReplaced {
        /// Claim namespace.
        namespace: String,
        /// Claim name.
        name: String,
        /// The UID the kubelet asked about.
        expected: String,
        /// The UID the API server has.
        actual: String,
    },

    /// The kubelet named a claim UID that this plugin recorded for another claim.
    #[error(
        "claim UID {uid} was prepared for {recorded_namespace}/{recorded_name}, not {namespace}/{name}"
    )]
    ClaimMismatch {
        /// The UID.
        uid: String,
        /// The namespace asked about.
        namespace: String,
        /// The name asked about.
        name: String,
        /// The namespace recorded for the UID.
        recorded_namespace: String,
        /// The name recorded for the UID.
        recorded_name: String,
    },

    /// The kubelet sent a request this plugin cannot act on.
    #[error("invalid request: {0}")]
    InvalidRequest(String),

    /// The driver's prepare or unprepare failed.
    #[error("{action} claim {claim}: {source}")]
    Driver {
        /// "prepare" or "unprepare".
        action: &'static str,
        /// namespace/name of the claim.
        claim: String,
        /// The driver's error, with its own sources.
        #[source]
        source: crate::HandlerError,
    },

    /// A driver record ([`crate::DriverRecords`]) the checkpoint cannot keep.
    #[error("driver record {key:?}: {reason}")]
    Record {
        /// The record's key (its first 80 characters).
        key: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Grpc(#[from] tonic::transport::Error),

    /// A gRPC call made by this crate (e.g. by `fake::FakeKubelet`) failed.
    #[error("gRPC call failed: {0}")]
    Rpc(#[from] tonic::Status),

    /// A background task ended abnormally.
    #[error("background task {0} failed")]
    Task(&'static str),

    /// A background task of the plugin stopped while the plugin was still running.
    #[error("plugin task {task} stopped: {reason}")]
    TaskDied {
        /// Which task, e.g. "ResourceSlice publisher".
        task: &'static str,
        /// Why: its error, or that it panicked.
        reason: String,
    },
}

impl Error {
    /// The HTTP status code when the API server answered with an error.
    pub fn api_code(&self) -> Option<u16> {
        match self {
            Error::ApiStatus { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True for 409: an optimistic-concurrency conflict or an object that already exists.
    pub fn is_conflict(&self) -> bool {
        self.api_code() == Some(409)
    }

    /// True for 404.
    pub fn is_not_found(&self) -> bool {
        self.api_code() == Some(404)
    }

    /// A copy for each of several callers that share one failed operation (an I/O error is not
    /// `Clone`; kind and text are kept).
    pub(crate) fn duplicate(&self) -> Self {
        match self {
            Error::Io {
                action,
                path,
                source,
            } => Error::Io {
                action,
                path: path.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::CheckpointCorrupt { path, source } => Error::CheckpointCorrupt {
                path: path.clone(),
                source: source.clone(),
            },
            _ => Error::Task("checkpoint write"),
        }
    }

    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use dranet_util::error_chain;

    #[test]
    fn the_chain_keeps_every_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such device eth9");
        let e = Error::Driver {
            action: "prepare",
            claim: "ns/c".into(),
            source: Box::new(Error::io("open netns", "/run/netns/x", io)),
        };
        assert_eq!(
            error_chain(&e),
            "prepare claim ns/c: open netns /run/netns/x: no such device eth9"
        );
    }
}
