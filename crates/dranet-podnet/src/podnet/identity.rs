//! Which link is the one given to a pod, by what a pod with `CAP_NET_ADMIN` cannot forge: a
//! name, an index or a MAC it can copy onto a link of its own making, so none of them alone is
//! enough.
//!
//! - A physical link (a PCI function, an SR-IOV VF, an IPoIB port) has a parent device and
//!   usually a permanent MAC: those, and its kind, identify it wherever it is.
//! - A virtual link (veth, macvlan) has neither. It is known by its kind, its index in the pod
//!   and the link it hangs off (its veth peer or macvlan lower device, which stays in the host's
//!   namespace) as the pod sees it, all recorded in the journal right after the move. A pod can
//!   make a link of the same name, index and MAC, but not one whose peer is the host's.
//!   The peer may move on: upstream's VRF and PBR scenarios give both ends of a veth pair to
//!   pods (a pod and its router), so the peer's namespace id, as the pod sees it, changes. What
//!   stays is the peer's index and its being in another namespace than the pod, which a pod
//!   cannot arrange without an fd of a namespace other than its own (`CAP_SYS_ADMIN`).

use rtnetlink::packet_route::link::{LinkAttribute, LinkInfo, LinkMessage};

use super::journal::Entry;
use super::state::{HostLink, Peer};
use crate::netns::link_name;

/// The link's kind (`veth`, `macvlan`, `ipoib`), none for a physical NIC.
pub(super) fn kind(l: &LinkMessage) -> Option<String> {
    l.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
            LinkInfo::Kind(k) => Some(k.to_string()),
            _ => None,
        }),
        _ => None,
    })
}

/// The link `l` hangs off, if any.
pub(super) fn peer(l: &LinkMessage) -> Option<Peer> {
    let index = l.attributes.iter().find_map(|a| match a {
        LinkAttribute::Link(i) => Some(*i),
        _ => None,
    })?;
    let netnsid = l.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkNetNsId(id) => Some(*id),
        _ => None,
    });
    Some(Peer { index, netnsid })
}

fn mac(l: &LinkMessage) -> Option<&Vec<u8>> {
    l.attributes.iter().find_map(|a| match a {
        LinkAttribute::Address(m) => Some(m),
        _ => None,
    })
}

/// Whether the recorded link has a hardware identity (parent device or permanent MAC).
fn physical(h: &HostLink) -> bool {
    h.parent_dev.is_some() || h.perm_mac.is_some()
}

/// Whether `l` has the recorded link's parent device and permanent MAC.
fn same_hardware(l: &LinkMessage, h: &HostLink) -> bool {
    let parent = l.attributes.iter().find_map(|a| match a {
        LinkAttribute::ParentDevName(p) => Some(p.as_str()),
        _ => None,
    });
    let perm = l.attributes.iter().find_map(|a| match a {
        LinkAttribute::PermAddress(m) if m.iter().any(|b| *b != 0) => Some(m),
        _ => None,
    });
    h.parent_dev.as_deref().is_none_or(|p| parent == Some(p))
        && h.perm_mac.as_ref().is_none_or(|m| perm == Some(m))
}

/// Whether `l`, a link in the pod's namespace, is the one `e` gave the pod.
pub(super) fn ours_in_pod(l: &LinkMessage, e: &Entry) -> bool {
    let h = &e.host;
    if kind(l) != h.kind {
        return false;
    }
    if physical(h) {
        return same_hardware(l, h);
    }
    match e.pod_index {
        Some(index) => l.header.index == index && e.pod_peer.is_none_or(|p| same_peer(l, p)),
        // Right after the move, before the journal has its index: nothing but its name has
        // changed, and its peer is in another namespace (the host's).
        None => {
            let name = link_name(l);
            (name == Some(e.pod_name.as_str()) || name == Some(h.name.as_str()))
                && mac(l) == h.mac.as_ref()
                && h.peer_index
                    .is_none_or(|i| peer(l).is_some_and(|p| p.index == i && p.netnsid.is_some()))
        }
    }
}

/// Whether `l` hangs off the recorded peer `p`: the same index, in the same namespace as
/// recorded or, for a peer recorded in another namespace, in another namespace still (it moved
/// from the host into another pod).
fn same_peer(l: &LinkMessage, p: Peer) -> bool {
    peer(l).is_some_and(|now| {
        now.index == p.index
            && (now.netnsid == p.netnsid || (p.netnsid.is_some() && now.netnsid.is_some()))
    })
}

/// Whether `l`, a link in the host's namespace, is the recorded one: by its hardware, or (a
/// virtual link, which comes back only when moved back, under its host name) by name, kind and
/// peer.
pub(super) fn ours_on_host(l: &LinkMessage, h: &HostLink) -> bool {
    if kind(l) != h.kind {
        return false;
    }
    if physical(h) {
        return same_hardware(l, h);
    }
    link_name(l) == Some(h.name.as_str())
        && h.peer_index
            .is_none_or(|i| peer(l).map(|p| p.index) == Some(i))
}

/// What a link found under the pod's name or index is, for the message refusing it.
pub(super) fn describe(l: &LinkMessage) -> String {
    format!(
        "{} (index {}, kind {})",
        link_name(l).unwrap_or("?"),
        l.header.index,
        kind(l).as_deref().unwrap_or("none")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn veth_to(index: u32, netnsid: Option<i32>) -> LinkMessage {
        let mut l = LinkMessage::default();
        l.attributes.push(LinkAttribute::Link(index));
        if let Some(id) = netnsid {
            l.attributes.push(LinkAttribute::LinkNetNsId(id));
        }
        l
    }

    #[test]
    fn a_peer_that_moved_to_another_namespace_is_still_the_peer() {
        let recorded = Peer {
            index: 18,
            netnsid: Some(0),
        };
        assert!(same_peer(&veth_to(18, Some(0)), recorded));
        // The peer went from the host into the router pod: another id, another namespace still.
        assert!(same_peer(&veth_to(18, Some(3)), recorded));
        // A peer in the pod's own namespace is one the pod made; another index is another link.
        assert!(!same_peer(&veth_to(18, None), recorded));
        assert!(!same_peer(&veth_to(19, Some(3)), recorded));
        let local = Peer {
            index: 5,
            netnsid: None,
        };
        assert!(same_peer(&veth_to(5, None), local));
        assert!(!same_peer(&veth_to(5, Some(1)), local));
    }
}
