//! The runner over real unix sockets, against the crate's fake runtime: registration, events,
//! large messages, protocol errors, and reconnection without losing state.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dranet_nri::fake::FakeRuntime;
use dranet_nri::{
    Container, ContainerAdjustment, Error, Event, EventMask, HandlerError, LinuxDevice, Namespace,
    NriPlugin, PodSandbox, Result, RunnerBuilder, RuntimeInfo,
};
use tokio::net::{UnixListener, UnixStream};

#[derive(Default)]
struct Recorder {
    log: Mutex<Vec<String>>,
    slow_run: bool,
}

impl Recorder {
    fn push(&self, s: String) {
        self.log.lock().unwrap().push(s);
    }
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl NriPlugin for Recorder {
    async fn configure(&self, rt: &RuntimeInfo) -> Result<(), HandlerError> {
        self.push(format!("configure {}", rt.runtime_name));
        Ok(())
    }
    async fn run_pod_sandbox(&self, pod: &PodSandbox) -> Result<(), HandlerError> {
        if self.slow_run {
            // Longer than the fake runtime is willing to wait.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        self.push(format!("run {} {:?}", pod.id, pod.netns_path()));
        Ok(())
    }
    async fn stop_pod_sandbox(&self, pod: &PodSandbox) -> Result<(), HandlerError> {
        self.push(format!("stop {} {:?}", pod.id, pod.netns_path()));
        Ok(())
    }
    async fn create_container(
        &self,
        pod: &PodSandbox,
        c: &Container,
    ) -> Result<ContainerAdjustment, HandlerError> {
        let mut adj = ContainerAdjustment::new();
        adj.add_device(LinuxDevice::char("/dev/infiniband/uverbs0", 231, 192))?;
        // Echo every pod annotation as env so the answer is as large as the request.
        for (k, v) in &pod.annotations {
            adj.add_env(k, v)?;
        }
        adj.add_annotation("seen-container", &c.name);
        Ok(adj)
    }
}

fn pod(id: &str, netns: Option<&str>) -> PodSandbox {
    PodSandbox {
        id: id.into(),
        name: format!("pod-{id}"),
        namespace: "default".into(),
        namespaces: netns
            .map(|p| Namespace {
                kind: "network".into(),
                path: p.into(),
            })
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

fn pair_runner(
    plugin: Arc<Recorder>,
    events: EventMask,
) -> (tokio::task::JoinHandle<Result<()>>, FakeRuntime) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let runner = RunnerBuilder::new()
        .name("rec")
        .index(42)
        .events(events)
        .from_env(false)
        .connection(ours)
        .build_shared(plugin)
        .unwrap();
    (tokio::spawn(runner.run()), FakeRuntime::new(theirs))
}

#[tokio::test]
async fn registers_configures_and_serves_events_over_a_socketpair() {
    let plugin = Arc::new(Recorder::default());
    let mask = EventMask::of(&[
        Event::RunPodSandbox,
        Event::StopPodSandbox,
        Event::CreateContainer,
    ]);
    let (task, mut rt) = pair_runner(plugin.clone(), mask);
    assert_eq!(
        rt.expect_registration().await.unwrap(),
        ("rec".into(), "42".into())
    );
    // RemovePodSandbox is subscribed too, only to free the netns cache.
    assert_eq!(
        rt.configure("fake", "1.7.24").await.unwrap(),
        mask.with(Event::RemovePodSandbox)
    );
    rt.synchronize(&[pod("old", Some("/run/netns/old"))], &[], 1)
        .await
        .unwrap();

    let p = pod("p1", Some("/run/netns/p1"));
    rt.state_change(Event::RunPodSandbox, &p, None)
        .await
        .unwrap();
    let ctr = Container {
        name: "app".into(),
        ..Default::default()
    };
    let adj = rt.create_container(&p, &ctr).await.unwrap();
    assert_eq!(
        adj.devices(),
        &[LinuxDevice::char("/dev/infiniband/uverbs0", 231, 192)]
    );
    assert_eq!(
        adj.annotations().get("seen-container").map(String::as_str),
        Some("app")
    );
    // containerd 1.7 sends no namespaces at stop: the runner supplies the remembered path.
    rt.state_change(Event::StopPodSandbox, &pod("p1", None), None)
        .await
        .unwrap();
    // Synchronized pods are remembered too, and v0.12-style dedicated calls work the same.
    rt.pod_event(Event::StopPodSandbox, &pod("old", None))
        .await
        .unwrap();
    assert_eq!(
        plugin.log(),
        [
            "configure fake",
            "run p1 Some(\"/run/netns/p1\")",
            "stop p1 Some(\"/run/netns/p1\")",
            "stop old Some(\"/run/netns/old\")",
        ]
    );

    // Unknown methods answer UNIMPLEMENTED (12), which v0.12 runtimes rely on for fallbacks.
    match rt.call("NoSuchMethod", Vec::new()).await {
        Err(Error::Status {
            code: 12, message, ..
        }) => assert!(message.contains("NoSuchMethod"), "{message}"),
        other => panic!("expected UNIMPLEMENTED, got {other:?}"),
    }
    rt.shutdown().await.unwrap();
    drop(rt);
    // The runtime closed a given connection: the runner ends cleanly.
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn messages_larger_than_a_frame_are_split_both_ways() {
    let plugin = Arc::new(Recorder::default());
    let (_task, mut rt) = pair_runner(plugin, EventMask::empty());
    rt.expect_registration().await.unwrap();
    rt.configure("fake", "0").await.unwrap();
    let mut p = pod("big", None);
    for i in 0..200 {
        p.annotations.insert(format!("KEY_{i}"), "v".repeat(100));
    }
    let adj = rt
        .create_container(&p, &Container::default())
        .await
        .unwrap();
    assert_eq!(adj.env().len(), 200);
    // The answer was ~25 KiB, yet no frame the plugin wrote exceeded 4 KiB.
    assert!(
        rt.largest_frame() <= 4096,
        "largest frame {}",
        rt.largest_frame()
    );
    assert!(
        rt.largest_frame() > 4000,
        "answer was not split at the limit: {}",
        rt.largest_frame()
    );
}

#[tokio::test]
async fn garbage_from_the_runtime_drops_the_connection_with_a_clear_error() {
    let plugin = Arc::new(Recorder::default());
    let (task, mut rt) = pair_runner(plugin, EventMask::empty());
    rt.expect_registration().await.unwrap();
    rt.write_raw(&[0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff])
        .await
        .unwrap();
    rt.expect_closed().await.unwrap();
    let err = task.await.unwrap().unwrap_err();
    assert!(
        matches!(err, Error::FrameTooLarge { conn_id: 1, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn a_bad_request_payload_is_answered_and_the_connection_survives() {
    let plugin = Arc::new(Recorder::default());
    let (_task, mut rt) = pair_runner(plugin, EventMask::empty());
    rt.expect_registration().await.unwrap();
    match rt.call("RunPodSandbox", vec![0x0a, 0xff]).await {
        Err(Error::Status { code: 3, .. }) => {}
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
    // Still serving.
    rt.configure("fake", "0").await.unwrap();
}

#[tokio::test]
async fn reconnects_after_the_runtime_goes_away_and_keeps_state() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("nri.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let plugin = Arc::new(Recorder {
        slow_run: true,
        ..Default::default()
    });
    let runner = RunnerBuilder::new()
        .socket(&sock)
        .name("rec")
        .index(1)
        .from_env(false)
        .build_shared(plugin.clone())
        .unwrap();
    let task = tokio::spawn(runner.run());

    let mut rt = FakeRuntime::accept(&listener).await.unwrap();
    rt.expect_registration().await.unwrap();
    rt.configure("fake", "0").await.unwrap();
    // The runtime gives up on a slow RunPodSandbox and drops the plugin, as containerd does on a
    // request timeout. The handler must still finish and its netns must be remembered.
    let call = tokio::time::timeout(
        Duration::from_millis(50),
        rt.state_change(Event::RunPodSandbox, &pod("p", Some("/run/netns/p")), None),
    )
    .await;
    assert!(call.is_err(), "the slow handler answered too early");
    drop(rt);
    // The "restarted" runtime: a new listener on the same path.
    drop(listener);
    std::fs::remove_file(&sock).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let listener = UnixListener::bind(&sock).unwrap();
    let t0 = Instant::now();
    let mut rt = FakeRuntime::accept(&listener).await.unwrap();
    rt.expect_registration().await.unwrap();
    // Not a benchmark: the backoff is capped at 250 ms, and only an uncapped one fails this.
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "reconnect took {:?}: the backoff is not capped",
        t0.elapsed()
    );
    rt.configure("fake", "0").await.unwrap();
    // The handler of the abandoned call completes on its own.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !plugin.log().iter().any(|l| l.starts_with("run p")) {
        assert!(
            Instant::now() < deadline,
            "abandoned handler never finished: {:?}",
            plugin.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rt.state_change(Event::StopPodSandbox, &pod("p", None), None)
        .await
        .unwrap();
    let mut log = plugin.log();
    log.sort();
    assert_eq!(
        log,
        [
            "configure fake",
            "configure fake",
            "run p Some(\"/run/netns/p\")",
            "stop p Some(\"/run/netns/p\")",
        ]
    );
    task.abort();
}

#[tokio::test]
async fn builder_rejects_bad_settings_with_the_reason() {
    let err = RunnerBuilder::new()
        .name("x")
        .index(100)
        .from_env(false)
        .build(Recorder::default())
        .unwrap_err();
    assert!(err.to_string().contains("00-99"), "{err}");
    let err = RunnerBuilder::new()
        .index(7)
        .from_env(false)
        .build(Recorder::default())
        .unwrap_err();
    assert!(err.to_string().contains("name not set"), "{err}");
}

#[tokio::test]
async fn a_missing_socket_is_retried_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("later.sock");
    let plugin = Arc::new(Recorder::default());
    let runner = RunnerBuilder::new()
        .socket(&sock)
        .name("rec")
        .index(1)
        .from_env(false)
        .build_shared(plugin)
        .unwrap();
    let task = tokio::spawn(runner.run());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!task.is_finished());
    let listener = UnixListener::bind(&sock).unwrap();
    let mut rt = tokio::time::timeout(Duration::from_secs(1), FakeRuntime::accept(&listener))
        .await
        .expect("plugin connected within the max backoff")
        .unwrap();
    rt.expect_registration().await.unwrap();
    task.abort();
}

/// A plugin whose handlers block until released, counting how many run at once.
#[derive(Default)]
struct Gate {
    running: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    open: tokio::sync::Notify,
    opened: std::sync::atomic::AtomicBool,
}

impl NriPlugin for Gate {
    async fn run_pod_sandbox(&self, _: &PodSandbox) -> Result<(), HandlerError> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.running.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        while !self.opened.load(SeqCst) {
            let wait = self.open.notified();
            if self.opened.load(SeqCst) {
                break;
            }
            wait.await;
        }
        self.running.fetch_sub(1, SeqCst);
        Ok(())
    }
}

/// A runtime that sends calls faster than they are answered (or stops reading answers) must not
/// make the plugin spawn a task per call without end: past a bound the plugin stops reading.
#[tokio::test]
async fn calls_in_flight_are_bounded_and_all_answered() {
    use std::sync::atomic::Ordering::SeqCst;
    let gate = Arc::new(Gate::default());
    let (ours, theirs) = UnixStream::pair().unwrap();
    let runner = RunnerBuilder::new()
        .name("gate")
        .index(1)
        .from_env(false)
        .connection(ours)
        .build_shared(Arc::clone(&gate))
        .unwrap();
    let task = tokio::spawn(runner.run());
    let mut rt = FakeRuntime::new(theirs);
    rt.expect_registration().await.unwrap();
    rt.configure("flood", "0").await.unwrap();
    let payload = dranet_nri::fake::pod_request(&PodSandbox {
        id: "p".into(),
        ..Default::default()
    });
    // 300 calls, sent without waiting for answers: without a bound, 300 handlers would run.
    let sender = tokio::spawn(async move {
        for _ in 0..300 {
            rt.send_request("RunPodSandbox", payload.clone())
                .await
                .unwrap();
        }
        rt
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let most = gate.most.load(SeqCst);
    assert!(most > 0 && most <= 64, "{most} handlers ran at once");
    // Released, every call is answered.
    gate.opened.store(true, SeqCst);
    gate.open.notify_waiters();
    let mut rt = tokio::time::timeout(Duration::from_secs(30), sender)
        .await
        .expect("sending stalled after the handlers were released")
        .unwrap();
    let mut answered = 0;
    while answered < 300 {
        let (_, ok) = tokio::time::timeout(Duration::from_secs(30), rt.recv_answer())
            .await
            .expect("answers stopped")
            .unwrap();
        assert!(ok);
        answered += 1;
        // Handlers spawned after the release do not wait.
        gate.open.notify_waiters();
    }
    assert!(gate.most.load(SeqCst) <= 64);
    task.abort();
}
