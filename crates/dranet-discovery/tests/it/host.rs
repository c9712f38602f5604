//! Discovery on this machine's kernel: real /sys through libudev and the rooted reader, netlink
//! and uevents in network namespaces the tests create (root only; skipped with a message
//! otherwise).

use std::os::fd::AsFd;
use std::process::Command;
use std::time::Duration;

use dranet_core::{Discover, IpFamily, LinkSource, MAIN_TABLE};
use dranet_discovery::{
    Discovery, Enumerate, NetlinkLinks, Options, Sysfs, SysfsEnumerator, UdevEnumerator,
};

#[test]
fn udev_and_the_rooted_reader_agree_on_the_real_sys() {
    let sysfs = Sysfs::new("/sys");
    let by_udev = UdevEnumerator.enumerate(&sysfs).expect("udev enumeration");
    let by_walk = SysfsEnumerator.enumerate(&sysfs).expect("sysfs walk");
    assert!(
        !by_walk.pci.is_empty() || !by_walk.net.is_empty(),
        "this machine shows no devices at all"
    );
    assert_eq!(by_udev, by_walk);
    let a = Discovery::new(
        Sysfs::new("/sys"),
        UdevEnumerator,
        NetlinkLinks,
        Options::default(),
    )
    .discover()
    .expect("udev discovery");
    let b = Discovery::new(
        Sysfs::new("/sys"),
        SysfsEnumerator,
        NetlinkLinks,
        Options::default(),
    )
    .discover()
    .expect("walk discovery");
    assert_eq!(a, b);
}

use dranet_testkit::is_root;

fn ip(args: &[&str]) {
    dranet_testkit::netns::ip(args);
}

/// A named network namespace, deleted on drop.
struct Netns(String);

impl Netns {
    /// `ip -n <this namespace> <cmd>`, the words of `cmd` split on spaces.
    fn ip(&self, cmd: &str) {
        let mut args = vec!["-n", self.0.as_str()];
        args.extend(cmd.split(' '));
        ip(&args);
    }

    fn new(tag: &str) -> Self {
        let name = format!("dranet-test-{tag}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        ip(&["netns", "add", &name]);
        Netns(name)
    }

    /// Runs `f` on a thread that has entered the namespace.
    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{}", self.0);
        std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).expect("open netns");
            nix::sched::setns(fd.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
        .join()
        .expect("netns thread")
    }
}

impl Netns {
    /// Discovery as the CLI runs it, inside the namespace. /sys shows the mounting namespace's
    /// netdevs: the thread mounts a private sysfs of its own.
    fn discover(&self, options: Options) -> dranet_core::Inventory {
        self.run(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).expect("unshare mount ns");
            nix::mount::mount(
                None::<&str>,
                "/",
                None::<&str>,
                nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .expect("make / private");
            let dir = tempfile::tempdir().expect("tempdir");
            nix::mount::mount(
                Some("sysfs"),
                dir.path(),
                Some("sysfs"),
                nix::mount::MsFlags::empty(),
                None::<&str>,
            )
            .expect("mount sysfs");
            let inv = Discovery::new(
                Sysfs::new(dir.path()),
                SysfsEnumerator,
                NetlinkLinks,
                options,
            )
            .discover();
            let _ = nix::mount::umount(dir.path());
            inv.expect("discovery")
        })
    }
}

/// The published devices without a PCI function (the test's veths), by name.
fn virtual_names(inv: &dranet_core::Inventory) -> Vec<&str> {
    inv.devices
        .iter()
        .filter(|d| d.pci.is_none())
        .map(|d| d.name.as_str())
        .collect()
}

impl Netns {
    /// Runs `f` with an rtnetlink handle whose socket is in the namespace, on a runtime of its own.
    fn netlink<F: std::future::Future<Output = ()>>(
        &self,
        f: impl FnOnce(rtnetlink::Handle) -> F + Send + 'static,
    ) {
        self.run(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let (conn, handle, _) = rtnetlink::new_connection().expect("netlink");
                tokio::spawn(conn);
                f(handle).await
            })
        })
    }

    /// A link `upl0` carrying the namespace's IPv4 default, and its peer `wk0`.
    fn with_uplink(&self) {
        self.ip("link add upl0 type veth peer name wk0");
        self.ip("addr add 10.78.0.2/24 dev upl0");
        self.ip("link set upl0 up");
        self.ip("link set wk0 up");
        self.ip("route add default via 10.78.0.1 dev upl0");
    }
}

/// The index of link `name`.
async fn index(handle: &rtnetlink::Handle, name: &str) -> u32 {
    use futures::TryStreamExt;
    handle
        .link()
        .get()
        .match_name(name)
        .execute()
        .try_next()
        .await
        .expect("get link")
        .expect("link exists")
        .header
        .index
}

/// What discovery left out, and why.
fn reasons(inv: &dranet_core::Inventory) -> Vec<(&str, &str)> {
    inv.excluded
        .iter()
        .map(|e| (e.name.as_str(), e.reason.as_str()))
        .collect()
}

/// Adds the IPv6 default route a router advertisement from `fe80::1` on `dev` makes the kernel
/// install (`proto ra`, metric 1024), through rtnetlink as the kernel's own would appear.
fn add_router_advertised_default(ns: &Netns, dev: &'static str) {
    ns.netlink(move |handle| async move {
        let route = rtnetlink::RouteMessageBuilder::<std::net::Ipv6Addr>::new()
            .output_interface(index(&handle, dev).await)
            .gateway("fe80::1".parse().expect("address"))
            .protocol(rtnetlink::packet_route::route::RouteProtocol::Ra)
            .priority(1024)
            .build();
        handle
            .route()
            .add(route)
            .execute()
            .await
            .expect("add the router-advertised default");
    })
}

#[test]
fn a_router_advertised_ipv6_default_beside_an_ipv4_default_is_an_uplink() {
    if !is_root() {
        eprintln!(
            "SKIP a_router_advertised_ipv6_default_beside_an_ipv4_default_is_an_uplink: needs root"
        );
        return;
    }
    let ns = Netns::new("ra");
    ns.with_uplink();
    ns.ip("link add ra0 type veth peer name ra1");
    ns.ip("link set ra0 up");
    ns.ip("link set ra1 up");
    add_router_advertised_default(&ns, "ra0");

    let inv = ns.discover(Options::default());
    let names = virtual_names(&inv);
    assert!(
        !names.contains(&"ra0"),
        "the host's IPv6 default link was published: {names:?}"
    );
    assert!(
        names.contains(&"ra1") && names.contains(&"wk0"),
        "{names:?}"
    );
    assert_eq!(
        reasons(&inv),
        [
            (
                "ra0",
                "uplink: IPv6 default via fe80::1, table main, metric 1024, proto ra"
            ),
            (
                "upl0",
                "uplink: IPv4 default via 10.78.0.1, table main, metric 0, proto boot"
            ),
        ]
    );

    // The operator's list overrides detection: ra0 is published.
    let named = ns.discover(Options {
        uplink_interfaces: Some(vec!["upl0".into()]),
        ..Options::default()
    });
    assert!(
        virtual_names(&named).contains(&"ra0"),
        "{:?}",
        named.excluded
    );
    assert_eq!(named.excluded.len(), 1, "{:?}", named.excluded);
    assert_eq!(named.excluded[0].name, "upl0");
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn netlink_reports_addresses_default_routes_and_kinds() {
    if !is_root() {
        eprintln!("SKIP netlink_reports_addresses_default_routes_and_kinds: needs root");
        return;
    }
    let ns = Netns::new("nl");
    ns.ip("link add up0 type veth peer name side0");
    ns.ip("link add mv0 link side0 type macvlan mode bridge");
    ns.ip("addr add 10.77.0.2/24 dev up0");
    ns.ip("addr add fd77::2/64 dev up0 nodad");
    for l in ["up0", "side0", "mv0"] {
        ns.ip(&format!("link set {l} up"));
    }
    ns.ip("route add default via 10.77.0.1 dev up0");
    // Per-rail policy routing and a backup default: seen with their table and metric.
    ns.ip("addr add 10.77.1.2/24 dev side0");
    ns.ip("route add default via 10.77.1.1 dev side0 table 101");
    ns.ip("addr add 10.77.2.2/24 dev mv0");
    ns.ip("route add default via 10.77.2.1 dev mv0 metric 500");
    let links = ns.run(|| NetlinkLinks.links().expect("netlink dump"));
    let get = |name: &str| {
        links
            .iter()
            .find(|l| l.name == name)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let up0 = get("up0");
    assert_eq!(up0.kind.as_deref(), Some("veth"));
    assert_eq!(up0.ipv4, vec!["10.77.0.2/24".to_string()]);
    assert_eq!(up0.ipv6, vec!["fd77::2/64".to_string()]);
    let v4 = |name: &str| {
        get(name)
            .default_routes
            .iter()
            .filter(|r| r.family == IpFamily::Ipv4)
            .map(|r| (r.table, r.metric, r.gateway.clone().unwrap_or_default()))
            .collect::<Vec<_>>()
    };
    assert_eq!(v4("up0"), [(MAIN_TABLE, 0, "10.77.0.1".to_string())]);
    assert_eq!(v4("side0"), [(101, 0, "10.77.1.1".to_string())]);
    assert_eq!(v4("mv0"), [(MAIN_TABLE, 500, "10.77.2.1".to_string())]);
    let up = dranet_core::uplinks(
        links
            .iter()
            .map(|l| (l.name.as_str(), l.default_routes.as_slice())),
    );
    assert_eq!(up.keys().collect::<Vec<_>>(), ["up0"]);
    let mv0 = get("mv0");
    assert_eq!(mv0.kind.as_deref(), Some("macvlan"));
    assert_eq!(mv0.lower.as_deref(), Some("side0"));
    assert!(get("lo").ipv4.contains(&"127.0.0.1/8".to_string()) || get("lo").ipv4.is_empty());
}

#[test]
fn a_veth_created_during_the_test_is_seen_by_the_uevent_monitor() {
    if !is_root() {
        eprintln!("SKIP a_veth_created_during_the_test_is_seen_by_the_uevent_monitor: needs root");
        return;
    }
    let ns = Netns::new("ue");
    let name = ns.0.clone();
    let events = ns.run(move || {
        // Net uevents go to listeners in the device's namespace: listen inside it.
        let mut mon = dranet_discovery::monitor::Monitor::new().expect("monitor");
        ip(&[
            "-n", &name, "link", "add", "hp0", "type", "veth", "peer", "name", "hp1",
        ]);
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            match mon.next(Duration::from_millis(200)).expect("monitor read") {
                Some(ev) => {
                    seen.push(ev.clone());
                    if seen.iter().any(|e| e.sysname == "hp0")
                        && seen.iter().any(|e| e.sysname == "hp1")
                    {
                        break;
                    }
                }
                None => continue,
            }
        }
        seen
    });
    for dev in ["hp0", "hp1"] {
        assert!(
            events
                .iter()
                .any(|e| e.action == "add" && e.subsystem == "net" && e.sysname == dev),
            "no add event for {dev}: {events:?}"
        );
    }
}

#[test]
fn discovery_in_a_namespace_publishes_veths_but_not_the_default_route_link() {
    if !is_root() {
        eprintln!(
            "SKIP discovery_in_a_namespace_publishes_veths_but_not_the_default_route_link: needs root"
        );
        return;
    }
    let ns = Netns::new("disc");
    ns.with_uplink();
    // A rail with a default in its own table only, and a backup default: both published.
    ns.ip("link add rail0 type veth peer name rail1");
    ns.ip("addr add 10.79.0.2/24 dev rail0");
    ns.ip("addr add 10.79.1.2/24 dev rail1");
    ns.ip("link set rail0 up");
    ns.ip("link set rail1 up");
    ns.ip("route add default via 10.79.0.1 dev rail0 table 101");
    ns.ip("route add default via 10.79.1.1 dev rail1 metric 500");
    let inv = ns.discover(Options::default());
    let names = virtual_names(&inv);
    assert!(names.contains(&"wk0"), "{names:?} {:?}", inv.warnings);
    assert!(
        !names.contains(&"upl0"),
        "the default-route link was published: {names:?}"
    );
    assert!(names.contains(&"rail0"), "policy-table default: {names:?}");
    assert!(names.contains(&"rail1"), "backup default: {names:?}");
    assert_eq!(
        reasons(&inv),
        [(
            "upl0",
            "uplink: IPv4 default via 10.78.0.1, table main, metric 0, proto boot"
        )]
    );
    assert!(!names.contains(&"lo"));
}

#[test]
fn a_burst_of_uevents_is_one_change() {
    if !is_root() {
        eprintln!("SKIP a_burst_of_uevents_is_one_change: needs root");
        return;
    }
    let ns = Netns::new("burst");
    let name = ns.0.clone();
    let (first, second) = ns.run(move || {
        let mut mon = dranet_discovery::monitor::Monitor::new().expect("monitor");
        for i in 0..3 {
            ip(&[
                "-n",
                &name,
                "link",
                "add",
                &format!("b{i}a"),
                "type",
                "veth",
                "peer",
                "name",
                &format!("b{i}b"),
            ]);
        }
        let first = mon
            .next_change(Duration::from_secs(5), Duration::from_millis(300))
            .expect("read");
        let second = mon
            .next_change(Duration::from_millis(200), Duration::from_millis(50))
            .expect("read");
        (first, second)
    });
    let added: Vec<_> = first
        .iter()
        .filter(|e| e.action == "add" && e.subsystem == "net")
        .map(|e| e.sysname.as_str())
        .collect();
    for dev in ["b0a", "b0b", "b1a", "b1b", "b2a", "b2b"] {
        assert!(
            added.contains(&dev),
            "{dev} not in the one change: {first:?}"
        );
    }
    assert!(second.is_empty(), "{second:?}");
}

use dranet_testkit::bpf;

#[test]
fn tc_and_tcx_programs_on_a_link_are_published() {
    if !is_root() {
        eprintln!("SKIP tc_and_tcx_programs_on_a_link_are_published: needs root");
        return;
    }
    let ns = Netns::new("ebpf");
    ns.ip("link add tc0 type veth peer name tcx0");
    ns.ip("link add none0 type veth peer name none1");
    ns.netlink(|handle| async move {
        let prog = bpf::load_pass_program("dranet_pass");
        bpf::attach_tc_ingress(&handle, index(&handle, "tc0").await, &prog, "dranet_tc").await;
        bpf::attach_tcx_ingress(index(&handle, "tcx0").await, &prog);
    });

    let inv = ns.discover(Options::default());
    let attrs: std::collections::BTreeMap<String, dranet_core::attributes::Attributes> =
        dranet_core::slice::published_devices(&inv, Default::default(), &dranet_core::NoCloud)
            .0
            .into_iter()
            .map(|d| (d.name, d.attributes))
            .collect();
    use dranet_core::attributes::AttributeValue::{Bool, String as S};
    let get = |dev: &str, k: &str| attrs[dev].get(k).cloned();
    assert_eq!(get("tc0", "ebpf"), Some(Bool(true)), "{:?}", attrs["tc0"]);
    assert_eq!(get("tc0", "tcFilterNames"), Some(S("dranet_tc".into())));
    assert_eq!(get("tc0", "tcxProgramNames"), None);
    assert_eq!(get("tcx0", "ebpf"), Some(Bool(true)), "{:?}", attrs["tcx0"]);
    assert_eq!(
        get("tcx0", "tcxProgramNames"),
        Some(S("dranet_pass".into()))
    );
    assert_eq!(get("tcx0", "tcFilterNames"), None);
    assert_eq!(get("none0", "ebpf"), Some(Bool(false)));
    assert_eq!(get("none0", "tcFilterNames"), None);
}
