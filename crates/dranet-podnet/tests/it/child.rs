//! One NIC for many pods, in network namespaces the tests create (root only; skipped with a
//! message otherwise): children (macvlan here, as this kernel has no ipvlan) of one veth parent
//! made in two pods, traffic between them, and each removed on its own — by detach, by the
//! rollback of a failed attach, and by recovery after the daemon is killed mid-create — with the
//! parent's host and the other pod unchanged (full iproute2 dumps); children of one pod whose
//! names share upstream's routing table, and a child refused the parent's own address.

use std::net::UdpSocket;
use std::time::Duration;

use dranet_core::interface_type::table_for_name;
use dranet_core::{Addressing, InterfaceConfig, InterfaceType, NetworkConfig, RouteConfig};
use dranet_podnet::Error;
use dranet_podnet::netns::Netns;
use dranet_podnet::{AttachRequest, PodInterface, PodNet, plan_source_tables};

use crate::support::{self, Ns, can_run, failing_at, pod_and_podnet, podnet};

/// A host whose `v0` (a veth end, up, addressed, with the host's default route through it) is
/// the NIC the pods share.
fn host(tag: &str) -> Ns {
    let h = Ns::new(tag);
    // A veth's MTU is 1500, an Ethernet NIC's.
    h.veth_with_default("v0", "10.9.0.2/24", "10.9.0.254");
    h
}

fn child(ty: InterfaceType, address: &str) -> NetworkConfig {
    NetworkConfig {
        interface: InterfaceConfig {
            name: "net1".into(),
            r#type: Some(ty),
            addresses: vec![address.into()],
            mtu: Some(1400),
            arp_ignore: Some(1),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// [`support::req`] of the host's `v0`.
fn req<'a>(
    key: &'a str,
    owner: &'a str,
    pod: &'a std::path::Path,
    config: &'a NetworkConfig,
) -> AttachRequest<'a> {
    support::req(key, owner, "v0", pod, config)
}

/// The host's dump less the parent's promiscuity counter, which the kernel raises while the
/// parent has macvlan children (bridge mode) and lowers when the last goes: not state dranet sets.
fn host_dump(h: &Ns) -> String {
    h.dump()
        .lines()
        .filter(|l| !l.contains("\"promiscuity\""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A UDP datagram from pod `a` reaches pod `b`'s address through the children.
fn datagram_passes(a: &Ns, b: &Ns, from: &str, to: &str) -> bool {
    let rx = Netns::open(b.path())
        .unwrap()
        .run(|| UdpSocket::bind((to, 9999)))
        .unwrap()
        .unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let tx = Netns::open(a.path())
        .unwrap()
        .run(|| UdpSocket::bind((from, 0)))
        .unwrap()
        .unwrap();
    tx.send_to(b"shared", (to, 9999)).unwrap();
    let mut buf = [0u8; 16];
    matches!(rx.recv_from(&mut buf), Ok((6, _)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pods_get_children_of_one_nic_and_each_leaves_alone() {
    if !can_run("two_pods_get_children_of_one_nic_and_each_leaves_alone") {
        return;
    }
    let h = host("share-h");
    let (pa, pb) = (Ns::new("share-a"), Ns::new("share-b"));
    let journal = tempfile::tempdir().unwrap();
    let pn = podnet(&h, journal.path());
    let host_before = h.dump();
    let host_parts = host_dump(&h);
    let a_before = pa.dump();

    let ca = child(InterfaceType::Macvlan, "10.9.0.11/24");
    let mut cb = child(InterfaceType::Macvlan, "10.9.0.12/24");
    cb.routes.push(RouteConfig {
        destination: "10.50.0.0/16".into(),
        gateway: "10.9.0.1".into(),
        ..Default::default()
    });
    // One claim shared by two pods: same key, each pod its own child.
    let a = pn
        .attach(&req("claim-1.nic", "sandbox-a", &pa.path(), &ca))
        .await
        .unwrap();
    let b = pn
        .attach(&req("claim-1.nic", "sandbox-b", &pb.path(), &cb))
        .await
        .unwrap();
    assert_eq!((a.pod_name.as_str(), a.mtu), ("net1", Some(1400)));
    assert_ne!(a.mac, b.mac, "macvlan children have MACs of their own");

    // The parent stays on the host, unchanged.
    assert_eq!(
        host_dump(&h),
        host_parts,
        "the host (and the parent) are untouched"
    );
    let link = pa.ip(&["-d", "link", "show", "net1"]);
    assert!(
        link.contains("macvlan mode bridge") && link.contains("mtu 1400"),
        "{link}"
    );
    assert!(pa.ip(&["addr", "show", "net1"]).contains("10.9.0.11/24"));
    assert_eq!(pa.read_sysctl("net/ipv4/conf/net1/arp_ignore"), "1");
    // No claim routes: upstream's source-based routing, through the parent's gateway.
    let t = table_for_name("net1").to_string();
    let rules = pa.ip(&["rule", "show"]);
    assert!(
        rules.contains(&format!("32000:\tfrom 10.9.0.11 lookup {t}")),
        "{rules}"
    );
    let table = pa.ip(&["route", "show", "table", &t]);
    assert!(table.contains("default via 10.9.0.254 dev net1"), "{table}");
    assert!(table.contains("10.9.0.254 dev net1 scope link"), "{table}");
    assert!(table.contains("10.9.0.0/24 dev net1"), "{table}");
    // Claim routes: those, and no source routing.
    assert!(
        pb.ip(&["route", "show"])
            .contains("10.50.0.0/16 via 10.9.0.1 dev net1")
    );
    assert!(!pb.ip(&["rule", "show"]).contains("32000"));

    assert!(
        datagram_passes(&pa, &pb, "10.9.0.11", "10.9.0.12"),
        "a to b through the NIC"
    );

    // A retried attach answers again without a second child.
    let again = pn
        .attach(&req("claim-1.nic", "sandbox-a", &pa.path(), &ca))
        .await
        .unwrap();
    assert_eq!(again.pod_index, a.pod_index);

    let b_before = pb.dump();
    pn.detach_child("claim-1.nic", "sandbox-a").await.unwrap();
    assert_eq!(
        pa.dump(),
        a_before,
        "pod a: its child and its rule are gone"
    );
    assert_eq!(pb.dump(), b_before, "pod b is untouched");
    assert_eq!(host_dump(&h), host_parts, "the parent is untouched");
    pn.detach_child("claim-1.nic", "sandbox-a").await.unwrap(); // gone is success
    assert_eq!(pn.children().entries().unwrap().len(), 1);

    pn.detach_children_of("sandbox-b").await.unwrap();
    assert!(!pb.try_ip(&["link", "show", "net1"]));
    assert!(pn.children().entries().unwrap().is_empty());
    assert_eq!(h.dump(), host_before);
}

/// Child `name` with `address` (macvlan; no claim routes, so upstream's source routing).
fn named_child(name: &str, address: &str) -> NetworkConfig {
    let mut c = child(InterfaceType::Macvlan, address);
    c.interface.name = name.into();
    c
}

/// `pod`'s child `name` has its source routing for `ip` in `table`: the rule, the subnet, the
/// gateway and the default via it.
fn assert_source_routing(pod: &Ns, name: &str, ip: &str, table: u32) {
    let t = table.to_string();
    let rules = pod.ip(&["rule", "show"]);
    assert!(
        rules.contains(&format!("32000:\tfrom {ip} lookup {t}")),
        "{name}: {rules}"
    );
    let routes = pod.ip(&["route", "show", "table", &t]);
    for want in [
        format!("default via 10.9.0.254 dev {name}"),
        format!("10.9.0.254 dev {name} scope link"),
        format!("10.9.0.0/24 dev {name}"),
    ] {
        assert!(
            routes.contains(&want),
            "{name}: {want:?} not in table {t}: {routes}"
        );
    }
}

/// Upstream's hash puts `net15` and `net28` in one table, where the second child's default
/// route was refused (EEXIST) and its pod failed. Attached one after the other without a plan,
/// the first keeps upstream's table and the second takes the next free one; with the tables
/// planned for the pod (as the driver does), the plan holds whatever order they attach in, and a
/// table the pod uses already is passed over; attached at once without a plan, each gets one of
/// the two. Detach removes each child's own rule and leaves the other's routing as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_whose_names_share_a_table_each_get_their_routes() {
    if !can_run("children_whose_names_share_a_table_each_get_their_routes") {
        return;
    }
    let h = host("coll-h");
    let (pa, pb) = (Ns::new("coll-a"), Ns::new("coll-b"));
    let journal = tempfile::tempdir().unwrap();
    let pn = podnet(&h, journal.path());
    let up = table_for_name("net15");
    assert_eq!(
        table_for_name("net28"),
        up,
        "the names share upstream's table"
    );
    let (host_before, a_before) = (host_dump(&h), pa.dump());

    // Pod a, no plan: net28 attaches first and keeps upstream's table.
    let (a15, a28) = (
        named_child("net15", "10.9.0.15/24"),
        named_child("net28", "10.9.0.28/24"),
    );
    pn.attach(&req("claim-28.nic", "sandbox-a", &pa.path(), &a28))
        .await
        .unwrap();
    pn.attach(&req("claim-15.nic", "sandbox-a", &pa.path(), &a15))
        .await
        .unwrap();
    assert_source_routing(&pa, "net28", "10.9.0.28", up);
    assert_source_routing(&pa, "net15", "10.9.0.15", up + 1);

    // Pod b, planned: net15 comes first in name order and keeps upstream's table, though net28
    // attaches first; the pod has a rule of its own on net28's planned table, which is passed
    // over.
    let (b15, b28) = (
        named_child("net15", "10.9.0.115/24"),
        named_child("net28", "10.9.0.128/24"),
    );
    let plan = plan_source_tables(&[
        PodInterface {
            name: "net28",
            config: &b28,
            lease: None,
        },
        PodInterface {
            name: "net15",
            config: &b15,
            lease: None,
        },
    ])
    .unwrap();
    assert_eq!((plan["net15"], plan["net28"]), (up, up + 1));
    let theirs = (up + 1).to_string();
    pb.ip(&[
        "rule",
        "add",
        "from",
        "192.0.2.1",
        "table",
        &theirs,
        "priority",
        "100",
    ]);
    let b_before = pb.dump();
    let b_path = pb.path();
    for (key, cfg, name) in [
        ("claim-28.nic", &b28, "net28"),
        ("claim-15.nic", &b15, "net15"),
    ] {
        let mut r = req(key, "sandbox-b", &b_path, cfg);
        r.source_table = Some(plan[name]);
        pn.attach(&r).await.unwrap();
    }
    assert_source_routing(&pb, "net15", "10.9.0.115", up);
    assert_source_routing(&pb, "net28", "10.9.0.128", up + 2);
    assert!(
        pb.ip(&["rule", "show"])
            .contains(&format!("100:\tfrom 192.0.2.1 lookup {theirs}"))
    );

    // Pod c, no plan, both at once: one chooses only once the other's routes are in.
    let pc = Ns::new("coll-c");
    let c_before = pc.dump();
    let (c15, c28) = (
        named_child("net15", "10.9.0.215/24"),
        named_child("net28", "10.9.0.228/24"),
    );
    let c_path = pc.path();
    let (r15, r28) = (
        req("claim-15.nic", "sandbox-c", &c_path, &c15),
        req("claim-28.nic", "sandbox-c", &c_path, &c28),
    );
    let (a, b) = tokio::join!(pn.attach(&r15), pn.attach(&r28));
    a.unwrap();
    b.unwrap();
    let first = if pc
        .ip(&["rule", "show"])
        .contains(&format!("from 10.9.0.215 lookup {up}"))
    {
        "net15"
    } else {
        "net28"
    };
    for (name, ip) in [("net15", "10.9.0.215"), ("net28", "10.9.0.228")] {
        let table = if name == first { up } else { up + 1 };
        assert_source_routing(&pc, name, ip, table);
    }
    pn.detach_children_of("sandbox-c").await.unwrap();
    assert_eq!(pc.dump(), c_before);

    // Each child's detach takes its own rule; the other keeps its routing.
    pn.detach_child("claim-28.nic", "sandbox-a").await.unwrap();
    assert!(!pa.ip(&["rule", "show"]).contains("10.9.0.28"));
    assert_source_routing(&pa, "net15", "10.9.0.15", up + 1);
    pn.detach_child("claim-15.nic", "sandbox-a").await.unwrap();
    assert_eq!(pa.dump(), a_before);
    pn.detach_children_of("sandbox-b").await.unwrap();
    assert_eq!(pb.dump(), b_before);
    assert_eq!(host_dump(&h), host_before);
    assert!(pn.children().entries().unwrap().is_empty());
}

/// A child given an address its parent has on the host (IPv4 under any prefix, IPv6, or one the
/// parent took after the claim was prepared) is refused before anything is made, naming the
/// address and the parent: it would take the host's own traffic to that address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_is_refused_its_parents_address() {
    if !can_run("a_child_is_refused_its_parents_address") {
        return;
    }
    let h = host("chaddr-h");
    h.ip(&["addr", "add", "fd00:9::2/64", "dev", "v0", "nodad"]);
    let (p, _journal, pn) = pod_and_podnet(&h, "chaddr-p");
    h.ip(&["addr", "add", "10.9.0.99/24", "dev", "v0"]);
    let (host_before, pod_before) = (h.dump(), p.dump());
    for address in ["10.9.0.2/24", "10.9.0.2/32", "fd00:9::2/64", "10.9.0.99/24"] {
        let cfg = child(InterfaceType::Macvlan, address);
        let e = pn
            .attach(&req("claim-6.nic", "sandbox-6", &p.path(), &cfg))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidConfig { device, .. } if device == "v0"),
            "{address}: {e:?}"
        );
        let ip = address.split('/').next().unwrap_or_default();
        let msg = e.to_string();
        assert!(
            msg.contains(&format!(
                "interface.addresses[0]: {ip} is an address the shared NIC"
            )) && msg.contains("network config for v0"),
            "{msg}"
        );
        assert_eq!(h.dump(), host_before, "{address}");
        assert_eq!(p.dump(), pod_before, "{address}");
        assert!(pn.children().entries().unwrap().is_empty(), "{address}");
    }
    // An address of its own on the parent's subnet is the child's.
    let cfg = child(InterfaceType::Macvlan, "10.9.0.3/24");
    pn.attach(&req("claim-6.nic", "sandbox-6", &p.path(), &cfg))
        .await
        .unwrap();
    pn.detach_children_of("sandbox-6").await.unwrap();
    assert_eq!(p.dump(), pod_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipvlan_where_the_kernel_has_it_and_a_clear_refusal_where_not() {
    if !can_run("ipvlan_where_the_kernel_has_it_and_a_clear_refusal_where_not") {
        return;
    }
    let h = host("ipvl-h");
    let p = Ns::new("ipvl-p");
    let has_ipvlan = h.try_ip(&[
        "link", "add", "link", "v0", "name", "probe0", "type", "ipvlan",
    ]);
    let _ = h.try_ip(&["link", "del", "probe0"]);
    let journal = tempfile::tempdir().unwrap();
    let pn = podnet(&h, journal.path());
    let (host_before, pod_before) = (h.dump(), p.dump());
    let cfg = child(InterfaceType::Ipvlan, "10.9.0.21/24");
    let r = pn
        .attach(&req("claim-2.nic", "sandbox-1", &p.path(), &cfg))
        .await;
    if has_ipvlan {
        let a = r.unwrap();
        assert!(
            p.ip(&["-d", "link", "show", "net1"])
                .contains("ipvlan  mode l2 bridge")
        );
        assert_eq!(
            a.mac.as_deref(),
            Some(
                h.json(&["link", "show", "v0"])[0]["address"]
                    .as_str()
                    .unwrap()
            )
        );
        pn.detach_children_of("sandbox-1").await.unwrap();
    } else {
        let e = r.unwrap_err();
        assert!(
            e.to_string().contains("no ipvlan") && e.to_string().contains("Macvlan"),
            "{e}"
        );
    }
    assert_eq!(h.dump(), host_before);
    assert_eq!(p.dump(), pod_before);
    assert!(pn.children().entries().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_rolls_the_child_back_and_a_bad_config_touches_nothing() {
    if !can_run("a_failed_step_rolls_the_child_back_and_a_bad_config_touches_nothing") {
        return;
    }
    let h = host("chfail-h");
    let p = Ns::new("chfail-p");
    let journal = tempfile::tempdir().unwrap();
    let (host_before, pod_before) = (h.dump(), p.dump());
    for step in ["create", "sysctl", "address", "up", "route", "rule", "done"] {
        let pn = podnet(&h, journal.path()).step_hook(failing_at(step));
        let cfg = child(InterfaceType::Macvlan, "10.9.0.31/24");
        let e = pn
            .attach(&req("claim-3.nic", "sandbox-1", &p.path(), &cfg))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("injected"), "{step}: {e}");
        assert_eq!(p.dump(), pod_before, "pod after a failure at {step}");
        assert_eq!(h.dump(), host_before, "host after a failure at {step}");
        assert!(pn.children().entries().unwrap().is_empty(), "{step}");
    }
    // Refused before anything is made: no addresses, and the field named.
    let pn = podnet(&h, journal.path());
    let mut cfg = child(InterfaceType::Macvlan, "10.9.0.31/24");
    cfg.interface.addresses.clear();
    let e = pn
        .attach(&req("claim-3.nic", "sandbox-1", &p.path(), &cfg))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidConfig { .. }), "{e:?}");
    assert!(e.to_string().contains("interface.addresses"), "{e}");
    // Unnumbered: up, no address, no rule.
    cfg.interface.addressing = Some(Addressing::Unnumbered);
    pn.attach(&req("claim-3.nic", "sandbox-1", &p.path(), &cfg))
        .await
        .unwrap();
    let link = p.json(&["addr", "show", "net1"]);
    assert!(
        link[0]["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "UP")
    );
    assert!(!p.ip(&["-4", "addr", "show", "net1"]).contains("inet "));
    assert!(!p.ip(&["rule", "show"]).contains("32000"));
    pn.detach_child("claim-3.nic", "sandbox-1").await.unwrap();
    assert_eq!(p.dump(), pod_before);
}

/// Re-run by the crash test as a child process that creates a child and is SIGKILLed at a step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_crash_helper() {
    let (Ok(host), Ok(pod), Ok(journal), Ok(at)) = (
        std::env::var("DRANET_T_HOST"),
        std::env::var("DRANET_T_POD"),
        std::env::var("DRANET_T_JOURNAL"),
        std::env::var("DRANET_T_CRASH_AT"),
    ) else {
        return; // only meaningful as the child of the crash test
    };
    let hook = support::killing_hook(at);
    let pn = PodNet::new(Netns::open(&host).unwrap(), &journal)
        .unwrap()
        .step_hook(hook);
    let cfg = child(InterfaceType::Macvlan, "10.9.0.41/24");
    pn.attach(&req(
        "claim-4.nic",
        "sandbox-4",
        std::path::Path::new(&pod),
        &cfg,
    ))
    .await
    .unwrap();
    panic!("should have been killed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_mid_create_leaves_no_orphan_child_after_restart() {
    if !can_run("a_daemon_killed_mid_create_leaves_no_orphan_child_after_restart") {
        return;
    }
    for step in ["link", "up", "done"] {
        let h = host(&format!("chcrash-{step}-h"));
        let p = Ns::new(&format!("chcrash-{step}-p"));
        let other = Ns::new(&format!("chcrash-{step}-o"));
        let journal = tempfile::tempdir().unwrap();
        // Another pod's child on the same parent, which recovery must leave alone.
        let pn = podnet(&h, journal.path());
        let oc = child(InterfaceType::Macvlan, "10.9.0.42/24");
        pn.attach(&req("claim-5.nic", "sandbox-5", &other.path(), &oc))
            .await
            .unwrap();
        let (host_before, pod_before, other_before) = (h.dump(), p.dump(), other.dump());
        support::rerun_until_killed(
            "child::child_crash_helper",
            &h.path(),
            &p.path(),
            journal.path(),
            step,
        );
        assert!(
            p.try_ip(&["link", "show", "net1"]),
            "the crash left a child at {step}"
        );
        // The restarted daemon: both sandboxes still run, but the crashed attach never finished.
        let pn = podnet(&h, journal.path());
        let (removed, failed) = pn.recover_children(|_| true).await.unwrap();
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(
            removed,
            vec!["claim-4.nic.sandbox-4".to_string()],
            "at {step}"
        );
        assert_eq!(
            p.dump(),
            pod_before,
            "pod after a crash at {step} and recovery"
        );
        assert_eq!(other.dump(), other_before, "the other pod at {step}");
        assert_eq!(h.dump(), host_before, "host at {step}");
        // The other pod's sandbox is gone, with its namespace: its entry goes, nothing fails.
        drop(other);
        let (removed, failed) = pn.recover_children(|o| o != "sandbox-5").await.unwrap();
        assert!(
            failed.is_empty() && removed == ["claim-5.nic.sandbox-5"],
            "{removed:?} {failed:?}"
        );
        assert!(pn.children().entries().unwrap().is_empty());
    }
}
