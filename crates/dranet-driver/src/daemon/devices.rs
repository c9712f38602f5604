//! How healthy the daemon says each device is, and what its metrics count: pure functions of
//! the scan, the publication ([`crate::publish`]) and the devices in use.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use dranet_core::attributes::{AttributeValue, names};
use dranet_core::health::Fault;
use dranet_core::slice::PublishedDevice;
use dranet_core::{DRIVER_NAME, Inventory, NetworkDevice};
use dranet_kubeletplugin::{DeviceHealthReport, Health};

/// How many published devices have an RDMA link (upstream's `feature="rdma"`).
pub fn rdma_count(devices: &BTreeMap<String, PublishedDevice>) -> usize {
    let key = format!("{DRIVER_NAME}/{}", names::RDMA);
    devices
        .values()
        .filter(|d| {
            matches!(
                d.attributes
                    .get(&key)
                    .or_else(|| d.attributes.get(names::RDMA)),
                Some(AttributeValue::Bool(true))
            )
        })
        .count()
}

/// The health of one scanned device: its netdev's operational state, then its RDMA ports (the
/// judgment that also taints the published device: [`dranet_core::health::Fault`]).
pub fn device_health(d: &NetworkDevice) -> (Health, String) {
    match Fault::of(d) {
        Some(f) => (Health::Unhealthy, f.to_string()),
        None => (Health::Healthy, "link up".into()),
    }
}

/// Health reports for the kubelet: every published device, and every device published before
/// that is gone now (unhealthy until it returns). `known` remembers what was ever published;
/// `in_pods` is the state of the netdevs in pods' namespaces, by device (what the host's scan
/// cannot see).
pub fn health(
    pool: &str,
    inv: &Inventory,
    published: &BTreeMap<String, PublishedDevice>,
    in_use: &BTreeMap<String, String>,
    in_pods: &BTreeMap<String, Option<Fault>>,
    known: &mut BTreeSet<String>,
    valid_for: Duration,
) -> Vec<DeviceHealthReport> {
    let now = SystemTime::now();
    known.extend(published.keys().cloned());
    known
        .iter()
        .map(|name| {
            let in_pod = in_pods.get(name).and_then(Option::as_ref);
            let (health, message) = match (inv.device(name), in_use.get(name), in_pod) {
                (_, Some(claim), Some(f)) => (
                    Health::Unhealthy,
                    format!("{f}, in the pod of claim {claim}"),
                ),
                // A netdev moved into a pod is not visible here: its RDMA ports still are.
                (Some(d), Some(claim), None) if d.netdev.is_none() => match device_health(d) {
                    (Health::Healthy, _) => (Health::Healthy, format!("in use by claim {claim}")),
                    other => other,
                },
                (Some(d), _, _) => device_health(d),
                (None, Some(claim), None) => (
                    Health::Healthy,
                    format!("in use by claim {claim}, in its pod's network namespace"),
                ),
                (None, None, _) => (Health::Unhealthy, "gone from the node".into()),
            };
            DeviceHealthReport {
                pool: pool.to_string(),
                device: name.clone(),
                health,
                message,
                checked_at: now,
                valid_for: Some(valid_for),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::tests::published;
    use dranet_core::{Netdev, RdmaLink, RdmaPort};

    fn device(name: &str, operstate: &str, port: Option<&str>) -> NetworkDevice {
        NetworkDevice {
            name: name.into(),
            pci: None,
            netdev: Some(Netdev {
                name: name.into(),
                operstate: Some(operstate.into()),
                admin_up: Some(true),
                ..Default::default()
            }),
            rdma: port.map(|s| RdmaLink {
                name: "mlx5_0".into(),
                ports: vec![RdmaPort {
                    number: 1,
                    state: Some(s.into()),
                    phys_state: Some(
                        if s.contains("ACTIVE") {
                            "5: LinkUp"
                        } else {
                            "2: Polling"
                        }
                        .into(),
                    ),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }
    }

    #[test]
    fn link_and_port_state_decide_health() {
        assert_eq!(device_health(&device("a", "up", None)).0, Health::Healthy);
        let (h, m) = device_health(&device("a", "down", None));
        assert_eq!(h, Health::Unhealthy);
        assert_eq!(m, "link a is down");
        assert_eq!(
            device_health(&device("a", "up", Some("4: ACTIVE"))).0,
            Health::Healthy
        );
        let (h, m) = device_health(&device("a", "up", Some("1: DOWN")));
        assert_eq!(h, Health::Unhealthy);
        assert!(m.contains("mlx5_0 port 1 is 1: DOWN"), "{m}");
        // Administratively down on the host (dranet brings it up in the pod): healthy.
        let mut off = device("a", "down", None);
        if let Some(n) = off.netdev.as_mut() {
            n.admin_up = Some(false);
        }
        assert_eq!(device_health(&off).0, Health::Healthy);
    }

    #[test]
    fn a_device_that_goes_away_is_unhealthy_until_it_returns() {
        let mut known = BTreeSet::new();
        let present = Inventory {
            devices: vec![device("a", "up", None)],
            ..Default::default()
        };
        let listed = BTreeMap::from([("a".to_string(), published("a", None))]);
        let none = BTreeMap::new();
        let mut check = |inv: &Inventory, published: &BTreeMap<String, PublishedDevice>| {
            let r = health(
                "n",
                inv,
                published,
                &none,
                &BTreeMap::new(),
                &mut known,
                Duration::from_secs(60),
            );
            assert_eq!(r.len(), 1);
            assert_eq!(r[0].device, "a");
            (r[0].health, r[0].message.clone())
        };
        assert_eq!(check(&present, &listed).0, Health::Healthy);
        assert_eq!(
            check(&Inventory::default(), &BTreeMap::new()),
            (Health::Unhealthy, "gone from the node".to_string())
        );
        assert_eq!(check(&present, &listed).0, Health::Healthy);
    }

    #[test]
    fn a_netdev_down_in_its_pod_is_unhealthy_and_healthy_again_when_up() {
        let mut known = BTreeSet::new();
        let listed = BTreeMap::from([("a".to_string(), published("a", None))]);
        let in_use = BTreeMap::from([("a".to_string(), "ns/c".to_string())]);
        // The netdev is in the pod: the host's scan does not see it.
        let inv = Inventory::default();
        let mut check = |in_pods: BTreeMap<String, Option<Fault>>| {
            let r = health(
                "n",
                &inv,
                &listed,
                &in_use,
                &in_pods,
                &mut known,
                Duration::from_secs(60),
            );
            (r[0].health, r[0].message.clone())
        };
        let down = BTreeMap::from([("a".to_string(), Fault::of_link("net1", "down", Some(true)))]);
        assert_eq!(
            check(down),
            (
                Health::Unhealthy,
                "link net1 is down, in the pod of claim ns/c".to_string()
            )
        );
        let up = BTreeMap::from([("a".to_string(), None)]);
        assert_eq!(check(up).0, Health::Healthy);
        // Not readable (the pod is going away): what the claim says, as before.
        assert_eq!(check(BTreeMap::new()).0, Health::Healthy);
    }
}
