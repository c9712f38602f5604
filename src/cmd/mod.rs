//! The subcommands.

pub mod check;
mod cloud;
pub mod doctor;
pub mod hook;
pub mod inventory;
pub mod load;
pub mod run;
pub mod shell;
pub mod topo;

use std::path::PathBuf;

use dranet_core::{Discover, Inventory};
use dranet_driver::publish::{
    DEFAULT_FILTER, InUse, PodFaults, Policy, PolicyFlags, Publication, publication,
};

pub use cloud::CloudArgs;

/// Where the node is read from: shared by every command that discovers.
#[derive(Debug, Clone, clap::Args)]
pub struct SourceArgs {
    /// Root of the sysfs tree to read: the host's `/sys`, a host sysfs mounted elsewhere, or a
    /// fixture (`testdata/nodes/<name>/sys`, whose `links.json` stands in for netlink).
    #[arg(long, value_name = "DIR", default_value = "/sys", env = "DRANET_SYSFS")]
    pub sysfs: PathBuf,
    /// IPoIB netdevs move into the pod with their device (true), or are skipped so the device is
    /// published IB-only (false).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set, env = "DRANET_MOVE_IB_INTERFACES")]
    pub move_ib_interfaces: bool,
    /// PCI ID database for vendor and device names (default: beside the sysfs root, then
    /// /usr/share/misc/pci.ids and /usr/share/hwdata/pci.ids).
    #[arg(long, value_name = "FILE", env = "DRANET_PCI_IDS")]
    pub pci_ids: Option<PathBuf>,
    /// The host's uplink interfaces, comma-separated: never published, nor their PCI functions.
    /// Turns detection off (default: the interfaces of the lowest-metric default route of the
    /// main table, per address family; see docs/attributes.md, "Which interfaces are the uplink").
    #[arg(
        long,
        value_name = "IF,...",
        value_delimiter = ',',
        env = "DRANET_UPLINK_INTERFACES"
    )]
    pub uplink_interfaces: Option<Vec<String>>,
}

/// What is published, as the daemon decides it: shared by `run`, `inventory` and `check`, so that
/// the preview and the check see what the daemon publishes with the same flags.
#[derive(Debug, Clone, clap::Args)]
pub struct PublishArgs {
    /// CEL over a device's attributes (`device.attributes["dra.net"].…`): only devices it keeps
    /// are published (empty: all).
    #[arg(long, value_name = "CEL", default_value = DEFAULT_FILTER, env = "DRANET_FILTER")]
    pub filter: String,
    /// CEL like --filter: the published devices it keeps are offered for sharing — several claims
    /// of a child type (Macvlan, IPVLAN) at once, on Kubernetes consumable capacity (1.36; an
    /// older API server drops the fields and the devices stay exclusive). Empty: none. Not in
    /// upstream dranet.
    #[arg(
        long,
        value_name = "CEL",
        default_value = "",
        env = "DRANET_SHARE_FILTER"
    )]
    pub share_filter: String,
    /// How many claims may share one device picked by --share-filter (its `children` capacity).
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..), env = "DRANET_SHARE_CHILDREN")]
    pub share_children: u32,
    /// Upstream's feature gates, `Name=bool,…`: `DRAListTypeAttributes` publishes
    /// resource.kubernetes.io/numaNode as a list (the API server needs it too);
    /// `PersistentResourceSliceAttributes` is how dranet-rs always behaves (true only).
    #[arg(
        long,
        value_name = "GATES",
        default_value = "",
        env = "DRANET_FEATURE_GATES"
    )]
    pub feature_gates: String,
}

impl Default for PublishArgs {
    /// The daemon's defaults.
    fn default() -> Self {
        let d = PolicyFlags::default();
        Self {
            filter: d.filter.to_string(),
            share_filter: d.share_filter.to_string(),
            share_children: d.share_children,
            feature_gates: d.feature_gates.to_string(),
        }
    }
}

impl PublishArgs {
    /// The publication policy these flags ask for; a bad value is an error naming its flag.
    pub fn policy(&self) -> Result<Policy, CliError> {
        Policy::from_flags(&PolicyFlags {
            filter: &self.filter,
            share_filter: &self.share_filter,
            share_children: self.share_children,
            feature_gates: &self.feature_gates,
        })
        .map_err(|e| CliError::Usage(e.to_string()))
    }
}

/// What the daemon would publish first for `inv` (nothing in use yet), its warnings logged: the
/// node as `inventory` shows it and `check --sysfs` allocates from it.
pub fn publication_of(
    inv: &Inventory,
    cloud: &dyn dranet_core::CloudProvider,
    policy: &Policy,
) -> Publication {
    let p = publication(inv, cloud, policy, &InUse::none(), &PodFaults::new());
    for w in &p.warnings {
        tracing::warn!("{w}");
    }
    p
}

/// This node's name, for the commands that publish as the node (`run`, `inventory`).
#[derive(Debug, Clone, clap::Args)]
pub struct NodeArgs {
    /// The Node's name: the pool and the slices' nodeName (default: $NODE_NAME, else the
    /// hostname). Upstream's `--hostname-override` is the same flag.
    #[arg(long, value_name = "NAME", visible_alias = "hostname-override")]
    pub node_name: Option<String>,
}

impl NodeArgs {
    /// The name: the flag, else `$NODE_NAME`, else the hostname ([`node_name`]).
    pub fn name(&self) -> Result<String, CliError> {
        node_name(&self.node_name, "--node-name")
    }
}

/// Errors of the binary: one line each.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Discovery failed as a whole.
    #[error("{0}")]
    Discovery(#[from] dranet_discovery::Error),
    /// Output could not be written or encoded.
    #[error("output: {0}")]
    Output(String),
    /// A bad argument.
    #[error("{0}")]
    Usage(String),
    /// `dranet check` failed.
    #[error("{0}")]
    Check(#[from] check::CheckError),
}

impl SourceArgs {
    /// The discovery options these flags ask for.
    pub fn discovery_options(&self) -> Result<dranet_discovery::Options, CliError> {
        let uplink_interfaces = match &self.uplink_interfaces {
            Some(names) => {
                let names: Vec<String> = names
                    .iter()
                    .map(|n| n.trim().to_string())
                    .filter(|n| !n.is_empty())
                    .collect();
                if names.is_empty() {
                    return Err(CliError::Usage(
                        "--uplink-interfaces: no interface named (to publish every interface, which \
                         would let a pod take the node's network, name one that does not exist)"
                            .into(),
                    ));
                }
                Some(names)
            }
            None => None,
        };
        Ok(dranet_discovery::Options {
            move_ib_interfaces: self.move_ib_interfaces,
            pci_ids: self.pci_ids.clone(),
            uplink_interfaces,
        })
    }

    /// Discovers the node, logging each warning.
    pub fn discover(&self) -> Result<Inventory, CliError> {
        let inv = self.discover_quietly()?;
        for w in &inv.warnings {
            tracing::warn!("{w}");
        }
        Ok(inv)
    }

    /// Discovers the node; its warnings are the caller's to tell (a [`publication`]'s carry
    /// them).
    ///
    /// [`publication`]: dranet_driver::publish::publication
    pub fn discover_quietly(&self) -> Result<Inventory, CliError> {
        check_sysfs(&self.sysfs).map_err(CliError::Usage)?;
        Ok(dranet_discovery::host(&self.sysfs, self.discovery_options()?).discover()?)
    }
}

/// Refuses a `--sysfs` that is not a sysfs tree (an empty table and exit 0 would read as "this
/// node has no NICs"), pointing at the `sys/` below it when there is one (a fixture's folder).
pub fn check_sysfs(sysfs: &std::path::Path) -> Result<(), String> {
    if !sysfs.is_dir() {
        return Err(format!("--sysfs {}: not a directory", sysfs.display()));
    }
    let looks_like_sysfs = ["bus/pci/devices", "class/net", "devices"]
        .iter()
        .any(|d| sysfs.join(d).is_dir());
    if looks_like_sysfs {
        return Ok(());
    }
    let hint = if sysfs.join("sys/devices").is_dir() {
        format!("; did you mean --sysfs {}?", sysfs.join("sys").display())
    } else {
        String::new()
    };
    Err(format!(
        "--sysfs {}: not a sysfs tree (no bus/pci/devices, class/net or devices in it){hint}",
        sysfs.display()
    ))
}

/// The node name for devices read from sysfs: the flag, else `$NODE_NAME` (as the DaemonSet sets
/// it), else the hostname; `inventory` and `check` agree, so one device has one identity. A name
/// the API server would refuse (a kernel hostname of `(none)`, upper case, …) is an error naming
/// `flag`, the way to set it.
pub fn node_name(arg: &Option<String>, flag: &str) -> Result<String, CliError> {
    let (name, from) = if let Some(n) = arg {
        (n.clone(), flag.to_string())
    } else if let Some(n) = std::env::var("NODE_NAME").ok().filter(|s| !s.is_empty()) {
        (n, "$NODE_NAME".to_string())
    } else {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_lowercase())
            .unwrap_or_default();
        (host, "the kernel hostname".to_string())
    };
    dranet_core::names::check_dns1123_subdomain(&name).map_err(|why| {
        CliError::Usage(format!(
            "node name {name:?} (from {from}) {why}: it names the Node, the pool and the \
             ResourceSlices; set the Node's name with {flag} or $NODE_NAME"
        ))
    })?;
    Ok(name)
}

/// Rows as aligned columns (two spaces apart, the last column unpadded), as kubectl prints
/// tables: widths follow the content, so a 35-character AKS node name does not break them.
pub fn aligned(rows: &[Vec<String>], indent: &str) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::from(indent);
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(widths[c] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
