//! The state of the links given to pods, seen inside the pods' namespaces: once a netdev has
//! moved, the host's scan no longer sees it, and a link that goes down there would otherwise be
//! reported healthy for as long as the pod holds it.

use std::collections::BTreeMap;

use dranet_core::health::Fault;
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags};

use super::PodNet;
use super::journal::Phase;
use crate::netns::Netns;

impl PodNet {
    /// The state of every link attached to a pod, by journal key: `None` when it carries
    /// traffic, its [`Fault`] when it has lost its carrier ([`Fault::of_link`]). A link whose pod namespace cannot be read (the
    /// pod is going away, the path was reused) or is gone from it is left out: the caller keeps
    /// what it knew, and the next synchronize gives such links back.
    pub async fn pod_link_faults(&self) -> BTreeMap<String, Option<Fault>> {
        let entries = match self.journal().entries() {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the attach journal: the health of links in pods is not known");
                return BTreeMap::new();
            }
        };
        let mut out = BTreeMap::new();
        for e in entries.into_iter().filter(|e| e.phase == Phase::Attached) {
            let Some(index) = e.pod_index else { continue };
            let link = async {
                let ns = Netns::open(&e.pod_netns)?;
                if ns.id()? != e.pod_netns_id {
                    return Ok(None);
                }
                let rtnl = ns.rtnl().await?;
                rtnl.link_by_index(index)
                    .await
                    .map_err(|err| crate::Error::Netns {
                        path: e.pod_netns.clone(),
                        reason: format!("reading link {index}: {err}"),
                    })
            };
            match link.await {
                Ok(Some(l)) => {
                    let state = l.attributes.iter().find_map(|a| match a {
                        LinkAttribute::OperState(s) => Some(s.to_string().to_lowercase()),
                        _ => None,
                    });
                    // The host's rule: a link the pod set down itself is not a fault.
                    let up = l.header.flags.contains(LinkFlags::Up);
                    let fault = state.and_then(|s| Fault::of_link(&e.pod_name, &s, Some(up)));
                    out.insert(e.key, fault);
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::debug!(key = %e.key, error = %err, "the pod's link is out of sight")
                }
            }
        }
        out
    }
}
