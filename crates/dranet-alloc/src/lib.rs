//! `dranet-alloc`: the Kubernetes scheduler's DRA allocator and the CEL environment it evaluates
//! device selectors in, run outside the scheduler: which devices a claim would get on a node,
//! and why not when it gets none. `dranet check` is built on it; an embedder (a tool, an
//! admission check, a test) gets the same answers without a cluster.
//!
//! - The allocator, at this crate's root: [`Allocator`] over a node's ResourceSlices and the
//!   DeviceClasses, [`CompiledClaim`], [`Allocation`], [`AllocError`].
//! - [`cel`]: selectors compiled and type-checked as the API server admits them and evaluated as
//!   the scheduler does, with the Kubernetes CEL libraries.
//! - [`served`]: claims and slices of every `resource.k8s.io` version a 1.34 API server serves,
//!   read in the v1 shape.
//! - [`report`]: a claim checked on each node of an inventory: its devices, the GPU × NIC
//!   relations, the verdict (fits, fits unaligned, does not fit, invalid) — what `dranet check`
//!   prints.
//!
//! It depends on [`dranet_core`] for the DRA vocabulary (attribute values, versions, quantities,
//! the node model the report reads), on k8s-openapi, serde and thiserror, and on `regex` (RE2
//! semantics for CEL's `matches`) and `stacker` (deep selectors on a fresh stack segment). No
//! I/O.
//!
//! # The allocator
//!
//! It reproduces the allocator of the Kubernetes 1.34 scheduler
//! (`k8s.io/dynamic-resource-allocation/structured`, the variant the scheduler runs with 1.34's
//! default feature gates) for `resource.k8s.io/v1` objects, and is checked against it by a
//! differential test (`tests/alloc_oracle.rs`) that runs the real allocator (`allocbench`) on
//! thousands of random inputs:
//!
//! - **Pools.** Slices of one `(driver, pool)` with the newest generation; a pool whose number
//!   of slices differs from `resourceSliceCount` is incomplete (only `allocationMode: All` minds:
//!   it is an error), and a pool that names a device twice is invalid (an error as soon as the
//!   search reaches it). Only slices the node can reach count ([`Node`], [`slice_scope`]):
//!   `nodeName`, `nodeSelector`, `allNodes`, and per device with `perDeviceNodeSelection`.
//! - **Requests.** `exactly` with `deviceClassName` (the class's selectors too), CEL
//!   `selectors`, `allocationMode: ExactCount` (`count`, default 1) or `All` (every matching
//!   device, at least one, none may be in use); `firstAvailable`, whose sub-requests are tried in
//!   order (results are named `request/sub-request`); `adminAccess` (the device may be in use by
//!   other claims); `tolerations` of device taints (with [`Features::device_taints`]).
//! - **Constraints.** `matchAttribute`: every device of the named requests (all when the list
//!   is empty; `req` covers its sub-requests, `req/sub` one of them) has the attribute with one
//!   value. `distinctAttribute`: no two share a value (see "Differences" below).
//! - **Search.** Depth-first with backtracking, requests in claim order, devices in pool and
//!   slice order; the first solution wins. Like the scheduler, at most 32 devices per claim.
//! - **Errors as the scheduler's.** A CEL runtime error while a selector is evaluated (a missing
//!   attribute: `no such key`) is an error of the claim ([`AllocError::CelRuntime`]), not a device
//!   that does not match: the scheduler stops and reports it rather than trying other nodes.
//!   The selector is evaluated when the search reaches the device, as in the scheduler, so a claim
//!   whose solution is found first does not fail. An `All` request whose devices break a
//!   constraint is an error too ([`AllocError::ConstraintViolated`]).
//!   [`AllocError::is_unsatisfiable`] tells "this node does not fit" from those errors.
//!
//! **The pool order.** The scheduler visits pools in Go map order, which is random: when the
//! devices that could satisfy a claim are in several pools, which of them it picks (and, rarely,
//! whether it meets a CEL error before a solution) changes from one attempt to the next. This
//! engine visits pools by (driver, pool) name; [`Allocator::set_pool_order`] picks another order,
//! so every answer the scheduler may give can be enumerated.
//!
//! **Differences.** `distinctAttribute` is enforced as the API defines it; the 1.34 scheduler
//! compares pointers instead of values and lets duplicates through (fixed in Kubernetes 1.35).
//! List-valued attributes (`ints`, `strings`; not in the 1.34 API) match when the lists of all
//! devices intersect. Devices with `bindingConditions` are never selected (1.34's default, the
//! `DRADeviceBindingConditions` gate being off). Not modelled, an explicit
//! [`AllocError::Unsupported`]: capacity requests (consumable capacity, alpha), and with
//! [`Features::partitionable_devices`] off the devices consuming shared counters are skipped as
//! the scheduler does.
//!
//! # Example: would the scheduler put a NIC next to GPU 1?
//!
//! A claim template's request, checked against a node's published devices without a cluster:
//!
//! ```
//! use dranet_alloc::Allocator;
//! use dranet_alloc::k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimSpec};
//! use serde_json::json;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // What `dranet run` publishes: one slice of the node's pool (trimmed to two NICs).
//! let slice = json!({
//!     "metadata": {"name": "node-1-dra.net-0"},
//!     "spec": {
//!         "driver": "dra.net", "nodeName": "node-1",
//!         "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
//!         "devices": [
//!             {"name": "pci-0000-0c-00-0", "attributes": {"dra.net/numaNode": {"int": 0}, "dra.net/rdma": {"bool": true}}},
//!             {"name": "pci-0000-8c-00-0", "attributes": {"dra.net/numaNode": {"int": 1}, "dra.net/rdma": {"bool": true}}}
//!         ]
//!     }
//! });
//! let class: DeviceClass = serde_json::from_value(json!({
//!     "metadata": {"name": "dranet"},
//!     "spec": {"selectors": [{"cel": {"expression": "device.driver == 'dra.net'"}}]}
//! }))?;
//! let claim: ResourceClaimSpec = serde_json::from_value(json!({
//!     "devices": {"requests": [{"name": "nic", "exactly": {
//!         "deviceClassName": "dranet",
//!         "selectors": [{"cel": {"expression":
//!             "device.attributes['dra.net'].rdma && device.attributes['dra.net'].numaNode == 1"}}]
//!     }}]}
//! }))?;
//!
//! let alloc = Allocator::from_json(&[slice], &[class])?;
//! let result = alloc.allocate_spec(&claim, &[])?;
//! assert_eq!(result.results[0].device, "pci-0000-8c-00-0");
//! # Ok(())
//! # }
//! ```
//!
//! Compile a claim once and allocate it as often as needed; tell "does not fit this node" from
//! an error the scheduler would report for the claim:
//!
//! ```
//! use dranet_alloc::Allocator;
//! # fn demo(slices: &[k8s_openapi::api::resource::v1::ResourceSlice],
//! #         classes: &[k8s_openapi::api::resource::v1::DeviceClass],
//! #         claim: &k8s_openapi::api::resource::v1::ResourceClaimSpec) {
//! let alloc = Allocator::new(slices, classes).unwrap();
//! let claim = alloc.compile(claim).unwrap();
//! match alloc.allocate(&claim, &[]) {
//!     Ok(a) => for r in &a.results { println!("{} -> {}/{}/{}", r.request, r.driver, r.pool, r.device) },
//!     Err(e) if e.is_unsatisfiable() => eprintln!("does not fit this node: {e}"),
//!     Err(e) => eprintln!("the scheduler would report an error: {e}"),
//! }
//! # }
//! ```

#![warn(missing_docs)]

/// The README's example, compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The Kubernetes API types this crate's public items use, at the version the application picked.
pub use dranet_core::k8s_openapi;

pub mod cel;
pub mod report;
pub mod served;

mod allocation;
mod allocator;
mod build;
mod capacity;
mod claim;
mod device;
mod error;
mod features;
mod gather;
mod in_use;
mod limits;
mod node;
mod one_or_many;
mod options;
mod search;
mod selectors;
mod source;
mod taint_rule;
mod version;

pub use allocation::{Allocation, DeviceResult};
pub use allocator::Allocator;
pub use claim::CompiledClaim;
pub use device::{Device, DeviceId};
pub use error::AllocError;
pub use features::{DistinctAttribute, Features, SchedulerBugs};
pub use in_use::{InUse, Share};
pub use limits::{MAX_ALLOCATED_DEVICES, MAX_REQUESTS, MAX_SEARCH_STEPS};
pub use node::{
    Node, NodeSelectorError, RequirementError, SliceScope, device_on_node, node_selector_matches,
    slice_scope,
};
pub use options::Options;
pub use taint_rule::{DeviceTaintRule, DeviceTaintSelector};
pub use version::{KubernetesVersion, VersionError};
