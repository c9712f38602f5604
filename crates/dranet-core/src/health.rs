//! Whether a device can carry traffic, judged from its link and RDMA port state, and the device
//! taint that keeps new claims off it while it cannot. One judgment for both readers: the
//! ResourceSlice (the taint, on clusters with `DRADeviceTaints`) and the kubelet's health service.

use k8s_openapi::api::resource::v1::DeviceTaint;
use serde::{Deserialize, Serialize};

use crate::NetworkDevice;

/// The key of the taint on a device whose link or RDMA port has lost its link ([`Fault::taint`]).
pub const UNHEALTHY_TAINT_KEY: &str = "dra.net/unhealthy";

/// The taint's effect: new claims that do not tolerate it are not given the device; pods
/// already running with it are left alone (their traffic may come back with the link).
pub const UNHEALTHY_TAINT_EFFECT: &str = "NoSchedule";

/// Operational states (`/sys/class/net/*/operstate`) that, on a link administratively up
/// (`IFF_UP`), mean it has lost its carrier or the link below it. On a link administratively
/// down the same states are only the operator's choice, not a fault: see [`Fault::of_link`].
pub const NO_CARRIER_STATES: [&str; 2] = ["down", "lowerlayerdown"];

/// The operational state of a netdev whose device is gone: a fault whatever its flags say.
pub const NOT_PRESENT_STATE: &str = "notpresent";

/// The RDMA port physical state (`ports/*/phys_state`, `2: Polling`) of a port that is enabled
/// but finds no link: the InfiniBand PortPhysicalState "Polling" (no cable or no peer). The
/// other states are not faults: "Disabled" is a port turned off on purpose (a RoCE port reports
/// it while its netdev is administratively down), "LinkUp" with a logical state short of ACTIVE
/// is a link waiting for its subnet manager, and the training/recovery states are transient.
pub const RDMA_NO_LINK_PHYS_STATE: &str = "Polling";

/// Why a device cannot carry traffic now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "fault")]
pub enum Fault {
    /// The netdev is administratively up but its operational state is one of
    /// [`NO_CARRIER_STATES`], or its device is gone ([`NOT_PRESENT_STATE`]).
    LinkDown {
        /// The netdev's name.
        link: String,
        /// Its operational state.
        state: String,
    },
    /// No port of the RDMA link is ACTIVE and one is enabled without a link
    /// ([`RDMA_NO_LINK_PHYS_STATE`]).
    RdmaPortDown {
        /// The RDMA link's name.
        link: String,
        /// The first port enabled without a link.
        port: u32,
        /// That port's state as sysfs shows it (`1: DOWN`).
        state: String,
    },
}

impl Fault {
    /// The fault of `d`, if any: its netdev's state first ([`Fault::of_link`]), then its RDMA
    /// ports. A device none of whose ports is ACTIVE is faulty only when one of them is enabled
    /// and finds no link ([`RDMA_NO_LINK_PHYS_STATE`]): a port disabled on purpose, or whose
    /// physical state is not known, is not judged.
    pub fn of(d: &NetworkDevice) -> Option<Fault> {
        if let Some(n) = &d.netdev
            && let Some(st) = n.operstate.as_deref()
            && let Some(f) = Fault::of_link(&n.name, st, n.admin_up)
        {
            return Some(f);
        }
        let r = d.rdma.as_ref()?;
        if r.ports
            .iter()
            .any(|p| p.state.as_deref().is_some_and(|s| s.contains("ACTIVE")))
        {
            return None;
        }
        let p = r.ports.iter().find(|p| {
            p.phys_state
                .as_deref()
                .is_some_and(|s| phys_state_name(s) == RDMA_NO_LINK_PHYS_STATE)
        })?;
        Some(Fault::RdmaPortDown {
            link: r.name.clone(),
            port: p.number,
            state: p.state.clone().unwrap_or_else(|| "unknown".to_string()),
        })
    }

    /// The fault of a link named `link` whose operational state is `state` and whose `IFF_UP`
    /// flag is `admin_up`: [`NOT_PRESENT_STATE`] always; one of [`NO_CARRIER_STATES`] only when
    /// the link is administratively up. A link administratively down is not a fault: dranet
    /// hands such NICs to pods and brings them up there (secondary NICs nobody configured on
    /// the host), so tainting them would keep them from every claim. When the flag is not known
    /// (`None`) admin-down cannot be told from carrier loss, and the link is not judged.
    pub fn of_link(link: &str, state: &str, admin_up: Option<bool>) -> Option<Fault> {
        let faulty = state == NOT_PRESENT_STATE
            || (admin_up == Some(true) && NO_CARRIER_STATES.contains(&state));
        faulty.then(|| Fault::LinkDown {
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

/// The name in a sysfs state such as `2: Polling` (the whole text when it has no number).
fn phys_state_name(s: &str) -> &str {
    s.split_once(": ").map_or(s, |(_, name)| name).trim()
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

    /// A device with netdev `eth1` (`operstate`, `IFF_UP` = `up`) and RDMA ports given as
    /// (state, phys_state).
    fn device(
        operstate: Option<&str>,
        up: Option<bool>,
        ports: &[(&str, Option<&str>)],
    ) -> NetworkDevice {
        NetworkDevice {
            name: "eth1".into(),
            pci: None,
            netdev: Some(Netdev {
                name: "eth1".into(),
                operstate: operstate.map(Into::into),
                admin_up: up,
                ..Default::default()
            }),
            rdma: (!ports.is_empty()).then(|| RdmaLink {
                name: "mlx5_0".into(),
                ports: ports
                    .iter()
                    .enumerate()
                    .map(|(i, (s, ph))| RdmaPort {
                        number: i as u32 + 1,
                        state: Some((*s).into()),
                        phys_state: ph.map(Into::into),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
        }
    }

    const ACTIVE: (&str, Option<&str>) = ("4: ACTIVE", Some("5: LinkUp"));

    #[test]
    fn a_link_up_with_an_active_port_has_no_fault() {
        for d in [
            device(Some("up"), Some(true), &[]),
            device(Some("up"), Some(true), &[ACTIVE]),
            device(
                Some("up"),
                Some(true),
                &[("1: DOWN", Some("2: Polling")), ACTIVE],
            ),
            // "unknown" is what many virtual links say while they carry traffic.
            device(Some("unknown"), Some(true), &[]),
            device(None, None, &[]),
        ] {
            assert_eq!(Fault::of(&d), None, "{d:?}");
        }
    }

    #[test]
    fn a_link_administratively_down_is_not_a_fault() {
        // A secondary NIC nobody configured on the host: dranet brings it up in the pod.
        for st in NO_CARRIER_STATES {
            assert_eq!(Fault::of(&device(Some(st), Some(false), &[])), None, "{st}");
            // Without the flag, admin-down cannot be told from carrier loss.
            assert_eq!(Fault::of(&device(Some(st), None, &[])), None, "{st}");
        }
        // Its RoCE port follows it: DOWN and Disabled.
        let roce = device(
            Some("down"),
            Some(false),
            &[("1: DOWN", Some("3: Disabled"))],
        );
        assert_eq!(Fault::of(&roce), None);
    }

    #[test]
    fn a_link_up_without_carrier_is_tainted_no_schedule() {
        for st in NO_CARRIER_STATES {
            let f = Fault::of(&device(Some(st), Some(true), &[ACTIVE])).unwrap();
            assert_eq!(f.to_string(), format!("link eth1 is {st}"));
            let t = f.taint();
            assert_eq!(t.key, "dra.net/unhealthy");
            assert_eq!(t.value.as_deref(), Some("link-down"));
            assert_eq!(t.effect, "NoSchedule");
            assert_eq!(t.time_added, None);
        }
    }

    #[test]
    fn a_link_whose_device_is_gone_is_a_fault_whatever_its_flags() {
        for up in [Some(true), Some(false), None] {
            let f = Fault::of(&device(Some("notpresent"), up, &[])).unwrap();
            assert_eq!(f.taint_value(), "link-down", "{up:?}");
        }
    }

    #[test]
    fn an_rdma_port_enabled_without_a_link_is_tainted() {
        let f = Fault::of(&device(
            Some("up"),
            Some(true),
            &[
                ("1: DOWN", Some("3: Disabled")),
                ("1: DOWN", Some("2: Polling")),
            ],
        ))
        .unwrap();
        assert_eq!(f.to_string(), "RDMA link mlx5_0 port 2 is 1: DOWN");
        assert_eq!(f.taint().value.as_deref(), Some("rdma-port-down"));
        // The link's own state is named first.
        let f = Fault::of(&device(
            Some("down"),
            Some(true),
            &[("1: DOWN", Some("2: Polling"))],
        ))
        .unwrap();
        assert_eq!(f.taint_value(), "link-down");
    }

    #[test]
    fn an_rdma_port_disabled_waiting_or_unknown_is_not_a_fault() {
        for port in [
            ("1: DOWN", Some("3: Disabled")),
            // Physically up, waiting for the subnet manager.
            ("2: INIT", Some("5: LinkUp")),
            ("3: ARMED", Some("5: LinkUp")),
            ("1: DOWN", None),
        ] {
            let d = device(Some("up"), Some(true), &[port]);
            assert_eq!(Fault::of(&d), None, "{port:?}");
        }
    }
}
