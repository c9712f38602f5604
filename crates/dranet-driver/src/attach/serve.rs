//! The daemon's end of the hook's socket: one request line in, one answer line out.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, watch};

use super::hook::{HookAnswer, HookRequest, MAX_MESSAGE};

/// Answers one hook request.
pub type HookHandler = Arc<dyn Fn(HookRequest) -> BoxFuture<'static, HookAnswer> + Send + Sync>;

/// How long a hook may take to send its request (a local process, it needs none of it).
const READ_LIMIT: Duration = Duration::from_secs(5);

/// Hooks answered at once; a pod has one waiting container at its start, a node a few
/// hundred pods at the most.
const CONNECTIONS: usize = 512;

/// Serves hooks on `listener` until `stop` turns true.
pub async fn serve(listener: UnixListener, handler: HookHandler, mut stop: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS));
    loop {
        let conn = tokio::select! {
            c = listener.accept() => c,
            _ = stop.wait_for(|s| *s) => return,
        };
        let stream = match conn {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "the hook socket could not accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Dropped: the hook reconnects until its limit.
            continue;
        };
        let h = handler.clone();
        tokio::spawn(async move {
            if let Err(e) = one(stream, h).await {
                tracing::debug!(error = %e, "a hook connection ended early");
            }
            drop(slot);
        });
    }
}

async fn one(stream: UnixStream, handler: HookHandler) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut line = Vec::new();
    let mut reader = BufReader::new(r.take(MAX_MESSAGE as u64));
    let read = reader.read_until(b'\n', &mut line);
    let answer = match tokio::time::timeout(READ_LIMIT, read).await {
        Err(_) => HookAnswer {
            attached: false,
            reason: "the hook's request did not arrive in time".into(),
            runtime_hooks: Vec::new(),
        },
        Ok(r) => {
            r?;
            match serde_json::from_slice::<HookRequest>(&line) {
                Ok(req) => handler(req).await,
                Err(e) => HookAnswer {
                    attached: false,
                    reason: format!("the hook's request: {e}"),
                    runtime_hooks: Vec::new(),
                },
            }
        }
    };
    let mut out = serde_json::to_vec(&answer).map_err(std::io::Error::other)?;
    out.push(b'\n');
    w.write_all(&out).await
}

#[cfg(test)]
mod tests {
    use super::super::hook::ask;
    use super::*;

    #[test]
    fn a_hook_gets_the_handlers_answer_and_a_bad_request_a_reason() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("hook.sock");
        let (stop, stop_rx) = watch::channel(false);
        let listener = rt.block_on(async { UnixListener::bind(&sock) }).unwrap();
        let handler: HookHandler = Arc::new(|req: HookRequest| {
            Box::pin(async move {
                HookAnswer {
                    attached: req.pod_uid == "ok",
                    reason: if req.pod_uid == "ok" {
                        String::new()
                    } else {
                        "claim a/b device eth9: gone".into()
                    },
                    runtime_hooks: Vec::new(),
                }
            })
        });
        rt.spawn(serve(listener, handler, stop_rx));
        let mut req = HookRequest {
            sandbox_id: "s".into(),
            pod_uid: "ok".into(),
            pod_name: "p".into(),
            pod_namespace: "n".into(),
            netns: "/proc/1/ns/net".into(),
            wait_ms: 1000,
            container_name: String::new(),
        };
        ask(&sock, &req, Duration::from_secs(5)).unwrap();
        req.pod_uid = "no".into();
        let e = ask(&sock, &req, Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(e.contains("claim a/b device eth9: gone"), "{e}");

        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        std::io::Write::write_all(&mut s, b"{\"sandboxId\": 1}\n").unwrap();
        let mut out = String::new();
        std::io::Read::read_to_string(&mut s, &mut out).unwrap();
        assert!(
            out.contains("\"attached\":false") && out.contains("the hook's request"),
            "{out}"
        );
        stop.send_replace(true);
    }
}
