//! Conversions between the plain views and the protobuf messages on the wire.

use super::{
    Container, ContainerState, DeviceType, Hook, LinuxDevice, Mount, Namespace, PodSandbox,
};
use crate::error::{Error, Result};
use crate::proto::nri as pb;

fn namespaces_from(v: Vec<pb::LinuxNamespace>) -> Vec<Namespace> {
    v.into_iter()
        .map(|n| Namespace {
            kind: n.r#type,
            path: n.path,
        })
        .collect()
}

fn namespaces_to(v: &[Namespace]) -> Vec<pb::LinuxNamespace> {
    v.iter()
        .map(|n| pb::LinuxNamespace {
            r#type: n.kind.clone(),
            path: n.path.clone(),
        })
        .collect()
}

impl From<pb::PodSandbox> for PodSandbox {
    fn from(p: pb::PodSandbox) -> Self {
        let linux = p.linux.unwrap_or_default();
        PodSandbox {
            id: p.id,
            name: p.name,
            uid: p.uid,
            namespace: p.namespace,
            labels: p.labels,
            annotations: p.annotations,
            runtime_handler: p.runtime_handler,
            pid: p.pid,
            ips: p.ips,
            cgroup_parent: linux.cgroup_parent,
            namespaces: namespaces_from(linux.namespaces),
        }
    }
}

impl From<&PodSandbox> for pb::PodSandbox {
    fn from(p: &PodSandbox) -> Self {
        pb::PodSandbox {
            id: p.id.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
            namespace: p.namespace.clone(),
            labels: p.labels.clone(),
            annotations: p.annotations.clone(),
            runtime_handler: p.runtime_handler.clone(),
            linux: Some(pb::LinuxPodSandbox {
                cgroup_parent: p.cgroup_parent.clone(),
                cgroups_path: String::new(),
                namespaces: namespaces_to(&p.namespaces),
            }),
            pid: p.pid,
            ips: p.ips.clone(),
        }
    }
}

impl From<pb::ContainerState> for ContainerState {
    fn from(s: pb::ContainerState) -> Self {
        match s {
            pb::ContainerState::ContainerUnknown => ContainerState::Unknown,
            pb::ContainerState::ContainerCreated => ContainerState::Created,
            pb::ContainerState::ContainerPaused => ContainerState::Paused,
            pb::ContainerState::ContainerRunning => ContainerState::Running,
            pb::ContainerState::ContainerStopped => ContainerState::Stopped,
        }
    }
}

impl From<ContainerState> for pb::ContainerState {
    fn from(s: ContainerState) -> Self {
        match s {
            ContainerState::Unknown => pb::ContainerState::ContainerUnknown,
            ContainerState::Created => pb::ContainerState::ContainerCreated,
            ContainerState::Paused => pb::ContainerState::ContainerPaused,
            ContainerState::Running => pb::ContainerState::ContainerRunning,
            ContainerState::Stopped => pb::ContainerState::ContainerStopped,
        }
    }
}

impl From<pb::Mount> for Mount {
    fn from(m: pb::Mount) -> Self {
        Mount {
            destination: m.destination,
            kind: m.r#type,
            source: m.source,
            options: m.options,
        }
    }
}

impl From<&Mount> for pb::Mount {
    fn from(m: &Mount) -> Self {
        pb::Mount {
            destination: m.destination.clone(),
            r#type: m.kind.clone(),
            source: m.source.clone(),
            options: m.options.clone(),
        }
    }
}

impl TryFrom<pb::LinuxDevice> for LinuxDevice {
    type Error = Error;
    fn try_from(d: pb::LinuxDevice) -> Result<Self> {
        Ok(LinuxDevice {
            kind: DeviceType::from_code(&d.r#type)?,
            path: d.path,
            major: d.major,
            minor: d.minor,
            file_mode: d.file_mode.map(|m| m.value),
            uid: d.uid.map(|v| v.value),
            gid: d.gid.map(|v| v.value),
        })
    }
}

impl From<&LinuxDevice> for pb::LinuxDevice {
    fn from(d: &LinuxDevice) -> Self {
        pb::LinuxDevice {
            path: d.path.clone(),
            r#type: d.kind.code().to_owned(),
            major: d.major,
            minor: d.minor,
            file_mode: d.file_mode.map(|value| pb::OptionalFileMode { value }),
            uid: d.uid.map(|value| pb::OptionalUInt32 { value }),
            gid: d.gid.map(|value| pb::OptionalUInt32 { value }),
        }
    }
}

impl From<pb::Container> for Container {
    fn from(c: pb::Container) -> Self {
        let state = c.state();
        let linux = c.linux.unwrap_or_default();
        Container {
            id: c.id,
            pod_sandbox_id: c.pod_sandbox_id,
            name: c.name,
            state: state.into(),
            labels: c.labels,
            annotations: c.annotations,
            args: c.args,
            env: c.env,
            mounts: c.mounts.into_iter().map(Mount::from).collect(),
            pid: c.pid,
            // A device of a type we do not model is not ours to change: leave it out of the view.
            devices: linux
                .devices
                .into_iter()
                .filter_map(|d| LinuxDevice::try_from(d).ok())
                .collect(),
            namespaces: namespaces_from(linux.namespaces),
            cgroups_path: linux.cgroups_path,
            create_runtime_hooks: c
                .hooks
                .map(|h| h.create_runtime)
                .unwrap_or_default()
                .into_iter()
                .map(|h| Hook {
                    path: h.path,
                    args: h.args,
                })
                .collect(),
        }
    }
}

impl From<&Container> for pb::Container {
    fn from(c: &Container) -> Self {
        pb::Container {
            id: c.id.clone(),
            pod_sandbox_id: c.pod_sandbox_id.clone(),
            name: c.name.clone(),
            state: pb::ContainerState::from(c.state) as i32,
            labels: c.labels.clone(),
            annotations: c.annotations.clone(),
            args: c.args.clone(),
            env: c.env.clone(),
            mounts: c.mounts.iter().map(pb::Mount::from).collect(),
            linux: Some(pb::LinuxContainer {
                namespaces: namespaces_to(&c.namespaces),
                devices: c.devices.iter().map(pb::LinuxDevice::from).collect(),
                cgroups_path: c.cgroups_path.clone(),
            }),
            pid: c.pid,
            hooks: (!c.create_runtime_hooks.is_empty()).then(|| pb::Hooks {
                create_runtime: c
                    .create_runtime_hooks
                    .iter()
                    .map(|h| pb::Hook {
                        path: h.path.clone(),
                        args: h.args.clone(),
                        env: Vec::new(),
                    })
                    .collect(),
            }),
        }
    }
}
