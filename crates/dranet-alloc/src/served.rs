//! `resource.k8s.io` objects of every version a 1.34 API server serves, read in the v1 shape the
//! allocator takes: v1beta1 claims hold a request's class, selectors and count directly (v1 and
//! v1beta2 put them under `exactly`), and v1beta1 devices hold their attributes and capacity
//! under `basic`. The JSON goes on to [`crate::Allocator::from_json`] or [`crate::report`].

/// The API versions of `resource.k8s.io` a 1.34 API server serves.
pub const SERVED: &str = "resource.k8s.io/v1, v1beta2 or v1beta1";

/// A document of an API version this crate does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("apiVersion {version:?} is not served by Kubernetes 1.34 for {kind} (use {SERVED})")]
pub struct UnservedVersion {
    /// The document's `apiVersion`.
    pub version: String,
    /// The document's `kind`.
    pub kind: String,
}

/// The document's `resource.k8s.io` version (v1 when it names none).
pub fn api_version(doc: &serde_json::Value) -> Result<&str, UnservedVersion> {
    match doc["apiVersion"].as_str().unwrap_or("resource.k8s.io/v1") {
        v @ ("resource.k8s.io/v1" | "resource.k8s.io/v1beta2" | "resource.k8s.io/v1beta1") => Ok(v),
        other => Err(UnservedVersion {
            version: other.to_string(),
            kind: doc["kind"].as_str().unwrap_or("").to_string(),
        }),
    }
}

/// The claim spec `spec` of the document `doc` (a claim or a template, of any served version)
/// in the v1 shape.
pub fn claim_spec_to_v1(
    doc: &serde_json::Value,
    mut spec: serde_json::Value,
) -> Result<serde_json::Value, UnservedVersion> {
    if api_version(doc)? != "resource.k8s.io/v1beta1" {
        return Ok(spec);
    }
    if let Some(requests) = spec["devices"]["requests"].as_array_mut() {
        for r in requests.iter_mut().filter_map(|r| r.as_object_mut()) {
            if r.contains_key("firstAvailable") || r.contains_key("exactly") {
                continue;
            }
            let mut exactly = serde_json::Map::new();
            for k in [
                "deviceClassName",
                "selectors",
                "allocationMode",
                "count",
                "adminAccess",
                "tolerations",
            ] {
                if let Some(v) = r.remove(k) {
                    exactly.insert(k.to_string(), v);
                }
            }
            r.insert("exactly".into(), serde_json::Value::Object(exactly));
        }
    }
    Ok(spec)
}

/// A ResourceSlice of any served version turned, in place, into the v1 shape.
pub fn slice_to_v1(slice: &mut serde_json::Value) -> Result<(), UnservedVersion> {
    if api_version(slice)? == "resource.k8s.io/v1beta1"
        && let Some(devices) = slice["spec"]["devices"].as_array_mut()
    {
        for d in devices.iter_mut().filter_map(|d| d.as_object_mut()) {
            if let Some(serde_json::Value::Object(basic)) = d.remove("basic") {
                d.extend(basic);
            }
        }
    }
    slice["apiVersion"] = "resource.k8s.io/v1".into();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn v1beta1_slices_and_claims_read_as_v1() {
        let mut s = json!({
            "apiVersion": "resource.k8s.io/v1beta1",
            "kind": "ResourceSlice",
            "spec": {"devices": [{"name": "a", "basic": {"attributes": {"x": {"int": 1}}}}]}
        });
        slice_to_v1(&mut s).unwrap();
        assert_eq!(s["apiVersion"], "resource.k8s.io/v1");
        assert_eq!(
            s["spec"]["devices"][0],
            json!({"name": "a", "attributes": {"x": {"int": 1}}})
        );
        let doc = json!({"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim"});
        let spec = json!({"devices": {"requests": [
            {"name": "r", "deviceClassName": "c", "count": 2},
            {"name": "f", "firstAvailable": []}
        ]}});
        let v1 = claim_spec_to_v1(&doc, spec).unwrap();
        assert_eq!(
            v1["devices"]["requests"][0],
            json!({"name": "r", "exactly": {"deviceClassName": "c", "count": 2}})
        );
        assert_eq!(
            v1["devices"]["requests"][1],
            json!({"name": "f", "firstAvailable": []})
        );
        // v1 is left as it is.
        let doc = json!({"kind": "ResourceClaim"});
        let spec = json!({"devices": {"requests": [{"name": "r", "deviceClassName": "c"}]}});
        assert_eq!(claim_spec_to_v1(&doc, spec.clone()).unwrap(), spec);
    }

    #[test]
    fn an_unserved_version_is_named() {
        let mut s = json!({"apiVersion": "resource.k8s.io/v1alpha3", "kind": "ResourceSlice"});
        let e = slice_to_v1(&mut s).unwrap_err().to_string();
        assert_eq!(
            e,
            "apiVersion \"resource.k8s.io/v1alpha3\" is not served by Kubernetes 1.34 for \
             ResourceSlice (use resource.k8s.io/v1, v1beta2 or v1beta1)"
        );
    }
}
