//! The claim's VRF in the pod: created (and owned, journaled) or joined when the pod has it
//! already (another of its NICs), the link enslaved to it. At detach the VRF we created goes,
//! and with the last VRF the `l3mdev` rules the kernel added with the first.

use std::io;

use rtnetlink::packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::link::{
    InfoData, InfoKind, InfoVrf, LinkAttribute, LinkInfo, LinkMessage,
};

use super::super::journal::Entry;
use super::super::messages::{l3mdev_rules, set_up};
use super::super::{EEXIST, ENOENT, ESRCH, StepResult, at, identity, is_errno};
use super::Attaching;
use crate::netns::Rtnl;

/// `vrf`: created or joined, up, the link its member; sockets not bound to it accept its TCP and
/// UDP traffic.
pub(in super::super) async fn apply(a: &mut Attaching<'_>) -> StepResult<()> {
    let Some(vrf) = &a.cfg.interface.vrf else {
        return Ok(());
    };
    a.podnet.step("vrf")?;
    let podr = a.podr;
    let table = vrf.table_id();
    let mut v = LinkMessage::default();
    v.attributes.push(LinkAttribute::IfName(vrf.name.clone()));
    v.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Vrf),
        LinkInfo::Data(InfoData::Vrf(vec![InfoVrf::TableId(table)])),
    ]));
    let vrf_step = format!("vrf {} table {table}", vrf.name);
    let had_l3mdev = !l3mdev_rules(podr)
        .await
        .map_err(at(vrf_step.clone()))?
        .is_empty();
    match podr
        .request(RouteNetlinkMessage::NewLink(v), NLM_F_CREATE | NLM_F_EXCL)
        .await
    {
        Ok(_) => {
            a.entry.pod_vrf = Some(vrf.name.clone());
            a.entry.pod_l3mdev_rules = !had_l3mdev;
        }
        // A VRF the pod already has (another of its NICs) is joined, not owned.
        Err(e) if is_errno(&e, EEXIST) => {}
        Err(e) => return Err(at(vrf_step)(e)),
    }
    let vrf_link = podr
        .link_by_name(&vrf.name)
        .await
        .map_err(at(vrf_step.clone()))?
        .ok_or_else(|| at(vrf_step.clone())(io::Error::other("created but not found")))?;
    podr.request(
        RouteNetlinkMessage::SetLink(set_up(vrf_link.header.index, true)),
        0,
    )
    .await
    .map_err(at(vrf_step.clone()))?;
    let mut m = LinkMessage::default();
    m.header.index = a.pod_index;
    m.attributes
        .push(LinkAttribute::Controller(vrf_link.header.index));
    podr.request(RouteNetlinkMessage::SetLink(m), 0)
        .await
        .map_err(at(vrf_step))?;
    // Sockets not bound to the VRF accept its TCP and UDP traffic, as upstream sets it
    // (namespace-wide: the pod's own sysctls, gone with it).
    a.pod
        .run(|| {
            ["tcp_l3mdev_accept", "udp_l3mdev_accept"]
                .iter()
                .try_for_each(|k| std::fs::write(format!("/proc/sys/net/ipv4/{k}"), "1"))
        })
        .map_err(|e| at("vrf sysctls")(io::Error::other(e)))?
        .map_err(at("vrf sysctls"))
}

/// The VRF we created, deleted; the kernel's `l3mdev` rules came with it and go when no VRF is
/// left in the pod. (Part of `detach:pod-rules`.)
pub(in super::super) async fn undo(podr: &Rtnl, e: &Entry) -> StepResult<()> {
    if let Some(vrf) = &e.pod_vrf
        && let Ok(Some(v)) = podr.link_by_name(vrf).await
    {
        let mut m = LinkMessage::default();
        m.header.index = v.header.index;
        podr.request(RouteNetlinkMessage::DelLink(m), 0)
            .await
            .map_err(at(format!("remove pod vrf {vrf}")))?;
    }
    if !e.pod_l3mdev_rules {
        return Ok(());
    }
    let links = podr.links().await.map_err(at("read the pod's links"))?;
    if links
        .iter()
        .any(|l| identity::kind(l).as_deref() == Some("vrf"))
    {
        return Ok(());
    }
    for r in l3mdev_rules(podr)
        .await
        .map_err(at("read the pod's rules"))?
    {
        match podr.request(RouteNetlinkMessage::DelRule(r), 0).await {
            Ok(_) => {}
            Err(x) if is_errno(&x, ENOENT) || is_errno(&x, ESRCH) => {}
            Err(x) => return Err(at("remove the pod's l3mdev rules")(x)),
        }
    }
    Ok(())
}
