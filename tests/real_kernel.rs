//! dranet on a real Linux kernel: a qemu (TCG) guest booting Debian's 6.1 kernel on a PCI layout
//! of our design, set up by `tests/real_kernel/init.sh`; `dranet inventory` and `dranet topo` run
//! inside it, and their answers are compared with what the guest's own sysfs and `ip` report.
//!
//! The layout (MACs name the NICs; `0a`…`0f` are igb functions):
//!
//! | NIC | where | NUMA | role |
//! |---|---|---|---|
//! | `01` virtio | root complex `pcie.0` | -1 | the uplink: main-table default; soft-RoCE `rxe2` on it |
//! | `0a` | expander root 0x40, root port | 0 | SR-IOV PF, 2 VFs made by writing `sriov_numvfs` |
//! | `0b` | expander root 0x80, switch, beside the GPU | 1 | PIX to the GPU; soft-RoCE `rxe1` on it |
//! | `0c` | expander root 0x80, another root port | 1 | PHB; default route only in policy table 101 |
//! | `0d` | expander root 0x80, a switch below the switch | 1 | PXB; backup main default, metric 500 |
//! | `0e` | expander root 0xa0 | 1 | NODE |
//! | `0f` | root complex `pcie.0` | -1 | N/A (unknown NUMA node, other root) |
//!
//! plus a display function (the "GPU", class 03) on the switch, `veth0` with soft-RoCE `rxe0`, a
//! bridge `cni0` with a veth port and an `ifb0`. The kernel hostname is `(none)`.
//!
//! A second guest boots the same kernel on a Debian root filesystem (`.ci/qemu-rootfs.sh`) and
//! runs pods over soft-RoCE with `dranet run` as the node's DRA driver (issue 37): see
//! [`pods_use_exactly_the_rdma_devices_dranet_gave_them`] and `real_kernel/pods.rs`.
//!
//! Needs `.ci/qemu-guest.sh` (qemu with igb emulation, busybox, Debian's 6.1 kernel under
//! `$DRANET_QEMU_DIR`, default `/var/cache/dranet-qemu`) and, for the pods, `.ci/qemu-rootfs.sh`;
//! skips with a message without them.

#[path = "real_kernel/cri.rs"]
mod cri;
#[path = "real_kernel/pods.rs"]
mod pods;
#[path = "real_kernel/sharing.rs"]
mod sharing;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

/// One guest at a time: two TCG guests on a 2-core machine would each take twice as long.
static QEMU: Mutex<()> = Mutex::new(());

/// Modules the guest loads (their dependencies are added from `modules.dep`).
const MODULES: &[&str] = &[
    // rxe asks the crypto API for crc32 at link creation: a soft dependency modules.dep omits.
    "crc32_generic",
    "virtio_pci",
    "virtio_net",
    "igb",
    "igbvf",
    "rdma_rxe",
    "rdma_ucm",
    "ib_umad",
    "veth",
    "bridge",
    "ifb",
];

/// Modules of the pods guest, on top of what its root filesystem needs.
const POD_MODULES: &[&str] = &[
    "crc32_generic",
    "crc32c_generic",
    "virtio_pci",
    "virtio_blk",
    "virtio_net",
    "ext4",
    "overlay",
    "veth",
    "macvlan",
    "bridge",
    "rdma_rxe",
    "rdma_ucm",
    "ib_umad",
    // Upstream's IPVLAN and VRF scenarios (`real_kernel/sharing.rs`).
    "ipvlan",
    "vrf",
];

struct Kit {
    dir: PathBuf,
    kimg: PathBuf,
    version: String,
}

fn kit() -> Result<Kit, String> {
    let dir = std::env::var_os("DRANET_QEMU_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/dranet-qemu"));
    let kimg = dir.join("kimg");
    let vmlinuz = std::fs::read_dir(kimg.join("boot"))
        .map_err(|_| format!("no kernel under {}", kimg.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("vmlinuz-"))
        .ok_or_else(|| format!("no vmlinuz under {}/boot", kimg.display()))?;
    let version = vmlinuz.trim_start_matches("vmlinuz-").to_string();
    let has_igb = Command::new("qemu-system-x86_64")
        .args(["-device", "help"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("\"igb\""))
        .unwrap_or(false);
    if !has_igb {
        return Err("no qemu-system-x86_64 with igb emulation".into());
    }
    for tool in ["/bin/busybox", "/usr/sbin/ip", "/usr/bin/rdma"] {
        if !Path::new(tool).exists() {
            return Err(format!("no {tool}"));
        }
    }
    Ok(Kit { dir, kimg, version })
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Copies `bin` into the initrd's /bin with the shared libraries `ldd` names.
fn add_binary(root: &Path, bin: &Path, name: &str) {
    std::fs::copy(bin, root.join("bin").join(name)).expect("copy binary");
    let out = Command::new("ldd").arg(bin).output().expect("ldd");
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let lib = line
            .split("=>")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .or_else(|| {
                line.split_whitespace()
                    .next()
                    .filter(|p| p.starts_with('/'))
            });
        let Some(lib) = lib.filter(|l| l.starts_with('/')) else {
            continue;
        };
        let dest = if lib.contains("ld-linux") {
            root.join("lib64")
        } else {
            root.join("lib/x86_64-linux-gnu")
        };
        let file = Path::new(lib).file_name().expect("library name");
        std::fs::copy(lib, dest.join(file)).expect("copy library");
    }
}

/// The modules to load, dependencies first, from the kernel's `modules.dep`.
fn module_order(kit: &Kit, modules: &[&str]) -> Vec<PathBuf> {
    let base = kit.kimg.join("lib/modules").join(&kit.version);
    let dep = std::fs::read_to_string(base.join("modules.dep")).expect("modules.dep");
    let deps: BTreeMap<String, Vec<String>> = dep
        .lines()
        .filter_map(|l| {
            let (m, d) = l.split_once(':')?;
            Some((
                m.to_string(),
                d.split_whitespace().map(String::from).collect(),
            ))
        })
        .collect();
    let by_name = |name: &str| {
        deps.keys()
            .find(|p| {
                let f = p.rsplit('/').next().unwrap_or(p);
                f.split('.').next() == Some(name)
                    || f.split('.').next() == Some(&name.replace('_', "-"))
            })
            .cloned()
    };
    fn visit(m: &str, deps: &BTreeMap<String, Vec<String>>, out: &mut Vec<String>) {
        if out.iter().any(|x| x == m) {
            return;
        }
        for d in deps.get(m).into_iter().flatten().rev() {
            visit(d, deps, out);
        }
        out.push(m.to_string());
    }
    let mut order = Vec::new();
    for m in modules {
        match by_name(m) {
            Some(path) => visit(&path, &deps, &mut order),
            None => eprintln!("real_kernel: module {m} is built in or absent"),
        }
    }
    order.into_iter().map(|p| base.join(p)).collect()
}

fn build_initrd(kit: &Kit, dir: &Path) -> PathBuf {
    let root = dir.join("root");
    for d in [
        "bin",
        "proc",
        "sys",
        "dev",
        "run",
        "tmp",
        "mods",
        "lib64",
        "lib/x86_64-linux-gnu",
    ] {
        std::fs::create_dir_all(root.join(d)).expect("initrd dir");
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).expect("busybox");
    for applet in [
        "sh", "mount", "insmod", "cat", "readlink", "basename", "sleep", "echo", "poweroff",
    ] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).expect("applet");
    }
    add_binary(&root, Path::new("/usr/sbin/ip"), "ip");
    add_binary(&root, Path::new("/usr/bin/rdma"), "rdma");
    // The dranet under test, without debug info (the guest keeps the initrd in RAM).
    let dranet = dir.join("dranet");
    std::fs::copy(env!("CARGO_BIN_EXE_dranet"), &dranet).expect("copy dranet");
    let _ = Command::new("strip")
        .arg("--strip-debug")
        .arg(&dranet)
        .status();
    add_binary(&root, &dranet, "dranet");
    add_modules(kit, &root, MODULES);
    let init = root.join("init");
    std::fs::write(&init, include_str!("real_kernel/init.sh")).expect("init");
    run(Command::new("chmod").arg("+x").arg(&init));
    pack(&root, dir)
}

/// The qemu command line: the layout of the module docs.
fn qemu_args(kit: &Kit, initrd: &Path) -> Vec<String> {
    let mut a: Vec<String> = [
        "-accel tcg -machine q35 -smp 2 -m 1536 -nodefaults -no-reboot -display none -serial stdio",
        "-object memory-backend-ram,size=768M,id=m0 -object memory-backend-ram,size=768M,id=m1",
        "-numa node,nodeid=0,cpus=0,memdev=m0 -numa node,nodeid=1,cpus=1,memdev=m1",
        // The uplink and the NUMA-less NIC on the root complex. Only the uplink's user network
        // runs IPv6: slirp's router advertises a default route on each NIC it serves, and a
        // main-table default of either family makes an uplink.
        "-netdev user,id=n1,restrict=on -device virtio-net-pci,netdev=n1,mac=52:54:00:00:00:01,bus=pcie.0",
        "-netdev user,id=nf,restrict=on,ipv6=off -device igb,netdev=nf,mac=52:54:00:00:00:0f,bus=pcie.0",
        // NUMA 0: an expander root with the SR-IOV PF.
        "-device pxb-pcie,id=pxb0,bus_nr=0x40,numa_node=0,bus=pcie.0",
        "-device pcie-root-port,id=rp0,bus=pxb0,chassis=1,slot=1",
        "-netdev user,id=na,restrict=on,ipv6=off -device igb,netdev=na,mac=52:54:00:00:00:0a,bus=rp0",
        // NUMA 1: an expander root with a two-level switch and another root port.
        "-device pxb-pcie,id=pxb1,bus_nr=0x80,numa_node=1,bus=pcie.0",
        "-device pcie-root-port,id=rp1,bus=pxb1,chassis=2,slot=1",
        "-device x3130-upstream,id=up1,bus=rp1",
        "-device xio3130-downstream,id=dn1,bus=up1,chassis=3,slot=1",
        "-device xio3130-downstream,id=dn2,bus=up1,chassis=3,slot=2",
        "-device xio3130-downstream,id=dn3,bus=up1,chassis=3,slot=3",
        "-device bochs-display,bus=dn1",
        "-netdev user,id=nb,restrict=on,ipv6=off -device igb,netdev=nb,mac=52:54:00:00:00:0b,bus=dn2",
        "-device x3130-upstream,id=up2,bus=dn3",
        "-device xio3130-downstream,id=dn4,bus=up2,chassis=4,slot=1",
        "-netdev user,id=nd,restrict=on,ipv6=off -device igb,netdev=nd,mac=52:54:00:00:00:0d,bus=dn4",
        "-device pcie-root-port,id=rp2,bus=pxb1,chassis=2,slot=2",
        "-netdev user,id=nc,restrict=on,ipv6=off -device igb,netdev=nc,mac=52:54:00:00:00:0c,bus=rp2",
        // NUMA 1: a second expander root.
        "-device pxb-pcie,id=pxb2,bus_nr=0xa0,numa_node=1,bus=pcie.0",
        "-device pcie-root-port,id=rp3,bus=pxb2,chassis=5,slot=1",
        "-netdev user,id=ne,restrict=on,ipv6=off -device igb,netdev=ne,mac=52:54:00:00:00:0e,bus=rp3",
    ]
    .iter()
    .flat_map(|s| s.split_whitespace().map(String::from))
    .collect();
    a.extend([
        "-kernel".into(),
        kit.kimg
            .join(format!("boot/vmlinuz-{}", kit.version))
            .display()
            .to_string(),
        "-initrd".into(),
        initrd.display().to_string(),
        "-append".into(),
        "console=ttyS0 panic=-1 quiet".into(),
    ]);
    a
}

/// The guest's sections, by name.
fn sections(console: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut cur: Option<(String, String)> = None;
    for line in console.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(name) = line.strip_prefix("=== BEGIN ") {
            cur = Some((name.to_string(), String::new()));
        } else if line.starts_with("=== END ") {
            if let Some((n, body)) = cur.take() {
                out.insert(n, body);
            }
        } else if let Some((_, body)) = cur.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// `key=value` fields of a sysfs dump line.
fn fields(line: &str) -> BTreeMap<&str, &str> {
    line.split_whitespace()
        .filter_map(|f| f.split_once('='))
        .collect()
}

/// The `pci<domain>:<bus>` root in a device path.
fn root_of(path: &str) -> Option<String> {
    path.split('/')
        .rfind(|c| c.starts_with("pci") && c.contains(':'))
        .map(String::from)
}

/// The PCI function a netdev's device path ends in (looking through `virtioN`).
fn pci_of(path: &str) -> Option<String> {
    path.split('/')
        .rev()
        .find(|c| c.len() == 12 && c.as_bytes()[4] == b':' && c.as_bytes()[10] == b'.')
        .map(String::from)
}

#[test]
fn inventory_and_topo_match_the_kernel_on_a_real_guest() {
    let kit = match kit() {
        Ok(k) => k,
        Err(why) => {
            eprintln!(
                "SKIP inventory_and_topo_match_the_kernel_on_a_real_guest: {why}; run .ci/qemu-guest.sh as root"
            );
            return;
        }
    };
    let _one = QEMU.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().expect("tempdir");
    let initrd = build_initrd(&kit, tmp.path());
    let started = std::time::Instant::now();
    // A guest that hangs must not hang the test suite: coreutils' timeout ends qemu.
    let child = Command::new("timeout")
        .arg("420")
        .arg("qemu-system-x86_64")
        .args(qemu_args(&kit, &initrd))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start qemu");
    let out = child.wait_with_output().expect("qemu output");
    let console = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("real_kernel: the guest ran for {:?}", started.elapsed());
    assert!(
        console.contains("=== DONE"),
        "the guest did not finish:\n{console}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(line) = console.lines().find(|l| l.contains("GUEST:")) {
        panic!("guest set-up failed: {line}\n{console}");
    }
    let s = sections(&console);
    let get = |n: &str| {
        s.get(n)
            .cloned()
            .unwrap_or_else(|| panic!("no section {n} in\n{console}"))
    };
    compare(
        &get("names"),
        &get("inventory.json"),
        &get("inventory.err"),
        &get("topo"),
        &get("hostname.err"),
        &get("routes.json"),
        &get("sysfs"),
    );
}

#[allow(clippy::too_many_arguments)]
fn compare(
    names: &str,
    inventory: &str,
    inventory_err: &str,
    topo: &str,
    hostname_err: &str,
    routes: &str,
    sysfs: &str,
) {
    let nic: BTreeMap<&str, &str> = fields(names);
    let nic = |k: &str| {
        nic.get(k)
            .copied()
            .unwrap_or_else(|| panic!("no NIC {k}: {names}"))
    };
    let mut compared: Vec<String> = Vec::new();

    // The kernel's view.
    let mut pci: BTreeMap<String, BTreeMap<&str, &str>> = BTreeMap::new();
    let mut net: BTreeMap<String, BTreeMap<&str, &str>> = BTreeMap::new();
    let mut rdma: BTreeMap<String, BTreeMap<&str, &str>> = BTreeMap::new();
    for line in sysfs.lines() {
        let mut w = line.split_whitespace();
        let (kind, name) = (w.next().unwrap_or(""), w.next().unwrap_or("").to_string());
        match kind {
            "pci" => pci.insert(name, fields(line)),
            "net" => net.insert(name, fields(line)),
            "rdma" => rdma.insert(name, fields(line)),
            _ => None,
        };
    }
    let netdev_pci = |n: &str| net.get(n).and_then(|f| pci_of(f.get("device")?));

    // The uplink as `ip` sees it: the main table's lowest-metric IPv4 default.
    let routes: serde_json::Value = serde_json::from_str(routes).expect("ip -j route");
    let mut defaults: Vec<(u64, String, String)> = routes
        .as_array()
        .expect("route list")
        .iter()
        .filter(|r| r["dst"] == "default")
        .map(|r| {
            (
                r["metric"].as_u64().unwrap_or(0),
                r["dev"].as_str().unwrap_or("").to_string(),
                r["table"].as_str().unwrap_or("main").to_string(),
            )
        })
        .collect();
    defaults.sort();
    let uplink = defaults
        .iter()
        .find(|(_, _, t)| t == "main")
        .map(|(_, d, _)| d.clone())
        .expect("a main-table default");
    assert_eq!(uplink, nic("UP"));
    compared.push(format!(
        "ip's default routes (metric, dev, table): {defaults:?}"
    ));

    // dranet's view.
    let slice: serde_json::Value = serde_json::from_str(inventory)
        .unwrap_or_else(|e| panic!("inventory -o json: {e}\n{inventory}\n{inventory_err}"));
    let devices: BTreeMap<String, serde_json::Value> = slice["spec"]["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap_or("").to_string(),
                d["attributes"].clone(),
            )
        })
        .collect();
    let attr = |d: &serde_json::Value, k: &str| -> Option<String> {
        let v = &d[k];
        v["string"]
            .as_str()
            .map(String::from)
            .or(v["int"].as_i64().map(|i| i.to_string()))
            .or(v["bool"].as_bool().map(|b| b.to_string()))
    };
    let by_pci: BTreeMap<String, &serde_json::Value> = devices
        .values()
        .filter_map(|a| Some((attr(a, "pciAddress")?, a)))
        .collect();
    let by_if: BTreeMap<String, &serde_json::Value> = devices
        .values()
        .filter_map(|a| Some((attr(a, "ifName")?, a)))
        .collect();

    // Every network function with a driver is published, but the uplink's.
    let uplink_pci = netdev_pci(&uplink).expect("the uplink's PCI function");
    let expected: BTreeSet<String> = pci
        .iter()
        .filter(|(_, f)| f["class"].starts_with("0x02") && f["driver"] != "-")
        .map(|(a, _)| a.clone())
        .filter(|a| *a != uplink_pci)
        .collect();
    let published: BTreeSet<String> = by_pci.keys().cloned().collect();
    assert_eq!(published, expected, "published PCI functions");
    compared.push(format!(
        "published PCI functions = sysfs class-02 functions with a driver, minus the uplink's {uplink_pci}: {} ({published:?})",
        published.len()
    ));
    let vfs = pci.values().filter(|f| f["physfn"] != "-").count();
    assert_eq!(vfs, 2, "the guest made two VFs");

    // Each published function's attributes against its sysfs.
    for (addr, a) in &by_pci {
        let f = &pci[addr];
        let numa = f["numa"];
        assert_eq!(
            attr(a, "numaNode"),
            (numa != "-1").then(|| numa.to_string()),
            "{addr} numaNode"
        );
        assert_eq!(
            attr(a, "resource.kubernetes.io/pcieRoot"),
            root_of(f["path"]),
            "{addr} pcieRoot"
        );
        assert_eq!(
            attr(a, "isSriovVf").as_deref(),
            Some(if f["physfn"] != "-" { "true" } else { "false" }),
            "{addr} isSriovVf"
        );
        let owner = net
            .iter()
            .find(|(n, _)| netdev_pci(n).as_deref() == Some(addr.as_str()))
            .map(|(n, _)| n.clone());
        assert_eq!(attr(a, "ifName"), owner, "{addr} ifName");
        if let Some(n) = &owner {
            assert_eq!(attr(a, "mac").as_deref(), Some(net[n]["mac"]), "{addr} mac");
        }
    }
    compared.push(format!(
        "numaNode, pcieRoot, isSriovVf, ifName, mac of {} functions against sysfs",
        by_pci.len()
    ));

    // RDMA links: each on the device owning its netdev, PCI or not; none on the uplink.
    for (link, f) in &rdma {
        let parent = f["parent"];
        let on = by_if.get(parent);
        if parent == uplink {
            assert!(on.is_none(), "the uplink was published");
            assert!(
                inventory_err.contains(&format!("not published: {link}: RDMA link on {uplink}")),
                "{inventory_err}"
            );
        } else {
            let on = on.unwrap_or_else(|| panic!("{link}'s netdev {parent} not published"));
            assert_eq!(
                attr(on, "rdmaDevice").as_deref(),
                Some(link.as_str()),
                "{link}"
            );
            assert_eq!(attr(on, "rdma").as_deref(), Some("true"), "{link}");
        }
    }
    assert!(!inventory_err.contains("link skipped"), "{inventory_err}");
    compared.push(format!(
        "RDMA links {:?} on the devices owning their netdevs",
        rdma.keys().collect::<Vec<_>>()
    ));

    // Rails: the policy-table default and the backup default do not make uplinks.
    for k in ["C", "D"] {
        assert!(by_if.contains_key(nic(k)), "rail {} not published", nic(k));
    }
    assert!(
        inventory_err.contains(&format!(
            "not published: {uplink}: uplink: IPv4 default via 10.0.2.2, table main, metric 0"
        )),
        "{inventory_err}"
    );
    // A bridge's port is left out; the bridge and the ifb are the daemon filter's to drop.
    let port = net
        .iter()
        .find(|(_, f)| f["master"] == "cni0")
        .map(|(n, _)| n.clone())
        .expect("the bridge port");
    assert!(!by_if.contains_key(&port));
    assert!(
        inventory_err.contains(&format!("not published: {port}: a port of the bridge cni0")),
        "{inventory_err}"
    );
    compared.push("exclusions: the uplink (table main, metric 0), rxe2 on it, the bridge port; rails with a table-101 and a metric-500 default published".into());

    // The node name: the kernel hostname `(none)` is refused, naming the flag.
    assert!(sysfs.contains("hostname (none)"));
    assert!(
        hostname_err.contains("\"(none)\" (from the kernel hostname)")
            && hostname_err.contains("--node-name")
            && !hostname_err.contains("rc=0"),
        "{hostname_err}"
    );
    compared.push("kernel hostname (none): refused, naming --node-name".into());

    // topo: the GPU's row, one relation per designed position.
    let gpu_row = topo
        .lines()
        .find(|l| l.starts_with("GPU0"))
        .unwrap_or_else(|| panic!("no GPU row in\n{topo}"));
    let cols: Vec<&str> = gpu_row.split_whitespace().skip(1).collect();
    let nic_cols: BTreeMap<String, usize> = topo
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let (head, rest) = l.split_once(": ")?;
            let i: usize = head.strip_prefix("NIC")?.parse().ok()?;
            // `NICi: <link> <device name> NUMA n root`
            Some((rest.split_whitespace().nth(1)?.to_string(), i))
        })
        .collect();
    let dev_name = |k: &str| {
        let addr = netdev_pci(nic(k)).expect("PCI function");
        format!("pci-{}", addr.replace([':', '.'], "-"))
    };
    let mut relations = Vec::new();
    for (k, want) in [
        ("B", "PIX"),
        ("D", "PXB"),
        ("C", "PHB"),
        ("E", "NODE"),
        ("A", "SYS"),
        ("F", "N/A"),
    ] {
        let name = dev_name(k);
        let col = nic_cols
            .get(&name)
            .unwrap_or_else(|| panic!("{name} not in topo:\n{topo}"));
        assert_eq!(cols[*col], want, "GPU0 × {name}:\n{topo}");
        relations.push(format!("{name} {want}"));
    }
    compared.push(format!("topo GPU0 row: {}", relations.join(", ")));

    println!("real_kernel: compared\n  {}", compared.join("\n  "));
}

/// The guest side of [`pods_use_exactly_the_rdma_devices_dranet_gave_them`]: runs only in the
/// guest, where its `/init` sets [`pods::GUEST_ENV`].
#[test]
fn guest_pods() {
    if std::env::var_os(pods::GUEST_ENV).is_some() {
        pods::run();
    }
}

/// A stripped copy of `bin` (the guest keeps its programs in RAM until they are copied).
fn stripped(bin: &Path, to: &Path) {
    std::fs::copy(bin, to).expect("copy program");
    let _ = Command::new("strip").arg("--strip-debug").arg(to).status();
}

/// The initramfs of the pods guest: busybox to mount the root filesystem, the modules, and this
/// run's programs (`dranet`, this test binary, the root's init) for `boot.sh` to copy there.
fn build_pods_initrd(kit: &Kit, dir: &Path) -> PathBuf {
    let root = dir.join("root");
    for d in ["bin", "proc", "sys", "dev", "mods", "t"] {
        std::fs::create_dir_all(root.join(d)).expect("initrd dir");
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).expect("busybox");
    for applet in [
        "sh",
        "mount",
        "insmod",
        "sleep",
        "mkdir",
        "cp",
        "echo",
        "switch_root",
        "poweroff",
    ] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).expect("applet");
    }
    add_modules(kit, &root, POD_MODULES);
    stripped(
        Path::new(env!("CARGO_BIN_EXE_dranet")),
        &root.join("t/dranet"),
    );
    stripped(
        &std::env::current_exe().expect("this test binary"),
        &root.join("t/real_kernel"),
    );
    for (name, text) in [
        ("init", include_str!("real_kernel/boot.sh")),
        ("t/pods-init.sh", include_str!("real_kernel/pods-init.sh")),
    ] {
        std::fs::write(root.join(name), text).expect("init script");
        run(Command::new("chmod").arg("+x").arg(root.join(name)));
    }
    pack(&root, dir)
}

/// `root` as the newc cpio archive `dir/initrd.cpio`.
fn pack(root: &Path, dir: &Path) -> PathBuf {
    let initrd = dir.join("initrd.cpio");
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd {} && find . | /bin/busybox cpio -o -H newc > {}",
            root.display(),
            initrd.display()
        ))
        .status()
        .expect("cpio");
    assert!(ok.success(), "building the initrd failed");
    initrd
}

/// `modules` and what they depend on into `root/mods`, named so that a glob loads them in order.
fn add_modules(kit: &Kit, root: &Path, modules: &[&str]) {
    for (i, m) in module_order(kit, modules).iter().enumerate() {
        let name = m.file_name().expect("module name").to_string_lossy();
        std::fs::copy(m, root.join("mods").join(format!("{i:02}-{name}"))).expect("module");
    }
}

/// Pods over soft-RoCE with `dranet run` as the node's DRA driver, on Debian's 6.1 kernel: a real
/// containerd with NRI, the kubelet's calls made by the fake kubelet, `dranet run`'s discovery of
/// the guest's sysfs. What is checked, and what the kernel allows, is in `real_kernel/pods.rs`;
/// the guest's findings are printed as `guest:` lines.
#[test]
fn pods_use_exactly_the_rdma_devices_dranet_gave_them() {
    let kit = match kit() {
        Ok(k) if k.dir.join("rootfs.ext4").exists() => k,
        Ok(k) => {
            eprintln!(
                "SKIP pods_use_exactly_the_rdma_devices_dranet_gave_them: no {}; run .ci/qemu-rootfs.sh as root",
                k.dir.join("rootfs.ext4").display()
            );
            return;
        }
        Err(why) => {
            eprintln!(
                "SKIP pods_use_exactly_the_rdma_devices_dranet_gave_them: {why}; run .ci/qemu-guest.sh as root"
            );
            return;
        }
    };
    let _one = QEMU.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().expect("tempdir");
    let initrd = build_pods_initrd(&kit, tmp.path());
    let vmlinuz = kit.kimg.join(format!("boot/vmlinuz-{}", kit.version));
    let drive = format!(
        "file={},if=virtio,format=raw,snapshot=on",
        kit.dir.join("rootfs.ext4").display()
    );
    let started = Instant::now();
    let mut child = Command::new("timeout")
        .arg("900")
        .arg("qemu-system-x86_64")
        .args("-accel tcg -machine q35 -smp 2 -m 2048 -nodefaults -no-reboot -display none -serial stdio".split(' '))
        .args(["-drive", &drive])
        // Two NICs on one segment (a qemu hub), for the two soft-RoCE links.
        .args("-netdev hubport,id=h0,hubid=0 -device virtio-net-pci,netdev=h0,mac=52:54:00:00:01:01".split(' '))
        .args("-netdev hubport,id=h1,hubid=0 -device virtio-net-pci,netdev=h1,mac=52:54:00:00:01:02".split(' '))
        .arg("-kernel")
        .arg(&vmlinuz)
        .arg("-initrd")
        .arg(&initrd)
        // No AppArmor: containerd would want apparmor_parser to load its profile.
        .args(["-append", "console=ttyS0 panic=-1 quiet apparmor=0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start qemu");
    // The guest's findings go to the log as they come (straight to stderr: libtest would hold
    // them back until the end).
    let mut console = String::new();
    for line in BufReader::new(child.stdout.take().expect("console")).lines() {
        let line = line.unwrap_or_default().replace('\r', "");
        if line.starts_with("guest: ") || line.starts_with("GUEST:") {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
        console.push_str(&line);
        console.push('\n');
    }
    let _ = child.wait();
    let took = started.elapsed();
    let _ = writeln!(
        std::io::stderr(),
        "real_kernel: the pods guest ran for {:.0} s",
        took.as_secs_f64()
    );
    assert!(
        console.contains("=== EXIT 0"),
        "the pods guest failed (after {took:?}):\n{console}"
    );
}
