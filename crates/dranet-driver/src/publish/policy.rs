//! What the operator decides about publication: attribute options (from `--feature-gates`),
//! `--filter`, and `--share-filter` with `--share-children`.

use dranet_alloc::cel::{CelError, Program};
use dranet_core::AttributeOptions;

use super::filter::DEFAULT_FILTER;

/// The operator's choice of shareable devices.
pub struct Share {
    /// `--share-filter`: CEL over a device's attributes, like `--filter`.
    pub filter: Program,
    /// `--share-children`: how many claims may share one device at once.
    pub children: u32,
}

impl std::fmt::Debug for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Share")
            .field("filter", &self.filter.source())
            .field("children", &self.children)
            .finish()
    }
}

/// Everything besides the node that decides what is published.
#[derive(Default)]
pub struct Policy {
    /// Attribute choices (`DRAListTypeAttributes`: numaNode as a list).
    pub attributes: AttributeOptions,
    /// Which scanned devices are published (`--filter`); `None` publishes all.
    pub filter: Option<Program>,
    /// Which published devices are offered for sharing (`--share-filter`); `None`: none.
    pub share: Option<Share>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("attributes", &self.attributes)
            .field("filter", &self.filter.as_ref().map(Program::source))
            .field("share", &self.share)
            .finish()
    }
}

/// The flags a [`Policy`] is read from, as `dranet run`, `inventory` and `check` take them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyFlags<'a> {
    /// `--filter` (empty: publish all).
    pub filter: &'a str,
    /// `--share-filter` (empty: share none).
    pub share_filter: &'a str,
    /// `--share-children`.
    pub share_children: u32,
    /// `--feature-gates`.
    pub feature_gates: &'a str,
}

impl Default for PolicyFlags<'_> {
    /// The daemon's defaults.
    fn default() -> Self {
        Self {
            filter: DEFAULT_FILTER,
            share_filter: "",
            share_children: 8,
            feature_gates: "",
        }
    }
}

/// A flag of [`PolicyFlags`] that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// `--filter` does not compile.
    #[error("--filter: {source}{hint}")]
    Filter {
        /// The compiler's error.
        source: CelError,
        /// A hint for upstream's spelling of attributes, or empty.
        hint: &'static str,
    },
    /// `--share-filter` does not compile.
    #[error("--share-filter: {0}")]
    ShareFilter(#[source] CelError),
    /// `--feature-gates` does not parse.
    #[error("--feature-gates: {0}")]
    FeatureGates(#[from] FeatureGateError),
}

impl Policy {
    /// The policy `flags` ask for; every bad value is an error naming its flag.
    pub fn from_flags(flags: &PolicyFlags<'_>) -> Result<Policy, PolicyError> {
        let filter = if flags.filter.trim().is_empty() {
            None
        } else {
            Some(
                Program::compile(flags.filter).map_err(|source| PolicyError::Filter {
                    source,
                    hint: if flags.filter.contains("attributes[\"dra.net/") {
                        "; write upstream's attributes[\"dra.net/type\"].StringValue as device.attributes[\"dra.net\"].type"
                    } else {
                        ""
                    },
                })?,
            )
        };
        let share = if flags.share_filter.trim().is_empty() {
            None
        } else {
            Some(Share {
                filter: Program::compile(flags.share_filter).map_err(PolicyError::ShareFilter)?,
                children: flags.share_children,
            })
        };
        let gates = FeatureGates::parse(flags.feature_gates)?;
        Ok(Policy {
            attributes: AttributeOptions {
                numa_node_list: gates.list_type_attributes,
            },
            filter,
            share,
        })
    }

    /// Whether `--filter` is the default one (whose exclusions have their own reasons).
    pub fn default_filter(&self) -> bool {
        self.filter
            .as_ref()
            .is_some_and(|f| f.source() == DEFAULT_FILTER)
    }
}

/// Upstream's feature gates this driver knows.
pub const FEATURE_GATES: &[&str] = &["DRAListTypeAttributes", "PersistentResourceSliceAttributes"];

/// What `--feature-gates` turns on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// `DRAListTypeAttributes`: numaNode as a list.
    pub list_type_attributes: bool,
}

/// Why `--feature-gates` does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    /// An item without `=`.
    #[error("{0:?} is not Name=true or Name=false")]
    NotAPair(String),
    /// A value that is not one of Go's booleans.
    #[error("{name}: {value:?} is not true or false")]
    NotABool {
        /// The gate.
        name: String,
        /// Its value.
        value: String,
    },
    /// `PersistentResourceSliceAttributes=false`, which dranet-rs cannot do.
    #[error(
        "PersistentResourceSliceAttributes=false: dranet-rs always keeps the attributes of \
         allocated devices in its slices; drop the gate"
    )]
    PersistentOff,
    /// A gate this driver does not know.
    #[error("unknown feature gate {0:?} (known: {known})", known = FEATURE_GATES.join(", "))]
    Unknown(String),
}

impl FeatureGates {
    /// Parses `--feature-gates` as Kubernetes components do (`A=true,B=false`, Go's booleans);
    /// an unknown gate is an error naming the known ones.
    pub fn parse(s: &str) -> Result<FeatureGates, FeatureGateError> {
        let mut g = FeatureGates::default();
        for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| FeatureGateError::NotAPair(pair.to_string()))?;
            let on = match value.trim() {
                "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
                "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
                v => {
                    return Err(FeatureGateError::NotABool {
                        name: name.to_string(),
                        value: v.to_string(),
                    });
                }
            };
            match name.trim() {
                "DRAListTypeAttributes" => g.list_type_attributes = on,
                "PersistentResourceSliceAttributes" if on => {}
                "PersistentResourceSliceAttributes" => return Err(FeatureGateError::PersistentOff),
                other => return Err(FeatureGateError::Unknown(other.to_string())),
            }
        }
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_gates_as_upstream_daemonsets_pass_them() {
        let parse = FeatureGates::parse;
        assert_eq!(parse(""), Ok(FeatureGates::default()));
        let g =
            parse("DRAListTypeAttributes=true, PersistentResourceSliceAttributes=true").unwrap();
        assert!(g.list_type_attributes);
        assert!(
            !parse("DRAListTypeAttributes=false")
                .unwrap()
                .list_type_attributes
        );
        let e = parse("DRAListTypeAttributes=true,Foo=true")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"Foo\"")
                && e.contains("DRAListTypeAttributes, PersistentResourceSliceAttributes"),
            "{e}"
        );
        assert!(parse("DRAListTypeAttributes").is_err());
        assert!(parse("DRAListTypeAttributes=yes").is_err());
        let e = parse("PersistentResourceSliceAttributes=false")
            .unwrap_err()
            .to_string();
        assert!(e.contains("drop the gate"), "{e}");
    }

    #[test]
    fn flags_become_a_policy_or_an_error_naming_the_flag() {
        let p = Policy::from_flags(&PolicyFlags::default()).unwrap();
        assert!(p.default_filter() && p.share.is_none() && !p.attributes.numa_node_list);
        let p = Policy::from_flags(&PolicyFlags {
            filter: "",
            share_filter: "true",
            share_children: 3,
            feature_gates: "DRAListTypeAttributes=true",
        })
        .unwrap();
        assert!(p.filter.is_none() && !p.default_filter());
        assert_eq!(p.share.as_ref().map(|s| s.children), Some(3));
        assert!(p.attributes.numa_node_list);
        let bad = |f: PolicyFlags<'_>| Policy::from_flags(&f).unwrap_err().to_string();
        let e = bad(PolicyFlags {
            filter: r#"attributes["dra.net/type"].StringValue == "x""#,
            ..PolicyFlags::default()
        });
        assert!(
            e.starts_with("--filter: ") && e.contains("upstream's"),
            "{e}"
        );
        let e = bad(PolicyFlags {
            share_filter: "(",
            ..PolicyFlags::default()
        });
        assert!(e.starts_with("--share-filter: "), "{e}");
        let e = bad(PolicyFlags {
            feature_gates: "X=true",
            ..PolicyFlags::default()
        });
        assert!(e.starts_with("--feature-gates: unknown"), "{e}");
    }
}
