//! Giving the host its link back: [`PodNet::detach`] when the pod stops, [`PodNet::recover`] at
//! start for what a crash left behind. The link (and its RDMA device) leaves the pod, what the
//! pod got around it (rules, a VRF) goes, and the host's recorded state is replayed.
//!
//! The link is found by its identity (see `identity`), never by name alone: a substitute the
//! pod made stays in the pod, and while the pod's namespace exists a link not found there nor
//! on the host is an error (the entry is kept), never "gone". Nothing here writes new data to
//! the state directory, so a full disk does not keep a link from the host.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use rtnetlink::packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use rtnetlink::packet_route::neighbour::NeighbourAttribute;
use rtnetlink::packet_route::route::RouteAttribute;

use super::journal::{Entry, Journal, Phase};
use super::messages::{l3mdev_rules, set_up};
use super::{EEXIST, ENOENT, ESRCH, PodNet, RawMessage, StepResult, at, identity, is_errno};
use crate::netns::{Netns, link_name};
use crate::{Error, Result};

/// What [`PodNet::recover`] did.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Entries of live owners, left alone.
    pub kept: Vec<String>,
    /// Entries whose link the host got back.
    pub restored: Vec<String>,
    /// Entries whose link no longer exists (a virtual link dies with its namespace).
    pub gone: Vec<String>,
    /// Entries that could not be restored, with why; kept for the next try.
    pub failed: Vec<(String, Error)>,
}

/// Whether a restore found the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Restored {
    Restored,
    Gone,
}

impl PodNet {
    /// Gives the host back the link attached under `key`: moves it out of the pod and restores
    /// what the host had. Nothing recorded under `key` is not an error (already detached). On
    /// failure the record stays and the next detach or [`PodNet::recover`] tries again.
    pub async fn detach(&self, key: &str) -> Result<()> {
        Journal::check_key(key)?;
        let _key = self.locks.key(key).await;
        let Some(mut entry) = self.journal.read(key)? else {
            return Ok(());
        };
        let _link = self.locks.links(&[&entry.host.name]).await;
        entry.phase = Phase::Detaching;
        // The phase tells a restarted daemon to finish the detach even if the pod still runs;
        // without it recovery waits for the pod to stop. Not worth failing the detach for (a
        // full state directory): removing the entry at the end needs no space.
        if let Err(e) = self.journal.write(&entry) {
            tracing::warn!(key, error = %e, "could not mark the journal entry as detaching; detaching anyway");
        }
        self.restore_entry(&entry).await?;
        self.journal.remove(key)
    }

    /// At start: for each journal entry, if `live` says its owner still runs and the attach
    /// completed, leaves it; otherwise gives the host the link back. Entries are taken one at a
    /// time under their key's lock, so it may run beside attaches and detaches.
    pub async fn recover(&self, live: impl Fn(&Entry) -> bool) -> Result<Recovery> {
        let mut out = Recovery::default();
        for listed in self.journal.entries()? {
            let _key = self.locks.key(&listed.key).await;
            // Read again under the lock: an attach or detach may have moved it on.
            let Some(e) = self.journal.read(&listed.key)? else {
                continue;
            };
            let _link = self.locks.links(&[&e.host.name]).await;
            if e.phase == Phase::Attached && live(&e) {
                out.kept.push(e.key);
                continue;
            }
            match self.restore_entry(&e).await {
                Ok(r) => {
                    self.journal.remove(&e.key)?;
                    match r {
                        Restored::Restored => out.restored.push(e.key),
                        Restored::Gone => out.gone.push(e.key),
                    }
                }
                Err(err) => {
                    tracing::warn!(key = %e.key, link = %e.host.name, error = %err, "could not give the host its link back; will retry");
                    out.failed.push((e.key, err));
                }
            }
        }
        Ok(out)
    }

    /// The entry's pod namespace, if it still exists and is the one attached to (not another
    /// namespace mounted at the same path since).
    pub(super) fn pod_netns(&self, e: &Entry) -> Result<Option<Netns>> {
        if let Err(x) = std::fs::symlink_metadata(&e.pod_netns)
            && x.kind() == io::ErrorKind::NotFound
        {
            return Ok(None);
        }
        let pod = Netns::open(&e.pod_netns)?;
        Ok((pod.id()? == e.pod_netns_id).then_some(pod))
    }

    /// Gives the host back the link of `e`; a failure names the step.
    pub(super) async fn restore_entry(&self, e: &Entry) -> Result<Restored> {
        self.restore(e).await.map_err(|x| Error::Detach {
            link: e.host.name.clone(),
            netns: e.pod_netns.clone(),
            step: x.step,
            source: x.source,
        })
    }

    async fn restore(&self, e: &Entry) -> StepResult<Restored> {
        let host = self
            .host
            .rtnl()
            .await
            .map_err(|x| at("open the host namespace")(io::Error::other(x)))?;
        let h = &e.host;

        // 1. Out of the pod, when its namespace still exists and is the one we attached to.
        let pod = self
            .pod_netns(e)
            .map_err(|x| at("open the pod namespace")(io::Error::other(x)))?;
        let pod_exists = pod.is_some();
        // A link under our name or index that is not ours: the pod made it.
        let mut substitute: Option<String> = None;
        if let Some(pod) = pod {
            let podr = pod
                .rtnl()
                .await
                .map_err(|x| at("open the pod namespace")(io::Error::other(x)))?;
            // The RDMA device first: in exclusive mode it belongs to the namespace, and the
            // link's verbs users see it go before the netdev does.
            if let Some(dev) = &e.rdma_device {
                self.step("detach:rdma")?;
                let in_pod = crate::rdma::devices(&pod)
                    .map_err(|x| at(format!("rdma device {dev}"))(io::Error::other(x)))?;
                if in_pod.iter().any(|(_, n)| n == dev) {
                    crate::rdma::move_device(dev, &pod, &self.host).map_err(|x| {
                        at(format!("move rdma device {dev} back"))(io::Error::other(x))
                    })?;
                }
            }
            let links = podr.links().await.map_err(at("read the pod's links"))?;
            if let Some(l) = links.iter().find(|l| identity::ours_in_pod(l, e)) {
                self.step("detach:move")?;
                let idx = l.header.index;
                let mut m = LinkMessage::default();
                m.header.index = idx;
                m.attributes.push(LinkAttribute::IfName(h.name.clone()));
                m.attributes
                    .push(LinkAttribute::NetNsFd(self.host.as_fd().as_raw_fd()));
                podr.request(RouteNetlinkMessage::SetLink(m), 0)
                    .await
                    .map_err(at(format!("move back to the host as {}", h.name)))?;
            } else {
                substitute = links
                    .iter()
                    .find(|l| {
                        link_name(l) == Some(e.pod_name.as_str())
                            || Some(l.header.index) == e.pod_index
                    })
                    .map(identity::describe);
            }
            self.step("detach:pod-rules")?;
            for raw in &e.pod_rules {
                if let Ok(RouteNetlinkMessage::NewRule(r)) = raw.decode() {
                    match podr.request(RouteNetlinkMessage::DelRule(r), 0).await {
                        Ok(_) => {}
                        Err(x) if is_errno(&x, ENOENT) || is_errno(&x, ESRCH) => {}
                        Err(x) => return Err(at(format!("remove pod {}", raw.summary))(x)),
                    }
                }
            }
            if let Some(vrf) = &e.pod_vrf
                && let Ok(Some(v)) = podr.link_by_name(vrf).await
            {
                let mut m = LinkMessage::default();
                m.header.index = v.header.index;
                podr.request(RouteNetlinkMessage::DelLink(m), 0)
                    .await
                    .map_err(at(format!("remove pod vrf {vrf}")))?;
            }
            // The kernel's l3mdev rules came with our VRF; they go when no VRF is left.
            if e.pod_l3mdev_rules {
                let links = podr.links().await.map_err(at("read the pod's links"))?;
                if !links
                    .iter()
                    .any(|l| identity::kind(l).as_deref() == Some("vrf"))
                {
                    for r in l3mdev_rules(&podr)
                        .await
                        .map_err(at("read the pod's rules"))?
                    {
                        match podr.request(RouteNetlinkMessage::DelRule(r), 0).await {
                            Ok(_) => {}
                            Err(x) if is_errno(&x, ENOENT) || is_errno(&x, ESRCH) => {}
                            Err(x) => return Err(at("remove the pod's l3mdev rules")(x)),
                        }
                    }
                }
            }
        }

        // 2. The link on the host: where we put it, where it never left (an attach that failed
        // before the move), or where the kernel returned it (a physical link whose namespace was
        // deleted comes back by itself, under whatever name it had in the pod).
        let links = host.links().await.map_err(at("read the host's links"))?;
        let Some(link) = links.iter().find(|l| identity::ours_on_host(l, h)) else {
            if pod_exists {
                let why = match substitute {
                    Some(s) => format!(
                        "{s} in the pod is not the link attached (its kind, hardware or peer \
                         differ): it stays in the pod, and the journal keeps the entry"
                    ),
                    None => format!(
                        "{} is neither in the pod, whose namespace still exists, nor on the \
                         host: the journal keeps the entry until the namespace is gone",
                        e.pod_name
                    ),
                };
                return Err(at("find the link")(io::Error::new(
                    io::ErrorKind::NotFound,
                    why,
                )));
            }
            tracing::info!(link = %h.name, "link gone (a virtual link dies with its namespace); nothing to restore");
            return Ok(Restored::Gone);
        };
        let idx = link.header.index;

        self.step("detach:link")?;
        if link.header.flags.contains(LinkFlags::Up) {
            host.request(RouteNetlinkMessage::SetLink(set_up(idx, false)), 0)
                .await
                .map_err(at("set down"))?;
        }
        let mut m = LinkMessage::default();
        m.header.index = idx;
        if link_name(link) != Some(&h.name) {
            m.attributes.push(LinkAttribute::IfName(h.name.clone()));
        }
        let current = |f: fn(&LinkAttribute) -> Option<Vec<u8>>| link.attributes.iter().find_map(f);
        if let Some(mtu) = h.mtu {
            m.attributes.push(LinkAttribute::Mtu(mtu));
        }
        if let Some(mac) = &h.mac
            && current(|a| match a {
                LinkAttribute::Address(x) => Some(x.clone()),
                _ => None,
            })
            .as_ref()
                != Some(mac)
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
        host.request(RouteNetlinkMessage::SetLink(m), 0)
            .await
            .map_err(at(format!("restore {}: name, MTU, MAC, GSO/GRO", h.name)))?;

        // Everything below is replayed in full even when one piece fails, so one bad route
        // does not cost the host the rest; the failures are reported together.
        let mut failures: Vec<String> = Vec::new();
        if !h.ethtool_features.is_empty() || !h.ethtool_private_flags.is_empty() {
            self.step("detach:ethtool")?;
            if let Err(e) = crate::ethtool::set_features(&self.host, &h.name, &h.ethtool_features) {
                failures.push(e.to_string());
            }
            if let Err(e) =
                crate::ethtool::set_private_flags(&self.host, &h.name, &h.ethtool_private_flags)
            {
                failures.push(e.to_string());
            }
        }
        let mut replay = async |raw: &RawMessage,
                                fix: &(
                                     dyn Fn(RouteNetlinkMessage) -> Option<RouteNetlinkMessage>
                                         + Sync
                                 )| {
            let msg = match raw.decode() {
                Ok(m) => m,
                Err(x) => {
                    failures.push(format!("{}: {x}", raw.summary));
                    return;
                }
            };
            let Some(msg) = fix(msg) else { return };
            match host.request(msg, NLM_F_CREATE | NLM_F_EXCL).await {
                Ok(_) => {}
                Err(x) if is_errno(&x, EEXIST) => {}
                Err(x) => failures.push(format!("{}: {x}", raw.summary)),
            }
        };

        self.step("detach:address")?;
        for raw in &h.addresses {
            replay(raw, &|m| match m {
                RouteNetlinkMessage::NewAddress(mut a) => {
                    a.header.index = idx;
                    Some(RouteNetlinkMessage::NewAddress(a))
                }
                _ => None,
            })
            .await;
        }
        if h.up {
            self.step("detach:up")?;
            host.request(RouteNetlinkMessage::SetLink(set_up(idx, true)), 0)
                .await
                .map_err(at("set up"))?;
        }
        self.step("detach:neighbour")?;
        for raw in &h.neighbours {
            replay(raw, &|m| match m {
                RouteNetlinkMessage::NewNeighbour(mut n) => {
                    n.header.ifindex = idx;
                    n.attributes
                        .retain(|a| !matches!(a, NeighbourAttribute::CacheInfo(_)));
                    Some(RouteNetlinkMessage::NewNeighbour(n))
                }
                _ => None,
            })
            .await;
        }
        self.step("detach:route")?;
        let mut routes: Vec<&RawMessage> = h.routes.iter().collect();
        // Routes without a gateway first: the others' gateways are reached through them.
        routes.sort_by_key(|raw| match raw.decode() {
            Ok(RouteNetlinkMessage::NewRoute(r)) => r
                .attributes
                .iter()
                .any(|a| matches!(a, RouteAttribute::Gateway(_) | RouteAttribute::MultiPath(_))),
            _ => true,
        });
        let old = h.index;
        for raw in routes {
            replay(raw, &|m| match m {
                RouteNetlinkMessage::NewRoute(mut r) => {
                    r.attributes
                        .retain(|a| !matches!(a, RouteAttribute::CacheInfo(_)));
                    for a in &mut r.attributes {
                        match a {
                            RouteAttribute::Oif(i) if *i == old => *i = idx,
                            RouteAttribute::MultiPath(hops) => {
                                for hop in hops {
                                    if hop.interface_index == old {
                                        hop.interface_index = idx;
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                    Some(RouteNetlinkMessage::NewRoute(r))
                }
                _ => None,
            })
            .await;
        }
        self.step("detach:rule")?;
        for raw in &h.rules {
            replay(raw, &|m| match m {
                RouteNetlinkMessage::NewRule(r) => Some(RouteNetlinkMessage::NewRule(r)),
                _ => None,
            })
            .await;
        }
        if failures.is_empty() {
            Ok(Restored::Restored)
        } else {
            Err(at(format!("restore {}", h.name))(io::Error::other(
                failures.join("; "),
            )))
        }
    }
}
