//! Veths on the host for the real-cluster tests that give a pod a NIC, and the host's view of a
//! link to compare before and after.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

/// A `--filter` that publishes the usual devices plus the tests' veths, named `drt*` (the default
/// filter drops veths).
pub const VETH_FILTER: &str = r#"!("type" in device.attributes["dra.net"]) || device.attributes["dra.net"].type != "veth" || device.attributes["dra.net"].ifName.startsWith("drt")"#;

/// `ip ARGS`, which must succeed; its stdout.
pub fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
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

/// What the host knows of a link, for before/after comparison: name, MAC, MTU, admin state,
/// IPv4 and global IPv6 addresses. `None` when the host has no such link.
pub fn host_link(name: &str) -> Option<serde_json::Value> {
    let out = Command::new("ip")
        .args(["-j", "addr", "show", "dev", name])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let l = v.get(0)?;
    let addrs: BTreeSet<String> = l["addr_info"]
        .as_array()?
        .iter()
        .filter(|a| a["scope"] != "link")
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
        .collect();
    let up = l["flags"].as_array()?.iter().any(|f| f == "UP");
    Some(serde_json::json!({
        "name": l["ifname"], "mac": l["address"], "mtu": l["mtu"], "up": up, "addrs": addrs,
    }))
}
