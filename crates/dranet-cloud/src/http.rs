//! The one HTTP/1.1 client of every metadata service and of the webhook: one request per
//! connection, no proxy, no redirects; connect, request and the whole answer under one timeout,
//! the answer's body capped at [`MAX_BODY_BYTES`]. Over TCP (`http://host[:port][/base]`), TLS
//! (`https://`, the webhook only, checked against a CA bundle: [`crate::tls`]) or a unix socket
//! (`unix:///path/to.sock`, as upstream's webhook URL).

use std::path::PathBuf;
use std::time::Duration;

use dranet_util::error_chain;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// Largest answer read; more is an error. Metadata documents are a few KB.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The error of an HTTP exchange, with its own causes.
type HttpError = Box<dyn std::error::Error + Send + Sync>;

/// What went wrong talking to a metadata service or the webhook.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request could not be made or answered (connect, reset, not HTTP).
    #[error("{url}: {}", error_chain(.source.as_ref()))]
    Http {
        /// The URL.
        url: String,
        /// The HTTP client's error.
        #[source]
        source: HttpError,
    },
    /// No whole answer within the request's timeout.
    #[error("{url}: no answer within {after:?}")]
    Timeout {
        /// The URL.
        url: String,
        /// The timeout.
        after: Duration,
    },
    /// A request that cannot be made from what it was given (a path with characters a URL
    /// cannot carry).
    #[error("{url}: cannot make the request: {}", error_chain(.source.as_ref()))]
    Request {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: HttpError,
    },
    /// An error status.
    #[error("{url}: HTTP {status}: {body}")]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// A document that is not the JSON the service documents.
    #[error("{what}: {source}")]
    Json {
        /// Which document.
        what: &'static str,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// A document that is JSON but not an object.
    #[error("{what}: expected a JSON object")]
    NotAnObject {
        /// Which document.
        what: &'static str,
    },
    /// A document whose content is wrong (a value the service never gives).
    #[error("{what}: {reason}")]
    Invalid {
        /// Which document.
        what: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// An answer larger than the limit (not retried: the next one would be too).
    #[error("{url}: answer larger than {limit} bytes")]
    TooLarge {
        /// The URL.
        url: String,
        /// The limit.
        limit: usize,
    },
    /// The endpoint is not `http://host[:port]` (or `https://` and `unix:///path` where they are
    /// allowed).
    #[error(
        "endpoint {0:?}: expected http://host[:port], https://host[:port] or unix:///path/to.sock"
    )]
    Endpoint(String),
    /// An `https://` endpoint without a CA bundle to check its certificate with.
    #[error(
        "endpoint {0:?}: https needs a CA bundle to check the server's certificate with \
         (--webhook-ca-file)"
    )]
    NoTrust(String),
    /// Retries ran out of time.
    #[error("did not answer within {after:?}; last error: {last}")]
    GaveUp {
        /// The time spent.
        after: Duration,
        /// The last error.
        #[source]
        last: Box<Error>,
    },
}

impl Error {
    /// Worth retrying: connection trouble, throttling (429), a busy service (410, 5xx).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Http { .. } | Error::Timeout { .. } => true,
            Error::Status { status, .. } => matches!(status, 410 | 429 | 500..=599),
            _ => false,
        }
    }

    /// The HTTP status, when the service answered with an error status.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Status { status, .. } => Some(*status),
            Error::GaveUp { last, .. } => last.status(),
            _ => None,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A host (name or address), resolved at each connect, and port; `authority` is the Host
    /// header; TLS checked with `tls` when it is set.
    Tcp {
        authority: String,
        host: String,
        port: u16,
        tls: Option<crate::tls::Tls>,
    },
    /// A unix socket.
    Unix(PathBuf),
}

/// Where requests go: `http://host[:port][/base]`, `https://host[:port][/base]` or
/// `unix:///path/to.sock`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    url: String,
    target: Target,
    /// Path prefix of every request, without a trailing `/`.
    base: String,
}

impl Endpoint {
    /// Parses an endpoint. `unix://` is taken only when `allow_unix` (the webhook); metadata
    /// services are always HTTP on a link-local address.
    pub fn parse(url: &str, allow_unix: bool) -> Result<Self> {
        Self::parse_with(url, allow_unix, None)
    }

    /// [`Endpoint::parse`] where `https://` is allowed too, its server checked with `tls` (which
    /// it needs).
    pub fn parse_with(url: &str, allow_unix: bool, tls: Option<crate::tls::Tls>) -> Result<Self> {
        let bad = || Error::Endpoint(url.to_string());
        if let Some(path) = url.strip_prefix("unix://") {
            if !allow_unix || !path.starts_with('/') || path.len() < 2 {
                return Err(bad());
            }
            return Ok(Self {
                url: url.to_string(),
                target: Target::Unix(PathBuf::from(path)),
                base: String::new(),
            });
        }
        let uri: hyper::Uri = url.parse().map_err(|_| bad())?;
        let https = uri.scheme_str() == Some("https") && allow_unix;
        if !(uri.scheme_str() == Some("http") || https) || uri.query().is_some() {
            return Err(bad());
        }
        let tls = match (https, tls) {
            (true, None) => return Err(Error::NoTrust(url.to_string())),
            (true, tls) => tls,
            (false, _) => None,
        };
        let authority = uri.authority().ok_or_else(bad)?;
        if authority.as_str().contains('@') || authority.host().is_empty() {
            return Err(bad());
        }
        Ok(Self {
            url: url.trim_end_matches('/').to_string(),
            target: Target::Tcp {
                authority: authority.as_str().to_string(),
                host: authority
                    .host()
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string(),
                port: authority
                    .port_u16()
                    .unwrap_or(if tls.is_some() { 443 } else { 80 }),
                tls,
            },
            base: uri.path().trim_end_matches('/').to_string(),
        })
    }

    /// The endpoint as given.
    pub fn as_str(&self) -> &str {
        &self.url
    }

    /// The URL of `path`, for messages.
    pub fn url(&self, path: &str) -> String {
        match self.target {
            Target::Unix(_) => format!("{} {path}", self.url),
            Target::Tcp { .. } => format!("{}{path}", self.url),
        }
    }

    /// Sends `req` and reads the whole answer, all within `timeout`; any status is an answer.
    pub async fn send(&self, req: &Request, timeout: Duration) -> Result<Response> {
        let url = self.url(&req.path);
        let fut = async {
            let request = self.build(req).map_err(|source| Error::Request {
                url: url.clone(),
                source,
            })?;
            match &self.target {
                Target::Tcp {
                    host, port, tls, ..
                } => {
                    let sock = tokio::net::TcpStream::connect((host.as_str(), *port))
                        .await
                        .map_err(|e| http(&url, e.into()))?;
                    sock.set_nodelay(true).map_err(|e| http(&url, e.into()))?;
                    match tls {
                        None => exchange(sock, request, &url).await,
                        Some(tls) => {
                            let name = rustls::pki_types::ServerName::try_from(host.clone())
                                .map_err(|e| http(&url, e.into()))?;
                            let stream = tokio_rustls::TlsConnector::from(tls.config())
                                .connect(name, sock)
                                .await
                                .map_err(|e| http(&url, e.into()))?;
                            exchange(stream, request, &url).await
                        }
                    }
                }
                Target::Unix(path) => {
                    let sock = tokio::net::UnixStream::connect(path)
                        .await
                        .map_err(|e| http(&url, e.into()))?;
                    exchange(sock, request, &url).await
                }
            }
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| Error::Timeout {
                url: url.clone(),
                after: timeout,
            })?
    }

    /// [`Endpoint::send`], with any status but 200 an [`Error::Status`].
    pub async fn fetch(&self, req: &Request, timeout: Duration) -> Result<Response> {
        let resp = self.send(req, timeout).await?;
        if resp.status != 200 {
            return Err(Error::Status {
                url: self.url(&req.path),
                status: resp.status,
                body: String::from_utf8_lossy(&resp.body[..resp.body.len().min(300)]).into_owned(),
            });
        }
        Ok(resp)
    }

    fn build(&self, req: &Request) -> std::result::Result<hyper::Request<Full<Bytes>>, HttpError> {
        let host = match &self.target {
            Target::Tcp { authority, .. } => authority.as_str(),
            Target::Unix(_) => "localhost",
        };
        let mut b = hyper::Request::builder()
            .method(req.method.clone())
            .uri(format!("{}{}", self.base, req.path))
            .header(hyper::header::HOST, host);
        for (k, v) in &req.headers {
            b = b.header(*k, v);
        }
        if req.body.is_some() {
            b = b.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        Ok(b.body(Full::new(Bytes::from(req.body.clone().unwrap_or_default())))?)
    }
}

fn http(url: &str, source: HttpError) -> Error {
    Error::Http {
        url: url.to_string(),
        source,
    }
}

/// One request on a fresh connection, driving the connection in the same task so that a
/// timeout (dropping this future) closes everything.
async fn exchange<T>(io: T, request: hyper::Request<Full<Bytes>>, url: &str) -> Result<Response>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| http(url, e.into()))?;
    let work = async {
        let resp = sender
            .send_request(request)
            .await
            .map_err(|e| http(url, e.into()))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = Limited::new(resp.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    Error::TooLarge {
                        url: url.to_string(),
                        limit: MAX_BODY_BYTES,
                    }
                } else {
                    http(url, e)
                }
            })?
            .to_bytes();
        Ok(Response {
            status,
            headers,
            body,
        })
    };
    tokio::pin!(conn);
    tokio::pin!(work);
    let mut conn_done = false;
    loop {
        tokio::select! {
            r = &mut work => return r,
            c = &mut conn, if !conn_done => {
                conn_done = true;
                c.map_err(|e| http(url, e.into()))?;
            }
        }
    }
}

/// A request: method, path (and query) under the endpoint's base, headers, a JSON body.
#[derive(Debug, Clone)]
pub struct Request {
    /// The method.
    pub method: hyper::Method,
    /// Path and query, from `/`.
    pub path: String,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
    /// A JSON body.
    pub body: Option<Vec<u8>>,
}

impl Request {
    /// A GET of `path`.
    pub fn get(path: impl Into<String>) -> Self {
        Self {
            method: hyper::Method::GET,
            path: path.into(),
            headers: Vec::new(),
            body: None,
        }
    }

    /// A PUT of `path` with no body.
    pub fn put(path: impl Into<String>) -> Self {
        Self {
            method: hyper::Method::PUT,
            ..Self::get(path)
        }
    }

    /// A POST of `path` with a JSON body.
    pub fn post_json(path: impl Into<String>, body: Vec<u8>) -> Self {
        Self {
            method: hyper::Method::POST,
            body: Some(body),
            ..Self::get(path)
        }
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

/// An answer.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers.
    pub headers: hyper::HeaderMap,
    /// The whole body (at most [`MAX_BODY_BYTES`]).
    pub body: Bytes,
}

impl Response {
    /// A header's value, when present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as text, trimmed (metadata values are one line).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).trim().to_string()
    }
}

/// Parses a JSON object document; serde would also accept an array for a struct, which no
/// service sends.
pub fn json_object<T: serde::de::DeserializeOwned>(what: &'static str, body: &[u8]) -> Result<T> {
    let err = |source| Error::Json { what, source };
    let v: serde_json::Value = serde_json::from_slice(body).map_err(err)?;
    if !v.is_object() {
        return Err(Error::NotAnObject { what });
    }
    serde_json::from_value(v).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("http://169.254.169.254", false).unwrap();
        assert_eq!(e.url("/x"), "http://169.254.169.254/x");
        let e = Endpoint::parse("http://127.0.0.1:8081/base/", false).unwrap();
        assert_eq!(e.base, "/base");
        assert_eq!(
            e.target,
            Target::Tcp {
                authority: "127.0.0.1:8081".into(),
                host: "127.0.0.1".into(),
                port: 8081,
                tls: None,
            }
        );
        // https: for the webhook only, and never without a CA to check the server with.
        assert!(matches!(
            Endpoint::parse("https://webhook.ops.svc", true),
            Err(Error::NoTrust(_))
        ));
        let e = Endpoint::parse("unix:///run/webhook.sock", true).unwrap();
        assert_eq!(e.target, Target::Unix("/run/webhook.sock".into()));
        for bad in [
            "ftp://example",
            "example",
            "http://",
            "http://u@h",
            "http://h/?q=1",
            "unix://relative",
            "unix://",
        ] {
            assert!(
                matches!(Endpoint::parse(bad, true), Err(Error::Endpoint(_))),
                "{bad}"
            );
        }
        assert!(Endpoint::parse("unix:///run/x.sock", false).is_err());
        // Metadata services are plain HTTP on a link-local address: https is the webhook's.
        assert!(matches!(
            Endpoint::parse("https://x", false),
            Err(Error::Endpoint(_))
        ));
    }
}
