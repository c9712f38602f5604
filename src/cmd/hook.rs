//! `dranet hook wait`: the OCI `createRuntime` hook that holds a pod's container until the
//! pod's network devices are in (see `dranet_driver::attach`). The runtime runs it on the host
//! with the container's state on stdin; a non-zero exit fails the container with the message.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use dranet_driver::attach::hook::{self, NETNS_DIR, Parsed};

use super::CliError;
use super::run::parse_duration;

/// `dranet hook`.
#[derive(Debug, clap::Args)]
pub struct HookArgs {
    #[command(subcommand)]
    command: HookCommand,
}

#[derive(Debug, clap::Subcommand)]
enum HookCommand {
    /// Wait for the container's pod to have its network devices (OCI state on stdin).
    Wait(WaitArgs),
}

#[derive(Debug, clap::Args)]
struct WaitArgs {
    /// The daemon's hook socket.
    #[arg(long, value_name = "PATH", default_value = "/var/run/dranet/hook.sock")]
    socket: PathBuf,
    /// Where the daemon marks the pods it attached.
    #[arg(long, value_name = "DIR", default_value = "/var/run/dranet/attached")]
    markers: PathBuf,
    /// How long to wait for the daemon (reconnecting while it is down) in all.
    #[arg(long, value_name = "DURATION", default_value = "90s", value_parser = parse_duration)]
    timeout: Duration,
}

/// The OCI state is a small JSON object; more is not a runtime's.
const MAX_STATE: u64 = 1 << 20;

/// Runs `dranet hook`.
pub fn run(a: &HookArgs) -> Result<(), CliError> {
    let HookCommand::Wait(w) = &a.command;
    let mut state = Vec::new();
    std::io::stdin()
        .take(MAX_STATE)
        .read_to_end(&mut state)
        .map_err(|e| CliError::Usage(format!("reading the container state on stdin: {e}")))?;
    let req = match hook::parse_state(&state, std::path::Path::new(NETNS_DIR), w.timeout) {
        Ok(Parsed::Ask(r)) => r,
        Ok(Parsed::Skip) => return Ok(()),
        Err(e) => return Err(CliError::Usage(e.to_string())),
    };
    // A later or restarted container of an attached pod: no daemon needed.
    if hook::marker(&w.markers, &req.sandbox_id).is_some_and(|m| m.exists()) {
        return Ok(());
    }
    hook::ask(&w.socket, &req, w.timeout).map_err(|e| CliError::Usage(e.to_string()))
}
