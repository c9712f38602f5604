//! What podnet's tests share: the test kit's network namespaces (built and inspected with
//! iproute2, an independent oracle: the tests never judge our netlink code with our netlink
//! code) and eBPF programs, and the crash re-runs of this binary.

#![allow(dead_code)]

pub use dranet_testkit::bpf;
pub use dranet_testkit::netns::{Ns, host_with_macvlan, host_with_veth, run};

use std::path::Path;
use std::process::Command;

use dranet_core::NetworkConfig;
use dranet_podnet::netns::Netns;
use dranet_podnet::{AttachRequest, PodNet};

/// Root and iproute2 are needed; without them the test prints why and passes.
pub fn can_run(test: &str) -> bool {
    dranet_testkit::root::can_run_netns(test)
}

/// A PodNet whose host is `h`, its journal in `journal`.
pub fn podnet(h: &Ns, journal: &Path) -> PodNet {
    PodNet::new(Netns::open(h.path()).unwrap(), journal).unwrap()
}

/// Pod namespace `pod` for host `h`, and a PodNet of `h` whose journal is in the returned
/// directory (kept as long as it lives).
pub fn pod_and_podnet(h: &Ns, pod: &str) -> (Ns, tempfile::TempDir, PodNet) {
    let p = Ns::new(pod);
    let journal = tempfile::tempdir().unwrap();
    let pn = podnet(h, journal.path());
    (p, journal, pn)
}

/// The attach of host link `link` to the pod namespace `pod_netns` under `key` for `owner`, with
/// no RDMA device and no planned source table.
pub fn req<'a>(
    key: &'a str,
    owner: &'a str,
    link: &'a str,
    pod_netns: &'a Path,
    config: &'a NetworkConfig,
) -> AttachRequest<'a> {
    AttachRequest {
        key,
        owner,
        link,
        pod_netns,
        config,
        rdma_device: None,
        source_table: None,
    }
}

/// A step hook that fails step `at` (`injected failure at <step>`) and lets every other pass.
pub fn failing_at(at: &str) -> dranet_podnet::StepHook {
    let at = at.to_string();
    std::sync::Arc::new(move |s: &str| {
        if s == at {
            Err(format!("injected failure at {s}"))
        } else {
            Ok(())
        }
    })
}

/// A step hook that SIGKILLs this process at step `at`: the crash tests re-run their own test
/// binary as a child with it (see [`rerun_until_killed`]).
pub fn killing_hook(at: String) -> dranet_podnet::StepHook {
    std::sync::Arc::new(move |s: &str| {
        if s == at {
            let _ = Command::new("kill")
                .args(["-9", &std::process::id().to_string()])
                .status();
            std::thread::sleep(std::time::Duration::from_secs(10));
        }
        Ok(())
    })
}

/// Re-runs this test binary's `test` alone with the crash environment (host and pod namespace,
/// journal, step) and checks it died by SIGKILL.
pub fn rerun_until_killed(
    test: &str,
    host: &std::path::Path,
    pod: &std::path::Path,
    journal: &std::path::Path,
    step: &str,
) {
    use std::os::unix::process::ExitStatusExt;
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env("DRANET_T_HOST", host)
        .env("DRANET_T_POD", pod)
        .env("DRANET_T_JOURNAL", journal)
        .env("DRANET_T_CRASH_AT", step)
        .output()
        .unwrap();
    assert_eq!(
        out.status.signal(),
        Some(9),
        "{test} should die by SIGKILL at {step}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
