//! What the allocator reads of a ResourceSlice's device, where it is: its names, its attributes
//! as the selector shortcut and constraints compare them, its index on first need, the
//! checks of what the index would refuse, and where the slice's devices can be used.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::ResourceSlice;

use crate::cel::{
    AttrKey, AttributeValue, DeviceAttributes, Given, NameArena, Quantity, Scalar, Semver,
    same_bytes,
};

/// Where a slice's (or, with `perDeviceNodeSelection`, a device's) devices can be used.
#[derive(Debug, Clone, Default)]
pub(crate) struct Placement<'a> {
    pub node_name: Option<Cow<'a, str>>,
    pub node_selector: Option<Cow<'a, NodeSelector>>,
}

impl Placement<'_> {
    pub fn into_owned(self) -> Placement<'static> {
        Placement {
            node_name: self.node_name.map(|n| Cow::Owned(n.into_owned())),
            node_selector: self.node_selector.map(|n| Cow::Owned(n.into_owned())),
        }
    }
}

/// What the search needs of a slice beyond its devices.
#[derive(Debug, Clone)]
pub(crate) struct SliceInfo<'a> {
    pub name: Cow<'a, str>,
    pub placement: Placement<'a>,
}

impl SliceInfo<'_> {
    pub fn into_owned(self) -> SliceInfo<'static> {
        SliceInfo {
            name: Cow::Owned(self.name.into_owned()),
            placement: self.placement.into_owned(),
        }
    }
}

/// A device as its ResourceSlice gives it, with its attributes' JSON (for the list types the
/// v1.34 structs cannot carry), read by the selector shortcut and indexed on first need.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    pub(crate) slice: &'a ResourceSlice,
    pub(crate) device: &'a k8s_openapi::api::resource::v1::Device,
    pub(crate) raw: Option<&'a serde_json::Value>,
}

/// The entry of `map` for the attribute (or capacity) `key`, as an index of the device built
/// by `driver` would find it: published unqualified (in the driver's domain) or qualified
/// (`domain/name`).
fn find<'m, V>(map: &'m BTreeMap<String, V>, driver: &str, key: &AttrKey) -> Option<&'m V> {
    // A name is split at its first '/': a domain with one cannot be found, and neither can an
    // unqualified name with one (it would be a qualified name).
    if key.domain_has_slash() {
        return None;
    }
    if !key.name_has_slash()
        && same_bytes(key.domain.as_bytes(), driver.as_bytes())
        && let Some(v) = get(map, &key.name)
    {
        return Some(v);
    }
    get(map, key.joined())
}

/// `map.get(key)` by a scan that compares lengths first: a device has at most 32 attributes,
/// most names differ from the one looked for in length, and the tree's search calls `memcmp`
/// for every name it passes, which made a lookup cost twice as much.
fn get<'m, V>(map: &'m BTreeMap<String, V>, key: &str) -> Option<&'m V> {
    map.iter()
        .find(|(k, _)| same_bytes(k.as_bytes(), key.as_bytes()))
        .map(|(_, v)| v)
}

/// `f(domain/name)`, the name joined without an allocation when it is as long as the API
/// allows (63 + 1 + 32 bytes) or shorter.
fn qualified<R>(domain: &str, name: &str, f: impl FnOnce(&str) -> R) -> R {
    let mut buf = [0u8; 128];
    let n = domain.len() + 1 + name.len();
    if n <= buf.len() {
        buf[..domain.len()].copy_from_slice(domain.as_bytes());
        buf[domain.len()] = b'/';
        buf[domain.len() + 1..n].copy_from_slice(name.as_bytes());
        // SAFETY: `buf[..n]` is two `str`s joined by an ASCII byte, which is UTF-8 (checking
        // it again showed in the cold path's profile).
        f(unsafe { std::str::from_utf8_unchecked(&buf[..n]) })
    } else {
        f(&format!("{domain}/{name}"))
    }
}

impl<'a> Source<'a> {
    pub fn driver(&self) -> &'a str {
        &self.slice.spec.driver
    }

    pub fn pool(&self) -> &'a str {
        &self.slice.spec.pool.name
    }

    pub fn name(&self) -> &'a str {
        &self.device.name
    }

    pub fn taints(&self) -> &'a [k8s_openapi::api::resource::v1::DeviceTaint] {
        self.device.taints.as_deref().unwrap_or_default()
    }

    /// The attribute with this key as the shortcut compares it.
    pub fn scalar(&self, key: &AttrKey) -> Option<Scalar<'a>> {
        let a = find(self.device.attributes.as_ref()?, self.driver(), key)?;
        Some(match (a.bool, a.int, &a.string) {
            (Some(b), None, None) => Scalar::Bool(b),
            (None, Some(i), None) => Scalar::Int(i),
            (None, None, Some(s)) => Scalar::Str(s),
            // A version, a list (only in the JSON), or (refused at build) several values.
            _ => Scalar::Other,
        })
    }

    /// The device's attribute index. Every error names what is wrong.
    pub(crate) fn index(&self) -> Result<DeviceAttributes, String> {
        let d = self.device;
        let mut attrs: Vec<(&str, Given)> =
            Vec::with_capacity(d.attributes.as_ref().map_or(0, BTreeMap::len));
        let mut caps: Vec<(&str, Quantity)> = Vec::new();
        let mut versions = Vec::new();
        for (name, a) in d.attributes.iter().flatten() {
            let v = convert_attr(a, self.raw.and_then(|r| r.get(name)), &mut versions)
                .map_err(|e| format!("attribute {name}: {e}"))?;
            attrs.push((name.as_str(), v));
        }
        for (name, c) in d.capacity.iter().flatten() {
            let q = Quantity::parse(&c.value.0)
                .map_err(|e| format!("capacity {name}: invalid quantity {:?}: {e}", c.value.0))?;
            caps.push((name.as_str(), q));
        }
        let mut arena = NameArena::new();
        let mut index = arena
            .index(self.driver(), &mut attrs, &caps)
            .map_err(|e| e.to_string())?;
        index.set_names(&arena.finish());
        Ok(index)
    }

    /// Checks what [`Source::index`] would refuse, without building the index: every
    /// attribute has exactly one value (versions and lists that parse), every capacity is a
    /// quantity, and no two names are one qualified name. `known` holds the versions and
    /// quantities seen valid before, which need no parse again.
    pub(crate) fn check(&self, known: &mut Known<'a>) -> Result<(), String> {
        let (d, driver) = (self.device, self.driver());
        // Whether a name is in the driver's domain written qualified: only then can two names
        // be one.
        let own = |name: &str| {
            name.as_bytes().get(driver.len()) == Some(&b'/') && name.starts_with(driver)
        };
        let (mut own_attrs, mut own_caps) = (false, false);
        if let Some(map) = &d.attributes {
            for (name, a) in map {
                own_attrs |= own(name);
                let raw = self.raw.and_then(|r| r.get(name));
                let lists =
                    raw.is_some_and(|r| r.get("ints").is_some() || r.get("strings").is_some());
                // Exactly one value and no list beside it (in JSON) is the common case.
                let version = match (a.bool, a.int, &a.string, &a.version) {
                    (Some(_), None, None, None)
                    | (None, Some(_), None, None)
                    | (None, None, Some(_), None)
                        if !lists =>
                    {
                        continue;
                    }
                    (None, None, None, Some(v)) if !lists => v,
                    // The rare cases take the conversion, which says what is wrong.
                    _ => {
                        convert_attr(a, raw, &mut Vec::new())
                            .map_err(|e| format!("attribute {name}: {e}"))?;
                        continue;
                    }
                };
                if !known.versions.contains(version) {
                    Semver::check(version).map_err(|e| {
                        format!("attribute {name}: invalid semver {version:?}: {e}")
                    })?;
                    known.versions.keep(version);
                }
            }
        }
        if let Some(map) = &d.capacity {
            for (name, c) in map {
                own_caps |= own(name);
                let text = c.value.0.as_str();
                if !known.quantities.contains(text) {
                    Quantity::check(text)
                        .map_err(|e| format!("capacity {name}: invalid quantity {text:?}: {e}"))?;
                    known.quantities.keep(text);
                }
            }
        }
        // After the values, as the index finds repeats after converting them.
        if let Some(map) = d.attributes.as_ref().filter(|_| own_attrs)
            && let Some(dup) = repeated(map, driver)
        {
            return Err(format!("attribute {dup} is given twice"));
        }
        if let Some(map) = d.capacity.as_ref().filter(|_| own_caps)
            && let Some(dup) = repeated(map, driver)
        {
            return Err(format!("capacity {dup} is given twice"));
        }
        Ok(())
    }
}

/// Whether `s` has a '/': a loop over the few bytes of a name costs less than the general
/// search `str::contains` makes, and runs for every lookup on the cold path.
fn has_slash(s: &str) -> bool {
    s.bytes().any(|b| b == b'/')
}

/// `driver/name` for the first name of `map` that is the qualified form of another of its
/// names (`dra.net/rdma` beside `rdma`, published by `dra.net`): the two are one attribute.
/// Only the names after `driver/` in the map's order can be, so the others are not looked at.
fn repeated<V>(map: &BTreeMap<String, V>, driver: &str) -> Option<String> {
    use std::ops::Bound;
    qualified(driver, "", |prefix| {
        map.range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .map(|(name, _)| name)
            .take_while(|name| name.starts_with(prefix))
            .map(|name| &name[prefix.len()..])
            .find(|rest| !has_slash(rest) && map.contains_key(*rest))
            .map(|rest| format!("{driver}/{rest}"))
    })
}

/// Versions and quantities already found valid while checking an allocator's devices.
#[derive(Default)]
pub(crate) struct Known<'a> {
    versions: Few<'a>,
    quantities: Few<'a>,
}

/// Up to [`VERSIONS_KEPT`] strings, on the stack: a list on the heap was one more allocation
/// per allocator for the two or three a node's devices publish.
#[derive(Default)]
struct Few<'a> {
    items: [&'a str; VERSIONS_KEPT],
    len: usize,
}

impl<'a> Few<'a> {
    fn contains(&self, s: &str) -> bool {
        self.items[..self.len].contains(&s)
    }

    /// Keeps `s` if there is room (one not kept is checked again when seen again).
    fn keep(&mut self, s: &'a str) {
        if let Some(slot) = self.items.get_mut(self.len) {
            *slot = s;
            self.len += 1;
        }
    }
}

/// Shared counters (partitionable devices) as the scheduler keys them: Kubernetes 1.34 by the
/// name of the slice that declares them, 1.35 and newer by pool name, so pools of one name (of
/// different drivers) share them.
#[derive(Debug, Clone)]
pub(crate) struct CounterKey {
    /// The slice name (1.34) or pool name (1.35+).
    pub key: String,
    /// Every counter under the key: (counter set, counter).
    pub names: Vec<(String, String)>,
    /// 1.34: the slice's total of each of `names`. Empty for 1.35+, where each pool of the key
    /// has its own ([`PoolCounters::totals`]).
    pub totals: Vec<Quantity>,
}

/// A pool's shared counters (Kubernetes 1.35+: from the pool's own counter slices).
#[derive(Debug, Clone)]
pub(crate) struct PoolCounters {
    /// Index of the pool's name in the allocator's counter keys.
    pub key: usize,
    /// The total of each counter the pool declares: (index into [`CounterKey::names`], total).
    pub totals: Vec<(usize, Quantity)>,
    /// Devices of the pool's slices the node does not reach, by name: they still consume
    /// counters when allocated.
    pub outside: Vec<(String, Vec<(usize, Quantity)>)>,
}

/// What one device consumes from shared counters: (index into [`CounterKey::names`],
/// amount). Consumption of counters its key does not declare is dropped: the scheduler never
/// checks it.
#[derive(Debug, Clone)]
pub(crate) struct CounterUse {
    /// Its counter key.
    pub owner: Option<usize>,
    /// Its pool (1.35+, whose counters are the key's until another pool of the name is first).
    pub pool: u32,
    pub uses: Vec<(usize, Quantity)>,
}

/// Most distinct versions (and quantities) remembered while checking an allocator's devices or
/// indexing one: a node's devices publish a few (driver, firmware, compute capability), each on
/// many devices.
const VERSIONS_KEPT: usize = 16;

/// What [`convert_attr`] reads of a slice's JSON beside its typed slice: each device's
/// list-valued attributes (`ints`, `strings`, which the v1.34 structs cannot carry), at the
/// device's position; `Null` when the slice has none. A cluster's slices kept whole as JSON
/// trees were most of `dranet check`'s memory.
pub(crate) fn list_attributes(slice: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let is_list = |a: &Value| a.get("ints").is_some() || a.get("strings").is_some();
    let devices: Vec<Value> = slice["spec"]["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            let lists: serde_json::Map<String, Value> = d["attributes"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, a)| is_list(a))
                .map(|(name, a)| (name.clone(), a.clone()))
                .collect();
            if lists.is_empty() {
                Value::Null
            } else {
                serde_json::json!({ "attributes": lists })
            }
        })
        .collect();
    if devices.iter().all(Value::is_null) {
        return Value::Null;
    }
    serde_json::json!({ "spec": { "devices": devices } })
}

/// Converts one API attribute; `raw` is the attribute's JSON, for list types the v1.34 structs
/// cannot carry. `versions` holds versions parsed before: one seen again is shared, not parsed
/// again (a parse was a tenth of building an allocator).
pub(crate) fn convert_attr<'s>(
    a: &'s k8s_openapi::api::resource::v1::DeviceAttribute,
    raw: Option<&serde_json::Value>,
    versions: &mut Vec<Semver>,
) -> Result<Given<'s>, String> {
    // No intermediate list: this runs for every attribute of every device on the cold path.
    let mut out: Option<Given<'s>> = None;
    let mut set = |v: Given<'s>| -> Result<(), String> {
        match out.replace(v) {
            None => Ok(()),
            Some(_) => Err("more than one value type is set".into()),
        }
    };
    if let Some(b) = a.bool {
        set(Given::Value(AttributeValue::Bool(b)))?;
    }
    if let Some(i) = a.int {
        set(Given::Value(AttributeValue::Int(i)))?;
    }
    if let Some(s) = &a.string {
        // Made a String only if a selector or constraint reads it.
        set(Given::Str(s))?;
    }
    if let Some(v) = &a.version {
        let parsed = match versions.iter().find(|k| k.as_str() == v) {
            Some(known) => known.clone(),
            None => {
                let new = Semver::parse(v).map_err(|e| format!("invalid semver {v:?}: {e}"))?;
                if versions.len() < VERSIONS_KEPT {
                    versions.push(new.clone());
                }
                new
            }
        };
        set(Given::Value(AttributeValue::Version(parsed)))?;
    }
    if let Some(raw) = raw {
        if let Some(list) = raw.get("ints") {
            let v: Vec<i64> = serde_json::from_value(list.clone())
                .map_err(|e| format!("ints must be a list of integers: {e}"))?;
            set(Given::Value(AttributeValue::Ints(v)))?;
        }
        if let Some(list) = raw.get("strings") {
            let v: Vec<String> = serde_json::from_value(list.clone())
                .map_err(|e| format!("strings must be a list of strings: {e}"))?;
            set(Given::Value(AttributeValue::Strings(v)))?;
        }
    }
    out.ok_or_else(|| "no value (expected one of bool, int, string, version, ints, strings)".into())
}
