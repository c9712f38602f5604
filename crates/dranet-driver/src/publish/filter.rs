//! `--filter` and `--share-filter`: CEL over a device's attributes, and the default filter's
//! reasons.

use dranet_alloc::cel::{DeviceAttributes, DeviceView, Program, Quantity};
use dranet_core::DRIVER_NAME;
use dranet_core::attributes::{AttributeValue, names};
use dranet_core::slice::PublishedDevice;

/// The default `--filter`: an allowlist of what a pod may own without taking something the node
/// itself uses. A device with a PCI function (a NIC's physical function or an SR-IOV VF, with a
/// netdev or RDMA-only), an IPoIB interface, and an RDMA device without a netdev. Every other
/// virtual interface is left out unless the operator's `--filter` names it: an overlay
/// (`vxlan`, `geneve`, `wireguard`, `tun`) keeps its socket in the host's namespace, so a pod
/// holding `flannel.1` would receive the node's overlay traffic; bridges, bonds, veths,
/// `ifb`, `dummy`, `ipip`/`gre`, VLANs, macvlans and VRFs are pieces of the host's own network.
/// Discovery already leaves out the uplink and what is stacked on it or under it.
///
/// Every clause asks for an attribute that is there, never for one that is missing: a device is
/// published for its `pciAddress`, its `type` `ipoib` or its `ibOnly` (an RDMA link without a
/// netdev), so a device that lost an attribute (to a provider's or webhook's, say) is left out,
/// not let in (issue 47 M7: the old default kept any device without `type`). The attributes it
/// reads are among those the 32-attribute trim keeps first
/// ([`dranet_core::attributes::IDENTITY`]).
pub const DEFAULT_FILTER: &str = r#""pciAddress" in device.attributes["dra.net"] || ("type" in device.attributes["dra.net"] && device.attributes["dra.net"].type == "ipoib") || ("ibOnly" in device.attributes["dra.net"] && device.attributes["dra.net"].ibOnly == true)"#;

/// The link type the default `--filter` leaves `d` out for, `None` when it keeps it (or leaves
/// it out for no link type: a device without `type`, `pciAddress` and `ibOnly`): a virtual
/// interface without a PCI function that is not IPoIB.
pub fn default_filter_leaves_out(d: &PublishedDevice) -> Option<String> {
    let get = |k: &str| {
        d.attributes
            .get(&format!("{DRIVER_NAME}/{k}"))
            .or_else(|| d.attributes.get(k))
    };
    let kind = match get(names::TYPE) {
        Some(AttributeValue::String(t)) => t.clone(),
        _ => return None,
    };
    if get(names::PCI_ADDRESS).is_some()
        || kind == "ipoib"
        || matches!(get(names::IB_ONLY), Some(AttributeValue::Bool(true)))
    {
        return None;
    }
    Some(kind)
}

/// Why a filter could not decide on a device ([`keeps`]); it names nothing, the caller names
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::tests::published;

    #[test]
    fn default_filter_publishes_only_what_a_pod_may_own() {
        let f = Program::compile(DEFAULT_FILTER).unwrap();
        // Overlays and the host's own virtual pieces: left out, with the link type.
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
            assert_eq!(default_filter_leaves_out(&d).as_deref(), Some(kind));
        }
        let mut pf = published("eth1", Some("device"));
        pf.attributes.insert(
            format!("{DRIVER_NAME}/pciAddress"),
            AttributeValue::String("0000:01:00.0".into()),
        );
        // PCI functions and VFs (type "device"), IPoIB, and RDMA links without a netdev
        // (`ibOnly`): kept.
        let mut rdma_only = published("mlx5_3", None);
        rdma_only
            .attributes
            .remove(&format!("{DRIVER_NAME}/{}", names::IF_NAME));
        rdma_only.attributes.insert(
            format!("{DRIVER_NAME}/{}", names::IB_ONLY),
            AttributeValue::Bool(true),
        );
        for d in [pf, published("ib0", Some("ipoib")), rdma_only] {
            assert!(keeps(&f, &d).unwrap(), "{d:?}");
            assert_eq!(default_filter_leaves_out(&d), None);
        }
        // Issue 47 M7: a device without `type` (nor anything else the allowlist names) is left
        // out: the allowlist does not rest on an attribute's absence.
        let untyped = published("vx0", None);
        assert!(!keeps(&f, &untyped).unwrap());
        let mut not_ib_only = published("veth9", Some("veth"));
        not_ib_only.attributes.insert(
            format!("{DRIVER_NAME}/{}", names::IB_ONLY),
            AttributeValue::Bool(false),
        );
        assert!(!keeps(&f, &not_ib_only).unwrap());
        assert_eq!(
            default_filter_leaves_out(&not_ib_only).as_deref(),
            Some("veth")
        );
        // A physical-looking interface with no PCI function (a tun-like driver without a
        // link kind): not something the default knows a pod may own.
        assert!(!keeps(&f, &published("eth9", Some("device"))).unwrap());
    }
}
