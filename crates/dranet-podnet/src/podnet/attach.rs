//! [`PodNet::attach`]: the request checked against the config and the link, the host's state
//! recorded in the journal before anything changes, the link configured in the pod, and on
//! failure everything rolled back.

use std::io;
use std::path::Path;

use dranet_core::NetworkConfig;
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};

use super::journal::{Entry, JOURNAL_VERSION, Journal, Phase};
use super::messages::format_mac;
use super::steps::Extras;
use super::{PodNet, PreflightError, at, check_config, identity, preflight, state};
use crate::netns::{Netns, Rtnl};
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
    /// The source table of a child's source-based routing, as [`plan_source_tables`] chose it
    /// for the pod; `None`: upstream's ([`table_for_name`] of the child's name). Either is passed
    /// over for the next free table when the pod uses it already. Not read for `Passthrough`,
    /// whose configuration names its tables (a lease's is [`dhcp::apply`]'s).
    ///
    /// [`plan_source_tables`]: crate::plan_source_tables
    /// [`table_for_name`]: dranet_core::interface_type::table_for_name
    /// [`dhcp::apply`]: crate::dhcp::apply
    pub source_table: Option<u32>,
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
    /// Checks a config before anything changes: everything [`check_config`] refuses, and a VF's
    /// MTU against its PF's (from sysfs).
    ///
    /// [`check_config`]: super::check_config
    pub(super) fn validate(&self, link: &str, config: &NetworkConfig) -> Result<()> {
        let invalid = |reason: String| Error::InvalidConfig {
            device: link.to_string(),
            reason,
        };
        check_config(config).map_err(|e| invalid(e.to_string()))?;
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
                            "interface.mtu: {mtu} is above the MTU {pf_mtu} of the device's \
                             SR-IOV physical function"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Moves `req.link` into the pod namespace and configures it. Retried with the same key and
    /// owner after it succeeded, it answers again without changing anything. A link another
    /// sandbox holds under this key while its namespace exists is refused ([`Error::InUse`]).
    ///
    /// A config of a child type (`IPVLAN`, `Macvlan`) leaves the link on the host and gives the
    /// pod a child of it instead; see the `child` module.
    pub async fn attach(&self, req: &AttachRequest<'_>) -> Result<Attached> {
        if req.config.interface_type().is_child() {
            return self.attach_child(req).await;
        }
        Journal::check_key(req.key)?;
        let _key = self.locks.key(req.key).await;
        let existing = self.journal.read(req.key)?;
        let mut links = vec![req.link];
        if let Some(e) = &existing {
            links.push(&e.host.name);
        }
        let _links = self.locks.links(&links).await;
        if let Some(e) = existing
            && let Some(a) = self.settle_existing(req, e).await?
        {
            return Ok(a);
        }
        self.validate(req.link, req.config)?;

        let (pod, pod_id) = self.open_pod(req.pod_netns)?;
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
        let checked = preflight(&self.host, &link, req.config).map_err(|e| match e {
            PreflightError::Refused(r) => Error::InvalidConfig {
                device: req.link.to_string(),
                reason: r.to_string(),
            },
            PreflightError::Unreadable(e) => e,
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
        let mut snapshot = state::capture(&host, &link)
            .await
            .map_err(|e| self.attach_err(req, "record the host state", e))?;
        // Ethtool: the values the pre-flight read are recorded before anything changes, so
        // detach can put them back.
        let name = snapshot.name.clone();
        snapshot.sysctls = self
            .host
            .run(move || state::read_sysctls(&name))
            .map_err(|e| self.attach_err(req, "record the host state", io::Error::other(e)))?;
        snapshot.ethtool_features = checked.features_before;
        snapshot.ethtool_private_flags = checked.private_flags_before;
        let eth = Extras {
            features: checked.features,
            private_flags: req
                .config
                .ethtool
                .as_ref()
                .map(|e| e.private_flags.clone())
                .unwrap_or_default(),
            rdma_device: req.rdma_device.map(str::to_string),
        };
        let entry = Entry {
            version: JOURNAL_VERSION,
            key: req.key.to_string(),
            owner: req.owner.to_string(),
            pod_netns: req.pod_netns.to_path_buf(),
            pod_netns_id: pod_id,
            pod_name,
            pod_index: None,
            pod_peer: None,
            phase: Phase::Attaching,
            host: snapshot,
            pod_rules: Vec::new(),
            pod_vrf: None,
            pod_l3mdev_rules: false,
            rdma_device: None,
        };
        self.journal_and_configure(req, (&host, &pod, &podr), entry, &eth)
            .await
    }

    /// Journals `entry` (the host's state, before anything changes), configures the link in the
    /// pod, and journals it attached; on failure rolls back what was done.
    async fn journal_and_configure(
        &self,
        req: &AttachRequest<'_>,
        (host, pod, podr): (&Rtnl, &Netns, &Rtnl),
        mut entry: Entry,
        eth: &Extras,
    ) -> Result<Attached> {
        if let Err(e) = self.step("journal") {
            return Err(self.attach_err(req, &e.step, e.source));
        }
        self.journal.write(&entry)?;

        let configured = match self
            .configure(host, pod, podr, &mut entry, req.config, eth)
            .await
        {
            Ok((link, addresses)) => {
                let attached = attached_from(&entry, &link, addresses);
                entry.phase = Phase::Attached;
                entry.pod_index = Some(attached.pod_index);
                self.held.hold(&entry.key, pod);
                self.journal
                    .write(&entry)
                    .map(|()| attached)
                    .map_err(|e| at("journal")(io::Error::other(e)))
            }
            Err(e) => Err(e),
        };
        let e = match configured {
            Ok(attached) => return Ok(attached),
            Err(e) => e,
        };
        // Everything done is undone; when that fails too, the entry stays for detach or
        // recovery, and the error says so.
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

    /// An entry already under the request's key: the same attachment retried (answered again
    /// when the link is still in the pod), a live pod's (refused), or one to give back first (an
    /// interrupted attachment, or one of a sandbox whose namespace is gone).
    async fn settle_existing(&self, req: &AttachRequest<'_>, e: Entry) -> Result<Option<Attached>> {
        if e.owner == req.owner && e.phase == Phase::Attached && e.host.name == req.link {
            if let Some(a) = self.still_attached(req, &e).await? {
                return Ok(Some(a));
            }
        } else if e.owner != req.owner && self.pod_netns(&e)?.is_some() {
            return Err(Error::InUse {
                link: e.host.name.clone(),
                owner: e.owner.clone(),
            });
        }
        self.restore_entry(&e).await?;
        self.journal.remove(&e.key)?;
        Ok(None)
    }

    /// Opens the pod's namespace and its identity, refusing the host's own.
    pub(super) fn open_pod(&self, path: &Path) -> Result<(Netns, crate::netns::NetnsId)> {
        let pod = Netns::open(path)?;
        let pod_id = pod.id()?;
        if self.host_ids.contains(&pod_id) {
            return Err(Error::HostNetns {
                netns: path.to_path_buf(),
            });
        }
        Ok((pod, pod_id))
    }

    /// The answer to a retry of a completed attach: the link as the pod has it, if it is still
    /// there (by identity).
    async fn still_attached(&self, req: &AttachRequest<'_>, e: &Entry) -> Result<Option<Attached>> {
        let Some(pod) = self.pod_netns(e)? else {
            return Ok(None);
        };
        let links = pod
            .rtnl()
            .await?
            .links()
            .await
            .map_err(|x| self.attach_err(req, "read the pod's links", x))?;
        Ok(links
            .iter()
            .find(|l| identity::ours_in_pod(l, e))
            .map(|l| attached_from(e, l, Vec::new())))
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
