//! Shared helpers of the integration tests: a recording driver, claim builders, a started plugin.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dranet_kubeletplugin::fake::{FakeApiServer, FakeKubelet};
use dranet_kubeletplugin::{
    ClaimRef, ClaimToPrepare, ClaimToUnprepare, Driver, HandlerError, KubeClient, KubeletPlugin,
    KubeletPluginBuilder, PrepareState, Prepared, PreparedDevice,
};
use k8s_openapi::api::resource::v1::{
    Device, DeviceRequestAllocationResult, ResourceClaim, ResourcePool, ResourceSlice,
    ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub const DRIVER: &str = "net.test.example.com";
pub const NODE: &str = "node-a";

#[derive(Default)]
pub struct Record {
    pub prepares: Vec<ClaimToPrepare>,
    pub unprepares: Vec<(ClaimRef, PrepareState)>,
    pub fail_prepare: HashSet<String>,
    pub fail_unprepare: HashSet<String>,
    /// Claim names whose prepare panics.
    pub panic_prepare: HashSet<String>,
    pub delay: Duration,
    in_flight: HashMap<String, usize>,
    /// Set when two calls for the same claim UID overlapped.
    pub overlap: bool,
    total_in_flight: usize,
    /// The most driver calls (any claims) that ran at the same time.
    pub max_parallel: usize,
}

/// A driver that records every call and answers with one CDI device per allocated device.
#[derive(Clone, Default)]
pub struct RecordingDriver(pub Arc<Mutex<Record>>);

impl RecordingDriver {
    pub fn rec(&self) -> std::sync::MutexGuard<'_, Record> {
        self.0.lock().unwrap()
    }

    fn enter(&self, uid: &str) -> Duration {
        let mut r = self.rec();
        let n = r.in_flight.entry(uid.to_string()).or_default();
        *n += 1;
        if *n > 1 {
            r.overlap = true;
        }
        r.total_in_flight += 1;
        r.max_parallel = r.max_parallel.max(r.total_in_flight);
        r.delay
    }

    fn leave(&self, uid: &str) {
        let mut r = self.rec();
        if let Some(n) = r.in_flight.get_mut(uid) {
            *n -= 1;
        }
        r.total_in_flight -= 1;
    }
}

pub fn prepared_for(results: &[DeviceRequestAllocationResult]) -> Prepared {
    Prepared {
        devices: results
            .iter()
            .map(|r| PreparedDevice {
                requests: vec![r.request.clone()],
                pool: r.pool.clone(),
                device: r.device.clone(),
                cdi_device_ids: vec![format!("{DRIVER}/net={}", r.device)],
                share_id: r.share_id.clone(),
                metadata: None,
            })
            .collect(),
        state: Some(
            serde_json::json!({ "moved": results.iter().map(|r| r.device.clone()).collect::<Vec<_>>() }),
        ),
    }
}

impl Driver for RecordingDriver {
    async fn prepare(&self, claim: ClaimToPrepare) -> Result<Prepared, HandlerError> {
        let uid = claim.claim_ref.uid.clone();
        let delay = self.enter(&uid);
        tokio::time::sleep(delay).await;
        if self.rec().panic_prepare.contains(&claim.claim_ref.name) {
            self.leave(&uid);
            panic!("driver bug while preparing {}", claim.claim_ref.name);
        }
        let fail = self.rec().fail_prepare.contains(&claim.claim_ref.name);
        let out = prepared_for(&claim.results);
        self.rec().prepares.push(claim);
        self.leave(&uid);
        if fail {
            return Err("netdev eth9 is busy".into());
        }
        Ok(out)
    }

    async fn unprepare(&self, claim: ClaimToUnprepare) -> Result<(), HandlerError> {
        let uid = claim.claim_ref.uid.clone();
        let delay = self.enter(&uid);
        tokio::time::sleep(delay).await;
        let fail = self.rec().fail_unprepare.contains(&claim.claim_ref.name);
        self.rec().unprepares.push((claim.claim_ref, claim.state));
        self.leave(&uid);
        if fail {
            return Err("cannot move netdev back".into());
        }
        Ok(())
    }
}

pub fn claim_ref(name: &str) -> ClaimRef {
    ClaimRef {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

pub fn result(driver: &str, device: &str, request: &str) -> DeviceRequestAllocationResult {
    DeviceRequestAllocationResult {
        driver: driver.into(),
        pool: NODE.into(),
        device: device.into(),
        request: request.into(),
        ..Default::default()
    }
}

/// An allocated claim named `name` (UID `uid-<name>`) with these results.
pub fn claim(name: &str, results: Vec<DeviceRequestAllocationResult>) -> ResourceClaim {
    dranet_kubeletplugin::fake::allocated_claim(&claim_ref(name), results)
}

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub api: FakeApiServer,
    pub driver: RecordingDriver,
    pub plugin: Option<KubeletPlugin>,
    pub kubelet: FakeKubelet,
}

/// A plugin's builder as the tests make it: `driver` as [`DRIVER`] on [`NODE`], talking to
/// `api`, the kubelet's root directory `root`.
pub fn builder_for(
    driver: RecordingDriver,
    api: &FakeApiServer,
    root: &std::path::Path,
) -> KubeletPluginBuilder<RecordingDriver, KubeClient> {
    KubeletPlugin::builder(driver, api.client().unwrap().field_manager(DRIVER))
        .driver_name(DRIVER)
        .node_name(NODE)
        .kubelet_root_dir(root)
}

impl Harness {
    pub async fn start() -> Self {
        Self::start_with(|b| b).await
    }

    pub async fn start_with(
        f: impl FnOnce(
            KubeletPluginBuilder<RecordingDriver, KubeClient>,
        ) -> KubeletPluginBuilder<RecordingDriver, KubeClient>,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let api = FakeApiServer::start().await.unwrap();
        api.add_node(NODE);
        let driver = RecordingDriver::default();
        let builder = builder_for(driver.clone(), &api, dir.path());
        let plugin = f(builder).start().await.unwrap();
        let kubelet = FakeKubelet::connect(plugin.registration_socket())
            .await
            .unwrap();
        Self {
            dir,
            api,
            driver,
            plugin: Some(plugin),
            kubelet,
        }
    }

    pub fn plugin(&self) -> &KubeletPlugin {
        self.plugin.as_ref().unwrap()
    }
}

/// Polls `f` every 20 ms until it is true or `secs` pass.
pub async fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

/// `n` devices named `eth0`, `eth1`, ...
pub fn devices(n: usize) -> Vec<Device> {
    (0..n)
        .map(|i| Device {
            name: format!("eth{i}"),
            ..Default::default()
        })
        .collect()
}

/// A one-slice pool of `driver` on `node`, as another writer would create it.
pub fn slice(name: &str, driver: &str, node: &str) -> ResourceSlice {
    ResourceSlice {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: ResourceSliceSpec {
            driver: driver.into(),
            node_name: Some(node.into()),
            pool: ResourcePool {
                name: node.into(),
                generation: 1,
                resource_slice_count: 1,
            },
            ..Default::default()
        },
    }
}
