//! Ethtool features and private flags: set in the pod as the claim asks (names resolved and the
//! host's values recorded by the pre-flight), put back on the host at detach.

use std::io;

use super::super::{PodNet, StepResult, at};
use super::{Attaching, Restoring};
use crate::Error;
use crate::ethtool::{set_features, set_private_flags};

/// `ethtool`.
pub(in super::super) fn apply(a: &Attaching<'_>) -> StepResult<()> {
    let (features, private_flags) = (&a.eth.features, &a.eth.private_flags);
    if features.is_empty() && private_flags.is_empty() {
        return Ok(());
    }
    a.podnet.step("ethtool")?;
    let ethtool_err = |e: Error| at("ethtool")(io::Error::other(e));
    set_features(a.pod, &a.entry.pod_name, features).map_err(ethtool_err)?;
    set_private_flags(a.pod, &a.entry.pod_name, private_flags).map_err(ethtool_err)
}

/// `detach:ethtool`: the recorded values back; what fails is noted and the rest goes on.
pub(in super::super) fn restore(podnet: &PodNet, r: &mut Restoring<'_>) -> StepResult<()> {
    let h = &r.entry.host;
    if h.ethtool_features.is_empty() && h.ethtool_private_flags.is_empty() {
        return Ok(());
    }
    podnet.step("detach:ethtool")?;
    if let Err(e) = set_features(&podnet.host, &h.name, &h.ethtool_features) {
        r.failures.push(e.to_string());
    }
    if let Err(e) = set_private_flags(&podnet.host, &h.name, &h.ethtool_private_flags) {
        r.failures.push(e.to_string());
    }
    Ok(())
}
