//! The daemon's HTTP endpoint: `/metrics`, `/healthz`, `/readyz` (GET only, HTTP/1.1).

use std::convert::Infallible;
use std::net::{AddrParseError, SocketAddr};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// An answer: status, content type, body.
pub type Answer = (u16, &'static str, String);

/// Maps a path to its answer; `None` is 404.
pub type Handler = Arc<dyn Fn(&str) -> Option<Answer> + Send + Sync>;

/// A `--bind-address` that is not an address and port.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not an address and port such as :9177 or 127.0.0.1:9177")]
pub struct BindAddressError {
    /// What was given.
    pub value: String,
    /// Why it does not parse.
    #[source]
    pub source: AddrParseError,
}

/// Parses `--bind-address` as upstream takes it: `:9177` (all addresses), `0.0.0.0:9177`,
/// `127.0.0.1:9177`, `[::1]:9177`.
pub fn parse_bind_address(s: &str) -> Result<SocketAddr, BindAddressError> {
    let full = if let Some(port) = s.strip_prefix(':') {
        format!("[::]:{port}")
    } else {
        s.to_string()
    };
    full.parse().map_err(|source| BindAddressError {
        value: s.to_string(),
        source,
    })
}

/// Binds `addr` (falling back from `[::]` to `0.0.0.0` on hosts without IPv6).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    match TcpListener::bind(addr).await {
        Ok(l) => Ok(l),
        Err(e) if addr.ip().is_unspecified() && addr.is_ipv6() => {
            let v4 = SocketAddr::from(([0, 0, 0, 0], addr.port()));
            TcpListener::bind(v4).await.map_err(|_| e)
        }
        Err(e) => Err(e),
    }
}

/// Serves until `shutdown` turns true.
pub async fn serve(listener: TcpListener, handler: Handler, mut shutdown: watch::Receiver<bool>) {
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            r = shutdown.changed() => {
                if r.is_err() || *shutdown.borrow() {
                    return;
                }
                continue;
            }
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let handler = handler.clone();
                async move { Ok::<_, Infallible>(answer(&handler, &req)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), svc);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "metrics endpoint connection");
            }
        });
    }
}

fn answer(handler: &Handler, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let reply = |code: u16, ctype: &str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if let Ok(v) = hyper::header::HeaderValue::from_str(ctype) {
            r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        r
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(405, "text/plain", "only GET\n".into());
    }
    match handler(req.uri().path()) {
        Some((code, ctype, body)) => reply(code, ctype, body),
        None => reply(
            404,
            "text/plain",
            "not found: try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_bind_address;

    #[test]
    fn bind_addresses_as_upstream_writes_them() {
        assert_eq!(parse_bind_address(":9177").unwrap().port(), 9177);
        assert!(parse_bind_address(":9177").unwrap().ip().is_unspecified());
        assert_eq!(
            parse_bind_address("127.0.0.1:8080").unwrap().to_string(),
            "127.0.0.1:8080"
        );
        assert_eq!(parse_bind_address("[::1]:1").unwrap().port(), 1);
        for bad in ["9177", "localhost:9177", ":x", ""] {
            let e = parse_bind_address(bad).unwrap_err();
            assert_eq!(e.value, bad);
            assert!(e.to_string().contains("not an address"), "{bad}: {e}");
        }
    }
}
