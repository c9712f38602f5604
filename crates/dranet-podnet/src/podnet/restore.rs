//! Giving the host its link back: [`PodNet::detach`] when the pod stops, [`PodNet::recover`] at
//! start for what a crash left behind. The link (and its RDMA device) leaves the pod, what the
//! pod got around it (rules, a VRF) goes, and the host's recorded state is replayed.
//!
//! The link is found by its identity (see `identity`), never by name alone: a substitute the
//! pod made stays in the pod, and while the pod's namespace exists a link not found there nor
//! on the host is an error (the entry is kept), never "gone". Nothing here writes new data to
//! the state directory, so a full disk does not keep a link from the host.
//!
//! Once the link is back on the host it is the host's: recorded state the kernel will not take
//! again (an IPv6 route on a link whose IPv6 the host has since disabled, a route whose gateway
//! it no longer reaches) is reported, not retried. The same messages would fail the same way on
//! every retry, and an entry kept for them would hold the NIC from every later pod.

use std::io;

use super::journal::{Entry, Journal, Phase};
use super::steps::{
    Restoring, addresses, ethtool, link, mtu_mac, neighbours, rdma, routes, rules, sysctl, vrf,
};
use super::{PodNet, StepResult, at};
use crate::netns::Netns;
use crate::{Error, Result};

/// What [`PodNet::recover`] did.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Entries of live owners, left alone.
    pub kept: Vec<String>,
    /// Entries whose link the host got back.
    pub restored: Vec<String>,
    /// Of those, the ones where some recorded state could not be replayed, with what.
    pub incomplete: Vec<(String, Vec<String>)>,
    /// Entries whose link no longer exists (a virtual link dies with its namespace).
    pub gone: Vec<String>,
    /// Entries that could not be restored, with why; kept for the next try.
    pub failed: Vec<(String, Error)>,
}

/// Whether a restore found the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Restored {
    /// On the host again; `incomplete` is the recorded state the host would not take back.
    Restored {
        incomplete: Vec<String>,
    },
    Gone,
}

impl PodNet {
    /// Gives the host back the link attached under `key`: moves it out of the pod and restores
    /// what the host had. Nothing recorded under `key` is not an error (already detached). On
    /// failure the record stays and the next detach or [`PodNet::recover`] tries again.
    pub async fn detach(&self, key: &str) -> Result<()> {
        Journal::check_key(key)?;
        let _key = self.locks.key(key).await;
        let Some(mut entry) = self.journal.read(key)? else {
            return Ok(());
        };
        let _link = self.locks.links(&[&entry.host.name]).await;
        entry.phase = Phase::Detaching;
        // The phase tells a restarted daemon to finish the detach even if the pod still runs;
        // without it recovery waits for the pod to stop. Not worth failing the detach for (a
        // full state directory): removing the entry at the end needs no space.
        if let Err(e) = self.journal.write(&entry) {
            tracing::warn!(key, error = %e, "could not mark the journal entry as detaching; detaching anyway");
        }
        self.restore_entry(&entry).await?;
        self.journal.remove(key)?;
        self.held.release(key);
        Ok(())
    }

    /// At start: for each journal entry, if `live` says its owner still runs and the attach
    /// completed, leaves it; otherwise gives the host the link back. Entries are taken one at a
    /// time under their key's lock, so it may run beside attaches and detaches.
    pub async fn recover(&self, live: impl Fn(&Entry) -> bool) -> Result<Recovery> {
        let mut out = Recovery::default();
        for listed in self.journal.entries()? {
            let _key = self.locks.key(&listed.key).await;
            // Read again under the lock: an attach or detach may have moved it on.
            let Some(e) = self.journal.read(&listed.key)? else {
                continue;
            };
            let _link = self.locks.links(&[&e.host.name]).await;
            if e.phase == Phase::Attached && live(&e) {
                // Held from now on, as at its attach (a restart let it go).
                if let Ok(Some(ns)) = self.pod_netns(&e) {
                    self.held.hold(&e.key, &ns);
                }
                out.kept.push(e.key);
                continue;
            }
            match self.restore_entry(&e).await {
                Ok(r) => {
                    self.journal.remove(&e.key)?;
                    self.held.release(&e.key);
                    match r {
                        Restored::Restored { incomplete } => {
                            if !incomplete.is_empty() {
                                out.incomplete.push((e.key.clone(), incomplete));
                            }
                            out.restored.push(e.key)
                        }
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

    /// The entry's pod namespace, if it still exists and is the one attached to (not another
    /// namespace mounted at the same path since).
    pub(super) fn pod_netns(&self, e: &Entry) -> Result<Option<Netns>> {
        // Held since the attach: the namespace exists whatever became of its path.
        if let Some(ns) = self.held.get(&e.key, e.pod_netns_id) {
            return Ok(Some(ns));
        }
        if let Err(x) = std::fs::symlink_metadata(&e.pod_netns)
            && x.kind() == io::ErrorKind::NotFound
        {
            return Ok(None);
        }
        let pod = Netns::open(&e.pod_netns)?;
        Ok((pod.id()? == e.pod_netns_id).then_some(pod))
    }

    /// Gives the host back the link of `e`; a failure names the step. State the host would not
    /// take back is logged here, once, for every caller.
    pub(super) async fn restore_entry(&self, e: &Entry) -> Result<Restored> {
        let r = self.restore(e).await.map_err(|x| Error::Detach {
            link: e.host.name.clone(),
            netns: e.pod_netns.clone(),
            step: x.step,
            source: x.source,
        })?;
        if let Restored::Restored { incomplete } = &r
            && !incomplete.is_empty()
        {
            tracing::warn!(
                key = %e.key,
                link = %e.host.name,
                not_restored = %incomplete.join("; "),
                "the host has its link back without some of its recorded state: the kernel refused it"
            );
        }
        Ok(r)
    }

    /// The pod's side first (what is there goes), then the host's recorded state replayed on the
    /// link (see `steps`).
    async fn restore(&self, e: &Entry) -> StepResult<Restored> {
        let host = self
            .host
            .rtnl()
            .await
            .map_err(|x| at("open the host namespace")(io::Error::other(x)))?;
        // 1. Out of the pod, when its namespace still exists and is the one we attached to.
        let pod = self
            .pod_netns(e)
            .map_err(|x| at("open the pod namespace")(io::Error::other(x)))?;
        let pod_exists = pod.is_some();
        let substitute = match pod {
            Some(pod) => self.restore_in_pod(&pod, e).await?,
            None => None,
        };
        // 2. The link on the host, given what it had.
        let Some(link) = link::find_on_host(&host, e, pod_exists, substitute).await? else {
            return Ok(Restored::Gone);
        };
        let mut r = Restoring {
            host: &host,
            entry: e,
            index: link.header.index,
            failures: Vec::new(),
        };
        mtu_mac::restore(self, &r, &link).await?;
        // Everything below is replayed in full even when one piece fails, so one bad route
        // does not cost the host the rest; the failures are reported together.
        ethtool::restore(self, &mut r)?;
        sysctl::restore(self, &mut r)?;
        addresses::restore(self, &mut r).await?;
        link::up_again(self, &r).await?;
        neighbours::restore(self, &mut r).await?;
        routes::restore(self, &mut r).await?;
        rules::restore(self, &mut r).await?;
        Ok(Restored::Restored {
            incomplete: r.failures,
        })
    }

    /// The pod's side of a restore: the RDMA device and the link out of the pod, the rules and
    /// the VRF we made there removed. A link the pod made in place of ours is described.
    async fn restore_in_pod(&self, pod: &Netns, e: &Entry) -> StepResult<Option<String>> {
        let podr = pod
            .rtnl()
            .await
            .map_err(|x| at("open the pod namespace")(io::Error::other(x)))?;
        rdma::undo(self, pod, e)?;
        let substitute = link::move_out(self, &podr, e).await?;
        rules::undo(self, &podr, e).await?;
        vrf::undo(&podr, e).await?;
        Ok(substitute)
    }
}
