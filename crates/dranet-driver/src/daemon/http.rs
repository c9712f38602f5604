//! The daemon's HTTP endpoint: `/metrics`, `/healthz`, `/readyz` (GET only, HTTP/1.1).

use std::convert::Infallible;
use std::net::{AddrParseError, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
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

/// What one client may hold of the endpoint. The daemon runs with a memory limit on a host
/// network port: slow or idle clients must not add up to it.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; one more is closed as soon as it is accepted.
    pub connections: usize,
    /// Time a client has to send a request's headers (idle keep-alive included).
    pub header_read: Duration,
    /// The most a connection lives, requests included.
    pub connection: Duration,
}

impl Default for Limits {
    /// 64 connections (Prometheus and the kubelet's probes need a few), 5 s for the headers,
    /// 60 s a connection.
    fn default() -> Self {
        Self {
            connections: 64,
            header_read: Duration::from_secs(5),
            connection: Duration::from_secs(60),
        }
    }
}

/// hyper's smallest read buffer: a GET for /metrics fits many times over (its default is
/// ~400 KB per connection).
const MAX_BUF: usize = 8192;

/// Serves until `shutdown` turns true, within [`Limits::default`].
pub async fn serve(listener: TcpListener, handler: Handler, shutdown: watch::Receiver<bool>) {
    serve_within(listener, handler, shutdown, Limits::default()).await;
}

/// Serves until `shutdown` turns true, within `limits`.
pub async fn serve_within(
    listener: TcpListener,
    handler: Handler,
    mut shutdown: watch::Receiver<bool>,
    limits: Limits,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.connections));
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, max = limits.connections, "metrics endpoint: too many connections; closed");
            drop(stream);
            continue;
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let handler = handler.clone();
                async move { Ok::<_, Infallible>(answer(&handler, &req)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read)
                .max_buf_size(MAX_BUF)
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), svc);
            match tokio::time::timeout(limits.connection, conn).await {
                Ok(Err(e)) => tracing::debug!(error = %e, "metrics endpoint connection"),
                Ok(Ok(())) => {}
                Err(_) => {
                    tracing::debug!(%peer, "metrics endpoint: connection lived too long; closed")
                }
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
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn server(limits: Limits) -> (SocketAddr, watch::Sender<bool>) {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handler: Handler =
            Arc::new(|p: &str| (p == "/healthz").then(|| (200, "text/plain", "ok\n".to_string())));
        let (tx, rx) = watch::channel(false);
        tokio::spawn(serve_within(listener, handler, rx, limits));
        (addr, tx)
    }

    /// Reads until the server closes; what it sent.
    async fn read_to_close(s: &mut tokio::net::TcpStream) -> String {
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn idle_clients_are_closed_and_connections_are_capped() {
        let limits = Limits {
            connections: 2,
            header_read: Duration::from_millis(300),
            connection: Duration::from_secs(30),
        };
        let (addr, _stop) = server(limits).await;
        // Two idle clients hold both slots; a third is closed at once, unanswered.
        let mut idle1 = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut idle2 = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = third
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        let got = read_to_close(&mut third).await;
        assert!(!got.contains("200 OK"), "{got}");
        // The idle ones send no headers: closed by the header timeout, freeing the slots.
        read_to_close(&mut idle1).await;
        read_to_close(&mut idle2).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let got = read_to_close(&mut s).await;
        assert!(got.starts_with("HTTP/1.1 200 OK"), "{got}");
    }

    #[tokio::test]
    async fn headers_larger_than_the_buffer_are_refused() {
        let (addr, _stop) = server(Limits::default()).await;
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let big = format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
            "a".repeat(64 * 1024)
        );
        let _ = s.write_all(big.as_bytes()).await;
        let got = read_to_close(&mut s).await;
        assert!(!got.contains("200 OK"), "{got}");
    }

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
