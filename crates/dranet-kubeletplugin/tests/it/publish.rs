//! ResourceSlice publishing against the fake API server (real JSON over HTTP, resourceVersions,
//! 409s, watches).

use std::time::Duration;

use crate::common::*;
use dranet_kubeletplugin::Backoff;
use dranet_kubeletplugin::{KubeletPlugin, PublishState};
use k8s_openapi::api::resource::v1::ResourceSlice;

fn fast(
    b: dranet_kubeletplugin::KubeletPluginBuilder<
        RecordingDriver,
        dranet_kubeletplugin::KubeClient,
    >,
) -> dranet_kubeletplugin::KubeletPluginBuilder<RecordingDriver, dranet_kubeletplugin::KubeClient> {
    b.retry_backoff(Backoff {
        initial: Duration::from_millis(20),
        max: Duration::from_millis(200),
    })
    // Long: these tests must prove that watch events, not the resync, repair drift.
    .resync_interval(Duration::from_secs(3600))
}

fn ours(h: &Harness) -> Vec<ResourceSlice> {
    h.api
        .slices()
        .into_iter()
        .filter(|s| s.spec.driver == DRIVER && s.spec.node_name.as_deref() == Some(NODE))
        .collect()
}

fn device_count(h: &Harness) -> usize {
    ours(h)
        .iter()
        .map(|s| s.spec.devices.as_ref().map_or(0, Vec::len))
        .sum()
}

async fn converge(h: &Harness, n: usize, slices: usize) {
    let ok = eventually(10, || {
        let s = ours(h);
        s.len() == slices
            && device_count(h) == n
            && s.iter()
                .all(|x| x.spec.pool.resource_slice_count == slices as i64)
    })
    .await;
    assert!(
        ok,
        "did not converge to {n} devices in {slices} slices: {:#?}",
        ours(h)
            .iter()
            .map(|s| (&s.metadata.name, &s.spec.pool))
            .collect::<Vec<_>>()
    );
    // Let the watch echo of our own writes pass through a sync too.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

#[tokio::test]
async fn fake_apiserver_publishes_a_pool_split_into_slices_owned_by_the_node() {
    let h = Harness::start_with(fast).await;
    let node_uid = "node-uid-00000001";
    h.plugin().publish(devices(300)).unwrap();
    converge(&h, 300, 3).await;
    let mut names: Vec<_> = ours(&h)
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            format!("{NODE}-{DRIVER}-0"),
            format!("{NODE}-{DRIVER}-1"),
            format!("{NODE}-{DRIVER}-2")
        ]
    );
    for s in ours(&h) {
        assert_eq!(s.spec.pool.name, NODE);
        assert_eq!(s.spec.pool.generation, 1);
        assert!(s.spec.devices.as_ref().unwrap().len() <= 128);
        let o = &s.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                o.api_version.as_str(),
                o.kind.as_str(),
                o.name.as_str(),
                o.uid.as_str()
            ),
            ("v1", "Node", NODE, node_uid)
        );
        assert_eq!(o.controller, Some(true));
    }
    assert_eq!(h.api.write_counts().creates, 3);
    assert!(h.api.field_managers().iter().all(|m| m == DRIVER));
}

#[tokio::test]
async fn fake_apiserver_sees_no_write_when_nothing_changed() {
    let h = Harness::start_with(|b| fast(b).resync_interval(Duration::from_millis(50))).await;
    h.plugin().publish(devices(200)).unwrap();
    converge(&h, 200, 2).await;
    let before = h.api.write_counts();
    // Publishing the same devices and many resyncs later: still no write.
    h.plugin().publish(devices(200)).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(h.api.write_counts(), before);
}

#[tokio::test]
async fn fake_apiserver_gets_one_update_for_one_changed_slice_and_deletes_stale_ones() {
    let h = Harness::start_with(fast).await;
    h.plugin().publish(devices(300)).unwrap();
    converge(&h, 300, 3).await;
    let before = h.api.write_counts();
    let mut d = devices(300);
    d[150].all_nodes = Some(false);
    d[150].binds_to_node = Some(true);
    h.plugin().publish(d).unwrap();
    assert!(eventually(10, || h.api.write_counts().updates == before.updates + 1).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = h.api.write_counts();
    assert_eq!(
        (after.creates, after.updates, after.deletes),
        (before.creates, before.updates + 1, before.deletes)
    );
    assert!(
        ours(&h).iter().all(|s| s.spec.pool.generation == 1),
        "a single update keeps the generation"
    );

    // Shrinking: the two slices no longer needed go, the remaining one is rewritten.
    h.plugin().publish(devices(10)).unwrap();
    converge(&h, 10, 1).await;
    assert_eq!(h.api.write_counts().deletes, before.deletes + 2);
    let s = &ours(&h)[0];
    assert_eq!(
        s.metadata.name.as_deref(),
        Some(&*format!("{NODE}-{DRIVER}-0"))
    );
    assert_eq!(s.spec.pool.resource_slice_count, 1);

    // Growing again bumps the generation on every slice.
    h.plugin().publish(devices(129)).unwrap();
    converge(&h, 129, 2).await;
    let gens: Vec<_> = ours(&h).iter().map(|s| s.spec.pool.generation).collect();
    assert!(
        gens.iter().all(|g| *g == gens[0]) && gens[0] >= 2,
        "{gens:?}"
    );
}

#[tokio::test]
async fn fake_apiserver_conflicts_and_outages_are_retried_until_published() {
    let h = Harness::start_with(fast).await;
    h.api.set_down(true);
    h.plugin().publish(devices(5)).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ours(&h).is_empty());
    h.api.set_down(false);
    converge(&h, 5, 1).await;

    // Injected 409s on the next updates.
    h.api.fail_next("PUT", 409, 3);
    let mut d = devices(5);
    d[0].attributes = Some(
        [(
            "model".to_string(),
            k8s_openapi::api::resource::v1::DeviceAttribute {
                string: Some("x".into()),
                ..Default::default()
            },
        )]
        .into(),
    );
    h.plugin().publish(d.clone()).unwrap();
    assert!(
        eventually(10, || ours(&h)[0].spec.devices.as_ref().unwrap()[0]
            .attributes
            .is_some())
        .await
    );

    // A real conflict: another writer changed our slice, so our resourceVersion is stale.
    let mut theirs = ours(&h)[0].clone();
    theirs.spec.devices.as_mut().unwrap()[1].binds_to_node = Some(true);
    h.api.put_slice_externally(theirs);
    // The watch saw it; the publisher restores what the driver wants.
    assert!(
        eventually(10, || ours(&h)[0].spec.devices.as_ref().unwrap()[1]
            .binds_to_node
            .is_none())
        .await
    );
    assert_eq!(ours(&h)[0].spec.devices.as_ref().unwrap(), &d);
}

#[tokio::test]
async fn fake_apiserver_watch_repairs_a_deleted_slice_and_leaves_others_alone() {
    let h = Harness::start_with(fast).await;
    let foreign = slice;
    h.api
        .put_slice_externally(foreign("gpu-slice", "gpu.other.com", NODE));
    h.api
        .put_slice_externally(foreign("other-node-slice", DRIVER, "node-b"));
    h.plugin().publish(devices(130)).unwrap();
    converge(&h, 130, 2).await;
    h.api.delete_slice_externally(&format!("{NODE}-{DRIVER}-1"));
    assert!(
        eventually(10, || ours(&h).len() == 2).await,
        "deleted slice not recreated"
    );
    converge(&h, 130, 2).await;
    let all: Vec<_> = h
        .api
        .slices()
        .into_iter()
        .map(|s| s.metadata.name.unwrap())
        .collect();
    assert!(
        all.contains(&"gpu-slice".to_string()) && all.contains(&"other-node-slice".to_string()),
        "{all:?}"
    );

    // A stray slice of ours with a name we would never use is removed.
    let mut stray = foreign("stray", DRIVER, NODE);
    stray.spec.pool.generation = 99;
    h.api.put_slice_externally(stray);
    assert!(
        eventually(10, || h.api.slices().iter().all(|s| s
            .metadata
            .name
            .as_deref()
            != Some("stray")))
        .await
    );
    converge(&h, 130, 2).await;
    assert!(
        ours(&h).iter().all(|s| s.spec.pool.generation > 99),
        "generation must move past the stray one"
    );
}

#[tokio::test]
async fn fake_apiserver_missing_node_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let api = dranet_kubeletplugin::fake::FakeApiServer::start()
        .await
        .unwrap();
    let plugin = fast(
        KubeletPlugin::builder(
            RecordingDriver::default(),
            api.client().unwrap().field_manager(DRIVER),
        )
        .driver_name(DRIVER)
        .node_name("late-node"),
    )
    .kubelet_root_dir(dir.path())
    .start()
    .await
    .unwrap();
    plugin.publish(devices(1)).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        api.slices().is_empty(),
        "published without an owner reference"
    );
    let uid = api.add_node("late-node");
    assert!(eventually(10, || api.slices().len() == 1).await);
    assert_eq!(
        api.slices()[0].metadata.owner_references.as_ref().unwrap()[0].uid,
        uid
    );
    plugin.shutdown().await.unwrap();
}

#[tokio::test]
async fn fake_apiserver_watch_streams_only_our_slices_from_the_listed_version() {
    use dranet_kubeletplugin::KubeApi;
    use dranet_kubeletplugin::api::SliceEvent;
    use futures::StreamExt;

    let api = dranet_kubeletplugin::fake::FakeApiServer::start()
        .await
        .unwrap();
    let client = api.client().unwrap().field_manager(DRIVER);
    api.put_slice_externally(slice("before", DRIVER, NODE));
    let list = client.list_slices(NODE, DRIVER).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let mut events = client
        .watch_slices(NODE, DRIVER, &list.resource_version)
        .await
        .unwrap();
    api.put_slice_externally(slice("not-ours-driver", "gpu.other.com", NODE));
    api.put_slice_externally(slice("not-ours-node", DRIVER, "node-b"));
    api.put_slice_externally(slice("ours", DRIVER, NODE));
    api.delete_slice_externally("ours");
    let mut got = 0;
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(500), events.next()).await {
        assert!(matches!(ev.unwrap(), SliceEvent::Changed));
        got += 1;
    }
    // Added and deleted "ours"; "before" predates the watch and the others are filtered out.
    assert_eq!(got, 2);

    // Through the real client: a stale update is a 409 the caller can recognise.
    let mut stale = list.items[0].clone();
    api.put_slice_externally(stale.clone());
    stale.spec.pool.generation = 2;
    let err = client.update_slice(&stale).await.unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert!(
        err.to_string().contains("update ResourceSlice before"),
        "{err}"
    );
    let gone = client.delete_slice("nope", "u", "1").await.unwrap_err();
    assert!(gone.is_not_found(), "{gone}");
}

#[derive(Default)]
struct SyncCount {
    failed: std::sync::atomic::AtomicUsize,
}

impl dranet_kubeletplugin::Metrics for SyncCount {
    fn slice_sync(&self, ok: bool, _writes: usize, _elapsed: Duration) {
        if !ok {
            self.failed
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

#[tokio::test]
async fn fake_apiserver_unpublishable_devices_are_an_error_of_publish() {
    let h = Harness::start_with(fast).await;
    let mut d = devices(3);
    d[2].name = "eth0".into();
    let e = h.plugin().publish(d).unwrap_err();
    assert!(e.to_string().contains("\"eth0\" is listed twice"), "{e}");
    let mut d = devices(1);
    d[0].name = "Eth_0".into();
    let e = h.plugin().publish(d).unwrap_err();
    assert!(
        e.to_string().contains("\"Eth_0\" is not a DNS label"),
        "{e}"
    );
    // Nothing of it was published.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.api.write_counts().total(), 0);
    assert_eq!(h.plugin().publish_state(), PublishState::NotStarted);
    // A corrected list is published.
    h.plugin().publish(devices(3)).unwrap();
    converge(&h, 3, 1).await;
    assert!(
        eventually(5, || h.plugin().publish_state()
            == PublishState::Published {
                devices: 3,
                generation: 1
            })
        .await
    );
}

#[tokio::test]
async fn fake_apiserver_refusing_the_devices_is_not_retried_until_the_next_list() {
    let m = std::sync::Arc::new(SyncCount::default());
    let m2 = std::sync::Arc::clone(&m);
    let h = Harness::start_with(move |b| fast(b).metrics(m2)).await;
    // The server's validation refuses what we send (422 Invalid).
    h.api.fail_next("POST", 422, 1);
    h.plugin().publish(devices(2)).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(m.failed.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(
        matches!(h.plugin().publish_state(), PublishState::Refused { error } if error.contains("422")),
        "{:?}",
        h.plugin().publish_state()
    );
    assert!(ours(&h).is_empty());
    // The driver's next list is tried again.
    h.plugin().publish(devices(2)).unwrap();
    converge(&h, 2, 1).await;
}

#[tokio::test]
async fn fake_apiserver_recreated_node_owns_the_republished_slices() {
    let h = Harness::start_with(fast).await;
    h.plugin().publish(devices(2)).unwrap();
    converge(&h, 2, 1).await;
    let old_uid = ours(&h)[0].metadata.owner_references.as_ref().unwrap()[0]
        .uid
        .clone();
    // The Node is deleted and re-created under the same name; the garbage collector then deletes
    // the slices owned by the old Node.
    let new_uid = h.api.add_node(NODE);
    assert_ne!(old_uid, new_uid);
    h.api.delete_slice_externally(&format!("{NODE}-{DRIVER}-0"));
    assert!(
        eventually(10, || ours(&h).first().is_some_and(|s| s
            .metadata
            .owner_references
            .as_ref()
            .is_some_and(|o| o[0].uid == new_uid)))
        .await,
        "slice not republished under the new Node UID: {:?}",
        ours(&h)
    );
}

#[tokio::test]
async fn fake_apiserver_what_the_server_normalises_is_not_rewritten() {
    let h = Harness::start_with(fast).await;
    h.api.enable_feature_gate("DRADeviceTaints");
    let mut d = devices(3);
    // The server drops the empty map and stamps the taint; neither may look like drift.
    d[0].attributes = Some(Default::default());
    d[1].taints = Some(vec![k8s_openapi::api::resource::v1::DeviceTaint {
        key: "dra.net/maintenance".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    }]);
    h.plugin().publish(d).unwrap();
    converge(&h, 3, 1).await;
    let stored = &ours(&h)[0].spec.devices.clone().unwrap();
    assert!(stored[0].attributes.is_none());
    assert!(stored[1].taints.as_ref().unwrap()[0].time_added.is_some());
    let settled = h.api.write_counts();
    // A rewrite loop (write, watch echo, write again) would show here within a few syncs.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(h.api.write_counts(), settled);
    assert_eq!(settled.total(), 1);
}

/// A v1.34 API server with its default feature gates stores `1024Mi` as `1Gi` and drops device
/// taints and binding conditions. Comparing what we want with what it stores saw a change on
/// every sync: with 300 devices in 3 slices, every sync bumped the generation and rewrote all
/// three, and each write's watch event triggered the next (426 writes in 5 s on a real cluster).
#[tokio::test]
async fn fake_apiserver_server_normalisation_does_not_start_a_rewrite_loop() {
    let h = Harness::start_with(fast).await;
    let mut d = devices(300);
    for dev in &mut d {
        dev.capacity = Some(
            [(
                "memory".to_string(),
                k8s_openapi::api::resource::v1::DeviceCapacity {
                    value: k8s_openapi::apimachinery::pkg::api::resource::Quantity("1024Mi".into()),
                    ..Default::default()
                },
            )]
            .into(),
        );
    }
    d[7].taints = Some(vec![k8s_openapi::api::resource::v1::DeviceTaint {
        key: "dra.net/maintenance".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    }]);
    d[200].binds_to_node = Some(true);
    h.plugin().publish(d.clone()).unwrap();
    converge(&h, 300, 3).await;
    let stored = ours(&h);
    let first = &stored[0].spec.devices.as_ref().unwrap()[0];
    assert_eq!(first.capacity.as_ref().unwrap()["memory"].value.0, "1Gi");
    assert!(stored.iter().all(|s| s.spec.pool.generation == 1));
    // Writes are done a few syncs after the watch echoes them; a loop would keep going.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let settled = h.api.write_counts();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        h.api.write_counts(),
        settled,
        "the publisher keeps rewriting"
    );
    assert_eq!((settled.creates, settled.updates), (3, 0), "{settled:?}");
    assert!(ours(&h).iter().all(|s| s.spec.pool.generation == 1));

    // The same devices published again write nothing; a real change is written once.
    h.plugin().publish(d.clone()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(h.api.write_counts(), settled);
    d[0].capacity
        .as_mut()
        .unwrap()
        .get_mut("memory")
        .unwrap()
        .value
        .0 = "2Gi".into();
    h.plugin().publish(d).unwrap();
    assert!(
        eventually(10, || ours(&h)[0].spec.devices.as_ref().unwrap()[0]
            .capacity
            .as_ref()
            .unwrap()["memory"]
            .value
            .0
            == "2Gi")
        .await
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(h.api.write_counts().updates, 1);
}

/// After a restart nothing is remembered: the stored form is compared, and quantities are
/// compared by value, so a restart writes nothing either.
#[tokio::test]
async fn fake_apiserver_canonical_quantities_are_not_a_change_after_a_restart() {
    let mut h = Harness::start_with(fast).await;
    let mut d = devices(2);
    d[1].capacity = Some(
        [(
            "memory".to_string(),
            k8s_openapi::api::resource::v1::DeviceCapacity {
                value: k8s_openapi::apimachinery::pkg::api::resource::Quantity("2048Mi".into()),
                ..Default::default()
            },
        )]
        .into(),
    );
    h.plugin().publish(d.clone()).unwrap();
    converge(&h, 2, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = h.api.write_counts();
    h.plugin.take().unwrap().shutdown().await.unwrap();
    let again = builder_for(h.driver.clone(), &h.api, h.dir.path());
    let plugin = fast(again).start().await.unwrap();
    plugin.publish(d).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(h.api.write_counts(), before);
    plugin.shutdown().await.unwrap();
}

/// On a real cluster the garbage collector deletes the slices of a deleted Node at once, and the
/// kubelet re-creates the Node only when it restarts. The publisher meanwhile fails to read the
/// Node and backs off (up to 30 s by default); the Node watch makes it republish as soon as the
/// Node is back, not at the next retry.
#[tokio::test]
async fn fake_apiserver_a_recreated_node_gets_its_slices_without_waiting_for_the_backoff() {
    let h = Harness::start_with(|b| {
        b.retry_backoff(Backoff {
            initial: Duration::from_secs(20),
            max: Duration::from_secs(60),
        })
        .resync_interval(Duration::from_secs(3600))
    })
    .await;
    h.plugin().publish(devices(2)).unwrap();
    converge(&h, 2, 1).await;
    h.api.delete_node(NODE);
    h.api.delete_slice_externally(&format!("{NODE}-{DRIVER}-0"));
    // The publisher sees the slice go, fails to read the Node, and waits 20 s before retrying.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(ours(&h).is_empty());
    let uid = h.api.add_node(NODE);
    assert!(
        eventually(5, || ours(&h).first().is_some_and(|s| s
            .metadata
            .owner_references
            .as_ref()
            .is_some_and(|o| o[0].uid == uid)))
        .await,
        "slices not republished when the Node came back"
    );
}

/// The publisher retries a missing Node and an API outage with backoff; shutdown must not wait
/// for it (a DaemonSet pod is SIGKILLed after its grace period). The default backoff is used: it
/// reaches 30 s, and a sync may wait 60 s for an answer.
async fn shutdown_is_prompt_while(setup: impl FnOnce(&Harness)) {
    let mut h = Harness::start().await;
    setup(&h);
    h.plugin().publish(devices(2)).unwrap();
    // Let the publisher fail a few times and settle into its backoff.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let plugin = h.plugin.take().unwrap();
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(10), plugin.shutdown())
        .await
        .expect("shutdown hung behind the publisher")
        .unwrap();
    // Not a benchmark: minutes (the resync) or 60 s (the sync limit) is the failure, not 1.2 s.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn fake_apiserver_shutdown_is_prompt_while_the_node_is_missing() {
    shutdown_is_prompt_while(|h| h.api.delete_node(NODE)).await;
}

#[tokio::test]
async fn fake_apiserver_shutdown_is_prompt_during_an_api_outage() {
    shutdown_is_prompt_while(|h| h.api.set_down(true)).await;
}

#[tokio::test]
async fn fake_apiserver_a_missing_node_shows_in_the_publish_state() {
    let h = Harness::start_with(fast).await;
    h.api.delete_node(NODE);
    h.plugin().publish(devices(1)).unwrap();
    let mut state = h.plugin().watch_publish_state();
    let s = tokio::time::timeout(
        Duration::from_secs(10),
        state.wait_for(|s| matches!(s, PublishState::Retrying { .. })),
    )
    .await
    .expect("no Retrying state")
    .unwrap()
    .clone();
    let PublishState::Retrying { error, .. } = s else {
        unreachable!()
    };
    assert!(error.contains("Node") && error.contains("404"), "{error}");
    h.api.add_node(NODE);
    assert!(
        eventually(10, || matches!(
            h.plugin().publish_state(),
            PublishState::Published { devices: 1, .. }
        ))
        .await
    );
}

/// A NIC shaped for sharing (`dranet run --share-filter`) keeps its sharing fields on an API
/// server with `DRAConsumableCapacity` (1.36) and loses them on one without (1.34's default): the
/// device is then exclusive, and the dropped fields do not start a rewrite loop.
#[tokio::test]
async fn fake_apiserver_shared_devices_keep_sharing_only_with_consumable_capacity() {
    for gate in [true, false] {
        let h = Harness::start_with(fast).await;
        if gate {
            h.api.enable_feature_gate("DRAConsumableCapacity");
        }
        let mut d = devices(2);
        d[1] = dranet_core::share::shared(d[1].clone(), 4);
        h.plugin().publish(d).unwrap();
        converge(&h, 2, 1).await;
        let stored = ours(&h)[0].spec.devices.clone().unwrap();
        assert_eq!(stored[0].allow_multiple_allocations, None);
        let children = stored[1]
            .capacity
            .as_ref()
            .and_then(|c| c.get(dranet_core::share::CHILDREN));
        if gate {
            assert_eq!(stored[1].allow_multiple_allocations, Some(true));
            assert!(children.is_some_and(|c| c.request_policy.is_some()));
        } else {
            assert_eq!(stored[1].allow_multiple_allocations, None, "gate off");
            assert!(children.is_none_or(|c| c.request_policy.is_none()));
        }
        let settled = h.api.write_counts();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(h.api.write_counts(), settled, "gate {gate}");
    }
}
