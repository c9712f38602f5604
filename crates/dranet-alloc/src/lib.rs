//! `dranet-alloc`: the Kubernetes scheduler's DRA allocator and the CEL environment it evaluates
//! device selectors in, run outside the scheduler: which devices a claim would get on a node,
//! and why not when it gets none. `dranet check` is built on it; an embedder (a tool, an
//! admission check, a test) gets the same answers without a cluster.
//!
//! - The allocator, at this crate's root: [`Allocator`] over a node's ResourceSlices and the
//!   DeviceClasses, [`CompiledClaim`], [`Allocation`], [`AllocError`].
//! - [`cel`]: selectors compiled and type-checked as the API server admits them and evaluated as
//!   the scheduler does, with the Kubernetes CEL libraries.
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

/// The Kubernetes API types this crate's public items use, at the version the application picked.
pub use dranet_core::k8s_openapi;

pub mod cel;
pub mod report;

mod build;
mod claim;
mod node;
mod one_or_many;
mod search;

use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::{
    DeviceAllocationConfiguration, DeviceClass, DeviceClassConfiguration, DeviceSelector,
    DeviceTaint, ResourceClaimSpec, ResourceSlice,
};
use serde::{Deserialize, Serialize};

use crate::cel::{
    AttrKey, AttributeValue, CelError, DeviceAttributes, DeviceView, FastDevice, FullDevice,
    ProgramCache, Scalar,
};

pub use claim::CompiledClaim;
pub use node::{
    Node, NodeSelectorError, RequirementError, SliceScope, device_on_node, node_selector_matches,
    slice_scope,
};

/// Most devices one claim can be allocated (the API's limit on allocation results).
pub const MAX_ALLOCATED_DEVICES: usize = 32;
/// Most requests in a claim.
pub const MAX_REQUESTS: usize = 32;
/// Search steps before giving up on a pathological claim (the scheduler has no such limit and
/// may search for minutes).
pub const MAX_SEARCH_STEPS: u64 = 20_000_000;

/// Why an allocation could not be simulated or found.
///
/// [`AllocError::Unsatisfiable`] is the only "does not fit": the scheduler would try other
/// nodes. Every other variant is an error the scheduler reports for the claim (or that the API
/// server would have refused), see [`AllocError::is_unsatisfiable`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AllocError {
    /// A ResourceSlice that cannot be used.
    #[error("ResourceSlice {slice}: {reason}")]
    InvalidSlice {
        /// Slice name (or its position when unnamed).
        slice: String,
        /// What is wrong.
        reason: String,
    },
    /// The claim's structure is invalid.
    #[error("invalid claim: {0}")]
    InvalidClaim(String),
    /// A request names a DeviceClass that was not given.
    #[error("request {request}: DeviceClass {class:?} not found")]
    ClassNotFound {
        /// Request (or `request/sub-request`).
        request: String,
        /// The class name.
        class: String,
    },
    /// A selector expression that does not compile.
    #[error("request {request}: invalid CEL expression {expression:?}{}: {error}",
        class.as_ref().map(|c| format!(" of DeviceClass {c}")).unwrap_or_default())]
    Cel {
        /// Request (or `request/sub-request`).
        request: String,
        /// The class whose selector it is, when it is not the request's own.
        class: Option<String>,
        /// The expression.
        expression: String,
        /// What is wrong.
        error: CelError,
    },
    /// A selector failed to evaluate on a device the search reached (a missing attribute, a
    /// type mismatch, an overflow). The scheduler reports this for the claim (`claim …:
    /// selector #0: CEL runtime error: no such key: model`) and does not schedule the pod; it
    /// is not "this node does not fit".
    #[error("request {request}: {}selector #{selector}: CEL runtime error on device {device}: {error}",
        class.as_ref().map(|c| format!("DeviceClass {c}: ")).unwrap_or_default())]
    CelRuntime {
        /// Request (or `request/sub-request`).
        request: String,
        /// The class whose selector failed, when it is not the request's own.
        class: Option<String>,
        /// The selector's position in its list.
        selector: usize,
        /// The device it was evaluated on.
        device: Box<DeviceId>,
        /// What failed.
        error: String,
    },
    /// An `allocationMode: All` request whose devices cannot all satisfy the claim's
    /// constraints: the scheduler treats this as an error of the claim.
    #[error(
        "request {request}: allocationMode All takes device {device}, which breaks {constraint}"
    )]
    ConstraintViolated {
        /// Request (or `request/sub-request`).
        request: String,
        /// The device that does not fit the constraint.
        device: DeviceId,
        /// The constraint (`constraint #0 (matchAttribute …)`).
        constraint: String,
    },
    /// An `allocationMode: All` request over a pool that cannot be used whole: incomplete
    /// (slices missing, being updated) or invalid.
    #[error("request {request}: allocationMode All, but pool {pool} {reason}")]
    AllOverUnusablePool {
        /// Request (or `request/sub-request`).
        request: String,
        /// `driver/pool`.
        pool: String,
        /// `is incomplete (…)` or `is invalid (…)`.
        reason: String,
    },
    /// The search reached a pool that names a device twice.
    #[error("pool {pool} is invalid: {reason}")]
    InvalidPool {
        /// `driver/pool`.
        pool: String,
        /// What is wrong.
        reason: String,
    },
    /// The claim needs more than [`MAX_ALLOCATED_DEVICES`] devices.
    #[error("the claim needs {needed} devices, more than the limit of {MAX_ALLOCATED_DEVICES}")]
    TooManyDevices {
        /// How many (at least).
        needed: usize,
    },
    /// A request uses a feature that is off in [`Features`] (the scheduler refuses it too).
    #[error("request {request}: {feature} is requested, but the feature is disabled")]
    FeatureDisabled {
        /// Request (or `request/sub-request`).
        request: String,
        /// The feature.
        feature: String,
    },
    /// A request uses a feature this engine does not model.
    #[error("request {request}: {feature} is not supported by this simulation")]
    Unsupported {
        /// Request (or `request/sub-request`).
        request: String,
        /// The feature.
        feature: String,
    },
    /// No set of devices satisfies the claim on this node.
    #[error("cannot allocate request {request}: {reason}")]
    Unsatisfiable {
        /// The request that could not be met (the furthest the search got).
        request: String,
        /// Why: too few matching devices, or which constraint failed.
        reason: String,
    },
    /// The search was stopped after [`MAX_SEARCH_STEPS`].
    #[error("gave up after {0} search steps: the claim has too many combinations to try")]
    SearchLimit(u64),
}

impl AllocError {
    /// `true` when the claim does not fit this node's free devices (the scheduler's "no
    /// result", after which it tries other nodes); `false` for an error that stops the claim
    /// from being scheduled at all until its inputs change (a CEL runtime error, an `All`
    /// request breaking a constraint, a missing class, …) and for [`AllocError::SearchLimit`].
    pub fn is_unsatisfiable(&self) -> bool {
        matches!(self, AllocError::Unsatisfiable { .. })
    }
}

/// A device's identity in the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeviceId {
    /// Driver name.
    pub driver: String,
    /// Pool name.
    pub pool: String,
    /// Device name.
    pub device: String,
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// Optional allocator features, named after the scheduler's feature gates. The default is
/// Kubernetes 1.34's: the beta features on, the alpha ones off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// `DRAAdminAccess` (beta, on): requests with `adminAccess: true`.
    pub admin_access: bool,
    /// `DRAPrioritizedList` (beta, on): `firstAvailable` requests.
    pub prioritized_list: bool,
    /// `DRADeviceTaints` (alpha, off): device taints must be tolerated; when off, taints are
    /// ignored (the API server drops them).
    pub device_taints: bool,
    /// `DRAPartitionableDevices` (alpha, off): shared counters and `perDeviceNodeSelection`;
    /// when off, slices with `perDeviceNodeSelection` and devices consuming counters are
    /// skipped.
    pub partitionable_devices: bool,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            admin_access: true,
            prioritized_list: true,
            device_taints: false,
            partitionable_devices: false,
        }
    }
}

/// Bugs of the Kubernetes scheduler's allocator that change which devices it picks, to
/// reproduce a given version exactly. The default has none: the API's semantics, as the
/// scheduler of Kubernetes 1.36 allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedulerBugs {
    /// Kubernetes 1.34 and older: `distinctAttribute` compares pointers instead of values, so
    /// it only requires the attribute and lets equal values through (fixed in 1.35).
    pub distinct_attribute_not_enforced: bool,
    /// Kubernetes 1.35 and older mishandle `allocationMode: All` in `firstAvailable`
    /// sub-requests (fixed in 1.36): an `All` sub-request other than the first takes its first
    /// device, then goes on as the first sub-request (its devices, its count, its name in the
    /// results); and an `All` second sub-request after an `All` first one gets the first one's
    /// devices instead of evaluating its own selectors (a cache keyed by the wrong
    /// sub-request).
    pub first_available_all_mode: bool,
}

impl SchedulerBugs {
    /// The bugs of the Kubernetes 1.34 scheduler.
    pub fn kubernetes_1_34() -> SchedulerBugs {
        SchedulerBugs {
            distinct_attribute_not_enforced: true,
            first_available_all_mode: true,
        }
    }

    /// The bugs of the Kubernetes 1.35 scheduler.
    pub fn kubernetes_1_35() -> SchedulerBugs {
        SchedulerBugs {
            distinct_attribute_not_enforced: false,
            first_available_all_mode: true,
        }
    }
}

/// How to build an [`Allocator`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The node to allocate for: only slices and devices it can reach are used, and the
    /// allocation's node selector names it. `None` takes every slice given to be on the node
    /// (a node's own slices, as `dranet check` reads them).
    pub node: Option<Node>,
    /// The scheduler's feature gates.
    pub features: Features,
    /// The scheduler's bugs to reproduce (none by default).
    pub bugs: SchedulerBugs,
    /// Compiled selectors to reuse across allocators, as the scheduler keeps its CEL cache;
    /// `None` compiles every DeviceClass and claim selector anew.
    pub programs: Option<Arc<ProgramCache>>,
}

/// One device as the engine sees it.
///
/// A device of an allocator built from typed ResourceSlices borrows the slice's device: its
/// names are not copied, and its attributes are indexed ([`Device::attributes`]) only when
/// something needs more than the selector shapes the allocator reads straight from the slice
/// (`device.driver == "x"`, an attribute compared with a literal, a bool attribute, and `&&`,
/// `||`, `!` of those).
#[derive(Debug, Clone)]
pub struct Device<'a> {
    origin: Origin<'a>,
    /// The attribute index, built on first need (boxed: most devices of a cold allocation
    /// never need one, and a small device keeps the list of them below the size from which
    /// glibc's malloc consolidates its free lists).
    attributes: OnceLock<Box<DeviceAttributes>>,
    /// `allowMultipleAllocations`.
    pub allow_multiple_allocations: bool,
    /// Reachable from the node (only `false` under `perDeviceNodeSelection`).
    on_node: bool,
    /// Never selected: `bindingConditions` are set (their gate is off).
    binding: bool,
    /// Index into the allocator's slice infos.
    slice: u32,
    /// Consumes shared counters (partitionable devices).
    counters: Option<Box<build::CounterUse>>,
    /// Where it can be used, when given per device (`perDeviceNodeSelection`).
    placement: Option<Box<build::Placement<'a>>>,
}

/// Where a device's names and taints are read from.
#[derive(Debug, Clone)]
enum Origin<'a> {
    /// The ResourceSlice's device, whose attributes the shortcut also reads.
    Slice(build::Source<'a>),
    /// Copies, for an allocator that owns its devices ([`Allocator::from_json`]), whose
    /// indexes are then built.
    Owned(Box<OwnedDevice>),
}

#[derive(Debug, Clone)]
struct OwnedDevice {
    driver: String,
    pool: String,
    name: String,
    taints: Vec<DeviceTaint>,
}

// A node's devices fit in few bytes each (see `Device::attributes`).
const _: () = assert!(std::mem::size_of::<Device>() <= 64);

impl<'a> Device<'a> {
    fn view(&self) -> DeviceView<'_> {
        DeviceView {
            driver: self.driver(),
            attributes: self.attributes(),
            allow_multiple_allocations: self.allow_multiple_allocations,
        }
    }

    /// (driver, pool, name), the order of [`Allocator::device`]'s index.
    fn key(&self) -> (&str, &str, &str) {
        (self.driver(), self.pool(), self.name())
    }

    /// Driver, pool and name.
    pub fn id(&self) -> DeviceId {
        DeviceId {
            driver: self.driver().to_string(),
            pool: self.pool().to_string(),
            device: self.name().to_string(),
        }
    }

    /// The driver that publishes the device.
    #[inline]
    pub fn driver(&self) -> &str {
        match &self.origin {
            Origin::Slice(s) => s.driver(),
            Origin::Owned(o) => &o.driver,
        }
    }

    /// The device's pool.
    pub fn pool(&self) -> &str {
        match &self.origin {
            Origin::Slice(s) => s.pool(),
            Origin::Owned(o) => &o.pool,
        }
    }

    /// The device's name in its pool.
    pub fn name(&self) -> &str {
        match &self.origin {
            Origin::Slice(s) => s.name(),
            Origin::Owned(o) => &o.name,
        }
    }

    /// Attributes and capacities, indexed for CEL and constraints (built on first call).
    #[inline]
    pub fn attributes(&self) -> &DeviceAttributes {
        self.attributes.get_or_init(|| {
            Box::new(match &self.origin {
                // The attributes were checked when the allocator was built, so the index
                // builds; were it to fail, an empty index makes every selector that reads the
                // device a "no such key" error, not a wrong match.
                Origin::Slice(s) => s.index().unwrap_or_default(),
                Origin::Owned(_) => DeviceAttributes::default(),
            })
        })
    }

    /// An attribute by fully qualified name (`resource.kubernetes.io/pcieRoot`); unqualified
    /// names are in the driver's domain.
    pub fn attribute(&self, name: &str) -> Option<&AttributeValue> {
        self.attributes().get_qualified(name, self.driver())
    }

    /// Whether the node can use this device: `false` only for a device of a
    /// `perDeviceNodeSelection` slice whose own `nodeName`/`nodeSelector`/`allNodes` exclude the
    /// node. Such devices stay in their pool (their selectors are still evaluated, as the
    /// scheduler does) but are never allocated.
    pub fn on_node(&self) -> bool {
        self.on_node
    }

    /// The device's taints (only acted on with [`Features::device_taints`]).
    pub fn taints(&self) -> &[DeviceTaint] {
        match &self.origin {
            Origin::Slice(s) => s.taints(),
            Origin::Owned(o) => &o.taints,
        }
    }

    /// The same device owning its names, its index built.
    fn into_owned(self) -> Device<'static> {
        self.attributes();
        let origin = match &self.origin {
            Origin::Slice(s) => Origin::Owned(Box::new(OwnedDevice {
                driver: s.driver().to_string(),
                pool: s.pool().to_string(),
                name: s.name().to_string(),
                taints: s.taints().to_vec(),
            })),
            Origin::Owned(o) => Origin::Owned(o.clone()),
        };
        Device {
            origin,
            attributes: self.attributes,
            allow_multiple_allocations: self.allow_multiple_allocations,
            on_node: self.on_node,
            binding: self.binding,
            slice: self.slice,
            counters: self.counters,
            placement: self.placement.map(|p| Box::new(p.into_owned())),
        }
    }
}

/// An attribute value as constraints read it: a scalar straight from the slice, or a value of
/// the device's index (versions and lists, or once the index is built).
#[derive(Debug, Clone, Copy)]
pub(crate) enum AttrRef<'d> {
    Bool(bool),
    Int(i64),
    Str(&'d str),
    Value(&'d AttributeValue),
}

impl<'a> Device<'a> {
    /// The attribute with this key for constraints, without building the index for a string,
    /// int or bool (a `matchAttribute` over a node's devices reads one attribute of each).
    #[inline]
    pub(crate) fn attr_ref(&self, key: &AttrKey) -> Option<AttrRef<'_>> {
        if let (None, Origin::Slice(s)) = (self.attributes.get(), &self.origin) {
            match s.scalar(key)? {
                Scalar::Bool(b) => return Some(AttrRef::Bool(b)),
                Scalar::Int(i) => return Some(AttrRef::Int(i)),
                Scalar::Str(v) => return Some(AttrRef::Str(v)),
                Scalar::Other => {}
            }
        }
        self.attributes().get_key(key).map(AttrRef::Value)
    }
}

impl FastDevice for Device<'_> {
    fn driver(&self) -> &str {
        Device::driver(self)
    }

    #[inline]
    fn scalar(&self, key: &AttrKey) -> Option<Scalar<'_>> {
        match (self.attributes.get(), &self.origin) {
            (None, Origin::Slice(s)) => s.scalar(key),
            _ => self.attributes().get_key(key).map(Scalar::of),
        }
    }
}

impl FullDevice for Device<'_> {
    fn view(&self) -> DeviceView<'_> {
        Device::view(self)
    }
}

/// One allocated device in the result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceResult {
    /// The request, or `request/sub-request` for `firstAvailable`.
    pub request: String,
    /// Driver name.
    pub driver: String,
    /// Pool name.
    pub pool: String,
    /// Device name.
    pub device: String,
    /// `Some(true)` when allocated for a request with `adminAccess: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_access: Option<bool>,
}

impl From<&DeviceResult> for k8s_openapi::api::resource::v1::DeviceRequestAllocationResult {
    fn from(r: &DeviceResult) -> Self {
        Self {
            request: r.request.clone(),
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
            admin_access: r.admin_access,
            ..Default::default()
        }
    }
}

impl From<&k8s_openapi::api::resource::v1::DeviceRequestAllocationResult> for DeviceResult {
    fn from(r: &k8s_openapi::api::resource::v1::DeviceRequestAllocationResult) -> Self {
        Self {
            request: r.request.clone(),
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
            admin_access: r.admin_access,
        }
    }
}

/// The devices chosen for a claim, in request order, with what the scheduler writes beside
/// them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Allocation {
    /// One entry per device.
    pub results: Vec<DeviceResult>,
    /// The configuration the driver gets: the classes' (`source: FromClass`, each class once,
    /// naming the requests that use it), then the claim's (`FromClaim`), as the scheduler copies
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<DeviceAllocationConfiguration>,
    /// The nodes the allocation can be used from: `metadata.name` of the node when a device
    /// is local to it, the slices' node selectors merged, or `None` for every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<NodeSelector>,
}

impl Allocation {
    /// The allocation as the scheduler writes it into a claim's `status.allocation`.
    pub fn to_k8s(&self) -> k8s_openapi::api::resource::v1::AllocationResult {
        k8s_openapi::api::resource::v1::AllocationResult {
            devices: Some(k8s_openapi::api::resource::v1::DeviceAllocationResult {
                results: Some(self.results.iter().map(Into::into).collect()),
                config: (!self.config.is_empty()).then(|| self.config.clone()),
            }),
            node_selector: self.node_selector.clone(),
            ..Default::default()
        }
    }
}

/// A pool as the search sees it.
#[derive(Debug, Clone)]
struct Pool<'a> {
    driver: Cow<'a, str>,
    name: Cow<'a, str>,
    /// Slices present differ from `resourceSliceCount`.
    incomplete: Option<String>,
    /// A device name appears twice.
    invalid: Option<String>,
    /// Its devices in [`Allocator::devices`].
    devices: std::ops::Range<usize>,
}

impl Pool<'_> {
    fn into_owned(self) -> Pool<'static> {
        Pool {
            driver: Cow::Owned(self.driver.into_owned()),
            name: Cow::Owned(self.name.into_owned()),
            incomplete: self.incomplete,
            invalid: self.invalid,
            devices: self.devices,
        }
    }

    fn label(&self) -> String {
        format!("{}/{}", self.driver, self.name)
    }
}

/// A DeviceClass: its selectors, compiled on first use (a claim names few of a cluster's
/// classes), its config, and what its selectors say of each device, computed on first use and
/// kept, since neither changes while the allocator lives.
#[derive(Debug)]
struct ClassEntry<'a> {
    name: Cow<'a, str>,
    /// [`claim::class_hash`] of the name, which a compiled claim keeps to be recognised.
    hash: u64,
    /// What `programs` is compiled from; empty once an owned allocator has compiled them.
    selectors: &'a [DeviceSelector],
    programs: OnceLock<build::Programs>,
    config: Cow<'a, [DeviceClassConfiguration]>,
    verdicts: OnceLock<Vec<search::Verdict>>,
}

impl ClassEntry<'_> {
    /// The compiled selectors, or the first that does not compile.
    fn programs(&self, cache: Option<&ProgramCache>) -> &build::Programs {
        self.programs
            .get_or_init(|| build::selector_programs(self.selectors, cache))
    }

    fn into_owned(self, cache: Option<&ProgramCache>) -> ClassEntry<'static> {
        self.programs(cache);
        ClassEntry {
            name: Cow::Owned(self.name.into_owned()),
            hash: self.hash,
            selectors: &[],
            programs: self.programs,
            config: Cow::Owned(self.config.into_owned()),
            verdicts: self.verdicts,
        }
    }
}

/// The devices of a node (from ResourceSlices of any drivers) and the DeviceClasses, ready to
/// allocate claims against.
///
/// Built from typed ResourceSlices ([`Allocator::new`]), it borrows them (`'a`): what it needs
/// of a device is read from the slice when needed, not copied up front, which is most of the
/// cost of deciding one claim on a freshly built allocator. Built from JSON
/// ([`Allocator::from_json`]), it owns everything (`Allocator<'static>`).
#[derive(Debug)]
pub struct Allocator<'a> {
    devices: Vec<Device<'a>>,
    pools: Vec<Pool<'a>>,
    /// The order the search visits pools in (indexes into `pools`); empty for the order of
    /// `pools` ([`Allocator::visit_order`]).
    order: Vec<usize>,
    slices: Vec<build::SliceInfo<'a>>,
    /// Built on first use: only `allocated` lists and [`Allocator::device`] need it. Device
    /// positions sorted by (driver, pool, name, position).
    index: OnceLock<Vec<u32>>,
    /// Sorted by name, one entry per name (the last class given of a name).
    classes: Vec<ClassEntry<'a>>,
    features: Features,
    bugs: SchedulerBugs,
    node: Option<Node>,
    /// Shared counters, per slice that declares them.
    counter_sets: Vec<build::SliceCounters>,
    warnings: Vec<String>,
    /// Where claims' selectors are compiled ([`Options::programs`]).
    programs: Option<Arc<ProgramCache>>,
    /// Claims allocated so far (saturating), to know a kept allocator from a cold one.
    claims: AtomicU32,
}

impl<'a> Allocator<'a> {
    /// Builds the device set from ResourceSlices and the classes, every slice taken to be on
    /// the node, with 1.34's default features. Malformed slices (a device without a name, an
    /// attribute without a value, a bad version or quantity) are errors naming the slice and
    /// device.
    pub fn new(
        slices: &'a [ResourceSlice],
        classes: &'a [DeviceClass],
    ) -> Result<Self, AllocError> {
        Self::with_options(slices, classes, &Options::default())
    }

    /// Like [`Allocator::new`], for a given node and feature set: only the slices (and, with
    /// `perDeviceNodeSelection`, the devices) the node can reach are used, as the scheduler
    /// decides it ([`slice_scope`]).
    pub fn with_options(
        slices: &'a [ResourceSlice],
        classes: &'a [DeviceClass],
        options: &Options,
    ) -> Result<Self, AllocError> {
        build::build(slices, None, classes, options)
    }

    /// Like [`Allocator::new`] from the slices' JSON (or YAML turned into JSON), so list-valued
    /// attributes (`ints`, `strings`), which the v1.34 structs drop, are kept. The allocator
    /// owns what it needs: every device's attributes are indexed up front.
    pub fn from_json(
        slices: &[serde_json::Value],
        classes: &[DeviceClass],
    ) -> Result<Allocator<'static>, AllocError> {
        Allocator::from_json_with_options(slices, classes, &Options::default())
    }

    /// [`Allocator::from_json`] for a given node and feature set.
    pub fn from_json_with_options(
        slices: &[serde_json::Value],
        classes: &[DeviceClass],
        options: &Options,
    ) -> Result<Allocator<'static>, AllocError> {
        let mut parsed = Vec::with_capacity(slices.len());
        for (i, v) in slices.iter().enumerate() {
            let s: ResourceSlice =
                serde_json::from_value(v.clone()).map_err(|e| AllocError::InvalidSlice {
                    slice: v["metadata"]["name"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("#{i}")),
                    reason: e.to_string(),
                })?;
            parsed.push(s);
        }
        Ok(build::build(&parsed, Some(slices), classes, options)?.into_owned())
    }

    /// The same allocator owning its devices, their indexes built.
    fn into_owned(self) -> Allocator<'static> {
        Allocator {
            devices: self.devices.into_iter().map(Device::into_owned).collect(),
            pools: self.pools.into_iter().map(Pool::into_owned).collect(),
            order: self.order,
            slices: self
                .slices
                .into_iter()
                .map(build::SliceInfo::into_owned)
                .collect(),
            index: self.index,
            classes: self
                .classes
                .into_iter()
                .map(|c| c.into_owned(self.programs.as_deref()))
                .collect(),
            features: self.features,
            bugs: self.bugs,
            node: self.node,
            counter_sets: self.counter_sets,
            warnings: self.warnings,
            programs: self.programs,
            claims: self.claims,
        }
    }

    /// All devices of the pools the node can reach, pools in (driver, pool) order, each
    /// pool's devices in slice order. Check [`Device::on_node`] for devices of
    /// `perDeviceNodeSelection` slices.
    pub fn devices(&self) -> &[Device<'a>] {
        &self.devices
    }

    /// A device by identity.
    pub fn device(&self, id: &DeviceId) -> Option<&Device<'a>> {
        self.position(id).map(|i| &self.devices[i])
    }

    /// The position of a device in [`Allocator::devices`]; for a name given twice in a pool
    /// (an invalid pool), the first.
    fn position(&self, id: &DeviceId) -> Option<usize> {
        let key = Device::key;
        let index = self.index.get_or_init(|| {
            let mut v: Vec<u32> = (0..self.devices.len() as u32).collect();
            // Stable: of equal names, the first given comes first.
            v.sort_by(|&x, &y| key(&self.devices[x as usize]).cmp(&key(&self.devices[y as usize])));
            v
        });
        let want = (id.driver.as_str(), id.pool.as_str(), id.device.as_str());
        let at = index.partition_point(|&i| key(&self.devices[i as usize]) < want);
        let i = *index.get(at)? as usize;
        (key(&self.devices[i]) == want).then_some(i)
    }

    /// The position of the class named `name`.
    fn class_index(&self, name: &str) -> Option<usize> {
        self.classes
            .binary_search_by(|c| c.name.as_ref().cmp(name))
            .ok()
    }

    /// The name of the class at `class`.
    fn class_name(&self, class: usize) -> &str {
        self.classes.get(class).map_or("", |c| &c.name)
    }

    /// The pools in the order the search visits them.
    fn visit_order(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.pools.len()).map(|i| self.order.get(i).copied().unwrap_or(i))
    }

    /// The node this allocator allocates for (`None`: every slice is taken to be on it).
    pub fn node(&self) -> Option<&Node> {
        self.node.as_ref()
    }

    /// The feature set.
    pub fn features(&self) -> &Features {
        &self.features
    }

    /// The scheduler bugs reproduced.
    pub fn bugs(&self) -> &SchedulerBugs {
        &self.bugs
    }

    /// The pools the search visits, as `(driver, pool)`, in the order it visits them.
    pub fn pool_order(&self) -> Vec<(&str, &str)> {
        self.visit_order()
            .map(|p| (self.pools[p].driver.as_ref(), self.pools[p].name.as_ref()))
            .collect()
    }

    /// Sets the order the search visits pools in: `order` lists `(driver, pool)` pairs; pools
    /// it leaves out keep their relative order after the listed ones. The scheduler's order is
    /// random (Go map iteration), so trying every order enumerates every answer it may give.
    /// Naming a pool that does not exist is an error.
    pub fn set_pool_order(&mut self, order: &[(&str, &str)]) -> Result<(), AllocError> {
        let mut new = Vec::with_capacity(self.pools.len());
        for (d, p) in order {
            let i = self
                .pools
                .iter()
                .position(|x| x.driver == *d && x.name == *p)
                .ok_or_else(|| AllocError::InvalidSlice {
                    slice: format!("pool {d}/{p}"),
                    reason: "no such pool".into(),
                })?;
            if !new.contains(&i) {
                new.push(i);
            }
        }
        for i in self.visit_order() {
            if !new.contains(&i) {
                new.push(i);
            }
        }
        self.order = new;
        Ok(())
    }

    /// What was ignored or is not simulated (outdated slices, incomplete pools, …).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Validates a claim and compiles its selectors (and its classes') once.
    pub fn compile(&self, claim: &ResourceClaimSpec) -> Result<CompiledClaim, AllocError> {
        CompiledClaim::new(self, claim)
    }

    /// Finds the devices for a compiled claim as the scheduler would, never using those in
    /// `allocated` (devices other claims hold) except for `adminAccess` requests. A claim
    /// compiled by another allocator is refused ([`AllocError::InvalidClaim`]).
    pub fn allocate(
        &self,
        claim: &CompiledClaim,
        allocated: &[DeviceId],
    ) -> Result<Allocation, AllocError> {
        // The classes are kept by position: another allocator's may be others.
        for alt in claim.requests.iter().flat_map(|r| r.alts.iter()) {
            if self
                .classes
                .get(alt.class)
                .is_none_or(|c| c.hash != alt.class_hash)
            {
                return Err(AllocError::InvalidClaim(format!(
                    "request {}: the claim was compiled by another allocator",
                    alt.label
                )));
            }
        }
        // Relaxed: a count for a choice of speed, ordering nothing else.
        let _ = self
            .claims
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1));
        search::run(self, claim, allocated)
    }

    /// Whether this allocator has been asked for more than one claim: it is kept, and indexing
    /// the devices its selectors read pays for itself.
    fn reused(&self) -> bool {
        self.claims.load(Ordering::Relaxed) > 1
    }

    /// [`Allocator::compile`] then [`Allocator::allocate`].
    pub fn allocate_spec(
        &self,
        claim: &ResourceClaimSpec,
        allocated: &[DeviceId],
    ) -> Result<Allocation, AllocError> {
        self.allocate(&self.compile(claim)?, allocated)
    }
}
