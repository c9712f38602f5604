//! The claim's result from the search's outcome: the allocation as the scheduler writes it, or
//! the request that could not be met and why.

use k8s_openapi::api::resource::v1::DeviceAllocationConfiguration;

use crate::allocation::{Allocation, DeviceResult};
use crate::cel::hash_words;
use crate::claim::{Alt, CompiledClaim, Mode};
use crate::device::DeviceId;
use crate::error::AllocError;
use crate::limits::{MAX_ALLOCATED_DEVICES, MAX_SEARCH_STEPS};
use crate::node::allocation_node_selector;

use super::{Chosen, Doom, Pod, QUICK_STEPS, Search, Step, Stop, no_solution};

/// The claims' results from the search's outcome.
pub(super) fn finish(
    s: &mut Search<'_>,
    outcome: Step,
    doom: Doom,
    pod: &Pod<'_>,
    claims: &[&CompiledClaim],
) -> Result<Vec<Allocation>, AllocError> {
    match outcome {
        Ok(true) => (0..claims.len())
            .map(|c| s.result(c, pod, claims[c]))
            .collect(),
        Ok(false) => Err(no_solution(s.a, s.unsatisfiable())),
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

/// A share ID for the `nth` device of claim `c` in this call: UID-shaped (a version 4 UUID's
/// layout), derived from the device and what shares it already has, so an answer is the same
/// every time it is asked and two shares of a device differ.
fn share_id(dev: &DeviceId, c: usize, nth: usize, held: usize) -> String {
    let seed = (c as u64) << 40 ^ (nth as u64) << 20 ^ held as u64;
    let text = dev.to_string();
    let h1 = hash_words(seed, text.as_bytes());
    let h2 = hash_words(h1 ^ 0x9e37_79b9_7f4a_7c15, text.as_bytes());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        h1 >> 32,
        (h1 >> 16) & 0xffff,
        h1 & 0xfff,
        0x8000 | (h2 >> 48) & 0x3fff,
        h2 & 0xffff_ffff_ffff
    )
}

/// The prefix naming a sub-request in a reason (`"gpu/a: "`), empty for a plain request.
pub(super) fn who(subrequests: bool, label: &str) -> String {
    if subrequests {
        format!("{label}: ")
    } else {
        String::new()
    }
}

impl<'a> Search<'a> {
    /// Claim `c`'s allocation: its devices in the order chosen, its config and node selector.
    pub(super) fn result(
        &self,
        c: usize,
        pod: &Pod<'_>,
        claim: &CompiledClaim,
    ) -> Result<Allocation, AllocError> {
        let a = self.a;
        let mine: Vec<&Chosen> = self
            .chosen
            .iter()
            .filter(|x| self.claim_of(x.r) == c)
            .collect();
        let mut results = Vec::with_capacity(mine.len());
        for (nth, x) in mine.iter().enumerate() {
            let dev = &a.devices[x.d];
            let alt = &self.claim.requests[x.r].alts[x.s];
            let mut r = DeviceResult {
                request: alt.label.to_string(),
                driver: dev.driver().to_string(),
                pool: dev.pool().to_string(),
                device: dev.name().to_string(),
                admin_access: alt.admin.then_some(true),
                share_id: None,
                consumed_capacity: Default::default(),
                binding_conditions: Vec::new(),
                binding_failure_conditions: Vec::new(),
                tolerations: Vec::new(),
            };
            if let Some(amounts) = &x.share {
                let id = dev.id();
                r.share_id = Some(share_id(&id, c, nth, self.held.shares_of(&id)));
                let caps = a.capacities.get(x.d).map(Vec::as_slice).unwrap_or_default();
                r.consumed_capacity = caps
                    .iter()
                    .zip(amounts)
                    .map(|(cap, amount)| (cap.name.clone(), amount.text.clone()))
                    .collect();
            }
            if a.features.device_binding_conditions {
                r.binding_conditions = dev.binding_conditions().to_vec();
                r.binding_failure_conditions = dev.binding_failure_conditions().to_vec();
            }
            if a.version.results_carry_tolerations() {
                r.tolerations = alt.tolerations.clone();
            }
            results.push(r);
        }
        let placements = mine.iter().map(|x| {
            let dev = &a.devices[x.d];
            let slice = &a.slices[dev.slice as usize];
            let p = dev.placement.as_deref().unwrap_or(&slice.placement);
            let binds = a.version.honours_binds_to_node() && dev.binds_to_node();
            (p, slice.name.as_ref(), binds)
        });
        let node_name: &str = match &a.node {
            Some(n) => &n.name,
            // Without a node, the node is the one a local device names.
            None => mine
                .iter()
                .find_map(|x| {
                    let dev = &a.devices[x.d];
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
            config: self.config(pod, c, claim),
            node_selector,
        })
    }

    /// The configuration of claim `c`, assembled as the scheduler does: each class's config
    /// once (naming every request that uses the class), then the claim's for the requests it
    /// names.
    pub(super) fn config(
        &self,
        pod: &Pod<'_>,
        c: usize,
        claim: &CompiledClaim,
    ) -> Vec<DeviceAllocationConfiguration> {
        let offset = pod.requests(c).start;
        let selected = |r: usize| self.selected[offset + r];
        let mut out: Vec<DeviceAllocationConfiguration> = Vec::new();
        // The classes with config met so far: (class, its entries in `out`).
        let mut seen: Vec<(usize, usize, usize)> = Vec::new();
        for (r, req) in claim.requests.iter().enumerate() {
            let alt = &req.alts[if req.subrequests { selected(r) } else { 0 }];
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
        for cc in &claim.config {
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
            for (r, req) in claim.requests.iter().enumerate() {
                if names.iter().any(|n| **n == *req.name) {
                    out.push(entry());
                    continue;
                }
                if req.subrequests && names.iter().any(|n| **n == *req.alts[selected(r)].label) {
                    out.push(entry());
                }
            }
        }
        out
    }

    /// What the request's selectors themselves show about why nothing matches (see
    /// `Program::explain_no_match`), as a suffix of the reason.
    pub(super) fn why_no_match(&self, alt: &Alt) -> String {
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

    pub(super) fn unsatisfiable(&self) -> AllocError {
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
                            .filter(|&&d| self.held.whole(d) && !alt.admin)
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
            None => {
                let what = if self.a.features.device_taints {
                    "not enough unused matching devices whose taints the request tolerates"
                } else {
                    "not enough unused matching devices for all requests of the claim"
                };
                // With shared devices, "at most once" is not the rule: name the one that is.
                let once = if (0..self.a.devices.len()).any(|d| self.a.multi(d)) {
                    "devices are allocated at most once, or several times while their capacity lasts"
                } else {
                    "devices are allocated at most once"
                };
                format!("{what} ({once})")
            }
        };
        AllocError::Unsatisfiable {
            request: req.name.to_string(),
            reason,
        }
    }
}
