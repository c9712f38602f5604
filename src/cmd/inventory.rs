//! `dranet inventory`: what this node would publish.

use std::io::Write;

use dranet_core::attributes::names;

use super::{CliError, CloudArgs, NodeArgs, PublishArgs, SourceArgs};

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
    #[command(flatten)]
    node: NodeArgs,
    #[command(flatten)]
    publish: PublishArgs,
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
}

/// Runs the command.
pub fn run(a: &InventoryArgs) -> Result<(), CliError> {
    let mut policy = a.publish.policy()?;
    policy.attributes.numa_node_list |= a.numa_node_list;
    let inv = a.source.discover_quietly()?;
    let cloud = a.cloud.provider(&a.source.sysfs, &inv)?;
    let published = super::publication_of(&inv, cloud.as_ref(), &policy);
    let devices: Vec<&dranet_core::slice::PublishedDevice> = published.devices.values().collect();
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
            if a.show_excluded && !published.excluded.is_empty() {
                let mut rows = vec![vec!["NOT PUBLISHED".to_string(), "REASON".to_string()]];
                rows.extend(
                    published
                        .excluded
                        .iter()
                        .map(|e| vec![e.device.clone(), e.reason.to_string()]),
                );
                write!(out, "\n{}", super::aligned(&rows, "")).map_err(io)?;
            }
        }
        Format::Json | Format::Yaml => {
            if a.show_excluded {
                for e in &published.excluded {
                    eprintln!("not published: {e}");
                }
            }
            let slices = published.resource_slices(&a.node.name()?);
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
