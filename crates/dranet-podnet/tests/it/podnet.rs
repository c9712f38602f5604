//! Attach and detach in network namespaces the tests create (root only; skipped with a message
//! otherwise). The host namespace's full dump (links, addresses, routes of all tables, rules,
//! permanent neighbours) must be identical before the attach and after the detach, after every
//! injected failure, and after a crash and recovery.

use std::sync::Arc;

use dranet_core::{
    EthtoolConfig, InterfaceConfig, NeighborConfig, NetworkConfig, RouteConfig, RuleConfig,
};
use dranet_podnet::PodNet;
use dranet_podnet::netns::Netns;

use crate::support::{
    self, Ns, bpf, can_run, failing_at, host_with_macvlan, host_with_veth, pod_and_podnet, podnet,
    req,
};

fn full_config() -> NetworkConfig {
    NetworkConfig {
        interface: InterfaceConfig {
            name: "net1".into(),
            addresses: vec!["192.168.5.2/24".into(), "fd00:5::2/64".into()],
            mtu: Some(1300),
            hardware_addr: Some("02:00:00:00:00:aa".into()),
            arp_ignore: Some(1),
            arp_announce: Some(2),
            accept_ra: Some(2),
            ..Default::default()
        },
        routes: vec![
            RouteConfig {
                destination: "192.168.6.0/24".into(),
                gateway: "192.168.5.1".into(),
                ..Default::default()
            },
            RouteConfig {
                destination: "192.168.7.0/24".into(),
                gateway: "192.168.5.1".into(),
                table: 200,
                ..Default::default()
            },
            RouteConfig {
                destination: "fd00:6::/64".into(),
                gateway: "fd00:5::1".into(),
                ..Default::default()
            },
        ],
        rules: vec![RuleConfig {
            priority: 200,
            source: "192.168.5.2/32".into(),
            table: 200,
            ..Default::default()
        }],
        neighbors: vec![NeighborConfig {
            destination: "192.168.5.9".into(),
            hardware_addr: "02:00:00:00:00:99".into(),
        }],
        ethtool: Some(EthtoolConfig {
            features: [
                ("tso".to_string(), false),
                ("rx-gro-list".to_string(), true),
            ]
            .into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The link's ethtool features, as the kernel reports them.
fn features(ns: &Ns, dev: &str) -> dranet_podnet::ethtool::Features {
    dranet_podnet::ethtool::features(&Netns::open(ns.path()).unwrap(), dev).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_veth_end_is_configured_in_the_pod_and_the_host_gets_everything_back() {
    if !can_run("a_veth_end_is_configured_in_the_pod_and_the_host_gets_everything_back") {
        return;
    }
    let h = host_with_veth("veth-h");
    let (p, _journal, pn) = pod_and_podnet(&h, "veth-p");
    let host_before = h.dump();
    let pod_before = p.dump();
    let features_before = features(&h, "v0");
    assert!(features_before.is_on("tx-tcp-segmentation") && !features_before.is_on("rx-gro-list"));

    let cfg = full_config();
    let attached = pn
        .attach(&req("claim-1-v0", "sandbox-1", "v0", &p.path(), &cfg))
        .await
        .unwrap();
    assert_eq!(attached.pod_name, "net1");
    assert_eq!(attached.mtu, Some(1300));
    assert_eq!(attached.mac.as_deref(), Some("02:00:00:00:00:aa"));

    // Inside the pod, as the claim said.
    assert!(!h.try_ip(&["link", "show", "v0"]), "the link left the host");
    let link = p.ip(&["link", "show", "net1"]);
    assert!(
        link.contains("mtu 1300") && link.contains("02:00:00:00:00:aa"),
        "{link}"
    );
    assert!(link.contains("UP"), "{link}");
    let addrs = p.ip(&["addr", "show", "net1"]);
    assert!(
        addrs.contains("192.168.5.2/24") && addrs.contains("fd00:5::2/64"),
        "{addrs}"
    );
    assert!(
        !addrs.contains("10.1.0.2"),
        "claim addresses replace the host's: {addrs}"
    );
    let routes = p.ip(&["route", "show", "table", "all"]);
    assert!(
        routes.contains("192.168.6.0/24 via 192.168.5.1 dev net1"),
        "{routes}"
    );
    assert!(
        routes.contains("192.168.7.0/24 via 192.168.5.1 dev net1 table 200"),
        "{routes}"
    );
    let routes6 = p.ip(&["-6", "route", "show"]);
    assert!(
        routes6.contains("fd00:6::/64 via fd00:5::1 dev net1"),
        "{routes6}"
    );
    let rules = p.ip(&["rule", "show"]);
    assert!(
        rules.contains("200:\tfrom 192.168.5.2 lookup 200"),
        "{rules}"
    );
    let neigh = p.ip(&["neigh", "show", "dev", "net1"]);
    assert!(
        neigh.contains("192.168.5.9 lladdr 02:00:00:00:00:99 PERMANENT"),
        "{neigh}"
    );
    assert_eq!(p.read_sysctl("net/ipv4/conf/net1/arp_ignore"), "1");
    assert_eq!(p.read_sysctl("net/ipv4/conf/net1/arp_announce"), "2");
    // The kernel resets accept_ra on the move (a new namespace's default is 1).
    assert_eq!(p.read_sysctl("net/ipv6/conf/net1/accept_ra"), "2");
    let f = features(&p, "net1");
    assert!(
        !f.is_on("tx-tcp-segmentation") && !f.is_on("tx-tcp6-segmentation"),
        "tso off"
    );
    assert!(f.is_on("rx-gro-list"));

    // A retry of the same attach (kubelet or runtime retry) answers without changing anything.
    let again = pn
        .attach(&req("claim-1-v0", "sandbox-1", "v0", &p.path(), &cfg))
        .await
        .unwrap();
    assert_eq!(again.pod_index, attached.pod_index);

    pn.detach("claim-1-v0").await.unwrap();
    assert_eq!(h.dump(), host_before, "host state after detach");
    assert_eq!(
        features(&h, "v0"),
        features_before,
        "ethtool features after detach"
    );
    assert_eq!(p.dump(), pod_before, "pod namespace after detach");
    assert!(pn.journal().entries().unwrap().is_empty());
    // Detaching again is a no-op.
    pn.detach("claim-1-v0").await.unwrap();
}

/// Upstream's `resourceclaim_advanced.yaml` and `resourceclaim_bigtcp.yaml` features, by the long
/// names `ethtool -k` prints; `large-receive-offload: false` on a veth, where rx-lro is fixed off,
/// is nothing to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_long_ethtool_feature_names_apply_and_a_fixed_feature_at_its_value_is_a_no_op() {
    if !can_run(
        "upstreams_long_ethtool_feature_names_apply_and_a_fixed_feature_at_its_value_is_a_no_op",
    ) {
        return;
    }
    let h = host_with_veth("eth-h");
    let (p, _journal, pn) = pod_and_podnet(&h, "eth-p");
    let host_before = h.dump();
    let before = features(&h, "v0");
    assert!(!before.is_changeable("rx-lro") && !before.is_on("rx-lro"));
    for on in [false, true] {
        let cfg = NetworkConfig {
            interface: InterfaceConfig {
                name: "dranet0".into(),
                addresses: vec!["169.254.169.14/24".into()],
                ..Default::default()
            },
            ethtool: Some(EthtoolConfig {
                features: [
                    ("tcp-segmentation-offload".to_string(), on),
                    ("generic-receive-offload".to_string(), on),
                    ("large-receive-offload".to_string(), false),
                ]
                .into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        pn.attach(&req("claim-1-v0", "sandbox-1", "v0", &p.path(), &cfg))
            .await
            .unwrap();
        let f = features(&p, "dranet0");
        assert_eq!(f.is_on("tx-tcp-segmentation"), on, "tso {on}");
        // Every part `ethtool -k` counts in tcp-segmentation-offload (tx-tcp*-segmentation,
        // tx-tcp-accecn-segmentation on 6.18) that the device can change.
        for part in f
            .changeable
            .iter()
            .filter(|n| n.starts_with("tx-tcp") && n.ends_with("-segmentation"))
        {
            assert_eq!(f.is_on(part), on, "{part} with tso {on}");
        }
        assert_eq!(f.is_on("rx-gro"), on, "gro {on}");
        assert!(!f.is_on("rx-lro"));
        pn.detach("claim-1-v0").await.unwrap();
        assert_eq!(h.dump(), host_before);
        assert_eq!(features(&h, "v0"), before);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_macvlan_gets_the_hosts_addresses_by_default_and_comes_back() {
    if !can_run("a_macvlan_gets_the_hosts_addresses_by_default_and_comes_back") {
        return;
    }
    let h = host_with_macvlan("mv-h");
    let (p, _journal, pn) = pod_and_podnet(&h, "mv-p");
    let host_before = h.dump();

    let cfg = NetworkConfig::default();
    let attached = pn
        .attach(&req("claim-2-mv0", "sandbox-2", "mv0", &p.path(), &cfg))
        .await
        .unwrap();
    assert_eq!(attached.pod_name, "mv0");
    let mut addrs = attached.addresses.clone();
    addrs.sort();
    assert_eq!(
        addrs,
        vec!["10.1.0.2/24", "fd00:1::2/64"],
        "the host's global addresses"
    );
    let shown = p.ip(&["addr", "show", "mv0"]);
    assert!(
        shown.contains("10.1.0.2/24") && shown.contains("fd00:1::2/64"),
        "{shown}"
    );

    pn.detach("claim-2-mv0").await.unwrap();
    assert_eq!(h.dump(), host_before);
}

/// Every step of an attach, made to fail: both namespaces are left exactly as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_at_any_step_leaves_both_namespaces_as_they_were() {
    if !can_run("a_failure_at_any_step_leaves_both_namespaces_as_they_were") {
        return;
    }
    let h = host_with_veth("fail-h");
    let p = Ns::new("fail-p");
    let journal = tempfile::tempdir().unwrap();
    let host_before = h.dump();
    let pod_before = p.dump();
    let features_before = features(&h, "v0");
    let cfg = full_config();
    for step in [
        "journal",
        "move",
        "link",
        "sysctl",
        "address",
        "up",
        "ethtool",
        "route",
        "rule",
        "neighbour",
        "done",
    ] {
        let pn = podnet(&h, journal.path()).step_hook(failing_at(step));
        let err = pn
            .attach(&req("claim-3-v0", "sandbox-3", "v0", &p.path(), &cfg))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("attach v0 to") && err.contains(&format!("injected failure at {step}")),
            "{err}"
        );
        assert!(!err.contains("rolling back failed"), "{err}");
        assert_eq!(h.dump(), host_before, "host after a failure at {step}");
        assert_eq!(features(&h, "v0"), features_before, "features after {step}");
        assert_eq!(p.dump(), pod_before, "pod after a failure at {step}");
        assert!(
            pn.journal().entries().unwrap().is_empty(),
            "journal after {step}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_kernel_failures_roll_back_and_name_the_step() {
    if !can_run("real_kernel_failures_roll_back_and_name_the_step") {
        return;
    }
    let h = host_with_veth("kfail-h");
    let (p, _journal, pn) = pod_and_podnet(&h, "kfail-p");
    let host_before = h.dump();
    let pod_before = p.dump();

    // A gateway the pod cannot reach.
    let mut cfg = full_config();
    cfg.routes = vec![RouteConfig {
        destination: "10.0.0.0/8".into(),
        gateway: "10.77.0.1".into(),
        ..Default::default()
    }];
    let err = pn
        .attach(&req("claim-4-v0", "sandbox-4", "v0", &p.path(), &cfg))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("attach v0 to")
            && err.contains("route 10.0.0.0/8 via 10.77.0.1")
            && err.contains("unreachable"),
        "{err}"
    );
    assert_eq!(h.dump(), host_before);
    assert_eq!(p.dump(), pod_before);

    // A name the pod already uses.
    p.ip(&[
        "link", "add", "net1", "type", "veth", "peer", "name", "net1p",
    ]);
    let pod_with_net1 = p.dump();
    let err = pn
        .attach(&req(
            "claim-4-v0",
            "sandbox-4",
            "v0",
            &p.path(),
            &full_config(),
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("name net1") && err.contains("already"),
        "{err}"
    );
    assert_eq!(h.dump(), host_before);
    assert_eq!(p.dump(), pod_with_net1);

    // A namespace that vanished.
    let gone = std::path::Path::new("/var/run/netns/dranet-t-no-such-netns");
    let err = pn
        .attach(&req("claim-4-v0", "sandbox-4", "v0", gone, &full_config()))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("dranet-t-no-such-netns"), "{err}");
    assert_eq!(h.dump(), host_before);

    // An ethtool feature the device does not have, or a private flag it does not have.
    for (features, flags, needle) in [
        (vec![("tx-warp-drive", true)], vec![], "tx-warp-drive"),
        (vec![("lro", true)], vec![], "rx-lro"),
        (vec![("large-receive-offload", true)], vec![], "rx-lro"),
        (vec![], vec![("legacy-rx", true)], "has: none"),
    ] {
        let mut cfg = full_config();
        cfg.interface.name = "net2".into(); // net1 is taken in the pod by now
        cfg.ethtool = Some(EthtoolConfig {
            features: features
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            private_flags: flags.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        });
        let err = pn
            .attach(&req("claim-4-v0", "sandbox-4", "v0", &p.path(), &cfg))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle) && err.contains("v0"), "{err}");
        assert_eq!(h.dump(), host_before);
    }

    // An invalid config is refused before anything changes.
    let mut bad = full_config();
    bad.interface.hardware_addr = Some("not-a-mac".into());
    let err = pn
        .attach(&req("claim-4-v0", "sandbox-4", "v0", &p.path(), &bad))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not-a-mac"), "{err}");
    assert_eq!(h.dump(), host_before);
    assert!(pn.journal().entries().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_macvlan_whose_pod_netns_is_deleted_dies_and_the_journal_lets_it_go() {
    if !can_run("a_macvlan_whose_pod_netns_is_deleted_dies_and_the_journal_lets_it_go") {
        return;
    }
    let h = host_with_macvlan("del-h");
    let (p, journal, pn) = pod_and_podnet(&h, "del-p");
    pn.attach(&req(
        "claim-5-mv0",
        "sandbox-5",
        "mv0",
        &p.path(),
        &NetworkConfig::default(),
    ))
    .await
    .unwrap();
    // A daemon restarted since the attach holds nothing open (a live one would keep the
    // namespace, and give the macvlan back: see linkdown.rs).
    let pn = podnet(&h, journal.path());
    drop(p); // ip netns del: the kernel destroys virtual links with their namespace
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        !h.try_ip(&["link", "show", "mv0"]),
        "a macvlan does not come back"
    );
    let r = pn.recover(|_| false).await.unwrap();
    assert_eq!(r.gone, vec!["claim-5-mv0".to_string()]);
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert!(pn.journal().entries().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_leaves_live_pods_alone() {
    if !can_run("recovery_leaves_live_pods_alone") {
        return;
    }
    let h = host_with_veth("live-h");
    let (p, journal, pn) = pod_and_podnet(&h, "live-p");
    let host_before = h.dump();
    pn.attach(&req(
        "claim-6-v0",
        "sandbox-6",
        "v0",
        &p.path(),
        &full_config(),
    ))
    .await
    .unwrap();
    // A restarted daemon: the pod still runs.
    let pn2 = podnet(&h, journal.path());
    let r = pn2.recover(|e| e.owner == "sandbox-6").await.unwrap();
    assert_eq!(r.kept, vec!["claim-6-v0".to_string()]);
    assert!(p.try_ip(&["link", "show", "net1"]), "still in the pod");
    // The pod is gone now.
    let r = pn2.recover(|_| false).await.unwrap();
    assert_eq!(r.restored, vec!["claim-6-v0".to_string()]);
    assert_eq!(h.dump(), host_before);
}

/// The crash tests re-run this test binary as a child that attaches (or detaches) and kills
/// itself with SIGKILL at a chosen step; the parent then recovers as a restarted daemon would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child() {
    let (Ok(host), Ok(pod), Ok(journal), Ok(at)) = (
        std::env::var("DRANET_T_HOST"),
        std::env::var("DRANET_T_POD"),
        std::env::var("DRANET_T_JOURNAL"),
        std::env::var("DRANET_T_CRASH_AT"),
    ) else {
        return; // only meaningful as the child of the crash tests
    };
    let hook = support::killing_hook(at.clone());
    let pn = PodNet::new(Netns::open(&host).unwrap(), &journal)
        .unwrap()
        .step_hook(hook);
    pn.attach(&req(
        "claim-7-v0",
        "sandbox-7",
        "v0",
        std::path::Path::new(&pod),
        &full_config(),
    ))
    .await
    .unwrap();
    pn.detach("claim-7-v0").await.unwrap();
    panic!("the child should have been killed at {at}");
}

async fn crash_and_recover(step: &str) {
    let h = host_with_veth(&format!("crash-{}-h", step.replace(':', "-")));
    let p = Ns::new(&format!("crash-{}-p", step.replace(':', "-")));
    let journal = tempfile::tempdir().unwrap();
    let host_before = h.dump();
    let pod_before = p.dump();
    let features_before = features(&h, "v0");
    support::rerun_until_killed(
        "podnet::crash_child",
        &h.path(),
        &p.path(),
        journal.path(),
        step,
    );
    assert_ne!(
        h.dump(),
        host_before,
        "the crash left the host changed at {step}"
    );
    let pn = podnet(&h, journal.path());
    let r = pn.recover(|_| false).await.unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert_eq!(r.restored, vec!["claim-7-v0".to_string()], "at {step}");
    assert_eq!(
        h.dump(),
        host_before,
        "host after a crash at {step} and recovery"
    );
    assert_eq!(
        features(&h, "v0"),
        features_before,
        "features after a crash at {step}"
    );
    assert_eq!(
        p.dump(),
        pod_before,
        "pod after a crash at {step} and recovery"
    );
    assert!(pn.journal().entries().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_after_the_move_is_undone_at_the_next_start() {
    if !can_run("a_daemon_killed_after_the_move_is_undone_at_the_next_start") {
        return;
    }
    crash_and_recover("sysctl").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_in_the_middle_of_a_detach_finishes_it_at_the_next_start() {
    if !can_run("a_daemon_killed_in_the_middle_of_a_detach_finishes_it_at_the_next_start") {
        return;
    }
    crash_and_recover("detach:address").await;
}

mod property {
    use super::*;
    use proptest::prelude::*;

    fn config() -> impl Strategy<Value = NetworkConfig> {
        (
            proptest::option::of(1280i32..=1500),
            any::<bool>(),
            proptest::option::of(any::<u8>()),
            proptest::collection::btree_set(2u8..250, 0..3),
            0usize..3,
            any::<bool>(),
            any::<bool>(),
            proptest::option::of(0i32..=2),
        )
            .prop_map(|(mtu, rename, mac, hosts, routes, rule, neigh, arp)| {
                let addresses: Vec<String> =
                    hosts.iter().map(|h| format!("192.168.40.{h}/24")).collect();
                let mut cfg = NetworkConfig::default();
                cfg.interface.mtu = mtu;
                cfg.interface.arp_ignore = arp;
                if rename {
                    cfg.interface.name = "eth9".into();
                }
                cfg.interface.hardware_addr = mac.map(|b| format!("02:00:00:00:01:{b:02x}"));
                if !addresses.is_empty() {
                    cfg.routes = (0..routes)
                        .map(|i| RouteConfig {
                            destination: format!("172.{}.0.0/16", 16 + i),
                            gateway: "192.168.40.1".into(),
                            table: if i == 1 { 300 } else { 0 },
                            ..Default::default()
                        })
                        .collect();
                    if rule {
                        cfg.rules = vec![RuleConfig {
                            priority: 300,
                            source: addresses[0].clone(),
                            table: 300,
                            ..Default::default()
                        }];
                    }
                    if neigh {
                        cfg.neighbors = vec![NeighborConfig {
                            destination: "192.168.40.254".into(),
                            hardware_addr: "02:00:00:00:02:fe".into(),
                        }];
                    }
                }
                cfg.interface.addresses = addresses;
                cfg
            })
    }

    #[test]
    fn random_valid_configs_attach_and_detach_with_the_host_unchanged() {
        if !can_run("random_valid_configs_attach_and_detach_with_the_host_unchanged") {
            return;
        }
        let rt = tokio::runtime::Runtime::new().unwrap();
        let h = host_with_veth("prop-h");
        let (p, _journal, pn) = pod_and_podnet(&h, "prop-p");
        let host_before = h.dump();
        let pod_before = p.dump();
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: 24,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        runner
            .run(&config(), |cfg| {
                rt.block_on(async {
                    let a = pn
                        .attach(&req("prop", "sandbox-p", "v0", &p.path(), &cfg))
                        .await
                        .map_err(|e| TestCaseError::fail(format!("attach {cfg:?}: {e}")))?;
                    prop_assert_eq!(a.mtu, Some(cfg.interface.mtu.map_or(1400, |m| m as u32)));
                    pn.detach("prop")
                        .await
                        .map_err(|e| TestCaseError::fail(format!("detach {cfg:?}: {e}")))?;
                    prop_assert_eq!(h.dump(), host_before.clone());
                    prop_assert_eq!(p.dump(), pod_before.clone());
                    Ok(())
                })
            })
            .unwrap();
    }
}

/// Whether this kernel can make VRF devices (this CI kernel cannot; the qemu guest of
/// `../shared/recipes/qemu-rdma-guest` with the `vrf` module can).
fn kernel_has_vrf() -> bool {
    let probe = Ns::new("vrf-probe");
    probe.try_ip(&["link", "add", "vrfprobe", "type", "vrf", "table", "10"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_joins_a_vrf_in_the_pod_and_the_vrf_goes_with_it() {
    if !can_run("a_link_joins_a_vrf_in_the_pod_and_the_vrf_goes_with_it") {
        return;
    }
    if !kernel_has_vrf() {
        eprintln!(
            "SKIP a_link_joins_a_vrf_in_the_pod_and_the_vrf_goes_with_it: this kernel has no VRF \
             support (run it in the qemu guest with the vrf module)"
        );
        return;
    }
    let h = host_with_veth("vrf-h");
    let (p, _journal, pn) = pod_and_podnet(&h, "vrf-p");
    let host_before = h.dump();
    let pod_before = p.dump();
    let mut cfg = full_config();
    cfg.interface.vrf = Some(dranet_core::VrfConfig {
        name: "vrf-blue".into(),
        table: Some(1001),
    });
    // Routes of a VRF member go to the VRF's table.
    cfg.routes = vec![RouteConfig {
        destination: "192.168.6.0/24".into(),
        gateway: "192.168.5.1".into(),
        table: 1001,
        ..Default::default()
    }];
    cfg.rules = Vec::new();
    pn.attach(&req("claim-8-v0", "sandbox-8", "v0", &p.path(), &cfg))
        .await
        .unwrap();
    let link = p.ip(&["-d", "link", "show", "net1"]);
    assert!(link.contains("master vrf-blue"), "{link}");
    let vrf = p.ip(&["-d", "link", "show", "vrf-blue"]);
    assert!(
        vrf.contains("vrf table 1001") && vrf.contains("UP"),
        "{vrf}"
    );
    let routes = p.ip(&["route", "show", "vrf", "vrf-blue"]);
    assert!(
        routes.contains("192.168.6.0/24 via 192.168.5.1 dev net1"),
        "{routes}"
    );
    pn.detach("claim-8-v0").await.unwrap();
    assert_eq!(h.dump(), host_before);
    assert_eq!(
        p.dump(),
        pod_before,
        "the VRF we created left with the link"
    );
}

/// The RDMA device named with a link: in shared netns mode it stays (every namespace sees it);
/// where the kernel has no RDMA netlink the attach fails at that step and rolls back. (Exclusive
/// mode moves need an RDMA device: soft-RoCE in a guest or hardware.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rdma_device_is_handled_by_the_subsystems_netns_mode() {
    if !can_run("an_rdma_device_is_handled_by_the_subsystems_netns_mode") {
        return;
    }
    let h = host_with_veth("rdma-h");
    let (p, _journal, pn) = pod_and_podnet(&h, "rdma-p");
    let host_before = h.dump();
    let pod_before = p.dump();
    let cfg = full_config();
    let pod_path = p.path();
    let mut r = req("claim-9-v0", "sandbox-9", "v0", &pod_path, &cfg);
    r.rdma_device = Some("mlx5_0");
    match dranet_podnet::rdma::netns_mode() {
        Err(_) => {
            let err = pn.attach(&r).await.unwrap_err().to_string();
            assert!(err.contains("rdma device mlx5_0"), "{err}");
            assert_eq!(h.dump(), host_before);
            assert_eq!(p.dump(), pod_before);
        }
        Ok(dranet_podnet::rdma::NetnsMode::Shared) => {
            pn.attach(&r).await.unwrap();
            assert!(pn.journal().entries().unwrap()[0].rdma_device.is_none());
            pn.detach("claim-9-v0").await.unwrap();
            assert_eq!(h.dump(), host_before);
        }
        Ok(dranet_podnet::rdma::NetnsMode::Exclusive) => {
            eprintln!("SKIP: exclusive RDMA netns mode needs a real RDMA device named in the test");
        }
    }
}

/// Every value the kernel refuses, on a veth and on a macvlan: the host keeps (or gets back) its
/// link exactly as it was, the pod is untouched and the journal empty. The interface name, MAC
/// and MTU range are refused before anything changes; a macvlan's MTU above its lower device's
/// passes every check the netlink attributes allow and is refused by the kernel after the move,
/// so it also proves the rollback finds the link in the pod under the name the kernel left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_the_kernel_refuses_leave_the_host_its_link() {
    if !can_run("values_the_kernel_refuses_leave_the_host_its_link") {
        return;
    }
    let bad_names = [
        "net/1",
        "net:1",
        "net%d",
        "net 1",
        "net\t1",
        ".",
        "..",
        "abcdefghijklmnop",
    ];
    let bad_macs = [
        "01:00:5e:00:00:01",
        "33:33:00:00:00:01",
        "ff:ff:ff:ff:ff:ff",
        "00:00:00:00:00:00",
    ];
    for (kind, h, link) in [
        ("veth", host_with_veth("kref-v-h"), "v0"),
        ("macvlan", host_with_macvlan("kref-m-h"), "mv0"),
    ] {
        let (p, _journal, pn) = pod_and_podnet(&h, &format!("kref-{kind}-p"));
        let host_before = h.dump();
        let pod_before = p.dump();
        let mut cases: Vec<(String, NetworkConfig)> = Vec::new();
        for n in bad_names {
            let mut c = NetworkConfig::default();
            c.interface.name = n.into();
            cases.push((format!("name {n:?}"), c));
        }
        for m in bad_macs {
            let mut c = NetworkConfig::default();
            c.interface.name = "net1".into();
            c.interface.hardware_addr = Some(m.into());
            cases.push((format!("mac {m}"), c));
        }
        if kind == "macvlan" {
            // Within IFLA_MAX_MTU (the lower device's maximum), above its MTU (1500).
            let mut c = NetworkConfig::default();
            c.interface.name = "net1".into();
            c.interface.mtu = Some(9000);
            cases.push(("mtu 9000 above the lower device's".into(), c));
        }
        for (what, cfg) in &cases {
            let r = pn
                .attach(&req("claim-kref", "sandbox-kref", link, &p.path(), cfg))
                .await;
            let err = match r {
                Ok(a) => panic!("{kind}: {what} was accepted: {a:?}"),
                Err(e) => e.to_string(),
            };
            assert!(
                !err.contains("rolling back failed"),
                "{kind}: {what}: {err}"
            );
            assert_eq!(h.dump(), host_before, "{kind}: host after {what}: {err}");
            assert_eq!(p.dump(), pod_before, "{kind}: pod after {what}: {err}");
            assert!(
                pn.journal().entries().unwrap().is_empty(),
                "{kind}: journal after {what}"
            );
        }
    }
}

/// A second sandbox asking for a link that a live sandbox holds (the same key: one claim, two
/// pods) is refused, and the first pod keeps its link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_sandboxs_link_is_never_taken_by_another() {
    if !can_run("a_live_sandboxs_link_is_never_taken_by_another") {
        return;
    }
    let h = host_with_veth("share-h");
    let p1 = Ns::new("share-p1");
    let p2 = Ns::new("share-p2");
    let journal = tempfile::tempdir().unwrap();
    let pn = podnet(&h, journal.path());
    let host_before = h.dump();
    let pod2_before = p2.dump();
    let cfg = full_config();
    pn.attach(&req("claim-sh-v0", "sandbox-1", "v0", &p1.path(), &cfg))
        .await
        .unwrap();
    let in_pod1 = p1.dump();
    let err = pn
        .attach(&req("claim-sh-v0", "sandbox-2", "v0", &p2.path(), &cfg))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("in use") && err.contains("sandbox-1"), "{err}");
    assert_eq!(p1.dump(), in_pod1, "the first pod keeps its link");
    assert_eq!(p2.dump(), pod2_before);
    let entries = pn.journal().entries().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].owner, "sandbox-1");
    pn.detach("claim-sh-v0").await.unwrap();
    assert_eq!(h.dump(), host_before);
}

/// Attaches of different links do not wait for each other: the first is stalled in the middle
/// (after its move) until the second has finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attaches_of_different_links_run_side_by_side() {
    if !can_run("attaches_of_different_links_run_side_by_side") {
        return;
    }
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Condvar, Mutex};
    let h = host_with_veth("conc-h");
    h.ip(&["link", "add", "v1", "type", "veth", "peer", "name", "v1p"]);
    let p1 = Ns::new("conc-p1");
    let p2 = Ns::new("conc-p2");
    let journal = tempfile::tempdir().unwrap();
    let host_before = h.dump();
    // (entered, second done)
    let gate = Arc::new((Mutex::new((false, false)), Condvar::new()));
    let stalled = Arc::new(AtomicBool::new(false));
    let released_by_second = Arc::new(AtomicBool::new(false));
    let (g, s, r) = (gate.clone(), stalled.clone(), released_by_second.clone());
    let hook: dranet_podnet::StepHook = Arc::new(move |step: &str| {
        if step == "sysctl" && !s.swap(true, Ordering::SeqCst) {
            let (m, cv) = &*g;
            let mut st = m.lock().unwrap();
            st.0 = true;
            cv.notify_all();
            let (st, timeout) = cv
                .wait_timeout_while(st, std::time::Duration::from_secs(5), |st| !st.1)
                .unwrap();
            r.store(st.1 && !timeout.timed_out(), Ordering::SeqCst);
        }
        Ok(())
    });
    let pn = Arc::new(podnet(&h, journal.path()).step_hook(hook));
    let cfg = Arc::new(NetworkConfig::default());
    let (pn1, cfg1, path1) = (pn.clone(), cfg.clone(), p1.path());
    let first = tokio::spawn(async move {
        pn1.attach(&req("claim-c-v0", "sandbox-c1", "v0", &path1, &cfg1))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    // Wait until the first is stalled inside its attach.
    {
        let (m, cv) = &*gate;
        let st = m.lock().unwrap();
        let (st, _) = cv
            .wait_timeout_while(st, std::time::Duration::from_secs(30), |st| !st.0)
            .unwrap();
        assert!(st.0, "the first attach never reached its stall");
    }
    pn.attach(&req("claim-c-v1", "sandbox-c2", "v1", &p2.path(), &cfg))
        .await
        .unwrap();
    {
        let (m, cv) = &*gate;
        m.lock().unwrap().1 = true;
        cv.notify_all();
    }
    first.await.unwrap().unwrap();
    assert!(
        released_by_second.load(Ordering::SeqCst),
        "the second attach waited for the first one"
    );
    pn.detach("claim-c-v0").await.unwrap();
    pn.detach("claim-c-v1").await.unwrap();
    assert_eq!(h.dump(), host_before);
}

/// A pod namespace that is the host's (a confused runtime) is refused before anything changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_namespace_is_refused_as_a_pod_namespace() {
    if !can_run("the_hosts_namespace_is_refused_as_a_pod_namespace") {
        return;
    }
    let h = host_with_veth("hostns-h");
    let journal = tempfile::tempdir().unwrap();
    let pn = podnet(&h, journal.path());
    let host_before = h.dump();
    let err = pn
        .attach(&req(
            "claim-hn",
            "sandbox-hn",
            "v0",
            &h.path(),
            &full_config(),
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("host's network namespace"), "{err}");
    assert_eq!(h.dump(), host_before);
    assert!(pn.journal().entries().unwrap().is_empty());
}

/// The daemon's own namespace is refused too. Run in a child process inside a namespace of its
/// own (`ip netns exec`), so the check is made against a test namespace, never the machine's.
#[test]
fn the_daemons_own_namespace_is_refused_as_a_pod_namespace() {
    if !can_run("the_daemons_own_namespace_is_refused_as_a_pod_namespace") {
        return;
    }
    let h = host_with_veth("ownns-h");
    let own = Ns::new("ownns-own");
    let journal = tempfile::tempdir().unwrap();
    let host_before = h.dump();
    let own_before = own.dump();
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &own.name])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "podnet::own_netns_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("DRANET_T_OWN_HOST", h.path())
        .env("DRANET_T_OWN_JOURNAL", journal.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("REFUSED"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(h.dump(), host_before);
    assert_eq!(own.dump(), own_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_netns_child() {
    let (Ok(host), Ok(journal)) = (
        std::env::var("DRANET_T_OWN_HOST"),
        std::env::var("DRANET_T_OWN_JOURNAL"),
    ) else {
        return; // only meaningful as the child of the test above
    };
    let pn = PodNet::new(Netns::open(&host).unwrap(), &journal).unwrap();
    let cfg = full_config();
    let own = std::path::Path::new("/proc/self/ns/net");
    match pn
        .attach(&req("claim-own", "sandbox-own", "v0", own, &cfg))
        .await
    {
        Ok(a) => {
            let _ = pn.detach("claim-own").await;
            panic!("attached into the daemon's own namespace: {a:?}");
        }
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("host's network namespace"), "{e}");
            println!("REFUSED: {e}");
        }
    }
}

/// A pod with CAP_NET_ADMIN deletes the link it was given and makes another with the same name,
/// index and MAC: detach refuses the substitute (it stays in the pod, the journal keeps the
/// entry) and the host gets nothing foreign. For a macvlan (the substitute is another kind) and
/// a veth (same kind, its peer elsewhere).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_substitute_link_in_the_pod_is_never_given_to_the_host() {
    if !can_run("a_substitute_link_in_the_pod_is_never_given_to_the_host") {
        return;
    }
    for (kind, h, link) in [
        ("macvlan", host_with_macvlan("subst-m-h"), "mv0"),
        ("veth", host_with_veth("subst-v-h"), "v0"),
    ] {
        let (p, journal, pn) = pod_and_podnet(&h, &format!("subst-{kind}-p"));
        let mut cfg = NetworkConfig::default();
        cfg.interface.name = "net1".into();
        let a = pn
            .attach(&req("claim-sub", "sandbox-sub", link, &p.path(), &cfg))
            .await
            .unwrap();
        // The pod's swap: same name, same index, same MAC, configured like the original.
        p.ip(&["link", "del", "net1"]);
        let index = a.pod_index.to_string();
        let mac = a.mac.clone().unwrap();
        p.ip(&[
            "link", "add", "net1", "index", &index, "address", &mac, "type", "veth", "peer",
            "name", "sub1",
        ]);
        p.ip(&["addr", "add", "10.99.0.1/24", "dev", "net1"]);
        let host_links_before: Vec<String> = link_names(&h);
        let err = pn.detach("claim-sub").await.unwrap_err().to_string();
        assert!(
            err.contains("net1") && err.contains("not the link"),
            "{kind}: {err}"
        );
        assert!(
            p.try_ip(&["link", "show", "net1"]),
            "{kind}: the substitute stays in the pod"
        );
        assert_eq!(
            link_names(&h),
            host_links_before,
            "{kind}: the host got nothing"
        );
        assert!(
            !h.ip(&["addr", "show"]).contains("10.99.0.1"),
            "{kind}: nothing of the pod's on the host"
        );
        assert_eq!(
            pn.journal().entries().unwrap().len(),
            1,
            "{kind}: the journal keeps the entry"
        );
        // When the pod is gone, the entry goes (the virtual link died with the pod): after a
        // restart, with nothing holding the namespace.
        let pn = podnet(&h, journal.path());
        drop(p);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let r = pn.recover(|_| false).await.unwrap();
        assert_eq!(
            r.gone,
            vec!["claim-sub".to_string()],
            "{kind}: {:?}",
            r.failed
        );
        assert_eq!(link_names(&h), host_links_before, "{kind}");
    }
}

fn link_names(ns: &Ns) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(&ns.ip(&["-j", "link", "show"])).unwrap();
    let mut names: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["ifname"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

/// A link the pod renamed is still its own: detach finds it by the identity recorded at attach
/// and the host gets it back intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_the_pod_renamed_comes_back() {
    if !can_run("a_link_the_pod_renamed_comes_back") {
        return;
    }
    let h = host_with_macvlan("ren-h");
    let (p, _journal, pn) = pod_and_podnet(&h, "ren-p");
    let host_before = h.dump();
    let mut cfg = NetworkConfig::default();
    cfg.interface.name = "net1".into();
    pn.attach(&req("claim-ren", "sandbox-ren", "mv0", &p.path(), &cfg))
        .await
        .unwrap();
    p.ip(&["link", "set", "net1", "down"]);
    p.ip(&["link", "set", "net1", "name", "other"]);
    pn.detach("claim-ren").await.unwrap();
    assert_eq!(h.dump(), host_before);
}

/// An unreadable journal entry is moved aside (as the kubelet plugin's checkpoint is) and the
/// rest of the journal is recovered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_journal_entry_is_moved_aside_and_the_rest_recovered() {
    if !can_run("an_unreadable_journal_entry_is_moved_aside_and_the_rest_recovered") {
        return;
    }
    let h = host_with_veth("quar-h");
    let (p, journal, pn) = pod_and_podnet(&h, "quar-p");
    let host_before = h.dump();
    pn.attach(&req(
        "claim-q-v0",
        "sandbox-q",
        "v0",
        &p.path(),
        &full_config(),
    ))
    .await
    .unwrap();
    std::fs::write(journal.path().join("torn.json"), b"{\"version\":1,").unwrap();
    std::fs::write(journal.path().join("future.json"), br#"{"version":99}"#).unwrap();
    let entries = pn.journal().entries().unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let r = pn.recover(|_| false).await.unwrap();
    assert_eq!(r.restored, vec!["claim-q-v0".to_string()], "{:?}", r.failed);
    assert_eq!(h.dump(), host_before);
    let mut names: Vec<String> = std::fs::read_dir(journal.path())
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "children") // the journal of children, beside
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].starts_with("future.json.corrupt-"), "{names:?}");
    assert!(names[1].starts_with("torn.json.corrupt-"), "{names:?}");
    // Reading a quarantined key again finds nothing (a detach of it is done).
    std::fs::write(journal.path().join("claim-x.json"), b"garbage").unwrap();
    pn.detach("claim-x").await.unwrap();
    assert!(!journal.path().join("claim-x.json").exists());
}

/// On a full state directory, detach still gives the host its link back and forgets the entry:
/// it needs no new data on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detach_succeeds_on_a_full_state_dir() {
    if !can_run("a_detach_succeeds_on_a_full_state_dir") {
        return;
    }
    let h = host_with_veth("full-h");
    let p = Ns::new("full-p");
    let dir = tempfile::tempdir().unwrap();
    support::run(&[
        "mount",
        "-t",
        "tmpfs",
        "-o",
        "size=256k,mode=0700",
        "dranet-t-full",
        &dir.path().display().to_string(),
    ]);
    struct Umount(std::path::PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _umount = Umount(dir.path().to_path_buf());
    let journal = dir.path().join("podnet");
    let pn = podnet(&h, &journal);
    let host_before = h.dump();
    pn.attach(&req(
        "claim-full-v0",
        "sandbox-full",
        "v0",
        &p.path(),
        &full_config(),
    ))
    .await
    .unwrap();
    // Fill the file system.
    {
        use std::io::Write;
        let mut f = std::fs::File::create(dir.path().join("filler")).unwrap();
        let block = vec![0u8; 4096];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }
    assert!(std::fs::write(dir.path().join("probe"), vec![0u8; 8192]).is_err());
    pn.detach("claim-full-v0").await.unwrap();
    assert_eq!(h.dump(), host_before);
    assert!(pn.journal().entries().unwrap().is_empty());
}

/// When rolling back a failed attach fails too, the error says so and the journal keeps the
/// entry; the next detach gives the host everything back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rollback_is_said_and_the_entry_kept_for_the_next_try() {
    if !can_run("a_failed_rollback_is_said_and_the_entry_kept_for_the_next_try") {
        return;
    }
    let h = host_with_veth("rbfail-h");
    let p = Ns::new("rbfail-p");
    let journal = tempfile::tempdir().unwrap();
    let host_before = h.dump();
    let hook: dranet_podnet::StepHook = Arc::new(|s: &str| match s {
        "route" => Err("injected failure at route".into()),
        "detach:move" => Err("injected failure at detach:move".into()),
        _ => Ok(()),
    });
    let pn = podnet(&h, journal.path()).step_hook(hook);
    let err = pn
        .attach(&req(
            "claim-rb",
            "sandbox-rb",
            "v0",
            &p.path(),
            &full_config(),
        ))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("injected failure at route")
            && text.contains("rolling back failed too")
            && text.contains("injected failure at detach:move"),
        "{text}"
    );
    assert!(
        err.user_message().contains("failed too"),
        "{}",
        err.user_message()
    );
    assert_eq!(pn.journal().entries().unwrap().len(), 1);
    podnet(&h, journal.path()).detach("claim-rb").await.unwrap();
    assert_eq!(h.dump(), host_before);
}

/// Issue 47, held: `disableEbpfPrograms` detaches only what is on the claim's link. The programs
/// of another host link (the veth's peer) and of a link already in the pod stay, through the
/// attach and the detach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_47_disable_ebpf_programs_touches_only_the_claims_link() {
    if !can_run("held_47_disable_ebpf_programs_touches_only_the_claims_link") {
        return;
    }
    let h = host_with_veth("bpfs-h");
    let p = Ns::new("bpfs-p");
    p.ip(&[
        "link", "add", "keep0", "type", "veth", "peer", "name", "keep0p",
    ]);
    let journal = tempfile::tempdir().unwrap();
    attach_program(&h.path(), "v0", true);
    for (ns, link) in [(&h, "v0p"), (&p, "keep0")] {
        attach_program(&ns.path(), link, true);
        attach_program(&ns.path(), link, false);
    }
    let untouched = |when: &str| {
        for (ns, link) in [(&h, "v0p"), (&p, "keep0")] {
            let e = ebpf_of(ns, link);
            assert_eq!(e.tc_filters, ["dranet_tc"], "{link} {when}");
            assert_eq!(e.tcx_programs, ["dranet_pass"], "{link} {when}");
        }
    };
    untouched("before");
    let pn = podnet(&h, journal.path());
    let cfg = NetworkConfig {
        interface: InterfaceConfig {
            name: "net1".into(),
            disable_ebpf_programs: Some(true),
            ..Default::default()
        },
        ..Default::default()
    };
    pn.attach(&req("claim-1-v0", "sandbox-1", "v0", &p.path(), &cfg))
        .await
        .unwrap();
    assert_eq!(
        ebpf_of(&p, "net1"),
        dranet_core::EbpfPrograms::default(),
        "the claim's link"
    );
    untouched("after attach");
    pn.detach("claim-1-v0").await.unwrap();
    untouched("after detach");
}

/// The link's eBPF programs as discovery sees them, in `ns`.
fn ebpf_of(ns: &Ns, link: &str) -> dranet_core::EbpfPrograms {
    use dranet_core::LinkSource;
    let links = Netns::open(ns.path())
        .unwrap()
        .run(|| dranet_discovery::NetlinkLinks.links().unwrap())
        .unwrap();
    links
        .into_iter()
        .find(|l| l.name == link)
        .unwrap_or_else(|| panic!("{link} not in {}", ns.name))
        .ebpf
        .unwrap_or_else(|| panic!("{link}'s eBPF programs not read"))
}

/// Attaches the pass program to `link` in the namespace at `ns`: as a TC filter on its clsact
/// ingress, or on its TCX ingress hook. From a thread of its own (callable from a step hook).
fn attach_program(ns: &std::path::Path, link: &str, tcx: bool) {
    Netns::open(ns)
        .unwrap()
        .run(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
                .unwrap();
            rt.block_on(async {
                let rtnl = Netns::current().unwrap().rtnl().await.unwrap();
                let index = rtnl.link_by_name(link).await.unwrap().unwrap().header.index;
                let prog = bpf::load_pass_program("dranet_pass");
                if tcx {
                    bpf::attach_tcx_ingress(index, &prog);
                } else {
                    bpf::attach_tc_ingress(rtnl.handle(), index, &prog, "dranet_tc").await;
                }
            })
        })
        .unwrap();
}

/// With `disableEbpfPrograms`, the pod gets its link without TC filters or TCX programs; without
/// it, they stay. TCX programs attached on the host go with the link. TC filters do not (the
/// kernel drops a link's qdiscs when it changes namespace), so the test adds one in the pod once
/// the link is there, before the step that detaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_ebpf_programs_detaches_tc_and_tcx_programs_in_the_pod() {
    if !can_run("disable_ebpf_programs_detaches_tc_and_tcx_programs_in_the_pod") {
        return;
    }
    for disable in [false, true] {
        let h = host_with_veth("bpf-h");
        let p = Ns::new("bpf-p");
        let journal = tempfile::tempdir().unwrap();
        attach_program(&h.path(), "v0", true);
        attach_program(&h.path(), "v0", false);
        let on_host = ebpf_of(&h, "v0");
        assert_eq!(on_host.tc_filters, ["dranet_tc"]);
        assert_eq!(on_host.tcx_programs, ["dranet_pass"]);
        let pod = p.path();
        let pn = podnet(&h, journal.path()).step_hook(Arc::new(move |step: &str| {
            if step == "up" {
                attach_program(&pod, "net1", false);
            }
            Ok(())
        }));
        let cfg = NetworkConfig {
            interface: InterfaceConfig {
                name: "net1".into(),
                disable_ebpf_programs: Some(disable),
                ..Default::default()
            },
            ..Default::default()
        };
        pn.attach(&req("claim-1-v0", "sandbox-1", "v0", &p.path(), &cfg))
            .await
            .unwrap();
        let in_pod = ebpf_of(&p, "net1");
        if disable {
            assert_eq!(in_pod, dranet_core::EbpfPrograms::default(), "disable");
        } else {
            assert_eq!(in_pod.tc_filters, ["dranet_tc"], "without the flag");
            assert_eq!(in_pod.tcx_programs, ["dranet_pass"], "without the flag");
        }
        pn.detach("claim-1-v0").await.unwrap();
    }
}
