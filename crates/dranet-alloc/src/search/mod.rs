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

mod candidates;
mod constraint;
mod doom;
mod outcome;

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use k8s_openapi::api::resource::v1::ResourceClaimSpec;

use crate::allocation::Allocation;
use crate::allocator::Allocator;
use crate::cel::Quantity;
use crate::claim::{CompiledClaim, ConstraintKind, Mode};
use crate::device::{Device, DeviceId};
use crate::error::AllocError;
use crate::limits::{MAX_ALLOCATED_DEVICES, MAX_REQUESTS, MAX_SEARCH_STEPS};
use crate::one_or_many::OneOrMany;

use candidates::{AltData, Cand, Subset, counters_left, held, prepare, tolerated};
use constraint::{CState, ValueKey, next_state, scalar_key, value_key};
use outcome::finish;

impl Allocator<'_> {
    /// Finds the devices for a compiled claim as the scheduler would, never using those in
    /// `allocated` (devices other claims hold) except for `adminAccess` requests. A claim
    /// compiled by another allocator is refused ([`AllocError::InvalidClaim`]).
    pub fn allocate(
        &self,
        claim: &CompiledClaim,
        allocated: &[DeviceId],
    ) -> Result<Allocation, AllocError> {
        // The classes are kept by position: another allocator's may be others.
        for alt in claim.requests.iter().flat_map(|r| r.alts.iter()) {
            if self
                .classes
                .get(alt.class)
                .is_none_or(|c| c.hash != alt.class_hash)
            {
                return Err(AllocError::InvalidClaim(format!(
                    "request {}: the claim was compiled by another allocator",
                    alt.label
                )));
            }
        }
        // Relaxed: a count for a choice of speed, ordering nothing else.
        let _ = self
            .claims
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1));
        run(self, claim, allocated)
    }

    /// [`Allocator::compile`] then [`Allocator::allocate`].
    pub fn allocate_spec(
        &self,
        claim: &ResourceClaimSpec,
        allocated: &[DeviceId],
    ) -> Result<Allocation, AllocError> {
        self.allocate(&self.compile(claim)?, allocated)
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
                // cache key: after an `All` first one, an `All` second one reads its matches.
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
