//! CDI specs for prepared claims: what most DRA drivers write in `prepare` and remove in
//! `unprepare`.
//!
//! A driver that returns CDI device IDs from `prepare` must have a spec that defines them in the
//! runtime's CDI directory (`/var/run/cdi` by default) before the container is created: a runtime
//! with CDI enabled fails container creation for an ID it cannot resolve. [`CdiWriter`] writes one
//! spec file per claim, atomically (temporary file, fsync, rename, fsync of the directory), with
//! device names prefixed by the claim UID so that two claims never define the same device, and
//! removes it again by claim UID. A prepare interrupted by a crash leaves at most a temporary file
//! the runtime ignores (it reads `*.json` and `*.yaml` only), and [`CdiWriter::remove_claim`]
//! removes that too.
//!
//! ```no_run
//! use dranet_kubeletplugin::cdi::{CdiDevice, CdiWriter, ContainerEdits};
//! # fn f() -> Result<(), dranet_kubeletplugin::Error> {
//! let cdi = CdiWriter::new("/var/run/cdi", "example.com/fpga")?;
//! let ids = cdi.write_claim(
//!     "0a6f3c1e-5a1b-4c2d-8e3f-123456789abc",
//!     vec![CdiDevice::new("fpga0", ContainerEdits::default().env("FPGA=0"))],
//! )?;
//! assert_eq!(ids, ["example.com/fpga=0a6f3c1e-5a1b-4c2d-8e3f-123456789abc-fpga0"]);
//! cdi.remove_claim("0a6f3c1e-5a1b-4c2d-8e3f-123456789abc")?;
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};

use dranet_util::{AtomicWrite, AtomicWriteStep, temp_path};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The CDI spec version written: understood by containerd 1.7 and 2.x and CRI-O.
pub const CDI_VERSION: &str = "0.5.0";

/// A CDI spec file (the subset drivers need).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiSpec {
    /// The spec format version.
    pub cdi_version: String,
    /// `vendor/class`, e.g. `example.com/fpga`.
    pub kind: String,
    /// The devices it defines.
    pub devices: Vec<CdiDevice>,
}

/// One device of a [`CdiSpec`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiDevice {
    /// The device name; [`CdiWriter`] prefixes it with the claim UID.
    pub name: String,
    /// What the runtime does to a container that gets the device.
    pub container_edits: ContainerEdits,
}

impl CdiDevice {
    /// A device named `name` with these edits.
    pub fn new(name: impl Into<String>, container_edits: ContainerEdits) -> Self {
        Self {
            name: name.into(),
            container_edits,
        }
    }
}

/// Container edits of a CDI device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    /// `NAME=value` environment variables.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Device nodes to create in the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
    /// Bind mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// OCI hooks the runtime adds to the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<Hook>,
}

/// An OCI hook of [`ContainerEdits`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hook {
    /// The OCI stage: `createRuntime`, `createContainer`, `startContainer`, `poststart`,
    /// `poststop` (or the deprecated `prestart`).
    pub hook_name: String,
    /// The executable, a host path.
    pub path: String,
    /// Its arguments, `argv[0]` first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// `NAME=value` environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Seconds the runtime lets it run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
}

impl ContainerEdits {
    /// Adds an environment variable (`NAME=value`).
    pub fn env(mut self, var: impl Into<String>) -> Self {
        self.env.push(var.into());
        self
    }

    /// Adds a device node.
    pub fn device_node(mut self, node: DeviceNode) -> Self {
        self.device_nodes.push(node);
        self
    }

    /// Adds an OCI hook.
    pub fn hook(mut self, hook: Hook) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Adds a bind mount.
    pub fn mount(mut self, mount: Mount) -> Self {
        self.mounts.push(mount);
        self
    }
}

/// A device node of [`ContainerEdits`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    /// Path in the container.
    pub path: String,
    /// Path on the host, when it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    /// `c` or `b`; read from the host path when unset.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub kind: Option<String>,
    /// Major number; read from the host path when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major: Option<i64>,
    /// Minor number; read from the host path when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<i64>,
    /// Cgroup permissions (`rwm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
}

/// A bind mount of [`ContainerEdits`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    /// Path on the host.
    pub host_path: String,
    /// Path in the container.
    pub container_path: String,
    /// Mount options, e.g. `ro`, `bind`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

/// Writes and removes one CDI spec file per claim in a CDI directory.
#[derive(Debug, Clone)]
pub struct CdiWriter {
    dir: PathBuf,
    kind: String,
}

impl CdiWriter {
    /// A writer for specs of `kind` (`vendor/class`, e.g. `example.com/fpga`) in `dir`.
    pub fn new(dir: impl Into<PathBuf>, kind: impl Into<String>) -> Result<Self> {
        let kind = kind.into();
        let valid = kind.split_once('/').is_some_and(|(vendor, class)| {
            !vendor.is_empty()
                && !class.is_empty()
                && vendor
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                && class
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
        });
        if !valid {
            return Err(Error::Config(format!(
                "CDI kind {kind:?} is not vendor/class (e.g. example.com/fpga)"
            )));
        }
        Ok(Self {
            dir: dir.into(),
            kind,
        })
    }

    /// The spec file of a claim.
    pub fn spec_path(&self, claim_uid: &str) -> PathBuf {
        self.dir
            .join(format!("{}-{claim_uid}.json", self.kind.replace('/', "_")))
    }

    /// The fully qualified CDI ID of `device` of a claim, as written by [`Self::write_claim`].
    pub fn device_id(&self, claim_uid: &str, device: &str) -> String {
        format!("{}={claim_uid}-{device}", self.kind)
    }

    /// Writes the claim's spec (replacing an older one) and returns the CDI IDs of its devices in
    /// order, to return from `prepare`.
    pub fn write_claim(&self, claim_uid: &str, devices: Vec<CdiDevice>) -> Result<Vec<String>> {
        check_name_part("claim UID", claim_uid)?;
        let mut ids = Vec::with_capacity(devices.len());
        let mut spec = CdiSpec {
            cdi_version: CDI_VERSION.into(),
            kind: self.kind.clone(),
            devices: Vec::with_capacity(devices.len()),
        };
        for mut d in devices {
            check_name_part("CDI device name", &d.name)?;
            ids.push(self.device_id(claim_uid, &d.name));
            d.name = format!("{claim_uid}-{}", d.name);
            spec.devices.push(d);
        }
        let bytes = serde_json::to_vec_pretty(&spec)
            .map_err(|e| Error::Config(format!("CDI spec of claim {claim_uid}: {e}")))?;
        let path = self.spec_path(claim_uid);
        write_atomically(&self.dir, &path, &bytes)?;
        Ok(ids)
    }

    /// Removes the claim's spec and any temporary file an interrupted write left. A claim
    /// without a spec is fine.
    pub fn remove_claim(&self, claim_uid: &str) -> Result<()> {
        check_name_part("claim UID", claim_uid)?;
        let path = self.spec_path(claim_uid);
        for p in [temp_path(&path), path] {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove CDI spec", &p, e)),
            }
        }
        Ok(())
    }
}

/// Claim UIDs and device names become file and device names: no path separators, and CDI's
/// character set for device names.
fn check_name_part(what: &str, s: &str) -> Result<()> {
    let ok = !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
        && s.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidRequest(format!(
            "{what} {s:?} cannot be part of a CDI device name (letters, digits, '-', '_', '.', ':')"
        )))
    }
}

/// Writes a spec durably; runtimes read specs as any user, so they are world-readable (0644 less
/// the umask). The device metadata specs ([`crate::metadata`]) are written with it too.
pub(crate) fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("create CDI directory", dir, e))?;
    AtomicWrite::new(path)
        .mode(0o644)
        .write(bytes)
        .map_err(|e| {
            let (step, at, source) = e.into_parts();
            let action = match step {
                AtomicWriteStep::CreateTemp
                | AtomicWriteStep::SetMode
                | AtomicWriteStep::Write
                | AtomicWriteStep::SyncFile => "write CDI spec",
                AtomicWriteStep::Rename => "rename CDI spec",
                AtomicWriteStep::OpenDir | AtomicWriteStep::SyncDir => "sync CDI directory",
            };
            Error::io(action, at, source)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claims_spec_is_written_read_back_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cdi = CdiWriter::new(dir.path(), "example.com/fpga").unwrap();
        let ids = cdi
            .write_claim(
                "uid-1",
                vec![
                    CdiDevice::new("fpga0", ContainerEdits::default().env("FPGA=0")),
                    CdiDevice::new("fpga1", ContainerEdits::default().env("FPGA=1")),
                ],
            )
            .unwrap();
        assert_eq!(
            ids,
            [
                "example.com/fpga=uid-1-fpga0",
                "example.com/fpga=uid-1-fpga1"
            ]
        );
        let spec: CdiSpec =
            serde_json::from_slice(&std::fs::read(cdi.spec_path("uid-1")).unwrap()).unwrap();
        assert_eq!(spec.kind, "example.com/fpga");
        assert_eq!(spec.devices[1].name, "uid-1-fpga1");
        assert_eq!(spec.devices[1].container_edits.env, ["FPGA=1"]);
        // An interrupted write leaves a temporary file; removal takes it too, and is idempotent.
        std::fs::write(temp_path(&cdi.spec_path("uid-1")), b"{").unwrap();
        cdi.remove_claim("uid-1").unwrap();
        cdi.remove_claim("uid-1").unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn names_that_would_escape_or_break_cdi_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(CdiWriter::new(dir.path(), "no-class").is_err());
        let cdi = CdiWriter::new(dir.path(), "example.com/fpga").unwrap();
        for bad in ["../x", "a/b", "", "-x"] {
            assert!(cdi.write_claim(bad, vec![]).is_err(), "{bad}");
            assert!(cdi.remove_claim(bad).is_err(), "{bad}");
        }
        let e = cdi
            .write_claim("u", vec![CdiDevice::new("a b", ContainerEdits::default())])
            .unwrap_err();
        assert!(e.to_string().contains("\"a b\""), "{e}");
    }
}
