//! A real DHCP server for the DHCP tests: dnsmasq on one end of a veth, in a server namespace of
//! its own, and the other end, down, in a host namespace for the client under test.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::netns::Ns;

/// The server's address on its end of the veth (`10.77.0.1/24`); leases come from
/// `10.77.0.50`–`10.77.0.99`.
pub const SERVER: &str = "10.77.0.1";

/// Whether `tool` is installed; without it says why `test` is skipped (naming the Debian
/// `package`) and returns false.
pub fn has(test: &str, tool: &str, package: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        crate::skip(
            test,
            &format!("needs {tool} (Debian package {package}; .ci/deps installs it)"),
        );
    }
    found
}

/// A host namespace with the down veth end `d0`, whose peer `d0s` is in a server namespace
/// with the address [`SERVER`]`/24`.
pub struct Net {
    /// The client's side: `d0`, down.
    pub host: Ns,
    /// The server's side: `d0s`, up.
    pub srv: Ns,
}

impl Net {
    /// Both namespaces (`TAG-h`, `TAG-s`) and the veth between them.
    pub fn new(tag: &str) -> Net {
        let host = Ns::new(&format!("{tag}-h"));
        let srv = Ns::new(&format!("{tag}-s"));
        host.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d0s"]);
        host.ip(&["link", "set", "d0s", "netns", &srv.name]);
        srv.ip(&["addr", "add", &format!("{SERVER}/24"), "dev", "d0s"]);
        srv.ip(&["link", "set", "d0s", "up"]);
        Net { host, srv }
    }
}

/// dnsmasq serving DHCP on `d0s` (leases of an hour, router and MTU 1400 options), its lease
/// file and log in a directory of its own; killed on drop.
pub struct Dnsmasq {
    child: Child,
    dir: tempfile::TempDir,
}

impl Dnsmasq {
    /// Starts it in `srv` and waits until it serves.
    pub fn start(srv: &Ns) -> Dnsmasq {
        Dnsmasq::start_with(srv, &[])
    }

    /// [`Dnsmasq::start`] with `extra` arguments.
    pub fn start_with(srv: &Ns, extra: &[&str]) -> Dnsmasq {
        let dir = tempfile::tempdir().expect("a temporary directory for dnsmasq");
        let p = |f: &str| dir.path().join(f).display().to_string();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &srv.name,
                "dnsmasq",
                "--keep-in-foreground",
            ])
            .args([
                "--conf-file=/dev/null",
                "--port=0",
                "--bind-interfaces",
                "--interface=d0s",
                "--except-interface=lo",
                "--user=root",
                "--dhcp-authoritative",
                "--dhcp-range=10.77.0.50,10.77.0.99,255.255.255.0,1h",
                &format!("--dhcp-option=option:router,{SERVER}"),
                "--dhcp-option=option:mtu,1400",
                "--log-dhcp",
            ])
            .args(extra)
            .arg(format!("--dhcp-leasefile={}", p("leases")))
            .arg(format!("--log-facility={}", p("log")))
            .arg(format!("--pid-file={}", p("pid")))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("dnsmasq");
        let d = Dnsmasq { child, dir };
        // Serving once it has logged its DHCP range.
        d.wait_for("dnsmasq: log", |log| log.contains("DHCP, IP range"));
        d
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// Its lease file as it stands.
    pub fn leases(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("leases")).unwrap_or_default()
    }

    /// Polls the log until `ok` holds (10 s at most).
    pub fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) {
        for _ in 0..200 {
            if ok(&self.log()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{what}: not seen; log:\n{}", self.log());
    }

    /// Polls the lease file until `ok` holds (10 s at most).
    pub fn wait_for_leases(&self, what: &str, ok: impl Fn(&str) -> bool) {
        for _ in 0..200 {
            if ok(&self.leases()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "{what}: lease file {:?}; log:\n{}",
            self.leases(),
            self.log()
        );
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
