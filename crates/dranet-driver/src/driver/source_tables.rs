//! A pod's source tables ([`dranet_podnet::plan_source_tables`]): planned when its sandbox
//! starts, over the interfaces of all its claims, as only then are they known together; each
//! DHCP lease is applied to its device's configuration then, with its table.

use std::borrow::Cow;

use dranet_core::interface_type::{SOURCE_TABLES, table_for_name};
use dranet_core::{Addressing, NetworkConfig};
use dranet_podnet::dhcp::{self, Lease};
use dranet_podnet::{PodInterface, plan_source_tables};

use crate::record::DeviceRecord;

/// What one interface of a pod is attached with.
#[derive(Debug)]
pub(super) struct PodConfig<'a> {
    /// Its configuration, with its DHCP lease applied.
    pub(super) config: Cow<'a, NetworkConfig>,
    /// Its source table, if it has one.
    pub(super) source_table: Option<u32>,
}

/// The configuration and source table of each of `devices` (a pod's devices with a network
/// interface), in their order. The error is the pod owner's reason.
pub(super) fn pod_configs<'a>(devices: &[&'a DeviceRecord]) -> Result<Vec<PodConfig<'a>>, String> {
    let interfaces: Vec<PodInterface<'_>> = devices
        .iter()
        .filter_map(|d| {
            Some(PodInterface {
                name: d.pod_ifname()?,
                config: &d.config,
                lease: lease_to_apply(d),
            })
        })
        .collect();
    let tables = plan_source_tables(&interfaces).ok_or_else(|| {
        format!(
            "its interfaces need more routing tables of their own (for source-based routing) \
             than {}..={} has left beside the tables its claims name",
            SOURCE_TABLES.start(),
            SOURCE_TABLES.end()
        )
    })?;
    Ok(devices
        .iter()
        .map(|d| {
            let name = d.pod_ifname();
            let source_table = name.and_then(|n| tables.get(n).copied());
            let config = match (lease_to_apply(d), name) {
                (Some(lease), Some(name)) => {
                    // A lease without a default route of its own names no table.
                    let table = source_table.unwrap_or_else(|| table_for_name(name));
                    Cow::Owned(dhcp::apply(&d.config, lease, table))
                }
                _ => Cow::Borrowed(&*d.config),
            };
            PodConfig {
                config,
                source_table,
            }
        })
        .collect())
}

/// The device's lease, unless its configuration holds it already: a claim prepared by a dranet
/// that applied leases at prepare has its record's configuration no longer DHCP.
fn lease_to_apply(d: &DeviceRecord) -> Option<&Lease> {
    d.dhcp
        .as_ref()
        .filter(|_| d.config.addressing() == Addressing::Dhcp)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    use dranet_core::{InterfaceConfig, InterfaceType};
    use dranet_podnet::dhcp::LeaseRoute;

    use super::*;

    fn lease() -> Lease {
        Lease {
            address: Ipv4Addr::new(10, 77, 0, 50),
            prefix_len: 24,
            server_id: Ipv4Addr::new(10, 77, 0, 1),
            server_mac: [9; 6],
            client_mac: [2; 6],
            routes: vec![LeaseRoute {
                destination: Ipv4Addr::UNSPECIFIED,
                prefix_len: 0,
                gateway: Ipv4Addr::new(10, 77, 0, 1),
            }],
            mtu: None,
            lease_secs: None,
            granted_at: 0,
        }
    }

    fn device(netdev: &str, config: NetworkConfig, dhcp: Option<Lease>) -> DeviceRecord {
        DeviceRecord {
            request: "nic".into(),
            pool: "node".into(),
            device: format!("dev-{netdev}"),
            share_id: None,
            netdev: Some(netdev.into()),
            config: Arc::new(config),
            rdma: None,
            char_devices: Vec::new(),
            dhcp,
            runtime_hook: None,
        }
    }

    /// A DHCP `eth1` (on host link `d0`) and a child `eth12`, which share upstream's table.
    fn pod(leased: NetworkConfig) -> [DeviceRecord; 2] {
        let child = NetworkConfig {
            interface: InterfaceConfig {
                name: "eth12".into(),
                r#type: Some(InterfaceType::Macvlan),
                addresses: vec!["10.88.0.12/24".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        [
            device("d0", leased, Some(lease())),
            device("c0", child, None),
        ]
    }

    fn dhcp_eth1() -> NetworkConfig {
        NetworkConfig {
            interface: InterfaceConfig {
                name: "eth1".into(),
                addressing: Some(Addressing::Dhcp),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn the_lease_is_applied_with_the_table_planned_for_the_pod() {
        let devices = pod(dhcp_eth1());
        let refs: Vec<&DeviceRecord> = devices.iter().collect();
        let got = pod_configs(&refs).unwrap();
        let up = table_for_name("eth1");
        assert_eq!(table_for_name("eth12"), up);
        assert_eq!(
            (got[0].source_table, got[1].source_table),
            (Some(up), Some(up + 1))
        );
        assert_eq!(*got[0].config, dhcp::apply(&dhcp_eth1(), &lease(), up));
        assert_eq!(got[0].config.rules[0].table, up);
        // The child's configuration is its record's; podnet makes its routing.
        assert!(matches!(got[1].config, Cow::Borrowed(_)));
    }

    #[test]
    fn a_record_whose_lease_is_applied_already_is_attached_as_it_is() {
        // An earlier dranet applied the lease at prepare, with upstream's table.
        let up = table_for_name("eth1");
        let applied = dhcp::apply(&dhcp_eth1(), &lease(), up);
        let devices = pod(applied.clone());
        let refs: Vec<&DeviceRecord> = devices.iter().collect();
        let got = pod_configs(&refs).unwrap();
        assert_eq!(*got[0].config, applied);
        // Its table is one its configuration names: the child takes the next.
        assert_eq!(got[1].source_table, Some(up + 1));
    }
}
