//! Giving a host network interface to a pod, and giving the host back exactly what it had.
//!
//! [`PodNet::attach`] records the link's host state (name, MTU, MAC, GSO/GRO sizes, addresses,
//! routes of every table, the rules selecting those tables, permanent neighbours, admin state)
//! in a [`Journal`] *before* the first change, then moves the link into the pod's network
//! namespace and configures it there from a [`NetworkConfig`](dranet_core::NetworkConfig). Any
//! failure rolls back what was done. [`PodNet::detach`] moves the link back and replays the recorded state;
//! [`PodNet::recover`] does the same at start for every journal entry whose pod is gone, so a
//! daemon killed in the middle of either leaves nothing behind.
//!
//! Everything goes through rtnetlink sockets opened inside the namespaces ([`Netns`]); no
//! command is executed. The crate's documentation has an example.
//!
//! A config whose `interface.type` is `IPVLAN` or `Macvlan` does not move the link: the pod
//! gets a child of it, made in its namespace, recorded in a journal of its own and deleted on
//! its own (see `child`); the link stays on the host for every pod sharing it. An interface's
//! source-based routing gets a table no other interface of its pod has ([`crate::plan_source_tables`]).
//!
//! The work is one file per operation: [`attach`](PodNet::attach) checks the request and records
//! the host's state, `configure` applies the `NetworkConfig` in the pod step by step,
//! [`detach`](PodNet::detach) and [`recover`](PodNet::recover) (`restore`) give the host its link
//! back, and `messages` builds the rtnetlink messages they send. The steps themselves are one file
//! per concern in `steps` (link, MTU and MAC, RDMA, sysctls, VRF, addresses, ethtool, eBPF,
//! routes, rules, neighbours), each with what undoes it. [`check_config`] and [`preflight`] refuse
//! what cannot be applied before anything changes; `identity` tells the link given to a pod from
//! one the pod made; `locks` lets operations on different devices run side by side.
//!
//! # What a pod can and cannot do to the host through its link
//!
//! A pod with `CAP_NET_ADMIN` owns the link while it has it: it may rename it, readdress it or
//! delete it. It cannot make the host take back anything else: detach gives the host only the
//! link it recorded (by hardware identity, or a virtual link's index and peer), refuses a
//! substitute (left in the pod, the journal keeps the entry) and never calls a link gone while
//! the pod's namespace exists.

mod attach;
mod carry;
mod child;
mod child_journal;
mod configure;
mod health;
mod held;
mod identity;
mod journal;
pub(crate) mod messages;
mod restore;
mod state;
mod steps;
mod tables;
mod validate;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

pub use attach::{AttachRequest, Attached};
pub use child_journal::{CHILD_JOURNAL_VERSION, ChildEntry, ChildJournal};
pub use journal::{Entry, JOURNAL_VERSION, Journal, Phase};
pub use messages::{format_mac, parse_cidr, parse_mac};
pub(crate) use messages::{ipv4_mask, ipv4_network};
pub use restore::Recovery;
pub use state::{HostLink, Peer, RawMessage};
pub(crate) use tables::source_routed;
pub use validate::{
    ConfigRefusal, Preflight, PreflightError, check_config, check_link, check_parent_addresses,
    preflight,
};

use crate::Result;
use crate::netns::{Netns, NetnsId};

/// Called before each step of an attach or detach with the step's name; an `Err` makes that
/// step fail with the message. For tracing and for tests that inject failures or crashes.
pub type StepHook = Arc<dyn Fn(&str) -> std::result::Result<(), String> + Send + Sync>;

/// Moves links between the host and pods. One per daemon; share it: operations on different
/// keys and links run concurrently.
pub struct PodNet {
    host: Netns,
    /// The identities of the host's namespace and of the daemon's own, which no pod may have.
    host_ids: [NetnsId; 2],
    journal: Journal,
    children: ChildJournal,
    sysfs: PathBuf,
    hook: Option<StepHook>,
    locks: crate::locks::Locks,
    /// The pod namespaces our links are in, open until each is given back.
    held: held::Held,
    /// How long an attach with `addressing: SLAAC` waits for an autoconfigured address.
    slaac_timeout: std::time::Duration,
}

/// The default [`PodNet::slaac_timeout`]: upstream's `--slaac-ready-timeout`.
pub const DEFAULT_SLAAC_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1500);

impl std::fmt::Debug for PodNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodNet")
            .field("host", &self.host)
            .field("journal", &self.journal)
            .finish_non_exhaustive()
    }
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
const ENETUNREACH: i32 = 101;
const EHOSTUNREACH: i32 = 113;
const ESRCH: i32 = 3;

impl PodNet {
    /// `host` is the namespace links are given back to (the daemon's own, opened at start);
    /// `journal_dir` where attachments are recorded (created 0700).
    pub fn new(host: Netns, journal_dir: impl Into<PathBuf>) -> Result<Self> {
        let host_ids = [host.id()?, Netns::current()?.id()?];
        let journal = Journal::open(journal_dir)?;
        Ok(Self {
            host,
            host_ids,
            children: ChildJournal::open(journal.dir().join("children"))?,
            journal,
            sysfs: PathBuf::from("/sys"),
            hook: None,
            locks: crate::locks::Locks::default(),
            held: held::Held::default(),
            slaac_timeout: DEFAULT_SLAAC_TIMEOUT,
        })
    }

    /// How long an attach with `addressing: SLAAC` waits for the kernel to autoconfigure a
    /// global IPv6 address from a router advertisement before it fails (and the link goes back
    /// to the host). Default [`DEFAULT_SLAAC_TIMEOUT`].
    #[must_use]
    pub fn slaac_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.slaac_timeout = timeout;
        self
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
}
