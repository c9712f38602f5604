//! A measurement, printed, not a test of timing (run by name with `--ignored`): how long a pod of
//! 1, 4, 8 and 16 NICs takes from `kubectl apply` to its container's first line, with every NIC
//! in and configured, with and without the barrier.
//!
//! - **without the barrier**, on the 2 s cluster: `--hook-path= --device-attach-timeout=0`, the
//!   attach bound to RunPodSandbox as before it (a sandbox not attached in time is refused and the
//!   kubelet starts another);
//! - **with the barrier**: the daemon's defaults (the hook), on the 2 s cluster and on the 100 ms
//!   one, where every attach is deferred and the container waits for it in the hook.
//!
//! Each row: the pod's start (median of [`RUNS`], and each run), dranet's attach as its
//! `pod devices attached` lines report it, how RunPodSandbox answered, and the hook's waits.
//! Command: `cargo test --test k8s attach_bench -- --ignored` (as root; the kit).

use std::time::{Duration, Instant};

use dranet_testkit::kit::Kit;

use crate::nri_timeout::Bench;

/// Pods per NIC count and mode.
const RUNS: usize = 3;

/// The daemon's flags of each mode this cluster measures.
fn modes(kit: &Kit) -> Vec<(&'static str, &'static [&'static str])> {
    let with = ("with the barrier", &[][..]);
    if kit.nri_request_timeout == dranet_testkit::kit::DEFAULT_NRI_REQUEST_TIMEOUT {
        vec![
            (
                "without the barrier",
                &["--hook-path=", "--device-attach-timeout=0"][..],
            ),
            with,
        ]
    } else {
        vec![with]
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

fn median(mut v: Vec<u128>) -> u128 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// The `duration_ms` of each `pod devices attached` line of `log`.
fn attach_ms(log: &str) -> Vec<u128> {
    log.lines()
        .filter(|l| l.contains("pod devices attached"))
        .filter_map(|l| {
            let v = l.split("duration_ms=").nth(1)?;
            v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
        })
        .collect()
}

/// Pod start for 1/4/8/16 NICs in each mode of this cluster, printed as table rows.
pub(crate) fn pod_start_with_and_without_the_barrier(kit: &Kit) {
    let timeout = kit.nri_request_timeout;
    kit.say(format_args!(
        "| NRI timeout | mode | NICs | pod start, median [runs] | dranet's attach, median | RunPodSandbox | hook waits, mean |"
    ));
    for n in [1usize, 4, 8, 16] {
        let mut b = Bench::of(kit, n);
        for (mode, flags) in modes(kit) {
            let mut d = b.daemon(flags);
            let mut starts = Vec::new();
            for run in 0..RUNS {
                let pod = format!("ab-{n}-{run}");
                let t = Instant::now();
                b.pod(&pod);
                b.all_at_start(&pod, &d);
                starts.push(ms(t.elapsed()));
                b.delete(&pod, &d);
            }
            let sandbox = |r: &str| {
                b.metric(&format!(
                    "dranet_driver_sandbox_attach_results_total{{result=\"{r}\"}}"
                ))
            };
            let answered = format!(
                "attached {}, deferred {}, rejected {}",
                sandbox("attached"),
                sandbox("deferred"),
                sandbox("rejected")
            );
            let waits =
                b.metric("dranet_driver_hook_wait_duration_seconds_count{result=\"attached\"}");
            let waited =
                b.metric("dranet_driver_hook_wait_duration_seconds_sum{result=\"attached\"}");
            let hook = if waits > 0.0 {
                format!("{waits} × {:.0} ms", waited * 1000.0 / waits)
            } else {
                "none".to_string()
            };
            kit.say(format_args!(
                "| {timeout} | {mode} | {n} | {} ms {starts:?} | {} ms | {answered} | {hook} |",
                median(starts.clone()),
                median(attach_ms(&d.output())),
            ));
            d.stop(Duration::from_secs(30));
        }
    }
}
