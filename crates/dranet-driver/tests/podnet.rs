//! Attach and detach in network namespaces the tests create (root only; skipped with a message
//! otherwise). The host namespace's full dump (links, addresses, routes of all tables, rules,
//! permanent neighbours) must be identical before the attach and after the detach, after every
//! injected failure, and after a crash and recovery.

mod support;

use std::sync::Arc;

use dranet_core::{
    EthtoolConfig, InterfaceConfig, NeighborConfig, NetworkConfig, RouteConfig, RuleConfig,
};
use dranet_driver::netns::Netns;
use dranet_driver::podnet::{AttachRequest, PodNet};
use support::{Ns, can_run, host_with_macvlan, host_with_veth};

fn podnet(h: &Ns, journal: &std::path::Path) -> PodNet {
    PodNet::new(Netns::open(h.path()).unwrap(), journal).unwrap()
}

fn req<'a>(
    key: &'a str,
    owner: &'a str,
    link: &'a str,
    pod_netns: &'a std::path::Path,
    config: &'a NetworkConfig,
) -> AttachRequest<'a> {
    AttachRequest {
        key,
        owner,
        link,
        pod_netns,
        config,
        rdma_device: None,
    }
}

fn full_config() -> NetworkConfig {
    NetworkConfig {
        interface: InterfaceConfig {
            name: "net1".into(),
            addresses: vec!["192.168.5.2/24".into(), "fd00:5::2/64".into()],
            mtu: Some(1300),
            hardware_addr: Some("02:00:00:00:00:aa".into()),
            arp_ignore: Some(1),
            arp_announce: Some(2),
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
fn features(ns: &Ns, dev: &str) -> dranet_driver::ethtool::Features {
    dranet_driver::ethtool::features(&Netns::open(ns.path()).unwrap(), dev).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_veth_end_is_configured_in_the_pod_and_the_host_gets_everything_back() {
    if !can_run("a_veth_end_is_configured_in_the_pod_and_the_host_gets_everything_back") {
        return;
    }
    let h = host_with_veth("veth-h");
    let p = Ns::new("veth-p");
    let journal = tempfile::tempdir().unwrap();
    let pn = podnet(&h, journal.path());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_macvlan_gets_the_hosts_addresses_by_default_and_comes_back() {
    if !can_run("a_macvlan_gets_the_hosts_addresses_by_default_and_comes_back") {
        return;
    }
    let h = host_with_macvlan("mv-h");
    let p = Ns::new("mv-p");
    let journal = tempfile::tempdir().unwrap();
    let pn = podnet(&h, journal.path());
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
        "sysctl",
        "address",
        "up",
        "ethtool",
        "route",
        "rule",
        "neighbour",
        "done",
    ] {
        let fail_at = step.to_string();
        let hook: dranet_driver::podnet::StepHook = Arc::new(move |s: &str| {
            if s == fail_at {
                Err(format!("injected failure at {s}"))
            } else {
                Ok(())
            }
        });
        let pn = podnet(&h, journal.path()).step_hook(hook);
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
    let p = Ns::new("kfail-p");
    let journal = tempfile::tempdir().unwrap();
    let pn = podnet(&h, journal.path());
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
    let p = Ns::new("del-p");
    let journal = tempfile::tempdir().unwrap();
    let pn = podnet(&h, journal.path());
    pn.attach(&req(
        "claim-5-mv0",
        "sandbox-5",
        "mv0",
        &p.path(),
        &NetworkConfig::default(),
    ))
    .await
    .unwrap();
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
    let p = Ns::new("live-p");
    let journal = tempfile::tempdir().unwrap();
    let pn = podnet(&h, journal.path());
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
    let kill_at = at.clone();
    let hook: dranet_driver::podnet::StepHook = Arc::new(move |s: &str| {
        if s == kill_at {
            let _ = std::process::Command::new("kill")
                .args(["-9", &std::process::id().to_string()])
                .status();
            std::thread::sleep(std::time::Duration::from_secs(10));
        }
        Ok(())
    });
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
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("DRANET_T_HOST", h.path())
        .env("DRANET_T_POD", p.path())
        .env("DRANET_T_JOURNAL", journal.path())
        .env("DRANET_T_CRASH_AT", step)
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(9),
        "child should die by SIGKILL at {step}: {}",
        String::from_utf8_lossy(&out.stderr)
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
        let p = Ns::new("prop-p");
        let journal = tempfile::tempdir().unwrap();
        let pn = podnet(&h, journal.path());
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
    let p = Ns::new("vrf-p");
    let journal = tempfile::tempdir().unwrap();
    let pn = podnet(&h, journal.path());
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
    let p = Ns::new("rdma-p");
    let journal = tempfile::tempdir().unwrap();
    let pn = podnet(&h, journal.path());
    let host_before = h.dump();
    let pod_before = p.dump();
    let cfg = full_config();
    let pod_path = p.path();
    let mut r = req("claim-9-v0", "sandbox-9", "v0", &pod_path, &cfg);
    r.rdma_device = Some("mlx5_0");
    match dranet_driver::rdma::netns_mode() {
        Err(_) => {
            let err = pn.attach(&r).await.unwrap_err().to_string();
            assert!(err.contains("rdma device mlx5_0"), "{err}");
            assert_eq!(h.dump(), host_before);
            assert_eq!(p.dump(), pod_before);
        }
        Ok(dranet_driver::rdma::NetnsMode::Shared) => {
            pn.attach(&r).await.unwrap();
            assert!(pn.journal().entries().unwrap()[0].rdma_device.is_none());
            pn.detach("claim-9-v0").await.unwrap();
            assert_eq!(h.dump(), host_before);
        }
        Ok(dranet_driver::rdma::NetnsMode::Exclusive) => {
            eprintln!("SKIP: exclusive RDMA netns mode needs a real RDMA device named in the test");
        }
    }
}
