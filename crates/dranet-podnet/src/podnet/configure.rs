//! Configuring a link in the pod, one step at a time: the move into its namespace (under its
//! pod name), its identity in the pod journaled, then its MTU, MAC and GSO/GRO sizes, its RDMA
//! device, sysctls, VRF, addresses, up, ethtool, eBPF programs detached, then routes, rules and
//! neighbours. What detach
//! must undo besides the host's recorded state (the pod's rules, a VRF we created, an RDMA
//! device moved in exclusive mode) is noted in the journal entry as it is done.

use std::collections::BTreeMap;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;

use dranet_core::{NetworkConfig, RouteConfig};
use rtnetlink::packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::link::{
    InfoData, InfoKind, InfoVrf, LinkAttribute, LinkInfo, LinkMessage,
};

use super::carry;
use super::journal::Entry;
use super::messages::{
    address_message, l3mdev_rules, neighbour_message, parse_cidr, parse_mac, route_message,
    rule_message, set_up,
};
use super::{
    EEXIST, EHOSTUNREACH, ENETUNREACH, PodNet, RawMessage, StepResult, at, identity, is_errno,
    state,
};
use crate::Error;
use crate::netns::{Netns, Rtnl};

/// What goes to the pod besides the link's netlink configuration: ethtool settings (kernel
/// feature names) and the RDMA device.
#[derive(Debug, Default)]
pub(super) struct Extras {
    pub(super) features: BTreeMap<String, bool>,
    pub(super) private_flags: BTreeMap<String, bool>,
    pub(super) rdma_device: Option<String>,
}

impl PodNet {
    /// Moves the link into `pod` and applies `cfg` there, recording in `entry` what detach must
    /// undo; the link as the pod has it, and the addresses it got.
    pub(super) async fn configure(
        &self,
        host: &Rtnl,
        pod: &Netns,
        podr: &Rtnl,
        entry: &mut Entry,
        cfg: &NetworkConfig,
        eth: &Extras,
    ) -> StepResult<(LinkMessage, Vec<String>)> {
        let rdma_device = eth.rdma_device.as_deref();
        let (features, private_flags) = (&eth.features, &eth.private_flags);
        let index = entry.host.index;
        let iface = &cfg.interface;

        // The move alone, with the pod name: the kernel uses it at once when the host name is
        // taken in the pod (every pod has an eth0) and renames it right after the move
        // otherwise. Nothing else goes in this request: the kernel applies the rest after the
        // move, so a value it refuses would leave the link in the pod under whatever name it
        // had got to. The name was checked as the kernel checks it.
        self.step("move")?;
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.attributes
            .push(LinkAttribute::IfName(entry.pod_name.clone()));
        m.attributes
            .push(LinkAttribute::NetNsFd(pod.as_fd().as_raw_fd()));
        host.request(RouteNetlinkMessage::SetLink(m), 0)
            .await
            .map_err(at(format!("move into the pod as {}", entry.pod_name)))?;
        let link = podr
            .links()
            .await
            .map_err(at("find the link in the pod"))?
            .into_iter()
            .find(|l| identity::ours_in_pod(l, entry))
            .ok_or_else(|| {
                at("find the link in the pod")(io::Error::new(
                    io::ErrorKind::NotFound,
                    "moved, but not in the pod namespace",
                ))
            })?;
        let pod_index = link.header.index;
        // Its identity in the pod, recorded before anything else changes: from here on, detach
        // and recovery know it by what the pod cannot forge.
        entry.pod_index = Some(pod_index);
        entry.pod_peer = identity::peer(&link);
        self.journal
            .write(entry)
            .map_err(|e| at("journal")(io::Error::other(e)))?;

        self.step("link")?;
        let mut m = LinkMessage::default();
        m.header.index = pod_index;
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
            podr.request(RouteNetlinkMessage::SetLink(m), 0)
                .await
                .map_err(at(format!("set {}", what_set.join(", "))))?;
        }

        if let Some(dev) = rdma_device {
            self.step("rdma")?;
            let rdma_err = |e: Error| at(format!("rdma device {dev}"))(io::Error::other(e));
            if crate::rdma::netns_mode().map_err(rdma_err)? == crate::rdma::NetnsMode::Exclusive {
                // Recorded before the move, so a crash right after it is undone too.
                entry.rdma_device = Some(dev.to_string());
                self.journal
                    .write(entry)
                    .map_err(|e| at("journal")(io::Error::other(e)))?;
                crate::rdma::move_device(dev, &self.host, pod).map_err(rdma_err)?;
            }
        }

        self.step("sysctl")?;
        let name = entry.pod_name.clone();
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
        if !sysctls.is_empty() {
            pod.run(|| {
                for (k, v) in &sysctls {
                    std::fs::write(Path::new("/proc/sys/net").join(k), v)
                        .map_err(|e| at(format!("sysctl {k}={v}"))(e))?;
                }
                Ok(())
            })
            .map_err(|e| at("sysctl")(io::Error::other(e)))??;
        }

        if let Some(vrf) = &iface.vrf {
            self.step("vrf")?;
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
                    entry.pod_vrf = Some(vrf.name.clone());
                    entry.pod_l3mdev_rules = !had_l3mdev;
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
            m.header.index = pod_index;
            m.attributes
                .push(LinkAttribute::Controller(vrf_link.header.index));
            podr.request(RouteNetlinkMessage::SetLink(m), 0)
                .await
                .map_err(at(vrf_step))?;
            // Sockets not bound to the VRF accept its TCP and UDP traffic, as upstream sets it
            // (namespace-wide: the pod's own sysctls, gone with it).
            pod.run(|| {
                ["tcp_l3mdev_accept", "udp_l3mdev_accept"]
                    .iter()
                    .try_for_each(|k| std::fs::write(format!("/proc/sys/net/ipv4/{k}"), "1"))
            })
            .map_err(|e| at("vrf sysctls")(io::Error::other(e)))?
            .map_err(at("vrf sysctls"))?;
        }

        let vrf_table = iface.vrf.as_ref().map(|v| v.table_id());
        let addresses = if iface.addresses.is_empty() {
            state::global_addresses(&entry.host)
        } else {
            iface.addresses.clone()
        };
        for cidr in &addresses {
            self.step("address")?;
            let step = format!("address {cidr}");
            let (ip, len) = parse_cidr(cidr).map_err(at(step.clone()))?;
            let msg = address_message(pod_index, ip, len);
            create(podr, RouteNetlinkMessage::NewAddress(msg), step).await?;
        }

        self.step("up")?;
        podr.request(RouteNetlinkMessage::SetLink(set_up(pod_index, true)), 0)
            .await
            .map_err(at("set up"))?;

        if !features.is_empty() || !private_flags.is_empty() {
            self.step("ethtool")?;
            let ethtool_err = |e: Error| at("ethtool")(io::Error::other(e));
            crate::ethtool::set_features(pod, &entry.pod_name, features).map_err(ethtool_err)?;
            crate::ethtool::set_private_flags(pod, &entry.pod_name, private_flags)
                .map_err(ethtool_err)?;
        }

        if iface.disable_ebpf_programs == Some(true) {
            self.step("ebpf")?;
            super::ebpf::detach_all(pod, podr, pod_index).await?;
        }

        let pod_ips = carry::address_ips(&addresses).map_err(at("the pod's addresses"))?;
        let carried = carry::carried(
            &entry.host,
            &carry::PodSide {
                index: pod_index,
                name: &entry.pod_name,
                addresses: &pod_ips,
                vrf_table,
                config: cfg,
            },
        )
        .map_err(at("read the host's routes, rules and neighbours"))?;
        // The host's routes first: a claim route may go through one of them. Addresses the
        // claim chose may not reach a host route's gateway; that route stays behind.
        let own_addresses = !iface.addresses.is_empty();
        for r in carried.routes {
            self.step("route")?;
            let step = format!("copy the host's route {}", carry::describe(&r));
            match podr
                .request(RouteNetlinkMessage::NewRoute(r), NLM_F_CREATE | NLM_F_EXCL)
                .await
            {
                Ok(_) => {}
                // The pod's kernel made it already (from an address).
                Err(e) if is_errno(&e, EEXIST) => {}
                Err(e)
                    if own_addresses
                        && (is_errno(&e, ENETUNREACH) || is_errno(&e, EHOSTUNREACH)) =>
                {
                    tracing::warn!(
                        route = step,
                        "the claim's addresses do not reach the gateway; not copied"
                    );
                }
                Err(e) => return Err(at(step)(e)),
            }
        }

        // Link-scope routes first: gateways of the others are reached through them.
        let mut routes: Vec<_> = cfg.routes.iter().collect();
        routes.sort_by_key(|r| !r.gateway.is_empty());
        for r in routes {
            self.step("route")?;
            let step = if r.gateway.is_empty() {
                format!("route {}", r.destination)
            } else {
                format!("route {} via {}", r.destination, r.gateway)
            };
            // In a VRF, every route of the interface goes to the VRF's table, as upstream
            // does: a route elsewhere is not seen by what the VRF routes.
            let in_vrf;
            let r = match vrf_table {
                Some(table) => {
                    in_vrf = RouteConfig { table, ..r.clone() };
                    &in_vrf
                }
                None => r,
            };
            let msg = route_message(pod_index, r).map_err(at(step.clone()))?;
            create(podr, RouteNetlinkMessage::NewRoute(msg), step).await?;
        }

        for r in &cfg.rules {
            self.step("rule")?;
            let step = format!(
                "rule priority {} from {} to {} table {}",
                r.priority,
                or_all(&r.source),
                or_all(&r.destination),
                r.table
            );
            let msg = rule_message(r).map_err(at(step.clone()))?;
            let raw = RawMessage::new(&RouteNetlinkMessage::NewRule(msg.clone()));
            create(podr, RouteNetlinkMessage::NewRule(msg), step).await?;
            entry.pod_rules.push(raw);
        }

        for n in &cfg.neighbors {
            self.step("neighbour")?;
            let step = format!("neighbour {} lladdr {}", n.destination, n.hardware_addr);
            let ip: IpAddr = n.destination.parse().map_err(|e| {
                at(step.clone())(io::Error::new(io::ErrorKind::InvalidInput, format!("{e}")))
            })?;
            let mac = parse_mac(&n.hardware_addr).map_err(at(step.clone()))?;
            let msg = neighbour_message(pod_index, ip, mac);
            create(podr, RouteNetlinkMessage::NewNeighbour(msg), step).await?;
        }

        // The host's rules and neighbours after the claim's: an equal one the claim (or another
        // NIC of the pod) made already is not ours to record.
        for r in carried.rules {
            self.step("rule")?;
            let raw = RawMessage::new(&RouteNetlinkMessage::NewRule(r.clone()));
            let step = format!("copy the host's rule {}", raw.summary);
            match podr
                .request(RouteNetlinkMessage::NewRule(r), NLM_F_CREATE | NLM_F_EXCL)
                .await
            {
                Ok(_) => entry.pod_rules.push(raw),
                Err(e) if is_errno(&e, EEXIST) => {}
                Err(e) => return Err(at(step)(e)),
            }
        }
        for n in carried.neighbours {
            self.step("neighbour")?;
            let raw = RawMessage::new(&RouteNetlinkMessage::NewNeighbour(n.clone()));
            let step = format!("copy the host's neighbour {}", raw.summary);
            match podr
                .request(
                    RouteNetlinkMessage::NewNeighbour(n),
                    NLM_F_CREATE | NLM_F_EXCL,
                )
                .await
            {
                Ok(_) => {}
                Err(e) if is_errno(&e, EEXIST) => {}
                Err(e) => return Err(at(step)(e)),
            }
        }

        self.step("done")?;
        let link = podr
            .link_by_index(pod_index)
            .await
            .map_err(at("read the link in the pod"))?
            .unwrap_or(link);
        Ok((link, addresses))
    }
}

/// Adds `msg` in the pod. One that exists already is an error: the pod's is not ours to take
/// over, nor to remove at detach.
pub(super) async fn create(podr: &Rtnl, msg: RouteNetlinkMessage, step: String) -> StepResult<()> {
    podr.request(msg, NLM_F_CREATE | NLM_F_EXCL)
        .await
        .map(drop)
        .map_err(at(step))
}

pub(super) fn nonneg(v: i32, what: &str) -> StepResult<u32> {
    u32::try_from(v).map_err(|_| {
        at(what.to_string())(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {v} is negative"),
        ))
    })
}

fn or_all(s: &str) -> &str {
    if s.is_empty() { "all" } else { s }
}
