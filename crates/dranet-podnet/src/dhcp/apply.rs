//! [`apply`]: a lease made the device's configuration, as a claim's static one would be.

use std::net::{IpAddr, Ipv4Addr};

use dranet_core::interface_type::SOURCE_RULE_PRIORITY;
use dranet_core::{NetworkConfig, RouteConfig, RuleConfig};

use super::{Lease, LeaseRoute};
use crate::podnet::{ipv4_network, parse_cidr};

/// `config` with the lease's address, routes and MTU, and static addressing: what the pod's
/// interface is configured from, when the pod starts. What the claim gives wins: its `mtu`,
/// and its route to a destination the lease also routes (main table). Its DHCP setting is
/// cleared, as the lease is now the configuration.
///
/// The lease's default route never goes into the pod's main table: every pod has its network's
/// default route there already (the kernel would refuse a second one, and the pod's traffic
/// must not leave through this NIC). It goes, with the on-link route of the lease's subnet, into
/// `table`, the interface's source table in its pod ([`plan_source_tables`]; upstream's is
/// [`table_for_name`] of its name), looked up for traffic from the leased address
/// (`from <address> lookup <table>`, priority [`SOURCE_RULE_PRIORITY`]). A claim that wants the
/// NIC as the pod's default says so with a route of its own. Whether there is such a default is
/// [`uses_source_table`].
///
/// [`plan_source_tables`]: crate::plan_source_tables
/// [`table_for_name`]: dranet_core::interface_type::table_for_name
pub fn apply(config: &NetworkConfig, lease: &Lease, table: u32) -> NetworkConfig {
    let mut c = config.clone();
    c.interface.dhcp = None;
    c.interface.addressing = None;
    c.interface.addresses = vec![format!("{}/{}", lease.address, lease.prefix_len)];
    if c.interface.mtu.is_none() {
        c.interface.mtu = lease.mtu.map(i32::from);
    }
    for r in &lease.routes {
        if claim_routes(config, r) {
            continue;
        }
        if is_default(r) {
            source_default(&mut c, lease, r.gateway, table);
            continue;
        }
        let on_link = r.gateway.is_unspecified();
        c.routes.push(RouteConfig {
            destination: format!("{}/{}", r.destination, r.prefix_len),
            gateway: if on_link {
                String::new()
            } else {
                r.gateway.to_string()
            },
            // RT_SCOPE_LINK for a destination on the link, as the kernel would give it.
            scope: if on_link { 253 } else { 0 },
            ..RouteConfig::default()
        });
    }
    c
}

/// Whether [`apply`] puts the lease's default route in the interface's source table: the lease
/// has a router and the claim routes no default of its own in the main table.
pub fn uses_source_table(config: &NetworkConfig, lease: &Lease) -> bool {
    lease
        .routes
        .iter()
        .any(|r| is_default(r) && !claim_routes(config, r))
}

/// A default route via a router (not on-link).
fn is_default(r: &LeaseRoute) -> bool {
    r.prefix_len == 0 && !r.gateway.is_unspecified()
}

/// Whether the claim routes the lease route's destination in the main table itself.
fn claim_routes(config: &NetworkConfig, r: &LeaseRoute) -> bool {
    config
        .routes
        .iter()
        .any(|cr| in_main(cr) && ipv4_destination(cr) == Some((r.destination, r.prefix_len)))
}

/// The lease's default via `router`, in the source table, for traffic from the leased address.
fn source_default(c: &mut NetworkConfig, lease: &Lease, router: Ipv4Addr, table: u32) {
    let subnet = ipv4_network(lease.address, lease.prefix_len);
    c.routes.push(RouteConfig {
        destination: format!("{subnet}/{}", lease.prefix_len),
        scope: 253,
        table,
        ..RouteConfig::default()
    });
    c.routes.push(RouteConfig {
        destination: "0.0.0.0/0".into(),
        gateway: router.to_string(),
        table,
        ..RouteConfig::default()
    });
    c.rules.push(RuleConfig {
        priority: SOURCE_RULE_PRIORITY,
        source: format!("{}/32", lease.address),
        table,
        ..RuleConfig::default()
    });
}

fn in_main(r: &RouteConfig) -> bool {
    r.table == 0 || r.table == dranet_core::MAIN_TABLE
}

/// A claim route's IPv4 destination network; `None` for an IPv6 one. `default` (or none) is
/// the default route of the gateway's family.
fn ipv4_destination(r: &RouteConfig) -> Option<(Ipv4Addr, u8)> {
    if r.destination.is_empty() || r.destination == "default" {
        return match r.gateway.parse::<IpAddr>() {
            Ok(IpAddr::V6(_)) => None,
            _ => Some((Ipv4Addr::UNSPECIFIED, 0)),
        };
    }
    match parse_cidr(&r.destination).ok()? {
        (IpAddr::V4(ip), len) => Some((ipv4_network(ip, len), len)),
        (IpAddr::V6(_), _) => None,
    }
}

#[cfg(test)]
mod tests {
    use dranet_core::interface_type::table_for_name;

    use super::*;

    fn lease() -> Lease {
        let on_link = LeaseRoute {
            destination: Ipv4Addr::new(172, 16, 0, 0),
            prefix_len: 12,
            gateway: Ipv4Addr::UNSPECIFIED,
        };
        Lease {
            mtu: Some(1400),
            lease_secs: Some(3600),
            ..crate::dhcp::test_lease(vec![crate::dhcp::test_default_route(), on_link])
        }
    }

    #[test]
    fn the_lease_becomes_a_static_config() {
        let mut c = NetworkConfig::default();
        c.interface.dhcp = Some(true);
        let t = table_for_name("net1");
        assert!(uses_source_table(&c, &lease()));
        let got = apply(&c, &lease(), t);
        assert_eq!(got.interface.dhcp, None);
        assert_eq!(got.interface.addresses, vec!["10.9.0.50/24"]);
        assert_eq!(got.interface.mtu, Some(1400));
        // The default goes to the source table with its subnet, for traffic from the lease.
        let routes: Vec<(&str, &str, u32, u8)> = got
            .routes
            .iter()
            .map(|r| (r.destination.as_str(), r.gateway.as_str(), r.table, r.scope))
            .collect();
        assert_eq!(
            routes,
            vec![
                ("10.9.0.0/24", "", t, 253),
                ("0.0.0.0/0", "10.9.0.1", t, 0),
                ("172.16.0.0/12", "", 0, 253),
            ]
        );
        assert_eq!(got.rules.len(), 1);
        assert_eq!(
            (
                got.rules[0].priority,
                got.rules[0].source.as_str(),
                got.rules[0].table
            ),
            (32000, "10.9.0.50/32", t)
        );
        // The config the pod gets passes the checks a static one does.
        crate::podnet::check_config(&got).unwrap();
    }

    #[test]
    fn the_source_table_is_the_one_given() {
        let c = NetworkConfig::default();
        let got = apply(&c, &lease(), 1211);
        let tables: Vec<u32> = got.routes.iter().map(|r| r.table).collect();
        assert_eq!(tables, vec![1211, 1211, 0]);
        assert_eq!(got.rules[0].table, 1211);
        // No router in the lease: no source table.
        let mut l = lease();
        l.routes.retain(|r| r.prefix_len != 0);
        assert!(!uses_source_table(&c, &l));
        assert!(apply(&c, &l, 1211).rules.is_empty());
    }

    #[test]
    fn the_claims_values_win() {
        let mut c = NetworkConfig::default();
        c.interface.addressing = Some(dranet_core::Addressing::Dhcp);
        c.interface.mtu = Some(9000);
        c.routes.push(RouteConfig {
            destination: "default".into(),
            gateway: "10.9.0.254".into(),
            ..RouteConfig::default()
        });
        c.routes.push(RouteConfig {
            destination: "172.16.5.0/12".into(),
            gateway: "10.9.0.253".into(),
            table: 100,
            ..RouteConfig::default()
        });
        assert!(!uses_source_table(&c, &lease()));
        let got = apply(&c, &lease(), table_for_name("net1"));
        assert_eq!(got.interface.addressing, None);
        assert_eq!(got.interface.mtu, Some(9000));
        let gws: Vec<&str> = got.routes.iter().map(|r| r.gateway.as_str()).collect();
        // The claim's default stays, the lease's is dropped (no source table either); a route in
        // another table does not hide the lease's route of the main table.
        assert_eq!(gws, vec!["10.9.0.254", "10.9.0.253", ""]);
        assert!(got.rules.is_empty());
    }
}
