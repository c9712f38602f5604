//! The candidates of one request or sub-request, in search order: what its class's and its own
//! selectors say of each device (kept per class while the allocator lives), whether it is free
//! and its taints tolerated, and the errors met on the way, kept where the scheduler meets them.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{DeviceTaint, DeviceToleration};

use crate::allocator::Allocator;
use crate::cel::{Program, Quantity};
use crate::claim::{Alt, Mode};
use crate::device::Device;
use crate::error::AllocError;
use crate::selectors::{Match, selectors_match};

use super::constraint::ValueKey;

impl Allocator<'_> {
    /// What a class's selectors say of every device, computed once.
    pub(super) fn class_matches(&self, class: usize) -> &[Match] {
        let Some(entry) = self.classes.get(class) else {
            return &[];
        };
        entry.matches.get_or_init(|| {
            let programs = self.class_programs(class);
            self.devices
                .iter()
                .map(|d| class_match(programs, d))
                .collect()
        })
    }

    /// A class's compiled selectors, `None` when they do not compile.
    pub(super) fn class_programs(&self, class: usize) -> Option<&[Arc<Program>]> {
        let c = self.classes.get(class)?;
        c.programs(self.programs.as_deref())
            .as_ref()
            .ok()
            .map(|p| &p[..])
    }
}

/// What a class's compiled selectors say of device `d` (`None`: they do not compile, and the
/// class selects nothing).
pub(super) fn class_match(programs: Option<&[Arc<Program>]>, d: &Device) -> Match {
    match programs {
        Some(p) if !d.binding => selectors_match(p, d),
        _ => Match::No,
    }
}

/// Whether other claims hold device `d` (`taken` is empty when they hold none).
#[inline]
pub(super) fn held(taken: &[bool], d: usize) -> bool {
    taken.get(d).copied().unwrap_or(false)
}

/// One entry of a slot's candidate list.
#[derive(Debug, Clone, Copy)]
pub(super) enum Cand {
    /// A selectable device.
    Dev(usize),
    /// A device whose selector fails to evaluate: reaching it while it is free is an error.
    Err(usize, usize),
    /// The start of an invalid pool: reaching it is an error.
    Barrier(usize),
}

/// Some positions of a candidate list, in order, with the number of `Dev` entries from each
/// on.
#[derive(Debug, Default)]
pub(super) struct Subset {
    pub(super) positions: Vec<usize>,
    pub(super) suffix: Vec<usize>,
}

impl Subset {
    pub(super) fn new(positions: Vec<usize>, cands: &[Cand]) -> Subset {
        let mut suffix = vec![0; positions.len() + 1];
        for i in (0..positions.len()).rev() {
            suffix[i] = suffix[i + 1] + usize::from(matches!(cands[positions[i]], Cand::Dev(_)));
        }
        Subset { positions, suffix }
    }
}

/// A request or sub-request, prepared for one allocation.
#[derive(Debug, Default)]
pub(super) struct AltData<'a> {
    /// Per `matchAttribute` covering it (by constraint index): candidate positions by value,
    /// built when a slot first runs with the value fixed.
    pub(super) index: OnceCell<Vec<(usize, HashMap<ValueKey<'a>, Subset>)>>,
    /// Entries with a fixed value before the index is built: an easy claim never needs it,
    /// and building it costs more than scanning a short list a few times.
    pub(super) fixed_entries: std::cell::Cell<u32>,
    /// The hazards alone, for a value no candidate has (made when first needed).
    pub(super) hazards_only: OnceCell<Subset>,
    /// ExactCount: candidates in search order.
    pub(super) cands: Vec<Cand>,
    /// Positions of `Err` and `Barrier` entries.
    pub(super) hazards: Vec<usize>,
    /// All: the devices, in search order.
    pub(super) all: Vec<usize>,
    /// Devices this alternative takes.
    pub(super) num: usize,
    /// The errors of `Cand::Err` entries.
    pub(super) errors: Vec<AllocError>,
}

impl AltData<'_> {
    /// The `Dev` entries of `cands` at positions `at..`: every entry but the hazards, whose
    /// positions are sorted (and usually none).
    #[inline]
    pub(super) fn devs_from(&self, at: usize) -> usize {
        let left = self.cands.len().saturating_sub(at);
        if self.hazards.is_empty() {
            return left;
        }
        left - (self.hazards.len() - self.hazards.partition_point(|&h| h < at))
    }
}

pub(super) fn tolerated(taint: &DeviceTaint, tolerations: &[DeviceToleration]) -> bool {
    tolerations.iter().any(|t| {
        if t.effect
            .as_deref()
            .is_some_and(|e| !e.is_empty() && e != taint.effect)
        {
            return false;
        }
        if t.key
            .as_deref()
            .is_some_and(|k| !k.is_empty() && k != taint.key)
        {
            return false;
        }
        match t.operator.as_deref().unwrap_or("") {
            "" | "Equal" => {
                t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
            }
            "Exists" => true,
            _ => false,
        }
    })
}

/// Shared counters left per slice once the devices other claims hold are subtracted, and a
/// zero consumption for each.
pub(super) fn counters_left(
    a: &Allocator,
    taken: &[bool],
) -> (Vec<Vec<Quantity>>, Vec<Vec<Quantity>>) {
    if !a.features.partitionable_devices || a.counter_sets.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let mut available: Vec<Vec<Quantity>> = a
        .counter_sets
        .iter()
        .map(|s| s.totals.iter().map(|t| t.2).collect())
        .collect();
    for (i, d) in a.devices.iter().enumerate() {
        if !held(taken, i) {
            continue;
        }
        if let Some(cu) = &d.counters
            && let Some(o) = cu.owner
            && a.slices[d.slice as usize].name == a.counter_sets[o].slice
        {
            for (at, q) in &cu.uses {
                let left = &mut available[o][*at];
                *left = left.checked_sub(*q).unwrap_or(*left);
            }
        }
    }
    let consumed = available
        .iter()
        .map(|v| vec![Quantity::from_int(0); v.len()])
        .collect();
    (available, consumed)
}

/// The candidates of one request or sub-request, in search order.
pub(super) fn prepare<'a>(
    a: &'a Allocator<'a>,
    alt: &Alt,
    taken: &[bool],
) -> Result<AltData<'a>, AllocError> {
    // A kept allocator (deciding its second claim or more) keeps what each class says of
    // every device, and builds the index of the devices its selectors read: lookups in it cost
    // less than reading the slice's map. A fresh one asks the class of the devices it judges,
    // once per pool when the class reads only the driver, which a pool's devices share.
    let kept = a.reused();
    let class = if kept {
        a.class_matches(alt.class)
    } else {
        &[]
    };
    let programs = a.class_programs(alt.class);
    let per_pool = !kept && programs.is_some_and(|p| p.iter().all(|p| p.driver_only()));
    let pool_class = |p: usize| -> Option<Match> {
        let first = a.pools[p].devices.clone().next()?;
        // The pool's answer, whatever the binding conditions of the device asked.
        Some(selectors_match(
            programs.filter(|_| per_pool)?,
            &a.devices[first],
        ))
    };
    let class_of = |d: usize, pool: &Option<Match>| -> Match {
        let dev = &a.devices[d];
        match pool {
            _ if kept => class.get(d).cloned().unwrap_or(Match::No),
            // As `class_match`: a device under binding conditions is never selected.
            Some(_) if dev.binding => Match::No,
            Some(v) => v.clone(),
            None => class_match(programs, dev),
        }
    };
    // What the selectors say, and whether an error is the class's.
    let judge = |d: usize, pool: &Option<Match>| -> (Match, bool) {
        let dev = &a.devices[d];
        match class_of(d, pool) {
            Match::Yes => {}
            e @ Match::Err(_) => return (e, true),
            Match::No => return (Match::No, false),
        }
        if kept {
            dev.attributes();
        }
        match selectors_match(&alt.programs, dev) {
            Match::Yes if !dev.on_node => (Match::No, false),
            v => (v, false),
        }
    };
    let runtime_error =
        |d: usize, class_err: bool, (selector, error): (usize, String)| AllocError::CelRuntime {
            request: alt.label.to_string(),
            class: class_err.then(|| a.class_name(alt.class).to_string()),
            selector,
            device: Box::new(a.devices[d].id()),
            error,
        };
    let mut data = AltData::default();
    match alt.mode {
        Mode::All => {
            for p in a.visit_order() {
                let pool = &a.pools[p];
                if let Some(why) = pool.incomplete.as_ref() {
                    return Err(AllocError::AllOverUnusablePool {
                        request: alt.label.to_string(),
                        pool: pool.label(),
                        reason: why.clone(),
                    });
                }
                if let Some(why) = pool.invalid.as_ref() {
                    return Err(AllocError::AllOverUnusablePool {
                        request: alt.label.to_string(),
                        pool: pool.label(),
                        reason: format!("is invalid ({why})"),
                    });
                }
                let pool_match = pool_class(p);
                for d in pool.devices.clone() {
                    match judge(d, &pool_match) {
                        (Match::Yes, _) => data.all.push(d),
                        (Match::No, _) => {}
                        (Match::Err(e), of_class) => return Err(runtime_error(d, of_class, *e)),
                    }
                }
            }
            data.num = data.all.len();
        }
        Mode::Exact(n) => {
            data.num = n;
            for p in a.visit_order() {
                let pool = &a.pools[p];
                if pool.invalid.is_some() {
                    data.hazards.push(data.cands.len());
                    data.cands.push(Cand::Barrier(p));
                }
                let pool_match = pool_class(p);
                for d in pool.devices.clone() {
                    // Devices other claims hold are skipped before any selector runs.
                    if held(taken, d) && !alt.admin {
                        continue;
                    }
                    match judge(d, &pool_match) {
                        (Match::Yes, _) => data.cands.push(Cand::Dev(d)),
                        (Match::No, _) => {}
                        (Match::Err(e), of_class) => {
                            data.hazards.push(data.cands.len());
                            data.cands.push(Cand::Err(d, data.errors.len()));
                            data.errors.push(runtime_error(d, of_class, *e));
                        }
                    }
                }
            }
        }
    }
    Ok(data)
}
