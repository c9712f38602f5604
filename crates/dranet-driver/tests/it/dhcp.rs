//! A claim with `addressing: DHCP` through the driver, against a real DHCP server (dnsmasq) in
//! network namespaces the tests make (root, iproute2 and dnsmasq; each test skips with a message
//! without them): the lease released at unprepare (even by a restarted driver, from the claim's
//! record), and the claims refused at prepare. The client itself is tested in dranet-podnet.

use std::path::Path;

use dranet_driver::NetworkDriver;
use dranet_kubeletplugin::{Driver, PreparedClaim};
use dranet_testkit::dnsmasq::{Dnsmasq, Net, SERVER, has};

use crate::support::{self, Ns, can_run, claims};

fn driver(host: &Ns, state: &Path) -> NetworkDriver {
    support::veth_driver(host, state, &["d0"])
}

/// Root, iproute2 and dnsmasq are needed; without them the test prints why and passes.
fn can_run_dhcp(test: &str) -> bool {
    can_run(test) && has(test, "dnsmasq", "dnsmasq-base")
}

/// The address of the server's one lease.
fn leased(server: &Dnsmasq) -> String {
    let leases = server.leases();
    leases
        .split_whitespace()
        .nth(2)
        .unwrap_or_else(|| panic!("{leases}"))
        .to_string()
}

/// Upstream's DHCP scenario through the driver: a claim with `dhcp: true` is prepared (the lease
/// taken on the host), the pod gets the leased address, the router as its default route and the
/// MTU; the claim's own route wins over the lease's. The pod stops, the daemon restarts (a new
/// driver from the checkpoint's record) and unprepare releases the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dhcp_claim_through_prepare_pod_and_unprepare_after_restart() {
    let t = "dhcp_claim_through_prepare_pod_and_unprepare_after_restart";
    if !can_run_dhcp(t) {
        return;
    }
    let net = Net::new("dhd");
    let pod_ns = Ns::new("dhd-p");
    let server = Dnsmasq::start(&net.srv);
    let state = tempfile::tempdir().unwrap();
    let claim = claims::nic(
        "dhcp-nic",
        "pa",
        "d0",
        serde_json::json!({
            "interface": {"name": "net1", "dhcp": true},
            "routes": [{"destination": "10.200.0.0/16", "gateway": SERVER}]
        }),
    );
    let d = driver(&net.host, state.path());
    let prepared = d.prepare_claim(&claim).await.unwrap();
    let addr = leased(&server);
    // Every real pod has its network's default route (the CNI's) before the NIC arrives.
    pod_ns.veth_with_default("eth0", "10.244.0.5/24", "10.244.0.1");
    let pod = support::pod("pa", &pod_ns);
    d.start_pod(&pod).await.unwrap();
    let shown = pod_ns.ip(&["addr", "show", "net1"]);
    assert!(shown.contains(&format!("inet {addr}/24")), "{shown}");
    assert!(shown.contains("mtu 1400"), "{shown}");
    let routes = pod_ns.ip(&["route", "show"]);
    assert!(
        routes.contains("default via 10.244.0.1 dev eth0") && !routes.contains("default via 10.77"),
        "the pod's default route stays its network's: {routes}"
    );
    assert!(
        routes.contains(&format!("10.200.0.0/16 via {SERVER} dev net1")),
        "{routes}"
    );
    // The router of the lease, for traffic from the leased address: net1's own table.
    let table = dranet_core::interface_type::table_for_name("net1").to_string();
    let own = pod_ns.ip(&["route", "show", "table", &table]);
    assert!(
        own.contains(&format!("default via {SERVER} dev net1")),
        "table {table}: {own}"
    );
    let rules = pod_ns.ip(&["rule", "show"]);
    assert!(
        rules.contains(&format!("32000:\tfrom {addr} lookup {table}")),
        "{rules}"
    );
    d.stop_pod(&pod).await;
    assert!(server.leases().contains(&addr), "held until unprepare");
    drop(d);

    // A restarted daemon: the kubelet plugin hands back the checkpoint's records.
    let d = driver(&net.host, state.path());
    Driver::restore_prepared(
        &d,
        vec![PreparedClaim {
            claim_ref: claim.claim_ref.clone(),
            prepared,
        }],
    )
    .await;
    d.unprepare_claim(&claim.claim_ref.uid).await.unwrap();
    server.wait_for_leases("lease released at unprepare", |l| !l.contains(&addr));
    server.wait_for("DHCPRELEASE logged", |log| log.contains("DHCPRELEASE(d0s)"));
}

/// A DHCP interface and a child in one pod whose names share upstream's routing table (`eth1`
/// and `eth12`), each with a default route of its own: the lease's, applied when the pod starts,
/// goes to upstream's table (`eth1` comes first in name order) and the child's to the next, so
/// the pod starts with both. Its stop and the claim's unprepare give the lease back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_and_a_child_whose_names_share_a_table_each_get_their_default() {
    let t = "a_lease_and_a_child_whose_names_share_a_table_each_get_their_default";
    if !can_run_dhcp(t) {
        return;
    }
    let net = Net::new("dht");
    // The child's parent, a second NIC, with the host's default route through it.
    net.host
        .veth_with_default("c0", "10.88.0.2/24", "10.88.0.1");
    let pod_ns = Ns::new("dht-p");
    let pod_before = pod_ns.dump();
    let server = Dnsmasq::start(&net.srv);
    let state = tempfile::tempdir().unwrap();
    // Sorted by device name, as the inventory is.
    let d = support::veth_driver(&net.host, state.path(), &["c0", "d0"]);
    let lease_claim = claims::nic(
        "leased",
        "pt",
        "d0",
        serde_json::json!({"interface": {"name": "eth1", "addressing": "DHCP"}}),
    );
    d.prepare_claim(&lease_claim).await.unwrap();
    d.prepare_claim(&claims::nic(
        "child",
        "pt",
        "c0",
        serde_json::json!({"interface": {"name": "eth12", "type": "Macvlan",
            "addresses": ["10.88.0.12/24"]}}),
    ))
    .await
    .unwrap();
    let addr = leased(&server);
    let pod = support::pod("pt", &pod_ns);
    d.start_pod(&pod).await.unwrap();

    let up = dranet_core::interface_type::table_for_name("eth1");
    assert_eq!(dranet_core::interface_type::table_for_name("eth12"), up);
    let rules = pod_ns.ip(&["rule", "show"]);
    for (name, from, via, table) in [
        ("eth1", addr.as_str(), SERVER, up),
        ("eth12", "10.88.0.12", "10.88.0.1", up + 1),
    ] {
        assert!(
            rules.contains(&format!("32000:\tfrom {from} lookup {table}")),
            "{name}: {rules}"
        );
        let routes = pod_ns.ip(&["route", "show", "table", &table.to_string()]);
        assert!(
            routes.contains(&format!("default via {via} dev {name}")),
            "{name}: table {table}: {routes}"
        );
    }
    d.stop_pod(&pod).await;
    assert_eq!(pod_ns.dump(), pod_before);
    d.unprepare_claim(&lease_claim.claim_ref.uid).await.unwrap();
    server.wait_for_leases("lease released at unprepare", |l| !l.contains(&addr));
}

/// What upstream refuses with DHCP is refused at prepare, naming the field, and a claim whose
/// DHCP gets no answer fails at prepare, saying so without the host's interface name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dhcp_claims_refused_at_prepare() {
    let t = "dhcp_claims_refused_at_prepare";
    if !can_run(t) {
        return;
    }
    let net = Net::new("dhv");
    let state = tempfile::tempdir().unwrap();
    let d = driver(&net.host, state.path());
    for (config, words) in [
        (
            serde_json::json!({"interface": {"dhcp": true, "addresses": ["10.0.0.2/24"]}}),
            &[
                "interface.addresses",
                "DHCP gives the interface its address",
            ][..],
        ),
        (
            serde_json::json!({"interface": {"type": "Macvlan", "addressing": "DHCP"}}),
            &["interface.addressing", "Passthrough only"],
        ),
    ] {
        let c = claims::nic("bad", "pa", "d0", config);
        let e = d.prepare_claim(&c).await.unwrap_err().user_message();
        for w in words {
            assert!(e.contains(w), "{w:?} not in {e}");
        }
    }
    // No server on the link: the claim fails after the deadline (the default's 20 s).
    let c = claims::nic(
        "silent",
        "pa",
        "d0",
        serde_json::json!({"interface": {"addressing": "DHCP"}}),
    );
    let e = d.prepare_claim(&c).await.unwrap_err().user_message();
    assert!(e.contains("no DHCP lease within 20 s"), "{e}");
    assert!(e.contains("device dev-d0"), "{e}");
    assert!(!e.split_whitespace().any(|w| w == "d0"), "host link in {e}");
}
