//! Configuring a link in the pod, one step at a time (each in `steps`, beside what undoes it):
//! the move into its namespace (under its pod name), its identity in the pod journaled, then its
//! MTU, MAC and GSO/GRO sizes, its RDMA device, sysctls, VRF, addresses, up, ethtool, eBPF
//! programs detached, then routes, rules and neighbours, and with `addressing: SLAAC` the wait
//! for an autoconfigured address. What detach must undo besides the
//! host's recorded state (the pod's rules, a VRF we created, an RDMA device moved in exclusive
//! mode) is noted in the journal entry as it is done.

use dranet_core::NetworkConfig;
use rtnetlink::packet_route::link::LinkMessage;

use super::journal::Entry;
use super::steps::{
    Attaching, Extras, addresses, ebpf, ethtool, link, mtu_mac, neighbours, rdma, routes, rules,
    slaac, sysctl, vrf,
};
use super::{PodNet, StepResult, at, carry};
use crate::netns::{Netns, Rtnl};

impl PodNet {
    /// Moves the link into `pod` and applies `cfg` there, step by step (see `steps`), recording
    /// in `entry` what detach must undo; the link as the pod has it, and the addresses it got.
    pub(super) async fn configure(
        &self,
        host: &Rtnl,
        pod: &Netns,
        podr: &Rtnl,
        entry: &mut Entry,
        cfg: &NetworkConfig,
        eth: &Extras,
    ) -> StepResult<(LinkMessage, Vec<String>)> {
        let mut a = Attaching {
            podnet: self,
            host,
            pod,
            podr,
            entry,
            cfg,
            eth,
            pod_index: 0,
        };
        let moved = link::move_in(&mut a).await?;
        mtu_mac::apply(&a).await?;
        rdma::apply(&mut a)?;
        sysctl::apply(&a)?;
        vrf::apply(&mut a).await?;
        let addresses = addresses::apply(&a).await?;
        link::up(&a).await?;
        ethtool::apply(&a)?;
        ebpf::apply(&a).await?;
        let pod_ips = carry::address_ips(&addresses).map_err(at("the pod's addresses"))?;
        let carried = carry::carried(
            &a.entry.host,
            &carry::PodSide {
                index: a.pod_index,
                name: &a.entry.pod_name,
                addresses: &pod_ips,
                vrf_table: a.vrf_table(),
                config: cfg,
            },
        )
        .map_err(at("read the host's routes, rules and neighbours"))?;
        routes::copy_host(&a, carried.routes).await?;
        routes::apply(&a).await?;
        rules::apply(&mut a).await?;
        neighbours::apply(&a).await?;
        rules::copy_host(&mut a, carried.rules).await?;
        neighbours::copy_host(&a, carried.neighbours).await?;
        let mut addresses = addresses;
        addresses.extend(slaac::wait(&a).await?);

        self.step("done")?;
        let link = podr
            .link_by_index(a.pod_index)
            .await
            .map_err(at("read the link in the pod"))?
            .unwrap_or(moved);
        Ok((link, addresses))
    }
}
