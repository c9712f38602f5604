//! Responses, Status objects and query strings as the real API server writes and reads them.

use std::collections::HashMap;
use std::convert::Infallible;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use k8s_openapi::api::resource::v1::ResourceSlice;
use serde_json::{Value, json};

pub(super) type Body = BoxBody<Bytes, Infallible>;

pub(super) fn full(bytes: Vec<u8>) -> Body {
    Full::new(Bytes::from(bytes)).boxed()
}

pub(super) fn json_response(code: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(full(serde_json::to_vec(v).unwrap_or_default()));
    *r.status_mut() = code;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

pub(super) fn status(code: u16, reason: &str, message: impl Into<String>) -> Response<Body> {
    let v = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message.into(), "reason": reason, "code": code,
    });
    json_response(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &v,
    )
}

/// An object as the API server answers with it, with `code`.
pub(super) fn object_response<T: serde::Serialize>(code: StatusCode, obj: &T) -> Response<Body> {
    json_response(code, &serde_json::to_value(obj).unwrap_or(Value::Null))
}

/// The object as JSON, or the API server's 404 Status naming it.
pub(super) fn found_or_404<T: serde::Serialize>(
    obj: Option<&T>,
    resource: &str,
    name: &str,
) -> Response<Body> {
    match obj {
        Some(o) => object_response(StatusCode::OK, o),
        None => not_found(resource, name),
    }
}

pub(super) fn not_found(resource: &str, name: &str) -> Response<Body> {
    status(404, "NotFound", format!("{resource} \"{name}\" not found"))
}

pub(super) fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    }
}

pub(super) fn query(req: &Request<Incoming>) -> HashMap<String, String> {
    req.uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), percent_decode(v)))
        .collect()
}

pub(super) fn percent_decode(s: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let decoded = match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => Some(hi * 16 + lo),
            _ => None,
        };
        match decoded {
            Some(v) => {
                out.push(v);
                i += 3;
            }
            None => {
                out.push(if b[i] == b'+' { b' ' } else { b[i] });
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `spec.nodeName=a,spec.driver=b` as (field, value) pairs; unsupported fields are an error, as on
/// the real server.
pub(super) fn parse_selector(
    sel: Option<&String>,
) -> std::result::Result<Vec<(String, String)>, String> {
    let Some(sel) = sel.filter(|s| !s.is_empty()) else {
        return Ok(Vec::new());
    };
    sel.split(',')
        .map(|term| {
            let (k, v) = term
                .split_once('=')
                .ok_or_else(|| format!("invalid field selector term {term:?}"))?;
            let k = k.trim_end_matches('=');
            match k {
                "spec.nodeName" | "spec.driver" | "spec.pool.name" | "metadata.name" => {
                    Ok((k.to_string(), v.to_string()))
                }
                _ => Err(format!("field label not supported: {k}")),
            }
        })
        .collect()
}

pub(super) fn selected(slice: &ResourceSlice, sel: &[(String, String)]) -> bool {
    sel.iter().all(|(k, v)| {
        let actual = match k.as_str() {
            "spec.nodeName" => slice.spec.node_name.clone().unwrap_or_default(),
            "spec.driver" => slice.spec.driver.clone(),
            "spec.pool.name" => slice.spec.pool.name.clone(),
            _ => slice.metadata.name.clone().unwrap_or_default(),
        };
        &actual == v
    })
}

/// Like the real server, list items carry no apiVersion/kind.
pub(super) fn list_item(slice: &ResourceSlice) -> Value {
    let mut v = serde_json::to_value(slice).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.remove("apiVersion");
        o.remove("kind");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_and_selectors() {
        assert_eq!(
            percent_decode("spec.nodeName%3Dn1%2Cspec.driver%3Dd"),
            "spec.nodeName=n1,spec.driver=d"
        );
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        let sel = parse_selector(Some(&"spec.nodeName=n1,spec.driver=d".to_string())).unwrap();
        assert_eq!(sel.len(), 2);
        assert!(
            parse_selector(Some(&"spec.foo=x".to_string()))
                .unwrap_err()
                .contains("not supported")
        );
    }
}
