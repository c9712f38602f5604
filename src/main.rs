//! `dranet`: the node daemon and the operator's tools. Thin: the work is in the library crates.

mod cmd;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// dranet-rs: Kubernetes DRA network driver for GPU/RDMA nodes.
#[derive(Debug, Parser)]
#[command(name = "dranet", version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("DRANET_COMMIT"), ")"), about)]
struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `info` or `dranet_discovery=debug`
    /// (default: `info` for `run`, `warn` for the tools).
    #[arg(long, global = true, env = "DRANET_LOG")]
    log: Option<String>,
    /// Log verbosity as upstream's (klog) `-v`/`--v`: 0–1 info, 2–4 debug, 5 and more trace.
    #[arg(
        short = 'v',
        long = "v",
        global = true,
        value_name = "N",
        conflicts_with = "log"
    )]
    v: Option<u8>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The node daemon: publish this node's devices, prepare claims, give pods their devices.
    // Boxed: the daemon's flags outweigh every other command's.
    Run(Box<cmd::run::RunArgs>),
    /// Show what this node would publish (table, or the ResourceSlices as JSON/YAML).
    Inventory(cmd::inventory::InventoryArgs),
    /// GPU × NIC topology matrix (PIX/PXB/PHB/NODE/SYS) with NUMA affinity.
    Topo(cmd::topo::TopoArgs),
    /// Allocate a claim (or template) as the scheduler would and show the GPU/NIC relations.
    #[command(
        after_help = "Each claim is allocated on each node the slices name, on its own, as the scheduler does.\n\
The slices and classes come from files (--slices, --classes), the node's sysfs (--sysfs), or a\n\
live cluster (--kubeconfig FILE, --from-cluster).\n\n\
Inputs are decoded strictly, as the API server does: every bad document of every file is reported\n\
(FILE:LINE:COLUMN: document N (KIND NAME): FIELD.PATH: what is wrong) and then nothing is checked.\n\n\
Exit codes: 0 every claim fits on some node (unaligned too, unless --fail-on warning); 1 bad input\n\
or usage; 2 a claim fits on no node; 3 a claim is invalid (the scheduler would fail the pod: a CEL\n\
error, an unknown class); 4 with --fail-on warning, a claim fits only unaligned.\n\n\
Examples:\n  dranet check examples/azure_aks/gb300/templates.yaml --name 1nic-aligned \\\n    --sysfs testdata/nodes/azure-nd-gb300-v6/sys --slices testdata/slices/azure-nd-gb300-v6-gpu.yaml \\\n    --classes examples/azure_aks/deviceclasses.yaml\n  # Which nodes of a live cluster fit the template, and how aligned (its slices and classes):\n  dranet check examples/azure_aks/gb300/templates.yaml --name 1nic-aligned --kubeconfig ~/.kube/config"
    )]
    Check(cmd::check::CheckArgs),
    /// Check this node for dranet: runtime and NRI, kubelet, RDMA, devices, topology, uplink.
    Doctor(cmd::doctor::DoctorArgs),
    /// The OCI hook the runtime runs in a pod's containers: `dranet hook wait` holds a
    /// container until its pod's network devices are in.
    Hook(cmd::hook::HookArgs),
    /// Print the shell completion script (bash, zsh, fish, powershell, elvish).
    #[command(
        after_help = "Install (the script is generated from this binary's own flags):\n  \
bash:       dranet completion bash > ~/.local/share/bash-completion/completions/dranet\n  \
zsh:        dranet completion zsh > ~/.zfunc/_dranet   (with fpath+=(~/.zfunc) before compinit in ~/.zshrc)\n  \
fish:       dranet completion fish > ~/.config/fish/completions/dranet.fish\n  \
powershell: dranet completion powershell | Out-String | Invoke-Expression   (in $PROFILE)"
    )]
    Completion(cmd::shell::CompletionArgs),
    /// Print a manual page (roff), or write them all with --out-dir.
    #[command(after_help = "Examples:\n  \
dranet man check | man -l -\n  \
sudo dranet man --out-dir /usr/local/share/man/man1   (then: man dranet-check)")]
    Man(cmd::shell::ManArgs),
}

fn main() -> ExitCode {
    // Usage errors exit 1 like every other input error: clap's own 2 is `check`'s "does not fit".
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
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
        None => tracing_subscriber::EnvFilter::new(match cli.v {
            Some(0..=1) => "info",
            Some(2..=4) => "debug",
            Some(_) => "trace",
            None => default,
        }),
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
        Command::Hook(a) => cmd::hook::run(a),
        Command::Check(a) => cmd::check::run(a).map_err(cmd::CliError::from),
        Command::Completion(a) => cmd::shell::completion(a, Cli::command()),
        Command::Man(a) => cmd::shell::man(a, Cli::command()),
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

#[cfg(test)]
mod tests {
    //! The completion scripts and manual pages against the parser's own definitions.

    use super::*;

    /// Long flags of a command, as clap defines them (`--help` included).
    fn long_flags(c: &clap::Command) -> Vec<String> {
        let mut c = c.clone();
        c.build();
        c.get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect()
    }

    fn subcommand(name: &str) -> clap::Command {
        Cli::command()
            .find_subcommand(name)
            .cloned()
            .unwrap_or_else(|| panic!("no subcommand {name}"))
    }

    fn tool(name: &str) -> bool {
        std::process::Command::new(name)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    #[test]
    fn bash_completion_names_every_subcommand_and_checks_flags_and_parses() {
        let script = cmd::shell::completion_script(clap_complete::Shell::Bash, Cli::command());
        let script = String::from_utf8(script).unwrap();
        let subs: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        assert!(subs.len() >= 7, "{subs:?}");
        for s in &subs {
            // In the list offered after `dranet `, and with a case of its own.
            assert!(
                script.contains(&format!(" {s} ")) || script.contains(&format!(" {s}\"")),
                "bash completion lacks subcommand {s}"
            );
            assert!(
                script.contains(&format!("dranet__subcmd__{s})"))
                    || script.contains(&format!("dranet__{s})")),
                "bash completion has no case for {s}"
            );
        }
        let flags = long_flags(&subcommand("check"));
        for f in [
            "--sysfs",
            "--slices",
            "--classes",
            "--node",
            "--fail-on",
            "--output",
        ] {
            assert!(flags.iter().any(|x| x == f), "check has no {f}: {flags:?}");
        }
        for f in &flags {
            assert!(
                script.contains(f.as_str()),
                "bash completion lacks check's {f}"
            );
        }
        if !tool("bash") {
            println!("SKIP bash -n: bash is not installed");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("dranet.bash");
        std::fs::write(&file, &script).unwrap();
        let out = std::process::Command::new("bash")
            .arg("-n")
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "bash -n: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn every_shell_gets_a_script() {
        use clap::ValueEnum;
        for shell in clap_complete::Shell::value_variants() {
            let script = cmd::shell::completion_script(*shell, Cli::command());
            let script = String::from_utf8(script).unwrap();
            assert!(
                script.contains("dranet") && script.contains("fail-on"),
                "{shell}"
            );
        }
    }

    #[test]
    fn a_man_page_per_command_with_each_long_flag_and_groff_renders_it_cleanly() {
        let pages = cmd::shell::man_pages(Cli::command()).unwrap();
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        let mut expected = vec!["dranet.1".to_string()];
        expected.extend(
            Cli::command()
                .get_subcommands()
                .map(|s| format!("dranet-{}.1", s.get_name())),
        );
        assert_eq!(names, expected);
        let check = String::from_utf8(
            pages[names.iter().position(|n| *n == "dranet-check.1").unwrap()]
                .1
                .clone(),
        )
        .unwrap();
        // roff escapes each `-` of a flag.
        for f in long_flags(&subcommand("check")) {
            let roff = f.replace('-', "\\-");
            assert!(check.contains(&roff), "dranet-check.1 lacks {f}");
        }
        assert!(
            check.contains("Exit codes"),
            "the after-help (exit codes) is in the page"
        );
        if !tool("groff") {
            println!("SKIP groff rendering: groff is not installed");
            return;
        }
        for (name, text) in &pages {
            let mut child = std::process::Command::new("groff")
                // Every warning but `break` ("cannot adjust line": a URL wider than the
                // terminal, layout only; Debian's lintian ignores it too).
                .args(["-man", "-Tutf8", "-ww", "-Wbreak", "-z"])
                .stdin(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            std::io::Write::write_all(&mut child.stdin.take().unwrap(), text).unwrap();
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && err.is_empty(),
                "groff {name}: {err}"
            );
        }
    }
}
