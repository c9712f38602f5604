//! Whether a device can carry traffic, judged from its link and RDMA port state, and the device
//! taint that keeps new claims off it while it cannot. One judgment for both readers: the
//! ResourceSlice (the taint, on clusters with `DRADeviceTaints`) and the kubelet's health service.

use k8s_openapi::api::resource::v1::DeviceTaint;
use serde::{Deserialize, Serialize};

use crate::NetworkDevice;

/// The key of the taint on a device whose link or RDMA port is down ([`Fault::taint`]).
pub const UNHEALTHY_TAINT_KEY: &str = "dra.net/unhealthy";

/// The taint's effect: new claims that do not tolerate it are not given the device; pods
/// already running with it are left alone (their traffic may come back with the link).
pub const UNHEALTHY_TAINT_EFFECT: &str = "NoSchedule";

/// Operational states (`/sys/class/net/*/operstate`) that mean the link carries no traffic.
pub const LINK_DOWN_STATES: [&str; 4] = ["down", "lowerlayerdown", "notpresent", "dormant"];

/// Why a device cannot carry traffic now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "fault")]
pub enum Fault {
    /// The netdev's operational state is one of [`LINK_DOWN_STATES`].
    LinkDown {
        /// The netdev's name.
        link: String,
        /// Its operational state.
        state: String,
    },
    /// No port of the RDMA link is ACTIVE.
    RdmaPortDown {
        /// The RDMA link's name.
        link: String,
        /// The first port with a state.
        port: u32,
        /// That port's state as sysfs shows it (`1: DOWN`).
        state: String,
    },
}

impl Fault {
    /// The fault of `d`, if any: its netdev's operational state first, then its RDMA ports (a
    /// device with no port state known is not judged by its ports).
    pub fn of(d: &NetworkDevice) -> Option<Fault> {
        if let Some(n) = &d.netdev
            && let Some(st) = n.operstate.as_deref()
            && let Some(f) = Fault::of_link(&n.name, st)
        {
            return Some(f);
        }
        let r = d.rdma.as_ref()?;
        let mut states = r
            .ports
            .iter()
            .filter_map(|p| p.state.as_deref().map(|s| (p.number, s)));
        let (port, state) = states.clone().next()?;
        if states.any(|(_, s)| s.contains("ACTIVE")) {
            return None;
        }
        Some(Fault::RdmaPortDown {
            link: r.name.clone(),
            port,
            state: state.to_string(),
        })
    }

    /// The fault of a link named `link` whose operational state is `state`, if that state is
    /// one of [`LINK_DOWN_STATES`].
    pub fn of_link(link: &str, state: &str) -> Option<Fault> {
        LINK_DOWN_STATES.contains(&state).then(|| Fault::LinkDown {
            link: link.to_string(),
            state: state.to_string(),
        })
    }

    /// The taint's value: which kind of fault (a label value, so no link names in it).
    pub fn taint_value(&self) -> &'static str {
        match self {
            Fault::LinkDown { .. } => "link-down",
            Fault::RdmaPortDown { .. } => "rdma-port-down",
        }
    }

    /// The device taint this fault puts on the published device: [`UNHEALTHY_TAINT_KEY`],
    /// [`Fault::taint_value`], [`UNHEALTHY_TAINT_EFFECT`]. `timeAdded` is left to the API
    /// server, which stamps it when the taint first appears.
    pub fn taint(&self) -> DeviceTaint {
        DeviceTaint {
            key: UNHEALTHY_TAINT_KEY.to_string(),
            value: Some(self.taint_value().to_string()),
            effect: UNHEALTHY_TAINT_EFFECT.to_string(),
            time_added: None,
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::LinkDown { link, state } => write!(f, "link {link} is {state}"),
            Fault::RdmaPortDown { link, port, state } => {
                write!(f, "RDMA link {link} port {port} is {state}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Netdev, RdmaLink, RdmaPort};

    fn device(operstate: Option<&str>, ports: &[&str]) -> NetworkDevice {
        NetworkDevice {
            name: "eth1".into(),
            pci: None,
            netdev: Some(Netdev {
                name: "eth1".into(),
                operstate: operstate.map(Into::into),
                ..Default::default()
            }),
            rdma: (!ports.is_empty()).then(|| RdmaLink {
                name: "mlx5_0".into(),
                ports: ports
                    .iter()
                    .enumerate()
                    .map(|(i, s)| RdmaPort {
                        number: i as u32 + 1,
                        state: Some((*s).into()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_link_up_with_an_active_port_has_no_fault() {
        for d in [
            device(Some("up"), &[]),
            device(Some("up"), &["4: ACTIVE"]),
            device(Some("up"), &["1: DOWN", "4: ACTIVE"]),
            // "unknown" is what many virtual links say while they carry traffic.
            device(Some("unknown"), &[]),
            device(None, &[]),
        ] {
            assert_eq!(Fault::of(&d), None, "{d:?}");
        }
    }

    #[test]
    fn a_link_down_is_tainted_no_schedule() {
        for st in LINK_DOWN_STATES {
            let f = Fault::of(&device(Some(st), &["4: ACTIVE"])).unwrap();
            assert_eq!(f.to_string(), format!("link eth1 is {st}"));
            let t = f.taint();
            assert_eq!(t.key, "dra.net/unhealthy");
            assert_eq!(t.value.as_deref(), Some("link-down"));
            assert_eq!(t.effect, "NoSchedule");
            assert_eq!(t.time_added, None);
        }
    }

    #[test]
    fn an_rdma_link_with_no_active_port_is_tainted() {
        let f = Fault::of(&device(Some("up"), &["1: DOWN", "2: INIT"])).unwrap();
        assert_eq!(f.to_string(), "RDMA link mlx5_0 port 1 is 1: DOWN");
        assert_eq!(f.taint().value.as_deref(), Some("rdma-port-down"));
        // The link's own state is named first.
        let f = Fault::of(&device(Some("down"), &["1: DOWN"])).unwrap();
        assert_eq!(f.taint_value(), "link-down");
    }
}
