//! [`PodNet::attach`]: the request checked against the config and the link, the host's state
//! recorded in the journal before anything changes, the link configured in the pod, and on
//! failure everything rolled back.

use std::io;
use std::net::IpAddr;
use std::path::Path;

use dranet_core::NetworkConfig;
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};

use super::configure::Extras;
use super::journal::{Entry, JOURNAL_VERSION, Journal, Phase};
use super::messages::{format_mac, parse_cidr, parse_mac, route_message, rule_message};
use super::{PodNet, state};
use crate::netns::Netns;
use crate::{Error, Result};

/// What to attach.
#[derive(Debug, Clone, Copy)]
pub struct AttachRequest<'a> {
    /// A stable key for this attachment (file-name characters only): dranet uses the claim UID
    /// and device.
    pub key: &'a str,
    /// Who holds it (dranet: the pod sandbox ID), asked about by [`PodNet::recover`].
    pub owner: &'a str,
    /// The link's name on the host.
    pub link: &'a str,
    /// The pod's network namespace.
    pub pod_netns: &'a Path,
    /// How to configure it in the pod (validated here).
    pub config: &'a NetworkConfig,
    /// The RDMA device that goes with the link (`mlx5_0`), if any. When the RDMA subsystem is in
    /// exclusive netns mode it moves into the pod with the link and back with it; in shared
    /// mode (the kernel default) it stays, as every namespace sees it.
    pub rdma_device: Option<&'a str>,
}

/// The link as the pod got it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attached {
    /// Its name in the pod.
    pub pod_name: String,
    /// Its index in the pod.
    pub pod_index: u32,
    /// The addresses it was given (CIDR).
    pub addresses: Vec<String>,
    /// Its MAC address (`aa:bb:…`), if it has one.
    pub mac: Option<String>,
    /// Its MTU.
    pub mtu: Option<u32>,
}

impl PodNet {
    /// Checks a config against the link before anything changes.
    fn validate(&self, link: &str, config: &NetworkConfig) -> Result<()> {
        let invalid = |reason: String| Error::InvalidConfig {
            device: link.to_string(),
            reason,
        };
        config.validate().map_err(|e| invalid(e.to_string()))?;
        // Everything that can be parsed is parsed now, so a typo fails before the link moves.
        let iface = &config.interface;
        if let Some(mac) = &iface.hardware_addr {
            parse_mac(mac).map_err(|e| invalid(format!("hardwareAddr: {e}")))?;
        }
        for a in &iface.addresses {
            parse_cidr(a).map_err(|e| invalid(format!("address {e}")))?;
        }
        for r in &config.routes {
            route_message(0, r).map_err(|e| invalid(format!("route {}: {e}", r.destination)))?;
        }
        for r in &config.rules {
            rule_message(r).map_err(|e| invalid(format!("rule: {e}")))?;
        }
        for n in &config.neighbors {
            n.destination.parse::<IpAddr>().map_err(|_| {
                invalid(format!("neighbor {:?} is not an IP address", n.destination))
            })?;
            parse_mac(&n.hardware_addr).map_err(|e| invalid(format!("neighbor: {e}")))?;
        }
        for (what, v) in [
            ("mtu", iface.mtu),
            ("gsoMaxSize", iface.gso_max_size),
            ("groMaxSize", iface.gro_max_size),
            ("gsoIPv4MaxSize", iface.gso_ipv4_max_size),
            ("groIPv4MaxSize", iface.gro_ipv4_max_size),
        ] {
            if let Some(v) = v
                && v < 0
            {
                return Err(invalid(format!("{what} {v} is negative")));
            }
        }
        if config.interface.dhcp == Some(true) {
            return Err(Error::Unsupported(format!(
                "{link}: DHCP in the pod is not supported; give static addresses"
            )));
        }
        if let Some(mtu) = config.interface.mtu {
            // A VF cannot carry frames larger than its PF's MTU: refuse before moving it.
            let pf_net = self
                .sysfs
                .join("class/net")
                .join(link)
                .join("device/physfn/net");
            if let Ok(rd) = std::fs::read_dir(&pf_net) {
                for pf in rd.flatten() {
                    let pf_mtu = std::fs::read_to_string(pf.path().join("mtu"))
                        .ok()
                        .and_then(|s| s.trim().parse::<i64>().ok());
                    if let Some(pf_mtu) = pf_mtu
                        && i64::from(mtu) > pf_mtu
                    {
                        return Err(invalid(format!(
                            "MTU {mtu} is above the MTU {pf_mtu} of its PF {}",
                            pf.file_name().to_string_lossy()
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Moves `req.link` into the pod namespace and configures it. Retried with the same key and
    /// owner after it succeeded, it answers again without changing anything.
    pub async fn attach(&self, req: &AttachRequest<'_>) -> Result<Attached> {
        let _serial = self.lock.lock().await;
        Journal::check_key(req.key)?;
        if let Some(e) = self.journal.read(req.key)? {
            if e.phase == Phase::Attached && e.owner == req.owner && e.host.name == req.link {
                let pod = Netns::open(&e.pod_netns)?;
                if pod.id()? == e.pod_netns_id {
                    let rtnl = pod.rtnl().await?;
                    if let Some(l) = rtnl
                        .link_by_name(&e.pod_name)
                        .await
                        .map_err(|x| self.attach_err(req, "read the pod's links", x))?
                    {
                        return Ok(attached_from(&e, &l, Vec::new()));
                    }
                }
            }
            // An interrupted or foreign attachment under this key: give the host its link
            // back first.
            self.restore_entry(&e).await?;
            self.journal.remove(&e.key)?;
        }
        self.validate(req.link, req.config)?;

        let pod = Netns::open(req.pod_netns)?;
        let pod_id = pod.id()?;
        let host = self.host.rtnl().await?;
        let podr = pod.rtnl().await?;
        let link = host
            .link_by_name(req.link)
            .await
            .map_err(|e| self.attach_err(req, "read the host's links", e))?
            .ok_or_else(|| Error::LinkNotFound {
                link: req.link.to_string(),
                netns: self.host.path().to_path_buf(),
            })?;
        let pod_name = if req.config.interface.name.is_empty() {
            req.link.to_string()
        } else {
            req.config.interface.name.clone()
        };
        if podr
            .link_by_name(&pod_name)
            .await
            .map_err(|e| self.attach_err(req, "read the pod's links", e))?
            .is_some()
        {
            return Err(self.attach_err(
                req,
                &format!("name {pod_name}"),
                io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "the pod already has a link of that name",
                ),
            ));
        }
        let snapshot = state::capture(&host, &link)
            .await
            .map_err(|e| self.attach_err(req, "record the host state", e))?;
        // Ethtool: names checked against the device and the original values recorded before
        // anything changes, so detach can put them back.
        let mut snapshot = snapshot;
        let mut eth = match &req.config.ethtool {
            Some(e) if !e.features.is_empty() || !e.private_flags.is_empty() => {
                let invalid = |reason: String| Error::InvalidConfig {
                    device: req.link.to_string(),
                    reason,
                };
                let now = crate::ethtool::features(&self.host, req.link)?;
                let features = crate::ethtool::resolve(&e.features, &now)
                    .map_err(|e| invalid(e.to_string()))?;
                snapshot.ethtool_features =
                    features.keys().map(|n| (n.clone(), now.is_on(n))).collect();
                let (all, on) = if e.private_flags.is_empty() {
                    (Vec::new(), Vec::new())
                } else {
                    crate::ethtool::private_flags(&self.host, req.link)?
                };
                if let Some(unknown) = e.private_flags.keys().find(|k| !all.contains(k)) {
                    return Err(invalid(format!(
                        "{unknown:?} is not a private flag of this device (it has: {})",
                        if all.is_empty() {
                            "none".to_string()
                        } else {
                            all.join(", ")
                        }
                    )));
                }
                snapshot.ethtool_private_flags = e
                    .private_flags
                    .keys()
                    .map(|n| (n.clone(), on.contains(n)))
                    .collect();
                Extras {
                    features,
                    private_flags: e.private_flags.clone(),
                    rdma_device: None,
                }
            }
            _ => Extras::default(),
        };
        eth.rdma_device = req.rdma_device.map(str::to_string);
        let mut entry = Entry {
            version: JOURNAL_VERSION,
            key: req.key.to_string(),
            owner: req.owner.to_string(),
            pod_netns: req.pod_netns.to_path_buf(),
            pod_netns_id: pod_id,
            pod_name,
            pod_index: None,
            phase: Phase::Attaching,
            host: snapshot,
            pod_rules: Vec::new(),
            pod_vrf: None,
            pod_l3mdev_rules: false,
            rdma_device: None,
        };
        if let Err(e) = self.step("journal") {
            return Err(self.attach_err(req, &e.step, e.source));
        }
        self.journal.write(&entry)?;

        match self
            .configure(&host, &pod, &podr, &mut entry, req.config, &eth)
            .await
        {
            Ok((link, addresses)) => {
                let attached = attached_from(&entry, &link, addresses);
                entry.phase = Phase::Attached;
                entry.pod_index = Some(attached.pod_index);
                if let Err(e) = self.journal.write(&entry) {
                    let rollback = self.restore_entry(&entry).await.err();
                    if rollback.is_none() {
                        let _ = self.journal.remove(&entry.key);
                    }
                    let _ = rollback;
                    return Err(e);
                }
                Ok(attached)
            }
            Err(e) => {
                let rollback = match self.restore_entry(&entry).await {
                    Ok(_) => {
                        self.journal.remove(&entry.key)?;
                        None
                    }
                    Err(r) => Some(r.to_string()),
                };
                Err(Error::Attach {
                    link: req.link.to_string(),
                    netns: req.pod_netns.to_path_buf(),
                    step: e.step,
                    source: e.source,
                    rollback,
                })
            }
        }
    }

    fn attach_err(&self, req: &AttachRequest<'_>, step: &str, source: io::Error) -> Error {
        Error::Attach {
            link: req.link.to_string(),
            netns: req.pod_netns.to_path_buf(),
            step: step.to_string(),
            source,
            rollback: None,
        }
    }
}

fn attached_from(e: &Entry, l: &LinkMessage, addresses: Vec<String>) -> Attached {
    Attached {
        pod_name: e.pod_name.clone(),
        pod_index: l.header.index,
        addresses,
        mac: l.attributes.iter().find_map(|a| match a {
            LinkAttribute::Address(m) => Some(format_mac(m)),
            _ => None,
        }),
        mtu: l.attributes.iter().find_map(|a| match a {
            LinkAttribute::Mtu(m) => Some(*m),
            _ => None,
        }),
    }
}
