//! `dranet hook wait`: the OCI `createRuntime` hook that holds a pod's container until the
//! pod's network devices are in (see `dranet_driver::attach`), then runs the profile provider's
//! runtime hooks once for the pod (`dranet_driver::attach::runtime`). The runtime runs it on the host
//! with the container's state on stdin; a non-zero exit fails the container with the message.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use dranet_driver::attach::hook::{self, NETNS_DIR, Parsed};
use dranet_driver::attach::runtime;

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
    /// Copy this executable to the host for the runtime to run as the hook, and check that the
    /// host can run it (its C library); if not, remove it: the daemon then holds containers at
    /// CreateContainer alone. For the DaemonSet's init container.
    Install(InstallArgs),
}

#[derive(Debug, clap::Args)]
struct InstallArgs {
    /// Where the host's root is mounted (read-only is enough, but for the hook's directory).
    #[arg(long, value_name = "DIR", default_value = "/host")]
    host_root: PathBuf,
    /// The hook's path on the host (`dranet run --hook-path`).
    #[arg(long, value_name = "PATH", default_value = "/opt/dranet/bin/dranet")]
    path: PathBuf,
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
    let w = match &a.command {
        HookCommand::Wait(w) => w,
        HookCommand::Install(i) => return install(i),
    };
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
    let marker = hook::marker(&w.markers, &req.sandbox_id);
    // A later or restarted container of an attached pod: no daemon needed; the marker names
    // the pod's runtime hooks.
    let hooks = match marker.as_deref().and_then(|m| std::fs::read(m).ok()) {
        Some(bytes) => {
            runtime::Marker::from_bytes(&bytes)
                .map_err(|e| CliError::Usage(e.to_string()))?
                .runtime_hooks
        }
        None => {
            hook::ask(&w.socket, &req, w.timeout).map_err(|e| CliError::Usage(e.to_string()))?
        }
    };
    if hooks.is_empty() {
        return Ok(());
    }
    // Once per pod: the first container that gets here runs them.
    let done = marker.as_deref().map(runtime::done_marker);
    if done.as_deref().is_some_and(std::path::Path::exists) {
        return Ok(());
    }
    runtime::run(&hooks, req.target()).map_err(|e| CliError::Usage(e.to_string()))?;
    if let Some(done) = done
        && let Err(e) = std::fs::File::create(&done)
    {
        eprintln!(
            "dranet: warning: {}: {e}: the pod's runtime hooks run again for its next container",
            done.display()
        );
    }
    Ok(())
}

fn install(a: &InstallArgs) -> Result<(), CliError> {
    let err = |what: &str, e: &dyn std::fmt::Display| {
        CliError::Usage(format!("hook install: {what}: {e}"))
    };
    if !a.path.is_absolute() {
        return Err(CliError::Usage(format!(
            "hook install: --path {} is not absolute",
            a.path.display()
        )));
    }
    let me = std::env::current_exe().map_err(|e| err("this executable", &e))?;
    let bytes = std::fs::read(&me).map_err(|e| err(&me.display().to_string(), &e))?;
    let on_host = a
        .host_root
        .join(a.path.strip_prefix("/").unwrap_or(&a.path));
    if let Some(dir) = on_host.parent() {
        std::fs::create_dir_all(dir).map_err(|e| err(&dir.display().to_string(), &e))?;
    }
    dranet_util::AtomicWrite::new(&on_host)
        .exact_mode(0o755)
        .write(&bytes)
        .map_err(|e| err(&on_host.display().to_string(), &e))?;
    // Run it as the runtime will: in the host's root, with the host's libraries. The process
    // is done after this, so its own root may change.
    let check = std::os::unix::fs::chroot(&a.host_root)
        .and_then(|()| std::env::set_current_dir("/"))
        .and_then(|()| {
            std::process::Command::new(&a.path)
                .arg("--version")
                .stdin(std::process::Stdio::null())
                .output()
        });
    match check {
        Ok(out) if out.status.success() => {
            println!(
                "hook installed at {} and runs on the host: {}",
                a.path.display(),
                String::from_utf8_lossy(&out.stdout).trim()
            );
            Ok(())
        }
        outcome => {
            let why = match outcome {
                Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_string(),
                Err(e) => e.to_string(),
            };
            // In the host's root now, or not: remove it by whichever path names it.
            let _ = std::fs::remove_file(&a.path).or_else(|_| std::fs::remove_file(&on_host));
            eprintln!(
                "dranet: warning: the host cannot run the hook ({why}); not installed: pods' \
                 containers are held by CreateContainer alone (a daemon that stalls while a pod \
                 starts cannot hold them)"
            );
            Ok(())
        }
    }
}
