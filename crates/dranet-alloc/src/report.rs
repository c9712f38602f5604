//! The allocation report: which devices a claim gets on each node, and how its GPUs and NICs
//! relate — what `dranet check` prints, for any embedder.
//!
//! [`check`] runs the allocation the scheduler would ([`crate::Allocator`]) over ResourceSlices of
//! any drivers, one node at a time (the scheduler allocates a claim from one node's devices, so
//! devices of different nodes are never paired). For every GPU × NIC pair of an allocation it
//! gives the topology relation: exact (PIX/PXB/PHB/NODE/SYS) when the node's PCI tree is known
//! ([`Host`]), else bounded by the standard attributes (same `resource.kubernetes.io/pcieRoot` ⇒
//! PHB or closer, same NUMA node ⇒ NODE, else SYS). A GPU with no NIC of the claim on its NUMA
//! node makes the placement [`Verdict::FitsUnaligned`], with one warning per NUMA node of such
//! GPUs, and the GPUs' model ([`ClaimReport::gpu_model`]) for a reader that knows what it costs.
//!
//! [`summarize`] gives one line per claim over its nodes, and [`per_claim`] each claim's best
//! verdict (what `dranet check` makes its exit code of).
//!
//! ```
//! use dranet_alloc::report::{self, Claim, Input, Verdict};
//! use serde_json::json;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Two nodes' slices, as `kubectl get resourceslices -o json` lists them.
//! let slice = |node: &str, numa: i64| json!({
//!     "metadata": {"name": format!("{node}-dra.net-0")},
//!     "spec": {
//!         "driver": "dra.net", "nodeName": node,
//!         "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
//!         "devices": [{"name": "pci-0000-0c-00-0", "attributes": {"dra.net/numaNode": {"int": numa}}}]
//!     }
//! });
//! let claim = Claim {
//!     name: "nic-numa1".into(),
//!     kind: "ResourceClaimTemplate".into(),
//!     spec: serde_json::from_value(json!({"devices": {"requests": [{"name": "nic", "exactly": {
//!         "deviceClassName": "dranet.net",
//!         "selectors": [{"cel": {"expression": "device.attributes['dra.net'].numaNode == 1"}}]
//!     }}]}}))?,
//! };
//! let slices = report::read_slices(vec![slice("a", 0), slice("b", 1)])?;
//! let input = Input { slices, ..Input::default() };
//! // No classes given: one per driver, and `dranet.net` for dra.net.
//! let r = report::check(input, &[claim])?;
//! let per_node: Vec<_> = r.claims.iter().map(|c| (c.node.as_deref(), c.verdict)).collect();
//! assert_eq!(per_node, [(Some("a"), Verdict::DoesNotFit), (Some("b"), Verdict::Fits)]);
//! assert_eq!(
//!     report::summarize(&r),
//!     ["ResourceClaimTemplate nic-numa1: fits on b; does not fit on 1 other node(s)"]
//! );
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimSpec, ResourceSlice};
use serde::Serialize;

use crate::{AllocError, Allocator, Device, DeviceId};
use dranet_core::{AttributeValue, DRIVER_NAME, Inventory, PciDevice, Relation};

mod nodes;
mod pods;
mod reason;
mod summary;

pub use nodes::node_order;
pub use pods::{PodCount, Pods, PodsError};
pub use summary::{
    ClaimSummary, ClaimVerdict, ReasonGroup, VerdictCount, per_claim, summaries, summarize,
};

/// The standard NUMA node attribute.
const STD_NUMA: &str = "resource.kubernetes.io/numaNode";
/// The standard PCIe root attribute.
const STD_ROOT: &str = "resource.kubernetes.io/pcieRoot";
/// The standard PCI bus id attribute.
const STD_BUS: &str = "resource.kubernetes.io/pciBusID";

/// The outcome of a claim on one node. Ordered best first, so the best of several nodes is the
/// minimum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Allocated, every GPU with a NIC of the claim on its NUMA node (or no GPU).
    Fits,
    /// Allocated, but some GPU has no NIC of the claim on its NUMA node.
    FitsUnaligned,
    /// The node does not have the devices (the scheduler tries another node).
    DoesNotFit,
    /// The claim is wrong whatever the node (a CEL error, an unknown class): the scheduler fails
    /// the pod.
    Invalid,
}

impl Verdict {
    /// As the report prints it: `fits`, `fits unaligned`, `does not fit`, `invalid`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Fits => "fits",
            Verdict::FitsUnaligned => "fits unaligned",
            Verdict::DoesNotFit => "does not fit",
            Verdict::Invalid => "invalid",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One allocated device with the attributes that matter for placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceRow {
    /// Request (or `request/sub-request`).
    pub request: String,
    /// Driver.
    pub driver: String,
    /// Pool.
    pub pool: String,
    /// Device name.
    pub device: String,
    /// A short label: the RDMA device or interface for NICs, the PCI bus id for others.
    pub label: Option<String>,
    /// NUMA node, from `resource.kubernetes.io/numaNode` or the driver's `numaNode`.
    pub numa_node: Option<i64>,
    /// `resource.kubernetes.io/pcieRoot`.
    pub pcie_root: Option<String>,
    /// Whether it is a NIC (driver `dra.net`) rather than a GPU or other accelerator.
    pub nic: bool,
    /// Which of the pods it was allocated for (1-based), when more than one is checked
    /// ([`Input::pods`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<u32>,
}

impl DeviceRow {
    /// The row of an allocator's device allocated for `request`.
    pub fn new(d: &Device, request: &str) -> DeviceRow {
        let nic = d.driver() == DRIVER_NAME;
        let own = |n: &str| format!("{}/{n}", d.driver());
        DeviceRow {
            request: request.to_string(),
            driver: d.driver().to_string(),
            pool: d.pool().to_string(),
            device: d.name().to_string(),
            label: if nic {
                str_attr(d, &[&own("rdmaDevice"), &own("ifName"), &own("pciAddress")])
            } else {
                str_attr(d, &[STD_BUS, &own("pciBusID")])
            },
            numa_node: int_attr(d, &[STD_NUMA, &own("numaNode")]),
            pcie_root: str_attr(d, &[STD_ROOT]),
            nic,
            pod: None,
        }
    }

    fn id(&self) -> DeviceId {
        DeviceId {
            driver: self.driver.clone(),
            pool: self.pool.clone(),
            device: self.device.clone(),
        }
    }
}

/// Where a [`PairRow`]'s relation comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RelationSource {
    /// Exact, from the node's PCI tree ([`Host::inventory`]).
    Sysfs,
    /// Bounded by the slices' attributes (they cannot tell PCIe switches apart).
    Attributes,
}

/// How one GPU and one NIC of the claim are connected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PairRow {
    /// GPU device name.
    pub gpu: String,
    /// NIC device name.
    pub nic: String,
    /// The relation, when it can be told.
    pub relation: Option<Relation>,
    /// Same NUMA node, when both are known.
    pub same_numa: Option<bool>,
    /// Exact from the PCI tree, or bounded by attributes.
    pub source: RelationSource,
}

/// The check of one claim on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimReport {
    /// Claim or template name.
    pub name: String,
    /// `ResourceClaimTemplate` or `ResourceClaim`.
    pub kind: String,
    /// The node it was allocated for (`None`: the slices name no node).
    pub node: Option<String>,
    /// The outcome: with several pods ([`Input::pods`]), the outcome of all of them.
    pub verdict: Verdict,
    /// With several pods ([`Input::pods`]), how many of them fit; `None` for one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods: Option<PodCount>,
    /// The chosen devices (empty when it cannot be allocated); with several pods, those of
    /// every pod that fit, each row naming its pod.
    pub devices: Vec<DeviceRow>,
    /// Every GPU × NIC pair.
    pub topology: Vec<PairRow>,
    /// Placement warnings: one per NUMA node of GPUs with no NIC of the claim on it.
    pub warnings: Vec<String>,
    /// The model of the claim's GPUs (their `productName`) when its placement is warned about:
    /// for a reader that knows what the misplacement costs on that model.
    #[serde(skip)]
    pub gpu_model: Option<String>,
    /// Why the claim cannot be allocated.
    pub error: Option<String>,
    /// Why it does not fit, fails, or fits only unaligned, in words that name neither the
    /// node nor its pools, so that nodes of one reason are counted together
    /// ([`summaries`]): for a claim that does not fit, the DeviceClass or selector that leaves a
    /// request no device when one does, else the allocator's reason; `None` when it fits.
    pub reason: Option<String>,
}

/// Something about the inputs a reader of the report should know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// The host's own dra.net devices ([`Host::slices`]) replaced the dra.net slices of its node
    /// among [`Input::slices`]: one device, one identity.
    HostSlicesReplaced {
        /// The host's node.
        node: String,
        /// How many slices were dropped.
        slices: usize,
    },
    /// No DeviceClasses were given ([`Input::classes`] is `None`): one per driver was made
    /// ([`default_classes`]).
    DefaultClasses {
        /// Their names.
        names: Vec<String>,
    },
    /// The host's GPUs give topology only: no slice of another driver publishes them.
    GpusForTopologyOnly {
        /// How many GPUs the host has.
        gpus: usize,
    },
    /// DeviceTaintRules ([`Input::taint_rules`]) tainted devices, as the scheduler does.
    TaintRules {
        /// How many rules were given.
        rules: usize,
        /// How many taints they added to devices.
        taints: usize,
    },
    /// What the allocator said about the slices (outdated pools, features not simulated).
    Allocator(String),
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Note::HostSlicesReplaced { node, slices } => write!(
                f,
                "node {node}: dra.net devices from the host; its {slices} dra.net slice(s) given are not used"
            ),
            Note::DefaultClasses { names } => write!(
                f,
                "no DeviceClasses: using one DeviceClass per driver ({})",
                names.join(", ")
            ),
            Note::GpusForTopologyOnly { gpus } => write!(
                f,
                "the host's {gpus} GPU(s) give topology only: GPUs are published by their own DRA driver, whose slices are needed to allocate them"
            ),
            Note::TaintRules { rules, taints } => write!(
                f,
                "{rules} DeviceTaintRule(s) add {taints} taint(s) to devices; a request must tolerate them"
            ),
            Note::Allocator(s) => f.write_str(s),
        }
    }
}

impl Serialize for Note {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// One per claim and node checked, claims in the given order, nodes by name
    /// ([`node_order`]: numbers in names compare as numbers).
    pub claims: Vec<ClaimReport>,
    /// About the inputs.
    pub notes: Vec<Note>,
    /// The Kubernetes version whose scheduler the answers are for ([`Input::version`]).
    #[serde(skip)]
    pub version: crate::KubernetesVersion,
}

/// A claim to check.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// Claim or template name.
    pub name: String,
    /// `ResourceClaimTemplate` or `ResourceClaim` (as the report names it).
    pub kind: String,
    /// The claim's spec (a template's `spec.spec`).
    pub spec: ResourceClaimSpec,
}

/// The node whose PCI tree is known (discovered from its sysfs).
#[derive(Debug, Clone)]
pub struct Host {
    /// Its node name: the pool of its dra.net slices.
    pub node: String,
    /// What discovery found: the NICs and the GPUs, for exact relations.
    pub inventory: Inventory,
    /// Its dra.net ResourceSlices (`slice::resource_slices` of its published devices).
    pub slices: Vec<serde_json::Value>,
}

/// A ResourceSlice as the report reads it: the typed slice and, beside it, only what the typed
/// v1.34 structs cannot carry (each device's list-valued attributes, `ints` and `strings`).
///
/// Made from a slice's JSON of any served version ([`ReadSlice::from_json`], [`read_slices`]),
/// so a caller that reads slices one at a time (a cluster's list, page by page) never holds their
/// JSON trees: a `serde_json::Value` tree costs some 30 times its JSON text.
#[derive(Debug, Clone)]
pub struct ReadSlice {
    slice: ResourceSlice,
    lists: serde_json::Value,
}

impl ReadSlice {
    /// Reads a ResourceSlice's JSON of any version a 1.34 API server serves
    /// ([`crate::served::slice_to_v1`]). `position` names the slice in errors when it has no
    /// name. Errors: an unserved version, or a document that is no ResourceSlice.
    pub fn from_json(position: usize, mut json: serde_json::Value) -> Result<Self, AllocError> {
        if let Err(e) = crate::served::slice_to_v1(&mut json) {
            return Err(AllocError::InvalidSlice {
                slice: json["metadata"]["name"]
                    .as_str()
                    .map_or_else(|| format!("#{position}"), str::to_string),
                reason: e.to_string(),
            });
        }
        let slice = crate::build::parse_slice(position, &json)?;
        Ok(Self::new(slice, &json))
    }

    /// The slice `slice` parsed from `json` (v1 shape), e.g. by a caller that decoded it
    /// itself to report errors at their fields: keeps the list-valued attributes of `json`.
    pub fn new(slice: ResourceSlice, json: &serde_json::Value) -> Self {
        Self {
            slice,
            lists: crate::source::list_attributes(json),
        }
    }

    /// The typed slice (without its list-valued attributes).
    pub fn slice(&self) -> &ResourceSlice {
        &self.slice
    }

    /// Its devices: what a caller counts against a limit.
    pub fn device_count(&self) -> usize {
        self.slice.spec.devices.as_ref().map_or(0, Vec::len)
    }

    /// Adds to each of its devices the taint of every rule that matches it, as the scheduler
    /// does with DeviceTaintRules before it allocates (when its `DRADeviceTaintRules` gate is
    /// on: 1.37's default). Returns how many taints it added.
    pub fn apply_taint_rules(&mut self, rules: &[crate::DeviceTaintRule]) -> usize {
        let spec = &mut self.slice.spec;
        let mut added = 0;
        for d in spec.devices.iter_mut().flatten() {
            for r in rules {
                if r.matches(&spec.driver, &spec.pool.name, &d.name) {
                    d.taints.get_or_insert_with(Vec::new).push(r.taint.clone());
                    added += 1;
                }
            }
        }
        added
    }
}

/// ResourceSlices' JSON of any served version, as the report reads them
/// ([`ReadSlice::from_json`]); errors name the slice (its name, else its position).
pub fn read_slices(
    slices: impl IntoIterator<Item = serde_json::Value>,
) -> Result<Vec<ReadSlice>, AllocError> {
    slices
        .into_iter()
        .enumerate()
        .map(|(i, v)| ReadSlice::from_json(i, v))
        .collect()
}

/// What to check claims against.
#[derive(Debug, Clone, Default)]
pub struct Input {
    /// ResourceSlices of any drivers and nodes ([`read_slices`]: list-valued attributes are
    /// kept, which the typed slices drop).
    pub slices: Vec<ReadSlice>,
    /// The DeviceClasses (a cluster's); `None`: one per driver ([`default_classes`]), for
    /// slices read without their classes.
    pub classes: Option<Vec<DeviceClass>>,
    /// The node whose PCI tree is known, if any.
    pub host: Option<Host>,
    /// Check on this node only; `None`: on every node of [`Input::nodes`], each on its own.
    pub node: Option<String>,
    /// The Kubernetes version whose scheduler answers (its default feature gates, its
    /// allocator, its CEL environment); the default is the newest supported.
    pub version: crate::KubernetesVersion,
    /// How many pods, each with its own claim from the claim (template), are allocated one
    /// after another on each node, each seeing what the earlier ones hold: a claim fits only
    /// when all of them do.
    pub pods: Pods,
    /// DeviceTaintRules (a cluster's, where it serves them): their taints are added to the
    /// devices they select before anything is allocated, as the scheduler does when its
    /// `DRADeviceTaintRules` gate is on (1.37's default; a 1.36 API server serves the rules
    /// only with that gate).
    pub taint_rules: Vec<crate::DeviceTaintRule>,
}

impl Input {
    /// The nodes the slices name (`spec.nodeName`), and the host's.
    pub fn nodes(&self) -> BTreeSet<String> {
        let mut nodes = slice_nodes(&self.slices);
        nodes.extend(self.host.as_ref().map(|h| h.node.clone()));
        nodes
    }
}

/// The nodes ResourceSlices name in `spec.nodeName`.
pub fn slice_nodes(slices: &[ReadSlice]) -> BTreeSet<String> {
    slices
        .iter()
        .filter_map(|s| s.slice.spec.node_name.clone())
        .collect()
}

/// One DeviceClass per driver, named after it and selecting it; for `dra.net` also
/// `dranet.net`, the class name the examples use.
pub fn default_classes(drivers: &BTreeSet<String>) -> Vec<DeviceClass> {
    let mut names: Vec<(String, String)> = drivers.iter().map(|d| (d.clone(), d.clone())).collect();
    if drivers.contains(DRIVER_NAME) {
        names.push(("dranet.net".into(), DRIVER_NAME.into()));
    }
    names
        .into_iter()
        .filter_map(|(name, driver)| {
            let expr = format!("device.driver == {}", serde_json::Value::String(driver));
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expr}}]}
            }))
            .ok()
        })
        .collect()
}

fn int_attr(d: &Device, names: &[&str]) -> Option<i64> {
    names.iter().find_map(|n| match d.attribute(n)? {
        AttributeValue::Int(i) => Some(*i),
        AttributeValue::Ints(v) => v.first().copied(),
        _ => None,
    })
}

fn str_attr(d: &Device, names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| match d.attribute(n)? {
        AttributeValue::String(s) => Some(s.clone()),
        _ => None,
    })
}

/// The relation of a GPU and a NIC told from their attributes: an upper bound, since attributes
/// cannot tell PCIe switches apart. Same `pcieRoot` ⇒ PHB, same NUMA node ⇒ NODE, different
/// NUMA nodes ⇒ SYS; `None` when neither is known.
pub fn relation_from_attributes(gpu: &DeviceRow, nic: &DeviceRow) -> Option<Relation> {
    relation_from_placement(
        (gpu.pcie_root.as_deref(), gpu.numa_node),
        (nic.pcie_root.as_deref(), nic.numa_node),
    )
}

/// [`relation_from_attributes`] of two devices given as (`pcieRoot`, NUMA node).
pub fn relation_from_placement(
    a: (Option<&str>, Option<i64>),
    b: (Option<&str>, Option<i64>),
) -> Option<Relation> {
    if a.0.is_some() && a.0 == b.0 {
        return Some(Relation::Phb);
    }
    match (a.1, b.1) {
        (Some(x), Some(y)) if x == y => Some(Relation::Node),
        (Some(_), Some(_)) => Some(Relation::Sys),
        _ => None,
    }
}

/// The PCI function of a row in the host's tree: NICs by DRA device name, GPUs by their
/// `pciBusID` attribute.
fn host_pci<'a>(inv: &'a Inventory, r: &DeviceRow, a: &Allocator) -> Option<&'a PciDevice> {
    if r.nic {
        return inv.device(&r.device)?.pci.as_ref();
    }
    let bus = str_attr(a.device(&r.id())?, &[STD_BUS])?;
    inv.gpus.iter().find(|g| g.address.to_string() == bus)
}

/// The model of the first GPU of an allocation's rows that names one (its `productName`).
pub fn gpu_model(rows: &[DeviceRow], a: &Allocator) -> Option<String> {
    rows.iter().filter(|r| !r.nic).find_map(|g| {
        str_attr(
            a.device(&g.id())?,
            &["productName", "gpu.amd.com/productName"],
        )
    })
}

/// Every GPU × NIC pair of an allocation's rows with its relation (exact when `inv`, the
/// node's PCI tree, is given), and the warnings: one per NUMA node whose GPUs have no NIC of
/// the claim on it while some NIC is elsewhere.
pub fn topology(
    rows: &[DeviceRow],
    a: &Allocator,
    inv: Option<&Inventory>,
) -> (Vec<PairRow>, Vec<String>) {
    let gpus: Vec<&DeviceRow> = rows.iter().filter(|r| !r.nic).collect();
    let nics: Vec<&DeviceRow> = rows.iter().filter(|r| r.nic).collect();
    let mut pairs = Vec::new();
    for g in &gpus {
        for n in &nics {
            let exact = inv.and_then(|inv| {
                Some(dranet_core::topology::relation(
                    host_pci(inv, g, a)?,
                    host_pci(inv, n, a)?,
                ))
            });
            let same_numa = match (g.numa_node, n.numa_node) {
                (Some(x), Some(y)) => Some(x == y),
                _ => None,
            };
            pairs.push(PairRow {
                gpu: g.device.clone(),
                nic: n.device.clone(),
                relation: exact.or_else(|| relation_from_attributes(g, n)),
                same_numa,
                source: if exact.is_some() {
                    RelationSource::Sysfs
                } else {
                    RelationSource::Attributes
                },
            });
        }
    }
    let mut warnings = Vec::new();
    if nics.is_empty() {
        return (pairs, warnings);
    }
    // One line per NUMA node of stranded GPUs, not one per GPU: four GPUs on the wrong side are
    // one mistake.
    let mut stranded: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    for g in &gpus {
        let Some(gn) = g.numa_node else { continue };
        let local = nics.iter().any(|n| n.numa_node == Some(gn));
        let far = nics.iter().any(|n| n.numa_node.is_some_and(|nn| nn != gn));
        if !local && far {
            stranded.entry(gn).or_default().push(&g.device);
        }
    }
    for (gn, gs) in stranded {
        let far: Vec<String> = nics
            .iter()
            .filter_map(|n| Some((n, n.numa_node?)))
            .filter(|(_, nn)| *nn != gn)
            .map(|(n, nn)| format!("{} (NUMA {nn})", n.label.as_deref().unwrap_or(&n.device)))
            .collect();
        let who = if gs.len() == 1 {
            format!("GPU {} is", gs[0])
        } else {
            format!("GPUs {} are", gs.join(", "))
        };
        warnings.push(format!(
            "{who} on NUMA node {gn} but the claim's NICs {} are on other NUMA nodes: traffic crosses the inter-socket link and GPUDirect RDMA is unlikely",
            far.join(", "),
        ));
    }
    (pairs, warnings)
}

/// Checks each claim on each node, as the scheduler allocates a claim from one node's devices.
///
/// The host's dra.net slices replace the dra.net slices of its node in [`Input::slices`] (one
/// device, one identity). Errors are about the inputs (a slice that cannot be used); a claim
/// that cannot be allocated is a [`ClaimReport`] with its [`ClaimReport::error`].
pub fn check(input: Input, claims: &[Claim]) -> Result<Report, AllocError> {
    let Input {
        mut slices,
        classes,
        host,
        node,
        version,
        pods,
        taint_rules,
    } = input;
    let mut notes = Vec::new();
    if let Some(h) = &host {
        let before = slices.len();
        slices.retain(|s| {
            !(s.slice.spec.driver == DRIVER_NAME
                && s.slice.spec.node_name.as_deref() == Some(h.node.as_str()))
        });
        if slices.len() < before {
            notes.push(Note::HostSlicesReplaced {
                node: h.node.clone(),
                slices: before - slices.len(),
            });
        }
        slices.extend(read_slices(h.slices.iter().cloned())?);
    }
    if !taint_rules.is_empty() {
        let taints = slices
            .iter_mut()
            .map(|s| s.apply_taint_rules(&taint_rules))
            .sum();
        notes.push(Note::TaintRules {
            rules: taint_rules.len(),
            taints,
        });
    }
    let classes = match classes {
        Some(c) => c,
        None => {
            let drivers: BTreeSet<String> =
                slices.iter().map(|s| s.slice.spec.driver.clone()).collect();
            let classes = default_classes(&drivers);
            notes.push(Note::DefaultClasses {
                names: classes
                    .iter()
                    .filter_map(|c| c.metadata.name.clone())
                    .collect(),
            });
            classes
        }
    };
    if let Some(h) = &host
        && !h.inventory.gpus.is_empty()
        && !slices.iter().any(|s| s.slice.spec.driver != DRIVER_NAME)
    {
        notes.push(Note::GpusForTopologyOnly {
            gpus: h.inventory.gpus.len(),
        });
    }
    // Each node's allocator built from the slices that may be on it: building every node's
    // from all of them made a cluster's check quadratic.
    let (typed, slices): (Vec<ResourceSlice>, Vec<serde_json::Value>) =
        slices.into_iter().map(|s| (s.slice, s.lists)).unzip();
    let by_node = nodes::ByNode::new(&typed);
    let nodes: Vec<Option<String>> = match node {
        Some(n) => vec![Some(n)],
        None => {
            let mut all: Vec<&str> = by_node.nodes();
            if let Some(h) = &host
                && !all.contains(&h.node.as_str())
            {
                let at = all.partition_point(|n| node_order(n, &h.node).is_lt());
                all.insert(at, &h.node);
            }
            if all.is_empty() {
                vec![None]
            } else {
                all.into_iter().map(|n| Some(n.to_string())).collect()
            }
        }
    };
    // Every node's allocator sees the same classes and claims: compile their selectors once,
    // and each claim once (a compiled claim names the classes by position, the same in each).
    let programs = Some(std::sync::Arc::new(crate::cel::ProgramCache::for_version(
        version,
        crate::cel::ProgramCache::DEFAULT_CAPACITY,
    )));
    let mut compiled: Vec<Option<Result<crate::CompiledClaim, AllocError>>> =
        vec![None; claims.len()];
    // Node by node, each node's allocator dropped once its claims are checked; the reports are
    // put in claim order at the end.
    let mut by_node_reports: Vec<std::vec::IntoIter<ClaimReport>> = Vec::with_capacity(nodes.len());
    for node in nodes {
        let options = crate::Options {
            node: node.as_deref().map(crate::Node::new),
            programs: programs.clone(),
            ..crate::Options::for_version(version)
        };
        let gate = options.features.consumable_capacity;
        let picked = node.as_deref().map(|n| {
            if version.gathers_whole_pools() {
                by_node.pools_of(&typed, n)
            } else {
                by_node.slices_of(n)
            }
        });
        let alloc =
            crate::build::build(&typed, Some(&slices), picked.as_deref(), &classes, &options)?;
        for w in alloc.warnings() {
            let note = Note::Allocator(w.clone());
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
        // The PCI tree is the host's, for its node only.
        let inv = host
            .as_ref()
            .filter(|h| node.as_deref() == Some(h.node.as_str()))
            .map(|h| &h.inventory);
        let reports: Vec<ClaimReport> = claims
            .iter()
            .zip(compiled.iter_mut())
            .map(|(claim, compiled)| {
                let compiled = compiled.get_or_insert_with(|| alloc.compile(&claim.spec));
                let on = Placement {
                    node: node.clone(),
                    alloc: &alloc,
                    inv,
                    consumable_capacity: gate,
                };
                check_one(claim, compiled, &on, pods)
            })
            .collect();
        by_node_reports.push(reports.into_iter());
    }
    let mut reports = Vec::with_capacity(claims.len() * by_node_reports.len());
    for _ in claims {
        reports.extend(by_node_reports.iter_mut().filter_map(Iterator::next));
    }
    Ok(Report {
        claims: reports,
        notes,
        version,
    })
}

/// Where a claim is checked: one node's allocator, its PCI tree when known, and whether shares
/// of devices are counted as shares (the consumable-capacity gate).
struct Placement<'a> {
    node: Option<String>,
    alloc: &'a Allocator<'a>,
    inv: Option<&'a Inventory>,
    consumable_capacity: bool,
}

/// One claim, compiled with the first node's allocator, on one node's allocator, for `pods`
/// pods one after another: each pod's allocation held while the next is allocated, as the
/// scheduler counts allocated claims.
fn check_one(
    claim: &Claim,
    compiled: &Result<crate::CompiledClaim, AllocError>,
    on: &Placement,
    pods: Pods,
) -> ClaimReport {
    let several = pods != Pods::ONE;
    let mut report = ClaimReport {
        name: claim.name.clone(),
        kind: claim.kind.clone(),
        node: on.node.clone(),
        verdict: Verdict::Fits,
        pods: several.then_some(PodCount {
            asked: pods.get(),
            fit: 0,
        }),
        devices: Vec::new(),
        topology: Vec::new(),
        warnings: Vec::new(),
        gpu_model: None,
        error: None,
        reason: None,
    };
    let compiled = match compiled {
        Ok(c) => c,
        // Wrong whatever the pod: said once, as for one pod.
        Err(e) => {
            fail(&mut report, claim, on.alloc, e, None);
            return report;
        }
    };
    let mut in_use = crate::InUse::default();
    for pod in 1..=pods.get() {
        let outcome = if several {
            on.alloc
                .allocate_pod(&[compiled], &in_use)
                .map(|mut a| a.pop().unwrap_or_default())
        } else {
            on.alloc.allocate(compiled, &[])
        };
        let a = match outcome {
            Ok(a) => a,
            Err(e) => {
                let which = several.then(|| format!("pod {pod} of {}", pods.get()));
                fail(&mut report, claim, on.alloc, &e, which);
                return report;
            }
        };
        let rows: Vec<DeviceRow> = a
            .results
            .iter()
            .filter_map(|r| {
                let id = DeviceId {
                    driver: r.driver.clone(),
                    pool: r.pool.clone(),
                    device: r.device.clone(),
                };
                let mut row = DeviceRow::new(on.alloc.device(&id)?, &r.request);
                row.pod = several.then_some(pod);
                Some(row)
            })
            .collect();
        // A pod's GPUs pair with its own NICs only.
        let (pairs, warnings) = topology(&rows, on.alloc, on.inv);
        if !warnings.is_empty() && report.gpu_model.is_none() {
            report.gpu_model = gpu_model(&rows, on.alloc);
        }
        report.devices.extend(rows);
        report.topology.extend(pairs);
        for w in warnings {
            if !report.warnings.contains(&w) {
                report.warnings.push(w);
            }
        }
        if let Some(c) = &mut report.pods {
            c.fit = pod;
        }
        in_use.record(&a, on.consumable_capacity);
    }
    if !report.warnings.is_empty() {
        report.verdict = Verdict::FitsUnaligned;
        report.reason = Some(report.warnings.join("; "));
    }
    report
}

/// `report` made the failure `e`, of the pod `which` when several are checked.
fn fail(
    report: &mut ClaimReport,
    claim: &Claim,
    alloc: &Allocator,
    e: &AllocError,
    which: Option<String>,
) {
    report.verdict = if e.is_unsatisfiable() {
        Verdict::DoesNotFit
    } else {
        Verdict::Invalid
    };
    let reason = reason::of_error(&claim.spec, alloc, e);
    match which {
        Some(w) => {
            report.reason = Some(format!("{w}: {reason}"));
            report.error = Some(format!("{w}: {e}"));
        }
        None => {
            report.reason = Some(reason);
            report.error = Some(e.to_string());
        }
    }
}
