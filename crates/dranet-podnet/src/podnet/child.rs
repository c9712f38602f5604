//! One NIC for many pods: [`PodNet::attach`] of a config whose `interface.type` is `IPVLAN` or
//! `Macvlan` leaves the NIC (the parent) on the host and creates a child of it directly in the
//! pod's namespace, under the claim's name, then gives it the claim's MTU, GSO/GRO sizes, ARP
//! sysctls, addresses, routes, rules and neighbours.
//!
//! Without claim routes, a child with addresses gets upstream's source-based routing: its source
//! table (upstream's [`table_for_name`] of its name, unless another interface of the pod has
//! that one: see `tables`) holding the on-link routes of its subnets, an on-link route to the
//! parent's gateway and a default route via it (when the host routes a default through the
//! parent), and one rule `from <address>` at priority [`SOURCE_RULE_PRIORITY`] per address:
//! replies leave by the interface their request came in on, beside the pod's own default route.
//!
//! A child never gets an address its parent has on the host ([`check_parent_addresses`]).
//!
//! [`table_for_name`]: dranet_core::interface_type::table_for_name
//!
//! The parent is never changed: not its state, addresses, MTU nor its being up. Deleting a
//! child (the pod stops, a failed attach rolls back, recovery finds its pod gone) removes that
//! child and the rules made for it, found by identity (its kind, index and parent), and nothing
//! else: not the parent, not another pod's child. A child whose pod namespace is gone was
//! deleted by the kernel with it, and a child already gone is success.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};

use dranet_core::interface_type::SOURCE_RULE_PRIORITY;
use dranet_core::{Addressing, InterfaceType, NetworkConfig, RouteConfig, RuleConfig};
use rtnetlink::packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::link::{
    InfoData, InfoIpVlan, InfoKind, InfoMacVlan, IpVlanFlags, IpVlanMode, LinkAttribute, LinkInfo,
    LinkMessage, MacVlanMode,
};
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};

use super::attach::{AttachRequest, Attached};
use super::child_journal::{CHILD_JOURNAL_VERSION, ChildEntry};
use super::journal::{Journal, Phase};
use super::messages::{address_message, neighbour_message, parse_cidr, parse_mac, rule_message};
use super::messages::{route_message, set_up};
use super::steps::{create, nonneg};
use super::{ENOENT, PodNet, RawMessage, StepResult, at, check_parent_addresses, identity};
use super::{is_errno, tables};
use crate::netns::{Netns, Rtnl, link_name};
use crate::{Error, Result};

const EOPNOTSUPP: i32 = 95;
const ESRCH: i32 = 3;
const ENODEV: i32 = 19;

impl PodNet {
    /// [`PodNet::attach`] of a child type.
    pub(super) async fn attach_child(&self, req: &AttachRequest<'_>) -> Result<Attached> {
        let ty = req.config.interface_type();
        let invalid = |reason: String| Error::InvalidConfig {
            device: req.link.to_string(),
            reason,
        };
        self.validate(req.link, req.config)?;
        if let Some(dev) = req.rdma_device
            && crate::rdma::netns_mode()? == crate::rdma::NetnsMode::Exclusive
        {
            return Err(invalid(format!(
                "interface type {} is not supported with the exclusive RDMA mode of this node \
                 (RDMA device {dev} can be in one namespace only); use shared RDMA mode",
                ty.as_str()
            )));
        }
        let file_key = super::child_journal::file_key(req.key, req.owner);
        Journal::check_key(&file_key)?;
        let _key = self.locks.key(&file_key).await;
        if let Some(e) = self.children.read(req.key, req.owner)? {
            if e.phase == Phase::Attached
                && e.parent == req.link
                && let Some(a) = self.child_still_there(&e).await?
            {
                return Ok(a);
            }
            self.remove_child_entry(&e).await?;
        }

        let (pod, pod_id) = self.open_pod(req.pod_netns)?;
        let host = self.host.rtnl().await?;
        let podr = pod.rtnl().await?;
        let step_err = |step: &str, source: io::Error| Error::Attach {
            link: req.link.to_string(),
            netns: req.pod_netns.to_path_buf(),
            step: step.to_string(),
            source,
            rollback: None,
        };
        let parent = host
            .link_by_name(req.link)
            .await
            .map_err(|e| step_err("read the host's links", e))?
            .ok_or_else(|| Error::LinkNotFound {
                link: req.link.to_string(),
                netns: self.host.path().to_path_buf(),
            })?;
        // The last line against a child with the host's address: the parent may have taken it
        // since prepare checked.
        let parent_ips = host
            .addresses(parent.header.index)
            .await
            .map_err(|e| step_err("read the parent's addresses", e))?;
        check_parent_addresses(req.config, &parent_ips).map_err(|r| invalid(r.to_string()))?;
        let pod_name = if req.config.interface.name.is_empty() {
            req.link.to_string()
        } else {
            req.config.interface.name.clone()
        };
        let gateways = if req.config.routes.is_empty() {
            parent_gateways(&host, parent.header.index)
                .await
                .map_err(|e| step_err("read the parent's routes", e))?
        } else {
            Vec::new()
        };
        let mut entry = ChildEntry {
            version: CHILD_JOURNAL_VERSION,
            key: req.key.to_string(),
            owner: req.owner.to_string(),
            pod_netns: req.pod_netns.to_path_buf(),
            pod_netns_id: pod_id,
            pod_name,
            pod_index: None,
            r#type: ty,
            parent: req.link.to_string(),
            parent_index: parent.header.index,
            phase: Phase::Attaching,
            pod_rules: Vec::new(),
        };
        if let Err(e) = self.step("journal") {
            return Err(step_err(&e.step, e.source));
        }
        self.children.write(&entry)?;
        let made = self
            .make_child(&host, &pod, &podr, &mut entry, req, &gateways)
            .await;
        let e = match made {
            Ok(a) => {
                entry.phase = Phase::Attached;
                match self.children.write(&entry) {
                    Ok(()) => return Ok(a),
                    Err(x) => at("journal")(io::Error::other(x)),
                }
            }
            Err(e) => e,
        };
        let rollback = match self.remove_child_entry(&entry).await {
            Ok(()) => None,
            Err(r) => Some(r.to_string()),
        };
        let source = if ty == InterfaceType::Ipvlan && is_errno(&e.source, EOPNOTSUPP) {
            io::Error::other(
                "this node's kernel has no ipvlan (CONFIG_IPVLAN); use interface.type: Macvlan \
                 or a node whose kernel has it",
            )
        } else {
            e.source
        };
        Err(Error::Attach {
            link: req.link.to_string(),
            netns: req.pod_netns.to_path_buf(),
            step: e.step,
            source,
            rollback,
        })
    }

    /// Creates the child in the pod and configures it, noting in `entry` what removal must undo.
    async fn make_child(
        &self,
        host: &Rtnl,
        pod: &Netns,
        podr: &Rtnl,
        entry: &mut ChildEntry,
        req: &AttachRequest<'_>,
        gateways: &[IpAddr],
    ) -> StepResult<Attached> {
        let cfg = req.config;
        let iface = &cfg.interface;
        let link = self.create_child(host, pod, podr, entry, cfg).await?;
        let index = link.header.index;
        self.child_link(pod, podr, entry, cfg, index).await?;

        let addresses = if cfg.addressing() == Addressing::Unnumbered {
            Vec::new()
        } else {
            iface.addresses.clone()
        };
        for cidr in &addresses {
            self.step("address")?;
            let (ip, len) = parse_cidr(cidr).map_err(at(format!("address {cidr}")))?;
            create(
                podr,
                RouteNetlinkMessage::NewAddress(address_message(index, ip, len)),
                format!("address {cidr}"),
            )
            .await?;
        }

        self.step("up")?;
        podr.request(RouteNetlinkMessage::SetLink(set_up(index, true)), 0)
            .await
            .map_err(at("set up"))?;

        let _pod_tables;
        let (routes, rules) = if tables::source_routed(cfg) {
            // Held until the routes and rules are in: two children of one pod choosing at once
            // would both find one table free.
            _pod_tables = self.locks.pod(entry.pod_netns_id).await;
            let table = tables::choose(podr, &entry.pod_name, req.source_table).await?;
            source_routing(table, &addresses, gateways)
        } else {
            (cfg.routes.clone(), Vec::new())
        };
        let mut routes: Vec<&RouteConfig> = routes.iter().collect();
        // Link-scope routes first: gateways of the others are reached through them.
        routes.sort_by_key(|r| !r.gateway.is_empty());
        for r in routes {
            self.step("route")?;
            let step = format!(
                "route {} via {} table {}",
                r.destination,
                or_none(&r.gateway),
                r.table
            );
            let msg = route_message(index, r).map_err(at(step.clone()))?;
            create(podr, RouteNetlinkMessage::NewRoute(msg), step).await?;
        }
        for r in rules.iter().chain(&cfg.rules) {
            self.step("rule")?;
            let step = format!(
                "rule priority {} from {} table {}",
                r.priority,
                or_none(&r.source),
                r.table
            );
            let msg = rule_message(r).map_err(at(step.clone()))?;
            let raw = RawMessage::new(&RouteNetlinkMessage::NewRule(msg.clone()));
            create(podr, RouteNetlinkMessage::NewRule(msg), step).await?;
            entry.pod_rules.push(raw);
            self.children
                .write(entry)
                .map_err(|e| at("journal")(io::Error::other(e)))?;
        }
        for n in &cfg.neighbors {
            self.step("neighbour")?;
            let step = format!("neighbour {} lladdr {}", n.destination, n.hardware_addr);
            let ip: IpAddr = n.destination.parse().map_err(|_| {
                at(step.clone())(io::Error::new(io::ErrorKind::InvalidInput, "not an IP"))
            })?;
            let mac = parse_mac(&n.hardware_addr).map_err(at(step.clone()))?;
            let msg = neighbour_message(index, ip, mac);
            create(podr, RouteNetlinkMessage::NewNeighbour(msg), step).await?;
        }
        let mut addresses = addresses;
        if cfg.addressing() == Addressing::Slaac {
            self.step("slaac")?;
            addresses.extend(
                super::steps::slaac::autoconfigured(
                    podr,
                    index,
                    &entry.pod_name,
                    self.slaac_timeout,
                )
                .await?,
            );
        }

        self.step("done")?;
        let link = podr
            .link_by_index(index)
            .await
            .map_err(at("read the child"))?
            .unwrap_or(link);
        Ok(attached(entry, &link, addresses))
    }

    /// `create`: the child made in the pod under its pod name, found there, and journaled.
    async fn create_child(
        &self,
        host: &Rtnl,
        pod: &Netns,
        podr: &Rtnl,
        entry: &mut ChildEntry,
        cfg: &NetworkConfig,
    ) -> StepResult<LinkMessage> {
        let iface = &cfg.interface;
        self.step("create")?;
        // Created by the host's socket (the parent's index is the host's) straight into the
        // pod's namespace: the child never exists on the host, under any name.
        let mut m = LinkMessage::default();
        m.attributes
            .push(LinkAttribute::IfName(entry.pod_name.clone()));
        m.attributes.push(LinkAttribute::Link(entry.parent_index));
        m.attributes
            .push(LinkAttribute::NetNsFd(pod.as_fd().as_raw_fd()));
        if let Some(mtu) = iface.mtu {
            m.attributes.push(LinkAttribute::Mtu(nonneg(mtu, "mtu")?));
        }
        m.attributes
            .push(LinkAttribute::LinkInfo(match entry.r#type {
                InterfaceType::Ipvlan => vec![
                    LinkInfo::Kind(InfoKind::IpVlan),
                    LinkInfo::Data(InfoData::IpVlan(vec![
                        InfoIpVlan::Mode(IpVlanMode::L2),
                        InfoIpVlan::Flags(IpVlanFlags::empty()),
                    ])),
                ],
                _ => vec![
                    LinkInfo::Kind(InfoKind::MacVlan),
                    LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(
                        MacVlanMode::Bridge,
                    )])),
                ],
            }));
        let what = format!(
            "create {} child {} of {}",
            entry.r#type.as_str(),
            entry.pod_name,
            entry.parent
        );
        host.request(RouteNetlinkMessage::NewLink(m), NLM_F_CREATE | NLM_F_EXCL)
            .await
            .map_err(at(what.clone()))?;
        let link = find_child(podr, entry)
            .await
            .map_err(at(what.clone()))?
            .ok_or_else(|| at(what)(io::Error::other("created, but not in the pod")))?;
        let index = link.header.index;
        entry.pod_index = Some(index);
        self.children
            .write(entry)
            .map_err(|e| at("journal")(io::Error::other(e)))?;
        Ok(link)
    }

    /// `link` and `sysctl`: the child's GSO/GRO sizes and its sysctls (as a moved link's).
    async fn child_link(
        &self,
        pod: &Netns,
        podr: &Rtnl,
        entry: &ChildEntry,
        cfg: &NetworkConfig,
        index: u32,
    ) -> StepResult<()> {
        let iface = &cfg.interface;
        self.step("link")?;
        let mut m = LinkMessage::default();
        m.header.index = index;
        for (value, attr) in [
            (
                iface.gso_max_size,
                LinkAttribute::GsoMaxSize as fn(u32) -> LinkAttribute,
            ),
            (iface.gro_max_size, LinkAttribute::GroMaxSize),
            (iface.gso_ipv4_max_size, LinkAttribute::GsoIpv4MaxSize),
            (iface.gro_ipv4_max_size, LinkAttribute::GroIpv4MaxSize),
        ] {
            if let Some(v) = value {
                m.attributes.push(attr(nonneg(v, "gso/gro size")?));
            }
        }
        if !m.attributes.is_empty() {
            podr.request(RouteNetlinkMessage::SetLink(m), 0)
                .await
                .map_err(at("set gso/gro sizes"))?;
        }

        self.step("sysctl")?;
        super::steps::sysctl::write(pod, &super::steps::sysctl::pairs(cfg, &entry.pod_name))
    }

    /// The answer to a retry of a completed attach, if the child is still in the pod.
    async fn child_still_there(&self, e: &ChildEntry) -> Result<Option<Attached>> {
        let Some(pod) = self.child_netns(e)? else {
            return Ok(None);
        };
        let podr = pod.rtnl().await?;
        let found = find_child(&podr, e).await.map_err(|x| Error::Attach {
            link: e.parent.clone(),
            netns: e.pod_netns.clone(),
            step: "read the pod's links".into(),
            source: x,
            rollback: None,
        })?;
        Ok(found.map(|l| attached(e, &l, Vec::new())))
    }

    /// Deletes the child of pod `owner` made under `key`, and its rules. Nothing recorded is
    /// success (already removed); on failure the record stays for the next try.
    pub async fn detach_child(&self, key: &str, owner: &str) -> Result<()> {
        let file_key = super::child_journal::file_key(key, owner);
        Journal::check_key(&file_key)?;
        let _key = self.locks.key(&file_key).await;
        let Some(mut e) = self.children.read(key, owner)? else {
            return Ok(());
        };
        e.phase = Phase::Detaching;
        if let Err(x) = self.children.write(&e) {
            tracing::warn!(key, owner, error = %x, "could not mark the child as detaching; detaching anyway");
        }
        self.remove_child_entry(&e).await
    }

    /// Deletes every child `owner` holds (the pod stopped).
    pub async fn detach_children_of(&self, owner: &str) -> Result<()> {
        let mut first_err = None;
        for e in self.children.entries()? {
            if e.owner == owner
                && let Err(x) = self.detach_child(&e.key, &e.owner).await
            {
                tracing::error!(key = %e.key, owner, error = %x, "could not delete a pod's child; recovery retries");
                first_err.get_or_insert(x);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// At start: deletes the children of pods `live` says are gone, and those whose attach did
    /// not complete. Keys of what was removed and what failed.
    pub async fn recover_children(
        &self,
        live: impl Fn(&str) -> bool,
    ) -> Result<(Vec<String>, Vec<(String, Error)>)> {
        let (mut removed, mut failed) = (Vec::new(), Vec::new());
        for listed in self.children.entries()? {
            let fk = listed.file_key();
            let _key = self.locks.key(&fk).await;
            let Some(e) = self.children.read(&listed.key, &listed.owner)? else {
                continue;
            };
            if e.phase == Phase::Attached && live(&e.owner) {
                continue;
            }
            match self.remove_child_entry(&e).await {
                Ok(()) => removed.push(fk),
                Err(x) => failed.push((fk, x)),
            }
        }
        Ok((removed, failed))
    }

    /// The children journal.
    pub fn children(&self) -> &super::ChildJournal {
        &self.children
    }

    /// Deletes the child of `e` and its rules, then the entry.
    async fn remove_child_entry(&self, e: &ChildEntry) -> Result<()> {
        let fail = |step: &str, source: io::Error| Error::Detach {
            link: e.parent.clone(),
            netns: e.pod_netns.clone(),
            step: step.to_string(),
            source,
        };
        if let Some(pod) = self.child_netns(e)? {
            let podr = pod.rtnl().await?;
            self.step("delete").map_err(|x| fail(&x.step, x.source))?;
            if let Some(l) = find_child(&podr, e)
                .await
                .map_err(|x| fail("read the pod's links", x))?
            {
                let mut m = LinkMessage::default();
                m.header.index = l.header.index;
                match podr.request(RouteNetlinkMessage::DelLink(m), 0).await {
                    Ok(_) => {}
                    Err(x) if is_errno(&x, ENOENT) || is_errno(&x, ENODEV) => {}
                    Err(x) => return Err(fail(&format!("delete child {}", e.pod_name), x)),
                }
            }
            for r in &e.pod_rules {
                let Ok(RouteNetlinkMessage::NewRule(msg)) = r.decode() else {
                    tracing::warn!(rule = %r.summary, "a recorded rule does not decode; left in the pod");
                    continue;
                };
                match podr.request(RouteNetlinkMessage::DelRule(msg), 0).await {
                    Ok(_) => {}
                    Err(x) if is_errno(&x, ENOENT) || is_errno(&x, ESRCH) => {}
                    Err(x) => return Err(fail(&format!("delete {}", r.summary), x)),
                }
            }
        }
        // Namespace gone: the kernel deleted the child with it, and its rules.
        self.children.remove(&e.key, &e.owner)
    }

    /// The entry's pod namespace, if it still exists and is the one the child was made in.
    fn child_netns(&self, e: &ChildEntry) -> Result<Option<Netns>> {
        if let Err(x) = std::fs::symlink_metadata(&e.pod_netns)
            && x.kind() == io::ErrorKind::NotFound
        {
            return Ok(None);
        }
        let pod = Netns::open(&e.pod_netns)?;
        Ok((pod.id()? == e.pod_netns_id).then_some(pod))
    }
}

/// Our child in the pod: of our kind, hanging off our parent in another namespace, at the
/// recorded index (or, before the index was recorded, under the recorded name). A pod can copy
/// a name, but cannot make a link whose lower device is the host's parent.
async fn find_child(podr: &Rtnl, e: &ChildEntry) -> io::Result<Option<LinkMessage>> {
    let kind = match e.r#type {
        InterfaceType::Ipvlan => "ipvlan",
        _ => "macvlan",
    };
    Ok(podr.links().await?.into_iter().find(|l| {
        let at_place = match e.pod_index {
            Some(i) => l.header.index == i,
            None => link_name(l) == Some(e.pod_name.as_str()),
        };
        let peer = identity::peer(l);
        at_place
            && identity::kind(l).as_deref() == Some(kind)
            && peer.is_some_and(|p| p.index == e.parent_index && p.netnsid.is_some())
    }))
}

/// The gateways of the host's default routes through the parent (main table), one per family.
async fn parent_gateways(host: &Rtnl, parent: u32) -> io::Result<Vec<IpAddr>> {
    let mut out: Vec<IpAddr> = Vec::new();
    for m in host
        .dump(RouteNetlinkMessage::GetRoute(RouteMessage::default()))
        .await?
    {
        let RouteNetlinkMessage::NewRoute(r) = m else {
            continue;
        };
        if r.header.destination_prefix_length != 0 || r.header.table != 254 {
            continue;
        }
        let oif = r.attributes.iter().find_map(|a| match a {
            RouteAttribute::Oif(i) => Some(*i),
            _ => None,
        });
        let gw = r.attributes.iter().find_map(|a| match a {
            RouteAttribute::Gateway(RouteAddress::Inet(v)) => Some(IpAddr::V4(*v)),
            RouteAttribute::Gateway(RouteAddress::Inet6(v)) => Some(IpAddr::V6(*v)),
            _ => None,
        });
        if let (Some(i), Some(g)) = (oif, gw)
            && i == parent
            && !out.iter().any(|o| o.is_ipv4() == g.is_ipv4())
        {
            out.push(g);
        }
    }
    Ok(out)
}

/// Upstream's source-based routing for a child without claim routes, in `table` (see the
/// module docs).
fn source_routing(
    table: u32,
    addresses: &[String],
    gateways: &[IpAddr],
) -> (Vec<RouteConfig>, Vec<RuleConfig>) {
    let (mut routes, mut rules) = (Vec::new(), Vec::new());
    for cidr in addresses {
        let Ok((ip, len)) = parse_cidr(cidr) else {
            continue;
        };
        let host_len = if ip.is_ipv4() { 32 } else { 128 };
        routes.push(RouteConfig {
            destination: network(ip, len),
            source: ip.to_string(),
            table,
            ..Default::default()
        });
        if let Some(gw) = gateways.iter().find(|g| g.is_ipv4() == ip.is_ipv4()) {
            let gw_route = format!("{gw}/{host_len}");
            if !routes.iter().any(|r| r.destination == gw_route) {
                routes.push(RouteConfig {
                    destination: gw_route,
                    table,
                    ..Default::default()
                });
                routes.push(RouteConfig {
                    destination: if ip.is_ipv4() { "0.0.0.0/0" } else { "::/0" }.into(),
                    gateway: gw.to_string(),
                    table,
                    ..Default::default()
                });
            }
        }
        rules.push(RuleConfig {
            priority: SOURCE_RULE_PRIORITY,
            source: format!("{ip}/{host_len}"),
            table,
            ..Default::default()
        });
    }
    (routes, rules)
}

/// The network of `ip/len` in CIDR form.
fn network(ip: IpAddr, len: u8) -> String {
    format!("{}/{len}", super::messages::network_of(ip, len))
}

fn attached(e: &ChildEntry, l: &LinkMessage, addresses: Vec<String>) -> Attached {
    Attached {
        pod_name: e.pod_name.clone(),
        pod_index: l.header.index,
        addresses,
        mac: l.attributes.iter().find_map(|a| match a {
            LinkAttribute::Address(m) => Some(super::format_mac(m)),
            _ => None,
        }),
        mtu: l.attributes.iter().find_map(|a| match a {
            LinkAttribute::Mtu(m) => Some(*m),
            _ => None,
        }),
    }
}

fn or_none(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_routing_is_upstreams_table_routes_and_rule() {
        let gw: IpAddr = "10.0.0.1".parse().unwrap();
        let t = dranet_core::interface_type::table_for_name("net1");
        let (routes, rules) = source_routing(t, &["10.0.0.5/24".into()], &[gw]);
        let dst: Vec<(&str, &str)> = routes
            .iter()
            .map(|r| (r.destination.as_str(), r.gateway.as_str()))
            .collect();
        assert_eq!(
            dst,
            [
                ("10.0.0.0/24", ""),
                ("10.0.0.1/32", ""),
                ("0.0.0.0/0", "10.0.0.1")
            ]
        );
        assert!(routes.iter().all(|r| r.table == t));
        assert_eq!(rules.len(), 1);
        assert_eq!(
            (rules[0].priority, rules[0].source.as_str(), rules[0].table),
            (32000, "10.0.0.5/32", t)
        );
        // No gateway through the parent: the subnet only; IPv6 gets /128 rules.
        let (routes, rules) = source_routing(t, &["fd00::5/64".into()], &[gw]);
        assert_eq!(routes.len(), 1);
        assert_eq!(routes[0].destination, "fd00::/64");
        assert_eq!(rules[0].source, "fd00::5/128");
    }
}
