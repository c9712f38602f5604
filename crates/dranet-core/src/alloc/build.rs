//! From ResourceSlices to the pools and devices the search walks, the way the scheduler
//! gathers them: node scope first, then per `(driver, pool)` the newest generation, slices in
//! the order given.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceSelector, ResourceSlice};

use super::node::{SliceScope, device_on_node, slice_scope};
use super::{AllocError, Allocator, ClassEntry, Device, Options, Origin, Pool};
use crate::cel::{
    AttrKey, AttributeValue, CelError, DeviceAttributes, Given, NameArena, Program, ProgramCache,
    Quantity, Scalar, Semver, same_bytes,
};

/// Where a slice's (or, with `perDeviceNodeSelection`, a device's) devices can be used.
#[derive(Debug, Clone, Default)]
pub(super) struct Placement<'a> {
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
pub(super) struct SliceInfo<'a> {
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
pub(super) struct Source<'a> {
    slice: &'a ResourceSlice,
    device: &'a k8s_openapi::api::resource::v1::Device,
    raw: Option<&'a serde_json::Value>,
}

/// The entry of `map` for the attribute (or capacity) `name` of `domain`, as an index of the
/// device built by `driver` would find it: published unqualified (in the driver's domain) or
/// qualified (`domain/name`).
fn find<'m, V>(
    map: &'m BTreeMap<String, V>,
    driver: &str,
    domain: &str,
    name: &str,
) -> Option<&'m V> {
    // A name is split at its first '/': a domain with one cannot be found, and neither can an
    // unqualified name with one (it would be a qualified name).
    if has_slash(domain) {
        return None;
    }
    if domain == driver
        && !has_slash(name)
        && let Some(v) = get(map, name)
    {
        return Some(v);
    }
    qualified(domain, name, |q| get(map, q))
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
        let a = find(
            self.device.attributes.as_ref()?,
            self.driver(),
            &key.domain,
            &key.name,
        )?;
        Some(match (a.bool, a.int, &a.string) {
            (Some(b), None, None) => Scalar::Bool(b),
            (None, Some(i), None) => Scalar::Int(i),
            (None, None, Some(s)) => Scalar::Str(s),
            // A version, a list (only in the JSON), or (refused at build) several values.
            _ => Scalar::Other,
        })
    }

    /// The device's attribute index. Every error names what is wrong.
    pub fn index(&self) -> Result<DeviceAttributes, String> {
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
        let mut index = arena.index(self.driver(), &mut attrs, &caps)?;
        index.set_names(&arena.finish());
        Ok(index)
    }

    /// Checks what [`Source::index`] would refuse, without building the index: every
    /// attribute has exactly one value (versions and lists that parse), every capacity is a
    /// quantity, and no two names are one qualified name. `known` holds the versions and
    /// quantities seen valid before, which need no parse again.
    fn check(&self, driver: &str, known: &mut Known<'a>) -> Result<(), String> {
        let d = self.device;
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
                let set = usize::from(a.bool.is_some())
                    + usize::from(a.int.is_some())
                    + usize::from(a.string.is_some())
                    + usize::from(a.version.is_some());
                let simple = set == 1
                    && raw.is_none_or(|r| r.get("ints").is_none() && r.get("strings").is_none());
                if !simple {
                    // The rare cases take the conversion, which says what is wrong.
                    convert_attr(a, raw, &mut Vec::new())
                        .map_err(|e| format!("attribute {name}: {e}"))?;
                } else if let Some(v) = &a.version
                    && !known.versions.contains(v)
                {
                    Semver::check(v)
                        .map_err(|e| format!("attribute {name}: invalid semver {v:?}: {e}"))?;
                    known.versions.keep(v);
                }
            }
        }
        if let Some(map) = &d.capacity {
            for (name, c) in map {
                own_caps |= own(name);
                let text = c.value.0.as_str();
                if !known.quantities.contains(text) {
                    Quantity::parse(text)
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
struct Known<'a> {
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

/// A slice's shared counters (partitionable devices): counter sets by name, each counter's
/// total. Keyed by slice name, as the scheduler keys them.
#[derive(Debug, Clone)]
pub(super) struct SliceCounters {
    pub slice: String,
    /// Every counter of every set: the set, the counter, the total.
    pub totals: Vec<(String, String, Quantity)>,
}

/// What one device consumes from its slice's counters: (index into
/// [`SliceCounters::totals`], amount). Consumption of counters the slice does not declare is
/// dropped: the scheduler never checks it.
#[derive(Debug, Clone)]
pub(super) struct CounterUse {
    pub owner: Option<usize>,
    pub uses: Vec<(usize, Quantity)>,
}

fn slice_label(s: &ResourceSlice, i: usize) -> String {
    s.metadata
        .name
        .clone()
        .unwrap_or_else(|| format!("#{i} (unnamed)"))
}

/// Most distinct versions (and quantities) remembered while checking an allocator's devices or
/// indexing one: a node's devices publish a few (driver, firmware, compute capability), each on
/// many devices.
const VERSIONS_KEPT: usize = 16;

/// Converts one API attribute; `raw` is the attribute's JSON, for list types the v1.34 structs
/// cannot carry. `versions` holds versions parsed before: one seen again is shared, not parsed
/// again (a parse was a tenth of building an allocator).
fn convert_attr<'s>(
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

/// Compiles a selector list; the error names the expression (empty when a selector has no
/// `cel`). Claims and classes are compiled as the API server admits them, cost limit included
/// ([`Program::compile`]): one it would refuse to store never reaches the scheduler, so
/// allocating it would answer a question no cluster asks. For every selector it admits, the
/// program is the scheduler's.
pub(super) fn selector_programs(
    selectors: &Option<Vec<DeviceSelector>>,
    cache: Option<&ProgramCache>,
) -> Result<Vec<Arc<Program>>, (String, CelError)> {
    let mut out = Vec::with_capacity(selectors.as_ref().map_or(0, Vec::len));
    for s in selectors.iter().flatten() {
        match &s.cel {
            Some(c) => {
                let program = match cache {
                    Some(cache) => cache.compile(&c.expression),
                    None => Program::compile(&c.expression).map(Arc::new),
                };
                out.push(program.map_err(|e| (c.expression.clone(), e))?)
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

/// The first name (in the order given) that repeats an earlier one. Sorting finds repeats in
/// n log n without hashing every device name, which showed as a tenth of building a
/// 128-device allocator.
fn first_repeat<'a>(names: &mut [(&'a str, usize)]) -> Option<&'a str> {
    // Sorted by name, then by position: within a run of one name, every entry after the first
    // is a repeat, and the earliest of those over all runs is the first repeat.
    names.sort_unstable();
    names
        .windows(2)
        .filter(|w| w[0].0 == w[1].0)
        .min_by_key(|w| w[1].1)
        .map(|w| w[1].0)
}

/// Sorts `(name, value)` pairs by name and keeps one per name, the last given, as collecting
/// them into a map would: a sorted list is cheaper to build, search and drop than a map for
/// the few DeviceClasses of a cluster.
fn by_name_last_wins<T>(entries: &mut Vec<(String, T)>) {
    // Stable: entries of one name stay in the order given.
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    // `dedup_by` keeps the first of a run; the later one's value moves into it.
    entries.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            std::mem::swap(later, kept);
        }
        same
    });
}

struct PoolBuild {
    generation: i64,
    /// Indexes into the input, in the order the scheduler adds them.
    slices: Vec<usize>,
}

/// Builds an allocator over `slices`; `raw` is their JSON, in the same order, when they were
/// given as JSON.
pub(super) fn build<'a>(
    slices: &'a [ResourceSlice],
    raw: Option<&'a [serde_json::Value]>,
    classes: &[DeviceClass],
    options: &Options,
) -> Result<Allocator<'a>, AllocError> {
    let features = options.features;
    let mut warnings = Vec::new();
    // Which slices the node reaches, and how.
    let mut scopes = Vec::with_capacity(slices.len());
    for (i, s) in slices.iter().enumerate() {
        if s.spec.driver.is_empty() {
            return Err(AllocError::InvalidSlice {
                slice: slice_label(s, i),
                reason: "spec.driver is empty".into(),
            });
        }
        let scope = match &options.node {
            Some(node) => slice_scope(s, node, &features)?,
            None if !features.partitionable_devices
                && s.spec.per_device_node_selection.is_some() =>
            {
                SliceScope::None
            }
            None if s.spec.per_device_node_selection == Some(true) => SliceScope::PerDevice,
            None => SliceScope::All,
        };
        if scope == SliceScope::None
            && !features.partitionable_devices
            && s.spec.per_device_node_selection.is_some()
        {
            warnings.push(format!(
                "ResourceSlice {}: perDeviceNodeSelection needs the DRAPartitionableDevices feature, ignored",
                slice_label(s, i)
            ));
        }
        scopes.push(scope);
    }
    // Pools: newest generation wins; slices with binding conditions are added last, as the
    // scheduler prefers the devices without.
    let has_binding = |s: &ResourceSlice| {
        s.spec
            .devices
            .iter()
            .flatten()
            .any(|d| d.binding_conditions.is_some())
    };
    let mut pools: BTreeMap<(&str, &str), PoolBuild> = BTreeMap::new();
    let visible = |binding: bool| {
        (0..slices.len())
            .filter(|&i| scopes[i] != SliceScope::None)
            .filter(move |&i| has_binding(&slices[i]) == binding)
    };
    for i in visible(false).chain(visible(true)) {
        let s = &slices[i];
        let key = (s.spec.driver.as_str(), s.spec.pool.name.as_str());
        let g = s.spec.pool.generation;
        match pools.get_mut(&key) {
            None => {
                pools.insert(
                    key,
                    PoolBuild {
                        generation: g,
                        slices: vec![i],
                    },
                );
            }
            Some(p) if g < p.generation => {}
            Some(p) => {
                if g > p.generation {
                    p.generation = g;
                    p.slices.clear();
                }
                p.slices.push(i);
            }
        }
    }
    for (i, s) in slices.iter().enumerate() {
        let key = (s.spec.driver.as_str(), s.spec.pool.name.as_str());
        if let Some(p) = pools.get(&key)
            && scopes[i] != SliceScope::None
            && s.spec.pool.generation < p.generation
        {
            warnings.push(format!(
                "ResourceSlice {}: pool {}/{} generation {} is outdated, ignored",
                slice_label(s, i),
                key.0,
                key.1,
                s.spec.pool.generation
            ));
        }
    }
    // Pools in (driver, pool) order, those with binding conditions last.
    let mut keys: Vec<(&str, &str)> = pools.keys().copied().collect();
    keys.sort_by_key(|k| pools[k].slices.iter().any(|&i| has_binding(&slices[i])));

    let device_total: usize = pools
        .values()
        .flat_map(|p| &p.slices)
        .map(|&i| slices[i].spec.devices.as_ref().map_or(0, Vec::len))
        .sum();
    let mut devices = Vec::with_capacity(device_total);
    let mut out_pools = Vec::with_capacity(keys.len());
    let mut infos = Vec::with_capacity(slices.len());
    let mut counter_sets: Vec<SliceCounters> = Vec::new();
    let mut counters_by_slice: HashMap<String, usize> = HashMap::new();
    let mut known = Known::default();
    // The device names of one pool at a time, to find a name given twice.
    let mut names: Vec<(&str, usize)> = Vec::new();
    for key in &keys {
        let pb = &pools[key];
        let first = &slices[pb.slices[0]];
        let want = first.spec.pool.resource_slice_count;
        let incomplete = (pb.slices.len() as i64 != want).then(|| {
            format!(
                "is incomplete (generation {}: {} of {want} slices present, being updated)",
                pb.generation,
                pb.slices.len()
            )
        });
        if let Some(why) = &incomplete {
            warnings.push(format!("pool {}/{} {why}", key.0, key.1));
        }
        let start = devices.len();
        let pool_devices: usize = pb
            .slices
            .iter()
            .map(|&i| slices[i].spec.devices.as_ref().map_or(0, Vec::len))
            .sum();
        names.clear();
        names.reserve(pool_devices);
        for &si in &pb.slices {
            let s = &slices[si];
            let raw = raw.and_then(|r| r.get(si));
            let label = slice_label(s, si);
            let bad = |reason: String| AllocError::InvalidSlice {
                slice: label.clone(),
                reason,
            };
            let slice_index = infos.len();
            let per_device = s.spec.per_device_node_selection == Some(true);
            infos.push(SliceInfo {
                name: Cow::Borrowed(s.metadata.name.as_deref().unwrap_or_default()),
                placement: Placement {
                    node_name: s.spec.node_name.as_deref().map(Cow::Borrowed),
                    node_selector: s.spec.node_selector.as_ref().map(Cow::Borrowed),
                },
            });
            let owner = match &s.spec.shared_counters {
                Some(sets) if !sets.is_empty() => {
                    let name = s.metadata.name.clone().unwrap_or_default();
                    // The scheduler keys counters by slice name: the first slice of a name wins.
                    Some(*counters_by_slice.entry(name.clone()).or_insert_with(|| {
                        counter_sets.push(SliceCounters {
                            slice: name,
                            totals: Vec::new(),
                        });
                        counter_sets.len() - 1
                    }))
                }
                _ => None,
            };
            if let (Some(o), Some(sets)) = (owner, &s.spec.shared_counters)
                && counter_sets[o].totals.is_empty()
            {
                for set in sets {
                    for (name, c) in &set.counters {
                        let q = Quantity::parse(&c.value.0).map_err(|e| {
                            bad(format!(
                                "sharedCounters {}: counter {name}: invalid quantity {:?}: {e}",
                                set.name, c.value.0
                            ))
                        })?;
                        counter_sets[o]
                            .totals
                            .push((set.name.clone(), name.clone(), q));
                    }
                }
            }
            for (j, d) in s.spec.devices.iter().flatten().enumerate() {
                if d.name.is_empty() {
                    return Err(bad(format!("device #{j} has no name")));
                }
                names.push((d.name.as_str(), names.len()));
                let source = Source {
                    slice: s,
                    device: d,
                    raw: raw.and_then(|r| r["spec"]["devices"].get(j)?.get("attributes")),
                };
                source
                    .check(&s.spec.driver, &mut known)
                    .map_err(|e| bad(format!("device {}: {e}", d.name)))?;
                let on_node = match (scopes[si], &options.node) {
                    (SliceScope::PerDevice, Some(node)) => device_on_node(d, node)
                        .map_err(|e| bad(format!("device {}: {e}", d.name)))?,
                    _ => true,
                };
                let placement = per_device.then(|| {
                    Box::new(Placement {
                        node_name: d.node_name.as_deref().map(Cow::Borrowed),
                        node_selector: d.node_selector.as_ref().map(Cow::Borrowed),
                    })
                });
                let counters = match &d.consumes_counters {
                    Some(cs) if !cs.is_empty() => {
                        let mut uses = Vec::new();
                        for c in cs {
                            for (name, q) in &c.counters {
                                let q = Quantity::parse(&q.value.0).map_err(|e| {
                                    bad(format!(
                                        "device {}: consumesCounters {}: counter {name}: invalid quantity {:?}: {e}",
                                        d.name, c.counter_set, q.value.0
                                    ))
                                })?;
                                let at = owner.and_then(|o| {
                                    counter_sets[o]
                                        .totals
                                        .iter()
                                        .position(|(s, n, _)| *s == c.counter_set && n == name)
                                });
                                if let Some(at) = at {
                                    uses.push((at, q));
                                }
                            }
                        }
                        Some(Box::new(CounterUse { owner, uses }))
                    }
                    _ => None,
                };
                let binding = d.binding_conditions.is_some();
                devices.push(Device {
                    origin: Origin::Slice(source),
                    attributes: OnceLock::new(),
                    allow_multiple_allocations: d.allow_multiple_allocations.unwrap_or(false),
                    on_node,
                    binding,
                    // Slices are counted in u32 as the API counts them (resourceSliceCount).
                    slice: u32::try_from(slice_index).unwrap_or(u32::MAX),
                    counters,
                    placement,
                });
            }
        }
        let invalid = first_repeat(&mut names).map(|dup| format!("duplicate device name {dup}"));
        out_pools.push(Pool {
            driver: Cow::Borrowed(key.0),
            name: Cow::Borrowed(key.1),
            incomplete,
            invalid,
            devices: start..devices.len(),
        });
    }
    let mut classes: Vec<(String, ClassEntry)> = classes
        .iter()
        .map(|c| {
            (
                c.metadata.name.clone().unwrap_or_default(),
                ClassEntry {
                    programs: selector_programs(&c.spec.selectors, options.programs.as_deref()),
                    config: c.spec.config.clone().unwrap_or_default(),
                    verdicts: OnceLock::new(),
                },
            )
        })
        .collect();
    by_name_last_wins(&mut classes);
    let order = (0..out_pools.len()).collect();
    Ok(Allocator {
        devices,
        pools: out_pools,
        order,
        slices: infos,
        index: OnceLock::new(),
        classes,
        features,
        bugs: options.bugs,
        node: options.node.clone(),
        counter_sets,
        warnings,
        programs: options.programs.clone(),
        claims: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::{by_name_last_wins, first_repeat};

    fn repeat(names: &[&'static str]) -> Option<&'static str> {
        let mut v: Vec<(&str, usize)> = names.iter().copied().zip(0..).collect();
        first_repeat(&mut v)
    }

    #[test]
    fn one_entry_per_name_the_last_given_as_a_map_keeps() {
        let given = [("b", 1), ("a", 2), ("b", 3), ("c", 4), ("b", 5), ("a", 6)];
        let mut v: Vec<(String, i32)> = given.iter().map(|(n, x)| (n.to_string(), *x)).collect();
        by_name_last_wins(&mut v);
        let map: std::collections::BTreeMap<String, i32> =
            given.iter().map(|(n, x)| (n.to_string(), *x)).collect();
        assert_eq!(v, map.into_iter().collect::<Vec<_>>());
        assert_eq!(v, [("a".into(), 6), ("b".into(), 5), ("c".into(), 4)]);
        let mut none: Vec<(String, i32)> = Vec::new();
        by_name_last_wins(&mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn the_first_name_to_repeat_in_order_is_reported() {
        assert_eq!(repeat(&["a", "b", "c"]), None);
        assert_eq!(repeat(&[]), None);
        assert_eq!(repeat(&["a", "b", "a"]), Some("a"));
        // `c` repeats at position 3, before `a` repeats at 4: `c` is reported, as a walk in
        // order would report it.
        assert_eq!(repeat(&["a", "c", "b", "c", "a"]), Some("c"));
        assert_eq!(repeat(&["z", "y", "y", "z"]), Some("y"));
    }
}
