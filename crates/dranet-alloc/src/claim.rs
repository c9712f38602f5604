//! A claim checked and compiled once: its requests and sub-requests, constraints and config.

use k8s_openapi::api::resource::v1::{
    CapacityRequirements, DeviceClaimConfiguration, DeviceRequest, DeviceSelector,
    DeviceToleration, ResourceClaimSpec,
};

use std::sync::Arc;

use crate::allocator::Allocator;
use crate::capacity::{Amount, Requests};
use crate::cel::{AttrKey, Program};
use crate::error::AllocError;
use crate::features::DistinctAttribute;
use crate::limits::MAX_REQUESTS;
use crate::one_or_many::OneOrMany;
use crate::selectors::selector_programs;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Exact(usize),
    All,
}

/// One way to satisfy a request: the request itself (`exactly`) or one sub-request.
#[derive(Debug, Clone)]
pub(crate) struct Alt {
    /// `req` (the request's name, shared) or `req/sub`.
    pub label: Arc<str>,
    /// The DeviceClass, by position in the allocator that compiled the claim.
    pub class: usize,
    /// The hash of the class's name, to refuse a claim compiled by another allocator.
    pub class_hash: u64,
    pub programs: OneOrMany<Arc<Program>>,
    pub mode: Mode,
    pub admin: bool,
    pub tolerations: Vec<DeviceToleration>,
    /// `capacity.requests` (consumable capacity).
    pub capacity: Option<Requests>,
}

#[derive(Debug, Clone)]
pub(crate) struct Req {
    pub name: Arc<str>,
    /// `firstAvailable`: the alternatives are sub-requests.
    pub subrequests: bool,
    /// The feature it uses that is off: the scheduler refuses the claim on reaching this
    /// request as it validates the claims in order, so a request or claim before it may fail
    /// first (its alternatives are then not compiled).
    pub refused: Option<AllocError>,
    pub alts: OneOrMany<Alt>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConstraintKind {
    Match,
    Distinct,
}

#[derive(Debug, Clone)]
pub(crate) struct Constraint {
    pub kind: ConstraintKind,
    pub attribute: AttrKey,
    /// Which (request, alternative) it covers; `None` = every request.
    pub scope: Option<Vec<(usize, Option<usize>)>>,
    pub label: String,
}

impl Constraint {
    pub fn applies(&self, req: usize, alt: usize, has_subs: bool) -> bool {
        match &self.scope {
            None => true,
            Some(s) => s
                .iter()
                .any(|(r, a)| *r == req && (a.is_none() || (has_subs && *a == Some(alt)))),
        }
    }
}

/// A validated claim with its CEL compiled, reusable across allocations with the
/// [`Allocator`] that compiled it. It names its DeviceClasses by their position in that
/// allocator: another allocator refuses it ([`AllocError::InvalidClaim`]).
#[derive(Debug, Clone)]
pub struct CompiledClaim {
    pub(crate) requests: Vec<Req>,
    pub(crate) constraints: Vec<Constraint>,
    pub(crate) config: Vec<DeviceClaimConfiguration>,
}

struct AltSpec<'a> {
    label: Arc<str>,
    class: &'a str,
    selectors: &'a Option<Vec<DeviceSelector>>,
    mode: Option<&'a str>,
    count: Option<i64>,
    admin: Option<bool>,
    capacity: Option<&'a CapacityRequirements>,
    tolerations: &'a Option<Vec<DeviceToleration>>,
}

impl CompiledClaim {
    pub(crate) fn new(a: &Allocator, claim: &ResourceClaimSpec) -> Result<Self, AllocError> {
        let invalid = |m: String| AllocError::InvalidClaim(m);
        let Some(devices) = &claim.devices else {
            return Ok(CompiledClaim {
                requests: Vec::new(),
                constraints: Vec::new(),
                config: Vec::new(),
            });
        };
        let reqs = devices.requests.as_deref().unwrap_or(&[]);
        if reqs.len() > MAX_REQUESTS {
            return Err(invalid(format!(
                "{} requests, at most {MAX_REQUESTS} are allowed",
                reqs.len()
            )));
        }
        let mut requests = Vec::with_capacity(reqs.len());
        for (i, r) in reqs.iter().enumerate() {
            if r.name.is_empty() {
                return Err(invalid(format!("request #{i} has no name")));
            }
            if reqs[..i].iter().any(|o| o.name == r.name) {
                return Err(invalid(format!("request name {:?} is used twice", r.name)));
            }
            let name: Arc<str> = Arc::from(r.name.as_str());
            let refused = refused_feature(a, r);
            let alts = match (&r.exactly, &r.first_available) {
                _ if refused.is_some() => OneOrMany::Empty,
                (Some(e), None) => OneOrMany::One(compile_alt(
                    a,
                    AltSpec {
                        label: Arc::clone(&name),
                        class: &e.device_class_name,
                        selectors: &e.selectors,
                        mode: e.allocation_mode.as_deref(),
                        count: e.count,
                        admin: e.admin_access,
                        capacity: e.capacity.as_ref(),
                        tolerations: &e.tolerations,
                    },
                )?),
                (None, Some(subs)) if !subs.is_empty() => {
                    // Every sub-request's name is checked before any is compiled.
                    for (j, s) in subs.iter().enumerate() {
                        if s.name.is_empty() || subs[..j].iter().any(|o| o.name == s.name) {
                            return Err(invalid(format!(
                                "request {}: sub-request #{j} has an empty or repeated name",
                                r.name
                            )));
                        }
                    }
                    let mut alts = OneOrMany::Empty;
                    for s in subs {
                        alts.push(compile_alt(
                            a,
                            AltSpec {
                                label: Arc::from(format!("{}/{}", r.name, s.name)),
                                class: &s.device_class_name,
                                selectors: &s.selectors,
                                mode: s.allocation_mode.as_deref(),
                                count: s.count,
                                admin: None,
                                capacity: s.capacity.as_ref(),
                                tolerations: &s.tolerations,
                            },
                        )?);
                    }
                    alts
                }
                (None, Some(_)) => {
                    return Err(invalid(format!(
                        "request {}: firstAvailable is empty",
                        r.name
                    )));
                }
                (Some(_), Some(_)) => {
                    return Err(invalid(format!(
                        "request {}: exactly and firstAvailable are both set",
                        r.name
                    )));
                }
                (None, None) => {
                    return Err(invalid(format!(
                        "request {}: one of exactly or firstAvailable is required",
                        r.name
                    )));
                }
            };
            requests.push(Req {
                name,
                subrequests: r.first_available.is_some(),
                refused,
                alts,
            });
        }
        let mut constraints = Vec::new();
        for (i, c) in devices.constraints.iter().flatten().enumerate() {
            let (kind, attribute) = match (&c.match_attribute, &c.distinct_attribute) {
                (Some(m), None) => (ConstraintKind::Match, m.clone()),
                (None, Some(d)) => (ConstraintKind::Distinct, d.clone()),
                _ => {
                    return Err(invalid(format!(
                        "constraint #{i}: exactly one of matchAttribute or distinctAttribute is required"
                    )));
                }
            };
            if kind == ConstraintKind::Distinct
                && a.bugs.distinct_attribute == DistinctAttribute::Refused
            {
                return Err(invalid(format!(
                    "constraint #{i}: distinctAttribute is unknown to the Kubernetes {} scheduler's allocator (DRAConsumableCapacity is off)",
                    a.version
                )));
            }
            if !attribute.contains('/') {
                return Err(invalid(format!(
                    "constraint #{i}: attribute {attribute:?} must be fully qualified (domain/name)"
                )));
            }
            let names = c.requests.as_deref().unwrap_or(&[]);
            let scope = if names.is_empty() {
                None
            } else {
                let mut s = Vec::new();
                for n in names {
                    let (rn, sub) = match n.split_once('/') {
                        Some((r, s)) => (r, Some(s)),
                        None => (n.as_str(), None),
                    };
                    let ri = requests
                        .iter()
                        .position(|r| *r.name == *rn)
                        .ok_or_else(|| {
                            invalid(format!("constraint #{i}: unknown request {n:?}"))
                        })?;
                    let ai = match sub {
                        None => None,
                        // A refused request fails the claim before its constraints matter.
                        Some(_) if requests[ri].refused.is_some() => Some(0),
                        Some(sub) => Some(
                            requests[ri]
                                .alts
                                .iter()
                                .position(|a| *a.label == **n)
                                .filter(|_| requests[ri].subrequests)
                                .ok_or_else(|| {
                                    invalid(format!(
                                        "constraint #{i}: request {rn} has no sub-request {sub:?}"
                                    ))
                                })?,
                        ),
                    };
                    s.push((ri, ai));
                }
                Some(s)
            };
            let what = match kind {
                ConstraintKind::Match => "matchAttribute",
                ConstraintKind::Distinct => "distinctAttribute",
            };
            let label = if names.is_empty() {
                format!("constraint #{i} ({what} {attribute}, all requests)")
            } else {
                format!(
                    "constraint #{i} ({what} {attribute}, requests {})",
                    names.join(", ")
                )
            };
            constraints.push(Constraint {
                kind,
                attribute: AttrKey::qualified(&attribute, ""),
                scope,
                label,
            });
        }
        Ok(CompiledClaim {
            requests,
            constraints,
            config: devices.config.clone().unwrap_or_default(),
        })
    }
}

/// The first feature request `r` uses that is off, in the order the scheduler checks them:
/// `firstAvailable`, a capacity request (of any sub-request), `adminAccess`.
fn refused_feature(a: &Allocator, r: &DeviceRequest) -> Option<AllocError> {
    let off = |request: &str, feature: &str| {
        Some(AllocError::FeatureDisabled {
            request: request.to_string(),
            feature: feature.to_string(),
        })
    };
    let subs = r.first_available.as_deref().unwrap_or_default();
    if !subs.is_empty() && !a.features.prioritized_list {
        return off(&r.name, "firstAvailable (DRAPrioritizedList)");
    }
    if !a.features.consumable_capacity {
        let capacity = "a capacity request (DRAConsumableCapacity)";
        if r.exactly.as_ref().is_some_and(|e| e.capacity.is_some()) {
            return off(&r.name, capacity);
        }
        if let Some(s) = subs.iter().find(|s| s.capacity.is_some()) {
            return off(&format!("{}/{}", r.name, s.name), capacity);
        }
    }
    if !a.features.admin_access && r.exactly.as_ref().is_some_and(|e| e.admin_access.is_some()) {
        return off(&r.name, "adminAccess (DRAAdminAccess)");
    }
    None
}

fn compile_alt(a: &Allocator, s: AltSpec<'_>) -> Result<Alt, AllocError> {
    let capacity = match s.capacity {
        Some(c) => {
            let mut requests = Requests::new();
            for (name, q) in c.requests.iter().flatten() {
                let amount = Amount::parse(&q.0).map_err(|e| {
                    AllocError::InvalidClaim(format!("request {}: capacity {name}: {e}", s.label))
                })?;
                requests.insert(name.clone(), amount);
            }
            Some(requests)
        }
        None => None,
    };
    let mode = match s.mode.unwrap_or("ExactCount") {
        "ExactCount" => {
            let n = s.count.unwrap_or(1);
            if n < 1 {
                return Err(AllocError::InvalidClaim(format!(
                    "request {}: count {n} must be at least 1",
                    s.label
                )));
            }
            Mode::Exact(usize::try_from(n).unwrap_or(usize::MAX))
        }
        "All" => {
            if s.count.is_some() {
                return Err(AllocError::InvalidClaim(format!(
                    "request {}: count must not be set with allocationMode All",
                    s.label
                )));
            }
            Mode::All
        }
        other => {
            return Err(AllocError::InvalidClaim(format!(
                "request {}: allocationMode {other:?} is neither ExactCount nor All",
                s.label
            )));
        }
    };
    if s.class.is_empty() {
        return Err(AllocError::InvalidClaim(format!(
            "request {}: deviceClassName is required",
            s.label
        )));
    }
    let Some(class) = a.class_index(s.class) else {
        return Err(AllocError::ClassNotFound {
            request: s.label.to_string(),
            class: s.class.to_string(),
        });
    };
    if let Err((expression, error)) = a.classes[class].programs(a.programs.as_deref(), a.version) {
        return Err(AllocError::Cel {
            request: s.label.to_string(),
            class: Some(s.class.to_string()),
            expression: expression.clone(),
            error: error.clone(),
        });
    }
    let selectors = s.selectors.as_deref().unwrap_or_default();
    let programs = selector_programs(selectors, a.programs.as_deref(), a.version).map_err(
        |(expression, error)| AllocError::Cel {
            request: s.label.to_string(),
            class: None,
            expression,
            error,
        },
    )?;
    Ok(Alt {
        label: s.label,
        class,
        class_hash: a.classes[class].hash,
        programs,
        mode,
        admin: s.admin == Some(true),
        tolerations: s.tolerations.clone().unwrap_or_default(),
        capacity,
    })
}

impl Allocator<'_> {
    /// Validates a claim and compiles its selectors (and its classes') once.
    pub fn compile(&self, claim: &ResourceClaimSpec) -> Result<CompiledClaim, AllocError> {
        CompiledClaim::new(self, claim)
    }
}
