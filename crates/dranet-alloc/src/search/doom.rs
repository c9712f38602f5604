//! Claims that cannot succeed, found before the search would try every combination: the
//! request that fails and why, the same answer the scheduler gives after its full search.

use std::collections::BTreeMap;

use crate::claim::{ConstraintKind, Mode};
use crate::error::AllocError;
use crate::limits::MAX_ALLOCATED_DEVICES;

use super::candidates::{Cand, taints_prevent};
use super::constraint::{ValueKey, value_key};
use super::outcome::who;
use super::{Doom, Search};

impl<'a> Search<'a> {
    /// When the claim provably has no solution, the scheduler's answer without the search:
    /// it would try every combination, so it meets every selector error and invalid pool that
    /// some reachable state leaves free, else finds nothing. `None` when this is not for sure
    /// (the search then runs as usual): the scheduler's order is then the one that decides.
    pub(super) fn doomed_outcome(&mut self) -> Doom {
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
        if self.mode.permutations {
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
    pub(super) fn prefix_solution(
        &self,
        j: usize,
        avoid: Option<usize>,
    ) -> Option<Option<Vec<usize>>> {
        if j == 0 {
            return Some(Some(Vec::new()));
        }
        if self.doomed(j, avoid).is_some() {
            return Some(None);
        }
        let mut f = Search::new(
            self.a,
            self.claim,
            self.claim_of,
            self.alts,
            self.held,
            self.mode,
        );
        f.feasibility = true;
        f.upto = j;
        f.avoid = avoid;
        match f.request(0) {
            Ok(true) => Some(Some(f.chosen.iter().map(|c| c.d).collect())),
            Ok(false) => Some(None),
            Err(_) => None,
        }
    }

    /// Whether requests `..upto` certainly have no solution (never using `avoid`), by
    /// counting: a request none of whose alternatives has enough usable candidates (with the
    /// attributes its constraints read, taints tolerated), or a `matchAttribute` for which no
    /// value is shared by enough candidates of every request it covers. The request that
    /// cannot be placed (when one alone cannot), its name, and why.
    pub(super) fn doomed(
        &self,
        upto: usize,
        avoid: Option<usize>,
    ) -> Option<(Option<usize>, String, String)> {
        let a = self.a;
        let claim = self.claim;
        let usable = |r: usize, s: usize, d: usize| -> bool {
            let alt = &claim.requests[r].alts[s];
            let dev = &a.devices[d];
            Some(d) != avoid
                && !taints_prevent(a, dev, &alt.tolerations)
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
                        .filter(|&&d| !alt.admin && self.held.whole(d))
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
}
