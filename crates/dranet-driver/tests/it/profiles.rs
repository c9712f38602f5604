//! A claim's named profile: resolved by the profile provider at prepare (its configuration under
//! the claim's), released at unprepare, and never leaked — not by a crash between prepare and
//! unprepare, nor in the middle of a prepare, nor by a provider that refuses a release for a
//! while, nor by a checkpoint that cannot be written. The records are in the kubelet plugin's
//! checkpoint, opened here as the plugin opens it; a reboot is in `reboot.rs`. The provider is a
//! fake in memory (the webhook itself is tested in dranet-cloud and on a real node in
//! `tests/k8s/webhook.rs`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dranet_core::{
    Attributes, BoxFuture, CloudProvider, DeviceIdentifiers, Discover, NetworkConfig, ProfileError,
    ProfileProvider, ProfileRequest, RuntimeHook,
};
use dranet_driver::NetworkDriver;
use dranet_kubeletplugin::checkpoint::{Checkpoint, decode};
use dranet_kubeletplugin::{CheckpointPolicy, ClaimToPrepare};
use serde_json::json;

use crate::support;

/// A fake profile provider: answers `answer` for every profile (or hangs, or fails), records what
/// it was asked and released, and refuses the first `refuse_releases` releases.
#[derive(Default)]
struct FakeProfiles {
    answer: Mutex<serde_json::Value>,
    hang: bool,
    /// Hangs only for this device.
    hang_device: Option<String>,
    fail_device: Option<String>,
    refuse_releases: Mutex<usize>,
    asked: Mutex<Vec<ProfileRequest>>,
    released: Mutex<Vec<ProfileRequest>>,
    /// Serves runtime hooks: this one for every device.
    hook: Option<RuntimeHook>,
    hooks_asked: Mutex<Vec<ProfileRequest>>,
}

impl FakeProfiles {
    fn answering(v: serde_json::Value) -> Self {
        Self {
            answer: Mutex::new(v),
            ..Self::default()
        }
    }

    fn asked(&self) -> Vec<ProfileRequest> {
        self.asked.lock().unwrap().clone()
    }

    fn released(&self) -> Vec<ProfileRequest> {
        self.released.lock().unwrap().clone()
    }
}

fn refused(what: &str) -> ProfileError {
    ProfileError::Provider {
        provider: "fake".into(),
        source: what.into(),
    }
}

impl ProfileProvider for FakeProfiles {
    fn name(&self) -> &str {
        "fake"
    }

    fn get_profile_config<'a>(
        &'a self,
        req: &'a ProfileRequest,
    ) -> BoxFuture<'a, Result<NetworkConfig, ProfileError>> {
        Box::pin(async move {
            self.asked.lock().unwrap().push(req.clone());
            if self.hang || self.hang_device.as_deref() == req.device.name.as_deref() {
                std::future::pending::<()>().await;
            }
            if self.fail_device.as_deref() == req.device.name.as_deref() {
                return Err(refused("IPAM range exhausted"));
            }
            let v = self.answer.lock().unwrap().clone();
            serde_json::from_value(v).map_err(|e| refused(&e.to_string()))
        })
    }

    fn release_profile_config<'a>(
        &'a self,
        req: &'a ProfileRequest,
    ) -> BoxFuture<'a, Result<(), ProfileError>> {
        Box::pin(async move {
            let mut left = self.refuse_releases.lock().unwrap();
            if *left > 0 {
                *left -= 1;
                return Err(refused("IPAM unavailable"));
            }
            self.released.lock().unwrap().push(req.clone());
            Ok(())
        })
    }

    fn serves_runtime_hooks(&self) -> bool {
        self.hook.is_some()
    }

    fn get_runtime_hook<'a>(
        &'a self,
        req: &'a ProfileRequest,
    ) -> BoxFuture<'a, Result<Option<RuntimeHook>, ProfileError>> {
        Box::pin(async move {
            self.hooks_asked.lock().unwrap().push(req.clone());
            if self.hook.as_ref().is_some_and(|h| h.path == "/broken") {
                return Err(refused("hook service down"));
            }
            Ok(self.hook.clone())
        })
    }
}

/// A cloud that sets MTU 9000 and a route on every NIC.
struct FakeCloud;

impl CloudProvider for FakeCloud {
    fn name(&self) -> &str {
        "fake"
    }
    fn node_attributes(&self) -> Attributes {
        Attributes::new()
    }
    fn device_config(&self, _: &DeviceIdentifiers) -> Option<NetworkConfig> {
        serde_json::from_value(json!({"interface": {"mtu": 9000}, "routes": [{"destination": "10.0.0.0/8", "gateway": "10.1.0.1"}]})).ok()
    }
}

struct Node {
    _dir: tempfile::TempDir,
    state: tempfile::TempDir,
    /// The kubelet's disk: the plugin's checkpoint.
    kubelet: tempfile::TempDir,
    sysfs: std::path::PathBuf,
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir().unwrap();
        dranet_discovery::fixture::sriov_node(dir.path(), 2).unwrap();
        Node {
            sysfs: dir.path().join("sys"),
            _dir: dir,
            state: tempfile::tempdir().unwrap(),
            kubelet: tempfile::tempdir().unwrap(),
        }
    }

    fn checkpoint_path(&self) -> std::path::PathBuf {
        self.kubelet.path().join("plugins/dra.net/checkpoint")
    }

    /// A driver on this node's state, with `profiles` (as after a restart when called again),
    /// given the checkpoint's records as the kubelet plugin gives them at start.
    async fn driver(&self, profiles: Option<Arc<FakeProfiles>>) -> NetworkDriver {
        let mut b = support::driver_builder(&self.sysfs, self.state.path(), Default::default())
            .cloud(Arc::new(FakeCloud));
        if let Some(p) = profiles {
            b = b.profiles(p);
        }
        let d = b.build().unwrap();
        let (checkpoint, _) =
            Checkpoint::open(self.checkpoint_path(), CheckpointPolicy::Refuse).unwrap();
        d.restore_records(checkpoint.records()).await;
        d
    }

    /// Makes every later checkpoint write fail (a directory where its temporary file goes), or
    /// writable again.
    fn break_checkpoint(&self, broken: bool) {
        let tmp = self.kubelet.path().join("plugins/dra.net/checkpoint.tmp");
        if broken {
            std::fs::create_dir_all(&tmp).unwrap();
        } else {
            std::fs::remove_dir_all(&tmp).unwrap();
        }
    }

    fn device(&self, netdev: &str) -> String {
        dranet_discovery::host(&self.sysfs, Default::default())
            .discover()
            .unwrap()
            .devices
            .into_iter()
            .find(|d| d.netdev.as_ref().is_some_and(|n| n.name == netdev))
            .map(|d| d.name)
            .unwrap()
    }

    /// The keys of the profile records in the checkpoint file, as a restarted plugin reads it.
    fn recorded_profiles(&self) -> Vec<String> {
        let Ok(bytes) = std::fs::read(self.checkpoint_path()) else {
            return Vec::new();
        };
        decode(&bytes)
            .unwrap()
            .records
            .into_keys()
            .filter(|k| k.starts_with("profiles/"))
            .collect()
    }

    /// The profile records in the checkpoint file, by key.
    fn profile_records(&self) -> Vec<serde_json::Value> {
        let bytes = std::fs::read(self.checkpoint_path()).unwrap();
        decode(&bytes).unwrap().records.into_values().collect()
    }
}

fn claim(devices: &[&str], parameters: serde_json::Value) -> ClaimToPrepare {
    claim_named("ipam", devices, parameters)
}

/// Claim `ml/<name>` (UID `uid-<name>`) of pod `pod-p`, its devices requested as `nic0`, `nic1`…
fn claim_named(name: &str, devices: &[&str], parameters: serde_json::Value) -> ClaimToPrepare {
    let requests: Vec<String> = (0..devices.len()).map(|i| format!("nic{i}")).collect();
    let results: Vec<(&str, &str)> = requests
        .iter()
        .zip(devices)
        .map(|(r, d)| (r.as_str(), *d))
        .collect();
    let config = vec![support::claims::opaque("FromClaim", None, parameters)];
    support::claims::claim(name, &["p"], &results, config)
}

/// Claim `ml/ipam` of `vf` naming profile `p`.
fn profile_claim(vf: &str) -> ClaimToPrepare {
    claim(&[vf], json!({"profile": "p"}))
}

/// A provider answering one address for every profile.
fn one_address() -> FakeProfiles {
    FakeProfiles::answering(json!({"interface": {"addresses": ["10.2.0.5/24"]}}))
}

/// The usual scene: a node, its first VF, a provider answering one address, and a driver asking
/// it.
async fn scene() -> (Node, String, Arc<FakeProfiles>, NetworkDriver) {
    scene_with(one_address()).await
}

/// A node, its first VF, and a driver asking `profiles`.
async fn scene_with(profiles: FakeProfiles) -> (Node, String, Arc<FakeProfiles>, NetworkDriver) {
    let node = Node::new();
    let vf = node.device("ens1f0v0");
    let p = Arc::new(profiles);
    let d = node.driver(Some(p.clone())).await;
    (node, vf, p, d)
}

#[tokio::test]
async fn a_profile_is_resolved_under_the_claims_config_and_released_at_unprepare() {
    let (node, vf, p, d) = scene_with(FakeProfiles::answering(
        json!({"interface": {"addresses": ["10.200.200.200/24"], "mtu": 1400}, "routes": [{"destination": "10.0.0.0/8", "gateway": "10.200.200.1"}]}),
    ))
    .await;
    d.prepare_claim(&claim(
        &[&vf],
        json!({"profile": "python-profile", "interface": {"mtu": 1450}}),
    ))
    .await
    .unwrap();
    // Asked once, with the claim's configuration over the cloud's.
    let asked = p.asked();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].claim_uid, "uid-ipam");
    assert_eq!(asked[0].device.name.as_deref(), Some("ens1f0v0"));
    assert!(asked[0].device.mac.is_some());
    assert_eq!(asked[0].config.profile, "python-profile");
    assert_eq!(asked[0].config.interface.mtu, Some(1450));
    // The profile's configuration is under the claim's and the cloud's (upstream's order).
    let got = &d.claims_of_pod("p")[0].devices[0].config;
    assert_eq!(got.interface.addresses, ["10.200.200.200/24"]);
    assert_eq!(got.interface.mtu, Some(1450), "the claim's MTU wins");
    assert_eq!(got.routes.len(), 1);
    assert_eq!(got.routes[0].gateway, "10.1.0.1", "the cloud's route wins");
    assert_eq!(node.recorded_profiles(), ["profiles/uid-ipam"]);
    // Prepared again (a kubelet restart): the provider is not asked twice.
    d.prepare_claim(&claim(
        &[&vf],
        json!({"profile": "python-profile", "interface": {"mtu": 1450}}),
    ))
    .await
    .unwrap();
    assert_eq!(p.asked().len(), 1);
    assert_eq!(
        d.claims_of_pod("p")[0].devices[0]
            .config
            .interface
            .addresses,
        ["10.200.200.200/24"]
    );
    // Unprepare releases what was asked, once; the record goes.
    d.unprepare_claim("uid-ipam").await.unwrap();
    d.unprepare_claim("uid-ipam").await.unwrap();
    assert_eq!(p.released(), asked);
    assert!(node.recorded_profiles().is_empty());
}

#[tokio::test]
async fn a_crash_between_prepare_and_unprepare_does_not_leak_the_profile() {
    let (node, vf, first, d) = scene().await;
    d.prepare_claim(&profile_claim(&vf)).await.unwrap();
    // The daemon dies; the next one unprepares.
    drop(d);
    let second = Arc::new(FakeProfiles::answering(json!({})));
    let d = node.driver(Some(second.clone())).await;
    d.unprepare_claim("uid-ipam").await.unwrap();
    assert_eq!(second.released(), first.asked());
    assert!(second.asked().is_empty());
}

#[tokio::test]
async fn a_crash_while_the_provider_is_asked_does_not_leak_the_profile() {
    let (node, vf, hanging, d) = scene_with(FakeProfiles {
        hang: true,
        ..FakeProfiles::default()
    })
    .await;
    // The daemon dies while the provider holds the request (the future is dropped).
    let r = tokio::time::timeout(
        Duration::from_millis(200),
        d.prepare_claim(&profile_claim(&vf)),
    )
    .await;
    assert!(r.is_err(), "still asking");
    assert_eq!(hanging.asked().len(), 1);
    drop(d);
    let next = Arc::new(FakeProfiles::answering(json!({})));
    node.driver(Some(next.clone()))
        .await
        .unprepare_claim("uid-ipam")
        .await
        .unwrap();
    assert_eq!(next.released(), hanging.asked(), "released from the record");
}

#[tokio::test]
async fn a_release_the_provider_refuses_is_owed_and_retried() {
    let (node, vf, p, d) = scene().await;
    *p.refuse_releases.lock().unwrap() = 2;
    d.prepare_claim(&profile_claim(&vf)).await.unwrap();
    // Unprepare succeeds (the pod may go); the release is owed.
    d.unprepare_claim("uid-ipam").await.unwrap();
    assert!(d.claims_of_pod("p").is_empty());
    assert_eq!(node.recorded_profiles(), ["profiles/uid-ipam"]);
    assert_eq!(d.retry_profile_releases().await, 1, "refused again");
    // After a restart too.
    let d = node.driver(Some(p.clone())).await;
    assert_eq!(d.retry_profile_releases().await, 0);
    assert_eq!(p.released().len(), 1);
    assert!(node.recorded_profiles().is_empty());
}

#[tokio::test]
async fn a_provider_slow_for_one_claim_does_not_hold_up_another() {
    let (node, a, p, d) = scene_with(FakeProfiles {
        hang_device: Some("ens1f0v0".into()),
        ..one_address()
    })
    .await;
    let b = node.device("ens1f0v1");
    let d = Arc::new(d);
    let slow = {
        let d = d.clone();
        let c = claim_named("slow", &[&a], json!({"profile": "p"}));
        tokio::spawn(async move { d.prepare_claim(&c).await })
    };
    // The slow claim is with the provider before the other one starts.
    while p.asked().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let other = claim_named("fast", &[&b], json!({"profile": "p"}));
    tokio::time::timeout(Duration::from_secs(10), d.prepare_claim(&other))
        .await
        .expect("claim fast waited for claim slow's provider")
        .unwrap();
    // Releasing the other claim's profile does not wait either.
    tokio::time::timeout(Duration::from_secs(10), d.unprepare_claim("uid-fast"))
        .await
        .expect("the release waited for claim slow's provider")
        .unwrap();
    assert_eq!(p.released().len(), 1);
    assert!(!slow.is_finished());
    slow.abort();
}

#[tokio::test]
async fn a_failed_profile_releases_what_was_asked_and_fails_the_claim() {
    let (node, a, p, d) = scene_with(FakeProfiles {
        fail_device: Some("ens1f0v1".into()),
        ..one_address()
    })
    .await;
    let b = node.device("ens1f0v1");
    let e = d
        .prepare_claim(&claim(&[&a, &b], json!({"profile": "p"})))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ml/ipam") && e.contains(&b) && e.contains("IPAM range exhausted"),
        "{e}"
    );
    // Both requests went out (the failing one may have allocated before failing): both released.
    assert_eq!(p.asked().len(), 2);
    assert_eq!(p.released(), p.asked());
    assert!(node.recorded_profiles().is_empty());
    assert!(d.claims_of_pod("p").is_empty());
}

#[tokio::test]
async fn a_profile_answer_that_is_not_valid_is_refused_and_released() {
    let (_node, vf, p, d) = scene_with(FakeProfiles::answering(
        json!({"interface": {"addresses": ["not-an-address"]}}),
    ))
    .await;
    let e = d
        .prepare_claim(&profile_claim(&vf))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("interface.addresses[0]"), "{e}");
    assert_eq!(p.released().len(), 1);
}

#[tokio::test]
async fn without_a_profile_provider_a_profile_is_refused() {
    let node = Node::new();
    let vf = node.device("ens1f0v0");
    let e = node
        .driver(None)
        .await
        .prepare_claim(&claim(&[&vf], json!({"profile": "python-profile"})))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("profile \"python-profile\"") && e.contains("no profile provider"),
        "{e}"
    );
    assert!(node.recorded_profiles().is_empty());
}

#[tokio::test]
async fn a_profile_record_that_cannot_be_written_fails_the_prepare_and_nothing_is_asked() {
    let (node, vf, p, d) = scene().await;
    node.break_checkpoint(true);
    let e = d.prepare_claim(&profile_claim(&vf)).await.unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("ml/ipam") && msg.contains("could not record its state"),
        "{msg}"
    );
    // Not recorded, not asked: the provider allocated nothing the node could forget.
    assert!(
        p.asked().is_empty(),
        "asked without a record: {:?}",
        p.asked()
    );
    assert!(d.claims_of_pod("p").is_empty());
    // Once the checkpoint can be written, the kubelet's retry prepares the claim.
    node.break_checkpoint(false);
    d.prepare_claim(&profile_claim(&vf)).await.unwrap();
    assert_eq!(p.asked().len(), 1);
    assert_eq!(node.recorded_profiles(), ["profiles/uid-ipam"]);
}

#[tokio::test]
async fn an_unprepare_whose_record_cannot_be_updated_fails_until_it_can() {
    let (node, vf, p, d) = scene().await;
    d.prepare_claim(&profile_claim(&vf)).await.unwrap();
    node.break_checkpoint(true);
    let e = d.unprepare_claim("uid-ipam").await.unwrap_err().to_string();
    assert!(e.contains("ml/ipam") && e.contains("checkpoint"), "{e}");
    // Nothing sent, nothing forgotten: the kubelet retries the unprepare.
    assert!(p.released().is_empty());
    assert_eq!(d.claims_of_pod("p").len(), 1);
    assert_eq!(node.recorded_profiles(), ["profiles/uid-ipam"]);
    node.break_checkpoint(false);
    d.unprepare_claim("uid-ipam").await.unwrap();
    assert_eq!(p.released(), p.asked());
    assert!(node.recorded_profiles().is_empty());
    assert!(d.claims_of_pod("p").is_empty());
}

#[tokio::test]
async fn a_prepare_refused_after_its_profile_was_resolved_releases_it() {
    let (node, vf, p, d) = scene().await;
    // A share of the NIC (consumable capacity) with the default type, which would move it.
    let mut c = profile_claim(&vf);
    c.results[0].share_id = Some("share-1".into());
    let e = d.prepare_claim(&c).await.unwrap_err().to_string();
    assert!(e.contains("shareID share-1"), "{e}");
    assert_eq!(p.asked().len(), 1);
    assert_eq!(
        p.released(),
        p.asked(),
        "what the provider gave is given back"
    );
    assert!(node.recorded_profiles().is_empty());
}

/// A profile record as a version that kept them in the state directory wrote it.
fn legacy_record(uid: &str, device: &str, releasing: bool) -> serde_json::Value {
    json!({
        "version": 1, "namespace": "ml", "name": uid, "uid": uid, "releasing": releasing,
        "leases": [{"device": device, "request": {
            "device": {"name": "ens1f0v0"}, "claimUid": uid, "config": {"profile": "p"}}}],
    })
}

#[tokio::test]
async fn profile_records_an_earlier_version_left_in_the_state_directory_are_moved_and_released() {
    let node = Node::new();
    let vf = node.device("ens1f0v0");
    // An upgrade within a boot: the earlier version's files are still on the tmpfs, one owed
    // (its claim unprepared, the release refused) and one of a claim still prepared.
    let dir = node.state.path().join("driver/profiles");
    std::fs::create_dir_all(&dir).unwrap();
    for (uid, releasing) in [("uid-owed", true), ("uid-live", false)] {
        let r = legacy_record(uid, &vf, releasing);
        std::fs::write(dir.join(format!("{uid}.json")), r.to_string()).unwrap();
    }
    std::fs::write(dir.join("uid-torn.json"), b"{\"version\":1,").unwrap();
    let p = Arc::new(FakeProfiles::answering(json!({})));
    let d = node.driver(Some(p.clone())).await;
    assert_eq!(
        node.recorded_profiles(),
        ["profiles/uid-live", "profiles/uid-owed"]
    );
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["uid-torn.json"],
        "an unreadable one stays for an operator"
    );
    // The owed one is released by the retry, the other at its claim's unprepare.
    assert_eq!(d.retry_profile_releases().await, 0);
    let released: Vec<String> = p.released().into_iter().map(|r| r.claim_uid).collect();
    assert_eq!(released, ["uid-owed"]);
    d.unprepare_claim("uid-live").await.unwrap();
    let released: Vec<String> = p.released().into_iter().map(|r| r.claim_uid).collect();
    assert_eq!(released, ["uid-owed", "uid-live"]);
    assert!(node.recorded_profiles().is_empty());
    assert!(node.profile_records().is_empty());
}

fn port_hook(path: &str) -> RuntimeHook {
    RuntimeHook {
        path: path.into(),
        args: vec!["--vlan".into(), "7".into()],
        timeout_seconds: 5,
        data: json!({"switch": "leaf-3"}),
    }
}

/// A driver that runs its OCI hook (a CDI directory beside the node's state).
async fn driver_with_hook(node: &Node, profiles: Arc<FakeProfiles>) -> NetworkDriver {
    let cdi = node.state.path().join("cdi");
    let hook = dranet_driver::attach::HookConfig {
        path: "/opt/dranet/bin/dranet".into(),
        socket: node.state.path().join("hook.sock"),
        markers: node.state.path().join("attached"),
        timeout: Duration::from_secs(60),
    };
    let d = support::driver_builder(&node.sysfs, node.state.path(), Default::default())
        .cloud(Arc::new(FakeCloud))
        .profiles(profiles)
        .hook(cdi, hook)
        .unwrap()
        .build()
        .unwrap();
    let (checkpoint, _) =
        Checkpoint::open(node.checkpoint_path(), CheckpointPolicy::Refuse).unwrap();
    d.restore_records(checkpoint.records()).await;
    d
}

#[tokio::test]
async fn runtime_hooks_are_asked_after_the_profile_and_kept_in_the_claims_record() {
    let node = Node::new();
    let vf = node.device("ens1f0v0");
    let p = Arc::new(FakeProfiles {
        hook: Some(port_hook("/opt/fabric/port-up")),
        ..one_address()
    });
    let d = driver_with_hook(&node, p.clone()).await;
    let prepared = d
        .prepare_claim(&claim(
            &[&vf],
            json!({"profile": "p", "interface": {"mtu": 1450}}),
        ))
        .await
        .unwrap();
    // Asked for the device with its final configuration: the profile's address under the
    // claim's MTU.
    let asked = p.hooks_asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].claim_uid, "uid-ipam");
    assert_eq!(asked[0].config.interface.addresses, ["10.2.0.5/24"]);
    assert_eq!(asked[0].config.interface.mtu, Some(1450));
    let rec = &d.claims_of_pod("p")[0];
    assert_eq!(
        rec.devices[0].runtime_hook,
        Some(port_hook("/opt/fabric/port-up"))
    );
    // In the record the checkpoint keeps: a restarted daemon still has it.
    let back = dranet_driver::record::ClaimRecord::from_state(prepared.state.as_ref()).unwrap();
    assert_eq!(
        back.devices[0].runtime_hook,
        Some(port_hook("/opt/fabric/port-up"))
    );
    // The claim's CDI device carries dranet's OCI hook, given the time the pod's hooks may take.
    let specs: Vec<serde_json::Value> = std::fs::read_dir(node.state.path().join("cdi"))
        .unwrap()
        .flatten()
        .map(|e| serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap())
        .collect();
    assert_eq!(specs.len(), 1, "{specs:?}");
    let hook = &specs[0]["devices"][0]["containerEdits"]["hooks"][0];
    assert_eq!(hook["hookName"], "createRuntime", "{hook}");
    // dranet's 60 s, 10 s of margin, and 8 hooks of 30 s.
    assert_eq!(hook["timeout"], 310, "{hook}");
}

#[tokio::test]
async fn a_runtime_hook_this_daemon_cannot_run_or_get_refuses_the_claim_and_releases_its_profile() {
    // Without dranet's OCI hook the provider's could not run: refused, the profile released.
    let (_node, vf, p, d) = scene_with(FakeProfiles {
        hook: Some(port_hook("/opt/fabric/port-up")),
        ..one_address()
    })
    .await;
    let e = d.prepare_claim(&profile_claim(&vf)).await.unwrap_err();
    let msg = e.user_message();
    assert!(
        msg.contains("runs without it (--hook-path is empty"),
        "{msg}"
    );
    assert_eq!(p.released(), p.asked(), "the profile goes back");
    assert!(d.claims_of_pod("p").is_empty());

    // A provider that fails to answer: refused, the profile released.
    let node = Node::new();
    let vf = node.device("ens1f0v0");
    let p = Arc::new(FakeProfiles {
        hook: Some(port_hook("/broken")),
        ..one_address()
    });
    let d = driver_with_hook(&node, p.clone()).await;
    let e = d.prepare_claim(&profile_claim(&vf)).await.unwrap_err();
    let msg = e.user_message();
    assert!(msg.contains("hook service down"), "{msg}");
    assert_eq!(p.released(), p.asked());
}
