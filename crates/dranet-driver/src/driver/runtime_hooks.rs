//! The profile provider's runtime hooks, asked at prepare (after the devices' profiles, so the
//! provider sees each device's final configuration) and kept in the claim's record; the pod's
//! first container runs them ([`crate::attach::runtime`]).

use dranet_core::runtime_hook::MAX_HOOKS_PER_POD;
use dranet_core::{DeviceIdentifiers, Inventory, ProfileRequest};
use dranet_kubeletplugin::ClaimRef;

use super::NetworkDriver;
use crate::record::DeviceRecord;
use crate::{Error, Result};

impl NetworkDriver {
    /// Asks the provider for each device's runtime hook, when it serves them. A claim whose
    /// devices get hooks is refused when this daemon cannot run them (it runs them from its OCI
    /// hook, which it was started without) or when they are more than a pod may run.
    pub(super) async fn ask_runtime_hooks(
        &self,
        claim: &ClaimRef,
        devices: &mut [DeviceRecord],
        inv: &Inventory,
    ) -> Result<()> {
        let Some(provider) = self.profiles.clone() else {
            return Ok(());
        };
        if !provider.serves_runtime_hooks() {
            return Ok(());
        }
        let cref = claim.to_string();
        for d in devices.iter_mut() {
            let Some(dev) = inv.device(&d.device) else {
                continue;
            };
            let request = ProfileRequest {
                device: DeviceIdentifiers::of(dev),
                claim_uid: claim.uid.clone(),
                config: (*d.config).clone(),
            };
            d.runtime_hook = provider
                .get_runtime_hook(&request)
                .await
                .map_err(|source| Error::Profile {
                    claim: cref.clone(),
                    device: d.device.clone(),
                    source: Box::new(source),
                })?;
        }
        // Counted as the pod runs them: a hook given for several devices once.
        // Counted as the pod runs them: a hook given for several devices once.
        let hooks = crate::attach::runtime::pod_hooks(
            devices
                .iter()
                .filter_map(|d| d.hook_for_pod(&cref, &claim.uid)),
        );
        let fail = |reason: String| Error::Claim {
            claim: cref.clone(),
            reason,
        };
        if hooks.len() > MAX_HOOKS_PER_POD {
            return Err(fail(format!(
                "the profile provider gives its devices {} runtime hooks, more than the \
                 {MAX_HOOKS_PER_POD} a pod may run",
                hooks.len()
            )));
        }
        if let Some(d) = devices.iter().find(|d| d.runtime_hook.is_some())
            && self.barrier.is_none()
        {
            return Err(fail(format!(
                "the profile provider gives device {} a runtime hook, which dranet runs from its \
                 OCI hook, and this node's dranet runs without it (--hook-path is empty, or the \
                 host cannot run the hook: see the dranet log on the node)",
                d.device
            )));
        }
        Ok(())
    }
}
