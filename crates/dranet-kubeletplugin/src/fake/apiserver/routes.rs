//! The requests the fake answers: the paths, verbs and checks of the real API server for what the
//! plugin uses.

use std::convert::Infallible;

use futures::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use serde_json::{Value, json};

use super::claim_status::apply_claim_status;
use super::http::{
    Body, found_or_404, json_response, list_item, not_found, object_response, parse_selector,
    query, reason_for, selected, status,
};
use super::stored::{as_stored, validate};
use super::watch::watch;
use super::{Shared, bump, emit, next_uid};

/// The ResourceSlice of a create's or an update's body, or the API server's refusal (boxed: a
/// response is large beside a slice).
fn decode_slice(body: &[u8]) -> Result<ResourceSlice, Box<Response<Body>>> {
    serde_json::from_slice(body).map_err(|e| {
        Box::new(status(
            400,
            "BadRequest",
            format!("decoding ResourceSlice: {e}"),
        ))
    })
}

/// Makes `slice` what the API server stores with its feature gates, and validates it; the
/// refusal otherwise, naming the slice as `what`.
fn admit(shared: &Shared, slice: &mut ResourceSlice, what: &str) -> Option<Response<Body>> {
    let gates = shared.lock().feature_gates.clone();
    if let Err(e) = as_stored(slice, &gates) {
        return Some(status(400, "BadRequest", e));
    }
    let invalid = validate(slice).err()?;
    Some(status(
        422,
        "Invalid",
        format!("{what} is invalid: {invalid}"),
    ))
}

pub(super) async fn handle(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    {
        let mut st = shared.lock();
        if st.down {
            return status(503, "ServiceUnavailable", "the fake API server is down");
        }
        if let Some(f) = st
            .faults
            .iter_mut()
            .find(|f| f.method == method && f.remaining > 0)
        {
            f.remaining -= 1;
            let code = f.code;
            st.faults.retain(|f| f.remaining > 0);
            return status(code, reason_for(code), format!("injected failure {code}"));
        }
    }
    let path = req.uri().path().to_string();
    let q = query(&req);
    let content_type = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return status(400, "BadRequest", format!("reading body: {e}")),
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (&method, parts.as_slice()) {
        (&Method::GET, ["api", "v1", "nodes"])
            if q.get("watch").is_some_and(|w| w == "true" || w == "1") =>
        {
            let Some(name) = q
                .get("fieldSelector")
                .and_then(|f| f.strip_prefix("metadata.name="))
                .map(str::to_string)
            else {
                return status(
                    400,
                    "BadRequest",
                    "the fake serves Node watches by metadata.name only",
                );
            };
            // Subscribe before reading the current state: nothing can fall between them.
            let rx = shared.node_events.subscribe();
            let current = shared.lock().nodes.get(&name).cloned();
            let line = |kind: &str, n: &Node| {
                let mut bytes =
                    serde_json::to_vec(&json!({"type": kind, "object": n})).unwrap_or_default();
                bytes.push(b'\n');
                Ok::<_, Infallible>(Frame::data(Bytes::from(bytes)))
            };
            let first: Vec<_> = current.iter().map(|n| line("ADDED", n)).collect();
            let live = tokio_stream::wrappers::BroadcastStream::new(rx).filter_map(move |r| {
                let out = r
                    .ok()
                    .filter(|(_, n)| n.metadata.name.as_deref() == Some(name.as_str()))
                    .map(|(kind, n)| line(kind, &n));
                async move { out }
            });
            let stream = futures::stream::iter(first).chain(live);
            let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            r
        }
        (&Method::GET, ["api", "v1", "nodes", name]) => {
            let st = shared.lock();
            found_or_404(st.nodes.get(*name), "nodes", name)
        }
        (
            &Method::GET,
            [
                "apis",
                "resource.k8s.io",
                "v1",
                "namespaces",
                ns,
                "resourceclaims",
                name,
            ],
        ) => {
            let delay = shared.lock().claim_delay;
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let st = shared.lock();
            found_or_404(
                st.claims.get(&(ns.to_string(), name.to_string())),
                "resourceclaims.resource.k8s.io",
                name,
            )
        }
        (
            &Method::PATCH,
            [
                "apis",
                "resource.k8s.io",
                "v1",
                "namespaces",
                ns,
                "resourceclaims",
                name,
                "status",
            ],
        ) => apply_claim_status(shared, ns, name, &q, &content_type, &body),
        (&Method::GET, ["apis", "resource.k8s.io", "v1", "resourceslices"]) => {
            let sel = match parse_selector(q.get("fieldSelector")) {
                Ok(s) => s,
                Err(e) => return status(400, "BadRequest", e),
            };
            if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
                return watch(shared, &q, sel);
            }
            // Pages as the real server cuts them: `limit` objects, and a `continue` token (here
            // the last name given) while more are left.
            let limit = q
                .get("limit")
                .and_then(|l| l.parse::<usize>().ok())
                .filter(|&l| l > 0)
                .unwrap_or(usize::MAX);
            let after = q.get("continue").cloned().unwrap_or_default();
            let mut st = shared.lock();
            st.slice_lists += 1;
            let mut rest = st
                .slices
                .iter()
                .filter(|(name, _)| after.is_empty() || name.as_str() > after.as_str())
                .filter(|(_, s)| selected(s, &sel));
            let page: Vec<(&String, &ResourceSlice)> = rest.by_ref().take(limit).collect();
            let more = rest.next().is_some();
            let mut metadata = json!({"resourceVersion": st.rv.to_string()});
            if more && let Some((last, _)) = page.last() {
                metadata["continue"] = json!(last);
            }
            let items: Vec<Value> = page.into_iter().map(|(_, s)| list_item(s)).collect();
            json_response(
                StatusCode::OK,
                &json!({
                    "kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1",
                    "metadata": metadata, "items": items,
                }),
            )
        }
        (&Method::GET, ["apis", "resource.k8s.io", "v1", "deviceclasses"]) => {
            // The fake stores no DeviceClass: an empty list.
            json_response(
                StatusCode::OK,
                &json!({
                    "kind": "DeviceClassList", "apiVersion": "resource.k8s.io/v1",
                    "metadata": {"resourceVersion": shared.lock().rv.to_string()}, "items": [],
                }),
            )
        }
        (&Method::GET, ["apis", "resource.k8s.io", "v1", "resourceslices", name]) => {
            let st = shared.lock();
            found_or_404(st.slices.get(*name), "resourceslices.resource.k8s.io", name)
        }
        (&Method::POST, ["apis", "resource.k8s.io", "v1", "resourceslices"]) => {
            let mut slice = match decode_slice(&body) {
                Ok(s) => s,
                Err(refused) => return *refused,
            };
            if slice
                .metadata
                .resource_version
                .as_deref()
                .is_some_and(|v| !v.is_empty())
            {
                return status(
                    400,
                    "BadRequest",
                    "resourceVersion should not be set on objects to be created",
                );
            }
            if let Some(refused) = admit(shared, &mut slice, "ResourceSlice") {
                return refused;
            }
            let mut st = shared.lock();
            let name = match (
                slice.metadata.name.clone(),
                slice.metadata.generate_name.clone(),
            ) {
                (Some(n), _) if !n.is_empty() => n,
                (_, Some(prefix)) => format!("{prefix}{:05}", st.uid_seq + 1),
                _ => return status(422, "Invalid", "metadata.name: Required value"),
            };
            if st.slices.contains_key(&name) {
                return status(
                    409,
                    "AlreadyExists",
                    format!("resourceslices.resource.k8s.io \"{name}\" already exists"),
                );
            }
            let rv = bump(&mut st);
            slice.metadata.name = Some(name.clone());
            slice.metadata.uid = Some(next_uid(&mut st, "slice"));
            slice.metadata.resource_version = Some(rv.to_string());
            slice.metadata.generation = Some(1);
            if let Some(m) = q.get("fieldManager") {
                st.field_managers.push(m.clone());
            }
            st.slices.insert(name, slice.clone());
            st.counts.creates += 1;
            emit(shared, &mut st, "ADDED", &slice);
            object_response(StatusCode::CREATED, &slice)
        }
        (&Method::PUT, ["apis", "resource.k8s.io", "v1", "resourceslices", name]) => {
            let mut slice = match decode_slice(&body) {
                Ok(s) => s,
                Err(refused) => return *refused,
            };
            if slice.metadata.name.as_deref() != Some(*name) {
                return status(
                    400,
                    "BadRequest",
                    "the name of the object does not match the name on the URL",
                );
            }
            if let Some(refused) = admit(shared, &mut slice, &format!("ResourceSlice {name}")) {
                return refused;
            }
            let mut st = shared.lock();
            let Some(current) = st.slices.get(*name).cloned() else {
                return not_found("resourceslices.resource.k8s.io", name);
            };
            let Some(rv) = slice
                .metadata
                .resource_version
                .clone()
                .filter(|v| !v.is_empty())
            else {
                return status(
                    422,
                    "Invalid",
                    "metadata.resourceVersion: Invalid value: 0: must be specified for an update",
                );
            };
            if Some(&rv) != current.metadata.resource_version.as_ref() {
                return status(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on resourceslices.resource.k8s.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                    ),
                );
            }
            let new_rv = bump(&mut st);
            slice.metadata.uid = current.metadata.uid.clone();
            slice.metadata.resource_version = Some(new_rv.to_string());
            slice.metadata.generation = Some(current.metadata.generation.unwrap_or(1) + 1);
            if let Some(m) = q.get("fieldManager") {
                st.field_managers.push(m.clone());
            }
            st.slices.insert(name.to_string(), slice.clone());
            st.counts.updates += 1;
            emit(shared, &mut st, "MODIFIED", &slice);
            object_response(StatusCode::OK, &slice)
        }
        (&Method::DELETE, ["apis", "resource.k8s.io", "v1", "resourceslices", name]) => {
            let opts: Value = if body.is_empty() {
                Value::Null
            } else {
                match serde_json::from_slice(&body) {
                    Ok(v) => v,
                    Err(e) => {
                        return status(400, "BadRequest", format!("decoding DeleteOptions: {e}"));
                    }
                }
            };
            let mut st = shared.lock();
            let Some(current) = st.slices.get(*name).cloned() else {
                return not_found("resourceslices.resource.k8s.io", name);
            };
            let pre = &opts["preconditions"];
            let meta = &current.metadata;
            for (what, field, held) in [
                ("UID", "uid", &meta.uid),
                ("ResourceVersion", "resourceVersion", &meta.resource_version),
            ] {
                if let Some(want) = pre[field].as_str()
                    && Some(want) != held.as_deref()
                {
                    let held = held.as_deref().unwrap_or_default();
                    return status(
                        409,
                        "Conflict",
                        format!(
                            "Precondition failed: {what} in precondition: {want}, {what} in object meta: {held}"
                        ),
                    );
                }
            }
            st.slices.remove(*name);
            let rv = bump(&mut st);
            let mut gone = current;
            gone.metadata.resource_version = Some(rv.to_string());
            st.counts.deletes += 1;
            emit(shared, &mut st, "DELETED", &gone);
            object_response(StatusCode::OK, &gone)
        }
        _ => status(
            404,
            "NotFound",
            format!("the fake API server does not serve {method} {path}"),
        ),
    }
}
