//! The journal of children: one file per child created in a pod (`children/<key>.<owner>.json`
//! beside the link journal), written before the child exists, so a daemon killed at any point
//! deletes on its next start exactly the children it made, and nothing else. Unreadable entries
//! are moved aside as the link journal's are.
//!
//! A child's entry is keyed by the claim's key *and* its pod: one claim may be shared by several
//! pods, each with a child of its own on the same parent.

use std::path::PathBuf;

use dranet_core::InterfaceType;
use serde::{Deserialize, Serialize};

use super::journal::{Journal, Phase, read_versioned};
use super::state::RawMessage;
use crate::durable;
use crate::netns::NetnsId;
use crate::{Error, Result};

/// Format version of child entries.
pub const CHILD_JOURNAL_VERSION: u32 = 1;
/// Largest child entry read back (a few rules; generous).
const MAX_ENTRY_BYTES: u64 = 1 << 20;

/// One child given (or being given) to a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildEntry {
    /// [`CHILD_JOURNAL_VERSION`].
    pub version: u32,
    /// The caller's key (for dranet: claim UID and device).
    pub key: String,
    /// The pod sandbox holding the child.
    pub owner: String,
    /// The pod's namespace path.
    pub pod_netns: PathBuf,
    /// The pod namespace's identity when the child was made.
    pub pod_netns_id: NetnsId,
    /// The child's name in the pod.
    pub pod_name: String,
    /// Its index in the pod, once created.
    pub pod_index: Option<u32>,
    /// `IPVLAN` or `Macvlan`.
    pub r#type: InterfaceType,
    /// The parent's name on the host (never changed by dranet).
    pub parent: String,
    /// The parent's index on the host: a child hangs off it, which is how ours is told from a
    /// link the pod made.
    pub parent_index: u32,
    /// The phase.
    pub phase: Phase,
    /// Rules added in the pod for the child (they outlive it, so they are removed explicitly).
    pub pod_rules: Vec<RawMessage>,
}

impl ChildEntry {
    /// The file name stem of this entry.
    pub fn file_key(&self) -> String {
        file_key(&self.key, &self.owner)
    }
}

pub(super) fn file_key(key: &str, owner: &str) -> String {
    format!("{key}.{owner}")
}

/// The children directory.
#[derive(Debug, Clone)]
pub struct ChildJournal {
    dir: PathBuf,
}

impl ChildJournal {
    /// Opens (creating, mode 0700) `dir`.
    pub fn open(dir: PathBuf) -> Result<Self> {
        durable::create_dir(&dir).map_err(|e| Error::Journal {
            path: dir.clone(),
            reason: e.to_string(),
        })?;
        Ok(Self { dir })
    }

    fn err(&self, name: &str, e: impl ToString) -> Error {
        Error::Journal {
            path: self.dir.join(name),
            reason: e.to_string(),
        }
    }

    /// Writes an entry durably.
    pub fn write(&self, e: &ChildEntry) -> Result<()> {
        let stem = e.file_key();
        Journal::check_key(&stem)?;
        let name = format!("{stem}.json");
        let data = serde_json::to_vec_pretty(e).map_err(|x| self.err(&name, x))?;
        durable::write(&self.dir, &name, &data).map_err(|x| self.err(&name, x))
    }

    /// The entry of `key` held by `owner`, if any.
    pub fn read(&self, key: &str, owner: &str) -> Result<Option<ChildEntry>> {
        let stem = file_key(key, owner);
        Journal::check_key(&stem)?;
        self.read_path(&self.dir.join(format!("{stem}.json")))
    }

    /// Removes the entry of `key` held by `owner`.
    pub fn remove(&self, key: &str, owner: &str) -> Result<()> {
        let stem = file_key(key, owner);
        Journal::check_key(&stem)?;
        let name = format!("{stem}.json");
        durable::remove(&self.dir, &name).map_err(|x| self.err(&name, x))
    }

    /// Every entry, sorted by key then owner.
    pub fn entries(&self) -> Result<Vec<ChildEntry>> {
        let paths = durable::list(&self.dir).map_err(|x| self.err("", x))?;
        let mut out = Vec::new();
        for p in paths {
            if let Some(e) = self.read_path(&p)? {
                out.push(e);
            }
        }
        out.sort_by(|a, b| (&a.key, &a.owner).cmp(&(&b.key, &b.owner)));
        Ok(out)
    }

    fn read_path(&self, path: &std::path::Path) -> Result<Option<ChildEntry>> {
        read_versioned(
            path,
            MAX_ENTRY_BYTES,
            "child journal",
            CHILD_JOURNAL_VERSION,
            |e: &ChildEntry| e.version,
        )
    }
}
