//! `dranet doctor`: checks a node before installing dranet, or when a pod does not get its NICs.
//! Each finding says what was seen and, when it is a problem, the fix in one line.

mod attach;
pub mod attach_times;

pub use attach::{AttachInput, CONTAINERD_CONFIGS, nri_request_timeout, read_first};

use std::path::{Path, PathBuf};

use dranet_core::{Inventory, LinkSource, LinkState, Relation};
use dranet_podnet::rdma::NetnsMode;
use serde::Serialize;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// As it should be.
    Ok,
    /// Works, but not as well as it could, or cannot be checked here.
    Warn,
    /// dranet will not work (or not for some pods) until it is fixed.
    Fail,
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Its outcome.
    pub status: Status,
    /// What was checked: `runtime`, `kubelet`, `rdma`, `device`, `topology`, `uplink`, `netns`,
    /// `discovery`.
    pub area: &'static str,
    /// What was seen.
    pub message: String,
    /// The fix, for warnings and failures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// What the checks look at.
#[derive(Debug, Clone)]
pub struct DoctorInput {
    /// The node's inventory (from `--sysfs`).
    pub inventory: Inventory,
    /// Link state (netlink on the host, `links.json` beside a fixture).
    pub links: Vec<LinkState>,
    /// Whether the node is this machine (`--sysfs /sys`): device nodes, sockets, mounts and the
    /// RDMA subsystem are then checked too.
    pub host: bool,
    /// The runtime's NRI socket.
    pub nri_socket: PathBuf,
    /// The kubelet's root directory.
    pub kubelet_root_dir: PathBuf,
    /// `/proc/self/mountinfo`'s text (to check `/run/netns` propagation); `None` skips it.
    pub mountinfo: Option<String>,
    /// The RDMA namespace mode, or why it could not be read; `None` skips the check.
    pub rdma_mode: Option<Result<NetnsMode, String>>,
    /// `containerd --version`'s output, if it ran.
    pub runtime_version: Option<String>,
    /// containerd's NRI timeout and the hook (checked on the host only).
    pub attach: AttachInput,
}

fn finding(status: Status, area: &'static str, message: String, fix: Option<&str>) -> Finding {
    Finding {
        status,
        area,
        message,
        fix: fix.map(str::to_string),
    }
}

/// Runs every check on `input`.
pub fn check(input: &DoctorInput) -> Vec<Finding> {
    let mut out = Vec::new();
    if input.host {
        runtime(input, &mut out);
        let nics = input
            .inventory
            .devices
            .iter()
            .filter(|d| d.netdev.is_some())
            .count();
        attach::check(&input.attach, nics, &mut out);
        kubelet(input, &mut out);
        if let Some(m) = &input.mountinfo {
            out.push(netns_propagation(m));
        }
        if let Some(mode) = &input.rdma_mode {
            out.push(rdma_mode(mode, &input.inventory));
        }
    }
    devices(input, &mut out);
    topology(&input.inventory, &mut out);
    uplink(&input.links, &mut out);
    for w in &input.inventory.warnings {
        out.push(finding(Status::Warn, "discovery", w.clone(), None));
    }
    out
}

fn is_socket(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket())
}

fn runtime(input: &DoctorInput, out: &mut Vec<Finding>) {
    let version = input
        .runtime_version
        .as_deref()
        .map(str::trim)
        .unwrap_or("version unknown (containerd not on PATH)");
    let sock = &input.nri_socket;
    if !is_socket(sock) {
        out.push(finding(
            Status::Fail,
            "runtime",
            format!("no NRI socket at {} ({version})", sock.display()),
            Some("enable NRI in the runtime: containerd 1.7 needs deploy/enable-nri.sh (2.x has it on); or pass the runtime's socket_path as --nri-socket"),
        ));
        return;
    }
    match std::os::unix::net::UnixStream::connect(sock) {
        Ok(_) => out.push(finding(
            Status::Ok,
            "runtime",
            format!("NRI socket {} answers ({version})", sock.display()),
            None,
        )),
        Err(e) => out.push(finding(
            Status::Fail,
            "runtime",
            format!("NRI socket {} does not answer: {e}", sock.display()),
            Some("restart the runtime, or remove a stale socket left by one that is gone"),
        )),
    }
}

fn kubelet(input: &DoctorInput, out: &mut Vec<Finding>) {
    for d in ["plugins_registry", "plugins"] {
        let p = input.kubelet_root_dir.join(d);
        if p.is_dir() {
            out.push(finding(
                Status::Ok,
                "kubelet",
                format!("{} exists", p.display()),
                None,
            ));
        } else {
            out.push(finding(
                Status::Fail,
                "kubelet",
                format!("{} is missing", p.display()),
                Some("pass the kubelet's --root-dir as --kubelet-root-dir (and mount it at the same path in the DaemonSet)"),
            ));
        }
    }
}

/// The propagation of the mount that holds `/run/netns`, from mountinfo's text.
pub fn netns_propagation(mountinfo: &str) -> Finding {
    // The longest mount point that is /run/netns or a parent of it.
    let mut best: Option<(&str, bool)> = None;
    for line in mountinfo.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (Some(point), Some(sep)) = (f.get(4), f.iter().position(|x| *x == "-")) else {
            continue;
        };
        let covers = *point == "/"
            || "/run/netns" == *point
            || "/run/netns".starts_with(&format!("{point}/"));
        if !covers {
            continue;
        }
        let propagated = f[6..sep]
            .iter()
            .any(|o| o.starts_with("shared:") || o.starts_with("master:"));
        if best.is_none_or(|(b, _)| point.len() >= b.len()) {
            best = Some((point, propagated));
        }
    }
    match best {
        Some((point, true)) => finding(
            Status::Ok,
            "netns",
            format!(
                "/run/netns is on {point}, a shared or slave mount: pods' namespaces reach the DaemonSet"
            ),
            None,
        ),
        Some((point, false)) => finding(
            Status::Fail,
            "netns",
            format!(
                "/run/netns is on {point}, a private mount: the runtime refuses the DaemonSet's HostToContainer mount of it"
            ),
            Some(
                "mount --make-rshared / (systemd does this at boot), or: mount --bind /run/netns /run/netns && mount --make-shared /run/netns",
            ),
        ),
        None => finding(
            Status::Warn,
            "netns",
            "no mount holds /run/netns in mountinfo".into(),
            None,
        ),
    }
}

fn rdma_mode(mode: &Result<NetnsMode, String>, inv: &Inventory) -> Finding {
    let has_rdma = inv.devices.iter().any(|d| d.rdma.is_some());
    match mode {
        Ok(NetnsMode::Shared) => finding(
            Status::Ok,
            "rdma",
            "RDMA netns mode shared: a pod gets only its allocated char devices; RDMA sysfs stays visible to all".into(),
            None,
        ),
        Ok(NetnsMode::Exclusive) => finding(
            Status::Ok,
            "rdma",
            "RDMA netns mode exclusive: RDMA devices move into their pod's namespace".into(),
            None,
        ),
        Err(e) if has_rdma => finding(
            Status::Warn,
            "rdma",
            format!("RDMA netns mode unreadable ({e}); dranet treats it as shared"),
            Some("load the RDMA core (modprobe ib_core ib_uverbs) and check `rdma system show`"),
        ),
        Err(_) => finding(
            Status::Ok,
            "rdma",
            "no RDMA subsystem on this node (and no RDMA links found)".into(),
            None,
        ),
    }
}

fn devices(input: &DoctorInput, out: &mut Vec<Finding>) {
    let inv = &input.inventory;
    if inv.devices.is_empty() {
        out.push(finding(
            Status::Warn,
            "device",
            "no device would be published".into(),
            Some("check that the NICs' drivers are bound (dranet inventory shows what is found and why not)"),
        ));
    }
    for d in &inv.devices {
        let netdev = d.netdev.as_ref().map(|n| n.name.as_str()).unwrap_or("-");
        let numa = d
            .numa_node()
            .map(|n| n.to_string())
            .unwrap_or_else(|| "-".into());
        let Some(r) = &d.rdma else {
            out.push(finding(
                Status::Ok,
                "device",
                format!("{}: netdev {netdev}, no RDMA link, NUMA {numa}", d.name),
                None,
            ));
            continue;
        };
        let paths: Vec<&str> = r.char_devices.iter().map(|c| c.path.as_str()).collect();
        if !r
            .char_devices
            .iter()
            .any(|c| c.kind == dranet_core::CharDeviceKind::Uverbs)
        {
            out.push(finding(
                Status::Fail,
                "device",
                format!(
                    "{}: RDMA link {} has no uverbs char device: pods could not use it",
                    d.name, r.name
                ),
                Some("modprobe ib_uverbs (and ib_umad for MAD tools)"),
            ));
            continue;
        }
        let missing: Vec<&str> = if input.host {
            paths
                .iter()
                .copied()
                .filter(|p| !Path::new(p).exists())
                .collect()
        } else {
            Vec::new()
        };
        if missing.is_empty() {
            out.push(finding(
                Status::Ok,
                "device",
                format!(
                    "{}: netdev {netdev}, RDMA link {} ({}), NUMA {numa}",
                    d.name,
                    r.name,
                    paths.join(" ")
                ),
                None,
            ));
        } else {
            out.push(finding(
                Status::Warn,
                "device",
                format!(
                    "{}: RDMA link {}: {} not in /dev on this node (pods get them by number from the runtime, but RDMA tools on the host will miss them)",
                    d.name,
                    r.name,
                    missing.join(" ")
                ),
                Some("check udev rules for /dev/infiniband (rdma-core ships them)"),
            ));
        }
    }
}

fn topology(inv: &Inventory, out: &mut Vec<Finding>) {
    for gpu in &inv.gpus {
        let near = inv.nearest_nics(gpu);
        let Some((nic, rel)) = near.first() else {
            continue;
        };
        let numa = gpu
            .numa_node
            .map(|n| n.to_string())
            .unwrap_or_else(|| "-".into());
        if *rel <= Relation::Node {
            let same: Vec<&str> = near
                .iter()
                .filter(|(_, r)| r == rel)
                .map(|(d, _)| d.name.as_str())
                .collect();
            out.push(finding(
                Status::Ok,
                "topology",
                format!(
                    "GPU {} (NUMA {numa}): nearest NICs {} ({rel})",
                    gpu.address,
                    same.join(", ")
                ),
                None,
            ));
        } else {
            out.push(finding(
                Status::Warn,
                "topology",
                format!(
                    "GPU {} (NUMA {numa}) has no NIC on its NUMA node; nearest {} ({rel})",
                    gpu.address, nic.name
                ),
                Some("traffic of this GPU crosses sockets: expect about half the bandwidth (see dranet topo)"),
            ));
        }
    }
}

fn uplink(links: &[LinkState], out: &mut Vec<Finding>) {
    let up = dranet_core::uplinks(
        links
            .iter()
            .map(|l| (l.name.as_str(), l.default_routes.as_slice())),
    );
    for (name, route) in &up {
        out.push(finding(
            Status::Ok,
            "uplink",
            format!(
                "{name} carries the host's default route ({route}): it, its lower and enslaved links and their PCI functions are not published, so no pod can take the node's network"
            ),
            None,
        ));
    }
}

/// The link state discovery would use for the tree at `sysfs`: `links.json` beside a fixture,
/// netlink otherwise.
pub fn links_for(sysfs: &Path) -> dranet_discovery::Result<Vec<LinkState>> {
    let fixture = sysfs.parent().map(|p| p.join("links.json"));
    match fixture.filter(|p| p.is_file()) {
        Some(path) => dranet_discovery::FixtureLinks { path }.links(),
        None => dranet_discovery::NetlinkLinks.links(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARED: &str = "25 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n";
    const PRIVATE: &str = "25 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n";

    #[test]
    fn netns_propagation_follows_the_mount_that_holds_it() {
        assert_eq!(netns_propagation(SHARED).status, Status::Ok);
        let f = netns_propagation(PRIVATE);
        assert_eq!(f.status, Status::Fail);
        assert!(f.fix.as_deref().unwrap().contains("make-shared"));
        // A shared bind mount of /run/netns itself wins over a private /.
        let both = format!(
            "{PRIVATE}42 27 254:0 /run/netns /run/netns rw,relatime shared:7 - ext4 /dev/vda rw\n"
        );
        assert_eq!(netns_propagation(&both).status, Status::Ok);
        // /run/netnsfoo is not a parent of /run/netns.
        let other =
            format!("{PRIVATE}43 27 254:0 /x /run/netnsfoo rw shared:8 - ext4 /dev/vda rw\n");
        assert_eq!(netns_propagation(&other).status, Status::Fail);
    }
}
