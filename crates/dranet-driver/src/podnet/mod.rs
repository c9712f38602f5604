//! Giving a host network interface to a pod, and giving the host back exactly what it had.
//!
//! [`PodNet::attach`] records the link's host state (name, MTU, MAC, GSO/GRO sizes, addresses,
//! routes of every table, the rules selecting those tables, permanent neighbours, admin state)
//! in a [`Journal`] *before* the first change, then moves the link into the pod's network
//! namespace and configures it there from a [`NetworkConfig`]. Any failure rolls back what was
//! done. [`PodNet::detach`] moves the link back and replays the recorded state;
//! [`PodNet::recover`] does the same at start for every journal entry whose pod is gone, so a
//! daemon killed in the middle of either leaves nothing behind.
//!
//! Everything goes through rtnetlink sockets opened inside the namespaces ([`Netns`]); no
//! command is executed.
//!
//! ```no_run
//! use dranet_core::NetworkConfig;
//! use dranet_driver::netns::Netns;
//! use dranet_driver::podnet::{AttachRequest, PodNet};
//!
//! # async fn f() -> Result<(), dranet_driver::Error> {
//! // At start: the daemon's own namespace, and give back what crashed pods left behind.
//! let podnet = PodNet::new(Netns::current()?, "/var/lib/dranet/podnet")?;
//! podnet.recover(|entry| entry.owner == "sandbox-still-running").await?;
//!
//! let mut config = NetworkConfig::default();
//! config.interface.name = "net1".into();
//! let attached = podnet
//!     .attach(&AttachRequest {
//!         key: "claim-uid-eth3",
//!         owner: "sandbox-id",
//!         link: "eth3",
//!         pod_netns: "/var/run/netns/cni-1234".as_ref(),
//!         config: &config,
//!         rdma_device: Some("mlx5_3"),
//!     })
//!     .await?;
//! println!("{} has {:?}", attached.pod_name, attached.addresses);
//!
//! // When the pod stops:
//! podnet.detach("claim-uid-eth3").await?;
//! # Ok(())
//! # }
//! ```

mod journal;
mod state;

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dranet_core::NetworkConfig;
use rtnetlink::packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use rtnetlink::packet_route::link::{
    InfoData, InfoKind, InfoVrf, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use rtnetlink::packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use rtnetlink::packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};

pub use journal::{Entry, JOURNAL_VERSION, Journal, Phase};
pub use state::{HostLink, RawMessage};

use crate::netns::{Netns, Rtnl, link_name};
use crate::{Error, Result};

/// Called before each step of an attach or detach with the step's name; an `Err` makes that
/// step fail with the message. For tracing and for tests that inject failures or crashes.
pub type StepHook = Arc<dyn Fn(&str) -> std::result::Result<(), String> + Send + Sync>;

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

/// What [`PodNet::recover`] did.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Entries of live owners, left alone.
    pub kept: Vec<String>,
    /// Entries whose link the host got back.
    pub restored: Vec<String>,
    /// Entries whose link no longer exists (a virtual link dies with its namespace).
    pub gone: Vec<String>,
    /// Entries that could not be restored, with why; kept for the next try.
    pub failed: Vec<(String, Error)>,
}

/// Whether a restore found the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Restored {
    Restored,
    Gone,
}

/// Moves links between the host and pods. One per daemon.
pub struct PodNet {
    host: Netns,
    journal: Journal,
    sysfs: PathBuf,
    hook: Option<StepHook>,
    lock: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for PodNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodNet")
            .field("host", &self.host)
            .field("journal", &self.journal)
            .finish_non_exhaustive()
    }
}

/// What goes to the pod besides the link's netlink configuration: ethtool settings (kernel
/// feature names) and the RDMA device.
#[derive(Debug, Default)]
struct Extras {
    features: std::collections::BTreeMap<String, bool>,
    private_flags: std::collections::BTreeMap<String, bool>,
    rdma_device: Option<String>,
}

/// A failed step: its name and the kernel's (or our) error.
struct StepError {
    step: String,
    source: io::Error,
}

type StepResult<T> = std::result::Result<T, StepError>;

fn at(step: impl Into<String>) -> impl FnOnce(io::Error) -> StepError {
    let step = step.into();
    move |source| StepError { step, source }
}

fn is_errno(e: &io::Error, errno: i32) -> bool {
    e.raw_os_error() == Some(errno)
}

const EEXIST: i32 = 17;
const ENOENT: i32 = 2;
const ESRCH: i32 = 3;

impl PodNet {
    /// `host` is the namespace links are given back to (the daemon's own, opened at start);
    /// `journal_dir` where attachments are recorded (created 0700).
    pub fn new(host: Netns, journal_dir: impl Into<PathBuf>) -> Result<Self> {
        Ok(Self {
            host,
            journal: Journal::open(journal_dir)?,
            sysfs: PathBuf::from("/sys"),
            hook: None,
            lock: tokio::sync::Mutex::new(()),
        })
    }

    /// Reads SR-IOV facts (a VF's PF MTU) from this sysfs root instead of `/sys`.
    #[must_use]
    pub fn sysfs(mut self, root: impl Into<PathBuf>) -> Self {
        self.sysfs = root.into();
        self
    }

    /// Calls `hook` before every step.
    #[must_use]
    pub fn step_hook(mut self, hook: StepHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// The namespace links are given back to.
    pub fn host(&self) -> &Netns {
        &self.host
    }

    /// The journal.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    fn step(&self, name: &str) -> StepResult<()> {
        tracing::trace!(step = name, "podnet step");
        match &self.hook {
            Some(h) => h(name).map_err(|m| StepError {
                step: name.to_string(),
                source: io::Error::other(m),
            }),
            None => Ok(()),
        }
    }

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
                let features = crate::ethtool::resolve(&e.features, &now).map_err(invalid)?;
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
            Ok(attached) => {
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

    async fn configure(
        &self,
        host: &Rtnl,
        pod: &Netns,
        podr: &Rtnl,
        entry: &mut Entry,
        cfg: &NetworkConfig,
        eth: &Extras,
    ) -> StepResult<Attached> {
        let rdma_device = eth.rdma_device.as_deref();
        let (features, private_flags) = (&eth.features, &eth.private_flags);
        let index = entry.host.index;
        let iface = &cfg.interface;

        // One request: the kernel closes the link (down) as part of the move, then applies the
        // name in the pod and the rest. An explicit down first would cost a second RCU grace
        // period (milliseconds) for nothing.
        self.step("move")?;
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.attributes
            .push(LinkAttribute::IfName(entry.pod_name.clone()));
        if let Some(mtu) = iface.mtu {
            m.attributes.push(LinkAttribute::Mtu(nonneg(mtu, "mtu")?));
        }
        if let Some(mac) = &iface.hardware_addr {
            m.attributes
                .push(LinkAttribute::Address(parse_mac(mac).map_err(at("mac"))?));
        }
        if let Some(v) = iface.gso_max_size {
            m.attributes
                .push(LinkAttribute::GsoMaxSize(nonneg(v, "gsoMaxSize")?));
        }
        if let Some(v) = iface.gro_max_size {
            m.attributes
                .push(LinkAttribute::GroMaxSize(nonneg(v, "groMaxSize")?));
        }
        if let Some(v) = iface.gso_ipv4_max_size {
            m.attributes
                .push(LinkAttribute::GsoIpv4MaxSize(nonneg(v, "gsoIPv4MaxSize")?));
        }
        if let Some(v) = iface.gro_ipv4_max_size {
            m.attributes
                .push(LinkAttribute::GroIpv4MaxSize(nonneg(v, "groIPv4MaxSize")?));
        }
        m.attributes
            .push(LinkAttribute::NetNsFd(pod.as_fd().as_raw_fd()));
        host.request(RouteNetlinkMessage::SetLink(m), 0)
            .await
            .map_err(at(format!("move into the pod as {}", entry.pod_name)))?;
        let link = podr
            .link_by_name(&entry.pod_name)
            .await
            .map_err(at("find the link in the pod"))?
            .ok_or_else(|| {
                at("find the link in the pod")(io::Error::new(
                    io::ErrorKind::NotFound,
                    "moved, but not in the pod namespace",
                ))
            })?;
        let pod_index = link.header.index;
        entry.pod_index = Some(pod_index);

        if let Some(dev) = rdma_device {
            self.step("rdma")?;
            let rdma_err =
                |e: Error| at(format!("rdma device {dev}"))(io::Error::other(e.to_string()));
            if crate::rdma::netns_mode().map_err(rdma_err)? == crate::rdma::NetnsMode::Exclusive {
                // Recorded before the move, so a crash right after it is undone too.
                entry.rdma_device = Some(dev.to_string());
                self.journal
                    .write(entry)
                    .map_err(|e| at("journal")(io::Error::other(e.to_string())))?;
                crate::rdma::move_device(dev, &self.host, pod).map_err(rdma_err)?;
            }
        }

        self.step("sysctl")?;
        let name = entry.pod_name.clone();
        let mut sysctls: Vec<(String, String)> = Vec::new();
        if let Some(v) = iface.arp_ignore {
            sysctls.push((format!("ipv4/conf/{name}/arp_ignore"), v.to_string()));
        }
        if let Some(v) = iface.arp_announce {
            sysctls.push((format!("ipv4/conf/{name}/arp_announce"), v.to_string()));
        }
        if let Some(f) = iface.forwarding {
            let v = if f { "1" } else { "0" };
            sysctls.push((format!("ipv4/conf/{name}/forwarding"), v.into()));
            sysctls.push((format!("ipv6/conf/{name}/forwarding"), v.into()));
        }
        if !sysctls.is_empty() {
            pod.run(|| {
                for (k, v) in &sysctls {
                    std::fs::write(Path::new("/proc/sys/net").join(k), v)
                        .map_err(|e| at(format!("sysctl {k}={v}"))(e))?;
                }
                Ok(())
            })
            .map_err(|e| at("sysctl")(io::Error::other(e.to_string())))??;
        }

        if let Some(vrf) = &iface.vrf {
            self.step("vrf")?;
            let table = vrf.table.unwrap_or(0);
            let mut v = LinkMessage::default();
            v.attributes.push(LinkAttribute::IfName(vrf.name.clone()));
            v.attributes.push(LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::Vrf),
                LinkInfo::Data(InfoData::Vrf(vec![InfoVrf::TableId(table)])),
            ]));
            let vrf_step = format!("vrf {} table {table}", vrf.name);
            let had_l3mdev = !l3mdev_rules(podr)
                .await
                .map_err(at(vrf_step.clone()))?
                .is_empty();
            match podr
                .request(RouteNetlinkMessage::NewLink(v), NLM_F_CREATE | NLM_F_EXCL)
                .await
            {
                Ok(_) => {
                    entry.pod_vrf = Some(vrf.name.clone());
                    entry.pod_l3mdev_rules = !had_l3mdev;
                }
                // A VRF the pod already has (another of its NICs) is joined, not owned.
                Err(e) if is_errno(&e, EEXIST) => {}
                Err(e) => return Err(at(vrf_step)(e)),
            }
            let vrf_link = podr
                .link_by_name(&vrf.name)
                .await
                .map_err(at(vrf_step.clone()))?
                .ok_or_else(|| at(vrf_step.clone())(io::Error::other("created but not found")))?;
            podr.request(
                RouteNetlinkMessage::SetLink(set_up(vrf_link.header.index, true)),
                0,
            )
            .await
            .map_err(at(vrf_step.clone()))?;
            let mut m = LinkMessage::default();
            m.header.index = pod_index;
            m.attributes
                .push(LinkAttribute::Controller(vrf_link.header.index));
            podr.request(RouteNetlinkMessage::SetLink(m), 0)
                .await
                .map_err(at(vrf_step))?;
        }

        let addresses = if iface.addresses.is_empty() {
            state::global_addresses(&entry.host)
        } else {
            iface.addresses.clone()
        };
        for cidr in &addresses {
            self.step("address")?;
            let step = format!("address {cidr}");
            let (ip, len) = parse_cidr(cidr).map_err(at(step.clone()))?;
            podr.request(
                RouteNetlinkMessage::NewAddress(address_message(pod_index, ip, len)),
                NLM_F_CREATE | NLM_F_EXCL,
            )
            .await
            .map_err(at(step))?;
        }

        self.step("up")?;
        podr.request(RouteNetlinkMessage::SetLink(set_up(pod_index, true)), 0)
            .await
            .map_err(at("set up"))?;

        if !features.is_empty() || !private_flags.is_empty() {
            self.step("ethtool")?;
            let ethtool_err = |e: Error| at("ethtool")(io::Error::other(e.to_string()));
            crate::ethtool::set_features(pod, &entry.pod_name, features).map_err(ethtool_err)?;
            crate::ethtool::set_private_flags(pod, &entry.pod_name, private_flags)
                .map_err(ethtool_err)?;
        }

        // Link-scope routes first: gateways of the others are reached through them.
        let mut routes: Vec<_> = cfg.routes.iter().collect();
        routes.sort_by_key(|r| !r.gateway.is_empty());
        for r in routes {
            self.step("route")?;
            let step = if r.gateway.is_empty() {
                format!("route {}", r.destination)
            } else {
                format!("route {} via {}", r.destination, r.gateway)
            };
            let msg = route_message(pod_index, r).map_err(at(step.clone()))?;
            podr.request(
                RouteNetlinkMessage::NewRoute(msg),
                NLM_F_CREATE | NLM_F_EXCL,
            )
            .await
            .map_err(at(step))?;
        }

        for r in &cfg.rules {
            self.step("rule")?;
            let step = format!(
                "rule priority {} from {} to {} table {}",
                r.priority,
                or_all(&r.source),
                or_all(&r.destination),
                r.table
            );
            let msg = rule_message(r).map_err(at(step.clone()))?;
            let raw = RawMessage::new(&RouteNetlinkMessage::NewRule(msg.clone()));
            podr.request(RouteNetlinkMessage::NewRule(msg), NLM_F_CREATE | NLM_F_EXCL)
                .await
                .map_err(at(step))?;
            entry.pod_rules.push(raw);
        }

        for n in &cfg.neighbors {
            self.step("neighbour")?;
            let step = format!("neighbour {} lladdr {}", n.destination, n.hardware_addr);
            let ip: IpAddr = n.destination.parse().map_err(|e| {
                at(step.clone())(io::Error::new(io::ErrorKind::InvalidInput, format!("{e}")))
            })?;
            let mac = parse_mac(&n.hardware_addr).map_err(at(step.clone()))?;
            let mut m = NeighbourMessage::default();
            m.header.family = family(ip);
            m.header.ifindex = pod_index;
            m.header.state = NeighbourState::Permanent;
            m.header.kind = RouteType::Unicast;
            m.attributes.push(NeighbourAttribute::Destination(match ip {
                IpAddr::V4(v) => NeighbourAddress::Inet(v),
                IpAddr::V6(v) => NeighbourAddress::Inet6(v),
            }));
            m.attributes.push(NeighbourAttribute::LinkLayerAddress(mac));
            podr.request(
                RouteNetlinkMessage::NewNeighbour(m),
                NLM_F_CREATE | NLM_F_EXCL,
            )
            .await
            .map_err(at(step))?;
        }

        self.step("done")?;
        let link = podr
            .link_by_index(pod_index)
            .await
            .map_err(at("read the link in the pod"))?
            .unwrap_or(link);
        Ok(attached_from(entry, &link, addresses))
    }

    /// Gives the host back the link attached under `key`: moves it out of the pod and restores
    /// what the host had. Nothing recorded under `key` is not an error (already detached). On
    /// failure the record stays and the next detach or [`PodNet::recover`] tries again.
    pub async fn detach(&self, key: &str) -> Result<()> {
        let _serial = self.lock.lock().await;
        let Some(mut entry) = self.journal.read(key)? else {
            return Ok(());
        };
        entry.phase = Phase::Detaching;
        self.journal.write(&entry)?;
        self.restore_entry(&entry).await?;
        self.journal.remove(key)
    }

    /// At start: for each journal entry, if `live` says its owner still runs and the attach
    /// completed, leaves it; otherwise gives the host the link back.
    pub async fn recover(&self, live: impl Fn(&Entry) -> bool) -> Result<Recovery> {
        let _serial = self.lock.lock().await;
        let mut out = Recovery::default();
        for e in self.journal.entries()? {
            if e.phase == Phase::Attached && live(&e) {
                out.kept.push(e.key);
                continue;
            }
            match self.restore_entry(&e).await {
                Ok(r) => {
                    self.journal.remove(&e.key)?;
                    match r {
                        Restored::Restored => out.restored.push(e.key),
                        Restored::Gone => out.gone.push(e.key),
                    }
                }
                Err(err) => {
                    tracing::warn!(key = %e.key, link = %e.host.name, error = %err, "could not give the host its link back; will retry");
                    out.failed.push((e.key, err));
                }
            }
        }
        Ok(out)
    }

    async fn restore_entry(&self, e: &Entry) -> Result<Restored> {
        self.restore(e).await.map_err(|x| Error::Detach {
            link: e.host.name.clone(),
            netns: e.pod_netns.clone(),
            step: x.step,
            source: x.source,
        })
    }

    async fn restore(&self, e: &Entry) -> StepResult<Restored> {
        let host = self
            .host
            .rtnl()
            .await
            .map_err(|x| at("open the host namespace")(io::Error::other(x.to_string())))?;
        let h = &e.host;

        // 1. Out of the pod, when its namespace still exists and is the one we attached to.
        let pod = Netns::open(&e.pod_netns)
            .ok()
            .filter(|p| p.id().ok() == Some(e.pod_netns_id));
        if let Some(pod) = pod {
            let podr = pod
                .rtnl()
                .await
                .map_err(|x| at("open the pod namespace")(io::Error::other(x.to_string())))?;
            // The RDMA device first: in exclusive mode it belongs to the namespace, and the
            // link's verbs users see it go before the netdev does.
            if let Some(dev) = &e.rdma_device {
                self.step("detach:rdma")?;
                let in_pod = crate::rdma::devices(&pod).map_err(|x| {
                    at(format!("rdma device {dev}"))(io::Error::other(x.to_string()))
                })?;
                if in_pod.iter().any(|(_, n)| n == dev) {
                    crate::rdma::move_device(dev, &pod, &self.host).map_err(|x| {
                        at(format!("move rdma device {dev} back"))(io::Error::other(x.to_string()))
                    })?;
                }
            }
            let links = podr.links().await.map_err(at("read the pod's links"))?;
            let found = links.iter().find(|l| {
                (e.pod_index == Some(l.header.index) || link_name(l) == Some(&e.pod_name))
                    && same_identity(l, h)
            });
            if let Some(l) = found {
                self.step("detach:move")?;
                let idx = l.header.index;
                let mut m = LinkMessage::default();
                m.header.index = idx;
                m.attributes.push(LinkAttribute::IfName(h.name.clone()));
                m.attributes
                    .push(LinkAttribute::NetNsFd(self.host.as_fd().as_raw_fd()));
                podr.request(RouteNetlinkMessage::SetLink(m), 0)
                    .await
                    .map_err(at(format!("move back to the host as {}", h.name)))?;
            }
            self.step("detach:pod-rules")?;
            for raw in &e.pod_rules {
                if let Ok(RouteNetlinkMessage::NewRule(r)) = raw.decode() {
                    match podr.request(RouteNetlinkMessage::DelRule(r), 0).await {
                        Ok(_) => {}
                        Err(x) if is_errno(&x, ENOENT) || is_errno(&x, ESRCH) => {}
                        Err(x) => return Err(at(format!("remove pod {}", raw.summary))(x)),
                    }
                }
            }
            if let Some(vrf) = &e.pod_vrf
                && let Ok(Some(v)) = podr.link_by_name(vrf).await
            {
                let mut m = LinkMessage::default();
                m.header.index = v.header.index;
                podr.request(RouteNetlinkMessage::DelLink(m), 0)
                    .await
                    .map_err(at(format!("remove pod vrf {vrf}")))?;
            }
            // The kernel's l3mdev rules came with our VRF; they go when no VRF is left.
            if e.pod_l3mdev_rules {
                let links = podr.links().await.map_err(at("read the pod's links"))?;
                if !links.iter().any(|l| link_kind(l).as_deref() == Some("vrf")) {
                    for r in l3mdev_rules(&podr)
                        .await
                        .map_err(at("read the pod's rules"))?
                    {
                        match podr.request(RouteNetlinkMessage::DelRule(r), 0).await {
                            Ok(_) => {}
                            Err(x) if is_errno(&x, ENOENT) || is_errno(&x, ESRCH) => {}
                            Err(x) => return Err(at("remove the pod's l3mdev rules")(x)),
                        }
                    }
                }
            }
        }

        // 2. The link on the host: where we put it, or where the kernel returned it (a
        // physical link whose namespace was deleted comes back by itself, with its pod name).
        let links = host.links().await.map_err(at("read the host's links"))?;
        let has_identity = h.parent_dev.is_some() || h.perm_mac.is_some();
        let found = links.iter().find(|l| {
            if has_identity {
                same_identity(l, h) && link_kind(l) == h.kind
            } else {
                link_name(l) == Some(&h.name) && link_kind(l) == h.kind
            }
        });
        let Some(link) = found else {
            tracing::info!(link = %h.name, "link gone (a virtual link dies with its namespace); nothing to restore");
            return Ok(Restored::Gone);
        };
        let idx = link.header.index;

        self.step("detach:link")?;
        if link.header.flags.contains(LinkFlags::Up) {
            host.request(RouteNetlinkMessage::SetLink(set_up(idx, false)), 0)
                .await
                .map_err(at("set down"))?;
        }
        let mut m = LinkMessage::default();
        m.header.index = idx;
        if link_name(link) != Some(&h.name) {
            m.attributes.push(LinkAttribute::IfName(h.name.clone()));
        }
        let current = |f: fn(&LinkAttribute) -> Option<Vec<u8>>| link.attributes.iter().find_map(f);
        if let Some(mtu) = h.mtu {
            m.attributes.push(LinkAttribute::Mtu(mtu));
        }
        if let Some(mac) = &h.mac
            && current(|a| match a {
                LinkAttribute::Address(x) => Some(x.clone()),
                _ => None,
            })
            .as_ref()
                != Some(mac)
        {
            m.attributes.push(LinkAttribute::Address(mac.clone()));
        }
        for (want, attr) in [
            (
                h.gso_max_size,
                LinkAttribute::GsoMaxSize as fn(u32) -> LinkAttribute,
            ),
            (h.gro_max_size, LinkAttribute::GroMaxSize),
            (h.gso_ipv4_max_size, LinkAttribute::GsoIpv4MaxSize),
            (h.gro_ipv4_max_size, LinkAttribute::GroIpv4MaxSize),
        ] {
            if let Some(v) = want {
                let a = attr(v);
                if !link.attributes.contains(&a) {
                    m.attributes.push(a);
                }
            }
        }
        host.request(RouteNetlinkMessage::SetLink(m), 0)
            .await
            .map_err(at(format!("restore {}: name, MTU, MAC, GSO/GRO", h.name)))?;

        // Everything below is replayed in full even when one piece fails, so one bad route
        // does not cost the host the rest; the failures are reported together.
        let mut failures: Vec<String> = Vec::new();
        if !h.ethtool_features.is_empty() || !h.ethtool_private_flags.is_empty() {
            self.step("detach:ethtool")?;
            if let Err(e) = crate::ethtool::set_features(&self.host, &h.name, &h.ethtool_features) {
                failures.push(e.to_string());
            }
            if let Err(e) =
                crate::ethtool::set_private_flags(&self.host, &h.name, &h.ethtool_private_flags)
            {
                failures.push(e.to_string());
            }
        }
        let mut replay = async |raw: &RawMessage,
                                fix: &(
                                     dyn Fn(RouteNetlinkMessage) -> Option<RouteNetlinkMessage>
                                         + Sync
                                 )| {
            let msg = match raw.decode() {
                Ok(m) => m,
                Err(x) => {
                    failures.push(format!("{}: {x}", raw.summary));
                    return;
                }
            };
            let Some(msg) = fix(msg) else { return };
            match host.request(msg, NLM_F_CREATE | NLM_F_EXCL).await {
                Ok(_) => {}
                Err(x) if is_errno(&x, EEXIST) => {}
                Err(x) => failures.push(format!("{}: {x}", raw.summary)),
            }
        };

        self.step("detach:address")?;
        for raw in &h.addresses {
            replay(raw, &|m| match m {
                RouteNetlinkMessage::NewAddress(mut a) => {
                    a.header.index = idx;
                    Some(RouteNetlinkMessage::NewAddress(a))
                }
                _ => None,
            })
            .await;
        }
        if h.up {
            self.step("detach:up")?;
            host.request(RouteNetlinkMessage::SetLink(set_up(idx, true)), 0)
                .await
                .map_err(at("set up"))?;
        }
        self.step("detach:neighbour")?;
        for raw in &h.neighbours {
            replay(raw, &|m| match m {
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
        self.step("detach:route")?;
        let mut routes: Vec<&RawMessage> = h.routes.iter().collect();
        // Routes without a gateway first: the others' gateways are reached through them.
        routes.sort_by_key(|raw| match raw.decode() {
            Ok(RouteNetlinkMessage::NewRoute(r)) => r
                .attributes
                .iter()
                .any(|a| matches!(a, RouteAttribute::Gateway(_) | RouteAttribute::MultiPath(_))),
            _ => true,
        });
        let old = h.index;
        for raw in routes {
            replay(raw, &|m| match m {
                RouteNetlinkMessage::NewRoute(mut r) => {
                    r.attributes
                        .retain(|a| !matches!(a, RouteAttribute::CacheInfo(_)));
                    for a in &mut r.attributes {
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
                    Some(RouteNetlinkMessage::NewRoute(r))
                }
                _ => None,
            })
            .await;
        }
        self.step("detach:rule")?;
        for raw in &h.rules {
            replay(raw, &|m| match m {
                RouteNetlinkMessage::NewRule(r) => Some(RouteNetlinkMessage::NewRule(r)),
                _ => None,
            })
            .await;
        }
        if failures.is_empty() {
            Ok(Restored::Restored)
        } else {
            Err(at(format!("restore {}", h.name))(io::Error::other(
                failures.join("; "),
            )))
        }
    }
}

/// The `l3mdev` rules of a namespace (IPv4 and IPv6), which the kernel adds with the first VRF.
async fn l3mdev_rules(rtnl: &Rtnl) -> io::Result<Vec<RuleMessage>> {
    let mut out = Vec::new();
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let mut q = RuleMessage::default();
        q.header.family = family;
        for m in rtnl.dump(RouteNetlinkMessage::GetRule(q)).await? {
            if let RouteNetlinkMessage::NewRule(r) = m
                && r.attributes
                    .iter()
                    .any(|a| matches!(a, RuleAttribute::L3MDev(true)))
            {
                out.push(r);
            }
        }
    }
    Ok(out)
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

fn link_kind(l: &LinkMessage) -> Option<String> {
    l.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
            LinkInfo::Kind(k) => Some(k.to_string()),
            _ => None,
        }),
        _ => None,
    })
}

/// Whether `l` is the recorded link, by what survives renames and moves: the parent (PCI)
/// device and permanent MAC when it has them; anything matches when it has neither (virtual
/// links, matched by name or index by the caller).
fn same_identity(l: &LinkMessage, h: &HostLink) -> bool {
    let parent = l.attributes.iter().find_map(|a| match a {
        LinkAttribute::ParentDevName(p) => Some(p.as_str()),
        _ => None,
    });
    let perm = l.attributes.iter().find_map(|a| match a {
        LinkAttribute::PermAddress(m) if m.iter().any(|b| *b != 0) => Some(m),
        _ => None,
    });
    if let Some(p) = &h.parent_dev
        && parent != Some(p.as_str())
    {
        return false;
    }
    if let Some(m) = &h.perm_mac
        && perm != Some(m)
    {
        return false;
    }
    true
}

fn set_up(index: u32, up: bool) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.header.index = index;
    m.header.change_mask = LinkFlags::Up;
    if up {
        m.header.flags = LinkFlags::Up;
    }
    m
}

fn nonneg(v: i32, what: &str) -> StepResult<u32> {
    u32::try_from(v).map_err(|_| {
        at(what.to_string())(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {v} is negative"),
        ))
    })
}

fn family(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

fn or_all(s: &str) -> &str {
    if s.is_empty() { "all" } else { s }
}

/// Parses `aa:bb:cc:dd:ee:ff` (or any colon-separated hex bytes, as IPoIB's 20).
pub fn parse_mac(s: &str) -> io::Result<Vec<u8>> {
    let bytes: std::result::Result<Vec<u8>, _> =
        s.split(':').map(|p| u8::from_str_radix(p, 16)).collect();
    match bytes {
        Ok(b) if b.len() >= 6 && s.split(':').all(|p| p.len() == 2) => Ok(b),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("hardware address {s:?} is not colon-separated hex bytes"),
        )),
    }
}

/// Formats bytes as `aa:bb:…`.
pub fn format_mac(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `ip/len` (a bare IP is a host address).
pub fn parse_cidr(s: &str) -> io::Result<(IpAddr, u8)> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{s:?}: {why}"));
    let (ip, len) = match s.split_once('/') {
        Some((ip, len)) => (ip, Some(len)),
        None => (s, None),
    };
    let ip: IpAddr = ip.parse().map_err(|_| bad("not an IP address"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l.parse::<u8>().map_err(|_| bad("bad prefix length"))?,
        None => max,
    };
    if len > max {
        return Err(bad("prefix length too long"));
    }
    Ok((ip, len))
}

fn address_message(index: u32, ip: IpAddr, len: u8) -> AddressMessage {
    let mut m = AddressMessage::default();
    m.header.family = family(ip);
    m.header.prefix_len = len;
    m.header.index = index;
    m.header.scope = AddressScope::Universe;
    m.attributes.push(AddressAttribute::Local(ip));
    m.attributes.push(AddressAttribute::Address(ip));
    if let IpAddr::V4(v4) = ip
        && len < 31
    {
        let host_bits = 32 - u32::from(len);
        let bcast = u32::from(v4) | ((1u32 << host_bits) - 1);
        m.attributes
            .push(AddressAttribute::Broadcast(std::net::Ipv4Addr::from(bcast)));
    }
    m
}

/// An IP address, or none for an empty string.
fn optional_ip(what: &str, s: &str) -> io::Result<Option<IpAddr>> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse().map(Some).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {s:?} is not an IP address"),
        )
    })
}

fn route_message(oif: u32, r: &dranet_core::RouteConfig) -> io::Result<RouteMessage> {
    let dst = if r.destination.is_empty() || r.destination == "default" {
        None
    } else {
        Some(parse_cidr(&r.destination)?)
    };
    let gw = optional_ip("gateway", &r.gateway)?;
    let src = optional_ip("source", &r.source)?;
    let fam_ip = dst
        .map(|d| d.0)
        .or(gw)
        .or(src)
        .unwrap_or(IpAddr::V4(0.into()));
    let mut m = RouteMessage::default();
    m.header.address_family = family(fam_ip);
    m.header.destination_prefix_length = dst.map(|d| d.1).unwrap_or(0);
    let table = if r.table == 0 { 254 } else { r.table };
    m.header.table = u8::try_from(table).unwrap_or(0);
    m.header.protocol = RouteProtocol::Boot;
    m.header.scope = if r.scope != 0 {
        RouteScope::from(r.scope)
    } else if gw.is_some() {
        RouteScope::Universe
    } else {
        RouteScope::Link
    };
    m.header.kind = RouteType::Unicast;
    if let Some((ip, _)) = dst {
        m.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(ip)));
    }
    if let Some(g) = gw {
        m.attributes
            .push(RouteAttribute::Gateway(RouteAddress::from(g)));
    }
    if let Some(s) = src {
        m.attributes
            .push(RouteAttribute::PrefSource(RouteAddress::from(s)));
    }
    m.attributes.push(RouteAttribute::Oif(oif));
    m.attributes.push(RouteAttribute::Table(table));
    Ok(m)
}

fn rule_message(r: &dranet_core::RuleConfig) -> io::Result<RuleMessage> {
    let src = if r.source.is_empty() {
        None
    } else {
        Some(parse_cidr(&r.source)?)
    };
    let dst = if r.destination.is_empty() {
        None
    } else {
        Some(parse_cidr(&r.destination)?)
    };
    let fam_ip = src.or(dst).map(|x| x.0).unwrap_or(IpAddr::V4(0.into()));
    let mut m = RuleMessage::default();
    m.header.family = family(fam_ip);
    m.header.action = RuleAction::ToTable;
    m.header.table = u8::try_from(r.table).unwrap_or(0);
    if let Some((ip, len)) = src {
        m.header.src_len = len;
        m.attributes.push(RuleAttribute::Source(ip));
    }
    if let Some((ip, len)) = dst {
        m.header.dst_len = len;
        m.attributes.push(RuleAttribute::Destination(ip));
    }
    if r.priority != 0 {
        m.attributes.push(RuleAttribute::Priority(r.priority));
    }
    m.attributes.push(RuleAttribute::Table(r.table));
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_and_mac_parsing_name_what_is_wrong() {
        assert_eq!(
            parse_cidr("10.0.0.1/24").unwrap(),
            ("10.0.0.1".parse().unwrap(), 24)
        );
        assert_eq!(parse_cidr("fd00::1").unwrap().1, 128);
        let e = parse_cidr("10.0.0.1/33").unwrap_err().to_string();
        assert!(e.contains("10.0.0.1/33") && e.contains("too long"), "{e}");
        assert!(parse_cidr("eth0").is_err());
        assert_eq!(
            parse_mac("02:00:00:00:00:0a").unwrap(),
            vec![2, 0, 0, 0, 0, 10]
        );
        assert!(parse_mac("02:00:00:00:00").is_err());
        assert!(parse_mac("2:0:0:0:0:a").is_err());
        assert_eq!(format_mac(&[2, 0, 0, 0, 0, 10]), "02:00:00:00:00:0a");
    }

    #[test]
    fn ipv4_addresses_get_their_broadcast() {
        let m = address_message(3, "10.1.2.3".parse().unwrap(), 24);
        assert!(
            m.attributes
                .contains(&AddressAttribute::Broadcast("10.1.2.255".parse().unwrap()))
        );
        let m = address_message(3, "10.1.2.3".parse().unwrap(), 32);
        assert!(
            !m.attributes
                .iter()
                .any(|a| matches!(a, AddressAttribute::Broadcast(_)))
        );
    }

    #[test]
    fn routes_default_to_link_scope_without_gateway_and_keep_big_tables() {
        let r = dranet_core::RouteConfig {
            destination: "10.0.0.0/8".into(),
            table: 1000,
            ..Default::default()
        };
        let m = route_message(7, &r).unwrap();
        assert_eq!(m.header.scope, RouteScope::Link);
        assert!(m.attributes.contains(&RouteAttribute::Table(1000)));
        assert!(m.attributes.contains(&RouteAttribute::Oif(7)));
        let r = dranet_core::RouteConfig {
            destination: "default".into(),
            gateway: "fd00::1".into(),
            ..Default::default()
        };
        let m = route_message(7, &r).unwrap();
        assert_eq!(m.header.address_family, AddressFamily::Inet6);
        assert_eq!(m.header.scope, RouteScope::Universe);
        let bad = dranet_core::RouteConfig {
            destination: "10.0.0.0/8".into(),
            gateway: "router".into(),
            ..Default::default()
        };
        assert!(
            route_message(7, &bad)
                .unwrap_err()
                .to_string()
                .contains("router")
        );
    }

    #[test]
    fn raw_messages_round_trip() {
        let m =
            RouteNetlinkMessage::NewAddress(address_message(4, "192.168.1.5".parse().unwrap(), 24));
        let raw = RawMessage::new(&m);
        assert_eq!(raw.decode().unwrap(), m);
        assert!(raw.summary.contains("192.168.1.5/24"), "{}", raw.summary);
        let bad = RawMessage {
            hex: "zz".into(),
            ..raw
        };
        assert!(bad.decode().is_err());
    }
}
