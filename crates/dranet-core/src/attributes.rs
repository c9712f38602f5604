//! The DRA attributes dranet publishes for a device, and the DRA API limits they must respect.
//!
//! dranet's own attributes live in the driver's domain `dra.net` and are published unqualified
//! (`rdmaDevice`, not `dra.net/rdmaDevice`): the API treats an unqualified name as being in the
//! driver's domain, so CEL `device.attributes["dra.net"].rdmaDevice` and
//! `matchAttribute: dra.net/numaNode` both work, and an API server that one day rejects the
//! driver-domain prefix does not break us. Standard attributes are fully qualified
//! (`resource.kubernetes.io/pcieRoot`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Semver;
use crate::{NetworkDevice, NumaTopology, SriovRole};

/// The driver name, and the domain of its unqualified attributes.
pub const DRIVER_NAME: &str = "dra.net";
/// Most attributes plus capacities a device may carry.
pub const MAX_ATTRIBUTES_PER_DEVICE: usize = 32;
/// Longest string or version value.
pub const MAX_VALUE_LEN: usize = 64;
/// Longest attribute name (the part after the domain): a C identifier.
pub const MAX_ID_LEN: usize = 32;
/// Longest attribute domain: a DNS subdomain.
pub const MAX_DOMAIN_LEN: usize = 63;

/// Names of the attributes dranet publishes.
pub mod names {
    /// PCI address `dddd:bb:dd.f`.
    pub const PCI_ADDRESS: &str = "pciAddress";
    /// Vendor name from the PCI ID database.
    pub const PCI_VENDOR: &str = "pciVendor";
    /// Device name from the PCI ID database.
    pub const PCI_DEVICE: &str = "pciDevice";
    /// Subsystem device id (4 hex digits).
    pub const PCI_SUBSYSTEM: &str = "pciSubsystem";
    /// NUMA node (int).
    pub const NUMA_NODE: &str = "numaNode";
    /// Interface name.
    pub const IF_NAME: &str = "ifName";
    /// Hardware address.
    pub const MAC: &str = "mac";
    /// MTU (int).
    pub const MTU: &str = "mtu";
    /// Link encapsulation (`ether`, `infiniband`).
    pub const ENCAPSULATION: &str = "encapsulation";
    /// Interface alias.
    pub const ALIAS: &str = "alias";
    /// Operational state.
    pub const STATE: &str = "state";
    /// Link kind (`device`, `veth`, …).
    pub const TYPE: &str = "type";
    /// IPv4 CIDRs, comma-joined.
    pub const IPV4: &str = "ipv4";
    /// IPv6 CIDRs, comma-joined.
    pub const IPV6: &str = "ipv6";
    /// Any eBPF program on the link's TC or TCX hooks (bool).
    pub const EBPF: &str = "ebpf";
    /// Names of the link's TC `bpf` filters, comma-joined.
    pub const TC_FILTER_NAMES: &str = "tcFilterNames";
    /// Names of the programs on the link's TCX hooks, comma-joined.
    pub const TCX_PROGRAM_NAMES: &str = "tcxProgramNames";
    /// A PF with SR-IOV capability (bool).
    pub const SRIOV: &str = "sriov";
    /// Enabled VFs of a PF (int).
    pub const SRIOV_VFS: &str = "sriovVfs";
    /// A virtual function (bool).
    pub const IS_SRIOV_VF: &str = "isSriovVf";
    /// No hardware behind it (bool).
    pub const VIRTUAL: &str = "virtual";
    /// Has an RDMA link (bool).
    pub const RDMA: &str = "rdma";
    /// RDMA link name (`mlx5_0`).
    pub const RDMA_DEVICE: &str = "rdmaDevice";
    /// RDMA link and no netdev (bool).
    pub const IB_ONLY: &str = "ibOnly";
    /// Standard: PCI bus id.
    pub const STD_PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
    /// Standard: PCIe root `pci<domain>:<bus>`.
    pub const STD_PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";
    /// Standard: NUMA node (int, or list of ints in the list form).
    pub const STD_NUMA_NODE: &str = "resource.kubernetes.io/numaNode";
}

/// An attribute value, as the DRA API types them: what dranet publishes, what the allocator
/// reads from a ResourceSlice, and what a CEL selector sees as `device.attributes[d].name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AttributeValue {
    /// `bool`.
    Bool(bool),
    /// `int`.
    Int(i64),
    /// `string` (≤ 64 bytes).
    String(String),
    /// `version`: a semantic version (≤ 64 bytes), parsed once so CEL compares it without
    /// parsing; equality ignores build metadata, as semver precedence does.
    Version(Semver),
    /// `ints` (list-typed attributes, resource.k8s.io 1.36+).
    Ints(Vec<i64>),
    /// `strings` (list-typed attributes, resource.k8s.io 1.36+).
    Strings(Vec<String>),
}

impl AttributeValue {
    /// The API's JSON for this value: `{"int": 3}`, `{"ints": [0, 1]}`, ….
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            AttributeValue::Bool(b) => json!({ "bool": b }),
            AttributeValue::Int(i) => json!({ "int": i }),
            AttributeValue::String(s) => json!({ "string": s }),
            AttributeValue::Version(v) => json!({ "version": v.as_str() }),
            AttributeValue::Ints(v) => json!({ "ints": v }),
            AttributeValue::Strings(v) => json!({ "strings": v }),
        }
    }

    /// The value as `k8s-openapi`'s v1 `DeviceAttribute`; `None` for list values, which the
    /// v1.34 API types cannot carry.
    pub fn to_k8s(&self) -> Option<k8s_openapi::api::resource::v1::DeviceAttribute> {
        use k8s_openapi::api::resource::v1::DeviceAttribute as A;
        Some(match self {
            AttributeValue::Bool(b) => A {
                bool: Some(*b),
                ..A::default()
            },
            AttributeValue::Int(i) => A {
                int: Some(*i),
                ..A::default()
            },
            AttributeValue::String(s) => A {
                string: Some(s.clone()),
                ..A::default()
            },
            AttributeValue::Version(v) => A {
                version: Some(v.to_string()),
                ..A::default()
            },
            AttributeValue::Ints(_) | AttributeValue::Strings(_) => return None,
        })
    }

    fn display(&self) -> String {
        match self {
            AttributeValue::Bool(b) => b.to_string(),
            AttributeValue::Int(i) => i.to_string(),
            AttributeValue::String(s) => s.clone(),
            AttributeValue::Version(v) => v.to_string(),
            AttributeValue::Ints(v) => v.iter().map(i64::to_string).collect::<Vec<_>>().join(","),
            AttributeValue::Strings(v) => v.join(","),
        }
    }
}

impl std::fmt::Display for AttributeValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(&self.display())
    }
}

/// Attributes by (qualified or unqualified) name.
pub type Attributes = BTreeMap<String, AttributeValue>;

/// Choices about how attributes are published.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttributeOptions {
    /// Publish `resource.kubernetes.io/numaNode` as a list: the node, then the same-socket nodes
    /// at minimum SLIT distance (needs an API server with list-typed attributes).
    pub numa_node_list: bool,
}

/// The attributes of one device before the API limits are applied (see [`enforce_limits`]).
pub fn device_attributes(
    dev: &NetworkDevice,
    numa: &NumaTopology,
    opts: AttributeOptions,
) -> Attributes {
    use AttributeValue as V;
    use names::*;
    let mut a = Attributes::new();
    let mut put = |k: &str, v: V| {
        a.insert(k.to_string(), v);
    };
    if let Some(pci) = &dev.pci {
        let addr = pci.address.to_string();
        put(PCI_ADDRESS, V::String(addr.clone()));
        put(STD_PCI_BUS_ID, V::String(addr));
        put(
            PCI_VENDOR,
            V::String(
                pci.vendor_name
                    .clone()
                    .unwrap_or_else(|| format!("{:04x}", pci.ids.vendor)),
            ),
        );
        put(
            PCI_DEVICE,
            V::String(
                pci.device_name
                    .clone()
                    .unwrap_or_else(|| format!("{:04x}", pci.ids.device)),
            ),
        );
        put(
            PCI_SUBSYSTEM,
            V::String(format!("{:04x}", pci.ids.subsystem_device)),
        );
        if let Some(n) = pci.numa_node {
            put(NUMA_NODE, V::Int(i64::from(n)));
            let std = if opts.numa_node_list {
                V::Ints(
                    numa.closest_same_socket(n)
                        .into_iter()
                        .map(i64::from)
                        .collect(),
                )
            } else {
                V::Int(i64::from(n))
            };
            put(STD_NUMA_NODE, std);
        }
        if let Some(root) = pci.pcie_root {
            put(STD_PCIE_ROOT, V::String(root.to_string()));
        }
        let (sriov, vfs, is_vf) = match pci.sriov {
            SriovRole::PhysicalFunction { num_vfs, .. } => (true, Some(num_vfs), false),
            SriovRole::VirtualFunction { .. } => (false, None, true),
            SriovRole::None => (false, None, false),
        };
        put(SRIOV, V::Bool(sriov));
        if let Some(n) = vfs {
            put(SRIOV_VFS, V::Int(i64::from(n)));
        }
        put(IS_SRIOV_VF, V::Bool(is_vf));
    }
    if let Some(nd) = &dev.netdev {
        put(IF_NAME, V::String(nd.name.clone()));
        if let Some(m) = &nd.mac {
            put(MAC, V::String(m.clone()));
        }
        if let Some(m) = nd.mtu {
            put(MTU, V::Int(i64::from(m)));
        }
        if let Some(e) = &nd.encapsulation {
            put(ENCAPSULATION, V::String(e.clone()));
        }
        if let Some(al) = nd.alias.as_ref().filter(|s| !s.is_empty()) {
            put(ALIAS, V::String(al.clone()));
        }
        if let Some(s) = &nd.operstate {
            put(STATE, V::String(s.clone()));
        }
        put(
            TYPE,
            V::String(nd.kind.clone().unwrap_or_else(|| "device".into())),
        );
        if let Some(v) = join_cidrs(&nd.ipv4) {
            put(IPV4, V::String(v));
        }
        if let Some(v) = join_cidrs(&nd.ipv6) {
            put(IPV6, V::String(v));
        }
        // As upstream: the names only when there is a program of the kind, `ebpf` always (when
        // known).
        if let Some(e) = &nd.ebpf {
            for (name, progs) in [
                (TC_FILTER_NAMES, &e.tc_filters),
                (TCX_PROGRAM_NAMES, &e.tcx_programs),
            ] {
                if !progs.is_empty() {
                    put(name, V::String(join_names(progs)));
                }
            }
            put(EBPF, V::Bool(e.any()));
        }
    }
    let is_virtual = dev.pci.is_none() && dev.netdev.as_ref().is_some_and(|n| n.virtual_);
    put(VIRTUAL, V::Bool(is_virtual));
    put(RDMA, V::Bool(dev.rdma.is_some()));
    if let Some(r) = &dev.rdma {
        put(RDMA_DEVICE, V::String(r.name.clone()));
    }
    put(IB_ONLY, V::Bool(dev.is_ib_only()));
    a
}

/// Comma-joins CIDRs, keeping whole entries only, so the value fits [`MAX_VALUE_LEN`].
pub fn join_cidrs(cidrs: &[String]) -> Option<String> {
    join_whole(cidrs.iter().map(String::as_str))
}

/// Program names, sorted, each once, unnamed ones left out, comma-joined as whole entries that
/// fit [`MAX_VALUE_LEN`]; empty when none has a name.
fn join_names(names: &[String]) -> String {
    let set: std::collections::BTreeSet<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !n.is_empty())
        .collect();
    join_whole(set.into_iter()).unwrap_or_default()
}

fn join_whole<'a>(items: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut out = String::new();
    for c in items {
        let extra = if out.is_empty() { c.len() } else { c.len() + 1 };
        if out.len() + extra > MAX_VALUE_LEN {
            break;
        }
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(c);
    }
    (!out.is_empty()).then_some(out)
}

/// The attributes the [`MAX_ATTRIBUTES_PER_DEVICE`] trim keeps before any other: the device's
/// identity and topology, and `ibOnly`. A device is never published without what says what it
/// is: a filter, a claim or an operator reading the slice selects on `type` and `ifName`, and the
/// daemon's default `--filter` reads `pciAddress`, `type` and `ibOnly` (issue 47 M7: a webhook's
/// 24+ attributes pushed `type` out). They are the first entries of the publishing order.
pub const IDENTITY: &[&str] = &[
    names::PCI_ADDRESS,
    names::STD_PCI_BUS_ID,
    names::STD_PCIE_ROOT,
    names::STD_NUMA_NODE,
    names::NUMA_NODE,
    names::RDMA,
    names::RDMA_DEVICE,
    names::TYPE,
    names::IF_NAME,
    names::MAC,
    names::IB_ONLY,
];

/// Publishing order of importance: when a device has more than
/// [`MAX_ATTRIBUTES_PER_DEVICE`] attributes, those last in this list go first; attributes not
/// listed (a cloud provider's or a webhook's, say) rank right after the [`IDENTITY`] ones, which
/// open the list.
const PRIORITY: &[&str] = &[
    names::PCI_ADDRESS,
    names::STD_PCI_BUS_ID,
    names::STD_PCIE_ROOT,
    names::STD_NUMA_NODE,
    names::NUMA_NODE,
    names::RDMA,
    names::RDMA_DEVICE,
    names::TYPE,
    names::IF_NAME,
    names::MAC,
    names::IB_ONLY,
    names::IS_SRIOV_VF,
    names::SRIOV,
    names::SRIOV_VFS,
    names::VIRTUAL,
    names::MTU,
    names::STATE,
    names::PCI_VENDOR,
    names::PCI_DEVICE,
    names::ENCAPSULATION,
    names::PCI_SUBSYSTEM,
    names::ALIAS,
    names::IPV4,
    names::IPV6,
    names::EBPF,
    names::TC_FILTER_NAMES,
    names::TCX_PROGRAM_NAMES,
];

fn rank(name: &str) -> usize {
    // Unlisted attributes come right after the identity ones.
    PRIORITY
        .iter()
        .position(|p| *p == name)
        .unwrap_or(IDENTITY.len())
}

/// Why an attribute (or capacity) name is not valid in the DRA API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AttributeNameError {
    /// The name (after the domain) is not a C identifier.
    #[error("the name is not a C identifier")]
    NotCIdentifier,
    /// The name (after the domain) is longer than [`MAX_ID_LEN`].
    #[error("the name is longer than {MAX_ID_LEN} characters")]
    NameTooLong,
    /// The domain is not a DNS subdomain.
    #[error("the domain is not a DNS subdomain")]
    DomainNotDnsSubdomain,
    /// The domain is longer than [`MAX_DOMAIN_LEN`].
    #[error("the domain is longer than {MAX_DOMAIN_LEN} characters")]
    DomainTooLong,
}

/// Why an attribute name is not valid in the DRA API, if it is not.
pub fn check_attribute_name(name: &str) -> Result<(), AttributeNameError> {
    let (domain, id) = match name.split_once('/') {
        Some((d, i)) => (Some(d), i),
        None => (None, name),
    };
    let c_ident = !id.is_empty()
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !id.as_bytes()[0].is_ascii_digit();
    if !c_ident {
        return Err(AttributeNameError::NotCIdentifier);
    }
    if id.len() > MAX_ID_LEN {
        return Err(AttributeNameError::NameTooLong);
    }
    if let Some(d) = domain {
        let ok = !d.is_empty()
            && d.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !ok {
            return Err(AttributeNameError::DomainNotDnsSubdomain);
        }
        if d.len() > MAX_DOMAIN_LEN {
            return Err(AttributeNameError::DomainTooLong);
        }
    }
    Ok(())
}

/// Removes what the DRA API would reject — invalid names, values over [`MAX_VALUE_LEN`] bytes,
/// attributes past [`MAX_ATTRIBUTES_PER_DEVICE`] (least important first) — and returns one
/// warning per removal naming the device and the attribute. The device itself is always kept.
pub fn enforce_limits(device: &str, attrs: &mut Attributes) -> Vec<String> {
    enforce_limits_beside(device, attrs, 0)
}

/// [`enforce_limits`] for a device that also publishes `capacities` capacities: the API counts
/// attributes and capacities together against [`MAX_ATTRIBUTES_PER_DEVICE`], so that many fewer
/// attributes are kept (a shared NIC's `children` capacity on a device at the limit would
/// otherwise get the whole slice refused).
pub fn enforce_limits_beside(
    device: &str,
    attrs: &mut Attributes,
    capacities: usize,
) -> Vec<String> {
    let room = MAX_ATTRIBUTES_PER_DEVICE.saturating_sub(capacities);
    let mut warnings = Vec::new();
    attrs.retain(|name, value| {
        if let Err(why) = check_attribute_name(name) {
            warnings.push(format!(
                "device {device}: attribute {name:?} left out: {why}"
            ));
            return false;
        }
        let len = match value {
            AttributeValue::String(s) => s.len(),
            AttributeValue::Version(v) => v.as_str().len(),
            _ => 0,
        };
        if len > MAX_VALUE_LEN {
            warnings.push(format!(
                "device {device}: attribute {name:?} left out: value is {len} bytes, the limit is {MAX_VALUE_LEN}"
            ));
            return false;
        }
        true
    });
    if attrs.len() > room {
        let mut by_rank: Vec<(usize, String)> =
            attrs.keys().map(|k| (rank(k), k.clone())).collect();
        by_rank.sort();
        let beside = match capacities {
            0 => String::new(),
            n => format!(" and capacities ({n})"),
        };
        for (_, name) in by_rank.drain(room..) {
            attrs.remove(&name);
            warnings.push(format!(
                "device {device}: attribute {name:?} left out: more than {MAX_ATTRIBUTES_PER_DEVICE} attributes{beside}"
            ));
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_are_cut_at_whole_entries() {
        let v: Vec<String> = (0..10).map(|i| format!("10.0.{i}.1/24")).collect();
        let joined = join_cidrs(&v).unwrap();
        assert!(joined.len() <= MAX_VALUE_LEN);
        assert!(joined.split(',').all(|c| v.contains(&c.to_string())));
        assert_eq!(joined.split(',').count(), 5); // 5 × 11 + 4 commas = 59; a 6th would be 71
        assert_eq!(join_cidrs(&[]), None);
        let huge = vec!["x".repeat(65)];
        assert_eq!(join_cidrs(&huge), None);
    }

    #[test]
    fn one_value_type_reads_and_writes_the_api_forms() {
        let v: AttributeValue = serde_json::from_str(r#"{"version":"1.2.3-rc.1+b5"}"#).unwrap();
        let AttributeValue::Version(ver) = &v else {
            panic!("not a version: {v:?}")
        };
        assert_eq!((ver.major, ver.minor, ver.patch), (1, 2, 3));
        // Published as written, build metadata included.
        assert_eq!(v.to_json(), serde_json::json!({"version": "1.2.3-rc.1+b5"}));
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"version":"1.2.3-rc.1+b5"}"#
        );
        assert_eq!(
            v.to_k8s().unwrap().version.as_deref(),
            Some("1.2.3-rc.1+b5")
        );
        let bad = serde_json::from_str::<AttributeValue>(r#"{"version":"1.2"}"#).unwrap_err();
        assert!(bad.to_string().contains("invalid semver"), "{bad}");
        let l = AttributeValue::Strings(vec!["a".into(), "b".into()]);
        assert_eq!(l.to_json(), serde_json::json!({"strings": ["a", "b"]}));
        assert_eq!(l.to_k8s(), None);
        assert_eq!(l.to_string(), "a,b");
    }

    #[test]
    fn names_are_checked() {
        assert!(check_attribute_name("rdmaDevice").is_ok());
        assert!(check_attribute_name("resource.kubernetes.io/pcieRoot").is_ok());
        assert!(check_attribute_name("9lives").is_err());
        assert!(check_attribute_name("has-dash").is_err());
        assert!(check_attribute_name(&"a".repeat(33)).is_err());
        assert!(check_attribute_name("Bad_Domain.io/x").is_err());
        // More than one `/` (1.38's helper refuses it too).
        assert_eq!(
            check_attribute_name("a.io/b/c"),
            Err(AttributeNameError::NotCIdentifier)
        );
        assert!(check_attribute_name(&format!("{}.io/x", "a".repeat(61))).is_err());
    }

    #[test]
    fn a_providers_many_attributes_never_cost_the_device_its_identity() {
        let mut a = Attributes::new();
        for (k, v) in [
            (names::PCI_ADDRESS, "0000:01:00.0"),
            (names::RDMA_DEVICE, "mlx5_0"),
            (names::TYPE, "vxlan"),
            (names::IF_NAME, "vx0"),
            (names::MAC, "02:00:00:00:00:01"),
        ] {
            a.insert(k.into(), AttributeValue::String(v.into()));
        }
        for i in 0..30 {
            a.insert(
                format!("a-webhook.example.com/extra{i:02}"),
                AttributeValue::Int(i),
            );
        }
        // What the default `--filter` reads beside them, and a webhook attribute sorting
        // before it.
        a.insert(names::IB_ONLY.into(), AttributeValue::Bool(false));
        a.insert("aaa.example.com/first".into(), AttributeValue::Int(0));
        let w = enforce_limits("pci-0000-01-00-0", &mut a);
        assert_eq!(w.len(), 5, "{w:?}");
        for k in [
            names::PCI_ADDRESS,
            names::TYPE,
            names::IF_NAME,
            names::MAC,
            names::RDMA_DEVICE,
            names::IB_ONLY,
        ] {
            assert!(a.contains_key(k), "{k} kept");
        }
        assert_eq!(
            &PRIORITY[..IDENTITY.len()],
            IDENTITY,
            "the order opens with them"
        );
    }

    #[test]
    fn limits_drop_attributes_with_warnings_never_the_device() {
        let mut a = Attributes::new();
        a.insert(
            "pciAddress".into(),
            AttributeValue::String("0000:01:00.0".into()),
        );
        a.insert("alias".into(), AttributeValue::String("y".repeat(65)));
        a.insert("bad-name".into(), AttributeValue::Bool(true));
        for i in 0..40 {
            a.insert(
                format!("cloud.example.com/extra{i:02}"),
                AttributeValue::Int(i),
            );
        }
        let w = enforce_limits("pci-0000-01-00-0", &mut a);
        assert_eq!(a.len(), MAX_ATTRIBUTES_PER_DEVICE);
        assert!(a.contains_key("pciAddress"));
        assert!(!a.contains_key("alias") && !a.contains_key("bad-name"));
        assert_eq!(w.len(), 2 + 41 - 32);
        assert!(
            w.iter()
                .all(|w| w.starts_with("device pci-0000-01-00-0: attribute"))
        );
        assert!(
            w.iter()
                .any(|w| w.contains("\"alias\"") && w.contains("65 bytes"))
        );
    }
}
