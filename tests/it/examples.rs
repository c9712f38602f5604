//! The embedding examples run as their docs say.

use std::path::PathBuf;
use std::process::Command;

/// `cargo test` builds the examples next to the test binaries (`target/<profile>/examples/`).
fn example(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("examples").join(name);
    path.exists().then_some(path)
}

/// Runs an example (without `$NODE_NAME`), which must succeed: its stdout and stderr.
fn succeeds(cmd: &mut Command) -> (String, String) {
    let out = cmd.env_remove("NODE_NAME").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

#[test]
fn minimal_driver_serves_prepares_publishes_and_cleans_up_without_a_cluster() {
    let Some(bin) = example("minimal_driver") else {
        eprintln!(
            "SKIP: examples/minimal_driver was not built (run `cargo test`, not `--test examples` alone)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kubelet = dir.path().join("kubelet");
    let (stdout, stderr) = succeeds(
        Command::new(bin)
            .args(["--fake-apiserver", "--run-for", "0", "--kubelet-root-dir"])
            .arg(&kubelet)
            .env_remove("POD_UID"),
    );
    assert!(
        stdout.contains(
            "cdi_device_ids: [\"minimal.example.com/dev=demo-uid-dev0\", \"minimal.example.com/metadata=demo-uid_req\"]"
        ),
        "{stdout}"
    );
    // Logging is set up: the driver's own lines reach stderr.
    assert!(
        stderr.contains("prepared") && stderr.contains("default/demo"),
        "{stderr}"
    );
    assert!(stderr.contains("unprepared"), "{stderr}");
    assert!(
        stdout.contains("published 1 ResourceSlice(s): [Some(\"node-1-minimal.example.com-0\")]"),
        "{stdout}"
    );
    assert!(stdout.contains("stopped; sockets removed"), "{stdout}");
    let left: Vec<_> = walk(&kubelet)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "sock"))
        .collect();
    assert!(left.is_empty(), "sockets left behind: {left:?}");
    // The claim's CDI specs (its devices' and its metadata's) were written for the prepare and
    // removed by the unprepare, and so was its metadata file.
    let files: Vec<_> = walk(&kubelet.join("plugins/minimal.example.com/dra-device-metadata"))
        .into_iter()
        .filter(|p| p.is_file())
        .collect();
    assert!(files.is_empty(), "device metadata left behind: {files:?}");
    let specs: Vec<_> = walk(&kubelet.join("cdi"));
    assert!(specs.is_empty(), "CDI specs left behind: {specs:?}");
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The driver that is both a DRA kubelet plugin and an NRI plugin, against the fakes: a device
/// prepared for a claim reaches the container of the pod that reserved the claim, and is gone
/// after unprepare.
#[test]
fn dra_nri_driver_prepares_a_claim_and_injects_its_device_into_the_pod() {
    let Some(bin) = example("dra_nri_driver") else {
        eprintln!("SKIP: examples/dra_nri_driver was not built (run `cargo test`)");
        return;
    };
    let (stdout, _) = succeeds(Command::new(bin).arg("--fake"));
    assert!(
        stdout.contains("container of pod worker gets /dev/accel2 (c 240:2)"),
        "{stdout}"
    );
    assert!(stdout.contains("after unprepare: 0 device(s)"), "{stdout}");
}
