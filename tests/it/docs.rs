//! Every `$ dranet …` command shown in README.md, docs/**/*.md and examples/**/README.md runs, and
//! its output is the one shown. A line `...` in a shown output stands for any number of lines (the
//! docs cut long outputs). `DRANET_BLESS=1` rewrites the shown outputs from the binary after an
//! intended change (review the diff).
//!
//! Skipped, with a printed reason: commands whose output is the machine's own (`doctor` without
//! `--sysfs` reads this host's runtime and kubelet).
//!
//! Every relative link of those documents resolves: to a file or directory that exists and, for
//! `#anchor`, to a heading of the target (GitHub's anchors).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents: README.md, every Markdown file of docs/, every README.md of examples/.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![repo().join("README.md")];
    let mut stack = vec![
        (repo().join("docs"), false),
        (repo().join("examples"), true),
    ];
    while let Some((dir, readme_only)) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push((p, readme_only));
            } else if if readme_only {
                p.file_name().is_some_and(|n| n == "README.md")
            } else {
                p.extension().is_some_and(|x| x == "md")
            } {
                docs.push(p);
            }
        }
    }
    docs.sort();
    docs
}

/// A document's path relative to the repository, and its text.
fn read(doc: &Path) -> (String, String) {
    let text = std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let rel = doc
        .strip_prefix(repo())
        .unwrap_or(doc)
        .display()
        .to_string();
    (rel, text)
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
        let (rel, text) = read(&doc);
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

/// The lines of a document outside fenced code blocks, numbered from 1, with inline code spans
/// blanked (a `[x](y)` inside backticks is code, not a link). A code span may wrap across lines
/// of a paragraph, never across a blank line.
fn prose(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut in_code = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            in_code = false;
            continue;
        }
        if fenced {
            continue;
        }
        if line.trim().is_empty() {
            in_code = false;
        }
        let mut kept = String::with_capacity(line.len());
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                kept.push(' ');
            } else {
                kept.push(if in_code { ' ' } else { c });
            }
        }
        out.push((i + 1, kept));
    }
    out
}

/// The targets of the inline links (`[text](target)`, images too) and reference definitions
/// (`[label]: target`) of one prose line.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some(end) = trimmed.find("]:")
    {
        if let Some(t) = trimmed[end + 2..].split_whitespace().next() {
            out.push(t.trim_matches(['<', '>']).to_string());
        }
        return out;
    }
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(close) = after.find(')') else { break };
        let inner = after[..close].trim();
        // `[text](target "title")`: the title is not part of the target.
        let target = inner.split_whitespace().next().unwrap_or("");
        out.push(target.trim_matches(['<', '>']).to_string());
        rest = &after[close..];
    }
    out
}

/// A heading's anchor as GitHub makes it: the rendered text (a link's text, no code or emphasis
/// marks) lowercased, spaces to `-`, punctuation other than `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](url)` renders as `text`.
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        match after
            .find("](")
            .and_then(|m| after[m..].find(')').map(|c| (m, m + c)))
        {
            Some((mid, close)) => {
                text.push_str(&rest[..open]);
                text.push_str(&after[..mid]);
                rest = &after[close + 1..];
            }
            None => {
                text.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.trim()
        .chars()
        .flat_map(|c| match c {
            ' ' => vec!['-'],
            c if c.is_alphanumeric() || c == '-' || c == '_' => c.to_lowercase().collect(),
            _ => vec![],
        })
        .collect()
}

/// The anchors of a Markdown document's headings; a repeated one gets `-1`, `-2`, … as on GitHub.
fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if fenced || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = anchor(line[hashes..].trim().trim_end_matches('#').trim());
        let mut a = base.clone();
        let mut n = 0;
        while out.contains(&a) {
            n += 1;
            a = format!("{base}-{n}");
        }
        out.push(a);
    }
    out
}

/// Why a relative link from `doc` to `target` is dead, if it is. External links (a scheme, or
/// `//host`) are not checked.
fn dead_link(doc: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") || target.starts_with("//") {
        return None;
    }
    let (path, fragment) = match target.split_once('#') {
        Some((p, f)) => (p, Some(f)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        doc.to_path_buf()
    } else {
        doc.parent().unwrap_or(Path::new(".")).join(path)
    };
    if !file.exists() {
        return Some(format!("{target}: no file {}", file.display()));
    }
    let fragment = fragment?;
    if file.extension().is_none_or(|x| x != "md") {
        return Some(format!(
            "{target}: #{fragment} in a file that is not Markdown"
        ));
    }
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let all = anchors(&text);
    (!all.iter().any(|a| a == fragment)).then(|| {
        format!(
            "{target}: no heading with anchor #{fragment} in {} (its anchors: {})",
            file.display(),
            all.join(", ")
        )
    })
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let mut checked = 0;
    let mut dead = Vec::new();
    for doc in documents() {
        let (rel, text) = read(&doc);
        for (line, prose) in prose(&text) {
            for target in link_targets(&prose) {
                checked += 1;
                if let Some(why) = dead_link(&doc, &target) {
                    dead.push(format!("{rel}:{line}: {why}"));
                }
            }
        }
    }
    println!("checked {checked} links");
    assert!(
        checked >= 10,
        "the docs have fewer links than expected: {checked}"
    );
    assert!(
        dead.is_empty(),
        "{} dead link(s):\n{}",
        dead.len(),
        dead.join("\n")
    );
}

#[test]
fn the_link_checker_finds_dead_files_and_anchors() {
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("a.md");
    std::fs::write(
        &doc,
        "# Running the daemon: `dranet run`\n\n## Which interfaces are the uplink?\n\n## Flags\n\n## Flags\n\n```\n# not a heading\n```\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("b.yaml"), "x: 1\n").unwrap();
    assert_eq!(
        anchors(&std::fs::read_to_string(&doc).unwrap()),
        [
            "running-the-daemon-dranet-run",
            "which-interfaces-are-the-uplink",
            "flags",
            "flags-1"
        ]
    );
    assert_eq!(anchor("See [the docs](x.md#y) & más"), "see-the-docs--más");
    for ok in [
        "a.md",
        "#flags-1",
        "a.md#running-the-daemon-dranet-run",
        "b.yaml",
        ".",
        "https://example.com/none#x",
    ] {
        assert_eq!(dead_link(&doc, ok), None, "{ok}");
    }
    for bad in ["c.md", "a.md#flags-2", "#Flags", "b.yaml#x", "sub/a.md"] {
        assert!(dead_link(&doc, bad).is_some(), "{bad}");
    }

    let text = "See [a](x.md) and ![b](img/y.png \"t\") and `[c](not-a-link.md)`.\n[ref]: z.md\n```\n[d](in-code.md)\n```\nA `code span\nacross lines [e](not.md)` then [f](w.md#k).\n";
    let found: Vec<String> = prose(text)
        .into_iter()
        .flat_map(|(_, l)| link_targets(&l))
        .collect();
    assert_eq!(found, ["x.md", "img/y.png", "z.md", "w.md#k"]);
}

/// `.ci/run` ends with exactly the test command README.md gives a fresh machine.
#[test]
fn ci_runs_the_test_command_of_the_readme() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("read README.md");
    let ci = std::fs::read_to_string(repo().join(".ci/run")).expect("read .ci/run");
    let shown: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with(".ci/deps && cargo test"))
        .collect();
    assert_eq!(
        shown.len(),
        1,
        "README.md shows one test command: {shown:?}"
    );
    assert!(
        ci.lines().any(|l| l == shown[0]),
        ".ci/run does not run README.md's test command `{}`",
        shown[0]
    );
}
