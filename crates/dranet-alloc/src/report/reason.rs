//! Why a claim does not fit or fails on a node, in words that do not name the node, so that
//! the nodes ruled out for one reason are counted together: the request, and the DeviceClass,
//! selector or constraint that rules the node out.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::{
    DeviceClaim, DeviceRequest, DeviceToleration, ExactDeviceRequest, ResourceClaimSpec,
};

use crate::cel::{Program, split_qualified};
use crate::search::taints_prevent;
use crate::{AllocError, Allocator, DeviceId};

/// The reason of `error`, the outcome of `claim` on `alloc`'s node, without the node's name
/// or its pools'.
pub(crate) fn of_error(claim: &ResourceClaimSpec, alloc: &Allocator, error: &AllocError) -> String {
    match error {
        AllocError::Unsatisfiable { request, .. } => {
            blame(claim, alloc, request).unwrap_or_else(|| error.to_string())
        }
        AllocError::CelRuntime {
            request,
            class,
            selector,
            device,
            error,
        } => format!(
            "request {request}: {}selector #{selector}: CEL runtime error on a {} device: {error}",
            class
                .as_ref()
                .map(|c| format!("DeviceClass {c}: "))
                .unwrap_or_default(),
            device.driver
        ),
        AllocError::ConstraintViolated {
            request,
            device,
            constraint,
        } => format!(
            "request {request}: allocationMode All takes a {} device, which breaks {constraint}",
            device.driver
        ),
        AllocError::AllOverUnusablePool {
            request,
            pool,
            reason,
        } => format!(
            "request {request}: allocationMode All, but a {} pool {reason}",
            driver_of(pool)
        ),
        AllocError::InvalidPool { pool, reason } => {
            format!("a {} pool is invalid: {reason}", driver_of(pool))
        }
        other => other.to_string(),
    }
}

/// `dra.net` of a pool label `dra.net/node-1`.
fn driver_of(pool: &str) -> &str {
    pool.split_once('/').map_or(pool, |(driver, _)| driver)
}

/// The DeviceClass or selector of `request` that leaves it no device on the node: the class
/// alone, then each selector added in turn, each asked for every device it matches
/// (`allocationMode: All`). `None` when each of them leaves some device: then the count, a
/// constraint or the other requests rule the node out, as the allocator's reason says.
fn blame(claim: &ResourceClaimSpec, alloc: &Allocator, request: &str) -> Option<String> {
    let requests = claim.devices.as_ref()?.requests.as_deref()?;
    let req = requests.iter().find(|r| r.name == request)?;
    let exact = req.exactly.as_ref()?;
    let class = &exact.device_class_name;
    let selectors = exact.selectors.as_deref().unwrap_or_default();
    // Every device of the class that passes the first `n` selectors.
    let matching = |n: usize| -> Result<Vec<DeviceId>, AllocError> {
        let probe = ResourceClaimSpec {
            devices: Some(DeviceClaim {
                requests: Some(vec![DeviceRequest {
                    name: req.name.clone(),
                    exactly: Some(ExactDeviceRequest {
                        allocation_mode: Some("All".into()),
                        count: None,
                        selectors: Some(selectors[..n].to_vec()),
                        // The class and selectors alone; taints and capacity are judged
                        // after them.
                        capacity: None,
                        tolerations: Some(vec![DeviceToleration {
                            operator: Some("Exists".into()),
                            ..DeviceToleration::default()
                        }]),
                        ..exact.clone()
                    }),
                    first_available: None,
                }]),
                ..DeviceClaim::default()
            }),
        };
        let a = alloc.allocate_spec(&probe, &[])?;
        Ok(a.results
            .into_iter()
            .map(|r| DeviceId {
                driver: r.driver,
                pool: r.pool,
                device: r.device,
            })
            .collect())
    };
    let mut passed = match matching(0) {
        Ok(ids) => ids,
        Err(e) if e.is_unsatisfiable() => {
            return Some(format!(
                "request {request}: DeviceClass {class} selects none of the node's devices"
            ));
        }
        // An error the claim itself would meet (a runtime error, an incomplete pool): the
        // allocator's reason is the one to give.
        Err(_) => return None,
    };
    for (j, selector) in selectors.iter().enumerate() {
        match matching(j + 1) {
            Ok(ids) => passed = ids,
            Err(e) if e.is_unsatisfiable() => {
                let expression = selector.cel.as_ref().map_or("", |c| c.expression.as_str());
                let before = if j == 0 {
                    ""
                } else {
                    " that pass the selectors before it"
                };
                return Some(format!(
                    "request {request}: selector #{j} matches none of the node's devices of DeviceClass {class}{before}: {expression}{}",
                    hints(alloc, expression, &passed)
                ));
            }
            Err(_) => return None,
        }
    }
    if let Some(why) = untolerated(alloc, request, class, exact, &passed) {
        return Some(why);
    }
    let names = exact.capacity.as_ref().and_then(|c| c.requests.as_ref())?;
    names
        .keys()
        .find_map(|n| unknown_capacity(alloc, request, class, n, &passed))
}

/// Why the request gets none of `devices` (those that pass its class and selectors) when each
/// of them has a taint it does not tolerate (published by the driver or added by a
/// DeviceTaintRule): the taints, as `key=value:effect`.
fn untolerated(
    alloc: &Allocator,
    request: &str,
    class: &str,
    exact: &ExactDeviceRequest,
    devices: &[DeviceId],
) -> Option<String> {
    let tolerations = exact.tolerations.as_deref().unwrap_or_default();
    let mut taints = std::collections::BTreeSet::new();
    for id in devices {
        let d = alloc.device(id)?;
        if !taints_prevent(alloc, d, tolerations) {
            return None;
        }
        for t in d.taints() {
            let value = t
                .value
                .as_deref()
                .map(|v| format!("={v}"))
                .unwrap_or_default();
            taints.insert(format!("{}{value}:{}", t.key, t.effect));
        }
    }
    (!devices.is_empty()).then(|| {
        format!(
            "request {request}: each of the node's devices of DeviceClass {class} that pass the selectors has a taint the request does not tolerate ({})",
            taints.into_iter().collect::<Vec<_>>().join(", ")
        )
    })
}

/// Why a capacity `name` of the request fits none of `devices` (those that pass its class and
/// selectors) when none of them has a capacity of that name as written: the scheduler compares a
/// request's capacity names with the slice's as written (Kubernetes 1.34 to 1.37), so
/// `dra.net/children` does not find dra.net's `children`; the usual mistake is named.
fn unknown_capacity(
    alloc: &Allocator,
    request: &str,
    class: &str,
    name: &str,
    devices: &[DeviceId],
) -> Option<String> {
    let caps = |id: &DeviceId| {
        alloc
            .position(id)
            .and_then(|i| alloc.capacities.get(i))
            .map(Vec::as_slice)
            .unwrap_or_default()
    };
    if devices.is_empty()
        || devices
            .iter()
            .any(|id| caps(id).iter().any(|c| c.name == name))
    {
        return None;
    }
    let same = devices.iter().find_map(|id| {
        let want = split_qualified(name, &id.driver);
        caps(id)
            .iter()
            .find(|c| split_qualified(&c.name, &id.driver) == want)
            .map(|c| (id, &c.name))
    });
    Some(match same {
        Some((id, published)) => format!(
            "request {request}: capacity {name}: {} publishes it as {published:?}, and the scheduler matches capacity names as written: request {published:?}",
            id.driver
        ),
        None => format!(
            "request {request}: capacity {name}: none of the node's devices of DeviceClass {class} that pass the selectors has it"
        ),
    })
}

/// What the selector itself shows about why it matches none of `devices` (a literal of the
/// wrong type, a qualified name written as the domain), as a suffix: ` (…)`, or empty.
fn hints(alloc: &Allocator, expression: &str, devices: &[DeviceId]) -> String {
    let program = match alloc.programs.as_deref() {
        Some(cache) => cache.compile(expression),
        None => Program::compile(expression).map(Arc::new),
    };
    let Ok(program) = program else {
        return String::new();
    };
    let devices: Vec<_> = devices
        .iter()
        .filter_map(|id| Some(alloc.device(id)?.attributes()))
        .collect();
    let hints = program.explain_no_match(&devices);
    if hints.is_empty() {
        String::new()
    } else {
        format!(" ({})", hints.join("; "))
    }
}
