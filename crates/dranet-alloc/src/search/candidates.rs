//! The candidates of one request or sub-request, in search order: what its class's and its own
//! selectors say of each device (kept per class while the allocator lives), whether it is free
//! and its taints tolerated, and the errors met on the way, kept where the scheduler meets them.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{DeviceTaint, DeviceToleration};

use crate::allocator::{Allocator, Pool};
use crate::capacity;
use crate::cel::{Program, Quantity};
use crate::claim::{Alt, Mode};
use crate::device::Device;
use crate::device::DeviceId;
use crate::error::AllocError;
use crate::in_use::Share;
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
                .map(|d| class_match(programs, d, self.unselectable(d)))
                .collect()
        })
    }

    /// A class's compiled selectors, `None` when they do not compile.
    pub(super) fn class_programs(&self, class: usize) -> Option<&[Arc<Program>]> {
        let c = self.classes.get(class)?;
        c.programs(self.programs.as_deref(), self.version)
            .as_ref()
            .ok()
            .map(|p| &p[..])
    }
}

/// What a class's compiled selectors say of device `d` (`None`: they do not compile, and the
/// class selects nothing); an `unselectable` device matches nothing.
pub(super) fn class_match(
    programs: Option<&[Arc<Program>]>,
    d: &Device,
    unselectable: bool,
) -> Match {
    match programs {
        Some(p) if !unselectable => selectors_match(p, d),
        _ => Match::No,
    }
}

impl Allocator<'_> {
    /// Whether the device can never be selected: it has binding conditions while their
    /// feature is off.
    #[inline]
    pub(super) fn unselectable(&self, d: &Device) -> bool {
        d.binding && !self.features.device_binding_conditions
    }

    /// Whether a device allows multiple allocations (with consumable capacity).
    #[inline]
    pub(super) fn multi(&self, d: usize) -> bool {
        self.features.consumable_capacity && self.devices[d].allow_multiple_allocations
    }
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

fn tolerated(taint: &DeviceTaint, tolerations: &[DeviceToleration]) -> bool {
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

/// Whether the device's taints keep it from a request with these tolerations: a taint not
/// tolerated, of an effect that prevents allocation (1.35 and newer act only on `NoSchedule`
/// and `NoExecute`; 1.34 on every effect). Only with [`Features::device_taints`](crate::Features::device_taints).
pub(crate) fn taints_prevent(a: &Allocator, d: &Device, tolerations: &[DeviceToleration]) -> bool {
    a.features.device_taints
        && d.taints().iter().any(|t| {
            (!a.version.ignores_other_taint_effects()
                || t.effect == "NoSchedule"
                || t.effect == "NoExecute")
                && !tolerated(t, tolerations)
        })
}

/// What other claims hold, per device of the allocator, for one call.
#[derive(Debug, Default)]
pub(super) struct Held<'i> {
    /// Devices allocated whole (empty when none are).
    taken: Vec<bool>,
    /// With consumable capacity: what shares consume of each device's capacities, aligned with
    /// them (empty when there are no shares).
    shares: Vec<Option<Vec<Quantity>>>,
    /// Everything held, to find the devices of other nodes' slices that consume counters.
    devices: &'i [DeviceId],
    shared: &'i [Share],
}

impl<'i> Held<'i> {
    pub(super) fn new(a: &Allocator, devices: &'i [DeviceId], shared: &'i [Share]) -> Held<'i> {
        let mut h = Held {
            devices,
            shared,
            ..Held::default()
        };
        if !devices.is_empty() {
            h.taken = vec![false; a.devices.len()];
            for id in devices {
                if let Some(i) = a.position(id) {
                    h.taken[i] = true;
                }
            }
        }
        if !shared.is_empty() {
            h.shares = vec![None; a.devices.len()];
            for share in shared {
                let Some(i) = a.position(&share.device) else {
                    continue;
                };
                let caps = a.capacities.get(i).map(Vec::as_slice).unwrap_or_default();
                let sums =
                    h.shares[i].get_or_insert_with(|| vec![Quantity::from_int(0); caps.len()]);
                for (c, sum) in caps.iter().zip(sums.iter_mut()) {
                    if let Some(q) = share.consumed.get(&c.name) {
                        *sum = sum.checked_add(*q).unwrap_or(*sum);
                    }
                }
            }
        }
        h
    }

    /// Whether other claims hold device `d` whole.
    #[inline]
    pub(super) fn whole(&self, d: usize) -> bool {
        self.taken.get(d).copied().unwrap_or(false)
    }

    /// What shares of device `d` consume, when it has any.
    #[inline]
    pub(super) fn shared(&self, d: usize) -> Option<&[Quantity]> {
        self.shares.get(d).and_then(|s| s.as_deref())
    }

    /// Whether device `d` is held in any way (it then consumes its counters).
    pub(super) fn any(&self, d: usize) -> bool {
        self.whole(d) || self.shared(d).is_some()
    }

    /// How many shares of a device other claims hold.
    pub(super) fn shares_of(&self, id: &DeviceId) -> usize {
        self.shared.iter().filter(|s| s.device == *id).count()
    }

    /// Whether a device, maybe of a slice the node does not reach, is held in any way.
    pub(super) fn holds(&self, id: &DeviceId) -> bool {
        self.devices.contains(id) || self.shared.iter().any(|s| s.device == *id)
    }
}

/// The candidates of one request or sub-request, in search order.
pub(super) fn prepare<'a>(
    a: &'a Allocator<'a>,
    alt: &Alt,
    held: &Held,
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
            // As `class_match`: a device under binding conditions may never be selected.
            Some(_) if a.unselectable(dev) => Match::No,
            Some(v) => v.clone(),
            None => class_match(programs, dev, a.unselectable(dev)),
        }
    };
    // With consumable capacity, a device whose capacities cannot take the request is not a
    // candidate (a device shared by several claims is judged again as the search goes).
    let fits = |d: usize, all: bool| -> bool {
        if !a.features.consumable_capacity {
            return true;
        }
        if a.multi(d) && !all {
            return true;
        }
        let caps = a.capacities.get(d).map(Vec::as_slice).unwrap_or_default();
        capacity::fits(caps, alt.capacity.as_ref(), held.shared(d), None) == Some(true)
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
            // An unusable pool fails the request on reaching it: a selector failing on a
            // device of an earlier pool fails it first.
            for p in a.visit_order() {
                let pool = &a.pools[p];
                all_over_usable_pool(pool, &alt.label)?;
                let pool_match = pool_class(p);
                for d in pool.devices.clone() {
                    match judge(d, &pool_match) {
                        (Match::Yes, _) if !fits(d, true) => {}
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
            let whole_pools = a.version.gathers_whole_pools();
            for p in a.visit_order() {
                let pool = &a.pools[p];
                // 1.34 fails on reaching an invalid pool; 1.35+ passes it (it has no devices).
                if pool.invalid.is_some() && !whole_pools {
                    data.hazards.push(data.cands.len());
                    data.cands.push(Cand::Barrier(p));
                }
                let pool_match = pool_class(p);
                for d in pool.devices.clone() {
                    // Devices other claims hold are skipped before any selector runs.
                    if held.whole(d) && !alt.admin {
                        continue;
                    }
                    match judge(d, &pool_match) {
                        (Match::Yes, _) if !fits(d, false) => {}
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

/// An `All` request takes every matching device, so a pool that is incomplete or invalid
/// fails it.
fn all_over_usable_pool(pool: &Pool<'_>, request: &str) -> Result<(), AllocError> {
    let reason = match (&pool.incomplete, &pool.invalid) {
        (Some(why), _) => why.clone(),
        (None, Some(why)) => format!("is invalid ({why})"),
        (None, None) => return Ok(()),
    };
    Err(AllocError::AllOverUnusablePool {
        request: request.to_string(),
        pool: pool.label(),
        reason,
    })
}
