//! Network namespaces for the driver's tests, built and inspected with iproute2 (an independent
//! oracle: the tests never judge our netlink code with our netlink code), and drivers and pods
//! on them. dranet-podnet's tests have the same namespace helpers (with more: crash re-runs, a
//! macvlan host) in their own support module, until a test kit crate holds them.

#![allow(dead_code)]

pub mod claims;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dranet_core::{Discover, Netdev, NetworkDevice};
use dranet_driver::{NetworkDriver, NetworkDriverBuilder, Rescan};
use dranet_nri::{Namespace, PodSandbox};
use dranet_podnet::PodNet;
use dranet_podnet::netns::Netns;
use dranet_podnet::rdma::NetnsMode;

use serde_json::Value;

/// A driver's builder for the node whose sysfs is `sysfs`, its state under `state` (the same
/// `state` again: as after a restart), in this network namespace, RDMA in shared mode; each
/// rescan counted in `scans`.
pub fn driver_builder(sysfs: &Path, state: &Path, scans: Arc<AtomicUsize>) -> NetworkDriverBuilder {
    let sysfs = sysfs.to_path_buf();
    let rescan: Rescan = Arc::new(move || {
        scans.fetch_add(1, Ordering::SeqCst);
        dranet_discovery::host(&sysfs, Default::default())
            .discover()
            .map_err(|e| e.to_string())
    });
    let podnet = PodNet::new(Netns::current().unwrap(), state.join("podnet")).unwrap();
    NetworkDriver::builder(podnet, state.join("driver"), rescan).rdma_mode(NetnsMode::Shared)
}

/// Root and iproute2 are needed; without them the test prints why and passes.
pub fn can_run(test: &str) -> bool {
    let uid = Command::new("id").arg("-u").output();
    let root = matches!(&uid, Ok(o) if String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root {
        eprintln!("SKIP {test}: needs root (network namespaces)");
        return false;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        eprintln!("SKIP {test}: needs iproute2 (`ip`) to build and inspect namespaces");
        return false;
    }
    true
}

/// A named network namespace, deleted on drop.
pub struct Ns {
    pub name: String,
}

impl Ns {
    pub fn new(tag: &str) -> Self {
        let name = format!("dranet-t-{tag}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run(&["ip", "netns", "add", &name]);
        let ns = Self { name };
        // No DAD: addresses are final at once, so dumps do not race the kernel's timers.
        for k in ["all", "default"] {
            ns.sysctl(&format!("net/ipv6/conf/{k}/accept_dad"), "0");
        }
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.name)
    }

    /// `ip -n <ns> args…`, panicking with stderr on failure.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["ip", "-n", &self.name];
        all.extend_from_slice(args);
        run(&all)
    }

    /// `ip -n <ns> args…`, returning whether it worked.
    pub fn try_ip(&self, args: &[&str]) -> bool {
        Command::new("ip")
            .args(["-n", &self.name])
            .args(args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    pub fn sysctl(&self, key: &str, value: &str) {
        run(&[
            "ip",
            "netns",
            "exec",
            &self.name,
            "sh",
            "-c",
            &format!("echo {value} > /proc/sys/{key}"),
        ]);
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["-j"];
        all.extend_from_slice(args);
        let out = self.ip(&all);
        if out.trim().is_empty() {
            return Value::Array(vec![]);
        }
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("ip -j {args:?}: {e}: {out}"))
    }

    /// Everything a host admin would notice: links, addresses, routes of every table, rules
    /// and permanent neighbours, with counters and timers removed.
    pub fn dump(&self) -> String {
        let mut links = self.json(&["-d", "link", "show"]);
        strip(
            &mut links,
            &[
                "stats",
                "stats64",
                "operstate",
                "link_netnsid",
                "linkmode",
                "carrier_changes",
                "carrier_up_count",
                "carrier_down_count",
                "num_tx_queues",
                "num_rx_queues",
                "inet6_addr_gen_mode",
            ],
        );
        // Carrier comes back asynchronously after a veth end moves between namespaces: like
        // operstate, the NO-CARRIER flag is a transient a loaded machine catches, not state.
        for l in links.as_array_mut().into_iter().flatten() {
            if let Some(flags) = l.get_mut("flags").and_then(Value::as_array_mut) {
                flags.retain(|f| f != "NO-CARRIER");
            }
        }
        let mut addrs = self.json(&["addr", "show"]);
        // A new address is flagged tentative until a kernel work item clears it, DAD or not (it
        // is off here): a transient a loaded machine catches, like NO-CARRIER above.
        strip(
            &mut addrs,
            &["operstate", "link_netnsid", "stats", "tentative"],
        );
        let parts = [
            ("links", links),
            ("addresses", addrs),
            (
                "routes4",
                sorted(self.json(&["-4", "route", "show", "table", "all"])),
            ),
            (
                "routes6",
                sorted(self.json(&["-6", "route", "show", "table", "all"])),
            ),
            ("rules4", self.json(&["-4", "rule", "show"])),
            ("rules6", self.json(&["-6", "rule", "show"])),
            (
                "neighbours",
                sorted(self.json(&["neigh", "show", "nud", "permanent"])),
            ),
        ];
        parts
            .iter()
            .map(|(k, v)| {
                format!(
                    "== {k}\n{}",
                    serde_json::to_string_pretty(v).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

fn strip(v: &mut Value, keys: &[&str]) {
    match v {
        Value::Object(m) => {
            for k in keys {
                m.remove(*k);
            }
            for (_, x) in m.iter_mut() {
                strip(x, keys);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| strip(x, keys)),
        _ => {}
    }
}

fn sorted(v: Value) -> Value {
    match v {
        Value::Array(mut a) => {
            a.sort_by_key(|x| x.to_string());
            Value::Array(a)
        }
        other => other,
    }
}

pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A host namespace with a link `v0` (a veth end; its peer `v0p` stays on the host) carrying
/// what a real host link carries: a non-default MTU and MAC, IPv4 and IPv6 addresses, a route
/// in main and one in table 100 with a rule selecting it, an IPv6 route and a permanent
/// neighbour.
pub fn host_with_veth(tag: &str) -> Ns {
    let h = Ns::new(tag);
    h.ip(&["link", "add", "v0", "type", "veth", "peer", "name", "v0p"]);
    busy_link(&h, "v0");
    h.ip(&["link", "set", "v0p", "up"]);
    h
}

fn busy_link(h: &Ns, dev: &str) {
    h.ip(&[
        "link",
        "set",
        dev,
        "mtu",
        "1400",
        "address",
        "02:00:00:00:00:01",
    ]);
    h.ip(&["addr", "add", "10.1.0.2/24", "dev", dev]);
    h.ip(&["addr", "add", "fd00:1::2/64", "dev", dev]);
    h.ip(&["link", "set", dev, "up"]);
    h.ip(&["route", "add", "10.2.0.0/16", "via", "10.1.0.1", "dev", dev]);
    h.ip(&[
        "route",
        "add",
        "10.3.0.0/16",
        "via",
        "10.1.0.1",
        "dev",
        dev,
        "table",
        "100",
    ]);
    h.ip(&[
        "rule", "add", "from", "10.1.0.2", "table", "100", "priority", "100",
    ]);
    h.ip(&[
        "-6",
        "route",
        "add",
        "fd00:2::/64",
        "via",
        "fd00:1::1",
        "dev",
        dev,
    ]);
    h.ip(&[
        "neigh",
        "add",
        "10.1.0.9",
        "lladdr",
        "02:00:00:00:00:09",
        "dev",
        dev,
        "nud",
        "permanent",
    ]);
}

/// A veth end as a netdev device, published as `dev-<name>` so that messages can be checked for
/// the host's link name apart from the device's.
pub fn veth(name: &str) -> NetworkDevice {
    NetworkDevice {
        name: format!("dev-{name}"),
        pci: None,
        netdev: Some(Netdev {
            name: name.into(),
            kind: Some("veth".into()),
            virtual_: true,
            ..Default::default()
        }),
        rdma: None,
    }
}

/// A driver whose node has the veth ends `links` of `host` (as [`veth`] devices), its state
/// under `state` (the same `state` again: as after a restart), RDMA in shared mode.
pub fn veth_driver(host: &Ns, state: &Path, links: &[&str]) -> NetworkDriver {
    let devices: Vec<NetworkDevice> = links.iter().map(|l| veth(l)).collect();
    let rescan: Rescan = Arc::new(move || {
        Ok(dranet_core::Inventory {
            devices: devices.clone(),
            ..Default::default()
        })
    });
    let podnet = PodNet::new(Netns::open(host.path()).unwrap(), state.join("podnet")).unwrap();
    NetworkDriver::builder(podnet, state.join("driver"), rescan)
        .rdma_mode(NetnsMode::Shared)
        .build()
        .unwrap()
}

/// Pod `pod-<uid>` (namespace `ml`, sandbox `sandbox-<uid>`) in the network namespace `netns`.
pub fn pod(uid: &str, netns: &Ns) -> PodSandbox {
    PodSandbox {
        id: format!("sandbox-{uid}"),
        name: format!("pod-{uid}"),
        namespace: "ml".into(),
        uid: uid.into(),
        namespaces: vec![Namespace {
            kind: "network".into(),
            path: netns.path().display().to_string(),
        }],
        ..Default::default()
    }
}
