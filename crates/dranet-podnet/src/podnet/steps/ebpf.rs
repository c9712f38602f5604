//! `disableEbpfPrograms`: the eBPF programs the link brought along are detached in the pod, as
//! upstream does: its TC `bpf` filters deleted, its TCX programs detached. Any that stays is an
//! error naming it, so the pod never runs with a program it asked to be rid of. They are not put
//! back when the link returns to the host (upstream does not either).

use std::io;

use dranet_discovery::ebpf::{detach_tcx, tc_bpf_filters, tcx_programs};
use rtnetlink::packet_route::RouteNetlinkMessage;

use super::super::{StepResult, at};
use super::Attaching;
use crate::netns::{Netns, Rtnl};

/// `ebpf`, when the claim asks for it.
pub(in super::super) async fn apply(a: &Attaching<'_>) -> StepResult<()> {
    if a.cfg.interface.disable_ebpf_programs != Some(true) {
        return Ok(());
    }
    a.podnet.step("ebpf")?;
    detach_all(a.pod, a.podr, a.pod_index).await
}

/// Detaches every TC and TCX program of link `index` in the pod.
async fn detach_all(pod: &Netns, podr: &Rtnl, index: u32) -> StepResult<()> {
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
