//! Upstream's claim API for sharing a NIC (`interface.type`, `interface.addressing`,
//! `ipvlan`), parsed and validated as a claim's author writes it.

use dranet_core::{
    Addressing, Error, InterfaceType, IpvlanConfig, IpvlanFlag, IpvlanMode, NetworkConfig, Result,
};

fn parse(j: &str) -> Result<NetworkConfig> {
    let c: NetworkConfig = serde_json::from_str(j).map_err(|e| Error::InvalidConfig {
        field: "json".into(),
        reason: e.to_string(),
    })?;
    c.validate()?;
    Ok(c)
}

fn refused(j: &str, field: &str, words: &str) {
    match parse(j) {
        Err(Error::InvalidConfig { field: f, reason }) => {
            assert_eq!(f, field, "{j}: {reason}");
            assert!(reason.contains(words), "{j}: {reason}");
        }
        other => panic!("{j}: {other:?}"),
    }
}

#[test]
fn upstream_claims_parse_with_their_defaults() {
    let c = parse(
        r#"{"interface":{"name":"net1","type":"IPVLAN","addresses":["10.0.0.5/24"],
            "mtu":1400,"ipvlan":{"mode":"L2","flag":"Bridge"}}}"#,
    )
    .unwrap();
    assert_eq!(c.interface_type(), InterfaceType::Ipvlan);
    assert_eq!(c.addressing(), Addressing::Static);
    assert_eq!(
        c.interface.ipvlan,
        Some(IpvlanConfig {
            mode: Some(IpvlanMode::L2),
            flag: Some(IpvlanFlag::Bridge)
        })
    );
    let c = parse(r#"{"interface":{"type":"IPVLAN","addressing":"Unnumbered"}}"#).unwrap();
    assert_eq!(c.addressing(), Addressing::Unnumbered);
    let c = parse(r#"{"interface":{"name":"eth1"}}"#).unwrap();
    assert_eq!(c.interface_type(), InterfaceType::Passthrough);
    let c = parse(r#"{"interface":{"dhcp":true}}"#).unwrap();
    assert_eq!(
        c.addressing(),
        Addressing::Dhcp,
        "deprecated dhcp still read"
    );
    let c = parse(r#"{"interface":{"type":"Macvlan","addresses":["10.0.0.6/24"]}}"#).unwrap();
    assert!(c.interface_type().is_child());
    // Round trip keeps the claim's spelling.
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["interface"]["type"], "Macvlan");
}

#[test]
fn unknown_values_name_the_accepted_ones() {
    for (j, want) in [
        (r#"{"interface":{"type":"ipvlan"}}"#, "IPVLAN"),
        (r#"{"interface":{"addressing":"slaac"}}"#, "SLAAC"),
        (
            r#"{"interface":{"type":"IPVLAN","ipvlan":{"mode":"L3"}}}"#,
            "L2",
        ),
        (
            r#"{"interface":{"type":"IPVLAN","ipvlan":{"flag":"Private"}}}"#,
            "Bridge",
        ),
        (
            r#"{"interface":{"type":"IPVLAN","ipvlan":{"mdoe":"L2"}}}"#,
            "mdoe",
        ),
    ] {
        let e = serde_json::from_str::<NetworkConfig>(j)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{j}: {e}");
    }
}

#[test]
fn the_sharing_rules_refuse_with_the_field() {
    refused(
        r#"{"interface":{"type":"IPVLAN"}}"#,
        "interface.addresses",
        "never gets the host's addresses",
    );
    refused(
        r#"{"interface":{"addressing":"Unnumbered"}}"#,
        "interface.addressing",
        "child interface only",
    );
    refused(
        r#"{"interface":{"type":"Macvlan","addressing":"Unnumbered","addresses":["10.0.0.1/24"]}}"#,
        "interface.addresses",
        "no addresses",
    );
    refused(
        r#"{"interface":{"type":"IPVLAN","addresses":["10.0.0.1/24"],"hardwareAddr":"02:00:00:00:00:01"}}"#,
        "interface.hardwareAddr",
        "type IPVLAN",
    );
    refused(
        r#"{"interface":{"ipvlan":{"mode":"L2"}}}"#,
        "interface.ipvlan",
        "type IPVLAN only",
    );
    // Upstream: dhcp and addresses are mutually exclusive.
    refused(
        r#"{"interface":{"dhcp":true,"addresses":["10.0.0.1/24"]}}"#,
        "interface.addresses",
        "DHCP gives the interface its address",
    );
    refused(
        r#"{"interface":{"addressing":"DHCP","addresses":["10.0.0.1/24"]}}"#,
        "interface.addresses",
        "remove addresses, or DHCP",
    );
    refused(
        r#"{"interface":{"type":"Macvlan","addressing":"DHCP"}}"#,
        "interface.addressing",
        "Passthrough only",
    );
    refused(
        r#"{"interface":{"dhcp":true,"addressing":"DHCP"}}"#,
        "interface.dhcp",
        "deprecated",
    );
    refused(
        r#"{"interface":{"type":"IPVLAN","addresses":["10.0.0.1/24"],"vrf":{"name":"v"}}}"#,
        "interface.vrf",
        "child",
    );
    refused(
        r#"{"interface":{"type":"IPVLAN","addresses":["10.0.0.1/24"]},"ethtool":{"features":{"tso":true}}}"#,
        "ethtool",
        "parent NIC",
    );
}
