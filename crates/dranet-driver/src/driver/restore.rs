//! Taking back, at start, the claims the kubelet plugin's checkpoint holds as prepared, and
//! checking a claim of an earlier boot against the node when its pod's sandbox starts.

use super::*;

impl NetworkDriver {
    /// What [`Driver::restore_prepared`] does: takes back the claims the kubelet plugin's
    /// checkpoint holds as prepared (see [`crate::record`]). A record of this boot is used as it
    /// stands; one of an earlier boot is checked against the inventory now (a device not there
    /// yet is checked again at its pod's sandbox start); one that cannot be read is copied into
    /// `<state dir>/quarantine/` and fails its pods' sandboxes with the reason. Never fails: the
    /// daemon starts whatever the checkpoint holds. CPU work proportional to the records.
    pub fn restore_claims(&self, claims: Vec<PreparedClaim>) {
        let inv = self.inventory();
        let boot = self.boot_id.as_deref();
        let (mut this_boot, mut checked, mut unchecked, mut unusable) = (0, 0, 0, 0);
        for c in claims {
            let state = c.prepared.state.as_ref();
            let read = ClaimRecord::from_state(state).and_then(|r| {
                if r.uid == c.claim_ref.uid {
                    Ok(r)
                } else {
                    Err(record::RecordError::Uid { found: r.uid })
                }
            });
            let r = match read {
                Ok(r) => r,
                Err(e) => {
                    let who = c.claim_ref.to_string();
                    let kept = self.quarantine_record(&c.claim_ref.uid, state);
                    tracing::error!(claim = %who, error = %e, kept = ?kept, "the checkpoint's record of a prepared claim cannot be read; its pods will not start until it is prepared again");
                    lock(&self.state).insert_unusable(
                        &c.claim_ref.uid,
                        Unusable {
                            namespace: c.claim_ref.namespace,
                            name: c.claim_ref.name,
                            pods: record::pods_of_unreadable(state),
                            reason: format!(
                                "the node cannot read what was prepared for it ({e}): delete \
                                 the pod so that the claim is prepared again"
                            ),
                        },
                    );
                    unusable += 1;
                    continue;
                }
            };
            let r = if r.of_boot(boot) {
                this_boot += 1;
                r
            } else {
                match r.revalidate(&inv, boot) {
                    Ok(now) => {
                        checked += 1;
                        now
                    }
                    Err(reason) => {
                        tracing::warn!(claim = %c.claim_ref, %reason, "a claim prepared before the node restarted does not match the node now; checked again when its pod starts");
                        unchecked += 1;
                        r
                    }
                }
            };
            lock(&self.state).insert_claim(r);
        }
        // Pods that joined a claim after its prepare, known to this boot's pod records.
        let mut st = lock(&self.state);
        let late: Vec<(String, PodRef)> = st
            .pods
            .values()
            .flat_map(|p| {
                let name = p.pod.rsplit('/').next().unwrap_or(&p.pod).to_string();
                p.late_claims.iter().map(move |c| {
                    (
                        c.clone(),
                        PodRef {
                            name: name.clone(),
                            uid: p.uid.clone(),
                        },
                    )
                })
            })
            .collect();
        for (uid, pod) in late {
            if let Some(c) = st.claims.get(&uid)
                && !c.pods.iter().any(|p| p.uid == pod.uid)
            {
                let mut c = (**c).clone();
                c.pods.push(pod);
                st.insert_claim(c);
            }
        }
        drop(st);
        tracing::info!(
            this_boot,
            earlier_boot_checked = checked,
            earlier_boot_unchecked = unchecked,
            unusable,
            "prepared claims taken back from the checkpoint"
        );
    }

    /// Copies an unreadable record aside for an operator; where it went, if it could be kept.
    pub(super) fn quarantine_record(
        &self,
        uid: &str,
        state: Option<&serde_json::Value>,
    ) -> Option<PathBuf> {
        let state = state?;
        let file = format!("{uid}.json");
        if dranet_podnet::Journal::check_key(uid).is_err() {
            return None;
        }
        let data = serde_json::to_vec(state).ok()?;
        dranet_podnet::durable::create_dir(&self.quarantine)
            .and_then(|()| dranet_podnet::durable::write(&self.quarantine, &file, &data))
            .map_err(|e| tracing::warn!(uid, error = %e, "could not keep the unreadable record"))
            .ok()?;
        Some(self.quarantine.join(file))
    }

    /// The claims of a sandbox's pod as they can be used now. A claim whose record could not be
    /// read is an error; one prepared in an earlier boot is checked against the node first
    /// (rescanned once when a device is missing) and used as the node has it now, or is an error
    /// naming what is missing: a pod never starts silently without a device it was given.
    pub(super) async fn sandbox_claims(&self, pod: &PodSandbox) -> Result<Vec<Arc<ClaimRecord>>> {
        let (claims, unusable) = {
            let st = lock(&self.state);
            (st.claims_of(&pod.uid), st.unusable_of(&pod.uid))
        };
        if let Some(u) = unusable.first() {
            return Err(Error::Pod {
                pod: pod.qualified_name(),
                reason: format!("claim {}/{}: {}", u.namespace, u.name, u.reason),
            });
        }
        let boot = self.boot_id.as_deref();
        let mut out = Vec::with_capacity(claims.len());
        let mut rescanned = false;
        for c in claims {
            if c.of_boot(boot) {
                out.push(c);
                continue;
            }
            let mut checked = c.revalidate(&self.inventory(), boot);
            if checked.is_err() && !rescanned {
                rescanned = true;
                checked = c.revalidate(&*self.rescan().await?, boot);
            }
            let now = checked.map_err(|reason| Error::Pod {
                pod: pod.qualified_name(),
                reason: format!("claim {}/{}: {reason}", c.namespace, c.name),
            })?;
            tracing::info!(claim = %format!("{}/{}", c.namespace, c.name), "a claim prepared before the node restarted matches the node now");
            out.push(lock(&self.state).insert_claim(now));
        }
        Ok(out)
    }
}
