//! Server-side apply of a claim's `status.devices`.

use std::collections::HashMap;

use hyper::{Response, StatusCode};
use serde_json::Value;

use super::http::{Body, not_found, object_response, status};
use super::{DeviceKey, Shared, bump};

/// Server-side apply of a claim's `status.devices`, checked as the real API server checks it:
/// apply needs a field manager, each entry must name an allocated device, conditions need type,
/// status, a CamelCase reason and lastTransitionTime (at most 8), networkData limits its fields
/// and its IPs must be addresses in CIDR form.
pub(super) fn apply_claim_status(
    shared: &Shared,
    ns: &str,
    name: &str,
    q: &HashMap<String, String>,
    content_type: &str,
    body: &[u8],
) -> Response<Body> {
    if content_type != "application/apply-patch+yaml" {
        return status(
            415,
            "UnsupportedMediaType",
            format!("the fake serves only server-side apply on status, not {content_type:?}"),
        );
    }
    let Some(manager) = q.get("fieldManager").filter(|m| !m.is_empty()) else {
        return status(
            400,
            "BadRequest",
            "PATCH with apply requires fieldManager to be set",
        );
    };
    let force = q.get("force").is_some_and(|f| f == "true");
    let patch: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return status(400, "BadRequest", format!("decoding apply patch: {e}")),
    };
    if patch["apiVersion"] != "resource.k8s.io/v1" || patch["kind"] != "ResourceClaim" {
        return status(
            400,
            "BadRequest",
            "apply patch needs apiVersion resource.k8s.io/v1 and kind ResourceClaim",
        );
    }
    let entries: Vec<k8s_openapi::api::resource::v1::AllocatedDeviceStatus> =
        match serde_json::from_value(patch["status"]["devices"].clone()) {
            Ok(d) => d,
            Err(e) => return status(400, "BadRequest", format!("status.devices: {e}")),
        };
    let mut st = shared.lock();
    let key = (ns.to_string(), name.to_string());
    let Some(claim) = st.claims.get(&key).cloned() else {
        return not_found("resourceclaims.resource.k8s.io", name);
    };
    let allocated: Vec<DeviceKey> = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .map(|d| {
            d.results
                .iter()
                .flatten()
                .map(|r| {
                    (
                        r.driver.clone(),
                        r.pool.clone(),
                        r.device.clone(),
                        r.share_id.clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut keys = Vec::new();
    for (i, d) in entries.iter().enumerate() {
        let k: DeviceKey = (
            d.driver.clone(),
            d.pool.clone(),
            d.device.clone(),
            d.share_id.clone(),
        );
        if let Err(msg) = check_device_status(d, &allocated, &k) {
            return status(
                422,
                "Invalid",
                format!(
                    "ResourceClaim.resource.k8s.io \"{name}\" is invalid: status.devices[{i}]{msg}"
                ),
            );
        }
        keys.push(k);
    }
    let owners = st.status_owners.entry(key.clone()).or_default();
    if !force {
        for k in &keys {
            if owners.iter().any(|(m, ks)| m != manager && ks.contains(k)) {
                return status(
                    409,
                    "Conflict",
                    format!(
                        "Apply failed with 1 conflict: conflict with another manager over status.devices {k:?}"
                    ),
                );
            }
        }
    }
    let dropped: Vec<DeviceKey> = owners
        .get(manager)
        .map(|old| old.iter().filter(|k| !keys.contains(k)).cloned().collect())
        .unwrap_or_default();
    for (m, ks) in owners.iter_mut() {
        if m != manager {
            ks.retain(|k| !keys.contains(k));
        }
    }
    owners.insert(manager.clone(), keys.clone());
    let mut claim = claim;
    let status_obj = claim.status.get_or_insert_with(Default::default);
    let devices = status_obj.devices.get_or_insert_with(Vec::new);
    let key_of = |d: &k8s_openapi::api::resource::v1::AllocatedDeviceStatus| -> DeviceKey {
        (
            d.driver.clone(),
            d.pool.clone(),
            d.device.clone(),
            d.share_id.clone(),
        )
    };
    devices.retain(|d| !dropped.contains(&key_of(d)));
    for e in entries {
        match devices.iter_mut().find(|d| key_of(d) == key_of(&e)) {
            Some(d) => *d = e,
            None => devices.push(e),
        }
    }
    let rv = bump(&mut st);
    claim.metadata.resource_version = Some(rv.to_string());
    st.claims.insert(key, claim.clone());
    st.field_managers.push(manager.clone());
    object_response(StatusCode::OK, &claim)
}

fn check_device_status(
    d: &k8s_openapi::api::resource::v1::AllocatedDeviceStatus,
    allocated: &[DeviceKey],
    key: &DeviceKey,
) -> std::result::Result<(), String> {
    if !allocated.contains(key) {
        return Err(format!(
            ": Invalid value: {key:?}: must be an allocated device in the claim"
        ));
    }
    let conditions = d.conditions.as_deref().unwrap_or_default();
    if conditions.len() > 8 {
        return Err(".conditions: Too many: must have at most 8 items".into());
    }
    for (j, c) in conditions.iter().enumerate() {
        let reason_ok = {
            let b = c.reason.as_bytes();
            !b.is_empty()
                && b.len() <= 1024
                && b[0].is_ascii_alphabetic()
                && b.iter()
                    .all(|x| x.is_ascii_alphanumeric() || matches!(x, b'_' | b',' | b':'))
                && !matches!(b[b.len() - 1], b',' | b':')
        };
        if c.type_.is_empty() {
            return Err(format!(".conditions[{j}].type: Required value"));
        }
        if !matches!(c.status.as_str(), "True" | "False" | "Unknown") {
            return Err(format!(
                ".conditions[{j}].status: Unsupported value: {:?}",
                c.status
            ));
        }
        if !reason_ok {
            return Err(format!(
                ".conditions[{j}].reason: Invalid value: {:?}",
                c.reason
            ));
        }
        if c.last_transition_time.0 == Default::default() {
            return Err(format!(
                ".conditions[{j}].lastTransitionTime: Required value"
            ));
        }
    }
    if let Some(n) = &d.network_data {
        if n.interface_name.as_ref().is_some_and(|s| s.len() > 256) {
            return Err(
                ".networkData.interfaceName: Too long: may not be more than 256 bytes".into(),
            );
        }
        if n.hardware_address.as_ref().is_some_and(|s| s.len() > 128) {
            return Err(
                ".networkData.hardwareAddress: Too long: may not be more than 128 bytes".into(),
            );
        }
        for (j, ip) in n.ips.as_deref().unwrap_or_default().iter().enumerate() {
            let ok = ip.split_once('/').is_some_and(|(a, p)| {
                a.parse::<std::net::IpAddr>()
                    .ok()
                    .zip(p.parse::<u8>().ok())
                    .is_some_and(|(a, p)| p <= if a.is_ipv4() { 32 } else { 128 })
            });
            if !ok {
                return Err(format!(
                    ".networkData.ips[{j}]: Invalid value: {ip:?}: must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)"
                ));
            }
        }
    }
    Ok(())
}
