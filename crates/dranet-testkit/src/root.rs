//! Whether the tests run as root, and the `SKIP` line of a test that cannot run here.

use std::io::Write;
use std::process::Command;

/// The owner of `/proc/self` is the process's effective user.
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Prints `SKIP {test}: {why}` on stderr itself: libtest captures `eprintln!` of a passing test,
/// which would hide the skip.
pub fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP {test}: {why}");
}

/// True as root; otherwise says `test` is skipped because it needs root for `what`.
pub fn root_or_skip(test: &str, what: &str) -> bool {
    if is_root() {
        return true;
    }
    skip(test, &format!("needs root ({what})"));
    false
}

/// Root and iproute2, for a test that builds network namespaces; otherwise says why `test` is
/// skipped and returns false.
pub fn can_run_netns(test: &str) -> bool {
    if !root_or_skip(test, "network namespaces") {
        return false;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        skip(
            test,
            "needs iproute2 (`ip`) to build and inspect namespaces",
        );
        return false;
    }
    true
}
