//! From ResourceSlices to the pools and devices the search walks, the way the scheduler
//! gathers them: node scope first, then per `(driver, pool)` the newest generation, slices in
//! the order given.

use std::borrow::Cow;
use std::sync::OnceLock;

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};

use crate::allocator::{Allocator, ClassEntry, Pool, class_hash};
use crate::capacity::{self, Capacities};
use crate::cel::{Quantity, same_bytes};
use crate::device::{Device, Origin};
use crate::error::AllocError;
use crate::gather::{self, Plan, PoolPlan, Visit, slice_label};
use crate::options::Options;
use crate::source::{CounterKey, CounterUse, Known, Placement, PoolCounters, SliceInfo, Source};

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

impl<'a> Allocator<'a> {
    /// Builds the device set from ResourceSlices and the classes, every slice taken to be on
    /// the node, for the newest Kubernetes version ([`Options::default`]). Malformed slices (a device without a name, an
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
    /// decides it ([`slice_scope`](crate::slice_scope)).
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
        let parsed = slices
            .iter()
            .enumerate()
            .map(|(i, v)| parse_slice(i, v))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(build(&parsed, Some(slices), None, classes, options)?.into_owned())
    }
}

/// The `i`th slice's JSON as the typed slice, or why not, naming the slice (its name, else its
/// position).
pub(crate) fn parse_slice(i: usize, v: &serde_json::Value) -> Result<ResourceSlice, AllocError> {
    use serde::Deserialize;
    ResourceSlice::deserialize(v).map_err(|e| AllocError::InvalidSlice {
        slice: v["metadata"]["name"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("#{i}")),
        reason: e.to_string(),
    })
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
    options.check()?;
    for (i, s) in slices.iter().enumerate() {
        if s.spec.driver.is_empty() {
            return Err(AllocError::InvalidSlice {
                slice: slice_label(s, i),
                reason: "spec.driver is empty".into(),
            });
        }
    }
    let whole_pools = options.version.gathers_whole_pools();
    // 1.35+ reads every slice of a pool, whichever node it is for, to know whether the pool is
    // complete: `only` then holds every slice of the node's pools.
    let mut plan = if whole_pools {
        gather::whole_pools(slices, only, options)?
    } else {
        gather::node_slices(slices, only, options)?
    };
    let mut b = Builder {
        slices,
        raw,
        options,
        devices: Vec::with_capacity(
            plan.visits
                .iter()
                .map(|v| slices[v.slice].spec.devices.as_ref().map_or(0, Vec::len))
                .sum(),
        ),
        pools: Vec::with_capacity(plan.pools.len()),
        infos: Vec::with_capacity(plan.visits.len()),
        counter_keys: Vec::new(),
        known: Known::default(),
        names: PoolNames::new(),
        capacities: Vec::new(),
    };
    let mut warnings = std::mem::take(&mut plan.warnings);
    let mut binding: Vec<bool> = Vec::with_capacity(plan.pools.len());
    for p in &plan.pools {
        let (driver, pool) = {
            let s = &slices[p.first];
            (s.spec.driver.as_str(), s.spec.pool.name.as_str())
        };
        if let Some(why) = &p.incomplete {
            warnings.push(format!("pool {driver}/{pool} {why}"));
        }
        let visits = &plan.visits[p.slices.clone()];
        let start = b.devices.len();
        let (invalid, counters) = if whole_pools {
            // 1.35+: an incomplete or invalid pool is not searched; its devices are not read.
            if p.incomplete.is_some() {
                (None, None)
            } else if let Some(dup) = b.invalid_names(visits) {
                (Some(dup), None)
            } else {
                match b.pool_counters(pool, p, &plan)? {
                    Err(why) => (Some(why), None),
                    Ok(counters) => {
                        b.read_devices(visits, DeviceCounters::Pool(counters.as_ref()))?;
                        (None, counters.map(Box::new))
                    }
                }
            }
        } else {
            b.names.clear();
            b.read_devices(visits, DeviceCounters::Slice)?;
            (
                b.names
                    .first_repeat()
                    .map(|dup| format!("duplicate device name {dup}")),
                None,
            )
        };
        binding.push(visits.iter().any(|v| v.binding));
        b.pools.push(Pool {
            driver: Cow::Borrowed(driver),
            name: Cow::Borrowed(pool),
            incomplete: p.incomplete.clone(),
            invalid,
            devices: start..b.devices.len(),
            counters,
        });
    }
    // 1.36 puts pools with binding conditions last, but an invalid pool keeps no devices, so
    // it stays in (driver, pool) order among the others (1.36.3's allocbench, seeds 118, 1028).
    let mut order = Vec::new();
    if options.version.sorts_pools()
        && b.pools
            .iter()
            .zip(&binding)
            .any(|(p, b)| *b && p.invalid.is_some())
    {
        order = (0..b.pools.len()).collect();
        let pools = &b.pools;
        order.sort_by(|&x, &y| {
            let key = |i: usize| {
                let p = &pools[i];
                (binding[i] && p.invalid.is_none(), &p.driver, &p.name)
            };
            key(x).cmp(&key(y))
        });
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
    let Builder {
        devices,
        pools,
        infos,
        counter_keys,
        capacities,
        ..
    } = b;
    Ok(Allocator {
        devices,
        pools,
        order,
        slices: infos,
        index: OnceLock::new(),
        classes,
        version: options.version,
        features: options.features,
        bugs: options.bugs,
        node: options.node.clone(),
        counter_keys,
        capacities,
        warnings,
        programs: options.programs.clone(),
        claims: Default::default(),
    })
}

/// Where a pool's devices take their counters from.
#[derive(Clone, Copy)]
enum DeviceCounters<'p> {
    /// 1.34: the counter sets of the device's own slice.
    Slice,
    /// 1.35+: the pool's (none when it declares none).
    Pool(Option<&'p PoolCounters>),
}

/// What [`build`] assembles, pool by pool.
struct Builder<'a, 'o> {
    slices: &'a [ResourceSlice],
    raw: Option<&'a [serde_json::Value]>,
    options: &'o Options,
    devices: Vec<Device<'a>>,
    pools: Vec<Pool<'a>>,
    infos: Vec<SliceInfo<'a>>,
    counter_keys: Vec<CounterKey>,
    known: Known<'a>,
    names: PoolNames<'a>,
    /// Per device, with consumable capacity: its capacities and their policies.
    capacities: Vec<Capacities>,
}

impl<'a> Builder<'a, '_> {
    fn bad(&self, si: usize, reason: String) -> AllocError {
        AllocError::InvalidSlice {
            slice: slice_label(&self.slices[si], si),
            reason,
        }
    }

    /// The first device name given twice among the slices (1.35+, before reading them).
    fn invalid_names(&mut self, visits: &[Visit]) -> Option<String> {
        let slices = self.slices;
        self.names.clear();
        for v in visits {
            for d in slices[v.slice].spec.devices.iter().flatten() {
                self.names.push(&d.name);
            }
        }
        self.names
            .first_repeat()
            .map(|dup| format!("duplicate device name {dup}"))
    }

    /// The counter key of `key`, made when first needed.
    fn counter_key(&mut self, key: &str) -> usize {
        match self.counter_keys.iter().position(|k| k.key == key) {
            Some(i) => i,
            None => {
                self.counter_keys.push(CounterKey {
                    key: key.to_string(),
                    names: Vec::new(),
                    totals: Vec::new(),
                });
                self.counter_keys.len() - 1
            }
        }
    }

    /// The index of (set, counter) under key `k`, added when new.
    fn counter_name(&mut self, k: usize, set: &str, counter: &str) -> usize {
        let names = &mut self.counter_keys[k].names;
        match names.iter().position(|(s, c)| s == set && c == counter) {
            Some(i) => i,
            None => {
                names.push((set.to_string(), counter.to_string()));
                names.len() - 1
            }
        }
    }

    /// 1.35+: the pool's counters from its counter slices, checked as the scheduler checks them
    /// (`Err`: why the pool is invalid): a counter set declared twice, a device consuming a set
    /// or counter the pool does not declare. `None` without partitionable devices or counters.
    #[allow(clippy::type_complexity)]
    fn pool_counters(
        &mut self,
        pool_name: &str,
        p: &PoolPlan,
        plan: &Plan,
    ) -> Result<Result<Option<PoolCounters>, String>, AllocError> {
        let slices = self.slices;
        if !self.options.features.partitionable_devices {
            return Ok(Ok(None));
        }
        let mut sets: Vec<(&str, Vec<(&str, Quantity)>)> = Vec::new();
        for &si in &plan.extra[p.counter_slices.clone()] {
            for set in slices[si].spec.shared_counters.iter().flatten() {
                if sets.iter().any(|(n, _)| *n == set.name) {
                    return Ok(Err(format!("duplicate counter set name {}", set.name)));
                }
                let mut counters = Vec::new();
                for (name, c) in &set.counters {
                    let q = Quantity::parse(&c.value.0).map_err(|e| {
                        self.bad(
                            si,
                            format!(
                                "sharedCounters {}: counter {name}: invalid quantity {:?}: {e}",
                                set.name, c.value.0
                            ),
                        )
                    })?;
                    counters.push((name.as_str(), q));
                }
                sets.push((&set.name, counters));
            }
        }
        // Every device of the pool's slices (the node's, counter slices and the others)
        // consumes only what the pool declares.
        let all = plan.visits[p.slices.clone()]
            .iter()
            .map(|v| v.slice)
            .chain(plan.extra[p.counter_slices.clone()].iter().copied())
            .chain(plan.extra[p.outside.clone()].iter().copied());
        for si in all {
            for d in slices[si].spec.devices.iter().flatten() {
                for c in d.consumes_counters.iter().flatten() {
                    let Some((_, counters)) = sets.iter().find(|(n, _)| *n == c.counter_set) else {
                        return Ok(Err(format!("counter set {} not found", c.counter_set)));
                    };
                    if let Some(name) = c
                        .counters
                        .keys()
                        .find(|n| !counters.iter().any(|(x, _)| x == *n))
                    {
                        return Ok(Err(format!(
                            "counter {name} not found in counter set {}",
                            c.counter_set
                        )));
                    }
                }
            }
        }
        if sets.is_empty() {
            return Ok(Ok(None));
        }
        let key = self.counter_key(pool_name);
        let mut totals = Vec::new();
        for (set, counters) in &sets {
            for (name, q) in counters {
                totals.push((self.counter_name(key, set, name), *q));
            }
        }
        let mut outside = Vec::new();
        for &si in &plan.extra[p.outside.clone()] {
            for d in slices[si].spec.devices.iter().flatten() {
                let uses = self.uses(si, d, key)?;
                if !uses.is_empty() {
                    outside.push((d.name.clone(), uses));
                }
            }
        }
        Ok(Ok(Some(PoolCounters {
            key,
            totals,
            outside,
        })))
    }

    /// What a device consumes, under counter key `key` (1.35+, where the pool declares every
    /// counter it consumes).
    fn uses(
        &mut self,
        si: usize,
        d: &k8s_openapi::api::resource::v1::Device,
        key: usize,
    ) -> Result<Vec<(usize, Quantity)>, AllocError> {
        let mut uses = Vec::new();
        for c in d.consumes_counters.iter().flatten() {
            for (name, q) in &c.counters {
                let q = Quantity::parse(&q.value.0).map_err(|e| {
                    self.bad(
                        si,
                        format!(
                            "device {}: consumesCounters {}: counter {name}: invalid quantity {:?}: {e}",
                            d.name, c.counter_set, q.value.0
                        ),
                    )
                })?;
                uses.push((self.counter_name(key, &c.counter_set, name), q));
            }
        }
        Ok(uses)
    }

    /// 1.34: the counter key of a slice declaring shared counters (the first slice of a name
    /// wins, as the scheduler keys them by slice name), its totals read when new.
    fn slice_counters(&mut self, si: usize) -> Result<Option<usize>, AllocError> {
        let s = &self.slices[si];
        let sets = match &s.spec.shared_counters {
            Some(sets) if !sets.is_empty() => sets,
            _ => return Ok(None),
        };
        let name = s.metadata.name.as_deref().unwrap_or_default();
        if let Some(k) = self.counter_keys.iter().position(|k| k.key == name) {
            return Ok(Some(k));
        }
        let k = self.counter_key(name);
        for set in sets {
            for (counter, c) in &set.counters {
                let q = Quantity::parse(&c.value.0).map_err(|e| {
                    self.bad(
                        si,
                        format!(
                            "sharedCounters {}: counter {counter}: invalid quantity {:?}: {e}",
                            set.name, c.value.0
                        ),
                    )
                })?;
                self.counter_name(k, &set.name, counter);
                self.counter_keys[k].totals.push(q);
            }
        }
        Ok(Some(k))
    }

    /// Reads the devices of a pool's slices, in order.
    fn read_devices(
        &mut self,
        visits: &[Visit],
        counters: DeviceCounters<'_>,
    ) -> Result<(), AllocError> {
        let slices = self.slices;
        let options = self.options;
        let with_capacity = options.features.consumable_capacity;
        for v in visits {
            let si = v.slice;
            let s = &slices[si];
            let raw = self.raw.and_then(|r| r.get(si));
            let slice_index = self.infos.len();
            let per_device = s.spec.per_device_node_selection == Some(true);
            self.infos.push(SliceInfo {
                name: Cow::Borrowed(s.metadata.name.as_deref().unwrap_or_default()),
                placement: Placement {
                    node_name: s.spec.node_name.as_deref().map(Cow::Borrowed),
                    node_selector: s.spec.node_selector.as_ref().map(Cow::Borrowed),
                },
            });
            let owner = match counters {
                DeviceCounters::Slice => self.slice_counters(si)?,
                DeviceCounters::Pool(p) => p.map(|p| p.key),
            };
            for (j, d) in s.spec.devices.iter().flatten().enumerate() {
                if d.name.is_empty() {
                    return Err(self.bad(si, format!("device #{j} has no name")));
                }
                if let DeviceCounters::Slice = counters {
                    self.names.push(&d.name);
                }
                let source = Source {
                    slice: s,
                    device: d,
                    raw: raw.and_then(|r| r["spec"]["devices"].get(j)?.get("attributes")),
                };
                source
                    .check(&mut self.known)
                    .map_err(|e| self.bad(si, format!("device {}: {e}", d.name)))?;
                let on_node = gather::device_reached(v, d, options).map_err(|e| self.bad(si, e))?;
                let placement = per_device.then(|| {
                    Box::new(Placement {
                        node_name: d.node_name.as_deref().map(Cow::Borrowed),
                        node_selector: d.node_selector.as_ref().map(Cow::Borrowed),
                    })
                });
                let device_counters = match (&d.consumes_counters, counters) {
                    (Some(cs), _) if cs.is_empty() => None,
                    (None, _) => None,
                    (Some(_), DeviceCounters::Pool(Some(_))) => {
                        let k = owner.unwrap_or_default();
                        Some(Box::new(CounterUse {
                            owner,
                            pool: u32::try_from(self.pools.len()).unwrap_or(u32::MAX),
                            uses: self.uses(si, d, k)?,
                        }))
                    }
                    (Some(cs), _) => {
                        let mut uses = Vec::new();
                        for c in cs {
                            for (name, q) in &c.counters {
                                let q = Quantity::parse(&q.value.0).map_err(|e| {
                                    self.bad(si, format!(
                                        "device {}: consumesCounters {}: counter {name}: invalid quantity {:?}: {e}",
                                        d.name, c.counter_set, q.value.0
                                    ))
                                })?;
                                // Counters the slice does not declare are never checked.
                                let at = owner.and_then(|o| {
                                    self.counter_keys[o]
                                        .names
                                        .iter()
                                        .position(|(s, n)| *s == c.counter_set && n == name)
                                });
                                if let Some(at) = at {
                                    uses.push((at, q));
                                }
                            }
                        }
                        Some(Box::new(CounterUse {
                            owner,
                            pool: u32::try_from(self.pools.len()).unwrap_or(u32::MAX),
                            uses,
                        }))
                    }
                };
                if with_capacity {
                    let caps = capacity::capacities(d.capacity.as_ref())
                        .map_err(|e| self.bad(si, format!("device {}: {e}", d.name)))?;
                    self.capacities.push(caps);
                }
                self.devices.push(Device {
                    origin: Origin::Slice(source),
                    attributes: OnceLock::new(),
                    allow_multiple_allocations: d.allow_multiple_allocations.unwrap_or(false),
                    on_node,
                    binding: d.binding_conditions.as_ref().is_some_and(|c| !c.is_empty()),
                    // Slices are counted in u32 as the API counts them (resourceSliceCount).
                    slice: u32::try_from(slice_index).unwrap_or(u32::MAX),
                    counters: device_counters,
                    placement,
                });
            }
        }
        Ok(())
    }
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
