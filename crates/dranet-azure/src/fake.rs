//! A fake IMDS for tests (feature `fake`): a plain HTTP/1.1 server on 127.0.0.1 that answers
//! each request with what a script says, so tests can serve recorded documents, errors, garbage
//! and silence. It is not Azure: it only speaks enough HTTP for an IMDS client.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A status and a JSON body.
    Json(u16, String),
    /// Accept, read the request, never answer.
    Hang,
    /// Close the connection without a word.
    Close,
}

/// A request the fake saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Path and query.
    pub target: String,
    /// Whether `Metadata: true` was sent.
    pub metadata_header: bool,
}

type Script = dyn Fn(&str, usize) -> Reply + Send + Sync;

/// A running fake IMDS; stops when dropped.
pub struct FakeImds {
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
    _rt: Option<tokio::runtime::Runtime>,
}

impl FakeImds {
    /// Starts on the current tokio runtime; `script(target, n)` answers the n-th request (from 0).
    pub async fn start(
        script: impl Fn(&str, usize) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let seen2 = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let (seen, script) = (seen2.clone(), script.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&buf).into_owned();
                    let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
                    let metadata_header = head
                        .lines()
                        .any(|l| l.to_ascii_lowercase().replace(' ', "") == "metadata:true");
                    let n = {
                        let Ok(mut s) = seen.lock() else { return };
                        s.push(Seen {
                            target: target.clone(),
                            metadata_header,
                        });
                        s.len() - 1
                    };
                    match script(&target, n) {
                        Reply::Json(status, body) => {
                            let resp = format!(
                                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                body.len()
                            );
                            let _ = sock.write_all(resp.as_bytes()).await;
                        }
                        Reply::Hang => {
                            tokio::time::sleep(std::time::Duration::from_secs(3600)).await
                        }
                        Reply::Close => {}
                    }
                });
            }
        });
        Ok(Self {
            endpoint,
            seen,
            task,
            _rt: None,
        })
    }

    /// Starts on a runtime of its own, for synchronous tests.
    pub fn start_blocking(
        script: impl Fn(&str, usize) -> Reply + Send + Sync + 'static,
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
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
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

impl Drop for FakeImds {
    fn drop(&mut self) {
        self.task.abort();
    }
}
