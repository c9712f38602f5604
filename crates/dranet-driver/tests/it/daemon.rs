//! The node daemon (`dranet run`) in this process, with the webhook as its cloud provider: a
//! webhook that answers slowly, or never, holds up neither the daemon's readiness nor its main
//! loop. The daemon publishes without the webhook's attributes first, then again when they come,
//! and keeps them when a later refresh fails.
//!
//! Around it, the kubelet plugin's fakes (the API server, and the kubelet over the plugin's
//! sockets), the NRI fake runtime on the daemon's NRI socket, and dranet-cloud's fake webhook.
//! Nothing here is timed beyond bounded waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dranet_cloud::fake::{FakeServer, Reply};
use dranet_cloud::webhook::Webhook;
use dranet_core::{Discover, Inventory};
use dranet_driver::Rescan;
use dranet_driver::daemon::metrics::DaemonMetrics;
use dranet_driver::daemon::{Daemon, DaemonConfig, PollConfig};
use dranet_kubeletplugin::fake::{FakeApiServer, FakeKubelet};
use dranet_nri::fake::FakeRuntime;
use dranet_podnet::rdma::NetnsMode;
use tokio::sync::watch;

const NODE: &str = "node-a";
/// The attribute the webhook gives each device, as published (the driver's own domain,
/// unqualified).
const ATTR: &str = "webhook_attr";

/// The daemon's run, until [`Node::stop`]: a future the test polls beside its own steps
/// (`tokio::join!`), since the daemon's run stays on the task that started it.
type Run = Pin<Box<dyn Future<Output = ()>>>;

/// A started daemon and what stands around it.
struct Node {
    api: FakeApiServer,
    /// Devices the scan leaves out from now on.
    gone: Arc<Mutex<Vec<String>>>,
    ready: watch::Receiver<bool>,
    metrics: Arc<DaemonMetrics>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    runtime: tokio::task::JoinHandle<()>,
    _kubelet: FakeKubelet,
    _dirs: [tempfile::TempDir; 3],
}

impl Node {
    /// Starts `dranet run` on an SR-IOV fixture (a PF and two VFs) with `webhook` as its cloud
    /// provider, each of its requests bounded by `request_timeout` and each refresh by
    /// `refresh_timeout`, rescanning every second; and the kubelet and the runtime that make
    /// it ready. Returns once `Daemon::start` has (a start waiting for the webhook never does).
    async fn start(
        webhook: &FakeServer,
        request_timeout: Duration,
        refresh_timeout: Duration,
    ) -> (Node, Run) {
        let (fixture, state, kubelet) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        dranet_discovery::fixture::sriov_node(fixture.path(), 2).unwrap();
        let api = FakeApiServer::start().await.unwrap();
        api.add_node(NODE);
        let gone: Arc<Mutex<Vec<String>>> = Arc::default();
        let rescan: Rescan = {
            let (sysfs, gone) = (fixture.path().join("sys"), gone.clone());
            Arc::new(move || {
                let mut inv: Inventory = dranet_discovery::host(&sysfs, Default::default())
                    .discover()
                    .map_err(|e| e.to_string())?;
                let gone = gone.lock().unwrap().clone();
                inv.devices.retain(|d| !gone.contains(&d.name));
                Ok(inv)
            })
        };
        let cloud = Webhook::connect(
            &webhook.endpoint,
            None,
            request_timeout,
            dranet_cloud::RetryPolicy::default(),
        )
        .await
        .unwrap();
        let nri_socket = state.path().join("nri.sock");
        let listener = tokio::net::UnixListener::bind(&nri_socket).unwrap();
        let mut config = DaemonConfig::new(NODE);
        config.kubelet_root_dir = kubelet.path().to_path_buf();
        config.state_dir = state.path().join("dranet");
        config.nri_socket = nri_socket;
        config.cloud = Arc::new(cloud);
        config.refresh_timeout = refresh_timeout;
        config.rdma_mode = Some(NetnsMode::Shared);
        config.poll = PollConfig {
            max_interval: Duration::from_secs(1),
            hotplug: false,
            ..PollConfig::default()
        };
        config.shutdown_grace = Duration::from_secs(1);
        let started = Daemon::start(config, rescan, api.client().unwrap());
        let d = bounded(started, "Daemon::start").await.unwrap();
        let (ready, metrics) = (d.watch_ready(), d.metrics().clone());
        let kubelet_client = FakeKubelet::connect(d.plugin().registration_socket())
            .await
            .unwrap();
        kubelet_client.notify_registration(true, "").await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run: Run = Box::pin(async move {
            d.run(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        let runtime = tokio::spawn(async move {
            let mut rt = FakeRuntime::accept(&listener).await.unwrap();
            rt.expect_registration().await.unwrap();
            rt.configure("containerd", "1.7").await.unwrap();
            rt.synchronize(&[], &[], 10).await.unwrap();
            // The runtime stays connected.
            std::future::pending::<()>().await;
        });
        let node = Node {
            api,
            gone,
            ready,
            metrics,
            stop: Some(stop),
            runtime,
            _kubelet: kubelet_client,
            _dirs: [fixture, state, kubelet],
        };
        (node, run)
    }

    /// Each published device's `webhook_attr` (`None` without it), by device name.
    fn published(&self) -> Vec<(String, Option<String>)> {
        let mut out: Vec<(String, Option<String>)> = self
            .api
            .slices()
            .into_iter()
            .filter(|s| s.spec.node_name.as_deref() == Some(NODE))
            .flat_map(|s| s.spec.devices.unwrap_or_default())
            .map(|d| {
                let attr = d
                    .attributes
                    .and_then(|a| a.get(ATTR).and_then(|v| v.string.clone()));
                (d.name, attr)
            })
            .collect();
        out.sort();
        out
    }

    /// How many refreshes of the provider ended with `status`, as `/metrics` says.
    fn refreshes(&self, status: &str) -> u64 {
        let want = format!("dranet_driver_provider_refreshes_total{{status=\"{status}\"}} ");
        self.metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(&want))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    async fn wait_ready(&mut self) {
        bounded(self.ready.wait_for(|r| *r), "readiness")
            .await
            .unwrap();
    }

    /// Waits (bounded) until `what` holds of the published devices.
    async fn wait_published(&self, what: &str, f: impl Fn(&[(String, Option<String>)]) -> bool) {
        bounded(
            async {
                while !f(&self.published()) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            what,
        )
        .await;
    }

    /// Asks the daemon to shut down (its run then ends).
    fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.runtime.abort();
    }
}

/// `f`, or a failure naming `what` after a minute: a bound for a loaded machine, not a timing.
async fn bounded<T>(f: impl Future<Output = T>, what: &str) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within 60 s"))
}

/// A webhook serving attributes (`dra.net/webhook_attr: <value>`) and no device configuration:
/// it answers each request as `answer` says at the time.
async fn webhook(answer: impl Fn(&str) -> Reply + Send + Sync + 'static) -> FakeServer {
    FakeServer::start(move |r, _| match r.path() {
        "/health" => Reply::Json(
            200,
            r#"{"cloudProvider":true,"profileProvider":false}"#.into(),
        ),
        path => answer(path),
    })
    .await
    .unwrap()
}

fn attributes(value: &str) -> Reply {
    Reply::Json(
        200,
        format!(r#"{{"dra.net/{ATTR}":{{"string":"{value}"}}}}"#),
    )
}

fn answering(path: &str, value: &str) -> Reply {
    match path {
        "/GetDeviceAttributes" => attributes(value),
        _ => Reply::Json(200, "{}".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_never_answers_holds_up_neither_readiness_nor_the_main_loop() {
    // Accepts every connection and never answers; each request may take ten minutes, and a
    // refresh as long: nothing of the daemon may wait for it.
    let w = webhook(|_| Reply::Hang).await;
    let (mut node, run) = Node::start(&w, Duration::from_secs(600), Duration::from_secs(600)).await;
    let steps = async move {
        node.wait_ready().await;
        let first = node.published();
        assert_eq!(first.len(), 3, "{first:?}");
        assert!(first.iter().all(|(_, a)| a.is_none()), "{first:?}");
        assert!(
            w.seen().iter().any(|r| r.path() == "/GetDeviceAttributes"),
            "the webhook is being asked"
        );
        // The main loop turns meanwhile: a device that goes is unpublished at the next rescan.
        let vf = first[2].0.clone();
        node.gone.lock().unwrap().push(vf.clone());
        node.wait_published("the device gone unpublished", |p| {
            p.len() == 2 && !p.iter().any(|(d, _)| *d == vf)
        })
        .await;
        assert_eq!(node.refreshes("success") + node.refreshes("failed"), 0);
        node.stop();
    };
    bounded(async { tokio::join!(run, steps) }, "the daemon's run").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_webhooks_attributes_are_published_when_they_come_and_kept_when_it_fails() {
    // Closed: no answer (each request cut after 5 s). Then open: every answer takes 2 s.
    // Then failing: 500s.
    #[derive(Clone, Copy, PartialEq)]
    enum Mode {
        Closed,
        Slow,
        Failing,
    }
    let mode = Arc::new(Mutex::new(Mode::Closed));
    let m = mode.clone();
    let w = webhook(move |path| match *m.lock().unwrap() {
        Mode::Closed => Reply::Hang,
        Mode::Slow => Reply::After(Duration::from_secs(2), Box::new(answering(path, "slow"))),
        Mode::Failing => Reply::Json(500, r#"{"error":"inventory database down"}"#.into()),
    })
    .await;
    let (mut node, run) = Node::start(&w, Duration::from_secs(5), Duration::from_secs(30)).await;
    let steps = async move {
        node.wait_ready().await;
        let first = node.published();
        assert_eq!(first.len(), 3, "{first:?}");
        assert!(
            first.iter().all(|(_, a)| a.is_none()),
            "published without the webhook first: {first:?}"
        );

        // The webhook answers, slowly: its attributes are published when they come.
        *mode.lock().unwrap() = Mode::Slow;
        node.wait_published("the webhook's attributes", |p| {
            p.len() == 3 && p.iter().all(|(_, a)| a.as_deref() == Some("slow"))
        })
        .await;

        // It fails from now on: refreshes that end after that keep the attributes published.
        *mode.lock().unwrap() = Mode::Failing;
        let asked = w.seen().len();
        let ended = node.refreshes("success");
        bounded(
            async {
                // Two refreshes ended that began after the webhook failed (each asked it again).
                while node.refreshes("success") < ended + 2 || w.seen().len() <= asked {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            "two refreshes against the failing webhook",
        )
        .await;
        assert!(
            w.seen()[asked..]
                .iter()
                .any(|r| r.path() == "/GetDeviceAttributes"),
            "the failing webhook was asked"
        );
        let kept = node.published();
        assert!(
            kept.len() == 3 && kept.iter().all(|(_, a)| a.as_deref() == Some("slow")),
            "{kept:?}"
        );
        node.stop();
    };
    bounded(async { tokio::join!(run, steps) }, "the daemon's run").await;
}
