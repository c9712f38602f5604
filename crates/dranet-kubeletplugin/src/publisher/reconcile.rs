//! The publishing loop: lists and watches our slices and our Node, plans and writes until
//! shutdown, retrying with backoff.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dranet_util::Backoff;
use futures::StreamExt;
use k8s_openapi::api::resource::v1::Device;
use tokio::sync::{Notify, watch};

use super::memory::Memory;
use super::plan::{PoolParams, plan_with};
use crate::api::{KubeApi, NodeEvent, SliceEvent};
use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// How long one sync pass (list and writes) may take before it is abandoned and retried.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// The publisher's default retry timing: 250 ms doubling up to 30 s.
pub(crate) const DEFAULT_BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(250), Duration::from_secs(30));

/// Settings of the publishing loop.
#[derive(Debug, Clone)]
pub(crate) struct PublisherConfig {
    pub node_name: String,
    pub driver_name: String,
    pub max_devices_per_slice: usize,
    pub resync: Duration,
    pub backoff: Backoff,
    /// Rolling updates: publish only while holding this lock file, so that an old and a new
    /// instance never rewrite each other's slices.
    pub exclusive: Option<std::path::PathBuf>,
}

/// Waits until this instance may publish: at once without a lock file, else when it holds the
/// lock (the other instance exited). `None` if shutdown came first.
async fn publisher_lock(
    path: Option<&std::path::Path>,
    shutdown: &mut watch::Receiver<bool>,
    state: &watch::Sender<PublishState>,
) -> Option<Option<std::fs::File>> {
    let Some(path) = path else {
        return Some(None);
    };
    let mut told = false;
    loop {
        let p = path.to_path_buf();
        let r = tokio::task::spawn_blocking(move || {
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| Error::io("create lock directory", dir, e))?;
            }
            crate::flock::try_lock(&p)
        })
        .await
        .unwrap_or(Err(Error::Task("publisher lock")));
        match r {
            Ok(Some(f)) => {
                if told {
                    tracing::info!("the other instance is gone; publishing ResourceSlices now");
                }
                return Some(Some(f));
            }
            Ok(None) if !told => {
                state.send_replace(PublishState::StandingBy);
                tracing::info!(lock = %path.display(), "another instance of this driver publishes ResourceSlices; standing by until it exits");
                told = true;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot take the publisher lock; retrying"),
        }
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return None,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {},
        }
    }
}

/// Where publishing stands; see [`crate::KubeletPlugin::watch_publish_state`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishState {
    /// No device list was published yet.
    NotStarted,
    /// Another instance of the driver holds the publisher lock (rolling update); this one
    /// publishes when it exits.
    StandingBy,
    /// The API server holds exactly the last published device list.
    Published {
        /// Devices published.
        devices: usize,
        /// The pool generation.
        generation: i64,
    },
    /// The last attempt failed and is retried with backoff: API server unreachable, the Node
    /// missing, access denied (RBAC), a conflict.
    Retrying {
        /// The error, with its causes.
        error: String,
        /// Failed attempts in a row.
        attempts: u32,
    },
    /// The API server refused the device list (e.g. 422 Invalid): it is not retried until the
    /// next publish.
    Refused {
        /// The error, with its causes.
        error: String,
    },
}

/// Runs until `shutdown` flips to true: publishes every device list sent on `devices` (nothing
/// until the first one), and repairs drift seen by the watch or the periodic resync. Shutdown
/// cancels whatever is in flight (an API call, a backoff wait) at once.
pub(crate) async fn run<A: KubeApi>(
    api: Arc<A>,
    cfg: PublisherConfig,
    mut devices: watch::Receiver<Option<Vec<Device>>>,
    mut shutdown: watch::Receiver<bool>,
    metrics: Arc<dyn Metrics>,
    state: watch::Sender<PublishState>,
) {
    let Some(_publisher_lock) =
        publisher_lock(cfg.exclusive.as_deref(), &mut shutdown, &state).await
    else {
        return;
    };
    state.send_if_modified(|s| {
        let was = *s == PublishState::StandingBy;
        if was {
            *s = PublishState::NotStarted;
        }
        was
    });
    let poke = Arc::new(Notify::new());
    let watcher = tokio::spawn(watch_loop(
        Arc::clone(&api),
        cfg.clone(),
        Arc::clone(&poke),
        shutdown.clone(),
    ));
    let node_watcher = tokio::spawn(node_watch_loop(
        Arc::clone(&api),
        cfg.clone(),
        Arc::clone(&poke),
        shutdown.clone(),
    ));
    let mut memory = Memory::default();
    let mut resync = tokio::time::interval(cfg.resync);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    'run: loop {
        if *shutdown.borrow() {
            break;
        }
        tokio::select! {
            r = shutdown.changed() => if r.is_err() { break } else { continue },
            r = devices.changed() => if r.is_err() { break },
            _ = poke.notified() => {},
            _ = resync.tick() => {},
        }
        let mut attempt = 0u32;
        loop {
            let Some(desired) = devices.borrow_and_update().clone() else {
                break;
            };
            let start = Instant::now();
            // A hung API server must not stall publishing forever: give up and retry. Shutdown
            // drops the sync, cancelling its API call.
            let sync = tokio::time::timeout(
                SYNC_TIMEOUT,
                sync_once(api.as_ref(), &cfg, &desired, &mut memory),
            );
            let result = tokio::select! {
                r = sync => r.unwrap_or_else(|_| {
                    Err(Error::ApiTransport {
                        action: "sync ResourceSlices".into(),
                        source: format!("no answer within {SYNC_TIMEOUT:?}").into(),
                    })
                }),
                _ = shutdown.wait_for(|s| *s) => break 'run,
            };
            match result {
                Ok((writes, generation)) => {
                    metrics.slice_sync(true, writes, start.elapsed());
                    if writes > 0 {
                        tracing::debug!(writes, "ResourceSlices published");
                    }
                    state.send_replace(PublishState::Published {
                        devices: desired.len(),
                        generation,
                    });
                    break;
                }
                // The driver's device list itself is unpublishable (e.g. a duplicate name, or
                // the API server's validation refuses it: 422): retrying the same list cannot
                // help, so wait for the next list (or the periodic resync).
                Err(e)
                    if matches!(e, Error::InvalidRequest(_) | Error::Config(_))
                        || e.api_code() == Some(422) =>
                {
                    metrics.slice_sync(false, 0, start.elapsed());
                    let error = dranet_util::error_chain(&e);
                    tracing::error!(%error, "cannot publish these devices; waiting for a corrected device list");
                    state.send_replace(PublishState::Refused { error });
                    break;
                }
                Err(e) => {
                    metrics.slice_sync(false, 0, start.elapsed());
                    let delay = if e.is_conflict() {
                        cfg.backoff.initial
                    } else {
                        cfg.backoff.delay(attempt)
                    };
                    let error = dranet_util::error_chain(&e);
                    tracing::warn!(%error, retry_in = ?delay, "publishing ResourceSlices failed");
                    attempt = attempt.saturating_add(1);
                    state.send_replace(PublishState::Retrying {
                        error,
                        attempts: attempt,
                    });
                    // A watch event (our slices changed, the Node appeared) ends the wait early:
                    // a re-created Node gets its slices at once, not after the backoff.
                    tokio::select! {
                        _ = shutdown.wait_for(|s| *s) => break 'run,
                        _ = tokio::time::sleep(delay) => {},
                        _ = poke.notified() => {},
                    }
                }
            }
        }
    }
    watcher.abort();
    node_watcher.abort();
}

/// Watches our Node and pokes the sync loop when it appears or is re-created (a new UID), so the
/// slices are republished with the right owner without waiting for a retry.
async fn node_watch_loop<A: KubeApi>(
    api: Arc<A>,
    cfg: PublisherConfig,
    poke: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut attempt = 0u32;
    let mut last_uid: Option<String> = None;
    loop {
        let result: Result<()> = async {
            let mut events = api.watch_node(&cfg.node_name).await?;
            attempt = 0;
            while let Some(ev) = events.next().await {
                match ev? {
                    NodeEvent::Present { uid } => {
                        if last_uid.as_deref() != Some(uid.as_str()) {
                            if last_uid.is_some() {
                                tracing::info!(node = %cfg.node_name, %uid, "the Node was re-created; republishing ResourceSlices");
                            }
                            last_uid = Some(uid);
                            poke.notify_one();
                        }
                    }
                    NodeEvent::Deleted => {
                        tracing::warn!(node = %cfg.node_name, "the Node was deleted; its ResourceSlices go with it until it is back");
                        last_uid = None;
                    }
                    NodeEvent::Bookmark => {}
                }
            }
            Ok(())
        }
        .await;
        // A watch the server ends normally is restarted after a short pause (never a hot loop).
        let delay = match result {
            Ok(()) => cfg.backoff.initial,
            Err(e) => {
                let d = cfg.backoff.delay(attempt);
                attempt = attempt.saturating_add(1);
                tracing::debug!(error = %e, retry_in = ?d, "Node watch failed");
                d
            }
        };
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(delay) => {},
        }
    }
}

async fn sync_once<A: KubeApi>(
    api: &A,
    cfg: &PublisherConfig,
    devices: &[Device],
    memory: &mut Memory,
) -> Result<(usize, i64)> {
    // Read every pass, not cached: a Node deleted and re-created under the same name has a new
    // UID, and slices owned by the old one would be garbage-collected as soon as we wrote them.
    let node_uid = api.get_node_uid(&cfg.node_name).await?;
    let params = PoolParams {
        node_name: cfg.node_name.clone(),
        driver_name: cfg.driver_name.clone(),
        node_uid: Some(node_uid),
        max_devices_per_slice: cfg.max_devices_per_slice,
    };
    let existing = api.list_slices(&cfg.node_name, &cfg.driver_name).await?;
    // Forget writes to slices that are gone: a slice re-created under the same name is new.
    memory.written.retain(|name, _| {
        existing
            .items
            .iter()
            .any(|s| s.metadata.name.as_deref() == Some(name))
    });
    let p = plan_with(devices, &existing.items, &params, &memory.written)?;
    let writes = p.writes();
    for d in &p.deletes {
        memory.written.remove(&d.name);
        match api.delete_slice(&d.name, &d.uid, &d.resource_version).await {
            Err(e) if e.is_not_found() => {}
            other => other?,
        }
    }
    for s in &p.updates {
        let stored = api.update_slice(s).await?;
        memory.record(s, &stored);
    }
    for s in &p.creates {
        let stored = api.create_slice(s).await?;
        memory.record(s, &stored);
    }
    Ok((writes, p.generation))
}

/// Lists and watches our slices, poking the sync loop on every change (including our own writes,
/// which then cost one list and no write).
async fn watch_loop<A: KubeApi>(
    api: Arc<A>,
    cfg: PublisherConfig,
    poke: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut attempt = 0u32;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let result: Result<()> = async {
            let list = api.list_slices(&cfg.node_name, &cfg.driver_name).await?;
            // Whatever happened while we were not watching counts as a change.
            poke.notify_one();
            let mut rv = list.resource_version;
            let mut events = api
                .watch_slices(&cfg.node_name, &cfg.driver_name, &rv)
                .await?;
            attempt = 0;
            while let Some(ev) = events.next().await {
                match ev? {
                    SliceEvent::Changed => poke.notify_one(),
                    SliceEvent::Bookmark(v) => rv = v,
                }
            }
            let _ = rv;
            Ok(())
        }
        .await;
        let delay = match result {
            // A normal end of a watch: start over at once.
            Ok(()) => Duration::ZERO,
            // 410 Gone: our resourceVersion is too old; list again at once.
            Err(e) if e.api_code() == Some(410) => Duration::ZERO,
            Err(e) => {
                let d = cfg.backoff.delay(attempt);
                attempt = attempt.saturating_add(1);
                tracing::debug!(error = %e, retry_in = ?d, "ResourceSlice watch failed");
                d
            }
        };
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(delay) => {},
        }
    }
}
