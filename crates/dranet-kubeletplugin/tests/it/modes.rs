//! File modes do not come from the umask: under `umask 000` the checkpoint, lock files and
//! sockets are still 0600 and the directories we create 0700. (Its own test binary: the umask
//! is process-wide.)

use std::os::unix::fs::PermissionsExt;

use crate::common::*;

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn files_sockets_and_directories_get_private_modes_under_umask_000() {
    // SAFETY: umask(2) cannot fail; this binary has this one test, so nothing else is creating
    // files meanwhile.
    unsafe {
        libc::umask(0);
    }
    let h = Harness::start_with(|b| b.rolling_update("0a6f3c1e-5a1b-4c2d-8e3f-123456789abc")).await;
    h.api
        .put_claim(claim("m1", vec![result(DRIVER, "eth1", "nic")]));
    let resp = h.kubelet.prepare(&[claim_ref("m1")]).await.unwrap();
    assert_eq!(resp.claims["uid-m1"].error, "");
    let plugin_dir = h.dir.path().join("plugins").join(DRIVER);
    assert_eq!(mode(&plugin_dir.join("checkpoint")), 0o600, "checkpoint");
    let sockets: Vec<_> = [h.dir.path().join("plugins_registry"), plugin_dir.clone()]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sock"))
        .collect();
    assert_eq!(sockets.len(), 2, "{sockets:?}");
    for s in &sockets {
        assert_eq!(mode(s), 0o600, "{}", s.display());
    }
    // Lock files of claims (rolling-update mode) and their directory.
    let locks: Vec<_> = walk(&plugin_dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "lock"))
        .collect();
    assert!(
        !locks.is_empty(),
        "a prepared claim has its lock file in rolling mode"
    );
    for l in &locks {
        assert_eq!(mode(l), 0o600, "{}", l.display());
        assert_eq!(mode(l.parent().unwrap()), 0o700, "{}", l.display());
    }
}

fn walk(d: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}
