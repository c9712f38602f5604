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

/// What clients may hold of the endpoint. The daemon runs with a memory limit on a host network
/// port that every pod of the cluster can reach: slow or idle clients must not add up to it, and
/// must not keep the kubelet's probes out (a daemon whose liveness probe cannot connect is
/// restarted). So the node's own connections (the kubelet's probes, a `curl` on the node) have
/// slots of their own, and every other client address has a share of the rest.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections of other clients served at once; one more is closed as soon as it is
    /// accepted.
    pub connections: usize,
    /// Of those, connections of one client address.
    pub per_client: usize,
    /// Connections from the node itself served at once, apart from the others: a connection
    /// whose source address is the address it reached (the node's own IP, or loopback to
    /// loopback), which a pod with an address of its own cannot have.
    pub node_connections: usize,
    /// Time a client has to send a request's headers (idle keep-alive included).
    pub header_read: Duration,
    /// The most a connection lives, requests included.
    pub connection: Duration,
}

impl Default for Limits {
    /// 64 connections, 8 of one client address (Prometheus needs one or two), 16 for the node
    /// itself, 5 s for the headers, 60 s a connection.
    fn default() -> Self {
        Self {
            connections: 64,
            per_client: 8,
            node_connections: 16,
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

/// Whether a connection comes from the node itself: its source is the address it reached.
fn from_node(peer: SocketAddr, local: Option<SocketAddr>) -> bool {
    let canonical = |ip: std::net::IpAddr| ip.to_canonical();
    local.is_some_and(|l| canonical(l.ip()) == canonical(peer.ip()))
}

/// The connections held, by kind: the node's, and each other client address's.
struct Slots {
    node: Arc<tokio::sync::Semaphore>,
    others: Arc<tokio::sync::Semaphore>,
    per_client: Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
    limit_per_client: usize,
}

/// A slot held for one connection, given back on drop.
enum Slot {
    Node {
        _permit: tokio::sync::OwnedSemaphorePermit,
    },
    Client {
        _permit: tokio::sync::OwnedSemaphorePermit,
        ip: std::net::IpAddr,
        per_client: Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
    },
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Slot::Client { ip, per_client, .. } = self {
            let mut held = per_client.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = held.get_mut(ip) {
                *n -= 1;
                if *n == 0 {
                    held.remove(ip);
                }
            }
        }
    }
}

impl Slots {
    fn new(limits: &Limits) -> Self {
        Self {
            node: Arc::new(tokio::sync::Semaphore::new(limits.node_connections)),
            others: Arc::new(tokio::sync::Semaphore::new(limits.connections)),
            per_client: Arc::default(),
            limit_per_client: limits.per_client,
        }
    }

    /// A slot for a connection from `peer` that reached `local`, if one is free.
    fn take(&self, peer: SocketAddr, local: Option<SocketAddr>) -> Option<Slot> {
        if from_node(peer, local) {
            return self
                .node
                .clone()
                .try_acquire_owned()
                .ok()
                .map(|p| Slot::Node { _permit: p });
        }
        let ip = peer.ip().to_canonical();
        let mut held = self.per_client.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(ip).or_insert(0);
        if *n >= self.limit_per_client {
            return None;
        }
        let permit = self.others.clone().try_acquire_owned().ok()?;
        *n += 1;
        Some(Slot::Client {
            _permit: permit,
            ip,
            per_client: self.per_client.clone(),
        })
    }
}

/// Serves until `shutdown` turns true, within `limits`.
pub async fn serve_within(
    listener: TcpListener,
    handler: Handler,
    mut shutdown: watch::Receiver<bool>,
    limits: Limits,
) {
    let slots = Slots::new(&limits);
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
        let Some(slot) = slots.take(peer, stream.local_addr().ok()) else {
            tracing::debug!(%peer, max = limits.connections, per_client = limits.per_client, "metrics endpoint: too many connections; closed");
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
            per_client: 2,
            node_connections: 0,
            header_read: Duration::from_millis(300),
            connection: Duration::from_secs(30),
        };
        let (addr, _stop) = server(limits).await;
        // Two idle clients hold both slots; a third is closed at once, unanswered.
        let mut idle1 = connect_from("127.0.0.2", addr).await;
        let mut idle2 = connect_from("127.0.0.3", addr).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut third = connect_from("127.0.0.4", addr).await;
        let _ = third
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        let got = read_to_close(&mut third).await;
        assert!(!got.contains("200 OK"), "{got}");
        // The idle ones send no headers: closed by the header timeout, freeing the slots.
        read_to_close(&mut idle1).await;
        read_to_close(&mut idle2).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut s = connect_from("127.0.0.4", addr).await;
        assert!(get_healthz(&mut s).await.starts_with("HTTP/1.1 200 OK"));
    }

    /// A client socket from `source` (any 127/8 address is this machine's) to `addr`.
    async fn connect_from(source: &str, addr: SocketAddr) -> tokio::net::TcpStream {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(SocketAddr::new(source.parse().unwrap(), 0)).unwrap();
        s.connect(addr).await.unwrap()
    }

    /// What a `GET /healthz` on `s` gets before the server closes.
    async fn get_healthz(s: &mut tokio::net::TcpStream) -> String {
        let _ = s
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await;
        read_to_close(s).await
    }

    /// A pod that opens idle connections to the node's port from its own address gets its
    /// share and no more: other clients and the kubelet's probes (the node's own address, here
    /// 127.0.0.1 to 127.0.0.1) are still served.
    #[tokio::test]
    async fn one_client_cannot_keep_the_probes_or_others_out() {
        let limits = Limits {
            connections: 3,
            per_client: 2,
            node_connections: 1,
            header_read: Duration::from_secs(10),
            connection: Duration::from_secs(30),
        };
        let (addr, _stop) = server(limits).await;
        let mut pod = Vec::new();
        for _ in 0..2 {
            pod.push(connect_from("127.0.0.2", addr).await);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut more = connect_from("127.0.0.2", addr).await;
        assert!(
            !get_healthz(&mut more).await.contains("200 OK"),
            "past its share"
        );
        let mut other = connect_from("127.0.0.3", addr).await;
        assert!(get_healthz(&mut other).await.starts_with("HTTP/1.1 200 OK"));
        // Another client fills the public slots: the node's own connection still gets in.
        let _fill = connect_from("127.0.0.4", addr).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut full = connect_from("127.0.0.5", addr).await;
        assert!(
            !get_healthz(&mut full).await.contains("200 OK"),
            "public slots full"
        );
        let mut probe = connect_from("127.0.0.1", addr).await;
        assert!(get_healthz(&mut probe).await.starts_with("HTTP/1.1 200 OK"));
    }

    #[test]
    fn the_node_is_a_connection_from_the_address_it_reached() {
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(from_node(sa("10.0.0.4:5000"), Some(sa("10.0.0.4:9177"))));
        assert!(from_node(
            sa("[::ffff:10.0.0.4]:5000"),
            Some(sa("10.0.0.4:9177"))
        ));
        assert!(from_node(sa("127.0.0.1:5000"), Some(sa("127.0.0.1:9177"))));
        assert!(!from_node(sa("10.244.1.7:5000"), Some(sa("10.0.0.4:9177"))));
        assert!(!from_node(sa("127.0.0.2:5000"), Some(sa("127.0.0.1:9177"))));
        assert!(!from_node(sa("10.0.0.4:5000"), None));
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
