//! The link itself: moved into the pod under its pod name and found there by identity, set up;
//! at detach moved back under its host name, found on the host, set up again as it was.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};

use super::super::journal::Entry;
use super::super::messages::set_up;
use super::super::{PodNet, StepResult, at, identity};
use super::{Attaching, Restoring};
use crate::netns::{Rtnl, link_name};

/// `move`: the move alone, with the pod name, then the link's identity in the pod journaled.
/// The kernel uses the name at once when the host name is taken in the pod (every pod has an
/// eth0) and renames it right after the move otherwise. Nothing else goes in this request: the
/// kernel applies the rest after the move, so a value it refuses would leave the link in the
/// pod under whatever name it had got to. The name was checked as the kernel checks it.
pub(in super::super) async fn move_in(a: &mut Attaching<'_>) -> StepResult<LinkMessage> {
    a.podnet.step("move")?;
    let mut m = LinkMessage::default();
    m.header.index = a.entry.host.index;
    m.attributes
        .push(LinkAttribute::IfName(a.entry.pod_name.clone()));
    m.attributes
        .push(LinkAttribute::NetNsFd(a.pod.as_fd().as_raw_fd()));
    a.host
        .request(RouteNetlinkMessage::SetLink(m), 0)
        .await
        .map_err(at(format!("move into the pod as {}", a.entry.pod_name)))?;
    let link = a
        .podr
        .links()
        .await
        .map_err(at("find the link in the pod"))?
        .into_iter()
        .find(|l| identity::ours_in_pod(l, a.entry))
        .ok_or_else(|| {
            at("find the link in the pod")(io::Error::new(
                io::ErrorKind::NotFound,
                "moved, but not in the pod namespace",
            ))
        })?;
    a.pod_index = link.header.index;
    // Its identity in the pod, recorded before anything else changes: from here on, detach
    // and recovery know it by what the pod cannot forge.
    a.entry.pod_index = Some(a.pod_index);
    a.entry.pod_peer = identity::peer(&link);
    a.podnet
        .journal
        .write(a.entry)
        .map_err(|e| at("journal")(io::Error::other(e)))?;
    Ok(link)
}

/// `up`.
pub(in super::super) async fn up(a: &Attaching<'_>) -> StepResult<()> {
    a.podnet.step("up")?;
    a.podr
        .request(RouteNetlinkMessage::SetLink(set_up(a.pod_index, true)), 0)
        .await
        .map_err(at("set up"))
        .map(drop)
}

/// `detach:move`: the link found in the pod by identity goes back to the host under its host
/// name. When it is not there, a link under its pod name or index is described: the pod made
/// it, and it stays.
pub(in super::super) async fn move_out(
    podnet: &PodNet,
    podr: &Rtnl,
    e: &Entry,
) -> StepResult<Option<String>> {
    let links = podr.links().await.map_err(at("read the pod's links"))?;
    let Some(l) = links.iter().find(|l| identity::ours_in_pod(l, e)) else {
        return Ok(links
            .iter()
            .find(|l| {
                link_name(l) == Some(e.pod_name.as_str()) || Some(l.header.index) == e.pod_index
            })
            .map(identity::describe));
    };
    podnet.step("detach:move")?;
    let mut m = LinkMessage::default();
    m.header.index = l.header.index;
    m.attributes
        .push(LinkAttribute::IfName(e.host.name.clone()));
    m.attributes
        .push(LinkAttribute::NetNsFd(podnet.host.as_fd().as_raw_fd()));
    podr.request(RouteNetlinkMessage::SetLink(m), 0)
        .await
        .map_err(at(format!("move back to the host as {}", e.host.name)))?;
    Ok(None)
}

/// The link on the host: where we put it, where it never left (an attach that failed before
/// the move), or where the kernel returned it (a physical link whose namespace was deleted
/// comes back by itself, under whatever name it had in the pod). `None`: gone, which is only
/// believed once the pod's namespace is gone too (a virtual link dies with it).
pub(in super::super) async fn find_on_host(
    host: &Rtnl,
    e: &Entry,
    pod_exists: bool,
    substitute: Option<String>,
) -> StepResult<Option<LinkMessage>> {
    let links = host.links().await.map_err(at("read the host's links"))?;
    if let Some(link) = links
        .into_iter()
        .find(|l| identity::ours_on_host(l, &e.host))
    {
        return Ok(Some(link));
    }
    if !pod_exists {
        tracing::info!(link = %e.host.name, "link gone (a virtual link dies with its namespace); nothing to restore");
        return Ok(None);
    }
    let why = match substitute {
        Some(s) => format!(
            "{s} in the pod is not the link attached (its kind, hardware or peer differ): it \
             stays in the pod, and the journal keeps the entry"
        ),
        None => format!(
            "{} is neither in the pod, whose namespace still exists, nor on the host: the \
             journal keeps the entry until the namespace is gone",
            e.pod_name
        ),
    };
    Err(at("find the link")(io::Error::new(
        io::ErrorKind::NotFound,
        why,
    )))
}

/// `detach:up`: up again when the host had it up.
pub(in super::super) async fn up_again(podnet: &PodNet, r: &Restoring<'_>) -> StepResult<()> {
    if !r.entry.host.up {
        return Ok(());
    }
    podnet.step("detach:up")?;
    r.host
        .request(RouteNetlinkMessage::SetLink(set_up(r.index, true)), 0)
        .await
        .map_err(at("set up"))
        .map(drop)
}
