//! NRI's Synchronize: the pods that ran while the driver was away, given their devices or their
//! devices back; and pods added to a claim after its prepare.

use super::*;

impl NetworkDriver {
    /// What Synchronize does (after a daemon or runtime restart, or a reconnection): sandboxes
    /// in `live` keep their devices; everything given to sandboxes that are gone comes back to
    /// the host; and live sandboxes with prepared netdevs that nothing was attached to (they
    /// started while the runtime could not reach this plugin, which containerd allows) get them
    /// now, side by side. Their failures are in the answer, for the caller to report on the
    /// pods: they do not fail the Synchronize, which would only disconnect the plugin again.
    pub async fn synchronize_pods(&self, live: &[PodSandbox]) -> Result<Synchronized> {
        let owed = self.settle_gone(live).await?;
        let mut out = Synchronized::default();
        let results = futures::future::join_all(owed.iter().map(|p| self.start_pod(p))).await;
        for (pod, r) in owed.iter().zip(results) {
            match r {
                Ok(()) => {
                    tracing::info!(pod = %pod.qualified_name(), "pod started while the runtime could not reach this plugin: devices attached now");
                    out.attached.push(pod.id.clone());
                }
                Err(e) => {
                    tracing::error!(pod = %pod.qualified_name(), error = %e, "pod started while the runtime could not reach this plugin, and its devices cannot be attached");
                    out.failed.push((pod.id.clone(), e));
                }
            }
        }
        Ok(out)
    }

    /// The first half of [`NetworkDriver::synchronize_pods`]: what sandboxes that are gone
    /// held comes back to the host, live sandboxes never seen start are remembered, and the
    /// live sandboxes owed an attach are returned (for the caller to attach, as it times it).
    pub async fn settle_gone<'a>(&self, live: &'a [PodSandbox]) -> Result<Vec<&'a PodSandbox>> {
        let live_ids: HashSet<&str> = live.iter().map(|p| p.id.as_str()).collect();
        let recovery = self
            .podnet
            .recover(|e| live_ids.contains(e.owner.as_str()))
            .await?;
        let (children_removed, children_failed) = self
            .podnet
            .recover_children(|owner| live_ids.contains(owner))
            .await?;
        if !children_removed.is_empty() || !children_failed.is_empty() {
            tracing::info!(removed = ?children_removed, failed = children_failed.len(), "children of pods that went away");
        }
        self.restores_owed.store(
            recovery.failed.len() + children_failed.len(),
            Ordering::Relaxed,
        );
        if !recovery.restored.is_empty() || !recovery.failed.is_empty() {
            tracing::info!(restored = ?recovery.restored, gone = ?recovery.gone, failed = recovery.failed.len(), "links of pods that went away");
        }
        let dead: Vec<PodRecord> = lock(&self.state)
            .pods
            .values()
            .filter(|p| !live_ids.contains(p.sandbox_id.as_str()))
            .cloned()
            .collect();
        for mut p in dead {
            self.return_rdma(&mut p).await;
            lock(&self.state).pods.remove(&p.sandbox_id);
            self.store.remove_pod(&p.sandbox_id)?;
        }
        let held = self.held_links()?;
        let mut owed: Vec<&PodSandbox> = Vec::new();
        for pod in live {
            let claims = self.claims_of_pod(&pod.uid);
            if Self::unattached(&claims, pod, &held) {
                owed.push(pod);
                continue;
            }
            // A live sandbox we never saw start (this daemon was down): remember its namespace.
            let known = lock(&self.state).pods.contains_key(&pod.id);
            if !known && !claims.is_empty() {
                let r = PodRecord {
                    version: STORE_VERSION,
                    sandbox_id: pod.id.clone(),
                    uid: pod.uid.clone(),
                    pod: pod.qualified_name(),
                    netns: pod.netns_path().map(PathBuf::from),
                    rdma_moved: Vec::new(),
                    late_claims: Vec::new(),
                };
                if let Err(e) = self.store.put_pod(&r) {
                    tracing::warn!(pod = %r.pod, error = %e, "could not record the pod; it is kept in memory");
                }
                lock(&self.state).pods.insert(pod.id.clone(), r);
            }
        }
        self.synchronized.send_replace(true);
        Ok(owed)
    }

    /// Every (key, sandbox) the journals hold a link or child under.
    fn held_links(&self) -> Result<HashSet<(String, String)>> {
        Ok(self
            .podnet
            .journal()
            .entries()?
            .into_iter()
            .map(|e| (e.key, e.owner))
            .chain(
                self.podnet
                    .children()
                    .entries()?
                    .into_iter()
                    .map(|e| (e.key, e.owner)),
            )
            .collect())
    }

    /// Whether some netdev of `claims` is not attached to `pod`.
    fn unattached(
        claims: &[Arc<ClaimRecord>],
        pod: &PodSandbox,
        held: &HashSet<(String, String)>,
    ) -> bool {
        claims.iter().any(|c| {
            c.devices
                .iter()
                .any(|d| d.netdev.is_some() && !held.contains(&(d.key(&c.uid), pod.id.clone())))
        })
    }

    /// Whether `pod` has prepared netdevs not attached to it (its RunPodSandbox never came, or
    /// its attach was cut off): its containers must not start yet. Unreadable journals count
    /// as yes.
    pub fn owes_attach(&self, pod: &PodSandbox) -> bool {
        let claims = self.claims_of_pod(&pod.uid);
        if claims.is_empty() {
            return false;
        }
        match self.held_links() {
            Ok(held) => Self::unattached(&claims, pod, &held),
            Err(_) => true,
        }
    }

    /// The claims of `pod`'s namespace prepared for other pods that now list `pod` in their
    /// `reservedFor` (read from the API server): the kubelet does not prepare a claim twice on
    /// a node, so the driver is never told. A shareable claim (see [`crate::claim`]) is
    /// extended to the pod and returned; any other is an error.
    pub(super) async fn late_claims(&self, pod: &PodSandbox) -> Result<Vec<Arc<ClaimRecord>>> {
        let Some(reader) = &self.claims else {
            return Ok(Vec::new());
        };
        let candidates: Vec<Arc<ClaimRecord>> = lock(&self.state)
            .claims
            .values()
            .filter(|c| c.namespace == pod.namespace && !c.pods.iter().any(|p| p.uid == pod.uid))
            .cloned()
            .collect();
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let reads = futures::future::join_all(
            candidates
                .iter()
                .map(|c| reader(c.namespace.clone(), c.name.clone())),
        );
        let Ok(now) = tokio::time::timeout(LATE_CLAIMS_TIMEOUT, reads).await else {
            tracing::warn!(pod = %pod.qualified_name(), claims = candidates.len(), "the API server did not answer in time; a claim this pod was added to after it was prepared would be missed");
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (c, read) in candidates.into_iter().zip(now) {
            let claim = match read {
                Ok(claim) => claim,
                Err(e) => {
                    tracing::debug!(claim = %format!("{}/{}", c.namespace, c.name), error = %e, "claim not readable");
                    continue;
                }
            };
            // The same name may be a new claim by now.
            if claim.metadata.uid.as_deref().is_some_and(|u| u != c.uid) {
                continue;
            }
            let Ok(pods) = claim::pods_of(&claim) else {
                continue;
            };
            let Some(late) = pods.into_iter().find(|p| p.uid == pod.uid) else {
                continue;
            };
            if let Some(d) = c.devices.iter().find(|d| self.moves_into_pod(d)) {
                let first: Vec<&str> = c.pods.iter().map(|p| p.name.as_str()).collect();
                return Err(Error::Pod {
                    pod: pod.qualified_name(),
                    reason: format!(
                        "claim {}/{} was prepared on this node for {}; this pod was added to its \
                         reservedFor after, but device {} {}, which can be in one pod only: \
                         give this pod a claim of its own",
                        c.namespace,
                        c.name,
                        first.join(", "),
                        d.device,
                        self.why_one_pod(d)
                    ),
                });
            }
            let mut shared = (*c).clone();
            shared.pods.push(late);
            tracing::info!(claim = %format!("{}/{}", c.namespace, c.name), pod = %pod.qualified_name(), "pod added to a shared claim after it was prepared: it gets the claim's devices");
            lock(&self.state).insert_claim(shared);
            out.extend(
                self.claims_of_pod(&pod.uid)
                    .into_iter()
                    .filter(|x| x.uid == c.uid),
            );
        }
        Ok(out)
    }
}
