//! The DHCP client against a real DHCP server (dnsmasq) in network namespaces the tests make
//! (root, iproute2 and dnsmasq; iptables for the lost DISCOVER; each test skips with a message
//! without them): the lease's address, router and MTU, the lease released, a lost first
//! DISCOVER retransmitted, and the client's backoff and deadline when no server answers. The
//! driver's tests hold the lease's path through prepare and unprepare.

use std::time::Duration;

use dranet_podnet::dhcp::{self, DhcpError, Timing};
use dranet_podnet::netns::Netns;
use dranet_testkit::dnsmasq::{Dnsmasq, Net, SERVER, has};

use crate::support::{self, Ns, can_run};

/// The client's namespace, as podnet opens it.
fn host_netns(net: &Net) -> Netns {
    Netns::open(net.host.path()).unwrap()
}

fn mac_of(ns: &Ns, link: &str) -> String {
    ns.json(&["link", "show", link])[0]["address"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The client on a host link: the lease's address, prefix, router and MTU; nothing configured
/// on the host, the link down again as it was; RELEASE removes the lease from dnsmasq's file
/// and dnsmasq logs it.
#[tokio::test]
async fn dhcp_lease_gives_address_router_mtu_and_is_released() {
    let t = "dhcp_lease_gives_address_router_mtu_and_is_released";
    if !can_run(t) || !has(t, "dnsmasq", "dnsmasq-base") {
        return;
    }
    let net = Net::new("dhl");
    let server = Dnsmasq::start(&net.srv);
    let mac = mac_of(&net.host, "d0");
    let lease = dhcp::acquire(&host_netns(&net), "d0", None, Timing::default())
        .await
        .unwrap();
    let addr = lease.address.to_string();
    assert!(addr.starts_with("10.77.0."), "{lease:?}");
    assert_eq!(lease.prefix_len, 24);
    assert_eq!(lease.server_id.to_string(), SERVER);
    assert_eq!(lease.mtu, Some(1400));
    assert_eq!(lease.lease_secs, Some(3600));
    assert_eq!(lease.routes.len(), 1);
    assert_eq!(lease.routes[0].prefix_len, 0);
    assert_eq!(lease.routes[0].gateway.to_string(), SERVER);
    assert_eq!(
        lease.server_mac.map(|b| format!("{b:02x}")).join(":"),
        mac_of(&net.srv, "d0s")
    );
    let leases = server.leases();
    assert!(leases.contains(&addr) && leases.contains(&mac), "{leases}");
    // The host: nothing configured on the link, which is down again.
    let shown = net.host.json(&["addr", "show", "d0"]);
    assert_eq!(shown[0]["addr_info"], serde_json::json!([]), "{shown}");
    assert!(
        !shown[0]["flags"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("UP")),
        "{shown}"
    );

    dhcp::release(&host_netns(&net), "d0", &lease)
        .await
        .unwrap();
    server.wait_for_leases("lease released", |l| !l.contains(&addr));
    server.wait_for("DHCPRELEASE logged", |log| {
        log.lines()
            .any(|l| l.contains("DHCPRELEASE(d0s)") && l.contains(&addr))
    });
}

/// RFC 2131 §4.1: a DISCOVER the network lost is retransmitted. The server's namespace drops
/// the first DHCP datagram it gets (an iptables quota of one datagram's bytes); the client
/// still gets its lease, the rule counted exactly one drop, and dnsmasq saw one DISCOVER: the
/// retransmission. The lease is for the MAC given (a claim's `hardwareAddr`), not the link's.
#[tokio::test]
async fn dhcp_retransmits_a_lost_discover() {
    let t = "dhcp_retransmits_a_lost_discover";
    if !can_run(t) || !has(t, "dnsmasq", "dnsmasq-base") || !has(t, "iptables", "iptables") {
        return;
    }
    let net = Net::new("dhr");
    // A DISCOVER is a 328-byte IP datagram: the quota covers the first, not the second.
    let drop_first = [
        "INPUT", "-i", "d0s", "-p", "udp", "--dport", "67", "-m", "quota", "--quota", "400", "-j",
        "DROP",
    ];
    let ipt = |args: &[&str]| {
        let mut all = vec!["ip", "netns", "exec", &net.srv.name, "iptables"];
        all.extend_from_slice(args);
        support::run(&all)
    };
    ipt(&[&["-A"][..], &drop_first[..]].concat());
    let server = Dnsmasq::start(&net.srv);
    let lease = dhcp::acquire(
        &host_netns(&net),
        "d0",
        Some([0x02, 0, 0, 0, 0x77, 0x01]),
        Timing::default(),
    )
    .await
    .unwrap();
    let counters = ipt(&["-L", "INPUT", "-v", "-x", "-n"]);
    let dropped: Vec<&str> = counters
        .lines()
        .find(|l| l.contains("DROP"))
        .unwrap_or_else(|| panic!("{counters}"))
        .split_whitespace()
        .take(1)
        .collect();
    assert_eq!(
        dropped,
        ["1"],
        "exactly the first DISCOVER dropped:\n{counters}"
    );
    let log = server.log();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("DHCPDISCOVER(d0s)"))
            .count(),
        1,
        "{log}"
    );
    let leases = server.leases();
    assert!(
        leases.contains("02:00:00:00:77:01") && leases.contains(&lease.address.to_string()),
        "{leases}"
    );
}

/// No server: DISCOVERs only, with growing intervals (at 0, ~0.2, ~0.6, ~1.4 s for a first wait
/// of 0.2 s; a fixed interval would send about 8 in the 1.5 s), then the deadline's error.
#[tokio::test]
async fn dhcp_backs_off_and_gives_up_at_the_deadline() {
    let t = "dhcp_backs_off_and_gives_up_at_the_deadline";
    if !can_run(t) {
        return;
    }
    let net = Net::new("dht");
    let timing = Timing {
        first_retransmit: Duration::from_millis(200),
        max_retransmit: Duration::from_secs(64),
        deadline: Duration::from_millis(1500),
    };
    let e = dhcp::acquire(&host_netns(&net), "d0", None, timing)
        .await
        .unwrap_err();
    match &e {
        DhcpError::Timeout {
            discovers,
            requests,
            naks,
            ..
        } => {
            assert!((2..=4).contains(discovers), "{e}");
            assert_eq!((*requests, *naks), (0, 0), "{e}");
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("is a DHCP server"), "{e}");
    // No interface, no lease: the error says so.
    let e = dhcp::acquire(&host_netns(&net), "nope0", None, timing)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not on the host"), "{e}");
}

/// A link brought up on the host for DHCP takes nothing from its segment's router
/// advertisements: while the exchange runs (the server answers after 2 s; its segment's router
/// advertises a prefix), the host's link has IPv6 off, so no SLAAC address and no default route;
/// afterwards the link is down with IPv6 as it was.
#[tokio::test]
async fn dhcp_link_takes_no_router_advertisements_on_the_host() {
    let t = "dhcp_link_takes_no_router_advertisements_on_the_host";
    if !can_run(t) || !has(t, "dnsmasq", "dnsmasq-base") {
        return;
    }
    let net = Net::new("dra");
    net.srv.ip(&["addr", "add", "fd00:77::1/64", "dev", "d0s"]);
    let server = Dnsmasq::start_with(
        &net.srv,
        &[
            "--enable-ra",
            "--dhcp-range=fd00:77::,ra-only,64",
            "--dhcp-reply-delay=2",
        ],
    );
    let host = host_netns(&net);
    let taking =
        tokio::spawn(async move { dhcp::acquire(&host, "d0", None, Timing::default()).await });
    let mut watched = 0;
    while !taking.is_finished() {
        let addrs = net
            .host
            .ip(&["-6", "addr", "show", "dev", "d0", "scope", "global"]);
        let routes = net.host.ip(&["-6", "route", "show", "default"]);
        assert!(
            addrs.trim().is_empty() && routes.trim().is_empty(),
            "the host took the segment's router advertisement: {addrs} {routes}"
        );
        watched += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lease = taking.await.unwrap().unwrap();
    assert!(
        watched > 20,
        "the exchange was watched for a second at least ({watched} looks)"
    );
    assert!(
        server.log().contains("router advertisement on fd00:77::"),
        "the server advertised: {}",
        server.log()
    );
    assert_eq!(lease.server_id.to_string(), SERVER);
    assert!(
        !net.host.ip(&["link", "show", "d0"]).contains(",UP"),
        "down again"
    );
    assert_eq!(net.host.read_sysctl("net/ipv6/conf/d0/disable_ipv6"), "0");
}
