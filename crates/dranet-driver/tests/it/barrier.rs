//! A pod never runs without its NICs (root only, real links in namespaces): an attach longer
//! than the runtime's NRI deadline is answered in time and goes on, CreateContainer refuses the
//! pod's containers until it ends, the hook attaches a pod whose RunPodSandbox never came, and
//! an attach that may not go on (`--device-attach-timeout=0`) or whose pod stopped leaves the
//! host whole.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dranet_driver::attach::{AttachPolicy, HookConfig, HookRequest};
use dranet_driver::daemon::Instrumented;
use dranet_driver::daemon::metrics::DaemonMetrics;
use dranet_kubeletplugin::k8s_openapi::api::core::v1::Event;
use dranet_nri::{Container, Hook, NriPlugin};

use crate::support::{self, Ns, can_run, claims, pod};

/// Eight veths (`b0`…`b7`) on a host namespace, each claimed by one claim of pod `uid`.
struct Bench {
    host: Ns,
    state: tempfile::TempDir,
    links: Vec<String>,
    /// The claim status the driver wrote, write by write.
    statuses: support::Statuses,
    status_writer: dranet_driver::StatusWriter,
}

impl Bench {
    fn new(tag: &str) -> Bench {
        let host = Ns::new(tag);
        let links: Vec<String> = (0..8).map(|i| format!("b{i}")).collect();
        for l in &links {
            host.ip(&[
                "link",
                "add",
                l,
                "type",
                "veth",
                "peer",
                "name",
                &format!("{l}p"),
            ]);
            host.ip(&["link", "set", l, "up"]);
        }
        let (status_writer, statuses) = support::status_sink();
        Bench {
            host,
            state: tempfile::tempdir().unwrap(),
            links,
            statuses,
            status_writer,
        }
    }

    fn hooks(&self, policy: AttachPolicy) -> (Arc<Instrumented>, Arc<Mutex<Vec<Event>>>) {
        let links: Vec<&str> = self.links.iter().map(String::as_str).collect();
        let writer = self.status_writer.clone();
        let driver =
            support::veth_driver_with(&self.host, self.state.path(), &links, |b| b.status(writer));
        let (writer, events) = support::event_sink();
        let hooks = Instrumented::with_policy(
            Arc::new(driver),
            Arc::new(DaemonMetrics::new()),
            Some(writer),
            "node-a",
            policy,
        );
        (hooks, events)
    }

    /// One claim of all eight links for pod `uid`, each named `net<i>` in the pod.
    async fn prepare(&self, hooks: &Instrumented, uid: &str) {
        let results: Vec<(String, String)> = self
            .links
            .iter()
            .enumerate()
            .map(|(i, l)| (format!("nic{i}"), format!("dev-{l}")))
            .collect();
        let requests: Vec<(&str, &str)> = results
            .iter()
            .map(|(r, d)| (r.as_str(), d.as_str()))
            .collect();
        let configs = results
            .iter()
            .enumerate()
            .map(|(i, (r, _))| {
                claims::opaque(
                    "FromClaim",
                    Some(&[r.as_str()]),
                    serde_json::json!({"interface": {"name": format!("net{i}"), "addresses": [format!("10.60.{i}.2/24")]}}),
                )
            })
            .collect();
        hooks
            .driver()
            .prepare_claim(&claims::claim("eight", &[uid], &requests, configs))
            .await
            .unwrap();
    }
}

/// A deadline no attach of eight links meets: every attach is deferred.
fn tight(device_attach_timeout: Duration) -> AttachPolicy {
    AttachPolicy {
        nri_request_timeout: Duration::from_micros(40),
        device_attach_timeout,
        hook: None,
    }
}

fn container(name: &str, hooks: Vec<Hook>) -> Container {
    Container {
        id: format!("ctr-{name}"),
        name: name.into(),
        create_runtime_hooks: hooks,
        ..Default::default()
    }
}

/// The tight policy with the hook, its socket and markers under `dir`.
fn hooked_policy(dir: &std::path::Path) -> (HookConfig, AttachPolicy) {
    let hook = HookConfig {
        path: "/opt/dranet/bin/dranet".into(),
        socket: dir.join("hook.sock"),
        markers: dir.to_path_buf(),
        timeout: Duration::from_secs(60),
    };
    let mut policy = tight(Duration::from_secs(60));
    policy.hook = Some(hook.clone());
    (hook, policy)
}

/// What the hook of a container of `sandbox` (in `netns`) asks, waiting up to 30 s.
fn hook_request(sandbox: &dranet_nri::PodSandbox, netns: &Ns) -> HookRequest {
    HookRequest {
        sandbox_id: sandbox.id.clone(),
        pod_uid: sandbox.uid.clone(),
        pod_name: sandbox.name.clone(),
        pod_namespace: sandbox.namespace.clone(),
        netns: netns.path().display().to_string(),
        wait_ms: 30_000,
        container_name: String::new(),
    }
}

/// A container whose CDI device added `hook`.
fn hooked_container(hook: &HookConfig) -> Container {
    container(
        "app",
        vec![Hook {
            path: hook.path.display().to_string(),
            args: hook.args(),
        }],
    )
}

fn links_in(ns: &Ns) -> usize {
    (0..8)
        .filter(|i| ns.try_ip(&["link", "show", &format!("net{i}")]))
        .count()
}

async fn settle(hooks: &Instrumented) {
    assert!(
        hooks.wait_idle(Duration::from_secs(30)).await,
        "attaches still running"
    );
}

/// RunPodSandbox answers within the deadline; the containers are refused, naming the devices
/// still attaching, until all eight are in; then they are created and see all eight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_attach_goes_on_and_the_containers_wait_for_all_of_it() {
    if !can_run("a_slow_attach_goes_on_and_the_containers_wait_for_all_of_it") {
        return;
    }
    let b = Bench::new("bar-slow");
    let host_before = b.host.dump();
    let p = Ns::new("bar-slow-p");
    let (hooks, events) = b.hooks(tight(Duration::from_secs(60)));
    b.prepare(&hooks, "ps").await;
    let sandbox = pod("ps", &p);
    hooks.run_pod_sandbox(&sandbox).await.unwrap();
    let first = hooks
        .create_container(&sandbox, &container("app", vec![]))
        .await;
    let refused = first
        .expect_err("created before its NICs were in")
        .to_string();
    assert!(
        refused.contains("still attaching") && refused.contains("dev-b0"),
        "{refused}"
    );
    // The kubelet retries the container.
    let mut tries = 1;
    loop {
        match hooks
            .create_container(&sandbox, &container("app", vec![]))
            .await
        {
            Ok(_) => break,
            Err(e) => assert!(e.to_string().contains("still attaching"), "{e}"),
        }
        tries += 1;
        assert!(tries < 10_000, "never attached");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(links_in(&p), 8, "created with every NIC in");
    let shown = p.ip(&["addr", "show", "net7"]);
    assert!(shown.contains("10.60.7.2/24"), "configured: {shown}");
    let reasons: Vec<String> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| e.reason.clone())
        .collect();
    assert_eq!(reasons, ["NetworkDeviceAttachDeferred"]);
    // A restarted container is not held.
    hooks
        .create_container(&sandbox, &container("app", vec![]))
        .await
        .unwrap();
    hooks.stop_pod_sandbox(&sandbox).await.unwrap();
    hooks.remove_pod_sandbox(&sandbox).await.unwrap();
    // The detach goes on past the (tight) deadline.
    settle(&hooks).await;
    assert_eq!(b.host.dump(), host_before);
}

/// `--device-attach-timeout=0`: a sandbox whose devices are not in within the deadline fails,
/// and the attach that went on gives everything back when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_time_past_the_deadline_the_sandbox_fails_and_the_host_keeps_its_links() {
    if !can_run("with_no_time_past_the_deadline_the_sandbox_fails_and_the_host_keeps_its_links") {
        return;
    }
    let b = Bench::new("bar-zero");
    let host_before = b.host.dump();
    let p = Ns::new("bar-zero-p");
    let (hooks, _) = b.hooks(tight(Duration::ZERO));
    b.prepare(&hooks, "pz").await;
    let sandbox = pod("pz", &p);
    let e = hooks
        .run_pod_sandbox(&sandbox)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("--device-attach-timeout=0"), "{e}");
    settle(&hooks).await;
    assert_eq!(links_in(&p), 0);
    assert_eq!(b.host.dump(), host_before);
    // The containers of the failed sandbox are refused with why.
    let e = hooks
        .create_container(&sandbox, &container("app", vec![]))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("--device-attach-timeout=0"), "{e}");
}

/// A pod stopped while its attach goes on: what the attach did is given back, all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_stopped_mid_attach_leaves_the_host_whole() {
    if !can_run("a_pod_stopped_mid_attach_leaves_the_host_whole") {
        return;
    }
    let b = Bench::new("bar-stop");
    let host_before = b.host.dump();
    let p = Ns::new("bar-stop-p");
    let (hooks, _) = b.hooks(tight(Duration::from_secs(60)));
    b.prepare(&hooks, "pt").await;
    let sandbox = pod("pt", &p);
    hooks.run_pod_sandbox(&sandbox).await.unwrap();
    hooks.stop_pod_sandbox(&sandbox).await.unwrap();
    settle(&hooks).await;
    hooks.remove_pod_sandbox(&sandbox).await.unwrap();
    assert_eq!(links_in(&p), 0);
    assert_eq!(b.host.dump(), host_before);
}

/// The daemon never saw the pod's RunPodSandbox (stalled, restarted, dropped by the runtime):
/// the container's hook asks, the pod is attached then, and a container that carries the hook
/// is not refused by CreateContainer (the hook holds it instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_attaches_a_pod_whose_sandbox_start_was_missed() {
    if !can_run("the_hook_attaches_a_pod_whose_sandbox_start_was_missed") {
        return;
    }
    let b = Bench::new("bar-hook");
    let host_before = b.host.dump();
    let p = Ns::new("bar-hook-p");
    let marks = tempfile::tempdir().unwrap();
    let (hook, policy) = hooked_policy(marks.path());
    let (hooks, _) = b.hooks(policy);
    b.prepare(&hooks, "ph").await;
    let sandbox = pod("ph", &p);
    let answer = hooks.hook_request(hook_request(&sandbox, &p)).await;
    assert!(answer.attached, "{answer:?}");
    assert_eq!(links_in(&p), 8);
    assert!(
        marks.path().join(&sandbox.id).exists(),
        "marked for later containers"
    );
    let hooked = hooked_container(&hook);
    hooks.create_container(&sandbox, &hooked).await.unwrap();
    // The runtime's late RunPodSandbox finds it attached.
    hooks.run_pod_sandbox(&sandbox).await.unwrap();
    hooks.stop_pod_sandbox(&sandbox).await.unwrap();
    hooks.remove_pod_sandbox(&sandbox).await.unwrap();
    settle(&hooks).await;
    assert!(!marks.path().join(&sandbox.id).exists());
    assert_eq!(b.host.dump(), host_before);
}

/// While the attach goes on, a container carrying the hook is let through (its hook waits),
/// one without it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_container_without_the_hook_is_refused_while_attaching() {
    if !can_run("only_a_container_without_the_hook_is_refused_while_attaching") {
        return;
    }
    let b = Bench::new("bar-both");
    let p = Ns::new("bar-both-p");
    let marks = tempfile::tempdir().unwrap();
    let (hook, policy) = hooked_policy(marks.path());
    let (hooks, _) = b.hooks(policy);
    b.prepare(&hooks, "pb").await;
    let sandbox = pod("pb", &p);
    hooks.run_pod_sandbox(&sandbox).await.unwrap();
    let hooked = hooked_container(&hook);
    hooks.create_container(&sandbox, &hooked).await.unwrap();
    let side = hooks
        .create_container(&sandbox, &container("side", vec![]))
        .await;
    assert!(
        side.is_err(),
        "a container without the hook waits at CreateContainer"
    );
    let answer = hooks.hook_request(hook_request(&sandbox, &p)).await;
    assert!(answer.attached, "{answer:?}");
    assert_eq!(links_in(&p), 8, "the hook returned with every NIC in");
    hooks.stop_pod_sandbox(&sandbox).await.unwrap();
    hooks.remove_pod_sandbox(&sandbox).await.unwrap();
}

/// Without the hook, a pod whose RunPodSandbox this daemon never saw (the runtime dropped the
/// plugin) is attached at its first CreateContainer, which refuses the container until all
/// eight are in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_of_a_missed_sandbox_waits_for_its_attach() {
    if !can_run("a_container_of_a_missed_sandbox_waits_for_its_attach") {
        return;
    }
    let b = Bench::new("bar-miss");
    let host_before = b.host.dump();
    let p = Ns::new("bar-miss-p");
    let (hooks, _) = b.hooks(tight(Duration::from_secs(60)));
    b.prepare(&hooks, "pm").await;
    let sandbox = pod("pm", &p);
    let mut refused = 0;
    loop {
        match hooks
            .create_container(&sandbox, &container("app", vec![]))
            .await
        {
            Ok(_) => break,
            Err(e) => {
                assert!(e.to_string().contains("still attaching"), "{e}");
                refused += 1;
            }
        }
        assert!(refused < 10_000, "never attached");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(refused > 0, "created before its NICs were in");
    assert_eq!(links_in(&p), 8, "created with every NIC in");
    hooks.stop_pod_sandbox(&sandbox).await.unwrap();
    hooks.remove_pod_sandbox(&sandbox).await.unwrap();
    settle(&hooks).await;
    assert_eq!(b.host.dump(), host_before);
}

/// Each device's claim status as it attaches: `Ready` only grows, a device not yet in says
/// `NetworkDeviceAttaching`, and the last write has all eight in, with their network data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_status_follows_each_device_as_it_attaches() {
    if !can_run("the_claim_status_follows_each_device_as_it_attaches") {
        return;
    }
    let b = Bench::new("bar-st");
    let p = Ns::new("bar-st-p");
    let (hooks, _) = b.hooks(tight(Duration::from_secs(60)));
    b.prepare(&hooks, "pst").await;
    hooks.run_pod_sandbox(&pod("pst", &p)).await.unwrap();
    settle(&hooks).await;
    let writes = written_until(&b.statuses, |w| ready(w).len() == 8).await;
    let mut before = 0;
    for w in &writes {
        assert_eq!(w.len(), 8, "every device of the claim, each write: {w:?}");
        for d in w {
            let c = &d.conditions.as_ref().unwrap()[0];
            match (c.status.as_str(), c.reason.as_str()) {
                ("True", "NetworkDeviceReady") => assert!(d.network_data.is_some(), "{d:?}"),
                ("False", "NetworkDeviceAttaching") => assert!(d.network_data.is_none()),
                other => panic!("{}: {other:?}", d.device),
            }
        }
        let now = ready(w).len();
        assert!(now >= before, "a device went from Ready back: {writes:?}");
        before = now;
    }
}

/// A pod whose attach fails (one of its eight links is gone): every device's status says
/// `NetworkDeviceAttachFailed` and why, even after earlier writes said some were in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attach_is_what_the_claim_status_says_last() {
    if !can_run("a_failed_attach_is_what_the_claim_status_says_last") {
        return;
    }
    let b = Bench::new("bar-stf");
    let p = Ns::new("bar-stf-p");
    let (hooks, _) = b.hooks(tight(Duration::from_secs(60)));
    b.prepare(&hooks, "pstf").await;
    b.host.ip(&["link", "del", "b5"]);
    hooks.run_pod_sandbox(&pod("pstf", &p)).await.unwrap();
    settle(&hooks).await;
    let writes = written_until(&b.statuses, |w| {
        w.iter()
            .all(|d| d.conditions.as_ref().unwrap()[0].reason == "NetworkDeviceAttachFailed")
    })
    .await;
    let last = writes.last().unwrap();
    assert_eq!(last.len(), 8);
    for d in last {
        let c = &d.conditions.as_ref().unwrap()[0];
        assert_eq!((c.type_.as_str(), c.status.as_str()), ("Ready", "False"));
        assert!(c.message.contains("dev-b5"), "{}", c.message);
        assert!(d.network_data.is_none());
    }
    assert_eq!(links_in(&p), 0, "what was attached was given back");
}

/// The devices a status write says are in the pod.
fn ready(
    w: &[dranet_kubeletplugin::k8s_openapi::api::resource::v1::AllocatedDeviceStatus],
) -> Vec<&str> {
    w.iter()
        .filter(|d| d.conditions.as_ref().is_some_and(|c| c[0].status == "True"))
        .map(|d| d.device.as_str())
        .collect()
}

/// The writes so far, once the last satisfies `done` (at most 10 s).
async fn written_until(
    statuses: &support::Statuses,
    done: impl Fn(
        &[dranet_kubeletplugin::k8s_openapi::api::resource::v1::AllocatedDeviceStatus],
    ) -> bool,
) -> Vec<Vec<dranet_kubeletplugin::k8s_openapi::api::resource::v1::AllocatedDeviceStatus>> {
    for _ in 0..1000 {
        let w = statuses.lock().unwrap().clone();
        if w.last().is_some_and(|l| done(l)) {
            return w;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the status never got there: {:?}", statuses.lock().unwrap());
}
