//! From ResourceSlices to the pools and devices the search walks, the way the scheduler
//! gathers them: node scope first, then per `(driver, pool)` the newest generation, slices in
//! the order given.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};

use crate::allocator::{Allocator, ClassEntry, Pool, class_hash};
use crate::cel::{ProgramCache, Quantity, same_bytes};
use crate::device::{Device, Origin};
use crate::error::AllocError;
use crate::features::{Features, SchedulerBugs};
use crate::node::{Node, SliceScope, device_on_node, slice_scope};
use crate::source::{CounterUse, Known, Placement, SliceCounters, SliceInfo, Source};

fn slice_label(s: &ResourceSlice, i: usize) -> String {
    s.metadata
        .name
        .clone()
        .unwrap_or_else(|| format!("#{i} (unnamed)"))
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

/// How to build an [`Allocator`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The node to allocate for: only slices and devices it can reach are used, and the
    /// allocation's node selector names it. `None` takes every slice given to be on the node
    /// (a node's own slices, as `dranet check` reads them).
    pub node: Option<Node>,
    /// The scheduler's feature gates.
    pub features: Features,
    /// The scheduler's bugs to reproduce (none by default).
    pub bugs: SchedulerBugs,
    /// Compiled selectors to reuse across allocators, as the scheduler keeps its CEL cache;
    /// `None` compiles every DeviceClass and claim selector anew.
    pub programs: Option<Arc<ProgramCache>>,
}

impl<'a> Allocator<'a> {
    /// Builds the device set from ResourceSlices and the classes, every slice taken to be on
    /// the node, with 1.34's default features. Malformed slices (a device without a name, an
    /// attribute without a value, a bad version or quantity) are errors naming the slice and
    /// device.
    pub fn new(
        slices: &'a [ResourceSlice],
        classes: &'a [DeviceClass],
    ) -> Result<Self, AllocError> {
        Self::with_options(slices, classes, &Options::default())
    }

    /// Like [`Allocator::new`], for a given node and feature set: only the slices (and, with
    /// `perDeviceNodeSelection`, the devices) the node can reach are used, as the scheduler
    /// decides it ([`slice_scope`]).
    pub fn with_options(
        slices: &'a [ResourceSlice],
        classes: &'a [DeviceClass],
        options: &Options,
    ) -> Result<Self, AllocError> {
        build(slices, None, None, classes, options)
    }

    /// Like [`Allocator::with_options`], with each slice's JSON beside it (`raw[i]` is
    /// `slices[i]`'s), so list-valued attributes (`ints`, `strings`), which the v1.34 structs
    /// drop, are read; it borrows both. For slices that were parsed from JSON anyway, this
    /// costs no copy ([`Allocator::from_json`] parses and owns).
    pub fn with_json(
        slices: &'a [ResourceSlice],
        raw: &'a [serde_json::Value],
        classes: &'a [DeviceClass],
        options: &Options,
    ) -> Result<Self, AllocError> {
        build(slices, Some(raw), None, classes, options)
    }

    /// Like [`Allocator::new`] from the slices' JSON (or YAML turned into JSON), so list-valued
    /// attributes (`ints`, `strings`), which the v1.34 structs drop, are kept. The allocator
    /// owns what it needs: every device's attributes are indexed up front.
    pub fn from_json(
        slices: &[serde_json::Value],
        classes: &[DeviceClass],
    ) -> Result<Allocator<'static>, AllocError> {
        Allocator::from_json_with_options(slices, classes, &Options::default())
    }

    /// [`Allocator::from_json`] for a given node and feature set.
    pub fn from_json_with_options(
        slices: &[serde_json::Value],
        classes: &[DeviceClass],
        options: &Options,
    ) -> Result<Allocator<'static>, AllocError> {
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
        Ok(build(&parsed, Some(slices), None, classes, options)?.into_owned())
    }
}

/// Builds an allocator over `slices`; `raw` is their JSON, in the same order, when they were
/// given as JSON. `only` (positions in `slices`, ascending) limits it to those slices: the ones
/// that may be on the node, picked once for many nodes (the others are out of the node's scope
/// anyway, and looking at each of them for every node made a cluster's check quadratic).
pub(crate) fn build<'a>(
    slices: &'a [ResourceSlice],
    raw: Option<&'a [serde_json::Value]>,
    only: Option<&[usize]>,
    classes: &'a [DeviceClass],
    options: &Options,
) -> Result<Allocator<'a>, AllocError> {
    let features = options.features;
    let mut warnings = Vec::new();
    let picked: &mut dyn Iterator<Item = usize> = match only {
        Some(only) => &mut only.iter().copied(),
        None => &mut (0..slices.len()),
    };
    // The slices the node reaches, how, and whether devices of theirs have binding conditions.
    let mut visit: Vec<Visit> = Vec::with_capacity(only.map_or(slices.len(), <[usize]>::len));
    for i in picked {
        let s = &slices[i];
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
    let mut infos = Vec::with_capacity(visit.len());
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
                hash: class_hash(name),
                selectors: c.spec.selectors.as_deref().unwrap_or_default(),
                programs: OnceLock::new(),
                config: Cow::Borrowed(c.spec.config.as_deref().unwrap_or_default()),
                matches: OnceLock::new(),
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
