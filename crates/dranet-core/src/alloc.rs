//! DRA allocation simulation: which devices the Kubernetes scheduler would give a claim.
//!
//! The engine follows the `resource.k8s.io/v1` structured-parameters semantics of the
//! scheduler's allocator, for one node's devices:
//!
//! - `exactly` requests: `deviceClassName` (the class's selectors must match too), CEL
//!   `selectors`, `allocationMode: ExactCount` with `count` (default 1) or `All` (every matching
//!   device, at least one, none of them already allocated);
//! - `firstAvailable`: sub-requests tried in order, the first that fits with the rest of the
//!   claim wins (results are named `request/sub-request`);
//! - `constraints[].matchAttribute`: every device of the listed requests (all requests when the
//!   list is empty; `req` covers all its sub-requests, `req/sub` only that one) has the attribute
//!   and the same value; list-valued attributes match when the intersection of all the devices'
//!   lists is not empty. `distinctAttribute`: no two such devices share a value;
//! - a device is allocated at most once, and never when it is already in use;
//! - depth-first search with backtracking over requests, sub-requests and devices, so a claim
//!   that has a solution gets one, in the order the scheduler prefers (first request first,
//!   devices in pool order).
//!
//! Pools are assembled like the scheduler does: slices of one `(driver, pool)` with the newest
//! generation; a pool that lacks some of its `resourceSliceCount` slices is incomplete, and an
//! `All` request that touches it fails.
//!
//! Not simulated, with a warning or an explicit error rather than a wrong answer: device taints
//! and tolerations, partitionable devices (shared counters), consumable capacity requests, admin
//! access, node selection (every slice given is taken to be on the node).
//!
//! ```
//! use dranet_core::alloc::Allocator;
//! # fn demo(slices: &[k8s_openapi::api::resource::v1::ResourceSlice],
//! #         classes: &[k8s_openapi::api::resource::v1::DeviceClass],
//! #         claim: &k8s_openapi::api::resource::v1::ResourceClaimSpec) {
//! let alloc = Allocator::new(slices, classes).unwrap();
//! // Compile the claim's CEL once, allocate as often as needed.
//! let claim = alloc.compile(claim).unwrap();
//! match alloc.allocate(&claim, &[]) {
//!     Ok(a) => for r in &a.results { println!("{} -> {}/{}/{}", r.request, r.driver, r.pool, r.device) },
//!     Err(e) => eprintln!("{e}"),
//! }
//! # }
//! ```

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceSelector, ResourceClaimSpec, ResourceSlice,
};
use serde::{Deserialize, Serialize};

use crate::cel::{
    AttrKey, AttributeValue, CelError, DeviceAttributes, DeviceView, Program, Quantity, Semver,
};

/// Most devices one claim can be allocated (the API's limit on allocation results).
pub const MAX_ALLOCATED_DEVICES: usize = 32;
/// Most requests in a claim.
pub const MAX_REQUESTS: usize = 32;
/// Search steps before giving up on a pathological claim.
pub const MAX_SEARCH_STEPS: u64 = 1_000_000;

/// Why an allocation could not be simulated or found.
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
    /// A request uses a feature this simulation does not model.
    #[error("request {request}: {feature} is not supported by this simulation")]
    Unsupported {
        /// Request (or `request/sub-request`).
        request: String,
        /// The feature.
        feature: String,
    },
    /// No set of devices satisfies the claim.
    #[error("cannot allocate request {request}: {reason}")]
    Unsatisfiable {
        /// The request that could not be met (first in claim order).
        request: String,
        /// Why: too few matching devices, or which constraint failed.
        reason: String,
    },
    /// The search was stopped after [`MAX_SEARCH_STEPS`].
    #[error("gave up after {0} search steps: the claim has too many combinations to try")]
    SearchLimit(u64),
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

/// One device as the engine sees it.
#[derive(Debug, Clone)]
pub struct Device {
    /// Driver, pool and name.
    pub id: DeviceId,
    /// Attributes and capacities, indexed for CEL and constraints.
    pub attributes: DeviceAttributes,
    /// `allowMultipleAllocations`.
    pub allow_multiple_allocations: bool,
    pool_index: usize,
}

impl Device {
    fn view(&self) -> DeviceView<'_> {
        DeviceView {
            driver: &self.id.driver,
            attributes: &self.attributes,
            allow_multiple_allocations: self.allow_multiple_allocations,
        }
    }

    /// An attribute by fully qualified name (`resource.kubernetes.io/pcieRoot`); unqualified
    /// names are in the driver's domain.
    pub fn attribute(&self, name: &str) -> Option<&AttributeValue> {
        self.attributes.get_qualified(name, &self.id.driver)
    }
}

#[derive(Debug, Clone)]
struct Pool {
    incomplete: bool,
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
}

impl From<&DeviceResult> for k8s_openapi::api::resource::v1::DeviceRequestAllocationResult {
    fn from(r: &DeviceResult) -> Self {
        Self {
            request: r.request.clone(),
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
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
        }
    }
}

impl Allocation {
    /// The allocation as the scheduler writes it into a claim's `status.allocation` (devices
    /// only; the node selector and config are the scheduler's to add).
    pub fn to_k8s(&self) -> k8s_openapi::api::resource::v1::AllocationResult {
        k8s_openapi::api::resource::v1::AllocationResult {
            devices: Some(k8s_openapi::api::resource::v1::DeviceAllocationResult {
                results: Some(self.results.iter().map(Into::into).collect()),
                config: None,
            }),
            ..Default::default()
        }
    }
}

/// The devices chosen for a claim, in request order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Allocation {
    /// One entry per device.
    pub results: Vec<DeviceResult>,
}

/// The devices of a node (from ResourceSlices of any drivers) and the DeviceClasses, ready to
/// allocate claims against.
#[derive(Debug, Clone)]
pub struct Allocator {
    devices: Vec<Device>,
    pools: Vec<Pool>,
    /// Built on first use: only `allocated` lists and [`Allocator::device`] need it.
    index: OnceLock<HashMap<DeviceId, usize>>,
    classes: BTreeMap<String, ClassEntry>,
    warnings: Vec<String>,
}

/// A DeviceClass: its compiled selectors, and which devices they match, computed on first use
/// and kept, since neither changes while the allocator lives.
#[derive(Debug, Clone)]
struct ClassEntry {
    programs: Result<Vec<Program>, (String, CelError)>,
    mask: OnceLock<Vec<bool>>,
}

fn slice_label(s: &ResourceSlice, i: usize) -> String {
    s.metadata
        .name
        .clone()
        .unwrap_or_else(|| format!("#{i} (unnamed)"))
}

/// Converts one API attribute; `raw` is the attribute's JSON, for list types the v1.34 structs
/// cannot carry.
fn convert_attr(
    a: &k8s_openapi::api::resource::v1::DeviceAttribute,
    raw: Option<&serde_json::Value>,
) -> Result<AttributeValue, String> {
    let mut vals = Vec::new();
    if let Some(b) = a.bool {
        vals.push(AttributeValue::Bool(b));
    }
    if let Some(i) = a.int {
        vals.push(AttributeValue::Int(i));
    }
    if let Some(s) = &a.string {
        vals.push(AttributeValue::String(s.clone()));
    }
    if let Some(v) = &a.version {
        vals.push(AttributeValue::Version(Semver::parse(v)?));
    }
    if let Some(raw) = raw {
        if let Some(list) = raw.get("ints") {
            let v: Vec<i64> = serde_json::from_value(list.clone())
                .map_err(|e| format!("ints must be a list of integers: {e}"))?;
            vals.push(AttributeValue::Ints(v));
        }
        if let Some(list) = raw.get("strings") {
            let v: Vec<String> = serde_json::from_value(list.clone())
                .map_err(|e| format!("strings must be a list of strings: {e}"))?;
            vals.push(AttributeValue::Strings(v));
        }
    }
    match vals.len() {
        1 => Ok(vals.remove(0)),
        0 => Err("no value (expected one of bool, int, string, version, ints, strings)".into()),
        _ => Err("more than one value type is set".into()),
    }
}

fn selector_programs(
    selectors: &Option<Vec<DeviceSelector>>,
) -> Result<Vec<Program>, (String, CelError)> {
    let mut out = Vec::new();
    for s in selectors.iter().flatten() {
        match &s.cel {
            Some(c) => {
                out.push(Program::compile(&c.expression).map_err(|e| (c.expression.clone(), e))?)
            }
            None => {
                return Err((
                    String::new(),
                    CelError::Syntax {
                        position: 0,
                        message: "selector has no cel expression".into(),
                    },
                ));
            }
        }
    }
    Ok(out)
}

impl Allocator {
    /// Builds the device set from ResourceSlices and the classes. Malformed slices (a device
    /// without a name, an attribute without a value, a bad version or quantity, a device name
    /// twice in a pool) are errors naming the slice and device.
    pub fn new(slices: &[ResourceSlice], classes: &[DeviceClass]) -> Result<Self, AllocError> {
        let pairs: Vec<(&ResourceSlice, Option<&serde_json::Value>)> =
            slices.iter().map(|s| (s, None)).collect();
        Self::build(&pairs, classes)
    }

    /// Like [`Allocator::new`] from the slices' JSON (or YAML turned into JSON), so list-valued
    /// attributes (`ints`, `strings`), which the v1.34 structs drop, are kept.
    pub fn from_json(
        slices: &[serde_json::Value],
        classes: &[DeviceClass],
    ) -> Result<Self, AllocError> {
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
        let pairs: Vec<_> = parsed.iter().zip(slices.iter().map(Some)).collect();
        Self::build(&pairs, classes)
    }

    fn build(
        slices: &[(&ResourceSlice, Option<&serde_json::Value>)],
        classes: &[DeviceClass],
    ) -> Result<Self, AllocError> {
        let mut warnings = Vec::new();
        // Newest generation per pool, and how many slices of it are present.
        let mut newest: BTreeMap<(&str, &str), (i64, i64, usize)> = BTreeMap::new();
        for (s, _) in slices {
            let key = (s.spec.driver.as_str(), s.spec.pool.name.as_str());
            let g = s.spec.pool.generation;
            let e = newest
                .entry(key)
                .or_insert((g, s.spec.pool.resource_slice_count, 0));
            if g > e.0 {
                *e = (g, s.spec.pool.resource_slice_count, 0);
            }
            if g == e.0 {
                e.2 += 1;
            }
        }
        let pool_keys: Vec<(&str, &str)> = newest.keys().copied().collect();
        let pools: Vec<Pool> = newest
            .iter()
            .map(|((d, p), (g, count, have))| {
                let incomplete = (*have as i64) < *count;
                if incomplete {
                    warnings.push(format!(
                        "pool {d}/{p} generation {g}: {have} of {count} slices present (incomplete)"
                    ));
                }
                Pool { incomplete }
            })
            .collect();
        let mut devices = Vec::new();
        // Device names per pool, to refuse duplicates without cloning names.
        let mut seen: HashMap<usize, std::collections::HashSet<&str>> = HashMap::new();
        // Pools in (driver, pool) order, devices in slice order: the scheduler's preference.
        let mut ordered: Vec<(usize, &ResourceSlice, Option<&serde_json::Value>)> = Vec::new();
        for (i, (s, raw)) in slices.iter().enumerate() {
            let key = (s.spec.driver.as_str(), s.spec.pool.name.as_str());
            if newest
                .get(&key)
                .is_some_and(|n| n.0 != s.spec.pool.generation)
            {
                warnings.push(format!(
                    "ResourceSlice {}: pool {}/{} generation {} is outdated, ignored",
                    slice_label(s, i),
                    key.0,
                    key.1,
                    s.spec.pool.generation
                ));
                continue;
            }
            ordered.push((i, s, *raw));
        }
        ordered.sort_by_key(|(i, s, _)| (s.spec.driver.clone(), s.spec.pool.name.clone(), *i));
        for (i, s, raw) in ordered {
            let label = slice_label(s, i);
            let bad = |reason: String| AllocError::InvalidSlice {
                slice: label.clone(),
                reason,
            };
            if s.spec.driver.is_empty() {
                return Err(bad("spec.driver is empty".into()));
            }
            let pool_index = pool_keys
                .iter()
                .position(|k| *k == (s.spec.driver.as_str(), s.spec.pool.name.as_str()))
                .unwrap_or(0);
            for (j, d) in s.spec.devices.iter().flatten().enumerate() {
                if d.name.is_empty() {
                    return Err(bad(format!("device #{j} has no name")));
                }
                let raw_attrs = raw.and_then(|r| r["spec"]["devices"].get(j)?.get("attributes"));
                let mut attrs = Vec::new();
                for (name, a) in d.attributes.iter().flatten() {
                    let v = convert_attr(a, raw_attrs.and_then(|r| r.get(name)))
                        .map_err(|e| bad(format!("device {}: attribute {name}: {e}", d.name)))?;
                    attrs.push((name.as_str(), v));
                }
                let mut caps = Vec::new();
                for (name, c) in d.capacity.iter().flatten() {
                    let q = Quantity::parse(&c.value.0)
                        .map_err(|e| bad(format!("device {}: capacity {name}: {e}", d.name)))?;
                    caps.push((name.as_str(), q));
                }
                let attributes = DeviceAttributes::new(&s.spec.driver, attrs, caps)
                    .map_err(|e| bad(format!("device {}: {e}", d.name)))?;
                if d.taints.as_ref().is_some_and(|t| !t.is_empty()) {
                    warnings.push(format!(
                        "device {}/{}/{}: taints are not simulated",
                        s.spec.driver, s.spec.pool.name, d.name
                    ));
                }
                if d.consumes_counters.as_ref().is_some_and(|c| !c.is_empty()) {
                    warnings.push(format!(
                        "device {}/{}/{}: shared counters (partitionable devices) are not simulated",
                        s.spec.driver, s.spec.pool.name, d.name
                    ));
                }
                if !seen.entry(pool_index).or_default().insert(d.name.as_str()) {
                    return Err(bad(format!(
                        "device {} appears twice in pool {}/{}",
                        d.name, s.spec.driver, s.spec.pool.name
                    )));
                }
                let id = DeviceId {
                    driver: s.spec.driver.clone(),
                    pool: s.spec.pool.name.clone(),
                    device: d.name.clone(),
                };
                devices.push(Device {
                    id,
                    attributes,
                    allow_multiple_allocations: d.allow_multiple_allocations.unwrap_or(false),
                    pool_index,
                });
            }
        }
        let classes = classes
            .iter()
            .map(|c| {
                (
                    c.metadata.name.clone().unwrap_or_default(),
                    ClassEntry {
                        programs: selector_programs(&c.spec.selectors),
                        mask: OnceLock::new(),
                    },
                )
            })
            .collect();
        Ok(Allocator {
            devices,
            pools,
            index: OnceLock::new(),
            classes,
            warnings,
        })
    }

    /// Which devices a class's selectors match (a runtime error is no match); a class that is
    /// missing or does not compile matches nothing (compiling the claim already refused it).
    fn class_mask(&self, class: &str) -> Cow<'_, [bool]> {
        let Some(entry) = self.classes.get(class) else {
            return Cow::Owned(vec![false; self.devices.len()]);
        };
        let Ok(programs) = &entry.programs else {
            return Cow::Owned(vec![false; self.devices.len()]);
        };
        let compute = || -> Vec<bool> {
            self.devices
                .iter()
                .map(|d| {
                    let v = d.view();
                    programs.iter().all(|p| p.matches(&v).unwrap_or(false))
                })
                .collect()
        };
        Cow::Borrowed(entry.mask.get_or_init(compute).as_slice())
    }

    /// All devices, pools in (driver, pool) order.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// A device by identity.
    pub fn device(&self, id: &DeviceId) -> Option<&Device> {
        self.index().get(id).map(|i| &self.devices[*i])
    }

    fn index(&self) -> &HashMap<DeviceId, usize> {
        self.index.get_or_init(|| {
            self.devices
                .iter()
                .enumerate()
                .map(|(i, d)| (d.id.clone(), i))
                .collect()
        })
    }

    /// What was ignored or is not simulated (outdated slices, incomplete pools, taints, …).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Validates a claim and compiles its selectors (and its classes') once.
    pub fn compile(&self, claim: &ResourceClaimSpec) -> Result<CompiledClaim, AllocError> {
        CompiledClaim::new(self, claim)
    }

    /// Finds the devices for a compiled claim, never using those in `allocated`.
    pub fn allocate(
        &self,
        claim: &CompiledClaim,
        allocated: &[DeviceId],
    ) -> Result<Allocation, AllocError> {
        Search::run(self, claim, allocated)
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Exact(usize),
    All,
}

#[derive(Debug, Clone)]
struct Alt {
    /// `req` or `req/sub`.
    label: String,
    class: String,
    programs: Vec<Program>,
    mode: Mode,
}

#[derive(Debug, Clone)]
struct Req {
    name: String,
    alts: Vec<Alt>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConstraintKind {
    Match,
    Distinct,
}

#[derive(Debug, Clone)]
struct Constraint {
    kind: ConstraintKind,
    attribute: AttrKey,
    /// Which (request, alternative) it covers; `None` = every request.
    scope: Option<Vec<(usize, Option<usize>)>>,
    label: String,
}

impl Constraint {
    fn applies(&self, req: usize, alt: usize, has_subs: bool) -> bool {
        match &self.scope {
            None => true,
            Some(s) => s
                .iter()
                .any(|(r, a)| *r == req && (a.is_none() || (has_subs && *a == Some(alt)))),
        }
    }
}

/// A validated claim with its CEL compiled, reusable across allocations.
#[derive(Debug, Clone)]
pub struct CompiledClaim {
    requests: Vec<Req>,
    constraints: Vec<Constraint>,
    subrequests: Vec<bool>,
}

struct AltSpec<'a> {
    label: String,
    class: &'a str,
    selectors: &'a Option<Vec<DeviceSelector>>,
    mode: Option<&'a str>,
    count: Option<i64>,
    admin: Option<bool>,
    capacity: bool,
    tolerations: bool,
}

impl CompiledClaim {
    fn new(a: &Allocator, claim: &ResourceClaimSpec) -> Result<Self, AllocError> {
        let invalid = |m: String| AllocError::InvalidClaim(m);
        let Some(devices) = &claim.devices else {
            return Ok(CompiledClaim {
                requests: Vec::new(),
                constraints: Vec::new(),
                subrequests: Vec::new(),
            });
        };
        let reqs = devices.requests.as_deref().unwrap_or(&[]);
        if reqs.len() > MAX_REQUESTS {
            return Err(invalid(format!(
                "{} requests, at most {MAX_REQUESTS} are allowed",
                reqs.len()
            )));
        }
        let mut requests = Vec::new();
        let mut subrequests = Vec::new();
        for (i, r) in reqs.iter().enumerate() {
            if r.name.is_empty() {
                return Err(invalid(format!("request #{i} has no name")));
            }
            if reqs[..i].iter().any(|o| o.name == r.name) {
                return Err(invalid(format!("request name {:?} is used twice", r.name)));
            }
            let specs: Vec<AltSpec> = match (&r.exactly, &r.first_available) {
                (Some(e), None) => vec![AltSpec {
                    label: r.name.clone(),
                    class: &e.device_class_name,
                    selectors: &e.selectors,
                    mode: e.allocation_mode.as_deref(),
                    count: e.count,
                    admin: e.admin_access,
                    capacity: e.capacity.is_some(),
                    tolerations: e.tolerations.as_ref().is_some_and(|t| !t.is_empty()),
                }],
                (None, Some(subs)) if !subs.is_empty() => {
                    let mut v = Vec::new();
                    for (j, s) in subs.iter().enumerate() {
                        if s.name.is_empty() || subs[..j].iter().any(|o| o.name == s.name) {
                            return Err(invalid(format!(
                                "request {}: sub-request #{j} has an empty or repeated name",
                                r.name
                            )));
                        }
                        v.push(AltSpec {
                            label: format!("{}/{}", r.name, s.name),
                            class: &s.device_class_name,
                            selectors: &s.selectors,
                            mode: s.allocation_mode.as_deref(),
                            count: s.count,
                            admin: None,
                            capacity: s.capacity.is_some(),
                            tolerations: s.tolerations.as_ref().is_some_and(|t| !t.is_empty()),
                        });
                    }
                    v
                }
                (None, Some(_)) => {
                    return Err(invalid(format!(
                        "request {}: firstAvailable is empty",
                        r.name
                    )));
                }
                (Some(_), Some(_)) => {
                    return Err(invalid(format!(
                        "request {}: exactly and firstAvailable are both set",
                        r.name
                    )));
                }
                (None, None) => {
                    return Err(invalid(format!(
                        "request {}: one of exactly or firstAvailable is required",
                        r.name
                    )));
                }
            };
            subrequests.push(r.first_available.is_some());
            let mut alts = Vec::new();
            for s in specs {
                alts.push(compile_alt(a, s)?);
            }
            requests.push(Req {
                name: r.name.clone(),
                alts,
            });
        }
        let mut constraints = Vec::new();
        for (i, c) in devices.constraints.iter().flatten().enumerate() {
            let (kind, attribute) = match (&c.match_attribute, &c.distinct_attribute) {
                (Some(m), None) => (ConstraintKind::Match, m.clone()),
                (None, Some(d)) => (ConstraintKind::Distinct, d.clone()),
                _ => {
                    return Err(invalid(format!(
                        "constraint #{i}: exactly one of matchAttribute or distinctAttribute is required"
                    )));
                }
            };
            if !attribute.contains('/') {
                return Err(invalid(format!(
                    "constraint #{i}: attribute {attribute:?} must be fully qualified (domain/name)"
                )));
            }
            let names = c.requests.as_deref().unwrap_or(&[]);
            let scope = if names.is_empty() {
                None
            } else {
                let mut s = Vec::new();
                for n in names {
                    let (rn, sub) = match n.split_once('/') {
                        Some((r, s)) => (r, Some(s)),
                        None => (n.as_str(), None),
                    };
                    let ri = requests.iter().position(|r| r.name == rn).ok_or_else(|| {
                        invalid(format!("constraint #{i}: unknown request {n:?}"))
                    })?;
                    let ai = match sub {
                        None => None,
                        Some(sub) => Some(
                            requests[ri]
                                .alts
                                .iter()
                                .position(|a| a.label == *n)
                                .filter(|_| subrequests[ri])
                                .ok_or_else(|| {
                                    invalid(format!(
                                        "constraint #{i}: request {rn} has no sub-request {sub:?}"
                                    ))
                                })?,
                        ),
                    };
                    s.push((ri, ai));
                }
                Some(s)
            };
            let what = match kind {
                ConstraintKind::Match => "matchAttribute",
                ConstraintKind::Distinct => "distinctAttribute",
            };
            let label = if names.is_empty() {
                format!("constraint #{i} ({what} {attribute}, all requests)")
            } else {
                format!(
                    "constraint #{i} ({what} {attribute}, requests {})",
                    names.join(", ")
                )
            };
            constraints.push(Constraint {
                kind,
                attribute: AttrKey::qualified(&attribute, ""),
                scope,
                label,
            });
        }
        Ok(CompiledClaim {
            requests,
            constraints,
            subrequests,
        })
    }
}

fn compile_alt(a: &Allocator, s: AltSpec<'_>) -> Result<Alt, AllocError> {
    let unsupported = |f: &str| AllocError::Unsupported {
        request: s.label.clone(),
        feature: f.to_string(),
    };
    if s.admin == Some(true) {
        return Err(unsupported("adminAccess"));
    }
    if s.capacity {
        return Err(unsupported("capacity requests (consumable capacity)"));
    }
    if s.tolerations {
        return Err(unsupported("tolerations (device taints)"));
    }
    let mode = match s.mode.unwrap_or("ExactCount") {
        "ExactCount" => {
            let n = s.count.unwrap_or(1);
            if n < 1 || n as usize > MAX_ALLOCATED_DEVICES {
                return Err(AllocError::InvalidClaim(format!(
                    "request {}: count {n} must be between 1 and {MAX_ALLOCATED_DEVICES}",
                    s.label
                )));
            }
            Mode::Exact(n as usize)
        }
        "All" => {
            if s.count.is_some() {
                return Err(AllocError::InvalidClaim(format!(
                    "request {}: count must not be set with allocationMode All",
                    s.label
                )));
            }
            Mode::All
        }
        other => {
            return Err(AllocError::InvalidClaim(format!(
                "request {}: allocationMode {other:?} is neither ExactCount nor All",
                s.label
            )));
        }
    };
    if s.class.is_empty() {
        return Err(AllocError::InvalidClaim(format!(
            "request {}: deviceClassName is required",
            s.label
        )));
    }
    match a.classes.get(s.class).map(|c| &c.programs) {
        None => {
            return Err(AllocError::ClassNotFound {
                request: s.label,
                class: s.class.to_string(),
            });
        }
        Some(Err((expression, error))) => {
            return Err(AllocError::Cel {
                request: s.label,
                class: Some(s.class.to_string()),
                expression: expression.clone(),
                error: error.clone(),
            });
        }
        Some(Ok(_)) => {}
    }
    let programs =
        selector_programs(s.selectors).map_err(|(expression, error)| AllocError::Cel {
            request: s.label.clone(),
            class: None,
            expression,
            error,
        })?;
    Ok(Alt {
        label: s.label,
        class: s.class.to_string(),
        programs,
        mode,
    })
}

/// A scalar of an attribute value, for constraint comparison (lists are sets of these).
#[derive(Debug, Clone, Copy)]
enum Scalar<'a> {
    Bool(bool),
    Int(i64),
    Str(&'a str),
    Ver(&'a Semver),
}

impl PartialEq for Scalar<'_> {
    fn eq(&self, o: &Self) -> bool {
        match (self, o) {
            (Scalar::Bool(a), Scalar::Bool(b)) => a == b,
            (Scalar::Int(a), Scalar::Int(b)) => a == b,
            (Scalar::Str(a), Scalar::Str(b)) => a == b,
            (Scalar::Ver(a), Scalar::Ver(b)) => a == b,
            _ => false,
        }
    }
}

fn scalar(v: &AttributeValue) -> Option<Scalar<'_>> {
    Some(match v {
        AttributeValue::Bool(b) => Scalar::Bool(*b),
        AttributeValue::Int(i) => Scalar::Int(*i),
        AttributeValue::String(s) => Scalar::Str(s),
        AttributeValue::Version(v) => Scalar::Ver(v),
        AttributeValue::Ints(_) | AttributeValue::Strings(_) => return None,
    })
}

fn scalars(v: &AttributeValue) -> Vec<Scalar<'_>> {
    match v {
        AttributeValue::Bool(b) => vec![Scalar::Bool(*b)],
        AttributeValue::Int(i) => vec![Scalar::Int(*i)],
        AttributeValue::String(s) => vec![Scalar::Str(s)],
        AttributeValue::Version(v) => vec![Scalar::Ver(v)],
        AttributeValue::Ints(l) => l.iter().map(|i| Scalar::Int(*i)).collect(),
        AttributeValue::Strings(l) => l.iter().map(|s| Scalar::Str(s)).collect(),
    }
}

/// Per-constraint state while searching.
#[derive(Debug, Clone)]
enum CState<'a> {
    /// Match: values every device so far shares (`None` before the first device).
    Common(Option<Vec<Scalar<'a>>>),
    /// Distinct: values already taken.
    Taken(Vec<Scalar<'a>>),
}

struct Search<'a> {
    a: &'a Allocator,
    claim: &'a CompiledClaim,
    /// Candidates per request and alternative.
    cands: Vec<Vec<Vec<usize>>>,
    used: Vec<bool>,
    chosen: Vec<(usize, usize, usize)>,
    states: Vec<CState<'a>>,
    steps: u64,
    /// Furthest request reached, and constraint rejections there.
    deepest: usize,
    rejected_by: Vec<u64>,
}

impl<'a> Search<'a> {
    fn run(
        a: &'a Allocator,
        claim: &'a CompiledClaim,
        allocated: &[DeviceId],
    ) -> Result<Allocation, AllocError> {
        let mut in_use = vec![false; a.devices.len()];
        for id in allocated {
            if let Some(i) = a.index().get(id) {
                in_use[*i] = true;
            }
        }
        let mut cands = Vec::with_capacity(claim.requests.len());
        for (ri, req) in claim.requests.iter().enumerate() {
            let mut per_alt = Vec::with_capacity(req.alts.len());
            let mut reasons = Vec::new();
            for alt in &req.alts {
                let class_ok = a.class_mask(&alt.class);
                let mut matching = Vec::new();
                let mut first_err: Option<(String, String, String)> = None;
                for (i, d) in a.devices.iter().enumerate() {
                    if !class_ok[i] {
                        continue;
                    }
                    let v = d.view();
                    let mut ok = true;
                    for p in &alt.programs {
                        match p.matches(&v) {
                            Ok(true) => {}
                            Ok(false) => {
                                ok = false;
                                break;
                            }
                            Err(e) => {
                                first_err.get_or_insert_with(|| {
                                    (d.id.device.clone(), p.source().to_string(), e.to_string())
                                });
                                ok = false;
                                break;
                            }
                        }
                    }
                    if ok {
                        matching.push(i);
                    }
                }
                let free = matching.iter().filter(|i| !in_use[**i]).count();
                // The request is named by the error already; sub-requests need their own name.
                let who = if claim.subrequests[ri] {
                    format!("{}: ", alt.label)
                } else {
                    String::new()
                };
                let err_note = first_err
                    .map(|(d, x, e)| format!("; selector {x:?} failed on device {d}: {e}"))
                    .unwrap_or_default();
                let cands_alt = match alt.mode {
                    Mode::Exact(n) => {
                        if free < n {
                            reasons.push(format!(
                                "{who}needs {n} device(s) of class {} matching its selectors, {} match ({} already allocated){err_note}",
                                alt.class,
                                matching.len(),
                                matching.len() - free
                            ));
                        }
                        matching.into_iter().filter(|i| !in_use[*i]).collect()
                    }
                    Mode::All => {
                        let busy = matching.len() - free;
                        let incomplete = matching
                            .iter()
                            .any(|i| a.pools[a.devices[*i].pool_index].incomplete);
                        if matching.is_empty() {
                            reasons.push(format!(
                                "{who}allocationMode All needs at least one device of class {} matching its selectors, none match{err_note}",
                                alt.class
                            ));
                            Vec::new()
                        } else if busy > 0 {
                            reasons.push(format!(
                                "{who}allocationMode All, but {busy} of the {} matching devices are already allocated",
                                matching.len()
                            ));
                            Vec::new()
                        } else if incomplete {
                            reasons.push(format!(
                                "{who}allocationMode All, but a matching device's pool is incomplete (being updated)"
                            ));
                            Vec::new()
                        } else {
                            matching
                        }
                    }
                };
                per_alt.push(cands_alt);
            }
            if reasons.len() == req.alts.len() {
                return Err(AllocError::Unsatisfiable {
                    request: req.name.clone(),
                    reason: reasons.join("; "),
                });
            }
            cands.push(per_alt);
        }
        let states = claim
            .constraints
            .iter()
            .map(|c| match c.kind {
                ConstraintKind::Match => CState::Common(None),
                ConstraintKind::Distinct => CState::Taken(Vec::new()),
            })
            .collect();
        let mut s = Search {
            a,
            claim,
            cands,
            used: in_use,
            chosen: Vec::new(),
            states,
            steps: 0,
            deepest: 0,
            rejected_by: vec![0; claim.constraints.len()],
        };
        if s.place(0)? {
            let results = s
                .chosen
                .iter()
                .map(|(r, alt, d)| {
                    let dev = &a.devices[*d];
                    DeviceResult {
                        request: claim.requests[*r].alts[*alt].label.clone(),
                        driver: dev.id.driver.clone(),
                        pool: dev.id.pool.clone(),
                        device: dev.id.device.clone(),
                    }
                })
                .collect();
            return Ok(Allocation { results });
        }
        let req = &claim.requests[s.deepest.min(claim.requests.len().saturating_sub(1))];
        let worst = s
            .rejected_by
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .max_by_key(|(_, n)| **n)
            .map(|(i, _)| i);
        let reason = match worst {
            Some(c) => format!(
                "no matching device satisfies {} together with the requests before it",
                claim.constraints[c].label
            ),
            None if s.chosen_total_limit_hit() => format!(
                "the claim would need more than {MAX_ALLOCATED_DEVICES} devices"
            ),
            None => "not enough unused matching devices for all requests of the claim (devices are allocated at most once)".to_string(),
        };
        Err(AllocError::Unsatisfiable {
            request: req.name.clone(),
            reason,
        })
    }

    fn chosen_total_limit_hit(&self) -> bool {
        self.claim
            .requests
            .iter()
            .zip(&self.cands)
            .map(|(r, c)| {
                r.alts
                    .iter()
                    .zip(c)
                    .map(|(a, c)| match a.mode {
                        Mode::Exact(n) => n,
                        Mode::All => c.len(),
                    })
                    .min()
                    .unwrap_or(0)
            })
            .sum::<usize>()
            > MAX_ALLOCATED_DEVICES
    }

    fn place(&mut self, r: usize) -> Result<bool, AllocError> {
        if r == self.claim.requests.len() {
            return Ok(true);
        }
        self.deepest = self.deepest.max(r);
        for alt in 0..self.claim.requests[r].alts.len() {
            let ok = match self.claim.requests[r].alts[alt].mode {
                Mode::Exact(n) => self.pick(r, alt, 0, n)?,
                Mode::All => self.take_all(r, alt)?,
            };
            if ok {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn tick(&mut self) -> Result<(), AllocError> {
        self.steps += 1;
        if self.steps > MAX_SEARCH_STEPS {
            return Err(AllocError::SearchLimit(MAX_SEARCH_STEPS));
        }
        Ok(())
    }

    /// Chooses `left` more devices for (r, alt) from candidate position `from` on.
    fn pick(&mut self, r: usize, alt: usize, from: usize, left: usize) -> Result<bool, AllocError> {
        if left == 0 {
            return self.place(r + 1);
        }
        if self.chosen.len() >= MAX_ALLOCATED_DEVICES {
            return Ok(false);
        }
        let n = self.cands[r][alt].len();
        let mut k = from;
        while k + left <= n {
            let d = self.cands[r][alt][k];
            k += 1;
            if self.used[d] {
                continue;
            }
            self.tick()?;
            let Some(saved) = self.add(r, alt, d) else {
                continue;
            };
            if self.pick(r, alt, k, left - 1)? {
                return Ok(true);
            }
            self.remove(saved);
        }
        Ok(false)
    }

    fn take_all(&mut self, r: usize, alt: usize) -> Result<bool, AllocError> {
        let all = self.cands[r][alt].clone();
        if all.is_empty() || self.chosen.len() + all.len() > MAX_ALLOCATED_DEVICES {
            return Ok(false);
        }
        let mut saved = Vec::new();
        let mut ok = true;
        for d in all {
            self.tick()?;
            if self.used[d] {
                ok = false;
                break;
            }
            match self.add(r, alt, d) {
                Some(s) => saved.push(s),
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok && self.place(r + 1)? {
            return Ok(true);
        }
        while let Some(s) = saved.pop() {
            self.remove(s);
        }
        Ok(false)
    }

    /// Adds a device if every constraint allows it; returns what undoes it.
    fn add(&mut self, r: usize, alt: usize, d: usize) -> Option<Saved<'a>> {
        let has_subs = self.claim.subrequests[r];
        let dev: &'a Device = &self.a.devices[d];
        let mut changes = Vec::new();
        for (ci, c) in self.claim.constraints.iter().enumerate() {
            if !c.applies(r, alt, has_subs) {
                continue;
            }
            let Some(v) = dev.attributes.get_key(&c.attribute) else {
                self.rejected_by[ci] += 1;
                return None;
            };
            let next = match &self.states[ci] {
                CState::Common(None) => CState::Common(Some(scalars(v))),
                CState::Common(Some(common)) => {
                    // Fast path without allocation: a scalar already equal to the common value
                    // leaves the state as it is.
                    if let (Some(x), [only]) = (scalar(v), common.as_slice()) {
                        if x == *only {
                            continue;
                        }
                        self.rejected_by[ci] += 1;
                        return None;
                    }
                    let vals = scalars(v);
                    let inter: Vec<Scalar> = common
                        .iter()
                        .filter(|x| vals.contains(x))
                        .copied()
                        .collect();
                    if inter.is_empty() {
                        self.rejected_by[ci] += 1;
                        return None;
                    }
                    CState::Common(Some(inter))
                }
                CState::Taken(taken) => {
                    let vals = scalars(v);
                    if vals.iter().any(|x| taken.contains(x)) {
                        self.rejected_by[ci] += 1;
                        return None;
                    }
                    let mut t = taken.clone();
                    t.extend(vals);
                    CState::Taken(t)
                }
            };
            changes.push((ci, next));
        }
        let mut old = Vec::with_capacity(changes.len());
        for (ci, next) in changes {
            old.push((ci, std::mem::replace(&mut self.states[ci], next)));
        }
        self.used[d] = true;
        self.chosen.push((r, alt, d));
        Some(Saved { device: d, old })
    }

    fn remove(&mut self, s: Saved<'a>) {
        self.used[s.device] = false;
        self.chosen.pop();
        for (ci, st) in s.old {
            self.states[ci] = st;
        }
    }
}

struct Saved<'a> {
    device: usize,
    old: Vec<(usize, CState<'a>)>,
}
