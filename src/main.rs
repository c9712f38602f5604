//! `dranet`: the node daemon and the operator's tools. Thin: the work is in the library crates.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// dranet-rs: Kubernetes DRA network driver for GPU/RDMA nodes.
#[derive(Debug, Parser)]
#[command(name = "dranet", version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("DRANET_COMMIT"), ")"), about)]
struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `info` or `dranet_discovery=debug`
    /// (default: `info` for `run`, `warn` for the tools).
    #[arg(long, global = true, env = "DRANET_LOG")]
    log: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The node daemon: publish this node's devices, prepare claims, give pods their devices.
    Run(cmd::run::RunArgs),
    /// Show what this node would publish (table, or the ResourceSlices as JSON/YAML).
    Inventory(cmd::inventory::InventoryArgs),
    /// GPU × NIC topology matrix (PIX/PXB/PHB/NODE/SYS) with NUMA affinity.
    Topo(cmd::topo::TopoArgs),
    /// Allocate a claim (or template) as the scheduler would and show the GPU/NIC relations.
    #[command(
        after_help = "Each claim is allocated on each node the slices name, on its own, as the scheduler does.\n\n\
Inputs are decoded strictly, as the API server does: every bad document of every file is reported\n\
(FILE:LINE:COLUMN: document N (KIND NAME): FIELD.PATH: what is wrong) and then nothing is checked.\n\n\
Exit codes: 0 every claim fits on some node (unaligned too, unless --fail-on warning); 1 bad input\n\
or usage; 2 a claim fits on no node; 3 a claim is invalid (the scheduler would fail the pod: a CEL\n\
error, an unknown class); 4 with --fail-on warning, a claim fits only unaligned.\n\n\
Example:\n  dranet check examples/azure_aks/gb300/templates.yaml --name 1nic-aligned \\\n    --sysfs testdata/nodes/azure-nd-gb300-v6/sys --slices testdata/slices/azure-nd-gb300-v6-gpu.yaml"
    )]
    Check(cmd::check::CheckArgs),
    /// Check this node for dranet: runtime and NRI, kubelet, RDMA, devices, topology, uplink.
    Doctor(cmd::doctor::DoctorArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let daemon = matches!(cli.command, Command::Run(_));
    let default = if daemon { "info" } else { "warn" };
    let filter = match &cli.log {
        Some(f) => match tracing_subscriber::EnvFilter::try_new(f) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("dranet: error: --log {f:?}: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => tracing_subscriber::EnvFilter::new(default),
    };
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    // https://no-color.org: any non-empty NO_COLOR turns colours off.
    let color = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    match &cli.command {
        Command::Run(a) if a.log_format == cmd::run::LogFormat::Json => fmt.json().init(),
        // The daemon's lines carry times; the tools' do not.
        Command::Run(_) => fmt.with_ansi(color).init(),
        _ => fmt.without_time().with_ansi(color).init(),
    }
    let result = match &cli.command {
        Command::Run(a) => cmd::run::run(a),
        Command::Inventory(a) => cmd::inventory::run(a),
        Command::Topo(a) => cmd::topo::run(a),
        Command::Doctor(a) => cmd::doctor::run(a),
        Command::Check(a) => cmd::check::run(a).map_err(cmd::CliError::from),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `dranet inventory | head` is not an error.
        Err(cmd::CliError::Output(e)) if e.contains("Broken pipe") => ExitCode::SUCCESS,
        // `dranet check`'s verdicts have codes of their own (see `dranet check --help`).
        Err(cmd::CliError::Check(cmd::check::CheckError::Verdict { code, message })) => {
            eprintln!("dranet: {message}");
            ExitCode::from(code)
        }
        // Several errors (every bad document of the inputs): one line each, each prefixed.
        Err(e) => {
            for line in e.to_string().lines() {
                eprintln!("dranet: error: {line}");
            }
            ExitCode::FAILURE
        }
    }
}
