//! The daemon's Prometheus metrics: upstream dranet's names where they exist, ours beside them.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label pairs.
type Labels = Vec<(&'static str, String)>;
type Hist = Family<Labels, Histogram, fn() -> Histogram>;

/// 100 µs to ~13 s: hook calls are sub-millisecond, prepares a few ms, attaches tens of ms.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

/// 10 ms to ~80 s: a provider refresh is a few requests per device, bounded by its timeout.
fn refresh_latency() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

/// The `devices` label of a pod's attach: its size class, so that a pod of 16 NICs is not
/// averaged with pods of one (and the label's values stay few).
pub const POD_SIZES: [&str; 5] = ["1", "2-4", "5-8", "9-16", "17+"];

/// The class of [`POD_SIZES`] a pod of `n` devices is in.
pub fn pod_size(n: usize) -> &'static str {
    match n {
        0..=1 => POD_SIZES[0],
        2..=4 => POD_SIZES[1],
        5..=8 => POD_SIZES[2],
        9..=16 => POD_SIZES[3],
        _ => POD_SIZES[4],
    }
}

/// Request outcome labels, as upstream: `success`, `failed`, `noop` (nothing of ours involved).
pub const SUCCESS: &str = "success";
/// See [`SUCCESS`].
pub const FAILED: &str = "failed";
/// See [`SUCCESS`].
pub const NOOP: &str = "noop";

/// Every metric of the daemon, registered in one registry (no global state).
pub struct DaemonMetrics {
    registry: Registry,
    dra_requests: Family<Labels, Counter>,
    dra_latency: Hist,
    nri_requests: Family<Labels, Counter>,
    nri_latency: Hist,
    published_devices: Family<Labels, Gauge>,
    last_published: Gauge<f64, AtomicU64>,
    scans: Family<Labels, Counter>,
    scan_duration: Histogram,
    refreshes: Family<Labels, Counter>,
    refresh_duration: Histogram,
    hotplug_to_publish: Histogram,
    attach: Family<Labels, Counter>,
    attach_duration: Hist,
    device_attach_duration: Hist,
    restores_owed: Gauge,
    claim_lookups: Family<Labels, Counter>,
    sandbox_attach: Family<Labels, Counter>,
    hook_waits: Family<Labels, Counter>,
    hook_wait_duration: Hist,
    nri_request_timeout: Gauge<f64, AtomicU64>,
}

impl std::fmt::Debug for DaemonMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonMetrics").finish_non_exhaustive()
    }
}

impl Default for DaemonMetrics {
    fn default() -> Self {
        Self::new()
    }
}

fn labels<const N: usize>(pairs: [(&'static str, &str); N]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, (*v).to_string())).collect()
}

impl DaemonMetrics {
    /// All metrics at zero.
    pub fn new() -> Self {
        // The process collector's names are the standard unprefixed `process_*`.
        let mut root = Registry::default();
        root.register_collector(Box::new(super::process::ProcessCollector));
        let registry = root.sub_registry_with_prefix("dranet_driver");
        let m = DaemonMetrics {
            dra_requests: Family::default(),
            dra_latency: Family::new_with_constructor(latency),
            nri_requests: Family::default(),
            nri_latency: Family::new_with_constructor(latency),
            published_devices: Family::default(),
            last_published: Gauge::default(),
            scans: Family::default(),
            scan_duration: latency(),
            refreshes: Family::default(),
            refresh_duration: refresh_latency(),
            hotplug_to_publish: latency(),
            attach: Family::default(),
            attach_duration: Family::new_with_constructor(latency),
            device_attach_duration: Family::new_with_constructor(latency),
            restores_owed: Gauge::default(),
            claim_lookups: Family::default(),
            sandbox_attach: Family::default(),
            hook_waits: Family::default(),
            hook_wait_duration: Family::new_with_constructor(refresh_latency),
            nri_request_timeout: Gauge::default(),
            registry: Registry::default(),
        };
        // Counters get `_total` appended by the encoder.
        registry.register(
            "dra_plugin_requests",
            "DRA kubelet plugin requests, by method and status",
            m.dra_requests.clone(),
        );
        registry.register(
            "dra_plugin_requests_latency_seconds",
            "DRA kubelet plugin request latency",
            m.dra_latency.clone(),
        );
        registry.register(
            "nri_plugin_requests",
            "NRI plugin requests, by method and status",
            m.nri_requests.clone(),
        );
        registry.register(
            "nri_plugin_requests_latency_seconds",
            "NRI plugin request latency",
            m.nri_latency.clone(),
        );
        registry.register(
            "published_devices_total",
            "Devices in the published ResourceSlices (feature total or rdma)",
            m.published_devices.clone(),
        );
        registry.register(
            "last_published_time_seconds",
            "When the API server last got exactly the node's devices (Unix time)",
            m.last_published.clone(),
        );
        registry.register(
            "inventory_scans",
            "Inventory scans, by trigger (start, hotplug, periodic) and status",
            m.scans.clone(),
        );
        registry.register(
            "inventory_scan_duration_seconds",
            "How long one inventory scan took",
            m.scan_duration.clone(),
        );
        registry.register(
            "provider_refreshes",
            "Cloud provider refreshes (the webhook asked about every device), by status: \
             success, or failed when cut by --provider-refresh-timeout",
            m.refreshes.clone(),
        );
        registry.register(
            "provider_refresh_duration_seconds",
            "How long one cloud provider refresh took",
            m.refresh_duration.clone(),
        );
        registry.register(
            "hotplug_to_publish_seconds",
            "From a hot-plug event to the API server holding the changed devices",
            m.hotplug_to_publish.clone(),
        );
        registry.register(
            "pod_device_attach",
            "Devices attached to (attach) or detached from (detach) pods, by status",
            m.attach.clone(),
        );
        registry.register(
            "pod_device_attach_duration_seconds",
            "How long giving a pod its devices (attach) or taking them back (detach) took",
            m.attach_duration.clone(),
        );
        registry.register(
            "device_attach_duration_seconds",
            "How long moving and configuring one device into a pod took, by status (a pod's \
             devices attach side by side)",
            m.device_attach_duration.clone(),
        );
        registry.register(
            "host_restores_owed",
            "Devices still to be given back to the host (a crash left them in a pod that is gone)",
            m.restores_owed.clone(),
        );
        registry.register(
            "claim_lookups",
            "ResourceClaim reads from the API server, by status",
            m.claim_lookups.clone(),
        );
        registry.register(
            "sandbox_attach_results",
            "Pod sandboxes as RunPodSandbox answered them: attached (in time), deferred (the \
             attach goes on, the containers wait), rejected (--device-attach-timeout=0 and not \
             in time) or failed",
            m.sandbox_attach.clone(),
        );
        registry.register(
            "hook_waits",
            "OCI hook requests (a container waiting for its pod's devices), by result: \
             attached, failed or timeout",
            m.hook_waits.clone(),
        );
        registry.register(
            "hook_wait_duration_seconds",
            "How long a container's hook waited for its pod's devices",
            m.hook_wait_duration.clone(),
        );
        registry.register(
            "nri_request_timeout_seconds",
            "The runtime's NRI request timeout the daemon answers within (--nri-request-timeout)",
            m.nri_request_timeout.clone(),
        );
        DaemonMetrics {
            registry: root,
            ..m
        }
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }

    /// The `Content-Type` of [`Self::encode`].
    pub const CONTENT_TYPE: &'static str =
        prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

    /// A DRA call finished (`method` as upstream: `PrepareResourceClaims`, …).
    pub fn dra_request(&self, method: &str, status: &str, elapsed: Duration) {
        self.dra_requests
            .get_or_create(&labels([("method", method), ("status", status)]))
            .inc();
        self.dra_latency
            .get_or_create(&labels([("method", method)]))
            .observe(elapsed.as_secs_f64());
    }

    /// An NRI hook finished (`method` as the runtime names it: `RunPodSandbox`, …).
    pub fn nri_request(&self, method: &str, status: &str, elapsed: Duration) {
        self.nri_requests
            .get_or_create(&labels([("method", method), ("status", status)]))
            .inc();
        self.nri_latency
            .get_or_create(&labels([("method", method), ("status", status)]))
            .observe(elapsed.as_secs_f64());
    }

    /// What is published now.
    pub fn published(&self, total: usize, rdma: usize) {
        let set = |f: &str, n: usize| {
            self.published_devices
                .get_or_create(&labels([("feature", f)]))
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        };
        set("total", total);
        set("rdma", rdma);
    }

    /// The API server holds the published devices as of now.
    pub fn published_now(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.last_published.set(now.as_secs_f64());
    }

    /// One inventory scan ended.
    pub fn scan(&self, trigger: &str, ok: bool, elapsed: Duration) {
        let status = if ok { SUCCESS } else { FAILED };
        self.scans
            .get_or_create(&labels([("trigger", trigger), ("status", status)]))
            .inc();
        self.scan_duration.observe(elapsed.as_secs_f64());
    }

    /// A refresh of the cloud provider ended (`failed`: cut by its timeout, or the provider
    /// panicked).
    pub fn provider_refresh(&self, failed: bool, elapsed: Duration) {
        let status = if failed { FAILED } else { SUCCESS };
        self.refreshes
            .get_or_create(&labels([("status", status)]))
            .inc();
        self.refresh_duration.observe(elapsed.as_secs_f64());
    }

    /// A hot-plug change reached the API server after `elapsed`.
    pub fn hotplug_published(&self, elapsed: Duration) {
        self.hotplug_to_publish.observe(elapsed.as_secs_f64());
    }

    /// Giving a pod its `devices` devices (`op` = `attach`) or taking them back (`detach`)
    /// ended.
    pub fn pod_devices(&self, op: &str, ok: bool, elapsed: Duration, devices: usize) {
        let status = if ok { SUCCESS } else { FAILED };
        self.attach
            .get_or_create(&labels([("op", op), ("status", status)]))
            .inc();
        self.attach_duration
            .get_or_create(&labels([("op", op), ("devices", pod_size(devices))]))
            .observe(elapsed.as_secs_f64());
    }

    /// One device's attach into a pod ended after `elapsed`.
    pub fn device_attach(&self, ok: bool, elapsed: Duration) {
        let status = if ok { SUCCESS } else { FAILED };
        self.device_attach_duration
            .get_or_create(&labels([("status", status)]))
            .observe(elapsed.as_secs_f64());
    }

    /// How RunPodSandbox answered a pod with devices (`attached`, `deferred`, `rejected`,
    /// `failed`).
    pub fn sandbox_attach(&self, result: &str) {
        self.sandbox_attach
            .get_or_create(&labels([("result", result)]))
            .inc();
    }

    /// A container's hook was answered (`attached`, `failed`, `timeout`) after `elapsed`.
    pub fn hook_wait(&self, result: &str, elapsed: Duration) {
        self.hook_waits
            .get_or_create(&labels([("result", result)]))
            .inc();
        self.hook_wait_duration
            .get_or_create(&labels([("result", result)]))
            .observe(elapsed.as_secs_f64());
    }

    /// The NRI request timeout in force.
    pub fn nri_request_timeout(&self, t: Duration) {
        self.nri_request_timeout.set(t.as_secs_f64());
    }

    /// Devices still owed back to the host.
    pub fn restores_owed(&self, n: usize) {
        self.restores_owed.set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// The kubelet plugin's measurements, into the daemon's metrics.
impl dranet_kubeletplugin::Metrics for DaemonMetrics {
    fn grpc_request(
        &self,
        method: dranet_kubeletplugin::Method,
        _api: &'static str,
        claims: usize,
        failed: usize,
        elapsed: Duration,
    ) {
        use dranet_kubeletplugin::Method;
        // Upstream's method names for the two calls it counts.
        let name = match method {
            Method::Prepare => "PrepareResourceClaims",
            Method::Unprepare => "UnprepareResourceClaims",
            other => other.as_str(),
        };
        let status = if failed > 0 {
            FAILED
        } else if claims == 0 && matches!(method, Method::Prepare | Method::Unprepare) {
            NOOP
        } else {
            SUCCESS
        };
        self.dra_request(name, status, elapsed);
    }

    fn claim_lookup(&self, ok: bool, _elapsed: Duration) {
        let status = if ok { SUCCESS } else { FAILED };
        self.claim_lookups
            .get_or_create(&labels([("status", status)]))
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_names_are_exposed() {
        let m = DaemonMetrics::new();
        m.dra_request("PrepareResourceClaims", SUCCESS, Duration::from_millis(2));
        m.nri_request("RunPodSandbox", FAILED, Duration::from_millis(20));
        m.published(5, 4);
        m.published_now();
        let text = m.encode();
        for want in [
            r#"dranet_driver_dra_plugin_requests_total{method="PrepareResourceClaims",status="success"} 1"#,
            r#"dranet_driver_dra_plugin_requests_latency_seconds_count{method="PrepareResourceClaims"} 1"#,
            r#"dranet_driver_nri_plugin_requests_total{method="RunPodSandbox",status="failed"} 1"#,
            r#"dranet_driver_nri_plugin_requests_latency_seconds_count{method="RunPodSandbox",status="failed"} 1"#,
            r#"dranet_driver_published_devices_total{feature="total"} 5"#,
            r#"dranet_driver_published_devices_total{feature="rdma"} 4"#,
            "# TYPE dranet_driver_last_published_time_seconds gauge",
            // Upstream's metrics e2e test greps this one.
            "# TYPE process_start_time_seconds gauge",
            "# TYPE process_cpu_seconds_total counter",
            "process_open_fds ",
            "process_resident_memory_bytes ",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        let ts = text
            .lines()
            .find_map(|l| l.strip_prefix("dranet_driver_last_published_time_seconds "))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        assert!(ts > 1.7e9, "a Unix time, got {ts}");
    }
}
