//! What one evaluation sees: the device (its attributes and capacities as CEL maps, read from
//! the index, never copied into a map) and the step budget.

use std::cell::Cell;

use dranet_core::AttributeValue;

use super::device::DeviceView;
use super::regex_cache::RegexCache;
use super::value::{Error, Map, MapView, R, Value, Ver};
use crate::version::KubernetesVersion;

/// Evaluation steps (nodes visited, comprehension iterations) allowed per device before the
/// evaluation is cancelled.
pub const MAX_EVAL_STEPS: u64 = 1_000_000;

/// The per-device evaluation context: the device, and the steps spent so far.
pub(crate) struct Activation<'a> {
    /// The `device` variable.
    pub(crate) dev: DeviceView<'a>,
    steps: Cell<u64>,
    /// The Kubernetes version whose components evaluate (their Go release's regexp syntax).
    pub(crate) version: KubernetesVersion,
    /// The program's zone cache, when the caller gave one.
    #[cfg(feature = "tzdb")]
    pub(crate) zones: Option<&'a super::tz::ZoneCache>,
    /// The program's compiled patterns, when the caller gave them.
    pub(crate) regexes: Option<&'a RegexCache>,
}

fn attr_value(v: &AttributeValue) -> Value<'_> {
    match v {
        AttributeValue::Bool(b) => Value::Bool(*b),
        AttributeValue::Int(i) => Value::Int(*i),
        AttributeValue::String(s) => Value::str(s),
        AttributeValue::Version(s) => Value::Semver(Ver::B(s)),
        AttributeValue::Ints(v) => Value::list(v.iter().map(|i| Value::Int(*i)).collect()),
        AttributeValue::Strings(v) => Value::list(v.iter().map(|s| Value::str(s)).collect()),
    }
}

impl<'a> Activation<'a> {
    pub(crate) fn new(dev: DeviceView<'a>, version: KubernetesVersion) -> Activation<'a> {
        Activation {
            dev,
            steps: Cell::new(0),
            version,
            #[cfg(feature = "tzdb")]
            zones: None,
            regexes: None,
        }
    }

    /// The UTC offset (seconds east) of the named zone `name` at the Unix instant `t`.
    #[cfg(feature = "tzdb")]
    pub(crate) fn zone_offset(&self, name: &str, t: i64) -> R<i64> {
        let zone = match self.zones {
            Some(cache) => cache.get(name),
            None => super::tz::load(name).map(std::sync::Arc::new),
        };
        zone.map(|z| z.offset_at(t))
            .map_err(|e| Error::msg(e.to_string()))
    }

    pub(crate) fn step(&self) -> R<()> {
        self.charge(1)
    }

    /// Adds `n` to the cost of this evaluation; over the budget the evaluation is cancelled, as
    /// the scheduler cancels one over its runtime cost limit.
    pub(crate) fn charge(&self, n: u64) -> R<()> {
        let n = self.steps.get().saturating_add(n);
        self.steps.set(n);
        if n > MAX_EVAL_STEPS {
            return Err(Error::Cancel(format!(
                "operation cancelled: actual cost limit exceeded ({MAX_EVAL_STEPS} steps)"
            )));
        }
        Ok(())
    }

    /// The domains present in the device's attributes (or capacities).
    fn domains(&self, capacity: bool) -> Vec<Value<'a>> {
        let attrs = self.dev.attributes;
        let mut out: Vec<&'a str> = if capacity {
            attrs.capacities().map(|(d, _, _)| d).collect()
        } else {
            attrs.names().map(|(d, _)| d).collect()
        };
        out.sort_unstable();
        out.dedup();
        out.into_iter().map(Value::str).collect()
    }

    /// `m[k]` for a map value, `None` when the key is absent.
    pub(crate) fn get(&self, m: &Value<'a>, k: &Value<'a>) -> Option<Value<'a>> {
        let attrs = self.dev.attributes;
        match m {
            Value::Map(map) => map.find(k).cloned(),
            // Any domain is present in the scheduler's map (empty when the device has none).
            Value::Attributes => match k {
                Value::Str(d) => Some(Value::Domain(d.clone())),
                _ => None,
            },
            Value::Capacity => match k {
                Value::Str(d) => Some(Value::CapDomain(d.clone())),
                _ => None,
            },
            Value::Domain(d) => attrs.get(d, k.as_str()?).map(attr_value),
            Value::CapDomain(d) => attrs.capacity(d, k.as_str()?).map(Value::Quantity),
            _ => None,
        }
    }

    /// `k in m`. Unlike `get` (and `has()`), a domain is in `device.attributes` or
    /// `device.capacity` only when the device has something in it, as in the scheduler.
    pub(crate) fn contains(&self, m: &Value<'a>, k: &Value<'a>) -> bool {
        match m {
            Value::Attributes | Value::Capacity => {
                let cap = matches!(m, Value::Capacity);
                k.as_str()
                    .is_some_and(|d| self.domains(cap).iter().any(|x| x.as_str() == Some(d)))
            }
            _ => self.get(m, k).is_some(),
        }
    }

    pub(crate) fn keys(&self, m: &Value<'a>) -> Vec<Value<'a>> {
        let attrs = self.dev.attributes;
        match m {
            Value::Map(map) => map.entries.iter().map(|(k, _)| k.clone()).collect(),
            Value::Attributes => self.domains(false),
            Value::Capacity => self.domains(true),
            Value::Domain(d) => attrs
                .domain_names(d)
                .into_iter()
                .map(|n| Value::string(n.to_string()))
                .collect(),
            Value::CapDomain(d) => attrs
                .domain_caps(d)
                .map(|(_, n, _)| Value::string(n.to_string()))
                .collect(),
            _ => Vec::new(),
        }
    }

    pub(crate) fn size(&self, m: &Value<'a>) -> usize {
        match m {
            Value::Map(map) => map.entries.len(),
            _ => self.keys(m).len(),
        }
    }

    pub(crate) fn to_map(&self, m: &Value<'a>) -> Map<'a> {
        match m {
            Value::Map(map) => (**map).clone(),
            _ => {
                let mut out = Map::default();
                for k in self.keys(m) {
                    if let Some(v) = self.get(m, &k) {
                        out.insert(k, v);
                    }
                }
                out
            }
        }
    }
}

impl<'a> MapView<'a> for Activation<'a> {
    fn keys(&self, m: &Value<'a>) -> Vec<Value<'a>> {
        Activation::keys(self, m)
    }
    fn get(&self, m: &Value<'a>, k: &Value<'a>) -> Option<Value<'a>> {
        Activation::get(self, m, k)
    }
}
