//! A claim's named profiles (its configuration's `profile`), as upstream: resolved by the profile
//! provider at prepare and released at unprepare.
//!
//! The provider allocates (an address from an IPAM, say), so nothing it was asked for may be
//! forgotten: the request is recorded in the store *before* it is sent, and the record goes only
//! once the provider confirmed the release. A crash between prepare and unprepare, or in the
//! middle of either, leaves the record; the kubelet's unprepare (it unprepares every claim it
//! asked to prepare) then releases from it, and releases the provider refused or did not answer
//! are retried in the background ([`NetworkDriver::retry_profile_releases`]).
//!
//! Where the profile's configuration goes (upstream's `MergeNetworkConfig(merged, profile)`): under
//! everything else. The claim's configuration (over the cloud's) is laid over what the provider
//! answers, so a claim that sets an MTU keeps it whatever the profile says.

use dranet_core::{DeviceIdentifiers, Inventory, ProfileProvider, ProfileRequest};
use dranet_kubeletplugin::ClaimRef;

use super::{NetworkDriver, lock};
use crate::record::DeviceRecord;
use crate::store::{ProfileLease, ProfileRecord, STORE_VERSION};
use crate::{Error, Result};

impl NetworkDriver {
    /// Resolves the profiles of `devices[i]` for each `(i, identifiers)` of `profiled`: merges
    /// each answer under the device's configuration and checks the result against the device.
    /// On any failure, what was asked is released (or left owed) and the claim fails.
    pub(super) async fn resolve_profiles(
        &self,
        claim: &ClaimRef,
        devices: &mut [DeviceRecord],
        profiled: Vec<(usize, DeviceIdentifiers)>,
        inv: &Inventory,
    ) -> Result<()> {
        let cref = claim.to_string();
        let fail = |reason: String| Error::Claim {
            claim: cref.clone(),
            reason,
        };
        let Some(provider) = self.profiles.clone() else {
            let d = &devices[profiled[0].0];
            return Err(fail(format!(
                "device {} asks for profile {:?}, but no profile provider is configured \
                 (dranet run --profile-provider webhook --webhook-url URL)",
                d.device, d.config.profile
            )));
        };
        let _one_at_a_time = self.profile_locks.lock(&claim.uid).await;
        // A claim prepared before (the kubelet may prepare it again): its devices keep what
        // their profile gave them; the provider is not asked twice.
        let before = lock(&self.state).claims.get(&claim.uid).cloned();
        let mut leases = Vec::with_capacity(profiled.len());
        let mut ask = Vec::new();
        for (i, id) in profiled {
            let d = &devices[i];
            let request = ProfileRequest {
                device: id,
                claim_uid: claim.uid.clone(),
                config: (*d.config).clone(),
            };
            leases.push(ProfileLease {
                device: d.device.clone(),
                request: request.clone(),
            });
            let prior = before.as_ref().and_then(|c| {
                c.devices
                    .iter()
                    .find(|p| p.device == d.device && p.config.profile == d.config.profile)
            });
            match prior {
                Some(p) => devices[i].config = p.config.clone(),
                None => ask.push((i, request)),
            }
        }
        let mut record = ProfileRecord {
            version: STORE_VERSION,
            namespace: claim.namespace.clone(),
            name: claim.name.clone(),
            uid: claim.uid.clone(),
            leases,
            releasing: false,
        };
        // Recorded before the provider is asked: from here on a crash still knows to release.
        self.store.put_profiles(&record).map_err(|e| {
            tracing::error!(claim = %cref, error = %e, "could not record the claim's profiles");
            fail(e.user_message())
        })?;
        for (i, request) in ask {
            let answer = match provider.get_profile_config(&request).await {
                Ok(profile) => self
                    .profile_config(&devices[i], &profile, inv)
                    .await
                    .map_err(&fail),
                Err(source) => Err(Error::Profile {
                    claim: cref.clone(),
                    device: devices[i].device.clone(),
                    source: Box::new(source),
                }),
            };
            match answer {
                Ok(config) => devices[i].config = std::sync::Arc::new(config),
                Err(e) => {
                    record.releasing = true;
                    self.release(provider.as_ref(), record).await;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The configuration of device `d` with its profile's `profile` under it, checked against the
    /// device as discovered and its interface on the host.
    async fn profile_config(
        &self,
        d: &DeviceRecord,
        profile: &dranet_core::NetworkConfig,
        inv: &Inventory,
    ) -> std::result::Result<dranet_core::NetworkConfig, String> {
        let config = d.config.merged_over(profile);
        let with =
            |e: String| format!("device {} with profile {:?}: {e}", d.device, config.profile);
        config.validate().map_err(|e| with(e.to_string()))?;
        if let Some(dev) = inv.device(&d.device) {
            self.check_config(&config, dev, inv).await.map_err(with)?;
        }
        Ok(config)
    }

    /// Releases the profiles of claim `uid`, if it has any. Never fails: what the provider does
    /// not release stays recorded, owed, for [`NetworkDriver::retry_profile_releases`].
    pub async fn release_profiles(&self, uid: &str) {
        let _one_at_a_time = self.profile_locks.lock(uid).await;
        let record = match self.store.profile(uid) {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(claim_uid = uid, error = %e, "cannot read the claim's profiles; they are not released");
                return;
            }
        };
        match self.profiles.clone() {
            Some(p) => {
                self.release(p.as_ref(), record).await;
            }
            None => self.owe(record, "no profile provider is configured"),
        }
    }

    /// Releases again every profile whose release is owed (the provider refused or did not
    /// answer at unprepare); returns how many are still owed. The daemon calls it at start and
    /// at each periodic rescan.
    pub async fn retry_profile_releases(&self) -> usize {
        let owing = match self.store.profiles() {
            Ok(r) => r.into_iter().filter(|r| r.releasing).map(|r| r.uid),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the recorded profiles");
                return 0;
            }
        };
        let mut owed = 0;
        for uid in owing.collect::<Vec<_>>() {
            let _one_at_a_time = self.profile_locks.lock(uid.as_str()).await;
            // Read again under the claim's lock: its unprepare may have released it meanwhile.
            let r = match self.store.profile(&uid) {
                Ok(Some(r)) if r.releasing => r,
                Ok(_) => continue,
                Err(e) => {
                    tracing::error!(claim_uid = uid, error = %e, "cannot read the claim's profiles; they are not released");
                    continue;
                }
            };
            owed += match self.profiles.clone() {
                Some(p) => self.release(p.as_ref(), r).await,
                None => {
                    let n = r.leases.len();
                    self.owe(r, "no profile provider is configured");
                    n
                }
            };
        }
        owed
    }

    /// Marks `record` as being released (durably, first), asks the provider to release each
    /// lease, and keeps only those it did not; returns how many are still owed.
    async fn release(&self, provider: &dyn ProfileProvider, mut record: ProfileRecord) -> usize {
        if !record.releasing {
            record.releasing = true;
            if let Err(e) = self.store.put_profiles(&record) {
                tracing::warn!(claim = %claim_of(&record), error = %e, "cannot record that the profiles are being released");
            }
        }
        let mut owed = Vec::new();
        for lease in std::mem::take(&mut record.leases) {
            match provider.release_profile_config(&lease.request).await {
                Ok(()) => tracing::info!(
                    claim = %claim_of(&record),
                    device = lease.device,
                    profile = lease.request.config.profile,
                    "profile released"
                ),
                Err(e) => {
                    tracing::warn!(claim = %claim_of(&record), device = lease.device, error = %e, "profile release failed; retried later");
                    owed.push(lease);
                }
            }
        }
        record.leases = owed;
        let n = record.leases.len();
        let kept = if n == 0 {
            self.store.remove_profiles(&record.uid)
        } else {
            self.store.put_profiles(&record)
        };
        if let Err(e) = kept {
            tracing::error!(claim = %claim_of(&record), error = %e, "cannot update the recorded profiles");
        }
        n
    }

    /// Keeps `record` owed, saying why it cannot be released now.
    fn owe(&self, mut record: ProfileRecord, why: &str) {
        record.releasing = true;
        tracing::warn!(claim = %claim_of(&record), leases = record.leases.len(), "profiles not released: {why}; kept until they can be");
        if let Err(e) = self.store.put_profiles(&record) {
            tracing::error!(claim = %claim_of(&record), error = %e, "cannot record the owed profiles");
        }
    }
}

fn claim_of(r: &ProfileRecord) -> String {
    format!("{}/{}", r.namespace, r.name)
}
