//! SLAAC on a real node, v1.34.9 and v1.36.3: the node's veth `drtsl0` has a router on its other
//! end (dnsmasq sending router advertisements of `2001:db8:78::/64`, in a namespace of its own).
//! A pod claiming it with `addressing: SLAAC` runs with the address the kernel autoconfigured from
//! that prefix, and its claim says `SLAACReady=True` with the address in `networkData`. A second
//! veth, `drtsl1`, has no router: its pod gets the Event `NetworkDeviceNotReady` saying no address
//! came, and the veth is back on the host as it was.
//!
//! Needs root, the kit and dnsmasq; skipped with a message otherwise.

use std::time::Duration;

use crate::links::{claim_pod, host_link, ip};
use crate::manifests::{claim_template, device_class};
use dranet_testkit::dnsmasq::{Dnsmasq, has};
use dranet_testkit::kit::{Daemon, Kit, free_port, http_get, tail, wait_for};
use dranet_testkit::netns::Ns;

const LIMIT: Duration = Duration::from_secs(90);
const CLASS: &str = "dranet-slaac";
const PREFIX: &str = "2001:db8:78:";

/// The host's end `host` of a veth whose other end, `peer`, is in `router`, both up.
fn veth_to(router: &Ns, host: &str, peer: &str) {
    let _ = std::process::Command::new("ip")
        .args(["link", "del", host])
        .output();
    ip(&["link", "add", host, "type", "veth", "peer", "name", peer]);
    ip(&["link", "set", peer, "netns", &router.name]);
    // The host itself takes no advertisement on it (a route from one would make it an uplink).
    std::fs::write(format!("/proc/sys/net/ipv6/conf/{host}/accept_ra"), "0")
        .expect("accept_ra of the host's end");
    ip(&["link", "set", host, "up"]);
    router.ip(&["link", "set", peer, "up"]);
}

fn template(name: &str, veth: &str) -> String {
    let devices = format!(
        r#"      requests:
      - name: nic
        exactly:
          deviceClassName: {CLASS}
          selectors:
          - cel: {{expression: 'device.attributes["dra.net"].ifName == "{veth}"'}}
      config:
      - requests: [nic]
        opaque:
          driver: dra.net
          parameters:
            interface: {{name: net1, addressing: SLAAC}}
"#
    );
    claim_template(name, &devices)
}

pub(crate) fn a_pod_gets_its_address_from_router_advertisements(kit: &Kit) {
    let t = "slaac::a_pod_gets_its_address_from_router_advertisements";
    if !has(t, "dnsmasq", "dnsmasq-base") {
        return;
    }
    let router = Ns::new("slaac-r");
    veth_to(&router, "drtsl0", "d0s");
    veth_to(&router, "drtsl1", "d1s");
    // dnsmasq serves d0s (its DHCPv4 range wants an IPv4 address there too; no pod asks for one).
    router.ip(&["addr", "add", "10.77.0.1/24", "dev", "d0s"]);
    router.ip(&["addr", "add", "2001:db8:78::1/64", "dev", "d0s", "nodad"]);
    let ra = Dnsmasq::start_with(
        &router,
        &["--enable-ra", "--dhcp-range=2001:db8:78::,ra-only,64,1h"],
    );
    let (before0, before1) = (host_link("drtsl0"), host_link("drtsl1"));

    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cmd = kit.dranet_run(
        env!("CARGO_BIN_EXE_dranet"),
        &tmp.path().join("state"),
        port,
    );
    cmd.args(["--cloud-provider-hint", "none"]).args([
        "--filter",
        r#""ifName" in device.attributes["dra.net"] && device.attributes["dra.net"].ifName.startsWith("drtsl")"#,
    ]);
    let mut d = Daemon::spawn(cmd, tmp.path().join("dranet.log"));
    wait_for(
        "the daemon ready with drtsl0 and drtsl1 published",
        LIMIT,
        || {
            let devs = kit.node_devices("dra.net");
            (http_get(port, "/readyz")?.0 == 200
                && devs.contains("drtsl0")
                && devs.contains("drtsl1"))
            .then_some(())
        },
        || tail(&d.output(), 40),
    );
    let image = kit.var("DRANET_K8S_BUSYBOX_IMAGE");
    kit.apply(&format!(
        "{}---{}---{}",
        device_class(CLASS, "dra.net"),
        template("slaac-ra", "drtsl0"),
        template("slaac-silent", "drtsl1")
    ));

    // With advertisements: the pod runs with the autoconfigured address.
    kit.apply(&claim_pod(
        "slaac-a",
        "slaac-ra",
        image,
        "echo ADDR $(ip -6 -o addr show dev net1 scope global); echo END; trap 'exit 0' TERM; sleep 100000 & wait",
    ));
    let out = wait_for(
        "slaac-a to print its address",
        LIMIT,
        || {
            let out = kit.logs("slaac-a");
            out.contains("END").then_some(out)
        },
        || kit.kubectl_ok(&["describe", "pod", "slaac-a"]) + &tail(&d.output(), 40),
    );
    assert!(out.contains(PREFIX) && out.contains("dynamic"), "{out}");
    let claim = kit.pod_claim("slaac-a").expect("slaac-a's claim");
    let dev = wait_for(
        "SLAACReady in slaac-a's claim status",
        LIMIT,
        || {
            let c = kit.get_json(&["resourceclaim", &claim]);
            c["status"]["devices"]
                .as_array()?
                .iter()
                .find(|d| {
                    d["conditions"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|c| c["type"] == "SLAACReady"))
                })
                .cloned()
        },
        || tail(&d.output(), 40),
    );
    let cond = dev["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "SLAACReady"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(cond["status"], "True", "{dev}");
    assert!(
        cond["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(&format!("autoconfigured addresses: {PREFIX}"))),
        "{dev}"
    );
    assert!(
        dev["networkData"]["ips"].as_array().is_some_and(|ips| ips
            .iter()
            .any(|i| i.as_str().is_some_and(|i| i.starts_with(PREFIX)))),
        "{dev}"
    );
    // The router still advertising: the link comes back with its own `accept_ra` 0 (the kernel
    // resets a link's sysctls on each move; dranet puts the host's back before the link is up),
    // so the host takes no address nor default route from it.
    kit.kubectl_ok(&["delete", "pod", "slaac-a", "--wait=true", "--timeout=60s"]);
    wait_for(
        "drtsl0 back on the host as it was",
        LIMIT,
        || (host_link("drtsl0") == before0).then_some(()),
        || format!("{:?}\n{}", host_link("drtsl0"), tail(&d.output(), 40)),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        host_link("drtsl0"),
        before0,
        "no address from the router's advertisements on the host"
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv6/conf/drtsl0/accept_ra")
            .unwrap_or_default()
            .trim(),
        "0"
    );
    drop(ra);

    // Without: the pod is told why, and its veth is the host's again, as it was.
    kit.apply(&claim_pod(
        "slaac-b",
        "slaac-silent",
        image,
        "trap 'exit 0' TERM; sleep 100000 & wait",
    ));
    let ev = wait_for(
        "NetworkDeviceNotReady on slaac-b",
        LIMIT,
        || {
            let ev = kit.get_json(&[
                "events",
                "--field-selector",
                "involvedObject.name=slaac-b,type=Warning",
            ]);
            ev["items"]
                .as_array()?
                .iter()
                .find(|e| e["reason"] == "NetworkDeviceNotReady")
                .cloned()
        },
        || kit.kubectl_ok(&["describe", "pod", "slaac-b"]) + &tail(&d.output(), 40),
    );
    assert!(
        ev["message"]
            .as_str()
            .is_some_and(|m| m.contains("no autoconfigured IPv6 address")),
        "{ev}"
    );
    let claim_b = kit.pod_claim("slaac-b").expect("slaac-b's claim");
    let cond = wait_for(
        "SLAACReady=False in slaac-b's claim status",
        LIMIT,
        || {
            let c = kit.get_json(&["resourceclaim", &claim_b]);
            c["status"]["devices"].as_array()?.iter().find_map(|d| {
                d["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "SLAACReady")
                    .cloned()
            })
        },
        || tail(&d.output(), 40),
    );
    assert_eq!(
        (cond["status"].as_str(), cond["reason"].as_str()),
        (Some("False"), Some("AutoconfigurationTimedOut")),
        "{cond}"
    );
    wait_for(
        "drtsl1 back on the host as it was",
        LIMIT,
        || (host_link("drtsl1") == before1).then_some(()),
        || tail(&d.output(), 40),
    );
    assert!(
        !kit.pod_ready("slaac-b"),
        "slaac-b never runs without its address"
    );
    kit.kubectl_ok(&["delete", "pod", "slaac-b", "--wait=true", "--timeout=60s"]);
    for (kind, name) in [
        ("resourceclaimtemplate", "slaac-ra"),
        ("resourceclaimtemplate", "slaac-silent"),
        ("deviceclass", CLASS),
    ] {
        let _ = kit.kubectl(&["delete", kind, name]);
    }
    d.stop(Duration::from_secs(30));
    for l in ["drtsl0", "drtsl1"] {
        let _ = std::process::Command::new("ip")
            .args(["link", "del", l])
            .output();
    }
}
