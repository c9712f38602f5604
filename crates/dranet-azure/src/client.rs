//! A small IMDS client on the HTTP stack already in the tree (hyper), with no proxy.

use std::time::{Duration, Instant};

use dranet_util::{Backoff, error_chain};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::imds::{AzureInstance, parse_compute, parse_network};

/// IMDS's link-local address.
pub const DEFAULT_ENDPOINT: &str = "http://169.254.169.254";
/// The api-version asked for (upstream dranet's). When IMDS rejects it, the client retries once
/// with the newest version IMDS lists in its answer.
pub const DEFAULT_API_VERSION: &str = "2025-11-11";

/// Largest IMDS answer read; more is an error.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The error of an HTTP request, with its own causes.
type HttpError = Box<dyn std::error::Error + Send + Sync>;

/// What went wrong talking to IMDS.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request could not be made or answered (connect, reset).
    #[error("IMDS {url}: {}", error_chain(.source.as_ref()))]
    Http {
        /// The URL.
        url: String,
        /// The HTTP client's error.
        #[source]
        source: HttpError,
    },
    /// No answer within the request's timeout.
    #[error("IMDS {url}: no answer within {after:?}")]
    Timeout {
        /// The URL.
        url: String,
        /// The timeout.
        after: Duration,
    },
    /// IMDS answered with an error status.
    #[error("IMDS {url}: HTTP {status}: {body}")]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// A document that is not the JSON IMDS documents.
    #[error("IMDS {what} document: {source}")]
    Json {
        /// Which document.
        what: &'static str,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// A document that is JSON but not an object.
    #[error("IMDS {what} document: expected a JSON object")]
    NotAnObject {
        /// Which document.
        what: &'static str,
    },
    /// An answer larger than [`MAX_BODY_BYTES`] (not retried: the next one would be too).
    #[error("IMDS {url}: answer larger than {limit} bytes (IMDS documents are a few KB)")]
    TooLarge {
        /// The URL.
        url: String,
        /// The limit.
        limit: usize,
    },
    /// The endpoint is not an `http://host[:port]` URL.
    #[error("IMDS endpoint {0:?}: expected http://host[:port]")]
    Endpoint(String),
    /// Retries ran out of time.
    #[error("IMDS did not answer within {after:?}; last error: {last}")]
    GaveUp {
        /// The time spent.
        after: Duration,
        /// The last error.
        #[source]
        last: Box<Error>,
    },
}

impl Error {
    /// Worth retrying: connection trouble, throttling (429), IMDS busy (410, 5xx).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Http { .. } | Error::Timeout { .. } => true,
            Error::Status { status, .. } => matches!(status, 410 | 429 | 500..=599),
            _ => false,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How long to keep trying on Azure.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// First backoff; doubled after each failure.
    pub initial_backoff: Duration,
    /// Longest backoff.
    pub max_backoff: Duration,
    /// Total time allowed, requests included.
    pub budget: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(2),
            budget: Duration::from_secs(15),
        }
    }
}

impl RetryPolicy {
    /// The wait between attempts: `initial_backoff`, doubled after each failure up to
    /// `max_backoff`.
    pub fn backoff(&self) -> Backoff {
        Backoff::new(self.initial_backoff, self.max_backoff)
    }

    /// One attempt, no retry.
    pub fn once() -> Self {
        Self {
            initial_backoff: Duration::ZERO,
            max_backoff: Duration::ZERO,
            budget: Duration::ZERO,
        }
    }
}

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
    fn url(&self, path: &str, version: &str) -> String {
        format!(
            "{}/metadata/instance/{path}?api-version={version}&format=json",
            self.endpoint.trim_end_matches('/')
        )
    }

    async fn get_once(&self, url: &str, timeout: Duration) -> Result<Bytes> {
        let http = |e: HttpError| Error::Http {
            url: url.to_string(),
            source: e,
        };
        let uri: hyper::Uri = url
            .parse()
            .map_err(|_| Error::Endpoint(self.endpoint.clone()))?;
        if uri.scheme_str() != Some("http") || uri.host().is_none() {
            return Err(Error::Endpoint(self.endpoint.clone()));
        }
        let mut conn = HttpConnector::new();
        conn.set_connect_timeout(Some(timeout));
        conn.set_nodelay(true);
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(conn);
        let req = hyper::Request::get(uri)
            .header("Metadata", "true")
            .body(Empty::new())
            .map_err(|e| http(e.into()))?;
        let fut = async {
            let resp = client.request(req).await.map_err(|e| http(e.into()))?;
            let status = resp.status().as_u16();
            // The real documents are a few KB; a metadata endpoint that streams more must not
            // take the node daemon's memory with it.
            let body = http_body_util::Limited::new(resp.into_body(), MAX_BODY_BYTES)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        Error::TooLarge {
                            url: url.to_string(),
                            limit: MAX_BODY_BYTES,
                        }
                    } else {
                        http(e)
                    }
                })?
                .to_bytes();
            Ok::<_, Error>((status, body))
        };
        let (status, body) =
            tokio::time::timeout(timeout, fut)
                .await
                .map_err(|_| Error::Timeout {
                    url: url.to_string(),
                    after: timeout,
                })??;
        if status != 200 {
            return Err(Error::Status {
                url: url.to_string(),
                status,
                body: String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
            });
        }
        Ok(body)
    }

    /// GETs `/metadata/instance/<path>` once; on a 400 that lists `newest-versions`, once more
    /// with the newest.
    pub async fn get(&self, path: &str, timeout: Duration) -> Result<Bytes> {
        let url = self.url(path, &self.api_version);
        match self.get_once(&url, timeout).await {
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
                        self.get_once(&self.url(path, &v), timeout).await
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
        let start = Instant::now();
        let backoff = policy.backoff();
        let mut attempt = 0u32;
        loop {
            let wait = backoff.delay(attempt);
            let left = policy.budget.saturating_sub(start.elapsed());
            let timeout = if policy.budget.is_zero() {
                self.request_timeout
            } else {
                self.request_timeout.min(left.max(Duration::from_millis(1)))
            };
            match self.get(path, timeout).await {
                Ok(b) => return Ok(b),
                Err(e) if e.is_transient() && start.elapsed() + wait < policy.budget => {
                    tracing::debug!("IMDS {path}: {e}; retrying in {wait:?}");
                    tokio::time::sleep(wait).await;
                    attempt = attempt.saturating_add(1);
                }
                Err(e) if e.is_transient() && !policy.budget.is_zero() => {
                    return Err(Error::GaveUp {
                        after: start.elapsed(),
                        last: Box::new(e),
                    });
                }
                Err(e) => return Err(e),
            }
        }
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
