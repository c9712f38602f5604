//! Routes: the host's routes of the link copied into the pod, then the claim's (in a VRF's
//! table when the link joins one); at detach the host's recorded routes replayed on the host.

use dranet_core::RouteConfig;
use rtnetlink::packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::route::{RouteAttribute, RouteMessage};

use super::super::messages::route_message;
use super::super::state::RawMessage;
use super::super::{EEXIST, EHOSTUNREACH, ENETUNREACH, PodNet, StepResult, at, carry, is_errno};
use super::create;
use super::{Attaching, Restoring};

/// `route`, once per host route: before the claim's, as a claim route may go through one of
/// them. Addresses the claim chose may not reach a host route's gateway; that route stays
/// behind.
pub(in super::super) async fn copy_host(
    a: &Attaching<'_>,
    routes: Vec<RouteMessage>,
) -> StepResult<()> {
    let own_addresses = !a.cfg.interface.addresses.is_empty();
    for r in routes {
        a.podnet.step("route")?;
        let step = format!("copy the host's route {}", carry::describe(&r));
        match a
            .podr
            .request(RouteNetlinkMessage::NewRoute(r), NLM_F_CREATE | NLM_F_EXCL)
            .await
        {
            Ok(_) => {}
            // The pod's kernel made it already (from an address).
            Err(e) if is_errno(&e, EEXIST) => {}
            Err(e)
                if own_addresses && (is_errno(&e, ENETUNREACH) || is_errno(&e, EHOSTUNREACH)) =>
            {
                tracing::warn!(
                    route = step,
                    "the claim's addresses do not reach the gateway; not copied"
                );
            }
            Err(e) => return Err(at(step)(e)),
        }
    }
    Ok(())
}

/// `route`, once per route of the claim, link-scope ones first: the others' gateways are
/// reached through them.
pub(in super::super) async fn apply(a: &Attaching<'_>) -> StepResult<()> {
    let vrf_table = a.vrf_table();
    let mut routes: Vec<_> = a.cfg.routes.iter().collect();
    routes.sort_by_key(|r| !r.gateway.is_empty());
    for r in routes {
        a.podnet.step("route")?;
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
        let msg = route_message(a.pod_index, r).map_err(at(step.clone()))?;
        create(a.podr, RouteNetlinkMessage::NewRoute(msg), step).await?;
    }
    Ok(())
}

/// `detach:route`: the host's routes, those without a gateway first (the others' gateways are
/// reached through them), on the link's index now.
pub(in super::super) async fn restore(podnet: &PodNet, r: &mut Restoring<'_>) -> StepResult<()> {
    podnet.step("detach:route")?;
    let entry = r.entry;
    let mut routes: Vec<&RawMessage> = entry.host.routes.iter().collect();
    routes.sort_by_key(|raw| match raw.decode() {
        Ok(RouteNetlinkMessage::NewRoute(r)) => r
            .attributes
            .iter()
            .any(|a| matches!(a, RouteAttribute::Gateway(_) | RouteAttribute::MultiPath(_))),
        _ => true,
    });
    let (old, idx) = (entry.host.index, r.index);
    for raw in routes {
        r.replay(raw, |m| match m {
            RouteNetlinkMessage::NewRoute(mut route) => {
                crate::podnet::state::as_request(&mut route);
                for a in &mut route.attributes {
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
                Some(RouteNetlinkMessage::NewRoute(route))
            }
            _ => None,
        })
        .await;
    }
    Ok(())
}
