//! `dranet topo`: the GPU × NIC matrix in `nvidia-smi topo -m`'s vocabulary.

use std::io::Write;

use dranet_core::{Inventory, Relation};

use super::{CliError, SourceArgs};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TopoFormat {
    /// The matrix, as `nvidia-smi topo -m` lays it out, with the GPUs, NICs and a legend.
    Table,
    /// The same as one JSON document.
    Json,
}

/// Arguments of `dranet topo`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  dranet topo --sysfs testdata/nodes/azure-nd-gb300-v6/sys")]
pub struct TopoArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = TopoFormat::Table)]
    output: TopoFormat,
}

/// The NUMA node and its CPUs, as `nvidia-smi topo -m`'s affinity columns.
fn affinity(inv: &Inventory, node: Option<u32>) -> (String, String) {
    match node {
        Some(n) => {
            let cpus = inv
                .numa
                .nodes
                .iter()
                .find(|x| x.id == n)
                .map(|x| x.cpulist.clone())
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| "N/A".into());
            (n.to_string(), cpus)
        }
        None => ("N/A".into(), "N/A".into()),
    }
}

fn json(inv: &Inventory) -> serde_json::Value {
    let m = inv.gpu_nic_matrix();
    let gpus: Vec<serde_json::Value> = inv
        .gpus
        .iter()
        .map(|g| {
            let (numa, cpus) = affinity(inv, g.numa_node);
            serde_json::json!({
                "pciAddress": g.address.to_string(),
                "model": g.device_name,
                "numaNode": g.numa_node,
                "cpuAffinity": cpus,
                "numaAffinity": numa,
                "pcieRoot": g.pcie_root.map(|r| r.to_string()),
            })
        })
        .collect();
    let nics: Vec<serde_json::Value> = inv
        .devices
        .iter()
        .filter_map(|d| {
            let p = d.pci.as_ref()?;
            Some(serde_json::json!({
                "name": d.name,
                "rdmaDevice": d.rdma.as_ref().map(|r| r.name.clone()),
                "ifName": d.netdev.as_ref().map(|n| n.name.clone()),
                "numaNode": p.numa_node,
                "pcieRoot": p.pcie_root.map(|r| r.to_string()),
            }))
        })
        .collect();
    serde_json::json!({
        "gpus": gpus,
        "nics": nics,
        "relations": m.relations,
        "legend": Relation::LEGEND.iter().map(|(r, w)| (r.as_str(), *w)).collect::<std::collections::BTreeMap<_, _>>(),
    })
}

/// Runs the command.
pub fn run(a: &TopoArgs) -> Result<(), CliError> {
    let inv = a.source.discover()?;
    let io = |e: std::io::Error| CliError::Output(e.to_string());
    let out = std::io::stdout();
    let mut out = out.lock();
    if a.output == TopoFormat::Json {
        let text = serde_json::to_string_pretty(&json(&inv))
            .map_err(|e| CliError::Output(e.to_string()))?;
        return writeln!(out, "{text}").map_err(io);
    }
    let nics: Vec<_> = inv.devices.iter().filter(|d| d.pci.is_some()).collect();
    let numa = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_else(|| "N/A".into());
    if inv.gpus.is_empty() {
        writeln!(
            out,
            "(no GPUs found: no PCI function of class 03 (display) or 1200 (accelerator) in {})",
            a.source.sysfs.display()
        )
        .map_err(io)?;
    } else {
        let cpus_w = inv
            .gpus
            .iter()
            .map(|g| affinity(&inv, g.numa_node).1.len())
            .max()
            .unwrap_or(0)
            .max("CPU Affinity".len())
            + 2;
        write!(out, "{:<8}", "").map_err(io)?;
        for i in 0..nics.len() {
            write!(out, "{:<6}", format!("NIC{i}")).map_err(io)?;
        }
        writeln!(out, "{:<cpus_w$}NUMA Affinity", "CPU Affinity").map_err(io)?;
        for (gi, (g, row)) in inv
            .gpus
            .iter()
            .zip(inv.gpu_nic_matrix().relations)
            .enumerate()
        {
            write!(out, "{:<8}", format!("GPU{gi}")).map_err(io)?;
            for r in row {
                write!(out, "{r:<6}").map_err(io)?;
            }
            let (node, cpus) = affinity(&inv, g.numa_node);
            writeln!(out, "{cpus:<cpus_w$}{node}").map_err(io)?;
        }
        writeln!(out, "\nGPUs:").map_err(io)?;
        for (i, g) in inv.gpus.iter().enumerate() {
            let root = g
                .pcie_root
                .map(|r| r.to_string())
                .unwrap_or_else(|| "-".into());
            let model = g
                .device_name
                .as_deref()
                .map(|m| format!(" {m}"))
                .unwrap_or_default();
            writeln!(
                out,
                "  GPU{i}: {} NUMA {} {root}{model}",
                g.address,
                numa(g.numa_node)
            )
            .map_err(io)?;
        }
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
    if !inv.gpus.is_empty() {
        writeln!(out, "\nLegend:").map_err(io)?;
        for (r, what) in Relation::LEGEND {
            writeln!(out, "  {r:<5}= {what}").map_err(io)?;
        }
    }
    Ok(())
}
