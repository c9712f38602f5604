//! Records the commit the binary is built from, for `dranet --version`: `$DRANET_COMMIT` (image
//! builds without `.git` pass it), else `git rev-parse`, else `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=DRANET_COMMIT");
    let commit = std::env::var("DRANET_COMMIT")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    // A new commit moves HEAD or the branch it points to; only existing files are watched, so a
    // tree without git does not rerun this on every build.
    for p in [
        "HEAD".to_string(),
        git(&["symbolic-ref", "-q", "HEAD"]).unwrap_or_default(),
    ] {
        if p.is_empty() {
            continue;
        }
        if let Some(path) = git(&["rev-parse", "--git-path", &p])
            && std::path::Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rustc-env=DRANET_COMMIT={commit}");
}
