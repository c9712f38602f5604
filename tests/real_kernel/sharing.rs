//! Upstream dranet's e2e scenarios that need a kernel with ipvlan and VRF (Debian's 6.1 has both;
//! the CI machine's kernel has neither), run in the pods guest by `pods.rs` with the same `dranet
//! run`, containerd and fake kubelet:
//!
//! - **IPVLAN** (issue 38; upstream's "ipvlan with address and sizes" and "ipvlan with policy
//!   routing"): two pods each get an IPVLAN child of one virtio NIC (the one carrying `rxe0`)
//!   from claims in upstream's API. The far side of the segment is a namespace on the other
//!   virtio NIC of the qemu hub, holding the gateway `10.99.0.254` and, behind it, `192.0.2.1`;
//!   the shared NIC has a backup default via that gateway (metric 500; the node's uplink is
//!   `upl`). Checked: the
//!   child's kind, mode, MTU and GSO/GRO sizes; upstream's source-based routing (table
//!   `fnv32a(name) % 1000 + 1000`, an on-link route to the gateway, a default via it, a rule
//!   `from <address>` at priority 32000); pings between the children, from the far side to each,
//!   and from a child to `192.0.2.1`, which only the policy table routes; deleting one pod
//!   leaves the other's child and the parent exactly as they were. In exclusive RDMA mode the
//!   same claim is refused at prepare with "use shared RDMA mode".
//! - **VRF** (issue 36; upstream's "validate vrf routing", `resourceclaim_vrf.yaml`): two veth
//!   pairs, pods 1 and 2 on one end each, a router pod on both other ends, every interface in
//!   the pod's VRF `test-vrf` named without a table; pod 1 pings pod 2 through the router with
//!   `ping -I eth1`. Checked besides: the table upstream derives from the VRF's name, the claim's
//!   default route in it (not in main), the pods' TCP/UDP `l3mdev_accept`, and the veths back
//!   on the host, out of any VRF and without addresses, after the pods are deleted.

use std::time::{Duration, Instant};

use dranet_kubeletplugin::ClaimRef;
use dranet_kubeletplugin::fake::{FakeApiServer, FakeKubelet};
use serde_json::json;

use super::cri::{Cri, Pod};
use super::pods::{IMAGE, device_with, must, prepare, put_claim_configs, say, sh, unprepare};

/// Upstream's table of a name: FNV-1a, modulo 1000, plus 1000 (computed here on its own, not
/// with the driver's function).
fn upstream_table(name: &str) -> u32 {
    let h = name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    h % 1000 + 1000
}

/// The network namespace (a name under /run/netns) holding address `ip`.
fn netns_with(ip: &str) -> String {
    let (_, out) = sh(&format!(
        "for n in $(ls /run/netns); do ip -n $n -o addr | grep -q ' {ip}/' && echo $n; done"
    ));
    let found: Vec<&str> = out.split_whitespace().collect();
    if found.len() != 1 {
        let (_, links) = sh("for n in $(ls /run/netns); do echo \"$n:\"; ip -n $n -o addr; done");
        let (_, log) = sh("tail -30 /run/dranet.log");
        panic!("namespaces holding {ip}: {found:?}; the pods':\n{links}\ndranet:\n{log}");
    }
    found[0].to_string()
}

/// A link, its addresses and routes of every table, and the rules, as `ip` prints them.
fn link_state(netns: Option<&str>, link: &str) -> String {
    let n = netns.map(|n| format!("-n {n} ")).unwrap_or_default();
    must(&format!(
        "ip {n}-d -o link show dev {link}; ip {n}-o addr show dev {link}; \
         ip {n}route show table all dev {link}; ip {n}rule show"
    ))
}

async fn ping(cri: &Cri, pod: &Pod, args: &str) -> String {
    let mut cmd = vec!["ping", "-c", "1", "-W", "5"];
    cmd.extend(args.split_whitespace());
    let r = cri.exec(pod, &cmd, 30).await.expect("exec ping");
    assert_eq!(r.rc, 0, "{}: ping {args}:\n{}", pod.name, r.out);
    r.out
        .lines()
        .find(|l| l.contains("bytes from"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// A ping from the network beyond the shared NIC (the namespace `far`).
fn far_ping(ip: &str) -> String {
    must(&format!("ip netns exec far ping -c 1 -W 5 {ip}"))
        .lines()
        .find(|l| l.contains("bytes from"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Upstream's IPVLAN claim for `addr`, with the sizes when `sizes`.
fn ipvlan_config(addr: &str, sizes: bool) -> serde_json::Value {
    let mut c = json!({"interface": {"name": "net1", "type": "IPVLAN",
        "addresses": [format!("{addr}/24")], "ipvlan": {"mode": "L2", "flag": "Bridge"}}});
    if sizes {
        let i = &mut c["interface"];
        i["mtu"] = json!(1400);
        i["gsoMaxSize"] = json!(32768);
        i["groMaxSize"] = json!(32768);
    }
    c
}

/// Exclusive RDMA mode: an IPVLAN child of the NIC carrying an RDMA device is refused at prepare.
pub async fn refused_in_exclusive_mode(
    api: &FakeApiServer,
    kubelet: &FakeKubelet,
    dev: &str,
    t0: Instant,
) {
    let c = put_claim_configs(
        api,
        "ipvlan-x",
        "uid-ipvlan-x",
        &[("nic", dev)],
        vec![("nic", ipvlan_config("10.99.0.13", false))],
    );
    let resp = kubelet
        .prepare(std::slice::from_ref(&c))
        .await
        .expect("NodePrepareResources");
    let err = resp
        .claims
        .values()
        .map(|r| r.error.clone())
        .next()
        .unwrap_or_default();
    say(
        t0,
        &format!("exclusive mode, an IPVLAN child of {dev}: prepare refused:\n  {err}"),
    );
    assert!(err.contains("use shared RDMA mode"), "{err}");
}

/// Upstream's IPVLAN scenarios on the NIC `nics.0` (device `dev`), `nics.1` on the same segment
/// standing for the network beyond it.
pub async fn ipvlan(
    api: &FakeApiServer,
    kubelet: &FakeKubelet,
    cri: &Cri,
    dev: &str,
    nics: (&str, &str),
    t0: Instant,
) {
    let started = Instant::now();
    let (parent, far) = nics;
    // The network beyond the parent: a namespace on the other NIC of the segment (through a
    // macvlan of it, so its RDMA link stays), with the gateway and an address behind it.
    must(&format!(
        "ip netns add far && ip link add far0 link {far} type macvlan mode bridge && \
         ip link set far0 netns far && ip -n far link set lo up && ip -n far link set far0 up && \
         ip -n far addr add 10.99.0.254/24 dev far0 && ip -n far addr add 192.0.2.1/32 dev lo && \
         ip route add default via 10.99.0.254 dev {parent} onlink metric 500"
    ));
    let parent_before = link_state(None, parent);
    let a = put_claim_configs(
        api,
        "ipvlan-a",
        "uid-ipvlan-a",
        &[("nic", dev)],
        vec![("nic", ipvlan_config("10.99.0.11", true))],
    );
    let b = put_claim_configs(
        api,
        "ipvlan-b",
        "uid-ipvlan-b",
        &[("nic", dev)],
        vec![("nic", ipvlan_config("10.99.0.12", false))],
    );
    prepare(kubelet, &[a.clone(), b.clone()]).await;
    let pod_a = cri
        .start_pod("ipvlan-a", "uid-ipvlan-a", IMAGE)
        .await
        .expect("ipvlan-a");
    let pod_b = cri
        .start_pod("ipvlan-b", "uid-ipvlan-b", IMAGE)
        .await
        .expect("ipvlan-b");
    let (ns_a, ns_b) = (netns_with("10.99.0.11"), netns_with("10.99.0.12"));

    // Address and sizes.
    let link_a = must(&format!("ip -n {ns_a} -d link show net1"));
    say(t0, &format!("ipvlan-a's net1:\n{}", link_a.trim_end()));
    for want in [
        "mtu 1400",
        "ipvlan",
        "mode l2 bridge",
        "gso_max_size 32768",
        "gro_max_size 32768",
    ] {
        assert!(
            link_a.contains(want),
            "ipvlan-a net1 lacks {want:?}:\n{link_a}"
        );
    }
    let parent_mac = must(&format!("cat /sys/class/net/{parent}/address"));
    assert!(
        link_a.contains(parent_mac.trim()),
        "an ipvlan child has its parent's MAC:\n{link_a}"
    );

    // Policy routing: upstream's table, routes and rule, in each pod.
    let table = upstream_table("net1");
    for (ns, ip) in [(&ns_a, "10.99.0.11"), (&ns_b, "10.99.0.12")] {
        let routes = must(&format!("ip -n {ns} route show table {table}"));
        let rules = must(&format!("ip -n {ns} rule show"));
        say(
            t0,
            &format!(
                "pod with {ip}: table {table}:\n{}rules:\n{}",
                routes,
                rules.trim_end()
            ),
        );
        let has = |start: &str, with: &str| {
            routes
                .lines()
                .any(|l| l.starts_with(start) && l.contains(with))
        };
        assert!(
            has("default via 10.99.0.254 dev net1", "")
                && has("10.99.0.254 dev net1", "scope link")
                && has("10.99.0.0/24 dev net1", &format!("src {ip}")),
            "table {table} is not upstream's:\n{routes}"
        );
        let rule = format!("32000:\tfrom {ip} lookup {table}");
        assert!(rules.contains(&rule), "no rule {rule:?}:\n{rules}");
    }

    // Traffic: child to child, host to each child, and a child through its policy table.
    let mut seen = vec![
        format!(
            "ipvlan-a -> ipvlan-b: {}",
            ping(cri, &pod_a, "10.99.0.12").await
        ),
        format!(
            "ipvlan-b -> ipvlan-a: {}",
            ping(cri, &pod_b, "10.99.0.11").await
        ),
        format!("far side -> ipvlan-a: {}", far_ping("10.99.0.11")),
        format!("far side -> ipvlan-b: {}", far_ping("10.99.0.12")),
    ];
    // 192.0.2.1 is only behind the gateway: the pod's main table has no route there.
    let main_b = must(&format!("ip -n {ns_b} route show table main"));
    assert!(!main_b.contains("default"), "{main_b}");
    seen.push(format!(
        "ipvlan-b (from 10.99.0.12) -> 192.0.2.1 via the gateway: {}",
        ping(cri, &pod_b, "-I 10.99.0.12 192.0.2.1").await
    ));
    say(t0, &seen.join("\n"));

    // One pod goes: its child with it; the other child and the parent stay as they were.
    let parent_with_children = link_state(None, parent);
    let b_before = link_state(Some(&ns_b), "net1");
    cri.delete_pod(&pod_a).await.expect("delete ipvlan-a");
    unprepare(kubelet, std::slice::from_ref(&a)).await;
    assert_eq!(
        link_state(Some(&ns_b), "net1"),
        b_before,
        "ipvlan-b's child changed"
    );
    assert_eq!(
        link_state(None, parent),
        parent_with_children,
        "the parent changed"
    );
    let (_, left) = sh(
        "ip -o link show type ipvlan; for n in $(ls /run/netns); do ip -n $n -o link show type ipvlan; done",
    );
    assert_eq!(left.lines().count(), 1, "ipvlan children left: {left}");
    say(
        t0,
        &format!(
            "ipvlan-a deleted: ipvlan-b's child and {parent} unchanged; ipvlan-b -> 192.0.2.1 {}",
            ping(cri, &pod_b, "-I 10.99.0.12 192.0.2.1").await
        ),
    );
    cri.delete_pod(&pod_b).await.expect("delete ipvlan-b");
    unprepare(kubelet, std::slice::from_ref(&b)).await;
    assert_eq!(
        link_state(None, parent),
        parent_before,
        "the parent after both pods"
    );
    must(&format!(
        "ip route del default via 10.99.0.254 dev {parent} metric 500 && ip netns del far"
    ));
    say(
        t0,
        &format!(
            "IPVLAN scenarios passed in {:.1} s; {parent} as before",
            started.elapsed().as_secs_f64()
        ),
    );
}

/// Upstream's VRF scenario.
pub async fn vrf(api: &FakeApiServer, kubelet: &FakeKubelet, cri: &Cri, t0: Instant) {
    let started = Instant::now();
    let links = ["vrf-test-pod-1", "vrf-test-pod-2", "vrf-rtr-1", "vrf-rtr-2"];
    let before: Vec<String> = links.iter().map(|l| link_state(None, l)).collect();
    let dev = |l: &str| device_with(api, "ifName", l);
    let vrf = json!({"name": "test-vrf"});
    let end = |addr: &str, gw: &str| {
        json!({"interface": {"name": "eth1", "addresses": [addr], "vrf": vrf},
               "routes": [{"destination": "0.0.0.0/0", "gateway": gw}]})
    };
    let rtr = |name: &str, addr: &str| json!({"interface": {"name": name, "addresses": [addr], "forwarding": true, "vrf": vrf}});
    let (d1, d2, r1, r2) = (
        dev("vrf-test-pod-1"),
        dev("vrf-test-pod-2"),
        dev("vrf-rtr-1"),
        dev("vrf-rtr-2"),
    );
    let claims: Vec<ClaimRef> = vec![
        put_claim_configs(
            api,
            "pod-vrf-1",
            "uid-pod-vrf-1",
            &[("req-veth-1", &d1)],
            vec![("req-veth-1", end("10.10.10.1/24", "10.10.10.2"))],
        ),
        put_claim_configs(
            api,
            "pod-vrf-2",
            "uid-pod-vrf-2",
            &[("req-veth-2", &d2)],
            vec![("req-veth-2", end("10.10.20.1/24", "10.10.20.2"))],
        ),
        put_claim_configs(
            api,
            "pod-vrf-router",
            "uid-pod-vrf-router",
            &[("req-veth-router-1", &r1), ("req-veth-router-2", &r2)],
            vec![
                ("req-veth-router-1", rtr("eth1", "10.10.10.2/24")),
                ("req-veth-router-2", rtr("eth2", "10.10.20.2/24")),
            ],
        ),
    ];
    prepare(kubelet, &claims).await;
    let mut pods = Vec::new();
    for name in ["pod-vrf-1", "pod-vrf-router", "pod-vrf-2"] {
        let uid = format!("uid-{name}");
        pods.push(cri.start_pod(name, &uid, IMAGE).await.expect(name));
    }
    let table = upstream_table("test-vrf");
    for (ip, links) in [
        ("10.10.10.1", &["eth1"][..]),
        ("10.10.10.2", &["eth1", "eth2"][..]),
        ("10.10.20.1", &["eth1"][..]),
    ] {
        let ns = netns_with(ip);
        let vrf_link = must(&format!("ip -n {ns} -d link show test-vrf"));
        assert!(
            vrf_link.contains(&format!("vrf table {table}")),
            "{vrf_link}"
        );
        for l in links {
            let shown = must(&format!("ip -n {ns} -d link show {l}"));
            assert!(shown.contains("master test-vrf"), "{ip}'s {l}:\n{shown}");
        }
        let routes = must(&format!("ip -n {ns} route show vrf test-vrf"));
        let main = must(&format!("ip -n {ns} route show table main"));
        if ip.ends_with(".1") {
            let gw = if ip.starts_with("10.10.10") {
                "10.10.10.2"
            } else {
                "10.10.20.2"
            };
            assert!(
                routes.contains(&format!("default via {gw} dev eth1")),
                "{routes}"
            );
        }
        assert!(!main.contains("10.10."), "a VRF route in main:\n{main}");
        let accept = must(&format!(
            "ip netns exec {ns} sysctl -n net.ipv4.tcp_l3mdev_accept net.ipv4.udp_l3mdev_accept"
        ));
        assert_eq!(accept.split_whitespace().collect::<Vec<_>>(), ["1", "1"]);
        say(
            t0,
            &format!(
                "{ip}'s pod: {links:?} in test-vrf (table {table}); route show vrf test-vrf:\n{}",
                routes.trim_end()
            ),
        );
    }
    let reply = ping(cri, &pods[0], "-I eth1 10.10.20.1").await;
    say(
        t0,
        &format!("pod-vrf-1 -> pod-vrf-2 through the router, ping -I eth1: {reply}"),
    );

    for p in &pods {
        cri.delete_pod(p).await.expect("delete pod");
    }
    unprepare(kubelet, &claims).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let now = || {
        links
            .iter()
            .map(|l| link_state(None, l))
            .collect::<Vec<_>>()
    };
    while now() != before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if now() != before {
        let (_, log) = sh("grep -v '\"claim prepared\\|not published' /run/dranet.log | tail -20");
        panic!(
            "the veths did not come back as they were:\n{:?}\nbefore:\n{before:?}\ndranet:\n{log}",
            now()
        );
    }
    say(
        t0,
        &format!(
            "VRF scenario passed in {:.1} s; the four veths back on the host as before",
            started.elapsed().as_secs_f64()
        ),
    );
}
