//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong in `dranet-nri`, from a malformed frame to a plugin handler failing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A multiplexer frame header announced more payload than any runtime sends: the stream is not
    /// NRI, or it lost sync. The connection is dropped.
    #[error(
        "mux frame on connection {conn_id} announces {len} bytes, more than the limit of {max}"
    )]
    FrameTooLarge {
        /// Connection id from the header.
        conn_id: u32,
        /// Announced payload length.
        len: u32,
        /// Largest accepted payload.
        max: u32,
    },
    /// A frame named a mux connection NRI does not use (only 1, plugin service, and 2, runtime
    /// service, exist).
    #[error("mux frame for unknown connection id {0} (NRI uses 1 and 2)")]
    UnknownConnection(u32),
    /// A ttrpc message header announced a message larger than ttrpc allows.
    #[error(
        "ttrpc message on stream {stream_id} announces {len} bytes, more than the limit of {max}"
    )]
    MessageTooLarge {
        /// Stream id from the header.
        stream_id: u32,
        /// Announced length.
        len: u32,
        /// Largest accepted length.
        max: u32,
    },
    /// A ttrpc message that does not fit where it arrived (e.g. a response on the channel we serve).
    #[error("unexpected ttrpc {what}")]
    UnexpectedMessage {
        /// What arrived, and where.
        what: String,
    },
    /// The peer closed the connection in the middle of a frame or message.
    #[error("connection closed inside a frame ({0} bytes of an incomplete frame or message left)")]
    Truncated(usize),
    /// A protobuf payload could not be decoded.
    #[error("decoding {what}: {source}")]
    Decode {
        /// Which message was being decoded.
        what: &'static str,
        /// The decoder's complaint.
        #[source]
        source: prost::DecodeError,
    },
    /// The runtime answered one of our calls with a non-OK ttrpc status.
    #[error("runtime answered {method} with status {code}: {message}")]
    Status {
        /// The method we called.
        method: &'static str,
        /// gRPC status code.
        code: i32,
        /// The runtime's message.
        message: String,
    },
    /// The runtime did not answer a call in time.
    #[error("runtime did not answer {method} within {timeout:?}")]
    Timeout {
        /// The method we called.
        method: &'static str,
        /// How long we waited.
        timeout: std::time::Duration,
    },
    /// The connection to the runtime is gone.
    #[error("connection to the runtime closed")]
    Closed,
    /// Connecting to the NRI socket failed.
    #[error("connecting to NRI socket {path}: {source}")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The plugin socket handed over by the runtime (`NRI_PLUGIN_SOCKET`) is unusable.
    #[error("NRI_PLUGIN_SOCKET={value:?}: {reason}")]
    InheritedSocket {
        /// The variable's value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The plugin socket handed over by the runtime (`NRI_PLUGIN_SOCKET`) could not be checked or
    /// set up.
    #[error("NRI_PLUGIN_SOCKET={value:?}: {action}: {source}")]
    InheritedSocketIo {
        /// The variable's value.
        value: String,
        /// What was being done.
        action: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The host device node a container device should mirror cannot be read.
    #[error("invalid input: stat of host device {}: {source}", path.display())]
    HostDevice {
        /// The host path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A value handed to this crate (device, env key, mount, …) is not valid.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The builder was given settings the runtime would reject.
    #[error("invalid plugin configuration: {0}")]
    Config(String),
    /// An I/O error on the NRI connection.
    #[error("NRI connection I/O: {0}")]
    Io(#[from] std::io::Error),
    /// A plugin handler failed; the runtime gets the error and its causes as the call's error.
    #[error("{0}")]
    Handler(HandlerError),
}

impl From<HandlerError> for Error {
    fn from(e: HandlerError) -> Self {
        Error::Handler(e)
    }
}

/// The error a plugin's handler returns (any error type, through `?`), kept with its source
/// chain; the runtime gets the whole chain as the call's error. `dranet-kubeletplugin` uses the
/// same type for its driver's handlers.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
