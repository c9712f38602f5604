//! Named network namespaces, veths and the iproute2 oracle: tests build and inspect their
//! namespaces with `ip` (and `ip -j`), an independent judge of the project's netlink code.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

/// `ip ARGS`, which must succeed; its stdout.
pub fn ip(args: &[&str]) -> String {
    let mut all = vec!["ip"];
    all.extend_from_slice(args);
    run(&all)
}

/// `ip -j ARGS`, parsed (an empty answer is an empty array).
pub fn ip_json(args: &[&str]) -> Value {
    let mut all = vec!["-j"];
    all.extend_from_slice(args);
    let out = ip(&all);
    if out.trim().is_empty() {
        return Value::Array(vec![]);
    }
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ip -j {args:?}: {e}: {out}"))
}

/// A named network namespace, deleted on drop.
pub struct Ns {
    /// Its name under `/var/run/netns`.
    pub name: String,
}

impl Ns {
    /// `dranet-t-TAG-PID`, with loopback up and IPv6 DAD off; one left over is replaced.
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

    /// Where `ip netns` mounts it.
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

    /// Writes `/proc/sys/KEY` inside.
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

    /// Reads `/proc/sys/KEY` inside.
    pub fn read_sysctl(&self, key: &str) -> String {
        run(&[
            "ip",
            "netns",
            "exec",
            &self.name,
            "cat",
            &format!("/proc/sys/{key}"),
        ])
        .trim()
        .to_string()
    }

    /// A veth `link` (its peer `<link>p`), both ends up, `link` with `addr` and the namespace's
    /// default route through `via`: a node's or a pod's network as it is before a NIC arrives.
    pub fn veth_with_default(&self, link: &str, addr: &str, via: &str) {
        let peer = format!("{link}p");
        self.ip(&["link", "add", link, "type", "veth", "peer", "name", &peer]);
        self.ip(&["addr", "add", addr, "dev", link]);
        self.ip(&["link", "set", link, "up"]);
        self.ip(&["link", "set", &peer, "up"]);
        self.ip(&["route", "add", "default", "via", via, "dev", link]);
    }

    /// `ip -n <ns> -j args…`, parsed.
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

/// `PROGRAM ARGS…`, which must succeed; its stdout.
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

/// A host namespace with a macvlan `mv0` on a veth `low0`, configured like [`host_with_veth`].
pub fn host_with_macvlan(tag: &str) -> Ns {
    let h = Ns::new(tag);
    h.ip(&[
        "link", "add", "low0", "type", "veth", "peer", "name", "low0p",
    ]);
    h.ip(&["link", "set", "low0", "up"]);
    h.ip(&["link", "set", "low0p", "up"]);
    h.ip(&[
        "link", "add", "link", "low0", "name", "mv0", "type", "macvlan", "mode", "bridge",
    ]);
    busy_link(&h, "mv0");
    h
}

/// Gives `dev` in `h` what a real host link carries (see [`host_with_veth`]).
pub fn busy_link(h: &Ns, dev: &str) {
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

/// Veth pairs made by the test, deleted when dropped (wherever their ends are).
#[derive(Default)]
pub struct Veths(Vec<String>);

impl Veths {
    /// A pair `name`/`namep`, both up (one left over from a killed run is replaced).
    pub fn add(&mut self, name: &str) {
        let _ = Command::new("ip")
            .args(["link", "del", name])
            .stderr(Stdio::null())
            .status();
        let peer = format!("{name}p");
        ip(&["link", "add", name, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", name, "up"]);
        ip(&["link", "set", &peer, "up"]);
        self.0.push(name.to_string());
    }

    /// Deletes the pair now.
    pub fn del(&mut self, name: &str) {
        ip(&["link", "del", name]);
        self.0.retain(|n| n != name);
    }
}

impl Drop for Veths {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip")
                .args(["link", "del", n])
                .stderr(Stdio::null())
                .status();
        }
    }
}
