//! ResourceSlice watches: history from a resourceVersion, then live events.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use futures::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::{Bytes, Frame};
use k8s_openapi::api::resource::v1::ResourceSlice;
use serde_json::json;

use super::http::{Body, full, selected, status};
use super::{Event, Shared};

pub(super) fn watch(
    shared: &Shared,
    q: &HashMap<String, String>,
    sel: Vec<(String, String)>,
) -> Response<Body> {
    let since: u64 = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => 0,
        Some(v) => match v.parse() {
            Ok(n) => n,
            Err(_) => return status(400, "BadRequest", format!("invalid resourceVersion {v:?}")),
        },
    };
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(Duration::from_secs(1800), Duration::from_secs);
    // Subscribe and read history under one lock: no event can fall between them.
    let (backlog, rx) = {
        let st = shared.lock();
        let rx = shared.events.subscribe();
        let oldest = st.history.front().map_or(st.rv, |e| e.rv.saturating_sub(1));
        if since != 0 && since < oldest {
            let line = json!({"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("too old resource version: {since} ({oldest})"), "reason": "Expired", "code": 410,
            }});
            let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
            bytes.push(b'\n');
            return Response::new(full(bytes));
        }
        let backlog: Vec<Event> = st
            .history
            .iter()
            .filter(|e| e.rv > since)
            .cloned()
            .collect();
        (backlog, rx)
    };
    let matches = move |e: &Event| {
        serde_json::from_value::<ResourceSlice>(e.object.clone()).is_ok_and(|s| selected(&s, &sel))
    };
    let matches2 = matches.clone();
    let line = |e: Event| {
        let mut bytes =
            serde_json::to_vec(&json!({"type": e.kind, "object": e.object})).unwrap_or_default();
        bytes.push(b'\n');
        Ok::<_, Infallible>(Frame::data(Bytes::from(bytes)))
    };
    let live = tokio_stream::wrappers::BroadcastStream::new(rx)
        .filter_map(move |r| {
            let keep = r.ok().filter(|e| e.rv > since && matches2(e));
            async move { keep }
        })
        .map(line);
    let backlog = futures::stream::iter(backlog.into_iter().filter(matches)).map(line);
    let stream = backlog.chain(live).take_until(tokio::time::sleep(timeout));
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}
