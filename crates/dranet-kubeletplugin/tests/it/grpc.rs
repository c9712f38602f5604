//! The kubelet's view: registration and DRAPlugin v1/v1beta1 over real unix sockets, with claims
//! served by the fake API server.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use crate::common::*;
use dranet_kubeletplugin::fake::{FakeApiServer, FakeKubelet};
use dranet_kubeletplugin::proto::dra_health_v1alpha1 as hpb;
use dranet_kubeletplugin::{
    DeviceHealthReport, Error, Health, HealthReporter, KubeletPlugin, Method, Metrics, PrepareState,
};
use futures::StreamExt;

/// Claims are served by the fake API server (`FakeApiServer`); the name says so.
mod fake_apiserver {
    use super::*;

    #[tokio::test]
    async fn registration_advertises_both_dra_versions_and_records_status() {
        let h = Harness::start().await;
        let info = h.kubelet.info();
        assert_eq!(info.r#type, "DRAPlugin");
        assert_eq!(info.name, DRIVER);
        assert_eq!(
            info.endpoint,
            h.dir
                .path()
                .join("plugins")
                .join(DRIVER)
                .join("dra.sock")
                .to_string_lossy()
        );
        assert_eq!(
            info.supported_versions,
            vec!["v1.DRAPlugin", "v1beta1.DRAPlugin"]
        );
        assert_eq!(
            h.plugin().registration_socket(),
            h.dir
                .path()
                .join("plugins_registry")
                .join(format!("{DRIVER}-reg.sock"))
        );
        // The fake kubelet already asked for the info, as the real one does first.
        assert_eq!(
            h.plugin().registration_state(),
            dranet_kubeletplugin::RegistrationState::InfoRequested
        );
        h.kubelet
            .notify_registration(false, "version mismatch")
            .await
            .unwrap();
        let s = h
            .plugin()
            .wait_for_registration(Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(
            s,
            dranet_kubeletplugin::RegistrationState::Refused {
                error: "version mismatch".into()
            }
        );
        h.kubelet.notify_registration(true, "").await.unwrap();
        assert_eq!(
            h.plugin().registration_state(),
            dranet_kubeletplugin::RegistrationState::Registered
        );
    }

    #[tokio::test]
    async fn v1_prepare_and_unprepare_hand_the_driver_only_its_own_results() {
        let h = Harness::start().await;
        h.api.put_claim(claim(
            "c1",
            vec![
                result(DRIVER, "eth1", "nic"),
                result("gpu.other.com", "gpu0", "gpu"),
                result(DRIVER, "eth2", "nic2"),
            ],
        ));
        let resp = h.kubelet.prepare(&[claim_ref("c1")]).await.unwrap();
        let entry = &resp.claims["uid-c1"];
        assert_eq!(entry.error, "");
        let names: Vec<_> = entry
            .devices
            .iter()
            .map(|d| d.device_name.as_str())
            .collect();
        assert_eq!(names, vec!["eth1", "eth2"]);
        assert_eq!(
            entry.devices[0].cdi_device_ids,
            vec![format!("{DRIVER}/net=eth1")]
        );
        assert_eq!(entry.devices[0].request_names, vec!["nic"]);
        assert_eq!(entry.devices[0].pool_name, NODE);
        {
            let rec = h.driver.rec();
            assert_eq!(rec.prepares.len(), 1);
            assert!(rec.prepares[0].results.iter().all(|r| r.driver == DRIVER));
            assert_eq!(
                rec.prepares[0].claim.metadata.uid.as_deref(),
                Some("uid-c1")
            );
        }
        let resp = h.kubelet.unprepare(&[claim_ref("c1")]).await.unwrap();
        assert_eq!(resp.claims["uid-c1"].error, "");
        let rec = h.driver.rec();
        assert_eq!(rec.unprepares.len(), 1);
        match &rec.unprepares[0].1 {
            PrepareState::Prepared(p) => {
                assert_eq!(p.devices.len(), 2);
                assert_eq!(
                    p.state,
                    Some(serde_json::json!({"moved": ["eth1", "eth2"]}))
                );
            }
            other => panic!("expected Prepared, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn v1beta1_prepare_and_unprepare_work_the_same() {
        let h = Harness::start().await;
        h.api
            .put_claim(claim("b1", vec![result(DRIVER, "eth3", "nic")]));
        let resp = h.kubelet.prepare_v1beta1(&[claim_ref("b1")]).await.unwrap();
        assert_eq!(resp.claims["uid-b1"].error, "");
        assert_eq!(resp.claims["uid-b1"].devices[0].device_name, "eth3");
        // The same claim through v1 is the same prepared claim, not a second prepare.
        let v1 = h.kubelet.prepare(&[claim_ref("b1")]).await.unwrap();
        assert_eq!(v1.claims["uid-b1"].devices[0].device_name, "eth3");
        assert_eq!(h.driver.rec().prepares.len(), 1);
        let resp = h
            .kubelet
            .unprepare_v1beta1(&[claim_ref("b1")])
            .await
            .unwrap();
        assert_eq!(resp.claims["uid-b1"].error, "");
        assert_eq!(h.driver.rec().unprepares.len(), 1);
    }

    #[tokio::test]
    async fn many_claims_in_one_call_get_one_entry_each_with_their_own_errors() {
        let h = Harness::start().await;
        for i in 0..20 {
            h.api.put_claim(claim(
                &format!("ok{i}"),
                vec![result(DRIVER, &format!("eth{i}"), "nic")],
            ));
        }
        // Not allocated.
        let mut unalloc = claim("unalloc", vec![]);
        unalloc.status = None;
        h.api.put_claim(unalloc);
        // Replaced: same name, new UID.
        let mut replaced = claim("replaced", vec![result(DRIVER, "eth30", "nic")]);
        replaced.metadata.uid = Some("uid-new".into());
        h.api.put_claim(replaced);
        // The driver fails on this one.
        h.api
            .put_claim(claim("busy", vec![result(DRIVER, "eth31", "nic")]));
        h.driver.rec().fail_prepare.insert("busy".into());

        let mut refs: Vec<_> = (0..20).map(|i| claim_ref(&format!("ok{i}"))).collect();
        for n in ["unalloc", "replaced", "busy", "missing"] {
            refs.push(claim_ref(n));
        }
        refs.push(dranet_kubeletplugin::ClaimRef {
            namespace: "default".into(),
            name: "".into(),
            uid: "uid-noname".into(),
        });
        let resp = h.kubelet.prepare(&refs).await.unwrap();
        assert_eq!(resp.claims.len(), 25);
        for i in 0..20 {
            let e = &resp.claims[&format!("uid-ok{i}")];
            assert_eq!(e.error, "", "ok{i}");
            assert_eq!(e.devices[0].device_name, format!("eth{i}"));
        }
        assert_eq!(
            resp.claims["uid-unalloc"].error,
            "claim default/unalloc not allocated"
        );
        assert!(
            resp.claims["uid-replaced"]
                .error
                .starts_with("claim default/replaced got replaced"),
            "{}",
            resp.claims["uid-replaced"].error
        );
        assert_eq!(
            resp.claims["uid-busy"].error,
            "prepare claim default/busy: netdev eth9 is busy"
        );
        let missing = &resp.claims["uid-missing"].error;
        assert!(
            missing.contains("get ResourceClaim default/missing") && missing.contains("404"),
            "{missing}"
        );
        assert!(
            resp.claims["uid-noname"].error.contains("empty name"),
            "{}",
            resp.claims["uid-noname"].error
        );
        for bad in ["unalloc", "replaced", "busy", "missing"] {
            assert!(resp.claims[&format!("uid-{bad}")].devices.is_empty());
        }

        // A failed prepare was started, so its unprepare reaches the driver as interrupted; a claim
        // that never got to the driver needs no cleanup.
        let resp = h
            .kubelet
            .unprepare(&[claim_ref("busy"), claim_ref("unalloc")])
            .await
            .unwrap();
        assert_eq!(resp.claims["uid-busy"].error, "");
        assert_eq!(resp.claims["uid-unalloc"].error, "");
        let rec = h.driver.rec();
        assert_eq!(rec.unprepares.len(), 1);
        assert_eq!(rec.unprepares[0].0.name, "busy");
        assert_eq!(rec.unprepares[0].1, PrepareState::Interrupted);
    }

    #[tokio::test]
    async fn unprepare_errors_are_per_claim_and_keep_the_record() {
        let h = Harness::start().await;
        h.api
            .put_claim(claim("u1", vec![result(DRIVER, "eth1", "nic")]));
        h.api
            .put_claim(claim("u2", vec![result(DRIVER, "eth2", "nic")]));
        h.kubelet
            .prepare(&[claim_ref("u1"), claim_ref("u2")])
            .await
            .unwrap();
        h.driver.rec().fail_unprepare.insert("u1".into());
        let resp = h
            .kubelet
            .unprepare(&[claim_ref("u1"), claim_ref("u2")])
            .await
            .unwrap();
        assert_eq!(
            resp.claims["uid-u1"].error,
            "unprepare claim default/u1: cannot move netdev back"
        );
        assert_eq!(resp.claims["uid-u2"].error, "");
        // The kubelet retries; the record is still there, so the driver gets what prepare returned.
        h.driver.rec().fail_unprepare.clear();
        let resp = h.kubelet.unprepare(&[claim_ref("u1")]).await.unwrap();
        assert_eq!(resp.claims["uid-u1"].error, "");
        let rec = h.driver.rec();
        assert!(matches!(
            rec.unprepares.last().unwrap().1,
            PrepareState::Prepared(_)
        ));
    }

    #[tokio::test]
    async fn retries_are_idempotent() {
        let h = Harness::start().await;
        h.api
            .put_claim(claim("i1", vec![result(DRIVER, "eth1", "nic")]));
        let first = h.kubelet.prepare(&[claim_ref("i1")]).await.unwrap();
        // Even with the API server down, a retried prepare answers the same from the checkpoint.
        h.api.set_down(true);
        let second = h.kubelet.prepare(&[claim_ref("i1")]).await.unwrap();
        assert_eq!(first, second);
        assert_eq!(h.driver.rec().prepares.len(), 1);
        h.api.set_down(false);
        for _ in 0..2 {
            let resp = h.kubelet.unprepare(&[claim_ref("i1")]).await.unwrap();
            assert_eq!(resp.claims["uid-i1"].error, "");
        }
        assert_eq!(
            h.driver.rec().unprepares.len(),
            1,
            "the second unprepare has nothing to undo"
        );
        // Prepared again after unprepare: a new prepare.
        h.kubelet.prepare(&[claim_ref("i1")]).await.unwrap();
        assert_eq!(h.driver.rec().prepares.len(), 2);
    }

    #[tokio::test]
    async fn concurrent_calls_for_one_claim_are_serialized_and_prepare_once() {
        let h = Harness::start().await;
        h.driver.rec().delay = Duration::from_millis(50);
        h.api.set_claim_delay(Duration::from_millis(20));
        for i in 0..4 {
            h.api.put_claim(claim(
                &format!("k{i}"),
                vec![result(DRIVER, &format!("eth{i}"), "nic")],
            ));
        }
        let refs: Vec<_> = (0..4).map(|i| claim_ref(&format!("k{i}"))).collect();
        let calls = (0..6).map(|_| {
            let k = h.kubelet.clone();
            let refs = refs.clone();
            tokio::spawn(async move { k.prepare(&refs).await.unwrap() })
        });
        let results = futures::future::join_all(calls).await;
        for r in results {
            let r = r.unwrap();
            assert_eq!(r.claims.len(), 4);
            assert!(
                r.claims
                    .values()
                    .all(|e| e.error.is_empty() && e.devices.len() == 1)
            );
        }
        let rec = h.driver.rec();
        assert!(!rec.overlap, "two calls for one claim ran at once");
        assert_eq!(rec.prepares.len(), 4, "each claim prepared exactly once");
    }

    #[tokio::test]
    async fn different_claims_are_prepared_in_parallel() {
        let h = Harness::start().await;
        h.driver.rec().delay = Duration::from_millis(300);
        for i in 0..8 {
            h.api.put_claim(claim(
                &format!("p{i}"),
                vec![result(DRIVER, &format!("eth{i}"), "nic")],
            ));
        }
        let refs: Vec<_> = (0..8).map(|i| claim_ref(&format!("p{i}"))).collect();
        let resp = h.kubelet.prepare(&refs).await.unwrap();
        assert!(resp.claims.values().all(|e| e.error.is_empty()));
        // One slow claim must not hold up the others of the pod: the driver saw them side by side.
        assert!(
            h.driver.rec().max_parallel > 1,
            "claims were prepared one by one"
        );
    }

    #[tokio::test]
    async fn a_call_the_kubelet_abandons_still_finishes_and_the_retry_gets_its_answer() {
        let h = Harness::start().await;
        h.driver.rec().delay = Duration::from_millis(800);
        h.api
            .put_claim(claim("c9", vec![result(DRIVER, "eth9", "nic")]));
        // The kubelet's deadline passes while the driver is busy: the client drops the call.
        let abandoned = tokio::time::timeout(
            Duration::from_millis(100),
            h.kubelet.prepare(&[claim_ref("c9")]),
        )
        .await;
        assert!(abandoned.is_err(), "the call was meant to be abandoned");
        // The driver was not cut off half way: it finishes and its result is recorded.
        let driver = h.driver.clone();
        assert!(
            eventually(10, || driver.rec().prepares.len() == 1).await,
            "the driver's prepare was cancelled with the call"
        );
        h.driver.rec().delay = Duration::ZERO;
        let resp = h.kubelet.prepare(&[claim_ref("c9")]).await.unwrap();
        assert_eq!(resp.claims["uid-c9"].devices[0].device_name, "eth9");
        assert_eq!(h.driver.rec().prepares.len(), 1, "prepared twice");
    }

    #[tokio::test]
    async fn a_hung_api_server_fails_the_claim_in_time_for_the_kubelet_to_retry() {
        let h = Harness::start_with(|b| b.claim_lookup_timeout(Duration::from_millis(200))).await;
        h.api
            .put_claim(claim("slowapi", vec![result(DRIVER, "eth1", "nic")]));
        h.api.set_claim_delay(Duration::from_secs(5));
        let resp = h.kubelet.prepare(&[claim_ref("slowapi")]).await.unwrap();
        let err = &resp.claims["uid-slowapi"].error;
        assert!(
            err.contains("get ResourceClaim default/slowapi")
                && err.contains("no answer within 200ms"),
            "{err}"
        );
        assert!(h.driver.rec().prepares.is_empty());
        // Once the API server answers again, the retry works.
        h.api.set_claim_delay(Duration::ZERO);
        let resp = h.kubelet.prepare(&[claim_ref("slowapi")]).await.unwrap();
        assert_eq!(resp.claims["uid-slowapi"].error, "");
    }

    #[tokio::test]
    async fn a_panicking_driver_fails_only_that_claim_and_unprepare_still_reaches_it() {
        let h = Harness::start().await;
        h.api
            .put_claim(claim("boom", vec![result(DRIVER, "eth1", "nic")]));
        h.api
            .put_claim(claim("fine", vec![result(DRIVER, "eth2", "nic")]));
        h.driver.rec().panic_prepare.insert("boom".into());
        let resp = h
            .kubelet
            .prepare(&[claim_ref("boom"), claim_ref("fine")])
            .await
            .unwrap();
        assert_eq!(
            resp.claims["uid-boom"].error,
            "prepare claim default/boom: the driver panicked"
        );
        assert_eq!(resp.claims["uid-fine"].error, "");
        // The plugin still serves, and the half-prepared claim is cleaned up on unprepare.
        let resp = h.kubelet.unprepare(&[claim_ref("boom")]).await.unwrap();
        assert_eq!(resp.claims["uid-boom"].error, "");
        assert_eq!(h.driver.rec().unprepares[0].1, PrepareState::Interrupted);
    }

    #[tokio::test]
    async fn shutdown_deregisters_first_and_finishes_calls_in_flight() {
        let mut h = Harness::start().await;
        // Long enough that the checks below run while the driver is still inside prepare.
        h.driver.rec().delay = Duration::from_secs(2);
        h.api
            .put_claim(claim("slow", vec![result(DRIVER, "eth1", "nic")]));
        let kubelet = h.kubelet.clone();
        let call = tokio::spawn(async move { kubelet.prepare(&[claim_ref("slow")]).await });
        let driver = h.driver.clone();
        assert!(eventually(10, || driver.rec().max_parallel == 1).await);
        let reg = h.plugin().registration_socket().to_path_buf();
        let dra = h.plugin().dra_socket().to_path_buf();
        let stopping = tokio::spawn(h.plugin.take().unwrap().shutdown());
        // The kubelet learns of the end (registration socket gone) while the call is still running.
        assert!(eventually(10, || !reg.exists()).await);
        assert!(
            h.driver.rec().prepares.is_empty(),
            "the driver call already finished"
        );
        let resp = call.await.unwrap().unwrap();
        assert_eq!(resp.claims["uid-slow"].error, "");
        stopping.await.unwrap().unwrap();
        assert!(!dra.exists());
    }

    #[derive(Default)]
    struct CountingMetrics {
        prepare: AtomicUsize,
        failed: AtomicUsize,
        lookups: AtomicUsize,
        checkpoint: AtomicUsize,
    }

    impl Metrics for CountingMetrics {
        fn grpc_request(
            &self,
            method: Method,
            _api: &'static str,
            claims: usize,
            failed: usize,
            _e: Duration,
        ) {
            if method == Method::Prepare {
                self.prepare.fetch_add(claims, Ordering::SeqCst);
                self.failed.fetch_add(failed, Ordering::SeqCst);
            }
        }
        fn claim_lookup(&self, _ok: bool, _e: Duration) {
            self.lookups.fetch_add(1, Ordering::SeqCst);
        }
        fn checkpoint_write(&self, ok: bool, _e: Duration) {
            assert!(ok);
            self.checkpoint.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn metrics_hooks_see_requests_lookups_and_checkpoint_writes() {
        let m = Arc::new(CountingMetrics::default());
        let mm: Arc<dyn Metrics> = m.clone();
        let h = Harness::start_with(|b| b.metrics(mm)).await;
        h.api
            .put_claim(claim("m1", vec![result(DRIVER, "eth1", "nic")]));
        h.kubelet
            .prepare(&[claim_ref("m1"), claim_ref("nope")])
            .await
            .unwrap();
        assert_eq!(m.prepare.load(Ordering::SeqCst), 2);
        assert_eq!(m.failed.load(Ordering::SeqCst), 1);
        assert_eq!(m.lookups.load(Ordering::SeqCst), 2);
        // Preparing, then prepared.
        assert_eq!(m.checkpoint.load(Ordering::SeqCst), 2);
    }

    async fn with_health() -> (HealthReporter, Harness) {
        let reporter = HealthReporter::new();
        let r = reporter.clone();
        (reporter, Harness::start_with(move |b| b.health(r)).await)
    }

    async fn health_stream(h: &Harness) -> tonic::Streaming<hpb::NodeWatchResourcesResponse> {
        h.kubelet
            .health_v1alpha1()
            .node_watch_resources(hpb::NodeWatchResourcesRequest {})
            .await
            .unwrap()
            .into_inner()
    }

    #[tokio::test]
    async fn health_is_advertised_and_streamed_when_reported() {
        let (reporter, h) = with_health().await;
        assert_eq!(
            h.kubelet.info().supported_versions,
            vec![
                "v1.DRAPlugin",
                "v1beta1.DRAPlugin",
                "v1.DRAResourceHealth",
                "v1alpha1.DRAResourceHealth"
            ]
        );
        let mut stream = health_stream(&h).await;
        let first = stream.next().await.unwrap().unwrap();
        assert!(first.devices.is_empty());
        reporter.set(vec![DeviceHealthReport {
            pool: NODE.into(),
            device: "eth1".into(),
            health: Health::Unhealthy,
            message: "link down".into(),
            checked_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            valid_for: Some(Duration::from_secs(60)),
        }]);
        let next = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let d = &next.devices[0];
        assert_eq!(d.device.as_ref().unwrap().device_name, "eth1");
        assert_eq!(d.health, hpb::HealthStatus::Unhealthy as i32);
        assert_eq!(d.last_updated_time, 1_700_000_000);
        assert_eq!(d.health_check_timeout_seconds, 60);
        assert_eq!(d.message, "link down");

        // The v1 service streams the same reports, current state first.
        let mut v1 = h
            .kubelet
            .health_v1()
            .node_watch_resources(
                dranet_kubeletplugin::proto::dra_health_v1::NodeWatchResourcesRequest {},
            )
            .await
            .unwrap()
            .into_inner();
        let now = v1.next().await.unwrap().unwrap();
        assert_eq!(now.devices.len(), 1);
        assert_eq!(
            now.devices[0].health,
            dranet_kubeletplugin::proto::dra_health_v1::HealthStatus::Unhealthy as i32
        );
    }

    #[tokio::test]
    async fn without_a_reporter_health_is_not_advertised_but_answers_empty() {
        let h = Harness::start().await;
        assert_eq!(
            h.kubelet.info().supported_versions,
            vec!["v1.DRAPlugin", "v1beta1.DRAPlugin"]
        );
        // A kubelet that watches anyway gets an empty report, not an "unimplemented" error...
        let mut stream = health_stream(&h).await;
        let first = stream.next().await.unwrap().unwrap();
        assert!(first.devices.is_empty());
        // ...and the stream stays open: an ended stream makes the kubelet reopen it every 5 s
        // and log two lines each time.
        let next = tokio::time::timeout(Duration::from_millis(500), stream.next()).await;
        assert!(next.is_err(), "health stream ended early: {next:?}");
    }

    #[tokio::test]
    async fn shutdown_ends_open_health_streams() {
        let (_reporter, mut h) = with_health().await;
        let mut stream = health_stream(&h).await;
        assert!(stream.next().await.unwrap().is_ok());
        let reg = h.plugin().registration_socket().to_path_buf();
        // A kubelet that keeps watching must not keep the plugin from stopping. The timeout only
        // turns a hang into a failure; it measures nothing.
        let plugin = h.plugin.take().unwrap();
        tokio::time::timeout(Duration::from_secs(30), plugin.shutdown())
            .await
            .expect("shutdown hung on an open health stream")
            .unwrap();
        assert!(!reg.exists());
        let end = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("health stream still open after shutdown");
        assert!(!matches!(end, Some(Ok(_))), "{end:?}");
    }

    #[tokio::test]
    async fn shutdown_removes_both_sockets_and_stale_ones_are_replaced() {
        let mut h = Harness::start().await;
        let dra = h.plugin().dra_socket().to_path_buf();
        let reg = h.plugin().registration_socket().to_path_buf();
        assert!(dra.exists() && reg.exists());
        // A second instance must not steal live sockets.
        let second = builder_for(RecordingDriver::default(), &h.api, h.dir.path())
            .checkpoint_path(h.dir.path().join("other-checkpoint"))
            .start()
            .await;
        assert!(
            matches!(second, Err(Error::SocketInUse { .. })),
            "{second:?}"
        );
        h.plugin.take().unwrap().shutdown().await.unwrap();
        assert!(!dra.exists(), "DRA socket left behind");
        assert!(!reg.exists(), "registration socket left behind");

        // Sockets left by a crash: files nobody listens on.
        for p in [&dra, &reg] {
            drop(std::os::unix::net::UnixListener::bind(p).unwrap());
            assert!(p.exists());
        }
        let api = FakeApiServer::start().await.unwrap();
        let plugin = builder_for(RecordingDriver::default(), &api, h.dir.path())
            .start()
            .await
            .unwrap();
        let kubelet = FakeKubelet::connect(&reg).await.unwrap();
        assert_eq!(kubelet.info().name, DRIVER);
        plugin.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn bad_configuration_is_a_clear_error() {
        let api = FakeApiServer::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let e = KubeletPlugin::builder(
            RecordingDriver::default(),
            api.client().unwrap().field_manager("x"),
        )
        .driver_name("Bad_Driver")
        .node_name(NODE)
        .kubelet_root_dir(dir.path())
        .start()
        .await
        .unwrap_err();
        assert!(e.to_string().contains("driver name \"Bad_Driver\""), "{e}");
        let e = KubeletPlugin::builder(
            RecordingDriver::default(),
            api.client().unwrap().field_manager("x"),
        )
        .driver_name(DRIVER)
        .node_name(NODE)
        .kubelet_root_dir(dir.path())
        .max_devices_per_slice(500)
        .start()
        .await
        .unwrap_err();
        assert!(e.to_string().contains("500"), "{e}");
    }

    #[tokio::test]
    async fn corrupt_checkpoint_refuses_start_and_quarantine_starts_empty() {
        let dir = tempfile::tempdir().unwrap();
        let cp = dir.path().join("plugins").join(DRIVER).join("checkpoint");
        std::fs::create_dir_all(cp.parent().unwrap()).unwrap();
        std::fs::write(
            &cp,
            "dranet-kubeletplugin-checkpoint v1 crc32=00000000 len=2\n{}",
        )
        .unwrap();
        let api = FakeApiServer::start().await.unwrap();
        let e = builder_for(RecordingDriver::default(), &api, dir.path())
            .start()
            .await
            .unwrap_err();
        assert!(matches!(e, Error::CheckpointCorrupt { .. }), "{e}");
        assert!(e.to_string().contains("checksum mismatch"), "{e}");

        let driver = RecordingDriver::default();
        let plugin =
            KubeletPlugin::builder(driver.clone(), api.client().unwrap().field_manager(DRIVER))
                .driver_name(DRIVER)
                .node_name(NODE)
                .kubelet_root_dir(dir.path())
                .checkpoint_policy(dranet_kubeletplugin::CheckpointPolicy::Quarantine)
                .start()
                .await
                .unwrap();
        assert!(matches!(
            plugin.checkpoint_outcome(),
            dranet_kubeletplugin::LoadOutcome::Quarantined { .. }
        ));
        // Nothing is known, so unprepare asks the driver to clean up whatever it finds.
        let k = FakeKubelet::connect(plugin.registration_socket())
            .await
            .unwrap();
        let resp = k.unprepare(&[claim_ref("lost")]).await.unwrap();
        assert_eq!(resp.claims["uid-lost"].error, "");
        assert_eq!(driver.rec().unprepares[0].1, PrepareState::Unknown);
        plugin.shutdown().await.unwrap();
    }
}
