//! [`ContainerAdjustment`]: the changes a plugin asks for when a container is created.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::proto::nri as pb;
use crate::types::{LinuxDevice, Mount};

/// NRI marks "remove this" by prefixing the key (annotation, env key, mount destination, device
/// path) with a dash.
const REMOVAL_MARK: char = '-';

/// Changes to a container being created: device nodes, environment, mounts, annotations.
///
/// ```
/// use dranet_nri::{ContainerAdjustment, LinuxDevice};
/// let mut adj = ContainerAdjustment::new();
/// adj.add_device(LinuxDevice::char("/dev/infiniband/uverbs0", 231, 192))?
///     .add_env("RDMA_DEVICE", "uverbs0")?
///     .add_annotation("dranet.example/injected", "uverbs0");
/// assert_eq!(adj.devices().len(), 1);
/// # Ok::<(), dranet_nri::Error>(())
/// ```
///
/// For each device added, the runtime also adds the matching cgroup allow rule (type, major, minor,
/// access derived from the file mode), so the node is usable, not only visible.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerAdjustment {
    annotations: HashMap<String, String>,
    mounts: Vec<Mount>,
    env: Vec<(String, String)>,
    devices: Vec<LinuxDevice>,
}

impl ContainerAdjustment {
    /// No changes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the adjustment changes nothing.
    pub fn is_empty(&self) -> bool {
        self.annotations.is_empty()
            && self.mounts.is_empty()
            && self.env.is_empty()
            && self.devices.is_empty()
    }

    /// Adds a device node (and, through the runtime, its cgroup allow rule).
    pub fn add_device(&mut self, device: LinuxDevice) -> Result<&mut Self> {
        device.validate()?;
        self.devices.push(device);
        Ok(self)
    }

    /// Removes the device node at `path` from the container.
    pub fn remove_device(&mut self, path: &str) -> Result<&mut Self> {
        check_key("device path", path)?;
        self.devices.push(LinuxDevice {
            path: format!("{REMOVAL_MARK}{path}"),
            ..Default::default()
        });
        Ok(self)
    }

    /// Sets an environment variable.
    pub fn add_env(&mut self, key: &str, value: &str) -> Result<&mut Self> {
        check_env_key(key)?;
        self.env.push((key.to_owned(), value.to_owned()));
        Ok(self)
    }

    /// Removes an environment variable.
    pub fn remove_env(&mut self, key: &str) -> Result<&mut Self> {
        check_env_key(key)?;
        self.env
            .push((format!("{REMOVAL_MARK}{key}"), String::new()));
        Ok(self)
    }

    /// Adds (or replaces) a mount at `mount.destination`.
    pub fn add_mount(&mut self, mount: Mount) -> Result<&mut Self> {
        check_key("mount destination", &mount.destination)?;
        if !mount.destination.starts_with('/') {
            return Err(Error::InvalidInput(format!(
                "mount destination {:?} is not absolute",
                mount.destination
            )));
        }
        self.mounts.push(mount);
        Ok(self)
    }

    /// Removes the mount at `destination`.
    pub fn remove_mount(&mut self, destination: &str) -> Result<&mut Self> {
        check_key("mount destination", destination)?;
        self.mounts.push(Mount {
            destination: format!("{REMOVAL_MARK}{destination}"),
            ..Default::default()
        });
        Ok(self)
    }

    /// Sets a container annotation.
    pub fn add_annotation(&mut self, key: &str, value: &str) -> &mut Self {
        self.annotations.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Removes a container annotation.
    pub fn remove_annotation(&mut self, key: &str) -> &mut Self {
        self.annotations
            .insert(format!("{REMOVAL_MARK}{key}"), String::new());
        self
    }

    /// Devices added (paths starting with `-` are removals).
    pub fn devices(&self) -> &[LinuxDevice] {
        &self.devices
    }

    /// Environment changes as (key, value); keys starting with `-` are removals.
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// Mount changes; destinations starting with `-` are removals.
    pub fn mounts(&self) -> &[Mount] {
        &self.mounts
    }

    /// Annotation changes; keys starting with `-` are removals.
    pub fn annotations(&self) -> &HashMap<String, String> {
        &self.annotations
    }
}

fn check_key(what: &str, key: &str) -> Result<()> {
    if key.is_empty() || key.starts_with(REMOVAL_MARK) {
        return Err(Error::InvalidInput(format!(
            "{what} {key:?} is empty or starts with '-'"
        )));
    }
    Ok(())
}

fn check_env_key(key: &str) -> Result<()> {
    check_key("env key", key)?;
    if key.contains('=') || key.contains('\0') {
        return Err(Error::InvalidInput(format!(
            "env key {key:?} contains '=' or NUL"
        )));
    }
    Ok(())
}

impl From<&ContainerAdjustment> for pb::ContainerAdjustment {
    fn from(a: &ContainerAdjustment) -> Self {
        pb::ContainerAdjustment {
            annotations: a.annotations.clone(),
            mounts: a.mounts.iter().map(pb::Mount::from).collect(),
            env: a
                .env
                .iter()
                .map(|(key, value)| pb::KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            linux: (!a.devices.is_empty()).then(|| pb::LinuxContainerAdjustment {
                devices: a.devices.iter().map(pb::LinuxDevice::from).collect(),
            }),
        }
    }
}

impl TryFrom<pb::ContainerAdjustment> for ContainerAdjustment {
    type Error = Error;
    /// Reads an adjustment off the wire (the runtime's side of the exchange, used by
    /// [`crate::fake::FakeRuntime`]).
    fn try_from(a: pb::ContainerAdjustment) -> Result<Self> {
        let devices = a
            .linux
            .map(|l| l.devices)
            .unwrap_or_default()
            .into_iter()
            .map(|d| {
                // Removal entries carry only the marked path.
                if d.path.starts_with(REMOVAL_MARK) {
                    Ok(LinuxDevice {
                        path: d.path,
                        ..Default::default()
                    })
                } else {
                    LinuxDevice::try_from(d)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ContainerAdjustment {
            annotations: a.annotations,
            mounts: a.mounts.into_iter().map(Mount::from).collect(),
            env: a.env.into_iter().map(|kv| (kv.key, kv.value)).collect(),
            devices,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removals_are_marked_with_a_dash() {
        let mut a = ContainerAdjustment::new();
        a.remove_env("A").unwrap();
        a.remove_mount("/m").unwrap();
        a.remove_device("/dev/d").unwrap();
        a.remove_annotation("k");
        let w = pb::ContainerAdjustment::from(&a);
        assert_eq!(w.env[0].key, "-A");
        assert_eq!(w.mounts[0].destination, "-/m");
        assert_eq!(w.linux.as_ref().unwrap().devices[0].path, "-/dev/d");
        assert!(w.annotations.contains_key("-k"));
        assert_eq!(ContainerAdjustment::try_from(w).unwrap(), a);
    }

    #[test]
    fn bad_input_is_rejected_not_sent() {
        let mut a = ContainerAdjustment::new();
        assert!(a.add_env("A=B", "x").is_err());
        assert!(a.add_env("", "x").is_err());
        assert!(a.add_env("-A", "x").is_err());
        assert!(a.add_mount(Mount::bind("/s", "rel", &[])).is_err());
        assert!(a.add_device(LinuxDevice::char("rel", 1, 1)).is_err());
        assert!(a.is_empty());
    }

    #[test]
    fn device_reaches_the_wire_with_all_fields() {
        let mut a = ContainerAdjustment::new();
        a.add_device(LinuxDevice::char("/dev/infiniband/uverbs0", 231, 192).owner(0, 44))
            .unwrap();
        let w = pb::ContainerAdjustment::from(&a);
        let d = &w.linux.as_ref().unwrap().devices[0];
        assert_eq!((d.r#type.as_str(), d.major, d.minor), ("c", 231, 192));
        assert_eq!(d.file_mode.as_ref().map(|m| m.value), Some(0o666));
        assert_eq!(d.gid.as_ref().map(|g| g.value), Some(44));
        assert!(
            pb::ContainerAdjustment::from(&ContainerAdjustment::new())
                .linux
                .is_none()
        );
    }
}
