//! The link's own attributes: MTU, MAC and GSO/GRO sizes set in the pod from the claim, and at
//! detach the host's recorded name, MTU, MAC and sizes put back (the link set down first).

use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};

use super::super::messages::{parse_mac, set_up};
use super::super::{PodNet, StepResult, at};
use super::nonneg;
use super::{Attaching, Restoring};
use crate::netns::link_name;

/// `link`: the claim's MTU, MAC and GSO/GRO sizes, in one request.
pub(in super::super) async fn apply(a: &Attaching<'_>) -> StepResult<()> {
    a.podnet.step("link")?;
    let iface = &a.cfg.interface;
    let mut m = LinkMessage::default();
    m.header.index = a.pod_index;
    let mut what_set: Vec<String> = Vec::new();
    if let Some(mtu) = iface.mtu {
        m.attributes.push(LinkAttribute::Mtu(nonneg(mtu, "mtu")?));
        what_set.push(format!("mtu {mtu}"));
    }
    if let Some(mac) = &iface.hardware_addr {
        m.attributes
            .push(LinkAttribute::Address(parse_mac(mac).map_err(at("mac"))?));
        what_set.push(format!("hardwareAddr {mac}"));
    }
    for (value, what, attr) in [
        (
            iface.gso_max_size,
            "gsoMaxSize",
            LinkAttribute::GsoMaxSize as fn(u32) -> LinkAttribute,
        ),
        (iface.gro_max_size, "groMaxSize", LinkAttribute::GroMaxSize),
        (
            iface.gso_ipv4_max_size,
            "gsoIPv4MaxSize",
            LinkAttribute::GsoIpv4MaxSize,
        ),
        (
            iface.gro_ipv4_max_size,
            "groIPv4MaxSize",
            LinkAttribute::GroIpv4MaxSize,
        ),
    ] {
        if let Some(v) = value {
            m.attributes.push(attr(nonneg(v, what)?));
            what_set.push(format!("{what} {v}"));
        }
    }
    if !m.attributes.is_empty() {
        a.podr
            .request(RouteNetlinkMessage::SetLink(m), 0)
            .await
            .map_err(at(format!("set {}", what_set.join(", "))))?;
    }
    Ok(())
}

/// `detach:link`: the link `link` (as the host lists it now) set down, and its recorded name,
/// MTU, MAC and GSO/GRO sizes put back where they differ.
pub(in super::super) async fn restore(
    podnet: &PodNet,
    r: &Restoring<'_>,
    link: &LinkMessage,
) -> StepResult<()> {
    podnet.step("detach:link")?;
    let h = &r.entry.host;
    if link
        .header
        .flags
        .contains(rtnetlink::packet_route::link::LinkFlags::Up)
    {
        r.host
            .request(RouteNetlinkMessage::SetLink(set_up(r.index, false)), 0)
            .await
            .map_err(at("set down"))?;
    }
    let mut m = LinkMessage::default();
    m.header.index = r.index;
    if link_name(link) != Some(&h.name) {
        m.attributes.push(LinkAttribute::IfName(h.name.clone()));
    }
    if let Some(mtu) = h.mtu {
        m.attributes.push(LinkAttribute::Mtu(mtu));
    }
    let current_mac = link.attributes.iter().find_map(|a| match a {
        LinkAttribute::Address(x) => Some(x),
        _ => None,
    });
    if let Some(mac) = &h.mac
        && current_mac != Some(mac)
    {
        m.attributes.push(LinkAttribute::Address(mac.clone()));
    }
    for (want, attr) in [
        (
            h.gso_max_size,
            LinkAttribute::GsoMaxSize as fn(u32) -> LinkAttribute,
        ),
        (h.gro_max_size, LinkAttribute::GroMaxSize),
        (h.gso_ipv4_max_size, LinkAttribute::GsoIpv4MaxSize),
        (h.gro_ipv4_max_size, LinkAttribute::GroIpv4MaxSize),
    ] {
        if let Some(v) = want {
            let a = attr(v);
            if !link.attributes.contains(&a) {
                m.attributes.push(a);
            }
        }
    }
    r.host
        .request(RouteNetlinkMessage::SetLink(m), 0)
        .await
        .map_err(at(format!("restore {}: name, MTU, MAC, GSO/GRO", h.name)))
        .map(drop)
}
