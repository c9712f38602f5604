//! Permanent neighbours: the claim's added in the pod, then the host's of the link copied; at
//! detach the host's recorded neighbours replayed on the host.

use std::io;
use std::net::IpAddr;

use rtnetlink::packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::neighbour::{NeighbourAttribute, NeighbourMessage};

use super::super::messages::{neighbour_message, parse_mac};
use super::super::{EEXIST, PodNet, RawMessage, StepResult, at, is_errno};
use super::create;
use super::{Attaching, Restoring};

/// `neighbour`, once per neighbour of the claim.
pub(in super::super) async fn apply(a: &Attaching<'_>) -> StepResult<()> {
    for n in &a.cfg.neighbors {
        a.podnet.step("neighbour")?;
        let step = format!("neighbour {} lladdr {}", n.destination, n.hardware_addr);
        let ip: IpAddr = n.destination.parse().map_err(|e| {
            at(step.clone())(io::Error::new(io::ErrorKind::InvalidInput, format!("{e}")))
        })?;
        let mac = parse_mac(&n.hardware_addr).map_err(at(step.clone()))?;
        let msg = neighbour_message(a.pod_index, ip, mac);
        create(a.podr, RouteNetlinkMessage::NewNeighbour(msg), step).await?;
    }
    Ok(())
}

/// `neighbour`, once per host neighbour, after the claim's.
pub(in super::super) async fn copy_host(
    a: &Attaching<'_>,
    neighbours: Vec<NeighbourMessage>,
) -> StepResult<()> {
    for n in neighbours {
        a.podnet.step("neighbour")?;
        let raw = RawMessage::new(&RouteNetlinkMessage::NewNeighbour(n.clone()));
        let step = format!("copy the host's neighbour {}", raw.summary);
        match a
            .podr
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
    Ok(())
}

/// `detach:neighbour`: the host's recorded neighbours, on the link's index now.
pub(in super::super) async fn restore(podnet: &PodNet, r: &mut Restoring<'_>) -> StepResult<()> {
    podnet.step("detach:neighbour")?;
    let idx = r.index;
    for raw in &r.entry.host.neighbours {
        r.replay(raw, |m| match m {
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
    Ok(())
}
