//! How a device reaches the pod (`interface.type`) and how its child gets addresses
//! (`interface.addressing`): upstream dranet's claim API for sharing one NIC between pods.
//!
//! `Passthrough` (the default) moves the NIC itself into the pod. `IPVLAN` leaves the NIC on the
//! host and creates a child of it directly in the pod's namespace, so several pods can each have
//! one. `Macvlan` is a dranet-rs addition, not upstream's: the same child as a macvlan (bridge
//! mode, a MAC of its own), for kernels built without ipvlan and for L2 uses that want a distinct
//! MAC per pod. A claim that says `Macvlan` is refused by upstream dranet.
//!
//! The rules, checked by [`NetworkConfig::validate`](crate::NetworkConfig::validate):
//! - a child never gets the host's addresses: it needs `interface.addresses` or
//!   `addressing: Unnumbered` (up, with no address);
//! - `Unnumbered` is for children only, and excludes addresses;
//! - a child cannot take `hardwareAddr` (an IPVLAN child has its parent's MAC), a VRF or
//!   ethtool settings (they belong to the parent NIC, shared by every pod);
//! - `ipvlan` is for `type: IPVLAN` only; its mode is `L2` and its flag `Bridge`;
//! - the deprecated `dhcp: true` reads as `addressing: DHCP`; setting both is refused;
//! - `DHCP` is for `Passthrough` only, and excludes addresses (the lease gives the address).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// How the allocated device is presented to the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum InterfaceType {
    /// The device itself moves into the pod's namespace.
    #[default]
    Passthrough,
    /// An ipvlan child of the device is created in the pod; the device stays on the host.
    #[serde(rename = "IPVLAN")]
    Ipvlan,
    /// A macvlan child (bridge mode) of the device is created in the pod (dranet-rs only).
    Macvlan,
}

impl InterfaceType {
    /// Whether the pod gets a child of the device rather than the device.
    pub fn is_child(self) -> bool {
        self != InterfaceType::Passthrough
    }

    /// The claim's spelling (`IPVLAN`).
    pub fn as_str(self) -> &'static str {
        match self {
            InterfaceType::Passthrough => "Passthrough",
            InterfaceType::Ipvlan => "IPVLAN",
            InterfaceType::Macvlan => "Macvlan",
        }
    }
}

/// How the pod's interface gets its IP configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Addressing {
    /// The claim's (or the cloud profile's) addresses.
    #[default]
    Static,
    /// DHCP.
    #[serde(rename = "DHCP")]
    Dhcp,
    /// Brought up with no address (children only).
    Unnumbered,
    /// IPv6 stateless autoconfiguration from the network's router advertisements: the attach
    /// waits (bounded) for a global address, and gives the pod's NICs back to the host when
    /// none comes.
    #[serde(rename = "SLAAC")]
    Slaac,
}

/// Settings of an IPVLAN child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IpvlanConfig {
    /// The ipvlan mode (default `L2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<IpvlanMode>,
    /// The ipvlan flag (default `Bridge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flag: Option<IpvlanFlag>,
}

/// The ipvlan mode; upstream defines `L2` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum IpvlanMode {
    /// Children answer ARP/ND themselves.
    #[default]
    L2,
}

/// The ipvlan flag; upstream defines `Bridge` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum IpvlanFlag {
    /// Children of one parent reach each other directly.
    #[default]
    Bridge,
}

/// The routing table upstream derives from a name: FNV-1a of it, modulo 1000, plus 1000 (so
/// always in [`SOURCE_TABLES`]). A VRF's table when the claim gives none (of the VRF's name), so
/// the same claim gets the same table under either driver; and where an interface's source
/// table starts ([`source_tables`]).
pub fn table_for_name(name: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h % 1000 + 1000
}

/// The tables [`table_for_name`] gives, where an interface's *source table* is chosen: the table
/// of its own that holds its source-based routing (a child's without claim routes, a DHCP
/// lease's default route), looked up by the rule `from <address>` at [`SOURCE_RULE_PRIORITY`].
pub const SOURCE_TABLES: std::ops::RangeInclusive<u32> = 1000..=1999;

/// The first table not `taken`: `first` itself, else the next of [`SOURCE_TABLES`] after it,
/// wrapping round to the range's start (from the start when `first` is outside the range).
/// `None` when every one is taken.
pub fn free_source_table(first: u32, taken: impl Fn(u32) -> bool) -> Option<u32> {
    if !taken(first) {
        return Some(first);
    }
    let (lo, hi) = (*SOURCE_TABLES.start(), *SOURCE_TABLES.end());
    let start = if SOURCE_TABLES.contains(&first) {
        first + 1
    } else {
        lo
    };
    (start..=hi).chain(lo..start).find(|t| !taken(*t))
}

/// The source tables of the interfaces `names` of one pod, none of them in `taken` (tables
/// the pod's claims name for themselves) and no two alike. An interface keeps upstream's
/// [`table_for_name`] unless `taken` or another of `names` has it, so a pod without collisions
/// gets exactly upstream's tables. Names that share a table are settled in byte order of their
/// names (the same answer whatever order they come in): the first keeps it, each other gets the
/// next free one ([`free_source_table`]), never one another name keeps. `None` when the range
/// has too few free tables.
pub fn source_tables<'a>(
    names: impl IntoIterator<Item = &'a str>,
    taken: &BTreeSet<u32>,
) -> Option<BTreeMap<String, u32>> {
    let names: BTreeSet<&str> = names.into_iter().collect();
    let mut chosen: BTreeMap<String, u32> = BTreeMap::new();
    let mut used: BTreeSet<u32> = taken.clone();
    let mut moved = Vec::new();
    // Upstream's table first for every name that can keep it, so that a name moved on by a
    // collision never takes the table of a name that has none.
    for name in &names {
        let t = table_for_name(name);
        if used.insert(t) {
            chosen.insert((*name).to_string(), t);
        } else {
            moved.push(*name);
        }
    }
    for name in moved {
        let t = free_source_table(table_for_name(name), |t| used.contains(&t))?;
        used.insert(t);
        chosen.insert(name.to_string(), t);
    }
    Some(chosen)
}

/// The priority of the `from <address>` rule a child gets when the claim has no routes.
pub const SOURCE_RULE_PRIORITY: u32 = 32000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_upstreams_fnv1a() {
        // FNV-1a 32 of "" is the offset basis 2166136261; of "a" 0xe40c292c = 3826002220.
        assert_eq!(table_for_name(""), 2_166_136_261 % 1000 + 1000);
        assert_eq!(table_for_name("a"), 3_826_002_220 % 1000 + 1000);
        assert!(SOURCE_TABLES.contains(&table_for_name("net1")));
    }

    #[test]
    fn colliding_names_get_distinct_tables_others_keep_upstreams() {
        // Two pairs of common names upstream's hash puts in one table.
        assert_eq!(table_for_name("net15"), table_for_name("net28"));
        assert_eq!(table_for_name("eth1"), table_for_name("eth12"));
        let none = BTreeSet::new();
        let t = source_tables(["net28", "net15", "net1"], &none).unwrap();
        let up = table_for_name("net15");
        // Byte order settles it, whatever order the names came in.
        assert_eq!(t["net15"], up);
        assert_eq!(t["net28"], up + 1);
        assert_eq!(t["net1"], table_for_name("net1"));
        assert_eq!(t, source_tables(["net1", "net15", "net28"], &none).unwrap());
        // A name without a collision keeps upstream's table even where a moved name would
        // have probed into it.
        let next = (0..100_000)
            .map(|i| format!("n{i}"))
            .find(|n| table_for_name(n) == up + 1)
            .unwrap();
        let t = source_tables(["net15", "net28", next.as_str()], &none).unwrap();
        assert_eq!(t[next.as_str()], up + 1);
        assert_eq!(t["net28"], up + 2);
        // A table the pod's claims name is never chosen.
        let taken = BTreeSet::from([table_for_name("eth1")]);
        let t = source_tables(["eth1", "eth12"], &taken).unwrap();
        assert_eq!(t["eth1"], table_for_name("eth1") + 1);
        assert_eq!(t["eth12"], table_for_name("eth1") + 2);
    }

    #[test]
    fn free_tables_wrap_within_the_range_and_run_out() {
        assert_eq!(free_source_table(1999, |t| t == 1999), Some(1000));
        assert_eq!(free_source_table(1500, |t| t != 1499), Some(1499));
        // A table outside the range the caller chose is kept when free, else the range is searched.
        assert_eq!(free_source_table(5000, |_| false), Some(5000));
        assert_eq!(free_source_table(5000, |t| t == 5000), Some(1000));
        assert_eq!(free_source_table(1200, |_| true), None);
        let all: BTreeSet<u32> = SOURCE_TABLES.collect();
        assert_eq!(source_tables(["net1"], &all), None);
    }
}
