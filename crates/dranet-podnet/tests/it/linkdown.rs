//! A NIC whose carrier is down (a veth whose peer is down; a real port without a cable): the
//! kernel dumps its routes with `LINKDOWN`, a flag a route request may not carry. Attach and
//! detach must copy them as requests, in the pod and back on the host (root only; skipped with a
//! message otherwise).

use crate::support::{Ns, can_run, host_with_veth, pod_and_podnet, req};
use dranet_core::NetworkConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_without_carrier_goes_to_the_pod_and_back_with_its_routes() {
    if !can_run("a_link_without_carrier_goes_to_the_pod_and_back_with_its_routes") {
        return;
    }
    let h = host_with_veth("ld-h");
    // Upstream's "rules and routes of another table" scenario (`host_with_veth` routes 10.3/16
    // in table 100, with a rule), on a link without carrier.
    // What the host has with carrier: without it the kernel holds back state of its own (the
    // IPv6 multicast route comes with the carrier), so the comparison is made with it back.
    let host_before = h.dump();
    h.ip(&["link", "set", "v0p", "down"]);
    let routes = h.ip(&["route", "show", "table", "all", "dev", "v0"]);
    assert!(
        routes.contains("linkdown"),
        "the kernel marks the routes of a link without carrier: {routes}"
    );
    let (p, _journal, pn) = pod_and_podnet(&h, "ld-p");
    let cfg = NetworkConfig::default();
    let attached = pn
        .attach(&req("claim-ld-v0", "sandbox-ld", "v0", &p.path(), &cfg))
        .await
        .unwrap();
    let in_pod = p.ip(&["route", "show", "table", "100"]);
    assert!(
        in_pod.contains(&format!(
            "10.3.0.0/16 via 10.1.0.1 dev {}",
            attached.pod_name
        )),
        "the pod has the link's route of table 100: {in_pod}"
    );
    pn.detach("claim-ld-v0").await.unwrap();
    let routes = h.ip(&["route", "show", "table", "100"]);
    assert!(
        routes.contains("10.3.0.0/16 via 10.1.0.1 dev v0"),
        "the host has its route of table 100 back: {routes}"
    );
    h.ip(&["link", "set", "v0p", "up"]);
    let mut after = h.dump();
    for _ in 0..20 {
        if after == host_before {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        after = h.dump();
    }
    assert_eq!(after, host_before, "host state after detach, carrier back");
    assert!(pn.journal().entries().unwrap().is_empty());
}

/// The second half of the same defect: the host namespace's defaults changing while the pod ran
/// (here IPv6 disabled for new links) must not cost the NIC its state. The link enters the host
/// with the namespace's defaults, so its own recorded sysctls are put back first (before, its
/// IPv6 addresses were refused and lost); everything comes back, the entry goes, and the next pod
/// can have the NIC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_refuses_part_of_its_state_still_gets_its_link_back() {
    if !can_run("a_host_that_refuses_part_of_its_state_still_gets_its_link_back") {
        return;
    }
    let h = host_with_veth("rf-h");
    // The link's own settings, not the namespace's defaults: they must come back too.
    h.sysctl("net/ipv6/conf/v0/accept_ra", "0");
    let (p, _journal, pn) = pod_and_podnet(&h, "rf-p");
    let cfg = NetworkConfig::default();
    pn.attach(&req("claim-rf-v0", "sandbox-rf", "v0", &p.path(), &cfg))
        .await
        .unwrap();
    // A link entering the host namespace takes its `default` IPv6 settings.
    h.sysctl("net/ipv6/conf/default/disable_ipv6", "1");
    pn.detach("claim-rf-v0").await.unwrap();
    let addrs = h.ip(&["addr", "show", "dev", "v0"]);
    assert!(
        addrs.contains("10.1.0.2/24") && addrs.contains("fd00:1::2/64"),
        "the host has its link back with its IPv4 and IPv6 addresses: {addrs}"
    );
    assert_eq!(h.read_sysctl("net/ipv6/conf/v0/disable_ipv6"), "0");
    assert_eq!(h.read_sysctl("net/ipv6/conf/v0/accept_ra"), "0");
    let routes = h.ip(&["route", "show", "table", "all", "dev", "v0"]);
    assert!(
        routes.contains("10.2.0.0/16 via 10.1.0.1") && routes.contains("10.3.0.0/16 via 10.1.0.1"),
        "the host has its IPv4 routes back: {routes}"
    );
    assert!(
        pn.journal().entries().unwrap().is_empty(),
        "no entry is kept for state the host refuses"
    );
    // The NIC is free for the next pod.
    let p2 = Ns::new("rf-q");
    let again = pn
        .attach(&req("claim-rf2-v0", "sandbox-rf2", "v0", &p2.path(), &cfg))
        .await;
    assert!(again.is_ok(), "the next pod gets the NIC: {again:?}");
    pn.detach("claim-rf2-v0").await.unwrap();
}

/// A runtime that passed its NRI deadline tears the sandbox down without waiting for the
/// detach: the pod's namespace is unmounted (and its last process gone) while the link is still
/// in it. Held open since the attach, the namespace lives until the detach has given the link
/// back; without that, a veth dies with it and a NIC comes back unconfigured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_namespace_torn_down_before_the_detach_still_gives_the_link_back() {
    if !can_run("a_pod_namespace_torn_down_before_the_detach_still_gives_the_link_back") {
        return;
    }
    let h = host_with_veth("td-h");
    let host_before = h.dump();
    let (p, _journal, pn) = pod_and_podnet(&h, "td-p");
    let cfg = NetworkConfig::default();
    let path = p.path();
    pn.attach(&req("claim-td-v0", "sandbox-td", "v0", &path, &cfg))
        .await
        .unwrap();
    // The runtime's teardown: the namespace's mount goes, nothing of the pod holds it.
    drop(p);
    assert!(!path.exists(), "unmounted");
    pn.detach("claim-td-v0").await.unwrap();
    assert_eq!(h.dump(), host_before, "the host has v0 back as it was");
    assert!(pn.journal().entries().unwrap().is_empty());
}
