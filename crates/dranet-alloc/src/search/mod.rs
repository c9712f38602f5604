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
//! With shared counters (partitionable devices) a device rejected after taking its counters
//! keeps what it consumed for the rest of the call (as in the scheduler before 1.36, which
//! gives them back), and the first device to reach a pool name's counters fixes what is
//! available under it: the outcome depends on the path, so such claims are searched over
//! permutations exactly as the scheduler does.

mod candidates;
pub(crate) use candidates::taints_prevent;
mod constraint;
mod doom;
mod outcome;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

use k8s_openapi::api::resource::v1::ResourceClaimSpec;

use crate::allocation::Allocation;
use crate::allocator::Allocator;
use crate::capacity::{self, Amount};
use crate::cel::Quantity;
use crate::claim::{CompiledClaim, Constraint, ConstraintKind, Mode, Req};
use crate::device::{Device, DeviceId};
use crate::error::AllocError;
use crate::features::DistinctAttribute;
use crate::in_use::InUse;
use crate::limits::{MAX_ALLOCATED_DEVICES, MAX_SEARCH_STEPS};
use crate::one_or_many::OneOrMany;

use candidates::{AltData, Cand, Held, Subset, prepare};
use constraint::{CState, Undo, ValueKey, scalar_key, value_key};
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
        let mut out = self.run_claims(&[claim], &Held::new(self, allocated, &[]))?;
        Ok(out.pop().unwrap_or_default())
    }

    /// Allocates a pod's claims together, as the scheduler does in one call: one solution for
    /// all of them (a device serves several claims only when it allows multiple allocations),
    /// one [`Allocation`] per claim, in order; an error or "does not fit" is the pod's. What
    /// other claims hold is `in_use`: whole devices, and shares of devices that allow multiple
    /// allocations with the capacity they consume.
    pub fn allocate_pod(
        &self,
        claims: &[&CompiledClaim],
        in_use: &InUse,
    ) -> Result<Vec<Allocation>, AllocError> {
        self.run_claims(claims, &Held::new(self, &in_use.devices, &in_use.shares))
    }

    fn run_claims(
        &self,
        claims: &[&CompiledClaim],
        held: &Held,
    ) -> Result<Vec<Allocation>, AllocError> {
        // The classes are kept by position: another allocator's may be others.
        for alt in claims
            .iter()
            .flat_map(|c| c.requests.iter())
            .flat_map(|r| r.alts.iter())
        {
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
        run(self, claims, held)
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

/// A pod's claims as one search: their requests in order, each claim's constraints over its
/// own requests.
struct Pod<'c> {
    claim: Cow<'c, CompiledClaim>,
    /// Each request's claim (empty for one claim).
    claim_of: Vec<usize>,
    /// Where each claim's requests start.
    starts: Vec<usize>,
}

impl<'c> Pod<'c> {
    fn new(claims: &[&'c CompiledClaim]) -> Pod<'c> {
        if let [one] = claims {
            return Pod {
                claim: Cow::Borrowed(*one),
                claim_of: Vec::new(),
                starts: vec![0],
            };
        }
        let mut requests: Vec<Req> = Vec::new();
        let mut constraints: Vec<Constraint> = Vec::new();
        let (mut claim_of, mut starts) = (Vec::new(), Vec::new());
        for (c, claim) in claims.iter().enumerate() {
            let start = requests.len();
            starts.push(start);
            for con in &claim.constraints {
                let scope = match &con.scope {
                    Some(s) => s.iter().map(|(r, a)| (r + start, *a)).collect(),
                    None => (start..start + claim.requests.len())
                        .map(|r| (r, None))
                        .collect(),
                };
                constraints.push(Constraint {
                    scope: Some(scope),
                    ..con.clone()
                });
            }
            requests.extend(claim.requests.iter().cloned());
            claim_of.resize(requests.len(), c);
        }
        Pod {
            claim: Cow::Owned(CompiledClaim {
                requests,
                constraints,
                config: Vec::new(),
            }),
            claim_of,
            starts,
        }
    }

    /// The requests of claim `c`.
    fn requests(&self, c: usize) -> std::ops::Range<usize> {
        let end = self
            .starts
            .get(c + 1)
            .copied()
            .unwrap_or(self.claim.requests.len());
        self.starts[c]..end
    }
}

fn run(
    a: &Allocator,
    claims: &[&CompiledClaim],
    held: &Held,
) -> Result<Vec<Allocation>, AllocError> {
    let pod = Pod::new(claims);
    let claim: &CompiledClaim = &pod.claim;
    // Validation, as the scheduler does it before searching, claim by claim: the devices of
    // `All` requests (every pool must be complete and valid, every selector must evaluate),
    // and each claim's size.
    let mut alts = Vec::with_capacity(claim.requests.len());
    for c in 0..claims.len() {
        let mut min_total = 0usize;
        for req in &claim.requests[pod.requests(c)] {
            if let Some(e) = &req.refused {
                return Err(e.clone());
            }
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
                    _ => prepare(a, alt, held)?,
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
    }
    let touches = |f: &dyn Fn(&Device) -> bool| {
        alts.iter().flatten().any(|d| {
            d.cands.iter().any(|c| match c {
                Cand::Dev(i) | Cand::Err(i, _) => f(&a.devices[*i]),
                Cand::Barrier(_) => false,
            }) || d.all.iter().any(|i| f(&a.devices[*i]))
        })
    };
    // With shared counters a rejected device keeps what it consumed, and 1.36's distinct
    // constraint forgets values as devices come and go: the outcome depends on every device
    // the scheduler tries, so the search tries them all as it does (over permutations before
    // 1.36).
    let counters = a.features.partitionable_devices && touches(&|d| d.counters.is_some());
    let per_request = a.bugs.distinct_attribute == DistinctAttribute::LastPerRequest
        && claim
            .constraints
            .iter()
            .any(|c| c.kind == ConstraintKind::Distinct);
    let shared = a.features.consumable_capacity && touches(&|d| d.allow_multiple_allocations);
    let mode = Mode_ {
        permutations: counters && !a.version.searches_combinations(),
        exhaustive: counters || per_request,
        // Counting devices cannot tell a claim has no solution when a device serves several
        // requests, or over several claims.
        countable: !shared && claims.len() == 1,
    };
    let new = |limit| {
        let mut s = Search::new(a, claim, &pod.claim_of, &alts, held, mode);
        s.limit = limit;
        s
    };
    // A plain search first: most claims are decided in a few steps.
    let mut quick = new(QUICK_STEPS);
    let first = quick.request(0);
    match first {
        Err(Stop::Budget) => {}
        // No solution: the analysis names the request or constraint that makes it so better
        // than where the search happened to stop.
        Ok(false) if mode.countable => {
            let mut s = new(MAX_SEARCH_STEPS);
            if let Doom::Unsatisfiable(e) = s.doomed_outcome() {
                return Err(no_solution(a, e));
            }
            return finish(&mut quick, first, Doom::Undecided, &pod, claims);
        }
        _ => return finish(&mut quick, first, Doom::Undecided, &pod, claims),
    }
    let mut s = new(MAX_SEARCH_STEPS);
    let doom = if mode.countable {
        s.doomed_outcome()
    } else {
        Doom::Undecided
    };
    if let Doom::Unsatisfiable(e) = doom {
        return Err(no_solution(a, e));
    }
    let outcome = s.request(0);
    finish(&mut s, outcome, doom, &pod, claims)
}

/// "No solution" as the version reports it: 1.35 and newer fail the node for its invalid pools
/// when nothing else fits.
fn no_solution(a: &Allocator, e: AllocError) -> AllocError {
    if !a.version.gathers_whole_pools() {
        return e;
    }
    let invalid: Vec<String> = a
        .pools
        .iter()
        .filter_map(|p| Some(format!("{} ({})", p.label(), p.invalid.as_ref()?)))
        .collect();
    if invalid.is_empty() {
        e
    } else {
        AllocError::InvalidPools { pools: invalid }
    }
}

/// How the search goes for one call.
#[derive(Debug, Clone, Copy)]
struct Mode_ {
    /// Every slot starts at the first candidate (the scheduler before 1.36 tries permutations).
    permutations: bool,
    /// Every candidate the scheduler reaches is tried: no shortcut skips one.
    exhaustive: bool,
    /// Counting devices may prove there is no solution ([`Search::doomed_outcome`]).
    countable: bool,
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

/// A device added to the allocation, as `remove` needs it.
struct Saved<'a> {
    r: usize,
    s: usize,
    device: usize,
    /// What undoing the constraints takes beyond counting down.
    undo: Vec<(usize, Undo<'a>)>,
    /// The device was not in use by another claim of the pod before.
    set_used: bool,
    /// A share that took the device's counters (its first share in this allocation).
    share_took_counters: bool,
}

/// A device chosen, with what its share consumes when it allows multiple allocations.
pub(super) struct Chosen {
    pub r: usize,
    pub s: usize,
    pub d: usize,
    pub share: Option<Vec<Amount>>,
}

/// Shared counters while searching: what is left after other claims per counter key (computed
/// when first needed, from the pool of the device that needs it, as the scheduler does), and
/// what this allocation consumes.
#[derive(Default)]
struct Counters {
    available: Vec<Option<Vec<Option<Quantity>>>>,
    consumed: Vec<Vec<Quantity>>,
}

struct Search<'a> {
    a: &'a Allocator<'a>,
    claim: &'a CompiledClaim,
    /// Each request's claim (empty for one claim).
    claim_of: &'a [usize],
    alts: &'a [OneOrMany<AltData<'a>>],
    held: &'a Held<'a>,
    /// Chosen for a claim of this call (devices that allow multiple allocations never are).
    used: Bits,
    chosen: Vec<Chosen>,
    /// Devices chosen per claim.
    per_claim: Vec<usize>,
    /// The sub-request chosen per request.
    selected: Vec<usize>,
    states: Vec<CState<'a>>,
    counters: Counters,
    /// What this allocation consumes of the capacities of devices that allow multiple
    /// allocations, per device, as the scheduler keeps it (an entry goes when all of it is
    /// zero).
    allocating: Vec<(usize, Vec<Quantity>)>,
    mode: Mode_,
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

impl<'a> Search<'a> {
    fn new(
        a: &'a Allocator<'a>,
        claim: &'a CompiledClaim,
        claim_of: &'a [usize],
        alts: &'a [OneOrMany<AltData<'a>>],
        held: &'a Held<'a>,
        mode: Mode_,
    ) -> Search<'a> {
        let distinct = match a.bugs.distinct_attribute {
            DistinctAttribute::NotEnforced => CState::Present,
            DistinctAttribute::LastPerRequest => CState::PerRequest(Vec::new(), 0),
            DistinctAttribute::Enforced | DistinctAttribute::Refused => CState::Taken(Vec::new()),
        };
        let states = claim
            .constraints
            .iter()
            .map(|c| match c.kind {
                ConstraintKind::Match => CState::Common(None, 0),
                ConstraintKind::Distinct => distinct.clone(),
            })
            .collect();
        let mut counters = Counters::default();
        if a.features.partitionable_devices && !a.counter_keys.is_empty() {
            counters.available = vec![None; a.counter_keys.len()];
            counters.consumed = a
                .counter_keys
                .iter()
                .map(|k| vec![Quantity::from_int(0); k.names.len()])
                .collect();
        }
        Search {
            a,
            claim,
            claim_of,
            alts,
            held,
            used: Bits::new(a.devices.len()),
            chosen: Vec::new(),
            per_claim: vec![0; claim_of.last().map_or(1, |c| c + 1)],
            selected: vec![0; claim.requests.len()],
            states,
            counters,
            allocating: Vec::new(),
            mode,
            steps: 0,
            limit: MAX_SEARCH_STEPS,
            deepest: 0,
            rejected_by: vec![0; claim.constraints.len()],
            feasibility: false,
            upto: claim.requests.len(),
            avoid: None,
        }
    }

    /// The claim of request `r`.
    #[inline]
    fn claim_of(&self, r: usize) -> usize {
        self.claim_of.get(r).copied().unwrap_or(0)
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

    /// Allocates request `r` and all after it. Going on to the next claim, the size limit of
    /// the previous claims no longer applies: running into it there is only a failure.
    fn request(&mut self, r: usize) -> Step {
        let res = self.request_from(r);
        if r > 0
            && r < self.claim.requests.len()
            && self.claim_of(r) != self.claim_of(r - 1)
            && let Err(Stop::MaxSize) = res
        {
            return Ok(false);
        }
        res
    }

    fn request_from(&mut self, r: usize) -> Step {
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
        if self.per_claim[self.claim_of(r)] + n - k > MAX_ALLOCATED_DEVICES {
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
        let exhaustive = self.mode.exhaustive;
        let start = if self.mode.permutations { 0 } else { from };
        // With a constraint's value already fixed, only the candidates of that value (and the
        // hazards) can be met: the others would be rejected without any effect.
        let only: Option<&'a Subset> = if exhaustive { None } else { self.subset(r, s) };
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
            if !exhaustive && remaining < left {
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
                    if !self.busy(r, s, d) {
                        return Err(Stop::Fatal(data.errors[e].clone()));
                    }
                }
                Cand::Dev(d) => {
                    if self.busy(r, s, d) {
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

    /// Whether the scheduler passes device `d` over for request `r` without a look: chosen
    /// already (for an admin request, by the same claim), or held by another claim. A device
    /// that allows multiple allocations is only ever held whole by others.
    #[inline]
    fn busy(&self, r: usize, s: usize, d: usize) -> bool {
        let admin = self.claim.requests[r].alts[s].admin;
        if self.a.multi(d) {
            return !admin && self.held.whole(d);
        }
        if admin {
            return self.used_by_claim(d, self.claim_of(r));
        }
        self.used.get(d) || self.held.whole(d)
    }

    /// Whether device `d` is chosen for claim `c`.
    fn used_by_claim(&self, d: usize, c: usize) -> bool {
        if self.claim_of.is_empty() {
            return self.used.get(d);
        }
        self.used.get(d)
            && self
                .chosen
                .iter()
                .any(|x| x.d == d && self.claim_of(x.r) == c)
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
            let Some(only) = self.states[ci].single() else {
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
                Cand::Err(d, e) if !self.busy(r, s, d) => {
                    return Err(Stop::Fatal(data.errors[e].clone()));
                }
                _ => {}
            }
        }
        Ok(false)
    }

    /// Passes over device `d` after it was added to the first `added` constraints (those that
    /// apply to request `r`, alternative `s`): takes it out of them again and gives back the
    /// counters it took (`took`).
    fn pass_over(
        &mut self,
        r: usize,
        s: usize,
        d: usize,
        added: usize,
        undo: &mut Vec<(usize, Undo<'a>)>,
        took: bool,
    ) {
        let has_subs = self.claim.requests[r].subrequests;
        for (ci, con) in self.claim.constraints[..added].iter().enumerate() {
            if con.applies(r, s, has_subs) {
                let u = take_undo(undo, ci);
                self.states[ci].remove(r, u);
            }
        }
        if took {
            self.release(d);
        }
    }

    /// Takes device `d` for request `r`, alternative `s`, with the scheduler's checks in its
    /// order: free, capacity left (`ExactCount`), counters, taints, constraints, capacity left
    /// (`All`); returns what undoes it. For `All` (`must`), a constraint that does not allow it
    /// is an error.
    fn add(&mut self, r: usize, s: usize, d: usize, must: bool) -> Result<Option<Saved<'a>>, Stop> {
        let alt = &self.claim.requests[r].alts[s];
        let a = self.a;
        let multi = a.multi(d);
        let c = self.claim_of(r);
        if alt.admin {
            if !multi && self.used_by_claim(d, c) {
                return Ok(None);
            }
        } else if self.held.whole(d) || (!multi && self.used.get(d)) {
            return Ok(None);
        }
        let dev: &'a Device = &a.devices[d];
        if multi && !must && !self.capacity_fits(d, r, s) {
            return Ok(None);
        }
        // Every version checks and takes counters before taints and constraints (the first
        // device to reach a counter key fixes what is available under it); 1.36 gives them
        // back when those reject the device, older versions keep them taken.
        let gives_back = a.version.gives_back_rejected_counters();
        // A device shared already took its counters with its first share.
        let share_takes_counters = multi && dev.counters.is_some() && !self.capacity_in_use(d);
        let mut took = false;
        if let Some(cu) = &dev.counters {
            if !a.features.partitionable_devices {
                return Ok(None);
            }
            if !multi || share_takes_counters {
                if !self.consume(d, cu.owner, cu.pool, &cu.uses) {
                    return Ok(None);
                }
                took = gives_back;
            }
        }
        if taints_prevent(a, dev, &alt.tolerations) {
            if took {
                self.release(d);
            }
            return Ok(None);
        }
        let has_subs = self.claim.requests[r].subrequests;
        let mut undo: Vec<(usize, Undo<'a>)> = Vec::new();
        for (ci, con) in self.claim.constraints.iter().enumerate() {
            if !con.applies(r, s, has_subs) {
                continue;
            }
            match self.states[ci].add(dev.attr_ref(&con.attribute), r) {
                Some(Undo::Nothing) => {}
                Some(u) => undo.push((ci, u)),
                None => {
                    self.rejected_by[ci] += 1;
                    if must {
                        return Err(Stop::Fatal(AllocError::ConstraintViolated {
                            request: alt.label.to_string(),
                            device: dev.id(),
                            constraint: con.label.clone(),
                        }));
                    }
                    // The scheduler takes the device out of the constraints before this one.
                    self.pass_over(r, s, d, ci, &mut undo, took);
                    return Ok(None);
                }
            }
        }
        if multi && must && !self.capacity_fits(d, r, s) {
            // Before 1.36.3 the scheduler leaves the device in every constraint (and its
            // counters taken); 1.36.3 takes it out of them and gives the counters back.
            let added = if a.bugs.all_capacity_keeps_constraints {
                0
            } else {
                self.claim.constraints.len()
            };
            self.pass_over(r, s, d, added, &mut undo, took);
            return Ok(None);
        }
        let set_used = !multi && !self.used.get(d);
        if set_used {
            self.used.set(d, true);
        }
        let share = multi.then(|| {
            let caps = a.capacities.get(d).map(Vec::as_slice).unwrap_or_default();
            let amounts = capacity::consumption(caps, alt.capacity.as_ref());
            let values: Vec<Quantity> = amounts.iter().map(|x| x.value).collect();
            match self.allocating.iter_mut().find(|(x, _)| *x == d) {
                Some((_, sum)) => {
                    for (q, v) in sum.iter_mut().zip(&values) {
                        *q = q.checked_add(*v).unwrap_or(*q);
                    }
                }
                None => self.allocating.push((d, values)),
            }
            amounts
        });
        self.chosen.push(Chosen { r, s, d, share });
        self.per_claim[c] += 1;
        Ok(Some(Saved {
            r,
            s,
            device: d,
            undo,
            set_used,
            share_took_counters: share_takes_counters,
        }))
    }

    fn remove(&mut self, saved: Saved<'a>) {
        let Saved {
            r,
            s,
            device: d,
            mut undo,
            set_used,
            share_took_counters,
        } = saved;
        if set_used {
            self.used.set(d, false);
        }
        let c = self.claim_of(r);
        self.per_claim[c] -= 1;
        let chosen = self.chosen.pop();
        let has_subs = self.claim.requests[r].subrequests;
        for (ci, con) in self.claim.constraints.iter().enumerate() {
            if con.applies(r, s, has_subs) {
                let u = take_undo(&mut undo, ci);
                self.states[ci].remove(r, u);
            }
        }
        if let Some(amounts) = chosen.and_then(|c| c.share) {
            if let Some(at) = self.allocating.iter().position(|(x, _)| *x == d) {
                let sum = &mut self.allocating[at].1;
                for (q, v) in sum.iter_mut().zip(&amounts) {
                    *q = q.checked_sub(v.value).unwrap_or(*q);
                }
                if sum.iter().all(|q| q.sign() == 0) {
                    self.allocating.remove(at);
                }
            }
            // A share gives back its capacity; 1.36 also the counters its first share took,
            // 1.35 never (measured with 1.36.3's allocbench; 1.35 from its source).
            if !(share_took_counters && self.a.version.share_returns_counters()) {
                return;
            }
        }
        self.release(d);
    }

    /// Gives back what device `d` consumes from shared counters.
    fn release(&mut self, d: usize) {
        if let Some(cu) = &self.a.devices[d].counters
            && let Some(o) = cu.owner
        {
            for (at, q) in &cu.uses {
                let c = &mut self.counters.consumed[o][*at];
                *c = c.checked_sub(*q).unwrap_or(*c);
            }
        }
    }

    /// Whether the capacities of device `d` (which allows multiple allocations) still take
    /// request `r`'s alternative `s`.
    fn capacity_fits(&self, d: usize, r: usize, s: usize) -> bool {
        let alt = &self.claim.requests[r].alts[s];
        let caps = self
            .a
            .capacities
            .get(d)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let allocating = self
            .allocating
            .iter()
            .find(|(x, _)| *x == d)
            .map(|(_, v)| v.as_slice());
        capacity::fits(caps, alt.capacity.as_ref(), self.held.shared(d), allocating) == Some(true)
    }

    /// Whether some of device `d`'s capacity is taken, by other claims or this allocation.
    fn capacity_in_use(&self, d: usize) -> bool {
        self.held.shared(d).is_some() || self.allocating.iter().any(|(x, _)| *x == d)
    }

    /// Adds a device's counter consumption; when any counter of its key is then overdrawn,
    /// takes it back and says no.
    fn consume(
        &mut self,
        d: usize,
        owner: Option<usize>,
        pool: u32,
        uses: &[(usize, Quantity)],
    ) -> bool {
        let Some(o) = owner else {
            return true;
        };
        if self.counters.available[o].is_none() {
            self.counters.available[o] = Some(self.available_counters(o, d, pool as usize));
        }
        let consumed = &mut self.counters.consumed[o];
        for (at, q) in uses {
            let c = &mut consumed[*at];
            *c = c.checked_add(*q).unwrap_or(*c);
        }
        let available = self.counters.available[o].as_deref().unwrap_or_default();
        let ok = available
            .iter()
            .zip(consumed.iter())
            .all(|(avail, used)| avail.is_none_or(|a| a >= *used));
        if !ok {
            for (at, q) in uses {
                let c = &mut consumed[*at];
                *c = c.checked_sub(*q).unwrap_or(*c);
            }
        }
        ok
    }

    /// What is left of counter key `o`'s counters after other claims, computed when device
    /// `d` of `pool` first needs them: 1.34 from the slice that declares them, minus its held
    /// devices; 1.35+ from `pool`'s counter sets, minus every held device of the pool, also on
    /// other nodes.
    fn available_counters(&self, o: usize, d: usize, pool: usize) -> Vec<Option<Quantity>> {
        let a = self.a;
        let key = &a.counter_keys[o];
        let sub = |avail: &mut Vec<Option<Quantity>>, uses: &[(usize, Quantity)]| {
            for (at, q) in uses {
                if let Some(Some(left)) = avail.get_mut(*at) {
                    *left = left.checked_sub(*q).unwrap_or(*left);
                }
            }
        };
        if !a.version.gathers_whole_pools() {
            let mut avail: Vec<Option<Quantity>> = key.totals.iter().copied().map(Some).collect();
            let slice = &a.slices[a.devices[d].slice as usize].name;
            for (i, dev) in a.devices.iter().enumerate() {
                if self.held.whole(i)
                    && let Some(cu) = &dev.counters
                    && cu.owner == Some(o)
                    && a.slices[dev.slice as usize].name == *slice
                {
                    sub(&mut avail, &cu.uses);
                }
            }
            return avail;
        }
        let mut avail = vec![None; key.names.len()];
        let Some(p) = a.pools.get(pool) else {
            return avail;
        };
        let Some(pc) = &p.counters else {
            return avail;
        };
        for (at, q) in &pc.totals {
            if let Some(slot) = avail.get_mut(*at) {
                *slot = Some(*q);
            }
        }
        for i in p.devices.clone() {
            if self.held.any(i)
                && let Some(cu) = &a.devices[i].counters
            {
                sub(&mut avail, &cu.uses);
            }
        }
        for (name, uses) in &pc.outside {
            let id = DeviceId {
                driver: p.driver.to_string(),
                pool: p.name.to_string(),
                device: name.clone(),
            };
            if self.held.holds(&id) {
                sub(&mut avail, uses);
            }
        }
        avail
    }
}

/// The undo recorded for constraint `ci`, taken out of `undo` (nothing when none was).
fn take_undo<'a>(undo: &mut Vec<(usize, Undo<'a>)>, ci: usize) -> Undo<'a> {
    match undo.iter().position(|(c, _)| *c == ci) {
        Some(at) => undo.swap_remove(at).1,
        None => Undo::Nothing,
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
