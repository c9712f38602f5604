//! Upstream dranet's end-to-end scenarios (`tests/e2e.bats` of kubernetes-sigs/dranet) that
//! are about what the pod's namespace gets, run against the real kernel in network namespaces
//! the tests make (root only; skipped with a message otherwise), with a veth in place of
//! upstream's dummy link (this kernel has none). Each test is named after upstream's, with
//! upstream's claim and upstream's expected outcome; each also checks that detach gives the host
//! everything back and leaves the pod as it was.

use crate::support::{Ns, can_run, podnet, req};
use dranet_core::{InterfaceConfig, NetworkConfig};
use dranet_testkit::upstream;

/// A host namespace with a veth `link` (its peer up too), up, nothing else.
fn host_with(tag: &str, link: &str) -> Ns {
    let h = Ns::new(tag);
    let peer = format!("{link}p");
    h.ip(&["link", "add", link, "type", "veth", "peer", "name", &peer]);
    h.ip(&["link", "set", &peer, "up"]);
    h.ip(&["link", "set", link, "up"]);
    h
}

/// Upstream's `resourceclaim.yaml`: name `eth99`, address 169.254.169.13/24.
fn static_ip_claim() -> NetworkConfig {
    NetworkConfig {
        interface: InterfaceConfig {
            name: "eth99".into(),
            addresses: vec!["169.254.169.13/24".into()],
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Attaches `link` of `h` to `p` with `cfg`, runs `check` on the pod, detaches, and checks both
/// namespaces are as they were.
async fn attach_check_detach(h: &Ns, p: &Ns, link: &str, cfg: &NetworkConfig, check: impl Fn()) {
    let journal = tempfile::tempdir().unwrap();
    let pn = podnet(h, journal.path());
    let (host_before, pod_before) = (h.dump(), p.dump());
    pn.attach(&req("claim-1", "sandbox-1", link, &p.path(), cfg))
        .await
        .unwrap();
    check();
    pn.detach("claim-1").await.unwrap();
    assert_eq!(h.dump(), host_before, "host after detach");
    assert_eq!(p.dump(), pod_before, "pod after detach");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_neighbor_entry_is_copied_to_pod_namespace() {
    if !can_run("permanent_neighbor_entry_is_copied_to_pod_namespace") {
        return;
    }
    let h = host_with("up-neigh-h", "dummy-neigh");
    let p = Ns::new("up-neigh-p");
    upstream::add_permanent_neighbours("dummy-neigh", |a| {
        h.ip(a);
    });
    attach_check_detach(&h, &p, "dummy-neigh", &static_ip_claim(), || {
        let neigh = p.ip(&["neigh", "show"]);
        for want in upstream::PERMANENT_NEIGHBOURS_IN_POD {
            assert!(neigh.contains(want), "{neigh}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_rules_and_routes_with_non_default_table_are_copied_to_pod_namespace() {
    if !can_run("route_rules_and_routes_with_non_default_table_are_copied_to_pod_namespace") {
        return;
    }
    let h = host_with("up-rules-h", "dummy-rules");
    let p = Ns::new("up-rules-p");
    upstream::add_table_100_and_rule_500("dummy-rules", |a| {
        h.ip(a);
    });
    attach_check_detach(&h, &p, "dummy-rules", &static_ip_claim(), || {
        let routes = p.ip(&["route", "show", "table", "100"]);
        assert!(
            routes.contains(upstream::TABLE_100_ROUTE_IN_POD),
            "{routes}"
        );
        let rules = p.ip(&["rule", "show"]);
        assert!(
            rules
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()
                    == ["500:", "from", "10.20.30.0/24", "lookup", "100"]),
            "{rules}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dummy_interface_with_ipv6_subnet_route() {
    if !can_run("dummy_interface_with_ipv6_subnet_route") {
        return;
    }
    let h = host_with("up-v6-h", "dummy-ipv6");
    let p = Ns::new("up-v6-p");
    upstream::add_ipv6_subnet("dummy-ipv6", |a| {
        h.ip(a);
    });
    // Upstream's `resourceclaim_ipv6_subnet.yaml` has no config: the host's address goes along.
    attach_check_detach(&h, &p, "dummy-ipv6", &NetworkConfig::default(), || {
        let routes = p.ip(&["-6", "route", "show"]);
        assert!(
            routes.contains("fd36::3:0:e:0:0/96 dev dummy-ipv6 proto kernel metric 256"),
            "{routes}"
        );
        assert!(!routes.contains("metric 1024"), "{routes}");
    })
    .await;
}

/// Upstream #318: a host route whose preferred source is an address the pod does not get (the
/// claim gave others) goes into the pod without it, rather than failing the attach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_routes_preferred_source_the_pod_lacks_is_cleared() {
    if !can_run("a_copied_routes_preferred_source_the_pod_lacks_is_cleared") {
        return;
    }
    let h = host_with("up-src-h", "src0");
    let p = Ns::new("up-src-p");
    h.ip(&["addr", "add", "169.254.169.20/24", "dev", "src0"]);
    h.ip(&[
        "route",
        "add",
        "10.10.20.0/24",
        "via",
        "169.254.169.1",
        "dev",
        "src0",
        "src",
        "169.254.169.20",
    ]);
    attach_check_detach(&h, &p, "src0", &static_ip_claim(), || {
        let routes = p.ip(&["route", "show"]);
        let line = routes
            .lines()
            .find(|l| l.starts_with("10.10.20.0/24"))
            .unwrap_or_else(|| panic!("not copied: {routes}"));
        assert!(line.contains("via 169.254.169.1 dev eth99"), "{line}");
        assert!(!line.contains("src"), "{line}");
    })
    .await;
}
