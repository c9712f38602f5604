//! `dranet topo`: the GPU × NIC matrix in `nvidia-smi topo -m`'s vocabulary.

use std::io::Write;

use dranet_core::Relation;

use super::{CliError, SourceArgs};

/// Arguments of `dranet topo`.
#[derive(Debug, clap::Args)]
pub struct TopoArgs {
    #[command(flatten)]
    source: SourceArgs,
}

/// Runs the command.
pub fn run(a: &TopoArgs) -> Result<(), CliError> {
    let inv = a.source.discover()?;
    let io = |e: std::io::Error| CliError::Output(e.to_string());
    let out = std::io::stdout();
    let mut out = out.lock();
    let nics: Vec<_> = inv.devices.iter().filter(|d| d.pci.is_some()).collect();
    let numa = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_else(|| "N/A".into());
    write!(out, "{:<8}", "").map_err(io)?;
    for i in 0..nics.len() {
        write!(out, "{:<6}", format!("NIC{i}")).map_err(io)?;
    }
    writeln!(out, "NUMA Affinity").map_err(io)?;
    for (g, row) in inv.gpus.iter().zip(inv.gpu_nic_matrix().relations) {
        let gi = inv
            .gpus
            .iter()
            .position(|x| x.address == g.address)
            .unwrap_or(0);
        write!(out, "{:<8}", format!("GPU{gi}")).map_err(io)?;
        for r in row {
            write!(out, "{r:<6}").map_err(io)?;
        }
        writeln!(out, "{}", numa(g.numa_node)).map_err(io)?;
    }
    if inv.gpus.is_empty() {
        writeln!(out, "(no GPUs found)").map_err(io)?;
    }
    writeln!(out, "\nGPUs:").map_err(io)?;
    for (i, g) in inv.gpus.iter().enumerate() {
        let root = g
            .pcie_root
            .map(|r| r.to_string())
            .unwrap_or_else(|| "-".into());
        writeln!(
            out,
            "  GPU{i}: {} NUMA {} {root}",
            g.address,
            numa(g.numa_node)
        )
        .map_err(io)?;
    }
    writeln!(out, "\nNICs:").map_err(io)?;
    for (i, d) in nics.iter().enumerate() {
        let pci = d.pci.as_ref();
        let link = d
            .rdma
            .as_ref()
            .map(|r| r.name.clone())
            .or_else(|| d.netdev.as_ref().map(|n| n.name.clone()))
            .unwrap_or_else(|| "-".into());
        let root = pci
            .and_then(|p| p.pcie_root)
            .map(|r| r.to_string())
            .unwrap_or_else(|| "-".into());
        writeln!(
            out,
            "  NIC{i}: {link} {} NUMA {} {root}",
            d.name,
            numa(d.numa_node())
        )
        .map_err(io)?;
    }
    writeln!(out, "\nLegend:").map_err(io)?;
    for (r, what) in Relation::LEGEND {
        writeln!(out, "  {r:<5}= {what}").map_err(io)?;
    }
    Ok(())
}
