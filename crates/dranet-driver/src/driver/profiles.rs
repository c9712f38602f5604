//! A claim's named profiles (its configuration's `profile`), as upstream: resolved by the profile
//! provider at prepare and released at unprepare.
//!
//! The provider allocates (an address from an IPAM, say), so nothing it was asked for may be
//! forgotten. The request is recorded in the kubelet plugin's checkpoint *before* it is sent (a
//! record that cannot be written fails the prepare, and nothing is asked), and the record goes
//! only once the provider confirmed the release. The checkpoint is on the kubelet's disk, so a
//! crash between prepare and unprepare, in the middle of either, or a reboot (which empties the
//! state directory) leaves the record: the kubelet's unprepare (it unprepares every claim it
//! asked to prepare) then releases from it, and releases the provider refused or did not answer
//! are retried in the background ([`NetworkDriver::retry_profile_releases`]). An unprepare whose
//! record cannot be updated fails, so that the kubelet retries it rather than the driver
//! forgetting what it owes.
//!
//! Where the profile's configuration goes (upstream's `MergeNetworkConfig(merged, profile)`): under
//! everything else. The claim's configuration (over the cloud's) is laid over what the provider
//! answers, so a claim that sets an MTU keeps it whatever the profile says.

use dranet_core::{DeviceIdentifiers, Inventory, ProfileProvider, ProfileRequest};
use dranet_kubeletplugin::{ClaimRef, DriverRecords};

use super::{NetworkDriver, lock};
use crate::record::{
    DeviceRecord, PROFILE_KEY_PREFIX, PROFILE_RECORD_VERSION, ProfileLease, ProfileRecord,
};
use crate::{Error, Result};

/// Why no record can be kept: the kubelet plugin has not handed the driver its checkpoint.
const NO_CHECKPOINT: &str = "the kubelet plugin has not opened its checkpoint, where profile \
                             records are kept (Driver::restore_records was not called)";

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
            version: PROFILE_RECORD_VERSION,
            namespace: claim.namespace.clone(),
            name: claim.name.clone(),
            uid: claim.uid.clone(),
            leases,
            releasing: false,
        };
        // Recorded before the provider is asked: from here on a crash, or a reboot, still
        // knows to release. Not recorded, not asked.
        let records = self.records().ok_or_else(|| fail(NO_CHECKPOINT.into()))?;
        put_record(&records, &record, "record the claim's profiles")
            .await
            .map_err(|e| {
                tracing::error!(claim = %cref, error = %e, "could not record the claim's profiles; the provider is not asked");
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
                    // A claim prepared before keeps its profiles: the record, which now also
                    // names this request, is released with the claim.
                    if before.is_none() {
                        record.releasing = true;
                        if let Err(x) = self.release(&records, provider.as_ref(), record).await {
                            tracing::error!(claim = %cref, error = %x, "the profiles of a failed prepare are kept unreleased; released at the claim's unprepare");
                        }
                    }
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

    /// Releases the profiles of claim `uid`, if it has any. What the provider does not release
    /// now stays recorded, owed, for [`NetworkDriver::retry_profile_releases`]; that is not an
    /// error. The error is a record that could not be updated (the checkpoint could not be
    /// written): nothing is forgotten, and the caller must try again.
    pub async fn release_profiles(&self, uid: &str) -> Result<()> {
        // Without the checkpoint no profile was ever recorded, nor asked for.
        let Some(records) = self.records() else {
            return Ok(());
        };
        let _one_at_a_time = self.profile_locks.lock(uid).await;
        let Some(record) = profile_record(&records, uid).await? else {
            return Ok(());
        };
        match self.profiles.clone() {
            Some(p) => self.release(&records, p.as_ref(), record).await.map(drop),
            None => owe(&records, record, "no profile provider is configured").await,
        }
    }

    /// Releases again every profile whose release is owed (the provider refused or did not
    /// answer at unprepare); returns how many are still owed. The daemon calls it at start and
    /// at each periodic rescan.
    pub async fn retry_profile_releases(&self) -> usize {
        let Some(records) = self.records() else {
            return 0;
        };
        let all = match records.with_prefix(PROFILE_KEY_PREFIX).await {
            Ok(all) => all,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the recorded profiles");
                return 0;
            }
        };
        let mut owing = Vec::new();
        for (key, value) in &all {
            match ProfileRecord::from_value(value) {
                Ok(r) if r.releasing => owing.push(r.uid),
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(key, error = %e, "a profile record cannot be read; its profiles are not released and the record is kept for an operator");
                }
            }
        }
        let mut owed = 0;
        for uid in owing {
            let _one_at_a_time = self.profile_locks.lock(uid.as_str()).await;
            // Read again under the claim's lock: its unprepare may have released it meanwhile.
            let r = match profile_record(&records, &uid).await {
                Ok(Some(r)) if r.releasing => r,
                Ok(_) => continue,
                Err(e) => {
                    tracing::error!(claim_uid = uid, error = %e, "cannot read the claim's profiles; they are not released");
                    continue;
                }
            };
            let n = r.leases.len();
            let still = match self.profiles.clone() {
                Some(p) => self.release(&records, p.as_ref(), r).await,
                None => owe(&records, r, "no profile provider is configured")
                    .await
                    .map(|()| n),
            };
            owed += still.unwrap_or_else(|e| {
                tracing::error!(claim_uid = uid, error = %e, "could not update the owed profiles; retried later");
                n
            });
        }
        owed
    }

    /// Marks `record` as being released (durably, first: a mark that cannot be written sends
    /// nothing), asks the provider to release each lease, and keeps only those it did not;
    /// returns how many are still owed.
    async fn release(
        &self,
        records: &DriverRecords,
        provider: &dyn ProfileProvider,
        mut record: ProfileRecord,
    ) -> Result<usize> {
        if !record.releasing {
            record.releasing = true;
            put_record(
                records,
                &record,
                "record that the claim's profiles are released",
            )
            .await?;
        }
        let mut owed = Vec::new();
        for lease in std::mem::take(&mut record.leases) {
            match provider.release_profile_config(&lease.request).await {
                Ok(()) => tracing::info!(
                    claim = %record.claim(),
                    device = lease.device,
                    profile = lease.request.config.profile,
                    "profile released"
                ),
                Err(e) => {
                    tracing::warn!(claim = %record.claim(), device = lease.device, error = %e, "profile release failed; retried later");
                    owed.push(lease);
                }
            }
        }
        record.leases = owed;
        let n = record.leases.len();
        if n == 0 {
            records
                .remove(&ProfileRecord::key(&record.uid))
                .await
                .map_err(|e| Error::Records {
                    action: format!("forget the released profiles of claim {}", record.claim()),
                    reason: dranet_util::error_chain(&e),
                })?;
        } else {
            put_record(records, &record, "record the profiles still owed").await?;
        }
        Ok(n)
    }

    /// Moves the profile records an earlier version kept in the state directory into the
    /// checkpoint, so that an upgrade within a boot releases them as before. A record the
    /// checkpoint already has (a newer prepare of the claim) wins; one that cannot be read or
    /// moved is left where it is, with an error in the log, and moved at the next start.
    pub(super) async fn adopt_legacy_profiles(&self, records: &DriverRecords) {
        let legacy = match self.store.legacy_profiles() {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "cannot list the profile records an earlier version left; they are not released");
                return;
            }
        };
        for r in legacy {
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(error = %e, "a profile record an earlier version left cannot be read; it is left where it is, and its profiles are not released");
                    continue;
                }
            };
            let moved = match records.get(&ProfileRecord::key(&r.uid)).await {
                Ok(Some(_)) => Ok(()),
                Ok(None) => {
                    put_record(records, &r, "move a profile record into the checkpoint").await
                }
                Err(e) => Err(Error::Records {
                    action: format!("read the profile record of claim {}", r.claim()),
                    reason: dranet_util::error_chain(&e),
                }),
            };
            match moved.and_then(|()| self.store.remove_legacy_profiles(&r.uid)) {
                Ok(()) => {
                    tracing::info!(claim = %r.claim(), leases = r.leases.len(), releasing = r.releasing, "profile record of an earlier version moved into the checkpoint")
                }
                Err(e) => {
                    tracing::error!(claim = %r.claim(), error = %e, "could not move an earlier version's profile record into the checkpoint; tried again at the next start")
                }
            }
        }
    }
}

/// Writes `record` under its key; `what` says what for, in the error.
async fn put_record(records: &DriverRecords, record: &ProfileRecord, what: &str) -> Result<()> {
    let err = |reason: String| Error::Records {
        action: format!("{what} (claim {})", record.claim()),
        reason,
    };
    let value = record.to_value().map_err(|e| err(e.to_string()))?;
    records
        .put(&ProfileRecord::key(&record.uid), value)
        .await
        .map_err(|e| err(dranet_util::error_chain(&e)))
}

/// Claim `uid`'s profile record, if it has a readable one. One this version cannot read (of a
/// newer version, say) is left where it is, with an error in the log: it must not block the
/// claim's unprepare for ever.
async fn profile_record(records: &DriverRecords, uid: &str) -> Result<Option<ProfileRecord>> {
    let value = records
        .get(&ProfileRecord::key(uid))
        .await
        .map_err(|e| Error::Records {
            action: format!("read the profile record of claim UID {uid}"),
            reason: dranet_util::error_chain(&e),
        })?;
    let Some(value) = value else {
        return Ok(None);
    };
    match ProfileRecord::from_value(&value) {
        Ok(r) => Ok(Some(r)),
        Err(e) => {
            tracing::error!(claim_uid = uid, error = %e, "the claim's profile record cannot be read; its profiles are not released and the record is kept for an operator");
            Ok(None)
        }
    }
}

/// Keeps `record` owed, saying why it cannot be released now.
async fn owe(records: &DriverRecords, mut record: ProfileRecord, why: &str) -> Result<()> {
    record.releasing = true;
    tracing::warn!(claim = %record.claim(), leases = record.leases.len(), "profiles not released: {why}; kept until they can be");
    put_record(records, &record, "record the owed profiles").await
}
