//! Azure's IMDS client: `Metadata: true`, an `api-version` with a fallback to the newest one IMDS
//! lists, on the crate's HTTP client.

use std::time::Duration;

use hyper::body::Bytes;

use super::imds::{AzureInstance, parse_compute, parse_network};
use crate::client::LINK_LOCAL_ENDPOINT;
use crate::http::{Endpoint, Error, Request, Result};
use crate::retry::RetryPolicy;

/// IMDS's link-local address.
pub const DEFAULT_ENDPOINT: &str = LINK_LOCAL_ENDPOINT;
/// The api-version asked for (upstream dranet's). When IMDS rejects it, the client retries once
/// with the newest version IMDS lists in its answer.
pub const DEFAULT_API_VERSION: &str = "2025-11-11";

/// An IMDS client.
#[derive(Debug, Clone)]
pub struct ImdsClient {
    /// Base URL (`http://169.254.169.254`); tests point it at a local server.
    pub endpoint: String,
    /// `api-version` query parameter.
    pub api_version: String,
    /// Timeout of one request, connect included.
    pub request_timeout: Duration,
}

impl Default for ImdsClient {
    fn default() -> Self {
        Self {
            endpoint: DEFAULT_ENDPOINT.into(),
            api_version: DEFAULT_API_VERSION.into(),
            request_timeout: Duration::from_secs(2),
        }
    }
}

impl ImdsClient {
    fn path(path: &str, version: &str) -> String {
        format!("/metadata/instance/{path}?api-version={version}&format=json")
    }

    async fn get_once(&self, endpoint: &Endpoint, path: &str, timeout: Duration) -> Result<Bytes> {
        let req = Request::get(path).header("Metadata", "true");
        Ok(endpoint.fetch(&req, timeout).await?.body)
    }

    /// GETs `/metadata/instance/<path>` once; on a 400 that lists `newest-versions`, once more
    /// with the newest.
    pub async fn get(&self, path: &str, timeout: Duration) -> Result<Bytes> {
        let endpoint = Endpoint::parse(&self.endpoint, false)?;
        match self
            .get_once(&endpoint, &Self::path(path, &self.api_version), timeout)
            .await
        {
            Err(Error::Status {
                status: 400,
                body,
                url,
            }) => {
                let newest = serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| {
                        v.get("newest-versions")?
                            .get(0)?
                            .as_str()
                            .map(str::to_string)
                    });
                match newest {
                    Some(v) if v != self.api_version => {
                        tracing::info!("IMDS rejected api-version {}; using {v}", self.api_version);
                        self.get_once(&endpoint, &Self::path(path, &v), timeout)
                            .await
                    }
                    _ => Err(Error::Status {
                        url,
                        status: 400,
                        body,
                    }),
                }
            }
            r => r,
        }
    }

    /// GETs with retries on transient errors, within `policy.budget`.
    pub async fn get_retrying(&self, path: &str, policy: RetryPolicy) -> Result<Bytes> {
        policy
            .run(self.request_timeout, &format!("IMDS {path}"), |t| {
                self.get(path, t)
            })
            .await
    }

    /// Reads the compute document (required) and the network document (optional: without it
    /// there is no per-NIC routing, and a warning).
    pub async fn instance(&self, policy: RetryPolicy) -> Result<(AzureInstance, Vec<String>)> {
        let compute = parse_compute(&self.get_retrying("compute", policy).await?)?;
        let mut warnings = Vec::new();
        let network = match self
            .get_retrying("network", policy)
            .await
            .and_then(|b| parse_network(&b))
        {
            Ok(n) => n,
            Err(e) => {
                warnings.push(format!("{e}; no per-NIC routing from IMDS"));
                Default::default()
            }
        };
        Ok((AzureInstance { compute, network }, warnings))
    }
}
