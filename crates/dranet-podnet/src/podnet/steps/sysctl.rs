//! The link's sysctls in the pod: `arp_ignore`, `arp_announce`, `forwarding`, and the IPv6 ones
//! (`accept_ra`, `dad_transmits`, router solicitation, `disable_ipv6`, `addr_gen_mode`; with
//! `addressing: SLAAC` upstream's defaults, [`NetworkConfig::ipv6_sysctls`]). They are the
//! pod's, under the link's pod name. Set before the link goes up, so its first router
//! solicitation and its addresses follow them. At detach, the link's own sysctls on the host,
//! recorded at attach, are put back (`detach:sysctl`): a move between namespaces resets them to
//! the namespace's defaults, and a host link that did not take router advertisements must not
//! start to.

use std::io;
use std::path::Path;

use dranet_core::NetworkConfig;

use super::super::{StepResult, at};
use super::{Attaching, Restoring};
use crate::podnet::state::sysctl_path;

/// The sysctls of `cfg` for the link named `name` in the pod, as paths under `/proc/sys/net`.
pub(in super::super) fn pairs(cfg: &NetworkConfig, name: &str) -> Vec<(String, String)> {
    let iface = &cfg.interface;
    let mut sysctls: Vec<(String, String)> = Vec::new();
    if let Some(v) = iface.arp_ignore {
        sysctls.push((format!("ipv4/conf/{name}/arp_ignore"), v.to_string()));
    }
    if let Some(v) = iface.arp_announce {
        sysctls.push((format!("ipv4/conf/{name}/arp_announce"), v.to_string()));
    }
    // The move resets them to the pod namespace's defaults, so they are set after.
    for (key, v) in cfg.ipv6_sysctls() {
        sysctls.push((format!("ipv6/conf/{name}/{key}"), v.to_string()));
    }
    if let Some(f) = iface.forwarding {
        let v = if f { "1" } else { "0" };
        sysctls.push((format!("ipv4/conf/{name}/forwarding"), v.into()));
        sysctls.push((format!("ipv6/conf/{name}/forwarding"), v.into()));
    }
    sysctls
}

/// Writes `sysctls` in the pod `pod`.
pub(in super::super) fn write(
    pod: &crate::netns::Netns,
    sysctls: &[(String, String)],
) -> StepResult<()> {
    if sysctls.is_empty() {
        return Ok(());
    }
    pod.run(|| {
        for (k, v) in sysctls {
            std::fs::write(Path::new("/proc/sys/net").join(k), v)
                .map_err(|e| at(format!("sysctl {k}={v}"))(e))?;
        }
        Ok(())
    })
    .map_err(|e| at("sysctl")(io::Error::other(e)))?
}

/// `sysctl`.
pub(in super::super) fn apply(a: &Attaching<'_>) -> StepResult<()> {
    a.podnet.step("sysctl")?;
    write(a.pod, &pairs(a.cfg, &a.entry.pod_name))
}

/// `detach:sysctl`: the host link's recorded sysctls written back where they differ now, before
/// its addresses and its being up (an address generation mode or IPv6 state changed after them
/// would drop them). One that cannot be written is reported, not fatal.
pub(in super::super) fn restore(podnet: &crate::PodNet, r: &mut Restoring<'_>) -> StepResult<()> {
    podnet.step("detach:sysctl")?;
    let h = &r.entry.host;
    if h.sysctls.is_empty() {
        return Ok(());
    }
    let recorded = h.sysctls.clone();
    let name = h.name.clone();
    let failures = podnet
        .host()
        .run(move || {
            let mut failures = Vec::new();
            for (k, v) in &recorded {
                let Some(path) = sysctl_path(k, &name) else {
                    continue;
                };
                let now = std::fs::read_to_string(&path).unwrap_or_default();
                if now.trim() == v {
                    continue;
                }
                if let Err(e) = std::fs::write(&path, v) {
                    failures.push(format!("sysctl {k}={v}: {e}"));
                }
            }
            failures
        })
        .map_err(|e| at("detach:sysctl")(io::Error::other(e)))?;
    r.failures.extend(failures);
    Ok(())
}
