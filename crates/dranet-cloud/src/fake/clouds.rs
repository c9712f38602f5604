//! Scripts that answer as each cloud's metadata service does: its paths, the headers it
//! requires (refusing requests without them as the real one does), the headers it sends, and
//! session tokens for AWS and Alibaba. Each serves the same document an operator would save for
//! `dranet inventory --<cloud>-metadata-file`.

use std::sync::{Arc, Mutex};

use super::{FakeServer, Reply, Request};
use crate::paths::PathMap;

/// The session token the fake token services hand out.
pub const FAKE_TOKEN: &str = "AQAEAFakeSessionTokenForTests==";

fn text(status: u16, body: impl Into<String>, headers: &[(&str, &str)]) -> Reply {
    Reply::With(
        status,
        headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body.into(),
    )
}

/// GCE's metadata server, serving the recursive instance document
/// (`instance/?recursive=true&alt=json`) by its parts.
pub fn gce(instance_document: &str) -> impl Fn(&Request, usize) -> Reply + Send + Sync + 'static {
    let doc: serde_json::Value = serde_json::from_str(instance_document).unwrap_or_default();
    let flavor = [("Metadata-Flavor", "Google")];
    move |r, _| {
        if r.header("metadata-flavor") != Some("Google") {
            return text(403, "Missing required header: \"Metadata-Flavor\"", &flavor);
        }
        let plain = |v: &serde_json::Value| text(200, v.as_str().unwrap_or_default(), &flavor);
        match (r.method.as_str(), r.path()) {
            ("GET", "/computeMetadata/v1/instance/machine-type") => plain(&doc["machineType"]),
            ("GET", "/computeMetadata/v1/instance/network-interfaces/")
                if r.target.contains("recursive=true") =>
            {
                text(200, doc["networkInterfaces"].to_string(), &flavor)
            }
            ("GET", "/computeMetadata/v1/instance/attributes/physical_host")
                if doc["attributes"]["physical_host"].is_string() =>
            {
                plain(&doc["attributes"]["physical_host"])
            }
            _ => text(404, "Not Found", &flavor),
        }
    }
}

/// An IMDSv2-style service (AWS, Alibaba): `PUT <token path>` with a TTL header gives
/// [`FAKE_TOKEN`]; every GET must carry it; `GET /latest/<path>` answers from the saved map.
fn token_service(
    paths: &str,
    ttl_header: &'static str,
    token_header: &'static str,
) -> impl Fn(&Request, usize) -> Reply + Send + Sync + 'static {
    let m = PathMap::parse("fake metadata", paths.as_bytes()).unwrap_or_default();
    move |r, _| match r.method.as_str() {
        "PUT" if r.path() == "/latest/api/token" => match r.header(ttl_header) {
            Some(t) if t.parse::<u32>().is_ok_and(|t| (1..=21600).contains(&t)) => {
                text(200, FAKE_TOKEN, &[])
            }
            _ => text(400, "Bad Request", &[]),
        },
        "GET" if r.header(token_header) != Some(FAKE_TOKEN) => text(401, "Unauthorized", &[]),
        "GET" => match r.path().strip_prefix("/latest/").and_then(|p| m.get(p)) {
            Some(answer) => text(200, answer, &[]),
            None => text(404, "Not Found", &[]),
        },
        _ => text(405, "Method Not Allowed", &[]),
    }
}

/// EC2's IMDSv2, serving a saved path map (`--aws-metadata-file`'s format).
pub fn aws(paths: &str) -> impl Fn(&Request, usize) -> Reply + Send + Sync + 'static {
    token_service(
        paths,
        crate::aws::TOKEN_TTL_HEADER,
        crate::aws::TOKEN_HEADER,
    )
}

/// Alibaba's metadata service, serving a saved path map (`--alibaba-metadata-file`'s format).
pub fn alibaba(paths: &str) -> impl Fn(&Request, usize) -> Reply + Send + Sync + 'static {
    token_service(
        paths,
        crate::alibaba::TOKEN_TTL_HEADER,
        crate::alibaba::TOKEN_HEADER,
    )
}

/// OCI's metadata service v2, serving a saved host document.
pub fn oke(host_document: &str) -> impl Fn(&Request, usize) -> Reply + Send + Sync + 'static {
    let host = host_document.to_string();
    move |r, _| {
        if r.header("authorization") != Some("Bearer Oracle") {
            return Reply::Json(
                401,
                r#"{"code": "NotAuthenticated", "message": "Authorization header is missing"}"#
                    .into(),
            );
        }
        match (r.method.as_str(), r.path()) {
            ("GET", "/opc/v2/host/") => Reply::Json(200, host.clone()),
            ("GET", "/opc/v2/instance/") => Reply::Json(
                200,
                r#"{"id": "ocid1.instance.oc1.iad.fake", "shape": "BM.GPU.GB200.4"}"#.into(),
            ),
            _ => Reply::Json(404, r#"{"code": "NotFound"}"#.into()),
        }
    }
}

/// A request the fake IMDS saw (Azure's view of [`Request`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Path and query.
    pub target: String,
    /// Whether `Metadata: true` was sent.
    pub metadata_header: bool,
}

/// A fake Azure IMDS: a [`FakeServer`] whose script sees the request target only.
pub struct FakeImds {
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    server: FakeServer,
}

impl FakeImds {
    fn wrap(server: FakeServer) -> Self {
        Self {
            endpoint: server.endpoint.clone(),
            server,
        }
    }

    /// Starts on the current tokio runtime; `script(target, n)` answers the n-th request (from 0).
    pub async fn start(
        script: impl Fn(&str, usize) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        Ok(Self::wrap(
            FakeServer::start(move |r, n| script(&r.target, n)).await?,
        ))
    }

    /// Starts on a runtime of its own, for synchronous tests.
    pub fn start_blocking(
        script: impl Fn(&str, usize) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        Ok(Self::wrap(FakeServer::start_blocking(move |r, n| {
            script(&r.target, n)
        })?))
    }

    /// The requests seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.server
            .seen()
            .into_iter()
            .map(|r| Seen {
                metadata_header: r.header("metadata") == Some("true"),
                target: r.target,
            })
            .collect()
    }

    /// Serves recorded compute and network documents.
    pub fn documents(
        compute: String,
        network: String,
    ) -> impl Fn(&str, usize) -> Reply + Send + Sync + 'static {
        move |target, _| {
            if target.starts_with("/metadata/instance/compute") {
                Reply::Json(200, compute.clone())
            } else if target.starts_with("/metadata/instance/network") {
                Reply::Json(200, network.clone())
            } else {
                Reply::Json(404, "{\"error\": \"Not found\"}".into())
            }
        }
    }
}

/// What a fake webhook was asked to release (claim UID, device name), in order.
pub type Released = Arc<Mutex<Vec<(String, String)>>>;

/// A webhook like upstream's `tests/webhook.py`: both capabilities; for the device named
/// `device`, the attribute `dra.net/webhook_attr: "python"` and MTU `mtu`; the profile
/// `profile` resolves to `address`; releases are recorded in the returned list.
pub fn webhook(
    device: &str,
    mtu: i32,
    profile: &str,
    address: &str,
) -> (
    impl Fn(&Request, usize) -> Reply + Send + Sync + 'static,
    Released,
) {
    let released: Released = Arc::default();
    let rec = released.clone();
    let (device, profile, address) = (device.to_string(), profile.to_string(), address.to_string());
    let script = move |r: &Request, _: usize| {
        let body = r.json();
        let ours = body["name"] == device.as_str();
        match (r.method.as_str(), r.path()) {
            ("GET", "/health") => Reply::Json(
                200,
                r#"{"cloudProvider": true, "profileProvider": true}"#.into(),
            ),
            ("POST", "/GetDeviceAttributes") if ours => Reply::Json(
                200,
                r#"{"dra.net/webhook_attr": {"string": "python"}}"#.into(),
            ),
            ("POST", "/GetDeviceConfig") if ours => {
                Reply::Json(200, format!(r#"{{"interface": {{"mtu": {mtu}}}}}"#))
            }
            ("POST", "/GetDeviceAttributes" | "/GetDeviceConfig") => Reply::Json(200, "{}".into()),
            ("POST", "/GetProfileConfig") if body["config"]["profile"] == profile.as_str() => {
                Reply::Json(
                    200,
                    format!(r#"{{"interface": {{"addresses": ["{address}"]}}}}"#),
                )
            }
            ("POST", "/GetProfileConfig") => Reply::Json(200, "{}".into()),
            ("POST", "/ReleaseProfileConfig") => {
                if let Ok(mut v) = rec.lock() {
                    v.push((
                        body["claim_uid"].as_str().unwrap_or_default().to_string(),
                        body["device"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    ));
                }
                Reply::Json(200, "{}".into())
            }
            _ => Reply::Json(404, "{}".into()),
        }
    };
    (script, released)
}
