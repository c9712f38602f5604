//! The link's addresses: the claim's, or by default the host's global addresses of that link,
//! added in the pod; at detach the host's recorded addresses replayed on the host.

use rtnetlink::packet_route::RouteNetlinkMessage;

use super::super::messages::{address_message, parse_cidr};
use super::super::{PodNet, StepResult, at, state};
use super::create;
use super::{Attaching, Restoring};

/// `address`, once per address; the addresses the pod got.
pub(in super::super) async fn apply(a: &Attaching<'_>) -> StepResult<Vec<String>> {
    let iface = &a.cfg.interface;
    let addresses = if iface.addresses.is_empty() {
        state::global_addresses(&a.entry.host)
    } else {
        iface.addresses.clone()
    };
    for cidr in &addresses {
        a.podnet.step("address")?;
        let step = format!("address {cidr}");
        let (ip, len) = parse_cidr(cidr).map_err(at(step.clone()))?;
        let msg = address_message(a.pod_index, ip, len);
        create(a.podr, RouteNetlinkMessage::NewAddress(msg), step).await?;
    }
    Ok(addresses)
}

/// `detach:address`: the host's addresses, on the link's index now.
pub(in super::super) async fn restore(podnet: &PodNet, r: &mut Restoring<'_>) -> StepResult<()> {
    podnet.step("detach:address")?;
    let idx = r.index;
    for raw in &r.entry.host.addresses {
        r.replay(raw, |m| match m {
            RouteNetlinkMessage::NewAddress(mut a) => {
                a.header.index = idx;
                Some(RouteNetlinkMessage::NewAddress(a))
            }
            _ => None,
        })
        .await;
    }
    Ok(())
}
