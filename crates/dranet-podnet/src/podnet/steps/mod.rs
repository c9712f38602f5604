//! The steps of an attach and of giving the link back, one file per concern. Each file holds
//! what its concern does to the pod at attach and what undoes it (or replays the host's recorded
//! state) at detach, side by side, so the two halves cannot drift apart:
//!
//! | file | attach (`configure`) | detach (`restore`) |
//! |---|---|---|
//! | `link` | `move`, `up` | `detach:move`, the link found on the host, `detach:up` |
//! | `mtu_mac` | `link`: MTU, MAC, GSO/GRO sizes | `detach:link`: down, name, MTU, MAC, GSO/GRO |
//! | `rdma` | `rdma`: the RDMA device into the pod (exclusive mode) | `detach:rdma` |
//! | `sysctl` | `sysctl`: arp, IPv6 (accept_ra, DAD, solicitations, addr_gen_mode), forwarding | `detach:sysctl`: the link's own host sysctls, recorded at attach |
//! | `vrf` | `vrf`: created or joined | the VRF we created, the kernel's l3mdev rules |
//! | `addresses` | `address` | `detach:address` |
//! | `ethtool` | `ethtool` | `detach:ethtool` |
//! | `ebpf` | `ebpf`: programs detached | (not put back, as upstream) |
//! | `routes` | `route`: the host's, then the claim's | `detach:route` |
//! | `rules` | `rule`: the claim's, then the host's | `detach:pod-rules`, `detach:rule` |
//! | `neighbours` | `neighbour`: the claim's, then the host's | `detach:neighbour` |
//! | `slaac` | `slaac`: wait for an autoconfigured IPv6 address (`addressing: SLAAC`) | (the kernel's, gone with the link) |
//!
//! The names are those the [`StepHook`](super::StepHook) is called with, in the order
//! `configure` and `restore` run them.

pub(super) mod addresses;
pub(super) mod ebpf;
pub(super) mod ethtool;
pub(super) mod link;
pub(super) mod mtu_mac;
pub(super) mod neighbours;
pub(super) mod rdma;
pub(super) mod routes;
pub(super) mod rules;
pub(super) mod slaac;
pub(super) mod sysctl;
pub(super) mod vrf;

use std::collections::BTreeMap;
use std::io;

use dranet_core::NetworkConfig;
use rtnetlink::packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use rtnetlink::packet_route::RouteNetlinkMessage;

use super::journal::Entry;
use super::{EEXIST, PodNet, RawMessage, StepResult, at, is_errno};
use crate::netns::{Netns, Rtnl};

/// What goes to the pod besides the link's netlink configuration: ethtool settings (kernel
/// feature names) and the RDMA device.
#[derive(Debug, Default)]
pub(super) struct Extras {
    pub(super) features: BTreeMap<String, bool>,
    pub(super) private_flags: BTreeMap<String, bool>,
    pub(super) rdma_device: Option<String>,
}

/// What the steps of one attach work on.
pub(super) struct Attaching<'a> {
    pub(super) podnet: &'a PodNet,
    pub(super) host: &'a Rtnl,
    pub(super) pod: &'a Netns,
    pub(super) podr: &'a Rtnl,
    /// The journal entry: what detach must undo is noted in it as it is done.
    pub(super) entry: &'a mut Entry,
    pub(super) cfg: &'a NetworkConfig,
    pub(super) eth: &'a Extras,
    /// The link's index in the pod, once it has moved.
    pub(super) pod_index: u32,
}

impl Attaching<'_> {
    /// The VRF's routing table, when the link joins one.
    pub(super) fn vrf_table(&self) -> Option<u32> {
        self.cfg.interface.vrf.as_ref().map(|v| v.table_id())
    }
}

/// What the steps giving the host its link back work on, once the link is on the host.
pub(super) struct Restoring<'a> {
    pub(super) host: &'a Rtnl,
    pub(super) entry: &'a Entry,
    /// The link's index on the host now.
    pub(super) index: u32,
    /// What could not be replayed: the rest is replayed regardless, so one bad route does not
    /// cost the host the others, and the failures are reported together.
    pub(super) failures: Vec<String>,
}

impl Restoring<'_> {
    /// Replays one recorded message on the host, as `fix` adapts it (`None`: not of this kind);
    /// one the host has already is not a failure.
    pub(super) async fn replay(
        &mut self,
        raw: &RawMessage,
        fix: impl Fn(RouteNetlinkMessage) -> Option<RouteNetlinkMessage>,
    ) {
        let msg = match raw.decode() {
            Ok(m) => m,
            Err(x) => {
                self.failures.push(format!("{}: {x}", raw.summary));
                return;
            }
        };
        let Some(msg) = fix(msg) else { return };
        match self.host.request(msg, NLM_F_CREATE | NLM_F_EXCL).await {
            Ok(_) => {}
            Err(x) if is_errno(&x, EEXIST) => {}
            Err(x) => self.failures.push(format!("{}: {x}", raw.summary)),
        }
    }
}

/// Adds `msg` in the pod. One that exists already is an error: the pod's is not ours to take
/// over, nor to remove at detach.
pub(super) async fn create(podr: &Rtnl, msg: RouteNetlinkMessage, step: String) -> StepResult<()> {
    podr.request(msg, NLM_F_CREATE | NLM_F_EXCL)
        .await
        .map(drop)
        .map_err(at(step))
}

pub(super) fn nonneg(v: i32, what: &str) -> StepResult<u32> {
    u32::try_from(v).map_err(|_| {
        at(what.to_string())(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {v} is negative"),
        ))
    })
}
