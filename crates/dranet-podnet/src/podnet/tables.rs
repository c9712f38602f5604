//! A child's source table at attach: the table [`crate::plan_source_tables`] planned for it (else
//! upstream's), checked against the pod's namespace as the last line: a table a route or rule of
//! the pod uses already (the pod's own, or one copied from the host with a passthrough NIC) is
//! passed over for the next free one. The table chosen is in the rule journaled with the child
//! (or the link), which is what detach removes.

use std::collections::BTreeSet;
use std::io;

use dranet_core::interface_type::{SOURCE_TABLES, free_source_table, table_for_name};
use dranet_core::{Addressing, NetworkConfig};
use rtnetlink::packet_route::RouteNetlinkMessage;

use super::state::{FAMILIES, route_table, routes_and_rules, rule_table};
use super::{StepResult, at};
use crate::netns::Rtnl;

/// Whether a child's attach gives it upstream's source-based routing: a child type with
/// addresses and no claim routes.
pub(crate) fn source_routed(c: &NetworkConfig) -> bool {
    c.interface_type().is_child()
        && c.routes.is_empty()
        && c.addressing() != Addressing::Unnumbered
        && !c.interface.addresses.is_empty()
}

/// The source table of child `name` in the pod: `planned` (else upstream's), or, when a route or
/// rule of the pod uses that table already, the next free one. The caller holds the pod's lock
/// until the child's routes and rules are in.
pub(super) async fn choose(podr: &Rtnl, name: &str, planned: Option<u32>) -> StepResult<u32> {
    let first = planned.unwrap_or_else(|| table_for_name(name));
    let in_use = in_use(podr)
        .await
        .map_err(at("read the pod's routing tables"))?;
    let table = free_source_table(first, |t| in_use.contains(&t)).ok_or_else(|| {
        at(format!("choose a routing table for {name}"))(io::Error::other(format!(
            "every table of {}..={} is in use in the pod",
            SOURCE_TABLES.start(),
            SOURCE_TABLES.end()
        )))
    })?;
    if table != first {
        tracing::info!(
            child = name,
            table,
            in_use = first,
            "the pod uses the child's routing table already; its source routing takes the next free one"
        );
    }
    Ok(table)
}

/// The tables of the pod's namespace that hold a route or that a rule looks up, both families.
async fn in_use(podr: &Rtnl) -> io::Result<BTreeSet<u32>> {
    let mut tables = BTreeSet::new();
    for family in FAMILIES {
        let (routes, rules) = routes_and_rules(podr, family).await?;
        for m in routes.iter().chain(&rules) {
            match m {
                RouteNetlinkMessage::NewRoute(r) => tables.insert(route_table(r)),
                RouteNetlinkMessage::NewRule(r) => tables.insert(rule_table(r)),
                _ => false,
            };
        }
    }
    Ok(tables)
}
