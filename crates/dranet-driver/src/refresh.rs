//! Bringing the cloud provider up to date for the node's devices, off the caller's task and
//! within a time limit: [`ProviderRefresh`].
//!
//! A provider asked about each device (the webhook; a cloud's metadata is read once, at start)
//! may be slow, or accept connections and never answer. Nothing waits on it that must not: the
//! daemon becomes ready, publishes and keeps its main loop turning without it, and publishes the
//! attributes again when a refresh ends. Refreshes run in a task of their own, one at a time,
//! each bounded as a whole by the refresh timeout; a request made while one runs waits for it,
//! and replaces any request still waiting (only the node's latest device list matters). A
//! refresh cut by the timeout keeps what the provider answered so far (the webhook keeps each
//! device's last answer) and is logged.
//!
//! A prepare lays the provider's configuration of a device under the claim's, so it waits (at
//! most the refresh timeout) until a refresh that asked about the claim's devices has ended:
//! right after a start, or for a device just plugged ([`ProviderRefresh::cover`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dranet_core::{CloudProvider, DeviceIdentifiers};
use tokio::sync::watch;

/// How long one refresh may take, all devices together, unless the operator says otherwise
/// (`dranet run --provider-refresh-timeout`): three of the webhook's request timeouts.
pub const DEFAULT_REFRESH_TIMEOUT: Duration = Duration::from_secs(30);

/// What the last refresh to end did.
#[derive(Debug, Clone, Default)]
pub struct Refreshed {
    /// How many refreshes have ended since the driver started (0: none yet).
    pub count: u64,
    /// The devices it asked the provider about, answered or not.
    pub devices: Arc<HashSet<DeviceIdentifiers>>,
    /// It was cut by the refresh timeout.
    pub timed_out: bool,
    /// The provider's refresh panicked (what the provider knew before is kept).
    pub panicked: bool,
    /// How long it took.
    pub elapsed: Duration,
}

/// Refreshes of one provider, in a task of their own (see the module docs). Cheap to clone;
/// clones share the queue.
#[derive(Clone)]
pub struct ProviderRefresh {
    inner: Arc<Inner>,
}

struct Inner {
    cloud: Arc<dyn CloudProvider>,
    timeout: Duration,
    queue: Mutex<Queue>,
    ended: watch::Sender<Refreshed>,
}

#[derive(Default)]
struct Queue {
    /// The latest request, not started yet.
    next: Option<Vec<DeviceIdentifiers>>,
    /// A task is refreshing (and will take `next` when it is done).
    running: bool,
    /// The devices of the latest request, started or not.
    latest: Arc<HashSet<DeviceIdentifiers>>,
}

impl std::fmt::Debug for ProviderRefresh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderRefresh")
            .field("cloud", &self.inner.cloud.name())
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

impl ProviderRefresh {
    /// Refreshes of `cloud`, each cut after `timeout`.
    pub fn new(cloud: Arc<dyn CloudProvider>, timeout: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                cloud,
                timeout,
                queue: Mutex::new(Queue::default()),
                ended: watch::Sender::new(Refreshed::default()),
            }),
        }
    }

    /// How long one refresh may take.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Asks for a refresh of `devices`, the node's whole device list (a provider forgets the
    /// devices not in it), and returns at once. It runs on the current Tokio runtime; called
    /// outside one, nothing is refreshed and an error is logged.
    pub fn request(&self, devices: Vec<DeviceIdentifiers>) {
        let start = {
            let mut q = self.queue();
            q.latest = Arc::new(devices.iter().cloned().collect());
            q.next = Some(devices);
            !std::mem::replace(&mut q.running, true)
        };
        if !start {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(drain(self.inner.clone()));
            }
            Err(e) => {
                let mut q = self.queue();
                q.running = false;
                q.next = None;
                tracing::error!(error = %e, "the cloud provider's refresh needs a Tokio runtime; not refreshed");
            }
        }
    }

    /// Each refresh as it ends.
    pub fn watch(&self) -> watch::Receiver<Refreshed> {
        self.inner.ended.subscribe()
    }

    /// Waits, at most the refresh timeout, until a refresh that asked the provider about each
    /// of `needed` has ended (whatever the provider answered); when the latest request does not
    /// include them, first requests one of `all()`, the node's device list now. Whether such a
    /// refresh ended in time.
    pub async fn cover(
        &self,
        needed: &[DeviceIdentifiers],
        all: impl FnOnce() -> Vec<DeviceIdentifiers>,
    ) -> bool {
        let covered = |r: &Refreshed| needed.iter().all(|d| r.devices.contains(d));
        let mut ended = self.watch();
        if covered(&ended.borrow_and_update()) {
            return true;
        }
        let asked = {
            let q = self.queue();
            needed.iter().all(|d| q.latest.contains(d))
        };
        if !asked {
            self.request(all());
        }
        matches!(
            tokio::time::timeout(self.inner.timeout, ended.wait_for(covered)).await,
            Ok(Ok(_))
        )
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.inner
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Refreshes until no request is waiting.
async fn drain(inner: Arc<Inner>) {
    loop {
        let devices = {
            let mut q = inner.queue.lock().unwrap_or_else(PoisonError::into_inner);
            match q.next.take() {
                Some(d) => d,
                None => {
                    // Under the lock that `request` takes: a request after this starts a task.
                    q.running = false;
                    return;
                }
            }
        };
        let start = Instant::now();
        // A task of its own: cut at the timeout (aborting it drops the provider's requests in
        // flight), and a panic in the provider ends it, not this loop.
        let cloud = inner.cloud.clone();
        let asked = devices.clone();
        let mut task = tokio::spawn(async move { cloud.refresh(&asked).await });
        let (timed_out, panicked) = match tokio::time::timeout(inner.timeout, &mut task).await {
            Ok(Ok(())) => (false, false),
            Ok(Err(e)) => {
                tracing::error!(provider = inner.cloud.name(), error = %e, "the cloud provider's refresh failed; what it knew before is kept");
                (false, true)
            }
            Err(_) => {
                task.abort();
                tracing::warn!(
                    provider = inner.cloud.name(),
                    devices = devices.len(),
                    timeout = ?inner.timeout,
                    "the cloud provider's refresh did not end within its timeout; devices it did not answer for keep their last answer"
                );
                (true, false)
            }
        };
        let elapsed = start.elapsed();
        let devices = Arc::new(devices.into_iter().collect());
        inner.ended.send_modify(|r| {
            r.count += 1;
            r.devices = devices;
            r.timed_out = timed_out;
            r.panicked = panicked;
            r.elapsed = elapsed;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dranet_core::{Attributes, BoxFuture};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A provider whose refresh takes `delay` (or never ends), counting refreshes started.
    struct Slow {
        delay: Option<Duration>,
        started: AtomicUsize,
    }

    impl CloudProvider for Slow {
        fn name(&self) -> &str {
            "slow"
        }
        fn node_attributes(&self) -> Attributes {
            Attributes::new()
        }
        fn refresh<'a>(&'a self, _: &'a [DeviceIdentifiers]) -> BoxFuture<'a, ()> {
            self.started.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                match self.delay {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            })
        }
    }

    fn id(name: &str) -> DeviceIdentifiers {
        DeviceIdentifiers {
            name: Some(name.into()),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn requests_return_at_once_and_a_refresh_that_never_ends_is_cut() {
        let cloud = Arc::new(Slow {
            delay: None,
            started: AtomicUsize::new(0),
        });
        let timeout = Duration::from_millis(200);
        let r = ProviderRefresh::new(cloud.clone(), timeout);
        let mut ended = r.watch();
        r.request(vec![id("eth1")]);
        while cloud.started.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        // A second and a third while the first runs: the third replaces the second.
        r.request(vec![id("eth2")]);
        r.request(vec![id("eth3")]);
        ended.changed().await.unwrap();
        let first = ended.borrow_and_update().clone();
        assert!(first.timed_out && first.count == 1, "{first:?}");
        assert!(first.devices.contains(&id("eth1")));
        assert!(first.elapsed >= timeout);
        ended.changed().await.unwrap();
        let second = ended.borrow_and_update().clone();
        assert_eq!(second.count, 2);
        assert!(second.devices.contains(&id("eth3")), "{second:?}");
        assert_eq!(
            cloud.started.load(Ordering::SeqCst),
            2,
            "eth2's was replaced"
        );
    }

    #[tokio::test]
    async fn cover_waits_for_a_refresh_asking_about_the_devices_and_no_longer() {
        let cloud = Arc::new(Slow {
            delay: Some(Duration::from_millis(50)),
            started: AtomicUsize::new(0),
        });
        let r = ProviderRefresh::new(cloud.clone(), Duration::from_secs(60));
        r.request(vec![id("eth1")]);
        // eth1 is being asked about: wait for it, without asking again.
        assert!(r.cover(&[id("eth1")], || unreachable!()).await);
        assert_eq!(cloud.started.load(Ordering::SeqCst), 1);
        // Covered already: at once.
        assert!(r.cover(&[id("eth1")], || unreachable!()).await);
        // A device no request named: asked now, with the node's list.
        assert!(
            r.cover(&[id("eth2")], || vec![id("eth1"), id("eth2")])
                .await
        );
        assert_eq!(cloud.started.load(Ordering::SeqCst), 2);

        // A provider that never answers: the wait ends, bounded by the refresh timeout.
        let never = Arc::new(Slow {
            delay: None,
            started: AtomicUsize::new(0),
        });
        let r = ProviderRefresh::new(never, Duration::from_millis(200));
        let waited = tokio::time::timeout(
            Duration::from_secs(30),
            r.cover(&[id("eth1")], || vec![id("eth1")]),
        )
        .await;
        assert!(waited.is_ok(), "cover waited past the refresh timeout");
    }

    #[tokio::test]
    async fn a_provider_that_panics_ends_its_refresh_not_the_next() {
        struct Panics(AtomicUsize);
        impl CloudProvider for Panics {
            fn name(&self) -> &str {
                "panics"
            }
            fn node_attributes(&self) -> Attributes {
                Attributes::new()
            }
            fn refresh<'a>(&'a self, _: &'a [DeviceIdentifiers]) -> BoxFuture<'a, ()> {
                let n = self.0.fetch_add(1, Ordering::SeqCst);
                Box::pin(async move {
                    if n == 0 {
                        panic!("provider bug");
                    }
                })
            }
        }
        let r = ProviderRefresh::new(
            Arc::new(Panics(AtomicUsize::new(0))),
            DEFAULT_REFRESH_TIMEOUT,
        );
        let mut ended = r.watch();
        r.request(vec![id("eth1")]);
        ended.changed().await.unwrap();
        assert!(ended.borrow_and_update().panicked);
        r.request(vec![id("eth1")]);
        ended.changed().await.unwrap();
        let second = ended.borrow_and_update().clone();
        assert!(!second.panicked && second.count == 2, "{second:?}");
    }

    #[test]
    fn outside_a_runtime_a_request_is_refused_not_a_panic() {
        let r = ProviderRefresh::new(Arc::new(dranet_core::NoCloud), DEFAULT_REFRESH_TIMEOUT);
        r.request(vec![id("eth1")]);
        assert!(!r.queue().running);
    }
}
