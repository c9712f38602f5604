//! From ResourceSlices to the pools and devices the search walks, the way the scheduler
//! gathers them: node scope first, then per `(driver, pool)` the newest generation, slices in
//! the order given.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceSelector, ResourceSlice};

use super::node::{SliceScope, device_on_node, slice_scope};
use super::one_or_many::OneOrMany;
use super::{AllocError, Allocator, ClassEntry, Device, Options, Origin, Pool};
use crate::cel::{
    AttrKey, AttributeValue, CelError, DeviceAttributes, Given, NameArena, Program, ProgramCache,
    Quantity, Scalar, Semver, same_bytes,
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
    slice: &'a ResourceSlice,
    device: &'a k8s_openapi::api::resource::v1::Device,
    raw: Option<&'a serde_json::Value>,
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
    fn check(&self, known: &mut Known<'a>) -> Result<(), String> {
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
pub(crate) struct SliceCounters {
    pub slice: String,
    /// Every counter of every set: the set, the counter, the total.
    pub totals: Vec<(String, String, Quantity)>,
}

/// What one device consumes from its slice's counters: (index into
/// [`SliceCounters::totals`], amount). Consumption of counters the slice does not declare is
/// dropped: the scheduler never checks it.
#[derive(Debug, Clone)]
pub(crate) struct CounterUse {
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

/// A selector list compiled, or the expression (empty for a selector without `cel`) that
/// does not compile and why.
pub(crate) type Programs = Result<OneOrMany<Arc<Program>>, (String, CelError)>;

/// Compiles a selector list; the error names the expression (empty when a selector has no
/// `cel`). Claims and classes are compiled as the API server admits them, cost limit included
/// ([`Program::compile`]): one it would refuse to store never reaches the scheduler, so
/// allocating it would answer a question no cluster asks. For every selector it admits, the
/// program is the scheduler's.
pub(crate) fn selector_programs(
    selectors: &[DeviceSelector],
    cache: Option<&ProgramCache>,
) -> Programs {
    let mut out = OneOrMany::Empty;
    for s in selectors {
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

/// Pools of at most this many devices have their names kept on the stack.
const SMALL_POOL: usize = 32;

/// Up to this many names, each is compared with those before it rather than sorted.
const FEW_NAMES: usize = 16;

/// The device names of one pool, in order, to find one given twice: on the stack for a pool
/// of up to [`SMALL_POOL`] devices (a list on the heap was one more allocation per allocator),
/// in a list beyond.
struct PoolNames<'a> {
    small: [(&'a str, usize); SMALL_POOL],
    len: usize,
    more: Vec<(&'a str, usize)>,
}

impl<'a> PoolNames<'a> {
    fn new() -> Self {
        PoolNames {
            small: [("", 0); SMALL_POOL],
            len: 0,
            more: Vec::new(),
        }
    }

    fn clear(&mut self) {
        self.len = 0;
        self.more.clear();
    }

    fn push(&mut self, name: &'a str) {
        if self.len < SMALL_POOL {
            self.small[self.len] = (name, self.len);
            self.len += 1;
            return;
        }
        if self.more.is_empty() {
            self.more.extend_from_slice(&self.small);
        }
        let at = self.more.len();
        self.more.push((name, at));
    }

    /// [`first_repeat`] of the names pushed: for a few, by comparing each with those before
    /// it, which costs less than sorting them.
    fn first_repeat(&mut self) -> Option<&'a str> {
        if !self.more.is_empty() {
            return first_repeat(&mut self.more);
        }
        let names = &mut self.small[..self.len];
        if names.len() > FEW_NAMES {
            return first_repeat(names);
        }
        (1..names.len())
            .find(|&j| {
                let b = names[j].0.as_bytes();
                names[..j].iter().any(|(a, _)| same_bytes(a.as_bytes(), b))
            })
            .map(|j| names[j].0)
    }
}

/// Sorts entries by name and keeps one per name, the last given, as collecting them into a
/// map would: a sorted list is cheaper to build, search and drop than a map for the few
/// DeviceClasses of a cluster.
fn by_name_last_wins<T>(entries: &mut Vec<T>, name: impl Fn(&T) -> &str) {
    // Stable: entries of one name stay in the order given.
    entries.sort_by(|a, b| name(a).cmp(name(b)));
    // `dedup_by` keeps the first of a run; the later one's value moves into it.
    entries.dedup_by(|later, kept| {
        let same = name(later) == name(kept);
        if same {
            std::mem::swap(later, kept);
        }
        same
    });
}

/// A slice the node reaches, as the pools are gathered.
#[derive(Debug, Clone, Copy)]
struct Visit {
    /// Index into the slices given.
    slice: usize,
    scope: SliceScope,
    /// Devices of it have binding conditions.
    binding: bool,
}

/// Where the run of `items` (grouped by `key`) starting at `at` ends.
fn run_end<'k, T>(items: &[T], at: usize, key: impl Fn(&T) -> (&'k str, &'k str)) -> usize {
    let k = key(&items[at]);
    let same = |(a, b): (&str, &str)| {
        same_bytes(a.as_bytes(), k.0.as_bytes()) && same_bytes(b.as_bytes(), k.1.as_bytes())
    };
    at + items[at..].iter().take_while(|i| same(key(i))).count()
}

/// The runs of `items` (grouped by `key`) of one key each, as ranges of `items`.
fn runs<'i, 'k, T>(
    items: &'i [T],
    key: impl Fn(&T) -> (&'k str, &'k str) + Copy + 'i,
) -> impl Iterator<Item = std::ops::Range<usize>> + 'i {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at == items.len() {
            return None;
        }
        let start = at;
        at = run_end(items, at, key);
        Some(start..at)
    })
}

/// Builds an allocator over `slices`; `raw` is their JSON, in the same order, when they were
/// given as JSON.
pub(crate) fn build<'a>(
    slices: &'a [ResourceSlice],
    raw: Option<&'a [serde_json::Value]>,
    classes: &'a [DeviceClass],
    options: &Options,
) -> Result<Allocator<'a>, AllocError> {
    let features = options.features;
    let mut warnings = Vec::new();
    // The slices the node reaches, how, and whether devices of theirs have binding conditions.
    let mut visit: Vec<Visit> = Vec::with_capacity(slices.len());
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
        if scope == SliceScope::None {
            if !features.partitionable_devices && s.spec.per_device_node_selection.is_some() {
                warnings.push(format!(
                    "ResourceSlice {}: perDeviceNodeSelection needs the DRAPartitionableDevices feature, ignored",
                    slice_label(s, i)
                ));
            }
            continue;
        }
        let binding = s
            .spec
            .devices
            .iter()
            .flatten()
            .any(|d| d.binding_conditions.is_some());
        visit.push(Visit {
            slice: i,
            scope,
            binding,
        });
    }
    let key = |v: &Visit| {
        let s = &slices[v.slice];
        (s.spec.driver.as_str(), s.spec.pool.name.as_str())
    };
    let generation = |v: &Visit| slices[v.slice].spec.pool.generation;
    // Grouped by pool in (driver, pool) order, each pool's slices in the order the scheduler
    // adds them: those without binding conditions first (it prefers their devices), each kind
    // in the order given (the sort is stable).
    visit.sort_by(|x, y| (key(x), x.binding).cmp(&(key(y), y.binding)));
    // Per pool, the newest generation wins; the others are named in the order given.
    let (mut kept, mut at) = (0, 0);
    let mut outdated: Vec<usize> = Vec::new();
    while at < visit.len() {
        let run = at..run_end(&visit, at, key);
        at = run.end;
        let newest = visit[run.clone()].iter().map(generation).max().unwrap_or(0);
        for j in run {
            let v = visit[j];
            if generation(&v) == newest {
                visit[kept] = v;
                kept += 1;
            } else {
                outdated.push(v.slice);
            }
        }
    }
    visit.truncate(kept);
    outdated.sort_unstable();
    for i in outdated {
        let s = &slices[i];
        warnings.push(format!(
            "ResourceSlice {}: pool {}/{} generation {} is outdated, ignored",
            slice_label(s, i),
            s.spec.driver,
            s.spec.pool.name,
            s.spec.pool.generation
        ));
    }

    let device_total: usize = visit
        .iter()
        .map(|v| slices[v.slice].spec.devices.as_ref().map_or(0, Vec::len))
        .sum();
    let mut devices = Vec::with_capacity(device_total);
    let mut out_pools = Vec::new();
    let mut infos = Vec::with_capacity(slices.len());
    let mut counter_sets: Vec<SliceCounters> = Vec::new();
    let mut counters_by_slice: HashMap<String, usize> = HashMap::new();
    let mut known = Known::default();
    let mut names = PoolNames::new();
    // Pools in (driver, pool) order, those with binding conditions last.
    for binding in [false, true] {
        for run in runs(&visit, key) {
            let pool_slices = &visit[run];
            if pool_slices.iter().any(|v| v.binding) != binding {
                continue;
            }
            let pk = key(&pool_slices[0]);
            let first = &slices[pool_slices[0].slice];
            let want = first.spec.pool.resource_slice_count;
            let incomplete = (pool_slices.len() as i64 != want).then(|| {
                format!(
                    "is incomplete (generation {}: {} of {want} slices present, being updated)",
                    first.spec.pool.generation,
                    pool_slices.len()
                )
            });
            if let Some(why) = &incomplete {
                warnings.push(format!("pool {}/{} {why}", pk.0, pk.1));
            }
            let start = devices.len();
            names.clear();
            for v in pool_slices {
                let si = v.slice;
                let s = &slices[si];
                let raw = raw.and_then(|r| r.get(si));
                // The label is made only for an error.
                let bad = |reason: String| AllocError::InvalidSlice {
                    slice: slice_label(s, si),
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
                    names.push(&d.name);
                    let source = Source {
                        slice: s,
                        device: d,
                        raw: raw.and_then(|r| r["spec"]["devices"].get(j)?.get("attributes")),
                    };
                    source
                        .check(&mut known)
                        .map_err(|e| bad(format!("device {}: {e}", d.name)))?;
                    let on_node = match (v.scope, &options.node) {
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
            let invalid = names
                .first_repeat()
                .map(|dup| format!("duplicate device name {dup}"));
            out_pools.push(Pool {
                driver: Cow::Borrowed(pk.0),
                name: Cow::Borrowed(pk.1),
                incomplete,
                invalid,
                devices: start..devices.len(),
            });
        }
    }
    let mut classes: Vec<ClassEntry> = classes
        .iter()
        .map(|c| {
            let name = c.metadata.name.as_deref().unwrap_or_default();
            ClassEntry {
                name: Cow::Borrowed(name),
                hash: super::claim::class_hash(name),
                selectors: c.spec.selectors.as_deref().unwrap_or_default(),
                programs: OnceLock::new(),
                config: Cow::Borrowed(c.spec.config.as_deref().unwrap_or_default()),
                verdicts: OnceLock::new(),
            }
        })
        .collect();
    by_name_last_wins(&mut classes, |c| &c.name);
    Ok(Allocator {
        devices,
        pools: out_pools,
        order: Vec::new(),
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
    use super::{PoolNames, SMALL_POOL, by_name_last_wins, first_repeat};

    fn repeat(names: &[&'static str]) -> Option<&'static str> {
        let mut v: Vec<(&str, usize)> = names.iter().copied().zip(0..).collect();
        let sorted = first_repeat(&mut v);
        // Kept on the stack, the names give the same answer.
        let mut pool = PoolNames::new();
        names.iter().for_each(|n| pool.push(n));
        assert_eq!(pool.first_repeat(), sorted, "{names:?}");
        sorted
    }

    #[test]
    fn one_entry_per_name_the_last_given_as_a_map_keeps() {
        let given = [("b", 1), ("a", 2), ("b", 3), ("c", 4), ("b", 5), ("a", 6)];
        let mut v: Vec<(String, i32)> = given.iter().map(|(n, x)| (n.to_string(), *x)).collect();
        by_name_last_wins(&mut v, |e| &e.0);
        let map: std::collections::BTreeMap<String, i32> =
            given.iter().map(|(n, x)| (n.to_string(), *x)).collect();
        assert_eq!(v, map.into_iter().collect::<Vec<_>>());
        assert_eq!(v, [("a".into(), 6), ("b".into(), 5), ("c".into(), 4)]);
        let mut none: Vec<(String, i32)> = Vec::new();
        by_name_last_wins(&mut none, |e| &e.0);
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

    /// Small pools (names on the stack) and large ones (in a list) report the same repeat as
    /// a walk in order, also when the list is reused for another pool.
    #[test]
    fn pools_of_any_size_report_the_first_repeat() {
        let before: Vec<String> = (0..SMALL_POOL + 9).map(|i| format!("x{}", i % 7)).collect();
        for n in 1..=2 * SMALL_POOL + 3 {
            for (at, of) in [
                (None, 0),
                (Some(n - 1), 0),
                (Some(n / 2), n / 3),
                (Some(n - 1), n.saturating_sub(2)),
            ] {
                let mut names: Vec<String> = (0..n).map(|i| format!("dev-{i}")).collect();
                if let Some(at) = at.filter(|&at| at > of) {
                    names[at] = names[of].clone();
                }
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let walk = (1..n)
                    .find(|&j| refs[..j].contains(&refs[j]))
                    .map(|j| refs[j]);
                // The names of a larger pool before, to reuse the list.
                let mut pool = PoolNames::new();
                before.iter().for_each(|b| pool.push(b));
                pool.clear();
                refs.iter().for_each(|r| pool.push(r));
                assert_eq!(pool.first_repeat(), walk, "{n} names, {at:?} repeats {of}");
            }
        }
    }
}
