//! `dranet-kubeletplugin`: a DRA kubelet plugin library for any Rust driver.
//!
//! A Kubernetes DRA driver has two faces. To the kubelet it is a gRPC server on two unix sockets:
//! a registration socket in `<kubelet>/plugins_registry/` and the DRA service socket in
//! `<kubelet>/plugins/<driver>/`, which the kubelet calls to prepare the devices of a claim before a
//! pod starts and to unprepare them after it ends. To the scheduler it publishes its devices as
//! `ResourceSlice` objects through the API server. This crate does both, so that a driver only says
//! what its devices are and how to prepare one.
//!
//! What the library takes care of:
//!
//! - registration (`pluginregistration.Registration`), the `v1` and `v1beta1` `DRAPlugin` services
//!   and `v1`/`v1alpha1` `DRAResourceHealth` (advertised when the driver reports health through a
//!   [`HealthReporter`]);
//! - claim lookup: each claim is read from the API server, refused if it is not allocated or was
//!   replaced by a new claim of the same name, and the driver only sees allocation results and
//!   configuration for its own driver name;
//! - idempotency and crash safety: calls for one claim are serialized, and what was prepared is
//!   kept in a checksummed checkpoint file written atomically, so kubelet retries get the same
//!   answer and an unprepare after a restart still reaches the driver with what prepare returned;
//!   a call the kubelet abandons still runs to the end, and a driver panic fails only its claim;
//! - the driver's own records ([`DriverRecords`]) in the same checkpoint, for what must outlive
//!   a claim's entry (what the driver owes another system after the claim's unprepare), through
//!   restarts and reboots;
//! - ResourceSlice publishing: one pool named after the node, split into slices of at most 128
//!   devices, owned by the Node, rewritten only when something changed, repaired on drift;
//! - sockets: a stale socket from a crash is replaced, and shutdown removes ours (the registration
//!   socket first, so the kubelet stops calling before the service stops);
//! - rolling updates ([`KubeletPluginBuilder::rolling_update`]): an old and a new instance run side by
//!   side, share claims through the checkpoint, and hand over publishing when the old one exits;
//! - device metadata in the container (KEP-5304, [`KubeletPluginBuilder::device_metadata`]): a
//!   JSON file per claim request mounted into the containers that use it, which the driver fills
//!   through a [`MetadataUpdater`];
//! - metrics hooks ([`Metrics`]).
//!
//! # Writing a driver
//!
//! Implement [`Driver`], then start a [`KubeletPlugin`] with [`KubeletPluginBuilder`] and tell it your devices
//! with [`KubeletPlugin::publish`] (again whenever they change):
//!
//! ```no_run
//! use dranet_kubeletplugin::cdi::{CdiDevice, CdiWriter, ContainerEdits};
//! use dranet_kubeletplugin::k8s_openapi::api::resource::v1::Device;
//! use dranet_kubeletplugin::{
//!     ClaimToPrepare, ClaimToUnprepare, Driver, HandlerError, KubeClient, KubeletPlugin, Prepared,
//!     PreparedDevice,
//! };
//!
//! struct Fpga {
//!     cdi: CdiWriter,
//! }
//!
//! impl Driver for Fpga {
//!     async fn prepare(&self, claim: ClaimToPrepare) -> Result<Prepared, HandlerError> {
//!         // `claim.results` holds this driver's allocated devices; make them usable, then tell
//!         // the runtime what to give the containers through a CDI spec for this claim.
//!         let specs = claim
//!             .results
//!             .iter()
//!             .map(|r| {
//!                 let edits = ContainerEdits::default().env(format!("FPGA={}", r.device));
//!                 CdiDevice::new(&r.device, edits)
//!             })
//!             .collect();
//!         let ids = self.cdi.write_claim(&claim.claim_ref.uid, specs)?;
//!         let devices = claim
//!             .results
//!             .iter()
//!             .zip(ids)
//!             .map(|(r, id)| PreparedDevice::for_result(r, vec![id]))
//!             .collect();
//!         Ok(Prepared { devices, state: None })
//!     }
//!
//!     async fn unprepare(&self, claim: ClaimToUnprepare) -> Result<(), HandlerError> {
//!         // Called after a restart too: `claim.state` holds what prepare returned.
//!         self.cdi.remove_claim(&claim.claim_ref.uid)?;
//!         Ok(())
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let node = std::env::var("NODE_NAME")?;
//!     let driver = Fpga { cdi: CdiWriter::new("/var/run/cdi", "fpga.example.com/fpga")? };
//!     let api = KubeClient::infer().await?.field_manager("fpga.example.com");
//!     let plugin = KubeletPlugin::builder(driver, api)
//!         .driver_name("fpga.example.com")
//!         .node_name(node)
//!         .start()
//!         .await?;
//!     // Invalid or duplicate names are refused here; API errors show in `publish_state()`.
//!     plugin.publish(
//!         (0..4).map(|i| Device { name: format!("fpga{i}"), ..Default::default() }).collect(),
//!     )?;
//!     let mut sigterm =
//!         tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
//!     tokio::select! {
//!         _ = sigterm.recv() => {}
//!         e = plugin.failed() => return Err(e.into()),
//!     }
//!     plugin.shutdown().await?;
//!     Ok(())
//! }
//! ```
//!
//! The runnable version is `examples/minimal_driver.rs` in the dranet repository.
//!
//! # Deploying a driver
//!
//! Run it as a DaemonSet with the kubelet's directory (`/var/lib/kubelet`, or what
//! [`KubeletPluginBuilder::kubelet_root_dir`] says) mounted at the same path, the node name from the downward
//! API (`spec.nodeName`), and a service account allowed to:
//!
//! | API group | resource | verbs |
//! |---|---|---|
//! | `resource.k8s.io` | `resourceclaims` | `get` |
//! | `resource.k8s.io` | `resourceslices` | `list`, `watch`, `create`, `update`, `delete` |
//! | `""` (core) | `nodes` | `get` |
//!
//! A ValidatingAdmissionPolicy that lets each pod write only slices with its own
//! `spec.nodeName` limits what a compromised node can do to others. On SIGTERM call
//! [`KubeletPlugin::shutdown`]; for `maxSurge` rolling updates see [`KubeletPluginBuilder::rolling_update`].
//!
//! # Testing a driver
//!
//! With the `fake` feature, `fake::FakeApiServer` is an in-process API server speaking the real
//! JSON over HTTP (ResourceSlice list/watch/create/update/delete with resourceVersions and 409
//! conflicts, ResourceClaim and Node get), and `fake::FakeKubelet` calls the plugin's sockets the
//! way the kubelet does.
#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// The README's example, compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// Kubernetes API 1.34 or newer (resource.k8s.io/v1); the application picks the exact version.
k8s_openapi::k8s_if_le_1_33! {
    compile_error!("dranet-kubeletplugin needs the Kubernetes 1.34 API or newer: enable k8s-openapi's v1_34 (or a newer) feature in your application");
}

/// The Kubernetes API types and client this crate's public items use: depend on the same
/// versions, or use these re-exports.
pub use k8s_openapi;
pub use kube;

pub mod api;
mod authority;
pub mod cdi;
// The checkpoint format and the slice planner are public for our fuzzers and benches only.
#[doc(hidden)]
pub mod checkpoint;
mod driver;
mod error;
#[cfg(feature = "fake")]
#[cfg_attr(docsrs, doc(cfg(feature = "fake")))]
pub mod fake;
mod flock;
mod grpc;
mod health;
pub mod metadata;
pub mod metrics;
mod node;
mod plugin;
pub mod proto;
#[doc(hidden)]
pub mod publisher;
mod socket;

pub use api::{KubeApi, KubeClient, NodeEvent, NodeEvents};
pub use checkpoint::MAX_STATE_DEPTH;
pub use checkpoint::{
    CheckpointDefect, CheckpointPolicy, DriverRecords, LoadOutcome, MAX_RECORD_KEY_BYTES,
};
/// Retry timing of the publisher ([`KubeletPluginBuilder::retry_backoff`]); shared with the other
/// dranet crates.
pub use dranet_util::Backoff;
/// An error and its causes as one line: what the kubelet gets as a claim's error string.
pub use dranet_util::error_chain;
/// Async locks by name; the plugin serializes the calls for one claim with them.
pub use dranet_util::{NamedGuard, NamedLocks};
pub use driver::{
    ClaimRef, ClaimToPrepare, ClaimToUnprepare, Driver, HandlerError, PrepareState, Prepared,
    PreparedClaim, PreparedDevice, PreparedMetadata,
};
pub use error::{Error, Result};
pub use grpc::RegistrationState;
pub use health::{DeviceHealthReport, Health, HealthReporter};
pub use metadata::{MetadataError, MetadataUpdater};
pub use metrics::{Method, Metrics, NoMetrics};
pub use node::MAX_CLAIMS_IN_FLIGHT;
pub use plugin::{DEFAULT_KUBELET_ROOT_DIR, KubeletPlugin, KubeletPluginBuilder};
pub use publisher::PublishState;
