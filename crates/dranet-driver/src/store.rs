//! What the driver must remember across restarts: each prepared claim (which pods get which
//! devices, configured how), each pod sandbox it acted on (its network namespace, which
//! containerd 1.7 does not send again at StopPodSandbox, and the RDMA devices moved into it), and
//! each claim's profiles asked of the profile provider (recorded before asking, forgotten once
//! released, so that no crash leaks what the provider allocated).
//! One file per record, written durably (see `durable`), so a daemon killed at any point finds on
//! start exactly what it had recorded.

use std::path::{Path, PathBuf};

use dranet_core::{CharDevice, NetworkConfig, ProfileRequest};
use serde::{Deserialize, Serialize};

use crate::claim::PodRef;
use crate::durable;
use crate::{Error, Result};

/// Format version of the records.
pub const STORE_VERSION: u32 = 1;
/// Largest record read back.
const MAX_RECORD_BYTES: u64 = 4 << 20;

/// A claim prepared on this node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRecord {
    /// [`STORE_VERSION`].
    pub version: u32,
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// The claim's UID.
    pub uid: String,
    /// The pods it is reserved for.
    pub pods: Vec<PodRef>,
    /// Its devices on this node.
    pub devices: Vec<DeviceRecord>,
}

/// One allocated device and what the pod gets of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceRecord {
    /// The claim's request it satisfies.
    pub request: String,
    /// Its pool.
    pub pool: String,
    /// Its device name (`pci-0101-00-00-0`).
    pub device: String,
    /// The allocation's share ID, if shared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    /// The host interface that moves into the pod: none for an IB-only device, nor for a
    /// software RDMA link's netdev ([`crate::claim::software_rdma`]).
    pub netdev: Option<String>,
    /// Its merged, validated configuration.
    pub config: NetworkConfig,
    /// Its RDMA link (`mlx5_0`), if it has one.
    pub rdma: Option<String>,
    /// The RDMA character devices every container of the pod gets.
    pub char_devices: Vec<CharDevice>,
}

impl DeviceRecord {
    /// The attachment key of this device in `claim_uid`: the podnet journal's key.
    pub fn key(&self, claim_uid: &str) -> String {
        format!("{claim_uid}.{}", self.device)
    }
}

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
}

/// The profiles a claim asked the profile provider for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileRecord {
    /// [`STORE_VERSION`].
    pub version: u32,
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// The claim's UID.
    pub uid: String,
    /// One per device with a profile, as asked.
    pub leases: Vec<ProfileLease>,
    /// Set once the claim is unprepared (or its prepare failed): what is left here is owed to
    /// the provider, and released again until it is.
    #[serde(default)]
    pub releasing: bool,
}

/// One device's profile, as asked of the provider (and as released).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileLease {
    /// The device's name.
    pub device: String,
    /// The request the provider was sent.
    pub request: ProfileRequest,
}

/// The store: `claims/<uid>.json`, `pods/<sandbox-id>.json` and `profiles/<uid>.json` under one
/// directory.
#[derive(Debug, Clone)]
pub struct Store {
    claims: PathBuf,
    pods: PathBuf,
    profiles: PathBuf,
}

fn check_name(name: &str) -> Result<()> {
    crate::podnet::Journal::check_key(name)
}

impl Store {
    /// Opens (creating, mode 0700) the store at `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let s = Self {
            claims: dir.join("claims"),
            pods: dir.join("pods"),
            profiles: dir.join("profiles"),
        };
        for d in [&s.claims, &s.pods, &s.profiles] {
            durable::create_dir(d).map_err(|e| Error::Store {
                path: d.clone(),
                reason: e.to_string(),
            })?;
        }
        Ok(s)
    }

    fn write<T: Serialize>(dir: &Path, name: &str, v: &T) -> Result<()> {
        check_name(name)?;
        let file = format!("{name}.json");
        let err = |reason: String| Error::Store {
            path: dir.join(&file),
            reason,
        };
        let data = serde_json::to_vec_pretty(v).map_err(|e| err(e.to_string()))?;
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

    /// Every record in `dir`. An unreadable one is an error naming its file: it may be the only
    /// record of a device given to a pod.
    fn all<T: serde::de::DeserializeOwned>(
        dir: &Path,
        version: impl Fn(&T) -> u32,
    ) -> Result<Vec<T>> {
        let paths = durable::list(dir).map_err(|e| Error::Store {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        let mut out = Vec::new();
        for p in paths {
            out.extend(Self::read(&p, &version)?);
        }
        Ok(out)
    }

    /// Records a prepared claim (replacing an earlier record of it).
    pub fn put_claim(&self, c: &ClaimRecord) -> Result<()> {
        Self::write(&self.claims, &c.uid, c)
    }

    /// Forgets a claim; a claim it does not know is not an error.
    pub fn remove_claim(&self, uid: &str) -> Result<()> {
        Self::remove(&self.claims, uid)
    }

    /// Every prepared claim.
    pub fn claims(&self) -> Result<Vec<ClaimRecord>> {
        Self::all(&self.claims, |c: &ClaimRecord| c.version)
    }

    /// Records a pod sandbox.
    pub fn put_pod(&self, p: &PodRecord) -> Result<()> {
        Self::write(&self.pods, &p.sandbox_id, p)
    }

    /// Forgets a pod sandbox.
    pub fn remove_pod(&self, sandbox_id: &str) -> Result<()> {
        Self::remove(&self.pods, sandbox_id)
    }

    /// Every recorded pod sandbox.
    pub fn pods(&self) -> Result<Vec<PodRecord>> {
        Self::all(&self.pods, |p: &PodRecord| p.version)
    }

    /// One claim's recorded profiles, if any.
    pub fn profile(&self, uid: &str) -> Result<Option<ProfileRecord>> {
        check_name(uid)?;
        Self::read(
            &self.profiles.join(format!("{uid}.json")),
            |p: &ProfileRecord| p.version,
        )
    }

    /// Records a claim's profiles (replacing an earlier record of them).
    pub fn put_profiles(&self, p: &ProfileRecord) -> Result<()> {
        Self::write(&self.profiles, &p.uid, p)
    }

    /// Forgets a claim's profiles.
    pub fn remove_profiles(&self, uid: &str) -> Result<()> {
        Self::remove(&self.profiles, uid)
    }

    /// Every claim's recorded profiles.
    pub fn profiles(&self) -> Result<Vec<ProfileRecord>> {
        Self::all(&self.profiles, |p: &ProfileRecord| p.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopen_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let c = ClaimRecord {
            version: STORE_VERSION,
            namespace: "ns".into(),
            name: "c".into(),
            uid: "11111111-2222".into(),
            pods: vec![PodRef {
                name: "p".into(),
                uid: "pu".into(),
            }],
            devices: vec![],
        };
        s.put_claim(&c).unwrap();
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(s.claims().unwrap(), vec![c.clone()]);
        s.remove_claim(&c.uid).unwrap();
        s.remove_claim(&c.uid).unwrap();
        assert!(s.claims().unwrap().is_empty());
        assert!(
            s.put_claim(&ClaimRecord {
                uid: "../x".into(),
                ..c.clone()
            })
            .is_err()
        );
        std::fs::write(dir.path().join("claims/torn.json"), b"{\"version\":1,").unwrap();
        let e = s.claims().unwrap_err().to_string();
        assert!(e.contains("torn.json"), "{e}");
    }
}
