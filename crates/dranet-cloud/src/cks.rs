//! CoreWeave Kubernetes Service (CKS): no metadata service; the node's fabric position is in its
//! Node's labels, which the daemon reads once at start (its own Node, `get`). A node is on CKS
//! when it has [`label::CLUSTER`]. Upstream dranet's attribute names and labels.

use std::collections::BTreeMap;
use std::path::Path;

use dranet_core::{AttributeValue, Attributes, CloudProvider, DeviceIdentifiers};

/// The Node labels read.
pub mod label {
    /// Set on every CKS node: what detection looks for.
    pub const CLUSTER: &str = "cks.coreweave.com/cluster";
    /// The per-device neighbour label: `backend.coreweave.cloud/neighbors.expected.<rdma
    /// device>.device`, the leaf switch the device's port is cabled to.
    pub fn leaf_switch(rdma_device: &str) -> String {
        format!("backend.coreweave.cloud/neighbors.expected.{rdma_device}.device")
    }
}

/// Attribute names (upstream's, in the `coreweave.dra.net` domain).
pub mod attr {
    /// The fabric's flavour.
    pub const FABRIC_FLAVOR: &str = "coreweave.dra.net/fabricFlavor";
    /// The fabric.
    pub const FABRIC: &str = "coreweave.dra.net/fabric";
    /// The superpod.
    pub const SUPERPOD: &str = "coreweave.dra.net/superpod";
    /// The leaf group.
    pub const LEAFGROUP: &str = "coreweave.dra.net/leafgroup";
    /// The leaf group's name.
    pub const LEAFGROUP_NAME: &str = "coreweave.dra.net/leafgroupName";
    /// The rack.
    pub const RACK: &str = "coreweave.dra.net/rack";
    /// The fabric link speed now.
    pub const SPEED_CURRENT: &str = "coreweave.dra.net/speedCurrent";
    /// The fabric link speed expected.
    pub const SPEED_EXPECTED: &str = "coreweave.dra.net/speedExpected";
    /// The instance type.
    pub const INSTANCE_TYPE: &str = "coreweave.dra.net/instanceType";
    /// Per device: the leaf switch its port is cabled to.
    pub const LEAF_SWITCH: &str = "coreweave.dra.net/leafSwitch";
}

/// Each node attribute and the label it is read from.
pub const NODE_LABELS: [(&str, &str); 9] = [
    (attr::FABRIC_FLAVOR, "backend.coreweave.cloud/flavor"),
    (attr::FABRIC, "backend.coreweave.cloud/fabric"),
    (attr::SUPERPOD, "backend.coreweave.cloud/superpod"),
    (attr::LEAFGROUP, "backend.coreweave.cloud/leafgroup"),
    (
        attr::LEAFGROUP_NAME,
        "backend.coreweave.cloud/leafgroup-name",
    ),
    (attr::RACK, "node.coreweave.cloud/rack"),
    (attr::SPEED_CURRENT, "backend.coreweave.cloud/speed.current"),
    (
        attr::SPEED_EXPECTED,
        "backend.coreweave.cloud/speed.expected",
    ),
    (attr::INSTANCE_TYPE, "node.kubernetes.io/instance-type"),
];

/// The longest string attribute value the API takes.
pub const MAX_VALUE_LEN: usize = 64;

/// A Node's labels.
pub type Labels = BTreeMap<String, String>;

/// Whether a Node with these labels is a CKS node.
pub fn is_cks(labels: &Labels) -> bool {
    labels.get(label::CLUSTER).is_some_and(|v| !v.is_empty())
}

/// What CKS says about the node, read from its labels and its sysfs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CksNode {
    /// Node attributes, by name.
    pub node: BTreeMap<&'static str, String>,
    /// Leaf switch by PCI address (`0000:1a:00.0`) of the RDMA device it is cabled to.
    pub leaf_switch_by_pci: BTreeMap<String, String>,
    /// Leaf switch by interface name, for devices whose RDMA device has no PCI function found
    /// (labels keyed by an IPoIB interface name, `ibp…`, as upstream takes them).
    pub leaf_switch_by_name: BTreeMap<String, String>,
}

impl CksNode {
    /// The node of `labels`, on a machine whose sysfs is at `sysfs` (its RDMA devices' PCI
    /// functions, to find each device's neighbour label). Empty values are no attribute;
    /// values over [`MAX_VALUE_LEN`] bytes are dropped with a warning each.
    pub fn from_labels(labels: &Labels, sysfs: &Path) -> (CksNode, Vec<String>) {
        let mut warnings = Vec::new();
        let mut fits = |name: &str, value: &str| -> bool {
            if value.len() > MAX_VALUE_LEN {
                warnings.push(format!(
                    "ignoring the CKS attribute {name}: its value is {} bytes, more than {MAX_VALUE_LEN}",
                    value.len()
                ));
                return false;
            }
            !value.is_empty()
        };
        let mut node = BTreeMap::new();
        for (name, key) in NODE_LABELS {
            if let Some(v) = labels.get(key).map(|v| v.trim())
                && fits(name, v)
            {
                node.insert(name, v.to_string());
            }
        }
        let prefix = "backend.coreweave.cloud/neighbors.expected.";
        let pci_of = crate::rdma_functions(sysfs);
        let mut leaf_switch_by_pci = BTreeMap::new();
        let mut leaf_switch_by_name = BTreeMap::new();
        for (key, value) in labels {
            let Some(device) = key
                .strip_prefix(prefix)
                .and_then(|k| k.strip_suffix(".device"))
                .filter(|d| !d.is_empty())
            else {
                continue;
            };
            let value = value.trim();
            if !fits(&format!("{} of {device}", attr::LEAF_SWITCH), value) {
                continue;
            }
            match pci_of.get(device) {
                Some(pci) => leaf_switch_by_pci.insert(pci.clone(), value.to_string()),
                None => leaf_switch_by_name.insert(device.to_string(), value.to_string()),
            };
        }
        (
            CksNode {
                node,
                leaf_switch_by_pci,
                leaf_switch_by_name,
            },
            warnings,
        )
    }
}

impl CloudProvider for CksNode {
    fn name(&self) -> &str {
        "cks"
    }

    fn node_attributes(&self) -> Attributes {
        crate::attrs::strings(self.node.iter().map(|(k, v)| (*k, v.as_str())))
    }

    fn device_attributes(&self, id: &DeviceIdentifiers) -> Attributes {
        let by_pci = id
            .pci_address
            .and_then(|p| self.leaf_switch_by_pci.get(&p.to_string()));
        let by_name = || {
            id.name
                .as_deref()
                .and_then(|n| self.leaf_switch_by_name.get(n))
        };
        by_pci
            .or_else(by_name)
            .map(|v| {
                Attributes::from([(
                    attr::LEAF_SWITCH.to_string(),
                    AttributeValue::String(v.clone()),
                )])
            })
            .unwrap_or_default()
    }
}

/// A Node's labels from what `--node-labels-file` holds, decoded: a Node object (`kubectl get
/// node NAME -o json` or `-o yaml`) or a plain map of labels.
pub fn labels_of(doc: &serde_json::Value) -> Result<Labels, String> {
    let map = match doc.get("metadata") {
        Some(m) => m.get("labels").cloned().unwrap_or_default(),
        None => doc.clone(),
    };
    serde_json::from_value::<Labels>(map)
        .map_err(|e| format!("labels must map names to strings: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn node_labels_become_coreweave_attributes() {
        let l = labels(&[
            (label::CLUSTER, "cw-prod"),
            ("backend.coreweave.cloud/flavor", "ib"),
            ("backend.coreweave.cloud/fabric", "fab-1"),
            ("backend.coreweave.cloud/superpod", "sp-3"),
            ("backend.coreweave.cloud/leafgroup", "lg-7"),
            ("backend.coreweave.cloud/leafgroup-name", ""),
            ("node.coreweave.cloud/rack", &"r".repeat(65)),
            ("node.kubernetes.io/instance-type", "gd-8xh100ib-i128"),
            ("unrelated", "x"),
        ]);
        assert!(is_cks(&l));
        let dir = tempfile::tempdir().unwrap();
        let (n, warnings) = CksNode::from_labels(&l, dir.path());
        let a = n.node_attributes();
        let s = |k: &str| match a.get(k) {
            Some(AttributeValue::String(s)) => Some(s.as_str()),
            _ => None,
        };
        assert_eq!(s(attr::FABRIC_FLAVOR), Some("ib"));
        assert_eq!(s(attr::FABRIC), Some("fab-1"));
        assert_eq!(s(attr::SUPERPOD), Some("sp-3"));
        assert_eq!(s(attr::LEAFGROUP), Some("lg-7"));
        assert_eq!(s(attr::INSTANCE_TYPE), Some("gd-8xh100ib-i128"));
        // Empty: no attribute; over 64 bytes: dropped, said.
        assert_eq!(s(attr::LEAFGROUP_NAME), None);
        assert_eq!(s(attr::RACK), None);
        assert_eq!(a.len(), 5, "{a:?}");
        assert_eq!(
            warnings,
            [
                "ignoring the CKS attribute coreweave.dra.net/rack: its value is 65 bytes, more than 64"
            ]
        );
        assert!(!is_cks(&labels(&[(label::CLUSTER, "")])));
        assert!(!is_cks(&labels(&[("node.coreweave.cloud/rack", "r1")])));
    }

    #[test]
    fn a_device_gets_the_leaf_switch_of_its_rdma_device() {
        // Two RDMA devices on their PCI functions, as sysfs links them.
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path();
        std::fs::create_dir_all(sys.join("class/infiniband")).unwrap();
        for (rdma, pci) in [("mlx5_0", "0000:1a:00.0"), ("mlx5_1", "0000:3c:00.0")] {
            let dev = sys
                .join("devices/pci0000:00")
                .join(pci)
                .join("infiniband")
                .join(rdma);
            std::fs::create_dir_all(&dev).unwrap();
            std::os::unix::fs::symlink(&dev, sys.join("class/infiniband").join(rdma)).unwrap();
        }
        let l = labels(&[
            (label::CLUSTER, "cw"),
            (&label::leaf_switch("mlx5_0"), "leaf-a"),
            (&label::leaf_switch("mlx5_1"), "leaf-b"),
            (&label::leaf_switch("ibp26s0"), "leaf-c"),
        ]);
        let (n, w) = CksNode::from_labels(&l, sys);
        assert!(w.is_empty(), "{w:?}");
        let leaf = |pci: Option<&str>, name: Option<&str>| {
            let id = DeviceIdentifiers {
                pci_address: pci.map(|p| p.parse().unwrap()),
                name: name.map(str::to_string),
                ..Default::default()
            };
            match n.device_attributes(&id).get(attr::LEAF_SWITCH) {
                Some(AttributeValue::String(s)) => Some(s.clone()),
                _ => None,
            }
        };
        assert_eq!(
            leaf(Some("0000:1a:00.0"), Some("eth1")).as_deref(),
            Some("leaf-a")
        );
        assert_eq!(leaf(Some("0000:3c:00.0"), None).as_deref(), Some("leaf-b"));
        // No RDMA device of that name here: the label is matched by interface name.
        assert_eq!(leaf(None, Some("ibp26s0")).as_deref(), Some("leaf-c"));
        assert_eq!(leaf(Some("0000:5e:00.0"), Some("eth5")), None);
    }

    #[test]
    fn labels_are_a_nodes_or_a_plain_map() {
        let want = labels(&[(label::CLUSTER, "cw"), ("node.coreweave.cloud/rack", "r1")]);
        let map = serde_json::json!({"cks.coreweave.com/cluster": "cw", "node.coreweave.cloud/rack": "r1"});
        let node =
            serde_json::json!({"kind": "Node", "metadata": {"name": "n", "labels": map.clone()}});
        assert_eq!(labels_of(&map), Ok(want.clone()));
        assert_eq!(labels_of(&node), Ok(want));
        let e = labels_of(&serde_json::json!({"a": 1})).unwrap_err();
        assert!(e.contains("labels must map names to strings"), "{e}");
    }
}
