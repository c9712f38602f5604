//! Prepare and unprepare, independent of the gRPC API version: claim lookup and checks, per-claim
//! serialization, checkpointing, and the calls into the [`Driver`].

use std::collections::HashMap;
use std::fs::File;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

use futures::future::join_all;

use crate::api::KubeApi;
use crate::checkpoint::{Checkpoint, CheckpointEntry, MAX_STATE_DEPTH, Phase, json_depth};
use crate::driver::{
    ClaimRef, ClaimToPrepare, ClaimToUnprepare, Driver, PrepareState, Prepared, PreparedDevice,
};
use crate::error::{Error, Result};
use crate::flock;
use crate::metadata::{Metadata, POD_CLAIM_NAME_ANNOTATION};
use crate::metrics::Metrics;
use dranet_util::NamedLocks;

pub(crate) struct NodeService<D, A> {
    pub driver: Arc<D>,
    pub api: Arc<A>,
    pub driver_name: String,
    pub checkpoint: Checkpoint,
    /// False when the checkpoint was set aside at start: an unknown claim may then have been
    /// prepared before, and unprepare must ask the driver to clean up.
    pub checkpoint_trusted: bool,
    pub metrics: Arc<dyn Metrics>,
    /// One lock per claim UID (device metadata updates take it too).
    locks: Arc<NamedLocks>,
    /// Rolling updates: where the per-claim lock files live that serialize calls for one claim
    /// across the two instances.
    claim_lock_dir: Option<PathBuf>,
    /// How long a claim lookup may take.
    pub lookup_timeout: std::time::Duration,
    /// Bounds the claims running at once ([`MAX_CLAIMS_IN_FLIGHT`]).
    in_flight: Arc<tokio::sync::Semaphore>,
    /// Device metadata files and specs, when turned on.
    pub metadata: Option<Arc<Metadata>>,
}

impl<D: Driver, A: KubeApi> NodeService<D, A> {
    pub fn new(
        driver: Arc<D>,
        api: Arc<A>,
        driver_name: String,
        checkpoint: Checkpoint,
        checkpoint_trusted: bool,
        metrics: Arc<dyn Metrics>,
        claim_lock_dir: Option<PathBuf>,
    ) -> Self {
        Self {
            driver,
            api,
            driver_name,
            checkpoint,
            checkpoint_trusted,
            metrics,
            locks: Arc::new(NamedLocks::default()),
            claim_lock_dir,
            lookup_timeout: std::time::Duration::from_secs(20),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_CLAIMS_IN_FLIGHT)),
            metadata: None,
        }
    }

    /// The per-claim locks, shared with the device metadata updater.
    pub fn locks(&self) -> Arc<NamedLocks> {
        Arc::clone(&self.locks)
    }

    /// Prepares all claims concurrently; one result per distinct UID.
    pub async fn prepare(
        self: &Arc<Self>,
        claims: Vec<ClaimRef>,
    ) -> HashMap<String, Result<Vec<PreparedDevice>>> {
        self.each_claim(claims, "prepare", |this, c| async move {
            this.prepare_one(&c).await
        })
        .await
    }

    /// Unprepares all claims concurrently; one result per distinct UID.
    pub async fn unprepare(self: &Arc<Self>, claims: Vec<ClaimRef>) -> HashMap<String, Result<()>> {
        self.each_claim(claims, "unprepare", |this, c| async move {
            this.unprepare_one(&c).await
        })
        .await
    }

    /// Runs `work` for every claim, each in its own task: when the kubelet gives up on a call (its
    /// deadline passes or it restarts), the request future is dropped, but a driver half way
    /// through changing the host finishes and records the outcome, and the kubelet's retry gets
    /// that answer.
    async fn each_claim<T, F, Fut>(
        self: &Arc<Self>,
        claims: Vec<ClaimRef>,
        what: &'static str,
        work: F,
    ) -> HashMap<String, Result<T>>
    where
        T: Send + 'static,
        F: Fn(Arc<Self>, ClaimRef) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        // One answer per UID: a UID listed twice for the same claim is done once; listed for
        // two different claims, neither is acted on.
        let mut out: HashMap<String, Result<T>> = HashMap::new();
        let mut seen: HashMap<&str, &ClaimRef> = HashMap::new();
        let mut conflicting: Vec<String> = Vec::new();
        for c in &claims {
            if let Some(first) = seen.insert(&c.uid, c)
                && (first.namespace != c.namespace || first.name != c.name)
            {
                conflicting.push(c.uid.clone());
            }
        }
        let mut unique: Vec<ClaimRef> = Vec::new();
        for c in &claims {
            if conflicting.contains(&c.uid) {
                let names: Vec<String> = claims
                    .iter()
                    .filter(|x| x.uid == c.uid)
                    .map(|x| format!("{}/{}", x.namespace, x.name))
                    .collect();
                out.insert(
                    c.uid.clone(),
                    Err(Error::InvalidRequest(format!(
                        "claim UID {} is listed for different claims in one request ({})",
                        c.uid,
                        names.join(", ")
                    ))),
                );
            } else if !unique.iter().any(|u| u.uid == c.uid) {
                unique.push(c.clone());
            }
        }
        // At most MAX_CLAIMS_IN_FLIGHT claims run at once across all calls: a request with
        // thousands of claims queues instead of fanning out into as many tasks.
        let mut tasks = Vec::with_capacity(unique.len());
        for c in &unique {
            let Ok(permit) = Arc::clone(&self.in_flight).acquire_owned().await else {
                break;
            };
            let fut = work(Arc::clone(self), c.clone());
            tasks.push(tokio::spawn(async move {
                let _permit = permit;
                fut.await
            }));
        }
        let results = join_all(tasks).await;
        out.extend(unique.into_iter().zip(results).map(|(c, r)| {
            // A panic in the driver ends only that claim's task; the claim gets the error and
            // its checkpoint entry stays "preparing", so unprepare still cleans up.
            let r = r.unwrap_or_else(|_| {
                Err(Error::Driver {
                    action: what,
                    claim: c.to_string(),
                    source: "the driver panicked".into(),
                })
            });
            (c.uid, r)
        }));
        out
    }

    /// The lock file of a claim, held across instances (rolling updates only).
    async fn file_lock(&self, uid: &str) -> Result<Option<(PathBuf, File)>> {
        let Some(dir) = &self.claim_lock_dir else {
            return Ok(None);
        };
        let path = dir.join(format!("{uid}.lock"));
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || {
            crate::checkpoint::private_dir(&dir)
                .map_err(|e| Error::io("create lock directory", &dir, e))?;
            flock::lock(&path).map(|f| Some((path, f)))
        })
        .await
        .map_err(|_| Error::Task("claim lock"))?
    }

    async fn prepare_one(&self, c: &ClaimRef) -> Result<Vec<PreparedDevice>> {
        check_ref(c)?;
        let _guard = self.locks.lock(c.uid.as_str()).await;
        let file_lock = self.file_lock(&c.uid).await?;
        let result = self.prepare_locked(c).await;
        // A claim that failed may never be unprepared (the kubelet only unprepares what it
        // prepared): its lock file must not stay behind. Lock files are made again on demand.
        if result.is_err()
            && let Some((path, held)) = file_lock
        {
            flock::remove_locked(&path, held);
        }
        result
    }

    async fn prepare_locked(&self, c: &ClaimRef) -> Result<Vec<PreparedDevice>> {
        // Already prepared (a kubelet retry, or a reply lost in a crash): answer from the record
        // without asking the API server or the driver again.
        let recorded = self.checkpoint.lookup_async(&c.uid).await?;
        if let Some(e) = &recorded {
            same_claim(c, &e.claim)?;
        }
        if let Some(CheckpointEntry {
            phase: Phase::Prepared,
            prepared: Some(p),
            ..
        }) = recorded
        {
            return Ok(p.devices);
        }
        let start = Instant::now();
        // Well inside the kubelet's own deadline for the call, so a hung API server ends in an
        // error the kubelet sees and retries, not in a claim lock held for minutes.
        let limit = self.lookup_timeout;
        let claim = tokio::time::timeout(limit, self.api.get_claim(&c.namespace, &c.name))
            .await
            .unwrap_or_else(|_| {
                Err(Error::ApiTransport {
                    action: format!("get ResourceClaim {c}"),
                    source: format!("no answer within {limit:?}").into(),
                })
            });
        self.metrics.claim_lookup(claim.is_ok(), start.elapsed());
        let claim = claim?;
        let actual = claim.metadata.uid.clone().unwrap_or_default();
        if actual != c.uid {
            return Err(Error::ClaimReplaced {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
                expected: c.uid.clone(),
                actual,
            });
        }
        let Some(devices) = claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .map(|a| a.devices.clone())
        else {
            return Err(Error::ClaimNotAllocated {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
            });
        };
        let devices = devices.unwrap_or_default();
        // Taken before the claim goes to the driver: the device metadata's container path
        // depends on it, and the checkpoint keeps it for a restart.
        let pod_claim_name = claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(POD_CLAIM_NAME_ANNOTATION))
            .cloned();
        let results: Vec<_> = devices
            .results
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r.driver == self.driver_name)
            .collect();
        let config: Vec<_> = devices
            .config
            .unwrap_or_default()
            .into_iter()
            .filter(|cfg| {
                cfg.opaque
                    .as_ref()
                    .is_some_and(|o| o.driver == self.driver_name)
            })
            .collect();

        // Recorded before the driver runs, so that a crash inside the driver still leads to an
        // unprepare that cleans up whatever it did.
        self.checkpoint
            .put(CheckpointEntry {
                claim: c.clone(),
                phase: Phase::Preparing,
                prepared: None,
                pod_claim_name: pod_claim_name.clone(),
            })
            .await?;
        let prepared = self
            .driver
            .prepare(ClaimToPrepare {
                claim_ref: c.clone(),
                claim,
                results,
                config,
            })
            .instrument(tracing::info_span!("prepare", claim = %c, claim_uid = %c.uid))
            .await
            .map_err(|source| Error::Driver {
                action: "prepare",
                claim: c.to_string(),
                source,
            })?;
        // What the checkpoint cannot read back must not be written: the claim fails here, and
        // its "preparing" record makes unprepare clean up what the driver did.
        if let Some(state) = &prepared.state {
            let depth = json_depth(state);
            if depth > MAX_STATE_DEPTH {
                return Err(Error::Driver {
                    action: "prepare",
                    claim: c.to_string(),
                    source: format!(
                        "the driver's prepare state nests {depth} levels deep; the checkpoint \
                         keeps at most {MAX_STATE_DEPTH}"
                    )
                    .into(),
                });
            }
        }
        let mut prepared = prepared;
        // Before the record: a retry answered from it must name the metadata's CDI IDs too.
        if let Some(m) = &self.metadata {
            m.prepared(c, pod_claim_name.as_deref(), &mut prepared)
                .await?;
        }
        let devices = prepared.devices.clone();
        self.checkpoint
            .put(CheckpointEntry {
                claim: c.clone(),
                phase: Phase::Prepared,
                prepared: Some(prepared),
                pod_claim_name,
            })
            .await?;
        Ok(devices)
    }

    async fn unprepare_one(&self, c: &ClaimRef) -> Result<()> {
        check_ref(c)?;
        let _guard = self.locks.lock(c.uid.as_str()).await;
        let file_lock = self.file_lock(&c.uid).await?;
        let recorded = self.checkpoint.lookup_async(&c.uid).await?;
        if let Some(e) = &recorded {
            same_claim(c, &e.claim)?;
        }
        let state = match recorded {
            Some(CheckpointEntry {
                phase: Phase::Prepared,
                prepared,
                ..
            }) => PrepareState::Prepared(prepared.unwrap_or_else(Prepared::default)),
            Some(CheckpointEntry {
                phase: Phase::Preparing,
                ..
            }) => PrepareState::Interrupted,
            // Never prepared here (or already unprepared): nothing to undo.
            None if self.checkpoint_trusted => {
                if let Some((path, held)) = file_lock {
                    flock::remove_locked(&path, held);
                }
                return Ok(());
            }
            None => PrepareState::Unknown,
        };
        self.driver
            .unprepare(ClaimToUnprepare {
                claim_ref: c.clone(),
                state,
            })
            .instrument(tracing::info_span!("unprepare", claim = %c, claim_uid = %c.uid))
            .await
            .map_err(|source| Error::Driver {
                action: "unprepare",
                claim: c.to_string(),
                source,
            })?;
        // Before the record goes: a failure here is retried by the kubelet's next unprepare.
        if let Some(m) = &self.metadata {
            m.unprepared(c).await?;
        }
        self.checkpoint.remove(&c.uid).await?;
        // The claim is gone for good: its lock file need not stay.
        if let Some((path, held)) = file_lock {
            flock::remove_locked(&path, held);
        }
        Ok(())
    }
}

/// Claims running at once in one plugin.
pub const MAX_CLAIMS_IN_FLIGHT: usize = 256;

/// A checkpoint entry found by UID must be the claim asked about.
fn same_claim(asked: &ClaimRef, recorded: &ClaimRef) -> Result<()> {
    if asked.namespace == recorded.namespace && asked.name == recorded.name {
        Ok(())
    } else {
        Err(Error::ClaimMismatch {
            uid: asked.uid.clone(),
            namespace: asked.namespace.clone(),
            name: asked.name.clone(),
            recorded_namespace: recorded.namespace.clone(),
            recorded_name: recorded.name.clone(),
        })
    }
}

fn check_ref(c: &ClaimRef) -> Result<()> {
    // The UID names a lock file in rolling updates; a kubelet sends UUIDs, never paths.
    if c.uid.contains('/') || c.uid.starts_with('.') {
        return Err(Error::InvalidRequest(format!(
            "claim {}/{} has an invalid uid {:?}",
            c.namespace, c.name, c.uid
        )));
    }
    for (field, value) in [
        ("uid", &c.uid),
        ("namespace", &c.namespace),
        ("name", &c.name),
    ] {
        if value.is_empty() {
            return Err(Error::InvalidRequest(format!(
                "claim {}/{} (uid {:?}) has an empty {field}",
                c.namespace, c.name, c.uid
            )));
        }
    }
    // Namespace and name go into API paths: only what Kubernetes allows in them (DNS-1123
    // labels and subdomains), so nothing needs escaping and nothing can change the path.
    let dns = |v: &str, max: usize, dots: bool| {
        v.len() <= max
            && v.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || (dots && b == b'.')
            })
    };
    if !dns(&c.namespace, 63, false) || !dns(&c.name, 253, true) {
        let show = |v: &str| v.chars().take(80).collect::<String>();
        return Err(Error::InvalidRequest(format!(
            "claim {:?}/{:?} (uid {:?}): namespace and name must be DNS-1123 names",
            show(&c.namespace),
            show(&c.name),
            show(&c.uid)
        )));
    }
    Ok(())
}
