//! `dranet inventory`: what this node would publish.

use std::io::Write;

use dranet_core::attributes::names;
use dranet_core::slice::{published_devices, resource_slices};
use dranet_core::{AttributeOptions, DRIVER_NAME, Excluded};
use dranet_driver::daemon::devices::{DEFAULT_FILTER, default_filter_reason, keeps};

use super::{CliError, CloudArgs, SourceArgs};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per device.
    Table,
    /// The table with the link's state: netdev state and MTU, RDMA port state and link layer.
    Wide,
    /// The device names only, one per line (for scripts).
    Name,
    /// The ResourceSlice (or a v1 List of them when the pool needs several).
    Json,
    /// The ResourceSlices as a YAML stream.
    Yaml,
}

/// Arguments of `dranet inventory`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  dranet inventory --sysfs testdata/nodes/azure-nd-gb300-v6/sys\n  dranet inventory -o wide --show-excluded\n  dranet inventory --node-name aks-gb300-0 --azure-imds-file imds.json -o yaml"
)]
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
    /// Also list the devices found and not published (the uplink and what is stacked on it or
    /// under it, devices `--filter` leaves out), with the reason: after the table, or on stderr
    /// with `-o json|yaml`.
    #[arg(long)]
    show_excluded: bool,
    /// The daemon's `--filter`: only devices it keeps are shown as published (empty: all).
    #[arg(long, value_name = "CEL", default_value = DEFAULT_FILTER, env = "DRANET_FILTER")]
    filter: String,
}

/// Runs the command.
pub fn run(a: &InventoryArgs) -> Result<(), CliError> {
    let inv = a.source.discover()?;
    let opts = AttributeOptions {
        numa_node_list: a.numa_node_list,
    };
    let cloud = a.cloud.provider(&a.source.sysfs, &inv)?;
    let (devices, warnings) = published_devices(&inv, opts, cloud.as_ref());
    let (devices, filtered) = apply_filter(&a.filter, devices)?;
    let mut inv = inv;
    inv.excluded.extend(filtered);
    for w in &warnings {
        tracing::warn!("{w}");
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    let io = |e: std::io::Error| CliError::Output(e.to_string());
    match a.output {
        Format::Name => {
            for d in &devices {
                writeln!(out, "{}", d.name).map_err(io)?;
            }
        }
        Format::Table | Format::Wide => {
            let s = |d: &dranet_core::slice::PublishedDevice, k: &str| {
                d.attributes
                    .get(k)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "-".into())
            };
            let wide = a.output == Format::Wide;
            let mut head = vec![
                "NAME",
                "PCI ADDRESS",
                "IFNAME",
                "RDMA DEVICE",
                "NUMA",
                "PCIE ROOT",
                "RDMA",
                "IB ONLY",
            ];
            if wide {
                head.extend(["STATE", "MTU", "PORT STATE", "LINK LAYER"]);
            }
            head.push("DEVICE");
            let mut rows = vec![head.into_iter().map(String::from).collect::<Vec<_>>()];
            for d in &devices {
                let mut row = vec![
                    d.name.clone(),
                    s(d, names::PCI_ADDRESS),
                    s(d, names::IF_NAME),
                    s(d, names::RDMA_DEVICE),
                    s(d, names::NUMA_NODE),
                    s(d, names::STD_PCIE_ROOT),
                    s(d, names::RDMA),
                    s(d, names::IB_ONLY),
                ];
                if wide {
                    let dev = inv.device(&d.name);
                    let port = dev
                        .and_then(|x| x.rdma.as_ref())
                        .and_then(|r| r.ports.first());
                    let port_state = port
                        .and_then(|p| p.state.as_deref())
                        .map(|st| st.split_once(": ").map_or(st, |(_, n)| n).to_string());
                    row.extend([
                        s(d, names::STATE),
                        s(d, names::MTU),
                        port_state.unwrap_or_else(|| "-".into()),
                        port.and_then(|p| p.link_layer.clone())
                            .unwrap_or_else(|| "-".into()),
                    ]);
                }
                row.push(s(d, names::PCI_DEVICE));
                rows.push(row);
            }
            write!(out, "{}", super::aligned(&rows, "")).map_err(io)?;
            if a.show_excluded && !inv.excluded.is_empty() {
                let mut rows = vec![vec!["NOT PUBLISHED".to_string(), "REASON".to_string()]];
                rows.extend(
                    inv.excluded
                        .iter()
                        .map(|e| vec![e.name.clone(), e.reason.clone()]),
                );
                write!(out, "\n{}", super::aligned(&rows, "")).map_err(io)?;
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

/// Splits `devices` into those `filter` keeps and, for each it leaves out, why.
fn apply_filter(
    filter: &str,
    devices: Vec<dranet_core::slice::PublishedDevice>,
) -> Result<(Vec<dranet_core::slice::PublishedDevice>, Vec<Excluded>), CliError> {
    if filter.trim().is_empty() {
        return Ok((devices, Vec::new()));
    }
    let program = dranet_alloc::cel::Program::compile(filter)
        .map_err(|e| CliError::Usage(format!("--filter: {e}")))?;
    let default = filter == DEFAULT_FILTER;
    let (mut kept, mut out) = (Vec::new(), Vec::new());
    for d in devices {
        let reason = match keeps(&program, &d) {
            Ok(true) => {
                kept.push(d);
                continue;
            }
            Ok(false) => default
                .then(|| default_filter_reason(&d))
                .flatten()
                .unwrap_or_else(|| "left out by --filter".into()),
            Err(e) => format!("--filter failed on it: {e}"),
        };
        out.push(Excluded {
            name: d.name,
            reason,
        });
    }
    Ok((kept, out))
}
