//! What the driver must remember across its own restarts about this boot's pod sandboxes: each
//! sandbox it acted on (its network namespace, which containerd 1.7 does not send again at
//! StopPodSandbox, and the RDMA devices moved into it). One file per sandbox, written durably
//! (see `durable`), so a daemon killed at any point finds on start exactly what it had recorded.
//!
//! Prepared claims are not here, nor what a claim asked the profile provider for: their records
//! are in the kubelet plugin's checkpoint, which outlives a reboot (see [`crate::record`] for
//! why). This store, like the attach journal beside it, describes namespaces of this boot, and
//! lives in `--state-dir` (a tmpfs, emptied by a reboot that deletes those namespaces too).
//!
//! Versions before profile records moved to the checkpoint kept them here
//! (`profiles/<uid>.json`); [`Store::legacy_profiles`] reads what such a version left, for the
//! driver to move into the checkpoint at start.
//!
//! A record that cannot be read (torn, too large, of another version) is moved aside
//! (`<file>.corrupt-<seconds>.<nanoseconds>`) with an error in the log, and the daemon starts
//! without it: one bad file must not stop the node's daemon from ever starting again. What it
//! described is then known only to the attach journal (the sandbox's netdevs) or returns by
//! itself (an RDMA device goes back to the host when the sandbox's namespace is deleted).

use std::path::{Path, PathBuf};

use dranet_podnet::durable;
use serde::{Deserialize, Serialize};

use crate::record::ProfileRecord;
use crate::{Error, Result};

/// Format version of the records.
pub const STORE_VERSION: u32 = 1;
/// Largest record read back.
const MAX_RECORD_BYTES: u64 = 64 << 10;

/// A pod sandbox the driver gave devices to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRecord {
    /// [`STORE_VERSION`].
    pub version: u32,
    /// The sandbox ID.
    pub sandbox_id: String,
    /// The pod's UID.
    pub uid: String,
    /// `namespace/name`, for messages.
    pub pod: String,
    /// Its network namespace.
    pub netns: Option<PathBuf>,
    /// RDMA devices without a netdev moved into its namespace (exclusive RDMA netns mode).
    #[serde(default)]
    pub rdma_moved: Vec<String>,
    /// UIDs of claims this pod was added to (`reservedFor`) after they were prepared. The
    /// checkpoint's record of a claim is the kubelet's and names the pods of prepare time; a
    /// restarted daemon adds this pod back to those claims from here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late_claims: Vec<String>,
}

/// The store: `pods/<sandbox-id>.json` under one directory (and what earlier versions left in
/// `profiles/`).
#[derive(Debug, Clone)]
pub struct Store {
    pods: PathBuf,
    profiles: PathBuf,
}

fn check_name(name: &str) -> Result<()> {
    Ok(dranet_podnet::Journal::check_key(name)?)
}

impl Store {
    /// Opens (creating, mode 0700) the store at `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let s = Self {
            pods: dir.join("pods"),
            profiles: dir.join("profiles"),
        };
        // `profiles/` is only read: what an earlier version left there.
        durable::create_dir(&s.pods).map_err(|e| Error::Store {
            path: s.pods.clone(),
            reason: e.to_string(),
        })?;
        Ok(s)
    }

    /// Records a pod sandbox.
    pub fn put_pod(&self, p: &PodRecord) -> Result<()> {
        Self::write(&self.pods, &p.sandbox_id, p)
    }

    /// Forgets a pod sandbox; one it does not know is not an error.
    pub fn remove_pod(&self, sandbox_id: &str) -> Result<()> {
        Self::remove(&self.pods, sandbox_id)
    }

    /// Every recorded pod sandbox; unreadable records are moved aside (see the module docs).
    /// Only a directory that cannot be listed is an error.
    pub fn pods(&self) -> Result<Vec<PodRecord>> {
        let paths = durable::list(&self.pods).map_err(|e| Error::Store {
            path: self.pods.clone(),
            reason: e.to_string(),
        })?;
        let mut out = Vec::new();
        for p in paths {
            let read = durable::read(&p, MAX_RECORD_BYTES)
                .map_err(|e| e.to_string())
                .and_then(|data| match data {
                    None => Ok(None),
                    Some(d) => serde_json::from_slice::<PodRecord>(&d)
                        .map(Some)
                        .map_err(|e| e.to_string()),
                })
                .and_then(|r| match r {
                    Some(r) if r.version != STORE_VERSION => Err(format!(
                        "record version {} (this dranet reads {STORE_VERSION})",
                        r.version
                    )),
                    r => Ok(r),
                });
            match read {
                Ok(Some(r)) => out.push(r),
                Ok(None) => {}
                Err(reason) => match durable::quarantine(&p) {
                    Ok(moved_to) => tracing::error!(
                        path = %p.display(),
                        moved_to = %moved_to.display(),
                        reason,
                        "unreadable pod record moved aside; its sandbox's netdevs are still \
                         known to the attach journal"
                    ),
                    Err(e) => tracing::error!(
                        path = %p.display(),
                        reason,
                        error = %e,
                        "unreadable pod record could not be moved aside; skipping it"
                    ),
                },
            }
        }
        Ok(out)
    }

    /// The profile records an earlier version kept here (`profiles/<uid>.json`), one result per
    /// file (an unreadable one is an error naming its file, left where it is: it may be the
    /// only record of what the provider allocated); none when it left none. Only a directory
    /// that cannot be listed is an error for all.
    pub fn legacy_profiles(&self) -> Result<Vec<Result<ProfileRecord>>> {
        if !self.profiles.exists() {
            return Ok(Vec::new());
        }
        let paths = durable::list(&self.profiles).map_err(|e| Error::Store {
            path: self.profiles.clone(),
            reason: e.to_string(),
        })?;
        Ok(paths
            .iter()
            .filter_map(|p| Self::read(p, |r: &ProfileRecord| r.version).transpose())
            .collect())
    }

    /// Forgets a profile record an earlier version kept here, once it is in the checkpoint.
    pub fn remove_legacy_profiles(&self, uid: &str) -> Result<()> {
        Self::remove(&self.profiles, uid)
    }

    fn write<T: Serialize>(dir: &Path, name: &str, v: &T) -> Result<()> {
        check_name(name)?;
        let file = format!("{name}.json");
        let err = |reason: String| Error::Store {
            path: dir.join(&file),
            reason,
        };
        let data = serde_json::to_vec(v).map_err(|e| err(e.to_string()))?;
        durable::write(dir, &file, &data).map_err(|e| err(e.to_string()))
    }

    fn remove(dir: &Path, name: &str) -> Result<()> {
        check_name(name)?;
        let file = format!("{name}.json");
        durable::remove(dir, &file).map_err(|e| Error::Store {
            path: dir.join(&file),
            reason: e.to_string(),
        })
    }

    /// The record at `p`, if there is one; an unreadable one is an error naming its file.
    fn read<T: serde::de::DeserializeOwned>(
        p: &Path,
        version: impl Fn(&T) -> u32,
    ) -> Result<Option<T>> {
        let err = |reason: String| Error::Store {
            path: p.to_path_buf(),
            reason,
        };
        let Some(data) = durable::read(p, MAX_RECORD_BYTES).map_err(|e| err(e.to_string()))? else {
            return Ok(None);
        };
        let v: T = serde_json::from_slice(&data).map_err(|e| err(e.to_string()))?;
        if version(&v) != STORE_VERSION {
            return Err(err(format!(
                "record version {} (this dranet reads {STORE_VERSION})",
                version(&v)
            )));
        }
        Ok(Some(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(id: &str) -> PodRecord {
        PodRecord {
            version: STORE_VERSION,
            sandbox_id: id.into(),
            uid: "pu".into(),
            pod: "ns/p".into(),
            netns: Some("/var/run/netns/x".into()),
            rdma_moved: vec!["mlx5_0".into()],
            late_claims: vec!["c1".into()],
        }
    }

    #[test]
    fn records_survive_reopen_and_bad_files_are_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        s.put_pod(&pod("s1")).unwrap();
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(s.pods().unwrap(), vec![pod("s1")]);
        s.remove_pod("s1").unwrap();
        s.remove_pod("s1").unwrap();
        assert!(s.pods().unwrap().is_empty());
        assert!(s.put_pod(&pod("../x")).is_err());

        // A torn record, one of another version and one too large: the good one is read, the
        // daemon starts, and the bad files are kept aside for an operator.
        s.put_pod(&pod("good")).unwrap();
        let pods = dir.path().join("pods");
        std::fs::write(pods.join("torn.json"), b"{\"version\":1,").unwrap();
        let mut v2 = serde_json::to_value(pod("v2")).unwrap();
        v2["version"] = 2.into();
        std::fs::write(pods.join("v2.json"), v2.to_string()).unwrap();
        std::fs::write(
            pods.join("huge.json"),
            vec![b' '; MAX_RECORD_BYTES as usize + 1],
        )
        .unwrap();
        assert_eq!(s.pods().unwrap(), vec![pod("good")]);
        let mut names: Vec<String> = std::fs::read_dir(&pods)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 4, "{names:?}");
        assert_eq!(names[0], "good.json");
        for (n, bad) in names[1..].iter().zip(["huge.json", "torn.json", "v2.json"]) {
            assert!(n.starts_with(&format!("{bad}.corrupt-")), "{names:?}");
        }
        // Read again: nothing left to move.
        assert_eq!(s.pods().unwrap(), vec![pod("good")]);
    }
}
