//! Link state that sysfs does not show: addresses, default routes, link kinds, stacking, eBPF
//! programs.
//!
//! [`NetlinkLinks`] asks the kernel (rtnetlink, in the caller's network namespace);
//! [`FixtureLinks`] reads a JSON file, so fixture trees can describe the same facts.

#[cfg(feature = "netlink")]
use std::collections::HashMap;
#[cfg(feature = "netlink")]
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

#[cfg(feature = "netlink")]
use dranet_core::{DefaultRoute, IpFamily};
use dranet_core::{LinkSource, LinkState};
#[cfg(feature = "netlink")]
use futures::TryStreamExt;
#[cfg(feature = "netlink")]
use rtnetlink::packet_route::AddressFamily;
#[cfg(feature = "netlink")]
use rtnetlink::packet_route::address::AddressAttribute;
#[cfg(feature = "netlink")]
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags, LinkInfo};
#[cfg(feature = "netlink")]
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteProtocol};
#[cfg(feature = "netlink")]
use rtnetlink::{RouteMessageBuilder, packet_route::route::RouteType};

use crate::{Error, Result};

/// Link state from rtnetlink, in the network namespace of the calling thread (feature
/// `netlink`).
///
/// Safe to call from anywhere, async code included: the dump runs on a thread of its own with a
/// private runtime (a runtime cannot be started inside another), and a new thread starts in the
/// network namespace of the thread that created it, so a caller that entered another namespace
/// gets that namespace's links.
#[cfg(feature = "netlink")]
#[derive(Debug, Clone, Copy, Default)]
pub struct NetlinkLinks;

#[cfg(feature = "netlink")]
impl LinkSource for NetlinkLinks {
    type Error = Error;

    fn links(&self) -> Result<Vec<LinkState>> {
        std::thread::scope(|s| {
            let dump_thread = std::thread::Builder::new()
                .name("dranet-netlink".into())
                .spawn_scoped(s, || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_io()
                        .build()
                        .map_err(|e| nl("runtime", e))?;
                    rt.block_on(dump())
                })
                .map_err(|e| nl("start the netlink thread", e))?;
            dump_thread
                .join()
                .map_err(|_| Error::NetlinkUnavailable("the netlink thread panicked"))?
        })
    }
}

/// A netlink failure while doing `action`.
pub(crate) fn nl(action: &'static str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Netlink {
        action,
        source: Box::new(e),
    }
}

#[cfg(feature = "netlink")]
async fn dump() -> Result<Vec<LinkState>> {
    let (conn, handle, _) = rtnetlink::new_connection().map_err(|e| nl("connect", e))?;
    let conn = tokio::spawn(conn);

    let msgs: Vec<_> = handle
        .link()
        .get()
        .execute()
        .try_collect()
        .await
        .map_err(|e| nl("dump links", e))?;
    let mut by_index: HashMap<u32, String> = HashMap::new();
    let mut links: Vec<(LinkState, Option<u32>, Option<u32>)> = Vec::new();
    for m in msgs {
        let mut st = LinkState {
            ifindex: Some(m.header.index),
            admin_up: Some(m.header.flags.contains(LinkFlags::Up)),
            ..LinkState::default()
        };
        let (mut master, mut lower, mut other_netns) = (None, None, false);
        for a in m.attributes {
            match a {
                LinkAttribute::IfName(n) => st.name = n,
                LinkAttribute::Mtu(v) => st.mtu = Some(v),
                LinkAttribute::OperState(s) => st.operstate = Some(s.to_string().to_lowercase()),
                LinkAttribute::Controller(i) => master = Some(i),
                LinkAttribute::Link(i) if i != m.header.index => lower = Some(i),
                LinkAttribute::LinkNetNsId(_) => other_netns = true,
                LinkAttribute::LinkInfo(infos) => {
                    for i in infos {
                        if let LinkInfo::Kind(k) = i {
                            st.kind = Some(k.to_string());
                        }
                    }
                }
                _ => {}
            }
        }
        // IFLA_LINK of a veth is its peer, not a device it is stacked on, and an index in another
        // namespace names nothing here.
        if other_netns || st.kind.as_deref() == Some("veth") {
            lower = None;
        }
        by_index.insert(m.header.index, st.name.clone());
        links.push((st, master, lower));
    }

    let addrs: Vec<_> = handle
        .address()
        .get()
        .execute()
        .try_collect()
        .await
        .map_err(|e| nl("dump addresses", e))?;
    let mut v4: HashMap<u32, Vec<String>> = HashMap::new();
    let mut v6: HashMap<u32, Vec<String>> = HashMap::new();
    for a in addrs {
        let plen = a.header.prefix_len;
        let ip = a.attributes.iter().find_map(|x| match x {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        });
        match ip {
            Some(IpAddr::V4(ip)) => v4
                .entry(a.header.index)
                .or_default()
                .push(format!("{ip}/{plen}")),
            // Link-local addresses say nothing a claim could select on.
            Some(IpAddr::V6(ip)) if (ip.segments()[0] & 0xffc0) != 0xfe80 => v6
                .entry(a.header.index)
                .or_default()
                .push(format!("{ip}/{plen}")),
            _ => {}
        }
    }

    // Every default route of every table: which of them make an uplink is dranet-core's rule
    // (`uplinks`), not a question of what the kernel dumped.
    let mut defaults: HashMap<u32, Vec<DefaultRoute>> = HashMap::new();
    let mut v6_gateways: HashMap<u32, String> = HashMap::new();
    for req in [
        RouteMessageBuilder::<Ipv4Addr>::new().build(),
        RouteMessageBuilder::<Ipv6Addr>::new().build(),
    ] {
        let routes: Vec<RouteMessage> = handle
            .route()
            .get(req)
            .execute()
            .try_collect()
            .await
            .map_err(|e| nl("dump routes", e))?;
        for r in routes {
            if r.header.destination_prefix_length != 0 || r.header.kind != RouteType::Unicast {
                continue;
            }
            let family = match r.header.address_family {
                AddressFamily::Inet => IpFamily::Ipv4,
                AddressFamily::Inet6 => IpFamily::Ipv6,
                _ => continue,
            };
            let mut route = DefaultRoute {
                family,
                table: u32::from(r.header.table),
                metric: 0,
                gateway: None,
                protocol: Some(protocol_name(r.header.protocol)),
            };
            for a in &r.attributes {
                match a {
                    // Tables above 255 only fit the attribute.
                    RouteAttribute::Table(t) => route.table = *t,
                    RouteAttribute::Priority(m) => route.metric = *m,
                    RouteAttribute::Gateway(g) => route.gateway = gateway(g),
                    _ => {}
                }
            }
            for a in &r.attributes {
                match a {
                    RouteAttribute::Oif(i) => {
                        if family == IpFamily::Ipv6
                            && let Some(g) = &route.gateway
                        {
                            v6_gateways.entry(*i).or_insert_with(|| g.clone());
                        }
                        defaults.entry(*i).or_default().push(route.clone());
                    }
                    RouteAttribute::MultiPath(hops) => {
                        for h in hops {
                            let mut hop = route.clone();
                            hop.gateway = h.attributes.iter().find_map(|a| match a {
                                RouteAttribute::Gateway(g) => gateway(g),
                                _ => None,
                            });
                            defaults.entry(h.interface_index).or_default().push(hop);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    let mut ebpf: HashMap<u32, dranet_core::EbpfPrograms> = HashMap::new();
    for (st, _, _) in &links {
        let Some(i) = st.ifindex else { continue };
        match ebpf_programs(&handle, i).await {
            Ok(p) => {
                ebpf.insert(i, p);
            }
            // Not fatal to the scan: the link's eBPF attributes are left out, not guessed.
            Err(e) => tracing::debug!(link = %st.name, error = %e, "eBPF programs not read"),
        }
    }
    conn.abort();

    Ok(links
        .into_iter()
        .map(|(mut st, master, lower)| {
            let i = st.ifindex.unwrap_or(0);
            st.ebpf = ebpf.remove(&i);
            st.master = master.and_then(|m| by_index.get(&m).cloned());
            st.lower = lower.and_then(|l| by_index.get(&l).cloned());
            st.ipv4 = v4.remove(&i).unwrap_or_default();
            st.ipv6 = v6.remove(&i).unwrap_or_default();
            st.default_routes = defaults.remove(&i).unwrap_or_default();
            st.ipv6_gateway = v6_gateways.remove(&i);
            st
        })
        .collect())
}

/// The TC filters and TCX programs of link `index`.
#[cfg(feature = "netlink")]
async fn ebpf_programs(
    handle: &rtnetlink::Handle,
    index: u32,
) -> Result<dranet_core::EbpfPrograms> {
    let tc = crate::ebpf::tc_bpf_filters(handle, index)
        .await
        .map_err(|e| nl("dump TC filters", e))?;
    let tcx = crate::ebpf::tcx_programs(index).map_err(|e| nl("query TCX programs", e))?;
    Ok(dranet_core::EbpfPrograms {
        tc_filters: tc.into_iter().map(|f| f.name).collect(),
        tcx_programs: tcx.into_iter().map(|p| p.name).collect(),
    })
}

#[cfg(feature = "netlink")]
fn gateway(g: &RouteAddress) -> Option<String> {
    match g {
        RouteAddress::Inet(a) => Some(a.to_string()),
        RouteAddress::Inet6(a) => Some(a.to_string()),
        _ => None,
    }
}

/// The protocol as `ip route` names it.
#[cfg(feature = "netlink")]
fn protocol_name(p: RouteProtocol) -> String {
    match p {
        RouteProtocol::Kernel => "kernel".into(),
        RouteProtocol::Boot => "boot".into(),
        RouteProtocol::Static => "static".into(),
        RouteProtocol::Ra => "ra".into(),
        RouteProtocol::Dhcp => "dhcp".into(),
        other => u8::from(other).to_string(),
    }
}

/// Link state from a JSON file: `{"links": [LinkState, …]}` (camelCase fields, see
/// [`dranet_core::LinkState`]). Fixture trees keep it beside their `sys` directory as
/// `links.json`.
#[derive(Debug, Clone)]
pub struct FixtureLinks {
    /// The JSON file.
    pub path: PathBuf,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LinksFile {
    links: Vec<LinkState>,
}

impl LinkSource for FixtureLinks {
    type Error = Error;

    fn links(&self) -> Result<Vec<LinkState>> {
        let text = std::fs::read_to_string(&self.path).map_err(|source| Error::Io {
            path: self.path.clone(),
            source,
        })?;
        let f: LinksFile = serde_json::from_str(&text).map_err(|source| Error::Fixture {
            path: self.path.clone(),
            source,
        })?;
        Ok(f.links)
    }
}

/// No link state: sysfs alone (no addresses, no default routes).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLinks;

impl LinkSource for NoLinks {
    type Error = Error;

    fn links(&self) -> Result<Vec<LinkState>> {
        Ok(Vec::new())
    }
}
