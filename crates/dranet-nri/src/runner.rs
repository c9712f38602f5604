//! Connecting to the runtime, registering, serving calls, and reconnecting.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dranet_util::Backoff;
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Result};
use crate::events::EventMask;
use crate::mux::{Channel, Demux, frame_message};
use crate::plugin::NriPlugin;
use crate::proto::nri as pb;
use crate::service::{ConnState, Dispatcher, RUNTIME_SERVICE};
use crate::ttrpc::{Message, MessageType, Request, Response, code};

/// Most runtime calls handled at once on one connection; past it the connection is not read
/// until one finishes.
pub(crate) const MAX_IN_FLIGHT: usize = 64;

/// Where runtimes listen for external plugins.
pub const DEFAULT_SOCKET_PATH: &str = "/var/run/nri/nri.sock";
/// Set by a runtime that launched the plugin: the plugin's name.
pub const ENV_PLUGIN_NAME: &str = "NRI_PLUGIN_NAME";
/// Set by a runtime that launched the plugin: the plugin's two-digit index.
pub const ENV_PLUGIN_IDX: &str = "NRI_PLUGIN_IDX";
/// Set by a runtime that launched the plugin: the number of an inherited, connected socket.
pub const ENV_PLUGIN_SOCKET: &str = "NRI_PLUGIN_SOCKET";

/// Where the runner's connection to the runtime stands; see [`Runner::watch_connection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionState {
    /// Not connected yet, or reconnecting.
    Connecting,
    /// Connected and registered with the runtime: events arrive.
    Registered,
    /// The connection ended; with reconnection on, the runner tries again.
    Disconnected {
        /// Why, with its causes.
        error: String,
    },
}

/// Configures and builds a [`Runner`].
///
/// ```no_run
/// # use dranet_nri::{RunnerBuilder, Event, EventMask, NriPlugin};
/// # struct MyPlugin;
/// # impl NriPlugin for MyPlugin {}
/// # async fn f() -> dranet_nri::Result<()> {
/// RunnerBuilder::new()
///     .name("dranet")
///     .index(10)
///     .events(EventMask::of(&[Event::RunPodSandbox, Event::CreateContainer]))
///     .build(MyPlugin)?
///     .run()
///     .await
/// # }
/// ```
#[derive(Debug)]
pub struct RunnerBuilder {
    socket: PathBuf,
    name: Option<String>,
    index: Option<u8>,
    events: EventMask,
    reconnect: bool,
    backoff: Backoff,
    registration_timeout: Duration,
    from_env: bool,
    connection: Option<UnixStream>,
}

impl Default for RunnerBuilder {
    fn default() -> Self {
        RunnerBuilder {
            socket: PathBuf::from(DEFAULT_SOCKET_PATH),
            name: None,
            index: None,
            events: EventMask::empty(),
            reconnect: true,
            backoff: Backoff::new(Duration::from_millis(20), Duration::from_millis(250)),
            registration_timeout: Duration::from_secs(5),
            from_env: true,
            connection: None,
        }
    }
}

impl RunnerBuilder {
    /// Defaults: socket [`DEFAULT_SOCKET_PATH`], all events, reconnect with 20–250 ms backoff.
    pub fn new() -> Self {
        Self::default()
    }

    /// The runtime's NRI socket.
    #[must_use]
    pub fn socket(mut self, path: impl Into<PathBuf>) -> Self {
        self.socket = path.into();
        self
    }

    /// The plugin's name (overridden by `NRI_PLUGIN_NAME` when the runtime launched the plugin).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The plugin's index, 0 to 99, which orders plugins (overridden by `NRI_PLUGIN_IDX`).
    #[must_use]
    pub fn index(mut self, index: u8) -> Self {
        self.index = Some(index);
        self
    }

    /// Events to subscribe to. The default, the empty mask, means every event the runtime knows.
    #[must_use]
    pub fn events(mut self, events: EventMask) -> Self {
        self.events = events;
        self
    }

    /// Whether to reconnect when the runtime restarts or drops the connection (default: yes;
    /// never for an inherited or given connection, which cannot be re-established).
    #[must_use]
    pub fn reconnect(mut self, reconnect: bool) -> Self {
        self.reconnect = reconnect;
        self
    }

    /// Reconnection delay (default 20 ms doubling up to 250 ms).
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How long to wait for the runtime to accept the registration.
    #[must_use]
    pub fn registration_timeout(mut self, timeout: Duration) -> Self {
        self.registration_timeout = timeout;
        self
    }

    /// Whether to honour `NRI_PLUGIN_NAME`, `NRI_PLUGIN_IDX` and `NRI_PLUGIN_SOCKET` (default: yes).
    #[must_use]
    pub fn from_env(mut self, from_env: bool) -> Self {
        self.from_env = from_env;
        self
    }

    /// Serve on an already connected stream (e.g. one end of a socketpair) instead of the socket.
    #[must_use]
    pub fn connection(mut self, stream: UnixStream) -> Self {
        self.connection = Some(stream);
        self
    }

    /// Validates the settings and builds the runner for `plugin`.
    pub fn build<P: NriPlugin>(self, plugin: P) -> Result<Runner<P>> {
        self.build_shared(Arc::new(plugin))
    }

    /// Like [`RunnerBuilder::build`], for a plugin the caller keeps a handle to.
    pub fn build_shared<P: NriPlugin>(mut self, plugin: Arc<P>) -> Result<Runner<P>> {
        let env = |k: &str| {
            self.from_env
                .then(|| std::env::var(k).ok())
                .flatten()
                .filter(|v| !v.is_empty())
        };
        let name = env(ENV_PLUGIN_NAME).or(self.name.take()).ok_or_else(|| {
            Error::Config(format!(
                "plugin name not set (RunnerBuilder::name or {ENV_PLUGIN_NAME})"
            ))
        })?;
        let index = env(ENV_PLUGIN_IDX)
            .or(self.index.take().map(|i| format!("{i:02}")))
            .ok_or_else(|| {
                Error::Config(format!(
                    "plugin index not set (RunnerBuilder::index or {ENV_PLUGIN_IDX})"
                ))
            })?;
        if name.is_empty() {
            return Err(Error::Config("plugin name is empty".into()));
        }
        if index.len() != 2 || !index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::Config(format!(
                "plugin index {index:?} is not two digits (00-99)"
            )));
        }
        let source = match (self.connection.take(), env(ENV_PLUGIN_SOCKET)) {
            (Some(stream), _) => Source::Given(Some(stream)),
            (None, Some(fd)) => Source::Inherited(Some(inherited_socket(&fd)?)),
            (None, None) => Source::Path(self.socket.clone()),
        };
        Ok(Runner {
            dispatcher: Arc::new(Dispatcher::new(plugin, self.events)),
            name,
            index,
            reconnect: self.reconnect && matches!(source, Source::Path(_)),
            backoff: self.backoff,
            registration_timeout: self.registration_timeout,
            source,
            state: tokio::sync::watch::Sender::new(ConnectionState::Connecting),
        })
    }
}

/// Takes ownership of the connected socket the runtime handed over as file descriptor `value`.
fn inherited_socket(value: &str) -> Result<std::os::unix::net::UnixStream> {
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::FileTypeExt;
    let bad = |reason: String| Error::InheritedSocket {
        value: value.to_owned(),
        reason,
    };
    let fd: i32 = value
        .parse()
        .map_err(|_| bad("not a file descriptor number".into()))?;
    if fd < 3 {
        return Err(bad("stdin/stdout/stderr cannot be the NRI socket".into()));
    }
    // Check the descriptor before claiming it: owning a closed or foreign fd would close
    // someone else's file later.
    let io = |action| {
        move |source| Error::InheritedSocketIo {
            value: value.to_owned(),
            action,
            source,
        }
    };
    let md =
        std::fs::metadata(format!("/proc/self/fd/{fd}")).map_err(io("no such open descriptor"))?;
    if !md.file_type().is_socket() {
        return Err(bad("descriptor is not a socket".into()));
    }
    // SAFETY: `fd` is an open socket of this process (checked above) that the runtime passed to us
    // for our exclusive use; `build` takes it once, and nothing else in the process refers to it.
    let stream = unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) };
    stream
        .set_nonblocking(true)
        .map_err(io("setting non-blocking"))?;
    Ok(stream)
}

#[derive(Debug)]
enum Source {
    Path(PathBuf),
    Inherited(Option<std::os::unix::net::UnixStream>),
    Given(Option<UnixStream>),
}

impl Source {
    /// The next connection, or `None` when a one-shot connection was already used.
    async fn connect(&mut self) -> Option<Result<UnixStream>> {
        match self {
            Source::Path(path) => {
                Some(
                    UnixStream::connect(&*path)
                        .await
                        .map_err(|source| Error::Connect {
                            path: path.clone(),
                            source,
                        }),
                )
            }
            Source::Inherited(s) => s.take().map(|s| UnixStream::from_std(s).map_err(Error::Io)),
            Source::Given(s) => s.take().map(Ok),
        }
    }
}

/// Runs a [`NriPlugin`] against the runtime: register, serve, reconnect. Made by [`RunnerBuilder`].
pub struct Runner<P> {
    dispatcher: Arc<Dispatcher<P>>,
    name: String,
    index: String,
    reconnect: bool,
    backoff: Backoff,
    registration_timeout: Duration,
    source: Source,
    state: tokio::sync::watch::Sender<ConnectionState>,
}

impl<P> std::fmt::Debug for Runner<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("name", &self.name)
            .field("index", &self.index)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

type Pending = Arc<Mutex<HashMap<u32, oneshot::Sender<Vec<u8>>>>>;

impl<P: NriPlugin> Runner<P> {
    /// The plugin this runner serves.
    pub fn plugin(&self) -> &Arc<P> {
        self.dispatcher.plugin()
    }

    /// A receiver that sees every change of the connection: registered, disconnected (and
    /// why), reconnecting. Take it before [`Self::run`], which consumes the runner.
    pub fn watch_connection(&self) -> tokio::sync::watch::Receiver<ConnectionState> {
        self.state.subscribe()
    }

    /// The socket path this runner connects to, if it connects by path.
    pub fn socket(&self) -> Option<&Path> {
        match &self.source {
            Source::Path(p) => Some(p),
            _ => None,
        }
    }

    /// Serves until the connection ends for good: forever when reconnecting (drop the future to
    /// stop), otherwise until the runtime closes the connection (`Ok`) or it fails (`Err`).
    pub async fn run(mut self) -> Result<()> {
        let mut attempt = 0u32;
        loop {
            self.state.send_if_modified(|s| {
                let changed = *s != ConnectionState::Connecting;
                *s = ConnectionState::Connecting;
                changed
            });
            let Some(conn) = self.source.connect().await else {
                return Ok(());
            };
            let result = match conn {
                Ok(stream) => {
                    let (registered, r) = self.serve(stream).await;
                    if registered {
                        attempt = 0;
                    }
                    r
                }
                Err(e) => Err(e),
            };
            self.state.send_replace(ConnectionState::Disconnected {
                error: match &result {
                    Ok(()) => "the runtime closed the connection".into(),
                    Err(e) => dranet_util::error_chain(e),
                },
            });
            if !self.reconnect {
                return match result {
                    Err(Error::Closed) => Ok(()),
                    other => other,
                };
            }
            match &result {
                Err(Error::Connect { .. }) => {
                    tracing::debug!(error = %DisplayResult(&result), "NRI runtime not reachable, retrying")
                }
                _ => {
                    tracing::warn!(error = %DisplayResult(&result), "NRI connection ended, reconnecting")
                }
            }
            tokio::time::sleep(self.backoff.delay(attempt)).await;
            attempt = attempt.saturating_add(1);
        }
    }

    /// Serves one connection. Returns whether registration succeeded, and why the connection ended.
    async fn serve(&self, stream: UnixStream) -> (bool, Result<()>) {
        let (rd, wr) = stream.into_split();
        let (tx, rx) = mpsc::channel::<Vec<u8>>(64);
        let pending: Pending = Arc::default();
        let next_stream = AtomicU32::new(1);
        let conn = Arc::new(ConnState::default());
        let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
        let mut registered = false;
        let register = async {
            let req = pb::RegisterPluginRequest {
                plugin_name: self.name.clone(),
                plugin_idx: self.index.clone(),
                nri_version: String::new(),
            };
            call(
                &tx,
                &pending,
                &next_stream,
                "RegisterPlugin",
                req.encode_to_vec(),
                self.registration_timeout,
            )
            .await?;
            tracing::info!(name = %self.name, index = %self.index, "registered with the NRI runtime");
            registered = true;
            self.state.send_replace(ConnectionState::Registered);
            std::future::pending::<Result<()>>().await
        };
        let result = tokio::select! {
            r = read_loop(rd, &self.dispatcher, &conn, &tx, &pending, &in_flight) => r,
            r = write_loop(wr, rx) => r,
            r = register => r,
        };
        (registered, result)
    }
}

async fn write_loop(mut wr: OwnedWriteHalf, mut rx: mpsc::Receiver<Vec<u8>>) -> Result<()> {
    while let Some(buf) = rx.recv().await {
        wr.write_all(&buf).await?;
    }
    Err(Error::Closed)
}

async fn read_loop<P: NriPlugin>(
    mut rd: OwnedReadHalf,
    dispatcher: &Arc<Dispatcher<P>>,
    conn: &Arc<ConnState>,
    tx: &mpsc::Sender<Vec<u8>>,
    pending: &Pending,
    in_flight: &Arc<tokio::sync::Semaphore>,
) -> Result<()> {
    let mut demux = Demux::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = rd.read(&mut buf).await?;
        if n == 0 {
            demux.finish()?;
            return Err(Error::Closed);
        }
        demux.push(&buf[..n]);
        while let Some((channel, msg)) = demux.next_message()? {
            match (channel, msg.kind) {
                (Channel::Plugin, MessageType::Request) => {
                    // Back-pressure: with MAX_IN_FLIGHT calls unanswered (the runtime stopped
                    // reading answers, or floods us), stop reading until one finishes.
                    let permit = Arc::clone(in_flight)
                        .acquire_owned()
                        .await
                        .map_err(|_| Error::Closed)?;
                    spawn_handler(dispatcher.clone(), conn.clone(), tx.clone(), msg, permit);
                }
                (Channel::Runtime, MessageType::Response) => {
                    let waiter = crate::service::lock(pending).remove(&msg.stream_id);
                    match waiter {
                        // The caller may have timed out meanwhile; nothing else wants the answer.
                        Some(w) => drop(w.send(msg.body)),
                        None => tracing::debug!(
                            stream = msg.stream_id,
                            "late or unknown runtime answer"
                        ),
                    }
                }
                (channel, kind) => {
                    return Err(Error::UnexpectedMessage {
                        what: format!("{kind:?} message on the {channel:?} channel"),
                    });
                }
            }
        }
    }
}

/// Runs one call on its own task so the reader keeps going, and so the handler finishes (and its
/// state changes land) even if the runtime stops waiting for it.
fn spawn_handler<P: NriPlugin>(
    dispatcher: Arc<Dispatcher<P>>,
    conn: Arc<ConnState>,
    tx: mpsc::Sender<Vec<u8>>,
    msg: Message,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    tokio::spawn(async move {
        // Held until the answer is handed to the writer.
        let _permit = permit;
        let resp = match Request::decode(&msg.body) {
            Ok(req) => {
                let method = req.method.clone();
                // An inner task turns a panicking handler into an error answer instead of silence.
                let handled =
                    tokio::spawn(async move { dispatcher.handle(&conn, &req).await }).await;
                handled.unwrap_or_else(|e| {
                    tracing::error!(%method, error = %e, "NRI handler panicked");
                    Response::Err {
                        code: code::UNKNOWN,
                        message: format!("plugin handler for {method} panicked"),
                    }
                })
            }
            Err(e) => Response::Err {
                code: code::INVALID_ARGUMENT,
                message: e.to_string(),
            },
        };
        let body = resp.encode_to_vec();
        let out = match frame_message(Channel::Plugin, msg.stream_id, MessageType::Response, body) {
            Ok(out) => out,
            Err(e) => {
                tracing::error!(error = %e, "NRI answer cannot be sent");
                return;
            }
        };
        // The connection may be gone; the handler's work is done either way.
        let _ = tx.send(out).await;
    });
}

/// Calls a runtime-service method and waits for its answer.
async fn call(
    tx: &mpsc::Sender<Vec<u8>>,
    pending: &Pending,
    next_stream: &AtomicU32,
    method: &'static str,
    payload: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>> {
    // ttrpc clients number their streams with odd ids.
    let stream_id = next_stream.fetch_add(2, Ordering::Relaxed);
    let (otx, orx) = oneshot::channel();
    crate::service::lock(pending).insert(stream_id, otx);
    let req = Request {
        service: RUNTIME_SERVICE.into(),
        method: method.into(),
        payload,
        timeout_nano: i64::try_from(timeout.as_nanos()).unwrap_or(i64::MAX),
    };
    let out = frame_message(
        Channel::Runtime,
        stream_id,
        MessageType::Request,
        req.encode_to_vec(),
    )?;
    tx.send(out).await.map_err(|_| Error::Closed)?;
    let body = match tokio::time::timeout(timeout, orx).await {
        Ok(Ok(body)) => body,
        Ok(Err(_)) => return Err(Error::Closed),
        Err(_) => {
            crate::service::lock(pending).remove(&stream_id);
            return Err(Error::Timeout { method, timeout });
        }
    };
    match Response::decode(&body)? {
        Response::Ok(payload) => Ok(payload),
        Response::Err { code, message } => Err(Error::Status {
            method,
            code,
            message,
        }),
    }
}

/// Shows why a connection ended, for logs.
struct DisplayResult<'a>(&'a Result<()>);

impl std::fmt::Display for DisplayResult<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Ok(()) => f.write_str("closed"),
            Err(e) => write!(f, "{e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::IntoRawFd;

    #[test]
    fn inherited_socket_values_are_checked_before_use() {
        for (value, why) in [
            ("abc", "not a file descriptor"),
            ("1", "stdin/stdout/stderr"),
            ("999999", "no such open descriptor"),
        ] {
            let err = inherited_socket(value).unwrap_err().to_string();
            assert!(err.contains(why), "{value}: {err}");
        }
        let file = tempfile::tempfile().unwrap();
        let fd = file.into_raw_fd();
        let err = inherited_socket(&fd.to_string()).unwrap_err().to_string();
        assert!(err.contains("not a socket"), "{err}");
        // SAFETY: `fd` came from `into_raw_fd` above and is owned by nothing else.
        drop(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) });
    }

    #[test]
    fn an_inherited_socket_is_taken_over() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = a.into_raw_fd();
        // The stream now owns `fd` and closes it on drop.
        let s = inherited_socket(&fd.to_string()).unwrap();
        use std::io::{Read, Write};
        (&s).write_all(b"x").unwrap();
        let mut buf = [0u8; 1];
        (&b).read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"x");
    }
}
