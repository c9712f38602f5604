//! `dranet inventory`: what this node would publish.

use std::io::Write;

use dranet_core::attributes::names;
use dranet_core::slice::{published_devices, resource_slices};
use dranet_core::{AttributeOptions, DRIVER_NAME};

use super::{CliError, CloudArgs, SourceArgs};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per device.
    Table,
    /// The ResourceSlice (or a v1 List of them when the pool needs several).
    Json,
    /// The ResourceSlices as a YAML stream.
    Yaml,
}

/// Arguments of `dranet inventory`.
#[derive(Debug, clap::Args)]
pub struct InventoryArgs {
    #[command(flatten)]
    source: SourceArgs,
    #[command(flatten)]
    cloud: CloudArgs,
    /// Node name: the pool and the slices' `nodeName` (default: $NODE_NAME, else the hostname).
    #[arg(long, value_name = "N")]
    node_name: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Table)]
    output: Format,
    /// Publish resource.kubernetes.io/numaNode as a list (the node, then the same-socket nodes
    /// at minimum SLIT distance); needs an API server with list-typed attributes.
    #[arg(long)]
    numa_node_list: bool,
    /// Also list the devices found and not published (the uplink and what it depends on), with
    /// the reason: after the table, or on stderr with `-o json|yaml`.
    #[arg(long)]
    show_excluded: bool,
}

/// Runs the command.
pub fn run(a: &InventoryArgs) -> Result<(), CliError> {
    let inv = a.source.discover()?;
    let opts = AttributeOptions {
        numa_node_list: a.numa_node_list,
    };
    let cloud = a.cloud.provider(&a.source.sysfs);
    let (devices, warnings) = published_devices(&inv, opts, cloud.as_ref());
    for w in &warnings {
        tracing::warn!("{w}");
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    let io = |e: std::io::Error| CliError::Output(e.to_string());
    match a.output {
        Format::Table => {
            let s = |d: &dranet_core::slice::PublishedDevice, k: &str| {
                d.attributes
                    .get(k)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "-".into())
            };
            writeln!(
                out,
                "{:<20} {:<14} {:<12} {:<11} {:<5} {:<12} {:<5} {:<7} DEVICE",
                "NAME",
                "PCI ADDRESS",
                "IFNAME",
                "RDMA DEVICE",
                "NUMA",
                "PCIE ROOT",
                "RDMA",
                "IB ONLY"
            )
            .map_err(io)?;
            for d in &devices {
                writeln!(
                    out,
                    "{:<20} {:<14} {:<12} {:<11} {:<5} {:<12} {:<5} {:<7} {}",
                    d.name,
                    s(d, names::PCI_ADDRESS),
                    s(d, names::IF_NAME),
                    s(d, names::RDMA_DEVICE),
                    s(d, names::NUMA_NODE),
                    s(d, names::STD_PCIE_ROOT),
                    s(d, names::RDMA),
                    s(d, names::IB_ONLY),
                    s(d, names::PCI_DEVICE),
                )
                .map_err(io)?;
            }
            if a.show_excluded && !inv.excluded.is_empty() {
                writeln!(out, "\nNOT PUBLISHED        REASON").map_err(io)?;
                for e in &inv.excluded {
                    writeln!(out, "{:<20} {}", e.name, e.reason).map_err(io)?;
                }
            }
        }
        Format::Json | Format::Yaml => {
            if a.show_excluded {
                for e in &inv.excluded {
                    eprintln!("not published: {}: {}", e.name, e.reason);
                }
            }
            let slices = resource_slices(
                &super::node_name(&a.node_name, "--node-name")?,
                DRIVER_NAME,
                &devices,
                1,
            );
            if a.output == Format::Json {
                let v = if slices.len() == 1 {
                    slices.into_iter().next().unwrap_or_default()
                } else {
                    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": slices})
                };
                let text = serde_json::to_string_pretty(&v)
                    .map_err(|e| CliError::Output(e.to_string()))?;
                writeln!(out, "{text}").map_err(io)?;
            } else {
                for s in &slices {
                    let text =
                        serde_saphyr::to_string(s).map_err(|e| CliError::Output(e.to_string()))?;
                    write!(out, "---\n{text}").map_err(io)?;
                }
            }
        }
    }
    Ok(())
}
