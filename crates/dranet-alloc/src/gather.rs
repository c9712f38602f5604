//! Which slices make up the pools the node can use, and in which order the search visits them,
//! as each Kubernetes version's scheduler gathers them (`GatherPools`).
//!
//! - 1.34 counts only the slices the node reaches: a pool is incomplete when fewer of them are
//!   present than `resourceSliceCount` says; a pool's slices with devices under binding
//!   conditions come after its others, and such pools after the others.
//! - 1.35 and newer complete a pool with its slices of other nodes: a pool whose slices on the
//!   node are fewer than `resourceSliceCount` is complete if all its slices of that generation
//!   are there (its devices are still only the node's), and ignored when a newer generation
//!   exists elsewhere. Slices declaring `sharedCounters` belong to every node, their devices
//!   are not allocated, and the counters are the pool's. 1.36 also sorts pools by (driver, pool)
//!   (those with binding conditions last) and a pool's slices by name.

use std::ops::Range;

use k8s_openapi::api::resource::v1::ResourceSlice;

use crate::cel::same_bytes;
use crate::error::AllocError;
use crate::node::{SliceScope, device_on_node, slice_scope};
use crate::options::Options;

/// A slice the node reaches, as the pools are gathered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Visit {
    /// Index into the slices given.
    pub slice: usize,
    pub scope: SliceScope,
    /// Devices of it have binding conditions.
    pub binding: bool,
}

/// One pool as gathered, before its devices are read.
#[derive(Debug, Clone)]
pub(crate) struct PoolPlan {
    /// A slice of the pool (for its driver and pool name).
    pub first: usize,
    /// Its slices with devices for the node: a range of [`Plan::visits`].
    pub slices: Range<usize>,
    /// 1.35+: its slices declaring counter sets, a range of [`Plan::extra`].
    pub counter_slices: Range<usize>,
    /// 1.35+: its slices the node does not reach, a range of [`Plan::extra`].
    pub outside: Range<usize>,
    /// Why it is incomplete.
    pub incomplete: Option<String>,
}

/// The pools the node can use, in the order the search visits them.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub visits: Vec<Visit>,
    pub extra: Vec<usize>,
    pub pools: Vec<PoolPlan>,
    pub warnings: Vec<String>,
}

fn pool_key(s: &ResourceSlice) -> (&str, &str) {
    (s.spec.driver.as_str(), s.spec.pool.name.as_str())
}

fn has_binding(s: &ResourceSlice) -> bool {
    s.spec
        .devices
        .iter()
        .flatten()
        .any(|d| d.binding_conditions.is_some())
}

fn has_counters(s: &ResourceSlice) -> bool {
    s.spec
        .shared_counters
        .as_ref()
        .is_some_and(|c| !c.is_empty())
}

/// Which devices of `s` the node (or, without one, every node) reaches.
fn scope(s: &ResourceSlice, options: &Options) -> Result<SliceScope, AllocError> {
    let features = &options.features;
    Ok(match &options.node {
        Some(node) => slice_scope(s, node, features)?,
        None if !features.partitionable_devices && s.spec.per_device_node_selection.is_some() => {
            SliceScope::None
        }
        None if s.spec.per_device_node_selection == Some(true) => SliceScope::PerDevice,
        None => SliceScope::All,
    })
}

fn outdated(s: &ResourceSlice, i: usize) -> String {
    format!(
        "ResourceSlice {}: pool {}/{} generation {} is outdated, ignored",
        slice_label(s, i),
        s.spec.driver,
        s.spec.pool.name,
        s.spec.pool.generation
    )
}

fn incomplete(first: &ResourceSlice, present: usize) -> String {
    format!(
        "is incomplete (generation {}: {present} of {} slices present, being updated)",
        first.spec.pool.generation, first.spec.pool.resource_slice_count
    )
}

/// Kubernetes 1.34: the pools of the slices the node reaches; `only` (positions in `slices`,
/// ascending) limits the search to the slices that may be on the node, picked once for many
/// nodes.
pub(crate) fn node_slices(
    slices: &[ResourceSlice],
    only: Option<&[usize]>,
    options: &Options,
) -> Result<Plan, AllocError> {
    let features = &options.features;
    let mut plan = Plan::default();
    let picked: &mut dyn Iterator<Item = usize> = match only {
        Some(only) => &mut only.iter().copied(),
        None => &mut (0..slices.len()),
    };
    let mut visit: Vec<Visit> = Vec::with_capacity(only.map_or(slices.len(), <[usize]>::len));
    for i in picked {
        let s = &slices[i];
        let scope = scope(s, options)?;
        if scope == SliceScope::None {
            if !features.partitionable_devices && s.spec.per_device_node_selection.is_some() {
                plan.warnings.push(format!(
                    "ResourceSlice {}: perDeviceNodeSelection needs the DRAPartitionableDevices feature, ignored",
                    slice_label(s, i)
                ));
            }
            continue;
        }
        visit.push(Visit {
            slice: i,
            scope,
            binding: has_binding(s),
        });
    }
    let key = |v: &Visit| pool_key(&slices[v.slice]);
    let generation = |v: &Visit| slices[v.slice].spec.pool.generation;
    // Grouped by pool in (driver, pool) order, each pool's slices in the order the scheduler
    // adds them: those without binding conditions first (it prefers their devices), each kind
    // in the order given (the sort is stable).
    visit.sort_by(|x, y| (key(x), x.binding).cmp(&(key(y), y.binding)));
    // Per pool, the newest generation wins; the others are named in the order given.
    let (mut kept, mut at) = (0, 0);
    let mut old: Vec<usize> = Vec::new();
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
                old.push(v.slice);
            }
        }
    }
    visit.truncate(kept);
    old.sort_unstable();
    plan.warnings
        .extend(old.into_iter().map(|i| outdated(&slices[i], i)));
    // Pools in (driver, pool) order, those with binding conditions last.
    let mut pools = Vec::new();
    for binding in [false, true] {
        let mut at = 0;
        while at < visit.len() {
            let run = at..run_end(&visit, at, key);
            at = run.end;
            if visit[run.clone()].iter().any(|v| v.binding) != binding {
                continue;
            }
            let first = &slices[visit[run.start].slice];
            let present = run.len();
            pools.push(PoolPlan {
                first: visit[run.start].slice,
                slices: run,
                counter_slices: 0..0,
                outside: 0..0,
                incomplete: (present as i64 != first.spec.pool.resource_slice_count)
                    .then(|| incomplete(first, present)),
            });
        }
    }
    plan.visits = visit;
    plan.pools = pools;
    Ok(plan)
}

/// Kubernetes 1.35 and newer: the pools of the slices the node reaches, completed with their
/// slices of other nodes. `only` (positions in `slices`, ascending) limits it to those slices:
/// the ones that may be on the node and every slice of their pools, picked once for many nodes.
pub(crate) fn whole_pools(
    slices: &[ResourceSlice],
    only: Option<&[usize]>,
    options: &Options,
) -> Result<Plan, AllocError> {
    let features = &options.features;
    let version = options.version;
    let mut plan = Plan::default();
    let universe: Vec<usize> = match only {
        Some(only) => only.to_vec(),
        None => (0..slices.len()).collect(),
    };
    // The scheduler looks at the node's own slices first, then at those for every node or
    // declaring counters, each in the order given.
    let shared =
        |s: &ResourceSlice| s.spec.node_name.as_deref().unwrap_or("").is_empty() || has_counters(s);
    let order: Vec<usize> = match &options.node {
        Some(node) => {
            let own = universe.iter().copied().filter(|&i| {
                !shared(&slices[i]) && slices[i].spec.node_name.as_deref() == Some(&node.name)
            });
            own.chain(universe.iter().copied().filter(|&i| shared(&slices[i])))
                .collect()
        }
        None => universe.clone(),
    };
    // The relevant slices of each pool, in the order met, and whether one of them is for the
    // node; pools in the order first met.
    let mut pools: Vec<((&str, &str), Vec<Visit>, bool)> = Vec::new();
    for i in order {
        let s = &slices[i];
        let counters = has_counters(s);
        if !features.partitionable_devices
            && (s.spec.per_device_node_selection.is_some() || counters)
        {
            let what = if counters {
                "sharedCounters"
            } else {
                "perDeviceNodeSelection"
            };
            plan.warnings.push(format!(
                "ResourceSlice {}: {what} needs the DRAPartitionableDevices feature, ignored",
                slice_label(s, i)
            ));
            continue;
        }
        // Counter slices are needed whatever node they name, but make no pool of their own
        // for a node that has none of the pool's devices (the scheduler gathers the node's).
        let own_scope = scope(s, options)?;
        let for_node = own_scope != SliceScope::None;
        let scope = if counters { SliceScope::All } else { own_scope };
        if scope == SliceScope::None {
            continue;
        }
        let v = Visit {
            slice: i,
            scope,
            binding: has_binding(s),
        };
        match pools.iter_mut().find(|(k, _, _)| *k == pool_key(s)) {
            Some((_, list, any)) => {
                list.push(v);
                *any |= for_node;
            }
            None => pools.push((pool_key(s), vec![v], for_node)),
        }
    }
    pools.retain(|(_, _, for_node)| *for_node);
    // Go map order: random before 1.36, which sorts. (driver, pool) is the order this crate
    // visits by default either way.
    pools.sort_by(|a, b| a.0.cmp(&b.0));
    let mut plans = Vec::with_capacity(pools.len());
    let mut binding_plans = Vec::new();
    for (_, mut list, _) in pools {
        // The newest generation among the node's slices replaces the older ones.
        let newest = list
            .iter()
            .map(|v| slices[v.slice].spec.pool.generation)
            .max()
            .unwrap_or(0);
        let mut old: Vec<usize> = Vec::new();
        list.retain(|v| {
            let keep = slices[v.slice].spec.pool.generation == newest;
            if !keep {
                old.push(v.slice);
            }
            keep
        });
        old.sort_unstable();
        plan.warnings
            .extend(old.into_iter().map(|i| outdated(&slices[i], i)));
        let first = list[0].slice;
        let head = &slices[first];
        let want = head.spec.pool.resource_slice_count;
        let mut outside = Vec::new();
        if list.len() as i64 != want {
            // The pool's other slices of this generation, from every node.
            let key = pool_key(head);
            let mut all = Vec::new();
            let mut newer = None;
            for &j in &universe {
                let s = &slices[j];
                if pool_key(s) != key {
                    continue;
                }
                if s.spec.pool.generation == newest {
                    all.push(j);
                } else if s.spec.pool.generation > newest {
                    newer = Some(s.spec.pool.generation);
                }
            }
            if let Some(g) = newer {
                plan.warnings.push(format!(
                    "pool {}/{}: generation {g} is being published on other nodes, generation {newest} ignored",
                    key.0, key.1
                ));
                continue;
            }
            if all.len() as i64 != want {
                let start = plan.visits.len();
                plans.push(PoolPlan {
                    first,
                    slices: start..start,
                    counter_slices: 0..0,
                    outside: 0..0,
                    incomplete: Some(incomplete(head, all.len())),
                });
                continue;
            }
            let name = |j: usize| slices[j].metadata.name.as_deref().unwrap_or("");
            outside = all
                .into_iter()
                .filter(|&j| !list.iter().any(|v| name(v.slice) == name(j)))
                .collect();
        }
        if version.sorts_pools() {
            list.sort_by(|a, b| {
                let name = |v: &Visit| slices[v.slice].metadata.name.as_deref().unwrap_or("");
                name(a).cmp(name(b))
            });
        }
        let (counter, device): (Vec<Visit>, Vec<Visit>) = list
            .into_iter()
            .partition(|v| features.partitionable_devices && has_counters(&slices[v.slice]));
        let binding = device.iter().any(|v| v.binding);
        let start = plan.visits.len();
        plan.visits.extend(device);
        let c_start = plan.extra.len();
        plan.extra.extend(counter.iter().map(|v| v.slice));
        let o_start = plan.extra.len();
        plan.extra.extend(outside);
        let p = PoolPlan {
            first,
            slices: start..plan.visits.len(),
            counter_slices: c_start..o_start,
            outside: o_start..plan.extra.len(),
            incomplete: None,
        };
        // 1.36 puts pools with binding conditions last; 1.35 does not look.
        if binding && version.sorts_pools() {
            binding_plans.push(p);
        } else {
            plans.push(p);
        }
    }
    plans.extend(binding_plans);
    plan.pools = plans;
    Ok(plan)
}

/// Where the run of `items` (grouped by `key`) starting at `at` ends.
fn run_end<'k, T>(items: &[T], at: usize, key: impl Fn(&T) -> (&'k str, &'k str)) -> usize {
    let k = key(&items[at]);
    let same = |(a, b): (&str, &str)| {
        same_bytes(a.as_bytes(), k.0.as_bytes()) && same_bytes(b.as_bytes(), k.1.as_bytes())
    };
    at + items[at..].iter().take_while(|i| same(key(i))).count()
}

/// Whether a device of a slice the node reaches per device is usable from the node.
pub(crate) fn device_reached(
    v: &Visit,
    d: &k8s_openapi::api::resource::v1::Device,
    options: &Options,
) -> Result<bool, String> {
    match (v.scope, &options.node) {
        (SliceScope::PerDevice, Some(node)) => {
            device_on_node(d, node).map_err(|e| format!("device {}: {e}", d.name))
        }
        _ => Ok(true),
    }
}

/// A slice as messages name it: its name, else its place in the input.
pub(crate) fn slice_label(s: &ResourceSlice, i: usize) -> String {
    s.metadata
        .name
        .clone()
        .unwrap_or_else(|| format!("#{i} (unnamed)"))
}
