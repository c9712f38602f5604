//! `dranet doctor`: node checks with a fix for each problem. The checks are
//! `dranet_driver::doctor`'s; this gathers their input and prints them.

use std::io::Write;
use std::path::PathBuf;

use dranet_driver::doctor::{
    AttachInput, CONTAINERD_CONFIGS, DoctorInput, Finding, Status, attach_times, check, links_for,
    read_first,
};

use super::{CliError, SourceArgs};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per finding, fixes indented below.
    Table,
    /// The findings as a JSON array.
    Json,
}

/// Arguments of `dranet doctor`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  dranet doctor                      # this node: runtime, NRI, kubelet, RDMA, devices\n  dranet doctor --sysfs testdata/nodes/azure-nd-gb300-v6/sys -o json"
)]
pub struct DoctorArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// The runtime's NRI socket.
    #[arg(long, value_name = "PATH", default_value = dranet_nri::DEFAULT_SOCKET_PATH, env = "DRANET_NRI_SOCKET")]
    nri_socket: PathBuf,
    /// The kubelet's --root-dir.
    #[arg(long, value_name = "DIR", default_value = dranet_kubeletplugin::DEFAULT_KUBELET_ROOT_DIR, env = "DRANET_KUBELET_ROOT_DIR")]
    kubelet_root_dir: PathBuf,
    /// containerd's configuration file, for its NRI request timeout (default:
    /// /etc/containerd/config.toml).
    #[arg(long, value_name = "FILE")]
    containerd_config: Option<PathBuf>,
    /// Where the hook should be on the host (`dranet run --hook-path`); empty: not checked.
    #[arg(long, value_name = "PATH", default_value = "/opt/dranet/bin/dranet",
          value_parser = clap::builder::TypedValueParser::map(clap::builder::OsStringValueParser::new(), PathBuf::from))]
    hook_path: PathBuf,
    /// Where the daemon writes the hook's and the device metadata's CDI specs (`dranet run
    /// --cdi-dir`).
    #[arg(long, value_name = "DIR", default_value = dranet_driver::daemon::DEFAULT_CDI_DIR)]
    cdi_dir: PathBuf,
    /// Whether the daemon writes device metadata (`dranet run --enable-device-metadata`): its
    /// CDI specs must be in a directory the runtime reads, hook or not.
    #[arg(long, value_name = "BOOL", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    enable_device_metadata: bool,
    /// The running daemon's metrics, for the attach times of its pods by size (`dranet run
    /// --bind-address`); empty: not read.
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:9177/metrics"
    )]
    metrics_url: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// Runs the checks; a failed check is exit status 1 (after printing all of them).
pub fn run(a: &DoctorArgs) -> Result<(), CliError> {
    let inventory = a.source.discover()?;
    let host = a.source.sysfs == std::path::Path::new("/sys");
    let links = links_for(&a.source.sysfs).unwrap_or_else(|e| {
        tracing::warn!("link state: {e}");
        Vec::new()
    });
    let input = DoctorInput {
        inventory,
        links,
        host,
        nri_socket: a.nri_socket.clone(),
        kubelet_root_dir: a.kubelet_root_dir.clone(),
        mountinfo: host
            .then(|| std::fs::read_to_string("/proc/self/mountinfo").ok())
            .flatten(),
        rdma_mode: host.then(|| dranet_podnet::rdma::netns_mode().map_err(|e| e.to_string())),
        runtime_version: std::process::Command::new("containerd")
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned()),
        attach: AttachInput {
            containerd_config: match &a.containerd_config {
                Some(p) => Some((
                    p.clone(),
                    std::fs::read_to_string(p).map_err(|e| {
                        CliError::Usage(format!("--containerd-config {}: {e}", p.display()))
                    })?,
                )),
                None => read_first(&CONTAINERD_CONFIGS.map(std::path::Path::new)),
            },
            hook_path: (!a.hook_path.as_os_str().is_empty()).then(|| a.hook_path.clone()),
            cdi_dir: a.cdi_dir.clone(),
            device_metadata: a.enable_device_metadata,
            times: (host && !a.metrics_url.is_empty())
                .then(|| read_metrics(&a.metrics_url).map(|t| attach_times::parse(&t))),
        },
    };
    let findings = check(&input);
    print(&findings, a.output).map_err(|e| CliError::Output(e.to_string()))?;
    let failed = findings.iter().filter(|f| f.status == Status::Fail).count();
    if failed > 0 {
        return Err(CliError::Usage(format!(
            "{failed} check{} failed",
            if failed == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

fn print(findings: &[Finding], format: Format) -> std::io::Result<()> {
    let out = std::io::stdout();
    let mut out = out.lock();
    match format {
        Format::Json => {
            let text = serde_json::to_string_pretty(findings).map_err(std::io::Error::other)?;
            writeln!(out, "{text}")
        }
        Format::Table => {
            for f in findings {
                let tag = match f.status {
                    Status::Ok => "OK  ",
                    Status::Warn => "WARN",
                    Status::Fail => "FAIL",
                };
                writeln!(out, "{tag} {:<9} {}", f.area, f.message)?;
                if let Some(fix) = &f.fix {
                    writeln!(out, "     {:<9} fix: {fix}", "")?;
                }
            }
            Ok(())
        }
    }
}

/// The body of a GET of `url` (the daemon's own metrics endpoint, on this node) through the
/// cloud crate's HTTP client: within 2 s, at most its body limit.
fn read_metrics(url: &str) -> Result<String, String> {
    use dranet_cloud::http::{Endpoint, Request};
    let endpoint = Endpoint::parse(url, false).map_err(|e| e.to_string())?;
    let answer = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("start a runtime: {e}"))?
        .block_on(endpoint.fetch(&Request::get(""), std::time::Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&answer.body).into_owned())
}
