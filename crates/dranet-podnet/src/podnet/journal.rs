//! The attach journal: one file per link given to a pod, written before the first change, so a
//! daemon killed at any point knows on its next start what to give back.
//!
//! An entry that cannot be read (torn, edited, of another version) is moved aside as
//! `<key>.json.corrupt-<seconds>.<nanoseconds>`, with an error in the log, and the rest of the
//! journal goes on: one bad file must not stop every detach on the node. The file is kept for
//! an operator; the link it described is wherever the failed operation left it.
//!
//! Each entry has its own file, written by rename, so writers of different keys never touch the
//! same file; writers of one key are serialized by [`PodNet`](super::PodNet)'s lock of that
//! key.

use std::io;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::state::{HostLink, Peer, RawMessage};
use crate::durable;
use crate::netns::NetnsId;
use crate::{Error, Result};

/// Format version of journal entries.
pub const JOURNAL_VERSION: u32 = 1;
/// Largest journal entry read back (a link with thousands of routes fits easily).
const MAX_ENTRY_BYTES: u64 = 16 << 20;

/// Where an attach or detach got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// Host state recorded; the link may be anywhere between the host and the pod.
    Attaching,
    /// The link is in the pod, configured.
    Attached,
    /// Giving the link back; it may be anywhere between the pod and the host.
    Detaching,
}

/// One link given (or being given) to a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// [`JOURNAL_VERSION`].
    pub version: u32,
    /// The caller's key (for dranet: claim UID and device).
    pub key: String,
    /// Who holds the link (for dranet: the pod sandbox ID); recovery asks whether it still lives.
    pub owner: String,
    /// The pod's namespace path.
    pub pod_netns: PathBuf,
    /// The pod namespace's identity when it was attached, so a reused path is not mistaken.
    pub pod_netns_id: NetnsId,
    /// The link's name in the pod.
    pub pod_name: String,
    /// The link's index in the pod, once moved.
    pub pod_index: Option<u32>,
    /// The link it hangs off as the pod sees it, once moved (a virtual link's identity).
    #[serde(default)]
    pub pod_peer: Option<Peer>,
    /// The phase.
    pub phase: Phase,
    /// What the host had.
    pub host: HostLink,
    /// Rules added in the pod namespace (rules are not tied to the link, so they stay when it
    /// leaves and are removed explicitly).
    pub pod_rules: Vec<RawMessage>,
    /// A VRF device created in the pod for this link.
    pub pod_vrf: Option<String>,
    /// Whether creating that VRF made the kernel add its `l3mdev` rules to the pod (they stay
    /// after the VRF is gone, so they are removed with it).
    #[serde(default)]
    pub pod_l3mdev_rules: bool,
    /// The RDMA device moved into the pod with the link (exclusive netns mode); when the pod's
    /// namespace is deleted the kernel returns it to the initial namespace by itself.
    #[serde(default)]
    pub rdma_device: Option<String>,
}

/// The journal directory.
#[derive(Debug, Clone)]
pub struct Journal {
    dir: PathBuf,
}

impl Journal {
    /// Opens (creating, mode 0700) the journal at `dir`.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        durable::create_dir(&dir).map_err(|e| Error::Journal {
            path: dir.clone(),
            reason: e.to_string(),
        })?;
        Ok(Self { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// Checks a key is usable as a file name.
    pub fn check_key(key: &str) -> Result<()> {
        let ok = !key.is_empty()
            && key.len() <= 200
            && !key.starts_with('.')
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidKey(key.to_string()))
        }
    }

    /// Writes an entry durably: temporary file (0600), fsync, rename, fsync of the directory.
    pub fn write(&self, entry: &Entry) -> Result<()> {
        Self::check_key(&entry.key)?;
        let err = |e: io::Error| Error::Journal {
            path: self.path(&entry.key),
            reason: e.to_string(),
        };
        let data = serde_json::to_vec_pretty(entry).map_err(|e| err(io::Error::other(e)))?;
        durable::write(&self.dir, &format!("{}.json", entry.key), &data).map_err(err)
    }

    /// Reads the entry of `key`, if there is one (an unreadable one is moved aside: none).
    pub fn read(&self, key: &str) -> Result<Option<Entry>> {
        Self::check_key(key)?;
        read_entry(&self.path(key))
    }

    /// Removes the entry of `key` (done: the host has everything back).
    pub fn remove(&self, key: &str) -> Result<()> {
        Self::check_key(key)?;
        durable::remove(&self.dir, &format!("{key}.json")).map_err(|e| Error::Journal {
            path: self.path(key),
            reason: e.to_string(),
        })
    }

    /// Every entry, sorted by key; unreadable ones are moved aside (see the module docs).
    pub fn entries(&self) -> Result<Vec<Entry>> {
        let paths = durable::list(&self.dir).map_err(|e| Error::Journal {
            path: self.dir.clone(),
            reason: e.to_string(),
        })?;
        let mut out = Vec::new();
        for p in paths {
            if let Some(e) = read_entry(&p)? {
                out.push(e);
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

/// Reads one entry.
fn read_entry(path: &Path) -> Result<Option<Entry>> {
    read_versioned(
        path,
        MAX_ENTRY_BYTES,
        "journal",
        JOURNAL_VERSION,
        |e: &Entry| e.version,
    )
}

/// Reads one entry of at most `max` bytes, whose format version (`version` of it) must be
/// `want`; `what` names the journal in the reason. One that fails its checks is quarantined and
/// reads as none; an error of the file system (permissions, I/O) is an error: it may pass, and
/// the entry is kept.
pub(super) fn read_versioned<T: DeserializeOwned>(
    path: &Path,
    max: u64,
    what: &str,
    want: u32,
    version: impl Fn(&T) -> u32,
) -> Result<Option<T>> {
    let data = match durable::read(path, max) {
        Ok(Some(d)) => d,
        Ok(None) => return Ok(None),
        Err(e) if e.raw_os_error().is_some() => {
            return Err(Error::Journal {
                path: path.to_path_buf(),
                reason: e.to_string(),
            });
        }
        // Not a regular file, or too large.
        Err(e) => return quarantine(path, &e.to_string()),
    };
    let entry: T = match serde_json::from_slice(&data) {
        Ok(e) => e,
        Err(e) => return quarantine(path, &e.to_string()),
    };
    let got = version(&entry);
    if got != want {
        let why = format!("{what} version {got} (this dranet reads {want})");
        return quarantine(path, &why);
    }
    Ok(Some(entry))
}

/// Moves an unreadable entry aside, as the kubelet plugin's checkpoint does.
pub(super) fn quarantine<T>(path: &Path, reason: &str) -> Result<Option<T>> {
    match crate::durable::quarantine(path) {
        Ok(moved_to) => tracing::error!(
            path = %path.display(),
            moved_to = %moved_to.display(),
            reason,
            "unreadable attach journal entry moved aside; the link it described is left where it is"
        ),
        Err(e) => tracing::error!(
            path = %path.display(),
            reason,
            error = %e,
            "unreadable attach journal entry could not be moved aside; skipping it"
        ),
    }
    Ok(None)
}
