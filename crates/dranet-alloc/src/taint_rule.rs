//! DeviceTaintRules (`DRADeviceTaintRules`: beta and off in 1.36, GA and on in 1.37): an
//! administrator's taint on the devices a selector picks, which the scheduler adds to those
//! devices' own taints before it allocates (its ResourceSlice tracker), so a claim must tolerate
//! it as it tolerates a taint the driver published.

use k8s_openapi::api::resource::v1::DeviceTaint;
use serde::Deserialize;

use crate::AllocError;

/// One DeviceTaintRule: which devices, and the taint they get.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceTaintRule {
    /// The rule's name, for messages.
    pub name: String,
    /// Which devices; `None` (no `deviceSelector`) matches none, as the API defines it.
    pub selector: Option<DeviceTaintSelector>,
    /// The taint the matched devices get.
    pub taint: DeviceTaint,
}

/// `spec.deviceSelector`: every field set must match; an empty selector matches every device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceTaintSelector {
    /// The device's driver (`spec.driver` of its slice).
    pub driver: Option<String>,
    /// The device's pool (`spec.pool.name` of its slice).
    pub pool: Option<String>,
    /// The device's name.
    pub device: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    device_selector: Option<DeviceTaintSelector>,
    taint: DeviceTaint,
}

impl DeviceTaintRule {
    /// Reads a DeviceTaintRule's JSON of any version that serves it (`resource.k8s.io/v1`,
    /// `v1beta2`, `v1alpha3`: the fields the scheduler reads are the same). `position` names
    /// the rule in errors when it has no name. A selector field this build does not know is an
    /// error: it would select differently from what was written.
    pub fn from_json(position: usize, json: &serde_json::Value) -> Result<Self, AllocError> {
        let name = json["metadata"]["name"]
            .as_str()
            .map_or_else(|| format!("#{position}"), str::to_string);
        let bad = |reason: String| AllocError::InvalidTaintRule {
            rule: name.clone(),
            reason,
        };
        match json["kind"].as_str() {
            Some("DeviceTaintRule") | None => {}
            Some(k) => return Err(bad(format!("a {k}, not a DeviceTaintRule"))),
        }
        let spec = Spec::deserialize(&json["spec"]).map_err(|e| bad(format!("spec: {e}")))?;
        if spec.taint.key.is_empty() {
            return Err(bad("spec.taint.key is empty".into()));
        }
        Ok(DeviceTaintRule {
            name,
            selector: spec.device_selector,
            taint: spec.taint,
        })
    }

    /// Whether the rule taints the device `device` of `driver`'s pool `pool`.
    pub fn matches(&self, driver: &str, pool: &str, device: &str) -> bool {
        let Some(s) = &self.selector else {
            return false;
        };
        let is = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        is(&s.driver, driver) && is(&s.pool, pool) && is(&s.device, device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(spec: serde_json::Value) -> Result<DeviceTaintRule, AllocError> {
        DeviceTaintRule::from_json(
            0,
            &serde_json::json!({
                "apiVersion": "resource.k8s.io/v1beta2",
                "kind": "DeviceTaintRule",
                "metadata": {"name": "maint"},
                "spec": spec,
            }),
        )
    }

    #[test]
    fn a_rule_matches_what_every_field_it_sets_names() {
        let taint = serde_json::json!({"key": "example.com/maint", "effect": "NoSchedule"});
        let r = rule(serde_json::json!({
            "deviceSelector": {"driver": "dra.net", "pool": "node-1"},
            "taint": taint,
        }))
        .unwrap();
        assert!(r.matches("dra.net", "node-1", "eth1"));
        assert!(!r.matches("dra.net", "node-2", "eth1"));
        assert!(!r.matches("gpu.example.com", "node-1", "eth1"));
        assert_eq!(r.taint.effect, "NoSchedule");

        let all = rule(serde_json::json!({"deviceSelector": {}, "taint": taint})).unwrap();
        assert!(all.matches("any", "pool", "dev"));
        let none = rule(serde_json::json!({"taint": taint})).unwrap();
        assert!(!none.matches("any", "pool", "dev"));
    }

    #[test]
    fn a_rule_the_scheduler_would_read_otherwise_is_an_error_naming_it() {
        let e = rule(serde_json::json!({
            "deviceSelector": {"driver": "dra.net", "selectors": []},
            "taint": {"key": "k", "effect": "NoSchedule"},
        }))
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("DeviceTaintRule maint: spec: unknown field `selectors`"),
            "{e}"
        );
        let e = rule(serde_json::json!({"deviceSelector": {}}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `taint`"), "{e}");
        let e = rule(
            serde_json::json!({"deviceSelector": {}, "taint": {"key": "", "effect": "NoSchedule"}}),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(e, "DeviceTaintRule maint: spec.taint.key is empty");
    }
}
