//! `addressing: SLAAC` against a real router advertisement sender: dnsmasq (`--enable-ra`) on the
//! other end of the link, in a namespace of its own. With advertisements the attach returns the
//! address the kernel autoconfigured from the advertised prefix, with upstream's sysctls on the
//! link in the pod; without them it fails within the SLAAC timeout, saying so, and the link is
//! back on the host as it was. Root, iproute2 and dnsmasq; skipped with a message otherwise.

use std::time::{Duration, Instant};

use dranet_core::{Addressing, InterfaceConfig, NetworkConfig};
use dranet_testkit::dnsmasq::{Dnsmasq, Net, has};

use crate::support::{can_run, pod_and_podnet, req};

const PREFIX: &str = "2001:db8:77:";

fn slaac() -> NetworkConfig {
    NetworkConfig {
        interface: InterfaceConfig {
            name: "net1".into(),
            addressing: Some(Addressing::Slaac),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The link of `net` (`d0`, its peer `d0s` holding `2001:db8:77::1/64`).
fn net_with_v6(tag: &str) -> Net {
    let net = Net::new(tag);
    net.srv
        .ip(&["addr", "add", "2001:db8:77::1/64", "dev", "d0s", "nodad"]);
    net
}

#[tokio::test]
async fn slaac_takes_the_advertised_prefix_with_upstreams_sysctls() {
    let t = "slaac_takes_the_advertised_prefix_with_upstreams_sysctls";
    if !can_run(t) || !has(t, "dnsmasq", "dnsmasq-base") {
        return;
    }
    let net = net_with_v6("sla");
    let _ra = Dnsmasq::start_with(
        &net.srv,
        &["--enable-ra", "--dhcp-range=2001:db8:77::,ra-only,64,1h"],
    );
    let (pod, _journal, pn) = pod_and_podnet(&net.host, "slap");
    let pn = pn.slaac_timeout(Duration::from_secs(10));
    let cfg = slaac();
    let started = Instant::now();
    let a = pn
        .attach(&req("c1_d0", "pod-a", "d0", &pod.path(), &cfg))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let took = started.elapsed();
    let v6: Vec<&String> = a
        .addresses
        .iter()
        .filter(|x| x.starts_with(PREFIX))
        .collect();
    assert_eq!(v6.len(), 1, "{:?} after {took:?}", a.addresses);
    assert!(v6[0].ends_with("/64"), "{v6:?}");
    // In the pod, as `ip` shows it: the address, autoconfigured (dynamic), on net1.
    let shown = pod.json(&["-6", "addr", "show", "net1", "scope", "global"]);
    let info = &shown[0]["addr_info"][0];
    assert_eq!(
        format!(
            "{}/{}",
            info["local"].as_str().unwrap_or_default(),
            info["prefixlen"]
        ),
        *v6[0],
        "{shown}"
    );
    assert_eq!(info["dynamic"], true, "{shown}");
    for (k, v) in [
        ("accept_ra", "2"),
        ("dad_transmits", "0"),
        ("router_solicitation_delay", "0"),
        ("router_solicitation_interval", "1"),
        ("disable_ipv6", "0"),
    ] {
        assert_eq!(
            pod.read_sysctl(&format!("net/ipv6/conf/net1/{k}")),
            v,
            "{k}"
        );
    }
    pn.detach("c1_d0").await.unwrap();
}

#[tokio::test]
async fn without_router_advertisements_slaac_fails_and_gives_the_link_back() {
    let t = "without_router_advertisements_slaac_fails_and_gives_the_link_back";
    if !can_run(t) {
        return;
    }
    let net = net_with_v6("slb");
    let before = net.host.json(&["link", "show", "d0"]);
    let (pod, _journal, pn) = pod_and_podnet(&net.host, "slbp");
    let pn = pn.slaac_timeout(Duration::from_millis(600));
    let cfg = slaac();
    let started = Instant::now();
    let e = pn
        .attach(&req("c1_d0", "pod-a", "d0", &pod.path(), &cfg))
        .await
        .unwrap_err()
        .to_string();
    let took = started.elapsed();
    assert!(
        e.contains("interface net1 has no autoconfigured IPv6 address after 600ms")
            && e.contains("no router advertisement"),
        "{e}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    // The link is the host's again, as it was.
    assert_eq!(net.host.json(&["link", "show", "d0"]), before);
    assert!(
        pod.json(&["link", "show"])
            .as_array()
            .is_some_and(|l| l.iter().all(|l| l["ifname"] != "net1"))
    );
}
