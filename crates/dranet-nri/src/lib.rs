//! `dranet-nri`: the NRI (Node Resource Interface) plugin protocol for Rust.
//!
//! Speaks ttrpc over the container runtime's multiplexed NRI socket so that any Rust program can be
//! an NRI plugin: learn a pod's network namespace when its sandbox starts, adjust containers (device
//! nodes, environment, mounts, annotations) when they are created, and hear when the sandbox stops.
//! Tested against containerd 1.7 (NRI v0.6 protocol, pod events through `StateChange`); also
//! serves the dedicated pod-event calls of NRI v0.12 runtimes. dranet is its first user.
//!
//! # Writing a plugin
//!
//! Implement [`NriPlugin`] for the events you care about (every method defaults to a no-op), then
//! build a [`Runner`] with [`RunnerBuilder`] and run it on a tokio runtime. The runner connects to
//! `/var/run/nri/nri.sock` (or the socket the runtime handed over in `NRI_PLUGIN_SOCKET`),
//! registers, answers the runtime's calls, and reconnects with backoff when the runtime restarts;
//! [`Runner::watch_connection`] says whether it is registered. Handlers return
//! `Result<_, HandlerError>`: any error through `?`, reported to the runtime with its causes.
//!
//! A complete plugin that gives containers of pods annotated `example.com/rdma` the first RDMA
//! device, tested against the fake runtime (feature `fake`) as you would in your own tests:
//!
//! ```
//! use dranet_nri::fake::FakeRuntime;
//! use dranet_nri::{
//!     Container, ContainerAdjustment, Event, EventMask, HandlerError, LinuxDevice, NriPlugin,
//!     PodSandbox, RunnerBuilder,
//! };
//!
//! struct Rdma;
//!
//! impl NriPlugin for Rdma {
//!     async fn run_pod_sandbox(&self, pod: &PodSandbox) -> Result<(), HandlerError> {
//!         println!("{} has netns {:?}", pod.qualified_name(), pod.netns_path());
//!         Ok(())
//!     }
//!
//!     async fn create_container(
//!         &self,
//!         pod: &PodSandbox,
//!         _: &Container,
//!     ) -> Result<ContainerAdjustment, HandlerError> {
//!         let mut adj = ContainerAdjustment::new();
//!         if pod.annotations.contains_key("example.com/rdma") {
//!             adj.add_device(LinuxDevice::char("/dev/infiniband/uverbs0", 231, 192))?;
//!         }
//!         Ok(adj)
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // In production: RunnerBuilder::new().socket("/var/run/nri/nri.sock") ... .run().await
//! let (ours, runtime_end) = tokio::net::UnixStream::pair()?;
//! let runner = RunnerBuilder::new()
//!     .name("rdma")
//!     .index(10)
//!     .events(EventMask::of(&[Event::RunPodSandbox, Event::CreateContainer]))
//!     .from_env(false)
//!     .connection(ours)
//!     .build(Rdma)?;
//! let connection = runner.watch_connection();
//! tokio::spawn(runner.run());
//!
//! let mut runtime = FakeRuntime::new(runtime_end);
//! runtime.expect_registration().await?;
//! runtime.configure("containerd", "1.7.24").await?;
//! assert_eq!(*connection.borrow(), dranet_nri::ConnectionState::Registered);
//! let mut pod = PodSandbox::default();
//! pod.annotations.insert("example.com/rdma".into(), "true".into());
//! let adj = runtime.create_container(&pod, &Container::default()).await?;
//! assert_eq!(adj.devices()[0].path, "/dev/infiniband/uverbs0");
//! # Ok(())
//! # }
//! ```
//!
//! # Scope
//!
//! Adjustments cover device nodes (with their cgroup rules), environment, mounts and annotations:
//! what a device or network plugin needs. CDI device injection through NRI, Linux resources
//! (CPU, memory, hugepages), rlimits, hooks, container updates and evictions are not offered:
//! runtimes apply CDI from the kubelet's DRA answer already, and resource tuning is another
//! plugin's job. UpdateContainers and evictions answer with no change.
//!
//! The wire layers (`mux`, `ttrpc`) are public for fuzzing only and hidden from the docs.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// The README's example, compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

mod adjust;
mod error;
mod events;
#[cfg(feature = "fake")]
#[cfg_attr(docsrs, doc(cfg(feature = "fake")))]
pub mod fake;
mod framing;
#[doc(hidden)]
pub mod mux;
mod plugin;
mod runner;
mod service;
#[doc(hidden)]
pub mod ttrpc;
mod types;

/// Messages generated from the crate's own `.proto` files.
#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
pub(crate) mod proto {
    pub(crate) mod nri {
        include!(concat!(env!("OUT_DIR"), "/nri.pkg.api.v1alpha1.rs"));
    }
    pub(crate) mod ttrpc {
        include!(concat!(env!("OUT_DIR"), "/ttrpc.rs"));
    }
}

pub use adjust::ContainerAdjustment;
/// Retry timing of the runner's reconnects ([`RunnerBuilder::backoff`]); shared with the other
/// dranet crates.
pub use dranet_util::Backoff;
/// A handler error and its causes as one line: what the runtime gets.
pub use dranet_util::error_chain;
pub use error::{Error, HandlerError, Result};
pub use events::{Event, EventMask};
pub use plugin::NriPlugin;
pub use runner::{
    ConnectionState, DEFAULT_SOCKET_PATH, ENV_PLUGIN_IDX, ENV_PLUGIN_NAME, ENV_PLUGIN_SOCKET,
    Runner, RunnerBuilder,
};
pub use service::{PLUGIN_SERVICE, RUNTIME_SERVICE};
pub use types::{
    Container, ContainerState, DeviceType, Hook, LinuxDevice, Mount, Namespace, PodSandbox,
    RuntimeInfo,
};
