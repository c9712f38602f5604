//! The subcommands.

pub mod inventory;
pub mod topo;

use std::path::PathBuf;

use dranet_core::{Discover, Inventory};

/// Where the node is read from: shared by every command that discovers.
#[derive(Debug, Clone, clap::Args)]
pub struct SourceArgs {
    /// Root of the sysfs tree to read: the host's `/sys`, a host sysfs mounted elsewhere, or a
    /// fixture (`testdata/nodes/<name>/sys`, whose `links.json` stands in for netlink).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs: PathBuf,
    /// IPoIB netdevs move into the pod with their device (true), or are skipped so the device is
    /// published IB-only (false).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub move_ib_interfaces: bool,
    /// PCI ID database for vendor and device names (default: beside the sysfs root, then
    /// /usr/share/misc/pci.ids and /usr/share/hwdata/pci.ids).
    #[arg(long, value_name = "FILE")]
    pub pci_ids: Option<PathBuf>,
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
}

impl SourceArgs {
    /// Discovers the node, logging each warning.
    pub fn discover(&self) -> Result<Inventory, CliError> {
        if !self.sysfs.is_dir() {
            return Err(CliError::Usage(format!(
                "--sysfs {}: not a directory",
                self.sysfs.display()
            )));
        }
        let opts = dranet_discovery::Options {
            move_ib_interfaces: self.move_ib_interfaces,
            pci_ids: self.pci_ids.clone(),
        };
        let inv = dranet_discovery::host(&self.sysfs, opts).discover()?;
        for w in &inv.warnings {
            tracing::warn!("{w}");
        }
        Ok(inv)
    }
}
