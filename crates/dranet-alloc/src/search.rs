//! The search, step for step the scheduler's: requests in claim order, for each device slot
//! the candidates in pool order, the first complete solution wins.
//!
//! Two things make it much faster than the scheduler's while giving the same answer:
//!
//! - A request's devices are chosen as combinations (each slot continues after the previous
//!   slot's device), where the scheduler tries every permutation. Every check it makes
//!   (selectors, constraints, taints) depends on the set of chosen devices only, so the first
//!   solution is the same (the scheduler's first solution is sorted too), and so is the first
//!   device whose selector fails to evaluate: a permutation the scheduler tries beyond ours
//!   only revisits devices it has already evaluated.
//! - A slot stops early when fewer candidates remain than it needs. The scheduler goes on to
//!   the end of the list, where it can still meet a CEL error or an invalid pool; those
//!   "hazards" are kept in the candidate list and checked before stopping.
//!
//! With shared counters (partitionable devices) a rejected device keeps what it consumed for
//! the rest of the call (as in the scheduler), which makes the outcome depend on the path, so
//! such claims are searched over permutations exactly as the scheduler does.

use std::cell::OnceCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{
    DeviceAllocationConfiguration, DeviceTaint, DeviceToleration,
};

use super::claim::{Alt, CompiledClaim, ConstraintKind, Mode};
use super::node::allocation_node_selector;
use super::one_or_many::OneOrMany;
use super::{
    AllocError, Allocation, Allocator, AttrRef, Device, DeviceId, DeviceResult,
    MAX_ALLOCATED_DEVICES, MAX_REQUESTS, MAX_SEARCH_STEPS,
};
use crate::cel::{AttributeValue, Program, Quantity, Semver};

/// What a device's selectors say for one request.
#[derive(Debug, Clone)]
pub(crate) enum Verdict {
    No,
    Yes,
    /// Selector `.0` failed to evaluate with message `.1`.
    Err(Box<(usize, String)>),
}

fn verdict(programs: &[Arc<Program>], d: &Device) -> Verdict {
    for (i, p) in programs.iter().enumerate() {
        // The common shapes read the device's slice; the index is built for the others.
        match p.matches_device(d) {
            Ok(true) => {}
            Ok(false) => return Verdict::No,
            Err(e) => return Verdict::Err(Box::new((i, e.to_string()))),
        }
    }
    Verdict::Yes
}

impl Allocator<'_> {
    /// What a class's selectors say of every device, computed once.
    fn class_verdicts(&self, class: usize) -> &[Verdict] {
        let Some(entry) = self.classes.get(class) else {
            return &[];
        };
        entry.verdicts.get_or_init(|| {
            let programs = self.class_programs(class);
            self.devices
                .iter()
                .map(|d| class_verdict(programs, d))
                .collect()
        })
    }

    /// A class's compiled selectors, `None` when they do not compile.
    fn class_programs(&self, class: usize) -> Option<&[Arc<Program>]> {
        let c = self.classes.get(class)?;
        c.programs(self.programs.as_deref())
            .as_ref()
            .ok()
            .map(|p| &p[..])
    }
}

/// What a class's compiled selectors say of device `d` (`None`: they do not compile, and the
/// class selects nothing).
fn class_verdict(programs: Option<&[Arc<Program>]>, d: &Device) -> Verdict {
    match programs {
        Some(p) if !d.binding => verdict(p, d),
        _ => Verdict::No,
    }
}

/// Whether other claims hold device `d` (`taken` is empty when they hold none).
#[inline]
fn held(taken: &[bool], d: usize) -> bool {
    taken.get(d).copied().unwrap_or(false)
}

/// One entry of a slot's candidate list.
#[derive(Debug, Clone, Copy)]
enum Cand {
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
struct Subset {
    positions: Vec<usize>,
    suffix: Vec<usize>,
}

impl Subset {
    fn new(positions: Vec<usize>, cands: &[Cand]) -> Subset {
        let mut suffix = vec![0; positions.len() + 1];
        for i in (0..positions.len()).rev() {
            suffix[i] = suffix[i + 1] + usize::from(matches!(cands[positions[i]], Cand::Dev(_)));
        }
        Subset { positions, suffix }
    }
}

/// A request or sub-request, prepared for one allocation.
#[derive(Debug, Default)]
struct AltData<'a> {
    /// Per `matchAttribute` covering it (by constraint index): candidate positions by value,
    /// built when a slot first runs with the value fixed.
    index: OnceCell<Vec<(usize, HashMap<ValueKey<'a>, Subset>)>>,
    /// Entries with a fixed value before the index is built: an easy claim never needs it,
    /// and building it costs more than scanning a short list a few times.
    fixed_entries: std::cell::Cell<u32>,
    /// The hazards alone, for a value no candidate has (made when first needed).
    hazards_only: OnceCell<Subset>,
    /// ExactCount: candidates in search order.
    cands: Vec<Cand>,
    /// Positions of `Err` and `Barrier` entries.
    hazards: Vec<usize>,
    /// All: the devices, in search order.
    all: Vec<usize>,
    /// Devices this alternative takes.
    num: usize,
    /// The errors of `Cand::Err` entries.
    errors: Vec<AllocError>,
}

impl AltData<'_> {
    /// The `Dev` entries of `cands` at positions `at..`: every entry but the hazards, whose
    /// positions are sorted (and usually none).
    #[inline]
    fn devs_from(&self, at: usize) -> usize {
        let left = self.cands.len().saturating_sub(at);
        if self.hazards.is_empty() {
            return left;
        }
        left - (self.hazards.len() - self.hazards.partition_point(|&h| h < at))
    }
}

/// Why the search stops.
enum Stop {
    /// The claim would exceed 32 devices on this path: the scheduler backtracks to the nearest
    /// `firstAvailable` (an error when there is none).
    MaxSize,
    Fatal(AllocError),
    /// The quick first attempt used its step budget (see [`QUICK_STEPS`]).
    Budget,
}

/// Steps of the first, plain attempt. Most claims are decided well within it; only those that
/// exceed it pay for the analysis of claims that cannot succeed ([`Search::doomed_outcome`]),
/// which costs more than a typical whole search.
const QUICK_STEPS: u64 = 20_000;

/// Slot entries with a fixed `matchAttribute` value before the candidates are indexed by value.
const INDEX_AFTER: u32 = 32;

type Step = Result<bool, Stop>;

/// A scalar of an attribute value, for constraint comparison (lists are sets of these).
#[derive(Debug, Clone, Copy)]
enum Scalar<'a> {
    Bool(bool),
    Int(i64),
    Str(&'a str),
    Ver(&'a Semver),
}

impl PartialEq for Scalar<'_> {
    fn eq(&self, o: &Self) -> bool {
        match (self, o) {
            (Scalar::Bool(a), Scalar::Bool(b)) => a == b,
            (Scalar::Int(a), Scalar::Int(b)) => a == b,
            (Scalar::Str(a), Scalar::Str(b)) => a == b,
            // The scheduler compares the version strings: build metadata counts.
            (Scalar::Ver(a), Scalar::Ver(b)) => a == b && a.to_string() == b.to_string(),
            _ => false,
        }
    }
}

fn scalar(v: AttrRef<'_>) -> Option<Scalar<'_>> {
    Some(match v {
        AttrRef::Bool(b) => Scalar::Bool(b),
        AttrRef::Int(i) => Scalar::Int(i),
        AttrRef::Str(s) => Scalar::Str(s),
        AttrRef::Value(AttributeValue::Bool(b)) => Scalar::Bool(*b),
        AttrRef::Value(AttributeValue::Int(i)) => Scalar::Int(*i),
        AttrRef::Value(AttributeValue::String(s)) => Scalar::Str(s),
        AttrRef::Value(AttributeValue::Version(v)) => Scalar::Ver(v),
        AttrRef::Value(AttributeValue::Ints(_) | AttributeValue::Strings(_)) => return None,
    })
}

fn scalars(v: AttrRef<'_>) -> Vec<Scalar<'_>> {
    match v {
        AttrRef::Value(AttributeValue::Ints(l)) => l.iter().map(|i| Scalar::Int(*i)).collect(),
        AttrRef::Value(AttributeValue::Strings(l)) => l.iter().map(|s| Scalar::Str(s)).collect(),
        other => scalar(other).into_iter().collect(),
    }
}

/// Per-constraint state while searching.
#[derive(Debug, Clone)]
enum CState<'a> {
    /// Match: values every device so far shares (`None` before the first device).
    Common(Option<Vec<Scalar<'a>>>),
    /// Distinct: values already taken.
    Taken(Vec<Scalar<'a>>),
}

/// One bit per device: the first 256 inline (a node's devices), the rest on the heap.
struct Bits {
    inline: [u64; 4],
    heap: Vec<u64>,
}

impl Bits {
    fn new(n: usize) -> Bits {
        Bits {
            inline: [0; 4],
            heap: vec![0; n.saturating_sub(256).div_ceil(64)],
        }
    }

    #[inline]
    fn get(&self, i: usize) -> bool {
        let w = match self.inline.get(i / 64) {
            Some(w) => *w,
            None => self.heap.get(i / 64 - 4).copied().unwrap_or(0),
        };
        w & (1 << (i % 64)) != 0
    }

    #[inline]
    fn set(&mut self, i: usize, on: bool) {
        let w = match self.inline.get_mut(i / 64) {
            Some(w) => w,
            None => match self.heap.get_mut(i / 64 - 4) {
                Some(w) => w,
                None => return,
            },
        };
        if on {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
        }
    }
}

/// What undoes one added device.
struct Saved<'a> {
    device: usize,
    old: Vec<(usize, CState<'a>)>,
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

struct Search<'a> {
    a: &'a Allocator<'a>,
    claim: &'a CompiledClaim,
    alts: &'a [OneOrMany<AltData<'a>>],
    /// Held by other claims.
    taken: &'a [bool],
    /// Chosen for this claim.
    used: Bits,
    chosen: Vec<(usize, usize, usize)>,
    /// The sub-request chosen per request.
    selected: [usize; MAX_REQUESTS],
    states: Vec<CState<'a>>,
    /// Shared counters: what is left after other claims, and what this claim consumes.
    available: Vec<Vec<Quantity>>,
    consumed: Vec<Vec<Quantity>>,
    /// Search over permutations, as the scheduler (see the module docs).
    permutations: bool,
    steps: u64,
    /// Steps allowed before stopping.
    limit: u64,
    /// Furthest request reached, and constraint rejections.
    deepest: usize,
    rejected_by: Vec<u64>,
    /// Feasibility only: requests `..upto` placed with selectable devices other than
    /// `avoid` is success, and errors are not looked for.
    feasibility: bool,
    upto: usize,
    avoid: Option<usize>,
}

pub(crate) fn run(
    a: &Allocator,
    claim: &CompiledClaim,
    allocated: &[DeviceId],
) -> Result<Allocation, AllocError> {
    // Most claims are decided with nothing held: no list then.
    let mut taken = Vec::new();
    if !allocated.is_empty() {
        taken = vec![false; a.devices.len()];
        for id in allocated {
            if let Some(i) = a.position(id) {
                taken[i] = true;
            }
        }
    }
    // Validation, as the scheduler does it before searching: the devices of `All` requests
    // (every pool must be complete and valid, every selector must evaluate), and the claim's
    // size.
    let mut alts = Vec::with_capacity(claim.requests.len());
    let mut min_total = 0usize;
    for req in &claim.requests {
        let mut per: OneOrMany<AltData> = OneOrMany::Empty;
        let mut min_req = usize::MAX;
        for (s, alt) in req.alts.iter().enumerate() {
            let data = match (s, per.first()) {
                // Kubernetes ≤ 1.35 validates the second sub-request with the first one's
                // cache key: after an `All` first one, an `All` second one reads its verdicts.
                (1, Some(first))
                    if a.bugs.first_available_all_mode
                        && req.alts[0].mode == Mode::All
                        && alt.mode == Mode::All =>
                {
                    AltData {
                        all: first.all.clone(),
                        num: first.num,
                        ..AltData::default()
                    }
                }
                _ => prepare(a, alt, &taken)?,
            };
            min_req = min_req.min(data.num);
            per.push(data);
        }
        min_total = min_total.saturating_add(if per.is_empty() { 0 } else { min_req });
        alts.push(per);
    }
    if min_total > MAX_ALLOCATED_DEVICES {
        return Err(AllocError::TooManyDevices { needed: min_total });
    }
    let permutations = a.features.partitionable_devices
        && alts.iter().flatten().any(|d| {
            d.cands.iter().any(|c| match c {
                Cand::Dev(i) | Cand::Err(i, _) => a.devices[*i].counters.is_some(),
                Cand::Barrier(_) => false,
            }) || d.all.iter().any(|i| a.devices[*i].counters.is_some())
        });
    // A plain search first: most claims are decided in a few steps.
    let mut quick = Search::new(a, claim, &alts, &taken, permutations);
    quick.limit = QUICK_STEPS;
    let first = quick.request(0);
    match first {
        Err(Stop::Budget) => {}
        // No solution: the analysis names the request or constraint that makes it so better
        // than where the search happened to stop.
        Ok(false) => {
            let mut s = Search::new(a, claim, &alts, &taken, permutations);
            if let Doom::Unsatisfiable(e) = s.doomed_outcome() {
                return Err(e);
            }
            return finish(&mut quick, first, Doom::Undecided);
        }
        _ => return finish(&mut quick, first, Doom::Undecided),
    }
    let mut s = Search::new(a, claim, &alts, &taken, permutations);
    let doom = s.doomed_outcome();
    if let Doom::Unsatisfiable(e) = doom {
        return Err(e);
    }
    let outcome = s.request(0);
    finish(&mut s, outcome, doom)
}

/// The claim's result from the search's outcome.
fn finish(s: &mut Search<'_>, outcome: Step, doom: Doom) -> Result<Allocation, AllocError> {
    match outcome {
        Ok(true) => s.result(),
        Ok(false) => Err(s.unsatisfiable()),
        Err(Stop::MaxSize) => Err(AllocError::TooManyDevices {
            needed: MAX_ALLOCATED_DEVICES + 1,
        }),
        // The claim fails for sure; which error the scheduler meets first is beyond the
        // search's patience, so one it meets for sure is reported.
        Err(Stop::Fatal(AllocError::SearchLimit(_))) if matches!(doom, Doom::Failing(_)) => {
            match doom {
                Doom::Failing(e) => Err(e),
                _ => Err(AllocError::SearchLimit(MAX_SEARCH_STEPS)),
            }
        }
        Err(Stop::Fatal(e)) => Err(e),
        // Only the quick attempt has a budget, and it is not finished here.
        Err(Stop::Budget) => Err(AllocError::SearchLimit(QUICK_STEPS)),
    }
}

/// The prefix naming a sub-request in a reason (`"gpu/a: "`), empty for a plain request.
fn who(subrequests: bool, label: &str) -> String {
    if subrequests {
        format!("{label}: ")
    } else {
        String::new()
    }
}

/// What is known before searching of a claim without solution.
enum Doom {
    /// Nothing for sure: search.
    Undecided,
    /// No solution, and no selector error or invalid pool is reachable.
    Unsatisfiable(AllocError),
    /// No solution, and the scheduler meets an error on the way (this one or an earlier one
    /// in its order).
    Failing(AllocError),
}

/// Shared counters left per slice once the devices other claims hold are subtracted, and a
/// zero consumption for each.
fn counters_left(a: &Allocator, taken: &[bool]) -> (Vec<Vec<Quantity>>, Vec<Vec<Quantity>>) {
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
fn prepare<'a>(a: &'a Allocator<'a>, alt: &Alt, taken: &[bool]) -> Result<AltData<'a>, AllocError> {
    // A kept allocator (deciding its second claim or more) keeps what each class says of
    // every device, and builds the index of the devices its selectors read: lookups in it cost
    // less than reading the slice's map. A fresh one asks the class of the devices it judges,
    // once per pool when the class reads only the driver, which a pool's devices share.
    let kept = a.reused();
    let class = if kept {
        a.class_verdicts(alt.class)
    } else {
        &[]
    };
    let programs = a.class_programs(alt.class);
    let per_pool = !kept && programs.is_some_and(|p| p.iter().all(|p| p.driver_only()));
    let pool_class = |p: usize| -> Option<Verdict> {
        let first = a.pools[p].devices.clone().next()?;
        // The pool's answer, whatever the binding conditions of the device asked.
        Some(verdict(programs.filter(|_| per_pool)?, &a.devices[first]))
    };
    let class_of = |d: usize, pool: &Option<Verdict>| -> Verdict {
        let dev = &a.devices[d];
        match pool {
            _ if kept => class.get(d).cloned().unwrap_or(Verdict::No),
            // As `class_verdict`: a device under binding conditions is never selected.
            Some(_) if dev.binding => Verdict::No,
            Some(v) => v.clone(),
            None => class_verdict(programs, dev),
        }
    };
    // A selector's verdict, and whether an error is the class's.
    let judge = |d: usize, pool: &Option<Verdict>| -> (Verdict, bool) {
        let dev = &a.devices[d];
        match class_of(d, pool) {
            Verdict::Yes => {}
            e @ Verdict::Err(_) => return (e, true),
            Verdict::No => return (Verdict::No, false),
        }
        if kept {
            dev.attributes();
        }
        match verdict(&alt.programs, dev) {
            Verdict::Yes if !dev.on_node => (Verdict::No, false),
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
                let pool_verdict = pool_class(p);
                for d in pool.devices.clone() {
                    match judge(d, &pool_verdict) {
                        (Verdict::Yes, _) => data.all.push(d),
                        (Verdict::No, _) => {}
                        (Verdict::Err(e), of_class) => return Err(runtime_error(d, of_class, *e)),
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
                let pool_verdict = pool_class(p);
                for d in pool.devices.clone() {
                    // Devices other claims hold are skipped before any selector runs.
                    if held(taken, d) && !alt.admin {
                        continue;
                    }
                    match judge(d, &pool_verdict) {
                        (Verdict::Yes, _) => data.cands.push(Cand::Dev(d)),
                        (Verdict::No, _) => {}
                        (Verdict::Err(e), of_class) => {
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

impl<'a> Search<'a> {
    fn new(
        a: &'a Allocator<'a>,
        claim: &'a CompiledClaim,
        alts: &'a [OneOrMany<AltData<'a>>],
        taken: &'a [bool],
        permutations: bool,
    ) -> Search<'a> {
        let (available, consumed) = counters_left(a, taken);
        let states = claim
            .constraints
            .iter()
            .map(|c| match c.kind {
                ConstraintKind::Match => CState::Common(None),
                ConstraintKind::Distinct => CState::Taken(Vec::new()),
            })
            .collect();
        Search {
            a,
            claim,
            alts,
            taken,
            used: Bits::new(a.devices.len()),
            chosen: Vec::new(),
            selected: [0; MAX_REQUESTS],
            states,
            available,
            consumed,
            permutations,
            steps: 0,
            limit: MAX_SEARCH_STEPS,
            deepest: 0,
            rejected_by: vec![0; claim.constraints.len()],
            feasibility: false,
            upto: claim.requests.len(),
            avoid: None,
        }
    }

    fn tick(&mut self) -> Result<(), Stop> {
        self.steps += 1;
        if self.steps > self.limit {
            if self.limit < MAX_SEARCH_STEPS {
                return Err(Stop::Budget);
            }
            return Err(Stop::Fatal(AllocError::SearchLimit(MAX_SEARCH_STEPS)));
        }
        Ok(())
    }

    /// Allocates request `r` and all after it.
    fn request(&mut self, r: usize) -> Step {
        if r == self.upto {
            return Ok(true);
        }
        self.deepest = self.deepest.max(r);
        if !self.claim.requests[r].subrequests {
            return self.slot(r, 0, 0, 0);
        }
        // The first sub-request that works; one that only ran into the size limit does not
        // count as a failure, so the limit propagates when all of them do.
        let mut all_exceeded = true;
        for s in 0..self.claim.requests[r].alts.len() {
            match self.slot(r, s, 0, 0) {
                Err(Stop::MaxSize) => continue,
                Err(e) => return Err(e),
                Ok(true) => {
                    self.selected[r] = s;
                    return Ok(true);
                }
                Ok(false) => all_exceeded = false,
            }
        }
        if all_exceeded {
            Err(Stop::MaxSize)
        } else {
            Ok(false)
        }
    }

    /// Fills slot `k` of request `r`'s alternative `s`, trying candidates from `from` on.
    fn slot(&mut self, r: usize, s: usize, k: usize, from: usize) -> Step {
        let data = &self.alts[r][s];
        let n = data.num;
        let all = matches!(self.claim.requests[r].alts[s].mode, Mode::All);
        if all && n == 0 {
            return Ok(false);
        }
        if k >= n {
            return self.request(r + 1);
        }
        if self.chosen.len() + n - k > MAX_ALLOCATED_DEVICES {
            return Err(Stop::MaxSize);
        }
        if all {
            let d = data.all[k];
            if self.avoid == Some(d) {
                return Ok(false);
            }
            self.tick()?;
            let Some(saved) = self.add(r, s, d, true)? else {
                return Ok(false);
            };
            // Kubernetes ≤ 1.35 drops the sub-request index here and goes on with the first.
            let next = if self.a.bugs.first_available_all_mode {
                0
            } else {
                s
            };
            let res = self.slot(r, next, k + 1, 0);
            if !matches!(res, Ok(true)) {
                self.remove(saved);
            }
            return res;
        }
        let left = n - k;
        let start = if self.permutations { 0 } else { from };
        // With a constraint's value already fixed, only the candidates of that value (and the
        // hazards) can be met: the others would be rejected without any effect.
        let only: Option<&'a Subset> = if self.permutations {
            None
        } else {
            self.subset(r, s)
        };
        let mut idx = match only {
            Some(sub) => sub.positions.partition_point(|&p| p < start),
            None => start,
        };
        let data: &'a AltData<'a> = &self.alts[r][s];
        loop {
            let (i, remaining) = match only {
                Some(sub) => match sub.positions.get(idx) {
                    Some(&p) => (p, sub.suffix[idx]),
                    None => return Ok(false),
                },
                None if idx < data.cands.len() => (idx, data.devs_from(idx)),
                None => return Ok(false),
            };
            if !self.permutations && remaining < left {
                return self.tail_hazard(r, s, i);
            }
            idx += 1;
            let cand = data.cands[i];
            let i = i + 1;
            match cand {
                Cand::Barrier(_) | Cand::Err(..) if self.feasibility => {}
                Cand::Dev(d) if self.avoid == Some(d) => {}
                Cand::Barrier(p) => {
                    let pool = &self.a.pools[p];
                    return Err(Stop::Fatal(AllocError::InvalidPool {
                        pool: pool.label(),
                        reason: pool.invalid.clone().unwrap_or_default(),
                    }));
                }
                Cand::Err(d, e) => {
                    if !self.used.get(d) {
                        return Err(Stop::Fatal(data.errors[e].clone()));
                    }
                }
                Cand::Dev(d) => {
                    if self.used.get(d) {
                        continue;
                    }
                    self.tick()?;
                    let Some(saved) = self.add(r, s, d, false)? else {
                        continue;
                    };
                    match self.slot(r, s, k + 1, i) {
                        Ok(true) => return Ok(true),
                        res => {
                            self.remove(saved);
                            res?;
                        }
                    }
                }
            }
        }
    }

    /// The candidates of (r, s) a fixed `matchAttribute` value leaves, when there is one.
    fn subset(&self, r: usize, s: usize) -> Option<&'a Subset> {
        let data: &'a AltData<'a> = &self.alts[r][s];
        let has_subs = self.claim.requests[r].subrequests;
        let mut best: Option<&'a Subset> = None;
        for (ci, c) in self.claim.constraints.iter().enumerate() {
            if c.kind != ConstraintKind::Match || !c.applies(r, s, has_subs) {
                continue;
            }
            let CState::Common(Some(common)) = &self.states[ci] else {
                continue;
            };
            let [only] = common.as_slice() else {
                continue;
            };
            if data.index.get().is_none() {
                let n = data.fixed_entries.get() + 1;
                data.fixed_entries.set(n);
                if n < INDEX_AFTER {
                    return None;
                }
            }
            let index = data.index.get_or_init(|| self.build_index(r, s));
            let Some((_, by_value)) = index.iter().find(|(i, _)| *i == ci) else {
                continue;
            };
            let key = scalar_key(only);
            let sub = match by_value.get(&key) {
                Some(sub) => sub,
                None => data
                    .hazards_only
                    .get_or_init(|| Subset::new(data.hazards.clone(), &data.cands)),
            };
            if best.is_none_or(|b| sub.positions.len() < b.positions.len()) {
                best = Some(sub);
            }
        }
        best
    }

    /// Per scalar `matchAttribute` covering (r, s): the candidate positions of each value,
    /// hazards included.
    fn build_index(&self, r: usize, s: usize) -> Vec<(usize, HashMap<ValueKey<'a>, Subset>)> {
        let data = &self.alts[r][s];
        let has_subs = self.claim.requests[r].subrequests;
        let mut out = Vec::new();
        'constraint: for (ci, c) in self.claim.constraints.iter().enumerate() {
            if c.kind != ConstraintKind::Match || !c.applies(r, s, has_subs) {
                continue;
            }
            let mut lists: HashMap<ValueKey<'a>, Vec<usize>> = HashMap::new();
            for (i, cand) in data.cands.iter().enumerate() {
                let Cand::Dev(d) = cand else { continue };
                let Some(v) = self.a.devices[*d].attr_ref(&c.attribute) else {
                    continue;
                };
                let Some(key) = value_key(v) else {
                    continue 'constraint;
                };
                lists.entry(key).or_default().push(i);
            }
            let by_value = lists
                .into_iter()
                .map(|(k, mut positions)| {
                    positions.extend(&data.hazards);
                    positions.sort_unstable();
                    (k, Subset::new(positions, &data.cands))
                })
                .collect();
            out.push((ci, by_value));
        }
        out
    }

    /// The scheduler would go on through the rest of the list without finding a solution:
    /// the first invalid pool or free erring device there is the outcome.
    fn tail_hazard(&self, r: usize, s: usize, from: usize) -> Step {
        if self.feasibility {
            return Ok(false);
        }
        let data = &self.alts[r][s];
        for &h in data.hazards.iter().filter(|h| **h >= from) {
            match data.cands[h] {
                Cand::Barrier(p) => {
                    let pool = &self.a.pools[p];
                    return Err(Stop::Fatal(AllocError::InvalidPool {
                        pool: pool.label(),
                        reason: pool.invalid.clone().unwrap_or_default(),
                    }));
                }
                Cand::Err(d, e) if !self.used.get(d) => {
                    return Err(Stop::Fatal(data.errors[e].clone()));
                }
                _ => {}
            }
        }
        Ok(false)
    }

    /// Takes device `d` for request `r`, alternative `s` if it is free, its counters suffice,
    /// its taints are tolerated and every constraint allows it; returns what undoes it. For
    /// `All` (`must`), a constraint that does not allow it is an error.
    fn add(&mut self, r: usize, s: usize, d: usize, must: bool) -> Result<Option<Saved<'a>>, Stop> {
        let alt = &self.claim.requests[r].alts[s];
        if self.used.get(d) || (held(self.taken, d) && !alt.admin) {
            return Ok(None);
        }
        let dev: &'a Device = &self.a.devices[d];
        if let Some(cu) = &dev.counters {
            if !self.a.features.partitionable_devices {
                return Ok(None);
            }
            if !self.consume(cu.owner, &cu.uses) {
                return Ok(None);
            }
        }
        // From here on a rejected device keeps its counters consumed, as in the scheduler.
        if self.a.features.device_taints
            && !dev.taints().iter().all(|t| tolerated(t, &alt.tolerations))
        {
            return Ok(None);
        }
        let has_subs = self.claim.requests[r].subrequests;
        let mut changes = Vec::new();
        for (ci, c) in self.claim.constraints.iter().enumerate() {
            if !c.applies(r, s, has_subs) {
                continue;
            }
            let value = dev.attr_ref(&c.attribute);
            let next = match value {
                // Kubernetes 1.34 compares pointers: only a missing attribute is rejected.
                Some(_)
                    if c.kind == ConstraintKind::Distinct
                        && self.a.bugs.distinct_attribute_not_enforced =>
                {
                    Some(None)
                }
                Some(v) => next_state(&self.states[ci], v),
                None => None,
            };
            match next {
                Some(Some(next)) => changes.push((ci, next)),
                Some(None) => {}
                None => {
                    self.rejected_by[ci] += 1;
                    if must {
                        return Err(Stop::Fatal(AllocError::ConstraintViolated {
                            request: alt.label.to_string(),
                            device: dev.id(),
                            constraint: c.label.clone(),
                        }));
                    }
                    return Ok(None);
                }
            }
        }
        let mut old = Vec::with_capacity(changes.len());
        for (ci, next) in changes {
            old.push((ci, std::mem::replace(&mut self.states[ci], next)));
        }
        self.used.set(d, true);
        self.chosen.push((r, s, d));
        Ok(Some(Saved { device: d, old }))
    }

    fn remove(&mut self, saved: Saved<'a>) {
        let d = saved.device;
        self.used.set(d, false);
        self.chosen.pop();
        for (ci, st) in saved.old {
            self.states[ci] = st;
        }
        if let Some(cu) = &self.a.devices[d].counters
            && let Some(o) = cu.owner
        {
            for (at, q) in &cu.uses {
                let c = &mut self.consumed[o][*at];
                *c = c.checked_sub(*q).unwrap_or(*c);
            }
        }
    }

    /// Adds a device's counter consumption; when any counter of its slice is then overdrawn,
    /// takes it back and says no.
    fn consume(&mut self, owner: Option<usize>, uses: &[(usize, Quantity)]) -> bool {
        let Some(o) = owner else {
            return true;
        };
        for (at, q) in uses {
            let c = &mut self.consumed[o][*at];
            *c = c.checked_add(*q).unwrap_or(*c);
        }
        let ok = self.available[o]
            .iter()
            .zip(&self.consumed[o])
            .all(|(avail, used)| avail >= used);
        if !ok {
            for (at, q) in uses {
                let c = &mut self.consumed[o][*at];
                *c = c.checked_sub(*q).unwrap_or(*c);
            }
        }
        ok
    }

    /// When the claim provably has no solution, the scheduler's answer without the search:
    /// it would try every combination, so it meets every selector error and invalid pool that
    /// some reachable state leaves free, else finds nothing. `None` when this is not for sure
    /// (the search then runs as usual): the scheduler's order is then the one that decides.
    fn doomed_outcome(&mut self) -> Doom {
        let claim = self.claim;
        let Some((q, request, reason)) = self.doomed(claim.requests.len(), None) else {
            return Doom::Undecided;
        };
        // Requests after a request that can never be placed are never entered. Before it,
        // paths over 32 devices change the scheduler's control flow, and an `All` request
        // breaking a constraint is an error that depends on the state: left to the search.
        let reached = q.map_or(claim.requests.len(), |q| q + 1);
        let max_total: usize = self.alts[..reached]
            .iter()
            .map(|per| per.iter().map(|d| d.num).max().unwrap_or(0))
            .sum();
        let all_constrained = claim.requests[..reached]
            .iter()
            .enumerate()
            .any(|(r, req)| {
                req.alts.iter().enumerate().any(|(s, alt)| {
                    alt.mode == Mode::All
                        && claim
                            .constraints
                            .iter()
                            .any(|c| c.applies(r, s, req.subrequests))
                })
            });
        if max_total > MAX_ALLOCATED_DEVICES || all_constrained {
            return Doom::Undecided;
        }
        let hazards = self.alts[..reached]
            .iter()
            .flatten()
            .any(|d| !d.hazards.is_empty());
        if !hazards {
            return Doom::Unsatisfiable(AllocError::Unsatisfiable { request, reason });
        }
        // Shared counters make the scheduler's path decide which states it reaches.
        if self.permutations {
            return Doom::Undecided;
        }
        for j in 0..reached {
            // A solution of the requests before j, to skip most feasibility searches.
            let mut witness: Option<Vec<usize>> = None;
            for data in &self.alts[j] {
                for &h in &data.hazards {
                    let (dev, err) = match data.cands[h] {
                        Cand::Err(d, e) => (Some(d), data.errors[e].clone()),
                        Cand::Barrier(p) => {
                            let pool = &self.a.pools[p];
                            (
                                None,
                                AllocError::InvalidPool {
                                    pool: pool.label(),
                                    reason: pool.invalid.clone().unwrap_or_default(),
                                },
                            )
                        }
                        Cand::Dev(_) => continue,
                    };
                    if witness.is_none() {
                        match self.prefix_solution(j, None) {
                            Some(Some(w)) => witness = Some(w),
                            // Request j is never reached: none of its hazards is.
                            Some(None) => break,
                            None => return Doom::Undecided,
                        }
                    }
                    let free = match (&witness, dev) {
                        (Some(w), Some(d)) if w.contains(&d) => {
                            match self.prefix_solution(j, Some(d)) {
                                Some(s) => s.is_some(),
                                None => return Doom::Undecided,
                            }
                        }
                        _ => true,
                    };
                    if free {
                        return Doom::Failing(err);
                    }
                }
            }
        }
        Doom::Unsatisfiable(AllocError::Unsatisfiable { request, reason })
    }

    /// Devices placing requests `..j` (never `avoid`), or `None` inside when there are none;
    /// the outer `None` when the search gave up.
    fn prefix_solution(&self, j: usize, avoid: Option<usize>) -> Option<Option<Vec<usize>>> {
        if j == 0 {
            return Some(Some(Vec::new()));
        }
        if self.doomed(j, avoid).is_some() {
            return Some(None);
        }
        let mut f = Search::new(self.a, self.claim, self.alts, self.taken, false);
        f.feasibility = true;
        f.upto = j;
        f.avoid = avoid;
        match f.request(0) {
            Ok(true) => Some(Some(f.chosen.iter().map(|c| c.2).collect())),
            Ok(false) => Some(None),
            Err(_) => None,
        }
    }

    /// Whether requests `..upto` certainly have no solution (never using `avoid`), by
    /// counting: a request none of whose alternatives has enough usable candidates (with the
    /// attributes its constraints read, taints tolerated), or a `matchAttribute` for which no
    /// value is shared by enough candidates of every request it covers. The request that
    /// cannot be placed (when one alone cannot), its name, and why.
    fn doomed(&self, upto: usize, avoid: Option<usize>) -> Option<(Option<usize>, String, String)> {
        let a = self.a;
        let claim = self.claim;
        let usable = |r: usize, s: usize, d: usize| -> bool {
            let alt = &claim.requests[r].alts[s];
            let dev = &a.devices[d];
            let tolerated_all = dev.taints().iter().all(|t| tolerated(t, &alt.tolerations));
            Some(d) != avoid
                && (tolerated_all || !a.features.device_taints)
                && (dev.counters.is_none() || a.features.partitionable_devices)
                && claim.constraints.iter().all(|c| {
                    !c.applies(r, s, claim.requests[r].subrequests)
                        || dev.attr_ref(&c.attribute).is_some()
                })
        };
        // The devices an alternative could take; `None` when it can take none at all, and an
        // empty list when counting cannot tell (an `All` sub-request under the 1.35 bug takes
        // one device and goes on as the first sub-request).
        let takes = |r: usize, s: usize| -> Result<Option<Vec<usize>>, String> {
            let req = &claim.requests[r];
            let alt = &req.alts[s];
            let data = &self.alts[r][s];
            let who = who(req.subrequests, &alt.label);
            match alt.mode {
                Mode::All if s > 0 && a.bugs.first_available_all_mode => Ok(Some(Vec::new())),
                Mode::Exact(n) => {
                    let v: Vec<usize> = data
                        .cands
                        .iter()
                        .filter_map(|c| match c {
                            Cand::Dev(d) if usable(r, s, *d) => Some(*d),
                            _ => None,
                        })
                        .collect();
                    if v.len() >= n {
                        return Ok(Some(v));
                    }
                    let attrs = if claim.constraints.is_empty() {
                        ""
                    } else {
                        " (with the attributes its constraints compare)"
                    };
                    let why = if v.is_empty() {
                        self.why_no_match(alt)
                    } else {
                        String::new()
                    };
                    Err(format!(
                        "{who}needs {n} device(s) of class {} matching its selectors{attrs}, {} match and are free{why}",
                        self.a.class_name(alt.class),
                        v.len()
                    ))
                }
                Mode::All => {
                    let busy = data
                        .all
                        .iter()
                        .filter(|&&d| !alt.admin && held(self.taken, d))
                        .count();
                    if data.all.is_empty() {
                        Err(format!(
                            "{who}allocationMode All needs at least one device of class {} matching its selectors, none match{}",
                            self.a.class_name(alt.class),
                            self.why_no_match(alt)
                        ))
                    } else if busy > 0 {
                        Err(format!(
                            "{who}allocationMode All, but {busy} of the {} matching devices are already allocated",
                            data.all.len()
                        ))
                    } else if data.all.iter().any(|&d| !usable(r, s, d)) {
                        Err(format!(
                            "{who}allocationMode All, but some of the matching devices cannot be taken (a taint not tolerated)"
                        ))
                    } else {
                        Ok(Some(data.all.clone()))
                    }
                }
            }
        };
        let mut possible: Vec<Vec<Option<Vec<usize>>>> = Vec::with_capacity(upto);
        for r in 0..upto {
            let req = &claim.requests[r];
            let mut per = Vec::with_capacity(req.alts.len());
            let mut why = Vec::new();
            for s in 0..req.alts.len() {
                match takes(r, s) {
                    Ok(v) => per.push(v),
                    Err(reason) => {
                        why.push(reason);
                        per.push(None);
                    }
                }
            }
            if why.len() == req.alts.len() {
                return Some((Some(r), req.name.to_string(), why.join("; ")));
            }
            possible.push(per);
        }
        // All requests together need that many different devices.
        let mut needed = 0usize;
        let mut union: Vec<bool> = vec![false; a.devices.len()];
        let mut countable = true;
        for (r, per) in possible.iter().enumerate() {
            let mut least = usize::MAX;
            for (s, devs) in per.iter().enumerate() {
                let Some(devs) = devs else { continue };
                if devs.is_empty() {
                    countable = false;
                }
                least = least.min(match claim.requests[r].alts[s].mode {
                    Mode::Exact(n) => n,
                    Mode::All => devs.len(),
                });
                for &d in devs {
                    union[d] = true;
                }
            }
            needed += least;
        }
        let have = union.iter().filter(|u| **u).count();
        if countable && have < needed {
            return Some((
                None,
                claim.requests[..upto]
                    .last()
                    .map(|r| r.name.to_string())
                    .unwrap_or_default(),
                format!(
                    "the requests need {needed} devices together and a device is allocated at most once, but only {have} match them"
                ),
            ));
        }
        'constraint: for c in claim
            .constraints
            .iter()
            .filter(|c| c.kind == ConstraintKind::Match)
        {
            // Candidates per value, per (request, alternative) the constraint covers.
            let mut counts: BTreeMap<ValueKey, BTreeMap<(usize, usize), usize>> = BTreeMap::new();
            let mut covered = false;
            for (r, per) in possible.iter().enumerate() {
                let subs = claim.requests[r].subrequests;
                for (s, devs) in per.iter().enumerate() {
                    let Some(devs) = devs else { continue };
                    if devs.is_empty() || !c.applies(r, s, subs) {
                        continue;
                    }
                    covered = true;
                    for &d in devs {
                        let Some(key) = a.devices[d].attr_ref(&c.attribute).and_then(value_key)
                        else {
                            // List values intersect: not decided by counting.
                            continue 'constraint;
                        };
                        *counts.entry(key).or_default().entry((r, s)).or_default() += 1;
                    }
                }
            }
            if !covered {
                continue;
            }
            let fits = |v: &BTreeMap<(usize, usize), usize>| {
                possible.iter().enumerate().all(|(r, per)| {
                    let req = &claim.requests[r];
                    per.iter().enumerate().any(|(s, devs)| {
                        let Some(devs) = devs else {
                            return false;
                        };
                        if devs.is_empty() || !c.applies(r, s, req.subrequests) {
                            return true;
                        }
                        let have = v.get(&(r, s)).copied().unwrap_or(0);
                        match req.alts[s].mode {
                            Mode::Exact(n) => have >= n,
                            Mode::All => have == self.alts[r][s].all.len(),
                        }
                    })
                })
            };
            // Together, the requests the constraint covers need that many devices of one value.
            let together = |v: &BTreeMap<(usize, usize), usize>, key: &ValueKey| -> bool {
                let mut needed = 0usize;
                let mut devices = std::collections::BTreeSet::new();
                for (r, per) in possible.iter().enumerate() {
                    let req = &claim.requests[r];
                    let mut least: Option<usize> = None;
                    for (s, devs) in per.iter().enumerate() {
                        let Some(devs) = devs else { continue };
                        if devs.is_empty() || !c.applies(r, s, req.subrequests) {
                            // An alternative outside the constraint: no lower bound.
                            least = Some(0);
                            continue;
                        }
                        let n = match req.alts[s].mode {
                            Mode::Exact(n) => n,
                            Mode::All => devs.len(),
                        };
                        least = Some(least.map_or(n, |l| l.min(n)));
                        if v.contains_key(&(r, s)) {
                            for &d in devs {
                                if a.devices[d]
                                    .attr_ref(&c.attribute)
                                    .and_then(value_key)
                                    .is_some_and(|k| k == *key)
                                {
                                    devices.insert(d);
                                }
                            }
                        }
                    }
                    needed += least.unwrap_or(0);
                }
                devices.len() >= needed
            };
            if !counts.iter().any(|(k, v)| fits(v) && together(v, k)) {
                let first = (0..upto)
                    .find(|&r| {
                        (0..claim.requests[r].alts.len())
                            .any(|s| c.applies(r, s, claim.requests[r].subrequests))
                    })
                    .unwrap_or(0);
                return Some((
                    None,
                    claim.requests[first].name.to_string(),
                    format!(
                        "no value of {} is shared by enough matching devices of every request {} covers",
                        c.attribute.joined(),
                        c.label
                    ),
                ));
            }
        }
        None
    }

    fn result(&self) -> Result<Allocation, AllocError> {
        let a = self.a;
        let results: Vec<DeviceResult> = self
            .chosen
            .iter()
            .map(|&(r, s, d)| {
                let dev = &a.devices[d];
                let alt = &self.claim.requests[r].alts[s];
                DeviceResult {
                    request: alt.label.to_string(),
                    driver: dev.driver().to_string(),
                    pool: dev.pool().to_string(),
                    device: dev.name().to_string(),
                    admin_access: alt.admin.then_some(true),
                }
            })
            .collect();
        let placements = self.chosen.iter().map(|&(_, _, d)| {
            let dev = &a.devices[d];
            let slice = &a.slices[dev.slice as usize];
            let p = dev.placement.as_deref().unwrap_or(&slice.placement);
            (p, slice.name.as_ref())
        });
        let node_name: &str = match &a.node {
            Some(n) => &n.name,
            // Without a node, the node is the one a local device names.
            None => self
                .chosen
                .iter()
                .find_map(|&(_, _, d)| {
                    let dev = &a.devices[d];
                    let slice = &a.slices[dev.slice as usize];
                    dev.placement
                        .as_deref()
                        .unwrap_or(&slice.placement)
                        .node_name
                        .as_deref()
                })
                .unwrap_or_default(),
        };
        let node_selector = allocation_node_selector(placements, node_name)?;
        Ok(Allocation {
            results,
            config: self.config(),
            node_selector,
        })
    }

    /// The configuration, assembled as the scheduler does: each class's config once (naming
    /// every request that uses the class), then the claim's for the requests it names.
    fn config(&self) -> Vec<DeviceAllocationConfiguration> {
        let mut out: Vec<DeviceAllocationConfiguration> = Vec::new();
        // The classes with config met so far: (class, its entries in `out`).
        let mut seen: Vec<(usize, usize, usize)> = Vec::new();
        for (r, req) in self.claim.requests.iter().enumerate() {
            let alt = &req.alts[if req.subrequests { self.selected[r] } else { 0 }];
            if let Some((_, start, end)) = seen.iter().find(|(c, _, _)| *c == alt.class) {
                for c in &mut out[*start..*end] {
                    c.requests
                        .get_or_insert_with(Vec::new)
                        .push(alt.label.to_string());
                }
                continue;
            }
            let start = out.len();
            if let Some(class) = self.a.classes.get(alt.class) {
                for c in class.config.iter() {
                    out.push(DeviceAllocationConfiguration {
                        opaque: c.opaque.clone(),
                        requests: Some(vec![alt.label.to_string()]),
                        source: "FromClass".into(),
                    });
                }
            }
            if out.len() > start {
                seen.push((alt.class, start, out.len()));
            }
        }
        for cc in &self.claim.config {
            let names = cc.requests.as_deref().unwrap_or(&[]);
            let entry = || DeviceAllocationConfiguration {
                opaque: cc.opaque.clone(),
                requests: cc.requests.clone(),
                source: "FromClaim".into(),
            };
            if names.is_empty() {
                out.push(entry());
                continue;
            }
            // One entry per request it names (so a config naming two requests appears twice),
            // as the scheduler writes it.
            for (r, req) in self.claim.requests.iter().enumerate() {
                if names.iter().any(|n| **n == *req.name) {
                    out.push(entry());
                    continue;
                }
                if req.subrequests
                    && names
                        .iter()
                        .any(|n| **n == *req.alts[self.selected[r]].label)
                {
                    out.push(entry());
                }
            }
        }
        out
    }

    /// What the request's selectors themselves show about why nothing matches (see
    /// `Program::explain_no_match`), as a suffix of the reason.
    fn why_no_match(&self, alt: &super::claim::Alt) -> String {
        let devices: Vec<&crate::cel::DeviceAttributes> =
            self.a.devices.iter().map(|d| d.attributes()).collect();
        let hints: Vec<String> = alt
            .programs
            .iter()
            .flat_map(|p| p.explain_no_match(&devices))
            .collect();
        if hints.is_empty() {
            String::new()
        } else {
            format!(" ({})", hints.join("; "))
        }
    }

    fn unsatisfiable(&self) -> AllocError {
        let claim = self.claim;
        // A request none of whose alternatives has enough candidates, in claim order.
        for (r, req) in claim.requests.iter().enumerate() {
            let mut reasons = Vec::new();
            for (s, alt) in req.alts.iter().enumerate() {
                let data = &self.alts[r][s];
                let who = who(req.subrequests, &alt.label);
                match alt.mode {
                    Mode::Exact(n) => {
                        let free = data.devs_from(0);
                        if free < n {
                            let errs = data.errors.len();
                            let note = if errs > 0 {
                                format!(", {errs} fail to evaluate")
                            } else {
                                String::new()
                            };
                            let why = if free == 0 {
                                self.why_no_match(alt)
                            } else {
                                String::new()
                            };
                            reasons.push(format!(
                                "{who}needs {n} device(s) of class {} matching its selectors, {free} match and are free{note}{why}",
                                self.a.class_name(alt.class)
                            ));
                        }
                    }
                    Mode::All => {
                        let busy = data
                            .all
                            .iter()
                            .filter(|&&d| held(self.taken, d) && !alt.admin)
                            .count();
                        if data.all.is_empty() {
                            reasons.push(format!(
                                "{who}allocationMode All needs at least one device of class {} matching its selectors, none match{}",
                                self.a.class_name(alt.class),
                                self.why_no_match(alt)
                            ));
                        } else if busy > 0 {
                            reasons.push(format!(
                                "{who}allocationMode All, but {busy} of the {} matching devices are already allocated",
                                data.all.len()
                            ));
                        }
                    }
                }
            }
            if !reasons.is_empty() && reasons.len() == req.alts.len() {
                return AllocError::Unsatisfiable {
                    request: req.name.to_string(),
                    reason: reasons.join("; "),
                };
            }
        }
        let req = &claim.requests[self.deepest.min(claim.requests.len().saturating_sub(1))];
        let worst = self
            .rejected_by
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .max_by_key(|(_, n)| **n)
            .map(|(i, _)| i);
        let reason = match worst {
            Some(c) => format!(
                "no matching device satisfies {} together with the requests before it",
                claim.constraints[c].label
            ),
            None if self.a.features.device_taints => "not enough unused matching devices whose taints the request tolerates (devices are allocated at most once)".to_string(),
            None => "not enough unused matching devices for all requests of the claim (devices are allocated at most once)".to_string(),
        };
        AllocError::Unsatisfiable {
            request: req.name.to_string(),
            reason,
        }
    }
}

/// A scalar value as the scheduler compares it, as a map key: borrowed, so indexing and
/// counting devices by value allocates nothing (versions compare by their text).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum ValueKey<'a> {
    Bool(bool),
    Int(i64),
    Str(&'a str),
    Ver(String),
}

/// [`value_key`] of a scalar.
fn scalar_key<'a>(s: &Scalar<'a>) -> ValueKey<'a> {
    match *s {
        Scalar::Bool(b) => ValueKey::Bool(b),
        Scalar::Int(i) => ValueKey::Int(i),
        Scalar::Str(s) => ValueKey::Str(s),
        Scalar::Ver(v) => ValueKey::Ver(v.to_string()),
    }
}

/// The key of a scalar value; `None` for lists.
fn value_key(v: AttrRef<'_>) -> Option<ValueKey<'_>> {
    scalar(v).as_ref().map(scalar_key)
}

/// The constraint state after adding a device with value `v`: `None` when it breaks the
/// constraint, `Some(None)` when the state does not change.
fn next_state<'a>(state: &CState<'a>, v: AttrRef<'a>) -> Option<Option<CState<'a>>> {
    match state {
        CState::Common(None) => Some(Some(CState::Common(Some(scalars(v))))),
        CState::Common(Some(common)) => {
            // A scalar equal to the single common value leaves the state as it is.
            if let (Some(x), [only]) = (scalar(v), common.as_slice()) {
                return (x == *only).then_some(None);
            }
            let vals = scalars(v);
            let inter: Vec<Scalar> = common
                .iter()
                .filter(|x| vals.contains(x))
                .copied()
                .collect();
            (!inter.is_empty()).then_some(Some(CState::Common(Some(inter))))
        }
        CState::Taken(taken) => {
            let vals = scalars(v);
            if vals.iter().any(|x| taken.contains(x)) {
                return None;
            }
            let mut t = taken.clone();
            t.extend(vals);
            Some(Some(CState::Taken(t)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Bits;

    /// Inline or on the heap, a bit set is read back, and clearing one leaves the others.
    #[test]
    fn bits_hold_what_is_set() {
        for n in [1, 64, 65, 256, 257, 1000] {
            let mut b = Bits::new(n);
            let on: Vec<usize> = (0..n).filter(|i| i % 7 == 3 || *i == n - 1).collect();
            for &i in &on {
                b.set(i, true);
            }
            for i in 0..n {
                assert_eq!(b.get(i), on.contains(&i), "{n} devices, bit {i}");
            }
            b.set(n - 1, false);
            assert!(!b.get(n - 1), "{n} devices");
            assert_eq!(b.get(3), n > 3, "{n} devices");
        }
    }
}
