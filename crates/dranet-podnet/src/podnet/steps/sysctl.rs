//! The link's sysctls in the pod: `arp_ignore`, `arp_announce`, `forwarding`, and the IPv6 ones
//! (`accept_ra`, `dad_transmits`, router solicitation, `disable_ipv6`, `addr_gen_mode`; with
//! `addressing: SLAAC` upstream's defaults, [`NetworkConfig::ipv6_sysctls`]). They are the
//! pod's, under the link's pod name: nothing to undo on the host. Set before the link goes up,
//! so its first router solicitation and its addresses follow them.

use std::io;
use std::path::Path;

use dranet_core::NetworkConfig;

use super::super::{StepResult, at};
use super::Attaching;

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
