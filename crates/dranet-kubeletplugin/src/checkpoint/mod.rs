//! Crash-safe record of prepared claims, and of the driver's own records ([`DriverRecords`]):
//! [`Checkpoint`], mirrored to a file on every change.
//!
//! Writes go to a temporary file that is fsynced and then renamed over the old one (and the
//! directory fsynced), so a crash leaves either the old or the new file. The CRC and length of
//! the file's format (see [`encode`]) catch what rename cannot: a file truncated by a broken disk
//! or edited by hand. Such a file is reported, never trusted blindly; see [`CheckpointPolicy`].

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use dranet_util::{AtomicWrite, AtomicWriteStep};
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::flock;
use crate::metrics::{Metrics, NoMetrics};

mod format;

mod records;

pub use format::{CheckpointDefect, CheckpointEntry, Contents, Phase, decode, encode};
pub use records::{DriverRecords, MAX_RECORD_KEY_BYTES};

/// What to do when the checkpoint file exists but fails its checks at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CheckpointPolicy {
    /// Refuse to start with [`Error::CheckpointCorrupt`]: an operator looks at the file first.
    #[default]
    Refuse,
    /// Move the file aside (`<name>.corrupt-<unix seconds>`), log it, and start empty; unprepare
    /// then calls the driver with [`crate::PrepareState::Unknown`] for claims it knows nothing about.
    Quarantine,
}

/// What [`Checkpoint::open`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadOutcome {
    /// No file yet.
    Fresh,
    /// The file passed its checks and holds this many claims (and any number of driver records).
    Loaded(usize),
    /// The file failed its checks and was moved to `moved_to`.
    Quarantined {
        /// Where the untrusted file now is.
        moved_to: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
}

type Change = Box<dyn FnOnce(&mut Contents) + Send>;

/// Changes waiting for the writer, and whether a writer is running.
#[derive(Default)]
struct Pending {
    queue: Vec<(Change, oneshot::Sender<Result<()>>)>,
    writing: bool,
}

struct Inner {
    path: PathBuf,
    /// In shared mode (a rolling update: two plugin processes use one file) this is only a cache:
    /// the file is the truth, re-read under `<path>.lock` for every change and on every lookup.
    contents: Mutex<Contents>,
    pending: Mutex<Pending>,
    metrics: Arc<dyn Metrics>,
    shared: bool,
    /// Shared mode: the identity of the file `contents` was read from or written as. A lookup
    /// re-reads the file only when it changed (the other instance wrote it), so N lookups cost
    /// N `stat`s, not N parses of a file that grows with N.
    seen: Mutex<Option<FileId>>,
}

/// What changes whenever the checkpoint file is replaced: its inode and times (every write is a
/// rename), and its header line, which carries the body's CRC-32 and length, since a freed inode
/// number can come back within one tick of the file system's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    mtime_ns: i128,
    header: [u8; 64],
}

fn file_id(path: &Path) -> Option<FileId> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let mut f = File::open(path).ok()?;
    let m = f.metadata().ok()?;
    let mut header = [0u8; 64];
    let mut n = 0;
    while n < header.len() {
        match f.read(&mut header[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(_) => return None,
        }
    }
    Some(FileId {
        dev: m.dev(),
        ino: m.ino(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        header,
    })
}

impl Inner {
    /// The writer: applies every change queued so far to a copy of the map, writes the copy once,
    /// makes it current only if the write succeeded, and answers each change's caller. Changes
    /// that arrive meanwhile form the next batch, so N concurrent claims cost about two writes,
    /// not N.
    fn drain(&self) {
        // After a panic below, let a later change start a new writer; the changes queued now fail
        // (their senders are dropped) rather than wait forever.
        struct OnPanic<'a>(&'a Inner);
        impl Drop for OnPanic<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    let mut p = self
                        .0
                        .pending
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    p.writing = false;
                    p.queue.clear();
                }
            }
        }
        let _on_panic = OnPanic(self);
        loop {
            let batch = {
                let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                if p.queue.is_empty() {
                    // Under the same lock as the check: a change queued after this starts its own
                    // writer, and one queued before it is in this batch. (Resetting the flag after
                    // releasing the lock once dropped a change queued in between.)
                    p.writing = false;
                    return;
                }
                std::mem::take(&mut p.queue)
            };
            let start = Instant::now();
            let mut current = self.contents.lock().unwrap_or_else(PoisonError::into_inner);
            // Held until the write is done: the other instance's changes are neither lost nor
            // overwritten.
            let (_file_lock, base) = if self.shared {
                let seen = *self.seen.lock().unwrap_or_else(PoisonError::into_inner);
                match flock::lock(&lock_path(&self.path)).and_then(|l| {
                    // Unchanged since we last read or wrote it: what we hold is the file.
                    if seen.is_some() && file_id(&self.path) == seen {
                        Ok((Some(l), current.clone()))
                    } else {
                        read_contents(&self.path).map(|c| (Some(l), c))
                    }
                }) {
                    Ok(v) => v,
                    Err(e) => {
                        for (_, tx) in batch {
                            let _ = tx.send(Err(e.duplicate()));
                        }
                        continue;
                    }
                }
            } else {
                (None, current.clone())
            };
            let mut next = base.clone();
            let mut waiters = Vec::with_capacity(batch.len());
            for (change, tx) in batch {
                change(&mut next);
                waiters.push(tx);
            }
            if next == base {
                *current = next;
                drop(current);
                for tx in waiters {
                    let _ = tx.send(Ok(()));
                }
                continue;
            }
            let result = write_file(&self.path, &next);
            if self.shared {
                // Still under the file lock: this identity is our own write's.
                *self.seen.lock().unwrap_or_else(PoisonError::into_inner) = if result.is_ok() {
                    file_id(&self.path)
                } else {
                    None
                };
            }
            self.metrics
                .checkpoint_write(result.is_ok(), start.elapsed());
            match result {
                Ok(()) => {
                    *current = next;
                    drop(current);
                    for tx in waiters {
                        let _ = tx.send(Ok(()));
                    }
                }
                Err(e) => {
                    drop(current);
                    for tx in waiters {
                        let _ = tx.send(Err(e.duplicate()));
                    }
                }
            }
        }
    }
}

/// The checkpoint: an in-memory map of claim UID to [`CheckpointEntry`] and the driver's records,
/// mirrored to disk on every change. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Checkpoint {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("path", &self.inner.path)
            .finish()
    }
}

impl Checkpoint {
    /// Opens (or starts) the checkpoint at `path`, creating its directory.
    pub fn open(path: impl Into<PathBuf>, policy: CheckpointPolicy) -> Result<(Self, LoadOutcome)> {
        Self::open_with_metrics(path, policy, Arc::new(NoMetrics), false)
    }

    pub(crate) fn open_with_metrics(
        path: impl Into<PathBuf>,
        policy: CheckpointPolicy,
        metrics: Arc<dyn Metrics>,
        shared: bool,
    ) -> Result<(Self, LoadOutcome)> {
        let path = path.into();
        if let Some(dir) = path.parent() {
            private_dir(dir).map_err(|e| Error::io("create checkpoint directory", dir, e))?;
        }
        // A leftover temporary file is an unfinished write from a crash: the real file is intact.
        // (With a second instance running, the file may be its write in progress: leave it.)
        if !shared {
            let _ = fs::remove_file(tmp_path(&path));
        }
        let (contents, outcome) = match fs::read(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                (Contents::default(), LoadOutcome::Fresh)
            }
            Err(e) => return Err(Error::io("read checkpoint", &path, e)),
            Ok(bytes) => match decode(&bytes) {
                Ok(contents) => {
                    let n = contents.claims.len();
                    (contents, LoadOutcome::Loaded(n))
                }
                Err(source) => match policy {
                    CheckpointPolicy::Refuse => {
                        return Err(Error::CheckpointCorrupt { path, source });
                    }
                    CheckpointPolicy::Quarantine => {
                        let moved_to = dranet_util::quarantine(&path)
                            .map_err(|e| Error::io("move corrupt checkpoint aside", &path, e))?;
                        let reason = source.to_string();
                        tracing::error!(
                            path = %path.display(),
                            moved_to = %moved_to.display(),
                            %reason,
                            "checkpoint failed its checks; moved aside, starting with no record of prepared claims or driver records"
                        );
                        (
                            Contents::default(),
                            LoadOutcome::Quarantined { moved_to, reason },
                        )
                    }
                },
            },
        };
        let inner = Inner {
            path,
            contents: Mutex::new(contents),
            pending: Mutex::new(Pending::default()),
            metrics,
            shared,
            seen: Mutex::new(None),
        };
        Ok((
            Self {
                inner: Arc::new(inner),
            },
            outcome,
        ))
    }

    /// The file this checkpoint lives in.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The entry for a claim UID, as this process last saw it.
    pub fn get(&self, uid: &str) -> Option<CheckpointEntry> {
        self.lock().claims.get(uid).cloned()
    }

    /// In shared mode, reads the file again if the other instance replaced it since this process
    /// last read or wrote it. The rename that replaces the file is atomic, so a read needs no
    /// lock.
    fn reread(&self) -> Result<()> {
        if !self.inner.shared {
            return Ok(());
        }
        // The identity is taken before the read: if the file is replaced in between, the next
        // lookup sees a different identity and reads again.
        let id = file_id(&self.inner.path);
        let seen = *self
            .inner
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if id.is_some() && id == seen {
            return Ok(());
        }
        let contents = read_contents(&self.inner.path)?;
        *self.lock() = contents;
        *self
            .inner
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = id;
        Ok(())
    }

    /// The entry for a claim UID as it is now: in shared mode re-read from the file, which the
    /// other instance may have changed (the file check runs on a blocking thread, not on the
    /// runtime's workers).
    pub(crate) async fn lookup_async(&self, uid: &str) -> Result<Option<CheckpointEntry>> {
        self.reread_async().await?;
        Ok(self.get(uid))
    }

    /// [`Checkpoint::reread`] off the runtime's workers.
    async fn reread_async(&self) -> Result<()> {
        if !self.inner.shared {
            return Ok(());
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.reread())
            .await
            .map_err(|_| Error::Task("checkpoint lookup"))?
    }

    /// All entries, by claim UID.
    pub fn entries(&self) -> BTreeMap<String, CheckpointEntry> {
        self.lock().claims.clone()
    }

    /// All entries as they are now: in shared mode re-read from the file first (blocking).
    pub(crate) fn entries_now(&self) -> Result<BTreeMap<String, CheckpointEntry>> {
        self.reread()?;
        Ok(self.entries())
    }

    /// [`Checkpoint::entries_now`] off the runtime's workers.
    pub(crate) async fn entries_async(&self) -> Result<BTreeMap<String, CheckpointEntry>> {
        self.reread_async().await?;
        Ok(self.entries())
    }

    /// Records `entry` (keyed by its claim UID) and waits until it is on disk.
    pub async fn put(&self, entry: CheckpointEntry) -> Result<()> {
        self.update(move |c| {
            c.claims.insert(entry.claim.uid.clone(), entry);
        })
        .await
    }

    /// Forgets a claim and waits until that is on disk. Forgetting an unknown claim writes nothing.
    pub async fn remove(&self, uid: &str) -> Result<()> {
        if !self.inner.shared && !self.lock().claims.contains_key(uid) {
            return Ok(());
        }
        let uid = uid.to_string();
        self.update(move |c| {
            c.claims.remove(&uid);
        })
        .await
    }

    /// The driver's records kept in this checkpoint.
    pub fn records(&self) -> DriverRecords {
        DriverRecords::new(self.clone())
    }

    /// Applies `change` to a copy of the map, writes the copy, and only then makes it current, so
    /// memory never claims what the disk does not have. Concurrent changes share one write.
    async fn update(&self, change: impl FnOnce(&mut Contents) + Send + 'static) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        let start_writer = {
            let mut p = self
                .inner
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            p.queue.push((Box::new(change), tx));
            !std::mem::replace(&mut p.writing, true)
        };
        if start_writer {
            let inner = Arc::clone(&self.inner);
            tokio::task::spawn_blocking(move || inner.drain());
        }
        rx.await.map_err(|_| Error::Task("checkpoint write"))?
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Contents> {
        // A panic elsewhere while holding the lock leaves the map as it was before that change,
        // because changes are applied by swapping in a fully written copy.
        self.inner
            .contents
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

fn lock_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".lock");
    PathBuf::from(s)
}

/// What the file holds now; no file holds nothing. A file that fails its checks at run time is
/// an error for the call that needed it, never silently replaced.
fn read_contents(path: &Path) -> Result<Contents> {
    match fs::read(path) {
        Ok(bytes) => decode(&bytes).map_err(|source| Error::CheckpointCorrupt {
            path: path.to_path_buf(),
            source,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Contents::default()),
        Err(e) => Err(Error::io("read checkpoint", path, e)),
    }
}

fn write_file(path: &Path, contents: &Contents) -> Result<()> {
    AtomicWrite::new(path)
        .temp(tmp_path(path))
        // A temporary file left by an older version may have another mode; the claims' state is
        // for root only, whatever the umask.
        .exact_mode(0o600)
        .write(&encode(contents))
        .map_err(|e| {
            let (step, at, source) = e.into_parts();
            let action = match step {
                AtomicWriteStep::CreateTemp => "create checkpoint temporary file",
                AtomicWriteStep::SetMode => "set checkpoint permissions",
                AtomicWriteStep::Write => "write checkpoint",
                AtomicWriteStep::SyncFile => "fsync checkpoint",
                AtomicWriteStep::Rename => "rename checkpoint into place",
                AtomicWriteStep::OpenDir => "open checkpoint directory",
                AtomicWriteStep::SyncDir => "fsync checkpoint directory",
            };
            Error::io(action, at, source)
        })
}

/// Creates `dir` and its missing parents with mode 0700 (before the umask, which can only
/// remove bits); directories that exist keep theirs.
pub(crate) fn private_dir(dir: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Most nesting of a driver's prepare state (the checkpoint's JSON reader stops at 128 levels,
/// and the checkpoint wraps the state in a few of its own).
pub const MAX_STATE_DEPTH: usize = 100;

/// Nesting depth of a JSON value, without recursion (the value may be deep enough to overflow
/// the stack).
pub(crate) fn json_depth(v: &serde_json::Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        match v {
            serde_json::Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            serde_json::Value::Object(o) => stack.extend(o.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{ClaimRef, Prepared, PreparedDevice};

    pub(super) fn entry(uid: &str, phase: Phase) -> CheckpointEntry {
        CheckpointEntry {
            claim: ClaimRef {
                namespace: "ns".into(),
                name: format!("c-{uid}"),
                uid: uid.into(),
            },
            phase,
            prepared: (phase == Phase::Prepared).then(|| Prepared {
                devices: vec![PreparedDevice {
                    requests: vec!["nic".into()],
                    pool: "node1".into(),
                    device: "eth1".into(),
                    cdi_device_ids: vec!["example.com/net=eth1".into()],
                    share_id: None,
                    metadata: None,
                }],
                state: Some(serde_json::json!({"netns": "/proc/1/ns/net"})),
            }),
            pod_claim_name: None,
        }
    }

    #[tokio::test]
    async fn round_trip_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/checkpoint");
        let (cp, outcome) = Checkpoint::open(&path, CheckpointPolicy::Refuse).unwrap();
        assert_eq!(outcome, LoadOutcome::Fresh);
        cp.put(entry("a", Phase::Prepared)).await.unwrap();
        cp.put(entry("b", Phase::Preparing)).await.unwrap();
        cp.remove("nonexistent").await.unwrap();
        let (again, outcome) = Checkpoint::open(&path, CheckpointPolicy::Refuse).unwrap();
        assert_eq!(outcome, LoadOutcome::Loaded(2));
        assert_eq!(again.get("a"), Some(entry("a", Phase::Prepared)));
        assert_eq!(again.get("b").map(|e| e.phase), Some(Phase::Preparing));
        again.remove("a").await.unwrap();
        let (third, _) = Checkpoint::open(&path, CheckpointPolicy::Refuse).unwrap();
        assert!(third.get("a").is_none());
        assert!(!tmp_path(&path).exists());
    }

    #[tokio::test]
    async fn edited_file_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let (cp, _) = Checkpoint::open(&path, CheckpointPolicy::Refuse).unwrap();
        cp.put(entry("a", Phase::Prepared)).await.unwrap();
        let text = fs::read_to_string(&path).unwrap().replace("eth1", "eth2");
        fs::write(&path, text).unwrap();
        let err = Checkpoint::open(&path, CheckpointPolicy::Refuse).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("checksum mismatch"), "{msg}");
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        // Refusing must not destroy the evidence.
        assert!(path.exists());
    }

    #[tokio::test]
    async fn torn_file_is_quarantined_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let (cp, _) = Checkpoint::open(&path, CheckpointPolicy::Refuse).unwrap();
        cp.put(entry("a", Phase::Prepared)).await.unwrap();
        let bytes = fs::read(&path).unwrap();
        fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
        let (cp, outcome) = Checkpoint::open(&path, CheckpointPolicy::Quarantine).unwrap();
        match outcome {
            LoadOutcome::Quarantined { moved_to, reason } => {
                assert!(reason.contains("torn write"), "{reason}");
                assert_eq!(
                    fs::read(&moved_to).unwrap(),
                    bytes[..bytes.len() - 10].to_vec()
                );
            }
            other => panic!("expected quarantine, got {other:?}"),
        }
        assert!(cp.entries().is_empty());
        assert!(!path.exists());
    }

    #[test]
    fn two_quarantines_in_one_second_keep_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let mut moved = Vec::new();
        for garbage in ["first torn file", "second torn file"] {
            fs::write(&path, garbage).unwrap();
            let (_, outcome) = Checkpoint::open(&path, CheckpointPolicy::Quarantine).unwrap();
            match outcome {
                LoadOutcome::Quarantined { moved_to, .. } => moved.push(moved_to),
                other => panic!("expected quarantine, got {other:?}"),
            }
        }
        assert_ne!(moved[0], moved[1]);
        assert_eq!(fs::read_to_string(&moved[0]).unwrap(), "first torn file");
        assert_eq!(fs::read_to_string(&moved[1]).unwrap(), "second torn file");
    }

    #[derive(Default)]
    struct CountWrites(std::sync::atomic::AtomicUsize);

    impl Metrics for CountWrites {
        fn checkpoint_write(&self, _ok: bool, _elapsed: std::time::Duration) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_changes_share_writes_and_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let writes = Arc::new(CountWrites::default());
        let (cp, _) = Checkpoint::open_with_metrics(
            &path,
            CheckpointPolicy::Refuse,
            Arc::clone(&writes) as Arc<dyn Metrics>,
            false,
        )
        .unwrap();
        let uids: Vec<String> = (0..32).map(|i| format!("u{i}")).collect();
        let results =
            futures::future::join_all(uids.iter().map(|u| cp.put(entry(u, Phase::Prepared)))).await;
        assert!(results.iter().all(Result::is_ok));
        let n = writes.0.load(std::sync::atomic::Ordering::SeqCst);
        assert!(n < 32, "32 concurrent changes took {n} writes");
        let (again, outcome) = Checkpoint::open(&path, CheckpointPolicy::Refuse).unwrap();
        assert_eq!(outcome, LoadOutcome::Loaded(32));
        for u in &uids {
            assert!(again.get(u).is_some(), "{u} missing");
        }
        // And the writer restarts for later changes.
        cp.remove("u0").await.unwrap();
        assert!(cp.get("u0").is_none());
    }

    #[tokio::test]
    async fn back_to_back_changes_all_land() {
        // Each change is queued just as the previous writer finishes: the hand-over between
        // writers must never drop a queued change.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let (cp, _) = Checkpoint::open(&path, CheckpointPolicy::Refuse).unwrap();
        for i in 0..300 {
            let mut e = entry("a", Phase::Prepared);
            e.claim.name = format!("c-{i}");
            cp.put(e)
                .await
                .unwrap_or_else(|err| panic!("change {i}: {err}"));
        }
        let (again, _) = Checkpoint::open(&path, CheckpointPolicy::Refuse).unwrap();
        assert_eq!(again.get("a").unwrap().claim.name, "c-299");
    }

    #[tokio::test]
    async fn failed_write_leaves_memory_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let (cp, _) = Checkpoint::open(&path, CheckpointPolicy::Refuse).unwrap();
        // A directory where the temporary file should go makes the write fail.
        fs::create_dir(tmp_path(&path)).unwrap();
        let err = cp.put(entry("a", Phase::Prepared)).await.unwrap_err();
        assert!(err.to_string().contains("checkpoint"), "{err}");
        assert!(cp.get("a").is_none());
    }
}
