//! A metadata service's client: where it is and how long one request may take, and a session
//! (one read of several documents: shared headers, a token, one retry budget).

use std::time::{Duration, Instant};

use crate::http::{Endpoint, Error, Request, Response, Result};
use crate::retry::RetryPolicy;

/// The link-local address of the metadata services of Azure, GCE, AWS and OCI.
pub const LINK_LOCAL_ENDPOINT: &str = "http://169.254.169.254";

/// A metadata service: its base URL and the timeout of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataClient {
    /// Base URL (`http://169.254.169.254`); tests point it at a fake.
    pub endpoint: String,
    /// Timeout of one request, connect included.
    pub request_timeout: Duration,
}

impl MetadataClient {
    /// A client of `endpoint` with a 2 s request timeout.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            request_timeout: Duration::from_secs(2),
        }
    }

    /// Sends `req` once, within the request timeout: whether a service answers 200 at all (the
    /// probe of a node whose DMI cannot tell).
    pub(crate) async fn probe(&self, req: Request) -> Option<Response> {
        let endpoint = Endpoint::parse(&self.endpoint, false).ok()?;
        endpoint.fetch(&req, self.request_timeout).await.ok()
    }

    /// Whether an IMDSv2-style token service (AWS, Alibaba) answers: one token request.
    pub(crate) async fn token_probe(&self, token_path: &str, ttl_header: &'static str) -> bool {
        let req = Request::put(token_path).header(ttl_header, "60");
        self.probe(req).await.is_some_and(|r| !r.body.is_empty())
    }

    /// A session for one read within `policy`'s budget.
    pub(crate) fn session(&self, policy: RetryPolicy) -> Result<Session> {
        Ok(Session {
            endpoint: Endpoint::parse(&self.endpoint, false)?,
            timeout: self.request_timeout,
            policy,
            start: Instant::now(),
            headers: Vec::new(),
        })
    }
}

/// One read: every request carries the session's headers and retries transient errors within
/// one shared budget.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    endpoint: Endpoint,
    timeout: Duration,
    policy: RetryPolicy,
    start: Instant,
    headers: Vec<(&'static str, String)>,
}

impl Session {
    /// Adds a header to every request of the session.
    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// Sends `req` with the session's headers; any status but 200 is an error, and transient
    /// errors are retried within the budget.
    pub async fn fetch(&self, mut req: Request) -> Result<Response> {
        req.headers.extend(self.headers.iter().cloned());
        let what = self.endpoint.url(&req.path);
        self.policy
            .run_from(self.start, self.timeout, &what, |t| {
                self.endpoint.fetch(&req, t)
            })
            .await
    }

    /// GETs `path`.
    pub async fn get(&self, path: &str) -> Result<Response> {
        self.fetch(Request::get(path)).await
    }

    /// GETs `path`; `None` when the service has no such entry (404): an optional value.
    pub async fn get_optional(&self, path: &str) -> Result<Option<Response>> {
        match self.get(path).await {
            Ok(r) => Ok(Some(r)),
            Err(Error::Status { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// IMDSv2-style session token (AWS, Alibaba): `PUT token_path` with the TTL in
    /// `ttl_header`; every later request carries the token in `token_header`.
    pub async fn with_token(
        self,
        token_path: &str,
        ttl_header: &'static str,
        token_header: &'static str,
    ) -> Result<Self> {
        let token = self
            .fetch(Request::put(token_path).header(ttl_header, TOKEN_TTL_SECONDS))
            .await?
            .text();
        if token.is_empty() {
            return Err(Error::Invalid {
                what: "metadata session token",
                reason: format!("{} answered an empty token", self.endpoint.url(token_path)),
            });
        }
        Ok(self.with_header(token_header, token))
    }
}

/// The session token's lifetime asked for (6 h, the most both AWS and Alibaba allow; one read
/// takes seconds).
const TOKEN_TTL_SECONDS: &str = "21600";
