//! The scan: sysfs and link state in, [`Inventory`] out.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use dranet_core::names::{netdev_device_name, pci_device_name};
use dranet_core::pciids::PciNames;
use dranet_core::{
    CharDevice, CharDeviceKind, Discover, Excluded, Inventory, LinkSource, Netdev, NetworkDevice,
    NumaNode, NumaTopology, PciAddress, PciClass, PciDevice, PciIds, PcieRoot, RdmaLink, RdmaPort,
    SriovRole, arphrd_name,
};

use crate::{Enumerate, Error, Result, Sysfs};

const ARPHRD_LOOPBACK: u16 = 772;
const ARPHRD_INFINIBAND: u16 = 32;

/// Choices that change what is published.
#[derive(Debug, Clone)]
pub struct Options {
    /// IPoIB netdevs belong to their PCI device and move into the pod with it (upstream's
    /// `--move-ib-interfaces`, default true). When false they are skipped and the device is
    /// published as IB-only.
    pub move_ib_interfaces: bool,
    /// The PCI ID database to name vendors and devices with. `None` looks beside the sysfs root
    /// (`<root>/../usr/share/misc/pci.ids`, `…/hwdata/pci.ids`: the host's when its `/` is
    /// mounted in the container), then in this system's usual places.
    pub pci_ids: Option<PathBuf>,
    /// The host's uplink interfaces, named by the operator (upstream's `--uplink-interfaces`).
    /// `None` detects them from the default routes (see [`dranet_core::uplinks`]); `Some` turns
    /// detection off.
    pub uplink_interfaces: Option<Vec<String>>,
}

/// Kinds of interfaces whose ports are never published.
const PORT_MASTERS: &[&str] = &["bridge", "bond", "team", "openvswitch"];

/// More detected uplinks than this draws a warning: a host has one uplink, or two when bonded
/// or dual-homed.
const PLAUSIBLE_UPLINKS: usize = 2;

impl Default for Options {
    fn default() -> Self {
        Self {
            move_ib_interfaces: true,
            pci_ids: None,
            uplink_interfaces: None,
        }
    }
}

/// Host discovery: an enumerator says which devices exist, the rooted [`Sysfs`] reader describes
/// them, a [`LinkSource`] adds addresses and routes.
#[derive(Debug)]
pub struct Discovery<E, L> {
    sysfs: Sysfs,
    enumerator: E,
    links: L,
    options: Options,
}

impl<E: Enumerate, L: LinkSource> Discovery<E, L> {
    /// Discovery over `sysfs`, listing devices with `enumerator` and link state from `links`.
    pub fn new(sysfs: Sysfs, enumerator: E, links: L, options: Options) -> Self {
        Self {
            sysfs,
            enumerator,
            links,
            options,
        }
    }

    /// The sysfs reader (for its recorded paths, in benches).
    pub fn sysfs(&self) -> &Sysfs {
        &self.sysfs
    }
}

#[cfg(feature = "netlink")]
impl<E, L> Discovery<E, L>
where
    E: Enumerate + Send + Sync + 'static,
    L: LinkSource<Error = Error> + Send + Sync + 'static,
{
    /// [`Discover::discover`] without blocking the caller's runtime: the scan (sysfs reads and
    /// the netlink dump) runs on tokio's blocking pool, so link state is read in the network
    /// namespace of those threads (the process's, unless your runtime's threads entered
    /// another). Feature `netlink`.
    pub async fn discover_async(self: std::sync::Arc<Self>) -> Result<Inventory> {
        tokio::task::spawn_blocking(move || self.discover())
            .await
            .map_err(|e| crate::links::nl("discovery task", e))?
    }
}

impl<E: Enumerate, L: LinkSource> Discover for Discovery<E, L> {
    type Error = Error;

    fn discover(&self) -> Result<Inventory> {
        let names = self.enumerator.enumerate(&self.sysfs)?;
        // Fail closed: without link state the default-route uplink cannot be recognised, and
        // publishing it would let a pod take the node's network away.
        let links = self
            .links
            .links()
            .map_err(|e| crate::links::nl("link state unavailable", e))?;
        let mut scan = Scan {
            fs: &self.sysfs,
            warnings: Vec::new(),
        };
        let mut inv = scan.run(&names, links, &self.options);
        inv.warnings = scan.warnings;
        Ok(inv)
    }
}

struct Scan<'a> {
    fs: &'a Sysfs,
    warnings: Vec<String>,
}

/// What a sysfs device path says about its place in the PCI hierarchy.
fn pci_position(path: &str, addr: &PciAddress) -> (Option<PcieRoot>, Vec<PciAddress>) {
    let comps: Vec<&str> = path.split('/').collect();
    let Some(root_i) = comps
        .iter()
        .rposition(|c| c.starts_with("pci") && c.parse::<PcieRoot>().is_ok())
    else {
        return (None, Vec::new());
    };
    let root = comps[root_i].parse::<PcieRoot>().ok();
    let bridges = comps[root_i + 1..]
        .iter()
        .filter_map(|c| c.parse::<PciAddress>().ok())
        .filter(|a| a != addr)
        .collect();
    (root, bridges)
}

/// The PCI function that owns a class device at `path` (`…/<pci>/net/eth0`,
/// `…/<pci>/virtio0/net/eth0`, `…/<pci>/infiniband/mlx5_0`): the component right before the
/// class directory, looking through a virtio bus device. A USB NIC under an xHCI controller has
/// none.
fn owning_pci(path: &str, class_dir: &str) -> Option<PciAddress> {
    let comps: Vec<&str> = path.split('/').collect();
    let i = comps.iter().rposition(|c| *c == class_dir)?;
    let mut j = i.checked_sub(1)?;
    if comps[j].starts_with("virtio") && comps[j][6..].bytes().all(|b| b.is_ascii_digit()) {
        j = j.checked_sub(1)?;
    }
    comps[j].parse().ok()
}

fn parse_hex_u32(s: &str) -> Option<u32> {
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

/// `IFF_UP` in a netdev's `flags` file (`0x1003`): whether it is administratively up.
fn admin_up(flags: &str) -> Option<bool> {
    const IFF_UP: u32 = 0x1;
    parse_hex_u32(flags).map(|f| f & IFF_UP != 0)
}

fn parse_devnum(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// The PCI functions of the node, by what they may become.
#[derive(Default)]
struct PciFunctions {
    /// Network functions: devices unless the host holds them.
    candidates: BTreeMap<PciAddress, PciDevice>,
    /// Other functions, by sysfs path and class, in case an RDMA link hangs off one.
    others: HashMap<PciAddress, (String, PciClass)>,
    /// GPUs, for topology.
    gpus: Vec<PciDevice>,
}

/// The node's netdevs by name, and which of them are IPoIB.
#[derive(Default)]
struct Netdevs {
    netdevs: BTreeMap<String, Netdev>,
    ipoib: HashSet<String>,
}

/// What the host holds and never publishes.
struct Held {
    /// Interface names.
    names: HashSet<String>,
    /// Their PCI functions.
    pci: HashSet<PciAddress>,
    /// Each with why.
    excluded: Vec<Excluded>,
}

/// Where RDMA links go: the published devices and what the host holds.
struct Owners<'a> {
    by_pci: &'a mut BTreeMap<PciAddress, NetworkDevice>,
    non_pci: &'a mut BTreeMap<String, NetworkDevice>,
    netdev_pci: &'a HashMap<String, PciAddress>,
    held_names: &'a HashSet<String>,
    held_pci: &'a HashSet<PciAddress>,
}

/// What netlink knows of a link, over what sysfs said.
fn merge_link_state(nd: &mut Netdev, l: dranet_core::LinkState) {
    nd.ifindex = l.ifindex.or(nd.ifindex);
    nd.kind = l.kind;
    nd.operstate = l.operstate.or(nd.operstate.take());
    nd.admin_up = l.admin_up.or(nd.admin_up);
    nd.mtu = l.mtu.or(nd.mtu);
    nd.ipv4 = l.ipv4;
    nd.ipv6 = l.ipv6;
    nd.default_routes = l.default_routes;
    nd.master = l.master;
    nd.lower = l.lower;
    nd.ipv6_gateway = l.ipv6_gateway;
    nd.ebpf = l.ebpf;
}

/// Adds, until nothing changes, the uplink's slaves, the interfaces it is stacked on, and those
/// stacked on it.
fn close_over_uplink(held: &mut BTreeMap<String, String>, netdevs: &BTreeMap<String, Netdev>) {
    loop {
        let before = held.len();
        for n in netdevs.values() {
            if let Some(m) = n.master.as_ref().filter(|m| held.contains_key(*m))
                && !held.contains_key(&n.name)
            {
                let why = format!("enslaved to the uplink {m}");
                held.insert(n.name.clone(), why);
            }
            if held.contains_key(&n.name)
                && let Some(l) = &n.lower
                && !held.contains_key(l)
            {
                let why = format!("the uplink {} is stacked on it", n.name);
                held.insert(l.clone(), why);
            }
            // An upper of the uplink (a VLAN, macvlan or ipvlan on it) carries the host's
            // traffic over the uplink: a pod taking it takes part of the host's network.
            if let Some(l) = n.lower.as_ref().filter(|l| held.contains_key(*l))
                && !held.contains_key(&n.name)
            {
                let why = format!("stacked on {l}, part of the node's uplink");
                held.insert(n.name.clone(), why);
            }
        }
        if held.len() == before {
            break;
        }
    }
}

/// Ports of a bridge, bond or switch: taking one into a pod breaks the interface it belongs to
/// (a CNI bridge's veths, the slaves of a RoCE LAG bond).
fn hold_ports(held: &mut BTreeMap<String, String>, netdevs: &BTreeMap<String, Netdev>) {
    for n in netdevs.values() {
        if held.contains_key(&n.name) {
            continue;
        }
        let Some(m) = &n.master else { continue };
        if let Some(kind) = netdevs
            .get(m)
            .and_then(|m| m.kind.as_deref())
            .filter(|k| PORT_MASTERS.contains(k))
        {
            let why = format!("a port of the {kind} {m}: taking it would break {m}");
            held.insert(n.name.clone(), why);
        }
    }
}

/// Gives each netdev to its PCI function's device (the first netdev wins), or makes it a
/// device of its own when it has no function; returns those. Held interfaces, and IPoIB ones
/// unless they move with their function, are left out.
fn attach_netdevs(
    by_pci: &mut BTreeMap<PciAddress, NetworkDevice>,
    netdevs: BTreeMap<String, Netdev>,
    ipoib: &HashSet<String>,
    held: &Held,
    opts: &Options,
) -> BTreeMap<String, NetworkDevice> {
    let mut non_pci = BTreeMap::new();
    for (name, nd) in netdevs {
        if held.names.contains(&name) {
            continue;
        }
        let is_ipoib = ipoib.contains(&name);
        match nd.pci {
            Some(a) => {
                if is_ipoib && !opts.move_ib_interfaces {
                    continue;
                }
                if let Some(dev) = by_pci.get_mut(&a)
                    && dev.netdev.is_none()
                {
                    dev.netdev = Some(nd);
                }
            }
            None if is_ipoib => {} // an IPoIB child without a function of its own
            None => {
                let dname = netdev_device_name(&name);
                non_pci.insert(
                    dname.clone(),
                    NetworkDevice {
                        name: dname,
                        pci: None,
                        netdev: Some(nd),
                        rdma: None,
                    },
                );
            }
        }
    }
    non_pci
}

/// Links of a PCI function first: a function's own link wins over a software one (rxe) stacked
/// on its netdev.
fn rdma_in_owner_order(mut rdma: Vec<RdmaLink>) -> Vec<RdmaLink> {
    rdma.sort_by_key(|l| l.pci.is_none());
    rdma
}

impl Scan<'_> {
    fn warn(&mut self, w: String) {
        self.warnings.push(w);
    }

    /// Resolves a sysfs link; a dangling or unreadable one is a warning and `None`.
    fn resolve_or_skip(&mut self, rel: &str, skipped: &str) -> Option<String> {
        match self.fs.resolve(rel) {
            Ok(p) => Some(p),
            Err(e) => {
                let w = format!("{}: {e}; {skipped}", self.p(rel));
                self.warn(w);
                None
            }
        }
    }

    fn p(&self, rel: &str) -> String {
        self.fs.path(rel).display().to_string()
    }

    /// A required hex id file; `None` and a warning when absent or garbage.
    fn hex_file(&mut self, rel: &str) -> Option<u32> {
        match self.fs.read(rel) {
            Ok(s) => match parse_hex_u32(&s) {
                Some(v) => Some(v),
                None => {
                    let w = format!("{}: not a hex number: {s:?}", self.p(rel));
                    self.warn(w);
                    None
                }
            },
            Err(e) => {
                let w = format!("{}: {e}", self.p(rel));
                self.warn(w);
                None
            }
        }
    }

    fn pci_device(
        &mut self,
        addr: PciAddress,
        path: &str,
        class: PciClass,
        sriov: bool,
    ) -> Option<PciDevice> {
        let vendor = self.hex_file(&format!("{path}/vendor"));
        let device = self.hex_file(&format!("{path}/device"));
        let (Some(vendor), Some(device)) = (vendor, device) else {
            let w = format!("PCI device {addr}: vendor or device id unreadable; device skipped");
            self.warn(w);
            return None;
        };
        let sub = |s: &mut Self, f: &str| {
            s.fs.read_opt(&format!("{path}/{f}"))
                .ok()
                .flatten()
                .and_then(|v| parse_hex_u32(&v))
                .unwrap_or(0) as u16
        };
        let ids = PciIds {
            vendor: vendor as u16,
            device: device as u16,
            subsystem_vendor: sub(self, "subsystem_vendor"),
            subsystem_device: sub(self, "subsystem_device"),
        };
        let numa_rel = format!("{path}/numa_node");
        let numa_node = match self.fs.read_opt(&numa_rel) {
            Ok(None) => None,
            Ok(Some(s)) => match s.parse::<i64>() {
                Ok(n) if n >= 0 => u32::try_from(n).ok(),
                Ok(_) => None, // -1: no NUMA affinity
                Err(_) => {
                    let w = format!(
                        "{}: not a NUMA node: {s:?}; NUMA attributes left out",
                        self.p(&numa_rel)
                    );
                    self.warn(w);
                    None
                }
            },
            Err(e) => {
                let w = format!("{}: {e}; NUMA attributes left out", self.p(&numa_rel));
                self.warn(w);
                None
            }
        };
        let driver = self.fs.link_name(&format!("{path}/driver")).ok().flatten();
        let sriov = if sriov {
            self.sriov(path)
        } else {
            SriovRole::None
        };
        let (pcie_root, bridges) = pci_position(path, &addr);
        Some(PciDevice {
            address: addr,
            class,
            ids,
            vendor_name: None,
            device_name: None,
            driver,
            numa_node,
            pcie_root,
            bridges,
            sriov,
        })
    }

    fn sriov(&mut self, path: &str) -> SriovRole {
        let num = |s: &mut Self, f: &str| -> Option<u32> {
            let rel = format!("{path}/{f}");
            let v = s.fs.read_opt(&rel).ok().flatten()?;
            match v.parse() {
                Ok(n) => Some(n),
                Err(_) => {
                    let w = format!("{}: not a number: {v:?}", s.p(&rel));
                    s.warn(w);
                    None
                }
            }
        };
        if let Some(total_vfs) = num(self, "sriov_totalvfs") {
            let num_vfs = num(self, "sriov_numvfs").unwrap_or(0);
            return SriovRole::PhysicalFunction { total_vfs, num_vfs };
        }
        match self.fs.link_name(&format!("{path}/physfn")) {
            Ok(Some(pf)) => SriovRole::VirtualFunction {
                pf: pf.parse().ok(),
            },
            _ => SriovRole::None,
        }
    }

    fn netdev(&mut self, name: &str) -> Option<(Netdev, u16)> {
        let rel = format!("class/net/{name}");
        let path = self.resolve_or_skip(&rel, "netdev skipped")?;
        let arphrd = match self.fs.read(&format!("{path}/type")) {
            Ok(s) => match s.parse::<u16>() {
                Ok(t) => t,
                Err(_) => {
                    let w = format!(
                        "{}/type: not a link type: {s:?}; netdev skipped",
                        self.p(&path)
                    );
                    self.warn(w);
                    return None;
                }
            },
            Err(e) => {
                let w = format!("{}/type: {e}; netdev skipped", self.p(&path));
                self.warn(w);
                return None;
            }
        };
        if arphrd == ARPHRD_LOOPBACK {
            return Some((Netdev::default(), arphrd));
        }
        let opt = |s: &mut Self, f: &str| s.fs.read_opt(&format!("{path}/{f}")).ok().flatten();
        let mtu = opt(self, "mtu").and_then(|m| m.parse().ok());
        let nd = Netdev {
            name: name.to_string(),
            mac: opt(self, "address").filter(|m| !m.is_empty()),
            mtu,
            operstate: opt(self, "operstate"),
            admin_up: opt(self, "flags").and_then(|f| admin_up(&f)),
            alias: opt(self, "ifalias").filter(|a| !a.is_empty()),
            encapsulation: arphrd_name(arphrd).map(str::to_string),
            virtual_: path.starts_with("devices/virtual/"),
            pci: owning_pci(&path, "net"),
            ..Netdev::default()
        };
        Some((nd, arphrd))
    }

    fn char_devices(&mut self) -> HashMap<String, Vec<CharDevice>> {
        let mut map: HashMap<String, Vec<CharDevice>> = HashMap::new();
        for (class, prefixes) in [
            (
                "infiniband_verbs",
                &[("uverbs", CharDeviceKind::Uverbs)][..],
            ),
            (
                "infiniband_mad",
                &[
                    ("umad", CharDeviceKind::Umad),
                    ("issm", CharDeviceKind::Issm),
                ][..],
            ),
            ("infiniband_cm", &[("ucm", CharDeviceKind::Ucm)][..]),
        ] {
            let entries = self.fs.list(&format!("class/{class}")).unwrap_or_default();
            for e in entries {
                let Some(kind) = prefixes
                    .iter()
                    .find(|(p, _)| {
                        e.starts_with(p)
                            && e[p.len()..].bytes().all(|b| b.is_ascii_digit())
                            && e.len() > p.len()
                    })
                    .map(|(_, k)| *k)
                else {
                    continue; // abi_version and friends
                };
                let base = format!("class/{class}/{e}");
                let ibdev = match self.fs.read(&format!("{base}/ibdev")) {
                    Ok(s) => s,
                    Err(err) => {
                        let w = format!("{}/ibdev: {err}; {e} left out", self.p(&base));
                        self.warn(w);
                        continue;
                    }
                };
                let dev_rel = format!("{base}/dev");
                let Some((major, minor)) =
                    self.fs.read(&dev_rel).ok().and_then(|s| parse_devnum(&s))
                else {
                    let w = format!(
                        "{}: missing or not major:minor; {e} left out",
                        self.p(&dev_rel)
                    );
                    self.warn(w);
                    continue;
                };
                let port = if matches!(kind, CharDeviceKind::Umad | CharDeviceKind::Issm) {
                    self.fs
                        .read_opt(&format!("{base}/port"))
                        .ok()
                        .flatten()
                        .and_then(|p| p.parse().ok())
                } else {
                    None
                };
                map.entry(ibdev).or_default().push(CharDevice {
                    kind,
                    path: format!("/dev/infiniband/{e}"),
                    major,
                    minor,
                    port,
                });
            }
        }
        map
    }

    fn rdma_link(
        &mut self,
        name: &str,
        chars: &mut HashMap<String, Vec<CharDevice>>,
        rdma_cm: &Option<CharDevice>,
    ) -> Option<RdmaLink> {
        let rel = format!("class/infiniband/{name}");
        let path = self.resolve_or_skip(&rel, "RDMA link skipped")?;
        let pci = owning_pci(&path, "infiniband");
        let mut ports = Vec::new();
        for p in self.fs.list(&format!("{path}/ports")).unwrap_or_default() {
            let Ok(number) = p.parse::<u32>() else {
                continue;
            };
            let base = format!("{path}/ports/{p}");
            ports.push(RdmaPort {
                number,
                link_layer: self
                    .fs
                    .read_opt(&format!("{base}/link_layer"))
                    .ok()
                    .flatten(),
                state: self.fs.read_opt(&format!("{base}/state")).ok().flatten(),
                phys_state: self
                    .fs
                    .read_opt(&format!("{base}/phys_state"))
                    .ok()
                    .flatten(),
            });
        }
        ports.sort_by_key(|p| p.number);
        let parent_netdev = if pci.is_none() {
            self.fs.read_opt(&format!("{path}/parent")).ok().flatten()
        } else {
            None
        };
        let mut char_devices = chars.remove(name).unwrap_or_default();
        if !char_devices
            .iter()
            .any(|c| c.kind == CharDeviceKind::Uverbs)
        {
            let w = format!(
                "RDMA link {name}: no uverbs device in class/infiniband_verbs; a pod could not use it"
            );
            self.warn(w);
        }
        char_devices.extend(rdma_cm.clone());
        char_devices.sort();
        Some(RdmaLink {
            name: name.to_string(),
            pci,
            parent_netdev,
            ports,
            char_devices,
        })
    }

    fn numa(&mut self) -> NumaTopology {
        let mut nodes = Vec::new();
        for n in self.fs.list("devices/system/node").unwrap_or_default() {
            let Some(id) = n.strip_prefix("node").and_then(|i| i.parse::<u32>().ok()) else {
                continue;
            };
            let base = format!("devices/system/node/{n}");
            let distances = self
                .fs
                .read_opt(&format!("{base}/distance"))
                .ok()
                .flatten()
                .map(|d| {
                    d.split_whitespace()
                        .filter_map(|x| x.parse().ok())
                        .collect()
                })
                .unwrap_or_default();
            let cpulist = self
                .fs
                .read_opt(&format!("{base}/cpulist"))
                .ok()
                .flatten()
                .unwrap_or_default();
            let first_cpu = cpulist
                .split([',', '-'])
                .next()
                .and_then(|c| c.trim().parse::<u32>().ok());
            let socket = first_cpu.and_then(|c| {
                self.fs
                    .read_opt(&format!(
                        "devices/system/cpu/cpu{c}/topology/physical_package_id"
                    ))
                    .ok()
                    .flatten()
                    .and_then(|s| s.parse().ok())
            });
            nodes.push(NumaNode {
                id,
                cpulist,
                distances,
                socket,
            });
        }
        nodes.sort_by_key(|n| n.id);
        NumaTopology { nodes }
    }

    /// The scan, phase by phase; each phase's warnings come in this order.
    fn run(
        &mut self,
        names: &crate::DeviceNames,
        links: Vec<dranet_core::LinkState>,
        opts: &Options,
    ) -> Inventory {
        let PciFunctions {
            mut candidates,
            mut others,
            mut gpus,
        } = self.pci_functions(&names.pci);
        let Netdevs { netdevs, ipoib } = self.netdevs(&names.net, links, opts);
        let held = self.held(&netdevs, opts);
        let rdma = self.rdma_links(&names.infiniband);
        // RDMA links on PCI functions outside class 02 make those functions devices too.
        for l in &rdma {
            // `others` only holds functions that are not candidates.
            if let Some(a) = l.pci
                && let Some((path, class)) = others.remove(&a)
                && let Some(d) = self.pci_device(a, &path, class, true)
            {
                candidates.insert(a, d);
            }
        }
        // An adapter's side functions are never devices, whatever their class.
        let mut side = Vec::new();
        candidates.retain(|addr, pci| match pci.side_function() {
            Some(f) => {
                side.push(Excluded {
                    name: addr.to_string(),
                    reason: f.what.to_string(),
                });
                false
            }
            None => true,
        });
        let mut by_pci = self.pci_devices(candidates, &held);
        // Which PCI function owns each netdev, for RDMA links that name only their netdev.
        let netdev_pci: HashMap<String, PciAddress> = netdevs
            .iter()
            .filter_map(|(n, nd)| Some((n.clone(), nd.pci?)))
            .collect();
        let mut non_pci = attach_netdevs(&mut by_pci, netdevs, &ipoib, &held, opts);
        let mut excluded = held.excluded;
        excluded.extend(side);
        let mut owners = Owners {
            by_pci: &mut by_pci,
            non_pci: &mut non_pci,
            netdev_pci: &netdev_pci,
            held_names: &held.names,
            held_pci: &held.pci,
        };
        for l in rdma_in_owner_order(rdma) {
            if let Some(e) = self.attach_rdma(l, &mut owners) {
                excluded.push(e);
            }
        }
        let mut devices = self.assemble(by_pci, non_pci);
        gpus.sort_by_key(|g| g.address);
        self.name_pci(&mut devices, &mut gpus, opts);
        let numa = self.numa();
        excluded.sort();
        Inventory {
            devices,
            gpus,
            numa,
            warnings: Vec::new(),
            excluded,
        }
    }

    /// PCI functions: network ones are candidates, GPUs are kept for topology, the rest are
    /// remembered by path in case an RDMA link hangs off one (InfiniBand class 0c06, …).
    fn pci_functions(&mut self, names: &[String]) -> PciFunctions {
        let mut found = PciFunctions::default();
        for name in names {
            let addr = match name.parse::<PciAddress>() {
                Ok(a) => a,
                Err(e) => {
                    self.warn(format!(
                        "{}: {e}; skipped",
                        self.p(&format!("bus/pci/devices/{name}"))
                    ));
                    continue;
                }
            };
            let rel = format!("bus/pci/devices/{name}");
            let Some(path) = self.resolve_or_skip(&rel, "device skipped") else {
                continue;
            };
            let Some(class) = self.hex_file(&format!("{path}/class")).map(PciClass) else {
                continue;
            };
            if class.is_network() {
                if let Some(d) = self.pci_device(addr, &path, class, true) {
                    found.candidates.insert(addr, d);
                }
            } else if class.is_gpu() {
                if let Some(d) = self.pci_device(addr, &path, class, false) {
                    found.gpus.push(d);
                }
            } else {
                found.others.insert(addr, (path, class));
            }
        }
        found
    }

    /// Netdevs other than loopback, with what netlink knows of them.
    fn netdevs(
        &mut self,
        names: &[String],
        links: Vec<dranet_core::LinkState>,
        opts: &Options,
    ) -> Netdevs {
        let mut found = Netdevs::default();
        for name in names {
            let Some((nd, arphrd)) = self.netdev(name) else {
                continue;
            };
            if arphrd == ARPHRD_LOOPBACK {
                continue;
            }
            if arphrd == ARPHRD_INFINIBAND {
                found.ipoib.insert(name.clone());
            }
            found.netdevs.insert(name.clone(), nd);
        }
        for l in links {
            if let Some(nd) = found.netdevs.get_mut(&l.name) {
                merge_link_state(nd, l);
            }
        }
        if opts.move_ib_interfaces {
            for n in &found.ipoib {
                if let Some(nd) = found.netdevs.get_mut(n) {
                    nd.kind.get_or_insert_with(|| "ipoib".into());
                }
            }
        }
        found
    }

    /// What the host holds: the uplink (the interfaces carrying the host's default route,
    /// dranet-core's rule, or the ones the operator named), what it depends on (its slaves and
    /// the interfaces it is stacked on) and what rides on it, and the ports of bridges and
    /// bonds. None of them, nor their PCI functions, is published.
    fn held(&mut self, netdevs: &BTreeMap<String, Netdev>, opts: &Options) -> Held {
        let mut held = self.uplinks(netdevs, opts);
        close_over_uplink(&mut held, netdevs);
        hold_ports(&mut held, netdevs);
        let excluded = held
            .iter()
            .map(|(name, why)| {
                let reason = match netdevs.get(name).and_then(|n| n.pci) {
                    Some(a) => format!("{why} (its PCI function {a} is not published either)"),
                    None => why.clone(),
                };
                Excluded {
                    name: name.clone(),
                    reason,
                }
            })
            .collect();
        let names: HashSet<String> = held.into_keys().collect();
        let pci = names.iter().filter_map(|n| netdevs.get(n)?.pci).collect();
        Held {
            names,
            pci,
            excluded,
        }
    }

    /// The uplink interfaces, each with why it is one.
    fn uplinks(
        &mut self,
        netdevs: &BTreeMap<String, Netdev>,
        opts: &Options,
    ) -> BTreeMap<String, String> {
        if let Some(named) = &opts.uplink_interfaces {
            return named
                .iter()
                .map(|n| (n.clone(), "uplink named by --uplink-interfaces".to_string()))
                .collect();
        }
        let found = dranet_core::uplinks(
            netdevs
                .values()
                .map(|n| (n.name.as_str(), n.default_routes.as_slice())),
        );
        if found.len() > PLAUSIBLE_UPLINKS {
            self.warn(format!(
                "{} interfaces carry a lowest-metric default route of the main table ({}): \
                 more uplinks than a host plausibly has, and none of them is published; \
                 name the real ones with --uplink-interfaces",
                found.len(),
                found.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        found
            .into_iter()
            .map(|(n, r)| (n, format!("uplink: {r}")))
            .collect()
    }

    /// The RDMA links, with their char devices and `rdma_cm`.
    fn rdma_links(&mut self, names: &[String]) -> Vec<RdmaLink> {
        let mut chars = self.char_devices();
        let rdma_cm = self
            .fs
            .read_opt("class/misc/rdma_cm/dev")
            .ok()
            .flatten()
            .and_then(|s| parse_devnum(&s))
            .map(|(major, minor)| CharDevice {
                kind: CharDeviceKind::RdmaCm,
                path: "/dev/infiniband/rdma_cm".into(),
                major,
                minor,
                port: None,
            });
        names
            .iter()
            .filter_map(|name| self.rdma_link(name, &mut chars, &rdma_cm))
            .collect()
    }

    /// A device for each candidate function the host does not hold and a pod can use.
    fn pci_devices(
        &mut self,
        candidates: BTreeMap<PciAddress, PciDevice>,
        held: &Held,
    ) -> BTreeMap<PciAddress, NetworkDevice> {
        let mut by_pci = BTreeMap::new();
        for (addr, pci) in candidates {
            if held.pci.contains(&addr) {
                continue;
            }
            if !pci.has_usable_driver() {
                let why = match &pci.driver {
                    Some(d) => format!("bound to {d}"),
                    None => "bound to no driver".into(),
                };
                self.warn(format!("PCI network device {addr} is {why}: it has no netdev or RDMA link to give a pod; not published"));
                continue;
            }
            by_pci.insert(
                addr,
                NetworkDevice {
                    name: pci_device_name(&addr),
                    pci: Some(pci),
                    netdev: None,
                    rdma: None,
                },
            );
        }
        by_pci
    }

    /// Gives an RDMA link to the device that owns it; a link on a held interface is excluded
    /// (returned), one without a published owner or on a device that has one is a warning.
    fn attach_rdma(&mut self, l: RdmaLink, owners: &mut Owners<'_>) -> Option<Excluded> {
        // An RDMA link without a PCI `device` (soft-RoCE, some cloud VFs) belongs to the
        // device that owns its netdev, PCI function or not.
        let owner_pci = l
            .pci
            .or_else(|| owners.netdev_pci.get(l.parent_netdev.as_ref()?).copied());
        let on_held = owner_pci.is_some_and(|a| owners.held_pci.contains(&a))
            || l.parent_netdev
                .as_ref()
                .is_some_and(|n| owners.held_names.contains(n));
        if on_held {
            let on = l
                .parent_netdev
                .clone()
                .or(owner_pci.map(|a| a.to_string()))
                .unwrap_or_default();
            return Some(Excluded {
                name: l.name.clone(),
                reason: format!("RDMA link on {on}, which is not published"),
            });
        }
        let target = match (owner_pci, &l.parent_netdev) {
            (Some(a), _) => owners.by_pci.get_mut(&a),
            (None, Some(nd)) => owners.non_pci.get_mut(&netdev_device_name(nd)),
            (None, None) => None,
        };
        match target {
            Some(dev) => match &dev.rdma {
                None => dev.rdma = Some(l),
                Some(first) => {
                    let msg = format!(
                        "RDMA link {} is on device {}, which already has RDMA link {}; link skipped",
                        l.name, dev.name, first.name
                    );
                    self.warn(msg);
                }
            },
            None => {
                let owner = owner_pci
                    .map(|a| a.to_string())
                    .or(l.parent_netdev.clone())
                    .unwrap_or_else(|| "nothing".into());
                self.warn(format!(
                    "RDMA link {} belongs to {owner}, which is not published; link skipped",
                    l.name
                ));
            }
        }
        None
    }

    /// The devices in name order: PCI functions, then netdevs without one (skipped, with a
    /// warning, where a name collides).
    fn assemble(
        &mut self,
        by_pci: BTreeMap<PciAddress, NetworkDevice>,
        non_pci: BTreeMap<String, NetworkDevice>,
    ) -> Vec<NetworkDevice> {
        let mut devices: Vec<NetworkDevice> = by_pci.into_values().collect();
        for (name, d) in non_pci {
            if devices.iter().any(|x| x.name == name) {
                self.warn(format!(
                    "netdev {name}: its device name collides with a PCI device's; skipped"
                ));
                continue;
            }
            devices.push(d);
        }
        devices.sort_by(|a, b| a.name.cmp(&b.name));
        devices
    }

    fn name_pci(&mut self, devices: &mut [NetworkDevice], gpus: &mut [PciDevice], opts: &Options) {
        let wanted: HashSet<(u16, u16)> = devices
            .iter()
            .filter_map(|d| d.pci.as_ref())
            .chain(gpus.iter())
            .map(|p| (p.ids.vendor, p.ids.device))
            .collect();
        if wanted.is_empty() {
            return;
        }
        let candidates: Vec<PathBuf> = match &opts.pci_ids {
            Some(p) => vec![p.clone()],
            None => {
                let host = self.fs.root().join("..");
                vec![
                    host.join("usr/share/misc/pci.ids"),
                    host.join("usr/share/hwdata/pci.ids"),
                    PathBuf::from("/usr/share/misc/pci.ids"),
                    PathBuf::from("/usr/share/hwdata/pci.ids"),
                ]
            }
        };
        let Some((path, text)) = candidates
            .iter()
            .find_map(|p: &PathBuf| Some((p.as_path(), std::fs::read_to_string(p).ok()?)))
        else {
            let w = format!(
                "no PCI ID database found (tried {}); pciVendor and pciDevice show hex ids",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            self.warn(w);
            return;
        };
        match PciNames::parse(&text, &wanted) {
            Ok(names) => {
                for p in devices
                    .iter_mut()
                    .filter_map(|d| d.pci.as_mut())
                    .chain(gpus.iter_mut())
                {
                    p.vendor_name = names.vendor(p.ids.vendor).map(str::to_string);
                    p.device_name = names.device(p.ids.vendor, p.ids.device).map(str::to_string);
                }
            }
            Err(e) => self.warn(format!(
                "{}: {e}; pciVendor and pciDevice show hex ids",
                Path::new(path).display()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_from_paths() {
        let a: PciAddress = "0000:03:00.0".parse().unwrap();
        let (root, br) = pci_position(
            "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
            &a,
        );
        assert_eq!(root.unwrap().to_string(), "pci0000:00");
        assert_eq!(br.len(), 3);
        // Hyper-V vPCI: the root sits under the VMBus device.
        let v: PciAddress = "0101:00:00.0".parse().unwrap();
        let (root, br) = pci_position(
            "devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/00000101-0001-0000-3130-444531454238/pci0101:00/0101:00:00.0",
            &v,
        );
        assert_eq!(root.unwrap().to_string(), "pci0101:00");
        assert!(br.is_empty());
    }

    #[test]
    fn owners_of_class_devices() {
        assert_eq!(
            owning_pci("devices/pci0000:00/0000:00:03.0/virtio0/net/eth1", "net")
                .unwrap()
                .to_string(),
            "0000:00:03.0"
        );
        assert_eq!(
            owning_pci(
                "devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/net/enx0",
                "net"
            ),
            None
        );
        assert_eq!(owning_pci("devices/virtual/net/veth0", "net"), None);
        assert_eq!(
            owning_pci(
                "devices/pci0000:00/0000:00:02.0/infiniband/mlx5_0",
                "infiniband"
            )
            .unwrap()
            .to_string(),
            "0000:00:02.0"
        );
    }
}
