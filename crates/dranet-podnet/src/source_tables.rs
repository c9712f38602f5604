//! Source tables in a pod: the routing table of an interface's own that holds its source-based
//! routing (a child's without claim routes, a DHCP lease's default route), looked up by the rule
//! `from <address>` at priority 32000. Upstream dranet takes [`table_for_name`] of the
//! interface's name, and common names collide there (`net15` and `net28`, `eth1` and `eth12`):
//! the second interface's default route would be refused (`EEXIST`) and its pod would fail.
//!
//! So no two interfaces of one pod share one. A driver that knows all of a pod's interfaces
//! plans their tables together ([`plan_source_tables`]: upstream's table where nothing collides,
//! the same answer whatever order the interfaces attach in), gives each child its table
//! ([`AttachRequest::source_table`]) and each lease its own ([`dhcp::apply`]); a child's attach
//! checks its table against the pod's namespace as the last line.
//!
//! [`AttachRequest::source_table`]: crate::AttachRequest::source_table
//! [`table_for_name`]: dranet_core::interface_type::table_for_name

use std::collections::{BTreeMap, BTreeSet};

use dranet_core::NetworkConfig;
use dranet_core::interface_type::source_tables;

use crate::dhcp::{self, Lease};
use crate::podnet::source_routed;

/// One interface a pod is to get, as [`plan_source_tables`] reads it.
#[derive(Debug, Clone, Copy)]
pub struct PodInterface<'a> {
    /// Its name in the pod.
    pub name: &'a str,
    /// Its configuration as the claim gives it (a DHCP lease not applied yet).
    pub config: &'a NetworkConfig,
    /// The DHCP lease taken for it, if any.
    pub lease: Option<&'a Lease>,
}

impl PodInterface<'_> {
    /// Whether attaching it gives it a source table: a child with addresses and no claim routes
    /// (upstream's source-based routing), or a lease with a default route the claim does not
    /// replace ([`dhcp::uses_source_table`]).
    pub fn uses_source_table(&self) -> bool {
        match self.lease {
            Some(lease) => dhcp::uses_source_table(self.config, lease),
            None => source_routed(self.config),
        }
    }
}

/// The source table of each interface of one pod that has one, by name in the pod (see the
/// module docs). Tables the pod's claims name themselves (a route's, a rule's, a VRF's) are never
/// chosen. `None` when [`SOURCE_TABLES`](dranet_core::interface_type::SOURCE_TABLES) has too few tables left, which takes a pod of hundreds
/// of interfaces.
pub fn plan_source_tables(interfaces: &[PodInterface<'_>]) -> Option<BTreeMap<String, u32>> {
    let mut named = BTreeSet::new();
    for i in interfaces {
        let c = i.config;
        named.extend(c.routes.iter().map(|r| r.table).filter(|t| *t != 0));
        named.extend(c.rules.iter().map(|r| r.table).filter(|t| *t != 0));
        named.extend(c.interface.vrf.as_ref().map(|v| v.table_id()));
    }
    source_tables(
        interfaces
            .iter()
            .filter(|i| i.uses_source_table())
            .map(|i| i.name),
        &named,
    )
}

#[cfg(test)]
mod tests {
    use dranet_core::Addressing;
    use dranet_core::interface_type::table_for_name;

    use dranet_core::{InterfaceConfig, InterfaceType, RouteConfig, VrfConfig};

    use super::*;

    fn child(name: &str) -> NetworkConfig {
        NetworkConfig {
            interface: InterfaceConfig {
                name: name.into(),
                r#type: Some(InterfaceType::Macvlan),
                addresses: vec!["10.9.0.11/24".into()],
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn lease(router: bool) -> Lease {
        let routes = if router {
            vec![dhcp::test_default_route()]
        } else {
            Vec::new()
        };
        dhcp::test_lease(routes)
    }

    #[test]
    fn a_child_and_a_lease_that_collide_get_two_tables() {
        let (c, d) = (child("eth12"), NetworkConfig::default());
        let l = lease(true);
        let pod = [
            PodInterface {
                name: "eth12",
                config: &c,
                lease: None,
            },
            PodInterface {
                name: "eth1",
                config: &d,
                lease: Some(&l),
            },
        ];
        let t = plan_source_tables(&pod).unwrap();
        let up = table_for_name("eth1");
        assert_eq!(table_for_name("eth12"), up);
        assert_eq!((t["eth1"], t["eth12"]), (up, up + 1));
    }

    #[test]
    fn only_interfaces_with_a_source_table_count() {
        let up = table_for_name("net15");
        let mut routed = child("net28");
        routed.routes.push(RouteConfig {
            destination: "10.50.0.0/16".into(),
            gateway: "10.9.0.1".into(),
            ..Default::default()
        });
        let mut unnumbered = child("net28");
        unnumbered.interface.addresses.clear();
        unnumbered.interface.addressing = Some(Addressing::Unnumbered);
        let (c, none, passthrough) = (child("net15"), lease(false), NetworkConfig::default());
        // A child with claim routes, an unnumbered one, a lease without a router and a static
        // passthrough have no source table: net15 keeps upstream's.
        for (config, lease) in [
            (&routed, None),
            (&unnumbered, None),
            (&passthrough, Some(&none)),
            (&passthrough, None),
        ] {
            let pod = [
                PodInterface {
                    name: "net28",
                    config,
                    lease,
                },
                PodInterface {
                    name: "net15",
                    config: &c,
                    lease: None,
                },
            ];
            let t = plan_source_tables(&pod).unwrap();
            assert_eq!(t.len(), 1, "{config:?}");
            assert_eq!(t["net15"], up);
        }
    }

    #[test]
    fn tables_the_claims_name_are_never_chosen() {
        let up = table_for_name("net1");
        let c = child("net1");
        let mut vrf = NetworkConfig::default();
        vrf.interface.vrf = Some(VrfConfig {
            name: "blue".into(),
            table: Some(up),
        });
        let mut routes = NetworkConfig::default();
        routes.routes.push(RouteConfig {
            destination: "10.0.0.0/8".into(),
            gateway: "10.9.0.1".into(),
            table: up + 1,
            ..Default::default()
        });
        let pod = [
            PodInterface {
                name: "net1",
                config: &c,
                lease: None,
            },
            PodInterface {
                name: "eth1",
                config: &vrf,
                lease: None,
            },
            PodInterface {
                name: "eth2",
                config: &routes,
                lease: None,
            },
        ];
        assert_eq!(plan_source_tables(&pod).unwrap()["net1"], up + 2);
    }
}
