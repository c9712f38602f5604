//! `dranet topo`: the GPU × NIC matrix in `nvidia-smi topo -m`'s vocabulary.

use std::io::Write;
use std::path::PathBuf;

use dranet_alloc::Allocator;
use dranet_alloc::report::{DeviceRow, relation_from_placement};
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
#[command(
    after_help = "Examples:\n  dranet topo --sysfs testdata/nodes/azure-nd-gb300-v6/sys\n  \
    dranet topo --sysfs testdata/nodes/azure-nd-gb300-v6/sys \\\n    \
    --slices testdata/slices/azure-nd-gb300-v6-gpu.yaml"
)]
pub struct TopoArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// ResourceSlices of other drivers (a GPU driver's, as `kubectl get resourceslices -o yaml`
    /// prints them): their devices are rows too. A device whose `pciBusID` is a GPU of the sysfs
    /// tree is that GPU; the others are placed by their `pcieRoot` and NUMA attributes, which
    /// tell PHB, NODE and SYS but not PIX or PXB. Repeatable.
    #[arg(long, value_name = "FILE")]
    slices: Vec<PathBuf>,
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

/// One GPU row of the matrix: from the sysfs tree (relations from the PCI tree) or from a
/// slice (relations from attributes).
struct GpuRow {
    address: String,
    model: Option<String>,
    numa_node: Option<u32>,
    pcie_root: Option<String>,
    relations: Vec<Relation>,
    /// The slice device (`driver/pool/device`) it comes from; `None` for the sysfs tree's.
    slice_device: Option<String>,
}

/// The sysfs tree's GPUs, then the devices of other drivers' slices that are not among them.
fn gpu_rows(inv: &Inventory, slices: &[serde_json::Value]) -> Result<Vec<GpuRow>, CliError> {
    let m = inv.gpu_nic_matrix();
    let mut rows: Vec<GpuRow> = inv
        .gpus
        .iter()
        .zip(m.relations)
        .map(|(g, relations)| GpuRow {
            address: g.address.to_string(),
            model: g.device_name.clone(),
            numa_node: g.numa_node,
            pcie_root: g.pcie_root.map(|r| r.to_string()),
            relations,
            slice_device: None,
        })
        .collect();
    if slices.is_empty() {
        return Ok(rows);
    }
    let alloc = Allocator::from_json(slices, &[]).map_err(|e| CliError::Usage(e.to_string()))?;
    // (pcieRoot, NUMA node) of each NIC column, as the matrix orders them.
    let nics: Vec<(Option<String>, Option<i64>)> = inv
        .devices
        .iter()
        .filter_map(|d| {
            let p = d.pci.as_ref()?;
            Some((
                p.pcie_root.map(|r| r.to_string()),
                p.numa_node.map(i64::from),
            ))
        })
        .collect();
    for d in alloc.devices() {
        if d.driver() == dranet_core::DRIVER_NAME {
            continue;
        }
        let row = DeviceRow::new(d, "");
        if row.label.as_ref().is_some_and(|bus| {
            inv.gpus
                .iter()
                .any(|g| g.address.to_string().eq_ignore_ascii_case(bus))
        }) {
            continue;
        }
        let model = [
            format!("{}/productName", d.driver()),
            format!("{}/model", d.driver()),
        ]
        .iter()
        .find_map(|n| match d.attribute(n) {
            Some(dranet_alloc::cel::AttributeValue::String(s)) => Some(s.clone()),
            _ => None,
        });
        rows.push(GpuRow {
            address: row.label.clone().unwrap_or_else(|| "-".into()),
            model,
            numa_node: row.numa_node.and_then(|n| u32::try_from(n).ok()),
            pcie_root: row.pcie_root.clone(),
            relations: nics
                .iter()
                .map(|(root, numa)| {
                    relation_from_placement(
                        (row.pcie_root.as_deref(), row.numa_node),
                        (root.as_deref(), *numa),
                    )
                    .unwrap_or(Relation::Unknown)
                })
                .collect(),
            slice_device: Some(d.id().to_string()),
        });
    }
    Ok(rows)
}

/// The ResourceSlices of `paths`, in the v1 shape; every bad document is reported.
fn read_slices(paths: &[PathBuf]) -> Result<Vec<serde_json::Value>, CliError> {
    let mut errors = Vec::new();
    let mut out = Vec::new();
    for path in paths {
        for mut d in super::load::documents(path, &mut errors) {
            match d.kind() {
                "ResourceSlice" => match dranet_alloc::served::slice_to_v1(&mut d.value) {
                    Ok(()) => out.push(d.value),
                    Err(e) => errors.push(d.error("apiVersion", e.to_string())),
                },
                k => errors.push(d.error("kind", format!("kind {k} is not ResourceSlice"))),
            }
        }
    }
    if !errors.is_empty() {
        return Err(CliError::Usage(
            errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        ));
    }
    Ok(out)
}

fn json(inv: &Inventory, rows: &[GpuRow]) -> serde_json::Value {
    let gpus: Vec<serde_json::Value> = rows
        .iter()
        .map(|g| {
            let (numa, cpus) = affinity(inv, g.numa_node);
            serde_json::json!({
                "pciAddress": g.address,
                "model": g.model,
                "numaNode": g.numa_node,
                "cpuAffinity": cpus,
                "numaAffinity": numa,
                "pcieRoot": g.pcie_root,
                "sliceDevice": g.slice_device,
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
        "relations": rows.iter().map(|r| r.relations.clone()).collect::<Vec<_>>(),
        "legend": Relation::LEGEND.iter().map(|(r, w)| (r.as_str(), *w)).collect::<std::collections::BTreeMap<_, _>>(),
    })
}

/// Runs the command.
pub fn run(a: &TopoArgs) -> Result<(), CliError> {
    let slices = read_slices(&a.slices)?;
    let inv = a.source.discover()?;
    let rows = gpu_rows(&inv, &slices)?;
    let io = |e: std::io::Error| CliError::Output(e.to_string());
    let out = std::io::stdout();
    let mut out = out.lock();
    if a.output == TopoFormat::Json {
        let text = serde_json::to_string_pretty(&json(&inv, &rows))
            .map_err(|e| CliError::Output(e.to_string()))?;
        return writeln!(out, "{text}").map_err(io);
    }
    let nics: Vec<_> = inv.devices.iter().filter(|d| d.pci.is_some()).collect();
    let numa = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_else(|| "N/A".into());
    if rows.is_empty() {
        writeln!(
            out,
            "(no GPUs found: no PCI function of class 03 (display) or 1200 (accelerator) in {}{})",
            a.source.sysfs.display(),
            if a.slices.is_empty() {
                ""
            } else {
                ", nor a device of another driver in the slices"
            }
        )
        .map_err(io)?;
    } else {
        let cpus_w = rows
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
        for (gi, g) in rows.iter().enumerate() {
            write!(out, "{:<8}", format!("GPU{gi}")).map_err(io)?;
            for r in &g.relations {
                write!(out, "{r:<6}").map_err(io)?;
            }
            let (node, cpus) = affinity(&inv, g.numa_node);
            writeln!(out, "{cpus:<cpus_w$}{node}").map_err(io)?;
        }
        writeln!(out, "\nGPUs:").map_err(io)?;
        for (i, g) in rows.iter().enumerate() {
            let root = g.pcie_root.as_deref().unwrap_or("-");
            let model = g
                .model
                .as_deref()
                .map(|m| format!(" {m}"))
                .unwrap_or_default();
            let from = g
                .slice_device
                .as_deref()
                .map(|d| format!(" (slice device {d}: relations from its attributes)"))
                .unwrap_or_default();
            writeln!(
                out,
                "  GPU{i}: {} NUMA {} {root}{model}{from}",
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
    if !rows.is_empty() {
        writeln!(out, "\nLegend:").map_err(io)?;
        for (r, what) in Relation::LEGEND {
            writeln!(out, "  {r:<5}= {what}").map_err(io)?;
        }
    }
    Ok(())
}
