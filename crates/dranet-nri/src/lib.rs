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
//! Implement [`Plugin`] for the events you care about (every method defaults to a no-op), then
//! build a [`Runner`] with [`Builder`] and run it on a tokio runtime. The runner connects to
//! `/var/run/nri/nri.sock` (or the socket the runtime handed over in `NRI_PLUGIN_SOCKET`),
//! registers, answers the runtime's calls, and reconnects with backoff when the runtime restarts.
//!
//! ```no_run
//! use dranet_nri::{Builder, Container, ContainerAdjustment, Event, EventMask, LinuxDevice, Plugin,
//!     PodSandbox, Result};
//!
//! struct Rdma;
//!
//! impl Plugin for Rdma {
//!     async fn run_pod_sandbox(&self, pod: &PodSandbox) -> Result<()> {
//!         println!("{} has netns {:?}", pod.qualified_name(), pod.netns_path());
//!         Ok(())
//!     }
//!
//!     async fn create_container(&self, pod: &PodSandbox, _: &Container) -> Result<ContainerAdjustment> {
//!         let mut adj = ContainerAdjustment::new();
//!         if pod.annotations.contains_key("example.com/rdma") {
//!             adj.add_device(LinuxDevice::char("/dev/infiniband/uverbs0", 231, 192))?;
//!         }
//!         Ok(adj)
//!     }
//! }
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> Result<()> {
//!     Builder::new()
//!         .name("rdma")
//!         .index("10")
//!         .events(EventMask::of(&[Event::RunPodSandbox, Event::CreateContainer]))
//!         .build(Rdma)?
//!         .run()
//!         .await
//! }
//! ```
//!
//! [`testing::FakeRuntime`] plays the runtime's side for tests without a container runtime.
//!
//! # Layers
//!
//! [`mux`] splits the socket into the plugin and runtime channels (frames of at most 4 KiB);
//! [`ttrpc`] frames calls and answers on each; the plugin service maps calls onto [`Plugin`].

#![warn(missing_docs)]

mod adjust;
mod error;
mod events;
pub mod mux;
mod plugin;
mod runner;
mod service;
pub mod testing;
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
pub use error::{Error, Result};
pub use events::{Event, EventMask};
pub use plugin::Plugin;
pub use runner::{
    Builder, DEFAULT_SOCKET_PATH, ENV_PLUGIN_IDX, ENV_PLUGIN_NAME, ENV_PLUGIN_SOCKET, Runner,
};
pub use service::{PLUGIN_SERVICE, RUNTIME_SERVICE};
pub use types::{
    Container, ContainerState, DeviceType, LinuxDevice, Mount, Namespace, PodSandbox, RuntimeInfo,
};
