//! The link's sysctls in the pod: `arp_ignore`, `arp_announce`, `accept_ra`, `forwarding`. They
//! are the pod's, under the link's pod name: nothing to undo on the host.

use std::io;
use std::path::Path;

use super::super::{StepResult, at};
use super::Attaching;

/// `sysctl`.
pub(in super::super) fn apply(a: &Attaching<'_>) -> StepResult<()> {
    a.podnet.step("sysctl")?;
    let iface = &a.cfg.interface;
    let name = &a.entry.pod_name;
    let mut sysctls: Vec<(String, String)> = Vec::new();
    if let Some(v) = iface.arp_ignore {
        sysctls.push((format!("ipv4/conf/{name}/arp_ignore"), v.to_string()));
    }
    if let Some(v) = iface.arp_announce {
        sysctls.push((format!("ipv4/conf/{name}/arp_announce"), v.to_string()));
    }
    // The move resets it to the pod namespace's default, so it is set after.
    if let Some(v) = iface.accept_ra {
        sysctls.push((format!("ipv6/conf/{name}/accept_ra"), v.to_string()));
    }
    if let Some(f) = iface.forwarding {
        let v = if f { "1" } else { "0" };
        sysctls.push((format!("ipv4/conf/{name}/forwarding"), v.into()));
        sysctls.push((format!("ipv6/conf/{name}/forwarding"), v.into()));
    }
    if sysctls.is_empty() {
        return Ok(());
    }
    a.pod
        .run(|| {
            for (k, v) in &sysctls {
                std::fs::write(Path::new("/proc/sys/net").join(k), v)
                    .map_err(|e| at(format!("sysctl {k}={v}"))(e))?;
            }
            Ok(())
        })
        .map_err(|e| at("sysctl")(io::Error::other(e)))?
}
