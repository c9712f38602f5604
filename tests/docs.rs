//! Every `$ dranet …` command shown in README.md and examples/**/README.md runs, and its output is
//! the one shown. A line `...` in a shown output stands for any number of lines (the docs cut
//! long outputs). `DRANET_BLESS=1` rewrites the shown outputs from the binary after an intended
//! change (review the diff).
//!
//! Skipped, with a printed reason: commands whose output is the machine's own (`doctor` without
//! `--sysfs` reads this host's runtime and kubelet).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents with shown commands.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![repo().join("README.md")];
    let mut stack = vec![repo().join("examples")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "README.md") {
                docs.push(p);
            }
        }
    }
    docs.sort();
    docs
}

/// One shown command: where, the command line, the lines of its shown output.
struct Shown {
    /// 0-based line of the `$ dranet` line.
    line: usize,
    /// The line after the last output line.
    end: usize,
    command: String,
    output: Vec<String>,
}

/// The shown commands of a document, from fenced blocks.
fn shown(text: &str) -> Vec<Shown> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut in_block = false;
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.starts_with("```") {
            in_block = !in_block;
            i += 1;
            continue;
        }
        if in_block && l.starts_with("$ dranet ") {
            let start = i;
            let mut command = l.trim_start_matches("$ ").to_string();
            while command.ends_with('\\') && i + 1 < lines.len() {
                command.pop();
                i += 1;
                command.push(' ');
                command.push_str(lines[i].trim());
            }
            i += 1;
            let mut output = Vec::new();
            while i < lines.len() && !lines[i].starts_with("```") && !lines[i].starts_with("$ ") {
                output.push(lines[i].to_string());
                i += 1;
            }
            // A blank line before the next command separates, it is not output.
            while output.last().is_some_and(|l| l.is_empty())
                && lines.get(i).is_some_and(|l| l.starts_with("$ "))
            {
                output.pop();
            }
            let end = start + 1 + count_continuations(&lines[start..]) + output.len();
            out.push(Shown {
                line: start,
                end,
                command,
                output,
            });
            continue;
        }
        i += 1;
    }
    out
}

fn count_continuations(lines: &[&str]) -> usize {
    lines.iter().take_while(|l| l.ends_with('\\')).count()
}

/// Shell-like words: whitespace-separated, single or double quotes group.
fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in command.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if !cur.is_empty() || any {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if !cur.is_empty() || any {
        out.push(cur);
    }
    out
}

/// Stdout then stderr, as lines, trailing blank lines dropped.
fn run(command: &str) -> Vec<String> {
    let w = words(command);
    let out = Command::new(env!("CARGO_BIN_EXE_dranet"))
        .args(&w[1..])
        .current_dir(repo())
        .env_remove("NODE_NAME")
        .env("NO_COLOR", "1")
        .output()
        .unwrap_or_else(|e| panic!("{command}: {e}"));
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
        .map(|l| l.trim_end().to_string())
        .collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

/// Whether `actual` is what `shown` shows, `...` lines matching any run of lines.
fn matches(shown: &[String], actual: &[String]) -> bool {
    match shown.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first.trim() == "..." => {
            (0..=actual.len()).any(|skip| matches(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(a, more)| a.trim_end() == first.trim_end() && matches(rest, more)),
    }
}

fn skipped(command: &str) -> Option<&'static str> {
    let w = words(command);
    (w.get(1).map(String::as_str) == Some("doctor") && !w.iter().any(|x| x == "--sysfs"))
        .then_some("doctor reads this machine's runtime and kubelet")
}

#[test]
fn every_command_the_docs_show_gives_the_output_they_show() {
    let bless = std::env::var_os("DRANET_BLESS").is_some();
    let mut ran = 0;
    let mut failures = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read doc");
        let rel = doc
            .strip_prefix(repo())
            .unwrap_or(&doc)
            .display()
            .to_string();
        let mut replacements: Vec<(usize, usize, Vec<String>)> = Vec::new();
        for s in shown(&text) {
            if let Some(why) = skipped(&s.command) {
                println!("skip {rel}:{}: {} ({why})", s.line + 1, s.command);
                continue;
            }
            let actual = run(&s.command);
            ran += 1;
            if matches(&s.output, &actual) {
                continue;
            }
            if bless {
                // Keep a shown cut (`...` last) where the docs had one.
                let cut = s.output.last().is_some_and(|l| l.trim() == "...");
                let keep = if cut {
                    s.output.len() - 1
                } else {
                    actual.len()
                };
                let mut new: Vec<String> = actual.iter().take(keep).cloned().collect();
                if cut {
                    new.push("...".into());
                }
                replacements.push((s.end - s.output.len(), s.end, new));
            } else {
                failures.push(format!(
                    "{rel}:{}: $ {}\n--- shown\n{}\n--- actual\n{}",
                    s.line + 1,
                    s.command,
                    s.output.join("\n"),
                    actual.join("\n")
                ));
            }
        }
        if bless && !replacements.is_empty() {
            write_back(&doc, &text, replacements);
        }
    }
    println!("ran {ran} documented commands");
    assert!(
        ran >= 5,
        "the docs show fewer commands than expected: {ran}"
    );
    assert!(
        failures.is_empty(),
        "{} documented command(s) differ (DRANET_BLESS=1 rewrites them):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

fn write_back(doc: &Path, text: &str, mut replacements: Vec<(usize, usize, Vec<String>)>) {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    replacements.sort_by_key(|r| std::cmp::Reverse(r.0));
    for (from, to, new) in replacements {
        lines.splice(from..to, new);
    }
    let mut out = lines.join("\n");
    out.push('\n');
    std::fs::write(doc, out).expect("write doc");
}

#[test]
fn the_doc_parser_reads_continuations_and_cuts() {
    let text = "```console\n$ dranet check a.yaml \\\n    --sysfs x\nline 1\n...\n\n$ dranet topo\nrow\n```\n";
    let s = shown(text);
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].command, "dranet check a.yaml  --sysfs x");
    assert_eq!(s[0].output, ["line 1", "..."]);
    assert_eq!((s[0].line, s[0].end), (1, 5));
    assert_eq!(s[1].output, ["row"]);
    assert!(matches(
        &["a".into(), "...".into(), "z".into()],
        &["a".into(), "b".into(), "c".into(), "z".into()]
    ));
    assert!(!matches(&["a".into()], &["a".into(), "b".into()]));
    assert_eq!(
        words("dranet x --name 'a b' \"c\""),
        ["dranet", "x", "--name", "a b", "c"]
    );
}
