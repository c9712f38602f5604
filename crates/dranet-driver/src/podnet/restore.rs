//! Giving the host its link back: [`PodNet::detach`] when the pod stops, [`PodNet::recover`] at
//! start for what a crash left behind. The link (and its RDMA device) leaves the pod, what the
//! pod got around it (rules, a VRF) goes, and the host's recorded state is replayed.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use rtnetlink::packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use rtnetlink::packet_route::neighbour::NeighbourAttribute;
use rtnetlink::packet_route::route::RouteAttribute;

use super::journal::{Entry, Phase};
use super::messages::{l3mdev_rules, set_up};
use super::{EEXIST, ENOENT, ESRCH, HostLink, PodNet, RawMessage, StepResult, at, is_errno};
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
        let _serial = self.lock.lock().await;
        let Some(mut entry) = self.journal.read(key)? else {
            return Ok(());
        };
        entry.phase = Phase::Detaching;
        self.journal.write(&entry)?;
        self.restore_entry(&entry).await?;
        self.journal.remove(key)
    }

    /// At start: for each journal entry, if `live` says its owner still runs and the attach
    /// completed, leaves it; otherwise gives the host the link back.
    pub async fn recover(&self, live: impl Fn(&Entry) -> bool) -> Result<Recovery> {
        let _serial = self.lock.lock().await;
        let mut out = Recovery::default();
        for e in self.journal.entries()? {
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
            .map_err(|x| at("open the host namespace")(io::Error::other(x.to_string())))?;
        let h = &e.host;

        // 1. Out of the pod, when its namespace still exists and is the one we attached to.
        let pod = Netns::open(&e.pod_netns)
            .ok()
            .filter(|p| p.id().ok() == Some(e.pod_netns_id));
        if let Some(pod) = pod {
            let podr = pod
                .rtnl()
                .await
                .map_err(|x| at("open the pod namespace")(io::Error::other(x.to_string())))?;
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
            let found = links.iter().find(|l| {
                (e.pod_index == Some(l.header.index) || link_name(l) == Some(&e.pod_name))
                    && same_identity(l, h)
            });
            if let Some(l) = found {
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
                if !links.iter().any(|l| link_kind(l).as_deref() == Some("vrf")) {
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

        // 2. The link on the host: where we put it, or where the kernel returned it (a
        // physical link whose namespace was deleted comes back by itself, with its pod name).
        let links = host.links().await.map_err(at("read the host's links"))?;
        let has_identity = h.parent_dev.is_some() || h.perm_mac.is_some();
        let found = links.iter().find(|l| {
            if has_identity {
                same_identity(l, h) && link_kind(l) == h.kind
            } else {
                link_name(l) == Some(&h.name) && link_kind(l) == h.kind
            }
        });
        let Some(link) = found else {
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

fn link_kind(l: &LinkMessage) -> Option<String> {
    l.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
            LinkInfo::Kind(k) => Some(k.to_string()),
            _ => None,
        }),
        _ => None,
    })
}

/// Whether `l` is the recorded link, by what survives renames and moves: the parent (PCI)
/// device and permanent MAC when it has them; anything matches when it has neither (virtual
/// links, matched by name or index by the caller).
fn same_identity(l: &LinkMessage, h: &HostLink) -> bool {
    let parent = l.attributes.iter().find_map(|a| match a {
        LinkAttribute::ParentDevName(p) => Some(p.as_str()),
        _ => None,
    });
    let perm = l.attributes.iter().find_map(|a| match a {
        LinkAttribute::PermAddress(m) if m.iter().any(|b| *b != 0) => Some(m),
        _ => None,
    });
    if let Some(p) = &h.parent_dev
        && parent != Some(p.as_str())
    {
        return false;
    }
    if let Some(m) = &h.perm_mac
        && perm != Some(m)
    {
        return false;
    }
    true
}
