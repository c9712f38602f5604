//! Hooks through which the embedding daemon observes the plugin (request counts, latencies).

use std::time::Duration;

/// A gRPC method the kubelet called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Method {
    /// `NodePrepareResources`, v1 or v1beta1.
    Prepare,
    /// `NodeUnprepareResources`, v1 or v1beta1.
    Unprepare,
    /// `Registration.GetInfo`.
    GetInfo,
    /// `Registration.NotifyRegistrationStatus`.
    NotifyRegistrationStatus,
    /// `DRAResourceHealth.NodeWatchResources` (counted when the stream opens).
    WatchResources,
}

impl Method {
    /// A stable, metric-label friendly name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Prepare => "NodePrepareResources",
            Method::Unprepare => "NodeUnprepareResources",
            Method::GetInfo => "GetInfo",
            Method::NotifyRegistrationStatus => "NotifyRegistrationStatus",
            Method::WatchResources => "NodeWatchResources",
        }
    }
}

/// Receives measurements. Every method has a no-op default, so an implementation overrides only
/// what it exports. Calls happen on the request path: implementations must be cheap and must not
/// block.
pub trait Metrics: Send + Sync + 'static {
    /// A gRPC request finished. `claims` is how many claims it named, `failed` how many of them
    /// got an error; `api` is "v1", "v1beta1" or "" for services without versions.
    fn grpc_request(
        &self,
        _method: Method,
        _api: &'static str,
        _claims: usize,
        _failed: usize,
        _elapsed: Duration,
    ) {
    }

    /// A ResourceClaim was read from the API server.
    fn claim_lookup(&self, _ok: bool, _elapsed: Duration) {}

    /// The checkpoint file was written (or writing it failed).
    fn checkpoint_write(&self, _ok: bool, _elapsed: Duration) {}

    /// One ResourceSlice sync pass ended: `writes` API writes (create, update, delete) were made.
    fn slice_sync(&self, _ok: bool, _writes: usize, _elapsed: Duration) {}
}

/// Discards all measurements.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoMetrics;

impl Metrics for NoMetrics {}
