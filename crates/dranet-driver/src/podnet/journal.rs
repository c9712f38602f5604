//! The attach journal: one file per link given to a pod, written before the first change, so a
//! daemon killed at any point knows on its next start what to give back.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::state::{HostLink, RawMessage};
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
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| Error::Journal {
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
        let path = self.path(&entry.key);
        let err = |e: io::Error| Error::Journal {
            path: path.clone(),
            reason: e.to_string(),
        };
        let data = serde_json::to_vec_pretty(entry).map_err(|e| err(io::Error::other(e)))?;
        let tmp = self.dir.join(format!(".{}.tmp", entry.key));
        {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(err)?;
            f.write_all(&data).map_err(err)?;
            f.sync_all().map_err(err)?;
        }
        fs::rename(&tmp, &path).map_err(err)?;
        fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(err)?;
        Ok(())
    }

    /// Reads the entry of `key`, if there is one.
    pub fn read(&self, key: &str) -> Result<Option<Entry>> {
        Self::check_key(key)?;
        read_entry(&self.path(key))
    }

    /// Removes the entry of `key` (done: the host has everything back).
    pub fn remove(&self, key: &str) -> Result<()> {
        Self::check_key(key)?;
        let path = self.path(key);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::Journal {
                    path,
                    reason: e.to_string(),
                });
            }
        }
        let _ = fs::File::open(&self.dir).and_then(|d| d.sync_all());
        Ok(())
    }

    /// Every entry, sorted by key. An unreadable entry is an error naming its file: it is never
    /// skipped, since it may be the only record of a host link's state.
    pub fn entries(&self) -> Result<Vec<Entry>> {
        let rd = fs::read_dir(&self.dir).map_err(|e| Error::Journal {
            path: self.dir.clone(),
            reason: e.to_string(),
        })?;
        let mut out = Vec::new();
        for d in rd {
            let d = d.map_err(|e| Error::Journal {
                path: self.dir.clone(),
                reason: e.to_string(),
            })?;
            let name = d.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            if let Some(e) = read_entry(&d.path())? {
                out.push(e);
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

fn read_entry(path: &Path) -> Result<Option<Entry>> {
    let err = |reason: String| Error::Journal {
        path: path.to_path_buf(),
        reason,
    };
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(e.to_string())),
    };
    if !meta.is_file() {
        return Err(err("not a regular file".into()));
    }
    if meta.len() > MAX_ENTRY_BYTES {
        return Err(err(format!(
            "{} bytes, more than the {MAX_ENTRY_BYTES} a journal entry may have",
            meta.len()
        )));
    }
    let data = fs::read(path).map_err(|e| err(e.to_string()))?;
    let entry: Entry = serde_json::from_slice(&data).map_err(|e| err(e.to_string()))?;
    if entry.version != JOURNAL_VERSION {
        return Err(err(format!(
            "journal version {} (this dranet reads {JOURNAL_VERSION})",
            entry.version
        )));
    }
    Ok(Some(entry))
}
