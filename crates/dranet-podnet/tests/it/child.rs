//! One NIC for many pods, in network namespaces the tests create (root only; skipped with a
//! message otherwise): children (macvlan here, as this kernel has no ipvlan) of one veth parent
//! made in two pods, traffic between them, and each removed on its own — by detach, by the
//! rollback of a failed attach, and by recovery after the daemon is killed mid-create — with the
//! parent's host and the other pod unchanged (full iproute2 dumps).

use std::net::UdpSocket;
use std::sync::Arc;
use std::time::Duration;

use dranet_core::interface_type::table_for_name;
use dranet_core::{Addressing, InterfaceConfig, InterfaceType, NetworkConfig, RouteConfig};
use dranet_podnet::Error;
use dranet_podnet::netns::Netns;
use dranet_podnet::{AttachRequest, PodNet, StepHook};

use crate::support::{self, Ns, can_run};

/// A host whose `v0` (a veth end, up, addressed, with the host's default route through it) is
/// the NIC the pods share.
fn host(tag: &str) -> Ns {
    let h = Ns::new(tag);
    h.ip(&["link", "add", "v0", "type", "veth", "peer", "name", "v0p"]);
    h.ip(&["link", "set", "v0", "mtu", "1500", "up"]);
    h.ip(&["link", "set", "v0p", "up"]);
    h.ip(&["addr", "add", "10.9.0.2/24", "dev", "v0"]);
    h.ip(&["route", "add", "default", "via", "10.9.0.254", "dev", "v0"]);
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

fn req<'a>(
    key: &'a str,
    owner: &'a str,
    pod: &'a std::path::Path,
    config: &'a NetworkConfig,
) -> AttachRequest<'a> {
    AttachRequest {
        key,
        owner,
        link: "v0",
        pod_netns: pod,
        config,
        rdma_device: None,
    }
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

fn podnet(h: &Ns, journal: &std::path::Path) -> PodNet {
    PodNet::new(Netns::open(h.path()).unwrap(), journal).unwrap()
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
        let s = step.to_string();
        let hook: StepHook = Arc::new(move |x: &str| {
            if x == s {
                Err("injected".into())
            } else {
                Ok(())
            }
        });
        let pn = podnet(&h, journal.path()).step_hook(hook);
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
