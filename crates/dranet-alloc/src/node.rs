//! Which slices and devices a node can reach: `nodeName`, `nodeSelector`, `allNodes` and
//! `perDeviceNodeSelection`, matched as the scheduler does (the core/v1 node-affinity rules).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{Device, ResourceSlice};

use crate::error::AllocError;
use crate::features::Features;
use crate::source::Placement;

/// A node as the scheduler matches it against slices: its name and labels.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Node {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
}

impl Node {
    /// A node with this name and the label every kubelet sets, `kubernetes.io/hostname=<name>`.
    pub fn new(name: &str) -> Node {
        let mut labels = BTreeMap::new();
        labels.insert("kubernetes.io/hostname".to_string(), name.to_string());
        Node {
            name: name.to_string(),
            labels,
        }
    }

    /// Adds labels (`key=value` pairs).
    pub fn with_labels<K: Into<String>, V: Into<String>>(
        mut self,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> Node {
        self.labels
            .extend(labels.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }
}

/// Which of a slice's devices a node can reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceScope {
    /// All of them (`nodeName` is the node, `allNodes`, or `nodeSelector` matches).
    All,
    /// None: the slice is for other nodes, or it sets none of the node fields (a future kind
    /// of slice the scheduler skips), or it uses `perDeviceNodeSelection` without
    /// [`Features::partitionable_devices`].
    None,
    /// Some: `perDeviceNodeSelection`, and at least one device's own fields match; ask
    /// [`device_on_node`] for each.
    PerDevice,
}

/// Which devices of `slice` the scheduler lets `node` use. An unparsable node selector is an
/// error (the scheduler's too: it stops allocation).
pub fn slice_scope(
    slice: &ResourceSlice,
    node: &Node,
    features: &Features,
) -> Result<SliceScope, AllocError> {
    let spec = &slice.spec;
    let bad = |reason: String| AllocError::InvalidSlice {
        slice: slice.metadata.name.clone().unwrap_or_default(),
        reason,
    };
    if !features.partitionable_devices && spec.per_device_node_selection.is_some() {
        return Ok(SliceScope::None);
    }
    let node_name = spec.node_name.as_deref().unwrap_or("");
    let all_nodes = spec.all_nodes.unwrap_or(false);
    if !node_name.is_empty() || all_nodes || spec.node_selector.is_some() {
        let m = placement_matches(node, node_name, all_nodes, spec.node_selector.as_ref())
            .map_err(|e| bad(format!("nodeSelector: {e}")))?;
        return Ok(if m { SliceScope::All } else { SliceScope::None });
    }
    if spec.per_device_node_selection == Some(true) {
        for d in spec.devices.iter().flatten() {
            if device_on_node(d, node).map_err(|e| bad(format!("device {}: {e}", d.name)))? {
                return Ok(SliceScope::PerDevice);
            }
        }
    }
    Ok(SliceScope::None)
}

/// Why a node selector cannot be matched: a requirement the API would not accept, named by its
/// place in the selector (`nodeSelectorTerms[0].matchExpressions[1]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nodeSelectorTerms[{term}].{list}[{index}]: {error}")]
pub struct NodeSelectorError {
    /// The term's position.
    pub term: usize,
    /// `matchExpressions` or `matchFields`.
    pub list: &'static str,
    /// The requirement's position in that list.
    pub index: usize,
    /// What is wrong with it.
    #[source]
    pub error: RequirementError,
}

/// What is wrong with one requirement of a node selector.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// `In` or `NotIn` on a label without values.
    #[error("operator {0} needs at least one value")]
    NoValues(String),
    /// `Exists` or `DoesNotExist` with values.
    #[error("operator {0} takes no values")]
    UnexpectedValues(String),
    /// `Gt` or `Lt` without exactly one value.
    #[error("operator {0} needs exactly one value")]
    NotOneValue(String),
    /// `Gt` or `Lt` with a value that is not an integer.
    #[error("operator {operator}: {value:?} is not an integer")]
    NotAnInteger {
        /// The operator.
        operator: String,
        /// The value.
        value: String,
    },
    /// A label operator other than `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`.
    #[error("unsupported operator {0:?} (In, NotIn, Exists, DoesNotExist, Gt, Lt)")]
    LabelOperator(String),
    /// A field requirement without exactly one value.
    #[error("values must have one element")]
    FieldNotOneValue,
    /// A field operator other than `In`, `NotIn`.
    #[error("unsupported operator {0:?} (In, NotIn)")]
    FieldOperator(String),
    /// A label key whose prefix is not a DNS subdomain.
    #[error("label key {0:?}: prefix must be a DNS subdomain")]
    KeyPrefix(String),
    /// A label key whose name is not 1-63 alphanumerics, `-`, `_` or `.`.
    #[error(
        "label key {0:?}: name must be 1-63 alphanumerics, '-', '_' or '.', alphanumeric at both ends"
    )]
    KeyName(String),
    /// A label value that is not at most 63 alphanumerics, `-`, `_` or `.`.
    #[error(
        "label value {0:?}: at most 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends"
    )]
    Value(String),
}

/// Whether a device of a `perDeviceNodeSelection` slice is usable from `node`, by its own
/// `nodeName`, `allNodes` or `nodeSelector`.
pub fn device_on_node(device: &Device, node: &Node) -> Result<bool, NodeSelectorError> {
    placement_matches(
        node,
        device.node_name.as_deref().unwrap_or(""),
        device.all_nodes.unwrap_or(false),
        device.node_selector.as_ref(),
    )
}

fn placement_matches(
    node: &Node,
    node_name: &str,
    all_nodes: bool,
    selector: Option<&NodeSelector>,
) -> Result<bool, NodeSelectorError> {
    if !node_name.is_empty() {
        return Ok(node.name == node_name);
    }
    if all_nodes {
        return Ok(true);
    }
    match selector {
        Some(s) => node_selector_matches(s, node),
        None => Ok(false),
    }
}

/// Whether a node selector selects `node`: terms are ORed, a term's requirements ANDed, an
/// empty term selects nothing; `matchExpressions` on labels (`In`, `NotIn`, `Exists`,
/// `DoesNotExist`, `Gt`, `Lt`), `matchFields` on `metadata.name` (`In`, `NotIn`, one value).
/// A requirement that does not parse is an error naming it.
pub fn node_selector_matches(
    selector: &NodeSelector,
    node: &Node,
) -> Result<bool, NodeSelectorError> {
    let terms: Vec<&NodeSelectorTerm> = selector
        .node_selector_terms
        .iter()
        .filter(|t| !term_is_empty(t))
        .collect();
    // Every term is parsed first: one bad term is an error even when another matches.
    for (i, t) in terms.iter().enumerate() {
        let at = |list, index| {
            move |error| NodeSelectorError {
                term: i,
                list,
                index,
                error,
            }
        };
        for (j, r) in t.match_expressions.iter().flatten().enumerate() {
            check_label_requirement(r).map_err(at("matchExpressions", j))?;
        }
        for (j, r) in t.match_fields.iter().flatten().enumerate() {
            check_field_requirement(r).map_err(at("matchFields", j))?;
        }
    }
    Ok(terms.iter().any(|t| term_matches(t, node)))
}

fn term_is_empty(t: &NodeSelectorTerm) -> bool {
    t.match_expressions.as_ref().is_none_or(Vec::is_empty)
        && t.match_fields.as_ref().is_none_or(Vec::is_empty)
}

fn term_matches(t: &NodeSelectorTerm, node: &Node) -> bool {
    let labels_ok = t
        .match_expressions
        .iter()
        .flatten()
        .all(|r| label_matches(r, node));
    // Fields only exist for a named node; `metadata.name` is the only field.
    let fields_ok = node.name.is_empty()
        || t.match_fields.iter().flatten().all(|r| {
            let have = if r.key == "metadata.name" {
                node.name.as_str()
            } else {
                ""
            };
            let v = r.values.as_deref().unwrap_or(&[]);
            match r.operator.as_str() {
                "In" => v.first().is_some_and(|x| x == have),
                _ => v.first().is_none_or(|x| x != have),
            }
        });
    labels_ok && fields_ok
}

fn label_matches(r: &NodeSelectorRequirement, node: &Node) -> bool {
    let have = node.labels.get(&r.key);
    let values = r.values.as_deref().unwrap_or(&[]);
    match r.operator.as_str() {
        "In" => have.is_some_and(|h| values.contains(h)),
        "NotIn" => have.is_none_or(|h| !values.contains(h)),
        "Exists" => have.is_some(),
        "DoesNotExist" => have.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(h), Some(Ok(want))) = (have, values.first().map(|v| v.parse::<i64>())) else {
                return false;
            };
            let Ok(h) = h.parse::<i64>() else {
                return false;
            };
            if op == "Gt" { h > want } else { h < want }
        }
        _ => false,
    }
}

fn check_label_requirement(r: &NodeSelectorRequirement) -> Result<(), RequirementError> {
    check_label_key(&r.key)?;
    let values = r.values.as_deref().unwrap_or(&[]);
    let op = || r.operator.clone();
    match r.operator.as_str() {
        "In" | "NotIn" => {
            if values.is_empty() {
                return Err(RequirementError::NoValues(op()));
            }
        }
        "Exists" | "DoesNotExist" => {
            if !values.is_empty() {
                return Err(RequirementError::UnexpectedValues(op()));
            }
        }
        "Gt" | "Lt" => {
            if values.len() != 1 {
                return Err(RequirementError::NotOneValue(op()));
            }
            values[0]
                .parse::<i64>()
                .map_err(|_| RequirementError::NotAnInteger {
                    operator: op(),
                    value: values[0].clone(),
                })?;
        }
        other => return Err(RequirementError::LabelOperator(other.to_string())),
    }
    for v in values {
        check_label_value(v)?;
    }
    Ok(())
}

fn check_field_requirement(r: &NodeSelectorRequirement) -> Result<(), RequirementError> {
    match r.operator.as_str() {
        "In" | "NotIn" => {
            if r.values.as_ref().map_or(0, Vec::len) != 1 {
                return Err(RequirementError::FieldNotOneValue);
            }
            Ok(())
        }
        other => Err(RequirementError::FieldOperator(other.to_string())),
    }
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn check_label_key(key: &str) -> Result<(), RequirementError> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && (p.is_empty()
            || p.len() > 253
            || !p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            }))
    {
        return Err(RequirementError::KeyPrefix(key.to_string()));
    }
    if name.is_empty() || name.len() > 63 || !name_chars_ok(name) {
        return Err(RequirementError::KeyName(key.to_string()));
    }
    Ok(())
}

fn check_label_value(v: &str) -> Result<(), RequirementError> {
    if v.len() > 63 || (!v.is_empty() && !name_chars_ok(v)) {
        return Err(RequirementError::Value(v.to_string()));
    }
    Ok(())
}

fn name_chars_ok(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// The allocation's node selector, as the scheduler builds it from the chosen devices
/// (placement, slice name, `bindsToNode`): the node's name as soon as one device is local to a
/// node or binds to it; else the requirements of the devices' node selectors merged into one
/// term; else `None` (every node).
pub(crate) fn allocation_node_selector<'a>(
    placements: impl Iterator<Item = (&'a Placement<'a>, &'a str, bool)>,
    node_name: &str,
) -> Result<Option<NodeSelector>, AllocError> {
    let mut fields: Vec<NodeSelectorRequirement> = Vec::new();
    let mut exprs: Vec<NodeSelectorRequirement> = Vec::new();
    for (p, slice, binds) in placements {
        if p.node_name.is_some() || binds {
            return Ok(Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_fields: Some(vec![NodeSelectorRequirement {
                        key: "metadata.name".into(),
                        operator: "In".into(),
                        values: Some(vec![node_name.to_string()]),
                    }]),
                    match_expressions: None,
                }],
            }));
        }
        let Some(sel) = &p.node_selector else {
            continue;
        };
        match sel.node_selector_terms.as_slice() {
            [] => {}
            [t] => {
                merge_requirements(t.match_fields.as_deref().unwrap_or(&[]), &mut fields);
                merge_requirements(t.match_expressions.as_deref().unwrap_or(&[]), &mut exprs);
            }
            more => {
                return Err(AllocError::InvalidSlice {
                    slice: slice.to_string(),
                    reason: format!(
                        "nodeSelector has {} terms; the scheduler supports one",
                        more.len()
                    ),
                });
            }
        }
    }
    if fields.is_empty() && exprs.is_empty() {
        return Ok(None);
    }
    Ok(Some(NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_fields: (!fields.is_empty()).then_some(fields),
            match_expressions: (!exprs.is_empty()).then_some(exprs),
        }],
    }))
}

/// Appends the requirements not already present (same key, operator and set of values).
fn merge_requirements(from: &[NodeSelectorRequirement], to: &mut Vec<NodeSelectorRequirement>) {
    for r in from {
        let mut want: Vec<&String> = r.values.iter().flatten().collect();
        want.sort();
        want.dedup();
        let present = to.iter().any(|x| {
            let mut have: Vec<&String> = x.values.iter().flatten().collect();
            have.sort();
            have.dedup();
            x.key == r.key && x.operator == r.operator && have == want
        });
        if !present {
            to.push(r.clone());
        }
    }
}
