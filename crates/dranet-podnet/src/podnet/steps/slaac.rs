//! `slaac`: with `addressing: SLAAC`, the attach waits for the kernel to autoconfigure a global
//! IPv6 address on the link from the network's router advertisements, bounded by the
//! [`PodNet`](super::super::PodNet)'s SLAAC timeout. None in time is the attach's failure, so the
//! link goes back to the host like any failed attach. Nothing to undo: the address is the
//! kernel's, and goes with the link.

use std::io;
use std::time::{Duration, Instant};

use dranet_core::Addressing;
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage, AddressScope};

use super::super::{StepResult, at};
use super::Attaching;
use crate::netns::Rtnl;

/// How often the link's addresses are read while waiting.
const POLL: Duration = Duration::from_millis(25);

// IFA_F_* of linux/if_addr.h: an address that cannot be used yet, or that the kernel did not
// autoconfigure (a static address is permanent).
const IFA_F_DADFAILED: u32 = 0x08;
const IFA_F_DEPRECATED: u32 = 0x20;
const IFA_F_TENTATIVE: u32 = 0x40;
const IFA_F_PERMANENT: u32 = 0x80;

/// `slaac`: the link's autoconfigured global addresses (`addr/prefix`), once it has one.
pub(in super::super) async fn wait(a: &Attaching<'_>) -> StepResult<Vec<String>> {
    if a.cfg.addressing() != Addressing::Slaac {
        return Ok(Vec::new());
    }
    a.podnet.step("slaac")?;
    autoconfigured(
        a.podr,
        a.pod_index,
        &a.entry.pod_name,
        a.podnet.slaac_timeout,
    )
    .await
}

/// Waits up to `timeout` for link `index` (named `name` in the pod) of `podr` to have a usable
/// autoconfigured global IPv6 address; all of them, or the error that says what it has.
pub(in super::super) async fn autoconfigured(
    podr: &Rtnl,
    index: u32,
    name: &str,
    timeout: Duration,
) -> StepResult<Vec<String>> {
    let start = Instant::now();
    loop {
        let all = addresses(podr, index)
            .await
            .map_err(at("read the pod's addresses"))?;
        let ready: Vec<String> = all
            .iter()
            .filter(|(_, why)| why.is_empty())
            .map(|(a, _)| a.clone())
            .collect();
        if !ready.is_empty() {
            return Ok(ready);
        }
        if start.elapsed() >= timeout {
            let have: Vec<String> = all.iter().map(|(a, why)| format!("{a} ({why})")).collect();
            return Err(at("slaac")(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "interface {name} has no autoconfigured IPv6 address after {timeout:?} \
                     (global IPv6 addresses: {}): no router advertisement with an autonomous \
                     prefix reached it",
                    if have.is_empty() {
                        "none".to_string()
                    } else {
                        have.join(", ")
                    }
                ),
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The global IPv6 addresses of link `index`, each with why it is not a usable autoconfigured
/// one (`static`, `tentative`, `dadfailed`, `deprecated`; empty when it is).
async fn addresses(podr: &Rtnl, index: u32) -> io::Result<Vec<(String, String)>> {
    let msgs = podr
        .dump(RouteNetlinkMessage::GetAddress(AddressMessage::default()))
        .await?;
    Ok(msgs
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewAddress(a)
                if a.header.index == index && a.header.scope == AddressScope::Universe =>
            {
                let ip = a.attributes.iter().find_map(|x| match x {
                    AddressAttribute::Address(std::net::IpAddr::V6(ip)) => Some(*ip),
                    _ => None,
                })?;
                // The 32-bit flags attribute when present, else the header's 8 bits.
                let flags = a
                    .attributes
                    .iter()
                    .find_map(|x| match x {
                        AddressAttribute::Flags(f) => Some(f.bits()),
                        _ => None,
                    })
                    .unwrap_or(u32::from(a.header.flags.bits()));
                let why: Vec<&str> = [
                    (IFA_F_PERMANENT, "static"),
                    (IFA_F_TENTATIVE, "tentative"),
                    (IFA_F_DADFAILED, "dadfailed"),
                    (IFA_F_DEPRECATED, "deprecated"),
                ]
                .into_iter()
                .filter(|(f, _)| flags & f != 0)
                .map(|(_, w)| w)
                .collect();
                Some((format!("{ip}/{}", a.header.prefix_len), why.join(",")))
            }
            _ => None,
        })
        .collect())
}
