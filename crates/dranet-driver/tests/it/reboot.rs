//! A node reboot as the driver lives it: the kubelet plugin's checkpoint (on the kubelet's disk)
//! is kept, the driver's state directory (a tmpfs) is emptied, and the kernel has a new boot ID.
//! The kubelet answers its own prepare retries from the checkpoint without calling the driver,
//! so the driver must know its claims from the checkpoint alone, check them against the node as
//! it is now, and fail a pod loudly rather than start it without its devices.
//!
//! What a claim asked the profile provider for outlives the reboot in the same checkpoint: the
//! unprepare after it still releases it, and a release owed before it is still retried.
//!
//! The kubelet and the API server are the kubelet plugin's fakes, spoken to over the plugin's
//! real sockets, and the profile provider is the webhook against dranet-cloud's fake server; the
//! NRI hooks are called directly. The netdev case moves a real veth between network namespaces
//! (root only; it says why it skips otherwise).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use dranet_cloud::fake::{FakeServer, Reply};
use dranet_cloud::webhook::Webhook;
use dranet_core::{Discover, Inventory, Netdev, NetworkDevice, ProfileProvider};
use dranet_driver::{NetworkDriver, Rescan};
use dranet_kubeletplugin::fake::{FakeApiServer, FakeKubelet, allocated_claim};
use dranet_kubeletplugin::k8s_openapi::api::resource::v1::{
    DeviceAllocationConfiguration, OpaqueDeviceConfiguration, ResourceClaimConsumerReference,
};
use dranet_kubeletplugin::k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use dranet_kubeletplugin::{
    ClaimRef, Driver, KubeletPlugin, LoadOutcome, Prepared, PreparedClaim, PreparedDevice,
};
use dranet_nri::{NriPlugin, PodSandbox};
use dranet_podnet::PodNet;
use dranet_podnet::netns::Netns;
use dranet_podnet::rdma::NetnsMode;

use crate::support;

const NODE: &str = "node-a";

/// What survives a reboot (the kubelet's disk, the API server) and what the node looks like.
struct Node {
    _fixture: tempfile::TempDir,
    sysfs: PathBuf,
    kubelet_root: tempfile::TempDir,
    state: tempfile::TempDir,
    api: FakeApiServer,
    /// Devices the scan adds (veths on a test's host namespace).
    extra: Vec<NetworkDevice>,
    /// Devices the scan leaves out (gone after the reboot).
    gone: Arc<Mutex<Vec<String>>>,
    /// Added to every char device's minor number: another boot numbers them differently.
    minor_shift: Arc<AtomicU32>,
    /// The host namespace the driver runs in (the test's own, or one it made).
    host: Option<PathBuf>,
}

/// One boot of the node: a driver and its kubelet plugin, and the kubelet talking to it.
struct Boot {
    driver: Arc<NetworkDriver>,
    plugin: KubeletPlugin,
    kubelet: FakeKubelet,
}

impl Node {
    async fn new(host: Option<PathBuf>, extra: Vec<NetworkDevice>) -> Node {
        let fixture = tempfile::tempdir().unwrap();
        dranet_discovery::fixture::azure_nd_gb300_v6(fixture.path()).unwrap();
        let api = FakeApiServer::start().await.unwrap();
        api.add_node(NODE);
        Node {
            sysfs: fixture.path().join("sys"),
            _fixture: fixture,
            kubelet_root: tempfile::tempdir().unwrap(),
            state: tempfile::tempdir().unwrap(),
            api,
            extra,
            gone: Arc::default(),
            minor_shift: Arc::default(),
            host,
        }
    }

    fn rescan(&self) -> Rescan {
        let (sysfs, extra) = (self.sysfs.clone(), self.extra.clone());
        let (gone, shift) = (self.gone.clone(), self.minor_shift.clone());
        Arc::new(move || {
            let mut inv: Inventory = dranet_discovery::host(&sysfs, Default::default())
                .discover()
                .map_err(|e| e.to_string())?;
            inv.devices.extend(extra.clone());
            let gone = gone.lock().unwrap().clone();
            inv.devices.retain(|d| !gone.contains(&d.name));
            let shift = shift.load(Ordering::SeqCst);
            for d in &mut inv.devices {
                for c in d.rdma.iter_mut().flat_map(|r| r.char_devices.iter_mut()) {
                    c.minor += shift;
                }
            }
            Ok(inv)
        })
    }

    /// Starts the driver and the plugin as the daemon does, in boot `boot_id`.
    async fn boot(&self, boot_id: &str) -> Boot {
        self.boot_with(boot_id, None).await
    }

    /// [`Node::boot`] with a profile provider.
    async fn boot_with(&self, boot_id: &str, profiles: Option<Arc<dyn ProfileProvider>>) -> Boot {
        let host = match &self.host {
            Some(p) => Netns::open(p).unwrap(),
            None => Netns::current().unwrap(),
        };
        let podnet = PodNet::new(host, self.state.path().join("podnet")).unwrap();
        let mut builder =
            NetworkDriver::builder(podnet, self.state.path().join("driver"), self.rescan())
                .rdma_mode(NetnsMode::Shared)
                .boot_id(Some(boot_id.into()));
        if let Some(p) = profiles {
            builder = builder.profiles(p);
        }
        let driver = Arc::new(builder.build().unwrap());
        let plugin = KubeletPlugin::builder(driver.clone(), self.api.client().unwrap())
            .driver_name("dra.net")
            .node_name(NODE)
            .kubelet_root_dir(self.kubelet_root.path())
            .start()
            .await
            .unwrap();
        let kubelet = FakeKubelet::connect(plugin.registration_socket())
            .await
            .unwrap();
        Boot {
            driver,
            plugin,
            kubelet,
        }
    }

    /// The node goes down: the plugin stops, and the tmpfs state directory is gone.
    async fn reboot(&self, b: Boot) {
        b.plugin.shutdown().await.unwrap();
        drop(b.driver);
        for entry in std::fs::read_dir(self.state.path()).unwrap() {
            std::fs::remove_dir_all(entry.unwrap().path()).unwrap();
        }
    }

    /// A claim of `devices` reserved for pod `pod_uid`, allocated on this node.
    fn claim(&self, name: &str, devices: &[&str], pod_uid: &str) -> ClaimRef {
        self.claim_with(name, devices, pod_uid, None)
    }

    /// [`Node::claim`] with the claim's `dra.net` parameters.
    fn claim_with(
        &self,
        name: &str,
        devices: &[&str],
        pod_uid: &str,
        parameters: Option<serde_json::Value>,
    ) -> ClaimRef {
        let r = ClaimRef {
            namespace: "ml".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        };
        let mut c = allocated_claim(&r, support::claims::nic_results(NODE, devices));
        let allocated = c
            .status
            .as_mut()
            .and_then(|s| s.allocation.as_mut())
            .and_then(|a| a.devices.as_mut());
        if let (Some(a), Some(parameters)) = (allocated, parameters) {
            a.config = Some(vec![DeviceAllocationConfiguration {
                source: "FromClaim".into(),
                requests: None,
                opaque: Some(OpaqueDeviceConfiguration {
                    driver: "dra.net".into(),
                    parameters: RawExtension(parameters),
                }),
            }]);
        }
        if let Some(s) = c.status.as_mut() {
            s.reserved_for = Some(vec![ResourceClaimConsumerReference {
                api_group: None,
                resource: "pods".into(),
                name: format!("pod-{pod_uid}"),
                uid: pod_uid.into(),
            }]);
        }
        self.api.put_claim(c);
        r
    }
}

impl Boot {
    async fn prepare(&self, r: &ClaimRef) {
        let resp = self.kubelet.prepare(std::slice::from_ref(r)).await.unwrap();
        let errors: Vec<&str> = resp.claims.values().map(|c| c.error.as_str()).collect();
        assert!(errors.iter().all(|e| e.is_empty()), "{errors:?}");
    }
}

fn sandbox(id: &str, pod_uid: &str, netns: Option<&Path>) -> PodSandbox {
    PodSandbox {
        id: id.into(),
        uid: pod_uid.into(),
        namespace: "ml".into(),
        name: format!("pod-{pod_uid}"),
        namespaces: netns
            .map(|p| dranet_nri::Namespace {
                kind: "network".into(),
                path: p.display().to_string(),
            })
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

fn devs(d: &NetworkDriver, pod_uid: &str) -> Vec<String> {
    d.container_devices(pod_uid)
        .iter()
        .map(|c| format!("{} {}:{}", c.path, c.major, c.minor))
        .collect()
}

const MLX0: &str = "pci-0101-00-00-0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reboot_the_pod_gets_its_rdma_devices_as_the_node_numbers_them_now() {
    let node = Node::new(None, Vec::new()).await;
    let b = node.boot("boot-1").await;
    let r = node.claim("rdma", &[MLX0], "pa");
    b.prepare(&r).await;
    b.driver
        .run_pod_sandbox(&sandbox("s1", "pa", None))
        .await
        .unwrap();
    let before = devs(&b.driver, "pa");
    assert_eq!(before.len(), 4, "{before:?}");
    assert!(before.contains(&"/dev/infiniband/uverbs0 231:192".to_string()));

    node.reboot(b).await;
    // The new boot numbers the char devices differently.
    node.minor_shift.store(1000, Ordering::SeqCst);
    let b = node.boot("boot-2").await;
    // The kubelet's retry is answered from the checkpoint; the pod's new sandbox gets the
    // devices, with this boot's numbers.
    b.prepare(&r).await;
    b.driver
        .run_pod_sandbox(&sandbox("s2", "pa", None))
        .await
        .unwrap();
    let after = devs(&b.driver, "pa");
    assert_eq!(after.len(), 4, "{after:?}");
    assert!(
        after.contains(&"/dev/infiniband/uverbs0 231:1192".to_string()),
        "{after:?}"
    );
    // A restart within the boot keeps the record as it stands.
    b.plugin.shutdown().await.unwrap();
    drop(b.driver);
    let b = node.boot("boot-2").await;
    assert_eq!(devs(&b.driver, "pa"), after);
    // Unprepare forgets it for good.
    b.kubelet.unprepare(std::slice::from_ref(&r)).await.unwrap();
    assert!(devs(&b.driver, "pa").is_empty());
    b.plugin.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_gone_after_a_reboot_fails_its_pod_until_it_is_back() {
    let node = Node::new(None, Vec::new()).await;
    let b = node.boot("boot-1").await;
    let r = node.claim("rdma", &[MLX0], "pa");
    b.prepare(&r).await;
    node.reboot(b).await;
    node.gone.lock().unwrap().push(MLX0.into());
    let b = node.boot("boot-2").await;
    b.prepare(&r).await;
    let e = b
        .driver
        .run_pod_sandbox(&sandbox("s2", "pa", None))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("claim ml/rdma")
            && e.contains(MLX0)
            && e.contains("before the node restarted")
            && e.contains("not on the node now"),
        "{e}"
    );
    assert!(devs(&b.driver, "pa").is_empty());
    // The device comes back (its driver loaded late): the next sandbox gets it.
    node.gone.lock().unwrap().clear();
    b.driver
        .run_pod_sandbox(&sandbox("s3", "pa", None))
        .await
        .unwrap();
    assert_eq!(devs(&b.driver, "pa").len(), 4);
    b.plugin.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_record_fails_its_pods_and_the_driver_starts() {
    let node = Node::new(None, Vec::new()).await;
    let b = node.boot("boot-1").await;
    let claim = |uid: &str, state: serde_json::Value| PreparedClaim {
        claim_ref: ClaimRef {
            namespace: "ml".into(),
            name: format!("c-{uid}"),
            uid: uid.into(),
        },
        prepared: Prepared {
            devices: vec![PreparedDevice {
                requests: vec!["nic".into()],
                pool: NODE.into(),
                device: MLX0.into(),
                cdi_device_ids: vec![],
                share_id: None,
                metadata: None,
            }],
            state: Some(state),
        },
    };
    let pods = serde_json::json!([{"name": "pod-pa", "uid": "pa"}]);
    let huge = "x".repeat(dranet_driver::record::MAX_RECORD_BYTES);
    b.driver
        .restore_prepared(vec![
            claim("u1", serde_json::json!({"version": 9, "pods": pods})),
            claim(
                "u2",
                serde_json::json!({"version": 1, "pods": [{"name": "pod-pb", "uid": "pb"}],
                                   "huge": huge}),
            ),
        ])
        .await;
    for (pod, uid, why) in [
        ("pa", "u1", "record version 9"),
        ("pb", "u2", "more than the 1048576"),
    ] {
        let e = b
            .driver
            .run_pod_sandbox(&sandbox(&format!("s-{pod}"), pod, None))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("claim ml/c-{uid}")) && e.contains(why),
            "{e}"
        );
        // Kept for an operator.
        let kept = node
            .state
            .path()
            .join("driver/quarantine")
            .join(format!("{uid}.json"));
        assert!(kept.is_file(), "{kept:?}");
    }
    // Unprepared: forgotten, and the pod's next sandbox starts (without the claim).
    b.driver.unprepare_claim("u1").await.unwrap();
    b.driver
        .run_pod_sandbox(&sandbox("s-pa2", "pa", None))
        .await
        .unwrap();
    b.plugin.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reboot_the_pod_gets_its_netdev() {
    if !support::can_run("after_a_reboot_the_pod_gets_its_netdev") {
        return;
    }
    let (h, p) = (support::Ns::new("rb-h"), support::Ns::new("rb-p"));
    h.ip(&["link", "add", "rb0", "type", "veth", "peer", "name", "rb0p"]);
    h.ip(&["link", "set", "rb0", "up"]);
    let veth = NetworkDevice {
        name: "rb0".into(),
        pci: None,
        netdev: Some(Netdev {
            name: "rb0".into(),
            ..Default::default()
        }),
        rdma: None,
    };
    let node = Node::new(Some(h.path()), vec![veth]).await;
    let in_pod = || p.try_ip(&["link", "show", "rb0"]);
    let b = node.boot("boot-1").await;
    let r = node.claim("nic", &["rb0"], "pa");
    b.prepare(&r).await;
    let s1 = sandbox("s1", "pa", Some(&p.path()));
    b.driver.run_pod_sandbox(&s1).await.unwrap();
    assert!(in_pod());
    // The reboot deletes the pod's namespace: the veth is back on the host.
    b.driver.stop_pod_sandbox(&s1).await.unwrap();
    assert!(!in_pod());
    node.reboot(b).await;

    let b = node.boot("boot-2").await;
    b.prepare(&r).await;
    let s2 = sandbox("s2", "pa", Some(&p.path()));
    b.driver.run_pod_sandbox(&s2).await.unwrap();
    assert!(in_pod(), "the pod started without its NIC");
    b.driver.stop_pod_sandbox(&s2).await.unwrap();
    assert!(!in_pod());
    b.plugin.shutdown().await.unwrap();
}

/// The operator's webhook as the profile provider: it leases `10.200.200.200/24` and refuses the
/// first `refuse` releases (500), as an IPAM that is down for a while.
async fn ipam_webhook(refuse: usize) -> FakeServer {
    let releases = AtomicU32::new(0);
    FakeServer::start(move |req, _| match req.path() {
        "/health" => Reply::Json(
            200,
            r#"{"cloudProvider":false,"profileProvider":true}"#.into(),
        ),
        "/GetProfileConfig" => Reply::Json(
            200,
            r#"{"interface":{"addresses":["10.200.200.200/24"]}}"#.into(),
        ),
        "/ReleaseProfileConfig" => {
            if (releases.fetch_add(1, Ordering::SeqCst) as usize) < refuse {
                Reply::Json(500, r#"{"error":"IPAM unavailable"}"#.into())
            } else {
                Reply::Json(200, "{}".into())
            }
        }
        _ => Reply::Json(404, "{}".into()),
    })
    .await
    .unwrap()
}

/// The webhook as the daemon connects to it at each start.
async fn connect(webhook: &FakeServer) -> Arc<dyn ProfileProvider> {
    let w = Webhook::connect(
        &webhook.endpoint,
        None,
        std::time::Duration::from_secs(5),
        dranet_cloud::RetryPolicy::default(),
    )
    .await
    .unwrap();
    Arc::new(w)
}

/// The JSON bodies the webhook got at `path`, in order.
fn bodies(webhook: &FakeServer, path: &str) -> Vec<serde_json::Value> {
    webhook
        .seen()
        .iter()
        .filter(|r| r.path() == path)
        .map(|r| r.json())
        .collect()
}

/// A NIC the scan reports whose interface is not on this host: prepare takes it (its link is
/// checked at attach), and these tests end before a pod starts.
fn absent_nic(name: &str) -> NetworkDevice {
    NetworkDevice {
        name: name.into(),
        pci: None,
        netdev: Some(Netdev {
            name: name.into(),
            ..Default::default()
        }),
        rdma: None,
    }
}

/// What the kubelet's disk holds: the plugin's checkpoint, read as a restarted plugin reads it.
fn checkpoint(node: &Node) -> dranet_kubeletplugin::checkpoint::Contents {
    let path = node.kubelet_root.path().join("plugins/dra.net/checkpoint");
    dranet_kubeletplugin::checkpoint::decode(&std::fs::read(path).unwrap()).unwrap()
}

async fn unprepare(b: &Boot, r: &ClaimRef) {
    let resp = b.kubelet.unprepare(std::slice::from_ref(r)).await.unwrap();
    let errors: Vec<&str> = resp.claims.values().map(|c| c.error.as_str()).collect();
    assert!(errors.iter().all(|e| e.is_empty()), "{errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reboot_unprepare_still_releases_the_profile_to_the_webhook() {
    let node = Node::new(None, vec![absent_nic("rbp0")]).await;
    let webhook = ipam_webhook(1).await;
    let b = node
        .boot_with("boot-1", Some(connect(&webhook).await))
        .await;
    let r = node.claim_with(
        "ipam",
        &["rbp0"],
        "pa",
        Some(serde_json::json!({"profile": "python-profile"})),
    );
    b.prepare(&r).await;
    let asked = bodies(&webhook, "/GetProfileConfig");
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["claim_uid"], "uid-ipam");
    assert_eq!(
        b.driver.claims_of_pod("pa")[0].devices[0]
            .config
            .interface
            .addresses,
        ["10.200.200.200/24"]
    );
    node.reboot(b).await;
    assert!(
        std::fs::read_dir(node.state.path())
            .unwrap()
            .next()
            .is_none(),
        "the state directory is emptied by the reboot"
    );

    // The pod is deleted after the reboot: the kubelet unprepares from its checkpoint, and the
    // webhook is asked to release exactly what it leased. It refuses this time: the unprepare
    // still succeeds (the pod may go) and the release is owed.
    let b = node
        .boot_with("boot-2", Some(connect(&webhook).await))
        .await;
    unprepare(&b, &r).await;
    assert_eq!(bodies(&webhook, "/ReleaseProfileConfig"), asked);
    assert!(b.driver.claims_of_pod("pa").is_empty());
    assert!(checkpoint(&node).records.contains_key("profiles/uid-ipam"));

    // What is owed outlives another reboot, and is released once the webhook answers.
    node.reboot(b).await;
    let b = node
        .boot_with("boot-3", Some(connect(&webhook).await))
        .await;
    assert_eq!(b.driver.retry_profile_releases().await, 0);
    assert_eq!(
        bodies(&webhook, "/ReleaseProfileConfig"),
        [asked[0].clone(), asked[0].clone()]
    );
    let left = checkpoint(&node);
    assert!(left.records.is_empty(), "{:?}", left.records);
    assert!(left.claims.is_empty());
    b.plugin.shutdown().await.unwrap();
}

/// The checkpoint of claim `ml/ipam` (a profile on `rbp0`) as the plugin wrote it before
/// driver records existed, byte for byte.
const CHECKPOINT_BEFORE_RECORDS: &str = "dranet-kubeletplugin-checkpoint v1 crc32=56c39532 len=504\n\
    {\"claims\":{\"uid-ipam\":{\"claim\":{\"namespace\":\"ml\",\"name\":\"ipam\",\
    \"uid\":\"uid-ipam\"},\"phase\":\"prepared\",\
    \"prepared\":{\"devices\":[{\"requests\":[\"nic\"],\"pool\":\"node-a\",\
    \"device\":\"rbp0\",\"cdi_device_ids\":[]}],\"state\":{\"version\":1,\
    \"bootId\":\"boot-1\",\"namespace\":\"ml\",\"name\":\"ipam\",\"uid\":\"uid-ipam\",\
    \"pods\":[{\"name\":\"pod-pa\",\"uid\":\"pa\"}],\
    \"configs\":[{\"profile\":\"python-profile\",\
    \"interface\":{\"addresses\":[\"10.200.200.200/24\"]}}],\
    \"devices\":[{\"request\":\"nic\",\"pool\":\"node-a\",\"device\":\"rbp0\",\
    \"netdev\":\"rbp0\",\"config\":0}]}}}}}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_versions_checkpoint_and_profile_record_load_and_the_profile_is_released() {
    let node = Node::new(None, vec![absent_nic("rbp0")]).await;
    // An upgrade within the boot: the earlier version's checkpoint on the kubelet's disk, and
    // its profile record in the state directory.
    let plugin_dir = node.kubelet_root.path().join("plugins/dra.net");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    std::fs::write(plugin_dir.join("checkpoint"), CHECKPOINT_BEFORE_RECORDS).unwrap();
    let legacy = node.state.path().join("driver/profiles/uid-ipam.json");
    std::fs::create_dir_all(legacy.parent().unwrap()).unwrap();
    let record = serde_json::json!({
        "version": 1, "namespace": "ml", "name": "ipam", "uid": "uid-ipam", "releasing": false,
        "leases": [{"device": "rbp0", "request": {"device": {"name": "rbp0"},
            "claimUid": "uid-ipam", "config": {"profile": "python-profile"}}}],
    });
    std::fs::write(&legacy, record.to_string()).unwrap();

    let webhook = ipam_webhook(0).await;
    let b = node
        .boot_with("boot-1", Some(connect(&webhook).await))
        .await;
    assert_eq!(b.plugin.checkpoint_outcome(), &LoadOutcome::Loaded(1));
    assert_eq!(
        b.driver.claims_of_pod("pa")[0].devices[0]
            .config
            .interface
            .addresses,
        ["10.200.200.200/24"],
        "the claim's record reads"
    );
    assert!(!legacy.exists(), "moved into the checkpoint");
    assert!(checkpoint(&node).records.contains_key("profiles/uid-ipam"));

    let r = ClaimRef {
        namespace: "ml".into(),
        name: "ipam".into(),
        uid: "uid-ipam".into(),
    };
    unprepare(&b, &r).await;
    let released = bodies(&webhook, "/ReleaseProfileConfig");
    assert_eq!(released.len(), 1, "{released:?}");
    assert_eq!(released[0]["claim_uid"], "uid-ipam");
    assert_eq!(released[0]["device"]["name"], "rbp0");
    assert_eq!(released[0]["config"]["profile"], "python-profile");
    let left = checkpoint(&node);
    assert!(left.records.is_empty() && left.claims.is_empty());
    b.plugin.shutdown().await.unwrap();
}
