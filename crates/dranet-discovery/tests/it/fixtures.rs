//! Discovery on the generated fixtures: the seeds' tables, complete attribute sets, bad input.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dranet_core::slice::published_devices;
use dranet_core::{AttributeOptions, AttributeValue, Attributes, Discover, Inventory, Relation};
use dranet_discovery::{
    DeviceNames, Discovery, Enumerate, FixtureLinks, Options, Sysfs, SysfsEnumerator,
};

fn nodes() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/nodes")
}

fn discover_at(dir: &Path, opts: Options) -> Inventory {
    dranet_discovery::host(&dir.join("sys"), opts)
        .discover()
        .expect("discovery")
}

fn discover(name: &str) -> Inventory {
    discover_at(&nodes().join(name), Options::default())
}

fn attrs(inv: &Inventory, opts: AttributeOptions) -> BTreeMap<String, Attributes> {
    let (devs, warnings) = published_devices(inv, opts, &dranet_core::NoCloud);
    assert!(warnings.is_empty(), "{warnings:?}");
    devs.into_iter().map(|d| (d.name, d.attributes)).collect()
}

/// Every file and symlink under `dir`, with contents or targets.
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            if rel == Path::new("expected-attributes.json") {
                continue; // written by the test below, not by the generator
            }
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(
                    rel,
                    format!("-> {}", std::fs::read_link(&p).unwrap().display()),
                );
            } else if meta.is_dir() {
                stack.push(p);
            } else {
                out.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn committed_fixtures_match_their_generator() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, generate) in dranet_discovery::fixture::NODES {
        let fresh = tmp.path().join(name);
        generate(&fresh).unwrap();
        let committed = tree(&nodes().join(name));
        let generated = tree(&fresh);
        assert!(
            committed == generated,
            "testdata/nodes/{name} is stale: run `cargo run -p dranet-discovery --example gen-fixtures -- testdata/nodes`"
        );
    }
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::String(v.into())
}

#[test]
fn gb300_reproduces_the_seed_nic_table() {
    let inv = discover("azure-nd-gb300-v6");
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    let a = attrs(&inv, AttributeOptions::default());
    // The seeds' table: name, pciAddress, rdmaDevice, NUMA, ibOnly; nothing else is published
    // (not the netvsc uplink, not its accelerated-networking VF).
    let table = [
        ("pci-0101-00-00-0", "0101:00:00.0", "mlx5_0", 0),
        ("pci-0102-00-00-0", "0102:00:00.0", "mlx5_1", 0),
        ("pci-0103-00-00-0", "0103:00:00.0", "mlx5_2", 1),
        ("pci-0104-00-00-0", "0104:00:00.0", "mlx5_3", 1),
    ];
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        table.iter().map(|t| t.0).collect::<Vec<_>>()
    );
    for (name, addr, rdma, numa) in table {
        let root = format!("pci{}:00", &addr[..4]);
        let expected: Attributes = [
            ("pciAddress", s(addr)),
            ("pciVendor", s("Mellanox Technologies")),
            ("pciDevice", s("ConnectX Family mlx5Gen Virtual Function")),
            ("pciSubsystem", s("0023")),
            ("numaNode", AttributeValue::Int(numa)),
            ("sriov", AttributeValue::Bool(false)),
            ("isSriovVf", AttributeValue::Bool(false)),
            ("virtual", AttributeValue::Bool(false)),
            ("rdma", AttributeValue::Bool(true)),
            ("rdmaDevice", s(rdma)),
            ("ibOnly", AttributeValue::Bool(true)),
            ("resource.kubernetes.io/pciBusID", s(addr)),
            ("resource.kubernetes.io/pcieRoot", s(&root)),
            ("resource.kubernetes.io/numaNode", AttributeValue::Int(numa)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(a[name], expected, "{name}");
    }
    // Each NIC carries exactly the char devices the seeds saw injected.
    let d = inv.device("pci-0101-00-00-0").unwrap();
    let chars: Vec<(String, u32, u32)> = d
        .rdma
        .as_ref()
        .unwrap()
        .char_devices
        .iter()
        .map(|c| (c.path.clone(), c.major, c.minor))
        .collect();
    assert_eq!(
        chars,
        vec![
            ("/dev/infiniband/uverbs0".into(), 231, 192),
            ("/dev/infiniband/umad0".into(), 231, 0),
            ("/dev/infiniband/issm0".into(), 231, 64),
            ("/dev/infiniband/rdma_cm".into(), 10, 58),
        ]
    );
    let d3 = inv.device("pci-0104-00-00-0").unwrap();
    assert!(
        d3.rdma
            .as_ref()
            .unwrap()
            .char_devices
            .iter()
            .any(|c| c.path == "/dev/infiniband/uverbs3" && c.minor == 195)
    );
}

#[test]
fn gb300_topology_matches_the_seed_matrix() {
    let inv = discover("azure-nd-gb300-v6");
    let gpus: Vec<String> = inv.gpus.iter().map(|g| g.address.to_string()).collect();
    assert_eq!(
        gpus,
        [
            "0008:06:00.0",
            "0009:06:00.0",
            "0018:06:00.0",
            "0019:06:00.0"
        ]
    );
    use Relation::{Node, Sys};
    let m = inv.gpu_nic_matrix();
    assert_eq!(
        m.nics,
        [
            "pci-0101-00-00-0",
            "pci-0102-00-00-0",
            "pci-0103-00-00-0",
            "pci-0104-00-00-0"
        ]
    );
    assert_eq!(m.get("0018:06:00.0", "pci-0103-00-00-0"), Some(Node));
    // The nearest NICs of GPU 2 (NUMA 1) are mlx5_2 and mlx5_3.
    let nearest: Vec<_> = inv
        .nearest_nics(&inv.gpus[2])
        .iter()
        .map(|(d, r)| (d.name.as_str(), *r))
        .collect();
    assert_eq!(
        nearest,
        [
            ("pci-0103-00-00-0", Node),
            ("pci-0104-00-00-0", Node),
            ("pci-0101-00-00-0", Sys),
            ("pci-0102-00-00-0", Sys)
        ]
    );
    assert_eq!(
        m.relations,
        vec![
            vec![Node, Node, Sys, Sys],
            vec![Node, Node, Sys, Sys],
            vec![Sys, Sys, Node, Node],
            vec![Sys, Sys, Node, Node]
        ]
    );
}

#[test]
fn bare_metal_mi300x_pairs_each_gpu_with_its_switch_nic() {
    let inv = discover("bm-mi300x-8");
    assert_eq!(inv.gpus.len(), 8);
    let m = inv.gpu_nic_matrix().relations;
    for (g, row) in m.iter().enumerate() {
        for (n, r) in row.iter().enumerate() {
            let expected = if g == n {
                Relation::Pix
            } else if (g < 4) == (n < 4) {
                Relation::Node
            } else {
                Relation::Sys
            };
            assert_eq!(*r, expected, "GPU{g} NIC{n}");
        }
    }
    let names: Vec<_> = inv
        .devices
        .iter()
        .map(|d| d.netdev.as_ref().unwrap().name.clone())
        .collect();
    assert_eq!(
        names,
        (0..8).map(|i| format!("rdma{i}")).collect::<Vec<_>>()
    );
    // The front-end NIC carries the default route: neither it nor its RDMA link is published.
    assert!(
        inv.devices
            .iter()
            .all(|d| d.rdma.as_ref().unwrap().name != "mlx5_8")
    );
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
}

#[test]
fn mi300x_vm_ipoib_follows_move_ib_interfaces() {
    let dir = nodes().join("azure-nd-mi300x-v5");
    let moved = attrs(
        &discover_at(&dir, Options::default()),
        AttributeOptions::default(),
    );
    assert_eq!(moved.len(), 8);
    let d0 = &moved["pci-0101-00-00-0"];
    assert_eq!(d0["ifName"], s("ib0"));
    assert_eq!(d0["encapsulation"], s("infiniband"));
    assert_eq!(d0["type"], s("ipoib"));
    assert_eq!(d0["ibOnly"], AttributeValue::Bool(false));
    let numa: Vec<_> = moved.values().map(|a| a["numaNode"].clone()).collect();
    assert_eq!(
        numa.iter()
            .filter(|n| **n == AttributeValue::Int(0))
            .count(),
        4
    );

    let ib_only = attrs(
        &discover_at(
            &dir,
            Options {
                move_ib_interfaces: false,
                ..Options::default()
            },
        ),
        AttributeOptions::default(),
    );
    assert_eq!(ib_only.len(), 8);
    for a in ib_only.values() {
        assert_eq!(a["ibOnly"], AttributeValue::Bool(true));
        assert!(!a.contains_key("ifName"));
    }
}

#[test]
fn sriov_pf_and_vfs() {
    let inv = discover("sriov-64vf");
    let a = attrs(&inv, AttributeOptions::default());
    assert_eq!(a.len(), 65);
    let pf = &a["pci-0000-3b-00-0"];
    assert_eq!(pf["sriov"], AttributeValue::Bool(true));
    assert_eq!(pf["sriovVfs"], AttributeValue::Int(64));
    assert_eq!(pf["isSriovVf"], AttributeValue::Bool(false));
    let vf = &a["pci-0000-3b-08-7"];
    assert_eq!(vf["isSriovVf"], AttributeValue::Bool(true));
    assert_eq!(vf["ifName"], s("ens1f0v63"));
    assert!(!vf.contains_key("sriovVfs"));
    let d = inv.device("pci-0000-3b-08-7").unwrap();
    assert_eq!(
        d.pci.as_ref().unwrap().sriov,
        dranet_core::SriovRole::VirtualFunction {
            pf: Some("0000:3b:00.0".parse().unwrap())
        }
    );
}

#[test]
fn edge_cases_are_skipped_or_trimmed_with_warnings_naming_the_path() {
    let inv = discover("edge-cases");
    let names: Vec<_> = inv.devices.iter().map(|d| d.name.as_str()).collect();
    // Not the uplink 00:02.0 nor the macvlan mvlan0 stacked on it, not vfio 00:06.0, not unbound 00:07.0, not 00:09.0 (no vendor file).
    assert_eq!(
        names,
        [
            "cni0",
            "ifb0",
            "net-kzsxi2c7ii",
            "pci-0000-00-03-0",
            "pci-0000-00-05-0",
            "pci-0000-00-08-0",
            "pci-0000-00-0a-0",
            "pci-0000-00-0b-0",
            "veth-a"
        ]
    );
    let w = inv.warnings.join("\n");
    assert!(!w.contains("rxe"), "soft-RoCE links were dropped: {w}");
    for needle in [
        "0000:00:05.0/numa_node: not a NUMA node: \"banana\"",
        "0000:00:09.0/vendor: No such file",
        "class/net/ghost0: dangling link",
        "0000:00:06.0 is bound to vfio-pci",
        "0000:00:07.0 is bound to no driver",
    ] {
        assert!(w.contains(needle), "missing warning {needle:?} in\n{w}");
    }
    let a = attrs(&inv, AttributeOptions::default());
    // numa_node -1 and garbage: no NUMA attributes at all.
    for d in ["pci-0000-00-03-0", "pci-0000-00-05-0"] {
        assert!(
            !a[d].contains_key("numaNode") && !a[d].contains_key("resource.kubernetes.io/numaNode"),
            "{d}"
        );
    }
    // The virtio netdev hangs under virtio0, still its PCI function's.
    assert_eq!(a["pci-0000-00-03-0"]["ifName"], s("eth1"));
    assert_eq!(a["pci-0000-00-03-0"]["ipv4"], s("172.16.0.3/24"));
    assert_eq!(a["pci-0000-00-03-0"]["ipv6"], s("fd00::3/64"));
    // IPoIB belongs to its HCA; the class-0c06 HCA is IB-only with two ports' mad devices.
    assert_eq!(a["pci-0000-00-05-0"]["ifName"], s("ib0"));
    assert_eq!(a["pci-0000-00-08-0"]["ibOnly"], AttributeValue::Bool(true));
    let cx3 = inv
        .device("pci-0000-00-08-0")
        .unwrap()
        .rdma
        .as_ref()
        .unwrap();
    assert_eq!(cx3.ports.len(), 2);
    assert_eq!(
        cx3.char_devices
            .iter()
            .filter(|c| c.path.contains("umad"))
            .count(),
        2
    );
    // Non-PCI netdevs: names kept or encoded, marked virtual.
    assert_eq!(a["veth-a"]["type"], s("veth"));
    assert_eq!(a["veth-a"]["virtual"], AttributeValue::Bool(true));
    assert_eq!(a["net-kzsxi2c7ii"]["ifName"], s("Veth_B"));
}

#[test]
fn soft_roce_links_attach_to_the_device_owning_their_netdev() {
    let inv = discover("edge-cases");
    let rdma_of = |d: &str| {
        inv.device(d)
            .and_then(|d| d.rdma.as_ref())
            .map(|l| l.name.clone())
    };
    // rxe0 is on rail0, the netdev of PCI function 00:0a.0; rxe1 on the veth.
    assert_eq!(rdma_of("pci-0000-00-0a-0").as_deref(), Some("rxe0"));
    assert_eq!(rdma_of("veth-a").as_deref(), Some("rxe1"));
    let a = attrs(&inv, AttributeOptions::default());
    assert_eq!(a["pci-0000-00-0a-0"]["rdma"], AttributeValue::Bool(true));
    assert_eq!(a["pci-0000-00-0a-0"]["ifName"], s("rail0"));
    let uverbs = inv
        .device("pci-0000-00-0a-0")
        .unwrap()
        .rdma
        .as_ref()
        .unwrap();
    assert!(
        uverbs
            .char_devices
            .iter()
            .any(|c| c.path.contains("uverbs")),
        "{uverbs:?}"
    );
}

#[test]
fn the_uplink_is_the_lowest_metric_main_table_default_and_is_explained() {
    let inv = discover("edge-cases");
    let excluded: Vec<(&str, &str)> = inv
        .excluded
        .iter()
        .map(|e| (e.name.as_str(), e.reason.as_str()))
        .collect();
    assert_eq!(
        excluded,
        [
            (
                "eth0",
                "uplink: IPv4 default via 10.224.0.1, table main, metric 100, proto dhcp \
                 (its PCI function 0000:00:02.0 is not published either)"
            ),
            ("mvlan0", "stacked on eth0, part of the node's uplink"),
            (
                "rail2",
                "uplink: IPv6 default via fe80::1, table main, metric 1024, proto ra \
                 (its PCI function 0000:00:0c.0 is not published either)"
            ),
            ("rxe2", "RDMA link on eth0, which is not published"),
            (
                "veth0c1a2b3d",
                "a port of the bridge cni0: taking it would break cni0"
            ),
        ]
    );
    // A policy-table default (rail0) and a backup default (rail1) do not make an uplink; the
    // host's only IPv6 default does, router-advertised or not (rail2).
    assert!(inv.device("pci-0000-00-0a-0").is_some());
    assert!(inv.device("pci-0000-00-0b-0").is_some());
    assert!(inv.device("pci-0000-00-0c-0").is_none());
    assert!(!inv.warnings.join("\n").contains("uplinks than"));
}

#[test]
fn named_uplink_interfaces_turn_detection_off() {
    let inv = discover_at(
        &nodes().join("edge-cases"),
        Options {
            uplink_interfaces: Some(vec!["rail1".into()]),
            ..Options::default()
        },
    );
    assert!(inv.device("pci-0000-00-0b-0").is_none(), "rail1 is named");
    assert!(
        inv.device("pci-0000-00-02-0").is_some(),
        "eth0 is no longer detected"
    );
    assert!(
        inv.device("pci-0000-00-0c-0").is_some(),
        "rail2's router-advertised default no longer makes it an uplink"
    );
    assert_eq!(inv.excluded[0].name, "rail1");
    assert_eq!(
        inv.excluded[0].reason,
        "uplink named by --uplink-interfaces (its PCI function 0000:00:0b.0 is not published either)"
    );
}

#[test]
fn numa_list_form() {
    let inv = discover("azure-nd-gb300-v6");
    let a = attrs(
        &inv,
        AttributeOptions {
            numa_node_list: true,
        },
    );
    // Two sockets of one node each: the list is the node alone.
    assert_eq!(
        a["pci-0103-00-00-0"]["resource.kubernetes.io/numaNode"],
        AttributeValue::Ints(vec![1])
    );
    assert_eq!(a["pci-0103-00-00-0"]["numaNode"], AttributeValue::Int(1));
}

/// The complete published attribute set of every fixture, against `expected-attributes.json`
/// beside it (reviewed by hand; regenerate with DRANET_BLESS=1 after an intended change).
#[test]
fn complete_attribute_sets_of_every_fixture() {
    for (name, _) in dranet_discovery::fixture::NODES {
        let dir = nodes().join(name);
        let inv = discover_at(&dir, Options::default());
        let got =
            serde_json::to_string_pretty(&attrs(&inv, AttributeOptions::default())).unwrap() + "\n";
        let file = dir.join("expected-attributes.json");
        if std::env::var_os("DRANET_BLESS").is_some() {
            std::fs::write(&file, &got).unwrap();
        }
        let want = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(
            got == want,
            "{name}: published attributes differ from {}:\n{got}",
            file.display()
        );
    }
}

/// An enumerator that lists devices which are gone by the time they are read.
struct Vanishing;

impl Enumerate for Vanishing {
    fn enumerate(&self, sysfs: &Sysfs) -> dranet_discovery::Result<DeviceNames> {
        let mut n = SysfsEnumerator.enumerate(sysfs)?;
        n.pci.push("0000:ff:1f.7".into());
        n.pci.push("not-an-address".into());
        n.net.push("gone0".into());
        n.infiniband.push("mlx5_9".into());
        Ok(n)
    }
}

#[test]
fn devices_vanishing_mid_scan_are_skipped_with_warnings() {
    let dir = nodes().join("azure-nd-gb300-v6");
    let d = Discovery::new(
        Sysfs::new(dir.join("sys")),
        Vanishing,
        FixtureLinks {
            path: dir.join("links.json"),
        },
        Options::default(),
    );
    let inv = d.discover().unwrap();
    assert_eq!(inv.devices.len(), 4);
    let w = inv.warnings.join("\n");
    for needle in [
        "bus/pci/devices/0000:ff:1f.7",
        "not-an-address",
        "class/net/gone0",
        "class/infiniband/mlx5_9",
    ] {
        assert!(w.contains(needle), "{needle} not in {w}");
    }
}

fn copy_tree(from: &Path, to: &Path) {
    for (rel, content) in tree(from) {
        let p = to.join(&rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        match content.strip_prefix("-> ") {
            Some(target) => std::os::unix::fs::symlink(target, &p).unwrap(),
            None => std::fs::write(&p, content).unwrap(),
        }
    }
}

#[test]
fn garbage_in_sysfs_files_never_aborts_the_scan() {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&nodes().join("azure-nd-gb300-v6"), tmp.path());
    let sys = tmp.path().join("sys");
    let vf = "devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/00000101-0001-0000-3130-444531454238/pci0101:00/0101:00:00.0";
    std::fs::write(sys.join(vf).join("class"), "\u{0}\u{ff}garbage").unwrap();
    std::fs::write(sys.join("class/infiniband_verbs/uverbs1/dev"), "231").unwrap();
    std::fs::write(sys.join("devices/system/node/node1/distance"), "x y z").unwrap();
    std::fs::remove_file(sys.join("class/misc/rdma_cm")).unwrap();
    let inv = discover_at(tmp.path(), Options::default());
    let names: Vec<_> = inv.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        ["pci-0102-00-00-0", "pci-0103-00-00-0", "pci-0104-00-00-0"]
    );
    let w = inv.warnings.join("\n");
    assert!(w.contains("0101:00:00.0/class: not a hex number"), "{w}");
    assert!(w.contains("uverbs1/dev: missing or not major:minor"), "{w}");
    assert!(w.contains("RDMA link mlx5_1: no uverbs device"), "{w}");
    // No rdma_cm on the host: links still carry their own devices.
    assert!(
        inv.device("pci-0103-00-00-0")
            .unwrap()
            .rdma
            .as_ref()
            .unwrap()
            .char_devices
            .iter()
            .all(|c| !c.path.ends_with("rdma_cm"))
    );
    assert!(inv.numa.nodes[1].distances.is_empty());
}

#[test]
fn malformed_link_state_file_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&nodes().join("azure-nd-gb300-v6"), tmp.path());
    std::fs::write(
        tmp.path().join("links.json"),
        "{\"links\": [{\"name\": 3}]}",
    )
    .unwrap();
    let err = dranet_discovery::host(&tmp.path().join("sys"), Options::default())
        .discover()
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("links.json") && msg.contains("invalid type"),
        "{msg}"
    );
}

#[test]
fn pci_ids_database_errors_leave_hex_ids() {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&nodes().join("azure-nd-gb300-v6"), tmp.path());
    let db = tmp.path().join("bad.ids");
    std::fs::write(&db, "15b3 Mellanox\n").unwrap();
    let inv = discover_at(
        tmp.path(),
        Options {
            pci_ids: Some(db),
            ..Options::default()
        },
    );
    let a = attrs(&inv, AttributeOptions::default());
    assert_eq!(a["pci-0101-00-00-0"]["pciVendor"], s("15b3"));
    assert_eq!(a["pci-0101-00-00-0"]["pciDevice"], s("101e"));
    assert!(
        inv.warnings
            .iter()
            .any(|w| w.contains("bad.ids") && w.contains("line 1")),
        "{:?}",
        inv.warnings
    );
}

#[test]
fn an_admin_down_link_is_not_a_fault_and_one_without_carrier_is() {
    use dranet_core::health::Fault;
    use dranet_discovery::fixture::Builder;
    let tmp = tempfile::tempdir().unwrap();
    let mut b = Builder::new(tmp.path()).unwrap();
    b.netdev(None, "off0", "aa:00:00:00:00:01", 1500, "down", 1)
        .unwrap();
    let lost = b
        .netdev(None, "lost0", "aa:00:00:00:00:02", 1500, "down", 1)
        .unwrap();
    b.carrier_lost(&lost).unwrap();
    b.netdev(None, "up0", "aa:00:00:00:00:03", 1500, "up", 1)
        .unwrap();
    b.finish().unwrap();
    let inv = discover_at(tmp.path(), Options::default());
    let fault = |name: &str| {
        let d = inv
            .devices
            .iter()
            .find(|d| d.netdev.as_ref().is_some_and(|n| n.name == name))
            .unwrap_or_else(|| panic!("{name} not discovered: {inv:?}"));
        Fault::of(d)
    };
    assert_eq!(fault("off0"), None);
    assert_eq!(fault("up0"), None);
    assert_eq!(fault("lost0"), Fault::of_link("lost0", "down", Some(true)));
}

/// A ConnectX-8's Data Direct function (`15b3:2100`, bound to mlx5_ib, here with a network
/// class as a class-based scan would see it) is never published: it has no netdev or RDMA link,
/// and `--show-excluded` says what it is. Its NIC beside it is published as before.
#[test]
fn a_data_direct_function_is_never_a_device() {
    use dranet_discovery::fixture::{Builder, Pci};
    let tmp = tempfile::tempdir().unwrap();
    let mut b = Builder::new(tmp.path()).unwrap();
    let root = b.root("pci0008:00").unwrap();
    let nic = b
        .pci(
            &root,
            &Pci {
                addr: "0008:01:00.0",
                class: 0x020000,
                vendor: 0x15b3,
                device: 0x1023,
                subsystem: (0x15b3, 0x0001),
                driver: Some("mlx5_core"),
                numa: Some("0"),
            },
        )
        .unwrap();
    b.netdev(Some(&nic), "enP8p1s0", "aa:00:00:00:08:01", 9000, "up", 1)
        .unwrap();
    let other_root = b.root("pci0009:00").unwrap();
    for class in [0x020000, 0x020700] {
        let addr = if class == 0x020000 {
            "0009:03:00.0"
        } else {
            "0009:03:00.1"
        };
        b.pci(
            &other_root,
            &Pci {
                addr,
                class,
                vendor: 0x15b3,
                device: 0x2100,
                subsystem: (0x15b3, 0x0001),
                driver: Some("mlx5_ib"),
                numa: Some("0"),
            },
        )
        .unwrap();
    }
    b.finish().unwrap();
    let inv = discover_at(tmp.path(), Options::default());
    let names: Vec<&str> = inv.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names.len(), 1, "only the NIC: {names:?}");
    assert!(
        inv.devices[0]
            .netdev
            .as_ref()
            .is_some_and(|n| n.name == "enP8p1s0"),
        "{names:?}"
    );
    let dd = inv
        .excluded
        .iter()
        .find(|e| e.name == "0009:03:00.0")
        .unwrap_or_else(|| {
            panic!(
                "the Data Direct function is not in excluded: {:?}",
                inv.excluded
            )
        });
    assert!(dd.reason.contains("Data Direct"), "{dd:?}");
    assert!(
        inv.warnings.iter().all(|w| !w.contains("0009:03")),
        "no warning about it: {:?}",
        inv.warnings
    );
}

/// The GB300 NVL72 tray (derived, not captured): the four ConnectX-8 PFs are the devices, their
/// Data Direct functions are not; each PF's VPD and its DD's carry the same `V3`, the key that
/// pairs them, readable with `dranet_discovery::vpd`; the two NUMA-0 NICs tie on `numaNode`,
/// which alone cannot pick a GPU's NIC.
#[test]
fn the_gb300_tray_publishes_its_nics_and_not_their_data_direct_functions() {
    let tmp = tempfile::tempdir().unwrap();
    dranet_discovery::fixture::gb300_nvl72_tray(tmp.path()).unwrap();
    let inv = discover_at(tmp.path(), Options::default());
    let mut nics: Vec<(String, Option<u32>)> = inv
        .devices
        .iter()
        .map(|d| {
            let pci = d.pci.as_ref().expect("a PCI device");
            (pci.address.to_string(), pci.numa_node)
        })
        .collect();
    nics.sort();
    assert_eq!(
        nics,
        [
            ("0000:03:00.0".to_string(), Some(0)),
            ("0002:03:00.0".to_string(), Some(0)),
            ("0010:03:00.0".to_string(), Some(1)),
            ("0012:03:00.0".to_string(), Some(1)),
        ],
        "{:?}",
        inv.excluded
    );
    for d in &inv.devices {
        assert!(d.rdma.is_some(), "{} has its IB device", d.name);
        assert!(d.netdev.is_some(), "{} has its IPoIB netdev", d.name);
    }
    assert_eq!(inv.gpus.len(), 4);
    let dd: Vec<&str> = inv
        .excluded
        .iter()
        .filter(|e| e.reason.contains("Data Direct"))
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(
        dd,
        [
            "0008:03:00.0",
            "0009:03:00.0",
            "0018:03:00.0",
            "0019:03:00.0"
        ]
    );
    // The pairing key, as rdma_topo reads it: crossed on NUMA 0 (0002 with 0008).
    let v3 = |addr: &str| {
        let bytes =
            std::fs::read(tmp.path().join(format!("sys/bus/pci/devices/{addr}/vpd"))).unwrap();
        dranet_discovery::vpd::parse(&bytes)
            .unwrap()
            .text("V3")
            .map(str::to_string)
    };
    for (nic, dd) in [
        ("0000:03:00.0", "0009:03:00.0"),
        ("0002:03:00.0", "0008:03:00.0"),
        ("0010:03:00.0", "0019:03:00.0"),
        ("0012:03:00.0", "0018:03:00.0"),
    ] {
        assert!(v3(nic).is_some());
        assert_eq!(v3(nic), v3(dd), "{nic} and {dd}");
    }
    assert_ne!(v3("0002:03:00.0"), v3("0009:03:00.0"));
}
