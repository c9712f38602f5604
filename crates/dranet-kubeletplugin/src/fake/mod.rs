//! Test doubles for drivers built on this crate (feature `fake`).
//!
//! - [`FakeApiServer`]: an in-process kube-apiserver stand-in on a loopback TCP port that speaks
//!   the real JSON over HTTP/1.1 for what the plugin uses, with resourceVersions, optimistic
//!   concurrency (409), preconditions, field selectors, watches and fault injection.
//! - [`FakeKubelet`]: a gRPC client over the plugin's unix sockets, calling it as the kubelet does.

mod apiserver;
mod kubelet;

pub use apiserver::{FakeApiServer, WriteCounts};
pub use kubelet::{FakeKubelet, unix_channel};
