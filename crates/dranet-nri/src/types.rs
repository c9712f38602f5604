//! Plain Rust views of the pods and containers the runtime reports.

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Error, Result};

mod wire;

/// A Linux namespace of a pod or container, as in the OCI spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Namespace {
    /// Namespace type: `network`, `pid`, `ipc`, `uts`, `mount`, `user` or `cgroup`.
    pub kind: String,
    /// Path of the namespace (e.g. `/var/run/netns/cni-…`), empty when the runtime gave none.
    pub path: String,
}

/// A pod sandbox, as the runtime describes it in pod and container events.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodSandbox {
    /// Runtime id of the sandbox.
    pub id: String,
    /// Kubernetes pod name.
    pub name: String,
    /// Kubernetes pod UID.
    pub uid: String,
    /// Kubernetes namespace.
    pub namespace: String,
    /// Pod labels.
    pub labels: HashMap<String, String>,
    /// Pod annotations.
    pub annotations: HashMap<String, String>,
    /// Runtime handler (RuntimeClass) name.
    pub runtime_handler: String,
    /// Pid of the sandbox's (pause) process, 0 if unknown.
    pub pid: u32,
    /// Pod IP addresses.
    pub ips: Vec<String>,
    /// Cgroup parent of the pod.
    pub cgroup_parent: String,
    /// The sandbox's Linux namespaces.
    ///
    /// containerd 1.7 sends none with StopPodSandbox/RemovePodSandbox; the plugin runtime fills in
    /// the network namespace remembered from RunPodSandbox (or Synchronize) in that case.
    pub namespaces: Vec<Namespace>,
}

impl PodSandbox {
    /// Path of the pod's network namespace, if known and not the host's.
    pub fn netns_path(&self) -> Option<&str> {
        self.namespaces
            .iter()
            .find(|n| n.kind == "network" && !n.path.is_empty())
            .map(|n| n.path.as_str())
    }

    /// `namespace/name`, for logs.
    pub fn qualified_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Sets the network namespace path unless one is present.
    pub(crate) fn fill_netns(&mut self, path: &str) {
        if self.netns_path().is_some() {
            return;
        }
        match self.namespaces.iter_mut().find(|n| n.kind == "network") {
            Some(ns) => ns.path = path.to_owned(),
            None => self.namespaces.push(Namespace {
                kind: "network".into(),
                path: path.to_owned(),
            }),
        }
    }
}

/// Lifecycle state of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContainerState {
    /// Not reported.
    #[default]
    Unknown,
    /// Created, not started.
    Created,
    /// Paused.
    Paused,
    /// Running.
    Running,
    /// Stopped.
    Stopped,
}

/// A container, as the runtime describes it in container events.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Container {
    /// Runtime id of the container.
    pub id: String,
    /// Id of the pod sandbox it belongs to.
    pub pod_sandbox_id: String,
    /// Container name within the pod.
    pub name: String,
    /// Lifecycle state.
    pub state: ContainerState,
    /// Container labels.
    pub labels: HashMap<String, String>,
    /// Container annotations.
    pub annotations: HashMap<String, String>,
    /// Process arguments.
    pub args: Vec<String>,
    /// Environment, as `KEY=value` strings.
    pub env: Vec<String>,
    /// Mounts.
    pub mounts: Vec<Mount>,
    /// Pid of the container's process, 0 if not running.
    pub pid: u32,
    /// Device nodes already in the container's spec.
    pub devices: Vec<LinuxDevice>,
    /// The container's Linux namespaces.
    pub namespaces: Vec<Namespace>,
    /// Cgroups path.
    pub cgroups_path: String,
    /// The OCI `createRuntime` hooks in the container's spec (from CDI devices among others).
    pub create_runtime_hooks: Vec<Hook>,
}

/// An OCI hook of a container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hook {
    /// The executable, a host path.
    pub path: String,
    /// Its arguments, `argv[0]` first.
    pub args: Vec<String>,
}

/// A mount of a container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mount {
    /// Path inside the container.
    pub destination: String,
    /// Filesystem type (`bind`, `tmpfs`, …).
    pub kind: String,
    /// Source path or device.
    pub source: String,
    /// Mount options.
    pub options: Vec<String>,
}

impl Mount {
    /// A bind mount of `source` at `destination` with the given options (e.g. `["rbind", "ro"]`).
    pub fn bind(
        source: impl Into<String>,
        destination: impl Into<String>,
        options: &[&str],
    ) -> Self {
        Mount {
            destination: destination.into(),
            kind: "bind".into(),
            source: source.into(),
            options: options.iter().map(|s| (*s).to_owned()).collect(),
        }
    }
}

/// Kind of a device node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceType {
    /// Character device (`c`).
    #[default]
    Char,
    /// Block device (`b`).
    Block,
    /// FIFO (`p`).
    Fifo,
    /// Unbuffered character device (`u`).
    Unbuffered,
}

impl DeviceType {
    /// The OCI one-letter code.
    pub fn code(self) -> &'static str {
        match self {
            DeviceType::Char => "c",
            DeviceType::Block => "b",
            DeviceType::Fifo => "p",
            DeviceType::Unbuffered => "u",
        }
    }

    /// Parses an OCI one-letter code.
    pub fn from_code(code: &str) -> Result<Self> {
        match code {
            "c" => Ok(DeviceType::Char),
            "b" => Ok(DeviceType::Block),
            "p" => Ok(DeviceType::Fifo),
            "u" => Ok(DeviceType::Unbuffered),
            other => Err(Error::InvalidInput(format!(
                "unknown device type {other:?} (expected c, b, p or u)"
            ))),
        }
    }
}

/// A Linux device node to create in a container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LinuxDevice {
    /// Path inside the container, e.g. `/dev/infiniband/uverbs0`.
    pub path: String,
    /// Node type.
    pub kind: DeviceType,
    /// Major number.
    pub major: i64,
    /// Minor number.
    pub minor: i64,
    /// File mode of the node (permission bits; the runtime derives the cgroup access from it).
    pub file_mode: Option<u32>,
    /// Owner uid.
    pub uid: Option<u32>,
    /// Owner gid.
    pub gid: Option<u32>,
}

impl LinuxDevice {
    /// A character device node, mode 0666.
    pub fn char(path: impl Into<String>, major: i64, minor: i64) -> Self {
        LinuxDevice {
            path: path.into(),
            kind: DeviceType::Char,
            major,
            minor,
            file_mode: Some(0o666),
            uid: None,
            gid: None,
        }
    }

    /// A node at `path` in the container mirroring the host's device node `host_path` (type and
    /// numbers from `stat`, mode 0666).
    pub fn from_host(path: impl Into<String>, host_path: impl AsRef<Path>) -> Result<Self> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let host_path = host_path.as_ref();
        let md = std::fs::metadata(host_path).map_err(|source| Error::HostDevice {
            path: host_path.to_path_buf(),
            source,
        })?;
        let ft = md.file_type();
        let kind = if ft.is_char_device() {
            DeviceType::Char
        } else if ft.is_block_device() {
            DeviceType::Block
        } else {
            return Err(Error::InvalidInput(format!(
                "{} is not a device node",
                host_path.display()
            )));
        };
        let (major, minor) = split_dev(md.rdev());
        Ok(LinuxDevice {
            path: path.into(),
            kind,
            major: major.into(),
            minor: minor.into(),
            file_mode: Some(0o666),
            uid: None,
            gid: None,
        })
    }

    /// Sets the file mode.
    #[must_use]
    pub fn mode(mut self, mode: u32) -> Self {
        self.file_mode = Some(mode);
        self
    }

    /// Sets the owner.
    #[must_use]
    pub fn owner(mut self, uid: u32, gid: u32) -> Self {
        self.uid = Some(uid);
        self.gid = Some(gid);
        self
    }

    /// Checks what the runtime would otherwise reject late or misapply.
    pub(crate) fn validate(&self) -> Result<()> {
        if !self.path.starts_with('/') {
            return Err(Error::InvalidInput(format!(
                "device path {:?} is not absolute",
                self.path
            )));
        }
        if self.major < 0 || self.minor < 0 {
            return Err(Error::InvalidInput(format!(
                "device {}: negative major/minor {}:{}",
                self.path, self.major, self.minor
            )));
        }
        if self.file_mode.is_some_and(|m| m & !0o7777 != 0) {
            return Err(Error::InvalidInput(format!(
                "device {}: file mode {:#o} has bits beyond 0o7777",
                self.path,
                self.file_mode.unwrap_or_default()
            )));
        }
        Ok(())
    }
}

/// Splits a Linux `dev_t` into (major, minor), glibc's encoding.
fn split_dev(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    // Both fit in 32 bits by construction of the encoding.
    (major as u32, minor as u32)
}

/// What the runtime told the plugin in `Configure`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuntimeInfo {
    /// Runtime name, e.g. `containerd`.
    pub runtime_name: String,
    /// Runtime version, e.g. `1.7.24`.
    pub runtime_version: String,
    /// NRI protocol version of the runtime; empty for runtimes older than NRI v0.12.
    pub nri_version: String,
    /// Plugin configuration the runtime holds for this plugin (drop-in file), often empty.
    pub config: String,
    /// How long the runtime waits for a plugin's answer, if it said (NRI ≥ v0.12).
    pub request_timeout: Option<std::time::Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::nri as pb;

    #[test]
    fn dev_t_split_matches_glibc() {
        // makedev(231, 192) and a large one, makedev(0x1234, 0x56789).
        assert_eq!(split_dev((231 << 8) | 192), (231, 192));
        let dev: u64 = ((0x1234u64 & 0xfff) << 8)
            | ((0x1234u64 & !0xfff) << 32)
            | (0x56789 & 0xff)
            | ((0x56789 & !0xff) << 12);
        assert_eq!(split_dev(dev), (0x1234, 0x56789));
    }

    #[test]
    fn host_device_numbers_come_from_stat() {
        let d = LinuxDevice::from_host("/dev/x", "/dev/null").unwrap();
        assert_eq!((d.kind, d.major, d.minor), (DeviceType::Char, 1, 3));
        let err = LinuxDevice::from_host("/dev/x", "/etc/hostname").unwrap_err();
        assert!(err.to_string().contains("not a device node"), "{err}");
    }

    #[test]
    fn netns_path_is_filled_only_when_missing() {
        let mut p = PodSandbox::default();
        assert_eq!(p.netns_path(), None);
        p.fill_netns("/run/netns/a");
        assert_eq!(p.netns_path(), Some("/run/netns/a"));
        p.fill_netns("/run/netns/b");
        assert_eq!(p.netns_path(), Some("/run/netns/a"));
    }

    #[test]
    fn pod_roundtrips_through_the_wire_type() {
        let p = PodSandbox {
            id: "id".into(),
            name: "n".into(),
            namespaces: vec![Namespace {
                kind: "network".into(),
                path: "/p".into(),
            }],
            ips: vec!["10.0.0.1".into()],
            ..Default::default()
        };
        assert_eq!(PodSandbox::from(pb::PodSandbox::from(&p)), p);
    }

    #[test]
    fn invalid_devices_are_rejected_with_the_reason() {
        let e = LinuxDevice::char("dev/x", 1, 1).validate().unwrap_err();
        assert!(e.to_string().contains("not absolute"), "{e}");
        let e = LinuxDevice::char("/dev/x", -1, 1).validate().unwrap_err();
        assert!(e.to_string().contains("negative"), "{e}");
        let e = LinuxDevice::char("/dev/x", 1, 1)
            .mode(0o170000)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("0o7777"), "{e}");
    }
}
