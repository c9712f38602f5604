//! `disableEbpfPrograms`: the eBPF programs the link brought along are detached in the pod, as
//! upstream does: its TC `bpf` filters deleted, its TCX programs detached. Any that stays is an
//! error naming it, so the pod never runs with a program it asked to be rid of. They are not put
//! back when the link returns to the host (upstream does not either).

use std::io;

use dranet_discovery::ebpf::{detach_tcx, tc_bpf_filters, tcx_programs};
use rtnetlink::packet_route::RouteNetlinkMessage;

use super::{StepResult, at};
use crate::netns::{Netns, Rtnl};

/// Detaches every TC and TCX program of link `index` in the pod.
pub(super) async fn detach_all(pod: &Netns, podr: &Rtnl, index: u32) -> StepResult<()> {
    let filters = tc_bpf_filters(podr.handle(), index)
        .await
        .map_err(|e| at("list the link's TC filters")(io::Error::other(e)))?;
    for f in &filters {
        podr.request(RouteNetlinkMessage::DelTrafficFilter(f.delete_message()), 0)
            .await
            .map_err(at(format!("delete the TC filter {:?}", f.name)))?;
    }
    let in_pod = |e: crate::Error| io::Error::other(e.to_string());
    let programs = pod
        .run(|| tcx_programs(index))
        .map_err(|e| at("list the link's TCX programs")(in_pod(e)))?
        .map_err(at("list the link's TCX programs"))?;
    for p in &programs {
        let step = format!("detach the TCX program {:?} (id {})", p.name, p.id);
        pod.run(|| detach_tcx(index, p))
            .map_err(|e| at(step.clone())(in_pod(e)))?
            .map_err(at(step))?;
    }
    if !filters.is_empty() || !programs.is_empty() {
        tracing::info!(
            tc_filters = filters.len(),
            tcx_programs = programs.len(),
            "eBPF programs detached in the pod (disableEbpfPrograms)"
        );
    }
    Ok(())
}
