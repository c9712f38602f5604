//! `dranet completion` and `dranet man`: shell completion scripts and manual pages, generated
//! from the same clap definitions as the parser, so they cannot disagree with the binary.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::CliError;

/// Arguments of `dranet completion`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompletionArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// Arguments of `dranet man`.
#[derive(Debug, Clone, clap::Args)]
pub struct ManArgs {
    /// The page of this subcommand (`check` is dranet-check(1)); default: dranet(1).
    #[arg(value_name = "COMMAND")]
    pub command: Option<String>,
    /// Write every page (dranet.1, dranet-check.1, ...) into this directory instead of printing
    /// one.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub out_dir: Option<PathBuf>,
}

/// The completion script of `shell` for the command `cmd`.
pub fn completion_script(shell: clap_complete::Shell, mut cmd: clap::Command) -> Vec<u8> {
    // Into memory first: clap_complete panics on a write error, and `| head` is not a bug.
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "dranet", &mut out);
    out
}

/// The manual pages of `cmd` and each of its (visible) subcommands, as file name and roff text:
/// `dranet.1`, `dranet-check.1`, ...
pub fn man_pages(cmd: clap::Command) -> Result<Vec<(String, Vec<u8>)>, CliError> {
    // `build` names the subcommands `dranet-check` etc.; the help pseudo-command gets no page.
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    // Every page names the binary and its version (a subcommand has no version of its own).
    let source = format!("dranet {}", cmd.get_version().unwrap_or_default());
    let mut pages = Vec::new();
    for c in std::iter::once(&cmd).chain(cmd.get_subcommands().filter(|s| !s.is_hide_set())) {
        // The after-help (exit codes, examples, install lines) is laid out by hand: clap_mangen
        // would fill it into one paragraph and break the example commands.
        let after = c.get_after_help().map(|a| a.to_string());
        let man = clap_mangen::Man::new(c.clone().after_help(None::<&'static str>))
            .source(source.clone())
            .manual("dranet manual");
        let mut text = Vec::new();
        man.render(&mut text)
            .map_err(|e| CliError::Output(e.to_string()))?;
        if let Some(after) = after {
            text.extend(notes_section(&after).into_bytes());
        }
        pages.push((man.get_filename(), ascii_roff(&text)));
    }
    Ok(pages)
}

/// Runs `dranet completion`.
pub fn completion(a: &CompletionArgs, cmd: clap::Command) -> Result<(), CliError> {
    write_stdout(&completion_script(a.shell, cmd))
}

/// Runs `dranet man`.
pub fn man(a: &ManArgs, cmd: clap::Command) -> Result<(), CliError> {
    let pages = man_pages(cmd)?;
    if let Some(dir) = &a.out_dir {
        return write_pages(dir, &pages);
    }
    let file = match &a.command {
        None => "dranet.1".to_string(),
        Some(c) => format!("dranet-{c}.1"),
    };
    match pages.iter().find(|(name, _)| *name == file) {
        Some((_, text)) => write_stdout(text),
        None => Err(CliError::Usage(format!(
            "man: no command {:?} (commands: {})",
            a.command.as_deref().unwrap_or_default(),
            pages
                .iter()
                .filter_map(|(n, _)| n.strip_prefix("dranet-")?.strip_suffix(".1"))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// A NOTES section with `text` as written (no filling), escaped for roff.
fn notes_section(text: &str) -> String {
    let mut out = String::from(".SH NOTES\n.nf\n");
    for line in text.lines() {
        let line = line.replace('\\', "\\e").replace('-', "\\-");
        // A line starting with `.` or `'` would be a request: `\&` makes it text.
        if line.starts_with(['.', '\'']) {
            out.push_str("\\&");
        }
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(".fi\n");
    out
}

/// Roff with each non-ASCII character (`×`, `…` of the help texts) as a `\[uXXXX]` escape:
/// troff reads bytes, and only man-db's preprocessing would decode UTF-8; the escape renders
/// in groff and mandoc alike.
fn ascii_roff(text: &[u8]) -> Vec<u8> {
    let mut out = String::with_capacity(text.len());
    for c in String::from_utf8_lossy(text).chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("\\[u{:04X}]", u32::from(c)));
        }
    }
    out.into_bytes()
}

fn write_pages(dir: &Path, pages: &[(String, Vec<u8>)]) -> Result<(), CliError> {
    let bad = |e: std::io::Error| CliError::Usage(format!("--out-dir {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(bad)?;
    for (name, text) in pages {
        std::fs::write(dir.join(name), text).map_err(bad)?;
    }
    Ok(())
}

fn write_stdout(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| CliError::Output(e.to_string()))
}
