//! What the daemon publishes and how healthy it says each device is: pure functions of the
//! scan, the `--filter` expression and the devices in use.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use dranet_alloc::cel::{DeviceAttributes, DeviceView, Program, Quantity};
use dranet_core::attributes::{AttributeValue, names};
use dranet_core::slice::PublishedDevice;
use dranet_core::{DRIVER_NAME, Inventory, NetworkDevice};
use dranet_kubeletplugin::{DeviceHealthReport, Health};

/// The default `--filter`: an allowlist of what a pod may own without taking something the node
/// itself uses. A device with a PCI function (a NIC's physical function or an SR-IOV VF, with a
/// netdev or RDMA-only), an IPoIB interface, and an RDMA device without a netdev. Every other
/// virtual interface is left out unless the operator's `--filter` names it: an overlay
/// (`vxlan`, `geneve`, `wireguard`, `tun`) keeps its socket in the host's namespace, so a pod
/// holding `flannel.1` would receive the node's overlay traffic; bridges, bonds, veths,
/// `ifb`, `dummy`, `ipip`/`gre`, VLANs, macvlans and VRFs are pieces of the host's own network.
/// Discovery already leaves out the uplink and what is stacked on it or under it.
pub const DEFAULT_FILTER: &str = r#"!("type" in device.attributes["dra.net"]) || "pciAddress" in device.attributes["dra.net"] || device.attributes["dra.net"].type == "ipoib""#;

/// Why the default `--filter` leaves out a device: for `dranet inventory --show-excluded` and the
/// daemon's log. `None` when the default keeps it.
pub fn default_filter_reason(d: &PublishedDevice) -> Option<String> {
    let get = |k: &str| {
        d.attributes
            .get(&format!("{DRIVER_NAME}/{k}"))
            .or_else(|| d.attributes.get(k))
    };
    let kind = match get(names::TYPE) {
        Some(AttributeValue::String(t)) => t.clone(),
        _ => return None,
    };
    if get(names::PCI_ADDRESS).is_some() || kind == "ipoib" {
        return None;
    }
    Some(format!(
        "a virtual interface of type {kind}, without a PCI function: the default --filter \
         publishes PCI functions, SR-IOV VFs, IPoIB and RDMA-only devices; name type {kind} in \
         --filter to publish it"
    ))
}

/// Why `--filter` could not decide on a device ([`keeps`]); it names nothing, the caller names
/// the device.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// The device's attributes cannot be shown to the expression (two names for one attribute).
    #[error(transparent)]
    Attributes(dranet_alloc::cel::AttributesError),
    /// The expression failed on the device.
    #[error(transparent)]
    Eval(dranet_alloc::cel::CelError),
}

/// Whether `filter` keeps `d`.
pub fn keeps(filter: &Program, d: &PublishedDevice) -> Result<bool, FilterError> {
    let attrs = d.attributes.iter().map(|(k, v)| (k.as_str(), v.clone()));
    let none: [(&str, Quantity); 0] = [];
    let attributes =
        DeviceAttributes::new(DRIVER_NAME, attrs, none).map_err(FilterError::Attributes)?;
    let view = DeviceView {
        driver: DRIVER_NAME,
        attributes: &attributes,
        allow_multiple_allocations: false,
    };
    filter.matches(&view).map_err(FilterError::Eval)
}

/// The devices to publish, by name, and a warning for each device the filter could not decide
/// (it is left out).
///
/// A device in use by a prepared claim is published as it was before (`previous`), even when
/// the scan now sees it differently or not at all: its netdev is in a pod's namespace, out of the
/// host's sight, and the scheduler must keep seeing the device it allocated.
pub fn select(
    scanned: Vec<PublishedDevice>,
    filter: Option<&Program>,
    in_use: &BTreeMap<String, String>,
    previous: &BTreeMap<String, PublishedDevice>,
) -> (BTreeMap<String, PublishedDevice>, Vec<String>) {
    let mut out = BTreeMap::new();
    let mut warnings = Vec::new();
    for d in scanned {
        if in_use.contains_key(&d.name)
            && let Some(p) = previous.get(&d.name)
        {
            out.insert(d.name.clone(), p.clone());
            continue;
        }
        let keep = match filter {
            None => true,
            Some(f) => match keeps(f, &d) {
                Ok(k) => k,
                Err(e) => {
                    warnings.push(format!(
                        "device {} is not published: --filter failed on it: {e}",
                        d.name
                    ));
                    false
                }
            },
        };
        if keep {
            out.insert(d.name.clone(), d);
        }
    }
    for name in in_use.keys() {
        if !out.contains_key(name)
            && let Some(p) = previous.get(name)
        {
            out.insert(name.clone(), p.clone());
        }
    }
    (out, warnings)
}

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

/// Operational states that mean the link carries no traffic.
const LINK_DOWN: [&str; 4] = ["down", "lowerlayerdown", "notpresent", "dormant"];

/// The health of one scanned device: its netdev's operational state, then its RDMA ports.
pub fn device_health(d: &NetworkDevice) -> (Health, String) {
    if let Some(n) = &d.netdev
        && let Some(st) = n.operstate.as_deref()
        && LINK_DOWN.contains(&st)
    {
        return (Health::Unhealthy, format!("link {} is {st}", n.name));
    }
    if let Some(r) = &d.rdma {
        let states: Vec<(u32, &str)> = r
            .ports
            .iter()
            .filter_map(|p| p.state.as_deref().map(|s| (p.number, s)))
            .collect();
        if !states.is_empty() && !states.iter().any(|(_, s)| s.contains("ACTIVE")) {
            let (port, st) = states[0];
            return (
                Health::Unhealthy,
                format!("RDMA link {} port {port} is {st}", r.name),
            );
        }
    }
    (Health::Healthy, "link up".into())
}

/// Health reports for the kubelet: every published device, and every device published before
/// that is gone now (unhealthy until it returns). `known` remembers what was ever published.
pub fn health(
    pool: &str,
    inv: &Inventory,
    published: &BTreeMap<String, PublishedDevice>,
    in_use: &BTreeMap<String, String>,
    known: &mut BTreeSet<String>,
    valid_for: Duration,
) -> Vec<DeviceHealthReport> {
    let now = SystemTime::now();
    known.extend(published.keys().cloned());
    known
        .iter()
        .map(|name| {
            let (health, message) = match (inv.device(name), in_use.get(name)) {
                // A netdev moved into a pod is not visible here: its RDMA ports still are.
                (Some(d), Some(claim)) if d.netdev.is_none() => match device_health(d) {
                    (Health::Healthy, _) => (Health::Healthy, format!("in use by claim {claim}")),
                    other => other,
                },
                (Some(d), _) => device_health(d),
                (None, Some(claim)) => (
                    Health::Healthy,
                    format!("in use by claim {claim}, in its pod's network namespace"),
                ),
                (None, None) => (Health::Unhealthy, "gone from the node".into()),
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
    use dranet_core::{Netdev, RdmaLink, RdmaPort};

    fn published(name: &str, kind: Option<&str>) -> PublishedDevice {
        let mut attributes = dranet_core::attributes::Attributes::new();
        attributes.insert(
            format!("dra.net/{}", names::IF_NAME),
            AttributeValue::String(name.into()),
        );
        if let Some(k) = kind {
            attributes.insert(
                format!("dra.net/{}", names::TYPE),
                AttributeValue::String(k.into()),
            );
        }
        PublishedDevice {
            name: name.into(),
            attributes,
        }
    }

    #[test]
    fn default_filter_publishes_only_what_a_pod_may_own() {
        let f = Program::compile(DEFAULT_FILTER).unwrap();
        // Overlays and the host's own virtual pieces: left out, with the reason.
        for (name, kind) in [
            ("veth0", "veth"),
            ("cni0", "bridge"),
            ("ifb0", "ifb"),
            ("bond0", "bond"),
            ("team0", "team"),
            ("ovs-system", "openvswitch"),
            ("flannel.1", "vxlan"),
            ("tun0", "tun"),
            ("tailscale0", "tun"),
            ("wg0", "wireguard"),
            ("gnv0", "geneve"),
            ("dummy0", "dummy"),
            ("tunl0", "ipip"),
            ("gre1", "gre"),
            ("eth0.100", "vlan"),
            ("ipvl0", "ipvlan"),
            ("mv0", "macvlan"),
            ("vrf-blue", "vrf"),
        ] {
            let d = published(name, Some(kind));
            assert!(!keeps(&f, &d).unwrap(), "{kind}");
            let why = default_filter_reason(&d).unwrap();
            assert!(why.contains(&format!("type {kind}")), "{why}");
        }
        // PCI functions and VFs (type "device"), IPoIB, and no type at all (RDMA-only): kept.
        let mut pf = published("eth1", Some("device"));
        pf.attributes.insert(
            format!("{DRIVER_NAME}/pciAddress"),
            AttributeValue::String("0000:01:00.0".into()),
        );
        for d in [pf, published("ib0", Some("ipoib")), published("ib", None)] {
            assert!(keeps(&f, &d).unwrap(), "{d:?}");
            assert_eq!(default_filter_reason(&d), None);
        }
        // A physical-looking interface with no PCI function (a tun-like driver without a
        // link kind): not something the default knows a pod may own.
        assert!(!keeps(&f, &published("eth9", Some("device"))).unwrap());
    }

    #[test]
    fn a_filter_error_leaves_the_device_out_and_names_it() {
        let f = Program::compile(r#"device.attributes["dra.net"].mtu > 1000"#).unwrap();
        let (out, warnings) = select(
            vec![published("eth1", None)],
            Some(&f),
            &BTreeMap::new(),
            &BTreeMap::new(),
        );
        assert!(out.is_empty());
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("device eth1"), "{warnings:?}");
    }

    #[test]
    fn devices_in_use_keep_their_description() {
        let before = published("v0", Some("veth"));
        let previous = BTreeMap::from([("v0".to_string(), before.clone())]);
        let in_use = BTreeMap::from([("v0".to_string(), "ns/c".to_string())]);
        // The netdev moved into the pod: the scan no longer sees it, and the default filter
        // would drop a veth; it stays as it was.
        let f = Program::compile(DEFAULT_FILTER).unwrap();
        let (out, _) = select(Vec::new(), Some(&f), &in_use, &previous);
        assert_eq!(out.get("v0"), Some(&before));
        // Released: gone from the publication.
        let (out, _) = select(Vec::new(), Some(&f), &BTreeMap::new(), &previous);
        assert!(out.is_empty());
    }

    fn device(name: &str, operstate: &str, port: Option<&str>) -> NetworkDevice {
        NetworkDevice {
            name: name.into(),
            pci: None,
            netdev: Some(Netdev {
                name: name.into(),
                operstate: Some(operstate.into()),
                ..Default::default()
            }),
            rdma: port.map(|s| RdmaLink {
                name: "mlx5_0".into(),
                ports: vec![RdmaPort {
                    number: 1,
                    state: Some(s.into()),
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
}
