//! Fake HTTP servers for tests (feature `fake`): a plain HTTP/1.1 server on 127.0.0.1 or a unix
//! socket that answers each request with what a script says — recorded documents, errors,
//! garbage, silence, a body that trickles or never ends — and records what it was asked.
//! [`clouds`] has scripts that answer as each cloud's metadata service does (paths, headers,
//! tokens). They are not the clouds: they speak just enough HTTP for this crate's client.

pub mod clouds;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// One answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A status and a JSON body.
    Json(u16, String),
    /// A status, extra headers and a body.
    With(u16, Vec<(String, String)>, String),
    /// Accept, read the request, never answer.
    Hang,
    /// Close the connection without a word.
    Close,
    /// 200 with this body, one byte every 100 ms.
    Trickle(String),
    /// 200 with a chunked body that never ends.
    Endless,
    /// Bytes that are not HTTP.
    Garbage,
    /// This answer after a while: a slow server.
    After(Duration, Box<Reply>),
}

/// A request the fake saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `PUT`, `POST`.
    pub method: String,
    /// Path and query.
    pub target: String,
    /// Headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Request {
    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }
}

/// What answers the n-th request (from 0).
pub type Script = dyn Fn(&Request, usize) -> Reply + Send + Sync;

/// A running fake; stops when dropped.
pub struct FakeServer {
    /// `http://127.0.0.1:<port>`, `https://localhost:<port>` or `unix://<path>`.
    pub endpoint: String,
    seen: Arc<Mutex<Vec<Request>>>,
    task: tokio::task::JoinHandle<()>,
    socket: Option<PathBuf>,
    _rt: Option<tokio::runtime::Runtime>,
}

impl FakeServer {
    /// Starts on 127.0.0.1 on the current tokio runtime.
    pub async fn start(
        script: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let listener = Arc::new(tokio::net::TcpListener::bind("127.0.0.1:0").await?);
        let endpoint = format!("http://{}", listener.local_addr()?);
        Ok(Self::serving(endpoint, None, Arc::new(script), move || {
            let l = listener.clone();
            async move { l.accept().await.map(|(s, _)| s) }
        }))
    }

    /// Starts on a unix socket at `path` on the current tokio runtime.
    pub async fn start_unix(
        path: &Path,
        script: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let listener = Arc::new(tokio::net::UnixListener::bind(path)?);
        let endpoint = format!("unix://{}", path.display());
        Ok(Self::serving(
            endpoint,
            Some(path.to_path_buf()),
            Arc::new(script),
            move || {
                let l = listener.clone();
                async move { l.accept().await.map(|(s, _)| s) }
            },
        ))
    }

    /// Starts on 127.0.0.1 behind TLS, on the current tokio runtime: `https://localhost:<port>`
    /// with the certificate chain and key given (PEM), as an off-node webhook behind a Service.
    /// A client that refuses the certificate is dropped, and the server goes on.
    pub async fn start_tls(
        chain_pem: &[u8],
        key_pem: &[u8],
        script: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let bad = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
        let chain = CertificateDer::pem_slice_iter(chain_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(e.to_string()))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| bad(e.to_string()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| bad(e.to_string()))?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("https://localhost:{}", listener.local_addr()?.port());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, script): (_, Arc<Script>) = (seen.clone(), Arc::new(script));
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let (acceptor, s, script) = (acceptor.clone(), s.clone(), script.clone());
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(sock).await {
                        serve(tls, s, script).await;
                    }
                });
            }
        });
        Ok(Self {
            endpoint,
            seen,
            task,
            socket: None,
            _rt: None,
        })
    }

    /// Serves each connection `accept` gives with `script`, until dropped.
    fn serving<S, F, Fut>(
        endpoint: String,
        socket: Option<PathBuf>,
        script: Arc<Script>,
        accept: F,
    ) -> Self
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        F: Fn() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = std::io::Result<S>> + Send,
    {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok(sock) = accept().await {
                tokio::spawn(serve(sock, s.clone(), script.clone()));
            }
        });
        Self {
            endpoint,
            seen,
            task,
            socket,
            _rt: None,
        }
    }

    /// Starts on 127.0.0.1 on a runtime of its own, for synchronous tests.
    pub fn start_blocking(
        script: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let mut f = rt.block_on(Self::start(script))?;
        f._rt = Some(rt);
        Ok(f)
    }

    /// The requests seen so far.
    pub fn seen(&self) -> Vec<Request> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(p) = &self.socket {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Reads one request (head and `Content-Length` body); `None` when the peer went away.
async fn read_request<S: AsyncRead + Unpin>(sock: &mut S) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.lines();
    let mut first = lines.next()?.split_whitespace();
    let method = first.next()?.to_string();
    let target = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    body.truncate(len);
    Some(Request {
        method,
        target,
        headers,
        body,
    })
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut sock: S,
    seen: Arc<Mutex<Vec<Request>>>,
    script: Arc<Script>,
) {
    let Some(req) = read_request(&mut sock).await else {
        return;
    };
    let n = {
        let Ok(mut s) = seen.lock() else { return };
        s.push(req.clone());
        s.len() - 1
    };
    let head = |status: u16, headers: &[(String, String)], len: Option<usize>| {
        let mut h = format!("HTTP/1.1 {status} X\r\nConnection: close\r\n");
        for (k, v) in headers {
            h.push_str(&format!("{k}: {v}\r\n"));
        }
        match len {
            Some(l) => h.push_str(&format!("Content-Length: {l}\r\n\r\n")),
            None => h.push_str("Transfer-Encoding: chunked\r\n\r\n"),
        }
        h
    };
    let mut reply = script(&req, n);
    while let Reply::After(delay, then) = reply {
        tokio::time::sleep(delay).await;
        reply = *then;
    }
    match reply {
        Reply::After(..) => {}
        Reply::Json(status, body) => {
            let json = [("Content-Type".to_string(), "application/json".to_string())];
            let resp = head(status, &json, Some(body.len())) + &body;
            let _ = sock.write_all(resp.as_bytes()).await;
        }
        Reply::With(status, headers, body) => {
            let resp = head(status, &headers, Some(body.len())) + &body;
            let _ = sock.write_all(resp.as_bytes()).await;
        }
        Reply::Hang => tokio::time::sleep(Duration::from_secs(3600)).await,
        Reply::Close => {}
        Reply::Trickle(body) => {
            if sock
                .write_all(head(200, &[], Some(body.len())).as_bytes())
                .await
                .is_err()
            {
                return;
            }
            for b in body.bytes() {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if sock.write_all(&[b]).await.is_err() {
                    return;
                }
            }
        }
        Reply::Endless => {
            if sock
                .write_all(head(200, &[], None).as_bytes())
                .await
                .is_err()
            {
                return;
            }
            let chunk = format!("{:x}\r\n{}\r\n", 64 << 10, "x".repeat(64 << 10));
            while sock.write_all(chunk.as_bytes()).await.is_ok() {}
        }
        Reply::Garbage => {
            let _ = sock
                .write_all(b"\x16\x03\x01 this is not HTTP\r\n\r\n")
                .await;
        }
    }
}
