//! The RDMA device named with the link: into the pod with it when the RDMA subsystem is in
//! exclusive netns mode (journaled before the move), and back to the host first at detach.

use std::io;

use super::super::journal::Entry;
use super::super::{PodNet, StepResult, at};
use super::Attaching;
use crate::Error;
use crate::netns::Netns;
use crate::rdma::{NetnsMode, devices, move_device, netns_mode};

/// `rdma`: the device moves into the pod in exclusive mode; in shared mode it stays, as every
/// namespace sees it.
pub(in super::super) fn apply(a: &mut Attaching<'_>) -> StepResult<()> {
    let Some(dev) = a.eth.rdma_device.as_deref() else {
        return Ok(());
    };
    a.podnet.step("rdma")?;
    let rdma_err = |e: Error| at(format!("rdma device {dev}"))(io::Error::other(e));
    if netns_mode().map_err(rdma_err)? == NetnsMode::Exclusive {
        // Recorded before the move, so a crash right after it is undone too.
        a.entry.rdma_device = Some(dev.to_string());
        a.podnet
            .journal
            .write(a.entry)
            .map_err(|e| at("journal")(io::Error::other(e)))?;
        move_device(dev, &a.podnet.host, a.pod).map_err(rdma_err)?;
    }
    Ok(())
}

/// `detach:rdma`: the device back to the host, if it is still in the pod. It goes before the
/// netdev: in exclusive mode it belongs to the namespace, and the link's verbs users see it go
/// first.
pub(in super::super) fn undo(podnet: &PodNet, pod: &Netns, e: &Entry) -> StepResult<()> {
    let Some(dev) = &e.rdma_device else {
        return Ok(());
    };
    podnet.step("detach:rdma")?;
    let in_pod = devices(pod).map_err(|x| at(format!("rdma device {dev}"))(io::Error::other(x)))?;
    if in_pod.iter().any(|(_, n)| n == dev) {
        move_device(dev, pod, &podnet.host)
            .map_err(|x| at(format!("move rdma device {dev} back"))(io::Error::other(x)))?;
    }
    Ok(())
}
